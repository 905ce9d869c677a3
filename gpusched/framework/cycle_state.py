"""``CycleState``: what the plugins of one scheduling cycle tell each other.

As kube-scheduler's ``CycleState`` (staging/src/k8s.io/kube-scheduler/framework/cycle_state.go):
a fresh one is made for each pod's scheduling cycle and handed on to its binding cycle. The usual
pattern is *write once, read many*: a plugin's PreFilter computes what its Filter needs (the
pod's GPU request parsed once, say) and writes it; Filter and Score then read it for every node.

Keys are typed: a plugin declares ``_STATE = StateKey[GPURequest]("GPUFit")`` once and
``state.read(_STATE)`` is then a ``GPURequest`` to mypy. Keys compare by identity (a dict
lookup on the key object, no string hashing); the name is for error messages.

``skip_filter_plugins`` and ``skip_score_plugins`` are filled by the framework from PreFilter
and PreScore plugins that return ``Skip``: their Filter/Score are then not called this cycle.

``record_plugin_metrics`` is set by the scheduling cycle for the cycles whose per-plugin
durations it wants (upstream samples 10% of them); the framework times plugins only then.

``dry_run`` is set by ``gpusched explain``, which runs a pod through the plugins to say what
the scheduler would decide: a plugin that acts on its verdict (PostFilter's preemption evicts
victims) returns the same result and message but does not act, and records nothing.

Not thread-safe, and need not be: the scheduling cycle is serial, and the binding cycle that
inherits the state runs on the same event loop.
"""

from __future__ import annotations

from typing import Any, Generic, Protocol, Self, TypeVar, runtime_checkable

__all__ = ["CycleState", "StateData", "StateKey", "StateNotFoundError"]

T = TypeVar("T")


class StateKey(Generic[T]):
    """A typed, identity-compared key into a ``CycleState``."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"StateKey({self.name!r})"


@runtime_checkable
class StateData(Protocol):
    """A value that ``CycleState.clone()`` must copy rather than share (upstream's ``StateData``).

    Values without ``clone()`` are shared by clones, so they must not be mutated after being
    written (tuples, frozen dataclasses, ints, strings).
    """

    def clone(self) -> Self: ...


class StateNotFoundError(KeyError):
    """``CycleState.read`` of a key that no plugin wrote this cycle."""

    def __str__(self) -> str:  # KeyError's own __str__ shows the repr of the message
        return str(self.args[0]) if self.args else ""


class CycleState:
    """A per-cycle store of plugin data, plus the plugins to skip this cycle.

    ``read``, ``write`` and ``get`` are one dict operation each: O(1).
    """

    __slots__ = (
        "_data",
        "dry_run",
        "record_plugin_metrics",
        "skip_filter_plugins",
        "skip_score_plugins",
    )

    def __init__(self, *, record_plugin_metrics: bool = False, dry_run: bool = False) -> None:
        self._data: dict[StateKey[Any], Any] = {}
        self.skip_filter_plugins: set[str] = set()
        self.skip_score_plugins: set[str] = set()
        self.record_plugin_metrics = record_plugin_metrics
        self.dry_run = dry_run

    def write(self, key: StateKey[T], value: T) -> None:
        """Store ``value`` under ``key`` (replacing any earlier value)."""
        self._data[key] = value

    def read(self, key: StateKey[T]) -> T:
        """The value written under ``key``; ``StateNotFoundError`` (a ``KeyError``) if none was."""
        try:
            value: T = self._data[key]
        except KeyError:
            raise StateNotFoundError(self._missing(key)) from None
        return value

    def get(self, key: StateKey[T]) -> T | None:
        """The value written under ``key``, or ``None``."""
        value: T | None = self._data.get(key)
        return value

    def delete(self, key: StateKey[Any]) -> None:
        """Forget ``key`` (no error if it was never written)."""
        self._data.pop(key, None)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def clone(self) -> CycleState:
        """A copy for a what-if evaluation (preemption, nominated pods).

        Values implementing ``StateData`` are cloned; others are shared. The skip sets are
        copied. O(number of keys).
        """
        copy = CycleState(record_plugin_metrics=self.record_plugin_metrics, dry_run=self.dry_run)
        copy._data = {
            key: value.clone() if isinstance(value, StateData) else value
            for key, value in self._data.items()
        }
        copy.skip_filter_plugins = set(self.skip_filter_plugins)
        copy.skip_score_plugins = set(self.skip_score_plugins)
        return copy

    def _missing(self, key: StateKey[Any]) -> str:
        present = ", ".join(sorted(repr(k.name) for k in self._data)) or "none"
        return (
            f"CycleState has no {key.name!r}: the plugin that writes it (usually in its "
            f"PreFilter or PreScore) did not run this cycle; is that extension point enabled "
            f"for it, and did it return Success rather than Skip? (keys written: {present})"
        )

    def __repr__(self) -> str:
        keys = ", ".join(k.name for k in self._data)
        return f"<CycleState keys=[{keys}]>"
