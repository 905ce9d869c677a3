"""Equivalence classes (gpusched.equivalence) give what a full evaluation of every node gives.

A random sequence of operations on a cache (pods placed by the classes and assumed, pods
removed, nodes relabelled, tainted, cordoned, added and removed) with several kinds of pods;
after each placement the class's answer is compared with a full cycle over every node
(``run_cycle``: Filter everywhere, PreScore, Score with normalisation): the node a class
picks must have the highest total score there, and when nothing fits, the same nodes must be
rejected with the same statuses. ``_check()`` of the classes and of the cache after each step.
"""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest
from builders import Cluster, PodBuilder, expr, field_expr, make_node, make_pod, run_cycle, term

from gpusched.annotations import Assignment
from gpusched.cache import Snapshot
from gpusched.equivalence import EquivalenceCache
from gpusched.framework import CycleState, Framework, build_frameworks, default_config, in_tree
from gpusched.plugins.gpu_fit import choice_for
from gpusched.plugins.node_affinity import NodeAffinity
from gpusched.plugins.node_name import NodeName
from gpusched.plugins.node_resources_fit import NodeResourcesFit
from gpusched.plugins.node_unschedulable import NodeUnschedulable
from gpusched.plugins.taint_toleration import TaintToleration


def _framework() -> Framework:
    return next(iter(build_frameworks(default_config(), in_tree()).values()))


KINDS: dict[str, Any] = {
    "one-gpu": lambda b: b.gpus(1),
    "one-gpu-zone-a": lambda b: b.gpus(1).node_selector(zone="a"),
    "one-gpu-tolerant": lambda b: b.gpus(1).toleration("dedicated", operator="Exists"),
    "cpu-only": lambda b: b.cpu("4").memory("8Gi"),
    "two-gpus": lambda b: b.gpus(2),
    "shared-20gi": lambda b: b.shared(1, "20Gi"),
    "shared-2x10gi": lambda b: b.shared(2, "10Gi"),
    "shared-exclusive": lambda b: b.shared(1, "10Gi").exclusive(),
    "mig-2g": lambda b: b.mig("2g.20gb"),
    "mig-1g": lambda b: b.mig("1g.10gb"),
}
MIG = ["2g.20gb", "2g.20gb", "2g.20gb", "1g.10gb"]


def _nodes(rng: random.Random, count: int, prefer_taints: bool) -> list[Any]:
    out = []
    for i in range(count):
        b = make_node(f"n{i:03d}").cpu(rng.choice([16, 32, 64]))
        shape = rng.random()
        if shape < 0.5:
            b.gpus(8, topology="nvswitch")
        elif shape < 0.7:
            b.gpus(4, topology="pcie")
        elif shape < 0.8:
            b.gpus(2, topology=None)
        elif shape < 0.9:
            b.gpus(4, topology="pcie", mig=MIG)
        b.label("zone", rng.choice("ab"))
        if rng.random() < 0.1:
            b.taint("dedicated", "ml")
        if prefer_taints and rng.random() < 0.2:
            b.taint("spot", "yes", effect="PreferNoSchedule")
        if rng.random() < 0.05:
            b.unschedulable()
        out.append(b)
    return out


def _place(
    fw: Framework, eq: EquivalenceCache, snapshot: Snapshot, pod: dict[str, Any]
) -> tuple[bool, str | None, CycleState]:
    state = CycleState()
    pre, status = fw.run_pre_filter(state, pod)
    assert status.is_success, status
    assert pre is None or pre.node_names is None
    signature = fw.sign_pod(pod)
    if signature is None:
        return False, None, state
    placed = eq.place(fw, state, pod, signature, snapshot)
    if placed is None:
        return False, None, state
    assert placed.status is None, placed.status
    full = run_cycle(fw, pod, snapshot.node_infos())
    if placed.node is None:
        assert full.best is None
        assert placed.statuses == {n: s for n, s in full.statuses.items() if not s.is_success}
        return True, None, state
    top = max(s.score for s in full.scores)
    scores = {s.name: s.score for s in full.scores}
    assert scores.get(placed.node) == top, (placed.node, scores.get(placed.node), top)
    return True, placed.node, state


@pytest.mark.parametrize("seed", range(8))
def test_classes_pick_what_a_full_cycle_picks(seed: int) -> None:
    rng = random.Random(seed)
    prefer_taints = seed % 3 == 0
    builders = _nodes(rng, 40, prefer_taints)
    cluster = Cluster(*builders)
    objects = {b.name: b.build()[0] for b in builders}
    cache = cluster.cache
    snapshot = Snapshot()
    fw = _framework()
    eq = EquivalenceCache(random.Random(seed))
    bound: list[dict[str, Any]] = []
    next_node = len(builders)
    batched = 0
    for step in range(300):
        op = rng.random()
        if op < 0.6:
            kind = rng.choice(list(KINDS))
            pod = KINDS[kind](make_pod(f"p{step}", uid=f"uid-{step}")).obj()
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
        elif op < 0.75 and bound:
            pod = bound.pop(rng.randrange(len(bound)))
            cache.forget_pod(pod)
        elif op < 0.9:
            name = rng.choice(sorted(objects))
            node = copy.deepcopy(objects[name])
            what = rng.random()
            if what < 0.4:
                node["metadata"].setdefault("labels", {})["zone"] = rng.choice("ab")
            elif what < 0.7:
                node["spec"]["unschedulable"] = not node["spec"].get("unschedulable", False)
            else:
                taints = node["spec"].setdefault("taints", [])
                if taints:
                    taints.pop()
                else:
                    taints.append({"key": "dedicated", "value": "ml", "effect": "NoSchedule"})
            objects[name] = node
            cache.update_node(node)
        elif op < 0.95:
            b = make_node(f"n{next_node:03d}").gpus(8).label("zone", "a")
            next_node += 1
            cluster.add(b)
            objects[b.name] = b.build()[0]
        elif len(objects) > 5:
            name = rng.choice(sorted(objects))
            cache.remove_node(objects.pop(name))
            bound = [p for p in bound if cache.get_pod(p["metadata"]["uid"]) is not None]
        cache.update_snapshot(snapshot)
        cache._check(snapshot)
        eq._check()
    if not prefer_taints:  # with them, classes are rightly given up on most of the time
        assert batched > 50, batched
        assert eq.hits > 0


def test_every_default_plugin_signs() -> None:
    for cls in (NodeAffinity, NodeName, NodeResourcesFit, NodeUnschedulable, TaintToleration):
        assert hasattr(cls, "sign_pod"), cls
    fw = _framework()
    assert fw.sign_pod(make_pod().gpus(1).obj()) is not None


def test_pods_alike_sign_alike_and_unlike_pods_do_not() -> None:
    fw = _framework()

    def sign(b: PodBuilder) -> object:
        return fw.sign_pod(b.obj())

    assert sign(make_pod("a").gpus(1)) == sign(make_pod("b", namespace="x").gpus(1))
    assert sign(make_pod("a").gpus(1)) != sign(make_pod("a").gpus(1).cpu("1"))
    assert sign(make_pod("a").gpus(1).node_selector(zone="a")) != sign(make_pod("a").gpus(1))
    assert sign(make_pod("a").gpus(1)) != sign(
        make_pod("a").gpus(1).toleration("k", operator="Exists")
    )
    # Preferred affinity scores differ from node to node: the ordinary path.
    assert sign(make_pod("a").gpus(1).preferred(10, term(expr("zone", "In", "a")))) is None
    # A pod pinned to a node by name: PreFilter restricts the nodes.
    assert sign(make_pod("a").gpus(1).required(term(fields=[field_expr("In", "n1")]))) is None
