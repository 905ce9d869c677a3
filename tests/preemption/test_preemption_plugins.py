"""DefaultPreemption and NominatedReservation as plugins of the default profile: args, the
PostFilter result (nomination, reservation without preemption, policy Never, waiting for
evictions in flight), the PDB informer, and the Filter that keeps nominated GPUs."""

from __future__ import annotations

import random
from typing import Any

import preemption_paths  # noqa: F401  (puts tests/plugins and tests/scheduler on sys.path)
import pytest
from builders import Cluster, make_node, make_pod, run_cycle
from pydantic import ValidationError
from test_preemption_evaluator import running

from gpusched.framework import (
    Code,
    Framework,
    QueueingHint,
    build_frameworks,
    default_config,
    in_tree,
)
from gpusched.framework.config import PluginConfig
from gpusched.plugins.default_preemption import (
    NAME,
    DefaultPreemption,
    DefaultPreemptionArgs,
)
from gpusched.plugins.nominated_reservation import (
    NAME as RESERVATION,
)
from gpusched.plugins.nominated_reservation import (
    REASON_HELD,
    NominatedReservation,
    _after_pod_change,
)


def framework(cluster: Cluster, **args: Any) -> Framework:
    config = default_config()
    if args:
        profile = config.profiles[0].model_copy(
            update={"plugin_config": [PluginConfig(name=NAME, args=args)]}
        )
        config = config.model_copy(update={"profiles": [profile]})
    return build_frameworks(config, in_tree(), node_lister=cluster.snapshot())["gpusched"]


def plugin_of(fw: Framework) -> DefaultPreemption:
    plugin = fw.plugins[NAME]
    assert isinstance(plugin, DefaultPreemption)
    plugin.evaluator.rng = random.Random(0)  # type: ignore[union-attr]
    return plugin


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ({"minCandidateNodesPercentage": 101}, "less than or equal to 100"),
        ({"minCandidateNodesAbsolute": -1}, "greater than or equal to 0"),
        ({"minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 0}, "cannot both be 0"),
        ({"reserveWithoutPreemption": "maybe"}, "valid boolean"),
        ({"bogus": 1}, "Extra inputs"),
    ],
)
def test_args_are_validated(args: dict[str, Any], error: str) -> None:
    with pytest.raises(ValidationError, match=error):
        DefaultPreemptionArgs.model_validate(args)


def test_default_args_are_upstreams() -> None:
    args = DefaultPreemptionArgs()
    assert (args.min_candidate_nodes_percentage, args.min_candidate_nodes_absolute) == (10, 100)
    assert args.reserve_without_preemption


def full_node_cluster() -> Cluster:
    """n1: eight level-3 1-GPU pods; n2: eight level-0 ones (never victims of level 0)."""
    cluster = Cluster(make_node("n1").gpus(8), make_node("n2").gpus(8))
    for i in range(8):
        cluster.cache.add_pod(running(f"a{i}", "n1", [i], 3, started=i))
        cluster.cache.add_pod(running(f"b{i}", "n2", [i], 0, started=i))
    return cluster


def post_filter(fw: Framework, cluster: Cluster, pod: dict[str, Any]) -> tuple[Any, Any]:
    result = run_cycle(fw, pod, cluster.nodes())
    assert not result.feasible
    return plugin_of(fw).post_filter(result.state, pod, result.statuses)


def test_a_preemption_nominates_the_node_and_queues_the_evictions() -> None:
    cluster = full_node_cluster()
    fw = framework(cluster)
    plugin = plugin_of(fw)
    pod = make_pod("big").gpus(2).priority(0).obj()
    result, status = post_filter(fw, cluster, pod)
    assert status.is_success
    assert result.nominated_node_name == "n1"
    queued_pod, candidate, record = plugin._work.get_nowait()
    assert queued_pod is pod
    assert record == pod["metadata"]["uid"]
    assert sorted(v.pod["metadata"]["name"] for v in candidate.victims) == ["a6", "a7"]
    # Until the evictions are answered, the next attempt waits and keeps the nomination.
    result, status = post_filter(fw, cluster, pod)
    assert (result.nominated_node_name, status.code) == ("n1", Code.UNSCHEDULABLE)
    assert "waiting for the pods evicted from node n1" in status.message()
    assert plugin._work.empty()


@pytest.mark.parametrize(
    ("policy", "reserve", "level", "lower_pod", "nominated", "why"),
    [
        # No preemption, but a reservation on the node closest to fitting (one free GPU).
        ("Never", True, 0, False, "n1", "preemptionPolicy=Never"),
        ("Never", False, 0, False, None, "preemptionPolicy=Never"),
        # Level 3 may evict only the one level-4 pod: 2 GPUs are not 3. Reserved.
        ("PreemptLowerPriority", True, 3, True, "n1", "nodes are available"),
        # Nothing of lower priority runs anywhere: nothing to reserve against, and a
        # nomination the pod had is cleared (upstream's empty node name).
        ("PreemptLowerPriority", True, 3, False, "", "No preemption victims"),
    ],
)
def test_without_preemption_a_gpu_pod_reserves_the_closest_node(
    policy: str, reserve: bool, level: int, lower_pod: bool, nominated: str | None, why: str
) -> None:
    cluster = full_node_cluster()
    cluster.cache.remove_pod("uid-a0")  # n1 has one free GPU: the closest to fitting
    if lower_pod:
        cluster.cache.remove_pod("uid-a7")
        cluster.cache.add_pod(running("a7", "n1", [7], 4))
    fw = framework(cluster, reserveWithoutPreemption=reserve)
    pod = make_pod("big").gpus(3).priority(level).obj()
    pod["spec"]["preemptionPolicy"] = policy
    result, status = post_filter(fw, cluster, pod)
    assert status.code == Code.UNSCHEDULABLE
    assert plugin_of(fw)._work.empty()
    assert why in status.message()
    if nominated is None:  # not eligible: a nomination it has is kept
        assert result is None
    elif not nominated:
        assert result.nominated_node_name == ""
    else:
        assert result.nominated_node_name == nominated
        assert f"node {nominated} is reserved for it" in status.message()


def test_pdbs_come_from_the_informer() -> None:
    cluster = full_node_cluster()
    fw = framework(cluster)
    plugin = plugin_of(fw)
    (informer,) = plugin.informers()
    assert (informer.group, informer.version, informer.plural) == (
        "policy",
        "v1",
        "poddisruptionbudgets",
    )
    assert informer.optional
    pdb = {
        "metadata": {"name": "b", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "db"}}},
        "status": {"disruptionsAllowed": 1},
    }
    informer.handler("ADDED", pdb, None)
    assert [p.name for p in plugin._pdbs.values()] == ["b"]
    informer.handler("DELETED", pdb, pdb)
    assert not plugin._pdbs


# -- NominatedReservation -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("nominee_level", "pod", "allowed"),
    [
        (0, make_pod("p").gpus(1).priority(2), False),  # 8 free, 8 held: nothing left
        (0, make_pod("p").gpus(1).priority(0), True),  # equal priority: not held against it
        (3, make_pod("p").gpus(1).priority(2), True),  # the nominee is lower
        (0, make_pod("p").priority(4), True),  # no GPU: nothing taken
        (0, make_pod("p").shared(1, "10Gi").priority(2), False),  # may open an idle GPU
    ],
)
def test_nominated_gpus_are_held_from_lower_priority_pods(
    nominee_level: int, pod: Any, allowed: bool
) -> None:
    cluster = Cluster(make_node("n1").gpus(8))
    nominee = make_pod("big").gpus(8).priority(nominee_level).obj()
    assert cluster.cache.nominate(nominee, "n1")
    fw = framework(cluster)
    result = run_cycle(fw, pod.obj(), cluster.nodes())
    status = result.statuses["n1"]
    assert status.is_success is allowed
    if not allowed:
        assert (status.plugin, status.message()) == (RESERVATION, REASON_HELD)
    # The nominee itself passes its own nomination.
    assert run_cycle(fw, nominee, cluster.nodes()).statuses["n1"].is_success


def test_only_what_the_nominees_need_is_held() -> None:
    cluster = Cluster(make_node("n1").gpus(8))
    cluster.cache.nominate(make_pod("big").gpus(4).priority(0).obj(), "n1")
    fw = framework(cluster)
    assert run_cycle(fw, make_pod("p").gpus(4).priority(1).obj(), cluster.nodes()).feasible
    assert not run_cycle(fw, make_pod("p").gpus(5).priority(1).obj(), cluster.nodes()).feasible


def test_the_signature_holds_what_filter_reads() -> None:
    plugin = NominatedReservation()
    a = make_pod("a").gpus(2).priority(1).obj()
    b = make_pod("b").gpus(2).priority(1).obj()
    c = make_pod("c").gpus(2).priority(2).obj()
    assert plugin.sign_pod(a) == plugin.sign_pod(b) != plugin.sign_pod(c)
    assert plugin.sign_pod(make_pod("x").obj()) == plugin.sign_pod(make_pod("y").priority(3).obj())


PENDING: dict[str, Any] = {"spec": {}, "status": {}}


@pytest.mark.parametrize(
    ("old", "new", "hint"),
    [
        (PENDING, None, QueueingHint.QUEUE),  # a deletion: maybe a nominee's
        ({"spec": {"nodeName": "n1"}}, {"spec": {"nodeName": "n1"}}, QueueingHint.QUEUE),
        (PENDING, {"spec": {}, "status": {"nominatedNodeName": "n1"}}, QueueingHint.QUEUE),
        ({"spec": {}, "status": {"nominatedNodeName": "n1"}}, PENDING, QueueingHint.QUEUE),
        (PENDING, PENDING, QueueingHint.QUEUE_SKIP),
    ],
)
def test_queueing_hint(old: dict[str, Any], new: dict[str, Any] | None, hint: QueueingHint) -> None:
    assert _after_pod_change({}, old, new) == hint


@pytest.mark.parametrize(
    ("kind", "node", "forgotten"),
    [("DELETED", "", True), ("MODIFIED", "n1", True), ("MODIFIED", "", False)],
)
def test_a_preemptor_deleted_or_bound_forgets_its_preemption(
    kind: str, node: str, forgotten: bool
) -> None:
    cluster = full_node_cluster()
    fw = framework(cluster)
    plugin = plugin_of(fw)
    pod = make_pod("big").gpus(2).priority(0).obj()
    post_filter(fw, cluster, pod)
    assert pod["metadata"]["uid"] in plugin._inflight
    changed = make_pod("big").gpus(2).priority(0).obj()
    if node:
        changed["spec"]["nodeName"] = node
    plugin.on_pod(kind, changed, pod)
    assert (pod["metadata"]["uid"] not in plugin._inflight) is forgotten
