"""GPUs published for DRA the way NVIDIA's DRA driver (``NVIDIA/k8s-dra-driver-gpu``) does.

The driver's kubelet plugin publishes one ResourceSlice per node for its driver
``gpu.nvidia.com``: pool = the node's name, ``nodeName`` = the node, one device per GPU with MIG
off, named ``gpu-<minor>``, and with MIG on one device per MIG device instead (the GPU itself
is not offered), named ``gpu-<minor>-mig-<GI profile id>-<placement start>-<size>``. Attributes,
as its ``GpuInfo.Attributes`` / ``CommonAttributesMig`` publish them today (no ``index`` or
``minor`` since 2025-09; unqualified names are in the driver's domain): ``type`` (``gpu`` /
``mig``), ``uuid``, ``productName``, ``brand``, ``architecture``, ``cudaComputeCapability``,
``driverVersion`` and ``cudaDriverVersion`` (semver, as the driver writes them: ``550.127.05``
-> ``550.127.5``), and Kubernetes' standard ``resource.kubernetes.io/pciBusID`` (go-nvlib's
form, ``0000:18:00.0``) and ``resource.kubernetes.io/pcieRoot`` (the PCIe root complex,
``pci<domain>:<bus>``: what ``matchAttribute`` uses to keep devices on one root); MIG
devices add ``parentUUID`` and ``profile`` and carry their GPU's PCI attributes. Capacity
``memory`` (bytes, binary SI), and for MIG devices one ``memorySlice<i>`` per memory slice
the placement spans (what lets an allocator see overlapping placements). The driver's
DeviceClasses ``gpu.nvidia.com`` and ``mig.nvidia.com`` select on ``type``
(:data:`DEVICE_CLASSES`, as its Helm chart installs them).

Differences: the slice's name is ``<node>-gpu.nvidia.com`` (the driver lets the API server
generate one), so that applying a fleet twice replaces it; a GPU is named by its index; the
PCIe root is derived from the inventory's PCIe levels (GPUs joined by ``PIX``, ``PXB`` or
``PHB`` share a root complex, named after the lowest bus behind it, less one), not read from
sysfs; ``addressingMode`` (coherent-memory systems only) is not published; MIG devices carry
no engine or multiprocessor counts (the inventory has none); brand, architecture and compute
capability come from the product name (:func:`product_info`); unhealthy GPUs are published
like healthy ones. Cost: O(devices + links) per node, pure.
"""

from __future__ import annotations

import re
from typing import Any, Final

from gpusched.inventory import MIG_MEMORY_SLICES, GPUDevice, GPUNodeInventory, MIGDevice
from gpusched.mig_profiles import profile

__all__ = [
    "DEVICE_CLASSES",
    "DRIVER",
    "PCIE_ROOT",
    "PCI_BUS_ID",
    "device_name",
    "mig_device_name",
    "pci_bus_id",
    "pcie_roots",
    "product_info",
    "resource_slice",
    "slice_name",
]

DRIVER: Final = "gpu.nvidia.com"
PCI_BUS_ID: Final = "resource.kubernetes.io/pciBusID"
PCIE_ROOT: Final = "resource.kubernetes.io/pcieRoot"
"""Kubernetes' standard device attributes (``k8s.io/dynamic-resource-allocation/
deviceattribute``), which the driver publishes."""
_PCIE_ROOT_PREFIX: Final = "pci"
_SAME_ROOT: Final = frozenset({"PIX", "PXB", "PHB"})
DEVICE_CLASSES: Final[tuple[dict[str, Any], ...]] = tuple(
    {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {
            "selectors": [
                {
                    "cel": {
                        "expression": f"device.driver == '{DRIVER}' && "
                        f"device.attributes['{DRIVER}'].type == '{kind}'"
                    }
                }
            ]
        },
    }
    for name, kind in (("gpu.nvidia.com", "gpu"), ("mig.nvidia.com", "mig"))
)
"""The DeviceClasses NVIDIA's DRA driver installs."""

# Product name fragment -> (brand, architecture, CUDA compute capability), first match wins.
_PRODUCTS: Final = (
    ("GH200", ("Nvidia", "Hopper", "9.0")),
    ("GB200", ("Nvidia", "Blackwell", "10.0")),
    ("B200", ("Nvidia", "Blackwell", "10.0")),
    ("H100", ("Nvidia", "Hopper", "9.0")),
    ("H200", ("Nvidia", "Hopper", "9.0")),
    ("A100", ("Nvidia", "Ampere", "8.0")),
    ("A30", ("Nvidia", "Ampere", "8.0")),
    ("A40", ("Nvidia", "Ampere", "8.6")),
    ("A10", ("Nvidia", "Ampere", "8.6")),
    ("L40", ("Nvidia", "Ada Lovelace", "8.9")),
    ("L4", ("Nvidia", "Ada Lovelace", "8.9")),
    ("V100", ("Tesla", "Volta", "7.0")),
    ("T4", ("Tesla", "Turing", "7.5")),
)
# GPU instance profile ids as ``nvidia-smi mig -lgip`` lists them, by (compute slices, memory
# slices) on 7-compute-slice products (A100, H100, H200, B200); A30 (4 slices) has its own.
_GI_PROFILE_IDS: Final = {(1, 1): 19, (1, 2): 15, (2, 2): 14, (3, 4): 9, (4, 4): 5, (7, 8): 0}
_GI_PROFILE_IDS_A30: Final = {(1, 1): 14, (2, 2): 5, (4, 4): 0}
_VERSION_PART: Final = re.compile(r"\d+")


def product_info(product: str) -> tuple[str, str, str]:
    """``(brand, architecture, compute capability)`` of an NVML product name; unknown ones get
    ``("Nvidia", "Unknown", "")`` (and no ``cudaComputeCapability`` attribute)."""
    for fragment, info in _PRODUCTS:
        if fragment in product:
            return info
    return ("Nvidia", "Unknown", "")


def _semver(version: str) -> str:
    """What ``semver.MustParse(v).String()`` writes: three numbers, leading zeros dropped."""
    parts = [str(int(p)) for p in _VERSION_PART.findall(version)[:3]]
    return ".".join(parts + ["0"] * (3 - len(parts)))


def _binary_quantity(n: int) -> str:
    for suffix, unit in (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if n % unit == 0:
            return f"{n // unit}{suffix}"
    return str(n)


def device_name(gpu: GPUDevice) -> str:
    return f"gpu-{gpu.index}"


def mig_device_name(gpu: GPUDevice, mig: MIGDevice) -> str:
    p = profile(gpu.product, mig.profile)
    table = _GI_PROFILE_IDS_A30 if "A30" in gpu.product else _GI_PROFILE_IDS
    key = (p.compute_slices, p.memory_slices) if p is not None else (0, mig.placement_size)
    profile_id = table.get(key, mig.placement_size)
    return f"gpu-{gpu.index}-mig-{profile_id}-{mig.placement_start}-{mig.placement_size}"


def slice_name(node: str) -> str:
    return f"{node}-{DRIVER}"


def pci_bus_id(gpu: GPUDevice) -> str:
    """go-nvlib's ``GetPCIBusID``: NVML's bus id, lower case, a 4-digit domain."""
    text = gpu.pci_bus_id.lower()
    return text.removeprefix("0000") if len(text.split(":")[0]) == 8 else text


def pcie_roots(inventory: GPUNodeInventory) -> dict[int, str]:
    """GPU index -> its PCIe root complex (``pci<domain>:<bus>``), GPUs that reach each
    other below a host bridge (``PIX``, ``PXB``, ``PHB``) sharing one. O(GPUs + links)."""
    parent = {gpu.index: gpu.index for gpu in inventory.gpus}

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for link in inventory.links:
        if link.pcie in _SAME_ROOT and link.a in parent and link.b in parent:
            parent[find(link.a)] = find(link.b)
    members: dict[int, list[GPUDevice]] = {}
    for gpu in inventory.gpus:
        members.setdefault(find(gpu.index), []).append(gpu)
    roots: dict[int, str] = {}
    for group in members.values():
        domain, bus = min(tuple(pci_bus_id(g).split(":")[:2]) for g in group)
        name = f"{_PCIE_ROOT_PREFIX}{domain}:{max(int(bus, 16) - 1, 0):02x}"
        roots.update({g.index: name for g in group})
    return roots


def _common(gpu: GPUDevice, inventory: GPUNodeInventory, kind: str, root: str) -> dict[str, Any]:
    brand, architecture, capability = product_info(gpu.product)
    attrs: dict[str, Any] = {
        "type": {"string": kind},
        "productName": {"string": gpu.product},
        "brand": {"string": brand},
        "architecture": {"string": architecture},
        "driverVersion": {"version": _semver(inventory.driver_version)},
        "cudaDriverVersion": {"version": _semver(inventory.cuda_driver_version)},
        PCI_BUS_ID: {"string": pci_bus_id(gpu)},
        PCIE_ROOT: {"string": root},
    }
    if capability:
        attrs["cudaComputeCapability"] = {"version": _semver(capability)}
    return attrs


def _gpu_device(gpu: GPUDevice, inventory: GPUNodeInventory, root: str) -> dict[str, Any]:
    attrs = _common(gpu, inventory, "gpu", root)
    attrs["uuid"] = {"string": gpu.uuid}
    return {
        "name": device_name(gpu),
        "attributes": dict(sorted(attrs.items())),
        "capacity": {"memory": {"value": _binary_quantity(gpu.memory_mib << 20)}},
    }


def _mig_device(
    gpu: GPUDevice, mig: MIGDevice, inventory: GPUNodeInventory, root: str
) -> dict[str, Any]:
    """As the driver's ``MigDeviceInfo.GetDevice``: its GPU's attributes, its own UUID, the
    GPU's as ``parentUUID``, its ``profile``."""
    attrs = _common(gpu, inventory, "mig", root)
    attrs["uuid"] = {"string": mig.uuid}
    attrs["parentUUID"] = {"string": gpu.uuid}
    attrs["profile"] = {"string": mig.profile}
    capacity: dict[str, Any] = {"memory": {"value": _binary_quantity(mig.memory_mib << 20)}}
    for i in range(mig.placement_start, min(mig.placement_end, MIG_MEMORY_SLICES)):
        capacity[f"memorySlice{i}"] = {"value": "1"}
    return {
        "name": mig_device_name(gpu, mig),
        "attributes": dict(sorted(attrs.items())),
        "capacity": capacity,
    }


def resource_slice(inventory: GPUNodeInventory, generation: int = 1) -> dict[str, Any]:
    """The ResourceSlice NVIDIA's driver publishes for the node of ``inventory``."""
    devices: list[dict[str, Any]] = []
    roots = pcie_roots(inventory)
    for gpu in inventory.gpus:
        root = roots[gpu.index]
        if gpu.mig_enabled:
            devices.extend(_mig_device(gpu, mig, inventory, root) for mig in gpu.mig_devices)
        else:
            devices.append(_gpu_device(gpu, inventory, root))
    node = inventory.node_name
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": slice_name(node)},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": devices,
        },
    }
