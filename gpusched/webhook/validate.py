"""What the validating webhook checks: a pluggable ``Validator``, and the default one.

A validator is a plain function of the pod (``pod -> message | None``), so the webhook
rejects a malformed request with exactly the message the scheduler would give, from the same
code: the scheduler's readers raise an error whose text says what is wrong and what fixes it,
and the validator returns that text. Only pods of gpusched's (``spec.schedulerName``) are
checked: another scheduler's pods are not ours to judge.

The default validator checks the priority annotation (``gpusched.annotations``), then reads
the GPU request with ``gpusched.gpu_requests.read_gpu_request(pod)``, the scheduler's own
readers, and answers the text of the ``RequestError`` it raises.

Cost: what the readers cost, O(containers); no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from gpusched.annotations import AnnotationError, parse_priority
from gpusched.gpu_requests import RequestError, read_gpu_request

__all__ = ["Validator", "default_validator", "validate_gpu_request", "validate_priority"]

Validator = Callable[[Mapping[str, Any]], str | None]
"""``(pod) -> None`` when the pod's gpusched fields are valid, else a message for its author."""


def validate_priority(pod: Mapping[str, Any]) -> str | None:
    try:
        parse_priority(pod)
    except AnnotationError as exc:
        return str(exc)
    return None


def validate_gpu_request(pod: Mapping[str, Any]) -> str | None:
    try:
        read_gpu_request(pod)
    except RequestError as exc:
        return str(exc)
    return None


def default_validator() -> Validator:
    """The priority check, then the GPU request readers."""
    checks: tuple[Validator, ...] = (validate_priority, validate_gpu_request)

    def validate(pod: Mapping[str, Any]) -> str | None:
        for check in checks:
            message = check(pod)
            if message is not None:
                return message
        return None

    return validate
