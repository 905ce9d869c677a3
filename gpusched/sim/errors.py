"""API errors of the simulated API server, rendered as the real server renders them.

Every failure a client can see leaves the server as a ``metav1.Status`` body with the
``reason`` and ``code`` that k8s.io/apimachinery/pkg/api/errors would produce for the same
situation, so client code that branches on them (``reason == "Conflict"``, ``code == 410``)
behaves identically against the simulation and a real kube-apiserver.

Hierarchy::

    APIError                      (any non-2xx answer; carries the Status dict)
    +-- field validation          422 Invalid, built from gpusched.sim.field's FieldError lists

Handlers raise ``APIError``; the HTTP layer turns it into the response.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from gpusched.sim.apimachinery import go_quote
from gpusched.sim.field import FieldError, aggregate_errors

__all__ = [
    "APIError",
    "FieldError",
    "already_exists",
    "bad_request",
    "conflict",
    "expired",
    "forbidden",
    "forbidden_with_causes",
    "gone",
    "internal_error",
    "invalid",
    "invalid_status",
    "method_not_allowed",
    "not_acceptable",
    "not_found",
    "status_success",
    "timeout",
    "too_many_requests",
    "unauthorized",
    "unexpected",
    "unsupported_media_type",
]


class APIError(Exception):
    """A failed request: ``status`` is the full ``metav1.Status`` body sent to the client."""

    def __init__(self, status: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        super().__init__(status.get("message", ""))
        self.status = status
        self.headers = headers or {}

    @property
    def code(self) -> int:
        return int(self.status["code"])

    @property
    def reason(self) -> str:
        return str(self.status.get("reason", ""))

    def body(self) -> bytes:
        return json.dumps(self.status).encode()


def _status(
    code: int,
    reason: str,
    message: str,
    details: dict[str, Any] | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    }
    if details:
        body["details"] = details
    body["code"] = code
    return body


def _qualified(group: str, resource: str) -> str:
    """``schema.GroupResource.String()``: ``pods`` or ``leases.coordination.k8s.io``."""
    return f"{resource}.{group}" if group else resource


def _details(name: str, group: str, resource: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name} if name else {}  # omitempty, as Go encodes it
    if group:
        details["group"] = group
    details["kind"] = resource
    return details


def status_success(name: str, group: str, resource: str, uid: str) -> dict[str, Any]:
    """What a DELETE answers for resources that do not return the deleted object."""
    details = _details(name, group, resource)
    details["uid"] = uid
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    }


def not_found(group: str, resource: str, name: str) -> APIError:
    return APIError(
        _status(
            404,
            "NotFound",
            f'{_qualified(group, resource)} "{name}" not found',
            _details(name, group, resource),
        )
    )


def already_exists(group: str, resource: str, name: str, deleting: bool = False) -> APIError:
    """409 AlreadyExists; over an object still being deleted the message says so first."""
    prefix = "object is being deleted: " if deleting else ""
    return APIError(
        _status(
            409,
            "AlreadyExists",
            f'{prefix}{_qualified(group, resource)} "{name}" already exists',
            _details(name, group, resource),
        )
    )


def conflict(group: str, resource: str, name: str, err: str) -> APIError:
    """``errors.NewConflict``: "Operation cannot be fulfilled on pods "x": <err>"."""
    return APIError(
        _status(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on {_qualified(group, resource)} "{name}": {err}',
            _details(name, group, resource),
        )
    )


OPTIMISTIC_LOCK_ERROR = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


def bad_request(message: str) -> APIError:
    return APIError(_status(400, "BadRequest", message))


def unauthorized() -> APIError:
    return APIError(_status(401, "Unauthorized", "Unauthorized"))


def forbidden(message: str, group: str = "", resource: str = "", name: str = "") -> APIError:
    return APIError(_status(403, "Forbidden", message, _details(name, group, resource)))


def forbidden_with_causes(
    group: str, resource: str, name: str, err: str, causes: list[dict[str, str]]
) -> APIError:
    """``apierrors.NewForbidden`` over an error carrying causes (admission plugins)."""
    target = f'{_qualified(group, resource)} "{name}"' if name else _qualified(group, resource)
    details = _details(name, group, resource)
    details["causes"] = causes
    return APIError(_status(403, "Forbidden", f"{target} is forbidden: {err}", details))


def method_not_allowed(
    message: str = "the server does not allow this method on the requested resource",
) -> APIError:
    return APIError(_status(405, "MethodNotAllowed", message, {}))


def not_acceptable(message: str) -> APIError:
    return APIError(_status(406, "NotAcceptable", message))


def unsupported_media_type(strategic: bool = True) -> APIError:
    """415 from the patch handler; custom resources do not accept strategic merge patches."""
    types = ["application/json-patch+json", "application/merge-patch+json"]
    if strategic:
        types.append("application/strategic-merge-patch+json")
    types.append("application/apply-patch+yaml")
    return APIError(
        _status(
            415,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: "
            + ", ".join(types),
        )
    )


def gone(message: str) -> APIError:
    """410 Gone with reason Gone (used by the watch cache for too-old resource versions)."""
    return APIError(_status(410, "Gone", message))


def expired(message: str) -> APIError:
    """410 with reason Expired (list continue tokens and resourceVersionMatch=Exact)."""
    return APIError(_status(410, "Expired", message))


def timeout(message: str, retry_after: int = 1, causes: Sequence[dict[str, str]] = ()) -> APIError:
    details: dict[str, Any] = {}
    if causes:
        details["causes"] = list(causes)
    details["retryAfterSeconds"] = retry_after
    return APIError(_status(504, "Timeout", message, details), {"Retry-After": str(retry_after)})


def too_many_requests(retry_after: int = 1) -> APIError:
    return APIError(
        _status(
            429,
            "TooManyRequests",
            "Too many requests, please try again later.",
            {"retryAfterSeconds": retry_after},
        ),
        {"Retry-After": str(retry_after)},
    )


def unexpected(message: str) -> APIError:
    """A plain Go error reaching the handler: 500 with no reason (``ErrorToAPIStatus``)."""
    return APIError(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "code": 500,
        }
    )


def internal_error(err: str) -> APIError:
    return APIError(
        _status(
            500,
            "InternalError",
            f"Internal error occurred: {err}",
            {"causes": [{"message": err}]},
        )
    )


def invalid_status(kind: str, group: str, name: str, errs: Sequence[FieldError]) -> dict[str, Any]:
    """The ``Status`` body of ``apierrors.NewInvalid(GroupKind{group, kind}, name, errs)``: one
    cause per error; the message aggregates them (deduplicated, ``[a, b]`` for several)."""
    message = f"{_qualified(group, kind)} {go_quote(name)} is invalid"
    if errs:
        message += ": " + aggregate_errors(errs)
    details = _details(name, group, kind)
    if not kind:
        del details["kind"]  # omitempty
    causes: list[dict[str, Any]] = []
    for e in errs:
        cause: dict[str, Any] = {"reason": e.reason}
        if body := e.error_body():
            cause["message"] = body
        if e.field:
            cause["field"] = e.field
        causes.append(cause)
    if causes:
        details["causes"] = causes
    return _status(422, "Invalid", message, details)


def invalid(kind: str, group: str, name: str, errs: Sequence[FieldError]) -> APIError:
    """``errors.NewInvalid``: 422 with one cause per field error."""
    return APIError(invalid_status(kind, group, name, errs))
