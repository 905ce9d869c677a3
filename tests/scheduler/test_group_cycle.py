"""The scheduler's gang cycle (``Scheduler._schedule_group``) with a minimal test plugin, end
to end on the target cluster: the core alone, whatever gang plugin a profile enables.

``TestGang`` groups pods by the label ``test.gpusched.io/gang`` (``min`` members: the label
``test.gpusched.io/min``), plans every pending member it has seen, and offers the nodes as
one domain per node when the pod says ``test.gpusched.io/domain: per-node``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from conftest import Target
from scheduler_bed import Bed, bound, objects_until, open_bed, reservations

from gpusched.framework import (
    DisabledPlugin,
    PluginRef,
    Plugins,
    PluginSet,
    Pod,
    PodEventHandler,
    PodGroup,
    PodGroupPlugin,
    PreEnqueuePlugin,
    SchedulerConfiguration,
    Status,
    apply_default_plugins,
    in_tree,
)
from gpusched.framework.config import Profile
from gpusched.scheduler import Scheduler

GANG = "test.gpusched.io/gang"
MIN = "test.gpusched.io/min"
DOMAIN = "test.gpusched.io/domain"


class TestGang(PreEnqueuePlugin, PodGroupPlugin, PodEventHandler):
    NAME = "TestGang"
    __test__ = False

    def __init__(self) -> None:
        self.pending: dict[str, dict[str, Pod]] = {}  # group -> uid -> pod
        self.bound: dict[str, set[str]] = {}

    @classmethod
    def new(cls, args: Any, handle: Any) -> TestGang:
        plugin = cls()
        plugin.handle = handle
        return plugin

    def pre_enqueue(self, pod: Pod) -> Status:
        return Status.success()

    def group_key(self, pod: Pod) -> str | None:
        name = (pod["metadata"].get("labels") or {}).get(GANG)
        return f"{pod['metadata'].get('namespace')}/{name}" if name else None

    def pod_group(self, pod: Pod) -> PodGroup | None:
        key = self.group_key(pod)
        if key is None:
            return None
        labels = pod["metadata"]["labels"]
        domains: tuple[frozenset[str], ...] = ()
        if labels.get(DOMAIN) == "per-node":
            domains = tuple(frozenset({n.name}) for n in self.handle.node_lister.node_infos())
        return PodGroup(
            key,
            int(labels.get(MIN, "1")),
            tuple(self.pending.get(key, {})),
            placed=len(self.bound.get(key, ())),
            domains=domains,
            domain_required=bool(domains),
            domain_message="needs every member on one node",
        )

    def on_pod(self, kind: str, pod: Pod, old: Pod | None) -> None:
        key = self.group_key(pod)
        if key is None:
            return
        uid = pod["metadata"]["uid"]
        self.pending.setdefault(key, {}).pop(uid, None)
        self.bound.setdefault(key, set()).discard(uid)
        if kind == "DELETED":
            return
        if pod["spec"].get("nodeName"):
            self.bound[key].add(uid)
        else:
            self.pending[key][uid] = pod


def config_with(bed: Bed) -> SchedulerConfiguration:
    base = bed.config()
    # One pod group plugin per profile: the default Coscheduling makes way for TestGang.
    plugins = Plugins(
        pre_enqueue=PluginSet(enabled=[PluginRef(name=TestGang.NAME)]),
        multi_point=PluginSet(disabled=[DisabledPlugin(name="Coscheduling")]),
    )
    profile = Profile(scheduler_name=bed.scheduler_name, plugins=plugins)
    return apply_default_plugins(base.model_copy(update={"profiles": [profile]}))


def registry() -> Any:
    reg = in_tree()
    if TestGang.NAME not in reg:
        reg.register(TestGang)
    return reg


def member(bed: Bed, name: str, gang: str, size: int, gpus: int, **labels: str) -> Pod:
    pod = bed.pod(name, gpus=gpus)
    pod["metadata"]["labels"].update({GANG: gang, MIN: str(size), **labels})
    return pod


def message(pod: Pod) -> str:
    for c in (pod.get("status") or {}).get("conditions") or ():
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return str(c.get("message", ""))
    return ""


@pytest.fixture
async def bed(target: Target) -> AsyncIterator[Bed]:
    async with open_bed(target) as bed:
        await bed.add_nodes(2)  # 2 x 8 GPUs
        yield bed


async def assert_nothing_held(bed: Bed, scheduler: Scheduler) -> None:
    assert scheduler.cache.assumed_count == 0
    leases = await objects_until(bed.kube, bed.leases_path, lambda _: True)
    assert all(not entries for entries in reservations(leases).values())


async def test_a_gang_that_fits_is_bound_whole(bed: Bed) -> None:
    async with bed.running(config=config_with(bed), registry=registry()):
        await bed.create_pods(member(bed, f"m{i}", "g", 3, gpus=4) for i in range(3))
        pods = await bed.pods_until(lambda ps: len(bound(ps)) == 3)
        assert sorted(bound(pods)) == ["m0", "m1", "m2"]


async def test_a_gang_that_does_not_fit_reserves_nothing(bed: Bed) -> None:
    async with bed.running(config=config_with(bed), registry=registry()) as scheduler:
        await bed.create_pods(member(bed, f"m{i}", "big", 5, gpus=4) for i in range(5))
        # The first members may be tried before the last exists ("4 can be scheduled now");
        # then all five are planned together, and do not fit.
        pods = await bed.pods_until(
            lambda ps: len(ps) == 5 and all("do not fit" in message(p) for p in ps.values())
        )
        assert not bound(pods)
        text = message(pods["m0"])
        assert f"pod group {bed.namespace}/big" in text, text
        assert "do not fit together" in text, text
        await assert_nothing_held(bed, scheduler)
        # Nothing is held: a pod of 8 GPUs, alone, still fits.
        await bed.create_pod(bed.pod("solo", gpus=8))
        pods = await bed.pods_until(lambda ps: "solo" in bound(ps))
        assert bound(pods) == ["solo"]


async def test_a_required_domain_that_holds_no_plan_says_why(bed: Bed) -> None:
    async with bed.running(config=config_with(bed), registry=registry()) as scheduler:
        # 2 x 6 GPUs fit the cluster, but not one node, and one node is required.
        await bed.create_pods(
            member(bed, f"m{i}", "pinned", 2, gpus=6, **{DOMAIN: "per-node"}) for i in range(2)
        )
        pods = await bed.pods_until(
            lambda ps: len(ps) == 2 and all("pod group" in message(p) for p in ps.values())
        )
        assert not bound(pods)
        assert "needs every member on one node" in message(pods["m1"])
        await assert_nothing_held(bed, scheduler)


async def test_members_of_a_gang_in_one_domain(bed: Bed) -> None:
    async with bed.running(config=config_with(bed), registry=registry()):
        await bed.create_pods(
            member(bed, f"m{i}", "packed", 2, gpus=4, **{DOMAIN: "per-node"}) for i in range(2)
        )
        pods = await bed.pods_until(lambda ps: len(bound(ps)) == 2)
        assert len({p["spec"]["nodeName"] for p in pods.values()}) == 1
