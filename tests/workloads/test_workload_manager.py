"""The GPUWorkload manager (gpusched.workloads.manager), pure: spec parsing with what-to-fix
messages, the Job it builds, retry delays, and ``reconcile`` over tables of observed states."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gpusched.workloads.manager import (
    ATTEMPT_LABEL,
    WORKLOAD_LABEL,
    Plan,
    Settings,
    SpecError,
    WorkloadSpec,
    build_job,
    job_name,
    parse_spec,
    reconcile,
    retry_delay,
)

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


def ts(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def workload(status: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "gpu.warp.dev/v1alpha1",
        "kind": "GPUWorkload",
        "metadata": {"name": "w", "namespace": "ml", "uid": "wuid", "generation": 1},
        "spec": {"modelName": "llama2", "gpuCount": 2, **spec},
    }
    if status is not None:
        obj["status"] = status
    return obj


def job(attempt: int, condition: str | None = None, at: datetime = NOW) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "metadata": {
            "name": f"w-{attempt}",
            "namespace": "ml",
            "uid": f"j{attempt}",
            "labels": {WORKLOAD_LABEL: "w", ATTEMPT_LABEL: str(attempt)},
        },
        "status": {},
    }
    if condition:
        obj["status"]["conditions"] = [
            {"type": condition, "status": "True", "lastTransitionTime": ts(at)}
        ]
    return obj


def pod(attempt: int, phase: str = "Pending", node: str = "", **status: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "metadata": {
            "name": f"w-{attempt}-abcde",
            "ownerReferences": [{"uid": f"j{attempt}", "controller": True}],
            "creationTimestamp": ts(NOW),
        },
        "spec": {"nodeName": node} if node else {},
        "status": {"phase": phase, **status},
    }
    return obj


def crashed(attempt: int) -> dict[str, Any]:
    return pod(
        attempt,
        "Failed",
        "n1",
        containerStatuses=[
            {"name": "workload", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}
        ],
    )


# ------------------------------------------------------------------ parse_spec


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (
            {"modelName": "llama2"},
            WorkloadSpec(
                "llama2",
                1,
                1,
                "leastLoaded",
                3,
                30.0,
                "nvcr.io/nvidia/cuda:12.6.2-base-ubuntu22.04",
                ("nvidia-smi",),
                (),
            ),
        ),
        (
            {
                "modelName": "m",
                "gpuCount": 4,
                "priority": "High",
                "schedulingStrategy": "random",
                "retryPolicy": {"maxRetries": 0, "backoffSeconds": 5},
                "image": "img",
                "command": ["python", "train.py"],
                "args": ["--fast"],
            },
            WorkloadSpec("m", 4, 0, "random", 0, 5.0, "img", ("python", "train.py"), ("--fast",)),
        ),
        ({"modelName": "m", "priority": "low"}, 2),
        ({"modelName": "m", "priority": "4"}, 4),
    ],
)
def test_parse_spec_applies_the_seeds_defaults(spec: dict[str, Any], expected: Any) -> None:
    parsed = parse_spec(spec)
    assert isinstance(parsed, WorkloadSpec)
    if isinstance(expected, int):
        assert parsed.priority == expected
    else:
        assert parsed == expected


@pytest.mark.parametrize(
    ("spec", "fragments"),
    [
        ({"modelName": "m", "gpuCount": 0}, ["spec.gpuCount 0", "write 1 or more"]),
        ({"modelName": "m", "gpuCount": "2"}, ["spec.gpuCount '2'"]),
        (
            {"modelName": "m", "schedulingStrategy": "binpack"},
            ["'binpack' is unknown: write one of leastLoaded, random, costOptimized"],
        ),
        ({"modelName": "m", "priority": "urgent"}, ["spec.priority 'urgent'", "high, medium"]),
        ({}, ["spec.modelName is required"]),
        (
            {"modelName": "m", "gpuCount": -1, "schedulingStrategy": "x"},
            ["spec.gpuCount -1", "spec.schedulingStrategy 'x'"],
        ),
    ],
)
def test_parse_spec_says_what_to_fix(spec: dict[str, Any], fragments: list[str]) -> None:
    parsed = parse_spec(spec)
    assert isinstance(parsed, SpecError)
    for fragment in fragments:
        assert fragment in parsed.message


# ------------------------------------------------------------------ the Job


@pytest.mark.parametrize(
    ("attempt", "base", "u", "expected"),
    [(1, 30, 0.0, 30.0), (2, 30, 0.0, 60.0), (3, 30, 0.5, 132.0), (1, 10, 0.99, 11.98),
     (10, 30, 0.0, 3600.0), (1, 0, 0.7, 0.0)],
)  # fmt: skip
def test_retry_delay_doubles_with_jitter_and_a_cap(
    attempt: int, base: float, u: float, expected: float
) -> None:
    assert retry_delay(attempt, base, u) == pytest.approx(expected)


def test_job_names_stay_label_values() -> None:
    assert job_name("w", 3) == "w-3"
    long = job_name("a" * 80, 12)
    assert len(long) == 63
    assert long.endswith("a-12")


@pytest.mark.parametrize(
    ("strategy", "scheduler_name"),
    [("leastLoaded", "gpusched-spread"), ("costOptimized", "gpusched-cheap"),
     ("random", "gpusched-random")],
)  # fmt: skip
def test_build_job_translates_the_request(strategy: str, scheduler_name: str) -> None:
    body = workload(schedulingStrategy=strategy, priority="high")
    body["metadata"]["annotations"] = {"sim.gpusched.io/duration": "5m", "team": "x"}
    spec = parse_spec(body["spec"])
    assert isinstance(spec, WorkloadSpec)
    made = build_job(body, spec, 2, Settings())
    assert made["metadata"]["name"] == "w-2"
    assert made["metadata"]["ownerReferences"][0] == {
        "apiVersion": "gpu.warp.dev/v1alpha1",
        "kind": "GPUWorkload",
        "name": "w",
        "uid": "wuid",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    assert made["spec"]["backoffLimit"] == 0
    template = made["spec"]["template"]
    assert template["metadata"]["labels"] == {
        WORKLOAD_LABEL: "w",
        ATTEMPT_LABEL: "2",
        "app": "w",
        "gpusched.io/model": "llama2",
    }
    assert template["metadata"]["annotations"] == {
        "gpusched.io/priority": "0",
        "gpusched.io/model": "llama2",
        "sim.gpusched.io/duration": "5m",
    }
    assert template["spec"]["schedulerName"] == scheduler_name
    assert template["spec"]["restartPolicy"] == "Never"
    (container,) = template["spec"]["containers"]
    assert container["resources"] == {"limits": {"nvidia.com/gpu": "2"}}


# ------------------------------------------------------------------ reconcile


def plan_for(
    obj: dict[str, Any],
    jobs: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    now: datetime = NOW,
) -> Plan:
    return reconcile(obj, jobs, pods, now, Settings(), random.Random(0))


def cond(plan: Plan, ctype: str) -> tuple[str, str]:
    for c in plan.status["conditions"]:
        if c["type"] == ctype:
            return c["status"], c["reason"]
    raise AssertionError(f"no {ctype}")


def reasons(plan: Plan) -> list[str]:
    return [reason for _, reason, _ in plan.events]


RETRY = {"maxRetries": 2, "backoffSeconds": 30}


@pytest.mark.parametrize(
    ("jobs", "pods", "phase", "attempts", "node", "events"),
    [
        ([], [], "Pending", 1, None, ["JobCreated"]),
        ([job(1)], [], "Pending", 1, None, []),
        ([job(1)], [pod(1)], "Pending", 1, None, []),
        ([job(1)], [pod(1, "Pending", "n1")], "Scheduled", 1, "n1", ["Scheduled"]),
        ([job(1)], [pod(1, "Running", "n1")], "Running", 1, "n1", ["Scheduled"]),
        ([job(1, "Complete")], [pod(1, "Succeeded", "n1")], "Succeeded", 1, "n1",
         ["Scheduled", "Succeeded"]),
        ([job(1, "Failed")], [crashed(1)], "Pending", 1, "n1", ["Scheduled", "AttemptFailed"]),
        ([job(1, "Failed", NOW - timedelta(seconds=40)), ], [crashed(1)], "Pending", 2, None,
         ["Retrying", "AttemptFailed"]),
        ([job(1, "Failed"), job(2, "Failed"), job(3, "Failed")], [crashed(3)], "Failed", 3, "n1",
         ["Scheduled", "AttemptFailed", "RetriesExhausted"]),
    ],
)  # fmt: skip
def test_reconcile_from_scratch(
    jobs: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    phase: str,
    attempts: int,
    node: str | None,
    events: list[str],
) -> None:
    plan = plan_for(workload(retryPolicy=RETRY), jobs, pods)
    assert plan.status["phase"] == phase
    assert plan.status["attempts"] == attempts
    assert plan.status.get("assignedNode") == node
    assert reasons(plan) == events
    assert (plan.create_job is not None) == ("JobCreated" in events or "Retrying" in events)


def test_a_failed_attempt_waits_its_backoff_then_retries() -> None:
    failed_at = NOW
    first = plan_for(workload(retryPolicy=RETRY), [job(1, "Failed", failed_at)], [crashed(1)])
    assert first.create_job is None
    assert cond(first, "Retrying") == ("True", "BackingOff")
    assert first.status["lastError"] == (
        "attempt 1: pod w-1-abcde: container workload exited with code 137: OOMKilled"
    )
    due = datetime.strptime(first.status["nextRetryTime"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert timedelta(seconds=30) <= due - failed_at <= timedelta(seconds=36)
    assert first.requeue_after == (due - NOW).total_seconds()
    # Reconciled again before it is due (the written status): same time, no new Events.
    again = plan_for(
        workload(first.status, retryPolicy=RETRY), [job(1, "Failed", failed_at)], [crashed(1)]
    )
    assert again.status == first.status
    assert again.events == []
    # Due: attempt 2 starts and counts as a retry.
    later = plan_for(
        workload(first.status, retryPolicy=RETRY),
        [job(1, "Failed", failed_at)],
        [crashed(1)],
        due,
    )
    assert later.create_job is not None
    assert later.create_job["metadata"]["name"] == "w-2"
    assert later.retried
    assert later.status["attempts"] == 2
    assert "nextRetryTime" not in later.status


def test_reconcile_is_idempotent_once_its_status_is_written() -> None:
    jobs, pods = [job(1)], [pod(1, "Running", "n1")]
    first = plan_for(workload(), jobs, pods)
    assert first.scheduled
    second = plan_for(workload(first.status), jobs, pods)
    assert second.status == first.status
    assert second.events == []
    assert not second.scheduled


def test_bad_input_is_reported_once_and_starts_nothing() -> None:
    first = plan_for(workload(gpuCount=0), [], [])
    assert first.create_job is None
    assert first.requeue_after is None
    assert first.status["phase"] == "Pending"
    assert cond(first, "SpecValid") == ("False", "InvalidSpec")
    assert reasons(first) == ["InvalidSpec"]
    assert first.failed_reason == "InvalidSpec"
    second = plan_for(workload(first.status, gpuCount=0), [], [])
    assert second.events == []
    assert second.failed_reason == ""
    fixed = plan_for(workload(second.status, gpuCount=1), [], [])
    assert fixed.create_job is not None
    assert cond(fixed, "SpecValid") == ("True", "Valid")


def test_pending_pod_reports_the_schedulers_reason() -> None:
    waiting = pod(
        1,
        conditions=[
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.",
            }
        ],
    )
    plan = plan_for(workload(), [job(1)], [waiting])
    assert plan.status["phase"] == "Pending"
    scheduled = next(c for c in plan.status["conditions"] if c["type"] == "Scheduled")
    assert scheduled["message"] == "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
