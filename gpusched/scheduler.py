"""One gpusched replica: informers, the serial scheduling cycle, and asynchronous binding cycles.

The shape is kube-scheduler's (pkg/scheduler/schedule_one.go):

**Informers** (``gpusched.kube.reflector``) list and watch nodes, GPU inventories, all pods
(GPUs held by pods anyone bound count) and the reservation Leases, feeding the cache and the
queue. Nothing is scheduled before every informer has synced, so after a restart the
scheduler's state is rebuilt from the pods' assignment annotations and the Leases first.

**The scheduling cycle** (``schedule_one``) is serial and never awaits: pop a pod, update the
frozen snapshot, run PreFilter, Filter over the nodes (starting where the previous cycle
stopped, and stopping once enough feasible nodes are found: ``percentageOfNodesToScore``),
Score, pick the best node and the GPU set GPUFit chose on it, *assume* the pod in the cache
(the next cycle sees those GPUs as taken), Reserve, Permit, then start the binding cycle.

**The binding cycle** is an asyncio task per pod: wait on Permit, write the reservation into
the node's Lease (optimistic concurrency; ``gpusched.reservations``), PreBind, Bind (the
Binding carries the decision as annotations), PostBind. A failure anywhere unreserves, forgets
the assumed pod, releases the reservation and sends the pod back to the queue with backoff;
a pod whose bind keeps failing backs off exponentially, so it never starves the others.

Telling users why: a pod that fits nowhere gets a ``FailedScheduling`` Event and a
``PodScheduled=False`` condition with kube-scheduler's summary ("0/12 nodes are available:
4 Insufficient nvidia.com/gpu, 8 node(s) had untolerated taint {...}."), rate-limited.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
import uuid
from collections import Counter, OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpusched.annotations import Assignment
from gpusched.cache import SchedulerCache, Snapshot
from gpusched.cache.errors import CacheError
from gpusched.clock import Clock, RealClock
from gpusched.events import EventRecorder
from gpusched.framework import (
    CycleState,
    Framework,
    PluginRegistry,
    SchedulerConfiguration,
    Status,
    build_frameworks,
    in_tree,
)
from gpusched.inventory import InventoryError, inventory_from_object
from gpusched.kube.client import Kube, resource_path
from gpusched.kube.errors import APIError
from gpusched.kube.reflector import Reflector
from gpusched.metrics import Metrics
from gpusched.queue import QueueClosed, QueuedPodInfo, SchedulingQueue
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
        self.clock = clock or RealClock()
        self.metrics = metrics or Metrics()
        self.rng = rng or random.Random()
        self.frameworks: dict[str, Framework] = build_frameworks(
            self.config, registry or in_tree(), clock=self.clock, kube=kube
        )
        first = next(iter(self.frameworks.values()))
        self.cache = SchedulerCache(self.clock)
        self.snapshot = Snapshot()
        self.queue = SchedulingQueue(
            self.clock,
            first.queue_sort_key,
            initial_backoff=self.config.pod_initial_backoff_seconds,
            max_backoff=self.config.pod_max_backoff_seconds,
            max_in_unschedulable=self.config.pod_max_in_unschedulable_pods_duration,
            rng=self.rng,
        )
        res = self.config.reservations
        self.reservations = ReservationWriter(
            kube,
            res.namespace,
            self.identity,
            lease_duration=res.lease_duration_seconds,
            now=self.clock.now,
        )
        self.events = EventRecorder(kube, self.clock, instance=self.identity)
        self.leases: dict[str, NodeLease] = {}
        self._reservations_held = 0  # sum over self.leases, kept as Lease events arrive
        # Pods this replica saw deleted or finished: their reservations protect nothing.
        self._gone: OrderedDict[str, None] = OrderedDict()
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
        ]

    def _on_node(self, kind: str, node: dict[str, Any], old: dict[str, Any] | None) -> None:
        if kind == "DELETED":
            self.cache.remove_node(node)
            return
        if kind == "ADDED":
            self.cache.add_node(node)
        else:
            self.cache.update_node(node)
        self.queue.on_event("Node/Add" if kind == "ADDED" else "Node/Update")

    def _on_inventory(self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        name = obj["metadata"]["name"]
        inventory = None
        if kind != "DELETED":
            try:
                inventory = inventory_from_object(obj)
            except InventoryError as exc:
                log.warning("ignoring the GPU inventory of node %s: %s", name, exc)
        self.cache.set_inventory(name, inventory)
        self.queue.on_event("Node/Update")

    def _on_lease(self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        try:
            lease = NodeLease.from_object(obj)
        except LeaseFormatError as exc:
            log.error("%s", exc)
            return
        old_lease = self.leases.pop(lease.node, None)
        if old_lease is not None:
            self._reservations_held -= len(old_lease.reservations)
        if kind != "DELETED":
            self.leases[lease.node] = lease
            self._reservations_held += len(lease.reservations)
        self.metrics.reservations_held.set(self._reservations_held)
        if kind != "ADDED":
            self.queue.on_event("Lease/Update")

    def _on_pod(self, kind: str, pod: dict[str, Any], old: dict[str, Any] | None) -> None:
        meta = pod["metadata"]
        spec = pod.get("spec") or {}
        uid = meta["uid"]
        phase = (pod.get("status") or {}).get("phase", "")
        if kind == "DELETED":
            if spec.get("nodeName"):
                self.cache.remove_pod(pod)
                self.queue.on_event("Pod/Delete")
            else:
                self.queue.delete(pod)
                for fw in self.frameworks.values():
                    fw.reject_waiting_pod(uid, "", "the pod was deleted")
            self.events.forget(uid)
            self._mark_gone(uid)
            return
        if spec.get("nodeName"):
            self.queue.delete(pod)
            self.cache.update_pod(pod)
            was_running = (
                old is not None and (old.get("status") or {}).get("phase") not in _TERMINAL
            )
            if phase in _TERMINAL:
                self._mark_gone(uid)
                if was_running:
                    self.queue.on_event("Pod/Delete")
            return
        if spec.get("schedulerName") not in self.frameworks:
            return
        if meta.get("deletionTimestamp") or phase in _TERMINAL:
            self.queue.delete(pod)
            return
        if self.cache.is_assumed(uid) or uid in self._binding:
            return  # our decision is being bound; this is an older view of the pod
        info = self.queue.update(old, pod) if old is not None else self.queue.add(pod)
        if info.error:
            self.events.failed_scheduling(pod, info.error)

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
            tasks.append(asyncio.create_task(self.cache.run_cleanup(), name="cache-cleanup"))
            tasks.append(asyncio.create_task(self._collect_reservations(), name="reservation-gc"))
            tasks.append(asyncio.create_task(self._publish_gpu_metrics(), name="gpu-metrics"))
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
        if fw is None:
            self.queue.done(info.uid, info.cycle)
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
            assignment.gpu_ids, assignment.gpu_uuids, assignment.vram_mib, str(uuid.uuid4())
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
            self.cache.forget_pod(pod)
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
        """PreFilter, Filter (adaptive node sampling), Score, select; pure and synchronous."""
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
        wanted = num_feasible_nodes_to_find(n, self.config.percentage_of_nodes_to_score)
        feasible = []
        statuses: dict[str, Status] = {}
        start = self._next_start % n
        evaluated = 0
        run_filter = fw.run_filter
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
        if not feasible:
            return SchedulingResult(None, statuses=statuses, evaluated=evaluated)
        chosen = feasible[0]
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
                if node_score.score > best:
                    best, ties = node_score.score, 1
                    chosen_name = node_score.name
                elif node_score.score == best:
                    ties += 1
                    if self.rng.randrange(ties) == 0:
                        chosen_name = node_score.name
            chosen = next(ni for ni in feasible if ni.name == chosen_name)
        from gpusched.plugins.gpu_fit import choice_for

        choice = choice_for(state, chosen.name)
        assignment = None
        if choice is not None:
            assignment = Assignment(choice.gpu_ids, choice.uuids, choice.vram_mib, "")
        return SchedulingResult(
            chosen.name, assignment, evaluated=evaluated, feasible=len(feasible)
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
                    conflicts_before = self.reservations.conflicts
                    try:
                        await self.reservations.reserve(
                            node, reserved, known=self.leases.get(node), prunable=self._prunable
                        )
                    finally:
                        lost = self.reservations.conflicts - conflicts_before
                        if lost:
                            self.metrics.lease_conflicts.inc(lost)
                    self.metrics.api_writes.labels(resource="leases", verb="update").inc()
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
                if not status.is_success:
                    raise _BindFailure("bind", status.message() or "no bind plugin bound the pod")
                self.metrics.api_writes.labels(resource="pods/binding", verb="create").inc()
        except ReservationConflict as exc:
            await self._bind_failed(
                fw, state, info, node, None, "lease_conflict", str(exc), started
            )
            return
        except _BindFailure as exc:
            await self._bind_failed(
                fw, state, info, node, reserved, exc.stage, exc.message, started
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
    ) -> None:
        pod = info.pod
        log.info("binding %s to %s failed (%s): %s", _key(pod), node, reason, message)
        self.failed_binds += 1
        self.metrics.bind_failures.labels(reason=reason).inc()
        fw.run_unreserve(state, pod, node)
        self.cache.forget_pod(pod)
        self.cache.finish_binding(pod)
        with contextlib.suppress(ValueError):  # the pod may have been deleted meanwhile
            self.queue.requeue_after_error(info)
        self._attempt("error", fw, started)
        if reason != "lease_conflict":
            self.events.failed_scheduling(
                pod, f"binding to {node} failed: {message}", reason="SchedulerError"
            )
        if reserved is not None:
            with contextlib.suppress(APIError):
                await self.reservations.release(node, [reserved.uid])

    # ------------------------------------------------------------------ reservation GC

    def _prunable(self, r: Reservation) -> bool:
        """Whether a reservation no longer protects anything (see gpusched.reservations)."""
        if r.pod_uid in self._gone:
            return True
        pods = self.pods.items
        pod = pods.get(r.pod)
        if pod is not None and pod["metadata"].get("uid") == r.pod_uid:
            if (pod.get("status") or {}).get("phase") in _TERMINAL:
                return True
            if (pod.get("spec") or {}).get("nodeName"):
                return False  # bound: keep it while the pod may run
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
                    with contextlib.suppress(APIError):
                        await self.reservations.release(node, stale)


class _BindFailure(Exception):
    def __init__(self, stage: str, message: str) -> None:
        super().__init__(message)
        self.stage = stage
        self.message = message
