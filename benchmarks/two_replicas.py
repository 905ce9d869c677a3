"""One and two active gpusched replicas side by side, end to end: is two at least as fast?

Each replica count (``--replicas 1,2``) gets a fresh simulated API server in its own process
(``scheduler_perf.SimProcess``: the fleet of ``dgx-h100`` nodes, 8 GPUs each, no kubelets, every
request counted by verb), so neither run inherits the other's Leases, and that many ``python -m
gpusched scheduler`` processes as shipped (``scheduler_perf.SchedulerProcess``, no leader
election, distinct identities). ``2:no-shares`` runs two replicas with ``replicas: {shares:
false}``: both schedule every pod on any node, as before shares (gpusched.replicas). This
process is the load generator, and a watch in it records when each pod is first seen bound.

- ``--mode backlog`` (default, as issue 9 measured it): the ``--pods`` one-GPU pods are created
  first, then the replicas are started together; pods/s is the pods over the time from the
  first replica's /readyz to the last pod bound (a second replica that gets ready later counts
  against the two-replica figure; ``ready_skew_s`` says by how much).
- ``--mode stream`` (as scheduler_perf): the replicas are started and ready (with several, their
  membership Leases written), ``--warmup`` pods are created and waited for, then the ``--pods``
  pods are created as fast as ``--concurrency`` workers can; pods/s is the pods over first
  create to last bound, so it is bounded by how fast the API server takes creates.

Reported per row: pods/s and the ratio to one replica in the same run (the median of its rows,
``--repeats`` or ``--replicas 1,2,1``); Lease conflicts (409s, the replicas'
``gpusched_lease_conflicts_total``) per pod; the API writes the schedulers made per pod as the
API server counted them (all writes but the load generator's pod creates: Lease writes,
Bindings, Events, status patches, membership renewals), and Lease + Binding writes alone; Events
per pod (the Event objects in the pods' namespace once the schedulers' writes settle, and how
many are ``Scheduled``); failed binds; how the pods split between replicas; and GPUs
double-booked, checked from the API (the pods' GPU annotations, per node), which must be 0; the
CPU each process spent per pod (/proc; schedulers from their /readyz on), since every replica
still watches every pod and Lease: on a machine with few cores the replicas share them.

    python benchmarks/two_replicas.py [--nodes 500,5000] [--pods 2000] [--mode backlog|stream]
        [--replicas 1,2[,2:no-shares]] [--repeats 1] [--warmup 200] [--concurrency 32]
        [--timeout 600] [--json out.json]

Prints a table and writes the figures as JSON. Figures depend on the machine and on what else
runs on it: compare rows of one run only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from scheduler_perf import SchedulerProcess, SimProcess, pod_body  # noqa: E402

_LOADGEN_WRITES = {"create pods"}
_WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")


async def scrape(port: int) -> dict[str, float]:
    """A scheduler's /metrics as ``name{labels}`` -> value."""
    import aiohttp

    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/metrics") as r,
    ):
        text = await r.text()
    out: dict[str, float] = {}
    for m in re.finditer(r"^([a-zA-Z_:][\w:]*(?:\{[^}]*\})?) (\S+)$", text, re.M):
        with contextlib.suppress(ValueError):
            out[m.group(1)] = float(m.group(2))
    return out


def _sum(metrics: dict[str, float], prefix: str, needle: str = "") -> float:
    return sum(v for k, v in metrics.items() if k.startswith(prefix) and needle in k)


class BoundWatch:
    """When each pod was first seen bound, from a watch in the load generator."""

    def __init__(self) -> None:
        self.bound_at: dict[str, float] = {}
        self.uids: dict[str, str] = {}
        self.changed = asyncio.Event()

    def on_pod(self, kind: str, pod: dict[str, Any], old: dict[str, Any] | None) -> None:
        name = pod["metadata"]["name"]
        if (pod.get("spec") or {}).get("nodeName") and name not in self.bound_at:
            self.bound_at[name] = time.monotonic()
            self.uids[name] = pod["metadata"]["uid"]
            self.changed.set()

    async def wait(self, names: list[str], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not all(n in self.bound_at for n in names):
            self.changed.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), timeout=min(left, 1.0))
        return True


async def create_pods(kubes: list[Any], namespace: str, names: list[str], workers: int) -> None:
    from gpusched.kube.client import resource_path

    path = resource_path("", "v1", "pods", namespace)
    todo = iter(names)

    async def worker(w: int) -> None:
        for name in todo:
            await kubes[w % len(kubes)].create(path, pod_body(name, namespace))

    await asyncio.gather(*(worker(w) for w in range(workers)))


async def settled(sim: SimProcess, quiet: float = 1.5, limit: float = 60.0) -> dict[str, int]:
    """The API server's request counts once the schedulers' writes stop changing."""
    deadline = time.monotonic() + limit
    last: dict[str, int] = (await sim.counts())["by_verb"]
    while time.monotonic() < deadline:
        await asyncio.sleep(quiet)
        now: dict[str, int] = (await sim.counts())["by_verb"]
        if {k: v for k, v in now.items() if "events" in k or "pods" in k} == {
            k: v for k, v in last.items() if "events" in k or "pods" in k
        }:
            return now
        last = now
    return last


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (/proc)."""
    with contextlib.suppress(OSError, IndexError, ValueError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return float("nan")


def double_booked(pods: list[dict[str, Any]]) -> int:
    """GPUs held by more than one live pod, from the pods' assignment annotations."""
    from gpusched.annotations import GPU_IDS

    held: dict[str, Counter[int]] = defaultdict(Counter)
    for p in pods:
        node = p["spec"].get("nodeName")
        ids = (p["metadata"].get("annotations") or {}).get(GPU_IDS)
        if node and ids:
            held[node].update(int(i) for i in ids.split(","))
    return sum(n - 1 for gpus in held.values() for n in gpus.values() if n > 1)


async def run_one(
    nodes: int, replicas: int, shares: bool, args: argparse.Namespace, tmp: Path
) -> dict[str, Any]:
    """A fresh simulation, ``replicas`` schedulers, warm-up, then the measured backlog."""
    from gpusched.kube.client import connect, resource_path
    from gpusched.kube.reflector import Reflector
    from gpusched.replicas import MEMBER_LABEL

    row: dict[str, Any] = {"nodes": nodes, "replicas": replicas, "shares": shares}
    row.update(mode=args.mode, pods=args.pods, warmup=args.warmup if args.mode == "stream" else 0)
    config = None
    if not shares:
        config = tmp / "no-shares.yaml"
        config.write_text(
            "apiVersion: gpusched.io/v1alpha1\nkind: SchedulerConfiguration\n"
            "replicas:\n  shares: false\n"
        )
    sim = SimProcess(nodes, tmp)
    kubes: list[Any] = []
    schedulers: list[SchedulerProcess] = []
    watch_task: asyncio.Task[None] | None = None
    ns = "two-replicas"
    names = [f"pod-{i}" for i in range(args.pods)]

    def processes() -> dict[str, int]:
        out = {"apiserver": sim.proc.pid, "loadgen": os.getpid()}
        out.update({f"scheduler-{i}": s.proc.pid for i, s in enumerate(schedulers)})
        return out

    def start_schedulers() -> None:
        for i in range(replicas):
            tag = f"{nodes}-{replicas}-{shares}-{args.mode}-{i}"
            if (tmp / f"scheduler-{tag}.log").exists():  # a repeated row: keep both logs
                tag += f"-{time.monotonic_ns() % 10**6}"
            profile = args.profile_dir / f"{tag}.prof" if args.profile_dir else None
            schedulers.append(SchedulerProcess(sim.kubeconfig, tmp, tag, config, profile))

    try:
        await sim.ready()
        kubes = [await connect(sim.kubeconfig) for _ in range(4)]
        kube = kubes[0]
        await kube.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
        )
        watch = BoundWatch()
        pods_path = resource_path("", "v1", "pods", ns)
        reflector = Reflector(kube, pods_path, handler=watch.on_pod, name="bench")
        watch_task = asyncio.create_task(reflector.run())
        await reflector.synced.wait()
        if args.mode == "backlog":
            await create_pods(kubes, ns, names, args.concurrency)
            before = (await sim.counts())["by_verb"]
            metrics_before: list[dict[str, float]] = [{} for _ in range(replicas)]
            cpu_before = {name: cpu_seconds(pid) for name, pid in processes().items()}
            start_schedulers()
            ready = await asyncio.gather(*(s.ready(timeout=600, poll=0.02) for s in schedulers))
            start = min(ready)
            for i, s in enumerate(schedulers):  # their start-up (imports, informer lists) aside
                cpu_before[f"scheduler-{i}"] = cpu_seconds(s.proc.pid)
            row["ready_skew_s"] = max(ready) - start
            row["bound_before_all_ready"] = sum(
                1 for t in watch.bound_at.values() if t < max(ready)
            )
        else:
            start_schedulers()
            for s in schedulers:
                await s.ready(timeout=600)
            leases = resource_path("coordination.k8s.io", "v1", "leases", "gpusched-system")
            for _ in range(600):  # every replica has written its membership Lease
                listed = await kube.get(leases, {"labelSelector": MEMBER_LABEL})
                if len(listed["items"]) >= replicas or not shares:
                    break
                await asyncio.sleep(0.1)
            warm = [f"warm-{i}" for i in range(args.warmup)]
            await create_pods(kubes, ns, warm, args.concurrency)
            if not await watch.wait(warm, timeout=args.timeout):
                raise RuntimeError(f"warm-up pods not all bound in {args.timeout}s")
            before = await settled(sim)
            metrics_before = [await scrape(s.port) for s in schedulers]
            cpu_before = {name: cpu_seconds(pid) for name, pid in processes().items()}
            start = time.monotonic()
            await create_pods(kubes, ns, names, args.concurrency)
        row["complete"] = await watch.wait(names, timeout=args.timeout)
        bound = [watch.bound_at[n] for n in names if n in watch.bound_at]
        end = max(bound) if bound else time.monotonic()
        row["cpu_ms_per_pod"] = {
            name: (cpu_seconds(pid) - cpu_before.get(name, 0.0)) / max(len(bound), 1) * 1e3
            for name, pid in processes().items()
        }
        after = await settled(sim)
        metrics_after = [await scrape(s.port) for s in schedulers]
        pods = (await kube.get(pods_path))["items"]
        events = (await kube.get(resource_path("", "v1", "events", ns)))["items"]
    finally:
        if watch_task is not None:
            watch_task.cancel()
            await asyncio.gather(watch_task, return_exceptions=True)
        for s in schedulers:
            s.stop()
        for k in kubes:
            await k.close()
        sim.stop()

    scheduled = max(len(bound), 1)
    row["scheduled"] = len(bound)
    row["elapsed_s"] = end - start
    row["pods_per_s"] = len(bound) / (end - start)
    per_second = Counter(max(int(t - start), 0) for t in bound)
    ordered = sorted(bound)
    tenths = Counter(max(int((t - start) * 10), 0) for t in bound)
    row["bound_per_100ms"] = [tenths.get(i, 0) for i in range(int((end - start) * 10) + 1)]
    if replicas > 1 and shares:  # by the replica whose share each pod is in
        from gpusched.replicas import owner

        identities = [f"perf-{nodes}-{replicas}-{shares}-{args.mode}-{i}" for i in range(replicas)]
        row["bound_per_100ms_by_owner"] = []
        for identity in identities:
            mine = Counter(
                max(int((t - start) * 10), 0)
                for n, t in watch.bound_at.items()
                if n in names and owner(f"pod/{watch.uids[n]}", identities) == identity
            )
            row["bound_per_100ms_by_owner"].append(
                [mine.get(i, 0) for i in range(int((end - start) * 10) + 1)]
            )
    row["progress_s"] = (
        {  # when each fraction of the pods was bound, from the start
            f"{q}%": ordered[min(len(ordered) - 1, len(ordered) * q // 100)] - start
            for q in (1, 10, 25, 50, 75, 90, 100)
        }
        if ordered
        else {}
    )
    row["throughput_samples"] = [per_second.get(i, 0) for i in range(int(end - start) + 1)]
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in set(before) | set(after)}
    writes = {
        k: v
        for k, v in delta.items()
        if v and k.split()[0] in _WRITE_VERBS and k not in _LOADGEN_WRITES
    }
    row["writes_per_pod_by_verb"] = {k: v / scheduled for k, v in sorted(writes.items())}
    row["api_writes_per_pod"] = sum(writes.values()) / scheduled
    row["lease_binding_writes_per_pod"] = (
        sum(v for k, v in writes.items() if k.endswith((" leases", " pods/binding"))) / scheduled
    )

    def grew(name: str, needle: str = "") -> list[float]:
        return [
            _sum(a, name, needle) - _sum(b, name, needle)
            for a, b in zip(metrics_after, metrics_before, strict=True)
        ]

    conflicts = grew("gpusched_lease_conflicts_total")
    row["lease_conflicts"] = sum(conflicts)
    row["conflicts_per_pod"] = sum(conflicts) / scheduled
    row["failed_binds"] = sum(grew("gpusched_bind_failures_total"))
    row["scheduled_by_replica"] = grew("scheduler_schedule_attempts_total", 'result="scheduled"')
    row["events"] = len(events)
    row["events_per_pod"] = len(events) / scheduled
    row["scheduled_events_per_pod"] = (
        sum(1 for e in events if e.get("reason") == "Scheduled" and "pod-" in str(e)) / scheduled
    )
    row["double_booked_gpus"] = double_booked(pods)
    print(
        f"  {nodes} nodes, {replicas} replica(s){'' if shares else ' without shares'}: "
        f"{row['pods_per_s']:,.0f} pods/s, "
        f"{row['conflicts_per_pod']:.3f} 409s/pod",
        file=sys.stderr,
        flush=True,
    )
    return row


def print_table(rows: list[dict[str, Any]]) -> None:
    head = (
        f"{'nodes':>6} {'replicas':>12} {'pods/s':>8} {'vs one':>7} {'409s/pod':>9} "
        f"{'writes/pod':>10} {'lease+bind':>10} {'events/pod':>10} {'failed':>7} "
        f"{'split':>12} {'double':>7} {'sched cpu ms/pod':>16}"
    )
    print(head)
    print("-" * len(head))
    singles: dict[int, list[float]] = defaultdict(list)
    for r in rows:
        if r["replicas"] == 1 and r["shares"]:
            singles[r["nodes"]].append(r["pods_per_s"])
    one = {nodes: statistics.median(figures) for nodes, figures in singles.items()}
    for r in rows:
        base = one.get(r["nodes"])
        ratio = f"{r['pods_per_s'] / base:.2f}" if base else "-"
        r["ratio_to_one"] = r["pods_per_s"] / base if base else None
        split = "/".join(f"{x:.0f}" for x in r["scheduled_by_replica"])
        label = f"{r['replicas']}" + ("" if r["shares"] else " no-shares")
        cpu = sum(v for k, v in r["cpu_ms_per_pod"].items() if k.startswith("scheduler-"))
        print(
            f"{r['nodes']:>6} {label:>12} {r['pods_per_s']:>8,.0f} {ratio:>7} "
            f"{r['conflicts_per_pod']:>9.3f} {r['api_writes_per_pod']:>10.2f} "
            f"{r['lease_binding_writes_per_pod']:>10.2f} {r['events_per_pod']:>10.2f} "
            f"{r['failed_binds']:>7.0f} {split:>12} {r['double_booked_gpus']:>7} {cpu:>16.2f}"
        )


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    counts = [
        (int(x.split(":")[0]), not x.endswith(":no-shares")) for x in args.replicas.split(",")
    ]
    with contextlib.ExitStack() as stack:
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
            tmp = tempfile.mkdtemp(prefix="two-replicas-", dir=args.keep)
            print(f"  logs in {tmp}", file=sys.stderr)
        else:
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="two-replicas-"))
        for nodes in [int(x) for x in args.nodes.split(",")]:
            if args.pods + (args.warmup if args.mode == "stream" else 0) > nodes * 8:
                raise SystemExit(f"{nodes} nodes have {nodes * 8} GPUs: --warmup + --pods is more")
            for _ in range(args.repeats):
                for replicas, shares in counts:
                    rows.append(await run_one(nodes, replicas, shares, args, Path(tmp)))
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nodes", default="500,5000", help="node counts, comma-separated")
    p.add_argument("--pods", type=int, default=2000, help="the measured backlog")
    p.add_argument("--mode", choices=("backlog", "stream"), default="backlog")
    p.add_argument("--warmup", type=int, default=200, help="pods bound before measuring (stream)")
    p.add_argument(
        "--replicas",
        default="1,2",
        help="replica counts to compare, in this order; N:no-shares turns shares off",
    )
    p.add_argument("--repeats", type=int, default=1, help="runs of each replica count")
    p.add_argument("--concurrency", type=int, default=32, help="pod-creating workers")
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--json", type=Path, default=None, help="write the figures here")
    p.add_argument("--profile-dir", type=Path, default=None, help="cProfile each scheduler here")
    p.add_argument("--keep", type=Path, default=None, help="keep the processes' logs under here")
    args = p.parse_args()
    rows = asyncio.run(main_async(args))
    print_table(rows)
    figures = {"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows}
    text = json.dumps(figures, indent=1)
    if args.json is not None:
        args.json.write_text(text + "\n")
    else:
        print(text)


if __name__ == "__main__":
    main()
