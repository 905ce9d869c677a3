"""The device ledger: which pod holds which GPU (or MIG device) on one node, and how much VRAM.

kube-scheduler counts extended resources such as ``nvidia.com/gpu`` as plain numbers
(``NodeInfo.Requested``); which physical device a pod gets is left to the kubelet's device
plugin. gpusched decides the devices itself (topology, VRAM sharing), so every node's
:class:`~gpusched.cache.NodeInfo` carries a :class:`NodeLedger`: one :class:`GPUDevice` per
physical GPU, built from the node's ``GPUNodeInventory`` (:mod:`gpusched.inventory`), with its
holders. The ledger is to devices what ``NodeInfo.Requested`` is to amounts.

A node that publishes no inventory still has GPUs the device plugin advertises: the ledger then
holds ``allocatable["nvidia.com/gpu"]`` *anonymous* GPUs, indices ``0..n-1`` with no UUID,
product or known memory, so counting (and whole-GPU placement) still works.

Holding a device
    A pod holds devices through one *claim*, made by :meth:`NodeLedger.allocate` and undone by
    :meth:`NodeLedger.release` (idempotent). A claim is atomic: it books all its devices or
    raises :class:`~gpusched.cache.LedgerError` and books none.

    - *Whole GPU, exclusive* (``nvidia.com/gpu: N``, this issue): the pod is the device's only
      holder and reserves all its memory (0 MiB when the memory is unknown).
    - *Shared* (``exclusive=False``: ``gpusched.io/gpu`` with ``gpusched.io/vram``): several
      holders each reserve some MiB on each of their N devices (one holder entry per device),
      and each counts as one *client* of the device and one of the node. The fit rules, all
      state predicates (so any booking order of the same pods gives the same verdict, which a
      restart that lists pods in another order needs):

      1. the :class:`SharingPolicy` allows sharing, MIG is off (MIG devices are never shared),
         the memory is known and nobody holds the device exclusively;
      2. *capacity after overcommit*: reservations <= ``memory_mib x vram_percent / 100``;
      3. *swap*: the reservations of the pods that cannot spill to host memory
         (``swap-from-vram: false``) add up to at most the *physical* memory. WoolyAI's server
         multiplexes its clients on one GPU and pages swap-capable clients out to host memory
         when the promises exceed the card; a pod that cannot be paged out must therefore
         find its slice in the card itself, whatever the swap-capable pods promise on top.
         We count the non-swap pods together (not "the card was not overcommitted when it
         arrived"): a rule that depends on arrival order would reject, after a restart,
         pods it accepted before;
      4. clients: at most ``max_clients_per_gpu`` holders per device and
         ``max_clients_per_node`` shared pods per node;
      5. compute, as HAMi's scheduler counts ``nvidia.com/gpucores``
         (``pkg/device/nvidia/device.go``, ``Fit``): the shares add up to at most
         ``cores_percent``, and once they take all of it every holder has a share. So a pod
         asking for all of it needs a device with no other holder and one asking for none
         never joins a device whose compute is all given away (HAMi's two checks), and,
         to keep the rule a state predicate, the last share is refused beside a holder
         that asks for none.

    - *Exclusive share* (``gpusched.io/exclusive: "true"``) is booked like a whole GPU: it
      takes an idle device and nobody joins it.
    - *Bound pods beyond the limits*: a pod that is already bound runs whatever the ledger
      thinks; hiding its VRAM would overbook the device. ``allocate(enforce_limits=False)``
      (what the cache uses for bound pods) books it even beyond the policy (sharing allowed,
      rules 2-5; never onto a MIG, exclusively held or unknown-memory device) and marks the
      claim *over*; such a device takes no new share until it is back within its limits.
    - *MIG device* (``nvidia.com/mig-<profile>``): a MIG-enabled GPU is never held whole; each of
      its MIG devices has at most one holder, named by its ``MIG-`` UUID.
    - *Claimed by a ResourceClaim* (DRA, :mod:`gpusched.dra`): a GPU or MIG device that some
      ResourceClaim's ``status.allocation`` holds, whoever allocated it, is marked ``claimed``
      (:meth:`NodeLedger.set_claimed`, the whole set per node, from the DynamicResources
      plugin through the cache). A claimed device is never *free*: whole-GPU, MIG and shared
      pods are not given it, exactly as if a pod held it; but it has no holder, so the pod that
      uses the claim books it under its own name (its assignment annotations) without a
      conflict. The mark is not a claim: releasing pods never clears it, only the next set.
    - *Inferred*: a pod bound by someone else (kube-scheduler, a user's ``nodeName``) asks for
      ``nvidia.com/gpu: N`` but says nothing about which devices the device plugin gave it.
      :meth:`NodeLedger.allocate_inferred` books the lowest free indices (and lowest free MIG
      devices of each profile) and marks them ``inferred``, so they count as taken and a later
      authoritative claim (annotations) may move them (:mod:`gpusched.cache.nodeinfo`).

Invariants (:meth:`NodeLedger._check`, called after every step of the stress tests):

- ``reserved_mib == sum(holders.values())`` on every device;
- an exclusive device has exactly one holder, its ``exclusive`` pod; only it may be ``inferred``;
- a MIG-enabled device has no whole-device holders; MIG devices have at most one holder;
- nothing is booked beyond capacity: exclusive holders reserve exactly the memory; unless a
  holder is *over*, shared ones obey rules 2-5 (``pinned_mib`` and ``cores_used`` equal the
  recount from the claims), and the node has at most ``max_clients_per_node`` shared pods;
- a shared holder never sits on an exclusive or a MIG-enabled device;
- every booking belongs to exactly one claim and every claim's entries are booked;
  ``free_gpu_count`` equals the healthy GPUs with MIG off and no holder.
- an *unhealthy* GPU (its inventory says so) takes no new claim, and none of its MIG devices
  does; a bound pod that holds it keeps it (``enforce_limits=False``: it runs there).

Costs: ``allocate``/``release``/``assignment_of`` are O(devices in the claim);
``free_gpu_count``, ``can_fit(n)`` for whole GPUs and ``device_load`` O(1); ``free_gpus``,
``free_mig``, ``shareable_devices``, ``refusals`` and shared ``can_fit`` O(GPUs);
``clone`` O(GPUs + MIG devices + holders). Not thread-safe: the scheduler is single-threaded
(asyncio) and only the cache mutates ledgers; snapshots hold clones.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from gpusched.annotations import Assignment
from gpusched.cache.errors import LedgerError
from gpusched.inventory import GPUNodeInventory, mig_resource_name

__all__ = [
    "DEFAULT_POLICY",
    "EXCLUSIVE_ONLY",
    "MIG_RESOURCE_PREFIX",
    "MIG_UUID_PREFIX",
    "REFUSAL_KINDS",
    "GPUDevice",
    "MIGInstance",
    "NodeLedger",
    "SharingPolicy",
    "mib_text",
]

MIG_RESOURCE_PREFIX: Final = "nvidia.com/mig-"
"""Extended resources of MIG devices (mixed strategy): ``nvidia.com/mig-1g.10gb``."""
MIG_UUID_PREFIX: Final = "MIG-"


@dataclass(frozen=True, slots=True)
class SharingPolicy:
    """How the GPUs of one node may be shared: what a node policy (``GPUNodePolicy``, or the
    cluster's defaults) resolves to. The defaults are issue 10's: sharing allowed, no VRAM
    overcommit, at most 10 clients per GPU (HAMi's default split count), no limit per node, the
    whole compute of a GPU (100 percent) to share out. Whole-GPU pods ignore it.
    """

    allow_shared: bool = True
    """Whether non-exclusive (VRAM-slice) holders may share a device."""
    vram_percent: int = 100
    """Capacity for VRAM reservations, in percent of a device's memory; 100 is no overcommit,
    120 lets reservations reach 1.2x the memory (swap-capable pods take the part above)."""
    max_clients_per_gpu: int = 10
    """Holders one device may have at most."""
    max_clients_per_node: int | None = None
    """Shared pods the node may hold at most; ``None``: no limit."""
    cores_percent: int = 100
    """Compute of one device to share out, in percent (HAMi's ``Totalcore``)."""

    def __post_init__(self) -> None:
        if self.vram_percent < 1:
            raise ValueError(f"vram_percent must be at least 1, got {self.vram_percent}")
        if self.max_clients_per_gpu < 1:
            raise ValueError(
                f"max_clients_per_gpu must be at least 1, got {self.max_clients_per_gpu}"
            )
        if self.max_clients_per_node is not None and self.max_clients_per_node < 1:
            raise ValueError(
                "max_clients_per_node must be at least 1 (or None for no limit), "
                f"got {self.max_clients_per_node}"
            )
        if not 1 <= self.cores_percent <= 100:
            raise ValueError(f"cores_percent must be 1..100, got {self.cores_percent}")

    def capacity_mib(self, memory_mib: int) -> int:
        """VRAM that reservations on a device of ``memory_mib`` may add up to (integer MiB)."""
        return memory_mib * self.vram_percent // 100


DEFAULT_POLICY: Final = SharingPolicy()
"""Issue 10's defaults: shared allowed, no overcommit, 10 clients per GPU, none per node."""

EXCLUSIVE_ONLY: Final = SharingPolicy(allow_shared=False)
"""Whole or exclusive devices only, never shared."""


def mib_text(mib: int) -> str:
    """MiB as a user reads them: ``"12Gi"``, ``"79.6Gi"``, ``"512Mi"``."""
    if mib % 1024 == 0 and mib:
        return f"{mib // 1024}Gi"
    if abs(mib) >= 1024:
        return f"{mib / 1024:.1f}Gi"
    return f"{mib}Mi"


class MIGInstance:
    """One MIG device of a MIG-enabled GPU, and the pod holding it (if any)."""

    __slots__ = ("claimed", "holder", "inferred", "memory_mib", "profile", "resource", "uuid")

    def __init__(self, uuid: str, profile: str, memory_mib: int) -> None:
        self.uuid = uuid
        self.profile = profile
        self.resource = mig_resource_name(profile)
        """Its extended resource name, e.g. ``nvidia.com/mig-1g.10gb``."""
        self.memory_mib = memory_mib
        self.holder: str | None = None
        self.inferred = False
        self.claimed: str | None = None
        """The ResourceClaim (``namespace/name``) allocated this MIG device, else ``None``."""

    def _clone(self) -> MIGInstance:
        clone = MIGInstance.__new__(MIGInstance)
        clone.uuid = self.uuid
        clone.profile = self.profile
        clone.resource = self.resource
        clone.memory_mib = self.memory_mib
        clone.holder = self.holder
        clone.inferred = self.inferred
        clone.claimed = self.claimed
        return clone


class GPUDevice:
    """One physical GPU of a node and its holders (this ledger's view; not
    :class:`gpusched.inventory.GPUDevice`, the published description it is built from).

    ``uuid``, ``product`` and ``memory_mib`` are ``None`` for an anonymous GPU (a node without
    inventory). ``holders`` maps pod UID to the MiB it reserves (its clients are its holders);
    ``exclusive`` names the sole holder of an exclusively held device; ``inferred`` says that
    holder's claim was inferred. ``pinned_mib``: what the shared holders that cannot swap
    reserve; ``cores_used``: the compute percent the shared holders take.
    """

    __slots__ = (
        "claimed",
        "cores_used",
        "exclusive",
        "holders",
        "index",
        "inferred",
        "memory_mib",
        "mig",
        "mig_enabled",
        "pinned_mib",
        "policy",
        "product",
        "reserved_mib",
        "unhealthy",
        "uuid",
    )

    def __init__(
        self,
        index: int,
        uuid: str | None = None,
        product: str | None = None,
        memory_mib: int | None = None,
        *,
        mig_enabled: bool = False,
        mig: Sequence[MIGInstance] = (),
        policy: SharingPolicy = DEFAULT_POLICY,
        unhealthy: str | None = None,
    ) -> None:
        self.index = index
        self.unhealthy = unhealthy
        """Why the GPU is unhealthy (its inventory says so), else ``None``: it and its MIG
        devices take no new holder; the holders it has keep it."""
        self.uuid = uuid
        self.product = product
        self.memory_mib = memory_mib
        self.mig_enabled = mig_enabled
        self.mig: tuple[MIGInstance, ...] = tuple(mig)
        self.policy = policy
        self.reserved_mib = 0
        self.pinned_mib = 0
        self.cores_used = 0
        self.holders: dict[str, int] = {}
        self.exclusive: str | None = None
        self.inferred = False
        self.claimed: str | None = None
        """The ResourceClaim (``namespace/name``) allocated this GPU, else ``None``: it takes
        no new holder but the claim's own pods (module docstring)."""

    @property
    def free(self) -> bool:
        """Whether the device can be taken whole: healthy, MIG off, no holder and no
        ResourceClaim's."""
        return (
            not self.mig_enabled
            and not self.holders
            and self.unhealthy is None
            and self.claimed is None
        )

    def _clone(self) -> GPUDevice:
        clone = GPUDevice.__new__(GPUDevice)
        clone.index = self.index
        clone.uuid = self.uuid
        clone.product = self.product
        clone.memory_mib = self.memory_mib
        clone.mig_enabled = self.mig_enabled
        clone.unhealthy = self.unhealthy
        clone.mig = tuple(m._clone() for m in self.mig) if self.mig else ()
        clone.policy = self.policy
        clone.reserved_mib = self.reserved_mib
        clone.pinned_mib = self.pinned_mib
        clone.cores_used = self.cores_used
        clone.holders = dict(self.holders)
        clone.exclusive = self.exclusive
        clone.inferred = self.inferred
        clone.claimed = self.claimed
        return clone

    def describe(self) -> dict[str, Any]:
        """A JSON-friendly view, for ``dump()`` and tests."""
        out: dict[str, Any] = {
            "index": self.index,
            "uuid": self.uuid,
            "memoryMiB": self.memory_mib,
            "reservedMiB": self.reserved_mib,
            "pinnedMiB": self.pinned_mib,
            "coresUsed": self.cores_used,
            "holders": dict(sorted(self.holders.items())),
            "exclusive": self.exclusive,
            "inferred": self.inferred,
        }
        if self.claimed is not None:
            out["claimed"] = self.claimed
        if self.mig_enabled:
            out["mig"] = [
                {"uuid": m.uuid, "profile": m.profile, "holder": m.holder, "inferred": m.inferred}
                | ({"claimed": m.claimed} if m.claimed is not None else {})
                for m in self.mig
            ]
        return out


# Why a device refuses one more share (``NodeLedger._refusal``; 0: it does not). Codes below
# _LIMITS are structural and always refuse; the others are limits a bound pod may exceed.
_MIG: Final = 1
_EXCLUSIVE: Final = 2
_UNKNOWN_MEMORY: Final = 3
_LIMITS: Final = 4
_NOT_SHARED: Final = 4
_CLIENTS: Final = 5
_CAPACITY: Final = 6
_PHYSICAL: Final = 7
_CORES: Final = 8
_STARVED: Final = 9
_UNHEALTHY: Final = 10
_CLAIMED: Final = 11

REFUSAL_KINDS: Final = {
    _MIG: "mig",
    _EXCLUSIVE: "exclusive",
    _UNKNOWN_MEMORY: "unknown-memory",
    _NOT_SHARED: "not-shared",
    _CLIENTS: "clients",
    _CAPACITY: "capacity",
    _PHYSICAL: "physical",
    _CORES: "cores",
    _STARVED: "starved",
    _UNHEALTHY: "unhealthy",
    _CLAIMED: "claimed",
}
"""The words :meth:`NodeLedger.refusal_kind` gives, by refusal code."""

_Entry = tuple[int, str, int, int]
"""One booked device of a claim: (GPU index, UUID or "", MiB, MIG position or -1 for whole)."""


class _Claim:
    """What one pod holds on the node. Immutable, so ledger clones share it."""

    __slots__ = ("cores", "entries", "exclusive", "inferred", "over", "reservation_uid", "swap")

    def __init__(
        self,
        entries: tuple[_Entry, ...],
        exclusive: bool,
        inferred: bool,
        reservation_uid: str,
        swap: bool = False,
        cores: int = 0,
        over: bool = False,
    ) -> None:
        self.entries = entries
        self.exclusive = exclusive
        self.inferred = inferred
        self.reservation_uid = reservation_uid
        self.swap = swap
        """A shared claim whose pod may spill to host memory (it may use overcommitted VRAM)."""
        self.cores = cores
        """Compute percent it takes on each of its devices (shared claims)."""
        self.over = over
        """Booked beyond the sharing limits (a bound pod: ``enforce_limits=False``)."""


class NodeLedger:
    """The GPU devices of one node and who holds them (see the module docstring)."""

    __slots__ = ("_claims", "_free", "_mig_index", "_shared", "devices", "inventory", "policy")

    def __init__(
        self,
        devices: Sequence[GPUDevice],
        *,
        inventory: GPUNodeInventory | None = None,
        policy: SharingPolicy = DEFAULT_POLICY,
    ) -> None:
        for position, device in enumerate(devices):
            if device.index != position:
                raise ValueError(
                    f"devices must be listed by index: got {device.index} at {position}"
                )
        self.devices: tuple[GPUDevice, ...] = tuple(devices)
        self.inventory = inventory
        """The inventory the devices were built from; ``None`` for anonymous GPUs."""
        self.policy = policy
        self._claims: dict[str, _Claim] = {}
        self._free = sum(1 for d in self.devices if d.free)
        self._shared = 0
        """Shared claims (clients of the node)."""
        self._mig_index: dict[str, tuple[int, int]] = {
            m.uuid: (d.index, pos) for d in self.devices for pos, m in enumerate(d.mig)
        }

    @classmethod
    def from_inventory(
        cls, inventory: GPUNodeInventory, policy: SharingPolicy = DEFAULT_POLICY
    ) -> NodeLedger:
        """Devices as the node's ``GPUNodeInventory`` describes them, nothing held."""
        devices = [
            GPUDevice(
                gpu.index,
                gpu.uuid,
                gpu.product,
                gpu.memory_mib,
                mig_enabled=gpu.mig_enabled,
                mig=[MIGInstance(m.uuid, m.profile, m.memory_mib) for m in gpu.mig_devices],
                policy=policy,
                unhealthy=None if gpu.healthy else (gpu.health_reason or "no reason given"),
            )
            for gpu in inventory.gpus
        ]
        return cls(devices, inventory=inventory, policy=policy)

    @classmethod
    def anonymous(cls, count: int, policy: SharingPolicy = DEFAULT_POLICY) -> NodeLedger:
        """``count`` identical GPUs of unknown UUID, product and memory, nothing held."""
        return cls([GPUDevice(i, policy=policy) for i in range(max(count, 0))], policy=policy)

    # --- Queries ------------------------------------------------------------------------

    @property
    def gpu_count(self) -> int:
        """Physical GPUs, MIG-enabled ones included."""
        return len(self.devices)

    @property
    def free_gpu_count(self) -> int:
        """GPUs that can be taken whole now (MIG off, no holder). O(1)."""
        return self._free

    def free_gpus(self) -> list[int]:
        """Indices of the GPUs that can be taken whole now, ascending. O(GPUs)."""
        return [d.index for d in self.devices if d.free]

    def free_mig(self, resource: str) -> list[tuple[int, str]]:
        """Free MIG devices of extended resource ``resource`` (``nvidia.com/mig-1g.10gb``), as
        (GPU index, MIG UUID), by GPU index then inventory order. O(GPUs + MIG devices)."""
        return [
            (d.index, m.uuid)
            for d in self.devices
            if d.unhealthy is None
            for m in d.mig
            if m.holder is None and m.claimed is None and m.resource == resource
        ]

    def can_fit(
        self,
        gpus: int = 0,
        vram_mib: int | None = None,
        exclusive: bool = True,
        mig: Mapping[str, int] | None = None,
        *,
        vram_percent: int | None = None,
        swap: bool = False,
        cores: int = 0,
    ) -> bool:
        """Whether :meth:`allocate` could book ``gpus`` GPUs and the MIG devices now.

        Exclusive: ``gpus`` free GPUs, each with at least ``vram_mib`` of memory when given (an
        anonymous GPU's memory is unknown, so it fits no VRAM demand); O(1) without
        ``vram_mib``. Shared: ``gpus`` devices that :meth:`shareable_devices` lists for a
        share of ``vram_mib`` (or ``vram_percent`` of each device), ``swap`` and ``cores``;
        O(GPUs). ``mig``: free MIG devices per resource.
        """
        if gpus > 0:
            if exclusive:
                if vram_mib is None:
                    if self._free < gpus:
                        return False
                else:
                    need = vram_mib
                    fitting = sum(
                        1
                        for d in self.devices
                        if d.free and d.memory_mib is not None and d.memory_mib >= need
                    )
                    if fitting < gpus:
                        return False
            elif len(self.shareable_devices(vram_mib, vram_percent, swap, cores)) < gpus:
                return False
        if mig:
            for resource, count in mig.items():
                if count > 0 and len(self.free_mig(resource)) < count:
                    return False
        return True

    def shareable_devices(
        self,
        vram_mib: int | None = None,
        vram_percent: int | None = None,
        swap: bool = False,
        cores: int = 0,
        *,
        exclusive: bool = False,
    ) -> list[int]:
        """Indices of the devices that can take one more holder of this shape now, ascending.

        Shared (default): a share of ``vram_mib`` MiB, or of ``vram_percent`` percent of each
        device's memory (HAMi's ``gpumem-percentage``), by the rules of the module docstring;
        none at all once the node has ``max_clients_per_node`` shared pods. ``exclusive``: idle
        devices (MIG off, no holder) with at least ``vram_mib`` of memory when it is given.
        O(GPUs); no string is built.
        """
        if exclusive:
            if vram_mib is None:
                return [d.index for d in self.devices if d.free]
            return [
                d.index
                for d in self.devices
                if d.free and d.memory_mib is not None and d.memory_mib >= vram_mib
            ]
        self._check_shape(vram_mib, vram_percent, cores)
        if self.node_refusal() is not None:
            return []
        out = []
        for device in self.devices:
            mib = self._share_of(device, vram_mib, vram_percent)
            if mib is not None and not self._refusal(device, mib, swap, cores):
                out.append(device.index)
        return out

    def refusals(
        self,
        vram_mib: int | None = None,
        vram_percent: int | None = None,
        swap: bool = False,
        cores: int = 0,
    ) -> dict[int, str]:
        """Why each device that cannot take a share of this shape refuses it, by index (the
        devices missing here can). For messages; :meth:`node_refusal` says why the node as a
        whole takes no more shared pods. O(GPUs)."""
        self._check_shape(vram_mib, vram_percent, cores)
        out: dict[int, str] = {}
        for device in self.devices:
            mib = self._share_of(device, vram_mib, vram_percent)
            if mib is None:
                out[device.index] = self._refusal_text(_UNKNOWN_MEMORY, device, 0, swap, cores)
                continue
            code = self._refusal(device, mib, swap, cores)
            if code:
                out[device.index] = self._refusal_text(code, device, mib, swap, cores)
        return out

    def refusal_kind(
        self,
        index: int,
        vram_mib: int | None = None,
        vram_percent: int | None = None,
        swap: bool = False,
        cores: int = 0,
    ) -> str | None:
        """Why device ``index`` cannot take one more share of this shape, as a fixed word
        (one of :data:`REFUSAL_KINDS`), or ``None`` when it can: for reasons that aggregate
        across nodes (a scheduler's "3 node(s) had ..."), where :meth:`refusals` gives the
        sentence with this device's numbers. O(1) (O(holders) as :meth:`refusals`)."""
        self._check_shape(vram_mib, vram_percent, cores)
        device = self.devices[index]
        mib = self._share_of(device, vram_mib, vram_percent)
        if mib is None:
            return REFUSAL_KINDS[_UNKNOWN_MEMORY]
        code = self._refusal(device, mib, swap, cores)
        return REFUSAL_KINDS[code] if code else None

    def node_refusal(self) -> str | None:
        """Why the node takes no more shared pods (its client limit), or ``None``. O(1)."""
        limit = self.policy.max_clients_per_node
        if limit is not None and self._shared >= limit:
            return (
                f"the node already has {self._shared} pod{'s' if self._shared != 1 else ''} "
                "sharing its GPUs, the most its "
                f"policy allows (maxClientsPerNode: {limit})"
            )
        return None

    def share_mib(
        self, index: int, vram_mib: int | None = None, vram_percent: int | None = None
    ) -> int | None:
        """The MiB a share reserves on device ``index``: ``vram_mib``, or else ``vram_percent``
        of its memory (rounded down, as HAMi); ``None`` when its memory is unknown."""
        return self._share_of(self.devices[index], vram_mib, vram_percent)

    def device_load(self, index: int) -> tuple[int, int]:
        """(MiB reserved, holders) of device ``index``, for binpack / spread scoring. O(1)."""
        device = self.devices[index]
        return device.reserved_mib, len(device.holders)

    @property
    def shared_clients(self) -> int:
        """Pods sharing this node's GPUs (the count ``max_clients_per_node`` limits). O(1)."""
        return self._shared

    @staticmethod
    def _check_shape(vram_mib: int | None, vram_percent: int | None, cores: int) -> None:
        if (vram_mib is None or vram_mib <= 0) and (
            vram_percent is None or not 0 < vram_percent <= 100
        ):
            raise ValueError("a shared fit needs vram_mib > 0 or vram_percent in 1..100")
        if not 0 <= cores <= 100:
            raise ValueError(f"cores must be 0..100 percent, got {cores}")

    @staticmethod
    def _share_of(device: GPUDevice, vram_mib: int | None, vram_percent: int | None) -> int | None:
        if vram_mib is not None and vram_mib > 0:
            return vram_mib
        if device.memory_mib is None or vram_percent is None:
            return None
        return max(device.memory_mib * vram_percent // 100, 1)

    def _refusal(self, device: GPUDevice, mib: int, swap: bool, cores: int) -> int:
        """Why ``device`` cannot take one more share of ``mib`` now: a ``_REFUSED_*`` code, or
        0 when it can (the rules of the module docstring; structural ones first). O(1), plus
        O(holders) only when the shares would take the device's whole compute."""
        if device.mig_enabled:
            return _MIG
        if device.exclusive is not None:
            return _EXCLUSIVE
        if device.unhealthy is not None:
            return _UNHEALTHY
        if device.claimed is not None:
            return _CLAIMED
        memory = device.memory_mib
        if memory is None:
            return _UNKNOWN_MEMORY
        policy = device.policy
        if not policy.allow_shared:
            return _NOT_SHARED
        if len(device.holders) >= policy.max_clients_per_gpu:
            return _CLIENTS
        if device.reserved_mib + mib > policy.capacity_mib(memory):
            return _CAPACITY
        if not swap and device.pinned_mib + mib > memory:
            return _PHYSICAL
        if cores or device.cores_used:
            after = device.cores_used + cores
            total = policy.cores_percent
            if after > total:
                return _CORES
            # HAMi refuses a pod asking for all the compute of a used device, and one asking
            # for none of a device whose compute is all taken; checked on the state after,
            # both ways, so the order pods arrive in does not matter.
            if after >= total and (
                not cores or any(not self._claims[uid].cores for uid in device.holders)
            ):
                return _STARVED
        return 0

    def _refusal_text(self, code: int, device: GPUDevice, mib: int, swap: bool, cores: int) -> str:
        i = device.index
        policy = device.policy
        memory = device.memory_mib or 0
        if code == _NOT_SHARED:
            return f"GPU {i} cannot be shared: its node's policy allows whole GPUs only"
        if code == _UNHEALTHY:
            return f"GPU {i} is unhealthy ({device.unhealthy}) and takes no new pod"
        if code == _CLAIMED:
            return f"GPU {i} is allocated to ResourceClaim {device.claimed}"
        if code == _MIG:
            return (
                f"GPU {i} is in MIG mode and MIG devices are never shared: ask for a MIG "
                "profile (nvidia.com/mig-<profile>) instead"
            )
        if code == _EXCLUSIVE:
            return f"GPU {i} is held exclusively by pod {device.exclusive}"
        if code == _UNKNOWN_MEMORY:
            return (
                f"GPU {i} has unknown memory (its node publishes no GPUNodeInventory), so it "
                "cannot be shared by VRAM"
            )
        if code == _CLIENTS:
            return (
                f"GPU {i} already has {len(device.holders)} clients, the most its node's policy "
                f"allows (maxClientsPerGPU: {policy.max_clients_per_gpu})"
            )
        if code == _CAPACITY:
            capacity = policy.capacity_mib(memory)
            of = "its memory" if policy.vram_percent == 100 else f"its {mib_text(memory)} of memory"
            return (
                f"GPU {i} has {mib_text(capacity - device.reserved_mib)} free of "
                f"{mib_text(capacity)} ({policy.vram_percent}% of {of} may be reserved), "
                f"the pod asks {mib_text(mib)}"
            )
        if code == _PHYSICAL:
            return (
                f"GPU {i} has {mib_text(memory - device.pinned_mib)} of its {mib_text(memory)} "
                f"not promised to pods that cannot swap, the pod asks {mib_text(mib)} and "
                'cannot swap to host memory (set gpusched.io/swap-from-vram: "true" to let '
                "it use overcommitted VRAM)"
            )
        if code == _CORES:
            return (
                f"GPU {i} has {policy.cores_percent - device.cores_used}% of its compute free, "
                f"the pod asks {cores}%"
            )
        if code == _STARVED:
            if not cores:
                return (
                    f"GPU {i} has all its compute given to its clients; a pod asking for none "
                    "of it would get no time on it"
                )
            return (
                f"GPU {i} has clients that ask for no compute share, and the pod's {cores}% "
                "would leave them none"
            )
        raise AssertionError(code)

    def holds(self, pod_uid: str) -> bool:
        return pod_uid in self._claims

    def pods(self) -> list[str]:
        """UIDs of the pods holding devices here, in the order they were booked."""
        return list(self._claims)

    def assignment_of(self, pod_uid: str) -> Assignment | None:
        """What ``pod_uid`` holds, as the annotations would record it, or ``None``.

        UUIDs are given only when every device's UUID is known (never for anonymous GPUs), as
        :func:`gpusched.annotations.parse_assignment` reads annotations without UUIDs.
        """
        claim = self._claims.get(pod_uid)
        if claim is None:
            return None
        entries = claim.entries
        uuids = tuple(e[1] for e in entries)
        return Assignment(
            gpu_ids=tuple(e[0] for e in entries),
            gpu_uuids=uuids if all(uuids) else (),
            vram_mib=tuple(e[2] for e in entries),
            reservation_uid=claim.reservation_uid,
        )

    def share_terms(self, pod_uid: str) -> tuple[bool, int] | None:
        """(swap, cores percent) of ``pod_uid``'s share here, or ``None`` when it holds no
        share (nothing, or devices exclusively). O(1)."""
        claim = self._claims.get(pod_uid)
        if claim is None or claim.exclusive:
            return None
        return claim.swap, claim.cores

    def shared_pods(self) -> list[str]:
        """The pods holding a share here (the node's clients), in booking order. O(claims)."""
        return [uid for uid, claim in self._claims.items() if not claim.exclusive]

    def is_inferred(self, pod_uid: str) -> bool:
        claim = self._claims.get(pod_uid)
        return claim is not None and claim.inferred

    def holders_of(self, gpu_ids: Sequence[int], uuids: Sequence[str] = ()) -> list[str]:
        """Pods holding any of these devices now (unknown devices ignored), first seen first.

        ``uuids`` as for :meth:`allocate`: a ``MIG-`` UUID names one MIG device of that GPU.
        """
        found: dict[str, None] = {}
        for i, index in enumerate(gpu_ids):
            if not 0 <= index < len(self.devices):
                continue
            device = self.devices[index]
            uuid = uuids[i] if i < len(uuids) else ""
            if uuid.startswith(MIG_UUID_PREFIX):
                where = self._mig_index.get(uuid)
                if where is not None and where[0] == index:
                    holder = device.mig[where[1]].holder
                    if holder is not None:
                        found[holder] = None
            else:
                found.update(dict.fromkeys(device.holders))
        return list(found)

    # --- Booking --------------------------------------------------------------------------

    def allocate(
        self,
        pod_uid: str,
        gpu_ids: Sequence[int],
        vram_mib_per_gpu: int | Sequence[int] | None = None,
        exclusive: bool = True,
        *,
        uuids: Sequence[str] = (),
        inferred: bool = False,
        reservation_uid: str = "",
        swap: bool = False,
        cores: int = 0,
        enforce_limits: bool = True,
    ) -> None:
        """Book devices for ``pod_uid``, all or none; :class:`LedgerError` on any over-commit.

        ``gpu_ids``: GPU indices. ``uuids`` (optional, same length): each entry's UUID; a
        ``GPU-`` UUID must match the device's (when known), a ``MIG-`` UUID books that MIG
        device of the GPU instead of the whole GPU. ``exclusive``: the pod holds each whole GPU
        alone and reserves all its memory, so ``vram_mib_per_gpu`` is ignored; otherwise it
        shares each GPU, reserving ``vram_mib_per_gpu`` MiB (one int for all, or one per GPU),
        as far as the device's :class:`SharingPolicy` allows, with ``swap`` (it may spill to
        host memory) and ``cores`` (compute percent per device). ``enforce_limits=False`` (a
        bound pod) books a share even beyond the limits (rules 2-5), marking it *over*. An empty
        ``gpu_ids`` books nothing. A pod holds at most one claim per node: :meth:`release` it
        first. O(devices in the claim).
        """
        if pod_uid in self._claims:
            raise LedgerError(f"pod {pod_uid} already holds {self._describe_claim(pod_uid)}")
        count = len(gpu_ids)
        if not count:
            return
        if uuids and len(uuids) != count:
            raise LedgerError(f"{len(uuids)} UUIDs given for {count} GPUs")
        if vram_mib_per_gpu is None or isinstance(vram_mib_per_gpu, int):
            vram: Sequence[int | None] = [vram_mib_per_gpu] * count
        else:
            vram = vram_mib_per_gpu
            if len(vram) != count:
                raise LedgerError(f"{len(vram)} VRAM amounts given for {count} GPUs")
        over = False
        if not exclusive:
            if not 0 <= cores <= 100:
                raise LedgerError(f"a share takes 0..100 percent of a GPU's compute, not {cores}")
            refusal = self.node_refusal()
            if refusal is not None:
                if enforce_limits:
                    raise LedgerError(refusal)
                over = True
        devices = self.devices
        entries: list[_Entry] = []
        seen: set[tuple[int, int]] = set()
        for i, index in enumerate(gpu_ids):
            if not 0 <= index < len(devices):
                raise LedgerError(f"GPU {index} does not exist (the node has {len(devices)})")
            device = devices[index]
            uuid = uuids[i] if uuids else ""
            if uuid.startswith(MIG_UUID_PREFIX):
                where = self._mig_index.get(uuid)
                if where is None or where[0] != index:
                    raise LedgerError(f"MIG device {uuid} is not on GPU {index}")
                instance = device.mig[where[1]]
                if where in seen:
                    raise LedgerError(f"MIG device {uuid} is listed twice")
                if not exclusive:
                    raise LedgerError(f"MIG device {uuid} cannot be shared: MIG devices never are")
                if instance.holder is not None:
                    raise LedgerError(
                        f"MIG device {uuid} on GPU {index} is held by pod {instance.holder}"
                    )
                if device.unhealthy is not None and enforce_limits:
                    raise LedgerError(f"GPU {index} is unhealthy ({device.unhealthy})")
                seen.add(where)
                entries.append((index, uuid, instance.memory_mib, where[1]))
                continue
            if uuid and device.uuid is not None and uuid != device.uuid:
                raise LedgerError(f"GPU {index} is {device.uuid}, not {uuid}")
            if device.mig_enabled:
                raise LedgerError(f"GPU {index} is in MIG mode; only its MIG devices can be held")
            if (index, -1) in seen:
                raise LedgerError(f"GPU {index} is listed twice")
            seen.add((index, -1))
            if exclusive:
                if device.holders:
                    raise LedgerError(f"GPU {index} is held by {self._holders_text(device)}")
                if device.unhealthy is not None and enforce_limits:
                    raise LedgerError(f"GPU {index} is unhealthy ({device.unhealthy})")
                mib = device.memory_mib or 0
            else:
                share = vram[i]
                if share is None or share <= 0:
                    raise LedgerError(
                        f"a shared hold of GPU {index} must reserve some VRAM, got {share}"
                    )
                mib = share
                code = self._refusal(device, mib, swap, cores)
                if code:
                    if enforce_limits or code < _LIMITS:
                        raise LedgerError(self._refusal_text(code, device, mib, swap, cores))
                    over = True
            entries.append((index, device.uuid or "", mib, -1))
        for index, _, mib, position in entries:
            device = devices[index]
            if position >= 0:
                instance = device.mig[position]
                instance.holder = pod_uid
                instance.inferred = inferred
                continue
            if device.free:
                self._free -= 1
            device.holders[pod_uid] = mib
            device.reserved_mib += mib
            if exclusive:
                device.exclusive = pod_uid
                device.inferred = inferred
            else:
                if not swap:
                    device.pinned_mib += mib
                device.cores_used += cores
        if exclusive:
            self._claims[pod_uid] = _Claim(tuple(entries), True, inferred, reservation_uid)
        else:
            self._shared += 1
            self._claims[pod_uid] = _Claim(
                tuple(entries), False, inferred, reservation_uid, swap, cores, over
            )

    def is_over(self, pod_uid: str) -> bool:
        """Whether ``pod_uid``'s share was booked beyond the sharing limits (a bound pod)."""
        claim = self._claims.get(pod_uid)
        return claim is not None and claim.over

    def allocate_inferred(
        self, pod_uid: str, gpus: int, mig: Iterable[tuple[str, int]] = ()
    ) -> None:
        """Book the lowest free GPUs (and MIG devices per resource) for a pod whose devices
        are not known (bound by someone else), exclusive and marked ``inferred``.

        Deterministic: the same ledger state always gives the same devices. Raises
        :class:`LedgerError` (booking nothing) when there are not enough free devices.
        """
        ids: list[int] = []
        uuids: list[str] = []
        if gpus > 0:
            free = self.free_gpus()
            if len(free) < gpus:
                raise LedgerError(f"{gpus} GPUs asked, {len(free)} free")
            for index in free[:gpus]:
                ids.append(index)
                uuids.append(self.devices[index].uuid or "")
        for resource, count in mig:
            if count <= 0:
                continue
            free_mig = self.free_mig(resource)
            if len(free_mig) < count:
                raise LedgerError(f"{count} x {resource} asked, {len(free_mig)} free")
            for index, uuid in free_mig[:count]:
                ids.append(index)
                uuids.append(uuid)
        # UUIDs are all known (an inventory) or all unknown (anonymous GPUs, which have no
        # MIG devices), so dropping unknown ones never loses a MIG device.
        self.allocate(pod_uid, ids, None, True, uuids=uuids if all(uuids) else (), inferred=True)

    def release(self, pod_uid: str) -> bool:
        """Free everything ``pod_uid`` holds; ``False`` (and nothing changes) if it held
        nothing, so it is idempotent. O(devices in its claim)."""
        claim = self._claims.pop(pod_uid, None)
        if claim is None:
            return False
        devices = self.devices
        for index, _, mib, position in claim.entries:
            device = devices[index]
            if position >= 0:
                instance = device.mig[position]
                instance.holder = None
                instance.inferred = False
                continue
            del device.holders[pod_uid]
            device.reserved_mib -= mib
            if device.exclusive == pod_uid:
                device.exclusive = None
                device.inferred = False
            elif not claim.exclusive:
                if not claim.swap:
                    device.pinned_mib -= mib
                device.cores_used -= claim.cores
            if device.free:
                self._free += 1
        if not claim.exclusive:
            self._shared -= 1
        return True

    def set_claimed(self, claimed: Mapping[str | int, str]) -> bool:
        """Mark exactly these devices as allocated to ResourceClaims (module docstring), every
        other mark goes: ``claimed`` maps a device to its claim (``namespace/name``), a device
        named by its UUID (a GPU's or a MIG device's) or, for a GPU whose UUID is unknown
        (anonymous), by its index. Unknown devices are ignored. Returns whether any mark
        changed. O(GPUs + MIG devices).

        DRA names devices by UUID (NVIDIA's driver publishes each one's ``uuid``), so a claim
        and the inventory agree on a device even where indices would not."""
        changed = False
        for device in self.devices:
            mark = claimed.get(device.uuid) if device.uuid else claimed.get(device.index)
            if mark != device.claimed:
                was_free = device.free
                device.claimed = mark
                self._free += int(device.free) - int(was_free)
                changed = True
            for instance in device.mig:
                mark = claimed.get(instance.uuid)
                if mark != instance.claimed:
                    instance.claimed = mark
                    changed = True
        return changed

    def claimed_devices(self) -> dict[str | int, str]:
        """The marks :meth:`set_claimed` set, by UUID (by index for an anonymous GPU)."""
        out: dict[str | int, str] = {}
        for d in self.devices:
            if d.claimed is not None:
                out[d.uuid or d.index] = d.claimed
            out.update({m.uuid: m.claimed for m in d.mig if m.claimed is not None})
        return out

    def locate(self, name: str | int) -> tuple[int, str, int] | None:
        """A device named as :meth:`set_claimed` names it (UUID, or an anonymous GPU's
        index) as an assignment entry: (GPU index, UUID or "", MiB); ``None`` if unknown.
        O(GPUs)."""
        if isinstance(name, int):
            if 0 <= name < len(self.devices) and self.devices[name].uuid is None:
                return name, "", self.devices[name].memory_mib or 0
            return None
        where = self._mig_index.get(name)
        if where is not None:
            return where[0], name, self.devices[where[0]].mig[where[1]].memory_mib
        for device in self.devices:
            if device.uuid == name:
                return device.index, name, device.memory_mib or 0
        return None

    def held_by_pods(self, uuid: str | int) -> bool:
        """Whether a pod holds the device with this UUID (a GPU: whole, shared or one of its
        MIG devices; a MIG device: it, or its GPU whole), or the GPU of this index (a node
        whose inventory names no UUIDs). ``False`` for an unknown one. O(MIG devices of one
        GPU)."""
        if isinstance(uuid, int):
            if not 0 <= uuid < len(self.devices):
                return False
            device = self.devices[uuid]
            return bool(device.holders) or any(m.holder is not None for m in device.mig)
        where = self._mig_index.get(uuid)
        if where is not None:
            device = self.devices[where[0]]
            return device.mig[where[1]].holder is not None or bool(device.holders)
        for device in self.devices:
            if device.uuid == uuid:
                return bool(device.holders) or any(m.holder is not None for m in device.mig)
        return False

    def clone(self) -> NodeLedger:
        """An independent copy (claims are immutable and shared). O(GPUs + MIG + holders)."""
        clone = NodeLedger.__new__(NodeLedger)
        clone.devices = tuple(d._clone() for d in self.devices)
        clone.inventory = self.inventory
        clone.policy = self.policy
        clone._claims = dict(self._claims)
        clone._free = self._free
        clone._shared = self._shared
        clone._mig_index = self._mig_index  # never mutated
        return clone

    # --- Debugging --------------------------------------------------------------------------

    def _holders_text(self, device: GPUDevice) -> str:
        return ", ".join(f"pod {uid}" for uid in device.holders)

    def _describe_claim(self, pod_uid: str) -> str:
        claim = self._claims[pod_uid]
        return ", ".join(
            f"GPU {index}" + (f" ({uuid})" if position >= 0 else "")
            for index, uuid, _, position in claim.entries
        )

    def describe(self) -> list[dict[str, Any]]:
        """Every device with its holders, JSON-friendly (``SchedulerCache.dump``)."""
        return [d.describe() for d in self.devices]

    def _check(self) -> None:
        """Assert every invariant of the module docstring. O(GPUs + MIG devices + holders)."""
        booked: dict[tuple[str, int, int], int] = {}
        for index, device in enumerate(self.devices):
            assert device.index == index, (index, device.index)
            assert device.reserved_mib == sum(device.holders.values()), device.describe()
            if device.mig_enabled:
                assert not device.holders, device.describe()
                assert device.exclusive is None, device.describe()
            else:
                assert not device.mig, device.describe()
            if device.exclusive is not None:
                assert list(device.holders) == [device.exclusive], device.describe()
                assert device.reserved_mib == (device.memory_mib or 0), device.describe()
                assert device.pinned_mib == device.cores_used == 0, device.describe()
            else:
                assert not device.inferred, device.describe()
                self._check_shared(device)
            for uid, mib in device.holders.items():
                booked[(uid, index, -1)] = mib
            for position, instance in enumerate(device.mig):
                assert self._mig_index[instance.uuid] == (index, position), instance.uuid
                if instance.holder is None:
                    assert not instance.inferred, instance.uuid
                else:
                    booked[(instance.holder, index, position)] = instance.memory_mib
        assert len(self._mig_index) == sum(len(d.mig) for d in self.devices)
        claimed: dict[tuple[str, int, int], int] = {}
        for uid, claim in self._claims.items():
            assert claim.entries, uid
            for index, uuid, mib, position in claim.entries:
                key = (uid, index, position)
                assert key not in claimed, key
                claimed[key] = mib
                device = self.devices[index]
                if position >= 0:
                    instance = device.mig[position]
                    assert instance.uuid == uuid, key
                    assert instance.inferred == claim.inferred, key
                else:
                    assert uuid == (device.uuid or ""), key
                    assert (device.exclusive == uid) == claim.exclusive, key
                    if claim.exclusive:
                        assert device.inferred == claim.inferred, key
        assert booked == claimed, (booked, claimed)
        shared = [claim for claim in self._claims.values() if not claim.exclusive]
        assert self._shared == len(shared), (self._shared, len(shared))
        limit = self.policy.max_clients_per_node
        if limit is not None and not any(claim.over for claim in shared):
            assert self._shared <= limit, (self._shared, limit)
        assert self._free == sum(1 for d in self.devices if d.free), self._free

    def _check_shared(self, device: GPUDevice) -> None:
        """Assert the sharing invariants of a device nobody holds exclusively."""
        info = device.describe()
        claims = [self._claims[uid] for uid in device.holders]
        assert not any(claim.exclusive for claim in claims), info
        assert device.pinned_mib == sum(
            mib for (uid, mib), c in zip(device.holders.items(), claims, strict=True) if not c.swap
        ), info
        assert device.cores_used == sum(claim.cores for claim in claims), info
        if not claims or any(claim.over for claim in claims):
            return
        policy = device.policy
        memory = device.memory_mib
        assert memory is not None, info
        assert policy.allow_shared, info
        assert len(claims) <= policy.max_clients_per_gpu, info
        assert device.reserved_mib <= policy.capacity_mib(memory), info
        assert device.pinned_mib <= memory, info
        assert device.cores_used <= policy.cores_percent, info
        if device.cores_used >= policy.cores_percent:
            assert all(claim.cores for claim in claims), info
