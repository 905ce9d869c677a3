"""gpusched.kube.workqueue against client-go's workqueue semantics: deduplication, the
processing and dirty sets (an item is never handed out twice at once and one added while it
is processed is handed out again after), ``add_after`` ordering on a FakeClock, the rate
limiters' growth and ``forget``, shutting down, the ``workqueue_*`` metrics, and a random
stress run that checks every invariant after each step."""

from __future__ import annotations

import asyncio
import random

import pytest
from prometheus_client import CollectorRegistry

from gpusched.clock import FakeClock
from gpusched.kube.workqueue import (
    BucketRateLimiter,
    ItemExponentialRateLimiter,
    MaxOfRateLimiter,
    WorkQueue,
    WorkqueueMetrics,
    default_controller_rate_limiter,
)


async def settle() -> None:
    """Let tasks just made (the delay timer) start sleeping on the clock."""
    for _ in range(3):
        await asyncio.sleep(0)


# ------------------------------------------------------------------ dedup, processing, dirty

# Steps: "add x", "get x" (the next item handed out must be x), "done x", "len n".
SCRIPTS = {
    "FIFO": ["add a", "add b", "add c", "get a", "get b", "get c", "len 0"],
    "an item waiting is added once": ["add a", "add b", "add a", "len 2", "get a", "get b"],
    "added while processing: not handed out twice at once": [
        "add a",
        "get a",
        "add a",
        "len 0",
        "done a",
        "len 1",
        "get a",
    ],
    "added twice while processing: processed once after": [
        "add a",
        "get a",
        "add a",
        "add a",
        "done a",
        "len 1",
        "get a",
        "done a",
        "len 0",
    ],
    "done without an add: gone": ["add a", "get a", "done a", "len 0"],
    "others go on while one is processed": [
        "add a",
        "add b",
        "get a",
        "add a",
        "get b",
        "done b",
        "len 0",
        "done a",
        "get a",
    ],
}


@pytest.mark.parametrize("script", SCRIPTS.values(), ids=SCRIPTS.keys())
async def test_scripts(script: list[str]) -> None:
    q: WorkQueue[str] = WorkQueue("t", clock=FakeClock())
    for step in script:
        op, arg = step.split()
        if op == "add":
            q.add(arg)
        elif op == "get":
            assert len(q), f"{step}: nothing queued"
            assert await q.get() == arg, step
        elif op == "done":
            q.done(arg)
        else:
            assert len(q) == int(arg), step
        q._check()


async def test_workers_never_process_one_item_at_once() -> None:
    """Three workers, items added again while processed: never two workers on one item, and
    every add is followed by a processing of that item that started after it."""
    q: WorkQueue[int] = WorkQueue("t", clock=FakeClock())
    rng = random.Random(7)
    busy: set[int] = set()
    last_add: dict[int, int] = {}
    last_start: dict[int, int] = {}
    step = 0

    async def worker() -> None:
        nonlocal step
        while (item := await q.get()) is not None:
            assert item not in busy, f"{item} processed by two workers"
            busy.add(item)
            step += 1
            last_start[item] = step
            for _ in range(rng.randrange(4)):
                await asyncio.sleep(0)
            busy.discard(item)
            q.done(item)

    workers = [asyncio.create_task(worker()) for _ in range(3)]
    for _ in range(300):
        item = rng.randrange(5)
        step += 1
        last_add[item] = step
        q.add(item)
        q._check()
        await asyncio.sleep(0)
    await q.shut_down_with_drain()
    await asyncio.gather(*workers)
    assert all(last_start[i] > last_add[i] for i in last_add)


async def test_a_cancelled_getter_passes_its_item_on() -> None:
    q: WorkQueue[str] = WorkQueue("t", clock=FakeClock())
    first = asyncio.create_task(q.get())
    second = asyncio.create_task(q.get())
    await settle()
    q.add("a")  # wakes the first getter...
    first.cancel()  # ...which is cancelled before it runs
    assert await second == "a"
    with pytest.raises(asyncio.CancelledError):
        await first


# ------------------------------------------------------------------ add_after

DELAYS = {
    "ordered by due time": ([("a", 5.0), ("b", 1.0), ("c", 3.0)], ["b", "c", "a"]),
    "same time: in the order added": ([("a", 2.0), ("b", 2.0), ("c", 1.0)], ["c", "a", "b"]),
    "waiting again: the earlier time wins": ([("a", 10.0), ("b", 4.0), ("a", 2.0)], ["a", "b"]),
    "a later time does not postpone": ([("a", 2.0), ("b", 4.0), ("a", 10.0)], ["a", "b"]),
    "no delay: at once": ([("a", 3.0), ("b", 0.0)], ["b", "a"]),
}


@pytest.mark.parametrize(("adds", "order"), DELAYS.values(), ids=DELAYS.keys())
async def test_add_after_order(adds: list[tuple[str, float]], order: list[str]) -> None:
    clock = FakeClock()
    q: WorkQueue[str] = WorkQueue("t", clock=clock)
    for item, delay in adds:
        q.add_after(item, delay)
        q._check()
    await settle()
    seen: list[str] = []
    for _ in range(12):
        while len(q):
            got = await q.get()
            assert got is not None
            seen.append(got)
            q.done(got)
        await clock.advance(1.0)
        q._check()
    assert seen == order
    q.shut_down()
    await q.closed()


async def test_add_after_is_due_on_time_not_before() -> None:
    clock = FakeClock()
    q: WorkQueue[str] = WorkQueue("t", clock=clock)
    q.add_after("a", 2.0)
    await settle()
    await clock.advance(1.9)
    assert len(q) == 0
    await clock.advance(0.1)
    assert len(q) == 1
    q._check()


async def test_an_item_due_while_waiting_in_the_queue_is_queued_once() -> None:
    clock = FakeClock()
    q: WorkQueue[str] = WorkQueue("t", clock=clock)
    q.add_after("a", 1.0)
    q.add("a")
    await settle()
    await clock.advance(1.0)
    assert len(q) == 1
    q._check()


# ------------------------------------------------------------------ rate limiters

EXPONENTIAL = {
    "client-go's per-item default": (0.005, 1000.0, 20, [0.005 * 2**i for i in range(18)]),
    "doubling to the cap": (1.0, 60.0, 8, [1, 2, 4, 8, 16, 32, 60, 60]),
    "fixed": (5.0, 5.0, 3, [5, 5, 5]),
}


@pytest.mark.parametrize(("base", "cap", "n", "want"), EXPONENTIAL.values(), ids=EXPONENTIAL)
def test_exponential_growth_and_forget(base: float, cap: float, n: int, want: list[float]) -> None:
    limiter = ItemExponentialRateLimiter(base, cap)
    got = [limiter.when("a") for _ in range(n)]
    assert got[: len(want)] == pytest.approx(want)
    assert max(got) <= cap
    assert limiter.num_requeues("a") == n
    assert limiter.when("b") == base  # per item
    limiter.forget("a")
    assert limiter.num_requeues("a") == 0
    assert limiter.when("a") == base


def test_exponential_with_jitter_stays_within_the_factor() -> None:
    limiter = ItemExponentialRateLimiter(1.0, 100.0, jitter=0.5, rng=random.Random(3))
    for i in range(10):
        delay = limiter.when("a")
        base = min(2.0**i, 100.0)
        assert base <= delay <= base * 1.5


async def test_bucket_spends_the_burst_then_waits_for_tokens() -> None:
    clock = FakeClock()
    bucket = BucketRateLimiter(qps=2.0, burst=3, clock=clock)
    assert [bucket.when(i) for i in range(5)] == [0, 0, 0, 0.5, 1.0]
    await clock.advance(10)  # refilled, never over the burst
    assert [bucket.when(i) for i in range(4)] == [0, 0, 0, 0.5]


def test_max_of_and_the_default_controller_limiter() -> None:
    clock = FakeClock()
    slow = ItemExponentialRateLimiter(1.0, 8.0)
    limiter = MaxOfRateLimiter(ItemExponentialRateLimiter(0.5, 100.0), slow)
    assert [limiter.when("a") for _ in range(5)] == [1, 2, 4, 8, 8]
    assert limiter.num_requeues("a") == 5
    limiter.forget("a")
    assert limiter.num_requeues("a") == slow.num_requeues("a") == 0
    default = default_controller_rate_limiter(clock)
    assert default.when("a") == 0.005
    # 200 more items failing at once: the burst of 100 (one spent on "a"), then 10 a second.
    delays = [default.when(i) for i in range(200)]
    assert delays[98] == 0.005
    assert delays[99] == pytest.approx(0.1)
    assert delays[150] == pytest.approx(5.2)


async def test_add_rate_limited_then_forget() -> None:
    clock = FakeClock()
    q: WorkQueue[str] = WorkQueue(
        "t", clock=clock, rate_limiter=ItemExponentialRateLimiter(1.0, 60.0)
    )
    assert [q.add_rate_limited("a") for _ in range(3)] == [1.0, 2.0, 4.0]
    assert q.num_requeues("a") == 3
    await settle()
    await clock.advance(1.0)  # the earliest of the three times
    assert len(q) == 1
    q.forget("a")
    assert q.num_requeues("a") == 0
    assert q.add_rate_limited("a") == 1.0
    q.shut_down()
    await q.closed()


# ------------------------------------------------------------------ shutting down


async def test_shut_down_hands_out_what_is_queued_then_none() -> None:
    clock = FakeClock()
    q: WorkQueue[str] = WorkQueue("t", clock=clock)
    q.add("a")
    q.add_after("b", 1.0)
    await settle()
    q.shut_down()
    q.add("c")
    q.add_after("d", 0)
    assert await q.get() == "a"
    assert await q.get() is None
    await q.closed()
    await clock.advance(5)
    assert len(q) == 0
    undone, waiting = q.pending()
    assert undone == {"a"}
    assert waiting == {"b": -4.0}  # due 4 s ago: a queue taking over adds it at once


async def test_shut_down_wakes_every_waiting_getter() -> None:
    q: WorkQueue[str] = WorkQueue("t", clock=FakeClock())
    getters = [asyncio.create_task(q.get()) for _ in range(3)]
    await settle()
    q.shut_down()
    assert await asyncio.gather(*getters) == [None, None, None]


async def test_shut_down_with_drain_waits_for_the_items_processing() -> None:
    q: WorkQueue[str] = WorkQueue("t", clock=FakeClock())
    q.add("a")
    assert await q.get() == "a"
    drain = asyncio.create_task(q.shut_down_with_drain())
    await settle()
    assert not drain.done()
    q.done("a")
    await drain
    assert await q.get() is None


# ------------------------------------------------------------------ metrics


async def test_metrics_as_client_go_names_them() -> None:
    clock = FakeClock()
    registry = CollectorRegistry()
    q: WorkQueue[str] = WorkQueue("jobs", clock=clock, metrics=WorkqueueMetrics(registry))

    def value(name: str) -> float:
        got = registry.get_sample_value(name, {"name": "jobs"})
        assert got is not None, name
        return got

    q.add("a")
    q.add("a")
    q.add("b")
    assert value("workqueue_adds_total") == 2
    assert value("workqueue_depth") == 2
    await clock.advance(2)
    assert await q.get() == "a"
    assert value("workqueue_queue_duration_seconds_sum") == 2
    await clock.advance(3)
    assert await q.get() == "b"
    await clock.advance(1)
    assert value("workqueue_unfinished_work_seconds") == 4 + 1
    assert value("workqueue_longest_running_processor_seconds") == 4
    q.done("a")
    q.done("b")
    assert value("workqueue_work_duration_seconds_sum") == 4 + 1
    assert value("workqueue_work_duration_seconds_count") == 2
    assert value("workqueue_unfinished_work_seconds") == 0
    q.add_rate_limited("a")
    q.add_after("b", 0)
    assert value("workqueue_retries_total") == 2
    q.shut_down()
    await q.closed()


# ------------------------------------------------------------------ random stress


@pytest.mark.parametrize("seed", range(5))
async def test_random_operations_keep_the_invariants(seed: int) -> None:
    rng = random.Random(seed)
    clock = FakeClock()
    q: WorkQueue[int] = WorkQueue("t", clock=clock, rate_limiter=ItemExponentialRateLimiter(1, 8))
    held: list[int] = []
    for _ in range(400):
        op = rng.choice(["add", "add", "get", "done", "after", "limited", "advance"])
        item = rng.randrange(6)
        if op == "add":
            q.add(item)
        elif op == "get" and len(q):
            got = await q.get()
            assert got is not None
            assert got not in held
            held.append(got)
        elif op == "done" and held:
            q.done(held.pop(rng.randrange(len(held))))
        elif op == "after":
            q.add_after(item, rng.choice([0.0, 0.5, 1.0, 3.0]))
        elif op == "limited":
            q.add_rate_limited(item)
        elif op == "advance":
            await settle()
            await clock.advance(rng.choice([0.5, 1.0, 4.0]))
        q._check()
    q.shut_down()
    await q.closed()
    q._check()
