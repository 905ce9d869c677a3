"""SchedulerCache: the pod state machine (Initial, Assumed, Added, Deleted, Expired), nodes,
inventories. Time is a FakeClock: nothing sleeps."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from cache_builders import make_inventory, make_node, make_pod

from gpusched.annotations import Assignment
from gpusched.cache import CacheError, LedgerError, SchedulerCache, Snapshot
from gpusched.clock import FakeClock

TTL = 30.0


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def cache(clock: FakeClock) -> SchedulerCache:
    cache = SchedulerCache(clock, assumed_ttl=TTL)
    for name in ("n1", "n2"):
        inventory = make_inventory(name, 4)
        cache.set_inventory(name, inventory)
        cache.add_node(make_node(name, inventory=inventory))
    cache._check()
    return cache


def gpus_of(cache: SchedulerCache, uid: str) -> tuple[int, ...] | None:
    node = cache.pod_node(uid)
    if node is None:
        return None
    info = cache.node_info(node)
    assert info is not None
    assignment = info.pods[uid].assignment
    return assignment.gpu_ids if assignment else None


def a(*ids: int) -> Assignment:
    return Assignment(ids, (), (), "lease-1")


def test_assume_then_add_confirms(cache: SchedulerCache) -> None:
    snap = Snapshot()
    cache.update_snapshot(snap)
    pod = make_pod("p").gpus(2)
    placed = cache.assume_pod(pod.obj(), "n1", a(0, 1))
    assert placed.assignment is not None
    assert placed.assignment.gpu_ids == (0, 1)
    assert cache.is_assumed("uid-p")
    assert cache.assumed_count == 1
    cache._check()
    cache.update_snapshot(snap)  # the next cycle sees the devices as taken
    cache._check(snap)
    n1 = snap.get("n1")
    assert n1 is not None
    assert n1.ledger.free_gpus() == [2, 3]
    bound = pod.on("n1").assigned(a(0, 1)).obj()
    info = cache.add_pod(bound)
    assert info is not None
    assert not cache.is_assumed("uid-p")
    assert cache.get_pod("uid-p") is bound
    assert gpus_of(cache, "uid-p") == (0, 1)
    cache._check()


def test_assume_errors_change_nothing(cache: SchedulerCache) -> None:
    cache.assume_pod(make_pod("p").gpus(1).obj(), "n1", a(0))
    before = cache.dump()
    with pytest.raises(CacheError, match="already assumed on node n1"):
        cache.assume_pod(make_pod("p").gpus(1).obj(), "n2", a(0))
    with pytest.raises(CacheError, match="unknown node nx"):
        cache.assume_pod(make_pod("q").gpus(1).obj(), "nx", a(0))
    with pytest.raises(LedgerError, match="GPU 0 is held by pod uid-p"):
        cache.assume_pod(make_pod("q").gpus(1).obj(), "n1", a(0))
    assert cache.dump() == before
    cache.add_pod(make_pod("r").on("n2").obj())
    with pytest.raises(CacheError, match="already added on node n2"):
        cache.assume_pod(make_pod("r").obj(), "n2", None)
    cache._check()


def test_forget(cache: SchedulerCache) -> None:
    pod = make_pod("p").gpus(1)
    cache.assume_pod(pod.obj(), "n1", a(2))
    assert cache.forget_pod(pod.obj()) is True
    assert cache.pod_count == 0
    assert cache.forget_pod(pod.obj()) is False  # Unreserve may run twice
    node = cache.node_info("n1")
    assert node is not None
    assert node.ledger.free_gpus() == [0, 1, 2, 3]
    cache.assume_pod(pod.obj(), "n1", a(2))
    cache.add_pod(pod.on("n1").assigned(a(2)).obj())
    assert cache.forget_pod("uid-p") is False  # bound after all: stays
    assert gpus_of(cache, "uid-p") == (2,)
    cache._check()


async def test_assumed_expires_only_after_binding_finished(
    cache: SchedulerCache, clock: FakeClock
) -> None:
    pod = make_pod("p").gpus(1)
    cache.assume_pod(pod.obj(), "n1", a(0))
    await clock.advance(10 * TTL)
    assert cache.cleanup_expired_assumed_pods() == []  # binding still in flight
    cache.finish_binding(pod.obj())
    await clock.advance(TTL)
    assert cache.cleanup_expired_assumed_pods() == []  # exactly the TTL: not yet
    await clock.advance(0.001)
    assert cache.cleanup_expired_assumed_pods() == ["uid-p"]
    assert cache.pod_count == 0
    cache._check()
    # Expired -> Added: the Add arrives late and books the pod again.
    cache.add_pod(pod.on("n1").assigned(a(0)).obj())
    assert gpus_of(cache, "uid-p") == (0,)
    assert not cache.is_assumed("uid-p")
    cache._check()


async def test_add_confirms_before_expiry(cache: SchedulerCache, clock: FakeClock) -> None:
    pod = make_pod("p").gpus(1)
    cache.assume_pod(pod.obj(), "n1", a(0))
    cache.finish_binding("uid-p")
    cache.add_pod(pod.on("n1").assigned(a(0)).obj())
    await clock.advance(2 * TTL)
    assert cache.cleanup_expired_assumed_pods() == []
    assert cache.pod_count == 1
    cache.finish_binding("uid-p")  # not assumed any more: nothing to do
    cache._check()


async def test_no_ttl_never_expires(clock: FakeClock) -> None:
    cache = SchedulerCache(clock, assumed_ttl=None)
    cache.add_node(make_node("n1", gpus=1))
    cache.assume_pod(make_pod("p").gpus(1).obj(), "n1", a(0))
    cache.finish_binding("uid-p")
    await clock.advance(1e9)
    assert cache.cleanup_expired_assumed_pods() == []
    assert cache.is_assumed("uid-p")
    cache._check()


async def test_run_cleanup_expires_on_the_clock(cache: SchedulerCache, clock: FakeClock) -> None:
    cache.assume_pod(make_pod("p").gpus(1).obj(), "n1", a(0))
    cache.finish_binding("uid-p")
    told: list[list[str]] = []
    task = asyncio.create_task(cache.run_cleanup(1.0, on_expired=told.append))
    await clock.wait_for_sleepers(1)
    await clock.advance(TTL + 2)
    assert cache.pod_count == 0
    assert told == [["uid-p"]]  # so the scheduler can wake the pods waiting for devices
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def test_confirm_without_annotations_keeps_assumed_devices(cache: SchedulerCache) -> None:
    pod = make_pod("p").gpus(1)
    cache.assume_pod(pod.obj(), "n1", a(3))
    cache.add_pod(pod.on("n1").obj())  # a binding that did not carry the annotations
    assert gpus_of(cache, "uid-p") == (3,)
    cache.update_pod(pod.phase("Running").obj())
    assert gpus_of(cache, "uid-p") == (3,)  # not re-guessed on later updates
    cache._check()


def test_confirm_on_another_node_moves_the_pod(cache: SchedulerCache) -> None:
    pod = make_pod("p").gpus(1)
    cache.assume_pod(pod.obj(), "n1", a(1))
    cache.add_pod(pod.on("n2").obj())
    assert cache.pod_node("uid-p") == "n2"
    assert gpus_of(cache, "uid-p") == (1,)
    n1 = cache.node_info("n1")
    assert n1 is not None
    assert n1.ledger.free_gpus() == [0, 1, 2, 3]
    cache._check()


def test_pod_deleted_while_assumed(cache: SchedulerCache) -> None:
    pod = make_pod("p").gpus(1)
    cache.assume_pod(pod.obj(), "n1", a(1))
    assert cache.remove_pod(pod.obj()) is True
    cache.finish_binding(pod.obj())
    assert cache.forget_pod(pod.obj()) is False
    assert cache.pod_count == 0
    cache._check()


def test_informer_events_are_forgiving(cache: SchedulerCache) -> None:
    pod = make_pod("p").cpu("1").on("n2")
    assert cache.update_pod(pod.obj()) is not None  # unknown: added
    assert cache.add_pod(pod.label("x", "y").obj()) is not None  # known: updated
    assert cache.get_pod("uid-p") == pod.obj()
    assert cache.remove_pod("uid-p") is True
    assert cache.remove_pod("uid-p") is False
    assert cache.add_pod(make_pod("pending").obj()) is None  # not bound: not the cache's
    assert cache.pod_count == 0
    cache._check()


def test_terminal_pods_release_their_devices(cache: SchedulerCache) -> None:
    pod = make_pod("job").gpus(2).on("n1")
    cache.add_pod(pod.obj())
    assert gpus_of(cache, "uid-job") == (0, 1)
    assert cache.update_pod(pod.phase("Succeeded").obj()) is None
    assert cache.pod_count == 0
    assert cache.update_pod(pod.obj()) is None  # later updates of a finished pod: ignored
    assert cache.add_pod(make_pod("f").gpus(1).on("n1").phase("Failed").obj()) is None
    assumed = make_pod("a").gpus(1)
    cache.assume_pod(assumed.obj(), "n1", a(0))
    cache.update_pod(assumed.on("n1").phase("Succeeded").obj())  # ran before its Add came
    assert cache.pod_count == 0
    cache._check()


def test_pods_bound_by_others_take_lowest_free_devices(cache: SchedulerCache) -> None:
    cache.assume_pod(make_pod("mine").gpus(1).obj(), "n1", a(0))
    theirs = cache.add_pod(make_pod("theirs").gpus(2).on("n1").obj())
    assert theirs is not None
    assert theirs.inferred
    assert gpus_of(cache, "uid-theirs") == (1, 2)
    n1 = cache.node_info("n1")
    assert n1 is not None
    assert [d.inferred for d in n1.ledger.devices] == [False, True, True, False]
    cache._check()


def test_node_removal_leaves_a_ghost_until_pods_go(cache: SchedulerCache) -> None:
    snap = Snapshot()
    cache.add_pod(make_pod("p").gpus(1).on("n1").obj())
    assert cache.remove_node(make_node("n1")) is True
    assert cache.remove_node("n1") is False
    assert cache.node_count == 1
    ghost = cache.node_info("n1")
    assert ghost is not None
    assert ghost.node is None
    cache.update_snapshot(snap)
    cache._check(snap)
    assert [n.name for n in snap.node_infos()] == ["n2"]
    with pytest.raises(CacheError, match="unknown node n1"):
        cache.assume_pod(make_pod("q").obj(), "n1", None)
    cache.remove_pod("uid-p")
    assert cache.node_info("n1") is None
    cache.update_snapshot(snap)
    cache._check(snap)
    assert cache.remove_node("n2") is True
    assert cache.node_info("n2") is None
    cache.update_snapshot(snap)
    cache._check(snap)
    assert snap.num_nodes == 0


def test_pod_before_its_node(cache: SchedulerCache) -> None:
    p = cache.add_pod(make_pod("p").gpus(2).on("n3").obj())
    assert p is not None
    assert p.conflict is not None  # no devices known yet
    cache._check()
    inventory = make_inventory("n3", 2)
    cache.set_inventory("n3", inventory)  # inventory first, then the Node
    cache._check()
    cache.add_node(make_node("n3", inventory=inventory))
    cache._check()
    assert gpus_of(cache, "uid-p") == (0, 1)


def test_inventory_changes_rebook_pods(cache: SchedulerCache) -> None:
    cache.add_pod(make_pod("p").gpus(1).on("n1").assigned(a(3)).obj())
    cache.set_inventory("n1", make_inventory("n1", 2))  # GPUs 2, 3 gone
    cache._check()
    n1 = cache.node_info("n1")
    assert n1 is not None
    assert n1.unplaced == ["uid-p"]
    cache.set_inventory("n1", None)  # anonymous: allocatable still says 4
    cache._check()
    assert gpus_of(cache, "uid-p") == (3,)
    cache.set_inventory("nx", make_inventory("nx", 1))  # a node not seen yet
    cache.set_inventory("nx", None)
    cache._check()


def test_dump(cache: SchedulerCache) -> None:
    cache.assume_pod(make_pod("p").gpus(1).obj(), "n1", a(0))
    cache.finish_binding("uid-p")
    dump = cache.dump()
    assert dump["assumed"] == ["uid-p"]
    assert dump["pods"]["uid-p"] == {
        "node": "n1",
        "assumed": True,
        "bindingFinished": True,
        "deadline": TTL,
    }
    assert dump["nodes"]["n1"]["gpus"][0]["exclusive"] == "uid-p"
    assert dump["inventories"] == ["n1", "n2"]
