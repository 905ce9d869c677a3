"""The simulated kubelet's node heartbeats, on a fake clock."""

from __future__ import annotations

import asyncio
import contextlib

from gpusched.clock import FakeClock
from gpusched.kube.client import Kube
from gpusched.sim import SimCluster
from gpusched.sim.fleet import load_cluster_spec
from gpusched.sim.kubelet import SimKubelet

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
