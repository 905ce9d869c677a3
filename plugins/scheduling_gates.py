"""SchedulingGates: a pod with ``spec.schedulingGates`` waits (upstream's ``schedulinggates``).

A PreEnqueue plugin: while the list is non-empty the pod is gated in the queue, never tried,
with upstream's message ("waiting for scheduling gates: [a b]"); the API server lets updates
only remove gates, and removing the last one is an update of the pod itself, which makes the
queue run PreEnqueue again. So it registers for no cluster event. O(gates) per call.
"""

from __future__ import annotations

from typing import Final

from gpusched.framework import (
    ClusterEventWithHint,
    EnqueueExtensions,
    Pod,
    PreEnqueuePlugin,
    Status,
)

__all__ = ["NAME", "SchedulingGates"]

NAME: Final = "SchedulingGates"


class SchedulingGates(PreEnqueuePlugin, EnqueueExtensions):
    """Gates pods whose ``spec.schedulingGates`` is non-empty."""

    NAME = NAME

    def pre_enqueue(self, pod: Pod) -> Status:
        gates = (pod.get("spec") or {}).get("schedulingGates")
        if not gates:
            return Status.success()
        names = " ".join(str(g.get("name", "")) if isinstance(g, dict) else str(g) for g in gates)
        return Status.unresolvable(f"waiting for scheduling gates: [{names}]", plugin=NAME)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """None: removing a gate is an update of the pod, which the queue handles itself."""
        return []
