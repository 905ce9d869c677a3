"""Active replicas without leader election: who is live, and which pods and nodes are whose.

Two replicas that both schedule every pending pod on the same best nodes spend most of their
Lease writes on 409s (the precondition that keeps them safe), and the loser of each race also
writes and releases a reservation and sends a Binding that fails: two replicas were slower than
one. So each active replica announces itself in a **membership Lease**, and the live replicas
split the work by rendezvous (highest-random-weight) hashing:

- a pending **pod** is scheduled by the live replica (among those serving its schedulerName)
  with the highest hash of (replica, pod uid); the others leave it alone;
- a replica **prefers the nodes of its own share** (highest hash of (replica, node name)) and
  takes a node of another share only when its own share has nothing that fits.

Rendezvous hashing moves only the leaving replica's share when one leaves (and only the new
replica's when one joins); shares are balanced in expectation. Nothing here is needed for
safety: two replicas that disagree on the membership (one has not seen the other's Lease yet,
or their clocks differ) at worst schedule a pod twice or pick the same node, and the
reservation Lease precondition (``gpusched.reservations``) still lets only one win.

Layout::

    Lease <reservations namespace>/gpusched-replica-<identity, sanitised>-<hash>
      metadata.labels      gpusched.io/replica: <sanitised identity>
      metadata.annotations gpusched.io/scheduler-names: <the profiles it serves, comma-separated>
      spec                 holderIdentity, renewTime, leaseDurationSeconds

A replica writes its Lease as soon as it starts, marked ``gpusched.io/syncing: "true"`` until
its informers have synced, and renews it every ``renew_period`` seconds; it deletes it on a
clean stop. Another replica counts as live while ``renewTime + leaseDurationSeconds + skew`` is
in the future on its own clock, so a replica that died without deleting its Lease gives up its
pods and nodes that long after its last renewal; a syncing one counts only until ``acquireTime
+ sync_grace + skew`` (its start), then not until it is ready. Announcing before the initial
list (seconds at thousands of nodes) is what lets replicas started together split a backlog
from the first pod: each sees the others' Leases before it schedules anything, instead of the
first to sync scheduling every pod until the others' Leases reach it.
Alone (one replica, or leader election: one active), every pod and node is the replica's own and
the scheduler behaves exactly as without shares.

Costs: one Lease write per replica per ``renew_period`` and one informer over the membership
Leases; per scheduling cycle one comparison of the clock with the next expiry, one hash per
replica for the pod, and for nodes one hash per replica per node the first time the node is
asked about under the current membership (memoised per ``Share``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gpusched.clock import Clock
from gpusched.kube.client import Kube, resource_path
from gpusched.kube.errors import APIConflict, APIError, APINotFound

__all__ = [
    "MEMBER_LABEL",
    "MEMBER_PREFIX",
    "SCHEDULER_NAMES_ANNOTATION",
    "SYNCING_ANNOTATION",
    "Member",
    "Membership",
    "Share",
    "member_lease_name",
    "owner",
]

log = logging.getLogger(__name__)

MEMBER_LABEL = "gpusched.io/replica"
MEMBER_PREFIX = "gpusched-replica-"
SCHEDULER_NAMES_ANNOTATION = "gpusched.io/scheduler-names"
SYNCING_ANNOTATION = "gpusched.io/syncing"

_NOT_DNS = re.compile(r"[^a-z0-9-]+")
_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def member_lease_name(identity: str) -> str:
    """The membership Lease of ``identity``: a DNS name whatever the identity is, distinct for
    distinct identities (a hash suffix)."""
    readable = _NOT_DNS.sub("-", identity.lower()).strip("-")[:36].strip("-")
    digest = hashlib.blake2b(identity.encode(), digest_size=4).hexdigest()
    return f"{MEMBER_PREFIX}{readable}-{digest}" if readable else f"{MEMBER_PREFIX}{digest}"


def _weight(member: str, key: str) -> int:
    return int.from_bytes(
        hashlib.blake2b(f"{member}\x00{key}".encode(), digest_size=8).digest(), "big"
    )


def owner(key: str, members: Iterable[str]) -> str:
    """Rendezvous hashing: the member with the highest weight for ``key`` (ties, which a 64-bit
    hash makes vanishingly rare, to the smallest name). O(members)."""
    return max(members, key=lambda m: (_weight(m, key), m))


class Share:
    """Which pods and nodes are whose among ``members`` (sorted), from ``identity``'s side.

    Immutable; ``Membership`` hands out a new one when the live replicas change, so the node
    memo (O(nodes) entries) and anything a caller keys on the object stay valid while it is
    current.
    """

    __slots__ = ("_nodes", "identity", "members")

    def __init__(self, identity: str, members: Iterable[str]) -> None:
        self.identity = identity
        self.members = tuple(sorted(set(members)))
        self._nodes: dict[str, bool] = {}

    def mine(self, node: str) -> bool:
        """Whether ``node`` is in this replica's share. O(members) the first time, then O(1)."""
        own = self._nodes.get(node)
        if own is None:
            own = self._nodes[node] = owner(f"node/{node}", self.members) == self.identity
        return own

    def takes(self, pod_uid: str) -> bool:
        """Whether this replica schedules the pod. O(members)."""
        return owner(f"pod/{pod_uid}", self.members) == self.identity

    def __repr__(self) -> str:
        return f"<Share of {self.identity!r} among {list(self.members)}>"


@dataclass(frozen=True, slots=True)
class Member:
    """Another replica, as its membership Lease says."""

    identity: str
    scheduler_names: frozenset[str]
    expires: float
    """``renewTime + leaseDurationSeconds``, unix seconds (no skew added)."""
    syncing_until: float | None = None
    """While the replica syncs (``SYNCING_ANNOTATION``): ``acquireTime`` (its start) plus the
    reader's sync grace, unix seconds (no skew added); ``None`` once it is ready."""

    @classmethod
    def from_lease(cls, obj: Mapping[str, Any], sync_grace: float = 0.0) -> Member | None:
        """The member a Lease announces, or ``None`` for a Lease that is not a valid one. A
        syncing Lease without a readable ``acquireTime`` counts as syncing since its renewal."""
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        identity = spec.get("holderIdentity")
        annotations = meta.get("annotations") or {}
        names = annotations.get(SCHEDULER_NAMES_ANNOTATION, "")
        try:
            renewed = _timestamp(spec.get("renewTime"))
            duration = float(spec["leaseDurationSeconds"])
        except (KeyError, TypeError, ValueError):
            return None
        if not identity:
            return None
        syncing_until = None
        if annotations.get(SYNCING_ANNOTATION) == "true":
            try:
                started = _timestamp(spec.get("acquireTime"))
            except ValueError:
                started = renewed
            syncing_until = started + sync_grace
        return cls(
            str(identity),
            frozenset(n for n in names.split(",") if n),
            renewed + duration,
            syncing_until,
        )

    def live_until(self, skew: float) -> float:
        """Until when (unix seconds, on the reader's clock) it counts as live."""
        until = self.expires
        if self.syncing_until is not None:
            until = min(until, self.syncing_until)
        return until + skew


def _timestamp(value: Any) -> float:
    """A Lease ``MicroTime`` as unix seconds; ``ValueError`` when it is not one."""
    return datetime.strptime(str(value), _TIME_FORMAT).replace(tzinfo=UTC).timestamp()


class Membership:
    """This replica's membership Lease and its view of the live replicas (module docstring).

    Feed it the membership Leases (``on_lease``, an informer handler); run ``keep`` while the
    replica schedules. ``share(scheduler_name)`` is ``None`` while this replica is alone among
    the live replicas serving that name (then everything is its own), else the current
    ``Share``. ``on_change`` is called (synchronously) whenever the live replicas, or the
    profiles they serve, change. ``skew`` is the clock-skew tolerance in seconds the scheduler
    passes from ``reservations.maxClockSkewSeconds`` (one setting for both). Run ``keep`` from
    the replica's start with ``syncing`` true and call ``synced`` once its informers have
    synced (``sync_grace``: how long others wait for a syncing replica). Not thread-safe: use
    it from the event loop.
    """

    def __init__(
        self,
        identity: str,
        scheduler_names: Iterable[str],
        clock: Clock,
        *,
        namespace: str,
        lease_duration: int = 15,
        renew_period: float = 5.0,
        skew: float = 0.0,
        sync_grace: float = 30.0,
        on_change: Callable[[], None] | None = None,
        on_write: Callable[[str, str], None] | None = None,
    ) -> None:
        self.identity = identity
        self.scheduler_names = frozenset(scheduler_names)
        self.clock = clock
        self.namespace = namespace
        self.lease_duration = lease_duration
        self.renew_period = renew_period
        self.skew = skew
        self.sync_grace = sync_grace
        self.syncing = False
        """Whether this replica's Lease says it is still syncing (set before ``keep``)."""
        self.started = clock.now()
        """The Lease's ``acquireTime``: set when ``keep`` starts."""
        self._renewing = asyncio.Lock()
        self.on_change = on_change
        self.on_write = on_write
        self.active = False
        """Whether this replica counts itself in (``keep`` is running)."""
        self.announced = asyncio.Event()
        """Set once the informer has shown this replica's own membership Lease."""
        self.writes: Counter[str] = Counter()
        """Membership Lease writes that landed, by verb (``on_write`` is told of each too)."""
        self._members: dict[str, Member] = {}  # Lease name -> another replica
        self._live: frozenset[str] = frozenset()  # Lease names of the live others
        # What the shares depend on: each live other's identity and profiles, by Lease name.
        self._view: dict[str, tuple[str, frozenset[str]]] = {}
        self._next_expiry = float("inf")  # when the live set must be looked at again
        self._dirty = True
        self._shares: dict[str, Share | None] = {}
        self._resource_version = ""

    # ------------------------------------------------------------------ the view

    def on_lease(self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        """Informer handler for the membership Leases (label ``MEMBER_LABEL``)."""
        name = str((obj.get("metadata") or {}).get("name", ""))
        member = Member.from_lease(obj, self.sync_grace) if kind != "DELETED" else None
        if member is not None and member.identity == self.identity:
            if self.active:
                self.announced.set()  # every replica that announced earlier is known now
            return  # our own
        if member is None:
            if kind != "DELETED" and name:
                log.warning("ignoring membership Lease %s: not a valid one", name)
            if self._members.pop(name, None) is None:
                return
        else:
            self._members[name] = member
        self._dirty = True
        self.refresh()

    def live(self) -> list[Member]:
        """The other replicas now live, as of the last ``refresh``."""
        return [self._members[name] for name in sorted(self._live)]

    def refresh(self) -> bool:
        """Re-derive the live replicas if a Lease changed or one may have expired; returns
        whether they, or the profiles they serve, changed (then ``on_change`` has been
        called). O(1) when nothing is due."""
        now = self.clock.now().timestamp()
        if not self._dirty and now < self._next_expiry:
            return False
        self._dirty = False
        live = set()
        next_expiry = float("inf")
        for name, member in self._members.items():
            deadline = member.live_until(self.skew)
            if deadline > now:
                live.add(name)
                next_expiry = min(next_expiry, deadline)
        self._next_expiry = next_expiry
        view = {n: (self._members[n].identity, self._members[n].scheduler_names) for n in live}
        if view == self._view:  # the same replicas serving the same profiles
            return False
        frozen = frozenset(live)
        self._live, self._view = frozen, view
        self._shares.clear()
        log.info(
            "%s: live replicas now %s",
            self.identity,
            sorted([self.identity, *(self._members[n].identity for n in frozen)]),
        )
        if self.on_change is not None and self.active:
            self.on_change()
        return True

    def share(self, scheduler_name: str) -> Share | None:
        """The current share among the live replicas serving ``scheduler_name``; ``None`` when
        this replica is alone (or not active), so everything is its own."""
        if not self.active or scheduler_name not in self.scheduler_names:
            return None
        self.refresh()
        try:
            return self._shares[scheduler_name]
        except KeyError:
            pass
        others = [
            self._members[name].identity
            for name in self._live
            if scheduler_name in self._members[name].scheduler_names
        ]
        share = Share(self.identity, [self.identity, *others]) if others else None
        self._shares[scheduler_name] = share
        return share

    def takes(self, pod_uid: str, scheduler_name: str) -> bool:
        """Whether this replica schedules the pod now."""
        share = self.share(scheduler_name)
        return share is None or share.takes(pod_uid)

    # ------------------------------------------------------------------ the Lease

    @property
    def lease_name(self) -> str:
        return member_lease_name(self.identity)

    def lease_body(self) -> dict[str, Any]:
        """This replica's membership Lease as of now."""
        readable = self.lease_name[len(MEMBER_PREFIX) :][:63]
        annotations = {SCHEDULER_NAMES_ANNOTATION: ",".join(sorted(self.scheduler_names))}
        if self.syncing:
            annotations[SYNCING_ANNOTATION] = "true"
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.lease_name,
                "namespace": self.namespace,
                "labels": {MEMBER_LABEL: readable},
                "annotations": annotations,
            },
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": self.lease_duration,
                "acquireTime": self.started.astimezone(UTC).strftime(_TIME_FORMAT),
                "renewTime": self.clock.now().astimezone(UTC).strftime(_TIME_FORMAT),
            },
        }

    def _path(self, name: str | None = None) -> str:
        return resource_path("coordination.k8s.io", "v1", "leases", self.namespace, name)

    async def keep(self, kube: Kube) -> None:
        """Count this replica in and keep its Lease renewed until cancelled; then delete it
        (best effort: otherwise the others wait for it to expire)."""
        self.active = True
        self._dirty = True
        self.started = self.clock.now()
        try:
            while True:
                await self._renew_logged(kube)
                self.refresh()
                await self.clock.sleep(self.renew_period)
        finally:
            self.active = False
            self._shares.clear()
            with contextlib.suppress(APIError, asyncio.TimeoutError):
                await asyncio.wait_for(kube.delete(self._path(self.lease_name)), timeout=5)
                self._wrote("delete")

    async def synced(self, kube: Kube) -> None:
        """This replica's informers have synced: say so in its Lease now, not at the next
        renewal."""
        if not self.syncing:
            return
        self.syncing = False
        await self._renew_logged(kube)

    async def _renew_logged(self, kube: Kube) -> None:
        try:
            async with self._renewing:
                await self._renew(kube)
        except APIError as exc:
            log.warning("%s: renewing membership Lease: %s", self.identity, exc)

    async def _renew(self, kube: Kube) -> None:
        for _attempt in range(3):
            body = self.lease_body()
            try:
                if self._resource_version:
                    body["metadata"]["resourceVersion"] = self._resource_version
                    verb = "update"
                    written = await kube.replace(self._path(self.lease_name), body)
                else:
                    verb = "create"
                    written = await kube.create(self._path(), body)
            except APIConflict:  # it exists (an earlier run of this identity), or changed
                try:
                    current = await kube.get(self._path(self.lease_name))
                    self._resource_version = str(current["metadata"]["resourceVersion"])
                except APINotFound:
                    self._resource_version = ""
                continue
            except APINotFound:
                if verb == "create":
                    raise
                self._resource_version = ""  # deleted under us: create it again
                continue
            self._resource_version = str(written["metadata"]["resourceVersion"])
            self._wrote(verb)
            return
        log.warning("%s: membership Lease kept changing; renewing later", self.identity)

    def _wrote(self, verb: str) -> None:
        self.writes[verb] += 1
        if self.on_write is not None:
            self.on_write("leases", verb)

    def _check(self) -> None:
        assert self._live <= self._members.keys()
        assert self._view.keys() == self._live
        for share in self._shares.values():
            if share is not None:
                assert self.identity in share.members
                assert len(share.members) >= 2
