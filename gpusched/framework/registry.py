"""``PluginRegistry``: plugin names to factories.

Upstream: pkg/scheduler/framework/runtime/registry.go.

A factory is ``factory(args, handle) -> Plugin``: ``args`` is the plugin's validated args model
(or a dict when it declares none) and ``handle`` the framework building it. Registering a plugin
class registers ``cls.new`` under ``cls.NAME`` with ``cls.ARGS`` as its args model.

Where plugins come from:

- ``in_tree()``: every concrete ``Plugin`` subclass defined in a module of ``gpusched.plugins``
  (the repository's ``plugins/`` folder, one file per plugin). Upstream lists its in-tree plugins
  by hand; gpusched discovers them, so that adding a built-in plugin is one file and one line of
  configuration, and a plugin that is written but not registered cannot happen. Modules whose
  names start with ``_`` are skipped (helpers).
- ``with_entry_points(group="gpusched.plugins")``: third-party packages declare
  ``[project.entry-points."gpusched.plugins"] MyPlugin = "my_pkg.my_plugin:MyPlugin"`` (a
  plugin class, whose ``NAME`` must equal the entry point's name, or any factory callable).
  A broken one (it does not import, or is not a plugin) is a ``RegistryError`` naming the
  distribution and the entry point.
- ``default_registry()``: both, loaded once per process; what the scheduler and the CLI use
  when no registry is given.

A name registered twice is a ``DuplicatePluginError``; looking up a name that is not registered
is an ``UnknownPluginError`` (a ``KeyError``) listing the names that are.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from importlib import metadata
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeAlias

from .interfaces import Handle, Plugin

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = [
    "DuplicatePluginError",
    "PluginFactory",
    "PluginRegistry",
    "RegistryEntry",
    "RegistryError",
    "UnknownPluginError",
    "default_registry",
    "in_tree",
    "plugin_classes",
]

PluginFactory: TypeAlias = Callable[[Any, Handle], Plugin]
"""``factory(args, handle) -> Plugin``; args: the validated args model, or a dict."""

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*")


class RegistryError(Exception):
    """A plugin could not be registered or found."""


class DuplicatePluginError(RegistryError):
    """Two plugins registered under one name."""


class UnknownPluginError(RegistryError, KeyError):
    """A plugin name that is not registered."""

    def __str__(self) -> str:  # KeyError's __str__ would show the repr
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True, slots=True)
class RegistryEntry:
    """One registered plugin: its factory, args model and where it came from (for messages)."""

    name: str
    factory: PluginFactory
    args_model: type[BaseModel] | None = None
    origin: str = ""


class PluginRegistry(Mapping[str, RegistryEntry]):
    """Plugin name -> ``RegistryEntry``. Read-only as a mapping; grow it with ``register``."""

    def __init__(self, entries: Iterable[RegistryEntry] = ()) -> None:
        self._entries: dict[str, RegistryEntry] = {}
        for entry in entries:
            self._add(entry)

    # -- building --------------------------------------------------------------------------

    def register(
        self,
        plugin: type[Plugin] | str,
        factory: PluginFactory | None = None,
        *,
        args_model: type[BaseModel] | None = None,
        origin: str = "",
    ) -> RegistryEntry:
        """Register a plugin class (``register(MyPlugin)``) or a name and a factory.

        Returns the entry. ``DuplicatePluginError`` if the name is taken.
        """
        if isinstance(plugin, str):
            if factory is None:
                raise TypeError(f"register({plugin!r}) needs a factory")
            entry = RegistryEntry(plugin, factory, args_model, origin)
        else:
            if not (isinstance(plugin, type) and issubclass(plugin, Plugin)):
                raise TypeError(f"register() takes a Plugin subclass or a name, not {plugin!r}")
            name = getattr(plugin, "NAME", None)
            if not isinstance(name, str):
                raise RegistryError(
                    f"{plugin.__module__}.{plugin.__qualname__} has no NAME: give it a class "
                    f'attribute such as NAME = "{plugin.__name__}"'
                )
            if inspect.isabstract(plugin):
                missing = ", ".join(sorted(plugin.__abstractmethods__))
                raise RegistryError(
                    f"plugin {name!r} ({plugin.__qualname__}) cannot be registered: it does not "
                    f"implement {missing}"
                )
            entry = RegistryEntry(
                name,
                factory or plugin.new,
                args_model if args_model is not None else plugin.ARGS,
                origin or f"{plugin.__module__}.{plugin.__qualname__}",
            )
        self._add(entry)
        return entry

    def _add(self, entry: RegistryEntry) -> None:
        if not _NAME.fullmatch(entry.name):
            raise RegistryError(
                f"invalid plugin name {entry.name!r} ({entry.origin}): a name starts with a "
                f"letter and has only letters, digits, '_', '.' and '-'"
            )
        existing = self._entries.get(entry.name)
        if existing is not None:
            raise DuplicatePluginError(
                f"plugin {entry.name!r} is registered twice: by {existing.origin or '?'} and "
                f"by {entry.origin or '?'}; rename one of them"
            )
        self._entries[entry.name] = entry

    def merged(self, other: Iterable[RegistryEntry]) -> PluginRegistry:
        """A new registry with this one's entries and ``other``'s (duplicates are an error)."""
        out = PluginRegistry(self._entries.values())
        for entry in other:
            out._add(entry)
        return out

    def with_entry_points(self, group: str = "gpusched.plugins") -> PluginRegistry:
        """A new registry with this one's plugins and those installed packages declare."""
        out = PluginRegistry(self._entries.values())
        for ep in metadata.entry_points(group=group):
            dist = f", distribution {ep.dist.name} {ep.dist.version}" if ep.dist else ""
            origin = f"entry point {ep.name} = {ep.value} (group {group}{dist})"
            try:
                obj = ep.load()
            except Exception as exc:
                raise RegistryError(f"cannot load {origin}: {type(exc).__name__}: {exc}") from exc
            if isinstance(obj, type) and issubclass(obj, Plugin):
                if getattr(obj, "NAME", None) != ep.name:
                    raise RegistryError(
                        f"{origin}: the entry point's name must be the plugin's NAME "
                        f"({getattr(obj, 'NAME', None)!r})"
                    )
                out.register(obj, origin=origin)
            elif callable(obj):
                out.register(ep.name, obj, origin=origin)
            else:
                raise RegistryError(f"{origin}: {obj!r} is neither a Plugin class nor a factory")
        return out

    # -- reading ---------------------------------------------------------------------------

    def __getitem__(self, name: str) -> RegistryEntry:
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownPluginError(self.unknown_message(name)) from None

    def unknown_message(self, name: str) -> str:
        """``unknown plugin 'X'; known plugins: A, B`` (what lookups of unknown names say)."""
        known = ", ".join(self.names()) or "none (the registry is empty)"
        return f"unknown plugin {name!r}; known plugins: {known}"

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._entries)

    def __repr__(self) -> str:
        return f"<PluginRegistry {self.names()}>"


def plugin_classes(module: ModuleType) -> list[type[Plugin]]:
    """The concrete ``Plugin`` subclasses defined in ``module`` (not imported into it).

    Abstract classes (helper bases) are skipped.
    """
    found: list[type[Plugin]] = []
    for value in vars(module).values():
        if (
            isinstance(value, type)
            and issubclass(value, Plugin)
            and value.__module__ == module.__name__
            and not inspect.isabstract(value)
        ):
            found.append(value)
    return found


def in_tree(package: str = "gpusched.plugins") -> PluginRegistry:
    """The built-in plugins: every concrete plugin class in the modules of ``package``."""
    registry = PluginRegistry()
    pkg = importlib.import_module(package)
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module_name = f"{package}.{info.name}"
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:
            raise RegistryError(
                f"cannot import in-tree plugin module {module_name}: {type(exc).__name__}: {exc}"
            ) from exc
        for cls in plugin_classes(module):
            registry.register(cls, origin=f"{module_name}.{cls.__qualname__}")
    return registry


@functools.cache
def default_registry() -> PluginRegistry:
    """The in-tree plugins and every installed ``gpusched.plugins`` entry point, loaded once
    per process (a ``RegistryError`` names a broken entry point). Do not grow it: it is
    shared; ``merged`` makes a new one."""
    return in_tree().with_entry_points()
