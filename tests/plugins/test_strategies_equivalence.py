"""The signed strategies keep equivalence classes exact: with GPUCost, PreferredNode and
VRAMHeadroom enabled, the node a class picks has the highest total a full cycle over every
node gives, through random placements, removals and price relabelling (test_equivalence's
check, on a profile with the strategies)."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest
from builders import Cluster, make_node, make_pod
from test_equivalence import KINDS, _place

from gpusched.annotations import Assignment
from gpusched.cache import Snapshot
from gpusched.equivalence import EquivalenceCache
from gpusched.framework import build_frameworks, in_tree, parse_config
from gpusched.plugins.gpu_cost import CHEAP_LABEL, PRICE_LABEL
from gpusched.plugins.gpu_fit import choice_for

CONFIG = """
apiVersion: gpusched.io/v1alpha1
kind: SchedulerConfiguration
profiles:
- plugins:
    multiPoint:
      enabled:
      - {name: GPUCost, weight: 5}
      - {name: PreferredNode, weight: 10}
      - {name: VRAMHeadroom, weight: 3}
"""


def _price(rng: random.Random, labels: dict[str, str]) -> None:
    labels.pop(PRICE_LABEL, None)
    labels.pop(CHEAP_LABEL, None)
    what = rng.random()
    if what < 0.6:
        labels[PRICE_LABEL] = str(rng.choice([0.5, 1, 2, 2.5, 4, 12]))
    elif what < 0.8:
        labels[CHEAP_LABEL] = "true"


@pytest.mark.parametrize("seed", range(4))
def test_classes_with_the_strategies_pick_what_a_full_cycle_picks(seed: int) -> None:
    rng = random.Random(seed)
    builders = []
    for i in range(24):
        b = make_node(f"n{i:02d}").gpus(rng.choice([2, 4, 8]), topology="nvswitch")
        labels: dict[str, str] = {}
        _price(rng, labels)
        for key, value in labels.items():
            b.label(key, value)
        builders.append(b)
    cluster = Cluster(*builders)
    objects = {b.name: b.build()[0] for b in builders}
    cache = cluster.cache
    snapshot = Snapshot()
    fw = build_frameworks(parse_config(CONFIG), in_tree())["gpusched"]
    eq = EquivalenceCache(random.Random(seed))
    kinds = ["one-gpu", "two-gpus", "shared-20gi", "shared-2x10gi", "cpu-only"]
    bound: list[dict[str, Any]] = []
    batched = 0
    for step in range(200):
        op = rng.random()
        if op < 0.7:
            builder = KINDS[rng.choice(kinds)](make_pod(f"p{step}", uid=f"uid-{step}"))
            if rng.random() < 0.3:
                builder.annotate("gpusched.io/preferred-node", rng.choice(sorted(objects)))
            pod = builder.obj()
            cache.update_snapshot(snapshot)
            used, node, state = _place(fw, eq, snapshot, pod)
            batched += used
            if node is not None:
                choice = choice_for(state, node)
                assignment = (
                    Assignment(choice.gpu_ids, choice.uuids, choice.vram_mib, f"r{step}")
                    if choice is not None
                    else Assignment((), (), (), "")
                )
                cache.assume_pod(pod, node, assignment)
                bound.append(pod)
        elif op < 0.85 and bound:
            cache.forget_pod(bound.pop(rng.randrange(len(bound))))
        else:
            name = rng.choice(sorted(objects))
            obj = copy.deepcopy(objects[name])
            _price(rng, obj["metadata"].setdefault("labels", {}))
            objects[name] = obj
            cache.update_node(obj)
        cache.update_snapshot(snapshot)
        eq._check()
    assert batched > 50, batched  # preferred nodes drawn at random make many rare signatures
    assert eq.hits > 0
