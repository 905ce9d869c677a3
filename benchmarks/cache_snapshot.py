"""Benchmark of the scheduler cache's per-pod path at 5,000 nodes.

Run: ``.venv/bin/python benchmarks/cache_snapshot.py [--nodes 5000] [--pods 2000] [--repeats 5]``.
Prints JSON: microseconds per operation, median over repeats after a warm-up, for what one
scheduled pod costs the cache: ``update_snapshot`` after the previous pod's changes, the
same with nothing changed, ``assume_pod`` + ``finish_binding``, and the informer's Add that
confirms the bind. The cluster is ``dgx-h100`` rescaled (8 x H100 per node, inventories).

The process is set up as a scheduler should be: ``gc.freeze()`` after the initial sync, so
full collections do not walk every Node object (without it the *mean* snapshot time is several
times its median, from gen-2 collections that land inside it). ``--gc-threshold N`` also sets
the generation-0 threshold (CPython's default is 700): the snapshot clones allocate a few dozen
container objects per node, so young collections are what remains of its cost.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import time
from typing import Any

from gpusched.annotations import Assignment, assignment_annotations
from gpusched.cache import SchedulerCache, Snapshot
from gpusched.clock import FakeClock
from gpusched.sim.fleet import build_fleet, load_cluster_spec


def _pod(i: int, node: str | None = None, annotations: dict[str, str] | None = None) -> Any:
    pod: dict[str, Any] = {
        "metadata": {
            "name": f"p{i}",
            "namespace": "bench",
            "uid": f"uid-{i}",
            "annotations": annotations or {},
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "pause",
                    "resources": {
                        "requests": {"cpu": "4", "memory": "32Gi", "nvidia.com/gpu": "1"},
                        "limits": {"nvidia.com/gpu": "1"},
                    },
                }
            ]
        },
        "status": {"phase": "Pending"},
    }
    if node:
        pod["spec"]["nodeName"] = node
    return pod


def run(nodes: int, pods: int, repeats: int, gc_threshold: int | None = None) -> dict[str, Any]:
    cache = SchedulerCache(FakeClock())
    for sim in build_fleet(load_cluster_spec("dgx-h100", nodes=nodes)):
        cache.set_inventory(sim.name, sim.inventory)
        cache.add_node(sim.node)
    snapshot = Snapshot()
    started = time.perf_counter()
    cache.update_snapshot(snapshot)
    full = time.perf_counter() - started
    gc.collect()
    gc.freeze()
    if gc_threshold is not None:
        gc.set_threshold(gc_threshold, 50, 100)
    rng = random.Random(0)
    counter = 0
    samples: dict[str, list[float]] = {
        "snapshot": [],
        "snapshot_unchanged": [],
        "assume": [],
        "add": [],
    }
    for repeat in range(repeats + 1):  # the first round warms up
        spent = dict.fromkeys(samples, 0.0)
        done = 0
        for _ in range(pods):
            t0 = time.perf_counter()
            cache.update_snapshot(snapshot)
            t1 = time.perf_counter()
            cache.update_snapshot(snapshot)
            t2 = time.perf_counter()
            info = snapshot.node_infos()[rng.randrange(len(snapshot))]
            free = info.ledger.free_gpus()
            if not free:
                continue
            index = free[0]
            assignment = Assignment((index,), (info.ledger.devices[index].uuid or "",), (), "")
            counter += 1
            pending = _pod(counter)
            bound = _pod(counter, info.name, assignment_annotations(assignment))
            t3 = time.perf_counter()
            cache.assume_pod(pending, info.name, assignment)
            cache.finish_binding(pending)
            t4 = time.perf_counter()
            cache.add_pod(bound)
            t5 = time.perf_counter()
            spent["snapshot"] += t1 - t0
            spent["snapshot_unchanged"] += t2 - t1
            spent["assume"] += t4 - t3
            spent["add"] += t5 - t4
            done += 1
        if repeat and done:
            for key, total in spent.items():
                samples[key].append(total / done * 1e6)
    result: dict[str, Any] = {
        "nodes": nodes,
        "pods_per_repeat": pods,
        "repeats": repeats,
        "full_snapshot_ms": round(full * 1e3, 1),
        "pods_in_cache": cache.pod_count,
        "gc_threshold": gc.get_threshold(),
    }
    for key, values in samples.items():
        result[f"{key}_us"] = round(statistics.median(values), 1)
    per_pod = result["snapshot_us"] + result["assume_us"] + result["add_us"]
    result["cache_pods_per_s"] = round(1e6 / per_pod)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--gc-threshold", type=int, default=None)
    args = parser.parse_args()
    print(json.dumps(run(args.nodes, args.pods, args.repeats, args.gc_threshold), indent=2))


if __name__ == "__main__":
    main()
