"""Builders for the cache tests: a fluent pod builder, nodes, GPU inventories.

``make_pod("p").gpus(2).on("n1").assigned(a).obj()`` reads as what the test means; every
builder returns a fresh dict, so tests can mutate what they get.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Mapping, Sequence
from itertools import combinations
from typing import Any

from gpusched.annotations import Assignment, assignment_annotations
from gpusched.inventory import (
    GPUDevice,
    GPULink,
    GPUNodeInventory,
    MIGDevice,
    node_extended_resources,
)
from gpusched.mig_profiles import place

__all__ = ["PodBuilder", "make_inventory", "make_node", "make_pod"]

H100 = "NVIDIA H100 80GB HBM3"
H100_MIB = 81559


def _uuid(prefix: str, *parts: object) -> str:
    return f"{prefix}-{uuid.uuid5(uuid.NAMESPACE_URL, '/'.join(map(str, parts)))}"


def make_inventory(
    node: str,
    count: int = 8,
    *,
    memory_mib: int = H100_MIB,
    product: str = H100,
    mig: Mapping[int, Sequence[tuple[str, int]]] | None = None,
) -> GPUNodeInventory:
    """``count`` GPUs, all NVLinked; ``mig`` maps a GPU index to its MIG devices as
    (profile, memory MiB), placed where NVML would place them (:func:`mig_profiles.place`)."""
    gpus = []
    for index in range(count):
        devices = []
        layout = (mig or {}).get(index, ())
        placed = place(product, [profile for profile, _ in layout]) if layout else ()
        for position, ((profile, mib), where) in enumerate(zip(layout, placed, strict=True)):
            start, size = where.start, where.profile.memory_slices
            devices.append(
                MIGDevice(
                    uuid=_uuid("MIG", node, index, position),
                    profile=profile,
                    memory_mib=mib,
                    gpu_instance_id=position + 1,
                    compute_instance_id=0,
                    placement_start=start,
                    placement_size=size,
                )
            )
        gpus.append(
            GPUDevice(
                index=index,
                uuid=_uuid("GPU", node, index),
                product=product,
                memory_mib=memory_mib,
                pci_bus_id=f"00000000:{0x18 + index:02X}:00.0",
                mig_enabled=bool(devices),
                mig_devices=tuple(devices),
            )
        )
    links = [
        GPULink(a=a, b=b, type="NVLink", nvlinks=18, pcie="NODE")
        for a, b in combinations(range(count), 2)
    ]
    return GPUNodeInventory(
        node_name=node,
        source="simulated",
        driver_version="550.127.05",
        cuda_driver_version="12.4",
        gpus=tuple(gpus),
        links=tuple(links),
    )


def make_node(
    name: str,
    *,
    gpus: int | None = None,
    inventory: GPUNodeInventory | None = None,
    cpu: str = "32",
    memory: str = "128Gi",
    pods: str = "110",
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
    unschedulable: bool = False,
) -> dict[str, Any]:
    """A v1 Node; ``nvidia.com/gpu`` (and MIG resources) from ``inventory``, or ``gpus``."""
    allocatable: dict[str, str] = {"cpu": cpu, "memory": memory, "pods": pods}
    if inventory is not None:
        allocatable.update(node_extended_resources(inventory))
    elif gpus is not None:
        allocatable["nvidia.com/gpu"] = str(gpus)
    spec: dict[str, Any] = {}
    if taints:
        spec["taints"] = [dict(t) for t in taints]
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": dict(labels or {"kubernetes.io/hostname": name})},
        "spec": spec,
        "status": {"capacity": dict(allocatable), "allocatable": allocatable},
    }


class PodBuilder:
    """A v1 Pod built step by step; :meth:`obj` gives a fresh dict."""

    def __init__(self, name: str, *, namespace: str = "default", uid: str | None = None) -> None:
        self._pod: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": uid or f"uid-{name}"},
            "spec": {"containers": [{"name": "main", "image": "pause", "resources": {}}]},
            "status": {"phase": "Pending"},
        }

    @property
    def uid(self) -> str:
        return str(self._pod["metadata"]["uid"])

    def request(self, name: str, quantity: str | int) -> PodBuilder:
        """Request ``quantity`` of ``name`` in the first container."""
        resources = self._pod["spec"]["containers"][0]["resources"]
        resources.setdefault("requests", {})[name] = str(quantity)
        return self

    def cpu(self, quantity: str) -> PodBuilder:
        return self.request("cpu", quantity)

    def memory(self, quantity: str) -> PodBuilder:
        return self.request("memory", quantity)

    def gpus(self, count: int) -> PodBuilder:
        """``nvidia.com/gpu`` in requests and limits, as the API server stores it."""
        self.request("nvidia.com/gpu", count)
        resources = self._pod["spec"]["containers"][0]["resources"]
        resources.setdefault("limits", {})["nvidia.com/gpu"] = str(count)
        return self

    def mig(self, profile: str, count: int = 1) -> PodBuilder:
        return self.request(f"nvidia.com/mig-{profile.replace('+', '.')}", count)

    def container(self, requests: Mapping[str, str]) -> PodBuilder:
        index = len(self._pod["spec"]["containers"])
        self._pod["spec"]["containers"].append(
            {"name": f"c{index}", "image": "pause", "resources": {"requests": dict(requests)}}
        )
        return self

    def init(self, requests: Mapping[str, str], *, sidecar: bool = False) -> PodBuilder:
        inits = self._pod["spec"].setdefault("initContainers", [])
        container: dict[str, Any] = {
            "name": f"init{len(inits)}",
            "image": "pause",
            "resources": {"requests": dict(requests)},
        }
        if sidecar:
            container["restartPolicy"] = "Always"
        inits.append(container)
        return self

    def overhead(self, resources: Mapping[str, str]) -> PodBuilder:
        self._pod["spec"]["overhead"] = dict(resources)
        return self

    def pod_level(self, requests: Mapping[str, str]) -> PodBuilder:
        self._pod["spec"]["resources"] = {"requests": dict(requests)}
        return self

    def on(self, node: str) -> PodBuilder:
        self._pod["spec"]["nodeName"] = node
        return self

    def annotate(self, key: str, value: str) -> PodBuilder:
        self._pod["metadata"].setdefault("annotations", {})[key] = value
        return self

    def assigned(self, assignment: Assignment) -> PodBuilder:
        for key, value in assignment_annotations(assignment).items():
            self.annotate(key, value)
        return self

    def phase(self, phase: str) -> PodBuilder:
        self._pod["status"]["phase"] = phase
        return self

    def label(self, key: str, value: str) -> PodBuilder:
        self._pod["metadata"].setdefault("labels", {})[key] = value
        return self

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self._pod)


def make_pod(name: str, *, namespace: str = "default", uid: str | None = None) -> PodBuilder:
    return PodBuilder(name, namespace=namespace, uid=uid)
