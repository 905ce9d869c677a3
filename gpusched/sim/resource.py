"""``resource.k8s.io/v1`` in the simulated API server: Dynamic Resource Allocation's kinds.

* **DeviceClass** (cluster): ``spec.selectors`` (CEL), ``spec.config``; a generation that
  moves with the spec.
* **ResourceClaim** (namespaced, ``status`` subresource): ``spec.devices.requests`` (each
  ``exactly`` or ``firstAvailable``), ``constraints`` (``matchAttribute``), ``config``; the spec
  is immutable. ``status.allocation`` may be set once (then it is immutable until cleared),
  ``status.reservedFor`` holds at most 256 distinct consumers and only while allocated, and no
  new consumer may be added once the claim is being deleted. Create resets the status; updates
  keep it; ``/status`` keeps the spec, labels, annotations, finalizers and owners.
* **ResourceClaimTemplate** (namespaced): a claim spec plus template metadata; immutable spec.
* **ResourceSlice** (cluster): ``driver``, ``pool {name, generation, resourceSliceCount}``,
  exactly one of ``nodeName`` / ``nodeSelector`` / ``allNodes``, at most 128 devices with
  unique DNS-label names, attributes (one typed value each) and capacities; driver, pool
  name and node name are immutable; field selectors ``spec.nodeName`` and ``spec.driver``.

Validation follows ``pkg/apis/resource/validation/validation.go`` (the messages are
upstream's), defaulting ``pkg/apis/resource/v1/defaults.go`` (``allocationMode: ExactCount``,
``count: 1``, toleration ``operator: Equal``), the strategies
``pkg/registry/resource/*/strategy.go`` and the tables ``pkg/printers/internalversion``.

CEL selectors (DeviceClass, claim and template requests and subrequests) are compiled with
:mod:`gpusched.dra.cel` as the real server compiles them: too long is TooLong, a syntax
error, an undeclared name or a non-bool literal result is Invalid (``...cel.expression``),
an estimated cost over the limit Forbidden ("too complex, exceeds cost limit"); a
DeviceClass update whose selectors are unchanged is not recompiled (upstream's "stored"
expressions). Left out: opaque parameters are checked to be JSON objects
but not for size; device taints, counters, consumable capacity, binding conditions, admin
access and the alpha fields are stored as sent and not validated. Cost: linear in the object.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any, Final

from gpusched.dra.cel import compile_selector
from gpusched.sim import field, kinds
from gpusched.sim.apimachinery import (
    is_dns1123_label,
    is_dns1123_subdomain,
    is_valid_label_value,
    name_is_dns_subdomain,
    regex_error,
)
from gpusched.sim.field import FieldError

__all__ = [
    "DELETE_PROTECTION_FINALIZER",
    "GROUP",
    "DeviceClassStrategy",
    "ResourceClaimStrategy",
    "ResourceClaimTemplateStrategy",
    "ResourceSliceStrategy",
    "claim_state",
]

GROUP: Final = "resource.k8s.io"
VERSION: Final = "v1"
DELETE_PROTECTION_FINALIZER: Final = "resource.kubernetes.io/delete-protection"
"""The finalizer the scheduler puts on a claim it allocates (``resourceclaim`` controller's)."""

# staging/src/k8s.io/api/resource/v1/types.go
DEVICE_REQUESTS_MAX: Final = 32
DEVICE_CONSTRAINTS_MAX: Final = 32
DEVICE_CONFIG_MAX: Final = 32
DEVICE_SELECTORS_MAX: Final = 32
FIRST_AVAILABLE_MAX: Final = 8
CEL_EXPRESSION_MAX_LENGTH: Final = 10 * 1024
RESERVED_FOR_MAX: Final = 256
ALLOCATION_RESULTS_MAX: Final = 32
SLICE_MAX_DEVICES: Final = 128
POOL_NAME_MAX_LENGTH: Final = 253
DEVICE_MAX_DOMAIN_LENGTH: Final = 63
DEVICE_MAX_ID_LENGTH: Final = 32
ATTRIBUTE_MAX_VALUE_LENGTH: Final = 64
ATTRIBUTES_AND_CAPACITIES_MAX: Final = 32
DRIVER_NAME_MAX_LENGTH: Final = 63
_ATTR_KEY_MAX: Final = DEVICE_MAX_DOMAIN_LENGTH + 1 + DEVICE_MAX_ID_LENGTH

_ALLOCATION_MODES: Final = ("All", "ExactCount")
_C_IDENTIFIER_FMT: Final = "[A-Za-z_][A-Za-z0-9_]*"
_C_IDENTIFIER_RE: Final = re.compile(_C_IDENTIFIER_FMT)
_C_IDENTIFIER_MSG: Final = (
    "a valid C identifier must start with alphabetic character or '_', followed by a string "
    "of alphanumeric characters or '_'"
)
_SEMVER_RE: Final = re.compile(
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(-(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*)?"
    r"(\+[0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*)?"
)
_ATTRIBUTE_KINDS: Final = ("bool", "int", "string", "version")


# =============================================================================================
# Small validators (names)
# =============================================================================================


def _dns_label(value: str, path: str) -> list[FieldError]:
    """``ValidateDNS1123Label`` (device, request and counter names)."""
    return [field.invalid(path, value, m) for m in is_dns1123_label(value)]


def _dns_subdomain(value: str, path: str) -> list[FieldError]:
    return [field.invalid(path, value, m) for m in is_dns1123_subdomain(value)]


def _driver_name(value: str, path: str) -> list[FieldError]:
    """``ValidateCSIDriverName`` (a driver's name follows a CSI driver's rules)."""
    errs: list[FieldError] = []
    if not value:
        errs.append(field.required(path))
    if len(value) > DRIVER_NAME_MAX_LENGTH:
        errs.append(field.too_long(path, DRIVER_NAME_MAX_LENGTH))
    errs.extend(field.invalid(path, value, m) for m in is_dns1123_subdomain(value.lower()))
    return errs


def _pool_name(value: str, path: str) -> list[FieldError]:
    if not value:
        return [field.required(path)]
    errs: list[FieldError] = []
    if len(value) > POOL_NAME_MAX_LENGTH:
        errs.append(field.too_long(path, POOL_NAME_MAX_LENGTH))
    for part in value.split("/"):
        errs.extend(_dns_subdomain(part, path))
    return errs


def _c_identifier(value: str, path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    if len(value) > DEVICE_MAX_ID_LENGTH:
        errs.append(field.too_long(path, DEVICE_MAX_ID_LENGTH))
    if not _C_IDENTIFIER_RE.fullmatch(value):
        msg = regex_error(_C_IDENTIFIER_MSG, _C_IDENTIFIER_FMT, "my_name", "MY_NAME", "MyName")
        errs.append(field.invalid(path, value, msg))
    return errs


def _qualified_name(name: str, path: str) -> list[FieldError]:
    """``validateQualifiedName``: ``<C identifier>`` or ``<driver-like domain>/<C identifier>``."""
    parts = name.split("/")
    if len(parts) == 1:
        return _c_identifier(parts[0], path)
    if len(parts) > 2:
        return [field.invalid(path, name, "must not contain more than one slash")]
    errs: list[FieldError] = []
    if not parts[0]:
        errs.append(field.invalid(path, "", "the domain must not be empty"))
    else:
        errs.extend(_driver_name(parts[0], path))
    if not parts[1]:
        errs.append(field.invalid(path, "", "the name must not be empty"))
    else:
        errs.extend(_c_identifier(parts[1], path))
    return errs


def _fully_qualified_name(name: str, path: str) -> list[FieldError]:
    errs = _qualified_name(name, path)
    if "/" not in name:
        errs.append(
            field.invalid(
                path,
                name,
                "a fully qualified name must be a domain and a name separated by a slash",
            )
        )
    return errs


def _truncate_key(key: str, limit: int) -> str:
    """``truncateIfTooLong``: long map keys are shortened in the middle in error paths."""
    limit = max(limit, 16)
    if len(key) <= limit:
        return key
    remaining = limit - 3
    return key[: (remaining + 1) // 2] + "..." + key[len(key) - remaining // 2 :]


def _validate_set(
    items: list[Any],
    maximum: int,
    path: str,
    item: Callable[[Any, str], list[FieldError]],
    key: Callable[[Any], Any],
) -> list[FieldError]:
    """``validateSet``: too many short-circuits; each item; then duplicates by key."""
    if maximum >= 0 and len(items) > maximum:
        return [field.too_many(path, len(items), maximum)]
    errs: list[FieldError] = []
    for i, it in enumerate(items):
        errs.extend(item(it, f"{path}[{i}]"))
    seen: set[Any] = set()
    for i, it in enumerate(items):
        k = key(it)
        if k in seen:
            errs.append(field.duplicate(f"{path}[{i}]", k))
        else:
            seen.add(k)
    return errs


def _validate_slice(
    items: list[Any], maximum: int, path: str, item: Callable[[Any, str], list[FieldError]]
) -> list[FieldError]:
    if maximum >= 0 and len(items) > maximum:
        return [field.too_many(path, len(items), maximum)]
    errs: list[FieldError] = []
    for i, it in enumerate(items):
        errs.extend(item(it, f"{path}[{i}]"))
    return errs


# =============================================================================================
# Claims: requests, selectors, constraints, config
# =============================================================================================


class _RequestNames:
    """``requestNames``: request -> its subrequest names (None for an ``exactly`` request)."""

    def __init__(self, devices: Mapping[str, Any]) -> None:
        self.names: dict[str, set[str] | None] = {}
        for r in kinds._list(devices.get("requests")):
            req = kinds._map(r)
            first = kinds._list(req.get("firstAvailable"))
            self.names[kinds._str(req.get("name"))] = (
                {kinds._str(kinds._map(s).get("name")) for s in first} if first else None
            )

    def has(self, ref: str) -> bool:
        segments = ref.split("/")
        if len(segments) > 2 or segments[0] not in self.names:
            return False
        if len(segments) == 1:
            return True
        subs = self.names[segments[0]]
        return subs is not None and segments[1] in subs


_REQUEST_REF_MSG: Final = (
    "must be the name of a request in the claim or the name of a request and a subrequest "
    "separated by '/'"
)


def _request_ref(name: Any, path: str, names: _RequestNames) -> list[FieldError]:
    ref = kinds._str(name)
    segments = ref.split("/")
    if len(segments) > 2:
        return [field.invalid(path, ref, _REQUEST_REF_MSG)]
    errs: list[FieldError] = []
    for seg in segments:
        errs.extend(_dns_label(seg, path))
    if not names.has(ref):
        errs.append(field.invalid(path, ref, _REQUEST_REF_MSG))
    return errs


def _selector(sel: Any, path: str) -> list[FieldError]:
    """``validateSelector``: the expression is compiled in the DRA environment
    (:mod:`gpusched.dra.cel`); an invalid one is Invalid, a too expensive one Forbidden."""
    cel = kinds._map(sel).get("cel")
    if cel is None:
        return [field.required(f"{path}.cel")]
    expression = kinds._str(kinds._map(cel).get("expression"))
    where = f"{path}.cel.expression"
    if len(expression) > CEL_EXPRESSION_MAX_LENGTH:
        return [field.too_long(where, CEL_EXPRESSION_MAX_LENGTH)]  # not compiled, as upstream
    compiled = compile_selector(expression)
    if compiled.too_expensive:
        return [field.forbidden(where, "too complex, exceeds cost limit")]
    if compiled.error is not None:
        return [field.invalid(where, expression, compiled.error)]
    return []


def _selectors(selectors: Any, path: str) -> list[FieldError]:
    return _validate_slice(kinds._list(selectors), DEVICE_SELECTORS_MAX, path, _selector)


def _device_class_ref(name: Any, path: str) -> list[FieldError]:
    value = kinds._str(name)
    if not value:
        return [field.required(path)]
    return _dns_subdomain(value, path)


def _allocation_mode(mode: Any, count: Any, mode_path: str, count_path: str) -> list[FieldError]:
    n = count if isinstance(count, int) and not isinstance(count, bool) else 0
    if mode == "All":
        if n != 0:
            return [
                field.invalid(count_path, n, "must not be specified when allocationMode is 'All'")
            ]
        return []
    if mode == "ExactCount":
        if n <= 0:
            return [field.invalid(count_path, n, "must be greater than zero")]
        return []
    return [field.not_supported(mode_path, kinds._str(mode), list(_ALLOCATION_MODES))]


def _toleration(tol: Any, path: str) -> list[FieldError]:
    t = kinds._map(tol)
    errs: list[FieldError] = []
    op = kinds._str(t.get("operator"))
    value = kinds._str(t.get("value"))
    if op == "Exists":
        if value:
            errs.append(
                field.invalid(f"{path}.value", value, "must be empty for operator `Exists`")
            )
    elif op == "Equal":
        errs.extend(field.invalid(f"{path}.value", value, m) for m in is_valid_label_value(value))
    elif not op:
        errs.append(field.required(f"{path}.operator"))
    else:
        errs.append(field.not_supported(f"{path}.operator", op, ["Equal", "Exists"]))
    return errs


def _exact_request(req: Mapping[str, Any], path: str) -> list[FieldError]:
    errs = _device_class_ref(req.get("deviceClassName"), f"{path}.deviceClassName")
    errs.extend(_selectors(req.get("selectors"), f"{path}.selectors"))
    errs.extend(
        _allocation_mode(
            req.get("allocationMode"), req.get("count"), f"{path}.allocationMode", f"{path}.count"
        )
    )
    for i, tol in enumerate(kinds._list(req.get("tolerations"))):
        errs.extend(_toleration(tol, f"{path}.tolerations[{i}]"))
    return errs


def _sub_request(sub: Any, path: str) -> list[FieldError]:
    s = kinds._map(sub)
    return _dns_label(kinds._str(s.get("name")), f"{path}.name") + _exact_request(s, path)


def _device_request(request: Any, path: str) -> list[FieldError]:
    req = kinds._map(request)
    errs = _dns_label(kinds._str(req.get("name")), f"{path}.name")
    first = kinds._list(req.get("firstAvailable"))
    exactly = req.get("exactly")
    chosen = int(bool(first)) + int(exactly is not None)
    if chosen == 0:
        errs.append(
            field.required(path, "exactly one of `exactly` or `firstAvailable` is required")
        )
    elif chosen > 1:
        errs.append(
            field.invalid(
                path,
                None,
                "exactly one of `exactly` or `firstAvailable` is required, but multiple fields "
                "are set",
            )
        )
    elif first:
        errs.extend(
            _validate_set(
                first,
                FIRST_AVAILABLE_MAX,
                f"{path}.firstAvailable",
                _sub_request,
                lambda s: kinds._str(kinds._map(s).get("name")),
            )
        )
    else:
        errs.extend(_exact_request(kinds._map(exactly), f"{path}.exactly"))
    return errs


def _request_refs(obj: Mapping[str, Any], path: str, names: _RequestNames) -> list[FieldError]:
    """A constraint's or config's ``requests``: a set of names of the claim's requests."""
    return _validate_set(
        kinds._list(obj.get("requests")),
        DEVICE_REQUESTS_MAX,
        f"{path}.requests",
        lambda n, p: _request_ref(n, p, names),
        kinds._str,
    )


def _constraint(c: Any, path: str, names: _RequestNames) -> list[FieldError]:
    con = kinds._map(c)
    errs = _request_refs(con, path, names)
    if con.get("matchAttribute") is not None:
        errs.extend(
            _fully_qualified_name(kinds._str(con["matchAttribute"]), f"{path}.matchAttribute")
        )
    elif con.get("distinctAttribute") is not None:
        errs.extend(
            _fully_qualified_name(kinds._str(con["distinctAttribute"]), f"{path}.distinctAttribute")
        )
    else:
        errs.append(field.required(f"{path}.matchAttribute"))
    return errs


def _opaque(config: Mapping[str, Any], path: str) -> list[FieldError]:
    opaque = config.get("opaque")
    if opaque is None:
        return [field.required(f"{path}.opaque")]
    o = kinds._map(opaque)
    errs = _driver_name(kinds._str(o.get("driver")), f"{path}.opaque.driver")
    params = o.get("parameters")
    if params is None:
        errs.append(field.required(f"{path}.opaque.parameters"))
    elif not isinstance(params, dict):
        errs.append(
            field.invalid(
                f"{path}.opaque.parameters", "<value omitted>", "must be a valid JSON object"
            )
        )
    return errs


def _claim_config(c: Any, path: str, names: _RequestNames) -> list[FieldError]:
    cfg = kinds._map(c)
    return _request_refs(cfg, path, names) + _opaque(cfg, path)


def validate_claim_spec(spec: Mapping[str, Any], path: str) -> list[FieldError]:
    """``validateResourceClaimSpec`` (``path`` is ``spec`` or ``spec.spec`` for templates)."""
    devices = kinds._map(spec.get("devices"))
    dpath = f"{path}.devices"
    names = _RequestNames(devices)
    errs = _validate_set(
        kinds._list(devices.get("requests")),
        DEVICE_REQUESTS_MAX,
        f"{dpath}.requests",
        _device_request,
        lambda r: kinds._str(kinds._map(r).get("name")),
    )
    errs.extend(
        _validate_slice(
            kinds._list(devices.get("constraints")),
            DEVICE_CONSTRAINTS_MAX,
            f"{dpath}.constraints",
            lambda c, p: _constraint(c, p, names),
        )
    )
    errs.extend(
        _validate_slice(
            kinds._list(devices.get("config")),
            DEVICE_CONFIG_MAX,
            f"{dpath}.config",
            lambda c, p: _claim_config(c, p, names),
        )
    )
    return errs


# =============================================================================================
# Claim status
# =============================================================================================


def _consumer(ref: Any, path: str) -> list[FieldError]:
    r = kinds._map(ref)
    return [field.required(f"{path}.{k}") for k in ("resource", "name", "uid") if not r.get(k)]


def _allocation_result(result: Any, path: str, names: _RequestNames) -> list[FieldError]:
    r = kinds._map(result)
    errs = _request_ref(r.get("request"), f"{path}.request", names)
    errs.extend(_driver_name(kinds._str(r.get("driver")), f"{path}.driver"))
    errs.extend(_pool_name(kinds._str(r.get("pool")), f"{path}.pool"))
    errs.extend(_dns_label(kinds._str(r.get("device")), f"{path}.device"))
    return errs


def _validate_allocation(allocation: Any, path: str, names: _RequestNames) -> list[FieldError]:
    devices = kinds._map(kinds._map(allocation).get("devices"))
    return _validate_slice(
        kinds._list(devices.get("results")),
        ALLOCATION_RESULTS_MAX,
        f"{path}.devices.results",
        lambda r, p: _allocation_result(r, p, names),
    )


def _consumer_key(ref: Any) -> str:
    return kinds._str(kinds._map(ref).get("uid"))


def validate_claim_status_update(
    new: Mapping[str, Any], old: Mapping[str, Any]
) -> list[FieldError]:
    """``validateResourceClaimStatusUpdate`` (the metadata part is the caller's)."""
    status, old_status = kinds._map(new.get("status")), kinds._map(old.get("status"))
    names = _RequestNames(kinds._map(kinds._map(new.get("spec")).get("devices")))
    reserved = kinds._list(status.get("reservedFor"))
    errs = _validate_set(reserved, RESERVED_FOR_MAX, "status.reservedFor", _consumer, _consumer_key)
    allocation, old_allocation = status.get("allocation"), old_status.get("allocation")
    if reserved:
        if allocation is None:
            errs.append(
                field.forbidden(
                    "status.reservedFor", "may not be specified when `allocated` is not set"
                )
            )
        elif kinds._meta(new).get("deletionTimestamp"):
            before = {_consumer_key(r) for r in kinds._list(old_status.get("reservedFor"))}
            if any(_consumer_key(r) not in before for r in reserved):
                errs.append(
                    field.forbidden(
                        "status.reservedFor",
                        "new entries may not be added while `deallocationRequested` or "
                        "`deletionTimestamp` are set",
                    )
                )
    if old_allocation is not None and allocation is not None:
        if allocation != old_allocation:
            errs.append(field.immutable("status.allocation", field.struct(allocation)))
    elif allocation is not None:
        errs.extend(_validate_allocation(allocation, "status.allocation", names))
    return errs


def claim_state(claim: Mapping[str, Any]) -> str:
    """The STATE column of ``kubectl get resourceclaims`` (``resourceClaimState``)."""
    deleted = bool(kinds._meta(claim).get("deletionTimestamp"))
    status = kinds._map(claim.get("status"))
    states = ["deleted"] if deleted else []
    if status.get("allocation") is None:
        if not deleted:
            states.append("pending")
    else:
        states.append("allocated")
        if status.get("reservedFor"):
            states.append("reserved")
    return ",".join(states)


# =============================================================================================
# Defaulting (pkg/apis/resource/v1/defaults.go)
# =============================================================================================


def _default_exact(req: dict[str, Any]) -> None:
    if not req.get("allocationMode"):
        req["allocationMode"] = "ExactCount"
    if req["allocationMode"] == "ExactCount" and not req.get("count"):
        req["count"] = 1
    for tol in kinds._list(req.get("tolerations")):
        if isinstance(tol, dict) and not tol.get("operator"):
            tol["operator"] = "Equal"


def _default_claim_spec(spec: Any) -> None:
    for r in kinds._list(kinds._map(kinds._map(spec).get("devices")).get("requests")):
        if not isinstance(r, dict):
            continue
        if isinstance(r.get("exactly"), dict):
            _default_exact(r["exactly"])
        for sub in kinds._list(r.get("firstAvailable")):
            if isinstance(sub, dict):
                _default_exact(sub)


# =============================================================================================
# Strategies
# =============================================================================================


def _reset_meta_for_status(new: dict[str, Any], old: Mapping[str, Any]) -> None:
    """``metav1.ResetObjectMetaForStatus``."""
    meta, old_meta = kinds._ensure(new, "metadata"), kinds._meta(old)
    for key in ("labels", "annotations", "finalizers", "ownerReferences"):
        kinds._keep(meta, old_meta, key)


def _immutable(new: Any, old: Any, path: str) -> list[FieldError]:
    if new != old:
        return [field.immutable(path, field.struct(new))]
    return []


def _name_age_table(objs: list[dict[str, Any]], now: datetime) -> dict[str, Any]:
    rows = [
        kinds._row(
            o,
            [
                kinds._str(kinds._meta(o).get("name")),
                kinds._since(kinds._meta(o).get("creationTimestamp"), now),
            ],
        )
        for o in objs
    ]
    return kinds._table([kinds._NAME_COL, kinds._AGE_COL], rows)


class DeviceClassStrategy(kinds.Strategy):
    """``pkg/registry/resource/deviceclass``: cluster-scoped, generation tracks the spec."""

    def __init__(self) -> None:
        super().__init__("DeviceClass", GROUP, "deviceclasses", False, tracks_generation=True)

    def prepare_for_create(self, obj: dict[str, Any]) -> None:
        kinds._check_meta_decoding("DeviceClass", obj, VERSION)
        obj.setdefault("spec", {})

    def prepare_for_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        kinds._check_meta_decoding("DeviceClass", new, VERSION)
        new.setdefault("spec", {})

    def _spec_errors(
        self, spec: Mapping[str, Any], old: Mapping[str, Any] | None
    ) -> list[FieldError]:
        errs: list[FieldError] = []
        selectors = kinds._list(spec.get("selectors"))
        if old is None or selectors != kinds._list(old.get("selectors")):
            errs.extend(_selectors(selectors, "spec.selectors"))
        errs.extend(
            _validate_slice(
                kinds._list(spec.get("config")),
                DEVICE_CONFIG_MAX,
                "spec.config",
                lambda c, p: _opaque(kinds._map(c), p),
            )
        )
        return errs

    def validate_create(self, obj: dict[str, Any]) -> list[FieldError]:
        errs = kinds._validate_object_meta(obj, self.name_fn, kube=True)
        return errs + self._spec_errors(kinds._map(obj.get("spec")), None)

    def validate_update(self, new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
        errs = kinds._validate_object_meta(new, self.name_fn, kube=True)
        errs += kinds._validate_object_meta_update(new, old, kube=True)
        return errs + self._spec_errors(kinds._map(new.get("spec")), kinds._map(old.get("spec")))

    def table(self, objs: list[dict[str, Any]], now: datetime) -> dict[str, Any]:
        return _name_age_table(objs, now)


class ResourceClaimStrategy(kinds.Strategy):
    """``pkg/registry/resource/resourceclaim``: spec immutable, ``status`` subresource."""

    def __init__(self) -> None:
        super().__init__("ResourceClaim", GROUP, "resourceclaims", True, has_status=True)

    def prepare_for_create(self, obj: dict[str, Any]) -> None:
        kinds._check_meta_decoding("ResourceClaim", obj, VERSION)
        obj.setdefault("spec", {})
        _default_claim_spec(obj["spec"])
        obj["status"] = {}

    def prepare_for_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        kinds._check_meta_decoding("ResourceClaim", new, VERSION)
        new.setdefault("spec", {})
        _default_claim_spec(new["spec"])
        kinds._keep(new, old, "status")

    def prepare_for_status_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        kinds._keep(new, old, "spec")
        _reset_meta_for_status(new, old)
        new.setdefault("status", {})

    def validate_create(self, obj: dict[str, Any]) -> list[FieldError]:
        errs = kinds._validate_object_meta(obj, self.name_fn, kube=True)
        return errs + validate_claim_spec(kinds._map(obj.get("spec")), "spec")

    def validate_update(self, new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
        errs = kinds._validate_object_meta(new, self.name_fn, kube=True)
        errs += kinds._validate_object_meta_update(new, old, kube=True)
        return errs + _immutable(new.get("spec"), old.get("spec"), "spec")

    def validate_status_update(self, new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
        errs = kinds._validate_object_meta_update(new, old, kube=True)
        return errs + validate_claim_status_update(new, old)

    def table(self, objs: list[dict[str, Any]], now: datetime) -> dict[str, Any]:
        columns = [
            kinds._NAME_COL,
            kinds._col(
                "State", "A summary of the current state (allocated, pending, reserved, etc.)."
            ),
            kinds._AGE_COL,
        ]
        rows = [
            kinds._row(
                o,
                [
                    kinds._str(kinds._meta(o).get("name")),
                    claim_state(o),
                    kinds._since(kinds._meta(o).get("creationTimestamp"), now),
                ],
            )
            for o in objs
        ]
        return kinds._table(columns, rows)


class ResourceClaimTemplateStrategy(kinds.Strategy):
    """``pkg/registry/resource/resourceclaimtemplate``: spec immutable, no status."""

    def __init__(self) -> None:
        super().__init__("ResourceClaimTemplate", GROUP, "resourceclaimtemplates", True)

    def prepare_for_create(self, obj: dict[str, Any]) -> None:
        kinds._check_meta_decoding("ResourceClaimTemplate", obj, VERSION)
        obj.setdefault("spec", {})
        _default_claim_spec(kinds._map(obj["spec"]).get("spec"))

    def prepare_for_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        kinds._check_meta_decoding("ResourceClaimTemplate", new, VERSION)
        new.setdefault("spec", {})
        _default_claim_spec(kinds._map(new["spec"]).get("spec"))

    def validate_create(self, obj: dict[str, Any]) -> list[FieldError]:
        errs = kinds._validate_object_meta(obj, self.name_fn, kube=True)
        spec = kinds._map(obj.get("spec"))
        template_meta = kinds._map(spec.get("metadata"))
        errs.extend(kinds._validate_labels(template_meta.get("labels"), "spec.metadata.labels"))
        errs.extend(
            kinds._validate_annotations(
                template_meta.get("annotations"), "spec.metadata.annotations"
            )
        )
        return errs + validate_claim_spec(kinds._map(spec.get("spec")), "spec.spec")

    def validate_update(self, new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
        errs = kinds._validate_object_meta_update(new, old, kube=True)
        return errs + _immutable(new.get("spec"), old.get("spec"), "spec")

    def table(self, objs: list[dict[str, Any]], now: datetime) -> dict[str, Any]:
        return _name_age_table(objs, now)


# =============================================================================================
# ResourceSlice
# =============================================================================================


def _attribute(attr: Any, path: str) -> list[FieldError]:
    a = kinds._map(attr)
    set_kinds = [k for k in _ATTRIBUTE_KINDS if a.get(k) is not None]
    errs: list[FieldError] = []
    if "string" in set_kinds and len(kinds._str(a["string"])) > ATTRIBUTE_MAX_VALUE_LENGTH:
        errs.append(field.too_long(f"{path}.string", ATTRIBUTE_MAX_VALUE_LENGTH))
    if "version" in set_kinds:
        v = kinds._str(a["version"])
        if not _SEMVER_RE.fullmatch(v):
            errs.append(
                field.invalid(
                    f"{path}.version", v, "must be a string compatible with semver.org spec 2.0.0"
                )
            )
        if len(v) > ATTRIBUTE_MAX_VALUE_LENGTH:
            errs.append(field.too_long(f"{path}.version", ATTRIBUTE_MAX_VALUE_LENGTH))
    if not set_kinds:
        errs.append(field.invalid(path, "", "exactly one value must be specified"))
    elif len(set_kinds) > 1:
        errs.append(field.invalid(path, field.struct(attr), "exactly one value must be specified"))
    return errs


def _validate_map(
    m: Any, path: str, item: Callable[[Any, str], list[FieldError]]
) -> list[FieldError]:
    errs: list[FieldError] = []
    for key, value in kinds._map(m).items():
        errs.extend(_qualified_name(key, path))
        errs.extend(item(value, f"{path}[{_truncate_key(key, _ATTR_KEY_MAX)}]"))
    return errs


def _capacity(cap: Any, path: str) -> list[FieldError]:
    c = kinds._map(cap)
    if c.get("requestPolicy") is not None:
        return [field.forbidden(f"{path}.requestPolicy", "allowMultipleAllocations must be true")]
    return []


def _device(device: Any, path: str) -> list[FieldError]:
    d = kinds._map(device)
    errs = _dns_label(kinds._str(d.get("name")), f"{path}.name")
    attrs, caps = kinds._map(d.get("attributes")), kinds._map(d.get("capacity"))
    total = len(attrs) + len(caps)
    if total > ATTRIBUTES_AND_CAPACITIES_MAX:
        errs.append(
            field.invalid(
                path,
                total,
                "the total number of attributes and capacities must not exceed "
                f"{ATTRIBUTES_AND_CAPACITIES_MAX}",
            )
        )
    errs.extend(_validate_map(attrs, f"{path}.attributes", _attribute))
    if d.get("allowMultipleAllocations") is not True:
        errs.extend(_validate_map(caps, f"{path}.capacity", _capacity))
    if any(d.get(k) is not None for k in ("nodeName", "nodeSelector", "allNodes")):
        errs.append(
            field.invalid(
                path,
                None,
                "`nodeName`, `nodeSelector` and `allNodes` can only be set if "
                "`perDeviceNodeSelection` is set to true in the ResourceSlice spec",
            )
        )
    return errs


_NODE_FIELDS_MSG: Final = (
    "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required"
)


def validate_slice_spec(spec: Mapping[str, Any], old: Mapping[str, Any] | None) -> list[FieldError]:
    """``validateResourceSliceSpec`` (per-device node selection left out: stored as sent)."""
    errs = _driver_name(kinds._str(spec.get("driver")), "spec.driver")
    pool = kinds._map(spec.get("pool"))
    errs.extend(_pool_name(kinds._str(pool.get("name")), "spec.pool.name"))
    count = pool.get("resourceSliceCount", 0)
    if not isinstance(count, int) or count <= 0:
        errs.append(
            field.invalid("spec.pool.resourceSliceCount", count, "must be greater than zero")
        )
    generation = pool.get("generation", 0)
    if isinstance(generation, int) and generation < 0:
        errs.append(
            field.invalid(
                "spec.pool.generation", generation, "must be greater than or equal to zero"
            )
        )
    if old is not None:
        old_pool = kinds._map(old.get("pool"))
        errs.extend(_immutable(pool.get("name", ""), old_pool.get("name", ""), "spec.pool.name"))
        errs.extend(_immutable(spec.get("driver", ""), old.get("driver", ""), "spec.driver"))
        if spec.get("nodeName") != old.get("nodeName"):
            errs.append(field.immutable("spec.nodeName", field.struct(spec.get("nodeName"))))
    set_fields: list[str] = []
    node_name = spec.get("nodeName")
    if node_name is not None:
        if node_name != "":
            set_fields.append("`nodeName`")
            errs.extend(_dns_subdomain(kinds._str(node_name), "spec.nodeName"))
        else:
            errs.append(
                field.invalid(
                    "spec.nodeName", "", "must be either unset or set to a non-empty string"
                )
            )
    selector = spec.get("nodeSelector")
    if selector is not None:
        set_fields.append("`nodeSelector`")
        terms = kinds._list(kinds._map(selector).get("nodeSelectorTerms"))
        if len(terms) != 1:
            errs.append(
                field.invalid(
                    "spec.nodeSelector.nodeSelectorTerms",
                    field.struct(terms),
                    "must have exactly one node selector term",
                )
            )
    for key in ("allNodes", "perDeviceNodeSelection"):
        value = spec.get(key)
        if value is None:
            continue
        if value is True:
            set_fields.append(f"`{key}`")
        else:
            errs.append(field.invalid(f"spec.{key}", value, "must be either unset or set to true"))
    if not set_fields:
        errs.append(field.required("spec", _NODE_FIELDS_MSG))
    elif len(set_fields) > 1:
        errs.append(
            field.invalid(
                "spec",
                "{" + ", ".join(set_fields) + "}",
                _NODE_FIELDS_MSG + ", but multiple fields are set",
            )
        )
    if spec.get("sharedCounters") is not None and spec.get("devices") is not None:
        errs.append(
            field.invalid("spec", "", "only one of `sharedCounters` or `devices` is allowed")
        )
    if spec.get("perDeviceNodeSelection") is True:
        return errs  # devices then carry their own node fields: stored as sent
    errs.extend(
        _validate_set(
            kinds._list(spec.get("devices")),
            SLICE_MAX_DEVICES,
            "spec.devices",
            _device,
            lambda d: kinds._str(kinds._map(d).get("name")),
        )
    )
    return errs


def _canonicalize_capacities(obj: dict[str, Any]) -> None:
    """Capacity values are ``resource.Quantity``: decode and re-encode them."""
    for d in kinds._list(kinds._map(obj.get("spec")).get("devices")):
        for cap in kinds._map(kinds._map(d).get("capacity")).values():
            if isinstance(cap, dict) and "value" in cap:
                try:
                    cap["value"] = kinds._canonical_quantity_json(cap["value"])
                except ValueError as exc:
                    raise kinds._decode_error("ResourceSlice", str(exc), VERSION) from None


class ResourceSliceStrategy(kinds.Strategy):
    """``pkg/registry/resource/resourceslice``: cluster-scoped, generation tracks the spec."""

    def __init__(self) -> None:
        super().__init__(
            "ResourceSlice",
            GROUP,
            "resourceslices",
            False,
            tracks_generation=True,
            extra_fields=("spec.nodeName", "spec.driver"),
        )

    def _extra_fields(self, obj: dict[str, Any]) -> dict[str, str]:
        spec = kinds._map(obj.get("spec"))
        return {
            "spec.nodeName": kinds._str(spec.get("nodeName")),
            "spec.driver": kinds._str(spec.get("driver")),
        }

    def prepare_for_create(self, obj: dict[str, Any]) -> None:
        kinds._check_meta_decoding("ResourceSlice", obj, VERSION)
        obj.setdefault("spec", {})
        _canonicalize_capacities(obj)

    def prepare_for_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        kinds._check_meta_decoding("ResourceSlice", new, VERSION)
        new.setdefault("spec", {})
        _canonicalize_capacities(new)

    def validate_create(self, obj: dict[str, Any]) -> list[FieldError]:
        errs = kinds._validate_object_meta(obj, name_is_dns_subdomain, kube=True)
        return errs + validate_slice_spec(kinds._map(obj.get("spec")), None)

    def validate_update(self, new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
        errs = kinds._validate_object_meta_update(new, old, kube=True)
        return errs + validate_slice_spec(kinds._map(new.get("spec")), kinds._map(old.get("spec")))

    def table(self, objs: list[dict[str, Any]], now: datetime) -> dict[str, Any]:
        columns = [
            kinds._NAME_COL,
            kinds._col("Node", "The name of the node which provides the devices, if any."),
            kinds._col("Driver", "The name of the driver which provides the devices."),
            kinds._col("Pool", "The name of the pool to which the devices belong."),
            kinds._AGE_COL,
        ]
        rows = []
        for o in objs:
            spec = kinds._map(o.get("spec"))
            rows.append(
                kinds._row(
                    o,
                    [
                        kinds._str(kinds._meta(o).get("name")),
                        kinds._str(spec.get("nodeName")),
                        kinds._str(spec.get("driver")),
                        kinds._str(kinds._map(spec.get("pool")).get("name")),
                        kinds._since(kinds._meta(o).get("creationTimestamp"), now),
                    ],
                )
            )
        return kinds._table(columns, rows)


def strategies() -> Iterable[tuple[str, str, bool, tuple[str, ...], kinds.Strategy]]:
    """``(plural, kind, namespaced, subresources, strategy)`` for the registry."""
    return (
        ("deviceclasses", "DeviceClass", False, (), DeviceClassStrategy()),
        ("resourceclaims", "ResourceClaim", True, ("status",), ResourceClaimStrategy()),
        (
            "resourceclaimtemplates",
            "ResourceClaimTemplate",
            True,
            (),
            ResourceClaimTemplateStrategy(),
        ),
        ("resourceslices", "ResourceSlice", False, (), ResourceSliceStrategy()),
    )
