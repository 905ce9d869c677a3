"""NodeResourcesFit: the pod's requests fit in what the node has left (upstream's
``noderesources.Fit``).

Filter, per node, as upstream's ``fitsRequest``: one more pod must fit in ``allocatable.pods``
(``Too many pods``); every resource the pod requests must fit in ``allocatable - requested``
(``Insufficient cpu``, ``Insufficient memory``, ``Insufficient ephemeral-storage``, and
``Insufficient <name>`` for extended resources such as ``nvidia.com/gpu`` or
``nvidia.com/mig-1g.10gb``). Every failing resource is reported. The status is Unschedulable
(preemption could make room), or UnschedulableAndUnresolvable when a request exceeds the
node's whole allocatable, so that even an empty node could not take it (upstream since 1.31).
Extended resources listed in the ``ignoredResources`` arg, or whose domain is listed in
``ignoredResourceGroups``, are not checked.

**Resources GPUFit owns (issue 10).** Some GPU "resources" in a pod's limits are not amounts
of anything a node has: ``gpusched.io/vram`` and HAMi's ``nvidia.com/gpumem``,
``nvidia.com/gpumem-percentage`` and ``nvidia.com/gpucores`` are quantities *per GPU* (the
slice wanted on each of the ``gpusched.io/gpu`` GPUs), and no node advertises them, so
comparing them with ``allocatable`` would reject every node. They are never checked here,
whatever the args say (:data:`PER_GPU_RESOURCES`): GPUFit checks them against each device
in the device ledger. HAMi's scheduler does the same by declaring them ``ignoredByScheduler``
managed resources of its extender; we chose a fixed set over a default ``ignoredResources``
because a profile that sets its own ``ignoredResources`` would otherwise lose it and reject
every shared pod. ``gpusched.io/gpu`` itself *is* checked (the node agent advertises a slot
per client of each GPU, GPUs x 10 in the simulation), as kube-scheduler would.
A pod that lists MIG fallbacks (``gpusched.io/mig-fallback``) may be placed on another
profile than the ``nvidia.com/mig-<profile>`` it requests, so its MIG resources are not
checked here either: GPUFit places it by the node's free MIG devices.

PreFilter computes the pod's effective requests once per cycle with
:func:`gpusched.cache.pod_requests` (init containers, sidecars, overhead and pod-level
resources, as the cache counts the pods already on the node), so Filter only compares integers.

Score (``scoringStrategy``, default ``LeastAllocated`` over cpu and memory, weight 1 each, as
upstream's defaults)::

    LeastAllocated: per resource (allocatable - requested) * 100 // allocatable  (spreads pods)
    MostAllocated:  per resource min(requested, allocatable) * 100 // allocatable (packs them)
    node score = sum(resource score * weight) // sum(weight), over resources the node has

where ``requested`` is what the node's pods request plus this pod. For cpu and memory, as
upstream's ``NonZeroRequested``, a container that requests no cpu counts as 100m and one that
requests no memory as 200Mi, so best-effort pods still spread. The nodes' non-zero totals are
computed once per node change (cached by node-info generation), not per cycle.

Args (upstream's ``NodeResourcesFitArgs``, without ``RequestedToCapacityRatio``)::

    - name: NodeResourcesFit
      args:
        ignoredResources: [example.com/foo]
        ignoredResourceGroups: [example.com]
        scoringStrategy:
          type: MostAllocated
          resources: [{name: cpu, weight: 1}, {name: memory, weight: 1}]
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, Self

from pydantic import Field, field_validator

from gpusched.cache import CPU, MEMORY, PODS, TERMINAL_PHASES, Resources, pod_requests
from gpusched.framework import (
    MAX_NODE_SCORE,
    SUCCESS,
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    Code,
    CycleState,
    EnqueueExtensions,
    FilterPlugin,
    Handle,
    PluginArgs,
    Pod,
    PreFilterPlugin,
    PreFilterResult,
    PreScorePlugin,
    QueueingHint,
    ScorePlugin,
    SignPlugin,
    StateKey,
    Status,
)

from ._helper import pod_of, pod_spec

if TYPE_CHECKING:
    from gpusched.cache import NodeInfo

__all__ = [
    "DEFAULT_MEMORY_REQUEST",
    "DEFAULT_MILLI_CPU_REQUEST",
    "MIG_FALLBACK",
    "MIG_PREFIX",
    "NAME",
    "PER_GPU_RESOURCES",
    "REASON_INSUFFICIENT",
    "REASON_INSUFFICIENT_CPU",
    "REASON_INSUFFICIENT_EPHEMERAL_STORAGE",
    "REASON_INSUFFICIENT_MEMORY",
    "REASON_TOO_MANY_PODS",
    "NodeResourcesFit",
    "NodeResourcesFitArgs",
    "ResourceSpec",
    "ScoringStrategy",
    "insufficient_reason",
    "nonzero_requests",
]

NAME: Final = "NodeResourcesFit"

REASON_TOO_MANY_PODS: Final = "Too many pods"
REASON_INSUFFICIENT_CPU: Final = "Insufficient cpu"
REASON_INSUFFICIENT_MEMORY: Final = "Insufficient memory"
REASON_INSUFFICIENT_EPHEMERAL_STORAGE: Final = "Insufficient ephemeral-storage"
REASON_INSUFFICIENT: Final = "Insufficient {resource}"
"""Upstream's ``fmt.Sprintf("Insufficient %v", rName)`` for extended resources, as a
``str.format`` template; see :func:`insufficient_reason`."""

DEFAULT_MILLI_CPU_REQUEST: Final = 100
"""Millicores a container without a cpu request counts as when scoring (upstream's value)."""
DEFAULT_MEMORY_REQUEST: Final = 200 * 1024 * 1024
"""Bytes a container without a memory request counts as when scoring (upstream's 200Mi)."""

PER_GPU_RESOURCES: Final = frozenset(
    {
        "gpusched.io/vram",
        "nvidia.com/gpumem",
        "nvidia.com/gpumem-percentage",
        "nvidia.com/gpucores",
    }
)
"""Per-GPU quantities that Filter never checks (GPUFit does, per device): module docstring."""
MIG_FALLBACK: Final = "gpusched.io/mig-fallback"
MIG_PREFIX: Final = "nvidia.com/mig-"

_STATUS_CACHE_MAX: Final = 4096
_NONZERO_CACHE_MAX: Final = 100_000


def insufficient_reason(resource: str) -> str:
    """``Insufficient <resource>``."""
    return REASON_INSUFFICIENT.format(resource=resource)


def _is_extended(name: str) -> bool:
    """Upstream's ``IsExtendedResourceName``: has a domain that is not ``kubernetes.io``."""
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


def _with_defaults(containers: Sequence[Mapping[str, Any]] | None) -> list[Mapping[str, Any]]:
    out: list[Mapping[str, Any]] = []
    for container in containers or ():
        resources = container.get("resources") or {}
        requests = resources.get("requests") or {}
        if CPU in requests and MEMORY in requests:
            out.append(container)
            continue
        filled = {CPU: f"{DEFAULT_MILLI_CPU_REQUEST}m", MEMORY: str(DEFAULT_MEMORY_REQUEST)}
        filled.update(requests)
        out.append({**container, "resources": {**resources, "requests": filled}})
    return out


def nonzero_requests(pod: Mapping[str, Any]) -> tuple[int, int]:
    """``(millicores, bytes)`` the pod counts as when scoring: its requests with upstream's
    defaults for containers that request no cpu or no memory (``NonMissingContainerRequests``).
    Raises ``ValueError`` for a malformed quantity."""
    spec = pod.get("spec") or {}
    shadow = {
        "spec": {
            **spec,
            "containers": _with_defaults(spec.get("containers")),
            "initContainers": _with_defaults(spec.get("initContainers")),
        }
    }
    requests = pod_requests(shadow)
    return requests.milli_cpu, requests.memory


# -- args ------------------------------------------------------------------------------------


class ResourceSpec(PluginArgs):
    """A resource the score looks at, and its weight."""

    name: str = Field(min_length=1)
    """The resource: ``cpu``, ``memory``, ``ephemeral-storage`` or an extended resource."""
    weight: int = Field(default=1, ge=1, le=100)
    """Its weight in the node score, 1..100. Default 1."""


class ScoringStrategy(PluginArgs):
    """How nodes are scored (upstream's ``ScoringStrategy``)."""

    type: Literal["LeastAllocated", "MostAllocated"] = "LeastAllocated"
    """``LeastAllocated`` spreads pods (upstream's default), ``MostAllocated`` packs them."""
    resources: list[ResourceSpec] = Field(
        default_factory=lambda: [ResourceSpec(name=CPU), ResourceSpec(name=MEMORY)], min_length=1
    )
    """The resources scored, each with a weight. Default: cpu and memory, weight 1 each."""

    @field_validator("resources")
    @classmethod
    def _unique(cls, resources: list[ResourceSpec]) -> list[ResourceSpec]:
        names = [r.name for r in resources]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"resources listed more than once: {', '.join(duplicates)}")
        return resources


class NodeResourcesFitArgs(PluginArgs):
    """``pluginConfig`` args of NodeResourcesFit (upstream's ``NodeResourcesFitArgs``)."""

    ignored_resources: list[str] = []
    """Extended resources Filter does not check. Default: none."""
    ignored_resource_groups: list[str] = []
    """Domains (``example.com``) whose extended resources Filter does not check."""
    scoring_strategy: ScoringStrategy = Field(default_factory=ScoringStrategy)
    """How Score ranks nodes. Default: LeastAllocated on cpu and memory."""

    @field_validator("ignored_resource_groups")
    @classmethod
    def _groups(cls, groups: list[str]) -> list[str]:
        for group in groups:
            if "/" in group:
                raise ValueError(f"{group!r}: a resource group name cannot contain '/'")
        return groups


# -- the plugin ------------------------------------------------------------------------------


class _Request:
    """The pod's requests, as Filter compares them. Never mutated once written."""

    __slots__ = ("ephemeral_storage", "memory", "milli_cpu", "scalars", "trivial")

    def __init__(self, requests: Resources, scalars: tuple[tuple[str, int, str], ...]) -> None:
        self.milli_cpu = requests.milli_cpu
        self.memory = requests.memory
        self.ephemeral_storage = requests.ephemeral_storage
        self.scalars = scalars
        """(resource, amount, its "Insufficient" reason) for each checked extended resource."""
        self.trivial = not (
            self.milli_cpu or self.memory or self.ephemeral_storage or requests.scalar
        )
        """The pod requests nothing but a pod slot."""


_PRE_FILTER: Final = StateKey[_Request]("PreFilterNodeResourcesFit")
_PRE_SCORE: Final = StateKey[tuple[int, ...]]("PreScoreNodeResourcesFit")


class NodeResourcesFit(
    PreFilterPlugin, FilterPlugin, PreScorePlugin, ScorePlugin, SignPlugin, EnqueueExtensions
):
    """Filters nodes without room for the pod's requests; scores by allocation."""

    NAME = NAME
    ARGS = NodeResourcesFitArgs

    def __init__(self, args: NodeResourcesFitArgs | None = None) -> None:
        args = args if args is not None else NodeResourcesFitArgs()
        self._ignored = frozenset(args.ignored_resources)
        self._ignored_groups = frozenset(args.ignored_resource_groups)
        strategy = args.scoring_strategy
        self._most_allocated = strategy.type == "MostAllocated"
        self._resources = tuple((r.name, r.weight) for r in strategy.resources)
        self._statuses: dict[tuple[tuple[str, ...], bool], Status] = {}
        self._node_nonzero: dict[str, tuple[int, int, int]] = {}
        self._pod_nonzero: dict[str, tuple[object, int, int]] = {}

    @classmethod
    def new(cls, args: Any, handle: Handle) -> Self:
        return cls(args if isinstance(args, NodeResourcesFitArgs) else None)

    # -- PreFilter / Filter ----------------------------------------------------------------

    def pre_filter(self, state: CycleState, pod: Pod) -> tuple[PreFilterResult | None, Status]:
        try:
            request = self._request(pod)
        except ValueError as exc:
            return None, Status.unresolvable(f"invalid resource requests: {exc}", plugin=NAME)
        state.write(_PRE_FILTER, request)
        return None, SUCCESS

    def _request(self, pod: Pod) -> _Request:
        requests = pod_requests(pod)
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        fallback = isinstance(annotations, Mapping) and MIG_FALLBACK in annotations
        scalars = tuple(
            (name, amount, insufficient_reason(name))
            for name, amount in sorted(requests.scalar.items())
            if not self._ignores(name) and not (fallback and name.startswith(MIG_PREFIX))
        )
        return _Request(requests, scalars)

    def _ignores(self, name: str) -> bool:
        if not _is_extended(name):
            return False
        return (
            name in PER_GPU_RESOURCES
            or name in self._ignored
            or name.split("/", 1)[0] in self._ignored_groups
        )

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        request = state.get(_PRE_FILTER)
        if request is None:  # PreFilter disabled for this plugin
            try:
                request = self._request(pod)
            except ValueError as exc:
                return Status.unresolvable(f"invalid resource requests: {exc}", plugin=NAME)
        allocatable = node_info.allocatable
        requested = node_info.requested
        reasons: list[str] | None = None
        unresolvable = False
        if len(node_info.pods) + 1 > allocatable.pods:
            reasons = [REASON_TOO_MANY_PODS]
        if request.trivial:
            return SUCCESS if reasons is None else self._status(reasons, unresolvable)
        want = request.milli_cpu
        if want and want > allocatable.milli_cpu - requested.milli_cpu:
            reasons = reasons or []
            reasons.append(REASON_INSUFFICIENT_CPU)
            unresolvable = unresolvable or want > allocatable.milli_cpu
        want = request.memory
        if want and want > allocatable.memory - requested.memory:
            reasons = reasons or []
            reasons.append(REASON_INSUFFICIENT_MEMORY)
            unresolvable = unresolvable or want > allocatable.memory
        want = request.ephemeral_storage
        if want and want > allocatable.ephemeral_storage - requested.ephemeral_storage:
            reasons = reasons or []
            reasons.append(REASON_INSUFFICIENT_EPHEMERAL_STORAGE)
            unresolvable = unresolvable or want > allocatable.ephemeral_storage
        if request.scalars:
            have = allocatable.scalar
            used = requested.scalar
            for name, want, reason in request.scalars:
                capacity = have.get(name, 0)
                if want > capacity - used.get(name, 0):
                    reasons = reasons or []
                    reasons.append(reason)
                    unresolvable = unresolvable or want > capacity
        return SUCCESS if reasons is None else self._status(reasons, unresolvable)

    def _status(self, reasons: list[str], unresolvable: bool) -> Status:
        """The rejection for these reasons, built once and reused."""
        key = (tuple(reasons), unresolvable)
        status = self._statuses.get(key)
        if status is None:
            if len(self._statuses) >= _STATUS_CACHE_MAX:
                self._statuses.clear()
            code = Code.UNSCHEDULABLE_AND_UNRESOLVABLE if unresolvable else Code.UNSCHEDULABLE
            status = Status(code, key[0], NAME)
            self._statuses[key] = status
        return status

    # -- PreScore / Score ------------------------------------------------------------------

    def pre_score(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        try:
            state.write(_PRE_SCORE, self._score_request(pod))
        except ValueError as exc:
            return Status.error(f"invalid resource requests: {exc}", plugin=NAME)
        return SUCCESS

    def _score_request(self, pod: Pod) -> tuple[int, ...]:
        requests = pod_requests(pod)
        cpu, memory = nonzero_requests(pod)
        out: list[int] = []
        for name, _ in self._resources:
            if name == CPU:
                out.append(cpu)
            elif name == MEMORY:
                out.append(memory)
            else:
                out.append(requests.get(name))
        return tuple(out)

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> tuple[int, Status]:
        wanted = state.get(_PRE_SCORE)
        if wanted is None:  # PreScore disabled for this plugin
            try:
                wanted = self._score_request(pod)
            except ValueError as exc:
                return 0, Status.error(f"invalid resource requests: {exc}", plugin=NAME)
        allocatable = node_info.allocatable
        requested = node_info.requested
        node_cpu = node_memory = -1
        total = weights = 0
        for (name, weight), want in zip(self._resources, wanted, strict=True):
            if name in (CPU, MEMORY):
                if node_cpu < 0:
                    node_cpu, node_memory = self._node_nonzero_requested(node_info)
                capacity = allocatable.milli_cpu if name == CPU else allocatable.memory
                used = (node_cpu if name == CPU else node_memory) + want
            elif name == PODS:
                capacity, used = allocatable.pods, len(node_info.pods) + 1
            else:
                capacity = allocatable.get(name)
                used = requested.get(name) + want
            if capacity <= 0:
                continue
            if self._most_allocated:
                value = min(used, capacity) * MAX_NODE_SCORE // capacity
            else:
                value = (capacity - used) * MAX_NODE_SCORE // capacity if used <= capacity else 0
            total += value * weight
            weights += weight
        return (total // weights if weights else 0), SUCCESS

    def _node_nonzero_requested(self, node_info: NodeInfo) -> tuple[int, int]:
        """The node's pods' cpu and memory with the non-zero defaults; cached per generation.

        O(1) for a node unchanged since the last call, else O(pods) (each pod's own figures
        are cached too, so only new pods are parsed)."""
        cached = self._node_nonzero.get(node_info.name)
        if cached is not None and cached[0] == node_info.generation:
            return cached[1], cached[2]
        if len(self._pod_nonzero) > _NONZERO_CACHE_MAX:
            self._pod_nonzero.clear()
        cpu = memory = 0
        pods = self._pod_nonzero
        for uid, info in node_info.pods.items():
            entry = pods.get(uid)
            if entry is None or entry[0] is not info.pod:
                try:
                    pod_cpu, pod_memory = nonzero_requests(info.pod)
                except ValueError:  # counted as requesting nothing, as the cache does
                    pod_cpu, pod_memory = 0, 0
                entry = (info.pod, pod_cpu, pod_memory)
                pods[uid] = entry
            cpu += entry[1]
            memory += entry[2]
        self._node_nonzero[node_info.name] = (node_info.generation, cpu, memory)
        return cpu, memory

    # -- SignPlugin ------------------------------------------------------------------------

    def sign_pod(self, pod: Pod) -> Hashable | None:
        """The requests Filter checks and the ones Score weighs; ``None`` if they do not
        parse (the full cycle reports why)."""
        try:
            request = self._request(pod)
            wanted = self._score_request(pod)
        except ValueError:
            return None
        return (
            request.milli_cpu,
            request.memory,
            request.ephemeral_storage,
            tuple((name, amount) for name, amount, _ in request.scalars),
            wanted,
        )

    # -- events ----------------------------------------------------------------------------

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """A bound pod deleted (or finished), a node added or changed."""
        return [
            ClusterEventWithHint(
                ClusterEvent("Pod", ActionType.DELETE | ActionType.UPDATE), _after_pod_change
            ),
            ClusterEventWithHint(ClusterEvent("Node", ActionType.ADD | ActionType.UPDATE)),
        ]


def _after_pod_change(pod: Pod, old: object, new: object) -> QueueingHint:
    """A pod that was bound and is now gone or finished frees what it requested."""
    before, after = pod_of(old), pod_of(new)
    if before is None or not pod_spec(before).get("nodeName"):
        return QueueingHint.QUEUE_SKIP
    if after is None:  # deleted
        return QueueingHint.QUEUE
    phase = (after.get("status") or {}).get("phase")
    return QueueingHint.QUEUE if phase in TERMINAL_PHASES else QueueingHint.QUEUE_SKIP
