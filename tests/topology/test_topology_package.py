"""The gpusched.topology package: its public API, and that it stays pure.

``__all__`` of the package is the union of its modules' ``__all__``, and each module's lists
every public class and function it defines.

topology/ imports the standard library, networkx and itself, nothing from Kubernetes or the
rest of gpusched. Checked twice: statically, over every ``import`` in every module's source
(so an import inside a function or under ``TYPE_CHECKING`` counts too), and at run time, in a
fresh interpreter that imports the package and every module in it.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import gpusched.topology as topology

PACKAGE = topology.__name__  # "gpusched.topology"
ALLOWED_ROOTS = set(sys.stdlib_module_names) | {"__future__", "networkx"}
FORBIDDEN = ("gpusched.inventory", "gpusched.cache", "gpusched.kube", "kubernetes_asyncio")
"""Named in the layout topology/ is asked for; the allowlist above already excludes them."""

MODULES = sorted(f"{PACKAGE}.{m.name}" for m in pkgutil.iter_modules(topology.__path__))


def imported_names(module_name: str) -> set[str]:
    """Every module ``module_name``'s source imports, relative imports resolved."""
    module = importlib.import_module(module_name)
    assert module.__file__ is not None
    tree = ast.parse(Path(module.__file__).read_text(), filename=module.__file__)
    package = module.__package__ or ""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = importlib.util.resolve_name("." * node.level + (node.module or ""), package)
            else:
                base = node.module or ""
            names.add(base)
            # `from . import graph` imports a module too
            names.update(f"{base}.{alias.name}" for alias in node.names if not node.module)
    return names


def test_every_module_is_checked() -> None:
    assert {"gpusched.topology.graph", "gpusched.topology.selection"} <= set(MODULES)


@pytest.mark.parametrize("module_name", [PACKAGE, *MODULES])
def test_imports_only_the_standard_library_networkx_and_itself(module_name: str) -> None:
    names = imported_names(module_name)
    assert names, module_name
    for name in names:
        assert not name.startswith(FORBIDDEN), f"{module_name} imports {name}"
        inside = name == PACKAGE or name.startswith(PACKAGE + ".")
        assert inside or name.split(".")[0] in ALLOWED_ROOTS, f"{module_name} imports {name}"


def test_importing_topology_loads_nothing_from_kubernetes_or_the_core() -> None:
    code = (
        "import importlib, sys\n"
        f"for name in {[PACKAGE, *MODULES]!r}:\n"
        "    importlib.import_module(name)\n"
        "print('\\n'.join(sorted(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    loaded_from_gpusched = {m for m in out if m == "gpusched" or m.startswith("gpusched.")}
    assert loaded_from_gpusched == {"gpusched", PACKAGE, *MODULES}
    assert not [m for m in out if m.startswith(FORBIDDEN) or m.startswith("kubernetes")]
    assert "pydantic" not in out


# -- the public API ----------------------------------------------------------------------------


@pytest.mark.parametrize("module_name", MODULES)
def test_module_all_is_complete(module_name: str) -> None:
    module = importlib.import_module(module_name)
    exported = set(module.__all__)
    assert len(exported) == len(module.__all__)
    assert all(hasattr(module, name) for name in exported)
    defined = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and getattr(value, "__module__", None) == module_name
        and (isinstance(value, type) or callable(value))
    }
    assert defined <= exported, f"missing from {module_name}.__all__: {defined - exported}"


def test_package_all_re_exports_every_module() -> None:
    union = set().union(*(importlib.import_module(m).__all__ for m in MODULES))
    assert set(topology.__all__) == union
    assert len(set(topology.__all__)) == len(topology.__all__)
    assert all(getattr(topology, name) is not None for name in topology.__all__)
    public = {
        name
        for name, value in vars(topology).items()
        if not name.startswith("_") and not inspect.ismodule(value)
    }
    assert public == union  # nothing public that __all__ leaves out
