"""The simulated API server's storage: etcd's revision model plus the apiserver's watch cache.

One global, strictly increasing revision numbers every write, as etcd does; an object's
``metadata.resourceVersion`` is the revision of its last write, and a list is consistent at the
revision current when it is served. Each *storage* (one per resource; core/v1 and
events.k8s.io/v1 events share one, as upstream) keeps:

- its live objects in a ``SortedDict`` by key (``namespace/name`` or ``name``), so lists come
  out in the order etcd returns them, and ``limit``/``continue`` pages are range scans;
- a bounded window of recent events (the watch cache). A watch from revision ``N`` replays the
  window after ``N``; when events after ``N`` were already evicted the watch fails with 410 Gone,
  exactly the condition a real server reports as "too old resource version". The window also
  lets a list page continue at the revision of its first page (``state_at``).

Objects are immutable once stored: an ``Entry`` holds the dict and its JSON encoding, made once
per write and reused by every GET, list and watch event that sends it. Handlers copy before
they modify (``Entry.copy()``).

Watchers are fed synchronously by the write that produces an event (asyncio gives us
atomicity for free); each watcher filters by namespace and selectors on the writer's side and
buffers encoded lines, like the cacher's per-watcher channel. A watcher that falls more than
``WATCHER_BUFFER`` events behind is terminated, as the cacher terminates blocked watchers; the
client re-watches from its last revision.

Complexity: get O(1); create/update/delete O(log n + w) for w watchers of the storage; list
O(n); a watch replay O(window).
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from sortedcontainers import SortedDict

from gpusched.sim.selectors import FieldSelector, LabelSelector

__all__ = [
    "WATCHER_BUFFER",
    "Entry",
    "Event",
    "Storage",
    "Store",
    "Watcher",
    "dumps",
]

WATCHER_BUFFER = 10_000
"""Events a watcher may have buffered before it is terminated as too slow."""


def dumps(obj: Any) -> bytes:
    """Compact UTF-8 JSON, as kube-apiserver writes it."""
    return orjson.dumps(obj)


class Entry:
    """A stored object version: the dict (never mutated) and its JSON encoding."""

    __slots__ = ("_raw", "obj")

    def __init__(self, obj: dict[str, Any], raw: bytes | None = None) -> None:
        self.obj = obj
        self._raw = raw

    @property
    def raw(self) -> bytes:
        if self._raw is None:
            self._raw = dumps(self.obj)
        return self._raw

    @property
    def rv(self) -> int:
        return int(self.obj["metadata"]["resourceVersion"])

    def copy(self) -> dict[str, Any]:
        """A deep, mutable copy (decoding the JSON is faster than ``copy.deepcopy``)."""
        result: dict[str, Any] = orjson.loads(self.raw)
        return result


@dataclass(slots=True)
class Event:
    """One write as the watch cache records it."""

    rv: int
    type: str  # ADDED | MODIFIED | DELETED
    key: str
    entry: Entry
    prev: Entry | None
    namespace: str
    # Selector inputs, computed once per event and shared by every watcher.
    labels: Mapping[str, str]
    fields: Mapping[str, str]
    prev_labels: Mapping[str, str] = field(default_factory=dict)
    prev_fields: Mapping[str, str] = field(default_factory=dict)
    _line: bytes | None = None

    def line(self) -> bytes:
        """``{"type": ..., "object": ...}\\n`` for watchers that want the event as is."""
        if self._line is None:
            self._line = b'{"type":"%s","object":%s}\n' % (self.type.encode(), self.entry.raw)
        return self._line


class Watcher:
    """One watch stream's server side: a filter and a buffer of encoded lines."""

    def __init__(
        self,
        storage: Storage,
        namespace: str | None,
        labels: LabelSelector | None,
        fields: FieldSelector | None,
        transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        self.storage = storage
        self.namespace = namespace
        self.label_selector = labels
        self.field_selector = fields
        self.transform = transform
        self.buffer: deque[bytes] = deque()
        self.closed = False
        self.close_reason = ""
        self._wakeup = asyncio.Event()

    def _passes(self, namespace: str, labels: Mapping[str, str], fields: Mapping[str, str]) -> bool:
        if self.namespace is not None and namespace != self.namespace:
            return False
        if self.label_selector is not None and not self.label_selector.matches(labels):
            return False
        return self.field_selector is None or self.field_selector.matches(fields)

    def offer(self, ev: Event) -> None:
        """Filter ``ev`` as ``cacheWatcher.convertToWatchEvent`` does and buffer it."""
        if self.closed:
            return
        cur = ev.type != "DELETED" and self._passes(ev.namespace, ev.labels, ev.fields)
        old = ev.prev is not None and self._passes(ev.namespace, ev.prev_labels, ev.prev_fields)
        if cur and old:
            line = self._encode(ev, "MODIFIED" if ev.type != "ADDED" else "ADDED", ev.entry)
        elif cur:
            line = self._encode(ev, "ADDED", ev.entry)
        elif old and ev.prev is not None:
            # Leaving the selection (or deleted): the previous content at the event's revision.
            if ev.type == "DELETED":
                line = self._encode(ev, "DELETED", ev.entry)
            else:
                prev = ev.prev.copy()
                prev["metadata"]["resourceVersion"] = str(ev.rv)
                line = self._encode(ev, "DELETED", Entry(prev))
        else:
            return
        self.push(line)

    def _encode(self, ev: Event, type_: str, entry: Entry) -> bytes:
        if self.transform is None and type_ == ev.type and entry is ev.entry:
            return ev.line()
        obj = self.transform(entry.obj) if self.transform else entry.obj
        raw = dumps(obj) if self.transform else entry.raw
        return b'{"type":"%s","object":%s}\n' % (type_.encode(), raw)

    def push(self, line: bytes) -> None:
        if self.closed:
            return
        if len(self.buffer) >= WATCHER_BUFFER:
            self.close("watcher fell too far behind")
            return
        self.buffer.append(line)
        self._wakeup.set()

    def close(self, reason: str = "") -> None:
        if not self.closed:
            self.closed = True
            self.close_reason = reason
            self.storage.watchers.discard(self)
            self._wakeup.set()

    async def wait(self) -> None:
        """Wait until a line is buffered or the watcher is closed."""
        if not self.buffer and not self.closed:
            self._wakeup.clear()
            await self._wakeup.wait()


class Storage:
    """Objects of one resource and the window of their recent events."""

    def __init__(
        self,
        name: str,
        fields_of: Callable[[dict[str, Any]], Mapping[str, str]],
        window: int,
    ) -> None:
        self.name = name
        self.fields_of = fields_of
        self.objects: SortedDict = SortedDict()  # key -> Entry
        self.history: deque[Event] = deque()
        self.window = window
        self.evicted_rv = 0
        """Revision of the newest event dropped from ``history`` (0: none dropped yet)."""
        self.watchers: set[Watcher] = set()

    def get(self, key: str) -> Entry | None:
        entry: Entry | None = self.objects.get(key)
        return entry

    def keys_from(self, start: str) -> Iterator[str]:
        keys: Iterator[str] = self.objects.irange(minimum=start)
        return keys

    def record(self, ev: Event) -> None:
        self.history.append(ev)
        while len(self.history) > self.window:
            self.evicted_rv = self.history.popleft().rv
        for w in list(self.watchers):
            w.offer(ev)

    def events_after(self, rv: int) -> list[Event] | None:
        """Events with revision > ``rv``, or None when some were evicted (410 Gone)."""
        if rv < self.evicted_rv:
            return None
        # History is ordered by revision; scan from the right since watches usually resume
        # from a recent revision.
        out: list[Event] = []
        for ev in reversed(self.history):
            if ev.rv <= rv:
                break
            out.append(ev)
        out.reverse()
        return out

    def oldest_rv(self) -> int:
        return self.history[0].rv if self.history else self.evicted_rv

    def _check(self, current_rv: int) -> None:
        """Assert every invariant of this storage (random-operation tests call it)."""
        previous = self.evicted_rv
        for ev in self.history:
            assert ev.rv > previous, f"{self.name}: history out of order at {ev.rv}"
            assert ev.rv <= current_rv
            previous = ev.rv
        assert len(self.history) <= self.window
        for key, entry in self.objects.items():
            meta = entry.obj["metadata"]
            name = meta["name"]
            expected = f"{meta['namespace']}/{name}" if meta.get("namespace") else name
            assert key == expected, f"{self.name}: key {key} holds {expected}"
            assert 0 < entry.rv <= current_rv
            assert json.loads(entry.raw) == entry.obj, f"{self.name}/{key}: encoding is stale"
        for w in self.watchers:
            assert not w.closed
            assert w.storage is self

    def state_at(self, rv: int) -> SortedDict | None:
        """The objects as they were at revision ``rv``, or None if the window is too short."""
        undo = self.events_after(rv)
        if undo is None:
            return None
        if not undo:
            return self.objects
        state = SortedDict(self.objects)
        for ev in reversed(undo):
            if ev.prev is None:
                state.pop(ev.key, None)
            else:
                state[ev.key] = ev.prev
        return state


class Store:
    """All storages and the global revision counter."""

    def __init__(self, window: int = 10_000) -> None:
        self.rv = 1
        self.window = window
        self.storages: dict[str, Storage] = {}
        self.on_delete: list[Callable[[str, Entry], None]] = []
        self.on_write: list[Callable[[str, Entry], None]] = []

    def storage(
        self, name: str, fields_of: Callable[[dict[str, Any]], Mapping[str, str]]
    ) -> Storage:
        st = self.storages.get(name)
        if st is None:
            st = self.storages[name] = Storage(name, fields_of, self.window)
        return st

    def _check(self) -> None:
        for st in self.storages.values():
            st._check(self.rv)

    def drop_storage(self, name: str) -> None:
        st = self.storages.pop(name, None)
        if st is not None:
            for w in list(st.watchers):
                w.close("resource removed")

    def _event(self, st: Storage, type_: str, key: str, entry: Entry, prev: Entry | None) -> Event:
        meta = entry.obj["metadata"]
        ev = Event(
            rv=self.rv,
            type=type_,
            key=key,
            entry=entry,
            prev=prev,
            namespace=meta.get("namespace", ""),
            labels=meta.get("labels") or {},
            fields=st.fields_of(entry.obj),
        )
        if prev is not None:
            ev.prev_labels = prev.obj["metadata"].get("labels") or {}
            ev.prev_fields = st.fields_of(prev.obj)
        return ev

    def write(self, st: Storage, key: str, obj: dict[str, Any]) -> Entry:
        """Create or replace ``key`` with ``obj`` at the next revision; returns the entry."""
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        entry = Entry(obj)
        prev = st.objects.get(key)
        st.objects[key] = entry
        st.record(self._event(st, "MODIFIED" if prev is not None else "ADDED", key, entry, prev))
        for hook in self.on_write:
            hook(st.name, entry)
        return entry

    def delete(self, st: Storage, key: str) -> Entry:
        """Remove ``key``; the DELETED event carries the last state at the delete's revision."""
        prev: Entry = st.objects.pop(key)
        self.rv += 1
        final = prev.copy()
        final["metadata"]["resourceVersion"] = str(self.rv)
        entry = Entry(final)
        ev = self._event(st, "DELETED", key, entry, prev)
        st.record(ev)
        for hook in self.on_delete:
            hook(st.name, entry)
        return entry
