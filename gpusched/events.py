"""Telling users why: pod Events and the ``PodScheduled`` condition.

``FailedScheduling`` (Warning) and ``Scheduled`` (Normal) events are written as core/v1
Events by ``reportingController: gpusched``, as kube-scheduler writes them, so
``kubectl describe pod`` shows them. They are best effort and asynchronous: a bounded queue
feeds one writer task, and under pressure events are dropped (counted) rather than slowing
scheduling. A pending pod does not flood the API: a ``FailedScheduling`` with the same message
as the last one for that pod is not written again within ``repeat_interval`` (5 minutes), and
the ``PodScheduled=False`` condition is only patched when its reason or message changes.

``on_write(resource, verb)`` is told of each write that succeeded: ``("events", "create")`` and
``("pods/status", "patch")`` (the scheduler's ``gpusched_api_writes_total``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from gpusched.clock import Clock
from gpusched.kube.client import Kube, resource_path
from gpusched.kube.errors import APIError, APINotFound

__all__ = ["EventRecorder"]

log = logging.getLogger(__name__)

_STRATEGIC = "application/strategic-merge-patch+json"


_names = random.Random()
"""Event name suffixes (client-go uses the time in hex): random, seeded once from the OS."""


def _ts(clock: Clock) -> str:
    return clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro(clock: Clock) -> str:
    return clock.now().strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class EventRecorder:
    def __init__(
        self,
        kube: Kube,
        clock: Clock,
        *,
        component: str = "gpusched",
        instance: str = "",
        repeat_interval: float = 300.0,
        capacity: int = 10_000,
        on_write: Callable[[str, str], None] | None = None,
    ) -> None:
        self.kube = kube
        self.clock = clock
        self.component = component
        self.instance = instance or component
        self.repeat_interval = repeat_interval
        self.on_write = on_write
        self._queue: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue(capacity)
        self._last: OrderedDict[str, tuple[str, float]] = OrderedDict()  # pod uid -> (msg, t)
        self.written = 0
        self.dropped = 0
        self.suppressed = 0

    # -- what the scheduler calls (never awaits) ------------------------------------------

    def scheduled(self, pod: Mapping[str, Any], node: str) -> None:
        meta = pod["metadata"]
        message = f"Successfully assigned {meta.get('namespace')}/{meta['name']} to {node}"
        self._enqueue_event(pod, "Normal", "Scheduled", "Binding", message)
        self._last.pop(meta["uid"], None)

    def failed_scheduling(
        self, pod: Mapping[str, Any], message: str, reason: str = "Unschedulable"
    ) -> None:
        """A pod could not be placed: an Event (unless repeated) and the pod condition."""
        uid = pod["metadata"]["uid"]
        now = self.clock.monotonic()
        last = self._last.get(uid)
        if last is not None and last[0] == message and now - last[1] < self.repeat_interval:
            self.suppressed += 1
            return
        self._last[uid] = (message, now)
        self._last.move_to_end(uid)
        while len(self._last) > 100_000:
            self._last.popitem(last=False)
        self._enqueue_event(pod, "Warning", "FailedScheduling", "Scheduling", message)
        self._enqueue_condition(pod, reason, message)

    def forget(self, uid: str) -> None:
        self._last.pop(uid, None)

    def eventf(
        self,
        regarding: Mapping[str, Any],
        event_type: str,
        reason: str,
        action: str,
        message: str,
    ) -> None:
        """An Event about ``regarding`` (best effort, never awaits; ``Handle.events``)."""
        self._enqueue_event(regarding, event_type, reason, action, message)

    def _enqueue_event(
        self, pod: Mapping[str, Any], type_: str, reason: str, action: str, message: str
    ) -> None:
        meta = pod["metadata"]
        ns = meta.get("namespace") or "default"
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{meta['name']}.{_names.getrandbits(64):016x}", "namespace": ns},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": meta["name"],
                "namespace": ns,
                "uid": meta["uid"],
                "resourceVersion": meta.get("resourceVersion", ""),
            },
            "reason": reason,
            "message": message[:1024],
            "type": type_,
            "action": action,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.instance,
            "firstTimestamp": _ts(self.clock),
            "lastTimestamp": _ts(self.clock),
            "eventTime": _micro(self.clock),
            "count": 1,
        }
        self._put(("event", event))

    def _enqueue_condition(self, pod: Mapping[str, Any], reason: str, message: str) -> None:
        conditions = (pod.get("status") or {}).get("conditions") or []
        current = (reason, message)
        for c in conditions:
            if (c.get("type"), c.get("status")) == ("PodScheduled", "False") and (
                c.get("reason"),
                c.get("message"),
            ) == current:
                return  # the pod already says so
        meta = pod["metadata"]
        body = {
            "metadata": {"uid": meta["uid"]},
            "status": {
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": reason,
                        "message": message,
                        "lastProbeTime": None,
                        "lastTransitionTime": _ts(self.clock),
                    }
                ]
            },
        }
        self._put(
            ("condition", {"namespace": meta.get("namespace"), "name": meta["name"], "body": body})
        )

    def _put(self, item: tuple[str, dict[str, Any]]) -> None:
        try:
            self._queue.put_nowait(item)
        except asyncio.QueueFull:
            self.dropped += 1

    # -- the writer task --------------------------------------------------------------------

    async def run(self) -> None:
        while True:
            kind, item = await self._queue.get()
            try:
                if kind == "event":
                    await self._create_event(item)
                else:
                    path = resource_path(
                        "", "v1", "pods", item["namespace"], item["name"], "status"
                    )
                    await self.kube.patch(path, item["body"], _STRATEGIC)
                    self._wrote("pods/status", "patch")
            except APINotFound:
                pass  # the pod (or its namespace) is gone: nothing to tell
            except APIError as exc:
                log.info("could not record %s: %s", kind, exc)

    async def drain(self) -> None:
        """Write what is queued (graceful shutdown); gives up on errors."""
        while not self._queue.empty():
            with contextlib.suppress(APIError):
                kind, item = self._queue.get_nowait()
                if kind == "event":
                    await self._create_event(item)

    async def _create_event(self, event: dict[str, Any]) -> None:
        ns = event["metadata"]["namespace"]
        await self.kube.create(resource_path("", "v1", "events", ns), event)
        self._wrote("events", "create")

    def _wrote(self, resource: str, verb: str) -> None:
        self.written += 1
        if self.on_write is not None:
            self.on_write(resource, verb)
