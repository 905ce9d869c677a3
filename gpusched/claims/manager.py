"""GpuClaimManager: which pod holds each GpuClaim, and the status that says what it got.

A claim is held by one pod at a time (``ReadWriteOncePod``-style, docs/gpuclaim.md): a second
pod that names it waits, and is retried when the holder goes. The manager knows:

- the claims, from the informer (:meth:`on_claim`); it is the
  :class:`~gpusched.gpu_requests.gpuclaim.ClaimSpecs` the reader asks for a claim's spec;
- the holders: pods reserved in this scheduler (:meth:`reserve`, until bound or unreserved)
  and bound pods as the pod informer shows them (``spec.nodeName`` and the
  ``gpusched.io/gpu-ids``/``gpu-uuids`` annotations), so a restarted scheduler or another
  replica derives the same holders from the API alone;
- the pods waiting for a claim (missing, or held by another pod): :meth:`on_claim` and
  :meth:`on_pod` return the uids to re-queue when that changes;
- the live pods that name each claim, so a status naming a pod that is gone holds nothing.

:meth:`acquire` (PreBind) is the atomic step: the status written conditional on the
resourceVersion of a copy that shows no other live holder, so two replicas never give one
claim to two pods. A pod the status names holds the claim until the API server says it is gone
or finished (this replica's pod informer may not have shown it yet), and the pod becomes this
manager's holder only once the write succeeded, so a :meth:`flush` meanwhile (also conditional
on the resourceVersion) never writes a status over another replica's.

The status (:meth:`desired_status`) is a function of the holders: ``Allocated`` with the
holder's node, devices (index and UUID), ``bandwidthGBps`` (the slowest pair among them, from
the node's inventory: :func:`slowest_link`) and ``pods``; ``Released`` once the last holder
went (only for a claim that was allocated); ``Pending`` with ``message`` (the waiting pod's own
``PodScheduled=False`` message, from its pod event) while a pod that names it is unschedulable;
nothing is written for a claim never held nor waited for.
:meth:`flush` merge-patches ``status`` of the claims whose desired status differs from what the
informer last showed, and keeps :data:`FINALIZER` on a claim exactly while a bound pod holds it
(deleting a claim in use waits for the pod: never a leak). A claim pod costs two writes when
bound (status, finalizer) and two when it goes (status, finalizer).

All methods but :meth:`acquire` and :meth:`flush` are synchronous and O(1) per call (a status
is O(GPUs²) for the bandwidth); they run on the event loop between scheduling cycles, so no lock
is needed.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from gpusched.annotations import AnnotationError, parse_assignment
from gpusched.cache import TERMINAL_PHASES
from gpusched.gpu_requests import gpuclaim
from gpusched.inventory import GPUNodeInventory
from gpusched.kube.client import Kube, resource_path
from gpusched.kube.errors import APIConflict, APIError, APINotFound
from gpusched.topology import pair_gbps

__all__ = ["FINALIZER", "GpuClaimManager", "Holder", "Key", "slowest_link"]

log = logging.getLogger(__name__)

Key = tuple[str, str]
"""``(namespace, name)`` of a claim."""

FINALIZER: Final = "gpusched.io/claim-in-use"
"""On a claim while a pod holds it, so deleting the claim waits for the pod (as
``kubernetes.io/pvc-protection`` does for a volume in use)."""
ALLOCATED: Final = "Allocated"
_ACQUIRE_TRIES: Final = 3
RELEASED: Final = "Released"
PENDING: Final = "Pending"


@dataclass(frozen=True, slots=True)
class Holder:
    """A pod holding a claim: reserved here (no node yet known to the API) or bound."""

    uid: str
    name: str
    node: str | None = None
    devices: tuple[tuple[int, str], ...] = ()
    """``(index, uuid)`` of each device, in the pod's annotation order (uuid may be empty)."""
    confirmed: bool = False
    """Seen bound in a pod event (not only reserved or bound by this scheduler)."""


def slowest_link(inventory: GPUNodeInventory, ids: Iterable[int]) -> float | None:
    """GB/s of the slowest pair among GPUs ``ids`` on the node (both directions, as NVIDIA
    quotes NVLink: :func:`~gpusched.topology.pair_gbps` of the pair's NVLinks and products; a
    pair without NVLink moves PCIe's); ``None`` for fewer than two GPUs or an index the
    inventory lacks. O(k²)."""
    gpus = sorted(set(ids))
    count = len(inventory.gpus)
    if len(gpus) < 2 or gpus[-1] >= count:
        return None
    nvlinks = {(k.a, k.b): k.nvlinks for k in inventory.links}
    products = [g.product for g in inventory.gpus]
    return min(
        pair_gbps(nvlinks.get((a, b), 0), products[a], products[b])
        for a, b in itertools.combinations(gpus, 2)
    )


def _key(pod: Mapping[str, Any]) -> Key | None:
    name = gpuclaim.claim_name(pod)
    if not name:
        return None
    return str(pod["metadata"].get("namespace") or "default"), name


def _uid(pod: Mapping[str, Any]) -> str:
    return str(pod["metadata"].get("uid") or "")


class GpuClaimManager:
    """Claims, their holders and their status (module docstring)."""

    def __init__(self, inventory_of: Callable[[str], GPUNodeInventory | None]) -> None:
        """``inventory_of(node)``: the node's inventory, for the bandwidth (None: unknown)."""
        self._inventory_of = inventory_of
        self._claims: dict[Key, dict[str, Any]] = {}
        self._holders: dict[Key, dict[str, Holder]] = {}
        self._held: dict[str, Key] = {}
        """Pod uid -> the claim it holds."""
        self._waiting: dict[Key, set[str]] = {}
        self._live: dict[Key, dict[str, str]] = {}
        """Claim -> the pods (uid -> name) not deleted nor finished that name it, any state."""
        self._pending: dict[Key, dict[str, str]] = {}
        """Claim -> its unbound pods' PodScheduled=False messages (uid -> message): the
        claim's ``status.message`` while nobody holds it."""
        self._dirty: set[Key] = set()
        self.changed = asyncio.Event()
        """Set when a claim's status may need a write (:meth:`flush` clears it)."""
        self.failed = 0
        """Writes the last :meth:`flush` could not make (kept marked, retried)."""

    # -- the reader's source -----------------------------------------------------------

    def claim_spec(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        obj = self._claims.get((namespace, name))
        if obj is None:
            return None
        spec: Mapping[str, Any] = obj.get("spec") or {}
        return spec

    # -- informers ---------------------------------------------------------------------

    def on_claim(self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> list[str]:
        """A claim event; returns the pods waiting for it (to re-queue) when it appears or its
        spec changes."""
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
        if kind == "DELETED":
            self._claims.pop(key, None)
            self._dirty.discard(key)
            return []
        prior = self._claims.get(key)
        self._claims[key] = obj
        if self._holders.get(key):
            self._mark(key)  # a status edited by someone else is written back
        if prior is not None and prior.get("spec") == obj.get("spec"):
            return []  # a status write: nothing a waiting pod waits for
        return sorted(self._waiting.pop(key, ()))

    def on_pod(self, kind: str, pod: Mapping[str, Any], old: Mapping[str, Any] | None) -> list[str]:
        """A pod event; returns the pods to re-queue (those waiting for a claim it released)."""
        key = _key(pod) or (_key(old) if old is not None else None)
        uid = _uid(pod)
        if key is None:
            return []
        gone = kind == "DELETED" or (pod.get("status") or {}).get("phase") in TERMINAL_PHASES
        name = str(pod["metadata"].get("name") or "")
        self._note_pending(key, uid, None if gone else pod)
        if gone:
            self._waiting.get(key, set()).discard(uid)
            live = self._live.get(key, {})
            live.pop(uid, None)
            if not live:
                self._live.pop(key, None)
            self._mark(key)  # a status that still names it is released
            return self._release(uid)
        self._live.setdefault(key, {})[uid] = name
        node = (pod.get("spec") or {}).get("nodeName")
        if not node:
            return []
        try:
            assignment = parse_assignment(pod)
        except AnnotationError:
            assignment = None
        devices: tuple[tuple[int, str], ...] = ()
        if assignment is not None:
            uuids = assignment.gpu_uuids or ("",) * len(assignment.gpu_ids)
            devices = tuple(zip(assignment.gpu_ids, uuids, strict=True))
        self._waiting.get(key, set()).discard(uid)
        self._hold(key, Holder(uid, name, node, devices, confirmed=True))
        return []

    def _note_pending(self, key: Key, uid: str, pod: Mapping[str, Any] | None) -> None:
        """Keep the message the pod's ``PodScheduled=False`` condition carries while it is
        unbound (``None``: gone); mark the claim when that changes what its status says."""
        message = None
        if pod is not None and not (pod.get("spec") or {}).get("nodeName"):
            for c in (pod.get("status") or {}).get("conditions") or ():
                if c.get("type") == "PodScheduled" and c.get("status") == "False":
                    message = str(c.get("message") or c.get("reason") or "") or None
        pending = self._pending.get(key, {})
        if pending.get(uid) == message:
            return
        if message is None:
            pending.pop(uid, None)
            if not pending:
                self._pending.pop(key, None)
        else:
            self._pending.setdefault(key, {})[uid] = message
        self._mark(key)

    # -- the scheduling cycle -------------------------------------------------------------

    def check(self, pod: Mapping[str, Any]) -> str | None:
        """Why the pod cannot use its claim now (missing, or held by another pod), or None.
        A pod told why is remembered and re-queued when that changes."""
        key = _key(pod)
        if key is None:
            return None
        uid = _uid(pod)
        where = f"{gpuclaim.KIND} {key[0]}/{key[1]}"
        if key not in self._claims:
            self._waiting.setdefault(key, set()).add(uid)
            return (
                f'{gpuclaim.ANNOTATION}: "{key[1]}" refers to {where}, which does not exist; '
                f"create it (kubectl get gclaim -n {key[0]}), or fix the name; the pod is "
                "retried when it appears"
            )
        if (self._claims[key].get("metadata") or {}).get("deletionTimestamp"):
            self._waiting.setdefault(key, set()).add(uid)
            return f"{where} is being deleted; give the pod another claim, or create it again"
        name = str(pod["metadata"].get("name") or "")
        others = {h.name for u, h in self._holders.get(key, {}).items() if u != uid}
        others.update(p for p in self._status_holders(key) if p != name)
        if others:
            self._waiting.setdefault(key, set()).add(uid)
            return (
                f"{where} is held by pod {', '.join(sorted(others))} (a claim serves one pod at "
                "a time); the pod is retried when that pod ends, or give it a claim of its own"
            )
        return None

    def reserve(self, pod: Mapping[str, Any]) -> None:
        """The pod was reserved in this cycle: it holds its claim until unreserved or gone."""
        key = _key(pod)
        if key is not None and _uid(pod) not in self._held:
            self._hold(key, Holder(_uid(pod), str(pod["metadata"].get("name") or "")))

    def unreserve(self, pod: Mapping[str, Any]) -> list[str]:
        """Undo :meth:`reserve` (and :meth:`acquire`) of a pod not seen bound; returns the pods
        to re-queue. Idempotent."""
        holder = self._holders.get(self._held.get(_uid(pod), ("", "")), {}).get(_uid(pod))
        if holder is None or holder.confirmed:
            return []
        return self._release(_uid(pod))

    async def acquire(
        self, kube: Kube, pod: Mapping[str, Any], node: str, devices: Iterable[tuple[int, str]]
    ) -> str | None:
        """The atomic step (PreBind): write the claim's status for ``pod`` on ``node``,
        conditional on the resourceVersion of the copy that shows no other live holder, so two
        replicas never give one claim to two pods. Returns why not (another pod got it first,
        or the claim is gone), or ``None`` once written. On a conflict the claim is read again
        and the check repeated (at most :data:`_ACQUIRE_TRIES` writes)."""
        key = _key(pod)
        if key is None:
            return None
        name = str(pod["metadata"].get("name") or "")
        # The pod becomes a holder only once the write succeeded: before, a flush of this
        # manager must not write a status naming it (it could overwrite another replica's).
        holder = Holder(_uid(pod), name, node, tuple(devices))
        path = resource_path(gpuclaim.GROUP, gpuclaim.VERSION, gpuclaim.PLURAL, key[0], key[1])
        where = f"{gpuclaim.KIND} {key[0]}/{key[1]}"
        for _ in range(_ACQUIRE_TRIES):
            obj = self._claims.get(key)
            if obj is None:
                return f"{where} was deleted"
            if (obj.get("metadata") or {}).get("deletionTimestamp"):
                return f"{where} is being deleted"
            others = [p for p in await self._api_holders(kube, key) if p != name]
            if others:
                return f"{where} is held by pod {', '.join(sorted(others))}; retried when it ends"
            desired = self.desired_status(key, adding=holder)
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            body = {"metadata": {"resourceVersion": rv}, "status": desired}
            try:
                self._store(key, await kube.patch(f"{path}/status", body))
            except APIConflict:
                try:
                    self._store(key, await kube.get(path))
                except APINotFound:
                    return f"{where} was deleted"
                continue
            except APINotFound:
                return f"{where} was deleted"
            self.bound(pod, node, devices)
            try:
                await self._protect(kube, path, key)
            except APIError as exc:  # the status is written: the next flush adds the finalizer
                log.warning("GpuClaim %s/%s: adding its finalizer failed: %s", *key, exc)
                self._mark(key)
            return None
        return f"{where} is being written by another scheduler; retried"

    async def _api_holders(self, kube: Kube, key: Key) -> list[str]:
        """The pods the claim's status names that still hold it, asking the API server about
        those the pod informer has not shown (another replica's pod may be newer than this
        replica's informer): a pod holds the claim until it is gone or finished."""
        status = (self._claims.get(key) or {}).get("status") or {}
        if status.get("phase") != ALLOCATED:
            return []
        live = set(self._live.get(key, {}).values())
        out = []
        for name in (str(p) for p in status.get("pods") or ()):
            if name in live:
                out.append(name)
                continue
            try:
                pod = await kube.get(resource_path("", "v1", "pods", key[0], name))
            except APINotFound:
                continue
            if (pod.get("status") or {}).get("phase") not in TERMINAL_PHASES:
                out.append(name)
        return out

    def _in_use(self, key: Key) -> bool:
        """A pod holds the claim: bound here or seen bound, or live and named by its status."""
        bound = any(h.node is not None for h in self._holders.get(key, {}).values())
        return bound or bool(self._status_holders(key))

    def _status_holders(self, key: Key) -> list[str]:
        """The pods the claim's status says hold it and that still live (a status naming
        only deleted or finished pods is stale: it is released at the next flush)."""
        status = (self._claims.get(key) or {}).get("status") or {}
        if status.get("phase") != ALLOCATED:
            return []
        live = set(self._live.get(key, {}).values())
        return [str(p) for p in status.get("pods") or () if p in live]

    def bound(self, pod: Mapping[str, Any], node: str, devices: Iterable[tuple[int, str]]) -> None:
        """The pod was bound to ``node`` with ``devices`` (before the pod event shows it)."""
        key = _key(pod)
        if key is not None:
            name = str(pod["metadata"].get("name") or "")
            self._hold(key, Holder(_uid(pod), name, node, tuple(devices)))

    # -- status ----------------------------------------------------------------------------

    def holders(self, namespace: str, name: str) -> list[Holder]:
        return sorted(self._holders.get((namespace, name), {}).values(), key=lambda h: h.name)

    def desired_status(self, key: Key, adding: Holder | None = None) -> dict[str, Any] | None:
        """The claim's status as its holders (and ``adding``) make it (module docstring);
        ``None``: no write."""
        bound = [h for h in self.holders(*key) if h.node is not None and h != adding]
        if adding is not None:
            bound = sorted([*bound, adding], key=lambda h: h.name)
        current = (self._claims.get(key) or {}).get("status") or {}
        if not bound:
            if current.get("phase") == ALLOCATED:
                if self._status_holders(key):
                    return None  # held by a live pod another replica binds
                return {
                    "phase": RELEASED,
                    "nodeName": None,
                    "devices": [],
                    "bandwidthGBps": None,
                    "pods": [],
                    "message": None,
                }
            waiting = self._pending.get(key)
            if waiting:  # why its pod waits, as its condition says (by uid: alike on replicas)
                return {"phase": PENDING, "message": waiting[min(waiting)]}
            if current.get("message"):
                return {"message": None}  # nobody waits any more
            return None  # never held, nobody waiting: no write
        first = bound[0]
        inventory = self._inventory_of(first.node) if first.node else None
        gbps = (
            slowest_link(inventory, (i for i, _ in first.devices))
            if inventory is not None
            else None
        )
        return {
            "phase": ALLOCATED,
            "nodeName": first.node,
            "devices": [{"index": i, "uuid": u} if u else {"index": i} for i, u in first.devices],
            "bandwidthGBps": gbps,
            "pods": [h.name for h in bound],
            "message": None,
        }

    async def flush(self, kube: Kube) -> int:
        """Write every claim marked since the last flush whose status or finalizer differs
        from the informer's copy; returns the writes. A claim whose write fails (other than
        NotFound: it is gone) stays marked, and :attr:`failed` counts it."""
        self.changed.clear()
        keys, self._dirty = sorted(self._dirty), set()
        writes = self.failed = 0
        for key in keys:
            try:
                writes += await self._write(kube, key)
            except APINotFound:
                continue
            except APIError as exc:
                log.warning("GpuClaim %s/%s: writing it failed: %s", *key, exc)
                self.failed += 1
                self._mark(key)
        return writes

    async def _write(self, kube: Kube, key: Key) -> int:
        """Held: the finalizer, then the status; released: the status, then no finalizer (after
        which a claim being deleted goes)."""
        if key not in self._claims:
            return 0
        held = self._in_use(key)
        path = resource_path(gpuclaim.GROUP, gpuclaim.VERSION, gpuclaim.PLURAL, key[0], key[1])
        writes = await self._protect(kube, path, key) if held else 0
        desired = self.desired_status(key)
        current = (self._claims.get(key) or {}).get("status") or {}
        if desired is not None and not _same(current, desired):
            if desired["phase"] == RELEASED and await self._api_holders(kube, key):
                return writes  # another replica's pod holds it; its pod event comes later
            obj = self._claims.get(key) or {}
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            body = {"metadata": {"resourceVersion": rv}, "status": desired}
            try:
                self._store(key, await kube.patch(f"{path}/status", body))
            except APIConflict:  # written since: judge again on the server's copy
                self._store(key, await kube.get(path))
                self._mark(key)
                return writes
            writes += 1
        if not held:
            writes += await self._protect(kube, path, key)
        return writes

    async def _protect(self, kube: Kube, path: str, key: Key) -> int:
        """Give the claim :data:`FINALIZER` while it is held, take it away once not (one merge
        patch, conditional on the copy's resourceVersion); returns the writes (0 or 1)."""
        obj = self._claims.get(key)
        if obj is None:
            return 0
        meta = obj.get("metadata") or {}
        held = self._in_use(key)
        finalizers = [str(f) for f in meta.get("finalizers") or ()]
        if (FINALIZER in finalizers) == held or (held and meta.get("deletionTimestamp")):
            return 0  # as it should be; or being deleted: none can be added
        wanted = [*finalizers, FINALIZER] if held else [f for f in finalizers if f != FINALIZER]
        body = {"metadata": {"finalizers": wanted, "resourceVersion": meta.get("resourceVersion")}}
        self._store(key, await kube.patch(path, body))
        return 1

    def _store(self, key: Key, updated: Any) -> None:
        """The server's answer to a write, as the claim's copy until the informer's next."""
        if isinstance(updated, dict) and key in self._claims:
            self._claims[key] = updated

    # -- internals ---------------------------------------------------------------------

    def _mark(self, key: Key) -> None:
        self._dirty.add(key)
        self.changed.set()

    def _hold(self, key: Key, holder: Holder) -> None:
        prior = self._held.get(holder.uid)
        if prior is not None and prior != key:
            self._release(holder.uid)
        if self._holders.setdefault(key, {}).get(holder.uid) != holder:
            self._holders[key][holder.uid] = holder
            self._held[holder.uid] = key
            self._mark(key)

    def _release(self, uid: str) -> list[str]:
        key = self._held.pop(uid, None)
        if key is None:
            return []
        holders = self._holders.get(key, {})
        holders.pop(uid, None)
        if not holders:
            self._holders.pop(key, None)
        self._mark(key)
        return sorted(self._waiting.pop(key, ()))

    def _check(self) -> None:
        """Every invariant (tests call it after each step)."""
        for key, holders in self._holders.items():
            assert holders, f"{key}: empty holder map kept"
            for uid in holders:
                assert self._held[uid] == key, f"{uid} held under {key} but indexed elsewhere"
        for key, live in self._live.items():
            assert live, f"{key}: empty live map kept"
        for uid, key in self._held.items():
            assert uid in self._holders.get(key, {}), f"{uid} indexed but not held"
            for waiting in self._waiting.values():
                assert uid not in waiting or self._held[uid] != key


def _same(current: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    """Whether ``current`` already says ``desired`` (a ``None`` in desired: absent)."""
    for name, value in desired.items():
        have = current.get(name)
        if value is None or value == []:
            if have not in (None, []):
                return False
        elif have != value:
            return False
    return True
