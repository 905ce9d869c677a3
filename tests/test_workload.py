"""Workloads: every shipped one loads, arrivals are timed and ordered, bad files are explained."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gpusched.clock import FakeClock
from gpusched.sim import SimCluster
from gpusched.sim.workload import (
    WorkloadError,
    arrivals,
    load_workload,
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
    ],
)
def test_bad_workloads_name_the_problem(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(text)
    with pytest.raises(WorkloadError, match=message) as exc:
        load_workload(path)
    assert "w.yaml" in str(exc.value)


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
