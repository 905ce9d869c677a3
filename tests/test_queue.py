"""The scheduling queue: ordering, backoff, unschedulable pool, events, updates, PreEnqueue,
waiting pops, and a random-operation stress test against an independent model.

The queue is built as the scheduler builds it: ordered by the default profile's QueueSort key
(PrioritySort) and gated by its PreEnqueue plugins (PrioritySort, SchedulingGates)."""

from __future__ import annotations

import ast
import asyncio
import contextlib
import copy
import itertools
import random
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import gpusched.queue as queue_module
from gpusched.annotations import PRIORITY
from gpusched.clock import FakeClock
from gpusched.framework import Framework, Status, build_frameworks, default_config, in_tree
from gpusched.queue import (
    ACTIVE,
    BACKOFF,
    GATED,
    IN_FLIGHT,
    QUEUES,
    UNSCHEDULABLE,
    WILDCARD_EVENT,
    QueueClosed,
    QueuedPodInfo,
    SchedulingQueue,
    default_sort_key,
)

INTEREST = {
    "NodeAdd": {"Fit", "Topology"},
    "PodDelete": {"Fit"},
    "LeaseReleased": {"Gang"},
}
EVENTS = [*INTEREST, "NodeDelete", WILDCARD_EVENT]  # NodeDelete interests no plugin
PLUGINS = ["Fit", "Topology", "Gang", "Other"]  # Other cares about no event


def make_pod(
    name: str,
    *,
    priority: str | int | None = None,
    spec_priority: int | None = None,
    gates: tuple[str, ...] = (),
    namespace: str = "default",
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-{namespace}-{name}",
        "resourceVersion": "1",
        "labels": {"app": name},
    }
    if priority is not None:
        meta["annotations"] = {PRIORITY: str(priority)}
    spec: dict[str, Any] = {
        "schedulerName": "gpusched",
        "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
    }
    if spec_priority is not None:
        spec["priority"] = spec_priority
    if gates:
        spec["schedulingGates"] = [{"name": gate} for gate in gates]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": spec,
        "status": {"phase": "Pending"},
    }


def changed(pod: dict[str, Any], edit: Callable[[dict[str, Any]], object]) -> dict[str, Any]:
    """A new version of ``pod`` (as the informer delivers: a new object, resourceVersion+1)."""
    new = copy.deepcopy(pod)
    new["metadata"]["resourceVersion"] = str(int(new["metadata"]["resourceVersion"]) + 1)
    edit(new)
    return new


def status_only(pod: dict[str, Any]) -> dict[str, Any]:
    return changed(
        pod, lambda p: p["status"].update(conditions=[{"type": "PodScheduled", "status": "False"}])
    )


def relabelled(pod: dict[str, Any], value: str = "v2") -> dict[str, Any]:
    return changed(pod, lambda p: p["metadata"]["labels"].update(tier=value))


def annotated(pod: dict[str, Any], priority: str) -> dict[str, Any]:
    return changed(
        pod, lambda p: p["metadata"].setdefault("annotations", {}).update({PRIORITY: priority})
    )


def ungated(pod: dict[str, Any]) -> dict[str, Any]:
    return changed(pod, lambda p: p["spec"].pop("schedulingGates"))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


FRAMEWORK: Framework = build_frameworks(default_config(), in_tree())["gpusched"]


def make_queue(clock: FakeClock, **kwargs: Any) -> SchedulingQueue:
    """A queue ordered and gated by the default profile's plugins."""
    kwargs.setdefault("sort_key", FRAMEWORK.queue_sort_key)
    kwargs.setdefault("pre_enqueue", {"gpusched": FRAMEWORK.run_pre_enqueue})
    return SchedulingQueue(clock, **kwargs)


@pytest.fixture
def q(clock: FakeClock) -> SchedulingQueue:
    return make_queue(clock, jitter=0.0, event_interest=INTEREST)


@pytest.fixture
async def runner(q: SchedulingQueue, clock: FakeClock) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(q.run())
    await clock.wait_for_sleepers()
    yield task
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def popped(q: SchedulingQueue) -> QueuedPodInfo:
    info = q.pop_nowait()
    assert info is not None
    return info


def fail(
    q: SchedulingQueue, pod: dict[str, Any], *plugins: str, pending: tuple[str, ...] = ()
) -> QueuedPodInfo:
    """Add ``pod``, pop it (it must be the head) and return it as rejected by ``plugins``."""
    q.add(pod)
    info = popped(q)
    assert info.pod is pod
    info.unschedulable_plugins.update(plugins)
    info.pending_plugins.update(pending)
    q.add_unschedulable(info, info.cycle)
    return info


# -- ordering ------------------------------------------------------------------------------

Row = tuple[str, str | None, int | None, float]  # name, gpusched priority, spec.priority, added at


@pytest.mark.parametrize(
    ("rows", "order"),
    [
        pytest.param(
            [("low", "3", None, 0), ("high", "0", None, 0), ("mid", "1", None, 0)],
            ["high", "mid", "low"],
            id="gpusched-priority-ascending",
        ),
        pytest.param(
            [("four", "4", None, 0), ("unset", None, None, 0), ("two", " 2 ", None, 0)],
            ["unset", "two", "four"],
            id="absent-annotation-is-0",
        ),
        pytest.param(
            [("a", "1", 10, 0), ("b", "1", 1000, 0), ("c", "1", None, 0), ("d", "1", -5, 0)],
            ["b", "a", "c", "d"],
            id="spec-priority-descending",
        ),
        pytest.param(
            [("x", "2", 1_000_000, 0), ("y", "1", -5, 0)],
            ["y", "x"],
            id="gpusched-priority-before-spec-priority",
        ),
        pytest.param(
            [("c", None, None, 0), ("a", None, None, 1), ("b", None, None, 2)],
            ["c", "a", "b"],
            id="fifo-within-equal-priorities",
        ),
        pytest.param(
            [("late-high", "0", None, 5), ("early-low", "1", None, 0)][::-1],
            ["late-high", "early-low"],
            id="priority-before-fifo",
        ),
        pytest.param(
            [("b", None, None, 0), ("a", None, None, 0)], ["a", "b"], id="key-breaks-exact-ties"
        ),
    ],
)
async def test_pop_order(
    q: SchedulingQueue, clock: FakeClock, rows: list[Row], order: list[str]
) -> None:
    for name, priority, spec_priority, added_at in rows:
        await clock.advance(added_at - clock.monotonic())
        q.add(make_pod(name, priority=priority, spec_priority=spec_priority))
        q._check()
    assert [popped(q).pod["metadata"]["name"] for _ in rows] == order
    assert q.pop_nowait() is None
    q._check()


def test_default_sort_key_is_fifo(clock: FakeClock) -> None:
    info = QueuedPodInfo(pod={}, key="ns/p", uid="u", timestamp=2.5, seq=7)
    assert default_sort_key(info) == (2.5, 7)
    q = SchedulingQueue(clock)  # no QueueSort, no PreEnqueue: FIFO, nothing gated
    for name in ("b", "a", "c"):
        q.add(make_pod(name, priority="x" if name == "a" else "4", gates=("g",)))
    assert [popped(q).key for _ in range(3)] == ["default/b", "default/a", "default/c"]
    q._check()


def test_custom_sort_key_with_ties_broken_in_creation_order(clock: FakeClock) -> None:
    q = SchedulingQueue(clock, sort_key=lambda info: (-info.pod["spec"]["priority"],), jitter=0.0)
    for name, spec_priority in [("a", 1), ("b", 5), ("c", 1), ("d", 5)]:
        q.add(make_pod(name, priority="4" if name == "b" else "0", spec_priority=spec_priority))
    assert [popped(q).key for _ in range(4)] == ["default/b", "default/d", "default/a", "default/c"]


def test_info_fields_on_add_and_pop(q: SchedulingQueue, clock: FakeClock) -> None:
    info = q.add(make_pod("p", priority="2", spec_priority=7, namespace="team"))
    assert (info.key, info.uid) == ("team/p", "uid-team-p")
    assert (info.timestamp, info.initial_attempt_timestamp, info.attempts) == (0.0, 0.0, 0)
    assert not info.gated
    assert (info.error, info.gating_plugin) == (None, None)
    assert q.location(info.uid) == ACTIVE
    assert q.get(info.uid) is info
    got = popped(q)
    assert got is info
    assert (info.attempts, info.cycle, q.scheduling_cycle) == (1, 1, 1)
    assert q.location(info.uid) == IN_FLIGHT
    assert q.get(info.uid) is info
    assert len(q) == 0
    q._check()


# -- backoff -------------------------------------------------------------------------------


async def test_backoff_doubles_from_initial_and_caps_at_max(
    q: SchedulingQueue, clock: FakeClock
) -> None:
    info = q.add(make_pod("p"))
    waits = []
    for _ in range(7):
        assert popped(q) is info
        assert q.requeue_after_error(info) == BACKOFF
        assert info.backoff_expiry is not None
        wait = info.backoff_expiry - clock.monotonic()
        waits.append(wait)
        await clock.advance(wait / 2)
        assert q.pop_nowait() is None, "popped before its backoff expired"
        assert q.location(info.uid) == BACKOFF
        await clock.advance(wait / 2)
        assert q.flush_backoff_completed() == 1
        assert q.location(info.uid) == ACTIVE
        q._check()
    assert waits == [1, 2, 4, 8, 10, 10, 10]


async def test_backoff_does_not_hold_up_other_pods(q: SchedulingQueue) -> None:
    failing = q.add(make_pod("failing", priority="0"))
    assert popped(q) is failing
    q.requeue_after_error(failing)
    q.add(make_pod("low", priority="4"))
    assert popped(q).key == "default/low"


def test_jitter_stays_within_bounds_and_spreads(clock: FakeClock) -> None:
    def expiries(seed: int) -> list[float]:
        q = SchedulingQueue(clock, jitter=0.1, rng=random.Random(seed))
        infos = [q.add(make_pod(f"p{i:03}")) for i in range(200)]
        for info in infos:
            assert popped(q) is info
            q.requeue_after_error(info)
        q._check()
        return [info.backoff_expiry or 0.0 for info in infos]

    first = expiries(7)
    assert all(0.9 <= e <= 1.1 for e in first)
    assert max(first) - min(first) > 0.15, "jitter should spread a herd over most of ±10%"
    assert expiries(7) == first, "the same seed gives the same backoffs"
    assert expiries(8) != first


async def test_jitter_applies_to_the_capped_backoff(clock: FakeClock) -> None:
    q = SchedulingQueue(clock, jitter=0.1, rng=random.Random(1))
    info = q.add(make_pod("p"))
    for attempt in range(1, 9):
        assert popped(q) is info
        q.requeue_after_error(info)
        assert info.backoff_expiry is not None
        wait = info.backoff_expiry - clock.monotonic()
        base = min(2.0 ** (attempt - 1), 10.0)
        assert base * 0.9 <= wait <= base * 1.1
        await clock.advance(wait + 1e-6)


# -- unschedulable pool and events ---------------------------------------------------------


async def test_event_moves_only_pods_whose_plugins_care(
    q: SchedulingQueue, clock: FakeClock
) -> None:
    fit = fail(q, make_pod("fit"), "Fit")
    gang = fail(q, make_pod("gang"), "Gang")
    other = fail(q, make_pod("other"), "Other", "Topology")
    assert q.pending_pods() == {ACTIVE: 0, BACKOFF: 0, UNSCHEDULABLE: 3, GATED: 0}

    assert q.on_event("NodeDelete") == 0  # no plugin registered for it
    assert q.on_event("Unknown") == 0
    assert q.on_event("LeaseReleased", hint=lambda info: False) == 0
    assert q.pending_pods()[UNSCHEDULABLE] == 3

    assert q.on_event("PodDelete") == 1  # Fit only
    assert q.location(fit.uid) == BACKOFF  # still backing off (1 s)
    await clock.advance(1.0)
    assert q.on_event("LeaseReleased") == 1
    assert q.location(gang.uid) == ACTIVE  # backoff already over
    assert q.location(other.uid) == UNSCHEDULABLE
    assert q.on_event("NodeAdd") == 1  # Topology, one of its plugins
    assert q.location(other.uid) == ACTIVE
    q._check()


def test_wildcard_event_moves_every_unschedulable_pod(q: SchedulingQueue) -> None:
    infos = [fail(q, make_pod(f"p{i}"), plugin) for i, plugin in enumerate(PLUGINS)]
    assert q.on_event(WILDCARD_EVENT) == len(PLUGINS)
    assert {q.location(info.uid) for info in infos} == {BACKOFF}
    q._check()


def test_no_interest_map_means_every_event_moves_every_pod(clock: FakeClock) -> None:
    q = SchedulingQueue(clock, jitter=0.0)
    info = fail(q, make_pod("p"), "Anything")
    assert q.on_event("SomethingHappened") == 1
    assert q.location(info.uid) == BACKOFF


def test_hint_filters_and_a_failing_hint_moves_the_pod(q: SchedulingQueue) -> None:
    a = fail(q, make_pod("a"), "Fit")
    b = fail(q, make_pod("b"), "Fit")
    c = fail(q, make_pod("c"), "Fit")
    assert q.on_event("NodeAdd", hint=lambda info: info is a) == 1
    assert (q.location(a.uid), q.location(b.uid), q.location(c.uid)) == (
        BACKOFF,
        UNSCHEDULABLE,
        UNSCHEDULABLE,
    )

    def broken(info: QueuedPodInfo) -> bool:
        if info is b:
            raise RuntimeError("bug in a hint")
        return False

    assert q.on_event("NodeAdd", hint=broken) == 1
    assert (q.location(b.uid), q.location(c.uid)) == (BACKOFF, UNSCHEDULABLE)
    q._check()


def test_pending_plugin_event_skips_backoff(q: SchedulingQueue) -> None:
    waiting = fail(q, make_pod("waiting"), pending=("Gang",))
    rejected = fail(q, make_pod("rejected"), "Gang")
    assert q.on_event("LeaseReleased") == 2
    assert q.location(waiting.uid) == ACTIVE
    assert q.location(rejected.uid) == BACKOFF
    q._check()


def test_failure_without_plugins_goes_to_backoff(q: SchedulingQueue) -> None:
    info = fail(q, make_pod("p"))
    assert q.location(info.uid) == BACKOFF


def test_pop_clears_plugins_of_the_previous_attempt(q: SchedulingQueue) -> None:
    info = fail(q, make_pod("p"), "Fit", pending=("Gang",))
    q.activate([info.uid])
    assert popped(q) is info
    assert (info.unschedulable_plugins, info.pending_plugins) == (set(), set())


async def test_leftover_flush_after_five_minutes(
    q: SchedulingQueue, clock: FakeClock, runner: asyncio.Task[None]
) -> None:
    await clock.advance(5.0)
    info = fail(q, make_pod("p"), "Other")  # no event will ever move it
    await clock.advance(299.0)  # t=304: unschedulable for 299 s; run() last looked at t=300
    assert q.location(info.uid) == UNSCHEDULABLE
    await clock.advance(26.0)  # t=330: the first 30 s tick after 5 minutes
    assert q.location(info.uid) == ACTIVE
    q._check()


async def test_leftover_flush_moves_only_due_pods_in_entry_order(
    q: SchedulingQueue, clock: FakeClock
) -> None:
    old = fail(q, make_pod("old"), "Other")
    await clock.advance(200.0)
    young = fail(q, make_pod("young"), "Other")
    await clock.advance(100.0)
    assert q.flush_unschedulable_left_over() == 1
    assert (q.location(old.uid), q.location(young.uid)) == (ACTIVE, UNSCHEDULABLE)
    await clock.advance(200.0)
    assert q.flush_unschedulable_left_over() == 1
    assert q.location(young.uid) == ACTIVE
    q._check()


# -- the move-request race -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("event", "when", "expected"),
    [
        pytest.param("NodeAdd", "during", BACKOFF, id="interesting-event-during-the-cycle"),
        pytest.param("NodeAdd", "before", UNSCHEDULABLE, id="interesting-event-before-the-cycle"),
        pytest.param("NodeDelete", "during", UNSCHEDULABLE, id="uninteresting-event-during"),
        pytest.param(WILDCARD_EVENT, "during", BACKOFF, id="wildcard-during"),
    ],
)
def test_move_request_during_a_cycle_sends_the_pod_to_backoff(
    q: SchedulingQueue, event: str, when: str, expected: str
) -> None:
    if when == "before":
        q.on_event(event)
    info = q.add(make_pod("p"))
    assert popped(q) is info
    if when == "during":
        q.on_event(event)  # the event the snapshot of this cycle missed
    info.unschedulable_plugins.add("Other")  # even a plugin that does not care
    assert q.add_unschedulable(info, info.cycle) == expected
    q._check()


def test_move_request_compares_cycles(q: SchedulingQueue) -> None:
    first = q.add(make_pod("first", priority="0"))
    second = q.add(make_pod("second", priority="1"))
    assert popped(q) is first  # cycle 1
    assert popped(q) is second  # cycle 2
    q.on_event("NodeAdd")  # recorded at cycle 2: both were in flight
    first.unschedulable_plugins.add("Fit")
    assert q.add_unschedulable(first, 1) == BACKOFF
    second.unschedulable_plugins.add("Fit")
    assert q.add_unschedulable(second) == BACKOFF  # defaults to info.cycle
    q.activate([first.uid])
    assert popped(q) is first  # cycle 3, after the event
    first.unschedulable_plugins.add("Fit")
    assert q.add_unschedulable(first, first.cycle) == UNSCHEDULABLE
    q._check()


# -- updates -------------------------------------------------------------------------------


async def test_update_of_unschedulable_pod(q: SchedulingQueue, clock: FakeClock) -> None:
    pod = make_pod("p")
    info = fail(q, pod, "Other")
    newer = status_only(pod)
    assert q.update(pod, newer) is info
    assert q.location(info.uid) == UNSCHEDULABLE, "a status-only update cannot help"
    assert info.pod is newer
    q._check()

    labelled = relabelled(newer)
    q.update(newer, labelled)
    assert q.location(info.uid) == BACKOFF, "may fit now, but still backing off"
    assert info.pod is labelled
    q._check()
    q.delete(labelled)

    await clock.advance(1.0)
    again = fail(q, make_pod("q"), "Other")
    await clock.advance(1.0)
    q.update(again.pod, changed(again.pod, lambda p: p["spec"].update(nodeSelector={"a": "b"})))
    assert q.location(again.uid) == ACTIVE, "backoff over: straight to active"
    q._check()


def test_update_reorders_an_active_pod(q: SchedulingQueue) -> None:
    a = make_pod("a", priority="2")
    q.add(a)
    q.add(make_pod("b", priority="1"))
    q.update(a, annotated(a, "0"))
    assert popped(q).key == "default/a"
    assert popped(q).key == "default/b"
    q._check()


def test_update_in_backoff_keeps_the_expiry(q: SchedulingQueue) -> None:
    pod = make_pod("p")
    info = fail(q, pod)
    expiry = info.backoff_expiry
    newer = relabelled(pod)
    q.update(pod, newer)
    assert (q.location(info.uid), info.backoff_expiry, info.pod) == (BACKOFF, expiry, newer)
    q._check()


@pytest.mark.parametrize("state", [ACTIVE, BACKOFF, UNSCHEDULABLE])
def test_invalid_priority_annotation_gates_the_pod_until_fixed(
    q: SchedulingQueue, state: str
) -> None:
    pod = make_pod("p")
    info = q.add(pod)
    if state != ACTIVE:
        assert popped(q) is info
        info.unschedulable_plugins.add("Other")
        if state == UNSCHEDULABLE:
            q.add_unschedulable(info)
        else:
            q.requeue_after_error(info)
    assert q.location(info.uid) == state
    bad = annotated(pod, "urgent")
    assert q.update(pod, bad) is info
    assert q.location(info.uid) == GATED
    assert info.gated
    assert info.gating_plugin == "PrioritySort"
    assert info.unschedulable_plugins == {"PrioritySort"}
    assert PRIORITY in (info.error or "")
    assert q.pending_pods()[GATED] == 1
    q._check()
    fixed = annotated(bad, "3")
    q.update(bad, fixed)
    assert q.location(info.uid) == (ACTIVE if state == ACTIVE else BACKOFF)
    assert (info.gated, info.error, info.gating_plugin) == (False, None, None)
    q._check()


def test_pod_added_with_invalid_annotation_is_never_popped(q: SchedulingQueue) -> None:
    info = q.add(make_pod("p", priority="9"))
    assert info.error is not None
    assert "0 (highest) to 4" in info.error
    assert q.location(info.uid) == GATED
    assert q.pop_nowait() is None
    assert q.on_event(WILDCARD_EVENT) == 0
    assert q.activate([info.uid]) == 0
    assert q.flush_unschedulable_left_over() == 0
    assert q.location(info.uid) == GATED
    q._check()


async def test_scheduling_gates_hold_the_pod_until_removed(
    q: SchedulingQueue, clock: FakeClock
) -> None:
    pod = make_pod("p", gates=("example.com/quota",))
    info = q.add(pod)
    assert (info.gated, info.initial_attempt_timestamp) == (True, None)
    assert (info.gating_plugin, info.error) == (
        "SchedulingGates",
        "waiting for scheduling gates: [example.com/quota]",
    )
    assert q.pending_pods() == {ACTIVE: 0, BACKOFF: 0, UNSCHEDULABLE: 0, GATED: 1}
    await clock.advance(3.0)
    q.update(pod, status_only(pod))
    assert q.location(info.uid) == GATED
    q.update(pod, ungated(pod))
    assert q.location(info.uid) == ACTIVE, "never tried: no backoff"
    assert info.initial_attempt_timestamp == 3.0
    assert info.timestamp == 0.0
    q._check()


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        pytest.param(status_only, UNSCHEDULABLE, id="status-only"),
        pytest.param(relabelled, BACKOFF, id="labels"),
        pytest.param(lambda pod: annotated(pod, "x"), GATED, id="invalid-annotation"),
    ],
)
def test_update_while_in_flight_applies_on_return(
    q: SchedulingQueue, edit: Callable[[dict[str, Any]], dict[str, Any]], expected: str
) -> None:
    pod = make_pod("p")
    info = q.add(pod)
    assert popped(q) is info
    newer = edit(pod)
    assert q.update(pod, newer) is info
    assert info.pod is pod, "the running cycle keeps the version it started with"
    assert q.location(info.uid) == IN_FLIGHT
    q._check()
    info.unschedulable_plugins.add("Other")
    assert q.add_unschedulable(info) == expected
    assert info.pod is newer
    q._check()


def test_update_of_unknown_pod_adds_it_and_re_add_is_an_update(q: SchedulingQueue) -> None:
    pod = make_pod("p")
    info = q.update(None, pod)
    assert q.location(info.uid) == ACTIVE
    again = q.add(relabelled(pod))
    assert again is info
    assert len(q) == 1
    q._check()


# -- PreEnqueue -----------------------------------------------------------------------------


class Toggle:
    """A PreEnqueue callable whose verdict the test sets: ``None`` admits, a string rejects
    (as plugin "Quota"), an exception is raised."""

    def __init__(self) -> None:
        self.verdict: str | Exception | None = "quota exhausted"
        self.calls = 0

    def __call__(self, pod: dict[str, Any]) -> Status:
        self.calls += 1
        if isinstance(self.verdict, Exception):
            raise self.verdict
        if self.verdict is None:
            return Status.success()
        return Status.unschedulable(self.verdict, plugin="Quota")


def gate_queue(clock: FakeClock, toggle: Toggle, **kwargs: Any) -> SchedulingQueue:
    return make_queue(
        clock,
        jitter=0.0,
        event_interest={**INTEREST, "QuotaFreed": {"Quota"}},
        pre_enqueue={"gpusched": toggle},
        **kwargs,
    )


def test_a_pre_enqueue_rejection_gates_the_pod_with_its_reason(clock: FakeClock) -> None:
    toggle = Toggle()
    reported: list[tuple[str | None, str | None]] = []
    q = gate_queue(clock, toggle, on_gated=lambda i: reported.append((i.gating_plugin, i.error)))
    info = q.add(make_pod("p"))
    assert q.location(info.uid) == GATED
    assert (info.gated, info.gating_plugin, info.error) == (True, "Quota", "quota exhausted")
    assert info.unschedulable_plugins == {"Quota"}
    assert info.initial_attempt_timestamp is None
    assert reported == [("Quota", "quota exhausted")]
    assert q.pop_nowait() is None
    q.update(info.pod, status_only(info.pod))  # no PreEnqueue for a status-only update
    assert (toggle.calls, reported) == (1, [("Quota", "quota exhausted")])
    toggle.verdict = "still exhausted"
    q.update(info.pod, relabelled(info.pod))
    assert reported[-1] == ("Quota", "still exhausted"), "a new reason is reported"
    assert q.location(info.uid) == GATED
    q._check()
    toggle.verdict = None
    q.update(info.pod, relabelled(info.pod, "v3"))
    assert q.location(info.uid) == ACTIVE
    assert (info.gated, info.gating_plugin, info.error) == (False, None, None)
    q._check()


def test_a_quiet_pre_enqueue_wait_gates_the_pod_without_telling(clock: FakeClock) -> None:
    """``Status.waiting``: gated with its reason (explain and the metrics see it), but no
    on_gated call, so no Event or condition; a told reason after it is told."""
    verdicts = iter(
        [
            Status.waiting("claim on its way", plugin="DynamicResources"),
            Status.unresolvable("template missing", plugin="DynamicResources"),
        ]
    )
    reported: list[str | None] = []
    q = make_queue(
        clock,
        jitter=0.0,
        event_interest=INTEREST,
        pre_enqueue={"gpusched": lambda pod: next(verdicts)},
        on_gated=lambda i: reported.append(i.error),
    )
    info = q.add(make_pod("p"))
    assert q.location(info.uid) == GATED
    assert (info.gating_plugin, info.error) == ("DynamicResources", "claim on its way")
    assert reported == []
    q.update(info.pod, relabelled(info.pod))
    assert reported == ["template missing"]
    q._check()


def test_a_pre_enqueue_that_raises_gates_the_pod_and_nothing_crashes(clock: FakeClock) -> None:
    toggle = Toggle()
    toggle.verdict = RuntimeError("boom")
    q = gate_queue(clock, toggle)
    info = q.add(make_pod("p"))
    assert q.location(info.uid) == GATED
    assert info.gating_plugin == ""
    assert "boom" in (info.error or "")
    assert q.on_event("QuotaFreed") == 0, "no plugin named: only an update or '*' retries it"
    toggle.verdict = None
    assert q.on_event(WILDCARD_EVENT) == 1
    assert q.location(info.uid) == ACTIVE
    q._check()


def test_pre_enqueue_runs_for_its_own_profile_only(clock: FakeClock) -> None:
    toggle = Toggle()
    q = gate_queue(clock, toggle)
    other = changed(make_pod("other"), lambda p: p["spec"].update(schedulerName="someone-else"))
    assert q.location(q.add(other).uid) == ACTIVE
    assert toggle.calls == 0


@pytest.mark.parametrize("use_hint", [False, True])
def test_a_gated_pod_re_enters_on_an_event_its_gating_plugin_registered_for(
    clock: FakeClock, use_hint: bool
) -> None:
    toggle = Toggle()
    q = gate_queue(clock, toggle)
    info = q.add(make_pod("p"))
    toggle.verdict = None
    assert q.on_event("NodeAdd") == 0, "Quota did not register for NodeAdd"
    assert q.location(info.uid) == GATED
    seen: list[set[str]] = []

    def hint(i: QueuedPodInfo) -> bool:
        seen.append(set(i.unschedulable_plugins))
        return not use_hint

    assert q.on_event("QuotaFreed", hint) == (0 if use_hint else 1)
    assert seen == [{"Quota"}]
    assert q.location(info.uid) == (GATED if use_hint else ACTIVE)
    q._check()


def test_an_event_rechecks_the_gate_and_a_refusal_keeps_the_pod_gated(clock: FakeClock) -> None:
    toggle = Toggle()
    q = gate_queue(clock, toggle)
    info = q.add(make_pod("p"))
    assert q.on_event("QuotaFreed") == 0
    assert (q.location(info.uid), toggle.calls) == (GATED, 2)
    q._check()


@pytest.mark.parametrize("how", ["event", "error", "leftover", "activate"])
async def test_pods_leaving_unschedulable_or_flight_pass_pre_enqueue(
    clock: FakeClock, how: str
) -> None:
    toggle = Toggle()
    toggle.verdict = None
    q = gate_queue(clock, toggle)
    info = q.add(make_pod("p"))
    assert popped(q) is info
    toggle.verdict = "closed"
    if how == "error":
        assert q.requeue_after_error(info) == GATED
    else:
        info.unschedulable_plugins.add("Fit")
        assert q.add_unschedulable(info) == UNSCHEDULABLE, "PreEnqueue waits for the move"
        if how == "event":
            assert q.on_event("NodeAdd") == 1
        elif how == "leftover":
            await clock.advance(300.0)
            assert q.flush_unschedulable_left_over() == 1
        else:
            assert q.activate([info.uid]) == 0
    assert q.location(info.uid) == GATED
    assert info.gating_plugin == "Quota"
    q._check()


def test_backoff_to_active_does_not_run_pre_enqueue_again(clock: FakeClock) -> None:
    toggle = Toggle()
    toggle.verdict = None
    q = gate_queue(clock, toggle)
    info = put(q, make_pod("p"), BACKOFF)
    calls = toggle.calls
    toggle.verdict = "closed"
    assert q.activate([info.uid]) == 1
    assert (q.location(info.uid), toggle.calls) == (ACTIVE, calls)


def test_a_nominated_pod_goes_to_backoff_and_pop_clears_the_nomination(q: SchedulingQueue) -> None:
    info = q.add(make_pod("p"))
    assert popped(q) is info
    info.unschedulable_plugins.add("Fit")
    info.nominated_node_name = "node-1"
    assert q.add_unschedulable(info) == BACKOFF
    q.activate([info.uid])
    assert popped(q) is info
    assert info.nominated_node_name is None
    info.unschedulable_plugins.add("Fit")
    assert q.add_unschedulable(info) == UNSCHEDULABLE
    q._check()


async def test_incoming_pods_are_counted_with_upstream_labels(clock: FakeClock) -> None:
    toggle = Toggle()
    toggle.verdict = None
    counted: list[tuple[str, str]] = []
    q = gate_queue(clock, toggle, on_incoming=lambda queue, event: counted.append((queue, event)))

    def took() -> list[tuple[str, str]]:
        out = list(counted)
        counted.clear()
        return out

    a, b = make_pod("a"), make_pod("b")
    q.add(a)
    assert took() == [("active", "PodAdd")]
    q.update(a, relabelled(a))  # re-sorted in place: not incoming
    assert took() == []
    info = popped(q)
    q.requeue_after_error(info)
    assert took() == [("backoff", "ScheduleAttemptFailure")]
    await clock.advance(10.0)
    q.flush_backoff_completed()
    assert took() == [("active", "BackoffComplete")]
    info = popped(q)
    info.unschedulable_plugins.add("Fit")
    q.add_unschedulable(info)
    assert took() == [("unschedulable", "ScheduleAttemptFailure")]
    q.on_event("NodeAdd")  # still backing off
    assert took() == [("backoff", "NodeAdd")]
    q.activate([info.uid])
    assert took() == [("active", "ForceActivate")]
    toggle.verdict = "closed"
    q.add(b)
    assert took() == [("unschedulable", "PodAdd")], "gated pods count as unschedulable"
    info = popped(q)
    toggle.verdict = None
    info.unschedulable_plugins.add("Fit")
    q.add_unschedulable(info)
    took()
    await clock.advance(300.0)
    q.flush_unschedulable_left_over()
    assert took() == [("active", "UnschedulableTimeout")]

    # The scheduler's cluster events, labelled as upstream's ClusterEvent.Label().
    q = SchedulingQueue(
        clock,
        event_interest={"Pod/Delete": {"Fit"}, "GPUNodeInventory/Update": {"Fit"}},
        on_incoming=lambda queue, event: counted.append((queue, event)),
    )
    for event, label in [
        ("Pod/Delete", "AssignedPodDelete"),
        ("GPUNodeInventory/Update", "GPUNodeInventoryUpdate"),
    ]:
        info = fail(q, make_pod(f"p-{label}"), "Fit")
        took()
        await clock.advance(300.0)
        q.on_event(event)
        assert took() == [("active", label)]
        assert popped(q) is info


# -- delete --------------------------------------------------------------------------------


def put(q: SchedulingQueue, pod: dict[str, Any], state: str) -> QueuedPodInfo:
    if state == GATED:
        return q.add(changed(pod, lambda p: p["spec"].update(schedulingGates=[{"name": "g"}])))
    info = q.add(pod)
    if state == ACTIVE:
        return info
    assert popped(q) is info
    if state == BACKOFF:
        q.requeue_after_error(info)
    elif state == UNSCHEDULABLE:
        info.unschedulable_plugins.add("Fit")
        q.add_unschedulable(info)
    return info


@pytest.mark.parametrize("state", [ACTIVE, BACKOFF, UNSCHEDULABLE, GATED])
def test_delete_from_each_queue(q: SchedulingQueue, state: str) -> None:
    pod = make_pod("p")
    other = q.add(make_pod("other", priority="4"))
    info = put(q, pod, state)
    assert q.location(info.uid) == state
    assert q.delete(pod)
    assert q.location(info.uid) is None
    assert q.get(info.uid) is None
    assert not q.delete(pod)
    assert q.location(other.uid) == ACTIVE
    assert len(q) == 1
    q._check()
    assert q.on_event(WILDCARD_EVENT) == 0


@pytest.mark.parametrize("outcome", ["unschedulable", "error", "done"])
def test_delete_while_in_flight_drops_the_pod_when_it_returns(
    q: SchedulingQueue, outcome: str
) -> None:
    pod = make_pod("p")
    info = put(q, pod, IN_FLIGHT)
    assert q.delete(pod)
    assert q.location(info.uid) == IN_FLIGHT
    q._check()
    if outcome == "unschedulable":
        info.unschedulable_plugins.add("Fit")
        assert q.add_unschedulable(info) is None
    elif outcome == "error":
        assert q.requeue_after_error(info) is None
    else:
        q.done(info.uid)
    assert q.location(info.uid) is None
    q._check()


# -- in flight: done and misuse ------------------------------------------------------------


def test_done_ends_the_flight_and_is_idempotent(q: SchedulingQueue) -> None:
    info = put(q, make_pod("p"), IN_FLIGHT)
    q.done(info.uid)
    q.done(info.uid)
    assert q.location(info.uid) is None
    with pytest.raises(ValueError, match="not in flight"):
        q.add_unschedulable(info)
    q._check()


def test_done_for_an_older_cycle_is_ignored(q: SchedulingQueue) -> None:
    info = put(q, make_pod("p"), IN_FLIGHT)
    first_cycle = info.cycle
    q.requeue_after_error(info)
    q.activate([info.uid])
    assert popped(q) is info
    q.done(info.uid, first_cycle)  # a late done from the first cycle's binding task
    assert q.location(info.uid) == IN_FLIGHT
    q.done(info.uid, info.cycle)
    assert q.location(info.uid) is None


def test_returning_a_pod_twice_or_never_popped_raises(q: SchedulingQueue) -> None:
    info = q.add(make_pod("p"))
    with pytest.raises(ValueError, match="not in flight"):
        q.requeue_after_error(info)
    assert popped(q) is info
    q.requeue_after_error(info)
    with pytest.raises(ValueError, match="not in flight"):
        q.requeue_after_error(info)
    q._check()


def test_activate(q: SchedulingQueue) -> None:
    backing_off = put(q, make_pod("b"), BACKOFF)
    unschedulable = put(q, make_pod("u"), UNSCHEDULABLE)
    gated = put(q, make_pod("g"), GATED)
    flying = put(q, make_pod("f"), IN_FLIGHT)
    active = put(q, make_pod("a"), ACTIVE)
    uids = [i.uid for i in (backing_off, unschedulable, gated, flying, active)] + ["nope"]
    assert q.activate(uids) == 2
    assert [q.location(uid) for uid in uids] == [ACTIVE, ACTIVE, GATED, IN_FLIGHT, ACTIVE, None]
    flying.unschedulable_plugins.add("Fit")
    assert q.add_unschedulable(flying) == BACKOFF, "activated while in flight"
    q._check()


def test_pod_needs_a_uid(q: SchedulingQueue) -> None:
    pod = make_pod("p")
    del pod["metadata"]["uid"]
    with pytest.raises(ValueError, match=r"metadata\.uid"):
        q.add(pod)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"initial_backoff": 0.0},
        {"initial_backoff": 11.0},
        {"max_backoff": 0.5},
        {"jitter": 1.0},
        {"jitter": -0.1},
        {"max_in_unschedulable": 0.0},
    ],
)
def test_rejects_bad_settings(clock: FakeClock, kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"must|need"):
        SchedulingQueue(clock, **kwargs)


def test_pending_pods_counts_each_queue(q: SchedulingQueue) -> None:
    for i, state in enumerate((BACKOFF, BACKOFF, UNSCHEDULABLE, GATED, IN_FLIGHT, ACTIVE)):
        put(q, make_pod(f"p{i}"), state)
    assert q.pending_pods() == {ACTIVE: 1, BACKOFF: 2, UNSCHEDULABLE: 1, GATED: 1}
    assert tuple(q.pending_pods()) == QUEUES
    assert len(q) == 5
    q._check()


# -- waiting pops, run, close --------------------------------------------------------------


async def settle() -> None:
    """Let woken tasks run: a few turns of the loop, no time passes."""
    for _ in range(5):
        await asyncio.sleep(0)


@contextlib.asynccontextmanager
async def popping(q: SchedulingQueue, n: int = 1) -> AsyncIterator[list[asyncio.Task[Any]]]:
    """``n`` tasks waiting in ``q.pop()``; any still waiting at the end are cancelled, so a
    broken queue fails the test instead of hanging it."""
    tasks = [asyncio.create_task(q.pop()) for _ in range(n)]
    await settle()
    try:
        yield tasks
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_pop_waits_for_a_pod(q: SchedulingQueue) -> None:
    async with popping(q) as [waiter]:
        assert not waiter.done()
        info = q.add(make_pod("p"))
        await settle()
        assert waiter.done()
        assert waiter.result() is info
        assert q.location(info.uid) == IN_FLIGHT


async def test_two_waiters_take_one_pod_each(q: SchedulingQueue) -> None:
    async with popping(q, 2) as waiters:
        q.add(make_pod("a"))
        await settle()
        assert sum(w.done() for w in waiters) == 1
        q.add(make_pod("b"))
        await settle()
        assert all(w.done() for w in waiters)
        assert {w.result().key for w in waiters} == {"default/a", "default/b"}
        q._check()


async def test_cancelled_pop_changes_nothing(q: SchedulingQueue) -> None:
    async with popping(q) as [waiter]:
        waiter.cancel()
        await settle()
        assert waiter.cancelled()
    info = q.add(make_pod("p"))
    assert q.location(info.uid) == ACTIVE
    assert q.scheduling_cycle == 0


async def test_pop_waits_out_a_backoff_with_run(
    q: SchedulingQueue, clock: FakeClock, runner: asyncio.Task[None]
) -> None:
    info = put(q, make_pod("p"), BACKOFF)
    async with popping(q) as [waiter]:
        await clock.advance(0.5)
        assert not waiter.done()
        await clock.advance(0.5)  # the 1 s tick flushes the completed backoff
        await settle()
        assert waiter.done()
        assert waiter.result() is info
    assert not runner.done()


async def test_close_wakes_a_pop_waiting_on_an_empty_queue(q: SchedulingQueue) -> None:
    async with popping(q) as [waiter]:
        q.close()
        await settle()
        assert waiter.done()
        with pytest.raises(QueueClosed):
            waiter.result()


async def test_close_wakes_waiting_pops_and_stops_run(
    q: SchedulingQueue, clock: FakeClock, runner: asyncio.Task[None]
) -> None:
    async with popping(q) as [waiter]:
        q.add(make_pod("queued"))
        assert q.pop_nowait() is not None  # taken before the woken waiter runs
        q.close()
        assert q.closed
        await settle()
        assert waiter.done()
        with pytest.raises(QueueClosed):
            waiter.result()
    q.add(make_pod("late"))
    with pytest.raises(QueueClosed):
        q.pop_nowait()
    with pytest.raises(QueueClosed):
        await q.pop()
    await clock.advance(1.0)
    assert runner.done()
    assert runner.exception() is None


# -- random operations against a model -----------------------------------------------------


@dataclass
class Model:
    """What the queue should hold, derived from the documented rules only."""

    pod: dict[str, Any]
    where: str
    added_at: float
    attempts: int = 0
    cycle: int = 0
    expiry: float | None = None
    since: float | None = None
    plugins: frozenset[str] = frozenset()
    pending: frozenset[str] = frozenset()
    gating: str | None = None
    latest: dict[str, Any] | None = None
    moved: bool = False
    deleted: bool = False

    def sort_key(self) -> tuple[int, int, float, str]:
        annotation = (self.pod["metadata"].get("annotations") or {}).get(PRIORITY, "0")
        meta = self.pod["metadata"]
        return (
            int(annotation) if annotation.strip() in VALID_PRIORITIES else 4,
            -(self.pod["spec"].get("priority") or 0),
            self.added_at,
            f"{meta['namespace']}/{meta['name']}",
        )


VALID_PRIORITIES = {"0", "1", "2", "3", "4"}


class Stress:
    """Random operations on a queue gated by the default PreEnqueue plugins and by "Quota", a
    PreEnqueue plugin reading outside state (pods labelled ``quota=wait`` wait while the quota
    is closed) and registered for the "QuotaFreed" event."""

    JITTER = 0.1

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.clock = FakeClock()
        self.quota_open = False
        self.q = make_queue(
            self.clock,
            jitter=self.JITTER,
            rng=random.Random(seed + 1000),
            event_interest={**INTEREST, "QuotaFreed": {"Quota"}},
            pre_enqueue={"gpusched": self.pre_enqueue},
        )
        self.model: dict[str, Model] = {}
        self.infos: dict[str, QueuedPodInfo] = {}
        self.names = itertools.count()
        self.cycle = 0
        self.move_request_cycle = -1
        self.versions = itertools.count(2)

    def pre_enqueue(self, pod: dict[str, Any]) -> Status:
        status = FRAMEWORK.run_pre_enqueue(pod)
        if status.is_success and self.quota_wait(pod):
            return Status.unschedulable("quota exhausted", plugin="Quota")
        return status

    def quota_wait(self, pod: dict[str, Any]) -> bool:
        return pod["metadata"]["labels"].get("quota") == "wait" and not self.quota_open

    def gate(self, pod: dict[str, Any]) -> str | None:
        """The plugin that gates ``pod`` now, in the profile's PreEnqueue order."""
        annotation = (pod["metadata"].get("annotations") or {}).get(PRIORITY)
        if annotation is not None and annotation.strip() not in VALID_PRIORITIES:
            return "PrioritySort"
        if pod["spec"].get("schedulingGates"):
            return "SchedulingGates"
        return "Quota" if self.quota_wait(pod) else None

    def admit(self, m: Model) -> bool:
        gating = self.gate(m.pod)
        if gating is None:
            return True
        m.gating, m.plugins, m.pending = gating, frozenset({gating}), frozenset()
        return False

    def enter(self, m: Model, *, to_backoff: bool = False, immediate: bool = False) -> None:
        """PreEnqueue, then backoff or active, or gated."""
        m.since = None
        if not self.admit(m):
            m.where = GATED
        elif to_backoff:
            m.where = BACKOFF
        else:
            self.requeue(m, immediate)

    def release(self, m: Model, *, immediate: bool = False) -> bool:
        """PreEnqueue again for a gated pod: True if it left gated."""
        if not self.admit(m):
            return False
        m.gating = None
        self.requeue(m, immediate)
        return True

    @property
    def now(self) -> float:
        return self.clock.monotonic()

    def pick(self, *wheres: str) -> str | None:
        uids = sorted(uid for uid, m in self.model.items() if m.where in wheres and not m.deleted)
        return self.rng.choice(uids) if uids else None

    def requeue(self, m: Model, immediate: bool = False) -> None:
        backing_off = m.expiry is not None and m.expiry > self.now
        m.where = BACKOFF if backing_off and not immediate else ACTIVE

    def check_expiry(self, m: Model, info: QueuedPodInfo) -> None:
        assert info.backoff_expiry is not None
        base = min(2.0 ** (m.attempts - 1), 10.0)
        wait = info.backoff_expiry - self.now
        assert base * (1 - self.JITTER) - 1e-9 <= wait <= base * (1 + self.JITTER) + 1e-9
        m.expiry = info.backoff_expiry

    # operations

    def op_add(self) -> None:
        annotation = self.rng.choice([None, None, "0", "1", "2", "4", "bad"])
        gates = ("g",) if self.rng.random() < 0.1 else ()
        pod = make_pod(
            f"p{next(self.names)}",
            priority=annotation,
            spec_priority=self.rng.choice([None, 0, 10, 1000]),
            gates=gates,
        )
        if self.rng.random() < 0.2:
            pod["metadata"]["labels"]["quota"] = "wait"
        info = self.q.add(pod)
        self.infos[info.uid] = info
        m = Model(pod, ACTIVE, self.now)
        self.enter(m)
        self.model[info.uid] = m

    def op_quota(self) -> None:
        """The Quota plugin's outside state changes (no queue call: only its event tells)."""
        self.quota_open = not self.quota_open

    def op_update(self) -> None:
        uid = self.pick(ACTIVE, BACKOFF, UNSCHEDULABLE, GATED, IN_FLIGHT)
        if uid is None:
            return
        m = self.model[uid]
        held = m.latest if m.latest is not None else m.pod
        kind = self.rng.choice(["status", "labels", "priority", "ungate", "quota"])
        if kind == "ungate" and not held["spec"].get("schedulingGates"):
            kind = "status"
        new = copy.deepcopy(held)
        new["metadata"]["resourceVersion"] = str(next(self.versions))
        if kind == "status":
            new["status"]["message"] = f"v{new['metadata']['resourceVersion']}"
        else:
            new["metadata"]["labels"]["rev"] = new["metadata"]["resourceVersion"]
            if kind == "priority":
                annotation = self.rng.choice(["0", "3", "3", "oops"])
                new["metadata"].setdefault("annotations", {})[PRIORITY] = annotation
            elif kind == "ungate":
                del new["spec"]["schedulingGates"]
            elif kind == "quota" and new["metadata"]["labels"].pop("quota", None) is None:
                new["metadata"]["labels"]["quota"] = "wait"
        relevant = kind != "status"
        assert self.q.update(held, new) is self.infos[uid]
        if m.where == IN_FLIGHT:
            m.latest = new
            m.moved = m.moved or relevant
            return
        m.pod = new
        if not relevant:
            return
        if m.where in (ACTIVE, BACKOFF):
            if not self.admit(m):
                m.where = GATED
        elif m.where == UNSCHEDULABLE:
            self.enter(m)
        elif m.where == GATED:
            self.release(m)

    def op_delete(self) -> None:
        uid = self.pick(ACTIVE, BACKOFF, UNSCHEDULABLE, GATED, IN_FLIGHT)
        if uid is None:
            return
        m = self.model[uid]
        assert self.q.delete(m.latest or m.pod)
        if m.where == IN_FLIGHT:
            m.deleted = True
        else:
            del self.model[uid]

    def flush_model_backoff(self) -> None:
        for m in self.model.values():
            if m.where == BACKOFF and m.expiry is not None and m.expiry <= self.now:
                m.where = ACTIVE

    def op_pop(self) -> str | None:
        self.flush_model_backoff()
        active = [(m.sort_key(), uid) for uid, m in self.model.items() if m.where == ACTIVE]
        info = self.q.pop_nowait()
        if not active:
            assert info is None
            return None
        assert info is not None
        assert info.uid == min(active)[1], "popped out of sort-key order"
        m = self.model[info.uid]
        self.cycle += 1
        m.where, m.cycle, m.attempts = IN_FLIGHT, self.cycle, m.attempts + 1
        m.latest, m.moved, m.deleted = None, False, False
        assert (info.cycle, info.attempts) == (m.cycle, m.attempts)
        return info.uid

    def op_cycle(self) -> None:
        """Pop and return at once: no event in between, so rejected pods go unschedulable."""
        uid = self.op_pop()
        if uid is not None:
            self.op_return(uid)

    def finish_flight(self, uid: str) -> Model | None:
        """Apply what happened in flight; None if the pod was deleted meanwhile."""
        m = self.model[uid]
        if m.deleted:
            del self.model[uid]
            return None
        if m.latest is not None:
            m.pod, m.latest = m.latest, None
        return m

    def op_return(self, uid: str | None = None) -> None:
        if uid is None:
            uids = sorted(uid for uid, m in self.model.items() if m.where == IN_FLIGHT)
            if not uids:
                return
            uid = self.rng.choice(uids)
        info = self.infos[uid]
        how = self.rng.choice(["unschedulable", "unschedulable", "error", "done"])
        if how == "done":
            self.q.done(uid, info.cycle)
            del self.model[uid]
            return
        if how == "error":
            where = self.q.requeue_after_error(info)
            m = self.finish_flight(uid)
            if m is None:
                assert where is None
                return
            self.check_expiry(m, info)
            m.plugins = m.pending = frozenset()
            self.enter(m, to_backoff=True)
            assert where == m.where
            return
        plugins = frozenset(self.rng.sample(PLUGINS, self.rng.choice([0, 1, 1, 2])))
        pending = frozenset(["Gang"]) if self.rng.random() < 0.1 else frozenset()
        info.unschedulable_plugins.update(plugins)
        info.pending_plugins.update(pending)
        moved, cycle = self.model[uid].moved, self.model[uid].cycle
        where = self.q.add_unschedulable(info, info.cycle)
        m = self.finish_flight(uid)
        if m is None:
            assert where is None
            return
        self.check_expiry(m, info)
        m.plugins, m.pending = plugins, pending
        if moved or self.move_request_cycle >= cycle or not (plugins or pending):
            self.enter(m, to_backoff=True)
        else:
            m.where, m.since = UNSCHEDULABLE, self.now
        assert where == m.where

    def op_event(self) -> None:
        event = self.rng.choice([*EVENTS, "QuotaFreed"])
        use_hint = self.rng.random() < 0.3

        def hint(info: QueuedPodInfo) -> bool:
            return int(info.key.removeprefix("default/p")) % 2 == 0

        moved = self.q.on_event(event, hint if use_hint else None)
        interest = (
            None
            if event == WILDCARD_EVENT
            else {**INTEREST, "QuotaFreed": {"Quota"}}.get(event, set())
        )
        if interest is not None and not interest:
            assert moved == 0
            return
        self.move_request_cycle = self.cycle

        def candidate(uid: str, m: Model) -> bool:
            if m.where == UNSCHEDULABLE:
                rejectors = m.plugins | m.pending
            elif m.where == GATED:
                rejectors = frozenset({m.gating or ""})
            else:
                return False
            if interest is not None and not rejectors & interest:
                return False
            return not use_hint or hint(self.infos[uid])

        candidates = [(uid, m) for uid, m in self.model.items() if candidate(uid, m)]
        expected = 0
        for _, m in candidates:
            if m.where == UNSCHEDULABLE:
                expected += 1
                self.enter(m, immediate=interest is not None and bool(m.pending & interest))
            elif self.release(m):
                expected += 1
        assert moved == expected

    def op_activate(self) -> None:
        uids = [u for u in (self.pick(*QUEUES, IN_FLIGHT) for _ in range(3)) if u is not None]
        expected = 0
        for uid in dict.fromkeys(uids):
            m = self.model[uid]
            if m.where == BACKOFF:
                m.where = ACTIVE
                expected += 1
            elif m.where == UNSCHEDULABLE:
                self.enter(m, immediate=True)
                expected += m.where == ACTIVE
            elif m.where == GATED:
                expected += self.release(m, immediate=True)
            elif m.where == IN_FLIGHT:
                m.moved = True
        assert self.q.activate(uids) == expected

    async def op_advance(self) -> None:
        await self.clock.advance(self.rng.choice([0.0, 0.25, 0.5, 1.0, 3.0, 30.0, 120.0, 300.0]))
        if self.rng.random() < 0.5:
            self.flush_model_backoff()
            self.q.flush_backoff_completed()
        if self.rng.random() < 0.5:
            expected = 0
            for m in self.model.values():
                if m.where == UNSCHEDULABLE:
                    assert m.since is not None
                    if self.now - m.since >= 300.0:
                        self.enter(m)
                        expected += 1
            assert self.q.flush_unschedulable_left_over() == expected

    def compare(self) -> None:
        self.q._check()
        for uid, m in self.model.items():
            assert self.q.location(uid) == m.where, uid
            if m.where == GATED:
                assert self.infos[uid].gating_plugin == m.gating, uid
        for uid in self.infos.keys() - self.model.keys():
            assert self.q.location(uid) is None, uid
        counts = dict.fromkeys(QUEUES, 0)
        for m in self.model.values():
            if m.where != IN_FLIGHT:
                counts[m.where] += 1
        assert self.q.pending_pods() == counts

    async def run(self, steps: int) -> None:
        ops: list[Callable[[], Any]] = [
            self.op_add,
            self.op_add,
            self.op_update,
            self.op_delete,
            self.op_pop,
            self.op_return,
            self.op_cycle,
            self.op_cycle,
            self.op_event,
            self.op_quota,
            self.op_activate,
            self.op_advance,
            self.op_advance,
        ]
        for _ in range(steps):
            result = self.rng.choice(ops)()
            if asyncio.iscoroutine(result):
                await result
            self.compare()

    async def drain(self) -> None:
        """End every flight, let every backoff expire: pops then follow the sort key."""
        for uid, m in list(self.model.items()):
            if m.where == IN_FLIGHT:
                self.q.done(uid)
                del self.model[uid]
        await self.clock.advance(1000.0)
        self.q.flush_backoff_completed()
        self.q.flush_unschedulable_left_over()
        for m in self.model.values():
            if m.where == UNSCHEDULABLE:
                self.enter(m)
        self.q._check()
        queued = [m for m in self.model.values() if m.where != GATED]
        expected = [m.sort_key()[3] for m in sorted(queued, key=Model.sort_key)]
        got = []
        while (info := self.q.pop_nowait()) is not None:
            got.append(info.key)
        assert got == expected
        assert len(self.q) == self.q.pending_pods()[GATED]
        self.q._check()


@pytest.mark.parametrize("seed", range(10))
async def test_random_operations_match_the_model(seed: int) -> None:
    stress = Stress(seed)
    await stress.run(1000)
    await stress.drain()


# -- module surface ------------------------------------------------------------------------


def test_all_is_complete() -> None:
    tree = ast.parse(Path(queue_module.__file__).read_text())
    imported = {
        (alias.asname or alias.name).split(".")[0]
        for node in tree.body
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    public = {name for name in vars(queue_module) if not name.startswith("_")} - imported - {"log"}
    assert set(queue_module.__all__) == public | {"QueuedPodInfo"}  # re-exported


def test_take(q: SchedulingQueue) -> None:
    """A gang's cycle takes its siblings wherever they wait but gated or in flight."""
    backing_off = put(q, make_pod("b"), BACKOFF)
    unschedulable = put(q, make_pod("u"), UNSCHEDULABLE)
    gated = put(q, make_pod("g"), GATED)
    flying = put(q, make_pod("f"), IN_FLIGHT)
    active = put(q, make_pod("a"), ACTIVE)
    before = {i.uid: i.attempts for i in (backing_off, unschedulable, active)}
    for info in (backing_off, unschedulable, active):
        assert q.take(info.uid) is info
        assert q.location(info.uid) == IN_FLIGHT
        assert info.attempts == before[info.uid] + 1
        assert not info.unschedulable_plugins
    assert q.take(gated.uid) is None
    assert q.location(gated.uid) == GATED
    assert q.take(flying.uid) is None
    assert q.location(flying.uid) == IN_FLIGHT
    assert q.take("nope") is None
    assert len({backing_off.cycle, unschedulable.cycle, active.cycle}) == 3
    unschedulable.unschedulable_plugins.add("Fit")
    assert q.add_unschedulable(unschedulable) == UNSCHEDULABLE
    q._check()
