"""Preflight: say what the cluster lacks for gpusched, how to fix it, and notice when it is fixed.

Without its CRDs, its reservation namespace or its RBAC, a scheduler used to log ``404 page
not found`` retries and schedule nothing, with no hint. :func:`preflight` checks, once:

- the CRDs (:data:`CRDS`), by discovery (``GET /apis/GROUP/VERSION``, readable by every
  user): ``GPUNodeInventory`` is required (without it no GPU node is known), the policy,
  class and gang CRDs are optional (their informers treat them as empty: the defaults hold);
- the reservation namespace (``config.reservations.namespace``), where the reservation and
  membership Leases are written;
- every verb on every resource the scheduler uses (:data:`SCHEDULER_RULES`, kept equal to
  deploy/scheduler/rbac.yaml's ClusterRole and Role by tests/test_preflight.py), with one
  ``authorization.k8s.io/v1`` SelfSubjectAccessReview each. An API server that does not
  serve those (404) is reported once and the permissions are not checked.

Each :class:`Problem` names what is missing, what it costs and the command that fixes it.
:class:`Preflight` logs them (ERROR for what stops scheduling, WARNING for the rest), re-checks
every ``period`` seconds on the injectable clock while any remain, logs ``resolved: ...`` for
each that goes away, and exports ``gpusched_preflight_problems{severity}``. The scheduler keeps
running meanwhile: its informers retry (the inventory one, optional, every 30 s) and pick the
resources up once they exist.

Cost: one discovery GET per API group-version, one namespace GET and about 70 small
SelfSubjectAccessReview POSTs (concurrent) per check; none once everything is in place.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import resources
from typing import Any, Final, Literal

import yaml
from prometheus_client import CollectorRegistry, Gauge

from gpusched.clock import Clock
from gpusched.framework.config import SchedulerConfiguration
from gpusched.kube.client import Kube, resource_path
from gpusched.kube.errors import APIError, APINotFound

__all__ = [
    "CRDS",
    "SCHEDULER_RULES",
    "CRDCheck",
    "Preflight",
    "Problem",
    "Rule",
    "preflight",
]

log = logging.getLogger(__name__)

Severity = Literal["error", "warning"]

RBAC_FIX: Final = "kubectl apply -f deploy/scheduler/rbac.yaml"
ALL_FIX: Final = "kubectl apply -k deploy/"


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing the cluster lacks: ``what`` is missing, ``why`` it matters, ``fix`` the command."""

    key: str  # stable identity across checks ("crd/...", "namespace/...", "rbac/...")
    severity: Severity
    what: str
    why: str
    fix: str

    def __str__(self) -> str:
        return f"{self.what}: {self.why}; fix: {self.fix}"


@dataclass(frozen=True, slots=True)
class CRDCheck:
    """A CRD gpusched reads: its file in deploy/crds (``name``.yaml) and what is lost without it."""

    name: str
    required: bool
    lost: str


CRDS: Final = (
    CRDCheck(
        "gpunodeinventories.gpusched.io",
        True,
        "no GPU node is known, so no GPU pod is scheduled",
    ),
    CRDCheck(
        "gpunodepolicies.gpusched.io", False, "GPUNodePolicies are not read: the defaults hold"
    ),
    CRDCheck(
        "clustergpupolicies.gpusched.io",
        False,
        "ClusterGPUPolicies are not read: the defaults hold",
    ),
    CRDCheck("gpuclasses.gpusched.io", False, "GPUClasses are not read: the defaults hold"),
    CRDCheck(
        "woolynodepolicies.woolyai.dev",
        False,
        "WoolyAI's node policies are not read: the defaults hold",
    ),
    CRDCheck(
        "clustergpupolicies.woolyai.dev",
        False,
        "WoolyAI's cluster policies are not read: the defaults hold",
    ),
    CRDCheck("gpuclasses.woolyai.dev", False, "WoolyAI's GPU classes are not read"),
    CRDCheck(
        "podgroups.scheduling.x-k8s.io",
        False,
        "scheduler-plugins PodGroups are not read: their pods are scheduled one by one",
    ),
    CRDCheck(
        "gpuclaims.gpu.scheduling",
        False,
        "GpuClaims are not read: pods that refer to one stay pending",
    ),
    CRDCheck(
        "gpuworkloads.gpu.warp.dev",
        False,
        "GPUWorkloads cannot be created (`gpusched controller` turns them into Jobs)",
    ),
)
"""The CRDs of deploy/crds that gpusched reads (tests check every file there is listed)."""


@dataclass(frozen=True, slots=True)
class Rule:
    """One rule of deploy/scheduler/rbac.yaml: ``verbs`` on ``resources`` (``plural`` or
    ``plural/subresource``) of ``groups``; ``namespaced`` rules are the Role's, granted in the
    reservation namespace, the others the ClusterRole's. ``needed_for`` says what breaks."""

    groups: tuple[str, ...]
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    needed_for: str
    required: bool = True
    namespaced: bool = False

    def expand(self) -> Iterator[tuple[str, str, str]]:
        """``(verb, group, resource)`` for every combination."""
        for group in self.groups:
            for res in self.resources:
                for verb in self.verbs:
                    yield verb, group, res


_READ = ("get", "list", "watch")
_WRITE_STATUS = ("patch", "update")

SCHEDULER_RULES: Final = (
    Rule(("",), ("nodes", "namespaces"), _READ, "nodes and namespaces are not seen"),
    Rule(("",), ("pods",), _READ, "pods are not seen"),
    Rule(("",), ("pods/binding",), ("create",), "pods cannot be bound"),
    Rule(("",), ("pods/status",), _WRITE_STATUS, "pods' conditions and nominations are not set"),
    Rule(
        ("scheduling.volcano.sh",),
        ("podgroups",),
        _READ,
        "Volcano PodGroups are not read",
        required=False,
    ),
    Rule(
        ("", "events.k8s.io"),
        ("events",),
        ("create", "patch", "update"),
        "no Events are recorded",
        required=False,
    ),
    Rule(
        ("gpusched.io",),
        ("gpunodeinventories",),
        _READ,
        "no GPU node is known",
    ),
    Rule(
        ("gpusched.io",),
        ("gpuclasses", "gpunodepolicies", "clustergpupolicies"),
        _READ,
        "GPU policies and classes are not read",
        required=False,
    ),
    Rule(
        ("gpusched.io",),
        ("gpuclasses/status", "gpunodepolicies/status", "clustergpupolicies/status"),
        _WRITE_STATUS,
        "GPU policies' status is not reported",
        required=False,
    ),
    Rule(
        ("woolyai.dev",),
        ("gpuclasses", "woolynodepolicies", "clustergpupolicies"),
        _READ,
        "WoolyAI's policy objects are not read",
        required=False,
    ),
    Rule(
        ("scheduling.k8s.io",),
        ("priorityclasses", "workloads", "podgroups"),
        _READ,
        "priorities and Kubernetes gangs are not read",
        required=False,
    ),
    Rule(
        ("scheduling.x-k8s.io",),
        ("podgroups",),
        _READ,
        "scheduler-plugins PodGroups are not read",
        required=False,
    ),
    Rule(
        ("scheduling.k8s.io", "scheduling.x-k8s.io"),
        ("podgroups/status",),
        _WRITE_STATUS,
        "gangs' status is not reported",
        required=False,
    ),
    Rule(
        ("gpu.scheduling",),
        ("gpuclaims",),
        _READ,
        "GpuClaims are not read: pods that refer to one stay pending",
        required=False,
    ),
    Rule(
        ("gpu.scheduling",),
        ("gpuclaims", "gpuclaims/status"),
        ("patch",),
        "GpuClaims' status (phase, node, devices) and in-use finalizer are not written",
        required=False,
    ),
    Rule(
        ("resource.k8s.io",),
        ("resourceclaims", "resourceslices", "deviceclasses", "resourceclaimtemplates"),
        _READ,
        "ResourceClaims are not read: pods that use one stay pending",
        required=False,
    ),
    Rule(
        ("resource.k8s.io",),
        ("resourceclaims", "resourceclaims/status"),
        ("patch", "update"),
        "ResourceClaims are not allocated (finalizer, status): pods that use one fail PreBind",
        required=False,
    ),
    Rule(
        ("policy",),
        ("poddisruptionbudgets",),
        _READ,
        "preemption ignores PodDisruptionBudgets",
        required=False,
    ),
    Rule(("",), ("pods/eviction",), ("create",), "preemption cannot evict", required=False),
    Rule(
        ("coordination.k8s.io",),
        ("leases",),
        ("get", "list", "watch", "create", "update", "patch", "delete"),
        "reservations and leader election cannot be written",
        namespaced=True,
    ),
)
"""What the scheduler does on the API, as deploy/scheduler/rbac.yaml grants it (same order)."""


@functools.cache
def _crd_coordinates(name: str) -> tuple[str, str, str]:
    """``(group, served version, plural)`` of the packaged CRD ``name``."""
    data = resources.files("gpusched").joinpath("crds", f"{name}.yaml").read_bytes()
    spec = yaml.safe_load(data)["spec"]
    version = next(v["name"] for v in spec["versions"] if v.get("served", True))
    return spec["group"], version, spec["names"]["plural"]


async def _served(kube: Kube, group: str, version: str) -> set[str]:
    """The resources discovery lists for ``group/version`` (none when it is not served)."""
    try:
        listing = await kube.get(f"/apis/{group}/{version}")
    except APINotFound:
        return set()
    return {r["name"] for r in (listing or {}).get("resources", [])}


async def _check_crds(kube: Kube) -> list[Problem]:
    coords = {c.name: _crd_coordinates(c.name) for c in CRDS}
    gvs = sorted({(g, v) for g, v, _ in coords.values()})
    listed = await asyncio.gather(*(_served(kube, g, v) for g, v in gvs))
    served = dict(zip(gvs, listed, strict=True))
    out = []
    for crd in CRDS:
        group, version, plural = coords[crd.name]
        if plural in served[(group, version)]:
            continue
        out.append(
            Problem(
                key=f"crd/{crd.name}",
                severity="error" if crd.required else "warning",
                what=f"CustomResourceDefinition {crd.name} is not installed "
                f"({'required' if crd.required else 'optional'})",
                why=crd.lost,
                fix=f"kubectl apply -f deploy/crds/{crd.name}.yaml",
            )
        )
    return out


async def _check_namespace(kube: Kube, namespace: str) -> list[Problem]:
    try:
        await kube.get(resource_path("", "v1", "namespaces", name=namespace))
    except APINotFound:
        fix = (
            "kubectl apply -f deploy/namespace.yaml"
            if namespace == "gpusched-system"
            else f"kubectl create namespace {namespace}"
        )
        return [
            Problem(
                key=f"namespace/{namespace}",
                severity="error",
                what=f"the reservation namespace {namespace} does not exist",
                why="no GPU reservation (Lease) can be written, so no pod is bound",
                fix=fix,
            )
        ]
    return []  # a 403 is the permission check's to report


def _review(verb: str, group: str, resource: str, namespace: str | None) -> dict[str, Any]:
    plural, _, sub = resource.partition("/")
    attrs: dict[str, Any] = {"verb": verb, "group": group, "resource": plural}
    if sub:
        attrs["subresource"] = sub
    if namespace:
        attrs["namespace"] = namespace
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": attrs},
    }


class _ReviewsNotServed(Exception):
    pass


async def _allowed(kube: Kube, verb: str, group: str, resource: str, ns: str | None) -> bool:
    try:
        answer = await kube.create(
            resource_path("authorization.k8s.io", "v1", "selfsubjectaccessreviews"),
            _review(verb, group, resource, ns),
        )
    except APINotFound:
        raise _ReviewsNotServed from None
    return bool((answer.get("status") or {}).get("allowed"))


async def _check_permissions(kube: Kube, namespace: str) -> list[Problem]:
    """Raises ``_ReviewsNotServed`` when the server answers 404 to the reviews."""
    asks = [
        (rule, verb, group, res) for rule in SCHEDULER_RULES for verb, group, res in rule.expand()
    ]
    # The first alone: a server without the reviews answers 404 once, not ~70 times at once.
    calls = [
        (verb, group, res, namespace if rule.namespaced else None)
        for rule, verb, group, res in asks
    ]
    first = await _allowed(kube, *calls[0])
    rest = await asyncio.gather(*(_allowed(kube, *c) for c in calls[1:]), return_exceptions=True)
    for answer in rest:
        if isinstance(answer, BaseException):
            raise answer  # all have finished: no exception is left unretrieved
    answers = [first, *(bool(a) for a in rest)]
    denied: dict[tuple[Rule, str, str], list[str]] = {}
    for (rule, verb, group, res), ok in zip(asks, answers, strict=True):
        if not ok:
            denied.setdefault((rule, group, res), []).append(verb)
    out = []
    for (rule, group, res), verbs in denied.items():
        qualified = f"{res}.{group}" if group else res
        where = f" in namespace {namespace}" if rule.namespaced else ""
        out.append(
            Problem(
                key=f"rbac/{qualified}{where}",
                severity="error" if rule.required else "warning",
                what=f"no permission to {', '.join(verbs)} {qualified}{where}",
                why=rule.needed_for,
                fix=RBAC_FIX
                + (
                    f" (with the Role gpusched-leases in namespace {namespace})"
                    if rule.namespaced and namespace != "gpusched-system"
                    else ""
                ),
            )
        )
    return out


async def preflight(
    kube: Kube, config: SchedulerConfiguration, *, check_permissions: bool = True
) -> list[Problem]:
    """What the cluster lacks for ``config``'s scheduler (empty when nothing).

    Raises ``_ReviewsNotServed`` (internal; :class:`Preflight` handles it) when
    ``check_permissions`` and the server does not serve SelfSubjectAccessReviews.
    """
    namespace = config.reservations.namespace
    checks = [_check_crds(kube), _check_namespace(kube, namespace)]
    if check_permissions:
        checks.append(_check_permissions(kube, namespace))
    results = await asyncio.gather(*checks)
    return [p for problems in results for p in problems]


class Preflight:
    """Runs :func:`preflight` at start and every ``period`` seconds while problems remain,
    logging each new problem once and each that goes away (``resolved: ...``)."""

    def __init__(
        self,
        kube: Kube,
        config: SchedulerConfiguration,
        clock: Clock,
        *,
        period: float = 30.0,
        registry: CollectorRegistry | None = None,
        on_change: Callable[[list[Problem]], None] | None = None,
    ) -> None:
        self.kube = kube
        self.config = config
        self.clock = clock
        self.period = period
        self.on_change = on_change
        self.problems: dict[str, Problem] = {}
        self.checks = 0
        self._reviews = True  # False once the server answered 404 to a review
        self._gauge = (
            Gauge(
                "gpusched_preflight_problems",
                "What the cluster lacks for gpusched (CRDs, namespace, permissions), by "
                "severity; 0 when everything is in place (the log says what and how to fix)",
                ["severity"],
                registry=registry,
            )
            if registry is not None
            else None
        )

    async def check(self) -> list[Problem]:
        """One check: log what changed since the last one; returns the problems now."""
        self.checks += 1
        try:
            found = await preflight(self.kube, self.config, check_permissions=self._reviews)
        except _ReviewsNotServed:
            self._reviews = False
            log.warning(
                "preflight: the API server does not serve authorization.k8s.io/v1 "
                "SelfSubjectAccessReviews (404): permissions are not checked; if the scheduler "
                "is denied something, run %s",
                RBAC_FIX,
            )
            found = await preflight(self.kube, self.config, check_permissions=False)
        now = {p.key: p for p in found}
        for key, problem in now.items():
            if key not in self.problems:
                level = logging.ERROR if problem.severity == "error" else logging.WARNING
                log.log(level, "preflight: %s", problem)
        if self.checks == 1 and found:
            log.warning("preflight: to install everything gpusched needs at once: %s", ALL_FIX)
        for key, problem in self.problems.items():
            if key not in now:
                # WARNING, as the line it answers: shown at the default log level.
                log.warning("preflight: resolved: %s", problem.what)
        self.problems = now
        if self._gauge is not None:
            for severity in ("error", "warning"):
                self._gauge.labels(severity).set(sum(1 for p in found if p.severity == severity))
        if self.on_change is not None:
            self.on_change(found)
        return found

    async def run(self) -> None:
        """Check until nothing is missing; an error is logged and the check retried next
        period (the scheduler, in its own tasks, is never stopped by this one)."""
        while True:
            try:
                found = await self.check()
            except APIError as exc:
                log.warning("preflight: could not check the cluster (%s); retrying", exc)
                found = [Problem("check", "warning", "preflight check failed", str(exc), "")]
            except Exception as exc:  # a bug here must not stop the checks, nor the scheduler
                log.exception("preflight: the check failed; retrying")
                found = [Problem("check", "warning", "preflight check failed", repr(exc), "")]
            if not found:
                if self.checks > 1:
                    log.info("preflight: everything gpusched needs is in place")
                return
            await self.clock.sleep(self.period)
