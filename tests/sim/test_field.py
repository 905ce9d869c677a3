"""The simulation's field errors against k8s.io/apimachinery/pkg/util/validation/field.

Expected texts are what ``field.Error.Error()`` prints in Go (``ErrorBody``: ``%q`` strings,
``%v`` numbers, no value for Required/Forbidden/TooLong/Internal or an omitted value) and what
``apierrors.NewInvalid`` makes of a list.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpusched.sim import errors, field, kinds
from gpusched.sim.field import ErrorType, FieldError


@pytest.mark.parametrize(
    ("error", "text", "reason"),
    [
        (field.required("spec.a"), "spec.a: Required value", "FieldValueRequired"),
        (field.required("spec.a", "why"), "spec.a: Required value: why", "FieldValueRequired"),
        (field.invalid("spec.a", "é\n", "bad"), 'spec.a: Invalid value: "é\\n": bad', None),
        (field.invalid("spec.a", 3, "bad"), "spec.a: Invalid value: 3: bad", None),
        (field.invalid("spec.a", 1e21, "bad"), "spec.a: Invalid value: 1e+21: bad", None),
        (field.invalid("spec.a", 0.5, "bad"), "spec.a: Invalid value: 0.5: bad", None),
        (field.invalid("spec.a", True, "bad"), "spec.a: Invalid value: true: bad", None),
        (field.invalid("a", field.Printed("0x0"), "unset"), "a: Invalid value: 0x0: unset", None),
        (field.immutable("a", "x"), 'a: Invalid value: "x": field is immutable', None),
        (
            field.not_supported("spec.p", "x", ["a", "b"]),
            'spec.p: Unsupported value: "x": supported values: "a", "b"',
            "FieldValueNotSupported",
        ),
        (field.not_supported("p", "x", []), 'p: Unsupported value: "x"', "FieldValueNotSupported"),
        (
            field.duplicate(field.index("l", 2), "v"),
            'l[2]: Duplicate value: "v"',
            "FieldValueDuplicate",
        ),
        (field.not_found("n", "v"), 'n: Not found: "v"', "FieldValueNotFound"),
        (field.forbidden("f", "no"), "f: Forbidden: no", "FieldValueForbidden"),
        (field.too_long("s", 1), "s: Too long: may not be more than 1 byte", "FieldValueTooLong"),
        (
            field.too_long("s", 10),
            "s: Too long: may not be more than 10 bytes",
            "FieldValueTooLong",
        ),
        (field.too_long("s", -1), "s: Too long: value is too long", "FieldValueTooLong"),
        (
            field.too_many("l", 5, 3),
            "l: Too many: 5: must have at most 3 items",
            "FieldValueTooMany",
        ),
        (field.too_many("l", -1, 1), "l: Too many: must have at most 1 item", "FieldValueTooMany"),
        (field.too_many("l", 2, -1), "l: Too many: 2: has too many items", "FieldValueTooMany"),
        (field.type_invalid("t", "x", "d"), 't: Invalid value: "x": d', "FieldValueTypeInvalid"),
        (field.internal_error(None, "boom"), "<nil>: Internal error: boom", "InternalError"),
    ],
)
def test_error_text_and_reason(error: FieldError, text: str, reason: str | None) -> None:
    """``reason`` None stands for FieldValueInvalid."""
    assert str(error) == error.message() == text
    assert error.error_body() == text.split(": ", 1)[1]
    assert error.reason == (reason or "FieldValueInvalid")


def test_paths() -> None:
    assert field.child(None, "a", "b") == "a.b"
    assert field.child("a", "b") == "a.b"
    assert field.index(None, 0) == "[0]"
    assert field.key(field.child("spec", "m"), "k") == "spec.m[k]"
    assert field.path_string(None) == "<nil>"
    assert field.invalid(None, "", "x").field == "<nil>"


def test_aggregate_drops_repeats() -> None:
    a = field.invalid("a", 1, "bad")
    b = field.required("b")
    assert field.aggregate_errors([a]) == "a: Invalid value: 1: bad"
    assert field.aggregate_errors([a, b, a]) == "[a: Invalid value: 1: bad, b: Required value]"


def test_new_invalid_status() -> None:
    """``NewInvalid``: %q of the name, one cause per error (repeats kept), the message
    aggregated without them; empty kind, group and name are omitted from the details."""
    a = FieldError("spec.a", ErrorType.INVALID, 'x"y', "bad")
    status = errors.invalid_status("Pod", "", 'p"q', [a, a])
    assert status["message"] == 'Pod "p\\"q" is invalid: spec.a: Invalid value: "x\\"y": bad'
    assert status["details"] == {
        "name": 'p"q',
        "kind": "Pod",
        "causes": [
            {
                "reason": "FieldValueInvalid",
                "message": 'Invalid value: "x\\"y": bad',
                "field": "spec.a",
            }
        ]
        * 2,
    }
    anonymous = errors.invalid_status("", "", "", [field.invalid("patch", "[]", "no")])
    assert anonymous["message"] == ' "" is invalid: patch: Invalid value: "[]": no'
    assert anonymous["details"] == {
        "causes": [
            {"reason": "FieldValueInvalid", "message": 'Invalid value: "[]": no', "field": "patch"}
        ]
    }
    apierror = errors.invalid("Lease", "coordination.k8s.io", "l", [field.required("spec")])
    assert apierror.code == 422
    assert apierror.status["message"] == (
        'Lease.coordination.k8s.io "l" is invalid: spec: Required value'
    )


def test_built_in_kinds_quote_bad_strings_as_go_does() -> None:
    """A label value with a non-ASCII character prints as Go's %q prints it (unescaped)."""
    pod: dict[str, Any] = {
        "metadata": {"name": "p", "namespace": "default", "labels": {"app": "café"}},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]},
    }
    s = kinds.strategy_for("", "Pod")
    s.prepare_for_create(pod)
    (err,) = s.validate_create(pod)
    assert str(err).startswith('metadata.labels: Invalid value: "café": a valid label must be')
