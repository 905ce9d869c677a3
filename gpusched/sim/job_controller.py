"""``batch/v1`` Jobs in the simulation: the API server's Job strategy and the Job controller.

Two halves, as in Kubernetes:

* :class:`JobStrategy` is what ``pkg/registry/batch/job/strategy.go`` and
  ``pkg/apis/batch/{v1/defaults.go,validation}`` do on the server: defaults (``parallelism`` 1,
  ``completions`` 1 when both are unset, ``backoffLimit`` 6, ``completionMode`` NonIndexed,
  ``suspend`` false, ``podReplacementPolicy`` TerminatingOrFailed, the pod template's own
  defaults), the generated selector (``batch.kubernetes.io/controller-uid`` in
  ``spec.selector.matchLabels``; the template gets it and ``batch.kubernetes.io/job-name`` plus
  the legacy ``controller-uid`` and ``job-name``), validation of the fields used (non-negative
  counts, ``restartPolicy`` Never or OnFailure, a selector matching the template's labels, a
  user selector only with ``manualSelector: true``, the template's pod spec), the immutable
  fields on update, ``/status``, and ``kubectl get jobs``'s columns.
* :class:`JobController` plays kube-controller-manager's ``pkg/controller/job`` as an API
  client on the :class:`~gpusched.kube.controller.Controller` base (list/watch Jobs and their
  pods, create pods, ``/status`` PUTs conditional on the resourceVersion): it keeps
  ``min(parallelism, completions - succeeded)`` pods active, each made from the template with
  a controller ownerReference; counts Succeeded and Failed pods;
  replaces a failed pod after the controller's backoff (10 s doubling per failure since the
  last success, capped at 10 min, measured from the failure, on the injectable ``Clock``);
  sets ``startTime``, ``active``/``ready``/``terminating``/``succeeded``/``failed``, and ends
  the Job as the current controller does: ``FailureTarget`` then ``Failed`` (reason
  ``BackoffLimitExceeded``) once more pods failed than ``backoffLimit``, ``SuccessCriteriaMet``
  then ``Complete`` (reason ``CompletionsReached``) and ``completionTime`` once enough
  succeeded, in both cases after deleting the pods still active.

Deleting a Job deletes its pods through the registry's owner-reference garbage collector
(``Background`` or ``Foreground``); a DELETE without a propagationPolicy orphans them, as
batch/v1's ``DefaultGarbageCollectionPolicy`` says.

Simplified against upstream: pods carry no ``batch.kubernetes.io/job-tracking`` finalizer, so
the counts are those of the terminal pods that still exist (nobody in the simulation deletes
finished pods but the garbage collector); ``Indexed`` completion, ``podFailurePolicy``,
``successPolicy``, ``suspend`` and ``activeDeadlineSeconds`` are stored but not acted on.

Cost: one queue entry per Job or owned-pod event; a sync is O(pods of the Job).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Final

from gpusched.clock import Clock
from gpusched.kube.client import Kube, resource_path
from gpusched.kube.controller import Controller
from gpusched.kube.errors import APINotFound
from gpusched.kube.reflector import object_key
from gpusched.kube.workqueue import ItemExponentialRateLimiter
from gpusched.sim import field, kinds
from gpusched.sim.field import FieldError

__all__ = [
    "API_BACKOFF",
    "CONTROLLER_UID_LABEL",
    "DEFAULT_BACKOFF",
    "GROUP",
    "JOB_NAME_LABEL",
    "MAX_API_BACKOFF",
    "MAX_BACKOFF",
    "JobController",
    "JobStrategy",
    "job_condition",
    "pod_backoff",
]

GROUP: Final = "batch"
CONTROLLER_UID_LABEL: Final = "batch.kubernetes.io/controller-uid"
JOB_NAME_LABEL: Final = "batch.kubernetes.io/job-name"
LEGACY_CONTROLLER_UID_LABEL: Final = "controller-uid"
LEGACY_JOB_NAME_LABEL: Final = "job-name"
DEFAULT_BACKOFF: Final = 10.0
"""``DefaultJobPodFailureBackOff``: the delay before replacing the first failed pod."""
MAX_BACKOFF: Final = 600.0
"""``MaxJobPodFailureBackOff``: the doubling stops here."""
API_BACKOFF: Final = 1.0
"""``DefaultJobApiBackOff``: the first retry of a Job whose sync failed on an API error."""
MAX_API_BACKOFF: Final = 60.0
"""``MaxJobApiBackOff``."""
_TERMINAL: Final = ("Succeeded", "Failed")


# =============================================================================================
# The server side
# =============================================================================================


def _prefixed(errs: list[FieldError], prefix: str) -> list[FieldError]:
    return [e._replace(field=prefix + e.field) for e in errs]


def _nonnegative(spec: Mapping[str, Any], key: str) -> list[FieldError]:
    value = spec.get(key)
    if isinstance(value, int) and value < 0:
        return [field.invalid(f"spec.{key}", value, "must be greater than or equal to 0")]
    return []


def _selector_matches(selector: Mapping[str, Any], labels: Mapping[str, Any]) -> bool:
    """``matchLabels`` and the ``In``/``NotIn``/``Exists``/``DoesNotExist`` expressions."""
    for k, v in kinds._map(selector.get("matchLabels")).items():
        if labels.get(k) != v:
            return False
    for expr in kinds._list(selector.get("matchExpressions")):
        e = kinds._map(expr)
        key, op, values = kinds._str(e.get("key")), e.get("operator"), kinds._list(e.get("values"))
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }.get(kinds._str(op), False)
        if not ok:
            return False
    return bool(selector.get("matchLabels") or selector.get("matchExpressions"))


def _default_job(obj: dict[str, Any]) -> None:
    """``SetDefaults_Job`` and the template's pod defaults."""
    spec = kinds._ensure(obj, "spec")
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
        spec["parallelism"] = 1
    if spec.get("parallelism") is None:
        spec["parallelism"] = 1
    if spec.get("backoffLimit") is None and spec.get("backoffLimitPerIndex") is None:
        spec["backoffLimit"] = 6
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    if spec.get("podReplacementPolicy") is None:
        spec["podReplacementPolicy"] = (
            "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed"
        )
    template = kinds._ensure(spec, "template")
    kinds._default_pod(template)


def _generate_selector(obj: dict[str, Any]) -> None:
    """``generateSelector``: the template's four labels and the selector on the uid."""
    meta = kinds._meta(obj)
    uid, name = kinds._str(meta.get("uid")), kinds._str(meta.get("name"))
    spec = kinds._ensure(obj, "spec")
    tmeta = kinds._ensure(kinds._ensure(spec, "template"), "metadata")
    labels = tmeta.get("labels")
    if not isinstance(labels, dict):
        labels = tmeta["labels"] = {}
    for key, value in (
        (LEGACY_CONTROLLER_UID_LABEL, uid),
        (LEGACY_JOB_NAME_LABEL, name),
        (CONTROLLER_UID_LABEL, uid),
        (JOB_NAME_LABEL, name),
    ):
        labels.setdefault(key, value)
    selector = spec.get("selector")
    if not isinstance(selector, dict):
        selector = spec["selector"] = {}
    match = selector.get("matchLabels")
    if not isinstance(match, dict):
        match = selector["matchLabels"] = {}
    match.setdefault(CONTROLLER_UID_LABEL, uid)


def _validate_job_spec(spec: Mapping[str, Any], manual: bool) -> list[FieldError]:
    errs: list[FieldError] = []
    for key in ("parallelism", "completions", "backoffLimit"):
        errs.extend(_nonnegative(spec, key))
    deadline = spec.get("activeDeadlineSeconds")
    if isinstance(deadline, int) and deadline <= 0:
        errs.append(field.invalid("spec.activeDeadlineSeconds", deadline, "must be greater than 0"))
    mode = kinds._str(spec.get("completionMode"))
    if mode not in ("NonIndexed", "Indexed"):
        errs.append(field.not_supported("spec.completionMode", mode, ["NonIndexed", "Indexed"]))
    elif mode == "Indexed" and spec.get("completions") is None:
        errs.append(field.required("spec.completions", "when completion mode is Indexed"))
    selector = spec.get("selector")
    template = kinds._map(spec.get("template"))
    labels = kinds._map(kinds._map(template.get("metadata")).get("labels"))
    if not isinstance(selector, dict) or not selector:
        errs.append(field.required("spec.selector", ""))
    elif not _selector_matches(selector, labels):
        errs.append(
            field.invalid(
                "spec.template.metadata.labels",
                field.struct(labels),
                "`selector` does not match template `labels`",
            )
        )
    tspec = kinds._map(template.get("spec"))
    restart = kinds._str(tspec.get("restartPolicy"))
    if restart not in ("OnFailure", "Never"):
        errs.append(
            field.not_supported("spec.template.spec.restartPolicy", restart, ["OnFailure", "Never"])
        )
    errs.extend(kinds._validate_labels(labels, "spec.template.metadata.labels"))
    errs.extend(_prefixed(kinds._validate_pod_spec(tspec), "spec.template."))
    return errs


class JobStrategy(kinds.Strategy):
    """``batch/v1`` Job (see the module docstring)."""

    # jobStrategy: OrphanDependents for batch/v1 "for backwards compatibility" - a Job deleted
    # through the API without a propagationPolicy leaves its pods (kubectl asks Background).
    gc_policy = "OrphanDependents"

    def __init__(self) -> None:
        super().__init__("Job", GROUP, "jobs", True, has_status=True, tracks_generation=True)

    def prepare_for_create(self, obj: dict[str, Any]) -> None:
        kinds._check_meta_decoding("Job", obj)
        _default_job(obj)
        obj["status"] = {}
        spec = kinds._map(obj.get("spec"))
        if spec.get("manualSelector") is not True and "selector" not in spec:
            _generate_selector(obj)

    def validate_create(self, obj: dict[str, Any]) -> list[FieldError]:
        errs = kinds._validate_object_meta(obj, self.name_fn, kube=False)
        spec = kinds._map(obj.get("spec"))
        manual = spec.get("manualSelector") is True
        if not manual:
            uid = kinds._str(kinds._meta(obj).get("uid"))
            match = kinds._map(kinds._map(spec.get("selector")).get("matchLabels"))
            if match.get(CONTROLLER_UID_LABEL) != uid or len(match) != 1:
                errs.append(
                    field.invalid(
                        "spec.selector",
                        field.struct(spec.get("selector")),
                        "`selector` not auto-generated",
                    )
                )
        return errs + _validate_job_spec(spec, manual)

    def prepare_for_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        kinds._check_meta_decoding("Job", new)
        _default_job(new)
        kinds._keep(new, old, "status")

    def validate_update(self, new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
        errs = kinds._validate_object_meta_update(new, old, kube=False)
        spec, old_spec = kinds._map(new.get("spec")), kinds._map(old.get("spec"))
        errs.extend(_validate_job_spec(spec, spec.get("manualSelector") is True))
        for key in ("selector", "completionMode", "podFailurePolicy"):
            if spec.get(key) != old_spec.get(key):
                errs.append(field.immutable(f"spec.{key}", field.struct(spec.get(key))))
        if spec.get("template") != old_spec.get("template") and not old_spec.get("suspend"):
            errs.append(field.immutable("spec.template", field.struct(spec.get("template"))))
        if spec.get("completions") != old_spec.get("completions") and (
            spec.get("completionMode") != "Indexed"
        ):
            errs.append(field.immutable("spec.completions", spec.get("completions")))
        return errs

    def prepare_for_status_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        kinds._keep(new, old, "spec")
        meta, old_meta = kinds._ensure(new, "metadata"), kinds._meta(old)
        for key in ("labels", "annotations", "finalizers", "ownerReferences"):
            kinds._keep(meta, old_meta, key)

    def validate_status_update(self, new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
        errs = kinds._validate_object_meta_update(new, old, kube=False)
        status = kinds._map(new.get("status"))
        for key in ("active", "succeeded", "failed", "ready", "terminating"):
            value = status.get(key)
            if isinstance(value, int) and value < 0:
                errs.append(
                    field.invalid(f"status.{key}", value, "must be greater than or equal to 0")
                )
        return errs

    def table(self, objs: list[dict[str, Any]], now: datetime) -> dict[str, Any]:
        """``printJob``: Name, Status, Completions, Duration, Age (wide: Containers, Images,
        Selector)."""
        columns = [
            kinds._NAME_COL,
            kinds._col("Status", "Status of the job."),
            kinds._col("Completions", "The completion status of the job as a fraction"),
            kinds._col("Duration", "Time required to complete the job."),
            kinds._AGE_COL,
            kinds._col("Containers", "Names of each container in the template.", priority=1),
            kinds._col(
                "Images", "Images referenced by each container in the template.", priority=1
            ),
            kinds._col("Selector", "Selector of the job.", priority=1),
        ]
        rows = []
        for o in objs:
            spec, status = kinds._map(o.get("spec")), kinds._map(o.get("status"))
            containers = kinds._list(
                kinds._map(kinds._map(spec.get("template")).get("spec")).get("containers")
            )
            match = kinds._map(kinds._map(spec.get("selector")).get("matchLabels"))
            rows.append(
                kinds._row(
                    o,
                    [
                        kinds._str(kinds._meta(o).get("name")),
                        _job_status_word(o),
                        _completions(spec, status),
                        _duration(status, now),
                        kinds._since(kinds._meta(o).get("creationTimestamp"), now),
                        ",".join(kinds._str(kinds._map(c).get("name")) for c in containers),
                        ",".join(kinds._str(kinds._map(c).get("image")) for c in containers),
                        ",".join(f"{k}={v}" for k, v in sorted(match.items())),
                    ],
                )
            )
        return kinds._table(columns, rows)


def job_condition(job: Mapping[str, Any], ctype: str) -> dict[str, Any] | None:
    """The Job's condition ``ctype`` when its status is True."""
    for c in kinds._list(kinds._map(job.get("status")).get("conditions")):
        cond = kinds._map(c)
        if cond.get("type") == ctype and cond.get("status") == "True":
            return cond
    return None


def _job_status_word(job: Mapping[str, Any]) -> str:
    for ctype in ("Complete", "Failed"):
        if job_condition(job, ctype):
            return ctype
    if kinds._meta(job).get("deletionTimestamp"):
        return "Terminating"
    for ctype in ("Suspended", "FailureTarget", "SuccessCriteriaMet"):
        if job_condition(job, ctype):
            return ctype
    return "Running"


def _completions(spec: Mapping[str, Any], status: Mapping[str, Any]) -> str:
    succeeded = int(status.get("succeeded") or 0)
    if spec.get("completions") is not None:
        return f"{succeeded}/{spec['completions']}"
    parallelism = int(spec.get("parallelism") or 0)
    return f"{succeeded}/1 of {parallelism}" if parallelism > 1 else f"{succeeded}/1"


def _duration(status: Mapping[str, Any], now: datetime) -> str:
    start = kinds._parse_time_lenient(status.get("startTime"))
    if start is None:
        return ""
    end = kinds._parse_time_lenient(status.get("completionTime")) or now
    return kinds.human_duration(end - start)


# =============================================================================================
# The controller
# =============================================================================================


def pod_backoff(failures: int, initial: float = DEFAULT_BACKOFF, cap: float = MAX_BACKOFF) -> float:
    """The delay before the next pod after ``failures`` failures since the last success."""
    if failures <= 0:
        return 0.0
    return float(min(initial * 2 ** (failures - 1), cap))


def _owner_uid(pod: Mapping[str, Any]) -> str:
    for ref in kinds._list(kinds._meta(pod).get("ownerReferences")):
        r = kinds._map(ref)
        if r.get("kind") == "Job" and r.get("apiVersion") == "batch/v1" and r.get("controller"):
            return kinds._str(r.get("uid"))
    return ""


def _phase(pod: Mapping[str, Any]) -> str:
    return kinds._str(kinds._map(pod.get("status")).get("phase"))


def _finished_at(pod: Mapping[str, Any]) -> datetime | None:
    """When the pod's last container terminated (or its last condition changed)."""
    status = kinds._map(pod.get("status"))
    times = [
        kinds._parse_time_lenient(
            kinds._map(kinds._map(kinds._map(c).get("state")).get("terminated")).get("finishedAt")
        )
        for c in kinds._list(status.get("containerStatuses"))
    ]
    times += [
        kinds._parse_time_lenient(kinds._map(c).get("lastTransitionTime"))
        for c in kinds._list(status.get("conditions"))
    ]
    found = [t for t in times if t is not None]
    return max(found) if found else None


def _ready(pod: Mapping[str, Any]) -> bool:
    for c in kinds._list(kinds._map(pod.get("status")).get("conditions")):
        cond = kinds._map(c)
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


class JobController(Controller):
    """``await run()`` until cancelled; ``synced`` is set once Jobs and pods are listed.

    Its queue retries API errors as upstream's does (``DefaultJobApiBackOff`` 1 s doubling to
    ``MaxJobApiBackOff`` 1 min); a 409 syncs the Job again at once."""

    def __init__(self, kube: Kube, clock: Clock | None = None) -> None:
        super().__init__(
            "job",
            clock=clock,
            rate_limiter=ItemExponentialRateLimiter(API_BACKOFF, MAX_API_BACKOFF),
        )
        self.kube = kube
        self.jobs = self.informer(
            kube, resource_path(GROUP, "v1", "jobs"), self._on_job, name="jobs"
        )
        self.pods = self.informer(
            kube,
            resource_path("", "v1", "pods"),
            self._on_pod,
            label_selector=CONTROLLER_UID_LABEL,
            name="pods",
        )
        self._by_uid: dict[str, str] = {}  # job uid -> key
        self._expected: dict[str, set[str]] = {}  # job uid -> names created, not yet seen
        self.created = 0

    # ------------------------------------------------------------------ events

    def _on_job(self, kind: str, job: dict[str, Any], old: dict[str, Any] | None) -> None:
        key, uid = object_key(job), kinds._str(job["metadata"].get("uid"))
        if kind == "DELETED":
            self._by_uid.pop(uid, None)
            self._expected.pop(uid, None)
            return
        self._by_uid[uid] = key
        self.queue.add(key)

    def _on_pod(self, kind: str, pod: dict[str, Any], old: dict[str, Any] | None) -> None:
        uid = _owner_uid(pod)
        expected = self._expected.get(uid)
        if expected is not None:
            expected.discard(pod["metadata"]["name"])
        key = self._by_uid.get(uid)
        if key is not None:
            self.queue.add(key)

    # ------------------------------------------------------------------ sync

    async def sync(self, key: str) -> None:
        job = self.jobs.items.get(key)
        if job is None:
            return
        meta, spec = job["metadata"], kinds._map(job.get("spec"))
        uid = kinds._str(meta.get("uid"))
        if meta.get("deletionTimestamp") or job_condition(job, "Complete"):
            return
        if job_condition(job, "Failed"):
            return
        pods = [p for p in self.pods.items.values() if _owner_uid(p) == uid]
        active = [
            p
            for p in pods
            if _phase(p) not in _TERMINAL and not p["metadata"].get("deletionTimestamp")
        ]
        terminating = [
            p for p in pods if _phase(p) not in _TERMINAL and p["metadata"].get("deletionTimestamp")
        ]
        succeeded = [p for p in pods if _phase(p) == "Succeeded"]
        failed = [p for p in pods if _phase(p) == "Failed"]
        now = self.clock.now()
        status = copy.deepcopy(kinds._map(job.get("status")))
        status.setdefault("startTime", kinds._format_time(now))
        completions = spec.get("completions")
        backoff_limit = int(spec.get("backoffLimit") or 0)
        conditions: list[dict[str, Any]] = list(kinds._list(status.get("conditions")))

        def add_condition(ctype: str, reason: str, message: str) -> None:
            if any(c.get("type") == ctype for c in conditions):
                return
            ts = kinds._format_time(now)
            conditions.append(
                {
                    "type": ctype,
                    "status": "True",
                    "lastProbeTime": ts,
                    "lastTransitionTime": ts,
                    "reason": reason,
                    "message": message,
                }
            )

        done = False
        if len(failed) > backoff_limit:
            add_condition(
                "FailureTarget",
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit",
            )
            done = True
        elif (completions is not None and len(succeeded) >= int(completions)) or (
            completions is None and succeeded and not active
        ):
            add_condition(
                "SuccessCriteriaMet",
                "CompletionsReached",
                "Reached expected number of succeeded pods",
            )
            done = True
        if done:
            for pod in active:
                with contextlib.suppress(APINotFound):
                    await self._delete_pod(pod)
            if not active and not terminating:
                if any(c.get("type") == "FailureTarget" for c in conditions):
                    add_condition(
                        "Failed",
                        "BackoffLimitExceeded",
                        "Job has reached the specified backoff limit",
                    )
                else:
                    add_condition(
                        "Complete",
                        "CompletionsReached",
                        "Reached expected number of succeeded pods",
                    )
                    status["completionTime"] = kinds._format_time(now)
            terminating += active
            active = []
        else:
            parallelism = int(spec.get("parallelism") or 0)
            want = parallelism
            if completions is not None:
                want = min(parallelism, int(completions) - len(succeeded))
            expected = self._expected.setdefault(uid, set())
            need = want - len(active) - len(expected)
            if need > 0:
                delay = self._backoff_left(succeeded, failed, now)
                if delay > 0:
                    self.queue.add_after(key, delay)
                else:
                    for _ in range(need):
                        pod = await self._create_pod(job)
                        expected.add(pod["metadata"]["name"])
                        active.append(pod)
        status["conditions"] = conditions
        if not conditions:
            del status["conditions"]
        status["active"] = len(active)
        status["ready"] = sum(1 for p in active if _ready(p))
        status["terminating"] = len(terminating)
        status["succeeded"] = len(succeeded)
        status["failed"] = len(failed)
        status["uncountedTerminatedPods"] = {}
        for k in ("active", "succeeded", "failed"):
            if not status[k]:
                del status[k]  # omitempty
        if status != kinds._map(job.get("status")):
            body = copy.deepcopy(job)
            body["status"] = status
            path = resource_path(GROUP, "v1", "jobs", meta.get("namespace"), meta["name"], "status")
            with contextlib.suppress(APINotFound):
                await self.kube.replace(path, body)

    @staticmethod
    def _backoff_left(
        succeeded: list[dict[str, Any]], failed: list[dict[str, Any]], now: datetime
    ) -> float:
        last_success = max(
            (t for t in (_finished_at(p) for p in succeeded) if t is not None), default=None
        )
        failures = [
            t
            for t in (_finished_at(p) for p in failed)
            if t is not None and (last_success is None or t > last_success)
        ]
        if not failures:
            return 0.0
        due = max(failures) + timedelta(seconds=pod_backoff(len(failures)))
        return max(0.0, (due - now).total_seconds())

    async def _create_pod(self, job: Mapping[str, Any]) -> dict[str, Any]:
        meta = job["metadata"]
        template = copy.deepcopy(kinds._map(kinds._map(job.get("spec")).get("template")))
        tmeta = kinds._map(template.get("metadata"))
        pod_meta: dict[str, Any] = {
            "generateName": f"{meta['name']}-",
            "namespace": meta.get("namespace"),
            "labels": kinds._map(tmeta.get("labels")),
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        }
        if tmeta.get("annotations"):
            pod_meta["annotations"] = tmeta["annotations"]
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": template["spec"]}
        created: dict[str, Any] = await self.kube.create(
            resource_path("", "v1", "pods", meta.get("namespace")), body
        )
        self.created += 1
        return created

    async def _delete_pod(self, pod: Mapping[str, Any]) -> None:
        meta = pod["metadata"]
        await self.kube.delete(
            resource_path("", "v1", "pods", meta.get("namespace"), meta["name"]),
            {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": meta["uid"]}},
        )
