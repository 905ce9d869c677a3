"""The node agent does its whole job with exactly the shipped RBAC and own-node policy: after
`kubectl apply -k deploy/` on the RBAC- and policy-enforcing simulation, a real Agent (over the
fake NVML) on a token bound to its node publishes that node's inventory and labels from
scratch, writes telemetry and a GPU's failure, and the API server refuses none of it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from deploy_helpers import DEPLOY, KUBECTL, NAMESPACE

from gpusched.agent.fake_nvml import FakeNVML
from gpusched.agent.main import Agent, AgentSettings
from gpusched.clock import FakeClock
from gpusched.inventory import API_GROUP, PLURAL, VERSION, inventory_from_object, node_labels
from gpusched.kube.client import Kube, resource_path
from gpusched.sim import SimCluster
from gpusched.sim.fleet import build_fleet, load_cluster_spec

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.simonly,
    pytest.mark.skipif(KUBECTL is None, reason="kubectl (with kustomize) is not installed"),
]

WAIT = 60.0  # a bound for a broken build, never asserted on
CLUSTER = "dgx-h100"
AGENT = "gpusched-agent"
GNI = resource_path(API_GROUP, VERSION, PLURAL)


async def _apply_deploy(sim: SimCluster) -> None:
    assert KUBECTL is not None
    proc = await asyncio.create_subprocess_exec(
        *(KUBECTL, "--kubeconfig", str(sim.kubeconfig_path), "apply", "-k", str(DEPLOY)),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={"HOME": str(sim.kubeconfig_path.parent), "PATH": "/usr/bin:/bin"},
    )
    _, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()


async def test_the_agent_publishes_with_the_shipped_permissions() -> None:
    spec = load_cluster_spec(CLUSTER, nodes=2)
    node = build_fleet(spec)[0]
    assert node.inventory is not None
    async with SimCluster(spec, kubelets=False) as sim:
        await _apply_deploy(sim)
        # From scratch: no inventory and no GPU labels on the node.
        await sim.kube.delete(f"{GNI}/{node.name}")
        gone: dict[str, Any] = dict.fromkeys(node_labels(node.inventory))
        await sim.kube.patch(f"/api/v1/nodes/{node.name}", {"metadata": {"labels": gone}})

        token = sim.service_account_token(NAMESPACE, AGENT, node=node.name)
        kube = Kube(sim.api_client(token=token))
        fake = FakeNVML.of_sim_node(node, spec)
        clock = FakeClock()
        agent = Agent(kube, fake, node.name, AgentSettings(interval=10, status_interval=60),
                      clock=clock, env={})  # fmt: skip
        task = asyncio.create_task(agent.run())
        try:
            await asyncio.wait_for(clock.wait_for_sleepers(1), WAIT)
            fake.inject_xid(2, 79)
            fake.set_usage(0, used_mib=1024, utilization=50, temperature=60)
            for _ in range(7):  # past status_interval: the telemetry is written too
                await clock.advance(10)
                await asyncio.wait_for(clock.wait_for_sleepers(1), WAIT)
        finally:
            agent.stop()
            await asyncio.wait_for(task, WAIT)

        published = await sim.kube.get(f"{GNI}/{node.name}")
        assert published["spec"]["source"] == "nvml"
        inventory = inventory_from_object(published)
        assert [g.index for g in inventory.gpus if not g.healthy] == [2]
        assert published["status"]["gpus"][0]["usedMemoryMiB"] == 1024
        labels = (await sim.kube.get(f"/api/v1/nodes/{node.name}"))["metadata"]["labels"]
        assert node_labels(node.inventory).items() <= labels.items()
        user = f"system:serviceaccount:{NAMESPACE}:{AGENT}"
        assert [m for u, m in sim.server.refusals if u == user] == []
