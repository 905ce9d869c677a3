"""Resource amounts as integers: a node's allocatable and a pod's effective requests.

Modelled on kube-scheduler's ``framework.Resource`` (``pkg/scheduler/framework/types.go``) and
the request arithmetic of ``k8s.io/component-helpers/resource.PodRequests``:

- ``cpu`` in millicores, rounded up (``Quantity.MilliValue``): ``"1500m"`` and ``"1.5"`` are
  1500; ``"0.0001"`` is 1;
- ``memory`` and ``ephemeral-storage`` in bytes, rounded up (``Quantity.Value``);
- ``pods``: a node's allocatable pod slots, or 1 for a pod;
- every other resource (extended resources such as ``nvidia.com/gpu`` and
  ``nvidia.com/mig-1g.10gb``, ``hugepages-*``) in ``scalar``, rounded up to an integer. Zero
  amounts are never stored, so two equal amounts compare equal however they were built.

A pod's effective requests (:func:`pod_requests`), per resource::

    max(sum of app containers + sum of sidecars, max over init containers) + overhead

where a *sidecar* is an init container with ``restartPolicy: Always``: it keeps running beside
the app containers, and every init container that starts after it runs beside it too, so each
later init container is charged together with the sidecars started before it (as upstream).
Without sidecars this is the classic ``max(sum(containers), max(initContainers)) + overhead``.
With pod-level resources (``spec.resources.requests``, KEP-2837) the pod-level ``cpu`` and
``memory`` replace the containers' totals, before overhead. Requests are read, never limits: the
API server has already defaulted each container's missing requests from its limits.

Everything here is integer arithmetic; quantity strings are parsed exactly
(:func:`gpusched.quantity.parse_quantity`) once each and then memoised, since a cluster uses a
handful of distinct strings (``"1"``, ``"500m"``, ``"16Gi"``) over and over. A pod's requests
cost a few microseconds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, Final

from gpusched.quantity import parse_quantity

__all__ = [
    "CPU",
    "EPHEMERAL_STORAGE",
    "MEMORY",
    "PODS",
    "Resources",
    "node_allocatable",
    "pod_requests",
]

CPU: Final = "cpu"
MEMORY: Final = "memory"
EPHEMERAL_STORAGE: Final = "ephemeral-storage"
PODS: Final = "pods"


@lru_cache(maxsize=4096)
def _milli(text: str) -> int:
    return math.ceil(parse_quantity(text) * 1000)


@lru_cache(maxsize=4096)
def _value(text: str) -> int:
    return math.ceil(parse_quantity(text))


def _text(quantity: Any) -> str:
    # The API server always sends strings; a hand-built dict may hold ints.
    return quantity if isinstance(quantity, str) else str(quantity)


class Resources:
    """An amount of every resource, as integers (see the module docstring for units).

    Mutable, for cheap in-place accumulation (:meth:`add`, :meth:`sub`); :meth:`copy` before
    sharing. ``scalar`` never holds zeros. Equality compares amounts.
    """

    __slots__ = ("ephemeral_storage", "memory", "milli_cpu", "pods", "scalar")

    def __init__(
        self,
        milli_cpu: int = 0,
        memory: int = 0,
        ephemeral_storage: int = 0,
        pods: int = 0,
        scalar: Mapping[str, int] | None = None,
    ) -> None:
        self.milli_cpu = milli_cpu
        self.memory = memory
        self.ephemeral_storage = ephemeral_storage
        self.pods = pods
        self.scalar: dict[str, int] = (
            {k: v for k, v in scalar.items() if v} if scalar is not None else {}
        )

    @classmethod
    def from_resource_list(cls, resource_list: Mapping[str, Any] | None) -> Resources:
        """Amounts of a v1 ``ResourceList`` (``{"cpu": "500m", "memory": "1Gi", ...}``).

        Raises ``ValueError`` (upstream's message) for a malformed quantity.
        """
        res = cls()
        if resource_list:
            res.add_resource_list(resource_list)
        return res

    def add_resource_list(self, resource_list: Mapping[str, Any]) -> None:
        """Add a v1 ``ResourceList`` in place; ``ValueError`` for a malformed quantity."""
        for name, quantity in resource_list.items():
            text = _text(quantity)
            if name == CPU:
                self.milli_cpu += _milli(text)
            elif name == MEMORY:
                self.memory += _value(text)
            elif name == EPHEMERAL_STORAGE:
                self.ephemeral_storage += _value(text)
            elif name == PODS:
                self.pods += _value(text)
            else:
                amount = self.scalar.get(name, 0) + _value(text)
                if amount:
                    self.scalar[name] = amount
                else:
                    self.scalar.pop(name, None)

    def add(self, other: Resources) -> None:
        """``self += other``, in place. O(scalar resources of ``other``)."""
        self.milli_cpu += other.milli_cpu
        self.memory += other.memory
        self.ephemeral_storage += other.ephemeral_storage
        self.pods += other.pods
        if other.scalar:
            scalar = self.scalar
            for name, amount in other.scalar.items():
                total = scalar.get(name, 0) + amount
                if total:
                    scalar[name] = total
                else:
                    del scalar[name]

    def sub(self, other: Resources) -> None:
        """``self -= other``, in place. O(scalar resources of ``other``)."""
        self.milli_cpu -= other.milli_cpu
        self.memory -= other.memory
        self.ephemeral_storage -= other.ephemeral_storage
        self.pods -= other.pods
        if other.scalar:
            scalar = self.scalar
            for name, amount in other.scalar.items():
                total = scalar.get(name, 0) - amount
                if total:
                    scalar[name] = total
                else:
                    del scalar[name]

    def set_max(self, other: Resources) -> None:
        """Each amount becomes ``max(self, other)``, in place."""
        if other.milli_cpu > self.milli_cpu:
            self.milli_cpu = other.milli_cpu
        if other.memory > self.memory:
            self.memory = other.memory
        if other.ephemeral_storage > self.ephemeral_storage:
            self.ephemeral_storage = other.ephemeral_storage
        if other.pods > self.pods:
            self.pods = other.pods
        for name, amount in other.scalar.items():
            if amount > self.scalar.get(name, 0):
                self.scalar[name] = amount

    def copy(self) -> Resources:
        clone = Resources.__new__(Resources)
        clone.milli_cpu = self.milli_cpu
        clone.memory = self.memory
        clone.ephemeral_storage = self.ephemeral_storage
        clone.pods = self.pods
        clone.scalar = dict(self.scalar)
        return clone

    def get(self, name: str) -> int:
        """The amount of resource ``name`` by its Kubernetes name (``cpu`` in millicores)."""
        if name == CPU:
            return self.milli_cpu
        if name == MEMORY:
            return self.memory
        if name == EPHEMERAL_STORAGE:
            return self.ephemeral_storage
        if name == PODS:
            return self.pods
        return self.scalar.get(name, 0)

    def as_dict(self) -> dict[str, int]:
        """Non-zero amounts by Kubernetes resource name, ``cpu`` in millicores, names sorted."""
        out = {
            CPU: self.milli_cpu,
            MEMORY: self.memory,
            EPHEMERAL_STORAGE: self.ephemeral_storage,
            PODS: self.pods,
            **self.scalar,
        }
        return {k: v for k, v in sorted(out.items()) if v}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Resources):
            return NotImplemented
        return (
            self.milli_cpu == other.milli_cpu
            and self.memory == other.memory
            and self.ephemeral_storage == other.ephemeral_storage
            and self.pods == other.pods
            and self.scalar == other.scalar
        )

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        parts = ", ".join(f"{k}={v}" for k, v in self.as_dict().items())
        return f"Resources({parts})"


def node_allocatable(node: Mapping[str, Any]) -> Resources:
    """A v1 Node's ``status.allocatable``; ``ValueError`` for a malformed quantity."""
    status = node.get("status") or {}
    return Resources.from_resource_list(status.get("allocatable"))


def _container_requests(container: Mapping[str, Any]) -> Mapping[str, Any] | None:
    resources = container.get("resources")
    if not resources:
        return None
    requests: Mapping[str, Any] | None = resources.get("requests")
    return requests


def pod_requests(pod: Mapping[str, Any]) -> Resources:
    """A v1 Pod's effective requests (module docstring), with ``pods`` = 1.

    O(containers x resources). Raises ``ValueError`` for a malformed quantity.
    """
    spec = pod.get("spec") or {}
    total = Resources()
    for container in spec.get("containers") or ():
        requests = _container_requests(container)
        if requests:
            total.add_resource_list(requests)
    init_containers = spec.get("initContainers")
    if init_containers:
        sidecars = Resources()
        init_peak = Resources()
        for container in init_containers:
            own = Resources.from_resource_list(_container_requests(container))
            if container.get("restartPolicy") == "Always":
                total.add(own)
                sidecars.add(own)
                init_peak.set_max(sidecars)
            else:
                own.add(sidecars)
                init_peak.set_max(own)
        total.set_max(init_peak)
    pod_level = (spec.get("resources") or {}).get("requests")
    if pod_level:
        for name, quantity in pod_level.items():
            if name == CPU:
                total.milli_cpu = _milli(_text(quantity))
            elif name == MEMORY:
                total.memory = _value(_text(quantity))
    overhead = spec.get("overhead")
    if overhead:
        total.add_resource_list(overhead)
    total.pods = 1
    return total
