"""Nominations: GPUs a node keeps for pods nominated to it (preemption, reservations).

When preemption evicts pods to make room for a pod, the scheduler *nominates* the pod to the
node (``status.nominatedNodeName``) and records it here through
``SchedulerCache.nominate(pod, node)``: the node info lists it, with its :class:`Priority` and
its :class:`GPUNeed`, and takes a new generation, so every equivalence class re-evaluates the
node. The NominatedReservation Filter then turns away a pod of *lower* priority whose GPUs
would leave too few for the nominated pods of higher priority (:func:`leaves_room`). The
nomination goes when the pod is assumed or bound (anywhere), when it is deleted, or when it is
nominated elsewhere (``SchedulerCache.clear_nomination``).

This is upstream's ``RunFilterPluginsWithNominatedPods`` cut down to what gpusched places: it
adds the nominated pods to a copy of the node and runs every Filter twice; here only GPUs
count, in two sums. The rule, deliberately conservative (a lower-priority pod is refused
rather than risk the preemptor's GPUs):

- whole GPUs: the node's free GPUs, less what the pod may take whole (its whole GPUs, or one
  idle GPU per GPU of a share, which may open an idle one), must hold the nominees' whole GPUs;
- VRAM: the free memory of GPUs that take shares, less the pod's VRAM (a whole GPU counts as
  the largest GPU's memory), must hold the nominees' shares.

MIG devices are not counted (a MIG-enabled GPU is never free whole), nor the VRAM of a share
asked as a fraction of each GPU (its size depends on the GPU chosen); such a share still counts
the idle GPUs it may open. Costs: :func:`gpu_need`
~3 us (the request readers' fast path), once per nomination or per cycle; :func:`leaves_room`
O(1) for whole GPUs, O(GPUs) when a nominee needs VRAM; nodes without nominations cost nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpusched.cache.ledger import NodeLedger
from gpusched.priority import Priority

__all__ = ["NO_NEED", "GPUNeed", "Nominee", "gpu_need", "leaves_room"]


@dataclass(frozen=True, slots=True)
class GPUNeed:
    """What a pod takes on a node: ``gpus`` whole (idle) GPUs, or a share of ``vram_mib`` in
    all spread over ``shared_gpus`` GPUs."""

    gpus: int = 0
    vram_mib: int = 0
    shared_gpus: int = 0

    def __bool__(self) -> bool:
        return bool(self.gpus or self.vram_mib or self.shared_gpus)


NO_NEED = GPUNeed()


@dataclass(frozen=True, slots=True)
class Nominee:
    """A pod nominated to a node: immutable, shared by the node info's clones."""

    uid: str
    name: str
    priority: Priority
    need: GPUNeed


def gpu_need(pod: Mapping[str, Any]) -> GPUNeed:
    """The pod's :class:`GPUNeed` from its GPU request; none for a pod asking no GPU, MIG
    devices, or a request that does not read (GPUFit rejects it anyway). Never raises."""
    from gpusched.gpu_requests import RequestError, read_gpu_request  # they import the cache

    try:
        request = read_gpu_request(pod)
    except (RequestError, TypeError, AttributeError, ValueError):
        return NO_NEED
    if request is None or request.mode == "mig":
        return NO_NEED
    if request.mode == "whole" or request.exclusive:
        return GPUNeed(gpus=request.count)
    return GPUNeed(vram_mib=request.count * (request.vram_mib or 0), shared_gpus=request.count)


def _free_share_mib(ledger: NodeLedger) -> int:
    return sum(
        d.memory_mib - d.reserved_mib
        for d in ledger.devices
        if d.memory_mib is not None
        and not d.mig_enabled
        and d.exclusive is None
        and d.unhealthy is None
    )


def leaves_room(ledger: NodeLedger, pod_need: GPUNeed, held: Iterable[Nominee]) -> bool:
    """Whether the node still holds every nominee in ``held`` once a pod needing ``pod_need``
    takes its part (module docstring)."""
    gpus = 0
    vram = 0
    for nominee in held:
        gpus += nominee.need.gpus
        vram += nominee.need.vram_mib
    if gpus and ledger.free_gpu_count - max(pod_need.gpus, pod_need.shared_gpus) < gpus:
        return False
    if vram:
        largest = max((d.memory_mib or 0 for d in ledger.devices), default=0)
        taken = pod_need.vram_mib + pod_need.gpus * largest
        if _free_share_mib(ledger) - taken < vram:
            return False
    return True
