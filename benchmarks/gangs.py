"""Time to bind a whole gang, end to end on the simulated cluster.

One simulated API server (``scheduler_perf.SimProcess``: ``--nodes`` ``dgx-h100`` nodes, 8 GPUs
each, no kubelets, every request counted) and one ``python -m gpusched scheduler`` process as
shipped (``scheduler_perf.SchedulerProcess``, Coscheduling on by default). For each case the
load generator creates the gang's members in a fresh namespace as fast as ``--concurrency``
workers can, in Kueue's form (label ``kueue.x-k8s.io/pod-group-name`` and the total-count
annotation: no group object, so any API server takes them), and a watch records when each
member is first seen bound. The cases (``--cases``, ``MEMBERSxGPUS``): 64 one-GPU members, 512
one-GPU members, 64 eight-GPU members (one whole node each).

Reported per case: ``bind_s``, from the last member created (when the gang is complete and
its members leave the gate) to the last member bound; ``total_s``, from the first create;
``bound_spread_s``, first to last member bound; the API writes the scheduler made per member as
the API server counted them once they settle (Lease writes, Bindings, Events, condition
patches: every write but the pod creates), and Lease + Binding writes alone; GPUs
double-booked (must be 0); the nodes the gang landed on.

    python benchmarks/gangs.py [--nodes 1000] [--cases 64x1,512x1,64x8] [--concurrency 32]
        [--timeout 600] [--json benchmarks/results-gangs.json]

Prints a table and writes the figures as JSON. Figures depend on the machine and on what else
runs on it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from scheduler_perf import SchedulerProcess, SimProcess, pod_body  # noqa: E402
from two_replicas import BoundWatch, double_booked, settled  # noqa: E402

_WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")


def member_body(name: str, namespace: str, group: str, total: int, gpus: int) -> dict[str, Any]:
    """A Kueue-form gang member asking for ``gpus`` whole GPUs."""
    pod = pod_body(name, namespace)
    pod["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] = group
    pod["metadata"]["annotations"] = {"kueue.x-k8s.io/pod-group-total-count": str(total)}
    container = pod["spec"]["containers"][0]
    container["resources"]["requests"]["nvidia.com/gpu"] = str(gpus)
    container["resources"]["limits"]["nvidia.com/gpu"] = str(gpus)
    return pod


async def run_case(
    kubes: list[Any], sim: SimProcess, members: int, gpus: int, args: argparse.Namespace
) -> dict[str, Any]:
    from gpusched.kube.client import resource_path
    from gpusched.kube.reflector import Reflector

    ns = f"gang-{members}x{gpus}"
    kube = kubes[0]
    await kube.create(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
    )
    watch = BoundWatch()
    pods_path = resource_path("", "v1", "pods", ns)
    reflector = Reflector(kube, pods_path, handler=watch.on_pod, name=f"bench-{ns}")
    task = asyncio.create_task(reflector.run())
    try:
        await reflector.synced.wait()
        before = await settled(sim)
        names = [f"m{i}" for i in range(members)]
        todo = iter(names)
        created: dict[str, float] = {}

        async def worker(w: int) -> None:
            for name in todo:
                await kubes[w % len(kubes)].create(
                    pods_path, member_body(name, ns, "g", members, gpus)
                )
                created[name] = time.monotonic()

        first = time.monotonic()
        await asyncio.gather(*(worker(w) for w in range(args.concurrency)))
        complete = max(created.values())
        done = await watch.wait(names, timeout=args.timeout)
        after = await settled(sim)
        pods = (await kube.get(pods_path))["items"]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    bound = sorted(watch.bound_at[n] for n in names if n in watch.bound_at)
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in set(before) | set(after)}
    writes = {
        k: v for k, v in delta.items() if v and k.split()[0] in _WRITE_VERBS and k != "create pods"
    }
    core = sum(v for k, v in writes.items() if "leases" in k or "pods/binding" in k)
    return {
        "members": members,
        "gpus_per_member": gpus,
        "complete": done,
        "bound": len(bound),
        "bind_s": (bound[-1] - complete) if bound else None,
        "total_s": (bound[-1] - first) if bound else None,
        "bound_spread_s": (bound[-1] - bound[0]) if bound else None,
        "api_writes_per_pod": sum(writes.values()) / members,
        "lease_binding_writes_per_pod": core / members,
        "writes": writes,
        "double_booked_gpus": double_booked(pods),
        "nodes_used": len({p["spec"].get("nodeName") for p in pods if p["spec"].get("nodeName")}),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from gpusched.kube.client import connect

    cases = [tuple(int(x) for x in c.split("x")) for c in args.cases.split(",")]
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        sim = SimProcess(args.nodes, tmp)
        scheduler: SchedulerProcess | None = None
        kubes: list[Any] = []
        rows: list[dict[str, Any]] = []
        try:
            await sim.ready()
            kubes = [await connect(sim.kubeconfig) for _ in range(4)]
            scheduler = SchedulerProcess(sim.kubeconfig, tmp, f"gangs-{args.nodes}")
            await scheduler.ready(timeout=600)
            for members, gpus in cases:
                rows.append(await run_case(kubes, sim, members, gpus, args))
        finally:
            if scheduler is not None:
                scheduler.stop()
            for k in kubes:
                await k.close()
            sim.stop()
            if sim.proc.stdout is not None:  # SimProcess.stop leaves its pipe open
                sim.proc.stdout.close()
    return {"nodes": args.nodes, "cluster": "dgx-h100", "cases": rows}


def table(result: dict[str, Any]) -> str:
    lines = [
        f"{'gang':>8} {'bound':>6} {'bind_s':>7} {'total_s':>8} {'spread_s':>8} "
        f"{'writes/pod':>10} {'lease+bind/pod':>14} {'nodes':>6} {'double':>6}"
    ]
    for r in result["cases"]:
        lines.append(
            f"{r['members']:>5}x{r['gpus_per_member']:<2} {r['bound']:>6} "
            f"{(r['bind_s'] or 0):>7.2f} {(r['total_s'] or 0):>8.2f} "
            f"{(r['bound_spread_s'] or 0):>8.2f} {r['api_writes_per_pod']:>10.2f} "
            f"{r['lease_binding_writes_per_pod']:>14.2f} {r['nodes_used']:>6} "
            f"{r['double_booked_gpus']:>6}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--cases", default="64x1,512x1,64x8")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    result = asyncio.run(run(args))
    print(f"{args.nodes} nodes ({result['cluster']}), one scheduler")
    print(table(result))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
