"""The simulated resourceclaim controller (``gpusched.sim.resource_controller``).

Template -> claim -> the pod's ``status.resourceClaimStatuses``; ``reservedFor`` entries of
pods that are gone or done removed (and the claim deallocated, its finalizer dropped);
generated claims of done pods deleted; deleted pods' claims garbage-collected.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from policy_helpers import NS, PODS, wait_for

from gpusched.clock import FakeClock
from gpusched.kube.client import Kube
from gpusched.kube.errors import APINotFound
from gpusched.sim import SimCluster
from gpusched.sim.faults import FaultRule
from gpusched.sim.resource import DELETE_PROTECTION_FINALIZER
from gpusched.sim.resource_controller import POD_CLAIM_NAME_ANNOTATION, generate_name

R = "/apis/resource.k8s.io/v1"
CLAIMS = f"{R}/namespaces/{NS}/resourceclaims"
TEMPLATES = f"{R}/namespaces/{NS}/resourceclaimtemplates"
REQUESTS = {
    "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}
}


@pytest.fixture
async def sim() -> AsyncIterator[SimCluster]:
    async with SimCluster(None, kubelets=False, resource_claims=True) as cluster:
        yield cluster


@pytest.fixture
def kube(sim: SimCluster) -> Kube:
    return sim.kube


async def template(kube: Kube, name: str = "one-gpu") -> dict[str, Any]:
    body = {
        "metadata": {"name": name},
        "spec": {
            "metadata": {"labels": {"team": "a"}, "annotations": {"note": "x"}},
            "spec": REQUESTS,
        },
    }
    result: dict[str, Any] = await kube.create(TEMPLATES, body)
    return result


def pod(name: str, **claim: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {"name": "main", "image": "cuda", "resources": {"claims": [{"name": "gpu"}]}}
            ],
            "resourceClaims": [{"name": "gpu", **claim}],
        },
    }


def has_statuses(p: dict[str, Any]) -> bool:
    return bool((p.get("status") or {}).get("resourceClaimStatuses"))


async def claim_of(kube: Kube, name: str) -> dict[str, Any]:
    p = await wait_for(kube, f"{PODS}/{name}", has_statuses)
    [status] = p["status"]["resourceClaimStatuses"]
    assert status["name"] == "gpu"
    result: dict[str, Any] = await kube.get(f"{CLAIMS}/{status['resourceClaimName']}")
    return result


async def wait_gone(kube: Kube, path: str, timeout: float = 10.0) -> None:
    """Return once ``path`` answers 404 (a GET, then a watch for its DELETED event)."""
    collection, _, name = path.rpartition("/")
    async with asyncio.timeout(timeout):
        while True:
            try:
                obj = await kube.get(path)
            except APINotFound:
                return
            query = {
                "fieldSelector": f"metadata.name={name}",
                "resourceVersion": obj["metadata"]["resourceVersion"],
            }
            async for ev in kube.watch(collection, query):
                if ev["type"] == "DELETED":
                    return


async def allocate(kube: Kube, claim: dict[str, Any], *pods: dict[str, Any]) -> dict[str, Any]:
    """What the scheduler does: finalizer, allocation, then reservedFor."""
    path = f"{CLAIMS}/{claim['metadata']['name']}"
    claim["metadata"]["finalizers"] = [DELETE_PROTECTION_FINALIZER]
    claim = await kube.replace(path, claim)
    allocation = {
        "devices": {
            "results": [
                {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0"}
            ]
        }
    }
    reserved = [
        {"resource": "pods", "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]}
        for p in pods
    ]
    claim["status"] = {"allocation": allocation, "reservedFor": reserved}
    result: dict[str, Any] = await kube.replace(f"{path}/status", claim)
    return result


@pytest.mark.parametrize(
    ("pod_name", "claim_name", "expected"),
    [
        ("p", "gpu", "p-gpu-"),
        ("x" * 27, "y" * 28, "x" * 27 + "-" + "y" * 28 + "-"),  # 57: as is
        ("a" * 40, "b" * 30, "a" * 31 + "-" + "b" * 23),  # 72: 40*57//72, 30*57//72
        ("x" * 30, "y" * 27, "x" * 28 + "-" + "y" * 26),  # 59: 30*57//59, 27*57//59
    ],
)
def test_generate_name(pod_name: str, claim_name: str, expected: str) -> None:
    assert generate_name(pod_name, claim_name) == expected


async def test_claim_from_template(sim: SimCluster, kube: Kube) -> None:
    await template(kube)
    created = await kube.create(PODS, pod("p", resourceClaimTemplateName="one-gpu"))
    claim = await claim_of(kube, "p")
    meta = claim["metadata"]
    assert meta["name"].startswith("p-gpu-")
    assert meta["generateName"] == "p-gpu-"
    assert meta["annotations"] == {"note": "x", POD_CLAIM_NAME_ANNOTATION: "gpu"}
    assert meta["labels"] == {"team": "a"}
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "p",
            "uid": created["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert claim["spec"]["devices"]["requests"][0]["exactly"]["count"] == 1
    # Another pod is a synchronisation point (one worker, in order): still one claim for p.
    await kube.create(PODS, pod("q", resourceClaimTemplateName="one-gpu"))
    await claim_of(kube, "q")
    claims = await kube.get(CLAIMS)
    assert sorted(c["metadata"]["generateName"] for c in claims["items"]) == ["p-gpu-", "q-gpu-"]
    assert sim.resource_claims is not None
    assert sim.resource_claims.created == 2


async def test_pod_before_its_template(kube: Kube) -> None:
    """As upstream's controller: the pod is told (FailedResourceClaimCreation, once), and the
    template's creation makes the claim. (Another template first: the simulated controller
    watches pods once the cluster has any claim or template.)"""
    await template(kube)
    await kube.create(PODS, pod("p", resourceClaimTemplateName="later"))
    events = "/api/v1/namespaces/default/events"
    async with asyncio.timeout(10):
        while True:
            listed = (await kube.get(events))["items"]
            if listed:
                break
            await asyncio.sleep(0.02)
    (event,) = listed
    assert (event["reason"], event["type"], event["involvedObject"]["name"]) == (
        "FailedResourceClaimCreation",
        "Warning",
        "p",
    )
    assert event["message"].startswith("PodResourceClaim gpu: resource claim template 'later': ")
    assert "not found" in event["message"]
    await template(kube, "later")
    claim = await claim_of(kube, "p")
    assert claim["metadata"]["generateName"] == "p-gpu-"
    assert len((await kube.get(events))["items"]) == 1


async def test_named_claims_are_not_generated(sim: SimCluster, kube: Kube) -> None:
    await template(kube)
    await kube.create(PODS, pod("shared", resourceClaimName="mine"))
    await kube.create(PODS, pod("p", resourceClaimTemplateName="one-gpu"))
    await claim_of(kube, "p")
    shared = await kube.get(f"{PODS}/shared")
    assert not has_statuses(shared)
    assert sim.resource_claims is not None
    assert sim.resource_claims.created == 1


async def test_deleted_pod_releases_and_loses_its_claim(kube: Kube) -> None:
    await template(kube)
    p = await kube.create(PODS, pod("p", resourceClaimTemplateName="one-gpu"))
    claim = await allocate(kube, await claim_of(kube, "p"), p)
    assert claim["status"]["reservedFor"][0]["uid"] == p["metadata"]["uid"]
    await kube.delete(f"{PODS}/p")
    # The garbage collector deletes the owned claim; the finalizer holds it until the
    # controller drops the gone pod's reservation, deallocates and removes the finalizer.
    await wait_gone(kube, f"{CLAIMS}/{claim['metadata']['name']}")


async def test_done_pod_is_unreserved_and_shared_claim_deallocated(kube: Kube) -> None:
    shared = await kube.create(CLAIMS, {"metadata": {"name": "shared"}, "spec": REQUESTS})
    a = await kube.create(PODS, pod("a", resourceClaimName="shared"))
    b = await kube.create(PODS, pod("b", resourceClaimName="shared"))
    await allocate(kube, shared, a, b)
    await kube.patch(
        f"{PODS}/a/status", {"status": {"phase": "Succeeded"}}, "application/merge-patch+json"
    )
    one = await wait_for(
        kube, f"{CLAIMS}/shared", lambda c: len(c["status"].get("reservedFor", [])) == 1
    )
    assert one["status"]["reservedFor"][0]["name"] == "b"
    assert one["status"]["allocation"]  # still in use by b
    await kube.delete(f"{PODS}/b")
    free = await wait_for(kube, f"{CLAIMS}/shared", lambda c: not c["metadata"].get("finalizers"))
    assert free["status"] == {}
    assert "deletionTimestamp" not in free["metadata"]  # not generated: it stays


async def test_generated_claim_of_done_pod_is_deleted(kube: Kube) -> None:
    await template(kube)
    await kube.create(PODS, pod("p", resourceClaimTemplateName="one-gpu"))
    claim = await claim_of(kube, "p")
    await kube.patch(
        f"{PODS}/p/status", {"status": {"phase": "Failed"}}, "application/merge-patch+json"
    )
    await wait_gone(kube, f"{CLAIMS}/{claim['metadata']['name']}")
    assert (await kube.get(f"{PODS}/p"))["status"]["phase"] == "Failed"


async def test_an_allocated_claim_never_reserved_is_deallocated_when_deleted(kube: Kube) -> None:
    """Allocated, then no consumer reserved it (a scheduler stopped between the two writes),
    then deleted: the controller clears the allocation and the finalizer, and it goes."""
    claim = await kube.create(CLAIMS, {"metadata": {"name": "unused"}, "spec": REQUESTS})
    allocated = await allocate(kube, claim)
    assert allocated["status"]["allocation"]
    await kube.delete(f"{CLAIMS}/unused")
    await wait_gone(kube, f"{CLAIMS}/unused")


async def test_api_errors_are_retried_per_item_after_0_1s_doubling() -> None:
    """The controller's queue (gpusched.kube.controller) retries the pod whose claim could not
    be created after 0.1 s, then 0.2 s, and forgets it once synced."""
    clock = FakeClock()
    async with SimCluster(None, kubelets=False, resource_claims=True, clock=clock) as sim:
        controller = sim.resource_claims
        assert controller is not None
        await template(sim.kube)
        sim.faults.set([FaultRule("create", "resourceclaims", 1.0, 500)])
        await sim.kube.create(PODS, pod("p", resourceClaimTemplateName="one-gpu"))
        item = f"pod:{NS}/p"
        for tries, delay in ((1, 0.1), (2, 0.2)):
            async with asyncio.timeout(10):
                while True:  # failed, and the retry is timed
                    if controller.queue.num_requeues(item) == tries and clock.sleepers:
                        break
                    await asyncio.sleep(0.01)
            assert sim.faults.injected[("create", 500)] == tries
            if tries == 2:
                sim.faults.set([])
            await clock.advance(delay)
        await claim_of(sim.kube, "p")
        assert controller.queue.num_requeues(item) == 0
        assert controller.created == 1
