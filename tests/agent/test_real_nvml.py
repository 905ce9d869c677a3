"""On a machine with an NVIDIA GPU and driver (skipped elsewhere): the agent's code against the
real NVML, end to end.

Discovery and telemetry read the real GPUs; ``gpusched agent`` (the command) publishes them to
a simulated API server and registers the device plugin with a fake kubelet; the scheduler
places a 1-GPU pod on the real inventory, and the kubelet's Allocate hands the container the
GPU's real UUID and its ``/dev/nvidia<minor>`` node, which exists. Run on the device machine
with ``pytest tests/agent/test_real_nvml.py``; ``gpusched agent --record-nvml`` then keeps what
NVML said as a tape under tests/data/nvml/ (tests/agent/test_nvml_tape.py replays it here).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

import pynvml
import pytest

from gpusched.agent.discovery import discover
from gpusched.agent.health import XIDPolicy
from gpusched.agent.telemetry import NVMLMonitor
from gpusched.annotations import GPU_UUIDS
from gpusched.framework import default_config
from gpusched.inventory import API_GROUP, PLURAL, VERSION
from gpusched.kube.client import resource_path
from gpusched.scheduler import Scheduler
from gpusched.sim import SimCluster
from gpusched.sim.fleet import load_cluster_spec

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fake_kubelet import FakeKubelet


def _has_nvml() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


pytestmark = pytest.mark.skipif(not _has_nvml(), reason="no NVIDIA driver on this machine")

WAIT = 120.0


def test_discovery_and_telemetry_read_the_real_gpus() -> None:
    inventory = discover(pynvml, "real")
    assert inventory.gpus, "NVML initialised but reported no GPU"
    assert inventory.driver_version
    assert inventory.cuda_driver_version
    for gpu in inventory.gpus:
        assert gpu.uuid.startswith("GPU-"), gpu
        assert gpu.memory_mib > 1024, gpu
        assert gpu.product.startswith("NVIDIA"), gpu
        assert gpu.minor_number is not None, gpu
        assert Path(f"/dev/nvidia{gpu.minor_number}").exists(), gpu
    assert len(inventory.links) == len(inventory.gpus) * (len(inventory.gpus) - 1) // 2
    monitor = NVMLMonitor(pynvml, inventory, XIDPolicy.from_env({}))
    monitor.open()
    try:
        readings = monitor.read()
    finally:
        monitor.close()
    assert [r.index for r in readings] == [g.index for g in inventory.gpus]
    for reading in readings:
        assert not reading.lost, reading
        assert reading.health == "Healthy", reading
        assert reading.temperature is not None, reading
        assert 0 < reading.temperature < 120, reading


async def test_the_agent_publishes_real_gpus_and_allocates_the_scheduled_one(
    tmp_path: Path,
) -> None:
    real = discover(pynvml, "real")
    spec = load_cluster_spec("dgx-h100", nodes=1)
    node = "dgx-h100-000"
    sockets = Path(tempfile.mkdtemp(prefix="dp-", dir="/tmp"))
    kubelet = FakeKubelet(sockets)
    await kubelet.start()
    async with SimCluster(spec, kubelets=False, kubeconfig_path=tmp_path / "kc") as sim:
        process = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "gpusched", "agent", "--node-name", node),
            *("--kubeconfig", str(sim.kubeconfig_path), "--metrics-port", "0"),
            *("--device-plugin-dir", str(sockets), "--dev-root", "/dev"),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        path = resource_path(API_GROUP, VERSION, PLURAL, name=node)
        uuids = [g.uuid for g in real.gpus]
        try:
            while True:  # the agent replaces the simulated inventory with the real one
                obj = await sim.kube.get(path)
                if [g["uuid"] for g in obj["spec"]["gpus"]] == uuids:
                    break
                await asyncio.sleep(0.1)
            await kubelet.wait_for(
                lambda: len(kubelet.healthy("nvidia.com/gpu")) == len(uuids), WAIT
            )
            pod = await _schedule_one_gpu_pod(sim)
            assert pod["spec"]["nodeName"] == node
            got = await kubelet.admit(pod)
            response = got["main"]["nvidia.com/gpu"]
            env = dict(response.envs)
            assert env["NVIDIA_VISIBLE_DEVICES"] == pod["metadata"]["annotations"][GPU_UUIDS]
            assert env["NVIDIA_VISIBLE_DEVICES"] in uuids
            chosen = next(g for g in real.gpus if g.uuid == env["NVIDIA_VISIBLE_DEVICES"])
            host_paths = {d.host_path for d in response.devices}
            assert f"/dev/nvidia{chosen.minor_number}" in host_paths
            assert all(Path(p).exists() for p in host_paths), host_paths  # noqa: ASYNC240
        finally:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
            _, stderr = await asyncio.wait_for(process.communicate(), WAIT)
            await kubelet.stop()
    assert process.returncode == 0, stderr.decode()


async def _schedule_one_gpu_pod(sim: SimCluster) -> dict[str, Any]:
    await sim.kube.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpusched-system"}},
    )
    scheduler = Scheduler(sim.kube, default_config(), identity="a", rng=random.Random(1))
    task = asyncio.create_task(scheduler.run())
    try:
        await asyncio.wait_for(scheduler.ready.wait(), WAIT)
        pods = resource_path("", "v1", "pods", "default")
        await sim.kube.create(
            pods,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "cuda", "namespace": "default"},
                "spec": {
                    "schedulerName": "gpusched",
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                    "containers": [
                        {
                            "name": "main",
                            "image": "cuda",
                            "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        }
                    ],
                },
            },
        )
        while True:
            pod: dict[str, Any] = await sim.kube.get(f"{pods}/cuda")
            if pod["spec"].get("nodeName") and GPU_UUIDS in pod["metadata"].get("annotations", {}):
                return pod
            await asyncio.sleep(0.1)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
