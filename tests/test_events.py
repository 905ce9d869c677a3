"""EventRecorder: Events and the PodScheduled condition, and the writes it reports."""

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
from gpusched.sim import SimCluster


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
    recorder.scheduled(pod, "node-1")
    async with running(recorder):
        await writes.wait()
    assert recorder.written == 3
    assert sorted(writes) == [("events", "create"), ("events", "create"), ("pods/status", "patch")]
    stored = await kube.get("/api/v1/namespaces/default/pods/p")
    condition = next(c for c in stored["status"]["conditions"] if c["type"] == "PodScheduled")
    assert (condition["status"], condition["message"]) == ("False", "0/3 nodes are available")
    events = await kube.get("/api/v1/namespaces/default/events")
    assert sorted(e["reason"] for e in events["items"]) == ["FailedScheduling", "Scheduled"]


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
