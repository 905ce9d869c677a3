"""The scheduler end to end on the simulated cluster, through the real client over HTTPS.

Waiting is on the API (a watch until a condition holds), never on sleeps; every wait is
bounded so a broken scheduler fails instead of hanging. Double-booking is checked from the
API (the pods' assignment annotations and the reservation Leases), not from the scheduler's
memory, and the simulated kubelets reject any pod a node cannot hold.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from gpusched.annotations import GPU_IDS, RESERVATION_UID
from gpusched.framework import SchedulerConfiguration, default_config
from gpusched.kube.client import Kube
from gpusched.kube.errors import APIServerError, APITooManyRequests
from gpusched.scheduler import Scheduler
from gpusched.sim import FaultRule, SimCluster
from gpusched.sim.fleet import apply_fleet, load_cluster_spec

pytestmark = pytest.mark.simonly

PODS = "/api/v1/namespaces/default/pods"
WAIT = 60.0


def gpu_pod(name: str, gpus: int = 1, **annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "test"}, "annotations": dict(annotations)},
        "spec": {
            "schedulerName": "gpusched",
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                }
            ],
        },
    }


async def pods_until(
    kube: Kube,
    done: Callable[[dict[str, dict[str, Any]]], bool],
    path: str = PODS,
    timeout: float = WAIT,
) -> dict[str, dict[str, Any]]:
    """Watch pods until ``done(pods by name)``; returns that state. Faults the simulation
    injects into every client's requests (the test's too) are retried."""
    pods: dict[str, dict[str, Any]] = {}
    rv = ""

    async def follow() -> dict[str, dict[str, Any]]:
        nonlocal rv
        while not rv:
            try:
                listed = await kube.get(path)
            except (APIServerError, APITooManyRequests):
                continue
            pods.update({p["metadata"]["name"]: p for p in listed["items"]})
            rv = listed["metadata"]["resourceVersion"]
        while not done(pods):
            async for ev in kube.watch(
                path, {"resourceVersion": rv, "allowWatchBookmarks": "true"}
            ):
                obj = ev["object"]
                rv = obj["metadata"]["resourceVersion"]
                if ev["type"] == "BOOKMARK":
                    continue
                if ev["type"] == "DELETED":
                    pods.pop(obj["metadata"]["name"], None)
                else:
                    pods[obj["metadata"]["name"]] = obj
                if done(pods):
                    break
        return pods

    return await asyncio.wait_for(follow(), timeout=timeout)


def bound(pods: dict[str, dict[str, Any]]) -> list[str]:
    return [n for n, p in pods.items() if p["spec"].get("nodeName")]


def assert_no_double_booking(pods: dict[str, dict[str, Any]]) -> None:
    held: dict[str, list[int]] = defaultdict(list)
    for p in pods.values():
        if (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        node = p["spec"].get("nodeName")
        ids = (p["metadata"].get("annotations") or {}).get(GPU_IDS)
        if node and ids:
            held[node].extend(int(i) for i in ids.split(","))
    for node, gpus in held.items():
        assert len(gpus) == len(set(gpus)), f"GPUs double-booked on {node}: {sorted(gpus)}"
    rejected = [
        n for n, p in pods.items() if (p.get("status") or {}).get("reason", "").startswith("OutOf")
    ]
    assert not rejected, f"kubelets rejected over-committed pods: {rejected}"


@contextlib.asynccontextmanager
async def running(sim: SimCluster, name: str = "a", **kw: Any) -> AsyncIterator[Scheduler]:
    scheduler = Scheduler(Kube(sim.api_client()), identity=name, rng=random.Random(1), **kw)
    task = asyncio.create_task(scheduler.run())
    try:
        await asyncio.wait_for(scheduler.ready.wait(), timeout=WAIT)
        yield scheduler
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.fixture
async def sim() -> AsyncIterator[SimCluster]:
    async with SimCluster(load_cluster_spec("dgx-h100", nodes=2)) as sim:
        await sim.kube.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpusched-system"}},
        )
        yield sim


async def test_a_pod_is_bound_with_its_gpus_and_a_scheduled_event(sim: SimCluster) -> None:
    async with running(sim) as scheduler:
        await sim.kube.create(PODS, gpu_pod("one", gpus=2))
        pods = await pods_until(
            sim.kube, lambda ps: (ps["one"].get("status") or {}).get("phase") == "Running"
        )
        metrics = scheduler.metrics.render().decode()
    # Two API writes for the pod: its node's reservation Lease and the Binding.
    assert 'gpusched_api_writes_total{resource="leases",verb="update"} 1.0' in metrics
    assert 'gpusched_api_writes_total{resource="pods/binding",verb="create"} 1.0' in metrics
    assert 'scheduler_schedule_attempts_total{profile="gpusched",result="scheduled"} 1.0' in metrics
    pod = pods["one"]
    annotations = pod["metadata"]["annotations"]
    assert len(annotations[GPU_IDS].split(",")) == 2
    assert annotations[RESERVATION_UID]
    events = await sim.kube.get(
        "/api/v1/namespaces/default/events", {"fieldSelector": "involvedObject.name=one"}
    )
    assert any(e["reason"] == "Scheduled" for e in events["items"])


async def test_more_pods_than_gpus_then_deleted_pods_free_theirs(sim: SimCluster) -> None:
    async with running(sim):
        for i in range(20):
            await sim.kube.create(PODS, gpu_pod(f"p{i:02d}"))
        pods = await pods_until(sim.kube, lambda ps: len(bound(ps)) == 16)
        assert_no_double_booking(pods)
        waiting = sorted(set(pods) - set(bound(pods)))
        assert len(waiting) == 4
        pods = await pods_until(
            sim.kube,
            lambda ps: all(
                any(
                    c.get("type") == "PodScheduled" and c.get("status") == "False"
                    for c in (ps[n].get("status") or {}).get("conditions") or ()
                )
                for n in waiting
            ),
        )
        condition = next(
            c for c in pods[waiting[0]]["status"]["conditions"] if c["type"] == "PodScheduled"
        )
        assert condition["reason"] == "Unschedulable"
        assert condition["message"].startswith("0/2 nodes are available:")
        for name in bound(pods)[:4]:
            await sim.kube.delete(f"{PODS}/{name}")
        pods = await pods_until(sim.kube, lambda ps: len(ps) == 16 and len(bound(ps)) == 16)
        assert set(waiting) <= set(bound(pods))
        assert_no_double_booking(pods)


async def test_a_node_added_while_pods_wait(sim: SimCluster) -> None:
    async with running(sim):
        await sim.kube.create(PODS, gpu_pod("big-a", gpus=8))
        await sim.kube.create(PODS, gpu_pod("big-b", gpus=8))
        await sim.kube.create(PODS, gpu_pod("big-c", gpus=8))
        await pods_until(sim.kube, lambda ps: len(bound(ps)) == 2)
        spec = load_cluster_spec("dgx-h100", nodes=3)
        await apply_fleet(sim.api_client(), spec)
        pods = await pods_until(sim.kube, lambda ps: len(bound(ps)) == 3)
        assert_no_double_booking(pods)


async def test_a_malformed_annotation_is_explained_and_nothing_crashes(sim: SimCluster) -> None:
    async with running(sim) as scheduler:
        await sim.kube.create(PODS, gpu_pod("bad", **{"gpusched.io/priority": "urgent"}))
        await sim.kube.create(PODS, gpu_pod("good"))
        pods = await pods_until(
            sim.kube,
            lambda ps: (
                bool(bound(ps))
                and any(
                    c.get("type") == "PodScheduled" and c.get("status") == "False"
                    for c in (ps["bad"].get("status") or {}).get("conditions") or ()
                )
            ),
        )
        assert bound(pods) == ["good"]
        message = next(
            c for c in pods["bad"]["status"]["conditions"] if c["type"] == "PodScheduled"
        )["message"]
        assert "gpusched.io/priority" in message
        assert "from 0" in message
        events = await sim.kube.get(
            "/api/v1/namespaces/default/events", {"fieldSelector": "involvedObject.name=bad"}
        )
        assert any(e["reason"] == "FailedScheduling" for e in events["items"])
        # Fixing the annotation releases the pod.
        await sim.kube.patch(
            f"{PODS}/bad", {"metadata": {"annotations": {"gpusched.io/priority": "1"}}}
        )
        await pods_until(sim.kube, lambda ps: len(bound(ps)) == 2)
        assert scheduler.ready.is_set()


async def test_two_replicas_racing_never_double_book(sim: SimCluster) -> None:
    """Two replicas, no leader election, the same pods: checked from the API."""
    async with running(sim, "replica-a"), running(sim, "replica-b"):
        for i in range(40):
            await sim.kube.create(PODS, gpu_pod(f"r{i:02d}", gpus=random.Random(i).choice([1, 2])))
        pods = await pods_until(
            sim.kube,
            lambda ps: (
                sum(
                    int(p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
                    for p in ps.values()
                    if p["spec"].get("nodeName")
                )
                >= 14
            ),
        )
    assert_no_double_booking(pods)


async def test_faults_and_cut_watches_still_converge(sim: SimCluster) -> None:
    sim.faults.set(
        [
            FaultRule("create", "pods/binding", 0.2, 500),
            FaultRule("update", "leases", 0.2, 500),
            FaultRule("create", "leases", 0.2, 429),
            FaultRule("list", "", 0.1, 500),
        ],
        watch_events=5,
    )
    async with running(sim):
        for i in range(12):
            await sim.kube.create(PODS, gpu_pod(f"f{i:02d}"))
        pods = await pods_until(sim.kube, lambda ps: len(bound(ps)) == 12)
    assert sim.faults.total() > 0
    assert_no_double_booking(pods)


def short_leases() -> SchedulerConfiguration:
    """Reservations that expire after 2 s, so a leaked one is collected within the test."""
    config = default_config()
    reservations = config.reservations.model_copy(update={"lease_duration_seconds": 2})
    return config.model_copy(update={"reservations": reservations})


def reservation_uids(leases: dict[str, dict[str, Any]]) -> set[str]:
    uids: set[str] = set()
    for lease in leases.values():
        text = (lease["metadata"].get("annotations") or {}).get("gpusched.io/reservations")
        if text:
            uids |= set(json.loads(text)["r"])
    return uids


async def test_a_scheduler_killed_mid_bind_leaks_nothing(sim: SimCluster) -> None:
    """Kill schedulers at arbitrary points while they bind; a fresh one finishes the job, no
    pod is bound without its reservation, and the killed ones' reservations are collected."""
    for i in range(10):
        await sim.kube.create(PODS, gpu_pod(f"k{i:02d}"))
    for round_ in range(3):
        scheduler = Scheduler(Kube(sim.api_client()), short_leases(), identity=f"victim-{round_}")
        task = asyncio.create_task(scheduler.run())
        await asyncio.wait_for(scheduler.ready.wait(), timeout=WAIT)
        for _ in range(random.Random(round_).randrange(20, 200)):
            await asyncio.sleep(0)  # a random point in its work, counted in loop turns
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    leases_path = "/apis/coordination.k8s.io/v1/namespaces/gpusched-system/leases"
    async with running(
        sim, "survivor", config=short_leases(), reservation_gc_period=0.2, reservation_grace=0
    ):
        pods = await pods_until(sim.kube, lambda ps: len(bound(ps)) == 10)
        assert_no_double_booking(pods)
        final = {p["metadata"]["annotations"][RESERVATION_UID] for p in pods.values()}
        # Every bound pod's reservation is recorded, and nothing else once the rest expired.
        leases = await pods_until(
            sim.kube, lambda ls: reservation_uids(ls) == final, path=leases_path
        )
        assert reservation_uids(leases) == final
