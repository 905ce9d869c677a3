"""Multi-GPU pods in memory: throughput on the fast path, and fragmentation against baselines.

Issue 11 asks, for pods of several whole GPUs, (a) how fast the scheduling cycle places them in
memory at 5,000 nodes now that their score is the node's alone (goal: the order of 1-GPU pods,
>= 2,000 pods/s), against the sampled path they took before, and (b) how fragmented a cluster
is after a mixed trace: how many 8-, 4- and 2-GPU requests it can still take, and how well
connected the sets it gave are, against first-fit and random placement. One run answers both.

**(a) Throughput.** Fleet: ``dgx-v100`` (DGX-1V hybrid cube-mesh, the layout where the choice
matters) rescaled to ``--nodes``. Stream: ``--pods`` pods of 2, 4 or 8 ``nvidia.com/gpu``
(equal odds, ``--seed``; at most as many as fill 80% of the GPUs, so every pod fits; the
first ``--warmup``, at most a fifth, untimed), upstream's pod-default 100m cpu / 500Mi, driven as
``scheduler_perf._inmem_once`` drives the scheduler (snapshot, ``find_placement``, Reserve,
assume, Permit, ``finish_binding``), no departures. Profiles, each on a fresh cache:

- **batched**: the shipped profile (equivalence classes on, ``topologyFirst``);
- **sampled**: the same with ``opportunisticBatching: false``: every pod filters and scores
  the adaptive sample of nodes (``percentageOfNodesToScore``: 10% of 5,000), as multi-GPU pods
  did before their score became the node's alone (fewer pods: ``--sampled-pods``);
- **1-GPU batched**: the shipped profile on the same fleet with ``nvidia.com/gpu: 1`` pods,
  the reference the goal names.

**(b) Fragmentation.** Fleet: ``dgx-v100`` rescaled to ``--trace-nodes``. Trace: ``--trace-pods``
arrivals of 8, 4, 2 or 1 GPUs (odds 1:2:3:4), each holding its GPUs for a duration drawn so that
about three quarters of the GPUs are busy in the steady state, departures processed before each
arrival; every policy sees the identical trace (a pod that fits nowhere is dropped and counted).
At the end: how many 8-, 4- and 2-GPU requests the free GPUs could still take (per node
``free // k``, summed: whole nodes for 8), and over the multi-GPU pods placed, the mean set
quality (:func:`gpusched.topology.set_quality` of the set's link score: NVLinks, PCIe only for
pairs without) and how many got a set worse than the best any node offered at that moment.
Policies:

- **gpusched**: the shipped scheduler (``topologyFirst``);
- **gpusched-weighed**: ``topologyFirst: false``, the weighted mean of before;
- **first-fit**: the first node in fleet order with enough free GPUs, its lowest free indices;
- **random**: a uniformly random node with enough free GPUs, random free GPUs there.

    python benchmarks/topology.py [--nodes 500,5000] [--pods 3000] [--warmup 500]
        [--sampled-pods 600] [--trace-nodes 64] [--trace-pods 4000] [--seed 0]
        [--json benchmarks/results-topology.json]

Prints a table and writes the figures as JSON. Speed is never asserted in tests.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import sys
import time
import uuid
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

__all__ = [
    "POLICIES",
    "PROFILES",
    "TARGET_INMEM",
    "bench",
    "fragmentation",
    "main",
    "throughput",
]

TARGET_INMEM = 2000
PROFILES = ("batched", "sampled", "1-GPU batched")
POLICIES = ("gpusched", "gpusched-weighed", "first-fit", "random")
MULTI = (2, 4, 8)
TRACE_SIZES = ((8, 1), (4, 2), (2, 3), (1, 4))
"""(GPUs, odds) of the fragmentation trace."""
FLEET = "dgx-v100"


def _pod(name: str, uid: str, gpus: int) -> dict[str, Any]:
    gpu = {"nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "topo", "uid": uid},
        "spec": {
            "schedulerName": "gpusched",
            "containers": [
                {
                    "name": "pause",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {
                        "requests": {"cpu": "100m", "memory": "500Mi", **gpu},
                        "limits": gpu,
                    },
                }
            ],
        },
        "status": {"phase": "Pending"},
    }


def _scheduler(fleet: list[Any], seed: int, *, batching: bool = True, **gpu_fit: Any) -> Any:
    """The shipped scheduler (GPUFit's args ``gpu_fit``), cache filled from ``fleet``."""
    from gpusched.framework import default_config
    from gpusched.framework.config import PluginConfig
    from gpusched.kube.client import Kube
    from gpusched.scheduler import Scheduler

    config = default_config()
    profile = config.profiles[0].model_copy(
        update={"plugin_config": [PluginConfig(name="GPUFit", args=gpu_fit)]}
    )
    config = config.model_copy(update={"profiles": [profile], "opportunistic_batching": batching})
    scheduler = Scheduler(Kube(cast(Any, None)), config, rng=random.Random(seed))
    for sim in fleet:
        scheduler.cache.add_node(sim.node)
        if sim.inventory is not None:
            scheduler.cache.set_inventory(sim.name, sim.inventory)
    scheduler.cache.update_snapshot(scheduler.snapshot)
    return scheduler


def _commit(scheduler: Any, fw: Any, state: Any, pod: dict[str, Any], node: str) -> Any:
    """Reserve, assume, Permit and finish the binding, as scheduler_perf does; the assignment."""
    from gpusched.annotations import Assignment
    from gpusched.framework import DEVICE_ASSIGNMENT

    status = fw.run_reserve(state, pod, node)
    got = state.get(DEVICE_ASSIGNMENT) or Assignment((), (), (), "")
    got = replace(got, reservation_uid=str(uuid.uuid4()))
    scheduler.cache.assume_pod(pod, node, got)
    if status.is_success:
        fw.run_permit(state, pod, node)
    scheduler.cache.finish_binding(pod)
    return got


# -- (a) throughput ------------------------------------------------------------------------------


def _throughput_once(
    profile: str, fleet: list[Any], sizes: list[int], warmup: int, seed: int
) -> dict[str, Any]:
    from gpusched.framework import CycleState

    gc.unfreeze()
    gc.collect()
    scheduler = _scheduler(fleet, seed, batching=profile != "sampled")
    fw = scheduler.frameworks["gpusched"]
    cache, snapshot, rng = scheduler.cache, scheduler.snapshot, scheduler.rng
    pods = [_pod(f"p{i}", f"uid-{profile}-{seed}-{i}", n) for i, n in enumerate(sizes)]
    gc.collect()
    gc.freeze()
    evaluated = unplaced = 0
    started = time.perf_counter()
    for i, pod in enumerate(pods):
        if i == warmup:
            started = time.perf_counter()
            evaluated = 0
        state = CycleState(record_plugin_metrics=rng.random() < 0.1)
        cache.update_snapshot(snapshot)
        result = scheduler.find_placement(fw, state, pod)
        evaluated += result.evaluated
        if result.node is None:
            unplaced += 1
            continue
        _commit(scheduler, fw, state, pod, result.node)
    elapsed = time.perf_counter() - started
    gc.unfreeze()
    timed = len(pods) - warmup
    return {
        "profile": profile,
        "pods": len(pods),
        "warmup": warmup,
        "pods_per_s": timed / elapsed if elapsed > 0 else 0.0,
        "nodes_evaluated_per_pod": evaluated / timed if timed else 0.0,
        "pods_unplaced": unplaced,
    }


def throughput(nodes: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    """(a) at ``nodes`` nodes: the three profiles on the same fleet."""
    from gpusched.sim.fleet import build_fleet, load_cluster_spec

    fleet = build_fleet(load_cluster_spec(FLEET, nodes=nodes))
    rng = random.Random(args.seed)
    # Pods capped so that the stream fills at most 80% of the GPUs: every pod fits.
    fits = int(0.8 * nodes * 8 / (sum(MULTI) / len(MULTI)))
    multi = [rng.choice(MULTI) for _ in range(min(args.pods, fits))]
    sampled = multi[: args.sampled_pods]
    warmup = min(args.warmup, len(multi) // 5)
    rows = []
    for profile in PROFILES:
        if profile == "sampled":
            sizes, first = sampled, min(warmup, len(sampled) // 5)
        elif profile == "1-GPU batched":
            sizes, first = [1] * len(multi), warmup
        else:
            sizes, first = multi, warmup
        row = _throughput_once(profile, fleet, sizes, first, args.seed)
        row["nodes"] = nodes
        rows.append(row)
        print(f"  {nodes} nodes {profile}: {row['pods_per_s']:,.0f} pods/s", file=sys.stderr)
    return rows


# -- (b) fragmentation ---------------------------------------------------------------------------


def _trace(count: int, gpus: int, seed: int) -> list[tuple[int, int]]:
    """``count`` arrivals (GPUs, duration in arrivals), durations drawn so that about three
    quarters of ``gpus`` are busy in the steady state (Little's law: mean GPUs x mean
    duration = 0.75 x gpus)."""
    rng = random.Random(seed)
    sizes = [k for k, _ in TRACE_SIZES]
    odds = [w for _, w in TRACE_SIZES]
    mean_gpus = sum(k * w for k, w in TRACE_SIZES) / sum(odds)
    mean_duration = 0.75 * gpus / mean_gpus
    return [
        (rng.choices(sizes, odds)[0], max(1, round(rng.expovariate(1 / mean_duration))))
        for _ in range(count)
    ]


class _Layouts:
    """Per node layout, the link-score matrix (memoised by inventory object)."""

    def __init__(self) -> None:
        self._by: dict[int, Any] = {}

    def of(self, inventory: Any) -> Any:
        from gpusched.topology import GPUTopology

        found = self._by.get(id(inventory))
        if found is None:
            found = GPUTopology.build(len(inventory.gpus), inventory.links, 5000)
            self._by[id(inventory)] = found
        return found


def _quality(topology: Any, ids: tuple[int, ...]) -> int:
    from gpusched.topology import matrix_set_score, set_quality

    return int(set_quality(matrix_set_score(topology.link_scores, ids), len(ids)))


def _best_offered(snapshot: Any, layouts: _Layouts, n: int) -> int:
    """The best link quality any node's free GPUs offer for ``n`` (each node's chosen set,
    which is its best by link score)."""
    best = 0
    for info in snapshot.node_infos():
        inventory = info.ledger.inventory
        free = info.ledger.free_gpus()
        if inventory is None or len(free) < n:
            continue
        topology = layouts.of(inventory)
        best = max(best, _quality(topology, topology.choose(free, n)[0]))
    return best


def _baseline_choice(
    policy: str, snapshot: Any, order: list[str], n: int, rng: random.Random
) -> tuple[str, tuple[int, ...]] | None:
    if policy == "first-fit":
        for name in order:
            free = snapshot.get(name).ledger.free_gpus()
            if len(free) >= n:
                return name, tuple(free[:n])
        return None
    fits = [name for name in order if len(snapshot.get(name).ledger.free_gpus()) >= n]
    if not fits:
        return None
    name = rng.choice(fits)
    return name, tuple(sorted(rng.sample(snapshot.get(name).ledger.free_gpus(), n)))


def _run_trace(policy: str, fleet: list[Any], trace: list[tuple[int, int]], seed: int) -> Any:
    from gpusched.annotations import Assignment
    from gpusched.framework import CycleState

    args: dict[str, Any] = {"topologyFirst": False} if policy == "gpusched-weighed" else {}
    scheduler = _scheduler(fleet, seed, **args)
    fw = scheduler.frameworks["gpusched"]
    cache, snapshot = scheduler.cache, scheduler.snapshot
    order = [n.name for n in fleet]
    layouts, rng = _Layouts(), random.Random(seed)
    leaving: dict[int, list[dict[str, Any]]] = {}
    qualities: list[int] = []
    worse = unplaced = 0
    placed: Counter[int] = Counter()
    for i, (n, duration) in enumerate(trace):
        for pod in leaving.pop(i, []):
            cache.forget_pod(pod)
        cache.update_snapshot(snapshot)
        pod = _pod(f"t{i}", f"uid-{policy}-{i}", n)
        best = _best_offered(snapshot, layouts, n) if n >= 2 else 0
        if policy.startswith("gpusched"):
            state = CycleState()
            result = scheduler.find_placement(fw, state, pod)
            if result.node is None:
                unplaced += 1
                continue
            node, ids = result.node, _commit(scheduler, fw, state, pod, result.node).gpu_ids
        else:
            found = _baseline_choice(policy, snapshot, order, n, rng)
            if found is None:
                unplaced += 1
                continue
            node, ids = found
            devices = snapshot.get(node).ledger.devices
            assignment = Assignment(
                ids,
                tuple(devices[g].uuid or "" for g in ids),
                tuple(devices[g].memory_mib or 0 for g in ids),
                str(uuid.uuid4()),
            )
            cache.assume_pod(pod, node, assignment)
            cache.finish_binding(pod)
        placed[n] += 1
        leaving.setdefault(i + duration, []).append(pod)
        if n >= 2:
            inventory = snapshot.get(node).ledger.inventory
            quality = _quality(layouts.of(inventory), tuple(ids))
            qualities.append(quality)
            worse += quality < best
    cache.update_snapshot(snapshot)
    free = [len(info.ledger.free_gpus()) for info in snapshot.node_infos()]
    return {
        "policy": policy,
        "pods_placed": sum(placed.values()),
        "pods_unplaced": unplaced,
        "gpus_free": sum(free),
        "can_take_8": sum(f // 8 for f in free),
        "can_take_4": sum(f // 4 for f in free),
        "can_take_2": sum(f // 2 for f in free),
        "multi_gpu_placed": len(qualities),
        "mean_set_quality": round(sum(qualities) / len(qualities), 1) if qualities else 0.0,
        "worse_than_best_offered": worse,
    }


def fragmentation(args: argparse.Namespace) -> list[dict[str, Any]]:
    """(b): every policy on the identical trace."""
    from gpusched.sim.fleet import build_fleet, load_cluster_spec

    fleet = build_fleet(load_cluster_spec(FLEET, nodes=args.trace_nodes))
    trace = _trace(args.trace_pods, args.trace_nodes * 8, args.seed)
    rows = []
    for policy in POLICIES:
        row = _run_trace(policy, fleet, trace, args.seed)
        row["nodes"] = args.trace_nodes
        rows.append(row)
        print(f"  trace {policy}: {row['can_take_8']} x 8 GPUs left", file=sys.stderr)
    return rows


# -- the run -------------------------------------------------------------------------------------


def bench(args: argparse.Namespace) -> dict[str, Any]:
    figures: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "workload": {
            "cluster": FLEET,
            "multi_gpu_sizes": list(MULTI),
            "pods": args.pods,
            "warmup": args.warmup,
            "sampled_pods": args.sampled_pods,
            "trace_nodes": args.trace_nodes,
            "trace_pods": args.trace_pods,
            "trace_sizes": dict(TRACE_SIZES),
            "seed": args.seed,
        },
        "throughput": [],
    }
    for n in [int(x) for x in args.nodes.split(",") if x]:
        figures["throughput"] += throughput(n, args)
    figures["fragmentation"] = fragmentation(args) if args.trace_pods else []
    figures["goals"] = _goals(figures)
    return figures


def _goals(figures: dict[str, Any]) -> dict[str, Any]:
    rows = figures["throughput"]
    goals: dict[str, Any] = {}
    if rows:
        n = max(r["nodes"] for r in rows)
        by = {r["profile"]: r for r in rows if r["nodes"] == n}
        batched = by["batched"]["pods_per_s"]
        goals.update(
            nodes=n,
            multi_gpu_pods_per_s=batched,
            inmem_target_met=batched >= TARGET_INMEM,
            speedup_over_sampled=batched / max(by["sampled"]["pods_per_s"], 1e-9),
            ratio_to_one_gpu=batched / max(by["1-GPU batched"]["pods_per_s"], 1e-9),
        )
    trace = {r["policy"]: r for r in figures.get("fragmentation", [])}
    if trace:
        goals["gpusched_worse_than_best_offered"] = trace["gpusched"]["worse_than_best_offered"]
        goals["gpusched_can_take_8_vs_first_fit"] = (
            trace["gpusched"]["can_take_8"] - trace["first-fit"]["can_take_8"]
        )
    return goals


def print_table(figures: dict[str, Any]) -> None:
    print("(a) Multi-GPU pods (2/4/8 GPUs) in memory, dgx-v100 fleet")
    print(f"{'nodes':>6} {'profile':16} {'pods/s':>8} {'evaluated/pod':>13} {'unplaced':>8}")
    for r in figures["throughput"]:
        print(
            f"{r['nodes']:>6} {r['profile']:16} {r['pods_per_s']:>8,.0f} "
            f"{r['nodes_evaluated_per_pod']:>13,.1f} {r['pods_unplaced']:>8}"
        )
    print("(b) Fragmentation after a mixed trace (8/4/2/1 GPUs, arrivals and departures)")
    print(
        f"{'policy':18} {'placed':>6} {'dropped':>7} {'free':>5} {'8s':>4} {'4s':>4} {'2s':>4} "
        f"{'quality':>7} {'worse':>5}"
    )
    for r in figures["fragmentation"]:
        print(
            f"{r['policy']:18} {r['pods_placed']:>6} {r['pods_unplaced']:>7} {r['gpus_free']:>5} "
            f"{r['can_take_8']:>4} {r['can_take_4']:>4} {r['can_take_2']:>4} "
            f"{r['mean_set_quality']:>7} {r['worse_than_best_offered']:>5}"
        )
    goals = figures.get("goals") or {}
    if "inmem_target_met" in goals:
        print(
            f"goal at {goals['nodes']:,} nodes: >= {TARGET_INMEM:,} multi-GPU pods/s "
            f"{'met' if goals['inmem_target_met'] else 'missed'} "
            f"({goals['multi_gpu_pods_per_s']:,.0f}; x{goals['speedup_over_sampled']:.1f} the "
            f"sampled path, {goals['ratio_to_one_gpu']:.2f} of 1-GPU pods)"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--nodes", default="500,5000", help="fleet sizes for (a), comma-separated")
    parser.add_argument("--pods", type=int, default=3000, help="(a) pods per profile")
    parser.add_argument("--warmup", type=int, default=500, help="(a) leading pods not timed")
    parser.add_argument("--sampled-pods", type=int, default=600, help="(a) pods, sampled path")
    parser.add_argument("--trace-nodes", type=int, default=64, help="(b) nodes")
    parser.add_argument("--trace-pods", type=int, default=4000, help="(b) arrivals (0: skip)")
    parser.add_argument("--seed", type=int, default=0, help="the streams' seed")
    parser.add_argument("--json", default="", help="also write the figures to this file")
    args = parser.parse_args(argv)
    if args.warmup >= args.pods:
        parser.error(f"--warmup ({args.warmup}) must be below --pods ({args.pods}): lower it")
    figures = bench(args)
    print_table(figures)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
