"""NodeUnschedulable: no new pods on cordoned nodes (upstream's ``nodeunschedulable``).

A node with ``spec.unschedulable: true`` (``kubectl cordon``) takes no new pods, unless the pod
tolerates the taint the node lifecycle controller mirrors it into,
``node.kubernetes.io/unschedulable:NoSchedule`` (DaemonSet pods do). The rejection is
UnschedulableAndUnresolvable: preempting pods would not uncordon the node.

Filter is O(1) on schedulable nodes and O(tolerations) on cordoned ones; it allocates nothing.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING, Final

from gpusched.framework import (
    SUCCESS,
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    CycleState,
    EnqueueExtensions,
    FilterPlugin,
    Pod,
    QueueingHint,
    SignPlugin,
    Status,
)

from ._helper import (
    NO_SCHEDULE,
    TAINT_NODE_UNSCHEDULABLE,
    node_of,
    pod_tolerations,
    tolerations_tolerate_taint,
)

if TYPE_CHECKING:
    from gpusched.cache import NodeInfo

__all__ = ["NAME", "REASON_UNSCHEDULABLE", "NodeUnschedulable"]

NAME: Final = "NodeUnschedulable"

REASON_UNSCHEDULABLE: Final = "node(s) were unschedulable"
"""Upstream's ``ErrReasonUnschedulable``."""

_UNSCHEDULABLE_TAINT: Final = {"key": TAINT_NODE_UNSCHEDULABLE, "effect": NO_SCHEDULE}
_REJECTED: Final = Status.unresolvable(REASON_UNSCHEDULABLE, plugin=NAME)


def _is_schedulable(node: object) -> bool:
    obj = node_of(node)
    return obj is not None and not (obj.get("spec") or {}).get("unschedulable")


class NodeUnschedulable(FilterPlugin, SignPlugin, EnqueueExtensions):
    """Rejects cordoned nodes unless the pod tolerates ``node.kubernetes.io/unschedulable``."""

    NAME = NAME

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        if not node_info.unschedulable:
            return SUCCESS
        if tolerations_tolerate_taint(pod_tolerations(pod), _UNSCHEDULABLE_TAINT):
            return SUCCESS
        return _REJECTED

    def sign_pod(self, pod: Pod) -> Hashable:
        """Whether the pod tolerates the unschedulable taint: all Filter reads."""
        return tolerations_tolerate_taint(pod_tolerations(pod), _UNSCHEDULABLE_TAINT)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """A node added schedulable, or uncordoned."""
        return [
            ClusterEventWithHint(
                ClusterEvent("Node", ActionType.ADD | ActionType.UPDATE),
                self._after_node_change,
            )
        ]

    @staticmethod
    def _after_node_change(pod: Pod, old: object, new: object) -> QueueingHint:
        if _is_schedulable(new) and (old is None or not _is_schedulable(old)):
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP
