"""``gpusched sim run``: a simulated cluster, the scheduler and a workload, end to end.

Starts ``SimCluster`` (API server, kubelets, fleet), a ``Scheduler`` talking to it over HTTPS
like any client, replays the workload's arrivals, prints progress once a second, and ends
when every pod has finished or can make no more progress (or at ``timeout``), with a summary:
pods bound, pods still pending with the reason the scheduler gave them, GPU utilisation per
pool, and scheduling latency percentiles (creation to binding, as observed by a watch).

VRAM per GPU kind (product): what the scheduler reserved, read back from the bound pods'
``gpusched.io/reserved-vram-mib`` annotations (the record any client sees, not the
scheduler's memory), against the fleet's inventories. Each device in ``gpusched.io/gpu-uuids``
(a GPU or a MIG device) maps to its GPU's product; a pod with no VRAM annotated counts its
devices' whole memory. The summary gives the peak over the run, sampled whenever the watch
delivers a change (O(pods) a sample, like the GPU utilisation), and how many pods of each
shape (shared, exclusive, MIG, whole) were bound on that kind.

Claims (a wave with ``claim:``, :mod:`gpusched.sim.workload`): the run creates each pod's
GpuClaim or its wave's ResourceClaimTemplate before the pod, publishes the fleet for DRA
(``ClusterSpec.dra``) when a wave asks for ResourceClaims, and runs the simulated resourceclaim
controller (which makes each DRA pod's claim and deletes it once the pod is done). It deletes
a GpuClaim once its pod has finished (the scheduler's in-use finalizer holds the deletion
until the claim is Released). Two more watches (GpuClaims, ResourceClaims of the workload)
tell the summary, per kind, how many claim pods bound and how many got their claim allocated
to them (GpuClaim ``status.phase: Allocated`` naming the pod; ResourceClaim
``status.allocation`` and ``reservedFor`` the pod); a DRA pod's GPUs count towards utilisation
from its claim's allocation.

Recorded for ``--output run.json`` and ``--report`` (:mod:`gpusched.sim.report`): from the same
pod watch, each pod's start and finish times, the distinct ``PodScheduled=False`` messages it
was given, its last object once deleted, and a DRA pod's GPU indices from its claim; O(1) a
pod event, the records built once at the end, only when asked for.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import statistics
import sys
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, TextIO

from gpusched.annotations import AnnotationError, parse_assignment
from gpusched.clock import RealClock
from gpusched.gpu_requests import gpuclaim
from gpusched.gpu_requests.native import EXCLUSIVE, RESOURCE_SHARED_GPU
from gpusched.kube.client import Kube, resource_path
from gpusched.kube.errors import APIConflict, APINotFound
from gpusched.kube.reflector import Handler, Reflector
from gpusched.priority import pod_priority
from gpusched.scheduler import Scheduler
from gpusched.sim.cluster import SimCluster
from gpusched.sim.fleet import ClusterSpec, SimNode, build_fleet
from gpusched.sim.report import (
    NodeRecord,
    PendingReason,
    PodRecord,
    RunFile,
    Summary,
    format_mib,
    percentile,
    priority_name,
    write_report,
    write_run,
)
from gpusched.sim.workload import (
    WAVE_LABEL,
    WORKLOAD_LABEL,
    Workload,
    claim_objects,
    replay,
)
from gpusched.webhook.mutate import MIG_FALLBACK_APPLIED

__all__ = [
    "CLAIM_KIND_NAMES",
    "RunReport",
    "format_mib",
    "pod_shape",
    "priority_label",
    "run_workload",
    "summary",
]

CLAIM_KIND_NAMES = {"gpuclaim": "GpuClaim", "dra": "ResourceClaim (DRA)"}
"""How the summary names the pods of each ``claim:`` kind."""


@dataclass
class RunReport:
    created: int = 0
    bound: int = 0
    succeeded: int = 0
    failed: int = 0
    pending: dict[str, str] = field(default_factory=dict)  # pod -> last PodScheduled message
    latencies: list[float] = field(default_factory=list)  # seconds, creation -> bound
    latencies_by_priority: dict[str, list[float]] = field(default_factory=dict)
    """The pod's priority (:func:`priority_label`) -> its pods' latencies, seconds."""
    preempted: int = 0
    """Pods evicted to make room for others (a ``DisruptionTarget`` condition seen)."""
    gpu_seconds_used: dict[str, float] = field(default_factory=dict)  # per pool
    gpu_seconds_total: dict[str, float] = field(default_factory=dict)
    elapsed: float = 0.0
    gpus_by_pool: dict[str, int] = field(default_factory=dict)
    accounted_at: float | None = None
    mig_fallbacks: Counter[str] = field(default_factory=Counter)
    """``"2g.20gb->1g.10gb"`` -> pods the admission webhook moved to a fallback MIG profile."""
    vram_total_mib: dict[str, int] = field(default_factory=dict)
    """GPU product -> VRAM of all its GPUs in the fleet, MiB."""
    vram_peak_mib: dict[str, int] = field(default_factory=dict)
    """GPU product -> most VRAM reserved at once by bound, unfinished pods, MiB."""
    pods_by_product: dict[str, Counter[str]] = field(default_factory=dict)
    """GPU product -> pod shape (:func:`pod_shape`) -> pods bound on it."""
    claim_pods: Counter[str] = field(default_factory=Counter)
    """Claim kind (``gpuclaim``, ``dra``) -> the workload's pods of that kind."""
    claim_bound: Counter[str] = field(default_factory=Counter)
    """Claim kind -> its pods bound."""
    claim_allocated: Counter[str] = field(default_factory=Counter)
    """Claim kind -> its pods whose claim was seen allocated to them (module docstring)."""
    gpuclaims_deleted: int = 0
    """GpuClaims the run deleted after their pods finished."""
    gpuclaims_left: int = 0
    """The workload's GpuClaims still stored at the end (their pods still run, or a deletion
    waits on the in-use finalizer)."""

    def percentile(self, p: float, latencies: list[float] | None = None) -> float:
        return percentile(self.latencies if latencies is None else latencies, p)


def priority_label(pod: dict[str, Any]) -> str:
    """How the summary names a pod's priority (:func:`gpusched.priority.pod_priority`)."""
    priority = pod_priority(pod)
    return priority_name(priority.level, priority.value)


class _Observer:
    """Watches the workload's pods: when each was created, bound, started and finished, its
    pending messages, GPU use over time; what run.json records (:meth:`records`)."""

    def __init__(self, kube: Kube, workload: Workload, clock: RealClock) -> None:
        self.kube = kube
        self.clock = clock
        self.selector = f"{WORKLOAD_LABEL}={workload.name}"
        self.pods: dict[str, dict[str, Any]] = {}
        self.seen_at: dict[str, float] = {}
        self.bound_at: dict[str, float] = {}
        self.priority: dict[str, str] = {}
        self.preempted: set[str] = set()
        self.changed = asyncio.Event()
        self.claim_kind = {w.name: w.pod.claim for w in workload.waves if w.pod.claim}
        """Wave -> its pods' claim kind."""
        self.allocated: set[str] = set()
        """Pods (``ns/name``) whose claim was seen allocated to them."""
        self.dra_devices: dict[str, int] = {}
        """DRA pod -> devices its claim's allocation holds."""
        self.gpuclaims = {
            f"{o['metadata']['namespace']}/{o['metadata']['name']}"
            for objs in claim_objects(workload).values()
            for o in objs
            if o["kind"] == gpuclaim.KIND
        }
        """The GpuClaims the run creates (``ns/name``), each deleted once its pod is done."""
        self.to_delete: asyncio.Queue[str] = asyncio.Queue()
        self.deleted = 0
        self.started_at: dict[str, float] = {}
        self.finished_at: dict[str, float] = {}
        self.reasons: dict[str, list[tuple[float, str, str]]] = {}
        """Pod -> each distinct ``PodScheduled=False`` (time, reason, message) seen, in order."""
        self.gone: dict[str, dict[str, Any]] = {}
        """Deleted pods -> their last object (for run.json)."""
        self.dra_gpus: dict[str, list[tuple[str, int]]] = {}
        """DRA pod -> (node, GPU index) of each device its claim's allocation holds."""

    async def run(self) -> None:
        watches: list[tuple[str, str, Handler]] = [
            ("pods", resource_path("", "v1", "pods"), self._on_pod)
        ]
        kinds = set(self.claim_kind.values())
        if "gpuclaim" in kinds:
            path = resource_path(gpuclaim.GROUP, gpuclaim.VERSION, gpuclaim.PLURAL)
            watches.append(("gpuclaims", path, self._on_gpuclaim))
        if "dra" in kinds:
            path = resource_path("resource.k8s.io", "v1", "resourceclaims")
            watches.append(("resourceclaims", path, self._on_resourceclaim))
        reflectors = [
            Reflector(
                self.kube, path, handler=handler, label_selector=self.selector, name=f"sim-{name}"
            )
            for name, path, handler in watches
        ]
        tasks = [asyncio.create_task(r.run(), name=f"sim-run-{r.name}") for r in reflectors]
        if self.gpuclaims:
            tasks.append(asyncio.create_task(self._delete_claims(), name="sim-run-gpuclaims"))
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def kind_of(self, pod: dict[str, Any]) -> Literal["gpuclaim", "dra"] | None:
        """The pod's claim kind (``gpuclaim``, ``dra``), from its wave; ``None`` for none."""
        wave = ((pod.get("metadata") or {}).get("labels") or {}).get(WAVE_LABEL, "")
        return self.claim_kind.get(wave)

    def _on_gpuclaim(self, kind: str, claim: dict[str, Any], old: dict[str, Any] | None) -> None:
        status = claim.get("status") or {}
        if status.get("phase") == "Allocated":
            ns = claim["metadata"]["namespace"]
            self.allocated.update(f"{ns}/{pod}" for pod in status.get("pods") or ())
            self.changed.set()

    def _on_resourceclaim(
        self, kind: str, claim: dict[str, Any], old: dict[str, Any] | None
    ) -> None:
        status = claim.get("status") or {}
        allocation = status.get("allocation")
        if not allocation:
            return
        ns = claim["metadata"]["namespace"]
        results = (allocation.get("devices") or {}).get("results") or ()
        gpus = [g for r in results if (g := _dra_gpu(r)) is not None]
        for consumer in status.get("reservedFor") or ():
            if consumer.get("resource") == "pods" and not consumer.get("apiGroup"):
                key = f"{ns}/{consumer.get('name')}"
                self.allocated.add(key)
                self.dra_devices[key] = len(results)
                self.dra_gpus[key] = gpus
        self.changed.set()

    async def _delete_claims(self) -> None:
        """Delete each GpuClaim the run made once its pod is done (or gone)."""
        while True:
            ns, name = (await self.to_delete.get()).split("/", 1)
            path = resource_path(gpuclaim.GROUP, gpuclaim.VERSION, gpuclaim.PLURAL, ns, name)
            try:
                with contextlib.suppress(APINotFound):
                    await self.kube.delete(path)
                    self.deleted += 1
            finally:
                self.to_delete.task_done()

    async def claims_left(self, wait: float) -> int:
        """Once every deletion is sent, the workload's GpuClaims still stored after at most
        ``wait`` seconds (a deleted claim goes when its in-use finalizer does)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.to_delete.join(), timeout=wait)
        deadline = self.clock.monotonic() + wait
        path = resource_path(gpuclaim.GROUP, gpuclaim.VERSION, gpuclaim.PLURAL)
        while True:
            left = await self.kube.get(path, {"labelSelector": self.selector})
            if not left["items"] or self.clock.monotonic() >= deadline:
                return len(left["items"])
            await self.clock.sleep(0.2)

    def _on_pod(self, kind: str, pod: dict[str, Any], old: dict[str, Any] | None) -> None:
        key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        now = self.clock.monotonic()
        phase = (pod.get("status") or {}).get("phase")
        if kind == "DELETED" or phase in ("Succeeded", "Failed"):
            claim = f"{pod['metadata']['namespace']}/{gpuclaim.claim_name(pod)}"
            if claim in self.gpuclaims:
                self.gpuclaims.discard(claim)
                self.to_delete.put_nowait(claim)
        self.seen_at.setdefault(key, now)
        if (pod.get("spec") or {}).get("nodeName") and key not in self.bound_at:
            self.bound_at[key] = now
        if phase == "Running":
            self.started_at.setdefault(key, now)
        if kind == "DELETED" or phase in ("Succeeded", "Failed"):
            self.finished_at.setdefault(key, now)
        for c in (pod.get("status") or {}).get("conditions") or ():
            if c.get("type") == "PodScheduled" and c.get("status") == "False":
                seen = self.reasons.setdefault(key, [])
                message = c.get("message", "")
                if not seen or seen[-1][2] != message:
                    seen.append((now, c.get("reason", ""), message))
        self.priority.setdefault(key, priority_label(pod))
        if key not in self.preempted and any(
            c.get("type") == "DisruptionTarget" and c.get("status") == "True"
            for c in (pod.get("status") or {}).get("conditions") or ()
        ):
            self.preempted.add(key)
        if kind == "DELETED":
            self.pods.pop(key, None)
            self.gone[key] = pod
        else:
            self.pods[key] = pod
        self.changed.set()

    def records(self, start: float) -> list[PodRecord]:
        """Every pod seen, for run.json; times in seconds since ``start`` (monotonic)."""
        out = []
        for key, pod in sorted({**self.gone, **self.pods}.items()):
            meta = pod.get("metadata") or {}
            spec = pod.get("spec") or {}
            node = spec.get("nodeName") or None
            try:
                assignment = parse_assignment(pod) if node else None
            except AnnotationError:
                assignment = None
            if assignment is not None:
                gpus = list(assignment.gpu_ids)
            else:
                gpus = [index for on, index in self.dra_gpus.get(key, ()) if on == node]
            priority = pod_priority(pod)

            def since(times: dict[str, float], key: str = key) -> float | None:
                return round(times[key] - start, 4) if key in times else None

            out.append(
                PodRecord(
                    namespace=meta.get("namespace", ""),
                    name=meta.get("name", ""),
                    wave=(meta.get("labels") or {}).get(WAVE_LABEL, ""),
                    priority=priority.level,
                    spec_priority=priority.value,
                    shape=pod_shape(pod),
                    claim=self.kind_of(pod),
                    node=node,
                    gpus=gpus,
                    gpu_uuids=list(assignment.gpu_uuids) if assignment else [],
                    vram_mib=list(assignment.vram_mib) if assignment else [],
                    created=since(self.seen_at) or 0.0,
                    bound=since(self.bound_at),
                    started=since(self.started_at),
                    finished=since(self.finished_at),
                    phase=(pod.get("status") or {}).get("phase", "Pending"),
                    deleted=key in self.gone and key not in self.pods,
                    preempted=key in self.preempted,
                    pending_reasons=[
                        PendingReason(at=round(t - start, 4), reason=reason, message=message)
                        for t, reason, message in self.reasons.get(key, ())
                    ],
                )
            )
        return out

    def counts(self) -> Counter[str]:
        out: Counter[str] = Counter()
        for pod in self.pods.values():
            phase = (pod.get("status") or {}).get("phase", "Pending")
            bound = bool((pod.get("spec") or {}).get("nodeName"))
            out[phase if bound or phase != "Pending" else "Unbound"] += 1
        return out


def _dra_gpu(result: dict[str, Any]) -> tuple[str, int] | None:
    """(node, GPU index) of a DRA allocation result: the simulated driver names a node's pool
    after the node and its devices ``gpu-N`` or ``gpu-N-mig-...``
    (:mod:`gpusched.sim.resource_slices`)."""
    parts = str(result.get("device", "")).split("-")
    if len(parts) >= 2 and parts[0] == "gpu" and parts[1].isdigit():
        return str(result.get("pool", "")), int(parts[1])
    return None


async def run_workload(
    spec: ClusterSpec,
    workload: Workload,
    *,
    timeout: float = 600.0,
    out: TextIO = sys.stdout,
    progress: bool = True,
    freeze_gc: bool = False,
    webhook: bool = True,
    output: str | Path | None = None,
    html: str | Path | None = None,
) -> RunReport:
    """Run ``workload`` on a fresh simulated ``spec`` cluster; print progress and a summary.

    ``freeze_gc``: ``gc.collect(); gc.freeze()`` once the scheduler's informers have synced, as
    ``gpusched scheduler`` does (why: ``gpusched.cli._gc_around_sync``). For the
    ``gpusched sim run`` command only: it affects the whole process, and what is frozen (the
    simulated API server's objects too, here) stays out of every later collection.

    ``webhook``: serve and register gpusched's admission webhook in the cluster
    (``gpusched.sim.webhook``), so the workload's pods are validated, get their device
    environment and fall back to another MIG profile at admission, as on a real cluster.

    ``output``: write run.json there (:mod:`gpusched.sim.report`); ``html``: the report page
    (needs matplotlib: check with ``report.require_plotting()`` before a long run).
    """
    clock = RealClock()
    report = RunReport()
    kinds = {w.pod.claim for w in workload.waves if w.pod.claim and w.count}
    if "dra" in kinds and not spec.dra:
        spec = spec.model_copy(update={"dra": True})
        print(
            f"publishing {spec.name}'s GPUs for DRA too (ResourceSlices, DeviceClasses): the "
            "workload has ResourceClaimTemplate pods",
            file=out,
            flush=True,
        )
    async with SimCluster(
        spec, clock=clock, webhook=webhook, telemetry=10.0, resource_claims=True
    ) as sim:
        if sim.webhook is not None:
            print(f"admission webhook at {sim.webhook.url}", file=out, flush=True)
        with contextlib.suppress(APIConflict):  # the webhook's namespace too
            await sim.kube.create(
                "/api/v1/namespaces",
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpusched-system"}},
            )
        scheduler = Scheduler(Kube(sim.api_client()), clock=clock, identity="gpusched-sim-run")
        observer = _Observer(Kube(sim.api_client()), workload, clock)
        tasks = [
            asyncio.create_task(scheduler.run(), name="scheduler"),
            asyncio.create_task(observer.run(), name="observer"),
        ]
        replayer: asyncio.Task[Any] | None = None
        try:
            await asyncio.wait_for(scheduler.ready.wait(), timeout=60)
            if freeze_gc:
                gc.collect()
                gc.freeze()
            start = clock.monotonic()
            started_at = datetime.now(UTC)
            replayer = asyncio.create_task(replay(sim.kube, workload, clock), name="replay")
            report.gpus_by_pool = _gpus_by_pool(spec)
            fleet = build_fleet(spec)
            pool_of = {n.name: n.pool for n in fleet}
            devices = _Devices(fleet)
            report.vram_total_mib = dict(devices.total_mib)
            last_progress = -1.0
            stalled_since: float | None = None
            last_counts: Counter[str] = Counter()
            while True:
                now = clock.monotonic() - start
                counts = observer.counts()
                _account(report, observer, pool_of)
                _account_vram(report, observer, devices)
                if progress and now - last_progress >= 1.0:
                    last_progress = now
                    print(_progress_line(now, workload, counts), file=out, flush=True)
                finished = counts["Succeeded"] + counts["Failed"]
                if replayer.done() and finished == workload.pod_count:
                    break
                if replayer.done() and counts == last_counts and counts["Running"] == 0:
                    stalled_since = stalled_since if stalled_since is not None else now
                    if now - stalled_since >= 10:
                        break  # nothing runs and nothing changes: the rest cannot be placed
                else:
                    stalled_since = None
                last_counts = counts
                if now >= timeout:
                    print(f"timeout after {timeout:.0f}s", file=out)
                    break
                observer.changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(observer.changed.wait(), timeout=0.5)
            report.elapsed = clock.monotonic() - start
            _final(report, observer)
            _count_claims(report, observer)
            if report.claim_pods["gpuclaim"]:
                report.gpuclaims_left = await observer.claims_left(wait=5.0)
            _count_shapes(report, observer, devices)
            run = (
                _run_file(report, observer, spec, workload, fleet, start, started_at)
                if output is not None or html is not None
                else None
            )
        finally:
            for t in tasks:
                t.cancel()
            if replayer is not None:
                replayer.cancel()
                await asyncio.gather(replayer, return_exceptions=True)
            await asyncio.gather(*tasks, return_exceptions=True)
    print(summary(report, spec, workload), file=out, flush=True)
    if run is not None and output is not None:
        write_run(run, output)
        print(f"wrote {output}", file=out, flush=True)
    if run is not None and html is not None:
        write_report(run, html)
        print(f"wrote {html}", file=out, flush=True)
    return report


def _run_file(
    report: RunReport,
    observer: _Observer,
    spec: ClusterSpec,
    workload: Workload,
    fleet: list[SimNode],
    start: float,
    started_at: datetime,
) -> RunFile:
    """What run.json holds: the pods the observer saw, the fleet, the summary."""
    nodes = [
        NodeRecord(
            name=n.name,
            pool=n.pool,
            product=n.inventory.gpus[0].product if n.inventory and n.inventory.gpus else None,
            gpus=len(n.inventory.gpus) if n.inventory else 0,
        )
        for n in fleet
    ]
    fields = {f.name: getattr(report, f.name) for f in dataclasses.fields(report)}
    del fields["accounted_at"]  # bookkeeping of _account, not a result
    return RunFile(
        cluster=spec.name,
        workload=workload.name,
        description=workload.description,
        started_at=started_at.isoformat(timespec="seconds").replace("+00:00", "Z"),
        nodes=nodes,
        pods=observer.records(start),
        summary=Summary.model_validate(fields),
    )


def _gpus_by_pool(spec: ClusterSpec) -> dict[str, int]:
    return {p.name: p.count * (p.gpu.count if p.gpu is not None else 0) for p in spec.pools}


def _account(report: RunReport, observer: _Observer, pool_of: dict[str, str]) -> None:
    """Integrate GPUs in use per pool over time (for utilisation)."""
    now = observer.clock.monotonic()
    dt = now - (report.accounted_at or now)
    report.accounted_at = now
    if dt <= 0:
        return
    used: Counter[str] = Counter()
    for pod in observer.pods.values():
        if (pod.get("status") or {}).get("phase") != "Running":
            continue
        pool = pool_of.get(pod["spec"].get("nodeName", ""), "")
        for container in pod["spec"].get("containers", ()):
            limits = (container.get("resources") or {}).get("limits") or {}
            used[pool] += int(limits.get("nvidia.com/gpu", 0))
        used[pool] += observer.dra_devices.get(
            f"{pod['metadata']['namespace']}/{pod['metadata']['name']}", 0
        )
    for pool, total in report.gpus_by_pool.items():
        report.gpu_seconds_total[pool] = report.gpu_seconds_total.get(pool, 0.0) + total * dt
        report.gpu_seconds_used[pool] = report.gpu_seconds_used.get(pool, 0.0) + used[pool] * dt


class _Devices:
    """Every device of the fleet by UUID (GPUs and MIG devices) -> (product, memory MiB)."""

    def __init__(self, fleet: list[SimNode]) -> None:
        self.by_uuid: dict[str, tuple[str, int]] = {}
        self.by_index: dict[tuple[str, int], tuple[str, int]] = {}
        self.total_mib: Counter[str] = Counter()
        for node in fleet:
            if node.inventory is None:
                continue
            for gpu in node.inventory.gpus:
                self.total_mib[gpu.product] += gpu.memory_mib
                self.by_uuid[gpu.uuid] = self.by_index[node.name, gpu.index] = (
                    gpu.product,
                    gpu.memory_mib,
                )
                for dev in gpu.mig_devices:
                    self.by_uuid[dev.uuid] = (gpu.product, dev.memory_mib)

    def reserved(self, pod: dict[str, Any]) -> list[tuple[str, int]]:
        """(product, MiB) for each device the pod's annotations record; [] when none."""
        try:
            assignment = parse_assignment(pod)
        except AnnotationError:
            return []  # the scheduler diagnoses it; a summary only counts what it can read
        if assignment is None:
            return []
        node = pod["spec"].get("nodeName", "")
        out: list[tuple[str, int]] = []
        for i, index in enumerate(assignment.gpu_ids):
            uuid = assignment.gpu_uuids[i] if assignment.gpu_uuids else ""
            device = self.by_uuid.get(uuid) or self.by_index.get((node, index))
            if device is None:
                continue
            product, memory = device
            out.append((product, assignment.vram_mib[i] if assignment.vram_mib else memory))
        return out


def _holds_devices(pod: dict[str, Any]) -> bool:
    phase = (pod.get("status") or {}).get("phase", "Pending")
    return bool(pod["spec"].get("nodeName")) and phase not in ("Succeeded", "Failed")


def _account_vram(report: RunReport, observer: _Observer, devices: _Devices) -> None:
    """Record the peak VRAM reserved per product by pods holding devices now: O(pods)."""
    now: Counter[str] = Counter()
    for pod in observer.pods.values():
        if _holds_devices(pod):
            for product, mib in devices.reserved(pod):
                now[product] += mib
    for product, mib in now.items():
        if mib > report.vram_peak_mib.get(product, 0):
            report.vram_peak_mib[product] = mib


def pod_shape(pod: dict[str, Any]) -> str:
    """How the pod asks for GPUs (README's pod API table): ``"MIG"``, ``"exclusive"``,
    ``"shared"``, ``"whole"``, ``"DRA"`` (ResourceClaims alone), or ``""`` for none of these."""
    limits: dict[str, Any] = {}
    for container in pod["spec"].get("containers", ()):
        limits.update((container.get("resources") or {}).get("limits") or {})
    if any(name.startswith("nvidia.com/mig-") for name in limits):
        return "MIG"
    if RESOURCE_SHARED_GPU in limits:
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        return "exclusive" if annotations.get(EXCLUSIVE, "").lower() == "true" else "shared"
    if "nvidia.com/gpu" in limits:
        return "whole"
    return "DRA" if pod["spec"].get("resourceClaims") else ""


def _count_shapes(report: RunReport, observer: _Observer, devices: _Devices) -> None:
    for pod in observer.pods.values():
        shape = pod_shape(pod)
        placed = devices.reserved(pod) if pod["spec"].get("nodeName") else []
        if shape and placed:
            product = placed[0][0]
            report.pods_by_product.setdefault(product, Counter())[shape] += 1


def _count_claims(report: RunReport, observer: _Observer) -> None:
    for key, pod in observer.pods.items():
        kind = observer.kind_of(pod)
        if kind is None:
            continue
        report.claim_pods[kind] += 1
        report.claim_bound[kind] += key in observer.bound_at
        report.claim_allocated[kind] += key in observer.allocated
    report.gpuclaims_deleted = observer.deleted


def _claim_lines(report: RunReport) -> list[str]:
    lines = []
    for kind, name in CLAIM_KIND_NAMES.items():
        pods = report.claim_pods[kind]
        if not pods:
            continue
        line = (
            f"  {name} pods: {report.claim_bound[kind]} of {pods} bound, "
            f"{report.claim_allocated[kind]} with their claim allocated to them"
        )
        if kind == "gpuclaim":
            line += (
                f"; {report.gpuclaims_deleted} GpuClaims deleted after their pods finished, "
                f"{report.gpuclaims_left} left"
            )
        lines.append(line)
    return lines


def _final(report: RunReport, observer: _Observer) -> None:
    report.created = len(observer.seen_at)
    report.bound = len(observer.bound_at)
    for key, pod in observer.pods.items():
        applied = ((pod.get("metadata") or {}).get("annotations") or {}).get(MIG_FALLBACK_APPLIED)
        if applied:
            report.mig_fallbacks[applied] += 1
        phase = (pod.get("status") or {}).get("phase", "Pending")
        if phase == "Succeeded":
            report.succeeded += 1
        elif phase == "Failed":
            report.failed += 1
        elif not pod["spec"].get("nodeName"):
            message = next(
                (
                    c.get("message", "")
                    for c in (pod.get("status") or {}).get("conditions") or ()
                    if c.get("type") == "PodScheduled"
                ),
                "not tried yet",
            )
            report.pending[key] = message
    report.latencies = []
    report.preempted = len(observer.preempted)
    for key, bound_at in observer.bound_at.items():
        if key in observer.seen_at:
            latency = bound_at - observer.seen_at[key]
            report.latencies.append(latency)
            label = observer.priority.get(key, "priority 0")
            report.latencies_by_priority.setdefault(label, []).append(latency)


def _progress_line(now: float, workload: Workload, counts: Counter[str]) -> str:
    return (
        f"[{now:6.1f}s] created {sum(counts.values())}/{workload.pod_count}  "
        f"pending {counts['Unbound']}  starting {counts['Pending']}  running {counts['Running']}  "
        f"succeeded {counts['Succeeded']}  failed {counts['Failed']}"
    )


def summary(report: RunReport, spec: ClusterSpec, workload: Workload) -> str:
    lines = [
        "",
        f"workload {workload.name} on {spec.name}: {report.elapsed:.1f}s",
        f"  pods: {report.created} created, {report.bound} bound, {report.succeeded} succeeded, "
        f"{report.failed} failed, {report.preempted} preempted, {len(report.pending)} pending",
    ]
    if report.latencies:
        lines.append(
            "  scheduling latency (created -> bound): "
            f"p50 {report.percentile(50) * 1000:.0f} ms, "
            f"p90 {report.percentile(90) * 1000:.0f} ms, "
            f"p99 {report.percentile(99) * 1000:.0f} ms, max {max(report.latencies) * 1000:.0f} ms "
            f"(mean {statistics.fmean(report.latencies) * 1000:.0f} ms)"
        )
    if len(report.latencies_by_priority) > 1:
        for label, values in sorted(report.latencies_by_priority.items()):
            lines.append(
                f"    {label}: {len(values)} pods, p50 {report.percentile(50, values) * 1000:.0f} "
                f"ms, p99 {report.percentile(99, values) * 1000:.0f} ms, "
                f"max {max(values) * 1000:.0f} ms"
            )
    if report.preempted:
        lines.append(
            f"  preempted: {report.preempted} pods evicted for higher-priority pods (the "
            "workload's pods have no controller to create them again)"
        )
    for pool, total in sorted(report.gpu_seconds_total.items()):
        if total:
            used = report.gpu_seconds_used.get(pool, 0.0)
            lines.append(f"  GPU utilisation, pool {pool}: {100 * used / total:.0f}%")
    for product, total in sorted(report.vram_total_mib.items()):
        peak = report.vram_peak_mib.get(product, 0)
        shapes = report.pods_by_product.get(product, Counter())
        pods = ", ".join(
            f"{shapes[s]} {s} pod{'s' if shapes[s] != 1 else ''}"
            for s in ("shared", "exclusive", "MIG", "whole", "DRA")
            if shapes[s]
        )
        lines.append(
            f"  VRAM, {product}: {format_mib(peak)} of {format_mib(total)} reserved at peak "
            f"({100 * peak / total:.0f}%)" + (f", {pods}" if pods else ", no pods")
        )
    lines.extend(_claim_lines(report))
    for change, count in sorted(report.mig_fallbacks.items()):
        lines.append(f"  MIG fallback at admission: {count} pod(s) {change}")
    if report.pending:
        lines.append("  pending pods and why:")
        reasons = Counter(report.pending.values())
        for message, count in reasons.most_common(5):
            lines.append(f"    {count} x {message}")
    return "\n".join(lines)
