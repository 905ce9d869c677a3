"""PluginRegistry: registration errors, in-tree discovery, entry points; the public API."""

from __future__ import annotations

import importlib
import sys
import textwrap
from collections.abc import Callable, Iterator
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import pytest

import gpusched.framework
from gpusched.framework import (
    SUCCESS,
    CycleState,
    DuplicatePluginError,
    FilterPlugin,
    Plugin,
    PluginRegistry,
    RegistryError,
    Status,
    UnknownPluginError,
    in_tree,
)
from gpusched.framework import registry as registry_module


class Fit(FilterPlugin):
    NAME = "Fit"

    def filter(self, state: CycleState, pod: Any, node_info: Any) -> Status:
        return SUCCESS


class Taints(FilterPlugin):
    NAME = "Taints"

    def filter(self, state: CycleState, pod: Any, node_info: Any) -> Status:
        return SUCCESS


def test_register_and_look_up() -> None:
    registry = PluginRegistry()
    entry = registry.register(Fit)
    assert entry.name == "Fit"
    assert entry.factory == Fit.new
    assert entry.origin == f"{Fit.__module__}.Fit"
    assert "Fit" in registry
    assert registry["Fit"] is entry
    assert list(registry) == ["Fit"]
    assert len(registry) == 1


def test_register_a_factory() -> None:
    registry = PluginRegistry()
    registry.register("Custom", lambda args, handle: Fit(), origin="test")
    assert registry["Custom"].args_model is None
    with pytest.raises(TypeError, match="needs a factory"):
        registry.register("NoFactory")


def test_duplicate_names_are_an_error() -> None:
    registry = PluginRegistry()
    registry.register(Fit)
    with pytest.raises(DuplicatePluginError) as info:
        registry.register("Fit", lambda args, handle: Fit(), origin="my_pkg.other:Fit")
    assert str(info.value) == (
        f"plugin 'Fit' is registered twice: by {Fit.__module__}.Fit and by my_pkg.other:Fit; "
        "rename one of them"
    )
    with pytest.raises(DuplicatePluginError):
        registry.merged(registry.values())


def test_unknown_names_list_the_known_ones() -> None:
    registry = PluginRegistry()
    registry.register(Taints)
    registry.register(Fit)
    with pytest.raises(KeyError) as info:
        registry["GPUFit"]
    assert isinstance(info.value, UnknownPluginError)
    assert str(info.value) == "unknown plugin 'GPUFit'; known plugins: Fit, Taints"
    assert registry.get("GPUFit") is None
    assert str(PluginRegistry().unknown_message("X")) == (
        "unknown plugin 'X'; known plugins: none (the registry is empty)"
    )


def test_what_cannot_be_registered() -> None:
    class NoName(FilterPlugin):
        def filter(self, state: CycleState, pod: Any, node_info: Any) -> Status:
            return SUCCESS

    class Abstract(FilterPlugin):
        NAME = "Abstract"

    class BadName(Fit):
        NAME = "bad name"

    registry = PluginRegistry()
    with pytest.raises(RegistryError, match=r"NoName has no NAME: give it a class attribute"):
        registry.register(NoName)
    with pytest.raises(RegistryError, match=r"'Abstract' .* does not implement filter"):
        registry.register(Abstract)
    with pytest.raises(RegistryError, match=r"invalid plugin name 'bad name'"):
        registry.register(BadName)
    with pytest.raises(TypeError):
        registry.register(object)  # type: ignore[arg-type]


# -- discovery -------------------------------------------------------------------------------


@pytest.fixture
def make_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., str]]:
    """Write a package of modules to a temporary path and make it importable."""
    monkeypatch.syspath_prepend(str(tmp_path))
    created: list[str] = []

    def make(name: str, **modules: str) -> str:
        package = tmp_path / name
        package.mkdir()
        (package / "__init__.py").write_text("")
        for module, source in modules.items():
            (package / f"{module}.py").write_text(textwrap.dedent(source))
        created.append(name)
        importlib.invalidate_caches()
        return name

    yield make
    for name in created:
        for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            del sys.modules[module]


GANG = """\
    from gpusched.framework import SUCCESS, PermitPlugin, Status
    from gpusched.framework import FilterPlugin  # imported: not this module's plugin


    class _Base(PermitPlugin):
        '''An abstract helper base: skipped.'''


    class Gang(_Base):
        NAME = "Gang"

        def permit(self, state, pod, node_name):
            return SUCCESS, 0.0
    """


def test_in_tree_discovers_the_concrete_plugins_of_each_module(
    make_package: Callable[..., str],
) -> None:
    package = make_package(
        "discover_ok",
        gang=GANG,
        _helpers="raise RuntimeError('private modules are not imported')\n",
        util="VALUE = 1\n",
    )
    registry = in_tree(package)
    assert registry.names() == ["Gang"]
    assert registry["Gang"].origin == "discover_ok.gang.Gang"


def test_in_tree_reports_a_broken_module(make_package: Callable[..., str]) -> None:
    package = make_package("discover_broken", broken="import no_such_module_here\n")
    with pytest.raises(RegistryError) as info:
        in_tree(package)
    assert str(info.value) == (
        "cannot import in-tree plugin module discover_broken.broken: ModuleNotFoundError: "
        "No module named 'no_such_module_here'"
    )


def test_the_built_in_registry_loads() -> None:
    registry = in_tree()
    assert all(e.origin.startswith("gpusched.plugins.") for e in registry.values())


def test_entry_points(make_package: Callable[..., str], monkeypatch: pytest.MonkeyPatch) -> None:
    package = make_package(
        "third_party",
        plugins=textwrap.dedent(GANG)
        + textwrap.dedent(
            """\

            def make_fit(args, handle):
                return Gang()
            """
        ),
    )
    points = [
        EntryPoint("Gang", f"{package}.plugins:Gang", "gpusched.plugins"),
        EntryPoint("GangFactory", f"{package}.plugins:make_fit", "gpusched.plugins"),
    ]
    monkeypatch.setattr(registry_module.metadata, "entry_points", lambda group: points)
    base = PluginRegistry()
    base.register(Fit)
    registry = base.with_entry_points()
    assert registry.names() == ["Fit", "Gang", "GangFactory"]
    assert base.names() == ["Fit"]  # with_entry_points returns a new registry
    assert registry["Gang"].origin == (
        "entry point Gang = third_party.plugins:Gang (group gpusched.plugins)"
    )


@pytest.mark.parametrize(
    ("value", "name", "message"),
    [
        (
            "plugins:Gang",
            "Gangs",
            "entry point Gangs = {pkg}.plugins:Gang (group gpusched.plugins): the entry point's "
            "name must be the plugin's NAME ('Gang')",
        ),
        (
            "plugins:Missing",
            "Missing",
            "cannot load entry point Missing = {pkg}.plugins:Missing (group gpusched.plugins): "
            "AttributeError: module '{pkg}.plugins' has no attribute 'Missing'",
        ),
        (
            "plugins:SUCCESS",
            "Thing",
            "entry point Thing = {pkg}.plugins:SUCCESS (group gpusched.plugins): "
            "Status(code=<Code.SUCCESS: 0>, reasons=(), plugin='', exception=None, "
            "quiet=False) is neither a Plugin class nor a factory",
        ),
        (
            "plugins:Gang",
            "Gang",
            "plugin 'Gang' is registered twice: by in-tree and by entry point Gang = "
            "{pkg}.plugins:Gang (group gpusched.plugins); rename one of them",
        ),
    ],
)
def test_bad_entry_points(
    make_package: Callable[..., str],
    monkeypatch: pytest.MonkeyPatch,
    value: str,
    name: str,
    message: str,
) -> None:
    package = make_package(f"bad_ep_{name.lower()}", plugins=GANG)
    points = [EntryPoint(name, f"{package}.{value}", "gpusched.plugins")]
    monkeypatch.setattr(registry_module.metadata, "entry_points", lambda group: points)
    base = PluginRegistry()
    base.register("Gang", lambda args, handle: Fit(), origin="in-tree")
    with pytest.raises(RegistryError) as info:
        base.with_entry_points()
    assert str(info.value) == message.format(pkg=package)


# -- the public API --------------------------------------------------------------------------

MODULES = ["status", "cycle_state", "interfaces", "config", "registry", "runtime"]


@pytest.mark.parametrize("name", MODULES)
def test_all_is_complete(name: str) -> None:
    """``__all__`` names exist, and every public class or function defined here is in it."""
    module = importlib.import_module(f"gpusched.framework.{name}")
    exported = set(module.__all__)
    assert all(hasattr(module, n) for n in exported)
    defined = {
        n
        for n, v in vars(module).items()
        if not n.startswith("_")
        and getattr(v, "__module__", None) == module.__name__
        and (isinstance(v, type) or callable(v))
    }
    assert defined <= exported, f"missing from {name}.__all__: {sorted(defined - exported)}"


def test_package_reexports() -> None:
    package = gpusched.framework
    assert all(hasattr(package, n) for n in package.__all__)
    assert len(set(package.__all__)) == len(package.__all__)
    points = {"PreEnqueue", "QueueSort", "PreFilter", "Filter", "PostFilter", "PreScore"}
    points |= {"Score", "Reserve", "Permit", "PreBind", "Bind", "PostBind"}
    assert all(issubclass(getattr(package, f"{p}Plugin"), Plugin) for p in points)


def test_a_broken_installed_plugin_names_its_distribution(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An installed package (a ``.dist-info`` on the path) whose entry point does not import:
    the error names the distribution, its version and the entry point."""
    info = tmp_path / "broken_gpu_plugin-0.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-gpu-plugin\nVersion: 0.3\n")
    (info / "entry_points.txt").write_text("[gpusched.plugins]\nBroken = no_such_module:Broken\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(RegistryError) as caught:
        PluginRegistry().with_entry_points()
    assert str(caught.value) == (
        "cannot load entry point Broken = no_such_module:Broken (group gpusched.plugins, "
        "distribution broken-gpu-plugin 0.3): ModuleNotFoundError: No module named "
        "'no_such_module'"
    )
