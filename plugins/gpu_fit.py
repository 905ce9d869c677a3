"""GPUFit: which node, and which of its GPUs, a pod asking for whole GPUs gets.

kube-scheduler counts ``nvidia.com/gpu`` as a number and leaves the devices to the kubelet's
device plugin; gpusched picks them itself, so that a multi-GPU pod gets GPUs joined by NVLink.

- **PreFilter** parses the pod once (its whole-GPU request ``N``; malformed gpusched
  annotations are UnschedulableAndUnresolvable); a pod asking no whole GPUs is Skip.
- **Filter** checks the node (advertised, free in the device ledger, ``allocatable -
  requested``, no device conflict) and, if the pod fits, *chooses* its ``N`` GPUs there
  (:mod:`gpusched.topology.selection`: the best-connected free set, leaving the rest well
  connected), recorded in :data:`GPU_CHOICES`. Memoised per node-info generation and per
  topology, so an unchanged node costs a dict lookup.
- **Score** weighs the chosen set's connectivity against bin packing (``topologyWeight``,
  ``binPackingWeight``), integer arithmetic in 0..100.
- **PostFilter** (no node fits) says why when no node could *ever* take the pod: more GPUs
  than the largest node has, or GPUs that exist but are MIG-partitioned (naming the MIG
  resources the nodes offer instead). O(nodes), only for pods that fit nowhere; it nominates
  nothing, so preemption after it still runs.
- **Reserve** writes the choice on the chosen node as :data:`gpusched.framework.DEVICE_ASSIGNMENT`,
  which the scheduler assumes in its cache and DefaultBinder puts on the Binding.
- **SignPod**: pods asking no whole GPUs sign alike; ``N`` and the priority when the score
  depends on the node alone (``N = 1`` or ``topologyWeight`` 0); else ``None``.

The Filter rules and reasons, the selection, the score formula with worked numbers, and why
each signature is safe: docs/gpu_fit.md.

Args::

    - name: GPUFit
      args: {maxCombinations: 5000, topologyWeight: 1, binPackingWeight: 1}
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Self

from pydantic import Field, model_validator

from gpusched.annotations import (
    GPU_IDS,
    AnnotationError,
    Assignment,
    parse_assignment,
    parse_priority,
)
from gpusched.cache import MIG_RESOURCE_PREFIX, TERMINAL_PHASES, pod_requests
from gpusched.framework import (
    DEVICE_ASSIGNMENT,
    MAX_NODE_SCORE,
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
from gpusched.inventory import RESOURCE_GPU, GPUNodeInventory
from gpusched.topology import GPUTopology, build_topology

from ._helper import pod_of, pod_spec

if TYPE_CHECKING:
    from gpusched.cache import NodeInfo, NodeLedger

__all__ = [
    "DEFAULT_MAX_COMBINATIONS",
    "GPU_CHOICES",
    "NAME",
    "REASON_GPUS_IN_CONFLICT",
    "REASON_INSUFFICIENT_FREE_GPUS",
    "REASON_INSUFFICIENT_GPU_RESOURCE",
    "REASON_INVALID_NODE",
    "REASON_MIXED_REQUEST",
    "REASON_TOO_FEW_GPUS",
    "GPUChoice",
    "GPUChoices",
    "GPUFit",
    "GPUFitArgs",
    "GPURequest",
    "choice_for",
    "never_fits",
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

_REQUEST: Final = StateKey[GPURequest]("PreFilterGPUFit")
_BEST_TOPOLOGY: Final = StateKey[int]("PreScoreGPUFit")


def choice_for(state: CycleState, node_name: str) -> GPUChoice | None:
    """The GPUs chosen for the cycle's pod on ``node_name``; ``None`` if the pod asks for no
    whole GPUs (or GPUFit did not pass that node)."""
    choices = state.get(GPU_CHOICES)
    return choices.get(node_name) if choices is not None else None


# -- the node's layout ------------------------------------------------------------------------


def _signature(inventory: GPUNodeInventory) -> tuple[Any, ...]:
    """What of an inventory the layout depends on: GPU count and links. O(links)."""
    return (len(inventory.gpus), tuple((k.a, k.b, k.nvlinks, k.pcie) for k in inventory.links))


def _layout(inventory: GPUNodeInventory, max_combinations: int) -> GPUTopology:
    """The node's GPUs (indices ``0 .. len(gpus)-1``) and links as a :class:`GPUTopology`."""
    graph = build_topology(range(len(inventory.gpus)), inventory.links)
    return GPUTopology(graph, max_combinations)


# -- args ----------------------------------------------------------------------------------------


class GPUFitArgs(PluginArgs):
    """``pluginConfig`` args of GPUFit."""

    max_combinations: int = Field(default=DEFAULT_MAX_COMBINATIONS, ge=1)
    """Largest number of candidate sets searched exhaustively per node; above it the search is
    greedy. Default 5000 (any request on a node of up to 8 GPUs, or 12 GPUs asking 3)."""
    topology_weight: int = Field(default=1, ge=0)
    """``Wt`` in the score: how much a better-connected set counts. Default 1."""
    bin_packing_weight: int = Field(default=1, ge=0)
    """``Wp`` in the score: how much leaving the node fuller counts. Default 1."""

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
    """Chooses the best whole GPUs on each node; prefers connected sets on fuller nodes."""

    NAME = NAME
    ARGS = GPUFitArgs

    def __init__(self, args: GPUFitArgs | None = None, handle: Handle | None = None) -> None:
        args = args if args is not None else GPUFitArgs()
        self._handle = handle
        self._max_combinations = args.max_combinations
        self._wt = args.topology_weight
        self._wp = args.bin_packing_weight
        self._nodes: dict[str, tuple[GPUNodeInventory, GPUTopology]] = {}
        self._layouts: dict[tuple[Any, ...], GPUTopology] = {}
        self._last: dict[str, tuple[int, int, GPUChoice]] = {}
        """Node -> (node-info generation, N, the choice made): a node unchanged since the last
        cycle (same generation) gets the same choice without a look at its devices."""

    @classmethod
    def new(cls, args: Any, handle: Handle) -> Self:
        return cls(args if isinstance(args, GPUFitArgs) else None, handle)

    # -- PreFilter -------------------------------------------------------------------------

    def pre_filter(self, state: CycleState, pod: Pod) -> tuple[PreFilterResult | None, Status]:
        request, status = self._parse(pod)
        if request is None:
            return None, status
        state.write(_REQUEST, request)
        state.write(GPU_CHOICES, GPUChoices())
        return None, SUCCESS

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
        ``N`` when its score does not depend on the cycle's other nodes; else ``None``.

        Why each case keeps :meth:`SignPlugin.sign_pod`'s contract:

        - a pod that PreFilter rejects (malformed annotation or requests, whole GPUs with MIG
          devices) is ``None``: it takes the full path and gets PreFilter's message;
        - no whole GPUs: PreFilter Skips and writes nothing, so Filter and Score never run;
        - ``N`` whole GPUs: PreFilter writes :class:`GPURequest` (``N`` and the priority,
          hence both in the fragment); Filter reads only ``N`` and the node (its choice is a
          function of the node's free GPUs and layout, and is reused for the same generation);
        - Score reads PreScore's ``best``, the highest topology score among the cycle's
          feasible nodes, when ``N >= 2`` and ``topologyWeight > 0``: that is relative to the
          other nodes, so such a pod is ``None``. With ``N = 1`` topology does not apply, and
          with ``topologyWeight = 0`` the formula reduces to ``100 * used // whole``
          whatever ``best`` is, so those are signed.

        No cache: the parse is the one PreFilter does (a few microseconds). Never raises.
        """
        try:
            request, status = self._parse(pod)
        except Exception:  # a pod too malformed to read: PreFilter will say why
            return None
        if request is None:
            return (NAME, 0) if status.is_skip else None
        if request.count >= 2 and self._wt > 0:
            return None
        return (NAME, request.count, request.priority)

    # -- Filter ----------------------------------------------------------------------------

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        request = state.get(_REQUEST)
        if request is None:  # PreFilter disabled for this plugin
            request, status = self._parse(pod)
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
            return _TOO_FEW if _whole_gpus(ledger) < n else _NO_FREE
        if advertised - node_info.requested.scalar.get(RESOURCE_GPU, 0) < n:
            return _NO_RESOURCE
        if node_info.unplaced:
            return _CONFLICT
        choices = state.get(GPU_CHOICES)
        if choices is None:
            choices = GPUChoices()
            state.write(GPU_CHOICES, choices)
        name = node_info.name
        last = self._last.get(name)
        if last is not None and last[0] == node_info.generation and last[1] == n:
            choice = last[2]
        else:
            choice = self._choose(node_info, n)
            if len(self._last) >= _NODES_MAX:
                self._last.clear()
            self._last[name] = (node_info.generation, n, choice)
        choices[name] = choice
        return SUCCESS

    # -- PostFilter ------------------------------------------------------------------------

    def post_filter(
        self, state: CycleState, pod: Pod, statuses: Mapping[str, Status]
    ) -> tuple[PostFilterResult | None, Status]:
        """Unschedulable, with a message when no node could ever take the pod (see
        :func:`never_fits`); it never makes room, so later PostFilter plugins still run."""
        request = state.get(_REQUEST)
        if request is None or self._handle is None:
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
        why = never_fits(request.count, nodes)
        if why is None:
            return None, Status.unschedulable(plugin=NAME)
        return None, Status.unschedulable(why, plugin=NAME)

    def _choose(self, node_info: NodeInfo, n: int) -> GPUChoice:
        """The best ``n`` free GPUs of the node (module docstring). The node has them."""
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
        if inventory is None:
            ids, score = tuple(free[:n]), 0
        else:
            ids, score = self._topology(node_info.name, inventory).choose(free, n, mask=mask)
        chosen = [devices[i] for i in ids]
        uuids = tuple(d.uuid or "" for d in chosen)
        return GPUChoice(
            gpu_ids=ids,
            uuids=uuids if all(uuids) else (),
            vram_mib=tuple(d.memory_mib or 0 for d in chosen),
            topology_score=score,
            free_after=len(free) - n,
            whole_gpus=whole,
        )

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
        if _REQUEST not in state:
            return Status.skip()
        choices = state.get(GPU_CHOICES) or GPUChoices()
        best = 0
        for node_info in nodes:
            choice = choices.get(node_info.name)
            if choice is not None and choice.topology_score > best:
                best = choice.topology_score
        state.write(_BEST_TOPOLOGY, best)
        return SUCCESS

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> tuple[int, Status]:
        choice = choice_for(state, node_info.name)
        if choice is None or not choice.whole_gpus:
            return 0, Status.error(
                f"no GPU choice for node {node_info.name!r}: GPUFit's Filter did not pass it "
                f"this cycle (is GPUFit enabled at filter as well as score?)",
                plugin=NAME,
            )
        best = state.get(_BEST_TOPOLOGY) or 0
        whole = choice.whole_gpus
        used = whole - choice.free_after
        wt, wp = self._wt, self._wp
        if len(choice.gpu_ids) >= 2 and best > 0:
            numerator = MAX_NODE_SCORE * (wt * choice.topology_score * whole + wp * used * best)
            return numerator // ((wt + wp) * best * whole), SUCCESS
        return (MAX_NODE_SCORE * used // whole if wp else 0), SUCCESS

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
        state.write(DEVICE_ASSIGNMENT, choice.to_assignment())
        return SUCCESS

    def unreserve(self, state: CycleState, pod: Pod, node_name: str) -> None:
        state.delete(DEVICE_ASSIGNMENT)

    # -- events ----------------------------------------------------------------------------

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """A bound pod gone or finished, a node or its inventory added or changed."""
        return [
            ClusterEventWithHint(
                ClusterEvent("Pod", ActionType.DELETE | ActionType.UPDATE), _after_pod_change
            ),
            ClusterEventWithHint(ClusterEvent("Node", ActionType.ADD | ActionType.UPDATE)),
            ClusterEventWithHint(ClusterEvent("GPUNodeInventory", ActionType.ALL)),
        ]


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
