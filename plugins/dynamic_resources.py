"""DynamicResources: gpusched allocates a pod's ResourceClaims (``resource.k8s.io/v1``), as
kube-scheduler's plugin of that name does, over :class:`gpusched.dra.manager.DraManager`.

- **PreFilter**: pods without ``spec.resourceClaims`` Skip. The pod's claims are resolved
  (direct names; templates through ``status.resourceClaimStatuses``); a claim missing, being
  deleted, full (256 consumers) or being allocated for another pod keeps the pod pending with
  upstream's message, and the pod is activated when the claim changes. A cluster that does not
  serve ``resource.k8s.io/v1`` keeps such pods pending saying so; the plugin never fails.
- **Filter** (never awaits): a claim allocated already must select the node (its
  ``nodeSelector``: "resourceclaim not available on the node"); the others are allocated on
  the node's ResourceSlices by :func:`gpusched.dra.allocate` (CEL, counts, ``All``,
  ``matchAttribute``, ``firstAvailable``, NVLink-best sets from the node's inventory).
- **Reserve/Unreserve**: the allocation becomes in flight (its devices taken for later
  cycles) and undone on Unreserve.
- **PreBind**: the claim writes (finalizer, then status with allocation and ``reservedFor``,
  conditional on resourceVersion); the loser of a race fails PreBind and is retried.
- **Informers** (optional) on claims, slices and classes (and templates with
  ``createClaims``); pod events and a background task release claims of pods that are gone.

**Composition with gpusched's device ledger** (the GPUs ``nvidia.com/gpu``, shared and MIG pods
hold, by index and UUID; NVIDIA's DRA driver names each device's ``uuid``):

(a) *ledger -> claims*: Filter's allocator treats a DRA device as taken when the node's
    ledger shows a pod holding that GPU (or MIG device, or its parent GPU): the snapshot's
    ``NodeLedger.held_by_pods``; a preemption what-if sees the victims' GPUs free.
(b) *claims -> ledger*: every device in any claim's ``status.allocation`` (kube-scheduler's
    allocations too) is marked in the cache's ledger (``SchedulerCache.set_claimed``, through
    the scheduler's :class:`~gpusched.cache.cache.ClaimedDevicesSource` seam): GPUFit never
    counts it free; an unmarked device re-queues pods waiting for GPUs.
(c) *one booking per pod*: Reserve writes the GPUs the pod's new allocations hold as
    :data:`~gpusched.framework.DEVICE_ASSIGNMENT` (merged with GPUFit's for a pod asking both;
    an overlap is refused), so the scheduler assumes the pod with them (the ledger books them
    at once, before the claim's write is seen), writes them into the node's reservation Lease
    in the binding cycle, and the binder records them as ``gpusched.io/gpu-ids``/``gpu-uuids``
    annotations. Two replicas, one placing claim pods and one ``nvidia.com/gpu`` pods, meet in
    the Lease (the cross-kind atomic step); two placing claims meet in the claim's status
    write (the claim-vs-claim one). MIG devices are written as a non-exclusive Lease entry
    (``SHARED_CLAIM``), as GPUFit does. A pod that shares a claim allocated already gets no
    assignment: the claim's mark (b) holds its devices.

Cost for a pod without claims: a dict lookup at PreFilter, SignPod and in the pod handler.
Claim pods sign by their claims (:meth:`DynamicResources.sign_pod`), so equivalence classes
serve them: every change Filter reads of a node moves the node's generation (``set_claimed``'s
version). Filter costs one allocator call per node with slices (about 0.2 ms on an 8-GPU node,
CEL verdicts cached per device version), and none on a node nothing changed on since a pod
whose pending claims had equal specs was filtered there (the memo).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Self

from pydantic import Field

from gpusched.annotations import Assignment
from gpusched.cache import ClaimedSetter, NodeInfo
from gpusched.dra import Allocation, Unallocatable
from gpusched.dra.manager import GROUP, VERSION, DraManager, Key, PodClaims, pod_claim_entries
from gpusched.framework import (
    DEVICE_ASSIGNMENT,
    SHARED_CLAIM,
    SUCCESS,
    ActionType,
    BackgroundPlugin,
    ClusterEvent,
    ClusterEventWithHint,
    CycleState,
    EnqueueExtensions,
    FilterPlugin,
    Handle,
    Informer,
    InformerPlugin,
    PluginArgs,
    Pod,
    PodEventHandler,
    PreBindPlugin,
    PreEnqueuePlugin,
    PreFilterPlugin,
    PreFilterResult,
    QueueingHint,
    ReservePlugin,
    SignPlugin,
    StateKey,
    Status,
)
from gpusched.kube.client import resource_path
from gpusched.kube.errors import APIError, APINotFound
from gpusched.node_selector import NodeSelector

__all__ = ["NAME", "DynamicResources", "DynamicResourcesArgs"]

log = logging.getLogger(__name__)

NAME: Final = "DynamicResources"
ERR_NOT_AVAILABLE: Final = "resourceclaim not available on the node"
ERR_NO_SLICES: Final = "cannot allocate all claims: the node publishes no ResourceSlices"
_RETRY_SECONDS: Final = 1.0
_PROBE_SECONDS: Final = 60.0
"""How often a cluster that does not serve ``resource.k8s.io/v1`` is asked again."""


class DynamicResourcesArgs(PluginArgs):
    """``pluginConfig`` args of DynamicResources."""

    create_claims: bool = False
    """Create the ResourceClaims of pods' ``resourceClaimTemplateName`` entries and record
    them in the pod's ``status.resourceClaimStatuses``, for a cluster where no
    kube-controller-manager does (it does in any real cluster: leave it off there). Needs
    ``create`` on resourceclaims and ``patch`` on pods/status. Default off."""
    allow_admin_access: bool = Field(default=True)
    """Allocate requests with ``adminAccess: true``. The API server admits such a claim only
    in a namespace labelled ``resource.kubernetes.io/admin-access`` (DRAAdminAccess, beta and
    on since 1.34), so kube-scheduler allocates whatever was admitted; set ``false`` to refuse
    them here too."""


@dataclass(slots=True)
class _State:
    claims: PodClaims
    selectors: tuple[NodeSelector, ...]
    specs: tuple[str, ...]
    """The pending claims' specs (JSON): with the node's generation and the manager's
    version, the key of the allocation memo."""
    allocations: dict[str, Allocation] = field(default_factory=dict)
    """Node -> what Filter allocated there (Reserve takes the chosen node's)."""
    wrote: bool = False
    chosen: dict[Key, Mapping[str, Any]] = field(default_factory=dict)
    """Claim -> the allocation Reserve took for it (PreBind writes exactly that)."""

    def clone(self) -> _State:
        return _State(
            self.claims,
            self.selectors,
            self.specs,
            dict(self.allocations),
            self.wrote,
            dict(self.chosen),
        )


_STATE: Final = StateKey[_State](NAME)
_TERMINAL: Final = ("Succeeded", "Failed")


def _after_pod_update(pod: Pod, old: Any, new: Any) -> QueueingHint:
    """A pod that finished frees the GPUs it held (a bound pod's other updates do not)."""

    def phase(obj: Any) -> Any:
        return ((obj or {}).get("status") or {}).get("phase")

    if phase(new) in _TERMINAL and phase(old) not in _TERMINAL:
        return QueueingHint.QUEUE
    return QueueingHint.QUEUE_SKIP


class DynamicResources(
    PreEnqueuePlugin,
    PreFilterPlugin,
    FilterPlugin,
    ReservePlugin,
    PreBindPlugin,
    EnqueueExtensions,
    SignPlugin,
    InformerPlugin,
    PodEventHandler,
    BackgroundPlugin,
):
    """ResourceClaims allocated by gpusched (module docstring)."""

    NAME = NAME
    ARGS = DynamicResourcesArgs

    def __init__(self, handle: Handle, args: DynamicResourcesArgs | None = None) -> None:
        args = args or DynamicResourcesArgs()
        self.handle = handle
        self.manager = DraManager(
            create_claims=args.create_claims, allow_admin_access=args.allow_admin_access
        )
        self._set_claimed: ClaimedSetter | None = None
        self._memo: dict[str, tuple[Hashable, Allocation | Unallocatable]] = {}
        """Node -> the last allocation Filter computed there and its key: pods whose pending
        claims have equal specs reuse it on a node nothing changed on (the equivalence
        classes' idea, for claim pods)."""

    @classmethod
    def new(cls, args: Any, handle: Handle) -> Self:
        return cls(handle, args if isinstance(args, DynamicResourcesArgs) else None)

    def attach_cache(self, set_claimed: ClaimedSetter) -> None:
        """The scheduler's seam to the ledger (module docstring, (b))."""
        self._set_claimed = set_claimed
        self._sync_marks()

    # -- scheduling cycle ----------------------------------------------------------------

    def sign_pod(self, pod: Pod) -> Hashable | None:
        """Pods without claims sign alike. A claim pod signs by what Filter reads of it: its
        pending claims' specs and its allocated claims' node selectors, with the manager's
        global version (classes, shared slices); what Filter reads of a node moves the node's
        generation (its slices, allocated and in-flight devices: ``set_claimed``'s version).
        Unresolved claims: ``None`` (PreFilter turned the pod away anyway)."""
        if not pod_claim_entries(pod):
            return (NAME,)
        resolved = self.manager.resolve(pod)
        if not isinstance(resolved, PodClaims):
            return None
        return (
            NAME,
            self.manager.version_of("")[0],
            tuple(json.dumps(c.claim.get("spec"), sort_keys=True) for c in resolved.pending),
            tuple(
                json.dumps((c.allocation or {}).get("nodeSelector"), sort_keys=True)
                for c in resolved.allocated
            ),
        )

    def pre_enqueue(self, pod: Pod) -> Status:
        """Hold back a pod whose template claims are not created yet (upstream's PreEnqueue):
        quietly while they are on their way, the update naming them lets the pod in."""
        if not pod_claim_entries(pod):
            return SUCCESS
        waiting = self.manager.claims_not_created(pod)
        if waiting is None:
            return SUCCESS
        message, quiet = waiting
        if quiet:
            return Status.waiting(message, plugin=NAME)
        return Status.unresolvable(message, plugin=NAME)

    def pre_filter(self, state: CycleState, pod: Pod) -> tuple[PreFilterResult | None, Status]:
        if not pod_claim_entries(pod):
            return None, Status.skip()
        resolved = self.manager.resolve(pod)
        if not isinstance(resolved, PodClaims):
            if resolved.unresolvable:
                return None, Status.unresolvable(resolved.message, plugin=NAME)
            return None, Status.unschedulable(resolved.message, plugin=NAME)
        selectors = tuple(
            NodeSelector.compile(selector)
            for c in resolved.allocated
            if (selector := (c.allocation or {}).get("nodeSelector")) is not None
        )
        specs = tuple(json.dumps(c.claim.get("spec"), sort_keys=True) for c in resolved.pending)
        state.write(_STATE, _State(resolved, selectors, specs))
        if resolved.pending:  # activated when devices may free up (Filter may be skipped:
            self.manager.no_devices(pod)  # an equivalence class answers for the nodes)
        return None, SUCCESS

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        data = state.get(_STATE)
        if data is None:
            return SUCCESS
        for selector in data.selectors:
            if not selector.matches(node_info.labels, node_info.name):
                return Status.unresolvable(ERR_NOT_AVAILABLE, plugin=NAME)
        if not data.claims.pending:
            return SUCCESS
        if not self.manager.slices_for(node_info.name):  # the common case: O(1), no allocator
            self.manager.no_devices(pod)
            return Status.unschedulable(ERR_NO_SLICES, plugin=NAME)
        key = (node_info.generation, self.manager.version_of(node_info.name), data.specs)
        memo = self._memo.get(node_info.name)
        if memo is not None and memo[0] == key:
            result = memo[1]
        else:
            result = self.manager.allocate(
                data.claims.pending,
                node_info.name,
                held_by_pods=node_info.ledger.held_by_pods,
                inventory=node_info.inventory,
                labels=node_info.labels,
            )
            self._memo[node_info.name] = (key, result)
        if isinstance(result, Unallocatable):
            if result.error:
                return Status.unresolvable(result.reason, plugin=NAME)
            self.manager.no_devices(pod)
            return Status.unschedulable(result.reason, plugin=NAME)
        data.allocations[node_info.name] = result
        return SUCCESS

    def events_to_register(self) -> list[ClusterEventWithHint]:
        # Claims, slices and classes come through this plugin's informers, which activate
        # the pods they may help (handle.activate); devices freed by pods and new nodes
        # through the queue's own events.
        return [
            ClusterEventWithHint(ClusterEvent("Pod", ActionType.DELETE)),
            ClusterEventWithHint(ClusterEvent("Pod", ActionType.UPDATE), _after_pod_update),
            ClusterEventWithHint(ClusterEvent("Node", ActionType.ADD | ActionType.UPDATE)),
        ]

    def reserve(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        data = state.get(_STATE)
        if data is None:
            return SUCCESS
        chosen: dict[Key, Mapping[str, Any]] = {}
        if data.claims.pending:
            result = data.allocations.get(node_name)
            if result is None:
                return Status.error(
                    f"no allocation for node {node_name!r}: DynamicResources' Filter did not "
                    "pass it this cycle",
                    plugin=NAME,
                )
            chosen = {
                c.key: a for c, a in zip(data.claims.pending, result.allocations, strict=True)
            }
        why = self._assign(state, data, node_name, chosen)
        if why is not None:
            return Status.unschedulable(why, plugin=NAME)
        self.manager.reserve(pod, node_name, chosen)
        data.chosen = dict(chosen)
        self._sync_marks()  # the node's version moved: cached verdicts there are stale
        return SUCCESS

    def _assign(
        self, state: CycleState, data: _State, node_name: str, chosen: Mapping[Key, Any]
    ) -> str | None:
        """Write the GPUs of the new allocations as DEVICE_ASSIGNMENT (module docstring,
        (c)); why not, when they overlap what another plugin assigned."""
        try:
            info = self.handle.node_lister.get(node_name)
        except RuntimeError:  # a framework built without a scheduler
            info = None
        if info is None or not chosen:
            return None
        ids: list[int] = []
        uuids: list[str] = []
        vram: list[int] = []
        mig = False
        for allocation in chosen.values():
            for result in (allocation.get("devices") or {}).get("results") or ():
                device = (str(result["driver"]), str(result["pool"]), str(result["device"]))
                name, is_mig = self.manager.device(device)
                found = info.ledger.locate(name) if name is not None else None
                if found is None:
                    continue  # not a GPU this node's ledger knows
                ids.append(found[0])
                uuids.append(found[1])
                vram.append(found[2])
                mig = mig or is_mig
        if not ids:
            return None
        before = state.get(DEVICE_ASSIGNMENT)
        if before is not None and before.gpu_ids:
            if set(before.gpu_uuids or ()) & set(uuids) or (
                not mig and set(before.gpu_ids) & set(ids)
            ):
                return (
                    "the GPUs chosen for the pod's nvidia.com/gpu request and for its "
                    "ResourceClaims overlap on this node"
                )
            same = bool(before.gpu_uuids) == all(uuids)
            ids = [*before.gpu_ids, *ids]
            uuids = [*before.gpu_uuids, *uuids] if same else []
            vram = [*before.vram_mib, *vram]
        state.write(
            DEVICE_ASSIGNMENT,
            Assignment(tuple(ids), tuple(uuids) if all(uuids) else (), tuple(vram), ""),
        )
        if mig:
            state.write(SHARED_CLAIM, True)
        data.wrote = True
        return None

    def unreserve(self, state: CycleState, pod: Pod, node_name: str) -> None:
        data = state.get(_STATE)
        if data is not None and data.wrote:
            state.delete(DEVICE_ASSIGNMENT)
            state.delete(SHARED_CLAIM)
            data.wrote = False
        self._activate(self.manager.unreserve(pod))
        self._sync_marks()

    # -- binding cycle -------------------------------------------------------------------

    async def pre_bind(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        data = state.get(_STATE)
        if data is None:
            return SUCCESS
        why = await self.manager.bind(self.handle.kube, pod, node_name, data.chosen)
        self._sync_marks()
        return SUCCESS if why is None else Status.unschedulable(why, plugin=NAME)

    # -- informers, pod events, background ----------------------------------------------

    def informers(self) -> Sequence[Informer]:
        kinds = [
            ("resourceclaims", self.manager.on_claim),
            ("resourceslices", self.manager.on_slice),
            ("deviceclasses", self.manager.on_class),
        ]
        if self.manager.create_claims:
            kinds.append(("resourceclaimtemplates", self.manager.on_template))
        return [
            Informer(GROUP, VERSION, plural, self._handler(handler)) for plural, handler in kinds
        ]

    def _handler(self, handler: Any) -> Any:
        def handle(kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
            self.manager.served = True
            self._activate(handler(kind, obj, old))
            self._sync_marks()

        return handle

    def on_pod(self, kind: str, pod: Pod, old: Pod | None) -> None:
        self._activate(self.manager.on_pod(kind, pod, old))

    def _activate(self, uids: list[str]) -> None:
        if uids:
            self.handle.activate(uids)

    def _sync_marks(self) -> None:
        if self._set_claimed is None:
            return
        for node in sorted(self.manager.take_dirty_nodes()):
            self._set_claimed(node, self.manager.claimed_on(node), self.manager.version_of(node)[1])

    async def _probe(self) -> None:
        """Whether the API server serves ``resource.k8s.io/v1`` (a list of DeviceClasses)."""
        try:
            await self.handle.kube.get(resource_path(GROUP, VERSION, "deviceclasses"))
        except APINotFound:
            self.manager.served = False
        except APIError:
            return  # forbidden, or away: judged by the informers' events meanwhile
        else:
            self.manager.served = True

    async def background(self) -> None:
        await self._probe()
        while True:
            if self.manager.served is False:  # nothing to release; ask again now and then
                await self.handle.clock.sleep(_PROBE_SECONDS)
                await self._probe()
                continue
            await self.manager.changed.wait()
            try:
                await self.manager.flush(self.handle.kube)
            except asyncio.CancelledError:
                raise
            except Exception:  # one bad round must not end the releases for good
                log.exception("DynamicResources: releasing claims failed")
            self._sync_marks()
            if self.manager.failed:
                await self.handle.clock.sleep(_RETRY_SECONDS)
