"""Simulated GPU fleets: cluster specs in YAML, built into Nodes and GPU inventories.

A *cluster spec* (:class:`ClusterSpec`, YAML in ``gpusched/sim/clusters/``) lists pools of
identical nodes: count, labels, taints, CPU and memory, and GPUs (product, memory, count,
topology, optional MIG layout). :func:`build_fleet` turns it into :class:`SimNode` records,
each with the v1 ``Node`` a kubelet would report (GPU feature discovery labels, taints,
``nvidia.com/gpu`` or MIG capacity, Ready conditions, nodeInfo ``v1.32.0-gpusched-sim``) and
its ``GPUNodeInventory`` (``source: simulated``, deterministic NVML-style UUIDs). The Node's
GPU fields are derived from the inventory by the functions a real node uses
(:func:`gpusched.inventory.node_labels`, :func:`gpusched.inventory.node_extended_resources`),
so a scheduler sees one format. What the Node advertises is what the real node's device
plugins would register: the NVIDIA device plugin's ``nvidia.com/gpu`` and MIG resources, and
the gpusched node agent's ``gpusched.io/gpu``, one device per client slot of every GPU with
MIG off (:data:`SHARED_CLIENTS_PER_GPU` slots per GPU, HAMi's default ``deviceSplitCount``
design: its plugin registers ``nvidia.com/gpu`` as GPUs x split count), so the kubelet's
device manager admits at most that many shared clients per node. The agent registers the same
slots as ``woolyai.com/gpu`` (:data:`RESOURCE_WOOLYAI_GPU`), the resource WoolyAI's pods ask
for, so that their manifests are admitted unchanged. ``gpusched.io/vram`` is not
advertised: a device plugin counts devices, not bytes, and a per-GPU byte count cannot be a
node-wide device count; as HAMi leaves ``nvidia.com/gpumem`` unadvertised, the kubelet then
drops it from its admission check (``removeMissingExtendedResources``) and VRAM is counted by
the scheduler alone. ``load_cluster_spec(name, nodes=N)`` rescales a spec to N
nodes (largest remainder across pools), so one shipped spec serves any scale.

:func:`apply_fleet` writes a fleet to any API server, real or simulated: the CRD (waiting for
Established), then per node, concurrently (32 at a time), the Node (on 409 its labels and
taints are merge-patched), its ``status``, and the inventory owned by the Node; it is
idempotent, and :func:`delete_fleet` removes what it wrote. These and :func:`ensure_crd` are
the only functions that talk to the API, in raw JSON so that no client model validation
stands between them and a minimal server. Topology presets are described at
:data:`TOPOLOGY_PRESETS`, MIG placement at :data:`MIG_PROFILES`.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import hashlib
import ipaddress
import json
import os
import re
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, Literal

import yaml
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from gpusched.inventory import (
    API_GROUP,
    CRD_NAME,
    GFD_LABEL_PREFIX,
    MIG_MEMORY_SLICES,
    PLURAL,
    VERSION,
    FrozenList,
    GPUDevice,
    GPULink,
    GPUNodeInventory,
    MIGDevice,
    PCIeLevelName,
    inventory_to_object,
    node_extended_resources,
    node_labels,
    validation_problems,
)
from gpusched.mig_profiles import MIG_PRODUCTS, MIGProfile, place, product_table
from gpusched.sim import resource_slices
from gpusched.sim.kubelet import SIMULATED_NODE_LABEL

__all__ = [
    "CRD_DIGEST_ANNOTATION",
    "KUBELET_VERSION",
    "LABEL_POOL",
    "MIG_PROFILES",
    "RESOURCE_SHARED_GPU",
    "RESOURCE_WOOLYAI_GPU",
    "SHARED_CLIENTS_PER_GPU",
    "TOPOLOGY_PRESETS",
    "ClusterSpec",
    "ClusterSpecError",
    "FleetError",
    "GPUSpec",
    "LinkSpec",
    "MIGPlacement",
    "MIGProfile",
    "PoolSpec",
    "SimNode",
    "TaintSpec",
    "apply_fleet",
    "build_fleet",
    "delete_fleet",
    "ensure_crd",
    "load_cluster_spec",
    "load_crd",
    "node_names",
    "place_mig",
    "pool_node_names",
    "shipped_clusters",
]

KUBELET_VERSION: Final = "v1.32.0-gpusched-sim"
RESOURCE_SHARED_GPU: Final = "gpusched.io/gpu"
"""The extended resource a shared-GPU pod asks for; the node agent's device plugin
advertises GPUs-with-MIG-off x :data:`SHARED_CLIENTS_PER_GPU` of it."""
RESOURCE_WOOLYAI_GPU: Final = "woolyai.com/gpu"
"""WoolyAI's shared-GPU resource: advertised like :data:`RESOURCE_SHARED_GPU`, the same slots."""
SHARED_CLIENTS_PER_GPU: Final = 10
"""Client slots per GPU the node agent advertises: the default limit of clients per GPU
(HAMi's default split count, issue 10), used when no policy says otherwise."""
LABEL_POOL: Final = "gpusched.io/pool"
"""Label on every simulated Node naming its pool."""
CRD_DIGEST_ANNOTATION: Final = "gpusched.io/crd-digest"
"""Annotation :func:`ensure_crd` puts on the CRD: sha256 of the packaged YAML."""

TOPOLOGY_PRESETS: Final = ("nvswitch", "dgx1-hybrid-cube-mesh", "bridged-pairs", "pcie")
"""Named ``gpu.topology`` layouts (else an explicit list of ``{a, b, nvlinks, pcie}`` covering
every pair once); PCIe levels as ``nvidia-smi topo -m`` names them.

``nvswitch``: every pair ``NV<n>`` (``gpu.nvlinks``, default 18 as on DGX H100); PCIe ``NODE``
within a NUMA node, ``SYS`` across; the first half of the GPUs on NUMA 0.
``dgx1-hybrid-cube-mesh``: 8 V100s of a DGX-1 (NVLink 2, 6 links per GPU, the matrix at
``_DGX1_NVLINKS``); PCIe ``PIX`` for 0-1, 2-3, 4-5, 6-7, ``PHB`` within a quad, ``SYS`` across.
``bridged-pairs``: PCIe cards joined in pairs (0-1, 2-3, ...) by NVLink bridges, ``NV<n>``
(default 4, as A40 / RTX A6000 bridges report); PCIe ``PIX`` within a pair, ``NODE`` within a
NUMA node, ``SYS`` across.
``pcie``: no NVLink; PCIe as for ``bridged-pairs``.
"""
_NVLINK_DEFAULTS: Final = {"nvswitch": 18, "bridged-pairs": 4}

# --- MIG placement -------------------------------------------------------------------------
# The tables live in gpusched.mig_profiles (NVIDIA's per-product tables); here a layout
# becomes the GPU instances a simulated node reports.

MIG_PROFILES: Final[Mapping[str, Mapping[str, MIGProfile]]] = MappingProxyType(
    {name: product.profiles for name, product in MIG_PRODUCTS.items()}
)
"""MIG profiles by NVML product name, for the products the simulator can partition
(:data:`gpusched.mig_profiles.MIG_PRODUCTS`).

A layout (``gpu.mig``: profiles applied to every card) is placed as NVML places it, from the
profile's starts and size; one that cannot be placed is a spec error. GPU instance ids follow
the driver's heap numbering (on 8 memory slices: 7g = 0; 4g/3g at 0 or 4 = 1, 2; 2-slice
profiles at 0, 2, 4, 6 = 3..6; 1-slice at 0..6 = 7..13); the compute instance is 0.
"""


@dataclass(frozen=True, slots=True)
class MIGPlacement:
    """Where one profile of a layout landed on a GPU of ``gpu_slices`` memory slices."""

    profile: str
    memory_mib: int
    start: int
    size: int
    gpu_slices: int = MIG_MEMORY_SLICES

    @property
    def gpu_instance_id(self) -> int:
        """The driver's heap-style GPU instance id for this placement."""
        level = (self.gpu_slices // self.size).bit_length() - 1
        return (1 << level) - 1 + self.start // self.size


def place_mig(product: str, layout: Sequence[str]) -> tuple[MIGPlacement, ...]:
    """Place ``layout`` (profile names) on one ``product`` GPU, in layout order
    (:func:`gpusched.mig_profiles.place`). Raises ``ValueError`` saying what does not fit."""
    placed = place(product, layout)
    table = product_table(product)
    slices = table.memory_slices if table is not None else MIG_MEMORY_SLICES
    return tuple(
        MIGPlacement(p.profile.name, p.profile.memory_mib, p.start, p.profile.size, slices)
        for p in placed
    )


# --- Cluster spec ---------------------------------------------------------------------------


class ClusterSpecError(ValueError):
    """A cluster spec cannot be found, parsed or validated; the message names file and field."""


class _Spec(BaseModel):
    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        frozen=True,
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
    )


class LinkSpec(_Spec):
    """An explicit GPU pair link in a spec (``type`` is derived from ``nvlinks``)."""

    a: int = Field(ge=0)
    b: int = Field(ge=0)
    nvlinks: int = Field(default=0, ge=0)
    pcie: PCIeLevelName


class TaintSpec(_Spec):
    """A Node taint."""

    key: str = Field(min_length=1, max_length=316)
    value: str = Field(default="", max_length=63)
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class GPUSpec(_Spec):
    """The GPUs of every node in a pool."""

    product: str = Field(min_length=1, max_length=96)
    """NVML product name, e.g. ``NVIDIA H100 80GB HBM3``."""
    memory_mib: int = Field(ge=1, validation_alias="memoryMiB", serialization_alias="memoryMiB")
    """Memory per GPU in MiB as NVML reports it, e.g. 81559."""
    count: int = Field(ge=1, le=16)
    """GPUs per node."""
    topology: str | FrozenList[LinkSpec]
    """A preset name (:data:`TOPOLOGY_PRESETS`) or explicit links for every pair."""
    nvlinks: int | None = Field(default=None, ge=1)
    """NVLinks per pair for ``nvswitch`` (default 18) and ``bridged-pairs`` (default 4)."""
    mig: FrozenList[str] | None = None
    """MIG layout applied to every GPU, e.g. ``[2g.20gb, 2g.20gb, 2g.20gb, 1g.10gb]``."""
    driver_version: str = "550.127.05"
    cuda_driver_version: str = "12.4"

    @model_validator(mode="after")
    def _check(self) -> GPUSpec:
        if isinstance(self.topology, str):
            if self.topology not in TOPOLOGY_PRESETS:
                raise ValueError(
                    f"topology: unknown preset {self.topology!r}; "
                    f"expected one of {', '.join(TOPOLOGY_PRESETS)} or a list of links"
                )
            if self.topology == "dgx1-hybrid-cube-mesh" and self.count != 8:
                raise ValueError(f"count: dgx1-hybrid-cube-mesh has 8 GPUs, got {self.count}")
            if self.topology == "bridged-pairs" and self.count % 2:
                raise ValueError(f"count: bridged-pairs needs an even count, got {self.count}")
            if self.nvlinks is not None and self.topology not in _NVLINK_DEFAULTS:
                raise ValueError(f"nvlinks: not used by the {self.topology} preset")
        else:
            if self.nvlinks is not None:
                raise ValueError("nvlinks: not used with explicit links; give each link's")
            seen: set[tuple[int, int]] = set()
            for i, link in enumerate(self.topology):
                if not link.a < link.b < self.count:
                    raise ValueError(
                        f"topology[{i}]: need a < b < count ({self.count}), "
                        f"got a={link.a} b={link.b}"
                    )
                if (link.a, link.b) in seen:
                    raise ValueError(f"topology[{i}]: pair {link.a}-{link.b} given twice")
                seen.add((link.a, link.b))
            missing = [
                f"{a}-{b}"
                for a in range(self.count)
                for b in range(a + 1, self.count)
                if (a, b) not in seen
            ]
            if missing:
                raise ValueError(f"topology: every GPU pair needs a link; missing {missing}")
        if self.mig is not None:
            try:
                place_mig(self.product, self.mig)
            except ValueError as exc:
                raise ValueError(f"mig: {exc}") from None
        return self


_QUANTITY = re.compile(r"^([1-9][0-9]*)(Ki|Mi|Gi|Ti|Pi)?$")
_BINARY = {None: 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50}
_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


def _bytes(quantity: str) -> int:
    match = _QUANTITY.match(quantity)
    if match is None:  # unreachable after validation
        raise ValueError(f"not a binary quantity: {quantity!r}")
    return int(match.group(1)) * _BINARY[match.group(2)]


class PoolSpec(_Spec):
    """A pool of identical nodes named ``<name>-<n>`` (n zero-padded to at least 3 digits)."""

    name: str = Field(max_length=56, pattern=_DNS_LABEL)
    count: int = Field(ge=0)
    labels: dict[str, str] = Field(default_factory=dict)
    taints: FrozenList[TaintSpec] = ()
    cpu: int = Field(ge=1)
    """Logical CPUs, e.g. 224 for a DGX H100."""
    memory: str = Field(pattern=_QUANTITY.pattern)
    """Memory as a binary quantity, e.g. ``2Ti``; allocatable is 100Mi less (eviction)."""
    ephemeral_storage: str = Field(default="1Ti", pattern=_QUANTITY.pattern)
    """Root filesystem; allocatable is 90% of it (nodefs.available<10%)."""
    pods: int = Field(default=110, ge=1)
    gpu: GPUSpec | None = None

    @model_validator(mode="after")
    def _check(self) -> PoolSpec:
        if _bytes(self.memory) < 1 << 30:
            raise ValueError(f"memory: at least 1Gi, got {self.memory}")
        return self


class ClusterSpec(_Spec):
    """A simulated cluster: pools of nodes."""

    name: str = Field(pattern=_DNS_LABEL)
    description: str = ""
    pools: FrozenList[PoolSpec] = Field(min_length=1)
    dra: bool = False
    """Also publish the GPUs for DRA as NVIDIA's DRA driver does: its DeviceClasses and one
    ``resource.k8s.io/v1`` ResourceSlice per GPU node (:mod:`gpusched.sim.resource_slices`)."""

    @model_validator(mode="after")
    def _check(self) -> ClusterSpec:
        names = [pool.name for pool in self.pools]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"pools: names given more than once: {', '.join(duplicates)}")
        all_nodes = node_names(self)
        if len(set(all_nodes)) != len(all_nodes):
            raise ValueError("pools: two pools produce the same node name; rename a pool")
        return self

    @property
    def node_count(self) -> int:
        """Nodes over all pools."""
        return sum(pool.count for pool in self.pools)

    def with_nodes(self, total: int) -> ClusterSpec:
        """This spec with ``total`` nodes, split across pools in proportion to their counts
        (largest remainder; ties to the earlier pool)."""
        if total < 0:
            raise ValueError(f"nodes must be >= 0, got {total}")
        current = self.node_count
        if current == 0:
            raise ValueError(f"cluster {self.name!r} has no nodes to scale")
        shares = [pool.count * total for pool in self.pools]
        counts = [share // current for share in shares]
        by_remainder = sorted(range(len(shares)), key=lambda i: (-(shares[i] % current), i))
        for i in by_remainder[: total - sum(counts)]:
            counts[i] += 1
        pools = tuple(
            pool.model_copy(update={"count": n}) for pool, n in zip(self.pools, counts, strict=True)
        )
        return self.model_copy(update={"pools": pools})


def pool_node_names(pool: PoolSpec) -> list[str]:
    """Node names of a pool: ``<pool>-000`` ..., zero-padded to at least 3 digits."""
    width = max(3, len(str(max(pool.count - 1, 0))))
    return [f"{pool.name}-{n:0{width}d}" for n in range(pool.count)]


def node_names(spec: ClusterSpec) -> list[str]:
    """Node names over all pools, in pool order."""
    return [name for pool in spec.pools for name in pool_node_names(pool)]


def _clusters_dir() -> Traversable:
    return resources.files("gpusched").joinpath("sim", "clusters")


def shipped_clusters() -> list[str]:
    """Names of the cluster specs shipped in ``gpusched/sim/clusters/``, sorted."""
    return sorted(
        entry.name.removesuffix(".yaml")
        for entry in _clusters_dir().iterdir()
        if entry.name.endswith(".yaml")
    )


def load_cluster_spec(
    name_or_path: str | os.PathLike[str], *, nodes: int | None = None
) -> ClusterSpec:
    """Load a cluster spec by shipped name (``"dgx-h100"``) or from a YAML file path.

    A string without ``/`` that does not end in ``.yaml``/``.yml`` is a shipped name. With
    ``nodes``, the spec is rescaled to that many nodes (:meth:`ClusterSpec.with_nodes`).
    Raises :class:`ClusterSpecError`: an unknown name lists the shipped ones; a YAML or
    validation error names the file and the field (``pools[1].gpu.memoryMiB: ...``).
    """
    text_name = os.fspath(name_or_path)
    is_path = (
        isinstance(name_or_path, os.PathLike)
        or "/" in text_name
        or os.sep in text_name
        or text_name.endswith((".yaml", ".yml"))
    )
    if is_path:
        source = text_name
        try:
            text = Path(text_name).read_text(encoding="utf-8")
        except OSError as exc:
            raise ClusterSpecError(f"{source}: cannot read: {exc.strerror or exc}") from None
    else:
        entry = _clusters_dir().joinpath(f"{text_name}.yaml")
        source = f"gpusched/sim/clusters/{text_name}.yaml"
        if not entry.is_file():
            raise ClusterSpecError(
                f"unknown cluster {text_name!r}; shipped clusters: "
                f"{', '.join(shipped_clusters())} (or give a path to a YAML file)"
            )
        text = entry.read_text(encoding="utf-8")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ClusterSpecError(f"{source}: invalid YAML: {exc}") from None
    try:
        spec = ClusterSpec.model_validate(data)
    except ValidationError as exc:
        raise ClusterSpecError(f"{source}: " + "; ".join(validation_problems(exc))) from None
    if nodes is not None:
        try:
            spec = spec.with_nodes(nodes)
        except ValueError as exc:
            raise ClusterSpecError(f"{source}: {exc}") from None
    return spec


# --- Building the fleet -------------------------------------------------------------------

_UUID_NAMESPACE: Final = uuid.uuid5(uuid.NAMESPACE_DNS, "sim.gpusched.io")

# DGX-1V NVLink counts (NVIDIA go-gpuallocator's NewDGX1VoltaNode fixture, as
# ``nvidia-smi topo -m`` shows them on a DGX-1V) and PCIe bus ids as a DGX-1 enumerates them:
#
#          GPU0 GPU1 GPU2 GPU3 GPU4 GPU5 GPU6 GPU7
#     GPU0  X   NV1  NV1  NV2  NV2  SYS  SYS  SYS
#     GPU1 NV1   X   NV2  NV1  SYS  NV2  SYS  SYS
#     GPU2 NV1  NV2   X   NV2  SYS  SYS  NV1  SYS
#     GPU3 NV2  NV1  NV2   X   SYS  SYS  SYS  NV1
#     GPU4 NV2  SYS  SYS  SYS   X   NV1  NV1  NV2
#     GPU5 SYS  NV2  SYS  SYS  NV1   X   NV2  NV1
#     GPU6 SYS  SYS  NV1  SYS  NV1  NV2   X   NV2
#     GPU7 SYS  SYS  SYS  NV1  NV2  NV1  NV2   X
_DGX1_NVLINKS: Final = {
    (0, 1): 1, (0, 2): 1, (0, 3): 2, (0, 4): 2,
    (1, 2): 2, (1, 3): 1, (1, 5): 2,
    (2, 3): 2, (2, 6): 1,
    (3, 7): 1,
    (4, 5): 1, (4, 6): 1, (4, 7): 2,
    (5, 6): 2, (5, 7): 1,
    (6, 7): 2,
}  # fmt: skip
_DGX1_BUS_IDS: Final = (0x06, 0x07, 0x0A, 0x0B, 0x85, 0x86, 0x89, 0x8A)
_DGX_H100_BUS_IDS: Final = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)


def _numa_nodes(count: int) -> list[int]:
    half = (count + 1) // 2
    return [0 if i < half or count == 1 else 1 for i in range(count)]


def _generic_pcie(a: int, b: int, numa: list[int]) -> PCIeLevelName:
    if a // 2 == b // 2 and numa[a] == numa[b]:
        return "PIX"
    return "NODE" if numa[a] == numa[b] else "SYS"


def _link(a: int, b: int, nvlinks: int, pcie: PCIeLevelName) -> GPULink:
    return GPULink(a=a, b=b, type="NVLink" if nvlinks else "PCIe", nvlinks=nvlinks, pcie=pcie)


@dataclass(frozen=True, slots=True)
class _PoolLayout:
    """What every node of a GPU pool shares: links, NUMA nodes, bus ids, MIG placements."""

    links: tuple[GPULink, ...]
    numa: tuple[int, ...]
    bus_ids: tuple[str, ...]
    mig: tuple[MIGPlacement, ...] | None

    @classmethod
    def of(cls, gpu: GPUSpec) -> _PoolLayout:
        n = gpu.count
        numa = _numa_nodes(n)
        pairs = [(a, b) for a in range(n) for b in range(a + 1, n)]
        topology = gpu.topology
        nvlinks = gpu.nvlinks
        buses = [0x10 + i * (0xE0 // n) for i in range(n)]
        if isinstance(topology, tuple):
            ordered = sorted(topology, key=lambda s: (s.a, s.b))
            links = [_link(s.a, s.b, s.nvlinks, s.pcie) for s in ordered]
        elif topology == "nvswitch":
            count = nvlinks or _NVLINK_DEFAULTS["nvswitch"]
            links = [_link(a, b, count, "NODE" if numa[a] == numa[b] else "SYS") for a, b in pairs]
            if n == len(_DGX_H100_BUS_IDS):
                buses = list(_DGX_H100_BUS_IDS)
        elif topology == "dgx1-hybrid-cube-mesh":
            numa = [i // 4 for i in range(n)]
            links = [
                _link(
                    a,
                    b,
                    _DGX1_NVLINKS.get((a, b), 0),
                    "PIX" if a // 2 == b // 2 else "PHB" if a // 4 == b // 4 else "SYS",
                )
                for a, b in pairs
            ]
            buses = list(_DGX1_BUS_IDS)
        else:  # "bridged-pairs" or "pcie": the same PCIe tree, bridges or none
            bridge = 0
            if topology == "bridged-pairs":
                bridge = nvlinks or _NVLINK_DEFAULTS["bridged-pairs"]
            links = [
                _link(a, b, bridge if a % 2 == 0 and b == a + 1 else 0, _generic_pcie(a, b, numa))
                for a, b in pairs
            ]
        mig = place_mig(gpu.product, gpu.mig) if gpu.mig is not None else None
        return cls(
            links=tuple(links),
            numa=tuple(numa),
            bus_ids=tuple(f"00000000:{bus:02X}:00.0" for bus in buses),
            mig=mig,
        )


def _uuid(*parts: object) -> str:
    return str(uuid.uuid5(_UUID_NAMESPACE, "/".join(str(p) for p in parts)))


def _inventory(node: str, gpu: GPUSpec, layout: _PoolLayout) -> GPUNodeInventory:
    gpus = []
    for i in range(gpu.count):
        mig_devices: tuple[MIGDevice, ...] = ()
        if layout.mig is not None:
            mig_devices = tuple(
                MIGDevice(
                    uuid=f"MIG-{_uuid(node, i, p.gpu_instance_id, 0)}",
                    profile=p.profile,
                    memory_mib=p.memory_mib,
                    gpu_instance_id=p.gpu_instance_id,
                    compute_instance_id=0,
                    placement_start=p.start,
                    placement_size=p.size,
                )
                for p in layout.mig
            )
        gpus.append(
            GPUDevice(
                index=i,
                uuid=f"GPU-{_uuid(node, i)}",
                product=gpu.product,
                memory_mib=gpu.memory_mib,
                pci_bus_id=layout.bus_ids[i],
                numa_node=layout.numa[i],
                mig_enabled=layout.mig is not None,
                mig_devices=mig_devices,
            )
        )
    return GPUNodeInventory(
        node_name=node,
        source="simulated",
        driver_version=gpu.driver_version,
        cuda_driver_version=gpu.cuda_driver_version,
        gpus=tuple(gpus),
        links=layout.links,
    )


@dataclass(frozen=True, slots=True)
class SimNode:
    """One simulated node: its v1 Node object (status included) and GPU inventory."""

    name: str
    pool: str
    node: dict[str, Any]
    inventory: GPUNodeInventory | None

    def create_body(self) -> dict[str, Any]:
        """The Node without ``status`` (create ignores it), a fresh copy."""
        return copy.deepcopy({k: v for k, v in self.node.items() if k != "status"})


def _timestamp(now: datetime) -> str:
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _condition(kind: str, status: str, reason: str, message: str, at: str) -> dict[str, str]:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": at,
        "lastTransitionTime": at,
    }


def _node_object(
    name: str,
    pool: PoolSpec,
    address: str,
    inventory: GPUNodeInventory | None,
    at: str,
) -> dict[str, Any]:
    labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        LABEL_POOL: pool.name,
        SIMULATED_NODE_LABEL: "true",
        **pool.labels,
    }
    gpu_resources: dict[str, str] = {}
    if inventory is not None:
        labels.update(node_labels(inventory))
        gpu_resources = node_extended_resources(inventory)
        slots = str(len(inventory.full_gpus) * SHARED_CLIENTS_PER_GPU)
        gpu_resources[RESOURCE_SHARED_GPU] = slots
        gpu_resources[RESOURCE_WOOLYAI_GPU] = slots
    memory_ki = _bytes(pool.memory) // 1024
    storage = _bytes(pool.ephemeral_storage)
    capacity = {
        "cpu": str(pool.cpu),
        "ephemeral-storage": f"{storage // 1024}Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "memory": f"{memory_ki}Ki",
        "pods": str(pool.pods),
        **gpu_resources,
    }
    allocatable = {
        **capacity,
        "ephemeral-storage": str(storage * 9 // 10),
        "memory": f"{memory_ki - 100 * 1024}Ki",
    }
    spec: dict[str, Any] = {}
    if pool.taints:
        spec["taints"] = [
            {"key": t.key, "effect": t.effect, **({"value": t.value} if t.value else {})}
            for t in pool.taints
        ]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": dict(sorted(labels.items())),
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": spec,
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "conditions": [
                _condition(
                    "MemoryPressure",
                    "False",
                    "KubeletHasSufficientMemory",
                    "kubelet has sufficient memory available",
                    at,
                ),
                _condition(
                    "DiskPressure",
                    "False",
                    "KubeletHasNoDiskPressure",
                    "kubelet has no disk pressure",
                    at,
                ),
                _condition(
                    "PIDPressure",
                    "False",
                    "KubeletHasSufficientPID",
                    "kubelet has sufficient PID available",
                    at,
                ),
                _condition("Ready", "True", "KubeletReady", "kubelet is posting ready status", at),
            ],
            "addresses": [
                {"type": "InternalIP", "address": address},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": uuid.uuid5(_UUID_NAMESPACE, f"{name}/machine").hex,
                "systemUUID": _uuid(name, "system").upper(),
                "bootID": _uuid(name, "boot"),
                "kernelVersion": "6.8.0-48-generic",
                "osImage": "Ubuntu 22.04.5 LTS",
                "containerRuntimeVersion": "containerd://1.7.22",
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": KUBELET_VERSION,
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }


def build_fleet(spec: ClusterSpec, *, now: datetime | None = None) -> list[SimNode]:
    """Build every node of ``spec``: Node objects and GPU inventories, in pool order.

    Deterministic except for condition timestamps, which are ``now`` (default: the current
    time). Node ``i`` of pool ``p`` (0-based) gets InternalIP ``10.<p+1>.0.0/16`` + ``i + 1``.
    O(nodes * GPUs²).
    """
    at = _timestamp(now or datetime.now(UTC))
    fleet = []
    for pool_index, pool in enumerate(spec.pools):
        layout = _PoolLayout.of(pool.gpu) if pool.gpu is not None else None
        network = ipaddress.IPv4Network(f"10.{pool_index + 1}.0.0/16")
        for i, name in enumerate(pool_node_names(pool)):
            inventory = (
                _inventory(name, pool.gpu, layout)
                if pool.gpu is not None and layout is not None
                else None
            )
            address = str(network.network_address + i + 1)
            fleet.append(
                SimNode(
                    name, pool.name, _node_object(name, pool, address, inventory, at), inventory
                )
            )
    return fleet


# --- Talking to an API server ---------------------------------------------------------------

_MERGE_PATCH: Final = "application/merge-patch+json"
_OWNED_PREFIXES: Final = (GFD_LABEL_PREFIX, "gpusched.io/")


class FleetError(RuntimeError):
    """Applying or deleting a fleet failed; the message names the objects and the errors."""


async def _call(method: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Any:
    """Call a kubernetes_asyncio API method and return the response's JSON, no model.

    Raises ``ApiException`` (with ``status`` and ``body``) for a non-2xx answer.
    """
    response = await method(*args, _preload_content=False, **kwargs)
    try:
        body = await response.read()
        if not 200 <= response.status < 300:
            exc = ApiException(status=response.status, reason=response.reason)
            exc.body = body.decode("utf-8", "replace")
            raise exc
        return json.loads(body) if body else {}
    finally:
        response.release()


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        detail = ""
        body: Any = getattr(exc, "body", None)
        if isinstance(body, str):
            try:
                detail = str(json.loads(body).get("message", ""))
            except (ValueError, AttributeError):
                detail = body[:200]
        return f"HTTP {exc.status} {exc.reason}" + (f": {detail}" if detail else "")
    return f"{type(exc).__name__}: {exc}"


async def _run_bounded(
    what: str, items: Iterable[Any], work: Callable[[Any], Awaitable[None]], concurrency: int
) -> None:
    """Run ``work`` on every item, at most ``concurrency`` at once; fail fast on an error."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    gate = asyncio.Semaphore(concurrency)

    async def one(item: Any) -> None:
        async with gate:
            await work(item)

    try:
        async with asyncio.TaskGroup() as group:
            for item in items:
                group.create_task(one(item))
    except ExceptionGroup as errors:
        shown = "; ".join(str(e) for e in errors.exceptions[:5])
        more = len(errors.exceptions) - 5
        raise FleetError(
            f"{what}: {shown}" + (f" (and {more} more)" if more > 0 else "")
        ) from errors


def load_crd(name: str = CRD_NAME) -> dict[str, Any]:
    """A packaged CRD (``GPUNodeInventory``'s unless ``name`` says which), annotated with its
    digest. A fresh copy each call; the YAML is parsed once per process (pure-Python YAML
    costs ~15 ms a CRD, paid by every ``SimCluster`` otherwise)."""
    return copy.deepcopy(_parsed_crd(name))


@functools.cache
def _parsed_crd(name: str) -> dict[str, Any]:
    data = resources.files("gpusched").joinpath("crds", f"{name}.yaml").read_bytes()
    crd: dict[str, Any] = yaml.safe_load(data)
    annotations = crd["metadata"].setdefault("annotations", {})
    annotations[CRD_DIGEST_ANNOTATION] = hashlib.sha256(data).hexdigest()
    return crd


def _established(crd: Any) -> bool:
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


async def ensure_crd(
    api_client: client.ApiClient, *, timeout_s: float = 60.0, name: str = CRD_NAME
) -> None:
    """Create the packaged CRD ``name`` (default: ``GPUNodeInventory``'s) if missing (or
    replace it if the packaged YAML changed, by its digest annotation), then wait until it is
    Established.

    The wait lists the CRD and watches it from the list's resourceVersion; no sleeping.
    Each phase (writing, then waiting for Established) is bounded by ``timeout_s`` seconds;
    raises ``TimeoutError`` when one runs out.
    """
    ext: Any = client.ApiextensionsV1Api(api_client)
    crd = load_crd(name)
    digest = crd["metadata"]["annotations"][CRD_DIGEST_ANNOTATION]
    async with asyncio.timeout(timeout_s):
        for _attempt in range(5):
            try:
                current = await _call(ext.read_custom_resource_definition, name)
            except ApiException as exc:
                if exc.status != 404:
                    raise
                try:
                    await _call(ext.create_custom_resource_definition, crd)
                    break
                except ApiException as exc2:
                    if exc2.status != 409:
                        raise
                    continue
            annotations = current.get("metadata", {}).get("annotations") or {}
            if annotations.get(CRD_DIGEST_ANNOTATION) == digest:
                break
            body = copy.deepcopy(crd)
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            try:
                await _call(ext.replace_custom_resource_definition, name, body)
                break
            except ApiException as exc:
                if exc.status != 409:
                    raise
        else:
            raise FleetError(f"CustomResourceDefinition {name}: conflicts on every write")
    try:
        async with asyncio.timeout(timeout_s):
            await _wait_established(ext, name)
    except TimeoutError:
        raise TimeoutError(
            f"CustomResourceDefinition {name} not Established within {timeout_s:g}s"
        ) from None


async def _wait_established(ext: Any, name: str) -> None:
    selector = f"metadata.name={name}"
    while True:
        listing = await _call(ext.list_custom_resource_definition, field_selector=selector)
        if any(_established(item) for item in listing.get("items") or []):
            return
        version = (listing.get("metadata") or {}).get("resourceVersion")
        kwargs: dict[str, Any] = {"field_selector": selector, "timeout_seconds": 30}
        if version:
            kwargs["resource_version"] = version
        try:
            async with watch.Watch(return_type="object") as stream:
                async for event in stream.stream(ext.list_custom_resource_definition, **kwargs):
                    if event["type"] in ("ADDED", "MODIFIED") and _established(event["raw_object"]):
                        return
        except ApiException as exc:
            if exc.status != 410:  # 410 Gone: our resourceVersion expired; list again
                raise


def _owned_removals(current: dict[str, Any], desired: dict[str, str]) -> dict[str, None]:
    """Merge-patch nulls for keys we own (``nvidia.com/``, ``gpusched.io/``) now gone."""
    return {key: None for key in current if key.startswith(_OWNED_PREFIXES) and key not in desired}


async def _apply_inventory(custom: Any, obj: dict[str, Any]) -> None:
    name = obj["metadata"]["name"]
    try:
        await _call(custom.create_cluster_custom_object, API_GROUP, VERSION, PLURAL, obj)
        return
    except ApiException as exc:
        if exc.status != 409:
            raise
    for _attempt in range(5):
        current = await _call(custom.get_cluster_custom_object, API_GROUP, VERSION, PLURAL, name)
        body = copy.deepcopy(obj)
        body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        try:
            await _call(
                custom.replace_cluster_custom_object, API_GROUP, VERSION, PLURAL, name, body
            )
            return
        except ApiException as exc:
            if exc.status != 409:
                raise
    raise FleetError(f"GPUNodeInventory {name}: conflicts on every replace")


_RESOURCE: Final = ("resource.k8s.io", "v1")


async def _apply_resource_slice(custom: Any, inventory: GPUNodeInventory, uid: str) -> None:
    """Create the node's ResourceSlice, owned by its Node (as the driver's kubelet plugin
    does); an existing one is replaced, its pool generation moved on when devices changed."""
    body = resource_slices.resource_slice(inventory)
    body["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Node", "name": inventory.node_name, "uid": uid}
    ]
    plural = "resourceslices"
    try:
        await _call(custom.create_cluster_custom_object, *_RESOURCE, plural, body)
        return
    except ApiException as exc:
        if exc.status != 409:
            raise
    name = body["metadata"]["name"]
    for _attempt in range(5):
        current = await _call(custom.get_cluster_custom_object, *_RESOURCE, plural, name)
        spec = current.get("spec") or {}
        generation = int((spec.get("pool") or {}).get("generation") or 0)
        if spec.get("devices") != body["spec"]["devices"]:
            generation += 1
        body["spec"]["pool"]["generation"] = max(generation, 1)
        body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        try:
            await _call(custom.replace_cluster_custom_object, *_RESOURCE, plural, name, body)
            return
        except ApiException as exc:
            if exc.status != 409:
                raise
    raise FleetError(f"ResourceSlice {name}: conflicts on every replace")


async def _apply_device_classes(custom: Any) -> None:
    for cls in resource_slices.DEVICE_CLASSES:
        try:
            await _call(custom.create_cluster_custom_object, *_RESOURCE, "deviceclasses", cls)
        except ApiException as exc:
            if exc.status != 409:
                raise


async def _apply_node(core: Any, custom: Any, sim: SimNode, dra: bool = False) -> None:
    desired = sim.node
    current_status: dict[str, Any] = {}
    try:
        created = await _call(core.create_node, sim.create_body())
        uid = created["metadata"]["uid"]
    except ApiException as exc:
        if exc.status != 409:
            raise
        current = await _call(core.read_node, sim.name)
        uid = current["metadata"]["uid"]
        current_status = current.get("status") or {}
        labels = desired["metadata"]["labels"]
        metadata_patch = {
            "metadata": {
                "labels": {
                    **_owned_removals(current["metadata"].get("labels") or {}, labels),
                    **labels,
                },
                "annotations": desired["metadata"]["annotations"],
            },
            "spec": {"taints": desired["spec"].get("taints")},
        }
        await _call(core.patch_node, sim.name, metadata_patch, _content_type=_MERGE_PATCH)
    status = copy.deepcopy(desired["status"])
    for field in ("capacity", "allocatable"):
        status[field] = {
            **_owned_removals(current_status.get(field) or {}, status[field]),
            **status[field],
        }
    await _call(core.patch_node_status, sim.name, {"status": status}, _content_type=_MERGE_PATCH)
    if sim.inventory is not None:
        await _apply_inventory(custom, inventory_to_object(sim.inventory, uid))
        if dra:
            await _apply_resource_slice(custom, sim.inventory, uid)


async def apply_fleet(
    api_client: client.ApiClient,
    spec: ClusterSpec,
    *,
    create_crd: bool = True,
    concurrency: int = 32,
    now: datetime | None = None,
) -> None:
    """Write ``spec``'s nodes and inventories to the API server behind ``api_client``.

    Idempotent: existing Nodes get their labels, annotations, taints and status updated
    (stale ``nvidia.com/`` and ``gpusched.io/`` labels and resources removed) and existing
    inventories are replaced; with ``spec.dra`` the DRA driver's DeviceClasses and each GPU
    node's ResourceSlice are written too. With ``create_crd`` the CRD is ensured first
    (:func:`ensure_crd`). At most ``concurrency`` nodes are in flight. Raises
    :class:`FleetError` naming the first failures.
    """
    if create_crd:
        await ensure_crd(api_client)
    core: Any = client.CoreV1Api(api_client)
    custom: Any = client.CustomObjectsApi(api_client)

    if spec.dra:
        try:
            await _apply_device_classes(custom)
        except ApiException as exc:
            raise FleetError(f"DeviceClasses: {_describe(exc)}") from exc

    async def work(sim: SimNode) -> None:
        try:
            await _apply_node(core, custom, sim, spec.dra)
        except ApiException as exc:
            raise FleetError(f"node {sim.name}: {_describe(exc)}") from exc

    await _run_bounded(
        f"applying cluster {spec.name!r}", build_fleet(spec, now=now), work, concurrency
    )


async def delete_fleet(
    api_client: client.ApiClient, spec: ClusterSpec, *, concurrency: int = 32
) -> None:
    """Delete ``spec``'s inventories and Nodes (missing ones are fine). The CRD stays.

    Inventories are deleted explicitly rather than left to the garbage collector, which a
    simulated API server may not run.
    """
    core: Any = client.CoreV1Api(api_client)
    custom: Any = client.CustomObjectsApi(api_client)
    gpu_nodes = {
        name for pool in spec.pools if pool.gpu is not None for name in pool_node_names(pool)
    }

    async def work(name: str) -> None:
        try:
            if name in gpu_nodes:
                try:
                    await _call(
                        custom.delete_cluster_custom_object, API_GROUP, VERSION, PLURAL, name
                    )
                except ApiException as exc:
                    if exc.status != 404:
                        raise
            try:
                await _call(core.delete_node, name)
            except ApiException as exc:
                if exc.status != 404:
                    raise
        except ApiException as exc:
            raise FleetError(f"node {name}: {_describe(exc)}") from exc

    await _run_bounded(f"deleting cluster {spec.name!r}", node_names(spec), work, concurrency)
