"""The scheduling queue: which pending pod the scheduler tries next, and when a failed one returns.

Modelled on kube-scheduler's ``PriorityQueue`` (kubernetes/kubernetes,
``pkg/scheduler/backend/queue/scheduling_queue.go`` and ``backoff_queue.go``), in its
``moveRequestCycle`` form (without per-plugin queueing hints). A pod the queue holds is in
exactly one place:

- **active**: ready to be tried, ordered by the ``sort_key`` a QueueSort plugin provides
  (:func:`default_sort_key`: gpusched priority, then ``spec.priority``, then FIFO);
- **backoff**: failed recently and waits out an exponential backoff, ordered by expiry;
- **unschedulable**: rejected by some plugins; it waits for a cluster event that one of those
  plugins registered interest in (:meth:`SchedulingQueue.on_event`), an update to the pod
  itself, or ``max_in_unschedulable`` seconds (5 minutes, the safety net for a missed event);
- **gated**: not ready to be tried at all: ``spec.schedulingGates`` is non-empty, or a gpusched
  annotation is malformed (see *Invalid annotations*). Only an update to the pod releases it.
  Upstream keeps these in unschedulablePods and counts them apart; here they have their own map
  so that events and the leftover flush never look at them;
- **in flight**: popped; its scheduling (and binding) cycle is running. The scheduler returns it
  with :meth:`~SchedulingQueue.add_unschedulable` or :meth:`~SchedulingQueue.requeue_after_error`,
  or ends it with :meth:`~SchedulingQueue.done` once bound.

State machine of a queued pod::

      add() ───────────────┐
        │ gated            ▼                  pop()
        ▼                ACTIVE ──────────────────────────────▶ IN FLIGHT ──▶ done(): gone
      GATED ────────────▶ ▲ ▲                                    │     │
      update clears       │ │ backoff expired                    │ (1) │ (2)
      the gate (a)        │ └─────────────── BACKOFF ◀───────────┘     │
                          │                    ▲                       │
                          │ (b)                │ (c)                   │
                          └──────────── UNSCHEDULABLE ◀────────────────┘

  (1) ``requeue_after_error()``; or ``add_unschedulable()`` after a move request since the
      pod's cycle began, an update to it while in flight, or with no rejecting plugin named
  (2) ``add_unschedulable()`` otherwise
  (a) to BACKOFF instead while still backing off
  (b) an event that a rejecting plugin cares about, an update to the pod, or
      ``max_in_unschedulable`` there; once its backoff has expired
  (c) the same, while still backing off

Also: an update that gates the pod (an invalid annotation) moves it to GATED from any state;
``delete()`` removes it from any state (an in-flight pod is dropped when returned);
``activate()`` moves it from BACKOFF or UNSCHEDULABLE straight to ACTIVE.

**The move-request race** (upstream's ``moveRequestCycle``). Popping increments the
scheduling cycle. A cluster event that interests any plugin records the current cycle. When a
pod popped in cycle ``c`` fails, an event recorded at cycle ``>= c`` happened while it was
being tried, after its snapshot was taken, so it may now fit: it goes to backoff rather than
waiting in unschedulable for an event that has already passed. This is conservative: it may
retry a pod the event could not help, but never strands one. An update to the pod itself while
it is in flight has the same effect for that pod alone.

**Backoff** lasts ``initial_backoff * 2**(attempts-1)`` capped at ``max_backoff``, then scaled
by a factor drawn uniformly from ``[1 - jitter, 1 + jitter]`` (so a capped pod waits up to
``max_backoff * (1 + jitter)``). The jitter spreads pods that failed together (a node went
away) so they do not return as one thundering herd; the RNG is injectable for tests. Expiry is
computed once, when the pod fails, from the clock's ``monotonic()``; a pod that sat in
unschedulable past its expiry goes straight to active when an event moves it.

**Invalid annotations.** A pod whose ``gpusched.io/priority`` annotation does not parse is
gated with ``info.error`` set to the :class:`~gpusched.annotations.AnnotationError` message
(and a placeholder lowest priority). Trying it would be wrong (its priority is unknown) and
retrying it pointless, so it waits, never popped, until an update fixes the annotation.
:meth:`~SchedulingQueue.add` and :meth:`~SchedulingQueue.update` return the info so that the
caller can report ``info.error`` (a pod Event and a ``PodScheduled=False`` condition);
:meth:`~SchedulingQueue.invalid_pods` lists them for a periodic re-report.

**Complexity** (n pods held): ``add``, ``update``, ``delete``, ``pop``, ``activate`` per pod:
O(log n) (``SortedList`` plus a dict index by uid); ``flush_backoff_completed`` and
``flush_unschedulable_left_over``: O(k log n) for the k pods moved (the unschedulable map
keeps insertion order, which is the order pods entered it, so the scan stops at the first one
not yet due); ``on_event``: O(m log n) for the m pods whose rejecting plugins care about the
event (an index from plugin to pods), O(u) for the wildcard event.

Sorted structures hold ``(key, seq, info)`` tuples in a ``SortedList`` rather than infos in a
``SortedKeyList(key=sort_key)``: the key is computed once, on insertion, so removal never
re-evaluates a sort key that might read state which has changed since (``SortedKeyList``
recomputes ``key(value)`` to find the value it removes). ``seq`` (creation order) makes
every key unique, so the order is total and the info itself is never compared.

Everything here runs on the event loop's thread; no method awaits except :meth:`pop` and
:meth:`run`, so each operation is atomic with respect to other tasks.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from sortedcontainers import SortedList

from gpusched.annotations import PRIORITY_LEVELS, AnnotationError, parse_priority
from gpusched.clock import Clock

__all__ = [
    "ACTIVE",
    "BACKOFF",
    "DEFAULT_INITIAL_BACKOFF",
    "DEFAULT_MAX_BACKOFF",
    "DEFAULT_MAX_IN_UNSCHEDULABLE",
    "GATED",
    "IN_FLIGHT",
    "QUEUES",
    "UNSCHEDULABLE",
    "WILDCARD_EVENT",
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
"""An event that moves every unschedulable pod, whatever rejected it."""

DEFAULT_INITIAL_BACKOFF: Final = 1.0
DEFAULT_MAX_BACKOFF: Final = 10.0
DEFAULT_MAX_IN_UNSCHEDULABLE: Final = 300.0

_LOWEST_PRIORITY: Final = PRIORITY_LEVELS[-1]
# Metadata that changes without changing what the pod asks for (upstream isPodUpdated).
_IGNORED_METADATA: Final = frozenset(
    {"resourceVersion", "generation", "managedFields", "finalizers"}
)


class QueueClosed(Exception):
    """Raised by :meth:`SchedulingQueue.pop` once the queue is closed: the scheduler stops."""


@dataclass(slots=True, eq=False)
class QueuedPodInfo:
    """A pending pod and what the queue knows about it (upstream ``framework.QueuedPodInfo``).

    Times are the clock's ``monotonic()`` seconds. Compared by identity: one instance follows
    a pod from its first ``add`` to its removal, across every attempt. The queue does not copy
    ``pod``; treat it as immutable (replace it through :meth:`SchedulingQueue.update`).
    """

    pod: dict[str, Any]
    """The pod as the API returned it (latest version the queue has applied)."""
    key: str
    """``namespace/name``."""
    uid: str
    """``metadata.uid``: the queue's identity for the pod."""
    timestamp: float
    """When the pod was first added: the FIFO tie-break of :func:`default_sort_key`."""
    seq: int
    """Creation order within this queue: the final tie-break, making every sort key unique."""
    priority: int
    """gpusched priority, 0 (highest) to 4, from ``gpusched.io/priority`` (4 when invalid)."""
    pod_priority: int
    """``spec.priority`` (from the PriorityClass), 0 when absent; higher goes first."""
    gated: bool = False
    """Held back before any attempt: ``spec.schedulingGates`` non-empty, or ``error`` set."""
    error: str | None = None
    """Why a gpusched annotation is invalid, for the scheduler to report; None when valid."""
    initial_attempt_timestamp: float | None = None
    """When the pod first became active (ungated); None until then. For latency metrics."""
    attempts: int = 0
    """Times popped; drives the backoff."""
    cycle: int = 0
    """The scheduling cycle of the latest pop (cycles count from 1; 0 = never popped)."""
    unschedulable_plugins: set[str] = field(default_factory=set)
    """Plugins that rejected the latest attempt. Cleared by ``pop``; the scheduler fills it."""
    pending_plugins: set[str] = field(default_factory=set)
    """Plugins that made the latest attempt wait (e.g. a gang not yet complete); an event
    they care about moves the pod to active without backoff. Cleared by ``pop``."""
    backoff_expiry: float | None = None
    """When the current backoff ends; None before the first failure."""
    unschedulable_since: float | None = None
    """When the pod last entered the unschedulable map (for the leftover flush)."""


SortKey = Callable[[QueuedPodInfo], tuple[Any, ...]]
"""A QueueSort plugin's ordering: smaller keys pop first. Must be a pure function of fields
that change only through the queue (pod, priorities, timestamp, key)."""


def default_sort_key(info: QueuedPodInfo) -> tuple[int, int, float, str]:
    """gpusched priority ascending (0 first), ``spec.priority`` descending, FIFO, then key."""
    return (info.priority, -info.pod_priority, info.timestamp, info.key)


@dataclass(slots=True, frozen=True)
class _Facts:
    """What the queue derives from a pod object."""

    uid: str
    key: str
    priority: int
    pod_priority: int
    gated: bool
    error: str | None


def _facts(pod: Mapping[str, Any]) -> _Facts:
    meta = pod.get("metadata") or {}
    uid = meta.get("uid")
    if not uid:
        raise ValueError(f"pod {meta.get('name')!r} has no metadata.uid; the queue keys by uid")
    key = f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}"
    spec = pod.get("spec") or {}
    error = None
    try:
        priority = parse_priority(pod)
    except AnnotationError as exc:
        priority, error = _LOWEST_PRIORITY, str(exc)
    gated = bool(spec.get("schedulingGates")) or error is not None
    return _Facts(str(uid), key, priority, int(spec.get("priority") or 0), gated, error)


def _apply(info: QueuedPodInfo, pod: dict[str, Any], facts: _Facts) -> None:
    info.pod = pod
    info.key = facts.key
    info.priority = facts.priority
    info.pod_priority = facts.pod_priority
    info.gated = facts.gated
    info.error = facts.error


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

    ``event_interest`` maps an event name to the plugins that registered for it (the framework
    builds it from the plugins' enqueue extensions). None means every event interests every
    plugin, which is always correct but retries more; with a map, an event it does not name
    moves nothing (the 5-minute flush still does). :data:`WILDCARD_EVENT` moves everything.
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
        self._seq = itertools.count()
        self._active: Any = SortedList()  # of _Entry (sort key, seq, info)
        self._active_index: dict[str, _Entry] = {}
        self._backoff: Any = SortedList()  # of _Entry (expiry, seq, info)
        self._backoff_index: dict[str, _Entry] = {}
        self._unschedulable: dict[str, QueuedPodInfo] = {}  # in order of unschedulable_since
        self._by_plugin: dict[str, set[str]] = {}  # rejecting plugin -> uids in unschedulable
        self._gated: dict[str, QueuedPodInfo] = {}
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

    def invalid_pods(self) -> list[QueuedPodInfo]:
        """Gated pods held for a malformed annotation (``info.error``), to report them."""
        return [info for info in self._gated.values() if info.error is not None]

    # -- pods from the informer ----------------------------------------------------------

    def add(self, pod: dict[str, Any]) -> QueuedPodInfo:
        """A new pending pod: to active, or gated. O(log n).

        A pod the queue already holds (the informer re-listed) is treated as an update.
        Returns the info; check ``info.error`` and report it.
        """
        facts = _facts(pod)
        if self.get(facts.uid) is not None:
            return self.update(None, pod)
        now = self._clock.monotonic()
        info = QueuedPodInfo(
            pod=pod,
            key=facts.key,
            uid=facts.uid,
            timestamp=now,
            seq=next(self._seq),
            priority=facts.priority,
            pod_priority=facts.pod_priority,
        )
        _apply(info, pod, facts)
        if info.gated:
            self._gated[info.uid] = info
        else:
            self._push_active(info, now)
        return info

    def update(self, old: dict[str, Any] | None, new: dict[str, Any]) -> QueuedPodInfo:
        """A pending pod changed. O(log n).

        The queue compares ``new`` with the version it holds (the one the pod's last attempt
        judged; informer events may coalesce, so ``old`` can be newer than that). ``old`` is
        accepted so the method plugs into an update handler, and is otherwise unused.

        - active or backoff: the new version replaces the old (re-sorted if its key changed);
        - unschedulable: if anything but status and bookkeeping metadata changed, the pod may
          now fit: to backoff if still backing off, else active; a status-only update leaves it;
        - gated: to active (or backoff) once neither a gate nor an invalid annotation holds it;
        - in flight: kept aside and applied when the pod returns; a relevant change sends it
          to backoff instead of unschedulable then;
        - unknown: added (upstream does the same). The caller must not route updates for
          pods it has assumed or bound here.

        A change that gates the pod (an invalid annotation) moves it to gated from anywhere.
        """
        facts = _facts(new)
        uid = facts.uid
        now = self._clock.monotonic()
        flight = self._in_flight.get(uid)
        if flight is not None:
            if _may_change_scheduling(flight.info.pod, new):  # vs what the cycle judges
                flight.moved = True
            flight.latest = new
            return flight.info
        if uid in self._active_index:
            info = self._remove_active(uid)
            _apply(info, new, facts)
            if info.gated:
                self._gated[uid] = info
            else:
                self._push_active(info, now)
            return info
        if uid in self._backoff_index:
            info = self._remove_backoff(uid)
            _apply(info, new, facts)
            if info.gated:
                self._gated[uid] = info
            else:
                self._push_backoff(info)
            return info
        if uid in self._unschedulable:
            info = self._unschedulable[uid]
            if not _may_change_scheduling(info.pod, new):
                info.pod = new  # status only: same facts, stays in place
                return info
            self._remove_unschedulable(uid)
            _apply(info, new, facts)
            if info.gated:
                self._gated[uid] = info
            else:
                self._requeue(info, now)
            return info
        if uid in self._gated:
            info = self._gated[uid]
            _apply(info, new, facts)
            if not info.gated:
                del self._gated[uid]
                self._requeue(info, now)
            return info
        return self.add(new)

    def delete(self, pod: Mapping[str, Any]) -> bool:
        """The pod is gone (deleted, or assigned by someone): forget it. O(log n).

        An in-flight pod is marked so that returning it drops it. Returns whether the queue
        knew the pod.
        """
        uid = _facts(pod).uid
        if uid in self._active_index:
            self._remove_active(uid)
        elif uid in self._backoff_index:
            self._remove_backoff(uid)
        elif uid in self._unschedulable:
            self._remove_unschedulable(uid)
        elif uid in self._gated:
            del self._gated[uid]
        elif uid in self._in_flight:
            self._in_flight[uid].deleted = True
        else:
            return False
        return True

    # -- the scheduling loop -------------------------------------------------------------

    async def pop(self) -> QueuedPodInfo:
        """Wait for an active pod and take the head; it is in flight until returned or done.

        Increments the scheduling cycle and ``info.attempts`` and clears the info's
        unschedulable and pending plugins for the scheduler to fill. Raises
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
        self._in_flight[info.uid] = _Flight(info, self._cycle)
        return info

    def add_unschedulable(self, info: QueuedPodInfo, cycle: int | None = None) -> str | None:
        """The pod's attempt failed: rejected by ``info.unschedulable_plugins`` (or made to
        wait by ``info.pending_plugins``), which the scheduler set. O(log n).

        ``cycle`` is the cycle it was popped in (default ``info.cycle``). It goes to backoff if
        a move request arrived since that cycle began, an update or ``activate`` arrived while
        it was in flight, or no plugin is named (an unexplained failure); otherwise to
        unschedulable, to wait for an event its plugins care about. Ends the flight. Returns
        where it went, or None if it was deleted while in flight. Raises ValueError if the pod
        is not in flight (not popped, or already returned).
        """
        flight = self._end_flight(info)
        if flight is None:
            return None
        now = self._clock.monotonic()
        info.backoff_expiry = now + self._backoff_seconds(info.attempts)
        if info.gated:
            self._gated[info.uid] = info
            return GATED
        cycle = info.cycle if cycle is None else cycle
        rejected = bool(info.unschedulable_plugins or info.pending_plugins)
        if flight.moved or self._move_request_cycle >= cycle or not rejected:
            self._push_backoff(info)
            return BACKOFF
        self._put_unschedulable(info, now)
        return UNSCHEDULABLE

    def requeue_after_error(self, info: QueuedPodInfo) -> str | None:
        """The attempt failed for a reason other than the pod not fitting (an error in a
        plugin, a failed Binding or Lease write): back to backoff, whatever happened
        meanwhile. Clears the info's plugins. Ends the flight. O(log n).

        Returns where it went (backoff, or gated if an update gated it), or None if it was
        deleted while in flight. Raises ValueError if the pod is not in flight.
        """
        flight = self._end_flight(info)
        if flight is None:
            return None
        info.unschedulable_plugins = set()
        info.pending_plugins = set()
        info.backoff_expiry = self._clock.monotonic() + self._backoff_seconds(info.attempts)
        if info.gated:
            self._gated[info.uid] = info
            return GATED
        self._push_backoff(info)
        return BACKOFF

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
        ``event``, and for which ``hint(info)`` is true when given (upstream's preCheck; a hint
        that raises counts as true, so that a bug never strands a pod). It goes to backoff if
        still backing off, else active; to active at once if a waiting (pending) plugin is
        interested. If any plugin is interested, records a move request for in-flight pods.
        O(m log n) for m candidate pods.
        """
        interest = self._interest(event)
        if interest is not None and not interest:
            return 0
        self._move_request_cycle = self._cycle
        if interest is None:
            candidates = list(self._unschedulable.values())
        else:
            uids: set[str] = set()
            for plugin in interest:
                uids |= self._by_plugin.get(plugin, set())
            candidates = [self._unschedulable[uid] for uid in uids]
        now = self._clock.monotonic()
        moved = 0
        for info in candidates:
            if hint is not None and not self._hint_says_move(hint, info, event):
                continue
            self._remove_unschedulable(info.uid)
            immediate = interest is not None and not interest.isdisjoint(info.pending_plugins)
            self._requeue(info, now, immediate=immediate)
            moved += 1
        return moved

    def activate(self, uids: Iterable[str]) -> int:
        """Move these pods to active now, skipping backoff (upstream ``Activate``; gangs pull
        in their siblings). Pods in unschedulable or backoff move; an in-flight pod goes to
        backoff rather than unschedulable when returned; others are left. O(log n) each.
        Returns the pods moved."""
        now = self._clock.monotonic()
        moved = 0
        for uid in uids:
            if uid in self._unschedulable:
                self._push_active(self._remove_unschedulable(uid), now)
            elif uid in self._backoff_index:
                self._push_active(self._remove_backoff(uid), now)
            elif uid in self._in_flight:
                self._in_flight[uid].moved = True
                continue
            else:
                continue
            moved += 1
        return moved

    def flush_backoff_completed(self) -> int:
        """Move pods whose backoff has expired to active. O(k log n) for k pods moved."""
        now = self._clock.monotonic()
        moved = 0
        while self._backoff and self._backoff[0][0] <= now:
            entry: _Entry = self._backoff.pop(0)
            info = entry[2]
            del self._backoff_index[info.uid]
            self._push_active(info, now)
            moved += 1
        return moved

    def flush_unschedulable_left_over(self) -> int:
        """Move pods unschedulable for ``max_in_unschedulable`` seconds or more to backoff or
        active: the safety net for an event that was missed or never registered. Unlike
        upstream it records no move request (a timeout is no cluster change).
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
            self._requeue(info, now)
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
            _apply(info, flight.latest, _facts(flight.latest))
        return flight

    def _requeue(self, info: QueuedPodInfo, now: float, *, immediate: bool = False) -> None:
        """To backoff if still backing off (and not ``immediate``), else to active."""
        if not immediate and info.backoff_expiry is not None and info.backoff_expiry > now:
            self._push_backoff(info)
        else:
            self._push_active(info, now)

    def _push_active(self, info: QueuedPodInfo, now: float) -> None:
        if info.initial_attempt_timestamp is None:
            info.initial_attempt_timestamp = now
        entry: _Entry = (self._sort_key(info), info.seq, info)
        self._active.add(entry)
        self._active_index[info.uid] = entry
        self._wakeup.set()

    def _remove_active(self, uid: str) -> QueuedPodInfo:
        entry = self._active_index.pop(uid)
        self._active.remove(entry)
        return entry[2]

    def _push_backoff(self, info: QueuedPodInfo) -> None:
        assert info.backoff_expiry is not None
        entry: _Entry = (info.backoff_expiry, info.seq, info)
        self._backoff.add(entry)
        self._backoff_index[info.uid] = entry

    def _remove_backoff(self, uid: str) -> QueuedPodInfo:
        entry = self._backoff_index.pop(uid)
        self._backoff.remove(entry)
        return entry[2]

    def _put_unschedulable(self, info: QueuedPodInfo, now: float) -> None:
        info.unschedulable_since = now
        self._unschedulable[info.uid] = info
        for plugin in info.unschedulable_plugins | info.pending_plugins:
            self._by_plugin.setdefault(plugin, set()).add(info.uid)

    def _remove_unschedulable(self, uid: str) -> QueuedPodInfo:
        info = self._unschedulable.pop(uid)
        for plugin in info.unschedulable_plugins | info.pending_plugins:
            uids = self._by_plugin[plugin]
            uids.discard(uid)
            if not uids:
                del self._by_plugin[plugin]
        return info

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
            assert not info.gated
            assert info.initial_attempt_timestamp is not None
            queued.append(info)
        for uid, entry in self._backoff_index.items():
            expiry, seq, info = entry
            assert info.uid == uid
            assert seq == info.seq
            assert expiry == info.backoff_expiry
            assert self._backoff[self._backoff.bisect_left(entry)] is entry
            assert not info.gated
            assert info.attempts > 0
            queued.append(info)
        since = float("-inf")
        for uid, info in self._unschedulable.items():
            assert info.uid == uid
            assert not info.gated
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
            queued.append(info)
        for uid, flight in self._in_flight.items():
            assert flight.info.uid == uid
            assert flight.cycle == flight.info.cycle
            assert 0 < flight.cycle <= self._cycle
            queued.append(flight.info)
        assert len({id(info) for info in queued}) == len(queued), "a pod held twice"
        assert len({info.uid for info in queued}) == len(queued), "a uid held twice"
        for info in queued:  # an in-flight pod's update waits in its _Flight
            facts = _facts(info.pod)
            assert (facts.uid, facts.key, facts.priority, facts.pod_priority) == (
                info.uid,
                info.key,
                info.priority,
                info.pod_priority,
            )
            assert (facts.gated, facts.error) == (info.gated, info.error)
        assert self._move_request_cycle <= self._cycle
        assert sum(self.pending_pods().values()) == len(self)
        assert len(self) + len(self._in_flight) == len(queued)
