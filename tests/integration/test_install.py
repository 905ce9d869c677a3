"""The install, end to end: ``kubectl apply -k deploy/`` on an empty cluster, then a GPU pod
runs on the devices the scheduler chose, with no other step.

The cluster starts bare: GPU Nodes (as a kubelet with NVIDIA's driver registers them) and no
gpusched CRD, namespace or RBAC. The scheduler is started first, as someone running
``gpusched scheduler`` against a new cluster would: its preflight says what is missing and how
to install it, and it keeps running. Then the shipped install is applied with kubectl. On each
node the node agent runs with a token of the ServiceAccount its DaemonSet runs as (bound to its
node, so the shipped ValidatingAdmissionPolicy holds it to its own node's objects) over the
fake NVML of that node, with its device plugin registered at a fake kubelet. The preflight's
next check finds nothing missing; the agents' inventories reach the scheduler; GPU pods bind;
each kubelet's Allocate hands every container exactly the devices in its pod's annotations;
the API server refused none of the agents' requests.

Needs kubectl (with its built-in kustomize); skipped without it. Simulation only: it deletes
the cluster's CRDs to start bare.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "agent"))

from fake_kubelet import FakeKubelet

from gpusched.agent.deviceplugin import DevicePluginListener
from gpusched.agent.fake_nvml import FakeNVML
from gpusched.agent.main import Agent, AgentSettings
from gpusched.annotations import GPU_UUIDS, RESERVED_VRAM_MIB
from gpusched.clock import FakeClock
from gpusched.framework import default_config
from gpusched.kube.client import Kube, resource_path
from gpusched.preflight import Preflight
from gpusched.scheduler import Scheduler
from gpusched.sim import SimCluster
from gpusched.sim.fleet import ClusterSpec, SimNode, build_fleet, load_cluster_spec

KUBECTL = shutil.which("kubectl")
DEPLOY = Path(__file__).resolve().parent.parent.parent / "deploy"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
WAIT = 60.0  # a bound for a broken build, never asserted on
NS = "default"

pytestmark = [
    pytest.mark.simonly,
    pytest.mark.kubectl,
    pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (applies deploy/)"),
]


def _render() -> list[dict[str, Any]]:
    assert KUBECTL is not None
    out = subprocess.run(
        [KUBECTL, "kustomize", str(DEPLOY)], check=True, capture_output=True, text=True
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def _runs(doc: dict[str, Any], command: str) -> bool:
    spec = doc["spec"]["template"]["spec"]
    words = [w for c in spec["containers"] for w in (*c.get("command", []), *c.get("args", []))]
    return command in words


def _agent_account(docs: list[dict[str, Any]]) -> tuple[str, str]:
    """Namespace and ServiceAccount of the DaemonSet that runs ``gpusched agent`` with its
    device plugin (the other one serves nodes that keep NVIDIA's plugin)."""
    (ds,) = [
        d
        for d in docs
        if d["kind"] == "DaemonSet" and _runs(d, "agent") and not _runs(d, "--no-device-plugin")
    ]
    return ds["metadata"]["namespace"], ds["spec"]["template"]["spec"]["serviceAccountName"]


async def _kubectl(sim: SimCluster, *args: str) -> str:
    assert KUBECTL is not None
    process = await asyncio.create_subprocess_exec(
        *(KUBECTL, "--kubeconfig", str(sim.kubeconfig_path), *args),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await process.communicate()
    assert process.returncode == 0, out.decode()
    return out.decode()


async def _bare_cluster(sim: SimCluster, spec: ClusterSpec) -> list[SimNode]:
    """Delete every CRD the simulation installs at start and register the GPU Nodes alone
    (capacity as the kubelet reports it; no inventory, no gpusched label)."""
    kube = sim.kube
    for crd in (await kube.get(CRDS))["items"]:
        await kube.delete(f"{CRDS}/{crd['metadata']['name']}")
    for _ in range(1000):  # the simulation's CRD controller drops them on its next turns
        if not (await kube.get(CRDS))["items"]:
            break
        await asyncio.sleep(0)
    nodes = [n for n in build_fleet(spec) if n.inventory is not None]
    for node in nodes:
        body = node.create_body()
        labels = body["metadata"]["labels"]
        for key in [k for k in labels if k.startswith(("gpusched.io/", "nvidia.com/gpu."))]:
            del labels[key]
        await kube.create(resource_path("", "v1", "nodes"), body)
        status = {"status": {k: node.node["status"][k] for k in ("capacity", "allocatable")}}
        await kube.patch(
            resource_path("", "v1", "nodes", name=node.name, subresource="status"), status
        )
    return nodes


class NodeSide:
    """One node's agent (on a FakeClock), its device plugin and the fake kubelet it serves."""

    def __init__(self, kube: Kube, node: SimNode, spec: ClusterSpec, sockets: Path) -> None:
        self.name = node.name
        self.kubelet = FakeKubelet(sockets)
        self.clock = FakeClock()
        self.plugins = DevicePluginListener(kube, node.name, socket_dir=sockets, clock=self.clock)
        self.agent = Agent(
            kube,
            FakeNVML.of_sim_node(node, spec),
            node.name,
            AgentSettings(),
            clock=self.clock,
            env={},
            listeners=[self.plugins],
        )
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.kubelet.start()
        self.task = asyncio.create_task(self.agent.run(), name=f"agent-{self.name}")
        await asyncio.wait_for(self.agent.ready.wait(), WAIT)
        await self.kubelet.wait_for(lambda: bool(self.kubelet.healthy("nvidia.com/gpu")), WAIT)

    async def stop(self) -> None:
        self.agent.stop()
        await self.clock.advance(self.agent.settings.interval)
        if self.task is not None:
            await asyncio.wait_for(self.task, WAIT)
        await self.plugins.stop()
        await self.kubelet.stop()


@contextlib.asynccontextmanager
async def _scheduler(sim: SimCluster) -> AsyncIterator[Scheduler]:
    scheduler = Scheduler(Kube(sim.api_client()), default_config())
    for informer in scheduler.informers:
        informer.backoff_max = 0.0  # list a CRD's kind again at once once it is served
    task = asyncio.create_task(scheduler.run(), name="scheduler")
    try:
        await asyncio.wait_for(scheduler.ready.wait(), WAIT)
        yield scheduler
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await scheduler.kube.close()


async def _bound(kube: Kube, name: str) -> dict[str, Any]:
    path = resource_path("", "v1", "pods", NS, name)
    for _ in range(100_000):
        pod: dict[str, Any] = await kube.get(path)
        if pod["spec"].get("nodeName"):
            return pod
        await asyncio.sleep(0.01)
    raise AssertionError(f"pod {name} never bound")


def _pod(name: str, limits: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "schedulerName": "gpusched",
            "containers": [{"name": "main", "image": "cuda", "resources": {"limits": limits}}],
        },
    }


async def test_apply_deploy_on_an_empty_cluster_then_gpu_pods_get_their_devices(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="gpusched.preflight")
    spec = load_cluster_spec("dgx-h100", nodes=2)
    docs = _render()
    async with SimCluster(None, kubelets=False) as sim:
        nodes = await _bare_cluster(sim, spec)
        async with _scheduler(sim) as scheduler:
            checks = Preflight(scheduler.kube, scheduler.config, FakeClock())
            missing = await checks.check()
            assert any("gpunodeinventories.gpusched.io" in p.what for p in missing), missing
            assert all("kubectl apply" in p.fix for p in missing), missing

            await _kubectl(sim, "apply", "-k", str(DEPLOY))
            assert await checks.check() == []
            assert "preflight: resolved:" in caplog.text

            namespace, account = _agent_account(docs)
            with tempfile.TemporaryDirectory(prefix="inst-", dir="/tmp") as tmp:
                sides = []
                for node in nodes:
                    token = sim.service_account_token(namespace, account, node=node.name)
                    sockets = Path(tmp) / node.name[-3:]  # a socket path is <= 107 bytes
                    sockets.mkdir()
                    kube = Kube(sim.api_client(token=token))
                    sides.append(NodeSide(kube, node, spec, sockets))
                try:
                    for side in sides:
                        await side.start()
                    pods = {
                        "whole": {"nvidia.com/gpu": "2"},
                        "shared": {"gpusched.io/gpu": "1", "gpusched.io/vram": "20Gi"},
                    }
                    for name, limits in pods.items():
                        body = _pod(name, limits)
                        await sim.kube.create(resource_path("", "v1", "pods", NS), body)
                    for name in pods:
                        pod = await _bound(sim.kube, name)
                        side = next(s for s in sides if s.name == pod["spec"]["nodeName"])
                        granted = await side.kubelet.admit(pod)
                        env = dict(granted["main"][next(iter(pods[name]))].envs)
                        annotations = pod["metadata"]["annotations"]
                        assert env["NVIDIA_VISIBLE_DEVICES"] == annotations[GPU_UUIDS], name
                        if name == "shared":
                            mib = annotations[RESERVED_VRAM_MIB]
                            assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == f"{mib}m"
                finally:
                    for side in sides:
                        await side.stop()
            refused = [r for r in sim.server.refusals if account in str(r)]
            assert not refused, refused
