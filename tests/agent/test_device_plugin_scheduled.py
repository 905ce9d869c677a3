"""End to end: pods placed by the real Scheduler on the simulated cluster get, from the fake
kubelet's Allocate, exactly the devices the Binding wrote into their annotations.

The simulated kubelets are off (the fake kubelet admits); the node agent's plugins advertise
the inventory the simulation published for each node (read back from the API, as the
scheduler reads it).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from fake_kubelet import FakeKubelet

from gpusched.agent.deviceplugin import DevicePlugins
from gpusched.annotations import GPU_UUIDS, RESERVED_VRAM_MIB
from gpusched.clock import FakeClock
from gpusched.framework import default_config
from gpusched.inventory import inventory_from_object
from gpusched.kube.client import Kube, resource_path
from gpusched.scheduler import Scheduler
from gpusched.sim import SimCluster
from gpusched.sim.fleet import ClusterSpec, load_cluster_spec, node_names

NS = "default"


def _spec() -> ClusterSpec:
    """One DGX H100 node and one all-MIG H100 PCIe node."""
    pools = []
    for cluster in ("dgx-h100", "mig-small"):
        spec = load_cluster_spec(cluster)
        pools += [p.model_copy(update={"count": 1}) for p in spec.pools if p.gpu is not None]
    return load_cluster_spec("dgx-h100").model_copy(update={"name": "dp", "pools": tuple(pools)})


async def _wait_bound(kube: Kube, names: set[str]) -> dict[str, dict[str, Any]]:
    """Watch the namespace's pods until all of ``names`` are bound."""
    path = resource_path("", "v1", "pods", NS)

    async def follow() -> dict[str, dict[str, Any]]:
        listed = await kube.get(path)
        pods = {p["metadata"]["name"]: p for p in listed["items"]}
        rv = listed["metadata"]["resourceVersion"]
        while True:
            if all(pods.get(n, {}).get("spec", {}).get("nodeName") for n in names):
                return pods
            async for ev in kube.watch(path, {"resourceVersion": rv}):
                obj = ev["object"]
                rv = obj["metadata"]["resourceVersion"]
                pods[obj["metadata"]["name"]] = obj
                if all(pods.get(n, {}).get("spec", {}).get("nodeName") for n in names):
                    return pods

    return await asyncio.wait_for(follow(), 60)


@pytest.fixture
async def cluster() -> AsyncIterator[tuple[SimCluster, dict[str, FakeKubelet]]]:
    spec = _spec()
    async with SimCluster(spec, kubelets=False) as sim, contextlib.AsyncExitStack() as stack:
        kubelets: dict[str, FakeKubelet] = {}
        for node in node_names(spec):
            socket_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(dir="/tmp")))
            obj = await sim.kube.get(
                resource_path("gpusched.io", "v1alpha1", "gpunodeinventories", name=node)
            )
            kubelet = FakeKubelet(socket_dir)
            await kubelet.start()
            stack.push_async_callback(kubelet.stop)
            plugins = DevicePlugins(
                sim.kube,
                node,
                inventory_from_object(obj),
                socket_dir=socket_dir,
                dev_root=socket_dir,
                clock=FakeClock(),
            )
            await plugins.start()
            stack.push_async_callback(plugins.stop)
            await kubelet.wait_for(
                lambda k=kubelet, p=plugins: (
                    set(k.plugins) == set(p.resources())
                    and all(x.updates for x in k.plugins.values())
                )
            )
            kubelets[node] = kubelet
        await sim.kube.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpusched-system"}},
        )
        scheduler = Scheduler(sim.kube, default_config(), identity="a", rng=random.Random(1))
        task = asyncio.create_task(scheduler.run())
        try:
            await asyncio.wait_for(scheduler.ready.wait(), 60)
            yield sim, kubelets
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _pod(name: str, limits: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "schedulerName": "gpusched",
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
            "containers": [{"name": "main", "image": "cuda", "resources": {"limits": limits}}],
        },
    }


PODS = {
    "whole": ("nvidia.com/gpu", {"nvidia.com/gpu": "4"}),
    "shared": ("gpusched.io/gpu", {"gpusched.io/gpu": "1", "gpusched.io/vram": "10Gi"}),
    "mig": ("nvidia.com/mig-1g.10gb", {"nvidia.com/mig-1g.10gb": "2"}),
}


async def test_scheduled_pods_get_exactly_their_annotated_devices(
    cluster: tuple[SimCluster, dict[str, FakeKubelet]],
) -> None:
    sim, kubelets = cluster
    for name, (_, limits) in PODS.items():
        await sim.kube.create(resource_path("", "v1", "pods", NS), _pod(name, limits))
    pods = await _wait_bound(sim.kube, set(PODS))
    for name, (resource, _) in PODS.items():
        pod = pods[name]
        annotations = pod["metadata"]["annotations"]
        got = await kubelets[pod["spec"]["nodeName"]].admit(pod)
        env = dict(got["main"][resource].envs)
        assert env["NVIDIA_VISIBLE_DEVICES"] == annotations[GPU_UUIDS], name
        assert env["CUDA_VISIBLE_DEVICES"] == annotations[GPU_UUIDS], name
        limits = {k: v for k, v in env.items() if k.startswith("CUDA_DEVICE_MEMORY_LIMIT_")}
        if name == "shared":
            assert limits == {"CUDA_DEVICE_MEMORY_LIMIT_0": f"{annotations[RESERVED_VRAM_MIB]}m"}
            assert annotations[RESERVED_VRAM_MIB] == "10240"
        else:
            assert limits == {}
    assert pods["mig"]["spec"]["nodeName"].startswith("mig-small")
    assert pods["mig"]["metadata"]["annotations"][GPU_UUIDS].count("MIG-") == 2
