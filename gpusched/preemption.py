"""Preemption: which pods to evict, and where, so that a pod that fits nowhere can run.

kube-scheduler's algorithm (pkg/scheduler/framework/preemption/preemption.go and
plugins/defaultpreemption/default_preemption.go) over gpusched's snapshot, with priorities from
:mod:`gpusched.priority`. No plugin imports: the PostFilter plugin (DefaultPreemption) is a thin
adapter over :class:`Evaluator`, and tests drive it with a framework and a cache directly.

1. *Eligible*: not ``preemptionPolicy: Never``, and not already nominated to a node where a
   lower-priority pod is still terminating (its room is coming: wait, keep the nomination).
2. *Candidates*: the nodes whose Filter status is Unschedulable (Unresolvable ones cannot be
   helped by evicting pods), tried from a random offset until ``max(10% of them, 100)`` have
   victims (upstream's ``minCandidateNodesPercentage`` / ``minCandidateNodesAbsolute``) and at
   least one of them violates no PodDisruptionBudget.
3. *Victims on a node* (:meth:`Evaluator.select_victims`), on a clone of its node info: remove
   every pod of lower priority; if the pod does not fit with the framework's Filter then (run
   after PreFilter on a fresh state, as upstream runs them on a state copy), the node is no
   candidate. Then *reprieve*: add the victims back one by one, those whose eviction would
   violate a PDB first, each group highest priority (then earliest start) first, keeping back
   each one the pod still fits beside. Because Filter runs on the clone, GPUFit decides which
   GPUs the pod would get there (topology, VRAM, MIG): the victims left are those holding the
   GPUs it needs, not any N GPUs. Terminating pods are on their way out: removed, not victims.
   As upstream's ``RunFilterPluginsWithNominatedPods``, the pods nominated to the node with
   equal or higher priority keep their GPUs there (:func:`gpusched.cache.leaves_room`), so two
   preemptors do not count on the same room.
4. *Gangs*: a pod with a group key (``handle.group_key``) is evicted only with every member of
   its gang, wherever they run; a gang with a member of equal or higher priority is never a
   victim. A gang is one unit for the reprieve, and its members on other nodes count as
   victims (for the choice below and for eviction), so a running gang is never broken up.
5. *Pick* (upstream's ``pickOneNodeForPreemption``): fewest PDB violations, then the lowest
   highest-victim priority, the lowest sum of priorities, the fewest victims, the latest
   earliest start among the highest-priority victims, then the first.

PodDisruptionBudgets (policy/v1, :class:`PDB`) count as upstream's ``filterPodsWithPDBViolation``:
a PDB matches a pod of its namespace whose labels its (non-empty) selector selects, unless the
pod is already in its ``status.disruptedPods``; each victim it matches takes one of its
``status.disruptionsAllowed``; a victim that takes one below zero violates it.

Cost: O(nodes) to find candidates (a node with no pod below the preemptor is skipped in O(1):
``NodeInfo.lowest_priority_rank``), then per node tried O(pods + GPUs) for the clone and
O(victims) Filter calls; at most ``max(10%, 100)`` nodes are tried beyond those without victims.
Gangs add one O(pods) pass over the snapshot, only when a potential victim has a group key.
"""

from __future__ import annotations

import datetime
import random
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, NamedTuple, Protocol, cast

from gpusched.cache import NodeInfo, PodInfo, gpu_need, leaves_room
from gpusched.cache.errors import LedgerError
from gpusched.framework import DEVICE_ASSIGNMENT, Code, CycleState, Pod, PreFilterResult, Status
from gpusched.priority import NEVER, Priority, pod_priority, preemption_policy

if TYPE_CHECKING:
    from gpusched.framework import NodeLister

__all__ = [
    "MIN_CANDIDATE_NODES_ABSOLUTE",
    "MIN_CANDIDATE_NODES_PERCENTAGE",
    "NOMINATED_ELSEWHERE",
    "NOT_HELPFUL",
    "NO_VICTIMS",
    "PDB",
    "Candidate",
    "Decision",
    "Evaluator",
    "FilterRunner",
    "GroupDecision",
    "Victim",
    "label_selector_matches",
    "num_candidates",
]

NO_VICTIMS: Final = "No preemption victims found for incoming pod"
"""Upstream's reason for a node without a pod of lower priority."""
NOMINATED_ELSEWHERE: Final = "node's GPUs are held for a pod of equal or higher priority"
"""Why a node whose room is promised to other nominated pods is no candidate."""
NOT_HELPFUL: Final = "Preemption is not helpful for scheduling"
"""Upstream's reason for a node where evicting pods cannot help (Unresolvable)."""
MIN_CANDIDATE_NODES_PERCENTAGE: Final = 10
MIN_CANDIDATE_NODES_ABSOLUTE: Final = 100


class FilterRunner(Protocol):
    """What the evaluator needs of the framework (``gpusched.framework.Framework`` is one)."""

    def run_pre_filter(
        self, state: CycleState, pod: Pod
    ) -> tuple[PreFilterResult | None, Status]: ...

    def run_filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status: ...

    def group_key(self, pod: Pod) -> str | None: ...

    def run_reserve(self, state: CycleState, pod: Pod, node_name: str) -> Status: ...

    def run_unreserve(self, state: CycleState, pod: Pod, node_name: str) -> None: ...

    @property
    def node_lister(self) -> NodeLister: ...


# -- PodDisruptionBudgets ------------------------------------------------------------------


def label_selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether a ``metav1.LabelSelector`` (matchLabels, matchExpressions with In, NotIn,
    Exists, DoesNotExist) selects ``labels``. An empty selector selects everything here;
    callers that treat it as nothing (PDBs) check :attr:`PDB.selects_nothing`."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or ():
        key, op = expr.get("key", ""), expr.get("operator", "")
        values = expr.get("values") or ()
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False
    return True


@dataclass(frozen=True, slots=True)
class PDB:
    """A policy/v1 PodDisruptionBudget, as preemption reads it."""

    namespace: str
    name: str
    selector: Mapping[str, Any]
    disruptions_allowed: int
    disrupted_pods: frozenset[str] = frozenset()

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> PDB:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        return cls(
            namespace=meta.get("namespace") or "default",
            name=meta.get("name", ""),
            selector=spec.get("selector") or {},
            disruptions_allowed=int(status.get("disruptionsAllowed") or 0),
            disrupted_pods=frozenset(status.get("disruptedPods") or {}),
        )

    @property
    def selects_nothing(self) -> bool:
        """Upstream's preemption skips a PDB whose selector is empty (or absent)."""
        return not (self.selector.get("matchLabels") or self.selector.get("matchExpressions"))

    def matches(self, pod: Mapping[str, Any]) -> bool:
        meta = pod.get("metadata") or {}
        if (meta.get("namespace") or "default") != self.namespace or self.selects_nothing:
            return False
        if meta.get("name", "") in self.disrupted_pods:
            return False
        return label_selector_matches(self.selector, meta.get("labels") or {})


# -- results -------------------------------------------------------------------------------


def _start_time(pod: Mapping[str, Any]) -> float:
    """``status.startTime`` as a timestamp; a pod not started yet counts as starting now."""
    text = (pod.get("status") or {}).get("startTime")
    if text:
        try:
            return datetime.datetime.fromisoformat(str(text)).timestamp()
        except ValueError:
            pass
    return float("inf")


@dataclass(frozen=True, slots=True)
class Victim:
    """A pod to evict: on ``node`` (for a gang member, maybe not the candidate node)."""

    pod: Mapping[str, Any]
    node: str
    priority: Priority

    @property
    def uid(self) -> str:
        return str((self.pod.get("metadata") or {}).get("uid", ""))

    @property
    def name(self) -> str:
        meta = self.pod.get("metadata") or {}
        return f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}"


@dataclass(frozen=True, slots=True)
class Candidate:
    """A node where the pod fits once ``victims`` are gone (most important victim first)."""

    node: str
    victims: tuple[Victim, ...]
    pdb_violations: int = 0


@dataclass(slots=True)
class _Unit:
    """Pods evicted together: one pod, or a whole gang (its members on this node in
    ``local``, all members in ``members``)."""

    local: list[PodInfo]
    members: list[Victim]
    top: Priority
    start: float
    violates: bool = False
    key: str = field(default="")


class Decision(NamedTuple):
    """What :meth:`Evaluator.preempt` decided: the ``candidate``, or ``None`` and ``message``
    (why not); ``eligible`` is false when the pod may not preempt now (``Never``, or its
    victims are still terminating), so that a nomination it has is kept, as upstream's nil
    result; when eligible but nothing helps, upstream clears it."""

    candidate: Candidate | None
    message: str = ""
    eligible: bool = True


class GroupDecision(NamedTuple):
    """What :meth:`Evaluator.preempt_group` decided: every member's node and the victims
    (their union), or ``None`` and ``message`` (why not)."""

    nominations: dict[str, str] | None
    victims: tuple[Victim, ...] = ()
    message: str = ""


def num_candidates(nodes: int, percentage: int, absolute: int) -> int:
    """Upstream's ``calculateNumCandidates``."""
    n = nodes * percentage // 100
    return min(max(n, absolute), nodes)


class Evaluator:
    """Upstream's preemption ``Evaluator`` (module docstring) over a :class:`FilterRunner`.

    ``pdbs`` returns the PodDisruptionBudgets to respect (read once per evaluation).
    ``rng`` chooses the offset the candidate nodes are tried from.
    """

    def __init__(
        self,
        runner: FilterRunner,
        *,
        min_candidate_nodes_percentage: int = MIN_CANDIDATE_NODES_PERCENTAGE,
        min_candidate_nodes_absolute: int = MIN_CANDIDATE_NODES_ABSOLUTE,
        pdbs: Callable[[], Iterable[PDB]] = tuple,
        rng: random.Random | None = None,
    ) -> None:
        self.runner = runner
        self.percentage = min_candidate_nodes_percentage
        self.absolute = min_candidate_nodes_absolute
        self._pdbs = pdbs
        self.rng = rng or random.Random()

    # -- 1. eligibility -------------------------------------------------------------------

    def eligible(self, pod: Pod, nominated_status: Status | None = None) -> tuple[bool, str]:
        """Upstream's ``PodEligibleToPreemptOthers``: (eligible, why not)."""
        if preemption_policy(pod) == NEVER:
            return False, "not eligible due to preemptionPolicy=Never."
        node = (pod.get("status") or {}).get("nominatedNodeName")
        if not node:
            return True, ""
        if (
            nominated_status is not None
            and nominated_status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        ):
            return True, ""
        info = self.runner.node_lister.get(node)
        if info is not None:
            priority = pod_priority(pod)
            for p in info.pods.values():
                meta = p.pod.get("metadata") or {}
                if meta.get("deletionTimestamp") and pod_priority(p.pod) < priority:
                    return False, "not eligible due to a terminating pod on the nominated node."
        return True, ""

    # -- 2. candidates --------------------------------------------------------------------

    def find_candidates(
        self, pod: Pod, statuses: Mapping[str, Status]
    ) -> tuple[list[Candidate], Counter[str]]:
        """Dry-run preemption on the Unschedulable nodes (module docstring, step 2): the
        candidates (those violating no PDB first), and how many of the other Unschedulable
        nodes gave each reason. One pass over the nodes, O(1) for a node with no pod below
        the preemptor (``NodeInfo.lowest_priority_rank``), so a cluster of one priority costs
        O(nodes) dict lookups (~0.5 us each) and no clone."""
        rank = pod_priority(pod).rank
        unschedulable = Code.UNSCHEDULABLE
        potential: list[NodeInfo] = []
        skipped = 0
        for info in self.runner.node_lister.node_infos():
            st = statuses.get(info.name)
            if st is None or st.code != unschedulable:
                continue
            lowest = info.lowest_priority_rank
            if lowest is None or lowest >= rank:
                skipped += 1
            else:
                potential.append(info)
        reasons: Counter[str] = Counter()
        if skipped:
            reasons[NO_VICTIMS] = skipped
        if not potential:
            return [], reasons
        state = CycleState()
        _, status = self.runner.run_pre_filter(state, pod)
        if status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE or status.is_error:
            reasons[status.message()] += len(potential)
            return [], reasons
        pdbs = list(self._pdbs())
        wanted = num_candidates(len(potential), self.percentage, self.absolute)
        offset = self.rng.randrange(len(potential))
        clean: list[Candidate] = []
        violating: list[Candidate] = []
        gangs = _Gangs(self.runner)
        for i in range(len(potential)):
            info = potential[(offset + i) % len(potential)]
            victims, violations, status = self.select_victims(state.clone(), pod, info, pdbs, gangs)
            if status.is_success:
                candidate = Candidate(info.name, tuple(victims), violations)
                (violating if violations else clean).append(candidate)
                if clean and len(clean) + len(violating) >= wanted:
                    break
            else:
                reasons[status.message()] += 1
        return clean + violating, reasons

    # -- 3. victims on one node -----------------------------------------------------------

    def select_victims(
        self,
        state: CycleState,
        pod: Pod,
        node_info: NodeInfo,
        pdbs: Sequence[PDB] = (),
        gangs: _Gangs | None = None,
    ) -> tuple[list[Victim], int, Status]:
        """Upstream's ``SelectVictimsOnNode`` with gangs (module docstring, steps 3-4):
        the victims (most important first), how many violate a PDB, and Success, or why the
        node cannot be made to fit the pod. ``node_info`` is not modified (a clone is)."""
        gangs = gangs if gangs is not None else _Gangs(self.runner)
        priority = pod_priority(pod)
        clone = node_info.clone()
        units: list[_Unit] = []
        seen: set[str] = set()
        for info in list(clone.pods.values()):
            if info.uid in seen:
                continue
            p = info.priority
            if not p < priority:
                continue
            if (info.pod.get("metadata") or {}).get("deletionTimestamp"):
                clone.remove_pod(info.uid)  # on its way out: room, not a victim
                continue
            key = self.runner.group_key(cast(Pod, info.pod))
            if key is None:
                seen.add(info.uid)
                units.append(
                    _Unit([info], [Victim(info.pod, node_info.name, p)], p, _start_time(info.pod))
                )
                continue
            members = gangs.members(key)
            seen.update(v.uid for v in members)
            if any(not v.priority < priority for v in members):
                continue  # a gang with a member we may not evict stays whole
            local = [clone.pods[v.uid] for v in members if v.uid in clone.pods]
            top = max(v.priority for v in members)
            start = min(_start_time(v.pod) for v in members)
            units.append(_Unit(local, list(members), top, start, key=key))
        if not units:
            return [], 0, Status.unresolvable(NO_VICTIMS)
        for unit in units:
            for info in unit.local:
                clone.remove_pod(info.uid)
        uid = str((pod.get("metadata") or {}).get("uid", ""))
        need = gpu_need(pod)
        others = [n for n in clone.nominated.values() if n.uid != uid and not n.priority < priority]

        def fits() -> Status:
            status = self.runner.run_filter(state, pod, clone)
            if (
                status.is_success
                and others
                and need
                and not leaves_room(clone.ledger, need, others)
            ):
                return Status.unschedulable(NOMINATED_ELSEWHERE)
            return status

        status = fits()
        if not status.is_success:
            return [], 0, status
        units.sort(key=lambda u: (-u.top.rank, u.start))
        allowed = [pdb.disruptions_allowed for pdb in pdbs]
        for unit in units:
            for victim in unit.members:
                for i, pdb in enumerate(pdbs):
                    if pdb.matches(victim.pod):
                        allowed[i] -= 1
                        if allowed[i] < 0:
                            unit.violates = True
        victims: list[Victim] = []
        violations = 0
        for unit in [u for u in units if u.violates] + [u for u in units if not u.violates]:
            for info in unit.local:
                clone.add_pod(info.pod, info.declared or info.assignment)
            if fits().is_success:
                continue  # reprieved
            for info in unit.local:
                clone.remove_pod(info.uid)
            victims.extend(unit.members)
            if unit.violates:
                violations += 1
        if not victims:  # the node had room all along (a stale status): nothing to evict
            return [], 0, Status.unschedulable("preemption found no victims to evict")
        victims.sort(key=lambda v: (-v.priority.rank, _start_time(v.pod)))
        return victims, violations, Status.success()

    # -- 5. choice ------------------------------------------------------------------------

    @staticmethod
    def select_candidate(candidates: Sequence[Candidate]) -> Candidate | None:
        """Upstream's ``pickOneNodeForPreemption`` (module docstring, step 5)."""
        if not candidates:
            return None

        def earliest_top_start(c: Candidate) -> float:
            top = c.victims[0].priority
            return min(_start_time(v.pod) for v in c.victims if v.priority == top)

        scores: list[Callable[[Candidate], float]] = [
            lambda c: -c.pdb_violations,
            lambda c: -c.victims[0].priority.rank,
            lambda c: -sum(v.priority.rank for v in c.victims),  # ranks are >= 0 already
            lambda c: -len(c.victims),
            earliest_top_start,
        ]
        remaining = list(candidates)
        for score in scores:
            values = [score(c) for c in remaining]
            best = max(values)
            remaining = [c for c, v in zip(remaining, values, strict=True) if v == best]
            if len(remaining) == 1:
                break
        return remaining[0]

    def preempt(self, pod: Pod, statuses: Mapping[str, Status]) -> Decision:
        """Steps 1, 2 and 5 (module docstring)."""
        nominated = (pod.get("status") or {}).get("nominatedNodeName")
        ok, why = self.eligible(pod, statuses.get(nominated) if nominated else None)
        if not ok:
            return Decision(None, why, eligible=False)
        candidates, reasons = self.find_candidates(pod, statuses)
        if not candidates:
            summary = _summary(len(statuses), reasons)
            return Decision(None, f"preemption: 0/{len(statuses)} nodes are available: {summary}")
        return Decision(self.select_candidate(candidates))

    # -- gangs as preemptors -----------------------------------------------------------------

    def preempt_group(self, members: Sequence[Pod]) -> GroupDecision:
        """Room for a whole gang, or none: every member is placed in turn on a what-if view of
        the nodes (clones; the snapshot is never modified), on a node where it fits as things
        are if there is one, else on the best candidate after evicting lower-priority pods
        there (steps 2-5 for that member, on the view that already lacks the victims chosen
        for the members before it and holds those members). Members asking most GPUs go
        first. If any member cannot be placed, nothing is evicted. The placements use the
        framework's Reserve on the view to learn which devices each member would hold (and
        Unreserve at once). O(members x (nodes + candidates x (pods + GPUs))).
        """
        for pod in members:
            if preemption_policy(pod) == NEVER:
                meta = pod.get("metadata") or {}
                return GroupDecision(
                    None,
                    message=f"member {meta.get('name', '')} has preemptionPolicy=Never: "
                    "the gang does not preempt",
                )
        lister = self.runner.node_lister
        view: dict[str, NodeInfo] = {}  # node -> its what-if clone

        def node(name: str) -> NodeInfo | None:
            info = view.get(name)
            if info is None:
                original = lister.get(name)
                if original is None:
                    return None
                info = view[name] = original.clone()
            return info

        pdbs = list(self._pdbs())
        gangs = _Gangs(self.runner)
        victims: dict[str, Victim] = {}
        nominations: dict[str, str] = {}
        order = sorted(members, key=lambda p: -gpu_need(p).gpus)
        potentials: dict[int, list[NodeInfo]] = {}  # rank -> nodes running a pod below it
        for pod in order:
            meta = pod.get("metadata") or {}
            uid = str(meta.get("uid", ""))
            state = CycleState()
            _, status = self.runner.run_pre_filter(state, pod)
            if not status.is_success:
                return GroupDecision(None, message=f"member {meta.get('name')}: {status.message()}")
            rank = pod_priority(pod).rank
            need = gpu_need(pod)
            target: str | None = None
            for original in lister.node_infos():  # as things are (with earlier choices)
                current = view.get(original.name, original)
                if need.gpus and current.ledger.free_gpu_count < need.gpus:
                    continue
                if self.runner.run_filter(state.clone(), pod, current).is_success:
                    target = original.name
                    break
            if target is None:
                candidates: list[Candidate] = []
                potential = potentials.get(rank)
                if potential is None:  # once per priority (a gang's members share one)
                    potential = potentials[rank] = [
                        info
                        for info in lister.node_infos()
                        if (low := info.lowest_priority_rank) is not None and low < rank
                    ]
                wanted = num_candidates(len(potential), self.percentage, self.absolute)
                offset = self.rng.randrange(len(potential)) if potential else 0
                for i in range(len(potential)):
                    name = potential[(offset + i) % len(potential)].name
                    what_if = node(name)
                    assert what_if is not None
                    chosen, violations, st = self.select_victims(
                        state.clone(), pod, what_if, pdbs, gangs
                    )
                    if st.is_success:
                        candidates.append(Candidate(name, tuple(chosen), violations))
                        if len(candidates) >= wanted:
                            break
                best = self.select_candidate(candidates)
                if best is None:
                    why = (
                        "fits nowhere even after evicting lower-priority pods"
                        if potential
                        else "fits nowhere, and no pod of lower priority runs to evict"
                    )
                    return GroupDecision(
                        None,
                        message=f"member {meta.get('name')} {why}: the gang does not preempt",
                    )
                for victim in best.victims:
                    victims[victim.uid] = victim
                    held = node(victim.node)
                    if held is not None:
                        held.remove_pod(victim.uid)
                target = best.node
            placed = node(target)
            assert placed is not None
            trial = state.clone()
            if not self.runner.run_filter(trial, pod, placed).is_success:
                return GroupDecision(None, message=f"member {meta.get('name')}: no longer fits")
            reserved = self.runner.run_reserve(trial, pod, target)
            assignment = trial.get(DEVICE_ASSIGNMENT)
            self.runner.run_unreserve(trial, pod, target)
            if not reserved.is_success:
                return GroupDecision(
                    None, message=f"member {meta.get('name')}: {reserved.message()}"
                )
            try:
                placed.add_pod(pod, assignment, assumed=True)
            except LedgerError as exc:  # a bug if it happens: the Filter just passed
                return GroupDecision(None, message=f"member {meta.get('name')}: {exc}")
            nominations[uid] = target
        ordered = sorted(victims.values(), key=lambda v: (-v.priority.rank, _start_time(v.pod)))
        return GroupDecision(nominations, tuple(ordered))


def _summary(nodes: int, reasons: Counter[str]) -> str:
    """Upstream's FitError wording: counts per reason, most frequent first, the nodes without
    one "Preemption is not helpful for scheduling" (no final period: the scheduler ends the
    FailedScheduling message with one)."""
    counts = Counter(reasons)
    rest = nodes - sum(reasons.values())
    if rest > 0:
        counts[NOT_HELPFUL] += rest
    parts = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{n} {text}" for text, n in parts)


class _Gangs:
    """Running gang members by group key: one pass over the snapshot, on first use."""

    def __init__(self, runner: FilterRunner) -> None:
        self._runner = runner
        self._by_key: dict[str, list[Victim]] | None = None

    def members(self, key: str) -> list[Victim]:
        if self._by_key is None:
            by_key: dict[str, list[Victim]] = {}
            group_key = self._runner.group_key
            for info in self._runner.node_lister.node_infos():
                for p in info.pods.values():
                    k = group_key(cast(Pod, p.pod))
                    if k is not None:
                        by_key.setdefault(k, []).append(Victim(p.pod, info.name, p.priority))
            self._by_key = by_key
        return self._by_key.get(key, [])
