"""The preemption Evaluator on a real framework (the default profile) and cache snapshot:
victims chosen with GPUFit's Filter on node-info clones, reprieve order, PDBs, gangs, the
choice of node and the number of candidates."""

from __future__ import annotations

import datetime
import random
from collections.abc import Sequence
from typing import Any

import preemption_paths  # noqa: F401  (puts tests/plugins and tests/scheduler on sys.path)
import pytest
from builders import Cluster, NodeBuilder, make_node, make_pod, run_cycle

from gpusched.cache import NodeInfo
from gpusched.framework import (
    CycleState,
    Framework,
    Pod,
    Status,
    build_frameworks,
    default_config,
    in_tree,
)
from gpusched.plugins.gpu_fit import choice_for
from gpusched.preemption import (
    PDB,
    Candidate,
    Evaluator,
    Victim,
    label_selector_matches,
    num_candidates,
)
from gpusched.priority import Priority, pod_priority

EPOCH = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def running(
    name: str,
    node: str,
    gpu_ids: Sequence[int],
    level: int,
    *,
    started: int = 0,
    labels: dict[str, str] | None = None,
    namespace: str = "default",
) -> dict[str, Any]:
    """A bound, running pod holding ``gpu_ids`` whole, at gpusched priority ``level``."""
    pod = (
        make_pod(name, namespace=namespace)
        .gpus(len(gpu_ids))
        .priority(level)
        .on(node)
        .assigned(gpu_ids)
        .phase("Running")
        .obj()
    )
    start = EPOCH + datetime.timedelta(seconds=started)
    pod["status"]["startTime"] = start.isoformat().replace("+00:00", "Z")
    if labels:
        pod["metadata"]["labels"] = dict(labels)
    return pod


def preemptor(gpus: int, level: int = 0, name: str = "big") -> dict[str, Any]:
    return make_pod(name).gpus(gpus).priority(level).obj()


class GangRunner:
    """The framework with a group key read from the ``gang`` label (the evaluator's seam)."""

    def __init__(self, fw: Framework) -> None:
        self.fw = fw
        self.node_lister = fw.node_lister

    def run_pre_filter(self, state: CycleState, pod: Pod) -> Any:
        return self.fw.run_pre_filter(state, pod)

    def run_filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        return self.fw.run_filter(state, pod, node_info)

    def group_key(self, pod: Pod) -> str | None:
        gang = ((pod.get("metadata") or {}).get("labels") or {}).get("gang")
        return f"default/{gang}" if gang else None


def setup(
    nodes: Sequence[NodeBuilder], pods: Sequence[dict[str, Any]]
) -> tuple[Cluster, Framework]:
    cluster = Cluster(*nodes)
    for pod in pods:
        cluster.cache.add_pod(pod)
    snapshot = cluster.snapshot()
    fw = build_frameworks(default_config(), in_tree(), node_lister=snapshot)["gpusched"]
    return cluster, fw


def statuses_for(fw: Framework, cluster: Cluster, pod: dict[str, Any]) -> dict[str, Status]:
    result = run_cycle(fw, pod, cluster.nodes())
    assert not result.feasible, "the preemptor must fit nowhere"
    return result.statuses


def victims_of(candidate: Candidate | None) -> list[str]:
    assert candidate is not None
    return sorted(v.pod["metadata"]["name"] for v in candidate.victims)


# -- victims on one 8-GPU node with 1-GPU pods of mixed priority ---------------------------

LEVELS = [1, 1, 2, 2, 3, 3, 4, 4]
"""GPU i's pod has level LEVELS[i] (0 highest)."""


@pytest.mark.parametrize(
    ("gpus", "level", "expected"),
    [
        (1, 0, ["g7"]),  # the lowest priority, and the latest started of the two
        (2, 0, ["g6", "g7"]),
        (3, 0, ["g5", "g6", "g7"]),
        (4, 0, ["g4", "g5", "g6", "g7"]),
        (2, 2, ["g6", "g7"]),
        (4, 2, ["g4", "g5", "g6", "g7"]),  # level-3 pods may go for a level-2 pod
        (5, 2, None),  # only four pods are of lower priority: never an equal one
        (3, 3, None),
        (1, 4, None),  # nothing is lower than level 4 at spec.priority 0
    ],
)
def test_victims_are_the_fewest_lowest_priority_pods(
    gpus: int, level: int, expected: list[str] | None
) -> None:
    pods = [running(f"g{i}", "n1", [i], lvl, started=i) for i, lvl in enumerate(LEVELS)]
    cluster, fw = setup([make_node("n1").gpus(8)], pods)
    pod = preemptor(gpus, level)
    candidate, why, _ = Evaluator(fw, rng=random.Random(0)).preempt(
        pod, statuses_for(fw, cluster, pod)
    )
    if expected is None:
        assert candidate is None
        assert why.startswith("preemption: 0/1 nodes are available"), why
        return
    assert victims_of(candidate) == expected
    assert candidate is not None
    assert candidate.node == "n1"
    assert all(v.priority < pod_priority(pod) for v in candidate.victims)


def test_spec_priority_breaks_ties_within_a_level() -> None:
    pods = [running(f"g{i}", "n1", [i], 2) for i in range(8)]
    pods[3]["spec"]["priority"] = 100
    cluster, fw = setup([make_node("n1").gpus(8)], pods)
    pod = preemptor(1, 2)
    pod["spec"]["priority"] = 50  # above every pod but g3
    candidate, _, _ = Evaluator(fw, rng=random.Random(0)).preempt(
        pod, statuses_for(fw, cluster, pod)
    )
    assert candidate is not None
    assert "g3" not in victims_of(candidate)
    assert len(candidate.victims) == 1


def test_the_victims_free_a_4_gpu_nvlink_quad_and_gpufit_would_choose_it() -> None:
    """DGX-1V: quads {0,1,2,3} and {4,5,6,7} are NVLink-joined all to all. The low-priority
    pods hold the second quad; the pod gets exactly the GPUs they free."""
    levels = [1, 1, 1, 1, 3, 3, 3, 3]
    pods = [running(f"g{i}", "n1", [i], lvl, started=i) for i, lvl in enumerate(levels)]
    cluster, fw = setup([make_node("n1").dgx1()], pods)
    pod = preemptor(4)
    evaluator = Evaluator(fw, rng=random.Random(0))
    candidate, _, _ = evaluator.preempt(pod, statuses_for(fw, cluster, pod))
    assert victims_of(candidate) == ["g4", "g5", "g6", "g7"]
    # On the node without the victims, GPUFit's Filter chooses the freed quad.
    assert candidate is not None
    clone = cluster.node("n1").clone()
    for v in candidate.victims:
        clone.remove_pod(v.uid)
    state = CycleState()
    fw.run_pre_filter(state, pod)
    assert fw.run_filter(state, pod, clone).is_success
    choice = choice_for(state, "n1")
    assert choice is not None
    assert choice.gpu_ids == (4, 5, 6, 7)


def test_a_share_evicts_the_pods_on_one_gpu_not_any_two() -> None:
    """A 60 GiB share needs one GPU with 60 GiB free. The two lowest-priority shares sit on
    GPUs 2 and 5: evicting both would free 30 GiB on each, which fits nothing. GPUFit's Filter
    on the clone finds the pair on one GPU: the level-4 and the level-3 share of GPU 5."""
    pods = []
    low = {(5, 0): 3, (2, 1): 4, (5, 1): 4}
    for gpu in range(8):
        for half in range(2):
            level = low.get((gpu, half), 3 if half else 1)
            pod = (
                make_pod(f"s{gpu}-{half}")
                .shared(1, "30Gi")
                .priority(level)
                .on("n1")
                .assigned([gpu], vram_mib=[30720])
                .phase("Running")
                .obj()
            )
            pods.append(pod)
    cluster, fw = setup([make_node("n1").gpus(8)], pods)
    pod = make_pod("big").shared(1, "60Gi").priority(0).obj()
    candidate, _, _ = Evaluator(fw, rng=random.Random(0)).preempt(
        pod, statuses_for(fw, cluster, pod)
    )
    assert victims_of(candidate) == ["s5-0", "s5-1"]


# -- PodDisruptionBudgets -------------------------------------------------------------------


def test_a_victim_whose_pdb_allows_no_disruption_is_reprieved_first() -> None:
    # All of level 4, g0-g3 started last: without a PDB, g0 and g1 go; a PDB allowing no
    # disruption guards g0-g3, so they are reprieved first and g4, g5 go instead.
    pods = [
        running(f"g{i}", "n1", [i], 4, started=100 - i, labels={"app": "db" if i < 4 else "x"})
        for i in range(8)
    ]
    cluster, fw = setup([make_node("n1").gpus(8)], pods)
    pod = preemptor(2)
    statuses = statuses_for(fw, cluster, pod)
    free = Evaluator(fw, rng=random.Random(0)).preempt(pod, statuses)[0]
    assert victims_of(free) == ["g0", "g1"]  # the latest started
    pdb = PDB("default", "db", {"matchLabels": {"app": "db"}}, disruptions_allowed=0)
    guarded = Evaluator(fw, rng=random.Random(0), pdbs=lambda: [pdb]).preempt(pod, statuses)[0]
    assert victims_of(guarded) == ["g4", "g5"]
    assert guarded is not None
    assert guarded.pdb_violations == 0


def test_the_node_with_fewer_pdb_violations_wins() -> None:
    pods = [running(f"a{i}", "n1", [i], 4, labels={"app": "db"}) for i in range(8)]
    pods += [running(f"b{i}", "n2", [i], 3) for i in range(8)]
    cluster, fw = setup([make_node("n1").gpus(8), make_node("n2").gpus(8)], pods)
    pod = preemptor(8)
    statuses = statuses_for(fw, cluster, pod)
    # Without a budget the lower-priority node n1 is chosen; with one, n2 violates none.
    assert Evaluator(fw, rng=random.Random(0)).preempt(pod, statuses)[0].node == "n1"  # type: ignore[union-attr]
    pdb = PDB("default", "db", {"matchLabels": {"app": "db"}}, disruptions_allowed=2)
    candidate, _, _ = Evaluator(fw, rng=random.Random(0), pdbs=lambda: [pdb]).preempt(pod, statuses)
    assert candidate is not None
    assert candidate.node == "n2"
    assert candidate.pdb_violations == 0


@pytest.mark.parametrize(
    ("obj", "pod_labels", "pod_ns", "matches"),
    [
        ({"spec": {"selector": {"matchLabels": {"a": "1"}}}}, {"a": "1"}, "default", True),
        ({"spec": {"selector": {"matchLabels": {"a": "1"}}}}, {"a": "2"}, "default", False),
        ({"spec": {"selector": {"matchLabels": {"a": "1"}}}}, {"a": "1"}, "other", False),
        ({"spec": {"selector": {}}}, {"a": "1"}, "default", False),  # empty: none (upstream)
        (
            {
                "spec": {"selector": {"matchLabels": {"a": "1"}}},
                "status": {"disruptedPods": {"p": "t"}},
            },
            {"a": "1"},
            "default",
            False,  # already being disrupted: not counted again
        ),
    ],
)
def test_pdb_matching(
    obj: dict[str, Any], pod_labels: dict[str, str], pod_ns: str, matches: bool
) -> None:
    pdb = PDB.from_object({"metadata": {"name": "b", "namespace": "default"}, **obj})
    pod = {"metadata": {"name": "p", "namespace": pod_ns, "labels": pod_labels}}
    assert pdb.matches(pod) is matches


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        (
            {"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]},
            {"a": "2"},
            True,
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]},
            {"a": "1"},
            False,
        ),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, True),
        ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True),
        ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": ""}, False),
        (
            {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]},
            {"a": "2"},
            False,
        ),
    ],
)
def test_label_selector(selector: dict[str, Any], labels: dict[str, str], matches: bool) -> None:
    assert label_selector_matches(selector, labels) is matches


# -- gangs ----------------------------------------------------------------------------------


def test_a_gang_member_is_evicted_only_with_its_whole_gang() -> None:
    # n1: seven level-3 pods and one member of gang "g" (level 4), whose other member runs
    # on n2. An 8-GPU pod on n1 takes every pod there, and the member on n2 goes too.
    pods = [running(f"a{i}", "n1", [i], 3) for i in range(7)]
    pods.append(running("g-0", "n1", [7], 4, labels={"gang": "g"}))
    pods.append(running("g-1", "n2", [0], 4, labels={"gang": "g"}))
    cluster, fw = setup([make_node("n1").gpus(8), make_node("n2").gpus(1)], pods)
    pod = preemptor(8)
    candidate, _, _ = Evaluator(GangRunner(fw), rng=random.Random(0)).preempt(
        pod, statuses_for(fw, cluster, pod)
    )
    assert candidate is not None
    assert candidate.node == "n1"
    assert victims_of(candidate) == [*(f"a{i}" for i in range(7)), "g-0", "g-1"]
    assert {v.node for v in candidate.victims if v.pod["metadata"]["name"] == "g-1"} == {"n2"}


def test_a_gang_is_reprieved_whole_and_one_with_a_higher_member_is_no_victim() -> None:
    # n1 holds a level-4 gang on GPUs 0-1 (its third member on n2) and level-3 pods on 2-7.
    # The reprieve keeps the more important level-3 pods, so the gang goes, all of it.
    pods = [running(f"a{i}", "n1", [i], 3, started=i) for i in range(2, 8)]
    pods += [running(f"g-{i}", "n1", [i], 4, labels={"gang": "g"}) for i in range(2)]
    pods.append(running("g-2", "n2", [0], 4, labels={"gang": "g"}))
    # A gang with a member of priority 0 (higher than the preemptor's 1) is never a victim.
    pods.append(running("h-0", "n3", [0], 4, labels={"gang": "h"}))
    pods.append(running("h-1", "n2", [1], 0, labels={"gang": "h"}))
    nodes = [make_node("n1").gpus(8), make_node("n2").gpus(2), make_node("n3").gpus(1)]
    cluster, fw = setup(nodes, pods)
    runner = GangRunner(fw)
    pod = preemptor(1, level=1)
    statuses = statuses_for(fw, cluster, pod)
    evaluator = Evaluator(runner, rng=random.Random(0))
    state = CycleState()
    fw.run_pre_filter(state, pod)
    on_n3 = evaluator.select_victims(state.clone(), pod, cluster.node("n3"))
    assert on_n3[0] == []
    assert not on_n3[2].is_success
    victims, _, status = evaluator.select_victims(state.clone(), pod, cluster.node("n1"))
    assert status.is_success
    # The gang is the lowest priority, so it is removed last in the reprieve: its members
    # are the victims, all three, and every level-3 pod stays.
    assert sorted(v.pod["metadata"]["name"] for v in victims) == ["g-0", "g-1", "g-2"]
    candidate, _, _ = evaluator.preempt(pod, statuses)  # n1 or n2: the same three victims
    assert victims_of(candidate) == ["g-0", "g-1", "g-2"]


# -- choosing the node ----------------------------------------------------------------------


def victim(level: int, started: int = 0, value: int = 0) -> Victim:
    start = (EPOCH + datetime.timedelta(seconds=started)).isoformat()
    return Victim(
        {"metadata": {"uid": "u"}, "status": {"startTime": start}}, "n", Priority(level, value)
    )


@pytest.mark.parametrize(
    ("candidates", "chosen"),
    [
        ([Candidate("a", (victim(4),), 1), Candidate("b", (victim(1),), 0)], "b"),
        ([Candidate("a", (victim(2),)), Candidate("b", (victim(3), victim(3)))], "b"),
        ([Candidate("a", (victim(3), victim(3))), Candidate("b", (victim(3), victim(4)))], "b"),
        ([Candidate("a", (victim(3, value=5),)), Candidate("b", (victim(3, value=1),))], "b"),
        (
            [
                Candidate("a", (victim(3), victim(4), victim(4))),
                Candidate("b", (victim(3), victim(3))),
            ],
            "a",  # the sum of ranks: a level-4 pod weighs far less than a level-3 one
        ),
        ([Candidate("a", (victim(3, started=5),)), Candidate("b", (victim(3, started=9),))], "b"),
        ([Candidate("a", (victim(3),)), Candidate("b", (victim(3),))], "a"),
    ],
)
def test_pick_one_node_for_preemption(candidates: list[Candidate], chosen: str) -> None:
    picked = Evaluator.select_candidate(candidates)
    assert picked is not None
    assert picked.node == chosen


@pytest.mark.parametrize(
    ("nodes", "percentage", "absolute", "expected"),
    [(5000, 10, 100, 500), (500, 10, 100, 100), (50, 10, 100, 50), (1000, 0, 10, 10)],
)
def test_num_candidates(nodes: int, percentage: int, absolute: int, expected: int) -> None:
    assert num_candidates(nodes, percentage, absolute) == expected


def test_the_dry_run_stops_after_enough_candidates() -> None:
    nodes = [make_node(f"n{i}").gpus(1) for i in range(6)]
    pods = [running(f"p{i}", f"n{i}", [0], 4) for i in range(6)]
    cluster, fw = setup(nodes, pods)
    pod = preemptor(1)
    evaluator = Evaluator(
        fw, min_candidate_nodes_percentage=0, min_candidate_nodes_absolute=2, rng=random.Random(1)
    )
    candidates, _ = evaluator.find_candidates(pod, statuses_for(fw, cluster, pod))
    assert len(candidates) == 2


@pytest.mark.parametrize(
    ("pod_extra", "terminating", "eligible"),
    [
        ({}, False, True),
        ({"spec": {"preemptionPolicy": "Never"}}, False, False),
        ({"status": {"nominatedNodeName": "n1"}}, False, True),
        ({"status": {"nominatedNodeName": "n1"}}, True, False),
    ],
)
def test_eligibility(pod_extra: dict[str, Any], terminating: bool, eligible: bool) -> None:
    victim_pod = running("v", "n1", [0], 4)
    if terminating:
        victim_pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    _, fw = setup([make_node("n1").gpus(1)], [victim_pod])
    pod = preemptor(1)
    for key, value in pod_extra.items():
        pod[key].update(value)
    ok, why = Evaluator(fw).eligible(pod)
    assert ok is eligible, why


def test_room_promised_to_an_equal_nominee_is_not_counted_on_again() -> None:
    """As upstream's RunFilterPluginsWithNominatedPods: a pod nominated to n1 with equal or
    higher priority keeps its GPUs there, so a second preemptor evicts on n2 instead."""
    pods = [running(f"a{i}", "n1", [i], 3) for i in range(8)]
    pods += [running(f"b{i}", "n2", [i], 2) for i in range(8)]  # more important: n1 first
    cluster, fw = setup([make_node("n1").gpus(8), make_node("n2").gpus(8)], pods)
    first, second = preemptor(8, name="first"), preemptor(8, name="second")
    statuses = statuses_for(fw, cluster, second)
    evaluator = Evaluator(fw, rng=random.Random(0))
    assert evaluator.preempt(second, statuses).candidate.node == "n1"  # type: ignore[union-attr]
    assert cluster.cache.nominate(first, "n1")
    statuses = statuses_for(fw, cluster, second)
    candidate = evaluator.preempt(second, statuses).candidate
    assert candidate is not None
    assert candidate.node == "n2"
    # The nominee itself still counts on its node.
    assert evaluator.preempt(first, statuses_for(fw, cluster, first)).candidate.node == "n1"  # type: ignore[union-attr]


def test_gangs_through_the_default_profile_s_coscheduling_key() -> None:
    """The same rule with the shipped seam: Coscheduling's group key (scheduler-plugins'
    ``scheduling.x-k8s.io/pod-group`` label), read through ``Framework.group_key``."""
    label = {"scheduling.x-k8s.io/pod-group": "train"}
    pods = [running(f"a{i}", "n1", [i], 3) for i in range(7)]
    pods.append(running("train-0", "n1", [7], 4, labels=label))
    pods.append(running("train-1", "n2", [0], 4, labels=label))
    cluster, fw = setup([make_node("n1").gpus(8), make_node("n2").gpus(1)], pods)
    assert fw.group_key(pods[-1]) == "default/train"
    pod = preemptor(8)
    candidate, _, _ = Evaluator(fw, rng=random.Random(0)).preempt(
        pod, statuses_for(fw, cluster, pod)
    )
    assert victims_of(candidate) == [*(f"a{i}" for i in range(7)), "train-0", "train-1"]
