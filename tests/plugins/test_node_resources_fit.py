"""NodeResourcesFit: requests against allocatable - requested, upstream's reasons; scoring."""

from __future__ import annotations

from typing import Any

import pytest
from builders import Cluster, NodeBuilder, PodBuilder, make_node, make_pod

from gpusched.framework import (
    SUCCESS,
    Code,
    ConfigError,
    CycleState,
    QueueingHint,
    build_frameworks,
    in_tree,
    parse_config,
)
from gpusched.plugins.node_resources_fit import (
    DEFAULT_MEMORY_REQUEST,
    NAME,
    NodeResourcesFit,
    NodeResourcesFitArgs,
    nonzero_requests,
)

MI = 1 << 20
U = Code.UNSCHEDULABLE
UU = Code.UNSCHEDULABLE_AND_UNRESOLVABLE


def small() -> NodeBuilder:
    """4 cpu, 4Gi (3996Mi allocatable), 3 pod slots, 4 anonymous GPUs."""
    return make_node().cpu(4).memory("4Gi").pods(3).gpus(4, topology=None)


BUSY = make_pod("busy").cpu("3").memory("3Gi").gpus(3).on("n")

CASES: list[tuple[str, list[PodBuilder], PodBuilder, Code | None, tuple[str, ...]]] = [
    ("fits an empty node", [], make_pod().cpu("4").memory("3996Mi").gpus(4), None, ()),
    ("requests nothing", [BUSY], make_pod(), None, ()),
    ("cpu left", [BUSY], make_pod().cpu("1"), None, ()),
    ("cpu short", [BUSY], make_pod().cpu("1001m"), U, ("Insufficient cpu",)),
    ("cpu beyond the node", [], make_pod().cpu("5"), UU, ("Insufficient cpu",)),
    ("memory short", [BUSY], make_pod().memory("1000Mi"), U, ("Insufficient memory",)),
    ("memory beyond the node", [], make_pod().memory("4Gi"), UU, ("Insufficient memory",)),
    (
        "ephemeral-storage",
        [],
        make_pod().request("ephemeral-storage", "2Ti"),
        UU,
        ("Insufficient ephemeral-storage",),
    ),
    ("gpus short", [BUSY], make_pod().gpus(2), U, ("Insufficient nvidia.com/gpu",)),
    ("gpus beyond the node", [], make_pod().gpus(8), UU, ("Insufficient nvidia.com/gpu",)),
    (
        "extended resource the node lacks",
        [],
        make_pod().request("example.com/foo", 1),
        UU,
        ("Insufficient example.com/foo",),
    ),
    (
        "too many pods",
        [make_pod("x").on("n"), make_pod("y").on("n"), make_pod("z").on("n")],
        make_pod(),
        U,
        ("Too many pods",),
    ),
    (
        "every reason, in upstream's order",
        [BUSY, make_pod("x").on("n"), make_pod("y").on("n")],
        make_pod().cpu("2").memory("8Gi").gpus(2).request("example.com/foo", 1),
        UU,
        (
            "Too many pods",
            "Insufficient cpu",
            "Insufficient memory",
            "Insufficient example.com/foo",
            "Insufficient nvidia.com/gpu",
        ),
    ),
]


@pytest.mark.parametrize(
    ("what", "bound", "pod", "code", "reasons"), CASES, ids=[c[0] for c in CASES]
)
def test_filter(
    what: str, bound: list[PodBuilder], pod: PodBuilder, code: Code | None, reasons: tuple[str, ...]
) -> None:
    info = Cluster(small()).bind(*bound).node("n")
    plugin = NodeResourcesFit()
    state = CycleState()
    assert plugin.pre_filter(state, pod.obj()) == (None, SUCCESS)
    status = plugin.filter(state, pod.obj(), info)
    if code is None:
        assert status is SUCCESS
        return
    assert (status.code, status.reasons, status.plugin) == (code, reasons, NAME)
    assert plugin.filter(state, pod.obj(), info) is status  # built once
    # Without PreFilter the same verdict.
    assert plugin.filter(CycleState(), pod.obj(), info) is status


def test_init_containers_and_overhead_count_as_the_cache_counts_them() -> None:
    info = Cluster(small()).node("n")
    pod = make_pod().cpu("1").obj()
    pod["spec"]["initContainers"] = [
        {"name": "init", "image": "x", "resources": {"requests": {"cpu": "4500m"}}}
    ]
    status = NodeResourcesFit().filter(CycleState(), pod, info)
    assert (status.code, status.reasons) == (UU, ("Insufficient cpu",))
    pod = make_pod().cpu("3").obj()
    pod["spec"]["overhead"] = {"cpu": "1001m"}
    assert NodeResourcesFit().filter(CycleState(), pod, info).reasons == ("Insufficient cpu",)


@pytest.mark.parametrize(
    ("args", "fits"),
    [
        ({}, False),
        ({"ignoredResources": ["example.com/foo"]}, True),
        ({"ignoredResourceGroups": ["example.com"]}, True),
        ({"ignoredResourceGroups": ["example.org"]}, False),
    ],
)
def test_ignored_extended_resources(args: dict[str, Any], fits: bool) -> None:
    plugin = NodeResourcesFit(NodeResourcesFitArgs.model_validate(args))
    pod = make_pod().request("example.com/foo", 1).obj()
    state = CycleState()
    plugin.pre_filter(state, pod)
    assert (plugin.filter(state, pod, Cluster(small()).node("n")) is SUCCESS) is fits


def test_native_resources_cannot_be_ignored() -> None:
    plugin = NodeResourcesFit(NodeResourcesFitArgs(ignored_resources=["cpu"]))
    pod = make_pod().cpu("8").obj()
    assert plugin.filter(CycleState(), pod, Cluster(small()).node("n")).reasons == (
        "Insufficient cpu",
    )


def test_malformed_quantity_is_unresolvable() -> None:
    pod = make_pod().cpu("lots").obj()
    _, status = NodeResourcesFit().pre_filter(CycleState(), pod)
    assert status.code == UU
    assert status.message().startswith("invalid resource requests: ")


@pytest.mark.parametrize(
    ("builder", "expected"),
    [
        (make_pod(), (100, DEFAULT_MEMORY_REQUEST)),
        (make_pod().cpu("2"), (2000, DEFAULT_MEMORY_REQUEST)),
        (make_pod().cpu("0").memory("0"), (0, 0)),  # explicit zero is kept
        (make_pod().cpu("1").memory("1Gi").container(), (1100, 1024 * MI + DEFAULT_MEMORY_REQUEST)),
    ],
)
def test_nonzero_requests(builder: PodBuilder, expected: tuple[int, int]) -> None:
    assert nonzero_requests(builder.obj()) == expected


# -- Score -------------------------------------------------------------------------------------


def scores(plugin: NodeResourcesFit, cluster: Cluster, pod: PodBuilder) -> dict[str, int]:
    state = CycleState()
    infos = cluster.nodes()
    assert plugin.pre_score(state, pod.obj(), infos) is SUCCESS
    return {i.name: plugin.score(state, pod.obj(), i)[0] for i in infos}


def score_cluster() -> Cluster:
    return Cluster(
        make_node("empty").cpu(4).memory("4Gi"),
        make_node("best-effort").cpu(4).memory("4Gi"),
        make_node("half").cpu(4).memory("4Gi"),
    ).bind(
        make_pod("be").on("best-effort"),  # counts as 100m and 200Mi
        make_pod("h").cpu("2").memory("1998Mi").on("half"),
    )


def test_least_allocated_spreads() -> None:
    got = scores(NodeResourcesFit(), score_cluster(), make_pod().cpu("1").memory("1Gi"))
    # cpu (4000 - used) * 100 // 4000, memory (3996Mi - used) * 100 // 3996Mi, averaged:
    # empty: used 1000m, 1024Mi -> 75, 74 -> 74
    # best-effort: 1100m, 1224Mi -> 72, 69 -> 70
    # half: 3000m, 3022Mi -> 25, 24 -> 24
    assert got == {"empty": 74, "best-effort": 70, "half": 24}


def test_most_allocated_packs() -> None:
    args = NodeResourcesFitArgs.model_validate({"scoringStrategy": {"type": "MostAllocated"}})
    got = scores(NodeResourcesFit(args), score_cluster(), make_pod().cpu("1").memory("1Gi"))
    # empty: 25, 25 -> 25; best-effort: 27, 30 -> 28; half: 75, 75 -> 75
    assert got == {"empty": 25, "best-effort": 28, "half": 75}


def test_weights_and_extended_resources_in_the_score() -> None:
    args = NodeResourcesFitArgs.model_validate(
        {
            "scoringStrategy": {
                "resources": [{"name": "cpu", "weight": 3}, {"name": "nvidia.com/gpu"}]
            }
        }
    )
    cluster = Cluster(make_node("g").cpu(4).gpus(4, topology=None), make_node("c").cpu(4))
    got = scores(NodeResourcesFit(args), cluster, make_pod().cpu("1").gpus(1))
    # g: cpu 75 x 3 + gpu (4 - 1) * 100 // 4 = 75 -> 75; c has no GPUs: cpu alone -> 75
    assert got == {"g": 75, "c": 75}
    got = scores(NodeResourcesFit(args), cluster, make_pod().cpu("2").gpus(1))
    assert got == {"g": (50 * 3 + 75) // 4, "c": 50}


def test_node_totals_follow_pod_changes() -> None:
    cluster = score_cluster()
    plugin = NodeResourcesFit()
    pod = make_pod().cpu("1").memory("1Gi")
    assert scores(plugin, cluster, pod)["best-effort"] == 70
    cluster.cache.remove_pod("uid-be")
    assert scores(plugin, cluster, pod)["best-effort"] == 74


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"scoringStrategy": {"type": "Balanced"}}, "scoringStrategy.type"),
        (
            {"scoringStrategy": {"resources": [{"name": "cpu", "weight": 0}]}},
            "weight: must be >= 1",
        ),
        ({"scoringStrategy": {"resources": [{"name": "cpu"}, {"name": "cpu"}]}}, "more than once"),
        ({"ignoredResourceGroups": ["example.com/x"]}, "cannot contain '/'"),
        ({"ignored": []}, "unknown field"),
    ],
)
def test_bad_args_are_config_errors(args: dict[str, Any], message: str) -> None:
    import json

    config = parse_config(
        "apiVersion: gpusched.io/v1alpha1\nkind: SchedulerConfiguration\n"
        f"profiles: [{{pluginConfig: [{{name: NodeResourcesFit, args: {json.dumps(args)}}}]}}]\n"
    )
    with pytest.raises(ConfigError, match=message):
        build_frameworks(config, in_tree())


def test_requeued_when_a_bound_pod_goes() -> None:
    pod_event, _ = NodeResourcesFit().events_to_register()
    hint = pod_event.queueing_hint_fn
    assert hint is not None
    pending = make_pod().cpu("1").obj()
    bound = make_pod("b").on("n").obj()
    unbound = make_pod("u").obj()
    done = make_pod("b").on("n").phase("Succeeded").obj()
    assert hint(pending, bound, None) == QueueingHint.QUEUE
    assert hint(pending, unbound, None) == QueueingHint.QUEUE_SKIP
    assert hint(pending, bound, done) == QueueingHint.QUEUE
    assert hint(pending, bound, bound) == QueueingHint.QUEUE_SKIP
