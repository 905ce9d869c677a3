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
    - *Shared* (``exclusive=False``, VRAM slices, a later issue): several holders each reserve
      some MiB; allowed only when the device's :class:`SharingPolicy` says so, and only up to its
      capacity (``memoryMiB x vram_percent / 100``: above 100 percent over-commits).
    - *MIG device* (``nvidia.com/mig-<profile>``): a MIG-enabled GPU is never held whole; each of
      its MIG devices has at most one holder, named by its ``MIG-`` UUID.
    - *Inferred*: a pod bound by someone else (kube-scheduler, a user's ``nodeName``) asks for
      ``nvidia.com/gpu: N`` but says nothing about which devices the device plugin gave it.
      :meth:`NodeLedger.allocate_inferred` books the lowest free indices (and lowest free MIG
      devices of each profile) and marks them ``inferred``, so they count as taken and a later
      authoritative claim (annotations) may move them (:mod:`gpusched.cache.nodeinfo`).

Invariants (:meth:`NodeLedger._check`, called after every step of the stress tests):

- ``reserved_mib == sum(holders.values())`` on every device;
- an exclusive device has exactly one holder, its ``exclusive`` pod; only it may be ``inferred``;
- a MIG-enabled device has no whole-device holders; MIG devices have at most one holder;
- nothing is booked beyond capacity: exclusive holders reserve exactly the memory, shared ones
  add up to at most ``policy.capacity_mib``;
- every booking belongs to exactly one claim and every claim's entries are booked;
  ``free_gpu_count`` equals the GPUs with MIG off and no holder.

Costs: ``allocate``/``release``/``assignment_of`` are O(devices in the claim);
``free_gpu_count`` and ``can_fit(n)`` for whole GPUs O(1); ``free_gpus``/``free_mig`` O(GPUs);
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
    "EXCLUSIVE_ONLY",
    "MIG_RESOURCE_PREFIX",
    "MIG_UUID_PREFIX",
    "GPUDevice",
    "MIGInstance",
    "NodeLedger",
    "SharingPolicy",
]

MIG_RESOURCE_PREFIX: Final = "nvidia.com/mig-"
"""Extended resources of MIG devices (mixed strategy): ``nvidia.com/mig-1g.10gb``."""
MIG_UUID_PREFIX: Final = "MIG-"


@dataclass(frozen=True, slots=True)
class SharingPolicy:
    """How one GPU may be shared: the extension point for VRAM slices and over-commit.

    The default, :data:`EXCLUSIVE_ONLY`, allows whole-GPU exclusive holders only. A policy that
    allows sharing lets several pods hold one GPU, each reserving some VRAM, until the
    reservations reach :meth:`capacity_mib`.
    """

    allow_shared: bool = False
    """Whether non-exclusive (VRAM-slice) holders may share the device."""
    vram_percent: int = 100
    """Capacity for VRAM reservations, in percent of the device's memory; above 100 the device
    is over-committed (pods that reserve more than they use), as the policy owner decides."""

    def capacity_mib(self, memory_mib: int) -> int:
        """VRAM that reservations on a device of ``memory_mib`` may add up to (integer MiB)."""
        return memory_mib * self.vram_percent // 100


EXCLUSIVE_ONLY: Final = SharingPolicy()
"""Whole GPUs only, never shared, never over-committed (this issue's policy everywhere)."""


class MIGInstance:
    """One MIG device of a MIG-enabled GPU, and the pod holding it (if any)."""

    __slots__ = ("holder", "inferred", "memory_mib", "profile", "resource", "uuid")

    def __init__(self, uuid: str, profile: str, memory_mib: int) -> None:
        self.uuid = uuid
        self.profile = profile
        self.resource = mig_resource_name(profile)
        """Its extended resource name, e.g. ``nvidia.com/mig-1g.10gb``."""
        self.memory_mib = memory_mib
        self.holder: str | None = None
        self.inferred = False

    def _clone(self) -> MIGInstance:
        clone = MIGInstance.__new__(MIGInstance)
        clone.uuid = self.uuid
        clone.profile = self.profile
        clone.resource = self.resource
        clone.memory_mib = self.memory_mib
        clone.holder = self.holder
        clone.inferred = self.inferred
        return clone


class GPUDevice:
    """One physical GPU of a node and its holders (this ledger's view; not
    :class:`gpusched.inventory.GPUDevice`, the published description it is built from).

    ``uuid``, ``product`` and ``memory_mib`` are ``None`` for an anonymous GPU (a node without
    inventory). ``holders`` maps pod UID to the MiB it reserves; ``exclusive`` names the sole
    holder of an exclusively held device; ``inferred`` says that holder's claim was inferred.
    """

    __slots__ = (
        "exclusive",
        "holders",
        "index",
        "inferred",
        "memory_mib",
        "mig",
        "mig_enabled",
        "policy",
        "product",
        "reserved_mib",
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
        policy: SharingPolicy = EXCLUSIVE_ONLY,
    ) -> None:
        self.index = index
        self.uuid = uuid
        self.product = product
        self.memory_mib = memory_mib
        self.mig_enabled = mig_enabled
        self.mig: tuple[MIGInstance, ...] = tuple(mig)
        self.policy = policy
        self.reserved_mib = 0
        self.holders: dict[str, int] = {}
        self.exclusive: str | None = None
        self.inferred = False

    @property
    def free(self) -> bool:
        """Whether the device can be taken whole: MIG off and no holder."""
        return not self.mig_enabled and not self.holders

    def _clone(self) -> GPUDevice:
        clone = GPUDevice.__new__(GPUDevice)
        clone.index = self.index
        clone.uuid = self.uuid
        clone.product = self.product
        clone.memory_mib = self.memory_mib
        clone.mig_enabled = self.mig_enabled
        clone.mig = tuple(m._clone() for m in self.mig) if self.mig else ()
        clone.policy = self.policy
        clone.reserved_mib = self.reserved_mib
        clone.holders = dict(self.holders)
        clone.exclusive = self.exclusive
        clone.inferred = self.inferred
        return clone

    def describe(self) -> dict[str, Any]:
        """A JSON-friendly view, for ``dump()`` and tests."""
        out: dict[str, Any] = {
            "index": self.index,
            "uuid": self.uuid,
            "memoryMiB": self.memory_mib,
            "reservedMiB": self.reserved_mib,
            "holders": dict(sorted(self.holders.items())),
            "exclusive": self.exclusive,
            "inferred": self.inferred,
        }
        if self.mig_enabled:
            out["mig"] = [
                {"uuid": m.uuid, "profile": m.profile, "holder": m.holder, "inferred": m.inferred}
                for m in self.mig
            ]
        return out


_Entry = tuple[int, str, int, int]
"""One booked device of a claim: (GPU index, UUID or "", MiB, MIG position or -1 for whole)."""


class _Claim:
    """What one pod holds on the node. Immutable, so ledger clones share it."""

    __slots__ = ("entries", "exclusive", "inferred", "reservation_uid")

    def __init__(
        self, entries: tuple[_Entry, ...], exclusive: bool, inferred: bool, reservation_uid: str
    ) -> None:
        self.entries = entries
        self.exclusive = exclusive
        self.inferred = inferred
        self.reservation_uid = reservation_uid


class NodeLedger:
    """The GPU devices of one node and who holds them (see the module docstring)."""

    __slots__ = ("_claims", "_free", "_mig_index", "devices", "inventory", "policy")

    def __init__(
        self,
        devices: Sequence[GPUDevice],
        *,
        inventory: GPUNodeInventory | None = None,
        policy: SharingPolicy = EXCLUSIVE_ONLY,
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
        self._mig_index: dict[str, tuple[int, int]] = {
            m.uuid: (d.index, pos) for d in self.devices for pos, m in enumerate(d.mig)
        }

    @classmethod
    def from_inventory(
        cls, inventory: GPUNodeInventory, policy: SharingPolicy = EXCLUSIVE_ONLY
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
            )
            for gpu in inventory.gpus
        ]
        return cls(devices, inventory=inventory, policy=policy)

    @classmethod
    def anonymous(cls, count: int, policy: SharingPolicy = EXCLUSIVE_ONLY) -> NodeLedger:
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
            for m in d.mig
            if m.holder is None and m.resource == resource
        ]

    def can_fit(
        self,
        gpus: int = 0,
        vram_mib: int | None = None,
        exclusive: bool = True,
        mig: Mapping[str, int] | None = None,
    ) -> bool:
        """Whether :meth:`allocate` could book ``gpus`` GPUs and the MIG devices now.

        Exclusive: ``gpus`` free GPUs, each with at least ``vram_mib`` of memory when given (an
        anonymous GPU's memory is unknown, so it fits no VRAM demand); O(1) without
        ``vram_mib``. Shared: ``gpus`` GPUs whose policy allows sharing and whose remaining
        capacity is at least ``vram_mib`` (required). ``mig``: free MIG devices per resource.
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
            else:
                if vram_mib is None or vram_mib <= 0:
                    raise ValueError("a shared fit needs vram_mib > 0")
                if sum(1 for d in self.devices if self._shareable(d, vram_mib)) < gpus:
                    return False
        if mig:
            for resource, count in mig.items():
                if count > 0 and len(self.free_mig(resource)) < count:
                    return False
        return True

    @staticmethod
    def _shareable(device: GPUDevice, vram_mib: int) -> bool:
        return (
            device.policy.allow_shared
            and not device.mig_enabled
            and device.exclusive is None
            and device.memory_mib is not None
            and device.reserved_mib + vram_mib <= device.policy.capacity_mib(device.memory_mib)
        )

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
    ) -> None:
        """Book devices for ``pod_uid``, all or none; :class:`LedgerError` on any over-commit.

        ``gpu_ids``: GPU indices. ``uuids`` (optional, same length): each entry's UUID; a
        ``GPU-`` UUID must match the device's (when known), a ``MIG-`` UUID books that MIG
        device of the GPU instead of the whole GPU. ``exclusive``: the pod holds each whole GPU
        alone and reserves all its memory, so ``vram_mib_per_gpu`` is ignored; otherwise it
        shares each GPU, reserving ``vram_mib_per_gpu`` MiB (one int for all, or one per GPU),
        as far as the device's :class:`SharingPolicy` allows. An empty ``gpu_ids`` books
        nothing. A pod holds at most one claim per node: :meth:`release` it first.
        O(devices in the claim).
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
                if instance.holder is not None:
                    raise LedgerError(
                        f"MIG device {uuid} on GPU {index} is held by pod {instance.holder}"
                    )
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
                mib = device.memory_mib or 0
            else:
                mib = self._check_share(device, vram[i])
            entries.append((index, device.uuid or "", mib, -1))
        for index, _, mib, position in entries:
            device = devices[index]
            if position >= 0:
                instance = device.mig[position]
                instance.holder = pod_uid
                instance.inferred = inferred
                continue
            if not device.holders:
                self._free -= 1
            device.holders[pod_uid] = mib
            device.reserved_mib += mib
            if exclusive:
                device.exclusive = pod_uid
                device.inferred = inferred
        self._claims[pod_uid] = _Claim(tuple(entries), exclusive, inferred, reservation_uid)

    def _check_share(self, device: GPUDevice, mib: int | None) -> int:
        index = device.index
        if not device.policy.allow_shared:
            raise LedgerError(f"GPU {index} cannot be shared (its policy is exclusive only)")
        if device.exclusive is not None:
            raise LedgerError(f"GPU {index} is held exclusively by pod {device.exclusive}")
        if mib is None or mib <= 0:
            raise LedgerError(f"a shared hold of GPU {index} must reserve some VRAM, got {mib}")
        if device.memory_mib is None:
            raise LedgerError(f"GPU {index} has unknown memory; it cannot be shared by VRAM")
        capacity = device.policy.capacity_mib(device.memory_mib)
        if device.reserved_mib + mib > capacity:
            raise LedgerError(
                f"GPU {index} has {capacity - device.reserved_mib} MiB left to reserve "
                f"(of {capacity}), {mib} MiB asked"
            )
        return mib

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
            if not device.holders:
                self._free += 1
        return True

    def clone(self) -> NodeLedger:
        """An independent copy (claims are immutable and shared). O(GPUs + MIG + holders)."""
        clone = NodeLedger.__new__(NodeLedger)
        clone.devices = tuple(d._clone() for d in self.devices)
        clone.inventory = self.inventory
        clone.policy = self.policy
        clone._claims = dict(self._claims)
        clone._free = self._free
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
            else:
                assert not device.inferred, device.describe()
                if device.holders:
                    assert device.policy.allow_shared, device.describe()
                    assert device.memory_mib is not None, device.describe()
                    capacity = device.policy.capacity_mib(device.memory_mib)
                    assert device.reserved_mib <= capacity, device.describe()
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
        assert self._free == sum(1 for d in self.devices if d.free), self._free
