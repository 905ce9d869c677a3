"""Lease reservations: one write per reservation, and two writers never double-book a GPU."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import AsyncIterator, Callable

import pytest

from gpusched.kube.client import Kube
from gpusched.reservations import (
    RESERVATIONS_ANNOTATION,
    LeaseFormatError,
    NodeLease,
    Reservation,
    ReservationConflict,
    ReservationWriter,
    devices_free,
    lease_name,
)
from gpusched.sim import FaultRule, SimCluster
from gpusched.sim.faults import LOST, Faults

NS = "gpusched-system"


@pytest.fixture
async def kube() -> AsyncIterator[Kube]:
    async with SimCluster(None, kubelets=False) as sim:
        await sim.kube.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
        )
        yield sim.kube


def writer(
    kube: Kube, identity: str, on_write: Callable[[str, str], None] | None = None
) -> ReservationWriter:
    return ReservationWriter(kube, NS, identity, on_write=on_write)


async def test_reservations_accumulate_one_write_each(kube: Kube) -> None:
    w = writer(kube, "replica-a")
    first = w.new_reservation("r1", "default/p1", "uid-1", [0, 1], [81559, 81559])
    lease = await w.reserve("node-1", first)
    assert set(lease.reservations) == {"r1"}
    second = w.new_reservation("r2", "default/p2", "uid-2", [2], [81559])
    lease = await w.reserve("node-1", second, known=lease)
    assert set(lease.reservations) == {"r1", "r2"}
    assert lease.held_gpus() == {0, 1, 2}
    assert w.writes == {"create": 1, "update": 1}
    assert w.conflicts == 0
    stored = await kube.get(
        f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{lease_name('node-1')}"
    )
    assert stored["spec"]["holderIdentity"] == "replica-a"
    assert NodeLease.from_object(stored).reservations["r1"].gpu_ids == (0, 1)


EXCLUSIVITY = [
    # (existing: exclusive?, new: exclusive?, conflict?) on the same GPU
    (True, True, True),  # two whole-GPU pods
    (True, False, True),  # a share never joins a GPU held whole
    (False, True, True),  # a whole-GPU pod never takes a GPU being shared
    (False, False, False),  # two shares (VRAM and clients: each replica's cache)
]


def _reservation(uid: str, gpus: list[int], exclusive: bool) -> Reservation:
    return Reservation(
        uid=uid,
        pod=f"default/{uid}",
        pod_uid=f"pod-{uid}",
        gpu_ids=tuple(gpus),
        vram_mib=tuple(20480 for _ in gpus),
        exclusive=exclusive,
        expires=2e9,
        holder="a",
        written=1e9,
    )


@pytest.mark.parametrize(("held", "new", "conflict"), EXCLUSIVITY)
def test_exclusivity_holds_both_ways_in_the_lease(held: bool, new: bool, conflict: bool) -> None:
    lease = NodeLease("node-1", {"r1": _reservation("r1", [2], held)})
    check = devices_free(_reservation("r2", [2, 3], new))
    if conflict:
        with pytest.raises(ReservationConflict, match=r"GPU\(s\) \[2\] on node node-1"):
            check(lease)
    else:
        check(lease)
    devices_free(_reservation("r3", [3], True))(lease)  # another GPU is free either way


async def test_a_stale_writer_loses_the_gpu_it_raced_for(kube: Kube) -> None:
    a, b = writer(kube, "a"), writer(kube, "b")
    stale = await a.read("node-1")  # both decide from the same (empty) state
    await a.reserve("node-1", a.new_reservation("ra", "default/pa", "ua", [3], [1]), known=stale)
    with pytest.raises(ReservationConflict, match=r"GPU\(s\) \[3\]"):
        await b.reserve(
            "node-1", b.new_reservation("rb", "default/pb", "ub", [3], [1]), known=stale
        )
    # A different GPU on the same node: b retries after the 409 and succeeds.
    lease = await b.reserve(
        "node-1", b.new_reservation("rc", "default/pc", "uc", [4], [1]), known=stale
    )
    assert set(lease.reservations) == {"ra", "rc"}
    assert b.conflicts == 2


async def test_every_write_is_reported_as_create_or_update_and_conflicts_are_not(
    kube: Kube,
) -> None:
    """What the scheduler counts in gpusched_api_writes_total{resource="leases",verb}."""
    a_writes: list[tuple[str, str]] = []
    b_writes: list[tuple[str, str]] = []
    a = writer(kube, "a", lambda resource, verb: a_writes.append((resource, verb)))
    b = writer(kube, "b", lambda resource, verb: b_writes.append((resource, verb)))
    stale = await b.read("node-1")  # no Lease yet: b would create it
    await a.reserve("node-1", a.new_reservation("ra", "default/pa", "ua", [0], [1]))
    assert a_writes == [("leases", "create")]
    # b's create is answered 409 (a created the Lease first): not a write; b re-reads and updates.
    await b.reserve("node-1", b.new_reservation("rb", "default/pb", "ub", [1], [1]), known=stale)
    assert b.conflicts == 1
    assert b_writes == [("leases", "update")]
    assert b.writes == {"update": 1}
    # Devices found taken: ReservationConflict, and nothing written.
    with pytest.raises(ReservationConflict):
        await b.reserve(
            "node-1", b.new_reservation("rc", "default/pc", "uc", [0], [1]), known=stale
        )
    assert b_writes == [("leases", "update")]
    # release is an update; releasing what is not there writes nothing.
    await a.release("node-1", ["ra"])
    await a.release("node-1", ["ra"])
    assert a_writes == [("leases", "create"), ("leases", "update")]
    assert a.writes == {"create": 1, "update": 1}


async def test_prunable_entries_go_in_the_same_write(kube: Kube) -> None:
    w = writer(kube, "a")
    await w.reserve("node-1", w.new_reservation("old", "default/done", "u0", [0], [1]))
    lease = await w.reserve(
        "node-1",
        w.new_reservation("new", "default/p", "u1", [0], [1]),
        prunable=lambda r: r.pod == "default/done",
    )
    assert set(lease.reservations) == {"new"}
    await w.release("node-1", ["new"])
    assert (await w.read("node-1")).reservations == {}


async def test_an_older_reservation_of_the_same_pod_is_kept_until_prunable(kube: Kube) -> None:
    # The pod may be bound with the older one (its Binding landed, the response was lost), or
    # another replica may have bound it with its own: neither is dropped for being the same
    # pod's; the scheduler's ``prunable`` decides (it knows which one the pod is bound with).
    w = writer(kube, "a")
    await w.reserve("node-1", w.new_reservation("first", "default/p", "pod-uid", [0], [1]))
    with pytest.raises(ReservationConflict):
        await w.reserve("node-1", w.new_reservation("second", "default/p", "pod-uid", [0], [1]))
    lease = await w.reserve("node-1", w.new_reservation("second", "default/p", "pod-uid", [1], [1]))
    assert set(lease.reservations) == {"first", "second"}
    other = writer(kube, "b")
    with pytest.raises(ReservationConflict):
        await other.reserve(
            "node-1", other.new_reservation("third", "default/p", "pod-uid", [0], [1])
        )
    lease = await other.reserve(
        "node-1",
        other.new_reservation("fourth", "default/p", "pod-uid", [2], [1]),
        prunable=lambda r: r.uid in ("first", "second"),
    )
    assert set(lease.reservations) == {"fourth"}


async def test_a_malformed_lease_is_reported_with_the_fix(kube: Kube) -> None:
    w = writer(kube, "a")
    await w.reserve("node-1", w.new_reservation("r", "default/p", "u", [0], [1]))
    path = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{lease_name('node-1')}"
    await kube.patch(path, {"metadata": {"annotations": {RESERVATIONS_ANNOTATION: "{oops"}}})
    with pytest.raises(LeaseFormatError, match="delete the Lease"):
        await w.read("node-1")


@pytest.mark.parametrize("seed", [7, 8])
async def test_racing_writers_never_double_book(kube: Kube, seed: int) -> None:
    """Two replicas reserve random GPUs on the same three 8-GPU nodes at once, each deciding
    from its own possibly stale view; checked from the API afterwards."""
    rng = random.Random(seed)
    granted: list[tuple[str, str, tuple[int, ...]]] = []

    async def replica(name: str) -> None:
        w = writer(kube, name)
        for i in range(40):
            node = f"node-{rng.randrange(3)}"
            gpus = tuple(sorted(rng.sample(range(8), rng.choice([1, 2]))))
            view = await w.read(node) if rng.random() < 0.5 else NodeLease(node, {})
            if view.held_gpus() & set(gpus):
                continue  # this replica's view already says no
            uid = str(uuid.uuid4())
            reservation = w.new_reservation(uid, f"default/{name}-{i}", uid, gpus, [1] * len(gpus))
            try:
                await w.reserve(node, reservation, known=view)
            except ReservationConflict:
                continue
            granted.append((node, uid, gpus))
            await asyncio.sleep(0)

    await asyncio.gather(replica("a"), replica("b"))
    leases = await kube.get(f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases")
    for obj in leases["items"]:
        lease = NodeLease.from_object(obj)
        held = [g for r in lease.reservations.values() for g in r.gpu_ids]
        assert len(held) == len(set(held)), f"double-booked on {lease.node}: {sorted(held)}"
    written = {uid for obj in leases["items"] for uid in NodeLease.from_object(obj).reservations}
    assert {uid for _, uid, _ in granted} == written
    assert granted


async def test_reservations_arriving_during_a_write_share_the_next_one(kube: Kube) -> None:
    """Group commit: eight binds to one node at once cost the first write plus one for the
    seven that queued behind it; a reservation whose GPU is taken fails alone."""
    w = writer(kube, "a")
    first = w.new_reservation("r0", "default/p0", "u0", [0], [1])
    rest = [w.new_reservation(f"r{i}", f"default/p{i}", f"u{i}", [i], [1]) for i in range(1, 8)]
    clash = w.new_reservation("rx", "default/px", "ux", [3], [1])  # GPU 3 is r3's
    results = await asyncio.gather(
        *(w.reserve("node-1", r) for r in (first, *rest, clash)), return_exceptions=True
    )
    assert all(not isinstance(r, BaseException) for r in results[:8]), results
    assert isinstance(results[8], ReservationConflict)
    assert sum(w.writes.values()) == 2  # not 8
    lease = await w.read("node-1")
    assert set(lease.reservations) == {f"r{i}" for i in range(8)}


@pytest.mark.parametrize("code", [500, LOST])
async def test_a_transient_error_on_the_lease_write_is_retried(code: int) -> None:
    """A 500 before the write, or a write applied and answered 504 (``lost``): the writer reads
    the Lease again and retries, rather than failing every reservation of its batch; an applied
    write shows the reservation, which validates against itself."""
    # Seeded so that the first Lease update meets the fault and the second does not.
    faults = Faults([FaultRule("update", "leases", 0.5, code)], seed=1)
    async with SimCluster(None, kubelets=False, faults=faults) as sim:
        await sim.kube.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
        )
        w = writer(sim.kube, "a")
        await w.reserve("node-1", w.new_reservation("r0", "default/p0", "u0", [0], [1]))  # create
        lease = await w.reserve("node-1", w.new_reservation("r1", "default/p1", "u1", [1], [1]))
        assert faults.total() == 1
        assert set(lease.reservations) == {"r0", "r1"}
        assert set((await w.read("node-1")).reservations) == {"r0", "r1"}


async def test_resource_versions_are_opaque_and_the_informer_takes_over_once_it_saw_our_write(
    kube: Kube,
) -> None:
    """``resourceVersion`` is only compared for equality: a write starts from this writer's
    last write until the informer has delivered it, from the informer's view after."""
    w = writer(kube, "a")
    written = await w.reserve("node-1", w.new_reservation("r1", "default/p", "u", [0], [1]))
    older = NodeLease("node-1", {}, "opaque-older")
    assert w._newest("node-1", older) is written  # the informer has not shown our write
    w.observed(NodeLease("node-1", {}, "opaque-other"))
    assert w._newest("node-1", older) is written
    w.observed(written)
    newer = NodeLease("node-1", dict(written.reservations), "opaque-newer")
    assert w._newest("node-1", newer) is newer
    assert w._newest("node-2", None) is None
