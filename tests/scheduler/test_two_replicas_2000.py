"""Two replicas without leader election schedule the same 2,000 pods at once.

Zero GPU capacity may be double-booked, checked from the API: the assignment annotations of
the bound pods and the simulated kubelets, which reject any pod a node cannot hold. Every pod
fits (2,000 single-GPU pods on 250 eight-GPU nodes), so every pod must end up bound.
"""

from __future__ import annotations

import asyncio

import pytest
from test_scheduler_integration import (
    PODS,
    assert_no_double_booking,
    bound,
    gpu_pod,
    pods_until,
    running,
)

from gpusched.sim import SimCluster
from gpusched.sim.fleet import load_cluster_spec

pytestmark = pytest.mark.simonly

PODS_TOTAL = 2000


async def test_two_replicas_2000_pods_no_double_booking() -> None:
    async with SimCluster(load_cluster_spec("dgx-h100", nodes=PODS_TOTAL // 8)) as sim:
        await sim.kube.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpusched-system"}},
        )
        async with running(sim, "replica-a"), running(sim, "replica-b"):
            semaphore = asyncio.Semaphore(32)

            async def create(i: int) -> None:
                async with semaphore:
                    await sim.kube.create(PODS, gpu_pod(f"race-{i:04d}"))

            await asyncio.gather(*(create(i) for i in range(PODS_TOTAL)))
            pods = await pods_until(sim.kube, lambda ps: len(bound(ps)) == PODS_TOTAL, timeout=600)
        assert_no_double_booking(pods)
