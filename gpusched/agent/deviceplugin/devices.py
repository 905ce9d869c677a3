"""What the device plugin advertises, and what a container gets: pure functions of an inventory.

**Resources and device IDs.** One kubelet resource per kind of device, each served on its own
socket (the kubelet takes one resource per registration):

==========================  =============================================  ===================
resource                    devices (one per ...)                          device ID
==========================  =============================================  ===================
``nvidia.com/gpu``          GPU with MIG off (whole GPUs, NVIDIA's count)  ``GPU-<uuid>``
``gpusched.io/gpu``         client slot: each GPU with MIG off,            ``GPU-<uuid>::<k>``
                            replicated ``shared_replicas`` times (HAMi's
                            split count; default 10)
``woolyai.com/gpu``         the same slots, for WoolyAI's manifests        ``GPU-<uuid>::<k>``
``nvidia.com/mig-<p>``      MIG device of profile ``p`` (NVIDIA's *mixed*  ``MIG-<uuid>``
                            strategy; ``+`` in a profile becomes ``.``)
==========================  =============================================  ===================

These are the counts the simulation's Nodes advertise (:mod:`gpusched.sim.fleet`), so a real
node reads as a simulated one. Not advertised: ``gpusched.io/vram``, HAMi's
``nvidia.com/gpumem``/``gpumem-percentage``/``gpucores`` (a per-GPU quantity is not a
device count; the kubelet drops a resource no node advertises from its admission check, and
the scheduler counts VRAM), and KAI's annotations (no resource at all). A HAMi-form pod
(``nvidia.com/gpu: 1`` with ``nvidia.com/gpumem``) counts against the whole-GPU devices, so
the kubelet admits at most one such pod per GPU unless ``whole_gpu_replicas`` replicates
``nvidia.com/gpu`` as HAMi's own plugin does (docs/device_plugin.md weighs the two).

A GPU's health (``GPUDevice.health``) is the health of all its devices; a device's topology
is its GPU's NUMA node. The kubelet counts unhealthy devices in capacity, not allocatable.

**What a container gets** (:func:`container_response`): the devices the scheduler wrote on the
pod (``gpusched.io/gpu-uuids``, MIG UUIDs for MIG pods), never the kubelet's pick:
``NVIDIA_VISIBLE_DEVICES`` and ``CUDA_VISIBLE_DEVICES`` list their UUIDs in the annotated
order (CUDA takes UUIDs, so device ``i`` is the same GPU with or without the container
runtime's re-indexing); a shared GPU adds HAMi-core's ``CUDA_DEVICE_MEMORY_LIMIT_<i>``
(``"16384m"``: the reserved VRAM) and, with a compute share, ``CUDA_DEVICE_SM_LIMIT``; device
specs as NVIDIA's plugin passes them (``--pass-device-specs``): ``/dev/nvidiactl``,
``/dev/nvidia-uvm``, ``/dev/nvidia-uvm-tools``, ``/dev/nvidia-modeset`` and ``/dev/nvidia<m>``
per GPU, ``m`` its driver minor number (``minorNumber`` in the inventory, which need not be the
NVML index; the index only where NVML did not say), the parent GPU of a MIG device, plus for a
MIG device its GPU and compute instances' capability nodes ``/dev/nvidia-caps/nvidia-cap<k>``
(``k`` from the driver's ``/proc/driver/nvidia-caps/mig-minors``, as NVIDIA's plugin reads
it), each only if it exists under ``dev_root``.

Cost: O(GPUs x replicas) per advertisement, O(devices) per container response.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from gpusched.agent.deviceplugin import api_pb2 as api
from gpusched.gpu_requests.native import RESOURCE_SHARED_GPU
from gpusched.gpu_requests.woolyai import RESOURCE_GPU as RESOURCE_WOOLYAI_GPU
from gpusched.inventory import RESOURCE_GPU, GPUDevice, GPUNodeInventory, MIGDevice
from gpusched.inventory import mig_resource_name as mig_resource_name

__all__ = [
    "HEALTHY",
    "MIG_MINORS",
    "REPLICA_SEPARATOR",
    "RESOURCE_GPU",
    "RESOURCE_SHARED_GPU",
    "RESOURCE_WOOLYAI_GPU",
    "SHARED_RESOURCES",
    "UNHEALTHY",
    "Advertised",
    "Granted",
    "advertise",
    "container_response",
    "device_names",
    "device_uuid",
    "gpus_by_uuid",
    "mig_resource_name",
    "read_mig_minors",
]

HEALTHY: Final = "Healthy"
UNHEALTHY: Final = "Unhealthy"
REPLICA_SEPARATOR: Final = "::"
"""Between a GPU's UUID and the replica number in a shared slot's device ID (NVIDIA's
time-slicing writes replicas the same way)."""
SHARED_RESOURCES: Final = (RESOURCE_SHARED_GPU, RESOURCE_WOOLYAI_GPU)
"""Resources advertised as ``shared_replicas`` slots per GPU."""

_CONTROL_DEVICES: Final = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")


@dataclass(frozen=True, slots=True)
class Advertised:
    """One device of one resource, as ListAndWatch sends it."""

    id: str
    gpu: GPUDevice
    mig: MIGDevice | None = None

    @property
    def healthy(self) -> bool:
        return self.gpu.healthy

    def to_proto(self) -> api.Device:
        topology = None
        if self.gpu.numa_node is not None:
            topology = api.TopologyInfo(nodes=[api.NUMANode(ID=self.gpu.numa_node)])
        return api.Device(
            ID=self.id, health=HEALTHY if self.healthy else UNHEALTHY, topology=topology
        )


def device_uuid(device_id: str) -> str:
    """The GPU or MIG UUID a device ID stands for (a shared slot's GPU)."""
    return device_id.split(REPLICA_SEPARATOR, 1)[0]


def advertise(
    inventory: GPUNodeInventory, shared_replicas: int = 10, whole_gpu_replicas: int = 1
) -> dict[str, tuple[Advertised, ...]]:
    """Every resource the node's plugin serves, with its devices (module docstring).

    ``nvidia.com/gpu`` and the shared resources are always present (no devices on an all-MIG
    node, as NVIDIA's plugin reports ``0``); a MIG resource is present while a device of its
    profile exists. ``shared_replicas`` 0 leaves the shared resources out.
    """
    whole = inventory.full_gpus
    out: dict[str, tuple[Advertised, ...]] = {
        RESOURCE_GPU: tuple(
            Advertised(gpu.uuid if whole_gpu_replicas == 1 else _replica_id(gpu.uuid, k), gpu)
            for gpu in whole
            for k in range(whole_gpu_replicas)
        )
    }
    if shared_replicas > 0:
        slots = tuple(
            Advertised(_replica_id(gpu.uuid, k), gpu)
            for gpu in whole
            for k in range(shared_replicas)
        )
        for resource in SHARED_RESOURCES:
            out[resource] = slots
    mig: dict[str, list[Advertised]] = {}
    for gpu in inventory.gpus:
        for dev in gpu.mig_devices:
            mig.setdefault(mig_resource_name(dev.profile), []).append(
                Advertised(dev.uuid, gpu, dev)
            )
    for resource in sorted(mig):
        out[resource] = tuple(mig[resource])
    return out


def _replica_id(uuid: str, k: int) -> str:
    return f"{uuid}{REPLICA_SEPARATOR}{k}"


@dataclass(frozen=True, slots=True)
class Granted:
    """One device a container gets: a GPU (or one of its MIG devices) from the annotations."""

    gpu: GPUDevice
    mig: MIGDevice | None = None
    vram_mib: int | None = None
    """Shared GPUs: the VRAM reserved for the pod on it (HAMi-core's limit); None: no limit."""

    @property
    def uuid(self) -> str:
        return self.mig.uuid if self.mig is not None else self.gpu.uuid


MIG_MINORS: Final = Path("/proc/driver/nvidia-caps/mig-minors")
"""The driver's table of MIG capability minors: lines ``gpu0/gi1/access 12`` and
``gpu0/gi1/ci0/access 13`` (GPU by minor number)."""


def read_mig_minors(path: Path = MIG_MINORS) -> dict[str, int]:
    """``{"gpu0/gi1/access": 12, ...}`` from the driver's table; empty where there is none."""
    try:
        text = path.read_text()
    except OSError:
        return {}
    out: dict[str, int] = {}
    for line in text.splitlines():
        name, _, minor = line.partition(" ")
        if minor.strip().isdigit():
            out[name] = int(minor)
    return out


def device_names(granted: Granted, mig_minors: Mapping[str, int]) -> list[str]:
    """The device nodes (relative to /dev) that ``granted`` needs besides the control ones."""
    gpu = granted.gpu
    minor = gpu.minor_number if gpu.minor_number is not None else gpu.index
    names = [f"nvidia{minor}"]
    mig = granted.mig
    if mig is not None:
        gi = f"gpu{minor}/gi{mig.gpu_instance_id}"
        for key in (f"{gi}/access", f"{gi}/ci{mig.compute_instance_id}/access"):
            if key in mig_minors:
                names.append(f"nvidia-caps/nvidia-cap{mig_minors[key]}")
    return names


def container_response(
    granted: Sequence[Granted],
    *,
    cores_percent: int = 0,
    dev_root: Path = Path("/dev"),
    mig_minors: Mapping[str, int] | None = None,
) -> api.ContainerAllocateResponse:
    """What the kubelet injects into a container holding ``granted`` (module docstring)."""
    uuids = ",".join(g.uuid for g in granted)
    envs: dict[str, str] = {"NVIDIA_VISIBLE_DEVICES": uuids, "CUDA_VISIBLE_DEVICES": uuids}
    for i, g in enumerate(granted):
        if g.vram_mib is not None:
            envs[f"CUDA_DEVICE_MEMORY_LIMIT_{i}"] = f"{g.vram_mib}m"
    if cores_percent and any(g.vram_mib is not None for g in granted):
        envs["CUDA_DEVICE_SM_LIMIT"] = str(cores_percent)
    names = list(_CONTROL_DEVICES)
    for g in granted:
        for name in device_names(g, mig_minors or {}):
            if name not in names:
                names.append(name)
    specs = [
        api.DeviceSpec(container_path=f"/dev/{name}", host_path=f"/dev/{name}", permissions="rw")
        for name in names
        if (dev_root / name).exists()
    ]
    return api.ContainerAllocateResponse(envs=envs, devices=specs)


def gpus_by_uuid(inventory: GPUNodeInventory) -> Mapping[str, Granted]:
    """Every GPU and MIG device of the node by UUID (no VRAM limit)."""
    out: dict[str, Granted] = {}
    for gpu in inventory.gpus:
        out[gpu.uuid] = Granted(gpu)
        for dev in gpu.mig_devices:
            out[dev.uuid] = Granted(gpu, dev)
    return out
