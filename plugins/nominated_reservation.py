"""NominatedReservation: a node's GPUs stay with the higher-priority pod nominated to it.

Preemption (DefaultPreemption) evicts lower-priority pods from a node and nominates the
preemptor there; the scheduler records the nomination in its cache
(``SchedulerCache.nominate``), and the node info lists it until the preemptor is placed or
deleted. Without this Filter, the GPUs the victims free would go to whichever pod the queue
pops first, a stream of small lower-priority pods typically, and the preemptor would preempt
again (upstream guards the same window with ``RunFilterPluginsWithNominatedPods``).

Filter: a pod is refused a node when some pod of strictly *higher* priority
(:mod:`gpusched.priority`) is nominated there and, once this pod takes its GPUs, the node's
free GPUs could no longer hold those nominees (:func:`gpusched.cache.leaves_room`: whole GPUs
and shared VRAM, counted conservatively). Pods of equal or higher priority than every nominee,
pods asking no GPU, and the nominee itself pass. Reason :data:`REASON_HELD`.

Cost: O(1) on a node without nominations (nearly all of them); else O(nominees), plus O(GPUs)
when a nominee asks for VRAM. SignPod: the pod's priority rank and GPU need, which is all
Filter reads of the pod. Requeue: a pod it refused may fit when a pod is deleted (the nominee,
or a holder of the GPUs) or a node changes.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any, Final

from gpusched.cache import NO_NEED, GPUNeed, NodeInfo, gpu_need, leaves_room
from gpusched.framework import (
    SUCCESS,
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    CycleState,
    EnqueueExtensions,
    FilterPlugin,
    Pod,
    QueueingHint,
    SignPlugin,
    Status,
)
from gpusched.priority import Priority, pod_priority

__all__ = ["NAME", "REASON_HELD", "NominatedReservation"]

NAME: Final = "NominatedReservation"
REASON_HELD: Final = "node's GPUs are held for a higher-priority pod nominated to it"


class NominatedReservation(FilterPlugin, SignPlugin, EnqueueExtensions):
    """Refuses a lower-priority pod the GPUs kept for a pod nominated to the node."""

    NAME = NAME

    def __init__(self) -> None:
        self._memo: tuple[Pod, Priority, GPUNeed] | None = None

    def _read(self, pod: Pod) -> tuple[Priority, GPUNeed]:
        """The pod's priority and need, memoised for the last pod object (one per cycle)."""
        memo = self._memo
        if memo is not None and memo[0] is pod:
            return memo[1], memo[2]
        priority, need = pod_priority(pod), gpu_need(pod)
        self._memo = (pod, priority, need)
        return priority, need

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        nominated = node_info.nominated
        if not nominated:
            return SUCCESS
        priority, need = self._read(pod)
        if not need:
            return SUCCESS
        # Strictly higher: the nominee itself (and its equals) never counts, so the verdict
        # depends on the priority and the need alone, which is what the signature holds.
        held = [n for n in nominated.values() if n.priority > priority]
        if not held or leaves_room(node_info.ledger, need, held):
            return SUCCESS
        return Status.unschedulable(REASON_HELD, plugin=NAME)

    def sign_pod(self, pod: Pod) -> Hashable | None:
        priority, need = self._read(pod)
        if need is NO_NEED:
            return (NAME,)
        return (NAME, priority.rank, need.gpus, need.vram_mib, need.shared_gpus)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """A nominee deleted, a bound pod gone or finished (GPUs freed), a node changed."""
        return [
            ClusterEventWithHint(
                ClusterEvent("Pod", ActionType.DELETE | ActionType.UPDATE), _after_pod_change
            ),
            ClusterEventWithHint(ClusterEvent("Node", ActionType.ALL)),
        ]


def _after_pod_change(pod: Pod, old: Any, new: Any) -> QueueingHint:
    """QUEUE when a pod is deleted (a nominee, or a holder of GPUs), or when the pod that
    changed is bound or nominated (GPUs freed, a nomination moved); a pending pod's other
    updates cannot help."""
    if new is None:
        return QueueingHint.QUEUE
    for obj in (old, new):
        if not isinstance(obj, Mapping):
            continue
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        if spec.get("nodeName") or status.get("nominatedNodeName"):
            return QueueingHint.QUEUE
    return QueueingHint.QUEUE_SKIP
