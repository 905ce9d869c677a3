"""Per-kind strategies of the simulated kube-apiserver (Kubernetes v1.32 behaviour).

A :class:`Strategy` is what ``k8s.io/apiserver/pkg/registry/rest`` calls a REST strategy plus
the defaulting and admission a real server runs for the kind: the registry calls
``prepare_for_create`` / ``validate_create`` (and the update / status-update pairs), asks
``graceful_period`` on DELETE, ``field_set`` for field selectors and ``table`` for
``Accept: application/json;as=Table``. Objects are the wire JSON; errors are
:mod:`gpusched.sim.field` errors. Each kind's section names the upstream code it follows
(``pkg/apis/core/{v1,validation}``, ``pkg/registry/*/strategy.go``, the admission plugins,
``pkg/printers/internalversion``). Cost: each hook is linear in the size of the object.

Left out (differences a client could observe):

* ServiceAccount admission only sets ``serviceAccountName: default`` (no existence check, no
  projected token volume). Priority admission resolves the PriorityClass objects of the
  registry (``gpusched.sim.scheduling``); a pod strategy used on its own knows only the two
  system classes.
* Pod validation skips affinity, topology spread, security contexts, probes, volume sources,
  DNS config, host aliases and pod-level resources; the go-cmp diff of "pod updates may not
  change fields other than ..." is approximated by the list of changed JSON paths.
* Bad values that are Go structs upstream (a toleration, a taint) print as their JSON, and
  errors that Go reports in map order come in the object's key order.
* JSON decoding is imitated only for the fields normalised here (quantities, label and
  annotation maps, the times rewritten); zero-valued Go struct fields are filled in for Events
  and Node status only.
"""

from __future__ import annotations

import copy
import ipaddress
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from typing import Any, Final

from gpusched.sim import errors, field
from gpusched.sim.apimachinery import (
    go_sprint,
    go_string_slice,
    is_dns1123_label,
    is_dns1123_subdomain,
    is_qualified_name,
    is_valid_label_value,
    max_len_error,
    name_is_dns_label,
    name_is_dns_subdomain,
)
from gpusched.sim.field import FieldError

__all__ = [
    "CRDStrategy",
    "CustomResourceStrategy",
    "EventStrategy",
    "LeaseStrategy",
    "NamespaceStrategy",
    "NodeStrategy",
    "PodStrategy",
    "Strategy",
    "bind_pod",
    "compute_pod_qos",
    "event_from_events_v1",
    "event_to_events_v1",
    "format_quantity",
    "generic_strategy",
    "human_duration",
    "parse_quantity",
    "strategy_for",
]

JSON = dict[str, Any]

# =============================================================================================
# Small helpers
# =============================================================================================


def _map(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def _str(v: Any) -> str:
    return v if isinstance(v, str) else ""


def _meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    return _map(obj.get("metadata"))


def _ensure(obj: dict[str, Any], key: str) -> dict[str, Any]:
    """``obj[key]`` as a dict, creating (or replacing a non-dict) in place."""
    v = obj.get(key)
    if not isinstance(v, dict):
        v = {}
        obj[key] = v
    return v


def _decode_error(kind: str, err: str, version: str = "v1") -> errors.APIError:
    """The 400 the handler's ``transformDecodeError`` makes of a JSON decode failure."""
    return errors.bad_request(f'{kind} in version "{version}" cannot be handled as a {kind}: {err}')


# =============================================================================================
# Validation message texts (k8s.io/apimachinery/pkg/util/validation)
# =============================================================================================

_PORT_NAME_CHARSET_RE: Final = re.compile("[-a-z0-9]+")
_PORT_NAME_ONE_LETTER_RE: Final = re.compile("[a-z]")


def _full(rx: re.Pattern[str], s: str) -> bool:
    # Go's "^...$" does not match across a trailing newline the way Python's "$" does.
    return rx.fullmatch(s) is not None


def _is_valid_port_name(port: str) -> list[str]:
    errs = []
    if len(port) > 15:
        errs.append(max_len_error(15))
    if not _full(_PORT_NAME_CHARSET_RE, port):
        errs.append("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)")
    if not _PORT_NAME_ONE_LETTER_RE.search(port):
        errs.append("must contain at least one letter (a-z)")
    if "--" in port:
        errs.append("must not contain consecutive hyphens")
    if port and (port[0] == "-" or port[-1] == "-"):
        errs.append("must not begin or end with a hyphen")
    return errs


def _is_valid_port_num(port: int) -> list[str]:
    if 1 <= port <= 65535:
        return []
    return ["must be between 1 and 65535, inclusive"]


NameFn = Callable[[str, bool], list[str]]


def _validate_dns1123_label(value: str, path: str) -> list[FieldError]:
    return [field.invalid(path, value, m) for m in is_dns1123_label(value)]


def _validate_qualified_name(value: str, path: str) -> list[FieldError]:
    return [field.invalid(path, value, m) for m in is_qualified_name(value)]


# =============================================================================================
# ObjectMeta validation (apimachinery/pkg/api/validation/objectmeta.go + core wrappers)
# =============================================================================================

_TOTAL_ANNOTATION_SIZE_LIMIT: Final = 256 * 1024
_STANDARD_FINALIZERS: Final = frozenset({"kubernetes", "orphan", "foregroundDeletion"})


def _validate_labels(labels: Any, path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    for k, v in _map(labels).items():
        errs.extend(field.invalid(path, k, m) for m in is_qualified_name(k))
        errs.extend(field.invalid(path, v, m) for m in is_valid_label_value(_str(v)))
    return errs


def _validate_annotations(annotations: Any, path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    ann = _map(annotations)
    for k in ann:
        errs.extend(field.invalid(path, k, m) for m in is_qualified_name(k.lower()))
    size = sum(len(k) + len(_str(v)) for k, v in ann.items())
    if size > _TOTAL_ANNOTATION_SIZE_LIMIT:
        errs.append(field.too_long(path, _TOTAL_ANNOTATION_SIZE_LIMIT))
    return errs


def _split_api_version(api_version: str) -> tuple[str, str]:
    if not api_version:
        return "", ""
    parts = api_version.split("/")
    if len(parts) == 1:
        return "", parts[0]
    if len(parts) == 2:
        return parts[0], parts[1]
    return "", ""


def _validate_owner_references(refs: Any, path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    first_controller = ""
    for ref in _list(refs):
        r = _map(ref)
        _, version = _split_api_version(_str(r.get("apiVersion")))
        if not version:
            errs.append(
                field.invalid(
                    f"{path}.apiVersion", _str(r.get("apiVersion")), "version must not be empty"
                )
            )
        if not _str(r.get("kind")):
            errs.append(field.invalid(f"{path}.kind", _str(r.get("kind")), "must not be empty"))
        if not _str(r.get("name")):
            errs.append(field.invalid(f"{path}.name", _str(r.get("name")), "must not be empty"))
        if not _str(r.get("uid")):
            errs.append(field.invalid(f"{path}.uid", _str(r.get("uid")), "must not be empty"))
        if r.get("controller") is True:
            current = f"{_str(r.get('kind'))}/{_str(r.get('name'))}"
            if first_controller:
                errs.append(
                    field.invalid(
                        path,
                        field.struct(refs),
                        'Only one reference can have Controller set to true. Found "true" in '
                        f"references for {first_controller} and {current}",
                    )
                )
            else:
                first_controller = current
    return errs


def _validate_finalizers(finalizers: Any, path: str, kube: bool) -> list[FieldError]:
    errs: list[FieldError] = []
    items = [_str(f) for f in _list(finalizers)]
    for f in items:
        errs.extend(field.invalid(path, f, m) for m in is_qualified_name(f))
    if "orphan" in items and "foregroundDeletion" in items:
        errs.append(
            field.invalid(
                path,
                field.struct(items),
                "finalizer orphan and foregroundDeletion cannot be both set",
            )
        )
    if kube:
        for i, f in enumerate(items):
            if "/" not in f and f not in _STANDARD_FINALIZERS:
                errs.append(
                    field.invalid(
                        f"{path}[{i}]",
                        f,
                        "name is neither a standard finalizer name nor is it fully qualified",
                    )
                )
    return errs


def _validate_object_meta(
    obj: Mapping[str, Any], name_fn: NameFn | None, kube: bool
) -> list[FieldError]:
    """``ValidateObjectMeta`` (name/generateName, labels, annotations, owners, finalizers).

    The namespace rules are the registry's business. ``kube`` adds core's
    ``validateKubeFinalizerName``; ``name_fn=None`` skips the name checks (done elsewhere).
    """
    meta = _meta(obj)
    errs: list[FieldError] = []
    if name_fn is not None:
        generate_name = _str(meta.get("generateName"))
        if generate_name:
            errs.extend(
                field.invalid("metadata.generateName", generate_name, m)
                for m in name_fn(generate_name, True)
            )
        name = _str(meta.get("name"))
        if not name:
            errs.append(field.required("metadata.name", "name or generateName is required"))
        else:
            errs.extend(field.invalid("metadata.name", name, m) for m in name_fn(name, False))
    errs.extend(_validate_labels(meta.get("labels"), "metadata.labels"))
    errs.extend(_validate_annotations(meta.get("annotations"), "metadata.annotations"))
    errs.extend(_validate_owner_references(meta.get("ownerReferences"), "metadata.ownerReferences"))
    errs.extend(_validate_finalizers(meta.get("finalizers"), "metadata.finalizers", kube))
    return errs


def _validate_object_meta_update(
    new: Mapping[str, Any], old: Mapping[str, Any], kube: bool
) -> list[FieldError]:
    """``ValidateObjectMetaUpdate`` minus the identity fields the registry already restores."""
    meta, old_meta = _meta(new), _meta(old)
    errs: list[FieldError] = []
    if old_meta.get("deletionTimestamp"):
        old_f = {_str(f) for f in _list(old_meta.get("finalizers"))}
        extra = sorted({_str(f) for f in _list(meta.get("finalizers"))} - old_f)
        if extra:
            errs.append(
                field.forbidden(
                    "metadata.finalizers",
                    "no new finalizers can be added if the object is being deleted, found new "
                    f"finalizers {go_string_slice(extra)}",
                )
            )
    if int(meta.get("generation") or 0) < int(old_meta.get("generation") or 0):
        errs.append(
            field.invalid(
                "metadata.generation", int(meta.get("generation") or 0), "must not be decremented"
            )
        )
    errs.extend(_validate_labels(meta.get("labels"), "metadata.labels"))
    errs.extend(_validate_annotations(meta.get("annotations"), "metadata.annotations"))
    errs.extend(_validate_owner_references(meta.get("ownerReferences"), "metadata.ownerReferences"))
    errs.extend(_validate_finalizers(meta.get("finalizers"), "metadata.finalizers", kube))
    return errs


def _check_meta_decoding(kind: str, obj: Mapping[str, Any], version: str = "v1") -> None:
    """Label and annotation maps must be ``map[string]string`` (else the decoder fails)."""
    meta = _meta(obj)
    for fld in ("labels", "annotations"):
        value = meta.get(fld)
        if value is None:
            continue
        if not isinstance(value, dict):
            raise _decode_error(
                kind,
                f"json: cannot unmarshal {_json_type(value)} into Go struct field "
                f"ObjectMeta.metadata.{fld} of type map[string]string",
                version,
            )
        for key, v in list(value.items()):
            if v is None:
                value[key] = ""  # a JSON null decodes to the zero string
                continue
            if not isinstance(v, str):
                raise _decode_error(
                    kind,
                    f"json: cannot unmarshal {_json_type(v)} into Go struct field "
                    f"ObjectMeta.metadata.{fld} of type string",
                    version,
                )


def _json_type(v: Any) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int | float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


from gpusched.quantity import (  # noqa: E402 - kept beside the code that uses it
    _ERR_FORMAT_WRONG,
    _parse,
    format_quantity,
    parse_quantity,
)


def _canonical_quantity_json(raw: Any) -> str:
    """What a quantity JSON value decodes and re-encodes to; ValueError when it cannot decode."""
    if raw is None:
        return "0"
    if isinstance(raw, bool | list | dict):
        raise ValueError(_ERR_FORMAT_WRONG)
    text = repr(raw) if isinstance(raw, float) else str(raw)
    return str(_parse(text.strip()))


def _canonicalize_resource_list(kind: str, rl: Any) -> None:
    if not isinstance(rl, dict):
        return
    for k, v in list(rl.items()):
        try:
            rl[k] = _canonical_quantity_json(v)
        except ValueError as exc:
            raise _decode_error(kind, str(exc)) from None


# =============================================================================================
# Times
# =============================================================================================

_RFC3339: Final = "2006-01-02T15:04:05Z07:00"
_RFC3339_MICRO: Final = "2006-01-02T15:04:05.000000Z07:00"


def _format_time(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _format_micro_time(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class _TimeParseError(ValueError):
    pass


def _parse_go_time(value: str, micro: bool) -> datetime:
    """``time.Parse`` with RFC3339 (``micro``: metav1.MicroTime's 6-digit layout)."""
    layout = _RFC3339_MICRO if micro else _RFC3339
    rest = value

    def bad(elem_value: str, elem_layout: str) -> _TimeParseError:
        return _TimeParseError(
            f'parsing time "{value}" as "{layout}": cannot parse "{elem_value}" as "{elem_layout}"'
        )

    def digits(n: int, elem: str) -> int:
        nonlocal rest
        if len(rest) < n or not rest[:n].isdigit() or not rest[:n].isascii():
            raise bad(rest, elem)
        out = int(rest[:n])
        rest = rest[n:]
        return out

    def lit(ch: str, elem_tail: str) -> None:
        nonlocal rest
        if not rest.startswith(ch):
            raise bad(rest, elem_tail)
        rest = rest[len(ch) :]

    year = digits(4, "2006")
    lit("-", "-01-02T15:04:05" + layout[19:])
    month = digits(2, "01")
    lit("-", "-02T15:04:05" + layout[19:])
    day = digits(2, "02")
    lit("T", "T15:04:05" + layout[19:])
    hour = digits(2, "15") if len(rest) >= 2 and rest[:2].isdigit() else digits(1, "15")
    lit(":", ":04:05" + layout[19:])
    minute = digits(2, "04")
    lit(":", ":05" + layout[19:])
    second = digits(2, "05")
    micros = 0
    if micro:
        if len(rest) < 7 or rest[0] != "." or not rest[1:7].isdigit():
            raise bad(rest, ".000000")
        micros = int(rest[1:7])
        rest = rest[7:]
    elif rest.startswith(".") and len(rest) > 1 and rest[1].isdigit():
        i = 1
        while i < len(rest) and rest[i].isdigit():
            i += 1
        frac = rest[1:i]
        micros = int((frac + "000000")[:6])
        rest = rest[i:]
    if rest.startswith("Z"):
        offset = timedelta(0)
        rest = rest[1:]
    elif (
        len(rest) >= 6
        and rest[0] in "+-"
        and rest[1:3].isdigit()
        and rest[3] == ":"
        and rest[4:6].isdigit()
    ):
        offset = timedelta(hours=int(rest[1:3]), minutes=int(rest[4:6]))
        if rest[0] == "-":
            offset = -offset
        rest = rest[6:]
    else:
        raise bad(rest, "Z07:00")
    if rest:
        raise _TimeParseError(f'parsing time "{value}": extra text: "{rest}"')
    for name, ok in (
        ("month", 1 <= month <= 12),
        ("hour", hour < 24),
        ("minute", minute < 60),
        ("second", second < 60),
    ):
        if not ok:
            raise _TimeParseError(f'parsing time "{value}": {name} out of range')
    try:
        naive = datetime(year, month, day, hour, minute, second, micros)
    except ValueError:
        raise _TimeParseError(f'parsing time "{value}": day out of range') from None
    return (naive - offset).replace(tzinfo=UTC)


def _normalize_time_field(kind: str, holder: Any, key: str, micro: bool) -> None:
    """Re-encode a ``metav1.Time`` / ``MicroTime`` as the server would (400 if undecodable)."""
    if not isinstance(holder, dict) or key not in holder:
        return
    raw = holder[key]
    if raw is None:
        return
    if not isinstance(raw, str):
        raise _decode_error(
            kind, f"json: cannot unmarshal {_json_type(raw)} into Go value of type string"
        )
    try:
        t = _parse_go_time(raw, micro)
    except _TimeParseError as exc:
        raise _decode_error(kind, str(exc)) from None
    holder[key] = _format_micro_time(t) if micro else _format_time(t)


def _parse_time_lenient(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return _parse_go_time(value, False)
    except _TimeParseError:
        return None


def human_duration(d: timedelta) -> str:
    """``duration.HumanDuration`` (``kubectl``'s AGE column)."""
    total = d.total_seconds()
    seconds = int(total)
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    if seconds < 60 * 2:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        s = seconds % 60
        return f"{minutes}m" if s == 0 else f"{minutes}m{s}s"
    if minutes < 60 * 3:
        return f"{minutes}m"
    hours = seconds // 3600
    if hours < 8:
        m = minutes % 60
        return f"{hours}h" if m == 0 else f"{hours}h{m}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        h = hours % 24
        return f"{hours // 24}d" if h == 0 else f"{hours // 24}d{h}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        dy = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if dy == 0 else f"{hours // 24 // 365}y{dy}d"
    return f"{hours // 24 // 365}y"


def _since(value: Any, now: datetime) -> str:
    """``translateTimestampSince``."""
    t = _parse_time_lenient(value)
    if t is None:
        return "<unknown>"
    return human_duration(now - t)


# =============================================================================================
# Tables (pkg/printers/internalversion/printers.go, apiserver pkg/registry/rest/table.go,
# apiextensions-apiserver's tableconvertor, apimachinery pkg/util/duration)
# =============================================================================================

_DESC_NAME: Final = (
    "Name must be unique within a namespace. Is required when creating resources, although some "
    "resources may allow a client to request the generation of an appropriate name "
    "automatically. Name is primarily intended for creation idempotence and configuration "
    "definition. Cannot be updated. More info: "
    "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"
)
_DESC_CREATED: Final = (
    "CreationTimestamp is a timestamp representing the server time when this object was "
    "created. It is not guaranteed to be set in happens-before order across separate "
    "operations. Clients may not set this value. It is represented in RFC3339 form and is in "
    "UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
)


def _col(
    name: str, description: str, *, type_: str = "string", fmt: str = "", priority: int = 0
) -> JSON:
    return {
        "name": name,
        "type": type_,
        "format": fmt,
        "description": description,
        "priority": priority,
    }


_NAME_COL: Final = _col("Name", _DESC_NAME, fmt="name")
_AGE_COL: Final = _col("Age", _DESC_CREATED)


def _partial_metadata(obj: Mapping[str, Any]) -> JSON:
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": copy.deepcopy(_meta(obj)),
    }


def _row(obj: Mapping[str, Any], cells: list[Any], conditions: list[JSON] | None = None) -> JSON:
    row: JSON = {"cells": cells}
    if conditions:
        row["conditions"] = conditions
    row["object"] = _partial_metadata(obj)
    return row


def _table(columns: list[JSON], rows: list[JSON]) -> JSON:
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {},
        "columnDefinitions": copy.deepcopy(columns),
        "rows": rows,
    }


def _name_cell_age_table(
    column: JSON, objs: list[dict[str, Any]], now: datetime, cell: Callable[[JSON], Any]
) -> JSON:
    """The printers' Name, one string column, Age table."""
    rows = [
        _row(
            o,
            [
                _str(_meta(o).get("name")),
                _str(cell(o)),
                _since(_meta(o).get("creationTimestamp"), now),
            ],
        )
        for o in objs
    ]
    return _table([_NAME_COL, column, _AGE_COL], rows)


_JSONPATH_STEP_RE: Final = re.compile(r"\.([^.\[\]]+)|\[(\*|-?[0-9]+)\]|\[['\"]([^'\"]+)['\"]\]")


def _jsonpath_first(obj: Any, path: str) -> tuple[bool, Any]:
    """First result of a simple JSONPath (``.a.b``, ``.a[0]``, ``.a[*].b``, ``.a['x.y']``).

    Returns ``(found, value)``; a missing key, an index out of range or an unsupported
    expression yields ``(False, None)`` as the CRD table convertor's ``AllowMissingKeys`` does.
    """
    path = path.strip()
    if path.startswith("{") and path.endswith("}"):
        path = path[1:-1]
    if path.startswith("$"):
        path = path[1:]
    steps = []
    pos = 0
    while pos < len(path):
        m = _JSONPATH_STEP_RE.match(path, pos)
        if m is None:
            return False, None
        steps.append(m)
        pos = m.end()
    current: list[Any] = [obj]
    for m in steps:
        nxt: list[Any] = []
        key = m.group(1) if m.group(1) is not None else m.group(3)
        for item in current:
            if key is not None:
                if key == "*":
                    if isinstance(item, dict):
                        nxt.extend(item.values())
                    elif isinstance(item, list):
                        nxt.extend(item)
                elif isinstance(item, dict) and key in item:
                    nxt.append(item[key])
            else:
                idx = m.group(2)
                if not isinstance(item, list):
                    continue
                if idx == "*":
                    nxt.extend(item)
                else:
                    i = int(idx)
                    if i < 0:
                        i += len(item)
                    if not 0 <= i < len(item):
                        return False, None
                    nxt.append(item[i])
        current = nxt
        if not current:
            return False, None
    return True, current[0]


def _cell_for_json_value(type_: str, value: Any, now: datetime) -> Any:
    """``cellForJSONValue`` of the CRD table convertor."""
    if value is None:
        return None
    if type_ == "integer":
        if isinstance(value, bool):
            return None
        if isinstance(value, int):
            return value
        if isinstance(value, float):
            return int(value) if math.isfinite(value) else None
    elif type_ == "number":
        if isinstance(value, bool):
            return None
        if isinstance(value, int | float):
            return float(value)
    elif type_ == "boolean":
        if isinstance(value, bool):
            return value
    elif type_ == "string":
        if isinstance(value, str):
            return value
    elif type_ == "date" and isinstance(value, str):
        t = _parse_time_lenient(value)
        if t is None:
            return "<invalid>"
        return human_duration(now - t)
    return None


# =============================================================================================
# Strategy base
# =============================================================================================


class Strategy:
    """Generic registry behaviour for a kind (what ``strategy_for`` returns for unknown kinds)."""

    # ``rest.GarbageCollectionDeleteStrategy.DefaultGarbageCollectionPolicy``: what a DELETE
    # without a propagationPolicy does to the object's dependents ("DeleteDependents" is
    # background deletion; "OrphanDependents" adds the ``orphan`` finalizer).
    gc_policy: str = "DeleteDependents"

    def __init__(
        self,
        kind: str,
        group: str = "",
        resource: str | None = None,
        namespaced: bool = True,
        *,
        has_status: bool = False,
        tracks_generation: bool = False,
        return_deleted_object: bool = False,
        extra_fields: Iterable[str] = (),
    ) -> None:
        self.kind = kind
        self.group = group
        self.resource = resource or (kind.lower() + "s")
        self.namespaced = namespaced
        self.has_status = has_status
        self.tracks_generation = tracks_generation
        self.return_deleted_object = return_deleted_object
        base = {"metadata.name"} | ({"metadata.namespace"} if namespaced else set())
        self.supported_fields: frozenset[str] = frozenset(base | set(extra_fields))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.group or 'core'}/{self.kind})"

    # ------------------------------------------------------------------ field selectors

    def field_set(self, obj: dict[str, Any]) -> dict[str, str]:
        """``generic.ObjectMetaFieldsSet`` plus the kind's selectable fields."""
        meta = _meta(obj)
        out = {"metadata.name": _str(meta.get("name"))}
        if self.namespaced:
            out["metadata.namespace"] = _str(meta.get("namespace"))
        out.update(self._extra_fields(obj))
        return out

    def _extra_fields(self, obj: dict[str, Any]) -> dict[str, str]:
        return {}

    # ------------------------------------------------------------------ create / update

    def name_fn(self, name: str, prefix: bool) -> list[str]:
        return name_is_dns_subdomain(name, prefix)

    def prepare_for_create(self, obj: dict[str, Any]) -> None:
        if self.has_status:
            obj.pop("status", None)

    def prepare_for_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        if self.has_status:
            _keep(new, old, "status")

    def prepare_for_status_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        _keep(new, old, "spec")

    def validate_create(self, obj: dict[str, Any]) -> list[FieldError]:
        return _validate_object_meta(obj, self.name_fn, kube=False)

    def validate_update(self, new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
        return _validate_object_meta_update(new, old, kube=False)

    def validate_status_update(self, new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
        return _validate_object_meta_update(new, old, kube=False)

    # ------------------------------------------------------------------ delete

    def graceful_period(self, obj: dict[str, Any], requested: int | None) -> int:
        return 0

    # ------------------------------------------------------------------ tables

    def table(self, objs: list[dict[str, Any]], now: datetime) -> dict[str, Any]:
        """``rest.NewDefaultTableConvertor``: Name and Created At."""
        columns = [_NAME_COL, _col("Created At", _DESC_CREATED, type_="date")]
        rows = [
            _row(
                o,
                [_str(_meta(o).get("name")), _created_at(o)],
            )
            for o in objs
        ]
        return _table(columns, rows)


def _created_at(obj: Mapping[str, Any]) -> str:
    t = _parse_time_lenient(_meta(obj).get("creationTimestamp"))
    if t is None:
        return "0001-01-01T00:00:00Z"
    return _format_time(t)


def _keep(new: dict[str, Any], old: Mapping[str, Any], key: str) -> None:
    """``new.<key> = old.<key>`` (absent stays absent)."""
    if key in old:
        new[key] = copy.deepcopy(old[key])
    else:
        new.pop(key, None)


# =============================================================================================
# Pods (pkg/apis/core/v1/{defaults,conversion}.go, core/validation ValidatePod*,
# pkg/registry/core/pod/strategy.go, admission DefaultTolerationSeconds / Priority /
# ServiceAccount, pkg/apis/core/helper/qos, apimachinery pkg/api/resource)
# =============================================================================================

_SYSTEM_PRIORITY_CLASSES: Final = {
    "system-node-critical": 2000001000,
    "system-cluster-critical": 2000000000,
}
_NOT_READY_TOLERATION: Final = {
    "key": "node.kubernetes.io/not-ready",
    "operator": "Exists",
    "effect": "NoExecute",
    "tolerationSeconds": 300,
}
_UNREACHABLE_TOLERATION: Final = {
    "key": "node.kubernetes.io/unreachable",
    "operator": "Exists",
    "effect": "NoExecute",
    "tolerationSeconds": 300,
}
_UPDATABLE_POD_SPEC_FIELDS: Final = (
    "`spec.containers[*].image`",
    "`spec.initContainers[*].image`",
    "`spec.activeDeadlineSeconds`",
    "`spec.tolerations` (only additions to existing tolerations)",
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
)
_STANDARD_CONTAINER_RESOURCES: Final = frozenset({"cpu", "memory", "ephemeral-storage"})
_STANDARD_RESOURCES: Final = frozenset(
    {
        "cpu",
        "memory",
        "ephemeral-storage",
        "requests.cpu",
        "requests.memory",
        "requests.ephemeral-storage",
        "limits.cpu",
        "limits.memory",
        "limits.ephemeral-storage",
        "pods",
        "services",
        "replicationcontrollers",
        "resourcequotas",
        "secrets",
        "configmaps",
        "persistentvolumeclaims",
        "requests.storage",
        "services.nodeports",
        "services.loadbalancers",
    }
)
_INTEGER_RESOURCES: Final = frozenset(
    {
        "pods",
        "services",
        "replicationcontrollers",
        "resourcequotas",
        "secrets",
        "configmaps",
        "persistentvolumeclaims",
        "services.nodeports",
        "services.loadbalancers",
    }
)
_POD_FIELDS: Final = (
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.podIPs",
    "status.nominatedNodeName",
    "spec.host",
)


def _is_native_resource(name: str) -> bool:
    return "/" not in name or "kubernetes.io/" in name


def _is_hugepage_resource(name: str) -> bool:
    return name.startswith("hugepages-")


def _is_extended_resource(name: str) -> bool:
    if _is_native_resource(name) or name.startswith("requests."):
        return False
    return not is_qualified_name("requests." + name)


def _is_overcommit_allowed(name: str) -> bool:
    return _is_native_resource(name) and not _is_hugepage_resource(name)


def _is_integer_resource(name: str) -> bool:
    return name in _INTEGER_RESOURCES or _is_extended_resource(name)


_IMAGE_PATH_COMPONENT_RE: Final = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_IMAGE_TAG_RE: Final = re.compile(r"[\w][\w.-]{0,127}")
_IMAGE_DIGEST_RE: Final = re.compile(
    r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
)


def _image_tag(image: str) -> str:
    """The tag ``parsers.ParseImageName`` reports: "latest" when there is neither tag nor
    digest, "" when the reference does not parse (docker/distribution grammar, simplified)."""
    name, at, digest = image.partition("@")
    i = name.find("/")
    first = name[:i]
    if i == -1 or (
        not any(ch in first for ch in ".:") and first != "localhost" and first.lower() == first
    ):
        remainder = name
    else:
        remainder = name[i + 1 :]
    tag = ""
    colon = remainder.rfind(":")
    has_tag = colon > remainder.rfind("/")
    if has_tag:
        tag = remainder[colon + 1 :]
        remainder = remainder[:colon]
    if not remainder or not all(_full(_IMAGE_PATH_COMPONENT_RE, c) for c in remainder.split("/")):
        return ""
    if has_tag and not _full(_IMAGE_TAG_RE, tag):
        return ""
    if at:
        return tag if _full(_IMAGE_DIGEST_RE, digest) else ""
    return tag or "latest"


def _default_probe(probe: Any) -> None:
    if not isinstance(probe, dict):
        return
    for key, default in (
        ("timeoutSeconds", 1),
        ("periodSeconds", 10),
        ("successThreshold", 1),
        ("failureThreshold", 3),
    ):
        if not probe.get(key):
            probe[key] = default
    _default_handler(probe)


def _default_handler(handler: Any) -> None:
    if not isinstance(handler, dict):
        return
    http_get = handler.get("httpGet")
    if isinstance(http_get, dict):
        if not http_get.get("path"):
            http_get["path"] = "/"
        if not http_get.get("scheme"):
            http_get["scheme"] = "HTTP"
    grpc = handler.get("grpc")
    if isinstance(grpc, dict) and grpc.get("service") is None:
        grpc["service"] = ""


def _default_field_ref(holder: Any) -> None:
    if isinstance(holder, dict):
        ref = holder.get("fieldRef")
        if isinstance(ref, dict) and not ref.get("apiVersion"):
            ref["apiVersion"] = "v1"


def _default_container(c: dict[str, Any], host_network: bool) -> None:
    """``SetDefaults_Container`` and friends, plus the Pod-level request-from-limit copy."""
    if not c.get("imagePullPolicy"):
        c["imagePullPolicy"] = (
            "Always" if _image_tag(_str(c.get("image"))) == "latest" else "IfNotPresent"
        )
    if not c.get("terminationMessagePath"):
        c["terminationMessagePath"] = "/dev/termination-log"
    if not c.get("terminationMessagePolicy"):
        c["terminationMessagePolicy"] = "File"
    resources = _ensure(c, "resources")
    limits = resources.get("limits")
    if isinstance(limits, dict) and limits:
        requests = resources.get("requests")
        if not isinstance(requests, dict):
            requests = {}
        for name, q in limits.items():
            if name not in requests:
                requests[name] = copy.deepcopy(q)
        resources["requests"] = requests
    for port in _list(c.get("ports")):
        if isinstance(port, dict):
            if not port.get("protocol"):
                port["protocol"] = "TCP"
            if host_network and not port.get("hostPort") and port.get("containerPort"):
                port["hostPort"] = port["containerPort"]
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        _default_probe(c.get(probe))
    lifecycle = c.get("lifecycle")
    if isinstance(lifecycle, dict):
        _default_handler(lifecycle.get("postStart"))
        _default_handler(lifecycle.get("preStop"))
    for env in _list(c.get("env")):
        if isinstance(env, dict):
            _default_field_ref(env.get("valueFrom"))


_VOLUME_SOURCES: Final = (
    "hostPath", "emptyDir", "gcePersistentDisk", "awsElasticBlockStore", "gitRepo", "secret",
    "nfs", "iscsi", "glusterfs", "persistentVolumeClaim", "rbd", "flexVolume", "cinder",
    "cephfs", "flocker", "downwardAPI", "fc", "azureFile", "configMap", "vsphereVolume",
    "quobyte", "azureDisk", "photonPersistentDisk", "projected", "portworxVolume", "scaleIO",
    "storageos", "csi", "ephemeral", "image",
)  # fmt: skip


def _default_volume(v: dict[str, Any]) -> None:
    if not any(v.get(src) is not None for src in _VOLUME_SOURCES):
        v["emptyDir"] = {}
    for src in ("secret", "configMap", "downwardAPI", "projected"):
        s = v.get(src)
        if isinstance(s, dict) and s.get("defaultMode") is None:
            s["defaultMode"] = 420
    host_path = v.get("hostPath")
    if isinstance(host_path, dict) and host_path.get("type") is None:
        host_path["type"] = ""
    downward = v.get("downwardAPI")
    if isinstance(downward, dict):
        for item in _list(downward.get("items")):
            _default_field_ref(item)
    projected = v.get("projected")
    if isinstance(projected, dict):
        for source in _list(projected.get("sources")):
            if not isinstance(source, dict):
                continue
            token = source.get("serviceAccountToken")
            if isinstance(token, dict) and token.get("expirationSeconds") is None:
                token["expirationSeconds"] = 3600
            d = source.get("downwardAPI")
            if isinstance(d, dict):
                for item in _list(d.get("items")):
                    _default_field_ref(item)


def _default_pod(pod: dict[str, Any]) -> None:
    """``SetDefaults_Pod`` / ``SetDefaults_PodSpec`` and nested defaults (decode time)."""
    spec = _ensure(pod, "spec")
    host_network = spec.get("hostNetwork") is True
    if not spec.get("dnsPolicy"):
        spec["dnsPolicy"] = "ClusterFirst"
    if not spec.get("restartPolicy"):
        spec["restartPolicy"] = "Always"
    if not isinstance(spec.get("securityContext"), dict):
        spec["securityContext"] = {}
    if spec.get("terminationGracePeriodSeconds") is None:
        spec["terminationGracePeriodSeconds"] = 30
    if not spec.get("schedulerName"):
        spec["schedulerName"] = "default-scheduler"
    if spec.get("enableServiceLinks") is None:
        spec["enableServiceLinks"] = True
    for key in ("initContainers", "containers"):
        for c in _list(spec.get(key)):
            if isinstance(c, dict):
                _default_container(c, host_network)
    for v in _list(spec.get("volumes")):
        if isinstance(v, dict):
            _default_volume(v)
    # serviceAccount is the deprecated alias of serviceAccountName (v1 conversion).
    sa_name = _str(spec.get("serviceAccountName")) or _str(spec.get("serviceAccount"))
    if sa_name:
        spec["serviceAccountName"] = sa_name
        spec["serviceAccount"] = sa_name
    else:
        spec.pop("serviceAccountName", None)
        spec.pop("serviceAccount", None)


def _canonicalize_pod_quantities(pod: dict[str, Any]) -> None:
    spec = _map(pod.get("spec"))
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for c in _list(spec.get(key)):
            resources = _map(_map(c).get("resources"))
            _canonicalize_resource_list("Pod", resources.get("limits"))
            _canonicalize_resource_list("Pod", resources.get("requests"))
    _canonicalize_resource_list("Pod", spec.get("overhead"))
    pod_resources = _map(spec.get("resources"))
    _canonicalize_resource_list("Pod", pod_resources.get("limits"))
    _canonicalize_resource_list("Pod", pod_resources.get("requests"))
    for v in _list(spec.get("volumes")):
        empty_dir = _map(_map(v).get("emptyDir"))
        if "sizeLimit" in empty_dir and empty_dir["sizeLimit"] is not None:
            try:
                empty_dir["sizeLimit"] = _canonical_quantity_json(empty_dir["sizeLimit"])
            except ValueError as exc:
                raise _decode_error("Pod", str(exc)) from None


def _fold_ips(status: dict[str, Any], single: str, plural: str) -> None:
    """v1 ``podIP``/``podIPs`` (``hostIP``/``hostIPs``) folding: the singular field wins."""
    ip = _str(status.get(single))
    ips = _list(status.get(plural))
    if ip and (not ips or _str(_map(ips[0]).get("ip")) != ip):
        status[plural] = [{"ip": ip}]
        ips = status[plural]
    if ips:
        status[single] = _str(_map(ips[0]).get("ip"))
    elif plural in status and not ips:
        status.pop(plural, None)


def _normalize_pod_status(status: dict[str, Any]) -> None:
    _fold_ips(status, "podIP", "podIPs")
    _fold_ips(status, "hostIP", "hostIPs")
    for cond in _list(status.get("conditions")):
        if isinstance(cond, dict):
            for key in ("lastProbeTime", "lastTransitionTime"):
                _normalize_time_field("Pod", cond, key, micro=False)
            cond.setdefault("lastProbeTime", None)
            cond.setdefault("lastTransitionTime", None)
    _normalize_time_field("Pod", status, "startTime", micro=False)


def _tolerates(tolerations: Iterable[Any], key: str) -> bool:
    for t in tolerations:
        t = _map(t)
        if _str(t.get("key")) in (key, "") and _str(t.get("effect")) in ("NoExecute", ""):
            return True
    return False


def _admit_default_toleration_seconds(pod: dict[str, Any]) -> None:
    spec = _ensure(pod, "spec")
    tolerations = _list(spec.get("tolerations"))
    add = []
    if not _tolerates(tolerations, "node.kubernetes.io/not-ready"):
        add.append(dict(_NOT_READY_TOLERATION))
    if not _tolerates(tolerations, "node.kubernetes.io/unreachable"):
        add.append(dict(_UNREACHABLE_TOLERATION))
    if add:
        spec["tolerations"] = [*tolerations, *add]


class PriorityResolver:
    """What the ``Priority`` admission plugin reads: PriorityClasses by name, and the global
    default. This one knows only the two system classes (a pod strategy used on its own);
    the registry gives pods ``scheduling.StoredPriorityClasses``, the class objects stored."""

    def lookup(self, name: str) -> tuple[int, str | None] | None:
        """``(value, preemptionPolicy)`` of the class ``name``, or None if there is none."""
        if name in _SYSTEM_PRIORITY_CLASSES:
            return _SYSTEM_PRIORITY_CLASSES[name], "PreemptLowerPriority"
        return None

    def global_default(self) -> tuple[str, int, str | None] | None:
        """``(name, value, preemptionPolicy)`` of the globalDefault class, if any."""
        return None


def _admit_priority(pod: dict[str, Any], classes: PriorityResolver) -> None:
    """``Priority`` admission on Create (plugin/pkg/admission/priority ``admitPod``)."""
    spec = _ensure(pod, "spec")
    meta = _meta(pod)
    # extractResourceName: admission runs before a generateName is expanded.
    name = _str(meta.get("generateName")) or _str(meta.get("name")) or "Unknown"
    class_name = _str(spec.get("priorityClassName"))
    policy: str | None
    if not class_name:
        default = classes.global_default()
        if default is None:
            priority, policy = 0, "PreemptLowerPriority"
        else:
            class_name, priority, policy = default
            spec["priorityClassName"] = class_name
    else:
        found = classes.lookup(class_name)
        if found is None:
            raise errors.forbidden(
                f'pods "{name}" is forbidden: no PriorityClass with name {class_name} was found',
                "",
                "pods",
                name,
            )
        priority, policy = found
    given = spec.get("priority")
    if isinstance(given, int) and not isinstance(given, bool) and given != priority:
        raise errors.forbidden(
            f'pods "{name}" is forbidden: the integer value of priority ({given}) must not be '
            f"provided in pod spec; priority admission controller computed {priority} from the "
            "given PriorityClass name",
            "",
            "pods",
            name,
        )
    spec["priority"] = priority
    given_policy = spec.get("preemptionPolicy")
    if given_policy is not None and policy is not None and given_policy != policy:
        raise errors.forbidden(
            f'pods "{name}" is forbidden: the string value of PreemptionPolicy ({given_policy}) '
            f"must not be provided in pod spec; priority admission controller computed {policy} "
            "from the given PriorityClass name",
            "",
            "pods",
            name,
        )
    if policy is not None:
        spec["preemptionPolicy"] = policy


def _quantity_value(raw: Any) -> Fraction | None:
    try:
        return _parse(_canonical_quantity_json(raw)).value
    except ValueError:
        return None


def compute_pod_qos(pod: Mapping[str, Any]) -> str:
    """``qos.ComputePodQOS`` (cpu and memory of containers and init containers)."""
    spec = _map(pod.get("spec"))
    requests: dict[str, Fraction] = {}
    limits: dict[str, Fraction] = {}
    guaranteed = True
    containers = [*_list(spec.get("containers")), *_list(spec.get("initContainers"))]
    for c in containers:
        resources = _map(_map(c).get("resources"))
        for name, q in _map(resources.get("requests")).items():
            if name not in ("cpu", "memory"):
                continue
            value = _quantity_value(q)
            if value is not None and value > 0:
                requests[name] = requests.get(name, Fraction(0)) + value
        found = set()
        for name, q in _map(resources.get("limits")).items():
            if name not in ("cpu", "memory"):
                continue
            value = _quantity_value(q)
            if value is not None and value > 0:
                found.add(name)
                limits[name] = limits.get(name, Fraction(0)) + value
        if not {"cpu", "memory"} <= found:
            guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    if guaranteed:
        for name, req in requests.items():
            if limits.get(name) != req:
                guaranteed = False
                break
    if guaranteed and len(requests) == len(limits):
        return "Guaranteed"
    return "Burstable"


def _toleration_key(t: Any) -> tuple[str, str, str, str]:
    t = _map(t)
    return (
        _str(t.get("key")),
        _str(t.get("operator")),
        _str(t.get("value")),
        _str(t.get("effect")),
    )


def _validate_tolerations(tolerations: Any, path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    for i, raw in enumerate(_list(tolerations)):
        t = _map(raw)
        p = f"{path}[{i}]"
        key, op, value, effect = _toleration_key(t)
        if key:
            errs.extend(field.invalid(f"{p}.key", key, m) for m in is_qualified_name(key))
        if not key and op != "Exists":
            errs.append(
                field.invalid(
                    f"{p}.operator",
                    op,
                    'operator must be Exists when `key` is empty, which means "match all '
                    'values and all keys"',
                )
            )
        if t.get("tolerationSeconds") is not None and effect != "NoExecute":
            errs.append(
                field.invalid(
                    f"{p}.effect",
                    effect,
                    "effect must be 'NoExecute' when `tolerationSeconds` is set",
                )
            )
        if op in ("Equal", ""):
            msgs = is_valid_label_value(value)
            if msgs:
                errs.append(field.invalid(f"{p}.operator", value, ";".join(msgs)))
        elif op == "Exists":
            if value:
                errs.append(
                    field.invalid(
                        f"{p}.operator",
                        field.struct(t),
                        "value must be empty when `operator` is 'Exists'",
                    )
                )
        else:
            errs.append(field.not_supported(f"{p}.operator", op, ["Equal", "Exists"]))
        if effect:
            errs.extend(_validate_taint_effect(effect, True, f"{p}.effect"))
    return errs


def _validate_taint_effect(effect: str, allow_empty: bool, path: str) -> list[FieldError]:
    if not allow_empty and not effect:
        return [field.required(path)]
    if effect in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
        return []
    return [field.not_supported(path, effect, ["NoSchedule", "PreferNoSchedule", "NoExecute"])]


def _validate_resource_name(name: str, path: str) -> list[FieldError]:
    errs = [field.invalid(path, name, m) for m in is_qualified_name(name)]
    if errs:
        return errs
    if "/" not in name and not (name in _STANDARD_RESOURCES or _is_hugepage_resource(name)):
        return [field.invalid(path, name, "must be a standard resource type or fully qualified")]
    return []


def _validate_container_resource_name(name: str, path: str) -> list[FieldError]:
    errs = _validate_resource_name(name, path)
    if "/" not in name:
        if not (name in _STANDARD_CONTAINER_RESOURCES or _is_hugepage_resource(name)):
            errs.append(field.invalid(path, name, "must be a standard resource for containers"))
    elif not _is_native_resource(name) and not _is_extended_resource(name):
        errs.append(field.invalid(path, name, "doesn't follow extended resource name standard"))
    return errs


def _validate_quantity_value(name: str, raw: Any, path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    value = _quantity_value(raw)
    if value is None:
        return errs
    text = _canonical_quantity_json(raw)
    if value < 0:
        errs.append(field.invalid(path, text, "must be greater than or equal to 0"))
    if _is_integer_resource(name) and (value * 1000) % 1000 != 0:
        errs.append(field.invalid(path, text, "must be an integer"))
    return errs


def _validate_resource_requirements(resources: Any, path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    res = _map(resources)
    limits = _map(res.get("limits"))
    requests = _map(res.get("requests"))
    lim_path, req_path = f"{path}.limits", f"{path}.requests"
    for name, q in limits.items():
        p = f"{lim_path}[{name}]"
        errs.extend(_validate_container_resource_name(name, p))
        errs.extend(_validate_quantity_value(name, q, p))
    for name, q in requests.items():
        p = f"{req_path}[{name}]"
        errs.extend(_validate_container_resource_name(name, p))
        errs.extend(_validate_quantity_value(name, q, p))
        req = _quantity_value(q)
        if name in limits:
            lim = _quantity_value(limits[name])
            if req is None or lim is None:
                continue
            req_text = _canonical_quantity_json(q)
            lim_text = _canonical_quantity_json(limits[name])
            if req != lim and not _is_overcommit_allowed(name):
                errs.append(
                    field.invalid(
                        req_path, req_text, f"must be equal to {name} limit of {lim_text}"
                    )
                )
            elif req > lim:
                errs.append(
                    field.invalid(
                        req_path,
                        req_text,
                        f"must be less than or equal to {name} limit of {lim_text}",
                    )
                )
        elif not _is_overcommit_allowed(name):
            errs.append(
                field.required(lim_path, "Limit must be set for non overcommitable resources")
            )
    return errs


def _validate_container_common(
    c: Mapping[str, Any], volumes: set[str], path: str
) -> list[FieldError]:
    errs: list[FieldError] = []
    name = _str(c.get("name"))
    if not name:
        errs.append(field.required(f"{path}.name"))
    else:
        errs.extend(_validate_dns1123_label(name, f"{path}.name"))
    if not _str(c.get("image")):
        errs.append(field.required(f"{path}.image"))
    policy = _str(c.get("terminationMessagePolicy"))
    if not policy:
        errs.append(field.required(f"{path}.terminationMessagePolicy"))
    elif policy not in ("File", "FallbackToLogsOnError"):
        errs.append(
            field.not_supported(
                f"{path}.terminationMessagePolicy", policy, ["File", "FallbackToLogsOnError"]
            )
        )
    # ports
    port_names: set[str] = set()
    for i, raw in enumerate(_list(c.get("ports"))):
        port = _map(raw)
        p = f"{path}.ports[{i}]"
        pname = _str(port.get("name"))
        if pname:
            msgs = _is_valid_port_name(pname)
            if msgs:
                errs.extend(field.invalid(f"{p}.name", pname, m) for m in msgs)
            elif pname in port_names:
                errs.append(field.duplicate(f"{p}.name", pname))
            else:
                port_names.add(pname)
        cport = port.get("containerPort")
        if not cport:
            errs.append(field.required(f"{p}.containerPort"))
        elif isinstance(cport, int):
            errs.extend(
                field.invalid(f"{p}.containerPort", cport, m) for m in _is_valid_port_num(cport)
            )
        hport = port.get("hostPort")
        if isinstance(hport, int) and hport != 0:
            errs.extend(field.invalid(f"{p}.hostPort", hport, m) for m in _is_valid_port_num(hport))
        proto = _str(port.get("protocol"))
        if not proto:
            errs.append(field.required(f"{p}.protocol"))
        elif proto not in ("SCTP", "TCP", "UDP"):
            errs.append(field.not_supported(f"{p}.protocol", proto, ["SCTP", "TCP", "UDP"]))
    # env
    for i, raw in enumerate(_list(c.get("env"))):
        ename = _str(_map(raw).get("name"))
        if not ename:
            errs.append(field.required(f"{path}.env[{i}].name"))
        elif any(ord(ch) > 126 or ord(ch) < 32 or ch == "=" for ch in ename):
            errs.append(
                field.invalid(
                    f"{path}.env[{i}].name",
                    ename,
                    "a valid environment variable name must consist only of printable ASCII "
                    "characters other than '='",
                )
            )
    # volume mounts
    mount_points: set[str] = set()
    for i, raw in enumerate(_list(c.get("volumeMounts"))):
        mnt = _map(raw)
        p = f"{path}.volumeMounts[{i}]"
        mname = _str(mnt.get("name"))
        if not mname:
            errs.append(field.required(f"{p}.name"))
        if mname not in volumes:
            errs.append(field.not_found(f"{p}.name", mname))
        mpath = _str(mnt.get("mountPath"))
        if not mpath:
            errs.append(field.required(f"{p}.mountPath"))
        if mpath in mount_points:
            errs.append(field.invalid(f"{p}.mountPath", mpath, "must be unique"))
        mount_points.add(mpath)
    pull = _str(c.get("imagePullPolicy"))
    if not pull:
        errs.append(field.required(f"{path}.imagePullPolicy"))
    elif pull not in ("Always", "IfNotPresent", "Never"):
        errs.append(
            field.not_supported(
                f"{path}.imagePullPolicy", pull, ["Always", "IfNotPresent", "Never"]
            )
        )
    errs.extend(_validate_resource_requirements(c.get("resources"), f"{path}.resources"))
    return errs


def _validate_pod_spec(spec: Mapping[str, Any]) -> list[FieldError]:
    """The parts of ``ValidatePodSpec`` listed in the module docstring, in upstream order."""
    errs: list[FieldError] = []
    # volumes
    volumes: set[str] = set()
    for i, raw in enumerate(_list(spec.get("volumes"))):
        vname = _str(_map(raw).get("name"))
        p = f"spec.volumes[{i}].name"
        verrs = [field.required(p)] if not vname else _validate_dns1123_label(vname, p)
        if vname in volumes:
            verrs.append(field.duplicate(p, vname))
        if verrs:
            errs.extend(verrs)
        else:
            volumes.add(vname)
    # containers
    containers = _list(spec.get("containers"))
    all_names: set[str] = set()
    if not containers:
        errs.append(field.required("spec.containers"))
    else:
        for i, raw in enumerate(containers):
            c = _map(raw)
            p = f"spec.containers[{i}]"
            errs.extend(_validate_container_common(c, volumes, p))
            cname = _str(c.get("name"))
            if cname in all_names:
                errs.append(field.duplicate(f"{p}.name", cname))
            else:
                all_names.add(cname)
        host_ports: set[str] = set()
        for ci, raw in enumerate(containers):
            for pi, port_raw in enumerate(_list(_map(raw).get("ports"))):
                port = _map(port_raw)
                hport = port.get("hostPort")
                if not hport:
                    continue
                key = f"{_str(port.get('hostIP'))}/{_str(port.get('protocol'))}/{hport}"
                if key in host_ports:
                    errs.append(field.duplicate(f"spec.containers[{ci}].ports[{pi}].hostPort", key))
                else:
                    host_ports.add(key)
    # init containers
    names = {_str(_map(c).get("name")) for c in containers}
    for i, raw in enumerate(_list(spec.get("initContainers"))):
        c = _map(raw)
        p = f"spec.initContainers[{i}]"
        errs.extend(_validate_container_common(c, volumes, p))
        cname = _str(c.get("name"))
        if cname in names:
            errs.append(field.duplicate(f"{p}.name", cname))
        elif cname:
            names.add(cname)
    # policies
    restart = _str(spec.get("restartPolicy"))
    if not restart:
        errs.append(field.required("spec.restartPolicy"))
    elif restart not in ("Always", "OnFailure", "Never"):
        errs.append(
            field.not_supported("spec.restartPolicy", restart, ["Always", "OnFailure", "Never"])
        )
    dns = _str(spec.get("dnsPolicy"))
    dns_values = ["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"]
    if not dns:
        errs.append(field.required("spec.dnsPolicy"))
    elif dns not in dns_values:
        errs.append(field.not_supported("spec.dnsPolicy", dns, dns_values))
    errs.extend(_validate_labels(spec.get("nodeSelector"), "spec.nodeSelector"))
    # scheduling gates
    seen: set[str] = set()
    for i, raw in enumerate(_list(spec.get("schedulingGates"))):
        gname = _str(_map(raw).get("name"))
        errs.extend(_validate_qualified_name(gname, f"spec.schedulingGates[{i}]"))
        if gname in seen:
            errs.append(field.duplicate(f"spec.schedulingGates[{i}]", gname))
        seen.add(gname)
    for fld in ("serviceAccountName", "nodeName"):
        value = _str(spec.get(fld))
        if value:
            errs.extend(field.invalid(f"spec.{fld}", value, m) for m in is_dns1123_subdomain(value))
    ads = spec.get("activeDeadlineSeconds")
    if isinstance(ads, int) and not isinstance(ads, bool) and not 1 <= ads <= 2**31 - 1:
        errs.append(
            field.invalid(
                "spec.activeDeadlineSeconds", ads, f"must be between 1 and {2**31 - 1}, inclusive"
            )
        )
    hostname = _str(spec.get("hostname"))
    if hostname:
        errs.extend(_validate_dns1123_label(hostname, "spec.hostname"))
    subdomain = _str(spec.get("subdomain"))
    if subdomain:
        errs.extend(_validate_dns1123_label(subdomain, "spec.subdomain"))
    if _list(spec.get("tolerations")):
        errs.extend(_validate_tolerations(spec.get("tolerations"), "spec.tolerations"))
    pcn = _str(spec.get("priorityClassName"))
    if pcn:
        errs.extend(
            field.invalid("spec.priorityClassName", pcn, m) for m in is_dns1123_subdomain(pcn)
        )
    policy = spec.get("preemptionPolicy")
    if policy is not None and policy not in ("PreemptLowerPriority", "Never"):
        errs.append(
            field.not_supported("spec.preemptionPolicy", policy, ["Never", "PreemptLowerPriority"])
        )
    group = spec.get("schedulingGroup")
    if group is not None:
        # 1.36 PodSchedulingGroup: exactly one member (podGroupName, a DNS subdomain).
        # Immutable like the rest of the spec (see _UPDATABLE_POD_SPEC_FIELDS).
        pg = _map(group).get("podGroupName")
        p = "spec.schedulingGroup.podGroupName"
        if pg is None:
            errs.append(
                field.invalid("spec.schedulingGroup", "", "must specify one of: `podGroupName`")
            )
        elif not isinstance(pg, str) or not pg:
            errs.append(field.required(p))
        else:
            errs.extend(field.invalid(p, pg, m) for m in is_dns1123_subdomain(pg))
    return errs


def _validate_pod_resource_claims(pod: Mapping[str, Any]) -> list[FieldError]:
    """``validatePodResourceClaims`` and each container's ``resources.claims``
    (``validateResourceClaimNames``): DRA claims a pod names (``gpusched.sim.resource``)."""
    spec = _map(pod.get("spec"))
    errs: list[FieldError] = []
    names: set[str] = set()
    pod_name = _str(_meta(pod).get("name"))
    for i, raw in enumerate(_list(spec.get("resourceClaims"))):
        claim, p = _map(raw), f"spec.resourceClaims[{i}]"
        name = _str(claim.get("name"))
        if not name:
            errs.append(field.required(f"{p}.name"))
        elif name in names:
            errs.append(field.duplicate(f"{p}.name", name))
        else:
            name_errs = _validate_dns1123_label(name, f"{p}.name")
            errs.extend(name_errs)
            if not name_errs and pod_name and claim.get("resourceClaimTemplateName") is not None:
                final = f"{pod_name}-{name}"
                errs.extend(
                    field.invalid(f"{p}.name", final, "final ResourceClaim name: " + m)
                    for m in name_is_dns_subdomain(final, False)
                )
            names.add(name)
        claim_name, template = (
            claim.get("resourceClaimName"),
            claim.get("resourceClaimTemplateName"),
        )
        if claim_name is not None and template is not None:
            errs.append(
                field.invalid(
                    p,
                    field.struct(raw),
                    "at most one of `resourceClaimName` or `resourceClaimTemplateName` may be set",
                )
            )
        elif claim_name is None and template is None:
            errs.append(
                field.invalid(
                    p,
                    field.struct(raw),
                    "must specify one of: `resourceClaimName`, `resourceClaimTemplateName`",
                )
            )
        else:
            key = "resourceClaimName" if claim_name is not None else "resourceClaimTemplateName"
            value = _str(claim.get(key))
            errs.extend(
                field.invalid(f"{p}.{key}", value, m) for m in name_is_dns_subdomain(value, False)
            )
    for group in ("initContainers", "containers"):
        for i, raw in enumerate(_list(spec.get(group))):
            claims = _list(_map(_map(raw).get("resources")).get("claims"))
            seen: set[str] = set()
            for j, c in enumerate(claims):
                p = f"spec.{group}[{i}].resources.claims[{j}]"
                name = _str(_map(c).get("name"))
                if not name:
                    errs.append(field.required(p))
                    continue
                if name in seen:
                    errs.append(field.duplicate(p, name))
                seen.add(name)
                if name not in names:
                    detail = "must be one of the names in pod.spec.resourceClaims"
                    detail += ": " + ", ".join(sorted(names)) if names else " which is empty"
                    errs.append(
                        FieldError(field.path_string(p), field.ErrorType.NOT_FOUND, name, detail)
                    )
    return errs


def _validate_pod_resource_claim_statuses(pod: Mapping[str, Any]) -> list[FieldError]:
    """``validatePodResourceClaimStatuses``: ``status.resourceClaimStatuses``."""
    claims = {_str(_map(c).get("name")) for c in _list(_map(pod.get("spec")).get("resourceClaims"))}
    errs: list[FieldError] = []
    seen: set[str] = set()
    statuses = _list(_map(pod.get("status")).get("resourceClaimStatuses"))
    for i, raw in enumerate(statuses):
        st, p = _map(raw), f"status.resourceClaimStatuses[{i}].name"
        name = _str(st.get("name"))
        if name not in claims:
            errs.append(
                field.invalid(p, name, "must match the name of an entry in `spec.resourceClaims`")
            )
        if name in seen:
            errs.append(field.duplicate(p, name))
        seen.add(name)
        claim_name = st.get("resourceClaimName")
        if claim_name is not None:
            errs.extend(
                field.invalid(p, _str(claim_name), m)
                for m in name_is_dns_subdomain(_str(claim_name), False)
            )
    return errs


def _validate_container_updates(
    new: list[Any], old: list[Any], path: str
) -> tuple[list[FieldError], bool]:
    if len(new) != len(old):
        return [field.forbidden(path, "pod updates may not add or remove containers")], True
    errs: list[FieldError] = []
    for i, c in enumerate(new):
        image = _str(_map(c).get("image"))
        if not image:
            errs.append(field.required(f"{path}[{i}].image"))
        if image.strip() != image:
            errs.append(
                field.invalid(
                    f"{path}[{i}].image", image, "must not have leading or trailing whitespace"
                )
            )
    return errs, False


def _json_diff(old: Any, new: Any, path: str = "") -> list[str]:
    """Changed leaf paths between two JSON values (stand-in for go-cmp's diff)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for k in list(old) + [k for k in new if k not in old]:
            out.extend(_json_diff(old.get(k), new.get(k), f"{path}.{k}" if path else k))
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        out = []
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            out.extend(_json_diff(a, b, f"{path}[{i}]"))
        return out
    if old == new:
        return []
    return [
        f"-  {path}: {json.dumps(old, separators=(',', ':'))}",
        f"+  {path}: {json.dumps(new, separators=(',', ':'))}",
    ]


class PodStrategy(Strategy):
    """``pkg/registry/core/pod``: defaults, admission, validation, graceful delete, table."""

    def __init__(self) -> None:
        super().__init__(
            "Pod",
            "",
            "pods",
            True,
            has_status=True,
            return_deleted_object=True,
            extra_fields=_POD_FIELDS,
        )
        self.priority_classes = PriorityResolver()

    def _extra_fields(self, obj: dict[str, Any]) -> dict[str, str]:
        spec = _map(obj.get("spec"))
        status = _map(obj.get("status"))
        pod_ips = _list(status.get("podIPs"))
        pod_ip = _str(_map(pod_ips[0]).get("ip")) if pod_ips else _str(status.get("podIP"))
        node = _str(spec.get("nodeName"))
        return {
            "spec.nodeName": node,
            "spec.host": node,
            "spec.restartPolicy": _str(spec.get("restartPolicy")),
            "spec.schedulerName": _str(spec.get("schedulerName")),
            "spec.serviceAccountName": _str(spec.get("serviceAccountName")),
            "spec.hostNetwork": "true" if spec.get("hostNetwork") is True else "false",
            "status.phase": _str(status.get("phase")),
            "status.podIP": pod_ip,
            "status.podIPs": "",
            "status.nominatedNodeName": _str(status.get("nominatedNodeName")),
        }

    # ------------------------------------------------------------------ create

    def prepare_for_create(self, obj: dict[str, Any]) -> None:
        _check_meta_decoding("Pod", obj)
        _canonicalize_pod_quantities(obj)
        _default_pod(obj)
        spec = obj["spec"]
        # Admission: ServiceAccount (name only), Priority, DefaultTolerationSeconds.
        if not spec.get("serviceAccountName"):
            spec["serviceAccountName"] = "default"
            spec["serviceAccount"] = "default"
        _admit_priority(obj, self.priority_classes)
        _admit_default_toleration_seconds(obj)
        # podStrategy.PrepareForCreate
        status: JSON = {"phase": "Pending"}
        if _list(spec.get("schedulingGates")):
            status["conditions"] = [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "lastProbeTime": None,
                    "lastTransitionTime": None,
                    "reason": "SchedulingGated",
                    "message": "Scheduling is blocked due to non-empty scheduling gates",
                }
            ]
        status["qosClass"] = compute_pod_qos(obj)
        obj["status"] = status

    def validate_create(self, obj: dict[str, Any]) -> list[FieldError]:
        errs = _validate_object_meta(obj, self.name_fn, kube=True)
        spec = _map(obj.get("spec"))
        errs.extend(_validate_pod_spec(spec))
        errs.extend(_validate_pod_resource_claims(obj))
        if _list(spec.get("ephemeralContainers")):
            errs.append(field.forbidden("spec.ephemeralContainers", "cannot be set on create"))
        if _str(spec.get("nodeName")) and _list(spec.get("schedulingGates")):
            errs.append(
                field.forbidden(
                    "spec.nodeName", "cannot be set until all schedulingGates have been cleared"
                )
            )
        return errs

    # ------------------------------------------------------------------ update

    def prepare_for_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        _check_meta_decoding("Pod", new)
        _canonicalize_pod_quantities(new)
        _default_pod(new)
        _admit_default_toleration_seconds(new)
        spec, old_spec = new["spec"], _map(old.get("spec"))
        # Priority admission on update: keep what was computed at create.
        for key in ("priority", "preemptionPolicy"):
            if spec.get(key) is None and key in old_spec:
                spec[key] = old_spec[key]
        _keep(new, old, "status")

    def validate_update(self, new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
        errs = _validate_object_meta_update(new, old, kube=True)
        errs.extend(self.validate_create_meta_and_spec(new))
        spec, old_spec = _map(new.get("spec")), _map(old.get("spec"))
        for key in ("containers", "initContainers"):
            cerrs, stop = _validate_container_updates(
                _list(spec.get(key)), _list(old_spec.get(key)), f"spec.{key}"
            )
            errs.extend(cerrs)
            if stop:
                return errs
        new_ads, old_ads = spec.get("activeDeadlineSeconds"), old_spec.get("activeDeadlineSeconds")
        if new_ads is not None:
            if not isinstance(new_ads, int) or not 0 <= new_ads <= 2**31 - 1:
                errs.append(
                    field.invalid(
                        "spec.activeDeadlineSeconds",
                        new_ads,
                        f"must be between 0 and {2**31 - 1}, inclusive",
                    )
                )
                return errs
            if isinstance(old_ads, int) and old_ads < new_ads:
                errs.append(
                    field.invalid(
                        "spec.activeDeadlineSeconds",
                        new_ads,
                        "must be less than or equal to previous value",
                    )
                )
                return errs
        elif old_ads is not None:
            errs.append(
                field.invalid(
                    "spec.activeDeadlineSeconds",
                    None,
                    "must not update from a positive integer to nil value",
                )
            )
        # tolerations: only additions (tolerationSeconds of existing ones may change)
        new_tols = _list(spec.get("tolerations"))
        new_keys = [_toleration_key(t) for t in new_tols]
        for t in _list(old_spec.get("tolerations")):
            if _toleration_key(t) not in new_keys:
                errs.append(
                    field.forbidden(
                        "spec.tolerations",
                        "existing toleration can not be modified except its tolerationSeconds",
                    )
                )
                break
        else:
            errs.extend(_validate_tolerations(new_tols, "spec.tolerations"))
        # scheduling gates: only deletions
        old_gates = {_str(_map(g).get("name")) for g in _list(old_spec.get("schedulingGates"))}
        added: dict[str, int] = {}
        for i, g in enumerate(_list(spec.get("schedulingGates"))):
            added[_str(_map(g).get("name"))] = i
        for gname, i in added.items():
            if gname not in old_gates:
                errs.append(
                    field.forbidden(
                        f"spec.schedulingGates[{i}].name",
                        f"only deletion is allowed, but found new scheduling gate '{gname}'",
                    )
                )
        if _zeroless(spec) == _zeroless(old_spec):
            return errs
        old_qos = _str(_map(old.get("status")).get("qosClass")) or compute_pod_qos(old)
        if old_qos != compute_pod_qos(new):
            errs.append(
                field.invalid(
                    "metadata", _map(new.get("status")).get("qosClass", ""), "Pod QoS is immutable"
                )
            )
        munged = copy.deepcopy(spec)
        for key in ("containers", "initContainers"):
            olds = _list(old_spec.get(key))
            for i, c in enumerate(_list(munged.get(key))):
                if isinstance(c, dict) and i < len(olds):
                    _keep(c, _map(olds[i]), "image")
        _keep(munged, old_spec, "activeDeadlineSeconds")
        _keep(munged, old_spec, "schedulingGates")
        _keep(munged, old_spec, "tolerations")
        old_tgps = old_spec.get("terminationGracePeriodSeconds")
        if (
            isinstance(old_tgps, int)
            and old_tgps < 0
            and munged.get("terminationGracePeriodSeconds") == 1
        ):
            munged["terminationGracePeriodSeconds"] = old_tgps
        if old_gates:
            # Gated pods may add (not change) nodeSelector entries.
            new_sel, old_sel = _map(munged.get("nodeSelector")), _map(old_spec.get("nodeSelector"))
            if all(new_sel.get(k) == v for k, v in old_sel.items()):
                _keep(munged, old_spec, "nodeSelector")
        if _zeroless(munged) != _zeroless(old_spec):
            diff = "\n".join(_json_diff(old_spec, munged))
            errs.append(
                field.forbidden(
                    "spec",
                    "pod updates may not change fields other than "
                    + ",".join(_UPDATABLE_POD_SPEC_FIELDS)
                    + "\n"
                    + diff,
                )
            )
        return errs

    def validate_create_meta_and_spec(self, obj: dict[str, Any]) -> list[FieldError]:
        """``validatePodMetadataAndSpec``."""
        errs = _validate_object_meta(obj, self.name_fn, kube=True)
        errs.extend(_validate_pod_spec(_map(obj.get("spec"))))
        errs.extend(_validate_pod_resource_claims(obj))
        return errs

    # ------------------------------------------------------------------ status

    def prepare_for_status_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        """``podStatusStrategy.PrepareForUpdate``: old spec and ownerReferences; QoS backfill.

        Labels, annotations and finalizers sent to ``/status`` are kept, as upstream.
        """
        _check_meta_decoding("Pod", new)
        _keep(new, old, "spec")
        meta, old_meta = _ensure(new, "metadata"), _meta(old)
        _keep(meta, old_meta, "ownerReferences")
        status = _ensure(new, "status")
        if not status.get("qosClass") and _map(old.get("status")).get("qosClass"):
            status["qosClass"] = _map(old.get("status"))["qosClass"]
        _normalize_pod_status(status)

    def validate_status_update(self, new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
        errs = _validate_object_meta_update(new, old, kube=True)
        status, old_status = _map(new.get("status")), _map(old.get("status"))
        system = {"PodScheduled", "Ready", "Initialized"}
        for i, cond in enumerate(_list(status.get("conditions"))):
            ctype = _str(_map(cond).get("type"))
            if ctype not in system:
                errs.extend(_validate_qualified_name(ctype, f"metadata.conditions[{i}].Type"))
        nominated = _str(status.get("nominatedNodeName"))
        if nominated and nominated != _str(old_status.get("nominatedNodeName")):
            errs.extend(
                field.invalid("status.nominatedNodeName", nominated, m)
                for m in is_dns1123_subdomain(nominated)
            )
        errs.extend(_validate_pod_resource_claim_statuses(new))
        if _str(status.get("qosClass")) != _str(old_status.get("qosClass")):
            errs.append(field.immutable("status.qosClass", _str(status.get("qosClass"))))
        restart = _str(_map(old.get("spec")).get("restartPolicy"))
        errs.extend(
            _container_state_transition(
                status.get("containerStatuses"),
                old_status.get("containerStatuses"),
                "status.containerStatuses",
                restart,
            )
        )
        errs.extend(
            _container_state_transition(
                status.get("initContainerStatuses"),
                old_status.get("initContainerStatuses"),
                "status.initContainerStatuses",
                restart,
            )
        )
        for i, ip in enumerate(_list(status.get("podIPs"))):
            addr = _str(_map(ip).get("ip"))
            if not _is_ip(addr):
                errs.append(
                    field.invalid(
                        f"status.podIPs[{i}]",
                        addr,
                        "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
                    )
                )
        return errs

    # ------------------------------------------------------------------ delete

    def graceful_period(self, obj: dict[str, Any], requested: int | None) -> int:
        """``podStrategy.CheckGracefulDelete``."""
        spec, status = _map(obj.get("spec")), _map(obj.get("status"))
        if requested is not None:
            period = int(requested)
        else:
            tgps = spec.get("terminationGracePeriodSeconds")
            period = tgps if isinstance(tgps, int) and not isinstance(tgps, bool) else 0
        if not _str(spec.get("nodeName")):
            period = 0
        if status.get("phase") in ("Failed", "Succeeded"):
            period = 0
        if period < 0:
            period = 1
        return period

    # ------------------------------------------------------------------ table

    def table(self, objs: list[dict[str, Any]], now: datetime) -> dict[str, Any]:
        columns = [
            _NAME_COL,
            _col("Ready", "The aggregate readiness state of this pod for accepting traffic."),
            _col("Status", "The aggregate status of the containers in this pod."),
            _col(
                "Restarts",
                "The number of times the containers in this pod have been restarted and when the "
                "last container in this pod has restarted.",
            ),
            _AGE_COL,
            _col(
                "IP",
                "podIP address allocated to the pod. Routable at least within the cluster. Empty "
                "if not yet allocated.",
                priority=1,
            ),
            _col(
                "Node",
                "NodeName indicates in which node this pod is scheduled. If empty, this pod is a "
                "candidate for scheduling by the scheduler defined in schedulerName. Once this "
                "field is set, the kubelet for this node becomes responsible for the lifecycle of "
                "this pod. This field should not be used to express a desire for the pod to be "
                "scheduled on a specific node. "
                "https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/#nodename",
                priority=1,
            ),
            _col(
                "Nominated Node",
                "nominatedNodeName is set only when this pod preempts other pods on the node, but "
                "it cannot be scheduled right away as preemption victims receive their graceful "
                "termination periods. This field does not guarantee that the pod will be "
                "scheduled on this node. Scheduler may decide to place the pod elsewhere if other "
                "nodes become available sooner. Scheduler may also decide to give the resources "
                "on this node to a higher priority pod that is created after preemption. As a "
                "result, this field may be different than PodSpec.nodeName when the pod is "
                "scheduled.",
                priority=1,
            ),
            _col(
                "Readiness Gates",
                "If specified, all readiness gates will be evaluated for pod readiness. A pod is "
                "ready when all its containers are ready AND all conditions specified in the "
                'readiness gates have status equal to "True" More info: '
                "https://git.k8s.io/enhancements/keps/sig-network/580-pod-readiness-gates",
                priority=1,
            ),
        ]
        return _table(columns, [_pod_row(o, now) for o in objs])


def _zeroless(v: Any) -> Any:
    """``v`` without object keys whose value is a Go zero value (absent == zero after decode)."""
    if isinstance(v, dict):
        out = {}
        for k, item in v.items():
            norm = _zeroless(item)
            if (
                norm is None
                or norm is False
                or norm in ("", [], {})
                or (isinstance(norm, int | float) and not isinstance(norm, bool) and norm == 0)
            ):
                continue
            out[k] = norm
        return out
    if isinstance(v, list):
        return [_zeroless(x) for x in v]
    return v


def _is_ip(s: str) -> bool:
    try:
        ipaddress.ip_address(s)
    except ValueError:
        return False
    return not (s.count(".") == 3 and any(len(p) > 1 and p.startswith("0") for p in s.split(".")))


def _container_state_transition(
    new_statuses: Any, old_statuses: Any, path: str, restart: str
) -> list[FieldError]:
    if restart == "Always":
        return []
    errs: list[FieldError] = []
    for i, old in enumerate(_list(old_statuses)):
        old_m = _map(old)
        terminated = _map(old_m.get("state")).get("terminated")
        if not isinstance(terminated, dict):
            continue
        if terminated.get("exitCode", 0) != 0 and restart == "OnFailure":
            continue
        for new in _list(new_statuses):
            new_m = _map(new)
            if new_m.get("name") == old_m.get("name") and not isinstance(
                _map(new_m.get("state")).get("terminated"), dict
            ):
                errs.append(
                    field.forbidden(
                        f"{path}[{i}].state", "may not be transitioned to non-terminated state"
                    )
                )
    return errs


def _pod_row(pod: Mapping[str, Any], now: datetime) -> JSON:
    """``printPod``."""
    spec, status, meta = _map(pod.get("spec")), _map(pod.get("status")), _meta(pod)
    init_specs = {_str(_map(c).get("name")): _map(c) for c in _list(spec.get("initContainers"))}

    def restartable(name: str) -> bool:
        return init_specs.get(name, {}).get("restartPolicy") == "Always"

    restarts = 0
    restartable_restarts = 0
    total = len(_list(spec.get("containers"))) + sum(1 for n in init_specs if restartable(n))
    ready = 0
    last_restart: datetime | None = None
    last_restartable_restart: datetime | None = None
    phase = _str(status.get("phase"))
    reason = _str(status.get("reason")) or phase
    for cond in _list(status.get("conditions")):
        c = _map(cond)
        if c.get("type") == "PodScheduled" and c.get("reason") == "SchedulingGated":
            reason = "SchedulingGated"
    conditions = None
    if phase == "Succeeded":
        conditions = [
            {
                "type": "Completed",
                "status": "True",
                "reason": "Succeeded",
                "message": "The pod has completed successfully.",
            }
        ]
    elif phase == "Failed":
        conditions = [
            {
                "type": "Completed",
                "status": "True",
                "reason": "Failed",
                "message": "The pod failed.",
            }
        ]

    def later(a: datetime | None, b: Any) -> datetime | None:
        t = _parse_time_lenient(b)
        if t is None:
            return a
        return t if a is None or a < t else a

    initializing = False
    init_statuses = _list(status.get("initContainerStatuses"))
    for i, raw in enumerate(init_statuses):
        cs = _map(raw)
        name = _str(cs.get("name"))
        count = int(cs.get("restartCount") or 0)
        restarts += count
        last_term = _map(_map(cs.get("lastState")).get("terminated"))
        if last_term:
            last_restart = later(last_restart, last_term.get("finishedAt"))
        if restartable(name):
            restartable_restarts += count
            if last_term:
                last_restartable_restart = later(
                    last_restartable_restart, last_term.get("finishedAt")
                )
        state = _map(cs.get("state"))
        terminated = state.get("terminated")
        waiting = _map(state.get("waiting"))
        if isinstance(terminated, dict) and terminated.get("exitCode", 0) == 0:
            continue
        if restartable(name) and cs.get("started") is True:
            if cs.get("ready") is True:
                ready += 1
            continue
        if isinstance(terminated, dict):
            if not _str(terminated.get("reason")):
                if terminated.get("signal"):
                    reason = f"Init:Signal:{terminated['signal']}"
                else:
                    reason = f"Init:ExitCode:{terminated.get('exitCode', 0)}"
            else:
                reason = "Init:" + _str(terminated.get("reason"))
        elif _str(waiting.get("reason")) and waiting.get("reason") != "PodInitializing":
            reason = "Init:" + _str(waiting.get("reason"))
        else:
            reason = f"Init:{i}/{len(_list(spec.get('initContainers')))}"
        initializing = True
        break
    initialized_true = any(
        _map(c).get("type") == "Initialized" and _map(c).get("status") == "True"
        for c in _list(status.get("conditions"))
    )
    if not initializing or initialized_true:
        restarts = restartable_restarts
        last_restart = last_restartable_restart
        has_running = False
        for raw in reversed(_list(status.get("containerStatuses"))):
            cs = _map(raw)
            restarts += int(cs.get("restartCount") or 0)
            last_term = _map(_map(cs.get("lastState")).get("terminated"))
            if last_term:
                last_restart = later(last_restart, last_term.get("finishedAt"))
            state = _map(cs.get("state"))
            waiting = _map(state.get("waiting"))
            terminated = state.get("terminated")
            if _str(waiting.get("reason")):
                reason = _str(waiting.get("reason"))
            elif isinstance(terminated, dict) and _str(terminated.get("reason")):
                reason = _str(terminated.get("reason"))
            elif isinstance(terminated, dict):
                if terminated.get("signal"):
                    reason = f"Signal:{terminated['signal']}"
                else:
                    reason = f"ExitCode:{terminated.get('exitCode', 0)}"
            elif cs.get("ready") is True and isinstance(state.get("running"), dict):
                has_running = True
                ready += 1
        if reason == "Completed" and has_running:
            pod_ready = any(
                _map(c).get("type") == "Ready" and _map(c).get("status") == "True"
                for c in _list(status.get("conditions"))
            )
            reason = "Running" if pod_ready else "NotReady"
    if meta.get("deletionTimestamp") and status.get("reason") == "NodeLost":
        reason = "Unknown"
    elif meta.get("deletionTimestamp") and phase not in ("Succeeded", "Failed"):
        reason = "Terminating"
    restarts_str = str(restarts)
    if restarts != 0 and last_restart is not None:
        restarts_str = f"{restarts} ({human_duration(now - last_restart)} ago)"
    pod_ips = _list(status.get("podIPs"))
    pod_ip = _str(_map(pod_ips[0]).get("ip")) if pod_ips else ""
    gates = _list(spec.get("readinessGates"))
    gates_str = "<none>"
    if gates:
        true_count = 0
        for gate in gates:
            ctype = _map(gate).get("conditionType")
            for cond in _list(status.get("conditions")):
                if _map(cond).get("type") == ctype:
                    if _map(cond).get("status") == "True":
                        true_count += 1
                    break
        gates_str = f"{true_count}/{len(gates)}"
    cells = [
        _str(meta.get("name")),
        f"{ready}/{total}",
        reason,
        restarts_str,
        _since(meta.get("creationTimestamp"), now),
        pod_ip or "<none>",
        _str(spec.get("nodeName")) or "<none>",
        _str(status.get("nominatedNodeName")) or "<none>",
        gates_str,
    ]
    return _row(pod, cells, conditions)


# =============================================================================================
# Binding (pkg/registry/core/pod/storage/storage.go)
# =============================================================================================


def bind_pod(pod: dict[str, Any], binding: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """``BindingREST.Create``: validate the Binding, then ``setPodNodeAndMetadata``.

    Raises ``APIError``: 500 (reason unset, as upstream returns a plain aggregate error) when
    ``ValidatePodBinding`` fails; 409 ``pods/binding`` conflicts for a pod being deleted, one
    already assigned or one with scheduling gates. Mutates and returns ``pod``.
    """
    target = _map(binding.get("target"))
    errs: list[FieldError] = []
    target_kind = _str(target.get("kind"))
    if target_kind and target_kind != "Node":
        errs.append(field.not_supported("target.kind", target_kind, ["Node", "<empty>"]))
    if not _str(target.get("name")):
        errs.append(field.required("target.name"))
    if errs:
        message = str(errs[0]) if len(errs) == 1 else "[" + ", ".join(str(e) for e in errs) + "]"
        raise errors.unexpected(message)
    meta = _ensure(pod, "metadata")
    spec = _ensure(pod, "spec")
    name = _str(meta.get("name"))
    if meta.get("deletionTimestamp"):
        raise errors.conflict(
            "", "pods/binding", name, f"pod {name} is being deleted, cannot be assigned to a host"
        )
    node = _str(spec.get("nodeName"))
    if node:
        raise errors.conflict(
            "", "pods/binding", name, f"pod {name} is already assigned to node {json.dumps(node)}"
        )
    if _list(spec.get("schedulingGates")):
        raise errors.conflict(
            "", "pods/binding", name, f"pod {name} has non-empty .spec.schedulingGates"
        )
    spec["nodeName"] = _str(target.get("name"))
    annotations = _map(_map(binding.get("metadata")).get("annotations"))
    if not isinstance(meta.get("annotations"), dict):
        meta["annotations"] = {}
    meta["annotations"].update(annotations)
    status = _ensure(pod, "status")
    _update_pod_condition(status, "PodScheduled", "True", now)
    return pod


def _update_pod_condition(status: dict[str, Any], ctype: str, cstatus: str, now: datetime) -> None:
    """``podutil.UpdatePodCondition`` with a condition that has no reason or message."""
    condition: JSON = {
        "type": ctype,
        "status": cstatus,
        "lastProbeTime": None,
        "lastTransitionTime": _format_time(now),
    }
    conditions = _list(status.get("conditions"))
    for i, existing in enumerate(conditions):
        if _map(existing).get("type") == ctype:
            if _map(existing).get("status") == cstatus:
                condition["lastTransitionTime"] = _map(existing).get("lastTransitionTime")
            conditions[i] = condition
            status["conditions"] = conditions
            return
    status["conditions"] = [*conditions, condition]


# =============================================================================================
# Nodes (pkg/apis/core/v1/defaults.go, core/validation ValidateNode*,
# pkg/registry/core/node/strategy.go)
# =============================================================================================

_NODE_INFO_FIELDS: Final = (
    "machineID",
    "systemUUID",
    "bootID",
    "kernelVersion",
    "osImage",
    "containerRuntimeVersion",
    "kubeletVersion",
    "kubeProxyVersion",
    "operatingSystem",
    "architecture",
)


def _normalize_node(node: dict[str, Any]) -> None:
    """Decode/encode of a v1 Node: podCIDR folding, quantities, zero-valued status structs."""
    _check_meta_decoding("Node", node)
    spec = _ensure(node, "spec")
    cidr = _str(spec.get("podCIDR"))
    cidrs = _list(spec.get("podCIDRs"))
    if cidr and (not cidrs or cidrs[0] != cidr):
        spec["podCIDRs"] = [cidr]
        cidrs = spec["podCIDRs"]
    if cidrs:
        spec["podCIDR"] = _str(cidrs[0])
    status = _ensure(node, "status")
    _canonicalize_node_resources(status)
    if status.get("allocatable") is None and isinstance(status.get("capacity"), dict):
        status["allocatable"] = dict(status["capacity"])
    endpoints = _ensure(status, "daemonEndpoints")
    kubelet = _ensure(endpoints, "kubeletEndpoint")
    kubelet.setdefault("Port", 0)
    info = _ensure(status, "nodeInfo")
    for key in _NODE_INFO_FIELDS:
        info.setdefault(key, "")
    for cond in _list(status.get("conditions")):
        if isinstance(cond, dict):
            for key in ("lastHeartbeatTime", "lastTransitionTime"):
                _normalize_time_field("Node", cond, key, micro=False)
                cond.setdefault(key, None)


def _canonicalize_node_resources(status: dict[str, Any]) -> None:
    for key in ("capacity", "allocatable"):
        _canonicalize_resource_list("Node", status.get(key))


class NodeStrategy(Strategy):
    """``pkg/registry/core/node``: status may be set on create (the kubelet registers so)."""

    def __init__(self) -> None:
        super().__init__(
            "Node", "", "nodes", False, has_status=True, extra_fields=("spec.unschedulable",)
        )

    def _extra_fields(self, obj: dict[str, Any]) -> dict[str, str]:
        return {
            "spec.unschedulable": "true"
            if _map(obj.get("spec")).get("unschedulable") is True
            else "false"
        }

    def prepare_for_create(self, obj: dict[str, Any]) -> None:
        """``nodeStrategy.PrepareForCreate`` keeps status: "Nodes allow *all* fields, including
        status, to be set on create"."""
        _normalize_node(obj)

    def prepare_for_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        _normalize_node(new)
        _keep(new, old, "status")

    def prepare_for_status_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        """``nodeStatusStrategy.PrepareForUpdate``: old spec; metadata from the request is kept."""
        _normalize_node(new)
        _keep(new, old, "spec")

    def validate_create(self, obj: dict[str, Any]) -> list[FieldError]:
        errs = _validate_object_meta(obj, self.name_fn, kube=True)
        errs.extend(_validate_node_common(obj))
        return errs

    def validate_update(self, new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
        errs = self.validate_create(new)
        errs.extend(_validate_node_update(new, old))
        return errs

    def validate_status_update(self, new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
        return _validate_node_update(new, old)

    def table(self, objs: list[dict[str, Any]], now: datetime) -> dict[str, Any]:
        columns = [
            _NAME_COL,
            _col("Status", "The status of the node"),
            _col("Roles", "The roles of the node"),
            _AGE_COL,
            _col("Version", "Kubelet Version reported by the node."),
            _col("Internal-IP", _DESC_ADDRESSES, priority=1),
            _col("External-IP", _DESC_ADDRESSES, priority=1),
            _col(
                "OS-Image",
                "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 "
                "(wheezy)).",
                priority=1,
            ),
            _col(
                "Kernel-Version",
                "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).",
                priority=1,
            ),
            _col(
                "Container-Runtime",
                "ContainerRuntime Version reported by the node through runtime remote API (e.g. "
                "containerd://1.4.2).",
                priority=1,
            ),
        ]
        return _table(columns, [_node_row(o, now) for o in objs])


_DESC_ADDRESSES: Final = (
    "List of addresses reachable to the node. Queried from cloud provider, if available. More "
    "info: https://kubernetes.io/docs/reference/node/node-status/#addresses Note: This field is "
    "declared as mergeable, but the merge key is not sufficiently unique, which can cause data "
    "corruption when it is merged. Callers should instead use a full-replacement patch. See "
    "https://pr.k8s.io/79391 for an example. Consumers should assume that addresses can change "
    "during the lifetime of a Node. However, there are some exceptions where this may not be "
    "possible, such as Pods that inherit a Node's address in its own status or consumers of the "
    "downward API (status.hostIP)."
)


def _validate_node_taints(taints: Any, path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    seen: dict[str, set[str]] = {}
    for i, raw in enumerate(_list(taints)):
        t = _map(raw)
        p = f"{path}[{i}]"
        key, value, effect = _str(t.get("key")), _str(t.get("value")), _str(t.get("effect"))
        errs.extend(field.invalid(f"{p}.key", key, m) for m in is_qualified_name(key))
        msgs = is_valid_label_value(value)
        if msgs:
            errs.append(field.invalid(f"{p}.value", value, ";".join(msgs)))
        errs.extend(_validate_taint_effect(effect, False, f"{p}.effect"))
        if key in seen.get(effect, set()):
            errs.append(
                field.duplicate(p, field.struct(t), "taints must be unique by key and effect pair")
            )
            continue
        seen.setdefault(effect, set()).add(key)
    return errs


def _validate_node_resources(status: Mapping[str, Any]) -> list[FieldError]:
    errs: list[FieldError] = []
    for key in ("capacity", "allocatable"):
        for name, q in _map(status.get(key)).items():
            errs.extend(_validate_quantity_value(name, q, f"status.{key}.{name}"))
    return errs


def _validate_node_common(node: Mapping[str, Any]) -> list[FieldError]:
    """The rest of ``ValidateNode`` (taints are reported under ``metadata.taints``, as upstream)."""
    spec = _map(node.get("spec"))
    errs: list[FieldError] = []
    if _list(spec.get("taints")):
        errs.extend(_validate_node_taints(spec.get("taints"), "metadata.taints"))
    errs.extend(_validate_node_resources(_map(node.get("status"))))
    return errs


def _validate_node_update(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[FieldError]:
    errs = _validate_object_meta_update(new, old, kube=True)
    status = _map(new.get("status"))
    errs.extend(_validate_node_resources(status))
    seen: list[Any] = []
    for i, addr in enumerate(_list(status.get("addresses"))):
        if addr in seen:
            errs.append(field.duplicate(f"status.addresses[{i}]", field.struct(addr)))
        seen.append(addr)
    spec, old_spec = _map(new.get("spec")), _map(old.get("spec"))
    old_cidrs = _list(old_spec.get("podCIDRs"))
    new_cidrs = _list(spec.get("podCIDRs"))
    msg = 'node updates may not change podCIDR except from "" to valid'
    if old_cidrs:
        if len(old_cidrs) != len(new_cidrs):
            errs.append(field.forbidden("spec.podCIDRs", msg))
        else:
            errs.extend(
                field.forbidden("spec.podCIDRs", msg)
                for a, b in zip(old_cidrs, new_cidrs, strict=True)
                if a != b
            )
    old_pid = _str(old_spec.get("providerID"))
    if old_pid and old_pid != _str(spec.get("providerID")):
        errs.append(
            field.forbidden(
                "spec.providerID", 'node updates may not change providerID except from "" to valid'
            )
        )
    if _list(spec.get("taints")):
        errs.extend(_validate_node_taints(spec.get("taints"), "metadata.taints"))
    if _str(spec.get("externalID")) != _str(old_spec.get("externalID")):
        errs.append(field.forbidden("spec.externalID", "may not be updated"))
    return errs


def _node_row(node: Mapping[str, Any], now: datetime) -> JSON:
    """``printNode``."""
    spec, status, meta = _map(node.get("spec")), _map(node.get("status")), _meta(node)
    states: list[str] = []
    for cond in _list(status.get("conditions")):
        c = _map(cond)
        if c.get("type") == "Ready":
            states = ["Ready" if c.get("status") == "True" else "NotReady"]
    if not states:
        states = ["Unknown"]
    if spec.get("unschedulable") is True:
        states.append("SchedulingDisabled")
    roles: set[str] = set()
    for k, v in _map(meta.get("labels")).items():
        if k.startswith("node-role.kubernetes.io/"):
            role = k[len("node-role.kubernetes.io/") :]
            if role:
                roles.add(role)
        elif k == "kubernetes.io/role" and v:
            roles.add(_str(v))
    info = _map(status.get("nodeInfo"))

    def address(kind: str) -> str:
        for a in _list(status.get("addresses")):
            if _map(a).get("type") == kind:
                return _str(_map(a).get("address"))
        return "<none>"

    cells = [
        _str(meta.get("name")),
        ",".join(states),
        ",".join(sorted(roles)) or "<none>",
        _since(meta.get("creationTimestamp"), now),
        _str(info.get("kubeletVersion")),
        address("InternalIP"),
        address("ExternalIP"),
        _str(info.get("osImage")) or "<unknown>",
        _str(info.get("kernelVersion")) or "<unknown>",
        _str(info.get("containerRuntimeVersion")) or "<unknown>",
    ]
    return _row(node, cells)


# =============================================================================================
# Namespaces (core/validation ValidateNamespace*, pkg/registry/core/namespace/strategy.go)
# =============================================================================================


class NamespaceStrategy(Strategy):
    """``pkg/registry/core/namespace``."""

    def __init__(self) -> None:
        super().__init__(
            "Namespace", "", "namespaces", False, has_status=True, extra_fields=("status.phase",)
        )

    def _extra_fields(self, obj: dict[str, Any]) -> dict[str, str]:
        return {"status.phase": _str(_map(obj.get("status")).get("phase"))}

    def name_fn(self, name: str, prefix: bool) -> list[str]:
        return name_is_dns_label(name, prefix)

    @staticmethod
    def _default(obj: dict[str, Any]) -> None:
        """``SetDefaults_Namespace`` (+ ``Canonicalize``): the metadata.name label."""
        _check_meta_decoding("Namespace", obj)
        meta = _ensure(obj, "metadata")
        name = _str(meta.get("name"))
        if name:
            labels = meta.get("labels")
            if not isinstance(labels, dict):
                labels = {}
                meta["labels"] = labels
            labels["kubernetes.io/metadata.name"] = name

    def prepare_for_create(self, obj: dict[str, Any]) -> None:
        self._default(obj)
        obj["status"] = {"phase": "Active"}
        spec = _ensure(obj, "spec")
        finalizers = _list(spec.get("finalizers"))
        if "kubernetes" not in finalizers:
            spec["finalizers"] = [*finalizers, "kubernetes"]

    def prepare_for_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        self._default(new)
        spec = _ensure(new, "spec")
        old_spec = _map(old.get("spec"))
        _keep(spec, old_spec, "finalizers")
        _keep(new, old, "status")

    def prepare_for_status_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        self._default(new)
        _keep(new, old, "spec")
        status = _ensure(new, "status")
        if not status.get("phase"):
            status["phase"] = "Active"

    def validate_create(self, obj: dict[str, Any]) -> list[FieldError]:
        errs = _validate_object_meta(obj, self.name_fn, kube=True)
        for f in _list(_map(obj.get("spec")).get("finalizers")):
            errs.extend(_validate_core_finalizer_name(_str(f), "spec.finalizers"))
        return errs

    def validate_update(self, new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
        return _validate_object_meta_update(new, old, kube=True)

    def validate_status_update(self, new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
        errs = _validate_object_meta_update(new, old, kube=True)
        phase = _str(_map(new.get("status")).get("phase"))
        if not _meta(new).get("deletionTimestamp"):
            if phase != "Active":
                errs.append(
                    field.invalid(
                        "status.Phase",
                        phase,
                        "may only be 'Active' if `deletionTimestamp` is empty",
                    )
                )
        elif phase != "Terminating":
            errs.append(
                field.invalid(
                    "status.Phase",
                    phase,
                    "may only be 'Terminating' if `deletionTimestamp` is not empty",
                )
            )
        return errs

    def table(self, objs: list[dict[str, Any]], now: datetime) -> dict[str, Any]:
        status = _col("Status", "The status of the namespace")
        return _name_cell_age_table(status, objs, now, lambda o: _map(o.get("status")).get("phase"))


def _validate_core_finalizer_name(name: str, path: str) -> list[FieldError]:
    errs = [field.invalid(path, name, m) for m in is_qualified_name(name)]
    if "/" not in name and name not in _STANDARD_FINALIZERS:
        errs.append(
            field.invalid(
                path, name, "name is neither a standard finalizer name nor is it fully qualified"
            )
        )
    return errs


# =============================================================================================
# Events (pkg/apis/core/validation/events.go, pkg/registry/core/event/strategy.go,
# pkg/apis/events/v1/conversion.go)
# =============================================================================================

_CORE_EVENT_FIELDS: Final = (
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
)
# events.k8s.io/v1 field labels (AddFieldLabelConversionsForEvent); the storage's field set
# carries both spellings so either resource can match on it.
_EVENTS_V1_FIELDS: Final = (
    "regarding.kind",
    "regarding.namespace",
    "regarding.name",
    "regarding.uid",
    "regarding.apiVersion",
    "regarding.resourceVersion",
    "regarding.fieldPath",
    "reason",
    "reportingController",
    "type",
)
_REPORTING_LIMIT: Final = 128
_NOTE_LIMIT: Final = 1024


def _core_event_order(ev: Mapping[str, Any]) -> JSON:
    """A core/v1 Event with the fields Go always serialises, in struct order."""
    out: JSON = {}
    for key in ("kind", "apiVersion", "metadata"):
        if key in ev:
            out[key] = ev[key]
    out["involvedObject"] = (
        ev.get("involvedObject") if isinstance(ev.get("involvedObject"), dict) else {}
    )
    for key in ("reason", "message"):
        if ev.get(key):
            out[key] = ev[key]
    out["source"] = ev.get("source") if isinstance(ev.get("source"), dict) else {}
    out["firstTimestamp"] = ev.get("firstTimestamp")
    out["lastTimestamp"] = ev.get("lastTimestamp")
    if ev.get("count"):
        out["count"] = ev["count"]
    if ev.get("type"):
        out["type"] = ev["type"]
    out["eventTime"] = ev.get("eventTime")
    for key in ("series", "action", "related"):
        if ev.get(key):
            out[key] = ev[key]
    out["reportingComponent"] = _str(ev.get("reportingComponent"))
    out["reportingInstance"] = _str(ev.get("reportingInstance"))
    for key, value in ev.items():
        if key not in out and key not in ("reportingController",):
            out[key] = value
    return out


def event_to_events_v1(core: dict[str, Any]) -> dict[str, Any]:
    """``Convert_core_Event_To_v1_Event``: a stored core/v1 Event as events.k8s.io/v1."""
    out: JSON = {"kind": "Event", "apiVersion": "events.k8s.io/v1"}
    out["metadata"] = copy.deepcopy(_meta(core))
    out["eventTime"] = core.get("eventTime")
    series = core.get("series")
    if isinstance(series, dict) and series:
        out["series"] = {
            k: copy.deepcopy(series[k]) for k in ("count", "lastObservedTime") if k in series
        }
    for src, dst in (
        ("reportingComponent", "reportingController"),
        ("reportingInstance", "reportingInstance"),
        ("action", "action"),
        ("reason", "reason"),
    ):
        if core.get(src):
            out[dst] = core[src]
    out["regarding"] = copy.deepcopy(_map(core.get("involvedObject")))
    if core.get("related"):
        out["related"] = copy.deepcopy(core["related"])
    if core.get("message"):
        out["note"] = core["message"]
    if core.get("type"):
        out["type"] = core["type"]
    out["deprecatedSource"] = copy.deepcopy(_map(core.get("source")))
    out["deprecatedFirstTimestamp"] = core.get("firstTimestamp")
    out["deprecatedLastTimestamp"] = core.get("lastTimestamp")
    if core.get("count"):
        out["deprecatedCount"] = core["count"]
    return out


def event_from_events_v1(ev: dict[str, Any]) -> dict[str, Any]:
    """``Convert_v1_Event_To_core_Event``: an events.k8s.io/v1 Event as core/v1 for storage."""
    core: JSON = {"kind": "Event", "apiVersion": "v1"}
    core["metadata"] = copy.deepcopy(_meta(ev))
    core["involvedObject"] = copy.deepcopy(_map(ev.get("regarding")))
    if ev.get("reason"):
        core["reason"] = ev["reason"]
    if ev.get("note"):
        core["message"] = ev["note"]
    core["source"] = copy.deepcopy(_map(ev.get("deprecatedSource")))
    core["firstTimestamp"] = ev.get("deprecatedFirstTimestamp")
    core["lastTimestamp"] = ev.get("deprecatedLastTimestamp")
    if ev.get("deprecatedCount"):
        core["count"] = ev["deprecatedCount"]
    if ev.get("type"):
        core["type"] = ev["type"]
    core["eventTime"] = ev.get("eventTime")
    series = ev.get("series")
    if isinstance(series, dict) and series:
        core["series"] = {
            k: copy.deepcopy(series[k]) for k in ("count", "lastObservedTime") if k in series
        }
    if ev.get("action"):
        core["action"] = ev["action"]
    if ev.get("related"):
        core["related"] = copy.deepcopy(ev["related"])
    core["reportingComponent"] = _str(ev.get("reportingController"))
    core["reportingInstance"] = _str(ev.get("reportingInstance"))
    return core


class EventStrategy(Strategy):
    """``pkg/registry/core/event``: one strategy for core/v1 and (``strict``) events.k8s.io/v1.

    The object it sees is always the stored core/v1 form; ``strict`` selects the events.k8s.io
    validation (``ValidateEventCreate/Update`` with a non-v1 request version).
    """

    def __init__(self, strict: bool = False) -> None:
        super().__init__(
            "Event",
            "events.k8s.io" if strict else "",
            "events",
            True,
            extra_fields=_EVENTS_V1_FIELDS if strict else _CORE_EVENT_FIELDS,
        )
        self.strict = strict

    def _extra_fields(self, obj: dict[str, Any]) -> dict[str, str]:
        involved = _map(obj.get("involvedObject"))
        out: dict[str, str] = {}
        for key in (
            "kind",
            "namespace",
            "name",
            "uid",
            "apiVersion",
            "resourceVersion",
            "fieldPath",
        ):
            value = _str(involved.get(key))
            out[f"involvedObject.{key}"] = value
            out[f"regarding.{key}"] = value
        out["reason"] = _str(obj.get("reason"))
        out["reportingComponent"] = _str(obj.get("reportingComponent"))
        out["reportingController"] = out["reportingComponent"]
        out["source"] = _str(_map(obj.get("source")).get("component"))
        out["type"] = _str(obj.get("type"))
        return out

    def _normalize(self, obj: dict[str, Any]) -> None:
        kind = "Event"
        version = "v1"
        _check_meta_decoding(kind, obj, version)
        for key in ("firstTimestamp", "lastTimestamp"):
            _normalize_time_field(kind, obj, key, micro=False)
        _normalize_time_field(kind, obj, "eventTime", micro=True)
        series = obj.get("series")
        if isinstance(series, dict):
            _normalize_time_field(kind, series, "lastObservedTime", micro=True)
        ordered = _core_event_order(obj)
        obj.clear()
        obj.update(ordered)

    def prepare_for_create(self, obj: dict[str, Any]) -> None:
        self._normalize(obj)

    def prepare_for_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        self._normalize(new)

    def prepare_for_status_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        self._normalize(new)

    def _legacy(self, ev: Mapping[str, Any]) -> list[FieldError]:
        errs: list[FieldError] = []
        namespace = _str(_meta(ev).get("namespace"))
        involved_ns = _str(_map(ev.get("involvedObject")).get("namespace"))
        if not ev.get("eventTime"):
            if not involved_ns:
                if namespace not in ("", "default"):
                    errs.append(
                        field.invalid(
                            "involvedObject.namespace",
                            involved_ns,
                            "does not match event.namespace",
                        )
                    )
            elif namespace != involved_ns:
                errs.append(
                    field.invalid(
                        "involvedObject.namespace", involved_ns, "does not match event.namespace"
                    )
                )
        else:
            if not involved_ns and namespace not in ("default", "kube-system"):
                errs.append(
                    field.invalid(
                        "involvedObject.namespace", involved_ns, "does not match event.namespace"
                    )
                )
            controller = _str(ev.get("reportingComponent"))
            # reported at the request's own field name (kubernetes#111506)
            controller_field = "reportingController" if self.strict else "reportingComponent"
            if not controller:
                errs.append(field.required(controller_field))
            errs.extend(_validate_qualified_name(controller, controller_field))
            instance = _str(ev.get("reportingInstance"))
            if not instance:
                errs.append(field.required("reportingInstance"))
            if len(instance) > _REPORTING_LIMIT:
                errs.append(
                    field.invalid(
                        "reportingInstance", "", f"can have at most {_REPORTING_LIMIT} characters"
                    )
                )
            action = _str(ev.get("action"))
            if not action:
                errs.append(field.required("action"))
            if len(action) > _REPORTING_LIMIT:
                errs.append(
                    field.invalid("action", "", f"can have at most {_REPORTING_LIMIT} characters")
                )
            reason = _str(ev.get("reason"))
            if not reason:
                errs.append(field.required("reason"))
            if len(reason) > _REPORTING_LIMIT:
                errs.append(
                    field.invalid("reason", "", f"can have at most {_REPORTING_LIMIT} characters")
                )
            if len(_str(ev.get("message"))) > _NOTE_LIMIT:
                errs.append(
                    field.invalid("message", "", f"can have at most {_NOTE_LIMIT} characters")
                )
        errs.extend(
            field.invalid("namespace", namespace, m) for m in is_dns1123_subdomain(namespace)
        )
        return errs

    @staticmethod
    def _series(ev: Mapping[str, Any]) -> list[FieldError]:
        series = ev.get("series")
        if not isinstance(series, dict):
            return []
        errs: list[FieldError] = []
        count = series.get("count")
        if not isinstance(count, int) or count < 2:
            errs.append(field.invalid("series.count", "", "should be at least 2"))
        if not series.get("lastObservedTime"):
            errs.append(field.required("series.lastObservedTime"))
        return errs

    def validate_create(self, obj: dict[str, Any]) -> list[FieldError]:
        errs = self._legacy(obj)
        if not self.strict:
            return errs
        errs.extend(_validate_object_meta(obj, self.name_fn, kube=True))
        errs.extend(self._series(obj))
        if not obj.get("eventTime"):
            errs.append(field.required("eventTime"))
        etype = _str(obj.get("type"))
        if etype not in ("Normal", "Warning"):
            errs.append(field.invalid("type", "", f"has invalid value: {etype}"))
        if obj.get("firstTimestamp"):
            errs.append(field.invalid("firstTimestamp", "", "needs to be unset"))
        if obj.get("lastTimestamp"):
            errs.append(field.invalid("lastTimestamp", "", "needs to be unset"))
        if obj.get("count"):
            errs.append(field.invalid("count", "", "needs to be unset"))
        source = _map(obj.get("source"))
        if source.get("component") or source.get("host"):
            errs.append(field.invalid("source", "", "needs to be unset"))
        return errs

    def validate_update(self, new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
        errs = self._legacy(new)
        if not self.strict:
            return errs
        errs.extend(_validate_object_meta_update(new, old, kube=True))
        if new.get("series") != old.get("series"):
            errs.extend(self._series(new))
        for key in (
            "involvedObject",
            "reason",
            "message",
            "source",
            "firstTimestamp",
            "lastTimestamp",
            "count",
            "reason",
            "type",
            "eventTime",
            "action",
            "related",
            "reportingComponent",
            "reportingInstance",
        ):
            if _event_field(new, key) != _event_field(old, key):
                path = {"reportingComponent": "reportingController"}.get(key, key)
                value = _event_field(new, key)
                if isinstance(value, dict):
                    value = field.struct(value)
                errs.append(field.immutable(path, value))
        return errs

    def validate_status_update(self, new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
        return self.validate_update(new, old)

    def table(self, objs: list[dict[str, Any]], now: datetime) -> dict[str, Any]:
        columns = [
            _col(
                "Last Seen",
                "The time at which the most recent occurrence of this event was recorded.",
            ),
            _col(
                "Type",
                "Type of this event (Normal, Warning), new types could be added in the future",
            ),
            _col(
                "Reason",
                "This should be a short, machine understandable string that gives the reason for "
                "the transition into the object's current status.",
            ),
            _col("Object", "The object that this event is about."),
            _col(
                "Subobject",
                "If referring to a piece of an object instead of an entire object, this string "
                "should contain a valid JSON/Go field access statement, such as "
                "desiredState.manifest.containers[2]. For example, if the object reference is to "
                "a container within a pod, this would take on a value like: "
                '"spec.containers{name}" (where "name" refers to the name of the container that '
                'triggered the event) or if no container name is specified "spec.containers[2]" '
                "(container with index 2 in this pod). This syntax is chosen only to have some "
                "well-defined way of referencing a part of an object.",
                priority=1,
            ),
            _col(
                "Source",
                "The component reporting this event. Should be a short machine understandable "
                "string.",
                priority=1,
            ),
            _col("Message", "A human-readable description of the status of this operation."),
            _col(
                "First Seen",
                "The time at which the event was first recorded. (Time of server receipt is in "
                "TypeMeta.)",
                priority=1,
            ),
            _col("Count", "The number of times this event has occurred.", priority=1),
            _col("Name", _DESC_NAME, fmt="name", priority=1),
        ]
        rows = []
        for o in objs:
            ev = (
                event_from_events_v1(o)
                if _str(o.get("apiVersion")).startswith("events.k8s.io")
                else o
            )
            rows.append(_event_row(ev, now, o))
        return _table(columns, rows)


def _event_field(ev: Mapping[str, Any], key: str) -> Any:
    value = ev.get(key)
    return None if value in ("", {}, 0) else value


def _event_row(ev: Mapping[str, Any], now: datetime, original: Mapping[str, Any]) -> JSON:
    """``printEvent`` (wide, as server-side tables always are)."""
    first = _since(ev.get("firstTimestamp"), now)
    if not ev.get("firstTimestamp"):
        first = _since(ev.get("eventTime"), now)
    last = _since(ev.get("lastTimestamp"), now)
    if not ev.get("lastTimestamp"):
        last = first
    count = ev.get("count") or 0
    series = ev.get("series")
    if isinstance(series, dict):
        last = _since(series.get("lastObservedTime"), now)
        count = series.get("count") or 0
    elif count == 0:
        count = 1
    involved = _map(ev.get("involvedObject"))
    kind = _str(involved.get("kind")).lower()
    target = f"{kind}/{_str(involved.get('name'))}" if involved.get("name") else kind
    source = _map(ev.get("source"))
    component = _str(source.get("component")) or _str(ev.get("reportingComponent"))
    instance = _str(source.get("host")) or _str(ev.get("reportingInstance"))
    source_str = f"{component}, {instance}" if instance else component
    cells = [
        last,
        _str(ev.get("type")),
        _str(ev.get("reason")),
        target,
        _str(involved.get("fieldPath")),
        source_str,
        _str(ev.get("message")).strip(),
        first,
        count,
        _str(_meta(ev).get("name")),
    ]
    return _row(original, cells)


# =============================================================================================
# Leases (pkg/apis/coordination/validation, pkg/registry/coordination/lease/strategy.go)
# =============================================================================================


class LeaseStrategy(Strategy):
    """``pkg/registry/coordination/lease`` (CoordinatedLeaderElection is off in v1.32)."""

    def __init__(self) -> None:
        super().__init__("Lease", "coordination.k8s.io", "leases", True)

    @staticmethod
    def _normalize(obj: dict[str, Any]) -> None:
        _check_meta_decoding("Lease", obj)
        spec = obj.get("spec")
        for key in ("acquireTime", "renewTime"):
            _normalize_time_field("Lease", spec, key, micro=True)

    def prepare_for_create(self, obj: dict[str, Any]) -> None:
        self._normalize(obj)
        spec = obj.get("spec")
        if isinstance(spec, dict):
            spec.pop("strategy", None)
            spec.pop("preferredHolder", None)

    def prepare_for_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        self._normalize(new)
        spec, old_spec = new.get("spec"), _map(old.get("spec"))
        if isinstance(spec, dict):
            for key in ("strategy", "preferredHolder"):
                if old_spec.get(key) is None:
                    spec.pop(key, None)

    def validate_create(self, obj: dict[str, Any]) -> list[FieldError]:
        errs = _validate_object_meta(obj, self.name_fn, kube=False)
        errs.extend(_validate_lease_spec(_map(obj.get("spec"))))
        return errs

    def validate_update(self, new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
        errs = _validate_object_meta_update(new, old, kube=False)
        errs.extend(_validate_lease_spec(_map(new.get("spec"))))
        return errs

    def table(self, objs: list[dict[str, Any]], now: datetime) -> dict[str, Any]:
        holder = _col(
            "Holder",
            "holderIdentity contains the identity of the holder of a current lease. If "
            "Coordinated Leader Election is used, the holder identity must be equal to the "
            "elected LeaseCandidate.metadata.name field.",
        )
        return _name_cell_age_table(
            holder, objs, now, lambda o: _map(o.get("spec")).get("holderIdentity")
        )


def _validate_lease_spec(spec: Mapping[str, Any]) -> list[FieldError]:
    errs: list[FieldError] = []
    duration = spec.get("leaseDurationSeconds")
    if isinstance(duration, int) and duration <= 0:
        errs.append(field.invalid("spec.leaseDurationSeconds", duration, "must be greater than 0"))
    transitions = spec.get("leaseTransitions")
    if isinstance(transitions, int) and transitions < 0:
        errs.append(
            field.invalid(
                "spec.leaseTransitions", transitions, "must be greater than or equal to 0"
            )
        )
    return errs


# =============================================================================================
# CustomResourceDefinitions and custom resources (apiextensions-apiserver
# pkg/registry/{customresource,customresourcedefinition})
# =============================================================================================


class CRDStrategy(Strategy):
    """``customresourcedefinition/strategy.go``; validation lives in ``gpusched.sim.crd``."""

    def __init__(self) -> None:
        super().__init__(
            "CustomResourceDefinition",
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            False,
            has_status=True,
            tracks_generation=True,
        )

    def prepare_for_create(self, obj: dict[str, Any]) -> None:
        obj["status"] = {}

    def prepare_for_status_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        # ResetObjectMetaForStatus(&newObj.ObjectMeta, &newObj.ObjectMeta) upstream is a no-op:
        # metadata changes sent to /status are kept.
        _keep(new, old, "spec")

    def validate_create(self, obj: dict[str, Any]) -> list[FieldError]:
        return []

    def validate_update(self, new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
        return []

    def validate_status_update(self, new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
        return []


class CustomResourceStrategy(Strategy):
    """``customresource/strategy.go`` and the CRD's ``additionalPrinterColumns`` table."""

    def __init__(
        self,
        group: str,
        kind: str,
        resource: str,
        namespaced: bool,
        has_status: bool,
        printer_columns: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        super().__init__(
            kind, group, resource, namespaced, has_status=has_status, tracks_generation=True
        )
        columns = [dict(c) for c in printer_columns]
        if not columns:
            columns = [
                {
                    "name": "Age",
                    "type": "date",
                    "description": _DESC_CREATED,
                    "jsonPath": ".metadata.creationTimestamp",
                }
            ]
        self.printer_columns: list[dict[str, Any]] = columns

    def prepare_for_create(self, obj: dict[str, Any]) -> None:
        if self.has_status:
            obj.pop("status", None)

    def prepare_for_status_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        """Everything but status (and managedFields) comes from the stored object."""
        status_present = "status" in new
        status = new.get("status")
        managed = _meta(new).get("managedFields")
        new.clear()
        new.update(copy.deepcopy(old))
        new.pop("status", None)
        if status_present:
            new["status"] = status
        meta = _ensure(new, "metadata")
        if managed is None:
            meta.pop("managedFields", None)
        else:
            meta["managedFields"] = managed

    def validate_create(self, obj: dict[str, Any]) -> list[FieldError]:
        # crd.validate_custom_resource checks metadata.name and the schema.
        return _validate_object_meta(obj, None, kube=False)

    def validate_update(self, new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
        return _validate_object_meta_update(new, old, kube=False)

    def validate_status_update(self, new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
        return _validate_object_meta_update(new, old, kube=False)

    def table(self, objs: list[dict[str, Any]], now: datetime) -> dict[str, Any]:
        columns = [_NAME_COL]
        for c in self.printer_columns:
            json_path = _str(c.get("jsonPath"))
            columns.append(
                _col(
                    _str(c.get("name")),
                    _str(c.get("description"))
                    or f"Custom resource definition column (in JSONPath format): {json_path}",
                    type_=_str(c.get("type")),
                    fmt=_str(c.get("format")),
                    priority=int(c.get("priority") or 0),
                )
            )
        rows = []
        for o in objs:
            cells: list[Any] = [_str(_meta(o).get("name"))]
            for c in self.printer_columns:
                found, value = _jsonpath_first(o, _str(c.get("jsonPath")))
                if not found:
                    cells.append(None)
                elif c.get("type") == "string":
                    cells.append(go_sprint(value) if value is not None else None)
                else:
                    cells.append(_cell_for_json_value(_str(c.get("type")), value, now))
            rows.append(_row(o, cells))
        return _table(columns, rows)


# =============================================================================================
# Lookup
# =============================================================================================


def strategy_for(group: str, kind: str) -> Strategy:
    """The strategy of a built-in kind; a generic :class:`Strategy` for anything else."""
    builders: dict[tuple[str, str], Callable[[], Strategy]] = {
        ("", "Pod"): PodStrategy,
        ("", "Node"): NodeStrategy,
        ("", "Namespace"): NamespaceStrategy,
        ("", "Event"): EventStrategy,
        ("events.k8s.io", "Event"): lambda: EventStrategy(strict=True),
        ("coordination.k8s.io", "Lease"): LeaseStrategy,
        ("apiextensions.k8s.io", "CustomResourceDefinition"): CRDStrategy,
    }
    builder = builders.get((group, kind))
    if builder is not None:
        return builder()
    return Strategy(kind, group)


def generic_strategy(
    group: str,
    kind: str,
    resource: str,
    namespaced: bool,
    has_status: bool,
    printer_columns: Sequence[Mapping[str, Any]] = (),
) -> Strategy:
    """The strategy of a custom resource served from a CRD version."""
    return CustomResourceStrategy(group, kind, resource, namespaced, has_status, printer_columns)
