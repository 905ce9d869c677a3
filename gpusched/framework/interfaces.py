"""The plugin interfaces: one base class per extension point, as kube-scheduler's.

Upstream: staging/src/k8s.io/kube-scheduler/framework/interface.go (the plugin interfaces and
their contracts) and types.go (cluster events and queueing hints). The contracts below are
upstream's, restated for gpusched; where gpusched differs it says so.

The two cycles::

    queue:             PreEnqueue (gate), QueueSort (order)
    scheduling cycle:  PreFilter -> Filter* -> [PostFilter if no node fits]
    (serial, in memory,   -> PreScore -> Score* -> NormalizeScore -> Reserve -> (assume)
     never awaits)        -> Permit
    binding cycle:     wait on Permit -> (device Lease) -> PreBind -> Bind -> PostBind
    (asyncio task)
    (* once per node; any failure after Reserve: Unreserve, every plugin, in reverse order)

A plugin is one class with a ``NAME`` that subclasses the base class of every extension point it
implements (``class Gang(PreFilterPlugin, PermitPlugin, ReservePlugin)``); the framework makes
one instance per profile and finds out once, at start-up, which stages it implements, so the
hot path never calls a stage a plugin does not have. The optional extras are mixins:
``ScoreExtensions`` (score normalisation) and ``EnqueueExtensions`` (which cluster events may
make a pod this plugin rejected schedulable again).

Synchronous and asynchronous stages are checked when the class is defined: PreEnqueue, QueueSort,
PreFilter, Filter, PostFilter, PreScore, Score, NormalizeScore, Reserve, Unreserve and Permit
are plain functions (the scheduling cycle is serial and in memory and must never wait on I/O);
PreBind, Bind and PostBind are coroutines. Defining them the other way round is a ``TypeError``
at import.

Pods are plain dicts (the JSON the API server returns); node_info is the scheduler cache's
``NodeInfo`` for one node in this cycle's snapshot. The guide for plugin authors, with these
contracts in brief, signing, the ``Handle`` and testing: docs/plugins.md.
"""

from __future__ import annotations

import abc
import enum
import inspect
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Final, Protocol, Self, TypeAlias

from gpusched.annotations import Assignment
from gpusched.clock import Clock

from .cycle_state import CycleState, StateKey
from .queued_pod import QueuedPodInfo
from .status import Status

if TYPE_CHECKING:
    from pydantic import BaseModel

    from gpusched.cache import NodeInfo
    from gpusched.gpu_policy.models import GPUClass
    from gpusched.kube import Kube

__all__ = [
    "DEVICE_ASSIGNMENT",
    "MAX_NODE_SCORE",
    "MIN_NODE_SCORE",
    "SHARED_CLAIM",
    "WILDCARD",
    "ActionType",
    "BackgroundPlugin",
    "BindPlugin",
    "ClaimSpecsPlugin",
    "ClusterEvent",
    "ClusterEventWithHint",
    "EnqueueExtensions",
    "EventRecorder",
    "FilterPlugin",
    "GroupPostFilterPlugin",
    "Handle",
    "Informer",
    "InformerHandler",
    "InformerPlugin",
    "NodeLister",
    "NodeScore",
    "PermitPlugin",
    "Plugin",
    "Pod",
    "PodEventHandler",
    "PodGroup",
    "PodGroupPlugin",
    "PostBindPlugin",
    "PostFilterPlugin",
    "PostFilterResult",
    "PreBindPlugin",
    "PreEnqueuePlugin",
    "PreFilterPlugin",
    "PreFilterResult",
    "PreScorePlugin",
    "QueueSortPlugin",
    "QueuedPodInfo",
    "QueueingHint",
    "QueueingHintFn",
    "ReservePlugin",
    "ScoreExtensions",
    "ScorePlugin",
    "SignPlugin",
    "WaitingPod",
]

Pod: TypeAlias = dict[str, Any]
"""A Pod as the API server returns it (JSON decoded to dicts and lists)."""

MAX_NODE_SCORE = 100
"""The highest score a Score plugin may give a node (after normalisation)."""

MIN_NODE_SCORE = 0
"""The lowest score a Score plugin may give a node (after normalisation)."""

DEVICE_ASSIGNMENT: Final = StateKey[Assignment]("gpusched.io/device-assignment")
"""The devices the pod gets on the chosen node: the seam between the device plugin, the
scheduler and the binders.

- The Reserve plugin that allocates devices (GPUFit by default; any replacement) writes it in
  ``reserve`` for the node it is given, from what it chose there this cycle, without a
  reservation uid, and deletes it in ``unreserve``. A pod that gets no devices has none.
- The scheduler runs Reserve *before* it assumes the pod (upstream assumes first), because
  the assumed pod must carry its devices: the cache's device ledger books them, so that the
  next cycle sees them taken. It then stamps the reservation uid, writes the stamped value
  back under this key and assumes the pod with it; if assuming fails, it runs Unreserve.
- Binders (``DefaultBinder``) and any later plugin (Permit, PreBind, PostBind) read it.
"""

SHARED_CLAIM: Final = StateKey[bool]("gpusched.io/shared-claim")
"""Written ``True`` (beside :data:`DEVICE_ASSIGNMENT`, by the same Reserve plugin, deleted by its
Unreserve) when the assignment is not an exclusive hold of whole GPUs: a VRAM share, or MIG
devices (several live on one GPU index). The binding cycle then writes the pod's reservation
Lease entry as non-exclusive, so two shares or two MIG devices of one GPU do not conflict there
as two whole GPUs would. Absent: exclusive."""


# -- data passed between the framework and plugins ----------------------------------------


@dataclass(slots=True)
class NodeScore:
    """A node's score. Mutable: ``normalize_score`` rewrites ``score`` in place."""

    name: str
    score: int


@dataclass(frozen=True, slots=True)
class PreFilterResult:
    """Which nodes are worth filtering at all; ``node_names=None`` means all of them.

    When PreFilter plugins return several, the framework intersects them, and ``plugins`` (set
    by the framework) names the plugins that restricted the nodes. Nodes left out are treated as
    ``UnschedulableAndUnresolvable`` (preemption will not consider them).
    """

    node_names: frozenset[str] | None = None
    plugins: frozenset[str] = frozenset()

    @property
    def all_nodes(self) -> bool:
        return self.node_names is None

    def merge(self, other: PreFilterResult | None) -> PreFilterResult:
        """The intersection of two results (upstream's ``Merge``)."""
        if other is None or other.node_names is None:
            return self
        if self.node_names is None:
            return PreFilterResult(other.node_names, self.plugins | other.plugins)
        return PreFilterResult(self.node_names & other.node_names, self.plugins | other.plugins)


@dataclass(frozen=True, slots=True)
class PodGroup:
    """A gang as the scheduler plans it: every pending member in one scheduling cycle, all
    placed or none (:class:`PodGroupPlugin`, ``Scheduler._schedule_group``).

    ``pending`` are the uids of the members that are not bound, not terminating and not
    finished, the popped pod among them; ``placed`` counts members already bound (or assumed)
    that still run and count toward ``min_member``. ``domains`` are the node sets to try, in
    order (the smallest topology domain that can hold the gang first); empty: anywhere. With
    ``domain_required`` the gang is placed in one of them or not at all, and
    ``domain_message`` says why when none holds it ("needs 64 GPUs in one rack; the largest
    rack has 40 free").
    """

    key: str
    min_member: int
    pending: tuple[str, ...]
    placed: int = 0
    domains: tuple[frozenset[str], ...] = ()
    domain_required: bool = False
    domain_message: str = ""


@dataclass(frozen=True, slots=True)
class PostFilterResult:
    """What a PostFilter plugin (preemption) decided: the node the pod is nominated to."""

    nominated_node_name: str


class ActionType(enum.IntFlag):
    """What happened to an object (upstream's ``ActionType``; combine with ``|``)."""

    ADD = 1
    DELETE = 2
    UPDATE = 4
    ALL = ADD | DELETE | UPDATE


WILDCARD = "*"
"""The resource of a ``ClusterEvent`` that matches events on any resource."""


@dataclass(frozen=True, slots=True)
class ClusterEvent:
    """A kind of change in the cluster: a resource and the actions on it.

    ``resource`` is the object's kind as the scheduler's informers name it: ``"Node"``,
    ``"Pod"``, ``"Lease"``, ``"GPUNodeInventory"``, ... or ``WILDCARD``.
    """

    resource: str
    action: ActionType
    label: str = ""

    def matches(self, event: ClusterEvent) -> bool:
        """Whether an event that happened (``event``) is one this registration is interested in."""
        return (self.resource in (WILDCARD, event.resource)) and bool(self.action & event.action)


class QueueingHint(enum.IntEnum):
    """A plugin's verdict on whether an event may make a pod it rejected schedulable."""

    QUEUE_SKIP = 0
    """The event cannot help this pod: leave it in the unschedulable pool."""
    QUEUE = 1
    """The event may make the pod schedulable: move it to the active or backoff queue."""


QueueingHintFn: TypeAlias = Callable[[Pod, Any, Any], QueueingHint]
"""``hint(pod, old_object, new_object)``: ``old`` is ``None`` for Add, ``new`` for Delete.

It must be cheap and must not raise; if it does, the queue logs it and requeues (``QUEUE``), as
upstream does with an error.
"""


@dataclass(frozen=True, slots=True)
class ClusterEventWithHint:
    """An event a plugin registers for, and its optional hint (``None`` means always QUEUE)."""

    event: ClusterEvent
    queueing_hint_fn: QueueingHintFn | None = None


class WaitingPod(Protocol):
    """A pod that Permit plugins told to wait (upstream's ``WaitingPod``); from
    ``Handle.get_waiting_pod``. Allow and reject it from the event loop's thread."""

    @property
    def pod(self) -> Pod: ...

    @property
    def uid(self) -> str: ...

    @property
    def pending_plugins(self) -> tuple[str, ...]:
        """The plugins that have not allowed the pod yet."""
        ...

    def allow(self, plugin: str) -> None:
        """``plugin`` allows the pod; once every waiting plugin has, its binding cycle goes on."""

    def reject(self, plugin: str, message: str) -> bool:
        """Reject the pod (Unschedulable, attributed to ``plugin``); False if already decided."""
        ...


class NodeLister(Protocol):
    """The cycle's snapshot of the nodes (upstream's ``SnapshotSharedLister().NodeInfos()``).

    ``gpusched.cache.Snapshot`` implements it; the scheduler brings it up to date at the start
    of every scheduling cycle, so it is what Filter and Score see. Read it only in the
    scheduling cycle (a binding cycle runs while later cycles update it), and never mutate it.
    """

    def node_infos(self) -> list[NodeInfo]:
        """Every node, in the cache's order. O(1): the list itself, not a copy."""
        ...

    def get(self, name: str) -> NodeInfo | None:
        """The node info of node ``name``, or ``None``. O(1)."""
        ...

    @property
    def num_nodes(self) -> int: ...

    @property
    def membership(self) -> int:
        """A version that changes whenever nodes join or leave (not when they change)."""
        ...

    def changed_since(self, generation: int) -> list[NodeInfo]:
        """The node infos newer than ``generation`` (a ``NodeInfo.generation``), newest
        first; O(changed). Nodes that joined or left: compare :attr:`membership`."""
        ...


class EventRecorder(Protocol):
    """Writes Events (upstream's ``events.EventRecorder``); ``gpusched.events`` implements it.

    Best effort and non-blocking: the Event is queued and written by the recorder's task,
    under its own write budget, so a plugin may call it from any stage.
    """

    def eventf(
        self,
        regarding: Mapping[str, Any],
        event_type: str,
        reason: str,
        action: str,
        message: str,
    ) -> None:
        """An Event about ``regarding`` (a Pod, say): ``event_type`` is ``Normal`` or
        ``Warning``, ``reason`` a CamelCase word, ``action`` what was done."""


class Handle(Protocol):
    """What a plugin's factory receives: the framework's services (upstream's ``Handle``).

    Keep the handle and read its services when needed: the scheduler wires them before it
    builds the frameworks, but a framework built on its own (tests, ``gpusched config check``)
    has no API client, snapshot or recorder, and reading those raises ``RuntimeError``.
    """

    @property
    def profile_name(self) -> str: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def kube(self) -> Kube:
        """The API client, for the binding cycle's plugins (PreBind, Bind, PostBind)."""
        ...

    @property
    def node_lister(self) -> NodeLister:
        """The scheduling cycle's snapshot of the nodes (read it in the scheduling cycle)."""
        ...

    @property
    def events(self) -> EventRecorder:
        """Writes Events (best effort, never blocks)."""
        ...

    @property
    def gpu_classes(self) -> Mapping[str, GPUClass]:
        """The cluster's valid ``GPUClass`` objects by name, kept current by the scheduler's
        policy informers (a live read-only view; read it in the scheduling cycle). Empty in
        a framework built without a scheduler."""
        ...

    def get_waiting_pod(self, uid: str) -> WaitingPod | None:
        """The pod waiting at Permit with this uid, if any."""
        ...

    def iterate_waiting_pods(self) -> Iterator[WaitingPod]:
        """Every pod waiting at Permit (a snapshot: allowing or rejecting while iterating is
        fine)."""
        ...

    def reject_waiting_pod(self, uid: str, plugin: str, message: str) -> bool:
        """Reject a waiting pod; False if no such pod is waiting (or it was decided)."""
        ...

    def record_preemption(self, victims: int | None) -> None:
        """Count a preemption attempt (``scheduler_preemption_attempts_total``) and, when it
        chose victims, their number (``scheduler_preemption_victims``), as upstream's
        DefaultPreemption does. A no-op in a framework built without metrics."""
        ...

    def group_key(self, pod: Pod) -> str | None:
        """The key of the pod group (gang) the pod belongs to, from the profile's
        :class:`PodGroupPlugin` (``None``: no group, or no such plugin). Cheap: a label or
        annotation read. Preemption uses it to treat a running gang as one victim."""
        ...

    @property
    def claim_specs(self) -> ClaimSpecsPlugin | None:
        """The profile's :class:`ClaimSpecsPlugin` (``None``: no such plugin, so request readers
        do not read GpuClaims). Pass it to ``read_gpu_request(pod, handle.claim_specs)``."""
        ...

    def activate(self, uids: Iterable[str]) -> None:
        """Move these pending pods to the active queue now, through PreEnqueue again
        (upstream's ``Activate``): a gang's members once the last one is created, or its
        object appears. Pods not queued are left; a framework without a scheduler ignores it.
        O(log n) each."""
        ...


# -- the plugins -----------------------------------------------------------------------------

_SYNC_METHODS = (
    "claim_spec",
    "group_key",
    "pod_group",
    "on_pod",
    "informers",
    "pre_enqueue",
    "sort_key",
    "pre_filter",
    "filter",
    "post_filter",
    "pre_score",
    "score",
    "normalize_score",
    "reserve",
    "unreserve",
    "permit",
    "events_to_register",
)
_ASYNC_METHODS = ("pre_bind", "bind", "post_bind", "background")


def _check_stage_kinds(cls: type) -> None:
    for name in _SYNC_METHODS:
        fn = cls.__dict__.get(name)
        if fn is not None and inspect.iscoroutinefunction(fn):
            raise TypeError(
                f"{cls.__qualname__}.{name} must be a plain 'def', not 'async def': the "
                f"scheduling cycle is serial and in memory and never awaits"
            )
    for name in _ASYNC_METHODS:
        fn = cls.__dict__.get(name)
        if fn is not None and not inspect.iscoroutinefunction(fn):
            raise TypeError(
                f"{cls.__qualname__}.{name} must be an 'async def': it runs in the binding "
                f"cycle, which awaits the API server"
            )


class Plugin(abc.ABC):
    """The base of every plugin (upstream's ``Plugin``).

    ``NAME`` is the name the configuration enables it by. ``ARGS`` is an optional pydantic model
    for its ``pluginConfig`` args: the framework validates the args against it (reporting errors
    with their path in the configuration) and passes the model instance to ``new``. Without
    ``ARGS`` the factory receives the args as a plain dict (empty when none are configured).

    The default factory is ``cls()``; override ``new`` to use the args or the handle.
    """

    NAME: ClassVar[str]
    ARGS: ClassVar[type[BaseModel] | None] = None
    UNSIGNED_BY_DESIGN: ClassVar[str] = ""
    """For a plugin that decides where pods fit and is deliberately not a ``SignPlugin`` (its
    verdict differs for pods that look alike, e.g. a random score): why, in a few words. The
    start-up warning about the profile losing batching then gives this reason instead of
    asking for ``sign_pod``."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _check_stage_kinds(cls)

    @classmethod
    def new(cls, args: Any, handle: Handle) -> Self:
        """Make the plugin from ``args`` (an ``ARGS`` instance, or a dict) and the framework."""
        return cls()

    @property
    def name(self) -> str:
        return self.NAME

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.NAME!r}>"


class PreEnqueuePlugin(Plugin):
    """Gates a pod before it enters the active queue (upstream's ``PreEnqueuePlugin``)."""

    @abc.abstractmethod
    def pre_enqueue(self, pod: Pod) -> Status:
        """Called before the pod is added to the active or backoff queue.

        Any status but Success keeps the pod out (in the unschedulable pool) until an event
        this plugin registered for requeues it. Must be cheap: it runs in event handlers, for
        every pod; no API calls.
        """


class QueueSortPlugin(Plugin):
    """Orders the active queue. Exactly one is enabled per profile, and all profiles share it."""

    @abc.abstractmethod
    def sort_key(self, info: QueuedPodInfo) -> tuple[Any, ...]:
        """The pod's sort key: the queue pops the smallest first.

        A key function rather than upstream's ``Less(a, b)`` (the queue orders pods by their
        keys): ``(-priority, info.timestamp)`` gives upstream's PrioritySort. It is called once
        when the pod is queued; it must depend only on the pod and its queue info, and the same
        pod must always get the same key while queued.
        """


class PreFilterPlugin(Plugin):
    """Runs once per cycle before Filter: checks the pod and precomputes for Filter."""

    @abc.abstractmethod
    def pre_filter(self, state: CycleState, pod: Pod) -> tuple[PreFilterResult | None, Status]:
        """Called at the beginning of the scheduling cycle.

        Return Success to go on, writing to ``state`` what Filter will read. A
        ``PreFilterResult`` restricts the nodes considered downstream (useful when the set can
        be found in O(1), a gang pinned to one NVLink domain say); nodes left out count as
        UnschedulableAndUnresolvable. Unschedulable/Unresolvable rejects the pod for this cycle
        (with Unschedulable, the remaining PreFilter plugins still run, so that preemption
        sees their state). Skip means "nothing to check for this pod": this plugin's Filter is
        not called this cycle, and the returned result is ignored.
        """


class FilterPlugin(Plugin):
    """Decides whether the pod can run on one node. The hot path: called per node per cycle."""

    @abc.abstractmethod
    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        """Return ``SUCCESS`` if the pod fits on this node, else Unschedulable/Unresolvable.

        Look only at ``node_info`` (not the cache): during preemption it may be a copy with
        some pods removed. Error aborts the cycle and sends the pod to backoff. Never awaits;
        read what PreFilter computed from ``state`` instead of recomputing it per node.
        """


class PostFilterPlugin(Plugin):
    """Runs when no node passed Filter: preemption and its like."""

    @abc.abstractmethod
    def post_filter(
        self, state: CycleState, pod: Pod, statuses: Mapping[str, Status]
    ) -> tuple[PostFilterResult | None, Status]:
        """Called when the cycle failed at PreFilter or Filter with Unschedulable/Unresolvable.

        ``statuses`` maps each node's name to the status it got (nodes with
        UnschedulableAndUnresolvable are in it: ignoring them is the plugin's job). Return
        Success (optionally with a ``PostFilterResult`` nominating a node) if the pod can be made
        schedulable, Unschedulable if it cannot, Error on internal failure. The first Success
        or Unresolvable stops the remaining PostFilter plugins. The result is returned beside
        the status, as upstream does, because preemption must say which node it made room on.
        """


class PreScorePlugin(Plugin):
    """Runs once per cycle before Score, with the nodes that passed Filter."""

    @abc.abstractmethod
    def pre_score(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        """Precompute for Score. Any status but Success or Skip rejects the pod (as an error);
        Skip means this plugin's Score is not called this cycle."""


class ScorePlugin(Plugin):
    """Ranks the nodes that passed Filter. The hot path: called per feasible node per cycle."""

    @abc.abstractmethod
    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> tuple[int, Status]:
        """Return ``(score, SUCCESS)``; higher is better.

        Without ``ScoreExtensions`` the score must lie in ``[MIN_NODE_SCORE, MAX_NODE_SCORE]``
        (0..100); with them, any int, as long as ``normalize_score`` maps it into that range.
        Any status but Success fails the cycle as an error. Never awaits.
        """


class ScoreExtensions(abc.ABC):
    """Mixin for a ``ScorePlugin`` whose raw scores need rescaling to 0..100."""

    @abc.abstractmethod
    def normalize_score(self, state: CycleState, pod: Pod, scores: list[NodeScore]) -> Status:
        """Called once per cycle with this plugin's score for every node; rewrite
        ``scores[i].score`` in place into ``[MIN_NODE_SCORE, MAX_NODE_SCORE]``."""


class SignPlugin(abc.ABC):
    """Mixin: lets pods that look alike to this plugin share Filter and Score results.

    gpusched's counterpart of upstream's ``SignPlugin`` (KEP-5598, opportunistic batching).
    A pod is *signed* when every PreFilter, Filter and Score plugin of its profile is a
    ``SignPlugin`` and none returns ``None``; pods with equal signatures form an equivalence
    class, and the scheduler keeps one ranking of all nodes per class, re-evaluating only the
    nodes that changed since the class was last scheduled (:mod:`gpusched.equivalence`).
    """

    @abc.abstractmethod
    def sign_pod(self, pod: Pod) -> Hashable | None:
        """What of the pod this plugin's PreFilter, Filter and Score read, as a hashable value
        (equal for pods this plugin treats alike), or ``None`` when the pod cannot be batched.

        The contract, for two pods whose fragments are equal: on the same node info (same
        generation) Filter returns equal statuses and Score equal values; PreFilter writes
        equal state and restricts nothing (``PreFilterResult.node_names`` is ``None``); and
        a node's score does not depend on the other nodes of the cycle (PreScore reads the
        pod only). A plugin with ``ScoreExtensions`` may sign only if normalising scores that
        are all equal leaves them all equal (as ``default_normalize_score`` does); the batched
        path checks that the raw scores of such plugins are equal on every feasible node and
        falls back to a full cycle when they are not. Must be cheap (it runs once per cycle)
        and never raise: return ``None`` for a pod it cannot read.
        """


class ReservePlugin(Plugin):
    """Claims (and releases) what the chosen node gives the pod: GPUs, device Leases."""

    @abc.abstractmethod
    def reserve(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        """Called once the cycle chose ``node_name``, before the scheduler assumes the pod there.

        Update this plugin's state; expected to return Success or Error. Any other status
        rejects the pod, and then ``unreserve`` is called for *every* reserve plugin. The
        plugin that allocates devices writes :data:`DEVICE_ASSIGNMENT` here (the scheduler
        assumes the pod with those devices right after, which is why gpusched runs Reserve
        before assuming, where upstream assumes first). In memory only: no API calls here
        (they belong in PreBind).
        """

    @abc.abstractmethod
    def unreserve(self, state: CycleState, pod: Pod, node_name: str) -> None:
        """Undo ``reserve``: when a later Reserve, Permit, PreBind or Bind failed or the pod was
        rejected while waiting. Must be idempotent and may be called even if ``reserve`` was not
        (or failed) for this pod. Plugins are unreserved in reverse order. Must not raise: an
        exception is logged and the remaining plugins are still unreserved."""


class PermitPlugin(Plugin):
    """The last word before binding: allow, reject, or make the pod wait (gangs)."""

    @abc.abstractmethod
    def permit(self, state: CycleState, pod: Pod, node_name: str) -> tuple[Status, float]:
        """Return ``(SUCCESS, 0)``, a rejection, or ``(Status.wait(), timeout_seconds)``.

        A waiting pod is held (its binding cycle waits) until every plugin that asked it to
        wait allows it (``handle.get_waiting_pod(uid).allow(NAME)``), one rejects it, or a
        plugin's timeout passes (a rejection). The framework waits only after all Permit
        plugins ran and none rejected. Timeouts are capped at 15 minutes, as upstream.
        """


class PreBindPlugin(Plugin):
    """Prepares the binding (upstream: volumes, claims). The device reservation is already in
    the node's Lease when PreBind runs: the scheduler's binding cycle writes it first."""

    @abc.abstractmethod
    async def pre_bind(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        """Called in the binding cycle once Permit allowed the pod. Any status but Success
        rejects the pod: it is unreserved and not bound."""


class BindPlugin(Plugin):
    """Binds the pod (POSTs the ``pods/binding`` subresource)."""

    @abc.abstractmethod
    async def bind(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        """Called after all PreBind plugins succeeded, in the configured order. Return Skip if
        this plugin does not handle this pod: the next bind plugin is tried. The first one
        that does not Skip decides: Success, or a failure (the pod is unreserved)."""


class PostBindPlugin(Plugin):
    """Informational: runs after a successful bind (clean-up, events)."""

    @abc.abstractmethod
    async def post_bind(self, state: CycleState, pod: Pod, node_name: str) -> None:
        """Called after the pod is bound. Cannot fail the pod; an exception is logged."""


class EnqueueExtensions(abc.ABC):
    """Mixin: the cluster events that may make a pod this plugin rejected schedulable again.

    Only read from plugins that can reject a pod (PreEnqueue, PreFilter, Filter, Reserve,
    Permit). Such a plugin without it is registered for every event (less efficient: every
    change requeues its rejected pods). An empty list means its pods are never requeued by
    events: a pod it rejected waits for the 5-minute flush, a pod it gated (PreEnqueue) for an
    update to the pod itself (SchedulingGates' and PrioritySort's case).
    """

    @abc.abstractmethod
    def events_to_register(self) -> list[ClusterEventWithHint]:
        """Called once at start-up; the result must not depend on cluster state."""


# -- mixins the framework detects once on every enabled plugin -------------------------------


class ClaimSpecsPlugin(abc.ABC):
    """Mixin: the plugin knows the cluster's GpuClaims (``gpu.scheduling/v1``). The request
    readers read a claim pod's GPU request from it (``Handle.claim_specs``), so every plugin
    that reads requests (GPUFit, GPUCost, VRAMHeadroom, ...) sees the claim's fields. At most
    one per profile."""

    @abc.abstractmethod
    def claim_spec(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The spec of GpuClaim ``namespace/name`` as last seen, or ``None``. O(1), never
        awaits (called in the scheduling cycle)."""


class PodGroupPlugin(abc.ABC):
    """Mixin: the plugin knows gangs. The scheduler asks it, for each popped pod, whether the
    pod is a member of a group to plan whole (``pod_group``), and shards pods among replicas
    by ``group_key`` so that one replica plans a whole gang. At most one per profile."""

    @abc.abstractmethod
    def group_key(self, pod: Pod) -> str | None:
        """The group's key (``"<namespace>/<name>"``) or ``None``; from the pod alone (labels,
        annotations, spec), so it never changes while the pod is pending. O(1)."""

    @abc.abstractmethod
    def pod_group(self, pod: Pod) -> PodGroup | None:
        """The group to plan now with the popped ``pod``, or ``None`` to schedule the pod on its
        own (no group, or its group already runs with ``min_member`` members: more members
        join one by one). Called in the scheduling cycle: never awaits; may read the
        snapshot (``handle.node_lister``) to order the topology domains."""


InformerHandler: TypeAlias = Callable[[str, dict[str, Any], "dict[str, Any] | None"], None]
"""``handler(kind, obj, old)``: ``kind`` is ``ADDED``, ``MODIFIED`` or ``DELETED``; ``old`` is
the informer's previous copy (``None`` for ADDED)."""


@dataclass(frozen=True, slots=True)
class Informer:
    """A list-and-watch the scheduler runs for a plugin (``InformerPlugin``), before it is
    ready: ``group``/``version``/``plural`` as in the API path (``""`` for the core group),
    ``namespace=None`` for all namespaces. ``optional``: a missing kind (CRD not installed, or
    no permission) is logged once and retried, and does not hold up readiness."""

    group: str
    version: str
    plural: str
    handler: InformerHandler
    optional: bool = True
    namespace: str | None = None
    label_selector: str | None = None


class GroupPostFilterPlugin(abc.ABC):
    """Mixin for a PostFilter plugin that can make room for a whole gang (preemption).

    Called by the scheduler when a gang's cycle could not place every pending member.
    All or nothing: it either starts making room for every member and nominates each, or
    does nothing."""

    @abc.abstractmethod
    def post_filter_group(
        self, group: PodGroup, members: Sequence[Pod]
    ) -> tuple[Mapping[str, str] | None, Status]:
        """``(nominations, status)``: the node nominated for every member (uid -> node), or
        ``None`` (with why not in ``status``). Never awaits; evictions run in the background."""


class InformerPlugin(abc.ABC):
    """Mixin: objects the plugin keeps in memory (PodGroups, PodDisruptionBudgets, ...). The
    handlers run on the event loop between scheduling cycles, so the scheduling cycle reads a
    consistent state without locks."""

    @abc.abstractmethod
    def informers(self) -> Sequence[Informer]:
        """Called once at start-up."""


class PodEventHandler(abc.ABC):
    """Mixin: sees every pod event the scheduler's pod informer sees (all pods, any scheduler),
    after the scheduler handled it. Must be cheap and must not raise."""

    @abc.abstractmethod
    def on_pod(self, kind: str, pod: Pod, old: Pod | None) -> None:
        """``kind`` is ``ADDED``, ``MODIFIED`` or ``DELETED``."""


class BackgroundPlugin(abc.ABC):
    """Mixin: a task the scheduler runs while it schedules (status writers, timers), started
    once it is ready and cancelled when it stops."""

    @abc.abstractmethod
    async def background(self) -> None:
        """Runs until cancelled; an exception is logged and the task is not restarted."""
