"""VRAMHeadroom: for shared GPU pods, nodes with more VRAM left free after the pod score higher.

WoolyAI's scheduler ranks nodes by VRAM headroom among other things (seed 000, "Score"); this
is that term on its own, for pods that share GPUs by VRAM (``gpusched.io/gpu`` with
``gpusched.io/vram``, HAMi's ``gpumem``, KAI's fractions, WoolyAI's ``pod-vram``). It spreads
shares over the fleet by memory, leaving each node room for pods that grow or arrive later,
where GPUFit's ``binpack`` fills GPUs; enable one or the other, or weigh them against each other.

The score is upstream NodeResourcesFit's ``LeastAllocated`` applied to VRAM::

    capacity = sum over the node's shareable GPUs of memory x overcommit percent / 100
    free     = sum over those GPUs of (their capacity - VRAM reserved on them)
    score    = 100 x max(free - gpus x share, 0) / capacity        (0 when capacity is 0)

where *shareable* GPUs are those with known memory, MIG off, whose policy allows sharing
and that nobody holds exclusively (those add nothing to either sum), ``gpus x share`` is the
pod's VRAM (a fraction is taken of the node's largest such GPU: nodes are uniform in
practice). It is a function of the node's ledger and the pod's shape alone, on an absolute
scale, so the plugin signs the pod with ``(gpus, vram_mib, vram_fraction)`` and has no
NormalizeScore. Other pods (whole GPUs, MIG, exclusive shares, no GPU) Skip at PreScore.

Costs: PreScore and SignPod one request read per pod (memoised for the last pod object);
Score O(GPUs) per node.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Final, NamedTuple, Self

from gpusched.framework import (
    MAX_NODE_SCORE,
    MIN_NODE_SCORE,
    SUCCESS,
    CycleState,
    Handle,
    Pod,
    PreScorePlugin,
    ScorePlugin,
    SignPlugin,
    StateKey,
    Status,
)
from gpusched.gpu_requests import ClaimSpecs, RequestError, read_gpu_request

if TYPE_CHECKING:
    from gpusched.cache import NodeInfo, NodeLedger

__all__ = ["NAME", "Share", "VRAMHeadroom", "headroom_score", "share_of"]

NAME: Final = "VRAMHeadroom"


class Share(NamedTuple):
    """A shared pod's VRAM shape: ``gpus`` GPUs, each ``vram_mib`` or ``vram_fraction``."""

    gpus: int
    vram_mib: int | None
    vram_fraction: Fraction | None


_SHARE: Final = StateKey[Share]("PreScoreVRAMHeadroom")


def share_of(pod: Pod, claims: ClaimSpecs | None = None) -> Share | None:
    """The pod's share when it shares GPUs by VRAM (not exclusively); else ``None`` (also
    for a request that cannot be read: GPUFit rejects it with the reader's message).
    ``claims``: where its GpuClaim is found (``Handle.claim_specs``)."""
    try:
        request = read_gpu_request(pod, claims)
    except (RequestError, TypeError, AttributeError, ValueError):
        return None
    if request is None or request.mode != "shared" or request.exclusive:
        return None
    return Share(request.count, request.vram_mib, request.vram_fraction)


def headroom_score(ledger: NodeLedger, share: Share) -> int:
    """The module docstring's score of ``share`` on the node with ``ledger``, 0..100. O(GPUs)."""
    capacity = free = largest = 0
    for device in ledger.devices:
        memory = device.memory_mib
        if (
            memory is None
            or device.mig_enabled
            or device.exclusive is not None
            or not device.policy.allow_shared
        ):
            continue
        cap = device.policy.capacity_mib(memory)
        capacity += cap
        free += max(cap - device.reserved_mib, 0)
        largest = max(largest, memory)
    if capacity <= 0:
        return MIN_NODE_SCORE
    if share.vram_mib is not None:
        per_gpu = share.vram_mib
    else:
        per_gpu = int(largest * (share.vram_fraction or 0))
    left = max(free - share.gpus * per_gpu, 0)
    return MAX_NODE_SCORE * left // capacity


class VRAMHeadroom(PreScorePlugin, ScorePlugin, SignPlugin):
    """Shared pods: the node's VRAM left free after the pod, in percent of its capacity."""

    NAME = NAME

    def __init__(self, handle: Handle | None = None) -> None:
        self._handle = handle
        self._memo: tuple[object, Share | None] | None = None

    @classmethod
    def new(cls, args: Any, handle: Handle) -> Self:
        return cls(handle)

    def _share(self, pod: Pod) -> Share | None:
        memo = self._memo
        if memo is not None and memo[0] is pod:
            return memo[1]
        share = share_of(pod, self._handle.claim_specs if self._handle is not None else None)
        self._memo = (pod, share)
        return share

    def pre_score(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        """Skip (no Score calls) unless the pod shares GPUs by VRAM."""
        share = self._share(pod)
        if share is None:
            return Status.skip()
        state.write(_SHARE, share)
        return SUCCESS

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> tuple[int, Status]:
        share = state.get(_SHARE)
        if share is None:  # PreScore disabled for this plugin
            share = self._share(pod)
            if share is None:
                return MIN_NODE_SCORE, SUCCESS
        return headroom_score(node_info.ledger, share), SUCCESS

    def sign_pod(self, pod: Pod) -> Hashable:
        """The pod's share shape (``None`` for pods this plugin skips: they sign alike)."""
        return (self._share(pod),)
