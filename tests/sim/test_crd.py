"""Tests for gpusched.sim.crd: CRD validation, pruning, defaulting and CR validation.

Expected messages are the texts a kube-apiserver produces (field.Error.Error() of the
errors kube-openapi and apiextensions-apiserver report), see the module docstring.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from gpusched.sim.crd import (
    CRD_GROUP,
    CRD_KIND,
    CRDError,
    CRDInfo,
    ErrorType,
    FieldError,
    crd_initial_status,
    crd_status_after_create,
    default_crd,
    format_go_value,
    go_json,
    go_quote,
    invalid_status,
    prepare_custom_resource,
    strict_decoding_message,
    unknown_field_paths,
    unknown_field_warnings,
    validate_crd,
    validate_custom_resource,
)

GROUP = "gpusched.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

GPU_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "required": ["nodeName"],
            "properties": {
                "nodeName": {"type": "string", "minLength": 1},
                "gpus": {
                    "type": "array",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["index"],
                    "items": {
                        "type": "object",
                        "required": ["index", "uuid"],
                        "properties": {
                            "index": {"type": "integer", "minimum": 0},
                            "uuid": {"type": "string"},
                            "product": {"type": "string", "default": "NVIDIA H100 80GB HBM3"},
                            "memoryMiB": {"type": "integer", "minimum": 0},
                            "mig": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "properties": {
                                        "profile": {"type": "string"},
                                        "count": {"type": "integer", "default": 1},
                                    },
                                },
                            },
                        },
                    },
                },
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        },
        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    },
}


def gpu_crd() -> dict[str, Any]:
    """A realistic cluster-scoped CRD, as a user would submit it."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"gpunodeinventories.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Cluster",
            "names": {
                "kind": "GPUNodeInventory",
                "plural": "gpunodeinventories",
                "shortNames": ["gni"],
                "categories": ["gpusched"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {"name": "Node", "type": "string", "jsonPath": ".spec.nodeName"}
                    ],
                    "schema": {"openAPIV3Schema": copy.deepcopy(GPU_SCHEMA)},
                }
            ],
        },
    }


def inventory(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "GPUNodeInventory",
        "metadata": {"name": "node-a"},
        "spec": {"nodeName": "node-a", **spec},
    }


def messages(errors: list[FieldError]) -> list[str]:
    return [e.message() for e in errors]


def crd_messages(crd: dict[str, Any]) -> list[str]:
    with pytest.raises(CRDError) as info:
        validate_crd(crd)
    return messages(info.value.errors)


# --------------------------------------------------------------------------------------------
# Go rendering helpers
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("abc", '"abc"'),
        ('a"b\\c', '"a\\"b\\\\c"'),
        ("line\nbreak\t", '"line\\nbreak\\t"'),
        ("\x01\x7f", '"\\x01\\x7f"'),
        ("ünï ✓", '"ünï ✓"'),
        ("\u200b", '"\\u200b"'),
    ],
)
def test_go_quote(value: str, expected: str) -> None:
    assert go_quote(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (5, "5"),
        (-3, "-3"),
        (True, "true"),
        (1.0, "1"),
        (1.5, "1.5"),
        (123456.0, "123456"),
        (1e6, "1e+06"),
        (1234567.0, "1.234567e+06"),
        (0.0001, "0.0001"),
        (0.00001, "1e-05"),
        ("x", '"x"'),
        (None, "null"),
        ({"b": 1, "a": [1, "x"]}, '{"a":[1,"x"],"b":1}'),
        ([], "[]"),
    ],
)
def test_format_go_value(value: Any, expected: str) -> None:
    assert format_go_value(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"z": None, "a": True}, '{"a":true,"z":null}'),
        (2.0, "2"),
        (1e21, "1e+21"),
        (1e-7, "1e-7"),
        ("<&>", '"\\u003c\\u0026\\u003e"'),
        ("\u2028", '"\\u2028"'),
    ],
)
def test_go_json(value: Any, expected: str) -> None:
    assert go_json(value) == expected


# --------------------------------------------------------------------------------------------
# Status rendering
# --------------------------------------------------------------------------------------------


def test_invalid_status_single_error() -> None:
    err = FieldError("spec.nodeName", ErrorType.REQUIRED, "", "")
    status = invalid_status("GPUNodeInventory", GROUP, "node-a", [err])
    assert status == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": (
            'GPUNodeInventory.gpusched.io "node-a" is invalid: spec.nodeName: Required value'
        ),
        "reason": "Invalid",
        "details": {
            "name": "node-a",
            "group": GROUP,
            "kind": "GPUNodeInventory",
            "causes": [
                {
                    "reason": "FieldValueRequired",
                    "message": "Required value",
                    "field": "spec.nodeName",
                }
            ],
        },
        "code": 422,
    }


def test_invalid_status_aggregates_and_deduplicates() -> None:
    a = FieldError("spec.a", ErrorType.INVALID, 1, "bad")
    b = FieldError("spec.b", ErrorType.NOT_SUPPORTED, "x", 'supported values: "y"')
    status = invalid_status("Foo", "", "n", [a, b, a])
    assert status["message"] == (
        'Foo "n" is invalid: [spec.a: Invalid value: 1: bad, '
        'spec.b: Unsupported value: "x": supported values: "y"]'
    )
    assert len(status["details"]["causes"]) == 3
    assert "group" not in status["details"]


def test_crd_error_status() -> None:
    crd = gpu_crd()
    crd["metadata"]["name"] = "wrong.gpusched.io"
    with pytest.raises(CRDError) as info:
        validate_crd(crd)
    status = info.value.status()
    assert status["details"]["kind"] == CRD_KIND
    assert status["details"]["group"] == CRD_GROUP
    assert status["details"]["name"] == "wrong.gpusched.io"
    assert status["message"] == (
        'CustomResourceDefinition.apiextensions.k8s.io "wrong.gpusched.io" is invalid: '
        'metadata.name: Invalid value: "wrong.gpusched.io": '
        'must be spec.names.plural+"."+spec.group'
    )
    assert str(info.value) == status["message"]
    assert isinstance(info.value, ValueError)


# --------------------------------------------------------------------------------------------
# Pruning
# --------------------------------------------------------------------------------------------

PRUNE_CASES: list[tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]] = [
    (
        "unknown fields at every level",
        {"type": "object", "properties": {"spec": {"type": "object", "properties": {}}}},
        {"apiVersion": "g/v1", "kind": "K", "metadata": {"name": "x"}, "junk": 1, "spec": {"a": 1}},
        {"apiVersion": "g/v1", "kind": "K", "metadata": {"name": "x"}, "spec": {}},
    ),
    (
        "root meta fields kept without being declared",
        {"type": "object"},
        {"apiVersion": "g/v1", "kind": "K", "metadata": {"x": {"y": 1}}, "spec": {}},
        {"apiVersion": "g/v1", "kind": "K", "metadata": {"x": {"y": 1}}},
    ),
    (
        "preserve-unknown-fields keeps unknown, prunes inside declared",
        {
            "type": "object",
            "properties": {
                "status": {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": True,
                    "properties": {"known": {"type": "object", "properties": {}}},
                }
            },
        },
        {"status": {"free": {"deep": [1, {"x": 2}]}, "known": {"gone": 1}}},
        {"status": {"free": {"deep": [1, {"x": 2}]}, "known": {}}},
    ),
    (
        "embedded resource keeps apiVersion/kind/metadata",
        {
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "properties": {
                        "template": {
                            "type": "object",
                            "x-kubernetes-embedded-resource": True,
                            "properties": {"spec": {"type": "object", "properties": {}}},
                        }
                    },
                }
            },
        },
        {
            "spec": {
                "template": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": "p", "bogus": 1},
                    "spec": {"x": 1},
                    "other": 2,
                }
            }
        },
        {
            "spec": {
                "template": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": "p"},
                    "spec": {},
                }
            }
        },
    ),
    (
        "additionalProperties schema and array items are pruned",
        {
            "type": "object",
            "properties": {
                "m": {
                    "type": "object",
                    "additionalProperties": {
                        "type": "object",
                        "properties": {"keep": {"type": "string"}},
                    },
                },
                "l": {
                    "type": "array",
                    "items": {"type": "object", "properties": {"keep": {"type": "string"}}},
                },
            },
        },
        {"m": {"a": {"keep": "y", "drop": 1}}, "l": [{"keep": "z", "drop": 2}]},
        {"m": {"a": {"keep": "y"}}, "l": [{"keep": "z"}]},
    ),
    (
        "null of a non-nullable field is dropped, nullable kept",
        {
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "properties": {
                        "a": {"type": "string"},
                        "b": {"type": "string", "nullable": True},
                    },
                }
            },
        },
        {"spec": {"a": None, "b": None}},
        {"spec": {"b": None}},
    ),
]


@pytest.mark.parametrize(
    ("schema", "obj", "expected"),
    [pytest.param(s, o, e, id=name) for name, s, o, e in PRUNE_CASES],
)
def test_prune(schema: dict[str, Any], obj: dict[str, Any], expected: dict[str, Any]) -> None:
    before = copy.deepcopy(obj)
    assert prepare_custom_resource(obj, schema) == expected
    assert obj == before  # the input is not mutated


def test_unknown_field_paths_and_messages() -> None:
    obj = inventory(extra=1, gpus=[{"index": 0, "uuid": "u", "x": 2}])
    obj["topLevel"] = True
    paths = unknown_field_paths(obj, GPU_SCHEMA)
    assert paths == ["spec.extra", "spec.gpus[0].x", "topLevel"]
    assert unknown_field_warnings(obj, GPU_SCHEMA)[0] == 'unknown field "spec.extra"'
    assert strict_decoding_message(paths[:2]) == (
        'strict decoding error: unknown field "spec.extra", unknown field "spec.gpus[0].x"'
    )


# --------------------------------------------------------------------------------------------
# Defaulting
# --------------------------------------------------------------------------------------------

DEFAULT_CASES: list[tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]] = [
    (
        "default in array items",
        GPU_SCHEMA,
        {"spec": {"nodeName": "n", "gpus": [{"index": 0, "uuid": "u"}, {"index": 1, "uuid": "v"}]}},
        {
            "spec": {
                "nodeName": "n",
                "gpus": [
                    {"index": 0, "uuid": "u", "product": "NVIDIA H100 80GB HBM3"},
                    {"index": 1, "uuid": "v", "product": "NVIDIA H100 80GB HBM3"},
                ],
            }
        },
    ),
    (
        "nested items of items",
        GPU_SCHEMA,
        {"spec": {"gpus": [{"index": 0, "product": "A100", "mig": [{"profile": "1g.10gb"}]}]}},
        {
            "spec": {
                "gpus": [
                    {
                        "index": 0,
                        "product": "A100",
                        "mig": [{"profile": "1g.10gb", "count": 1}],
                    }
                ]
            }
        },
    ),
    (
        "only where the parent exists",
        {
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "properties": {
                        "opt": {
                            "type": "object",
                            "properties": {"n": {"type": "integer", "default": 3}},
                        }
                    },
                }
            },
        },
        {"spec": {}},
        {"spec": {}},
    ),
    (
        "defaulted object is itself defaulted",
        {
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "default": {},
                    "properties": {"n": {"type": "integer", "default": 3}},
                }
            },
        },
        {},
        {"spec": {"n": 3}},
    ),
    (
        "null of a non-nullable field with a default is defaulted",
        {
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "properties": {
                        "n": {"type": "integer", "default": 3},
                        "m": {"type": "integer", "nullable": True, "default": 4},
                    },
                }
            },
        },
        {"spec": {"n": None, "m": None}},
        {"spec": {"n": 3, "m": None}},
    ),
    (
        "additionalProperties values",
        {
            "type": "object",
            "properties": {
                "m": {
                    "type": "object",
                    "additionalProperties": {
                        "type": "object",
                        "properties": {"v": {"type": "string", "default": "d"}},
                    },
                }
            },
        },
        {"m": {"a": {}, "b": {"v": "x"}}},
        {"m": {"a": {"v": "d"}, "b": {"v": "x"}}},
    ),
]


@pytest.mark.parametrize(
    ("schema", "obj", "expected"),
    [pytest.param(s, o, e, id=name) for name, s, o, e in DEFAULT_CASES],
)
def test_defaulting(schema: dict[str, Any], obj: dict[str, Any], expected: dict[str, Any]) -> None:
    assert prepare_custom_resource(obj, schema) == expected


def test_defaults_are_deep_copies() -> None:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {"l": {"type": "array", "items": {"type": "string"}, "default": ["a"]}},
    }
    first = prepare_custom_resource({}, schema)
    first["l"].append("b")
    assert prepare_custom_resource({}, schema) == {"l": ["a"]}
    assert schema["properties"]["l"]["default"] == ["a"]


# --------------------------------------------------------------------------------------------
# Custom resource validation: one keyword at a time
# --------------------------------------------------------------------------------------------


def x_schema(fragment: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": {"x": fragment}}},
    }


def x_obj(value: Any) -> dict[str, Any]:
    return {"apiVersion": "g.io/v1", "kind": "K", "metadata": {"name": "n"}, "spec": {"x": value}}


KEYWORD_CASES: list[tuple[str, dict[str, Any], Any, list[str]]] = [
    (
        "type integer, string given",
        {"type": "integer"},
        "abc",
        ['spec.x: Invalid value: "string": spec.x in body must be of type integer: "string"'],
    ),
    (
        "type integer, fraction given",
        {"type": "integer"},
        1.5,
        ['spec.x: Invalid value: "number": spec.x in body must be of type integer: "number"'],
    ),
    ("type integer, integral float accepted", {"type": "integer"}, 2.0, []),
    ("type number accepts integers", {"type": "number"}, 7, []),
    (
        "type string, integer given",
        {"type": "string"},
        5,
        ['spec.x: Invalid value: "integer": spec.x in body must be of type string: "integer"'],
    ),
    (
        "type string, boolean given",
        {"type": "string"},
        True,
        ['spec.x: Invalid value: "boolean": spec.x in body must be of type string: "boolean"'],
    ),
    (
        "type object, array given",
        {"type": "object"},
        [],
        ['spec.x: Invalid value: "array": spec.x in body must be of type object: "array"'],
    ),
    (
        "type array, object given",
        {"type": "array", "items": {"type": "string"}},
        {},
        ['spec.x: Invalid value: "object": spec.x in body must be of type array: "object"'],
    ),
    (
        "type boolean, string given",
        {"type": "boolean"},
        "true",
        ['spec.x: Invalid value: "string": spec.x in body must be of type boolean: "string"'],
    ),
    ("nullable accepts null", {"type": "string", "nullable": True}, None, []),
    (
        "null array item",
        {"type": "array", "items": {"type": "string"}},
        ["a", None],
        ['spec.x[1]: Invalid value: "null": spec.x[1] in body must be of type string: "null"'],
    ),
    (
        "required",
        {"type": "object", "required": ["a", "b"], "properties": {"a": {"type": "string"}}},
        {"a": "y"},
        ["spec.x.b: Required value"],
    ),
    (
        "enum of strings",
        {"type": "string", "enum": ["a", "b"]},
        "c",
        ['spec.x: Unsupported value: "c": supported values: "a", "b"'],
    ),
    (
        "enum of integers",
        {"type": "integer", "enum": [1, 2]},
        3,
        ['spec.x: Unsupported value: 3: supported values: "1", "2"'],
    ),
    ("enum matched", {"type": "string", "enum": ["a", "b"]}, "b", []),
    (
        "minimum",
        {"type": "integer", "minimum": 0},
        -1,
        ["spec.x: Invalid value: -1: spec.x in body should be greater than or equal to 0"],
    ),
    (
        "exclusiveMinimum",
        {"type": "integer", "minimum": 0, "exclusiveMinimum": True},
        0,
        ["spec.x: Invalid value: 0: spec.x in body should be greater than 0"],
    ),
    (
        "maximum",
        {"type": "integer", "maximum": 8},
        9,
        ["spec.x: Invalid value: 9: spec.x in body should be less than or equal to 8"],
    ),
    (
        "exclusiveMaximum on a number",
        {"type": "number", "maximum": 1.5, "exclusiveMaximum": True},
        1.5,
        ["spec.x: Invalid value: 1.5: spec.x in body should be less than 1.5"],
    ),
    (
        "multipleOf",
        {"type": "integer", "multipleOf": 2},
        7,
        ["spec.x: Invalid value: 7: spec.x in body should be a multiple of 2"],
    ),
    ("multipleOf with float rounding", {"type": "number", "multipleOf": 0.1}, 0.3, []),
    (
        "minLength",
        {"type": "string", "minLength": 3},
        "ab",
        ['spec.x: Invalid value: "ab": spec.x in body should be at least 3 chars long'],
    ),
    (
        "maxLength",
        {"type": "string", "maxLength": 3},
        "abcd",
        ["spec.x: Too long: may not be more than 3 bytes"],
    ),
    (
        "maxLength 1",
        {"type": "string", "maxLength": 1},
        "ab",
        ["spec.x: Too long: may not be more than 1 byte"],
    ),
    ("maxLength counts characters", {"type": "string", "maxLength": 2}, "üü", []),
    (
        "pattern",
        {"type": "string", "pattern": "^[a-z]+$"},
        "ABC",
        ["spec.x: Invalid value: \"ABC\": spec.x in body should match '^[a-z]+$'"],
    ),
    ("pattern searches", {"type": "string", "pattern": "[0-9]"}, "gpu0", []),
    (
        "minItems",
        {"type": "array", "items": {"type": "string"}, "minItems": 1},
        [],
        ["spec.x: Invalid value: 0: spec.x in body should have at least 1 items"],
    ),
    (
        "maxItems",
        {"type": "array", "items": {"type": "string"}, "maxItems": 2},
        ["a", "b", "c"],
        ["spec.x: Too many: 3: must have at most 2 items"],
    ),
    (
        "maxItems 1",
        {"type": "array", "items": {"type": "string"}, "maxItems": 1},
        ["a", "b"],
        ["spec.x: Too many: 2: must have at most 1 item"],
    ),
    (
        "uniqueItems",
        {"type": "array", "items": {"type": "integer"}, "uniqueItems": True},
        [1, 2, 1],
        ['spec.x: Invalid value: "": spec.x in body shouldn\'t contain duplicates'],
    ),
    (
        "minProperties",
        {"type": "object", "minProperties": 2, "additionalProperties": {"type": "string"}},
        {"a": "b"},
        ["spec.x: Invalid value: 1: spec.x in body should have at least 2 properties"],
    ),
    (
        "maxProperties",
        {"type": "object", "maxProperties": 2, "additionalProperties": {"type": "string"}},
        {"a": "1", "b": "2", "c": "3"},
        ["spec.x: Too many: 3: must have at most 2 items"],
    ),
    (
        "additionalProperties schema",
        {"type": "object", "additionalProperties": {"type": "string"}},
        {"k": 1},
        ['spec.x.k: Invalid value: "integer": spec.x.k in body must be of type string: "integer"'],
    ),
    (
        "additionalProperties false",
        {"type": "object", "additionalProperties": False},
        {"b": 1},
        ['spec.x: Invalid value: "b": spec.x.b in body is a forbidden property'],
    ),
    (
        "items",
        {"type": "array", "items": {"type": "integer", "minimum": 0}},
        [0, -5],
        ["spec.x[1]: Invalid value: -5: spec.x[1] in body should be greater than or equal to 0"],
    ),
    (
        "format uuid",
        {"type": "string", "format": "uuid"},
        "nope",
        ['spec.x: Invalid value: "nope": spec.x in body must be of type uuid: "nope"'],
    ),
    (
        "format uuid valid",
        {"type": "string", "format": "uuid"},
        "1b2c3d4e-0000-1111-2222-333344445555",
        [],
    ),
    (
        "format date-time",
        {"type": "string", "format": "date-time"},
        "yesterday",
        [
            'spec.x: Invalid value: "yesterday": '
            'spec.x in body must be of type date-time: "yesterday"'
        ],
    ),
    (
        "format date-time valid",
        {"type": "string", "format": "date-time"},
        "2024-05-01T10:00:00Z",
        [],
    ),
    (
        "format ipv4",
        {"type": "string", "format": "ipv4"},
        "10.0.0.256",
        ['spec.x: Invalid value: "10.0.0.256": spec.x in body must be of type ipv4: "10.0.0.256"'],
    ),
    ("format int32 is not validated", {"type": "integer", "format": "int32"}, 1 << 40, []),
    ("unknown format is ignored", {"type": "string", "format": "gpu-uuid"}, "anything", []),
    ("int-or-string integer", {"x-kubernetes-int-or-string": True}, 4, []),
    ("int-or-string string", {"x-kubernetes-int-or-string": True}, "50%", []),
    (
        "int-or-string fraction",
        {"x-kubernetes-int-or-string": True},
        1.5,
        [
            'spec.x: Invalid value: "number": spec.x in body must be of type integer,string: '
            '"number"'
        ],
    ),
    (
        "anyOf",
        {"type": "integer", "anyOf": [{"minimum": 10}, {"maximum": 0}]},
        5,
        [
            '<nil>: Invalid value: "": "spec.x" must validate at least one schema (anyOf)',
            "spec.x: Invalid value: 5: spec.x in body should be greater than or equal to 10",
        ],
    ),
    ("anyOf satisfied", {"type": "integer", "anyOf": [{"minimum": 10}, {"maximum": 0}]}, 11, []),
    (
        "oneOf with two matches",
        {"type": "integer", "oneOf": [{"minimum": 0}, {"maximum": 10}]},
        5,
        [
            '<nil>: Invalid value: "": "spec.x" must validate one and only one schema (oneOf). '
            "Found 2 valid alternatives"
        ],
    ),
    (
        "allOf",
        {"type": "integer", "allOf": [{"minimum": 0}, {"maximum": 3}]},
        5,
        [
            "spec.x: Invalid value: 5: spec.x in body should be less than or equal to 3",
            '<nil>: Invalid value: "": "spec.x" must validate all the schemas (allOf)',
        ],
    ),
    (
        "not",
        {"type": "string", "not": {"enum": ["forbidden"]}},
        "forbidden",
        ['<nil>: Invalid value: "": "spec.x" must not validate the schema (not)'],
    ),
    (
        "list-type set",
        {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
        ["a", "b", "a", "a"],
        ['spec.x[2]: Duplicate value: "a"'],
    ),
    (
        "list-type map with a missing key",
        {
            "type": "array",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name"],
            "items": {"type": "object", "properties": {"name": {"type": "string"}}},
        },
        [{"name": "a"}, {}, {}],
        ["spec.x[2]: Duplicate value: {}"],
    ),
    (
        "list-type map with two keys",
        {
            "type": "array",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["node", "index"],
            "items": {
                "type": "object",
                "properties": {"node": {"type": "string"}, "index": {"type": "integer"}},
            },
        },
        [{"node": "a", "index": 0}, {"node": "a", "index": 1}, {"node": "a", "index": 0}],
        ['spec.x[2]: Duplicate value: {"index":0,"node":"a"}'],
    ),
    (
        "list-type map item must be an object",
        {
            "type": "array",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name"],
            "x-kubernetes-preserve-unknown-fields": True,
        },
        [{"name": "a"}, "b"],
        ['spec.x[1]: Invalid value: "b": must be an object for an array of list-type map'],
    ),
]


@pytest.mark.parametrize(
    ("fragment", "value", "expected"),
    [pytest.param(f, v, e, id=name) for name, f, v, e in KEYWORD_CASES],
)
def test_validation_keywords(fragment: dict[str, Any], value: Any, expected: list[str]) -> None:
    schema = x_schema(fragment)
    obj = prepare_custom_resource(x_obj(value), schema)
    assert messages(validate_custom_resource(obj, schema)) == expected


@pytest.mark.parametrize(
    ("fragment", "value", "reason"),
    [
        ({"type": "integer"}, "abc", "FieldValueTypeInvalid"),
        ({"type": "string", "enum": ["a"]}, "b", "FieldValueNotSupported"),
        ({"type": "string", "maxLength": 1}, "ab", "FieldValueTooLong"),
        ({"type": "array", "items": {"type": "string"}, "maxItems": 0}, ["a"], "FieldValueTooMany"),
        ({"type": "integer", "minimum": 1}, 0, "FieldValueInvalid"),
        ({"type": "object", "required": ["a"]}, {}, "FieldValueRequired"),
    ],
)
def test_validation_reasons(fragment: dict[str, Any], value: Any, reason: str) -> None:
    schema = x_schema(fragment)
    (err,) = validate_custom_resource(x_obj(value), schema)
    status = invalid_status("K", "g.io", "n", [err])
    assert status["details"]["causes"][0]["reason"] == reason


def test_gpu_inventory_end_to_end() -> None:
    obj = inventory(
        gpus=[
            {"index": 0, "uuid": "GPU-0", "memoryMiB": 81559, "junk": True},
            {"index": 1, "uuid": "GPU-1", "memoryMiB": "abc"},
            {"index": 0, "uuid": "GPU-2", "memoryMiB": -1},
        ]
    )
    prepared = prepare_custom_resource(obj, GPU_SCHEMA)
    assert "junk" not in prepared["spec"]["gpus"][0]
    assert prepared["spec"]["gpus"][0]["product"] == "NVIDIA H100 80GB HBM3"
    errors = validate_custom_resource(prepared, GPU_SCHEMA)
    assert messages(errors) == [
        'spec.gpus[1].memoryMiB: Invalid value: "string": spec.gpus[1].memoryMiB in body must '
        'be of type integer: "string"',
        "spec.gpus[2].memoryMiB: Invalid value: -1: spec.gpus[2].memoryMiB in body should be "
        "greater than or equal to 0",
        'spec.gpus[2]: Duplicate value: {"index":0}',
    ]
    status = invalid_status("GPUNodeInventory", GROUP, "node-a", errors)
    assert status["message"].startswith('GPUNodeInventory.gpusched.io "node-a" is invalid: [')
    assert json.loads(json.dumps(status)) == status


def test_valid_inventory_has_no_errors() -> None:
    obj = prepare_custom_resource(
        inventory(gpus=[{"index": 0, "uuid": "GPU-0", "memoryMiB": 81559, "mig": []}]), GPU_SCHEMA
    )
    assert validate_custom_resource(obj, GPU_SCHEMA) == []


def test_missing_required_spec_field() -> None:
    obj = inventory()
    del obj["spec"]["nodeName"]
    assert messages(validate_custom_resource(obj, GPU_SCHEMA)) == ["spec.nodeName: Required value"]


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        ({"name": "node-a.rack-1"}, []),
        ({}, ["metadata.name: Required value: name or generateName is required"]),
        (
            {"name": "Node_A"},
            [
                'metadata.name: Invalid value: "Node_A": a lowercase RFC 1123 subdomain must '
                "consist of lower case alphanumeric characters, '-' or '.', and must start and "
                "end with an alphanumeric character (e.g. 'example.com', regex used for "
                "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
            ],
        ),
        (
            {"name": "a" * 254},
            [
                f'metadata.name: Invalid value: "{"a" * 254}": must be no more than 253 characters',
            ],
        ),
    ],
)
def test_custom_resource_name(metadata: dict[str, Any], expected: list[str]) -> None:
    obj = inventory()
    obj["metadata"] = metadata
    assert messages(validate_custom_resource(obj, GPU_SCHEMA)) == expected


def test_type_meta_checked_first() -> None:
    obj = inventory()
    obj["kind"] = "Other"
    obj["spec"] = {}
    assert messages(
        validate_custom_resource(obj, GPU_SCHEMA, kind="GPUNodeInventory", api_version=API_VERSION)
    ) == ['kind: Invalid value: "Other": must be GPUNodeInventory']


def test_type_meta_accepted() -> None:
    obj = prepare_custom_resource(inventory(), GPU_SCHEMA)
    errors = validate_custom_resource(
        obj, GPU_SCHEMA, kind="GPUNodeInventory", api_version=API_VERSION
    )
    assert errors == []


def test_embedded_resource_validation() -> None:
    schema = x_schema(
        {
            "type": "object",
            "x-kubernetes-embedded-resource": True,
            "x-kubernetes-preserve-unknown-fields": True,
        }
    )
    obj = prepare_custom_resource(x_obj({"apiVersion": "v1", "metadata": {"name": "a/b"}}), schema)
    assert messages(validate_custom_resource(obj, schema)) == [
        "spec.x.kind: Required value",
        "spec.x.metadata.name: Invalid value: \"a/b\": may not contain '/'",
    ]


# --------------------------------------------------------------------------------------------
# CRD validation
# --------------------------------------------------------------------------------------------

SCHEMA_PATH = "spec.validation.openAPIV3Schema"
DNS1035_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
    "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', "
    "regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)
DNS1123_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
SPEC_PROPS = f"{SCHEMA_PATH}.properties[spec].properties"


def _schema(crd: dict[str, Any], version: int = 0) -> dict[str, Any]:
    schema: dict[str, Any] = crd["spec"]["versions"][version]["schema"]["openAPIV3Schema"]
    return schema


def _spec_props(crd: dict[str, Any]) -> dict[str, Any]:
    props: dict[str, Any] = _schema(crd)["properties"]["spec"]["properties"]
    return props


def _second_version(crd: dict[str, Any]) -> None:
    v2 = copy.deepcopy(crd["spec"]["versions"][0])
    v2["name"] = "v1beta1"
    v2["storage"] = False
    crd["spec"]["versions"].append(v2)


def _second_version_without_root_type(crd: dict[str, Any]) -> None:
    _second_version(crd)
    del _schema(crd, 1)["type"]


def _set_group(crd: dict[str, Any], group: str) -> None:
    crd["spec"]["group"] = group
    crd["metadata"]["name"] = f"gpunodeinventories.{group}"


def _drop_plural(crd: dict[str, Any]) -> None:
    del crd["spec"]["names"]["plural"]
    crd["metadata"]["name"] = f".{GROUP}"


CRD_CASES: list[tuple[str, Callable[[dict[str, Any]], object], list[str]]] = [
    (
        "name must be plural.group",
        lambda c: c["metadata"].update(name="gpus.gpusched.io"),
        [
            'metadata.name: Invalid value: "gpus.gpusched.io": '
            'must be spec.names.plural+"."+spec.group'
        ],
    ),
    (
        "group is required",
        lambda c: c["spec"].pop("group"),
        [
            'metadata.name: Invalid value: "gpunodeinventories.gpusched.io": '
            'must be spec.names.plural+"."+spec.group',
            "spec.group: Required value",
        ],
    ),
    (
        "group needs a dot",
        lambda c: _set_group(c, "gpusched"),
        ['spec.group: Invalid value: "gpusched": should be a domain with at least one dot'],
    ),
    ("scope is required", lambda c: c["spec"].pop("scope"), ["spec.scope: Required value"]),
    (
        "scope is an enum",
        lambda c: c["spec"].update(scope="Global"),
        ['spec.scope: Unsupported value: "Global": supported values: "Cluster", "Namespaced"'],
    ),
    (
        "at least one storage version",
        lambda c: c["spec"]["versions"][0].update(storage=False),
        [
            "spec.versions: Invalid value: "
            + go_json([default_crd(gpu_crd())["spec"]["versions"][0] | {"storage": False}])
            + ": must have exactly one version marked as storage version",
            "status.storedVersions: Invalid value: null: must have at least one stored version",
        ],
    ),
    (
        "schemas are required",
        lambda c: c["spec"]["versions"][0].pop("schema"),
        ["spec.versions[0].schema.openAPIV3Schema: Required value: schemas are required"],
    ),
    (
        "version names are DNS-1035 labels",
        lambda c: c["spec"]["versions"][0].update(name="V1"),
        [
            # upstream also reports the internal spec.version (copied from versions[0].name)
            'spec.versions[0].name: Invalid value: "V1": ' + DNS1035_MSG,
            'spec.version: Invalid value: "V1": ' + DNS1035_MSG,
        ],
    ),
    (
        "root type is required",
        lambda c: _schema(c).pop("type"),
        [f"{SCHEMA_PATH}.type: Required value: must not be empty at the root"],
    ),
    (
        "root must be an object",
        lambda c: _schema(c).update(type="array", items={"type": "string"}),
        [
            f'{SCHEMA_PATH}.type: Invalid value: "array": only "object" is allowed as the type at '
            "the root of the schema if the status subresource is enabled",
            f'{SCHEMA_PATH}.type: Invalid value: "array": must be object at the root',
        ],
    ),
    (
        "field type is required",
        lambda c: _spec_props(c)["nodeName"].pop("type"),
        [
            f"{SPEC_PROPS}[nodeName].type: Required value: "
            "must not be empty for specified object fields"
        ],
    ),
    (
        "item type is required",
        lambda c: _spec_props(c)["gpus"]["items"]["properties"]["mig"]["items"].pop("type"),
        [
            f"{SPEC_PROPS}[gpus].items.properties[mig].items.type: Required value: must not be "
            "empty for specified array items"
        ],
    ),
    (
        "arrays need items",
        lambda c: _spec_props(c)["gpus"]["items"]["properties"]["mig"].pop("items"),
        [f"{SPEC_PROPS}[gpus].items.properties[mig].items: Required value: must be specified"],
    ),
    (
        "types are OpenAPI v3 types",
        lambda c: _spec_props(c)["nodeName"].update(type="str"),
        [
            f'{SPEC_PROPS}[nodeName].type: Unsupported value: "str": supported values: "array", '
            '"boolean", "integer", "number", "object", "string"'
        ],
    ),
    (
        "kind may have mixed case",
        lambda c: c["spec"]["names"].update(kind="GPU_Inventory"),
        [
            # singular and listKind are defaulted from kind, so they are reported too
            'spec.names.singular: Invalid value: "gpu_inventory": ' + DNS1035_MSG,
            'spec.names.kind: Invalid value: "GPU_Inventory": may have mixed case, but should '
            "otherwise match: " + DNS1035_MSG,
            'spec.names.listKind: Invalid value: "GPU_InventoryList": may have mixed case, but '
            "should otherwise match: " + DNS1035_MSG,
        ],
    ),
    (
        "kind and listKind differ",
        lambda c: c["spec"]["names"].update(listKind="GPUNodeInventory"),
        [
            'spec.names.listKind: Invalid value: "GPUNodeInventory": '
            "kind and listKind may not be the same"
        ],
    ),
    (
        "plural is required",
        lambda c: _drop_plural(c),
        [
            'metadata.name: Invalid value: ".gpusched.io": ' + DNS1123_SUBDOMAIN_MSG,
            "spec.names.plural: Required value",
        ],
    ),
    (
        "default must match the type",
        lambda c: _spec_props(c)["gpus"]["items"]["properties"]["memoryMiB"].update(
            default="80GiB"
        ),
        [
            f'{SPEC_PROPS}[gpus].items.properties[memoryMiB].default: Invalid value: "string": '
            ' in body must be of type integer: "string"'
        ],
    ),
    (
        "default must be pruned",
        lambda c: _spec_props(c)["gpus"]["items"]["properties"]["mig"]["items"].update(
            default={"profile": "1g.10gb", "bogus": 1}
        ),
        [
            f"{SPEC_PROPS}[gpus].items.properties[mig].items.default: Invalid value: "
            '{"bogus":1,"profile":"1g.10gb"}: must not have unknown fields'
        ],
    ),
    (
        "metadata may only restrict name",
        lambda c: _schema(c)["properties"].update(
            metadata={"type": "object", "properties": {"labels": {"type": "object"}}}
        ),
        [
            f"{SCHEMA_PATH}.properties[metadata]: Forbidden: must not specify anything other than "
            "name and generateName, but metadata is implicitly specified"
        ],
    ),
    (
        "value validations may not declare types",
        lambda c: _spec_props(c)["nodeName"].update(anyOf=[{"type": "string"}, {"default": 0}]),
        [
            f"{SPEC_PROPS}[nodeName].anyOf[0].type: Forbidden: must be empty to be structural",
            f"{SPEC_PROPS}[nodeName].anyOf[1].default: Forbidden: must be undefined to be "
            "structural",
        ],
    ),
    (
        "no defaults in top-level metadata",
        lambda c: _schema(c)["properties"].update(
            metadata={
                "type": "object",
                "properties": {"name": {"type": "string", "default": "inventory"}},
            }
        ),
        [
            f"{SCHEMA_PATH}.properties[metadata].properties[name].default: Forbidden: must not be "
            "set in top-level metadata"
        ],
    ),
    (
        "uniqueItems is forbidden",
        lambda c: _spec_props(c)["gpus"].update(uniqueItems=True),
        [
            f"{SPEC_PROPS}[gpus].uniqueItems: Forbidden: uniqueItems cannot be set to true since "
            "the runtime complexity becomes quadratic"
        ],
    ),
    (
        "additionalProperties and properties",
        lambda c: _spec_props(c)["labels"].update(properties={"a": {"type": "string"}}),
        [
            f"{SPEC_PROPS}[labels].additionalProperties: Forbidden: additionalProperties and "
            "properties are mutual exclusive"
        ],
    ),
    (
        "list-type map needs keys",
        lambda c: _spec_props(c)["gpus"].pop("x-kubernetes-list-map-keys"),
        [
            f"{SPEC_PROPS}[gpus].x-kubernetes-list-map-keys: Required value: must not be empty if "
            "x-kubernetes-list-type is map"
        ],
    ),
    (
        "per-version schemas are validated at their own path",
        lambda c: _second_version_without_root_type(c),
        [
            "spec.versions[1].schema.openAPIV3Schema.type: Required value: "
            "must not be empty at the root"
        ],
    ),
    (
        "status subresource restricts the root",
        lambda c: _schema(c).update(minProperties=1),
        [
            f"{SCHEMA_PATH}: Invalid value: "
            + go_json(
                default_crd(gpu_crd())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
                | {"minProperties": 1}
            )
            + ": only [Description Type Format Title Maximum ExclusiveMaximum Minimum "
            "ExclusiveMinimum MaxLength MinLength Pattern MaxItems MinItems UniqueItems MultipleOf "
            "Required Items Properties ExternalDocs Example XPreserveUnknownFields XValidations] "
            "fields are allowed at the root of the schema if the status subresource is enabled"
        ],
    ),
    (
        "printer column types",
        lambda c: c["spec"]["versions"][0]["additionalPrinterColumns"][0].update(type="str"),
        [
            'spec.additionalPrinterColumns[0].type: Invalid value: "str": must be one of '
            "boolean,date,integer,number,string"
        ],
    ),
    (
        "protected groups need approval",
        lambda c: _set_group(c, "gpu.k8s.io"),
        [
            "metadata.annotations[api-approved.kubernetes.io]: Required value: protected groups "
            'must have approval annotation "api-approved.kubernetes.io", see '
            "https://github.com/kubernetes/enhancements/pull/1111"
        ],
    ),
]


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [pytest.param(m, e, id=name) for name, m, e in CRD_CASES],
)
def test_crd_validation(mutate: Callable[[dict[str, Any]], object], expected: list[str]) -> None:
    crd = gpu_crd()
    mutate(crd)
    assert crd_messages(crd) == expected


@pytest.mark.parametrize(
    "mutate",
    [
        pytest.param(lambda c: None, id="as submitted"),
        pytest.param(
            lambda c: c["spec"]["names"].update(listKind="GPUNodeInventoryList"),
            id="explicit listKind",
        ),
        pytest.param(
            lambda c: _spec_props(c).update(free={"x-kubernetes-preserve-unknown-fields": True}),
            id="preserve-unknown without type",
        ),
        pytest.param(
            lambda c: _spec_props(c).update(port={"x-kubernetes-int-or-string": True}),
            id="int-or-string without type",
        ),
        pytest.param(
            lambda c: _schema(c)["properties"].update(
                metadata={
                    "type": "object",
                    "properties": {"name": {"type": "string", "maxLength": 63}},
                }
            ),
            id="metadata name restriction",
        ),
        pytest.param(lambda c: _second_version(c), id="two identical versions"),
        pytest.param(
            lambda c: _spec_props(c).update(
                quota={
                    "x-kubernetes-int-or-string": True,
                    "anyOf": [{"type": "integer"}, {"type": "string"}],
                }
            ),
            id="int-or-string anyOf pattern",
        ),
    ],
)
def test_valid_crds(mutate: Callable[[dict[str, Any]], object]) -> None:
    crd = gpu_crd()
    mutate(crd)
    validate_crd(crd)


def test_validate_crd_does_not_mutate() -> None:
    crd = gpu_crd()
    before = copy.deepcopy(crd)
    validate_crd(crd)
    assert crd == before


def test_default_crd() -> None:
    crd = gpu_crd()
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["description"] = (
        ""
    )
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["nullable"] = (
        False
    )
    crd["spec"]["versions"][0]["deprecated"] = False
    d = default_crd(crd)
    assert d["spec"]["names"]["singular"] == "gpunodeinventory"
    assert d["spec"]["names"]["listKind"] == "GPUNodeInventoryList"
    assert d["spec"]["conversion"] == {"strategy": "None"}
    spec_schema = d["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert "description" not in spec_schema
    assert "nullable" not in spec_schema
    assert "deprecated" not in d["spec"]["versions"][0]
    assert "singular" not in crd["spec"]["names"]  # the input is untouched


# --------------------------------------------------------------------------------------------
# CRDInfo and status
# --------------------------------------------------------------------------------------------


def test_crd_info() -> None:
    crd = gpu_crd()
    _second_version(crd)
    crd["spec"]["versions"][1].update(storage=False, served=False)
    crd["spec"]["versions"][1].pop("subresources")
    info = CRDInfo.from_crd(crd)
    assert info.group == GROUP
    assert info.kind == "GPUNodeInventory"
    assert info.list_kind == "GPUNodeInventoryList"
    assert info.plural == "gpunodeinventories"
    assert info.singular == "gpunodeinventory"
    assert info.short_names == ("gni",)
    assert info.categories == ("gpusched",)
    assert info.namespaced is False
    assert info.storage_version == VERSION
    assert info.name == f"gpunodeinventories.{GROUP}"
    assert info.served_versions == (VERSION,)
    assert [v.name for v in info.versions] == [VERSION, "v1beta1"]
    v1 = info.versions[0]
    assert v1.served
    assert v1.storage
    assert v1.has_status_subresource
    assert not v1.has_scale_subresource
    assert v1.additional_printer_columns[0]["jsonPath"] == ".spec.nodeName"
    assert info.versions[1].has_status_subresource is False
    assert info.schema(VERSION) == GPU_SCHEMA
    assert info.schema("v9") is None
    assert info.api_version(VERSION) == API_VERSION
    assert hash(info) == hash(CRDInfo.from_crd(crd))
    with pytest.raises(AttributeError):
        info.kind = "X"  # type: ignore[misc]


def test_namespaced_crd_info() -> None:
    crd = gpu_crd()
    crd["spec"]["scope"] = "Namespaced"
    assert CRDInfo.from_crd(crd).namespaced is True


def test_crd_status_after_create() -> None:
    status = crd_status_after_create(gpu_crd(), now="2024-05-01T10:00:00Z")
    assert status == {
        "conditions": [
            {
                "type": "NamesAccepted",
                "status": "True",
                "lastTransitionTime": "2024-05-01T10:00:00Z",
                "reason": "NoConflicts",
                "message": "no conflicts found",
            },
            {
                "type": "Established",
                "status": "True",
                "lastTransitionTime": "2024-05-01T10:00:00Z",
                "reason": "InitialNamesAccepted",
                "message": "the initial names have been accepted",
            },
        ],
        "acceptedNames": {
            "plural": "gpunodeinventories",
            "singular": "gpunodeinventory",
            "shortNames": ["gni"],
            "kind": "GPUNodeInventory",
            "listKind": "GPUNodeInventoryList",
            "categories": ["gpusched"],
        },
        "storedVersions": [VERSION],
    }


def test_crd_status_after_create_default_time() -> None:
    ts = crd_status_after_create(gpu_crd())["conditions"][0]["lastTransitionTime"]
    assert len(ts) == len("2024-05-01T10:00:00Z")
    assert ts.endswith("Z")


def test_crd_initial_status() -> None:
    assert crd_initial_status(gpu_crd()) == {
        "acceptedNames": {"plural": "", "kind": ""},
        "storedVersions": [VERSION],
    }
