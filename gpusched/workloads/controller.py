"""``gpusched controller``: reconciles GPUWorkloads into Jobs whose pods gpusched schedules.

The I/O around :func:`gpusched.workloads.manager.reconcile`, on the
:class:`~gpusched.kube.controller.Controller` base: informers (list + watch) on GPUWorkloads,
on Jobs labelled ``gpu.warp.dev/workload`` and on their pods; one queue of workload keys, one
worker; per workload it creates the planned Job (a 409 means a previous run made it: Job
names are ``<workload>-<attempt>``, so a restarted controller finds its Jobs by label and
owner and never starts an attempt twice), writes the status with a ``PUT /status`` that
carries the resourceVersion it read (a 409 re-reads and reconciles again), records the Events
through gpusched's :class:`~gpusched.events.EventRecorder` and requeues the key for when a
retry is due (``add_after`` on its ``Clock``). After creating a Job it waits for the informer
to show it (an *expectation*, as kube-controller-manager's controllers keep) before it
reconciles that workload again.

Metrics (own registry, served by ``gpusched controller`` on ``/metrics``), named like
kube-controller-manager's: ``gpusched_workloads_scheduled_total{strategy}``,
``gpusched_workloads_failed_total{reason}``, ``gpusched_workloads_retries_total`` and
``gpusched_workloads_reconcile_duration_seconds{result}``; and client-go's ``workqueue_*``
metrics of its queue (``name="gpuworkload"``).

Cost: the pod informer holds only the workloads' pods (a label selector); a reconcile is
O(Jobs and pods of the workload).
"""

from __future__ import annotations

import copy
import logging
import random
from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from gpusched.clock import Clock
from gpusched.events import EventRecorder
from gpusched.kube.client import Kube, resource_path
from gpusched.kube.controller import Controller
from gpusched.kube.errors import APIConflict, APINotFound
from gpusched.kube.reflector import object_key
from gpusched.kube.workqueue import ItemExponentialRateLimiter, WorkqueueMetrics
from gpusched.workloads.manager import (
    GROUP,
    PLURAL,
    VERSION,
    WORKLOAD_LABEL,
    Plan,
    Settings,
    reconcile,
)

__all__ = ["WorkloadController", "WorkloadMetrics"]

log = logging.getLogger(__name__)

_RECONCILE_BUCKETS = tuple(0.0005 * 2**i for i in range(16))
API_RETRY = 5.0
"""Seconds before a workload whose reconcile failed on an API error is reconciled again."""
MAX_API_RETRY = 300.0
"""The doubling of ``API_RETRY`` per failure in a row stops here."""


class WorkloadMetrics:
    """The controller's Prometheus metrics, in a registry of their own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.scheduled = Counter(
            "gpusched_workloads_scheduled_total",
            "GPUWorkload attempts whose pod was bound to a node, by schedulingStrategy.",
            ["strategy"],
            registry=self.registry,
        )
        self.failed = Counter(
            "gpusched_workloads_failed_total",
            "GPUWorkloads that failed for good (RetriesExhausted) or were refused (InvalidSpec).",
            ["reason"],
            registry=self.registry,
        )
        self.retries = Counter(
            "gpusched_workloads_retries_total",
            "Attempts started after a failed one.",
            registry=self.registry,
        )
        self.reconcile_duration = Histogram(
            "gpusched_workloads_reconcile_duration_seconds",
            "Time to reconcile one GPUWorkload (API calls included), by result.",
            ["result"],
            buckets=_RECONCILE_BUCKETS,
            registry=self.registry,
        )
        self.workqueue = WorkqueueMetrics(self.registry)
        """client-go's ``workqueue_*`` metrics of the controller's queue (name gpuworkload)."""

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _owned_by(obj: Mapping[str, Any], uid: str) -> bool:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or ()
    return any(r.get("uid") == uid and r.get("controller") for r in refs)


class WorkloadController(Controller):
    """``await run()`` until cancelled; ``synced`` is set once the informers have listed.

    API errors are retried rate-limited per workload (5 s doubling to 5 min); a 409 reconciles
    again at once."""

    def __init__(
        self,
        kube: Kube,
        *,
        clock: Clock | None = None,
        settings: Settings | None = None,
        namespace: str | None = None,
        recorder: EventRecorder | None = None,
        metrics: WorkloadMetrics | None = None,
        rng: random.Random | None = None,
        workers: int = 1,
    ) -> None:
        self.metrics = metrics or WorkloadMetrics()
        super().__init__(
            "gpuworkload",
            workers=workers,
            clock=clock,
            rate_limiter=ItemExponentialRateLimiter(API_RETRY, MAX_API_RETRY),
            metrics=self.metrics.workqueue,
        )
        self.kube = kube
        self.settings = settings or Settings()
        self.recorder = recorder or EventRecorder(kube, self.clock, component="gpusched-controller")
        self.rng = rng or random.Random()
        self.workloads = self.informer(
            kube,
            resource_path(GROUP, VERSION, PLURAL, namespace),
            self._on_workload,
            name="gpuworkloads",
        )
        self.jobs = self.informer(
            kube,
            resource_path("batch", "v1", "jobs", namespace),
            self._on_child,
            label_selector=WORKLOAD_LABEL,
            name="jobs",
        )
        self.pods = self.informer(
            kube,
            resource_path("", "v1", "pods", namespace),
            self._on_child,
            label_selector=WORKLOAD_LABEL,
            name="pods",
        )
        self.background("events", self.recorder.run)
        self._expected: dict[str, str] = {}  # workload key -> Job created, not yet seen
        self._written: dict[str, tuple[str, dict[str, Any]]] = {}  # key -> (rv read, written)
        self.reconciles = 0

    # ------------------------------------------------------------------ events

    def _on_workload(self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        key = object_key(obj)
        if kind == "DELETED":
            self._expected.pop(key, None)
            self._written.pop(key, None)
            return
        self.queue.add(key)

    def _on_child(self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        meta = obj["metadata"]
        name = (meta.get("labels") or {}).get(WORKLOAD_LABEL)
        if not name:
            return
        key = f"{meta.get('namespace')}/{name}"
        if self._expected.get(key) == meta.get("name"):
            del self._expected[key]
        self.queue.add(key)

    def observe(self, key: str, result: str, seconds: float) -> None:
        self.metrics.reconcile_duration.labels(result).observe(seconds)

    # ------------------------------------------------------------------ reconcile

    def _current(self, key: str) -> dict[str, Any] | None:
        obj = self.workloads.items.get(key)
        if obj is None:
            return None
        written = self._written.get(key)
        if written is not None and written[0] == obj["metadata"].get("resourceVersion"):
            return written[1]  # our status write, not yet seen by the informer
        return obj

    async def sync(self, key: str) -> None:
        workload = self._current(key)
        if workload is None or workload["metadata"].get("deletionTimestamp"):
            return
        if key in self._expected:
            return  # the Job just created is not in the informer yet: its event requeues
        self.reconciles += 1
        meta = workload["metadata"]
        uid, namespace, name = meta.get("uid", ""), meta.get("namespace"), meta["name"]
        jobs = [j for j in self.jobs.items.values() if _owned_by(j, uid)]
        job_uids = {j["metadata"].get("uid") for j in jobs}
        pods = [
            p
            for p in self.pods.items.values()
            if p["metadata"].get("namespace") == namespace
            and any(r.get("uid") in job_uids for r in p["metadata"].get("ownerReferences") or ())
        ]
        plan = reconcile(workload, jobs, pods, self.clock.now(), self.settings, self.rng)
        if plan.create_job is not None:
            await self._create_job(key, plan.create_job)
        await self._write_status(key, workload, plan)
        self._record(workload, plan)
        if plan.requeue_after is not None:
            self.queue.add_after(key, plan.requeue_after)
        log.debug("controller: %s: phase %s", name, plan.status.get("phase"))

    async def _create_job(self, key: str, job: dict[str, Any]) -> None:
        meta = job["metadata"]
        path = resource_path("batch", "v1", "jobs", meta.get("namespace"))
        try:
            await self.kube.create(path, job)
        except APIConflict as exc:
            if exc.reason != "AlreadyExists":
                raise
            log.info("controller: Job %s exists already (made before a restart)", meta["name"])
        if not any(
            j["metadata"]["name"] == meta["name"]
            and j["metadata"].get("namespace") == meta.get("namespace")
            for j in self.jobs.items.values()
        ):
            self._expected[key] = meta["name"]

    async def _write_status(self, key: str, workload: dict[str, Any], plan: Plan) -> None:
        if plan.status == (workload.get("status") or {}):
            return
        meta = workload["metadata"]
        body = copy.deepcopy(workload)
        body["status"] = plan.status
        path = resource_path(GROUP, VERSION, PLURAL, meta.get("namespace"), meta["name"], "status")
        try:
            written: dict[str, Any] = await self.kube.replace(path, body)
        except APINotFound:
            return
        self._written[key] = (str(meta.get("resourceVersion", "")), written)

    def _record(self, workload: dict[str, Any], plan: Plan) -> None:
        regarding = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "GPUWorkload",
            "metadata": workload["metadata"],
        }
        for type_, reason, message in plan.events:
            self.recorder.eventf(regarding, type_, reason, "Reconcile", message)
        strategy = str((workload.get("spec") or {}).get("schedulingStrategy") or "leastLoaded")
        if plan.scheduled:
            self.metrics.scheduled.labels(strategy).inc()
        if plan.failed_reason:
            self.metrics.failed.labels(plan.failed_reason).inc()
        if plan.retried:
            self.metrics.retries.inc()
