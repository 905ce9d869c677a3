"""``scheduling.k8s.io`` in the simulated API server: PriorityClass and the gang objects.

* ``scheduling.k8s.io/v1`` **PriorityClass** (``pkg/registry/scheduling/priorityclass``,
  ``pkg/apis/scheduling/validation``): cluster-scoped; ``value`` (0 when absent, as Go decodes
  it), ``globalDefault``, ``description``, ``preemptionPolicy`` (defaults to
  ``PreemptLowerPriority``). Names with the ``system-`` prefix are reserved for the two system
  classes, which exist from the start (the apiserver's bootstrap hook creates them) and cannot
  be deleted; other classes may not exceed 1e9; ``value`` and ``preemptionPolicy`` are
  immutable. The ``Priority`` admission plugin's half for classes (one ``globalDefault`` only,
  403) is :func:`admit_priority_class`; its half for pods lives in ``kinds._admit_priority``,
  which resolves names through :class:`StoredPriorityClasses` (the class objects in the store).
* ``scheduling.k8s.io/v1alpha2`` **Workload** and **PodGroup** (Kubernetes 1.36, feature gate
  GenericWorkload; ``staging/src/k8s.io/api/scheduling/v1alpha2/types.go``): templates with a
  ``basic`` or ``gang {minCount}`` policy and optional topology constraints; a PodGroup copies
  one and carries ``status.conditions`` (not validated upstream). Validation follows
  ``pkg/apis/scheduling/validation`` and the types' declarative tags (exactly one policy,
  ``minCount >= 1``, 1 to 8 templates with unique names, at most one topology constraint,
  immutable templates, policy and template reference); neither kind has a generation. Pods
  join a PodGroup by ``spec.schedulingGroup.podGroupName`` (validated with the pod, in
  ``kinds``). The ``PodGroupWorkloadExists`` admission plugin refuses (403) a PodGroup whose
  template reference names a missing Workload or template: :func:`admit_pod_group`.

Left out: the 1.36 alpha fields behind other gates (``disruptionMode``, ``priorityClassName``
and ``priority`` on templates and groups, ``resourceClaims``) are stored as sent but not
validated; no Table printers exist upstream for the v1alpha2 kinds (Name, Created At).
Cost: pod admission reads one class by name, O(1), and the global default by scanning the
classes, O(classes).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final

from gpusched.sim import errors, field, kinds
from gpusched.sim.apimachinery import (
    go_quote,
    is_dns1123_label,
    is_dns1123_subdomain,
    is_qualified_name,
)
from gpusched.sim.field import FieldError
from gpusched.sim.store import Store

__all__ = [
    "GROUP",
    "HIGHEST_USER_DEFINABLE_PRIORITY",
    "PRIORITY_CLASS_STORAGE",
    "SYSTEM_PRIORITY_CLASSES",
    "PodGroupStrategy",
    "PriorityClassStrategy",
    "StoredPriorityClasses",
    "WorkloadStrategy",
    "admit_pod_group",
    "admit_priority_class",
    "forbid_system_class_delete",
]

GROUP: Final = "scheduling.k8s.io"
PRIORITY_CLASS_STORAGE: Final = "priorityclasses.scheduling.k8s.io"
POD_GROUP_STORAGE: Final = "podgroups.scheduling.k8s.io"
WORKLOAD_STORAGE: Final = "workloads.scheduling.k8s.io"
HIGHEST_USER_DEFINABLE_PRIORITY: Final = 1_000_000_000
SYSTEM_PREFIX: Final = "system-"
_POLICIES: Final = ("Never", "PreemptLowerPriority")

_SYSTEM_DESCRIPTIONS: Final = {
    # pkg/apis/scheduling/types.go systemPriorityClasses (values: kinds, which admits pods
    # against them when it has no store).
    "system-node-critical": "Used for system critical pods that must not be moved from their "
    "current node.",
    "system-cluster-critical": "Used for system critical pods that must run in the cluster, but "
    "can be moved to another node if necessary.",
}
SYSTEM_PRIORITY_CLASSES: Final[tuple[dict[str, Any], ...]] = tuple(
    {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        "description": _SYSTEM_DESCRIPTIONS[name],
    }
    for name, value in kinds._SYSTEM_PRIORITY_CLASSES.items()
)
"""The classes the apiserver's bootstrap hook creates."""
_SYSTEM_VALUES: Final = {c["metadata"]["name"]: c["value"] for c in SYSTEM_PRIORITY_CLASSES}


# =============================================================================================
# PriorityClass
# =============================================================================================


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


class StoredPriorityClasses(kinds.PriorityResolver):
    """The Priority admission plugin's lister: the PriorityClass objects in the store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def _objects(self) -> Mapping[str, Any]:
        st = self.store.storages.get(PRIORITY_CLASS_STORAGE)
        return {} if st is None else st.objects

    def lookup(self, name: str) -> tuple[int, str | None] | None:
        entry = self._objects().get(name)
        if entry is None:
            return None
        obj = entry.obj
        return int(obj.get("value") or 0), obj.get("preemptionPolicy")

    def global_default(self) -> tuple[str, int, str | None] | None:
        """``getDefaultPriorityClass``: of several defaults (a race), the lowest value."""
        best: dict[str, Any] | None = None
        for entry in self._objects().values():
            obj = entry.obj
            if obj.get("globalDefault") is True and (
                best is None or int(obj.get("value") or 0) < int(best.get("value") or 0)
            ):
                best = obj
        if best is None:
            return None
        return best["metadata"]["name"], int(best.get("value") or 0), best.get("preemptionPolicy")


def _typed_priority_class(obj: dict[str, Any]) -> None:
    """Decode as ``schedulingv1.PriorityClass`` would: value is an int32 (0 when absent),
    globalDefault a bool; fields in the Go struct's order; preemptionPolicy defaulted."""
    kinds._check_meta_decoding("PriorityClass", obj)
    value = obj.get("value", 0)
    if value is None:
        value = 0
    if not _is_int(value) or not -(2**31) <= value < 2**31:
        raise kinds._decode_error(
            "PriorityClass",
            f"json: cannot unmarshal {kinds._json_type(value)} into Go struct field "
            "PriorityClass.value of type int32",
        )
    gd = obj.get("globalDefault")
    if gd is not None and not isinstance(gd, bool):
        raise kinds._decode_error(
            "PriorityClass",
            f"json: cannot unmarshal {kinds._json_type(gd)} into Go struct field "
            "PriorityClass.globalDefault of type bool",
        )
    ordered: dict[str, Any] = {"value": value}
    if gd:
        ordered["globalDefault"] = True
    if obj.get("description"):
        ordered["description"] = obj["description"]
    ordered["preemptionPolicy"] = obj.get("preemptionPolicy") or "PreemptLowerPriority"
    for key in ("value", "globalDefault", "description", "preemptionPolicy"):
        obj.pop(key, None)
    obj.update(ordered)


class PriorityClassStrategy(kinds.Strategy):
    """``pkg/registry/scheduling/priorityclass``: validation, immutability, the table."""

    def __init__(self) -> None:
        super().__init__("PriorityClass", GROUP, "priorityclasses", namespaced=False)

    def prepare_for_create(self, obj: dict[str, Any]) -> None:
        _typed_priority_class(obj)
        obj["metadata"]["generation"] = 1  # set on create, never moved by updates

    def prepare_for_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        _typed_priority_class(new)

    def validate_create(self, obj: dict[str, Any]) -> list[FieldError]:
        errs = kinds._validate_object_meta(obj, self.name_fn, kube=False)
        return errs + _validate_priority_class(obj)

    def validate_update(self, new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
        errs = kinds._validate_object_meta_update(new, old, kube=False)
        if new.get("value") != old.get("value"):
            errs.append(field.forbidden("value", "may not be changed in an update."))
        if new.get("preemptionPolicy") != old.get("preemptionPolicy"):
            errs.append(field.immutable("preemptionPolicy", new.get("preemptionPolicy")))
        return errs

    def table(self, objs: list[dict[str, Any]], now: datetime) -> dict[str, Any]:
        columns = [
            kinds._NAME_COL,
            kinds._col(
                "Value",
                "value represents the integer value of this priority class. This is the actual "
                "priority that pods receive when they have the name of this class in their pod "
                "spec.",
                type_="integer",
            ),
            kinds._col(
                "Global-Default",
                "globalDefault specifies whether this PriorityClass should be considered as the "
                "default priority for pods that do not have any priority class. Only one "
                "PriorityClass can be marked as `globalDefault`. However, if more than one "
                "PriorityClasses exists with their `globalDefault` field set to true, the "
                "smallest value of such global default PriorityClasses will be used as the "
                "default priority.",
                type_="boolean",
            ),
            kinds._AGE_COL,
            kinds._col(
                "PreemptionPolicy",
                "preemptionPolicy is the Policy for preempting pods with lower priority. One of "
                "Never, PreemptLowerPriority. Defaults to PreemptLowerPriority if unset.",
            ),
        ]
        rows = [
            kinds._row(
                o,
                [
                    kinds._str(kinds._meta(o).get("name")),
                    int(o.get("value") or 0),
                    o.get("globalDefault") is True,
                    kinds._since(kinds._meta(o).get("creationTimestamp"), now),
                    kinds._str(o.get("preemptionPolicy")),
                ],
            )
            for o in objs
        ]
        return kinds._table(columns, rows)


def _validate_priority_class(obj: Mapping[str, Any]) -> list[FieldError]:
    """``ValidatePriorityClass`` (the metadata part is the caller's)."""
    errs: list[FieldError] = []
    name = kinds._str(kinds._meta(obj).get("name"))
    value = int(obj.get("value") or 0)
    if name.startswith(SYSTEM_PREFIX):
        problem = _known_system_class(name, value, obj.get("globalDefault") is True)
        if problem:
            errs.append(
                field.forbidden(
                    "metadata.name",
                    f"priority class names with '{SYSTEM_PREFIX}' prefix are reserved for system "
                    f"use only. error: {problem}",
                )
            )
    elif value > HIGHEST_USER_DEFINABLE_PRIORITY:
        errs.append(
            field.forbidden(
                "value",
                "maximum allowed value of a user defined priority is "
                f"{HIGHEST_USER_DEFINABLE_PRIORITY}",
            )
        )
    policy = obj.get("preemptionPolicy")
    if policy not in _POLICIES:
        errs.append(field.not_supported("preemptionPolicy", policy, list(_POLICIES)))
    return errs


def _known_system_class(name: str, value: int, global_default: bool) -> str:
    """``IsKnownSystemPriorityClass``: "" when it is one, else the error text."""
    if name not in _SYSTEM_VALUES:
        return f"{name} is not a known system priority class"
    if value != _SYSTEM_VALUES[name]:
        return f"value of {name} PriorityClass must be {_SYSTEM_VALUES[name]}"
    if global_default:
        return f"globalDefault of {name} PriorityClass must be false"
    return ""


def admit_priority_class(
    obj: Mapping[str, Any], classes: StoredPriorityClasses, updating: bool
) -> None:
    """The Priority plugin's ``validatePriorityClass``: one ``globalDefault`` class only."""
    if obj.get("globalDefault") is not True:
        return
    current = classes.global_default()
    name = kinds._str(kinds._meta(obj).get("name"))
    if current is not None and (not updating or current[0] != name):
        raise errors.forbidden(
            f'priorityclasses.scheduling.k8s.io "{name}" is forbidden: PriorityClass '
            f"{current[0]} is already marked as default. Only one default can exist",
            GROUP,
            "priorityclasses",
            name,
        )


def forbid_system_class_delete(name: str) -> None:
    """``priorityclass/storage.REST.Delete``: the system classes stay."""
    if name in _SYSTEM_VALUES:
        raise errors.forbidden(
            f'priorityclasses.scheduling.k8s.io "{name}" is forbidden: this is a system '
            "priority class and cannot be deleted",
            GROUP,
            "priorityclasses",
            name,
        )


# =============================================================================================
# Workload and PodGroup (v1alpha2)
# =============================================================================================

MAX_POD_GROUP_TEMPLATES: Final = 8
_PATH_SEGMENT_BAD: Final = ("/", "%")


def _validate_path_segment(value: str, path: str) -> list[FieldError]:
    """``path.IsValidPathSegmentName`` (the ``k8s-path-segment-name`` format)."""
    if value in (".", ".."):
        return [field.invalid(path, value, f"may not be '{value}'")]
    return [
        field.invalid(path, value, f"may not contain '{bad}'")
        for bad in _PATH_SEGMENT_BAD
        if bad in value
    ]


def _validate_policy(policy: Any, path: str) -> list[FieldError]:
    """``validatePodGroupSchedulingPolicy``: a union, exactly one of ``basic`` and ``gang``."""
    if policy is None:
        return [field.required(path)]
    if not isinstance(policy, dict):
        return [field.invalid(path, field.struct(policy), "must be an object")]
    chosen = [f"`{k}`" for k in ("basic", "gang") if policy.get(k) is not None]
    if not chosen:
        return [field.invalid(path, "", "must specify one of: `basic`, `gang`")]
    if len(chosen) > 1:
        return [
            field.invalid(
                path,
                "{" + ", ".join(chosen) + "}",
                "exactly one of `basic`, `gang` is required, but multiple fields are set",
            )
        ]
    gang = policy.get("gang")
    if gang is None:
        return []
    count = kinds._map(gang).get("minCount")
    p = f"{path}.gang.minCount"
    if not count:  # declarative validation: 0 is "missing"
        return [field.required(p)]
    if not _is_int(count) or count < 0:
        return [field.invalid(p, count, "must be greater than zero")]
    return []


def _validate_constraints(constraints: Any, path: str) -> list[FieldError]:
    if constraints is None:
        return []
    items = kinds._list(kinds._map(constraints).get("topologyConstraints"))
    p = f"{path}.topologyConstraints"
    if not items:
        return [field.required(p)]
    if len(items) > 1:
        return [field.too_many(p, len(items), 1)]
    key = kinds._str(kinds._map(items[0]).get("topologyKey"))
    kp = f"{p}[0].topologyKey"
    if not key:
        return [field.required(kp)]
    return [field.invalid(kp, key, m) for m in is_qualified_name(key)]


def _validate_controller_ref(ref: Any) -> list[FieldError]:
    """``validateControllerRef``."""
    errs: list[FieldError] = []
    r = kinds._map(ref)
    group = kinds._str(r.get("apiGroup"))
    if group:
        errs.extend(
            field.invalid("spec.controllerRef.apiGroup", group, m)
            for m in is_dns1123_subdomain(group)
        )
    for key in ("kind", "name"):
        value = kinds._str(r.get(key))
        p = f"spec.controllerRef.{key}"
        errs.extend([field.required(p)] if not value else _validate_path_segment(value, p))
    return errs


def _validate_workload_spec(spec: Mapping[str, Any]) -> list[FieldError]:
    errs: list[FieldError] = []
    if spec.get("controllerRef") is not None:
        errs.extend(_validate_controller_ref(spec["controllerRef"]))
    templates = kinds._list(spec.get("podGroupTemplates"))
    path = "spec.podGroupTemplates"
    if not templates:
        return [*errs, field.required(path, "must have at least one item")]
    if len(templates) > MAX_POD_GROUP_TEMPLATES:
        return [*errs, field.too_many(path, len(templates), MAX_POD_GROUP_TEMPLATES)]
    seen: set[str] = set()
    for i, tpl in enumerate(templates):
        name = kinds._str(kinds._map(tpl).get("name"))
        p = f"{path}[{i}]"
        if not name:
            errs.append(field.required(f"{p}.name"))
        else:
            errs.extend(field.invalid(f"{p}.name", name, m) for m in is_dns1123_label(name))
        if name in seen:
            errs.append(field.duplicate(p, name))
        seen.add(name)
        t = kinds._map(tpl)
        errs.extend(_validate_policy(t.get("schedulingPolicy"), f"{p}.schedulingPolicy"))
        errs.extend(
            _validate_constraints(t.get("schedulingConstraints"), f"{p}.schedulingConstraints")
        )
    return errs


def _immutable(new: Mapping[str, Any], old: Mapping[str, Any], key: str, path: str) -> list[Any]:
    """``ValidateImmutableField`` (the Go struct printed as its JSON)."""
    if new.get(key) != old.get(key):
        return [field.immutable(path, field.struct(new.get(key)))]
    return []


class WorkloadStrategy(kinds.Strategy):
    """``scheduling.k8s.io/v1alpha2`` Workload: namespaced, no status, spec immutable."""

    def __init__(self) -> None:
        super().__init__("Workload", GROUP, "workloads", True)

    def prepare_for_create(self, obj: dict[str, Any]) -> None:
        kinds._check_meta_decoding("Workload", obj, "v1alpha2")
        obj.setdefault("spec", {})

    def prepare_for_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        kinds._check_meta_decoding("Workload", new, "v1alpha2")
        new.setdefault("spec", {})

    def validate_create(self, obj: dict[str, Any]) -> list[FieldError]:
        errs = kinds._validate_object_meta(obj, self.name_fn, kube=False)
        return errs + _validate_workload_spec(kinds._map(obj.get("spec")))

    def validate_update(self, new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
        errs = kinds._validate_object_meta_update(new, old, kube=False)
        spec, old_spec = kinds._map(new.get("spec")), kinds._map(old.get("spec"))
        if old_spec.get("controllerRef") is not None:
            errs.extend(_immutable(spec, old_spec, "controllerRef", "spec.controllerRef"))
        elif spec.get("controllerRef") is not None:  # may be set once, later
            errs.extend(_validate_controller_ref(spec["controllerRef"]))
        errs.extend(_immutable(spec, old_spec, "podGroupTemplates", "spec.podGroupTemplates"))
        return errs


def _validate_pod_group_spec(spec: Mapping[str, Any]) -> list[FieldError]:
    errs: list[FieldError] = []
    ref = spec.get("podGroupTemplateRef")
    if ref is not None:
        path = "spec.podGroupTemplateRef"
        workload = kinds._map(ref).get("workload")
        if workload is None:
            errs.append(field.invalid(path, "", "must specify one of: `workload`"))
        else:
            w = kinds._map(workload)
            for key in ("workloadName", "podGroupTemplateName"):
                value = kinds._str(w.get(key))
                p = f"{path}.workload.{key}"
                if not value:
                    errs.append(field.required(p))
                else:
                    errs.extend(field.invalid(p, value, m) for m in is_dns1123_label(value))
    errs.extend(_validate_policy(spec.get("schedulingPolicy"), "spec.schedulingPolicy"))
    errs.extend(
        _validate_constraints(spec.get("schedulingConstraints"), "spec.schedulingConstraints")
    )
    return errs


class PodGroupStrategy(kinds.Strategy):
    """``scheduling.k8s.io/v1alpha2`` PodGroup: spec immutable, ``status.conditions``."""

    def __init__(self) -> None:
        super().__init__("PodGroup", GROUP, "podgroups", True, has_status=True)

    def prepare_for_create(self, obj: dict[str, Any]) -> None:
        kinds._check_meta_decoding("PodGroup", obj, "v1alpha2")
        obj.setdefault("spec", {})
        obj["status"] = {}

    def prepare_for_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        kinds._check_meta_decoding("PodGroup", new, "v1alpha2")
        new.setdefault("spec", {})
        kinds._keep(new, old, "status")

    def validate_create(self, obj: dict[str, Any]) -> list[FieldError]:
        errs = kinds._validate_object_meta(obj, self.name_fn, kube=False)
        return errs + _validate_pod_group_spec(kinds._map(obj.get("spec")))

    def validate_update(self, new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
        errs = kinds._validate_object_meta_update(new, old, kube=False)
        spec, old_spec = kinds._map(new.get("spec")), kinds._map(old.get("spec"))
        for key in ("podGroupTemplateRef", "schedulingPolicy", "schedulingConstraints"):
            errs.extend(_immutable(spec, old_spec, key, f"spec.{key}"))
        return errs

    def prepare_for_status_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        """Old spec; ``metav1.ResetObjectMetaForStatus`` (labels, annotations, finalizers and
        owners cannot change through ``/status``)."""
        kinds._keep(new, old, "spec")
        meta, old_meta = kinds._ensure(new, "metadata"), kinds._meta(old)
        for key in ("labels", "annotations", "finalizers", "ownerReferences"):
            kinds._keep(meta, old_meta, key)

    def validate_status_update(self, new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
        # ValidatePodGroupStatusUpdate checks the metadata only: conditions are not validated.
        return kinds._validate_object_meta_update(new, old, kube=False)


def admit_pod_group(obj: Mapping[str, Any], store: Store) -> None:
    """The ``PodGroupWorkloadExists`` admission plugin (create): a PodGroup made from a
    Workload's template needs that Workload, not being deleted, with that template."""
    ref = kinds._map(kinds._map(kinds._map(obj.get("spec")).get("podGroupTemplateRef")))
    workload_ref = ref.get("workload")
    if workload_ref is None:
        return
    w = kinds._map(workload_ref)
    meta = kinds._meta(obj)
    name = kinds._str(meta.get("generateName")) or kinds._str(meta.get("name"))
    workload_name = kinds._str(w.get("workloadName"))
    template = kinds._str(w.get("podGroupTemplateName"))
    st = store.storages.get(WORKLOAD_STORAGE)
    entry = None if st is None else st.get(f"{kinds._str(meta.get('namespace'))}/{workload_name}")

    def refuse(why: str) -> errors.APIError:
        return errors.forbidden(
            f"podgroups.scheduling.k8s.io {go_quote(name)} is forbidden: PodGroup rejected: {why}",
            GROUP,
            "podgroups",
            name,
        )

    if entry is None:
        raise refuse(f"Workload {go_quote(workload_name)} not found")
    workload = entry.obj
    if kinds._meta(workload).get("deletionTimestamp"):
        raise refuse(f"Workload {go_quote(workload_name)} is being deleted")
    templates = kinds._list(kinds._map(workload.get("spec")).get("podGroupTemplates"))
    if not any(kinds._map(t).get("name") == template for t in templates):
        raise refuse(
            f"PodGroupTemplate {go_quote(template)} not found in Workload {go_quote(workload_name)}"
        )
