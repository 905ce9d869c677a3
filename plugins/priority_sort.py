"""PrioritySort: the queue's order, gpusched priority first (upstream's ``queuesort.PrioritySort``).

Upstream orders the active queue by ``spec.priority`` (higher first), then by the time the pod
was queued. gpusched puts its own priority before that: the ``gpusched.io/priority``
annotation, ``0`` (highest) to ``4``, default 0. The key, smallest first::

    (gpusched priority ascending, spec.priority descending, queued timestamp ascending, ns/name)

For the queue's own ``QueuedPodInfo`` this is :func:`gpusched.queue.default_sort_key`, which
reads the priorities the queue parsed once when the pod was added (a malformed annotation is
gated by the queue and sorts last). Any other ``QueuedPodInfo`` (tests, other queues) gets the
same key computed from the pod.
"""

from __future__ import annotations

from typing import Any, Final

from gpusched.annotations import AnnotationError, parse_priority
from gpusched.framework import Pod, QueuedPodInfo, QueueSortPlugin
from gpusched.queue import QueuedPodInfo as QueueInfo
from gpusched.queue import default_sort_key

__all__ = ["LOWEST_PRIORITY", "NAME", "PrioritySort", "sort_key_of"]

NAME: Final = "PrioritySort"

LOWEST_PRIORITY: Final = 4
"""Where a pod whose ``gpusched.io/priority`` does not parse sorts (the queue gates it)."""


def sort_key_of(pod: Pod, timestamp: float) -> tuple[int, int, float, str]:
    """The sort key of a pod queued at ``timestamp``, as :func:`default_sort_key` computes it."""
    try:
        priority = parse_priority(pod)
    except AnnotationError:
        priority = LOWEST_PRIORITY
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    key = f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}"
    return (priority, -int(spec.get("priority") or 0), timestamp, key)


class PrioritySort(QueueSortPlugin):
    """Orders the active queue by gpusched priority, then ``spec.priority``, then FIFO."""

    NAME = NAME

    def sort_key(self, info: QueuedPodInfo) -> tuple[Any, ...]:
        """The pod's key (module docstring). O(1) for the queue's infos."""
        if isinstance(info, QueueInfo):
            return default_sort_key(info)
        return sort_key_of(info.pod, info.timestamp)
