"""DRA device selectors: CEL expressions over one device, compiled once, evaluated safely.

A ``DeviceClass`` or a claim's request selects devices with CEL (``resource.k8s.io/v1``
``selectors[].cel.expression``). This module gives them upstream's environment
(``k8s.io/dynamic-resource-allocation/cel/compile.go``) on cel-python:

- ``device.driver`` (string); ``device.attributes[domain][id]`` and
  ``device.capacity[domain][id]``, where an unqualified attribute or capacity name belongs to
  the driver's domain. As upstream, an unknown *domain* is an empty map, an unknown *id* in it
  a runtime error ("no such member"): guard with ``has(...)``.
- attribute values are int, bool, string or a :class:`Semver` (``version`` attributes);
  capacities and ``quantity("40Gi")`` are :class:`Quantity`, compared with ``compareTo``,
  ``isGreaterThan``, ``isLessThan`` (``<`` on quantities is a type error, as upstream);
  ``semver("1.2.3")`` the same, plus ``major()``, ``minor()``, ``patch()``.
- the result must be a bool.

Nothing escapes: :func:`compile_selector` returns a :class:`Selector` whose ``error`` is set
for an invalid expression, and :meth:`Selector.matches` returns a :class:`Match` with a message
for a runtime error, a non-bool result or an over-cost expression; the caller (the allocator,
then the DynamicResources plugin) reports that message on the claim.

**Cost.** cel-python keeps no runtime cost (cel-go's ``CostLimit``), so the cost is bounded
statically and honestly: an expression longer than upstream's 10 KiB is refused, and
:func:`estimate_cost` counts the parse tree's operations, multiplying a comprehension's body
(``all``, ``exists``, ``exists_one``, ``map``, ``filter``) by the size of what it iterates (a
literal list's length, else 32: upstream's maximum attributes per device, which bounds every
map a device offers). Expressions estimated above upstream's 1,000,000 are refused before they
run. Device data is bounded (attributes are scalars, strings at most 64 characters), so the
estimate bounds the work. Unlike cel-go there is no type checker: a type error shows at
evaluation, on the device that triggers it; ``==`` across types (``dyn(1) == "a"``) is an
error here where cel-go's heterogeneous equality says false; ``cel.bind`` is missing.

Costs: compiling is O(expression length), cached per expression (:func:`compile_selector`,
LRU of 4096); evaluating is O(estimated cost) plus building the device's activation, which
:func:`device_activation` does once per device (the allocator caches it).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Final

import celpy
from celpy import celtypes
from lark import Token, Tree

from gpusched.quantity import format_quantity, parse_quantity

__all__ = [
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
"""``resourceapi.CELSelectorExpressionMaxCost``, applied to :func:`estimate_cost`."""
_UNKNOWN_SIZE: Final = 32
"""Elements assumed in a collection that is not a literal list: upstream's
``ResourceSliceMaxAttributesAndCapacitiesPerDevice``."""
_MACROS: Final = frozenset({"all", "exists", "exists_one", "map", "filter"})

_ENV = celpy.Environment()


@functools.total_ordering
class Quantity:
    """A Kubernetes quantity in CEL (``apiservercel.Quantity``): exact, compared by methods."""

    __slots__ = ("value",)

    def __init__(self, value: Fraction) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quantity) and self.value == other.value

    def __lt__(self, other: object) -> bool:
        # CEL's `<` on quantities has no overload upstream: refuse it here too.
        raise TypeError("no such overload: '<' on quantity (use compareTo or isLessThan)")

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return f"quantity({format_quantity(self.value)!r})"


_SEMVER_RE: Final = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$"
)


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


def _compare(a: object, b: object) -> int:
    if isinstance(a, Quantity) and isinstance(b, Quantity):
        return (a.value > b.value) - (a.value < b.value)
    if isinstance(a, Semver) and isinstance(b, Semver):
        return (a.key > b.key) - (a.key < b.key)
    raise TypeError(f"no such overload: compare {type(a).__name__} with {type(b).__name__}")


def _quantity(text: object) -> Quantity:
    return Quantity(parse_quantity(str(text)))


def _semver(text: object) -> Semver:
    return Semver(str(text))


def _part(index: int) -> Any:
    def part(version: object) -> celtypes.IntType:
        if not isinstance(version, Semver):
            raise TypeError(f"no such overload: {type(version).__name__}")
        return celtypes.IntType(version.key[index])

    return part


_FUNCTIONS: Final[dict[str, Any]] = {
    "quantity": _quantity,
    "semver": _semver,
    "compareTo": lambda a, b: celtypes.IntType(_compare(a, b)),
    "isGreaterThan": lambda a, b: celtypes.BoolType(_compare(a, b) > 0),
    "isLessThan": lambda a, b: celtypes.BoolType(_compare(a, b) < 0),
    "asInteger": lambda q: celtypes.IntType(int(q.value)),
    "asApproximateFloat": lambda q: celtypes.DoubleType(float(q.value)),
    "major": _part(0),
    "minor": _part(1),
    "patch": _part(2),
}


class _DomainMap(celtypes.MapType):
    """``device.attributes`` / ``device.capacity``: an unknown domain is an empty map."""

    def __getitem__(self, key: Any) -> Any:
        try:
            return super().__getitem__(key)
        except KeyError:
            return celtypes.MapType()


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


def _split(name: str, driver: str) -> tuple[str, str]:
    domain, sep, ident = name.partition("/")
    return (domain, ident) if sep else (driver, name)


def device_activation(driver: str, device: Mapping[str, Any]) -> dict[str, Any] | str:
    """The CEL variables for ``device`` (a v1 ``Device``; a v1beta1 ``basic`` is unwrapped),
    or a message for an attribute it cannot represent (a bad version). O(attributes)."""
    body = device.get("basic", device)
    attributes: dict[Any, Any] = {}
    for name, value in (body.get("attributes") or {}).items():
        domain, ident = _split(name, driver)
        try:
            converted = _attribute_value(value)
        except ValueError as exc:
            return f"attribute {name}: {exc}"
        attributes.setdefault(celtypes.StringType(domain), {})[celtypes.StringType(ident)] = (
            converted
        )
    capacity: dict[Any, Any] = {}
    for name, value in (body.get("capacity") or {}).items():
        domain, ident = _split(name, driver)
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
    """Worst-case operations of a parsed expression (module docstring, "Cost"). O(tree)."""
    if isinstance(tree, Token):
        return 1
    children = tree.children
    if tree.data == "member_dot_arg" and len(children) >= 2:
        target, name = children[0], children[1]
        args = children[2] if len(children) > 2 else None
        if isinstance(name, Token) and str(name) in _MACROS and isinstance(args, Tree):
            body = sum(estimate_cost(arg) for arg in args.children[1:])
            return estimate_cost(target) + _size(target) * max(body, 1)
    own = 1 if len(children) != 1 else 0  # grammar pass-through nodes cost nothing
    return own + sum(estimate_cost(child) for child in children)


@dataclass(frozen=True, slots=True)
class Match:
    """A selector's verdict on one device: ``matched``, or ``error`` (a message)."""

    matched: bool
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Selector:
    """One compiled expression: ``error`` when it cannot be used; ``cost`` its estimate."""

    expression: str
    program: Any
    cost: int
    error: str | None = None

    def matches(self, activation: Mapping[str, Any]) -> Match:
        """Evaluate on one device's :func:`device_activation`; never raises."""
        if self.error is not None:
            return Match(False, self.error)
        try:
            result = self.program.evaluate(dict(activation))
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


@functools.lru_cache(maxsize=4096)
def compile_selector(expression: str) -> Selector:
    """Compile ``expression`` (cached per expression); never raises. O(length) uncached."""
    if len(expression) > MAX_EXPRESSION_LENGTH:
        return Selector(
            expression,
            None,
            0,
            f"compilation failed: expression is {len(expression)} characters long, "
            f"more than {MAX_EXPRESSION_LENGTH}",
        )
    try:
        tree = _ENV.compile(expression)
    except Exception as exc:  # CELParseError, or lark's own
        line, column = getattr(exc, "line", None), getattr(exc, "column", None)
        where = f" at line {line}, column {column}" if line is not None else ""
        return Selector(expression, None, 0, f"compilation failed: syntax error{where}")
    cost = estimate_cost(tree)
    if cost > MAX_COST:
        return Selector(
            expression,
            None,
            cost,
            f"cost estimate {cost} exceeds the limit {MAX_COST}: simplify the expression",
        )
    try:
        program = _ENV.program(tree, functions=_FUNCTIONS)
    except Exception as exc:
        return Selector(expression, None, cost, f"compilation failed: {_message(exc)}")
    return Selector(expression, program, cost)
