"""Clocks: the real one, and a fake one that tests advance by hand.

Everything in gpusched that waits for time to pass (pod durations in the simulated kubelet,
backoff, Lease expiry) takes a ``Clock`` so a test can make an hour pass in a microsecond and
never sleeps to "let things settle".

``now()`` is wall time (``datetime`` in UTC) for timestamps written to the API;
``monotonic()`` is seconds for deadlines; ``sleep(seconds)`` waits on this clock.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from datetime import UTC, datetime, timedelta

__all__ = ["Clock", "FakeClock", "RealClock"]


class Clock:
    """The interface; ``RealClock`` and ``FakeClock`` implement it."""

    def now(self) -> datetime:
        raise NotImplementedError

    def monotonic(self) -> float:
        raise NotImplementedError

    async def sleep(self, seconds: float) -> None:
        raise NotImplementedError

    async def sleep_until(self, deadline: float) -> None:
        """Sleep until ``monotonic() >= deadline``."""
        delay = deadline - self.monotonic()
        if delay > 0:
            await self.sleep(delay)


class RealClock(Clock):
    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(seconds, 0.0))


class FakeClock(Clock):
    """Time moves only when ``advance()`` is called; sleepers wake in deadline order.

    ``advance`` yields to the event loop after waking each batch of sleepers, so code that
    reacts to a wake-up (and perhaps sleeps again within the advanced span) runs before
    ``advance`` returns.
    """

    def __init__(self, start: datetime | None = None) -> None:
        self._start = start or datetime(2026, 1, 1, tzinfo=UTC)
        self._t = 0.0
        self._seq = itertools.count()
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._slept: asyncio.Event | None = None

    def now(self) -> datetime:
        return self._start + timedelta(seconds=self._t)

    def monotonic(self) -> float:
        return self._t

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._t + seconds, next(self._seq), fut))
        if self._slept is not None:
            self._slept.set()
        await fut

    @property
    def sleepers(self) -> int:
        return sum(1 for _, _, f in self._sleepers if not f.done())

    async def wait_for_sleepers(self, count: int = 1) -> None:
        """Wait until ``count`` tasks sleep on this clock (so an ``advance`` will wake them)."""
        while self.sleepers < count:
            self._slept = asyncio.Event()
            await self._slept.wait()

    async def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds``, waking every sleeper whose deadline passes."""
        target = self._t + seconds
        while self._sleepers and self._sleepers[0][0] <= target:
            deadline, _, fut = heapq.heappop(self._sleepers)
            self._t = max(self._t, deadline)
            if not fut.done():
                fut.set_result(None)
            # Let the woken task run (it may schedule further sleeps inside the span).
            for _ in range(5):
                await asyncio.sleep(0)
        self._t = target
