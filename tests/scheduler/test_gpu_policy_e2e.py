"""GPU policies reach the scheduler end to end (the simulation by default, or the cluster named
by ``GPUSCHED_E2E_KUBECONFIG``): a ``GPUNodePolicy`` listed at start and one changed while
running set the sharing limits of the ledgers of exactly the nodes it selects, and its status
says how many nodes it applies to; a ``GPUClass`` reaches the plugins' Handle and its status
counts its GPUs. Without the policy CRDs (simulation only: deleting a CRD
deletes every object of it) the scheduler still syncs and schedules, with the defaults."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from conftest import Target
from scheduler_bed import E2E_LABEL, Bed, objects_until, open_bed

from gpusched.cache.ledger import DEFAULT_POLICY, SharingPolicy
from gpusched.kube.client import resource_path
from gpusched.kube.errors import APINotFound
from gpusched.scheduler import Scheduler

POLICIES = resource_path("gpusched.io", "v1alpha1", "gpunodepolicies")
CLASSES = resource_path("gpusched.io", "v1alpha1", "gpuclasses")
CRDS = resource_path("apiextensions.k8s.io", "v1", "customresourcedefinitions")
WANTED = SharingPolicy(vram_percent=150, max_clients_per_gpu=2)


@pytest.fixture
async def bed(target: Target) -> AsyncIterator[Bed]:
    async with open_bed(target) as bed:
        yield bed


def _policy(name: str, prefix: str, hosts: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "gpusched.io/v1alpha1",
        "kind": "GPUNodePolicy",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {
                "matchLabels": {E2E_LABEL: prefix},
                "matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": hosts}
                ],
            },
            "vramOvercommitPercent": 150,
            "maxClientsPerGPU": 2,
        },
    }


def _applied(obj: dict[str, Any] | None, generation: int, nodes: int) -> bool:
    if obj is None:
        return False
    status = obj.get("status") or {}
    conditions = {c["type"]: c["status"] for c in status.get("conditions") or ()}
    return (
        status.get("observedGeneration") == generation
        and status.get("matchingNodes") == nodes
        and conditions.get("Applied") == "True"
        and conditions.get("Overridden") == "False"
    )


def _assert_limits(scheduler: Scheduler, nodes: list[str], policy: SharingPolicy) -> None:
    for node in nodes:
        info = scheduler.cache.node_info(node)
        assert info is not None, node
        assert info.policy == policy, node
        assert info.ledger.policy == policy, node
        assert all(d.policy == policy for d in info.ledger.devices), node
        effective = scheduler.policies.effective(node)
        assert effective is not None


def _generation(obj: dict[str, Any]) -> int:
    return int(obj["metadata"].get("generation", 1))


async def test_a_node_policy_reaches_the_ledgers_of_its_nodes_and_says_so(bed: Bed) -> None:
    nodes = await bed.add_nodes(3)
    name = bed.target.name("overcommit")
    created = await bed.kube.create(POLICIES, _policy(name, bed.prefix, nodes[:2]))
    try:
        async with bed.running() as scheduler:
            # Listed at start: its status comes once the scheduler resolved it.
            await objects_until(
                bed.kube, POLICIES, lambda ps: _applied(ps.get(name), _generation(created), 2)
            )
            _assert_limits(scheduler, nodes[:2], WANTED)
            _assert_limits(scheduler, nodes[2:], DEFAULT_POLICY)
            ledger = scheduler.cache.node_info(nodes[0])
            assert ledger is not None
            device = ledger.ledger.devices[0]
            assert device.memory_mib is not None
            assert device.policy.capacity_mib(device.memory_mib) == device.memory_mib * 3 // 2

            # Changed while running (the watch): the limits move to the newly selected node.
            moved = await bed.kube.patch(
                f"{POLICIES}/{name}",
                {
                    "spec": {
                        "nodeSelector": _policy(name, bed.prefix, nodes[1:])["spec"]["nodeSelector"]
                    }
                },
            )
            await objects_until(
                bed.kube, POLICIES, lambda ps: _applied(ps.get(name), _generation(moved), 2)
            )
            _assert_limits(scheduler, nodes[1:], WANTED)
            _assert_limits(scheduler, nodes[:1], DEFAULT_POLICY)
    finally:
        with contextlib.suppress(APINotFound):
            await bed.kube.delete(f"{POLICIES}/{name}")


def _matched(obj: dict[str, Any] | None, gpus: int) -> bool:
    status = (obj or {}).get("status") or {}
    conditions = {c["type"]: c["status"] for c in status.get("conditions") or ()}
    return status.get("matchingGPUs") == gpus and conditions.get("Matched") == "True"


async def test_a_gpu_class_reaches_the_handle_and_its_status_counts_its_gpus(bed: Bed) -> None:
    await bed.add_nodes(2)  # 8 H100s each
    name = bed.target.name("h100")
    body = {
        "apiVersion": "gpusched.io/v1alpha1",
        "kind": "GPUClass",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"matchLabels": {E2E_LABEL: bed.prefix}},
            "products": ["NVIDIA H100 80GB HBM3"],
            "sharing": {"mode": "exclusive"},
        },
    }
    await bed.kube.create(CLASSES, body)
    try:
        async with bed.running() as scheduler:
            await objects_until(bed.kube, CLASSES, lambda cs: _matched(cs.get(name), 16))
            for fw in scheduler.frameworks.values():
                assert fw.gpu_classes[name].spec.sharing.mode == "exclusive"
            await bed.kube.delete(f"{CLASSES}/{name}")
            await objects_until(bed.kube, CLASSES, lambda cs: name not in cs)
    finally:
        with contextlib.suppress(APINotFound):
            await bed.kube.delete(f"{CLASSES}/{name}")


@pytest.mark.simonly  # deletes the policy CRDs
async def test_without_the_policy_crds_pods_are_scheduled_with_the_defaults(
    bed: Bed, caplog: pytest.LogCaptureFixture
) -> None:
    for plural in ("gpunodepolicies", "clustergpupolicies", "gpuclasses"):
        await bed.kube.delete(f"{CRDS}/{plural}.gpusched.io")
    (node,) = await bed.add_nodes(1)
    async with bed.running() as scheduler:
        await bed.create_pod(bed.pod("p", gpus=1))
        pods = await bed.pods_until(
            lambda ps: bool(ps.get("p", {}).get("spec", {}).get("nodeName"))
        )
        assert pods["p"]["spec"]["nodeName"] == node
        _assert_limits(scheduler, [node], DEFAULT_POLICY)
        assert scheduler.policies.classes == {}
    missing = [
        r.message
        for r in caplog.records
        if "going on without it" in r.message and "/apis/gpusched.io/" in r.message
    ]
    assert len(missing) == 3  # once per resource, however often it is tried
    assert "install its CRD" in missing[0]
