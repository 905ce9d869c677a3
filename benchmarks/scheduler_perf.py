"""Scheduling throughput, modelled on kube-scheduler's scheduler_perf.

Upstream's test/integration/scheduler_perf creates N nodes, schedules ``initPods`` to warm up,
then measures ``measurePods`` pods (``SchedulingBasic``: 5,000 nodes, 1,000 + 1,000 pods;
``SchedulingWithExtendedResource``: 5,000 pods on 5,000 nodes, CI floor 180 pods/s). Here the
nodes are ``dgx-h100`` (8 x H100 each, inventories) and every pod asks for one GPU
(``limits: nvidia.com/gpu: 1``, plus upstream's pod-default requests: 100m cpu, 500Mi).

**1. In memory, no API** (``inmem``): a ``Scheduler`` whose cache is filled directly from
``build_fleet`` (``add_node``, ``set_inventory``; its Kube is never connected: any API call
would raise), ``gc.freeze()`` after building, then per pod exactly the in-memory part of
``Scheduler.schedule_one``: ``CycleState``, ``cache.update_snapshot``,
``Scheduler.find_placement`` (PreFilter, Filter over the adaptive sample of nodes, PreScore,
Score, select), the reservation uid, ``cache.assume_pod``, Reserve, Permit and, as the binding
cycle would after the Binding, ``cache.finish_binding``; so GPUs fill up as in a real run.
Not included: the queue, the informer event that confirms the bind, any API request.
Baseline, side by side: the same loop with every default plugin but GPUFit
(``benchmarks/scheduler-perf-no-gpufit.yaml``), so the cost of choosing GPU sets shows.
Each repeat starts from a fresh cache: ``--warmup`` pods, then ``--inmem-pods`` timed pods;
the figure is the median over ``--repeats``.

**2. End to end** (``e2e``), three processes so they do not share one core: the simulated API
server with the fleet (``SimCluster(..., kubelets=False)``: pods stay bound, no status churn;
started by this file in a child process so that it can count requests by verb), ``python -m
gpusched scheduler --kubeconfig ... --metrics-port 0`` as shipped, and this process as the load
generator: ``--warmup`` pods created and waited for (bound, and their ``Scheduled`` Events
written), then ``--pods`` pods created as fast as ``--concurrency`` workers can, while one watch
records when each pod is first seen bound and another when its ``Scheduled`` Event is first
seen; the run waits until every measured pod has its Event, counted from the API server. The
fleet is created once per node count; each of ``--e2e-profiles`` (the baseline ``no-gpufit``,
then ``gpusched``) gets its own scheduler process and namespace in turn, and its pods are
deleted (grace 0) before the next. Reported: pods/s to the last bind and to the last Event
(Events trail the binding under their own budget, gpusched.events), the p50/p99 of per-second
throughput samples (scheduler_perf's SchedulingThroughput, to the last bind), create to bound
latency (client side: from the create's response to the watch event showing ``spec.nodeName``;
creationTimestamp only has 1 s resolution), ``Scheduled`` Events per pod as watched, the API
requests the scheduler made per scheduled pod as the API server counted them (Lease + Binding
writes, Event writes, all writes and by resource, Lease reads) cross-checked against the
scheduler's ``gpusched_api_writes_total``, and the CPU seconds each process spent per pod up to
the last Event (/proc).

``--workload whole,mixed`` also runs gpu_mix.py's mixed stream end to end (shared, exclusive
shares, whole GPUs, MIG; seed 0) on the ``mixed`` fleet of the same size, after the 1-GPU
stream on ``dgx-h100``: issue 10's "pods/s end to end against today's whole-GPU figure", in one
run. Choose ``--warmup`` + ``--pods`` that the fleet can place (at 500 nodes the mixed fleet
places about 2,000 of the stream): the run waits for every measured pod.

    python benchmarks/scheduler_perf.py [--mode inmem,e2e] [--nodes 500,5000] [--pods 2000]
        [--inmem-pods 2000] [--warmup 1000] [--repeats 3] [--percentage P] [--no-gc-freeze]
        [--e2e-profiles no-gpufit,gpusched] [--workload whole[,mixed]]
        [--profile-scheduler DIR] [--json out.json]

Prints a table and the same figures as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import math
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

HERE = Path(__file__).resolve().parent
NO_GPUFIT_CONFIG = HERE / "scheduler-perf-no-gpufit.yaml"
INMEM_PROFILES = ("gpusched", "gpusched-sampled", "no-gpufit")
"""In memory: gpusched as shipped (equivalence classes); the same with
``opportunisticBatching: false`` (every pod filters a sample of the nodes, as kube-scheduler);
the baseline without GPUFit, sampled."""
KUBE_SCHEDULER_FLOOR = 180  # SchedulingWithExtendedResource/5000pods_5000nodes threshold
SCHEDULING_BASIC_FLOOR = 680  # SchedulingBasic/5000Nodes_10000Pods threshold
TARGET_INMEM = 2000


def pod_body(name: str, namespace: str, *, uid: str | None = None) -> dict[str, Any]:
    """A 1-GPU pod (upstream's pod-default requests, plus one nvidia.com/gpu)."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": {"app": "perf"}}
    if uid is not None:
        meta["uid"] = uid
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "schedulerName": "gpusched",
            "containers": [
                {
                    "name": "pause",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {
                        "requests": {"cpu": "100m", "memory": "500Mi", "nvidia.com/gpu": "1"},
                        "limits": {"nvidia.com/gpu": "1"},
                    },
                }
            ],
        },
    }
    if uid is not None:
        pod["status"] = {"phase": "Pending"}
    return pod


def _percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (as scheduler_perf computes its throughput percentiles)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = math.ceil(p / 100 * len(ordered))
    return ordered[min(max(rank - 1, 0), len(ordered) - 1)]


# ------------------------------------------------------------------ 1. in memory


def _offline_scheduler(profile: str, nodes: list[Any], seed: int, percentage: int) -> Any:
    from gpusched.framework import default_config, load_config
    from gpusched.kube.client import Kube
    from gpusched.scheduler import Scheduler

    config = load_config(NO_GPUFIT_CONFIG) if profile == "no-gpufit" else default_config()
    config = config.model_copy(
        update={
            "percentage_of_nodes_to_score": percentage,
            # The baseline samples nodes as kube-scheduler does (its opportunistic batching
            # only serves pods that take a whole node, not 1-GPU pods on 8-GPU nodes).
            "opportunistic_batching": profile == "gpusched",
        }
    )
    # Never connected: the cycle below makes no API call, and one would fail loudly.
    scheduler = Scheduler(Kube(cast(Any, None)), config, rng=random.Random(seed))
    for sim_node in nodes:
        scheduler.cache.add_node(sim_node.node)
        scheduler.cache.set_inventory(sim_node.name, sim_node.inventory)
    scheduler.cache.update_snapshot(scheduler.snapshot)
    return scheduler


def _inmem_once(
    profile: str, nodes: list[Any], args: argparse.Namespace, seed: int
) -> dict[str, float]:
    from gpusched.annotations import Assignment
    from gpusched.framework import DEVICE_ASSIGNMENT, CycleState

    gc.unfreeze()
    gc.collect()
    warmup, pods = args.warmup, args.inmem_pods
    scheduler = _offline_scheduler(profile, nodes, seed, args.percentage)
    fw = scheduler.frameworks["gpusched"]
    cache, snapshot, rng = scheduler.cache, scheduler.snapshot, scheduler.rng
    batch = [pod_body(f"p{i}", "perf", uid=f"uid-{seed}-{i}") for i in range(warmup + pods)]
    gc.collect()
    if not args.no_gc_freeze:
        gc.freeze()  # what a scheduler should do after its initial sync (cache_snapshot.py)
    spent = {"snapshot": 0.0, "placement": 0.0, "commit": 0.0}
    evaluated = feasible = 0
    started = 0.0
    for i, pod in enumerate(batch):
        if i == warmup:
            spent = dict.fromkeys(spent, 0.0)
            evaluated = feasible = 0
            started = time.perf_counter()
        # --- Scheduler.schedule_one, minus the queue and the binding task
        t0 = time.perf_counter()
        state = CycleState(record_plugin_metrics=rng.random() < 0.1)
        cache.update_snapshot(snapshot)
        t1 = time.perf_counter()
        result = scheduler.find_placement(fw, state, pod)
        t2 = time.perf_counter()
        if result.node is None:
            why = result.status or result.statuses
            raise RuntimeError(f"{profile}: pod {i} did not fit: {why}")
        status = fw.run_reserve(state, pod, result.node)  # GPUFit writes DEVICE_ASSIGNMENT
        chosen = state.get(DEVICE_ASSIGNMENT) or Assignment((), (), (), "")
        assignment = Assignment(
            chosen.gpu_ids, chosen.gpu_uuids, chosen.vram_mib, str(uuid.uuid4())
        )
        state.write(DEVICE_ASSIGNMENT, assignment)
        cache.assume_pod(pod, result.node, assignment)
        if status.is_success:
            status = fw.run_permit(state, pod, result.node)
        # --- the binding cycle, once the Binding is written
        cache.finish_binding(pod)
        t3 = time.perf_counter()
        spent["snapshot"] += t1 - t0
        spent["placement"] += t2 - t1
        spent["commit"] += t3 - t2
        evaluated += result.evaluated
        feasible += result.feasible
    elapsed = time.perf_counter() - started
    gc.unfreeze()
    return {
        "pods_per_s": pods / elapsed,
        "us_per_pod": elapsed / pods * 1e6,
        **{f"{k}_us": v / pods * 1e6 for k, v in spent.items()},
        "nodes_evaluated": evaluated / pods,
        "nodes_feasible": feasible / pods,
    }


def bench_inmem(node_counts: list[int], args: argparse.Namespace) -> list[dict[str, Any]]:
    from gpusched.sim.fleet import build_fleet, load_cluster_spec

    rows = []
    for n in node_counts:
        t0 = time.perf_counter()
        fleet = build_fleet(load_cluster_spec("dgx-h100", nodes=n))
        built = time.perf_counter() - t0
        gpus = sum(len(s.inventory.gpus) for s in fleet if s.inventory is not None)
        if args.warmup + args.inmem_pods > gpus:
            raise SystemExit(
                f"{n} nodes have {gpus} GPUs: --warmup + --inmem-pods must be at most that"
            )
        for profile in INMEM_PROFILES:
            samples = [_inmem_once(profile, fleet, args, seed=r) for r in range(args.repeats)]
            row: dict[str, Any] = {"nodes": n, "profile": profile, "fleet_build_s": built}
            for key in samples[0]:
                row[key] = statistics.median(s[key] for s in samples)
            row["pods_per_s_all"] = [s["pods_per_s"] for s in samples]
            rows.append(row)
            print(
                f"  inmem {n} nodes {profile}: {row['pods_per_s']:,.0f} pods/s",
                file=sys.stderr,
                flush=True,
            )
    return rows


# ------------------------------------------------------------------ 2. end to end


def _counting_faults() -> Any:
    from gpusched.sim.faults import Faults

    class CountingFaults(Faults):
        """No faults; counts every resource request the API server dispatches, by verb."""

        def __post_init__(self) -> None:
            super().__post_init__()
            self.seen: Counter[str] = Counter()

        def check(self, verb: str, resource: str, name: str, group: str) -> None:
            self.seen[f"{verb} {resource}"] += 1
            super().check(verb, resource, name, group)

    return CountingFaults()


async def _serve_sim(nodes: int, kubeconfig: str, cluster: str = "dgx-h100") -> None:
    """The child process: SimCluster with a counting fault hook; answers ``counts`` on stdin."""
    from gpusched.sim import SimCluster
    from gpusched.sim.fleet import load_cluster_spec

    faults = _counting_faults()
    started = time.perf_counter()
    spec = load_cluster_spec(cluster, nodes=nodes)
    async with SimCluster(spec, faults=faults, kubelets=False, kubeconfig_path=kubeconfig) as sim:
        fleet_s = time.perf_counter() - started
        await sim.kube.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpusched-system"}},
        )
        # The fleet's objects out of every later collection: a full collection walking them
        # stalled every client for 0.2-0.3 s at 5,000 nodes, which kube-apiserver (Go, a
        # concurrent collector) does not.
        gc.collect()
        gc.freeze()
        print(json.dumps({"fleet_s": fleet_s, "url": sim.url}), flush=True)
        while True:
            line = (await asyncio.to_thread(sys.stdin.readline)).strip()
            if line == "counts":
                counts = {"requests": sim.server.requests, "by_verb": dict(faults.seen)}
                print(json.dumps(counts), flush=True)
            elif line in ("", "quit"):
                return


def _cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU seconds of a process (this one when ``pid`` is None)."""
    if pid is None:
        t = os.times()
        return t.user + t.system
    with contextlib.suppress(OSError, IndexError, ValueError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return float("nan")


class SimProcess:
    def __init__(self, nodes: int, tmp: Path, cluster: str = "dgx-h100") -> None:
        self.kubeconfig = tmp / f"sim-{cluster}-{nodes}.kubeconfig"
        self.log = open(tmp / f"sim-{cluster}-{nodes}.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--serve-sim", str(nodes), str(self.kubeconfig), cluster],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            env=os.environ | {"PYTHONUNBUFFERED": "1"},
        )

    async def _line(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = await asyncio.to_thread(self.proc.stdout.readline)
        if not line:
            raise RuntimeError(f"the simulation exited; see {self.log.name}")
        result: dict[str, Any] = json.loads(line)
        return result

    async def ready(self) -> dict[str, Any]:
        return await self._line()

    async def counts(self) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"counts\n")
        self.proc.stdin.flush()
        return await self._line()

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.write(b"quit\n")
            self.proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


PY_SPY_ENV = "GPUSCHED_BENCH_PY_SPY"
"""A directory: each ``SchedulerProcess`` runs under ``py-spy record --idle`` (``pip install
py-spy``) and writes a speedscope profile ``<tag>.json`` there (wall-clock samples, idle
included, so a profile is a timeline of where the process was)."""


class SchedulerProcess:
    def __init__(
        self,
        kubeconfig: Path,
        tmp: Path,
        tag: str,
        config: Path | None = None,
        profile_out: Path | None = None,
    ) -> None:
        self.out = tmp / f"scheduler-{tag}.out"
        self.err = tmp / f"scheduler-{tag}.log"
        cmd = [sys.executable]
        spy = os.environ.get(PY_SPY_ENV)  # a wall-clock timeline of each scheduler
        if spy:
            py_spy = str(Path(sys.executable).parent / "py-spy")
            out = f"{spy}/{tag}.json"
            cmd = [py_spy, "record", "--idle", "-r", "250", "-f", "speedscope", "-o", out, "--"]
            cmd.append(sys.executable)
        if profile_out is not None:
            cmd += ["-m", "cProfile", "-o", str(profile_out)]
        cmd += ["-m", "gpusched", "-v", "scheduler", "--kubeconfig", str(kubeconfig)]
        cmd += ["--metrics-port", "0", "--identity", f"perf-{tag}"]
        if config is not None:
            cmd += ["--config", str(config)]
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.proc = subprocess.Popen(
                cmd, stdout=out, stderr=err, env=os.environ | {"PYTHONUNBUFFERED": "1"}
            )
        self.port = 0

    async def ready(self, timeout: float, poll: float = 0.1) -> float:
        """Wait until /readyz answers 200 (polled every ``poll`` seconds); when it first did,
        in ``time.monotonic()`` seconds."""
        import aiohttp

        deadline = time.monotonic() + timeout
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"the scheduler exited: {self.err.read_text()[-2000:]}")
                if not self.port:
                    found = re.search(r"metrics on :(\d+)", self.out.read_text())
                    self.port = int(found.group(1)) if found else 0
                if self.port:
                    with contextlib.suppress(aiohttp.ClientError, OSError):
                        url = f"http://127.0.0.1:{self.port}/readyz"
                        async with session.get(url) as r:
                            if r.status == 200:
                                return time.monotonic()
                await asyncio.sleep(poll)
        raise RuntimeError(f"the scheduler was not ready in {timeout:.0f}s")

    async def api_writes(self) -> dict[str, float]:
        """``gpusched_api_writes_total`` by ``resource verb``."""
        import aiohttp

        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{self.port}/metrics") as r,
        ):
            text = await r.text()
        out: dict[str, float] = {}
        pattern = r'^gpusched_api_writes_total\{resource="([^"]+)",verb="([^"]+)"\} (\S+)$'
        for m in re.finditer(pattern, text, re.M):
            out[f"{m.group(2)} {m.group(1)}"] = float(m.group(3))
        return out

    def stop(self) -> None:
        if os.environ.get(PY_SPY_ENV):  # py-spy writes its profile on SIGINT, not SIGTERM
            self.proc.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(20)
        self.proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(60)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@dataclass
class _Watch:
    """When each pod was first seen bound, and when its ``Scheduled`` Event was first seen,
    from two watches in the load generator."""

    bound_at: dict[str, float] = field(default_factory=dict)
    event_at: dict[str, float] = field(default_factory=dict)
    scheduled_events: dict[str, set[str]] = field(default_factory=dict)  # pod -> Event names
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def on_pod(self, kind: str, pod: dict[str, Any], old: dict[str, Any] | None) -> None:
        name = pod["metadata"]["name"]
        if (pod.get("spec") or {}).get("nodeName") and name not in self.bound_at:
            self.bound_at[name] = time.monotonic()
            self.changed.set()

    def on_event(self, kind: str, event: dict[str, Any], old: dict[str, Any] | None) -> None:
        involved = event.get("involvedObject") or {}
        if old is not None or event.get("reason") != "Scheduled" or involved.get("kind") != "Pod":
            return
        name = involved.get("name", "")
        self.scheduled_events.setdefault(name, set()).add(event["metadata"]["name"])
        self.event_at.setdefault(name, time.monotonic())
        self.changed.set()

    async def wait(self, names: list[str], timeout: float, *, events: bool = False) -> bool:
        """Until every pod of ``names`` is bound (``events``: has its Scheduled Event)."""
        seen = self.event_at if events else self.bound_at
        deadline = time.monotonic() + timeout
        while not all(n in seen for n in names):
            self.changed.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), timeout=min(left, 1.0))
        return True


PodBody = Callable[[str, str], dict[str, Any]]
"""``(name, namespace) -> pod``: what a workload creates."""

WORKLOADS = {"whole": "dgx-h100", "mixed": "mixed"}
"""End-to-end workloads and the fleet each runs on: ``whole``, 1-GPU pods (:func:`pod_body`);
``mixed``, gpu_mix.py's stream (shared, exclusive shares, whole GPUs, MIG) on the ``mixed``
fleet, the same pods in the same order as in memory (seed 0)."""


def mixed_bodies(count: int, seed: int = 0) -> PodBody:
    """gpu_mix.py's stream as API objects: the ``i``-th pod created (warm-up first, then the
    measured pods, whatever their names) is the stream's ``i``-th."""
    from gpu_mix import mixed_stream

    stream = [pod for _kind, pod in mixed_stream(count, seed)]
    taken: dict[str, dict[str, Any]] = {}

    def body(name: str, namespace: str) -> dict[str, Any]:
        if name not in taken:
            pod = json.loads(json.dumps(stream[len(taken) % len(stream)]))
            meta = pod["metadata"]
            meta.pop("uid", None)
            meta.update(name=name, namespace=namespace)
            pod.pop("status", None)
            taken[name] = pod
        return taken[name]

    return body


async def _create_pods(
    kubes: list[Any],
    namespace: str,
    names: list[str],
    concurrency: int,
    body: PodBody = pod_body,
) -> dict[str, float]:
    """Create the pods with ``concurrency`` workers; returns when each create returned."""
    from gpusched.kube.client import resource_path

    path = resource_path("", "v1", "pods", namespace)
    created: dict[str, float] = {}
    todo = iter(names)

    async def worker(w: int) -> None:
        kube = kubes[w % len(kubes)]
        for name in todo:
            await kube.create(path, body(name, namespace))
            created[name] = time.monotonic()

    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    return created


async def _settled_counts(sim: SimProcess, quiet: float = 1.5, limit: float = 60.0) -> Any:
    """The API server's counts once the scheduler's writes stop changing (Events drain)."""
    deadline = time.monotonic() + limit
    last = await sim.counts()
    while time.monotonic() < deadline:
        await asyncio.sleep(quiet)
        now = await sim.counts()
        keys = ("create events", "patch pods/status", "update leases", "create pods/binding")
        if all(now["by_verb"].get(k) == last["by_verb"].get(k) for k in keys):
            return now
        last = now
    return last


_SCHEDULER_WRITES = ("create", "update", "patch", "delete")


def _per_pod(before: dict[str, int], after: dict[str, int], pods: int) -> dict[str, float]:
    keys = set(before) | set(after)
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in keys}
    return {k: v / pods for k, v in sorted(delta.items()) if v}


async def _delete_pods(kube: Any, namespace: str) -> None:
    """Remove a phase's pods at once (grace 0: no kubelet would confirm a graceful delete)."""
    from gpusched.kube.client import resource_path

    path = resource_path("", "v1", "pods", namespace)
    await kube.delete(path, {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0})
    for _ in range(300):
        if not (await kube.get(path, {"limit": "1"}))["items"]:
            return
        await asyncio.sleep(0.1)
    raise RuntimeError(f"the pods of {namespace} were not deleted")


async def _phase(
    sim: SimProcess,
    kubes: list[Any],
    nodes: int,
    profile: str,
    args: argparse.Namespace,
    tmp: Path,
    workload: str = "whole",
) -> dict[str, Any]:
    """One scheduler (``profile``) on the running simulation: warm up, measure, clean up."""
    from gpusched.kube.client import resource_path
    from gpusched.kube.reflector import Reflector

    row: dict[str, Any] = {"nodes": nodes, "profile": profile, "workload": workload}
    row.update(warmup=args.warmup, pods=args.pods)
    tag = f"{nodes}-{profile}" if workload == "whole" else f"{nodes}-{workload}-{profile}"
    profile_out = None
    if args.profile_dir is not None:
        profile_out = args.profile_dir / f"scheduler-{tag}.prof"
    config = NO_GPUFIT_CONFIG if profile == "no-gpufit" else None
    body = pod_body if workload == "whole" else mixed_bodies(args.warmup + args.pods)
    t1 = time.monotonic()
    scheduler = SchedulerProcess(sim.kubeconfig, tmp, tag, config, profile_out)
    ns = f"perf-{profile}" if workload == "whole" else f"perf-{workload}-{profile}"
    watch = _Watch()
    watch_task: asyncio.Task[None] | None = None
    events_task: asyncio.Task[None] | None = None
    try:
        await scheduler.ready(timeout=300)
        row["scheduler_sync_s"] = time.monotonic() - t1
        await kubes[0].create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
        )
        reflector = Reflector(
            kubes[0], resource_path("", "v1", "pods", ns), handler=watch.on_pod, name="perf"
        )
        events = Reflector(
            kubes[0],
            resource_path("", "v1", "events", ns),
            handler=watch.on_event,
            name="perf-events",
        )
        watch_task = asyncio.create_task(reflector.run())
        events_task = asyncio.create_task(events.run())
        await reflector.synced.wait()
        await events.synced.wait()

        warm = [f"warm-{i}" for i in range(args.warmup)]
        tw = time.monotonic()
        await _create_pods(kubes, ns, warm, args.concurrency, body)
        if not await watch.wait(warm, timeout=args.timeout):
            raise RuntimeError(f"warm-up pods not all bound in {args.timeout}s")
        row["warmup_pods_per_s"] = args.warmup / (time.monotonic() - tw)
        # The warm-up's Events trail it: let them all be written, or the measured pods would
        # share the Event budget with the warm-up's backlog.
        if not await watch.wait(warm, timeout=args.timeout, events=True):
            raise RuntimeError(f"warm-up pods' Scheduled Events not all seen in {args.timeout}s")
        before = await _settled_counts(sim)
        writes_before = await scheduler.api_writes()
        pids = {"scheduler": scheduler.proc.pid, "apiserver": sim.proc.pid, "loadgen": None}
        cpu_before = {k: _cpu_seconds(p) for k, p in pids.items()}

        names = [f"pod-{i}" for i in range(args.pods)]
        start = time.monotonic()
        created = await _create_pods(kubes, ns, names, args.concurrency, body)
        create_done = time.monotonic()
        complete = await watch.wait(names, timeout=args.timeout)
        bound = {n: watch.bound_at[n] for n in names if n in watch.bound_at}
        end = max(bound.values()) if bound else time.monotonic()
        events_complete = await watch.wait(names, timeout=args.timeout, events=True)
        cpu_after = {k: _cpu_seconds(p) for k, p in pids.items()}
        evented = {n: watch.event_at[n] for n in names if n in watch.event_at}
        events_end = max(evented.values()) if evented else time.monotonic()
        after = await _settled_counts(sim)
        writes_after = await scheduler.api_writes()
    finally:
        for task in (watch_task, events_task):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        scheduler.stop()
    await _delete_pods(kubes[0], ns)

    scheduled = len(bound)
    row["complete"] = complete
    row["scheduled"] = scheduled
    row["elapsed_s"] = end - start
    row["pods_per_s"] = scheduled / (end - start)
    row["events_complete"] = events_complete
    row["scheduled_events"] = len(evented)
    row["events_elapsed_s"] = events_end - start
    row["pods_per_s_to_last_event"] = len(evented) / (events_end - start)
    row["scheduled_events_per_pod"] = (
        sum(len(watch.scheduled_events.get(n, ())) for n in names) / args.pods
    )
    row["create_per_s"] = args.pods / (create_done - start)
    # scheduler_perf's SchedulingThroughput: pods scheduled in each full 1 s interval.
    per_second = Counter(int(t - start) for t in bound.values())
    samples = [float(per_second.get(s, 0)) for s in range(int(end - start))]
    row["throughput_samples"] = samples
    row["throughput_p50"] = _percentile(samples, 50)
    row["throughput_p99"] = _percentile(samples, 99)
    latencies = [max(bound[n] - created[n], 0.0) for n in bound]
    row["latency_p50_s"] = _percentile(latencies, 50)
    row["latency_p99_s"] = _percentile(latencies, 99)
    row["latency_max_s"] = max(latencies, default=0.0)

    by_verb = _per_pod(before["by_verb"], after["by_verb"], max(scheduled, 1))
    row["requests_per_pod"] = by_verb
    load = {"create pods"}  # the load generator's own requests
    writes = {
        k: v for k, v in by_verb.items() if k.split()[0] in _SCHEDULER_WRITES and k not in load
    }
    row["lease_binding_writes_per_pod"] = sum(
        v for k, v in writes.items() if k.endswith((" leases", " pods/binding"))
    )
    row["all_writes_per_pod"] = sum(writes.values())
    by_resource: Counter[str] = Counter()
    for k, v in writes.items():
        by_resource[k.split()[1]] += v
    row["writes_per_pod_by_resource"] = dict(sorted(by_resource.items()))
    row["events_per_pod"] = by_resource.get("events", 0.0)
    row["reads_per_pod"] = sum(v for k, v in by_verb.items() if k.split()[0] in ("get", "list"))
    row["scheduler_api_writes_metric_per_pod"] = _per_pod(
        {k: int(v) for k, v in writes_before.items()},
        {k: int(v) for k, v in writes_after.items()},
        max(scheduled, 1),
    )
    row["cpu_ms_per_pod"] = {
        k: (cpu_after[k] - cpu_before[k]) / max(scheduled, 1) * 1e3 for k in pids
    }
    row["cpu_busy_cores"] = sum(cpu_after[k] - cpu_before[k] for k in pids) / (events_end - start)
    print(
        f"  e2e {nodes} nodes {workload} {profile}: {row['pods_per_s']:,.0f} pods/s to the "
        "last bind, "
        f"{row['pods_per_s_to_last_event']:,.0f} to the last Event",
        file=sys.stderr,
        flush=True,
    )
    return row


async def e2e_run(
    nodes: int, args: argparse.Namespace, tmp: Path, workload: str = "whole"
) -> list[dict[str, Any]]:
    """One simulated cluster of ``nodes`` (the ``workload``'s fleet); each profile's scheduler
    in turn on it (``mixed``: not ``no-gpufit``, which cannot place shares or MIG devices)."""
    from gpusched.kube.client import connect

    t0 = time.monotonic()
    sim = SimProcess(nodes, tmp, WORKLOADS[workload])
    kubes: list[Any] = []
    rows = []
    try:
        ready = await sim.ready()
        print(f"  e2e {nodes} nodes: fleet created in {ready['fleet_s']:.1f}s", file=sys.stderr)
        kubes = [await connect(sim.kubeconfig) for _ in range(4)]
        for profile in args.e2e_profiles.split(","):
            if workload != "whole" and profile == "no-gpufit":
                continue
            row = await _phase(sim, kubes, nodes, profile, args, tmp, workload)
            row["fleet_create_s"] = ready["fleet_s"]
            rows.append(row)
    finally:
        for kube in kubes:
            await kube.close()
        sim.stop()
    print(f"  e2e {nodes} nodes: took {time.monotonic() - t0:.0f}s", file=sys.stderr, flush=True)
    return rows


def _profile_summary(path: Path, top: int = 15) -> list[dict[str, Any]]:
    import pstats

    stats = pstats.Stats(str(path))
    rows = []
    table = cast(dict[Any, Any], stats.stats)  # type: ignore[attr-defined]
    for (file, line, func), (_cc, calls, tottime, cumtime, _callers) in table.items():
        rows.append(
            {
                "function": f"{Path(file).name}:{line}({func})",
                "calls": calls,
                "tottime_s": tottime,
                "cumtime_s": cumtime,
            }
        )
    rows.sort(key=lambda r: r["tottime_s"], reverse=True)
    return rows[:top]


async def bench_e2e(node_counts: list[int], args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="scheduler-perf-") as tmp:
        for n in node_counts:
            gpus = n * 8
            if args.warmup + args.pods > gpus:
                raise SystemExit(f"{n} nodes have {gpus} GPUs: --warmup + --pods is more")
            for workload in args.workloads.split(","):
                rows.extend(await e2e_run(n, args, Path(tmp), workload))
    return rows


# ------------------------------------------------------------------ output


def _label(row: dict[str, Any]) -> str:
    workload = row.get("workload", "whole")
    return str(row["profile"]) if workload == "whole" else f"{row['profile']} ({workload})"


def print_tables(figures: dict[str, Any]) -> None:
    inmem = figures.get("inmem") or []
    if inmem:
        print("In-memory scheduling cycle (no API), median of repeats")
        head = (
            f"{'nodes':>6} {'profile':16} {'pods/s':>8} {'us/pod':>8} {'snapshot':>9} "
            f"{'placement':>10} {'commit':>7} {'evaluated':>10} {'feasible':>9}"
        )
        print(head)
        for r in inmem:
            print(
                f"{r['nodes']:>6} {r['profile']:16} {r['pods_per_s']:>8,.0f} "
                f"{r['us_per_pod']:>8,.0f} {r['snapshot_us']:>9,.0f} {r['placement_us']:>10,.0f} "
                f"{r['commit_us']:>7,.0f} {r['nodes_evaluated']:>10,.0f} "
                f"{r['nodes_feasible']:>9,.0f}"
            )
        for r in inmem:
            if r["profile"] == "gpusched" and r["nodes"] == 5000:
                verdict = "meets" if r["pods_per_s"] >= TARGET_INMEM else "misses"
                print(f"target {TARGET_INMEM:,} pods/s at 5,000 nodes: {verdict} it")
        print()
    e2e = figures.get("e2e") or []
    if e2e:
        print("End to end: API server, scheduler and load generator in three processes")
        head = (
            f"{'nodes':>6} {'profile':22} {'pods':>5} {'pods/s':>7} {'ev pods/s':>9} "
            f"{'p50/s':>6} {'p99/s':>6} {'create/s':>8} {'lat p50':>8} {'lat p99':>8} "
            f"{'lease+bind':>10} {'events':>6} {'writes':>7} {'reads':>6} {'sched ms':>8} "
            f"{'api ms':>7} {'load ms':>7}"
        )
        print(head)
        for r in e2e:
            cpu = r["cpu_ms_per_pod"]
            print(
                f"{r['nodes']:>6} {_label(r):22} {r['scheduled']:>5} {r['pods_per_s']:>7,.0f} "
                f"{r['pods_per_s_to_last_event']:>9,.0f} "
                f"{r['throughput_p50']:>6,.0f} {r['throughput_p99']:>6,.0f} "
                f"{r['create_per_s']:>8,.0f} {r['latency_p50_s']:>7.2f}s "
                f"{r['latency_p99_s']:>7.2f}s {r['lease_binding_writes_per_pod']:>10.2f} "
                f"{r['events_per_pod']:>6.2f} {r['all_writes_per_pod']:>7.2f} "
                f"{r['reads_per_pod']:>6.2f} "
                f"{cpu['scheduler']:>8.1f} {cpu['apiserver']:>7.1f} {cpu['loadgen']:>7.1f}"
            )
        print(
            "(pods/s: to the last bind; ev pods/s: to the last Scheduled Event; events: Event "
            "writes per pod; writes by resource in the JSON; sched/api/load ms: CPU "
            "milliseconds per scheduled pod in each process, to the last Event)"
        )
        for r in e2e:
            if r["scheduled_events"] != r["scheduled"] or not r["events_complete"]:
                print(
                    f"{r['nodes']} nodes {r['profile']}: {r['scheduled_events']} of "
                    f"{r['scheduled']} bound pods have their Scheduled Event"
                )
        fleets = {r["nodes"]: r["fleet_create_s"] for r in e2e}
        print(
            "fleet creation through the API: "
            + ", ".join(f"{n} nodes {s:.0f}s" for n, s in fleets.items())
        )
        for r in e2e:
            if r["nodes"] == 5000 and r["profile"] == "gpusched" and _label(r) == "gpusched":
                print(
                    f"kube-scheduler CI floors at 5,000 nodes: {KUBE_SCHEDULER_FLOOR} pods/s "
                    f"(SchedulingWithExtendedResource), {SCHEDULING_BASIC_FLOOR} pods/s "
                    f"(SchedulingBasic); gpusched end to end: {r['pods_per_s']:,.0f} pods/s"
                )
        print()


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--serve-sim":  # the child process
        asyncio.run(_serve_sim(int(sys.argv[2]), sys.argv[3], sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--mode", default="inmem,e2e", help="inmem, e2e or both")
    parser.add_argument("--nodes", default="500,5000", help="node counts, comma-separated")
    parser.add_argument("--pods", type=int, default=2000, help="measured pods, end to end")
    parser.add_argument("--inmem-pods", type=int, default=2000, help="measured pods, in memory")
    parser.add_argument("--warmup", type=int, default=1000, help="pods scheduled first")
    parser.add_argument("--repeats", type=int, default=3, help="in-memory repeats")
    parser.add_argument(
        "--percentage",
        type=int,
        default=0,
        help="in memory: percentageOfNodesToScore (default 0: adaptive, as the scheduler's)",
    )
    parser.add_argument(
        "--no-gc-freeze", action="store_true", help="in memory: leave out gc.freeze()"
    )
    parser.add_argument(
        "--e2e-profiles",
        default="no-gpufit,gpusched",
        help="end to end: the schedulers run in turn on each simulated cluster",
    )
    parser.add_argument(
        "--workload",
        dest="workloads",
        default="whole",
        help="end to end: whole (1-GPU pods, dgx-h100) and/or mixed (gpu_mix.py's stream on "
        "the mixed fleet), comma-separated",
    )
    parser.add_argument("--concurrency", type=int, default=16, help="pod-creating workers")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per wait")
    parser.add_argument("--profile-scheduler", default="", help="cProfile the scheduler here")
    parser.add_argument("--json", default="", help="also write the figures to this file")
    args = parser.parse_args()
    modes = set(args.mode.split(","))
    node_counts = [int(n) for n in args.nodes.split(",")]
    figures: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "workload": {
            "cluster": "dgx-h100",
            "pod": "1 x nvidia.com/gpu, 100m cpu, 500Mi",
            "warmup": args.warmup,
            "inmem_pods": args.inmem_pods,
            "e2e_pods": args.pods,
            "repeats": args.repeats,
            "percentage_of_nodes_to_score": args.percentage,
            "gc_freeze": not args.no_gc_freeze,
        },
    }
    if "inmem" in modes:
        figures["inmem"] = bench_inmem(node_counts, args)
    args.profile_dir = None
    if args.profile_scheduler:
        args.profile_dir = Path(args.profile_scheduler).resolve()
        args.profile_dir.mkdir(parents=True, exist_ok=True)
    if "e2e" in modes:
        figures["e2e"] = asyncio.run(bench_e2e(node_counts, args))
        for row in figures["e2e"] if args.profile_dir is not None else ():
            prof = args.profile_dir / f"scheduler-{row['nodes']}-{row['profile']}.prof"
            if prof.exists():
                row["scheduler_profile_top"] = _profile_summary(prof)
    print_tables(figures)
    print(json.dumps(figures, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
