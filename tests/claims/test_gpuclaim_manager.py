"""GpuClaimManager on its own: holders from reservations, bindings and pod events; pods waiting
for a missing or held claim re-queued when that changes; the status a claim's holders make
(bandwidth from the node's inventory); the writes ``flush`` makes on the simulated API server.
Invariants (``_check``) after every step."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest

from gpusched.claims import GpuClaimManager, slowest_link
from gpusched.claims.manager import FINALIZER
from gpusched.inventory import GPUNodeInventory
from gpusched.kube.client import Kube, resource_path
from gpusched.kube.errors import APINotFound
from gpusched.sim.cluster import SimCluster
from gpusched.sim.fleet import build_fleet, load_cluster_spec

NOW = datetime(2025, 1, 2, tzinfo=UTC)
CLAIMS = resource_path("gpu.scheduling", "v1", "gpuclaims", "default")


def inventory(cluster: str) -> GPUNodeInventory:
    inv = build_fleet(load_cluster_spec(cluster), now=NOW)[0].inventory
    assert inv is not None
    return inv


H100 = inventory("dgx-h100")
V100 = inventory("dgx-v100")


@pytest.mark.parametrize(
    ("inv", "ids", "want"),
    [
        (H100, [0, 1], 900.0),  # NV18 on NVSwitch
        (H100, [0, 4, 7], 900.0),
        (V100, [0, 3], 100.0),  # NV2
        (V100, [0, 1], 50.0),  # NV1
        (V100, [0, 3, 5], 32.0),  # 0-5 has no NVLink: PCIe
        (V100, [2], None),  # one GPU: no pair
        (V100, [0, 99], None),  # an index the node lacks
    ],
    ids=["h100-pair", "h100-three", "v100-nv2", "v100-nv1", "v100-pcie", "one", "unknown"],
)
def test_slowest_link(inv: GPUNodeInventory, ids: list[int], want: float | None) -> None:
    assert slowest_link(inv, ids) == want


def claim(name: str, status: dict[str, Any] | None = None, ns: str = "default") -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "gpu.scheduling/v1",
        "kind": "GpuClaim",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"devices": {"count": 2}},
    }
    if status is not None:
        obj["status"] = status
    return obj


def pod(
    name: str, claim_name: str = "c", node: str | None = None, ids: str = "", phase: str = ""
) -> dict[str, Any]:
    annotations = {"gpu.scheduling/claim": claim_name}
    if ids:
        annotations["gpusched.io/gpu-ids"] = ids
        annotations["gpusched.io/gpu-uuids"] = ",".join(f"GPU-{i}" for i in ids.split(","))
    out: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "default", "uid": f"u-{name}"},
        "spec": {"nodeName": node} if node else {},
        "annotations": annotations,
    }
    out["metadata"]["annotations"] = annotations
    if phase:
        out["status"] = {"phase": phase}
    return out


def manager() -> GpuClaimManager:
    return GpuClaimManager(lambda node: {"h100-0": H100, "v100-0": V100}.get(node))


def test_a_missing_claim_waits_and_is_requeued_when_it_appears() -> None:
    m = manager()
    why = m.check(pod("p"))
    assert why is not None
    assert "GpuClaim default/c, which does not exist" in why
    assert m.claim_spec("default", "c") is None
    assert m.on_claim("ADDED", claim("c"), None) == ["u-p"]
    assert m.check(pod("p")) is None
    assert m.claim_spec("default", "c") == {"devices": {"count": 2}}
    m._check()


def test_one_pod_at_a_time_the_next_requeued_when_released() -> None:
    m = manager()
    m.on_claim("ADDED", claim("c"), None)
    m.reserve(pod("a"))
    m._check()
    why = m.check(pod("b"))
    assert why is not None
    assert "held by pod a" in why
    assert m.check(pod("a")) is None  # its own claim
    assert m.unreserve(pod("a")) == ["u-b"]
    m._check()
    assert m.check(pod("b")) is None


def test_bound_pods_make_the_status_and_deletion_releases() -> None:
    m = manager()
    m.on_claim("ADDED", claim("c"), None)
    assert m.desired_status(("default", "c")) is None  # never held: nothing to write
    m.reserve(pod("a"))
    assert m.desired_status(("default", "c")) is None  # reserved, not bound yet
    m.bound(pod("a"), "v100-0", [(0, "GPU-0"), (3, "GPU-3")])
    m.on_pod("MODIFIED", pod("a", node="v100-0", ids="0,3"), None)
    assert m.unreserve(pod("a")) == []  # seen bound: kept
    assert m.desired_status(("default", "c")) == {
        "phase": "Allocated",
        "nodeName": "v100-0",
        "devices": [{"index": 0, "uuid": "GPU-0"}, {"index": 3, "uuid": "GPU-3"}],
        "bandwidthGBps": 100.0,
        "pods": ["a"],
        "message": None,
    }
    # The pod event agrees (another replica learns the same from it alone).
    other = manager()
    other.on_claim("ADDED", claim("c"), None)
    other.on_pod("MODIFIED", pod("a", node="v100-0", ids="0,3"), None)
    assert other.desired_status(("default", "c")) == m.desired_status(("default", "c"))
    m.check(pod("b"))
    allocated = claim("c", m.desired_status(("default", "c")))
    m.on_claim("MODIFIED", allocated, None)
    assert m.on_pod("DELETED", pod("a", node="v100-0", ids="0,3"), None) == ["u-b"]
    m._check()
    assert m.desired_status(("default", "c")) == {
        "phase": "Released",
        "nodeName": None,
        "devices": [],
        "bandwidthGBps": None,
        "pods": [],
        "message": None,
    }


def test_a_waiting_pod_s_reason_is_the_claim_s_message_until_it_is_bound() -> None:
    """``status.message`` (the Go GPU scheduler's field): the pod's own PodScheduled=False
    message while it waits, written only when it changes, cleared once the claim is held or
    nobody waits any more."""
    m = manager()
    m.on_claim("ADDED", claim("c"), None)
    waiting = pod("a")
    m.on_pod("ADDED", waiting, None)
    assert m.desired_status(("default", "c")) is None  # not tried yet: nothing to say
    told = {
        **waiting,
        "status": {
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.",
                }
            ]
        },
    }
    m.on_pod("MODIFIED", told, waiting)
    assert m.desired_status(("default", "c")) == {
        "phase": "Pending",
        "message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.",
    }
    m.on_claim("MODIFIED", claim("c", m.desired_status(("default", "c"))), None)
    assert m.desired_status(("default", "c")) is not None  # (the write itself is judged by _same)
    # Bound: Allocated, the message cleared.
    m.bound(pod("a"), "v100-0", [(0, "GPU-0")])
    m.on_pod("MODIFIED", pod("a", node="v100-0", ids="0"), told)
    status = m.desired_status(("default", "c"))
    assert status is not None
    assert (status["phase"], status["message"]) == ("Allocated", None)
    # A waiting pod deleted: the message goes with it.
    other = manager()
    other.on_claim("ADDED", claim("c", {"phase": "Pending", "message": "old"}), None)
    other.on_pod("MODIFIED", told, waiting)
    other.on_pod("DELETED", told, None)
    assert other.desired_status(("default", "c")) == {"message": None}


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_a_finished_pod_releases(phase: str) -> None:
    m = manager()
    m.on_claim("ADDED", claim("c"), None)
    m.on_pod("MODIFIED", pod("a", node="h100-0", ids="1"), None)
    assert [h.name for h in m.holders("default", "c")] == ["a"]
    m.on_pod("MODIFIED", pod("a", node="h100-0", ids="1", phase=phase), None)
    assert m.holders("default", "c") == []
    m._check()


def test_pods_without_a_claim_are_ignored() -> None:
    m = manager()
    plain = {"metadata": {"name": "x", "uid": "u-x"}, "spec": {"nodeName": "n"}}
    assert m.check(plain) is None
    assert m.on_pod("ADDED", plain, None) == []
    m.reserve(plain)
    assert m.unreserve(plain) == []
    m._check()


def test_an_unknown_node_writes_no_bandwidth() -> None:
    m = manager()
    m.on_claim("ADDED", claim("c"), None)
    m.bound(pod("a"), "elsewhere", [(0, ""), (1, "")])
    status = m.desired_status(("default", "c"))
    assert status is not None
    assert status["bandwidthGBps"] is None
    assert status["devices"] == [{"index": 0}, {"index": 1}]


@pytest.fixture
async def kube() -> AsyncIterator[Kube]:
    async with SimCluster(kubelets=False) as cluster:
        yield cluster.kube


async def test_flush_writes_each_change_once(kube: Kube) -> None:
    created = await kube.create(CLAIMS, claim("c"))
    m = manager()
    m.on_claim("ADDED", created, None)
    assert await m.flush(kube) == 0
    m.bound(pod("a"), "h100-0", [(0, "GPU-0"), (1, "GPU-1")])
    assert m.changed.is_set()
    assert await m.flush(kube) == 2  # the in-use finalizer and the status
    assert not m.changed.is_set()
    got = await kube.get(f"{CLAIMS}/c")
    assert got["status"]["phase"] == "Allocated"
    assert got["status"]["bandwidthGBps"] == 900.0
    assert [d["index"] for d in got["status"]["devices"]] == [0, 1]
    m.on_claim("MODIFIED", got, created)  # the informer's copy: nothing more to write
    assert await m.flush(kube) == 0
    m.on_pod("DELETED", pod("a", node="h100-0", ids="0,1"), None)
    assert await m.flush(kube) == 2  # Released, and the finalizer taken away
    got = await kube.get(f"{CLAIMS}/c")
    assert not got["metadata"].get("finalizers")
    assert got["status"]["phase"] == "Released"
    assert "nodeName" not in got["status"]
    assert not got["status"].get("pods")
    m._check()


async def test_flush_skips_a_claim_deleted_meanwhile(kube: Kube) -> None:
    created = await kube.create(CLAIMS, claim("gone"))
    m = manager()
    m.on_claim("ADDED", created, None)
    await kube.delete(f"{CLAIMS}/gone")
    m.bound(pod("a", "gone"), "h100-0", [(0, "GPU-0")])
    assert await m.flush(kube) == 0
    assert m.failed == 0


async def test_a_claim_in_use_is_deleted_only_once_released(kube: Kube) -> None:
    created = await kube.create(CLAIMS, claim("c"))
    m = manager()
    m.on_claim("ADDED", created, None)
    m.bound(pod("a"), "h100-0", [(0, "GPU-0"), (1, "GPU-1")])
    assert await m.flush(kube) == 2  # the finalizer, then the status
    got = await kube.get(f"{CLAIMS}/c")
    assert got["metadata"]["finalizers"] == [FINALIZER]
    await kube.delete(f"{CLAIMS}/c")
    deleting = await kube.get(f"{CLAIMS}/c")  # kept while the pod holds it
    assert deleting["metadata"]["deletionTimestamp"]
    m.on_claim("MODIFIED", deleting, got)
    why = m.check(pod("b"))
    assert why is not None
    assert "is being deleted" in why
    m.on_pod("DELETED", pod("a", node="h100-0", ids="0,1"), None)
    assert await m.flush(kube) == 2  # Released, then no finalizer: the claim goes
    with pytest.raises(APINotFound):
        await kube.get(f"{CLAIMS}/c")
    m._check()


async def test_a_conflicting_write_is_retried(kube: Kube) -> None:
    created = await kube.create(CLAIMS, claim("c"))
    m = manager()
    m.on_claim("ADDED", created, None)
    await kube.patch(f"{CLAIMS}/c", {"metadata": {"labels": {"x": "y"}}})  # the copy is stale
    m.bound(pod("a"), "h100-0", [(0, "GPU-0")])
    assert await m.flush(kube) == 0
    assert m.failed == 1
    assert m.changed.is_set()
    m.on_claim("MODIFIED", await kube.get(f"{CLAIMS}/c"), created)
    assert await m.flush(kube) == 2
    assert m.failed == 0


async def test_two_replicas_racing_for_one_claim_give_it_to_one_pod(kube: Kube) -> None:
    created = await kube.create(CLAIMS, claim("c"))
    first, second = manager(), manager()
    for m in (first, second):
        m.on_claim("ADDED", created, None)
        for name in ("a", "b"):  # both pending pods are known to both replicas
            m.on_pod("ADDED", pod(name), None)
    # Each replica reserved a different pod with the claim (its copy showed no holder).
    first.reserve(pod("a"))
    second.reserve(pod("b"))
    assert await first.acquire(kube, pod("a"), "h100-0", [(0, "GPU-0")]) is None
    why = await second.acquire(kube, pod("b"), "h100-0", [(1, "GPU-1")])
    assert why is not None
    assert "held by pod a" in why
    assert second.unreserve(pod("b")) == []
    got = await kube.get(f"{CLAIMS}/c")
    assert got["status"]["pods"] == ["a"]
    assert got["metadata"]["finalizers"] == [FINALIZER]
    # The loser writes no Released over the winner's allocation.
    assert await second.flush(kube) == 0
    assert (await kube.get(f"{CLAIMS}/c"))["status"]["phase"] == "Allocated"
    for m in (first, second):
        m._check()


async def test_a_status_naming_a_pod_that_is_gone_is_released(kube: Kube) -> None:
    # Left by a scheduler that stopped before its pod ended: no live pod holds it.
    stale = {"phase": "Allocated", "nodeName": "h100-0", "devices": [{"index": 0}], "pods": ["x"]}
    created = await kube.create(CLAIMS, claim("c"))
    created = await kube.patch(f"{CLAIMS}/c/status", {"status": stale})
    m = manager()
    m.on_claim("ADDED", created, None)
    assert m.check(pod("b")) is None  # x is not a live pod: the status does not hold it
    m.on_pod("DELETED", pod("x"), None)
    assert await m.flush(kube) == 1
    assert (await kube.get(f"{CLAIMS}/c"))["status"]["phase"] == "Released"
    assert await m.acquire(kube, pod("b"), "h100-0", [(2, "GPU-2")]) is None
    assert (await kube.get(f"{CLAIMS}/c"))["status"]["pods"] == ["b"]


async def _allocated_elsewhere(kube: Kube) -> dict[str, Any]:
    """Replica B gave claim ``c`` to its pod ``b`` (which exists, pending its binding); returns
    the claim as it was before, the copy replica A's informer still holds."""
    before = await kube.create(CLAIMS, claim("c"))
    body = pod("b")
    body["spec"] = {"containers": [{"name": "main", "image": "cuda"}]}
    await kube.create(resource_path("", "v1", "pods", "default"), body)
    status = {"phase": "Allocated", "nodeName": "v100-0", "devices": [{"index": 0}], "pods": ["b"]}
    await kube.patch(f"{CLAIMS}/c/status", {"status": status})
    return before


async def test_a_holder_this_replica_has_not_seen_still_holds_the_claim(kube: Kube) -> None:
    """Replica A's informers lag: its claim copy is stale and it has not seen pod b. The
    atomic step re-reads the claim on the conflict, asks the API server about b, and yields."""
    stale = await _allocated_elsewhere(kube)
    a = manager()
    a.on_claim("ADDED", stale, None)
    a.on_pod("ADDED", pod("a"), None)
    a.reserve(pod("a"))
    why = await a.acquire(kube, pod("a"), "h100-0", [(0, "GPU-0")])
    assert why is not None
    assert "held by pod b" in why
    assert a.unreserve(pod("a")) == []
    assert await a.flush(kube) == 0  # and writes no Released over b's allocation either
    got = await kube.get(f"{CLAIMS}/c")
    assert got["status"]["pods"] == ["b"]
    assert got["status"]["nodeName"] == "v100-0"
    a._check()


async def test_a_flush_during_the_atomic_step_never_overwrites_another_replica(
    kube: Kube,
) -> None:
    """The manager's background flush runs whenever acquire awaits: it must not write a
    status naming the pod acquire has not yet won."""
    stale = await _allocated_elsewhere(kube)
    a = manager()
    a.on_claim("ADDED", stale, None)
    a.on_pod("ADDED", pod("b"), None)  # pending in A's view: B is in its PreBind
    a.on_pod("ADDED", pod("a"), None)
    a.reserve(pod("a"))

    async def flushing() -> None:
        while True:
            await a.changed.wait()
            await a.flush(kube)

    task = asyncio.create_task(flushing())
    try:
        why = await a.acquire(kube, pod("a"), "h100-0", [(0, "GPU-0")])
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert why is not None
    assert "held by pod b" in why
    assert (await kube.get(f"{CLAIMS}/c"))["status"]["pods"] == ["b"]
    a._check()
