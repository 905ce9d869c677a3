"""Group status as the objects' controllers compute it (gpusched.gangs.status)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

import pytest

from gpusched.gangs.manager import Group, Member, MemberState
from gpusched.gangs.spec import Form, GroupRef
from gpusched.gangs.status import kubernetes_conditions, next_phase, scheduler_plugins_status


@pytest.mark.parametrize(
    ("phase", "pods", "running", "succeeded", "failed", "want"),
    [
        ("", 0, 0, 0, 0, "Pending"),
        ("Pending", 3, 0, 0, 0, "Pending"),  # fewer pods than minMember (4)
        ("Pending", 4, 0, 0, 0, "Scheduling"),
        ("Scheduling", 4, 2, 0, 0, "Scheduling"),
        ("Scheduling", 4, 4, 0, 0, "Running"),
        ("Running", 4, 2, 2, 0, "Running"),
        ("Running", 4, 3, 0, 1, "Failed"),
        ("Running", 4, 0, 4, 0, "Finished"),
        ("Running", 3, 3, 0, 0, "Pending"),  # a member deleted: fewer pods than minMember
        ("Finished", 0, 0, 0, 0, "Finished"),  # final
        ("Failed", 4, 4, 0, 0, "Failed"),
    ],
)
def test_next_phase_is_scheduler_plugins_controllers(
    phase: str, pods: int, running: int, succeeded: int, failed: int, want: str
) -> None:
    assert next_phase(phase, pods, running, succeeded, failed, 4) == want


def group(*states: MemberState) -> Group:
    g = Group("ns/g", GroupRef(Form.SCHEDULER_PLUGINS, "ns", "g"))
    for i, state in enumerate(states):
        g.members[f"u{i}"] = Member(f"u{i}", f"m{i}", 1, state, ("ns/job",))
    g.counts = Counter(states)
    g.schedule_start = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    return g


def test_scheduler_plugins_status_reaches_the_controllers_fixed_point() -> None:
    g = group(MemberState.RUNNING, MemberState.RUNNING, MemberState.SUCCEEDED)
    assert scheduler_plugins_status(g, {}, 3) == {
        "phase": "Running",
        "running": 2,
        "succeeded": 1,
        "failed": 0,
        "scheduleStartTime": "2026-01-02T03:04:05Z",
        "occupiedBy": "ns/job",
    }
    # Incomplete: Pending, no counts, and what the object already has is not rewritten.
    current = {"phase": "Pending", "scheduleStartTime": "2026-01-01T00:00:00Z"}
    assert scheduler_plugins_status(group(MemberState.PENDING), current, 3) == {"phase": "Pending"}


def test_kubernetes_condition() -> None:
    now = "2026-01-02T03:04:05Z"
    waiting = group(MemberState.PENDING)
    assert kubernetes_conditions(waiting, {}, 2, now) is None  # nothing to say yet
    waiting.waits_for = "pod group ns/g: 1 of 2 members created; waiting for 1 more"
    other = {"type": "DisruptionTarget", "status": "False"}
    conditions = kubernetes_conditions(waiting, {"conditions": [other]}, 2, now)
    assert conditions is not None
    assert conditions[0] == other
    assert (conditions[1]["status"], conditions[1]["reason"]) == ("False", "Unschedulable")
    scheduled = group(MemberState.BOUND, MemberState.RUNNING)
    conditions = kubernetes_conditions(scheduled, {"conditions": conditions}, 2, now)
    assert conditions is not None
    assert (conditions[-1]["status"], conditions[-1]["reason"]) == ("True", "Scheduled")
    assert kubernetes_conditions(scheduled, {"conditions": conditions}, 2, now) is None
