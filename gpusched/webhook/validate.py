"""What the validating webhook checks: a pluggable ``Validator``, and the default one.

A validator is a plain function of the pod (``pod -> message | None``), so the webhook
rejects a malformed request with exactly the message the scheduler would give, from the same
code: the scheduler's readers raise an error whose text says what is wrong and what fixes it,
and the validator returns that text. Only pods of gpusched's (``spec.schedulerName``) are
checked: another scheduler's pods are not ours to judge.

The default validator checks the priority annotation (``gpusched.annotations``) and, when
``gpusched.gpu_requests`` is installed, reads the GPU request with
``read_gpu_request(pod)``, which raises ``RequestError``; without that module it accepts the
request (the scheduler still rejects it, later, with an Event).

Cost: what the readers cost, O(containers); no I/O.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

from gpusched.annotations import AnnotationError, parse_priority

__all__ = ["Validator", "default_validator", "validate_priority"]

log = logging.getLogger(__name__)

Validator = Callable[[Mapping[str, Any]], str | None]
"""``(pod) -> None`` when the pod's gpusched fields are valid, else a message for its author."""


def validate_priority(pod: Mapping[str, Any]) -> str | None:
    try:
        parse_priority(pod)
    except AnnotationError as exc:
        return str(exc)
    return None


def _gpu_request_validator() -> Validator | None:
    try:
        module = importlib.import_module("gpusched.gpu_requests")
    except ImportError:
        log.info("gpusched.gpu_requests is not installed: GPU requests are checked at scheduling")
        return None
    read = module.read_gpu_request
    error: type[Exception] = module.RequestError

    def check(pod: Mapping[str, Any]) -> str | None:
        try:
            read(pod)
        except error as exc:
            return str(exc)
        return None

    return check


def default_validator() -> Validator:
    """The priority check, then the GPU request readers when ``gpusched.gpu_requests`` exists."""
    checks: list[Validator] = [validate_priority]
    gpu = _gpu_request_validator()
    if gpu is not None:
        checks.append(gpu)

    def validate(pod: Mapping[str, Any]) -> str | None:
        for check in checks:
            message = check(pod)
            if message is not None:
                return message
        return None

    return validate
