"""Workloads: every shipped one loads, arrivals are timed and ordered, bad files are explained."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from pydantic import ValidationError

from gpusched.clock import FakeClock
from gpusched.sim import SimCluster
from gpusched.sim.workload import (
    POD_GROUP_LABEL,
    Workload,
    WorkloadError,
    arrivals,
    load_workload,
    pod_groups,
    replay,
    shipped_workloads,
)


@pytest.mark.parametrize("name", shipped_workloads())
def test_shipped_workloads_load(name: str) -> None:
    workload = load_workload(name)
    pods = list(arrivals(workload))
    assert len(pods) == workload.pod_count
    times = [at for at, _ in pods]
    assert times == sorted(times)
    assert len({p["metadata"]["name"] for _, p in pods}) == len(pods)


def test_smoke_pods_carry_requests_durations_and_priorities() -> None:
    pods = [p for _, p in arrivals(load_workload("smoke"))]
    four = [p for p in pods if p["metadata"]["labels"]["gpusched.io/wave"] == "four"]
    limits = four[0]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "4"
    assert four[0]["metadata"]["annotations"]["gpusched.io/priority"] == "0"
    assert four[0]["metadata"]["annotations"]["sim.gpusched.io/duration"] == "30s"
    assert four[0]["spec"]["schedulerName"] == "gpusched"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name: x\nwaves: []\n", "waves"),
        ("name: x\nwaves:\n- {name: a, count: -1}\n", "count"),
        ("name: x\nwaves:\n- {name: a, count: 1, pod: {gpus: 1, duration: soon}}\n", "duration"),
        ("name: x\nwaves: [\n", "not valid YAML"),
        ("name: x\nwaves:\n- {name: a, count: 1, pod: {vram: lots}}\n", "vram"),
        ("name: x\nwaves:\n- {name: a, count: 1, pod: {vram: '20'}}\n", "no unit"),
        ("name: x\nwaves:\n- {name: a, count: 1, pod: {shared: 2}}\n", "need vram"),
        ("name: x\nwaves:\n- {name: a, count: 1, pod: {gpus: 2, vram: 20Gi}}\n", "one kind"),
        ("name: x\nwaves:\n- {name: a, count: 1, pod: {gpus: 1, mig: 1g.10gb}}\n", "one kind"),
        ("name: x\nwaves:\n- {name: a, count: 1, pod: {exclusive: true}}\n", "add vram"),
        ("name: x\nwaves:\n- {name: a, count: 1, pod: {mig: 2g}}\n", "MIG profile"),
        ("name: x\nwaves:\n- {name: a, count: 1, pod: {migFallback: [1g.10gb]}}\n", "needs mig"),
        (
            "name: x\nwaves:\n- {name: a, count: 1, pod: {mig: 1g.10gb, migFallback: [1g.10gb]}}\n",
            "preferred profile",
        ),
        (
            "name: x\nwaves:\n- {name: a, count: 1, pod: {mig: 2g.20gb, "
            "migFallback: [1g.10gb, 1g.10gb]}}\n",
            "twice",
        ),
    ],
)
def test_bad_workloads_name_the_problem(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(text)
    with pytest.raises(WorkloadError, match=message) as exc:
        load_workload(path)
    assert "w.yaml" in str(exc.value)


@pytest.mark.parametrize(
    ("pod", "limits", "annotations"),
    [
        ({}, {"nvidia.com/gpu": "1"}, {}),
        ({"gpus": 0}, {}, {}),
        ({"gpus": 4}, {"nvidia.com/gpu": "4"}, {}),
        ({"vram": "20Gi"}, {"gpusched.io/gpu": "1", "gpusched.io/vram": "20Gi"}, {}),
        (
            {"vram": "20Gi", "shared": 2, "gpus": 0},
            {"gpusched.io/gpu": "2", "gpusched.io/vram": "20Gi"},
            {},
        ),
        (
            {"vram": "40Gi", "exclusive": True},
            {"gpusched.io/gpu": "1", "gpusched.io/vram": "40Gi"},
            {"gpusched.io/exclusive": "true"},
        ),
        ({"mig": "3g.40gb"}, {"nvidia.com/mig-3g.40gb": "1"}, {}),
        (
            {"mig": "2g.20gb", "migFallback": ["1g.10gb", "1g.20gb"]},
            {"nvidia.com/mig-2g.20gb": "1"},
            {"gpusched.io/mig-fallback": "1g.10gb,1g.20gb"},
        ),
    ],
)
def test_pod_shapes_become_the_limits_and_annotations_a_user_writes(
    pod: dict[str, object], limits: dict[str, str], annotations: dict[str, str]
) -> None:
    workload = Workload.model_validate(
        {"name": "x", "waves": [{"name": "a", "count": 1, "pod": pod}]}
    )
    [(_, manifest)] = arrivals(workload)
    got = manifest["spec"]["containers"][0]["resources"]["limits"]
    assert {k: v for k, v in got.items() if k not in ("cpu", "memory")} == limits
    assert manifest["metadata"]["annotations"] == annotations


def test_gpu_mix_uses_every_pod_shape() -> None:
    workload = load_workload("gpu-mix")
    assert {w.pod.kind for w in workload.waves} == {"shared", "exclusive", "mig", "whole"}


def test_unknown_workload_lists_the_shipped_ones() -> None:
    with pytest.raises(WorkloadError, match="smoke"):
        load_workload("nope")


async def test_replay_creates_pods_at_their_arrival_times() -> None:
    clock = FakeClock()
    workload = load_workload("smoke")
    async with SimCluster(None, kubelets=False, clock=clock) as sim:
        task = asyncio.create_task(replay(sim.kube, workload, clock))
        await clock.wait_for_sleepers(1)
        listed = await sim.kube.get("/api/v1/namespaces/default/pods")
        assert len(listed["items"]) == 1  # the first pod arrives at t=0
        while not task.done():
            waiter = asyncio.create_task(clock.wait_for_sleepers(1))
            done, _ = await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
            if waiter in done:
                await clock.advance(0.25)
            else:
                waiter.cancel()
                await asyncio.gather(waiter, return_exceptions=True)
        created = task.result()
        assert len(created) == workload.pod_count
        last_arrival = max(at for at, _ in arrivals(workload))
        assert clock.monotonic() == last_arrival  # fake time: replay slept until the last pod


def test_gangs_of_a_wave() -> None:
    workload = Workload.model_validate(
        {"name": "w", "waves": [{"name": "t", "count": 4, "gang": 2, "pod": {"gpus": 8}}]}
    )
    labels = [p["metadata"]["labels"].get(POD_GROUP_LABEL) for _, p in arrivals(workload)]
    assert labels == ["w-t-g0000", "w-t-g0000", "w-t-g0001", "w-t-g0001"]
    groups = pod_groups(workload)
    assert sorted(groups) == ["w-t-g0000", "w-t-g0001"]
    assert groups["w-t-g0000"]["spec"] == {"minMember": 2}
    assert groups["w-t-g0000"]["apiVersion"] == "scheduling.x-k8s.io/v1alpha1"


def test_a_wave_of_partial_gangs_is_refused() -> None:
    with pytest.raises(ValidationError, match="not a multiple of gang 2"):
        Workload.model_validate(
            {"name": "w", "waves": [{"name": "t", "count": 3, "gang": 2, "pod": {"gpus": 8}}]}
        )
