"""EventRecorder: Events and the PodScheduled condition, the writes it reports, its budget,
aggregation, bound and retries (with a fake clock: the rate limit and backoff wait on it)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gpusched.clock import FakeClock
from gpusched.events import EventRecorder
from gpusched.kube.client import Kube
from gpusched.kube.errors import APINotFound
from gpusched.metrics import Metrics
from gpusched.sim import SimCluster
from gpusched.sim.faults import LOST, FaultRule


@pytest.fixture
async def kube() -> AsyncIterator[Kube]:
    async with SimCluster(None, kubelets=False) as sim:
        yield sim.kube


async def make_pod(kube: Kube, name: str) -> dict[str, Any]:
    pod: dict[str, Any] = await kube.create(
        "/api/v1/namespaces/default/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"schedulerName": "gpusched", "containers": [{"name": "c", "image": "i"}]},
        },
    )
    return pod


@contextlib.asynccontextmanager
async def running(recorder: EventRecorder) -> AsyncIterator[None]:
    task = asyncio.create_task(recorder.run())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class Writes(list[tuple[str, str]]):
    """The ``on_write`` callback: the writes reported, and an event once ``expected`` came."""

    def __init__(self, expected: int = 0) -> None:
        super().__init__()
        self.expected = expected
        self.done = asyncio.Event()

    def __call__(self, resource: str, verb: str) -> None:
        self.append((resource, verb))
        if len(self) >= self.expected:
            self.done.set()

    async def wait(self) -> None:
        await asyncio.wait_for(self.done.wait(), timeout=5)


async def test_each_write_that_succeeds_is_reported(kube: Kube) -> None:
    writes = Writes(expected=3)
    recorder = EventRecorder(kube, FakeClock(), on_write=writes)
    pod = await make_pod(kube, "p")
    recorder.failed_scheduling(pod, "0/3 nodes are available")
    recorder.scheduled(await make_pod(kube, "q"), "node-1")
    async with running(recorder):
        await writes.wait()
    assert recorder.written == 3
    assert sorted(writes) == [("events", "create"), ("events", "create"), ("pods/status", "patch")]
    stored = await kube.get("/api/v1/namespaces/default/pods/p")
    condition = next(c for c in stored["status"]["conditions"] if c["type"] == "PodScheduled")
    assert (condition["status"], condition["message"]) == ("False", "0/3 nodes are available")
    events = await kube.get("/api/v1/namespaces/default/events")
    assert sorted(e["reason"] for e in events["items"]) == ["FailedScheduling", "Scheduled"]


async def test_a_condition_still_waiting_when_its_pod_is_scheduled_is_not_written(
    kube: Kube,
) -> None:
    """Events and conditions trail the scheduler under their budget: a PodScheduled=False
    still waiting when the pod is bound (the Binding sets it True) must not be written after,
    or a running pod says it is unschedulable."""
    writes = Writes(expected=2)
    recorder = EventRecorder(kube, FakeClock(), on_write=writes)
    pod = await make_pod(kube, "p")
    recorder.failed_scheduling(pod, "0/3 nodes are available")
    recorder.scheduled(pod, "node-1")
    async with running(recorder):
        await writes.wait()
    await recorder.drain()
    assert sorted(writes) == [("events", "create"), ("events", "create")]
    stored = await kube.get("/api/v1/namespaces/default/pods/p")
    assert not [
        c for c in (stored.get("status") or {}).get("conditions") or [] if c["status"] == "False"
    ]


async def test_a_patch_for_a_deleted_pod_is_not_a_write(kube: Kube) -> None:
    writes = Writes(expected=2)
    recorder = EventRecorder(kube, FakeClock(), on_write=writes)
    pod = await make_pod(kube, "gone")
    other = await make_pod(kube, "other")
    await kube.delete("/api/v1/namespaces/default/pods/gone", query={"gracePeriodSeconds": 0})
    recorder.failed_scheduling(pod, "no nodes")  # an Event (written) and a patch (404)
    recorder.scheduled(other, "node-1")  # written after the patch: one writer, in order
    async with running(recorder):
        await writes.wait()
    assert writes == [("events", "create"), ("events", "create")]
    assert recorder.written == 2
    with pytest.raises(APINotFound):
        await kube.get("/api/v1/namespaces/default/pods/gone")


async def test_drain_reports_the_events_it_writes(kube: Kube) -> None:
    writes = Writes()
    recorder = EventRecorder(kube, FakeClock(), on_write=writes)
    pod = await make_pod(kube, "p")
    recorder.scheduled(pod, "node-1")
    await recorder.drain()
    assert writes == [("events", "create")]


async def test_without_a_callback_writes_are_only_counted(kube: Kube) -> None:
    recorder = EventRecorder(kube, FakeClock())
    pod = await make_pod(kube, "p")
    recorder.scheduled(pod, "node-1")
    await recorder.drain()
    assert recorder.written == 1


# -- the budget, aggregation, bounds and errors ----------------------------------------------


def pod_stub(i: int, namespace: str = "default") -> dict[str, Any]:
    """A pod as the scheduler holds it (Events need not find their pod on the server)."""
    return {"metadata": {"name": f"p{i}", "namespace": namespace, "uid": f"uid-{i}"}}


async def settle(clock: FakeClock, done: Any, step: float = 0.5) -> None:
    """Advance ``clock`` in ``step``s while the writers wait on it, until ``done()``."""
    async with asyncio.timeout(60):
        while not done():
            if clock.sleepers:
                await clock.advance(step)
            else:
                await asyncio.sleep(0)  # a write is on its way to the simulated server


async def events_in(kube: Kube, namespace: str = "default") -> list[dict[str, Any]]:
    listed = await kube.get(f"/api/v1/namespaces/{namespace}/events")
    items: list[dict[str, Any]] = listed["items"]
    return items


async def test_a_burst_waits_for_tokens_and_every_event_is_written(kube: Kube) -> None:
    clock = FakeClock()
    writes = Writes()
    recorder = EventRecorder(kube, clock, qps=50, burst=100, concurrency=4, on_write=writes)
    for i in range(2000):
        recorder.scheduled(pod_stub(i), f"node-{i % 7}")
    assert recorder.pending == 2000
    async with running(recorder):
        await clock.wait_for_sleepers(4)  # every writer waits for a token: the burst is spent
        assert len(writes) == 100
        await clock.advance(1.0)
        await clock.wait_for_sleepers(4)
        assert len(writes) == 150  # 50 a second
        await settle(clock, lambda: recorder.pending == 0)
    assert 37 <= clock.monotonic() <= 40  # (2,000 - 100) / 50 s of fake time
    events = await events_in(kube)
    assert len(events) == 2000
    assert {e["involvedObject"]["uid"] for e in events} == {f"uid-{i}" for i in range(2000)}
    assert {(e["reason"], e["type"], e["count"]) for e in events} == {("Scheduled", "Normal", 1)}
    assert recorder.dropped == 0


async def test_repeats_are_one_event_whose_count_is_patched(kube: Kube) -> None:
    clock = FakeClock()
    writes = Writes()
    metrics = Metrics()
    recorder = EventRecorder(kube, clock, on_write=writes, metrics=metrics)
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "uid": "node-uid"}}
    for _ in range(3):  # before the first write: created with count 3
        recorder.eventf(node, "Warning", "GPUFault", "Checking", "GPU 3 fell off the bus")
    async with running(recorder):
        await settle(clock, lambda: len(writes) == 1)
        await clock.advance(60)
        recorder.eventf(node, "Warning", "GPUFault", "Checking", "GPU 3 fell off the bus")
        await settle(clock, lambda: len(writes) == 2)
        recorder.eventf(node, "Warning", "GPUFault", "Checking", "GPU 5 fell off the bus")
        await settle(clock, lambda: len(writes) == 3)
    assert writes == [("events", "create"), ("events", "patch"), ("events", "create")]
    events = sorted(await events_in(kube), key=lambda e: e["message"])
    assert [(e["message"], e["count"]) for e in events] == [
        ("GPU 3 fell off the bus", 4),
        ("GPU 5 fell off the bus", 1),
    ]
    assert events[0]["lastTimestamp"] == "2026-01-01T00:01:00Z"
    assert events[0]["firstTimestamp"] == "2026-01-01T00:00:00Z"
    assert recorder.aggregated == 3
    assert metric(metrics, "gpusched_events_aggregated_total") == 3
    assert metric(metrics, "gpusched_events_written_total", verb="patch") == 1


async def test_eventf_about_a_cluster_scoped_object_goes_to_default(kube: Kube) -> None:
    recorder = EventRecorder(kube, FakeClock())
    inventory = {
        "apiVersion": "gpusched.io/v1alpha1",
        "kind": "GPUNodeInventory",
        "metadata": {"name": "n1", "uid": "inv-uid", "resourceVersion": "7"},
    }
    recorder.eventf(inventory, "Normal", "Discovered", "Inventory", "8 GPUs")
    await recorder.drain()
    (event,) = await events_in(kube)
    assert event["involvedObject"] == {
        "apiVersion": "gpusched.io/v1alpha1",
        "kind": "GPUNodeInventory",
        "name": "n1",
        "uid": "inv-uid",
        "resourceVersion": "7",
    }
    assert (event["type"], event["reason"], event["action"]) == (
        "Normal",
        "Discovered",
        "Inventory",
    )
    assert event["reportingComponent"] == "gpusched"


async def test_a_patch_that_finds_no_event_creates_it_anew(kube: Kube) -> None:
    clock = FakeClock()
    writes = Writes()
    recorder = EventRecorder(kube, clock, on_write=writes)
    pod = pod_stub(1)
    recorder.failed_scheduling(pod, "0/3 nodes are available")
    async with running(recorder):
        await settle(clock, lambda: ("events", "create") in writes)
        (event,) = await events_in(kube)
        await kube.delete(f"/api/v1/namespaces/default/events/{event['metadata']['name']}")
        await clock.advance(301)  # past the spam filter, within the aggregation window
        recorder.failed_scheduling(pod, "0/3 nodes are available")
        await settle(clock, lambda: writes.count(("events", "create")) == 2)
    (event,) = await events_in(kube)
    assert event["count"] == 2


async def test_past_the_bound_events_are_dropped_and_counted(kube: Kube) -> None:
    metrics = Metrics()
    recorder = EventRecorder(kube, FakeClock(), max_pending=10, metrics=metrics)
    for i in range(15):
        recorder.scheduled(pod_stub(i), "n")
    recorder.scheduled(pod_stub(3), "n")  # a repeat of a waiting one: its count, no room
    assert (recorder.pending, recorder.dropped) == (10, 5)
    assert metric(metrics, "gpusched_events_pending") == 10
    assert metric(metrics, "gpusched_events_dropped_total", reason="queue_full") == 5
    await recorder.drain()
    events = await events_in(kube)
    assert sorted(e["involvedObject"]["name"] for e in events) == sorted(f"p{i}" for i in range(10))
    assert next(e for e in events if e["involvedObject"]["name"] == "p3")["count"] == 2
    assert metric(metrics, "gpusched_events_pending") == 0


@pytest.fixture
async def sim() -> AsyncIterator[SimCluster]:
    async with SimCluster(None, kubelets=False) as sim:
        yield sim


@pytest.mark.parametrize("code", [500, 429, 409, LOST])
async def test_failed_writes_are_retried_within_the_budget(sim: SimCluster, code: int) -> None:
    clock = FakeClock()
    recorder = EventRecorder(sim.kube, clock, qps=20, burst=20)
    sim.faults.set([FaultRule("create", "events", 0.3, code)])
    for i in range(200):
        recorder.scheduled(pod_stub(i), "n")
    async with running(recorder):
        await settle(clock, lambda: recorder.pending == 0)
    assert sim.faults.total() > 20
    sim.faults.clear()
    events = await events_in(sim.kube)
    assert sorted(e["involvedObject"]["name"] for e in events) == sorted(
        f"p{i}" for i in range(200)
    )  # each once: a lost answer is read back, not created again
    assert recorder.dropped == 0


async def test_an_event_is_not_retried_forever(sim: SimCluster) -> None:
    clock = FakeClock()
    metrics = Metrics()
    recorder = EventRecorder(sim.kube, clock, max_tries=5, metrics=metrics)
    sim.faults.set([FaultRule("create", "events", 1.0, 500)])
    recorder.scheduled(pod_stub(1), "n")
    async with running(recorder):
        await settle(clock, lambda: recorder.pending == 0)
    assert sim.faults.injected == {("create", 500): 5}
    assert metric(metrics, "gpusched_events_dropped_total", reason="retries_exhausted") == 1
    assert clock.monotonic() >= (1 + 2 + 4 + 8) * 0.75  # backed off between tries


async def test_a_count_that_cannot_be_patched_is_given_up_once(sim: SimCluster) -> None:
    clock = FakeClock()
    writes = Writes()
    recorder = EventRecorder(sim.kube, clock, max_tries=3, on_write=writes)
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "uid": "u1"}}
    recorder.eventf(node, "Normal", "Seen", "Watching", "seen")
    async with running(recorder):
        await settle(clock, lambda: len(writes) == 1)
        sim.faults.set([FaultRule("patch", "events", 1.0, 500)])
        recorder.eventf(node, "Normal", "Seen", "Watching", "seen")
        await settle(clock, lambda: recorder.pending == 0)
    assert sim.faults.injected == {("patch", 500): 3}
    assert (writes, recorder.dropped) == ([("events", "create")], 1)


async def test_a_rejected_event_is_not_retried(sim: SimCluster) -> None:
    metrics = Metrics()
    recorder = EventRecorder(sim.kube, FakeClock(), metrics=metrics)
    recorder.scheduled(pod_stub(1, namespace="no-such-namespace"), "n")
    await recorder.drain()
    assert metric(metrics, "gpusched_events_dropped_total", reason="rejected") == 1


async def test_cancelling_the_writers_flushes_what_waits(kube: Kube) -> None:
    clock = FakeClock()
    recorder = EventRecorder(kube, clock, qps=1, burst=1)
    for i in range(30):
        recorder.scheduled(pod_stub(i), "n")
    async with running(recorder):  # cancelled on exit: drains without the rate limit
        await clock.wait_for_sleepers(4)
    assert recorder.pending == 0
    assert len(await events_in(kube)) == 30


def metric(metrics: Metrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value
