"""Coscheduling: gangs run whole or not at all (scheduler-plugins' plugin of that name).

A thin adapter over :class:`gpusched.gangs.manager.GangManager`; the design is in
docs/gangs.md. What each stage does:

- PreEnqueue: gates a member while its group cannot be planned ("3 of 8 members created", a
  missing or malformed group, a backoff); the scheduler reports the message on the pod;
- the pod-group seam (``group_key``, ``pod_group``): the scheduler plans every pending member
  in one cycle, in the best-fitting topology domain, all reserved or none;
- Reserve/Unreserve: accounting; unreserving a member of a plan after Permit rejects its
  waiting siblings (as upstream);
- Permit: allows the members once reserved + bound reach ``minMember``, else they wait up to
  the group's ``scheduleTimeoutSeconds`` (default ``permitWaitingTimeSeconds``); a timeout
  releases everything and backs the gang off for ``podGroupBackoffSeconds``;
- PreBind: a barrier. No member of a plan is bound before every member's device Lease is
  written; one member failing fails them all (``bindBarrierTimeoutSeconds``);
- informers on the three group kinds (all optional), every pod event, and a background task
  that writes the groups' status and Events (:mod:`gpusched.gangs.status`).

Costs for a pod without a group: PreEnqueue, Reserve, Permit and ``group_key`` read a few
labels and annotations (O(1)); PreBind is one dict lookup.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from typing import Any, Final, Self

from pydantic import Field

from gpusched.framework import (
    SUCCESS,
    ActionType,
    BackgroundPlugin,
    ClusterEvent,
    ClusterEventWithHint,
    CycleState,
    EnqueueExtensions,
    Handle,
    Informer,
    InformerPlugin,
    PermitPlugin,
    PluginArgs,
    Pod,
    PodEventHandler,
    PodGroup,
    PodGroupPlugin,
    PreBindPlugin,
    PreEnqueuePlugin,
    ReservePlugin,
    Status,
)
from gpusched.gangs import kubernetes, scheduler_plugins, volcano
from gpusched.gangs.manager import DEFAULT_TOPOLOGY_KEYS, GangManager
from gpusched.gangs.spec import Form
from gpusched.gangs.status import StatusWriter

__all__ = ["NAME", "Coscheduling", "CoschedulingArgs"]

log = logging.getLogger(__name__)

NAME: Final = "Coscheduling"


class CoschedulingArgs(PluginArgs):
    """``pluginConfig`` args of Coscheduling."""

    permit_waiting_time_seconds: int = Field(default=60, ge=1)
    """How long members wait at Permit for their siblings when the group sets no
    ``scheduleTimeoutSeconds``. Default 60, as scheduler-plugins."""
    pod_group_backoff_seconds: int = Field(default=0, ge=0)
    """After a gang's plan broke (a timeout at Permit, a member failing before it was bound),
    its members are gated this long. Default 0 (off), as scheduler-plugins."""
    topology_keys: list[str] = Field(default_factory=lambda: list(DEFAULT_TOPOLOGY_KEYS))
    """Node label keys whose values are domains a gang prefers to share, smallest level
    first. Default ``nvidia.com/gpu.clique``, ``topology.kubernetes.io/rack``,
    ``topology.kubernetes.io/block``. A group's own key (``gpusched.io/gang-topology``, or
    upstream's topologyConstraints) replaces them."""
    max_domains: int = Field(default=8, ge=1)
    """Preferred domains tried per cycle before placing the gang anywhere. Default 8."""
    bind_barrier_timeout_seconds: float = Field(default=30.0, gt=0)
    """How long a member waits in PreBind for its plan's other members' device Leases
    before the plan fails. Default 30s (keep it under the reservation Lease duration)."""
    status_period_seconds: float = Field(default=1.0, gt=0)
    """How often group status and Events are written. Default 1s."""
    status_writes_per_period: int = Field(default=20, ge=1)
    """At most this many status writes per period. Default 20."""


_FORMS: Final = (
    (Form.SCHEDULER_PLUGINS, scheduler_plugins.GROUP, scheduler_plugins.VERSION),
    (Form.KUBERNETES, kubernetes.GROUP, kubernetes.VERSION),
    (Form.VOLCANO, volcano.GROUP, volcano.VERSION),
)


class Coscheduling(
    PreEnqueuePlugin,
    ReservePlugin,
    PermitPlugin,
    PreBindPlugin,
    EnqueueExtensions,
    PodGroupPlugin,
    InformerPlugin,
    PodEventHandler,
    BackgroundPlugin,
):
    """Gangs, over a GangManager (module docstring)."""

    NAME = NAME
    ARGS = CoschedulingArgs

    def __init__(self, args: CoschedulingArgs, handle: Handle) -> None:
        self.args = args
        self.handle = handle
        self.manager = GangManager(
            handle.clock,
            topology_keys=args.topology_keys,
            backoff_seconds=args.pod_group_backoff_seconds,
            max_domains=args.max_domains,
            claims=lambda: handle.claim_specs,
        )
        self.writer = StatusWriter(
            self.manager,
            lambda: handle.kube,
            lambda: handle.events,
            handle.clock,
            budget=args.status_writes_per_period,
        )

    @classmethod
    def new(cls, args: Any, handle: Handle) -> Self:
        return cls(args, handle)

    # -- queue ---------------------------------------------------------------------------

    def pre_enqueue(self, pod: Pod) -> Status:
        message = self.manager.gate(pod)
        return SUCCESS if message is None else Status.unschedulable(message, plugin=NAME)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        # Gated members are activated by the plugin itself (``handle.activate``); members a
        # gang attempt left unschedulable may fit once devices or nodes come.
        return [
            ClusterEventWithHint(ClusterEvent("Pod", ActionType.DELETE)),
            ClusterEventWithHint(ClusterEvent("Node", ActionType.ADD | ActionType.UPDATE)),
        ]

    # -- the pod-group seam ------------------------------------------------------------

    def group_key(self, pod: Pod) -> str | None:
        return self.manager.group_key(pod)

    def pod_group(self, pod: Pod) -> PodGroup | None:
        if self.manager.group_key(pod) is None:
            return None
        return self.manager.plan(pod, self.handle.node_lister)

    # -- scheduling cycle ----------------------------------------------------------------

    def reserve(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        self.manager.reserve(pod)
        return SUCCESS

    def unreserve(self, state: CycleState, pod: Pod, node_name: str) -> None:
        siblings = self.manager.unreserve(pod)
        if not siblings:
            return
        key = self.manager.group_key(pod)
        name = pod["metadata"].get("name", "")
        for uid in siblings:
            self.handle.reject_waiting_pod(
                uid, NAME, f"pod group {key}: member {name} was unreserved; the gang is released"
            )

    def permit(self, state: CycleState, pod: Pod, node_name: str) -> tuple[Status, float]:
        allowed, siblings = self.manager.permit(pod)
        if allowed:
            for uid in siblings:
                waiting = self.handle.get_waiting_pod(uid)
                if waiting is not None:
                    waiting.allow(NAME)
            return SUCCESS, 0.0
        timeout = self.manager.timeout_of(pod, float(self.args.permit_waiting_time_seconds))
        key = self.manager.group_key(pod)
        return Status.wait(f"pod group {key}: waiting for its other members", plugin=NAME), timeout

    # -- binding cycle -------------------------------------------------------------------

    async def pre_bind(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        why = await self.manager.barrier(pod, self.args.bind_barrier_timeout_seconds)
        if not why:
            return SUCCESS
        key = self.manager.group_key(pod)
        return Status.unschedulable(f"pod group {key}: {why}", plugin=NAME)

    # -- informers, pod events, background ----------------------------------------------

    def informers(self) -> Sequence[Informer]:
        return [
            Informer(group, version, "podgroups", self._object_handler(form, group, version))
            for form, group, version in _FORMS
        ]

    def _object_handler(self, form: Form, group: str, version: str) -> Any:
        typed = {"apiVersion": f"{group}/{version}", "kind": "PodGroup"}

        def handle(kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
            # A list's items may lack their kind (built-in kinds): Events need it.
            self._activate(self.manager.on_object(form, kind, {**obj, **typed}, old))

        return handle

    def on_pod(self, kind: str, pod: Pod, old: Pod | None) -> None:
        self._activate(self.manager.on_pod(kind, pod, old))
        if kind == "MODIFIED" and not (pod.get("spec") or {}).get("nodeName"):
            self.manager.note_unschedulable(pod)

    def _activate(self, uids: Iterable[str]) -> None:
        uids = list(uids)
        if uids:
            self.handle.activate(uids)

    async def background(self) -> None:
        clock = self.handle.clock
        while True:
            await clock.sleep(self.args.status_period_seconds)
            try:
                self._activate(self.manager.backoffs_expired())
                await self.writer.flush()
            except asyncio.CancelledError:
                raise
            except Exception:  # one bad round must not end the backoffs and status for good
                log.exception("Coscheduling: activating backoffs or writing status failed")
