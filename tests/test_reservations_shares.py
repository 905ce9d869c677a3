"""``shares_fit``: a share's Lease write keeps its GPU within VRAM and clients across replicas,
counting each pod once (from the Lease while its bind is in flight, from the cache once bound).
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from gpusched.reservations import (
    NodeLease,
    Reservation,
    ReservationConflict,
    SharedGPU,
    shares_fit,
)

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
