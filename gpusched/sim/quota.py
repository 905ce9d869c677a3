"""ResourceQuota in the simulated API server: the object, its admission and its usage.

Three upstream pieces, emulated simply:

* the **object** (``pkg/registry/core/resourcequota``, ``ValidateResourceQuota``):
  :class:`ResourceQuotaStrategy`. Every ``spec.hard`` key is a qualified name; one without a
  ``/`` must be a standard quota resource ("must be a standard resource for quota"); values
  are non-negative, whole for integer resources (``pods``, extended resources); scopes are
  known, not conflicting, and those other than the unscoped ones may only limit pods and
  cpu/memory. ``status`` is cleared on create and kept on spec updates.
* the **admission plugin** (``plugin/pkg/admission/resourcequota``, ``checkRequest``) on pod
  create: :func:`check_pod`. For each quota of the namespace whose scopes match the pod and
  whose ``status.hard`` names a resource the pod evaluator tracks, cpu/memory quotas first
  require every container to state them ("failed quota: q: must specify limits.cpu for:
  main"); then ``status.used`` + the pod's usage must stay within ``status.hard``, else 403
  ``pods "p" is forbidden: exceeded quota: q, requested: requests.gpusched.io/gpu=1, used:
  requests.gpusched.io/gpu=4, limited: requests.gpusched.io/gpu=4``.
* the **usage** (``pkg/quota/v1/evaluator/core/pods.go``, ``PodUsageFunc`` and
  ``podComputeUsageHelper``): :func:`pod_usage`. ``pods``, ``count/pods``, ``cpu`` /
  ``requests.cpu`` / ``limits.cpu`` (and memory, ephemeral-storage), ``hugepages-*`` and
  ``requests.hugepages-*``, and for an extended resource such as ``gpusched.io/gpu`` **only**
  ``requests.gpusched.io/gpu``: overcommit is not allowed for extended resources, so upstream
  never charges ``gpusched.io/gpu`` or ``limits.gpusched.io/gpu`` (a quota naming them is
  valid and limits nothing). A pod that has finished (Succeeded, Failed) or whose deletion
  grace has run out is charged ``count/pods`` only.

The real server's admission increments ``status.used`` and kube-controller-manager's quota
controller recalculates it from the pods; here :class:`QuotaTracker` recomputes ``status.hard``
and ``status.used`` of a namespace's quotas from its pods after every pod or quota write and
delete, so ``used`` is always the recount (a pod admitted then refused by the kubelet stops
counting as soon as it is Failed). Cost: O(1) for a namespace without quotas, else O(pods of
the namespace x quotas) per write.

Left out: quota on objects other than pods (``count/<resource>`` for other kinds, services,
PVCs), the ``PriorityClass`` scope selector's ``limitedResources`` admission configuration,
the ``CrossNamespacePodAffinity`` scope (it never matches here) and in-place pod resize.
``kubectl get quota`` gets upstream's table (Name, Age, Request, Limit).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from fractions import Fraction
from typing import Any, Final

from gpusched.quantity import format_quantity, parse_quantity
from gpusched.sim import errors, field, kinds
from gpusched.sim.apimachinery import name_is_dns_subdomain
from gpusched.sim.field import FieldError
from gpusched.sim.store import Entry, Storage, Store

__all__ = [
    "POD_COUNT",
    "QuotaTracker",
    "ResourceQuotaStrategy",
    "check_pod",
    "matching_resources",
    "pod_usage",
    "quota_matches",
]

POD_COUNT: Final = "count/pods"
"""The object-count resource (``ObjectCountQuotaResourceNameFor``): every stored pod."""

_STANDARD_QUOTA_RESOURCES: Final = frozenset(
    {
        "cpu",
        "memory",
        "ephemeral-storage",
        "requests.cpu",
        "requests.memory",
        "requests.storage",
        "requests.ephemeral-storage",
        "limits.cpu",
        "limits.memory",
        "limits.ephemeral-storage",
        "pods",
        "services",
        "replicationcontrollers",
        "resourcequotas",
        "secrets",
        "persistentvolumeclaims",
        "configmaps",
        "services.nodeports",
        "services.loadbalancers",
    }
)
# pods.go: podResources (what the pod evaluator can charge) and validationSet (quota on these
# requires every container to state them).
_POD_RESOURCES: Final = frozenset(
    {
        "pods",
        POD_COUNT,
        "cpu",
        "memory",
        "ephemeral-storage",
        "requests.cpu",
        "requests.memory",
        "requests.ephemeral-storage",
        "limits.cpu",
        "limits.memory",
        "limits.ephemeral-storage",
    }
)
_POD_RESOURCE_PREFIXES: Final = ("hugepages-", "requests.hugepages-")
_CONSTRAINED: Final = frozenset(
    {"cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory"}
)
_COMPUTE: Final = _CONSTRAINED  # podComputeQuotaResources
_SCOPES: Final = (
    "Terminating",
    "NotTerminating",
    "BestEffort",
    "NotBestEffort",
    "PriorityClass",
    "CrossNamespacePodAffinity",
)
_SELECTOR_OPERATORS: Final = ("In", "NotIn", "Exists", "DoesNotExist")
_INVALID_QUOTA_RESOURCE: Final = "must be a standard resource for quota"


def _is_standard_quota_resource(name: str) -> bool:
    return name in _STANDARD_QUOTA_RESOURCES or name.startswith(_POD_RESOURCE_PREFIXES)


def _is_extended(name: str) -> bool:
    return kinds._is_extended_resource(name)  # v1helper.IsExtendedResourceName


def _is_extended_for_quota(name: str) -> bool:
    # pods.go isExtendedResourceNameForQuota: only "requests.<extended>" is allowed.
    return "/" in name and "kubernetes.io/" not in name and name.startswith("requests.")


# =============================================================================================
# Usage (pkg/quota/v1/evaluator/core/pods.go)
# =============================================================================================


class _Sum:
    """Quantities added up, remembering whether the first one was written in binary SI."""

    __slots__ = ("binary", "value")

    def __init__(self) -> None:
        self.value = Fraction(0)
        self.binary: bool | None = None

    def add(self, text: str) -> None:
        self.value += parse_quantity(text)
        if self.binary is None:
            self.binary = text.endswith("i")

    def text(self) -> str:
        return format_quantity(self.value, binary=bool(self.binary))


def _pod_totals(pod: Mapping[str, Any], part: str) -> dict[str, _Sum]:
    """``resourcehelper.PodRequests`` / ``PodLimits``: max(sum of containers, max of init
    containers) per resource, plus overhead."""
    spec = kinds._map(pod.get("spec"))
    total: dict[str, _Sum] = {}
    for c in kinds._list(spec.get("containers")):
        for name, q in kinds._map(kinds._map(kinds._map(c).get("resources")).get(part)).items():
            total.setdefault(name, _Sum()).add(str(q))
    for c in kinds._list(spec.get("initContainers")):
        for name, q in kinds._map(kinds._map(kinds._map(c).get("resources")).get(part)).items():
            one = _Sum()
            one.add(str(q))
            if name not in total or one.value > total[name].value:
                total[name] = one
    for name, q in kinds._map(spec.get("overhead")).items():
        total.setdefault(name, _Sum()).add(str(q))
    return total


def _charged(pod: Mapping[str, Any], now: datetime) -> bool:
    """``QuotaV1Pod``: not finished, and not past the end of its deletion grace period."""
    status = kinds._map(pod.get("status"))
    if status.get("phase") in ("Succeeded", "Failed"):
        return False
    meta = kinds._meta(pod)
    stamp = meta.get("deletionTimestamp")
    if stamp and meta.get("deletionGracePeriodSeconds") is not None:
        deadline = datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
        grace = timedelta(seconds=int(meta["deletionGracePeriodSeconds"]))
        if now > deadline + grace:
            return False
    return True


def pod_usage(pod: Mapping[str, Any], now: datetime) -> dict[str, str]:
    """What quota charges for ``pod`` (``PodUsageFunc``), as quantity strings."""
    usage: dict[str, str] = {POD_COUNT: "1"}
    if not _charged(pod, now):
        return usage
    usage["pods"] = "1"
    requests = _pod_totals(pod, "requests")
    limits = _pod_totals(pod, "limits")
    for name in ("cpu", "memory", "ephemeral-storage"):
        if name in requests:
            usage[name] = usage[f"requests.{name}"] = requests[name].text()
        if name in limits:
            usage[f"limits.{name}"] = limits[name].text()
    for name, total in requests.items():
        if name.startswith("hugepages-"):
            usage[name] = usage[f"requests.{name}"] = total.text()
        elif _is_extended(name):
            usage[f"requests.{name}"] = total.text()
    return usage


def matching_resources(names: Iterable[str]) -> list[str]:
    """``podEvaluator.MatchingResources``: the names among ``names`` pods are charged for."""
    return sorted(
        n
        for n in names
        if n in _POD_RESOURCES or n.startswith(_POD_RESOURCE_PREFIXES) or _is_extended_for_quota(n)
    )


# =============================================================================================
# Scopes
# =============================================================================================


def _scope_selectors(quota: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``CalculateScopeSelector``: plain scopes as Exists requirements, then the selector's."""
    spec = kinds._map(quota.get("spec"))
    out = [{"scopeName": s, "operator": "Exists"} for s in kinds._list(spec.get("scopes")) if s]
    selector = kinds._map(spec.get("scopeSelector"))
    out.extend(kinds._map(r) for r in kinds._list(selector.get("matchExpressions")))
    return out


def _scope_matches(selector: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    """``podMatchesScopeFunc``."""
    spec = kinds._map(pod.get("spec"))
    scope = selector.get("scopeName")
    if scope == "Terminating":
        return spec.get("activeDeadlineSeconds") is not None
    if scope == "NotTerminating":
        return spec.get("activeDeadlineSeconds") is None
    if scope == "BestEffort":
        return kinds.compute_pod_qos(pod) == "BestEffort"
    if scope == "NotBestEffort":
        return kinds.compute_pod_qos(pod) != "BestEffort"
    if scope == "PriorityClass":
        # A label selector over {"PriorityClass": spec.priorityClassName}: the key is
        # always present, so Exists matches every pod.
        value = kinds._str(spec.get("priorityClassName"))
        values = [str(v) for v in kinds._list(selector.get("values"))]
        op = selector.get("operator")
        if op == "In":
            return value in values
        if op == "NotIn":
            return value not in values
        return op == "Exists"
    return False  # CrossNamespacePodAffinity: not emulated


def quota_matches(quota: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    """``generic.Matches``: the quota limits something pods use, and every scope matches."""
    hard = kinds._map(kinds._map(quota.get("status")).get("hard"))
    if not matching_resources(hard):
        return False
    return all(_scope_matches(s, pod) for s in _scope_selectors(quota))


# =============================================================================================
# Admission (plugin/pkg/admission/resourcequota/controller.go, checkRequest)
# =============================================================================================


def _pretty(values: Mapping[str, str]) -> str:
    return ",".join(f"{k}={values[k]}" for k in sorted(values))


def _missing_constraints(required: set[str], pod: Mapping[str, Any]) -> str:
    """``podEvaluator.Constraints``: each container must state each quota'd cpu/memory."""
    needed = required & _CONSTRAINED
    missing: dict[str, set[str]] = {}
    spec = kinds._map(pod.get("spec"))
    for c in [*kinds._list(spec.get("containers")), *kinds._list(spec.get("initContainers"))]:
        res = kinds._map(kinds._map(c).get("resources"))
        have = set()
        for name in ("cpu", "memory"):
            if name in kinds._map(res.get("requests")):
                have |= {name, f"requests.{name}"}
            if name in kinds._map(res.get("limits")):
                have.add(f"limits.{name}")
        for name in needed - have:
            missing.setdefault(name, set()).add(kinds._str(kinds._map(c).get("name")))
    return "; ".join(
        f"must specify {name} for: {','.join(sorted(missing[name]))}" for name in sorted(missing)
    )


def check_pod(
    pod: Mapping[str, Any], name: str, quotas: Iterable[Mapping[str, Any]], now: datetime
) -> None:
    """Raise the admission plugin's 403 if creating ``pod`` (named ``name`` in messages, the
    generateName prefix when the server has yet to generate one) would exceed a quota.

    O(quotas x resources). Quotas are taken in name order, the first failure is reported.
    """
    usage: dict[str, str] | None = None
    for quota in sorted(quotas, key=lambda q: kinds._str(kinds._meta(q).get("name"))):
        if not quota_matches(quota, pod):
            continue
        qname = kinds._str(kinds._meta(quota).get("name"))
        status = kinds._map(quota.get("status"))
        hard = {k: str(v) for k, v in kinds._map(status.get("hard")).items()}
        used = {k: str(v) for k, v in kinds._map(status.get("used")).items()}
        restricted = matching_resources(hard)
        problem = _missing_constraints(set(restricted), pod)
        if problem:
            raise errors.forbidden(
                f'pods "{name}" is forbidden: failed quota: {qname}: {problem}', "", "pods", name
            )
        if usage is None:
            usage = {k: v for k, v in pod_usage(pod, now).items() if parse_quantity(v) != 0}
        requested = {k: v for k, v in usage.items() if k in hard}
        exceeded = sorted(
            k
            for k, v in requested.items()
            if parse_quantity(used.get(k, "0")) + parse_quantity(v) > parse_quantity(hard[k])
        )
        if exceeded:
            raise errors.forbidden(
                f'pods "{name}" is forbidden: exceeded quota: {qname}, '
                f"requested: {_pretty({k: requested[k] for k in exceeded})}, "
                f"used: {_pretty({k: used.get(k, '0') for k in exceeded})}, "
                f"limited: {_pretty({k: hard[k] for k in exceeded})}",
                "",
                "pods",
                name,
            )


# =============================================================================================
# Used, recomputed (the quota controller)
# =============================================================================================


def _keys_in(st: Storage, namespace: str) -> list[str]:
    prefix = f"{namespace}/"
    return list(itertools.takewhile(lambda k: k.startswith(prefix), st.keys_from(prefix)))


class QuotaTracker:
    """Keeps every quota's ``status`` equal to the recount of its namespace's pods.

    Subscribed to the store's writes and deletes; a quota's status is rewritten only when it
    changes, so each change is one MODIFIED event on the quota, as the controller's status
    update would be.
    """

    def __init__(
        self,
        store: Store,
        now: Callable[[], datetime],
        pods: str = "pods",
        quotas: str = "resourcequotas",
    ) -> None:
        self.store = store
        self.now = now
        self.pods = pods
        self.quotas = quotas
        self._busy = False
        store.on_write.append(self._changed)
        store.on_delete.append(self._changed)

    def quotas_in(self, namespace: str) -> list[dict[str, Any]]:
        """The namespace's quotas as stored; O(log n + quotas)."""
        st = self.store.storages.get(self.quotas)
        return [] if st is None else [st.objects[k].obj for k in _keys_in(st, namespace)]

    def _changed(self, storage: str, entry: Entry) -> None:
        if self._busy or storage not in (self.pods, self.quotas):
            return
        namespace = kinds._str(entry.obj["metadata"].get("namespace"))
        self._busy = True
        try:
            self.sync(namespace)
        finally:
            self._busy = False

    def sync(self, namespace: str) -> None:
        """Recount the namespace's quotas; O(pods of the namespace x quotas)."""
        st = self.store.storages.get(self.quotas)
        if st is None:
            return
        keys = _keys_in(st, namespace)
        if not keys:
            return
        pods_st = self.store.storages.get(self.pods)
        pods = (
            []
            if pods_st is None
            else [pods_st.objects[k].obj for k in _keys_in(pods_st, namespace)]
        )
        now = self.now()
        usages = [pod_usage(p, now) for p in pods]
        for key in keys:
            quota = st.objects[key].obj
            hard = dict(kinds._map(kinds._map(quota.get("spec")).get("hard")))
            tracked = set(matching_resources(hard))
            sums: dict[str, _Sum] = {name: _Sum() for name in tracked}
            for pod, usage in zip(pods, usages, strict=True):
                if not all(_scope_matches(s, pod) for s in _scope_selectors(quota)):
                    continue
                for name in tracked & usage.keys():
                    sums[name].add(usage[name])
            used = {name: sums[name].text() for name in sorted(hard) if name in sums}
            for name in sorted(hard):
                used.setdefault(name, "0")  # resources pods never use: the controller's zero
            status = {"hard": {k: str(v) for k, v in sorted(hard.items())}, "used": used}
            if quota.get("status") == status:
                continue
            updated = st.objects[key].copy()
            updated["status"] = status
            self.store.write(st, key, updated)


# =============================================================================================
# The object (pkg/registry/core/resourcequota, ValidateResourceQuota)
# =============================================================================================


def _validate_resource_list(rl: Any, path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    for name, q in kinds._map(rl).items():
        p = field.key(path, name)
        name_errs = kinds._validate_resource_name(name, p)
        if not name_errs and "/" not in name and not _is_standard_quota_resource(name):
            name_errs = [field.invalid(p, name, _INVALID_QUOTA_RESOURCE)]
        errs.extend(name_errs)
        errs.extend(kinds._validate_quantity_value(name, q, p))
    return errs


def _validate_spec(spec: Mapping[str, Any]) -> list[FieldError]:
    errs = _validate_resource_list(spec.get("hard"), "spec.hard")
    scopes = [kinds._str(s) for s in kinds._list(spec.get("scopes"))]
    if scopes:
        printed = field.Printed("[" + " ".join(scopes) + "]")
        hard = sorted(kinds._map(spec.get("hard")))
        for scope in scopes:
            if scope not in _SCOPES:
                errs.append(field.invalid("spec.scopes", printed, "unsupported scope"))
            allowed = {"pods"} if scope in ("BestEffort",) else {"pods"} | _COMPUTE
            errs.extend(
                field.invalid("spec.scopes", printed, "unsupported scope applied to resource")
                for name in hard
                if scope in _SCOPES and _is_standard_quota_resource(name) and name not in allowed
            )
        for pair in (("BestEffort", "NotBestEffort"), ("Terminating", "NotTerminating")):
            if set(pair) <= set(scopes):
                errs.append(field.invalid("spec.scopes", printed, "conflicting scopes"))
    selector = kinds._map(spec.get("scopeSelector"))
    for i, req in enumerate(kinds._list(selector.get("matchExpressions"))):
        p = field.index("spec.scopeSelector.matchExpressions", i)
        req = kinds._map(req)
        scope, op = kinds._str(req.get("scopeName")), kinds._str(req.get("operator"))
        values = kinds._list(req.get("values"))
        if scope not in _SCOPES:
            errs.append(field.invalid(f"{p}.scopeName", scope, "unsupported scope"))
        if op not in _SELECTOR_OPERATORS:
            errs.append(field.invalid(f"{p}.operator", op, "not a valid selector operator"))
        elif op in ("In", "NotIn") and not values:
            errs.append(
                field.required(
                    f"{p}.values", "must be at least one value when `operator` is 'In' or 'NotIn'"
                )
            )
        elif op in ("Exists", "DoesNotExist") and values:
            errs.append(
                field.invalid(
                    f"{p}.values",
                    field.struct(values),
                    "must be no value when `operator` is 'Exist' or 'DoesNotExist' for scope "
                    "selector",
                )
            )
    return errs


class ResourceQuotaStrategy(kinds.Strategy):
    """``pkg/registry/core/resourcequota/strategy.go``: status cleared on create, kept on
    update; spec kept on status updates; both validated."""

    def __init__(self) -> None:
        super().__init__("ResourceQuota", "", "resourcequotas", True, has_status=True)

    def prepare_for_create(self, obj: dict[str, Any]) -> None:
        obj["status"] = {}
        kinds._canonicalize_resource_list("ResourceQuota", kinds._map(obj.get("spec")).get("hard"))

    def prepare_for_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        super().prepare_for_update(new, old)
        kinds._canonicalize_resource_list("ResourceQuota", kinds._map(new.get("spec")).get("hard"))

    def prepare_for_status_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        super().prepare_for_status_update(new, old)
        status = kinds._map(new.get("status"))
        for part in ("hard", "used"):
            kinds._canonicalize_resource_list("ResourceQuota", status.get(part))

    def validate_create(self, obj: dict[str, Any]) -> list[FieldError]:
        errs = kinds._validate_object_meta(obj, name_is_dns_subdomain, kube=True)
        return errs + _validate_spec(kinds._map(obj.get("spec")))

    def validate_update(self, new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
        errs = kinds._validate_object_meta_update(new, old, kube=True)
        return errs + _validate_spec(kinds._map(new.get("spec")))

    def validate_status_update(self, new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
        errs = kinds._validate_object_meta_update(new, old, kube=True)
        status = kinds._map(new.get("status"))
        errs += _validate_resource_list(status.get("hard"), "status.hard")
        errs += _validate_resource_list(status.get("used"), "status.used")
        return errs

    def table(self, objs: list[dict[str, Any]], now: datetime) -> dict[str, Any]:
        """``printResourceQuota``: "resource: used/hard" pairs, ``limits.*`` in Limit."""
        columns = [
            kinds._NAME_COL,
            kinds._AGE_COL,
            kinds._col(
                "Request",
                "Request represents a minimum amount of cpu/memory that a container may consume.",
            ),
            kinds._col(
                "Limit",
                "Limits control the maximum amount of cpu/memory that a container may use "
                "independent of contention on the node.",
            ),
        ]
        rows = []
        for o in objs:
            status = kinds._map(o.get("status"))
            hard = kinds._map(status.get("hard"))
            used = kinds._map(status.get("used"))
            request: list[str] = []
            limit: list[str] = []
            for name in sorted(hard):
                column = limit if name.split(".")[0] == "limits" and "." in name else request
                column.append(f"{name}: {used.get(name, '0')}/{hard[name]}")
            cells = [
                kinds._str(kinds._meta(o).get("name")),
                kinds._since(kinds._meta(o).get("creationTimestamp"), now),
                ", ".join(request),
                ", ".join(limit),
            ]
            rows.append(kinds._row(o, cells))
        return kinds._table(columns, rows)
