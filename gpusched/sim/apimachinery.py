"""What k8s.io/apimachinery's validation and Go's fmt print, reproduced once for the simulation.

Shared by ``gpusched.sim.crd``, ``gpusched.sim.kinds``, ``gpusched.sim.selectors`` and
``gpusched.sim.patch``:

* ``pkg/util/validation/validation.go`` (v1.32 wording): ``RegexError``, ``MaxLenError``,
  ``IsDNS1123Label``, ``IsDNS1123Subdomain``, ``IsDNS1035Label``, ``IsQualifiedName``,
  ``IsValidLabelValue`` and ``apimachinery/pkg/api/validation``'s ``NameIsDNSSubdomain`` /
  ``NameIsDNSLabel`` (with ``maskTrailingDash``). Lengths are Go ``len``: UTF-8 bytes.
* ``pkg/util/errors``: ``Aggregate.Error()``.
* Go's ``strconv.Quote``, ``fmt`` ``%v``/``%s`` of a float64 and of decoded JSON values,
  ``%#v`` of a ``[]string``, and ``encoding/json`` ``Marshal`` of unstructured JSON.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any, Final

__all__ = [
    "DNS1035_LABEL_FMT",
    "DNS1123_LABEL_FMT",
    "DNS1123_SUBDOMAIN_FMT",
    "GO_MAP_TYPE",
    "GO_SLICE_TYPE",
    "aggregate",
    "go_format_float",
    "go_json",
    "go_quote",
    "go_sprint",
    "go_string_slice",
    "go_type",
    "is_dns1035_label",
    "is_dns1123_label",
    "is_dns1123_subdomain",
    "is_qualified_name",
    "is_valid_label_value",
    "mask_trailing_dash",
    "max_len_error",
    "name_is_dns_label",
    "name_is_dns_subdomain",
    "regex_error",
]

# ---------------------------------------------------------------------------------------------
# Go value formatting (strconv.Quote, fmt %v, encoding/json)
# ---------------------------------------------------------------------------------------------

_GO_SHORT_ESCAPES: Final = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
}


def go_quote(s: str) -> str:
    """``strconv.Quote(s)``: Python's ``isprintable`` matches Go's ``unicode.IsPrint``."""
    out = ['"']
    for ch in s:
        cp = ord(ch)
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch.isprintable() and not (0xD800 <= cp <= 0xDFFF):
            out.append(ch)
        elif ch in _GO_SHORT_ESCAPES:
            out.append(_GO_SHORT_ESCAPES[ch])
        elif cp < 0x20 or cp == 0x7F:
            out.append(f"\\x{cp:02x}")
        elif 0xD800 <= cp <= 0xDFFF:  # lone surrogate: Go sees invalid UTF-8
            out.append("\\ufffd")
        elif cp < 0x10000:
            out.append(f"\\u{cp:04x}")
        else:
            out.append(f"\\U{cp:08x}")
    out.append('"')
    return "".join(out)


def go_string_slice(values: Iterable[str] | None) -> str:
    """``fmt.Sprintf("%#v", []string{...})`` (``[]string(nil)`` for a nil slice)."""
    if values is None:
        return "[]string(nil)"
    return "[]string{" + ", ".join(go_quote(v) for v in values) + "}"


def _float_digits(f: float) -> tuple[str, int]:
    """Shortest round-trip decimal digits of ``abs(f)`` and the decimal point position.

    The value is ``0.<digits> * 10**dp``; ``f`` must be finite and non-zero.
    """
    t = Decimal(repr(abs(f))).as_tuple()
    raw = "".join(str(d) for d in t.digits)
    assert isinstance(t.exponent, int)
    dp = len(raw) + t.exponent
    digits = raw.lstrip("0")
    dp -= len(raw) - len(digits)
    digits = digits.rstrip("0")
    return digits, dp


def _fmt_e(digits: str, dp: int, neg: bool, *, json_style: bool) -> str:
    exp = dp - 1
    mant = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    sign = "-" if exp < 0 else "+"
    e = abs(exp)
    exps = f"{e:02d}"
    if json_style and sign == "-" and e < 10:
        exps = str(e)
    return ("-" if neg else "") + f"{mant}e{sign}{exps}"


def _fmt_f(digits: str, dp: int, neg: bool) -> str:
    if dp <= 0:
        s = "0." + "0" * (-dp) + digits
    elif dp >= len(digits):
        s = digits + "0" * (dp - len(digits))
    else:
        s = digits[:dp] + "." + digits[dp:]
    return ("-" if neg else "") + s


def go_format_float(f: float) -> str:
    """``fmt.Sprint(f)`` / ``%v`` of a float64 (``strconv.FormatFloat(f, 'g', -1, 64)`` with
    Go's %v exponent cutoffs: ``%e`` form when the exponent is < -4 or >= 6)."""
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "+Inf" if f > 0 else "-Inf"
    if f == 0:
        return "-0" if math.copysign(1.0, f) < 0 else "0"
    digits, dp = _float_digits(f)
    exp = dp - 1
    if exp < -4 or exp >= 6:
        return _fmt_e(digits, dp, f < 0, json_style=False)
    return _fmt_f(digits, dp, f < 0)


GO_MAP_TYPE: Final = "map[string]interface {}"
GO_SLICE_TYPE: Final = "[]interface {}"


def go_type(value: Any) -> str:
    """``reflect.TypeOf`` of a value decoded into ``interface{}`` (ints preserved as int64)."""
    if isinstance(value, dict):
        return GO_MAP_TYPE
    if isinstance(value, list):
        return GO_SLICE_TYPE
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int64"
    if isinstance(value, float):
        return "float64"
    return "<nil>"


def go_sprint(value: Any, verb: str = "v") -> str:
    """``fmt`` ``%v`` (``fmt.Sprint``) or ``%s`` of a decoded JSON value: maps print
    ``map[k:v]`` with sorted keys, slices ``[a b]``, ``nil`` ``<nil>``."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        items = " ".join(f"{k}:{go_sprint(value[k], verb)}" for k in sorted(value))
        return f"map[{items}]"
    if isinstance(value, list):
        return "[" + " ".join(go_sprint(v, verb) for v in value) + "]"
    if value is None:
        text = "<nil>"
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, float):
        text = go_format_float(value)
    else:
        text = str(value)
    if verb == "s":
        return "%!s(<nil>)" if value is None else f"%!s({go_type(value)}={text})"
    return text


def _go_json_float(f: float) -> str:
    """``encoding/json`` rendering of a float64."""
    if f == 0:
        return "-0" if math.copysign(1.0, f) < 0 else "0"
    digits, dp = _float_digits(f)
    a = abs(f)
    if a < 1e-6 or a >= 1e21:
        return _fmt_e(digits, dp, f < 0, json_style=True)
    return _fmt_f(digits, dp, f < 0)


def _go_json_string(s: str) -> str:
    out = ['"']
    for ch in s:
        cp = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch in "<>&":
            out.append(f"\\u00{cp:02x}")
        elif cp < 0x20:
            out.append(
                {"\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(
                    ch, f"\\u00{cp:02x}"
                )
            )
        elif cp in (0x2028, 0x2029):
            out.append(f"\\u{cp:04x}")
        elif 0xD800 <= cp <= 0xDFFF:
            out.append("\\ufffd")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def go_json(v: Any) -> str:
    """``json.Marshal(v)`` as Go renders unstructured JSON (sorted keys, no spaces, ``<``,
    ``>``, ``&`` escaped, floats in Go's shortest form)."""
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return _go_json_float(v)
    if isinstance(v, str):
        return _go_json_string(v)
    if isinstance(v, Mapping):
        items = sorted((str(k), val) for k, val in v.items())
        return "{" + ",".join(_go_json_string(k) + ":" + go_json(val) for k, val in items) + "}"
    if isinstance(v, list | tuple):
        return "[" + ",".join(go_json(x) for x in v) + "]"
    return _go_json_string(str(v))


def aggregate(messages: Sequence[str]) -> str:
    """``utilerrors.NewAggregate(...).Error()``: one message as is, several as ``[a, b]``,
    duplicates dropped."""
    unique = list(dict.fromkeys(messages))
    if len(unique) == 1:
        return unique[0]
    return "[" + ", ".join(unique) + "]"


# ---------------------------------------------------------------------------------------------
# Name validation (k8s.io/apimachinery/pkg/util/validation/validation.go, v1.32 wording)
# ---------------------------------------------------------------------------------------------

DNS1123_LABEL_FMT: Final = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL_MSG: Final = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character"
)
_DNS1123_LABEL_MAX: Final = 63
DNS1123_SUBDOMAIN_FMT: Final = DNS1123_LABEL_FMT + "(\\." + DNS1123_LABEL_FMT + ")*"
_DNS1123_SUBDOMAIN_MSG: Final = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character"
)
_DNS1123_SUBDOMAIN_MAX: Final = 253
DNS1035_LABEL_FMT: Final = "[a-z]([-a-z0-9]*[a-z0-9])?"
_DNS1035_LABEL_MSG: Final = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
    "alphabetic character, and end with an alphanumeric character"
)
_DNS1035_LABEL_MAX: Final = 63
_QUALIFIED_NAME_FMT: Final = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_QUALIFIED_NAME_MSG: Final = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character"
)
_QUALIFIED_NAME_MAX: Final = 63
_LABEL_VALUE_FMT: Final = "(" + _QUALIFIED_NAME_FMT + ")?"
_LABEL_VALUE_MSG: Final = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character"
)
_LABEL_VALUE_MAX: Final = 63

# Matched with ``fullmatch``: unlike "^...$", it never matches across a trailing newline,
# which is what Go's RE2 "^...$" does.
_DNS1123_LABEL_RE: Final = re.compile(DNS1123_LABEL_FMT)
_DNS1123_SUBDOMAIN_RE: Final = re.compile(DNS1123_SUBDOMAIN_FMT)
_DNS1035_LABEL_RE: Final = re.compile(DNS1035_LABEL_FMT)
_QUALIFIED_NAME_RE: Final = re.compile(_QUALIFIED_NAME_FMT)
_LABEL_VALUE_RE: Final = re.compile(_LABEL_VALUE_FMT)


def _byte_len(s: str) -> int:
    """Go's ``len(s)``: the length in UTF-8 bytes."""
    return len(s.encode("utf-8", "surrogatepass"))


def max_len_error(length: int) -> str:
    """``validation.MaxLenError``."""
    return f"must be no more than {length} characters"


def regex_error(msg: str, fmt: str, *examples: str) -> str:
    """``validation.RegexError``.

    Upstream ends every example with ``', '`` and joins them with ``" or "``, so several
    examples read ``(e.g. 'a',  or 'b', regex used ...`` (doubled space before ``or``).
    """
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    parts = " or ".join(f"'{e}', " for e in examples)
    return f"{msg} (e.g. {parts}regex used for validation is '{fmt}')"


def is_dns1123_label(value: str) -> list[str]:
    """``validation.IsDNS1123Label``: error messages, empty when valid."""
    errs = []
    if _byte_len(value) > _DNS1123_LABEL_MAX:
        errs.append(max_len_error(_DNS1123_LABEL_MAX))
    if not _DNS1123_LABEL_RE.fullmatch(value):
        errs.append(regex_error(_DNS1123_LABEL_MSG, DNS1123_LABEL_FMT, "my-name", "123-abc"))
    return errs


def is_dns1123_subdomain(value: str) -> list[str]:
    """``validation.IsDNS1123Subdomain``: error messages, empty when valid."""
    errs = []
    if _byte_len(value) > _DNS1123_SUBDOMAIN_MAX:
        errs.append(max_len_error(_DNS1123_SUBDOMAIN_MAX))
    if not _DNS1123_SUBDOMAIN_RE.fullmatch(value):
        errs.append(regex_error(_DNS1123_SUBDOMAIN_MSG, DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errs


def is_dns1035_label(value: str) -> list[str]:
    """``validation.IsDNS1035Label``: error messages, empty when valid."""
    errs = []
    if _byte_len(value) > _DNS1035_LABEL_MAX:
        errs.append(max_len_error(_DNS1035_LABEL_MAX))
    if not _DNS1035_LABEL_RE.fullmatch(value):
        errs.append(
            regex_error(
                _DNS1035_LABEL_MSG,
                DNS1035_LABEL_FMT,
                "my-name",
                "abc-123",
            )
        )
    return errs


def is_qualified_name(value: str) -> list[str]:
    """``validation.IsQualifiedName``: ``[prefix/]name``."""
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs.extend("prefix part " + m for m in is_dns1123_subdomain(prefix))
    else:
        return [
            "a qualified name "
            + regex_error(_QUALIFIED_NAME_MSG, _QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif _byte_len(name) > _QUALIFIED_NAME_MAX:
        errs.append("name part " + max_len_error(_QUALIFIED_NAME_MAX))
    if not _QUALIFIED_NAME_RE.fullmatch(name):
        errs.append(
            "name part "
            + regex_error(_QUALIFIED_NAME_MSG, _QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
        )
    return errs


def is_valid_label_value(value: str) -> list[str]:
    """``validation.IsValidLabelValue``."""
    errs: list[str] = []
    if _byte_len(value) > _LABEL_VALUE_MAX:
        errs.append(max_len_error(_LABEL_VALUE_MAX))
    if not _LABEL_VALUE_RE.fullmatch(value):
        errs.append(regex_error(_LABEL_VALUE_MSG, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return errs


def mask_trailing_dash(name: str) -> str:
    """``maskTrailingDash``: a ``generateName`` prefix may end in ``-``."""
    if len(name) > 1 and name.endswith("-"):
        return name[:-2] + "a"
    return name


def name_is_dns_subdomain(name: str, prefix: bool) -> list[str]:
    """``apimachinery/pkg/api/validation.NameIsDNSSubdomain``."""
    return is_dns1123_subdomain(mask_trailing_dash(name) if prefix else name)


def name_is_dns_label(name: str, prefix: bool) -> list[str]:
    """``apimachinery/pkg/api/validation.NameIsDNSLabel``."""
    return is_dns1123_label(mask_trailing_dash(name) if prefix else name)
