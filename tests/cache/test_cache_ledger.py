"""NodeLedger: booking and releasing devices, over-commit errors, MIG, anonymous GPUs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from cache_builders import H100_MIB, make_inventory

from gpusched.annotations import Assignment
from gpusched.cache import EXCLUSIVE_ONLY, LedgerError, NodeLedger, SharingPolicy

MIG_LAYOUT = {1: [("3g.40gb", 40192), ("2g.20gb", 19968), ("1g.10gb", 9984), ("1g.10gb", 9984)]}


def ledger(count: int = 4, policy: SharingPolicy = EXCLUSIVE_ONLY, **kw: Any) -> NodeLedger:
    return NodeLedger.from_inventory(make_inventory("n1", count, **kw), policy)


def mig_ledger() -> NodeLedger:
    return NodeLedger.from_inventory(make_inventory("n1", 2, mig=MIG_LAYOUT))


def test_whole_gpus_exclusive_reserve_all_memory() -> None:
    led = ledger()
    assert led.free_gpus() == [0, 1, 2, 3]
    assert led.can_fit(4)
    led.allocate("a", [1, 3])
    led._check()
    assert led.free_gpus() == [0, 2]
    assert led.free_gpu_count == 2
    assert not led.can_fit(3)
    dev = led.devices[1]
    assert dev.holders == {"a": H100_MIB}
    assert dev.exclusive == "a"
    assert dev.reserved_mib == H100_MIB
    assert not dev.inferred
    held = led.assignment_of("a")
    assert held == Assignment(
        (1, 3), (led.devices[1].uuid or "", led.devices[3].uuid or ""), (H100_MIB,) * 2, ""
    )
    assert led.holds("a")
    assert led.pods() == ["a"]
    assert led.release("a") is True
    assert led.release("a") is False  # idempotent
    led._check()
    assert led.free_gpus() == [0, 1, 2, 3]
    assert led.assignment_of("a") is None


def test_exclusive_ignores_vram_argument_and_keeps_reservation_uid() -> None:
    led = ledger()
    led.allocate("a", [0], 1000, True, reservation_uid="lease-1")
    assert led.devices[0].reserved_mib == H100_MIB
    held = led.assignment_of("a")
    assert held is not None
    assert held.reservation_uid == "lease-1"


def test_empty_allocation_books_nothing() -> None:
    led = ledger()
    led.allocate("a", [])
    assert not led.holds("a")
    led._check()


def _held(led: NodeLedger) -> None:
    led.allocate("a", [0])


def _mig_held(led: NodeLedger) -> None:
    led.allocate("a", [1], uuids=[led.devices[1].mig[2].uuid])


@pytest.mark.parametrize(
    ("setup", "call", "message"),
    [
        pytest.param(
            _held, lambda led: led.allocate("b", [0]), "GPU 0 is held by pod a", id="held"
        ),
        pytest.param(_held, lambda led: led.allocate("a", [1]), "already holds GPU 0", id="twice"),
        pytest.param(None, lambda led: led.allocate("b", [4]), "GPU 4 does not exist", id="range"),
        pytest.param(None, lambda led: led.allocate("b", [-1]), "GPU -1 does not", id="negative"),
        pytest.param(None, lambda led: led.allocate("b", [2, 2]), "listed twice", id="dup"),
        pytest.param(
            None,
            lambda led: led.allocate("b", [0], uuids=["GPU-00000000-0000-0000-0000-000000000000"]),
            "GPU 0 is GPU-",
            id="uuid-mismatch",
        ),
        pytest.param(
            None, lambda led: led.allocate("b", [0, 1], uuids=["x"]), "1 UUIDs", id="uuid-count"
        ),
        pytest.param(
            None, lambda led: led.allocate("b", [0, 1], [1, 2, 3]), "3 VRAM", id="vram-count"
        ),
        pytest.param(
            None, lambda led: led.allocate("b", [0], 1000, False), "cannot be shared", id="shared"
        ),
    ],
)
def test_over_commit_and_bad_claims_raise_and_change_nothing(
    setup: Callable[[NodeLedger], None] | None,
    call: Callable[[NodeLedger], None],
    message: str,
) -> None:
    led = ledger()
    if setup:
        setup(led)
    before = led.describe()
    with pytest.raises(LedgerError, match=message):
        call(led)
    assert led.describe() == before
    led._check()


def test_claim_is_atomic() -> None:
    led = ledger()
    led.allocate("a", [2])
    with pytest.raises(LedgerError, match="GPU 2 is held"):
        led.allocate("b", [0, 1, 2])
    assert led.free_gpus() == [0, 1, 3]
    assert not led.holds("b")


def test_mig_devices() -> None:
    led = mig_ledger()
    gpu = led.devices[1]
    assert gpu.mig_enabled
    assert led.free_gpus() == [0]  # a MIG GPU is never free as a whole
    assert led.free_mig("nvidia.com/mig-1g.10gb") == [(1, gpu.mig[2].uuid), (1, gpu.mig[3].uuid)]
    assert led.can_fit(mig={"nvidia.com/mig-1g.10gb": 2, "nvidia.com/mig-3g.40gb": 1})
    assert not led.can_fit(mig={"nvidia.com/mig-2g.20gb": 2})
    led.allocate("a", [1, 1], uuids=[gpu.mig[0].uuid, gpu.mig[3].uuid])
    led._check()
    assert gpu.mig[0].holder == "a"
    assert gpu.mig[3].holder == "a"
    assert gpu.holders == {}
    assert led.free_mig("nvidia.com/mig-1g.10gb") == [(1, gpu.mig[2].uuid)]
    held = led.assignment_of("a")
    assert held == Assignment((1, 1), (gpu.mig[0].uuid, gpu.mig[3].uuid), (40192, 9984), "")
    with pytest.raises(LedgerError, match="is held by pod a"):
        led.allocate("b", [1], uuids=[gpu.mig[0].uuid])
    with pytest.raises(LedgerError, match="is not on GPU 0"):
        led.allocate("b", [0], uuids=[gpu.mig[1].uuid])
    with pytest.raises(LedgerError, match="listed twice"):
        led.allocate("b", [1, 1], uuids=[gpu.mig[1].uuid, gpu.mig[1].uuid])
    with pytest.raises(LedgerError, match="in MIG mode"):
        led.allocate("b", [1])
    assert led.holders_of([1, 1], [gpu.mig[0].uuid, gpu.mig[1].uuid]) == ["a"]
    led.release("a")
    led._check()
    assert gpu.mig[0].holder is None


def test_mixed_whole_gpu_and_mig_claim() -> None:
    led = mig_ledger()
    gpu1 = led.devices[1]
    led.allocate("a", [0, 1], uuids=[led.devices[0].uuid or "", gpu1.mig[1].uuid])
    led._check()
    assert led.free_gpus() == []
    assert gpu1.mig[1].holder == "a"


def test_anonymous_gpus() -> None:
    led = NodeLedger.anonymous(3)
    assert led.inventory is None
    assert led.gpu_count == 3
    assert [(d.uuid, d.memory_mib, d.product) for d in led.devices] == [(None, None, None)] * 3
    led.allocate("a", [0, 2])
    led._check()
    assert led.free_gpus() == [1]
    assert led.devices[0].reserved_mib == 0  # memory unknown
    assert led.assignment_of("a") == Assignment((0, 2), (), (0, 0), "")
    assert not led.can_fit(1, vram_mib=1)  # unknown memory meets no VRAM demand
    assert NodeLedger.anonymous(-1).gpu_count == 0


def test_inferred_takes_lowest_free_and_is_marked() -> None:
    led = mig_ledger()
    led.allocate_inferred("k", 1, [("nvidia.com/mig-1g.10gb", 1)])
    led._check()
    gpu1 = led.devices[1]
    assert led.devices[0].inferred
    assert gpu1.mig[2].holder == "k"
    assert gpu1.mig[2].inferred
    assert led.is_inferred("k")
    with pytest.raises(LedgerError, match="1 GPUs asked, 0 free"):
        led.allocate_inferred("j", 1)
    with pytest.raises(LedgerError, match=r"2 x nvidia.com/mig-2g.20gb asked, 1 free"):
        led.allocate_inferred("j", 0, [("nvidia.com/mig-2g.20gb", 2)])
    assert not led.holds("j")
    led.allocate_inferred("j", 0, [("nvidia.com/mig-1g.10gb", 1), ("x", 0)])
    assert gpu1.mig[3].holder == "j"
    led.release("k")
    led._check()
    assert not led.devices[0].inferred
    assert not gpu1.mig[2].inferred


def test_inferred_on_anonymous_gpus() -> None:
    led = NodeLedger.anonymous(4)
    led.allocate("a", [0])
    led.allocate_inferred("k", 2)
    assert led.assignment_of("k") == Assignment((1, 2), (), (0, 0), "")
    led._check()


def test_shared_policy_extension_point() -> None:
    policy = SharingPolicy(allow_shared=True, vram_percent=150)
    assert policy.capacity_mib(1000) == 1500
    assert EXCLUSIVE_ONLY.capacity_mib(1000) == 1000
    led = NodeLedger.from_inventory(make_inventory("n1", 2, memory_mib=1000), policy)
    assert led.can_fit(2, vram_mib=1500, exclusive=False, swap=True)
    assert not led.can_fit(2, vram_mib=1500, exclusive=False)  # beyond the physical 1000
    led.allocate("a", [0, 1], [1000, 600], exclusive=False)
    led.allocate("b", [0], 500, exclusive=False, swap=True)
    led._check()
    assert led.devices[0].holders == {"a": 1000, "b": 500}
    assert led.devices[0].reserved_mib == 1500
    assert not led.can_fit(1, vram_mib=901, exclusive=False, swap=True)
    assert led.can_fit(1, vram_mib=900, exclusive=False, swap=True)
    with pytest.raises(LedgerError, match=r"has 0Mi free of 1.5Gi \(150% of its 1000Mi of memory"):
        led.allocate("c", [0], 1, exclusive=False)
    with pytest.raises(LedgerError, match="GPU 1 is held by pod a"):
        led.allocate("c", [1])  # exclusive needs an empty device
    with pytest.raises(LedgerError, match="must reserve some VRAM"):
        led.allocate("c", [1], None, exclusive=False)
    with pytest.raises(ValueError, match="vram_mib > 0 or vram_percent"):
        led.can_fit(1, exclusive=False)
    led.release("a")
    led.release("b")
    led.allocate("c", [1])
    with pytest.raises(LedgerError, match="held exclusively by pod c"):
        led.allocate("d", [1], 10, exclusive=False)
    led._check()
    anonymous = NodeLedger.anonymous(1, policy)
    with pytest.raises(LedgerError, match="unknown memory"):
        anonymous.allocate("a", [0], 10, exclusive=False)


def test_can_fit_exclusive_memory_floor() -> None:
    led = NodeLedger.from_inventory(make_inventory("n1", 2, memory_mib=1000))
    assert led.can_fit(2, vram_mib=1000)
    assert not led.can_fit(1, vram_mib=1001)
    assert led.can_fit(0)


def test_clone_is_independent() -> None:
    led = mig_ledger()
    led.allocate("a", [0])
    clone = led.clone()
    clone._check()
    assert clone.describe() == led.describe()
    clone.release("a")
    clone.allocate("b", [1], uuids=[clone.devices[1].mig[0].uuid])
    assert led.devices[0].exclusive == "a"
    assert led.devices[1].mig[0].holder is None
    led._check()
    clone._check()


def test_devices_must_be_listed_by_index() -> None:
    from gpusched.cache import GPUDevice

    with pytest.raises(ValueError, match="listed by index"):
        NodeLedger([GPUDevice(1)])


def test_check_catches_corruption() -> None:
    led = ledger()
    led.allocate("a", [0])
    led.devices[0].reserved_mib += 1
    with pytest.raises(AssertionError):
        led._check()


def _unhealthy(inventory: Any, *indices: int) -> Any:
    gpus = list(inventory.gpus)
    for i in indices:
        gpus[i] = gpus[i].model_copy(
            update={"health": "Unhealthy", "health_reason": "XID 79 (GPU has fallen off the bus)"}
        )
    return inventory.model_copy(update={"gpus": tuple(gpus)})


def test_an_unhealthy_gpu_takes_no_new_pod_and_keeps_its_holders() -> None:
    led = NodeLedger.from_inventory(_unhealthy(make_inventory("n", 4), 1))
    assert led.free_gpu_count == 3
    assert led.free_gpus() == [0, 2, 3]
    assert 1 not in led.shareable_devices(10_000)
    assert led.refusals(10_000)[1] == (
        "GPU 1 is unhealthy (XID 79 (GPU has fallen off the bus)) and takes no new pod"
    )
    with pytest.raises(LedgerError, match="GPU 1 is unhealthy"):
        led.allocate("new", [1])
    with pytest.raises(LedgerError, match="GPU 1 is unhealthy"):
        led.allocate("share", [1], 10_000, exclusive=False)
    # A pod already bound there (the cache books bound pods with enforce_limits=False) keeps it,
    # and the free count stays right as it comes and goes.
    led.allocate("bound", [1], enforce_limits=False)
    led.allocate("bound-share", [2], 10_000, exclusive=False, enforce_limits=False)
    led._check()
    assert led.free_gpu_count == 2
    led.release("bound")
    led.release("bound-share")
    led._check()
    assert led.free_gpu_count == 3


def test_the_mig_devices_of_an_unhealthy_gpu_are_not_free() -> None:
    inventory = make_inventory("n", 2, mig={1: [("1g.10gb", 9984), ("1g.10gb", 9984)]})
    led = NodeLedger.from_inventory(_unhealthy(inventory, 1))
    assert led.free_mig("nvidia.com/mig-1g.10gb") == []
    assert not led.can_fit(mig={"nvidia.com/mig-1g.10gb": 1})
    uuid = led.devices[1].mig[0].uuid
    with pytest.raises(LedgerError, match="GPU 1 is unhealthy"):
        led.allocate("new", [1], uuids=[uuid])
    led.allocate("bound", [1], uuids=[uuid], enforce_limits=False)
    led._check()
