"""PrioritySort: the queue's order, gpusched priority first (upstream's ``queuesort.PrioritySort``).

Upstream orders the active queue by ``spec.priority`` (higher first), then by the time the pod
was queued. gpusched puts its own priority before that: the ``gpusched.io/priority``
annotation, ``0`` (highest) to ``4``, default 0. Both are read once, by
:func:`gpusched.priority.pod_priority` (the mapping preemption uses too); the key, smallest
first, is ``(-rank, queued timestamp, ns/name)``, i.e.::

    (gpusched priority ascending, spec.priority descending, queued timestamp ascending, ns/name)

The plugin is also a PreEnqueue plugin: a pod whose annotation does not parse is gated with
the parse error (its place in the queue is unknown, and retrying cannot fix it) until an
update fixes the annotation; it registers for no cluster event. Should it be sorted anyway
(PreEnqueue disabled for it), it sorts last, at level :data:`LOWEST_PRIORITY`. The key is computed
once per queue insertion (an annotation lookup and an int parse).
"""

from __future__ import annotations

from typing import Any, Final

from gpusched.annotations import AnnotationError, parse_priority
from gpusched.framework import (
    ClusterEventWithHint,
    EnqueueExtensions,
    Pod,
    PreEnqueuePlugin,
    QueuedPodInfo,
    QueueSortPlugin,
    Status,
)
from gpusched.priority import LOWEST_LEVEL, pod_priority

__all__ = ["LOWEST_PRIORITY", "NAME", "PrioritySort", "sort_key_of"]

NAME: Final = "PrioritySort"

LOWEST_PRIORITY: Final = LOWEST_LEVEL
"""Where a pod whose ``gpusched.io/priority`` does not parse sorts."""


def sort_key_of(pod: Pod, timestamp: float) -> tuple[int, float, str]:
    """The sort key of a pod queued at ``timestamp`` (module docstring)."""
    meta = pod.get("metadata") or {}
    key = f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}"
    return (-pod_priority(pod).rank, timestamp, key)


class PrioritySort(QueueSortPlugin, PreEnqueuePlugin, EnqueueExtensions):
    """Orders the active queue by gpusched priority, then ``spec.priority``, then FIFO; gates
    pods whose priority annotation is malformed."""

    NAME = NAME

    def sort_key(self, info: QueuedPodInfo) -> tuple[Any, ...]:
        """The pod's key (module docstring). O(1)."""
        return sort_key_of(info.pod, info.timestamp)

    def pre_enqueue(self, pod: Pod) -> Status:
        """UnschedulableAndUnresolvable with the parse error when the annotation is invalid."""
        try:
            parse_priority(pod)
        except AnnotationError as exc:
            return Status.unresolvable(str(exc), plugin=NAME)
        return Status.success()

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """None: only an update to the pod itself (handled by the queue) can fix it."""
        return []
