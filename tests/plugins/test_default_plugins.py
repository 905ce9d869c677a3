"""The default profile: every built-in plugin, enabled by ``default_plugins()``, builds and runs."""

from __future__ import annotations

import importlib
import pkgutil

from builders import Cluster, CycleResult, make_node, make_pod, run_cycle

import gpusched.plugins
from gpusched.framework import (
    Code,
    build_frameworks,
    default_config,
    default_plugins,
    in_tree,
)
from gpusched.framework.registry import plugin_classes
from gpusched.plugins.gpu_fit import choice_for

EXPECTED = [
    "PrioritySort",
    "NodeUnschedulable",
    "NodeName",
    "TaintToleration",
    "NodeAffinity",
    "NodeResourcesFit",
    "GpuClaims",
    "GPUFit",
    "DynamicResources",
    "NominatedReservation",
    "DefaultPreemption",
    "PreferredNode",
    "ImageLocality",
    "ModelLocality",
    "DefaultBinder",
    "SchedulingGates",
    "Coscheduling",
]
OPT_IN = ["GPUCost", "RandomScore", "VRAMHeadroom"]
"""Score strategies a profile enables and weights (docs/strategies.md); PreferredNode, a pod
modifier, and the locality plugins (upstream's ImageLocality is on by default) are on."""


def test_every_built_in_plugin_but_the_score_strategies_is_enabled_by_default() -> None:
    assert [ref.name for ref in default_plugins().multi_point.enabled] == EXPECTED
    assert sorted(in_tree()) == sorted(EXPECTED + OPT_IN)


def test_the_default_configuration_builds() -> None:
    fw = build_frameworks(default_config(), in_tree())["gpusched"]
    assert fw.list_plugins() == {
        "preEnqueue": ["PrioritySort", "DynamicResources", "SchedulingGates", "Coscheduling"],
        "queueSort": ["PrioritySort"],
        "preFilter": [
            "NodeAffinity",
            "NodeResourcesFit",
            "GpuClaims",
            "GPUFit",
            "DynamicResources",
        ],
        "filter": [
            "NodeUnschedulable",
            "NodeName",
            "TaintToleration",
            "NodeAffinity",
            "NodeResourcesFit",
            "GPUFit",
            "DynamicResources",
            "NominatedReservation",
        ],
        "postFilter": ["GPUFit", "DefaultPreemption"],
        "preScore": [
            "TaintToleration",
            "NodeAffinity",
            "NodeResourcesFit",
            "GPUFit",
            "PreferredNode",
            "ImageLocality",
            "ModelLocality",
        ],
        "score": [
            "TaintToleration",
            "NodeAffinity",
            "NodeResourcesFit",
            "GPUFit",
            "PreferredNode",
            "ImageLocality",
            "ModelLocality",
        ],
        "reserve": ["GpuClaims", "GPUFit", "DynamicResources", "Coscheduling"],
        "permit": ["Coscheduling"],
        "preBind": ["GpuClaims", "DynamicResources", "Coscheduling"],
        "bind": ["DefaultBinder"],
        "postBind": [],
    }
    assert dict(fw.score_weights) == {
        "TaintToleration": 3,
        "NodeAffinity": 2,
        "NodeResourcesFit": 1,
        "GPUFit": 2,
        "PreferredNode": 10,
        "ImageLocality": 1,
        "ModelLocality": 1,
    }
    assert set(fw.enqueue_extensions()) == set(EXPECTED) - {
        "DefaultBinder",
        "PreferredNode",
        "ImageLocality",
        "ModelLocality",
        "DefaultPreemption",
    }


def test_every_plugin_module_follows_the_house_style() -> None:
    """One documented plugin per module, with a NAME constant and a complete __all__."""
    for info in pkgutil.iter_modules(gpusched.plugins.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"gpusched.plugins.{info.name}")
        assert module.__doc__, info.name
        (cls,) = plugin_classes(module)
        assert module.NAME == cls.NAME, info.name
        assert cls.__doc__, info.name
        for name in module.__all__:
            assert hasattr(module, name), (info.name, name)


def chosen(result: CycleResult) -> tuple[str, tuple[int, ...]]:
    """The node the cycle picks and the GPUs GPUFit chose there."""
    best = result.best
    assert best is not None, result.statuses
    choice = choice_for(result.state, best)
    return best, choice.gpu_ids if choice is not None else ()


def test_a_cycle_on_a_mixed_fleet() -> None:
    """The mixed fleet: tainted H100s, DGX-1s, A40 pairs, MIG nodes, CPU nodes."""
    fw = build_frameworks(default_config(), in_tree())["gpusched"]
    cluster = Cluster.fleet("mixed")
    nodes = cluster.nodes()

    result = run_cycle(fw, make_pod().gpus(4).obj(), nodes)
    # H100 nodes are tainted; the DGX-1s offer a fully NVLinked quad, the A40s only pairs.
    node, gpus = chosen(result)
    assert node.startswith("dgx-v100-")
    assert gpus == (0, 1, 2, 3)
    reasons = {s.message() for s in result.statuses.values() if s.code}
    assert "node(s) had untolerated taint {nvidia.com/gpu: present}" in reasons
    assert "Insufficient nvidia.com/gpu" in reasons  # CPU and all-MIG nodes

    tolerant = make_pod().gpus(4).toleration("nvidia.com/gpu", operator="Exists").obj()
    result = run_cycle(fw, tolerant, nodes)
    assert chosen(result)[0].startswith("dgx-h100-")  # NV18 beats NV1/NV2

    result = run_cycle(fw, make_pod().cpu("2").obj(), nodes)
    assert len(result.feasible) == len([n for n in nodes if not n.taints])

    result = run_cycle(
        fw,
        make_pod().gpus(2).node_selector(**{"nvidia.com/gpu.product": "NVIDIA-A40"}).obj(),
        nodes,
    )
    node, gpus = chosen(result)
    assert node.startswith("a40-")
    assert gpus == (0, 1)  # a bridged pair

    result = run_cycle(fw, make_pod().gpus(16).obj(), nodes)
    assert not result.feasible
    assert all(s.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE for s in result.statuses.values())


def test_a_single_node_cluster_built_by_hand() -> None:
    fw = build_frameworks(default_config(), in_tree())["gpusched"]
    cluster = Cluster(make_node("a").dgx1())
    result = run_cycle(fw, make_pod().gpus(2).priority(2).obj(), cluster.nodes())
    assert result.best == "a"
