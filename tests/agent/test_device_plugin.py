"""The device plugin against a fake kubelet speaking the real gRPC API, on the simulated cluster.

Pods are bound with the Binding gpusched's binder writes (``plugins/default_binder.binding_body``:
``gpusched.io/gpu-ids``, ``gpu-uuids``, ``reserved-vram-mib``); the simulated kubelets are off,
so a bound pod stays Pending as it does while a real kubelet admits it, and the fake kubelet
plays the admission. Inventories come from the fake NVML reading the simulated node.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fake_kubelet import AdmissionError, FakeKubelet

from gpusched.agent import discover
from gpusched.agent.deviceplugin import (
    ALLOCATED,
    AllocationError,
    DevicePluginListener,
    DevicePlugins,
)
from gpusched.agent.fake_nvml import FakeNVML
from gpusched.annotations import Assignment
from gpusched.clock import FakeClock
from gpusched.inventory import GPUNodeInventory
from gpusched.kube.client import Kube, resource_path
from gpusched.plugins.default_binder import binding_body
from gpusched.sim import SimCluster
from gpusched.sim.faults import FaultRule
from gpusched.sim.fleet import ClusterSpec, build_fleet, load_cluster_spec

NS = "default"


def _one_node_spec(cluster: str) -> ClusterSpec:
    spec = load_cluster_spec(cluster)
    pool = next(p for p in spec.pools if p.gpu is not None).model_copy(update={"count": 1})
    return spec.model_copy(update={"pools": (pool,)})


@dataclass
class Node:
    """One simulated GPU node with the device plugin and a fake kubelet on it."""

    kube: Kube
    name: str
    inventory: GPUNodeInventory
    kubelet: FakeKubelet
    plugins: DevicePlugins
    clock: FakeClock
    dev_root: Path
    sim: SimCluster

    async def pod(
        self,
        name: str,
        limits: dict[str, str],
        devices: list[int] | None = None,
        *,
        mig: list[str] | None = None,
        vram: list[int] | None = None,
        containers: list[dict[str, Any]] | None = None,
        init_containers: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """Create a pod and bind it here as gpusched's binder does; returns the bound pod."""
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "containers": containers
                or [{"name": "main", "image": "cuda", "resources": {"limits": limits}}]
            },
        }
        if init_containers:
            body["spec"]["initContainers"] = init_containers
        created = await self.kube.create(resource_path("", "v1", "pods", NS), body)
        gpus = self.inventory.gpus
        ids = tuple(devices or [])
        uuids = tuple(mig) if mig is not None else tuple(gpus[i].uuid for i in ids)
        if mig is not None:
            ids = tuple(
                next(g.index for g in gpus for d in g.mig_devices if d.uuid == u) for u in mig
            )
        reserved = tuple(vram) if vram is not None else tuple(gpus[i].memory_mib for i in ids)
        assignment = Assignment(ids, uuids, reserved, f"r-{name}")
        await self.kube.create(
            resource_path("", "v1", "pods", NS, name, "binding"),
            binding_body(created, self.name, assignment),
        )
        return dict(await self.kube.get(resource_path("", "v1", "pods", NS, name)))

    async def get(self, name: str) -> dict[str, Any]:
        return dict(await self.kube.get(resource_path("", "v1", "pods", NS, name)))


@pytest.fixture
def socket_dir() -> AsyncIterator[Path]:
    # A short path: a unix socket's path is limited to 107 bytes.
    with tempfile.TemporaryDirectory(prefix="dp-", dir="/tmp") as d:
        (Path(d) / "dev").mkdir()
        yield Path(d)


async def _node(cluster: str, socket_dir: Path) -> AsyncIterator[Node]:
    spec = _one_node_spec(cluster)
    sim_node = build_fleet(spec)[0]
    inventory = discover(FakeNVML.of_sim_node(sim_node, spec), sim_node.name)
    dev_root = socket_dir / "dev"
    for name in ("nvidiactl", "nvidia-uvm", *(f"nvidia{g.index}" for g in inventory.gpus)):
        (dev_root / name).touch()
    clock = FakeClock()
    async with SimCluster(spec, kubelets=False) as sim:
        kubelet = FakeKubelet(socket_dir)
        await kubelet.start()
        plugins = DevicePlugins(
            sim.kube,
            sim_node.name,
            inventory,
            socket_dir=socket_dir,
            dev_root=dev_root,
            clock=clock,
        )
        await plugins.start()
        try:
            await kubelet.wait_for(
                lambda: (
                    set(kubelet.plugins) == set(plugins.resources())
                    and all(p.updates for p in kubelet.plugins.values())
                )
            )
            yield Node(sim.kube, sim_node.name, inventory, kubelet, plugins, clock, dev_root, sim)
        finally:
            await plugins.stop()
            await kubelet.stop()


@pytest.fixture
async def h100(socket_dir: Path) -> AsyncIterator[Node]:
    async for node in _node("dgx-h100", socket_dir):
        yield node


@pytest.fixture
async def mig(socket_dir: Path) -> AsyncIterator[Node]:
    async for node in _node("mig-small", socket_dir):
        yield node


def _env(response: Any) -> dict[str, str]:
    return dict(response.envs)


def _dev_paths(response: Any) -> list[str]:
    return [d.host_path for d in response.devices]


# -- registration and ListAndWatch ---------------------------------------------------------


async def test_registers_every_resource_with_its_devices(h100: Node) -> None:
    kubelet = h100.kubelet
    assert {r.resource_name for r in kubelet.registrations} == {
        "nvidia.com/gpu",
        "gpusched.io/gpu",
        "woolyai.com/gpu",
    }
    for r in kubelet.registrations:
        assert r.version == "v1beta1"
        assert r.endpoint == f"gpusched-{r.resource_name.replace('/', '_')}.sock"
        assert r.options.get_preferred_allocation_available
        assert not r.options.pre_start_required
    await kubelet.wait_for(lambda: all(p.updates for p in kubelet.plugins.values()))
    assert kubelet.plugins["nvidia.com/gpu"].devices == {
        g.uuid: "Healthy" for g in h100.inventory.gpus
    }
    assert len(kubelet.healthy("gpusched.io/gpu")) == 80
    assert len(kubelet.healthy("woolyai.com/gpu")) == 80


async def test_mig_node_advertises_mig_devices_and_no_whole_gpus(mig: Node) -> None:
    kubelet = mig.kubelet
    await kubelet.wait_for(lambda: all(p.updates for p in kubelet.plugins.values()))
    assert kubelet.healthy("nvidia.com/gpu") == set()
    assert len(kubelet.healthy("nvidia.com/mig-1g.10gb")) == 28


async def test_list_and_watch_sends_a_health_change(h100: Node) -> None:
    kubelet = h100.kubelet
    await kubelet.wait_for(lambda: kubelet.plugins["nvidia.com/gpu"].updates > 0)
    bad = h100.inventory.gpus[3]
    gpus = list(h100.inventory.gpus)
    gpus[3] = bad.model_copy(update={"health": "Unhealthy", "health_reason": "XID 79"})
    h100.plugins.update(h100.inventory.model_copy(update={"gpus": tuple(gpus)}))
    await kubelet.wait_for(
        lambda: kubelet.plugins["nvidia.com/gpu"].devices[bad.uuid] == "Unhealthy"
    )
    await kubelet.wait_for(lambda: len(kubelet.healthy("gpusched.io/gpu")) == 70)
    assert len(kubelet.healthy("nvidia.com/gpu")) == 7
    # and back
    h100.plugins.update(h100.inventory)
    await kubelet.wait_for(lambda: len(kubelet.healthy("nvidia.com/gpu")) == 8)


# -- Allocate --------------------------------------------------------------------------------


async def test_whole_gpu_pod_gets_exactly_its_annotated_gpus(h100: Node) -> None:
    gpus = h100.inventory.gpus
    pod = await h100.pod("whole", {"nvidia.com/gpu": "2"}, [5, 2])
    got = await h100.kubelet.admit(pod)
    response = got["main"]["nvidia.com/gpu"]
    uuids = f"{gpus[5].uuid},{gpus[2].uuid}"
    assert _env(response) == {"NVIDIA_VISIBLE_DEVICES": uuids, "CUDA_VISIBLE_DEVICES": uuids}
    assert _dev_paths(response) == [
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia5",
        "/dev/nvidia2",
    ]
    # the kubelet's own bookkeeping names the same GPUs (GetPreferredAllocation steered it)
    assert h100.kubelet.allocated[pod["metadata"]["uid"]]["nvidia.com/gpu"] == {
        gpus[5].uuid,
        gpus[2].uuid,
    }
    after = await h100.get("whole")
    assert after["metadata"]["annotations"][ALLOCATED] == "nvidia.com/gpu=1"


async def test_shared_pod_gets_its_gpu_and_hami_core_vram_limit(h100: Node) -> None:
    gpus = h100.inventory.gpus
    pod = await h100.pod(
        "shared", {"gpusched.io/gpu": "1", "gpusched.io/vram": "16Gi"}, [4], vram=[16384]
    )
    response = (await h100.kubelet.admit(pod))["main"]["gpusched.io/gpu"]
    assert _env(response) == {
        "NVIDIA_VISIBLE_DEVICES": gpus[4].uuid,
        "CUDA_VISIBLE_DEVICES": gpus[4].uuid,
        "CUDA_DEVICE_MEMORY_LIMIT_0": "16384m",
    }
    held = h100.kubelet.allocated[pod["metadata"]["uid"]]["gpusched.io/gpu"]
    assert [i.split("::")[0] for i in held] == [gpus[4].uuid]


async def test_hami_form_pod_gets_memory_and_compute_limits(h100: Node) -> None:
    gpus = h100.inventory.gpus
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000", "nvidia.com/gpucores": "30"}
    pod = await h100.pod("hami", limits, [1], vram=[8000])
    response = (await h100.kubelet.admit(pod))["main"]["nvidia.com/gpu"]
    assert _env(response) == {
        "NVIDIA_VISIBLE_DEVICES": gpus[1].uuid,
        "CUDA_VISIBLE_DEVICES": gpus[1].uuid,
        "CUDA_DEVICE_MEMORY_LIMIT_0": "8000m",
        "CUDA_DEVICE_SM_LIMIT": "30",
    }


async def test_mig_pod_gets_its_mig_device(mig: Node) -> None:
    device = mig.inventory.gpus[2].mig_devices[4]
    pod = await mig.pod("m", {"nvidia.com/mig-1g.10gb": "1"}, mig=[device.uuid], vram=[0])
    response = (await mig.kubelet.admit(pod))["main"]["nvidia.com/mig-1g.10gb"]
    assert _env(response) == {
        "NVIDIA_VISIBLE_DEVICES": device.uuid,
        "CUDA_VISIBLE_DEVICES": device.uuid,
    }
    assert "/dev/nvidia2" in _dev_paths(response)


async def test_two_pods_bound_at_once_each_get_their_own(h100: Node) -> None:
    gpus = h100.inventory.gpus
    a = await h100.pod("a", {"nvidia.com/gpu": "2"}, [0, 1])
    b = await h100.pod("b", {"nvidia.com/gpu": "2"}, [6, 7])
    c = await h100.pod("c", {"gpusched.io/gpu": "1", "gpusched.io/vram": "1Gi"}, [0], vram=[1024])
    # all three wait; the kubelet admits one at a time, a before b (its pod watch delivers
    # them in bind order); c asks for another resource, so its place in the order is free
    got_c = await h100.kubelet.admit(c)
    got_a = await h100.kubelet.admit(a)
    got_b = await h100.kubelet.admit(b)
    visible = "NVIDIA_VISIBLE_DEVICES"
    assert _env(got_a["main"]["nvidia.com/gpu"])[visible] == f"{gpus[0].uuid},{gpus[1].uuid}"
    assert _env(got_b["main"]["nvidia.com/gpu"])[visible] == f"{gpus[6].uuid},{gpus[7].uuid}"
    assert _env(got_c["main"]["gpusched.io/gpu"])[visible] == gpus[0].uuid
    assert _env(got_c["main"]["gpusched.io/gpu"])["CUDA_DEVICE_MEMORY_LIMIT_0"] == "1024m"


async def test_concurrent_allocate_calls_never_take_the_same_pod(h100: Node) -> None:
    gpus = h100.inventory.gpus
    await h100.pod("a", {"nvidia.com/gpu": "2"}, [0, 1])
    await h100.pod("b", {"nvidia.com/gpu": "2"}, [6, 7])
    # both calls at once, the later-bound pod's devices first: the lock serialises them and
    # each call's devices name its pod
    got_b, got_a = await asyncio.gather(
        h100.plugins.allocate("nvidia.com/gpu", [gpus[7].uuid, gpus[6].uuid]),
        h100.plugins.allocate("nvidia.com/gpu", [gpus[1].uuid, gpus[0].uuid]),
    )
    assert got_a.envs["NVIDIA_VISIBLE_DEVICES"] == f"{gpus[0].uuid},{gpus[1].uuid}"
    assert got_b.envs["NVIDIA_VISIBLE_DEVICES"] == f"{gpus[6].uuid},{gpus[7].uuid}"
    for name in ("a", "b"):
        assert (await h100.get(name))["metadata"]["annotations"][ALLOCATED] == "nvidia.com/gpu=1"
    # a third call finds no pod left: neither is taken twice
    with pytest.raises(AllocationError, match="no pod bound to node"):
        await h100.plugins.allocate("nvidia.com/gpu", [gpus[0].uuid, gpus[1].uuid])


async def test_containers_split_the_pods_devices_in_order(h100: Node) -> None:
    gpus = h100.inventory.gpus
    init = [{"name": "init", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
    containers = [
        {"name": "one", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "2"}}},
        {"name": "none", "image": "x"},
        {"name": "two", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
    ]
    pod = await h100.pod("multi", {}, [3, 4, 5], containers=containers, init_containers=init)
    got = await h100.kubelet.admit(pod)
    assert _env(got["init"]["nvidia.com/gpu"])["NVIDIA_VISIBLE_DEVICES"] == gpus[3].uuid
    assert (
        _env(got["one"]["nvidia.com/gpu"])["NVIDIA_VISIBLE_DEVICES"]
        == f"{gpus[3].uuid},{gpus[4].uuid}"
    )
    assert _env(got["two"]["nvidia.com/gpu"])["NVIDIA_VISIBLE_DEVICES"] == gpus[5].uuid
    assert "none" not in got
    after = await h100.get("multi")
    assert after["metadata"]["annotations"][ALLOCATED] == "nvidia.com/gpu=3"


async def test_no_pending_pod_is_a_clear_admission_error(h100: Node) -> None:
    pod = await h100.pod("first", {"nvidia.com/gpu": "1"}, [2])
    await h100.kubelet.admit(pod)
    # a pod the kubelet admits that gpusched did not place (no annotations), and the first
    # pod's devices are not given twice
    stray = await h100.kube.create(
        resource_path("", "v1", "pods", NS),
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "stray", "namespace": NS},
            "spec": {
                "nodeName": h100.name,
                "containers": [
                    {"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
                ],
            },
        },
    )
    with pytest.raises(AdmissionError) as err:
        await h100.kubelet.admit(stray)
    message = str(err.value)
    assert "code = FAILED_PRECONDITION" in message
    assert f"no pod bound to node {h100.name} waits for 1 nvidia.com/gpu" in message
    assert "scheduled by gpusched" in message


async def test_annotations_that_disagree_with_the_containers_are_named(h100: Node) -> None:
    pod = await h100.pod("bad", {"nvidia.com/gpu": "2"}, [1])
    with pytest.raises(
        AdmissionError,
        match=r"default/bad: its containers ask for 2 nvidia.com/gpu but its annotations list 1",
    ):
        await h100.kubelet.admit(pod)


# -- kubelet restart ---------------------------------------------------------------------------


async def test_kubelet_restart_re_registers_every_resource(h100: Node) -> None:
    kubelet = h100.kubelet
    first = len(kubelet.registrations)
    await kubelet.restart()
    assert kubelet.plugins == {}
    await h100.clock.wait_for_sleepers()
    await h100.clock.advance(h100.plugins.poll_seconds)
    await kubelet.wait_for(lambda: len(kubelet.plugins) == 3)
    assert len(kubelet.registrations) == first + 3
    assert h100.plugins.registered() == dict.fromkeys(kubelet.plugins, True)
    await kubelet.wait_for(lambda: len(kubelet.healthy("nvidia.com/gpu")) == 8)
    # and the plugin serves on its fresh sockets
    pod = await h100.pod("after", {"nvidia.com/gpu": "1"}, [7])
    got = await kubelet.admit(pod)
    assert (
        _env(got["main"]["nvidia.com/gpu"])["NVIDIA_VISIBLE_DEVICES"] == h100.inventory.gpus[7].uuid
    )


async def test_nothing_changes_without_a_restart(h100: Node) -> None:
    kubelet = h100.kubelet
    first = len(kubelet.registrations)
    await h100.clock.wait_for_sleepers()
    await h100.clock.advance(h100.plugins.poll_seconds)
    await h100.clock.wait_for_sleepers()
    assert len(kubelet.registrations) == first


async def test_an_agent_restarted_mid_pod_resumes_from_the_annotation(h100: Node) -> None:
    gpus = h100.inventory.gpus
    containers = [
        {"name": "a", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
        {"name": "b", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
    ]
    await h100.pod("two", {}, [2, 6], containers=containers)
    first = await h100.plugins.allocate("nvidia.com/gpu", [gpus[2].uuid])
    assert first.envs["NVIDIA_VISIBLE_DEVICES"] == gpus[2].uuid
    # a new agent process: nothing in memory, the annotation says container a is served
    again = DevicePlugins(h100.kube, h100.name, h100.inventory, socket_dir=h100.dev_root)
    second = await again.allocate("nvidia.com/gpu", [gpus[6].uuid])
    assert second.envs["NVIDIA_VISIBLE_DEVICES"] == gpus[6].uuid
    assert (await h100.get("two"))["metadata"]["annotations"][ALLOCATED] == "nvidia.com/gpu=2"


async def test_an_api_server_failure_is_unavailable(h100: Node) -> None:
    pod = await h100.pod("p", {"nvidia.com/gpu": "1"}, [0])
    h100.sim.faults.set([FaultRule("list", "pods", 1.0, 500)])
    try:
        with pytest.raises(AdmissionError, match="code = UNAVAILABLE desc = gpusched device"):
            await h100.kubelet.admit(pod)
    finally:
        h100.sim.faults.set([])


async def test_a_new_mig_profile_is_served_from_the_next_poll(mig: Node) -> None:
    kubelet = mig.kubelet
    gpus = list(mig.inventory.gpus)
    devices = list(gpus[0].mig_devices)
    devices[0] = devices[0].model_copy(update={"profile": "1g.10gb+me"})
    gpus[0] = gpus[0].model_copy(update={"mig_devices": tuple(devices)})
    mig.plugins.update(mig.inventory.model_copy(update={"gpus": tuple(gpus)}))
    await kubelet.wait_for(lambda: len(kubelet.healthy("nvidia.com/mig-1g.10gb")) == 27)
    assert "nvidia.com/mig-1g.10gb.me" not in kubelet.plugins
    await mig.clock.wait_for_sleepers()
    await mig.clock.advance(mig.plugins.poll_seconds)
    await kubelet.wait_for(
        lambda: kubelet.healthy("nvidia.com/mig-1g.10gb.me") == {devices[0].uuid}
    )


async def test_an_agent_started_before_the_kubelet_registers_when_it_comes(
    socket_dir: Path,
) -> None:
    spec = _one_node_spec("dgx-h100")
    sim_node = build_fleet(spec)[0]
    inventory = discover(FakeNVML.of_sim_node(sim_node, spec), sim_node.name)
    clock = FakeClock()
    async with SimCluster(None, kubelets=False) as sim:
        plugins = DevicePlugins(
            sim.kube, sim_node.name, inventory, socket_dir=socket_dir, clock=clock
        )
        await plugins.start()
        kubelet = FakeKubelet(socket_dir)
        try:
            assert plugins.registered() == dict.fromkeys(plugins.resources(), False)
            await clock.wait_for_sleepers()
            await clock.advance(plugins.poll_seconds)  # still no kubelet: nothing happens
            await clock.wait_for_sleepers()
            await kubelet.start()
            await clock.advance(plugins.poll_seconds)
            await kubelet.wait_for(lambda: len(kubelet.plugins) == 3)
            assert all(plugins.registered().values())
        finally:
            await plugins.stop()
            await kubelet.stop()


async def test_a_socket_directory_that_comes_late_is_served_and_ready_then(
    socket_dir: Path,
) -> None:
    """The agent's listener starts the plugins before the kubelet's directory is mounted: the
    start fails with a message, the watch keeps trying, and once the directory and the kubelet
    are there every resource is served, registered and ``ready()``."""
    spec = _one_node_spec("dgx-h100")
    sim_node = build_fleet(spec)[0]
    inventory = discover(FakeNVML.of_sim_node(sim_node, spec), sim_node.name)
    clock = FakeClock()
    late = socket_dir / "late"
    async with SimCluster(None, kubelets=False) as sim:
        listener = DevicePluginListener(sim.kube, sim_node.name, socket_dir=late, clock=clock)
        listener.update(inventory)
        kubelet = FakeKubelet(late)
        try:
            await clock.wait_for_sleepers()  # the first pass failed; the watch sleeps
            assert not listener.ready()
            late.mkdir()
            await kubelet.start()
            assert listener.plugins is not None
            await clock.advance(listener.plugins.poll_seconds)
            await kubelet.wait_for(lambda: len(kubelet.plugins) == 3)
            await clock.wait_for_sleepers()
            assert listener.ready()
        finally:
            await listener.stop()
            await kubelet.stop()
