"""GangManager on its own: gating, planning and topology domains, Permit accounting, the
PreBind barrier, losses after a gang ran; its invariants checked after every step."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from gpusched.clock import FakeClock
from gpusched.framework import NodeLister
from gpusched.gangs import kueue, scheduler_plugins
from gpusched.gangs.manager import GangManager, MemberState
from gpusched.gangs.spec import TOPOLOGY_ANNOTATION, TOPOLOGY_POLICY_ANNOTATION, Form


def member(
    name: str, group: str = "g", total: int = 3, gpus: int = 1, **annotations: str
) -> dict[str, Any]:
    """A Kueue-form member (no object needed)."""
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "labels": {kueue.LABEL: group},
            "annotations": {kueue.COUNT_ANNOTATION: str(total), **annotations},
        },
        "spec": {
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]
        },
        "status": {"phase": "Pending"},
    }


def bound(pod: dict[str, Any], node: str = "n1", phase: str = "Pending") -> dict[str, Any]:
    return {**pod, "spec": {**pod["spec"], "nodeName": node}, "status": {"phase": phase}}


@dataclass
class _Ledger:
    free_gpu_count: int
    devices: tuple[int, ...] = tuple(range(8))


@dataclass
class _Node:
    name: str
    labels: dict[str, str]
    ledger: _Ledger


@dataclass
class Nodes:
    nodes: list[_Node] = field(default_factory=list)

    def node_infos(self) -> list[_Node]:
        return self.nodes


def nodes(*spec: tuple[str, dict[str, str], int]) -> NodeLister:
    return cast(NodeLister, Nodes([_Node(n, labels, _Ledger(free)) for n, labels, free in spec]))


@pytest.fixture
def manager() -> GangManager:
    return GangManager(FakeClock(), topology_keys=("clique", "rack"))


def test_members_are_gated_until_min_member_are_created(manager: GangManager) -> None:
    pods = [member(f"p{i}") for i in range(3)]
    assert manager.gate(pods[0]) == "pod group ns/g: 1 of 3 members created; waiting for 2 more"
    assert manager.on_pod("ADDED", pods[0], None) == []
    assert manager.gate(pods[1]) == "pod group ns/g: 2 of 3 members created; waiting for 1 more"
    assert manager.on_pod("ADDED", pods[1], None) == []
    assert manager.gate(pods[2]) is None  # the third is counted before it is indexed
    # Indexing the third crosses min_member: every pending member is activated.
    assert sorted(manager.on_pod("ADDED", pods[2], None)) == ["uid-p0", "uid-p1", "uid-p2"]
    assert manager.gate(pods[0]) is None
    manager._check()


@pytest.mark.parametrize(
    ("pod", "message"),
    [
        (member("x", total=0), "at least 1"),
        (
            {**member("x"), "metadata": {**member("x")["metadata"], "annotations": {}}},
            "no annotation",
        ),
    ],
    ids=["zero", "no-count"],
)
def test_malformed_members_are_gated_with_what_to_fix(
    manager: GangManager, pod: dict[str, Any], message: str
) -> None:
    gate = manager.gate(pod)
    assert gate is not None
    assert message in gate


def test_a_group_object_that_appears_activates_its_members() -> None:
    manager = GangManager(FakeClock())
    pod = member("p")
    pod["metadata"]["labels"] = {scheduler_plugins.LABEL: "g"}
    manager.on_pod("ADDED", pod, None)
    assert "does not exist" in (manager.gate(pod) or "")
    obj = {"metadata": {"name": "g", "namespace": "ns"}, "spec": {"minMember": 1}}
    assert manager.on_object(Form.SCHEDULER_PLUGINS, "ADDED", obj, None) == ["uid-p"]
    assert manager.gate(pod) is None
    # A status write changes no spec: nothing to activate.
    assert manager.on_object(Form.SCHEDULER_PLUGINS, "MODIFIED", {**obj, "status": {}}, obj) == []


def test_plan_lists_the_pending_members_and_joiners_go_alone(manager: GangManager) -> None:
    pods = [member(f"p{i}") for i in range(4)]
    for p in pods[:3]:
        manager.on_pod("ADDED", p, None)
    group = manager.plan(pods[0], None)
    assert group is not None
    assert (group.key, group.min_member, group.placed) == ("ns/g", 3, 0)
    assert sorted(group.pending) == ["uid-p0", "uid-p1", "uid-p2"]
    for p in pods[:3]:
        manager.on_pod("MODIFIED", bound(p), p)
    manager.on_pod("ADDED", pods[3], None)
    assert manager.plan(pods[3], None) is None  # the gang runs: a fourth joins on its own
    manager._check()


@pytest.mark.parametrize(
    ("annotations", "fleet", "want_domains", "required", "message"),
    [
        # Best fit at the smallest level first: clique b (3 free) before a (8), then racks.
        (
            {},
            [
                ("n1", {"clique": "a", "rack": "r1"}, 8),
                ("n2", {"clique": "b", "rack": "r1"}, 3),
                ("n3", {"clique": "c", "rack": "r2"}, 2),
            ],
            [{"n2"}, {"n1"}, {"n1", "n2"}],
            False,
            "",
        ),
        # A required key nobody can hold: one empty domain and a message.
        (
            {TOPOLOGY_ANNOTATION: "rack", TOPOLOGY_POLICY_ANNOTATION: "Required"},
            [("n1", {"rack": "r1"}, 1), ("n2", {"rack": "r2"}, 2)],
            [set()],
            True,
            "needs 3 GPUs in one rack; the largest rack (r2) has 2 free",
        ),
        (
            {TOPOLOGY_ANNOTATION: "zone", TOPOLOGY_POLICY_ANNOTATION: "Required"},
            [("n1", {"rack": "r1"}, 8)],
            [set()],
            True,
            "needs its members in one zone, and no node has the label zone",
        ),
        ({}, [("n1", {}, 8)], [], False, ""),
    ],
    ids=["best-fit", "required-too-small", "required-unlabelled", "unlabelled"],
)
def test_topology_domains(
    manager: GangManager,
    annotations: dict[str, str],
    fleet: list[tuple[str, dict[str, str], int]],
    want_domains: list[set[str]],
    required: bool,
    message: str,
) -> None:
    pods = [member(f"p{i}", **annotations) for i in range(3)]
    for p in pods:
        manager.on_pod("ADDED", p, None)
    group = manager.plan(pods[0], nodes(*fleet))
    assert group is not None
    assert [set(d) for d in group.domains] == want_domains
    assert (group.domain_required, group.domain_message) == (required, message)


def plan_and_reserve(manager: GangManager, pods: list[dict[str, Any]]) -> None:
    for p in pods:
        manager.on_pod("ADDED", p, None)
    assert manager.plan(pods[0], None) is not None
    for p in pods:
        manager.reserve(p)


def test_permit_allows_the_gang_once_min_member_are_reserved(manager: GangManager) -> None:
    pods = [member(f"p{i}") for i in range(3)]
    for p in pods:
        manager.on_pod("ADDED", p, None)
    manager.plan(pods[0], None)
    manager.reserve(pods[0])
    assert manager.permit(pods[0]) == (False, [])  # 1 of 3: waits
    manager.reserve(pods[1])
    manager.reserve(pods[2])
    assert manager.permit(pods[2]) == (True, ["uid-p0"])
    manager._check()


def test_an_unreserve_while_planning_is_a_retry_not_a_failure(manager: GangManager) -> None:
    pods = [member(f"p{i}") for i in range(3)]
    plan_and_reserve(manager, pods)
    assert manager.unreserve(pods[1]) == []  # the plan is open: another domain is tried
    manager.reserve(pods[1])
    assert manager.permit(pods[0])[0]


def test_an_unreserve_after_permit_breaks_the_plan_and_rejects_the_waiting() -> None:
    clock = FakeClock()
    manager = GangManager(clock, backoff_seconds=10)
    pods = [member(f"p{i}") for i in range(3)]
    plan_and_reserve(manager, pods)
    manager.groups["ns/g"].waiting.add("uid-p0")  # as if p0 waited at Permit
    manager.permit(pods[1])
    manager.groups["ns/g"].waiting.add("uid-p2")
    assert manager.unreserve(pods[1]) == ["uid-p2"]
    assert "backs off for 10s" in (manager.gate(pods[0]) or "")
    assert manager.backoffs_expired() == []


async def test_the_barrier_releases_members_together(manager: GangManager) -> None:
    pods = [member(f"p{i}") for i in range(3)]
    plan_and_reserve(manager, pods)
    manager.permit(pods[0])
    first = asyncio.create_task(manager.barrier(pods[0], 30))
    second = asyncio.create_task(manager.barrier(pods[1], 30))
    await asyncio.sleep(0)
    assert not first.done()
    assert await manager.barrier(pods[2], 30) == ""
    assert await first == ""
    assert await second == ""
    # Released: a later failure of a member breaks nothing.
    assert manager.unreserve(pods[0]) == []


async def test_a_member_deleted_at_the_barrier_fails_the_others(manager: GangManager) -> None:
    pods = [member(f"p{i}") for i in range(3)]
    plan_and_reserve(manager, pods)
    manager.permit(pods[0])
    waiting = asyncio.create_task(manager.barrier(pods[0], 30))
    await asyncio.sleep(0)
    manager.on_pod("DELETED", pods[2], None)
    assert await waiting == "member p2 was deleted before the gang was bound"
    assert await manager.barrier(pods[1], 30) == "member p2 was deleted before the gang was bound"
    manager._check()


async def test_the_barrier_times_out() -> None:
    clock = FakeClock()
    manager = GangManager(clock)
    pods = [member(f"p{i}") for i in range(3)]
    plan_and_reserve(manager, pods)
    manager.permit(pods[0])
    waiting = asyncio.create_task(manager.barrier(pods[0], 5))
    await clock.wait_for_sleepers(1)
    await clock.advance(5)
    assert await waiting == "2 of 3 members did not reach the binding barrier within 5s"


def test_a_member_lost_after_the_gang_ran_is_reported(manager: GangManager) -> None:
    pods = [member(f"p{i}") for i in range(3)]
    for p in pods:
        manager.on_pod("ADDED", p, None)
    for p in pods:
        manager.on_pod("MODIFIED", bound(p, phase="Running"), p)
    assert manager.groups["ns/g"].ran
    manager.on_pod("MODIFIED", bound(pods[0], phase="Failed"), bound(pods[0], phase="Running"))
    manager.on_pod("DELETED", bound(pods[1], phase="Running"), None)
    assert [e[2:] for e in manager.events] == [
        ("GangMemberLost", "member p0 failed after the gang ran; 2 of 3 members still run"),
        ("GangMemberLost", "member p1 was deleted after the gang ran; 1 of 3 members still run"),
    ]
    group = manager.groups["ns/g"]
    assert group.counts[MemberState.FAILED] == 1
    assert not group.reserved
    manager._check()


def test_random_events_keep_the_invariants() -> None:
    rng = random.Random(7)
    manager = GangManager(FakeClock())
    live: dict[str, dict[str, Any]] = {}
    for step in range(2000):
        name = f"p{rng.randrange(30)}"
        group = f"g{rng.randrange(3)}"
        old = live.get(name)
        action = rng.random()
        if old is None:
            pod = member(name, group=group, total=rng.randrange(1, 5))
            manager.on_pod("ADDED", pod, None)
            live[name] = pod
        elif action < 0.2:
            manager.on_pod("DELETED", old, None)
            del live[name]
        elif action < 0.5:
            new = bound(old, phase=rng.choice(["Pending", "Running", "Succeeded", "Failed"]))
            manager.on_pod("MODIFIED", new, old)
            live[name] = new
        elif action < 0.7:
            manager.plan(old, None)
            manager.reserve(old)
        elif action < 0.85:
            manager.unreserve(old)
        else:
            manager.permit(old)
        manager._check()
        assert step >= 0


def test_a_gang_has_run_only_once_its_required_members_are_bound(manager: GangManager) -> None:
    pods = [member(f"p{i}") for i in range(3)]
    plan_and_reserve(manager, pods)
    manager.on_pod("MODIFIED", bound(pods[0]), pods[0])  # 1 bound, 2 reserved
    assert not manager.groups["ns/g"].ran
    manager.on_pod("MODIFIED", bound(pods[0], phase="Failed"), bound(pods[0]))
    assert manager.events == []  # not a loss after the gang ran: it never ran whole
    for p in pods[1:]:
        manager.on_pod("MODIFIED", bound(p), p)
    assert not manager.groups["ns/g"].ran  # 2 of 3 bound
    manager._check()


def test_a_gang_larger_than_the_cluster_is_told_it_never_fits(manager: GangManager) -> None:
    pods = [member(f"p{i}", gpus=8) for i in range(3)]  # 24 GPUs; the cluster has 16
    for p in pods:
        manager.on_pod("ADDED", p, None)
    group = manager.plan(pods[0], nodes(("n1", {}, 8), ("n2", {}, 8)))
    assert group is not None
    assert group.domains == (frozenset(),)
    assert group.domain_required
    assert group.domain_message.startswith(
        "its 3 required members need 24 GPUs together, more than the 16 the cluster has"
    )
