"""Incremental snapshots: only changed node infos are cloned, and the result equals a fresh one."""

from __future__ import annotations

from typing import Any

import pytest
from cache_builders import make_node, make_pod

from gpusched.annotations import Assignment
from gpusched.cache import NodeInfo, SchedulerCache, Snapshot
from gpusched.clock import FakeClock


class CloneCounter:
    def __init__(self) -> None:
        self.names: list[str] = []


@pytest.fixture
def clones(monkeypatch: pytest.MonkeyPatch) -> CloneCounter:
    counter = CloneCounter()
    original = NodeInfo.clone

    def counting(self: NodeInfo) -> NodeInfo:
        counter.names.append(self.name)
        return original(self)

    monkeypatch.setattr(NodeInfo, "clone", counting)
    return counter


def cache_with(*names: str) -> SchedulerCache:
    cache = SchedulerCache(FakeClock())
    for name in names:
        cache.add_node(make_node(name, gpus=4))
    return cache


def fresh(cache: SchedulerCache) -> list[dict[str, Any]]:
    snap = Snapshot()
    cache.update_snapshot(snap)
    return [info.describe() for info in snap.node_infos()]


def names(snap: Snapshot) -> list[str]:
    return [info.name for info in snap.node_infos()]


def test_first_update_copies_everything(clones: CloneCounter) -> None:
    cache = cache_with("a", "b", "c")
    snap = Snapshot()
    assert snap.generation == 0
    assert snap.num_nodes == 0
    cache.update_snapshot(snap)
    cache._check(snap)
    assert names(snap) == ["a", "b", "c"]
    assert sorted(clones.names) == ["a", "b", "c"]
    assert snap.generation > 0
    assert len(snap) == 3
    assert "b" in snap
    assert "z" not in snap
    assert snap.get("z") is None
    assert [i.name for i in snap] == ["a", "b", "c"]
    assert repr(snap) == f"Snapshot(nodes=3, generation={snap.generation})"


def test_only_changed_nodes_are_cloned(clones: CloneCounter) -> None:
    cache = cache_with("a", "b", "c")
    snap = Snapshot()
    cache.update_snapshot(snap)
    node_list = snap.node_infos()
    a_before, c_before = snap.get("a"), snap.get("c")
    clones.names.clear()
    cache.update_snapshot(snap)
    assert clones.names == []  # nothing changed: nothing copied
    cache.add_pod(make_pod("p").gpus(1).on("b").obj())
    cache.assume_pod(make_pod("q").gpus(1).obj(), "b", Assignment((3,), (), (), ""))
    cache.update_snapshot(snap)
    cache._check(snap)
    assert clones.names == ["b"]
    assert snap.node_infos() is node_list  # no node joined or left: replaced in place
    assert snap.get("a") is a_before
    assert snap.get("c") is c_before
    b = snap.get("b")
    assert b is not None
    assert b.ledger.free_gpus() == [1, 2]
    assert [i.describe() for i in snap.node_infos()] == fresh(cache)


def test_snapshot_is_frozen_for_the_cycle() -> None:
    cache = cache_with("a")
    snap = Snapshot()
    cache.update_snapshot(snap)
    seen = [info.describe() for info in snap.node_infos()]
    cache.assume_pod(make_pod("p").gpus(2).obj(), "a", Assignment((0, 1), (), (), ""))
    cache.add_pod(make_pod("q").cpu("1").on("a").obj())
    cache.update_node(make_node("a", gpus=4, labels={"changed": "yes"}))
    assert [info.describe() for info in snap.node_infos()] == seen
    cache.update_snapshot(snap)
    a = snap.get("a")
    assert a is not None
    assert a.labels == {"changed": "yes"}
    assert a.ledger.free_gpus() == [2, 3]


def test_nodes_joining_and_leaving(clones: CloneCounter) -> None:
    cache = cache_with("a", "b", "c")
    snap = Snapshot()
    cache.update_snapshot(snap)
    clones.names.clear()
    cache.remove_node("b")
    cache.update_snapshot(snap)
    cache._check(snap)
    assert names(snap) == ["a", "c"]
    assert clones.names == []
    cache.remove_node("a")
    cache.add_node(make_node("d", gpus=1))  # same count, different nodes
    cache.update_snapshot(snap)
    cache._check(snap)
    assert names(snap) == ["c", "d"]
    assert clones.names == ["d"]
    cache.add_node(make_node("a", gpus=2))  # back again: listed last
    cache.update_snapshot(snap)
    cache._check(snap)
    assert names(snap) == ["c", "d", "a"]
    assert [i.describe() for i in snap.node_infos()] == fresh(cache)


def test_ghost_nodes_leave_the_snapshot() -> None:
    cache = cache_with("a", "b")
    snap = Snapshot()
    cache.update_snapshot(snap)
    cache.add_pod(make_pod("p").on("a").obj())
    cache.add_pod(make_pod("q").on("zz").obj())  # a ghost from the start
    cache.remove_node("a")  # a ghost now: it still has a pod
    cache.update_snapshot(snap)
    cache._check(snap)
    assert names(snap) == ["b"]
    cache.add_node(make_node("a", gpus=4))  # it comes back with its pod
    cache.update_snapshot(snap)
    cache._check(snap)
    assert names(snap) == ["b", "a"]
    a = snap.get("a")
    assert a is not None
    assert list(a.pods) == ["uid-p"]


def test_empty_cache() -> None:
    cache = SchedulerCache(FakeClock())
    snap = Snapshot()
    cache.update_snapshot(snap)
    cache._check(snap)
    assert snap.node_infos() == []
    assert snap.generation == 0
