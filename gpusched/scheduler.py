"""One gpusched replica: informers, the serial scheduling cycle, and asynchronous binding cycles.

The shape is kube-scheduler's (pkg/scheduler/schedule_one.go):

**Informers** (``gpusched.kube.reflector``) list and watch nodes, GPU inventories, all pods
(GPUs held by pods anyone bound count) and the reservation Leases, feeding the cache and the
queue. Nothing is scheduled before every informer has synced, so after a restart the
scheduler's state is rebuilt from the pods' assignment annotations and the Leases first.

**The scheduling cycle** (``schedule_one``) is serial and never awaits: pop a pod, update the
frozen snapshot, run PreFilter, then either ask the pod's equivalence class
(``gpusched.equivalence``: pods with equal signatures share one ranking of all nodes, of which
only the nodes changed since are re-evaluated) or, for a pod no class serves, Filter over the
nodes (starting where the previous cycle stopped, and stopping once enough feasible nodes are
found: ``percentageOfNodesToScore``) and Score; pick the best node and the GPU set GPUFit chose
on it, *assume* the pod in the cache (the next cycle sees those GPUs as taken), Reserve,
Permit, then start the binding cycle.

**The binding cycle** is an asyncio task per pod: wait on Permit, write the reservation into
the node's Lease (optimistic concurrency; ``gpusched.reservations``), PreBind, Bind (the
Binding carries the decision as annotations), PostBind. A failure anywhere unreserves, forgets
the assumed pod and sends the pod back to the queue with backoff (a pod whose bind keeps
failing backs off exponentially, so it never starves the others). A failed Binding is first
checked against the pod, since it may have landed: its reservation is released only once the
pod is known not to hold it (``_binding_outcome``, ``_bind_failed``).

**Other replicas' reservations** seen in the Leases before their pods show up bound are
counted in the cache as *phantoms* (``_add_phantom``), and **cluster events** reach the queue
with the plugins' queueing hints (``_emit``), so an unschedulable pod is retried when something
it waits for changed.

Telling users why: a pod that fits nowhere gets a ``FailedScheduling`` Event and a
``PodScheduled=False`` condition with kube-scheduler's summary ("0/12 nodes are available:
4 Insufficient nvidia.com/gpu, 8 node(s) had untolerated taint {...}."), rate-limited.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import random
import time
import uuid
from collections import Counter, OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpusched.annotations import RESERVATION_UID, Assignment
from gpusched.cache import SchedulerCache, Snapshot
from gpusched.cache.errors import CacheError, LedgerError
from gpusched.clock import Clock, RealClock
from gpusched.equivalence import EquivalenceCache, Placement
from gpusched.events import EventRecorder
from gpusched.framework import (
    ActionType,
    ClusterEvent,
    Code,
    CycleState,
    Framework,
    PluginRegistry,
    QueueingHint,
    QueueingHintFn,
    SchedulerConfiguration,
    Status,
    build_frameworks,
    in_tree,
)
from gpusched.inventory import RESOURCE_GPU, InventoryError, inventory_from_object
from gpusched.kube.client import Kube, resource_path
from gpusched.kube.errors import APIError, APINotFound
from gpusched.kube.reflector import Reflector
from gpusched.metrics import Metrics
from gpusched.queue import QueueClosed, QueuedPodInfo, SchedulingQueue
from gpusched.replicas import MEMBER_LABEL, Membership
from gpusched.reservations import (
    NODE_LABEL,
    LeaseFormatError,
    NodeLease,
    Reservation,
    ReservationConflict,
    ReservationWriter,
)

__all__ = ["Scheduler", "SchedulingResult"]

log = logging.getLogger(__name__)

_TERMINAL = ("Succeeded", "Failed")
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
)
"""The cluster events the scheduler tells its queue of. A bound pod's Update is sent only when
it finishes; a Node's Update only when what scheduling reads of it changed (not heartbeats);
an assumed pod forgotten (a failed bind, another replica's reservation gone) is a Pod/Delete."""

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


def _assignment(state: CycleState, node: str) -> Assignment | None:
    """The GPUs GPUFit chose on ``node`` this cycle (no reservation uid yet), if any."""
    from gpusched.plugins.gpu_fit import choice_for

    choice = choice_for(state, node)
    return choice.to_assignment() if choice is not None else None


def _phantom_key(reservation_uid: str) -> str:
    """The cache key of a reservation's phantom: never a pod's uid."""
    return f"reservation/{reservation_uid}"


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
        reservation_grace: float = 30.0,
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
        self.frameworks: dict[str, Framework] = build_frameworks(
            self.config,
            registry or in_tree(),
            clock=self.clock,
            observer_for=self.metrics.observer,
            kube=kube,
        )
        first = next(iter(self.frameworks.values()))
        self._hints = event_hints(self.frameworks.values())
        self.cache = SchedulerCache(self.clock)
        self.snapshot = Snapshot()
        self.equivalence = (
            EquivalenceCache(self.rng) if self.config.opportunistic_batching else None
        )
        self.queue = SchedulingQueue(
            self.clock,
            first.queue_sort_key,
            initial_backoff=self.config.pod_initial_backoff_seconds,
            max_backoff=self.config.pod_max_backoff_seconds,
            max_in_unschedulable=self.config.pod_max_in_unschedulable_pods_duration,
            rng=self.rng,
            event_interest={event: set(by_plugin) for event, by_plugin in self._hints.items()},
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
        self.events = EventRecorder(
            kube, self.clock, instance=self.identity, on_write=self.metrics.api_write
        )
        self.leases: dict[str, NodeLease] = {}
        self._reservations_held = 0  # sum over self.leases, kept as Lease events arrive
        # Pods this replica saw deleted or finished: their reservations protect nothing.
        self._gone: OrderedDict[str, None] = OrderedDict()
        # Reservations of this replica known not to hold their pod (failed binds).
        self._dead: OrderedDict[str, None] = OrderedDict()
        # Phantoms (see _add_phantom): reservation uid -> its pod's uid, and back.
        self._phantoms: dict[str, str] = {}
        self._conflicts_counted = 0  # ReservationWriter.conflicts already in the metric
        self._phantom_pods: dict[str, set[str]] = {}
        self.reservation_gc_period = reservation_gc_period
        self.reservation_grace = reservation_grace
        # A reservation must outlive its Binding by this much, or the pod is not bound with it.
        self.bind_margin = res.lease_duration_seconds / 4
        self._binding: dict[str, asyncio.Task[None]] = {}  # pod uid -> binding task
        self._bind_slots = asyncio.Semaphore(self.config.parallelism * 8)
        self._next_start = 0
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
            on_change=self._on_shares_changed,
            on_write=self.metrics.api_write,
        )
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
        ]

    def _on_node(self, kind: str, node: dict[str, Any], old: dict[str, Any] | None) -> None:
        if kind == "DELETED":
            self.cache.remove_node(node)
            return
        if kind == "ADDED":
            self.cache.add_node(node)
            lease = self.leases.get(node["metadata"]["name"])
            if lease is not None:  # its Lease came first: count what it holds now
                for r in lease.reservations.values():
                    if r.uid not in self._phantoms:
                        self._add_phantom(lease.node, r)
            self._emit("Node/Add", None, node)
        else:
            self.cache.update_node(node)
            if old is None or _scheduling_properties(old) != _scheduling_properties(node):
                self._emit("Node/Update", old, node)  # not for heartbeats

    def _on_inventory(self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        name = obj["metadata"]["name"]
        inventory = None
        if kind != "DELETED":
            try:
                inventory = inventory_from_object(obj)
            except InventoryError as exc:
                log.warning("ignoring the GPU inventory of node %s: %s", name, exc)
        self.cache.set_inventory(name, inventory)
        event = {"ADDED": "Add", "DELETED": "Delete"}.get(kind, "Update")
        self._emit(f"GPUNodeInventory/{event}", old, obj if kind != "DELETED" else None)

    def _on_lease(self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        try:
            lease = NodeLease.from_object(obj)
        except LeaseFormatError as exc:
            log.error("%s", exc)
            return
        old_lease = self.leases.pop(lease.node, None)
        before = old_lease.reservations if old_lease is not None else {}
        after = lease.reservations if kind != "DELETED" else {}
        self._reservations_held += len(after) - len(before)
        if kind != "DELETED":
            self.leases[lease.node] = lease
        self.metrics.reservations_held.set(self._reservations_held)
        for uid in before.keys() - after.keys():
            self._drop_phantom(uid)
        for uid in after.keys() - before.keys():
            self._add_phantom(lease.node, after[uid])

    def _on_shares_changed(self) -> None:
        """The live replicas changed: queue the pending pods that are now this replica's (those
        of a replica that left; see ``schedule_one``). O(pods in the informer)."""
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
                or not self.membership.takes(uid, name)
            ):
                continue
            info = self.queue.add(pod)
            if info.error:
                self.events.failed_scheduling(pod, info.error)

    # Reservations the cache would not otherwise count. A reservation whose pod the cache does
    # not hold when it first appears in a Lease (another replica's bind in flight) is assumed in
    # the cache under a key of its own (``reservation/<uid>``), a *phantom*, so the next cycles
    # see its GPUs as taken instead of finding out with a 409 on the Lease. So is the
    # reservation of one of our binds whose outcome is unknown (the pod may be bound with it).
    # A phantom goes when its reservation leaves the Lease (a failed bind released, an expired
    # one pruned), when its pod shows up bound (the pod's own booking takes over) or is deleted,
    # or after the cache's TTL for assumed pods.

    def _add_phantom(self, node: str, r: Reservation, *, ours: bool = False) -> None:
        if r.pod_uid in self._gone or r.uid in self._dead or r.uid in self._phantoms:
            return
        if not ours and self.cache.get_pod(r.pod_uid) is not None:
            return  # our own bind of it is in flight, or it is bound: counted already
        namespace, _, name = r.pod.partition("/")
        phantom = {
            "metadata": {"name": name, "namespace": namespace, "uid": _phantom_key(r.uid)},
            "spec": {
                "nodeName": node,
                "containers": [
                    {
                        "name": "reserved",
                        "resources": {"requests": {RESOURCE_GPU: str(len(r.gpu_ids))}},
                    }
                ],
            },
        }
        assignment = Assignment(r.gpu_ids, (), r.vram_mib, r.uid)
        try:
            self.cache.assume_pod(phantom, node, assignment)
        except (CacheError, LedgerError) as exc:  # the node is not known yet: see _on_node
            log.debug("not counting reservation %s of %s: %s", r.uid, r.pod, exc)
            return
        self.cache.finish_binding(phantom)  # so that the TTL applies
        self._phantoms[r.uid] = r.pod_uid
        self._phantom_pods.setdefault(r.pod_uid, set()).add(r.uid)

    def _drop_phantom(self, reservation_uid: str, *, wake: bool = True) -> None:
        pod_uid = self._phantoms.pop(reservation_uid, None)
        if pod_uid is None:
            return
        others = self._phantom_pods.get(pod_uid)
        if others is not None:
            others.discard(reservation_uid)
            if not others:
                del self._phantom_pods[pod_uid]
        if wake:
            self._forget_assumed(_phantom_key(reservation_uid))
        else:
            self.cache.forget_pod(_phantom_key(reservation_uid))

    def _drop_phantoms_of(self, pod_uid: str, *, wake: bool) -> None:
        for reservation_uid in list(self._phantom_pods.get(pod_uid, ())):
            self._drop_phantom(reservation_uid, wake=wake)

    def _forget_assumed(self, pod_uid: str) -> None:
        """Forget an assumed pod (a phantom, or a failed bind of ours) and tell the queue, as
        upstream does on a failed binding: its devices are free again (an assigned pod's
        deletion, to the plugins' queueing hints)."""
        assumed = self.cache.get_pod(pod_uid)
        node = self.cache.pod_node(pod_uid)
        if assumed is None or not self.cache.forget_pod(pod_uid):
            return
        spec = assumed.get("spec") or {}
        if not spec.get("nodeName"):
            assumed = {**assumed, "spec": {**spec, "nodeName": node or ""}}
        self._emit("Pod/Delete", assumed, None)

    def _on_pod(self, kind: str, pod: dict[str, Any], old: dict[str, Any] | None) -> None:
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
                for fw in self.frameworks.values():
                    fw.reject_waiting_pod(uid, "", "the pod was deleted")
                self._drop_phantoms_of(uid, wake=True)
            self.events.forget(uid)
            self._mark_gone(uid)
            return
        if spec.get("nodeName"):
            self.queue.delete(pod)
            self._drop_phantoms_of(uid, wake=False)  # the pod's own booking takes over
            self.cache.update_pod(pod)
            if phase in _TERMINAL:
                self._mark_gone(uid)
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
            return
        if uid in self._binding or self.cache.is_assumed(uid):
            return  # our decision is being bound; this is an older view of the pod
        info = self.queue.update(old, pod) if old is not None else self.queue.add(pod)
        if info.error:
            self.events.failed_scheduling(pod, info.error)

    def _emit(self, event: str, old: Any, new: Any) -> None:
        """Tell the queue of a cluster event: it moves the unschedulable pods that a plugin
        which rejected them registered for, and whose queueing hint says the event may help
        (upstream's ``MoveAllToActiveOrBackoffQueue`` with queueing hints)."""
        by_plugin = self._hints.get(event)
        if not by_plugin:
            return

        def hint(info: QueuedPodInfo) -> bool:
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

    def _count_lease_conflicts(self) -> None:
        """Move the writer's 409s since the last call into the metric. A global running
        difference, not one per binding cycle: with group commit several cycles wait on one
        write, and each would count its conflicts again."""
        total = self.reservations.conflicts
        if total > self._conflicts_counted:
            self.metrics.lease_conflicts.inc(total - self._conflicts_counted)
            self._conflicts_counted = total

    def _forget_binding(self, uid: str) -> None:
        self._binding.pop(uid, None)

    def _mark_gone(self, uid: str) -> None:
        self._gone[uid] = None
        self._gone.move_to_end(uid)
        while len(self._gone) > 100_000:
            self._gone.popitem(last=False)

    # ------------------------------------------------------------------ running

    async def run(self) -> None:
        """Sync the informers, then schedule until cancelled; stops gracefully."""
        tasks = [
            asyncio.create_task(inf.run(), name=f"informer-{inf.name}") for inf in self.informers
        ]
        tasks.append(asyncio.create_task(self.events.run(), name="event-recorder"))
        try:
            for inf in self.informers:
                await inf.synced.wait()
            log.info("%s: informers synced; scheduling", self.identity)
            self.ready.set()
            tasks.append(asyncio.create_task(self.queue.run(), name="queue-flush"))
            tasks.append(
                asyncio.create_task(
                    self.cache.run_cleanup(on_expired=self._on_assumed_expired),
                    name="cache-cleanup",
                )
            )
            tasks.append(asyncio.create_task(self._collect_reservations(), name="reservation-gc"))
            tasks.append(asyncio.create_task(self._publish_gpu_metrics(), name="gpu-metrics"))
            if self.config.replicas.shares:  # deletes its membership Lease when cancelled
                tasks.append(
                    asyncio.create_task(self.membership.keep(self.kube), name="replica-membership")
                )
            await self._loop()
        finally:
            self.queue.close()
            await self._finish_binds()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _loop(self) -> None:
        while True:
            try:
                info = await self.queue.pop()
            except QueueClosed:
                return
            self.schedule_one(info)
            pending = self.queue.pending_pods()
            for queue_name, count in pending.items():
                self.metrics.pending_pods.labels(queue=queue_name).set(count)
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
        if fw is None or not self.membership.takes(info.uid, fw.profile_name):
            # Another live replica's pod: left to it (queued again if it leaves).
            self.queue.done(info.uid, info.cycle)
            return SchedulingResult(None)
        if self.cache.is_assumed(info.uid):
            # Bound by us a moment ago, and the informer has not shown it yet: wait for it.
            self.queue.requeue_after_error(info)
            return SchedulingResult(None)
        state = CycleState(record_plugin_metrics=self.rng.random() < 0.1)
        self.cache.update_snapshot(self.snapshot)
        try:
            result = self.find_placement(fw, state, pod)
        except Exception as exc:  # a plugin bug: the pod backs off, the scheduler goes on
            log.exception("scheduling %s failed", _key(pod))
            self._attempt("error", fw, started)
            self.queue.requeue_after_error(info)
            self.events.failed_scheduling(pod, f"scheduler error: {exc}", reason="SchedulerError")
            return SchedulingResult(None, status=Status.error(exc))
        if result.node is None:
            self._unschedulable(fw, info, result, started)
            return result
        node = result.node
        assignment = result.assignment or Assignment((), (), (), "")
        assignment = Assignment(
            assignment.gpu_ids,
            assignment.gpu_uuids,
            assignment.vram_mib,
            str(uuid.UUID(int=self._ids.getrandbits(128), version=4)),
        )
        try:
            self.cache.assume_pod(pod, node, assignment)
        except CacheError as exc:
            log.warning("assuming %s on %s failed: %s", _key(pod), node, exc)
            self._attempt("error", fw, started)
            self.queue.requeue_after_error(info)
            return SchedulingResult(None, status=Status.error(exc))
        from gpusched.plugins.default_binder import ASSIGNMENT

        state.write(ASSIGNMENT, assignment)
        status = fw.run_reserve(state, pod, node)
        if status.is_success:
            status = fw.run_permit(state, pod, node)
        if not (status.is_success or status.is_wait):
            fw.run_unreserve(state, pod, node)
            self.cache.forget_pod(pod)  # nothing was bound: no event (upstream neither)
            if status.is_rejected:
                info.unschedulable_plugins = {status.plugin} if status.plugin else set()
                self.queue.add_unschedulable(info)
            else:
                self.queue.requeue_after_error(info)
            self.events.failed_scheduling(pod, status.message())
            self._attempt("unschedulable" if status.is_rejected else "error", fw, started)
            return SchedulingResult(None, status=status)
        task = asyncio.create_task(
            self._binding_cycle(fw, state, info, node, assignment, started),
            name=f"bind-{_key(pod)}",
        )
        self._binding[info.uid] = task
        uid = info.uid
        task.add_done_callback(lambda _task: self._forget_binding(uid))
        result.assignment = assignment
        return result

    def find_placement(
        self, fw: Framework, state: CycleState, pod: dict[str, Any]
    ) -> SchedulingResult:
        """PreFilter, then the pod's equivalence class or Filter (adaptive node sampling) and
        Score; select. Pure and synchronous."""
        pre, status = fw.run_pre_filter(state, pod)
        all_nodes = self.snapshot.node_infos()
        if not status.is_success:
            return SchedulingResult(None, status=status)
        nodes = all_nodes
        if pre is not None and pre.node_names is not None:
            nodes = [n for n in all_nodes if n.name in pre.node_names]
        n = len(nodes)
        if n == 0:
            return SchedulingResult(None, status=Status.unresolvable("no nodes available"))
        share = self.membership.share(fw.profile_name)  # None: alone, every node is ours
        if self.equivalence is not None and (pre is None or pre.node_names is None):
            signature = fw.sign_pod(pod)
            if signature is not None:
                placed = self.equivalence.place(fw, state, pod, signature, self.snapshot, share)
                if placed is not None:
                    return self._placed(state, placed)
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
        return SchedulingResult(
            chosen.name,
            _assignment(state, chosen.name),
            evaluated=evaluated,
            feasible=len(feasible),
        )

    @staticmethod
    def _placed(state: CycleState, placed: Placement) -> SchedulingResult:
        return SchedulingResult(
            placed.node,
            _assignment(state, placed.node) if placed.node is not None else None,
            statuses=placed.statuses,
            status=placed.status,
            evaluated=placed.evaluated,
            feasible=placed.feasible,
        )

    def _unschedulable(
        self, fw: Framework, info: QueuedPodInfo, result: SchedulingResult, started: float
    ) -> None:
        plugins = {s.plugin for s in result.statuses.values() if s.plugin}
        if result.status is not None and result.status.plugin:
            plugins.add(result.status.plugin)
        is_error = result.status is not None and result.status.is_error
        message = fit_error_message(self.snapshot.num_nodes, result)
        if is_error:
            self.queue.requeue_after_error(info)
        else:
            info.unschedulable_plugins = plugins
            self.queue.add_unschedulable(info)
        self.events.failed_scheduling(info.pod, message)
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
        pod = info.pod
        cycle = info.cycle
        reserved: Reservation | None = None
        try:
            async with self._bind_slots:
                status = await fw.wait_on_permit(pod)
                if not status.is_success:
                    raise _BindFailure("permit", status.message() or "rejected at permit")
                if assignment.gpu_ids:
                    reserved = self.reservations.new_reservation(
                        assignment.reservation_uid,
                        _key(pod),
                        info.uid,
                        assignment.gpu_ids,
                        assignment.vram_mib,
                    )
                    try:
                        await self.reservations.reserve(
                            node, reserved, known=self.leases.get(node), prunable=self._prunable
                        )
                    finally:
                        self._count_lease_conflicts()
                status = await fw.run_pre_bind(state, pod, node)
                if not status.is_success:
                    raise _BindFailure("prebind", status.message())
                if reserved is not None and (
                    reserved.expires - self.clock.now().timestamp() < self.bind_margin
                ):
                    raise _BindFailure(
                        "expired", "the device reservation is about to expire; trying again"
                    )
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
        except ReservationConflict as exc:
            await self._bind_failed(
                fw, state, info, node, None, "lease_conflict", str(exc), started
            )
            return
        except LeaseFormatError as exc:
            await self._bind_failed(fw, state, info, node, None, "lease_format", str(exc), started)
            return
        except _BindFailure as exc:
            await self._bind_failed(
                fw, state, info, node, reserved, exc.stage, exc.message, started, exc.outcome
            )
            return
        except APIError as exc:
            await self._bind_failed(fw, state, info, node, reserved, "api_error", str(exc), started)
            return
        self.cache.finish_binding(pod)
        self.queue.done(info.uid, cycle)
        self.scheduled += 1
        self.events.scheduled(pod, node)
        self._attempt("scheduled", fw, started)
        first = info.initial_attempt_timestamp
        if first is not None:
            self.metrics.pod_sli_duration.labels(attempts=str(min(info.attempts, 15))).observe(
                max(self.clock.monotonic() - first, 0.0)
            )
        await fw.run_post_bind(state, pod, node)

    async def _bind_failed(
        self,
        fw: Framework,
        state: CycleState,
        info: QueuedPodInfo,
        node: str,
        reserved: Reservation | None,
        reason: str,
        message: str,
        started: float,
        outcome: _Outcome | None = None,
    ) -> None:
        """Undo a binding cycle that did not bind the pod.

        ``outcome`` is what the API server said of the pod after a failed Binding
        (:meth:`_binding_outcome`); ``None`` when no Binding was sent, so the pod is unbound.
        The reservation is released only when the pod is known not to be bound with it; when
        that is unknown it stays until it expires unbound (``_prunable``). The pod goes back to
        the queue, with a FailedScheduling Event, unless it is gone or bound elsewhere (another
        replica won it: nothing to tell its owner).
        """
        pod = info.pod
        log.info("binding %s to %s failed (%s): %s", _key(pod), node, reason, message)
        self.failed_binds += 1
        self.metrics.bind_failures.labels(reason=reason).inc()
        fw.run_unreserve(state, pod, node)
        self._forget_assumed(info.uid)
        self.cache.finish_binding(pod)
        if outcome == _Outcome.UNKNOWN and reserved is not None:
            # The pod may be bound with these devices: they stay counted, as a phantom of the
            # reservation, until the pod shows up bound or the reservation leaves the Lease.
            self._add_phantom(node, reserved, ours=True)
        self._attempt("error", fw, started)
        if outcome in (_Outcome.GONE, _Outcome.ELSEWHERE):
            self.queue.done(info.uid, info.cycle)
        else:
            with contextlib.suppress(ValueError):  # the pod may have been deleted meanwhile
                self.queue.requeue_after_error(info)
            if reason != "lease_conflict":
                self.events.failed_scheduling(
                    pod, f"binding to {node} failed: {message}", reason="SchedulerError"
                )
        if reserved is not None and outcome != _Outcome.UNKNOWN:
            # Known not to hold the pod: if this release fails, the next write to the Lease
            # (or the collector) drops it (``_prunable``).
            self._dead[reserved.uid] = None
            while len(self._dead) > 10_000:
                self._dead.popitem(last=False)
            with contextlib.suppress(APIError, LeaseFormatError):
                await self.reservations.release(node, [reserved.uid])
            self._count_lease_conflicts()

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

    # ------------------------------------------------------------------ reservation GC

    def _prunable(self, r: Reservation) -> bool:
        """Whether a reservation no longer protects anything (see gpusched.reservations)."""
        if r.pod_uid in self._gone or r.uid in self._dead:
            return True
        pods = self.pods.items
        pod = pods.get(r.pod)
        if pod is not None and pod["metadata"].get("uid") == r.pod_uid:
            if (pod.get("status") or {}).get("phase") in _TERMINAL:
                return True
            if (pod.get("spec") or {}).get("nodeName"):
                # Bound: keep the reservation it is bound with while the pod may run; any
                # other one for it (a replica that lost the race) protects nothing.
                annotations = pod["metadata"].get("annotations") or {}
                return bool(annotations.get(RESERVATION_UID) != r.uid)
        # Absent, replaced or still unbound: only once expired (with a grace for slow watches).
        return r.expires + self.reservation_grace < self.clock.now().timestamp()

    async def _publish_gpu_metrics(self, period: float = 5.0) -> None:
        """GPUs and VRAM allocated per node, from the snapshot (O(nodes x GPUs) per period)."""
        while True:
            for node_info in self.snapshot.node_infos():
                devices = node_info.ledger.devices
                allocated = len(devices) - node_info.ledger.free_gpu_count
                vram = sum(d.reserved_mib for d in devices)
                self.metrics.node_gpus_allocated.labels(node=node_info.name).set(allocated)
                self.metrics.node_vram_allocated.labels(node=node_info.name).set(vram)
            await self.clock.sleep(period)

    async def _collect_reservations(self) -> None:
        while True:
            await self.clock.sleep(self.reservation_gc_period)
            for node, lease in list(self.leases.items()):
                stale = [uid for uid, r in lease.reservations.items() if self._prunable(r)]
                if stale:
                    with contextlib.suppress(APIError, LeaseFormatError):
                        await self.reservations.release(node, stale)
                    self._count_lease_conflicts()


class _Outcome(enum.Enum):
    """What the API server says of a pod whose Binding failed."""

    OURS = "bound with this cycle's decision (the Binding landed, its response was lost)"
    ELSEWHERE = "bound by someone else, or with another reservation"
    UNBOUND = "not bound"
    GONE = "deleted"
    UNKNOWN = "could not be read"


class _BindFailure(Exception):
    def __init__(self, stage: str, message: str, outcome: _Outcome | None = None) -> None:
        super().__init__(message)
        self.stage = stage
        self.message = message
        self.outcome = outcome
