"""Claim pods against plain ``nvidia.com/gpu`` pods, end to end, side by side in one run.

Issue 13 asks for pods/s of claim pods against plain pods at 1,000 nodes, and how many more
writes a claim pod costs. Three forms of the same ask, two H100s (``--gpus``):

- **plain**: ``nvidia.com/gpu: 2`` in the pod's resources;
- **gpuclaim**: a GpuClaim (``gpu.scheduling/v1``, ``count: 2``, Exclusive) created by the load
  generator just before its pod, which names it (``gpu.scheduling/claim``) and asks
  ``nvidia.com/gpu: 2`` too, as the seed's example does;
- **dra**: one ResourceClaimTemplate per run (``exactly: {deviceClassName: gpu.nvidia.com,
  count: 2}``); each pod names it in ``spec.resourceClaims``, the simulated resourceclaim
  controller makes the pod's ResourceClaim, and the scheduler must allocate it (kube-scheduler's
  DynamicResources plugin, gpusched's too).

One simulated API server in its own process (``scheduler_perf.SimProcess``: ``dgx-h100-dra``
rescaled to ``--nodes``, ResourceSlices published, no kubelets, every request counted by verb
and resource, the resourceclaim controller running in it) and one ``python -m gpusched
scheduler`` as shipped. Each form in turn (``--repeats`` rounds of all forms, interleaved, so
that noise from the machine falls on every form alike; a form's row is its median run), in its
own namespace: ``--warmup`` pods created and
waited for, then ``--pods`` measured pods created by ``--concurrency`` workers as fast as they
go; then the pods are deleted (grace 0) and the deletions' writes settle before the next form.
A measured pod is *complete* when everything a user expects is written: it is bound, its
``Scheduled`` Event exists and its claim's status says it holds it (GpuClaim ``status.phase:
Allocated`` with ``pods: [it]``; ResourceClaim ``status.allocation`` with ``reservedFor`` it).

Figures per form: the load generator's create rate (a GpuClaim pod is two creates); pods/s to
the last bind and to the last complete pod (Events are written under their own budget, 50/s, so
the second is mostly that budget); create-to-bound latency p50/p99; CPU milliseconds per pod of
the scheduler, the API server (with the controller) and the load generator (from /proc); API
writes per measured pod as the API server counted them, all of them but the load generator's
creates (pods, GpuClaims), by resource (Binding, Lease, Event, claim and claim status, pod
status); the claim writes per pod alone; the release writes per pod once the pods are deleted
(the GpuClaim's status and finalizer; the DRA claim's deallocation and deletion by the
controller).

    python benchmarks/claims.py [--nodes 1000] [--pods 1000] [--warmup 200] [--gpus 2]
        [--repeats 1] [--concurrency 16] [--timeout 300] [--json benchmarks/results-claims.json]
        [--profile-scheduler scheduler.prof]

Prints a table and writes the figures as JSON. Figures depend on the machine and on what else
runs on it; speed is never asserted in tests.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from scheduler_perf import (  # noqa: E402
    SchedulerProcess,
    SimProcess,
    _cpu_seconds,
    _percentile,
    pod_body,
)

__all__ = ["FORMS", "main", "run"]

FORMS = ("plain", "gpuclaim", "dra")
CLUSTER = "dgx-h100-dra"
TEMPLATE = "two-gpus"
_WRITES = ("create", "update", "patch", "delete", "deletecollection")
_USER_WRITES = (
    "create pods",
    "create gpuclaims",
    "create resourceclaimtemplates",
    "create namespaces",
)
"""The load generator's own writes (and its deletecollection), left out of the others'."""


def form_objects(form: str, name: str, namespace: str, gpus: int) -> list[dict[str, Any]]:
    """What the load generator creates for one pod of ``form``, in order (the pod last)."""
    pod = pod_body(name, namespace)
    container = pod["spec"]["containers"][0]
    resources = container["resources"]
    if form == "dra":
        del resources["requests"]["nvidia.com/gpu"]
        del resources["limits"]["nvidia.com/gpu"]
        pod["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": TEMPLATE}]
        resources["claims"] = [{"name": "gpus"}]
        return [pod]
    resources["requests"]["nvidia.com/gpu"] = resources["limits"]["nvidia.com/gpu"] = str(gpus)
    if form == "plain":
        return [pod]
    pod["metadata"]["annotations"] = {"gpu.scheduling/claim": name}
    claim = {
        "apiVersion": "gpu.scheduling/v1",
        "kind": "GpuClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"count": gpus, "exclusivity": "Exclusive"}},
    }
    return [claim, pod]


def claim_template(namespace: str, gpus: int) -> dict[str, Any]:
    from gpusched.sim.workload import DRA_DEVICE_CLASS

    request = {"name": "gpu", "exactly": {"deviceClassName": DRA_DEVICE_CLASS, "count": gpus}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": TEMPLATE, "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": [request]}}},
    }


class _Watch:
    """When each pod was first seen bound, with its ``Scheduled`` Event, and holding its claim."""

    def __init__(self) -> None:
        self.bound_at: dict[str, float] = {}
        self.event_at: dict[str, float] = {}
        self.claimed_at: dict[str, float] = {}
        self.changed = asyncio.Event()

    def _seen(self, into: dict[str, float], name: str) -> None:
        if name not in into:
            into[name] = time.monotonic()
            self.changed.set()

    def on_pod(self, kind: str, pod: dict[str, Any], old: dict[str, Any] | None) -> None:
        if (pod.get("spec") or {}).get("nodeName"):
            self._seen(self.bound_at, pod["metadata"]["name"])

    def on_event(self, kind: str, event: dict[str, Any], old: dict[str, Any] | None) -> None:
        involved = event.get("involvedObject") or {}
        if event.get("reason") == "Scheduled" and involved.get("kind") == "Pod":
            self._seen(self.event_at, involved.get("name", ""))

    def on_gpuclaim(self, kind: str, claim: dict[str, Any], old: dict[str, Any] | None) -> None:
        status = claim.get("status") or {}
        if status.get("phase") == "Allocated":
            for pod in status.get("pods") or ():
                self._seen(self.claimed_at, pod)

    def on_resourceclaim(
        self, kind: str, claim: dict[str, Any], old: dict[str, Any] | None
    ) -> None:
        status = claim.get("status") or {}
        if status.get("allocation"):
            for consumer in status.get("reservedFor") or ():
                if consumer.get("resource") == "pods":
                    self._seen(self.claimed_at, consumer.get("name", ""))

    def complete(self, names: list[str], claims: bool) -> list[str]:
        """The pods of ``names`` with everything written."""
        needed = [self.bound_at, self.event_at] + ([self.claimed_at] if claims else [])
        return [n for n in names if all(n in seen for seen in needed)]

    async def wait(self, names: list[str], claims: bool, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while len(self.complete(names, claims)) < len(names):
            self.changed.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), timeout=min(left, 1.0))
        return True


def _writes(counts: dict[str, int]) -> dict[str, int]:
    return {
        k: v
        for k, v in counts.items()
        if k.split()[0] in _WRITES
        and k not in _USER_WRITES
        and not k.startswith("deletecollection")
    }


async def _settled(sim: SimProcess, quiet: float = 1.5, limit: float = 120.0) -> dict[str, int]:
    """The API server's counts once no one writes for ``quiet`` seconds (Events drain, claims
    are released)."""
    deadline = time.monotonic() + limit
    last: dict[str, int] = (await sim.counts())["by_verb"]
    while time.monotonic() < deadline:
        await asyncio.sleep(quiet)
        now: dict[str, int] = (await sim.counts())["by_verb"]
        if _writes(now) == _writes(last):
            return now
        last = now
    return last


def _per_pod(before: dict[str, int], after: dict[str, int], pods: int) -> dict[str, float]:
    delta = {k: v - before.get(k, 0) for k, v in _writes(after).items()}
    return {k: v / pods for k, v in sorted(delta.items()) if v}


def _group(writes: dict[str, float]) -> dict[str, float]:
    """Writes per pod by what they write: binding, lease, event, claim, pod status, other."""
    out: dict[str, float] = {}
    for key, value in writes.items():
        resource = key.split()[1]
        what = {
            "pods/binding": "binding",
            "leases": "lease",
            "events": "event",
            "pods/status": "pod_status",
        }.get(resource)
        if what is None:
            claim = resource.startswith(("gpuclaims", "resourceclaims"))
            what = "claim" if claim else "other"
        out[what] = out.get(what, 0.0) + value
    return dict(sorted(out.items()))


async def _create(
    kubes: list[Any], form: str, ns: str, names: list[str], gpus: int, concurrency: int
) -> dict[str, float]:
    from gpusched.sim.workload import object_path

    created: dict[str, float] = {}
    todo = iter(names)

    async def worker(w: int) -> None:
        kube = kubes[w % len(kubes)]
        for name in todo:
            for obj in form_objects(form, name, ns, gpus):
                path = f"/api/v1/namespaces/{ns}/pods" if obj["kind"] == "Pod" else object_path(obj)
                await kube.create(path, obj)
            created[name] = time.monotonic()

    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    return created


async def _delete_all(kube: Any, ns: str, claims: bool) -> None:
    """Delete the form's pods (grace 0, no kubelet confirms) and, for GpuClaims, the claims
    (each goes once the scheduler has released it); wait until both are gone."""
    from gpusched.kube.client import resource_path

    pods = resource_path("", "v1", "pods", ns)
    gclaims = resource_path("gpu.scheduling", "v1", "gpuclaims", ns)
    rclaims = resource_path("resource.k8s.io", "v1", "resourceclaims", ns)
    await kube.delete(pods, {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0})
    if claims:
        await kube.delete(gclaims)
    for _ in range(1200):
        left = [(await kube.get(p, {"limit": "1"}))["items"] for p in (pods, gclaims, rclaims)]
        if not any(left):
            return
        await asyncio.sleep(0.1)
    raise RuntimeError(f"the pods or claims of {ns} were not deleted in 120s")


async def _form(
    sim: SimProcess,
    scheduler: SchedulerProcess,
    kubes: list[Any],
    form: str,
    args: argparse.Namespace,
    round_: int = 0,
) -> dict[str, Any]:
    from gpusched.kube.client import resource_path
    from gpusched.kube.reflector import Reflector

    ns = f"claims-{form}-{round_}"
    kube = kubes[0]
    row: dict[str, Any] = {"form": form, "nodes": args.nodes, "gpus_per_pod": args.gpus}
    row.update(warmup=args.warmup, pods=args.pods)
    await kube.create(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
    )
    if form == "dra":
        template = claim_template(ns, args.gpus)
        await kube.create(
            resource_path("resource.k8s.io", "v1", "resourceclaimtemplates", ns), template
        )
    watch = _Watch()
    watches = [
        (resource_path("", "v1", "pods", ns), watch.on_pod),
        (resource_path("", "v1", "events", ns), watch.on_event),
    ]
    if form == "gpuclaim":
        watches.append((resource_path("gpu.scheduling", "v1", "gpuclaims", ns), watch.on_gpuclaim))
    if form == "dra":
        path = resource_path("resource.k8s.io", "v1", "resourceclaims", ns)
        watches.append((path, watch.on_resourceclaim))
    reflectors = [Reflector(kube, p, handler=h, name=f"claims-{form}") for p, h in watches]
    tasks = [asyncio.create_task(r.run()) for r in reflectors]
    claims = form != "plain"
    try:
        for r in reflectors:
            await r.synced.wait()
        warm = [f"warm-{i}" for i in range(args.warmup)]
        await _create(kubes, form, ns, warm, args.gpus, args.concurrency)
        if not await watch.wait(warm, claims, args.timeout):
            await _delete_all(kube, ns, form == "gpuclaim")  # free the GPUs for the next form
            raise RuntimeError(
                f"warm-up pods not all complete in {args.timeout:.0f}s: of {len(warm)}, "
                f"{len(watch.bound_at)} bound, {len(watch.event_at)} with a Scheduled Event, "
                f"{len(watch.claimed_at)} holding their claim"
            )
        before = await _settled(sim)
        pids = {"scheduler": scheduler.proc.pid, "apiserver": sim.proc.pid, "loadgen": None}
        cpu_before = {k: _cpu_seconds(p) for k, p in pids.items()}
        names = [f"pod-{i}" for i in range(args.pods)]
        start = time.monotonic()
        created = await _create(kubes, form, ns, names, args.gpus, args.concurrency)
        row["create_per_s"] = args.pods / (time.monotonic() - start)
        row["complete"] = await watch.wait(names, claims, args.timeout)
        cpu_after = {k: _cpu_seconds(p) for k, p in pids.items()}
        after = await _settled(sim)
        await _delete_all(kube, ns, form == "gpuclaim")
        released = await _settled(sim)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    bound = {n: watch.bound_at[n] for n in names if n in watch.bound_at}
    done = watch.complete(names, claims)
    last = {
        n: max(watch.bound_at[n], watch.event_at[n], watch.claimed_at.get(n, 0.0)) for n in done
    }
    row["bound"] = len(bound)
    row["with_claim_status"] = sum(n in watch.claimed_at for n in names) if claims else None
    row["pods_per_s"] = len(bound) / (max(bound.values()) - start) if bound else 0.0
    row["pods_per_s_complete"] = len(last) / (max(last.values()) - start) if last else 0.0
    latencies = [max(bound[n] - created[n], 0.0) for n in bound]
    row["latency_p50_s"] = _percentile(latencies, 50)
    row["latency_p99_s"] = _percentile(latencies, 99)
    row["cpu_ms_per_pod"] = {
        k: (cpu_after[k] - cpu_before[k]) / max(len(bound), 1) * 1e3 for k in pids
    }
    per_pod = _per_pod(before, after, max(len(bound), 1))
    row["writes_per_pod"] = sum(per_pod.values())
    row["writes_per_pod_by_kind"] = _group(per_pod)
    row["claim_writes_per_pod"] = row["writes_per_pod_by_kind"].get("claim", 0.0)
    row["writes_per_pod_by_request"] = per_pod
    release = _per_pod(after, released, max(len(bound), 1))
    row["release_writes_per_pod"] = sum(release.values())
    row["release_writes_by_request"] = release
    print(
        f"  {form}: {row['pods_per_s']:,.0f} pods/s to the last bind, "
        f"{row['writes_per_pod']:.2f} writes/pod",
        file=sys.stderr,
        flush=True,
    )
    return row


def _median_row(
    form: str, runs: list[dict[str, Any]] | None, nodes: int, error: str | None
) -> dict[str, Any]:
    """The run with the median pods/s (its other figures with it), and every run's pods/s."""
    if not runs:
        return {"form": form, "nodes": nodes, "skipped": error or "not measured"}
    ordered = sorted(runs, key=lambda r: r["pods_per_s"])
    row = dict(ordered[(len(ordered) - 1) // 2])
    row["repeats"] = len(runs)
    row["pods_per_s_all"] = [r["pods_per_s"] for r in runs]
    row["pods_per_s_complete_all"] = [r["pods_per_s_complete"] for r in runs]
    row["scheduler_cpu_ms_per_pod_all"] = [r["cpu_ms_per_pod"]["scheduler"] for r in runs]
    return row


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from gpusched.kube.client import connect

    samples: dict[str, list[dict[str, Any]]] = {}
    failed: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        sim = SimProcess(args.nodes, tmp, CLUSTER)
        scheduler: SchedulerProcess | None = None
        kubes: list[Any] = []
        try:
            ready = await sim.ready()
            print(f"  {args.nodes} nodes: fleet in {ready['fleet_s']:.1f}s", file=sys.stderr)
            kubes = [await connect(sim.kubeconfig) for _ in range(4)]
            scheduler = SchedulerProcess(
                sim.kubeconfig, tmp, f"claims-{args.nodes}", profile_out=args.profile_scheduler
            )
            await scheduler.ready(timeout=600)
            for round_ in range(args.repeats):  # the forms interleaved, round by round
                for form in args.forms.split(","):
                    try:
                        sample = await _form(sim, scheduler, kubes, form, args, round_)
                    except RuntimeError as exc:  # a form that never completes: say so, go on
                        failed[form] = str(exc)
                        print(f"  {form}: {exc}", file=sys.stderr, flush=True)
                        continue
                    samples.setdefault(form, []).append(sample)
        finally:
            if scheduler is not None:
                scheduler.stop()
            for k in kubes:
                await k.close()
            sim.stop()
            if sim.proc.stdout is not None:  # SimProcess.stop leaves its pipe open
                sim.proc.stdout.close()
    rows = [
        _median_row(form, samples.get(form), args.nodes, failed.get(form))
        for form in args.forms.split(",")
    ]
    plain = samples.get("plain")
    for row in rows:
        runs = samples.get(row["form"])
        if plain and runs and "skipped" not in row:
            pairs = zip(runs, plain, strict=True)
            ratios = [r["pods_per_s"] / p["pods_per_s"] for r, p in pairs if p["pods_per_s"]]
            row["pods_per_s_vs_plain"] = statistics.median(ratios) if ratios else 0.0
            row["pods_per_s_vs_plain_all"] = ratios
            extra = [
                r["writes_per_pod"] - p["writes_per_pod"] for r, p in zip(runs, plain, strict=True)
            ]
            row["extra_writes_per_pod_vs_plain"] = statistics.median(extra)
    return {
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "cluster": CLUSTER,
        "nodes": args.nodes,
        "concurrency": args.concurrency,
        "repeats": args.repeats,
        "forms": rows,
    }


def table(result: dict[str, Any]) -> str:
    head = (
        f"{'form':9} {'bound':>6} {'created/s':>9} {'pods/s':>7} {'vs plain':>8} "
        f"{'complete/s':>10} {'sched ms':>8} "
        f"{'p50 ms':>7} {'p99 ms':>7} {'writes/pod':>10} {'claim':>6} {'binding':>7} "
        f"{'lease':>6} {'event':>6} {'pod st.':>7} {'release':>7}"
    )
    lines = [head]
    for r in result["forms"]:
        if "skipped" in r:
            lines.append(f"{r['form']:9} {r['skipped']}")
            continue
        k = r["writes_per_pod_by_kind"]
        vs = f"{r['pods_per_s_vs_plain']:.2f}x" if "pods_per_s_vs_plain" in r else "-"
        lines.append(
            f"{r['form']:9} {r['bound']:>6} {r['create_per_s']:>9,.0f} {r['pods_per_s']:>7,.0f} "
            f"{vs:>8} {r['pods_per_s_complete']:>10,.0f} "
            f"{r['cpu_ms_per_pod']['scheduler']:>8.1f} "
            f"{r['latency_p50_s'] * 1e3:>7,.0f} {r['latency_p99_s'] * 1e3:>7,.0f} "
            f"{r['writes_per_pod']:>10.2f} {k.get('claim', 0.0):>6.2f} "
            f"{k.get('binding', 0.0):>7.2f} {k.get('lease', 0.0):>6.2f} "
            f"{k.get('event', 0.0):>6.2f} {k.get('pod_status', 0.0):>7.2f} "
            f"{r['release_writes_per_pod']:>7.2f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1000, help="dgx-h100-dra nodes")
    parser.add_argument("--pods", type=int, default=1000, help="measured pods per form")
    parser.add_argument("--warmup", type=int, default=200, help="pods per form first")
    parser.add_argument("--gpus", type=int, default=2, help="GPUs each pod asks for")
    parser.add_argument("--forms", default=",".join(FORMS), help="forms, in this order")
    parser.add_argument("--concurrency", type=int, default=16, help="creating workers")
    parser.add_argument(
        "--repeats", type=int, default=1, help="rounds of every form, interleaved (median)"
    )
    parser.add_argument("--timeout", type=float, default=300, help="seconds per wait")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument(
        "--profile-scheduler",
        type=Path,
        default=None,
        help="cProfile the scheduler process into this file (pstats)",
    )
    args = parser.parse_args(argv)
    unknown = set(args.forms.split(",")) - set(FORMS)
    if unknown:
        parser.error(f"--forms: unknown {', '.join(sorted(unknown))}; known: {', '.join(FORMS)}")
    if (args.warmup + args.pods) * args.gpus > args.nodes * 8:
        parser.error(
            f"--warmup + --pods ({args.warmup + args.pods}) pods of {args.gpus} GPUs do not fit "
            f"on {args.nodes} nodes of 8 GPUs: lower them or raise --nodes"
        )
    result = asyncio.run(run(args))
    print(f"{args.nodes} nodes ({CLUSTER}), {args.gpus} GPUs per pod, one scheduler")
    print(table(result))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
