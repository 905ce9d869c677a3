"""DynamicResources (plugins/dynamic_resources.py): the plugin on a framework (Skip and signing
for pods without claims, the message when the API is not served), and on the simulated
cluster with the real Scheduler, the composition with gpusched's device ledger: GPUs a
ResourceClaim holds (allocated by anyone) are never given to an ``nvidia.com/gpu`` pod and
come back when it is deallocated; GPUs pods hold are never allocated to a claim; and
``createClaims`` makes template claims where no controller does."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Target, _target

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scheduler"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "dra"))

from scheduler_bed import Bed, assert_no_double_booking, bound, objects_until, open_bed
from test_dra_e2e import (
    DRA,
    claim_pod,
    claim_spec,
    claims_path,
    class_name,
    create_template,
    device_class,
    pending_message,
    publish_slices,
    unprotect_claims,
)

from gpusched.annotations import GPU_UUIDS
from gpusched.framework import (
    CycleState,
    PluginConfig,
    QueueingHint,
    build_frameworks,
    default_config,
)
from gpusched.framework.registry import in_tree
from gpusched.kube.client import resource_path
from gpusched.kube.errors import APINotFound
from gpusched.plugins.dynamic_resources import NAME, DynamicResources
from gpusched.sim.cluster import SimCluster
from gpusched.sim.resource_slices import DRIVER

# -- on a framework ------------------------------------------------------------------------


def plugin() -> DynamicResources:
    fw = build_frameworks(default_config(), in_tree())["gpusched"]
    found = fw.plugins[NAME]
    assert isinstance(found, DynamicResources)
    return found


def pod(*entries: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "default", "uid": "p"},
        "spec": {"resourceClaims": list(entries)},
    }


@pytest.mark.parametrize(
    ("entries", "code", "signed"),
    [
        ((), "Skip", True),
        (
            ({"name": "gpus", "resourceClaimName": "missing"},),
            "UnschedulableAndUnresolvable",
            False,
        ),
    ],
)
def test_pre_filter_and_signing(
    entries: tuple[dict[str, Any], ...], code: str, signed: bool
) -> None:
    p = plugin()
    _, status = p.pre_filter(CycleState(), pod(*entries))
    assert status.code.name.replace("_", "").lower() == code.lower()
    assert (p.sign_pod(pod(*entries)) is not None) == signed


TEMPLATE_ENTRY = {"name": "gpus", "resourceClaimTemplateName": "two"}


@pytest.mark.parametrize(
    ("create_claims", "template_known", "status", "code", "quiet", "says"),
    [
        (False, False, None, "SUCCESS", False, ""),  # (no claim entries: see below)
        (False, False, [], "UNSCHEDULABLE_AND_UNRESOLVABLE", True, "waiting for resource claim"),
        (True, True, [], "UNSCHEDULABLE_AND_UNRESOLVABLE", True, "creating resource claim"),
        (True, False, [], "UNSCHEDULABLE_AND_UNRESOLVABLE", False, "does not exist; create it"),
        (False, False, [{"name": "gpus", "resourceClaimName": "p-gpus-x"}], "SUCCESS", False, ""),
    ],
)
def test_pre_enqueue_waits_quietly_for_a_claim_on_its_way(
    create_claims: bool,
    template_known: bool,
    status: list[dict[str, str]] | None,
    code: str,
    quiet: bool,
    says: str,
) -> None:
    """Upstream's PreEnqueue: a template's claim not yet named in the pod's status holds the
    pod back, quietly while the claim is on its way (the resourceclaim controller, or gpusched
    with createClaims and the template there), told when nobody can make it."""
    p = plugin()
    p.manager.create_claims = create_claims
    if template_known:
        p.manager.templates[("default", "two")] = {"metadata": {"name": "two"}}
    body = pod() if status is None else pod(TEMPLATE_ENTRY)
    if status:
        body["status"] = {"resourceClaimStatuses": status}
    verdict = p.pre_enqueue(body)
    assert verdict.code.name == code
    assert verdict.quiet is quiet
    assert says in verdict.message()


def test_a_cluster_that_does_not_serve_the_api_keeps_claim_pods_pending_saying_so() -> None:
    p = plugin()
    p.manager.served = False
    _, status = p.pre_filter(CycleState(), pod({"name": "gpus", "resourceClaimName": "c"}))
    assert "does not serve resource.k8s.io/v1" in status.message()


@pytest.mark.parametrize(
    ("before", "after", "queued"),
    [("Running", "Succeeded", True), ("Running", "Failed", True), ("Pending", "Running", False)],
)
def test_a_finished_pod_requeues_pods_waiting_for_devices(
    before: str, after: str, queued: bool
) -> None:
    (hint,) = [
        e.queueing_hint_fn
        for e in plugin().events_to_register()
        if e.event.resource == "Pod" and e.queueing_hint_fn is not None
    ]
    got = hint(pod(), {"status": {"phase": before}}, {"status": {"phase": after}})
    assert (got == QueueingHint.QUEUE) == queued


# -- on the simulated cluster ------------------------------------------------------------


@pytest.fixture
async def bed(target: Target) -> AsyncIterator[Bed]:
    if target.sim is None:
        pytest.skip("writes claims' status as another scheduler would: simulation only")
    async with open_bed(target) as bed:
        nodes = await bed.add_nodes(1)
        await publish_slices(bed, nodes)
        await bed.kube.create(resource_path(DRA, "v1", "deviceclasses"), device_class(bed))
        try:
            yield bed
        finally:
            await unprotect_claims(bed)


async def allocate_elsewhere(bed: Bed, name: str, indices: list[int]) -> dict[str, Any]:
    """A claim allocated by another scheduler (kube-scheduler): GPUs ``indices`` of the node."""
    node = (await bed.kube.get(resource_path("", "v1", "nodes")))["items"][0]["metadata"]["name"]
    body = {
        "apiVersion": f"{DRA}/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": claim_spec(bed, len(indices)),
    }
    created = await bed.kube.create(claims_path(bed), body)
    created["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {
                        "request": "gpus",
                        "driver": "gpu.nvidia.com",
                        "pool": node,
                        "device": f"gpu-{i}",
                    }
                    for i in indices
                ]
            }
        }
    }
    written: dict[str, Any] = await bed.kube.replace(f"{claims_path(bed)}/{name}/status", created)
    return written


async def test_gpus_a_claim_holds_are_never_given_to_gpu_pods_until_deallocated(
    bed: Bed,
) -> None:
    claim = await allocate_elsewhere(bed, "theirs", [0, 1, 2, 3, 4, 5])
    async with bed.running():
        await bed.create_pod(bed.pod("first", 2))
        pods = await bed.pods_until(lambda ps: bound(ps) == ["first"])
        await bed.create_pod(bed.pod("second", 2))
        await bed.pods_until(lambda ps: "second" in ps and bool(pending_message(ps["second"])))
        claim["status"] = {}
        await bed.kube.replace(f"{claims_path(bed)}/theirs/status", claim)
        pods = await bed.pods_until(lambda ps: sorted(bound(ps)) == ["first", "second"])
    assert_no_double_booking(pods, await bed.leases())
    ids = pods["first"]["metadata"]["annotations"]["gpusched.io/gpu-ids"]
    assert sorted(int(i) for i in ids.split(",")) == [6, 7]


async def test_gpus_pods_hold_are_never_allocated_to_a_claim(bed: Bed) -> None:
    await create_template(bed, "two", 2)
    await create_template(bed, "three", 3)
    async with bed.running():
        await bed.create_pod(bed.pod("g", 6))
        await bed.pods_until(lambda ps: bound(ps) == ["g"])
        await bed.create_pod(claim_pod(bed, "big", "three"))
        await bed.pods_until(
            lambda ps: "cannot allocate all claims" in pending_message(ps.get("big", {}))
        )
        await bed.create_pod(claim_pod(bed, "c", "two"))
        pods = await bed.pods_until(lambda ps: sorted(bound(ps)) == ["c", "g"])
    held = pods["g"]["metadata"]["annotations"][GPU_UUIDS].split(",")
    got = pods["c"]["metadata"]["annotations"][GPU_UUIDS].split(",")
    assert not set(held) & set(got)
    assert len(got) == 2
    assert_no_double_booking(pods, await bed.leases())


async def test_create_claims_makes_template_claims_where_no_controller_does() -> None:
    async with SimCluster(None, bookmark_interval=0.2, resource_claims=False) as sim:
        async for target in _target(sim):
            async with open_bed(target) as bed:
                nodes = await bed.add_nodes(1)
                await publish_slices(bed, nodes)
                await bed.kube.create(resource_path(DRA, "v1", "deviceclasses"), device_class(bed))
                await create_template(bed, "two", 2)
                config = bed.config()
                profile = config.profiles[0]
                profile = profile.model_copy(
                    update={
                        "plugin_config": [
                            *profile.plugin_config,
                            PluginConfig(name=NAME, args={"createClaims": True}),
                        ]
                    }
                )
                config = config.model_copy(update={"profiles": [profile]})
                async with bed.running(config=config):
                    await bed.create_pod(claim_pod(bed, "p", "two"))
                    pods = await bed.pods_until(lambda ps: bound(ps) == ["p"])
                    claims = await objects_until(
                        bed.kube,
                        claims_path(bed),
                        lambda cs: any(
                            (c.get("status") or {}).get("reservedFor") for c in cs.values()
                        ),
                    )
                statuses = pods["p"]["status"]["resourceClaimStatuses"]
                assert [s["resourceClaimName"] for s in statuses] == list(claims)


async def test_mig_devices_through_claims_and_mig_resources_never_collide(
    target: Target,
) -> None:
    async with open_bed(target) as bed:
        nodes = await bed.add_nodes(1, "mig-small")
        await publish_slices(bed, nodes)
        mig_class = device_class(bed)
        mig_class["metadata"]["name"] = class_name(bed)
        mig_class["spec"]["selectors"][0]["cel"]["expression"] = (
            f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'mig'"
        )
        await bed.kube.create(resource_path(DRA, "v1", "deviceclasses"), mig_class)
        try:
            await create_template(bed, "two-mig", 2)
            mig_pod = bed.pod("m", 0)
            mig_pod["spec"]["containers"][0]["resources"] = {
                "limits": {"nvidia.com/mig-1g.10gb": "1"}
            }
            async with bed.running():
                await bed.create_pod(claim_pod(bed, "c", "two-mig"))
                await bed.pods_until(lambda ps: bound(ps) == ["c"])
                await bed.create_pod(mig_pod)
                pods = await bed.pods_until(lambda ps: sorted(bound(ps)) == ["c", "m"])
            got = pods["c"]["metadata"]["annotations"][GPU_UUIDS].split(",")
            held = pods["m"]["metadata"]["annotations"][GPU_UUIDS].split(",")
            assert len(got) == 2
            assert all(u.startswith("MIG-") for u in got + held)
            assert not set(got) & set(held)  # (MIG devices share GPU indices: UUIDs tell)
        finally:
            await unprotect_claims(bed)
            with contextlib.suppress(APINotFound):
                await bed.kube.delete(
                    resource_path(DRA, "v1", "deviceclasses", None, class_name(bed))
                )


def test_claim_pods_with_equal_claim_specs_sign_alike() -> None:
    p = plugin()
    spec = {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": "x"}}]}}
    for name in ("a", "b", "c"):
        body = {"metadata": {"name": name, "namespace": "default"}, "spec": dict(spec)}
        if name == "c":
            body["spec"] = {"devices": {"requests": [{"name": "other"}]}}
        p.manager.on_claim("ADDED", body, None)
    a = p.sign_pod(pod({"name": "gpus", "resourceClaimName": "a"}))
    assert a is not None
    assert a == p.sign_pod(pod({"name": "gpus", "resourceClaimName": "b"}))
    assert a != p.sign_pod(pod({"name": "gpus", "resourceClaimName": "c"}))
    p.manager.on_class("ADDED", {"metadata": {"name": "x"}, "spec": {}}, None)
    assert a != p.sign_pod(pod({"name": "gpus", "resourceClaimName": "a"}))
