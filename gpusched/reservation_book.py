"""What one replica knows of the reservations in the node Leases, and which of them protect
nothing any more.

The Leases (``gpusched.reservations``) hold every replica's reservations. A replica's cache
counts the GPUs of the pods it sees; a reservation whose pod it does not see bound yet (another
replica's bind in flight, or one of its own binds whose outcome is unknown) is counted as a
*phantom*: an assumed pod under a key of its own, ``reservation/<uid>``, so the next cycles see
those GPUs taken instead of finding out with a 409. A phantom is booked as what its entry
reserves: whole GPUs, a share (its VRAM and one client on each GPU, with its swap and compute
terms: other shares may still join), or MIG devices by UUID; and beyond this replica's limits
if need be (it holds its GPUs whatever this replica thinks). A phantom goes when its
reservation leaves the Lease, when its pod shows up bound (the pod's own booking takes over)
or goes away, or after the cache's TTL for assumed pods.

A reservation is **prunable** (dropped from its Lease by the next write to it, by the release
of superseded reservations, or by the periodic collector) when it protects nothing:

- its pod is gone: seen deleted or finished by this replica, or absent from the pods informer
  while the reservation was written before that informer's first list (see below);
- this replica knows its own bind with it failed (``mark_dead``);
- its pod is bound with another reservation (a replica that lost the race: released at once,
  one Lease write per node, by whichever replica sees it first; the other finds nothing to do);
- it expired without its pod being bound with it (the writer died between reserve and bind).

**Clock skew.** ``expires`` and ``written`` are on the writing replica's clock and are compared
with this replica's. ``max_clock_skew`` (seconds; ``Reservations.maxClockSkewSeconds``) is the
difference between two replicas' clocks the rules tolerate: an entry counts as expired only
``max_clock_skew`` after its ``expires``, and as written before the list only if ``written +
max_clock_skew`` is before the list began. A larger skew than configured can prune a live
reservation early (then two pods may be given the same GPU); a larger setting only keeps dead
entries longer.

**Gone before the list.** A replica that starts knows, once its pods informer has listed, every
pod that exists. A reservation is written only for a pod its writer had seen, so a reservation
written before the list began is for a pod that existed then; if the informer (the list and
every event since) does not have that pod, the pod was deleted. A reservation written after
the list began may be for a pod created since, which the informer may not show yet: it is kept
until its pod shows up, goes, or the reservation expires. Entries without ``written`` (an older
writer) fall back to expiry.

Costs: each Lease event is O(reservations in it); ``prunable`` is O(1) dict lookups; the
collector is O(all reservations) per period. Memory: O(reservations) plus two bounded
recently-gone sets.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from gpusched.annotations import RESERVATION_UID, Assignment
from gpusched.cache import SchedulerCache
from gpusched.cache.errors import CacheError, LedgerError
from gpusched.clock import Clock
from gpusched.gpu_requests.hami import RESOURCE_GPUCORES
from gpusched.gpu_requests.native import RESOURCE_SHARED_GPU, RESOURCE_VRAM, SWAP_FROM_VRAM
from gpusched.inventory import RESOURCE_GPU
from gpusched.kube.errors import APIError
from gpusched.metrics import Metrics
from gpusched.reservations import LeaseFormatError, NodeLease, Reservation, ReservationWriter

__all__ = ["PodLookup", "ReservationBook", "phantom_key"]

log = logging.getLogger(__name__)

PodLookup = Callable[[str], Mapping[str, Any] | None]
"""The pod named ``namespace/name`` as the pods informer has it, or ``None``."""

_TERMINAL = ("Succeeded", "Failed")
_GONE_KEPT = 100_000
_DEAD_KEPT = 10_000


def phantom_key(reservation_uid: str) -> str:
    """The cache key of a reservation's phantom: never a pod's uid."""
    return f"reservation/{reservation_uid}"


class ReservationBook:
    """The Leases as the informer shows them, phantoms in the cache, and the prune rule.

    ``forget`` forgets an assumed pod (by cache key) and tells the queue its devices are free
    (the scheduler's ``_forget_assumed``); ``pod_named`` reads the pods informer.
    """

    def __init__(
        self,
        cache: SchedulerCache,
        writer: ReservationWriter,
        clock: Clock,
        *,
        pod_named: PodLookup,
        forget: Callable[[str], None],
        max_clock_skew: float = 30.0,
        metrics: Metrics | None = None,
        counts: Callable[[str], bool] | None = None,
    ) -> None:
        self.cache = cache
        # Whether another replica's reservations on a node are counted as phantoms: not on the
        # nodes of another live replica's share, which this replica takes only when its own
        # share has nothing that fits (then a race for a GPU there costs a 409, not safety).
        # ``None``: every node. See ``recount`` for when the shares change.
        self.counts = counts
        self.writer = writer
        self.clock = clock
        self.pod_named = pod_named
        self.forget = forget
        self.max_clock_skew = max_clock_skew
        self.metrics = metrics
        self.leases: dict[str, NodeLease] = {}
        self.held = 0  # reservations over self.leases
        self.listed_at: float | None = None  # unix seconds, our clock; see pods_listed
        self.releases = 0  # release writes attempted for superseded or gone reservations
        # Pods seen deleted or finished: their reservations protect nothing.
        self._gone: OrderedDict[str, None] = OrderedDict()
        # Reservations of this replica known not to hold their pod (failed binds).
        self._dead: OrderedDict[str, None] = OrderedDict()
        # Phantoms: reservation uid -> its pod's uid, and back.
        self._phantoms: dict[str, str] = {}
        self._phantom_pods: dict[str, set[str]] = {}
        # Every reservation in self.leases by pod uid: reservation uid -> node.
        self._by_pod: dict[str, dict[str, str]] = {}
        # Nodes whose Lease holds a reservation to release now (see release_loop).
        self._dirty: set[str] = set()
        self._wake = asyncio.Event()
        self._conflicts_counted = 0

    # ------------------------------------------------------------------ Lease events

    def on_lease(self, kind: str, obj: Mapping[str, Any]) -> None:
        """A reservations Lease was added, modified or deleted (the informer's handler)."""
        try:
            lease = NodeLease.from_object(obj)
        except LeaseFormatError as exc:
            log.error("%s", exc)
            return
        if kind != "DELETED":
            self.writer.observed(lease)
        old = self.leases.pop(lease.node, None)
        before = old.reservations if old is not None else {}
        after = lease.reservations if kind != "DELETED" else {}
        self.held += len(after) - len(before)
        if kind != "DELETED":
            self.leases[lease.node] = lease
        if self.metrics is not None:
            self.metrics.reservations_held.set(self.held)
        for uid in before.keys() - after.keys():
            r = before[uid]
            by_pod = self._by_pod.get(r.pod_uid)
            if by_pod is not None:
                by_pod.pop(uid, None)
                if not by_pod:
                    del self._by_pod[r.pod_uid]
            self.drop_phantom(uid)
        for uid in after.keys() - before.keys():
            r = after[uid]
            self._by_pod.setdefault(r.pod_uid, {})[uid] = lease.node
            if self._superseded(r):
                self._mark_dirty(lease.node)
            self.add_phantom(lease.node, r)

    def on_node_added(self, node: str) -> None:
        """A node joined the cache: count what its Lease (if it came first) holds now."""
        lease = self.leases.get(node)
        if lease is not None:
            for r in lease.reservations.values():
                self.add_phantom(node, r)

    # ------------------------------------------------------------------ pod events

    def pod_bound(self, pod: Mapping[str, Any]) -> None:
        """The informer shows ``pod`` bound: its own booking replaces its phantoms, and any
        reservation of it other than the one it is bound with is released at once."""
        meta = pod["metadata"]
        uid = meta["uid"]
        self.drop_phantoms_of(uid, wake=False)
        bound_with = (meta.get("annotations") or {}).get(RESERVATION_UID)
        for reservation_uid, node in (self._by_pod.get(uid) or {}).items():
            if reservation_uid != bound_with:
                self._mark_dirty(node)

    def mark_gone(self, pod_uid: str) -> None:
        """The pod was deleted or finished: its reservations protect nothing."""
        self.drop_phantoms_of(pod_uid, wake=True)
        self._gone[pod_uid] = None
        self._gone.move_to_end(pod_uid)
        while len(self._gone) > _GONE_KEPT:
            self._gone.popitem(last=False)

    def mark_dead(self, reservation_uid: str) -> None:
        """One of our reservations is known not to hold its pod (a failed bind)."""
        self.drop_phantom(reservation_uid)
        self._dead[reservation_uid] = None
        while len(self._dead) > _DEAD_KEPT:
            self._dead.popitem(last=False)

    def pods_listed(self, at: float) -> None:
        """The pods informer has listed; its list began no earlier than ``at`` (unix seconds,
        this replica's clock). Reservations of pods gone before it stop holding GPUs now, and
        go from their Lease in its next write."""
        if self.listed_at is not None:
            return
        self.listed_at = at
        for lease in list(self.leases.values()):
            for r in lease.reservations.values():
                if r.uid in self._phantoms and self.prunable(r):
                    self.drop_phantom(r.uid)

    # ------------------------------------------------------------------ phantoms

    def add_phantom(self, node: str, r: Reservation, *, ours: bool = False) -> None:
        """Count ``r`` in the cache unless its pod is counted already or it protects nothing.
        ``ours``: one of this replica's binds whose outcome is unknown (its pod may be in the
        cache, assumed and about to be forgotten)."""
        if r.uid in self._phantoms or r.pod_uid in self._gone or r.uid in self._dead:
            return
        if not ours and self.counts is not None and not self.counts(node):
            return  # another live replica's share (see ``counts``)
        if not ours and (self.cache.get_pod(r.pod_uid) is not None or self.prunable(r)):
            return  # our own bind of it is in flight, or it is bound: counted already
        namespace, _, name = r.pod.partition("/")
        requests, annotations, uuids = self._phantom_terms(node, r)
        phantom = {
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": phantom_key(r.uid),
                "annotations": annotations,
            },
            "spec": {
                "nodeName": node,
                "containers": [
                    {"name": "reserved", "resources": {"requests": requests, "limits": requests}}
                ],
            },
        }
        try:
            self.cache.assume_pod(
                phantom,
                node,
                Assignment(r.gpu_ids, uuids, r.vram_mib, r.uid),
                enforce_limits=False,  # it holds its GPUs whatever this replica's view says
            )
        except (CacheError, LedgerError) as exc:  # the node is not known yet: on_node_added
            log.debug("not counting reservation %s of %s: %s", r.uid, r.pod, exc)
            return
        self.cache.finish_binding(phantom)  # so that the TTL applies
        self._phantoms[r.uid] = r.pod_uid
        self._phantom_pods.setdefault(r.pod_uid, set()).add(r.uid)

    def _phantom_terms(
        self, node: str, r: Reservation
    ) -> tuple[dict[str, str], dict[str, str], tuple[str, ...]]:
        """(resources, annotations, UUIDs) of ``r``'s phantom pod, so that the cache books it
        as what it reserves: whole GPUs (``nvidia.com/gpu``), a share in gpusched's own form
        (``gpusched.io/gpu`` with its VRAM, ``swap-from-vram`` and HAMi's ``gpucores``, read by
        the request readers like any pod's: VRAM and one client on each GPU, never the whole
        GPU), or MIG devices (their ``nvidia.com/mig-<profile>`` resources, by UUID, from the
        node's ledger). An entry of an older writer names no UUIDs: on a GPU in MIG mode it
        cannot be booked (the Lease's exclusivity check still holds). O(devices of ``r``)."""
        count = str(len(r.gpu_ids))
        if r.exclusive:
            return {RESOURCE_GPU: count}, {}, ()
        if r.mig:
            info = self.cache.node_info(node)
            resources: dict[str, int] = {}
            if info is not None:
                by_uuid = {m.uuid: m.resource for d in info.ledger.devices for m in d.mig}
                for uuid in r.uuids:
                    resource = by_uuid.get(uuid)
                    if resource is not None:
                        resources[resource] = resources.get(resource, 0) + 1
            return {k: str(v) for k, v in resources.items()}, {}, r.uuids
        requests = {
            RESOURCE_SHARED_GPU: count,
            RESOURCE_VRAM: f"{max(r.vram_mib, default=1)}Mi",
        }
        if r.cores:
            requests[RESOURCE_GPUCORES] = str(r.cores)
        swap = "true" if r.swap is not False else "false"
        return requests, {SWAP_FROM_VRAM: swap}, r.uuids

    def recount(self) -> None:
        """Count the reservations of nodes that ``counts`` now admits (the shares of the live
        replicas changed). O(reservations held); a reservation counted already is skipped."""
        for node, lease in self.leases.items():
            for r in lease.reservations.values():
                self.add_phantom(node, r)

    def drop_phantom(self, reservation_uid: str, *, wake: bool = True) -> None:
        """Stop counting a reservation; ``wake``: tell the queue its GPUs are free."""
        pod_uid = self._phantoms.pop(reservation_uid, None)
        if pod_uid is None:
            return
        others = self._phantom_pods.get(pod_uid)
        if others is not None:
            others.discard(reservation_uid)
            if not others:
                del self._phantom_pods[pod_uid]
        if wake:
            self.forget(phantom_key(reservation_uid))
        else:
            self.cache.forget_pod(phantom_key(reservation_uid))

    def drop_phantoms_of(self, pod_uid: str, *, wake: bool) -> None:
        for reservation_uid in list(self._phantom_pods.get(pod_uid, ())):
            self.drop_phantom(reservation_uid, wake=wake)

    def is_phantom(self, reservation_uid: str) -> bool:
        return reservation_uid in self._phantoms

    # ------------------------------------------------------------------ the prune rule

    def prunable(self, r: Reservation) -> bool:
        """Whether ``r`` no longer protects anything (the module docstring's rule)."""
        if r.pod_uid in self._gone or r.uid in self._dead:
            return True
        pod = self.pod_named(r.pod)
        if pod is not None and pod["metadata"].get("uid") == r.pod_uid:
            if (pod.get("status") or {}).get("phase") in _TERMINAL:
                return True
            if (pod.get("spec") or {}).get("nodeName"):
                # Bound: keep the reservation it is bound with while the pod may run; any
                # other one for it (a replica that lost the race) protects nothing.
                annotations = pod["metadata"].get("annotations") or {}
                return bool(annotations.get(RESERVATION_UID) != r.uid)
        elif (
            self.listed_at is not None
            and r.written is not None
            and r.written + self.max_clock_skew < self.listed_at
        ):
            return True  # its pod existed before the list, which did not have it: deleted
        # Unbound, or absent and maybe created since the list: only once expired.
        return r.expires + self.max_clock_skew < self.clock.now().timestamp()

    def unbound(self, r: Reservation) -> bool:
        """Whether the informer does not show ``r``'s pod bound (its bind is in flight, or its
        pod is unknown yet): the Lease's share check (``gpusched.reservations.shares_fit``)
        counts such an entry itself; a bound pod is in the cache already. O(1)."""
        pod = self.pod_named(r.pod)
        if pod is None or pod["metadata"].get("uid") != r.pod_uid:
            return True
        return not (pod.get("spec") or {}).get("nodeName")

    def _superseded(self, r: Reservation) -> bool:
        """Its pod is bound with another reservation."""
        pod = self.pod_named(r.pod)
        if pod is None or pod["metadata"].get("uid") != r.pod_uid:
            return False
        if not (pod.get("spec") or {}).get("nodeName"):
            return False
        return bool((pod["metadata"].get("annotations") or {}).get(RESERVATION_UID) != r.uid)

    def stale(self, node: str) -> list[str]:
        """The prunable reservations in ``node``'s Lease, as the informer shows it."""
        lease = self.leases.get(node)
        if lease is None:
            return []
        return [uid for uid, r in lease.reservations.items() if self.prunable(r)]

    # ------------------------------------------------------------------ writes

    async def release(self, node: str, uids: list[str]) -> None:
        """Drop ``uids`` from ``node``'s Lease; best effort (expiry and the next write cover
        a failure). Idempotent: a Lease that no longer holds them is not written."""
        if not uids:
            return
        self.releases += 1
        with contextlib.suppress(APIError, LeaseFormatError):
            await self.writer.release(node, uids)
        self.count_conflicts()

    async def release_stale(self, node: str) -> None:
        await self.release(node, self.stale(node))

    def _mark_dirty(self, node: str) -> None:
        self._dirty.add(node)
        self._wake.set()

    async def release_loop(self) -> None:
        """Release superseded reservations as pods show up bound: one write per node with
        every prunable entry of its Lease. A replica that sees the other already released
        them (its informer shows the Lease without them) writes nothing."""
        while True:
            await self._wake.wait()
            await self.release_dirty()

    async def release_dirty(self) -> None:
        """One pass of ``release_loop``: the nodes marked so far, concurrently."""
        self._wake.clear()
        nodes, self._dirty = sorted(self._dirty), set()
        await asyncio.gather(*(self.release_stale(node) for node in nodes))

    @property
    def dirty(self) -> frozenset[str]:
        """Nodes whose Lease holds a superseded reservation, not yet released."""
        return frozenset(self._dirty)

    async def collect(self, period: float) -> None:
        """Every ``period`` seconds, release every prunable reservation (expired ones)."""
        while True:
            await self.clock.sleep(period)
            for node in list(self.leases):
                await self.release_stale(node)

    async def run(self, period: float) -> None:
        """The release loop and the collector, until cancelled."""
        await asyncio.gather(self.release_loop(), self.collect(period))

    def count_conflicts(self) -> None:
        """Move the writer's 409s since the last call into the metric. A global running
        difference, not one per binding cycle: with group commit several cycles wait on one
        write, and each would count its conflicts again."""
        total = self.writer.conflicts
        if total > self._conflicts_counted:
            if self.metrics is not None:
                self.metrics.lease_conflicts.inc(total - self._conflicts_counted)
            self._conflicts_counted = total

    # ------------------------------------------------------------------ invariants

    def _check(self) -> None:
        """Assert every invariant (tests call it after each step)."""
        assert self.held == sum(len(lease.reservations) for lease in self.leases.values())
        by_pod: dict[str, dict[str, str]] = {}
        for node, lease in self.leases.items():
            assert lease.node == node
            for uid, r in lease.reservations.items():
                assert r.uid == uid
                by_pod.setdefault(r.pod_uid, {})[uid] = node
        assert by_pod == self._by_pod, (by_pod, self._by_pod)
        pods: dict[str, set[str]] = {}
        for reservation_uid, pod_uid in self._phantoms.items():
            pods.setdefault(pod_uid, set()).add(reservation_uid)
            assert reservation_uid not in self._dead
            assert pod_uid not in self._gone
            key = phantom_key(reservation_uid)
            # In the cache and assumed, unless the cache's TTL let it go.
            assert self.cache.get_pod(key) is None or self.cache.is_assumed(key)
        assert pods == self._phantom_pods, (pods, self._phantom_pods)
        assert len(self._gone) <= _GONE_KEPT
        assert len(self._dead) <= _DEAD_KEPT
