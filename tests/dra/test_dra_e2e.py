"""DynamicResources end to end on the target cluster (the simulation by default, a real one
with ``GPUSCHED_E2E_KUBECONFIG``) with the real Scheduler and the default profile: a
ResourceClaimTemplate pod gets a claim allocated, reserved for it and its GPUs annotated, and
released once it is deleted; ``matchAttribute`` is honoured; a claim no node can satisfy keeps
the pod pending with the reason; two replicas racing for the last GPUs through claims and
through ``nvidia.com/gpu`` never double-book.

Each test publishes its own ResourceSlices for its fake nodes (NVIDIA's DRA driver's, from
their inventories, plus an ``e2e.gpusched.io/half`` attribute: GPUs 0-3 and 4-7, by name) and
its own DeviceClass, deleted at the end. Skipped when the cluster does not serve
``resource.k8s.io/v1``.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Target

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scheduler"))

from scheduler_bed import Bed, Objects, assert_no_double_booking, bound, objects_until, open_bed

from gpusched.annotations import GPU_IDS, GPU_UUIDS
from gpusched.inventory import API_GROUP as INVENTORY_GROUP
from gpusched.inventory import PLURAL as INVENTORY_PLURAL
from gpusched.inventory import VERSION as INVENTORY_VERSION
from gpusched.inventory import inventory_from_object
from gpusched.kube.client import resource_path
from gpusched.kube.errors import APINotFound
from gpusched.sim.resource_slices import DRIVER, resource_slice

DRA = "resource.k8s.io"
HALF = "e2e.gpusched.io/half"


@pytest.fixture
async def bed(target: Target) -> AsyncIterator[Bed]:
    async with open_bed(target) as bed:
        try:
            await bed.kube.get(resource_path(DRA, "v1", "deviceclasses"))
        except APINotFound:
            pytest.skip("the cluster does not serve resource.k8s.io/v1")
        nodes = await bed.add_nodes(2)
        slices = await publish_slices(bed, nodes)
        await bed.kube.create(resource_path(DRA, "v1", "deviceclasses"), device_class(bed))
        try:
            yield bed
        finally:
            for name in [*slices, class_name(bed)]:
                plural = "resourceslices" if name in slices else "deviceclasses"
                with contextlib.suppress(APINotFound):
                    await bed.kube.delete(resource_path(DRA, "v1", plural, None, name))
            await unprotect_claims(bed)


async def publish_slices(bed: Bed, nodes: list[str]) -> list[str]:
    names = []
    for node in nodes:
        obj = await bed.kube.get(
            resource_path(INVENTORY_GROUP, INVENTORY_VERSION, INVENTORY_PLURAL, None, node)
        )
        body = resource_slice(inventory_from_object(obj))
        body["metadata"]["name"] = f"{bed.prefix}-{node}"
        for device in body["spec"]["devices"]:
            gpu = int(device["name"].split("-")[1])  # gpu-<index>, gpu-<index>-mig-...
            device["attributes"][HALF] = {"int": gpu // 4}
        await bed.kube.create(resource_path(DRA, "v1", "resourceslices"), body)
        names.append(body["metadata"]["name"])
    return names


def class_name(bed: Bed) -> str:
    return f"{bed.prefix}-gpu"


def device_class(bed: Bed) -> dict[str, Any]:
    expression = f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'gpu'"
    return {
        "apiVersion": f"{DRA}/v1",
        "kind": "DeviceClass",
        "metadata": {"name": class_name(bed)},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


async def unprotect_claims(bed: Bed) -> None:
    """Claims a stopped scheduler left allocated keep their finalizer: take it away, so that
    the namespace's deletion does not wait on a real cluster."""
    path = resource_path(DRA, "v1", "resourceclaims", bed.namespace)
    with contextlib.suppress(APINotFound):
        for item in (await bed.kube.get(path))["items"]:
            if item["metadata"].get("finalizers"):
                name = item["metadata"]["name"]
                await bed.kube.patch(f"{path}/{name}", {"metadata": {"finalizers": None}})


def claim_spec(bed: Bed, count: int, match: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "devices": {
            "requests": [
                {"name": "gpus", "exactly": {"deviceClassName": class_name(bed), "count": count}}
            ]
        }
    }
    if match:
        spec["devices"]["constraints"] = [{"matchAttribute": match}]
    return spec


async def create_template(bed: Bed, name: str, count: int, match: str | None = None) -> None:
    body = {
        "apiVersion": f"{DRA}/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": claim_spec(bed, count, match)},
    }
    await bed.kube.create(resource_path(DRA, "v1", "resourceclaimtemplates", bed.namespace), body)


def claim_pod(bed: Bed, name: str, template: str) -> dict[str, Any]:
    body = bed.pod(name)
    body["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": template}]
    body["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpus"}]}
    return body


def claims_path(bed: Bed) -> str:
    return resource_path(DRA, "v1", "resourceclaims", bed.namespace)


def pending_message(pod: dict[str, Any]) -> str:
    for c in (pod.get("status") or {}).get("conditions") or ():
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return str(c.get("message", ""))
    return ""


def devices_of(claim: dict[str, Any]) -> list[tuple[str, str]]:
    """``(pool, device)`` of each device the claim is allocated."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return [(r["pool"], r["device"]) for r in allocation.get("devices", {}).get("results", [])]


def claim_of(claims: Objects, pod: dict[str, Any]) -> dict[str, Any] | None:
    for status in (pod.get("status") or {}).get("resourceClaimStatuses") or ():
        return claims.get(status.get("resourceClaimName", ""))
    return None


def uuids_of(bed_slices: Objects, claim: dict[str, Any]) -> list[str]:
    by_name = {
        (s["spec"]["pool"]["name"], d["name"]): d["attributes"]["uuid"]["string"]
        for s in bed_slices.values()
        for d in s["spec"]["devices"]
    }
    return sorted(by_name[d] for d in devices_of(claim))


async def our_slices(bed: Bed) -> Objects:
    listed = await bed.kube.get(resource_path(DRA, "v1", "resourceslices"))
    return {
        s["metadata"]["name"]: s
        for s in listed["items"]
        if s["metadata"]["name"].startswith(bed.prefix)
    }


async def test_a_template_pod_gets_a_claim_allocated_reserved_and_released(bed: Bed) -> None:
    await create_template(bed, "four", 4, match=HALF)
    async with bed.running():
        await bed.create_pod(claim_pod(bed, "p", "four"))
        pods = await bed.pods_until(lambda ps: bound(ps) == ["p"])
        pod = pods["p"]
        claims = await objects_until(
            bed.kube,
            claims_path(bed),
            lambda cs: any((c.get("status") or {}).get("reservedFor") for c in cs.values()),
        )
        claim = claim_of(claims, pod)
        assert claim is not None
        status = claim["status"]
        assert [r["uid"] for r in status["reservedFor"]] == [pod["metadata"]["uid"]]
        assert "resource.kubernetes.io/delete-protection" in claim["metadata"]["finalizers"]
        terms = status["allocation"]["nodeSelector"]["nodeSelectorTerms"]
        assert terms[0]["matchFields"][0]["values"] == [pod["spec"]["nodeName"]]
        # matchAttribute: the four devices lie in one half of the node (GPUs 0-3 or 4-7).
        annotations = pod["metadata"]["annotations"]
        ids = sorted(int(i) for i in annotations[GPU_IDS].split(","))
        assert len({i // 4 for i in ids}) == 1
        assert len(ids) == 4
        assert sorted(annotations[GPU_UUIDS].split(",")) == uuids_of(await our_slices(bed), claim)
        assert_no_double_booking(pods, await bed.leases())
        # The wait for the claim's creation was quiet (upstream's PreEnqueue): the pod's
        # Events (written in order) hold Scheduled and no FailedScheduling before it.
        events = await objects_until(
            bed.kube,
            resource_path("", "v1", "events", bed.namespace),
            lambda es: any(
                e["involvedObject"].get("name") == "p" and e["reason"] == "Scheduled"
                for e in es.values()
            ),
        )
        assert [e["reason"] for e in events.values() if e["involvedObject"].get("name") == "p"] == [
            "Scheduled"
        ]
        await bed.delete_pod("p", now=True)
        name = claim["metadata"]["name"]
        await objects_until(
            bed.kube,
            claims_path(bed),
            lambda cs: (
                name not in cs
                or not (
                    (cs[name].get("status") or {}).get("reservedFor")
                    or (cs[name].get("status") or {}).get("allocation")
                )
            ),
        )


async def test_a_claim_no_node_can_satisfy_stays_pending_with_the_reason(bed: Bed) -> None:
    # Five GPUs in one half: each half of a node has four.
    await create_template(bed, "five", 5, match=HALF)
    async with bed.running():
        await bed.create_pod(claim_pod(bed, "p", "five"))
        pods = await bed.pods_until(
            lambda ps: "cannot allocate all claims" in pending_message(ps.get("p", {}))
        )
    assert not bound(pods)


async def test_two_replicas_racing_through_claims_and_gpus_never_double_book(bed: Bed) -> None:
    await create_template(bed, "two", 2)
    # 16 GPUs; 6 claim pods and 6 nvidia.com/gpu pods of two GPUs each: 8 fit.
    bodies = [claim_pod(bed, f"c{i}", "two") for i in range(6)]
    bodies += [bed.pod(f"g{i}", 2) for i in range(6)]
    async with bed.running("a"), bed.running("b"):
        await bed.create_pods(bodies, concurrency=4)
        pods = await bed.pods_until(lambda ps: len(bound(ps)) == 8)
        claims = await objects_until(
            bed.kube,
            claims_path(bed),
            lambda cs: (
                sum(bool((c.get("status") or {}).get("reservedFor")) for c in cs.values())
                == sum(1 for n in bound(pods) if n.startswith("c"))
            ),
        )
    assert_no_double_booking(pods, await bed.leases())
    # At most 6 of either kind fit in 16 GPUs: both kinds got some of the last GPUs.
    assert {n[0] for n in bound(pods)} == {"c", "g"}
    slices = await our_slices(bed)
    held: dict[str, list[str]] = {}
    for name in bound(pods):
        pod = pods[name]
        node = pod["spec"]["nodeName"]
        held.setdefault(node, []).extend(pod["metadata"]["annotations"][GPU_UUIDS].split(","))
        claim = claim_of(claims, pod)
        if name.startswith("c"):
            assert claim is not None
            assert sorted(pod["metadata"]["annotations"][GPU_UUIDS].split(",")) == uuids_of(
                slices, claim
            )
    for node, uuids in held.items():
        assert len(uuids) == len(set(uuids)), f"GPUs double-booked on {node}"
    allocated = [u for c in claims.values() for u in uuids_of(slices, c)]
    assert len(allocated) == len(set(allocated)), "a device is in two claims"
