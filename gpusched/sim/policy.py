"""``policy/v1`` in the simulated API server: PodDisruptionBudgets, their controller, eviction.

Three upstream pieces:

* the **object** (``pkg/registry/policy/poddisruptionbudget``, ``pkg/apis/policy/validation``):
  :class:`PodDisruptionBudgetStrategy`. ``minAvailable`` / ``maxUnavailable`` (int or
  percent, not both, at most 100%), ``selector``, ``unhealthyPodEvictionPolicy``
  (``IfHealthyBudget`` / ``AlwaysAllow``); status is zeroed on create, kept on spec updates,
  and the generation moves with the spec.
* the **disruption controller** (kube-controller-manager's ``pkg/controller/disruption``):
  :class:`DisruptionController`. For each PDB: the pods its selector picks in its namespace
  (a nil selector picks none, ``{}`` all), ``expectedPods`` and ``desiredHealthy`` (an integer
  ``minAvailable`` counts the pods; a percentage or ``maxUnavailable`` needs the scale of the
  pods' controllers: a pod without a controller is *unmanaged* and counts 0, as upstream,
  which warns and carries on; the simulation serves no workload controllers, so a pod *with* a
  controller makes the sync fail with "found no controllers for pod", and the fail-safe sets
  ``disruptionsAllowed`` 0 with ``DisruptionAllowed=False, reason SyncFailed``),
  ``currentHealthy`` (Ready pods not terminating and not in ``disruptedPods``),
  ``disruptionsAllowed = max(currentHealthy - desiredHealthy, 0)`` (0 when nothing is
  expected), ``disruptedPods`` (entries leave when the pod terminates or after 2 minutes),
  ``observedGeneration`` and the ``DisruptionAllowed`` condition. It is subscribed to the
  store: a pod or PDB write marks its namespace, and the registry's background step (right
  after the request) recomputes that namespace; :meth:`DisruptionController.due` brings back
  namespaces whose ``disruptedPods`` entries expire, for the cluster's clock loop.
* the **eviction subresource** (``pkg/registry/core/pod/storage/eviction.go``): :func:`evict`.
  Terminal, pending or terminating pods are deleted without a PDB check; otherwise the one
  matching PDB must allow a disruption (429 TooManyRequests with the ``DisruptionBudget``
  cause when it does not, 429 "still being processed" while the controller has not observed
  the PDB's generation, 500 when several PDBs match); the decrement and the
  ``disruptedPods`` entry are written in the same request as a conditional status update;
  an unready pod is let go without a decrement when the budget is met (or always, with
  ``AlwaysAllow``). The pod then gets ``DisruptionTarget`` (reason ``EvictionByEvictionAPI``)
  and is deleted with the request's ``deleteOptions`` (grace period, preconditions, dry run).

Left out: the controller's Events (``NoPods``, ``UnmanagedPods``, ...), the 20-step conflict
retry (a request is atomic here, so an eviction never conflicts with another), admission
webhooks on ``pods/eviction``. Cost: a pod write in a namespace with PDBs costs one resync
of that namespace after the request, O(pods x PDBs of the namespace); elsewhere O(log n).
"""

from __future__ import annotations

import asyncio
import copy
import math
import re
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final

from gpusched.sim import errors, field, kinds
from gpusched.sim.apimachinery import is_qualified_name, is_valid_label_value
from gpusched.sim.field import FieldError
from gpusched.sim.selectors import SelectorError, label_selector_from_object
from gpusched.sim.store import Entry, Store

if TYPE_CHECKING:
    from gpusched.sim.registry import Registry

__all__ = [
    "DELETION_TIMEOUT",
    "PDB_STORAGE",
    "DisruptionController",
    "PodDisruptionBudgetStrategy",
    "evict",
    "pdb_selects",
]

GROUP: Final = "policy"
PDB_STORAGE: Final = "poddisruptionbudgets.policy"
DELETION_TIMEOUT: Final = timedelta(minutes=2)
"""How long an eviction's ``disruptedPods`` entry holds before the controller drops it."""
MAX_DISRUPTED_POD_SIZE: Final = 2000
_UNHEALTHY_POLICIES: Final = ("AlwaysAllow", "IfHealthyBudget")
_PERCENT_RE: Final = re.compile(r"[0-9]+%")
_PERCENT_MSG: Final = (
    "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or "
    "'93%', regex used for validation is '[0-9]+%')"
)
_TOO_MANY: Final = "Cannot evict pod as it would violate the pod's disruption budget."


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _now_text(now: datetime) -> str:
    return kinds._format_time(now)


# =============================================================================================
# The object
# =============================================================================================


def _int_or_string(v: Any) -> field.Printed:
    """A bad ``intstr.IntOrString`` value as ``%#v`` prints it (String() has a pointer
    receiver, so the value is printed as a struct)."""
    if isinstance(v, str):
        return field.Printed(f'intstr.IntOrString{{Type:1, IntVal:0, StrVal:"{v}"}}')
    return field.Printed(f'intstr.IntOrString{{Type:0, IntVal:{v}, StrVal:""}}')


def _check_decoding(obj: dict[str, Any]) -> None:
    kinds._check_meta_decoding("PodDisruptionBudget", obj)
    spec = obj.get("spec")
    if spec is None:
        obj["spec"] = spec = {}
    if not isinstance(spec, dict):
        raise kinds._decode_error(
            "PodDisruptionBudget",
            f"json: cannot unmarshal {kinds._json_type(spec)} into Go struct field "
            "PodDisruptionBudget.spec of type v1.PodDisruptionBudgetSpec",
        )
    for key in ("minAvailable", "maxUnavailable"):
        v = spec.get(key)
        if v is None:
            spec.pop(key, None)
        elif not (_is_int(v) or isinstance(v, str)):
            raise kinds._decode_error("PodDisruptionBudget", "intstr: invalid type")
    ordered = {
        k: spec[k]
        for k in ("minAvailable", "selector", "maxUnavailable", "unhealthyPodEvictionPolicy")
        if spec.get(k) is not None
    }
    extra = {k: v for k, v in spec.items() if k not in ordered and v is not None}
    obj["spec"] = {**ordered, **extra}


def _normalize_status(status: Any) -> dict[str, Any]:
    """The status as ``policyv1.PodDisruptionBudgetStatus`` encodes (zero ints kept)."""
    s = kinds._map(status)
    out: dict[str, Any] = {}
    if s.get("observedGeneration"):
        out["observedGeneration"] = s["observedGeneration"]
    if s.get("disruptedPods"):
        out["disruptedPods"] = s["disruptedPods"]
    for key in ("disruptionsAllowed", "currentHealthy", "desiredHealthy", "expectedPods"):
        v = s.get(key)
        out[key] = v if _is_int(v) else 0
    if s.get("conditions"):
        out["conditions"] = s["conditions"]
    return out


def _validate_int_or_percent(v: Any, path: str) -> list[FieldError]:
    """``ValidatePositiveIntOrPercent`` then ``IsNotMoreThan100Percent``."""
    if isinstance(v, str):
        if _PERCENT_RE.fullmatch(v) is None:
            return [field.invalid(path, _int_or_string(v), _PERCENT_MSG)]
        if int(v[:-1]) > 100:
            return [field.invalid(path, _int_or_string(v), "must not be greater than 100%")]
        return []
    if v < 0:
        return [field.invalid(path, v, "must be greater than or equal to 0")]
    return []


def _validate_label_selector(selector: Any, path: str) -> list[FieldError]:
    """``ValidateLabelSelector`` (invalid label values in selectors not allowed)."""
    if selector is None:
        return []
    sel = kinds._map(selector)
    errs: list[FieldError] = []
    for i, raw in enumerate(kinds._list(sel.get("matchExpressions"))):
        expr = kinds._map(raw)
        p = f"{path}.matchExpressions[{i}]"
        op = expr.get("operator")
        values = kinds._list(expr.get("values"))
        if op in ("In", "NotIn"):
            if not values:
                errs.append(
                    field.required(
                        f"{p}.values", "must be specified when `operator` is 'In' or 'NotIn'"
                    )
                )
        elif op in ("Exists", "DoesNotExist"):
            if values:
                errs.append(
                    field.forbidden(
                        f"{p}.values",
                        "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                    )
                )
        else:
            errs.append(field.invalid(f"{p}.operator", op, "not a valid selector operator"))
        key = kinds._str(expr.get("key"))
        errs.extend(field.invalid(f"{p}.key", key, m) for m in is_qualified_name(key))
        for j, v in enumerate(values):
            errs.extend(
                field.invalid(f"{p}.values[{j}]", v, m) for m in is_valid_label_value(kinds._str(v))
            )
    errs.extend(kinds._validate_labels(sel.get("matchLabels"), f"{path}.matchLabels"))
    return errs


def _validate_spec(spec: Mapping[str, Any]) -> list[FieldError]:
    """``ValidatePodDisruptionBudgetSpec``."""
    errs: list[FieldError] = []
    min_a, max_u = spec.get("minAvailable"), spec.get("maxUnavailable")
    if min_a is not None and max_u is not None:
        errs.append(
            field.invalid(
                "spec", field.struct(spec), "minAvailable and maxUnavailable cannot be both set"
            )
        )
    if min_a is not None:
        errs.extend(_validate_int_or_percent(min_a, "spec.minAvailable"))
    if max_u is not None:
        errs.extend(_validate_int_or_percent(max_u, "spec.maxUnavailable"))
    errs.extend(_validate_label_selector(spec.get("selector"), "spec.selector"))
    policy = spec.get("unhealthyPodEvictionPolicy")
    if policy is not None and policy not in _UNHEALTHY_POLICIES:
        errs.append(
            field.not_supported(
                "spec.unhealthyPodEvictionPolicy", policy, list(_UNHEALTHY_POLICIES)
            )
        )
    return errs


# =============================================================================================
# metav1.Condition lists (apimachinery/pkg/apis/meta/v1/validation ValidateConditions)
# =============================================================================================

_REASON_RE: Final = re.compile(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?")
_REASON_MSG: Final = (
    "a condition reason must start with alphabetic character, optionally followed by a string "
    "of alphanumeric characters or '_,:', and must end with an alphanumeric character or '_' "
    "(e.g. 'my_name',  or 'MY_NAME',  or 'MyName',  or 'ReasonA,ReasonB',  or "
    "'ReasonA:ReasonB', regex used for validation is "
    "'[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?')"
)


def validate_conditions(conditions: Any, path: str) -> list[FieldError]:
    """``ValidateConditions``: unique types, then ``ValidateCondition`` for each."""
    errs: list[FieldError] = []
    seen: set[str] = set()
    for i, raw in enumerate(kinds._list(conditions)):
        c = kinds._map(raw)
        p = f"{path}[{i}]"
        ctype = kinds._str(c.get("type"))
        if ctype in seen:
            errs.append(field.duplicate(f"{p}.type", ctype))
        seen.add(ctype)
        errs.extend(field.invalid(f"{p}.type", ctype, m) for m in is_qualified_name(ctype))
        status = c.get("status")
        if status not in ("False", "True", "Unknown"):
            errs.append(field.not_supported(f"{p}.status", status, ["False", "True", "Unknown"]))
        gen = c.get("observedGeneration")
        if isinstance(gen, int) and gen < 0:
            errs.append(
                field.invalid(
                    f"{p}.observedGeneration", gen, "must be greater than or equal to zero"
                )
            )
        if not c.get("lastTransitionTime"):
            errs.append(field.required(f"{p}.lastTransitionTime", "must be set"))
        reason = kinds._str(c.get("reason"))
        if not reason:
            errs.append(field.required(f"{p}.reason", "must be set"))
        else:
            if _REASON_RE.fullmatch(reason) is None:
                errs.append(field.invalid(f"{p}.reason", reason, _REASON_MSG))
            if len(reason) > 1024:
                errs.append(field.too_long(f"{p}.reason", 1024))
        if len(kinds._str(c.get("message"))) > 32 * 1024:
            errs.append(field.too_long(f"{p}.message", 32 * 1024))
    return errs


def _validate_status(status: Mapping[str, Any]) -> list[FieldError]:
    """``ValidatePodDisruptionBudgetStatusUpdate`` for policy/v1."""
    errs = validate_conditions(status.get("conditions"), "status.conditions")
    for key in ("disruptionsAllowed", "currentHealthy", "desiredHealthy", "expectedPods"):
        v = status.get(key)
        if isinstance(v, int) and v < 0:
            errs.append(field.invalid(f"status.{key}", v, "must be greater than or equal to 0"))
    return errs


def _int_or_string_text(v: Any) -> str:
    return "N/A" if v is None else str(v)


class PodDisruptionBudgetStrategy(kinds.Strategy):
    """``pkg/registry/policy/poddisruptionbudget``: status subresource, generation, table."""

    def __init__(self) -> None:
        super().__init__(
            "PodDisruptionBudget",
            GROUP,
            "poddisruptionbudgets",
            True,
            has_status=True,
            tracks_generation=True,
        )

    def prepare_for_create(self, obj: dict[str, Any]) -> None:
        _check_decoding(obj)
        obj["status"] = _normalize_status({})

    def prepare_for_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        _check_decoding(new)
        new["status"] = _normalize_status(old.get("status"))

    def prepare_for_status_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        kinds._check_meta_decoding("PodDisruptionBudget", new)
        kinds._keep(new, old, "spec")
        new["status"] = _normalize_status(new.get("status"))

    def validate_create(self, obj: dict[str, Any]) -> list[FieldError]:
        errs = kinds._validate_object_meta(obj, self.name_fn, kube=False)
        return errs + _validate_spec(kinds._map(obj.get("spec")))

    def validate_update(self, new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
        errs = kinds._validate_object_meta_update(new, old, kube=False)
        return errs + _validate_spec(kinds._map(new.get("spec")))

    def validate_status_update(self, new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
        errs = kinds._validate_object_meta_update(new, old, kube=False)
        return errs + _validate_status(kinds._map(new.get("status")))

    def table(self, objs: list[dict[str, Any]], now: datetime) -> dict[str, Any]:
        columns = [
            kinds._NAME_COL,
            kinds._col("Min Available", "The minimum number of pods that must be available."),
            kinds._col("Max Unavailable", "The maximum number of pods that may be unavailable."),
            kinds._col(
                "Allowed Disruptions",
                "Calculated number of pods that may be disrupted at this time.",
                type_="integer",
            ),
            kinds._AGE_COL,
        ]
        rows = []
        for o in objs:
            spec, status = kinds._map(o.get("spec")), kinds._map(o.get("status"))
            rows.append(
                kinds._row(
                    o,
                    [
                        kinds._str(kinds._meta(o).get("name")),
                        _int_or_string_text(spec.get("minAvailable")),
                        _int_or_string_text(spec.get("maxUnavailable")),
                        int(status.get("disruptionsAllowed") or 0),
                        kinds._since(kinds._meta(o).get("creationTimestamp"), now),
                    ],
                )
            )
        return kinds._table(columns, rows)


# =============================================================================================
# Helpers shared by the controller and eviction
# =============================================================================================


def pdb_selects(pdb: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    """``LabelSelectorAsSelector(pdb.spec.selector).Matches(pod.labels)`` (policy/v1: a nil
    selector selects nothing, an empty one everything; an invalid one nothing)."""
    try:
        selector = label_selector_from_object(kinds._map(pdb.get("spec")).get("selector"))
    except SelectorError:
        return False
    return selector.matches(kinds._map(kinds._meta(pod).get("labels")))


def _is_ready(pod: Mapping[str, Any]) -> bool:
    """``podutil.IsPodReady``."""
    for c in kinds._list(kinds._map(pod.get("status")).get("conditions")):
        if kinds._map(c).get("type") == "Ready":
            return kinds._map(c).get("status") == "True"
    return False


def _set_condition(
    conditions: list[dict[str, Any]], status: str, reason: str, message: str, gen: int, now: str
) -> None:
    """``meta.SetStatusCondition`` for the ``DisruptionAllowed`` condition."""
    for c in conditions:
        if c.get("type") == "DisruptionAllowed":
            if c.get("status") != status:
                c["status"] = status
                c["lastTransitionTime"] = now
            c["reason"] = reason
            c["message"] = message
            if gen:
                c["observedGeneration"] = gen
            else:
                c.pop("observedGeneration", None)
            return
    cond: dict[str, Any] = {"type": "DisruptionAllowed", "status": status}
    if gen:
        cond["observedGeneration"] = gen
    cond.update({"lastTransitionTime": now, "reason": reason, "message": message})
    conditions.append(cond)


def _update_allowed_condition(status: dict[str, Any], now: str) -> None:
    """``pdbhelper.UpdateDisruptionAllowedCondition``."""
    conditions = [dict(c) for c in kinds._list(status.get("conditions"))]
    gen = int(status.get("observedGeneration") or 0)
    if int(status.get("disruptionsAllowed") or 0) > 0:
        _set_condition(conditions, "True", "SufficientPods", "", gen, now)
    else:
        _set_condition(conditions, "False", "InsufficientPods", "", gen, now)
    status["conditions"] = conditions


def _conditions_up_to_date(pdb: Mapping[str, Any]) -> bool:
    """``pdbhelper.ConditionsAreUpToDate``."""
    status = kinds._map(pdb.get("status"))
    cond = next(
        (
            kinds._map(c)
            for c in kinds._list(status.get("conditions"))
            if kinds._map(c).get("type") == "DisruptionAllowed"
        ),
        None,
    )
    if cond is None:
        return False
    if int(status.get("observedGeneration") or 0) != int(kinds._meta(pdb).get("generation") or 0):
        return False
    if int(status.get("disruptionsAllowed") or 0) > 0:
        return cond.get("status") == "True" and cond.get("reason") == "SufficientPods"
    return cond.get("status") == "False" and cond.get("reason") == "InsufficientPods"


def _scaled(v: Any, total: int) -> int:
    """``intstr.GetScaledValueFromIntOrPercent(v, total, roundUp=true)``."""
    if isinstance(v, str):
        return math.ceil(int(v.rstrip("%")) * total / 100)
    return int(v)


def _controller_of(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for ref in kinds._list(kinds._meta(pod).get("ownerReferences")):
        if kinds._map(ref).get("controller") is True:
            return kinds._map(ref)
    return None


class _SyncFailed(Exception):
    pass


# =============================================================================================
# The disruption controller
# =============================================================================================


class DisruptionController:
    """kube-controller-manager's disruption controller over the simulated store."""

    def __init__(self, store: Store, now: Callable[[], datetime], pods: str = "pods") -> None:
        self.store = store
        self.now = now
        self.pods = pods
        self.pending: set[str] = set()  # namespaces to resync
        self.rechecks: dict[str, datetime] = {}  # namespace -> when an entry expires
        self.wakeup = asyncio.Event()  # set when a recheck is scheduled
        self._busy = False
        store.on_write.append(self._changed)
        store.on_delete.append(self._changed)

    def _keys(self, storage: str, namespace: str) -> list[str]:
        st = self.store.storages.get(storage)
        if st is None:
            return []
        return list(st.objects.irange(minimum=f"{namespace}/", maximum=f"{namespace}0"))

    def _changed(self, storage: str, entry: Entry) -> None:
        if self._busy or storage not in (self.pods, PDB_STORAGE):
            return
        namespace = kinds._str(entry.obj["metadata"].get("namespace"))
        if storage == PDB_STORAGE or self._has_pdbs(namespace):
            self.pending.add(namespace)

    def _has_pdbs(self, namespace: str) -> bool:
        """O(log n): whether the namespace holds a PDB."""
        st = self.store.storages.get(PDB_STORAGE)
        if st is None or not st.objects:
            return False
        keys = st.objects.irange(minimum=f"{namespace}/", maximum=f"{namespace}0")
        return next(iter(keys), None) is not None

    def due(self) -> bool:
        """Whether a ``disruptedPods`` entry has expired; marks its namespace."""
        now = self.now()
        for ns, at in list(self.rechecks.items()):
            if at <= now:
                del self.rechecks[ns]
                self.pending.add(ns)
        return bool(self.pending)

    def sync_pending(self) -> None:
        """Resync every marked namespace (the controller's work queue, drained)."""
        while self.pending:
            self.sync_namespace(self.pending.pop())

    def sync_namespace(self, namespace: str) -> None:
        st = self.store.storages.get(PDB_STORAGE)
        pods_st = self.store.storages.get(self.pods)
        if st is None:
            return
        pods = (
            []
            if pods_st is None
            else [pods_st.objects[k].obj for k in self._keys(self.pods, namespace)]
        )
        self.rechecks.pop(namespace, None)
        for key in self._keys(PDB_STORAGE, namespace):
            self._sync(st.objects[key], [p for p in pods if pdb_selects(st.objects[key].obj, p)])

    def _sync(self, entry: Entry, pods: list[dict[str, Any]]) -> None:
        pdb = entry.obj
        now = self.now()
        try:
            expected, desired = self._expected(pdb, pods)
        except _SyncFailed as exc:
            self._fail_safe(entry, str(exc), now)
            return
        disrupted, recheck = self._disrupted(pdb, pods, now)
        healthy = 0
        for pod in pods:
            meta = kinds._meta(pod)
            if meta.get("deletionTimestamp") or meta.get("name") in disrupted:
                continue
            if _is_ready(pod):
                healthy += 1
        allowed = healthy - desired
        if expected <= 0 or allowed <= 0:
            allowed = 0
        status = kinds._map(pdb.get("status"))
        gen = int(kinds._meta(pdb).get("generation") or 0)
        if (
            status.get("currentHealthy") == healthy
            and status.get("desiredHealthy") == desired
            and status.get("expectedPods") == expected
            and status.get("disruptionsAllowed") == allowed
            and (status.get("disruptedPods") or {}) == disrupted
            and int(status.get("observedGeneration") or 0) == gen
            and _conditions_up_to_date(pdb)
        ):
            self._recheck(pdb, recheck)
            return
        new_status: dict[str, Any] = {
            "observedGeneration": gen,
            "disruptedPods": disrupted,
            "disruptionsAllowed": allowed,
            "currentHealthy": healthy,
            "desiredHealthy": desired,
            "expectedPods": expected,
            "conditions": kinds._list(status.get("conditions")),
        }
        _update_allowed_condition(new_status, _now_text(now))
        self._write(entry, _normalize_status(new_status))
        self._recheck(pdb, recheck)

    def _recheck(self, pdb: Mapping[str, Any], at: datetime | None) -> None:
        if at is None:
            return
        ns = kinds._str(kinds._meta(pdb).get("namespace"))
        current = self.rechecks.get(ns)
        if current is None or at < current:
            self.rechecks[ns] = at
            self.wakeup.set()

    def _expected(self, pdb: Mapping[str, Any], pods: list[dict[str, Any]]) -> tuple[int, int]:
        """``getExpectedPodCount``: (expectedCount, desiredHealthy)."""
        spec = kinds._map(pdb.get("spec"))
        max_u, min_a = spec.get("maxUnavailable"), spec.get("minAvailable")
        if max_u is not None:
            expected = self._expected_scale(pods)
            return expected, max(expected - _scaled(max_u, expected), 0)
        if min_a is not None:
            if _is_int(min_a):
                return len(pods), int(min_a)
            expected = self._expected_scale(pods)
            return expected, _scaled(min_a, expected)
        return 0, 0

    def _expected_scale(self, pods: list[dict[str, Any]]) -> int:
        """``getExpectedScale``: unmanaged pods count 0; the simulation serves no workload
        controller (ReplicaSet, StatefulSet, ... or a scale subresource), so a pod with one
        fails the sync as upstream fails it when no finder knows the controller."""
        for pod in pods:
            if _controller_of(pod) is not None:
                raise _SyncFailed(
                    f'found no controllers for pod "{kinds._str(kinds._meta(pod).get("name"))}"'
                )
        return 0

    def _disrupted(
        self, pdb: Mapping[str, Any], pods: list[dict[str, Any]], now: datetime
    ) -> tuple[dict[str, Any], datetime | None]:
        """``buildDisruptedPodMap``: entries of live pods younger than DELETION_TIMEOUT."""
        recorded = kinds._map(kinds._map(pdb.get("status")).get("disruptedPods"))
        result: dict[str, Any] = {}
        recheck: datetime | None = None
        for pod in pods:
            meta = kinds._meta(pod)
            name = kinds._str(meta.get("name"))
            if meta.get("deletionTimestamp") or name not in recorded:
                continue
            at = kinds._parse_time_lenient(recorded[name])
            if at is None:
                continue
            expires = at + DELETION_TIMEOUT
            if expires <= now:  # upstream (Before) keeps it at the very instant; time is
                continue  # coarse here. Upstream also records a Warning event NotDeleted.
            if recheck is None or expires < recheck:
                recheck = expires
            result[name] = recorded[name]
        return result, recheck

    def _fail_safe(self, entry: Entry, message: str, now: datetime) -> None:
        """``failSafe``: disruptionsAllowed 0 and ``DisruptionAllowed=False, SyncFailed``."""
        status = dict(kinds._map(entry.obj.get("status")))
        status["disruptionsAllowed"] = 0
        conditions = [dict(c) for c in kinds._list(status.get("conditions"))]
        gen = int(status.get("observedGeneration") or 0)
        _set_condition(conditions, "False", "SyncFailed", message, gen, _now_text(now))
        status["conditions"] = conditions
        new = _normalize_status(status)
        if new != entry.obj.get("status"):
            self._write(entry, new)

    def _write(self, entry: Entry, status: dict[str, Any]) -> None:
        obj = entry.copy()
        obj["status"] = status
        meta = obj["metadata"]
        st = self.store.storages[PDB_STORAGE]
        self._busy = True
        try:
            self.store.write(st, f"{meta['namespace']}/{meta['name']}", obj)
        finally:
            self._busy = False


# =============================================================================================
# The eviction subresource
# =============================================================================================


def _too_many_requests(retry_after: int, cause: str) -> errors.APIError:
    """``errors.NewTooManyRequests`` with a ``DisruptionBudget`` cause."""
    details: dict[str, Any] = {"causes": [{"reason": "DisruptionBudget", "message": cause}]}
    headers: dict[str, str] = {}
    if retry_after:
        details["retryAfterSeconds"] = retry_after
        headers["Retry-After"] = str(retry_after)
    return errors.APIError(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": _TOO_MANY,
            "reason": "TooManyRequests",
            "details": details,
            "code": 429,
        },
        headers,
    )


def _pdb_forbidden(name: str, err: str) -> errors.APIError:
    return errors.forbidden(
        f'poddisruptionbudget.policy "{name}" is forbidden: {err}',
        GROUP,
        "poddisruptionbudget",
        name,
    )


def _delete_options(eviction: Mapping[str, Any], query_dry_run: bool) -> dict[str, Any]:
    """``propagateDryRun``: the query's dryRun and the body's must agree."""
    options = dict(kinds._map(eviction.get("deleteOptions")))
    body_dry = kinds._list(options.get("dryRun"))
    query = ["All"] if query_dry_run else []
    if not body_dry:
        options["dryRun"] = query
    elif query and query != body_dry:
        raise errors.unexpected(
            f"Non-matching dry-run options in request and content: [{' '.join(query)}] and "
            f"[{' '.join(str(d) for d in body_dry)}]"
        )
    for d in kinds._list(options.get("dryRun")):
        if d != "All":
            raise errors.bad_request(f"unsupported dry run value: {d}")
    gp = options.get("gracePeriodSeconds")
    if gp is not None and not _is_int(gp):
        raise errors.bad_request("gracePeriodSeconds must be an integer")
    return options


def _check_body(namespace: str, name: str, body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise errors.bad_request("the body of the request was in an unknown format")
    api_version = body.get("apiVersion")
    if api_version not in (None, "", "policy/v1", "policy/v1beta1"):
        raise errors.bad_request(
            f"the API version in the data ({api_version}) does not match the expected API "
            "version (policy/v1)"
        )
    if body.get("kind") not in (None, "", "Eviction"):
        raise errors.bad_request(
            f"the kind in the data ({body.get('kind')}) does not match the expected kind (Eviction)"
        )
    meta = kinds._map(body.get("metadata"))
    body_ns = kinds._str(meta.get("namespace"))
    if body_ns and body_ns != namespace:
        raise errors.bad_request(
            "the namespace of the provided object does not match the namespace sent on the request"
        )
    if kinds._str(meta.get("name")) != name:
        raise errors.bad_request("name in URL does not match name in Eviction object")
    return body


def _can_ignore_pdb(pod: Mapping[str, Any]) -> bool:
    phase = kinds._map(pod.get("status")).get("phase")
    return phase in ("Succeeded", "Failed", "Pending") or bool(
        kinds._meta(pod).get("deletionTimestamp")
    )


def _enforce_resource_version(pod: Mapping[str, Any]) -> bool:
    phase = kinds._map(pod.get("status")).get("phase")
    return phase not in ("Succeeded", "Failed") and not kinds._meta(pod).get("deletionTimestamp")


def _with_rv(options: dict[str, Any], rv: str) -> dict[str, Any]:
    out = dict(options)
    out["preconditions"] = {**kinds._map(options.get("preconditions")), "resourceVersion": rv}
    return out


def _rv_unset(options: Mapping[str, Any]) -> bool:
    return kinds._map(options.get("preconditions")).get("resourceVersion") is None


def evict(
    registry: Registry, namespace: str, name: str, body: Any, dry_run: bool
) -> dict[str, Any]:
    """POST ``pods/NAME/eviction``: the Status answered (201, or 500 for several PDBs)."""
    eviction = _check_body(namespace, name, body)
    options = _delete_options(eviction, dry_run)
    pods = registry.resources[("", "v1", "pods")]
    pod = registry.get(pods, namespace, name).obj
    if _can_ignore_pdb(pod):
        delete_options = options
        if _enforce_resource_version(pod) and _rv_unset(options):
            delete_options = _with_rv(options, pod["metadata"]["resourceVersion"])
        _condition_and_delete(registry, namespace, name, delete_options)
        return _success()
    matching = [
        e.obj
        for e in registry.list_objects(
            registry.resources[(GROUP, "v1", "poddisruptionbudgets")], namespace
        ).items
        if pdb_selects(e.obj, pod)
    ]
    if len(matching) > 1:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "This pod has more than one PodDisruptionBudget, which the eviction "
            "subresource does not support.",
            "code": 500,
        }
    update_options = False
    pdb_name = ""
    if matching:
        pdb = matching[0]
        pdb_name = pdb["metadata"]["name"]
        status = kinds._map(pdb.get("status"))
        spec = kinds._map(pdb.get("spec"))
        desired = int(status.get("desiredHealthy") or 0)
        unready_ok = not _is_ready(pod) and (
            spec.get("unhealthyPodEvictionPolicy") == "AlwaysAllow"
            or int(status.get("currentHealthy") or 0) >= desired > 0
        )
        if unready_ok:
            update_options = True
        else:
            _check_and_decrement(registry, namespace, name, pdb, bool(options.get("dryRun")))
    delete_options = options
    if update_options:
        delete_options = _with_rv(options, pod["metadata"]["resourceVersion"])
    try:
        _condition_and_delete(registry, namespace, name, delete_options)
    except errors.APIError as exc:
        if exc.code == 409 and update_options and _rv_unset(options):
            raise _too_many_requests(
                10, f"The disruption budget {pdb_name} is still being processed by the server."
            ) from None
        raise
    return _success()


def _success() -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}


def _check_and_decrement(
    registry: Registry, namespace: str, pod_name: str, pdb: Mapping[str, Any], dry_run: bool
) -> None:
    """``checkAndDecrement``: 429 unless a disruption is allowed; then record it."""
    name = pdb["metadata"]["name"]
    status = dict(kinds._map(pdb.get("status")))
    if int(status.get("observedGeneration") or 0) < int(pdb["metadata"].get("generation") or 0):
        raise _too_many_requests(
            10, f"The disruption budget {name} is still being processed by the server."
        )
    allowed = int(status.get("disruptionsAllowed") or 0)
    if allowed < 0:
        raise _pdb_forbidden(name, "pdb disruptions allowed is negative")
    if len(kinds._map(status.get("disruptedPods"))) > MAX_DISRUPTED_POD_SIZE:
        raise _pdb_forbidden(
            name, "DisruptedPods map too big - too many evictions not confirmed by PDB controller"
        )
    if allowed == 0:
        raise _too_many_requests(
            0,
            f"The disruption budget {name} needs {int(status.get('desiredHealthy') or 0)} "
            f"healthy pods and has {int(status.get('currentHealthy') or 0)} currently",
        )
    now = _now_text(registry.clock())
    status["disruptionsAllowed"] = allowed - 1
    if allowed - 1 == 0:
        _update_allowed_condition(status, now)
    if dry_run:
        return
    status["disruptedPods"] = {**kinds._map(status.get("disruptedPods")), pod_name: now}
    new = copy.deepcopy(dict(pdb))  # the stored object is never modified in place
    new["status"] = status
    res = registry.resources[(GROUP, "v1", "poddisruptionbudgets")]
    registry.update(res, namespace, name, new, subresource="status")


def _disruption_target(status: dict[str, Any], now: str) -> None:
    """``podutil.UpdatePodCondition`` with ``DisruptionTarget=True, EvictionByEvictionAPI``."""
    condition: dict[str, Any] = {
        "type": "DisruptionTarget",
        "status": "True",
        "lastProbeTime": None,
        "lastTransitionTime": now,
        "reason": "EvictionByEvictionAPI",
        "message": "Eviction API: evicting",
    }
    conditions = [dict(c) for c in kinds._list(status.get("conditions"))]
    for i, old in enumerate(conditions):
        if old.get("type") == "DisruptionTarget":
            if old.get("status") == "True":
                condition["lastTransitionTime"] = old.get("lastTransitionTime")
            conditions[i] = condition
            break
    else:
        conditions.append(condition)
    status["conditions"] = conditions


def _condition_and_delete(
    registry: Registry, namespace: str, name: str, options: dict[str, Any]
) -> None:
    """``addConditionAndDeletePod``: DisruptionTarget on the pod, then the delete."""
    pods = registry.resources[("", "v1", "pods")]
    dry_run = bool(options.get("dryRun"))
    preconditions = kinds._map(options.get("preconditions"))
    if not dry_run:
        current = registry.get(pods, namespace, name).obj
        uid, rv = preconditions.get("uid"), preconditions.get("resourceVersion")
        if uid and uid != current["metadata"]["uid"]:
            raise errors.conflict(
                "",
                "Pod",
                name,
                f"the UID in the precondition ({uid}) does not match the UID in record "
                f"({current['metadata']['uid']}). The object might have been deleted and then "
                "recreated",
            )
        if rv and rv != current["metadata"]["resourceVersion"]:
            raise errors.conflict(
                "",
                "Pod",
                name,
                f"the ResourceVersion in the precondition ({rv}) does not match the "
                f"ResourceVersion in record ({current['metadata']['resourceVersion']}). The "
                "object might have been modified",
            )
        pod = copy.deepcopy(current)
        _disruption_target(kinds._ensure(pod, "status"), _now_text(registry.clock()))
        entry, _ = registry.update(pods, namespace, name, pod, subresource="status")
        if rv:
            new_rv = entry.obj["metadata"]["resourceVersion"]
            preconditions = {**preconditions, "resourceVersion": new_rv}
    registry.delete(
        pods,
        namespace,
        name,
        grace_period=options.get("gracePeriodSeconds"),
        preconditions=preconditions or None,
        propagation=kinds._str(options.get("propagationPolicy")),
        dry_run=dry_run,
    )
