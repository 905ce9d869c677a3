"""Field errors as k8s.io/apimachinery/pkg/util/validation/field makes them.

Every validation of the simulated server (built-in kinds, CRDs, custom resources, list and
delete options) reports :class:`FieldError` values built by the constructors here
(``required``, ``invalid``, ``not_supported``, ... as ``field.Required``, ``field.Invalid``,
...), so a message reads byte for byte as kube-apiserver v1.32 writes it: the type's text,
the bad value as ``ErrorBody`` prints it (``%q`` strings, ``%v`` numbers), the detail.
Paths are the rendered ``field.Path`` strings; ``None`` is the nil path (``<nil>``).
``gpusched.sim.errors.invalid`` turns a list into the 422 Status of ``apierrors.NewInvalid``.

Bad values that are Go structs, maps or slices upstream print as their JSON here, and a nil
value prints ``null`` (Go: ``"null"``, or ``[]string(nil)`` for a nil slice).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Sequence
from typing import Any, Final, NamedTuple

from gpusched.sim.apimachinery import aggregate, go_format_float, go_json, go_quote

__all__ = [
    "FIELD_IMMUTABLE_ERROR_MSG",
    "OMIT",
    "ErrorType",
    "FieldError",
    "Path",
    "Printed",
    "aggregate_errors",
    "child",
    "duplicate",
    "forbidden",
    "format_bad_value",
    "immutable",
    "index",
    "internal_error",
    "invalid",
    "key",
    "not_found",
    "not_supported",
    "path_string",
    "required",
    "struct",
    "too_long",
    "too_many",
    "type_invalid",
]


class ErrorType(enum.StrEnum):
    """``field.ErrorType``; the value is the ``reason`` of a Status cause."""

    NOT_FOUND = "FieldValueNotFound"
    REQUIRED = "FieldValueRequired"
    DUPLICATE = "FieldValueDuplicate"
    INVALID = "FieldValueInvalid"
    NOT_SUPPORTED = "FieldValueNotSupported"
    FORBIDDEN = "FieldValueForbidden"
    TOO_LONG = "FieldValueTooLong"
    TOO_MANY = "FieldValueTooMany"
    INTERNAL = "InternalError"
    TYPE_INVALID = "FieldValueTypeInvalid"

    @property
    def text(self) -> str:
        """``ErrorType.String()``: the canonical text of the error type."""
        return _ERROR_TYPE_TEXT[self]


_ERROR_TYPE_TEXT: Final = {
    ErrorType.NOT_FOUND: "Not found",
    ErrorType.REQUIRED: "Required value",
    ErrorType.DUPLICATE: "Duplicate value",
    ErrorType.INVALID: "Invalid value",
    ErrorType.NOT_SUPPORTED: "Unsupported value",
    ErrorType.FORBIDDEN: "Forbidden",
    ErrorType.TOO_LONG: "Too long",
    ErrorType.TOO_MANY: "Too many",
    ErrorType.INTERNAL: "Internal error",
    ErrorType.TYPE_INVALID: "Invalid value",
}

# ErrorBody never prints the bad value of these types.
_NO_VALUE_TYPES: Final = frozenset(
    {ErrorType.REQUIRED, ErrorType.FORBIDDEN, ErrorType.TOO_LONG, ErrorType.INTERNAL}
)


class _Omit:
    """``field.omitValue``: a bad value ``ErrorBody`` leaves out."""

    def __repr__(self) -> str:
        return "OMIT"


OMIT: Final = _Omit()


class Printed(str):
    """A bad value printed as is, as ``ErrorBody`` prints a ``fmt.Stringer`` or ``%#v``."""


def struct(v: Any) -> Printed:
    """A typed Go struct or slice as a bad value: its JSON in field order stands in for
    ``%#v`` (a map or a decoded JSON value prints as Go's JSON, keys sorted)."""
    return Printed(json.dumps(v, separators=(",", ":")))


def format_bad_value(v: Any) -> str:
    """How ``field.Error.ErrorBody`` prints a bad value (``%v``, ``%q``, ``%#v`` or JSON)."""
    if isinstance(v, Printed):
        return str.__str__(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return go_format_float(v)
    if isinstance(v, str):
        return go_quote(v)
    return go_json(v)


class FieldError(NamedTuple):
    """One ``field.Error``: ``(field, error_type, bad_value, detail)``."""

    field: str
    error_type: ErrorType
    bad_value: Any
    detail: str

    @property
    def reason(self) -> str:
        """The ``reason`` of the Status cause (``FieldValueInvalid``, ...)."""
        return str(self.error_type)

    def error_body(self) -> str:
        """``field.Error.ErrorBody()``: the message without the field path."""
        if self.error_type in _NO_VALUE_TYPES or self.bad_value is OMIT:
            s = self.error_type.text
        else:
            s = f"{self.error_type.text}: {format_bad_value(self.bad_value)}"
        if self.detail:
            s += f": {self.detail}"
        return s

    def message(self) -> str:
        """``field.Error.Error()``: ``<field>: <body>``."""
        return f"{self.field}: {self.error_body()}"

    def __str__(self) -> str:
        return self.message()


# --- field.Path ------------------------------------------------------------------------------

Path = str | None
"""A rendered ``field.Path``; ``None`` is the nil path."""


def child(p: Path, *names: str) -> str:
    """``p.Child(names...)``."""
    out = p
    for n in names:
        out = n if out is None else f"{out}.{n}"
    assert out is not None
    return out


def index(p: Path, i: int) -> str:
    """``p.Index(i)``."""
    return f"{p or ''}[{i}]"


def key(p: Path, k: str) -> str:
    """``p.Key(k)``."""
    return f"{p or ''}[{k}]"


def path_string(p: Path) -> str:
    """``p.String()``: ``<nil>`` for the nil path."""
    return "<nil>" if p is None else p


# --- constructors (field.Required, field.Invalid, ...) ---------------------------------------

FIELD_IMMUTABLE_ERROR_MSG: Final = "field is immutable"


def required(p: Path, detail: str = "") -> FieldError:
    return FieldError(path_string(p), ErrorType.REQUIRED, "", detail)


def invalid(p: Path, value: Any, detail: str) -> FieldError:
    return FieldError(path_string(p), ErrorType.INVALID, value, detail)


def type_invalid(p: Path, value: Any, detail: str) -> FieldError:
    return FieldError(path_string(p), ErrorType.TYPE_INVALID, value, detail)


def immutable(p: Path, value: Any) -> FieldError:
    """``ValidateImmutableField``'s error (apimachinery/pkg/api/validation)."""
    return invalid(p, value, FIELD_IMMUTABLE_ERROR_MSG)


def forbidden(p: Path, detail: str) -> FieldError:
    return FieldError(path_string(p), ErrorType.FORBIDDEN, "", detail)


def duplicate(p: Path, value: Any, detail: str = "") -> FieldError:
    """``field.Duplicate`` (a detail as ``.WithDetail`` adds one in some callers)."""
    return FieldError(path_string(p), ErrorType.DUPLICATE, value, detail)


def not_found(p: Path, value: Any) -> FieldError:
    return FieldError(path_string(p), ErrorType.NOT_FOUND, value, "")


def not_supported(p: Path, value: Any, valid: Sequence[str]) -> FieldError:
    detail = "supported values: " + ", ".join(go_quote(v) for v in valid) if valid else ""
    return FieldError(path_string(p), ErrorType.NOT_SUPPORTED, value, detail)


def too_long(p: Path, max_length: int) -> FieldError:
    """``field.TooLong``; a negative ``max_length`` leaves the limit out."""
    if max_length >= 0:
        detail = f"may not be more than {max_length} {'byte' if max_length == 1 else 'bytes'}"
    else:
        detail = "value is too long"
    return FieldError(path_string(p), ErrorType.TOO_LONG, OMIT, detail)


def too_many(p: Path, actual: int, maximum: int) -> FieldError:
    """``field.TooMany``; a negative ``actual`` or ``maximum`` is left out."""
    if maximum >= 0:
        detail = f"must have at most {maximum} {'item' if maximum == 1 else 'items'}"
    else:
        detail = "has too many items"
    return FieldError(path_string(p), ErrorType.TOO_MANY, actual if actual >= 0 else OMIT, detail)


def internal_error(p: Path, err: str) -> FieldError:
    return FieldError(path_string(p), ErrorType.INTERNAL, None, err)


# --- ErrorList --------------------------------------------------------------------------------


def aggregate_errors(errs: Sequence[FieldError]) -> str:
    """``errs.ToAggregate().Error()``: deduplicated, ``[a, b]`` when more than one."""
    return aggregate([e.message() for e in errs])
