"""Fault injection for the simulated API server.

A ``Faults`` object is consulted by every request. It can make a fraction of requests of a verb
(optionally of one resource) fail with 500, 429 or 409 before they touch storage, add latency to
every request, and cut watch streams after a number of events or seconds. It is plain mutable
state: tests change it while the server runs (``sim.faults.set(...)``), the CLI builds it from a
``--faults`` spec::

    create=0.1:500,patch/pods=0.05:429,*=0.01:409,latency=20ms,watch-events=100,watch-seconds=30,seed=7

- ``VERB[/RESOURCE]=FRACTION:CODE`` -- verbs are the API verbs (get, list, watch, create,
  update, patch, delete, deletecollection) or ``*``; RESOURCE is a plural such as ``pods`` or
  ``pods/binding``, ``leases``; CODE is 500, 429 or 409, or ``lost``: the request is applied
  and the client is answered 504 (the apiserver's answer when a write outlives its request
  timeout; to the client, as good as a lost response).
- ``latency=DURATION`` -- added before each request is handled (``ms`` or ``s`` suffix).
- ``watch-events=N`` / ``watch-seconds=S`` -- a watch stream is closed (as a load balancer or
  an apiserver restart would) after N events or S seconds; clients must resume from their
  last resourceVersion.
- ``seed=N`` -- the random stream that decides which requests fail, for reproducible runs.

Injected failures are counted per (verb, code) so tests can assert that faults really fired.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field

from gpusched.sim import errors

__all__ = ["LOST", "FaultRule", "Faults", "parse_faults"]

_VERBS = frozenset(
    {"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection", "*"}
)
LOST = 0
"""The ``code`` of a rule whose requests are applied and then answered 504 (``:lost``)."""
_CODES = frozenset({409, 429, 500, LOST})


@dataclass(frozen=True, slots=True)
class FaultRule:
    verb: str
    resource: str  # "" for any
    fraction: float
    code: int
    """500, 429, 409, or :data:`LOST` (applied, then answered 504)."""

    def applies(self, verb: str, resource: str) -> bool:
        return (self.verb in ("*", verb)) and (not self.resource or self.resource == resource)


@dataclass
class Faults:
    rules: list[FaultRule] = field(default_factory=list)
    latency: float = 0.0
    watch_events: int = 0
    watch_seconds: float = 0.0
    seed: int | None = None
    injected: Counter[tuple[str, int]] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def set(
        self,
        rules: list[FaultRule] | None = None,
        *,
        latency: float | None = None,
        watch_events: int | None = None,
        watch_seconds: float | None = None,
    ) -> None:
        if rules is not None:
            self.rules = list(rules)
        if latency is not None:
            self.latency = latency
        if watch_events is not None:
            self.watch_events = watch_events
        if watch_seconds is not None:
            self.watch_seconds = watch_seconds

    def clear(self) -> None:
        self.rules = []
        self.latency = 0.0
        self.watch_events = 0
        self.watch_seconds = 0.0

    def check(self, verb: str, resource: str, name: str, group: str) -> errors.APIError | None:
        """Raise the injected error for this request, if the dice say so; or return the error
        to answer with once the request is applied (a ``lost`` rule)."""
        for rule in self.rules:
            if rule.applies(verb, resource) and self._rng.random() < rule.fraction:
                self.injected[(verb, rule.code)] += 1
                if rule.code == LOST:
                    return errors.timeout(
                        "Timeout: request did not complete within the allotted timeout "
                        "(injected by gpusched.sim: the request was applied)"
                    )
                raise _error(rule.code, verb, resource, name, group)
        return None

    def total(self) -> int:
        return sum(self.injected.values())


def _error(code: int, verb: str, resource: str, name: str, group: str) -> errors.APIError:
    base = resource.split("/")[0]
    if code == 429:
        return errors.too_many_requests(1)
    if code == 409:
        if verb == "create":
            return errors.already_exists(group, base, name or "injected")
        return errors.conflict(group, base, name, errors.OPTIMISTIC_LOCK_ERROR)
    return errors.internal_error("injected fault (gpusched.sim)")


def _duration(text: str) -> float:
    if text.endswith("ms"):
        return float(text[:-2]) / 1000
    if text.endswith("s"):
        return float(text[:-1])
    return float(text)


def parse_faults(spec: str) -> Faults:
    """Parse a ``--faults`` spec (see the module docstring); raises ValueError naming the part."""
    faults = Faults()
    seed: int | None = None
    for part in filter(None, (p.strip() for p in spec.split(","))):
        key, sep, value = part.partition("=")
        if not sep:
            raise ValueError(f"fault {part!r}: expected KEY=VALUE")
        try:
            if key == "latency":
                faults.latency = _duration(value)
            elif key == "watch-events":
                faults.watch_events = int(value)
            elif key == "watch-seconds":
                faults.watch_seconds = _duration(value)
            elif key == "seed":
                seed = int(value)
            else:
                verb, _, resource = key.partition("/")
                if verb not in _VERBS:
                    raise ValueError(f"unknown verb {verb!r} (one of {', '.join(sorted(_VERBS))})")
                frac_text, _, code_text = value.partition(":")
                fraction = float(frac_text)
                code = LOST if code_text == "lost" else int(code_text or "500")
                if not 0 <= fraction <= 1:
                    raise ValueError("the fraction must be between 0 and 1")
                if code not in _CODES or (code == LOST and code_text != "lost"):
                    raise ValueError(f"code {code_text!r} is not one of 409, 429, 500, lost")
                faults.rules.append(FaultRule(verb, resource, fraction, code))
        except ValueError as exc:
            raise ValueError(f"fault {part!r}: {exc}") from None
    faults.seed = seed
    faults.__post_init__()
    return faults
