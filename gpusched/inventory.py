"""The GPU inventory a node publishes: the one format the scheduler reads.

Every GPU node publishes one cluster-scoped ``GPUNodeInventory`` custom resource
(``gpusched.io/v1alpha1``, plural ``gpunodeinventories``, short name ``gni``) named after the
node and owned by it (an ownerReference to the Node, so deleting the Node garbage-collects
it). Either the node agent writes it from NVML or the simulated fleet (:mod:`gpusched.sim.fleet`)
writes it; ``spec.source`` says which, and nothing else differs, so the scheduler cannot tell
a simulated node from a real one. The CRD lives in ``gpusched/crds/`` and a test keeps its
schema and these models in step.

Spec (wire names; all required unless marked optional)::

    nodeName            the Node's name (== metadata.name)
    source              "nvml" | "simulated"
    driverVersion       NVIDIA driver, e.g. "550.127.05" (nvmlSystemGetDriverVersion)
    cudaDriverVersion   CUDA version the driver supports, e.g. "12.4"
                        (nvmlSystemGetCudaDriverVersion 12040, as nvidia-smi prints it)
    gpus[]              one per GPU, ordered by index, indices 0..n-1 (NVML order)
      index             NVML index
      uuid              "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (nvmlDeviceGetUUID)
      product           NVML name, e.g. "NVIDIA H100 80GB HBM3" (nvmlDeviceGetName)
      memoryMiB         total framebuffer in MiB, e.g. 81559 (nvmlDeviceGetMemoryInfo)
      pciBusId          e.g. "00000000:18:00.0" (nvmlDeviceGetPciInfo busId)
      numaNode          optional; NUMA node of the GPU's PCIe root
      minorNumber       optional; the driver's minor number: N of /dev/nvidiaN
                        (nvmlDeviceGetMinorNumber)
      migEnabled        MIG mode is on (nvmlDeviceGetMigMode current)
      health            optional, "Healthy" (default) | "Unhealthy", as the device plugin
                        API's ListAndWatch says it (XID errors, ECC, lost GPU); an unhealthy
                        GPU and its MIG devices take no new pod, the pods on it keep it
      healthReason      optional; why, e.g. "XID 79 (GPU has fallen off the bus)"
      migDevices[]      optional, empty unless migEnabled; one per MIG device
        uuid            "MIG-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (R470+ format)
        profile         e.g. "1g.10gb", "3g.40gb", "1c.3g.40gb", "1g.10gb+me"
        memoryMiB       the device's memory, e.g. 9984 for an H100 1g.10gb
        gpuInstanceId   GPU instance id
        computeInstanceId  compute instance id within the GPU instance
        placementStart  first memory slice of the GPU instance (nvidia-smi mig -lgi Start)
        placementSize   memory slices it spans (Size); 8 slices on A100/H100/H200
    links[]             optional for a single GPU, else one per GPU pair, exactly once
      a, b              GPU indices, a < b
      type              "NVLink" if nvlinks > 0 else "PCIe" (redundant, checked; it is what
                        nvidia-smi topo -m shows first: NV# or the PCIe level)
      nvlinks           NVLinks joining the pair (nvmlDeviceGetNvLinkState +
                        nvmlDeviceGetNvLinkRemotePciInfo); NVSwitch pairs report the GPU's
                        full count, as nvidia-smi's NV18
      pcie              closest common PCIe ancestor (nvmlDeviceGetTopologyCommonAncestor),
                        named as nvidia-smi names it: PIX | PXB | PHB | NODE | SYS

Status (optional; telemetry, written through the ``status`` subresource by whoever measures it:
the node agent from NVML, the simulated kubelets in the simulation; the scheduler places by its
own reservations and never reads it, so a stale or missing status changes no placement)::

    observedTime        RFC 3339 time of the reading
    usedMemoryMiB       framebuffer in use over the node's GPUs (a printer column)
    gpus[]              one per GPU read, by index
      index             NVML index
      usedMemoryMiB     nvmlDeviceGetMemoryInfo used
      utilizationPercent  nvmlDeviceGetUtilizationRates gpu, 0..100
      temperatureC      optional; nvmlDeviceGetTemperature (GPU die)

Node labels and extended resources are derived from the inventory, as NVIDIA's GPU feature
discovery and device plugin would set them with ``--mig-strategy=mixed``:

- labels (:func:`node_labels`): ``nvidia.com/gpu.present``, ``gpu.count``, ``gpu.product``,
  ``gpu.memory`` (MiB), ``cuda.driver.major|minor|rev``, ``cuda.runtime.major|minor``, and on
  nodes with a MIG-enabled GPU ``nvidia.com/mig.strategy=mixed`` plus, per MIG profile,
  ``nvidia.com/mig-<profile>.count|memory|slices.gi|slices.ci|product``. ``gpu.count`` counts
  physical GPUs. Product and memory are GPU 0's (GFD assumes a node's GPUs match).
- resources (:func:`node_extended_resources`), MIG *mixed* strategy: ``nvidia.com/gpu`` is
  the number of GPUs with MIG disabled, always present (``"0"`` on an all-MIG node, as the
  device plugin reports it); every MIG device is advertised under its profile's own
  resource ``nvidia.com/mig-<profile>`` (``+`` becomes ``.``, as the device plugin does), so a
  MIG-enabled GPU never counts as an ``nvidia.com/gpu``. The *single* strategy is not
  offered: it overloads ``nvidia.com/gpu`` and cannot express mixed layouts.

Parsing a stored object (:func:`inventory_from_object`) raises :class:`InventoryError`, a
``ValueError`` naming each bad field by its wire path (``spec.gpus[3].memoryMiB: ...``).
MIG devices are checked against NVIDIA's table for the GPU's product
(:mod:`gpusched.mig_profiles`): a profile the product does not have (``1g.10gb`` on an H200),
a placement the profile cannot take, or more instances or compute slices than the GPU allows
is an error. A product with no table (newer than the table) is taken as reported.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from itertools import combinations
from typing import Annotated, Any, Final, Literal, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from gpusched.mig_profiles import gpu_instance_profile, layout_problems, product_table

__all__ = [
    "API_GROUP",
    "API_VERSION",
    "CRD_NAME",
    "CUDA_VERSION_PATTERN",
    "DRIVER_VERSION_PATTERN",
    "GFD_LABEL_PREFIX",
    "GPU_UUID_PATTERN",
    "KIND",
    "LABEL_CUDA_DRIVER_MAJOR",
    "LABEL_CUDA_DRIVER_MINOR",
    "LABEL_CUDA_DRIVER_REV",
    "LABEL_CUDA_RUNTIME_MAJOR",
    "LABEL_CUDA_RUNTIME_MINOR",
    "LABEL_GPU_COUNT",
    "LABEL_GPU_MEMORY",
    "LABEL_GPU_PRESENT",
    "LABEL_GPU_PRODUCT",
    "LABEL_INVENTORY_GPU_COUNT",
    "LABEL_INVENTORY_GPU_PRODUCT",
    "LABEL_MIG_STRATEGY",
    "MIG_MEMORY_SLICES",
    "MIG_PROFILE_PATTERN",
    "MIG_STRATEGY",
    "MIG_UUID_PATTERN",
    "NODE_NAME_PATTERN",
    "PCIE_LEVEL_NAMES",
    "PCI_BUS_ID_PATTERN",
    "PLURAL",
    "RESOURCE_GPU",
    "RFC3339_PATTERN",
    "SHORT_NAME",
    "VERSION",
    "FrozenList",
    "GPUDevice",
    "GPULink",
    "GPUNodeInventory",
    "GPUNodeInventoryStatus",
    "GPUTelemetry",
    "Health",
    "InventoryError",
    "LinkType",
    "MIGDevice",
    "PCIeLevelName",
    "Source",
    "inventory_from_object",
    "inventory_status_from_object",
    "inventory_status_to_object",
    "inventory_to_object",
    "label_value",
    "mig_label_prefix",
    "mig_resource_name",
    "node_extended_resources",
    "node_labels",
    "validation_problems",
]

# --- Custom resource identity ------------------------------------------------------------

API_GROUP: Final = "gpusched.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{API_GROUP}/{VERSION}"
KIND: Final = "GPUNodeInventory"
PLURAL: Final = "gpunodeinventories"
SHORT_NAME: Final = "gni"
CRD_NAME: Final = f"{PLURAL}.{API_GROUP}"

LABEL_INVENTORY_GPU_COUNT: Final = "gpusched.io/gpu-count"
"""Label on the custom resource itself (printer column, ``kubectl get gni -l``)."""
LABEL_INVENTORY_GPU_PRODUCT: Final = "gpusched.io/gpu-product"
"""Label on the custom resource itself: GPU 0's product as a label value."""

# --- Resource names and GPU feature discovery labels ------------------------------------

RESOURCE_GPU: Final = "nvidia.com/gpu"
"""Extended resource for a whole GPU with MIG disabled."""
MIG_STRATEGY: Final = "mixed"
"""The only MIG strategy gpusched models (see the module docstring)."""
MIG_MEMORY_SLICES: Final = 8
"""Memory slices of a MIG-capable GPU (A100, H100, H200); placements lie within them."""

GFD_LABEL_PREFIX: Final = "nvidia.com/"
LABEL_GPU_PRESENT: Final = "nvidia.com/gpu.present"
LABEL_GPU_COUNT: Final = "nvidia.com/gpu.count"
LABEL_GPU_PRODUCT: Final = "nvidia.com/gpu.product"
LABEL_GPU_MEMORY: Final = "nvidia.com/gpu.memory"
LABEL_MIG_STRATEGY: Final = "nvidia.com/mig.strategy"
LABEL_CUDA_DRIVER_MAJOR: Final = "nvidia.com/cuda.driver.major"
LABEL_CUDA_DRIVER_MINOR: Final = "nvidia.com/cuda.driver.minor"
LABEL_CUDA_DRIVER_REV: Final = "nvidia.com/cuda.driver.rev"
LABEL_CUDA_RUNTIME_MAJOR: Final = "nvidia.com/cuda.runtime.major"
LABEL_CUDA_RUNTIME_MINOR: Final = "nvidia.com/cuda.runtime.minor"


def mig_resource_name(profile: str) -> str:
    """Extended resource of a MIG profile under the mixed strategy.

    ``"1g.10gb"`` -> ``"nvidia.com/mig-1g.10gb"``;
    ``"1g.10gb+me"`` -> ``"nvidia.com/mig-1g.10gb.me"`` (the device plugin turns ``+``, not
    allowed in resource names, into ``.``).
    """
    return f"nvidia.com/mig-{profile.replace('+', '.')}"


def mig_label_prefix(profile: str) -> str:
    """GFD label prefix of a MIG profile, e.g. ``"nvidia.com/mig-1g.10gb"`` (add ``.count``)."""
    return mig_resource_name(profile)


_LABEL_VALUE_BAD = re.compile(r"[^A-Za-z0-9_.-]+")


def label_value(text: str) -> str:
    """``text`` as a valid label value: runs of other characters become ``-``, trimmed to
    start and end alphanumeric, at most 63 characters (GFD writes products this way:
    ``"NVIDIA H100 80GB HBM3"`` -> ``"NVIDIA-H100-80GB-HBM3"``)."""
    value = _LABEL_VALUE_BAD.sub("-", text)[:63]
    return value.strip("-_.")


# --- Models -----------------------------------------------------------------------------

_T = TypeVar("_T")


def _list_to_tuple(value: object) -> object:
    return tuple(value) if isinstance(value, list) else value


FrozenList = Annotated[tuple[_T, ...], BeforeValidator(_list_to_tuple)]
"""A JSON array held as a tuple, so frozen models stay immutable; items stay strict."""

Source = Literal["nvml", "simulated"]
LinkType = Literal["NVLink", "PCIe"]
Health = Literal["Healthy", "Unhealthy"]
PCIeLevelName = Literal["PIX", "PXB", "PHB", "NODE", "SYS"]
PCIE_LEVEL_NAMES: Final[tuple[str, ...]] = ("PIX", "PXB", "PHB", "NODE", "SYS")
"""Same names, best first, as ``gpusched.topology.PCIE_LEVELS`` (a test checks)."""

_HEX_UUID = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
GPU_UUID_PATTERN: Final = f"^GPU-{_HEX_UUID}$"
MIG_UUID_PATTERN: Final = f"^MIG-{_HEX_UUID}$"
PCI_BUS_ID_PATTERN: Final = r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$"
MIG_PROFILE_PATTERN: Final = r"^([0-9]+c\.)?[0-9]+g\.[0-9]+gb([+.-][a-z]+)*$"
DRIVER_VERSION_PATTERN: Final = r"^[0-9]+(\.[0-9]+){1,2}$"
CUDA_VERSION_PATTERN: Final = r"^[0-9]+\.[0-9]+$"
RFC3339_PATTERN: Final = (
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$"
)
NODE_NAME_PATTERN: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


_MIB: Final = "memoryMiB"
"""Wire name of ``memory_mib`` fields (``to_camel`` would give ``memoryMib``). Set as the
validation and serialization alias, not ``alias``, so type checkers accept ``memory_mib=``."""


class _Model(BaseModel):
    """Strict, closed, immutable; Python names snake_case, wire names camelCase."""

    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        frozen=True,
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
    )


class MIGDevice(_Model):
    """One MIG device: a compute instance inside a GPU instance."""

    uuid: str = Field(pattern=MIG_UUID_PATTERN)
    profile: str = Field(pattern=MIG_PROFILE_PATTERN)
    memory_mib: int = Field(ge=1, validation_alias=_MIB, serialization_alias=_MIB)
    gpu_instance_id: int = Field(ge=0)
    compute_instance_id: int = Field(ge=0)
    placement_start: int = Field(ge=0, le=MIG_MEMORY_SLICES - 1)
    placement_size: int = Field(ge=1, le=MIG_MEMORY_SLICES)

    @property
    def placement_end(self) -> int:
        """One past the last memory slice the GPU instance spans."""
        return self.placement_start + self.placement_size


class GPUDevice(_Model):
    """One physical GPU."""

    index: int = Field(ge=0)
    uuid: str = Field(pattern=GPU_UUID_PATTERN)
    product: str = Field(min_length=1, max_length=96)
    memory_mib: int = Field(ge=1, validation_alias=_MIB, serialization_alias=_MIB)
    pci_bus_id: str = Field(pattern=PCI_BUS_ID_PATTERN)
    numa_node: int | None = Field(default=None, ge=0)
    minor_number: int | None = Field(default=None, ge=0)
    """The driver's minor number: the N of ``/dev/nvidiaN`` (not always the NVML index)."""
    mig_enabled: bool
    mig_devices: FrozenList[MIGDevice] = Field(default=(), max_length=16)
    health: Health = "Healthy"
    health_reason: str | None = Field(default=None, max_length=256)

    @property
    def healthy(self) -> bool:
        return self.health == "Healthy"

    @model_validator(mode="after")
    def _check_mig(self) -> GPUDevice:
        if self.mig_devices and not self.mig_enabled:
            raise ValueError("migDevices: must be empty when migEnabled is false")
        by_instance: dict[int, MIGDevice] = {}
        seen_ci: set[tuple[int, int]] = set()
        for i, dev in enumerate(self.mig_devices):
            where = f"migDevices[{i}]"
            if dev.placement_end > MIG_MEMORY_SLICES:
                raise ValueError(
                    f"{where}: placement {dev.placement_start}+{dev.placement_size} "
                    f"runs past the GPU's {MIG_MEMORY_SLICES} memory slices"
                )
            key = (dev.gpu_instance_id, dev.compute_instance_id)
            if key in seen_ci:
                raise ValueError(
                    f"{where}: gpuInstanceId {key[0]} computeInstanceId {key[1]} "
                    "is given more than once"
                )
            seen_ci.add(key)
            first = by_instance.setdefault(dev.gpu_instance_id, dev)
            if (first.placement_start, first.placement_size) != (
                dev.placement_start,
                dev.placement_size,
            ):
                raise ValueError(
                    f"{where}: gpuInstanceId {dev.gpu_instance_id} is given two placements"
                )
        for x, y in combinations(by_instance.values(), 2):
            if x.placement_start < y.placement_end and y.placement_start < x.placement_end:
                raise ValueError(
                    f"migDevices: GPU instances {x.gpu_instance_id} and {y.gpu_instance_id} "
                    "have overlapping placements"
                )
        self._check_mig_profiles(by_instance)
        return self

    def _check_mig_profiles(self, by_instance: dict[int, MIGDevice]) -> None:
        """Profiles and placements against NVIDIA's table for this product
        (:mod:`gpusched.mig_profiles`); a product without a table is not checked."""
        table = product_table(self.product)
        if table is None:
            return
        fix = (
            "the node agent must report the profile names NVML gives "
            "(nvidia-smi mig -lgi), or gpus[].product is wrong"
        )
        for i, dev in enumerate(self.mig_devices):
            name = gpu_instance_profile(dev.profile)
            found = table.profiles.get(name)
            if found is None:
                raise ValueError(
                    f"migDevices[{i}].profile: {self.product} ({table.family}) has no MIG "
                    f"profile {name!r}; its profiles are {', '.join(table.profiles)}; {fix}"
                )
            if dev.placement_size != found.memory_slices or dev.placement_start not in found.starts:
                starts = ", ".join(map(str, found.starts))
                raise ValueError(
                    f"migDevices[{i}]: on {self.product} a {found.name} spans "
                    f"{found.memory_slices} memory slices starting at {starts}; "
                    f"got {dev.placement_start}+{dev.placement_size}; {fix}"
                )
        instances = [
            (gpu_instance_profile(dev.profile), dev.placement_start) for dev in by_instance.values()
        ]
        problems = layout_problems(self.product, instances)
        if problems:
            raise ValueError(f"migDevices: {'; '.join(problems)}; {fix}")


class GPULink(_Model):
    """How GPUs ``a`` and ``b`` of one node are connected (see the module docstring)."""

    a: int = Field(ge=0)
    b: int = Field(ge=0)
    type: LinkType
    nvlinks: int = Field(ge=0)
    pcie: PCIeLevelName

    @model_validator(mode="after")
    def _check(self) -> GPULink:
        if self.a >= self.b:
            raise ValueError(f"a must be less than b, got a={self.a} b={self.b}")
        expected = "NVLink" if self.nvlinks > 0 else "PCIe"
        if self.type != expected:
            raise ValueError(
                f"type: {self.type!r} does not match nvlinks={self.nvlinks} (expected {expected!r})"
            )
        return self


class GPUNodeInventory(_Model):
    """The spec of a ``GPUNodeInventory``: everything the scheduler knows of a node's GPUs."""

    node_name: str = Field(max_length=253, pattern=NODE_NAME_PATTERN)
    source: Source
    driver_version: str = Field(pattern=DRIVER_VERSION_PATTERN)
    cuda_driver_version: str = Field(pattern=CUDA_VERSION_PATTERN)
    gpus: FrozenList[GPUDevice] = Field(max_length=64)
    links: FrozenList[GPULink] = Field(default=(), max_length=64 * 63 // 2)

    @field_validator("gpus")
    @classmethod
    def _check_indices(cls, gpus: tuple[GPUDevice, ...]) -> tuple[GPUDevice, ...]:
        for position, gpu in enumerate(gpus):
            if gpu.index != position:
                raise ValueError(
                    f"[{position}].index: expected {position} "
                    f"(GPUs are listed by index, 0..n-1), got {gpu.index}"
                )
        return gpus

    @model_validator(mode="after")
    def _check_node(self) -> GPUNodeInventory:
        uuids = Counter(gpu.uuid for gpu in self.gpus)
        uuids.update(dev.uuid for gpu in self.gpus for dev in gpu.mig_devices)
        duplicates = sorted(uuid for uuid, n in uuids.items() if n > 1)
        if duplicates:
            raise ValueError(f"gpus: UUIDs given more than once: {', '.join(duplicates)}")
        count = len(self.gpus)
        seen: set[tuple[int, int]] = set()
        for i, link in enumerate(self.links):
            if link.b >= count:
                raise ValueError(f"links[{i}].b: GPU {link.b} does not exist ({count} GPUs)")
            if (link.a, link.b) in seen:
                raise ValueError(f"links[{i}]: pair {link.a}-{link.b} is given more than once")
            seen.add((link.a, link.b))
        missing = [f"{a}-{b}" for a, b in combinations(range(count), 2) if (a, b) not in seen]
        if missing:
            shown = ", ".join(missing[:8]) + (" ..." if len(missing) > 8 else "")
            raise ValueError(f"links: every GPU pair needs a link; missing {shown}")
        return self

    @property
    def full_gpus(self) -> tuple[GPUDevice, ...]:
        """GPUs with MIG disabled: what ``nvidia.com/gpu`` counts."""
        return tuple(gpu for gpu in self.gpus if not gpu.mig_enabled)

    def mig_profiles(self) -> dict[str, int]:
        """MIG devices per profile over the node, profiles sorted."""
        counts = Counter(dev.profile for gpu in self.gpus for dev in gpu.mig_devices)
        return dict(sorted(counts.items()))


# --- Errors -----------------------------------------------------------------------------


class InventoryError(ValueError):
    """A ``GPUNodeInventory`` object is malformed; ``problems`` names each bad field."""

    def __init__(self, name: str, problems: list[str]) -> None:
        self.name = name
        self.problems = tuple(problems)
        super().__init__(f"GPUNodeInventory {name!r}: " + "; ".join(problems))


class GPUTelemetry(_Model):
    """One GPU's measured use (``status.gpus[]``)."""

    index: int = Field(ge=0)
    used_memory_mib: int = Field(
        ge=0, validation_alias="usedMemoryMiB", serialization_alias="usedMemoryMiB"
    )
    utilization_percent: int = Field(ge=0, le=100)
    temperature_c: int | None = Field(
        default=None,
        ge=-50,
        le=200,
        validation_alias="temperatureC",
        serialization_alias="temperatureC",
    )


class GPUNodeInventoryStatus(_Model):
    """The status of a ``GPUNodeInventory``: telemetry (module docstring)."""

    observed_time: str = Field(pattern=RFC3339_PATTERN)
    used_memory_mib: int = Field(
        ge=0, validation_alias="usedMemoryMiB", serialization_alias="usedMemoryMiB"
    )
    gpus: FrozenList[GPUTelemetry] = Field(default=(), max_length=64)

    @model_validator(mode="after")
    def _check(self) -> GPUNodeInventoryStatus:
        indices = [g.index for g in self.gpus]
        if len(set(indices)) != len(indices):
            raise ValueError("gpus: a GPU index is given more than once")
        total = sum(g.used_memory_mib for g in self.gpus)
        if self.gpus and total != self.used_memory_mib:
            raise ValueError(f"usedMemoryMiB: {self.used_memory_mib} is not the GPUs' sum {total}")
        return self

    @classmethod
    def of(cls, observed_time: str, gpus: Sequence[GPUTelemetry]) -> GPUNodeInventoryStatus:
        """A status with its total filled in."""
        total = sum(g.used_memory_mib for g in gpus)
        return cls(observed_time=observed_time, used_memory_mib=total, gpus=tuple(gpus))


def _format_loc(prefix: str, loc: tuple[int | str, ...]) -> str:
    path = prefix
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else part
    return path


# Validators word their messages "<relative.path>: what is wrong" (``migDevices[1]: ...``,
# ``[3].index: ...``) so the path can be joined to where pydantic reports the error.
_RELATIVE_PATH = re.compile(r"^(\[\d+\]|[A-Za-z]\w*)[\w.\[\]]*(?=: )")


def validation_problems(exc: ValidationError, prefix: str = "") -> list[str]:
    """One line per error of ``exc``: its wire path (under ``prefix``), what is wrong and,
    for a bad scalar, the value given: ``spec.gpus[3].memoryMiB: ... (got 0)``."""
    problems = []
    for err in exc.errors(include_url=False):
        path = _format_loc(prefix, tuple(err["loc"]))
        msg = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] == "value_error" and (match := _RELATIVE_PATH.match(msg)):
            rel = match.group(0)
            path = path + rel if rel.startswith("[") or not path else f"{path}.{rel}"
            msg = msg[match.end() + 2 :]
        value = err.get("input")
        if err["type"] not in ("value_error", "missing") and isinstance(
            value, str | int | float | bool
        ):
            msg += f" (got {value!r})"
        problems.append(f"{path}: {msg}")
    return problems


# --- Object conversion ------------------------------------------------------------------


def inventory_to_object(inv: GPUNodeInventory, node_uid: str) -> dict[str, Any]:
    """The full ``GPUNodeInventory`` custom resource for ``inv``, owned by its Node.

    ``node_uid`` is the Node's ``metadata.uid``; the ownerReference lets the garbage collector
    delete the inventory with the Node. The object carries two labels for ``kubectl``
    (:data:`LABEL_INVENTORY_GPU_COUNT`, :data:`LABEL_INVENTORY_GPU_PRODUCT`); they are derived
    and ignored on read.
    """
    labels = {LABEL_INVENTORY_GPU_COUNT: str(len(inv.gpus))}
    if inv.gpus:
        labels[LABEL_INVENTORY_GPU_PRODUCT] = label_value(inv.gpus[0].product)
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": inv.node_name,
            "labels": labels,
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": inv.node_name, "uid": node_uid}
            ],
        },
        "spec": _spec_object(inv),
    }


def _spec_object(inv: GPUNodeInventory) -> dict[str, Any]:
    """The wire spec; ``health`` only where a GPU is not healthy (the default), so a healthy
    fleet's objects are what they were before the field existed."""
    spec = inv.model_dump(mode="json", by_alias=True, exclude_none=True)
    for gpu in spec["gpus"]:
        if gpu.get("health") == "Healthy":
            del gpu["health"]
    return spec


def inventory_from_object(obj: Mapping[str, Any]) -> GPUNodeInventory:
    """Parse a stored ``GPUNodeInventory`` object (a dict as the API server returns it).

    Raises :class:`InventoryError` naming every bad field by its path in the object, e.g.
    ``spec.gpus[3].memoryMiB: Input should be greater than or equal to 1 (got 0)``.
    """
    if not isinstance(obj, Mapping):
        raise InventoryError("?", [f"expected an object, got {type(obj).__name__}"])
    metadata = obj.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    shown = name if isinstance(name, str) else "?"
    problems = []
    if obj.get("apiVersion") != API_VERSION:
        problems.append(f"apiVersion: expected {API_VERSION!r}, got {obj.get('apiVersion')!r}")
    if obj.get("kind") != KIND:
        problems.append(f"kind: expected {KIND!r}, got {obj.get('kind')!r}")
    if not isinstance(name, str) or not name:
        problems.append("metadata.name: missing")
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        problems.append(f"spec: expected an object, got {type(spec).__name__}")
        raise InventoryError(shown, problems)
    try:
        inv = GPUNodeInventory.model_validate(dict(spec))
    except ValidationError as exc:
        raise InventoryError(shown, [*problems, *validation_problems(exc, "spec")]) from None
    if isinstance(name, str) and name and inv.node_name != name:
        problems.append(f"spec.nodeName: {inv.node_name!r} does not match metadata.name")
    if problems:
        raise InventoryError(shown, problems)
    return inv


def inventory_status_from_object(obj: Mapping[str, Any]) -> GPUNodeInventoryStatus | None:
    """The telemetry of a stored ``GPUNodeInventory``; ``None`` when it has no status yet.

    Raises :class:`InventoryError` naming every bad field (``status.gpus[0].utilizationPercent:
    ...``). Checked against the spec's GPU count when the spec parses.
    """
    metadata = obj.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    shown = name if isinstance(name, str) else "?"
    status = obj.get("status")
    if status is None:
        return None
    if not isinstance(status, Mapping):
        raise InventoryError(shown, [f"status: expected an object, got {type(status).__name__}"])
    try:
        parsed = GPUNodeInventoryStatus.model_validate(dict(status))
    except ValidationError as exc:
        raise InventoryError(shown, validation_problems(exc, "status")) from None
    spec = obj.get("spec")
    gpus = spec.get("gpus") if isinstance(spec, Mapping) else None
    if isinstance(gpus, list):
        beyond = [g.index for g in parsed.gpus if g.index >= len(gpus)]
        if beyond:
            raise InventoryError(
                shown, [f"status.gpus: GPU {beyond[0]} does not exist ({len(gpus)} GPUs)"]
            )
    return parsed


def inventory_status_to_object(status: GPUNodeInventoryStatus) -> dict[str, Any]:
    """``status`` as the ``status`` stanza to write through the ``/status`` subresource."""
    return status.model_dump(mode="json", by_alias=True, exclude_none=True)


# --- What a node advertises ---------------------------------------------------------------


def node_extended_resources(inv: GPUNodeInventory) -> dict[str, str]:
    """Node capacity entries for the GPUs, MIG *mixed* strategy (see the module docstring).

    ``{"nvidia.com/gpu": "<GPUs with MIG off>", "nvidia.com/mig-<profile>": "<devices>", ...}``;
    ``nvidia.com/gpu`` is always present.
    """
    resources = {RESOURCE_GPU: str(len(inv.full_gpus))}
    for profile, count in inv.mig_profiles().items():
        resources[mig_resource_name(profile)] = str(count)
    return resources


def _version_parts(version: str, width: int) -> list[str]:
    parts = version.split(".")
    return (parts + [""] * width)[:width]


_PROFILE_SLICES = re.compile(r"^(?:(\d+)c\.)?(\d+)g\.")


def _slices(profile: str) -> tuple[int, int]:
    """(GPU-instance slices, compute-instance slices) of a profile: ``1c.3g.40gb`` -> (3, 1)."""
    match = _PROFILE_SLICES.match(profile)
    if match is None:  # unreachable for a validated profile
        raise ValueError(f"not a MIG profile: {profile!r}")
    gi = int(match.group(2))
    return gi, int(match.group(1) or gi)


def node_labels(inv: GPUNodeInventory) -> dict[str, str]:
    """GPU feature discovery labels for the node (mixed MIG strategy), sorted by key."""
    labels: dict[str, str] = {LABEL_GPU_COUNT: str(len(inv.gpus))}
    if inv.gpus:
        first = inv.gpus[0]
        labels[LABEL_GPU_PRESENT] = "true"
        labels[LABEL_GPU_PRODUCT] = label_value(first.product)
        labels[LABEL_GPU_MEMORY] = str(first.memory_mib)
    major, minor, rev = _version_parts(inv.driver_version, 3)
    labels[LABEL_CUDA_DRIVER_MAJOR] = major
    labels[LABEL_CUDA_DRIVER_MINOR] = minor
    labels[LABEL_CUDA_DRIVER_REV] = rev
    cuda_major, cuda_minor = _version_parts(inv.cuda_driver_version, 2)
    labels[LABEL_CUDA_RUNTIME_MAJOR] = cuda_major
    labels[LABEL_CUDA_RUNTIME_MINOR] = cuda_minor
    if any(gpu.mig_enabled for gpu in inv.gpus):
        labels[LABEL_MIG_STRATEGY] = MIG_STRATEGY
        memory: dict[str, int] = {}
        product: dict[str, str] = {}
        for gpu in inv.gpus:
            for dev in gpu.mig_devices:
                memory.setdefault(dev.profile, dev.memory_mib)
                product.setdefault(dev.profile, label_value(f"{gpu.product}-MIG-{dev.profile}"))
        for profile, count in inv.mig_profiles().items():
            prefix = mig_label_prefix(profile)
            gi, ci = _slices(profile)
            labels[f"{prefix}.count"] = str(count)
            labels[f"{prefix}.memory"] = str(memory[profile])
            labels[f"{prefix}.product"] = product[profile]
            labels[f"{prefix}.slices.gi"] = str(gi)
            labels[f"{prefix}.slices.ci"] = str(ci)
    return dict(sorted(labels.items()))
