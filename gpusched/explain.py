"""``gpusched explain``: why a pod is pending, or where it went, from the scheduler's own code.

:func:`explain` runs one pod through the profile's PreFilter, then Filter on *every* node
(no sampling, no equivalence class), then PreScore and Score on the nodes that passed,
with the same :class:`~gpusched.framework.Framework` and the same cache snapshot a scheduling
replica uses: the verdicts are the plugins' own statuses, and the headline is
:meth:`Scheduler.unschedulable_message` over them, the text the scheduler writes into the
pod's FailedScheduling Event and ``PodScheduled`` condition, PostFilter's part included
(its plugins run with ``CycleState.dry_run``: preemption says what it would do and evicts
nothing). Nothing is reserved, assumed, bound or written.

``gpusched explain NAMESPACE/POD`` builds a :class:`~gpusched.scheduler.Scheduler` from the
same configuration (``--config``), starts only its informers (:meth:`Scheduler.informed`),
and explains the pod on what they listed. Against a live cluster the answer is "what the
scheduler would say now"; a pod's last FailedScheduling message may be older (the cluster
changed since). A bound pod gets its node and devices (its annotations), not a replay. One
difference is known: while a preemption it started is under way (victims terminating), the
scheduler says "waiting for the pods evicted from node N to go" from its memory, and explain,
a separate process, says which victims preemption would choose now.

Cost: the informers' LISTs (every node, pod and inventory: the price of a replica's start),
then O(filter plugins x nodes + score plugins x feasible nodes) for the one pod.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from gpusched.annotations import GPU_IDS, GPU_UUIDS, RESERVED_VRAM_MIB
from gpusched.framework import CycleState, PreFilterResult, Status
from gpusched.gpu_requests import gpuclaim

if TYPE_CHECKING:
    from gpusched.scheduler import Scheduler

__all__ = ["Explanation", "NodeVerdict", "explain", "render"]

Phase = Literal["Pending", "Bound", "NotOurs", "Finished"]


@dataclass(frozen=True, slots=True)
class NodeVerdict:
    """One node, as the pod's Filter and Score saw it."""

    node: str
    fits: bool
    plugin: str = ""
    """The plugin that rejected the pod here ("" when it fits)."""
    code: str = ""
    """``Unschedulable``, ``UnschedulableAndUnresolvable`` (no preemption helps) or ``Error``."""
    reasons: tuple[str, ...] = ()
    score: int | None = None
    """The weighted total of the Score plugins (nodes that fit; ``None`` when only one fits,
    as the scheduler then scores nothing)."""
    scores: Mapping[str, int] = field(default_factory=dict)
    """Each Score plugin's weighted part of ``score``."""


@dataclass(frozen=True, slots=True)
class Explanation:
    """What :func:`explain` found (module docstring); ``-o json`` prints it as is."""

    namespace: str
    name: str
    scheduler_name: str
    phase: Phase
    message: str
    """Pending: the FailedScheduling message the scheduler would write now, or which node it
    would choose. Otherwise: where the pod is, or why gpusched does not schedule it."""
    node: str | None = None
    """Bound: its node. Pending: the node the scheduler would choose now (highest score)."""
    devices: Mapping[str, str] = field(default_factory=dict)
    """Bound: the device annotations the Binding wrote (gpu-ids, gpu-uuids, reserved VRAM)."""
    last_attempt: str | None = None
    """The pod's ``PodScheduled`` condition message: what the scheduler last wrote."""
    gang: str | None = None
    claims: tuple[str, ...] = ()
    verdicts: tuple[NodeVerdict, ...] = ()


def explain(scheduler: Scheduler, pod: dict[str, Any]) -> Explanation:
    """Explain ``pod`` on the scheduler's current cache (module docstring). Synchronous,
    never writes; call it on the event loop that runs the scheduler's informers."""
    from gpusched.scheduler import SchedulingResult

    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    base: dict[str, Any] = {
        "namespace": str(meta.get("namespace", "")),
        "name": str(meta.get("name", "")),
        "scheduler_name": str(spec.get("schedulerName") or "default-scheduler"),
        "last_attempt": _condition(status),
        "claims": _claims(pod),
    }
    fw = scheduler.frameworks.get(base["scheduler_name"])
    if spec.get("nodeName"):
        annotations = meta.get("annotations") or {}
        devices = {
            k: str(annotations[k])
            for k in (GPU_IDS, GPU_UUIDS, RESERVED_VRAM_MIB)
            if k in annotations
        }
        return Explanation(
            **base,
            phase="Bound",
            node=str(spec["nodeName"]),
            devices=devices,
            message=f"bound to node {spec['nodeName']}"
            + (f" with GPUs {devices[GPU_IDS]}" if GPU_IDS in devices else ""),
        )
    if status.get("phase") in ("Succeeded", "Failed"):
        return Explanation(**base, phase="Finished", message=f"the pod {status['phase']}")
    if fw is None:
        profiles = ", ".join(sorted(scheduler.frameworks))
        return Explanation(
            **base,
            phase="NotOurs",
            message=f"spec.schedulerName is {base['scheduler_name']!r}: gpusched schedules "
            f"pods of its profiles only ({profiles}); set spec.schedulerName to one of them",
        )
    scheduler.cache.update_snapshot(scheduler.snapshot)
    base["gang"] = fw.group_key(pod)
    all_nodes = scheduler.snapshot.node_infos()
    state = CycleState(dry_run=True)
    pre, pre_status = fw.run_pre_filter(state, pod)
    if not pre_status.is_success:
        message, _ = scheduler.unschedulable_message(
            fw, state, pod, SchedulingResult(None, status=pre_status)
        )
        verdicts = tuple(_rejected(ni.name, pre_status) for ni in all_nodes)
        return Explanation(**base, phase="Pending", message=message, verdicts=verdicts)
    nodes, left_out = _restricted(all_nodes, pre)
    statuses: dict[str, Status] = {}
    feasible = []
    for node_info in nodes:
        st = fw.run_filter(state, pod, node_info)
        if st.is_success:
            feasible.append(node_info)
        else:
            statuses[node_info.name] = st
    if left_out is not None:
        for node_info in all_nodes:
            statuses.setdefault(node_info.name, left_out)
    rejected = [_rejected(name, st) for name, st in statuses.items()]
    if not feasible:
        result = (
            SchedulingResult(None, statuses=statuses)
            if all_nodes
            else SchedulingResult(None, status=Status.unresolvable("no nodes available"))
        )
        message, _ = scheduler.unschedulable_message(fw, state, pod, result)
        return Explanation(**base, phase="Pending", message=message, verdicts=tuple(rejected))
    fitting = _scored(fw, state, pod, feasible)
    best = max(fitting, key=lambda v: v.score or 0).node if fitting else None
    return Explanation(
        **base,
        phase="Pending",
        node=best,
        message=f"{len(feasible)}/{len(all_nodes)} nodes fit; the scheduler would choose "
        f"{best} now (the highest score; ties are broken at random)",
        verdicts=tuple(
            sorted(fitting, key=lambda v: -(v.score or 0)) + sorted(rejected, key=_by_node)
        ),
    )


def _restricted(
    all_nodes: Sequence[Any], pre: PreFilterResult | None
) -> tuple[list[Any], Status | None]:
    """The nodes a PreFilterResult leaves, and the status of those it left out (as
    ``Scheduler.find_placement``)."""
    if pre is None or pre.node_names is None:
        return list(all_nodes), None
    names = sorted(pre.plugins)
    left_out = Status.unresolvable(
        f"node(s) didn't satisfy plugin(s) [{' '.join(names)}]",
        plugin=names[0] if names else "",
    )
    return [n for n in all_nodes if n.name in pre.node_names], left_out


def _scored(
    fw: Any, state: CycleState, pod: dict[str, Any], feasible: list[Any]
) -> list[NodeVerdict]:
    if len(feasible) == 1 or not fw.has_score_plugins():
        return [NodeVerdict(ni.name, True) for ni in feasible]
    status = fw.run_pre_score(state, pod, feasible)
    breakdown: dict[str, list[int]] = {}
    scores: list[Any] = []
    if status.is_success:
        scores, status = fw.run_score(state, pod, feasible, breakdown)
    if not status.is_success:
        return [NodeVerdict(ni.name, True, reasons=(status.message(),)) for ni in feasible]
    return [
        NodeVerdict(
            ni.name,
            True,
            score=total.score,
            scores={plugin: parts[i] for plugin, parts in breakdown.items()},
        )
        for i, (ni, total) in enumerate(zip(feasible, scores, strict=True))
    ]


def _rejected(node: str, status: Status) -> NodeVerdict:
    return NodeVerdict(
        node,
        False,
        plugin=status.plugin,
        code=status.code.label,
        reasons=tuple(status.reasons) or (status.message(),),
    )


def _by_node(verdict: NodeVerdict) -> str:
    return verdict.node


def _condition(status: Mapping[str, Any]) -> str | None:
    for condition in status.get("conditions") or ():
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return str(condition.get("message") or condition.get("reason") or "")
    return None


def _claims(pod: Mapping[str, Any]) -> tuple[str, ...]:
    """The claims the pod refers to: its GpuClaim and its ResourceClaims (DRA)."""
    namespace = (pod.get("metadata") or {}).get("namespace", "")
    out = []
    name = gpuclaim.claim_name(pod)
    if name is not None:
        out.append(f"GpuClaim {namespace}/{name}")
    statuses = {
        s.get("name"): s.get("resourceClaimName")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or ()
    }
    for ref in (pod.get("spec") or {}).get("resourceClaims") or ():
        if ref.get("resourceClaimName"):
            out.append(f"ResourceClaim {namespace}/{ref['resourceClaimName']}")
        elif ref.get("resourceClaimTemplateName"):
            made = statuses.get(ref.get("name"))
            out.append(
                f"ResourceClaim {namespace}/{made}"
                if made
                else f"ResourceClaimTemplate {namespace}/{ref['resourceClaimTemplateName']} "
                "(no claim made from it yet)"
            )
    return tuple(out)


def as_dict(explanation: Explanation) -> dict[str, Any]:
    """The explanation as JSON-ready data (``-o json``/``-o yaml``)."""
    return dataclasses.asdict(explanation)


def render(explanation: Explanation, *, wide: bool = False, limit: int = 20) -> str:
    """A readable report: the headline, then one row per node (the fitting ones first, by
    score), at most ``limit`` rows unless ``wide``."""
    e = explanation
    lines = [f"Pod {e.namespace}/{e.name} (schedulerName {e.scheduler_name}): {e.phase}"]
    lines.append(f"  {'Now' if e.phase == 'Pending' else 'Where'}: {e.message}")
    if e.devices:
        shown_devices = {k: v for k, v in e.devices.items() if wide or k != GPU_UUIDS}
        lines.append("  Devices: " + ", ".join(f"{k}={v}" for k, v in shown_devices.items()))
    if e.last_attempt:
        lines.append(f"  Last attempt: {e.last_attempt}")
    if e.gang:
        lines.append(f"  Gang: {e.gang} (placed all or nothing; the rows are this member alone)")
    for claim in e.claims:
        lines.append(f"  Claim: {claim}")
    if not e.verdicts:
        return "\n".join(lines) + "\n"
    rows = [("NODE", "FITS", "PLUGIN", "SCORE", "WHY")]
    shown = e.verdicts if wide else e.verdicts[:limit]
    for v in shown:
        if v.fits:
            why = ", ".join(f"{p} {s}" for p, s in sorted(v.scores.items(), key=lambda x: -x[1]))
        else:
            why = "; ".join(v.reasons)
        score = "-" if v.score is None else str(v.score)
        rows.append((v.node, "yes" if v.fits else "no", v.plugin or "-", score, why))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines.append("")
    for row in rows:
        lines.append(
            "  ".join(c.ljust(w) for c, w in zip(row[:4], widths, strict=True)) + "  " + row[4]
        )
    if len(shown) < len(e.verdicts):
        lines.append(f"... {len(e.verdicts) - len(shown)} more nodes (-o wide shows all)")
    return "\n".join(lines) + "\n"
