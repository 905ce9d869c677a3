"""Group status kept honest, and Events saying what a gang waits for.

Status, computed from the manager's members as the objects' own controllers compute it, and
written only when it differs from what the object says (merge patch of the ``status``
subresource, so nothing the CRD schema would prune):

- scheduler-plugins' PodGroup: ``phase`` by kubernetes-sigs/scheduler-plugins'
  pkg/controllers/podgroup_controller.go (:func:`next_phase`, iterated to a fixed point),
  ``running``/``succeeded``/``failed`` (members by pod phase), ``scheduleStartTime`` (when
  gpusched first planned the gang), ``occupiedBy`` (the first member's owners);
- Kubernetes' PodGroup (``scheduling.k8s.io/v1alpha2``): the ``PodGroupScheduled`` condition,
  True with reason ``Scheduled`` once ``minCount`` members are bound, else False with reason
  ``Unschedulable`` and the scheduler's last word; other condition types are kept.

Volcano's PodGroup status belongs to Volcano's controllers and Kueue has no object: neither is
written. Events go on the group object (on the members for Kueue) when what the group waits for
changes ("3 of 8 members created", "needs 64 GPUs in one rack; the largest rack has 40 free")
and when a gang that ran loses a member (Warning ``GangMemberLost``).

Costs: one pass over a dirty group's members per write; at most ``budget`` writes per
``period``; a group changed many times between two passes is written once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from gpusched.kube.client import resource_path
from gpusched.kube.errors import APIError, APINotFound

from . import kubernetes, scheduler_plugins
from .manager import GangManager, Group, MemberState
from .spec import Form

if TYPE_CHECKING:
    from gpusched.clock import Clock
    from gpusched.framework import EventRecorder
    from gpusched.kube import Kube

__all__ = [
    "PENDING",
    "RUNNING",
    "SCHEDULING",
    "StatusWriter",
    "kubernetes_conditions",
    "next_phase",
    "scheduler_plugins_status",
]

log = logging.getLogger(__name__)

PENDING: Final = "Pending"
SCHEDULING: Final = "Scheduling"
RUNNING: Final = "Running"
FINISHED: Final = "Finished"
FAILED: Final = "Failed"


def next_phase(
    phase: str, pods: int, running: int, succeeded: int, failed: int, min_member: int
) -> str:
    """One reconcile of scheduler-plugins' podgroup controller (its switch, verbatim)."""
    if phase in (FINISHED, FAILED):
        return phase
    if phase == "":
        return PENDING
    if phase == PENDING:
        return SCHEDULING if pods >= min_member else PENDING
    if pods < min_member:
        return PENDING
    out = SCHEDULING if succeeded + running < min_member else RUNNING
    if failed != 0 and failed + running + succeeded >= min_member:
        out = FAILED
    if succeeded >= min_member:
        out = FINISHED
    return out


def _ts(clock_time: Any) -> str:
    return str(clock_time.strftime("%Y-%m-%dT%H:%M:%SZ"))


def scheduler_plugins_status(
    group: Group, current: Mapping[str, Any], min_member: int
) -> dict[str, Any]:
    """The status scheduler-plugins' controller would reach from ``current``."""
    counts = group.counts
    running, succeeded, failed = (
        counts[MemberState.RUNNING],
        counts[MemberState.SUCCEEDED],
        counts[MemberState.FAILED],
    )
    phase = str(current.get("phase") or "")
    for _ in range(5):
        nxt = next_phase(phase, len(group.members), running, succeeded, failed, min_member)
        if nxt == phase:
            break
        phase = nxt
    out: dict[str, Any] = {"phase": phase}
    if phase not in (PENDING, ""):
        out.update(running=running, succeeded=succeeded, failed=failed)
    if group.schedule_start is not None and not current.get("scheduleStartTime"):
        out["scheduleStartTime"] = _ts(group.schedule_start)
    first = next(iter(group.members.values()), None)
    if first is not None and first.owners and phase != PENDING and not current.get("occupiedBy"):
        out["occupiedBy"] = ",".join(sorted(first.owners))
    return out


def kubernetes_conditions(
    group: Group, current: Mapping[str, Any], min_member: int, now: str
) -> list[dict[str, Any]] | None:
    """``status.conditions`` with ``PodGroupScheduled`` as it should be; ``None``: unchanged."""
    conditions = [c for c in current.get("conditions") or () if isinstance(c, Mapping)]
    placed = sum(group.counts[s] for s in (MemberState.BOUND, MemberState.RUNNING))
    placed += group.counts[MemberState.SUCCEEDED]
    if placed >= min_member:
        want = ("True", "Scheduled", f"{placed} of {min_member} required members are bound")
    else:
        why = group.unschedulable or group.waits_for
        if not why:
            return None
        want = ("False", "Unschedulable", why)
    old = next((c for c in conditions if c.get("type") == "PodGroupScheduled"), None)
    if old is not None and (old.get("status"), old.get("reason"), old.get("message")) == want:
        return None
    condition = {
        "type": "PodGroupScheduled",
        "status": want[0],
        "reason": want[1],
        "message": want[2][:32768],
        "lastTransitionTime": (
            old["lastTransitionTime"]
            if old is not None and old.get("status") == want[0] and old.get("lastTransitionTime")
            else now
        ),
    }
    kept = [dict(c) for c in conditions if c.get("type") != "PodGroupScheduled"]
    return [*kept, condition]


class StatusWriter:
    """Drains the manager's dirty groups and Events into API writes (module docstring)."""

    def __init__(
        self,
        manager: GangManager,
        kube: Callable[[], Kube],
        events: Callable[[], EventRecorder],
        clock: Clock,
        *,
        budget: int = 20,
    ) -> None:
        self.manager = manager
        self._kube = kube
        self._events = events
        self.clock = clock
        self.budget = budget
        self._told: dict[str, str] = {}  # key -> the last "waits for" Event written
        self.writes = 0

    async def flush(self) -> int:
        """One pass: Events, then up to ``budget`` status writes. Returns the writes made."""
        manager = self.manager
        for key, type_, reason, message in manager.events:
            self._event(key, type_, reason, message)
        manager.events.clear()
        written = 0
        while manager.dirty and written < self.budget:
            key = manager.dirty.pop()
            group = manager.groups.get(key)
            if group is None:
                self._told.pop(key, None)  # the group is gone: so is what we told of it
                continue
            why = group.unschedulable or group.waits_for
            if why and self._told.get(key) != why and not self._scheduled(group):
                self._told[key] = why
                self._event(key, "Normal", "Waiting", why)
            try:
                written += await self._write(group)
            except APINotFound:
                pass
            except APIError as exc:
                log.warning("writing the status of pod group %s failed: %s", key, exc)
                manager.dirty.add(key)
                break
        self.writes += written
        return written

    def _scheduled(self, group: Group) -> bool:
        spec = self.manager.spec(group)
        placed = sum(group.counts[s] for s in (MemberState.BOUND, MemberState.RUNNING))
        return placed >= spec.min_member

    async def _write(self, group: Group) -> int:
        obj = self.manager.object_of(group)
        if obj is None:
            return 0
        spec = self.manager.spec(group)
        current = obj.get("status") or {}
        meta = obj["metadata"]
        if group.ref.form is Form.SCHEDULER_PLUGINS:
            body = scheduler_plugins_status(group, current, spec.min_member)
            if all(current.get(k) == v for k, v in body.items()):
                return 0
            path = resource_path(
                scheduler_plugins.GROUP,
                scheduler_plugins.VERSION,
                scheduler_plugins.PLURAL,
                meta.get("namespace"),
            )
        elif group.ref.form is Form.KUBERNETES and spec.gang:
            conditions = kubernetes_conditions(
                group, current, spec.min_member, _ts(self.clock.now())
            )
            if conditions is None:
                return 0
            body = {"conditions": conditions}
            path = resource_path(
                kubernetes.GROUP, kubernetes.VERSION, kubernetes.PLURAL, meta.get("namespace")
            )
        else:
            return 0
        await self._kube().patch(f"{path}/{meta['name']}/status", {"status": body})
        return 1

    def _event(self, key: str, type_: str, reason: str, message: str) -> None:
        group = self.manager.groups.get(key)
        if group is None:
            return
        obj = self.manager.object_of(group)
        recorder = self._events()
        if obj is not None:
            recorder.eventf(obj, type_, reason, "Scheduling", message)
            return
        namespace = key.partition("/")[0]
        for member in list(group.members.values())[:1]:
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": member.name, "namespace": namespace, "uid": member.uid},
            }
            recorder.eventf(pod, type_, reason, "Scheduling", message)
