"""client-go's rate-limited delaying work queue, on asyncio and gpusched's ``Clock``.

A controller's queue holds *keys*, never objects: a sync reads the informers' current state,
so ten events for one object cost one sync. The semantics are ``k8s.io/client-go/util/
workqueue``'s (queue.go, delaying_queue.go, rate_limiting_queue.go)::

    add(k) ──► dirty ──► queue (FIFO) ──get()──► processing ──done(k)──► (gone)
                 ▲                                  │
                 └── add(k) while processing: k stays in dirty only, and done(k) puts it
                     back in the queue, so it is synced again after, never twice at once

* ``add`` of an item already waiting (dirty) does nothing: deduplication.
* ``get`` hands out the oldest item and marks it processing; ``done`` must follow.
* ``add_after(k, s)`` adds k after ``s`` seconds on the clock; when k already waits, the
  earlier time wins. ``add_rate_limited(k)`` is ``add_after(k, limiter.when(k))``; ``forget``
  resets k's failures and ``num_requeues`` counts them.
* ``shut_down``: later adds are ignored; ``get`` hands out what is queued, then ``None``.
  ``shut_down_with_drain`` also waits for the items being processed.

Rate limiters are client-go's: per-item exponential (``base * 2**failures`` capped, with
optional jitter), a token bucket, and the max of several;
:func:`default_controller_rate_limiter` is ``DefaultControllerRateLimiter`` (5 ms .. 1000 s per
item, 10 qps with a burst of 100 overall).

Metrics (:class:`WorkqueueMetrics`, on the registry the caller gives, label ``name``) are
client-go's ``workqueue_*`` families, so its dashboards apply.

Cost: add/get/done O(1); add_after O(log waiting); one timer task while anything waits
(none otherwise); the gauges are computed when scraped.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import random
from collections import deque
from collections.abc import Hashable
from typing import Generic, NamedTuple, Protocol, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from gpusched.clock import Clock, RealClock

__all__ = [
    "BucketRateLimiter",
    "ItemExponentialRateLimiter",
    "MaxOfRateLimiter",
    "RateLimiter",
    "WorkQueue",
    "WorkqueueMetrics",
    "default_controller_rate_limiter",
]

T = TypeVar("T", bound=Hashable)

_BUCKETS = tuple(1e-8 * 10**i for i in range(10))
"""client-go's ``ExponentialBuckets(10e-9, 10, 10)``: 10 ns .. 10 s."""


# =============================================================================================
# Rate limiters
# =============================================================================================


class RateLimiter(Protocol):
    def when(self, item: Hashable) -> float:
        """Seconds ``item`` should wait before its next try (and count this failure)."""

    def forget(self, item: Hashable) -> None:
        """Stop tracking ``item`` (it succeeded, or is given up)."""

    def num_requeues(self, item: Hashable) -> int:
        """Failures of ``item`` since it was last forgotten."""


class ItemExponentialRateLimiter:
    """``base * 2**failures`` seconds, at most ``cap``; then times ``1 + jitter * U(0, 1)``
    when ``jitter`` is set (``wait.Jitter``), so that many items failing together spread."""

    def __init__(
        self, base: float, cap: float, *, jitter: float = 0.0, rng: random.Random | None = None
    ) -> None:
        self.base = base
        self.cap = cap
        self.jitter = jitter
        self.rng = rng or random.Random()
        self._failures: dict[Hashable, int] = {}

    def when(self, item: Hashable) -> float:
        exp = self._failures.get(item, 0)
        self._failures[item] = exp + 1
        delay = self.cap if exp >= 1024 else min(self.base * 2.0**exp, self.cap)
        if self.jitter:
            delay *= 1 + self.jitter * self.rng.random()
        return delay

    def forget(self, item: Hashable) -> None:
        self._failures.pop(item, None)

    def num_requeues(self, item: Hashable) -> int:
        return self._failures.get(item, 0)


class BucketRateLimiter:
    """A token bucket over all items (``rate.Limiter.Reserve().Delay()``): ``burst`` tries at
    once, then ``qps`` a second; a try over the budget waits for its token."""

    def __init__(self, qps: float, burst: int, clock: Clock | None = None) -> None:
        self.qps = qps
        self.burst = burst
        self.clock = clock or RealClock()
        self._tokens = float(burst)
        self._last = self.clock.monotonic()

    def when(self, item: Hashable) -> float:
        now = self.clock.monotonic()
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
        self._last = now
        self._tokens -= 1
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def forget(self, item: Hashable) -> None:
        pass

    def num_requeues(self, item: Hashable) -> int:
        return 0


class MaxOfRateLimiter:
    """The longest wait of several limiters (each is asked, so each counts the failure)."""

    def __init__(self, *limiters: RateLimiter) -> None:
        self.limiters = limiters

    def when(self, item: Hashable) -> float:
        return max((limiter.when(item) for limiter in self.limiters), default=0.0)

    def forget(self, item: Hashable) -> None:
        for limiter in self.limiters:
            limiter.forget(item)

    def num_requeues(self, item: Hashable) -> int:
        return max((limiter.num_requeues(item) for limiter in self.limiters), default=0)


def default_controller_rate_limiter(clock: Clock | None = None) -> RateLimiter:
    """``DefaultControllerRateLimiter``: 5 ms doubling to 1000 s per item, 10 qps (burst 100)
    over all items."""
    return MaxOfRateLimiter(
        ItemExponentialRateLimiter(0.005, 1000.0), BucketRateLimiter(10.0, 100, clock)
    )


# =============================================================================================
# Metrics
# =============================================================================================


class WorkqueueMetrics:
    """client-go's workqueue metrics on ``registry``; one set serves every queue (label
    ``name``). Durations are measured on each queue's clock."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.depth = Gauge(
            "workqueue_depth", "Current depth of workqueue", ["name"], registry=registry
        )
        self.adds = Counter(
            "workqueue_adds_total",
            "Total number of adds handled by workqueue",
            ["name"],
            registry=registry,
        )
        self.queue_duration = Histogram(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested.",
            ["name"],
            buckets=_BUCKETS,
            registry=registry,
        )
        self.work_duration = Histogram(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes.",
            ["name"],
            buckets=_BUCKETS,
            registry=registry,
        )
        self.unfinished = Gauge(
            "workqueue_unfinished_work_seconds",
            "How many seconds of work has done that is in progress and hasn't been observed "
            "by work_duration. Large values indicate stuck threads. One can deduce the number "
            "of stuck threads by observing the rate at which this increases.",
            ["name"],
            registry=registry,
        )
        self.longest = Gauge(
            "workqueue_longest_running_processor_seconds",
            "How many seconds has the longest running processor for workqueue been running.",
            ["name"],
            registry=registry,
        )
        self.retries = Counter(
            "workqueue_retries_total",
            "Total number of retries handled by workqueue",
            ["name"],
            registry=registry,
        )


class _Series(NamedTuple):
    """One queue's children of the metric families (``labels()`` is a dict lookup and a lock:
    done once)."""

    adds: Counter
    retries: Counter
    queue_duration: Histogram
    work_duration: Histogram


# =============================================================================================
# The queue
# =============================================================================================


class WorkQueue(Generic[T]):
    """A rate-limited delaying work queue (see the module docstring). ``None`` is not an item:
    ``get`` returns it once the queue is shut down and empty."""

    def __init__(
        self,
        name: str = "",
        *,
        clock: Clock | None = None,
        rate_limiter: RateLimiter | None = None,
        metrics: WorkqueueMetrics | None = None,
    ) -> None:
        self.name = name
        self.clock = clock or RealClock()
        self.rate_limiter = rate_limiter or default_controller_rate_limiter(self.clock)
        self._queue: deque[T] = deque()
        self._dirty: set[T] = set()
        self._processing: dict[T, float] = {}  # item -> when get() handed it out
        self._added: dict[T, float] = {}  # dirty item -> when it was added (metrics)
        self._getters: deque[asyncio.Future[None]] = deque()
        self._shutting_down = False
        self._drained: asyncio.Event | None = None
        self._waiting: dict[T, float] = {}  # item -> monotonic time it is due
        self._heap: list[tuple[float, int, T]] = []  # stale entries skipped on pop
        self._seq = itertools.count()
        self._timer: asyncio.Task[None] | None = None
        self._timer_at = 0.0
        self.metrics = metrics
        self._series: _Series | None = None
        if metrics is not None:  # every series from the start (at 0), looked up once
            self._series = _Series(
                metrics.adds.labels(name),
                metrics.retries.labels(name),
                metrics.queue_duration.labels(name),
                metrics.work_duration.labels(name),
            )
            metrics.depth.labels(name).set_function(lambda: len(self._queue))
            metrics.unfinished.labels(name).set_function(self._unfinished)
            metrics.longest.labels(name).set_function(self._longest)

    # ------------------------------------------------------------------ the queue

    def add(self, item: T) -> None:
        """Mark ``item`` as needing processing (once, however often it is added)."""
        if self._shutting_down or item in self._dirty:
            return
        if self._series is not None:
            self._series.adds.inc()
            self._added[item] = self.clock.monotonic()
        self._dirty.add(item)
        if item in self._processing:
            return  # done() queues it again
        self._queue.append(item)
        self._wake_one()

    def __len__(self) -> int:
        """Items waiting to be handed out (not those processing or delayed)."""
        return len(self._queue)

    async def get(self) -> T | None:
        """The next item, once there is one (``done`` must follow); ``None`` when shut down
        and empty."""
        while not self._queue:
            if self._shutting_down:
                return None
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._getters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._wake_one()  # pass the wake-up this getter will not use on
                else:
                    waiter.cancel()
                raise
        item = self._queue.popleft()
        now = self.clock.monotonic()
        self._processing[item] = now
        self._dirty.discard(item)
        if self._series is not None:
            self._series.queue_duration.observe(now - self._added.pop(item, now))
        return item

    def done(self, item: T) -> None:
        """``item`` is processed; if it was added meanwhile, it is queued again."""
        started = self._processing.pop(item, None)
        if started is not None and self._series is not None:
            self._series.work_duration.observe(self.clock.monotonic() - started)
        if item in self._dirty:
            self._queue.append(item)
            self._wake_one()
        if not self._processing and self._drained is not None:
            self._drained.set()

    def _wake_one(self) -> None:
        while self._getters:
            waiter = self._getters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    # ------------------------------------------------------------------ shutting down

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    def shut_down(self) -> None:
        """Ignore later adds; getters get what is queued, then ``None``. Delayed items stay
        delayed for ever (``await closed()`` to see the timer end; ``pending`` lists them)."""
        self._shutting_down = True
        while self._getters:
            waiter = self._getters.popleft()
            if not waiter.done():
                waiter.set_result(None)
        if self._timer is not None:
            self._timer.cancel()

    async def shut_down_with_drain(self) -> None:
        """``shut_down``, then wait until every item handed out is ``done``."""
        self.shut_down()
        if self._processing:
            self._drained = asyncio.Event()
            await self._drained.wait()
        await self.closed()

    async def closed(self) -> None:
        """Wait for the delay timer to end after ``shut_down`` (no task left behind)."""
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
            try:
                await timer
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise  # our caller is being cancelled, not just the timer

    # ------------------------------------------------------------------ delays and retries

    def add_after(self, item: T, seconds: float) -> None:
        """Add ``item`` after ``seconds`` on the clock (the earlier time when it waits
        already); counted in ``workqueue_retries_total`` as client-go counts it."""
        if self._shutting_down:
            return
        if self._series is not None:
            self._series.retries.inc()
        if seconds <= 0:
            self.add(item)
            return
        due = self.clock.monotonic() + seconds
        if self._waiting.get(item, due + 1) <= due:
            return
        self._waiting[item] = due
        heapq.heappush(self._heap, (due, next(self._seq), item))
        self._arm()

    def add_rate_limited(self, item: T) -> float:
        """``add_after(item, rate_limiter.when(item))``; returns that delay."""
        delay = self.rate_limiter.when(item)
        self.add_after(item, delay)
        return delay

    def forget(self, item: T) -> None:
        """Reset ``item``'s failures (call after a successful sync)."""
        self.rate_limiter.forget(item)

    def num_requeues(self, item: T) -> int:
        return self.rate_limiter.num_requeues(item)

    def _head(self) -> float | None:
        """When the earliest waiting item is due (dropping stale heap entries)."""
        while self._heap:
            due, _, item = self._heap[0]
            if self._waiting.get(item) == due:
                return due
            heapq.heappop(self._heap)
        return None

    def _arm(self) -> None:
        """Keep one timer task, sleeping until the earliest waiting item is due."""
        head = self._head()
        if self._timer is not None and (head is None or self._timer_at != head):
            self._timer.cancel()
            self._timer = None
        if head is not None and self._timer is None:
            self._timer_at = head
            self._timer = asyncio.create_task(self._fire(head), name=f"workqueue-{self.name}")

    async def _fire(self, due: float) -> None:
        await self.clock.sleep_until(due)
        self._timer = None
        now = max(self.clock.monotonic(), due)  # not a float's rounding short of it
        while (head := self._head()) is not None and head <= now:
            _, _, item = heapq.heappop(self._heap)
            del self._waiting[item]
            self.add(item)
        self._arm()

    def pending(self) -> tuple[set[T], dict[T, float]]:
        """The items not yet done (queued or processing), and those waiting with the seconds
        left until they are due: what a queue taking over from this one needs."""
        now = self.clock.monotonic()
        return {*self._dirty, *self._processing}, {
            item: due - now for item, due in self._waiting.items()
        }

    # ------------------------------------------------------------------ metrics, checks

    def _unfinished(self) -> float:
        now = self.clock.monotonic()
        return sum(now - started for started in self._processing.values())

    def _longest(self) -> float:
        now = self.clock.monotonic()
        return max((now - started for started in self._processing.values()), default=0.0)

    def _check(self) -> None:
        """Assert every invariant (tests call it after each step)."""
        assert len(set(self._queue)) == len(self._queue), "an item is queued twice"
        for item in self._queue:
            assert item in self._dirty, f"{item!r} queued but not dirty"
            assert item not in self._processing, f"{item!r} queued while processing"
        for item in self._dirty:
            assert item in self._processing or item in self._queue, f"{item!r} lost"
        for item, due in self._waiting.items():
            assert (due, item) in {(d, i) for d, _, i in self._heap}, f"{item!r} not timed"
        if self._waiting and not self._shutting_down:
            assert self._timer is not None, "nothing wakes the waiting items"
            assert self._timer_at == self._head(), "the timer is not set for the earliest item"
