"""gpusched's API errors, one class per thing a caller does differently.

::

    APIError                 any failed request; .code, .reason, .message, .status (the body)
    +-- APIClientError       4xx: the request was wrong or lost a race
    |   +-- APINotFound          404
    |   +-- APIConflict          409 (AlreadyExists and optimistic-lock Conflict)
    |   +-- APIGone              410 (too old resourceVersion, expired continue token)
    |   +-- APIForbidden         403
    |   +-- APITooManyRequests   429 (.retry_after seconds)
    +-- APIServerError       5xx and transport failures (code 0): retry with backoff
"""

from __future__ import annotations

import json
from typing import Any

__all__ = [
    "APIClientError",
    "APIConflict",
    "APIError",
    "APIForbidden",
    "APIGone",
    "APINotFound",
    "APIServerError",
    "APITooManyRequests",
    "from_response",
]


class APIError(Exception):
    def __init__(self, code: int, status: dict[str, Any], retry_after: float = 0.0) -> None:
        self.code = code
        self.status = status
        self.reason: str = str(status.get("reason", ""))
        self.message: str = str(status.get("message", ""))
        self.retry_after = retry_after
        super().__init__(f"{code} {self.reason}: {self.message}")


class APIClientError(APIError):
    pass


class APIServerError(APIError):
    pass


class APINotFound(APIClientError):
    pass


class APIConflict(APIClientError):
    pass


class APIGone(APIClientError):
    pass


class APIForbidden(APIClientError):
    pass


class APITooManyRequests(APIClientError):
    pass


_BY_CODE: dict[int, type[APIError]] = {
    403: APIForbidden,
    404: APINotFound,
    409: APIConflict,
    410: APIGone,
    429: APITooManyRequests,
}


def from_response(code: int, body: bytes | str, headers: Any = None) -> APIError:
    """Build the right error from an HTTP status, body and headers."""
    try:
        status = json.loads(body) if body else {}
        if not isinstance(status, dict):
            status = {"message": str(status)}
    except ValueError:
        status = {"message": body.decode(errors="replace") if isinstance(body, bytes) else body}
    retry_after = 0.0
    if headers is not None:
        try:
            retry_after = float(headers.get("Retry-After", 0) or 0)
        except (TypeError, ValueError):
            retry_after = 0.0
    if code == 0 or code >= 500:
        return APIServerError(code, status, retry_after)
    cls = _BY_CODE.get(code, APIClientError)
    return cls(code, status, retry_after)
