"""CustomResourceDefinition semantics for the simulated kube-apiserver (v1.32).

Pure functions over JSON values (no I/O, inputs never mutated), called by the registry for
everything a real server does with CRDs and custom resources:

* :func:`default_crd` / :func:`validate_crd`: v1 defaulting and
  ``ValidateCustomResourceDefinition`` (a :class:`CRDError` carries the 422 Status);
  :func:`crd_initial_status` / :func:`crd_status_after_create`: the status before and after
  the naming and establishing controllers; :class:`CRDInfo`: what routing needs.
* :func:`prepare_custom_resource`: the CR decode pipeline (prune unknown fields, drop
  non-nullable nulls, coerce embedded ``metadata``, apply defaults, in the codec's order);
  :func:`unknown_field_paths` reports what pruning drops (``fieldValidation``).
* :func:`validate_custom_resource`: ``customResourceStrategy.Validate`` (name, the OpenAPI v3
  schema with kube-openapi's messages, embedded resources, list-type uniqueness).

Errors are :mod:`gpusched.sim.field` errors. Each section below names the upstream files it
follows (apiextensions-apiserver, kube-openapi). Cost: a CR is walked once against its schema
and once more per ``allOf``/``anyOf``/``oneOf``/``not`` branch; ``pattern`` regexes are cached.

Known differences: errors from different properties come in schema order (Go's map order is
random); CEL rules (``x-kubernetes-validations``) are neither compiled nor evaluated and
validation ratcheting is not implemented; Go struct bad values (``spec.versions`` in the
storage-version check, the root schema in the status check) print as JSON; formats are
Python re-implementations of the Go checks (``email``, ``uri``, ``hostname``, ``duration``
approximate) and ``pattern`` runs on ``re`` (agreeing with RE2 on what a CRD may hold);
structural completeness and naming conflicts between CRDs are not checked.
"""

from __future__ import annotations

import base64
import binascii
import copy
import dataclasses
import datetime
import enum
import functools
import ipaddress
import math
import re
import sys
import urllib.parse
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, NamedTuple

from gpusched.sim import field
from gpusched.sim.apimachinery import (
    DNS1123_LABEL_FMT,
    DNS1123_SUBDOMAIN_FMT,
    go_format_float,
    go_json,
    go_quote,
    is_dns1123_subdomain,
    name_is_dns_subdomain,
)
from gpusched.sim.apimachinery import is_dns1035_label as _is_dns1035_label
from gpusched.sim.errors import invalid_status
from gpusched.sim.field import ErrorType, FieldError
from gpusched.sim.field import format_bad_value as format_go_value

__all__ = [
    "CRD_GROUP",
    "CRD_KIND",
    "CRDError",
    "CRDInfo",
    "CRDVersionInfo",
    "ErrorType",
    "FieldError",
    "crd_initial_status",
    "crd_status_after_create",
    "default_crd",
    "format_go_value",
    "go_json",
    "go_quote",
    "invalid_status",
    "is_dns1035_label",
    "is_dns1123_subdomain",
    "prepare_custom_resource",
    "strict_decoding_message",
    "unknown_field_paths",
    "unknown_field_warnings",
    "validate_crd",
    "validate_custom_resource",
]

CRD_GROUP: Final = "apiextensions.k8s.io"
CRD_KIND: Final = "CustomResourceDefinition"

# ---------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _str(v: Any) -> str:
    return v if isinstance(v, str) else ""


def _map(v: Any) -> Mapping[str, Any]:
    return v if isinstance(v, Mapping) else {}


def _num(v: Any) -> float | None:
    return float(v) if _is_number(v) else None


# ---------------------------------------------------------------------------------------------
# The 422 of a failed CRD validation (apimachinery pkg/api/errors NewInvalid)
# ---------------------------------------------------------------------------------------------


class CRDError(ValueError):
    """A validation failure: the field errors plus the object they are about."""

    def __init__(
        self,
        errors: Sequence[FieldError],
        *,
        kind: str = CRD_KIND,
        group: str = CRD_GROUP,
        name: str = "",
    ) -> None:
        self.errors: list[FieldError] = list(errors)
        self.kind = kind
        self.group = group
        self.name = name
        super().__init__(self.status()["message"])

    def status(self) -> dict[str, Any]:
        """The 422 ``Status`` a real server answers with."""
        return invalid_status(self.kind, self.group, self.name, self.errors)


# ---------------------------------------------------------------------------------------------
# Name validation (k8s.io/apimachinery/pkg/util/validation)
# ---------------------------------------------------------------------------------------------


def is_dns1035_label(value: str) -> list[str]:
    """``validation.IsDNS1035Label`` (see :mod:`gpusched.sim.apimachinery`)."""
    return _is_dns1035_label(value)


def _validate_object_meta_name(
    meta: Mapping[str, Any], name_fn: Callable[[str, bool], list[str]], path: str
) -> list[FieldError]:
    """The name/generateName part of ``ValidateObjectMeta``."""
    errs: list[FieldError] = []
    generate_name = meta.get("generateName") or ""
    name = meta.get("name") or ""
    if isinstance(generate_name, str) and generate_name:
        for msg in name_fn(generate_name, True):
            errs.append(field.invalid(field.child(path, "generateName"), generate_name, msg))
    if not name:
        errs.append(field.required(field.child(path, "name"), "name or generateName is required"))
    elif isinstance(name, str):
        for msg in name_fn(name, False):
            errs.append(field.invalid(field.child(path, "name"), name, msg))
    return errs


# ---------------------------------------------------------------------------------------------
# Structural schema accessors (pkg/apiserver/schema: only properties/items/additionalProperties
# shape the object; everything inside allOf/anyOf/oneOf/not is value validation only)
# ---------------------------------------------------------------------------------------------

_Schema = Mapping[str, Any]
_META_FIELDS: Final = frozenset({"apiVersion", "kind", "metadata"})


def _props(s: _Schema) -> Mapping[str, Any]:
    p = s.get("properties")
    return p if isinstance(p, Mapping) else {}


def _prop(s: _Schema | None, k: str) -> _Schema | None:
    if s is None:
        return None
    p = _props(s).get(k)
    return p if isinstance(p, Mapping) else None


def _has_addl(s: _Schema) -> bool:
    return "additionalProperties" in s and s["additionalProperties"] is not None


def _addl(s: _Schema) -> _Schema | None:
    """``s.AdditionalProperties.Structural`` (``None`` for ``true``/``false``)."""
    a = s.get("additionalProperties")
    return a if isinstance(a, Mapping) else None


def _items(s: _Schema | None) -> _Schema | None:
    if s is None:
        return None
    it = s.get("items")
    return it if isinstance(it, Mapping) else None


def _flag(s: _Schema | None, key: str) -> bool:
    return s is not None and s.get(key) is True


def _preserve(s: _Schema | None) -> bool:
    return _flag(s, "x-kubernetes-preserve-unknown-fields")


def _embedded(s: _Schema | None) -> bool:
    return _flag(s, "x-kubernetes-embedded-resource")


def _nullable(s: _Schema | None) -> bool:
    return _flag(s, "nullable")


def _has_default(s: _Schema | None) -> bool:
    return s is not None and "default" in s and s["default"] is not None


def _field_schema(s: _Schema | None, k: str) -> _Schema | None:
    """Schema of map key ``k``: its property, else additionalProperties' schema."""
    if s is None:
        return None
    p = _prop(s, k)
    if p is not None:
        return p
    if _has_addl(s):
        return _addl(s)
    return None


# ---------------------------------------------------------------------------------------------
# Pruning, null pruning, embedded metadata coercion and defaulting (apiextensions-apiserver
# pkg/apiserver/schema/{pruning,defaulting,objectmeta}, registry/customresource/strategy.go)
# ---------------------------------------------------------------------------------------------


class _PruneTracker:
    def __init__(self) -> None:
        self.paths: list[str] = []

    def record(self, parent: list[str], key: str) -> None:
        self.paths.append("".join([*parent, "." if parent else "", key]))


def _prune(
    x: Any, s: _Schema | None, root_embedded: bool, parent: list[str], t: _PruneTracker
) -> None:
    if root_embedded and s is None:
        s = {}
    embedded = root_embedded or _embedded(s)
    if s is not None and _preserve(s):
        _skip_prune(x, s, embedded, parent, t)
        return
    if isinstance(x, dict):
        if s is None:
            for k in list(x):
                t.record(parent, k)
                del x[k]
            return
        _prune_fields(x, s, embedded, parent, t, drop_unknown=True)
    elif isinstance(x, list):
        items = None if s is None else _items(s)
        for i, v in enumerate(x):
            _prune(v, items, False, [*parent, "[", str(i), "]"], t)


def _prune_fields(
    x: dict[str, Any],
    s: _Schema,
    embedded: bool,
    parent: list[str],
    t: _PruneTracker,
    *,
    drop_unknown: bool,
) -> None:
    """The field loop of ``prune`` and ``skipPrune``: a field the schema knows is pruned by its
    schema; an unknown one is dropped (and recorded) by ``prune`` only."""
    for k in list(x):
        if embedded and k in _META_FIELDS:
            continue
        prop = _prop(s, k)
        sub = [*parent, "." if parent else "", k]
        if prop is not None:
            _prune(x[k], prop, False, sub, t)
        elif _has_addl(s):
            _prune(x[k], _addl(s), False, sub, t)
        elif drop_unknown:
            if k not in _META_FIELDS or parent:
                t.record(parent, k)
            del x[k]


def _skip_prune(
    x: Any, s: _Schema | None, embedded: bool, parent: list[str], t: _PruneTracker
) -> None:
    if s is None:
        return
    if isinstance(x, dict):
        _prune_fields(x, s, embedded, parent, t, drop_unknown=False)
    elif isinstance(x, list):
        items = _items(s)
        for i, v in enumerate(x):
            _skip_prune(v, items, _embedded(items), [*parent, "[", str(i), "]"], t)


def _prune_non_nullable_nulls(x: Any, s: _Schema | None) -> None:
    """``PruneNonNullableNullsWithoutDefaults``."""
    if isinstance(x, dict):
        for k in list(x):
            fs = _field_schema(s, k)
            v = x[k]
            if v is None and fs is not None and not _nullable(fs) and not _has_default(fs):
                del x[k]
            else:
                _prune_non_nullable_nulls(v, fs)
    elif isinstance(x, list):
        items = _items(s)
        for v in x:
            _prune_non_nullable_nulls(v, items)


def _apply_defaults(x: Any, s: _Schema | None) -> None:
    """``structuraldefaulting.Default``: only where the parent exists."""
    if s is None:
        return
    if isinstance(x, dict):
        for k, prop in _props(s).items():
            if not isinstance(prop, Mapping) or not _has_default(prop):
                continue
            if k not in x or (x[k] is None and not _nullable(prop)):
                x[k] = copy.deepcopy(prop["default"])
        addl = _addl(s)
        for k in list(x):
            prop = _prop(s, k)
            if prop is not None:
                _apply_defaults(x[k], prop)
            elif _has_addl(s):
                if x[k] is None and addl is not None and not _nullable(addl):
                    x[k] = copy.deepcopy(addl.get("default"))
                _apply_defaults(x[k], addl)
    elif isinstance(x, list):
        items = _items(s)
        for i in range(len(x)):
            if x[i] is None and items is not None and not _nullable(items):
                x[i] = copy.deepcopy(items.get("default"))
            _apply_defaults(x[i], items)


# metav1.ObjectMeta JSON fields; an embedded resource's metadata is round-tripped through it.
_OBJECT_META_FIELDS: Final = (
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
)
_OBJECT_META_POINTERS: Final = frozenset({"deletionTimestamp", "deletionGracePeriodSeconds"})


def _coerce_object_meta(meta: Any) -> Any:
    if not isinstance(meta, dict):
        return meta
    out: dict[str, Any] = {}
    for k in _OBJECT_META_FIELDS:
        if k not in meta:
            continue
        v = meta[k]
        if k in _OBJECT_META_POINTERS:
            if v is not None:
                out[k] = v
        elif v not in (None, "", 0, {}, []) or v is False:
            out[k] = v
    return out


def _coerce_embedded(x: Any, s: _Schema | None) -> None:
    """``schemaobjectmeta.Coerce`` below the root: normalize embedded ``metadata``."""
    if s is None:
        return
    if isinstance(x, dict):
        if _embedded(s) and isinstance(x.get("metadata"), dict):
            x["metadata"] = _coerce_object_meta(x["metadata"])
        for k, v in x.items():
            prop = _prop(s, k)
            if prop is not None:
                _coerce_embedded(v, prop)
            elif _has_addl(s):
                _coerce_embedded(v, _addl(s))
    elif isinstance(x, list):
        items = _items(s)
        for v in x:
            _coerce_embedded(v, items)


def prepare_custom_resource(obj: Mapping[str, Any], schema: _Schema | None) -> dict[str, Any]:
    """What the CR handler's decoder does to a request body before validation.

    Prunes fields the structural ``schema`` (a version's ``openAPIV3Schema``) does not
    declare -- never ``apiVersion``, ``kind`` or ``metadata`` at the root, nor inside
    ``x-kubernetes-embedded-resource`` objects, nor below
    ``x-kubernetes-preserve-unknown-fields`` -- then removes ``null`` values of non-nullable
    fields without a default, normalizes embedded resources' ``metadata`` and finally applies
    ``default`` values (only where the parent object exists; defaults are themselves defaulted).
    Returns a new object; ``obj`` is not modified.
    """
    out = copy.deepcopy(dict(obj))
    _prune(out, schema, True, [], _PruneTracker())
    _prune_non_nullable_nulls(out, schema)
    _coerce_embedded(out, schema)
    _apply_defaults(out, schema)
    return out


def unknown_field_paths(obj: Mapping[str, Any], schema: _Schema | None) -> list[str]:
    """The sorted paths pruning drops from ``obj`` (``spec.gpus[0].foo``), as upstream tracks
    them for ``fieldValidation``; root ``apiVersion``/``kind``/``metadata`` never appear."""
    t = _PruneTracker()
    _prune(copy.deepcopy(dict(obj)), schema, True, [], t)
    return sorted(t.paths)


def unknown_field_warnings(obj: Mapping[str, Any], schema: _Schema | None) -> list[str]:
    """``Warning`` header texts for ``fieldValidation=Warn``: ``unknown field "spec.foo"``."""
    return [f"unknown field {go_quote(p)}" for p in unknown_field_paths(obj, schema)]


def strict_decoding_message(paths: Sequence[str]) -> str:
    """The 400 message for ``fieldValidation=Strict``: ``strict decoding error: unknown field
    "spec.foo", unknown field "spec.bar"``."""
    return "strict decoding error: " + ", ".join(f"unknown field {go_quote(p)}" for p in paths)


# ---------------------------------------------------------------------------------------------
# kube-openapi schema validation (pkg/validation/validate/{schema,type,object_validator,
# slice_validator,schema_props,validator,values,result}.go, pkg/validation/errors/schema.go;
# apiextensions-apiserver pkg/apiserver/validation/validation.go kubeOpenAPIResultToFieldErrors)
# ---------------------------------------------------------------------------------------------


class _Code(enum.IntEnum):
    COMPOSITE = 422
    INVALID_TYPE = 600
    REQUIRED = 601
    TOO_LONG = 602
    TOO_SHORT = 603
    PATTERN = 604
    ENUM = 605
    MULTIPLE_OF = 606
    MAX = 607
    MIN = 608
    UNIQUE = 609
    MAX_ITEMS = 610
    MIN_ITEMS = 611
    NO_ADDITIONAL_ITEMS = 612
    TOO_FEW_PROPERTIES = 613
    TOO_MANY_PROPERTIES = 614
    UNALLOWED_PROPERTY = 615
    FAILED_ALL_PATTERN_PROPS = 616
    MULTIPLE_OF_MUST_BE_POSITIVE = 617


@dataclasses.dataclass(frozen=True)
class _OAError:
    """A kube-openapi ``*errors.Validation`` (or, when ``composite``, an ``errors.New`` one)."""

    code: _Code
    name: str
    message: str
    value: Any = None
    valid: Any = None
    values: tuple[Any, ...] | None = None
    composite: bool = False


class _Result:
    __slots__ = ("errors", "match_count")

    def __init__(self) -> None:
        self.errors: list[_OAError] = []
        self.match_count = 0

    def add(self, *errs: _OAError) -> None:
        for e in errs:
            if all(e.message != r.message for r in self.errors):
                self.errors.append(e)

    def merge(self, *others: _Result | None) -> _Result:
        for o in others:
            if o is not None:
                self.add(*o.errors)
                self.match_count += o.match_count
        return self

    def inc(self) -> None:
        self.match_count += 1

    @property
    def valid(self) -> bool:
        return not self.errors


def _err(e: _OAError) -> _Result:
    r = _Result()
    r.errors.append(e)
    return r


_IN: Final = "body"


def _oa_invalid_type(name: str, type_name: str, value: Any) -> _OAError:
    if isinstance(value, str):
        msg = f"{name} in {_IN} must be of type {type_name}: {go_quote(value)}"
    else:
        msg = f"{name} in {_IN} must be of type {type_name}"
    return _OAError(_Code.INVALID_TYPE, name, msg, value=value)


def _kind(x: Any) -> str:
    if x is None:
        return "nil"
    if isinstance(x, bool):
        return "bool"
    if isinstance(x, str):
        return "string"
    if isinstance(x, int):
        return "int"
    if isinstance(x, float):
        return "float"
    if isinstance(x, Mapping):
        return "map"
    if isinstance(x, list | tuple):
        return "slice"
    return "other"


_SCHEMA_INFO: Final = {
    "bool": ("boolean", ""),
    "string": ("string", ""),
    "int": ("integer", "int64"),
    "float": ("number", "float64"),
    "slice": ("array", ""),
    "map": ("object", ""),
}


def _is_json_integer(f: float) -> bool:
    """``swag.IsFloat64AJSONInteger``: integral up to a relative error of 1e-9."""
    if math.isnan(f) or math.isinf(f) or f < -(1 << 53) + 1 or f > (1 << 53) - 1:
        return False
    if f == math.trunc(f):
        return True
    if f < 0:  # Go's uint64(f) of a negative float is far away: never close enough
        return False
    g = float(math.trunc(f))
    diff = abs(f - g)
    if g == 0 or diff < sys.float_info.min * sys.float_info.epsilon:
        return diff < 1e-9 * 5e-324
    return diff / min(f + g, sys.float_info.max) < 1e-9


def _schema_types(s: _Schema) -> list[str]:
    if s.get("x-kubernetes-int-or-string") is True:
        return ["integer", "string"]
    t = s.get("type")
    return [t] if isinstance(t, str) and t else []


# Formats a CRD schema may use (apiserver/validation/formats.go, 1.34+); others are stripped.
_SUPPORTED_FORMATS: Final = frozenset(
    {
        "bsonobjectid",
        "uri",
        "email",
        "hostname",
        "ipv4",
        "ipv6",
        "cidr",
        "mac",
        "uuid",
        "uuid3",
        "uuid4",
        "uuid5",
        "isbn",
        "isbn10",
        "isbn13",
        "creditcard",
        "ssn",
        "hexcolor",
        "rgbcolor",
        "byte",
        "password",
        "date",
        "duration",
        "datetime",
        "k8s-short-name",
        "k8s-long-name",
    }
)


def _normalize_format(f: str) -> str:
    return f if f.startswith("k8s-") else f.replace("-", "")


def _schema_format(s: _Schema) -> str:
    """The format after ``StripUnsupportedFormatsPostProcess`` (``""`` if unsupported)."""
    f = s.get("format")
    if isinstance(f, str) and f and _normalize_format(f) in _SUPPORTED_FORMATS:
        return f
    return ""


def _type_validate(s: _Schema, data: Any, path: str) -> _Result:
    types = _schema_types(s)
    fmt = _schema_format(s)
    res = _Result()
    res.inc()
    if data is None:
        if types and "null" not in types and not _nullable(s):
            return _err(_oa_invalid_type(path, ",".join(types), "null"))
        return res
    kind = _kind(data)
    sch_type, data_format = _SCHEMA_INFO.get(kind, ("", ""))
    is_float_int = sch_type == "number" and _is_json_integer(float(data)) and "integer" in types
    is_int_float = sch_type == "integer" and "number" in types
    if (
        kind not in ("string", "slice")
        and fmt
        and not (sch_type in types or data_format == fmt or is_float_int or is_int_float)
    ):
        return _err(_oa_invalid_type(path, fmt, data_format))
    if not ("number" in types or "integer" in types) and fmt and kind in ("string", "slice"):
        return res
    if not (sch_type in types or is_float_int or is_int_float):
        return _err(_oa_invalid_type(path, ",".join(types), sch_type))
    return res


def _as_int(v: Any) -> int | None:
    if _is_int(v):
        return int(v)
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return None


_GO_RE_UNSUPPORTED: Final = re.compile(r"\(\?<?[=!]|\\[1-9]|\(\?P=")


def _compile_pattern(pattern: str) -> re.Pattern[str]:
    m = _GO_RE_UNSUPPORTED.search(pattern)
    if m:
        tok = m.group(0)
        if tok.startswith("\\"):
            raise re.error(f"invalid escape sequence: `{tok}`")
        raise re.error(f"invalid or unsupported Perl syntax: `{tok}`")
    return _cached_compile(pattern)


_POSIX_CLASSES: Final = {
    "[:alnum:]": "0-9A-Za-z",
    "[:alpha:]": "A-Za-z",
    "[:ascii:]": "\\x00-\\x7F",
    "[:blank:]": "\\t ",
    "[:cntrl:]": "\\x00-\\x1F\\x7F",
    "[:digit:]": "0-9",
    "[:graph:]": "!-~",
    "[:lower:]": "a-z",
    "[:print:]": " -~",
    "[:punct:]": "!-/:-@\\[-`{-~",
    "[:space:]": "\\t\\n\\v\\f\\r ",
    "[:upper:]": "A-Z",
    "[:word:]": "0-9A-Za-z_",
    "[:xdigit:]": "0-9A-Fa-f",
}


@functools.lru_cache(maxsize=1024)
def _cached_compile(pattern: str) -> re.Pattern[str]:
    """Compile a Go (RE2) pattern with Python's ``re``.

    RE2's ``\\d``, ``\\w``, ``\\s`` and ``\\b`` are ASCII-only (hence ``re.ASCII``), it spells
    end-of-text ``\\z`` (Python: ``\\Z``) and it knows POSIX classes such as ``[:alpha:]``.
    """
    translated = pattern.replace("\\z", "\\Z")
    for posix, ranges in _POSIX_CLASSES.items():
        translated = translated.replace(posix, ranges)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return re.compile(translated, re.ASCII)


def _bound(code: _Code, path: str, text: str, value: Any, limit: int) -> _OAError:
    """kube-openapi's TooLong, TooShort, TooManyItems, ...: ``<path> in body should <text>``."""
    return _OAError(code, path, f"{path} in {_IN} should {text}", value=value, valid=limit)


def _string_validate(s: _Schema, data: str, path: str) -> _Result | None:
    n = len(data)
    max_len = _as_int(s.get("maxLength"))
    if max_len is not None and n > max_len:
        return _err(_bound(_Code.TOO_LONG, path, f"be at most {max_len} chars long", data, max_len))
    min_len = _as_int(s.get("minLength"))
    if min_len is not None and n < min_len:
        return _err(
            _bound(_Code.TOO_SHORT, path, f"be at least {min_len} chars long", data, min_len)
        )
    pattern = s.get("pattern")
    if isinstance(pattern, str) and pattern:
        try:
            matched = _compile_pattern(pattern).search(data) is not None
            shown = pattern
        except re.error as exc:
            matched = False
            shown = f"{pattern}, but pattern is invalid: error parsing regexp: {exc}"
        if not matched:
            return _err(
                _OAError(_Code.PATTERN, path, f"{path} in {_IN} should match '{shown}'", value=data)
            )
    return None


def _format_validate(s: _Schema, data: str, path: str) -> _Result | None:
    fmt = _schema_format(s)
    check = _FORMAT_CHECKS.get(_normalize_format(fmt))
    if check is None or check(data):
        return None
    return _err(_oa_invalid_type(path, fmt, data))


def _number_validate(s: _Schema, data: int | float, path: str) -> _Result:
    res = _Result()
    r_mult, r_min, r_max = _Result(), _Result(), _Result()
    is_int = _is_int(data)
    factor = _num(s.get("multipleOf"))
    if factor is not None:
        ifactor = math.trunc(factor) if math.isfinite(factor) else 0
        if is_int and ifactor != 0:
            assert isinstance(data, int)
            if ifactor < 0:
                r_mult.add(_must_be_positive(path, ifactor))
            elif data % ifactor != 0:
                r_mult.add(_not_multiple(path, ifactor, data))
        elif factor < 0:
            r_mult.add(_must_be_positive(path, factor))
        elif factor > 0:
            d = float(data)
            m = 1 / factor * d if factor < 1 else d / factor
            if not _is_json_integer(m):
                r_mult.add(_not_multiple(path, factor, data))
    mx = _num(s.get("maximum"))
    if mx is not None:
        excl = s.get("exclusiveMaximum") is True
        bound: int | float = math.trunc(mx) if is_int and math.isfinite(mx) else mx
        if (not excl and data > bound) or (excl and data >= bound):
            word = "less than" if excl else "less than or equal to"
            shown = str(bound) if isinstance(bound, int) else go_format_float(bound)
            r_max.add(
                _OAError(_Code.MAX, path, f"{path} in {_IN} should be {word} {shown}", value=data)
            )
    mn = _num(s.get("minimum"))
    if mn is not None:
        excl = s.get("exclusiveMinimum") is True
        bound = math.trunc(mn) if is_int and math.isfinite(mn) else mn
        if (not excl and data < bound) or (excl and data <= bound):
            word = "greater than" if excl else "greater than or equal to"
            shown = str(bound) if isinstance(bound, int) else go_format_float(bound)
            r_min.add(
                _OAError(_Code.MIN, path, f"{path} in {_IN} should be {word} {shown}", value=data)
            )
    res.merge(r_mult, r_min, r_max)
    res.inc()
    return res


def _must_be_positive(path: str, factor: int | float) -> _OAError:
    shown = str(factor) if isinstance(factor, int) else go_format_float(factor)
    return _OAError(
        _Code.MULTIPLE_OF_MUST_BE_POSITIVE,
        path,
        f"factor MultipleOf declared for {path} must be positive: {shown}",
        value=factor,
    )


def _not_multiple(path: str, factor: int | float, data: Any) -> _OAError:
    shown = str(factor) if isinstance(factor, int) else go_format_float(factor)
    return _OAError(
        _Code.MULTIPLE_OF, path, f"{path} in {_IN} should be a multiple of {shown}", value=data
    )


def _go_deep_equal(a: Any, b: Any) -> bool:
    """``reflect.DeepEqual`` on unstructured JSON (int64 and float64 never compare equal)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if isinstance(a, float) and isinstance(b, float):
        return a == b
    if isinstance(a, str) and isinstance(b, str):
        return a == b
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_go_deep_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_go_deep_equal(x, y) for x, y in zip(a, b, strict=True))
    return False


def _enum_match(data: Any, e: Any) -> bool:
    """``reflect.ValueOf(data).Convert(TypeOf(e))`` then ``DeepEqual`` (basicCommonValidator)."""
    if e is None or data is None:
        return False
    if isinstance(e, bool) or isinstance(data, bool):
        return isinstance(e, bool) and isinstance(data, bool) and e == data
    if isinstance(e, int):
        if isinstance(data, int):
            return data == e
        if isinstance(data, float) and math.isfinite(data):
            return math.trunc(data) == e
        return False
    if isinstance(e, float):
        return _is_number(data) and float(data) == e
    if isinstance(e, str):
        if isinstance(data, str):
            return data == e
        if isinstance(data, int):  # Go converts an integer to the string of that rune
            rune = chr(data) if 0 <= data <= 0x10FFFF and not 0xD800 <= data <= 0xDFFF else "\ufffd"
            return rune == e
        return False
    return _go_deep_equal(data, e)


def _common_validate(s: _Schema, data: Any, path: str) -> _Result | None:
    enum_values = s.get("enum")
    if not isinstance(enum_values, list | tuple) or not enum_values:
        return None
    if any(_enum_match(data, e) for e in enum_values):
        return None
    return _err(
        _OAError(
            _Code.ENUM,
            path,
            f"{path} in {_IN} should be one of {enum_values}",
            value=data,
            values=tuple(enum_values),
        )
    )


def _slice_validate(s: _Schema, data: Sequence[Any], path: str) -> _Result:
    res = _Result()
    items = _items(s)
    if items is not None:
        for i, v in enumerate(data):
            res.merge(_validate(items, v, f"{path}[{i}]"))
    size = len(data)
    min_items = _as_int(s.get("minItems"))
    if min_items is not None and size < min_items:
        res.add(_bound(_Code.MIN_ITEMS, path, f"have at least {min_items} items", size, min_items))
    max_items = _as_int(s.get("maxItems"))
    if max_items is not None and size > max_items:
        res.add(_bound(_Code.MAX_ITEMS, path, f"have at most {max_items} items", size, max_items))
    if s.get("uniqueItems") is True:
        seen: list[Any] = []
        for v in data:
            if any(_go_deep_equal(v, u) for u in seen):
                res.add(
                    _OAError(_Code.UNIQUE, path, f"{path} in {_IN} shouldn't contain duplicates")
                )
                break
            seen.append(v)
    res.inc()
    return res


def _object_validate(s: _Schema, data: Mapping[str, Any], path: str) -> _Result:
    num_keys = len(data)
    min_props = _as_int(s.get("minProperties"))
    if min_props is not None and num_keys < min_props:
        return _err(
            _bound(
                _Code.TOO_FEW_PROPERTIES,
                path,
                f"have at least {min_props} properties",
                num_keys,
                min_props,
            )
        )
    max_props = _as_int(s.get("maxProperties"))
    if max_props is not None and num_keys > max_props:
        return _err(
            _bound(
                _Code.TOO_MANY_PROPERTIES,
                path,
                f"have at most {max_props} properties",
                num_keys,
                max_props,
            )
        )
    res = _Result()
    props = _props(s)
    addl = s.get("additionalProperties")
    if addl is False:
        for k in data:
            if k not in props:
                res.add(
                    _OAError(
                        _Code.UNALLOWED_PROPERTY,
                        path,
                        f"{path}.{k} in {_IN} is a forbidden property",
                        value=k,
                    )
                )
    elif isinstance(addl, Mapping):
        for k, v in data.items():
            if k not in props:
                res.merge(_validate(addl, v, f"{path}.{k}"))
    for pname, psch in props.items():
        if pname in data and isinstance(psch, Mapping):
            rname = f"{path}.{pname}" if path else pname
            res.merge(_validate(psch, data[pname], rname))
    required = s.get("required")
    if isinstance(required, list | tuple):
        for k in required:
            if isinstance(k, str) and k not in data:
                name = f"{path}.{k}"
                res.add(_OAError(_Code.REQUIRED, name, f"{name} in {_IN} is required"))
    return res


def _composite(message: str) -> _OAError:
    return _OAError(_Code.COMPOSITE, "", message, composite=True)


def _schema_props_validate(s: _Schema, data: Any, path: str) -> _Result:
    main = _Result()

    def subs(key: str) -> list[_Schema]:
        v = s.get(key)
        if not isinstance(v, list | tuple):
            return []
        return [x for x in v if isinstance(x, Mapping)]

    any_of = subs("anyOf")
    if any_of:
        best: _Result | None = None
        first_success: _Result | None = None
        succeeded = False
        for sub in any_of:
            r = _validate(sub, data, path)
            if r.valid:
                best = None
                succeeded = True
                first_success = first_success or r
                break
            if best is None or r.match_count > best.match_count:
                best = r
        if not succeeded:
            main.add(_composite(f"{go_quote(path)} must validate at least one schema (anyOf)"))
        if best is not None:
            main.merge(best)
        elif first_success is not None:
            main.merge(first_success)

    one_of = subs("oneOf")
    if one_of:
        best = None
        first_success = None
        validated = 0
        for sub in one_of:
            r = _validate(sub, data, path)
            if r.valid:
                validated += 1
                best = None
                first_success = first_success or r
                continue
            if validated == 0 and (best is None or r.match_count > best.match_count):
                best = r
        if validated != 1:
            extra = (
                "Found none valid" if validated == 0 else f"Found {validated} valid alternatives"
            )
            main.add(
                _composite(
                    f"{go_quote(path)} must validate one and only one schema (oneOf). {extra}"
                )
            )
            if best is not None:
                main.merge(best)
        elif first_success is not None:
            main.merge(first_success)

    all_of = subs("allOf")
    if all_of:
        validated = 0
        for sub in all_of:
            r = _validate(sub, data, path)
            if r.valid:
                validated += 1
            main.merge(r)
        if validated != len(all_of):
            extra = ". None validated" if validated == 0 else ""
            main.add(_composite(f"{go_quote(path)} must validate all the schemas (allOf){extra}"))

    not_schema = s.get("not")
    if isinstance(not_schema, Mapping) and _validate(not_schema, data, path).valid:
        main.add(_composite(f"{go_quote(path)} must not validate the schema (not)"))

    main.inc()
    return main


def _validate(s: _Schema, data: Any, path: str) -> _Result:
    """``SchemaValidator.Validate``: all applicable validators, in kube-openapi's order."""
    result = _Result()
    if data is None:
        result.merge(_type_validate(s, data, path), _common_validate(s, data, path))
        return result
    kind = _kind(data)
    if _schema_types(s) or _schema_format(s):
        result.merge(_type_validate(s, data, path))
        result.inc()
    result.merge(_schema_props_validate(s, data, path))
    result.inc()
    if kind == "string":
        result.merge(_string_validate(s, data, path))
        result.inc()
        if _schema_format(s) and _normalize_format(_schema_format(s)) in _FORMAT_CHECKS:
            result.merge(_format_validate(s, data, path))
            result.inc()
    if kind in ("int", "float"):
        result.merge(_number_validate(s, data, path))
        result.inc()
    if kind == "slice":
        result.merge(_slice_validate(s, data, path))
        result.inc()
    result.merge(_common_validate(s, data, path))
    result.inc()
    if kind == "map":
        result.merge(_object_validate(s, data, path))
        result.inc()
    result.inc()
    return result


def _to_field_errors(base: field.Path, result: _Result) -> list[FieldError]:
    """``kubeOpenAPIResultToFieldErrors``."""
    out: list[FieldError] = []
    for e in result.errors:
        if e.composite:
            out.append(field.invalid(base, "", e.message))
            continue
        path = base
        if e.name and e.name != ".":
            path = field.child(base, e.name.removeprefix("."))
        value = "" if e.value is None else e.value
        if e.code is _Code.REQUIRED:
            out.append(field.required(path))
        elif e.code is _Code.ENUM:
            values = [v if isinstance(v, str) else go_json(v) for v in e.values or ()]
            out.append(field.not_supported(path, e.value, values))
        elif e.code is _Code.TOO_LONG:
            out.append(field.too_long(path, e.valid if _is_int(e.valid) else -1))
        elif e.code in (_Code.MAX_ITEMS, _Code.TOO_MANY_PROPERTIES):
            actual = e.value if _is_int(e.value) else -1
            out.append(field.too_many(path, actual, e.valid if _is_int(e.valid) else -1))
        elif e.code is _Code.INVALID_TYPE:
            out.append(field.type_invalid(path, value, e.message))
        else:
            out.append(field.invalid(path, value, e.message))
    return out


def _validate_schema_value(base: field.Path, value: Any, schema: _Schema) -> list[FieldError]:
    return _to_field_errors(base, _validate(schema, value, ""))


# --- string formats (kube-openapi strfmt + govalidator) --------------------------------------

_UUID_RE: Final = re.compile(
    r"^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}\Z", re.I
)
_UUID3_RE: Final = re.compile(
    r"^[0-9a-f]{8}-?[0-9a-f]{4}-?3[0-9a-f]{3}-?[0-9a-f]{4}-?[0-9a-f]{12}\Z", re.I
)
_UUID4_RE: Final = re.compile(
    r"^[0-9a-f]{8}-?[0-9a-f]{4}-?4[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}\Z", re.I
)
_UUID5_RE: Final = re.compile(
    r"^[0-9a-f]{8}-?[0-9a-f]{4}-?5[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}\Z", re.I
)
_ALNUM: Final = r"[^\W_]"
_ALNUM_DASH: Final = r"(?:[^\W_]|-)"
_HOSTNAME_RE: Final = re.compile(
    rf"^({_ALNUM}((-?{_ALNUM}{{0,62}})?)|({_ALNUM}(({_ALNUM_DASH}{{0,61}}{_ALNUM})?)(\.)){{1,}}"
    rf"({_ALNUM})(-?{_ALNUM}){{1,62}})\Z"
)
_BSON_RE: Final = re.compile(r"^[0-9a-fA-F]{24}\Z")
_HEXCOLOR_RE: Final = re.compile(r"^#?([0-9a-fA-F]{3}|[0-9a-fA-F]{6})\Z")
_RGB_PART: Final = r"\s*(0|[1-9]\d?|1\d\d?|2[0-4]\d|25[0-5])\s*"
_RGBCOLOR_RE: Final = re.compile(rf"^rgb\({_RGB_PART},{_RGB_PART},{_RGB_PART}\)\Z", re.ASCII)
_SSN_RE: Final = re.compile(r"^\d{3}[- ]?\d{2}[- ]?\d{4}\Z", re.ASCII)
_BASE64_RE: Final = re.compile(
    r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{4})\Z"
)
_DATE_RE: Final = re.compile(r"^\d{4}-\d{2}-\d{2}\Z", re.ASCII)
_TIME_RE: Final = re.compile(
    r"^([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))\Z"
)
_MAC_RE: Final = re.compile(
    r"^(?:[0-9a-fA-F]{2}(?:[:-][0-9a-fA-F]{2}){5}|[0-9a-fA-F]{2}(?:[:-][0-9a-fA-F]{2}){7}"
    r"|[0-9a-fA-F]{2}(?:[:-][0-9a-fA-F]{2}){19}|[0-9a-fA-F]{4}(?:\.[0-9a-fA-F]{4}){2}"
    r"|[0-9a-fA-F]{4}(?:\.[0-9a-fA-F]{4}){3}|[0-9a-fA-F]{4}(?:\.[0-9a-fA-F]{4}){9})\Z"
)
_DURATION_GO_RE: Final = re.compile(r"^[-+]?(?:(?:\d+\.?\d*|\.\d+)(?:ns|us|µs|μs|ms|s|m|h))+\Z")
_DURATION_UNITS: Final = (
    "ns|nano|nanos|nanosecond|nanoseconds|us|µs|micro|micros|microsecond|microseconds"
    "|ms|milli|millis|millisecond|milliseconds|s|sec|secs|second|seconds|m|min|mins|minute"
    "|minutes|h|hr|hrs|hour|hours|d|day|days|w|wk|wks|week|weeks"
)
_DURATION_SCALA_RE: Final = re.compile(rf"^(?:\d+\s*(?:{_DURATION_UNITS})\s*)+\Z")
_EMAIL_ADDR_RE: Final = re.compile(r"^[^\s@<>()\[\]\\,;:\"]+@[^\s@<>()\[\]\\,;:\"]+\Z")
_SHORT_NAME_RE: Final = re.compile("^" + DNS1123_LABEL_FMT + r"\Z")
_LONG_NAME_RE: Final = re.compile("^" + DNS1123_SUBDOMAIN_FMT + r"\Z")
_CREDITCARD_RE: Final = re.compile(
    r"^(?:4[0-9]{12}(?:[0-9]{3})?|5[1-5][0-9]{14}|(222[1-9]|22[3-9][0-9]|2[3-6][0-9]{2}|27[01]"
    r"[0-9]|2720)[0-9]{12}|6(?:011|5[0-9][0-9])[0-9]{12}|3[47][0-9]{13}|3(?:0[0-5]|[68][0-9])"
    r"[0-9]{11}|(?:2131|1800|35\d{3})\d{11}|6[27][0-9]{14})\Z",
    re.ASCII,
)


def _is_ip(s: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    if "%" in s:
        return None
    try:
        return ipaddress.ip_address(s)
    except ValueError:
        return None


def _is_cidr(s: str) -> bool:
    if "%" in s or "/" not in s:
        return False
    addr, _, bits = s.partition("/")
    if not bits.isdigit() or _is_ip(addr) is None:
        return False
    try:
        ipaddress.ip_network(s, strict=False)
    except ValueError:
        return False
    return True


def _is_date(s: str) -> bool:
    if not _DATE_RE.match(s):
        return False
    try:
        datetime.date.fromisoformat(s)
    except ValueError:
        return False
    return True


def _is_datetime(s: str) -> bool:
    if len(s) < 4:
        return False
    parts = s.lower().split("t")
    if len(parts) < 2 or not _is_date(parts[0]):
        return False
    m = _TIME_RE.match(parts[1])
    return m is not None and m.group(1) <= "23" and m.group(2) <= "59" and m.group(3) <= "59"


def _is_uri(s: str) -> bool:
    if not s or any(ord(c) < 0x20 or ord(c) == 0x7F for c in s):
        return False
    if s == "*" or s.startswith("/"):
        return True
    if not re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", s):
        return False
    try:
        urllib.parse.urlsplit(s)
    except ValueError:
        return False
    return True


def _is_email(s: str) -> bool:
    m = re.match(r"^[^<>]*<([^<>]+)>\s*\Z", s)
    addr = m.group(1) if m else s.strip()
    return bool(_EMAIL_ADDR_RE.match(addr))


def _is_base64(s: str) -> bool:
    if not _BASE64_RE.match(s):
        return False
    try:
        base64.b64decode(s, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def _isbn_digits(s: str) -> str:
    return re.sub(r"[\s-]+", "", s)


def _is_isbn10(s: str) -> bool:
    d = _isbn_digits(s)
    if not re.match(r"^(?:[0-9]{9}X|[0-9]{10})\Z", d):
        return False
    total = sum((i + 1) * int(c) for i, c in enumerate(d[:9]))
    total += 10 * (10 if d[9] == "X" else int(d[9]))
    return total % 11 == 0


def _is_isbn13(s: str) -> bool:
    d = _isbn_digits(s)
    if not re.match(r"^[0-9]{13}\Z", d):
        return False
    factor = (1, 3)
    total = sum(factor[i % 2] * int(c) for i, c in enumerate(d[:12]))
    return (10 - total % 10) % 10 == int(d[12])


def _is_creditcard(s: str) -> bool:
    d = re.sub(r"[^0-9]+", "", s)
    if not _CREDITCARD_RE.match(d):
        return False
    total = 0
    for i, c in enumerate(reversed(d)):
        n = int(c)
        if i % 2 == 1:
            n *= 2
            if n > 9:
                n -= 9
        total += n
    return total % 10 == 0


def _is_hostname(s: str) -> bool:
    return bool(_HOSTNAME_RE.match(s)) and len(s) <= 255 and all(len(p) <= 63 for p in s.split("."))


_FORMAT_CHECKS: Final[dict[str, Callable[[str], bool]]] = {
    "bsonobjectid": lambda s: bool(_BSON_RE.match(s)),
    "uri": _is_uri,
    "email": _is_email,
    "hostname": _is_hostname,
    "ipv4": lambda s: _is_ip(s) is not None and "." in s,
    "ipv6": lambda s: _is_ip(s) is not None and ":" in s,
    "cidr": _is_cidr,
    "mac": lambda s: bool(_MAC_RE.match(s)),
    "uuid": lambda s: bool(_UUID_RE.match(s)),
    "uuid3": lambda s: bool(_UUID3_RE.match(s)),
    "uuid4": lambda s: bool(_UUID4_RE.match(s)),
    "uuid5": lambda s: bool(_UUID5_RE.match(s)),
    "isbn": lambda s: _is_isbn10(s) or _is_isbn13(s),
    "isbn10": _is_isbn10,
    "isbn13": _is_isbn13,
    "creditcard": _is_creditcard,
    "ssn": lambda s: len(s) == 11 and bool(_SSN_RE.match(s)),
    "hexcolor": lambda s: bool(_HEXCOLOR_RE.match(s)),
    "rgbcolor": lambda s: bool(_RGBCOLOR_RE.match(s)),
    "byte": _is_base64,
    "password": lambda s: True,
    "date": _is_date,
    "duration": lambda s: (
        s == "0" or bool(_DURATION_GO_RE.match(s)) or bool(_DURATION_SCALA_RE.match(s))
    ),
    "datetime": _is_datetime,
    "k8s-short-name": lambda s: len(s) <= 63 and bool(_SHORT_NAME_RE.match(s)),
    "k8s-long-name": lambda s: len(s) <= 253 and bool(_LONG_NAME_RE.match(s)),
}


# --- x-kubernetes-list-type, embedded resources ----------------------------------------------


def _scalar_key(x: Any) -> tuple[str, Any]:
    return (type(x).__name__, x)


def _list_set_duplicates(values: Sequence[Any]) -> list[int]:
    """``validateListSet``: indices of the second appearance of each repeated value."""
    if len(values) <= 1:
        return []
    seen: dict[Any, int] = {}
    out = []
    for i, x in enumerate(values):
        k: Any = ("json", go_json(x)) if isinstance(x, Mapping | list | tuple) else _scalar_key(x)
        times = seen.get(k, 0)
        seen[k] = times + 1
        if times == 1:
            out.append(i)
    return out


class _Unspecified:
    pass


_UNSPECIFIED: Final = _Unspecified()


def _validate_list_map(p: str, s: _Schema, obj: Sequence[Any]) -> list[FieldError]:
    for i, x in enumerate(obj):
        if x is not None and not isinstance(x, Mapping):
            return [
                field.invalid(
                    field.index(p, i), x, "must be an object for an array of list-type map"
                )
            ]
    if len(obj) <= 1:
        return []
    keys_field = s.get("x-kubernetes-list-map-keys")
    map_keys = [k for k in keys_field if isinstance(k, str)] if isinstance(keys_field, list) else []
    errs = []
    if len(map_keys) == 1:
        kf = map_keys[0]
        keys: list[Any] = []
        for x in obj:
            if x is None or kf not in x:
                keys.append(_UNSPECIFIED)
            else:
                keys.append(x[kf])
        marked = [("unspecified", 0) if k is _UNSPECIFIED else k for k in keys]
        for i in _list_set_duplicates(marked):
            errs.append(
                field.duplicate(field.index(p, i), {} if keys[i] is _UNSPECIFIED else {kf: keys[i]})
            )
        return errs
    composite: list[dict[str, Any]] = []
    for x in obj:
        key: dict[str, Any] = {}
        if x is not None:
            for kf in map_keys:
                if kf in x:
                    key[kf] = x[kf]
        composite.append(key)
    for i in _list_set_duplicates(composite):
        errs.append(field.duplicate(field.index(p, i), composite[i]))
    return errs


def _list_sets_and_maps(p: field.Path, s: _Schema | None, obj: Any) -> list[FieldError]:
    if s is None:
        return []
    if isinstance(obj, Mapping):
        errs: list[FieldError] = []
        addl = _addl(s)
        if addl is not None:
            for k, v in obj.items():
                errs.extend(_list_sets_and_maps(field.key(p, k), addl, v))
        for k, v in obj.items():
            prop = _prop(s, k)
            if prop is not None:
                errs.extend(_list_sets_and_maps(field.child(p, k), prop, v))
        return errs
    if isinstance(obj, list | tuple):
        assert p is not None
        errs = []
        lt = s.get("x-kubernetes-list-type")
        if lt == "set":
            for i in _list_set_duplicates(obj):
                errs.append(field.duplicate(field.index(p, i), obj[i]))
        elif lt == "map":
            errs.extend(_validate_list_map(p, s, obj))
        items = _items(s)
        if items is not None:
            for i, v in enumerate(obj):
                errs.extend(_list_sets_and_maps(field.index(p, i), items, v))
        return errs
    return []


def _parse_group_version_error(gv: str) -> str | None:
    if gv in ("", "/"):
        return None
    if gv.count("/") > 1:
        return f"unexpected GroupVersion string: {gv}"
    return None


def _validate_path_segment_name(name: str, prefix: bool) -> list[str]:
    """``path.ValidatePathSegmentName``."""
    if not prefix and name in (".", ".."):
        return [f"may not be '{name}'"]
    return [f"may not contain '{c}'" for c in ("/", "%") if c in name]


def _validate_embedded(p: field.Path, x: Any, s: _Schema | None) -> list[FieldError]:
    """``schemaobjectmeta.Validate`` (not at the resource root)."""
    if s is None:
        return []
    errs: list[FieldError] = []
    if isinstance(x, Mapping):
        if _embedded(s):
            errs.extend(_validate_embedded_resource(p, x))
        for k, v in x.items():
            prop = _prop(s, k)
            if prop is not None:
                errs.extend(_validate_embedded(field.child(p, k), v, prop))
            elif _has_addl(s):
                errs.extend(_validate_embedded(field.key(p, k), v, _addl(s)))
    elif isinstance(x, list | tuple):
        items = _items(s)
        for i, v in enumerate(x):
            errs.extend(_validate_embedded(field.index(p, i), v, items))
    return errs


def _validate_embedded_resource(p: field.Path, x: Mapping[str, Any]) -> list[FieldError]:
    errs: list[FieldError] = []
    if "apiVersion" not in x:
        errs.append(field.required(field.child(p, "apiVersion")))
    if "kind" not in x:
        errs.append(field.required(field.child(p, "kind")))
    for k, v in x.items():
        if k == "apiVersion":
            if not isinstance(v, str):
                errs.append(field.invalid(field.child(p, k), v, "must be a string"))
            elif not v:
                errs.append(field.invalid(field.child(p, k), v, "must not be empty"))
            elif (msg := _parse_group_version_error(v)) is not None:
                errs.append(field.invalid(field.child(p, k), v, msg))
        elif k == "kind":
            if not isinstance(v, str):
                errs.append(field.invalid(field.child(p, k), v, "must be a string"))
            elif not v:
                errs.append(field.invalid(field.child(p, k), v, "must not be empty"))
            elif kind_errs := is_dns1035_label(v.lower()):
                errs.append(
                    field.invalid(
                        field.child(p, k),
                        v,
                        "may have mixed case, but should otherwise match: " + ",".join(kind_errs),
                    )
                )
        elif k == "metadata" and isinstance(v, Mapping):
            meta = dict(v)
            if not meta.get("name"):
                meta["name"] = "fakename"
            errs.extend(
                _validate_object_meta_name(meta, _validate_path_segment_name, field.child(p, k))
            )
    return errs


def validate_custom_resource(
    obj: Mapping[str, Any],
    schema: _Schema | None,
    *,
    kind: str | None = None,
    api_version: str | None = None,
) -> list[FieldError]:
    """Errors ``customResourceStrategy.Validate`` reports for ``obj`` (empty when valid).

    Call it on the output of :func:`prepare_custom_resource`, as the real server validates the
    pruned and defaulted object. ``schema`` is the version's ``openAPIV3Schema``. When ``kind``
    and ``api_version`` are given, the object's TypeMeta is checked first and, as upstream,
    nothing else is checked if it is wrong.
    """
    errs: list[FieldError] = []
    if kind is not None and obj.get("kind") != kind:
        errs.append(field.invalid("kind", obj.get("kind", ""), f"must be {kind}"))
    if api_version is not None and obj.get("apiVersion") != api_version:
        errs.append(
            field.invalid("apiVersion", obj.get("apiVersion", ""), f"must be {api_version}")
        )
    if errs:
        return errs
    meta = obj.get("metadata")
    errs.extend(
        _validate_object_meta_name(
            meta if isinstance(meta, Mapping) else {}, name_is_dns_subdomain, "metadata"
        )
    )
    if schema is not None:
        errs.extend(_to_field_errors(None, _validate(schema, obj, "")))
        errs.extend(_validate_embedded(None, obj, schema))
        errs.extend(_list_sets_and_maps(None, schema, obj))
    return errs


# ---------------------------------------------------------------------------------------------
# CustomResourceDefinition defaulting and validation (apiextensions-apiserver
# pkg/apis/apiextensions/validation/validation.go, .../v1/{defaults,conversion}.go: fields
# identical in every version are validated at the top-level path, e.g.
# spec.validation.openAPIV3Schema; pkg/apiserver/schema/validation.go for structural rules)
# ---------------------------------------------------------------------------------------------

# JSONSchemaProps JSON fields (apiextensions v1), and which of them are omitempty.
_SCHEMA_FIELDS_ORDER: Final = (
    "id",
    "$schema",
    "$ref",
    "description",
    "type",
    "nullable",
    "format",
    "title",
    "default",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "uniqueItems",
    "multipleOf",
    "enum",
    "maxProperties",
    "minProperties",
    "required",
    "items",
    "allOf",
    "oneOf",
    "anyOf",
    "not",
    "properties",
    "additionalProperties",
    "patternProperties",
    "dependencies",
    "additionalItems",
    "definitions",
    "externalDocs",
    "example",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-embedded-resource",
    "x-kubernetes-int-or-string",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-list-type",
    "x-kubernetes-map-type",
    "x-kubernetes-validations",
)
_SCHEMA_FIELDS: Final = frozenset(_SCHEMA_FIELDS_ORDER)
_OMIT_FALSE: Final = frozenset(
    {
        "exclusiveMaximum",
        "exclusiveMinimum",
        "uniqueItems",
        "nullable",
        "x-kubernetes-embedded-resource",
        "x-kubernetes-int-or-string",
    }
)
_OMIT_EMPTY_STR: Final = frozenset(
    {"id", "$schema", "description", "type", "format", "title", "pattern"}
)
_OMIT_EMPTY_LIST: Final = frozenset(
    {
        "enum",
        "required",
        "allOf",
        "oneOf",
        "anyOf",
        "x-kubernetes-list-map-keys",
        "x-kubernetes-validations",
    }
)
_OMIT_EMPTY_MAP: Final = frozenset(
    {"properties", "patternProperties", "dependencies", "definitions"}
)
_FLOAT_FIELDS: Final = frozenset({"maximum", "minimum", "multipleOf"})


def _normalize_schema(s: Any) -> Any:
    """A schema as a real server stores it: unknown keys and zero omitempty fields dropped."""
    if not isinstance(s, Mapping):
        return copy.deepcopy(s)
    out: dict[str, Any] = {}
    for k, v in s.items():
        if k not in _SCHEMA_FIELDS:
            continue
        if k in _OMIT_FALSE and v is False:
            continue
        if k in _OMIT_EMPTY_STR and v == "":
            continue
        if k in _OMIT_EMPTY_LIST and isinstance(v, list) and not v:
            continue
        if k in _OMIT_EMPTY_MAP and isinstance(v, Mapping) and not v:
            continue
        if k in _FLOAT_FIELDS and isinstance(v, float) and v.is_integer() and abs(v) < 1e21:
            v = int(v)
        if k in ("properties", "patternProperties", "definitions") and isinstance(v, Mapping):
            v = {pk: _normalize_schema(pv) for pk, pv in v.items()}
        elif k in ("allOf", "oneOf", "anyOf") and isinstance(v, list):
            v = [_normalize_schema(x) for x in v]
        elif k in ("not", "additionalProperties", "additionalItems") and isinstance(v, Mapping):
            v = _normalize_schema(v)
        elif k == "items":
            v = [_normalize_schema(x) for x in v] if isinstance(v, list) else _normalize_schema(v)
        elif k == "dependencies" and isinstance(v, Mapping):
            v = {dk: _normalize_schema(dv) for dk, dv in v.items()}
        else:
            v = copy.deepcopy(v)
        out[k] = v
    return out


def default_crd(crd: Mapping[str, Any]) -> dict[str, Any]:
    """The apiextensions/v1 defaults a real server applies to a submitted CRD.

    ``spec.names.singular`` = lowercase kind, ``spec.names.listKind`` = kind + ``"List"``,
    ``spec.conversion`` = ``{"strategy": "None"}``, webhook service port 443; schemas are
    normalized the way a Go round trip stores them (``false``/empty omitempty fields dropped).
    """
    out = copy.deepcopy(dict(crd))
    spec = out.get("spec")
    if not isinstance(spec, dict):
        return out
    names = spec.get("names")
    if isinstance(names, dict):
        kind = names.get("kind") or ""
        if not names.get("singular") and isinstance(kind, str):
            names["singular"] = kind.lower()
        if not names.get("listKind") and isinstance(kind, str) and kind:
            names["listKind"] = kind + "List"
    conv = spec.get("conversion")
    if conv is None:
        spec["conversion"] = {"strategy": "None"}
    elif isinstance(conv, dict):
        svc = ((conv.get("webhook") or {}).get("clientConfig") or {}).get("service")
        if conv.get("strategy") == "Webhook" and isinstance(svc, dict) and svc.get("port") is None:
            svc["port"] = 443
    versions = spec.get("versions")
    if isinstance(versions, list):
        for v in versions:
            if not isinstance(v, dict):
                continue
            if v.get("deprecated") is False:
                del v["deprecated"]
            sch = v.get("schema")
            if isinstance(sch, dict) and isinstance(sch.get("openAPIV3Schema"), Mapping):
                sch["openAPIV3Schema"] = _normalize_schema(sch["openAPIV3Schema"])
            cols = v.get("additionalPrinterColumns")
            if isinstance(cols, list):
                for c in cols:
                    if isinstance(c, dict):
                        for key in ("format", "description"):
                            if c.get(key) == "":
                                del c[key]
                        if c.get("priority") == 0:
                            del c["priority"]
    return out


_OPENAPI_V3_TYPES: Final = ("array", "boolean", "integer", "number", "object", "string")
_PRINTER_COLUMN_TYPES: Final = "boolean,date,integer,number,string"
_PRINTER_COLUMN_FORMATS: Final = frozenset(
    {"int32", "int64", "float", "double", "byte", "date", "date-time", "password"}
)
_ALLOWED_AT_STATUS_ROOT: Final = {
    "description": "Description",
    "type": "Type",
    "format": "Format",
    "title": "Title",
    "maximum": "Maximum",
    "exclusiveMaximum": "ExclusiveMaximum",
    "minimum": "Minimum",
    "exclusiveMinimum": "ExclusiveMinimum",
    "maxLength": "MaxLength",
    "minLength": "MinLength",
    "pattern": "Pattern",
    "maxItems": "MaxItems",
    "minItems": "MinItems",
    "uniqueItems": "UniqueItems",
    "multipleOf": "MultipleOf",
    "required": "Required",
    "items": "Items",
    "properties": "Properties",
    "externalDocs": "ExternalDocs",
    "example": "Example",
    "x-kubernetes-preserve-unknown-fields": "XPreserveUnknownFields",
    "x-kubernetes-validations": "XValidations",
}


def _is_zero(v: Any) -> bool:
    return v is None or v is False or v == "" or (isinstance(v, Mapping | list) and not v)


class _SSV(NamedTuple):
    """``specStandardValidatorV3`` options."""

    allow_defaults: bool = True
    disallow_reason: str = ""
    inside_meta: bool = False


def _openapi_schema_errors(s: _Schema, p: str, ssv: _SSV, is_root: bool) -> list[FieldError]:
    """``ValidateCustomResourceDefinitionOpenAPISchema`` (the non-structural checks)."""
    errs: list[FieldError] = []
    typ = s.get("type")
    if isinstance(typ, str) and typ and typ not in _OPENAPI_V3_TYPES:
        errs.append(field.not_supported(field.child(p, "type"), typ, _OPENAPI_V3_TYPES))
    if "default" in s and s["default"] is not None and not ssv.allow_defaults:
        detail = "must not be set"
        if ssv.disallow_reason:
            detail += " " + ssv.disallow_reason
        errs.append(field.forbidden(field.child(p, "default"), detail))
    for key, what in (
        ("id", "id"),
        ("additionalItems", "additionalItems"),
        ("patternProperties", "patternProperties"),
        ("definitions", "definitions"),
        ("dependencies", "dependencies"),
        ("$ref", "$ref"),
    ):
        if not _is_zero(s.get(key)):
            errs.append(field.forbidden(field.child(p, key), f"{what} is not supported"))
    if typ == "null":
        errs.append(
            field.forbidden(
                field.child(p, "type"), "type cannot be set to null, use nullable as an alternative"
            )
        )
    if isinstance(s.get("items"), list) and s["items"]:
        errs.append(
            field.forbidden(
                field.child(p, "items"), "items must be a schema object and not an array"
            )
        )
    if ssv.inside_meta and _embedded(s):
        errs.append(
            field.forbidden(
                field.child(p, "x-kubernetes-embedded-resource"),
                "must not be used inside of resource meta",
            )
        )
    if s.get("uniqueItems") is True:
        errs.append(
            field.forbidden(
                field.child(p, "uniqueItems"),
                "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
            )
        )
    if _has_addl(s):
        addl = s["additionalProperties"]
        if _props(s) and (addl is False or isinstance(addl, Mapping)):
            errs.append(
                field.forbidden(
                    field.child(p, "additionalProperties"),
                    "additionalProperties and properties are mutual exclusive",
                )
            )
        if isinstance(addl, Mapping):
            sub = ssv
            if ssv.inside_meta:
                sub = sub._replace(
                    allow_defaults=False,
                    disallow_reason="inside additionalProperties applying to object metadata",
                )
            errs.extend(
                _openapi_schema_errors(addl, field.child(p, "additionalProperties"), sub, False)
            )
    for name, prop in _props(s).items():
        if not isinstance(prop, Mapping):
            continue
        sub = ssv
        if (is_root or _embedded(s)) and name in _META_FIELDS:
            sub = sub._replace(inside_meta=True)
            if is_root:
                sub = sub._replace(allow_defaults=False, disallow_reason=f"in top-level {name}")
        errs.extend(
            _openapi_schema_errors(prop, field.key(field.child(p, "properties"), name), sub, False)
        )
    if isinstance(s.get("not"), Mapping):
        errs.extend(_openapi_schema_errors(s["not"], field.child(p, "not"), ssv, False))
    for key in ("allOf", "oneOf", "anyOf"):
        subs = s.get(key)
        if isinstance(subs, list):
            for i, sub_schema in enumerate(subs):
                if isinstance(sub_schema, Mapping):
                    errs.extend(
                        _openapi_schema_errors(
                            sub_schema, field.index(field.child(p, key), i), ssv, False
                        )
                    )
    items = s.get("items")
    if isinstance(items, Mapping):
        errs.extend(_openapi_schema_errors(items, field.child(p, "items"), ssv, False))
    if s.get("x-kubernetes-preserve-unknown-fields") is False:
        errs.append(
            field.invalid(
                field.child(p, "x-kubernetes-preserve-unknown-fields"),
                False,
                "must be true or undefined",
            )
        )
    map_type = s.get("x-kubernetes-map-type")
    if map_type is not None and typ != "object":
        msg = "must be object if x-kubernetes-map-type is specified"
        errs.append(
            field.required(field.child(p, "type"), msg)
            if not typ
            else field.invalid(field.child(p, "type"), typ, msg)
        )
    if map_type is not None and map_type not in ("atomic", "granular"):
        errs.append(
            field.not_supported(
                field.child(p, "x-kubernetes-map-type"), map_type, ["atomic", "granular"]
            )
        )
    list_type = s.get("x-kubernetes-list-type")
    item_schema = _items(s)
    if list_type is not None and typ != "array":
        msg = "must be array if x-kubernetes-list-type is specified"
        errs.append(
            field.required(field.child(p, "type"), msg)
            if not typ
            else field.invalid(field.child(p, "type"), typ, msg)
        )
    elif list_type == "set" and item_schema is not None:
        msg = "must be atomic as item of a list with x-kubernetes-list-type=set"
        ilt = item_schema.get("x-kubernetes-list-type")
        if item_schema.get("type") == "array" and ilt is not None and ilt != "atomic":
            errs.append(field.invalid(field.child(p, "items", "x-kubernetes-list-type"), ilt, msg))
        elif (
            item_schema.get("type") == "object"
            and item_schema.get("x-kubernetes-map-type") != "atomic"
        ):
            errs.append(field.invalid(field.child(p, "items", "x-kubernetes-map-type"), ilt, msg))
    if list_type is not None and list_type not in ("atomic", "set", "map"):
        errs.append(
            field.not_supported(
                field.child(p, "x-kubernetes-list-type"), list_type, ["atomic", "set", "map"]
            )
        )
    map_keys = s.get("x-kubernetes-list-map-keys")
    if isinstance(map_keys, list) and map_keys:
        msg = "must be map if x-kubernetes-list-map-keys is non-empty"
        if list_type is None:
            errs.append(field.required(field.child(p, "x-kubernetes-list-type"), msg))
        elif list_type != "map":
            errs.append(field.invalid(field.child(p, "x-kubernetes-list-type"), list_type, msg))
    if list_type == "map":
        errs.extend(_list_map_schema_errors(s, p, map_keys))
    if list_type in ("set", "map") and item_schema is not None:
        errs.extend(_map_list_keys_map_set_errors(s, p, item_schema, list_type))
    return errs


def _list_map_schema_errors(s: _Schema, p: str, map_keys: Any) -> list[FieldError]:
    errs: list[FieldError] = []
    keys = map_keys if isinstance(map_keys, list) else []
    if not keys:
        errs.append(
            field.required(
                field.child(p, "x-kubernetes-list-map-keys"),
                "must not be empty if x-kubernetes-list-type is map",
            )
        )
    items = s.get("items")
    if items is None:
        errs.append(
            field.required(
                field.child(p, "items"), "must have a schema if x-kubernetes-list-type is map"
            )
        )
        return errs
    if not isinstance(items, Mapping):
        errs.append(
            field.invalid(
                field.child(p, "items"),
                items,
                "must only have a single schema if x-kubernetes-list-type is map",
            )
        )
        return errs
    itype = items.get("type", "")
    if itype != "object":
        errs.append(
            field.invalid(
                field.child(p, "items", "type"),
                itype,
                "must be object if parent array's x-kubernetes-list-type is map",
            )
        )
        return errs
    seen: set[str] = set()
    for k in keys:
        prop = _prop(items, k)
        if prop is not None:
            if prop.get("type") in ("array", "object"):
                errs.append(
                    field.invalid(
                        field.child(field.key(field.child(p, "items", "properties"), k), "type"),
                        itype,
                        "must be a scalar type if parent array's x-kubernetes-list-type is map",
                    )
                )
        else:
            errs.append(
                field.invalid(
                    field.child(p, "x-kubernetes-list-map-keys"),
                    keys,
                    "entries must all be names of item properties",
                )
            )
        if k in seen:
            errs.append(
                field.invalid(
                    field.child(p, "x-kubernetes-list-map-keys"),
                    keys,
                    "must not contain duplicate entries",
                )
            )
        seen.add(k)
    return errs


def _map_list_keys_map_set_errors(
    s: _Schema, p: str, items: _Schema, list_type: str
) -> list[FieldError]:
    errs: list[FieldError] = []
    if _nullable(items):
        errs.append(
            field.forbidden(
                field.child(p, "items", "nullable"),
                f"cannot be nullable when x-kubernetes-list-type is {list_type}",
            )
        )
    if list_type == "map":
        req = items.get("required")
        required: list[Any] = req if isinstance(req, list) else []
        keys = s.get("x-kubernetes-list-map-keys")
        for k in keys if isinstance(keys, list) else []:
            prop = _prop(items, k)
            if prop is None:
                continue
            kp = field.key(field.child(p, "items", "properties"), k)
            if k not in required and not _has_default(prop):
                errs.append(
                    field.required(
                        field.child(kp, "default"),
                        "this property is in x-kubernetes-list-map-keys, so it must have a default "
                        "or be a required property",
                    )
                )
            if _nullable(prop):
                errs.append(
                    field.forbidden(
                        field.child(kp, "nullable"),
                        "this property is in x-kubernetes-list-map-keys, so it cannot be nullable",
                    )
                )
    return errs


_ROOT, _ITEM, _FIELD = 0, 1, 2
_NESTED_FORBIDDEN: Final = (
    ("type", "must be empty to be structural"),
    ("additionalProperties", "must be undefined to be structural"),
    ("default", "must be undefined to be structural"),
    ("title", "must be empty to be structural"),
    ("description", "must be empty to be structural"),
    ("nullable", "must be false to be structural"),
    ("externalDocs", "must be undefined to be structural"),
    ("x-kubernetes-preserve-unknown-fields", "must be false to be structural"),
    ("x-kubernetes-embedded-resource", "must be false to be structural"),
    ("x-kubernetes-int-or-string", "must be false to be structural"),
    ("x-kubernetes-list-map-keys", "must be empty to be structural"),
    ("x-kubernetes-list-type", "must be undefined to be structural"),
    ("x-kubernetes-map-type", "must be undefined to be structural"),
    ("x-kubernetes-validations", "must be empty to be structural"),
)


_NESTED_POINTER_FIELDS: Final = frozenset(
    {
        "additionalProperties",
        "default",
        "externalDocs",
        "x-kubernetes-list-type",
        "x-kubernetes-map-type",
    }
)
_NESTED_BOOL_FIELDS: Final = frozenset(
    {
        "nullable",
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-embedded-resource",
        "x-kubernetes-int-or-string",
    }
)


def _is_int_or_string_any_of(any_of: Any) -> bool:
    return bool(any_of == [{"type": "integer"}, {"type": "string"}])


def _structural_errors(s: _Schema, lvl: int, p: str) -> list[FieldError]:
    """``validateStructuralInvariants`` (errors sorted by the caller)."""
    errs: list[FieldError] = []
    typ = s.get("type") or ""
    items = _items(s)
    if typ == "array" and items is None:
        errs.append(field.required(field.child(p, "items"), "must be specified"))
    if items is not None:
        errs.extend(_structural_errors(items, _ITEM, field.child(p, "items")))
    for k, v in _props(s).items():
        if isinstance(v, Mapping):
            errs.extend(_structural_errors(v, _FIELD, field.key(field.child(p, "properties"), k)))
    if _has_addl(s):
        if lvl == _ROOT:
            errs.append(
                field.forbidden(
                    field.child(p, "additionalProperties"), "must not be used at the root"
                )
            )
        addl = _addl(s)
        if addl is not None:
            errs.extend(_structural_errors(addl, _FIELD, field.child(p, "additionalProperties")))
    int_or_string = s.get("x-kubernetes-int-or-string") is True
    if int_or_string and _preserve(s):
        errs.append(
            field.invalid(
                field.child(p, "x-kubernetes-preserve-unknown-fields"),
                True,
                "must be false if x-kubernetes-int-or-string is true",
            )
        )
    if int_or_string and _embedded(s):
        errs.append(
            field.invalid(
                field.child(p, "x-kubernetes-embedded-resource"),
                True,
                "must be false if x-kubernetes-int-or-string is true",
            )
        )
    skip_any_of = _is_int_or_string_any_of(s.get("anyOf"))
    all_of = s.get("allOf")
    skip_first_all_of = (
        isinstance(all_of, list)
        and bool(all_of)
        and isinstance(all_of[0], Mapping)
        and _is_int_or_string_any_of(all_of[0].get("anyOf"))
    )
    errs.extend(_value_validation_errors(s, skip_any_of, skip_first_all_of, lvl, p))
    check_metadata = lvl == _ROOT or _embedded(s)
    if _embedded(s) and typ != "object":
        msg = "must be object if x-kubernetes-embedded-resource is true"
        errs.append(
            field.required(field.child(p, "type"), msg)
            if not typ
            else field.invalid(field.child(p, "type"), typ, msg)
        )
    elif not typ and not int_or_string and not _preserve(s):
        detail = {
            _ROOT: "must not be empty at the root",
            _ITEM: "must not be empty for specified array items",
            _FIELD: "must not be empty for specified object fields",
        }[lvl]
        errs.append(field.required(field.child(p, "type"), detail))
    if _embedded(s) and _has_addl(s):
        errs.append(
            field.forbidden(
                field.child(p, "additionalProperties"),
                "must not be used if x-kubernetes-embedded-resource is set",
            )
        )
    if lvl == _ROOT and typ and typ != "object":
        errs.append(field.invalid(field.child(p, "type"), typ, "must be object at the root"))
    props = _props(s)
    for meta_key in ("kind", "apiVersion"):
        sub = props.get(meta_key)
        if isinstance(sub, Mapping) and check_metadata and sub.get("type", "") != "string":
            errs.append(
                field.invalid(
                    field.child(field.key(field.child(p, "properties"), meta_key), "type"),
                    sub.get("type", ""),
                    "must be string",
                )
            )
    meta = props.get("metadata")
    if isinstance(meta, Mapping):
        mp = field.key(field.child(p, "properties"), "metadata")
        if check_metadata and meta.get("type", "") != "object":
            errs.append(
                field.invalid(field.child(mp, "type"), meta.get("type", ""), "must be object")
            )
        if lvl == _ROOT and not _metadata_only_names(meta):
            errs.append(
                field.forbidden(
                    mp,
                    "must not specify anything other than name and generateName, but metadata is "
                    "implicitly specified",
                )
            )
    if _embedded(s) and not _preserve(s) and not props:
        errs.append(
            field.required(
                field.child(p, "properties"),
                "must not be empty if x-kubernetes-embedded-resource is true without "
                "x-kubernetes-preserve-unknown-fields",
            )
        )
    return errs


def _metadata_only_names(meta: _Schema) -> bool:
    for k, v in meta.items():
        if k in ("type", "default"):
            continue
        if k == "properties":
            if isinstance(v, Mapping) and v and not set(v) <= {"name", "generateName"}:
                return False
            continue
        if not _is_zero(v):
            return False
    return True


def _value_validation_errors(
    s: _Schema, skip_any_of: bool, skip_first_all_of: bool, lvl: int, p: str
) -> list[FieldError]:
    errs: list[FieldError] = []
    if not skip_any_of:
        for i, sub in enumerate(s.get("anyOf") or []):
            if isinstance(sub, Mapping):
                errs.extend(
                    _nested_value_validation_errors(
                        sub, False, lvl, field.index(field.child(p, "anyOf"), i)
                    )
                )
    for i, sub in enumerate(s.get("allOf") or []):
        if isinstance(sub, Mapping):
            errs.extend(
                _nested_value_validation_errors(
                    sub, skip_first_all_of and i == 0, lvl, field.index(field.child(p, "allOf"), i)
                )
            )
    for i, sub in enumerate(s.get("oneOf") or []):
        if isinstance(sub, Mapping):
            errs.extend(
                _nested_value_validation_errors(
                    sub, False, lvl, field.index(field.child(p, "oneOf"), i)
                )
            )
    if isinstance(s.get("not"), Mapping):
        errs.extend(_nested_value_validation_errors(s["not"], False, lvl, field.child(p, "not")))
    pattern = s.get("pattern")
    if isinstance(pattern, str) and pattern:
        try:
            _compile_pattern(pattern)
        except re.error as exc:
            errs.append(
                field.invalid(
                    field.child(p, "pattern"),
                    pattern,
                    f"must be a valid regular expression, but isn't: error parsing regexp: {exc}",
                )
            )
    return errs


def _nested_value_validation_errors(
    s: _Schema, skip_any_of: bool, lvl: int, p: str
) -> list[FieldError]:
    errs = _value_validation_errors(s, skip_any_of, False, lvl, p)
    items = s.get("items")
    if isinstance(items, Mapping):
        errs.extend(_nested_value_validation_errors(items, False, lvl, field.child(p, "items")))
    for k, v in _props(s).items():
        if isinstance(v, Mapping):
            errs.extend(
                _nested_value_validation_errors(
                    v, False, _FIELD, field.key(field.child(p, "properties"), k)
                )
            )
    for key, detail in _NESTED_FORBIDDEN:
        value = s.get(key)
        if key in _NESTED_POINTER_FIELDS:
            is_set = value is not None  # Go pointers: any value counts, even 0 or ""
        elif key in _NESTED_BOOL_FIELDS:
            is_set = value is True
        else:
            is_set = not _is_zero(value)
        if is_set:
            errs.append(field.forbidden(field.child(p, key), detail))
    if "metadata" in _props(s):
        errs.append(
            field.forbidden(
                field.key(field.child(p, "properties"), "metadata"),
                "must not be specified in a nested context",
            )
        )
    return errs


def _default_errors(s: _Schema, p: str, inside_meta: bool) -> list[FieldError]:
    """``structuraldefaulting.ValidateDefaults`` (outside metadata)."""
    errs: list[FieldError] = []
    if _embedded(s):
        inside_meta = False
    if _has_default(s) and not inside_meta:
        default = s["default"]
        pruned = copy.deepcopy(default)
        _prune(pruned, s, _embedded(s), [], _PruneTracker())
        if not _go_deep_equal(pruned, default):
            errs.append(
                field.invalid(field.child(p, "default"), default, "must not have unknown fields")
            )
        embedded_errs = _validate_embedded(field.child(p, "default"), default, s)
        if embedded_errs:
            errs.extend(embedded_errs)
        else:
            errs.extend(_validate_schema_value(field.child(p, "default"), default, s))
    items = _items(s)
    if items is not None:
        errs.extend(_default_errors(items, field.child(p, "items"), inside_meta))
    for k, v in _props(s).items():
        if isinstance(v, Mapping):
            sub_meta = inside_meta or (_embedded(s) and k in _META_FIELDS)
            errs.extend(_default_errors(v, field.key(field.child(p, "properties"), k), sub_meta))
    return errs


def _validation_errors(
    validation: Mapping[str, Any] | None, status_enabled: bool, p: str
) -> list[FieldError]:
    """``validateCustomResourceDefinitionValidation`` for a v1 CRD (all options on)."""
    if validation is None:
        return []
    schema = validation.get("openAPIV3Schema")
    if not isinstance(schema, Mapping):
        return []
    sp = field.child(p, "openAPIV3Schema")
    errs: list[FieldError] = []
    if status_enabled:
        for key in _SCHEMA_FIELDS_ORDER:
            if key not in schema or _is_zero(schema[key]):
                continue
            if key == "type":
                if schema["type"] != "object":
                    errs.append(
                        field.invalid(
                            field.child(p, "openAPIV3Schema.type"),
                            schema["type"],
                            'only "object" is allowed as the type at the root of the schema if the '
                            "status subresource is enabled",
                        )
                    )
                    break
                continue
            if key not in _ALLOWED_AT_STATUS_ROOT:
                allowed = " ".join(_ALLOWED_AT_STATUS_ROOT.values())
                errs.append(
                    field.invalid(
                        sp,
                        dict(schema),
                        f"only [{allowed}] fields are allowed at the root of the schema if the "
                        "status subresource is enabled",
                    )
                )
                break
    if schema.get("nullable") is True:
        errs.append(
            field.forbidden(
                field.child(p, "openAPIV3Schema.nullable"), "nullable cannot be true at the root"
            )
        )
    errs.extend(_openapi_schema_errors(schema, sp, _SSV(), True))
    structural = sorted(_structural_errors(schema, _ROOT, sp), key=FieldError.message)
    if structural:
        errs.extend(structural)
    else:
        root = dict(schema)
        root["x-kubernetes-embedded-resource"] = True
        errs.extend(_default_errors(root, sp, False))
    return errs


def _subresources_errors(sub: Mapping[str, Any] | None, p: str) -> list[FieldError]:
    if not isinstance(sub, Mapping):
        return []
    scale = sub.get("scale")
    if not isinstance(scale, Mapping):
        return []
    errs: list[FieldError] = []
    for key, prefix, where in (
        ("specReplicasPath", ".spec.", ".spec"),
        ("statusReplicasPath", ".status.", ".status"),
    ):
        fp = field.child(p, f"scale.{key}")
        val = scale.get(key) or ""
        if not val:
            errs.append(field.required(fp))
        elif js := _simple_json_path_errors(val, fp):
            errs.extend(js)
        elif not val.startswith(prefix):
            errs.append(field.invalid(fp, val, f"should be a json path under {where}"))
    sel = scale.get("labelSelectorPath")
    if isinstance(sel, str) and sel:
        fp = field.child(p, "scale.labelSelectorPath")
        if js := _simple_json_path_errors(sel, fp):
            errs.extend(js)
        elif not sel.startswith(".spec.") and not sel.startswith(".status."):
            errs.append(
                field.invalid(fp, sel, "should be a json path under either .spec or .status")
            )
    return errs


def _simple_json_path_errors(s: str, p: str) -> list[FieldError]:
    if not s:
        return [field.invalid(p, s, "must not be empty")]
    if s[0] != ".":
        return [field.invalid(p, s, "must be a simple json path starting with .")]
    return []


def _printer_column_errors(col: Mapping[str, Any], p: str) -> list[FieldError]:
    errs: list[FieldError] = []
    if not col.get("name"):
        errs.append(field.required(field.child(p, "name")))
    typ = col.get("type") or ""
    types_msg = f"must be one of {_PRINTER_COLUMN_TYPES}"
    if not typ:
        errs.append(field.required(field.child(p, "type"), types_msg))
    elif typ not in _PRINTER_COLUMN_TYPES.split(","):
        errs.append(field.invalid(field.child(p, "type"), typ, types_msg))
    fmt = col.get("format") or ""
    if fmt and fmt not in _PRINTER_COLUMN_FORMATS:
        formats = ",".join(sorted(_PRINTER_COLUMN_FORMATS))
        errs.append(field.invalid(field.child(p, "format"), fmt, f"must be one of {formats}"))
    jp = col.get("jsonPath") or ""
    if not jp:
        errs.append(field.required(field.child(p, "JSONPath")))
    else:
        errs.extend(_simple_json_path_errors(jp, field.child(p, "JSONPath")))
    return errs


def _names_errors(names: Mapping[str, Any], p: str) -> list[FieldError]:
    """``ValidateCustomResourceDefinitionNames``."""
    errs: list[FieldError] = []
    for key in ("plural", "singular"):
        v = names.get(key) or ""
        if isinstance(v, str) and v and (e := is_dns1035_label(v)):
            errs.append(field.invalid(field.child(p, key), v, ",".join(e)))
    for key in ("kind", "listKind"):
        v = names.get(key) or ""
        if isinstance(v, str) and v and (e := is_dns1035_label(v.lower())):
            errs.append(
                field.invalid(
                    field.child(p, key),
                    v,
                    "may have mixed case, but should otherwise match: " + ",".join(e),
                )
            )
    for key in ("shortNames",):
        for i, v in enumerate(names.get(key) or []):
            if isinstance(v, str) and (e := is_dns1035_label(v)):
                errs.append(field.invalid(field.index(field.child(p, key), i), v, ",".join(e)))
    kind = names.get("kind") or ""
    if kind and kind == names.get("listKind"):
        errs.append(
            field.invalid(field.child(p, "listKind"), kind, "kind and listKind may not be the same")
        )
    for i, v in enumerate(names.get("categories") or []):
        if isinstance(v, str) and (e := is_dns1035_label(v)):
            errs.append(field.invalid(field.index(field.child(p, "categories"), i), v, ",".join(e)))
    return errs


def _is_protected_group(group: str) -> bool:
    return group in ("k8s.io", "kubernetes.io") or group.endswith((".k8s.io", ".kubernetes.io"))


_APPROVAL_ANNOTATION: Final = "api-approved.kubernetes.io"
_APPROVAL_HINT: Final = "see https://github.com/kubernetes/enhancements/pull/1111"


def _api_approval_errors(crd: Mapping[str, Any], group: str) -> list[FieldError]:
    if not _is_protected_group(group):
        return []
    meta = crd.get("metadata") or {}
    ann = (meta.get("annotations") or {}) if isinstance(meta, Mapping) else {}
    p = field.key("metadata.annotations", _APPROVAL_ANNOTATION)
    value = ann.get(_APPROVAL_ANNOTATION) if isinstance(ann, Mapping) else None
    if not value:
        return [
            field.required(
                p,
                "protected groups must have approval annotation "
                f"{go_quote(_APPROVAL_ANNOTATION)}, {_APPROVAL_HINT}",
            )
        ]
    if isinstance(value, str) and value.startswith("unapproved"):
        return []
    parsed = urllib.parse.urlsplit(value) if isinstance(value, str) else None
    if parsed is not None and parsed.scheme and parsed.netloc:
        return []
    return [
        field.invalid(
            p,
            value,
            f"protected groups must have approval annotation {go_quote(_APPROVAL_ANNOTATION)} with "
            f'either a URL or a reason starting with "unapproved", {_APPROVAL_HINT}',
        )
    ]


def _conversion_errors(spec: Mapping[str, Any]) -> list[FieldError]:
    conv = spec.get("conversion")
    if not isinstance(conv, Mapping):
        return []
    errs: list[FieldError] = []
    p = "spec.conversion"
    strategy = conv.get("strategy") or ""
    preserve = spec.get("preserveUnknownFields") is True
    if strategy and strategy != "None" and preserve:
        errs.append(
            field.invalid(
                field.child(p, "strategy"),
                strategy,
                "must be None if spec.preserveUnknownFields is true",
            )
        )
    if not strategy:
        errs.append(field.required(field.child(p, "strategy")))
    elif strategy not in ("None", "Webhook"):
        errs.append(field.not_supported(field.child(p, "strategy"), strategy, ["None", "Webhook"]))
    webhook = conv.get("webhook") if isinstance(conv.get("webhook"), Mapping) else None
    client_config = webhook.get("clientConfig") if webhook else None
    review_versions = (webhook.get("conversionReviewVersions") if webhook else None) or []
    if strategy == "Webhook":
        if not isinstance(client_config, Mapping):
            errs.append(
                field.required(
                    field.child(p, "webhookClientConfig"),
                    "required when strategy is set to Webhook",
                )
            )
        elif (client_config.get("url") is None) == (client_config.get("service") is None):
            errs.append(
                field.required(
                    field.child(p, "webhookClientConfig"),
                    "exactly one of url or service is required",
                )
            )
        rp = field.child(p, "conversionReviewVersions")
        if not review_versions:
            errs.append(field.required(rp))
        else:
            seen: set[str] = set()
            for i, v in enumerate(review_versions):
                if v in seen:
                    errs.append(field.invalid(field.index(rp, i), v, "duplicate version"))
                    continue
                seen.add(v)
                for msg in is_dns1035_label(v) if isinstance(v, str) else []:
                    errs.append(field.invalid(field.index(rp, i), v, msg))
            if not seen & {"v1", "v1beta1"}:
                errs.append(
                    field.invalid(
                        rp, list(review_versions), "must include at least one of v1, v1beta1"
                    )
                )
    else:
        if client_config is not None:
            errs.append(
                field.forbidden(
                    field.child(p, "webhookClientConfig"),
                    "should not be set when strategy is not set to Webhook",
                )
            )
        if review_versions:
            errs.append(
                field.forbidden(
                    field.child(p, "conversionReviewVersions"),
                    "should not be set when strategy is not set to Webhook",
                )
            )
    return errs


def _all_identical(values: Sequence[Any]) -> bool:
    return all(_go_deep_equal(v, values[0]) for v in values)


def _crd_errors(crd: Mapping[str, Any]) -> list[FieldError]:
    errs: list[FieldError] = []
    meta = _map(crd.get("metadata"))
    spec = _map(crd.get("spec"))
    names = _map(spec.get("names"))
    group = _str(spec.get("group"))
    plural = _str(names.get("plural"))

    def crd_name_fn(name: str, prefix: bool) -> list[str]:
        out = name_is_dns_subdomain(name, prefix)
        if name != f"{plural}.{group}":
            out.append('must be spec.names.plural+"."+spec.group')
        return out

    errs.extend(_validate_object_meta_name(meta, crd_name_fn, "metadata"))

    # spec
    if not group:
        errs.append(field.required("spec.group"))
    elif e := is_dns1123_subdomain(group):
        errs.append(field.invalid("spec.group", group, ",".join(e)))
    elif len(group.split(".")) < 2:
        errs.append(field.invalid("spec.group", group, "should be a domain with at least one dot"))
    scope = spec.get("scope") or ""
    if not scope:
        errs.append(field.required("spec.scope"))
    elif scope not in ("Cluster", "Namespaced"):
        errs.append(field.not_supported("spec.scope", scope, ["Cluster", "Namespaced"]))

    raw_versions = spec.get("versions")
    versions: list[Mapping[str, Any]] = (
        [v for v in raw_versions if isinstance(v, Mapping)]
        if isinstance(raw_versions, list)
        else []
    )
    schemas = [v.get("schema") for v in versions]
    subresources = [v.get("subresources") for v in versions]
    columns = [v.get("additionalPrinterColumns") or [] for v in versions]
    schema_identical = bool(versions) and _all_identical(schemas)
    sub_identical = bool(versions) and _all_identical(subresources)
    col_identical = bool(versions) and _all_identical(columns)

    for i, v in enumerate(versions):
        sch = v.get("schema")
        if not (isinstance(sch, Mapping) and isinstance(sch.get("openAPIV3Schema"), Mapping)):
            errs.append(
                field.required(f"spec.versions[{i}].schema.openAPIV3Schema", "schemas are required")
            )
    if spec.get("preserveUnknownFields") is True and _spec_has(versions, _has_default):
        errs.append(
            field.invalid(
                "spec.preserveUnknownFields",
                True,
                "must be false in order to use defaults in the schema",
            )
        )

    any_status = any(isinstance(s, Mapping) and s.get("status") is not None for s in subresources)
    storage_count = 0
    seen_names: set[str] = set()
    unique = True
    for i, v in enumerate(versions):
        vp = f"spec.versions[{i}]"
        name = _str(v.get("name"))
        if v.get("storage") is True:
            storage_count += 1
        if name in seen_names:
            unique = False
        seen_names.add(name)
        if e := is_dns1035_label(name):
            errs.append(field.invalid(field.child(vp, "name"), name, ",".join(e)))
        deprecated = v.get("deprecated") is True
        warning = v.get("deprecationWarning")
        if not deprecated and warning is not None:
            errs.append(
                field.invalid(
                    field.child(vp, "deprecationWarning"),
                    warning,
                    "can only be set for deprecated versions",
                )
            )
        elif isinstance(warning, str):
            if len(warning.encode()) > 256:
                errs.append(
                    field.invalid(
                        field.child(vp, "deprecationWarning"),
                        warning,
                        "must be <= 256 characters long",
                    )
                )
            if not warning:
                errs.append(
                    field.invalid(
                        field.child(vp, "deprecationWarning"),
                        warning,
                        "must not be an empty string",
                    )
                )
        sub = subresources[0] if sub_identical else v.get("subresources")
        status_enabled = isinstance(sub, Mapping) and sub.get("status") is not None
        if not schema_identical and isinstance(v.get("schema"), Mapping):
            errs.extend(_validation_errors(v["schema"], status_enabled, field.child(vp, "schema")))
        if not sub_identical:
            errs.extend(
                _subresources_errors(v.get("subresources"), field.child(vp, "subresources"))
            )
        if not col_identical:
            for j, col in enumerate(v.get("additionalPrinterColumns") or []):
                if isinstance(col, Mapping):
                    errs.extend(
                        _printer_column_errors(
                            col, field.index(field.child(vp, "additionalPrinterColumns"), j)
                        )
                    )
    if not unique:
        errs.append(
            field.invalid("spec.versions", list(versions), "must contain unique version names")
        )
    if storage_count != 1:
        errs.append(
            field.invalid(
                "spec.versions",
                list(versions),
                "must have exactly one version marked as storage version",
            )
        )
    if versions:
        first = versions[0].get("name") if isinstance(versions[0].get("name"), str) else ""
        if first and (e := is_dns1035_label(first)):
            errs.append(field.invalid("spec.version", first, ",".join(e)))

    for key in ("plural", "singular", "kind", "listKind"):
        if not names.get(key):
            errs.append(field.required(f"spec.names.{key}"))
    errs.extend(_names_errors(names, "spec.names"))
    if schema_identical and isinstance(schemas[0], Mapping):
        errs.extend(_validation_errors(schemas[0], any_status, "spec.validation"))
    if sub_identical:
        errs.extend(_subresources_errors(subresources[0], "spec.subresources"))
    if col_identical:
        for j, col in enumerate(columns[0]):
            if isinstance(col, Mapping):
                errs.extend(
                    _printer_column_errors(col, field.index("spec.additionalPrinterColumns", j))
                )
    errs.extend(_conversion_errors(spec))

    # status (as PrepareForCreate leaves it), API approval, preserveUnknownFields
    if storage_count == 0:
        errs.append(
            field.invalid("status.storedVersions", None, "must have at least one stored version")
        )
    errs.extend(_api_approval_errors(crd, group))
    if spec.get("preserveUnknownFields") is True:
        errs.append(
            field.invalid(
                "spec.preserveUnknownFields",
                True,
                "cannot set to true, set x-preserve-unknown-fields to true in "
                "spec.versions[*].schema instead",
            )
        )
    return errs


def _schema_has(s: Any, pred: Callable[[_Schema], bool]) -> bool:
    if not isinstance(s, Mapping):
        return False
    if pred(s):
        return True
    children: list[Any] = []
    items = s.get("items")
    children.extend(items if isinstance(items, list) else [items])
    for key in ("allOf", "anyOf", "oneOf"):
        children.extend(s.get(key) or [])
    children.append(s.get("not"))
    children.extend(_props(s).values())
    children.append(s.get("additionalProperties"))
    return any(_schema_has(c, pred) for c in children)


def _spec_has(versions: Iterable[Mapping[str, Any]], pred: Callable[[_Schema], bool]) -> bool:
    for v in versions:
        sch = v.get("schema")
        if isinstance(sch, Mapping) and _schema_has(sch.get("openAPIV3Schema"), pred):
            return True
    return False


def validate_crd(crd: Mapping[str, Any]) -> None:
    """Raise :class:`CRDError` with what ``ValidateCustomResourceDefinition`` reports for a
    ``apiextensions.k8s.io/v1`` CRD being created (after :func:`default_crd`, which this
    applies itself). The error's :meth:`CRDError.status` is the 422 body."""
    defaulted = default_crd(crd)
    errors = _crd_errors(defaulted)
    if errors:
        meta = defaulted.get("metadata")
        name = meta.get("name", "") if isinstance(meta, Mapping) else ""
        raise CRDError(
            errors, kind=CRD_KIND, group=CRD_GROUP, name=name if isinstance(name, str) else ""
        )


# ---------------------------------------------------------------------------------------------
# CRDInfo and status helpers (apiextensions-apiserver pkg/controller/{status,establish})
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class CRDVersionInfo:
    """One entry of ``spec.versions``."""

    name: str
    served: bool
    storage: bool
    schema: dict[str, Any] | None = dataclasses.field(default=None, hash=False)
    has_status_subresource: bool = False
    has_scale_subresource: bool = False
    scale: dict[str, Any] | None = dataclasses.field(default=None, hash=False)
    additional_printer_columns: tuple[dict[str, Any], ...] = dataclasses.field(
        default=(), hash=False
    )
    deprecated: bool = False
    deprecation_warning: str | None = None


@dataclasses.dataclass(frozen=True)
class CRDInfo:
    """What the server needs to serve a CRD's resources (built by :meth:`from_crd`)."""

    group: str
    kind: str
    list_kind: str
    plural: str
    singular: str
    short_names: tuple[str, ...]
    categories: tuple[str, ...]
    namespaced: bool
    versions: tuple[CRDVersionInfo, ...]
    storage_version: str

    @classmethod
    def from_crd(cls, crd: Mapping[str, Any]) -> CRDInfo:
        """Read a (defaulted or not) CRD; name defaults are applied as the server does."""
        d = default_crd(crd)
        spec = d.get("spec") or {}
        names = spec.get("names") or {}
        versions = []
        storage = ""
        for v in spec.get("versions") or []:
            sub = v.get("subresources") or {}
            sch = (v.get("schema") or {}).get("openAPIV3Schema")
            info = CRDVersionInfo(
                name=v.get("name", ""),
                served=v.get("served") is True,
                storage=v.get("storage") is True,
                schema=sch if isinstance(sch, dict) else None,
                has_status_subresource=sub.get("status") is not None,
                has_scale_subresource=sub.get("scale") is not None,
                scale=sub.get("scale") if isinstance(sub.get("scale"), dict) else None,
                additional_printer_columns=tuple(v.get("additionalPrinterColumns") or ()),
                deprecated=v.get("deprecated") is True,
                deprecation_warning=v.get("deprecationWarning"),
            )
            if info.storage and not storage:
                storage = info.name
            versions.append(info)
        return cls(
            group=spec.get("group", ""),
            kind=names.get("kind", ""),
            list_kind=names.get("listKind", ""),
            plural=names.get("plural", ""),
            singular=names.get("singular", ""),
            short_names=tuple(names.get("shortNames") or ()),
            categories=tuple(names.get("categories") or ()),
            namespaced=spec.get("scope") == "Namespaced",
            versions=tuple(versions),
            storage_version=storage,
        )

    @property
    def name(self) -> str:
        """The CRD's ``metadata.name``: ``<plural>.<group>``."""
        return f"{self.plural}.{self.group}"

    @property
    def served_versions(self) -> tuple[str, ...]:
        return tuple(v.name for v in self.versions if v.served)

    def version(self, name: str) -> CRDVersionInfo | None:
        """The version called ``name``, or ``None``."""
        for v in self.versions:
            if v.name == name:
                return v
        return None

    def schema(self, version: str) -> dict[str, Any] | None:
        """The ``openAPIV3Schema`` of ``version`` (``None`` if unknown)."""
        v = self.version(version)
        return v.schema if v is not None else None

    def api_version(self, version: str) -> str:
        return f"{self.group}/{version}"


def _accepted_names(crd: Mapping[str, Any]) -> dict[str, Any]:
    names = ((default_crd(crd).get("spec") or {}).get("names")) or {}
    out: dict[str, Any] = {"plural": names.get("plural", "")}
    if names.get("singular"):
        out["singular"] = names["singular"]
    if names.get("shortNames"):
        out["shortNames"] = list(names["shortNames"])
    out["kind"] = names.get("kind", "")
    if names.get("listKind"):
        out["listKind"] = names["listKind"]
    if names.get("categories"):
        out["categories"] = list(names["categories"])
    return out


def _storage_version(crd: Mapping[str, Any]) -> str | None:
    for v in (crd.get("spec") or {}).get("versions") or []:
        if isinstance(v, Mapping) and v.get("storage") is True:
            name = v.get("name")
            return name if isinstance(name, str) else None
    return None


def crd_initial_status(crd: Mapping[str, Any]) -> dict[str, Any]:
    """The status ``PrepareForCreate`` stores (what the create response shows): no
    conditions yet, empty accepted names, ``storedVersions`` = the storage version."""
    status: dict[str, Any] = {"acceptedNames": {"plural": "", "kind": ""}}
    storage = _storage_version(crd)
    if storage:
        status["storedVersions"] = [storage]
    return status


def _now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def crd_status_after_create(crd: Mapping[str, Any], *, now: str | None = None) -> dict[str, Any]:
    """The status once the naming and establishing controllers have run (no name conflicts):
    ``NamesAccepted``/``NoConflicts`` and ``Established``/``InitialNamesAccepted`` conditions,
    ``acceptedNames`` = ``spec.names`` and ``storedVersions``. ``now`` is the RFC 3339
    ``lastTransitionTime`` (the current time when omitted)."""
    ts = now or _now_rfc3339()
    status: dict[str, Any] = {
        "conditions": [
            {
                "type": "NamesAccepted",
                "status": "True",
                "lastTransitionTime": ts,
                "reason": "NoConflicts",
                "message": "no conflicts found",
            },
            {
                "type": "Established",
                "status": "True",
                "lastTransitionTime": ts,
                "reason": "InitialNamesAccepted",
                "message": "the initial names have been accepted",
            },
        ],
        "acceptedNames": _accepted_names(crd),
    }
    storage = _storage_version(crd)
    if storage:
        status["storedVersions"] = [storage]
    return status
