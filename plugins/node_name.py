"""NodeName: a pod that names its node fits only there (upstream's ``nodename``).

A pod with ``spec.nodeName`` preset is normally bound already and never queued; one that reaches
the scheduler anyway (a controller that sets it on a pod with ``schedulerName: gpusched``) may
only go to that node. Other nodes are UnschedulableAndUnresolvable.

Filter is O(1) and allocates nothing.
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

from ._helper import node_of, pod_spec

if TYPE_CHECKING:
    from gpusched.cache import NodeInfo

__all__ = ["NAME", "REASON_NODE_NAME", "NodeName", "fits"]

NAME: Final = "NodeName"

REASON_NODE_NAME: Final = "node(s) didn't match the requested node name"
"""Upstream's ``ErrReason``."""

_REJECTED: Final = Status.unresolvable(REASON_NODE_NAME, plugin=NAME)


def fits(pod: Pod, node_name: str) -> bool:
    """Whether the pod names no node, or this one (upstream's ``Fits``)."""
    wanted = pod_spec(pod).get("nodeName")
    return not wanted or wanted == node_name


class NodeName(FilterPlugin, SignPlugin, EnqueueExtensions):
    """Rejects every node but the one ``spec.nodeName`` names."""

    NAME = NAME

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        return SUCCESS if fits(pod, node_info.name) else _REJECTED

    def sign_pod(self, pod: Pod) -> Hashable:
        """``spec.nodeName`` (usually empty): all Filter reads."""
        return str(pod_spec(pod).get("nodeName") or "")

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """The named node appearing (or changing)."""
        return [
            ClusterEventWithHint(
                ClusterEvent("Node", ActionType.ADD | ActionType.UPDATE),
                self._after_node_change,
            )
        ]

    @staticmethod
    def _after_node_change(pod: Pod, old: object, new: object) -> QueueingHint:
        node = node_of(new)
        name = (node.get("metadata") or {}).get("name", "") if node is not None else ""
        return QueueingHint.QUEUE if name and fits(pod, name) else QueueingHint.QUEUE_SKIP
