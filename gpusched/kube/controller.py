"""A controller's run loop, written once: informers, a work queue of keys, N workers, retries.

The shape of kube-controller-manager's controllers (``pkg/controller/job``'s
Run/worker/processNextWorkItem): informers (:class:`~gpusched.kube.reflector.Reflector`) call
handlers that enqueue keys; once every informer that gates the workers has listed, ``synced``
is set and ``workers`` tasks take keys from a :class:`~gpusched.kube.workqueue.WorkQueue` (so
one key is never synced by two workers at once, and a key changed during its sync is synced
again after) and call :meth:`Controller.sync`. A subclass implements ``sync(key)`` and its
handlers; the base does the rest:

* ``sync`` returns: the key's failures are forgotten.
* it raises :class:`~gpusched.kube.errors.APIConflict` and ``conflicts_at_once`` is set: the
  cache was stale, the key is synced again as soon as this sync is done (the watch brings the
  newer object); otherwise any :class:`~gpusched.kube.errors.APIError` is logged and the key
  requeued rate-limited (``queue.add_rate_limited``). Other exceptions are bugs: they end
  ``run()``, as a panic ends a Go controller.
* ``observe(key, result, seconds)`` is called after each sync (``result`` success, conflict
  or error; wall seconds): the hook for a controller's own reconcile metric.

``run()`` runs until cancelled; then the queue is shut down and every informer, worker,
background and timer task is cancelled and awaited (no task outlives it). Run it again to
restart (as after a leader election): informers keep their caches and re-list.

Cost: ``workers + informers + background`` tasks while running, one more while a key waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any, ClassVar

from gpusched.clock import Clock, RealClock
from gpusched.kube.client import Kube
from gpusched.kube.errors import APIConflict, APIError
from gpusched.kube.reflector import Handler, Reflector, object_key
from gpusched.kube.workqueue import RateLimiter, WorkQueue, WorkqueueMetrics

__all__ = ["Controller"]

log = logging.getLogger(__name__)


class Controller:
    """Subclass, make informers with :meth:`informer`, implement :meth:`sync`."""

    conflicts_at_once: ClassVar[bool] = True
    """A 409 requeues the key at once instead of rate-limited (see the module docstring)."""

    def __init__(
        self,
        name: str,
        *,
        clock: Clock | None = None,
        workers: int = 1,
        rate_limiter: RateLimiter | None = None,
        metrics: WorkqueueMetrics | None = None,
    ) -> None:
        self.name = name
        self.clock = clock or RealClock()
        self.workers = workers
        self.queue: WorkQueue[str] = WorkQueue(
            name, clock=self.clock, rate_limiter=rate_limiter, metrics=metrics
        )
        self.synced = asyncio.Event()
        """Set once the informers that gate the workers have listed."""
        self._informers: list[tuple[Reflector, bool]] = []
        self._background: list[tuple[str, Callable[[], Coroutine[Any, Any, None]]]] = []

    # ------------------------------------------------------------------ wiring

    def informer(
        self,
        kube: Kube,
        path: str,
        handler: Handler,
        *,
        label_selector: str = "",
        name: str = "",
        gates: bool = True,
        start: bool = True,
    ) -> Reflector:
        """A reflector on ``path`` calling ``handler``, on this controller's clock. ``run()``
        starts it unless ``start`` is False (the subclass then runs it, see ``background``);
        the workers wait for its list when ``gates``."""
        reflector = Reflector(
            kube,
            path,
            handler=handler,
            label_selector=label_selector,
            clock=self.clock,
            name=f"{self.name}/{name}" if name else "",
        )
        if start:
            self._informers.append((reflector, gates))
        return reflector

    def background(self, name: str, work: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run ``work()`` beside the informers while the controller runs."""
        self._background.append((name, work))

    def enqueue(self, event: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        """A handler that enqueues the object's own key (``namespace/name``)."""
        self.queue.add(object_key(obj))

    # ------------------------------------------------------------------ to implement

    async def sync(self, key: str) -> None:
        """Make the world match ``key``'s desired state (read from the informers)."""
        raise NotImplementedError

    def observe(self, key: str, result: str, seconds: float) -> None:
        """Called after each sync; ``result`` is success, conflict or error."""

    # ------------------------------------------------------------------ running

    async def run(self) -> None:
        """Informers, background work and workers, until cancelled (module docstring)."""
        if self.queue.shutting_down:
            # Run again (after a leader election): a fresh queue, with the same limiter and
            # metrics and the keys the last run left undone (a re-list only reports changes).
            old = self.queue
            self.queue = WorkQueue(
                self.name, clock=self.clock, rate_limiter=old.rate_limiter, metrics=old.metrics
            )
            undone, waiting = old.pending()
            for key in undone:
                self.queue.add(key)
            for key, seconds in waiting.items():
                self.queue.add_after(key, seconds)
        tasks = [
            asyncio.create_task(r.run(), name=f"{self.name}-informer-{r.name}")
            for r, _ in self._informers
        ]
        tasks += [
            asyncio.create_task(work(), name=f"{self.name}-{name}")
            for name, work in self._background
        ]
        tasks.append(asyncio.create_task(self._work(), name=f"{self.name}-workers"))
        try:
            await asyncio.gather(*tasks)
        finally:
            self.queue.shut_down()
            for t in tasks:
                t.cancel()
            for t in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t
            await self.queue.closed()

    async def _work(self) -> None:
        for reflector, gates in self._informers:
            if gates:
                await reflector.synced.wait()
        self.synced.set()
        workers = [
            asyncio.create_task(self._worker(), name=f"{self.name}-worker-{i}")
            for i in range(self.workers)
        ]
        try:
            await asyncio.gather(*workers)
        finally:
            for w in workers:
                w.cancel()
            for w in workers:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await w

    async def _worker(self) -> None:
        while (key := await self.queue.get()) is not None:
            await self.process(key)

    async def process(self, key: str) -> None:
        """One sync of ``key`` (handed out by ``queue.get()``), its retry and ``done``. A sync
        cancelled (``run()`` stopping) is not done: the next ``run()`` syncs the key again."""
        started = time.perf_counter()
        result = "error"
        try:
            await self.sync(key)
        except APIConflict as exc:
            if not self.conflicts_at_once:
                self._retry(key, exc)
            else:
                result = "conflict"
                log.debug("%s: %s: %s; syncing again", self.name, key, exc)
                self.queue.add(key)
        except APIError as exc:
            self._retry(key, exc)
        except asyncio.CancelledError:
            result = ""
            raise
        else:
            result = "success"
            self.queue.forget(key)
        finally:
            if result:
                self.queue.done(key)
                self.observe(key, result, time.perf_counter() - started)

    def _retry(self, key: str, exc: APIError) -> None:
        delay = self.queue.add_rate_limited(key)
        log.warning(
            "%s: %s: %s; retry %d in %.2fs",
            self.name,
            key,
            exc,
            self.queue.num_requeues(key),
            delay,
        )
