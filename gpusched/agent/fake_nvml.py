"""A fake NVML: the :mod:`pynvml` functions discovery calls, answering for one known node.

:class:`FakeNVML` is built from a ``GPUNodeInventory`` (what a simulated node publishes) and
reports it the way the driver would, so :func:`gpusched.agent.discovery.discover` runs its
real code over it: GPU handles by index, names, UUIDs and memory in bytes; per-link NVLink
state and remote PCI info (a direct link is one link on each GPU whose remote is the other
GPU; on an NVSwitch system every link of a GPU goes to one of four switches, spread as on a
DGX H100); ``nvmlDeviceGetTopologyCommonAncestor`` levels; MIG devices as handles named
``"<product> MIG <profile>"`` with their GPU instance's placement. Where the driver fails, it
raises pynvml's own ``NVMLError`` subclasses: NVLink calls on a GPU without NVLink
(``NotSupported``) or past its last link (``InvalidArgument``), MIG calls on a GPU that cannot
do MIG (``NotSupported``), an empty MIG slot (``NotFound``), any call before ``nvmlInit``
(``Uninitialized``); ``init_error`` makes ``nvmlInit`` fail as on a machine without the
library or the driver. Pure Python, no driver needed; building one is O(GPUs²).

Telemetry and health, for the agent's loop (:mod:`gpusched.agent.telemetry`): tests set what
a GPU reports with :meth:`FakeNVML.set_usage` (used memory, utilisation, temperature),
:meth:`~FakeNVML.set_ecc` (volatile uncorrected ECC errors) and :meth:`~FakeNVML.set_lost`
(every call on the GPU then raises ``GpuIsLost``), and queue XID events with
:meth:`~FakeNVML.inject_xid`; the agent reads them through pynvml's own calls
(``nvmlDeviceGetMemoryInfo``, ``nvmlDeviceGetUtilizationRates``, ``nvmlDeviceGetTemperature``,
``nvmlDeviceGetTotalEccErrors``, ``nvmlEventSetCreate``/``nvmlDeviceRegisterEvents``/
``nvmlEventSetWait_v2``). The fake never blocks: a wait with no event pending raises
``Timeout`` at once, whatever the timeout.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Final

import pynvml

from gpusched.agent.discovery import PCIE_LEVEL_BY_TOPOLOGY
from gpusched.inventory import GPUDevice, GPUNodeInventory, MIGDevice
from gpusched.mig_profiles import product_table
from gpusched.sim.fleet import ClusterSpec, SimNode

__all__ = ["NVSWITCHES", "SUPPORTED_EVENTS", "EventData", "FakeNVML", "Utilization"]

NVSWITCHES: Final = 4
"""NVSwitch chips of a faked NVSwitch baseboard (a DGX H100 has four)."""
_MIB: Final = 1 << 20
_TOPOLOGY_BY_LEVEL: Final = {name: level for level, name in PCIE_LEVEL_BY_TOPOLOGY.items()}


@dataclass(frozen=True, slots=True)
class _GPU:
    device: GPUDevice


@dataclass(frozen=True, slots=True)
class _MIG:
    parent: GPUDevice
    device: MIGDevice


@dataclass(frozen=True, slots=True)
class _GPUInstance:
    parent: GPUDevice
    device: MIGDevice


@dataclass(frozen=True, slots=True)
class Utilization:
    """``c_nvmlUtilization_t``: percent of time the GPU and its memory were busy."""

    gpu: int
    memory: int


@dataclass(frozen=True, slots=True)
class EventData:
    """``c_nvmlEventData_t``; the instance ids are 0xFFFFFFFF for an event of a whole GPU."""

    device: _GPU
    eventType: int
    eventData: int
    gpuInstanceId: int = 0xFFFFFFFF
    computeInstanceId: int = 0xFFFFFFFF


@dataclass(slots=True)
class _EventSet:
    registered: dict[int, int] = field(default_factory=dict)  # GPU index -> event mask
    freed: bool = False


@dataclass(slots=True)
class _Usage:
    used_mib: int = 0
    utilization: int = 0
    temperature: int = 30
    ecc_uncorrected: int = 0


SUPPORTED_EVENTS: Final = (
    pynvml.nvmlEventTypeXidCriticalError
    | pynvml.nvmlEventTypeDoubleBitEccError
    | pynvml.nvmlEventTypeSingleBitEccError
)
"""What the fake's GPUs say they can report (``nvmlDeviceGetSupportedEventTypes``)."""


@dataclass(frozen=True, slots=True)
class PciInfo:
    """The fields of ``nvmlPciInfo_t`` discovery reads; ctypes gives ``bytes``."""

    busId: bytes
    busIdLegacy: bytes


@dataclass(frozen=True, slots=True)
class MemoryInfo:
    total: int
    free: int
    used: int = 0


@dataclass(frozen=True, slots=True)
class Placement:
    start: int
    size: int


@dataclass(frozen=True, slots=True)
class GpuInstanceInfo:
    """``c_nvmlGpuInstanceInfo_t``."""

    id: int
    profileId: int
    placement: Placement


def _pci(bus_id: str) -> PciInfo:
    return PciInfo(bus_id.encode(), bus_id[4:].encode())


def _switch_bus_id(switch: int) -> str:
    return f"00000001:{switch:02X}:00.0"


def _error(name: str) -> pynvml.NVMLError:
    cls: type[pynvml.NVMLError] = getattr(pynvml, f"NVMLError_{name}")
    return cls()


@dataclass
class FakeNVML:
    """A pynvml stand-in for one node (see the module docstring).

    ``nvswitch``: the NVLinks of each pair are the GPU's links to NVSwitches (every pair of
    the inventory must then show the same count). Constants and error classes are pynvml's;
    methods carry pynvml's camelCase names so that discovery cannot tell the two apart.
    """

    inventory: GPUNodeInventory
    nvswitch: bool = False
    init_error: str | None = None
    """``"LibraryNotFound"``, ``"DriverNotLoaded"``...: ``nvmlInit`` raises that error."""
    event_wait_error: str | None = None
    """``"Unknown"``...: ``nvmlEventSetWait_v2`` raises that error instead of waiting."""
    _initialised: int = field(default=0, init=False)
    _remotes: list[list[str]] = field(default_factory=list, init=False)
    _usage: list[_Usage] = field(default_factory=list, init=False)
    _lost: set[int] = field(default_factory=set, init=False)
    _events: deque[EventData] = field(default_factory=deque, init=False)
    _sets: list[_EventSet] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        gpus = self.inventory.gpus
        self._usage = [_Usage() for _ in gpus]
        self._remotes = [[] for _ in gpus]
        for link in self.inventory.links:
            if self.nvswitch:
                continue
            self._remotes[link.a] += [gpus[link.b].pci_bus_id] * link.nvlinks
            self._remotes[link.b] += [gpus[link.a].pci_bus_id] * link.nvlinks
        if self.nvswitch:
            counts = {link.nvlinks for link in self.inventory.links}
            if len(counts) > 1:
                raise ValueError(f"an NVSwitch node has one link count per GPU, got {counts}")
            per_gpu = counts.pop() if counts else 0
            for remotes in self._remotes:
                remotes += [_switch_bus_id(i % NVSWITCHES) for i in range(per_gpu)]
        for gpu, remotes in zip(gpus, self._remotes, strict=True):
            if len(remotes) > pynvml.NVML_NVLINK_MAX_LINKS:
                raise ValueError(f"GPU {gpu.index} would have {len(remotes)} NVLinks")

    @classmethod
    def of_sim_node(cls, node: SimNode, spec: ClusterSpec) -> FakeNVML:
        """The fake for a node of a simulated fleet built from ``spec``."""
        pool = next(p for p in spec.pools if p.name == node.pool)
        if node.inventory is None or pool.gpu is None:
            raise ValueError(f"node {node.name} has no GPUs")
        return cls(node.inventory, nvswitch=pool.gpu.topology == "nvswitch")

    def __getattr__(self, name: str) -> Any:
        """pynvml's constants (``NVML_*``, ``nvmlEventType*``), error classes (``NVMLError*``)."""
        if name.startswith(("NVML", "nvmlEventType")):
            return getattr(pynvml, name)
        raise AttributeError(name)

    # --- library ---------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise _error(self.init_error)
        self._initialised += 1

    def nvmlShutdown(self) -> None:
        self._check()
        self._initialised -= 1

    def _check(self) -> None:
        if not self._initialised:
            raise _error("Uninitialized")

    def nvmlSystemGetDriverVersion(self) -> str:
        self._check()
        return self.inventory.driver_version

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._check()
        major, minor = self.inventory.cuda_driver_version.split(".")
        return int(major) * 1000 + int(minor) * 10

    # --- devices ---------------------------------------------------------------------------

    def nvmlDeviceGetCount(self) -> int:
        self._check()
        return len(self.inventory.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _GPU:
        self._check()
        if not 0 <= index < len(self.inventory.gpus):
            raise _error("InvalidArgument")
        return _GPU(self.inventory.gpus[index])

    def _gpu(self, handle: object) -> GPUDevice:
        self._check()
        if not isinstance(handle, _GPU):
            raise _error("InvalidArgument" if not isinstance(handle, _MIG) else "NotSupported")
        self._alive(handle)
        return handle.device

    def _alive(self, handle: _GPU | _MIG) -> None:
        parent = handle.device if isinstance(handle, _GPU) else handle.parent
        if parent.index in self._lost:
            raise _error("GpuIsLost")

    def nvmlDeviceGetName(self, handle: _GPU | _MIG) -> str:
        self._check()
        self._alive(handle)
        if isinstance(handle, _MIG):
            return f"{handle.parent.product} MIG {handle.device.profile}"
        return handle.device.product

    def nvmlDeviceGetUUID(self, handle: _GPU | _MIG) -> str:
        self._check()
        self._alive(handle)
        return handle.device.uuid

    def nvmlDeviceGetMemoryInfo(self, handle: _GPU | _MIG) -> MemoryInfo:
        self._check()
        self._alive(handle)
        total = handle.device.memory_mib * _MIB
        used = self._usage[handle.device.index].used_mib * _MIB if isinstance(handle, _GPU) else 0
        return MemoryInfo(total=total, free=total - used, used=used)

    # --- telemetry and health --------------------------------------------------------------

    def nvmlDeviceGetUtilizationRates(self, handle: _GPU) -> Utilization:
        gpu = self._gpu(handle)
        if gpu.mig_enabled:  # NVML has no whole-GPU utilisation in MIG mode
            raise _error("NotSupported")
        return Utilization(gpu=self._usage[gpu.index].utilization, memory=0)

    def nvmlDeviceGetTemperature(self, handle: _GPU, sensor: int) -> int:
        gpu = self._gpu(handle)
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise _error("InvalidArgument")
        return self._usage[gpu.index].temperature

    def nvmlDeviceGetTotalEccErrors(self, handle: _GPU, error_type: int, counter_type: int) -> int:
        gpu = self._gpu(handle)
        if (error_type, counter_type) != (
            pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            pynvml.NVML_VOLATILE_ECC,
        ):
            return 0
        return self._usage[gpu.index].ecc_uncorrected

    def nvmlDeviceGetSupportedEventTypes(self, handle: _GPU) -> int:
        self._gpu(handle)
        return int(SUPPORTED_EVENTS)

    def nvmlEventSetCreate(self) -> _EventSet:
        self._check()
        event_set = _EventSet()
        self._sets.append(event_set)
        return event_set

    def nvmlDeviceRegisterEvents(
        self, handle: _GPU, event_types: int, event_set: _EventSet
    ) -> None:
        gpu = self._gpu(handle)
        if event_types & ~SUPPORTED_EVENTS:
            raise _error("NotSupported")
        event_set.registered[gpu.index] = event_set.registered.get(gpu.index, 0) | event_types

    def nvmlEventSetWait_v2(self, event_set: _EventSet, timeout_ms: int) -> EventData:
        self._check()
        if event_set.freed:
            raise _error("InvalidArgument")
        if self.event_wait_error is not None:
            raise _error(self.event_wait_error)
        while self._events:
            event = self._events.popleft()
            if event_set.registered.get(event.device.device.index, 0) & event.eventType:
                return event
        raise _error("Timeout")

    def nvmlEventSetFree(self, event_set: _EventSet) -> None:
        self._check()
        event_set.freed = True

    # --- what tests inject (not pynvml's API) ------------------------------------------------

    def set_usage(
        self,
        index: int,
        *,
        used_mib: int | None = None,
        utilization: int | None = None,
        temperature: int | None = None,
    ) -> None:
        """What GPU ``index`` reports from now on; ``None`` keeps a figure."""
        usage = self._usage[index]
        if used_mib is not None:
            usage.used_mib = used_mib
        if utilization is not None:
            usage.utilization = utilization
        if temperature is not None:
            usage.temperature = temperature

    def set_ecc(self, index: int, uncorrected: int) -> None:
        """The volatile uncorrected ECC count (0 again after a GPU reset)."""
        self._usage[index].ecc_uncorrected = uncorrected

    def set_lost(self, index: int, lost: bool = True) -> None:
        """GPU ``index`` has fallen off the bus (every call raises ``GpuIsLost``), or is back."""
        if lost:
            self._lost.add(index)
        else:
            self._lost.discard(index)

    def inject_xid(
        self,
        index: int,
        xid: int,
        *,
        gpu_instance: int | None = None,
        compute_instance: int | None = None,
    ) -> None:
        """Queue an XID critical error event on GPU ``index`` (on one of its MIG devices when
        the instance ids are given)."""
        self._events.append(
            EventData(
                device=_GPU(self.inventory.gpus[index]),
                eventType=int(pynvml.nvmlEventTypeXidCriticalError),
                eventData=xid,
                gpuInstanceId=0xFFFFFFFF if gpu_instance is None else gpu_instance,
                computeInstanceId=0xFFFFFFFF if compute_instance is None else compute_instance,
            )
        )

    def nvmlDeviceGetPciInfo(self, handle: _GPU) -> PciInfo:
        return _pci(self._gpu(handle).pci_bus_id)

    def nvmlDeviceGetMinorNumber(self, handle: _GPU) -> int:
        minor = self._gpu(handle).minor_number
        if minor is None:
            raise _error("NotSupported")
        return minor

    def nvmlDeviceGetNumaNodeId(self, handle: _GPU) -> int:
        numa = self._gpu(handle).numa_node
        if numa is None:
            raise _error("NotSupported")
        return numa

    def nvmlDeviceGetTopologyCommonAncestor(self, a: _GPU, b: _GPU) -> int:
        x, y = sorted((self._gpu(a).index, self._gpu(b).index))
        if x == y:
            return int(pynvml.NVML_TOPOLOGY_INTERNAL)
        link = next(link for link in self.inventory.links if (link.a, link.b) == (x, y))
        return _TOPOLOGY_BY_LEVEL[link.pcie]

    # --- NVLink ----------------------------------------------------------------------------

    def _remote(self, handle: _GPU, link: int) -> str:
        remotes = self._remotes[self._gpu(handle).index]
        if not remotes:
            raise _error("NotSupported")
        if not 0 <= link < len(remotes):
            raise _error("InvalidArgument")
        return remotes[link]

    def nvmlDeviceGetNvLinkState(self, handle: _GPU, link: int) -> int:
        self._remote(handle, link)
        return int(pynvml.NVML_FEATURE_ENABLED)

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: _GPU, link: int) -> PciInfo:
        return _pci(self._remote(handle, link))

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: _GPU, link: int) -> int:
        remote = self._remote(handle, link)
        if any(gpu.pci_bus_id == remote for gpu in self.inventory.gpus):
            return int(pynvml.NVML_NVLINK_DEVICE_TYPE_GPU)
        return int(pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH)

    # --- MIG -------------------------------------------------------------------------------

    def _mig_capable(self, handle: object) -> GPUDevice:
        gpu = self._gpu(handle)
        if product_table(gpu.product) is None:
            raise _error("NotSupported")
        return gpu

    def nvmlDeviceGetMigMode(self, handle: _GPU) -> list[int]:
        mode = int(self._mig_capable(handle).mig_enabled)
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: _GPU) -> int:
        return max(7, len(self._mig_capable(handle).mig_devices))

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: _GPU, index: int) -> _MIG:
        gpu = self._mig_capable(handle)
        if not 0 <= index < self.nvmlDeviceGetMaxMigDeviceCount(handle):
            raise _error("InvalidArgument")
        if index >= len(gpu.mig_devices):
            raise _error("NotFound")
        return _MIG(gpu, gpu.mig_devices[index])

    def _mig(self, handle: object) -> _MIG:
        self._check()
        if not isinstance(handle, _MIG):
            raise _error("NotSupported")
        return handle

    def nvmlDeviceGetGpuInstanceId(self, handle: _MIG) -> int:
        return self._mig(handle).device.gpu_instance_id

    def nvmlDeviceGetComputeInstanceId(self, handle: _MIG) -> int:
        return self._mig(handle).device.compute_instance_id

    def nvmlDeviceGetGpuInstanceById(self, handle: _GPU, gpu_instance: int) -> _GPUInstance:
        gpu = self._mig_capable(handle)
        if not gpu.mig_enabled:
            raise _error("InvalidArgument")
        for dev in gpu.mig_devices:
            if dev.gpu_instance_id == gpu_instance:
                return _GPUInstance(gpu, dev)
        raise _error("NotFound")

    def nvmlGpuInstanceGetInfo(self, instance: _GPUInstance) -> GpuInstanceInfo:
        self._check()
        dev = instance.device
        placement = Placement(dev.placement_start, dev.placement_size)
        return GpuInstanceInfo(id=dev.gpu_instance_id, profileId=0, placement=placement)
