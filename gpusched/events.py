"""Telling users why: Events and the pod's ``PodScheduled`` condition, none lost to a burst.

``Scheduled`` (Normal) and ``FailedScheduling`` (Warning) are written as core/v1 Events by
``reportingController: gpusched``, as kube-scheduler writes them, so ``kubectl describe pod``
shows them; ``eventf`` writes one about any object for plugins. Nothing here blocks the
scheduler: a call records the Event in memory (about 10 us) and returns; writer tasks
(``run()``) write it later. Events trail the binding; they are not lost to a burst.

- **Budget**, separate from scheduling's writes: ``concurrency`` writers (4) under a token
  bucket of ``qps`` (50) refilled per second with ``burst`` (100), kube-scheduler's own event
  client's defaults: the last Event of a 2,000-pod burst is written about 38 s after the first.
- **Aggregation** (client-go's EventCorrelator): the same (object, type, reason, action,
  message) seen again within ``aggregation_window`` (10 minutes) while its Event is among the
  last ``cache_size`` (4,096, client-go's LRU) is one Event: its ``count`` and ``lastTimestamp``
  are PATCHed (a repeat that arrives before the Event was written only raises the count it is
  created with). A 404/409/410 on that PATCH creates the Event anew, as client-go does on 404.
- **Spam filter**: a ``FailedScheduling`` with the same message as the last for that pod is not
  recorded within ``repeat_interval`` (5 minutes), so a pod pending for an hour for one reason
  has one Event with ``count`` about 12. Upstream's EventSourceObjectSpamFilter is a token
  bucket per object over all its Events (burst 25, then one per 5 minutes); ours is per pod and
  message, so a changed reason is always told. client-go's merging of 10 similar messages into
  "(combined from similar events)" is not done here.
- **Errors**: 5xx, 429 and transport errors are retried, each try taking a token, after 1, 2,
  4, 8 then 10 s (±25 %), at most ``max_tries`` (12, client-go's) times; client-go retries only
  transport errors. Other 4xx are given up (a 409 on create is a lost answer: read back).
- **Bounds**: at most ``max_pending`` (50,000) Events and conditions waiting; past it new ones
  are dropped (client-go drops past 1,000 queued, uncounted). Each waiting Event holds about
  0.8 KB (40 MB at the bound; tracemalloc, pod Events), the aggregation cache 4,096 more.
- **Metrics**: ``gpusched_events_pending``, ``gpusched_events_written_total{verb}``,
  ``gpusched_events_aggregated_total`` and ``gpusched_events_dropped_total{reason}`` (reason:
  ``queue_full``, ``rejected``, ``retries_exhausted``, ``shutdown``; upstream counts no drops).
- **Shutdown**: ``drain(timeout)`` writes what waits, without the rate limit, for at most
  ``timeout`` seconds; ``run()`` does so when cancelled (``drain_timeout``, 5 s).

The ``PodScheduled=False`` condition goes through the same writers (the latest per pod), and is
only patched when its reason or message changes, and never once the pod is bound (``forget``).
``on_write(resource, verb)`` is told of each write that succeeded (``events`` create/patch,
``pods/status`` patch): the scheduler's ``gpusched_api_writes_total``.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from gpusched.clock import Clock
from gpusched.kube.client import Kube, resource_path
from gpusched.kube.errors import (
    APIConflict,
    APIError,
    APIGone,
    APINotFound,
    APIServerError,
    APITooManyRequests,
)

if TYPE_CHECKING:
    from gpusched.metrics import Metrics

__all__ = ["EventRecorder", "TokenBucket"]

log = logging.getLogger(__name__)

_STRATEGIC = "application/strategic-merge-patch+json"

_names = random.Random()
"""Event name suffixes (client-go uses the time in hex): random, seeded once from the OS."""


def _ts(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class TokenBucket:
    """``qps`` tokens a second, at most ``burst`` saved (golang.org/x/time/rate's Wait).

    ``take()`` reserves a token at once and sleeps on the clock until it is due, so callers are
    served in order and the bucket may go negative by what is reserved.
    """

    def __init__(self, clock: Clock, qps: float, burst: int) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError("qps must be positive and burst at least 1")
        self.clock = clock
        self.qps = qps
        self.burst = burst
        self._tokens = float(burst)
        self._at = clock.monotonic()

    async def take(self) -> None:
        now = self.clock.monotonic()
        self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.qps)
        self._at = now
        self._tokens -= 1.0
        if self._tokens < 0:
            await self.clock.sleep(-self._tokens / self.qps)


class _Event:
    """One Event object: what it says, how many times, and what the server has of it."""

    __slots__ = (
        "action",
        "busy",
        "count",
        "first",
        "key",
        "last",
        "message",
        "name",
        "namespace",
        "queued",
        "reason",
        "regarding",
        "seen",
        "tries",
        "type",
        "written",
    )

    def __init__(
        self,
        key: tuple[str, ...],
        regarding: dict[str, str],
        type_: str,
        reason: str,
        action: str,
        message: str,
        clock: Clock,
    ) -> None:
        self.key = key
        self.regarding = regarding
        self.namespace = regarding.get("namespace") or "default"
        self.name = _name(regarding.get("name", ""))
        self.type = type_
        self.reason = reason
        self.action = action
        self.message = message
        self.first = self.last = clock.now()  # formatted when written, off the scheduler's path
        self.seen = clock.monotonic()
        self.count = 1
        self.written = 0  # the count the server has; 0: not created yet
        self.queued = False
        self.busy = False
        self.tries = 0


class _Condition:
    """The ``PodScheduled=False`` condition to patch into a pod (the latest for that pod)."""

    __slots__ = ("body", "busy", "cancelled", "name", "namespace", "queued", "tries", "uid")

    def __init__(self, uid: str, namespace: str, name: str, body: dict[str, Any]) -> None:
        self.uid = uid
        self.namespace = namespace
        self.name = name
        self.body = body
        self.queued = False
        self.busy = False
        self.cancelled = False  # the pod was scheduled or deleted first: not written
        self.tries = 0


_Item = _Event | _Condition


def _name(base: str) -> str:
    return f"{base[:200]}.{_names.getrandbits(64):016x}"


def _pod_ref(pod: Mapping[str, Any]) -> dict[str, str]:
    meta = pod["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": meta["name"],
        "namespace": meta.get("namespace") or "default",
        "uid": meta.get("uid", ""),
        "resourceVersion": meta.get("resourceVersion", ""),
    }


def _retriable(exc: APIError) -> bool:
    return isinstance(exc, APIServerError | APITooManyRequests)


class EventRecorder:
    """Events and pod conditions, recorded at once and written under their own budget."""

    def __init__(
        self,
        kube: Kube,
        clock: Clock,
        *,
        component: str = "gpusched",
        instance: str = "",
        repeat_interval: float = 300.0,
        qps: float = 50.0,
        burst: int = 100,
        concurrency: int = 4,
        max_pending: int = 50_000,
        aggregation_window: float = 600.0,
        cache_size: int = 4096,
        max_tries: int = 12,
        drain_timeout: float = 5.0,
        on_write: Callable[[str, str], None] | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.kube = kube
        self.clock = clock
        self.component = component
        self.instance = instance or component
        self.repeat_interval = repeat_interval
        self.concurrency = concurrency
        self.max_pending = max_pending
        self.aggregation_window = aggregation_window
        self.cache_size = cache_size
        self.max_tries = max_tries
        self.drain_timeout = drain_timeout
        self.on_write = on_write
        self.metrics = metrics
        self.bucket = TokenBucket(clock, qps, burst)
        self._queue: deque[_Item] = deque()
        self._wake = asyncio.Event()
        self._inflight = 0
        self._unexpected = 0
        self._events: OrderedDict[tuple[str, ...], _Event] = OrderedDict()  # aggregation
        self._conditions: dict[str, _Condition] = {}  # pod uid -> waiting condition
        self._last: OrderedDict[str, tuple[str, float]] = OrderedDict()  # pod uid -> (msg, t)
        self.written = 0
        self.aggregated = 0
        self.suppressed = 0
        self.dropped = 0
        if metrics is not None:
            metrics.events_pending.set_function(lambda: self.pending)

    @property
    def pending(self) -> int:
        """Events and conditions waiting to be written or being written."""
        return len(self._queue) + self._inflight

    # -- what the scheduler and plugins call (never awaits) -------------------------------

    def scheduled(self, pod: Mapping[str, Any], node: str) -> None:
        meta = pod["metadata"]
        message = f"Successfully assigned {meta.get('namespace')}/{meta['name']} to {node}"
        self._record(_pod_ref(pod), "Normal", "Scheduled", "Binding", message)
        self.forget(meta.get("uid", ""))

    def failed_scheduling(
        self,
        pod: Mapping[str, Any],
        message: str,
        reason: str = "Unschedulable",
        nominated_node: str | None = None,
    ) -> None:
        """A pod could not be placed: an Event (unless repeated) and the pod condition, with
        ``status.nominatedNodeName`` in the same patch when preemption nominated a node (as
        upstream's ``updatePod`` in the failure handler)."""
        if nominated_node is not None:
            self._condition(pod, reason, message, nominated_node)
        uid = pod["metadata"].get("uid", "")
        now = self.clock.monotonic()
        last = self._last.get(uid)
        if last is not None and last[0] == message and now - last[1] < self.repeat_interval:
            self.suppressed += 1
            return
        self._last[uid] = (message, now)
        self._last.move_to_end(uid)
        while len(self._last) > 100_000:
            self._last.popitem(last=False)
        self._record(_pod_ref(pod), "Warning", "FailedScheduling", "Scheduling", message)
        if nominated_node is None:
            self._condition(pod, reason, message)

    def eventf(
        self, regarding: Mapping[str, Any], event_type: str, reason: str, action: str, message: str
    ) -> None:
        """An Event about any object (upstream's events.EventRecorder.Eventf without
        ``related``): non-blocking, best effort, under this recorder's budget and aggregation.
        A cluster-scoped object's Event goes to ``default``, as client-go puts it."""
        meta = regarding.get("metadata") or {}
        ref = {
            "apiVersion": str(regarding.get("apiVersion", "")),
            "kind": str(regarding.get("kind", "")),
            "name": str(meta.get("name", "")),
            "uid": str(meta.get("uid", "")),
            "resourceVersion": str(meta.get("resourceVersion", "")),
        }
        if meta.get("namespace"):
            ref["namespace"] = str(meta["namespace"])
        self._record(ref, event_type, reason, action, message)

    def forget(self, uid: str) -> None:
        """The pod was bound or deleted: forget its last failure, and a ``PodScheduled=False``
        still waiting is not written (it would overwrite the Binding's ``True``)."""
        self._last.pop(uid, None)
        waiting = self._conditions.pop(uid, None)
        if waiting is not None:
            waiting.cancelled = True

    def _record(
        self, regarding: dict[str, str], type_: str, reason: str, action: str, message: str
    ) -> None:
        message = message[:1024]
        key = (
            regarding.get("apiVersion", ""),
            regarding.get("kind", ""),
            regarding.get("namespace", ""),
            regarding.get("name", ""),
            regarding.get("uid", ""),
            type_,
            reason,
            action,
            message,
        )
        now = self.clock.monotonic()
        event = self._events.get(key)
        if event is not None and now - event.seen <= self.aggregation_window:
            event.count += 1
            event.last = self.clock.now()
            event.seen = now
            self._events.move_to_end(key)
            self.aggregated += 1
            if self.metrics is not None:
                self.metrics.events_aggregated.inc()
            if not (event.queued or event.busy):  # else the write under way carries the count
                self._put(event)
            return
        event = _Event(key, regarding, type_, reason, action, message, self.clock)
        if self._put(event):
            self._events[key] = event
            self._events.move_to_end(key)
            while len(self._events) > self.cache_size:
                self._events.popitem(last=False)  # no longer aggregated; still written

    def _condition(
        self, pod: Mapping[str, Any], reason: str, message: str, nominated: str | None = None
    ) -> None:
        status = pod.get("status") or {}
        # While another condition of ours is being written, the pod's copy is older than it.
        writing = self._conditions.get(pod["metadata"]["uid"]) is not None
        conditions = [] if writing else status.get("conditions") or []
        current = (reason, message)
        for c in conditions:
            if (
                (c.get("type"), c.get("status")) == ("PodScheduled", "False")
                and (c.get("reason"), c.get("message")) == current
                and (nominated is None or status.get("nominatedNodeName") == nominated)
            ):
                return  # the pod already says so
        meta = pod["metadata"]
        extra = {"nominatedNodeName": nominated} if nominated is not None else {}
        body = {
            "metadata": {"uid": meta["uid"]},
            "status": {
                **extra,
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": reason,
                        "message": message,
                        "lastProbeTime": None,
                        "lastTransitionTime": _ts(self.clock.now()),
                    }
                ],
            },
        }
        waiting = self._conditions.get(meta["uid"])
        if waiting is not None and waiting.queued:
            waiting.body = body  # not written yet: the latest wins
            return
        item = _Condition(meta["uid"], meta.get("namespace") or "default", meta["name"], body)
        if self._put(item):
            self._conditions[item.uid] = item

    def _put(self, item: _Item) -> bool:
        if len(self._queue) >= self.max_pending:
            self._drop("queue_full", 1)
            return False
        item.queued = True
        self._queue.append(item)
        self._wake.set()
        return True

    def _drop(self, reason: str, n: int) -> None:
        self.dropped += n
        if self.metrics is not None:
            self.metrics.events_dropped.labels(reason).inc(n)

    # -- the writers ----------------------------------------------------------------------

    async def run(self) -> None:
        """Write what is recorded, ``concurrency`` at a time under the token bucket, until
        cancelled; then ``drain()`` for at most ``drain_timeout`` seconds."""
        workers = [asyncio.create_task(self._work(draining=False)) for _ in range(self.concurrency)]
        try:
            await asyncio.gather(*workers)
        finally:
            for w in workers:
                w.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            if self._queue and self.drain_timeout > 0:
                await self.drain(self.drain_timeout)

    async def drain(self, timeout: float = 5.0) -> None:
        """Write what waits (graceful shutdown), ``concurrency`` at a time without the rate
        limit, for at most ``timeout`` seconds (wall time); what is left is dropped
        (``reason="shutdown"``)."""
        workers = [asyncio.create_task(self._work(draining=True)) for _ in range(self.concurrency)]
        try:
            await asyncio.wait_for(asyncio.gather(*workers), timeout)
        except TimeoutError:
            pass
        except Exception:  # the client is unusable (closed): give up on the rest
            log.exception("could not drain the Events")
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        if self._queue:
            log.warning("shutting down with %d Events not written", len(self._queue))
            self._drop("shutdown", len(self._queue))
            for item in self._queue:
                item.queued = False
            self._queue.clear()

    async def _work(self, *, draining: bool) -> None:
        while True:
            if not self._queue:
                if draining:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            item = self._queue.popleft()
            item.queued = False
            item.busy = True
            self._inflight += 1
            try:
                await self._deliver(item, draining)
            except BaseException:  # cancelled, or the client broke while draining
                item.queued = True  # not written (or written again: idempotent, see _write)
                self._queue.appendleft(item)
                raise
            finally:
                item.busy = False
                self._inflight -= 1
            if isinstance(item, _Event) and item.written and item.count > item.written:
                self._put(item)  # repeated while it was written: patch the count

    async def _deliver(self, item: _Item, draining: bool) -> None:
        item.tries = 0
        while True:
            if isinstance(item, _Condition) and item.cancelled:
                return
            if not draining:
                await self.bucket.take()
            try:
                await self._write(item)
                return
            except APINotFound:
                if isinstance(item, _Condition):
                    self._forget_condition(item)
                    return  # the pod is gone: nothing to tell
                self._give_up(item, "rejected", "its namespace is gone")
                return
            except APIError as exc:
                if not _retriable(exc):
                    self._give_up(item, "rejected", str(exc))
                    return
                item.tries += 1
                if item.tries >= self.max_tries:
                    self._give_up(item, "retries_exhausted", str(exc))
                    return
                if not draining:
                    delay = max(min(2.0 ** (item.tries - 1), 10.0), exc.retry_after)
                    await self.clock.sleep(delay * _names.uniform(0.75, 1.25))
            except Exception as exc:
                if draining:
                    raise  # a broken client at shutdown: drain() gives up on the rest
                self._unexpected += 1  # never let one Event stop the writers; log a few
                if self._unexpected in (1, 10, 100) or self._unexpected % 1000 == 0:
                    log.exception("could not record an Event (%d so far)", self._unexpected)
                self._give_up(item, "rejected", str(exc))
                return

    def _give_up(self, item: _Item, reason: str, why: str) -> None:
        if isinstance(item, _Condition):
            self._forget_condition(item)
            log.info("could not patch the condition of pod %s: %s", item.name, why)
            return
        log.info("could not record Event %s (%s): %s", item.name, item.reason, why)
        item.count = max(item.written, 1)  # the repeats not written are given up with it
        if self._events.get(item.key) is item:
            del self._events[item.key]
        self._drop(reason, 1)

    def _forget_condition(self, item: _Condition) -> None:
        if self._conditions.get(item.uid) is item:
            del self._conditions[item.uid]

    async def _write(self, item: _Item) -> None:
        if isinstance(item, _Condition):
            path = resource_path("", "v1", "pods", item.namespace, item.name, "status")
            await self.kube.patch(path, item.body, _STRATEGIC)
            self._forget_condition(item)
            self._wrote("pods/status", "patch")
            return
        count = item.count
        path = resource_path("", "v1", "events", item.namespace)
        if item.written:
            body = {"count": count, "lastTimestamp": _ts(item.last)}
            try:
                await self.kube.patch(f"{path}/{item.name}", body, _STRATEGIC)
                item.written = count
                self._wrote("events", "patch")
                return
            except (APINotFound, APIConflict, APIGone):
                # client-go creates the Event anew when its PATCH finds none
                item.name = _name(item.regarding.get("name", ""))
                item.written = 0
        try:
            await self.kube.create(path, self._body(item, count))
        except APIConflict as exc:
            # Our names are random: the Event exists because an earlier try was applied and
            # its answer lost. Read it back; if it is not there, the create is tried again.
            try:
                await self.kube.get(f"{path}/{item.name}")
            except APINotFound:
                raise APIServerError(exc.code, exc.status) from exc
        item.written = count
        self._wrote("events", "create")

    def _body(self, event: _Event, count: int) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": event.name, "namespace": event.namespace},
            "involvedObject": event.regarding,
            "reason": event.reason,
            "message": event.message,
            "type": event.type,
            "action": event.action,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.instance,
            "firstTimestamp": _ts(event.first),
            "lastTimestamp": _ts(event.last),
            "eventTime": _micro(event.first),
            "count": count,
        }

    def _wrote(self, resource: str, verb: str) -> None:
        self.written += 1
        if resource == "events" and self.metrics is not None:
            self.metrics.events_written.labels(verb).inc()
        if self.on_write is not None:
            self.on_write(resource, verb)
