"""``shares_fit``: a share's Lease write keeps its GPU within VRAM and clients across replicas,
counting each pod once (from the Lease while its bind is in flight, from the cache once bound).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, cast

import pytest

from gpusched.cache import SchedulerCache
from gpusched.clock import FakeClock
from gpusched.kube.client import Kube
from gpusched.reservation_book import ReservationBook, phantom_key
from gpusched.reservations import (
    LEASE_PREFIX,
    NODE_LABEL,
    RESERVATIONS_ANNOTATION,
    NodeLease,
    Reservation,
    ReservationConflict,
    ReservationWriter,
    SharedGPU,
    SharedNode,
    shares_fit,
)
from gpusched.sim.fleet import ClusterSpec, build_fleet, node_names

GI = 1024
CAPACITY = 80 * GI


def _share(uid: str, mib: int, *, pod: str = "", exclusive: bool = False) -> Reservation:
    pod = pod or f"pod-{uid}"
    return Reservation(
        uid=uid,
        pod=f"default/{pod}",
        pod_uid=pod,
        gpu_ids=(2,),
        vram_mib=(mib,),
        exclusive=exclusive,
        expires=2e9,
        holder="a",
        written=1e9,
    )


NEW = _share("new", 30 * GI)

# (case, Lease entries, their pods shown bound, cache holders of GPU 2, max clients, conflict)
CASES: list[tuple[str, list[Reservation], set[str], Mapping[str, int], int, str | None]] = [
    ("an empty GPU", [], set(), {}, 10, None),
    ("one share in flight elsewhere", [_share("r1", 30 * GI)], set(), {}, 10, None),
    (
        "two in flight elsewhere leave too little VRAM",
        [_share("r1", 30 * GI), _share("r2", 30 * GI)],
        set(),
        {},
        10,
        "has 81920 MiB for shares and 61440 MiB of them taken",
    ),
    (
        "a bound pod counts once, from the cache",
        [_share("r1", 30 * GI)],
        {"pod-r1"},
        {"pod-r1": 30 * GI},
        10,
        None,
    ),
    (
        "a bound pod and one in flight",
        [_share("r1", 30 * GI), _share("r2", 30 * GI)],
        {"pod-r1"},
        {"pod-r1": 30 * GI},
        10,
        "MiB for shares",
    ),
    (
        "a phantom counts once, from the Lease",
        [_share("r1", 30 * GI)],
        set(),
        {"reservation/r1": 30 * GI},
        10,
        None,
    ),
    (
        "our own bind in flight counts once",
        [_share("r1", 30 * GI)],
        set(),
        {"pod-r1": 30 * GI},
        10,
        None,
    ),
    (
        "our own assumed pod not in the Lease yet counts from the cache",
        [_share("r1", 30 * GI)],
        set(),
        {"pod-x": 30 * GI},
        10,
        "MiB for shares",
    ),
    (
        "two replicas' entries for one pod count once",
        [_share("r1", 30 * GI, pod="p"), _share("r2", 30 * GI, pod="p")],
        set(),
        {},
        10,
        None,
    ),
    (
        "the new pod's older entry is not counted",
        [_share("r1", 30 * GI, pod="pod-new"), _share("r2", 30 * GI)],
        set(),
        {"pod-new": 30 * GI},
        10,
        None,
    ),
    (
        "clients: the limit reached across replicas",
        [_share("r1", GI)],
        set(),
        {"pod-x": GI, "pod-y": GI},
        3,
        "has its 3 clients",
    ),
    ("clients: one left", [_share("r1", GI)], set(), {"pod-x": GI}, 3, None),
    (
        "an exclusive entry still conflicts",
        [_share("r1", 30 * GI, exclusive=True)],
        set(),
        {},
        10,
        r"GPU\(s\) \[2\] on node node-1 are reserved for another pod",
    ),
]


@pytest.mark.parametrize(
    ("entries", "bound", "holders", "clients", "conflict"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_a_share_fits_its_gpu_with_every_replicas_shares(
    entries: list[Reservation],
    bound: set[str],
    holders: Mapping[str, int],
    clients: int,
    conflict: str | None,
) -> None:
    lease = NodeLease("node-1", {r.uid: r for r in entries})

    def gpu(node: str, index: int) -> SharedGPU | None:
        assert (node, index) == ("node-1", 2)
        return SharedGPU(CAPACITY, clients, holders)

    check = shares_fit(NEW, gpu, lambda r: r.pod_uid not in bound)
    if conflict is None:
        check(lease)
    else:
        with pytest.raises(ReservationConflict, match=conflict):
            check(lease)


def test_exclusive_reservations_and_unknown_gpus_are_checked_for_exclusivity_only() -> None:
    full = NodeLease("node-1", {f"r{i}": _share(f"r{i}", 30 * GI) for i in range(3)})
    shares_fit(NEW, lambda node, index: None, lambda r: True)(full)  # memory unknown
    whole = _share("w", 0, exclusive=True)
    lease = NodeLease("node-1", {})
    shares_fit(whole, lambda node, index: SharedGPU(0, 1, {"x": 1}), lambda r: True)(lease)
    with pytest.raises(ReservationConflict, match="reserved for another pod"):
        shares_fit(whole, lambda node, index: None, lambda r: True)(full)


# ------------------------------------------------------------------ the other sharing rules


def _entry(
    uid: str,
    mib: int,
    *,
    gpu: int = 2,
    swap: bool | None = None,
    cores: int = 0,
    uuids: tuple[str, ...] = (),
    exclusive: bool = False,
) -> Reservation:
    return Reservation(
        uid=uid,
        pod=f"default/pod-{uid}",
        pod_uid=f"pod-{uid}",
        gpu_ids=(gpu,),
        vram_mib=(mib,),
        exclusive=exclusive,
        expires=2e9,
        holder="b",
        written=1e9,
        swap=swap,
        cores=cores,
        uuids=uuids,
    )


MEMORY = 80 * GI
OVER = 160 * GI  # vramOvercommitPercent 200

# (case, the new share, Lease entries (all in flight), cache holders: key -> (MiB, swap,
#  cores), max clients per node, conflict)
RULES: list[
    tuple[
        str,
        Reservation,
        list[Reservation],
        dict[str, tuple[int, bool, int]],
        int | None,
        str | None,
    ]
] = [
    (
        "no-swap: pinned shares in flight elsewhere fill physical memory",
        _entry("new", 30 * GI, swap=False),
        [_entry("r1", 30 * GI, swap=False), _entry("r2", 30 * GI, swap=False)],
        {},
        None,
        "cannot swap to host memory",
    ),
    (
        "no-swap: swap-capable shares take the overcommitted part",
        _entry("new", 30 * GI, swap=False),
        [_entry("r1", 60 * GI, swap=True)],
        {"pod-x": (50 * GI, False, 0)},
        None,
        None,
    ),
    (
        "no-swap: pinned in the cache and in the Lease together",
        _entry("new", 30 * GI, swap=False),
        [_entry("r1", 30 * GI, swap=False)],
        {"pod-x": (30 * GI, False, 0)},
        None,
        "promised to pods that cannot swap",
    ),
    (
        "a swap-capable share may use the overcommitted part",
        _entry("new", 30 * GI, swap=True),
        [_entry("r1", 30 * GI, swap=False)],
        {"pod-x": (30 * GI, False, 0)},
        None,
        None,
    ),
    (
        "an entry of an older writer (no swap field) counts as swap-capable, as before",
        _entry("new", 30 * GI, swap=False),
        [_entry("r1", 30 * GI), _entry("r2", 30 * GI)],
        {},
        None,
        None,
    ),
    (
        "cores: shares across replicas past 100 percent",
        _entry("new", GI, swap=True, cores=40),
        [_entry("r1", GI, swap=True, cores=40)],
        {"pod-x": (GI, True, 30)},
        None,
        "has 30% of its compute free",
    ),
    (
        "cores: exactly all of it, every holder with a share",
        _entry("new", GI, swap=True, cores=30),
        [_entry("r1", GI, swap=True, cores=40)],
        {"pod-x": (GI, True, 30)},
        None,
        None,
    ),
    (
        "cores: the last share beside a holder that asks none",
        _entry("new", GI, swap=True, cores=60),
        [_entry("r1", GI, swap=True, cores=40)],
        {"pod-x": (GI, True, 0)},
        None,
        "compute all given away",
    ),
    (
        "cores: asking none of a GPU whose compute is all given",
        _entry("new", GI, swap=True),
        [_entry("r1", GI, swap=True, cores=100)],
        {},
        None,
        "compute all given away",
    ),
    (
        "clients per node: the Lease's shares on other GPUs count",
        _entry("new", GI, swap=True),
        [_entry("r1", GI, gpu=0), _entry("r2", GI, gpu=1)],
        {"pod-x": (GI, True, 0)},
        3,
        "has its 3 pods sharing its GPUs",
    ),
    (
        "clients per node: one left",
        _entry("new", GI, swap=True),
        [_entry("r1", GI, gpu=0)],
        {"pod-x": (GI, True, 0)},
        3,
        None,
    ),
    (
        "clients per node: MIG entries are not clients",
        _entry("new", GI, swap=True),
        [_entry("r1", 10 * GI, gpu=0, uuids=("MIG-a",)), _entry("r2", GI, gpu=1)],
        {"pod-x": (GI, True, 0)},
        3,
        None,
    ),
]


@pytest.mark.parametrize(
    ("new", "entries", "holders", "per_node", "conflict"),
    [case[1:] for case in RULES],
    ids=[case[0] for case in RULES],
)
def test_a_share_keeps_the_no_swap_compute_and_per_node_rules_across_replicas(
    new: Reservation,
    entries: list[Reservation],
    holders: dict[str, tuple[int, bool, int]],
    per_node: int | None,
    conflict: str | None,
) -> None:
    lease = NodeLease("node-1", {r.uid: r for r in entries})
    # Cache holders sit on GPU 2; GPUs 0 and 1 are empty.
    cached = {key: mib for key, (mib, _, _) in holders.items()}

    def gpu(node: str, index: int) -> SharedGPU | None:
        return SharedGPU(
            OVER,
            10,
            cached if index == 2 else {},
            memory_mib=MEMORY,
            terms=lambda key: holders[key][1:] if key in holders else None,
        )

    def node(name: str) -> SharedNode | None:
        return SharedNode(per_node, list(holders))

    check = shares_fit(new, gpu, lambda r: True, node=node)
    if conflict is None:
        check(lease)
    else:
        with pytest.raises(ReservationConflict, match=conflict):
            check(lease)


def test_a_mig_device_is_held_once_across_replicas() -> None:
    mine = _entry("new", 10 * GI, uuids=("MIG-a",))
    lease = NodeLease("node-1", {"r1": _entry("r1", 10 * GI, uuids=("MIG-a",))})
    with pytest.raises(ReservationConflict, match=r"MIG device\(s\) \['MIG-a'\]"):
        shares_fit(mine, lambda node, index: None, lambda r: True)(lease)
    other = NodeLease("node-1", {"r1": _entry("r1", 10 * GI, uuids=("MIG-b",))})
    shares_fit(mine, lambda node, index: None, lambda r: True)(other)


@pytest.mark.parametrize(
    ("entry", "written"),
    [
        (_entry("w", 0, exclusive=True), {"exclusive": True}),
        (_entry("s", GI, swap=False, cores=20), {"swap": False, "cores": 20}),
        (_entry("m", 10 * GI, uuids=("MIG-a",)), {"uuids": ["MIG-a"]}),
    ],
    ids=["whole", "share", "mig"],
)
def test_the_new_fields_round_trip_and_are_absent_when_they_say_nothing(
    entry: Reservation, written: dict[str, object]
) -> None:
    data = entry.to_json()
    for field in ("swap", "cores", "uuids"):
        assert (field in data) == (field in written), (field, data)
    for field, value in written.items():
        assert data[field] == value
    assert Reservation.from_json(entry.uid, data) == entry


def test_an_older_writers_entry_reads_as_before() -> None:
    old = {
        "pod": "default/p",
        "podUID": "u",
        "gpus": [1],
        "vramMiB": [1024],
        "exclusive": False,
        "expires": 2e9,
        "holder": "a",
    }
    r = Reservation.from_json("r", old)
    assert (r.swap, r.cores, r.uuids, r.share, r.mig) == (None, 0, (), True, False)
    with pytest.raises(ValueError, match="uuids"):
        Reservation.from_json("r", {**old, "uuids": ["a", "b"]})


# ------------------------------------------------------------------ phantoms of shares


def _book(mig: tuple[str, ...] = ()) -> tuple[SchedulerCache, ReservationBook, str]:
    gpu: dict[str, Any] = {
        "product": "NVIDIA H100 80GB HBM3",
        "memoryMiB": 81920,
        "count": 2,
        "topology": "nvswitch",
    }
    if mig:
        gpu["mig"] = list(mig)
    spec = ClusterSpec.model_validate(
        {
            "name": "phantoms",
            "pools": [{"name": "n", "count": 1, "cpu": 32, "memory": "128Gi", "gpu": gpu}],
        }
    )
    clock = FakeClock()
    cache = SchedulerCache(clock)
    writer = ReservationWriter(Kube(cast(Any, None)), "ns", "me", now=clock.now)
    book = ReservationBook(
        cache, writer, clock, pod_named=lambda key: None, forget=cache.forget_pod
    )
    for node in build_fleet(spec):
        if node.inventory is not None:
            cache.set_inventory(node.name, node.inventory)
        cache.add_node(node.node)
    return cache, book, node_names(spec)[0]


def _lease(node: str, *entries: Reservation) -> dict[str, Any]:
    payload = {"v": 1, "r": {r.uid: r.to_json() for r in entries}}
    return {
        "metadata": {
            "name": LEASE_PREFIX + node,
            "namespace": "ns",
            "resourceVersion": "1",
            "labels": {NODE_LABEL: node},
            "annotations": {RESERVATIONS_ANNOTATION: json.dumps(payload)},
        }
    }


def test_another_replicas_shares_are_booked_as_shares_not_whole_gpus() -> None:
    cache, book, node = _book()
    entries = [
        _entry("r1", 30 * GI, gpu=0, swap=False, cores=20),
        _entry("r2", 20 * GI, gpu=0, swap=True),
        _entry("w", 0, gpu=1, exclusive=True),
    ]
    book.on_lease("ADDED", _lease(node, *entries))
    info = cache.node_info(node)
    assert info is not None
    gpu0, gpu1 = info.ledger.devices
    assert gpu0.holders == {phantom_key("r1"): 30 * GI, phantom_key("r2"): 20 * GI}
    assert (gpu0.exclusive, gpu0.pinned_mib, gpu0.cores_used) == (None, 30 * GI, 20)
    assert gpu1.exclusive == phantom_key("w")
    # A third share still fits GPU 0 (before, the phantoms booked it whole: nothing fit).
    assert info.ledger.shareable_devices(20 * GI) == [0]
    cache._check()
    book._check()


def test_a_phantom_share_beyond_this_replicas_view_is_booked_over_the_limits() -> None:
    cache, book, node = _book()
    book.on_lease(
        "ADDED", _lease(node, *(_entry(f"r{i}", 30 * GI, gpu=0, swap=True) for i in range(3)))
    )
    info = cache.node_info(node)
    assert info is not None
    assert info.ledger.devices[0].reserved_mib == 90 * GI  # more than 80Gi: it holds, so count it
    assert info.ledger.shareable_devices(GI) == [1]  # GPU 0 takes nothing more until it is back
    cache._check()


def test_another_replicas_mig_devices_are_booked_by_uuid() -> None:
    cache, book, node = _book(mig=("2g.20gb", "2g.20gb", "2g.20gb", "1g.10gb"))
    info = cache.node_info(node)
    assert info is not None
    taken = info.ledger.devices[1].mig[2]
    older = _entry("old", 20 * GI, gpu=0)  # an older writer's MIG entry: no UUIDs
    book.on_lease("ADDED", _lease(node, _entry("r1", 20 * GI, gpu=1, uuids=(taken.uuid,)), older))
    assert taken.holder == phantom_key("r1")
    assert [m.holder for d in info.ledger.devices for m in d.mig].count(None) == 7
    assert not book.is_phantom("old")  # cannot say which device: the Lease check still holds
    # Counted under its resource, as the pod's own request would be.
    assert info.requested.scalar.get(taken.resource) == 1
    cache._check()
    book._check()
