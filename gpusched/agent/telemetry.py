"""GPU telemetry and health read from NVML, once per agent interval.

:class:`NVMLMonitor` keeps NVML open for the agent's life, with one event set registered for
every GPU's XID and ECC events (``nvmlEventSetCreate``, ``nvmlDeviceRegisterEvents`` with
the types ``nvmlDeviceGetSupportedEventTypes`` allows). :meth:`NVMLMonitor.read` first drains
the pending events (``nvmlEventSetWait_v2`` with a timeout of 0 until ``Timeout``: polled, so
no thread blocks in the driver between readings), feeding XIDs to the
:class:`~gpusched.agent.health.HealthTracker`; then it reads, per GPU, used memory
(``nvmlDeviceGetMemoryInfo``), utilisation (``nvmlDeviceGetUtilizationRates``; NVML has none
for a GPU in MIG mode: 0), temperature (``nvmlDeviceGetTemperature``, optional) and volatile
uncorrected ECC errors (``nvmlDeviceGetTotalEccErrors``; 0 where ECC is off). As in NVIDIA's
device plugin, a failed event wait, or an XID whose GPU NVML cannot name, marks every GPU.

:func:`status_of` turns readings into the inventory's status (the model the simulation writes,
:class:`~gpusched.inventory.GPUNodeInventoryStatus`; a lost GPU is left out) and
:func:`with_health` into the spec's ``health``/``healthReason``. Each reading costs about
five NVML calls per GPU (driver ioctls, tens of microseconds each), plus one per event;
the agent runs it in a worker thread, as a GPU that has fallen off the bus can make NVML
calls hang for seconds.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Final

from gpusched.agent.health import HealthTracker, XIDPolicy
from gpusched.inventory import (
    GPUDevice,
    GPUNodeInventory,
    GPUNodeInventoryStatus,
    GPUTelemetry,
    Health,
)

__all__ = ["GPUReading", "NVMLMonitor", "status_of", "with_health"]

log = logging.getLogger(__name__)

_MIB: Final = 1 << 20
_NO_INSTANCE: Final = 0xFFFFFFFF
_MAX_EVENTS_PER_READ: Final = 1024
"""Events drained per reading at most (a storm waits for the next interval)."""


@dataclass(frozen=True, slots=True)
class GPUReading:
    """One GPU at one reading; ``lost``: NVML could not read it (GPU_IS_LOST or another
    error; the figures are then 0)."""

    index: int
    used_mib: int
    utilization: int
    temperature: int | None
    ecc_uncorrected: int
    health: Health
    reason: str | None
    lost: bool = False


def _error(nvml: Any, name: str) -> type[BaseException]:
    cls: type[BaseException] = getattr(nvml, f"NVMLError_{name}")
    return cls


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NVMLMonitor:
    """NVML open for ``inventory``'s GPUs: :meth:`open`, :meth:`read` each interval,
    :meth:`close`. Not thread-safe: one reader at a time."""

    def __init__(self, nvml: Any, inventory: GPUNodeInventory, policy: XIDPolicy) -> None:
        self.nvml = nvml
        self.inventory = inventory
        self.health = HealthTracker(policy)
        self._handles: list[Any] = []
        self._index_by_uuid: dict[str, int] = {}
        self._event_set: Any = None
        self._open = False

    def open(self) -> None:
        """Initialise NVML, take each GPU's handle and register its events."""
        nvml = self.nvml
        nvml.nvmlInit()
        self._open = True
        self._handles = [nvml.nvmlDeviceGetHandleByIndex(g.index) for g in self.inventory.gpus]
        for gpu in self.inventory.gpus:
            self._index_by_uuid[gpu.uuid] = gpu.index
            for mig in gpu.mig_devices:
                self._index_by_uuid[mig.uuid] = gpu.index
        if self.health.policy.checks_off:
            log.info("GPU health checks are off (DP_DISABLE_HEALTHCHECKS)")
            return
        self._event_set = nvml.nvmlEventSetCreate()
        wanted = (
            nvml.nvmlEventTypeXidCriticalError
            | nvml.nvmlEventTypeDoubleBitEccError
            | nvml.nvmlEventTypeSingleBitEccError
        )
        for gpu, handle in zip(self.inventory.gpus, self._handles, strict=True):
            try:
                supported = int(nvml.nvmlDeviceGetSupportedEventTypes(handle))
                nvml.nvmlDeviceRegisterEvents(handle, wanted & supported, self._event_set)
            except _error(nvml, "NotSupported"):
                log.warning("GPU %d is too old for XID health checks", gpu.index)
            except nvml.NVMLError as exc:
                log.warning("GPU %d: cannot register its XID events: %s", gpu.index, exc)
                self.health.fault([gpu.index], f"cannot watch its XID events (NVML: {exc})")

    def close(self) -> None:
        """Free the event set and shut NVML down; safe to call twice."""
        if not self._open:
            return
        self._open = False
        try:
            if self._event_set is not None:
                self.nvml.nvmlEventSetFree(self._event_set)
        finally:
            self._event_set = None
            self.nvml.nvmlShutdown()

    def read(self) -> list[GPUReading]:
        """Drain the pending events, then read every GPU (module docstring)."""
        self._drain_events()
        return [
            self._read_gpu(gpu, handle)
            for gpu, handle in zip(self.inventory.gpus, self._handles, strict=True)
        ]

    def _drain_events(self) -> None:
        if self._event_set is None:
            return
        nvml = self.nvml
        every = [g.index for g in self.inventory.gpus]
        for _ in range(_MAX_EVENTS_PER_READ):
            try:
                event = nvml.nvmlEventSetWait_v2(self._event_set, 0)
            except _error(nvml, "Timeout"):
                return
            except nvml.NVMLError as exc:
                log.error("waiting for NVML events failed: %s; marking every GPU unhealthy", exc)
                self.health.fault(every, f"NVML event wait failed ({exc})")
                return
            if int(event.eventType) != int(nvml.nvmlEventTypeXidCriticalError):
                continue
            xid = int(event.eventData)
            try:
                uuid = _text(nvml.nvmlDeviceGetUUID(event.device))
            except nvml.NVMLError as exc:
                log.error("XID %d on a GPU NVML cannot name (%s): marking every GPU", xid, exc)
                self.health.xid(every, xid, "on an unknown GPU")
                continue
            index = self._index_by_uuid.get(uuid)
            if index is None:
                log.info("XID %d on unexpected device %s: ignored", xid, uuid)
                continue
            gi, ci = int(event.gpuInstanceId), int(event.computeInstanceId)
            where = f"on MIG GPU instance {gi} compute instance {ci}" if gi != _NO_INSTANCE else ""
            if self.health.xid([index], xid, where):
                log.warning(
                    "XID %d on GPU %d%s: marking it unhealthy",
                    xid,
                    index,
                    f" {where}" * bool(where),
                )
            else:
                log.info("XID %d on GPU %d ignored (an application error, or disabled)", xid, index)

    def _read_gpu(self, gpu: GPUDevice, handle: Any) -> GPUReading:
        nvml = self.nvml
        try:
            used = int(nvml.nvmlDeviceGetMemoryInfo(handle).used) // _MIB
            try:
                utilization = int(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
            except _error(nvml, "NotSupported"):
                utilization = 0
            try:
                temperature: int | None = int(
                    nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)
                )
            except _error(nvml, "NotSupported"):
                temperature = None
            try:
                ecc = int(
                    nvml.nvmlDeviceGetTotalEccErrors(
                        handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC
                    )
                )
            except _error(nvml, "NotSupported"):
                ecc = 0
        except _error(nvml, "GpuIsLost"):
            health, reason = self.health.assess(gpu.index, lost=True)
            return GPUReading(gpu.index, 0, 0, None, 0, health, reason, lost=True)
        except nvml.NVMLError as exc:
            health, reason = self.health.assess(gpu.index, read_error=str(exc))
            return GPUReading(gpu.index, 0, 0, None, 0, health, reason, lost=True)
        health, reason = self.health.assess(gpu.index, ecc_uncorrected=ecc)
        return GPUReading(
            gpu.index, used, min(max(utilization, 0), 100), temperature, ecc, health, reason
        )


def status_of(readings: list[GPUReading], observed_time: str) -> GPUNodeInventoryStatus:
    """The inventory's status from ``readings``; a lost GPU is left out (nothing was read)."""
    return GPUNodeInventoryStatus.of(
        observed_time,
        [
            GPUTelemetry(
                index=r.index,
                used_memory_mib=r.used_mib,
                utilization_percent=r.utilization,
                temperature_c=r.temperature,
            )
            for r in readings
            if not r.lost
        ],
    )


def with_health(inventory: GPUNodeInventory, readings: list[GPUReading]) -> GPUNodeInventory:
    """``inventory`` with each GPU's ``health`` and ``healthReason`` from ``readings``."""
    by_index = {r.index: r for r in readings}
    gpus = []
    for gpu in inventory.gpus:
        reading = by_index.get(gpu.index)
        health, reason = (reading.health, reading.reason) if reading else ("Healthy", None)
        if (gpu.health, gpu.health_reason) != (health, reason):
            gpu = gpu.model_copy(update={"health": health, "health_reason": reason})
        gpus.append(gpu)
    return inventory.model_copy(update={"gpus": tuple(gpus)})
