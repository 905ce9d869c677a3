"""JSON patch, JSON merge patch and strategic merge patch, as kube-apiserver applies them.

Pure functions over JSON values; inputs are never mutated (each entry point deep-copies the
target and the patch once, then works in place, so the code stays a line-by-line port of the
Go originals, which mutate their arguments). Ported, quirks included, from evanphx/json-patch
v4 (``json_merge_patch``, ``json_patch``), apimachinery's ``strategicpatch/patch.go``
(``strategic_merge_patch``, with the server's options) and apiserver's
``handlers/patch.go`` (which HTTP status each failure becomes). Each entry point's docstring
lists the quirks it keeps; ``PatchError`` lists the Status of every failure.

What needs the full Go type schema is the caller's: dropping unknown fields and turning
``null`` into zero values when the result is decoded into the typed object (a strategic patch
adding ``{"labels": {"a": null}}`` yields label ``a: ""`` on a real server), and the "unable to
find api field" error. Directive keys a Go patch would leave inside a newly inserted value are
removed from the result, since the typed decode drops them.

Cost: linear in the target and the patch, except strategic merge lists, where each patch item
is found by a scan of the list (quadratic in its length, as upstream).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Final

from gpusched.sim import field
from gpusched.sim.apimachinery import GO_MAP_TYPE as _MAP_TYPE
from gpusched.sim.apimachinery import GO_SLICE_TYPE as _SLICE_TYPE
from gpusched.sim.apimachinery import go_quote, go_sprint
from gpusched.sim.apimachinery import go_type as _go_type
from gpusched.sim.errors import invalid_status

__all__ = [
    "PATCH_STRATEGIES",
    "STRATEGIC_MERGE_KINDS",
    "PatchError",
    "json_merge_patch",
    "json_patch",
    "strategic_merge_patch",
    "supports_strategic_merge",
]

MAX_JSON_PATCH_OPERATIONS: Final = 10000
GENERIC_422_MESSAGE: Final = "the server rejected our request due to an error in our request"
SMP_UNSUPPORTED_MESSAGE: Final = (
    "the body of the request was in an unknown format - accepted media types include: "
    "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
)


class PatchError(ValueError):
    """A patch the real server rejects, with the Status it answers (``to_status()``):

    ==================================================  ====  =====================  ==========
    Failure                                             code  reason                 message
    ==================================================  ====  =====================  ==========
    JSON patch body not a list of objects               400   BadRequest             Go json
    JSON patch with more than 10000 operations          413   RequestEntityTooLarge  "Request"
    JSON patch operation fails (test, path, index, op)  422   Invalid                generic (1)
    JSON merge patch body ``null`` or a scalar          400   BadRequest             "Invalid
                                                                                     JSON Patch"
    Patched document is an array, not an object         422   Invalid                decode (2)
    Strategic merge patch for a custom resource kind    415   UnsupportedMediaType   media types
    Strategic merge patch body not an object            400   BadRequest             Go json
    Malformed ``$deleteFromPrimitiveList``,             400   BadRequest             mergepatch
    ``$retainKeys`` or ``$setElementOrder``                                          error text
    Strategic merge of a list of lists                  422   Invalid                generic (1)
    Other strategic merge failures (missing merge key,  500   "" (Unknown)           Go error
    unknown ``$patch``, mixed element types...)
    ==================================================  ====  =====================  ==========

    (1) ``NewGenericServerResponse(422, ...)``: always "the server rejected our request due to
    an error in our request" with ``details`` ``{}``; the library's text stays in ``cause``.
    (2) ``errors.NewInvalid`` around the JSON decoder's complaint, with a ``patch`` cause.
    """

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        cause: str = "",
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.cause = cause or message
        self.details = details

    def to_status(self) -> dict[str, Any]:
        """The ``metav1.Status`` body, fields in Go's order, empty ones omitted like Go does."""
        status: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
        }
        if self.message:
            status["message"] = self.message
        if self.reason:
            status["reason"] = self.reason
        if self.details is not None:
            status["details"] = self.details
        status["code"] = self.code
        return status


def _bad_request(message: str) -> PatchError:
    return PatchError(400, "BadRequest", message)


def _unprocessable(cause: str) -> PatchError:
    return PatchError(422, "Invalid", GENERIC_422_MESSAGE, cause=cause, details={})


def _internal(message: str) -> PatchError:
    """A plain Go error reaching the handler: 500 with ``StatusReasonUnknown`` (empty)."""
    return PatchError(500, "", message)


# --------------------------------------------------------------------------------------------
# Go value helpers: deep copy, types, equality and fmt formatting of decoded JSON
# --------------------------------------------------------------------------------------------


def _copy(value: Any) -> Any:
    """Deep copy of a JSON value (much faster than ``copy.deepcopy``)."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _json_kind(value: Any) -> str:
    """The JSON kind ``encoding/json`` names in an ``UnmarshalTypeError``."""
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "bool"
    return "number"


def _go_eq(a: Any, b: Any) -> bool:
    """Go ``==`` on two ``interface{}`` values: same dynamic type and equal."""
    return type(a) is type(b) and a == b


def _raw_json(value: Any) -> str:
    """An approximation of the patched document's bytes that the Go server echoes back (compact,
    sorted keys, ``<``, ``>``, ``&`` escaped). Go keeps the request's raw number text (``1.0`` stays
    ``1.0``), which Python's float ``repr`` approximates better than ``apimachinery.go_json``'s
    re-marshalled ``1``; hence this is not ``go_json``."""
    text = json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    for raw, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        text = text.replace(raw, escaped)
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


_FIND_KIND_TYPE: Final = (
    'struct { APIVersion string "json:\\"apiVersion,omitempty\\""; '
    'Kind string "json:\\"kind,omitempty\\"" }'
)


def _not_an_object(result: Any) -> PatchError:
    """What the server answers when a patched document cannot be decoded into an object."""
    detail = (
        "couldn't get version/kind; json parse error: json: cannot unmarshal "
        f"{_json_kind(result)} into Go value of type {_FIND_KIND_TYPE}"
    )
    status = invalid_status("", "", "", [field.invalid("patch", _raw_json(result), detail)])
    return PatchError(422, "Invalid", status["message"], details=status["details"])


# --------------------------------------------------------------------------------------------
# JSON merge patch (evanphx/json-patch.v4 merge.go)
# --------------------------------------------------------------------------------------------


def _prune_nulls(value: Any) -> Any:
    """``pruneNulls``: drop null members of objects, recursively; arrays keep null elements."""
    if isinstance(value, dict):
        for k in [k for k, v in value.items() if v is None]:
            del value[k]
        for v in value.values():
            _prune_nulls(v)
    elif isinstance(value, list):
        for v in value:
            if v is not None:
                _prune_nulls(v)
    return value


def _merge_docs(doc: dict[str, Any], patch: Mapping[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:
            doc.pop(key, None)
            continue
        current = doc.get(key)
        if not isinstance(current, dict):  # absent, null or not an object: take the patch value
            doc[key] = _prune_nulls(_copy(value))
        elif not isinstance(value, dict):
            doc[key] = _copy(value)
        else:
            _merge_docs(current, value)


def json_merge_patch(target: Mapping[str, Any], patch: Any) -> dict[str, Any]:
    """Apply an ``application/merge-patch+json`` body to ``target`` (RFC 7386, evanphx flavour).

    evanphx/json-patch v4.12 ``MergePatch``'s deviations from the RFC are kept: a ``null``
    inside a newly added subtree is pruned from objects but kept as an array element; a patch
    value that is not an object replaces the target value as is (its nested nulls are not
    pruned when the target value is an object).

    Raises ``PatchError`` 400 for a ``null`` or scalar body and 422 for an array body (whose
    result is an array, which the server cannot decode into an object).
    """
    if isinstance(patch, dict):
        doc: dict[str, Any] = _copy(dict(target))
        _merge_docs(doc, patch)
        return doc
    if isinstance(patch, list):
        raise _not_an_object(_prune_nulls(_copy(patch)))
    raise _bad_request("Invalid JSON Patch")


# --------------------------------------------------------------------------------------------
# JSON patch (evanphx/json-patch.v4 patch.go)
# --------------------------------------------------------------------------------------------


class _OpError(Exception):
    """An operation failure; the text is evanphx's (wrapped errors joined with ``: ``)."""


_MISSING: Final = object()
_INT64_MIN: Final = -(1 << 63)
_INT64_MAX: Final = (1 << 63) - 1


def _atoi(key: str) -> int:
    """``strconv.Atoi`` on a 64-bit platform."""
    body = key[1:] if key[:1] in ("+", "-") else key
    if not body or not body.isascii() or not body.isdigit():
        raise _OpError(f"strconv.Atoi: parsing {go_quote(key)}: invalid syntax")
    n = int(key)
    if n < _INT64_MIN or n > _INT64_MAX:
        raise _OpError(f"strconv.Atoi: parsing {go_quote(key)}: value out of range")
    return n


def _invalid_index(idx: int) -> _OpError:
    return _OpError(f"Unable to access invalid index: {idx}: invalid index referenced")


def _container_get(con: dict[str, Any] | list[Any], key: str) -> Any:
    if isinstance(con, dict):
        return con.get(key)
    idx = _atoi(key)
    if idx < 0:
        if idx < -len(con):
            raise _invalid_index(idx)
        idx += len(con)
    if idx >= len(con):
        raise _invalid_index(idx)
    return con[idx]


def _container_set(con: dict[str, Any] | list[Any], key: str, value: Any) -> None:
    if isinstance(con, dict):
        con[key] = value
        return
    idx = _atoi(key)
    if idx < 0:
        if idx < -len(con):
            raise _invalid_index(idx)
        idx += len(con)
    con[idx] = value


def _container_add(con: dict[str, Any] | list[Any], key: str, value: Any) -> None:
    if isinstance(con, dict):
        con[key] = value
        return
    if key == "-":
        con.append(value)
        return
    try:
        idx = _atoi(key)
    except _OpError as err:
        raise _OpError(f"value was not a proper array index: '{key}': {err}") from None
    size = len(con) + 1
    if idx >= size:
        raise _invalid_index(idx)
    if idx < 0:
        if idx < -size:
            raise _invalid_index(idx)
        idx += size
    con.insert(idx, value)


def _container_remove(con: dict[str, Any] | list[Any], key: str) -> None:
    if isinstance(con, dict):
        if key not in con:
            raise _OpError(f"Unable to remove nonexistent key: {key}: missing value")
        del con[key]
        return
    idx = _atoi(key)
    if idx >= len(con):
        raise _invalid_index(idx)
    if idx < 0:
        if idx < -len(con):
            raise _invalid_index(idx)
        idx += len(con)
    del con[idx]


def _decode_pointer_token(token: str) -> str:
    """RFC 6901 unescaping in one left-to-right pass (``strings.NewReplacer``)."""
    if "~" not in token:
        return token
    out: list[str] = []
    i = 0
    while i < len(token):
        pair = token[i : i + 2]
        if pair == "~1":
            out.append("/")
            i += 2
        elif pair == "~0":
            out.append("~")
            i += 2
        else:
            out.append(token[i])
            i += 1
    return "".join(out)


def _find_object(root: Any, path: str) -> tuple[dict[str, Any] | list[Any] | None, str]:
    """``findObject``: the container holding the last token of ``path``, and that token."""
    split = path.split("/")
    if len(split) < 2:
        return None, ""
    doc = root
    for part in split[1:-1]:
        try:
            nxt = _container_get(doc, _decode_pointer_token(part))
        except _OpError:
            return None, ""
        if not isinstance(nxt, dict | list):
            return None, ""
        doc = nxt
    return doc, _decode_pointer_token(split[-1])


def _decode(op: Mapping[str, Any], name: str, key: str, detail: str = "") -> str:
    """``Operation.Path``/``From`` as a string; a missing or non-string one fails as
    evanphx/json-patch words it: ``<name> operation failed to decode <key>: <detail>``, the
    detail being the decoding error unless given."""
    value = op.get(key)
    if value is None:
        missing = (
            "operation missing path field" if key == "path" else "operation, missing from field"
        )
        err = f"{missing}: missing value"
    elif not isinstance(value, str):
        err = f"json: cannot unmarshal {_json_kind(value)} into Go value of type string"
    else:
        return value
    raise _OpError(f"{name} operation failed to decode {key}: {detail or err}")


def _json_equal(doc_value: Any, op_value: Any) -> bool:
    """``lazyNode.equal``: structural equality where scalars also compare their JSON type."""
    if isinstance(doc_value, dict):
        if not isinstance(op_value, dict) or len(doc_value) != len(op_value):
            return False
        for key, value in doc_value.items():
            if key not in op_value:
                return False
            other = op_value[key]
            if (value is None) != (other is None):
                return False
            if value is not None and not _json_equal(value, other):
                return False
        return True
    if isinstance(doc_value, list):
        if not isinstance(op_value, list) or len(doc_value) != len(op_value):
            return False
        return all(
            (a is None and b is None) or (a is not None and _json_equal(a, b))
            for a, b in zip(doc_value, op_value, strict=True)
        )
    return _go_eq(doc_value, op_value)


class _JSONPatcher:
    """One ``Patch.Apply`` run; ``root`` is a one-element list because ``replace ""`` swaps it."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.root: list[Any] = [doc]

    def find(self, path: str) -> tuple[dict[str, Any] | list[Any] | None, str]:
        return _find_object(self.root[0], path)

    def add(self, op: Mapping[str, Any]) -> None:
        path = _decode(op, "add", "path", "missing value")
        con, key = self.find(path)
        if con is None:
            raise _OpError(
                f'add operation does not apply: doc is missing path: "{path}": missing value'
            )
        try:
            _container_add(con, key, _copy(op.get("value")))
        except _OpError as err:
            raise _OpError(f"error in add for path: '{path}': {err}") from None

    def remove(self, op: Mapping[str, Any]) -> None:
        path = _decode(op, "remove", "path", "missing value")
        con, key = self.find(path)
        if con is None:
            raise _OpError(
                f'remove operation does not apply: doc is missing path: "{path}": missing value'
            )
        try:
            _container_remove(con, key)
        except _OpError as err:
            raise _OpError(f"error in remove for path: '{path}': {err}") from None

    def replace(self, op: Mapping[str, Any]) -> None:
        path = _decode(op, "replace", "path")
        value = op.get("value")
        if path == "":
            if not isinstance(value, dict | list):
                # Go wraps a nil error here, hence the odd verb.
                raise _OpError("replace operation value must be object or array: %!w(<nil>)")
            self.root[0] = _copy(value)
            return
        con, key = self.find(path)
        if con is None:
            raise _OpError(
                f"replace operation does not apply: doc is missing path: {path}: missing value"
            )
        try:
            _container_get(con, key)
        except _OpError:
            raise _OpError(
                f"replace operation does not apply: doc is missing key: {path}: missing value"
            ) from None
        try:
            _container_set(con, key, _copy(value))
        except _OpError as err:  # pragma: no cover - get() above already checked the index
            raise _OpError(f"error in remove for path: '{path}': {err}") from None

    def move(self, op: Mapping[str, Any]) -> None:
        from_path = _decode(op, "move", "from")
        con, key = self.find(from_path)
        if con is None:
            raise _OpError(
                f"move operation does not apply: doc is missing from path: {from_path}: "
                "missing value"
            )
        try:
            value = _container_get(con, key)
            _container_remove(con, key)
        except _OpError as err:
            raise _OpError(f"error in move for path: '{key}': {err}") from None
        path = _decode(op, "move", "path")
        con, key = self.find(path)
        if con is None:
            raise _OpError(
                f"move operation does not apply: doc is missing destination path: {path}: "
                "missing value"
            )
        try:
            _container_add(con, key, value)
        except _OpError as err:
            raise _OpError(f"error in move for path: '{path}': {err}") from None

    def test(self, op: Mapping[str, Any]) -> None:
        path = _decode(op, "test", "path")
        expected = op.get("value", _MISSING)
        failed = _OpError(f"testing value {path} failed: test failed")
        if path == "":
            if expected is _MISSING or not _json_equal(self.root[0], expected):
                raise failed
            return
        con, key = self.find(path)
        if con is None:
            raise _OpError(f"test operation does not apply: is missing path: {path}: missing value")
        try:
            actual = _container_get(con, key)
        except _OpError as err:
            raise _OpError(f"error in test for path: '{path}': {err}") from None
        if actual is None:
            if expected is _MISSING or expected is None:
                return
            raise failed
        if expected is _MISSING or not _json_equal(actual, expected):
            raise failed

    def copy(self, op: Mapping[str, Any]) -> None:
        from_path = _decode(op, "copy", "from")
        con, key = self.find(from_path)
        if con is None:
            raise _OpError(
                f"copy operation does not apply: doc is missing from path: {from_path}: "
                "missing value"
            )
        try:
            value = _container_get(con, key)
        except _OpError as err:
            raise _OpError(f"error in copy for from: '{from_path}': {err}") from None
        path = _decode(op, "copy", "path", "missing value")
        con, key = self.find(path)
        if con is None:
            raise _OpError(
                f"copy operation does not apply: doc is missing destination path: {path}: "
                "missing value"
            )
        try:
            _container_add(con, key, _copy(value))
        except _OpError as err:
            raise _OpError(f"error while adding value during copy: {err}") from None


_OPERATIONS: Final[dict[str, Callable[[_JSONPatcher, Mapping[str, Any]], None]]] = {
    "add": _JSONPatcher.add,
    "remove": _JSONPatcher.remove,
    "replace": _JSONPatcher.replace,
    "move": _JSONPatcher.move,
    "test": _JSONPatcher.test,
    "copy": _JSONPatcher.copy,
}


def json_patch(target: Mapping[str, Any], operations: Any) -> dict[str, Any]:
    """Apply an ``application/json-patch+json`` body (RFC 6902, evanphx flavour) to ``target``.

    evanphx/json-patch v4 ``Patch.Apply``'s quirks are kept: negative array indices count from
    the end, ``replace`` of a missing *object* key adds it, ``copy`` from a missing object key
    copies ``null``, a path without a leading ``/`` drops its first segment, ``~0``/``~1`` are
    decoded and other ``~`` sequences left alone, ``test`` compares scalars with their JSON
    type (``1`` is not ``1.0``).

    ``operations`` is the decoded body: a list of operation objects (``None``, JSON ``null``,
    is an empty patch, as in Go). Raises ``PatchError``: 400 when the body is not a list of
    objects, 413 above 10000 operations, 422 when an operation fails.
    """
    if operations is None:
        operations = []
    if not isinstance(operations, list):
        raise _bad_request(
            f"json: cannot unmarshal {_json_kind(operations)} into Go value of type jsonpatch.Patch"
        )
    for op in operations:
        if op is not None and not isinstance(op, dict):
            raise _bad_request(
                f"json: cannot unmarshal {_json_kind(op)} into Go value of type jsonpatch.Operation"
            )
    if len(operations) > MAX_JSON_PATCH_OPERATIONS:
        message = (
            f"The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, "
            f"got {len(operations)}"
        )
        raise PatchError(413, "RequestEntityTooLarge", f"Request entity too large: {message}")
    patcher = _JSONPatcher(_copy(dict(target)))
    for op in operations:
        kind = (op or {}).get("op")
        if not isinstance(kind, str):
            kind = "unknown"
        apply = _OPERATIONS.get(kind)
        try:
            if apply is None:
                raise _OpError(f"Unexpected kind: {kind}")
            apply(patcher, op or {})
        except _OpError as err:
            raise _unprocessable(str(err)) from None
    result = patcher.root[0]
    if not isinstance(result, dict):
        raise _not_an_object(result)
    return result


# --------------------------------------------------------------------------------------------
# Strategic merge patch (k8s.io/apimachinery/pkg/util/strategicpatch/patch.go)
# --------------------------------------------------------------------------------------------

_DIRECTIVE: Final = "$patch"
_RETAIN_KEYS: Final = "$retainKeys"
_DELETE_PREFIX: Final = "$deleteFromPrimitiveList"
_ORDER_PREFIX: Final = "$setElementOrder"

_ERR_PRIMITIVE_LIST: Final = "invalid patch format of primitive list"
_ERR_RETAIN_KEYS: Final = "invalid patch format of retainKeys"
_ERR_SET_ORDER: Final = "invalid patch format of setElementOrder list"
_ERR_LIST_OF_LISTS: Final = "lists of lists are not supported"


def _build_strategies() -> dict[tuple[str, str], tuple[str, str]]:
    """The ``patchStrategy``/``patchMergeKey`` struct tags of the kinds served, by field path.

    A path names struct fields from the object root; list elements add no segment
    (``spec.containers.env`` is the env list of any container).
    """
    object_meta = {
        "metadata.finalizers": ("merge", ""),
        "metadata.ownerReferences": ("merge", "uid"),
    }
    container = {
        "ports": ("merge", "containerPort"),
        "env": ("merge", "name"),
        "volumeMounts": ("merge", "mountPath"),
        "volumeDevices": ("merge", "devicePath"),
    }
    pod = {
        "spec.volumes": ("merge,retainKeys", "name"),
        "spec.initContainers": ("merge", "name"),
        "spec.containers": ("merge", "name"),
        "spec.ephemeralContainers": ("merge", "name"),
        "spec.imagePullSecrets": ("merge", "name"),
        "spec.hostAliases": ("merge", "ip"),
        "spec.topologySpreadConstraints": ("merge", "topologyKey"),
        "spec.resourceClaims": ("merge,retainKeys", "name"),
        "spec.schedulingGates": ("merge", "name"),
        "status.conditions": ("merge", "type"),
        "status.podIPs": ("merge", "ip"),
        "status.hostIPs": ("merge", "ip"),
        "status.resourceClaimStatuses": ("merge,retainKeys", "name"),
    }
    for containers in ("spec.initContainers", "spec.containers", "spec.ephemeralContainers"):
        for name, tag in container.items():
            pod[f"{containers}.{name}"] = tag
    per_kind: dict[str, dict[str, tuple[str, str]]] = {
        "Pod": pod,
        "Node": {
            "spec.podCIDRs": ("merge", ""),
            "status.conditions": ("merge", "type"),
            "status.addresses": ("merge", "type"),
        },
        "Namespace": {"status.conditions": ("merge", "type")},
        "Event": {},
        "Lease": {},
        "Binding": {},
        "ConfigMap": {},
        "Secret": {},
        "CustomResourceDefinition": {},
        "PriorityClass": {},
        "PodDisruptionBudget": {"status.conditions": ("merge", "type")},
        # batch/v1: the pod template's tags under spec.template (gpusched.sim.job_controller).
        "Job": {
            **{f"spec.template.{k}": v for k, v in {**object_meta, **pod}.items()},
            "status.conditions": ("merge", "type"),
        },
        # scheduling.k8s.io/v1alpha2 (custom resources of the same kind never get here).
        "Workload": {},
        "PodGroup": {"status.conditions": ("merge", "type")},
        # admissionregistration/v1: webhooks merge by name.
        "MutatingWebhookConfiguration": {"webhooks": ("merge", "name")},
        "ValidatingWebhookConfiguration": {"webhooks": ("merge", "name")},
    }
    table: dict[tuple[str, str], tuple[str, str]] = {}
    for kind, fields in per_kind.items():
        for path, tag in {**object_meta, **fields}.items():
            table[kind, path] = tag
    return table


#: ``(kind, field path) -> (patchStrategy tag, patchMergeKey tag)``.
PATCH_STRATEGIES: Final[Mapping[tuple[str, str], tuple[str, str]]] = _build_strategies()
#: Kinds with Go types on the real server, hence strategic merge patch support.
STRATEGIC_MERGE_KINDS: Final = frozenset(kind for kind, _ in PATCH_STRATEGIES)


def supports_strategic_merge(kind: str) -> bool:
    """False for custom resources: the server answers 415 to a strategic merge patch."""
    return kind in STRATEGIC_MERGE_KINDS


def _extract_key(key: str, prefix: str) -> str:
    parts = key.split("/", 1)
    if len(parts) <= 1 or parts[0] != prefix:
        raise _bad_request(_ERR_PRIMITIVE_LIST if prefix == _DELETE_PREFIX else _ERR_SET_ORDER)
    return parts[1]


def _bad_arg_type(expected: str, actual: Any) -> PatchError:
    """``mergepatch.ErrBadArgType``."""
    got = "%!s(<nil>)" if actual is None else _go_type(actual)
    return _internal(f"expected a {expected}, but received a {got}")


def _no_merge_key(item: Any, merge_key: str) -> PatchError:
    """``mergepatch.ErrNoMergeKey``."""
    return _internal(f"map: {go_sprint(item)} does not contain declared merge key: {merge_key}")


def _bad_patch_type(directive: Any, item: Any) -> PatchError:
    """``mergepatch.ErrBadPatchType``."""
    return _internal(f"unknown patch type: {go_sprint(directive, 's')} in map: {go_sprint(item)}")


def _go_sort_stable(items: list[Any], less: Callable[[Any, Any], bool]) -> list[Any]:
    """``sort.SliceStable``'s insertion sort, exact for Go's comparators even when inconsistent
    (upstream's ``less`` returns true for items missing from the order list). Go switches to
    block merging above 20 items; that only changes the result for inconsistent comparators."""
    out = list(items)
    for i in range(1, len(out)):
        j = i
        while j > 0 and less(out[j], out[j - 1]):
            out[j], out[j - 1] = out[j - 1], out[j]
            j -= 1
    return out


class _StrategicMerger:
    """``mergeMap`` and friends for one kind; ``path`` arguments index ``PATCH_STRATEGIES``."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def lookup(self, path: str) -> tuple[str, str]:
        """``LookupPatchMetadata`` + ``extractRetainKeysPatchStrategy``: (strategy, merge key)."""
        tag, merge_key = PATCH_STRATEGIES.get((self.kind, path), ("", ""))
        strategies = [s for s in tag.split(",") if s != "retainKeys"]
        return (strategies[0] if strategies else ""), merge_key

    # ---- maps

    def merge_map(
        self, original: dict[str, Any] | None, patch: dict[str, Any], path: str
    ) -> dict[str, Any]:
        if _DIRECTIVE in patch:
            directive = patch[_DIRECTIVE]
            if directive == "replace":
                del patch[_DIRECTIVE]
                return patch
            if directive == "delete":
                return {}
            raise _bad_patch_type(directive, patch)
        if original is None:
            original = {}
        self.apply_retain_keys(original, patch)
        self.merge_patch_into_original(original, patch, path)
        for key, patch_value in patch.items():
            is_delete_list = False
            if key.startswith(_DELETE_PREFIX):
                is_delete_list = True
                key = _extract_key(key, _DELETE_PREFIX) or key
            if patch_value is None:
                original.pop(key, None)
                continue
            if key not in original:
                original[key] = patch_value
                continue
            current = original[key]
            if _go_type(current) != _go_type(patch_value):
                original[key] = patch_value
                continue
            child = f"{path}.{key}" if path else key
            strategy, merge_key = self.lookup(child)
            if isinstance(current, dict):
                if strategy != "replace":
                    patch_value = self.merge_map(current, patch_value, child)
                original[key] = patch_value
            elif isinstance(current, list):
                if strategy == "merge":
                    patch_value = self.merge_slice(
                        current, patch_value, child, merge_key, is_delete_list
                    )
                original[key] = patch_value
            else:
                original[key] = patch_value
        return original

    def apply_retain_keys(self, original: dict[str, Any], patch: dict[str, Any]) -> None:
        if _RETAIN_KEYS not in patch:
            return
        retain = patch.pop(_RETAIN_KEYS)
        if not isinstance(retain, list):
            raise _bad_request(_ERR_RETAIN_KEYS)

        def retained(key: str) -> bool:
            return any(_go_eq(key, r) for r in retain)

        for key, value in patch.items():
            if value is None or key.startswith((_DELETE_PREFIX, _ORDER_PREFIX)):
                continue
            if not retained(key):
                raise _bad_request(_ERR_RETAIN_KEYS)
        for key in [k for k in original if not retained(k)]:
            del original[key]

    def merge_patch_into_original(
        self, original: dict[str, Any], patch: dict[str, Any], path: str
    ) -> None:
        """``mergePatchIntoOriginal``: merge each ``$setElementOrder/<field>`` with its list."""
        for directive_key in [k for k in patch if k.startswith(_ORDER_PREFIX)]:
            order = patch.pop(directive_key)
            if not isinstance(order, list):
                raise _bad_arg_type(_SLICE_TYPE, order)
            key = _extract_key(directive_key, _ORDER_PREFIX)
            found_original, found_patch = key in original, key in patch
            original_list: list[Any] = []
            patch_list: list[Any] = []
            if found_original:
                if not isinstance(original[key], list):
                    raise _bad_arg_type(_SLICE_TYPE, original[key])
                original_list = original[key]
            if found_patch:
                if not isinstance(patch[key], list):
                    raise _bad_arg_type(_SLICE_TYPE, patch[key])
                patch_list = patch[key]
            child = f"{path}.{key}" if path else key
            strategy, merge_key = self.lookup(child)
            self.validate_patch_with_set_order_list(patch_list, order, merge_key)
            if found_original and not found_patch:
                merged = original_list
            elif found_patch and not found_original:
                merged = patch_list
            elif found_original and found_patch:
                if strategy == "merge":
                    merged = self.merge_slice(original_list, patch_list, child, merge_key, False)
                else:
                    merged = patch_list
            else:
                continue
            if merge_key:
                patch_items, server_only = self.partition_maps(merged, order, merge_key)
            else:
                patch_items, server_only = _partition_primitives(merged, order)
            kind = self.slice_element_type(original_list, patch_list)
            original[key] = self.normalize_element_order(
                patch_items, server_only, order, original_list, merge_key, kind
            )
            patch.pop(key, None)

    def validate_patch_with_set_order_list(
        self, patch_list: list[Any], order: list[Any], merge_key: str
    ) -> None:
        if not order or not patch_list:
            return
        if merge_key:
            non_delete, _ = self.extract_to_delete_items(patch_list)
        else:
            non_delete = patch_list
        p = o = 0
        while p < len(non_delete) and o < len(order):
            item = non_delete[p]
            if isinstance(item, dict) and _DIRECTIVE in item:
                p += 1
                continue
            if self.merge_key_value_equal(item, order[o], merge_key):
                p += 1
            o += 1
        if p < len(non_delete) and o >= len(order):
            raise _internal(
                f"The order in patch list:\n{go_sprint(patch_list)}\n doesn't match "
                f"{_ORDER_PREFIX} list:\n{go_sprint(order)}\n"
            )

    @staticmethod
    def merge_key_value_equal(left: Any, right: Any, merge_key: str) -> bool:
        if not merge_key:
            return _go_eq(left, right)
        for item in (left, right):
            if not isinstance(item, dict):
                raise _bad_arg_type(_MAP_TYPE, item)
            if merge_key not in item:
                raise _no_merge_key(item, merge_key)
        return _go_eq(left[merge_key], right[merge_key])

    # ---- lists

    @staticmethod
    def slice_element_type(*slices: list[Any]) -> str:
        """``sliceElementType``: the Go type all elements share."""
        element_type: str | None = None
        for items in slices:
            for value in items:
                current = _go_type(value)
                if element_type is None:
                    element_type = current
                    if current == _SLICE_TYPE:
                        raise PatchError(
                            422,
                            "Invalid",
                            GENERIC_422_MESSAGE,
                            cause=_ERR_LIST_OF_LISTS,
                            details={},
                        )
                elif current != element_type:
                    raise _internal(
                        f"list element types are not identical: {go_sprint(list(slices))}"
                    )
        if element_type is None:
            raise _internal("no elements in any of the given slices")
        return element_type

    def merge_slice(
        self,
        original: list[Any],
        patch: list[Any],
        path: str,
        merge_key: str,
        is_delete_list: bool,
    ) -> list[Any]:
        if not original and not patch:
            return original
        kind = self.slice_element_type(original, patch)
        if kind != _MAP_TYPE:
            if is_delete_list:
                return [v for v in original if not any(_go_eq(v, d) for d in patch)]
            merged = _deduplicate_scalars(original + patch)
        else:
            if not merge_key:
                # The element type of every merge list without a merge key is string.
                raise _internal("cannot merge lists without merge key for type string")
            original, patch = self.merge_slice_with_special_elements(original, patch, merge_key)
            merged = self.merge_slice_without_special_elements(original, patch, merge_key, path)
        if merge_key:
            patch_items, server_only = self.partition_maps(merged, patch, merge_key)
        else:
            patch_items, server_only = _partition_primitives(merged, patch)
        return self.normalize_element_order(
            patch_items, server_only, patch, original, merge_key, kind
        )

    def merge_slice_with_special_elements(
        self, original: list[Any], patch: list[Any], merge_key: str
    ) -> tuple[list[Any], list[Any]]:
        plain: list[Any] = []
        replace = False
        for item in patch:
            if _DIRECTIVE not in item:
                plain.append(item)
                continue
            directive = item[_DIRECTIVE]
            if directive == "delete":
                if merge_key not in item:
                    raise _no_merge_key(item, merge_key)
                original = self.delete_matching_entries(original, merge_key, item[merge_key])
            elif directive == "replace":
                replace = True
            elif directive == "merge":
                raise _internal("merging lists cannot yet be specified in the patch")
            else:
                raise _bad_patch_type(directive, item)
        if replace:
            return plain, []
        return original, plain

    def delete_matching_entries(self, original: list[Any], merge_key: str, value: Any) -> list[Any]:
        while True:
            _, index, found = _find_map_in_slice(original, merge_key, value)
            if not found:
                return original
            original = original[:index] + original[index + 1 :]

    def merge_slice_without_special_elements(
        self, original: list[Any], patch: list[Any], merge_key: str, path: str
    ) -> list[Any]:
        merged = list(original)
        for item in patch:
            if merge_key not in item:
                raise _no_merge_key(item, merge_key)
            current, index, found = _find_map_in_slice(merged, merge_key, item[merge_key])
            if found:
                merged[index] = self.merge_map(current, item, path)
            else:
                merged.append(item)
        return merged

    def partition_maps(
        self, items: list[Any], partition_by: list[Any], merge_key: str
    ) -> tuple[list[Any], list[Any]]:
        in_patch: list[Any] = []
        server_only: list[Any] = []
        for item in items:
            if not isinstance(item, dict):
                raise _bad_arg_type(_MAP_TYPE, item)
            if merge_key not in item:
                raise _no_merge_key(item, merge_key)
            _, _, found = _find_map_in_slice(partition_by, merge_key, item[merge_key])
            (in_patch if found else server_only).append(item)
        return in_patch, server_only

    @staticmethod
    def extract_to_delete_items(items: list[Any]) -> tuple[list[Any], list[Any]]:
        keep: list[Any] = []
        delete: list[Any] = []
        for item in items:
            if not isinstance(item, dict):
                raise _bad_arg_type(_MAP_TYPE, item)
            (delete if item.get(_DIRECTIVE) == "delete" else keep).append(item)
        return keep, delete

    # ---- ordering

    def normalize_element_order(
        self,
        patch_items: list[Any],
        server_only: list[Any],
        patch_order: list[Any],
        server_order: list[Any],
        merge_key: str,
        kind: str,
    ) -> list[Any]:
        patch_items = self.normalize_slice_order(patch_items, patch_order, merge_key, kind)
        server_only = self.normalize_slice_order(server_only, server_order, merge_key, kind)
        return _merge_sorted_slice(server_only, patch_items, server_order, merge_key, kind)

    def normalize_slice_order(
        self, to_sort: list[Any], order: list[Any], merge_key: str, kind: str
    ) -> list[Any]:
        to_delete: list[Any] = []
        if kind == _MAP_TYPE:
            for items in (to_sort, order):  # validateMergeKeyInLists
                for item in items:
                    if not isinstance(item, dict):
                        raise _bad_arg_type(_MAP_TYPE, item)
                    if merge_key not in item:
                        raise _no_merge_key(item, merge_key)
            to_sort, to_delete = self.extract_to_delete_items(to_sort)
        positions = [_index(order, item, merge_key, kind) for item in to_sort]
        if all(p >= 0 for p in positions):
            ranked = sorted(zip(positions, range(len(to_sort)), to_sort, strict=True))
            to_sort = [item for _, _, item in ranked]
        else:

            def less(a: Any, b: Any) -> bool:
                ia = _index(order, a, merge_key, kind)
                if ia >= 0:
                    ib = _index(order, b, merge_key, kind)
                    if ib >= 0:
                        return ia < ib
                return True

            to_sort = _go_sort_stable(to_sort, less)
        return to_sort + to_delete


def _index(items: list[Any], value: Any, merge_key: str, kind: str) -> int:
    """``index``: position of ``value`` in ``items`` (by merge key value for maps), or -1."""
    if kind == _MAP_TYPE:
        wanted = value.get(merge_key) if isinstance(value, dict) else None
        for i, item in enumerate(items):
            if _go_eq(wanted, item.get(merge_key) if isinstance(item, dict) else None):
                return i
        return -1
    for i, item in enumerate(items):
        if _go_eq(value, item):
            return i
    return -1


def _merge_sorted_slice(
    left: list[Any], right: list[Any], server_order: list[Any], merge_key: str, kind: str
) -> list[Any]:
    """``mergeSortedSlice``: interleave server-only items (left) into patch items (right)."""
    out: list[Any] = []
    i = j = 0
    while i < len(left) or j < len(right):
        if i >= len(left):
            out.append(right[j])
            j += 1
        elif j >= len(right):
            out.append(left[i])
            i += 1
        else:
            li = _index(server_order, left[i], merge_key, kind)
            ri = _index(server_order, right[j], merge_key, kind)
            if li >= 0 and ri >= 0 and li < ri:
                out.append(left[i])
                i += 1
            else:
                out.append(right[j])
                j += 1
    return out


def _find_map_in_slice(items: list[Any], key: str, value: Any) -> tuple[Any, int, bool]:
    """``findMapInSliceBasedOnKeyValue``: the first map whose ``key`` equals ``value``."""
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise _internal(f"value for key {i} is not a map.")
        if key in item and _go_eq(item[key], value):
            return item, i, True
    return None, 0, False


def _partition_primitives(items: list[Any], partition_by: list[Any]) -> tuple[list[Any], list[Any]]:
    in_patch: list[Any] = []
    server_only: list[Any] = []
    for item in items:
        found = any(_go_eq(item, p) for p in partition_by)
        (in_patch if found else server_only).append(item)
    return in_patch, server_only


def _deduplicate_scalars(items: list[Any]) -> list[Any]:
    """``deduplicateScalars``, including the order it leaves behind (a later duplicate is
    replaced by the last element)."""
    s = list(items)
    length = len(s) - 1
    i = 0
    while i < length:
        j = i + 1
        while j <= length:
            if _go_eq(s[i], s[j]):
                s[j] = s[length]
                del s[length:]
                length -= 1
                j -= 1
            j += 1
        i += 1
    return s


def _is_directive(key: str) -> bool:
    return key in (_DIRECTIVE, _RETAIN_KEYS) or key.startswith(
        (_DELETE_PREFIX + "/", _ORDER_PREFIX + "/")
    )


def _strip_directives(value: Any) -> None:
    """Drop directive keys left in values the merge inserted verbatim: the real server's typed
    decode never keeps them (no Go struct field starts with ``$``)."""
    if isinstance(value, dict):
        for key in [k for k in value if _is_directive(k)]:
            del value[key]
        for v in value.values():
            _strip_directives(v)
    elif isinstance(value, list):
        for v in value:
            _strip_directives(v)


def strategic_merge_patch(target: Mapping[str, Any], patch: Any, kind: str) -> dict[str, Any]:
    """Apply an ``application/strategic-merge-patch+json`` body to a ``kind`` object.

    ``StrategicMergeMapPatch`` with the server-side options (``MergeParallelList``,
    ``IgnoreUnmatchedNulls``): ``$patch: replace|delete`` in maps and list items (``$patch:
    merge`` is rejected, as upstream), ``$retainKeys``, ``$deleteFromPrimitiveList/<field>``,
    ``$setElementOrder/<field>``, merge lists ordered by ``normalizeElementOrder`` /
    ``mergeSortedSlice`` (patch order first, server-only items interleaved by live order),
    ``null`` deleting a key. The struct tags it needs are in ``PATCH_STRATEGIES`` (from
    ``k8s.io/api``); a field missing there is a map or an atomic list, as the tags say for
    every other field of these kinds.

    Raises ``PatchError``: 415 for kinds without Go types (custom resources), 400 for a body that
    is not an object or malformed directives, 422 or 500 as the module table says.
    """
    if not supports_strategic_merge(kind):
        raise PatchError(415, "UnsupportedMediaType", SMP_UNSUPPORTED_MESSAGE)
    if patch is None:  # JSON null decodes into an empty map
        patch = {}
    if not isinstance(patch, dict):
        raise _bad_request(
            f"json: cannot unmarshal {_json_kind(patch)} into Go value of type {_MAP_TYPE}"
        )
    result = _StrategicMerger(kind).merge_map(_copy(dict(target)), _copy(patch), "")
    _strip_directives(result)
    return result
