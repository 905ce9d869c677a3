"""On every 8-GPU layout shipped, the chosen set is the brute-force optimum, for every free set.

Layouts: the distinct 8-GPU inventories of the shipped simulated fleets
(``gpusched/sim/clusters``: DGX-1V hybrid cube-mesh, DGX H100 NVSwitch, A40 bridged pairs) and
every topology preset of the fleet builder at 8 GPUs (``pcie`` too, shipped at 4 only), with
the products that give each its bandwidth. For each, every free set (the 255 non-empty subsets
of the 8 GPUs) and every ``n`` up to its size:

- :meth:`GPUTopology.choose` gives a set whose (link score, set score) is the brute-force
  maximum over all ``C(free, n)`` sets (the selection's order: NVLinks first, then PCIe
  proximity);
- :meth:`GPUTopology.choose_meeting`, for rules at every bandwidth the layout has and for
  contiguity, gives the brute-force maximum over the sets that meet the rule, and ``None``
  exactly when none does; :meth:`GPUTopology.offer` is the best bottleneck by brute force.

Then through the scheduler: pods of 2..8 GPUs placed in memory with equivalence classes on (the
fast path; the test counts the placements a class made) get, on the node chosen, a set whose
(link score, set score) is the brute-force optimum over that node's free GPUs at that moment.

Exhaustive loops (2^8 free sets x 8 sizes is small); no hypothesis needed.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import replace
from functools import cache
from itertools import combinations
from typing import Any, cast

import pytest

from gpusched.annotations import Assignment
from gpusched.framework import DEVICE_ASSIGNMENT, CycleState, default_config
from gpusched.inventory import GPUNodeInventory
from gpusched.kube.client import Kube
from gpusched.scheduler import Scheduler
from gpusched.sim.fleet import (
    TOPOLOGY_PRESETS,
    ClusterSpec,
    SimNode,
    build_fleet,
    load_cluster_spec,
    shipped_clusters,
)
from gpusched.topology import GPUTopology, SetRule, link_score_of, matrix_set_score, pair_gbps

PRODUCTS = {
    "nvswitch": ("NVIDIA H100 80GB HBM3", 81559),
    "dgx1-hybrid-cube-mesh": ("Tesla V100-SXM2-32GB", 32510),
    "bridged-pairs": ("NVIDIA A40", 46068),
    "pcie": ("NVIDIA L40S", 46068),
}


def _preset_fleet() -> list[SimNode]:
    pools = [
        {
            "name": preset,
            "count": 1,
            "cpu": 64,
            "memory": "256Gi",
            "gpu": {
                "product": PRODUCTS[preset][0],
                "memoryMiB": PRODUCTS[preset][1],
                "count": 8,
                "topology": preset,
            },
        }
        for preset in TOPOLOGY_PRESETS
    ]
    spec = ClusterSpec.model_validate({"name": "presets", "pools": pools})
    return build_fleet(spec)


@cache
def layouts() -> dict[str, GPUNodeInventory]:
    """Every distinct 8-GPU inventory (links and products), named by where it was first met."""
    found: dict[Any, tuple[str, GPUNodeInventory]] = {}
    nodes = [n for name in shipped_clusters() for n in build_fleet(load_cluster_spec(name))]
    for node in [*nodes, *_preset_fleet()]:
        inventory = node.inventory
        if inventory is None or len(inventory.gpus) != 8:
            continue
        if any(g.mig_devices for g in inventory.gpus):
            continue
        key = (
            tuple((k.a, k.b, k.nvlinks, k.pcie) for k in inventory.links),
            tuple(g.product for g in inventory.gpus),
        )
        found.setdefault(key, (node.pool, inventory))
    return dict(found.values())


def topology_of(inventory: GPUNodeInventory) -> GPUTopology:
    nvlinks = {(k.a, k.b): k.nvlinks for k in inventory.links}
    products = [g.product for g in inventory.gpus]
    gbps = [
        [
            0.0 if a == b else pair_gbps(nvlinks.get((min(a, b), max(a, b)), 0), products[a],
                                         products[b])
            for b in range(8)
        ]
        for a in range(8)
    ]  # fmt: skip
    return GPUTopology.build(8, inventory.links, 5000, gbps)


def key(topology: GPUTopology, ids: tuple[int, ...]) -> tuple[int, int]:
    scores = topology.scores
    links = sum(link_score_of(scores[a][b]) for a, b in combinations(ids, 2))
    return links, matrix_set_score(scores, ids)


def test_every_shipped_layout_is_covered() -> None:
    assert set(layouts()) >= {"dgx-v100", "dgx-h100", "a40", "pcie"}


@pytest.mark.parametrize("name", sorted(layouts()))
def test_chosen_set_is_the_brute_force_optimum(name: str) -> None:
    topology = topology_of(layouts()[name])
    bandwidths = sorted({g for row in topology.gbps for g in row if g > 0})
    rules = [SetRule(contiguous=True)] + [SetRule(g) for g in bandwidths]
    rules += [SetRule(bandwidths[-1], contiguous=True)]
    for mask in range(1, 256):
        free = [g for g in range(8) if mask >> g & 1]
        for n in range(1, len(free) + 1):
            sets = list(combinations(free, n))
            best = max(key(topology, ids) for ids in sets)
            ids, score = topology.choose(free, n)
            assert key(topology, ids) == best, (free, n, ids)
            assert score == best[1]
            for rule in rules:
                meeting = [s for s in sets if topology.meets(s, rule)]
                found = topology.choose_meeting(free, n, rule)
                if not meeting:
                    assert found is None, (free, n, rule)
                    continue
                assert found is not None, (free, n, rule)
                assert key(topology, found[0]) == max(key(topology, s) for s in meeting)
            if n >= 2:
                offer = topology.offer(free, n)
                assert offer == max(topology.bottleneck(s) for s in sets)


# -- through the scheduler, on the equivalence path ---------------------------------------------


def _scheduler(fleet: list[SimNode]) -> Scheduler:
    scheduler = Scheduler(Kube(cast(Any, None)), default_config(), rng=random.Random(0))
    for sim in fleet:
        scheduler.cache.add_node(sim.node)
        scheduler.cache.set_inventory(sim.name, sim.inventory)
    return scheduler


def _pod(name: str, n: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "t", "uid": f"uid-{name}"},
        "spec": {
            "schedulerName": "gpusched",
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
            "containers": [
                {
                    "name": "c",
                    "image": "pause",
                    "resources": {
                        "requests": {"nvidia.com/gpu": str(n)},
                        "limits": {"nvidia.com/gpu": str(n)},
                    },
                }
            ],
        },
        "status": {"phase": "Pending"},
    }


@pytest.mark.parametrize("cluster", ["dgx-v100", "pcie-bridged-pairs", "mixed"])
def test_fast_path_gives_the_optimum_on_its_node(
    cluster: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    scheduler = _scheduler(build_fleet(load_cluster_spec(cluster)))
    fw = scheduler.frameworks["gpusched"]
    assert scheduler.equivalence is not None
    real = scheduler.equivalence.place
    by_class = 0

    def counting(*args: Any, **kwargs: Any) -> Any:
        nonlocal by_class
        placed = real(*args, **kwargs)
        by_class += placed is not None and placed.node is not None
        return placed

    monkeypatch.setattr(scheduler.equivalence, "place", counting)
    cache, rng = scheduler.cache, random.Random(cluster)
    running: list[dict[str, Any]] = []
    checked = 0
    for i in range(300):
        while running and (rng.random() < 0.4 or len(running) > 12):
            cache.forget_pod(running.pop(rng.randrange(len(running))))
        n = rng.choice([2, 2, 3, 4, 4, 5, 6, 8])
        pod = _pod(f"p{i}", n)
        cache.update_snapshot(scheduler.snapshot)
        state = CycleState()
        result = scheduler.find_placement(fw, state, pod)
        if result.node is None:
            continue
        info = scheduler.snapshot.get(result.node)
        assert info is not None
        inventory = info.ledger.inventory
        if inventory is not None and len(inventory.gpus) == 8:
            free = [d.index for d in info.ledger.devices if d.free]
            topology = topology_of(inventory)
            assert fw.run_reserve(state, pod, result.node).is_success
            got = state.get(DEVICE_ASSIGNMENT)
            assert got is not None
            best = max(key(topology, ids) for ids in combinations(free, n))
            assert key(topology, got.gpu_ids) == best, (result.node, free, n, got.gpu_ids)
            checked += 1
        else:
            assert fw.run_reserve(state, pod, result.node).is_success
            got = state.get(DEVICE_ASSIGNMENT) or Assignment((), (), (), "")
        cache.assume_pod(pod, result.node, replace(got, reservation_uid=str(uuid.uuid4())))
        cache.finish_binding(pod)
        running.append(pod)
    assert checked >= 100
    assert by_class >= checked // 2  # most placements came from an equivalence class
