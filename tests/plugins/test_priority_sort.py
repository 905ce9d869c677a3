"""PrioritySort: gpusched priority, then spec.priority, then FIFO; the queue uses it; a malformed
priority annotation is gated by its PreEnqueue."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from builders import PodBuilder, make_pod

from gpusched.annotations import PRIORITY
from gpusched.clock import FakeClock
from gpusched.framework import Code, QueuedPodInfo, build_frameworks, default_config, in_tree
from gpusched.plugins.priority_sort import LOWEST_PRIORITY, NAME, PrioritySort, sort_key_of
from gpusched.priority import Priority
from gpusched.queue import GATED, SchedulingQueue


@dataclass
class Info:
    """Duck-typed: the key reads only ``pod`` and ``timestamp``."""

    pod: dict[str, Any]
    timestamp: float


# (name, builder, timestamp): expected order is the table's order.
ORDERED: list[tuple[PodBuilder, float]] = [
    (make_pod("p0-high-class").priority(0).pod_priority(1000), 5.0),
    (make_pod("p0-first").priority(0), 1.0),
    (make_pod("p0-default"), 2.0),  # no annotation: priority 0
    (make_pod("p0-default-later"), 3.0),
    (make_pod("p1").priority(1).pod_priority(10**6), 0.0),
    (make_pod("p2").priority(" 2 "), 0.0),
    (make_pod("p4").priority(4), 0.0),
]


def test_keys_order_pods_as_documented() -> None:
    plugin = PrioritySort()
    infos = [Info(builder.obj(), ts) for builder, ts in ORDERED]
    shuffled = list(reversed(infos))
    ordered = sorted(shuffled, key=plugin.sort_key)
    assert [i.pod["metadata"]["name"] for i in ordered] == [
        b.obj()["metadata"]["name"] for b, _ in ORDERED
    ]


@pytest.mark.parametrize(
    ("builder", "expected"),
    [
        (make_pod("a"), (-Priority(0, 0).rank, 7.0, "default/a")),
        (make_pod("b").priority(3).pod_priority(5), (-Priority(3, 5).rank, 7.0, "default/b")),
        (
            make_pod("c", namespace="ml").priority("x"),
            (-Priority(LOWEST_PRIORITY).rank, 7.0, "ml/c"),
        ),
        (make_pod("d").priority(9), (-Priority(LOWEST_PRIORITY).rank, 7.0, "default/d")),
    ],
)
def test_sort_key_of(builder: PodBuilder, expected: tuple[int, float, str]) -> None:
    assert sort_key_of(builder.obj(), 7.0) == expected
    info = QueuedPodInfo(pod=builder.obj(), key="", uid="u", timestamp=7.0)
    assert PrioritySort().sort_key(info) == expected


@pytest.mark.parametrize("value", ["x", "9", "-1", ""])
def test_pre_enqueue_gates_a_malformed_annotation(value: str) -> None:
    status = PrioritySort().pre_enqueue(make_pod("p").priority(value).obj())
    assert (status.code, status.plugin) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, NAME)
    assert PRIORITY in status.message()
    assert PrioritySort().pre_enqueue(make_pod("q").priority(" 3 ").obj()).is_success
    assert PrioritySort().pre_enqueue(make_pod("r").obj()).is_success
    assert PrioritySort().events_to_register() == []


async def test_the_queue_pops_in_this_order_with_the_framework_key() -> None:
    fw = build_frameworks(default_config(), in_tree())["gpusched"]
    assert fw.list_plugins()["queueSort"] == [NAME]
    assert NAME in fw.list_plugins()["preEnqueue"]
    clock = FakeClock()
    queue = SchedulingQueue(clock, fw.queue_sort_key, pre_enqueue={"gpusched": fw.run_pre_enqueue})
    for builder, _ in reversed(ORDERED):
        added = queue.add(builder.obj())
        assert fw.queue_sort_key(added) == sort_key_of(added.pod, added.timestamp)
        await clock.advance(1)
    bad = queue.add(make_pod("bad").priority("urgent").obj())
    assert (queue.location(bad.uid), bad.gating_plugin) == (GATED, NAME)
    popped = []
    while (info := queue.pop_nowait()) is not None:
        popped.append(info.pod["metadata"]["name"])
    # Same classes as the table; within priority 0 FIFO is by queueing time (reversed here).
    assert popped == [
        "p0-high-class",
        "p0-default-later",
        "p0-default",
        "p0-first",
        "p1",
        "p2",
        "p4",
    ]
    queue._check()
