"""Node selectors: k8s.io/component-helpers/scheduling/corev1/nodeaffinity's matching.

A ``NodeSelector`` (``nodeSelectorTerms``) is compiled once (:meth:`NodeSelector.compile`) and
then matched against a node's labels and name by string comparisons:

- ``nodeSelectorTerms`` are ORed; within a term, ``matchExpressions`` and ``matchFields`` are
  ANDed; a term with neither matches nothing, and so does an empty list of terms;
- ``matchExpressions`` on node labels: ``In``, ``NotIn`` (label absent, or value not listed),
  ``Exists``, ``DoesNotExist``, ``Gt``/``Lt`` (the label's value as a base-10 int64);
- ``matchFields`` on ``metadata.name`` only, ``In``/``NotIn`` with exactly one value;
- a malformed requirement makes its term match nothing while the other terms still count
  (upstream's ``LazyErrorNodeSelector``); :attr:`NodeSelector.errors` says why.

Used by the NodeAffinity plugin (pods' node affinity) and by DRA (ResourceSlices and claim
allocations select nodes the same way). Pure: no Kubernetes client, no framework.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["OBJECT_NAME_FIELD", "NodeSelector", "SelectorError", "Term", "compile_requirement"]

OBJECT_NAME_FIELD: Final = "metadata.name"
"""The one node field ``matchFields`` can select on."""

_INT64: Final = re.compile(r"[+-]?[0-9]+")
_INT64_MIN: Final = -(1 << 63)
_INT64_MAX: Final = (1 << 63) - 1


class SelectorError(ValueError):
    """A malformed node selector requirement; the message names it by its path."""


def _parse_int64(text: str) -> int | None:
    """``strconv.ParseInt(text, 10, 64)``: the value, or ``None`` if it is not one."""
    if not _INT64.fullmatch(text):
        return None
    value = int(text)
    return value if _INT64_MIN <= value <= _INT64_MAX else None


# -- compiled selectors ----------------------------------------------------------------------


class _Requirement:
    """One compiled ``matchExpressions`` entry (upstream's ``labels.Requirement``)."""

    __slots__ = ("key", "number", "operator", "values")

    def __init__(self, key: str, operator: str, values: frozenset[str], number: int) -> None:
        self.key = key
        self.operator = operator
        self.values = values
        self.number = number

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        op = self.operator
        if op == "In":
            return value is not None and value in self.values
        if op == "NotIn":
            return value is None or value not in self.values
        if op == "Exists":
            return value is not None
        if op == "DoesNotExist":
            return value is None
        if value is None:
            return False
        number = _parse_int64(value)
        if number is None:
            return False
        return number > self.number if op == "Gt" else number < self.number


def compile_requirement(raw: Mapping[str, Any], path: str) -> _Requirement:
    key = str(raw.get("key") or "")
    operator = str(raw.get("operator") or "")
    values = [str(v) for v in raw.get("values") or ()]
    if not key:
        raise SelectorError(f"{path}.key: must not be empty")
    number = 0
    if operator in ("In", "NotIn"):
        if not values:
            raise SelectorError(f"{path}.values: must be non-empty for operator {operator}")
    elif operator in ("Exists", "DoesNotExist"):
        if values:
            raise SelectorError(f"{path}.values: must be empty for operator {operator}")
    elif operator in ("Gt", "Lt"):
        parsed = _parse_int64(values[0]) if len(values) == 1 else None
        if parsed is None:
            raise SelectorError(
                f"{path}.values: operator {operator} needs exactly one integer value, got {values}"
            )
        number = parsed
    else:
        raise SelectorError(
            f"{path}.operator: {operator!r} is not one of In, NotIn, Exists, DoesNotExist, Gt, Lt"
        )
    return _Requirement(key, operator, frozenset(values), number)


def _compile_field(raw: Mapping[str, Any], path: str) -> tuple[str, bool, str]:
    """``(field, equal, value)`` of one ``matchFields`` entry."""
    values = list(raw.get("values") or ())
    if len(values) != 1:
        raise SelectorError(f"{path}.values: must have one element, got {values}")
    operator = raw.get("operator")
    if operator not in ("In", "NotIn"):
        raise SelectorError(f"{path}.operator: {operator!r} is not a valid field operator")
    return str(raw.get("key") or ""), operator == "In", str(values[0])


class Term:
    """One compiled ``NodeSelectorTerm``: its requirements, all of which must match."""

    __slots__ = ("expressions", "fields")

    def __init__(
        self,
        expressions: tuple[_Requirement, ...],
        fields: tuple[tuple[str, bool, str], ...],
    ) -> None:
        self.expressions = expressions
        self.fields = fields

    @classmethod
    def compile(cls, raw: Mapping[str, Any], path: str = "") -> Term | None:
        """The compiled term; ``None`` for an empty one (it matches nothing). Raises
        ``SelectorError`` for a malformed requirement."""
        expressions = raw.get("matchExpressions") or ()
        fields = raw.get("matchFields") or ()
        if not expressions and not fields:
            return None
        return cls(
            tuple(
                compile_requirement(r, f"{path}.matchExpressions[{i}]")
                for i, r in enumerate(expressions)
            ),
            tuple(_compile_field(r, f"{path}.matchFields[{i}]") for i, r in enumerate(fields)),
        )

    def matches(self, labels: Mapping[str, str], node_name: str) -> bool:
        for requirement in self.expressions:
            if not requirement.matches(labels):
                return False
        for field, equal, value in self.fields:
            actual = node_name if field == OBJECT_NAME_FIELD else ""
            if (actual == value) != equal:
                return False
        return True


class NodeSelector:
    """Compiled ``nodeSelectorTerms`` (ORed), keeping the terms that compile (upstream's
    ``LazyErrorNodeSelector``); ``errors`` lists why the others match nothing."""

    __slots__ = ("errors", "terms")

    def __init__(self, terms: tuple[Term, ...], errors: tuple[str, ...] = ()) -> None:
        self.terms = terms
        self.errors = errors

    @classmethod
    def compile(cls, raw: Mapping[str, Any], path: str = "") -> NodeSelector:
        """Compile a ``NodeSelector`` object; ``path`` prefixes the error messages."""
        prefix = f"{path}.nodeSelectorTerms" if path else "nodeSelectorTerms"
        terms: list[Term] = []
        errors: list[str] = []
        for i, raw_term in enumerate(raw.get("nodeSelectorTerms") or ()):
            try:
                term = Term.compile(raw_term or {}, f"{prefix}[{i}]")
            except SelectorError as exc:
                errors.append(str(exc))
                continue
            if term is not None:
                terms.append(term)
        return cls(tuple(terms), tuple(errors))

    def matches(self, labels: Mapping[str, str], node_name: str) -> bool:
        return any(term.matches(labels, node_name) for term in self.terms)
