"""A GPUWorkload on the target cluster (the simulation, or the real one named by
``GPUSCHED_E2E_KUBECONFIG``, where kube-controller-manager's Job controller and garbage
collector do their part and no kubelet runs the pods): the controller creates the Job, the Job
controller its pod, this test's scheduler binds it to a fake node, and the workload's status
shows the node; deleting the workload deletes its Job through the owner reference.

The controller runs with the flags an operator would give for a tainted GPU pool
(``--profile``, ``--node-selector``, ``--toleration``), pointed at this test's scheduler and
nodes, so nothing else on the cluster is touched."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import Target

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scheduler"))

from scheduler_bed import E2E_LABEL, WAIT, Bed, objects_until, open_bed

from gpusched.kube.client import Kube, resource_path
from gpusched.kube.errors import APIConflict, APIForbidden, APINotFound
from gpusched.runner import parse_toleration
from gpusched.workloads import WorkloadController
from gpusched.workloads.manager import GROUP, PLURAL, STRATEGIES, VERSION, WORKLOAD_LABEL, Settings

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
CRD = Path(__file__).resolve().parents[2] / "deploy" / "crds" / "gpuworkloads.gpu.warp.dev.yaml"


@pytest.fixture
async def bed(target: Target) -> AsyncIterator[Bed]:
    async with open_bed(target) as bed:
        yield bed


async def _ensure_crd(kube: Kube, namespace: str) -> None:
    """Install deploy/crds' GPUWorkload CRD unless the cluster serves the kind."""
    try:
        await kube.get(resource_path(GROUP, VERSION, PLURAL, namespace))
        return
    except APINotFound:
        pass
    crd = yaml.safe_load(CRD.read_text())
    try:
        await kube.create(CRDS, crd)
    except APIConflict:
        pass
    except APIForbidden as exc:
        pytest.skip(f"cannot install the GPUWorkload CRD ({CRD.name}): {exc.message}")
    name = crd["metadata"]["name"]

    def established(crds: dict[str, dict[str, Any]]) -> bool:
        conditions = (crds.get(name, {}).get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)

    await objects_until(kube, CRDS, established)


@contextlib.asynccontextmanager
async def _controller(bed: Bed) -> AsyncIterator[WorkloadController]:
    settings = Settings(
        profiles=dict.fromkeys(STRATEGIES, bed.scheduler_name),
        node_selector={E2E_LABEL: bed.prefix},
        tolerations=(
            parse_toleration(f"{E2E_LABEL}={bed.prefix}:NoSchedule"),
            parse_toleration("node.kubernetes.io/unreachable"),
            parse_toleration("node.kubernetes.io/not-ready"),
        ),
    )
    controller = WorkloadController(
        Kube(bed.target.api()), settings=settings, namespace=bed.namespace
    )
    task = asyncio.create_task(controller.run())
    try:
        await asyncio.wait_for(controller.synced.wait(), WAIT)
        yield controller
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_workload_is_scheduled_and_deleting_it_deletes_its_job(bed: Bed) -> None:
    (node,) = await bed.add_nodes(1, "dgx-h100")
    await _ensure_crd(bed.kube, bed.namespace)
    workloads = resource_path(GROUP, VERSION, PLURAL, bed.namespace)
    jobs = resource_path("batch", "v1", "jobs", bed.namespace)
    pods = resource_path("", "v1", "pods", bed.namespace)
    async with bed.running(), _controller(bed):
        await bed.kube.create(
            workloads,
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "GPUWorkload",
                "metadata": {"name": "llama"},
                "spec": {
                    "modelName": "meta-llama/Llama-2-7b-chat-hf",
                    "gpuCount": 2,
                    "priority": "high",
                    "image": "registry.k8s.io/pause:3.10",
                },
            },
        )

        def placed(ws: dict[str, dict[str, Any]]) -> bool:
            status = ws.get("llama", {}).get("status") or {}
            return status.get("phase") in ("Scheduled", "Running") and bool(
                status.get("assignedNode")
            )

        status = (await objects_until(bed.kube, workloads, placed))["llama"]["status"]
        assert status["assignedNode"] == node
        assert status["attempts"] == 1
        (pod,) = (
            await objects_until(
                bed.kube,
                pods,
                lambda ps: any(p["spec"].get("nodeName") for p in ps.values()),
                query={"labelSelector": f"{WORKLOAD_LABEL}=llama"},
            )
        ).values()
        assert pod["spec"]["schedulerName"] == bed.scheduler_name
        assert pod["metadata"]["annotations"]["gpusched.io/model"] == (
            "meta-llama/Llama-2-7b-chat-hf"
        )
        assert pod["metadata"]["annotations"]["gpusched.io/priority"] == "0"  # high
        assert len(pod["metadata"]["annotations"]["gpusched.io/gpu-ids"].split(",")) == 2
        assert "llama-1" in await objects_until(bed.kube, jobs, lambda js: "llama-1" in js)

    # The garbage collector deletes the Job (and, in the background, its pod).
    await bed.kube.delete(f"{workloads}/llama")
    await objects_until(bed.kube, jobs, lambda js: "llama-1" not in js)
