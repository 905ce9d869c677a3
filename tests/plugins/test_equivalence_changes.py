"""Equivalence classes (gpusched.equivalence) stay exact while the cluster changes under them.

What ``test_equivalence.py``'s random sequence leaves out: inventories added, changed and
deleted; nodes removed and re-added under the same name with another shape; bound pods
confirmed by the informers (with their assignment annotations) and then finished; GPUFit with
``topologyWeight`` 0 and 1 (multi-GPU pods sign with both); MIG nodes. After each placement the
class's answer is checked against a full cycle over every node (``_place``), and ``_check()``
of the classes and of the cache runs after every step.
"""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest
from builders import Cluster, NodeBuilder, make_node, make_pod, run_cycle

from gpusched.annotations import Assignment, assignment_annotations
from gpusched.cache import Snapshot
from gpusched.cache.errors import CacheError
from gpusched.equivalence import EquivalenceCache
from gpusched.framework import (
    CycleState,
    Framework,
    PluginConfig,
    Profile,
    SchedulerConfiguration,
    build_frameworks,
    in_tree,
)
from gpusched.framework.config import apply_default_plugins
from gpusched.plugins.gpu_fit import choice_for


def _framework(topology_weight: int) -> Framework:
    config = apply_default_plugins(
        SchedulerConfiguration(
            profiles=[
                Profile(
                    plugin_config=[
                        PluginConfig(name="GPUFit", args={"topologyWeight": topology_weight})
                    ]
                )
            ]
        )
    )
    return next(iter(build_frameworks(config, in_tree()).values()))


KINDS: dict[str, Any] = {
    "one": lambda b: b.gpus(1),
    "two": lambda b: b.gpus(2),
    "four": lambda b: b.gpus(4),
    "cpu": lambda b: b.cpu("2"),
    "mig": lambda b: b.mig("1g.10gb"),
    "mig-2g": lambda b: b.mig("2g.20gb"),
    "shared": lambda b: b.shared(1, "30Gi"),
    "shared-swap": lambda b: b.shared(2, "20Gi").swap(),
    "shared-exclusive": lambda b: b.shared(1, "1Gi").exclusive(),
}

SHAPES = [
    lambda b: b.gpus(8, topology="nvswitch"),
    lambda b: b.gpus(8, topology="dgx1-hybrid-cube-mesh"),
    lambda b: b.gpus(4, topology="pcie"),
    lambda b: b.gpus(4, topology=None),
    lambda b: b.gpus(2, topology="bridged-pairs"),
    lambda b: b.gpus(8, topology="nvswitch", mig=["1g.10gb"] * 7),
    lambda b: b,
]


def _place(
    fw: Framework, eq: EquivalenceCache, snapshot: Snapshot, pod: dict[str, Any]
) -> tuple[bool, str | None, CycleState]:
    state = CycleState()
    pre, status = fw.run_pre_filter(state, pod)
    if not status.is_success or (pre is not None and pre.node_names is not None):
        return False, None, state
    signature = fw.sign_pod(pod)
    if signature is None:
        return False, None, state
    placed = eq.place(fw, state, pod, signature, snapshot)
    if placed is None:
        return False, None, state
    assert placed.status is None, placed.status
    full = run_cycle(fw, pod, snapshot.node_infos())
    if placed.node is None:
        assert full.best is None, full.best
        assert placed.statuses == {n: s for n, s in full.statuses.items() if not s.is_success}
        return True, None, state
    top = max(s.score for s in full.scores)
    scores = {s.name: s.score for s in full.scores}
    assert scores.get(placed.node) == top, (placed.node, scores.get(placed.node), top)
    # What the scheduler will book: the choice a fresh Filter makes on that node now.
    fresh = CycleState()
    fw.run_pre_filter(fresh, pod)
    node_info = snapshot.get(placed.node)
    assert node_info is not None
    assert fw.run_filter(fresh, pod, node_info).is_success
    assert choice_for(state, placed.node) == choice_for(fresh, placed.node)
    return True, placed.node, state


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("topology_weight", [0, 1])
def test_classes_exact_with_inventories_and_node_churn(seed: int, topology_weight: int) -> None:
    rng = random.Random(seed)
    builders: dict[str, NodeBuilder] = {}
    for i in range(24):
        b = make_node(f"n{i:02d}")
        rng.choice(SHAPES)(b)
        builders[b.name] = b
    cluster = Cluster(*builders.values())
    cache = cluster.cache
    snapshot = Snapshot()
    fw = _framework(topology_weight)
    eq = EquivalenceCache(random.Random(seed))
    assumed: list[tuple[dict[str, Any], str, Assignment]] = []
    bound: list[dict[str, Any]] = []
    batched = 0
    for step in range(400):
        op = rng.random()
        if op < 0.55:
            kind = rng.choice(list(KINDS))
            pod = KINDS[kind](make_pod(f"p{step}", uid=f"uid-{step}")).obj()
            cache.update_snapshot(snapshot)
            used, node, state = _place(fw, eq, snapshot, pod)
            batched += used
            if node is not None:
                choice = choice_for(state, node)
                assignment = (
                    choice.to_assignment(f"r{step}")
                    if choice is not None
                    else Assignment((), (), (), "")
                )
                try:
                    cache.assume_pod(pod, node, assignment)
                except CacheError:  # MIG devices the ledger lacks: the scheduler requeues
                    assert kind == "mig", kind
                else:
                    assumed.append((pod, node, assignment))
        elif op < 0.65 and assumed:
            # The informer confirms a bind: the pod, bound and annotated.
            pod, node, assignment = assumed.pop(rng.randrange(len(assumed)))
            confirmed = copy.deepcopy(pod)
            confirmed["spec"]["nodeName"] = node
            confirmed["status"]["phase"] = "Running"
            if assignment.gpu_ids:
                confirmed["metadata"].setdefault("annotations", {}).update(
                    assignment_annotations(assignment)
                )
            cache.add_pod(confirmed)
            bound.append(confirmed)
        elif op < 0.72 and assumed:
            pod, _, _ = assumed.pop(rng.randrange(len(assumed)))
            cache.forget_pod(pod)
        elif op < 0.8 and bound:
            pod = copy.deepcopy(bound.pop(rng.randrange(len(bound))))
            pod["status"]["phase"] = rng.choice(["Succeeded", "Failed"])
            cache.update_pod(pod)
        elif op < 0.88:
            # The node's inventory: re-published, changed or deleted.
            name = rng.choice(sorted(builders))
            what = rng.random()
            if what < 0.3:
                cache.set_inventory(name, None)
            else:
                other = make_node(name)
                rng.choice(SHAPES[:-1])(other)
                _, inventory = other.build()
                cache.set_inventory(name, inventory)
        elif op < 0.94 and len(builders) > 4:
            # A node removed, and maybe back under the same name with another shape.
            name = rng.choice(sorted(builders))
            obj, _ = builders[name].build()
            cache.remove_node(obj)
            if rng.random() < 0.7:
                b = make_node(name)
                rng.choice(SHAPES)(b)
                builders[name] = b
                cluster.add(b)
            else:
                del builders[name]
                assumed = [a for a in assumed if cache.get_pod(a[0]["metadata"]["uid"])]
        else:
            name = rng.choice(sorted(builders))
            obj, _ = builders[name].build()
            obj = copy.deepcopy(obj)
            obj["spec"]["unschedulable"] = rng.random() < 0.2
            cache.update_node(obj)
        cache.update_snapshot(snapshot)
        cache._check(snapshot)
        eq._check()
    assert batched > 50, batched
