"""GPUFit: whole-GPU requests, the device choice on real fleet topologies, and the score."""

from __future__ import annotations

from collections.abc import Hashable
from itertools import combinations
from typing import Any

import pytest
from builders import Cluster, NodeBuilder, PodBuilder, make_node, make_pod, run_cycle

from gpusched.annotations import (
    CONTIGUOUS,
    GPU_IDS,
    MIN_BANDWIDTH_GBPS,
    PRIORITY,
    TOPOLOGY,
    Assignment,
)
from gpusched.cache import NodeInfo, pod_requests
from gpusched.framework import (
    DEVICE_ASSIGNMENT,
    SKIP,
    SUCCESS,
    Code,
    CycleState,
    Framework,
    PluginConfig,
    QueueingHint,
    SignPlugin,
    Status,
    build_frameworks,
    default_config,
    in_tree,
)
from gpusched.inventory import RESOURCE_GPU
from gpusched.plugins import gpu_fit
from gpusched.plugins.gpu_fit import (
    GPU_CHOICES,
    NAME,
    REASON_GPUS_IN_CONFLICT,
    REASON_INSUFFICIENT_FREE_GPUS,
    REASON_INSUFFICIENT_GPU_RESOURCE,
    REASON_INVALID_NODE,
    REASON_TOO_FEW_GPUS,
    GPUChoice,
    GPUFit,
    GPUFitArgs,
    choice_for,
)
from gpusched.topology import SetRule, build_topology, selection, set_score
from gpusched.topology.selection import NO_RULE

DGX = "dgx-v100-000"  # the node of Cluster.fleet("dgx-v100", nodes=1)


def links(info: NodeInfo) -> dict[tuple[int, int], int]:
    """NVLinks per GPU pair, from the node's inventory."""
    inventory = info.inventory
    assert inventory is not None
    return {(link.a, link.b): link.nvlinks for link in inventory.links}


def choose(
    info: NodeInfo, pod: PodBuilder, plugin: GPUFit | None = None
) -> tuple[Status, GPUChoice | None]:
    plugin = plugin or GPUFit()
    state = CycleState()
    _, status = plugin.pre_filter(state, pod.obj())
    assert status is SUCCESS, status
    status = plugin.filter(state, pod.obj(), info)
    return status, choice_for(state, info.name)


@pytest.fixture
def fw() -> Framework:
    return build_frameworks(default_config(), in_tree())["gpusched"]


def framework_on(cluster: Cluster, **gpu_fit: Any) -> Framework:
    """The default profile (GPUFit's args ``gpu_fit``) with the cluster's snapshot as the node
    lister, as the scheduler builds it: topologyFirst learns the layouts from it."""
    config = default_config()
    profile = config.profiles[0].model_copy(
        update={"plugin_config": [PluginConfig(name=NAME, args=gpu_fit)]}
    )
    config = config.model_copy(update={"profiles": [profile]})
    return build_frameworks(config, in_tree(), node_lister=cluster.snapshot())["gpusched"]


def warm(plugin: GPUFit, nodes: list[NodeInfo]) -> None:
    """Let a GPUFit built without a scheduler meet the nodes' layouts (a scheduler's GPUFit
    learns them from the snapshot): Filter a 1-GPU pod on each node."""
    state = CycleState()
    pod = make_pod("warm-up").gpus(1).obj()
    plugin.pre_filter(state, pod)
    for info in nodes:
        plugin.filter(state, pod, info)


# -- the choice on a DGX-1 (hybrid cube-mesh) --------------------------------------------------


def test_two_gpus_get_an_nv2_pair() -> None:
    info = Cluster.fleet("dgx-v100", nodes=1).node(DGX)
    status, choice = choose(info, make_pod().gpus(2))
    assert status is SUCCESS
    assert choice is not None
    assert len(choice.gpu_ids) == 2
    assert links(info)[choice.gpu_ids] == 2  # NV2
    assert choice.gpu_ids == (2, 3)  # NV2 behind one PCIe switch: the best pair of all


def test_four_gpus_get_a_fully_nvlinked_quad() -> None:
    info = Cluster.fleet("dgx-v100", nodes=1).node(DGX)
    _, choice = choose(info, make_pod().gpus(4))
    assert choice is not None
    assert choice.gpu_ids == (0, 1, 2, 3)
    assert all(links(info)[pair] > 0 for pair in combinations(choice.gpu_ids, 2))
    inventory = info.inventory
    assert inventory is not None
    graph = build_topology(range(8), inventory.links)
    assert choice.topology_score == set_score(graph, choice.gpu_ids)
    assert choice.uuids == tuple(inventory.gpus[i].uuid for i in choice.gpu_ids)
    assert choice.vram_mib == (32510,) * 4
    assert (choice.free_after, choice.whole_gpus) == (4, 8)


@pytest.mark.parametrize(
    ("busy", "n", "expected"),
    [
        ([0, 1, 2, 3], 4, (4, 5, 6, 7)),
        ([0, 1, 2, 3], 2, (6, 7)),
        ([2, 3], 2, (6, 7)),
        ([2, 3, 6, 7], 2, (0, 4)),  # NV2 across the quads beats NV1 behind a switch
        ([0, 1, 2, 3, 4, 5, 6], 1, (7,)),
        ([0, 1, 2], 1, (3,)),
        ([], 1, (0,)),
        ([], 8, tuple(range(8))),
    ],
)
def test_busy_gpus_are_skipped(busy: list[int], n: int, expected: tuple[int, ...]) -> None:
    cluster = Cluster.fleet("dgx-v100", nodes=1)
    if busy:
        cluster.bind(make_pod("busy").gpus(len(busy)).on(DGX).assigned(busy))
    info = cluster.node(DGX)
    status, choice = choose(info, make_pod().gpus(n))
    assert status is SUCCESS
    assert choice is not None
    assert choice.gpu_ids == expected
    assert not set(choice.gpu_ids) & set(busy)


def test_inferred_holders_are_busy_too() -> None:
    # Bound by someone else, no annotations: the cache books the lowest free GPUs.
    cluster = Cluster.fleet("dgx-v100", nodes=1).bind(make_pod("other").gpus(4).on(DGX))
    _, choice = choose(cluster.node(DGX), make_pod().gpus(4))
    assert choice is not None
    assert choice.gpu_ids == (4, 5, 6, 7)


def test_one_gpu_goes_where_it_breaks_the_least() -> None:
    # Free: 0, 1, 4, 6. Pair scores among them: 0-1 150, 0-4 210, 4-6 130, the rest 10 (PCIe
    # across sockets). GPU 6 is the least connected (150 in all), so it goes, leaving the NV2
    # pair 0-4 for a 2-GPU pod.
    cluster = Cluster.fleet("dgx-v100", nodes=1).bind(
        make_pod("busy").gpus(4).on(DGX).assigned([2, 3, 5, 7])
    )
    info = cluster.node(DGX)
    _, choice = choose(info, make_pod().gpus(1))
    assert choice is not None
    free = [0, 1, 4, 6]
    inventory = info.inventory
    assert inventory is not None
    graph = build_topology(range(8), inventory.links)

    def degree(g: int) -> int:
        return sum(set_score(graph, [g, h]) for h in free if h != g)

    assert degree(choice.gpu_ids[0]) == min(degree(g) for g in free)
    assert choice.gpu_ids == (6,)


# -- other topologies ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("node", "n", "expected", "score"),
    [
        (make_node().gpus(8, topology="nvswitch"), 2, (0, 1), 1820),  # same NUMA node
        (make_node().gpus(8, topology="nvswitch"), 4, (0, 1, 2, 3), 6 * 1820),
        (make_node().gpus(8, topology="bridged-pairs"), 2, (0, 1), 450),  # NV4 bridge + PIX
        (make_node().gpus(8, topology="pcie"), 2, (0, 1), 50),
        (make_node().gpus(4, topology=None), 2, (0, 1), 0),  # anonymous: lowest indices
    ],
)
def test_other_topologies(node: NodeBuilder, n: int, expected: tuple[int, ...], score: int) -> None:
    status, choice = choose(Cluster(node).node("n"), make_pod().gpus(n))
    assert status is SUCCESS
    assert choice is not None
    assert (choice.gpu_ids, choice.topology_score) == (expected, score)


def test_anonymous_gpus_have_no_uuids() -> None:
    cluster = Cluster(make_node().gpus(4, topology=None)).bind(make_pod("b").gpus(1).on("n"))
    _, choice = choose(cluster.node("n"), make_pod().gpus(2))
    assert choice == GPUChoice((1, 2), (), (0, 0), 0, 1, 4)
    assert choice.to_assignment("r1") == Assignment((1, 2), (), (0, 0), "r1")


# -- the search, through the plugin (the search itself: tests/topology/test_selection.py) -----


def test_the_search_turns_greedy_past_max_combinations(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real_best, real_greedy = selection.best_gpu_set, selection.greedy_gpu_set

    def best(*args: Any) -> Any:
        calls.append("exhaustive")
        return real_best(*args)

    def greedy(*args: Any) -> Any:
        calls.append("greedy")
        return real_greedy(*args)

    monkeypatch.setattr(selection, "best_gpu_set", best)
    monkeypatch.setattr(selection, "greedy_gpu_set", greedy)
    info = Cluster.fleet("dgx-v100", nodes=1).node(DGX)
    plugin = GPUFit(GPUFitArgs(max_combinations=69))  # C(8, 4) = 70
    _, choice = choose(info, make_pod().gpus(4), plugin)
    assert choice is not None
    assert choice.gpu_ids == (0, 1, 2, 3)
    _, choice = choose(info, make_pod().gpus(2), plugin)  # C(8, 2) = 28: exhaustive
    assert calls == ["greedy", "exhaustive"]
    _, choice = choose(info, make_pod().gpus(4), plugin)  # memoised
    assert calls == ["greedy", "exhaustive"]


def test_graphs_are_built_once_per_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[int] = []
    real = build_topology

    def counting(*args: Any) -> Any:
        built.append(1)
        return real(*args)

    monkeypatch.setattr(gpu_fit, "build_topology", counting)
    cluster = Cluster.fleet("dgx-v100", nodes=4)
    plugin = GPUFit()
    for _ in range(2):  # two cycles
        for info in cluster.nodes():
            choose(info, make_pod().gpus(2), plugin)
    assert len(built) == 1  # four identical nodes, one graph
    # A node whose inventory changes to another layout gets its own graph.
    _, inventory = make_node("dgx-v100-001").gpus(8, topology="pcie").build()
    assert inventory is not None
    cluster.cache.set_inventory("dgx-v100-001", inventory)
    _, choice = choose(cluster.node("dgx-v100-001"), make_pod().gpus(2), plugin)
    assert len(built) == 2
    assert choice is not None
    assert choice.topology_score == 50


# -- Filter's reasons --------------------------------------------------------------------------

MIG_NODE = make_node().gpus(4, topology="pcie", product="NVIDIA H100 PCIe", mig=["1g.10gb"] * 7)

REJECTIONS: list[tuple[str, NodeBuilder, list[PodBuilder], PodBuilder, Code, str]] = [
    (
        "no GPUs at all",
        make_node(),
        [],
        make_pod().gpus(1),
        Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
        REASON_TOO_FEW_GPUS,
    ),
    (
        "fewer GPUs than asked",
        make_node().gpus(4),
        [],
        make_pod().gpus(8),
        Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
        REASON_TOO_FEW_GPUS,
    ),
    (
        "all MIG",
        MIG_NODE,
        [],
        make_pod().gpus(1),
        Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
        REASON_TOO_FEW_GPUS,
    ),
    (
        "busy",
        make_node().gpus(8),
        [make_pod("b").gpus(7).on("n").assigned(range(7))],
        make_pod().gpus(2),
        Code.UNSCHEDULABLE,
        REASON_INSUFFICIENT_FREE_GPUS,
    ),
    (
        # A pod whose declared devices do not exist: it counts in requested, holds nothing.
        "requested beyond free devices",
        make_node().gpus(8),
        [make_pod("ghost").gpus(4).on("n").assigned([9, 10, 11, 12])],
        make_pod().gpus(6),
        Code.UNSCHEDULABLE,
        REASON_INSUFFICIENT_GPU_RESOURCE,
    ),
    (
        "a pod in conflict",
        make_node().gpus(8),
        [make_pod("ghost").gpus(4).on("n").assigned([9, 10, 11, 12])],
        make_pod().gpus(2),
        Code.UNSCHEDULABLE,
        REASON_GPUS_IN_CONFLICT,
    ),
    (
        "unreadable allocatable",
        make_node().gpus(8).allocatable("cpu", "lots"),
        [],
        make_pod().gpus(1),
        Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
        REASON_INVALID_NODE,
    ),
]


@pytest.mark.parametrize(
    ("what", "node", "bound", "pod", "code", "reason"),
    REJECTIONS,
    ids=[r[0] for r in REJECTIONS],
)
def test_filter_rejections(
    what: str,
    node: NodeBuilder,
    bound: list[PodBuilder],
    pod: PodBuilder,
    code: Code,
    reason: str,
) -> None:
    info = Cluster(node).bind(*bound).node("n")
    plugin = GPUFit()
    state = CycleState()
    assert plugin.pre_filter(state, pod.obj()) == (None, SUCCESS)
    status = plugin.filter(state, pod.obj(), info)
    assert (status.code, status.reasons, status.plugin) == (code, (reason,), NAME)
    assert choice_for(state, "n") is None
    assert state.read(GPU_CHOICES) == {}


@pytest.mark.parametrize(
    ("pod", "message"),
    [
        (make_pod().gpus(1).priority("urgent"), 'annotation gpusched.io/priority="urgent"'),
        (make_pod().priority(7), 'annotation gpusched.io/priority="7"'),
        (make_pod().gpus(1).annotate("gpusched.io/gpu-ids", "0,x"), "comma-separated GPU indices"),
        (make_pod().gpus(1).mig("1g.10gb"), "whole GPUs (nvidia.com/gpu) and MIG devices"),
        (make_pod().gpus(1).cpu("a lot"), "invalid resource requests"),
    ],
)
def test_prefilter_rejects_what_no_node_can_fix(pod: PodBuilder, message: str) -> None:
    result, status = GPUFit().pre_filter(CycleState(), pod.obj())
    assert result is None
    assert status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert status.plugin == NAME
    assert message in status.message()


def test_malformed_annotation_gives_the_clear_reason_through_the_framework(
    fw: Framework,
) -> None:
    cluster = Cluster.fleet("dgx-v100", nodes=1)
    result = run_cycle(fw, make_pod().gpus(2).priority("high").obj(), cluster.nodes())
    assert result.status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert result.status.plugin == NAME
    assert result.status.message() == (
        'annotation gpusched.io/priority="high" is not a priority: use an integer from 0 '
        "(highest) to 4 (lowest), or remove it for the default 0"
    )


def test_pods_without_gpus_skip_gpufit(fw: Framework) -> None:
    state = CycleState()
    assert GPUFit().pre_filter(state, make_pod().cpu("1").obj()) == (None, SKIP)
    assert GPU_CHOICES not in state
    assert choice_for(state, "n") is None
    cluster = Cluster(make_node("cpu-only"), make_node("gpu").gpus(8))
    result = run_cycle(fw, make_pod().cpu("1").obj(), cluster.nodes())
    assert result.feasible == ["cpu-only", "gpu"]
    assert NAME in result.state.skip_filter_plugins
    assert NAME in result.state.skip_score_plugins


# -- Score ------------------------------------------------------------------------------------


def test_bin_packing_prefers_the_fuller_node(fw: Framework) -> None:
    cluster = Cluster.fleet("dgx-v100", nodes=2).bind(
        make_pod("busy").gpus(4).on("dgx-v100-001").assigned([0, 1, 2, 3])
    )
    for n in (1, 2, 4):
        result = run_cycle(fw, make_pod().gpus(n).obj(), cluster.nodes())
        assert result.best == "dgx-v100-001", (n, result.scores)
    result = run_cycle(fw, make_pod().gpus(8).obj(), cluster.nodes())
    assert result.feasible == ["dgx-v100-000"]  # the big job gets the whole node left


@pytest.mark.parametrize(
    ("busy", "expected"),
    [
        ([], 43),  # set_quality(NV2+PIX = 250) = 61, p = 2/8: (61 + 25) / 2
        ([0, 1, 2, 3], 68),  # NV2 pair {6, 7} left (61) and p = 6/8
        ([1, 2, 3, 4, 6, 7], 50),  # only {0, 5} left, PCIe across sockets (SYS: 0), p = 1
    ],
)
def test_score_formula(busy: list[int], expected: int) -> None:
    """The weighted score (``topologyFirst: false``)."""
    cluster = Cluster.fleet("dgx-v100", nodes=2)
    if busy:
        cluster.bind(make_pod("busy").gpus(len(busy)).on("dgx-v100-001").assigned(busy))
    plugin = GPUFit(GPUFitArgs(topology_first=False))
    pod = make_pod().gpus(2).obj()
    state = CycleState()
    plugin.pre_filter(state, pod)
    infos = cluster.nodes()
    for info in infos:
        assert plugin.filter(state, pod, info) is SUCCESS
    assert plugin.pre_score(state, pod, infos) is SUCCESS
    assert plugin.score(state, pod, cluster.node("dgx-v100-001")) == (expected, SUCCESS)


def test_topology_beats_packing_across_products() -> None:
    # A 4-GPU pod: an NVSwitch H100 node (empty) against a DGX-1 with only a poor quad left.
    cluster = Cluster(
        make_node("v100").dgx1(), make_node("h100").gpus(8, topology="nvswitch")
    ).bind(make_pod("busy").gpus(4).on("v100").assigned([0, 2, 5, 7]))
    fw = framework_on(cluster)
    result = run_cycle(fw, make_pod().gpus(4).obj(), cluster.nodes())
    assert result.best == "h100"


def test_weights_are_args() -> None:
    packing_only = GPUFit(GPUFitArgs(topology_weight=0))
    cluster = Cluster.fleet("dgx-v100", nodes=1).bind(
        make_pod("busy").gpus(6).on(DGX).assigned([1, 2, 3, 4, 6, 7])
    )
    pod = make_pod().gpus(2).obj()
    state = CycleState()
    packing_only.pre_filter(state, pod)
    info = cluster.node(DGX)
    packing_only.filter(state, pod, info)
    packing_only.pre_score(state, pod, [info])
    assert packing_only.score(state, pod, info) == (100, SUCCESS)
    with pytest.raises(ValueError, match="cannot both be 0"):
        GPUFitArgs(topology_weight=0, bin_packing_weight=0)


# -- SignPod ----------------------------------------------------------------------------------

DEFAULT = GPUFitArgs()
PACKING_ONLY = GPUFitArgs(topology_weight=0)
WEIGHED = GPUFitArgs(topology_first=False)
MIG_ONLY = make_pod().mig("1g.10gb")

SIGNATURES: list[tuple[str, PodBuilder, GPUFitArgs, Hashable | None]] = [
    # PreFilter Skips: Filter and Score never run, so these pods are all alike.
    ("no requests", make_pod(), DEFAULT, (NAME, 0)),
    ("cpu and memory", make_pod().cpu("2").memory("1Gi"), DEFAULT, (NAME, 0)),
    ("no GPUs, a priority", make_pod().cpu("1").priority(3), DEFAULT, (NAME, 0)),
    ("zero GPUs", make_pod().gpus(0), DEFAULT, (NAME, 0)),
    ("MIG devices only", MIG_ONLY, DEFAULT, (NAME, "mig", "1g.10gb", 1, 0)),
    # One GPU: the score is bin packing only, a function of the node.
    ("one GPU", make_pod().gpus(1), DEFAULT, (NAME, 1, 0)),
    ("one GPU and cpu", make_pod().gpus(1).cpu("4").memory("8Gi"), DEFAULT, (NAME, 1, 0)),
    ("GPU in a 2nd container", make_pod().container({RESOURCE_GPU: "1"}), DEFAULT, (NAME, 1, 0)),
    ("one GPU, priority 3", make_pod().gpus(1).priority(3), DEFAULT, (NAME, 1, 3)),
    ("one GPU, packing only", make_pod().gpus(1), PACKING_ONLY, (NAME, 1, 0)),
    # N >= 2: the topology term is on a fixed scale (set_quality), a function of the node.
    # N >= 2: the rule, whether it is required, and the ladder's version (topologyFirst;
    # -1 without): GPUFit has met no layout yet here, so 0.
    ("two GPUs", make_pod().gpus(2), DEFAULT, (NAME, 2, 0, NO_RULE, False, 0)),
    ("eight GPUs", make_pod().gpus(8).priority(1), DEFAULT, (NAME, 8, 1, NO_RULE, False, 0)),
    ("two GPUs, weighed", make_pod().gpus(2), WEIGHED, (NAME, 2, 0, NO_RULE, False, -1)),
    ("two GPUs, packing only", make_pod().gpus(2), PACKING_ONLY, (NAME, 2, 0, NO_RULE, False, -1)),
    (
        "eight GPUs, packing only",
        make_pod().gpus(8).priority(4),
        PACKING_ONLY,
        (NAME, 8, 4, NO_RULE, False, -1),
    ),
    (
        "four GPUs at 600 GB/s, required",
        make_pod().gpus(4).annotate(TOPOLOGY, "Required").annotate(MIN_BANDWIDTH_GBPS, "600"),
        DEFAULT,
        (NAME, 4, 0, SetRule(600.0), True, 0),
    ),
    (
        "four GPUs contiguous, preferred",
        make_pod().gpus(4).annotate(CONTIGUOUS, "true"),
        DEFAULT,
        (NAME, 4, 0, SetRule(contiguous=True), False, 0),
    ),
    ("Required alone", make_pod().gpus(4).annotate(TOPOLOGY, "Required"), DEFAULT, None),
    ("bad bandwidth", make_pod().gpus(4).annotate(MIN_BANDWIDTH_GBPS, "fast"), DEFAULT, None),
    # PreFilter rejects these: the full path gives the pod its message.
    ("bad priority", make_pod().gpus(1).priority("urgent"), PACKING_ONLY, None),
    ("bad priority, no GPUs", make_pod().priority(7), DEFAULT, None),
    ("bad GPU ids", make_pod().gpus(1).annotate(GPU_IDS, "0,x"), PACKING_ONLY, None),
    ("GPUs and MIG", make_pod().gpus(1).mig("1g.10gb"), PACKING_ONLY, None),
    ("bad quantity", make_pod().gpus(1).cpu("a lot"), PACKING_ONLY, None),
    # No GPU asked: PreFilter Skips (NodeResourcesFit reports the quantity).
    ("bad quantity, no GPUs", make_pod().cpu("a lot"), DEFAULT, (NAME, 0)),
]


def test_gpufit_is_a_sign_plugin() -> None:
    assert isinstance(GPUFit(), SignPlugin)


@pytest.mark.parametrize(
    ("what", "pod", "args", "fragment"), SIGNATURES, ids=[row[0] for row in SIGNATURES]
)
def test_sign_pod(what: str, pod: PodBuilder, args: GPUFitArgs, fragment: Hashable | None) -> None:
    plugin = GPUFit(args)
    signed = plugin.sign_pod(pod.obj())
    assert signed == fragment
    if signed is not None:
        hash(signed)
    # The fragment agrees with what PreFilter makes of the pod.
    _, status = plugin.pre_filter(CycleState(), pod.obj())
    if fragment == (NAME, 0):
        assert status is SKIP
    elif status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
        assert fragment is None
    else:
        assert status is SUCCESS
        gpus = pod_requests(pod.obj()).scalar.get(RESOURCE_GPU, 0)
        if gpus:
            assert fragment is not None  # every whole-GPU pod PreFilter accepts signs


@pytest.mark.parametrize(
    "pod",
    [
        {},
        {"metadata": None, "spec": None},
        {"metadata": {"annotations": "not a map"}},
        {"metadata": {"annotations": {PRIORITY: 3}}},
        {"spec": {"containers": 5}},
        {"spec": {"containers": [{"resources": {"requests": ["nvidia.com/gpu"]}}]}},
        {"spec": {"containers": [{"resources": {"requests": {RESOURCE_GPU: None}}}]}},
    ],
)
def test_sign_pod_never_raises(pod: dict[str, Any]) -> None:
    fragment = GPUFit().sign_pod(pod)
    try:
        _, status = GPUFit().pre_filter(CycleState(), pod)
    except Exception:
        assert fragment is None  # PreFilter will fail it on the full path
    else:
        assert fragment == ((NAME, 0) if status is SKIP else None), status


def signing_cluster() -> Cluster:
    """DGX-1s empty, half full and nearly full, an NVSwitch node, a 1-GPU node, a CPU node."""
    return (
        Cluster.fleet("dgx-v100", nodes=3)
        .add(make_node("h100").gpus(8, topology="nvswitch"))
        .add(make_node("single").gpus(1, topology="pcie"))
        .add(make_node("cpu"))
        .bind(
            make_pod("half").gpus(4).on("dgx-v100-001").assigned([0, 1, 2, 3]),
            make_pod("most").gpus(6).on("dgx-v100-002").assigned([1, 2, 3, 4, 6, 7]),
        )
    )


def evaluate(
    plugin: GPUFit, pod: dict[str, Any], nodes: list[NodeInfo], scored: set[str] | None = None
) -> tuple[dict[str, tuple[Code, tuple[str, ...]]], dict[str, int]]:
    """Filter on every node, then PreScore and Score over the feasible ones in ``scored``."""
    warm(plugin, nodes)
    state = CycleState()
    _, status = plugin.pre_filter(state, pod)
    assert status is SUCCESS
    statuses = {info.name: plugin.filter(state, pod, info) for info in nodes}
    feasible = [
        info
        for info in nodes
        if statuses[info.name] is SUCCESS and (scored is None or info.name in scored)
    ]
    assert plugin.pre_score(state, pod, feasible) is SUCCESS
    scores: dict[str, int] = {}
    for info in feasible:
        scores[info.name], status = plugin.score(state, pod, info)
        assert status is SUCCESS
    return {name: (s.code, s.reasons) for name, s in statuses.items()}, scores


ALIKE: list[tuple[PodBuilder, PodBuilder, GPUFitArgs]] = [
    (make_pod("a").gpus(1), make_pod("b").gpus(1).cpu("2").memory("4Gi"), DEFAULT),
    (make_pod("a").gpus(1).priority(2), make_pod("b").container({RESOURCE_GPU: "1"}).priority(2),
     DEFAULT),
    (make_pod("a").gpus(2), make_pod("b").gpus(2).cpu("8"), PACKING_ONLY),
    (make_pod("a").gpus(4), make_pod("b").gpus(4).memory("1Gi"), PACKING_ONLY),
]  # fmt: skip


@pytest.mark.parametrize(("first", "second", "args"), ALIKE)
def test_pods_signed_alike_filter_and_score_alike(
    first: PodBuilder, second: PodBuilder, args: GPUFitArgs
) -> None:
    """SignPlugin's contract: equal fragments, equal statuses and scores on every node; and a
    node's score does not depend on the other nodes of the cycle."""
    plugin = GPUFit(args)
    fragment = plugin.sign_pod(first.obj())
    assert fragment is not None
    assert plugin.sign_pod(second.obj()) == fragment
    nodes = signing_cluster().nodes()
    statuses, scores = evaluate(plugin, first.obj(), nodes)
    assert len(scores) >= 2  # more than one feasible node, with different scores
    assert len(set(scores.values())) >= 2
    assert evaluate(GPUFit(args), second.obj(), nodes) == (statuses, scores)
    for name, score in scores.items():
        assert evaluate(GPUFit(args), second.obj(), nodes, {name})[1] == {name: score}


@pytest.mark.parametrize(("args", "expected"), [(WEIGHED, 50), (DEFAULT, 24)])
def test_multi_gpu_scores_do_not_depend_on_the_other_nodes(args: GPUFitArgs, expected: int) -> None:
    """Why a pod asking N >= 2 GPUs with topology weighed is signed: a node scores the same
    whether it is scored with the others or alone."""
    nodes = signing_cluster().nodes()
    pod = make_pod().gpus(2).obj()
    _, together = evaluate(GPUFit(args), pod, nodes)
    _, alone = evaluate(GPUFit(args), pod, nodes, {"dgx-v100-002"})
    # Only {0, 5} is left there (PCIe across sockets, quality 0), and the node is full after:
    # weighed (0 + 100) / 2; topologyFirst: the lowest of 4 tiers (pairs by NVLinks: SYS or none
    # 0, NV1 44, NV2 57, NVSwitch 99; 101 // 4 = 25 points each), no GPU left free: 0 + 24.
    assert together["dgx-v100-002"] == alone["dgx-v100-002"] == expected


# -- what the scheduler does with the choice ---------------------------------------------------


def test_the_choice_is_assumed_and_the_next_pod_avoids_it(fw: Framework) -> None:
    cluster = Cluster.fleet("dgx-v100", nodes=1)
    pod = make_pod("first").gpus(2).obj()
    result = run_cycle(fw, pod, cluster.nodes())
    assert result.best == DGX
    choice = choice_for(result.state, DGX)
    assert choice is not None
    assignment = choice.to_assignment("res-1")
    assert assignment.reservation_uid == "res-1"
    cluster.cache.assume_pod(pod, DGX, assignment)
    second = run_cycle(fw, make_pod("second").gpus(2).obj(), cluster.nodes())
    chosen = choice_for(second.state, DGX)
    assert chosen is not None
    assert chosen.gpu_ids == (6, 7)  # the other NV2 pair behind one switch


def test_reserve_writes_the_choice_on_the_chosen_node_as_the_device_assignment() -> None:
    info = Cluster.fleet("dgx-v100", nodes=1).node(DGX)
    plugin = GPUFit()
    pod = make_pod().gpus(2).obj()
    state = CycleState()
    plugin.pre_filter(state, pod)
    plugin.filter(state, pod, info)
    choice = choice_for(state, DGX)
    assert choice is not None
    assert plugin.reserve(state, pod, DGX) is SUCCESS
    assert state.read(DEVICE_ASSIGNMENT) == choice.to_assignment()  # no reservation uid yet
    plugin.unreserve(state, pod, DGX)
    plugin.unreserve(state, pod, DGX)  # idempotent
    assert DEVICE_ASSIGNMENT not in state
    status = plugin.reserve(state, pod, "not-filtered")
    assert (status.code, status.plugin) == (Code.ERROR, NAME)


def test_reserve_writes_nothing_for_a_pod_without_gpus() -> None:
    state = CycleState()
    pod = make_pod().cpu("1").obj()
    GPUFit().pre_filter(state, pod)
    assert GPUFit().reserve(state, pod, "n") is SUCCESS
    assert DEVICE_ASSIGNMENT not in state


def test_choices_survive_a_cloned_state() -> None:
    info = Cluster.fleet("dgx-v100", nodes=1).node(DGX)
    plugin = GPUFit()
    pod = make_pod().gpus(2).obj()
    state = CycleState()
    plugin.pre_filter(state, pod)
    plugin.filter(state, pod, info)
    clone = state.clone()
    clone.read(GPU_CHOICES).clear()
    assert choice_for(state, DGX) is not None


def test_requeued_when_a_gpu_pod_goes() -> None:
    pod_event, node_event, inventory_event, _class_event = GPUFit().events_to_register()
    assert (node_event.event.resource, inventory_event.event.resource) == (
        "Node",
        "GPUNodeInventory",
    )
    hint = pod_event.queueing_hint_fn
    assert hint is not None
    pending = make_pod().gpus(1).obj()
    assert hint(pending, make_pod("g").gpus(1).on("n").obj(), None) == QueueingHint.QUEUE
    assert hint(pending, make_pod("a").on("n").assigned([0]).obj(), None) == QueueingHint.QUEUE
    assert hint(pending, make_pod("c").cpu("1").on("n").obj(), None) == QueueingHint.QUEUE_SKIP
    assert hint(pending, make_pod("u").gpus(1).obj(), None) == QueueingHint.QUEUE_SKIP
    done = make_pod("g").gpus(1).on("n").phase("Failed").obj()
    assert hint(pending, make_pod("g").gpus(1).on("n").obj(), done) == QueueingHint.QUEUE
