"""NodeUnschedulable: cordoned nodes take only pods tolerating node.kubernetes.io/unschedulable."""

from __future__ import annotations

import pytest
from builders import Cluster, NodeBuilder, PodBuilder, make_node, make_pod

from gpusched.framework import SUCCESS, Code, CycleState, QueueingHint
from gpusched.plugins.node_unschedulable import NAME, REASON_UNSCHEDULABLE, NodeUnschedulable

KEY = "node.kubernetes.io/unschedulable"


@pytest.mark.parametrize(
    ("node", "pod", "fits"),
    [
        (make_node(), make_pod(), True),
        (make_node().unschedulable(), make_pod(), False),
        (make_node().unschedulable(), make_pod().toleration(KEY, effect="NoSchedule"), True),
        (make_node().unschedulable(), make_pod().toleration(KEY, operator="Exists"), True),
        (make_node().unschedulable(), make_pod().toleration(operator="Exists"), True),
        (make_node().unschedulable(), make_pod().toleration(KEY, effect="NoExecute"), False),
        (make_node().unschedulable(), make_pod().toleration(KEY, "x"), False),
        (make_node().unschedulable(), make_pod().toleration("other", operator="Exists"), False),
    ],
)
def test_filter(node: NodeBuilder, pod: PodBuilder, fits: bool) -> None:
    info = Cluster(node).node("n")
    status = NodeUnschedulable().filter(CycleState(), pod.obj(), info)
    if fits:
        assert status is SUCCESS
    else:
        assert status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        assert status.reasons == (REASON_UNSCHEDULABLE,)
        assert status.plugin == NAME
        assert status is NodeUnschedulable().filter(CycleState(), pod.obj(), info)  # prebuilt


def test_requeued_when_a_node_is_uncordoned() -> None:
    (event,) = NodeUnschedulable().events_to_register()
    hint = event.queueing_hint_fn
    assert hint is not None
    cordoned, _ = make_node().unschedulable().build()
    open_, _ = make_node().build()
    pod = make_pod().obj()
    assert hint(pod, cordoned, open_) == QueueingHint.QUEUE
    assert hint(pod, None, open_) == QueueingHint.QUEUE
    assert hint(pod, open_, cordoned) == QueueingHint.QUEUE_SKIP
    assert hint(pod, open_, open_) == QueueingHint.QUEUE_SKIP
