"""gpusched.kube.controller's base: workers wait for the informers, a key is synced by one
worker at a time while others run in parallel, API errors are retried rate-limited (a 409 at
once where the controller asks for it) and forgotten after a success, a bug ends ``run()``,
cancelling leaves no task behind and a second ``run()`` takes over the keys left undone; and,
on the simulated cluster, informers whose events enqueue keys."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from gpusched.clock import FakeClock
from gpusched.kube.client import Kube, resource_path
from gpusched.kube.controller import Controller
from gpusched.kube.errors import APIConflict, APIError, APIServerError
from gpusched.kube.workqueue import ItemExponentialRateLimiter, WorkqueueMetrics
from gpusched.sim import SimCluster

WAIT = 20.0


def server_error() -> APIError:
    return APIServerError(500, {"reason": "InternalError", "message": "etcd is away"})


def conflict() -> APIError:
    return APIConflict(409, {"reason": "Conflict", "message": "the object has been modified"})


class Recorder(Controller):
    """Records each sync; ``failures[key]`` are raised by its next syncs, one each; while
    ``hold`` is clear a sync waits for it."""

    def __init__(self, clock: FakeClock, *, workers: int = 1, **kwargs: Any) -> None:
        super().__init__(
            "test",
            clock=clock,
            workers=workers,
            rate_limiter=ItemExponentialRateLimiter(1.0, 60.0),
            **kwargs,
        )
        self.syncs: list[str] = []
        self.results: list[tuple[str, str]] = []
        self.failures: dict[str, list[Exception]] = {}
        self.hold = asyncio.Event()
        self.hold.set()
        self.busy: dict[str, int] = {}
        self.most_busy = 0

    async def sync(self, key: str) -> None:
        self.syncs.append(key)
        self.busy[key] = self.busy.get(key, 0) + 1
        assert self.busy[key] == 1, f"{key} synced by two workers at once"
        self.most_busy = max(self.most_busy, sum(self.busy.values()))
        try:
            await self.hold.wait()
            if self.failures.get(key):
                raise self.failures[key].pop(0)
        finally:
            self.busy[key] -= 1

    def observe(self, key: str, result: str, seconds: float) -> None:
        self.results.append((key, result))


class Patient(Recorder):
    conflicts_at_once = False


async def until(check: Callable[[], bool]) -> None:
    """Let the controller's tasks run until ``check()`` holds (loop turns, not time)."""
    for _ in range(1000):
        if check():
            return
        await asyncio.sleep(0)
    assert check()


async def settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime(2026, 11, 28, tzinfo=UTC))


async def start(controller: Controller) -> asyncio.Task[None]:
    task = asyncio.create_task(controller.run(), name="test-controller")
    await until(controller.synced.is_set)
    return task


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


# ------------------------------------------------------------------ retries

RETRIES = {
    "a success is forgotten": (Recorder, [], [], ["success"]),
    "API errors: 1 s, then 2 s": (
        Recorder,
        [server_error(), server_error()],
        [(0.9, 1), (0.1, 2), (1.9, 2), (0.1, 3)],
        ["error", "error", "success"],
    ),
    "a conflict: again at once": (Recorder, [conflict()], [(0, 2)], ["conflict", "success"]),
    "a conflict, for a controller that waits: 1 s": (
        Patient,
        [conflict()],
        [(0.9, 1), (0.1, 2)],
        ["error", "success"],
    ),
}


@pytest.mark.parametrize(
    ("kind", "failures", "steps", "results"), RETRIES.values(), ids=RETRIES.keys()
)
async def test_retries(
    clock: FakeClock,
    kind: type[Recorder],
    failures: list[Exception],
    steps: list[tuple[float, int]],
    results: list[str],
) -> None:
    """``steps``: advance the clock by so many seconds, then the key has had so many syncs."""
    controller = kind(clock)
    controller.failures["ns/a"] = list(failures)
    task = await start(controller)
    try:
        controller.queue.add("ns/a")
        await until(lambda: len(controller.syncs) >= 1)
        for seconds, syncs in steps:
            await until(lambda: len(controller.results) == len(controller.syncs))
            await settle()  # the retry timer sleeps on the clock
            await clock.advance(seconds)
            await until(lambda: len(controller.syncs) >= syncs)  # noqa: B023
            assert len(controller.syncs) == syncs
        await until(lambda: len(controller.results) == len(results))
        assert [r for _, r in controller.results] == results
        assert controller.queue.num_requeues("ns/a") == 0  # forgotten after the success
    finally:
        await stop(task)


async def test_failures_in_a_row_grow_the_delay_per_key(clock: FakeClock) -> None:
    controller = Recorder(clock)
    controller.failures["ns/a"] = [server_error() for _ in range(4)]
    task = await start(controller)
    try:
        controller.queue.add("ns/a")
        controller.queue.add("ns/b")
        await until(lambda: controller.results[-1:] == [("ns/b", "success")])
        assert controller.queue.num_requeues("ns/a") == 1
        for n, delay in ((2, 1.0), (3, 2.0), (4, 4.0)):
            await until(lambda: clock.sleepers == 1)
            await clock.advance(delay)
            await until(lambda: controller.queue.num_requeues("ns/a") == n)  # noqa: B023
        assert controller.queue.num_requeues("ns/b") == 0
    finally:
        await stop(task)


# ------------------------------------------------------------------ workers


async def test_workers_sync_keys_in_parallel_but_a_key_once_at_a_time(clock: FakeClock) -> None:
    controller = Recorder(clock, workers=3)
    controller.hold.clear()
    task = await start(controller)
    try:
        for key in ("a", "b", "a", "c", "a", "d"):
            controller.queue.add(key)
        await until(lambda: len(controller.syncs) == 3)
        assert controller.most_busy == 3
        controller.queue.add("a")  # while "a" is synced: once more, after
        controller.hold.set()
        await until(lambda: len(controller.results) == 5)
        assert sorted(controller.syncs) == ["a", "a", "b", "c", "d"]
        assert len(controller.queue) == 0
    finally:
        await stop(task)


async def test_a_bug_ends_run(clock: FakeClock) -> None:
    controller = Recorder(clock)
    controller.failures["a"] = [ValueError("a bug")]
    task = await start(controller)
    controller.queue.add("a")
    with pytest.raises(ValueError, match="a bug"):
        await task
    assert controller.results == [("a", "error")]
    assert controller.queue.shutting_down


async def test_cancelling_stops_a_sync_under_way_and_a_new_run_takes_over(
    clock: FakeClock,
) -> None:
    controller = Recorder(clock)
    controller.hold.clear()
    task = await start(controller)
    controller.queue.add("busy")
    controller.queue.add("queued")
    controller.queue.add_after("later", 10)
    await until(lambda: controller.syncs == ["busy"])
    await stop(task)  # the no_task_leaks fixture checks that nothing is left running
    assert controller.busy == {"busy": 0}
    controller.hold.set()
    task = await start(controller)
    try:
        await until(lambda: sorted(controller.syncs) == ["busy", "busy", "queued"])
        await until(lambda: clock.sleepers == 1)
        await clock.advance(10)
        await until(lambda: controller.syncs[-1] == "later")
    finally:
        await stop(task)


async def test_the_queue_metrics_carry_the_controller_name(clock: FakeClock) -> None:
    registry = CollectorRegistry()
    controller = Recorder(clock, metrics=WorkqueueMetrics(registry))
    task = await start(controller)
    try:
        controller.queue.add("a")
        await until(lambda: len(controller.results) == 1)
        assert registry.get_sample_value("workqueue_adds_total", {"name": "test"}) == 1
        assert registry.get_sample_value("workqueue_work_duration_seconds_count", {"name": "test"})
    finally:
        await stop(task)


# ------------------------------------------------------------------ informers

CONFIGMAPS = resource_path("", "v1", "configmaps", "default")


class ConfigMaps(Controller):
    """Syncs ConfigMaps; records the data each sync saw in the informer."""

    def __init__(self, kube: Kube, clock: FakeClock) -> None:
        super().__init__("configmaps", clock=clock)
        self.configmaps = self.informer(kube, CONFIGMAPS, self.enqueue, name="configmaps")
        self.seen: dict[str, list[str]] = {}
        self.synced_one = asyncio.Event()

    async def sync(self, key: str) -> None:
        obj = self.configmaps.items.get(key)
        self.seen.setdefault(key, []).append((obj or {}).get("data", {}).get("v", "gone"))
        self.synced_one.set()

    def last(self, key: str) -> str:
        return self.seen.get(key, [""])[-1]


@pytest.fixture
async def sim(clock: FakeClock) -> AsyncIterator[SimCluster]:
    async with SimCluster(clock=clock, kubelets=False, resource_claims=False, jobs=False) as s:
        yield s


def configmap(name: str, value: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name},
        "data": {"v": value},
    }


async def test_informers_enqueue_keys_and_gate_the_workers(
    sim: SimCluster, clock: FakeClock
) -> None:
    kube = Kube(sim.api_client())
    for name in ("one", "two"):
        await kube.create(CONFIGMAPS, configmap(name, "1"))
    controller = ConfigMaps(kube, clock)
    task = asyncio.create_task(controller.run())
    try:
        async with asyncio.timeout(WAIT):
            await controller.synced.wait()
            assert controller.configmaps.synced.is_set()
            for value in ("2", "3", "4"):
                await kube.patch(f"{CONFIGMAPS}/one", {"data": {"v": value}})
            await kube.delete(f"{CONFIGMAPS}/two")
            while controller.last("default/one") != "4" or controller.last("default/two") != "gone":
                await controller.synced_one.wait()
                controller.synced_one.clear()
        assert controller.seen["default/one"][0] == "1"  # listed before the workers started
        assert len(controller.seen["default/one"]) <= 4  # at most one sync per event
    finally:
        await stop(task)
        await kube.close()
