"""GPU discovery: one node's ``GPUNodeInventory`` spec read from NVML.

:func:`discover` takes ``nvml``, the :mod:`pynvml` module or an object with the same functions
(:class:`gpusched.agent.fake_nvml.FakeNVML`), so the tests run the code a node runs. It
reads, per GPU in NVML index order: name, UUID, total memory, PCI bus id, NUMA node, MIG
mode and each MIG device (profile from the MIG device's name, ``"... MIG 1g.10gb"``; ids from
``nvmlDeviceGetGpuInstanceId``/``ComputeInstanceId``; placement from
``nvmlGpuInstanceGetInfo``), and per GPU pair:

- ``nvlinks``: the GPU's active links (``nvmlDeviceGetNvLinkState``, links 0.. until NVML says
  the link does not exist) whose remote end (``nvmlDeviceGetNvLinkRemotePciInfo``) is the
  other GPU. A link whose remote is an NVSwitch (``nvmlDeviceGetNvLinkRemoteDeviceType``)
  joins the GPU to every other switched GPU: a pair of switched GPUs counts
  ``min(switch links of a, of b)``, nvidia-smi's ``NV18`` on a DGX H100, which is how the
  inventory states NVSwitch systems.
- ``pcie``: ``nvmlDeviceGetTopologyCommonAncestor`` named as ``nvidia-smi topo -m`` names it.

MIG placement needs the MIG "monitor" capability (root, or the agent's privileged
container); without it NVML answers NO_PERMISSION and :class:`AgentError` says so. A machine
without the NVML library or driver raises :class:`AgentError` naming what is missing.

Cost: O(GPUs x links + GPUs²) NVML calls, each a driver ioctl (tens of microseconds): well
under a second on 8 GPUs. Run it at start-up and when the device plugin reports a change,
not per scheduling cycle.
"""

from __future__ import annotations

from itertools import combinations
from typing import Any, Final

from gpusched.inventory import GPUDevice, GPULink, GPUNodeInventory, MIGDevice, PCIeLevelName

__all__ = ["PCIE_LEVEL_BY_TOPOLOGY", "AgentError", "discover"]

PCIE_LEVEL_BY_TOPOLOGY: Final[dict[int, PCIeLevelName]] = {
    10: "PIX",  # NVML_TOPOLOGY_SINGLE: one PCIe switch
    20: "PXB",  # NVML_TOPOLOGY_MULTIPLE: several PCIe switches, no host bridge
    30: "PHB",  # NVML_TOPOLOGY_HOSTBRIDGE
    40: "NODE",  # NVML_TOPOLOGY_NODE: host bridges within one NUMA node
    50: "SYS",  # NVML_TOPOLOGY_SYSTEM: across NUMA nodes (SMP interconnect)
}
"""``nvmlGpuTopologyLevel_t`` values to the inventory's PCIe level names."""

_MIB: Final = 1 << 20
_NVLINK_DEVICE_TYPE_SWITCH: Final = 0x02
_MIG_NAME_MARK: Final = " MIG "


class AgentError(RuntimeError):
    """The node's GPUs cannot be read; the message says what is missing and what to do."""


def _text(value: Any) -> str:
    """pynvml returns ``str`` or, for some fields and older versions, ``bytes``."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _bus_id(pci: Any) -> str:
    """The 8-hex-digit domain form ``00000000:18:00.0``, upper-case as NVML prints it."""
    bus = _text(pci.busId).upper()
    domain, _, rest = bus.partition(":")
    return f"{int(domain, 16):08X}:{rest}"


def _errors(nvml: Any, name: str) -> type[BaseException]:
    """``nvml``'s ``NVMLError_<name>`` class (a fake may share pynvml's)."""
    cls: type[BaseException] = getattr(nvml, f"NVMLError_{name}")
    return cls


def _init(nvml: Any) -> None:
    try:
        nvml.nvmlInit()
    except _errors(nvml, "LibraryNotFound") as exc:
        raise AgentError(
            "NVML library (libnvidia-ml.so.1) not found: this node has no NVIDIA driver "
            "installed, or the agent's container does not mount it (run it with the NVIDIA "
            "container runtime, or mount the driver's libraries)"
        ) from exc
    except _errors(nvml, "DriverNotLoaded") as exc:
        raise AgentError(
            "NVIDIA kernel driver not loaded: no GPU on this node, or the nvidia module is "
            "not loaded (check `lsmod | grep nvidia` and `nvidia-smi`)"
        ) from exc
    except _errors(nvml, "NoPermission") as exc:
        raise AgentError("NVML: no permission to open /dev/nvidia*; run privileged") from exc


def discover(nvml: Any, node_name: str) -> GPUNodeInventory:
    """The inventory spec of this node's GPUs, ``source: "nvml"``.

    Raises :class:`AgentError` when NVML cannot be used (no library, no driver, no
    permission); other NVML errors (a GPU lost mid-read) propagate as pynvml's ``NVMLError``.
    Calls ``nvmlShutdown`` when done.
    """
    _init(nvml)
    try:
        return _read(nvml, node_name)
    finally:
        nvml.nvmlShutdown()


def _read(nvml: Any, node_name: str) -> GPUNodeInventory:
    cuda = int(nvml.nvmlSystemGetCudaDriverVersion())
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
    bus_ids = [_bus_id(nvml.nvmlDeviceGetPciInfo(h)) for h in handles]
    gpus = tuple(_gpu(nvml, i, h, bus_ids[i]) for i, h in enumerate(handles))
    direct, switched = _nvlinks(nvml, handles, bus_ids)
    links = []
    for a, b in combinations(range(len(handles)), 2):
        count = direct.get((a, b), 0)
        if switched[a] and switched[b]:
            count += min(switched[a], switched[b])
        level = int(nvml.nvmlDeviceGetTopologyCommonAncestor(handles[a], handles[b]))
        pcie = PCIE_LEVEL_BY_TOPOLOGY.get(level, "PIX")  # INTERNAL (same board) is the best
        links.append(
            GPULink(a=a, b=b, type="NVLink" if count else "PCIe", nvlinks=count, pcie=pcie)
        )
    return GPUNodeInventory(
        node_name=node_name,
        source="nvml",
        driver_version=_text(nvml.nvmlSystemGetDriverVersion()),
        cuda_driver_version=f"{cuda // 1000}.{cuda % 1000 // 10}",
        gpus=gpus,
        links=tuple(links),
    )


def _numa_node(nvml: Any, handle: Any) -> int | None:
    try:
        node = int(nvml.nvmlDeviceGetNumaNodeId(handle))
    except nvml.NVMLError:  # NotSupported, or FunctionNotFound on drivers before R545
        return None
    return node if node >= 0 else None


def _minor_number(nvml: Any, handle: Any) -> int | None:
    try:
        return int(nvml.nvmlDeviceGetMinorNumber(handle))
    except nvml.NVMLError:  # NotSupported (Windows); the device plugin then uses the index
        return None


def _gpu(nvml: Any, index: int, handle: Any, bus_id: str) -> GPUDevice:
    try:
        mig_enabled = int(nvml.nvmlDeviceGetMigMode(handle)[0]) == nvml.NVML_DEVICE_MIG_ENABLE
    except _errors(nvml, "NotSupported"):
        mig_enabled = False
    return GPUDevice(
        index=index,
        uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
        product=_text(nvml.nvmlDeviceGetName(handle)),
        memory_mib=int(nvml.nvmlDeviceGetMemoryInfo(handle).total) // _MIB,
        pci_bus_id=bus_id,
        numa_node=_numa_node(nvml, handle),
        minor_number=_minor_number(nvml, handle),
        mig_enabled=mig_enabled,
        mig_devices=_mig_devices(nvml, handle) if mig_enabled else (),
    )


def _mig_devices(nvml: Any, parent: Any) -> tuple[MIGDevice, ...]:
    devices = []
    for slot in range(int(nvml.nvmlDeviceGetMaxMigDeviceCount(parent))):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, slot)
        except _errors(nvml, "NotFound"):  # an empty slot
            continue
        name = _text(nvml.nvmlDeviceGetName(mig))
        _, mark, profile = name.rpartition(_MIG_NAME_MARK)
        if not mark:
            raise AgentError(f"MIG device name {name!r} does not end in 'MIG <profile>'")
        gi = int(nvml.nvmlDeviceGetGpuInstanceId(mig))
        try:
            info = nvml.nvmlGpuInstanceGetInfo(nvml.nvmlDeviceGetGpuInstanceById(parent, gi))
        except _errors(nvml, "NoPermission") as exc:
            raise AgentError(
                "NVML: no permission to read MIG GPU instances (placement); run the agent as "
                "root or grant it /proc/driver/nvidia/capabilities/mig/monitor"
            ) from exc
        devices.append(
            MIGDevice(
                uuid=_text(nvml.nvmlDeviceGetUUID(mig)),
                profile=profile,
                memory_mib=int(nvml.nvmlDeviceGetMemoryInfo(mig).total) // _MIB,
                gpu_instance_id=gi,
                compute_instance_id=int(nvml.nvmlDeviceGetComputeInstanceId(mig)),
                placement_start=int(info.placement.start),
                placement_size=int(info.placement.size),
            )
        )
    return tuple(sorted(devices, key=lambda d: (d.gpu_instance_id, d.compute_instance_id)))


def _nvlinks(
    nvml: Any, handles: list[Any], bus_ids: list[str]
) -> tuple[dict[tuple[int, int], int], list[int]]:
    """Direct NVLinks per GPU pair ``(a, b)``, a < b, and switch links per GPU.

    A direct link is seen from both ends; it is counted from the lower index only.
    """
    index_of = {bus: i for i, bus in enumerate(bus_ids)}
    direct: dict[tuple[int, int], int] = {}
    switched = [0] * len(handles)
    for a, handle in enumerate(handles):
        for link in range(int(nvml.NVML_NVLINK_MAX_LINKS)):
            try:
                if int(nvml.nvmlDeviceGetNvLinkState(handle, link)) != nvml.NVML_FEATURE_ENABLED:
                    continue
            except (_errors(nvml, "NotSupported"), _errors(nvml, "InvalidArgument")):
                break  # no NVLink on this GPU, or past its last link
            remote = _bus_id(nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link))
            b = index_of.get(remote)
            if b is None:
                switched[a] += _remote_is_switch(nvml, handle, link)
            elif a < b:
                direct[a, b] = direct.get((a, b), 0) + 1
    return direct, switched


def _remote_is_switch(nvml: Any, handle: Any, link: int) -> bool:
    """Whether a link's remote end (not a GPU of this node) is an NVSwitch. Drivers without
    ``nvmlDeviceGetNvLinkRemoteDeviceType`` (before R460) answer FunctionNotFound: on x86 the
    only other NVLink device is a switch (IBM's NPUs are POWER9 only)."""
    try:
        kind = int(nvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link))
    except (_errors(nvml, "FunctionNotFound"), _errors(nvml, "NotSupported")):
        return True
    return kind == _NVLINK_DEVICE_TYPE_SWITCH
