"""What every reader shares: the pod's GPU fields, and the checks of single values.

A reader never builds a :class:`~gpusched.gpu_requests.GPURequest` itself: it returns a
:class:`Partial`, the fields its format *states* (each with the text it came from, for the
messages) and the defaults its system applies to what is left unstated. The package merges the
partials of all formats a pod uses, so that two forms that agree combine and two that disagree
are named together in one message.

Resources are read per container from ``limits``, falling back to ``requests`` (an extended
resource's request always equals its limit once the API server has defaulted it; a hand-written
manifest may give either). Counts add up across containers as kube-scheduler adds requests
(:func:`gpusched.cache.pod_requests`: app containers and sidecars summed, init containers at
their peak); per-GPU amounts (VRAM, cores) must come from one container, since two containers
of one pod cannot each be promised their own slice of the same device.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Final, Protocol

from gpusched.cache import pod_requests
from gpusched.quantity import parse_quantity

__all__ = [
    "MIB",
    "ClaimSpecs",
    "Given",
    "Partial",
    "PodView",
    "RequestError",
    "parse_bool",
    "parse_int",
    "parse_mib_quantity",
    "parse_name",
    "parse_plain_int",
    "parse_profile",
]

MIB: Final = 1 << 20

_DNS1123_SUBDOMAIN: Final = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
# MIG profile names as the NVIDIA device plugin's mixed strategy publishes them
# (nvidia.com/mig-<profile>): "1g.10gb", "3g.40gb", "1g.10gb+me", "1c.3g.40gb".
_MIG_PROFILE: Final = re.compile(r"^([1-9]c\.)?[1-9]g\.[0-9]+gb(\+[a-z]+)*$")
_INTEGER: Final = re.compile(r"^[+]?[0-9]+$")


class RequestError(ValueError):
    """A malformed or contradictory GPU request; the message says what is wrong and what would
    fix it."""


@dataclass(frozen=True, slots=True)
class Given:
    """A field a pod states, and where: ``'gpusched.io/vram: "20Gi"'``."""

    value: Any
    origin: str


@dataclass(slots=True)
class Partial:
    """The fields one format states (``values``) and the defaults its system applies to the
    fields nobody states (``defaults``)."""

    source: str
    values: dict[str, Given] = field(default_factory=dict)
    defaults: dict[str, Any] = field(default_factory=dict)

    def give(self, name: str, value: Any, origin: str) -> None:
        self.values[name] = Given(value, origin)


def _origin(name: str, text: str) -> str:
    return f'{name}: "{text}"'


@dataclass(frozen=True, slots=True)
class _Container:
    name: str
    init: bool
    sidecar: bool
    resources: Mapping[str, Any]


class ClaimSpecs(Protocol):
    """Where a reader finds GpuClaims: the spec of ``namespace/name``, or ``None`` when there
    is no such claim (the GpuClaims plugin, through ``Handle.claim_specs``)."""

    def claim_spec(self, namespace: str, name: str) -> Mapping[str, Any] | None: ...


class PodView:
    """A pod's annotations and per-container resources (limits over requests), read once, and
    the claims its request may refer to (``None``: claims are not read)."""

    __slots__ = ("_containers", "annotations", "claims", "namespace")

    def __init__(self, pod: Mapping[str, Any], claims: ClaimSpecs | None = None) -> None:
        self.claims = claims
        meta = pod.get("metadata") or {}
        self.annotations: Mapping[str, str] = meta.get("annotations") or {}
        self.namespace = str(meta.get("namespace") or "default")
        spec = pod.get("spec") or {}
        containers: list[_Container] = []
        for key, init in (("initContainers", True), ("containers", False)):
            for c in spec.get(key) or ():
                res = c.get("resources") or {}
                merged = {**(res.get("requests") or {}), **(res.get("limits") or {})}
                sidecar = init and c.get("restartPolicy") == "Always"
                containers.append(_Container(str(c.get("name", "")), init, sidecar, merged))
        self._containers = tuple(containers)

    def annotation(self, name: str) -> str | None:
        value = self.annotations.get(name)
        return None if value is None else str(value)

    def has_resource(self, name: str) -> bool:
        return any(name in c.resources for c in self._containers)

    def resource_names(self) -> set[str]:
        return {name for c in self._containers for name in c.resources}

    def total(self, name: str) -> int | None:
        """The pod's count of resource ``name`` (None when no container names it).

        Each container's amount must be a non-negative integer. O(containers).
        """
        if not self.has_resource(name):
            return None
        synthetic: dict[str, list[dict[str, Any]]] = {"containers": [], "initContainers": []}
        for c in self._containers:
            amount = 0
            if name in c.resources:
                amount = parse_int(name, c.resources[name], minimum=0, where=c.name)
            entry: dict[str, Any] = {"resources": {"requests": {name: str(amount)}}}
            if c.sidecar:
                entry["restartPolicy"] = "Always"
            synthetic["initContainers" if c.init else "containers"].append(entry)
        return pod_requests({"spec": synthetic}).scalar.get(name, 0)

    def per_gpu(self, name: str, owner: str | None = None) -> str | None:
        """The text of per-GPU resource ``name`` from the one container that gives it.

        ``owner``: the count resource (``nvidia.com/gpu``) that container must also ask for.
        """
        holders = [c for c in self._containers if name in c.resources]
        if not holders:
            return None
        if len(holders) > 1:
            names = ", ".join(f'"{c.name}"' for c in holders)
            raise RequestError(
                f"{name} is set in containers {names}: a per-GPU amount must come from one "
                "container; ask for the GPUs and their amount in one container only"
            )
        holder = holders[0]
        if owner is not None and owner not in holder.resources and self.has_resource(owner):
            raise RequestError(
                f'{name} is set in container "{holder.name}" but {owner} is asked by another '
                f"container; put both in the limits of the same container"
            )
        return str(holder.resources[name])


def _where(where: str | None) -> str:
    return f' (container "{where}")' if where else ""


def parse_int(
    name: str, raw: Any, *, minimum: int, maximum: int | None = None, where: str | None = None
) -> int:
    """An integer quantity (``"2"``; ``"2k"`` is 2000) within ``minimum..maximum``."""
    text = str(raw).strip()
    try:
        value = parse_quantity(text)
    except ValueError:
        raise RequestError(
            f"{_origin(name, text)}{_where(where)} is not a number; write a whole number such "
            'as "1"'
        ) from None
    if value.denominator != 1:
        raise RequestError(
            f"{_origin(name, text)}{_where(where)} is not a whole number; devices are counted "
            'in whole units: write "1" or more'
        )
    if value < minimum or (maximum is not None and value > maximum):
        bounds = f"from {minimum} to {maximum}" if maximum is not None else f"{minimum} or more"
        raise RequestError(f"{_origin(name, text)}{_where(where)} is out of range; use {bounds}")
    return int(value)


def parse_plain_int(name: str, raw: Any, *, minimum: int, maximum: int | None = None) -> int:
    """A plain decimal integer (annotations that upstream reads with ``strconv.ParseInt``)."""
    text = str(raw).strip()
    if not _INTEGER.match(text):
        raise RequestError(
            f'{_origin(name, text)} is not a whole number; write digits only, such as "2"'
        )
    value = int(text)
    if value < minimum or (maximum is not None and value > maximum):
        bounds = f"from {minimum} to {maximum}" if maximum is not None else f"{minimum} or more"
        raise RequestError(f"{_origin(name, text)} is out of range; use {bounds}")
    return value


def parse_mib_quantity(name: str, raw: Any, *, unitless_mib: bool = False) -> int:
    """A memory quantity (``"20Gi"``, ``"16000Mi"``, ``"20G"``) in MiB, rounded up to whole MiB.

    A plain number is bytes to Kubernetes, which is never what a VRAM request means: it is an
    error, or MiB where the format documents MiB (``unitless_mib``).
    """
    text = str(raw).strip()
    plain = _PLAIN_MIB.fullmatch(text)
    if plain is not None:  # the usual "20Gi" / "16000Mi": whole MiB, ~0.5 us instead of ~6
        return int(plain[1]) * _UNIT_MIB[plain[2]]
    return _parse_mib_general(name, text, unitless_mib)


_PLAIN_MIB: Final = re.compile(r"([1-9][0-9]{0,8})(Mi|Gi)")
_UNIT_MIB: Final = {"Mi": 1, "Gi": 1024}


def _parse_mib_general(name: str, text: str, unitless_mib: bool) -> int:
    fix = "write it as 20Gi or 20000Mi"
    try:
        value = parse_quantity(text)
    except ValueError:
        raise RequestError(f"{_origin(name, text)} is not a quantity; {fix}") from None
    if _INTEGER.match(text):
        if not unitless_mib:
            raise RequestError(
                f"{_origin(name, text)} has no unit, so it means {text} bytes; {fix}"
            )
        value *= MIB
    if value <= 0:
        raise RequestError(f"{_origin(name, text)} must be more than zero; {fix}")
    mib = Fraction(value) / MIB
    if mib < 1:
        raise RequestError(f"{_origin(name, text)} is less than 1Mi; {fix}")
    return -(-mib.numerator // mib.denominator)


_TRUE: Final = frozenset({"true"})
_FALSE: Final = frozenset({"false"})


def parse_bool(name: str, raw: Any) -> bool:
    text = str(raw).strip()
    if text.lower() in _TRUE:
        return True
    if text.lower() in _FALSE:
        return False
    raise RequestError(f'{_origin(name, text)} is not a boolean; write "true" or "false"')


def parse_name(name: str, raw: Any, what: str) -> str:
    """A Kubernetes object name (DNS-1123 subdomain), e.g. a GPUClass or a node."""
    text = str(raw).strip()
    if not text or len(text) > 253 or not _DNS1123_SUBDOMAIN.match(text):
        raise RequestError(
            f"{_origin(name, text)} is not a valid {what} name; use lower-case letters, digits, "
            "'-' and '.', starting and ending with a letter or digit"
        )
    return text


def parse_profile(name: str, text: str) -> str:
    """A MIG profile name as the device plugin publishes it (``1g.10gb``)."""
    profile = text.strip()
    if not _MIG_PROFILE.match(profile):
        raise RequestError(
            f"{_origin(name, profile)} is not a MIG profile name; write it as the "
            'NVIDIA device plugin names it, e.g. "1g.10gb" or "3g.40gb"'
        )
    return profile
