"""The node agent: discovery, then a loop that reads NVML and publishes what changed.

:class:`Agent` runs, for one node::

    discover (NVML -> inventory spec) -> NVMLMonitor.open
    every interval:  read (events drained, telemetry, health)     [worker thread]
                     inventory + health -> listeners, if changed  (the device plugin)
                     Publisher.publish (spec, Node labels), if changed
                     Publisher.publish_status, if the figures changed and status_interval passed
    every resync_interval: forget what was written (drift is repaired), discover again
                     (a MIG reconfiguration changes the spec)

Listeners (:class:`InventoryListener`, e.g. the device plugin) get each new inventory, health
included, whether or not the API write succeeds, so a GPU that turns unhealthy leaves the
kubelet's allocatable at once. API errors are logged and retried next interval; ``ready`` is
set after the first successful publish.

**No GPU or no driver.** Discovery raises :class:`~gpusched.agent.discovery.AgentError` with
what is missing. By default :meth:`Agent.run` raises it (``gpusched agent`` exits 1 with the
message, and the kubelet restarts the pod with backoff, visible as CrashLoopBackOff). With
``allow_no_gpu`` (``--allow-no-gpu``) it publishes an empty inventory instead (no GPUs,
``driverVersion``/``cudaDriverVersion`` ``0.0``, no GPU labels), so the scheduler sees a node
with no GPUs, and tries discovery again every resync interval.

Costs per node: a reading per interval (about five NVML calls per GPU); API writes only on a
change: one status write per ``status_interval`` at most while the GPUs are busy, none while
idle, so 10,000 nodes at the defaults (10 s, 60 s) write at most ~170 statuses a second under
changing load and nothing at rest.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from gpusched.agent.discovery import AgentError, discover
from gpusched.agent.health import XIDPolicy
from gpusched.agent.publisher import Publisher, PublishError
from gpusched.agent.telemetry import GPUReading, NVMLMonitor, status_of, with_health
from gpusched.clock import Clock, RealClock
from gpusched.inventory import GPUNodeInventory
from gpusched.kube.client import Kube
from gpusched.kube.errors import APIError, APINotFound

__all__ = [
    "NO_DRIVER_VERSION",
    "Agent",
    "AgentMetrics",
    "AgentSettings",
    "InventoryListener",
    "empty_inventory",
]

log = logging.getLogger(__name__)

NO_DRIVER_VERSION: Final = "0.0"
"""``driverVersion`` and ``cudaDriverVersion`` of an empty inventory (no driver)."""


class InventoryListener(Protocol):
    """Told each new inventory (health included); must not block (the device plugin)."""

    def update(self, inventory: GPUNodeInventory) -> None: ...


@dataclass(frozen=True, slots=True)
class AgentSettings:
    """How often the agent reads and writes."""

    interval: float = 10.0
    """Seconds between NVML readings (health and telemetry); 10 s, as the simulation's."""
    status_interval: float = 60.0
    """Seconds between status (telemetry) writes at least; a health change is written at once."""
    resync_interval: float = 600.0
    """Seconds between re-reads of the cluster (drift repaired) and rediscoveries."""
    allow_no_gpu: bool = False
    """Publish an empty inventory when NVML has no GPU or no driver, instead of failing."""

    def __post_init__(self) -> None:
        for name in ("interval", "status_interval", "resync_interval"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0 seconds, got {getattr(self, name)}")


def empty_inventory(node_name: str) -> GPUNodeInventory:
    """The inventory of a node without GPUs or driver (``--allow-no-gpu``)."""
    return GPUNodeInventory(
        node_name=node_name,
        source="nvml",
        driver_version=NO_DRIVER_VERSION,
        cuda_driver_version=NO_DRIVER_VERSION,
        gpus=(),
    )


class AgentMetrics:
    """The agent's own Prometheus registry, served on its ``/metrics``."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.writes = Counter(
            "gpusched_agent_api_writes_total",
            "API writes by the node agent, by what was written (inventory, status, labels).",
            ["kind"],
            registry=self.registry,
        )
        self.errors = Counter(
            "gpusched_agent_publish_errors_total",
            "Publishing attempts that failed (retried at the next interval).",
            registry=self.registry,
        )
        self.gpus = Gauge(
            "gpusched_agent_gpus",
            "GPUs of the node by health.",
            ["health"],
            registry=self.registry,
        )

        self.memory_used = Gauge(
            "gpusched_agent_gpu_memory_used_mib",
            "GPU memory in use at the last NVML reading, in MiB, by GPU index.",
            ["gpu"],
            registry=self.registry,
        )
        self.memory_total = Gauge(
            "gpusched_agent_gpu_memory_total_mib",
            "GPU memory, in MiB, by GPU index.",
            ["gpu"],
            registry=self.registry,
        )
        self.utilization = Gauge(
            "gpusched_agent_gpu_utilization_percent",
            "GPU utilisation at the last NVML reading, 0-100, by GPU index.",
            ["gpu"],
            registry=self.registry,
        )
        self.last_reading = Gauge(
            "gpusched_agent_last_reading_timestamp_seconds",
            "Unix time of the last NVML reading (an alert fires when it falls behind).",
            registry=self.registry,
        )

    def observe(self, spec: GPUNodeInventory, readings: Iterable[GPUReading], at: float) -> None:
        """Record one reading: per-GPU memory and utilisation (for dashboards), and its time."""
        memory = {gpu.index: gpu.memory_mib for gpu in spec.gpus}
        for reading in readings:
            gpu = str(reading.index)
            self.memory_used.labels(gpu).set(reading.used_mib)
            self.memory_total.labels(gpu).set(memory.get(reading.index, 0))
            self.utilization.labels(gpu).set(reading.utilization)
        self.last_reading.set(at)

    def render(self) -> bytes:
        data: bytes = generate_latest(self.registry)
        return data


class Agent:
    """One node's agent (module docstring): ``await run()`` until :meth:`stop`."""

    def __init__(
        self,
        kube: Kube,
        nvml: Any,
        node_name: str,
        settings: AgentSettings | None = None,
        *,
        clock: Clock | None = None,
        listeners: Iterable[InventoryListener] = (),
        env: Mapping[str, str] | None = None,
        metrics: AgentMetrics | None = None,
    ) -> None:
        self.nvml = nvml
        self.node_name = node_name
        self.settings = settings or AgentSettings()
        self.clock = clock or RealClock()
        self.listeners = list(listeners)
        self.policy = XIDPolicy.from_env(os.environ if env is None else env)
        self.metrics = metrics or AgentMetrics()
        self.publisher = Publisher(
            kube, node_name, on_write=lambda kind: self.metrics.writes.labels(kind).inc()
        )
        self.ready = asyncio.Event()
        """Set once the inventory has been published."""
        self.inventory: GPUNodeInventory | None = None
        """The inventory last given to the listeners, health included."""
        self._spec: GPUNodeInventory | None = None  # discovered, without health
        self._monitor: NVMLMonitor | None = None
        self._stop = asyncio.Event()
        self._last_status = float("-inf")
        self._last_resync = 0.0

    def stop(self) -> None:
        """End :meth:`run` after the current interval's work."""
        self._stop.set()

    async def run(self) -> None:
        """Discover, then read and publish every interval until :meth:`stop` or cancellation.

        Raises :class:`AgentError` when the node has no GPU or driver, unless
        ``allow_no_gpu``.
        """
        await self._discover(first=True)
        self._last_resync = self.clock.monotonic()
        try:
            while not self._stop.is_set():
                await self.tick()
                await self._wait(self.settings.interval)
        finally:
            if self._monitor is not None:
                await asyncio.to_thread(self._monitor.close)
                self._monitor = None

    async def _wait(self, seconds: float) -> None:
        sleeping = asyncio.ensure_future(self.clock.sleep(seconds))
        stopping = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait({sleeping, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (sleeping, stopping):
                task.cancel()
            await asyncio.gather(sleeping, stopping, return_exceptions=True)

    async def _discover(self, *, first: bool = False) -> None:
        try:
            spec = await asyncio.to_thread(discover, self.nvml, self.node_name)
        except AgentError as exc:
            if not self.settings.allow_no_gpu:
                raise
            if first:
                log.warning("no GPU to publish (%s); publishing an empty inventory", exc)
            spec = empty_inventory(self.node_name)
        if spec == self._spec:
            return
        previous = self._monitor
        monitor = NVMLMonitor(self.nvml, spec, self.policy) if spec.gpus else None
        if monitor is not None:
            if previous is not None:
                monitor.health = previous.health  # XID marks stay with the GPU indices
            await asyncio.to_thread(monitor.open)
        if previous is not None:
            await asyncio.to_thread(previous.close)
        self._spec, self._monitor = spec, monitor
        log.info("node %s: %d GPU(s) discovered", self.node_name, len(spec.gpus))

    async def tick(self) -> None:
        """One interval: read, tell the listeners, publish what changed."""
        assert self._spec is not None, "run() discovers first"
        now = self.clock.monotonic()
        if now - self._last_resync >= self.settings.resync_interval:
            self._last_resync = now
            self.publisher.forget()
            try:
                await self._discover()
            except (AgentError, self.nvml.NVMLError) as exc:
                log.warning("rediscovery failed, keeping the last inventory: %s", exc)
        monitor = self._monitor
        readings = await asyncio.to_thread(monitor.read) if monitor is not None else []
        self.metrics.observe(self._spec, readings, self.clock.now().timestamp())
        inventory = with_health(self._spec, readings)
        if inventory != self.inventory:
            self._changed(inventory)
        try:
            await self.publisher.publish(inventory)
            if readings and now - self._last_status >= self.settings.status_interval:
                stamp = self.clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")
                if await self.publisher.publish_status(status_of(readings, stamp)):
                    self._last_status = now
        except (APIError, PublishError) as exc:
            if isinstance(exc, APINotFound):  # the inventory was deleted: write it again
                self.publisher.forget()
            self.metrics.errors.inc()
            log.warning(
                "node %s: publishing failed, retrying in %gs: %s",
                self.node_name,
                self.settings.interval,
                exc,
            )
            return
        self.ready.set()

    def _changed(self, inventory: GPUNodeInventory) -> None:
        before = {g.index: g.health for g in self.inventory.gpus} if self.inventory else {}
        for gpu in inventory.gpus:
            if before.get(gpu.index, "Healthy") != gpu.health:
                if gpu.healthy:
                    log.warning("GPU %d (%s) is healthy again", gpu.index, gpu.uuid)
                else:
                    log.warning(
                        "GPU %d (%s) is unhealthy: %s", gpu.index, gpu.uuid, gpu.health_reason
                    )
        self.inventory = inventory
        unhealthy = sum(not g.healthy for g in inventory.gpus)
        self.metrics.gpus.labels("Unhealthy").set(unhealthy)
        self.metrics.gpus.labels("Healthy").set(len(inventory.gpus) - unhealthy)
        for listener in self.listeners:
            try:
                listener.update(inventory)
            except Exception:
                log.exception("inventory listener %r failed", listener)
