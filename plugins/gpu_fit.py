"""GPUFit: which node, and which of its devices, a pod asking for GPUs gets.

kube-scheduler counts ``nvidia.com/gpu`` as a number and leaves the devices to the kubelet's
device plugin; gpusched picks them itself, so that a multi-GPU pod gets GPUs joined by NVLink,
a shared pod a slice of a GPU that has the VRAM, and a MIG pod a free MIG device (or, when its
profile is free nowhere, one of the fallbacks it lists).

- **PreFilter** reads the pod's request once (:func:`gpusched.gpu_requests.read_gpu_request`;
  a :class:`~gpusched.gpu_requests.RequestError` is UnschedulableAndUnresolvable with its
  message; no GPU is Skip). Whole GPUs: as below. Shared and MIG: the request, and for a MIG
  pod with fallbacks whose profile is free on no node, the fallback to place
  (O(nodes x GPUs), those pods only).
- **Shared, exclusive and MIG** pods (:meth:`GPUFit._filter_plan`): Filter asks the node's
  device ledger for devices that take the share (or idle ones, or free MIG devices), chooses
  by ``strategy`` (binpack: fullest first; spread: emptiest), and rejects with one fixed
  reason per kind of refusal so the scheduler's summary aggregates; Score (binpack; spread
  scores ``100 -`` it, the room part below excepted) keeps whole GPUs idle: a choice that
  joins GPUs already in use scores 50..100 by how full they are once the pod holds its part
  (the tightest fit wins), one that opens an idle GPU (an exclusive pod always does) 0..48,
  a quarter by the node's GPUs in use *before* the pod (open into busy nodes, keep idle
  nodes whole) and three quarters by the room the opened GPU keeps for the next pods of the
  kind (free VRAM; MIG: free devices of the profile), so they join it rather than open
  another; Reserve
  writes the devices with the VRAM slice per device (what the cache reads back from the
  bound pod's annotations), marks the claim
  :data:`~gpusched.framework.SHARED_CLAIM` for a non-exclusive reservation, and for the
  Binding adds ``gpusched.io/mig-fallback-applied`` (with an Event) or WoolyAI's
  ``woolyai.com/gpu-ids`` and ``woolyai.com/reserved-vram-mib``. O(GPUs + MIG devices) per
  node. NodeResourcesFit leaves ``gpusched.io/vram`` and the other per-GPU quantities to us.

- **GPU classes** (``gpusched.io/gpu-class``, WoolyAI's ``cuda.scheduler.io/gpu-class``):
  PreFilter resolves the name in ``Handle.gpu_classes`` (unknown: UnschedulableAndUnresolvable
  naming the classes that exist) and places the pod as a plan, whole GPUs included (as
  exclusive GPUs; several idle GPUs of a class are chosen by the topology, as whole GPUs
  are, but scored by the strategy's fill). Filter keeps the devices of the class
  on the node (:func:`~gpusched.gpu_policy.resolve.match_class`, memoised per node, class,
  labels and inventory objects; none: :data:`REASON_CLASS_MISSING`), makes the pod exclusive
  for an ``exclusive`` class, and skips GPUs holding the class's ``maxClientsPerGPU`` pods.
  PostFilter says why no node has a GPU of the class (:func:`never_fits_class`). The class's
  name and spec are in the signature, and a ``GPUClass`` event re-queues the pods asking for
  it.

Whole GPUs:

- **Filter** checks the node (advertised, free in the device ledger, ``allocatable -
  requested``, no device conflict) and, if the pod fits, *chooses* its ``N`` GPUs there
  (:mod:`gpusched.topology.selection`: the free set with the most NVLinks, then the best
  PCIe proximity, leaving the rest well connected; among the sets that meet the pod's rule,
  ``gpusched.io/min-bandwidth-gbps`` and ``gpusched.io/contiguous``), recorded in
  :data:`GPU_CHOICES`. A ``Required`` rule no free set meets rejects the node saying what it
  offers ("could not give 4 GPUs joined at >= 600 GB/s: the best free set offers 100 GB/s").
  Memoised per node-info generation, ``N`` and rule, and per topology, so an unchanged node
  costs a dict lookup.
- **Score**, ``N >= 2``, ``topologyFirst`` (default): topology before packing, node-local
  and lexicographic: the tier of the set's quality (:func:`gpusched.topology.set_quality` of
  its link score) among the qualities ``N`` GPUs of a known layout can have, times the
  points per tier, plus best fit (fewest GPUs left free) within the tier (:meth:`_tiered`), so
  a pod gets a set as good as the best any node offers and packing decides among those nodes.
  ``topologyFirst: false``: the weighted mean of quality and packing (``topologyWeight``,
  ``binPackingWeight``). One GPU: packing. Integer arithmetic in 0..100.
- **PostFilter** (no node fits) says why when no node could *ever* take the pod: more GPUs
  than the largest node has, GPUs that exist but are MIG-partitioned (naming the MIG
  resources the nodes offer instead), or a ``Required`` rule no node meets even idle.
  O(nodes), only for pods that fit nowhere. Such a sentence is UnschedulableAndUnresolvable
  (preemption after it is not tried: evicting pods cannot help); otherwise it says nothing
  and preemption may make room.
- **Reserve** writes the choice on the chosen node as :data:`gpusched.framework.DEVICE_ASSIGNMENT`,
  which the scheduler assumes in its cache and DefaultBinder puts on the Binding.
- **SignPod**: pods asking no GPUs sign alike; whole-GPU pods by ``N`` and the priority, and
  for ``N >= 2`` the rule and the ladder's version (every score is the node's alone); shared
  pods by every field Filter and Score read, MIG pods by profile; MIG pods with fallbacks and
  rejected pods ``None``.

The Filter rules and reasons, the selection, the score formula with worked numbers, and why
each signature is safe: docs/gpu_fit.md.

Args::

    - name: GPUFit
      args: {maxCombinations: 5000, topologyFirst: true, topologyWeight: 1,
             binPackingWeight: 1, strategy: binpack}
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from itertools import combinations, islice
from math import comb
from typing import TYPE_CHECKING, Any, Final, Literal, Self

from pydantic import Field, model_validator

from gpusched.annotations import (
    CONTIGUOUS,
    GPU_IDS,
    MIN_BANDWIDTH_GBPS,
    TOPOLOGY,
    AnnotationError,
    Assignment,
    parse_assignment,
    parse_priority,
)
from gpusched.cache import MIG_RESOURCE_PREFIX, TERMINAL_PHASES, Snapshot, pod_requests
from gpusched.cache.ledger import mib_text
from gpusched.framework import (
    DEVICE_ASSIGNMENT,
    MAX_NODE_SCORE,
    SHARED_CLAIM,
    SUCCESS,
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    CycleState,
    EnqueueExtensions,
    FilterPlugin,
    Handle,
    PluginArgs,
    Pod,
    PostFilterPlugin,
    PostFilterResult,
    PreFilterPlugin,
    PreFilterResult,
    PreScorePlugin,
    QueueingHint,
    ReservePlugin,
    ScorePlugin,
    SignPlugin,
    StateKey,
    Status,
)
from gpusched.gpu_policy.models import GPUClass
from gpusched.gpu_policy.resolve import ClassMatch, match_class
from gpusched.gpu_requests import GPURequest as PodRequest
from gpusched.gpu_requests import RequestError, read_gpu_request
from gpusched.gpu_requests.native import EXCLUSIVE as EXCLUSIVE_ANNOTATION
from gpusched.gpu_requests.native import GPU_CLASS as GPU_CLASS_ANNOTATION
from gpusched.gpu_requests.native import GPU_IDS_REQUEST
from gpusched.gpu_requests.woolyai import GPU_CLASS as WOOLYAI_GPU_CLASS_ANNOTATION
from gpusched.inventory import RESOURCE_GPU, GPUNodeInventory, mig_resource_name
from gpusched.topology import (
    GPUTopology,
    SetRule,
    build_topology,
    matrix_set_score,
    pair_gbps,
    set_quality,
)
from gpusched.topology.selection import NO_RULE

from ._helper import pod_of, pod_spec
from .default_binder import BINDING_ANNOTATIONS, BindingAnnotations

if TYPE_CHECKING:
    from gpusched.cache import NodeInfo, NodeLedger

__all__ = [
    "DEFAULT_MAX_COMBINATIONS",
    "GPU_CHOICES",
    "MIG_FALLBACK_APPLIED",
    "MIG_FALLBACK_LIST",
    "NAME",
    "REASON_CLASS_MISSING",
    "REASON_GPUS_IN_CONFLICT",
    "REASON_GPU_IDS",
    "REASON_GPU_UNHEALTHY",
    "REASON_INSUFFICIENT_FREE_GPUS",
    "REASON_INSUFFICIENT_GPU_RESOURCE",
    "REASON_INVALID_NODE",
    "REASON_MIG_BUSY",
    "REASON_MIG_MISSING",
    "REASON_MIXED_REQUEST",
    "REASON_NODE_CLIENTS",
    "REASON_NO_IDLE_GPU",
    "REASON_SHARE_CLIENTS",
    "REASON_SHARE_CORES",
    "REASON_SHARE_EXCLUSIVE",
    "REASON_SHARE_NEVER",
    "REASON_SHARE_PHYSICAL",
    "REASON_SHARE_VRAM",
    "REASON_TOO_FEW_GPUS",
    "WOOLYAI_GPU_IDS",
    "WOOLYAI_RESERVED_VRAM_MIB",
    "GPUChoice",
    "GPUChoices",
    "GPUFit",
    "GPUFitArgs",
    "GPURequest",
    "Strategy",
    "choice_for",
    "never_fits",
    "never_fits_class",
    "never_fits_plan",
]

NAME: Final = "GPUFit"

REASON_INSUFFICIENT_FREE_GPUS: Final = "Insufficient free GPUs"
"""Unschedulable: the node's device ledger has fewer than N free whole GPUs."""
REASON_INSUFFICIENT_GPU_RESOURCE: Final = f"Insufficient {RESOURCE_GPU}"
"""Unschedulable: ``allocatable - requested`` of ``nvidia.com/gpu`` is below N (the same words
as NodeResourcesFit, so the two aggregate in one count)."""
REASON_TOO_FEW_GPUS: Final = "node(s) had fewer GPUs than the pod requests"
"""UnschedulableAndUnresolvable: even empty, the node could not give N whole GPUs."""
REASON_GPUS_IN_CONFLICT: Final = "node(s) had GPUs whose holders are unknown"
"""Unschedulable: some pod's devices on the node could not be booked (a cache conflict)."""
REASON_INVALID_NODE: Final = "node(s) had an invalid status.allocatable"
"""UnschedulableAndUnresolvable: the node's allocatable could not be read."""
REASON_MIXED_REQUEST: Final = "pod requests whole GPUs and MIG devices together"
"""UnschedulableAndUnresolvable (PreFilter): a pod holds whole GPUs or MIG devices, not both."""

DEFAULT_MAX_COMBINATIONS: Final = 5000
"""Largest ``C(free GPUs, N)`` searched exhaustively; above it the search is greedy."""

_NODES_MAX: Final = 100_000
"""Cached node -> topology entries before the cache resets (nodes that left stay until then)."""

_GPU_PLUGINS: Final = frozenset({NAME, "NodeResourcesFit"})
"""Plugins whose rejections PostFilter looks past: they are about the GPUs (or resources)."""

# Shared GPUs: one fixed reason per kind of refusal, so that the scheduler's summary counts
# nodes ("3 node(s) had ..."); the ledger's sentences with each GPU's numbers are for
# ``gpusched explain``-style detail (NodeLedger.refusals).
REASON_SHARE_NEVER: Final = "node(s) had too few GPUs that could ever hold the pod's VRAM share"
"""UnschedulableAndUnresolvable: even idle, too few GPUs of the node could take the share (too
small after overcommit, MIG mode, unknown memory, a policy without sharing, too few GPUs)."""
REASON_SHARE_VRAM: Final = "node(s) had too few GPUs with enough free VRAM for the pod's share"
REASON_SHARE_PHYSICAL: Final = (
    "node(s) had too few GPUs whose VRAM is not promised to pods that cannot swap to host memory"
)
REASON_SHARE_CLIENTS: Final = "node(s) had too few GPUs below their client limit"
REASON_SHARE_EXCLUSIVE: Final = "node(s) had too few GPUs not held exclusively"
REASON_SHARE_CORES: Final = "node(s) had too few GPUs with the pod's compute share free"
REASON_NODE_CLIENTS: Final = "node(s) had the most pods sharing GPUs their policy allows"
REASON_NO_IDLE_GPU: Final = "node(s) had too few idle GPUs for an exclusive pod"
REASON_GPU_IDS: Final = "node(s) could not give the GPU indices the pod names"
"""Unschedulable (UnschedulableAndUnresolvable when an index does not exist on the node)."""
REASON_MIG_MISSING: Final = "node(s) had no MIG device of the requested profile"
"""UnschedulableAndUnresolvable: the node offers no MIG device of the profile at all."""
REASON_MIG_BUSY: Final = "node(s) had too few free MIG devices of the requested profile"
REASON_GPU_UNHEALTHY: Final = "node(s) had too few healthy GPUs free"
"""Unschedulable: enough GPUs are idle, but some are unhealthy (the node's inventory says
why); they may recover, and an inventory update re-queues the pod."""

REASON_CLASS_MISSING: Final = "node(s) had no GPU of the pod's GPUClass"
"""UnschedulableAndUnresolvable: no GPU of the node belongs to the class the pod asks for
(only a change of the class, the node's labels or its inventory can change that)."""

MIG_FALLBACK_APPLIED: Final = "gpusched.io/mig-fallback-applied"
"""Written on the Binding when a MIG pod got a fallback profile: ``"2g.20gb->1g.10gb"``."""
MIG_FALLBACK_LIST: Final = "gpusched.io/mig-fallback"
WOOLYAI_GPU_IDS: Final = "woolyai.com/gpu-ids"
WOOLYAI_RESERVED_VRAM_MIB: Final = "woolyai.com/reserved-vram-mib"

Strategy = Literal["binpack", "spread"]

_SHARE_KIND_REASON: Final = {
    "capacity": REASON_SHARE_VRAM,
    "physical": REASON_SHARE_PHYSICAL,
    "clients": REASON_SHARE_CLIENTS,
    "exclusive": REASON_SHARE_EXCLUSIVE,
    "cores": REASON_SHARE_CORES,
    "starved": REASON_SHARE_CORES,
    "unhealthy": REASON_GPU_UNHEALTHY,
}
"""Ledger refusal kinds a pod leaving could clear, and their reasons (the others never clear)."""
_SHARE_STATUS: Final = {
    reason: Status.unschedulable(reason, plugin=NAME) for reason in _SHARE_KIND_REASON.values()
}
_SHARE_NEVER: Final = Status.unresolvable(REASON_SHARE_NEVER, plugin=NAME)
_NODE_CLIENTS: Final = Status.unschedulable(REASON_NODE_CLIENTS, plugin=NAME)
_NO_IDLE: Final = Status.unschedulable(REASON_NO_IDLE_GPU, plugin=NAME)
_UNHEALTHY: Final = Status.unschedulable(REASON_GPU_UNHEALTHY, plugin=NAME)
_IDS_BUSY: Final = Status.unschedulable(REASON_GPU_IDS, plugin=NAME)
_IDS_MISSING: Final = Status.unresolvable(REASON_GPU_IDS, plugin=NAME)
_MIG_MISSING: Final = Status.unresolvable(REASON_MIG_MISSING, plugin=NAME)
_MIG_BUSY: Final = Status.unschedulable(REASON_MIG_BUSY, plugin=NAME)
_CLASS_MISSING: Final = Status.unresolvable(REASON_CLASS_MISSING, plugin=NAME)

_TOO_FEW: Final = Status.unresolvable(REASON_TOO_FEW_GPUS, plugin=NAME)
_NO_FREE: Final = Status.unschedulable(REASON_INSUFFICIENT_FREE_GPUS, plugin=NAME)
_NO_RESOURCE: Final = Status.unschedulable(REASON_INSUFFICIENT_GPU_RESOURCE, plugin=NAME)
_CONFLICT: Final = Status.unschedulable(REASON_GPUS_IN_CONFLICT, plugin=NAME)
_INVALID_NODE: Final = Status.unresolvable(REASON_INVALID_NODE, plugin=NAME)
_MIXED: Final = Status.unresolvable(REASON_MIXED_REQUEST, plugin=NAME)


# -- the cycle state: the request and the choices (Reserve turns one into DEVICE_ASSIGNMENT) ---


@dataclass(frozen=True, slots=True)
class GPURequest:
    """What PreFilter parsed from the pod."""

    count: int
    """Whole GPUs (``nvidia.com/gpu``), at least 1."""
    priority: int
    """``gpusched.io/priority``, 0 (highest) to 4."""
    rule: SetRule = NO_RULE
    """``gpusched.io/min-bandwidth-gbps`` and ``gpusched.io/contiguous``: what the set must meet."""
    required: bool = False
    """``gpusched.io/topology: Required`` (with a rule): a node without such a set is rejected;
    else the rule is a preference (a set that meets it ranks above every set that does not)."""
    claim: str | None = None
    """The GpuClaim (``namespace/name``) the rule came from: messages name its fields."""


@dataclass(frozen=True, slots=True)
class GPUChoice:
    """The GPUs GPUFit chose for the pod on one node."""

    gpu_ids: tuple[int, ...]
    """GPU indices, ascending."""
    uuids: tuple[str, ...]
    """Their UUIDs, same order; empty when any is unknown (anonymous GPUs)."""
    vram_mib: tuple[int, ...]
    """Memory reserved on each, in MiB: the whole GPU (0 when unknown)."""
    topology_score: int
    """:func:`gpusched.topology.set_score` of the set (0 for one GPU or unknown topology)."""
    free_after: int
    """Free whole GPUs left on the node once the pod holds these."""
    whole_gpus: int
    """Whole GPUs the node has (MIG off), free or not."""
    fill: int = -1
    """Shared and MIG pods: how full the chosen GPUs and the node are once the pod holds
    these, 0..100 (the strategy's score reads it); -1 for whole GPUs."""
    meets: bool = True
    """Whole GPUs: the set meets the pod's rule (always, without one)."""
    link_score: int = 0
    """Whole GPUs: the set's sum of :attr:`GPUTopology.link_scores` (PCIe counted only for
    pairs without NVLink): what topologyFirst ranks nodes by."""

    def to_assignment(self, reservation_uid: str = "") -> Assignment:
        """The assignment to assume in the cache and write as annotations."""
        return Assignment(self.gpu_ids, self.uuids, self.vram_mib, reservation_uid)


class GPUChoices(dict[str, GPUChoice]):
    """Node name -> the :class:`GPUChoice` Filter made there this cycle.

    A dict that ``CycleState.clone()`` copies (``StateData``), so a what-if evaluation on a
    cloned state (preemption) never changes the real cycle's choices.
    """

    def clone(self) -> Self:
        return type(self)(self)


GPU_CHOICES: Final = StateKey[GPUChoices]("GPUFit/choices")
"""Written (empty) by PreFilter for pods asking whole GPUs, filled by Filter, one entry per node
that passed; absent for other pods. Read it with :func:`choice_for`."""


@dataclass(frozen=True, slots=True)
class _Plan:
    """A shared or MIG pod's request as Filter places it (PreFilter's decision)."""

    request: PodRequest
    mig_resource: str = ""
    """MIG: the extended resource placed, the fallback's when one applies."""
    fallback: str = ""
    """MIG: ``"2g.20gb->1g.10gb"`` when the profile is free nowhere and a fallback is."""
    gpu_class: GPUClass | None = None
    """The ``GPUClass`` the pod asks for (``gpusched.io/gpu-class``), resolved by PreFilter:
    Filter places the pod on the class's GPUs only, with the class's sharing mode."""


_REQUEST: Final = StateKey[GPURequest]("PreFilterGPUFit")
_PLAN: Final = StateKey[_Plan]("PreFilterGPUFit/plan")


def choice_for(state: CycleState, node_name: str) -> GPUChoice | None:
    """The GPUs chosen for the cycle's pod on ``node_name``; ``None`` if the pod asks for no
    whole GPUs (or GPUFit did not pass that node)."""
    choices = state.get(GPU_CHOICES)
    return choices.get(node_name) if choices is not None else None


# -- the node's layout ------------------------------------------------------------------------


def _signature(inventory: GPUNodeInventory) -> tuple[Any, ...]:
    """What of an inventory the layout depends on: GPU count, links and the GPUs' products
    (the bandwidth of a link). O(GPUs + links)."""
    return (
        len(inventory.gpus),
        tuple((k.a, k.b, k.nvlinks, k.pcie) for k in inventory.links),
        tuple(g.product for g in inventory.gpus),
    )


def _layout(inventory: GPUNodeInventory, max_combinations: int) -> GPUTopology:
    """The node's GPUs (indices ``0 .. len(gpus)-1``), links and pair bandwidths
    (:func:`~gpusched.topology.pair_gbps`; a pair with no link reported: PCIe) as a
    :class:`GPUTopology`."""
    count = len(inventory.gpus)
    graph = build_topology(range(count), inventory.links)
    products = [g.product for g in inventory.gpus]
    nvlinks = {(k.a, k.b): k.nvlinks for k in inventory.links}
    gbps = [
        [
            0.0
            if a == b
            else pair_gbps(nvlinks.get((min(a, b), max(a, b)), 0), products[a], products[b])
            for b in range(count)
        ]
        for a in range(count)
    ]
    return GPUTopology(graph, max_combinations, gbps)


# -- args ----------------------------------------------------------------------------------------


class GPUFitArgs(PluginArgs):
    """``pluginConfig`` args of GPUFit."""

    max_combinations: int = Field(default=DEFAULT_MAX_COMBINATIONS, ge=1)
    """Largest number of candidate sets searched exhaustively per node; above it the search is
    greedy. Default 5000 (any request on a node of up to 8 GPUs, or 12 GPUs asking 3)."""
    topology_weight: int = Field(default=1, ge=0)
    """``Wt`` in the score: how much a better-connected set counts (its
    :func:`~gpusched.topology.set_quality`, 0..100). Default 1."""
    bin_packing_weight: int = Field(default=1, ge=0)
    """``Wp`` in the score: how much leaving the node fuller counts. Default 1."""
    topology_first: bool = True
    """Multi-GPU whole pods: rank nodes by the chosen set's quality first and by packing only
    among equally good sets (default), so a pod gets a set as good as the best any node
    offers; ``false``: the weighted mean of ``topologyWeight`` and ``binPackingWeight``
    (which are read only then). docs/gpu_fit.md, "Score"."""
    strategy: Strategy = "binpack"
    """Shared and MIG pods: ``binpack`` (the default) puts a share on the fullest GPU that
    fits, and scores joining GPUs already in use above opening an idle one (then busier
    nodes, and GPUs that keep more room), keeping whole GPUs idle for whole-GPU pods;
    ``spread`` puts it on the emptiest and scores emptier nodes higher (least interference
    between clients). Whole-GPU pods always use the topology/bin-packing score."""

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.topology_weight + self.bin_packing_weight == 0:
            raise ValueError("topologyWeight and binPackingWeight cannot both be 0")
        return self


# -- the plugin ----------------------------------------------------------------------------------


class GPUFit(
    PreFilterPlugin,
    FilterPlugin,
    PostFilterPlugin,
    PreScorePlugin,
    ScorePlugin,
    ReservePlugin,
    EnqueueExtensions,
    SignPlugin,
):
    """Chooses the devices on each node: connected whole-GPU sets on fuller nodes; shares, exclusive
    GPUs and MIG devices by the strategy."""

    NAME = NAME
    ARGS = GPUFitArgs

    def __init__(self, args: GPUFitArgs | None = None, handle: Handle | None = None) -> None:
        args = args if args is not None else GPUFitArgs()
        self._handle = handle
        self._max_combinations = args.max_combinations
        self._wt = args.topology_weight
        self._wp = args.bin_packing_weight
        self._topology_first = args.topology_first
        self._known = 0
        """Layouts (the first of ``_layouts``) the quality ladder is built from."""
        self._ladder_pod: Pod | None = None
        self._seen = (-1, 0)
        """The snapshot's membership and generation :meth:`_learn_layouts` last read."""
        self._ladders: dict[int, tuple[int, dict[int, int], tuple[int, ...]]] = {}
        """N -> (layouts it was built from, quality -> rank, the qualities ascending): the
        set qualities any ``N`` GPUs of any known layout can have (:meth:`_ladder`)."""
        self._rule_status: dict[tuple[str, bool], Status] = {}
        """Rejection reason text and whether it is unresolvable -> its Status (reused)."""
        self._offers: dict[tuple[int, int, int, SetRule], float | None] = {}
        """(layout id, GPU mask, N, contiguity) -> :meth:`GPUTopology.offer` there."""
        self._spread = args.strategy == "spread"
        self._read_memo: tuple[Pod, PodRequest | None, str | None] | None = None
        self._whole_memo: tuple[Pod, GPURequest | None, Status] | None = None
        """The last pod's whole-GPU parse: PreFilter and SignPod of one cycle read it once."""
        """The last pod read (by identity), its request and the RequestError text: SignPod and
        PreFilter of one cycle read a pod once."""
        self._nodes: dict[str, tuple[GPUNodeInventory, GPUTopology]] = {}
        self._layouts: dict[tuple[Any, ...], GPUTopology] = {}
        self._last: dict[str, tuple[int, int, SetRule, GPUChoice]] = {}
        """Node -> (node-info generation, N, rule, the choice made): a node unchanged since the
        last cycle (same generation) gets the same choice without a look at its devices."""
        self._class_matches: dict[
            tuple[str, str], tuple[GPUClass, Mapping[str, str], GPUNodeInventory | None, ClassMatch]
        ] = {}
        """(node, class) -> the class object, the node's labels and inventory objects it was
        matched against, and the match: recomputed only when one of them is a new object."""
        self._class_keys: dict[str, tuple[GPUClass, str]] = {}
        """Class name -> (the object, its spec as JSON): the class's part of a signature."""

    @classmethod
    def new(cls, args: Any, handle: Handle) -> Self:
        return cls(args if isinstance(args, GPUFitArgs) else None, handle)

    # -- PreFilter -------------------------------------------------------------------------

    def pre_filter(self, state: CycleState, pod: Pod) -> tuple[PreFilterResult | None, Status]:
        read, status = self._read(pod)
        if read is None:
            return None, status
        if read.gpu_class is not None:
            cls, status = self._resolve_class(read.gpu_class)
            if cls is None:
                return None, status
            state.write(_PLAN, self._plan(read, cls))
        elif read.mode == "whole":
            request, status = self._parse_whole(pod, read)
            if request is None:
                return None, status
            if request.count >= 2 and self._topology_first and self._wt:
                self._learn_layouts(pod)
            state.write(_REQUEST, request)
        else:
            state.write(_PLAN, self._plan(read))
        state.write(GPU_CHOICES, GPUChoices())
        return None, SUCCESS

    def _read(self, pod: Pod) -> tuple[PodRequest | None, Status]:
        """The pod's request (:func:`read_gpu_request`, once per pod object), or ``None`` and
        Skip (no GPU) or UnschedulableAndUnresolvable (its message)."""
        memo = self._read_memo
        if memo is not None and memo[0] is pod:
            _, read, error = memo
        else:
            error = None
            claims = self._handle.claim_specs if self._handle is not None else None
            try:
                read = read_gpu_request(pod, claims)
            except RequestError as exc:
                read, error = None, str(exc)
            except (TypeError, AttributeError, ValueError) as exc:  # not a Pod the API stores
                read, error = None, f"the pod's spec or annotations cannot be read ({exc})"
            self._read_memo = (pod, read, error)
        if error is not None:
            return None, Status.unresolvable(error, plugin=NAME)
        if read is None:
            return None, Status.skip()
        if read.mode == "whole" and (read.gpu_class is not None or read.gpu_ids is not None):
            if read.min_bandwidth_gbps is not None or read.contiguous:
                what = (
                    f"a {GPU_CLASS_ANNOTATION} yet: remove them, or the class"
                    if read.gpu_class is not None
                    else f"{GPU_IDS_REQUEST} (the GPUs are named): remove one or the other"
                )
                return None, Status.unresolvable(
                    f"{MIN_BANDWIDTH_GBPS} and {CONTIGUOUS} do not apply to pods with {what}",
                    plugin=NAME,
                )
            # Whole GPUs of a class, or named ones: placed as exclusive GPUs of the shared API
            # (idle devices, all their memory), the path that chooses among the class's
            # devices and honours the named ones. Still booked whole: Reserve marks no shared
            # claim, the cache reads nvidia.com/gpu.
            read = replace(read, mode="shared", exclusive=True)
            self._read_memo = (pod, read, None)
        if read.mode != "whole":
            try:
                parse_assignment(pod)
            except AnnotationError as exc:
                return None, Status.unresolvable(str(exc), plugin=NAME)
        return read, SUCCESS

    def _resolve_class(self, name: str) -> tuple[GPUClass | None, Status]:
        """The valid ``GPUClass`` named ``name`` (``Handle.gpu_classes``), or ``None`` and
        UnschedulableAndUnresolvable naming the classes that exist. O(1) (O(classes) to say
        which exist)."""
        classes: Mapping[str, GPUClass] = {}
        if self._handle is not None:
            classes = self._handle.gpu_classes
        cls = classes.get(name)
        if cls is not None:
            return cls, SUCCESS
        if classes:
            names = sorted(classes)
            more = f" and {len(names) - 10} more" if len(names) > 10 else ""
            exist = ", ".join(names[:10]) + more
            fix = f"the classes that exist are {exist}: ask for one of them, or create it"
        else:
            fix = "no GPUClass exists: create it, or remove the gpu-class annotation"
        return None, Status.unresolvable(
            f"the pod asks for GPUClass {name!r}, which does not exist (or is invalid: see "
            f"`kubectl describe gpuclass {name}`); {fix}",
            plugin=NAME,
        )

    def _plan(self, read: PodRequest, cls: GPUClass | None = None) -> _Plan:
        """Shared: the request. MIG: the profile to place; when the pod lists fallbacks and its
        profile is free on no node of the snapshot, the first fallback free on some node
        (O(nodes x GPUs), only for MIG pods with fallbacks). A class that is exclusive makes a
        shared request exclusive (``apply_class``'s rule: the class forbids sharing)."""
        if cls is not None and cls.spec.sharing.mode == "exclusive" and read.mode == "shared":
            read = replace(read, exclusive=True)
        if read.mode != "mig" or read.mig_profile is None:
            return _Plan(read, gpu_class=cls)
        resource = mig_resource_name(read.mig_profile)
        if not read.mig_fallbacks or self._handle is None or cls is not None:
            # With a class, the class's MIG devices decide; fallbacks are not searched.
            return _Plan(read, resource, gpu_class=cls)
        try:
            nodes = self._handle.node_lister.node_infos()
        except RuntimeError:  # a framework built without a scheduler (tests, config check)
            return _Plan(read, resource)
        n = read.count
        if any(_free_mig(info, resource) >= n for info in nodes):
            return _Plan(read, resource)
        for profile in read.mig_fallbacks:
            other = mig_resource_name(profile)
            if any(_free_mig(info, other) >= n for info in nodes):
                return _Plan(read, other, f"{read.mig_profile}->{profile}")
        return _Plan(read, resource)

    def _parse_whole(self, pod: Pod, read: PodRequest) -> tuple[GPURequest | None, Status]:
        """:meth:`_parse` with ``read``'s topology rule, memoised for the last pod object
        (PreFilter, then SignPod)."""
        memo = self._whole_memo
        if memo is not None and memo[0] is pod:
            return memo[1], memo[2]
        request, status = self._parse(pod)
        if request is not None:
            rule = SetRule(read.min_bandwidth_gbps or 0.0, read.contiguous)
            if rule:
                request = replace(
                    request, rule=rule, required=read.topology == "Required", claim=read.claim
                )
        self._whole_memo = (pod, request, status)
        return request, status

    @staticmethod
    def _parse(pod: Pod) -> tuple[GPURequest | None, Status]:
        """The pod's request, or ``None`` and why not (Skip: it asks for no whole GPUs)."""
        try:
            priority = parse_priority(pod)
            parse_assignment(pod)
        except AnnotationError as exc:
            return None, Status.unresolvable(str(exc), plugin=NAME)
        try:
            scalar = pod_requests(pod).scalar
        except ValueError as exc:
            return None, Status.unresolvable(f"invalid resource requests: {exc}", plugin=NAME)
        count = scalar.get(RESOURCE_GPU, 0)
        if count <= 0:
            return None, Status.skip()
        if any(name.startswith(MIG_RESOURCE_PREFIX) for name in scalar):
            return None, _MIXED
        return GPURequest(count, priority), SUCCESS

    # -- SignPod -----------------------------------------------------------------------------

    def sign_pod(self, pod: Pod) -> Hashable | None:
        """``(NAME, 0)`` for a pod asking no whole GPUs; ``(NAME, N, priority)`` for one asking
        ``N``; shared and MIG pods by :meth:`_sign_read`; ``None`` for a pod PreFilter rejects.

        Why each case keeps :meth:`SignPlugin.sign_pod`'s contract:

        - a pod that PreFilter rejects (malformed annotation or requests, whole GPUs with MIG
          devices) is ``None``: it takes the full path and gets PreFilter's message;
        - no whole GPUs: PreFilter Skips and writes nothing, so Filter and Score never run;
        - ``N`` whole GPUs: PreFilter writes :class:`GPURequest` (``N``, the priority and,
          for ``N >= 2``, the topology rule and whether it is required: all in the fragment);
          Filter reads only those and the node (its choice is a function of the node's free
          GPUs, layout and the rule, and is reused for the same generation);
        - Score reads the choice (its set's :func:`~gpusched.topology.set_quality`, a fixed
          scale, whether it meets the rule, and the node's GPUs) and the args; with
          ``topologyFirst``, also the quality ladder of the layouts known
          (:meth:`_ladder`), which changes only when a layout is first seen: the number of
          layouts known is in the fragment (``N >= 2``), so a new layout signs pods anew and
          no class ranked on the old ladder is reused. A function of the signature and the
          node alone, whatever the cycle's other nodes are.

        No cache: the parse is the one PreFilter does (a few microseconds). Never raises.
        """
        try:
            read, status = self._read(pod)
            if read is not None and read.mode != "whole":
                return self._sign_read(read)
            request, status = (None, status) if read is None else self._parse_whole(pod, read)
        except Exception:  # a pod too malformed to read: PreFilter will say why
            return None
        if request is None:
            return (NAME, 0) if status.is_skip else None
        if request.count < 2:
            return (NAME, request.count, request.priority)
        ladder = self._epoch() if self._topology_first and self._wt else -1
        return (NAME, request.count, request.priority, request.rule, request.required, ladder)

    def _sign_read(self, read: PodRequest) -> Hashable | None:
        """Shared pods: every field Filter and Score read (the score is the chosen GPUs' and
        the node's fill, a function of the node alone). MIG pods without fallbacks: profile,
        count, priority. MIG pods with fallbacks: ``None``, since the profile placed depends on
        every node of the snapshot (PreFilter), not on the node at hand.

        A pod with a ``GPUClass`` adds the class's name and spec (Filter reads both): a class
        edited in place signs its pods anew, so no equivalence class computed under the old
        spec is reused. An unknown class is ``None`` (PreFilter says why)."""
        cls: tuple[Hashable, ...] = ()
        if read.gpu_class is not None:
            key = self._class_key(read.gpu_class)
            if key is None:
                return None
            cls = (read.gpu_class, key)
        if read.mode == "mig":
            if read.mig_fallbacks and not cls:
                return None
            return (NAME, "mig", read.mig_profile, read.count, read.priority, *cls)
        return (
            NAME,
            "shared",
            read.count,
            read.vram_mib,
            read.vram_fraction,
            read.cores_percent,
            read.exclusive,
            read.swap_from_vram,
            read.gpu_ids,
            read.priority,
            *cls,
        )

    def _class_key(self, name: str) -> str | None:
        """The class's spec as JSON, memoised per class object (a new object when the class
        changes); ``None`` for an unknown class. O(1) after the first pod of a class."""
        cls = self._handle.gpu_classes.get(name) if self._handle is not None else None
        if cls is None:
            return None
        memo = self._class_keys.get(name)
        if memo is None or memo[0] is not cls:
            memo = self._class_keys[name] = (cls, cls.spec.model_dump_json())
        return memo[1]

    # -- Filter ----------------------------------------------------------------------------

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        plan = state.get(_PLAN)
        if plan is not None:
            return self._filter_plan(state, plan, node_info)
        request = state.get(_REQUEST)
        if request is None:  # PreFilter disabled for this plugin
            read, status = self._read(pod)
            if read is None:
                return SUCCESS if status.is_skip else status
            if read.gpu_class is not None:
                cls, status = self._resolve_class(read.gpu_class)
                if cls is None:
                    return status
                return self._filter_plan(state, self._plan(read, cls), node_info)
            if read.mode != "whole":
                return self._filter_plan(state, self._plan(read), node_info)
            request, status = self._parse_whole(pod, read)
            if request is None:
                return SUCCESS if status.is_skip else status
        n = request.count
        if node_info.error is not None:
            return _INVALID_NODE
        advertised = node_info.allocatable.scalar.get(RESOURCE_GPU, 0)
        if advertised < n:
            return _TOO_FEW
        ledger = node_info.ledger
        if ledger.free_gpu_count < n:
            if _whole_gpus(ledger) < n:
                return _TOO_FEW
            return _UNHEALTHY if _idle_if_healthy(ledger) >= n else _NO_FREE
        if advertised - node_info.requested.scalar.get(RESOURCE_GPU, 0) < n:
            return _NO_RESOURCE
        if node_info.unplaced:
            return _CONFLICT
        choices = state.get(GPU_CHOICES)
        if choices is None:
            choices = GPUChoices()
            state.write(GPU_CHOICES, choices)
        name = node_info.name
        rule = request.rule
        last = self._last.get(name)
        if (
            last is not None
            and last[0] == node_info.generation
            and last[1] == n
            and last[2] == rule
        ):
            choice = last[3]
        else:
            choice = self._choose(node_info, n, rule)
            if len(self._last) >= _NODES_MAX:
                self._last.clear()
            self._last[name] = (node_info.generation, n, rule, choice)
        if request.required and not choice.meets:
            return self._rule_refusal(node_info, n, rule)
        choices[name] = choice
        return SUCCESS

    # -- Filter: shared GPUs and MIG devices -------------------------------------------------

    def _filter_plan(self, state: CycleState, plan: _Plan, node_info: NodeInfo) -> Status:
        """Shared or MIG: check the node and record the devices chosen. O(GPUs + MIG devices)."""
        if node_info.error is not None:
            return _INVALID_NODE
        if node_info.unplaced:
            return _CONFLICT
        match = None
        if plan.gpu_class is not None:
            match = self._class_match(plan.gpu_class, node_info)
            if not match.matched:
                return _CLASS_MISSING
        if plan.request.mode == "mig":
            uuids = None if match is None else frozenset(u for _, u in match.mig_devices)
            choice, status = self._choose_mig(plan, node_info, uuids)
        else:
            cap = None
            if plan.gpu_class is not None:
                cap = plan.gpu_class.spec.sharing.max_clients_per_gpu
            indices = None if match is None else frozenset(match.gpu_indices)
            choice, status = self._choose_shared(plan.request, node_info, indices, cap)
        if choice is None:
            return status
        choices = state.get(GPU_CHOICES)
        if choices is None:
            choices = GPUChoices()
            state.write(GPU_CHOICES, choices)
        choices[node_info.name] = choice
        return SUCCESS

    def _connected(self, node_info: NodeInfo, free: list[int], n: int) -> tuple[int, ...]:
        """The best-connected ``n`` of ``free`` (ascending) by the node's topology
        (:meth:`GPUTopology.choose`, memoised per free set); the first ``n`` without an
        inventory."""
        inventory = node_info.ledger.inventory
        if inventory is None:
            return tuple(free[:n])
        ids, _ = self._topology(node_info.name, inventory).choose(free, n)
        return ids

    def _class_match(self, cls: GPUClass, node_info: NodeInfo) -> ClassMatch:
        """Which GPUs of the node belong to ``cls`` (:func:`match_class` on the node's labels
        and inventory), memoised per (node, class) while the class, labels and inventory
        objects stay the same: O(1) then, else O(selector + GPUs x (products + MIG devices))."""
        inventory = node_info.ledger.inventory
        labels = node_info.labels
        key = (node_info.name, cls.name)
        memo = self._class_matches.get(key)
        if memo is not None and memo[0] is cls and memo[1] is labels and memo[2] is inventory:
            return memo[3]
        match = match_class(cls, labels, inventory.gpus if inventory is not None else ())
        if len(self._class_matches) >= _NODES_MAX:
            self._class_matches.clear()
        self._class_matches[key] = (cls, labels, inventory, match)
        return match

    def _choose_shared(
        self,
        request: PodRequest,
        node_info: NodeInfo,
        only: frozenset[int] | None = None,
        cap: int | None = None,
    ) -> tuple[GPUChoice | None, Status]:
        """``count`` devices that take the share (or, exclusive, idle devices), chosen by the
        strategy; else why not, as an aggregatable reason. ``only``: the class's devices, the
        others are not candidates; ``cap``: the class's clients per GPU, a device with that
        many holders takes no more of its pods. O(GPUs)."""
        ledger = node_info.ledger
        n = request.count
        devices = ledger.devices
        shares: dict[int, int] = {}
        """Device index -> MiB the share would reserve there (all candidates)."""
        if request.exclusive:
            idle = ledger.shareable_devices(request.vram_mib, exclusive=True)
            for i in idle:
                shares[i] = devices[i].memory_mib or 0
        else:
            if ledger.node_refusal() is not None:
                return None, _NODE_CLIENTS
            swap, cores = request.swap_from_vram, request.cores_percent or 0
            for mib_by, indices in _share_groups(ledger, request):
                for i in ledger.shareable_devices(mib_by, None, swap, cores):
                    if i in indices:
                        shares[i] = mib_by
        if only is not None or cap is not None:
            for i in list(shares):
                if (only is not None and i not in only) or (
                    cap is not None and len(devices[i].holders) >= cap
                ):
                    del shares[i]
        wanted = request.gpu_ids
        if wanted is not None:
            if any(not 0 <= i < len(devices) for i in wanted):
                return None, _IDS_MISSING
            if only is not None and any(i not in only for i in wanted):
                return None, _IDS_MISSING
            busy = next((i for i in wanted if i not in shares), None)
            if busy is not None:
                return None, _named_refusal(ledger, request, busy)
            chosen = wanted
        elif len(shares) >= n and request.exclusive and only is not None and n >= 2:
            # Several idle GPUs of a class (whole GPUs, or an exclusive class): the
            # best-connected set among them, as for unclassed whole-GPU pods.
            chosen = self._connected(node_info, sorted(shares), n)
        elif len(shares) >= n:
            chosen = tuple(sorted(shares, key=lambda i: self._device_key(ledger, i))[:n])
        else:
            return None, self._share_refusal(request, node_info, only, cap)
        return self._share_choice(ledger, chosen, shares, request.exclusive), SUCCESS

    def _device_key(self, ledger: NodeLedger, index: int) -> tuple[int, int, int]:
        """Order of preference among candidate devices: binpack the fullest first (by
        reserved VRAM over capacity, then clients), spread the emptiest; then by index."""
        device = ledger.devices[index]
        reserved, clients = ledger.device_load(index)
        capacity = device.policy.capacity_mib(device.memory_mib or 0) or 1
        fill = reserved * 1000 // capacity
        if self._spread:
            return (fill, clients, index)
        return (-fill, -clients, index)

    def _share_choice(
        self,
        ledger: NodeLedger,
        chosen: tuple[int, ...],
        shares: Mapping[int, int],
        exclusive: bool,
    ) -> GPUChoice:
        """The choice, with its binpack fill (:func:`_join_band` / :func:`_open_band`): when
        every chosen GPU is already in use (a share joining), ``50 + g // 2`` for the chosen
        GPUs' reserved VRAM over capacity after the pod, ``g``; when the pod takes an idle
        GPU (an exclusive pod always does), 0..48 by the node's GPUs (MIG off) in use
        *before* it and the VRAM the opened GPU keeps free. O(GPUs)."""
        devices = ledger.devices
        reserved = capacity = 0
        opens = exclusive
        for i in chosen:
            device = devices[i]
            cap = device.policy.capacity_mib(device.memory_mib or 0)
            capacity += cap
            reserved += cap if exclusive else min(device.reserved_mib + shares[i], cap)
            if not device.holders:
                opens = True
        whole = busy = 0
        for device in devices:
            if not device.mig_enabled:
                whole += 1
                if device.holders:
                    busy += 1
        if opens:
            room = 0 if exclusive else max(capacity - reserved, 0)
            fill = _open_band(busy, whole, room, capacity, self._spread)
        else:
            fill = _join_band(MAX_NODE_SCORE * reserved // capacity if capacity else 0)
        uuids = tuple(devices[i].uuid or "" for i in chosen)
        return GPUChoice(
            gpu_ids=chosen,
            uuids=uuids if all(uuids) else (),
            vram_mib=tuple(shares[i] for i in chosen),
            topology_score=0,
            free_after=whole - busy - sum(1 for i in chosen if not devices[i].holders),
            whole_gpus=whole,
            fill=fill,
        )

    @staticmethod
    def _share_refusal(
        request: PodRequest,
        node_info: NodeInfo,
        only: frozenset[int] | None = None,
        cap: int | None = None,
    ) -> Status:
        """Why the node has too few devices for the share: UnschedulableAndUnresolvable when
        even idle it would (too few GPUs that could ever hold it), else the commonest refusal
        among its devices. ``only`` and ``cap`` as :meth:`_choose_shared` (a device at the
        class's cap refuses as one at its client limit). O(GPUs); only for rejected nodes."""
        ledger = node_info.ledger
        n = request.count
        if request.exclusive:
            ever = sum(
                1
                for d in ledger.devices
                if not d.mig_enabled
                and (only is None or d.index in only)
                and (
                    request.vram_mib is None
                    or (d.memory_mib is not None and d.memory_mib >= request.vram_mib)
                )
            )
            return _NO_IDLE if ever >= n else _SHARE_NEVER
        kinds: dict[str, int] = {}
        ever = 0
        swap, cores = request.swap_from_vram, request.cores_percent or 0
        for mib_by, indices in _share_groups(ledger, request):
            for i in sorted(indices):
                if only is not None and i not in only:
                    continue
                device = ledger.devices[i]
                if _could_hold(device, mib_by, swap):
                    ever += 1
                    kind = ledger.refusal_kind(i, mib_by, None, swap, cores)
                    if kind is None and cap is not None and len(device.holders) >= cap:
                        kind = "clients"
                    if kind is not None:
                        kinds[kind] = kinds.get(kind, 0) + 1
        if ever < n:
            return _SHARE_NEVER
        common = [k for k in kinds if k in _SHARE_KIND_REASON]
        if not common:
            return _SHARE_NEVER
        top = max(common, key=lambda k: kinds[k])
        return _SHARE_STATUS[_SHARE_KIND_REASON[top]]

    def _choose_mig(
        self, plan: _Plan, node_info: NodeInfo, only: frozenset[str] | None = None
    ) -> tuple[GPUChoice | None, Status]:
        """``count`` free MIG devices of the plan's resource: by the ledger when the node's
        inventory lists them (binpack: on the GPUs with most MIG devices held; spread: fewest),
        else by ``allocatable - requested`` with no device named (the cache then infers it).
        ``only``: the UUIDs of the class's MIG devices, the others are not offered.
        O(GPUs + MIG devices)."""
        ledger = node_info.ledger
        resource = plan.mig_resource
        n = plan.request.count
        offered = held = 0
        per_gpu: dict[int, int] = {}
        for device in ledger.devices:
            for m in device.mig:
                if m.holder is not None:
                    held += 1
                    per_gpu[device.index] = per_gpu.get(device.index, 0) + 1
                if m.resource == resource and (only is None or m.uuid in only):
                    offered += 1
        if only is not None and not offered:
            return None, _MIG_MISSING
        if not offered:
            advertised = int(node_info.allocatable.scalar.get(resource, 0))
            if advertised < n:
                return None, _MIG_MISSING
            if advertised - node_info.requested.scalar.get(resource, 0) < n:
                return None, _MIG_BUSY
            return GPUChoice((), (), (), 0, 0, 0, fill=0), SUCCESS
        free = ledger.free_mig(resource)
        if only is not None:
            free = [f for f in free if f[1] in only]
        if offered < n:
            return None, _MIG_MISSING
        if len(free) < n:
            return None, _MIG_BUSY
        sign = 1 if self._spread else -1
        free.sort(key=lambda f: (sign * per_gpu.get(f[0], 0), f[0]))
        picked = free[:n]
        total = sum(len(d.mig) for d in ledger.devices)
        fill = MAX_NODE_SCORE * (held + n) // total if total else 0
        memory = {m.uuid: m.memory_mib for d in ledger.devices for m in d.mig}
        return (
            GPUChoice(
                gpu_ids=tuple(i for i, _ in picked),
                uuids=tuple(u for _, u in picked),
                vram_mib=tuple(memory[u] for _, u in picked),
                topology_score=0,
                free_after=ledger.free_gpu_count,
                whole_gpus=_whole_gpus(ledger),
                fill=fill,
            ),
            SUCCESS,
        )

    # -- PostFilter ------------------------------------------------------------------------

    def post_filter(
        self, state: CycleState, pod: Pod, statuses: Mapping[str, Status]
    ) -> tuple[PostFilterResult | None, Status]:
        """UnschedulableAndUnresolvable with a message when no node could ever take the pod
        (see :func:`never_fits`): no PostFilter after it runs, since evicting pods cannot
        help; else Unschedulable, and preemption after it may make room."""
        request = state.get(_REQUEST)
        plan = state.get(_PLAN)
        if (request is None and plan is None) or self._handle is None:
            return None, Status.unschedulable(plugin=NAME)
        try:
            lister = self._handle.node_lister
        except RuntimeError:  # a framework built without a scheduler (tests, config check)
            return None, Status.unschedulable(plugin=NAME)
        # The nodes the pod could run on but for their GPUs: not those another plugin (its
        # selectors, taints, a cordon) turned down.
        nodes = [
            n
            for n in lister.node_infos()
            if (st := statuses.get(n.name)) is None or st.plugin in _GPU_PLUGINS
        ]
        if plan is not None and plan.gpu_class is not None:
            why = never_fits_class(plan.gpu_class, nodes) or never_fits_plan(plan.request, nodes)
        elif plan is not None:
            why = never_fits_plan(plan.request, nodes)
        else:
            assert request is not None
            why = never_fits(request.count, nodes)
            if why is None and request.required:
                why = self._never_meets(request, nodes)
        if why:  # no room to make: preemption after this plugin is not tried
            return None, Status.unresolvable(why, plugin=NAME)
        return None, Status.unschedulable(plugin=NAME)

    def _never_meets(self, request: GPURequest, nodes: Sequence[NodeInfo]) -> str | None:
        """Why no node of ``nodes`` could meet the pod's required rule even with every GPU
        free (one sentence, no final period), or ``None`` when some node could. O(nodes)
        (the offers are memoised per layout); only for pods that fit nowhere."""
        n, rule = request.count, request.rule
        best: float | None = None
        for info in nodes:
            inventory = info.ledger.inventory
            if info.error is not None or inventory is None:
                continue
            whole = [d.index for d in info.ledger.devices if not d.mig_enabled]
            offer = self._offer(self._topology(info.name, inventory), whole, n, rule.contiguous)
            if _offer_meets(offer, rule):
                return None
            if offer is not None and (best is None or offer > best):
                best = offer
        lower = rule.min_gbps and best is not None
        if request.claim is not None:  # the rule is the claim's: name its fields
            fix = (
                f"lower GpuClaim {request.claim}'s spec.topology.minBandwidthGBps"
                if lower
                else f"remove its spec.devices.policy: contiguous from GpuClaim {request.claim}"
            )
            preferred = 'set its spec.topology.mode: "Preferred"'
        else:
            fix = f"lower {MIN_BANDWIDTH_GBPS}" if lower else f"remove {CONTIGUOUS}"
            preferred = f'write {TOPOLOGY}: "Preferred"'
        return (
            f"The pod needs {_rule_text(n, rule)}, and no node it can run on could give that "
            f"even with every GPU free: {_offer_text(best, rule, f'set of {n} on any of them')}; "
            f"{fix}, or {preferred} to take the best set there is"
        )

    def _choose(self, node_info: NodeInfo, n: int, rule: SetRule = NO_RULE) -> GPUChoice:
        """The best ``n`` free GPUs of the node (module docstring) that meet ``rule``; when
        none do, the best ``n`` with ``meets`` false (a node without an inventory meets a
        rule only for one GPU: its links are unknown). The node has ``n`` free GPUs."""
        ledger = node_info.ledger
        devices = ledger.devices
        free: list[int] = []
        mask = 0
        whole = 0
        for device in devices:
            if not device.mig_enabled:
                whole += 1
                if device.free:
                    free.append(device.index)
                    mask |= 1 << device.index
        inventory = ledger.inventory
        meets = True
        links = 0
        if inventory is None:
            ids, score = tuple(free[:n]), 0
            meets = n < 2 or not rule
        else:
            topology = self._topology(node_info.name, inventory)
            found = topology.choose_meeting(free, n, rule, mask=mask) if rule else None
            if found is None:
                found = topology.choose(free, n, mask=mask)
                meets = not rule
            ids, score = found
            links = matrix_set_score(topology.link_scores, ids)
        chosen = [devices[i] for i in ids]
        uuids = tuple(d.uuid or "" for d in chosen)
        return GPUChoice(
            gpu_ids=ids,
            uuids=uuids if all(uuids) else (),
            vram_mib=tuple(d.memory_mib or 0 for d in chosen),
            topology_score=score,
            free_after=len(free) - n,
            whole_gpus=whole,
            meets=meets,
            link_score=links,
        )

    def _rule_refusal(self, node_info: NodeInfo, n: int, rule: SetRule) -> Status:
        """Why the node has no ``n`` free GPUs that meet a required ``rule``: the best its free
        GPUs offer (Unschedulable), or, when even all its GPUs free would not do, what they
        would offer (UnschedulableAndUnresolvable). One Status per distinct text, so nodes in
        the same state aggregate in the scheduler's summary. O(C(GPUs, n) x n²), memoised
        per layout, free set and ``n``."""
        need = _rule_text(n, rule)
        ledger = node_info.ledger
        inventory = ledger.inventory
        if inventory is None:
            text = (
                f"node(s) could not give {need}: they publish no GPUNodeInventory, so the "
                "links between their GPUs are unknown"
            )
            return self._status(text, True)
        topology = self._topology(node_info.name, inventory)
        whole = [d.index for d in ledger.devices if not d.mig_enabled]
        free = [d.index for d in ledger.devices if not d.mig_enabled and d.free]
        idle = self._offer(topology, whole, n, rule.contiguous)
        if not _offer_meets(idle, rule):
            return self._status(
                f"node(s) could not give {need} even with every GPU free: "
                f"{_offer_text(idle, rule, 'set of their GPUs')}",
                True,
            )
        now = self._offer(topology, free, n, rule.contiguous)
        return self._status(
            f"node(s) could not give {need}: {_offer_text(now, rule, 'free set')}", False
        )

    def _status(self, text: str, unresolvable: bool) -> Status:
        key = (text, unresolvable)
        status = self._rule_status.get(key)
        if status is None:
            if len(self._rule_status) >= _NODES_MAX:
                self._rule_status.clear()
            make = Status.unresolvable if unresolvable else Status.unschedulable
            status = self._rule_status[key] = make(text, plugin=NAME)
        return status

    def _offer(
        self, topology: GPUTopology, gpus: list[int], n: int, contiguous: bool
    ) -> float | None:
        """:meth:`GPUTopology.offer`, memoised by layout, GPU set, ``n`` and contiguity;
        ``None`` also when fewer than ``n`` GPUs are given."""
        if len(gpus) < n:
            return None
        mask = 0
        for gpu in gpus:
            mask |= 1 << gpu
        key = (id(topology), mask, n, SetRule(contiguous=contiguous))
        if key in self._offers:
            return self._offers[key]
        if len(self._offers) >= _NODES_MAX:
            self._offers.clear()
        found = self._offers[key] = topology.offer(gpus, n, contiguous)
        return found

    def _epoch(self) -> int:
        """How many layouts the ladder is built from (it only ever grows): its version."""
        return self._known

    def _learn_layouts(self, pod: Pod) -> None:
        """Bring the ladder up to date, once per pod (PreFilter of a multi-GPU pod, before
        SignPod reads :meth:`_epoch`): the layouts of the nodes in the cycle's snapshot that
        changed since the last look (all of them when nodes joined or left), plus those
        Filter met since. Never during a pod's evaluation, so every node of a cycle (and of a
        full cycle run again for the same pod object, as the exactness tests do) is ranked
        on one ladder. O(nodes changed) (O(nodes) when the membership changed)."""
        if pod is self._ladder_pod:
            return
        self._ladder_pod = pod
        lister: object = None
        if self._handle is not None:
            try:
                lister = self._handle.node_lister
            except RuntimeError:  # a framework built without a scheduler (tests)
                lister = None
        if isinstance(lister, Snapshot):
            if lister.membership != self._seen[0]:
                infos = lister.node_infos()
            else:
                infos = lister.changed_since(self._seen[1])
            for info in infos:
                inventory = info.ledger.inventory
                if inventory is not None and info.error is None:
                    self._topology(info.name, inventory)
            self._seen = (lister.membership, lister.generation)
        self._known = len(self._layouts)

    def _ladder(self, n: int) -> tuple[dict[int, int], tuple[int, ...]]:
        """Every set quality (:func:`~gpusched.topology.set_quality`) ``n`` GPUs of a known
        layout can have, and 0, ascending, with each one's rank: topologyFirst's tiers. Rebuilt
        when a layout is first seen: O(layouts x C(GPUs, n) x n²) (a layout with more than
        ``maxCombinations`` sets of ``n`` adds its greedy best only), else O(1)."""
        known = self._epoch()
        entry = self._ladders.get(n)
        if entry is None or entry[0] != known:
            qualities = {0}
            for topology in islice(self._layouts.values(), known):
                count = topology.gpu_count
                if n > count:
                    continue
                links = topology.link_scores
                if comb(count, n) <= topology.max_combinations:
                    qualities.update(
                        set_quality(matrix_set_score(links, ids), n)
                        for ids in combinations(range(count), n)
                    )
                else:
                    best = topology.choose(range(count), n)[0]
                    qualities.add(set_quality(matrix_set_score(links, best), n))
            ordered = tuple(sorted(qualities))
            entry = (known, {q: i for i, q in enumerate(ordered)}, ordered)
            self._ladders[n] = entry
        return entry[1], entry[2]

    def _topology(self, node_name: str, inventory: GPUNodeInventory) -> GPUTopology:
        """The node's topology, built once per inventory object (shared by identical nodes)."""
        cached = self._nodes.get(node_name)
        if cached is not None and cached[0] is inventory:
            return cached[1]
        signature = _signature(inventory)
        topology = self._layouts.get(signature)
        if topology is None:
            topology = _layout(inventory, self._max_combinations)
            self._layouts[signature] = topology
        if len(self._nodes) >= _NODES_MAX:
            self._nodes.clear()
        self._nodes[node_name] = (inventory, topology)
        return topology

    # -- PreScore / Score ------------------------------------------------------------------

    def pre_score(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        """Skip for a pod asking no GPUs; else nothing to do (every score is a function of
        the node's choice alone), so Score runs. O(1)."""
        if _PLAN in state or _REQUEST in state:
            return SUCCESS
        return Status.skip()

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> tuple[int, Status]:
        choice = choice_for(state, node_info.name)
        if choice is None or (not choice.whole_gpus and choice.fill < 0):
            return 0, Status.error(
                f"no GPU choice for node {node_info.name!r}: GPUFit's Filter did not pass it "
                f"this cycle (is GPUFit enabled at filter as well as score?)",
                plugin=NAME,
            )
        if choice.fill >= 0:  # shared or MIG: the strategy's score
            fill = choice.fill
            plan = state.get(_PLAN)
            if plan is not None and plan.request.mode == "mig" and choice.gpu_ids:
                fill = _mig_band(node_info.ledger, choice, self._spread)
            return (MAX_NODE_SCORE - fill if self._spread else fill), SUCCESS
        whole = choice.whole_gpus
        used = whole - choice.free_after
        wt, wp = self._wt, self._wp
        n = len(choice.gpu_ids)
        if n >= 2 and self._topology_first and wt:
            request = state.get(_REQUEST)
            preferred = request is not None and bool(request.rule) and not request.required
            return self._tiered(choice, n, preferred), SUCCESS
        if n >= 2 and wt:
            # Topology on a fixed scale (set_quality), so the score is the node's alone.
            quality = set_quality(choice.topology_score, n)
            numerator = wt * quality * whole + wp * MAX_NODE_SCORE * used
            return numerator // ((wt + wp) * whole), SUCCESS
        return (MAX_NODE_SCORE * used // whole if wp else 0), SUCCESS

    def _tiered(self, choice: GPUChoice, n: int, preferred: bool) -> int:
        """topologyFirst's score of a whole-GPU set of ``n >= 2``: ``tier x per + pack``.

        ``tier`` is the rank of the set's quality in the ladder of qualities ``n`` GPUs can
        have on the layouts known (:meth:`_ladder`; with a preferred rule, sets that meet it
        rank above all that do not: twice the tiers); ``per = 101 // tiers`` points per
        tier; ``pack`` (0..per-1) is best fit: ``per - 1`` minus the node's GPUs left free
        after the pod (capped). A better tier always outscores a worse one, whatever the
        packing. O(1) (the ladder is rebuilt only when a layout is first seen)."""
        ranks, ordered = self._ladder(n)
        quality = set_quality(choice.link_score, n)
        rank = ranks.get(quality)
        if rank is None:  # a greedy layout's set below its best: the tier under it
            rank = max(bisect_right(ordered, quality) - 1, 0)
        tiers = len(ordered)
        if preferred:
            rank += tiers if choice.meets else 0
            tiers *= 2
        per = (MAX_NODE_SCORE + 1) // tiers
        if per == 0:  # more tiers than scores: quality alone
            return rank * MAX_NODE_SCORE // (tiers - 1)
        return rank * per + per - 1 - min(choice.free_after, per - 1)

    # -- Reserve -----------------------------------------------------------------------------

    def reserve(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        """Write the GPUs Filter chose on ``node_name`` as :data:`DEVICE_ASSIGNMENT` (nothing
        for a pod asking no whole GPUs); the scheduler assumes the pod with them."""
        choices = state.get(GPU_CHOICES)
        if choices is None:
            return SUCCESS
        choice = choices.get(node_name)
        if choice is None:
            return Status.error(
                f"no GPU choice for node {node_name!r}: GPUFit's Filter did not pass it this "
                f"cycle (is GPUFit enabled at filter as well as reserve?)",
                plugin=NAME,
            )
        if choice.gpu_ids:
            state.write(DEVICE_ASSIGNMENT, choice.to_assignment())
        plan = state.get(_PLAN)
        if plan is None:
            return SUCCESS
        if choice.gpu_ids and (plan.request.mode == "mig" or not plan.request.exclusive):
            state.write(SHARED_CLAIM, True)
        extra = BindingAnnotations()
        if plan.fallback:
            extra[MIG_FALLBACK_APPLIED] = plan.fallback
            self._fallback_event(pod, node_name, plan.fallback)
        elif plan.request.mode == "mig":
            admitted = (pod.get("metadata") or {}).get("annotations") or {}
            if MIG_FALLBACK_APPLIED in admitted:  # the webhook rewrote the request
                self._fallback_event(pod, node_name, admitted[MIG_FALLBACK_APPLIED], True)
        request = plan.request
        if (
            plan.gpu_class is not None
            and request.exclusive
            and request.mode == "shared"
            and request.source == "gpusched"
            and choice.gpu_ids
            and EXCLUSIVE_ANNOTATION not in ((pod.get("metadata") or {}).get("annotations") or {})
        ):
            # The class made the share exclusive: say so on the pod, or the cache, which books a
            # bound pod from its own request, would book it as a share once it is bound (and a
            # share could join it on a node that overcommits VRAM). Only in gpusched's own form:
            # another form states exclusivity its own way, and two forms must not contradict.
            extra[EXCLUSIVE_ANNOTATION] = "true"
        if plan.request.source == "woolyai" and choice.gpu_ids:
            # WoolyAI's node side reads these (seed 000, "Scheduler-Populated Annotations"):
            # the indices, comma-separated, and the slice promised on each GPU.
            extra[WOOLYAI_GPU_IDS] = ",".join(str(i) for i in choice.gpu_ids)
            slices = set(choice.vram_mib)
            extra[WOOLYAI_RESERVED_VRAM_MIB] = (
                str(choice.vram_mib[0])
                if len(slices) == 1
                else ",".join(str(v) for v in choice.vram_mib)
            )
        if extra:
            state.write(BINDING_ANNOTATIONS, extra)
        return SUCCESS

    def _fallback_event(
        self, pod: Pod, node_name: str, fallback: str, at_admission: bool = False
    ) -> None:
        """The Event saying the pod got a fallback profile (best effort): chosen now, or by the
        admission webhook (``at_admission``: the pod's request was rewritten when it was
        created, and only its annotation said so)."""
        if self._handle is None:
            return
        try:
            events = self._handle.events
        except RuntimeError:  # a framework built without a scheduler
            return
        preferred, _, given = fallback.partition("->")
        if at_admission:
            message = (
                f"MIG profile {preferred} was free on no node when the pod was created; the "
                f"admission webhook gave it {given}, the first free profile of its "
                f"{MIG_FALLBACK_LIST} list, and it runs on node {node_name}"
            )
        else:
            message = (
                f"MIG profile {preferred} is free on no node; the pod gets {given} on node "
                f"{node_name}, the first free profile of its {MIG_FALLBACK_LIST} list"
            )
        events.eventf(pod, "Normal", "MIGFallback", "Scheduling", message)

    def unreserve(self, state: CycleState, pod: Pod, node_name: str) -> None:
        state.delete(DEVICE_ASSIGNMENT)
        state.delete(BINDING_ANNOTATIONS)
        state.delete(SHARED_CLAIM)

    # -- events ----------------------------------------------------------------------------

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """A bound pod gone or finished, a node or its inventory added or changed."""
        return [
            ClusterEventWithHint(
                ClusterEvent("Pod", ActionType.DELETE | ActionType.UPDATE), _after_pod_change
            ),
            ClusterEventWithHint(ClusterEvent("Node", ActionType.ADD | ActionType.UPDATE)),
            ClusterEventWithHint(ClusterEvent("GPUNodeInventory", ActionType.ALL)),
            ClusterEventWithHint(ClusterEvent("GPUClass", ActionType.ALL), _after_class_change),
        ]


_JOIN_FLOOR: Final = MAX_NODE_SCORE // 2
"""Binpack scores of choices that open no idle GPU start here; those that open one stay
below (:func:`_join_band`, :func:`_open_band`)."""


def _join_band(fill: int) -> int:
    """Binpack score of a choice on GPUs already in use: 50..100 by ``fill`` (0..100, how
    full the chosen GPUs are once the pod holds its share), so the tightest fit wins. O(1)."""
    return _JOIN_FLOOR + fill * (MAX_NODE_SCORE - _JOIN_FLOOR) // MAX_NODE_SCORE


_OPEN_NODE: Final = 12
"""Points of :func:`_open_band` for the node's GPUs in use before the pod."""
_OPEN_ROOM: Final = 36
"""Points of :func:`_open_band` for the room the opened GPU keeps (three times the node's:
measured on benchmarks/gpu_mix.py, equal halves sent shares to small GPUs of nodes that
whole-GPU pods had made busy, and opened 15 more GPUs at 5,000 nodes than this split)."""


def _open_band(busy: int, total: int, room: int, size: int, spread: bool = False) -> int:
    """Binpack score of a choice that takes an idle GPU: 0..48, a quarter (12 points) by the
    node's GPUs in use *before* the pod (``busy`` of ``total``: a partly used node is opened
    into before an idle one, so idle nodes stay whole for multi-GPU pods), three quarters
    (36) by the room the opened GPU keeps for the next pods once this one holds its part
    (``room`` of ``size``: free VRAM of its capacity, or free MIG devices of the profile of
    its MIG devices), so later pods of the kind join it instead of opening another GPU: the
    GPUs opened are what binpack saves, and a GPU with room saves more than a busy node.

    ``spread`` (which scores ``100 -`` this) mirrors the node part only: spread too opens the
    GPU that keeps the most room, since room is what spares the next pods' clients
    interference (and strands no VRAM). O(1)."""
    node = _OPEN_NODE * busy // total if total else 0
    gpu = _OPEN_ROOM * room // size if size > 0 else 0
    return node + (_OPEN_ROOM - gpu if spread else gpu)


def _mig_band(ledger: NodeLedger, choice: GPUChoice, spread: bool = False) -> int:
    """Binpack score of a MIG choice: :func:`_join_band` of the node's MIG devices held after
    the pod (``choice.fill``) when every chosen MIG device sits on a GPU where another is
    already held, else :func:`_open_band` of the node's MIG GPUs with one held. O(GPUs + MIG
    devices)."""
    held_gpus = mig_gpus = room = size = 0
    joins = True
    chosen = set(choice.gpu_ids)
    uuids = set(choice.uuids)
    for device in ledger.devices:
        if not device.mig:
            continue
        mig_gpus += 1
        held = any(m.holder is not None for m in device.mig)
        held_gpus += held
        if device.index in chosen:
            if not held:
                joins = False
            resources = {m.resource for m in device.mig if m.uuid in uuids}
            for m in device.mig:
                if m.resource in resources:
                    size += 1
                    room += m.holder is None and m.uuid not in uuids
    if joins:
        return _join_band(choice.fill)
    return _open_band(held_gpus, mig_gpus, room, size, spread)


def _free_mig(node_info: NodeInfo, resource: str) -> int:
    """Free MIG devices of ``resource`` on the node: by its ledger, else its allocatable
    minus requested (nodes without inventory). O(GPUs + MIG devices)."""
    ledger = node_info.ledger
    if any(m.resource == resource for d in ledger.devices for m in d.mig):
        return len(ledger.free_mig(resource))
    if node_info.error is not None:
        return 0
    scalar = node_info.allocatable.scalar
    return int(scalar.get(resource, 0) - node_info.requested.scalar.get(resource, 0))


def _share_groups(ledger: NodeLedger, request: PodRequest) -> list[tuple[int, set[int]]]:
    """(MiB the share reserves, the device indices where it is that much): one group for a
    ``vram_mib`` request, one per memory size for a fraction of each GPU (exact: MiB =
    memory x fraction, rounded down as HAMi rounds ``gpumem-percentage``). Devices of
    unknown memory take no fraction. O(GPUs)."""
    if request.vram_mib is not None:
        return [(request.vram_mib, {d.index for d in ledger.devices})]
    fraction = request.vram_fraction if request.vram_fraction is not None else Fraction(1)
    groups: dict[int, set[int]] = {}
    for device in ledger.devices:
        if device.memory_mib is None:
            continue
        mib = max(device.memory_mib * fraction.numerator // fraction.denominator, 1)
        groups.setdefault(mib, set()).add(device.index)
    return list(groups.items())


def _named_refusal(ledger: NodeLedger, request: PodRequest, index: int) -> Status:
    """Why the GPU the pod names (``gpu-ids-request``) cannot take it: the share's refusal
    reason when it is one a pod leaving could clear, else :data:`REASON_GPU_IDS`."""
    if request.exclusive:
        return _IDS_BUSY
    for mib, indices in _share_groups(ledger, request):
        if index in indices:
            kind = ledger.refusal_kind(
                index, mib, None, request.swap_from_vram, request.cores_percent or 0
            )
            if kind in _SHARE_KIND_REASON and _could_hold(
                ledger.devices[index], mib, request.swap_from_vram
            ):
                return _SHARE_STATUS[_SHARE_KIND_REASON[kind]]
    return _IDS_BUSY


def _could_hold(device: Any, mib: int, swap: bool) -> bool:
    """Whether ``device``, idle, could take a share of ``mib``: MIG off, memory known, a
    policy that shares, and the share within capacity (within the memory unless it swaps)."""
    memory = device.memory_mib
    if device.mig_enabled or memory is None or not device.policy.allow_shared:
        return False
    return bool(mib <= device.policy.capacity_mib(memory) and (swap or mib <= memory))


def _idle_if_healthy(ledger: NodeLedger) -> int:
    """GPUs with MIG off and no holder, healthy or not. O(GPUs)."""
    return sum(1 for d in ledger.devices if not d.mig_enabled and not d.holders)


def _rule_text(n: int, rule: SetRule) -> str:
    """``"4 GPUs joined at >= 600 GB/s"``: what a rule asks of ``n`` GPUs, in words."""
    parts = []
    if rule.contiguous:
        parts.append("connected by NVLink among themselves")
    if rule.min_gbps:
        parts.append(f"joined at >= {rule.min_gbps:g} GB/s")
    return f"{n} GPUs {' and '.join(parts)}"


def _offer_meets(offer: float | None, rule: SetRule) -> bool:
    """Whether a best bottleneck of ``offer`` (``None``: no set, or no contiguous one) meets
    ``rule``."""
    return offer is not None and offer >= rule.min_gbps


def _offer_text(offer: float | None, rule: SetRule, where: str) -> str:
    """``"the best free set here offers 300 GB/s"``: what the node has against ``rule``."""
    if offer is None:
        if rule.contiguous:
            return f"no {where} is connected by NVLink among themselves"
        return f"no {where} has enough GPUs"
    kind = "connected " if rule.contiguous else ""
    return f"the best {kind}{where} offers {offer:g} GB/s"


def _whole_gpus(ledger: NodeLedger) -> int:
    return sum(1 for d in ledger.devices if not d.mig_enabled)


def never_fits(count: int, nodes: Sequence[NodeInfo]) -> str | None:
    """Why none of ``nodes`` (those the pod can run on, by its selectors and tolerations) could
    take ``count`` whole GPUs even with every pod gone (one sentence, no final period: the
    scheduler appends it to FailedScheduling's), or ``None`` when
    some node could (then the pod waits for room, and Filter's reasons say where it is short).

    A node's whole GPUs are its physical GPUs with MIG off (and no more than its
    ``allocatable``). When too few exist anywhere but enough physical GPUs do, the others are
    MIG-partitioned: the message names the MIG resources the nodes offer, so the user can ask
    for one. O(nodes x GPUs).
    """
    largest_whole = largest_physical = 0
    offered: set[str] = set()
    for node_info in nodes:
        if node_info.error is not None:
            continue
        ledger = node_info.ledger
        advertised = int(node_info.allocatable.scalar.get(RESOURCE_GPU, 0))
        largest_whole = max(largest_whole, min(_whole_gpus(ledger), advertised))
        largest_physical = max(largest_physical, max(ledger.gpu_count, advertised))
        for device in ledger.devices:
            offered.update(m.resource for m in device.mig)
    if count <= largest_whole or not nodes:
        return None
    asked = f"{count} whole GPU{'s' if count != 1 else ''} ({RESOURCE_GPU}: {count})"
    if largest_physical == 0:
        return f"The pod asks for {asked}, but no node it can run on has a GPU"
    if count > largest_physical or not offered:
        largest = largest_physical if count > largest_physical else largest_whole
        return (
            f"The pod asks for {asked}; the largest node it can run on has {largest}: ask for "
            "at most that many per pod, or split the work across pods"
        )
    where = (
        "every GPU of the nodes it can run on is MIG-partitioned"
        if largest_whole == 0
        else f"the largest node has {largest_whole} with MIG off and the rest are MIG-partitioned"
    )
    return (
        f"The pod asks for {asked}, but {where}: the nodes offer {', '.join(sorted(offered))}. "
        f"Ask for a MIG device instead (for example {min(offered)}: 1), or turn MIG off on "
        "enough GPUs"
    )


def never_fits_class(cls: GPUClass, nodes: Sequence[NodeInfo], sample: int = 3) -> str | None:
    """Why no GPU of ``nodes`` belongs to ``cls`` (one sentence, no final period: the
    commonest of :func:`match_class`'s reasons, with how many nodes each), or ``None`` when
    some node has one. O(nodes x GPUs); only for pods that fit nowhere."""
    misses: Counter[str] = Counter()
    for info in nodes:
        inventory = info.ledger.inventory
        match = match_class(cls, info.labels, inventory.gpus if inventory is not None else ())
        if match.matched:
            return None
        misses[match.reason] += 1
    if not misses:
        return None
    why = "; ".join(
        f"{n} node{'s' if n != 1 else ''}: {reason}" for reason, n in misses.most_common(sample)
    )
    return (
        f"No node the pod can run on has a GPU of GPUClass {cls.name} ({why}): change the "
        f"class (kubectl edit gpuclass {cls.name}) or the nodes' labels, or ask for another "
        "class"
    )


def never_fits_plan(request: PodRequest, nodes: Sequence[NodeInfo]) -> str | None:
    """Why no node could ever take a shared or MIG request (one sentence, no final period),
    or ``None``: a MIG profile (and no fallback) that no node offers, naming those they do;
    a VRAM share larger than every GPU (after overcommit). O(nodes x GPUs)."""
    if request.mode == "mig":
        profiles = (request.mig_profile or "", *request.mig_fallbacks)
        wanted = {mig_resource_name(p) for p in profiles}
        offered: set[str] = set()
        for info in nodes:
            for device in info.ledger.devices:
                offered.update(m.resource for m in device.mig)
            if info.error is None:
                offered.update(
                    r for r in info.allocatable.scalar if r.startswith(MIG_RESOURCE_PREFIX)
                )
        if wanted & offered:
            return None
        asked = " or ".join(profiles)
        if not offered:
            return (
                f"The pod asks for MIG profile {asked}, but no node offers MIG devices: ask "
                f"for whole GPUs ({RESOURCE_GPU}) or shared ones (gpusched.io/gpu)"
            )
        return (
            f"The pod asks for MIG profile {asked}, which no node offers; the nodes offer "
            f"{', '.join(sorted(offered))}: ask for one of those, or list one in "
            f"{MIG_FALLBACK_LIST}"
        )
    if request.vram_mib is None or request.exclusive:
        return None
    largest = 0
    for info in nodes:
        for device in info.ledger.devices:
            if device.memory_mib is not None and not device.mig_enabled:
                cap = device.policy.capacity_mib(device.memory_mib)
                largest = max(
                    largest, cap if request.swap_from_vram else min(cap, device.memory_mib)
                )
    if request.vram_mib <= largest:
        return None
    if largest == 0:
        return (
            f"The pod asks for {mib_text(request.vram_mib)} of VRAM per shared GPU, but no "
            "node has a GPU that can be shared by VRAM (with MIG off and a GPUNodeInventory)"
        )
    return (
        f"The pod asks for {mib_text(request.vram_mib)} per GPU; the largest GPU here can "
        f"give a pod {mib_text(largest)}: ask for at most that much gpusched.io/vram"
    )


def _after_class_change(pod: Pod, old: object, new: object) -> QueueingHint:
    """A ``GPUClass`` was added, changed or deleted: the pods asking for it (by either
    annotation) may fit now, or get a different message. O(1)."""
    changed = {
        (obj.get("metadata") or {}).get("name") for obj in (old, new) if isinstance(obj, Mapping)
    }
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    asked = {annotations.get(GPU_CLASS_ANNOTATION), annotations.get(WOOLYAI_GPU_CLASS_ANNOTATION)}
    return QueueingHint.QUEUE if changed & (asked - {None}) else QueueingHint.QUEUE_SKIP


def _after_pod_change(pod: Pod, old: object, new: object) -> QueueingHint:
    """A bound pod that held GPUs is gone, or finished."""
    before, after = pod_of(old), pod_of(new)
    if before is None or not pod_spec(before).get("nodeName") or not _holds_gpus(before):
        return QueueingHint.QUEUE_SKIP
    if after is None:
        return QueueingHint.QUEUE
    phase = (after.get("status") or {}).get("phase")
    return QueueingHint.QUEUE if phase in TERMINAL_PHASES else QueueingHint.QUEUE_SKIP


def _holds_gpus(pod: Mapping[str, Any]) -> bool:
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if GPU_IDS in annotations:
        return True
    try:
        scalar = pod_requests(pod).scalar
    except ValueError:
        return True
    return any(name == RESOURCE_GPU or name.startswith(MIG_RESOURCE_PREFIX) for name in scalar)
