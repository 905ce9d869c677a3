"""DRA device selectors: CEL expressions over one device, compiled once, evaluated safely.

A ``DeviceClass`` or a claim's request selects devices with CEL (``resource.k8s.io/v1``
``selectors[].cel.expression``). This module gives them upstream's environment
(``k8s.io/dynamic-resource-allocation/cel/compile.go`` over the apiserver's base environment,
``k8s.io/apiserver/pkg/cel/environment/base.go``) on cel-python, extended, not rewritten:

- ``device.driver``; ``device.attributes[domain][id]`` and ``device.capacity[domain][id]``
  (an unqualified name is in the driver's domain; an unknown *domain* is an empty map, an
  unknown *id* in it a runtime error: guard with ``has(...)`` or select it optionally).
- optional types: ``m.?key`` and ``m[?key]`` (a grammar rule added to cel-python's), chained
  (``a.?b.c``), ``optional.of/none/ofNonZeroValue``, ``hasValue()``, ``value()``,
  ``orValue(v)``, ``or(o)``; ``cel.bind(name, init, expr)``.
- ``ext.Strings`` version 2: ``charAt``, ``indexOf``, ``lastIndexOf``, ``lowerAscii``,
  ``upperAscii``, ``replace``, ``split``, ``substring``, ``trim``, ``join``,
  ``strings.quote``; the Kubernetes ``Lists`` (``isSorted``, ``sum``, ``min``, ``max``,
  ``indexOf``, ``lastIndexOf``), ``Regex`` (``find``, ``findAll``) and ``sets`` libraries.
- quantities (capacities, ``quantity("40Gi")``, ``isQuantity``): ``compareTo``,
  ``isGreaterThan``, ``isLessThan``, ``add``, ``sub``, ``sign``, ``isInteger``,
  ``asInteger``, ``asApproximateFloat`` and ``==``; ``<`` on them is no overload, as upstream.
  Versions (``version`` attributes such as ``driverVersion``, ``semver(s[, normalize])``,
  ``isSemver``): ``major``/``minor``/``patch``, ``compareTo``, ``isGreaterThan``,
  ``isLessThan``, ``==``.
- numbers compare across int, uint and double (``CrossTypeNumericComparisons``), and ``==``
  across other types is false (heterogeneous equality), as cel-go does for the dynamically
  typed attributes.

**Compile** (:func:`compile_selector`, cached per expression, never raises) refuses what the
real API server refuses at create: over 10 KiB, a syntax error, an undeclared variable or
function ("undeclared reference to 'x' (in container '')"), a literal result that is not a
bool, and an estimated cost over 1,000,000 (:func:`estimate_cost`: the parse tree's
operations, a comprehension's body times what it iterates, a literal list's length else 32,
upstream's bound on every map a device offers). Upstream functions cel-python lacks here
(``url``, ``ip``, ``cidr``, ``format``, quantity ``mul``/``div``, two-variable
comprehensions, ``optMap``...) compile, as upstream, and fail at evaluation with a message
saying so.

**Evaluate** (:meth:`Selector.matches`, never raises) counts the operations it runs and stops
at the runtime cost limit (cel-go's ``CostLimit``, upstream's 1,000,000, or the caller's) with
"operation cancelled: actual cost limit exceeded"; a runtime error, or a result that is not a
bool, is a message the caller (the allocator, then the claim's status) reports.

Not as cel-go: there is no type checker, so type errors other than those above show at
evaluation, on the device that triggers them (and ``1 == 'a'`` between literals, a compile
error there, is false here); optional list and map literals (``[?x]``, ``{?k: v}``) are not
parsed; string functions cost one operation whatever
their length. Costs: compiling is O(expression length); evaluating O(operations), about
15 µs each on cel-python (a class's selector, ~10 operations, takes 0.2 ms; one at the
runtime limit would take ~15 s, which is why the estimate refuses expensive ones first),
plus :func:`device_activation`, once per device.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Final

import celpy
import lark
from celpy import celparser, celtypes
from celpy.evaluation import Activation, CELEvalError, Evaluator, base_functions
from lark import Token, Tree

from gpusched.quantity import format_quantity, parse_quantity

__all__ = [
    "COST_EXCEEDED",
    "MAX_COST",
    "MAX_EXPRESSION_LENGTH",
    "Match",
    "Quantity",
    "Selector",
    "Semver",
    "compile_selector",
    "device_activation",
    "estimate_cost",
]

MAX_EXPRESSION_LENGTH: Final = 10 * 1024
"""``resourceapi.CELSelectorExpressionMaxLength``."""
MAX_COST: Final = 1_000_000
"""``resourceapi.CELSelectorExpressionMaxCost``: the estimate's limit and the runtime one."""
COST_EXCEEDED: Final = "operation cancelled: actual cost limit exceeded"
"""cel-go's message when the runtime cost limit stops an evaluation."""
_UNKNOWN_SIZE: Final = 32
"""Elements assumed in a collection that is not a literal list: upstream's
``ResourceSliceMaxAttributesAndCapacitiesPerDevice``."""
_MACROS: Final = frozenset({"all", "exists", "exists_one", "map", "filter"})

# ---------------------------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------------------------


class Quantity:
    """A Kubernetes quantity in CEL (``apiservercel.Quantity``): exact, compared by methods."""

    __slots__ = ("value",)

    def __init__(self, value: Fraction) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quantity) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return f"quantity({format_quantity(self.value)!r})"


_SEMVER_RE: Final = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$"
)
_LOOSE_SEMVER_RE: Final = re.compile(r"^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?([-+].*)?$")


class Semver:
    """A semantic version (``version`` attributes, ``semver("1.2.3")``)."""

    __slots__ = ("key", "text")

    def __init__(self, text: str) -> None:
        found = _SEMVER_RE.match(text)
        if found is None:
            raise ValueError(f"invalid semantic version {text!r}")
        major, minor, patch, pre = found.groups()
        # A pre-release sorts before its release (semver 2.0.0 rule 11, numeric parts
        # numerically); build metadata is ignored.
        parts: tuple[tuple[int, int | str], ...] = tuple(
            (0, int(p)) if p.isdigit() else (1, p) for p in (pre or "").split(".") if pre
        )
        self.key = (int(major), int(minor), int(patch), 0 if pre else 1, parts)
        self.text = text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Semver) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        return f"semver({self.text!r})"


class _Optional:
    """``optional_type(T)``: a value or none."""

    __slots__ = ("present", "value")

    def __init__(self, present: bool, value: Any = None) -> None:
        self.present = present
        self.value = value

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _Optional) or self.present != other.present:
            return False
        return not self.present or _equal(self.value, other.value)

    def __hash__(self) -> int:
        return hash(self.present)

    def __repr__(self) -> str:
        return f"optional.of({self.value!r})" if self.present else "optional.none()"


_NONE: Final = _Optional(False)


class _Namespace:
    """A function namespace (``optional``, ``sets``, ``strings``, ``cel``): a variable whose
    methods are the namespace's functions."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


_NAMESPACES: Final = {name: _Namespace(name) for name in ("optional", "sets", "strings", "cel")}


class _DomainMap(celtypes.MapType):
    """``device.attributes`` / ``device.capacity``: an unknown domain is an empty map."""

    def __getitem__(self, key: Any) -> Any:
        try:
            return super().__getitem__(key)
        except KeyError:
            return celtypes.MapType()


def _error(message: str) -> CELEvalError:
    return CELEvalError(message)


# ---------------------------------------------------------------------------------------------
# Equality and ordering (cel-go: heterogeneous equality, cross-type numeric comparisons)
# ---------------------------------------------------------------------------------------------

_NUMBERS: Final = (celtypes.IntType, celtypes.UintType, celtypes.DoubleType)


def _is_number(value: object) -> bool:
    """int, uint or double (celtypes' arithmetic may hand back plain Python numbers)."""
    return isinstance(value, (*_NUMBERS, int, float)) and not isinstance(
        value, (celtypes.BoolType, bool)
    )


def _plain(number: Any) -> Fraction:
    """A CEL number as an exact one (celtypes refuse to compare across their types)."""
    return (
        Fraction(float(number))
        if isinstance(number, celtypes.DoubleType)
        else Fraction(int(number))
    )


def _equal(a: Any, b: Any) -> bool:
    if _is_number(a) or _is_number(b):
        return _is_number(a) and _is_number(b) and _plain(a) == _plain(b)
    if isinstance(a, celtypes.ListType) and isinstance(b, celtypes.ListType):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, celtypes.MapType) and isinstance(b, celtypes.MapType):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if type(a) is not type(b):
        return False
    try:
        return bool(a == b)
    except TypeError:
        return False


def _compare(a: Any, b: Any) -> int:
    """``<``'s order: numbers across types, else two values of one ordered type."""
    if _is_number(a) and _is_number(b):
        x, y = _plain(a), _plain(b)
        return (x > y) - (x < y)
    ordered = (
        celtypes.StringType,
        celtypes.BytesType,
        celtypes.BoolType,
        celtypes.TimestampType,
        celtypes.DurationType,
    )
    if type(a) is type(b) and isinstance(a, ordered):
        return int((a > b) - (a < b))
    raise TypeError(f"no such overload: {type(a).__name__} < {type(b).__name__}")


def _relation(test: Callable[[int], bool]) -> Callable[[Any, Any], Any]:
    def relation(a: Any, b: Any) -> Any:
        if isinstance(a, CELEvalError):
            return a
        if isinstance(b, CELEvalError):
            return b
        return celtypes.BoolType(test(_compare(a, b)))

    return relation


def _eq(a: Any, b: Any) -> Any:
    if isinstance(a, CELEvalError):
        return a
    if isinstance(b, CELEvalError):
        return b
    return celtypes.BoolType(_equal(a, b))


def _in(item: Any, container: Any) -> Any:
    """``in``: list membership by CEL equality (so ``1 in [1.0]``), map keys as keys."""
    if isinstance(item, CELEvalError):
        return item
    if isinstance(container, celtypes.ListType):
        return celtypes.BoolType(any(_equal(item, x) for x in container))
    if isinstance(container, celtypes.MapType):
        return celtypes.BoolType(item in container)
    raise TypeError(f"no such overload: in {type(container).__name__}")


def _ne(a: Any, b: Any) -> Any:
    found = _eq(a, b)
    return found if isinstance(found, CELEvalError) else celtypes.BoolType(not found)


# ---------------------------------------------------------------------------------------------
# Library functions (each upstream library's names; a function returns an error value rather
# than raising, so the message is its own)
# ---------------------------------------------------------------------------------------------

_QUANTITY_MESSAGE: Final = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)
_INT64: Final = 1 << 63


def _quantity(text: Any) -> Any:
    if not isinstance(text, str):
        raise TypeError("no such overload: quantity")
    try:
        return Quantity(parse_quantity(str(text)))
    except ValueError:
        return _error(_QUANTITY_MESSAGE)


def _is_quantity(text: Any) -> celtypes.BoolType:
    return celtypes.BoolType(isinstance(_quantity(text), Quantity))


def _normalize_semver(text: str) -> str:
    found = _LOOSE_SEMVER_RE.match(text)
    if found is None:
        return text
    major, minor, patch, rest = found.groups()
    if patch is None and rest:
        return text  # "short version cannot contain PreRelease/Build meta data"
    numbers = ".".join(str(int(p or 0)) for p in (major, minor, patch))
    return numbers + (rest or "")


def _semver(text: Any, normalize: Any = False) -> Any:
    if not isinstance(text, str):
        raise TypeError("no such overload: semver")
    try:
        return Semver(_normalize_semver(str(text)) if normalize else str(text))
    except ValueError as exc:
        return _error(str(exc))


def _is_semver(text: Any, normalize: Any = False) -> celtypes.BoolType:
    return celtypes.BoolType(isinstance(_semver(text, normalize), Semver))


def _ordering(a: object, b: object) -> int:
    if isinstance(a, Quantity) and isinstance(b, Quantity):
        return (a.value > b.value) - (a.value < b.value)
    if isinstance(a, Semver) and isinstance(b, Semver):
        return (a.key > b.key) - (a.key < b.key)
    raise TypeError(f"no such overload: compare {type(a).__name__} with {type(b).__name__}")


def _quantity_of(value: Any) -> Fraction:
    if isinstance(value, Quantity):
        return value.value
    if _is_number(value) and not isinstance(value, celtypes.DoubleType):
        return Fraction(int(value))
    raise TypeError("no such overload")


def _as_quantity(q: Any) -> Quantity:
    if not isinstance(q, Quantity):
        raise TypeError("no such overload")
    return q


def _as_integer(q: Any) -> Any:
    value = _as_quantity(q).value
    if value.denominator != 1 or not -_INT64 <= value < _INT64:
        return _error("cannot convert value to integer")
    return celtypes.IntType(int(value))


def _part(index: int) -> Callable[[Any], celtypes.IntType]:
    def part(version: Any) -> celtypes.IntType:
        if not isinstance(version, Semver):
            raise TypeError(f"no such overload: {type(version).__name__}")
        return celtypes.IntType(version.key[index])

    return part


# ext.Strings (version 2)


def _string(value: Any) -> str:
    if not isinstance(value, celtypes.StringType):
        raise TypeError("no such overload")
    return str(value)


def _char_at(s: Any, index: Any) -> Any:
    text, i = _string(s), int(index)
    if not 0 <= i <= len(text):
        return _error(f"index out of range: {i}")
    return celtypes.StringType(text[i : i + 1])


def _index_of(target: Any, item: Any, *offset: Any) -> Any:
    if isinstance(target, celtypes.ListType):  # the Lists library
        found = [i for i, x in enumerate(target) if _equal(x, item)]
        return celtypes.IntType(found[0] if found else -1)
    text, sub = _string(target), _string(item)
    start = int(offset[0]) if offset else 0
    if sub == "":
        return celtypes.IntType(start)
    if offset and not 0 <= start < len(text):
        return _error(f"index out of range: {start}")
    return celtypes.IntType(text.find(sub, start))


def _last_index_of(target: Any, item: Any, *offset: Any) -> Any:
    if isinstance(target, celtypes.ListType):
        found = [i for i, x in enumerate(target) if _equal(x, item)]
        return celtypes.IntType(found[-1] if found else -1)
    text, sub = _string(target), _string(item)
    if not offset:
        return celtypes.IntType(text.rfind(sub))
    end = int(offset[0])
    if sub == "":
        return celtypes.IntType(end)
    if not 0 <= end < len(text):
        return _error(f"index out of range: {end}")
    return celtypes.IntType(text.rfind(sub, 0, end + len(sub)))


def _ascii(convert: Callable[[str], str]) -> Callable[[Any], celtypes.StringType]:
    def case(s: Any) -> celtypes.StringType:
        return celtypes.StringType("".join(convert(c) if c.isascii() else c for c in _string(s)))

    return case


def _replace(s: Any, old: Any, new: Any, count: Any = -1) -> celtypes.StringType:
    return celtypes.StringType(_string(s).replace(_string(old), _string(new), int(count)))


def _split(s: Any, separator: Any, limit: Any = -1) -> Any:
    text, sep, n = _string(s), _string(separator), int(limit)
    if n == 0:
        return celtypes.ListType()
    if sep == "":
        parts = list(text) if n < 0 else [*text[: n - 1], text[n - 1 :]] if text else []
    else:
        parts = text.split(sep, n - 1 if n > 0 else -1)
    return celtypes.ListType(celtypes.StringType(p) for p in parts)


def _substring(s: Any, start: Any, *end: Any) -> Any:
    text, i = _string(s), int(start)
    j = int(end[0]) if end else len(text)
    if i > j:
        return _error(f"invalid substring range. start: {i}, end: {j}")
    for index in (i, j):
        if not 0 <= index <= len(text):
            return _error(f"index out of range: {index}")
    return celtypes.StringType(text[i:j])


def _join(items: Any, separator: Any = "") -> celtypes.StringType:
    if not isinstance(items, celtypes.ListType):
        raise TypeError("no such overload")
    return celtypes.StringType(str(separator).join(_string(x) for x in items))


_QUOTE: Final = str.maketrans(
    {
        "\a": "\\a",
        "\b": "\\b",
        "\f": "\\f",
        "\n": "\\n",
        "\r": "\\r",
        "\t": "\\t",
        "\v": "\\v",
        "\\": "\\\\",
        '"': '\\"',
    }
)


def _quote(namespace: Any, s: Any) -> celtypes.StringType:
    """``strings.quote``: CEL's escape sequences written out, in double quotes."""
    return celtypes.StringType('"' + _string(s).translate(_QUOTE) + '"')


# Kubernetes Lists and Regex libraries


def _list(value: Any) -> celtypes.ListType:
    if not isinstance(value, celtypes.ListType):
        raise TypeError("no such overload")
    return value


def _sum(items: Any) -> Any:
    values = _list(items)
    if not values:
        return celtypes.IntType(0)
    total: Any = values[0]
    for value in values[1:]:
        total = total + value
    kind: Callable[[Any], Any] = type(values[0])
    return kind(total)


def _max(items: Any) -> Any:
    values = _list(items)
    if not values:
        return _error("max called on empty list")
    best = values[0]
    for value in values[1:]:
        best = value if _compare(value, best) > 0 else best
    return best


def _is_sorted(items: Any) -> celtypes.BoolType:
    values = _list(items)
    return celtypes.BoolType(all(_compare(a, b) <= 0 for a, b in itertools.pairwise(values)))


def _find(s: Any, pattern: Any) -> Any:
    try:
        found = re.search(_string(pattern), _string(s))
    except re.error as exc:
        return _error(f"invalid regular expression: {exc}")
    return celtypes.StringType(found.group(0) if found else "")


def _find_all(s: Any, pattern: Any, limit: Any = -1) -> Any:
    try:
        found = [m.group(0) for m in re.finditer(_string(pattern), _string(s))]
    except re.error as exc:
        return _error(f"invalid regular expression: {exc}")
    n = int(limit)
    return celtypes.ListType(celtypes.StringType(f) for f in (found if n < 0 else found[:n]))


# Sets, optional


def _contains(target: Any, *args: Any) -> Any:
    if isinstance(target, _Namespace):  # sets.contains(list, sublist)
        whole, part = _list(args[0]), _list(args[1])
        return celtypes.BoolType(all(any(_equal(x, y) for y in whole) for x in part))
    contains: Callable[..., Any] = base_functions["contains"]
    return contains(target, *args)


def _equivalent(namespace: Any, a: Any, b: Any) -> Any:
    return celtypes.BoolType(bool(_contains(namespace, a, b)) and bool(_contains(namespace, b, a)))


def _intersects(namespace: Any, a: Any, b: Any) -> celtypes.BoolType:
    return celtypes.BoolType(any(_equal(x, y) for x in _list(a) for y in _list(b)))


def _zero(value: Any) -> bool:
    if value is None or isinstance(value, (celtypes.NullType, celtypes.BoolType)):
        return not value
    if isinstance(value, (str, bytes, list, dict)) or _is_number(value):
        return not value
    return False


def _optional(value: Any) -> _Optional:
    if not isinstance(value, _Optional):
        raise TypeError("no such overload")
    return value


def _optional_value(o: Any) -> Any:
    found = _optional(o)
    return found.value if found.present else _error("optional.none() dereference")


def _optional_select(target: Any, key: Any) -> Any:
    """``target.?key`` / ``target[?key]``: present when the map has the key (the list the
    index), none otherwise; on an optional, selects inside it."""
    if isinstance(target, CELEvalError):
        return target
    if isinstance(target, _Optional):
        if not target.present:
            return _NONE
        target = target.value
    if isinstance(target, _DomainMap):
        return _Optional(True, target[key])
    if isinstance(target, celtypes.MapType):
        return _Optional(True, target[key]) if key in target else _NONE
    if isinstance(target, celtypes.ListType) and _is_number(key):
        index = int(key)
        return _Optional(True, target[index]) if 0 <= index < len(target) else _NONE
    return _error(f"no such overload: optional selection on {type(target).__name__}")


def _index(target: Any, key: Any) -> Any:
    if isinstance(target, _Optional):
        return _optional_select(target, key)
    getitem: Callable[[Any, Any], Any] = base_functions["_[_]"]
    return getitem(target, key)


_UNSUPPORTED: Final = frozenset(
    {
        # upstream libraries cel-python has nothing for; they compile, as upstream
        "url",
        "isURL",
        "getScheme",
        "getHost",
        "getHostname",
        "getPort",
        "getEscapedPath",
        "getQuery",
        "ip",
        "isIP",
        "cidr",
        "isCIDR",
        "containsIP",
        "containsCIDR",
        "family",
        "isUnspecified",
        "isLoopback",
        "isLinkLocalMulticast",
        "isLinkLocalUnicast",
        "isGlobalUnicast",
        "prefixLength",
        "masked",
        "format",
        "mul",
        "div",
        "divInt",
        "optMap",
        "optFlatMap",
        "existsOne",
        "transformList",
        "transformMap",
        "transformMapEntry",
        "authorizer",
        "image",
        "isImage",
    }
)


def _unsupported(name: str) -> Callable[..., CELEvalError]:
    def unsupported(*_: Any) -> CELEvalError:
        return _error(f"{name}() is not supported by gpusched's CEL environment")

    return unsupported


_FUNCTIONS: Final[dict[str, Any]] = {
    "_==_": _eq,
    "_!=_": _ne,
    "_<_": _relation(lambda c: c < 0),
    "_<=_": _relation(lambda c: c <= 0),
    "_>_": _relation(lambda c: c > 0),
    "_>=_": _relation(lambda c: c >= 0),
    "_in_": _in,
    "_[_]": _index,
    # quantity
    "quantity": _quantity,
    "isQuantity": _is_quantity,
    "compareTo": lambda a, b: celtypes.IntType(_ordering(a, b)),
    "isGreaterThan": lambda a, b: celtypes.BoolType(_ordering(a, b) > 0),
    "isLessThan": lambda a, b: celtypes.BoolType(_ordering(a, b) < 0),
    "add": lambda a, b: Quantity(_as_quantity(a).value + _quantity_of(b)),
    "sub": lambda a, b: Quantity(_as_quantity(a).value - _quantity_of(b)),
    "sign": lambda q: celtypes.IntType((_as_quantity(q).value > 0) - (q.value < 0)),
    "isInteger": lambda q: celtypes.BoolType(isinstance(_as_integer(q), celtypes.IntType)),
    "asInteger": _as_integer,
    "asApproximateFloat": lambda q: celtypes.DoubleType(float(_as_quantity(q).value)),
    # semver
    "semver": _semver,
    "isSemver": _is_semver,
    "major": _part(0),
    "minor": _part(1),
    "patch": _part(2),
    # ext.Strings v2
    "charAt": _char_at,
    "indexOf": _index_of,
    "lastIndexOf": _last_index_of,
    "lowerAscii": _ascii(str.lower),
    "upperAscii": _ascii(str.upper),
    "replace": _replace,
    "split": _split,
    "substring": _substring,
    "trim": lambda s: celtypes.StringType(_string(s).strip()),
    "join": _join,
    "quote": _quote,
    # Lists, Regex, sets
    "sum": _sum,
    "max": _max,
    "isSorted": _is_sorted,
    "find": _find,
    "findAll": _find_all,
    "contains": _contains,
    "equivalent": _equivalent,
    "intersects": _intersects,
    # optional
    "of": lambda _, v: _Optional(True, v),
    "none": lambda _: _NONE,
    "ofNonZeroValue": lambda _, v: _NONE if _zero(v) else _Optional(True, v),
    "hasValue": lambda o: celtypes.BoolType(_optional(o).present),
    "value": _optional_value,
    "orValue": lambda o, v: _optional(o).value if _optional(o).present else v,
    "or": lambda o, other: o if _optional(o).present else _optional(other),
    **{name: _unsupported(name) for name in _UNSUPPORTED},
}

_TYPE_NAMES: Final = frozenset(
    {"int", "uint", "double", "bool", "string", "bytes", "list", "map", "null_type", "type"}
)
_GLOBALS: Final = frozenset(
    {"has", "dyn", "size", "matches", "duration", "timestamp", *_TYPE_NAMES}
    | {"quantity", "isQuantity", "semver", "isSemver"}
    | {"url", "isURL", "ip", "isIP", "cidr", "isCIDR", "image", "isImage"}
)
_METHODS: Final = frozenset(
    set(_FUNCTIONS) | set(base_functions) | _MACROS | {"min", "bind", "existsOne"}
)
_VARIABLES: Final = frozenset({"device", *_NAMESPACES, *_TYPE_NAMES, "null"})

# ---------------------------------------------------------------------------------------------
# Parser (cel-python's grammar plus optional selection) and evaluator (cost, bind, optional)
# ---------------------------------------------------------------------------------------------

_GRAMMAR: Final = (
    (Path(celparser.__file__).parent / "cel.lark")
    .read_text()
    .replace(
        "member         : member_dot | member_dot_arg | member_index | member_object | primary",
        "member         : member_dot | member_dot_arg | member_index | member_object | primary"
        ' | member_dot_opt | member_index_opt\nmember_dot_opt : member ".?" IDENT\n'
        'member_index_opt : member "[" "?" expr "]"',
    )
)


class _Parser(celparser.CELParser):
    """cel-python's parser over :data:`_GRAMMAR` (its own Lark, not the shared singleton)."""

    def __init__(self) -> None:
        self.lark = lark.Lark(
            _GRAMMAR,
            parser="lalr",
            start="expr",
            g_regex_flags=re.M,
            lexer_callbacks={"IDENT": self.ambiguous_literals},
            propagate_positions=True,
            maybe_placeholders=False,
            priority="invert",
        )

    def parse(self, text: str) -> Tree[Any]:
        self.text = text
        try:
            return self.lark.parse(text)
        except (lark.exceptions.UnexpectedToken, lark.exceptions.UnexpectedCharacters) as ex:
            raise celparser.CELParseError(
                ex.get_context(text), *ex.args, line=ex.line, column=ex.column
            ) from None
        except (lark.exceptions.LexError, lark.exceptions.ParseError) as ex:
            raise celparser.CELParseError(str(ex).splitlines()[0], *ex.args) from None


class _CostExceeded(Exception):
    """Raised through cel-python's evaluator (which keeps only CELEvalError as a value)."""


class _Budget:
    __slots__ = ("left",)

    def __init__(self, left: int) -> None:
        self.left = left


def _ident_name(node: Tree[Any] | Token) -> str | None:
    """The name when ``node`` is a bare identifier (through pass-through nodes)."""
    while isinstance(node, Tree) and len(node.children) == 1 and node.data != "ident":
        node = node.children[0]
    if isinstance(node, Tree) and node.data == "ident":
        return str(node.children[0])
    return None


class _Evaluator(Evaluator):
    """cel-python's evaluator, counting operations against a budget, with optional selection,
    ``cel.bind`` and a message for two-variable comprehensions."""

    def __init__(self, ast: Tree[Any], activation: Activation, budget: _Budget) -> None:
        super().__init__(ast, activation)
        self.budget = budget

    def sub_evaluator(self, ast: Tree[Any]) -> Evaluator:
        return _Evaluator(ast, self.activation, self.budget)

    def _visit_tree(self, tree: Tree[Any]) -> Any:  # lark's one door to every node
        if len(tree.children) != 1:  # grammar pass-through nodes cost nothing
            self.budget.left -= 1
            if self.budget.left < 0:
                raise _CostExceeded(COST_EXCEEDED)
        return super()._visit_tree(tree)

    def member_dot_opt(self, tree: Tree[Any]) -> Any:
        target, name = tree.children
        return _optional_select(self.visit(target), celtypes.StringType(str(name)))

    def member_index_opt(self, tree: Tree[Any]) -> Any:
        target, key = self.visit_children(tree)
        return _optional_select(target, key)

    def member_dot(self, tree: Tree[Any]) -> Any:
        target, name = tree.children
        if _ident_name(target) is not None:  # a variable or a dotted name: cel-python's way
            return super().member_dot(tree)
        member = self.visit(target)
        if isinstance(member, _Optional):
            return _optional_select(member, celtypes.StringType(str(name)))
        if isinstance(member, CELEvalError):
            return member
        if isinstance(member, celtypes.MapType):
            try:
                return member[celtypes.StringType(str(name))]
            except KeyError:
                return CELEvalError(f"no such member in mapping: {str(name)!r}", KeyError, None)
        return CELEvalError(f"type {type(member).__name__} does not support field selection")

    def member_dot_arg(self, tree: Tree[Any]) -> Any:
        target, name = tree.children[0], str(tree.children[1])
        args = tree.children[2].children if len(tree.children) > 2 else []
        if name == "bind" and _ident_name(target) == "cel" and len(args) == 3:
            variable = _ident_name(args[0])
            value = self.visit(args[1])
            if variable is None or isinstance(value, CELEvalError):
                return value if isinstance(value, CELEvalError) else _error("bad cel.bind")
            try:
                return self.sub_evaluator(args[2]).evaluate({variable: value})
            except CELEvalError as exc:
                return exc
        if name in _MACROS and len(args) != 2:
            return _error(f"{name}() with {len(args) - 1} variables is not supported here")
        return super().member_dot_arg(tree)


class _Runner(celpy.InterpretedRunner):
    def evaluate(self, context: Any, cost_limit: int = MAX_COST) -> Any:
        return _Evaluator(self.ast, self.new_activation(), _Budget(cost_limit)).evaluate(context)


@functools.cache
def _env() -> celpy.Environment:
    """The environment, built on first use: its Lark parser takes ~0.2 s to build, which a
    process that never compiles a selector (most CLI commands) should not pay at import."""
    env = celpy.Environment(runner_class=_Runner)
    env.cel_parser = _Parser()
    return env


# ---------------------------------------------------------------------------------------------
# Activation
# ---------------------------------------------------------------------------------------------


def _attribute_value(value: Mapping[str, Any]) -> Any:
    if "int" in value:
        return celtypes.IntType(int(value["int"]))
    if "bool" in value:
        return celtypes.BoolType(bool(value["bool"]))
    if "string" in value:
        return celtypes.StringType(str(value["string"]))
    if "version" in value:
        return Semver(str(value["version"]))
    raise ValueError("unsupported attribute value")


def _split_name(name: str, driver: str) -> tuple[str, str]:
    domain, sep, ident = name.partition("/")
    return (domain, ident) if sep else (driver, name)


def device_activation(driver: str, device: Mapping[str, Any]) -> dict[str, Any] | str:
    """The CEL variables for ``device`` (a v1 ``Device``; a v1beta1 ``basic`` is unwrapped),
    or a message for an attribute it cannot represent (a bad version). O(attributes)."""
    body = device.get("basic", device)
    attributes: dict[Any, Any] = {}
    for name, value in (body.get("attributes") or {}).items():
        domain, ident = _split_name(name, driver)
        try:
            converted = _attribute_value(value)
        except ValueError as exc:
            return f"attribute {name}: {exc}"
        attributes.setdefault(celtypes.StringType(domain), {})[celtypes.StringType(ident)] = (
            converted
        )
    capacity: dict[Any, Any] = {}
    for name, value in (body.get("capacity") or {}).items():
        domain, ident = _split_name(name, driver)
        try:
            quantity = Quantity(parse_quantity(str(value.get("value", ""))))
        except ValueError as exc:
            return f"capacity {name}: {exc}"
        capacity.setdefault(celtypes.StringType(domain), {})[celtypes.StringType(ident)] = quantity
    return {
        "device": celtypes.MapType(
            {
                celtypes.StringType("driver"): celtypes.StringType(driver),
                celtypes.StringType("attributes"): _DomainMap(
                    {k: celtypes.MapType(v) for k, v in attributes.items()}
                ),
                celtypes.StringType("capacity"): _DomainMap(
                    {k: celtypes.MapType(v) for k, v in capacity.items()}
                ),
            }
        )
    }


# ---------------------------------------------------------------------------------------------
# Compile-time checks and cost
# ---------------------------------------------------------------------------------------------


def _size(node: Tree[Any] | Token) -> int:
    """Elements a collection expression may hold: a literal list's length, else 32."""
    while isinstance(node, Tree) and len(node.children) == 1:
        if node.data == "list_lit":
            break
        node = node.children[0]
    if isinstance(node, Tree) and node.data == "list_lit":
        items = node.children[0] if node.children else None
        return len(items.children) if isinstance(items, Tree) else 0
    return _UNKNOWN_SIZE


def estimate_cost(tree: Tree[Any] | Token) -> int:
    """Worst-case operations of a parsed expression (module docstring). O(tree)."""
    if isinstance(tree, Token):
        return 1
    children = tree.children
    if tree.data == "member_dot_arg" and len(children) >= 2:
        target, name = children[0], children[1]
        args = children[2] if len(children) > 2 else None
        if isinstance(name, Token) and str(name) in _MACROS and isinstance(args, Tree):
            body = sum(estimate_cost(arg) for arg in args.children[1:])
            return estimate_cost(target) + _size(target) * max(body, 1)
    own = 1 if len(children) != 1 else 0
    return own + sum(estimate_cost(child) for child in children)


def _bound_names(tree: Tree[Any]) -> set[str]:
    """Variables that macros and ``cel.bind`` introduce anywhere in ``tree``."""
    names: set[str] = set()
    for node in tree.iter_subtrees():
        if node.data != "member_dot_arg" or len(node.children) < 3:
            continue
        method, args = str(node.children[1]), node.children[2]
        if method in _MACROS or method in ("bind", "existsOne", "transformList", "transformMap"):
            bound = args.children[:-1] if method != "bind" else args.children[:1]
            names.update(n for n in map(_ident_name, bound) if n is not None)
    return names


def _undeclared(tree: Tree[Any]) -> str | None:
    """The first name neither upstream's environment nor the expression declares."""
    bound = _bound_names(tree) | _VARIABLES
    for node in tree.iter_subtrees():
        if node.data == "ident" and str(node.children[0]) not in bound:
            return str(node.children[0])
        if node.data == "ident_arg" and str(node.children[0]) not in _GLOBALS:
            return str(node.children[0])
        if node.data == "member_dot_arg" and str(node.children[1]) not in _METHODS:
            return str(node.children[1])
    return None


_LITERAL_TYPES: Final = {
    "INT_LIT": "int",
    "UINT_LIT": "uint",
    "FLOAT_LIT": "double",
    "STRING_LIT": "string",
    "MLSTRING_LIT": "string",
    "BYTES_LIT": "bytes",
    "NULL_LIT": "null_type",
}


def _literal_type(tree: Tree[Any]) -> str | None:
    """The type of a result that is a literal other than a bool (cel-go's checker refuses
    it); None for anything else."""
    node: Tree[Any] | Token = tree
    while isinstance(node, Tree) and len(node.children) == 1:
        node = node.children[0]
    if isinstance(node, Token):
        return _LITERAL_TYPES.get(node.type)
    if isinstance(node, Tree) and node.data in ("list_lit", "map_lit"):
        return "list(dyn)" if node.data == "list_lit" else "map(dyn, dyn)"
    return None


# ---------------------------------------------------------------------------------------------
# Selectors
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Match:
    """A selector's verdict on one device: ``matched``, or ``error`` (a message)."""

    matched: bool
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Selector:
    """One compiled expression: ``error`` when it cannot be used (``cost`` over
    :data:`MAX_COST` means it is too expensive); ``cost`` its estimate."""

    expression: str
    program: Any
    cost: int
    error: str | None = None

    @property
    def too_expensive(self) -> bool:
        return self.cost > MAX_COST

    def matches(self, activation: Mapping[str, Any], cost_limit: int = MAX_COST) -> Match:
        """Evaluate on one device's :func:`device_activation`, stopping after ``cost_limit``
        operations; never raises."""
        if self.error is not None:
            return Match(False, self.error)
        try:
            result = self.program.evaluate({**activation, **_NAMESPACES}, cost_limit)
        except _CostExceeded:
            return Match(False, f"CEL runtime error: {COST_EXCEEDED}")
        except Exception as exc:  # celpy raises CELEvalError, or a bug in a function
            return Match(False, f"CEL runtime error: {_message(exc)}")
        if isinstance(result, Exception):
            return Match(False, f"CEL runtime error: {_message(result)}")
        if not isinstance(result, celtypes.BoolType):
            return Match(False, f"CEL result must be a bool, not {type(result).__name__}")
        return Match(bool(result))


_MAX_MESSAGE: Final = 200
"""Characters of a CEL error kept in a message (cel-python may append the whole activation)."""


def _message(exc: BaseException) -> str:
    """The error's first line, at most :data:`_MAX_MESSAGE` characters (it goes on a claim's
    status and a pod's Event, where the device dump cel-python adds helps nobody)."""
    args = exc.args
    text = str(args[0]) if args else type(exc).__name__
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return first if len(first) <= _MAX_MESSAGE else first[: _MAX_MESSAGE - 3] + "..."


def _failed(expression: str, message: str, cost: int = 0) -> Selector:
    return Selector(expression, None, cost, message)


@functools.lru_cache(maxsize=4096)
def compile_selector(expression: str) -> Selector:
    """Compile ``expression`` (cached per expression); never raises. O(length) uncached."""
    if len(expression) > MAX_EXPRESSION_LENGTH:
        return _failed(
            expression,
            f"compilation failed: expression is {len(expression)} characters long, "
            f"more than {MAX_EXPRESSION_LENGTH}",
        )
    try:
        tree = _env().compile(expression)
    except Exception as exc:  # CELParseError, or lark's own
        line, column = getattr(exc, "line", None), getattr(exc, "column", None)
        where = f" at line {line}, column {column}" if line is not None else ""
        return _failed(expression, f"compilation failed: syntax error{where}")
    name = _undeclared(tree)
    if name is not None:
        return _failed(
            expression, f"compilation failed: undeclared reference to '{name}' (in container '')"
        )
    kind = _literal_type(tree)
    if kind is not None:
        return _failed(expression, f"must evaluate to bool or the unknown type, not {kind}")
    cost = estimate_cost(tree)
    if cost > MAX_COST:
        return _failed(
            expression,
            f"cost estimate {cost} exceeds the limit {MAX_COST}: simplify the expression",
            cost,
        )
    try:
        program = _env().program(tree, functions=_FUNCTIONS)
    except Exception as exc:
        return _failed(expression, f"compilation failed: {_message(exc)}", cost)
    return Selector(expression, program, cost)
