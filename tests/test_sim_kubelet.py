"""The simulated kubelet: node heartbeats on a fake clock, and admission as a kubelet's."""

from __future__ import annotations

import asyncio
import contextlib
from fractions import Fraction
from typing import Any

import pytest

from gpusched.clock import FakeClock
from gpusched.kube.client import Kube
from gpusched.quantity import parse_quantity
from gpusched.sim import SimCluster
from gpusched.sim.fleet import load_cluster_spec
from gpusched.sim.kubelet import (
    UNEXPECTED_ADMISSION_ERROR,
    AdmissionFailure,
    SimKubelet,
    admission_failure,
)

LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"


async def _next_renewals(kube: Kube, rv: str, count: int) -> tuple[list[str], str]:
    renewals: list[str] = []
    async for event in kube.watch(LEASES, {"resourceVersion": rv, "timeoutSeconds": "30"}):
        renewals.append(event["object"]["spec"]["renewTime"])
        rv = event["object"]["metadata"]["resourceVersion"]
        if len(renewals) == count:
            break
    return renewals, rv


async def test_heartbeats_renew_node_leases_on_the_kubelets_clock() -> None:
    clock = FakeClock()
    spec = load_cluster_spec("dgx-h100", nodes=2)
    async with SimCluster(spec, clock=clock, kubelets=False) as sim:
        kubelet = SimKubelet(Kube(sim.api_client()), clock, heartbeat=10)
        task = asyncio.create_task(kubelet.run())
        try:
            rv = (await sim.kube.get(LEASES))["metadata"]["resourceVersion"]
            first, rv = await _next_renewals(sim.kube, rv, 2)
            assert len(set(first)) == 1
            leases = (await sim.kube.get(LEASES))["items"]
            assert sorted(lease["metadata"]["name"] for lease in leases) == [
                "dgx-h100-000",
                "dgx-h100-001",
            ]
            assert leases[0]["metadata"]["ownerReferences"][0]["kind"] == "Node"
            await clock.wait_for_sleepers(1)  # the heartbeat loop sleeps until the next beat
            await clock.advance(10)
            second, _ = await _next_renewals(sim.kube, rv, 2)
            assert second[0] > first[0]
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


# --------------------------------------------------------------------------- admission

_NODE = {
    "cpu": "8",
    "memory": "16Gi",
    "pods": "3",
    "nvidia.com/gpu": "8",
    "gpusched.io/gpu": "80",
    "hugepages-2Mi": "0",
}


def _q(**values: str) -> dict[str, Fraction]:
    """``_q(nvidia_com__gpu="1")`` is ``{"nvidia.com/gpu": 1}``."""
    return {
        k.replace("__", "/").replace("_", "."): Fraction(parse_quantity(v))
        for k, v in values.items()
    }


ADMISSION_CASES = [
    pytest.param(_q(cpu="1", pods="1"), {}, 0, None, id="fits"),
    pytest.param(
        # gpusched.io/vram is advertised by no device plugin: removeMissingExtendedResources
        # drops it before the fit check, whatever its size.
        _q(gpusched_io__gpu="1", gpusched_io__vram="80Gi", pods="1"),
        {},
        0,
        None,
        id="unadvertised-extended-resource-is-ignored",
    ),
    pytest.param(
        _q(example_com__dongle="3", pods="1"), {}, 0, None, id="any-unadvertised-resource"
    ),
    pytest.param(
        _q(gpusched_io__gpu="2", pods="1"),
        _q(gpusched_io__gpu="79"),
        1,
        AdmissionFailure(
            UNEXPECTED_ADMISSION_ERROR,
            "Allocate failed due to requested number of devices unavailable for "
            "gpusched.io/gpu. Requested: 2, Available: 1, which is unexpected",
        ),
        id="device-plugin-resource-short",
    ),
    pytest.param(
        _q(nvidia_com__gpu="9", cpu="100", pods="1"),
        {},
        0,
        AdmissionFailure(
            UNEXPECTED_ADMISSION_ERROR,
            "Allocate failed due to requested number of devices unavailable for "
            "nvidia.com/gpu. Requested: 9, Available: 8, which is unexpected",
        ),
        id="device-manager-runs-before-the-predicate",
    ),
    pytest.param(
        _q(cpu="1500m", pods="1"),
        _q(cpu="7"),
        1,
        AdmissionFailure(
            "OutOfcpu",
            "Node didn't have enough resource: cpu, requested: 1500, used: 7000, capacity: 8000",
        ),
        id="cpu-in-millicores",
    ),
    pytest.param(
        _q(cpu="100", pods="1"),
        {},
        3,
        AdmissionFailure(
            "OutOfpods",
            "Node didn't have enough resource: pods, requested: 1, used: 3, capacity: 3",
        ),
        id="pod-count-first",
    ),
    pytest.param(
        {**_q(memory="17Gi", pods="1"), "hugepages-2Mi": Fraction(2 << 20)},
        {},
        0,
        AdmissionFailure(
            "OutOfmemory",
            "Node didn't have enough resource: memory, requested: 18253611008, used: 0, "
            "capacity: 17179869184",
        ),
        id="memory-before-hugepages",
    ),
    pytest.param(
        {**_q(pods="1"), "hugepages-2Mi": Fraction(2 << 20)},
        {},
        0,
        AdmissionFailure(
            "OutOfhugepages-2Mi",
            "Node didn't have enough resource: hugepages-2Mi, requested: 2097152, used: 0, "
            "capacity: 0",
        ),
        id="advertised-zero",
    ),
    pytest.param(_q(cpu="0", pods="1"), _q(cpu="8"), 1, None, id="zero-request-skipped"),
]


@pytest.mark.parametrize(("requests", "used", "running", "want"), ADMISSION_CASES)
def test_admission_failure(
    requests: dict[str, Fraction],
    used: dict[str, Fraction],
    running: int,
    want: AdmissionFailure | None,
) -> None:
    assert admission_failure(requests, _NODE, used, running) == want


def _shared_pod(name: str, gpus: int, node: str) -> dict[str, Any]:
    limits = {"gpusched.io/gpu": str(gpus), "gpusched.io/vram": "20Gi"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "main", "image": "cuda", "resources": {"limits": limits}}],
        },
    }


async def _phase(kube: Kube, name: str, *phases: str) -> dict[str, Any]:
    path = "/api/v1/namespaces/default/pods"
    rv = (await kube.get(path))["metadata"]["resourceVersion"]
    pod: dict[str, Any] = await kube.get(f"{path}/{name}")
    if (pod.get("status") or {}).get("phase") in phases:
        return pod
    params = {
        "resourceVersion": rv,
        "fieldSelector": f"metadata.name={name}",
        "timeoutSeconds": "30",
    }
    async for event in kube.watch(path, params):
        if (event["object"].get("status") or {}).get("phase") in phases:
            result: dict[str, Any] = event["object"]
            return result
    raise AssertionError(f"{name} never reached {phases}")


async def test_shared_gpu_pods_run_up_to_the_advertised_client_slots() -> None:
    """The fleet advertises gpusched.io/gpu as GPUs x 10 client slots; gpusched.io/vram is
    not advertised, so the kubelet ignores it; the slot after the last is refused."""
    spec = load_cluster_spec("dgx-h100", nodes=1)
    async with SimCluster(spec, clock=FakeClock()) as sim:
        node = (await sim.kube.get("/api/v1/nodes"))["items"][0]
        assert node["status"]["allocatable"]["gpusched.io/gpu"] == "80"
        assert "gpusched.io/vram" not in node["status"]["allocatable"]
        name = node["metadata"]["name"]
        path = "/api/v1/namespaces/default/pods"
        await sim.kube.create(path, _shared_pod("wide", 79, name))
        assert (await _phase(sim.kube, "wide", "Running", "Failed"))["status"]["phase"] == "Running"
        await sim.kube.create(path, _shared_pod("late", 2, name))
        late = await _phase(sim.kube, "late", "Running", "Failed")
        assert late["status"]["reason"] == UNEXPECTED_ADMISSION_ERROR
        assert late["status"]["message"] == (
            "Pod was rejected: Allocate failed due to requested number of devices unavailable "
            "for gpusched.io/gpu. Requested: 2, Available: 1, which is unexpected"
        )
        await sim.kube.create(path, _shared_pod("last", 1, name))
        assert (await _phase(sim.kube, "last", "Running", "Failed"))["status"]["phase"] == "Running"
