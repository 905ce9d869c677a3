"""GPUFit's PostFilter: a pod no node could ever take is told why (``never_fits``)."""

from __future__ import annotations

import pytest
from builders import Cluster, NodeBuilder, make_node, make_pod

from gpusched.framework import Code, CycleState
from gpusched.plugins.gpu_fit import GPUFit, never_fits

MIG = ["2g.20gb", "2g.20gb", "2g.20gb", "1g.10gb"]

CASES: list[tuple[str, list[NodeBuilder], int, str | None]] = [
    ("fits an empty node", [make_node("a").gpus(8)], 8, None),
    ("fits the largest node", [make_node("a").gpus(2), make_node("b").gpus(8)], 4, None),
    (
        "more than the largest node",
        [make_node("a").gpus(8), make_node("b").gpus(4)],
        16,
        "The pod asks for 16 whole GPUs (nvidia.com/gpu: 16); the largest node it can run on "
        "has 8: ask for at most that many per pod, or split the work across pods",
    ),
    (
        "anonymous GPUs count as advertised",
        [make_node("a").gpus(2, topology=None)],
        3,
        "The pod asks for 3 whole GPUs (nvidia.com/gpu: 3); the largest node it can run on "
        "has 2: ask for at most that many per pod, or split the work across pods",
    ),
    (
        "every GPU MIG-partitioned",
        [make_node("a").gpus(4, topology="pcie", mig=MIG)],
        1,
        "The pod asks for 1 whole GPU (nvidia.com/gpu: 1), but every GPU of the nodes it "
        "can run on is MIG-partitioned: the nodes offer nvidia.com/mig-1g.10gb, "
        "nvidia.com/mig-2g.20gb. Ask for a MIG device instead (for example "
        "nvidia.com/mig-1g.10gb: 1), or turn MIG off on enough GPUs",
    ),
    (
        "whole GPUs elsewhere, too few",
        [make_node("a").gpus(4, topology="pcie", mig=MIG), make_node("b").gpus(2, topology="pcie")],
        4,
        "The pod asks for 4 whole GPUs (nvidia.com/gpu: 4), but the largest node has 2 with MIG "
        "off and the rest are MIG-partitioned: the nodes offer nvidia.com/mig-1g.10gb, "
        "nvidia.com/mig-2g.20gb. Ask for a MIG device instead (for example "
        "nvidia.com/mig-1g.10gb: 1), or turn MIG off on enough GPUs",
    ),
    (
        "more than any node has even with MIG off",
        [make_node("a").gpus(4, topology="pcie", mig=MIG)],
        8,
        "The pod asks for 8 whole GPUs (nvidia.com/gpu: 8); the largest node it can run on "
        "has 4: ask for at most that many per pod, or split the work across pods",
    ),
    (
        "no GPUs at all",
        [make_node("a")],
        1,
        "The pod asks for 1 whole GPU (nvidia.com/gpu: 1), but no node it can run on has a GPU",
    ),
    ("no nodes: nothing to say beyond 'no nodes available'", [], 1, None),
]


@pytest.mark.parametrize(("what", "nodes", "count", "message"), CASES, ids=[c[0] for c in CASES])
def test_never_fits(what: str, nodes: list[NodeBuilder], count: int, message: str | None) -> None:
    assert never_fits(count, Cluster(*nodes).nodes()) == message


def test_busy_gpus_are_not_a_reason() -> None:
    """Full nodes are a wait, not a mistake: nothing is said."""
    cluster = Cluster(make_node("a").gpus(8)).bind(*(make_pod(f"p{i}").gpus(1) for i in range(8)))
    assert never_fits(1, cluster.nodes()) is None


def test_post_filter_without_a_scheduler_says_nothing() -> None:
    plugin = GPUFit()
    state = CycleState()
    plugin.pre_filter(state, make_pod().gpus(16).obj())
    result, status = plugin.post_filter(state, make_pod().gpus(16).obj(), {})
    assert result is None
    assert status.code == Code.UNSCHEDULABLE
    assert status.message() == ""
