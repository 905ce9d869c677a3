"""GPUFit's score rules: which node (and GPU) wins, and why; and that every score is the node's
alone, so that every pod PreFilter accepts signs and batching places as a full cycle does.

Tables of (nodes, bound pods, the pod) with the node binpack picks and the one spread picks
(spread puts a share on the emptiest GPU of a node, so it opens an idle GPU wherever the node
has one, and scores ``100 -`` binpack's rule: the emptiest node; ``None`` where nodes tie),
then the whole-GPU topology term, then the equivalence
classes on a fleet of mixed layouts with multi-GPU pods and ``topologyWeight`` 1.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import pytest
from builders import (
    H100_MIB,
    V100,
    V100_MIB,
    Cluster,
    NodeBuilder,
    PodBuilder,
    make_node,
    make_pod,
    run_cycle,
)
from test_equivalence_changes import _framework, _place
from test_gpu_fit import warm

from gpusched.cache import NodeInfo, Snapshot
from gpusched.equivalence import EquivalenceCache
from gpusched.framework import SUCCESS, CycleState
from gpusched.plugins.gpu_fit import NAME, GPUFit, GPUFitArgs, choice_for
from gpusched.topology import set_quality
from gpusched.topology.selection import NO_RULE

GI = 1024
BINPACK = GPUFitArgs()
SPREAD = GPUFitArgs(strategy="spread")


def pcie(name: str, gpus: int = 2) -> NodeBuilder:
    return make_node(name).gpus(gpus, topology="pcie")


def v100(name: str, gpus: int = 2) -> NodeBuilder:
    return make_node(name).gpus(gpus, topology="pcie", product=V100, memory_mib=V100_MIB)


def mig(name: str, layout: list[str], gpus: int = 2) -> NodeBuilder:
    return make_node(name).gpus(gpus, topology="pcie", mig=layout)


SMALL = ["1g.10gb"] * 7
MEDIUM = ["2g.20gb", "2g.20gb", "2g.20gb", "1g.10gb"]


def share(name: str, on: str, gpu: int, gib: int) -> PodBuilder:
    return make_pod(name).shared(1, f"{gib}Gi").on(on).assigned([gpu], vram_mib=[gib * GI])


def whole(name: str, on: str, *gpus: int) -> PodBuilder:
    return (
        make_pod(name).gpus(len(gpus)).on(on).assigned(list(gpus), vram_mib=[H100_MIB] * len(gpus))
    )


def scores(args: GPUFitArgs, pod: dict[str, Any], nodes: list[NodeInfo]) -> dict[str, int]:
    """Filter on every node, then PreScore and Score the feasible ones (each node's score)."""
    plugin = GPUFit(args)
    warm(plugin, nodes)
    state = CycleState()
    _, status = plugin.pre_filter(state, pod)
    assert status is SUCCESS, status
    feasible = [info for info in nodes if plugin.filter(state, pod, info) is SUCCESS]
    assert plugin.pre_score(state, pod, feasible) is SUCCESS
    out = {}
    for info in feasible:
        out[info.name], status = plugin.score(state, pod, info)
        assert status is SUCCESS, (info.name, status)
        assert 0 <= out[info.name] <= 100
    return out


def winner(by_node: dict[str, int]) -> str:
    top = max(by_node.values())
    winners = [name for name, s in by_node.items() if s == top]
    assert len(winners) == 1, by_node
    return winners[0]


# -- shared and exclusive pods --------------------------------------------------------------


@dataclass
class Case:
    what: str
    nodes: list[NodeBuilder]
    bound: list[PodBuilder]
    pod: PodBuilder
    binpack: str
    spread: str | None
    binpack_scores: dict[str, int] = field(default_factory=dict)


SHARED: list[Case] = [
    Case(
        # The bug the rule fixes: opening GPU 1 of a half-busy node used to tie or win.
        "joining a partly used GPU beats opening an idle GPU on a busier node",
        [pcie("joins"), pcie("opens", gpus=4)],
        [share("s", "joins", 0, 40), *(whole(f"w{i}", "opens", i) for i in range(3))],
        make_pod().shared(1, "10Gi"),
        binpack="joins",
        spread="joins",  # it opens GPU 1 on the emptier node (1 of 2 GPUs in use, not 3 of 4)
        # 50 + (50 of 80Gi = 62) // 2; opens: 12 * 3 // 4 + 36 * (70 of 80Gi) // 80.
        binpack_scores={"joins": 81, "opens": 9 + 36 * (H100_MIB - 10 * GI) // H100_MIB},
    ),
    Case(
        "among partly used GPUs, the tightest fit (fullest once the pod holds its share)",
        [pcie("roomy"), pcie("tight")],
        [share("a", "roomy", 0, 20), share("b", "tight", 0, 60)],
        make_pod().shared(1, "10Gi"),
        binpack="tight",
        spread=None,  # GPU 1 of either
    ),
    Case(
        "no GPU to join: open one on the busiest node, keeping idle nodes whole",
        [pcie("idle", gpus=4), pcie("busy", gpus=4)],
        [whole("w", "busy", 0, 1)],
        make_pod().shared(1, "10Gi"),
        binpack="busy",
        spread="idle",
    ),
    Case(
        "no GPU to join, nodes alike: open the GPU that keeps the most VRAM for later shares",
        [v100("v100"), pcie("h100")],
        [],
        make_pod().shared(1, "30Gi"),
        binpack="h100",
        spread="h100",  # spread mirrors the node half only: room spares interference too
    ),
    Case(
        "a full GPU is no GPU to join: the other node's partly used GPU is",
        [pcie("full"), pcie("joins")],
        [share("a", "full", 0, 75), share("b", "joins", 0, 10)],
        make_pod().shared(1, "10Gi"),
        binpack="joins",
        spread=None,
    ),
    Case(
        "exclusive shares always open an idle GPU: on the busiest node",
        [pcie("idle", gpus=4), pcie("busy", gpus=4)],
        [share("s", "busy", 0, 10)],
        make_pod().shared(1, "10Gi").exclusive(),
        binpack="busy",
        spread="idle",
    ),
]


@pytest.mark.parametrize("case", SHARED, ids=[c.what for c in SHARED])
def test_shared_score_rules(case: Case) -> None:
    cluster = Cluster(*case.nodes).bind(*case.bound)
    nodes = cluster.nodes()
    binpack = scores(BINPACK, case.pod.obj(), nodes)
    spread = scores(SPREAD, case.pod.obj(), nodes)
    assert winner(binpack) == case.binpack, binpack
    if case.spread is not None:
        assert winner(spread) == case.spread, spread
    if case.binpack_scores:
        assert binpack == case.binpack_scores


def test_binpack_share_goes_on_the_fullest_gpu_that_fits() -> None:
    cluster = Cluster(pcie("n", gpus=4)).bind(share("a", "n", 1, 20), share("b", "n", 3, 50))
    plugin = GPUFit(BINPACK)
    pod = make_pod().shared(1, "20Gi").obj()
    state = CycleState()
    plugin.pre_filter(state, pod)
    assert plugin.filter(state, pod, cluster.node("n")) is SUCCESS
    choice = choice_for(state, "n")
    assert choice is not None
    assert choice.gpu_ids == (3,)


# -- MIG ---------------------------------------------------------------------------------------


def held_mig(cluster: Cluster, node: str, gpu: int, count: int, profile: str) -> list[PodBuilder]:
    """Bound pods holding the first ``count`` MIG devices of ``profile`` on GPU ``gpu``."""
    device = cluster.node(node).ledger.devices[gpu]
    instances = [m for m in device.mig if m.profile == profile][:count]
    return [
        make_pod(f"{node}-{gpu}-{i}")
        .mig(profile)
        .on(node)
        .assigned([gpu], uuids=[m.uuid], vram_mib=[m.memory_mib])
        for i, m in enumerate(instances)
    ]


MIG_CASES: list[
    tuple[str, list[NodeBuilder], list[tuple[str, int, int, str]], str, str, str | None]
] = [
    # (what, nodes, held (node, gpu, count, profile), pod's profile, binpack, spread)
    (
        "joining a partly used MIG GPU beats opening one on a node with more held",
        [mig("joins", SMALL), mig("opens", SMALL)],
        [("joins", 0, 1, "1g.10gb"), ("opens", 0, 7, "1g.10gb")],
        "1g.10gb",
        "joins",
        None,  # spread opens GPU 1 of either
    ),
    (
        "opening: the GPU that keeps the most devices of the profile free",
        [mig("medium", MEDIUM), mig("small", SMALL)],
        [],
        "1g.10gb",
        "small",
        "small",
    ),
    (
        "opening: on the node with MIG GPUs in use already",
        [mig("idle", MEDIUM), mig("busy", MEDIUM)],
        [("busy", 0, 3, "2g.20gb")],
        "2g.20gb",
        "busy",
        "idle",
    ),
]


@pytest.mark.parametrize(
    ("what", "nodes", "held", "profile", "binpack", "spread"),
    MIG_CASES,
    ids=[c[0] for c in MIG_CASES],
)
def test_mig_score_rules(
    what: str,
    nodes: list[NodeBuilder],
    held: list[tuple[str, int, int, str]],
    profile: str,
    binpack: str,
    spread: str | None,
) -> None:
    cluster = Cluster(*nodes)
    for node, gpu, count, held_profile in held:
        cluster.bind(*held_mig(cluster, node, gpu, count, held_profile))
    infos = cluster.nodes()
    pod = make_pod().mig(profile).obj()
    assert winner(scores(BINPACK, pod, infos)) == binpack
    if spread is not None:
        assert winner(scores(SPREAD, pod, infos)) == spread


# -- whole GPUs: the topology term on a fixed scale ------------------------------------------

QUALITY = [
    ("fewer than two GPUs", 0, 1, 0),
    ("one SYS hop", 10, 2, 0),
    ("NODE", 20, 2, 13),
    ("PHB", 30, 2, 21),
    ("PIX", 50, 2, 30),
    ("NV1 + PIX", 150, 2, 51),
    ("NV2 + PIX (DGX-1)", 250, 2, 61),
    ("NV4 + PIX (A40 bridge)", 450, 2, 72),
    ("NV18 + NODE (DGX H100)", 1820, 2, 99),
    ("NV18 + PIX, the ceiling", 1850, 2, 100),
    ("above the ceiling", 5000, 2, 100),
    ("no link at all", 0, 4, 0),
    ("four GPUs, mean NV2 + PIX", 6 * 250, 4, 61),
]


@pytest.mark.parametrize(("what", "score", "n", "quality"), QUALITY, ids=[q[0] for q in QUALITY])
def test_set_quality(what: str, score: int, n: int, quality: int) -> None:
    assert set_quality(score, n) == quality


def test_set_quality_rejects_negatives() -> None:
    with pytest.raises(ValueError, match="score >= 0"):
        set_quality(-1, 2)


WHOLE: list[tuple[str, list[NodeBuilder], list[PodBuilder], int, GPUFitArgs, str]] = [
    # (what, nodes, bound, N, args, the winner)
    (
        "nodes alike: the better-connected product wins",
        [pcie("pcie", 8), make_node("nvswitch").gpus(8)],
        [],
        2,
        BINPACK,
        "nvswitch",
    ),
    (
        "NVLink bridge over plain PCIe",
        [pcie("pcie", 8), make_node("a40").gpus(8, topology="bridged-pairs")],
        [],
        2,
        BINPACK,
        "a40",
    ),
    (
        "topology first: an NVSwitch pair over a fuller DGX-1's NV2 pair",
        [make_node("dgx1").dgx1(), make_node("nvswitch").gpus(8)],
        [make_pod("busy").gpus(4).on("dgx1").assigned([0, 1, 2, 3])],
        2,
        BINPACK,
        "nvswitch",
    ),
    (
        "weighed: a DGX-1's NV2 pair over an NVSwitch node when the DGX-1 is fuller",
        [make_node("dgx1").dgx1(), make_node("nvswitch").gpus(8)],
        [make_pod("busy").gpus(4).on("dgx1").assigned([0, 1, 2, 3])],
        2,
        GPUFitArgs(topology_first=False),
        "dgx1",
    ),
    (
        "topology first, equal sets: the fuller node (best fit)",
        [make_node("a").dgx1(), make_node("b").dgx1()],
        [make_pod("busy").gpus(2).on("b").assigned([0, 1])],
        2,
        BINPACK,
        "b",
    ),
    (
        "4 GPUs: an empty NVSwitch node over a DGX-1's poor quad (topology weighed)",
        [make_node("dgx1").dgx1(), make_node("nvswitch").gpus(8)],
        [make_pod("busy").gpus(4).on("dgx1").assigned([0, 2, 5, 7])],
        4,
        GPUFitArgs(topology_weight=2, topology_first=False),
        "nvswitch",
    ),
    (
        "4 GPUs on DGX-1s: a free NVLinked quad over a fuller node's 6-NVLink quad (issue 11)",
        [make_node("empty").dgx1(), make_node("busy").dgx1()],
        [make_pod("busy").gpus(4).on("busy").assigned([2, 3, 6, 7])],
        4,
        BINPACK,
        "empty",
    ),
    (
        "topology weighed 0: the fuller node, whatever its links",
        [make_node("dgx1").dgx1(), make_node("nvswitch").gpus(8)],
        [make_pod("busy").gpus(4).on("dgx1").assigned([0, 2, 5, 7])],
        4,
        GPUFitArgs(topology_weight=0),
        "dgx1",
    ),
]


@pytest.mark.parametrize(
    ("what", "nodes", "bound", "n", "args", "expected"), WHOLE, ids=[w[0] for w in WHOLE]
)
def test_whole_gpu_score_rules(
    what: str,
    nodes: list[NodeBuilder],
    bound: list[PodBuilder],
    n: int,
    args: GPUFitArgs,
    expected: str,
) -> None:
    infos = Cluster(*nodes).bind(*bound).nodes()
    assert winner(scores(args, make_pod().gpus(n).obj(), infos)) == expected


def test_whole_gpu_score_formula() -> None:
    # DGX-1 with 4 GPUs busy: the NV2 pair {6, 7} (quality 61) and 6 of 8 in use after.
    info = (
        Cluster(make_node("dgx1").dgx1())
        .bind(make_pod("busy").gpus(4).on("dgx1").assigned([0, 1, 2, 3]))
        .node("dgx1")
    )
    by_weights = {
        (1, 1): (61 + 75) // 2,
        (2, 1): (2 * 61 + 75) // 3,
        (1, 0): 61,
        (0, 1): 75,
    }
    for (wt, wp), expected in by_weights.items():
        args = GPUFitArgs(topology_weight=wt, bin_packing_weight=wp, topology_first=False)
        assert scores(args, make_pod().gpus(2).obj(), [info]) == {"dgx1": expected}, (wt, wp)


# -- signing, and batching == a full cycle -------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 4, 8])
@pytest.mark.parametrize("weights", [(1, 1), (3, 1), (1, 0), (0, 1)])
def test_every_whole_gpu_pod_signs(n: int, weights: tuple[int, int]) -> None:
    plugin = GPUFit(GPUFitArgs(topology_weight=weights[0], bin_packing_weight=weights[1]))
    signed = plugin.sign_pod(make_pod().gpus(n).priority(2).obj())
    ladder = 0 if weights[0] else -1  # topologyFirst's ladder version (no layout met yet)
    assert signed == ((NAME, n, 2) if n == 1 else (NAME, n, 2, NO_RULE, False, ladder))


LAYOUTS = [
    lambda b: b.gpus(8, topology="nvswitch"),
    lambda b: b.dgx1(),
    lambda b: b.gpus(8, topology="bridged-pairs"),
    lambda b: b.gpus(4, topology="pcie"),
    lambda b: b.gpus(4, topology=None),
]


@pytest.mark.parametrize("seed", range(4))
def test_multi_gpu_pods_batched_as_a_full_cycle_places_them(seed: int) -> None:
    """Multi-GPU whole pods (topology weighed) take the equivalence-class path, and its node
    scores what the best node of a full cycle over every node scores, while pods bind and
    leave. ``_place`` (test_equivalence_changes) checks each placement."""
    rng = random.Random(seed)
    builders = []
    for i in range(16):
        b = make_node(f"n{i:02d}")
        rng.choice(LAYOUTS)(b)
        builders.append(b)
    cluster = Cluster(*builders)
    cache = cluster.cache
    snapshot = Snapshot()
    fw = _framework(1)
    eq = EquivalenceCache(random.Random(seed))
    placed: list[dict[str, Any]] = []
    batched = 0
    for step in range(120):
        if placed and rng.random() < 0.25:
            cache.forget_pod(placed.pop(rng.randrange(len(placed))))
        else:
            pod = make_pod(f"p{step}", uid=f"uid-{step}").gpus(rng.choice([1, 2, 4, 8])).obj()
            assert fw.sign_pod(pod) is not None
            cache.update_snapshot(snapshot)
            used, node, state = _place(fw, eq, snapshot, pod)
            batched += used
            if node is not None:
                choice = choice_for(state, node)
                assert choice is not None
                cache.assume_pod(pod, node, choice.to_assignment(f"r{step}"))
                placed.append(pod)
        cache.update_snapshot(snapshot)
        eq._check()
    assert batched > 60


# -- quality: binpack against first-fit ------------------------------------------------------

A40_MIB = 46068


def _first_fit(cluster: Cluster, order: list[str], mib: int) -> tuple[str, int] | None:
    """The first node in ``order`` with a GPU that takes ``mib``, its lowest such GPU."""
    for name in order:
        fits = cluster.node(name).ledger.shareable_devices(mib)
        if fits:
            return name, fits[0]
    return None


def _fleet() -> Cluster:
    return Cluster(
        make_node("h100-0").gpus(4, topology="pcie"),
        make_node("v100-0").gpus(4, topology="pcie", product=V100, memory_mib=V100_MIB),
        make_node("a40-0").gpus(4, topology="pcie", product="NVIDIA A40", memory_mib=A40_MIB),
        make_node("h100-1").gpus(4, topology="pcie"),
        make_node("v100-1").gpus(4, topology="pcie", product=V100, memory_mib=V100_MIB),
        make_node("a40-1").gpus(4, topology="pcie", product="NVIDIA A40", memory_mib=A40_MIB),
    )


def _in_use(cluster: Cluster) -> int:
    return sum(1 for info in cluster.nodes() for d in info.ledger.devices if d.holders)


@pytest.mark.parametrize("seed", range(3))
def test_binpack_opens_no_more_gpus_than_first_fit(seed: int) -> None:
    """The stream of shares the README's gpu_mix figures measure, in small: the shipped
    profile (GPUFit binpack) keeps at least as many GPUs idle as first-fit in fleet order."""
    rng = random.Random(seed)
    sizes = [rng.choice([10, 20, 30, 40]) for _ in range(40)]
    fw = _framework(1)
    binpack, first = _fleet(), _fleet()
    order = [info.name for info in first.nodes()]
    for i, gib in enumerate(sizes):
        pod = make_pod(f"s{i}", uid=f"uid-{i}").shared(1, f"{gib}Gi")
        result = run_cycle(fw, pod.obj(), binpack.nodes())
        node = result.best
        if node is not None:
            choice = choice_for(result.state, node)
            assert choice is not None
            binpack.cache.assume_pod(pod.obj(), node, choice.to_assignment(f"r{i}"))
        found = _first_fit(first, order, gib * GI)
        if found is not None:
            first.bind(share(f"s{i}", found[0], found[1], gib))
    assert _in_use(binpack) <= _in_use(first)
