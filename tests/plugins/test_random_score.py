"""RandomScore: reproducible per seed, pod and node, spread over 0..100, unsigned by design,
and args validated."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from builders import Cluster, make_node, make_pod, run_cycle

from gpusched.framework import (
    ConfigError,
    CycleState,
    SignPlugin,
    build_frameworks,
    in_tree,
    parse_config,
)
from gpusched.plugins.random_score import RandomScore, RandomScoreArgs, random_score


def _pod(name: str, uid: str | None = None) -> dict[str, Any]:
    return make_pod(name, uid=uid).gpus(1).obj()


def test_reproducible_and_order_free() -> None:
    pod = _pod("p")
    names = [f"n{i}" for i in range(50)]
    once = [random_score(7, pod, n) for n in names]
    assert once == [random_score(7, pod, n) for n in names]
    assert [random_score(7, pod, n) for n in reversed(names)] == once[::-1]


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ((7, "p", "n"), (8, "p", "n")),  # another seed
        ((7, "p", "n"), (7, "q", "n")),  # another pod
        ((7, "p", "n"), (7, "p", "m")),  # another node
    ],
)
def test_each_input_changes_the_draws(a: tuple[int, str, str], b: tuple[int, str, str]) -> None:
    def draws(seed: int, pod: str, node: str) -> list[int]:
        return [random_score(seed, _pod(pod), f"{node}{i}") for i in range(20)]

    assert draws(*a) != draws(*b)


def test_a_pod_without_uid_uses_namespace_and_name() -> None:
    pod = _pod("p")
    del pod["metadata"]["uid"]
    assert random_score(1, pod, "n") == random_score(1, pod, "n")


def test_roughly_uniform_over_0_to_100() -> None:
    pod = _pod("p")
    counts = Counter(random_score(3, pod, f"node-{i}") for i in range(20_200))
    assert min(counts) == 0
    assert max(counts) == 100
    assert all(100 <= c <= 300 for c in counts.values())  # 200 expected per value


def test_unsigned_by_design_and_prescore_matches_score() -> None:
    plugin = RandomScore(RandomScoreArgs(seed=5))
    assert not isinstance(plugin, SignPlugin)
    cluster = Cluster(make_node("a").gpus(8), make_node("b").gpus(8))
    pod = _pod("p")
    state = CycleState()
    assert plugin.pre_score(state, pod, cluster.nodes()).is_success
    for name in ("a", "b"):
        assert plugin.score(state, pod, cluster.node(name))[0] == random_score(5, pod, name)
        assert plugin.score(CycleState(), pod, cluster.node(name))[0] == random_score(5, pod, name)


def _config(args: str) -> str:
    return f"""
apiVersion: gpusched.io/v1alpha1
kind: SchedulerConfiguration
profiles:
- plugins:
    multiPoint: {{enabled: [{{name: RandomScore, weight: 50}}]}}
  pluginConfig:
  - {{name: RandomScore, args: {args}}}
"""


@pytest.mark.parametrize(
    ("args", "error"),
    [("{seed: -1}", "seed"), ("{seed: x}", "seed"), ("{sed: 1}", "sed")],
)
def test_bad_args_fail_with_the_field(args: str, error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        build_frameworks(parse_config(_config(args)), in_tree())


def test_pods_spread_over_the_nodes_in_a_profile() -> None:
    nodes = [make_node(f"n{i}").gpus(8) for i in range(8)]
    cluster = Cluster(*nodes)
    fw = build_frameworks(parse_config(_config("{seed: 11}")), in_tree())["gpusched"]
    chosen = Counter(run_cycle(fw, _pod(f"p{i}"), cluster.nodes()).best for i in range(80))
    assert len(chosen) == 8  # binpack alone would put all 80 on one node's order


def test_all_names_the_public_api() -> None:
    import gpusched.plugins.random_score as module

    classes_and_functions = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and getattr(value, "__module__", "") == module.__name__
    }
    assert classes_and_functions <= set(module.__all__)
    assert sorted(module.__all__) == sorted(
        ["NAME", "RandomScore", "RandomScoreArgs", "random_score"]
    )
