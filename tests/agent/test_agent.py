"""The node agent on the simulated cluster, over the fake NVML: it publishes what the simulation
publishes, keeps telemetry and health current, writes nothing when nothing changed, and the
scheduler stops placing on a GPU it marks unhealthy. Time is a FakeClock: each step advances
one interval and waits until the agent sleeps again."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gpusched.agent import AgentError
from gpusched.agent.fake_nvml import FakeNVML
from gpusched.agent.main import Agent, AgentSettings
from gpusched.agent.publisher import CONFLICT_RETRIES, OWNED_LABELS_ANNOTATION
from gpusched.annotations import GPU_IDS
from gpusched.clock import FakeClock
from gpusched.framework import default_config
from gpusched.inventory import (
    API_GROUP,
    PLURAL,
    VERSION,
    GPUNodeInventory,
    inventory_from_object,
    node_labels,
)
from gpusched.kube.client import Kube, resource_path
from gpusched.kube.errors import APINotFound
from gpusched.scheduler import Scheduler
from gpusched.sim import FaultRule, SimCluster
from gpusched.sim.fleet import SimNode, build_fleet, load_cluster_spec

WAIT = 60.0  # bound on any wait; never asserted on
GNI = resource_path(API_GROUP, VERSION, PLURAL)


class Recorder:
    """An inventory listener (as the device plugin is one)."""

    def __init__(self) -> None:
        self.seen: list[GPUNodeInventory] = []

    def update(self, inventory: GPUNodeInventory) -> None:
        self.seen.append(inventory)


class Running:
    """An agent running on a FakeClock; :meth:`step` runs one more interval."""

    def __init__(self, agent: Agent, clock: FakeClock) -> None:
        self.agent, self.clock = agent, clock
        self.task = asyncio.create_task(agent.run())

    async def started(self) -> None:
        await asyncio.wait_for(self.clock.wait_for_sleepers(1), WAIT)

    async def step(self, times: int = 1) -> None:
        for _ in range(times):
            await self.clock.advance(self.agent.settings.interval)
            await asyncio.wait_for(self.clock.wait_for_sleepers(1), WAIT)

    async def stop(self) -> None:
        self.agent.stop()
        await asyncio.wait_for(self.task, WAIT)


def _fake(node: SimNode, cluster: str, nodes: int | None = None) -> FakeNVML:
    return FakeNVML.of_sim_node(node, load_cluster_spec(cluster, nodes=nodes))


@contextlib.asynccontextmanager
async def running(
    kube: Kube, nvml: Any, node: str, settings: AgentSettings | None = None, **kw: Any
) -> AsyncIterator[Running]:
    clock = FakeClock()
    run = Running(Agent(kube, nvml, node, settings, clock=clock, env={}, **kw), clock)
    try:
        await run.started()
        yield run
    finally:
        if not run.task.done():
            await run.stop()


async def _inventory(kube: Kube, node: str) -> dict[str, Any]:
    obj: dict[str, Any] = await kube.get(f"{GNI}/{node}")
    return obj


async def _labels(kube: Kube, node: str) -> dict[str, str]:
    obj = await kube.get(f"/api/v1/nodes/{node}")
    return dict(obj["metadata"].get("labels") or {})


async def test_agents_publish_what_the_simulation_publishes() -> None:
    """Every GPU node of the mixed fleet (NVSwitch, hybrid cube mesh, PCIe pairs, MIG): with
    the simulation's inventories and labels removed, the agents write them back the same."""
    cluster = "mixed"
    fleet = [n for n in build_fleet(load_cluster_spec(cluster)) if n.inventory is not None]
    async with SimCluster(cluster, kubelets=False) as sim:
        kube = sim.kube
        before = {n.name: await _inventory(kube, n.name) for n in fleet}
        labels_before = {n.name: await _labels(kube, n.name) for n in fleet}
        for n in fleet:
            assert n.inventory is not None
            await kube.delete(f"{GNI}/{n.name}")
            gone = dict.fromkeys(node_labels(n.inventory))
            await kube.patch(f"/api/v1/nodes/{n.name}", {"metadata": {"labels": gone}})
        async with contextlib.AsyncExitStack() as stack:
            for n in fleet:
                await stack.enter_async_context(running(kube, _fake(n, cluster), n.name))
            for n in fleet:
                after = await _inventory(kube, n.name)
                expected = dict(before[n.name]["spec"], source="nvml")
                assert after["spec"] == expected, n.name
                assert after["metadata"]["labels"] == before[n.name]["metadata"]["labels"]
                assert (
                    after["metadata"]["ownerReferences"]
                    == (before[n.name]["metadata"]["ownerReferences"])
                )
                assert await _labels(kube, n.name) == labels_before[n.name], n.name


async def test_telemetry_is_written_and_nothing_when_nothing_changed() -> None:
    cluster = "dgx-h100"
    node = build_fleet(load_cluster_spec(cluster, nodes=1))[0]
    fake = _fake(node, cluster, nodes=1)
    settings = AgentSettings(interval=10, status_interval=60)
    async with (
        SimCluster(load_cluster_spec(cluster, nodes=1), kubelets=False) as sim,
        running(sim.kube, fake, node.name, settings) as run,
    ):
        writes = run.agent.publisher.writes
        # The simulation's inventory became the agent's (source nvml), its labels were
        # already right (only the ownership annotation), and the first status.
        assert writes == {"inventory": 1, "labels": 1, "status": 1}
        annotations = (await sim.kube.get(f"/api/v1/nodes/{node.name}"))["metadata"]["annotations"]
        assert "nvidia.com/gpu.product" in annotations[OWNED_LABELS_ANNOTATION].split(",")
        await run.step(30)  # five minutes of idle GPUs
        assert writes == {"inventory": 1, "labels": 1, "status": 1}

        fake.set_usage(0, used_mib=40_000, utilization=70, temperature=65)
        await run.step()  # the last status write was long ago: written now
        assert writes["status"] == 2
        status = (await _inventory(sim.kube, node.name))["status"]
        assert status["usedMemoryMiB"] == 40_000
        assert status["gpus"][0] == {
            "index": 0,
            "usedMemoryMiB": 40_000,
            "utilizationPercent": 70,
            "temperatureC": 65,
        }
        fake.set_usage(0, utilization=80)
        await run.step(5)  # within status_interval of the last write: not yet
        assert writes["status"] == 2
        await run.step()
        assert writes["status"] == 3
        await run.step(12)
        assert writes == {"inventory": 1, "labels": 1, "status": 3}
        text = run.agent.metrics.render().decode()
        assert 'gpusched_agent_api_writes_total{kind="status"} 3.0' in text


async def test_xid_79_makes_a_gpu_unhealthy_and_the_scheduler_skips_it() -> None:
    cluster = "dgx-h100"
    node = build_fleet(load_cluster_spec(cluster, nodes=1))[0]
    fake = _fake(node, cluster, nodes=1)
    listener = Recorder()
    async with (
        SimCluster(load_cluster_spec(cluster, nodes=1), kubelets=False) as sim,
        running(sim.kube, fake, node.name, listeners=[listener]) as run,
        scheduling(sim.kube) as scheduler,
    ):
        kube = sim.kube
        fake.inject_xid(3, 79)
        fake.inject_xid(5, 13)  # an application error: the GPU stays healthy
        await run.step()
        spec = inventory_from_object(await _inventory(kube, node.name))
        assert [g.index for g in spec.gpus if not g.healthy] == [3]
        assert spec.gpus[3].health_reason == "XID 79 (GPU has fallen off the bus)"
        assert listener.seen[-1] == spec.model_copy(update={"source": "nvml"})
        assert not listener.seen[0].gpus[3].health_reason  # first: all healthy

        async def seen_by_the_scheduler() -> None:  # its inventory watch, not the pods'
            while True:
                info = scheduler.cache.node_info(node.name)
                inventory = info.inventory if info is not None else None
                if inventory is not None and not inventory.gpus[3].healthy:
                    return
                await asyncio.sleep(0)

        await asyncio.wait_for(seen_by_the_scheduler(), WAIT)
        pods = resource_path("", "v1", "pods", "default")
        await kube.create(pods, _pod("eight", 8))
        eight = await _until(kube, "eight", _unschedulable)
        message = next(
            c["message"] for c in eight["status"]["conditions"] if c["type"] == "PodScheduled"
        )
        assert "too few healthy GPUs" in message, message
        await kube.create(pods, _pod("seven", 7))
        seven = await _until(kube, "seven", lambda p: bool(p["spec"].get("nodeName")))
        ids = {int(i) for i in seven["metadata"]["annotations"][GPU_IDS].split(",")}
        assert ids == {0, 1, 2, 4, 5, 6, 7}


@contextlib.asynccontextmanager
async def scheduling(kube: Kube) -> AsyncIterator[Scheduler]:
    """gpusched's scheduler with its default configuration, synced."""
    await kube.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpusched-system"}},
    )
    scheduler = Scheduler(kube, default_config(), identity="a")
    task = asyncio.create_task(scheduler.run())
    try:
        await asyncio.wait_for(scheduler.ready.wait(), WAIT)
        yield scheduler
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_gpu_that_recovers_is_published_healthy_again() -> None:
    cluster = "dgx-h100"
    node = build_fleet(load_cluster_spec(cluster, nodes=1))[0]
    fake = _fake(node, cluster, nodes=1)
    async with (
        SimCluster(load_cluster_spec(cluster, nodes=1), kubelets=False) as sim,
        running(sim.kube, fake, node.name) as run,
    ):
        fake.set_ecc(6, 4)
        await run.step()
        gpu = (await _inventory(sim.kube, node.name))["spec"]["gpus"][6]
        assert (gpu["health"], gpu["healthReason"]) == (
            "Unhealthy",
            "4 uncorrected ECC error(s) since the last GPU reset",
        )
        fake.set_ecc(6, 0)  # the GPU was reset
        await run.step()
        gpu = (await _inventory(sim.kube, node.name))["spec"]["gpus"][6]
        assert "health" not in gpu
        assert "healthReason" not in gpu
        assert run.agent.publisher.writes["inventory"] == 3
        await run.step(3)
        assert run.agent.publisher.writes["inventory"] == 3


async def test_no_gpu_fails_by_default_and_writes_nothing() -> None:
    cluster = "dgx-h100"
    node = build_fleet(load_cluster_spec(cluster, nodes=1))[0]
    fake = _fake(node, cluster, nodes=1)
    fake.init_error = "LibraryNotFound"
    async with SimCluster(load_cluster_spec(cluster, nodes=1), kubelets=False) as sim:
        await sim.kube.delete(f"{GNI}/{node.name}")
        agent = Agent(sim.kube, fake, node.name, clock=FakeClock(), env={})
        with pytest.raises(AgentError, match="NVML library"):
            await asyncio.wait_for(agent.run(), WAIT)
        with pytest.raises(APINotFound):
            await _inventory(sim.kube, node.name)


async def test_no_gpu_with_allow_no_gpu_publishes_an_empty_inventory() -> None:
    spec = load_cluster_spec("mixed")
    system = next(n for n in build_fleet(spec) if n.inventory is None)  # a CPU node
    fake = _fake(next(n for n in build_fleet(spec) if n.inventory is not None), "mixed")
    fake.init_error = "DriverNotLoaded"
    async with SimCluster(spec, kubelets=False) as sim:
        labels_before = await _labels(sim.kube, system.name)
        settings = AgentSettings(allow_no_gpu=True)
        async with running(sim.kube, fake, system.name, settings) as run:
            assert run.agent.ready.is_set()
            obj = await _inventory(sim.kube, system.name)
            assert obj["spec"] == {
                "nodeName": system.name,
                "source": "nvml",
                "driverVersion": "0.0",
                "cudaDriverVersion": "0.0",
                "gpus": [],
                "links": [],
            }
            assert "status" not in obj
            assert await _labels(sim.kube, system.name) == labels_before  # no GPU labels
            await run.step(3)
            assert run.agent.publisher.writes == {"inventory": 1}


async def test_labels_the_agent_set_and_no_longer_wants_are_removed() -> None:
    cluster = "mig-medium"
    node = build_fleet(load_cluster_spec(cluster, nodes=1))[0]
    fake = _fake(node, cluster, nodes=1)
    async with SimCluster(load_cluster_spec(cluster, nodes=1), kubelets=False) as sim:
        async with running(sim.kube, fake, node.name):
            pass
        labels = await _labels(sim.kube, node.name)
        assert labels["nvidia.com/mig.strategy"] == "mixed"
        await sim.kube.patch(
            f"/api/v1/nodes/{node.name}", {"metadata": {"labels": {"nvidia.com/other": "x"}}}
        )
        no_mig = node.inventory.model_copy(  # type: ignore[union-attr]
            update={
                "gpus": tuple(
                    g.model_copy(update={"mig_enabled": False, "mig_devices": ()})
                    for g in node.inventory.gpus  # type: ignore[union-attr]
                )
            }
        )
        async with running(sim.kube, FakeNVML(no_mig), node.name):
            pass
        labels = await _labels(sim.kube, node.name)
        assert not [k for k in labels if k.startswith("nvidia.com/mig")]
        assert labels["nvidia.com/other"] == "x"  # not the agent's: left alone
        assert labels["nvidia.com/gpu.count"] == "4"


def _pod(name: str, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulerName": "gpusched",
            "containers": [
                {"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
            ],
        },
    }


def _unschedulable(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "PodScheduled" and c.get("status") == "False"
        for c in (pod.get("status") or {}).get("conditions") or ()
    )


async def _until(kube: Kube, name: str, done: Any) -> dict[str, Any]:
    path = resource_path("", "v1", "pods", "default", name)

    async def poll() -> dict[str, Any]:
        while True:
            pod: dict[str, Any] = await kube.get(path)
            if done(pod):
                return pod
            async for _ in kube.watch(
                resource_path("", "v1", "pods", "default"),
                {
                    "fieldSelector": f"metadata.name={name}",
                    "resourceVersion": pod["metadata"]["resourceVersion"],
                    "timeoutSeconds": 5,
                },
            ):
                break

    return await asyncio.wait_for(poll(), WAIT)


async def test_drift_is_repaired_and_a_deleted_inventory_written_again() -> None:
    cluster = "dgx-h100"
    node = build_fleet(load_cluster_spec(cluster, nodes=1))[0]
    fake = _fake(node, cluster, nodes=1)
    settings = AgentSettings(interval=10, status_interval=10, resync_interval=60)
    async with (
        SimCluster(load_cluster_spec(cluster, nodes=1), kubelets=False) as sim,
        running(sim.kube, fake, node.name, settings) as run,
    ):
        kube = sim.kube
        await kube.patch(
            f"/api/v1/nodes/{node.name}",
            {"metadata": {"labels": {"nvidia.com/gpu.product": "something-else"}}},
        )
        writes = dict(run.agent.publisher.writes)
        await run.step(6)  # the resync re-reads the Node
        assert (await _labels(kube, node.name))["nvidia.com/gpu.product"] == (
            "NVIDIA-H100-80GB-HBM3"
        )
        assert run.agent.publisher.writes == {**writes, "labels": writes["labels"] + 1}
        await run.step(6)  # another resync: nothing drifted, nothing written
        assert run.agent.publisher.writes == {**writes, "labels": writes["labels"] + 1}
        await kube.delete(f"{GNI}/{node.name}")
        fake.set_usage(1, used_mib=5)  # the status write finds it gone
        await run.step(2)
        obj = await _inventory(kube, node.name)
        assert obj["spec"]["source"] == "nvml"
        assert obj["status"]["gpus"][1]["usedMemoryMiB"] == 5
        registry = run.agent.metrics.registry
        assert registry.get_sample_value("gpusched_agent_publish_errors_total") == 1


async def test_conflicts_are_retried_with_a_fresh_read_then_the_next_interval() -> None:
    cluster = "dgx-h100"
    node = build_fleet(load_cluster_spec(cluster, nodes=1))[0]
    fake = _fake(node, cluster, nodes=1)
    async with (
        SimCluster(load_cluster_spec(cluster, nodes=1), kubelets=False) as sim,
        running(sim.kube, fake, node.name) as run,
    ):
        sim.faults.set([FaultRule("update", "gpunodeinventories", 1.0, 409)])
        fake.inject_xid(0, 48)
        await run.step()  # every PUT conflicts: CONFLICT_RETRIES reads and writes, then retry
        assert sim.faults.injected[("update", 409)] == CONFLICT_RETRIES
        assert "health" not in (await _inventory(sim.kube, node.name))["spec"]["gpus"][0]
        sim.faults.clear()
        await run.step()
        gpu = (await _inventory(sim.kube, node.name))["spec"]["gpus"][0]
        assert gpu["healthReason"] == "XID 48 (Double Bit ECC Error)"
