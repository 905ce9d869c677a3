"""Kubernetes resource quantities (``k8s.io/apimachinery/pkg/api/resource``), exactly.

``parse_quantity("1500m") == Fraction(3, 2)``; ``format_quantity`` gives the canonical text the
API server stores. Used by the simulated API server to canonicalise what it stores and by the
scheduler to add up requests; values are ``Fraction``s so nothing is lost to rounding.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from fractions import Fraction
from typing import Final

__all__ = ["format_quantity", "parse_quantity"]

# =============================================================================================
# resource.Quantity
# =============================================================================================

_QUANTITY_RE_TEXT: Final = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
_ERR_FORMAT_WRONG: Final = (
    "quantities must match the regular expression '" + _QUANTITY_RE_TEXT + "'"
)
_ERR_NUMERIC: Final = "unable to parse numeric part of quantity"
_ERR_SUFFIX: Final = "unable to parse quantity's suffix"

_DECIMAL_SI: Final = "DecimalSI"
_BINARY_SI: Final = "BinarySI"
_DECIMAL_EXPONENT: Final = "DecimalExponent"

_DEC_SUFFIXES: Final = {
    "n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18,
}  # fmt: skip
_BIN_SUFFIXES: Final = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DEC_SUFFIX_OF: Final = {v: k for k, v in _DEC_SUFFIXES.items()}
_BIN_SUFFIX_OF: Final = {v: k for k, v in _BIN_SUFFIXES.items()}
_INT64_MAX: Final = 2**63 - 1
_NANO: Final = Fraction(1, 10**9)


class _Quantity:
    """A parsed quantity: its exact value, its format and (when canonical) the input text."""

    __slots__ = ("cached", "fmt", "value")

    def __init__(self, value: Fraction, fmt: str, cached: str | None) -> None:
        self.value = value
        self.fmt = fmt
        self.cached = cached

    def __str__(self) -> str:
        if self.cached is not None:
            return self.cached
        return _canonical_quantity(self.value, self.fmt)


def _parse_quantity_string(s: str) -> tuple[bool, str, str, str, str]:
    """``parseQuantityString``: (positive, value, num, denom, suffix); ValueError on bad input."""
    positive = True
    pos = 0
    end = len(s)
    if pos < end and s[0] in "+-":
        positive = s[0] != "-"
        pos += 1
    while True:  # leading zeros
        if pos >= end:
            return positive, "0", "0", "", ""
        if s[pos] != "0":
            break
        pos += 1
    i = pos
    while i < end and s[i].isdigit() and s[i].isascii():
        i += 1
    if i >= end:
        return positive, s, s[pos:end] or "0", "", ""
    num = s[pos:i] or "0"
    pos = i
    denom = ""
    if s[pos] == ".":
        pos += 1
        i = pos
        while i < end and s[i].isdigit() and s[i].isascii():
            i += 1
        denom = s[pos:i]
        if i >= end:
            return positive, s, num, denom, ""
        pos = i
    value = s[:pos]
    suffix_start = pos
    i = pos
    while i < end and s[i] in "eEinumkKMGTP":
        i += 1
    if i >= end:
        return positive, value, num, denom, s[suffix_start:]
    pos = i
    if s[pos] in "-+":
        pos += 1
    i = pos
    while i < end and s[i].isdigit() and s[i].isascii():
        i += 1
    if i >= end:
        return positive, value, num, denom, s[suffix_start:]
    raise ValueError(_ERR_FORMAT_WRONG)


def _interpret_suffix(suffix: str) -> tuple[int, int, str]:
    if suffix in _DEC_SUFFIXES:
        return 10, _DEC_SUFFIXES[suffix], _DECIMAL_SI
    if suffix in _BIN_SUFFIXES:
        return 2, _BIN_SUFFIXES[suffix], _BINARY_SI
    if len(suffix) > 1 and suffix[0] in "eE" and re.fullmatch(r"[+-]?[0-9]+", suffix[1:]):
        exponent = int(suffix[1:])
        if -(2**63) <= exponent < 2**63:
            # int32(parsed): Go truncates; keep the sign-extended low 32 bits.
            exponent = ((exponent + 2**31) % 2**32) - 2**31
            return 10, exponent, _DECIMAL_EXPONENT
    raise ValueError(_ERR_SUFFIX)


def _parse(text: str) -> _Quantity:
    """``resource.ParseQuantity``."""
    if not text:
        raise ValueError(_ERR_FORMAT_WRONG)
    if text == "0":
        return _Quantity(Fraction(0), _DECIMAL_SI, "0")
    positive, value, num, denom, suffix = _parse_quantity_string(text)
    base, exponent, fmt = _interpret_suffix(suffix)

    precision = -1
    scale = 0
    mantissa = 1
    if fmt in (_DECIMAL_EXPONENT, _DECIMAL_SI):
        scale = exponent
        precision = 18 - (len(num) + len(denom))
    elif exponent >= 0 and not denom:
        mantissa = 1 << exponent
        precision = 15 - len(num) - int(exponent * 3 / 10) - 1
    if precision >= 0:
        scale -= len(denom)
        if scale >= -9:
            shifted = num + denom
            digits = int(shifted)
            result = digits * mantissa
            if result <= _INT64_MAX:
                if not positive:
                    result = -result
                cached: str | None = None
                if fmt == _BINARY_SI:
                    if exponent % 10 == 0 and digits & 0x07 != 0:
                        cached = text
                elif scale % 3 == 0 and not shifted.endswith("000") and shifted[0] != "0":
                    cached = text
                return _Quantity(Fraction(result) * Fraction(10) ** scale, fmt, cached)

    unsigned = value.lstrip("+-")
    if not re.fullmatch(r"[0-9]*\.?[0-9]*", unsigned) or unsigned in ("", "."):
        raise ValueError(_ERR_NUMERIC)
    amount = Fraction(Decimal(unsigned if not unsigned.endswith(".") else unsigned + "0"))
    if base == 10:
        amount *= Fraction(10) ** exponent
    else:
        amount *= 2**exponent
    if amount != 0:
        amount = Fraction(math.ceil(amount / _NANO)) * _NANO
    if fmt == _BINARY_SI and amount > _INT64_MAX:
        amount = Fraction(_INT64_MAX)
    if fmt == _BINARY_SI and 0 < amount < 1:
        fmt = _DECIMAL_SI
    if value.startswith("-"):
        amount = -amount
    return _Quantity(amount, fmt, None)


def _canonical_quantity(value: Fraction, fmt: str) -> str:
    """``Quantity.String()`` / ``CanonicalizeBytes`` for a value already rounded to nano."""
    if value == 0:
        return "0"
    if value % _NANO != 0:
        direction = -1 if value < 0 else 1
        value = direction * Fraction(math.ceil(abs(value) / _NANO)) * _NANO
    if fmt == _BINARY_SI and (-1024 < value < 1024 or value.denominator != 1):
        fmt = _DECIMAL_SI
    sign = "-" if value < 0 else ""
    magnitude = abs(value)
    if fmt == _BINARY_SI:
        amount = int(magnitude)
        exp = 0
        while amount % 1024 == 0:
            amount //= 1024
            exp += 10
        return sign + str(amount) + _BIN_SUFFIX_OF.get(exp, "")
    mant = int(magnitude / _NANO)
    exp10 = -9
    while mant % 10 == 0:
        mant //= 10
        exp10 += 1
    if exp10 % 3 == 1:
        mant *= 10
        exp10 -= 1
    elif exp10 % 3 == 2:
        mant *= 100
        exp10 -= 2
    if fmt == _DECIMAL_EXPONENT:
        suffix = "" if exp10 == 0 else f"e{exp10}"
    else:
        suffix = _DEC_SUFFIX_OF.get(exp10, "")
    return sign + str(mant) + suffix


def parse_quantity(text: str) -> Fraction:
    """The exact value of a Kubernetes quantity string (as ``resource.ParseQuantity`` reads it).

    Values finer than 1n are rounded up (away from zero) to 1n as upstream does. Raises
    ``ValueError`` with upstream's message for malformed input.
    """
    return _parse(str(text).strip()).value


def format_quantity(value: Fraction, binary: bool = False) -> str:
    """Canonical quantity text for ``value`` in BinarySI (``binary``) or DecimalSI format."""
    return _canonical_quantity(Fraction(value), _BINARY_SI if binary else _DECIMAL_SI)
