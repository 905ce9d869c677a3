"""TaintToleration: keep pods off nodes whose taints they do not tolerate (upstream's
``tainttoleration``).

Filter: the first ``NoSchedule`` or ``NoExecute`` taint of the node (in the node's order) that
none of the pod's tolerations tolerates rejects the node, UnschedulableAndUnresolvable, with
upstream's message ``node(s) had untolerated taint {key: value}`` (so ``kubectl describe`` reads
``0/12 nodes are available: 4 node(s) had untolerated taint {nvidia.com/gpu: present}``).

Score: the number of ``PreferNoSchedule`` taints the pod does not tolerate (counting only its
tolerations with that effect or none), reversed on normalisation: the node with the most such
taints gets 0, nodes with none 100 (all 100 when no node has any).

Toleration matching is upstream's (see ``_helper``): ``Exists`` with an empty key tolerates
every taint, an empty effect matches every effect, an empty operator means ``Equal``.

Filter is O(taints x tolerations), O(1) on an untainted node; rejections are built once per
distinct taint and reused, so a rejected node allocates nothing after the first.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from gpusched.framework import (
    MAX_NODE_SCORE,
    SUCCESS,
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    CycleState,
    EnqueueExtensions,
    FilterPlugin,
    NodeScore,
    Pod,
    PreScorePlugin,
    QueueingHint,
    ScoreExtensions,
    ScorePlugin,
    SignPlugin,
    StateKey,
    Status,
)

from ._helper import (
    PREFER_NO_SCHEDULE,
    default_normalize_score,
    find_untolerated_taint,
    freeze,
    node_of,
    pod_tolerations,
    tolerations_tolerate_taint,
)

if TYPE_CHECKING:
    from gpusched.cache import NodeInfo

__all__ = ["NAME", "REASON_UNTOLERATED_TAINT", "TaintToleration", "untolerated_reason"]

NAME: Final = "TaintToleration"

REASON_UNTOLERATED_TAINT: Final = "node(s) had untolerated taint {{{key}: {value}}}"
"""Upstream's Filter reason, ``fmt.Sprintf("node(s) had untolerated taint {%s: %s}", ...)``,
as a ``str.format`` template; see :func:`untolerated_reason`."""

_REJECTIONS_MAX: Final = 4096
"""Cached rejection statuses (one per distinct taint key and value) before the cache resets."""

_PRE_SCORE: Final = StateKey[tuple[Mapping[str, Any], ...]]("PreScoreTaintToleration")


def untolerated_reason(taint: Mapping[str, Any]) -> str:
    """``node(s) had untolerated taint {key: value}`` for one taint."""
    return REASON_UNTOLERATED_TAINT.format(
        key=taint.get("key") or "", value=taint.get("value") or ""
    )


def _taints_of(node: Mapping[str, Any]) -> Sequence[Mapping[str, Any]]:
    taints: Sequence[Mapping[str, Any]] | None = (node.get("spec") or {}).get("taints")
    return taints or ()


class TaintToleration(
    FilterPlugin, PreScorePlugin, ScorePlugin, ScoreExtensions, SignPlugin, EnqueueExtensions
):
    """Filters on NoSchedule/NoExecute taints; scores untolerated PreferNoSchedule ones."""

    NAME = NAME

    def __init__(self) -> None:
        self._rejections: dict[tuple[str, str], Status] = {}

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        taints = node_info.taints
        if not taints:
            return SUCCESS
        taint = find_untolerated_taint(taints, pod_tolerations(pod))
        if taint is None:
            return SUCCESS
        return self._rejection(taint)

    def _rejection(self, taint: Mapping[str, Any]) -> Status:
        key = (str(taint.get("key") or ""), str(taint.get("value") or ""))
        status = self._rejections.get(key)
        if status is None:
            if len(self._rejections) >= _REJECTIONS_MAX:
                self._rejections.clear()
            status = Status.unresolvable(untolerated_reason(taint), plugin=NAME)
            self._rejections[key] = status
        return status

    def pre_score(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        state.write(
            _PRE_SCORE,
            tuple(
                t
                for t in pod_tolerations(pod)
                if not t.get("effect") or t.get("effect") == PREFER_NO_SCHEDULE
            ),
        )
        return SUCCESS

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> tuple[int, Status]:
        taints = node_info.taints
        if not taints:
            return 0, SUCCESS
        tolerations = state.get(_PRE_SCORE)
        if tolerations is None:  # PreScore disabled for this plugin
            tolerations = tuple(pod_tolerations(pod))
        count = 0
        for taint in taints:
            if taint.get("effect") == PREFER_NO_SCHEDULE and not tolerations_tolerate_taint(
                tolerations, taint
            ):
                count += 1
        return count, SUCCESS

    def normalize_score(self, state: CycleState, pod: Pod, scores: list[NodeScore]) -> Status:
        default_normalize_score(MAX_NODE_SCORE, True, scores)
        return SUCCESS

    def sign_pod(self, pod: Pod) -> Hashable:
        """The pod's tolerations: all Filter and Score read. Score is normalised, which
        ``SignPlugin`` allows: equal raw scores (no node with an untolerated PreferNoSchedule
        taint, the usual case) normalise to equal scores."""
        return freeze(pod_tolerations(pod))

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """A node added, or whose taints change, that the pod now tolerates."""
        return [
            ClusterEventWithHint(
                ClusterEvent("Node", ActionType.ADD | ActionType.UPDATE),
                self._after_node_change,
            )
        ]

    @staticmethod
    def _after_node_change(pod: Pod, old: object, new: object) -> QueueingHint:
        node = node_of(new)
        if node is None:
            return QueueingHint.QUEUE_SKIP
        tolerations = pod_tolerations(pod)
        if find_untolerated_taint(_taints_of(node), tolerations) is not None:
            return QueueingHint.QUEUE_SKIP
        before = node_of(old)
        if before is not None and find_untolerated_taint(_taints_of(before), tolerations) is None:
            return QueueingHint.QUEUE_SKIP
        return QueueingHint.QUEUE
