"""GPU classes and WoolyAI's policy objects, end to end (the simulation by default, or the
cluster named by ``GPUSCHED_E2E_KUBECONFIG``): a pod of a class lands only on the class's GPUs;
a pod asking for a class that does not exist waits, told which exist, and is placed once the
class is created; a ``WoolyNodePolicy`` caps the pods per GPU as its users expect."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from conftest import Target
from scheduler_bed import Bed, bound, objects_until, open_bed

from gpusched.kube.client import resource_path
from gpusched.kube.errors import APINotFound
from gpusched.plugins.gpu_fit import REASON_SHARE_CLIENTS

CLASSES = resource_path("gpusched.io", "v1alpha1", "gpuclasses")
WOOLY_POLICIES = resource_path("woolyai.dev", "v1alpha1", "woolynodepolicies")
V100 = "Tesla V100-SXM2-32GB"


@pytest.fixture
async def bed(target: Target) -> AsyncIterator[Bed]:
    async with open_bed(target) as bed:
        yield bed


@contextlib.asynccontextmanager
async def created(bed: Bed, path: str, body: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    """A cluster-scoped object, deleted at the end."""
    obj: dict[str, Any] = await bed.kube.create(path, body)
    try:
        yield obj
    finally:
        with contextlib.suppress(APINotFound):
            await bed.kube.delete(f"{path}/{body['metadata']['name']}")


def _class(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "gpusched.io/v1alpha1",
        "kind": "GPUClass",
        "metadata": {"name": name},
        "spec": spec,
    }


def _shared(bed: Bed, name: str, vram: str, **annotations: str) -> dict[str, Any]:
    body = bed.pod(name, **annotations)
    body["spec"]["containers"][0]["resources"] = {
        "limits": {"gpusched.io/gpu": "1", "gpusched.io/vram": vram}
    }
    return body


def _waiting(pod: dict[str, Any]) -> str | None:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return str(cond.get("message", ""))
    return None


def _node(pod: dict[str, Any]) -> str:
    return str(pod["spec"].get("nodeName", ""))


async def test_pods_of_a_class_land_only_on_its_gpus(bed: Bed) -> None:
    h100 = await bed.add_nodes(1, "dgx-h100")
    v100 = await bed.add_nodes(1, "dgx-v100")
    name = bed.target.name("v100")
    async with created(bed, CLASSES, _class(name, products=[V100])), bed.running() as scheduler:
        assert name in scheduler.policies.classes  # listed before the scheduler is ready
        pods = [f"c{i}" for i in range(3)]
        for pod in pods:
            await bed.create_pod(_shared(bed, pod, "4Gi", **{"gpusched.io/gpu-class": name}))
        await bed.create_pod(bed.pod("whole", **{"cuda.scheduler.io/gpu-class": name}))
        got = await bed.pods_until(lambda ps: {*pods, "whole"} <= set(bound(ps)))
        assert {_node(got[p]) for p in [*pods, "whole"]} == set(v100), (h100, v100)


async def test_an_unknown_class_waits_with_the_message_then_is_placed(bed: Bed) -> None:
    await bed.add_nodes(1, "dgx-h100")
    name = bed.target.name("late")
    async with bed.running():
        await bed.create_pod(_shared(bed, "p", "1Gi", **{"gpusched.io/gpu-class": name}))
        pods = await bed.pods_until(lambda ps: _waiting(ps.get("p", {})) is not None)
        message = _waiting(pods["p"]) or ""
        assert f"GPUClass {name!r}" in message
        assert "does not exist" in message
        assert "create it" in message
        events = await objects_until(
            bed.kube,
            bed.events_path,
            lambda evs: any(
                e["reason"] == "FailedScheduling" and e["involvedObject"]["name"] == "p"
                for e in evs.values()
            ),
        )
        assert any("does not exist" in e["message"] for e in events.values())
        # Creating the class re-queues the pod (GPUFit's hint on GPUClass events).
        async with created(bed, CLASSES, _class(name)):
            await bed.pods_until(lambda ps: "p" in bound(ps))


async def test_a_woolyai_node_policy_caps_pods_per_gpu(bed: Bed) -> None:
    (node,) = await bed.add_nodes(1, "dgx-h100")
    policy_name = bed.target.name("two-per-gpu")
    policy = {
        "apiVersion": "woolyai.dev/v1alpha1",
        "kind": "WoolyNodePolicy",
        "metadata": {"name": policy_name},
        "spec": {"targetSelector": {"kubernetes.io/hostname": node}, "maxClientsPerGPU": 2},
    }
    ids = {"gpusched.io/gpu-ids-request": "0"}
    async with created(bed, WOOLY_POLICIES, policy), bed.running() as scheduler:
        effective = scheduler.policies.effective(node)  # listed before the scheduler is ready
        assert effective is not None
        assert effective.source["maxClientsPerGPU"] == f"WoolyNodePolicy/{policy_name}"
        for pod in ("a", "b"):
            await bed.create_pod(_shared(bed, pod, "1Gi", **ids))
        await bed.pods_until(lambda ps: {"a", "b"} <= set(bound(ps)))
        await bed.create_pod(_shared(bed, "third", "1Gi", **ids))
        pods = await bed.pods_until(lambda ps: _waiting(ps.get("third", {})) is not None)
        assert REASON_SHARE_CLIENTS in (_waiting(pods["third"]) or "")
        assert "third" not in bound(pods)


async def test_a_pod_of_an_exclusive_class_keeps_its_gpu_alone(bed: Bed) -> None:
    await bed.add_nodes(1, "dgx-h100")
    name = bed.target.name("solo")
    ids = {"gpusched.io/gpu-ids-request": "0"}
    async with created(bed, CLASSES, _class(name, sharing={"mode": "exclusive"})):
        async with bed.running():
            await bed.create_pod(
                _shared(bed, "solo", "1Gi", **ids, **{"gpusched.io/gpu-class": name})
            )
            await bed.pods_until(lambda ps: "solo" in bound(ps))
            await bed.create_pod(_shared(bed, "joiner", "1Gi", **ids))
            pods = await bed.pods_until(lambda ps: _waiting(ps.get("joiner", {})) is not None)
            assert "joiner" not in bound(pods)
        # A scheduler started afterwards books the bound pod from the API: still alone (its
        # reserved-vram-mib is the whole GPU; the pod's own annotations do not say exclusive).
        async with bed.running("b"):
            await bed.create_pod(_shared(bed, "late", "1Gi", **ids))
            pods = await bed.pods_until(lambda ps: _waiting(ps.get("late", {})) is not None)
            assert "late" not in bound(pods), _waiting(pods["late"])


async def test_a_class_no_node_has_says_why(bed: Bed) -> None:
    await bed.add_nodes(1, "dgx-h100")
    name = bed.target.name("a40")
    async with created(bed, CLASSES, _class(name, products=["NVIDIA A40"])), bed.running():
        await bed.create_pod(_shared(bed, "p", "1Gi", **{"gpusched.io/gpu-class": name}))
        pods = await bed.pods_until(lambda ps: _waiting(ps.get("p", {})) is not None)
        message = _waiting(pods["p"]) or ""
        assert f"has a GPU of GPUClass {name}" in message
        assert "the class wants NVIDIA A40" in message
        assert f"kubectl edit gpuclass {name}" in message
