"""``kubectl get gclaim`` on the simulated cluster: the short name and the status columns
(phase, node, devices, slowest link, pods) the CRD's printer columns declare."""

from __future__ import annotations

import asyncio
import shutil

import pytest

from gpusched.kube.client import resource_path
from gpusched.sim import SimCluster

KUBECTL = shutil.which("kubectl")
pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.simonly,
    pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed"),
]


async def kubectl(sim: SimCluster, *args: str) -> str:
    assert KUBECTL is not None
    proc = await asyncio.create_subprocess_exec(
        KUBECTL,
        "--kubeconfig",
        str(sim.kubeconfig_path),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={"HOME": str(sim.kubeconfig_path.parent), "PATH": "/usr/bin:/bin"},
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, f"kubectl {' '.join(args)} failed: {err.decode()}"
    return out.decode()


async def test_get_gclaim_shows_the_status_columns() -> None:
    async with SimCluster(kubelets=False) as sim:
        path = resource_path("gpu.scheduling", "v1", "gpuclaims", "default")
        spec = {
            "devices": {"count": 2, "policy": "contiguous"},
            "topology": {"mode": "Required", "minBandwidthGBps": 600},
        }
        body = {
            "apiVersion": "gpu.scheduling/v1",
            "kind": "GpuClaim",
            "metadata": {"name": "training"},
            "spec": spec,
        }
        await sim.kube.create(path, body)
        status = {
            "phase": "Allocated",
            "nodeName": "dgx-0",
            "devices": [{"index": 0, "uuid": "GPU-a"}, {"index": 1, "uuid": "GPU-b"}],
            "bandwidthGBps": 900.0,
            "pods": ["train"],
        }
        await sim.kube.patch(f"{path}/training/status", {"status": status})
        header, row = (await kubectl(sim, "get", "gclaim", "-n", "default")).splitlines()[:2]
    assert header.split() == ["NAME", "COUNT", "PHASE", "NODE", "DEVICES", "GBPS", "PODS", "AGE"]
    assert row.split()[:4] == ["training", "2", "Allocated", "dgx-0"]
    assert "map[index:1 uuid:GPU-b]" in row
    assert row.split()[-3:-1] == ["900", "[train]"]
