"""Nominations in the cache: kept per node with priority and GPU need, bumping the node's
generation (so snapshots and equivalence classes see them), cleared on assume, on the bound
pod's Add, on ``clear_nomination`` and with the node; ``leaves_room`` and ``gpu_need``."""

from __future__ import annotations

import pytest
from cache_builders import make_inventory, make_node, make_pod

from gpusched.annotations import PRIORITY, Assignment
from gpusched.cache import (
    NO_NEED,
    GPUNeed,
    NodeLedger,
    Nominee,
    SchedulerCache,
    Snapshot,
    gpu_need,
    leaves_room,
)
from gpusched.clock import FakeClock
from gpusched.priority import Priority


def cache_with(*names: str, gpus: int = 8) -> SchedulerCache:
    cache = SchedulerCache(FakeClock())
    for name in names:
        cache.add_node(make_node(name, gpus=gpus))
    return cache


def test_nominate_records_priority_and_need_and_bumps_the_generation() -> None:
    cache = cache_with("n1", "n2")
    snapshot = Snapshot()
    cache.update_snapshot(snapshot)
    before = snapshot.get("n1")
    assert before is not None
    pod = make_pod("big").gpus(8).annotate(PRIORITY, "0").obj()
    assert cache.nominate(pod, "n1")
    cache.update_snapshot(snapshot)
    cache._check(snapshot)
    after = snapshot.get("n1")
    assert after is not None
    assert after.generation > before.generation
    (nominee,) = after.nominated.values()
    assert nominee == Nominee(pod["metadata"]["uid"], "default/big", Priority(0), GPUNeed(gpus=8))
    assert cache.nominated_node(nominee.uid) == "n1"
    # The snapshot's clone is its own: clearing changes the cache, not the cycle's view.
    assert cache.clear_nomination(nominee.uid)
    assert after.nominated
    cache.update_snapshot(snapshot)
    cache._check(snapshot)
    n1 = snapshot.get("n1")
    assert n1 is not None
    assert not n1.nominated
    assert not cache.clear_nomination(nominee.uid)


def test_a_new_nomination_moves_the_pod() -> None:
    cache = cache_with("n1", "n2")
    pod = make_pod("p").gpus(2).obj()
    cache.nominate(pod, "n1")
    cache.nominate(pod, "n2")
    cache._check()
    n1, n2 = cache.node_info("n1"), cache.node_info("n2")
    assert n1 is not None
    assert n2 is not None
    assert not n1.nominated
    assert list(n2.nominated) == [pod["metadata"]["uid"]]


@pytest.mark.parametrize(
    "how", ["assume", "bound-add", "node-deleted", "unknown-node", "already-placed"]
)
def test_nominations_end_where_the_pod_is_placed_or_the_node_goes(how: str) -> None:
    cache = cache_with("n1", "n2")
    pod = make_pod("p").gpus(1).obj()
    uid = pod["metadata"]["uid"]
    if how == "unknown-node":
        assert not cache.nominate(pod, "nope")
    elif how == "already-placed":
        cache.assume_pod(pod, "n2", Assignment((0,), (), (), "r"))
        assert not cache.nominate(pod, "n1")
    else:
        assert cache.nominate(pod, "n1")
        if how == "assume":
            cache.assume_pod(pod, "n2", Assignment((0,), (), (), "r"))
        elif how == "bound-add":
            cache.add_pod(make_pod("p", uid=uid).gpus(1).on("n1").obj())
        else:
            cache.remove_node("n1")
    cache._check()
    assert cache.nominated_node(uid) is None
    for name in ("n1", "n2"):
        info = cache.node_info(name)
        assert info is None or not info.nominated


@pytest.mark.parametrize(
    ("pod", "need"),
    [
        (make_pod("none"), NO_NEED),
        (make_pod("whole").gpus(4), GPUNeed(gpus=4)),
        (
            make_pod("share").request("gpusched.io/gpu", 2).request("gpusched.io/vram", "10Gi"),
            GPUNeed(vram_mib=2 * 10240, shared_gpus=2),
        ),
        (make_pod("mig").mig("1g.10gb"), NO_NEED),
        (
            make_pod("fraction")
            .request("nvidia.com/gpu", 1)
            .request("nvidia.com/gpumem-percentage", 50),
            GPUNeed(shared_gpus=1),
        ),
        (make_pod("bad").request("gpusched.io/gpu", 1), NO_NEED),  # no VRAM: unreadable
    ],
)
def test_gpu_need(pod: object, need: GPUNeed) -> None:
    assert gpu_need(pod.obj()) == need  # type: ignore[attr-defined]


def nominee(gpus: int = 0, vram_mib: int = 0) -> Nominee:
    return Nominee("u", "default/u", Priority(0), GPUNeed(gpus=gpus, vram_mib=vram_mib))


@pytest.mark.parametrize(
    ("free", "pod_need", "held", "room"),
    [
        (8, GPUNeed(gpus=1), [nominee(gpus=8)], False),
        (8, GPUNeed(gpus=1), [nominee(gpus=7)], True),
        (8, GPUNeed(gpus=2), [nominee(gpus=4), nominee(gpus=3)], False),
        (8, GPUNeed(vram_mib=1000, shared_gpus=1), [nominee(gpus=8)], False),  # may open one
        (8, GPUNeed(vram_mib=1000, shared_gpus=1), [nominee(gpus=7)], True),
        (8, GPUNeed(gpus=1), [nominee(vram_mib=7 * 81559)], True),
        (8, GPUNeed(gpus=2), [nominee(vram_mib=7 * 81559)], False),
        (8, NO_NEED, [nominee(gpus=8)], True),
    ],
)
def test_leaves_room(free: int, pod_need: GPUNeed, held: list[Nominee], room: bool) -> None:
    ledger = NodeLedger.from_inventory(make_inventory("n", free))
    assert leaves_room(ledger, pod_need, held) is room


def test_lowest_priority_rank_follows_the_pods() -> None:
    cache = cache_with("n1")
    info = cache.node_info("n1")
    assert info is not None
    assert info.lowest_priority_rank is None
    cache.add_pod(make_pod("a", uid="a").annotate(PRIORITY, "1").on("n1").obj())
    cache.add_pod(make_pod("b", uid="b").annotate(PRIORITY, "3").on("n1").obj())
    assert info.lowest_priority_rank == Priority(3).rank
    # An update of the annotation alone (the cache's fast path) moves the count.
    cache.update_pod(make_pod("b", uid="b").annotate(PRIORITY, "0").on("n1").obj())
    assert info.pods["b"].priority == Priority(0)
    assert info.lowest_priority_rank == Priority(1).rank
    clone = info.clone()
    cache.remove_pod("a")
    assert info.lowest_priority_rank == Priority(0).rank
    assert clone.lowest_priority_rank == Priority(1).rank
    cache.remove_pod("b")
    assert info.lowest_priority_rank is None
    cache._check()
