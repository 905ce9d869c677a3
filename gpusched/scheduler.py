"""One gpusched replica: informers, the serial scheduling cycle, and asynchronous binding cycles.

The shape is kube-scheduler's (pkg/scheduler/schedule_one.go):

- **Informers** (``gpusched.kube.reflector``) list and watch nodes, GPU inventories, all pods
  and the reservation Leases into the cache, the queue and the reservation book. Nothing is
  scheduled before all of them have synced: after a restart the state is rebuilt from the
  pods' assignment annotations and the Leases first. The GPU policies and classes go to a
  ``gpusched.gpu_policy.manager.PolicyManager``, which gives the cache each node's sharing
  limits; their CRDs are optional (not installed, or not ours to read: the defaults hold).
- **The scheduling cycle** (``schedule_one``) is serial and never awaits: pop a pod, update the
  frozen snapshot, PreFilter, then the pod's equivalence class (``gpusched.equivalence``) or
  Filter over a sample of the nodes (``percentageOfNodesToScore``) and Score; pick a node;
  Reserve (the device plugin writes the devices it chose there as ``DEVICE_ASSIGNMENT``),
  *assume* the pod in the cache with them, Permit, and start the binding cycle. O(nodes
  evaluated x plugins) per pod.
- **The binding cycle** (``_binding_cycle``) is an asyncio task per pod: wait on Permit, write
  the reservation into the node's Lease (``gpusched.reservations``, optimistic concurrency),
  PreBind, Bind (the Binding carries the decision as annotations), PostBind. It always ends
  by binding the pod or by unreserving, forgetting it and requeueing it with backoff, whatever
  is raised (a pod rejected while waiting at Permit: unschedulable); a failed Binding is
  checked against the pod first, since it may have landed (``_binding_outcome``), and its
  reservation is released only once the pod is known not to hold it. Cancelled (shutdown),
  it forgets the pod and leaves the Lease entry to expire.
- **Other active replicas** (``gpusched.replicas.Membership``): each pending pod is one live
  replica's; the others leave it out of their queue, and queue it when its replica leaves
  (``_on_shares_changed``). The node chosen is the best of this replica's share, if one fits.
- **Other replicas' reservations** (phantoms, the prune rule, releasing superseded and stale
  entries, clock skew) are kept by ``gpusched.reservation_book.ReservationBook``; this module
  only feeds it events.
- **Cluster events** reach the queue with the plugins' queueing hints (``_emit``), so an
  unschedulable pod is retried when something it waits for changed.
- **Telling users why**: a pod that fits nowhere gets a ``FailedScheduling`` Event and a
  ``PodScheduled=False`` condition with kube-scheduler's summary ("0/12 nodes are available:
  4 Insufficient nvidia.com/gpu, ..."); per-node GPU gauges follow the nodes that exist.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import random
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpusched.annotations import RESERVATION_UID, Assignment
from gpusched.cache import NodeInfo, SchedulerCache, Snapshot
from gpusched.cache.errors import CacheError
from gpusched.cache.ledger import SharingPolicy
from gpusched.clock import Clock, RealClock
from gpusched.equivalence import EquivalenceCache, Placement
from gpusched.events import EventRecorder
from gpusched.framework import (
    DEVICE_ASSIGNMENT,
    SHARED_CLAIM,
    ActionType,
    ClusterEvent,
    Code,
    CycleState,
    Framework,
    PluginRegistry,
    PodGroup,
    PreFilterResult,
    QueueingHint,
    QueueingHintFn,
    SchedulerConfiguration,
    Status,
    build_frameworks,
    default_registry,
)
from gpusched.gpu_policy.manager import PLURALS, PolicyManager
from gpusched.gpu_policy.woolyai import KIND_CLASS as WOOLY_KIND_CLASS
from gpusched.gpu_policy.woolyai import KIND_CLUSTER as WOOLY_KIND_CLUSTER
from gpusched.gpu_policy.woolyai import KIND_NODE_POLICY as WOOLY_KIND_NODE_POLICY
from gpusched.gpu_policy.woolyai import PLURALS as WOOLYAI_PLURALS
from gpusched.gpu_policy.woolyai import WOOLY_GROUP, WOOLY_VERSION
from gpusched.inventory import InventoryError, inventory_from_object
from gpusched.kube.client import Kube, resource_path
from gpusched.kube.errors import APIError, APINotFound
from gpusched.kube.reflector import Reflector
from gpusched.metrics import Metrics
from gpusched.queue import (
    ACTIVE,
    BACKOFF,
    UNSCHEDULABLE,
    QueueClosed,
    QueuedPodInfo,
    SchedulingQueue,
)
from gpusched.replicas import MEMBER_LABEL, Membership
from gpusched.reservation_book import ReservationBook, phantom_key
from gpusched.reservations import (
    NODE_LABEL,
    LeaseFormatError,
    NodeLease,
    Reservation,
    ReservationConflict,
    ReservationWriter,
    SharedGPU,
    SharedNode,
    shares_fit,
)

__all__ = ["Scheduler", "SchedulingResult"]

log = logging.getLogger(__name__)

_TERMINAL = ("Succeeded", "Failed")
_TAKEABLE = frozenset({ACTIVE, BACKOFF, UNSCHEDULABLE})
"""Where a gang's cycle may take a sibling from (``SchedulingQueue.take``)."""
_MIN_FEASIBLE_NODES_TO_FIND = 100
_MIN_FEASIBLE_NODES_PERCENTAGE = 5


@dataclass
class SchedulingResult:
    """What one scheduling cycle decided."""

    node: str | None
    assignment: Assignment | None = None
    statuses: dict[str, Status] = field(default_factory=dict)
    status: Status | None = None
    evaluated: int = 0
    feasible: int = 0


def num_feasible_nodes_to_find(all_nodes: int, percentage: int) -> int:
    """kube-scheduler's adaptive ``percentageOfNodesToScore`` (``numFeasibleNodesToFind``)."""
    if all_nodes < _MIN_FEASIBLE_NODES_TO_FIND:
        return all_nodes
    adaptive = percentage
    if adaptive <= 0:
        adaptive = max(50 - all_nodes // 125, _MIN_FEASIBLE_NODES_PERCENTAGE)
    found = all_nodes * adaptive // 100
    return max(found, _MIN_FEASIBLE_NODES_TO_FIND)


def fit_error_message(all_nodes: int, result: SchedulingResult) -> str:
    """kube-scheduler's ``FitError.Error()``: "0/N nodes are available: <counted reasons>."."""
    head = f"0/{all_nodes} nodes are available:"
    if result.status is not None and not result.statuses:
        return f"{head} {result.status.message()}."
    histogram: Counter[str] = Counter()
    for status in result.statuses.values():
        for reason in status.reasons or (status.message(),):
            histogram[reason] += 1
    reasons = sorted(f"{count} {reason}" for reason, count in histogram.items())
    return f"{head} {', '.join(reasons)}."


EVENTS = (
    "Node/Add",
    "Node/Update",
    "Pod/Update",
    "Pod/Delete",
    "GPUNodeInventory/Add",
    "GPUNodeInventory/Update",
    "GPUNodeInventory/Delete",
    "GPUClass/Add",
    "GPUClass/Update",
    "GPUClass/Delete",
)
"""The cluster events the scheduler tells its queue of. A bound pod's Update is sent only when
it finishes; a Node's Update only when what scheduling reads of it changed (not heartbeats);
an assumed pod forgotten (a failed bind, another replica's reservation gone) is a Pod/Delete.
A GPUClass event (gpusched's or WoolyAI's) is sent when a class's spec changes, not its status."""

_ACTIONS = {"Add": ActionType.ADD, "Update": ActionType.UPDATE, "Delete": ActionType.DELETE}


def event_hints(
    frameworks: Iterable[Framework],
) -> dict[str, dict[str, list[QueueingHintFn | None]]]:
    """Event -> plugin -> the queueing hints it registered for that event (``None``: always
    requeue), from every profile's enqueue extensions."""
    out: dict[str, dict[str, list[QueueingHintFn | None]]] = {}
    for fw in frameworks:
        for plugin, registrations in fw.enqueue_extensions().items():
            for event in EVENTS:
                resource, _, action = event.partition("/")
                happened = ClusterEvent(resource, _ACTIONS[action])
                for reg in registrations:
                    if reg.event.matches(happened):
                        out.setdefault(event, {}).setdefault(plugin, []).append(
                            reg.queueing_hint_fn
                        )
    return out


def _scheduling_properties(node: Mapping[str, Any]) -> tuple[Any, ...]:
    """What scheduling reads of a Node (upstream's ``nodeSchedulingPropertiesChange``): a
    change elsewhere (a heartbeat's timestamps) wakes no pod."""
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    conditions = tuple(
        (c.get("type"), c.get("status")) for c in status.get("conditions") or () if c
    )
    return (
        meta.get("labels"),
        meta.get("annotations"),
        spec.get("unschedulable"),
        spec.get("taints"),
        status.get("allocatable"),
        conditions,
    )


_NO_DEVICES = Assignment((), (), (), "")


def _key(pod: Mapping[str, Any]) -> str:
    meta = pod["metadata"]
    return f"{meta.get('namespace', '')}/{meta['name']}"


class Scheduler:
    """A scheduler replica; ``await run()`` until cancelled."""

    def __init__(
        self,
        kube: Kube,
        config: SchedulerConfiguration | None = None,
        *,
        identity: str | None = None,
        clock: Clock | None = None,
        metrics: Metrics | None = None,
        registry: PluginRegistry | None = None,
        rng: random.Random | None = None,
        reservation_gc_period: float = 30.0,
    ) -> None:
        from gpusched.framework import default_config

        self.kube = kube
        self.config = config or default_config()
        self.identity = identity or f"gpusched-{uuid.uuid4().hex[:8]}"
        # Reservation uids: random, seeded once from the OS (os.urandom per uid cost more than
        # a whole equivalence-class cycle here); never from ``rng``, which tests seed alike.
        self._ids = random.Random()
        self.clock = clock or RealClock()
        self.metrics = metrics or Metrics()
        self.rng = rng or random.Random()
        # What the plugins' Handle gives them, made before the frameworks that hand it out.
        self.snapshot = Snapshot()
        self.events = EventRecorder(
            kube,
            self.clock,
            instance=self.identity,
            on_write=self.metrics.api_write,
            metrics=self.metrics,
            qps=self.config.events.qps,
            burst=self.config.events.burst,
        )
        # GPU policies and classes (their informers below); it tells the cache node limits.
        self.policies = PolicyManager(self._set_node_policy, self.clock, event=self.events.eventf)
        self.frameworks: dict[str, Framework] = build_frameworks(
            self.config,
            registry if registry is not None else default_registry(),
            clock=self.clock,
            observer_for=self.metrics.observer,
            kube=kube,
            node_lister=self.snapshot,
            events=self.events,
            gpu_classes=self.policies.classes,
            activate=lambda uids: self.queue.activate(uids),
        )
        first = next(iter(self.frameworks.values()))
        self._hints = event_hints(self.frameworks.values())
        self.cache = SchedulerCache(self.clock)
        self.equivalence = (
            EquivalenceCache(self.rng) if self.config.opportunistic_batching else None
        )
        for fw in self.frameworks.values() if self.equivalence is not None else ():
            by_design = fw.unsigned_by_design()
            for name, why in by_design.items():
                log.warning(
                    "plugin %s never signs pods (%s): pods of profile %s are not batched into "
                    "equivalence classes (the fast path) and each takes a full Filter and Score "
                    "cycle",
                    name,
                    why,
                    fw.profile_name,
                )
            unsigned = [n for n in fw.unsigned_plugins() if n not in by_design]
            if unsigned:
                log.warning(
                    "plugin%s %s %s not a SignPlugin: pods of profile %s are not batched into "
                    "equivalence classes (the fast path) and each takes a full Filter and Score "
                    "cycle; implement sign_pod() returning what of the pod the plugin's "
                    "PreFilter, Filter and Score read (see Signing in docs/plugins.md)",
                    "s" if len(unsigned) > 1 else "",
                    ", ".join(unsigned),
                    "are" if len(unsigned) > 1 else "is",
                    fw.profile_name,
                )
        incoming: dict[tuple[str, str], Any] = {}  # the counter's children, looked up once

        def count_incoming(queue: str, event: str) -> None:
            child = incoming.get((queue, event))
            if child is None:
                child = incoming[queue, event] = self.metrics.queue_incoming.labels(
                    queue=queue, event=event
                )
            child.inc()

        self.queue = SchedulingQueue(
            self.clock,
            first.queue_sort_key,
            initial_backoff=self.config.pod_initial_backoff_seconds,
            max_backoff=self.config.pod_max_backoff_seconds,
            max_in_unschedulable=self.config.pod_max_in_unschedulable_pods_duration,
            rng=self.rng,
            event_interest={event: set(by_plugin) for event, by_plugin in self._hints.items()},
            pre_enqueue={name: fw.run_pre_enqueue for name, fw in self.frameworks.items()},
            on_gated=self._on_gated,
            on_incoming=count_incoming,
        )
        res = self.config.reservations
        self.reservations = ReservationWriter(
            kube,
            res.namespace,
            self.identity,
            lease_duration=res.lease_duration_seconds,
            now=self.clock.now,
            on_write=self.metrics.api_write,
        )
        self.book = ReservationBook(
            self.cache,
            self.reservations,
            self.clock,
            pod_named=lambda key: self.pods.items.get(key),
            forget=self._forget_assumed,
            max_clock_skew=res.max_clock_skew_seconds,
            metrics=self.metrics,
            counts=self._counts_reservations_on,
        )
        self.reservation_gc_period = reservation_gc_period
        self._gpu_series: set[str] = set()  # nodes whose GPU gauges are exported
        self._gpu_published = (-1, -1)  # the snapshot (membership, generation) last published
        # A reservation must outlive its Binding by this much, or the pod is not bound with it.
        self.bind_margin = res.lease_duration_seconds / 4
        self._binding: dict[str, asyncio.Task[None]] = {}  # pod uid -> binding task
        self._bind_concurrency = self.config.parallelism * 8
        self._bind_slots = asyncio.Semaphore(self._bind_concurrency)
        self._next_start = 0
        self.syncing = asyncio.Event()
        """Set when ``run`` starts its informers (their initial lists follow)."""
        self.synced = asyncio.Event()
        """Set once the informers have synced, before ``ready`` (the commands collect and
        freeze the garbage collector's heap then, so the pause falls before the first cycle)."""
        self.ready = asyncio.Event()
        self.scheduled = 0
        self.failed_binds = 0
        # Other active replicas: shares of the pods and nodes (gpusched.replicas).
        self.membership = Membership(
            self.identity,
            self.frameworks,
            self.clock,
            namespace=res.namespace,
            lease_duration=self.config.replicas.lease_duration_seconds,
            renew_period=self.config.replicas.renew_period_seconds,
            skew=res.max_clock_skew_seconds,
            sync_grace=self.config.replicas.sync_grace_seconds,
            on_change=self._on_shares_changed,
            on_write=self.metrics.api_write,
        )
        self._pod_handlers = [fw for fw in self.frameworks.values() if fw.has_pod_handlers()]
        self.informers = self._informers()
        self.pods = self.informers[2]

    # ------------------------------------------------------------------ informers

    def _informers(self) -> list[Reflector]:
        k = self.kube
        ns = self.config.reservations.namespace
        return [
            Reflector(k, resource_path("", "v1", "nodes"), handler=self._on_node, name="nodes"),
            Reflector(
                k,
                resource_path("gpusched.io", "v1alpha1", "gpunodeinventories"),
                handler=self._on_inventory,
                name="gpunodeinventories",
                # Without the CRD the scheduler is ready with no GPU node and lists again every
                # 30 s, rather than never ready (gpusched.preflight says what to apply).
                optional=True,
            ),
            Reflector(k, resource_path("", "v1", "pods"), handler=self._on_pod, name="pods"),
            Reflector(
                k,
                resource_path("coordination.k8s.io", "v1", "leases", ns),
                handler=self._on_lease,
                label_selector=NODE_LABEL,
                name="reservations",
            ),
            Reflector(
                k,
                resource_path("coordination.k8s.io", "v1", "leases", ns),
                handler=self.membership.on_lease,
                label_selector=MEMBER_LABEL,
                name="replicas",
            ),
            *(
                Reflector(
                    k,
                    resource_path("gpusched.io", "v1alpha1", PLURALS[kind]),
                    handler=handler,
                    name=PLURALS[kind],
                    optional=True,  # a cluster without the CRD schedules with the defaults
                )
                for kind, handler in (
                    ("GPUNodePolicy", self.policies.on_node_policy),
                    ("ClusterGPUPolicy", self.policies.on_cluster_policy),
                    ("GPUClass", self._class_handler(self.policies.on_class)),
                )
            ),
            # WoolyAI's policy objects, read as gpusched's (gpusched.gpu_policy.woolyai).
            *(
                Reflector(
                    k,
                    resource_path(WOOLY_GROUP, WOOLY_VERSION, WOOLYAI_PLURALS[kind]),
                    handler=handler,
                    name=f"{WOOLYAI_PLURALS[kind]}.{WOOLY_GROUP}",
                    optional=True,
                )
                for kind, handler in (
                    (WOOLY_KIND_NODE_POLICY, self.policies.on_woolyai_node_policy),
                    (WOOLY_KIND_CLUSTER, self.policies.on_woolyai_cluster_policy),
                    (WOOLY_KIND_CLASS, self._class_handler(self.policies.on_woolyai_class)),
                )
            ),
            # What plugins keep in memory (gang objects, PodDisruptionBudgets...).
            *(
                Reflector(
                    k,
                    resource_path(inf.group, inf.version, inf.plural, inf.namespace),
                    handler=inf.handler,
                    label_selector=inf.label_selector or "",
                    name=f"{fw.profile_name}/{inf.plural}" + (f".{inf.group}" if inf.group else ""),
                    optional=inf.optional,
                )
                for fw in self.frameworks.values()
                for inf in fw.informers()
            ),
        ]

    def _class_handler(
        self, handler: Callable[[str, dict[str, Any], dict[str, Any] | None], None]
    ) -> Callable[[str, dict[str, Any], dict[str, Any] | None], None]:
        """``handler`` (the policy manager's), then a GPUClass event for the queue when the
        class's spec changed: the pods waiting on it are tried again (GPUFit's hint). Their
        equivalence classes need no flush: a pod's signature holds its class's spec."""

        def on_class(kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
            handler(kind, obj, old)
            if kind == "DELETED":
                self._emit("GPUClass/Delete", obj, None)
            elif old is None:
                self._emit("GPUClass/Add", None, obj)
            elif old.get("spec") != obj.get("spec"):
                self._emit("GPUClass/Update", old, obj)

        return on_class

    def _on_node(self, kind: str, node: dict[str, Any], old: dict[str, Any] | None) -> None:
        name = node["metadata"]["name"]
        if kind == "DELETED":
            self.cache.remove_node(node)
            self.policies.on_node(name, None)
            self._drop_gpu_series(name)
            return
        # Limits first: the cache builds the new node's ledger once, with them.
        self.policies.on_node(name, node["metadata"].get("labels") or {})
        if kind == "ADDED":
            self.cache.add_node(node)
            self.book.on_node_added(node["metadata"]["name"])  # its Lease may have come first
            self._emit("Node/Add", None, node)
        else:
            self.cache.update_node(node)
            if old is None or _scheduling_properties(old) != _scheduling_properties(node):
                self._emit("Node/Update", old, node)  # not for heartbeats

    def _on_inventory(self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        if kind == "MODIFIED" and old is not None and old.get("spec") == obj.get("spec"):
            return  # telemetry (status) or metadata only: nothing placement reads changed
        name = obj["metadata"]["name"]
        inventory = None
        if kind != "DELETED":
            try:
                inventory = inventory_from_object(obj)
            except InventoryError as exc:
                log.warning("ignoring the GPU inventory of node %s: %s", name, exc)
        self.cache.set_inventory(name, inventory)
        self.policies.on_inventory(name, inventory.gpus if inventory is not None else None)
        event = {"ADDED": "Add", "DELETED": "Delete"}.get(kind, "Update")
        self._emit(f"GPUNodeInventory/{event}", old, obj if kind != "DELETED" else None)

    def _set_node_policy(self, name: str, policy: SharingPolicy | None) -> None:
        """The policy manager resolved new sharing limits for a node: a known node's pods
        that GPUFit rejected may fit now (or no longer), so they are told as a Node/Update."""
        self.cache.set_node_policy(name, policy)
        node = self.informers[0].items.get(name) if self.ready.is_set() else None
        if node is not None and self.cache.node_info(name) is not None:
            self._emit("Node/Update", node, node)

    def _on_lease(self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        self.book.on_lease(kind, obj)

    @property
    def leases(self) -> Mapping[str, NodeLease]:
        """The reservation Leases by node, as the informer shows them."""
        return self.book.leases

    def _shared_gpu(self, node: str, index: int) -> SharedGPU | None:
        """GPU ``index`` of ``node`` as this replica's cache has it, for the Lease's share
        check (``shares_fit``); ``None`` when the cache does not know its memory or the GPU is
        in MIG mode (its instances are never shared: no VRAM or clients to add up). Reads the
        cache's own node info, never mutating it. O(1): the holders are not copied."""
        info = self.cache.node_info(node)
        if info is None or not 0 <= index < len(info.ledger.devices):
            return None
        device = info.ledger.devices[index]
        if device.memory_mib is None or device.mig_enabled:
            return None
        policy = device.policy
        return SharedGPU(
            policy.capacity_mib(device.memory_mib),
            policy.max_clients_per_gpu,
            device.holders,
            memory_mib=device.memory_mib,
            cores_percent=policy.cores_percent,
            terms=info.ledger.share_terms,
        )

    def _shared_node(self, node: str) -> SharedNode | None:
        """``node`` as this replica's cache has it, for the Lease's per-node client check
        (``shares_fit``): its ``maxClientsPerNode`` and the pods sharing its GPUs. O(1)
        without a per-node limit, O(pods holding devices there) with one."""
        info = self.cache.node_info(node)
        if info is None:
            return None
        limit = info.ledger.policy.max_clients_per_node
        return SharedNode(limit, info.ledger.shared_pods() if limit is not None else ())

    def _counts_reservations_on(self, node: str) -> bool:
        """Whether other replicas' reservations on ``node`` are counted (ReservationBook.counts):
        alone, on every node; with other live replicas, on the nodes of this replica's shares."""
        for name in self.frameworks:
            share = self.membership.share(name)
            if share is None or share.mine(node):
                return True
        return False

    def _on_shares_changed(self) -> None:
        """The live replicas changed: queue the pending pods that are now this replica's (those
        of a replica that left; see ``schedule_one``). O(pods in the informer). Nothing while
        the informers sync: the pods are queued as they are listed."""
        if not self.synced.is_set():
            return
        self.book.recount()  # reservations on nodes that are ours now
        for pod in self.pods.items.values():
            spec = pod.get("spec") or {}
            meta = pod["metadata"]
            uid = meta["uid"]
            name = spec.get("schedulerName", "")
            if (
                spec.get("nodeName")
                or name not in self.frameworks
                or meta.get("deletionTimestamp")
                or (pod.get("status") or {}).get("phase") in _TERMINAL
                or self.queue.get(uid) is not None
                or uid in self._binding
                or self.cache.is_assumed(uid)
                or not self._takes(pod, name)
            ):
                continue
            self.queue.add(pod)  # a pod PreEnqueue holds back is reported by on_gated

    def _takes(self, pod: dict[str, Any], scheduler_name: str) -> bool:
        """Whether this replica schedules the pod now: pods are shared among the live replicas
        by uid, the members of a gang by their group's key (one replica plans a whole gang)."""
        fw = self.frameworks.get(scheduler_name)
        key = fw.group_key(pod) if fw is not None else None
        return self.membership.takes(key or pod["metadata"]["uid"], scheduler_name)

    def _on_gated(self, info: QueuedPodInfo) -> None:
        """A pod a PreEnqueue plugin holds back (or whose reason changed): tell its owner why,
        with a FailedScheduling Event and ``PodScheduled=False`` reason ``SchedulingGated``, as
        the API server does for ``spec.schedulingGates``. A pod that has such gates is left to
        the API server, which set that condition when the pod was created (upstream's scheduler
        writes nothing for it either): no Event per gated pod, and none again per restart."""
        if (info.pod.get("spec") or {}).get("schedulingGates"):
            return
        self.events.failed_scheduling(info.pod, info.error or "", reason="SchedulingGated")

    def _forget_assumed(self, pod_uid: str, *, moves_itself: bool = True) -> None:
        """Forget an assumed pod (a phantom, or a failed bind of ours) and tell the queue, as
        upstream does on a failed binding: its devices are free again (an assigned pod's
        deletion, to the plugins' queueing hints). ``moves_itself=False``: the event does not
        move the pod itself (it was just parked as unschedulable, as upstream's
        ``handleBindingCycleError`` for a rejection)."""
        assumed = self.cache.get_pod(pod_uid)
        node = self.cache.pod_node(pod_uid)
        if assumed is None or not self.cache.forget_pod(pod_uid):
            return
        spec = assumed.get("spec") or {}
        if not spec.get("nodeName"):
            assumed = {**assumed, "spec": {**spec, "nodeName": node or ""}}
        self._emit("Pod/Delete", assumed, None, skip=None if moves_itself else pod_uid)

    def _on_pod(self, kind: str, pod: dict[str, Any], old: dict[str, Any] | None) -> None:
        self._handle_pod(kind, pod, old)
        for fw in self._pod_handlers:
            fw.on_pod(kind, pod, old)

    def _handle_pod(self, kind: str, pod: dict[str, Any], old: dict[str, Any] | None) -> None:
        meta = pod["metadata"]
        spec = pod.get("spec") or {}
        uid = meta["uid"]
        phase = (pod.get("status") or {}).get("phase", "")
        if kind == "DELETED":
            if spec.get("nodeName"):
                self.cache.remove_pod(pod)
                self._emit("Pod/Delete", pod, None)
            else:
                self.queue.delete(pod)
                if self.cache.clear_nomination(uid):  # the GPUs it held are free for others
                    self._emit("Pod/Delete", pod, None)
                for fw in self.frameworks.values():
                    fw.reject_waiting_pod(uid, "", "the pod was deleted")
            self.events.forget(uid)
            self.book.mark_gone(uid)
            return
        if spec.get("nodeName"):
            self.queue.delete(pod)
            self.events.forget(uid)  # no PodScheduled=False after the Binding's True
            self.book.pod_bound(pod)  # its own booking replaces its phantoms
            self.cache.update_pod(pod)
            if phase in _TERMINAL:
                self.book.mark_gone(uid)
                before = (old.get("status") or {}).get("phase") if old is not None else None
                if before not in _TERMINAL:
                    if old is not None and (old.get("spec") or {}).get("nodeName"):
                        self._emit("Pod/Update", old, pod)
                    else:  # bound and finished unseen (a watch gap): its devices are free
                        self._emit("Pod/Delete", pod, None)
            return
        if spec.get("schedulerName") not in self.frameworks:
            return
        if meta.get("deletionTimestamp") or phase in _TERMINAL:
            self.queue.delete(pod)
            if self.cache.clear_nomination(uid):  # the GPUs it held are free for others
                self._emit("Pod/Delete", pod, None)
            return
        nominated = (pod.get("status") or {}).get("nominatedNodeName")
        if nominated and self.cache.nominated_node(uid) != nominated:
            # Another replica's nomination, or ours from before a restart: keep its GPUs too.
            self.cache.nominate(pod, nominated)
        elif (
            not nominated
            and old is not None
            and (old.get("status") or {}).get("nominatedNodeName")
            and self.cache.clear_nomination(uid)
        ):
            # Cleared in the pod's status (by the replica that owns it): the GPUs it held
            # are free for others. Only on that transition, so that an older view of the pod
            # does not undo a nomination this replica has just made.
            self._emit("Pod/Delete", pod, None, skip=uid)
        if uid in self._binding or self.cache.is_assumed(uid):
            return  # our decision is being bound; this is an older view of the pod
        if not self._takes(pod, spec["schedulerName"]):
            self.queue.delete(pod)  # another live replica's (queued again if it leaves)
            return
        # PreEnqueue runs in the queue; a pod it gates is reported through ``on_gated``.
        if old is not None:
            self.queue.update(old, pod)
        else:
            self.queue.add(pod)

    def _emit(self, event: str, old: Any, new: Any, *, skip: str | None = None) -> None:
        """Tell the queue of a cluster event: it moves the unschedulable pods that a plugin
        which rejected them registered for, and whose queueing hint says the event may help
        (upstream's ``MoveAllToActiveOrBackoffQueue`` with queueing hints). Gated pods whose
        gating PreEnqueue plugin registered for the event are asked the same way (the queue
        records that plugin in ``unschedulable_plugins``) and go through PreEnqueue again.
        The pod whose uid is ``skip`` is not moved."""
        by_plugin = self._hints.get(event)
        if not by_plugin:
            return

        def hint(info: QueuedPodInfo) -> bool:
            if info.uid == skip:
                return False
            plugins = info.unschedulable_plugins | info.pending_plugins
            for plugin in plugins:
                for fn in by_plugin.get(plugin, ()):
                    if fn is None or fn(info.pod, old, new) == QueueingHint.QUEUE:
                        return True
            return not plugins

        self.queue.on_event(event, hint)

    def _on_assumed_expired(self, uids: list[str]) -> None:
        """Assumed pods (or phantoms) the cache gave up on after its TTL: their devices are
        free, so every pod waiting for a deletion may try again."""
        log.warning("assumed pods expired without being seen bound: %s", ", ".join(uids))
        self.queue.on_event("Pod/Delete")

    def _forget_binding(self, uid: str, task: asyncio.Task[None]) -> None:
        """A binding task ended. Only its own entry goes: a cycle that failed may still be
        releasing its reservation when the pod, requeued, has its next binding cycle."""
        if self._binding.get(uid) is task:
            del self._binding[uid]

    # ------------------------------------------------------------------ running

    async def run(self) -> None:
        """Sync the informers, then schedule until cancelled; stops gracefully."""
        listed_from = self.clock.now().timestamp()  # no informer has listed before this
        self.syncing.set()
        tasks = [
            asyncio.create_task(inf.run(), name=f"informer-{inf.name}") for inf in self.informers
        ]
        tasks.append(asyncio.create_task(self.events.run(), name="event-recorder"))
        try:
            if self.config.replicas.shares:  # announced now, syncing; deleted when cancelled
                self.membership.syncing = True
                tasks.append(
                    asyncio.create_task(self.membership.keep(self.kube), name="replica-membership")
                )
            started = time.perf_counter()
            for inf in self.informers:
                await inf.synced.wait()
            listed = time.perf_counter()
            self.book.pods_listed(listed_from)
            self.synced.set()
            await asyncio.sleep(0)  # what waits for ``synced`` runs before the first cycle
            if self.config.replicas.shares:
                await self.membership.synced(self.kube)
                await self._announced()
            announced = time.perf_counter()
            await self._prime()
            self.ready.set()
            log.info(
                "%s: ready, scheduling: informers synced in %.2fs, membership %.2fs, "
                "snapshot and connections %.2fs",
                self.identity,
                listed - started,
                announced - listed,
                time.perf_counter() - announced,
            )
            tasks.append(asyncio.create_task(self.queue.run(), name="queue-flush"))
            tasks.append(
                asyncio.create_task(
                    self.cache.run_cleanup(on_expired=self._on_assumed_expired),
                    name="cache-cleanup",
                )
            )
            tasks.append(
                asyncio.create_task(
                    self.book.run(self.reservation_gc_period), name="reservation-book"
                )
            )
            tasks.append(asyncio.create_task(self._publish_metrics(), name="metrics"))
            tasks.append(
                asyncio.create_task(self.policies.run(self.kube), name="gpu-policy-status")
            )
            for fw in self.frameworks.values():
                for plugin in fw.background_plugins():
                    tasks.append(
                        asyncio.create_task(
                            _logged(plugin.background(), f"{fw.profile_name}/{plugin!r}"),
                            name=f"plugin-{fw.profile_name}-{plugin!r}",
                        )
                    )
            await self._loop()
        finally:
            self.queue.close()
            await self._finish_binds()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    @contextlib.asynccontextmanager
    async def informed(self) -> AsyncIterator[None]:
        """Run only the informers, and inside the block keep them running, synced: the cache,
        the snapshot and the plugins' informer state as a scheduling replica has them, with
        nothing scheduled, bound or written (``gpusched explain``). Waits for every informer
        to list once (an API server that refuses one keeps it waiting: bound it with
        ``asyncio.timeout``; :meth:`unsynced` names those still waiting)."""
        tasks = [
            asyncio.create_task(inf.run(), name=f"informer-{inf.name}") for inf in self.informers
        ]
        try:
            for inf in self.informers:
                await inf.synced.wait()
            self.cache.update_snapshot(self.snapshot)
            yield
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def unsynced(self) -> list[str]:
        """The informers that have not listed yet (their names)."""
        return [inf.name for inf in self.informers if not inf.synced.is_set()]

    async def _prime(self) -> None:
        """Start-up work done before ``/readyz`` rather than in the first cycles, where a
        backlog waits on it: the first snapshot (every node cloned), the first full pass of the
        per-node GPU gauges, and the API connections the binding cycle will use at once
        (:meth:`Kube.warm`; at 5,000 nodes these took the first 0.3 s of a 2,000-pod backlog,
        and with two replicas on two cores, twice that)."""
        self.cache.update_snapshot(self.snapshot)
        self._publish_gpu_metrics_once()
        await self.kube.warm(self._bind_concurrency)

    async def _announced(self, timeout: float = 5.0) -> None:
        """Wait until the informer shows this replica's own membership Lease (written at the
        start, so usually seen while the informers synced): by then it has shown every replica
        that announced itself earlier (a watch delivers in write order), and one that announced
        later has seen ours, so replicas started together split the backlog from the first pod
        instead of each scheduling it until it sees the others. Bounded: shares are for speed,
        not safety."""
        try:  # asyncio.timeout: 3.11's wait_for can swallow a cancellation that coincides
            async with asyncio.timeout(timeout):
                await self.membership.announced.wait()
        except TimeoutError:
            log.warning(
                "%s: own membership Lease not seen in %.0fs; scheduling anyway",
                self.identity,
                timeout,
            )

    async def _loop(self) -> None:
        while True:
            try:
                info = await self.queue.pop()
            except QueueClosed:
                return
            self.schedule_one(info)
            self._publish_pending()
            await asyncio.sleep(0)  # let informers and binding tasks run between cycles

    async def _finish_binds(self, timeout: float = 10.0) -> None:
        """Graceful shutdown: let in-flight binds finish; the rest expire with their Leases."""
        pending = list(self._binding.values())
        if not pending:
            return
        _done, still = await asyncio.wait(pending, timeout=timeout)
        for task in still:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    # ------------------------------------------------------------------ the scheduling cycle

    def schedule_one(self, info: QueuedPodInfo) -> SchedulingResult:
        """One serial scheduling cycle for a popped pod; never awaits."""
        pod = info.pod
        started = time.perf_counter()
        fw = self.frameworks.get((pod.get("spec") or {}).get("schedulerName", ""))
        if fw is None or not self._takes(pod, fw.profile_name):
            # Another live replica's pod: left to it (queued again if it leaves).
            self.queue.done(info.uid, info.cycle)
            return SchedulingResult(None)
        if self.cache.is_assumed(info.uid):
            # Bound by us a moment ago, and the informer has not shown it yet: wait for it.
            self.queue.requeue_after_error(info)
            return SchedulingResult(None)
        self.cache.update_snapshot(self.snapshot)
        try:
            group = fw.pod_group(pod)
        except Exception as exc:  # a plugin bug: the pod backs off, the scheduler goes on
            log.exception("reading the pod group of %s failed", _key(pod))
            self._attempt("error", fw, started)
            self.queue.requeue_after_error(info)
            self.events.failed_scheduling(pod, f"scheduler error: {exc}", reason="SchedulerError")
            return SchedulingResult(None, status=Status.error(exc))
        if group is not None:
            return self._schedule_group(fw, info, group, started)
        state = CycleState(record_plugin_metrics=self.rng.random() < 0.1)
        try:
            result = self.find_placement(fw, state, pod)
        except Exception as exc:  # a plugin bug: the pod backs off, the scheduler goes on
            log.exception("scheduling %s failed", _key(pod))
            self._attempt("error", fw, started)
            self.queue.requeue_after_error(info)
            self.events.failed_scheduling(pod, f"scheduler error: {exc}", reason="SchedulerError")
            return SchedulingResult(None, status=Status.error(exc))
        if result.node is None:
            self._unschedulable(fw, state, info, result, started)
            return result
        node = result.node
        # Reserve, then assume: the device plugin's Reserve writes DEVICE_ASSIGNMENT, and the
        # pod is assumed with those devices (stamped with a reservation uid) so that the next
        # cycle's snapshot has them taken (the key's contract, gpusched.framework).
        try:
            assignment, status = self._reserve_and_assume(fw, state, pod, node)
        except CacheError as exc:
            self._attempt("error", fw, started)
            self.queue.requeue_after_error(info)
            return SchedulingResult(None, status=Status.error(exc))
        if assignment is not None:
            status = fw.run_permit(state, pod, node)
        if not (status.is_success or status.is_wait):
            fw.run_unreserve(state, pod, node)
            if assignment is not None:
                self.cache.forget_pod(pod)  # nothing was bound: no event (upstream neither)
            if status.is_rejected:
                info.unschedulable_plugins = {status.plugin} if status.plugin else set()
                self.queue.add_unschedulable(info)
            else:
                self.queue.requeue_after_error(info)
            self.events.failed_scheduling(pod, status.message())
            self._attempt("unschedulable" if status.is_rejected else "error", fw, started)
            return SchedulingResult(None, status=status)
        assert assignment is not None  # Reserve and Permit succeeded
        self._start_binding(fw, state, info, node, assignment, started)
        result.assignment = assignment
        return result

    # ------------------------------------------------------------------ gangs

    def _schedule_group(
        self, fw: Framework, first: QueuedPodInfo, group: PodGroup, started: float
    ) -> SchedulingResult:
        """One scheduling cycle for a whole gang: every pending member is placed, reserved and
        assumed in turn (each on the snapshot that holds the ones before it), in the first of
        the group's topology domains that holds them all; then Permit runs for each and every
        member's binding cycle starts. If any member fits nowhere, every member planned is
        unreserved and forgotten: nothing stays reserved, and the members wait together as
        unschedulable. The siblings are taken out of the queue (``SchedulingQueue.take``);
        members gated, in flight or not yet created are not planned, and if the rest cannot
        reach ``min_member`` nothing is. Never awaits. O(members x a cycle)."""
        plugin = fw.group_plugin_name
        need = group.min_member - group.placed
        takeable = [
            uid
            for uid in group.pending
            if uid != first.uid
            and uid not in self._binding
            and not self.cache.is_assumed(uid)
            and self.queue.location(uid) in _TAKEABLE
        ]
        if 1 + len(takeable) < need:
            # Too few members can be planned now: only the popped one waits (its siblings
            # stay where they are, so members arriving one by one cost one cycle each).
            message = (
                f"pod group {group.key} needs {group.min_member} members; "
                f"{group.placed + 1 + len(takeable)} can be scheduled now (the others are not "
                f"created yet, gated, or being scheduled): nothing is reserved until they are"
            )
            self._group_unschedulable(fw, [first], {plugin}, message, started)
            return SchedulingResult(None, status=Status.unschedulable(message, plugin=plugin))
        members = [first]
        for uid in takeable:
            taken = self.queue.take(uid)
            if taken is not None:
                members.append(taken)
        try:
            return self._plan_group(fw, members, group, need, started)
        except Exception as exc:  # a bug: every member backs off, the scheduler goes on
            log.exception("scheduling pod group %s failed", group.key)
            for info in members:
                if info.uid in self._binding:
                    continue  # its binding cycle started: it ends there
                with contextlib.suppress(ValueError):  # already returned by the failing code
                    self.queue.requeue_after_error(info)
                self.events.failed_scheduling(
                    info.pod, f"scheduler error: {exc}", reason="SchedulerError"
                )
                self._attempt("error", fw, started)
            return SchedulingResult(None, status=Status.error(exc))

    def _plan_group(
        self,
        fw: Framework,
        members: list[QueuedPodInfo],
        group: PodGroup,
        need: int,
        started: float,
    ) -> SchedulingResult:
        """The body of :meth:`_schedule_group` once its members are taken."""
        plugin = fw.group_plugin_name
        domains: tuple[frozenset[str] | None, ...] = group.domains or (None,)
        if not group.domain_required and group.domains:
            domains = (*group.domains, None)
        failure: tuple[QueuedPodInfo, SchedulingResult] | None = None
        planned: list[_Planned] = []
        left_out: list[tuple[QueuedPodInfo, SchedulingResult]] = []
        for domain in domains:
            planned, failure, left_out = self._plan_members(fw, members, domain, plugin, need)
            if failure is None:
                break
        if failure is not None:
            failed, result = failure
            fit = fit_error_message(self.snapshot.num_nodes, result)
            message = (
                f"pod group {group.key}: its {len(members)} pending members do not fit "
                f"together (member {failed.key}: {fit})"
            )
            nominations: Mapping[str, str] | None = None
            if group.domain_required and group.domain_message:
                message = f"pod group {group.key}: {group.domain_message} ({fit})"
            elif (
                fw.has_group_post_filter()
                and not group.domain_required  # preemption does not know domains
                and not (result.status and result.status.is_error)
            ):
                # Preemption for the whole gang, or none (GroupPostFilterPlugin).
                nominations, post = fw.run_post_filter_group(group, [m.pod for m in members])
                if post.is_error:
                    log.error("PostFilter for pod group %s: %s", group.key, post.message())
                if post.message():
                    message = f"{message} {post.message()}."
            plugins = {st.plugin for st in result.statuses.values() if st.plugin}
            if result.status is not None and result.status.plugin:
                plugins.add(result.status.plugin)
            self._group_unschedulable(
                fw, members, plugins | {plugin}, message, started, nominations
            )
            return result
        # Everyone is reserved and assumed: Permit, then the binding cycles.
        for i, p in enumerate(planned):
            status = fw.run_permit(p.state, p.info.pod, p.node)
            if not (status.is_success or status.is_wait):
                for q in planned[:i]:
                    fw.reject_waiting_pod(q.info.uid, status.plugin, status.message())
                self._unplan(fw, planned)
                self._group_unschedulable(
                    fw,
                    members,
                    {status.plugin} if status.plugin else set(),
                    status.message(),
                    started,
                )
                return SchedulingResult(None, status=status)
        for p in planned:
            self._start_binding(fw, p.state, p.info, p.node, p.assignment, started)
        for info, result in left_out:
            # Beyond min_member and fitting nowhere now: it waits on its own, and joins the
            # running gang when it fits (the group then plans no more).
            self._unschedulable(fw, CycleState(), info, result, started)
        head = planned[0]
        return SchedulingResult(head.node, assignment=head.assignment)

    def _plan_members(
        self,
        fw: Framework,
        members: list[QueuedPodInfo],
        within: frozenset[str] | None,
        plugin: str,
        need: int,
    ) -> tuple[
        list[_Planned],
        tuple[QueuedPodInfo, SchedulingResult] | None,
        list[tuple[QueuedPodInfo, SchedulingResult]],
    ]:
        """Place, reserve and assume each member in turn (on nodes ``within``, or anywhere).
        A member that fits nowhere is left out while the others can still make ``need``
        (members beyond ``min_member`` are optional); once they cannot, everything planned is
        undone and that member is returned with its result. Returns the planned members, the
        failure, and the members left out with why."""
        planned: list[_Planned] = []
        left_out: list[tuple[QueuedPodInfo, SchedulingResult]] = []
        try:
            for i, info in enumerate(members):
                pod = info.pod
                state = CycleState()
                self.cache.update_snapshot(self.snapshot)
                result = self.find_placement(fw, state, pod, within=within, within_plugin=plugin)
                assignment: Assignment | None = None
                if result.node is not None:
                    try:
                        assignment, status = self._reserve_and_assume(fw, state, pod, result.node)
                    except CacheError as exc:
                        status = Status.error(exc)
                    if assignment is None:
                        result = SchedulingResult(None, status=status)
                if result.node is not None and assignment is not None:
                    planned.append(_Planned(info, state, result.node, assignment))
                    continue
                if len(planned) + len(members) - i - 1 >= need and not (
                    result.status is not None and result.status.is_error
                ):
                    left_out.append((info, result))
                    continue
                self._unplan(fw, planned)
                return [], (info, result), []
        except BaseException:
            self._unplan(fw, planned)
            raise
        return planned, None, left_out

    def _unplan(self, fw: Framework, planned: list[_Planned]) -> None:
        """Undo ``_plan_members``: unreserve and forget each member, latest first."""
        for p in reversed(planned):
            fw.run_unreserve(p.state, p.info.pod, p.node)
            self.cache.forget_pod(p.info.pod)
        self.cache.update_snapshot(self.snapshot)

    def _group_unschedulable(
        self,
        fw: Framework,
        members: list[QueuedPodInfo],
        plugins: set[str],
        message: str,
        started: float,
        nominations: Mapping[str, str] | None = None,
    ) -> None:
        """The gang could not be placed: each member waits as unschedulable for an event one
        of ``plugins`` registered for, with a FailedScheduling Event saying why; with
        ``nominations`` (a gang's preemption), each member is nominated to its node (status
        and cache, as ``_unschedulable`` does for one pod) and retried after its backoff;
        without, a nomination a member has is cleared (cache and status)."""
        cleared = False
        for info in members:
            node = nominations.get(info.uid) if nominations else None
            if node:
                self.cache.nominate(info.pod, node)
            elif self.cache.clear_nomination(info.uid) or (info.pod.get("status") or {}).get(
                "nominatedNodeName"
            ):
                node, cleared = "", True  # no room is being made: the nomination goes
            info.unschedulable_plugins = set(plugins)
            info.nominated_node_name = node or None
            self.queue.add_unschedulable(info)
            self.events.failed_scheduling(info.pod, message, nominated_node=node)
            self._attempt("unschedulable", fw, started)
        if cleared:  # the GPUs the members held are free for the pods they kept out
            self._emit("Pod/Delete", members[0].pod, None, skip=members[0].uid)

    def _reserve_and_assume(
        self, fw: Framework, state: CycleState, pod: dict[str, Any], node: str
    ) -> tuple[Assignment | None, Status]:
        """Reserve, then assume the pod with the devices Reserve chose (stamped with a new
        reservation uid). ``(None, why)`` when Reserve failed (undone); a ``CacheError`` when
        assuming failed (Reserve undone)."""
        status = fw.run_reserve(state, pod, node)
        if not status.is_success:
            fw.run_unreserve(state, pod, node)
            return None, status
        devices = state.get(DEVICE_ASSIGNMENT) or _NO_DEVICES
        assignment = Assignment(
            devices.gpu_ids,
            devices.gpu_uuids,
            devices.vram_mib,
            str(uuid.UUID(int=self._ids.getrandbits(128), version=4)),
        )
        state.write(DEVICE_ASSIGNMENT, assignment)
        try:
            self.cache.assume_pod(pod, node, assignment)
        except CacheError as exc:
            fw.run_unreserve(state, pod, node)
            log.warning("assuming %s on %s failed: %s", _key(pod), node, exc)
            raise
        return assignment, status

    def _start_binding(
        self,
        fw: Framework,
        state: CycleState,
        info: QueuedPodInfo,
        node: str,
        assignment: Assignment,
        started: float,
    ) -> None:
        task = asyncio.create_task(
            self._binding_cycle(fw, state, info, node, assignment, started),
            name=f"bind-{info.key}",
        )
        self._binding[info.uid] = task
        uid = info.uid
        task.add_done_callback(lambda done: self._forget_binding(uid, done))

    # ------------------------------------------------------------------ placement

    def find_placement(
        self,
        fw: Framework,
        state: CycleState,
        pod: dict[str, Any],
        *,
        within: frozenset[str] | None = None,
        within_plugin: str = "",
    ) -> SchedulingResult:
        """PreFilter, then the pod's equivalence class or Filter (adaptive node sampling) and
        Score; select. Pure and synchronous. ``within``: only these nodes (a gang's topology
        domain, left out as ``within_plugin``'s, as a PreFilterResult would)."""
        pre, status = fw.run_pre_filter(state, pod)
        all_nodes = self.snapshot.node_infos()
        if not status.is_success:
            return SchedulingResult(None, status=status)
        if within is not None:
            restriction = PreFilterResult(within, frozenset({within_plugin}))
            pre = restriction if pre is None or pre.node_names is None else pre.merge(restriction)
        nodes = all_nodes
        left_out: Status | None = None  # the status of the nodes a PreFilterResult left out
        if pre is not None and pre.node_names is not None:
            nodes = [n for n in all_nodes if n.name in pre.node_names]
            names = sorted(pre.plugins)
            left_out = Status.unresolvable(
                f"node(s) didn't satisfy plugin(s) [{' '.join(names)}]",
                plugin=names[0] if names else "",
            )
        n = len(nodes)
        if n == 0:
            if left_out is None or not all_nodes:
                return SchedulingResult(None, status=Status.unresolvable("no nodes available"))
            return SchedulingResult(None, statuses={ni.name: left_out for ni in all_nodes})
        share = self.membership.share(fw.profile_name)  # None: alone, every node is ours
        if self.equivalence is not None and (pre is None or pre.node_names is None):
            signature = fw.sign_pod(pod)
            if signature is not None:
                placed = self.equivalence.place(fw, state, pod, signature, self.snapshot, share)
                if placed is not None:
                    return self._placed(placed)
        wanted = num_feasible_nodes_to_find(n, self.config.percentage_of_nodes_to_score)
        feasible = []
        statuses: dict[str, Status] = {}
        start = self._next_start % n
        evaluated = 0
        run_filter = fw.run_filter
        filter_started = time.perf_counter()
        for i in range(n):
            node_info = nodes[(start + i) % n]
            evaluated += 1
            st = run_filter(state, pod, node_info)
            if st.is_success:
                feasible.append(node_info)
                if len(feasible) >= wanted:
                    break
            else:
                statuses[node_info.name] = st
        self._next_start = (start + evaluated) % n
        # The Filter extension point, timed over the whole node loop as upstream does
        # (Framework.run_filter, called per node, is not timed).
        self.metrics.observer(fw.profile_name).extension_point_duration(
            "Filter", Code.SUCCESS, time.perf_counter() - filter_started
        )
        if not feasible:
            if left_out is not None:  # as upstream's absent nodes: counted in the message
                for ni in all_nodes:
                    statuses.setdefault(ni.name, left_out)
            return SchedulingResult(None, statuses=statuses, evaluated=evaluated)
        # Other replicas active: the best node of our share if one is feasible, else any.
        own = {ni.name for ni in feasible if share.mine(ni.name)} if share is not None else None
        chosen = next(ni for ni in feasible if ni.name in own) if own else feasible[0]
        if len(feasible) > 1 and fw.has_score_plugins():
            status = fw.run_pre_score(state, pod, feasible)
            if not status.is_success:
                return SchedulingResult(None, status=status, evaluated=evaluated)
            scores, status = fw.run_score(state, pod, feasible)
            if not status.is_success:
                return SchedulingResult(None, status=status, evaluated=evaluated)
            best = -1
            ties = 0
            chosen_name = chosen.name
            for node_score in scores:  # selectHost: the highest score, ties broken at random
                if own and node_score.name not in own:
                    continue
                if node_score.score > best:
                    best, ties = node_score.score, 1
                    chosen_name = node_score.name
                elif node_score.score == best:
                    ties += 1
                    if self.rng.randrange(ties) == 0:
                        chosen_name = node_score.name
            chosen = next(ni for ni in feasible if ni.name == chosen_name)
        return SchedulingResult(chosen.name, evaluated=evaluated, feasible=len(feasible))

    @staticmethod
    def _placed(placed: Placement) -> SchedulingResult:
        return SchedulingResult(
            placed.node,
            statuses=placed.statuses,
            status=placed.status,
            evaluated=placed.evaluated,
            feasible=placed.feasible,
        )

    def _unschedulable(
        self,
        fw: Framework,
        state: CycleState,
        info: QueuedPodInfo,
        result: SchedulingResult,
        started: float,
    ) -> None:
        """No node fits (or the cycle failed before Filter): upstream's FitError handling.

        For an Unschedulable outcome (not an error) PostFilter runs, as in upstream's
        ``schedulingCycle``, with every node's status: each evaluated node's Filter status
        (the equivalence class's, or the sampled path's, which evaluates every candidate when
        none fits), UnschedulableAndUnresolvable for the nodes a PreFilterResult left out
        (``find_placement``), and the PreFilter rejection for every node when PreFilter
        rejected the pod. Its message is
        appended to the FailedScheduling message; a ``PostFilterResult``'s nominated node is
        recorded in ``info.nominated_node_name`` and sends the pod to backoff, to be retried.
        The nomination is also recorded in the cache (``SchedulerCache.nominate``), which
        keeps the node's GPUs from lower-priority pods; a result with an empty node name, or
        an UnschedulableAndUnresolvable PostFilter status (the pod can never fit), clears a
        nomination the pod has (cache and status). Trying the nominated node first
        is not done (every node is filtered again).
        """
        plugins = {s.plugin for s in result.statuses.values() if s.plugin}
        if result.status is not None and result.status.plugin:
            plugins.add(result.status.plugin)
        is_error = result.status is not None and result.status.is_error
        message = fit_error_message(self.snapshot.num_nodes, result)
        nominated: str | None = None
        if not is_error and fw.has_post_filter_plugins() and self.snapshot.num_nodes:
            # PreFilter rejected the pod (no statuses): the same for every node.
            every = result.status or Status.unresolvable("no nodes available")
            statuses = {
                n.name: result.statuses.get(n.name, every) for n in self.snapshot.node_infos()
            }
            post_result, post_status = fw.run_post_filter(state, info.pod, statuses)
            if post_status.is_error:
                log.error("PostFilter for %s: %s", _key(info.pod), post_status.message())
            if post_status.message():
                message = f"{message} {post_status.message()}."
            if post_result is not None and post_result.nominated_node_name:
                nominated = post_result.nominated_node_name
                # Keep the node's GPUs for it (NominatedReservation) until it is placed or
                # deleted (the cache clears the nomination on assume and on the bound Add).
                self.cache.nominate(info.pod, nominated)
            elif (
                post_result is not None or post_status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
            ) and (
                self.cache.clear_nomination(info.uid)
                or (info.pod.get("status") or {}).get("nominatedNodeName")
            ):
                # An empty node name clears the nomination, as upstream: written as "" with
                # the condition, and the pods it kept from the node may try again. So does an
                # Unresolvable verdict (a pod no node could ever take holds no node).
                nominated = ""
                self._emit("Pod/Delete", info.pod, None, skip=info.uid)
        if is_error:
            self.queue.requeue_after_error(info)
        else:
            info.unschedulable_plugins = plugins
            info.nominated_node_name = nominated or None
            self.queue.add_unschedulable(info)
        self.events.failed_scheduling(info.pod, message, nominated_node=nominated)
        self._attempt("error" if is_error else "unschedulable", fw, started)

    def _attempt(self, result: str, fw: Framework, started: float) -> None:
        profile = fw.profile_name
        self.metrics.schedule_attempts.labels(result=result, profile=profile).inc()
        self.metrics.attempt_duration.labels(result=result, profile=profile).observe(
            time.perf_counter() - started
        )

    # ------------------------------------------------------------------ the binding cycle

    async def _binding_cycle(
        self,
        fw: Framework,
        state: CycleState,
        info: QueuedPodInfo,
        node: str,
        assignment: Assignment,
        started: float,
    ) -> None:
        """Permit wait, reservation, PreBind, Bind (``_bind_steps``); then ``_bound`` or
        ``_bind_failed``.

        Whatever is raised, the cycle ends by binding the pod or by undoing it (unreserve,
        forget, requeue): an unexpected exception is a failure like any other (``error``),
        its reservation released unless a Binding was sent (then the outcome is unknown and
        the reservation stays counted until it expires or the pod shows up). Cancelled
        (shutdown), it forgets the pod, requeues it and lets a written reservation expire;
        the cancellation goes on.
        """
        progress = _Progress()
        try:
            failure = await self._bind_steps(fw, state, info, node, assignment, progress)
        except asyncio.CancelledError:
            self._abandon(fw, state, info, node)
            raise
        if failure is None:
            await self._bound(fw, state, info, node, started)
        else:
            await self._bind_failed(fw, state, info, node, progress.reserved, failure, started)

    async def _bind_steps(
        self,
        fw: Framework,
        state: CycleState,
        info: QueuedPodInfo,
        node: str,
        assignment: Assignment,
        progress: _Progress,
    ) -> _BindFailure | None:
        """The binding cycle's steps; returns why it did not bind (``None``: bound), whatever
        a step raises but cancellation. ``progress`` tells what was written and sent."""
        pod = info.pod
        reserved: Reservation | None = None
        try:
            # Outside the bind slots: a pod may wait at Permit for minutes (a gang).
            status = await fw.wait_on_permit(pod)
            if not status.is_success:
                raise _BindFailure(
                    "permit", status.message() or "rejected at permit", status=status
                )
            async with self._bind_slots:
                if assignment.gpu_ids:
                    held = self.cache.node_info(node)
                    terms = held.ledger.share_terms(info.uid) if held is not None else None
                    reserved = self.reservations.new_reservation(
                        assignment.reservation_uid,
                        _key(pod),
                        info.uid,
                        assignment.gpu_ids,
                        assignment.vram_mib,
                        exclusive=not state.get(SHARED_CLAIM),
                        swap=terms[0] if terms is not None else None,
                        cores=terms[1] if terms is not None else 0,
                        uuids=assignment.gpu_uuids,
                    )
                    progress.reserved = reserved
                    try:
                        await self.reservations.reserve(
                            node,
                            reserved,
                            known=self.leases.get(node),
                            # Shares: within the GPU's VRAM and clients with every replica's.
                            validate=shares_fit(
                                reserved,
                                self._shared_gpu,
                                self.book.unbound,
                                phantom_key(""),
                                self._shared_node,
                            ),
                            prunable=self.book.prunable,
                        )
                    finally:
                        self.book.count_conflicts()
            # PreBind outside the slots: a gang member waits there for its siblings (every
            # device Lease of the gang is written before any member is bound), and a gang
            # may have more members than there are slots.
            status = await fw.run_pre_bind(state, pod, node)
            if not status.is_success:
                raise _BindFailure("prebind", status.message())
            async with self._bind_slots:
                if reserved is not None and (
                    reserved.expires - self.clock.now().timestamp() < self.bind_margin
                ):
                    raise _BindFailure(
                        "expired", "the device reservation is about to expire; trying again"
                    )
                progress.bind_sent = True
                status = await fw.run_bind(state, pod, node)
                if status.is_success:
                    self.metrics.api_write("pods/binding", "create")
                else:
                    # A failed Binding may still have landed (its response lost) or the pod
                    # may have been bound by another replica: ask the API server which.
                    outcome = await self._binding_outcome(pod, node, assignment)
                    if outcome != _Outcome.OURS:
                        raise _BindFailure(
                            "bind", status.message() or "no bind plugin bound the pod", outcome
                        )
                    log.info("%s: the Binding landed though its response was lost", _key(pod))
                    self.metrics.api_write("pods/binding", "create")
        except _BindFailure as exc:
            return exc
        except ReservationConflict as exc:
            # Not written, or written and then lost to a conflict: it holds no pod.
            return _BindFailure("lease_conflict", str(exc), release=False)
        except LeaseFormatError as exc:
            return _BindFailure("lease_format", str(exc), release=False)
        except APIError as exc:
            sent = _Outcome.UNKNOWN if progress.bind_sent else None
            return _BindFailure("api_error", str(exc), sent)
        except Exception as exc:  # a bug: the pod must not stay assumed and in flight
            log.exception("binding %s to %s raised", _key(pod), node)
            sent = _Outcome.UNKNOWN if progress.bind_sent else None
            return _BindFailure("error", f"{type(exc).__name__}: {exc}", sent)
        return None

    async def _bound(
        self, fw: Framework, state: CycleState, info: QueuedPodInfo, node: str, started: float
    ) -> None:
        """The pod is bound: finish its cycle; what follows the binding cannot undo it."""
        pod = info.pod
        self.cache.finish_binding(pod)
        self.queue.done(info.uid, info.cycle)
        self.scheduled += 1
        try:
            self.events.scheduled(pod, node)
            self._attempt("scheduled", fw, started)
            first = info.initial_attempt_timestamp
            if first is not None:
                self.metrics.pod_sli_duration.labels(attempts=str(min(info.attempts, 15))).observe(
                    max(self.clock.monotonic() - first, 0.0)
                )
            await fw.run_post_bind(state, pod, node)
        except Exception:
            log.exception("after binding %s to %s", _key(pod), node)

    def _abandon(self, fw: Framework, state: CycleState, info: QueuedPodInfo, node: str) -> None:
        """A binding cycle cancelled (shutdown): forget the pod and requeue it. A reservation
        it wrote stays in its Lease until it expires (the pod may yet be bound with it)."""
        fw.run_unreserve(state, info.pod, node)
        self._forget_assumed(info.uid)
        self.cache.finish_binding(info.pod)
        with contextlib.suppress(ValueError):  # not in flight any more (deleted, or done)
            self.queue.requeue_after_error(info)

    async def _bind_failed(
        self,
        fw: Framework,
        state: CycleState,
        info: QueuedPodInfo,
        node: str,
        reserved: Reservation | None,
        failure: _BindFailure,
        started: float,
    ) -> None:
        """Undo a binding cycle that did not bind the pod.

        ``failure.outcome`` is what the API server said of the pod after a failed Binding
        (:meth:`_binding_outcome`); ``None`` when no Binding was sent, so the pod is unbound.
        The reservation is released only when the pod is known not to be bound with it; when
        that is unknown it stays until it expires unbound (the book's prune rule). The pod
        goes back to the queue, with a FailedScheduling Event, unless it is gone or bound
        elsewhere (another replica won it: nothing to tell its owner); a pod rejected while
        waiting at Permit is unschedulable instead. Everything but the release is done before
        the first await.
        """
        pod = info.pod
        outcome = failure.outcome
        log.info("binding %s to %s failed (%s): %s", _key(pod), node, failure.stage, failure)
        self.failed_binds += 1
        self.metrics.bind_failures.labels(reason=failure.stage).inc()
        fw.run_unreserve(state, pod, node)
        self._catch_up(info)
        rejected = failure.status
        if rejected is not None and rejected.is_rejected:
            # Rejected while waiting at Permit (a gang's timeout): upstream's FitError on the
            # one node. The pod waits in unschedulable for an event its rejecting plugin
            # registered for; the devices it frees do not move it back at once.
            info.unschedulable_plugins = {rejected.plugin} if rejected.plugin else set()
            with contextlib.suppress(ValueError):  # the pod may have been deleted meanwhile
                self.queue.add_unschedulable(info)
            self._forget_assumed(info.uid, moves_itself=False)
            self.cache.finish_binding(pod)
            result = SchedulingResult(None, statuses={node: rejected})
            self.events.failed_scheduling(pod, fit_error_message(1, result))
            self._attempt("unschedulable", fw, started)
            return
        self._forget_assumed(info.uid)
        self.cache.finish_binding(pod)
        if outcome == _Outcome.UNKNOWN and reserved is not None:
            # The pod may be bound with these devices: they stay counted, as a phantom of the
            # reservation, until the pod shows up bound or the reservation leaves the Lease.
            self.book.add_phantom(node, reserved, ours=True)
        self._attempt("error", fw, started)
        if outcome in (_Outcome.GONE, _Outcome.ELSEWHERE):
            self.queue.done(info.uid, info.cycle)
        else:
            # Told before it is requeued: a PreEnqueue plugin that gates it again reports
            # that, and the pod then says what it waits for, not what failed before.
            if failure.stage != "lease_conflict":
                self.events.failed_scheduling(
                    pod, f"binding to {node} failed: {failure}", reason="SchedulerError"
                )
            with contextlib.suppress(ValueError):  # the pod may have been deleted meanwhile
                self.queue.requeue_after_error(info)
        if reserved is not None and outcome != _Outcome.UNKNOWN:
            # Known not to hold the pod: if this release fails (or is not tried), the next
            # write to the Lease or the collector drops it (the book's prune rule).
            self.book.mark_dead(reserved.uid)
            if failure.release:
                await self.book.release(node, [reserved.uid])

    def _catch_up(self, info: QueuedPodInfo) -> None:
        """Before a pod whose binding failed returns to the queue: hand the queue the version
        the informer has now (``_on_pod`` skips updates to an assumed pod), as upstream's
        failure handler requeues the informer's copy. A relevant change sends it to backoff
        rather than unschedulable (an update while in flight)."""
        latest = self.pods.items.get(_key(info.pod))
        if (
            latest is not None
            and latest is not info.pod
            and latest["metadata"].get("uid") == info.uid
            and not (latest.get("spec") or {}).get("nodeName")
            and self.queue.get(info.uid) is info  # in flight: never added here
        ):
            self.queue.update(info.pod, latest)

    async def _binding_outcome(
        self, pod: dict[str, Any], node: str, assignment: Assignment
    ) -> _Outcome:
        """After a failed Binding: is the pod bound, and with this cycle's reservation?"""
        meta = pod["metadata"]
        path = resource_path("", "v1", "pods", meta.get("namespace") or "default", meta["name"])
        try:
            current = await self.kube.get(path)
        except APINotFound:
            return _Outcome.GONE
        except APIError as exc:
            log.warning("%s: cannot tell whether its Binding landed: %s", _key(pod), exc)
            return _Outcome.UNKNOWN
        if current["metadata"].get("uid") != meta.get("uid"):
            return _Outcome.GONE  # deleted and re-created under the same name
        bound_to = (current.get("spec") or {}).get("nodeName")
        if not bound_to:
            return _Outcome.UNBOUND
        annotations = current["metadata"].get("annotations") or {}
        if bound_to == node and annotations.get(RESERVATION_UID) == assignment.reservation_uid:
            return _Outcome.OURS
        return _Outcome.ELSEWHERE

    # ------------------------------------------------------------------ metrics

    def _publish_gpu_metrics_once(self) -> None:
        """GPUs and VRAM allocated per node, from the snapshot; the series of nodes the cache
        no longer has are removed. O(changed nodes x GPUs) while no node joined or left since
        the last call, else O(nodes x GPUs) (at 5,000 nodes a full pass holds the event loop
        for tens of milliseconds: not every 5 s)."""
        snapshot = self.snapshot
        if self._gpu_published == (snapshot.membership, snapshot.generation):
            return
        if self._gpu_published[0] == snapshot.membership:
            for node_info in snapshot.changed_since(self._gpu_published[1]):
                if self.cache.node_info(node_info.name) is not None:  # not deleted since
                    self._publish_gpus_of(node_info)
            self._gpu_published = (snapshot.membership, snapshot.generation)
            return
        self._gpu_published = (snapshot.membership, snapshot.generation)
        published: set[str] = set()
        for node_info in snapshot.node_infos():
            name = node_info.name
            if self.cache.node_info(name) is None:
                continue  # deleted since the snapshot was taken
            self._publish_gpus_of(node_info)
            published.add(name)
        for name in self._gpu_series - published:
            if self.cache.node_info(name) is None:
                self._drop_gpu_series(name)
            else:
                published.add(name)  # in the cache, not yet in the snapshot: keep its series
        self._gpu_series = published

    def _drop_gpu_series(self, name: str) -> None:
        """A node left: its GPU gauges go with it (at once, not at the next full pass)."""
        with contextlib.suppress(KeyError):
            self.metrics.node_gpus_allocated.remove(name)
        with contextlib.suppress(KeyError):
            self.metrics.node_vram_allocated.remove(name)
        self._gpu_series.discard(name)

    def _publish_gpus_of(self, node_info: NodeInfo) -> None:
        devices = node_info.ledger.devices
        allocated = len(devices) - node_info.ledger.free_gpu_count
        vram = sum(d.reserved_mib for d in devices)
        self.metrics.node_gpus_allocated.labels(node=node_info.name).set(allocated)
        self.metrics.node_vram_allocated.labels(node=node_info.name).set(vram)

    def _publish_pending(self) -> None:
        """``scheduler_pending_pods{queue}``: after every cycle, and periodically, since pods
        also move while no cycle runs (gated ones never cause one)."""
        for queue_name, count in self.queue.pending_pods().items():
            self.metrics.pending_pods.labels(queue=queue_name).set(count)

    async def _publish_metrics(self, period: float = 5.0) -> None:
        while True:
            self._publish_gpu_metrics_once()
            self._publish_pending()
            await self.clock.sleep(period)


async def _logged(work: Coroutine[Any, Any, None], what: str) -> None:
    """Run a plugin's background task; log it if it fails (it is not restarted)."""
    try:
        await work
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("background task of %s failed", what)


class _Outcome(enum.Enum):
    """What the API server says of a pod whose Binding failed."""

    OURS = "bound with this cycle's decision (the Binding landed, its response was lost)"
    ELSEWHERE = "bound by someone else, or with another reservation"
    UNBOUND = "not bound"
    GONE = "deleted"
    UNKNOWN = "could not be read"


@dataclass(slots=True)
class _Planned:
    """A gang member placed, reserved and assumed in the gang's cycle."""

    info: QueuedPodInfo
    state: CycleState
    node: str
    assignment: Assignment


@dataclass
class _Progress:
    """How far a binding cycle got: the reservation it made (perhaps written), and whether a
    Binding was sent (then the pod may be bound)."""

    reserved: Reservation | None = None
    bind_sent: bool = False


class _BindFailure(Exception):
    """Why a binding cycle did not bind: its stage (the ``reason`` of
    ``gpusched_bind_failures_total``), what the API server said of the pod after a Binding
    (``None``: none was sent), whether a written reservation should be released now, and the
    Permit status when the pod was rejected while waiting."""

    def __init__(
        self,
        stage: str,
        message: str,
        outcome: _Outcome | None = None,
        *,
        release: bool = True,
        status: Status | None = None,
    ) -> None:
        super().__init__(message)
        self.stage = stage
        self.message = message
        self.outcome = outcome
        self.release = release
        self.status = status
