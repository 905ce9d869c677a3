"""GPU health and telemetry read through the fake NVML: XID rules as NVIDIA's device plugin has
them, ECC and lost GPUs, and what a reading puts into the inventory's status and spec."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pynvml
import pytest

from gpusched.agent.fake_nvml import FakeNVML
from gpusched.agent.health import HealthTracker, XIDPolicy, xid_reason
from gpusched.agent.telemetry import NVMLMonitor, status_of, with_health
from gpusched.sim.fleet import build_fleet, load_cluster_spec


def _fake(cluster: str = "dgx-h100") -> FakeNVML:
    spec = load_cluster_spec(cluster)
    spec = spec.model_copy(update={"pools": (spec.pools[0].model_copy(update={"count": 1}),)})
    return FakeNVML.of_sim_node(build_fleet(spec)[0], spec)


def _monitor(fake: FakeNVML, env: dict[str, str] | None = None) -> NVMLMonitor:
    monitor = NVMLMonitor(fake, fake.inventory, XIDPolicy.from_env(env or {}))
    monitor.open()
    return monitor


@pytest.mark.parametrize(
    ("env", "xid", "counts"),
    [
        ({}, 79, True),
        ({}, 48, True),
        ({}, 13, False),  # application errors: 13, 31, 43, 45, 68, 109
        ({}, 31, False),
        ({}, 109, False),
        ({"DP_DISABLE_HEALTHCHECKS": "79, 74"}, 79, False),
        ({"DP_DISABLE_HEALTHCHECKS": "79"}, 48, True),
        ({"DP_DISABLE_HEALTHCHECKS": "all"}, 79, False),
        ({"DP_DISABLE_HEALTHCHECKS": "xids"}, 79, False),
        ({"DP_DISABLE_HEALTHCHECKS": "bogus,79"}, 79, False),  # malformed entries ignored
        ({"DP_ENABLE_HEALTHCHECKS": "13"}, 13, True),  # enabled overrides the built-in list
        ({"DP_DISABLE_HEALTHCHECKS": "48", "DP_ENABLE_HEALTHCHECKS": "48"}, 48, True),
        ({"DP_DISABLE_HEALTHCHECKS": "all", "DP_ENABLE_HEALTHCHECKS": "79"}, 79, True),
        ({"DP_DISABLE_HEALTHCHECKS": "all", "DP_ENABLE_HEALTHCHECKS": "79"}, 48, False),
        ({"DP_ENABLE_HEALTHCHECKS": "all"}, 13, True),
    ],
)
def test_which_xids_count(env: dict[str, str], xid: int, counts: bool) -> None:
    assert XIDPolicy.from_env(env).counts(xid) is counts


@pytest.mark.parametrize(
    ("xid", "where", "reason"),
    [
        (79, "", "XID 79 (GPU has fallen off the bus)"),
        (48, "", "XID 48 (Double Bit ECC Error)"),
        (150, "", "XID 150"),
        (
            94,
            "on MIG GPU instance 1 compute instance 0",
            "XID 94 (Contained ECC error) on MIG GPU instance 1 compute instance 0",
        ),
    ],
)
def test_reasons_name_the_xid(xid: int, where: str, reason: str) -> None:
    assert xid_reason(xid, where) == reason


def test_checks_off_reports_every_gpu_healthy() -> None:
    tracker = HealthTracker(XIDPolicy.from_env({"DP_DISABLE_HEALTHCHECKS": "all"}))
    tracker.xid([0], 79)
    assert tracker.assess(0, lost=True, ecc_uncorrected=3) == ("Healthy", None)


Inject = Callable[[FakeNVML], None]


@pytest.mark.parametrize(
    ("inject", "env", "reason"),
    [
        (lambda f: f.inject_xid(2, 79), {}, "XID 79 (GPU has fallen off the bus)"),
        (lambda f: f.inject_xid(2, 13), {}, None),
        (lambda f: f.inject_xid(2, 79), {"DP_DISABLE_HEALTHCHECKS": "79"}, None),
        (
            lambda f: f.inject_xid(2, 13),
            {"DP_ENABLE_HEALTHCHECKS": "13"},
            "XID 13 (Graphics Engine Exception)",
        ),
        (lambda f: f.set_ecc(2, 2), {}, "2 uncorrected ECC error(s) since the last GPU reset"),
        (lambda f: f.set_lost(2), {}, "GPU is lost (NVML: GPU_IS_LOST); it has fallen off the bus"),
    ],
)
def test_a_fault_marks_its_gpu_only(
    inject: Inject, env: dict[str, str], reason: str | None
) -> None:
    fake = _fake()
    monitor = _monitor(fake, env)
    inject(fake)
    readings = monitor.read()
    assert [r.reason for r in readings] == [None, None, reason, None, None, None, None, None]
    inventory = with_health(fake.inventory, readings)
    assert inventory.gpus[2].health == ("Healthy" if reason is None else "Unhealthy")
    assert inventory.gpus[2].health_reason == reason
    monitor.close()


@pytest.mark.parametrize(
    ("fault", "repair", "recovers"),
    [
        (lambda f: f.set_ecc(1, 1), lambda f: f.set_ecc(1, 0), True),  # reset clears the count
        (lambda f: f.set_lost(1), lambda f: f.set_lost(1, False), True),  # answers again
        (lambda f: f.inject_xid(1, 79), lambda f: None, False),  # sticky until restart
    ],
)
def test_health_recovers_when_the_fault_is_gone(
    fault: Inject, repair: Inject, recovers: bool
) -> None:
    fake = _fake()
    monitor = _monitor(fake)
    fault(fake)
    assert monitor.read()[1].health == "Unhealthy"
    repair(fake)
    assert monitor.read()[1].health == ("Healthy" if recovers else "Unhealthy")
    monitor.close()


class _BrokenSensor(FakeNVML):
    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        raise pynvml.NVMLError_Unknown()


def test_a_gpu_nvml_cannot_read_is_unhealthy_and_left_out_of_the_status() -> None:
    base = _fake()
    fake = _BrokenSensor(base.inventory, nvswitch=True)
    monitor = _monitor(fake)
    readings = monitor.read()
    assert {r.reason for r in readings} == {"NVML cannot read the GPU (Unknown Error)"}
    assert status_of(readings, "2026-01-01T00:00:00Z").gpus == ()
    monitor.close()


def test_a_failed_event_wait_marks_every_gpu() -> None:
    fake = _fake()
    monitor = _monitor(fake)
    fake.event_wait_error = "Unknown"
    assert {r.health for r in monitor.read()} == {"Unhealthy"}
    monitor.close()


def test_an_xid_on_a_mig_device_marks_its_gpu_and_says_which_instance() -> None:
    fake = _fake("mig-medium")
    monitor = _monitor(fake)
    fake.inject_xid(0, 94, gpu_instance=1, compute_instance=0)
    assert monitor.read()[0].reason == (
        "XID 94 (Contained ECC error) on MIG GPU instance 1 compute instance 0"
    )
    monitor.close()


def test_telemetry_reads_into_the_status() -> None:
    fake = _fake()
    monitor = _monitor(fake)
    fake.set_usage(0, used_mib=40_000, utilization=70, temperature=61)
    fake.set_usage(5, used_mib=1_000, utilization=5)
    fake.set_lost(7)
    status = status_of(monitor.read(), "2026-01-01T00:00:00Z")
    assert status.used_memory_mib == 41_000
    assert [(g.index, g.used_memory_mib, g.utilization_percent) for g in status.gpus][:1] == [
        (0, 40_000, 70)
    ]
    assert status.gpus[0].temperature_c == 61
    assert [g.index for g in status.gpus] == [0, 1, 2, 3, 4, 5, 6]  # the lost GPU: not read
    monitor.close()


def test_mig_gpus_have_no_utilisation_but_memory() -> None:
    fake = _fake("mig-medium")
    monitor = _monitor(fake)
    fake.set_usage(0, used_mib=9_000, utilization=90)
    reading = monitor.read()[0]
    assert (reading.used_mib, reading.utilization) == (9_000, 0)
    monitor.close()


def test_close_frees_the_event_set_and_shuts_nvml_down() -> None:
    fake = _fake()
    monitor = _monitor(fake)
    monitor.close()
    monitor.close()
    with pytest.raises(fake.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()
