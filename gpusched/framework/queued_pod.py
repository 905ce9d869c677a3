"""``QueuedPodInfo``: the scheduling queue's record of a pending pod (upstream's
``framework.QueuedPodInfo``), which QueueSort plugins order and the scheduler reads.

One type for the queue, the plugins and the scheduler: :mod:`gpusched.queue` creates and moves
it, a QueueSort plugin's ``sort_key`` reads ``pod`` and ``timestamp`` (and may read ``key`` and
``seq``), the scheduler fills ``unschedulable_plugins``/``pending_plugins`` after an attempt and
reports ``error`` of a gated pod. A plain slotted dataclass with no behaviour of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["QueuedPodInfo"]


@dataclass(slots=True, eq=False)
class QueuedPodInfo:
    """A pending pod and what the queue knows about it.

    Times are the clock's ``monotonic()`` seconds. Compared by identity: one instance follows
    a pod from its first ``add`` to its removal, across every attempt. The queue does not copy
    ``pod``; treat it as immutable (replace it through ``SchedulingQueue.update``).
    """

    pod: dict[str, Any]
    """The pod as the API returned it (latest version the queue has applied)."""
    key: str
    """``namespace/name``."""
    uid: str
    """``metadata.uid``: the queue's identity for the pod."""
    timestamp: float
    """When the pod was first added: the FIFO tie-break of the sort keys."""
    seq: int = 0
    """Creation order within the queue: the final tie-break, making every sort key unique."""
    gated: bool = False
    """Held back by a PreEnqueue plugin (``gating_plugin``, ``error``): never popped."""
    gating_plugin: str | None = None
    """The PreEnqueue plugin that rejected the pod (upstream ``GatingPlugin``); None when not
    gated ("" when the PreEnqueue callable itself failed without naming a plugin)."""
    error: str | None = None
    """Why the pod is gated (the rejecting Status's message), for the scheduler to report;
    None when not gated."""
    initial_attempt_timestamp: float | None = None
    """When the pod first became active (ungated); None until then. For latency metrics."""
    attempts: int = 0
    """Times popped; drives the backoff."""
    cycle: int = 0
    """The scheduling cycle of the latest pop (cycles count from 1; 0 = never popped)."""
    unschedulable_plugins: set[str] = field(default_factory=set)
    """Plugins that rejected the latest attempt (or the gating PreEnqueue plugin, as
    upstream). Cleared by ``pop``; the scheduler fills it."""
    pending_plugins: set[str] = field(default_factory=set)
    """Plugins that made the latest attempt wait (e.g. a gang not yet complete); an event
    they care about moves the pod to active without backoff. Cleared by ``pop``."""
    nominated_node_name: str | None = None
    """The node a PostFilter plugin nominated in the latest attempt (upstream
    ``PostFilterResult.NominatedNodeName``); cleared by ``pop``. A nominated pod is retried
    (backoff) rather than parked as unschedulable."""
    backoff_expiry: float | None = None
    """When the current backoff ends; None before the first failure."""
    unschedulable_since: float | None = None
    """When the pod last entered the unschedulable map (for the leftover flush)."""
