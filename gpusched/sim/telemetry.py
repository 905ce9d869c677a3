"""Simulated GPU telemetry: the part of the node agent that measures, for simulated nodes.

On a real node the agent reads NVML every few seconds and writes what it measured into its
``GPUNodeInventory``'s status (:class:`gpusched.inventory.GPUNodeInventoryStatus`: memory in
use, utilisation and temperature per GPU). Here there is no GPU to read, so the measurement is
made up from what the pods were given, and says so in nothing but ``spec.source: simulated``:

- memory in use on a GPU is what the Running pods holding it were promised, from the
  annotations the Binding wrote (``gpusched.io/gpu-ids`` and ``gpusched.io/reserved-vram-mib``:
  a whole GPU's memory, a share's slice, a MIG device's memory), capped at the GPU's memory;
- utilisation is 35% per such pod, at most 100%; temperature rises from 30 C with it.

Nothing about a workload is modelled: the figures exist so that tools reading telemetry (``kubectl
get gni``, ``gpusched status``) have something true to the placements to show. The scheduler
never reads them.

Each period (10 s, a typical agent's) every simulated inventory whose figures changed is
written through the ``/status`` subresource with a merge patch; an unchanged node costs no
write, so an idle fleet costs none. Like the simulated kubelets it is an ordinary API client
(list/watch, patch): it runs against the simulated API server or a real one. All waiting is on
an injectable ``Clock``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from gpusched.annotations import AnnotationError, parse_assignment
from gpusched.clock import Clock, RealClock
from gpusched.inventory import (
    API_GROUP,
    PLURAL,
    VERSION,
    GPUNodeInventoryStatus,
    GPUTelemetry,
    InventoryError,
    inventory_from_object,
    inventory_status_to_object,
)
from gpusched.kube.client import Kube, resource_path
from gpusched.kube.errors import APIError
from gpusched.kube.reflector import Reflector

__all__ = ["UTILIZATION_PER_POD", "SimTelemetry", "measure"]

log = logging.getLogger(__name__)

UTILIZATION_PER_POD = 35
"""Percent of a GPU's compute each Running pod on it is said to use (capped at 100)."""


def measure(
    inventory: Mapping[str, Any], pods: list[Mapping[str, Any]], observed_time: str
) -> GPUNodeInventoryStatus | None:
    """The made-up reading of one simulated node (module docstring) from its inventory object
    and the Running pods bound to it; ``None`` when the inventory does not parse."""
    try:
        spec = inventory_from_object(inventory)
    except InventoryError:
        return None
    used = [0] * len(spec.gpus)
    holders = [0] * len(spec.gpus)
    for pod in pods:
        try:
            assignment = parse_assignment(pod)
        except AnnotationError:
            continue
        if assignment is None:
            continue
        for k, index in enumerate(assignment.gpu_ids):
            if 0 <= index < len(used):
                mib = assignment.vram_mib[k] if k < len(assignment.vram_mib) else 0
                used[index] += mib or spec.gpus[index].memory_mib
                holders[index] += 1
    gpus = []
    for gpu in spec.gpus:
        utilisation = min(100, UTILIZATION_PER_POD * holders[gpu.index])
        gpus.append(
            GPUTelemetry(
                index=gpu.index,
                used_memory_mib=min(used[gpu.index], gpu.memory_mib),
                utilization_percent=utilisation,
                temperature_c=30 + utilisation * 4 // 10,
            )
        )
    return GPUNodeInventoryStatus.of(observed_time, gpus)


class SimTelemetry:
    """Writes every simulated inventory's telemetry each ``period`` seconds; ``await run()``
    until cancelled."""

    def __init__(self, kube: Kube, clock: Clock | None = None, *, period: float = 10.0) -> None:
        self.kube = kube
        self.clock = clock or RealClock()
        self.period = period
        self._path = resource_path(API_GROUP, VERSION, PLURAL)
        self.inventories = Reflector(kube, self._path, clock=self.clock, name="telemetry/gni")
        self.pods = Reflector(
            kube,
            resource_path("", "v1", "pods"),
            field_selector="spec.nodeName!=",
            clock=self.clock,
            name="telemetry/pods",
        )
        self._written: dict[str, tuple[tuple[int, int], ...]] = {}  # node -> figures written
        self.writes = 0

    async def run(self) -> None:
        tasks = [
            asyncio.create_task(self.inventories.run(), name="telemetry-gni"),
            asyncio.create_task(self.pods.run(), name="telemetry-pods"),
        ]
        try:
            await self.inventories.synced.wait()
            await self.pods.synced.wait()
            while True:
                await self.publish_once()
                await self.clock.sleep(self.period)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def publish_once(self) -> int:
        """Measure every simulated node and write the readings that changed; returns how many
        were written."""
        running: dict[str, list[Mapping[str, Any]]] = {}
        for pod in self.pods.items.values():
            if (pod.get("status") or {}).get("phase") == "Running":
                running.setdefault(pod["spec"]["nodeName"], []).append(pod)
        now = self.clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")
        written = 0
        for name, obj in list(self.inventories.items.items()):
            if (obj.get("spec") or {}).get("source") != "simulated":
                continue  # a real agent's node: never overwritten
            status = measure(obj, running.get(name, []), now)
            if status is None:
                continue
            figures = tuple((g.used_memory_mib, g.utilization_percent) for g in status.gpus)
            if self._written.get(name) == figures:
                continue
            try:
                await self.kube.patch(
                    f"{self._path}/{name}/status", {"status": inventory_status_to_object(status)}
                )
            except APIError as exc:
                log.warning("telemetry: writing the status of inventory %s: %s", name, exc)
                continue
            self._written[name] = figures
            written += 1
        self.writes += written
        return written
