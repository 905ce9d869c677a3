"""The Coscheduling plugin in a framework of the default profile, without a scheduler: Permit
waits for the quorum and times out on the fake clock, an Unreserve after Permit rejects the
waiting siblings and backs the gang off, the args are validated."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gpusched.cache import Snapshot
from gpusched.clock import FakeClock
from gpusched.framework import (
    ConfigError,
    CycleState,
    PluginConfig,
    Profile,
    SchedulerConfiguration,
    build_frameworks,
    default_config,
    in_tree,
)
from gpusched.framework.runtime import Framework
from gpusched.gangs import kueue
from gpusched.plugins.coscheduling import NAME, Coscheduling


def member(name: str, total: int = 2) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "labels": {kueue.LABEL: "g"},
            "annotations": {kueue.COUNT_ANNOTATION: str(total)},
        },
        "spec": {"schedulerName": "gpusched", "containers": [{"name": "c"}]},
    }


def framework(clock: FakeClock, **args: Any) -> Framework:
    config = default_config()
    if args:
        profile = config.profiles[0].model_copy(
            update={"plugin_config": [PluginConfig(name=NAME, args=args)]}
        )
        config = config.model_copy(update={"profiles": [profile]})
    return build_frameworks(config, in_tree(), clock=clock, node_lister=Snapshot())["gpusched"]


def plugin(fw: Framework) -> Coscheduling:
    found = fw.plugins[NAME]
    assert isinstance(found, Coscheduling)
    return found


async def test_permit_waits_for_the_quorum_and_times_out() -> None:
    clock = FakeClock()
    fw = framework(clock, permitWaitingTimeSeconds=5, podGroupBackoffSeconds=30)
    cos = plugin(fw)
    a, b = member("a"), member("b")
    for p in (a, b):
        cos.on_pod("ADDED", p, None)
    assert fw.run_pre_enqueue(a).is_success
    assert cos.pod_group(a) is not None
    state = CycleState()
    assert fw.run_reserve(state, a, "n1").is_success
    assert fw.run_permit(state, a, "n1").is_wait  # 1 of 2 reserved
    waiting = asyncio.create_task(fw.wait_on_permit(a))
    await clock.wait_for_sleepers(1)
    await clock.advance(5)
    status = await waiting
    assert status.is_rejected
    assert "timeout" in status.message()
    fw.run_unreserve(state, a, "n1")
    # Nothing reserved; the next attempt would plan again from scratch.
    assert not cos.manager.groups["ns/g"].reserved


async def test_an_unreserve_after_permit_rejects_the_waiting_siblings() -> None:
    clock = FakeClock()
    fw = framework(clock, podGroupBackoffSeconds=30)
    cos = plugin(fw)
    pods = [member(n, total=3) for n in "abc"]
    for p in pods:
        cos.on_pod("ADDED", p, None)
    cos.pod_group(pods[0])
    states = [CycleState() for _ in pods]
    for p, s in zip(pods[:2], states, strict=False):
        assert fw.run_reserve(s, p, "n1").is_success
    assert fw.run_permit(states[0], pods[0], "n1").is_wait
    waiting = asyncio.create_task(fw.wait_on_permit(pods[0]))
    await asyncio.sleep(0)
    fw.run_unreserve(states[1], pods[1], "n1")  # b fails after Permit: the plan breaks
    status = await waiting
    assert status.is_rejected
    assert "member b was unreserved" in status.message()
    gate = fw.run_pre_enqueue(pods[0])
    assert not gate.is_success
    assert "backs off for 30s" in gate.message()
    await clock.advance(30)
    assert sorted(cos.manager.backoffs_expired()) == ["uid-a", "uid-b", "uid-c"]
    assert fw.run_pre_enqueue(pods[0]).is_success


def test_pods_in_no_group_pass_every_stage() -> None:
    fw = framework(FakeClock())
    pod = {"metadata": {"name": "x", "namespace": "ns", "uid": "u"}, "spec": {}}
    state = CycleState()
    assert fw.run_pre_enqueue(pod).is_success
    assert fw.pod_group(pod) is None
    assert fw.group_key(pod) is None
    assert fw.run_permit(state, pod, "n").is_success


@pytest.mark.parametrize(
    ("args", "path"),
    [
        ({"permitWaitingTimeSeconds": 0}, "permitWaitingTimeSeconds"),
        ({"podGroupBackoffSeconds": -1}, "podGroupBackoffSeconds"),
        ({"bindBarrierTimeoutSeconds": 0}, "bindBarrierTimeoutSeconds"),
        ({"topologyKey": "rack"}, "topologyKey"),
    ],
)
def test_args_are_validated(args: dict[str, Any], path: str) -> None:
    with pytest.raises(ConfigError, match=path):
        framework(FakeClock(), **args)


def test_the_default_profile_has_it() -> None:
    config = SchedulerConfiguration(profiles=[Profile()])
    assert NAME in framework(FakeClock()).plugins
    assert config.profiles[0].scheduler_name == "gpusched"
