"""NVML tapes (gpusched/agent/nvml_tape.py): a recording replays to the same inventory and
readings; a real machine's tape (tests/data/nvml/) replays what that machine's NVML said; a
call the tape does not hold, or a file that is no tape, says so."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pynvml
import pytest

from gpusched.agent.discovery import AgentError, discover
from gpusched.agent.fake_nvml import FakeNVML
from gpusched.agent.health import XIDPolicy
from gpusched.agent.nvml_tape import RecordingNVML, ReplayNVML, TapeMiss
from gpusched.agent.telemetry import GPUReading, NVMLMonitor
from gpusched.inventory import GPUNodeInventory
from gpusched.sim.fleet import build_fleet, load_cluster_spec

TAPES = Path(__file__).resolve().parents[1] / "data" / "nvml"


def _read(nvml: object, node: str) -> tuple[GPUNodeInventory, list[GPUReading]]:
    inventory = discover(nvml, node)
    monitor = NVMLMonitor(nvml, inventory, XIDPolicy.from_env({}))
    monitor.open()
    try:
        return inventory, monitor.read()
    finally:
        monitor.close()


@pytest.mark.parametrize(
    ("cluster", "node"),
    [
        ("dgx-h100", "dgx-h100-000"),
        ("mixed", "mig-medium-000"),
        ("mixed", "a40-000"),
        ("mixed", "dgx-v100-000"),
    ],
)
def test_a_recording_replays_to_the_same_inventory_and_readings(
    cluster: str, node: str, tmp_path: Path
) -> None:
    spec = load_cluster_spec(cluster)
    sim = next(n for n in build_fleet(spec) if n.name == node)
    fake = FakeNVML.of_sim_node(sim, spec)
    fake.set_usage(0, used_mib=1234, utilization=56, temperature=41)
    recording = RecordingNVML(fake)
    recorded = _read(recording, node)
    recording.save(tmp_path / "tape.json", node)
    replay = ReplayNVML.load(tmp_path / "tape.json")
    assert replay.node_name == node
    assert _read(replay, node) == recorded
    assert recorded[1][0].used_mib == 1234


def test_a_call_the_tape_does_not_hold_is_named() -> None:
    tape = RecordingNVML(FakeNVML.of_sim_node(*_node("dgx-h100", "dgx-h100-000")))
    tape.nvmlInit()
    replay = ReplayNVML(tape.tape("n"))
    replay.nvmlInit()
    with pytest.raises(TapeMiss, match=r"no call nvmlDeviceGetCount\(\)"):
        replay.nvmlDeviceGetCount()


def test_a_recorded_error_replays_as_the_same_nvml_error() -> None:
    """A tape of a machine without a driver replays its answer: discovery's message."""
    tape = {
        "kind": "gpusched.io/nvml-tape",
        "version": 1,
        "calls": [{"call": "nvmlInit", "args": [], "error": pynvml.NVML_ERROR_DRIVER_NOT_LOADED}],
    }
    with pytest.raises(AgentError, match="NVIDIA kernel driver not loaded"):
        discover(ReplayNVML(tape), "n")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{", "cannot read the NVML tape"),
        ("[]", "is not an NVML tape"),
        ('{"kind": "other", "calls": []}', "not an NVML tape of version 1"),
    ],
)
def test_a_file_that_is_no_tape_says_so(content: str, message: str, tmp_path: Path) -> None:
    path = tmp_path / "tape.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        ReplayNVML.load(path)
    out = subprocess.run(
        [sys.executable, "-m", "gpusched", "agent", "--nvml-tape", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 2, out.stderr
    assert message in out.stderr
    assert "Traceback" not in out.stderr


def _node(cluster: str, node: str) -> tuple[object, object]:
    spec = load_cluster_spec(cluster)
    return next(n for n in build_fleet(spec) if n.name == node), spec


def _real_tapes() -> list[Path]:
    tapes = sorted(TAPES.glob("*.json"))
    assert tapes, f"no NVML tape under {TAPES}"
    return tapes


@pytest.mark.parametrize("path", _real_tapes(), ids=lambda p: p.stem)
def test_a_real_machines_tape_replays_what_its_nvml_said(path: Path) -> None:
    """Each tape recorded on real hardware (``gpusched agent --record-nvml``) still reads:
    discovery and telemetry over it give sane GPUs, and the facts kept beside it hold."""
    expected = json.loads(path.with_suffix(".expected").read_text())
    replay = ReplayNVML.load(path)
    inventory, readings = _read(replay, replay.node_name)
    assert [g.product for g in inventory.gpus] == expected["products"]
    assert [g.memory_mib for g in inventory.gpus] == expected["memoryMiB"]
    assert [g.minor_number for g in inventory.gpus] == expected["minorNumbers"]
    assert [g.mig_enabled for g in inventory.gpus] == expected["migEnabled"]
    assert inventory.driver_version == expected["driverVersion"]
    assert inventory.cuda_driver_version == expected["cudaDriverVersion"]
    assert [(k.a, k.b, k.type, k.nvlinks, k.pcie) for k in inventory.links] == [
        tuple(k) for k in expected["links"]
    ]
    assert all(g.uuid.startswith("GPU-") for g in inventory.gpus)
    assert [r.health for r in readings] == ["Healthy"] * len(inventory.gpus)
    assert [r.used_mib for r in readings] == expected["usedMiB"]
    assert [r.utilization for r in readings] == expected["utilization"]
    assert all(g.numa_node is None for g in inventory.gpus)  # NotSupported in that VM
