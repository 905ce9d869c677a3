"""What the GPUWorkload controller decides, as a pure function of what it observes.

``reconcile(workload, jobs, pods, now, settings, rng)`` takes a ``gpu.warp.dev/v1alpha1``
GPUWorkload (seed GPU_Orchestrator's API), the Jobs it owns (one per attempt, named
``<workload>-<attempt>``) and their pods, and returns a :class:`Plan`: the Job to create (if
any), the status to write, when to look again, the Events to record and what to count. The
controller (``gpusched.workloads.controller``) only does the I/O, so that every rule is tested
here without a cluster:

* **bad input** (``gpuCount`` below 1, an unknown ``schedulingStrategy`` or ``priority``):
  condition ``SpecValid=False`` (reason ``InvalidSpec``), ``lastError`` and a Warning Event
  that say what to write instead, phase Pending, no Job and no retry: the next change to the
  spec is reconciled again.
* **translation** into the Job's pod template: ``nvidia.com/gpu: <gpuCount>`` in the
  container's limits (docs/gpu_requests.md), ``priority`` as ``gpusched.io/priority`` (high
  0, medium 1, low 2, or a level "0".."4"), ``schedulingStrategy`` as the ``schedulerName`` of a
  gpusched profile (:data:`DEFAULT_PROFILES`), ``restartPolicy: Never`` and the Job's
  ``backoffLimit: 0`` (the workload retries, not the Job), owner references workload -> Job ->
  pods.
* **retries**: a Job that failed starts attempt ``n + 1`` after ``backoffSeconds * 2^(n-1)``
  times ``1 + jitter * U[0,1)`` (at most ``max_backoff``), counted from the failure, while
  ``n <= maxRetries``; the chosen time is kept in ``status.nextRetryTime`` so that every
  reconcile (and a restarted controller) waits for the same moment.
* **status**: phase Pending (no pod bound yet, or waiting to retry), Scheduled (bound), Running,
  Succeeded, Failed; ``assignedNode``, ``attempts``, ``jobName``, ``lastError``,
  ``observedGeneration`` and the conditions ``SpecValid``, ``Scheduled``, ``Retrying``,
  ``Succeeded``, ``Failed``.

Events and counts come from comparing the status found with the status planned, so they are
recorded once per transition however often a workload is reconciled.

Cost: O(Jobs and pods of the workload) per reconcile.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from gpusched.locality import MODEL_ANNOTATION, MODEL_LABEL, label_safe

__all__ = [
    "ATTEMPT_LABEL",
    "DEFAULT_PROFILES",
    "GROUP",
    "KIND",
    "PLURAL",
    "PRIORITY_LEVELS",
    "STRATEGIES",
    "VERSION",
    "WORKLOAD_LABEL",
    "Plan",
    "Settings",
    "SpecError",
    "WorkloadSpec",
    "build_job",
    "job_name",
    "parse_spec",
    "reconcile",
    "retry_delay",
]

GROUP: Final = "gpu.warp.dev"
VERSION: Final = "v1alpha1"
KIND: Final = "GPUWorkload"
PLURAL: Final = "gpuworkloads"
WORKLOAD_LABEL: Final = "gpu.warp.dev/workload"
ATTEMPT_LABEL: Final = "gpu.warp.dev/attempt"
PRIORITY_ANNOTATION: Final = "gpusched.io/priority"
SIM_ANNOTATION_PREFIX: Final = "sim.gpusched.io/"
"""A workload's annotations under this prefix go to its pods (the simulation's kubelet reads
``sim.gpusched.io/duration``)."""

STRATEGIES: Final = ("leastLoaded", "random", "costOptimized")
DEFAULT_PROFILES: Final[Mapping[str, str]] = {
    "leastLoaded": "gpusched-spread",
    "costOptimized": "gpusched-cheap",
    "random": "gpusched-random",
}
"""``schedulingStrategy`` -> ``schedulerName``: profiles of deploy/scheduler/config.yaml."""
PRIORITY_LEVELS: Final[Mapping[str, int]] = {"high": 0, "medium": 1, "low": 2}
DEFAULT_IMAGE: Final = "nvcr.io/nvidia/cuda:12.6.2-base-ubuntu22.04"
DEFAULT_COMMAND: Final = ("nvidia-smi",)
CONTAINER: Final = "workload"
_MAX_NAME: Final = 63  # the Job's name is its pods' job-name label value

PENDING, SCHEDULED, RUNNING, SUCCEEDED, FAILED = (
    "Pending",
    "Scheduled",
    "Running",
    "Succeeded",
    "Failed",
)


@dataclass(frozen=True)
class Settings:
    """How the controller translates workloads; every field has the documented default."""

    profiles: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_PROFILES))
    """``schedulingStrategy`` -> the ``schedulerName`` its pods get."""
    jitter: float = 0.2
    """Each retry waits up to this fraction longer than its exponential delay."""
    max_backoff: float = 3600.0
    """Seconds: the longest wait between two attempts."""
    node_selector: Mapping[str, str] = field(default_factory=dict)
    """Labels the workloads' pods select nodes by (``--node-selector``): a GPU pool."""
    tolerations: tuple[Mapping[str, str], ...] = ()
    """Taints the workloads' pods tolerate (``--toleration``): a tainted GPU pool."""


@dataclass(frozen=True)
class WorkloadSpec:
    model_name: str
    gpu_count: int
    priority: int
    strategy: str
    max_retries: int
    backoff_seconds: float
    image: str
    command: tuple[str, ...]
    args: tuple[str, ...]


@dataclass(frozen=True)
class SpecError:
    """What is wrong with a spec and what to write instead (one sentence per problem)."""

    problems: tuple[str, ...]

    @property
    def message(self) -> str:
        return "; ".join(self.problems)


def _int(value: Any, default: int) -> int | None:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def parse_spec(spec: Mapping[str, Any]) -> WorkloadSpec | SpecError:
    """The spec with the CRD's defaults, or what to fix (all problems at once)."""
    problems: list[str] = []
    model = spec.get("modelName")
    if not isinstance(model, str) or not model:
        problems.append("spec.modelName is required: name the model, e.g. modelName: llama2")
    gpus = _int(spec.get("gpuCount"), 1)
    if gpus is None or gpus < 1:
        problems.append(
            f"spec.gpuCount {spec.get('gpuCount')!r} is not a whole number of GPUs: "
            "write 1 or more (it becomes nvidia.com/gpu in the pod's limits)"
        )
    strategy = spec.get("schedulingStrategy") or "leastLoaded"
    if strategy not in STRATEGIES:
        problems.append(
            f"spec.schedulingStrategy {strategy!r} is unknown: write one of "
            + ", ".join(STRATEGIES)
        )
    raw_priority = spec.get("priority")
    priority = _priority(raw_priority)
    if priority is None:
        problems.append(
            f"spec.priority {raw_priority!r} is unknown: write high, medium or low "
            '(or a gpusched level "0" to "4")'
        )
    retry = spec.get("retryPolicy") or {}
    retries = _int(retry.get("maxRetries"), 3) if isinstance(retry, Mapping) else None
    backoff = _int(retry.get("backoffSeconds"), 30) if isinstance(retry, Mapping) else None
    if retries is None or retries < 0:
        problems.append("spec.retryPolicy.maxRetries must be a whole number, 0 or more")
    if backoff is None or backoff < 0:
        problems.append("spec.retryPolicy.backoffSeconds must be a whole number, 0 or more")
    if problems:
        return SpecError(tuple(problems))
    assert gpus is not None
    assert priority is not None
    assert retries is not None
    assert backoff is not None
    assert isinstance(model, str)
    command = spec.get("command")
    return WorkloadSpec(
        model_name=model,
        gpu_count=gpus,
        priority=priority,
        strategy=str(strategy),
        max_retries=retries,
        backoff_seconds=float(backoff),
        image=str(spec.get("image") or DEFAULT_IMAGE),
        command=tuple(str(c) for c in command) if command else DEFAULT_COMMAND,
        args=tuple(str(a) for a in spec.get("args") or ()),
    )


def _priority(value: Any) -> int | None:
    if value is None or value == "":
        return PRIORITY_LEVELS["medium"]
    text = str(value).strip()
    if text.lower() in PRIORITY_LEVELS:
        return PRIORITY_LEVELS[text.lower()]
    if text in ("0", "1", "2", "3", "4"):
        return int(text)
    return None


def retry_delay(
    attempt: int, base: float, u: float, jitter: float = 0.2, cap: float = 3600.0
) -> float:
    """Seconds to wait after attempt ``attempt`` (1-based) failed, for a draw ``u`` in [0, 1)."""
    return float(min(base * 2 ** (attempt - 1) * (1.0 + jitter * u), cap))


def job_name(workload: str, attempt: int) -> str:
    """``<workload>-<attempt>``, the workload's name shortened to keep it a label value."""
    suffix = f"-{attempt}"
    return workload[: _MAX_NAME - len(suffix)].rstrip("-.") + suffix


@dataclass
class Plan:
    """What to do for one workload."""

    status: dict[str, Any]
    create_job: dict[str, Any] | None = None
    requeue_after: float | None = None
    events: list[tuple[str, str, str]] = field(default_factory=list)
    """``(type, reason, message)``."""
    scheduled: bool = False
    """An attempt's pod was bound (``gpusched_workloads_scheduled_total``)."""
    failed_reason: str = ""
    """The workload failed for good (``gpusched_workloads_failed_total{reason}``)."""
    retried: bool = False
    """An attempt after the first was started (``gpusched_workloads_retries_total``)."""


# ------------------------------------------------------------------ helpers over objects


def _map(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _ts(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse(text: Any) -> datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None


def _condition(obj: Mapping[str, Any], ctype: str) -> dict[str, Any] | None:
    for c in _map(obj.get("status")).get("conditions") or ():
        if isinstance(c, dict) and c.get("type") == ctype:
            return c
    return None


def _true(obj: Mapping[str, Any], ctype: str) -> bool:
    c = _condition(obj, ctype)
    return c is not None and c.get("status") == "True"


def _is_false(obj: Mapping[str, Any], ctype: str) -> bool:
    c = _condition(obj, ctype)
    return c is not None and c.get("status") == "False"


def _attempt(obj: Mapping[str, Any]) -> int:
    text = str(_map(_map(obj.get("metadata")).get("labels")).get(ATTEMPT_LABEL, ""))
    return int(text) if text.isdigit() else 0


def _pod_error(pod: Mapping[str, Any]) -> str:
    """Why a pod failed, as ``kubectl describe`` would tell it."""
    status = _map(pod.get("status"))
    name = _map(pod.get("metadata")).get("name", "")
    for cs in status.get("containerStatuses") or ():
        term = _map(_map(_map(cs).get("state")).get("terminated"))
        if term and term.get("exitCode", 0) != 0:
            why = term.get("message") or term.get("reason") or "Error"
            code = term.get("exitCode")
            return f"pod {name}: container {cs.get('name')} exited with code {code}: {why}"
    if status.get("reason") or status.get("message"):
        return f"pod {name}: {status.get('reason', 'Failed')}: {status.get('message', '')}".rstrip(
            ": "
        )
    return f"pod {name} failed"


def _pending_reason(pod: Mapping[str, Any]) -> str:
    for c in _map(pod.get("status")).get("conditions") or ():
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return str(c.get("message") or c.get("reason") or "")
    return ""


# ------------------------------------------------------------------ the Job


def build_job(
    workload: Mapping[str, Any], spec: WorkloadSpec, attempt: int, settings: Settings
) -> dict[str, Any]:
    """The Job of attempt ``attempt``: owned by the workload, one pod for gpusched."""
    meta = _map(workload.get("metadata"))
    name = str(meta.get("name", ""))
    labels = {WORKLOAD_LABEL: name, ATTEMPT_LABEL: str(attempt)}
    # The model's full name for ModelLocality (a label value cannot hold its "/").
    annotations = {PRIORITY_ANNOTATION: str(spec.priority), MODEL_ANNOTATION: spec.model_name}
    for key, value in _map(meta.get("annotations")).items():
        if key.startswith(SIM_ANNOTATION_PREFIX):
            annotations[key] = str(value)
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": spec.image,
        "command": list(spec.command),
        "env": [{"name": "MODEL_NAME", "value": spec.model_name}],
        "resources": {"limits": {"nvidia.com/gpu": str(spec.gpu_count)}},
    }
    if spec.args:
        container["args"] = list(spec.args)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name(name, attempt),
            "namespace": meta.get("namespace"),
            "labels": dict(labels),
            "ownerReferences": [
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": KIND,
                    "name": name,
                    "uid": meta.get("uid", ""),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "backoffLimit": 0,
            "completions": 1,
            "parallelism": 1,
            "template": {
                "metadata": {
                    # app=<workload>: GPU_Orchestrator's `kubectl logs -l app=my-model`.
                    "labels": {
                        **labels,
                        "app": name,
                        MODEL_LABEL: label_safe(spec.model_name),
                    },
                    "annotations": annotations,
                },
                "spec": _pod_spec(spec, settings, container),
            },
        },
    }


def _pod_spec(spec: WorkloadSpec, settings: Settings, container: dict[str, Any]) -> dict[str, Any]:
    pod_spec: dict[str, Any] = {
        "schedulerName": settings.profiles.get(spec.strategy, "gpusched"),
        "restartPolicy": "Never",
        "containers": [container],
    }
    if settings.node_selector:
        pod_spec["nodeSelector"] = dict(settings.node_selector)
    if settings.tolerations:
        pod_spec["tolerations"] = [dict(t) for t in settings.tolerations]
    return pod_spec


# ------------------------------------------------------------------ reconcile


def reconcile(
    workload: Mapping[str, Any],
    jobs: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
    now: datetime,
    settings: Settings | None = None,
    rng: random.Random | None = None,
) -> Plan:
    """The plan for ``workload`` given the Jobs it owns and their pods (see the module doc)."""
    settings = settings or Settings()
    meta = _map(workload.get("metadata"))
    old = _map(workload.get("status"))
    status: dict[str, Any] = {k: v for k, v in old.items() if k != "conditions"}
    conditions = {
        str(c.get("type")): dict(c) for c in old.get("conditions") or () if isinstance(c, dict)
    }
    status["observedGeneration"] = int(meta.get("generation") or 0)
    plan = Plan(status=status)

    def condition(ctype: str, value: bool, reason: str, message: str) -> None:
        before = conditions.get(ctype)
        text = "True" if value else "False"
        changed = before is None or before.get("status") != text
        conditions[ctype] = {
            "type": ctype,
            "status": text,
            "reason": reason,
            "message": message,
            "lastTransitionTime": (
                _ts(now) if changed or before is None else before.get("lastTransitionTime")
            ),
            "observedGeneration": status["observedGeneration"],
        }

    def finish() -> Plan:
        status["conditions"] = [conditions[k] for k in sorted(conditions)]
        for key in ("assignedNode", "lastError", "nextRetryTime", "jobName"):
            if status.get(key) in (None, ""):
                status.pop(key, None)
        _transitions(plan, old, status)
        return plan

    parsed = parse_spec(_map(workload.get("spec")))
    if isinstance(parsed, SpecError):
        status["phase"] = PENDING if not jobs else status.get("phase", PENDING)
        status["lastError"] = parsed.message
        condition("SpecValid", False, "InvalidSpec", parsed.message)
        if not _is_false({"status": old}, "SpecValid") or old.get("lastError") != parsed.message:
            plan.events.append(("Warning", "InvalidSpec", parsed.message))
        if not jobs:
            return finish()
    else:
        condition("SpecValid", True, "Valid", "")
    spec = parsed if isinstance(parsed, WorkloadSpec) else None

    ordered = sorted(jobs, key=_attempt)
    current = ordered[-1] if ordered else None
    attempts = _attempt(current) if current is not None else 0
    status["attempts"] = max(attempts, int(old.get("attempts") or 0) if current else 0)
    if spec is None:
        # A spec gone bad after Jobs ran: keep reporting them, start nothing new.
        return finish()

    if current is None:
        return _start(plan, workload, spec, 1, settings, status, condition, finish)

    status["jobName"] = _map(current.get("metadata")).get("name", "")
    job_uid = _map(current.get("metadata")).get("uid")
    mine = [
        p
        for p in pods
        if any(
            r.get("uid") == job_uid for r in _map(p.get("metadata")).get("ownerReferences") or ()
        )
    ]
    pod = max(
        mine, key=lambda p: str(_map(p.get("metadata")).get("creationTimestamp", "")), default=None
    )
    node = str(_map(pod.get("spec")).get("nodeName", "")) if pod is not None else ""
    if node:
        status["assignedNode"] = node

    if _true(current, "Complete"):
        status["phase"] = SUCCEEDED
        status.pop("nextRetryTime", None)
        condition("Retrying", False, "Succeeded", "")
        condition("Succeeded", True, "JobComplete", f"attempt {attempts} succeeded")
        return finish()

    if _true(current, "Failed"):
        failed_pods = [p for p in mine if _map(p.get("status")).get("phase") == "Failed"]
        error = (
            _pod_error(failed_pods[-1])
            if failed_pods
            else str((_condition(current, "Failed") or {}).get("message", "the Job failed"))
        )
        status["lastError"] = f"attempt {attempts}: {error}"
        if attempts > spec.max_retries:
            status["phase"] = FAILED
            status.pop("nextRetryTime", None)
            condition("Retrying", False, "RetriesExhausted", "")
            condition(
                "Failed",
                True,
                "RetriesExhausted",
                f"{attempts} attempts failed (maxRetries {spec.max_retries}); last: {error}",
            )
            return finish()
        due = (
            _parse(old.get("nextRetryTime")) if int(old.get("attempts") or 0) == attempts else None
        )
        if due is None:
            failed_at = _parse((_condition(current, "Failed") or {}).get("lastTransitionTime"))
            u = (rng or random.Random()).random()
            delay = retry_delay(
                attempts, spec.backoff_seconds, u, settings.jitter, settings.max_backoff
            )
            due = (failed_at or now) + timedelta(seconds=delay)
            if due.microsecond:  # the status keeps whole seconds: round up
                due = due.replace(microsecond=0) + timedelta(seconds=1)
        if now < due:
            status["phase"] = PENDING
            status["nextRetryTime"] = _ts(due)
            condition(
                "Retrying",
                True,
                "BackingOff",
                f"attempt {attempts} failed; attempt {attempts + 1} of "
                f"{spec.max_retries + 1} starts at {_ts(due)}",
            )
            plan.requeue_after = (due - now).total_seconds()
            return finish()
        plan.retried = True
        return _start(plan, workload, spec, attempts + 1, settings, status, condition, finish)

    # The current attempt is under way.
    status.pop("nextRetryTime", None)
    condition("Retrying", False, "Started", "")
    if pod is None or not node:
        status["phase"] = PENDING
        status.pop("assignedNode", None)
        why = _pending_reason(pod) if pod is not None else ""
        condition("Scheduled", False, "Pending", why or "waiting for gpusched to place the pod")
    else:
        phase = _map(pod.get("status")).get("phase")
        status["phase"] = RUNNING if phase == "Running" else SCHEDULED
        condition("Scheduled", True, "Scheduled", f"attempt {attempts} on node {node}")
    return finish()


def _start(
    plan: Plan,
    workload: Mapping[str, Any],
    spec: WorkloadSpec,
    attempt: int,
    settings: Settings,
    status: dict[str, Any],
    condition: Any,
    finish: Any,
) -> Plan:
    plan.create_job = build_job(workload, spec, attempt, settings)
    status["attempts"] = attempt
    status["jobName"] = plan.create_job["metadata"]["name"]
    status["phase"] = PENDING
    status.pop("assignedNode", None)
    status.pop("nextRetryTime", None)
    condition("Retrying", False, "Started", "")
    condition("Scheduled", False, "Pending", "waiting for gpusched to place the pod")
    result: Plan = finish()
    return result


def _transitions(plan: Plan, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
    """Events and counts for what changed between the status found and the status planned."""
    attempt = int(new.get("attempts") or 0)
    if plan.create_job is not None:
        name = plan.create_job["metadata"]["name"]
        if attempt > 1:
            plan.events.append(("Normal", "Retrying", f"Created Job {name}: attempt {attempt}"))
        else:
            plan.events.append(("Normal", "JobCreated", f"Created Job {name}"))
    node = new.get("assignedNode")
    was_scheduled = bool(old.get("assignedNode")) and old.get("attempts") == new.get("attempts")
    if node and not was_scheduled:
        plan.scheduled = True
        plan.events.append(("Normal", "Scheduled", f"Attempt {attempt} scheduled on node {node}"))
    if (
        new.get("lastError")
        and new.get("lastError") != old.get("lastError")
        and not _is_false({"status": new}, "SpecValid")
    ):
        plan.events.append(("Warning", "AttemptFailed", str(new["lastError"])))
    phase, before = new.get("phase"), old.get("phase")
    if phase == SUCCEEDED and before != SUCCEEDED:
        plan.events.append(("Normal", "Succeeded", f"Attempt {attempt} succeeded"))
    if phase == FAILED and before != FAILED:
        plan.failed_reason = "RetriesExhausted"
        cond = _condition({"status": new}, "Failed") or {}
        plan.events.append(("Warning", "RetriesExhausted", str(cond.get("message", ""))))
    if _is_false({"status": new}, "SpecValid") and not _is_false({"status": old}, "SpecValid"):
        plan.failed_reason = plan.failed_reason or "InvalidSpec"
