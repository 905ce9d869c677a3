"""GangManager: what the scheduler knows of every gang, for the Coscheduling plugin.

Why a manager: the plugin answers from several extension points (PreEnqueue, the pod-group
seam, Reserve, Permit, PreBind) and from event handlers, all about the same groups; the state
lives here, plain and tested on its own (tests/gangs/test_gang_manager.py), and the plugin only
translates. No plugin and no API client is imported here.

What it keeps, from pod events (``on_pod``) and the group objects' informers (``on_object``):

- members by group key, each in one state (pending, bound, running, succeeded, failed), with
  counts per state kept as events arrive: O(1) per event;
- the members reserved in memory (Reserve .. bound), and those waiting at Permit;
- the *plan* of the latest gang cycle: the members reserved together, which pass a PreBind
  barrier together (none is bound before every one's device Lease is written) or fail
  together;
- per group: its backoff deadline, when it was first planned, whether it ever ran whole, and
  what it waits for (for status and Events).

What it answers:

- ``gate(pod)``: a message while the group cannot be planned ("3 of 8 members created",
  a missing object, malformed input, a backoff), else ``None``;
- ``plan(pod, nodes)``: the ``PodGroup`` to plan now (``None`` when the group already runs
  with ``min_member`` members: more join one by one), with its topology domains in order:
  the configured levels smallest first, within a level the domain with the fewest free GPUs
  that still holds the gang's GPUs first (best fit). O(members + nodes x levels);
- ``permit(uid)``: allow (with the waiting siblings) once reserved + bound reach
  ``min_member``; else wait.

Lifecycle of a plan: ``plan`` opens it; ``reserve`` adds members while it is open (an
``unreserve`` then just takes one out: the scheduler is trying another domain); the first
``permit`` closes it. After that, an ``unreserve`` or a member's deletion *breaks* it: its
waiting siblings are to be rejected, and those at the barrier fail. Once every member reached
the barrier it is released, and nothing afterwards can break it.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

from gpusched.clock import Clock
from gpusched.framework import PodGroup
from gpusched.gpu_requests import ClaimSpecs, RequestError, read_gpu_request

from . import kubernetes, kueue, read_ref, scheduler_plugins, volcano
from .spec import Form, GroupRef, GroupSpec

if TYPE_CHECKING:
    from gpusched.framework import NodeLister

__all__ = [
    "DEFAULT_TOPOLOGY_KEYS",
    "GangManager",
    "Group",
    "MemberState",
    "Plan",
]

log = logging.getLogger(__name__)

DEFAULT_TOPOLOGY_KEYS: Final = (
    "nvidia.com/gpu.clique",
    "topology.kubernetes.io/rack",
    "topology.kubernetes.io/block",
)
"""Node label keys whose values are domains a gang prefers to share, smallest level first: a
multi-node NVLink domain (GB200 NVL72), a rack, a block of racks."""

_TERMINAL: Final = ("Succeeded", "Failed")


class MemberState(enum.StrEnum):
    PENDING = "pending"
    BOUND = "bound"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


_PLACED: Final = (MemberState.BOUND, MemberState.RUNNING)


def _state_of(pod: Mapping[str, Any]) -> MemberState:
    phase = (pod.get("status") or {}).get("phase")
    if phase == "Succeeded":
        return MemberState.SUCCEEDED
    if phase == "Failed":
        return MemberState.FAILED
    if not (pod.get("spec") or {}).get("nodeName"):
        return MemberState.PENDING
    return MemberState.RUNNING if phase == "Running" else MemberState.BOUND


def _gpus_of(pod: Mapping[str, Any], claims: ClaimSpecs | None) -> int:
    try:
        request = read_gpu_request(pod, claims)
    except (RequestError, TypeError, AttributeError, ValueError):
        return 0
    return 0 if request is None else request.count


@dataclass(slots=True)
class Member:
    """One pod of a group."""

    uid: str
    name: str
    gpus: int
    state: MemberState
    owners: tuple[str, ...] = ()


@dataclass(eq=False, slots=True)
class Plan:
    """The members of one gang cycle, and the PreBind barrier they pass together."""

    key: str
    members: set[str] = field(default_factory=set)
    arrived: set[str] = field(default_factory=set)
    open: bool = True
    released: bool = False
    broken: str = ""
    _event: asyncio.Event | None = None

    def event(self) -> asyncio.Event:
        if self._event is None:
            self._event = asyncio.Event()
        return self._event

    def wake(self) -> None:
        if self._event is not None:
            self._event.set()

    def break_(self, why: str) -> bool:
        """Break the plan (False once released or already broken)."""
        if self.released or self.broken:
            return False
        self.broken = why
        self.wake()
        return True


@dataclass(eq=False, slots=True)
class Group:
    """A gang as the manager sees it (see the module docstring)."""

    key: str
    ref: GroupRef
    members: dict[str, Member] = field(default_factory=dict)
    counts: Counter[MemberState] = field(default_factory=Counter)
    reserved: set[str] = field(default_factory=set)
    waiting: set[str] = field(default_factory=set)
    plan: Plan | None = None
    backoff_until: float = 0.0
    schedule_start: datetime | None = None
    ran: bool = False
    lost: list[str] = field(default_factory=list)
    waits_for: str = ""
    unschedulable: str = ""

    @property
    def alive(self) -> int:
        """Members created and not failed (the count gating compares with ``min_member``)."""
        return len(self.members) - self.counts[MemberState.FAILED]

    @property
    def placed(self) -> int:
        """Members bound and not finished, plus those reserved in memory and not yet bound."""
        return sum(self.counts[s] for s in _PLACED) + len(self.reserved)


class GangManager:
    """The gangs' state; see the module docstring. Call everything from the event loop."""

    def __init__(
        self,
        clock: Clock,
        *,
        topology_keys: Sequence[str] = DEFAULT_TOPOLOGY_KEYS,
        backoff_seconds: float = 0.0,
        max_domains: int = 8,
        claims: Callable[[], ClaimSpecs | None] = lambda: None,
    ) -> None:
        self.clock = clock
        self.claims = claims
        """Where members' GpuClaims are found (``Handle.claim_specs``, read when needed)."""
        self.topology_keys = tuple(topology_keys)
        self.backoff_seconds = backoff_seconds
        self.max_domains = max_domains
        self.groups: dict[str, Group] = {}
        self._member_of: dict[str, str] = {}  # pod uid -> group key
        self._plan_of: dict[str, Plan] = {}  # pod uid -> the plan it was reserved in
        self._objects: dict[tuple[Form, str], dict[str, Any]] = {}
        self.dirty: set[str] = set()
        """Keys whose status or Events may need writing (the plugin's writer drains it)."""
        self.events: list[tuple[str, str, str, str]] = []
        """``(key, type, reason, message)`` Events to write on a group (drained by the plugin)."""

    # ------------------------------------------------------------------ reading

    def ref(self, pod: Mapping[str, Any]) -> GroupRef | None:
        return read_ref(pod)

    def spec(self, group: Group) -> GroupSpec:
        """The group's terms from its object (or, for Kueue, its latest member's reference)."""
        ref = group.ref
        if ref.form is Form.KUEUE:
            return kueue.spec_of(ref)
        obj = self._objects.get((ref.form, ref.key))
        if ref.form is Form.SCHEDULER_PLUGINS:
            return scheduler_plugins.spec_of(obj, ref)
        if ref.form is Form.KUBERNETES:
            return kubernetes.spec_of(obj, ref)
        return volcano.spec_of(obj, ref)

    def object_of(self, group: Group) -> dict[str, Any] | None:
        return self._objects.get((group.ref.form, group.key))

    # ------------------------------------------------------------------ events in

    def on_pod(self, kind: str, pod: Mapping[str, Any], old: Mapping[str, Any] | None) -> list[str]:
        """Index a pod event. Returns the uids of members to activate (the group just reached
        ``min_member`` created members: its gated members may pass PreEnqueue now). O(1), or
        O(members) on that crossing."""
        meta = pod["metadata"]
        uid = meta.get("uid", "")
        before = self._member_of.get(uid)
        ref = None if kind == "DELETED" or meta.get("deletionTimestamp") else read_ref(pod)
        key = ref.key if ref is not None and ref.name else None
        if before is not None and before != key:
            gone = kind == "DELETED" or meta.get("deletionTimestamp")
            self._remove(before, uid, "was deleted" if gone else "left the group")
        if key is None or ref is None:
            return []
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = Group(key, ref)
        group.ref = ref
        state = _state_of(pod)
        member = group.members.get(uid)
        spec = self.spec(group)
        min_member = spec.min_member if spec.gang else 1
        crossed = False
        if member is None:
            owners = tuple(
                f"{meta.get('namespace') or 'default'}/{o.get('name', '')}"
                for o in meta.get("ownerReferences") or ()
            )
            member = Member(uid, meta.get("name", ""), _gpus_of(pod, self.claims()), state, owners)
            alive_before = group.alive
            group.members[uid] = member
            group.counts[state] += 1
            self._member_of[uid] = key
            crossed = alive_before < min_member <= group.alive
        elif member.state != state:
            self._move(group, member, state)
        else:
            return []
        if state in _PLACED or state is MemberState.SUCCEEDED:
            group.reserved.discard(uid)
        if not group.ran and sum(group.counts[s] for s in _PLACED) >= min_member:
            group.ran = True  # every required member bound (not just reserved)
        self._touch(group)
        if crossed:
            return [u for u, m in group.members.items() if m.state is MemberState.PENDING]
        return []

    def _move(self, group: Group, member: Member, state: MemberState) -> None:
        was = member.state
        group.counts[was] -= 1
        group.counts[state] += 1
        member.state = state
        if state is MemberState.FAILED:
            self._lose(group, member, "failed", was)

    def _remove(self, key: str, uid: str, how: str) -> None:
        del self._member_of[uid]
        group = self.groups.get(key)
        if group is None:
            return
        member = group.members.pop(uid, None)
        group.reserved.discard(uid)
        group.waiting.discard(uid)
        if member is None:
            return
        group.counts[member.state] -= 1
        self._lose(group, member, how, member.state)
        if not group.members and not self._has_object(group):
            self.groups.pop(key, None)
            self.dirty.add(key)  # the status writer forgets it on its next pass
            return
        self._touch(group)

    def _lose(self, group: Group, member: Member, how: str, was: MemberState) -> None:
        """A member failed or went: a plan it was in breaks; a gang that ran is told."""
        plan = self._plan_of.pop(member.uid, None)
        if plan is not None:
            plan.break_(f"member {member.name} {how} before the gang was bound")
        if group.ran and was in _PLACED:
            spec = self.spec(group)
            running = sum(group.counts[s] for s in _PLACED)
            message = (
                f"member {member.name} {how} after the gang ran; {running} of "
                f"{spec.min_member} members still run"
            )
            group.lost.append(message)
            del group.lost[:-10]
            group.unschedulable = message  # the group's latest word, for its status
            self.events.append((group.key, "Warning", "GangMemberLost", message))
            self._touch(group)

    def _has_object(self, group: Group) -> bool:
        return (group.ref.form, group.key) in self._objects

    def on_object(
        self, form: Form, kind: str, obj: Mapping[str, Any], old: Mapping[str, Any] | None
    ) -> list[str]:
        """Keep a group object (a PodGroup of ``form``). Returns the pending members to activate
        (their gating may have changed). O(members) of that group."""
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}"
        if kind == "DELETED":
            self._objects.pop((form, key), None)
        else:
            self._objects[(form, key)] = dict(obj)
        group = self.groups.get(key)
        if group is None or group.ref.form is not form:
            return []
        if old is not None and (old.get("spec") == obj.get("spec")) and kind != "DELETED":
            return []  # a status write (ours, perhaps): nothing the gating reads changed
        self._touch(group)
        return [u for u, m in group.members.items() if m.state is MemberState.PENDING]

    def _touch(self, group: Group) -> None:
        self.dirty.add(group.key)

    # ------------------------------------------------------------------ queue and cycle

    def gate(self, pod: Mapping[str, Any]) -> str | None:
        """Why the pod may not be scheduled yet (PreEnqueue), or ``None``. O(1)."""
        ref = read_ref(pod)
        if ref is None:
            return None
        if ref.error:
            return f"pod group {ref.key}: {ref.error}"
        group = self.groups.get(ref.key)
        spec = self.spec(group) if group is not None else self.spec(Group(ref.key, ref))
        if spec.error:
            return f"pod group {ref.key}: {spec.error}"
        if not spec.gang:
            return None
        uid = pod["metadata"].get("uid", "")
        created = 0 if group is None else group.alive
        if group is None or uid not in group.members:
            created += 1
        if created < spec.min_member and (group is None or group.placed < spec.min_member):
            message = (
                f"pod group {ref.key}: {created} of {spec.min_member} members created; "
                f"waiting for {spec.min_member - created} more"
            )
            if group is not None and group.waits_for != message:
                group.waits_for = message
                self._touch(group)
            return message
        if group is not None and group.backoff_until > self.clock.monotonic():
            left = group.backoff_until - self.clock.monotonic()
            return (
                f"pod group {ref.key} backs off for {left:.0f}s more after its last attempt failed"
            )
        return None

    def group_key(self, pod: Mapping[str, Any]) -> str | None:
        ref = read_ref(pod)
        return ref.key if ref is not None and ref.name else None

    def plan(self, pod: Mapping[str, Any], nodes: NodeLister | None) -> PodGroup | None:
        """The group to plan with ``pod`` now, or ``None`` (module docstring). Opens a plan."""
        key = self.group_key(pod)
        group = self.groups.get(key) if key is not None else None
        if group is None:
            return None
        spec = self.spec(group)
        group.plan = None
        if spec.error or not spec.gang or group.placed >= spec.min_member:
            return None
        pending = [
            m
            for u, m in group.members.items()
            if m.state is MemberState.PENDING and u not in group.reserved
        ]
        # The GPUs the gang cannot run without: its smallest members up to min_member (those
        # beyond it are optional, and are planned only where they fit).
        need = max(spec.min_member - group.placed, 0)
        gpus = sum(sorted(m.gpus for m in pending)[:need])
        domains, required, message = self._domains(spec, gpus, nodes)
        group.plan = Plan(group.key)
        if group.schedule_start is None:
            group.schedule_start = self.clock.now()
            self._touch(group)
        return PodGroup(
            key=group.key,
            min_member=spec.min_member,
            pending=tuple(m.uid for m in pending),
            placed=group.placed,
            domains=domains,
            domain_required=required,
            domain_message=message,
        )

    def _domains(
        self, spec: GroupSpec, gpus: int, nodes: NodeLister | None
    ) -> tuple[tuple[frozenset[str], ...], bool, str]:
        """The topology domains to try, whether one is required, and why none holds the gang.
        O(nodes x levels)."""
        required = spec.topology_required and spec.topology is not None
        keys = (spec.topology,) if spec.topology is not None else self.topology_keys
        if nodes is not None and gpus:
            # A gang asking more GPUs than the cluster has can never run whole: say so rather
            # than trying it member by member.
            total = sum(len(info.ledger.devices) for info in nodes.node_infos())
            if gpus > total:
                return (
                    (frozenset(),),
                    True,
                    f"its {spec.min_member} required members need {gpus} GPUs together, more "
                    f"than the {total} the cluster has: it can never run whole; lower its "
                    f"minimum member count or ask for fewer GPUs per member",
                )
        if nodes is None or not keys or (gpus == 0 and not required):
            return (), False, ""
        out: list[frozenset[str]] = []
        largest: tuple[int, str] = (-1, "")
        for key in keys:
            free: dict[str, int] = {}
            names: dict[str, list[str]] = {}
            for info in nodes.node_infos():
                value = info.labels.get(key)
                if value is None:
                    continue
                free[value] = free.get(value, 0) + info.ledger.free_gpu_count
                names.setdefault(value, []).append(info.name)
            for value, f in free.items():
                largest = max(largest, (f, value))
            fitting = sorted((f, v) for v, f in free.items() if f >= gpus)
            out.extend(frozenset(names[v]) for _, v in fitting)
        out = out[: self.max_domains]
        if not required:
            return tuple(out), False, ""
        key = keys[0]
        if out:
            return tuple(out), True, ""
        if largest[0] < 0:
            return (
                (frozenset(),),
                True,
                f"needs its members in one {key}, and no node has the label {key}",
            )
        message = (
            f"needs {gpus} GPUs in one {key}; the largest {key} ({largest[1]}) has "
            f"{largest[0]} free"
        )
        return (frozenset(),), True, message

    def reserve(self, pod: Mapping[str, Any]) -> None:
        """A member is reserved (in a plan if one is open)."""
        key = self.group_key(pod)
        group = self.groups.get(key) if key is not None else None
        if group is None:
            return
        uid = pod["metadata"]["uid"]
        group.reserved.add(uid)
        plan = group.plan
        if plan is not None and plan.open:
            plan.members.add(uid)
            self._plan_of[uid] = plan

    def unreserve(self, pod: Mapping[str, Any]) -> list[str]:
        """A member is unreserved. Returns its waiting siblings to reject when that breaks a
        plan (module docstring); starts the group's backoff then."""
        key = self.group_key(pod)
        group = self.groups.get(key) if key is not None else None
        if group is None:
            return []
        uid = pod["metadata"]["uid"]
        group.reserved.discard(uid)
        group.waiting.discard(uid)
        plan = self._plan_of.pop(uid, None)
        if plan is None:
            return []
        if plan.open:
            plan.members.discard(uid)
            return []
        name = pod["metadata"].get("name", uid)
        if not plan.break_(f"member {name} was unreserved before the gang was bound"):
            return []
        if self.backoff_seconds > 0:
            group.backoff_until = self.clock.monotonic() + self.backoff_seconds
        siblings = sorted(group.waiting)
        group.waiting.clear()
        self._touch(group)
        return siblings

    def permit(self, pod: Mapping[str, Any]) -> tuple[bool, list[str]]:
        """``(True, waiting siblings to allow)`` once reserved + bound members reach
        ``min_member``; ``(False, [])``: the pod waits. Closes the open plan."""
        key = self.group_key(pod)
        group = self.groups.get(key) if key is not None else None
        if group is None:
            return True, []
        if group.plan is not None:
            group.plan.open = False
        spec = self.spec(group)
        if not spec.gang or group.placed >= spec.min_member:
            allowed = sorted(group.waiting)
            group.waiting.clear()
            return True, allowed
        group.waiting.add(pod["metadata"]["uid"])
        return False, []

    def timeout_of(self, pod: Mapping[str, Any], default: float) -> float:
        key = self.group_key(pod)
        group = self.groups.get(key) if key is not None else None
        spec = self.spec(group) if group is not None else None
        if spec is None or spec.timeout_seconds is None:
            return default
        return spec.timeout_seconds

    async def barrier(self, pod: Mapping[str, Any], timeout: float) -> str:
        """PreBind: wait until every member of the pod's plan got here (its device Lease is
        written); ``""`` to go on, else why the plan broke (then the pod must fail)."""
        uid = pod["metadata"]["uid"]
        plan = self._plan_of.get(uid)
        if plan is None:
            return ""
        plan.arrived.add(uid)
        if not plan.broken and plan.arrived >= plan.members:
            plan.released = True
            plan.wake()
        elif not plan.broken:
            event = plan.event()
            waiter = asyncio.ensure_future(event.wait())
            sleeper = asyncio.ensure_future(self.clock.sleep(timeout))
            try:
                await asyncio.wait((waiter, sleeper), return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (waiter, sleeper):
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            if not plan.released:
                missing = len(plan.members - plan.arrived)
                if plan.break_(
                    f"{missing} of {len(plan.members)} members did not reach the binding "
                    f"barrier within {timeout:g}s"
                ):
                    group = self.groups.get(plan.key)
                    if group is not None and self.backoff_seconds > 0:
                        # As a plan broken by an Unreserve: the gang backs off.
                        group.backoff_until = self.clock.monotonic() + self.backoff_seconds
                        self._touch(group)
        if self._plan_of.get(uid) is plan:
            del self._plan_of[uid]
        return "" if plan.released else plan.broken

    def backoffs_expired(self) -> list[str]:
        """Pending members of groups whose backoff just ended (to activate). O(groups)."""
        now = self.clock.monotonic()
        out: list[str] = []
        for group in self.groups.values():
            if group.backoff_until and group.backoff_until <= now:
                group.backoff_until = 0.0
                out.extend(u for u, m in group.members.items() if m.state is MemberState.PENDING)
        return out

    def note_unschedulable(self, pod: Mapping[str, Any]) -> None:
        """Remember the scheduler's last word on a pending member (its ``PodScheduled=False``
        condition), for the group's status and Events."""
        key = self.group_key(pod)
        group = self.groups.get(key) if key is not None else None
        if group is None:
            return
        for c in (pod.get("status") or {}).get("conditions") or ():
            if c.get("type") == "PodScheduled" and c.get("status") == "False":
                message = str(c.get("message") or "")
                if message and message != group.unschedulable:
                    group.unschedulable = message
                    self._touch(group)
                return

    def _check(self) -> None:
        """Assert the invariants (tests)."""
        for key, group in self.groups.items():
            counts = Counter(m.state for m in group.members.values())
            assert +counts == +group.counts, (key, counts, group.counts)
            for uid in group.members:
                assert self._member_of[uid] == key
            assert group.waiting <= group.reserved | set(group.members), key
        for uid, key in self._member_of.items():
            assert uid in self.groups[key].members
