"""Devices ResourceClaims hold, marked in the ledger (NodeLedger.set_claimed, through
SchedulerCache.set_claimed): never free, kept across ledger rebuilds, a version that moves the
node's generation."""

from __future__ import annotations

import pytest

from gpusched.cache import NodeLedger, SchedulerCache
from gpusched.clock import FakeClock
from gpusched.sim.fleet import build_fleet, load_cluster_spec


def inventory():  # type: ignore[no-untyped-def]
    found = build_fleet(load_cluster_spec("dgx-h100", nodes=1))[0].inventory
    assert found is not None
    return found


@pytest.mark.parametrize(
    ("marks", "free"),
    [
        ({}, 8),
        ({0: "ns/c"}, 8),  # an index names only an anonymous GPU: this one has a UUID
        ({"uuid0": "ns/c"}, 7),
        ({"uuid0": "ns/c", "uuid7": "ns/d", "GPU-unknown": "ns/e"}, 6),
    ],
)
def test_claimed_gpus_are_not_free(marks: dict[object, str], free: int) -> None:
    inv = inventory()
    ledger = NodeLedger.from_inventory(inv)
    named = {
        (inv.gpus[int(k[4:])].uuid if isinstance(k, str) and k.startswith("uuid") else k): v
        for k, v in marks.items()
    }
    ledger.set_claimed(named)  # type: ignore[arg-type]
    assert ledger.free_gpu_count == free
    assert len(ledger.free_gpus()) == free
    ledger._check()
    assert ledger.clone().free_gpu_count == free
    ledger.set_claimed({})
    assert ledger.free_gpu_count == 8


def test_a_claimed_gpu_is_booked_by_the_pod_that_uses_the_claim() -> None:
    inv = inventory()
    ledger = NodeLedger.from_inventory(inv)
    ledger.set_claimed({inv.gpus[0].uuid: "ns/c"})
    ledger.allocate("pod", [0], uuids=[inv.gpus[0].uuid])
    assert ledger.held_by_pods(inv.gpus[0].uuid)
    assert not ledger.held_by_pods(inv.gpus[1].uuid)
    assert ledger.locate(inv.gpus[1].uuid) == (1, inv.gpus[1].uuid, inv.gpus[1].memory_mib)
    ledger.release("pod")
    assert ledger.free_gpu_count == 7  # still the claim's
    ledger._check()


def test_the_cache_keeps_marks_for_nodes_to_come_and_versions_move_generations() -> None:
    inv = inventory()
    cache = SchedulerCache(FakeClock())
    node = {
        "metadata": {"name": inv.node_name},
        "status": {"allocatable": {"nvidia.com/gpu": "8"}},
    }
    assert not cache.set_claimed(inv.node_name, {inv.gpus[0].uuid: "ns/c"}, 1)
    cache.set_inventory(inv.node_name, inv)
    info = cache.add_node(node)
    assert info.ledger.free_gpu_count == 7
    generation = info.generation
    cache.set_claimed(inv.node_name, {inv.gpus[0].uuid: "ns/c"}, 2)
    assert info.generation > generation
    assert cache.set_claimed(inv.node_name, {}, 2)  # unmarked: pods waiting may try again
    assert info.ledger.free_gpu_count == 8


def test_held_by_pods_answers_by_index_for_gpus_without_uuids() -> None:
    """DRA devices name GPUs by index where the node's inventory names no UUID: the ledger
    answers for those too, so a claim never gets a GPU a pod holds there."""
    inv = inventory()
    ledger = NodeLedger.from_inventory(inv)
    ledger.allocate("pod", [1], uuids=[inv.gpus[1].uuid])
    assert ledger.held_by_pods(1)
    assert not ledger.held_by_pods(0)
    assert not ledger.held_by_pods(99)  # no such GPU
