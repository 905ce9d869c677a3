"""TaintToleration: untolerated NoSchedule/NoExecute taints filter, PreferNoSchedule scores."""

from __future__ import annotations

import pytest
from builders import Cluster, NodeBuilder, PodBuilder, make_node, make_pod

from gpusched.framework import SUCCESS, Code, CycleState, NodeScore, QueueingHint
from gpusched.plugins._helper import tolerates_taint
from gpusched.plugins.taint_toleration import NAME, TaintToleration, untolerated_reason

GPU = "nvidia.com/gpu"


@pytest.mark.parametrize(
    ("toleration", "taint", "tolerated"),
    [
        (
            {"key": GPU, "operator": "Exists"},
            {"key": GPU, "value": "x", "effect": "NoSchedule"},
            True,
        ),
        ({"key": GPU, "value": "x"}, {"key": GPU, "value": "x", "effect": "NoSchedule"}, True),
        (
            {"key": GPU, "operator": "Equal", "value": "x"},
            {"key": GPU, "value": "y", "effect": "NoSchedule"},
            False,
        ),
        ({"key": GPU}, {"key": GPU, "effect": "NoSchedule"}, True),  # Equal, both values empty
        ({"key": GPU}, {"key": GPU, "value": "x", "effect": "NoSchedule"}, False),
        ({"operator": "Exists"}, {"key": "anything", "value": "v", "effect": "NoExecute"}, True),
        (
            {"operator": "Exists", "effect": "NoSchedule"},
            {"key": "k", "effect": "NoExecute"},
            False,
        ),
        (
            {"key": GPU, "operator": "Exists", "effect": "NoExecute"},
            {"key": GPU, "effect": "NoExecute"},
            True,
        ),
        ({"key": "other", "operator": "Exists"}, {"key": GPU, "effect": "NoSchedule"}, False),
        (
            {"value": "x"},
            {"key": "k", "value": "x", "effect": "NoSchedule"},
            True,
        ),  # empty key, Equal
        (
            {"key": GPU, "operator": "Gt", "value": "1"},
            {"key": GPU, "value": "2", "effect": "NoSchedule"},
            False,
        ),
    ],
)
def test_toleration_matching_is_upstreams(
    toleration: dict[str, str], taint: dict[str, str], tolerated: bool
) -> None:
    assert tolerates_taint(toleration, taint) is tolerated


@pytest.mark.parametrize(
    ("node", "pod", "reason"),
    [
        (make_node(), make_pod(), None),
        (
            make_node().taint(GPU, "present"),
            make_pod(),
            "node(s) had untolerated taint {nvidia.com/gpu: present}",
        ),
        (make_node().taint(GPU, "present"), make_pod().toleration(GPU, operator="Exists"), None),
        (
            make_node().taint("dedicated", effect="NoExecute"),
            make_pod(),
            "node(s) had untolerated taint {dedicated: }",
        ),
        (make_node().taint("soft", effect="PreferNoSchedule"), make_pod(), None),
        (
            make_node().taint("a", "1").taint("b", "2"),
            make_pod().toleration("a", "1", effect="NoSchedule"),
            "node(s) had untolerated taint {b: 2}",
        ),
        (
            make_node().taint("a", "1").taint("b", "2"),
            make_pod(),
            "node(s) had untolerated taint {a: 1}",
        ),
    ],
)
def test_filter(node: NodeBuilder, pod: PodBuilder, reason: str | None) -> None:
    plugin = TaintToleration()
    info = Cluster(node).node("n")
    status = plugin.filter(CycleState(), pod.obj(), info)
    if reason is None:
        assert status is SUCCESS
        return
    assert (status.code, status.reasons, status.plugin) == (
        Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
        (reason,),
        NAME,
    )
    assert plugin.filter(CycleState(), pod.obj(), info) is status  # built once


def test_reason_format() -> None:
    assert untolerated_reason({"key": "k", "effect": "NoSchedule"}) == (
        "node(s) had untolerated taint {k: }"
    )


def test_score_counts_untolerated_prefer_no_schedule_taints_reversed() -> None:
    cluster = Cluster(
        make_node("clean"),
        make_node("one").taint("x", effect="PreferNoSchedule"),
        make_node("two")
        .taint("x", effect="PreferNoSchedule")
        .taint("y", effect="PreferNoSchedule"),
        make_node("tolerated").taint("z", effect="PreferNoSchedule"),
        make_node("hard").taint("x", effect="NoSchedule"),  # not counted by Score
    )
    # A NoSchedule-only toleration does not count for scoring; the empty-effect one does.
    pod = (
        make_pod()
        .toleration("z", operator="Exists")
        .toleration("x", operator="Exists", effect="NoSchedule")
        .obj()
    )
    plugin = TaintToleration()
    state = CycleState()
    infos = cluster.nodes()
    assert plugin.pre_score(state, pod, infos) is SUCCESS
    raw = {i.name: plugin.score(state, pod, i)[0] for i in infos}
    assert raw == {"clean": 0, "one": 1, "two": 2, "tolerated": 0, "hard": 0}
    scores = [NodeScore(n, s) for n, s in raw.items()]
    plugin.normalize_score(state, pod, scores)
    assert {s.name: s.score for s in scores} == {
        "clean": 100,
        "one": 50,
        "two": 0,
        "tolerated": 100,
        "hard": 100,
    }


def test_all_clean_nodes_score_100() -> None:
    scores = [NodeScore("a", 0), NodeScore("b", 0)]
    TaintToleration().normalize_score(CycleState(), make_pod().obj(), scores)
    assert [s.score for s in scores] == [100, 100]


def test_requeued_when_a_taint_goes() -> None:
    (event,) = TaintToleration().events_to_register()
    hint = event.queueing_hint_fn
    assert hint is not None
    tainted, _ = make_node().taint(GPU, "present").build()
    clean, _ = make_node().build()
    pod = make_pod().obj()
    assert hint(pod, tainted, clean) == QueueingHint.QUEUE
    assert hint(pod, None, clean) == QueueingHint.QUEUE
    assert hint(pod, clean, tainted) == QueueingHint.QUEUE_SKIP
    assert hint(pod, clean, clean) == QueueingHint.QUEUE_SKIP
