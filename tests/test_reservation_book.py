"""The reservation book on its own: plain values, a SchedulerCache, a fake clock; no API.

Its writer is never used here (``release`` is exercised on the simulated cluster in
tests/scheduler/test_scheduler_state.py); the random-operation test checks the book's and the
cache's invariants after every step.
"""

from __future__ import annotations

import json
import random
from typing import Any, cast

import pytest

from gpusched.annotations import RESERVATION_UID
from gpusched.cache import SchedulerCache
from gpusched.clock import FakeClock
from gpusched.kube.client import Kube
from gpusched.reservation_book import ReservationBook, phantom_key
from gpusched.reservations import (
    LEASE_PREFIX,
    NODE_LABEL,
    RESERVATIONS_ANNOTATION,
    Reservation,
    ReservationWriter,
)
from gpusched.sim.fleet import ClusterSpec, build_fleet, node_names

SPEC = ClusterSpec.model_validate(
    {
        "name": "book",
        "pools": [
            {
                "name": "n",
                "count": 2,
                "cpu": 32,
                "memory": "128Gi",
                "gpu": {
                    "product": "NVIDIA H100 80GB HBM3",
                    "memoryMiB": 81559,
                    "count": 4,
                    "topology": "nvswitch",
                },
            }
        ],
    }
)
NODES = node_names(SPEC)
NODE = NODES[0]
SKEW = 30.0


class World:
    """A book over a cache with ``SPEC``'s nodes, and the pods its informer would show."""

    def __init__(self, *, with_nodes: bool = True) -> None:
        self.clock = FakeClock()
        self.cache = SchedulerCache(self.clock)
        self.pods: dict[str, dict[str, Any]] = {}
        self.woken: list[str] = []
        writer = ReservationWriter(Kube(cast(Any, None)), "ns", "me", now=self.clock.now)
        self.book = ReservationBook(
            self.cache,
            writer,
            self.clock,
            pod_named=self.pods.get,
            forget=self.forget,
            max_clock_skew=SKEW,
        )
        if with_nodes:
            self.add_nodes()

    def add_nodes(self) -> None:
        for node in build_fleet(SPEC):
            if node.inventory is not None:
                self.cache.set_inventory(node.name, node.inventory)
            self.cache.add_node(node.node)
            self.book.on_node_added(node.name)

    def forget(self, key: str) -> None:
        if self.cache.forget_pod(key):
            self.woken.append(key)

    @property
    def now(self) -> float:
        return self.clock.now().timestamp()

    def reservation(
        self,
        uid: str,
        pod: str,
        gpus: tuple[int, ...],
        *,
        written: float | None = None,
        lasting: float = 60,
    ) -> Reservation:
        written = self.now if written is None else written
        return Reservation(
            uid=uid,
            pod=f"default/{pod}",
            pod_uid=f"uid-{pod}",
            gpu_ids=gpus,
            vram_mib=(),
            exclusive=True,
            expires=written + lasting,
            holder="other",
            written=written,
        )

    def lease(self, node: str, *rs: Reservation, kind: str = "MODIFIED") -> None:
        payload = {"v": 1, "r": {r.uid: r.to_json() for r in rs}}
        self.book.on_lease(
            kind,
            {
                "metadata": {
                    "name": LEASE_PREFIX + node,
                    "namespace": "ns",
                    "resourceVersion": str(random.getrandbits(32)),
                    "labels": {NODE_LABEL: node},
                    "annotations": {RESERVATIONS_ANNOTATION: json.dumps(payload)},
                },
            },
        )

    def pod(self, name: str, *, node: str = "", bound_with: str = "", phase: str = "") -> None:
        obj: dict[str, Any] = {
            "metadata": {
                "name": name,
                "namespace": "default",
                "uid": f"uid-{name}",
                "annotations": {RESERVATION_UID: bound_with} if bound_with else {},
            },
            "spec": {"nodeName": node} if node else {},
            "status": {"phase": phase or ("Running" if node else "Pending")},
        }
        self.pods[f"default/{name}"] = obj
        if node:
            self.book.pod_bound(obj)

    def free(self, node: str = NODE) -> list[int]:
        info = self.cache.node_info(node)
        assert info is not None
        return [d.index for d in info.ledger.devices if d.free]

    def check(self) -> None:
        self.book._check()
        self.cache._check()


# ------------------------------------------------------------------ phantoms


def test_another_replicas_reservation_is_counted_until_it_leaves_its_lease() -> None:
    w = World()
    r = w.reservation("r1", "p", (0, 1))
    w.lease(NODE, r)
    assert w.free() == [2, 3]
    assert w.book.held == 1
    w.lease(NODE)  # released
    assert w.free() == [0, 1, 2, 3]
    assert w.woken == [phantom_key("r1")]  # the queue hears its GPUs are free
    w.check()


def test_reservations_on_another_replicas_share_are_counted_once_the_share_is_ours() -> None:
    w = World()
    ours = {NODES[1]}  # NODE is another live replica's: its in-flight reservations go uncounted
    w.book.counts = lambda node: node in ours
    w.lease(NODE, w.reservation("r1", "p", (0, 1)))
    w.lease(NODES[1], w.reservation("r2", "q", (2,)))
    assert (w.book.is_phantom("r1"), w.book.is_phantom("r2")) == (False, True)
    assert w.free(NODE) == [0, 1, 2, 3]
    w.check()
    ours.add(NODE)  # that replica left: its share is ours, and so are its reservations
    w.book.recount()
    assert w.book.is_phantom("r1")
    assert w.free(NODE) == [2, 3]
    w.check()


def test_a_lease_before_its_node_is_counted_when_the_node_arrives() -> None:
    w = World(with_nodes=False)
    w.lease(NODE, w.reservation("r1", "p", (3,)))
    w.add_nodes()
    assert w.free() == [0, 1, 2]
    w.check()


def test_a_pod_seen_bound_takes_over_from_its_phantom_without_waking_anyone() -> None:
    w = World()
    w.lease(NODE, w.reservation("r1", "p", (0,)))
    w.pod("p", node=NODE, bound_with="r1")
    assert not w.book.is_phantom("r1")
    assert w.woken == []
    assert w.book.dirty == frozenset()  # bound with the only reservation it has
    w.check()


def test_a_deleted_pods_phantom_goes_and_no_new_one_comes() -> None:
    w = World()
    w.lease(NODE, w.reservation("r1", "p", (0,)))
    w.book.mark_gone("uid-p")
    assert w.free() == [0, 1, 2, 3]
    w.lease(NODE, w.reservation("r1", "p", (0,)), w.reservation("r2", "p", (1,)))
    assert w.free() == [0, 1, 2, 3]
    w.check()


# ------------------------------------------------------------------ the prune rule


def test_prunable_by_pod_state() -> None:
    w = World()
    r = w.reservation("r1", "p", (0,))
    w.pod("p")
    assert not w.book.prunable(r)  # pending, not expired
    w.pod("p", node=NODE, bound_with="r1")
    assert not w.book.prunable(r)  # the one it is bound with
    assert w.book.prunable(w.reservation("r0", "p", (1,)))  # another one of it
    w.pod("p", node=NODE, bound_with="r1", phase="Succeeded")
    assert w.book.prunable(r)
    w.book.mark_dead("r9")
    assert w.book.prunable(w.reservation("r9", "q", (2,)))


def test_expiry_waits_for_the_clock_skew() -> None:
    w = World()
    r = w.reservation("r1", "p", (0,))
    w.pod("p")
    w.clock._t += 60 + SKEW - 1
    assert not w.book.prunable(r)
    w.clock._t += 2
    assert w.book.prunable(r)


@pytest.mark.parametrize(
    ("written_before_list", "prunable"),
    [(SKEW + 1, True), (SKEW - 1, False), (-5, False)],
)
def test_a_pod_absent_from_the_list_is_gone_only_if_reserved_before_it(
    written_before_list: float, prunable: bool
) -> None:
    """Written more than the skew before the list began: its pod existed then and the list
    did not have it, so it was deleted. Later (or within the skew): it may be a pod created
    after the list that the informer has not shown yet."""
    w = World()
    w.clock._t += 1000
    listed = w.now
    r = w.reservation("r1", "p", (0,), written=listed - written_before_list)
    assert not w.book.prunable(r)  # before the list, nothing is known
    w.book.pods_listed(listed)
    assert w.book.prunable(r) is prunable


def test_an_entry_without_written_time_waits_for_expiry() -> None:
    w = World()
    w.clock._t += 1000
    old = w.reservation("r1", "p", (0,))
    r = Reservation(**{**{f: getattr(old, f) for f in old.__slots__}, "written": None})
    w.book.pods_listed(w.now)
    assert not w.book.prunable(r)
    w.clock._t += 60 + SKEW + 1
    assert w.book.prunable(r)


def test_the_list_frees_the_gpus_of_pods_deleted_before_it() -> None:
    """At start-up the Leases may be handled before the pods are listed: their phantoms go
    once the list is known not to have their pods."""
    w = World()
    w.clock._t += 1000
    w.lease(NODE, w.reservation("r1", "gone", (0,), written=w.now - 500, lasting=3600))
    w.lease(NODES[1], w.reservation("r2", "new", (0,), written=w.now))
    assert w.free() == [1, 2, 3]
    w.book.pods_listed(w.now)
    assert w.free() == [0, 1, 2, 3]
    assert w.free(NODES[1]) == [1, 2, 3]  # maybe a pod created since the list
    assert w.book.stale(NODE) == ["r1"]
    assert w.book.stale(NODES[1]) == []
    w.check()


# ------------------------------------------------------------------ superseded


def test_a_reservation_of_a_bound_pod_marks_its_node_in_either_order() -> None:
    w = World()
    w.lease(NODE, w.reservation("r1", "p", (0,)))
    w.lease(NODES[1], w.reservation("r2", "p", (0,)))
    w.pod("p", node=NODES[1], bound_with="r2")  # the pod after the Leases
    assert w.book.dirty == {NODE}
    w2 = World()
    w2.pod("q", node=NODES[1], bound_with="r2")  # the Lease after the pod
    w2.lease(NODE, w2.reservation("r1", "q", (0,)))
    assert w2.book.dirty == {NODE}
    assert w2.book.stale(NODE) == ["r1"]
    w.check()
    w2.check()


# ------------------------------------------------------------------ random operations


def test_random_operations_keep_every_invariant() -> None:
    rng = random.Random(7)
    w = World()
    pods = [f"p{i}" for i in range(6)]
    leases: dict[str, dict[str, Reservation]] = {node: {} for node in NODES}
    serial = 0
    for step in range(3000):
        op = rng.randrange(9)
        node = rng.choice(NODES)
        if op <= 2:  # a reservation appears (GPUs free in the Lease, as the precondition keeps)
            taken = {g for r in leases[node].values() for g in r.gpu_ids}
            free = [g for g in range(4) if g not in taken]
            if free:
                serial += 1
                r = w.reservation(f"r{serial}", rng.choice(pods), (rng.choice(free),))
                leases[node][r.uid] = r
                w.lease(node, *leases[node].values())
        elif op == 3 and leases[node]:  # one leaves (released or pruned)
            del leases[node][rng.choice(sorted(leases[node]))]
            w.lease(node, *leases[node].values())
        elif op == 4:  # the Lease deleted
            leases[node] = {}
            w.lease(node, kind="DELETED")
        elif op == 5:  # a pod shows up bound with one of its reservations, or pending
            name = rng.choice(pods)
            mine = [(n, u) for n in NODES for u, r in leases[n].items() if r.pod.endswith(name)]
            if mine and w.cache.get_pod(f"uid-{name}") is None:
                n, u = rng.choice(mine)
                w.pod(name, node=n, bound_with=u)
            else:
                w.pod(name)
        elif op == 6:  # a pod deleted
            name = rng.choice(pods)
            w.pods.pop(f"default/{name}", None)
            w.book.mark_gone(f"uid-{name}")
        elif op == 7:
            w.book.mark_dead(f"r{rng.randrange(serial + 1)}")
        else:
            w.clock._t += rng.choice((1, 10, 100))
            if step > 1500:
                w.book.pods_listed(w.now)
            w.cache.cleanup_expired_assumed_pods()
        w.check()
        for n in NODES:
            for uid in w.book.stale(n):
                assert w.book.prunable(leases[n][uid])
