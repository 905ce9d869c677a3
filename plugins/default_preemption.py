"""DefaultPreemption: a pod that fits nowhere evicts lower-priority pods (upstream's plugin).

PostFilter, a thin adapter over :class:`gpusched.preemption.Evaluator` (candidates, victims
chosen on node-info clones with the framework's Filter so the right GPUs are freed, PDBs,
gangs evicted whole, upstream's choice of node). When it finds a node:

- the result nominates the node (the scheduler writes ``status.nominatedNodeName`` and keeps
  the node's GPUs for the pod in its cache: NominatedReservation turns lower-priority pods
  away from them);
- the evictions run asynchronously, as upstream's async preemption (PostFilter never awaits):
  a work item for this plugin's background task, which for each victim rejects it if it
  waits at Permit, or else POSTs a policy/v1 ``Eviction`` (``pods/NAME/eviction``, with the
  victim's uid as precondition) and records upstream's Event on it, ``Preempted``
  "Preempted by pod <UID> on node <node>". A 429 (a PodDisruptionBudget allows no disruption
  now) leaves that victim running: a ``PreemptionBlocked`` Warning on the preemptor says so,
  and the node does not count as freed (the next attempt evaluates afresh);
- until the evictions are answered and the victims are gone from the cache, the pod's next
  attempts wait (Unschedulable, nomination kept) instead of preempting again.

Not eligible (``preemptionPolicy: Never``), or no node where evicting helps: with
``reserveWithoutPreemption`` (default true) a pod asking for GPUs is still nominated, to the
node closest to fitting it (its current nomination if that still can, else the most free GPUs
or VRAM), so lower-priority pods stop taking the GPUs it waits for there. The message says so.
Only where some candidate node runs a pod of lower priority: in a cluster of one priority
nobody would be kept out, and a nominated pod is retried from backoff rather than waiting for
an event, which a backlog of such pods would pay for.

PDBs come from a policy/v1 ``poddisruptionbudgets`` informer (optional: without the kind, or
permission, no budget is known). Args, as upstream's ``DefaultPreemptionArgs`` plus one::

    - name: DefaultPreemption
      args: {minCandidateNodesPercentage: 10, minCandidateNodesAbsolute: 100,
             reserveWithoutPreemption: true}

Cost: the evaluator's (gpusched.preemption), only for pods that fit nowhere; the reservation
O(nodes). Docs: docs/preemption.md.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Self, cast

from pydantic import Field, model_validator

from gpusched.cache import GPUNeed, NodeInfo, gpu_need, pod_uid
from gpusched.framework import (
    BackgroundPlugin,
    Code,
    CycleState,
    GroupPostFilterPlugin,
    Handle,
    Informer,
    InformerPlugin,
    PluginArgs,
    Pod,
    PodEventHandler,
    PodGroup,
    PostFilterPlugin,
    PostFilterResult,
    Status,
)
from gpusched.kube.errors import APINotFound, APITooManyRequests
from gpusched.preemption import (
    MIN_CANDIDATE_NODES_ABSOLUTE,
    MIN_CANDIDATE_NODES_PERCENTAGE,
    PDB,
    Candidate,
    Evaluator,
    FilterRunner,
    Victim,
)
from gpusched.priority import pod_priority

__all__ = [
    "NAME",
    "REASON_BLOCKED",
    "REASON_PREEMPTED",
    "DefaultPreemption",
    "DefaultPreemptionArgs",
]

log = logging.getLogger(__name__)

NAME: Final = "DefaultPreemption"
REASON_PREEMPTED: Final = "Preempted"
"""The Event reason on a victim (upstream's)."""
REASON_BLOCKED: Final = "PreemptionBlocked"
"""The Event reason on a preemptor whose victim's eviction was refused (a PDB)."""


class DefaultPreemptionArgs(PluginArgs):
    """``pluginConfig`` args of DefaultPreemption."""

    min_candidate_nodes_percentage: int = Field(
        default=MIN_CANDIDATE_NODES_PERCENTAGE, ge=0, le=100
    )
    """Dry-run at least this percent of the nodes where preemption may help. Default 10."""
    min_candidate_nodes_absolute: int = Field(default=MIN_CANDIDATE_NODES_ABSOLUTE, ge=0)
    """... and at least this many (then capped at their number). Default 100."""
    reserve_without_preemption: bool = True
    """Nominate a GPU pod that cannot preempt (policy Never, no victims) to the node closest
    to fitting it, so that lower-priority pods stop taking its GPUs there. Default true."""

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.min_candidate_nodes_percentage == 0 and self.min_candidate_nodes_absolute == 0:
            raise ValueError(
                "minCandidateNodesPercentage and minCandidateNodesAbsolute cannot both be 0"
            )
        return self


@dataclass(slots=True)
class _Preemption:
    """A preemption in flight for one preemptor (or one gang)."""

    node: str
    pending: int
    nominations: dict[str, str] = field(default_factory=dict)
    """For a gang: every member's node."""
    evicted: dict[str, str] = field(default_factory=dict)
    """Victims evicted (or rejected at Permit): uid -> their node."""
    refused: list[str] = field(default_factory=list)


class DefaultPreemption(
    PostFilterPlugin, GroupPostFilterPlugin, InformerPlugin, BackgroundPlugin, PodEventHandler
):
    """Evicts lower-priority pods for a pod (or a whole gang) that fits nowhere, and
    nominates it there."""

    NAME = NAME
    ARGS = DefaultPreemptionArgs

    def __init__(self, args: DefaultPreemptionArgs, handle: Handle | None = None) -> None:
        self.args = args
        self._handle = handle
        self._pdbs: dict[str, PDB] = {}
        self._inflight: dict[str, _Preemption] = {}
        self._work: asyncio.Queue[tuple[Pod, Candidate, str]] = asyncio.Queue()
        """(preemptor, what to evict, the key of its in-flight record)"""
        self.evaluator = (
            Evaluator(
                cast(FilterRunner, handle),
                min_candidate_nodes_percentage=args.min_candidate_nodes_percentage,
                min_candidate_nodes_absolute=args.min_candidate_nodes_absolute,
                pdbs=lambda: self._pdbs.values(),
            )
            if handle is not None
            else None
        )

    @classmethod
    def new(cls, args: Any, handle: Handle) -> Self:
        return cls(
            args if isinstance(args, DefaultPreemptionArgs) else DefaultPreemptionArgs(), handle
        )

    # -- PodDisruptionBudgets ----------------------------------------------------------------

    def informers(self) -> Sequence[Informer]:
        return [Informer("policy", "v1", "poddisruptionbudgets", self._on_pdb)]

    def _on_pdb(self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        pdb = PDB.from_object(obj)
        key = f"{pdb.namespace}/{pdb.name}"
        if kind == "DELETED":
            self._pdbs.pop(key, None)
        else:
            self._pdbs[key] = pdb

    def on_pod(self, kind: str, pod: Pod, old: Pod | None) -> None:
        """A preemptor deleted or bound: its preemption record goes (a gang's, when one of
        its members is bound: the room was made)."""
        if self._inflight and (kind == "DELETED" or (pod.get("spec") or {}).get("nodeName")):
            self._inflight.pop(pod_uid(pod), None)
            if self._handle is not None and (pod.get("spec") or {}).get("nodeName"):
                key = self._handle.group_key(pod)
                if key is not None:
                    self._inflight.pop(f"group/{key}", None)

    # -- PostFilter --------------------------------------------------------------------------

    def post_filter(
        self, state: CycleState, pod: Pod, statuses: Mapping[str, Status]
    ) -> tuple[PostFilterResult | None, Status]:
        evaluator = self.evaluator
        if evaluator is None:
            return None, Status.unschedulable(plugin=NAME)
        uid = pod_uid(pod)
        assert self._handle is not None
        waiting = self._waiting_on(uid)
        if waiting is not None:
            return PostFilterResult(waiting), Status.unschedulable(
                f"preemption: waiting for the pods evicted from node {waiting} to go",
                plugin=NAME,
            )
        try:
            candidate, why, eligible = evaluator.preempt(pod, statuses)
        except RuntimeError:  # a framework built without a scheduler (no snapshot)
            return None, Status.unschedulable(plugin=NAME)
        if state.dry_run:  # gpusched explain: the verdict, no eviction, no metric
            if candidate is not None:
                return PostFilterResult(candidate.node), Status.success()
        else:
            self._handle.record_preemption(len(candidate.victims) if candidate else None)
        if candidate is not None:
            self._inflight[uid] = _Preemption(candidate.node, len(candidate.victims))
            self._work.put_nowait((pod, candidate, uid))
            return PostFilterResult(candidate.node), Status.success()
        if self.args.reserve_without_preemption:
            node = self._closest(pod, statuses)
            if node is not None:
                reserved = f"node {node} is reserved for it"
                return PostFilterResult(node), Status.unschedulable(
                    f"{why.rstrip('.')}; {reserved}" if why else reserved, plugin=NAME
                )
        # Upstream's results: not eligible keeps the pod's nomination (None); eligible but
        # nothing helps clears it (an empty node name), so its GPUs are held no longer.
        cleared = PostFilterResult("") if eligible else None
        return cleared, Status.unschedulable(*([why.rstrip(".")] if why else []), plugin=NAME)

    def post_filter_group(
        self, group: PodGroup, members: Sequence[Pod]
    ) -> tuple[Mapping[str, str] | None, Status]:
        """Room for the whole gang or nothing (:meth:`Evaluator.preempt_group`): the victims
        of every member are evicted together, and every member is nominated."""
        evaluator = self.evaluator
        if evaluator is None:
            return None, Status.unschedulable(plugin=NAME)
        record = f"group/{group.key}"
        flight = self._inflight.get(record)
        if flight is not None and self._waiting_on(record) is not None:
            return flight.nominations, Status.unschedulable(
                "preemption: waiting for the pods evicted for the gang to go", plugin=NAME
            )
        try:
            decision = evaluator.preempt_group(members)
        except RuntimeError:  # a framework built without a scheduler (no snapshot)
            return None, Status.unschedulable(plugin=NAME)
        assert self._handle is not None
        self._handle.record_preemption(
            len(decision.victims) if decision.nominations is not None else None
        )
        if decision.nominations is None:
            return None, Status.unschedulable(f"preemption: {decision.message}", plugin=NAME)
        nodes = ", ".join(sorted(set(decision.nominations.values())))
        self._inflight[record] = _Preemption(
            nodes, len(decision.victims), nominations=dict(decision.nominations)
        )
        if decision.victims:
            self._work.put_nowait((members[0], Candidate(nodes, decision.victims), record))
        return decision.nominations, Status.success()

    def _waiting_on(self, uid: str) -> str | None:
        """The node of this pod's preemption still in flight (evictions unanswered, or
        evicted pods still in the snapshot), else ``None`` (and the record goes)."""
        flight = self._inflight.get(uid)
        if flight is None:
            return None
        if flight.pending > 0 and not flight.refused:
            return flight.node
        if not flight.refused and flight.evicted:
            assert self._handle is not None
            lister = self._handle.node_lister
            for victim, node in flight.evicted.items():  # O(victims)
                info = lister.get(node)
                if info is not None and victim in info.pods:
                    return flight.node
        del self._inflight[uid]
        return None

    def _closest(self, pod: Pod, statuses: Mapping[str, Status]) -> str | None:
        """The node closest to fitting ``pod`` among those where it is Unschedulable (not
        Unresolvable): its current nomination if that can ever hold it, else the most free
        GPUs (or free VRAM for a share). ``None`` for a pod asking no GPU, or when none of
        those nodes runs a pod of lower priority (a cluster of one priority reserves nothing,
        and its pods wait for events in the unschedulable pool). O(nodes)."""
        need = gpu_need(pod)
        if not need:
            return None
        assert self._handle is not None
        rank = pod_priority(pod).rank
        unschedulable = Code.UNSCHEDULABLE
        nodes: list[NodeInfo] = []
        lower = False
        for info in self._handle.node_lister.node_infos():
            st = statuses.get(info.name)
            if st is None or st.code != unschedulable:
                continue
            nodes.append(info)
            if not lower:
                low = info.lowest_priority_rank
                lower = low is not None and low < rank
        if not lower:
            return None  # nothing of lower priority runs there: nothing to keep the GPUs from
        nodes = [info for info in nodes if _can_ever_hold(info, need)]
        if not nodes:
            return None
        current = (pod.get("status") or {}).get("nominatedNodeName")
        if current and any(info.name == current for info in nodes):
            return str(current)
        if need.gpus:
            best = max(nodes, key=lambda info: info.ledger.free_gpu_count)
        else:
            best = max(nodes, key=_free_vram)
        return best.name

    # -- the evictions (background) ---------------------------------------------------------

    async def background(self) -> None:
        """Runs each preemption's evictions as a task; cancelled with the scheduler."""
        tasks: set[asyncio.Task[None]] = set()
        try:
            while True:
                pod, candidate, record = await self._work.get()
                task = asyncio.create_task(
                    self.evict(pod, candidate, record), name=f"preempt-{pod_uid(pod)}"
                )
                tasks.add(task)
                task.add_done_callback(tasks.discard)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def evict(self, pod: Pod, candidate: Candidate, record: str | None = None) -> None:
        """Evict ``candidate``'s victims for ``pod``, concurrently (module docstring);
        ``record``: the key of the in-flight record (the pod's uid by default)."""
        key = record if record is not None else pod_uid(pod)
        await asyncio.gather(*(self._evict_one(pod, candidate, v, key) for v in candidate.victims))

    async def _evict_one(self, pod: Pod, candidate: Candidate, victim: Victim, record: str) -> None:
        assert self._handle is not None
        handle = self._handle
        flight = self._inflight.get(record)
        try:
            waiting = handle.get_waiting_pod(victim.uid)
            if waiting is not None:
                waiting.reject(NAME, "preempted")
            else:
                await self._post_eviction(victim)
        except APITooManyRequests as exc:
            if flight is not None:
                flight.refused.append(victim.uid)
            handle.events.eventf(
                pod,
                "Warning",
                REASON_BLOCKED,
                "Preempting",
                f"pod {victim.name} on node {victim.node} was not evicted to make room on node "
                f"{candidate.node}: {exc}",
            )
            return
        except APINotFound:
            pass  # already gone
        except Exception as exc:
            log.warning("evicting %s for %s failed: %s", victim.name, pod_uid(pod), exc)
            if flight is not None:
                flight.refused.append(victim.uid)
            return
        finally:
            if flight is not None:
                flight.pending -= 1
        if flight is not None:
            flight.evicted[victim.uid] = victim.node
        handle.events.eventf(
            victim.pod,
            "Normal",
            REASON_PREEMPTED,
            "Preempting",
            f"Preempted by pod {pod_uid(pod)} on node {candidate.node}",
        )

    async def _post_eviction(self, victim: Victim) -> None:
        meta = victim.pod.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        name = meta.get("name", "")
        assert self._handle is not None
        await self._handle.kube.create(
            f"/api/v1/namespaces/{namespace}/pods/{name}/eviction",
            {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": name, "namespace": namespace},
                "deleteOptions": {"preconditions": {"uid": victim.uid}},
            },
        )


def _can_ever_hold(info: NodeInfo, need: GPUNeed) -> bool:
    ledger = info.ledger
    if need.gpus:
        return sum(1 for d in ledger.devices if not d.mig_enabled) >= need.gpus
    return _total_vram(info) >= need.vram_mib and ledger.gpu_count >= need.shared_gpus


def _total_vram(info: NodeInfo) -> int:
    return sum(d.memory_mib or 0 for d in info.ledger.devices if not d.mig_enabled)


def _free_vram(info: NodeInfo) -> int:
    return sum(
        (d.memory_mib or 0) - d.reserved_mib
        for d in info.ledger.devices
        if not d.mig_enabled and d.exclusive is None
    )
