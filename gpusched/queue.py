"""The scheduling queue: which pending pod the scheduler tries next, and when a failed one returns.

kube-scheduler's ``PriorityQueue`` (``pkg/scheduler/backend/queue/scheduling_queue.go``) with
queueing hints and PreEnqueue plugins. A pod is in exactly one place: **active** (ordered by the
configured QueueSort's key), **backoff** (failed recently, ordered by expiry), **unschedulable**
(waits for an event a rejecting plugin registered for, an update to itself, or
``max_in_unschedulable`` seconds), **gated** (a PreEnqueue plugin rejected it: never popped,
waits for an event the gating plugin registered for or an update to itself, then PreEnqueue runs
again) or **in flight** (popped; returned by :meth:`add_unschedulable`,
:meth:`requeue_after_error`, or ended by :meth:`done`)::

      add() ── PreEnqueue ─┐
        │ rejected         ▼                  pop()
        ▼                ACTIVE ──────────────────────────────▶ IN FLIGHT ──▶ done(): gone
      GATED ────────────▶ ▲ ▲                                    │     │
      event or update,    │ │ backoff expired                    │ (1) │ (2)
      PreEnqueue passes   │ └─────────────── BACKOFF ◀───────────┘     │
                          │                    ▲                       │
                          │ (b)                │ (b)                   │
                          └──────────── UNSCHEDULABLE ◀────────────────┘

  (1) ``requeue_after_error()``; ``add_unschedulable()`` after a move request since the pod's
      cycle began, an update to it while in flight, a nominated node, or no rejecting plugin
  (2) ``add_unschedulable()`` otherwise
  (b) an event a rejecting plugin cares about (and its hint agrees), an update to the pod, or
      ``max_in_unschedulable``; to BACKOFF while still backing off, else ACTIVE (so also
      from GATED)

PreEnqueue (one callable per profile, the framework's ``run_pre_enqueue``) runs before every
entry into ACTIVE or BACKOFF except BACKOFF -> ACTIVE (it ran on entry to backoff, as upstream
with ``SchedulerPopFromBackoffQ``), and on an update to an active or backing-off pod; a
rejection sends the pod to GATED instead.

**Costs** (n pods held): add, update, delete, pop, activate O(log n) plus one PreEnqueue; the
flushes O(k log n) for k pods moved; ``on_event`` O(m log n) for the m pods whose rejecting or
gating plugins registered for the event. No method awaits except :meth:`pop` and :meth:`run`.
The move-request race, backoff and jitter, the invariants and the metric labels are described
in ``docs/queue.md``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from sortedcontainers import SortedList

from gpusched.clock import Clock
from gpusched.framework.queued_pod import QueuedPodInfo
from gpusched.framework.status import Status

__all__ = [
    "ACTIVE",
    "BACKOFF",
    "BACKOFF_COMPLETE",
    "DEFAULT_INITIAL_BACKOFF",
    "DEFAULT_MAX_BACKOFF",
    "DEFAULT_MAX_IN_UNSCHEDULABLE",
    "FORCE_ACTIVATE",
    "GATED",
    "IN_FLIGHT",
    "POD_ADD",
    "POD_UPDATE",
    "QUEUES",
    "SCHEDULE_ATTEMPT_FAILURE",
    "UNSCHEDULABLE",
    "UNSCHEDULABLE_TIMEOUT",
    "WILDCARD_EVENT",
    "IncomingFn",
    "PreEnqueueFn",
    "QueueClosed",
    "QueuedPodInfo",
    "SchedulingQueue",
    "SortKey",
    "default_sort_key",
]

log = logging.getLogger(__name__)

ACTIVE: Final = "active"
BACKOFF: Final = "backoff"
UNSCHEDULABLE: Final = "unschedulable"
GATED: Final = "gated"
IN_FLIGHT: Final = "in_flight"
QUEUES: Final = (ACTIVE, BACKOFF, UNSCHEDULABLE, GATED)
"""The ``queue`` label values of ``scheduler_pending_pods``, as :meth:`pending_pods` keys."""

WILDCARD_EVENT: Final = "*"
"""An event that moves every unschedulable and gated pod, whatever rejected it."""

DEFAULT_INITIAL_BACKOFF: Final = 1.0
DEFAULT_MAX_BACKOFF: Final = 10.0
DEFAULT_MAX_IN_UNSCHEDULABLE: Final = 300.0

# The ``event`` label values of ``scheduler_queue_incoming_pods_total`` (upstream's names).
POD_ADD: Final = "PodAdd"
POD_UPDATE: Final = "PodUpdate"
SCHEDULE_ATTEMPT_FAILURE: Final = "ScheduleAttemptFailure"
BACKOFF_COMPLETE: Final = "BackoffComplete"
FORCE_ACTIVATE: Final = "ForceActivate"
UNSCHEDULABLE_TIMEOUT: Final = "UnschedulableTimeout"

# Metadata that changes without changing what the pod asks for (upstream isPodUpdated).
_IGNORED_METADATA: Final = frozenset(
    {"resourceVersion", "generation", "managedFields", "finalizers"}
)


class QueueClosed(Exception):
    """Raised by :meth:`SchedulingQueue.pop` once the queue is closed: the scheduler stops."""


SortKey = Callable[[QueuedPodInfo], tuple[Any, ...]]
"""A QueueSort plugin's ordering: smaller keys pop first. Must be a pure function of fields
that change only through the queue (pod, timestamp, key, seq)."""

PreEnqueueFn = Callable[[dict[str, Any]], Status]
"""A profile's PreEnqueue (the framework's ``run_pre_enqueue``): Success lets the pod in."""

IncomingFn = Callable[[str, str], None]
"""``(queue, event)`` each time a pod enters a queue: ``scheduler_queue_incoming_pods_total``."""


def default_sort_key(info: QueuedPodInfo) -> tuple[float, int]:
    """FIFO: the time the pod was first added, then creation order. The scheduler passes its
    QueueSort plugin's key instead (PrioritySort by default)."""
    return (info.timestamp, info.seq)


def _identity(pod: Mapping[str, Any]) -> tuple[str, str]:
    """``(uid, namespace/name)``."""
    meta = pod.get("metadata") or {}
    uid = meta.get("uid")
    if not uid:
        raise ValueError(f"pod {meta.get('name')!r} has no metadata.uid; the queue keys by uid")
    return str(uid), f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}"


def _event_label(event: str) -> str:
    """A cluster event's ``event`` label, as upstream's ``ClusterEvent.Label()`` spells it:
    ``Node/Add`` -> ``NodeAdd``; a pod event (the scheduler sends them for assigned pods only)
    -> ``AssignedPodDelete``."""
    resource, _, action = event.partition("/")
    if resource == "Pod":
        resource = "AssignedPod"
    return resource + action


def _scheduling_view(pod: Mapping[str, Any]) -> dict[str, Any]:
    view = {k: v for k, v in pod.items() if k != "status"}
    meta = view.get("metadata")
    if isinstance(meta, Mapping):
        view["metadata"] = {k: v for k, v in meta.items() if k not in _IGNORED_METADATA}
    return view


def _may_change_scheduling(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether an update could change the scheduling result: anything but status and
    bookkeeping metadata changed (spec, labels, annotations...)."""
    return _scheduling_view(old) != _scheduling_view(new)


@dataclass(slots=True, eq=False)
class _Flight:
    """A popped pod, until the scheduler returns it or calls ``done``."""

    info: QueuedPodInfo
    cycle: int
    latest: dict[str, Any] | None = None  # an update that arrived meanwhile, applied on return
    moved: bool = False  # an update or activate() that may help it arrived meanwhile
    deleted: bool = False  # deleted meanwhile: dropped when returned


_Entry = tuple[Any, int, QueuedPodInfo]


class SchedulingQueue:
    """Active, backoff, unschedulable and gated pods; see the module docstring.

    ``sort_key``: the QueueSort plugin's key (default FIFO). ``event_interest`` maps an event
    name to the plugins that registered for it (the framework builds it from the plugins'
    enqueue extensions); None means every event interests every plugin, which is always
    correct but retries more; with a map, an event it does not name moves nothing (the 5-minute
    flush still moves unschedulable pods). :data:`WILDCARD_EVENT` moves everything.

    ``pre_enqueue`` maps a profile name (``spec.schedulerName``) to its PreEnqueue; pods of
    other profiles enter unchecked. A callable that raises counts as an Error status: the pod
    is gated with the message. ``on_gated(info)`` is called when a pod becomes gated or its
    gating message changes, so that the caller can tell the user; ``on_incoming(queue, event)``
    when a pod enters a queue (upstream's labels, ``docs/queue.md``).
    """

    def __init__(
        self,
        clock: Clock,
        sort_key: SortKey = default_sort_key,
        *,
        initial_backoff: float = DEFAULT_INITIAL_BACKOFF,
        max_backoff: float = DEFAULT_MAX_BACKOFF,
        max_in_unschedulable: float = DEFAULT_MAX_IN_UNSCHEDULABLE,
        jitter: float = 0.1,
        rng: random.Random | None = None,
        event_interest: Mapping[str, Iterable[str]] | None = None,
        pre_enqueue: Mapping[str, PreEnqueueFn] | None = None,
        on_gated: Callable[[QueuedPodInfo], None] | None = None,
        on_incoming: IncomingFn | None = None,
    ) -> None:
        if not 0 < initial_backoff <= max_backoff:
            raise ValueError(
                f"need 0 < initial_backoff <= max_backoff, got {initial_backoff}, {max_backoff}"
            )
        if max_in_unschedulable <= 0:
            raise ValueError(f"max_in_unschedulable must be positive, got {max_in_unschedulable}")
        if not 0 <= jitter < 1:
            raise ValueError(f"jitter must be in [0, 1), got {jitter}")
        self._clock = clock
        self._sort_key = sort_key
        self._initial_backoff = initial_backoff
        self._max_backoff = max_backoff
        self._max_in_unschedulable = max_in_unschedulable
        self._jitter = jitter
        self._rng = rng if rng is not None else random.Random()
        self._event_interest: dict[str, frozenset[str]] | None = (
            None
            if event_interest is None
            else {event: frozenset(plugins) for event, plugins in event_interest.items()}
        )
        self._pre_enqueue: dict[str, PreEnqueueFn] = dict(pre_enqueue or {})
        self._on_gated = on_gated
        self._on_incoming = on_incoming
        self._seq = itertools.count()
        self._active: Any = SortedList()  # of _Entry (sort key, seq, info)
        self._active_index: dict[str, _Entry] = {}
        self._backoff: Any = SortedList()  # of _Entry (expiry, seq, info)
        self._backoff_index: dict[str, _Entry] = {}
        self._unschedulable: dict[str, QueuedPodInfo] = {}  # in order of unschedulable_since
        self._by_plugin: dict[str, set[str]] = {}  # rejecting plugin -> uids in unschedulable
        self._gated: dict[str, QueuedPodInfo] = {}
        self._gated_by_plugin: dict[str, set[str]] = {}  # gating plugin -> uids in gated
        self._in_flight: dict[str, _Flight] = {}
        self._cycle = 0
        self._move_request_cycle = -1
        self._closed = False
        self._wakeup = asyncio.Event()  # set whenever active gains a pod, and on close

    # -- reading -------------------------------------------------------------------------

    @property
    def scheduling_cycle(self) -> int:
        """Pops so far; the cycle of the latest pop (also ``info.cycle``)."""
        return self._cycle

    @property
    def closed(self) -> bool:
        return self._closed

    def __len__(self) -> int:
        """Pending pods: active, backoff, unschedulable and gated; in-flight ones excluded."""
        return (
            len(self._active_index)
            + len(self._backoff_index)
            + len(self._unschedulable)
            + len(self._gated)
        )

    def pending_pods(self) -> dict[str, int]:
        """Counts per queue, keyed by :data:`QUEUES`, for ``scheduler_pending_pods{queue}``."""
        return {
            ACTIVE: len(self._active_index),
            BACKOFF: len(self._backoff_index),
            UNSCHEDULABLE: len(self._unschedulable),
            GATED: len(self._gated),
        }

    def location(self, uid: str) -> str | None:
        """Where the pod is: one of :data:`QUEUES`, :data:`IN_FLIGHT`, or None if unknown."""
        if uid in self._active_index:
            return ACTIVE
        if uid in self._backoff_index:
            return BACKOFF
        if uid in self._unschedulable:
            return UNSCHEDULABLE
        if uid in self._gated:
            return GATED
        if uid in self._in_flight:
            return IN_FLIGHT
        return None

    def get(self, uid: str) -> QueuedPodInfo | None:
        """The pod's info wherever it is (in flight included), or None."""
        if entry := self._active_index.get(uid) or self._backoff_index.get(uid):
            return entry[2]
        if info := self._unschedulable.get(uid) or self._gated.get(uid):
            return info
        flight = self._in_flight.get(uid)
        return flight.info if flight is not None else None

    # -- pods from the informer ----------------------------------------------------------

    def add(self, pod: dict[str, Any]) -> QueuedPodInfo:
        """A new pending pod: PreEnqueue, then to active, or gated. O(log n).

        A pod the queue already holds (the informer re-listed) is treated as an update.
        Returns the info (``info.gated`` and ``info.error`` tell whether and why it waits).
        """
        uid, key = _identity(pod)
        if self.get(uid) is not None:
            return self.update(None, pod)
        now = self._clock.monotonic()
        info = QueuedPodInfo(pod=pod, key=key, uid=uid, timestamp=now, seq=next(self._seq))
        self._enter(info, now, POD_ADD)
        return info

    def update(self, old: dict[str, Any] | None, new: dict[str, Any]) -> QueuedPodInfo:
        """A pending pod changed. O(log n) plus one PreEnqueue.

        The queue compares ``new`` with the version it holds (the one the pod's last attempt
        judged; informer events may coalesce, so ``old`` can be newer than that). ``old`` is
        accepted so the method plugs into an update handler, and is otherwise unused.
        Unless only status and bookkeeping metadata changed, PreEnqueue runs again:

        - active or backoff: the new version replaces the old (re-sorted if its key changed),
          or the pod is gated;
        - unschedulable: the pod may now fit: to backoff if still backing off, else active
          (or gated); a status-only update leaves it;
        - gated: to active (or backoff) once PreEnqueue lets it in;
        - in flight: kept aside and applied when the pod returns; a relevant change sends it
          to backoff (through PreEnqueue) instead of unschedulable then;
        - unknown: added (upstream does the same). The caller must not route updates for
          pods it has assumed or bound here.
        """
        uid, key = _identity(new)
        now = self._clock.monotonic()
        flight = self._in_flight.get(uid)
        if flight is not None:
            if _may_change_scheduling(flight.info.pod, new):  # vs what the cycle judges
                flight.moved = True
            flight.latest = new
            return flight.info
        info = self.get(uid)
        if info is None:
            return self.add(new)
        relevant = _may_change_scheduling(info.pod, new)
        if uid in self._unschedulable and not relevant:
            info.pod = new  # status only: stays in place
            return info
        if uid in self._gated:
            info.pod, info.key = new, key
            if relevant:
                self._retry_gated(info, now, POD_UPDATE)
            return info
        if uid in self._unschedulable:
            self._remove_unschedulable(uid)
            info.pod, info.key = new, key
            self._enter(info, now, POD_UPDATE)
            return info
        in_backoff = uid in self._backoff_index
        if in_backoff:
            self._remove_backoff(uid)
        else:
            self._remove_active(uid)
        info.pod, info.key = new, key
        if relevant and not self._admit(info):
            self._put_gated(info, POD_UPDATE)
        elif in_backoff:
            self._push_backoff(info, None)  # same queue: not counted as incoming
        else:
            self._push_active(info, now, None)
        return info

    def delete(self, pod: Mapping[str, Any]) -> bool:
        """The pod is gone (deleted, or assigned by someone): forget it. O(log n).

        An in-flight pod is marked so that returning it drops it. Returns whether the queue
        knew the pod.
        """
        uid, _ = _identity(pod)
        if uid in self._active_index:
            self._remove_active(uid)
        elif uid in self._backoff_index:
            self._remove_backoff(uid)
        elif uid in self._unschedulable:
            self._remove_unschedulable(uid)
        elif uid in self._gated:
            self._remove_gated(uid)
        elif uid in self._in_flight:
            self._in_flight[uid].deleted = True
        else:
            return False
        return True

    # -- the scheduling loop -------------------------------------------------------------

    async def pop(self) -> QueuedPodInfo:
        """Wait for an active pod and take the head; it is in flight until returned or done.

        Increments the scheduling cycle and ``info.attempts`` and clears the info's
        unschedulable and pending plugins and nominated node for the scheduler to fill. Raises
        :class:`QueueClosed` once the queue is closed (pods still queued are not drained).
        Cancelling a waiting ``pop`` changes nothing.
        """
        while True:
            info = self.pop_nowait()
            if info is not None:
                return info
            self._wakeup.clear()
            await self._wakeup.wait()

    def pop_nowait(self) -> QueuedPodInfo | None:
        """:meth:`pop` without waiting: None when nothing is active. O(log n).

        Moves pods whose backoff has expired to active first, so a busy scheduler does not
        depend on :meth:`run`'s tick to see them.
        """
        if self._closed:
            raise QueueClosed("the scheduling queue is closed")
        self.flush_backoff_completed()
        if not self._active:
            return None
        entry: _Entry = self._active.pop(0)
        info = entry[2]
        del self._active_index[info.uid]
        self._cycle += 1
        info.cycle = self._cycle
        info.attempts += 1
        info.unschedulable_plugins = set()
        info.pending_plugins = set()
        info.nominated_node_name = None
        self._in_flight[info.uid] = _Flight(info, self._cycle)
        return info

    def take(self, uid: str) -> QueuedPodInfo | None:
        """Pop this pod, wherever it waits (active, backoff or unschedulable; not gated): a
        gang's scheduling cycle takes its pending siblings with the pod it popped. As
        :meth:`pop` does, it starts a new cycle for the pod (``info.cycle``, ``attempts``)
        and puts it in flight. None if the pod is gated, in flight or unknown. O(log n)."""
        if uid in self._active_index:
            info = self._remove_active(uid)
        elif uid in self._backoff_index:
            info = self._remove_backoff(uid)
        elif uid in self._unschedulable:
            info = self._remove_unschedulable(uid)
        else:
            return None
        self._cycle += 1
        info.cycle = self._cycle
        info.attempts += 1
        info.unschedulable_plugins = set()
        info.pending_plugins = set()
        info.nominated_node_name = None
        self._in_flight[info.uid] = _Flight(info, self._cycle)
        return info

    def add_unschedulable(self, info: QueuedPodInfo, cycle: int | None = None) -> str | None:
        """The pod's attempt failed: rejected by ``info.unschedulable_plugins`` (or made to
        wait by ``info.pending_plugins``), which the scheduler set. O(log n).

        ``cycle`` is the cycle it was popped in (default ``info.cycle``). It goes to backoff
        (through PreEnqueue, so possibly to gated) if a move request arrived since that cycle
        began, an update or ``activate`` arrived while it was in flight, a PostFilter
        nominated a node for it (``info.nominated_node_name``), or no plugin is named (an
        unexplained failure); otherwise to unschedulable, to wait for an event its plugins
        care about. Ends the flight. Returns where it went, or None if it was deleted while in
        flight. Raises ValueError if the pod is not in flight (not popped, or already returned).
        """
        flight = self._end_flight(info)
        if flight is None:
            return None
        now = self._clock.monotonic()
        info.backoff_expiry = now + self._backoff_seconds(info.attempts)
        cycle = info.cycle if cycle is None else cycle
        rejected = bool(info.unschedulable_plugins or info.pending_plugins)
        if (
            flight.moved
            or self._move_request_cycle >= cycle
            or not rejected
            or info.nominated_node_name
        ):
            return self._enter(info, now, SCHEDULE_ATTEMPT_FAILURE, to_backoff=True)
        self._put_unschedulable(info, now, SCHEDULE_ATTEMPT_FAILURE)
        return UNSCHEDULABLE

    def requeue_after_error(self, info: QueuedPodInfo) -> str | None:
        """The attempt failed for a reason other than the pod not fitting (an error in a
        plugin, a failed Binding or Lease write): back to backoff (through PreEnqueue),
        whatever happened meanwhile. Clears the info's plugins. Ends the flight. O(log n).

        Returns where it went (backoff, or gated if PreEnqueue rejects it now), or None if it
        was deleted while in flight. Raises ValueError if the pod is not in flight.
        """
        flight = self._end_flight(info)
        if flight is None:
            return None
        info.unschedulable_plugins = set()
        info.pending_plugins = set()
        now = self._clock.monotonic()
        info.backoff_expiry = now + self._backoff_seconds(info.attempts)
        return self._enter(info, now, SCHEDULE_ATTEMPT_FAILURE, to_backoff=True)

    def done(self, uid: str, cycle: int | None = None) -> None:
        """The pod's cycle is over (bound, or given up): it leaves the queue. Idempotent.

        Pass ``cycle`` (``info.cycle`` read when popped) from code that may run after the
        pod was returned and popped again (a binding task that awaits between returning the
        pod and calling ``done``): a ``done`` for an older cycle is then ignored.
        """
        flight = self._in_flight.get(uid)
        if flight is not None and (cycle is None or flight.cycle == cycle):
            del self._in_flight[uid]

    # -- moving pods ---------------------------------------------------------------------

    def on_event(self, event: str, hint: Callable[[QueuedPodInfo], bool] | None = None) -> int:
        """A cluster event (node added or changed, pod deleted or finished, reservation
        released...): upstream's ``MoveAllToActiveOrBackoffQueue``. Returns the pods moved.

        Moves each unschedulable pod rejected (or made to wait) by a plugin interested in
        ``event``, and each gated pod whose gating plugin is, for which ``hint(info)`` is true
        when given (upstream's preCheck; a hint that raises counts as true, so that a bug never
        strands a pod). An unschedulable pod goes to backoff if still backing off, else active;
        to active at once if a waiting (pending) plugin is interested; PreEnqueue runs first,
        and a gated pod it still rejects stays gated (not counted as moved). If any plugin is
        interested, records a move request for in-flight pods. O(m log n) for m candidates.
        """
        interest = self._interest(event)
        if interest is not None and not interest:
            return 0
        self._move_request_cycle = self._cycle
        if interest is None:
            candidates = list(self._unschedulable.values())
            gated = list(self._gated.values())
        else:
            uids: set[str] = set()
            gated_uids: set[str] = set()
            for plugin in interest:
                uids |= self._by_plugin.get(plugin, set())
                gated_uids |= self._gated_by_plugin.get(plugin, set())
            candidates = [self._unschedulable[uid] for uid in uids]
            gated = [self._gated[uid] for uid in gated_uids]
        now = self._clock.monotonic()
        label = _event_label(event)
        moved = 0
        for info in candidates:
            if hint is not None and not self._hint_says_move(hint, info, event):
                continue
            self._remove_unschedulable(info.uid)
            immediate = interest is not None and not interest.isdisjoint(info.pending_plugins)
            self._enter(info, now, label, immediate=immediate)
            moved += 1
        for info in gated:
            if hint is not None and not self._hint_says_move(hint, info, event):
                continue
            if self._retry_gated(info, now, label):
                moved += 1
        return moved

    def activate(self, uids: Iterable[str]) -> int:
        """Move these pods to active now, skipping backoff (upstream ``Activate``; gangs pull
        in their siblings). Pods in unschedulable, backoff or gated (through PreEnqueue) move;
        an in-flight pod goes to backoff rather than unschedulable when returned; others are
        left. O(log n) each. Returns the pods moved."""
        now = self._clock.monotonic()
        moved = 0
        for uid in uids:
            if uid in self._unschedulable:
                info = self._remove_unschedulable(uid)
                where = self._enter(info, now, FORCE_ACTIVATE, immediate=True)
                moved += where == ACTIVE
            elif uid in self._backoff_index:
                self._push_active(self._remove_backoff(uid), now, FORCE_ACTIVATE)
                moved += 1
            elif uid in self._gated:
                moved += self._retry_gated(self._gated[uid], now, FORCE_ACTIVATE, immediate=True)
            elif uid in self._in_flight:
                self._in_flight[uid].moved = True
        return moved

    def flush_backoff_completed(self) -> int:
        """Move pods whose backoff has expired to active (PreEnqueue ran when they entered
        backoff). O(k log n) for k pods moved."""
        now = self._clock.monotonic()
        moved = 0
        while self._backoff and self._backoff[0][0] <= now:
            entry: _Entry = self._backoff.pop(0)
            info = entry[2]
            del self._backoff_index[info.uid]
            self._push_active(info, now, BACKOFF_COMPLETE)
            moved += 1
        return moved

    def flush_unschedulable_left_over(self) -> int:
        """Move pods unschedulable for ``max_in_unschedulable`` seconds or more to backoff or
        active (through PreEnqueue): the safety net for an event that was missed or never
        registered. Gated pods stay (only their plugins' events or an update release them).
        Unlike upstream it records no move request (a timeout is no cluster change).
        O(k log n) for k pods moved."""
        now = self._clock.monotonic()
        due: list[QueuedPodInfo] = []
        for info in self._unschedulable.values():
            assert info.unschedulable_since is not None
            if now - info.unschedulable_since < self._max_in_unschedulable:
                break  # entered in order: the rest are younger
            due.append(info)
        for info in due:
            self._remove_unschedulable(info.uid)
            self._enter(info, now, UNSCHEDULABLE_TIMEOUT)
        return len(due)

    async def run(self, *, backoff_interval: float = 1.0, leftover_interval: float = 30.0) -> None:
        """Flush completed backoffs every ``backoff_interval`` and unschedulable leftovers
        every ``leftover_interval`` seconds of the queue's clock (upstream: 1 s and 30 s).

        Run it as a task; cancel it to stop (it starts no tasks of its own), or it returns at
        its next tick after :meth:`close`.
        """
        next_leftover = self._clock.monotonic() + leftover_interval
        while not self._closed:
            await self._clock.sleep(backoff_interval)
            self.flush_backoff_completed()
            if self._clock.monotonic() >= next_leftover:
                self.flush_unschedulable_left_over()
                while next_leftover <= self._clock.monotonic():
                    next_leftover += leftover_interval

    def close(self) -> None:
        """Stop: pending and future :meth:`pop` calls raise :class:`QueueClosed`."""
        self._closed = True
        self._wakeup.set()

    # -- internals -----------------------------------------------------------------------

    def _backoff_seconds(self, attempts: int) -> float:
        if attempts <= 0:
            return 0.0  # never tried: no penalty (upstream)
        seconds = min(self._initial_backoff * 2.0 ** min(attempts - 1, 64), self._max_backoff)
        if self._jitter:
            seconds *= 1.0 + self._rng.uniform(-self._jitter, self._jitter)
        return seconds

    def _interest(self, event: str) -> frozenset[str] | None:
        """The plugins ``event`` interests; None for all of them."""
        if event == WILDCARD_EVENT or self._event_interest is None:
            return None
        return self._event_interest.get(event, frozenset())

    @staticmethod
    def _hint_says_move(
        hint: Callable[[QueuedPodInfo], bool], info: QueuedPodInfo, event: str
    ) -> bool:
        try:
            return bool(hint(info))
        except Exception:
            log.exception(
                "queueing hint for %s on event %s failed; moving the pod", info.key, event
            )
            return True

    def _end_flight(self, info: QueuedPodInfo) -> _Flight | None:
        """Take the pod out of flight; apply an update that arrived meanwhile.
        None if it was deleted meanwhile."""
        flight = self._in_flight.get(info.uid)
        if flight is None or flight.info is not info:
            raise ValueError(f"pod {info.key} is not in flight: pop it first, return it once")
        del self._in_flight[info.uid]
        if flight.deleted:
            return None
        if flight.latest is not None:
            info.pod = flight.latest
            info.key = _identity(flight.latest)[1]
        return flight

    def _admit(self, info: QueuedPodInfo) -> bool:
        """Run the pod's profile's PreEnqueue; record the gating plugin and message (and, as
        upstream, the plugin in ``unschedulable_plugins``) on rejection. True if admitted."""
        spec = info.pod.get("spec") or {}
        fn = self._pre_enqueue.get(spec.get("schedulerName") or "")
        if fn is None:
            return True
        try:
            status = fn(info.pod)
        except Exception as exc:  # a bug in the framework: the pod waits, nothing crashes
            log.exception("PreEnqueue for %s failed", info.key)
            status = Status.error(exc)
        if status.is_success:
            return True
        plugin = status.plugin
        message = status.message() or f"rejected by PreEnqueue plugin {plugin!r}"
        changed = (info.gating_plugin, info.error) != (plugin, message)
        info.gating_plugin = plugin
        info.error = message
        info.unschedulable_plugins = {plugin} if plugin else set()
        info.pending_plugins = set()
        if changed and status.quiet:
            log.debug("pod %s waits at PreEnqueue (%s): %s", info.key, plugin, message)
        elif changed and self._on_gated is not None:
            self._on_gated(info)
        return False

    def _enter(
        self,
        info: QueuedPodInfo,
        now: float,
        event: str,
        *,
        to_backoff: bool = False,
        immediate: bool = False,
    ) -> str:
        """Upstream's ``moveToActiveQ``/``moveToBackoffQ``: PreEnqueue, then to backoff
        (``to_backoff``, or still backing off and not ``immediate``) or active; to gated if
        rejected. Returns where the pod went."""
        if not self._admit(info):
            self._put_gated(info, event)
            return GATED
        return self._place(info, now, event, to_backoff=to_backoff, immediate=immediate)

    def _place(
        self, info: QueuedPodInfo, now: float, event: str, *, to_backoff: bool, immediate: bool
    ) -> str:
        """An admitted pod: to backoff or active (see :meth:`_enter`)."""
        backing_off = info.backoff_expiry is not None and info.backoff_expiry > now
        if to_backoff or (backing_off and not immediate):
            self._push_backoff(info, event)
            return BACKOFF
        self._push_active(info, now, event)
        return ACTIVE

    def _retry_gated(
        self, info: QueuedPodInfo, now: float, event: str, *, immediate: bool = False
    ) -> bool:
        """PreEnqueue again for a gated pod: out of gated if admitted (True), else it stays
        (its gating plugin or message may have changed)."""
        uid = info.uid
        self._unindex_gated(info)
        if not self._admit(info):
            self._index_gated(info)
            return False
        del self._gated[uid]
        info.gated = False
        info.gating_plugin = None
        info.error = None
        self._place(info, now, event, to_backoff=False, immediate=immediate)
        return True

    def _count(self, queue: str, event: str | None) -> None:
        if event is not None and self._on_incoming is not None:
            self._on_incoming(queue, event)

    def _push_active(self, info: QueuedPodInfo, now: float, event: str | None) -> None:
        if info.initial_attempt_timestamp is None:
            info.initial_attempt_timestamp = now
        entry: _Entry = (self._sort_key(info), info.seq, info)
        self._active.add(entry)
        self._active_index[info.uid] = entry
        self._wakeup.set()
        self._count(ACTIVE, event)

    def _remove_active(self, uid: str) -> QueuedPodInfo:
        entry = self._active_index.pop(uid)
        self._active.remove(entry)
        return entry[2]

    def _push_backoff(self, info: QueuedPodInfo, event: str | None) -> None:
        assert info.backoff_expiry is not None
        entry: _Entry = (info.backoff_expiry, info.seq, info)
        self._backoff.add(entry)
        self._backoff_index[info.uid] = entry
        self._count(BACKOFF, event)

    def _remove_backoff(self, uid: str) -> QueuedPodInfo:
        entry = self._backoff_index.pop(uid)
        self._backoff.remove(entry)
        return entry[2]

    def _put_unschedulable(self, info: QueuedPodInfo, now: float, event: str) -> None:
        info.unschedulable_since = now
        self._unschedulable[info.uid] = info
        for plugin in info.unschedulable_plugins | info.pending_plugins:
            self._by_plugin.setdefault(plugin, set()).add(info.uid)
        self._count(UNSCHEDULABLE, event)

    def _remove_unschedulable(self, uid: str) -> QueuedPodInfo:
        info = self._unschedulable.pop(uid)
        for plugin in info.unschedulable_plugins | info.pending_plugins:
            uids = self._by_plugin[plugin]
            uids.discard(uid)
            if not uids:
                del self._by_plugin[plugin]
        return info

    def _put_gated(self, info: QueuedPodInfo, event: str) -> None:
        """Gated pods count as ``unschedulable`` incoming, as upstream's (they share its
        unschedulablePods there)."""
        info.gated = True
        self._gated[info.uid] = info
        self._index_gated(info)
        self._count(UNSCHEDULABLE, event)

    def _remove_gated(self, uid: str) -> QueuedPodInfo:
        info = self._gated.pop(uid)
        self._unindex_gated(info)
        return info

    def _index_gated(self, info: QueuedPodInfo) -> None:
        if info.gating_plugin:
            self._gated_by_plugin.setdefault(info.gating_plugin, set()).add(info.uid)

    def _unindex_gated(self, info: QueuedPodInfo) -> None:
        if info.gating_plugin:
            uids = self._gated_by_plugin[info.gating_plugin]
            uids.discard(info.uid)
            if not uids:
                del self._gated_by_plugin[info.gating_plugin]

    def _check(self) -> None:
        """Assert every invariant (tests call it after each operation). O(n log n)."""
        self._active._check()
        self._backoff._check()
        assert len(self._active) == len(self._active_index)
        assert len(self._backoff) == len(self._backoff_index)
        queued: list[QueuedPodInfo] = []
        for uid, entry in self._active_index.items():
            key, seq, info = entry
            assert info.uid == uid
            assert seq == info.seq
            assert key == self._sort_key(info), f"{info.key}: sort key changed while active"
            assert self._active[self._active.bisect_left(entry)] is entry
            assert info.initial_attempt_timestamp is not None
            queued.append(info)
        for uid, entry in self._backoff_index.items():
            expiry, seq, info = entry
            assert info.uid == uid
            assert seq == info.seq
            assert expiry == info.backoff_expiry
            assert self._backoff[self._backoff.bisect_left(entry)] is entry
            queued.append(info)
        since = float("-inf")
        for uid, info in self._unschedulable.items():
            assert info.uid == uid
            assert info.attempts > 0
            assert info.backoff_expiry is not None
            assert info.unschedulable_since is not None
            assert info.unschedulable_since >= since, "unschedulable map out of entry order"
            since = info.unschedulable_since
            rejectors = info.unschedulable_plugins | info.pending_plugins
            assert rejectors, f"{info.key} unschedulable with no rejecting plugin"
            assert all(uid in self._by_plugin[plugin] for plugin in rejectors)
            queued.append(info)
        for plugin, uids in self._by_plugin.items():
            assert uids, f"empty index entry for {plugin}"
            for uid in uids:
                info = self._unschedulable[uid]
                assert plugin in info.unschedulable_plugins | info.pending_plugins
        for uid, info in self._gated.items():
            assert info.uid == uid
            assert info.gated
            assert info.gating_plugin is not None
            assert info.error, f"{info.key} gated without a reason"
            if info.gating_plugin:
                assert uid in self._gated_by_plugin[info.gating_plugin]
            queued.append(info)
        for plugin, uids in self._gated_by_plugin.items():
            assert uids, f"empty gated index entry for {plugin}"
            assert all(self._gated[uid].gating_plugin == plugin for uid in uids)
        for uid, flight in self._in_flight.items():
            assert flight.info.uid == uid
            assert flight.cycle == flight.info.cycle
            assert 0 < flight.cycle <= self._cycle
            queued.append(flight.info)
        assert len({id(info) for info in queued}) == len(queued), "a pod held twice"
        assert len({info.uid for info in queued}) == len(queued), "a uid held twice"
        for info in queued:  # an in-flight pod's update waits in its _Flight
            assert _identity(info.pod) == (info.uid, info.key)
            if info.uid not in self._gated:
                assert not info.gated
                assert info.gating_plugin is None
                assert info.error is None
        assert self._move_request_cycle <= self._cycle
        assert sum(self.pending_pods().values()) == len(self)
        assert len(self) + len(self._in_flight) == len(queued)
