"""NodeName: a pod naming its node fits only there."""

from __future__ import annotations

import pytest
from builders import Cluster, PodBuilder, make_node, make_pod

from gpusched.framework import SUCCESS, Code, CycleState, QueueingHint
from gpusched.plugins.node_name import NAME, REASON_NODE_NAME, NodeName


@pytest.mark.parametrize(
    ("pod", "node", "fits"),
    [
        (make_pod(), "a", True),
        (make_pod().node_name("a"), "a", True),
        (make_pod().node_name("a"), "b", False),
    ],
)
def test_filter(pod: PodBuilder, node: str, fits: bool) -> None:
    info = Cluster(make_node(node)).node(node)
    status = NodeName().filter(CycleState(), pod.obj(), info)
    if fits:
        assert status is SUCCESS
    else:
        assert (status.code, status.reasons, status.plugin) == (
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
            (REASON_NODE_NAME,),
            NAME,
        )


def test_requeued_when_the_named_node_appears() -> None:
    (event,) = NodeName().events_to_register()
    hint = event.queueing_hint_fn
    assert hint is not None
    a, _ = make_node("a").build()
    b, _ = make_node("b").build()
    pod = make_pod().node_name("a").obj()
    assert hint(pod, None, a) == QueueingHint.QUEUE
    assert hint(pod, None, b) == QueueingHint.QUEUE_SKIP
