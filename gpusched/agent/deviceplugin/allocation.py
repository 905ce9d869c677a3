"""Which pod an Allocate call is for, and which of its devices each container gets.

The kubelet's Allocate names device IDs, never a pod: the device manager admits one pod at a
time, and for each container (init containers first, then app containers, in spec order) and
each device-plugin resource in its limits it picks free device IDs and calls Allocate. So, as
HAMi's plugin does (``GetPendingPod``: the pod on this node still being allocated, oldest bind
first), the plugin looks the pod up in the API: a pod

- bound to this node (``spec.nodeName``), not finished or being deleted,
- with gpusched's assignment (``gpusched.io/gpu-ids`` and ``gpu-uuids``, written by the
  Binding; :mod:`gpusched.annotations`),
- whose next container asking for the resource asks for as many devices as the call carries,
- and not yet served for that container: :data:`ALLOCATED` (``"nvidia.com/gpu=1"``) counts
  the containers served per resource, written by a merge patch carrying the pod's
  ``resourceVersion`` (a precondition) before Allocate answers. A pod all of whose containers
  are served is never taken again, and after an agent restart allocation resumes where the
  annotation says.

Among such pods the one whose next devices *are* the call's devices wins, then the oldest
bind (``PodScheduled``'s ``lastTransitionTime``, then creation time, then name).
GetPreferredAllocation (:func:`prefer`) steers the kubelet to pick the oldest-bound waiting
pod's devices, so its own bookkeeping and checkpoint name the devices the container gets.
Calls are serialised by the caller's lock from the LIST to the patch, so two Allocate calls
never take the same container, and concurrent calls naming different pods' devices each get
their own pod.

*Limit* (HAMi's too, which its per-node bind lock avoids): the kubelet admits pods one at a
time in the order its pod watch delivers them, which is bind order, but pods delivered in one
batch are admitted by creation time. When two waiting pods ask for the same number of
devices of the same resource and the kubelet admits the later-bound one first, they get each
other's devices (both still get devices the scheduler reserved on this node, and shared pods
each other's VRAM limit). Different resources or counts are never confused.

**Containers.** The pod's annotated devices are split among the containers asking for the
resource: app containers take consecutive slices in spec order (``[c1: 2, c2: 1]`` -> devices
0-1 and 2); an init container takes the first devices (the kubelet hands an init container's
devices on to the app containers after it). The app containers' counts must add up to the
annotated devices.

Cost: one LIST of the node's pods (field selector) and one PATCH per Allocate; O(pods on the
node x containers) to choose.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from gpusched.agent.deviceplugin.devices import device_uuid
from gpusched.annotations import GPU_IDS, PREFIX, AnnotationError, parse_assignment
from gpusched.gpu_requests import RequestError, read_gpu_request
from gpusched.kube.client import Kube, resource_path
from gpusched.quantity import parse_quantity

__all__ = [
    "ALLOCATED",
    "AllocationError",
    "PodFinder",
    "PodPlan",
    "choose",
    "format_allocated",
    "parse_allocated",
    "plan_pod",
    "prefer",
]

ALLOCATED: Final = PREFIX + "allocated"
"""Containers the device plugin has served, per resource: ``"nvidia.com/gpu=1"``."""


class AllocationError(Exception):
    """No pod fits an Allocate call, or its annotations cannot be served; says why."""


def parse_allocated(text: str | None) -> dict[str, int]:
    out: dict[str, int] = {}
    for part in (text or "").split(","):
        name, _, count = part.strip().partition("=")
        if name and count.isdigit():
            out[name] = int(count)
    return out


def format_allocated(served: Mapping[str, int]) -> str:
    return ",".join(f"{name}={n}" for name, n in sorted(served.items()))


def _limit(container: Mapping[str, Any], resource: str) -> int:
    resources = container.get("resources") or {}
    raw = (resources.get("limits") or {}).get(resource)
    if raw is None:
        raw = (resources.get("requests") or {}).get(resource)
    if raw is None:
        return 0
    try:
        return int(parse_quantity(str(raw)))
    except ValueError:
        return 0


@dataclass(frozen=True, slots=True)
class PodPlan:
    """One pod's devices for one resource, container by container, and how far it is served."""

    pod: Mapping[str, Any]
    resource: str
    containers: tuple[tuple[str, int, int], ...]
    """(container name, first device, end) in the kubelet's order: init, then app containers."""
    uuids: tuple[str, ...]
    vram_mib: tuple[int, ...] | None
    """Per device, for a shared pod (a VRAM limit); None for whole GPUs and MIG devices."""
    cores_percent: int
    served: int

    @property
    def key(self) -> str:
        meta = self.pod["metadata"]
        return f"{meta.get('namespace', '')}/{meta['name']}"

    @property
    def done(self) -> bool:
        return self.served >= len(self.containers)

    def next_container(self) -> tuple[str, int, int]:
        return self.containers[self.served]

    @property
    def next_count(self) -> int:
        _, start, end = self.next_container()
        return end - start

    @property
    def next_uuids(self) -> tuple[str, ...]:
        _, start, end = self.next_container()
        return self.uuids[start:end]

    @property
    def bind_order(self) -> tuple[str, str, str]:
        meta = self.pod["metadata"]
        bound = ""
        for cond in (self.pod.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("status") == "True":
                bound = str(cond.get("lastTransitionTime") or "")
        return bound, str(meta.get("creationTimestamp") or ""), self.key


def plan_pod(pod: Mapping[str, Any], resource: str) -> PodPlan | None:
    """The pod's plan for ``resource``; None when it holds no gpusched devices or does not
    ask for ``resource``. Raises :class:`AllocationError` when its annotations and its
    containers disagree."""
    meta = pod.get("metadata") or {}
    if GPU_IDS not in (meta.get("annotations") or {}):
        return None
    spec = pod.get("spec") or {}
    containers: list[tuple[str, int, int]] = []
    for init in spec.get("initContainers") or []:
        if (n := _limit(init, resource)) > 0:
            containers.append((str(init.get("name")), 0, n))
    start = 0
    for app in spec.get("containers") or []:
        if (n := _limit(app, resource)) > 0:
            containers.append((str(app.get("name")), start, start + n))
            start += n
    if not containers:
        return None
    name = f"{meta.get('namespace', '')}/{meta.get('name')}"
    try:
        assignment = parse_assignment(pod)
    except AnnotationError as exc:
        raise AllocationError(f"pod {name}: {exc}") from None
    assert assignment is not None
    uuids = assignment.gpu_uuids
    if not uuids:
        raise AllocationError(f"pod {name} has gpusched.io/gpu-ids but no gpusched.io/gpu-uuids")
    widest = max(end for _, _, end in containers)
    if (start and start != len(uuids)) or widest > len(uuids):
        raise AllocationError(
            f"pod {name}: its containers ask for {start or widest} {resource} but its "
            f"annotations list {len(uuids)} device(s)"
        )
    try:
        request = read_gpu_request(pod)
    except RequestError:
        request = None
    shared = request is not None and request.mode == "shared"
    vram = assignment.vram_mib if shared and assignment.vram_mib else None
    cores = (request.cores_percent or 0) if request is not None and shared else 0
    served = parse_allocated(meta.get("annotations", {}).get(ALLOCATED)).get(resource, 0)
    return PodPlan(pod, resource, tuple(containers), uuids, vram, cores, served)


def choose(plans: Sequence[PodPlan], device_ids: Sequence[str]) -> PodPlan | None:
    """The pod an Allocate of ``device_ids`` is for (module docstring), or None."""
    fitting = [p for p in plans if not p.done and p.next_count == len(device_ids)]
    wanted = sorted(device_uuid(i) for i in device_ids)
    exact = [p for p in fitting if sorted(p.next_uuids) == wanted]
    pool = exact or fitting
    return min(pool, key=lambda p: p.bind_order) if pool else None


def prefer(
    plans: Sequence[PodPlan], available: Sequence[str], must_include: Sequence[str], size: int
) -> list[str]:
    """Device IDs for GetPreferredAllocation: the next devices of the oldest pod waiting for
    ``size`` of them, where available; then ``must_include``, filled up from ``available``."""
    picked: list[str] = list(must_include)[:size]
    fitting = [p for p in plans if not p.done and p.next_count == size]
    if fitting:
        pod = min(fitting, key=lambda p: p.bind_order)
        for uuid in pod.next_uuids:
            if len(picked) >= size:
                break
            if any(device_uuid(i) == uuid for i in picked):
                continue
            match = next((i for i in available if device_uuid(i) == uuid and i not in picked), None)
            if match is not None:
                picked.append(match)
    for i in available:
        if len(picked) >= size:
            break
        if i not in picked:
            picked.append(i)
    return picked


class PodFinder:
    """The API side: the node's pods, and the progress annotation. Thin I/O over the above."""

    def __init__(self, kube: Kube, node_name: str) -> None:
        self._kube = kube
        self._node = node_name

    async def plans(self, resource: str) -> tuple[list[PodPlan], list[str]]:
        """Plans of the node's live pods for ``resource``, and why others were left out."""
        listed = await self._kube.get(
            resource_path("", "v1", "pods"), {"fieldSelector": f"spec.nodeName={self._node}"}
        )
        plans: list[PodPlan] = []
        problems: list[str] = []
        for pod in listed.get("items") or []:
            meta = pod.get("metadata") or {}
            phase = (pod.get("status") or {}).get("phase")
            if meta.get("deletionTimestamp") or phase in ("Succeeded", "Failed"):
                continue
            try:
                found = plan_pod(pod, resource)
            except AllocationError as exc:
                problems.append(str(exc))
                continue
            if found is not None:
                plans.append(found)
        return plans, problems

    async def mark_served(self, plan: PodPlan) -> None:
        """Record one more container of ``plan`` served (precondition: the listed version)."""
        meta = plan.pod["metadata"]
        served = parse_allocated((meta.get("annotations") or {}).get(ALLOCATED))
        served[plan.resource] = plan.served + 1
        body = {
            "metadata": {
                "resourceVersion": meta["resourceVersion"],
                "annotations": {ALLOCATED: format_allocated(served)},
            }
        }
        path = resource_path("", "v1", "pods", meta.get("namespace") or "default", meta["name"])
        await self._kube.patch(path, body)
