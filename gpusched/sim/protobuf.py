"""The few protobuf request bodies the simulated API server decodes (kubectl sends them).

The simulation speaks JSON. kubectl, though, sends the bodies of ``kubectl create token`` (an
``authentication.k8s.io/v1`` TokenRequest) and ``kubectl auth can-i`` (an
``authorization.k8s.io/v1`` SelfSubjectAccessReview) as ``application/vnd.kubernetes.protobuf``
with no JSON fallback. :func:`decode` reads the Kubernetes protobuf envelope (the ``k8s\\0``
magic, then a ``runtime.Unknown`` with the TypeMeta and the raw message) and those two messages
(field numbers from their ``generated.proto``) into the JSON form; any other kind is ``None``
and the server answers 415 as before. ObjectMeta is read for ``name``, ``generateName`` and
``namespace`` only. Cost: linear in the body.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

__all__ = ["CONTENT_TYPE", "decode"]

CONTENT_TYPE: Final = "application/vnd.kubernetes.protobuf"
_MAGIC: Final = b"k8s\x00"


class _DecodeError(ValueError):
    pass


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise _DecodeError("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """``(field number, value)``: an int for varints, bytes for length-delimited fields."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            yield number, value
        elif wire == 2:
            size, pos = _varint(data, pos)
            if pos + size > len(data):
                raise _DecodeError("truncated field")
            yield number, data[pos : pos + size]
            pos += size
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        else:
            raise _DecodeError(f"unsupported wire type {wire}")


Schema = dict[int, tuple[str, Any]]
"""Field number -> (JSON name, "string" | "int" | "strings" | nested Schema)."""

_META: Final[Schema] = {
    1: ("name", "string"),
    2: ("generateName", "string"),
    3: ("namespace", "string"),
}
_TOKEN_REQUEST: Final[Schema] = {
    1: ("metadata", _META),
    2: (
        "spec",
        {
            1: ("audiences", "strings"),
            3: (
                "boundObjectRef",
                {
                    1: ("kind", "string"),
                    2: ("apiVersion", "string"),
                    3: ("name", "string"),
                    4: ("uid", "string"),
                },
            ),
            4: ("expirationSeconds", "int"),
        },
    ),
}
_ACCESS_REVIEW: Final[Schema] = {
    1: ("metadata", _META),
    2: (
        "spec",
        {
            1: (
                "resourceAttributes",
                {
                    1: ("namespace", "string"),
                    2: ("verb", "string"),
                    3: ("group", "string"),
                    4: ("version", "string"),
                    5: ("resource", "string"),
                    6: ("subresource", "string"),
                    7: ("name", "string"),
                },
            ),
            2: ("nonResourceAttributes", {1: ("path", "string"), 2: ("verb", "string")}),
        },
    ),
}
_KINDS: Final[dict[tuple[str, str], Schema]] = {
    ("authentication.k8s.io/v1", "TokenRequest"): _TOKEN_REQUEST,
    ("authorization.k8s.io/v1", "SelfSubjectAccessReview"): _ACCESS_REVIEW,
}


def _message(data: bytes, schema: Schema) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for number, value in _fields(data):
        entry = schema.get(number)
        if entry is None:
            continue
        name, kind = entry
        if kind == "int" and isinstance(value, int):
            out[name] = value - (1 << 64) if value >= 1 << 63 else value
        elif kind == "string" and isinstance(value, bytes):
            if value:  # Kubernetes' marshalers write empty strings too: omitted, as in JSON
                out[name] = value.decode()
        elif kind == "strings" and isinstance(value, bytes):
            out.setdefault(name, []).append(value.decode())
        elif isinstance(kind, dict) and isinstance(value, bytes):
            out[name] = _message(value, kind)
    return out


def decode(raw: bytes) -> dict[str, Any] | None:
    """The JSON form of a protobuf TokenRequest or SelfSubjectAccessReview, else None."""
    if not raw.startswith(_MAGIC):
        return None
    try:
        type_meta: dict[str, Any] = {}
        payload = b""
        for number, value in _fields(raw[len(_MAGIC) :]):
            if number == 1 and isinstance(value, bytes):
                type_meta = _message(value, {1: ("apiVersion", "string"), 2: ("kind", "string")})
            elif number == 2 and isinstance(value, bytes):
                payload = value
        schema = _KINDS.get((type_meta.get("apiVersion", ""), type_meta.get("kind", "")))
        if schema is None:
            return None
        body = _message(payload, schema)
    except (_DecodeError, UnicodeDecodeError):
        return None
    return {**type_meta, **body}
