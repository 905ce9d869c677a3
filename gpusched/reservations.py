"""Device reservations in ``coordination.k8s.io/v1`` Leases, one Lease per node.

Why Leases, and why one per node
--------------------------------
Two scheduler replicas must never hand the same GPU capacity to two pods. Each replica decides
from its own cache, which can lag the API; the API server's optimistic concurrency is the only
arbiter both see. So before a pod is bound, the devices it got are written into a Lease with a
``resourceVersion`` precondition: of two replicas racing for the same node, one write lands and
the other gets 409, re-reads the Lease, sees the devices taken and gives up (the pod goes back
to the queue). One Lease per node keeps it to **at most one Lease write per scheduled pod** (a
pod's devices are all on one node; a per-device layout would need one write per GPU), fewer
when several pods go to one node at once (group commit, ``ReservationWriter.reserve``), and
contention is confined to pods racing for the same node. With the Binding that carries the
decision as annotations, a scheduled pod costs at most two API writes.

Layout::

    Lease gpusched-system/gpusched-node-<node>
      metadata.labels      gpusched.io/node: <node>
      metadata.annotations gpusched.io/reservations: {"v":1,"r":{<uid>: {...}, ...}}
      spec                 holderIdentity (the replica that wrote last), renewTime,
                           leaseDurationSeconds

Each reservation records the pod (key and uid), GPU indices, VRAM per GPU, exclusivity, the
writing replica, and when it was written and expires (the writer's clock); later writers add
a share's ``swap`` and ``cores`` and the devices' ``uuids``, only when they say something, so
older readers (which ignore unknown fields) and older entries (read as before) still work.

What a write checks: exclusivity both ways, and each MIG device held once (``devices_free``);
for a share (a VRAM slice of a GPU) every sharing rule of :mod:`gpusched.cache.ledger` (VRAM
after overcommit, clients per GPU and per node, the no-swap rule, compute) with every
replica's shares counted, each pod once: from the Lease while its bind is in flight, from the
writer's cache once it is bound (``shares_fit``; the scheduler passes it as ``reserve``'s
``validate``).

Lifecycle of a reservation
--------------------------
- written by ``ReservationWriter.reserve`` in the binding cycle, before the Binding;
- the Binding copies its uid onto the pod (``gpusched.io/reservation-uid``); from then on the
  pod's annotations are what hold the devices, but the entry stays in the Lease while the pod
  may be running, because another replica whose watch has not yet shown the binding must still
  see the devices taken;
- it is dropped once it protects nothing (its pod gone, bound with another reservation, or
  never bound with it before it expired): by the next write to the same Lease (``prunable``)
  or by ``release``. The rule is ``gpusched.reservation_book``'s; docs/reservations.md tells
  the whole story. A binder never binds with a reservation close to expiry.

``resourceVersion`` is opaque (Kubernetes' API conventions): it is compared only for equality.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gpusched.kube.client import Kube, resource_path
from gpusched.kube.errors import (
    APIConflict,
    APIError,
    APINotFound,
    APIServerError,
    APITooManyRequests,
)

__all__ = [
    "LEASE_PREFIX",
    "NODE_LABEL",
    "RESERVATIONS_ANNOTATION",
    "LeaseFormatError",
    "NodeLease",
    "Reservation",
    "ReservationConflict",
    "ReservationWriter",
    "ShareTerms",
    "SharedGPU",
    "SharedGPULookup",
    "SharedNode",
    "SharedNodeLookup",
    "devices_free",
    "lease_name",
    "shares_fit",
]

log = logging.getLogger(__name__)

RESERVATIONS_ANNOTATION = "gpusched.io/reservations"
NODE_LABEL = "gpusched.io/node"
LEASE_PREFIX = "gpusched-node-"
_FORMAT_VERSION = 1
_MIG_UUID_PREFIX = "MIG-"


def lease_name(node: str) -> str:
    """The Lease for ``node`` (node names are DNS subdomains, so this one is too)."""
    return LEASE_PREFIX + node


class LeaseFormatError(ValueError):
    """A reservations Lease gpusched cannot read; its node is not trusted with new pods."""


class ReservationConflict(Exception):
    """The devices were taken by someone else between the decision and the write."""


@dataclass(frozen=True, slots=True)
class Reservation:
    uid: str
    pod: str  # namespace/name
    pod_uid: str
    gpu_ids: tuple[int, ...]
    vram_mib: tuple[int, ...]
    exclusive: bool
    expires: float  # unix seconds, on the writer's clock
    holder: str
    written: float | None = None
    """When it was written (unix seconds, on the writer's clock); ``None`` for an entry
    written before the field existed. See gpusched.reservation_book on what it decides."""
    swap: bool | None = None
    """A share's pod may spill to host memory (``swap-from-vram``); ``None`` for exclusive
    entries and for shares written before the field existed (counted as today: not pinned)."""
    cores: int = 0
    """A share's compute percent per GPU (HAMi's ``gpucores``); 0 when absent."""
    uuids: tuple[str, ...] = ()
    """The devices' UUIDs in ``gpu_ids``' order (``MIG-`` ones name MIG devices); empty for
    entries written before the field existed or GPUs of unknown UUID."""

    @property
    def mig(self) -> bool:
        """Whether it holds MIG devices (by their UUIDs; an older entry cannot say)."""
        return any(u.startswith(_MIG_UUID_PREFIX) for u in self.uuids)

    @property
    def share(self) -> bool:
        """A VRAM share (not whole GPUs, not MIG devices as far as its UUIDs tell)."""
        return not self.exclusive and not self.mig

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "pod": self.pod,
            "podUID": self.pod_uid,
            "gpus": list(self.gpu_ids),
            "vramMiB": list(self.vram_mib),
            "exclusive": self.exclusive,
            "expires": self.expires,
            "holder": self.holder,
        }
        if self.written is not None:
            out["written"] = self.written
        # Added later, written only when they say something: older readers ignore them.
        if self.swap is not None:
            out["swap"] = self.swap
        if self.cores:
            out["cores"] = self.cores
        if self.uuids:
            out["uuids"] = list(self.uuids)
        return out

    @classmethod
    def from_json(cls, uid: str, data: Mapping[str, Any]) -> Reservation:
        gpus = tuple(int(g) for g in data["gpus"])
        vram = tuple(int(v) for v in data.get("vramMiB", ()))
        if vram and len(vram) != len(gpus):
            raise ValueError("gpus and vramMiB differ in length")
        uuids = tuple(str(u) for u in data.get("uuids", ()))
        if uuids and len(uuids) != len(gpus):
            raise ValueError("gpus and uuids differ in length")
        swap = data.get("swap")
        cores = int(data.get("cores", 0))
        if not 0 <= cores <= 100:
            raise ValueError(f"cores {cores} is not 0..100")
        return cls(
            uid=uid,
            pod=str(data["pod"]),
            pod_uid=str(data["podUID"]),
            gpu_ids=gpus,
            vram_mib=vram,
            exclusive=bool(data.get("exclusive", True)),
            expires=float(data["expires"]),
            holder=str(data.get("holder", "")),
            written=float(data["written"]) if "written" in data else None,
            swap=None if swap is None else bool(swap),
            cores=cores,
            uuids=uuids,
        )


@dataclass(frozen=True)
class NodeLease:
    """The reservations on one node, as of ``resource_version`` ("" when no Lease exists)."""

    node: str
    reservations: Mapping[str, Reservation]
    resource_version: str = ""

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> NodeLease:
        meta = obj.get("metadata") or {}
        node = (meta.get("labels") or {}).get(NODE_LABEL) or str(meta.get("name", ""))[
            len(LEASE_PREFIX) :
        ]
        text = (meta.get("annotations") or {}).get(RESERVATIONS_ANNOTATION, "")
        reservations: dict[str, Reservation] = {}
        if text:
            try:
                data = json.loads(text)
                if data.get("v") != _FORMAT_VERSION:
                    raise ValueError(f"unknown format version {data.get('v')!r}")
                for uid, entry in (data.get("r") or {}).items():
                    reservations[uid] = Reservation.from_json(uid, entry)
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise LeaseFormatError(
                    f"Lease {meta.get('namespace')}/{meta.get('name')}: annotation "
                    f"{RESERVATIONS_ANNOTATION} is not valid ({exc}); delete the Lease to reset "
                    "the node's reservations once no gpusched replica is binding to it"
                ) from None
        return cls(node, reservations, str(meta.get("resourceVersion", "")))

    def held_gpus(self, exclude: str = "") -> set[int]:
        """GPU indices held exclusively by reservations other than ``exclude``."""
        return {
            g
            for uid, r in self.reservations.items()
            if uid != exclude and r.exclusive
            for g in r.gpu_ids
        }

    def to_object(
        self, namespace: str, holder: str, now: datetime, duration: int
    ) -> dict[str, Any]:
        payload = {
            "v": _FORMAT_VERSION,
            "r": {uid: r.to_json() for uid, r in sorted(self.reservations.items())},
        }
        meta: dict[str, Any] = {
            "name": lease_name(self.node),
            "namespace": namespace,
            "labels": {NODE_LABEL: self.node},
            "annotations": {RESERVATIONS_ANNOTATION: json.dumps(payload, separators=(",", ":"))},
        }
        if self.resource_version:
            meta["resourceVersion"] = self.resource_version
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": meta,
            "spec": {
                "holderIdentity": holder,
                "leaseDurationSeconds": duration,
                "renewTime": now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            },
        }


Validate = Callable[[NodeLease], None]
"""Raises ``ReservationConflict`` when the new reservation no longer fits the given state."""
Prunable = Callable[[Reservation], bool]
OnWrite = Callable[[str, str], None]
"""Called with ``(resource, verb)`` after each API write that succeeded (``"leases"``,
``"create"`` or ``"update"``): the scheduler's ``gpusched_api_writes_total``."""


def devices_free(reservation: Reservation) -> Validate:
    """Exclusivity both ways: an exclusive reservation (whole GPUs) needs GPUs no other
    reservation holds in any way; a non-exclusive one (a VRAM share, a MIG device) needs GPUs
    no other reservation holds exclusively. A MIG device (a ``MIG-`` UUID) is held once: no
    other entry may name its UUID (entries of older writers name none, and are not checked
    for it). Several shares of one GPU do not conflict here: their VRAM, clients and compute
    are ``shares_fit``'s."""
    migs = {u for u in reservation.uuids if u.startswith(_MIG_UUID_PREFIX)}

    def check(lease: NodeLease) -> None:
        wanted = set(reservation.gpu_ids)
        if reservation.exclusive:
            others = {
                g
                for uid, r in lease.reservations.items()
                if uid != reservation.uid
                for g in r.gpu_ids
            }
        else:
            others = lease.held_gpus(exclude=reservation.uid)
        taken = others & wanted
        if taken:
            raise ReservationConflict(
                f"GPU(s) {sorted(taken)} on node {lease.node} are reserved for another pod"
            )
        if migs:
            for uid, r in lease.reservations.items():
                held = migs.intersection(r.uuids) if uid != reservation.uid else None
                if held and r.pod_uid != reservation.pod_uid:
                    raise ReservationConflict(
                        f"MIG device(s) {sorted(held)} on node {lease.node} are reserved for "
                        f"pod {r.pod}"
                    )

    return check


ShareTerms = Callable[[str], tuple[bool, int] | None]
"""A holder's cache key -> its share's (swap, cores percent), or ``None`` when it holds no
share there (counted as swap-capable and taking no compute)."""


@dataclass(frozen=True, slots=True)
class SharedGPU:
    """One GPU as the writing replica's cache has it, for ``shares_fit``: what its shares may
    add up to (``capacity_mib``: memory x the node policy's VRAM overcommit percent), how many
    may hold it (``max_clients``), and its holders in the cache (cache key -> MiB reserved).
    ``memory_mib`` (physical; ``None``: the no-swap rule is not checked), ``cores_percent``
    (the compute to share out) and ``terms`` (each holder's swap and cores; ``None``: all
    swap-capable, no compute shares) give the no-swap and compute rules of
    :mod:`gpusched.cache.ledger` (rules 3 and 5)."""

    capacity_mib: int
    max_clients: int
    holders: Mapping[str, int]
    memory_mib: int | None = None
    cores_percent: int = 100
    terms: ShareTerms | None = None


@dataclass(frozen=True, slots=True)
class SharedNode:
    """A node as the writing replica's cache has it, for ``shares_fit``'s per-node client
    limit: ``max_clients`` (``maxClientsPerNode``; ``None``: no limit) and the cache keys of
    the pods holding a share of its GPUs (``clients``)."""

    max_clients: int | None
    clients: Collection[str]


SharedGPULookup = Callable[[str, int], SharedGPU | None]
"""``(node, GPU index)`` -> the GPU as the cache has it, or ``None`` (unknown node or GPU,
unknown memory, MIG mode): then ``shares_fit`` checks nothing more than ``devices_free``."""
SharedNodeLookup = Callable[[str], SharedNode | None]
"""``node`` -> the node as the cache has it, or ``None`` (unknown): no per-node check."""


@dataclass(slots=True)
class _Counted:
    """One holder of a GPU as ``shares_fit`` counts it."""

    mib: int
    swap: bool
    cores: int


def _pending(
    lease: NodeLease,
    reservation: Reservation,
    gpu: SharedGPULookup,
    unbound: Callable[[Reservation], bool],
) -> dict[str, dict[int, _Counted]]:
    """The Lease's shares to count, by pod uid then GPU index: entries of other pods whose
    bind is in flight (``unbound``) on GPUs that can be shared, each pod once at the largest
    VRAM, the least swap and the most compute its entries name. An entry without ``swap``
    (an older writer) counts as swap-capable, as before the field existed."""
    node = lease.node
    out: dict[str, dict[int, _Counted]] = {}
    for uid, r in lease.reservations.items():
        if uid == reservation.uid or not r.share or r.pod_uid == reservation.pod_uid:
            continue
        if not unbound(r):
            continue
        for position, index in enumerate(r.gpu_ids):
            if gpu(node, index) is None:  # MIG mode (an older MIG entry), unknown GPU
                continue
            mib = r.vram_mib[position] if r.vram_mib else 0
            swap = r.swap is not False
            per = out.setdefault(r.pod_uid, {})
            seen = per.get(index)
            if seen is None:
                per[index] = _Counted(mib, swap, r.cores)
            else:
                seen.mib = max(seen.mib, mib)
                seen.swap = seen.swap and swap
                seen.cores = max(seen.cores, r.cores)
    return out


def shares_fit(
    reservation: Reservation,
    gpu: SharedGPULookup,
    unbound: Callable[[Reservation], bool],
    phantom_prefix: str = "reservation/",
    node: SharedNodeLookup | None = None,
) -> Validate:
    """``devices_free``, and for a share (``exclusive`` false) that its node and every GPU it
    takes stay within the sharing rules of :mod:`gpusched.cache.ledger` once the Lease's
    other shares are counted: VRAM after overcommit and clients per GPU, clients per node
    (``node``), the no-swap rule (a pod that cannot swap finds its slice in physical memory,
    the non-swap shares counted together) and compute (cores percent, with HAMi's rule that
    once the compute is all given every holder has some).

    Two replicas each check shares against their own cache, so together they could give one
    GPU more than it has: the Lease is the only state both see, and a share entry does not
    conflict with another as an exclusive one does. So, per GPU of the share (and per node),
    the shares counted are
    - the Lease's shares whose pod the informer does not show bound (``unbound``: another
      replica's binds in flight, and this replica's own), one per pod (two replicas racing
      for one pod each write an entry; the pod binds once), and the new one;
    - the cache's holders of the GPU (bound pods, and this replica's assumed pods not yet in
      the Lease) but those counted from the Lease already: the pods of those entries, the
      new one's pod, and phantoms (cache keys starting with ``phantom_prefix``, another
      replica's reservations as the cache books them: the entries themselves are counted).
    A bound pod's entry stays in the Lease while it runs, but its pod is in the cache: it is
    counted there, once. Exclusive reservations (whole GPUs) and MIG devices are checked by
    ``devices_free`` alone. O(entries in the Lease + holders of the node's GPUs).
    """
    free = devices_free(reservation)
    if reservation.exclusive or reservation.mig:
        return free
    mine_swap = reservation.swap is not False
    mine_cores = reservation.cores

    def counted_from_cache(key: str, pending: Mapping[str, object]) -> bool:
        return (
            key not in pending and key != reservation.pod_uid and not key.startswith(phantom_prefix)
        )

    def check(lease: NodeLease) -> None:
        free(lease)
        pending = _pending(lease, reservation, gpu, unbound)
        if node is not None:
            _node_fits(lease.node, node(lease.node), pending, counted_from_cache)
        for position, index in enumerate(reservation.gpu_ids):
            state = gpu(lease.node, index)
            if state is None:
                continue
            terms = state.terms or _no_terms
            held = [
                _Counted(mib, *(terms(key) or (True, 0)))
                for key, mib in state.holders.items()
                if counted_from_cache(key, pending)
            ]
            held.extend(per[index] for per in pending.values() if index in per)
            mine = reservation.vram_mib[position] if reservation.vram_mib else 0
            _gpu_fits(lease.node, index, state, held, mine, mine_swap, mine_cores)

    return check


def _no_terms(key: str) -> None:
    return None


def _node_fits(
    name: str,
    state: SharedNode | None,
    pending: Mapping[str, Mapping[int, _Counted]],
    counted_from_cache: Callable[[str, Mapping[str, object]], bool],
) -> None:
    if state is None or state.max_clients is None:
        return
    clients = sum(1 for key in state.clients if counted_from_cache(key, pending))
    clients += len(pending) + 1
    if clients > state.max_clients:
        raise ReservationConflict(
            f"node {name} has its {state.max_clients} pods sharing its GPUs "
            "(maxClientsPerNode), some placed by another replica; the pod goes back to the "
            "queue to be placed again"
        )


def _gpu_fits(
    node: str,
    index: int,
    state: SharedGPU,
    held: list[_Counted],
    mine: int,
    swap: bool,
    cores: int,
) -> None:
    """The ledger's rules 2-5 on GPU ``index`` with ``held`` and the new share."""
    where = f"GPU {index} on node {node}"
    again = "the pod goes back to the queue to be placed again"
    vram = sum(h.mib for h in held) + mine
    if vram > state.capacity_mib:
        raise ReservationConflict(
            f"{where} has {state.capacity_mib} MiB for shares and {vram - mine} MiB of them "
            f"taken, some by another replica's pods; the pod asks {mine} MiB and {again}"
        )
    if len(held) + 1 > state.max_clients:
        raise ReservationConflict(
            f"{where} has its {state.max_clients} clients, some placed by another replica; {again}"
        )
    if not swap and state.memory_mib is not None:
        pinned = sum(h.mib for h in held if not h.swap) + mine
        if pinned > state.memory_mib:
            raise ReservationConflict(
                f"{where} has {state.memory_mib} MiB of memory and {pinned - mine} MiB of it "
                "promised to pods that cannot swap, some by another replica; the pod asks "
                f"{mine} MiB and cannot swap to host memory; {again}"
            )
    used = sum(h.cores for h in held)
    if cores or used:
        after = used + cores
        total = state.cores_percent
        if after > total:
            raise ReservationConflict(
                f"{where} has {total - used}% of its compute free, some taken by another "
                f"replica's pods; the pod asks {cores}% and {again}"
            )
        if after >= total and (not cores or any(not h.cores for h in held)):
            raise ReservationConflict(
                f"{where} would have its compute all given away while a client has none of "
                f"it, with another replica's pods counted; {again}"
            )


class ReservationWriter:
    """Writes reservations into node Leases with optimistic concurrency.

    ``writes`` counts the Lease writes that landed by verb (``create`` for a node's first
    reservation, ``update`` after), and ``on_write`` is told of each; ``conflicts`` counts
    those answered 409 or 404, which wrote nothing.
    """

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        identity: str,
        *,
        lease_duration: int = 60,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        max_attempts: int = 5,
        on_write: OnWrite | None = None,
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.identity = identity
        self.lease_duration = lease_duration
        self.now = now
        self.max_attempts = max_attempts
        self.on_write = on_write
        self.writes: Counter[str] = Counter()  # verb -> Lease writes that landed
        self.conflicts = 0
        # This replica's own writes to a node's Lease are serialised, and the Lease as last
        # written is remembered: concurrent binds to one node never conflict with each other.
        self._locks: dict[str, asyncio.Lock] = {}
        self._latest: dict[str, NodeLease] = {}
        # Group commit (see ``reserve``): per node, reservations waiting for the next write,
        # whether a write is in flight, and the newest informer view and prune rule passed in.
        self._queued: dict[
            str, list[tuple[Reservation, Validate | None, asyncio.Future[NodeLease]]]
        ] = {}
        self._writing: set[str] = set()
        self._known: dict[str, NodeLease] = {}
        self._prunable: dict[str, Prunable] = {}

    def observed(self, lease: NodeLease) -> None:
        """The informer delivered ``lease``. Once it has delivered this writer's last write to
        the node, its view is at least as new as that write (a watch delivers a Lease's
        versions in order), and ``reserve``'s ``known`` is the one to start from."""
        latest = self._latest.get(lease.node)
        if latest is not None and latest.resource_version == lease.resource_version:
            del self._latest[lease.node]

    def _newest(self, node: str, known: NodeLease | None) -> NodeLease | None:
        """Where a write to ``node`` starts: this writer's last write until the informer has
        shown it (``observed``), the informer's view after. ``resourceVersion`` is opaque
        (Kubernetes' API conventions): it is compared only for equality, never ordered. A
        wrong guess (the informer re-listed past our write, another replica wrote since) costs
        one 409 and a read, never a lost reservation: the precondition decides."""
        latest = self._latest.get(node)
        return latest if latest is not None else known

    def _path(self, node: str | None = None) -> str:
        return resource_path(
            "coordination.k8s.io",
            "v1",
            "leases",
            self.namespace,
            lease_name(node) if node else None,
        )

    def _wrote(self, verb: str) -> None:
        self.writes[verb] += 1
        if self.on_write is not None:
            self.on_write("leases", verb)

    async def read(self, node: str) -> NodeLease:
        try:
            return NodeLease.from_object(await self.kube.get(self._path(node)))
        except APINotFound:
            return NodeLease(node, {})

    def new_reservation(
        self,
        uid: str,
        pod: str,
        pod_uid: str,
        gpu_ids: Iterable[int],
        vram_mib: Iterable[int],
        exclusive: bool = True,
        *,
        swap: bool | None = None,
        cores: int = 0,
        uuids: Iterable[str] = (),
    ) -> Reservation:
        """A reservation written now by this replica. ``swap`` and ``cores``: a share's terms
        (``shares_fit`` checks the no-swap and compute rules with them); ``uuids``: the
        devices' UUIDs (a MIG device's makes it held once across replicas)."""
        now = self.now().timestamp()
        return Reservation(
            uid=uid,
            pod=pod,
            pod_uid=pod_uid,
            gpu_ids=tuple(gpu_ids),
            vram_mib=tuple(vram_mib),
            exclusive=exclusive,
            expires=now + self.lease_duration,
            holder=self.identity,
            written=now,
            swap=None if exclusive else swap,
            cores=0 if exclusive else cores,
            uuids=tuple(uuids),
        )

    async def reserve(
        self,
        node: str,
        reservation: Reservation,
        known: NodeLease | None = None,
        validate: Validate | None = None,
        prunable: Prunable | None = None,
    ) -> NodeLease:
        """Add ``reservation`` to ``node``'s Lease; returns the Lease as written.

        ``known`` is the Lease as the caller's informer last saw it (saves a read when it is
        current). On a 409 the Lease is re-read, ``validate`` re-checked against it (raising
        ``ReservationConflict`` when the devices are gone) and the write retried. Entries for
        which ``prunable`` says yes are dropped in the same write.

        **Group commit.** Writes to one node's Lease are serialised within a replica; the
        reservations that arrive while a write is in flight go into the next write together,
        each validated on its own (one that conflicts fails alone). A burst that packs a node
        (an equivalence class puts eight 1-GPU pods on one node in a row) then costs one write
        per round trip rather than one per pod, and no reservation waits longer than it would
        behind the lock.
        """
        if known is not None:
            self._known[node] = known
        if prunable is not None:
            self._prunable[node] = prunable
        done: asyncio.Future[NodeLease] = asyncio.get_running_loop().create_future()
        self._queued.setdefault(node, []).append((reservation, validate, done))
        if node not in self._writing:
            self._writing.add(node)
            try:
                await self._write_queued(node)
            finally:
                self._writing.discard(node)
                # Whoever is left (this writer was cancelled): they retry with backoff.
                for _, _, waiting in self._queued.pop(node, []):
                    if not waiting.done():
                        waiting.set_exception(
                            ReservationConflict(f"node {node}: the Lease writer stopped")
                        )
        return await done

    async def _write_queued(self, node: str) -> None:
        """Write every queued reservation of ``node``, a batch per write, until none is left."""
        while self._queued.get(node):
            batch = self._queued.pop(node)
            try:
                async with self._locks.setdefault(node, asyncio.Lock()):  # releases wait
                    written, failed = await self._reserve(
                        node, batch, self._known.pop(node, None), self._prunable.get(node)
                    )
            except BaseException as exc:
                # An API error fails the whole batch; so does this writer being cancelled,
                # as a conflict (never a cancellation of the other pods' binding cycles).
                failure = (
                    exc
                    if isinstance(exc, Exception)
                    else ReservationConflict(f"node {node}: the Lease writer stopped")
                )
                for _, _, done in batch:
                    if not done.done():
                        done.set_exception(failure)
                if not isinstance(exc, Exception):
                    raise
                continue
            if written is not None:
                self._latest[node] = written
            for reservation, _, done in batch:
                if done.done():
                    continue
                conflict = failed.get(reservation.uid)
                if conflict is not None:
                    done.set_exception(conflict)
                elif written is not None:
                    done.set_result(written)

    async def _reserve(
        self,
        node: str,
        batch: list[tuple[Reservation, Validate | None, asyncio.Future[NodeLease]]],
        known: NodeLease | None,
        prunable: Prunable | None,
    ) -> tuple[NodeLease | None, dict[str, ReservationConflict]]:
        """One write carrying every reservation of ``batch`` that fits, and the others'
        conflicts by reservation uid (the Lease written is ``None`` when none fit). Raises
        ``ReservationConflict`` for all when the Lease keeps changing."""
        newest = self._newest(node, known)
        current = newest if newest is not None else await self.read(node)
        transient: APIError | None = None
        for _attempt in range(self.max_attempts):
            transient = None
            # Entries are never dropped for being "the same pod's": an older reservation of the
            # pod may be the one it is bound with (a Binding whose response was lost), or
            # another replica's that bound it. Only what ``prunable`` vouches for goes.
            kept = {
                uid: r for uid, r in current.reservations.items() if not (prunable and prunable(r))
            }
            failed: dict[str, ReservationConflict] = {}
            for reservation, validate, done in batch:
                if done.done():  # its caller gave up (cancelled)
                    continue
                check = validate or devices_free(reservation)
                try:
                    check(NodeLease(node, kept, current.resource_version))
                except ReservationConflict as exc:
                    failed[reservation.uid] = exc
                    continue
                kept[reservation.uid] = reservation
            if not any(r.uid in kept for r, _, _ in batch):
                return None, failed  # nothing to write
            desired = NodeLease(node, kept, current.resource_version)
            body = desired.to_object(self.namespace, self.identity, self.now(), self.lease_duration)
            try:
                if current.resource_version:
                    verb = "update"
                    written = await self.kube.replace(self._path(node), body)
                else:
                    verb = "create"
                    written = await self.kube.create(self._path(), body)
            except APINotFound as exc:
                if verb == "create":  # no Lease to race for: the namespace itself is missing
                    status = dict(exc.status)
                    status["message"] = (
                        f"cannot write the reservations of node {node}: namespace "
                        f"{self.namespace!r} does not exist (create it, or set "
                        f"reservations.namespace in the configuration): {exc.message}"
                    )
                    raise APINotFound(exc.code, status) from exc
                self.conflicts += 1  # the Lease was deleted since we read it
                current = await self.read(node)
                continue
            except APIConflict:
                # Someone else wrote the Lease since we read it.
                self.conflicts += 1
                current = await self.read(node)
                continue
            except (APIServerError, APITooManyRequests) as exc:
                # Transient, and maybe applied: read again and retry (a landed write shows
                # our own entries, which validate against themselves). Not retried, one
                # error would fail every reservation of the batch.
                log.info("node %s: writing the reservations Lease: %s; retrying", node, exc)
                transient = exc
                current = await self.read(node)
                continue
            self._wrote(verb)
            return NodeLease.from_object(written), failed
        if transient is not None:
            raise transient
        raise ReservationConflict(
            f"node {node}: the reservations Lease kept changing under {self.max_attempts} attempts"
        )

    async def release(self, node: str, uids: Iterable[str]) -> None:
        """Drop reservations (a failed bind's, or entries that protect nothing); best effort,
        expiry and the next write cover what this misses. Writes nothing when the Lease no
        longer holds any of them (idempotent)."""
        async with self._locks.setdefault(node, asyncio.Lock()):
            await self._release(node, set(uids))

    async def _release(self, node: str, drop: set[str]) -> None:
        for _attempt in range(self.max_attempts):
            current = await self.read(node)
            if not drop & set(current.reservations) or not current.resource_version:
                return
            kept = {u: r for u, r in current.reservations.items() if u not in drop}
            body = NodeLease(node, kept, current.resource_version).to_object(
                self.namespace, self.identity, self.now(), self.lease_duration
            )
            try:
                self._latest[node] = NodeLease.from_object(
                    await self.kube.replace(self._path(node), body)
                )
                self._wrote("update")
                return
            except (APIConflict, APINotFound):
                self.conflicts += 1
                continue
        log.warning("node %s: could not release reservations %s; they will expire", node, drop)
