"""NodeInfo: pods and their devices on one node: declared, inferred, conflicts."""

from __future__ import annotations

import pytest
from cache_builders import make_inventory, make_node, make_pod

from gpusched.annotations import GPU_IDS, Assignment
from gpusched.cache import EXCLUSIVE_ONLY, CacheError, LedgerError, NodeInfo, Resources

INV = make_inventory("n1", 4)


def node_info(gpus: int | None = None) -> NodeInfo:
    if gpus is not None:
        return NodeInfo("n1", make_node("n1", gpus=gpus))
    return NodeInfo("n1", make_node("n1", inventory=INV), INV)


def declared(*ids: int) -> Assignment:
    return Assignment(ids, (), (), "")


def held(info: NodeInfo) -> dict[str, tuple[int, ...] | None]:
    return {uid: (p.assignment.gpu_ids if p.assignment else None) for uid, p in info.pods.items()}


def test_node_fields() -> None:
    taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    node = make_node("n1", inventory=INV, labels={"a": "b"}, taints=[taint], unschedulable=True)
    info = NodeInfo("n1", node, INV)
    assert info.labels == {"a": "b"}
    assert info.taints == (taint,)
    assert info.unschedulable
    assert info.allocatable.get("nvidia.com/gpu") == 4
    assert info.inventory is INV
    assert info.ledger.gpu_count == 4
    assert info.error is None
    info._check()


def test_malformed_allocatable_is_recorded() -> None:
    node = make_node("n1", gpus=2)
    node["status"]["allocatable"]["cpu"] = "many"
    info = NodeInfo("n1", node)
    assert info.error is not None
    assert info.error.startswith("status.allocatable:")
    assert info.allocatable == Resources()


def test_pods_add_up_and_generation_moves() -> None:
    info = node_info()
    g0 = info.generation
    a = info.add_pod(make_pod("a").cpu("1").memory("1Gi").obj())
    b = info.add_pod(make_pod("b").cpu("500m").gpus(1).obj())
    assert info.generation > g0
    assert info.requested.as_dict() == {
        "cpu": 1500,
        "memory": 1024**3,
        "nvidia.com/gpu": 1,
        "pods": 2,
    }
    assert a.assignment is None
    assert b.inferred
    assert b.assignment is not None
    assert b.assignment.gpu_ids == (0,)
    g1 = info.generation
    removed = info.remove_pod("uid-b")
    assert removed is not None
    assert removed.uid == "uid-b"
    assert info.generation > g1
    assert info.remove_pod("uid-b") is None
    assert info.requested.as_dict() == {"cpu": 1000, "memory": 1024**3, "pods": 1}
    assert info.ledger.free_gpus() == [0, 1, 2, 3]
    info._check()
    with pytest.raises(CacheError, match="already on node"):
        info.add_pod(make_pod("a").obj())
    with pytest.raises(CacheError, match="not on node"):
        info.update_pod(make_pod("zzz").obj())


def test_assumed_books_exactly_or_raises_without_change() -> None:
    info = node_info()
    info.add_pod(make_pod("a").gpus(2).obj(), declared(1, 2), assumed=True)
    before = info.describe()
    with pytest.raises(LedgerError, match="GPU 2 is held by pod uid-a"):
        info.add_pod(make_pod("b").gpus(1).obj(), declared(2), assumed=True)
    assert info.describe() == before
    with pytest.raises(LedgerError, match="3 GPUs asked, 2 free"):
        info.add_pod(make_pod("c").gpus(3).obj(), None, assumed=True)  # inferred, not enough
    assert info.describe() == before
    info._check()


def test_declared_claim_moves_inferred_holders() -> None:
    info = node_info()
    info.add_pod(make_pod("k").gpus(2).on("n1").obj())  # kube-scheduler-bound: guessed 0, 1
    assert held(info) == {"uid-k": (0, 1)}
    info.add_pod(make_pod("g").gpus(1).on("n1").assigned(declared(0)).obj())
    info._check()
    assert held(info) == {"uid-k": (1, 2), "uid-g": (0,)}
    assert info.pods["uid-k"].inferred
    assert info.pods["uid-k"].conflict is None
    assert not info.pods["uid-g"].inferred


def test_declared_clash_with_declared_is_a_conflict_retried_on_release() -> None:
    info = node_info()
    info.add_pod(make_pod("a").gpus(1).assigned(declared(3)).obj())
    b = info.add_pod(make_pod("b").gpus(1).assigned(declared(3)).obj())
    assert b.assignment is None
    assert b.conflict is not None
    assert "GPU 3 is held by pod uid-a" in b.conflict
    assert info.unplaced == ["uid-b"]
    assert info.requested.get("nvidia.com/gpu") == 2  # it still counts
    info._check()
    info.remove_pod("uid-a")
    info._check()
    assert held(info) == {"uid-b": (3,)}
    assert info.unplaced == []


def test_inferred_pod_without_room_waits_then_gets_devices() -> None:
    info = node_info()
    info.add_pod(make_pod("a").gpus(3).assigned(declared(0, 1, 2)).obj())
    k = info.add_pod(make_pod("k").gpus(2).obj())
    assert k.conflict is not None
    assert "2 GPUs asked, 1 free" in k.conflict
    info._check()
    info.remove_pod("uid-a")
    info._check()
    assert held(info) == {"uid-k": (0, 1)}


def test_declared_moving_inferred_in_vain_changes_nothing() -> None:
    info = node_info()
    info.add_pod(make_pod("k").gpus(1).obj())  # inferred on GPU 0
    bad = info.add_pod(make_pod("g").gpus(2).assigned(declared(0, 9)).obj())
    assert bad.conflict is not None
    assert "GPU 9 does not exist" in bad.conflict
    assert held(info) == {"uid-k": (0,), "uid-g": None}
    info._check()


def test_evicted_inferred_pod_may_end_in_conflict() -> None:
    info = node_info()
    info.add_pod(make_pod("k").gpus(4).obj())
    info.add_pod(make_pod("g").gpus(1).assigned(declared(2)).obj())
    info._check()
    assert held(info) == {"uid-k": None, "uid-g": (2,)}
    assert info.unplaced == ["uid-k"]
    conflict = info.pods["uid-k"].conflict
    assert conflict is not None
    assert "4 GPUs asked, 3 free" in conflict


def test_annotation_error_falls_back_to_inference() -> None:
    info = node_info()
    pod = make_pod("p").gpus(1).annotate(GPU_IDS, "zero").obj()
    p = info.add_pod(pod)
    assert p.error is not None
    assert GPU_IDS in p.error
    assert p.inferred
    info._check()


def test_malformed_quantity_counts_the_pod_only() -> None:
    info = node_info()
    p = info.add_pod(make_pod("p").cpu("a lot").obj())
    assert p.error is not None
    assert p.error.startswith("resources:")
    assert p.requests == Resources(pods=1)
    info._check()


def test_vram_slice_pod_is_a_share() -> None:
    info = node_info()
    p = info.add_pod(make_pod("v").assigned(Assignment((0,), (), (1000,), "")).obj())
    assert not p.exclusive
    assert p.conflict is None
    assert info.ledger.devices[0].holders == {"uid-v": 1000}
    info._check()


def test_vram_slice_pod_on_an_exclusive_only_node_is_booked_over() -> None:
    info = NodeInfo("n1", make_node("n1", inventory=INV), INV, policy=EXCLUSIVE_ONLY)
    p = info.add_pod(make_pod("v").assigned(Assignment((0,), (), (1000,), "")).obj())
    assert p.conflict is None  # it is bound: its VRAM stays counted
    assert info.ledger.is_over("uid-v")
    with pytest.raises(LedgerError, match="cannot be shared"):
        info.add_pod(make_pod("w").assigned(Assignment((1,), (), (1000,), "")).obj(), assumed=True)
    info._check()


def test_update_fast_path_keeps_devices() -> None:
    info = node_info()
    info.add_pod(make_pod("k").gpus(1).obj())
    info.add_pod(make_pod("a").gpus(1).obj())
    info.remove_pod("uid-k")  # GPU 0 is free now; "a" keeps GPU 1
    updated = info.update_pod(make_pod("a").gpus(1).label("x", "y").obj())
    assert updated.assignment is not None
    assert updated.assignment.gpu_ids == (1,)
    assert updated.pod["metadata"]["labels"] == {"x": "y"}
    info._check()


def test_update_changing_demand_books_again() -> None:
    info = node_info()
    info.add_pod(make_pod("a").gpus(1).obj())
    updated = info.update_pod(make_pod("a").gpus(1).assigned(declared(3)).obj())
    assert updated.assignment is not None
    assert updated.assignment.gpu_ids == (3,)
    info._check()


def test_ledger_rebuilt_when_gpus_change() -> None:
    info = node_info(gpus=2)
    assert info.inventory is None
    info.add_pod(make_pod("a").gpus(1).assigned(declared(1)).obj())
    info.add_pod(make_pod("k").gpus(2).obj())
    assert info.unplaced == ["uid-k"]
    info.set_node(make_node("n1", gpus=4))  # device plugin reports more GPUs
    info._check()
    assert held(info) == {"uid-a": (1,), "uid-k": (0, 2)}
    ledger = info.ledger
    info.set_node(make_node("n1", gpus=4, labels={"new": "label"}))
    assert info.ledger is ledger  # same GPUs: not rebuilt
    assert info.labels == {"new": "label"}
    inventory = make_inventory("n1", 8)
    info.set_inventory(inventory)
    info._check()
    assert info.inventory is inventory
    assert info.ledger.devices[1].uuid == inventory.gpus[1].uuid
    assert held(info) == {"uid-a": (1,), "uid-k": (0, 2)}
    info.set_inventory(None)
    info._check()
    assert info.ledger.gpu_count == 4


def test_ghost_node_keeps_pods_and_devices() -> None:
    info = node_info()
    info.add_pod(make_pod("a").gpus(1).obj())
    info.set_node(None)
    assert info.node is None
    assert held(info) == {"uid-a": (0,)}
    info._check()
    ghost = NodeInfo("n2")
    p = ghost.add_pod(make_pod("b").gpus(1).obj())
    assert p.conflict is not None  # a node not known yet has no devices
    ghost.set_node(make_node("n2", gpus=1))
    ghost._check()
    assert held(ghost) == {"uid-b": (0,)}


def test_mig_pod_inferred() -> None:
    inventory = make_inventory("n1", 2, mig={1: [("3g.40gb", 40192), ("1g.10gb", 9984)]})
    info = NodeInfo("n1", make_node("n1", inventory=inventory), inventory)
    p = info.add_pod(make_pod("m").mig("1g.10gb").obj())
    info._check()
    assert p.mig == (("nvidia.com/mig-1g.10gb", 1),)
    assert p.assignment is not None
    assert p.assignment.gpu_uuids == (inventory.gpus[1].mig_devices[1].uuid,)
    assert info.ledger.devices[1].mig[1].holder == "uid-m"


def test_clone_is_independent() -> None:
    info = node_info()
    info.add_pod(make_pod("a").gpus(1).obj())
    clone = info.clone()
    assert clone.describe() == info.describe()
    info.add_pod(make_pod("b").gpus(2).obj())
    info.remove_pod("uid-a")
    assert list(clone.pods) == ["uid-a"]
    assert clone.ledger.free_gpus() == [1, 2, 3]
    assert clone.requested.get("nvidia.com/gpu") == 1
    clone._check()
    info._check()


def test_describe_and_repr() -> None:
    info = node_info()
    p = info.add_pod(make_pod("a", namespace="ns").gpus(1).obj())
    assert repr(p) == "PodInfo('uid-a', 'ns/a', gpus=(0,), conflict=None)"
    assert info.describe()["pods"]["uid-a"]["gpuIds"] == [0]
