"""Mixed GPU workload in memory: throughput and allocation quality per GPUFit strategy.

Issue 10 asks, for a mixed workload on a 5,000-node mixed fleet, how fast the scheduling cycle
places pods in memory (goal: >= 2,000 pods/s) and how well each strategy packs compared with a
first-fit baseline (goal: binpack leaves more fully idle GPUs than first-fit). This file answers
both in one run, with today's whole-GPU figure (``scheduler_perf.py --mode inmem``, gpusched
profile, ``dgx-h100`` fleet of the same size) measured in the same process as the reference.

Fleet: the shipped ``mixed`` cluster rescaled to ``--nodes`` (CPU pool, tainted DGX H100,
DGX-1V, A40 pairs, two MIG H100 PCIe pools). Stream: ``--pods`` pods drawn with ``--seed``:
60% shared (``gpusched.io/gpu: 1`` + ``gpusched.io/vram`` 10/20/30/40Gi), 10% exclusive
shares (the same plus ``gpusched.io/exclusive: "true"``), 20% whole GPUs (``nvidia.com/gpu``
1, 2, 4 or 8), 10% MIG (``nvidia.com/mig-1g.10gb`` or ``-2g.20gb``: the MIG profiles the fleet
has). Every pod tolerates ``nvidia.com/gpu`` (the DGX H100 pool is tainted) and asks upstream's
pod-default 100m cpu / 500Mi. Every profile sees the identical stream.

Profiles, each on a fresh cache:

- **binpack**, **spread**: the shipped scheduler with GPUFit's ``strategy`` set, driven as
  ``scheduler_perf._inmem_once`` drives it (snapshot, ``find_placement``, Reserve, assume,
  Permit, ``finish_binding``), so GPUs fill up as in a real run. A pod that fits nowhere is
  counted unplaced and the stream goes on (a real queue would park it).
- **binpack-most-allocated**: binpack with NodeResourcesFit's ``scoringStrategy:
  MostAllocated`` too. As shipped, NodeResourcesFit scores ``LeastAllocated`` (upstream's
  default: it spreads pods over nodes by cpu and memory), which pulls against GPUFit's
  binpack; this is the configuration a cluster that wants packing would deploy.
- **first-fit**, the baseline: a *plain loop over the device ledgers*, not a scheduler
  profile: the first node in fleet order whose ledger can take the pod, and there the lowest
  device indices (shared: the lowest indices ``NodeLedger.shareable_devices`` lists; MIG: the
  first free MIG device of the profile). It checks devices only (every pod tolerates the taint
  and the CPU/memory asks never bind on these nodes), and it assumes through the same cache,
  so the quality figures are computed the same way. Its pods/s is a loop, not a scheduler:
  O(nodes) per pod, shown for completeness only.

Figures per profile and fleet size: pods/s over the pods after ``--warmup`` (attempts, placed
or not, per second of wall time), nodes the scheduler evaluated per pod (``find_placement``'s
count; 0 for first-fit, which is no scheduler), pods placed / unplaced (by kind), GPUs left
fully idle once the stream is through (no holder; a MIG GPU counts when none of its MIG devices
is held, and those are also given apart), and stranded VRAM: the free memory of shared GPUs that
are partly used but cannot take the smallest shared request of the stream (10Gi), so memory no
pod of this stream could use. Pods placed is not a quality figure alone: once the fleet is full
a strategy that places many small shares instead of whole-GPU pods places more pods.

    python benchmarks/gpu_mix.py [--nodes 500,5000] [--pods 3000] [--warmup 500] [--seed 0]
        [--repeats 1] [--percentage P] [--no-reference] [--json out.json]

Prints a table and the same figures as JSON. Speed is never asserted in tests.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
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

import scheduler_perf  # noqa: E402  (a sibling script, not a package)

__all__ = [
    "MIN_SHARED_GIB",
    "PROFILES",
    "TARGET_INMEM",
    "allocation_quality",
    "bench",
    "first_fit",
    "main",
    "mixed_stream",
    "run_profile",
]

PROFILES = ("binpack", "binpack-most-allocated", "spread", "first-fit")
TARGET_INMEM = 2000
SHARED_GIB = (10, 20, 30, 40)
MIN_SHARED_GIB = min(SHARED_GIB)
WHOLE_GPUS = (1, 2, 4, 8)
MIG_PROFILES = ("1g.10gb", "2g.20gb")
MIX = (("shared", 60), ("exclusive", 10), ("whole", 20), ("mig", 10))


def _pod(
    name: str, uid: str, limits: dict[str, str], annotations: dict[str, str]
) -> dict[str, Any]:
    requests = {"cpu": "100m", "memory": "500Mi"}
    requests.update({k: v for k, v in limits.items() if k.startswith("nvidia.com/")})
    meta: dict[str, Any] = {"name": name, "namespace": "mix", "uid": uid, "labels": {"app": "mix"}}
    if annotations:
        meta["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "schedulerName": "gpusched",
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
            "containers": [
                {
                    "name": "pause",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": requests, "limits": limits},
                }
            ],
        },
        "status": {"phase": "Pending"},
    }


def mixed_stream(count: int, seed: int, tag: str = "") -> list[tuple[str, dict[str, Any]]]:
    """``count`` (kind, pod) pairs drawn with ``seed`` by :data:`MIX`; same seed, same stream
    (``tag`` only makes the UIDs unique per run)."""
    rng = random.Random(seed)
    kinds = [k for k, _ in MIX]
    weights = [w for _, w in MIX]
    out = []
    for i in range(count):
        kind = rng.choices(kinds, weights)[0]
        limits: dict[str, str] = {}
        annotations: dict[str, str] = {}
        if kind in ("shared", "exclusive"):
            limits = {"gpusched.io/gpu": "1", "gpusched.io/vram": f"{rng.choice(SHARED_GIB)}Gi"}
            if kind == "exclusive":  # a modifier: an annotation, not a resource
                annotations["gpusched.io/exclusive"] = "true"
        elif kind == "whole":
            limits = {"nvidia.com/gpu": str(rng.choice(WHOLE_GPUS))}
        else:
            limits = {f"nvidia.com/mig-{rng.choice(MIG_PROFILES)}": "1"}
        out.append((kind, _pod(f"m{i}", f"uid-{tag}-{i}", limits, annotations)))
    return out


def _scheduler(
    strategy: str, fleet: list[Any], seed: int, percentage: int = 0, most_allocated: bool = False
) -> Any:
    """The shipped scheduler, GPUFit ``strategy`` set (and NodeResourcesFit's
    ``MostAllocated`` when asked), cache filled from ``fleet`` directly."""
    from gpusched.framework import default_config
    from gpusched.framework.config import PluginConfig
    from gpusched.kube.client import Kube
    from gpusched.scheduler import Scheduler

    config = default_config()
    plugin_config = [PluginConfig(name="GPUFit", args={"strategy": strategy})]
    if most_allocated:
        args = {"scoringStrategy": {"type": "MostAllocated"}}
        plugin_config.append(PluginConfig(name="NodeResourcesFit", args=args))
    profile = config.profiles[0].model_copy(update={"plugin_config": plugin_config})
    config = config.model_copy(
        update={"profiles": [profile], "percentage_of_nodes_to_score": percentage}
    )
    scheduler = Scheduler(Kube(cast(Any, None)), config, rng=random.Random(seed))
    for sim_node in fleet:
        scheduler.cache.add_node(sim_node.node)
        if sim_node.inventory is not None:
            scheduler.cache.set_inventory(sim_node.name, sim_node.inventory)
    scheduler.cache.update_snapshot(scheduler.snapshot)
    return scheduler


def first_fit(snapshot: Any, order: list[str], kind: str, pod: dict[str, Any]) -> Any:
    """The baseline: (node, Assignment) on the first node of ``order`` whose ledger takes the
    pod, lowest device indices; ``None`` when none does. O(nodes x GPUs) per pod."""
    from gpusched.annotations import Assignment
    from gpusched.quantity import parse_quantity

    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    for name in order:
        ledger = snapshot.get(name).ledger
        if not ledger.gpu_count:
            continue
        devices = ledger.devices
        if kind == "whole":
            n = int(limits["nvidia.com/gpu"])
            if ledger.free_gpu_count < n:
                continue
            ids = ledger.free_gpus()[:n]
            whole = tuple(devices[i].memory_mib or 0 for i in ids)
            return name, Assignment(tuple(ids), tuple(devices[i].uuid for i in ids), whole, "")
        if kind == "mig":
            resource = next(k for k in limits if k.startswith("nvidia.com/mig-"))
            free = ledger.free_mig(resource)
            if not free:
                continue
            index, mig_uuid = free[0]
            mig = next(m for m in devices[index].mig if m.uuid == mig_uuid)
            return name, Assignment((index,), (mig_uuid,), (mig.memory_mib,), "")
        mib = int(parse_quantity(limits["gpusched.io/vram"]) // (1 << 20))
        if kind == "exclusive":
            ids = ledger.shareable_devices(mib, exclusive=True)[:1]
            share = [devices[i].memory_mib or 0 for i in ids]
        else:
            ids = ledger.shareable_devices(mib)[:1]
            share = [mib] * len(ids)
        if ids:
            return name, Assignment(
                tuple(ids), tuple(devices[i].uuid for i in ids), tuple(share), ""
            )
    return None


def allocation_quality(snapshot: Any, min_share_mib: int) -> dict[str, Any]:
    """GPUs, fully idle GPUs and stranded VRAM over every node of ``snapshot``. O(GPUs)."""
    gpus = idle = mig_idle = stranded_mib = partly = 0
    for info in snapshot.node_infos():
        ledger = info.ledger
        if not ledger.gpu_count:
            continue
        fits = set(ledger.shareable_devices(min_share_mib))
        for device in ledger.devices:
            gpus += 1
            if device.mig_enabled:
                untouched = all(m.holder is None for m in device.mig)
                idle += untouched
                mig_idle += untouched
                continue
            if not device.holders:
                idle += 1
                continue
            if device.exclusive is None and device.memory_mib is not None:
                partly += 1
                if device.index not in fits:
                    stranded_mib += max(device.memory_mib - device.reserved_mib, 0)
    return {
        "gpus": gpus,
        "gpus_fully_idle": idle,
        "mig_gpus_fully_idle": mig_idle,
        "gpus_shared_partly_used": partly,
        "stranded_vram_gib": round(stranded_mib / 1024, 1),
    }


def run_profile(
    profile: str,
    fleet: list[Any],
    stream: list[tuple[str, dict[str, Any]]],
    warmup: int,
    seed: int,
    percentage: int = 0,
) -> dict[str, Any]:
    """Place ``stream`` on a fresh cache with ``profile``; throughput after ``warmup`` pods
    and the allocation quality once the stream is through."""
    from gpusched.annotations import Assignment
    from gpusched.framework import DEVICE_ASSIGNMENT, CycleState

    gc.unfreeze()
    gc.collect()
    strategy = "spread" if profile == "spread" else "binpack"
    most = profile == "binpack-most-allocated"
    scheduler = _scheduler(strategy, fleet, seed, percentage, most)
    fw = scheduler.frameworks["gpusched"]
    cache, snapshot, rng = scheduler.cache, scheduler.snapshot, scheduler.rng
    order = [n.name for n in fleet]
    gc.collect()
    gc.freeze()
    placed: Counter[str] = Counter()
    unplaced: Counter[str] = Counter()
    evaluated = 0
    started = time.perf_counter()
    for i, (kind, pod) in enumerate(stream):
        if i == warmup:
            started = time.perf_counter()
            evaluated = 0
        cache.update_snapshot(snapshot)
        if profile == "first-fit":
            found = first_fit(snapshot, order, kind, pod)
            if found is None:
                unplaced[kind] += 1
                continue
            node, chosen = found
            cache.assume_pod(pod, node, replace(chosen, reservation_uid=str(uuid.uuid4())))
            cache.finish_binding(pod)
            placed[kind] += 1
            continue
        # --- Scheduler.schedule_one minus the queue and the API, as scheduler_perf drives it
        state = CycleState(record_plugin_metrics=rng.random() < 0.1)
        result = scheduler.find_placement(fw, state, pod)
        evaluated += result.evaluated
        if result.node is None:
            unplaced[kind] += 1
            continue
        status = fw.run_reserve(state, pod, result.node)
        got = state.get(DEVICE_ASSIGNMENT) or Assignment((), (), (), "")
        cache.assume_pod(pod, result.node, replace(got, reservation_uid=str(uuid.uuid4())))
        if status.is_success:
            fw.run_permit(state, pod, result.node)
        cache.finish_binding(pod)
        placed[kind] += 1
    elapsed = time.perf_counter() - started
    gc.unfreeze()
    cache.update_snapshot(snapshot)
    timed = max(len(stream) - warmup, 0)
    return {
        "profile": profile,
        "pods": len(stream),
        "pods_per_s": timed / elapsed if timed and elapsed > 0 else 0.0,
        "nodes_evaluated_per_pod": evaluated / timed if timed else 0.0,
        "pods_placed": sum(placed.values()),
        "pods_unplaced": sum(unplaced.values()),
        "placed_by_kind": dict(sorted(placed.items())),
        "unplaced_by_kind": dict(sorted(unplaced.items())),
        **allocation_quality(snapshot, MIN_SHARED_GIB * 1024),
    }


def _whole_gpu_reference(nodes: int, args: argparse.Namespace) -> dict[str, Any]:
    """Today's figure: scheduler_perf's in-memory loop, gpusched profile, 1-GPU pods on a
    ``dgx-h100`` fleet of ``nodes`` (warm-up and measured pods capped by its GPUs)."""
    from gpusched.sim.fleet import build_fleet, load_cluster_spec

    fleet = build_fleet(load_cluster_spec("dgx-h100", nodes=nodes))
    gpus = nodes * 8
    warmup = min(args.ref_warmup, gpus // 3)
    measured = min(args.ref_pods, gpus - warmup)
    ns = argparse.Namespace(warmup=warmup, inmem_pods=measured, percentage=0, no_gc_freeze=False)
    samples = [
        scheduler_perf._inmem_once("gpusched", fleet, ns, seed=r)["pods_per_s"]
        for r in range(args.repeats)
    ]
    return {"pods_per_s": statistics.median(samples), "warmup": warmup, "pods": measured}


def bench(args: argparse.Namespace) -> dict[str, Any]:
    from gpusched.sim.fleet import build_fleet, load_cluster_spec

    figures: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "workload": {
            "cluster": "mixed",
            "mix": dict(MIX),
            "shared_vram_gib": list(SHARED_GIB),
            "whole_gpus": list(WHOLE_GPUS),
            "mig_profiles": list(MIG_PROFILES),
            "pods": args.pods,
            "warmup": args.warmup,
            "seed": args.seed,
            "repeats": args.repeats,
            "percentage_of_nodes_to_score": args.percentage,
        },
        "runs": [],
    }
    for n in [int(x) for x in args.nodes.split(",")]:
        fleet = build_fleet(load_cluster_spec("mixed", nodes=n))
        stream = mixed_stream(args.pods, args.seed, tag=str(n))
        for profile in PROFILES:
            samples = []
            for r in range(args.repeats):
                fresh = [(k, json.loads(json.dumps(p))) for k, p in stream]
                for _, p in fresh:
                    p["metadata"]["uid"] += f"-{profile}-{r}"
                samples.append(
                    run_profile(profile, fleet, fresh, args.warmup, args.seed + r, args.percentage)
                )
            row = dict(samples[-1])
            row["pods_per_s"] = statistics.median(s["pods_per_s"] for s in samples)
            row["pods_per_s_all"] = [s["pods_per_s"] for s in samples]
            row["nodes"] = n
            figures["runs"].append(row)
            print(f"  {n} nodes {profile}: {row['pods_per_s']:,.0f} pods/s", file=sys.stderr)
        if not args.no_reference:
            ref = _whole_gpu_reference(n, args)
            ref["nodes"] = n
            figures.setdefault("whole_gpu_reference", []).append(ref)
            print(f"  {n} nodes whole-GPU reference: {ref['pods_per_s']:,.0f}", file=sys.stderr)
    figures["goals"] = _goals(figures)
    return figures


def _goals(figures: dict[str, Any]) -> dict[str, Any]:
    """Issue 10's two goals, at the largest fleet measured."""
    runs = figures["runs"]
    if not runs:
        return {}
    n = max(r["nodes"] for r in runs)
    by = {r["profile"]: r for r in runs if r["nodes"] == n}
    slowest = min(by[p]["pods_per_s"] for p in ("binpack", "spread"))
    packed = by["binpack-most-allocated"]["gpus_fully_idle"]
    return {
        "nodes": n,
        "inmem_pods_per_s_min_strategy": slowest,
        "inmem_target_met": slowest >= TARGET_INMEM,
        "binpack_idle_gpus": by["binpack"]["gpus_fully_idle"],
        "first_fit_idle_gpus": by["first-fit"]["gpus_fully_idle"],
        "binpack_more_idle_than_first_fit": (
            by["binpack"]["gpus_fully_idle"] > by["first-fit"]["gpus_fully_idle"]
        ),
        "binpack_most_allocated_idle_gpus": packed,
        "binpack_most_allocated_more_idle_than_first_fit": (
            packed > by["first-fit"]["gpus_fully_idle"]
        ),
    }


def print_table(figures: dict[str, Any]) -> None:
    print("Mixed workload in memory: throughput and allocation quality per strategy")
    print(
        f"{'nodes':>6} {'profile':22} {'pods/s':>8} {'placed':>7} {'unplaced':>8} "
        f"{'GPUs':>6} {'idle GPUs':>9} {'of them MIG':>11} {'stranded GiB':>12} {'evaluated':>9}"
    )
    for r in figures["runs"]:
        print(
            f"{r['nodes']:>6} {r['profile']:22} {r['pods_per_s']:>8,.0f} {r['pods_placed']:>7} "
            f"{r['pods_unplaced']:>8} {r['gpus']:>6} {r['gpus_fully_idle']:>9} "
            f"{r['mig_gpus_fully_idle']:>11} {r['stranded_vram_gib']:>12,.1f} "
            f"{r['nodes_evaluated_per_pod']:>9,.0f}"
        )
    for ref in figures.get("whole_gpu_reference", []):
        print(f"{ref['nodes']:>6} whole-GPU reference (dgx-h100, 1 GPU): {ref['pods_per_s']:,.0f}")
    goals = figures.get("goals") or {}
    if goals:
        print(
            f"goals at {goals['nodes']:,} nodes: >= {TARGET_INMEM:,} pods/s "
            f"{'met' if goals['inmem_target_met'] else 'missed'}; binpack more idle GPUs than "
            f"first-fit {'met' if goals['binpack_more_idle_than_first_fit'] else 'missed'}"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--nodes", default="500,5000", help="fleet sizes, comma-separated")
    parser.add_argument("--pods", type=int, default=3000, help="pods in the stream")
    parser.add_argument("--warmup", type=int, default=500, help="leading pods not timed")
    parser.add_argument("--seed", type=int, default=0, help="the stream's seed")
    parser.add_argument("--repeats", type=int, default=1, help="runs per profile (median)")
    parser.add_argument(
        "--percentage",
        type=int,
        default=0,
        help="percentageOfNodesToScore for binpack and spread (default 0: adaptive, as shipped)",
    )
    parser.add_argument("--ref-pods", type=int, default=2000, help="whole-GPU reference pods")
    parser.add_argument("--ref-warmup", type=int, default=1000, help="its warm-up pods")
    parser.add_argument("--no-reference", action="store_true", help="skip the whole-GPU run")
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
