"""Label and field selectors, parsed and matched exactly as kube-apiserver does.

Pure functions and frozen value objects. The server parses ``labelSelector`` /
``fieldSelector`` once per request or watch, then calls ``matches`` for every object and watch
event: parsing builds a tuple of precompiled checks, so ``matches`` is one loop over it,
O(requirements), allocation-free.

Followed from apimachinery: ``pkg/labels/selector.go`` (the lexer and recursive-descent parser
with its context-sensitive ``in``/``notin``, the ``()``/``(,)`` rules and every ``found '...',
expected: ...`` message; ``NewRequirement``; ``Matches``, ``gt``/``lt`` on base-10 int64; set
values sorted and deduplicated); ``pkg/util/validation`` in its v1.32 wording (as the kubectl
v1.32 used here prints it); ``LabelSelectorAsSelector`` (``None`` selects nothing, ``{}``
everything); ``pkg/fields/selector.go`` (terms split on unescaped commas and sorted, the first
``!=``/``==``/``=`` splits a term, ``\\\\``, ``\\,``, ``\\=`` unescaped, a missing field reads
``""``); and the field-label conversions of ``pkg/apis/core/v1/conversion.go`` (``field label
not supported: X``, or ``"X" is not a known field selector: only "metadata.name",
"metadata.namespace"`` for kinds without one).

Every parse problem raises ``SelectorError``, whose message is exactly the ``message`` of the
server's ``400 BadRequest`` (``handlers/get.go`` adds no prefix); field errors among them are
:mod:`gpusched.sim.field` errors.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from gpusched.sim import field
from gpusched.sim.apimachinery import (
    go_quote,
    go_string_slice,
    is_qualified_name,
    is_valid_label_value,
)

__all__ = [
    "FieldRequirement",
    "FieldSelector",
    "LabelRequirement",
    "LabelSelector",
    "SelectorError",
    "default_field_label_conversion",
    "escape_field_value",
    "field_label_conversion",
    "label_selector_from_object",
    "parse_field_selector",
    "parse_label_selector",
]


class SelectorError(ValueError):
    """A selector that kube-apiserver rejects; ``str(err)`` is its 400 BadRequest message."""


# --------------------------------------------------------------------------------------------
# Key and value validation: gpusched.sim.apimachinery (pkg/util/validation, v1.32 wording)
# --------------------------------------------------------------------------------------------


def _key_error(key: str, path: field.Path) -> field.FieldError | None:
    """``labels.validateLabelKey``: one ``field.Invalid`` with the messages joined by ``; ``."""
    errs = is_qualified_name(key)
    if errs:
        return field.invalid(path, key, "; ".join(errs))
    return None


_INT64_RE: Final = re.compile(r"[+-]?[0-9]+")
_INT64_MIN: Final = -(1 << 63)
_INT64_MAX: Final = (1 << 63) - 1


def _parse_int64(s: str) -> int | None:
    """``strconv.ParseInt(s, 10, 64)``; ``None`` where Go returns an error."""
    if not _INT64_RE.fullmatch(s):
        return None
    n = int(s)
    if n < _INT64_MIN or n > _INT64_MAX:
        return None
    return n


# --------------------------------------------------------------------------------------------
# Label selectors (pkg/labels/selector.go)
# --------------------------------------------------------------------------------------------

# selection.Operator values, as the Go constants spell them.
IN: Final = "in"
NOT_IN: Final = "notin"
EQUALS: Final = "="
DOUBLE_EQUALS: Final = "=="
NOT_EQUALS: Final = "!="
EXISTS: Final = "exists"
DOES_NOT_EXIST: Final = "!"
GREATER_THAN: Final = "gt"
LESS_THAN: Final = "lt"

_BINARY_OPERATOR_LIST: Final = (
    IN,
    NOT_IN,
    EQUALS,
    DOUBLE_EQUALS,
    NOT_EQUALS,
    GREATER_THAN,
    LESS_THAN,
)
_BINARY_OPERATORS: Final = ", ".join(_BINARY_OPERATOR_LIST)
_OPERATORS: Final = (*_BINARY_OPERATOR_LIST, EXISTS, DOES_NOT_EXIST)

# Precompiled check codes used by LabelSelector.matches.
_M_IN: Final = 0  # In, =, ==: key present and value in set
_M_NOT_IN: Final = 1  # NotIn, !=: key absent or value not in set
_M_EXISTS: Final = 2
_M_NOT_EXISTS: Final = 3
_M_GT: Final = 4
_M_LT: Final = 5

_MATCH_CODE: Final = {
    IN: _M_IN,
    EQUALS: _M_IN,
    DOUBLE_EQUALS: _M_IN,
    NOT_IN: _M_NOT_IN,
    NOT_EQUALS: _M_NOT_IN,
    EXISTS: _M_EXISTS,
    DOES_NOT_EXIST: _M_NOT_EXISTS,
    GREATER_THAN: _M_GT,
    LESS_THAN: _M_LT,
}


@dataclass(frozen=True, slots=True)
class LabelRequirement:
    """One requirement: ``key``, a ``selection.Operator`` string, and its values.

    ``operator`` is one of ``in``, ``notin``, ``=``, ``==``, ``!=``, ``exists``, ``!``, ``gt``,
    ``lt`` (the Go constants). Build requirements with ``parse_label_selector`` or
    ``label_selector_from_object``, which validate them.
    """

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def __str__(self) -> str:
        """``Requirement.String``: ``!k``, ``k``, ``k=v``, ``k in (a,b)``, ``k>5``..."""
        op = self.operator
        if op == DOES_NOT_EXIST:
            return "!" + self.key
        if op == EXISTS:
            return self.key
        values = ",".join(sorted(self.values)) if len(self.values) > 1 else "".join(self.values)
        if op in (IN, NOT_IN):
            return f"{self.key} {op} ({values})"
        symbol = {GREATER_THAN: ">", LESS_THAN: "<"}.get(op, op)
        return f"{self.key}{symbol}{values}"


def _new_requirement(
    key: str, op: str, values: Sequence[str] | None, *, validate_key: bool = True
) -> LabelRequirement:
    """``labels.NewRequirement``: validates and returns, or raises with the aggregated errors."""
    errs: list[field.FieldError] = []
    if validate_key and (err := _key_error(key, "key")) is not None:
        errs.append(err)
    vals = list(values) if values is not None else []
    # NewRequirement's rule on the number of values, by operator.
    count_error = ""
    if op in (IN, NOT_IN) and not vals:
        count_error = "for 'in', 'notin' operators, values set can't be empty"
    elif op in (EQUALS, DOUBLE_EQUALS, NOT_EQUALS) and len(vals) != 1:
        count_error = "exact-match compatibility requires one single value"
    elif op in (EXISTS, DOES_NOT_EXIST) and vals:
        count_error = "values set must be empty for exists and does not exist"
    elif op in (GREATER_THAN, LESS_THAN) and len(vals) != 1:
        count_error = "for 'Gt', 'Lt' operators, exactly one value is required"
    if count_error:
        errs.append(field.invalid("values", field.Printed(go_string_slice(values)), count_error))
    if op in (GREATER_THAN, LESS_THAN):
        for i, v in enumerate(vals):
            if _parse_int64(v) is None:
                errs.append(
                    field.invalid(
                        f"values[{i}]", v, "for 'Gt', 'Lt' operators, the value must be an integer"
                    )
                )
    elif op not in _OPERATORS:  # unreachable from the parser; kept for parity with upstream
        errs.append(field.not_supported("operator", op, _OPERATORS))
    for i, v in enumerate(vals):
        value_errs = is_valid_label_value(v)
        if value_errs:
            errs.append(field.invalid(f"values[{i}][{key}]", v, "; ".join(value_errs)))
    if errs:
        raise SelectorError(field.aggregate_errors(errs))
    return LabelRequirement(key, op, tuple(vals))


def _compile_label(req: LabelRequirement) -> tuple[int, str, Any]:
    code = _MATCH_CODE[req.operator]
    if code in (_M_GT, _M_LT):
        return code, req.key, _parse_int64(req.values[0])
    if code in (_M_IN, _M_NOT_IN):
        return code, req.key, frozenset(req.values)
    return code, req.key, None


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A parsed label selector: the AND of ``requirements`` (sorted by key, as Go sorts them).

    ``LabelSelector.nothing()`` is ``labels.Nothing()`` (what a ``None`` metav1.LabelSelector
    converts to): it matches no object. An empty selector matches every object.
    """

    requirements: tuple[LabelRequirement, ...] = ()
    selects_nothing: bool = False
    _checks: tuple[tuple[int, str, Any], ...] = dataclasses.field(
        init=False, repr=False, compare=False, default=()
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "_checks", tuple(_compile_label(r) for r in self.requirements))

    @classmethod
    def nothing(cls) -> LabelSelector:
        return cls(selects_nothing=True)

    def empty(self) -> bool:
        """``Selector.Empty``: true when the selector does not restrict the selection."""
        return not self.selects_nothing and not self.requirements

    def matches(self, labels: Mapping[str, str]) -> bool:
        """``Selector.Matches``; O(number of requirements)."""
        if self.selects_nothing:
            return False
        for code, key, arg in self._checks:
            value = labels.get(key)
            if code == _M_IN:
                if value is None or value not in arg:
                    return False
            elif code == _M_NOT_IN:
                if value is not None and value in arg:
                    return False
            elif code == _M_EXISTS:
                if value is None:
                    return False
            elif code == _M_NOT_EXISTS:
                if value is not None:
                    return False
            else:  # gt / lt: label value must parse as int64 too
                number = None if value is None else _parse_int64(value)
                if number is None:
                    return False
                if code == _M_GT and not number > arg:
                    return False
                if code == _M_LT and not number < arg:
                    return False
        return True

    def requires_exact_match(self, key: str) -> str | None:
        """``Selector.RequiresExactMatch``: the single value ``key`` must have, if any."""
        for req in self.requirements:
            if req.key == key:
                if req.operator in (EQUALS, DOUBLE_EQUALS, IN) and len(req.values) == 1:
                    return req.values[0]
                return None
        return None

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


# Lexer tokens (labels.Token).
_T_ERROR: Final = 0
_T_EOS: Final = 1
_T_CLOSE: Final = 2
_T_COMMA: Final = 3
_T_NOT: Final = 4
_T_DEQ: Final = 5
_T_EQ: Final = 6
_T_GT: Final = 7
_T_ID: Final = 8
_T_IN: Final = 9
_T_LT: Final = 10
_T_NEQ: Final = 11
_T_NOTIN: Final = 12
_T_OPEN: Final = 13

_STRING_TO_TOKEN: Final = {
    ")": _T_CLOSE,
    ",": _T_COMMA,
    "!": _T_NOT,
    "==": _T_DEQ,
    "=": _T_EQ,
    ">": _T_GT,
    "in": _T_IN,
    "<": _T_LT,
    "!=": _T_NEQ,
    "notin": _T_NOTIN,
    "(": _T_OPEN,
}
_SPECIAL: Final = frozenset("=!(),><")
_WHITESPACE: Final = frozenset(" \t\r\n")
_ID_STOP: Final = _SPECIAL | _WHITESPACE | {"\x00"}


def _lex(s: str) -> list[tuple[int, str]]:
    """``Lexer.Lex`` until end of string.

    Go's lexer reads a NUL byte as "end of input": at the start of a token it ends the selector,
    inside a token it ends that token (and is consumed). Both quirks are kept.
    """
    items: list[tuple[int, str]] = []
    pos, n = 0, len(s)
    while True:
        while pos < n and s[pos] in _WHITESPACE:
            pos += 1
        if pos >= n or s[pos] == "\x00":
            items.append((_T_EOS, ""))
            return items
        if s[pos] in _SPECIAL:
            # scanSpecialSymbol: extend while the buffer still spells a token.
            buf, tok, lit = "", _T_ERROR, ""
            while pos < n:
                c = s[pos]
                if c == "\x00":
                    pos += 1
                    break
                if c not in _SPECIAL:
                    break
                buf += c
                found = _STRING_TO_TOKEN.get(buf)
                if found is not None:
                    tok, lit = found, buf
                elif tok != _T_ERROR:
                    break
                pos += 1
            if tok == _T_ERROR:
                items.append((_T_ERROR, f"error expected: keyword found '{buf}'"))
            else:
                items.append((tok, lit))
        else:
            start = pos
            while pos < n and s[pos] not in _ID_STOP:
                pos += 1
            word = s[start:pos]
            if pos < n and s[pos] == "\x00":
                pos += 1
            items.append((_STRING_TO_TOKEN.get(word, _T_ID), word))


class _LabelParser:
    """``labels.Parser``: the recursive-descent parser over the scanned token list."""

    def __init__(self, text: str) -> None:
        self.items = _lex(text)
        self.pos = 0

    def lookahead(self, values: bool) -> tuple[int, str]:
        tok, lit = self.items[self.pos]
        if values and tok in (_T_IN, _T_NOTIN):
            tok = _T_ID
        return tok, lit

    def consume(self, values: bool) -> tuple[int, str]:
        result = self.lookahead(values)
        self.pos += 1
        return result

    def parse(self) -> list[LabelRequirement]:
        requirements: list[LabelRequirement] = []
        while True:
            tok, lit = self.lookahead(True)
            if tok in (_T_ID, _T_NOT):
                try:
                    requirements.append(self.parse_requirement())
                except SelectorError as err:
                    raise SelectorError(f"unable to parse requirement: {err}") from None
                t, lit2 = self.consume(True)
                if t == _T_EOS:
                    return requirements
                if t == _T_COMMA:
                    t2, lit3 = self.lookahead(True)
                    if t2 not in (_T_ID, _T_NOT):
                        raise SelectorError(f"found '{lit3}', expected: identifier after ','")
                else:
                    raise SelectorError(f"found '{lit2}', expected: ',' or 'end of string'")
            elif tok == _T_EOS:
                return requirements
            else:
                raise SelectorError(f"found '{lit}', expected: !, identifier, or 'end of string'")

    def parse_requirement(self) -> LabelRequirement:
        # parseKeyAndInferOperator
        operator = ""
        tok, key = self.consume(True)
        if tok == _T_NOT:
            operator = DOES_NOT_EXIST
            tok, key = self.consume(True)
        if tok != _T_ID:
            raise SelectorError(f"found '{key}', expected: identifier")
        if (err := _key_error(key, None)) is not None:
            raise SelectorError(str(err))
        if self.lookahead(True)[0] in (_T_EOS, _T_COMMA) and operator != DOES_NOT_EXIST:
            operator = EXISTS
        if operator in (EXISTS, DOES_NOT_EXIST):
            return _new_requirement(key, operator, [], validate_key=False)
        # parseOperator
        tok, lit = self.consume(False)
        operator = {
            _T_IN: IN,
            _T_EQ: EQUALS,
            _T_DEQ: DOUBLE_EQUALS,
            _T_GT: GREATER_THAN,
            _T_LT: LESS_THAN,
            _T_NOTIN: NOT_IN,
            _T_NEQ: NOT_EQUALS,
        }.get(tok, "")
        if not operator:
            raise SelectorError(f"found '{lit}', expected: {_BINARY_OPERATORS}")
        values = self.parse_values() if operator in (IN, NOT_IN) else self.parse_exact_value()
        return _new_requirement(key, operator, sorted(values), validate_key=False)

    def parse_values(self) -> set[str]:
        tok, lit = self.consume(True)
        if tok != _T_OPEN:
            raise SelectorError(f"found '{lit}' expected: '('")
        tok, lit = self.lookahead(True)
        if tok in (_T_ID, _T_COMMA):
            values = self.parse_identifiers_list()
            if self.consume(True)[0] != _T_CLOSE:  # unreachable, as in Go
                raise SelectorError(f"found '{lit}', expected: ')'")
            return values
        if tok == _T_CLOSE:  # "()" is the set {""}
            self.consume(True)
            return {""}
        raise SelectorError(f"found '{lit}', expected: ',', ')' or identifier")

    def parse_identifiers_list(self) -> set[str]:
        values: set[str] = set()
        while True:
            tok, lit = self.consume(True)
            if tok == _T_ID:
                values.add(lit)
                tok2, lit2 = self.lookahead(True)
                if tok2 == _T_COMMA:
                    continue
                if tok2 == _T_CLOSE:
                    return values
                raise SelectorError(f"found '{lit2}', expected: ',' or ')'")
            if tok == _T_COMMA:
                if not values:
                    values.add("")  # "(," starts with an empty value
                tok2 = self.lookahead(True)[0]
                if tok2 in (_T_CLOSE, _T_COMMA):  # ",)" and ",," mean an empty value
                    values.add("")
                if tok2 == _T_CLOSE:
                    return values
            else:
                raise SelectorError(f"found '{lit}', expected: ',', or identifier")

    def parse_exact_value(self) -> set[str]:
        if self.lookahead(True)[0] in (_T_EOS, _T_COMMA):
            return {""}
        tok, lit = self.consume(True)
        if tok == _T_ID:
            return {lit}
        raise SelectorError(f"found '{lit}', expected: identifier")


def parse_label_selector(text: str) -> LabelSelector:
    """``labels.Parse``: ``""`` (or only whitespace) selects everything.

    Raises ``SelectorError`` with kube-apiserver's message, e.g.
    ``unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt``.
    """
    requirements = _LabelParser(text).parse()
    requirements.sort(key=lambda r: r.key)
    return LabelSelector(tuple(requirements))


_SELECTOR_OPERATORS: Final = {
    "In": IN,
    "NotIn": NOT_IN,
    "Exists": EXISTS,
    "DoesNotExist": DOES_NOT_EXIST,
}


def label_selector_from_object(obj: Mapping[str, Any] | None) -> LabelSelector:
    """``metav1.LabelSelectorAsSelector`` for a ``metav1.LabelSelector`` as a dict.

    ``None`` selects nothing; ``{}`` (no matchLabels, no matchExpressions) selects everything.
    """
    if obj is None:
        return LabelSelector.nothing()
    match_labels: Mapping[str, str] = obj.get("matchLabels") or {}
    match_expressions: Sequence[Mapping[str, Any]] = obj.get("matchExpressions") or []
    requirements: list[LabelRequirement] = []
    for key, value in match_labels.items():
        requirements.append(_new_requirement(key, EQUALS, [value]))
    for expr in match_expressions:
        operator = expr.get("operator", "")
        op = _SELECTOR_OPERATORS.get(operator)
        if op is None:
            raise SelectorError(f"{go_quote(str(operator))} is not a valid label selector operator")
        # Go copies the values with append([]string(nil), ...): an empty list becomes nil.
        values = list(expr.get("values") or []) or None
        requirements.append(_new_requirement(expr.get("key", ""), op, values))
    requirements.sort(key=lambda r: r.key)
    return LabelSelector(tuple(requirements))


# --------------------------------------------------------------------------------------------
# Field selectors (pkg/fields/selector.go)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FieldRequirement:
    """``fields.Requirement``: ``operator`` is ``=`` (for ``=`` and ``==``) or ``!=``."""

    field: str
    operator: str
    value: str

    def __str__(self) -> str:
        return f"{self.field}{self.operator}{escape_field_value(self.value)}"


@dataclass(frozen=True, slots=True)
class FieldSelector:
    """A parsed field selector: the AND of ``requirements``, in Go's (sorted-term) order."""

    requirements: tuple[FieldRequirement, ...] = ()
    _checks: tuple[tuple[str, bool, str], ...] = dataclasses.field(
        init=False, repr=False, compare=False, default=()
    )

    def __post_init__(self) -> None:
        checks = tuple((r.field, r.operator == "=", r.value) for r in self.requirements)
        object.__setattr__(self, "_checks", checks)

    def empty(self) -> bool:
        """``Selector.Empty``: true when the selector does not restrict the selection."""
        return not self.requirements

    def fields(self) -> set[str]:
        """The field names the selector reads."""
        return {r.field for r in self.requirements}

    def matches(self, fields: Mapping[str, str]) -> bool:
        """``Selector.Matches``; a field missing from ``fields`` reads as ``""``."""
        # An explicit loop rather than all(<generator>): this runs for every watch event.
        for name, equal, value in self._checks:  # noqa: SIM110
            if (fields.get(name, "") == value) is not equal:
                return False
        return True

    def requires_exact_match(self, field_name: str) -> str | None:
        """``Selector.RequiresExactMatch``: the value an ``=`` term demands, if any."""
        for r in self.requirements:
            if r.field == field_name and r.operator == "=":
                return r.value
        return None

    def transform(self, fn: Callable[[str, str], tuple[str, str]]) -> FieldSelector:
        """``Selector.Transform``: map every (field, value); ``("", "")`` drops the term.

        ``fn`` raises ``SelectorError`` to reject a term; the first term (in sorted order) that
        fails is the one reported, as in Go.
        """
        out: list[FieldRequirement] = []
        for r in self.requirements:
            name, value = fn(r.field, r.value)
            if name or value:
                out.append(FieldRequirement(name, r.operator, value))
        return FieldSelector(tuple(out))

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


def escape_field_value(value: str) -> str:
    """``fields.EscapeValue``: prefix ``\\``, ``,`` and ``=`` with a backslash."""
    return value.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")


def _unescape_field_value(s: str) -> str:
    """``fields.UnescapeValue``."""
    if not any(c in s for c in "\\,="):
        return s
    out: list[str] = []
    in_slash = False
    for c in s:
        if in_slash:
            if c not in "\\,=":
                raise SelectorError(f"invalid field selector: invalid escape sequence: \\{c}")
            out.append(c)
            in_slash = False
        elif c == "\\":
            in_slash = True
        elif c in ",=":
            # Go formats the rune with %v, i.e. as its code point number.
            raise SelectorError(f"invalid field selector: unescaped character in value: {ord(c)}")
        else:
            out.append(c)
    if in_slash:
        raise SelectorError("invalid field selector: invalid escape sequence: \\")
    return "".join(out)


def _split_terms(text: str) -> list[str]:
    """``splitTerms``: split on commas not preceded by an escaping backslash."""
    terms: list[str] = []
    start = 0
    in_slash = False
    for i, c in enumerate(text):
        if in_slash:
            in_slash = False
        elif c == "\\":
            in_slash = True
        elif c == ",":
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return terms


def _split_term(term: str) -> tuple[str, str, str] | None:
    """``splitTerm``: the first ``!=``, ``==`` or ``=`` (tried in that order at each index)."""
    for i in range(len(term)):
        for op in ("!=", "==", "="):
            if term.startswith(op, i):
                return term[:i], op, term[i + len(op) :]
    return None


def parse_field_selector(text: str) -> FieldSelector:
    """``fields.ParseSelector``: ``""`` selects everything.

    Raises ``SelectorError``, e.g. ``invalid selector: 'a'; can't understand 'a'``.
    """
    if not text:
        return FieldSelector()
    requirements: list[FieldRequirement] = []
    for part in sorted(_split_terms(text)):
        if not part:
            continue
        split = _split_term(part)
        if split is None:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{part}'")
        lhs, op, rhs = split
        requirements.append(
            FieldRequirement(lhs, "!=" if op == "!=" else "=", _unescape_field_value(rhs))
        )
    return FieldSelector(tuple(requirements))


def field_label_conversion(
    supported: Collection[str], renames: Mapping[str, str] | None = None
) -> Callable[[str, str], tuple[str, str]]:
    """A ``Transform`` function for a kind with a registered field-label conversion.

    Fields in ``supported`` pass through, ``renames`` maps legacy names (Pods accept
    ``spec.host`` as ``spec.nodeName``), anything else raises
    ``SelectorError("field label not supported: <field>")`` as ``pkg/apis/core/v1/conversion.go``
    and the CRD converter do.
    """
    allowed = frozenset(supported)
    mapping = dict(renames or {})

    def convert(label: str, value: str) -> tuple[str, str]:
        if label in allowed:
            return label, value
        if label in mapping:
            return mapping[label], value
        raise SelectorError(f"field label not supported: {label}")

    return convert


def default_field_label_conversion(label: str, value: str) -> tuple[str, str]:
    """``runtime.DefaultMetaV1FieldSelectorConversion``, used for kinds with no registered one."""
    if label in ("metadata.name", "metadata.namespace"):
        return label, value
    raise SelectorError(
        f'{go_quote(label)} is not a known field selector: only "metadata.name", '
        '"metadata.namespace"'
    )
