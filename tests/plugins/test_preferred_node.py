"""PreferredNode: the named node scores 100, every other 0; signing by the name; in a profile
the preference wins over packing when the node fits, and gives way when it does not."""

from __future__ import annotations

from typing import Any

import pytest
from builders import Cluster, make_node, make_pod, run_cycle

from gpusched.framework import CycleState, build_frameworks, in_tree, parse_config
from gpusched.framework.interfaces import SignPlugin
from gpusched.plugins.preferred_node import PreferredNode, preferred_node

PREFERRED = "gpusched.io/preferred-node"


def _pod(value: str | None = None, gpus: int = 1) -> dict[str, Any]:
    pod = make_pod("p").gpus(gpus)
    if value is not None:
        pod.annotate(PREFERRED, value)
    return pod.obj()


@pytest.mark.parametrize(
    ("annotations", "want"),
    [
        ({}, None),
        ({PREFERRED: "gpu-7"}, "gpu-7"),
        ({PREFERRED: "  gpu-7 "}, "gpu-7"),  # surrounding blanks, as the request reader
        ({PREFERRED: "Not_A_Node"}, None),  # GPUFit's PreFilter rejects it with the message
        ({PREFERRED: ""}, None),
        ({"other": "x"}, None),
    ],
)
def test_preferred_node_reads_the_annotation(annotations: dict[str, str], want: str | None) -> None:
    assert preferred_node({"metadata": {"annotations": annotations}}) == want


@pytest.mark.parametrize("pod", [{}, {"metadata": None}, {"metadata": {"annotations": None}}])
def test_preferred_node_never_raises_on_odd_pods(pod: dict[str, Any]) -> None:
    assert preferred_node(pod) is None


@pytest.mark.parametrize(
    ("value", "node", "want"),
    [("a", "a", 100), ("a", "b", 0), (None, "a", 0)],
)
def test_score(value: str | None, node: str, want: int) -> None:
    cluster = Cluster(make_node("a").gpus(8), make_node("b").gpus(8))
    plugin = PreferredNode()
    state = CycleState()
    pod = _pod(value)
    status = plugin.pre_score(state, pod, cluster.nodes())
    assert status.is_skip == (value is None)
    # Score reads the pod itself when PreScore did not run.
    for s in (state, CycleState()):
        assert plugin.score(s, pod, cluster.node(node))[0] == want


def test_signs_with_the_name() -> None:
    plugin = PreferredNode()
    assert isinstance(plugin, SignPlugin)
    assert plugin.sign_pod(_pod("a")) == plugin.sign_pod(_pod("a", gpus=2))
    assert plugin.sign_pod(_pod("a")) != plugin.sign_pod(_pod("b"))
    assert plugin.sign_pod(_pod()) == plugin.sign_pod(_pod("Bad_Name"))


CONFIG = """
apiVersion: gpusched.io/v1alpha1
kind: SchedulerConfiguration
profiles:
- plugins:
    multiPoint: {enabled: [{name: PreferredNode, weight: 10}]}
"""


@pytest.mark.parametrize(
    ("bound_on_b", "pod_gpus", "want"),
    [
        (0, 1, "b"),  # preferred and free: chosen though binpack would pick neither
        (6, 1, "b"),  # preferred and fits
        (7, 2, "a"),  # preferred but does not fit: the preference gives way
    ],
)
def test_in_a_profile(bound_on_b: int, pod_gpus: int, want: str) -> None:
    cluster = Cluster(make_node("a").gpus(8), make_node("b").gpus(8), make_node("c").gpus(8))
    cluster.bind(make_pod("on-a", uid="on-a").gpus(4).on("a").assigned([0, 1, 2, 3]))
    if bound_on_b:
        cluster.bind(
            make_pod("on-b", uid="on-b").gpus(bound_on_b).on("b").assigned(range(bound_on_b))
        )
    fw = build_frameworks(parse_config(CONFIG), in_tree())["gpusched"]
    result = run_cycle(fw, _pod("b", gpus=pod_gpus), cluster.nodes())
    assert result.best == want


def test_all_names_the_public_api() -> None:
    import gpusched.plugins.preferred_node as module

    classes_and_functions = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and getattr(value, "__module__", "") == module.__name__
    }
    assert classes_and_functions <= set(module.__all__)
    assert sorted(module.__all__) == sorted(["NAME", "PreferredNode", "preferred_node"])
