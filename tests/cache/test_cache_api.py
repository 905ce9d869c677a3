"""The public API of gpusched.cache: complete ``__all__``, documented modules."""

from __future__ import annotations

import importlib
import inspect

import pytest

import gpusched.cache

MODULES = [
    "gpusched.cache",
    "gpusched.cache.cache",
    "gpusched.cache.errors",
    "gpusched.cache.ledger",
    "gpusched.cache.nodeinfo",
    "gpusched.cache.nominations",
    "gpusched.cache.resources",
    "gpusched.cache.snapshot",
]


@pytest.mark.parametrize("name", MODULES)
def test_module_all_is_complete_and_documented(name: str) -> None:
    module = importlib.import_module(name)
    assert module.__doc__
    assert len(module.__doc__.strip()) > 200, "the module docstring explains the design"
    exported = set(module.__all__)
    for symbol in exported:
        assert hasattr(module, symbol), f"{name}.__all__ names missing {symbol}"
    defined = {
        key
        for key, value in vars(module).items()
        if not key.startswith("_")
        and (inspect.isclass(value) or inspect.isfunction(value))
        and value.__module__ == name
    }
    assert defined <= exported, f"{name} defines but does not export {defined - exported}"


def test_package_exports_every_public_name() -> None:
    for name in MODULES[1:]:
        module = importlib.import_module(name)
        for symbol in module.__all__:
            assert symbol in gpusched.cache.__all__, f"gpusched.cache does not export {symbol}"
            assert getattr(gpusched.cache, symbol) is getattr(module, symbol)
