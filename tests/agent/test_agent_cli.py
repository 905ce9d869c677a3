"""``gpusched agent``: a node without GPU says so and exits 1; bad input exits 2; with
``--fake-nvml`` it publishes a simulated node's GPUs, serves ``/readyz``, and stops on SIGTERM
with status 0."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import aiohttp
import pynvml
import pytest

from gpusched.inventory import API_GROUP, PLURAL, VERSION
from gpusched.kube.client import resource_path
from gpusched.sim import SimCluster
from gpusched.sim.fleet import load_cluster_spec

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fake_kubelet import FakeKubelet

WAIT = 60.0


def gpusched(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpusched", *args],
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
        env=env,
    )


def _has_nvml() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


@pytest.mark.skipif(_has_nvml(), reason="this machine has an NVIDIA driver")
def test_no_gpu_is_a_message_and_status_1() -> None:
    out = gpusched("agent", "--node-name", "cpu-node-1", "--kubeconfig", "/nonexistent")
    assert out.returncode == 1, out.stderr
    assert "NVML library (libnvidia-ml.so.1) not found" in out.stderr
    assert "--allow-no-gpu" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--fake-nvml", "dgx-h100"], "give CLUSTER:NODE"),
        (["--fake-nvml", "dgx-h100:nope"], "has no node 'nope'"),
        (["--fake-nvml", "no-such-cluster:n"], "no-such-cluster"),
        (["--fake-nvml", "mixed:system-000"], "has no GPUs"),
        (["--fake-nvml", "dgx-h100:dgx-h100-000", "--interval", "0"], "must be > 0"),
        (["--fake-nvml", "dgx-h100:dgx-h100-000", "--shared-replicas", "-1"], "0 (no sharing)"),
    ],
)
def test_bad_input_is_a_message_and_status_2(args: list[str], message: str) -> None:
    out = gpusched("agent", *args)
    assert out.returncode == 2, out.stderr
    assert message in out.stderr
    assert "Traceback" not in out.stderr


async def test_fake_nvml_publishes_the_node_and_stops_on_sigterm(tmp_path: Path) -> None:
    """The command publishes the node and serves the device plugin to the kubelet (a fake one
    on a short socket directory), then stops cleanly on SIGTERM, removing its sockets."""
    spec = load_cluster_spec("dgx-h100", nodes=1)
    node = "dgx-h100-000"
    sockets = Path(tempfile.mkdtemp(prefix="dp-", dir="/tmp"))  # a socket path is <= 107 bytes
    kubelet = FakeKubelet(sockets)
    await kubelet.start()
    async with SimCluster(spec, kubelets=False, kubeconfig_path=tmp_path / "kc") as sim:
        process = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "gpusched", "agent", "--fake-nvml", f"dgx-h100:{node}"),
            *("--kubeconfig", str(sim.kubeconfig_path), "--metrics-port", "0"),
            *("--device-plugin-dir", str(sockets), "--dev-root", str(tmp_path)),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            assert process.stdout is not None
            line = (await asyncio.wait_for(process.stdout.readline(), WAIT)).decode()
            assert f"publishing node {node}'s GPUs" in line, line
            port = int(line.rsplit(":", 1)[1])
            async with aiohttp.ClientSession() as http:
                while True:  # ready once published
                    async with http.get(f"http://127.0.0.1:{port}/readyz") as response:
                        if response.status == 200:
                            break
                    await asyncio.sleep(0.05)
            obj = await sim.kube.get(resource_path(API_GROUP, VERSION, PLURAL, name=node))
            assert obj["spec"]["source"] == "nvml"
            assert "status" in obj
            await kubelet.wait_for(lambda: len(kubelet.healthy("nvidia.com/gpu")) == 8, WAIT)
        finally:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
            _, stderr = await asyncio.wait_for(process.communicate(), WAIT)
            await kubelet.stop()
    assert process.returncode == 0, stderr.decode()
    assert not os.listdir(sockets)  # the plugin's sockets removed (the kubelet's too)
    os.rmdir(sockets)
