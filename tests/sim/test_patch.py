"""JSON patch, JSON merge patch and strategic merge patch against their Go implementations.

Cases follow RFC 7386 appendix A, RFC 6902, evanphx/json-patch v4 and
k8s.io/apimachinery/pkg/util/strategicpatch (patch_test.go), plus the HTTP status codes that
staging/src/k8s.io/apiserver/pkg/endpoints/handlers/patch.go gives each failure.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusched.sim import patch
from gpusched.sim.patch import (
    PATCH_STRATEGIES,
    PatchError,
    json_merge_patch,
    json_patch,
    strategic_merge_patch,
    supports_strategic_merge,
)

GENERIC_422 = "the server rejected our request due to an error in our request"
FIND_KIND = (
    'struct { APIVersion string "json:\\"apiVersion,omitempty\\""; '
    'Kind string "json:\\"kind,omitempty\\"" }'
)


def test_all_is_complete() -> None:
    assert sorted(patch.__all__) == [
        "PATCH_STRATEGIES",
        "PatchError",
        "STRATEGIC_MERGE_KINDS",
        "json_merge_patch",
        "json_patch",
        "strategic_merge_patch",
        "supports_strategic_merge",
    ]
    assert all(hasattr(patch, name) for name in patch.__all__)


def test_patch_error_status() -> None:
    err = PatchError(422, "Invalid", GENERIC_422, cause="test failed", details={})
    assert isinstance(err, ValueError)
    assert str(err) == GENERIC_422
    assert err.cause == "test failed"
    assert err.to_status() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": GENERIC_422,
        "reason": "Invalid",
        "details": {},
        "code": 422,
    }
    assert list(PatchError(500, "", "boom").to_status()) == [
        "kind",
        "apiVersion",
        "metadata",
        "status",
        "message",
        "code",
    ]


# ---------------------------------------------------------------------------- JSON merge patch


@pytest.mark.parametrize(
    ("target", "body", "expected"),
    [
        # RFC 7386 appendix A (object targets)
        ({"a": "b"}, {"a": "c"}, {"a": "c"}),
        ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
        ({"a": "b"}, {"a": None}, {}),
        ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
        ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
        ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
        ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
        ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
        ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
        ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
        ({"a": "b"}, {}, {"a": "b"}),
        # evanphx: a null target value is replaced like a missing one
        ({"a": None}, {"a": {"b": None, "c": 1}}, {"a": {"c": 1}}),
        # evanphx v4.12: nulls inside new arrays are kept, nulls in their objects pruned
        ({}, {"a": [None, {"b": None, "c": 1}]}, {"a": [None, {"c": 1}]}),
        ({"a": "x"}, {"a": [{"b": None}]}, {"a": [{}]}),
        # ...but a non-object patch value replacing an object is taken as is
        ({"a": {"k": 1}}, {"a": [{"b": None}]}, {"a": [{"b": None}]}),
        ({"a": {"k": 1}}, {"a": {"k": None}}, {"a": {}}),
    ],
)
def test_json_merge_patch(target: dict[str, Any], body: Any, expected: dict[str, Any]) -> None:
    before = copy.deepcopy((target, body))
    assert json_merge_patch(target, body) == expected
    assert (target, body) == before


@pytest.mark.parametrize("body", [None, "x", 3, True])
def test_json_merge_patch_rejects_non_objects(body: Any) -> None:
    with pytest.raises(PatchError) as info:
        json_merge_patch({"a": 1}, body)
    assert (info.value.code, info.value.reason, str(info.value)) == (
        400,
        "BadRequest",
        "Invalid JSON Patch",
    )


def test_json_merge_patch_array_body_cannot_be_decoded() -> None:
    with pytest.raises(PatchError) as info:
        json_merge_patch({"a": 1}, [1, {"b": None}, "<"])
    err = info.value
    body = (
        'Invalid value: "[1,{},\\"\\\\u003c\\"]": couldn\'t get version/kind; json parse error: '
        f"json: cannot unmarshal array into Go value of type {FIND_KIND}"
    )
    assert (err.code, err.reason) == (422, "Invalid")
    assert str(err) == f' "" is invalid: patch: {body}'
    assert err.details == {
        "causes": [{"reason": "FieldValueInvalid", "message": body, "field": "patch"}]
    }


# ---------------------------------------------------------------------------------- JSON patch

DOC: dict[str, Any] = {
    "metadata": {"name": "p", "labels": {"a": "1", "x/y": "2", "t~n": "3"}},
    "spec": {"list": [1, 2, 3], "null": None, "nested": {"k": [{"v": 1}]}},
}


@pytest.mark.parametrize(
    ("ops", "expected_changes"),
    [
        ([], {}),
        (None, {}),
        ([{"op": "add", "path": "/metadata/labels/b", "value": "v"}], {"labels.b": "v"}),
        ([{"op": "add", "path": "/metadata/labels/a", "value": "v"}], {"labels.a": "v"}),
        ([{"op": "add", "path": "/metadata/labels/n"}], {"labels.n": None}),
        ([{"op": "add", "path": "/spec/list/0", "value": 0}], {"list": [0, 1, 2, 3]}),
        ([{"op": "add", "path": "/spec/list/3", "value": 4}], {"list": [1, 2, 3, 4]}),
        ([{"op": "add", "path": "/spec/list/-", "value": 4}], {"list": [1, 2, 3, 4]}),
        ([{"op": "add", "path": "/spec/list/-1", "value": 9}], {"list": [1, 2, 3, 9]}),
        ([{"op": "add", "path": "/spec/list/-4", "value": 9}], {"list": [9, 1, 2, 3]}),
        ([{"op": "add", "path": "/spec/list/+1", "value": 9}], {"list": [1, 9, 2, 3]}),
        ([{"op": "remove", "path": "/spec/list/0"}], {"list": [2, 3]}),
        ([{"op": "remove", "path": "/spec/list/-1"}], {"list": [1, 2]}),
        ([{"op": "remove", "path": "/metadata/labels/x~1y"}], {"labels.x/y": "<gone>"}),
        ([{"op": "remove", "path": "/metadata/labels/t~0n"}], {"labels.t~n": "<gone>"}),
        ([{"op": "remove", "path": "/spec/null"}], {"null": "<gone>"}),
        ([{"op": "replace", "path": "/metadata/labels/a", "value": "z"}], {"labels.a": "z"}),
        # evanphx: replacing a missing object member adds it
        ([{"op": "replace", "path": "/metadata/labels/new", "value": "z"}], {"labels.new": "z"}),
        ([{"op": "replace", "path": "/spec/list/-1", "value": 0}], {"list": [1, 2, 0]}),
        (
            [{"op": "move", "from": "/metadata/labels/a", "path": "/metadata/labels/b"}],
            {"labels.a": "<gone>", "labels.b": "1"},
        ),
        ([{"op": "move", "from": "/spec/list/0", "path": "/spec/list/-"}], {"list": [2, 3, 1]}),
        (
            [{"op": "copy", "from": "/metadata/name", "path": "/metadata/labels/n"}],
            {"labels.n": "p"},
        ),
        # evanphx: copying a missing object member copies null
        (
            [{"op": "copy", "from": "/metadata/nope", "path": "/metadata/labels/n"}],
            {"labels.n": None},
        ),
        ([{"op": "test", "path": "/metadata/name", "value": "p"}], {}),
        ([{"op": "test", "path": "/spec/list", "value": [1, 2, 3]}], {}),
        ([{"op": "test", "path": "/spec/nested", "value": {"k": [{"v": 1}]}}], {}),
        ([{"op": "test", "path": "/spec/null", "value": None}], {}),
        ([{"op": "test", "path": "/spec/missing"}], {}),
        ([{"op": "test", "path": "/spec/list/-1", "value": 3}], {}),
        # a path without its leading slash loses its first segment
        ([{"op": "add", "path": "ignored/zz", "value": 1}], {"zz": 1}),
        (
            [
                {"op": "add", "path": "/spec/obj", "value": {"in": []}},
                {"op": "add", "path": "/spec/obj/in/-", "value": "x"},
            ],
            {"obj": {"in": ["x"]}},
        ),
    ],
)
def test_json_patch(ops: Any, expected_changes: dict[str, Any]) -> None:
    before = copy.deepcopy((DOC, ops))
    expected = copy.deepcopy(DOC)
    for where, value in expected_changes.items():
        if where.startswith("labels."):
            parent, key = expected["metadata"]["labels"], where.removeprefix("labels.")
        elif where == "zz":
            parent, key = expected, "zz"
        else:
            parent, key = expected["spec"], where
        if value == "<gone>":
            del parent[key]
        else:
            parent[key] = value
    assert json_patch(DOC, ops) == expected
    assert (DOC, ops) == before


def test_json_patch_replace_root() -> None:
    assert json_patch(DOC, [{"op": "replace", "path": "", "value": {"a": 1}}]) == {"a": 1}
    assert json_patch(DOC, [{"op": "test", "path": "", "value": DOC}]) == DOC


@pytest.mark.parametrize(
    ("ops", "cause"),
    [
        (
            [{"op": "test", "path": "/metadata/name", "value": "q"}],
            "testing value /metadata/name failed: test failed",
        ),
        (
            [{"op": "test", "path": "/spec/list/0", "value": 1.0}],
            "testing value /spec/list/0 failed: test failed",
        ),
        (
            [{"op": "test", "path": "/spec/list/0", "value": True}],
            "testing value /spec/list/0 failed: test failed",
        ),
        (
            [{"op": "test", "path": "/metadata/name"}],
            "testing value /metadata/name failed: test failed",
        ),
        (
            [{"op": "test", "path": "/spec/missing", "value": 1}],
            "testing value /spec/missing failed: test failed",
        ),
        ([{"op": "test", "path": "", "value": {}}], "testing value  failed: test failed"),
        (
            [{"op": "test", "path": "/nope/x", "value": 1}],
            "test operation does not apply: is missing path: /nope/x: missing value",
        ),
        (
            [{"op": "test", "path": "/spec/list/x", "value": 1}],
            "error in test for path: '/spec/list/x': strconv.Atoi: parsing \"x\": invalid syntax",
        ),
        (
            [{"op": "add", "path": "/nope/x", "value": 1}],
            'add operation does not apply: doc is missing path: "/nope/x": missing value',
        ),
        (
            [{"op": "add", "path": "", "value": 1}],
            'add operation does not apply: doc is missing path: "": missing value',
        ),
        (
            [{"op": "add", "path": "/metadata/name/x", "value": 1}],
            'add operation does not apply: doc is missing path: "/metadata/name/x": missing value',
        ),
        (
            [{"op": "add", "path": "/spec/null/x", "value": 1}],
            'add operation does not apply: doc is missing path: "/spec/null/x": missing value',
        ),
        ([{"op": "add", "value": 1}], "add operation failed to decode path: missing value"),
        (
            [{"op": "add", "path": 5, "value": 1}],
            "add operation failed to decode path: missing value",
        ),
        (
            [{"op": "add", "path": "/spec/list/5", "value": 1}],
            "error in add for path: '/spec/list/5': Unable to access invalid index: 5: invalid "
            "index referenced",
        ),
        (
            [{"op": "add", "path": "/spec/list/-5", "value": 1}],
            "error in add for path: '/spec/list/-5': Unable to access invalid index: -5: invalid "
            "index referenced",
        ),
        (
            [{"op": "add", "path": "/spec/list/x", "value": 1}],
            "error in add for path: '/spec/list/x': value was not a proper array index: 'x': "
            'strconv.Atoi: parsing "x": invalid syntax',
        ),
        (
            [{"op": "add", "path": "/spec/list/99999999999999999999", "value": 1}],
            "error in add for path: '/spec/list/99999999999999999999': value was not a proper "
            "array index: '99999999999999999999': "
            'strconv.Atoi: parsing "99999999999999999999": value out of range',
        ),
        (
            [{"op": "remove", "path": "/metadata/nope"}],
            "error in remove for path: '/metadata/nope': Unable to remove nonexistent key: nope: "
            "missing value",
        ),
        (
            [{"op": "remove", "path": "/spec/list/3"}],
            "error in remove for path: '/spec/list/3': Unable to access invalid index: 3: "
            "invalid index referenced",
        ),
        (
            [{"op": "remove", "path": "/spec/list/-"}],
            "error in remove for path: '/spec/list/-': strconv.Atoi: parsing \"-\": invalid syntax",
        ),
        (
            [{"op": "remove", "path": "/a/b"}],
            'remove operation does not apply: doc is missing path: "/a/b": missing value',
        ),
        ([{"op": "remove"}], "remove operation failed to decode path: missing value"),
        (
            [{"op": "replace", "path": "/spec/list/3", "value": 1}],
            "replace operation does not apply: doc is missing key: /spec/list/3: missing value",
        ),
        (
            [{"op": "replace", "path": "/a/b", "value": 1}],
            "replace operation does not apply: doc is missing path: /a/b: missing value",
        ),
        (
            [{"op": "replace", "value": 1}],
            "replace operation failed to decode path: operation missing path field: missing value",
        ),
        (
            [{"op": "replace", "path": 1, "value": 1}],
            "replace operation failed to decode path: json: cannot unmarshal number into Go "
            "value of type string",
        ),
        (
            [{"op": "replace", "path": "", "value": "x"}],
            "replace operation value must be object or array: %!w(<nil>)",
        ),
        (
            [{"op": "move", "path": "/x"}],
            "move operation failed to decode from: operation, missing from field: missing value",
        ),
        (
            [{"op": "move", "from": "/a/b", "path": "/x"}],
            "move operation does not apply: doc is missing from path: /a/b: missing value",
        ),
        (
            [{"op": "move", "from": "/metadata/nope", "path": "/x"}],
            "error in move for path: 'nope': Unable to remove nonexistent key: nope: missing value",
        ),
        (
            [{"op": "move", "from": "/spec/list/7", "path": "/x"}],
            "error in move for path: '7': Unable to access invalid index: 7: invalid index "
            "referenced",
        ),
        (
            [{"op": "move", "from": "/metadata/name"}],
            "move operation failed to decode path: operation missing path field: missing value",
        ),
        (
            [{"op": "move", "from": "/metadata", "path": "/metadata/x"}],
            "move operation does not apply: doc is missing destination path: /metadata/x: "
            "missing value",
        ),
        (
            [{"op": "copy", "path": "/x"}],
            "copy operation failed to decode from: operation, missing from field: missing value",
        ),
        (
            [{"op": "copy", "from": "/a/b", "path": "/x"}],
            "copy operation does not apply: doc is missing from path: /a/b: missing value",
        ),
        (
            [{"op": "copy", "from": "/spec/list/9", "path": "/x"}],
            "error in copy for from: '/spec/list/9': Unable to access invalid index: 9: invalid "
            "index referenced",
        ),
        (
            [{"op": "copy", "from": "/metadata/name"}],
            "copy operation failed to decode path: missing value",
        ),
        (
            [{"op": "copy", "from": "/metadata/name", "path": "/a/b"}],
            "copy operation does not apply: doc is missing destination path: /a/b: missing value",
        ),
        (
            [{"op": "copy", "from": "/metadata/name", "path": "/spec/list/9"}],
            "error while adding value during copy: Unable to access invalid index: 9: invalid "
            "index referenced",
        ),
        ([{"op": "Add", "path": "/x", "value": 1}], "Unexpected kind: Add"),
        ([{"path": "/x"}], "Unexpected kind: unknown"),
        ([{"op": 1}], "Unexpected kind: unknown"),
        ([None], "Unexpected kind: unknown"),
        (
            [
                {"op": "add", "path": "/metadata/labels/b", "value": "v"},
                {"op": "test", "path": "/metadata/labels/b", "value": "w"},
            ],
            "testing value /metadata/labels/b failed: test failed",
        ),
    ],
)
def test_json_patch_operation_failures(ops: list[Any], cause: str) -> None:
    with pytest.raises(PatchError) as info:
        json_patch(DOC, ops)
    err = info.value
    assert (err.code, err.reason, str(err), err.details) == (422, "Invalid", GENERIC_422, {})
    assert err.cause == cause


@pytest.mark.parametrize(
    ("ops", "message"),
    [
        ({"op": "add"}, "json: cannot unmarshal object into Go value of type jsonpatch.Patch"),
        ("x", "json: cannot unmarshal string into Go value of type jsonpatch.Patch"),
        (1, "json: cannot unmarshal number into Go value of type jsonpatch.Patch"),
        ([["op"]], "json: cannot unmarshal array into Go value of type jsonpatch.Operation"),
        ([True], "json: cannot unmarshal bool into Go value of type jsonpatch.Operation"),
    ],
)
def test_json_patch_bad_body(ops: Any, message: str) -> None:
    with pytest.raises(PatchError) as info:
        json_patch(DOC, ops)
    assert (info.value.code, info.value.reason, str(info.value)) == (400, "BadRequest", message)


def test_json_patch_operation_limit() -> None:
    ok = [{"op": "test", "path": "/metadata/name", "value": "p"}] * 10000
    assert json_patch(DOC, ok) == DOC
    with pytest.raises(PatchError) as info:
        json_patch(DOC, [*ok, ok[0]])
    assert (info.value.code, info.value.reason, str(info.value)) == (
        413,
        "RequestEntityTooLarge",
        "Request entity too large: The allowed maximum operations in a JSON patch is 10000, "
        "got 10001",
    )


def test_json_patch_root_replaced_by_array() -> None:
    with pytest.raises(PatchError) as info:
        json_patch(DOC, [{"op": "replace", "path": "", "value": [1]}])
    assert info.value.code == 422
    assert str(info.value).startswith(' "" is invalid: patch: Invalid value: "[1]": ')


# ------------------------------------------------------------------------ strategic merge patch

POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "p",
        "labels": {"app": "web", "tier": "1"},
        "finalizers": ["a", "b"],
        "ownerReferences": [{"uid": "u1", "name": "rs1"}, {"uid": "u2", "name": "rs2"}],
    },
    "spec": {
        "nodeName": "n1",
        "containers": [
            {
                "name": "c1",
                "image": "i1",
                "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                "ports": [{"containerPort": 80}, {"containerPort": 443}],
                "args": ["x", "y"],
            },
            {"name": "c2", "image": "i2"},
        ],
        "tolerations": [{"key": "k1"}, {"key": "k2"}],
        "volumes": [{"name": "v1", "emptyDir": {}}],
    },
    "status": {
        "phase": "Pending",
        "conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": "False"},
        ],
        "containerStatuses": [{"name": "c1", "ready": False}],
    },
}


def smp(body: Any, kind: str = "Pod", target: dict[str, Any] | None = None) -> dict[str, Any]:
    target = POD if target is None else target
    before = copy.deepcopy((target, body))
    result = strategic_merge_patch(target, body, kind)
    assert (target, body) == before, "inputs must not be mutated"
    return result


def at(doc: Any, path: str) -> Any:
    for part in path.split("."):
        doc = doc[int(part)] if isinstance(doc, list) else doc[part]
    return doc


def names(items: list[dict[str, Any]], key: str = "name") -> list[Any]:
    return [item[key] for item in items]


@pytest.mark.parametrize(
    ("body", "path", "expected"),
    [
        ({}, "", POD),
        (None, "", POD),
        (
            {"metadata": {"labels": {"tier": "2", "new": "x"}}},
            "metadata.labels",
            {"app": "web", "tier": "2", "new": "x"},
        ),
        ({"metadata": {"labels": {"tier": None}}}, "metadata.labels", {"app": "web"}),
        (
            {"metadata": {"labels": None}},
            "metadata",
            {k: v for k, v in POD["metadata"].items() if k != "labels"},
        ),
        (
            {"metadata": {"labels": {"$patch": "replace", "only": "1"}}},
            "metadata.labels",
            {"only": "1"},
        ),
        ({"metadata": {"labels": {"$patch": "delete"}}}, "metadata.labels", {}),
        ({"spec": {"nodeName": None, "missing": None}}, "spec.nodeName", KeyError),
        ({"status": {"phase": "Running"}}, "status.phase", "Running"),
        # atomic lists are replaced
        ({"spec": {"tolerations": [{"key": "k3"}]}}, "spec.tolerations", [{"key": "k3"}]),
        (
            {"spec": {"containers": [{"name": "c1", "args": ["z"]}]}},
            "spec.containers.0.args",
            ["z"],
        ),
        (
            {"status": {"containerStatuses": [{"name": "c2"}]}},
            "status.containerStatuses",
            [{"name": "c2"}],
        ),
        # type changes replace
        ({"spec": {"tolerations": {"a": 1}}}, "spec.tolerations", {"a": 1}),
        ({"metadata": {"labels": "x"}}, "metadata.labels", "x"),
        # merge lists of primitives: new items first, then the live ones
        ({"metadata": {"finalizers": ["c"]}}, "metadata.finalizers", ["c", "a", "b"]),
        ({"metadata": {"finalizers": ["b", "c"]}}, "metadata.finalizers", ["a", "b", "c"]),
        ({"metadata": {"finalizers": ["c", "a"]}}, "metadata.finalizers", ["c", "a", "b"]),
        (
            {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a", "z"]}},
            "metadata.finalizers",
            ["b"],
        ),
        # a deletion list for an absent field becomes the field, as upstream does
        ({"metadata": {"$deleteFromPrimitiveList/x": ["a"]}}, "metadata.x", ["a"]),
        ({"metadata": {"finalizers": None}}, "metadata.finalizers", KeyError),
        # merge lists of maps, by merge key
        (
            {"spec": {"containers": [{"name": "c2", "image": "new"}]}},
            "spec.containers",
            [POD["spec"]["containers"][0], {"name": "c2", "image": "new"}],
        ),
        (
            {"spec": {"containers": [{"name": "c3", "image": "i3"}]}},
            "spec.containers",
            [{"name": "c3", "image": "i3"}, *POD["spec"]["containers"]],
        ),
        (
            {"spec": {"containers": [{"name": "c1", "$patch": "delete"}]}},
            "spec.containers",
            [POD["spec"]["containers"][1]],
        ),
        (
            {"spec": {"containers": [{"name": "zz", "$patch": "delete"}]}},
            "spec.containers",
            POD["spec"]["containers"],
        ),
        (
            {"spec": {"containers": [{"$patch": "replace"}, {"name": "solo"}]}},
            "spec.containers",
            [{"name": "solo"}],
        ),
        (
            {"spec": {"containers": [{"name": "c1", "image": None}]}},
            "spec.containers.0",
            {k: v for k, v in POD["spec"]["containers"][0].items() if k != "image"},
        ),
        (
            {
                "spec": {
                    "containers": [
                        {"name": "c1", "env": [{"name": "B", "value": "3"}, {"name": "C"}]}
                    ]
                }
            },
            "spec.containers.0.env",
            [{"name": "A", "value": "1"}, {"name": "B", "value": "3"}, {"name": "C"}],
        ),
        (
            {
                "spec": {
                    "containers": [
                        {"name": "c1", "ports": [{"containerPort": 443, "name": "https"}]}
                    ]
                }
            },
            "spec.containers.0.ports",
            [{"containerPort": 80}, {"containerPort": 443, "name": "https"}],
        ),
        (
            {"metadata": {"ownerReferences": [{"uid": "u2", "controller": True}]}},
            "metadata.ownerReferences",
            [{"uid": "u1", "name": "rs1"}, {"uid": "u2", "name": "rs2", "controller": True}],
        ),
        (
            {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
            "status.conditions",
            [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}],
        ),
        (
            {"status": {"conditions": [{"type": "Initialized", "status": "True"}]}},
            "status.conditions",
            [{"type": "Initialized", "status": "True"}, *POD["status"]["conditions"]],
        ),
        # merge keys compare with their JSON type: 443.0 is not 443
        (
            {"spec": {"containers": [{"name": "c1", "ports": [{"containerPort": 443.0}]}]}},
            "spec.containers.0.ports",
            [{"containerPort": 443.0}, {"containerPort": 80}, {"containerPort": 443}],
        ),
        # a list merged into an absent field is taken verbatim (directives stripped)
        (
            {"spec": {"initContainers": [{"name": "i", "$patch": "delete"}]}},
            "spec.initContainers",
            [{"name": "i"}],
        ),
    ],
)
def test_strategic_merge_patch(body: Any, path: str, expected: Any) -> None:
    result = smp(body)
    if expected is KeyError:
        with pytest.raises(KeyError):
            at(result, path)
    else:
        assert (at(result, path) if path else result) == expected


def test_smp_set_element_order_for_maps() -> None:
    body = {
        "status": {
            "$setElementOrder/conditions": [
                {"type": "Ready"},
                {"type": "Initialized"},
                {"type": "PodScheduled"},
            ],
            "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "Initialized", "status": "True"},
            ],
        }
    }
    assert smp(body)["status"]["conditions"] == [
        {"type": "Ready", "status": "True"},
        {"type": "Initialized", "status": "True"},
        {"type": "PodScheduled", "status": "True"},
    ]


def test_smp_set_element_order_reorders_without_patch_list() -> None:
    body = {"spec": {"$setElementOrder/containers": [{"name": "c2"}, {"name": "c1"}]}}
    assert names(smp(body)["spec"]["containers"]) == ["c2", "c1"]


def test_smp_set_element_order_for_primitives() -> None:
    body = {"metadata": {"$setElementOrder/finalizers": ["b", "c", "a"], "finalizers": ["c"]}}
    assert smp(body)["metadata"]["finalizers"] == ["b", "c", "a"]


def test_smp_set_element_order_with_server_only_items() -> None:
    target = {"metadata": {"finalizers": ["x", "a", "y", "b"]}}
    body = {"metadata": {"$setElementOrder/finalizers": ["b", "a"], "finalizers": ["b"]}}
    # mergeSortedSlice keeps server-only items ahead of patch items they precede in the live list
    assert smp(body, target=target)["metadata"]["finalizers"] == ["x", "y", "b", "a"]


def test_smp_kubelet_style_status_patch() -> None:
    """The shape CreateTwoWayMergePatch produces for a pod status update."""
    body = {
        "metadata": {"uid": "u"},
        "status": {
            "$setElementOrder/conditions": [
                {"type": "PodScheduled"},
                {"type": "Initialized"},
                {"type": "Ready"},
            ],
            "conditions": [
                {"type": "Initialized", "status": "True"},
                {"type": "Ready", "status": "True"},
            ],
            "containerStatuses": [{"name": "c1", "ready": True}],
            "phase": "Running",
        },
    }
    status = smp(body)["status"]
    assert names(status["conditions"], "type") == ["PodScheduled", "Initialized", "Ready"]
    assert status["conditions"][2] == {"type": "Ready", "status": "True"}
    assert status["containerStatuses"] == [{"name": "c1", "ready": True}]
    assert status["phase"] == "Running"


def test_smp_retain_keys() -> None:
    target = {"spec": {"volumes": [{"name": "v", "emptyDir": {}, "other": 1}], "nodeName": "n"}}
    body = {
        "spec": {
            "volumes": [{"name": "v", "$retainKeys": ["name", "hostPath"], "hostPath": {"p": 1}}]
        }
    }
    assert smp(body, target=target)["spec"] == {
        "volumes": [{"name": "v", "hostPath": {"p": 1}}],
        "nodeName": "n",
    }


def test_smp_node() -> None:
    node = {
        "metadata": {"name": "n"},
        "spec": {"podCIDRs": ["10.0.0.0/24"], "taints": [{"key": "a", "effect": "NoSchedule"}]},
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": "10.0.0.1"},
                {"type": "Hostname", "address": "n"},
            ],
            "capacity": {"cpu": "8", "nvidia.com/gpu": "8"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    body = {
        "spec": {"taints": [{"key": "b", "effect": "NoExecute"}], "podCIDRs": ["fd00::/64"]},
        "status": {
            "addresses": [{"type": "InternalIP", "address": "10.0.0.2"}],
            "capacity": {"nvidia.com/gpu": "4"},
            "conditions": [{"type": "Ready", "status": "False", "reason": "KubeletDown"}],
        },
    }
    result = smp(body, kind="Node", target=node)
    assert result["spec"] == {
        "podCIDRs": ["fd00::/64", "10.0.0.0/24"],
        "taints": [{"key": "b", "effect": "NoExecute"}],
    }
    assert result["status"] == {
        "addresses": [
            {"type": "InternalIP", "address": "10.0.0.2"},
            {"type": "Hostname", "address": "n"},
        ],
        "capacity": {"cpu": "8", "nvidia.com/gpu": "4"},
        "conditions": [{"type": "Ready", "status": "False", "reason": "KubeletDown"}],
    }


def test_smp_other_kinds_merge_maps_and_replace_lists() -> None:
    lease = {"metadata": {"name": "l", "finalizers": ["f"]}, "spec": {"holderIdentity": "a"}}
    body = {"metadata": {"finalizers": ["g"]}, "spec": {"holderIdentity": "b", "x": [1]}}
    assert smp(body, kind="Lease", target=lease) == {
        "metadata": {"name": "l", "finalizers": ["g", "f"]},
        "spec": {"holderIdentity": "b", "x": [1]},
    }
    ns = {"status": {"conditions": [{"type": "A", "status": "True"}]}}
    body = {"status": {"conditions": [{"type": "B", "status": "True"}]}}
    assert names(smp(body, kind="Namespace", target=ns)["status"]["conditions"], "type") == [
        "B",
        "A",
    ]


def test_smp_top_level_directives() -> None:
    assert smp({"$patch": "delete"}) == {}
    assert smp({"$patch": "replace", "kind": "Pod"}) == {"kind": "Pod"}


@pytest.mark.parametrize(
    ("body", "code", "reason", "message"),
    [
        (
            [1],
            400,
            "BadRequest",
            "json: cannot unmarshal array into Go value of type map[string]interface {}",
        ),
        (
            "x",
            400,
            "BadRequest",
            "json: cannot unmarshal string into Go value of type map[string]interface {}",
        ),
        (
            {"metadata": {"$deleteFromPrimitiveListfinalizers": ["a"]}},
            400,
            "BadRequest",
            "invalid patch format of primitive list",
        ),
        (
            {"metadata": {"$setElementOrderfinalizers": ["a"]}},
            400,
            "BadRequest",
            "invalid patch format of setElementOrder list",
        ),
        (
            {"spec": {"$retainKeys": "nodeName"}},
            400,
            "BadRequest",
            "invalid patch format of retainKeys",
        ),
        (
            {"spec": {"$retainKeys": ["x"], "nodeName": "n2"}},
            400,
            "BadRequest",
            "invalid patch format of retainKeys",
        ),
        (
            {"metadata": {"finalizers": [["a"]]}},
            500,
            "",
            "list element types are not identical: [[a b] [[a]]]",
        ),
        (
            {"spec": {"containers": [{"image": "x"}]}},
            500,
            "",
            "map: map[image:x] does not contain declared merge key: name",
        ),
        (
            {"spec": {"containers": [{"$patch": "delete"}]}},
            500,
            "",
            "map: map[$patch:delete] does not contain declared merge key: name",
        ),
        (
            {"spec": {"containers": [{"name": "c1", "$patch": "merge"}]}},
            500,
            "",
            "merging lists cannot yet be specified in the patch",
        ),
        (
            {"spec": {"containers": [{"name": "c1", "$patch": "bogus"}]}},
            500,
            "",
            "unknown patch type: bogus in map: map[$patch:bogus name:c1]",
        ),
        (
            {"metadata": {"labels": {"$patch": "merge"}}},
            500,
            "",
            "unknown patch type: merge in map: map[$patch:merge]",
        ),
        (
            {"metadata": {"labels": {"$patch": 1.5}}},
            500,
            "",
            "unknown patch type: %!s(float64=1.5) in map: map[$patch:1.5]",
        ),
        (
            {"metadata": {"finalizers": [{"a": 1}]}},
            500,
            "",
            "list element types are not identical: [[a b] [map[a:1]]]",
        ),
        (
            {"metadata": {"ownerReferences": ["x"]}},
            500,
            "",
            "list element types are not identical: [[map[name:rs1 uid:u1] map[name:rs2 uid:u2]] "
            "[x]]",
        ),
        (
            {
                "spec": {
                    "containers": [
                        {"name": "c1", "ports": [{"containerPort": 1e21}]},
                        {"name": "x"},
                    ]
                },
                "status": {"conditions": [{"status": True}]},
            },
            500,
            "",
            "map: map[status:true] does not contain declared merge key: type",
        ),
        (
            {"metadata": {"$setElementOrder/finalizers": {"a": 1}}},
            500,
            "",
            "expected a []interface {}, but received a map[string]interface {}",
        ),
        (
            {"metadata": {"$setElementOrder/labels": ["a"]}},
            500,
            "",
            "expected a []interface {}, but received a map[string]interface {}",
        ),
        (
            {"metadata": {"$setElementOrder/finalizers": ["a"], "finalizers": ["z"]}},
            500,
            "",
            "The order in patch list:\n[z]\n doesn't match $setElementOrder list:\n[a]\n",
        ),
    ],
)
def test_smp_errors(body: Any, code: int, reason: str, message: str) -> None:
    with pytest.raises(PatchError) as info:
        smp(body)
    assert (info.value.code, info.value.reason, str(info.value)) == (code, reason, message)


def test_smp_list_of_lists() -> None:
    target = {"metadata": {"finalizers": []}, "spec": {"tolerations": [{"key": "a"}]}}
    assert smp({"spec": {"tolerations": [[1]]}}, target=target)["spec"] == {"tolerations": [[1]]}
    with pytest.raises(PatchError) as info:
        smp({"metadata": {"finalizers": [["a"]]}}, target=target)
    err = info.value
    assert (err.code, err.reason, str(err), err.details) == (422, "Invalid", GENERIC_422, {})
    assert err.cause == "lists of lists are not supported"


def test_smp_unsupported_kind() -> None:
    assert supports_strategic_merge("Pod")
    assert supports_strategic_merge("Lease")
    assert not supports_strategic_merge("GPUClass")
    with pytest.raises(PatchError) as info:
        strategic_merge_patch({}, {}, "GPUClass")
    assert info.value.to_status() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "the body of the request was in an unknown format - accepted media types "
        "include: application/json-patch+json, application/merge-patch+json, "
        "application/apply-patch+yaml",
        "reason": "UnsupportedMediaType",
        "code": 415,
    }


def test_strategy_table_entries() -> None:
    assert PATCH_STRATEGIES["Pod", "spec.containers"] == ("merge", "name")
    assert PATCH_STRATEGIES["Pod", "spec.volumes"] == ("merge,retainKeys", "name")
    assert PATCH_STRATEGIES["Pod", "spec.initContainers.volumeMounts"] == ("merge", "mountPath")
    assert PATCH_STRATEGIES["Node", "status.addresses"] == ("merge", "type")
    assert PATCH_STRATEGIES["Event", "metadata.ownerReferences"] == ("merge", "uid")
    assert ("Pod", "spec.tolerations") not in PATCH_STRATEGIES
    assert ("Node", "spec.taints") not in PATCH_STRATEGIES


# ---------------------------------------------------------------------------------- properties

scalars = st.one_of(
    st.booleans(),
    st.integers(min_value=-1000, max_value=1000),
    st.text(max_size=5),
)
keys = st.sampled_from(["a", "b", "c", "d"])
values_without_null = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(keys, inner, max_size=3)),
    max_leaves=10,
)
objects_without_null = st.dictionaries(keys, values_without_null, max_size=4)
maps_only = st.recursive(
    st.one_of(st.booleans(), st.integers(-5, 5), st.text(max_size=3)),
    lambda inner: st.dictionaries(keys, inner, max_size=3),
    max_leaves=10,
)


def merge_diff(src: dict[str, Any], dst: dict[str, Any]) -> dict[str, Any]:
    """A merge patch turning ``src`` into ``dst`` (what CreateMergePatch computes)."""
    out: dict[str, Any] = {}
    for key in src.keys() - dst.keys():
        out[key] = None
    for key, value in dst.items():
        old = src.get(key, ...)
        if isinstance(old, dict) and isinstance(value, dict):
            sub = merge_diff(old, value)
            if sub:
                out[key] = sub
        elif old != value or type(old) is not type(value):
            out[key] = value
    return out


@settings(max_examples=200, deadline=None)
@given(src=objects_without_null, dst=objects_without_null)
def test_merge_patch_of_a_diff_round_trips(src: dict[str, Any], dst: dict[str, Any]) -> None:
    assert json_merge_patch(src, merge_diff(src, dst)) == dst


@settings(max_examples=200, deadline=None)
@given(src=objects_without_null, body=objects_without_null)
def test_merge_patch_is_idempotent(src: dict[str, Any], body: dict[str, Any]) -> None:
    once = json_merge_patch(src, body)
    assert json_merge_patch(once, body) == once


@settings(max_examples=200, deadline=None)
@given(src=st.dictionaries(keys, maps_only, max_size=4), body=st.dictionaries(keys, maps_only))
def test_smp_equals_merge_patch_without_lists(src: dict[str, Any], body: dict[str, Any]) -> None:
    doc = {"data": src}
    assert strategic_merge_patch(doc, {"data": body}, "ConfigMap") == json_merge_patch(
        doc, {"data": body}
    )


@settings(max_examples=200, deadline=None)
@given(
    live=st.lists(st.sampled_from("abcdefg"), unique=True, max_size=6),
    added=st.lists(st.sampled_from("abcdefgh"), unique=True, max_size=4),
    deleted=st.lists(st.sampled_from("abcdefgh"), unique=True, max_size=3),
)
def test_smp_primitive_merge_list_is_a_set_union(
    live: list[str], added: list[str], deleted: list[str]
) -> None:
    doc = {"metadata": {"finalizers": live}}
    merged = strategic_merge_patch(doc, {"metadata": {"finalizers": added}}, "Pod")
    assert sorted(merged["metadata"]["finalizers"]) == sorted(set(live) | set(added))
    if live:
        body = {"metadata": {"$deleteFromPrimitiveList/finalizers": deleted}}
        kept = strategic_merge_patch(doc, body, "Pod")["metadata"]["finalizers"]
        assert kept == [f for f in live if f not in deleted]


@settings(max_examples=200, deadline=None)
@given(doc=objects_without_null, key=keys, value=values_without_null)
def test_json_patch_add_then_test(doc: dict[str, Any], key: str, value: Any) -> None:
    ops = [
        {"op": "add", "path": f"/{key}", "value": value},
        {"op": "test", "path": f"/{key}", "value": value},
        {"op": "copy", "from": f"/{key}", "path": "/copied"},
        {"op": "remove", "path": f"/{key}"},
        {"op": "move", "from": "/copied", "path": f"/{key}"},
    ]
    assert json_patch(doc, ops) == {**doc, key: value}
