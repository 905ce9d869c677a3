"""A pod's priority, read one way for the queue order, preemption and reservations.

Two inputs, in this order of weight:

1. ``gpusched.io/priority`` (:data:`gpusched.annotations.PRIORITY`): the *level*, ``0``
   (highest) to ``4``; absent means ``0``; a malformed one sorts last (level 4, and
   PrioritySort's PreEnqueue gates the pod with the parse error);
2. ``spec.priority``: the Kubernetes value the API server copies from the pod's
   ``priorityClassName`` (higher is more important; absent means 0; clamped to int32).

The level decides; ``spec.priority`` breaks ties within a level. :class:`Priority` holds both
and compares by :attr:`Priority.rank`, one integer (``(4 - level) << 32 | (value + 2**31)``) so
that ``a > b`` reads "a is more important than b" and a cost is one int comparison. The queue's
key is ``(-rank, queued time, ns/name)``, which is exactly the order PrioritySort always had
(level ascending, then ``spec.priority`` descending). Preemption never picks a victim whose
priority is equal to or higher than the preemptor's, and a nomination holds GPUs only against
pods of strictly lower priority. ``str(p)`` is the readable form for messages
(``"level 1, spec.priority 1000"``) and :attr:`Priority.label` the bounded one for metric
labels (``"p1"``: the level alone, five values).

:func:`preemption_policy` reads ``spec.preemptionPolicy`` (from the PriorityClass):
``PreemptLowerPriority`` (the default) or ``Never``. Examples: docs/priority.md.
Cost: ~0.3-0.6 us per call (an annotation lookup, an int parse; equal priorities share one
memoised :class:`Priority`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from gpusched.annotations import (
    DEFAULT_PRIORITY,
    PRIORITY,
    PRIORITY_LEVELS,
    AnnotationError,
    parse_priority,
)

__all__ = [
    "LOWEST_LEVEL",
    "NEVER",
    "PREEMPT_LOWER_PRIORITY",
    "PreemptionPolicy",
    "Priority",
    "pod_priority",
    "preemption_policy",
]

LOWEST_LEVEL: Final = PRIORITY_LEVELS[-1]
"""The level of a pod whose ``gpusched.io/priority`` does not parse."""

_INT32_MIN: Final = -(2**31)
_INT32_MAX: Final = 2**31 - 1

PreemptionPolicy = Literal["PreemptLowerPriority", "Never"]
PREEMPT_LOWER_PRIORITY: Final = "PreemptLowerPriority"
NEVER: Final = "Never"


@dataclass(frozen=True, slots=True, order=True)
class Priority:
    """A pod's priority (module docstring); ordered by ``rank``, higher is more important."""

    rank: int = field(init=False, repr=False)
    level: int = field(compare=False)
    """``gpusched.io/priority``, 0 (highest) to 4."""
    value: int = field(default=0, compare=False)
    """``spec.priority``, clamped to int32."""

    def __post_init__(self) -> None:
        value = min(max(self.value, _INT32_MIN), _INT32_MAX)
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "rank", (LOWEST_LEVEL - self.level) << 32 | (value - _INT32_MIN))

    @property
    def label(self) -> str:
        """Bounded, for metric labels: ``"p0"`` .. ``"p4"``."""
        return f"p{self.level}"

    def __str__(self) -> str:
        return f"level {self.level}, spec.priority {self.value}"


@functools.lru_cache(maxsize=4096)
def _priority(level: int, value: int) -> Priority:
    return Priority(level, value)


def pod_priority(pod: Mapping[str, Any]) -> Priority:
    """The pod's :class:`Priority`; never raises (a malformed level is :data:`LOWEST_LEVEL`).
    ~0.5 us: the cache reads it once per pod event, the queue once per insertion."""
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations")
    if annotations and PRIORITY in annotations:
        try:
            level = parse_priority(pod)
        except AnnotationError:
            level = LOWEST_LEVEL
    else:
        level = DEFAULT_PRIORITY
    raw = (pod.get("spec") or {}).get("priority")
    if raw is None:
        value = 0
    elif type(raw) is int:
        value = raw
    else:
        try:
            value = int(raw)
        except (TypeError, ValueError):
            value = 0
    return _priority(level, value)


def preemption_policy(pod: Mapping[str, Any]) -> PreemptionPolicy:
    """``spec.preemptionPolicy``: ``Never`` or (default) ``PreemptLowerPriority``."""
    spec = pod.get("spec") or {}
    return NEVER if spec.get("preemptionPolicy") == NEVER else PREEMPT_LOWER_PRIORITY
