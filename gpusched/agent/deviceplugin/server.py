"""The kubelet device plugin servers (``deviceplugin/v1beta1`` over gRPC on unix sockets).

:class:`DevicePlugins` runs one ``grpc.aio`` server per advertised resource
(:func:`~gpusched.agent.deviceplugin.devices.advertise`), each on its own socket in the
kubelet's directory (``/var/lib/kubelet/device-plugins/gpusched-<resource>.sock``), and
registers each with the kubelet (``kubelet.sock``, API version ``v1beta1``, options:
GetPreferredAllocation available, no PreStartContainer). Per resource it serves:

- ``ListAndWatch``: the devices with their health, then a new list whenever :meth:`update`
  changes them (a GPU turning unhealthy: the kubelet stops counting it as allocatable);
- ``GetPreferredAllocation``: the devices the scheduler chose for the pod being admitted, so
  the kubelet's own bookkeeping (and its checkpoint) names them;
- ``Allocate``: the devices in the pod's annotations, whatever IDs the kubelet picked
  (:mod:`.allocation` finds the pod, :func:`~.devices.container_response` builds the answer),
  or ``FAILED_PRECONDITION`` saying why no pod fits: the kubelet rejects the pod with
  ``UnexpectedAdmissionError`` and that text;
- ``PreStartContainer``: nothing to do (not requested).

An API server failure during Allocate is ``UNAVAILABLE`` with its message (the pod is
rejected; its controller recreates it); during GetPreferredAllocation, no preference.

**Kubelet restarts.** A starting kubelet deletes every socket in the directory and creates a
new ``kubelet.sock``. A poller (``poll_seconds`` on the injectable clock) compares the socket's
inode and change time, and whether the plugin's own sockets still exist; on any change it
restarts the servers on fresh sockets and registers again. A failed registration (kubelet not
up yet) is retried at the next poll. New resources (a MIG profile appearing in an
:meth:`update`) are started at the next poll too; a resource whose devices vanish stays
registered with none.

Allocate calls are serialised by one lock from the pod LIST to the progress patch, so two pods
admitted at once never take the same devices. Cost per Allocate: one LIST and one PATCH.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

import grpc
import grpc.aio

from gpusched.agent.deviceplugin import api_pb2 as api
from gpusched.agent.deviceplugin import api_pb2_grpc as api_grpc
from gpusched.agent.deviceplugin.allocation import AllocationError, PodFinder, choose, prefer
from gpusched.agent.deviceplugin.devices import (
    Advertised,
    Granted,
    advertise,
    container_response,
    gpus_by_uuid,
    read_mig_minors,
)
from gpusched.clock import Clock, RealClock
from gpusched.inventory import GPUNodeInventory
from gpusched.kube.client import Kube
from gpusched.kube.errors import APIConflict, APIError

__all__ = [
    "API_VERSION",
    "DEFAULT_SOCKET_DIR",
    "KUBELET_SOCKET",
    "DevicePluginListener",
    "DevicePlugins",
    "socket_name",
]

log = logging.getLogger(__name__)

API_VERSION: Final = "v1beta1"
DEFAULT_SOCKET_DIR: Final = Path("/var/lib/kubelet/device-plugins")
KUBELET_SOCKET: Final = "kubelet.sock"
_REGISTER_TIMEOUT: Final = 10.0
_CONFLICT_RETRIES: Final = 3


def _stat(path: Path) -> tuple[int, int] | None:
    """(inode, change time in ns) of ``path``, None when it does not exist."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_ctime_ns


def socket_name(resource: str) -> str:
    """``"nvidia.com/gpu"`` -> ``"gpusched-nvidia.com_gpu.sock"``."""
    return f"gpusched-{resource.replace('/', '_')}.sock"


class _ResourceServer(api_grpc.DevicePluginServicer):
    """One resource's gRPC service; the device list is swapped by :meth:`set_devices`."""

    def __init__(self, plugins: DevicePlugins, resource: str, devices: tuple[Advertised, ...]):
        self.plugins = plugins
        self.resource = resource
        self.devices = devices
        self.changed = asyncio.Event()
        self.server: grpc.aio.Server | None = None
        self.registered = False

    @property
    def path(self) -> Path:
        return self.plugins.socket_dir / socket_name(self.resource)

    def set_devices(self, devices: tuple[Advertised, ...]) -> None:
        if devices != self.devices:
            self.devices = devices
            self.changed.set()

    async def start(self) -> None:
        await self.stop()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        server = grpc.aio.server()
        api_grpc.add_DevicePluginServicer_to_server(self, server)
        server.add_insecure_port(f"unix://{self.path}")
        await server.start()
        self.server = server
        self.registered = False

    async def stop(self) -> None:
        if self.server is not None:
            server, self.server = self.server, None
            self.changed.set()  # wake ListAndWatch streams so they end
            await server.stop(grace=0.5)

    async def register(self, kubelet_socket: Path) -> None:
        options = api.DevicePluginOptions(
            pre_start_required=False, get_preferred_allocation_available=True
        )
        request = api.RegisterRequest(
            version=API_VERSION,
            endpoint=socket_name(self.resource),
            resource_name=self.resource,
            options=options,
        )
        async with grpc.aio.insecure_channel(f"unix://{kubelet_socket}") as channel:
            stub = api_grpc.RegistrationStub(channel)
            await stub.Register(request, timeout=_REGISTER_TIMEOUT)
        self.registered = True
        log.info("registered %s with the kubelet (%d devices)", self.resource, len(self.devices))

    # -- the DevicePlugin service -----------------------------------------------------------

    async def GetDevicePluginOptions(
        self, request: api.Empty, context: grpc.aio.ServicerContext[Any, Any]
    ) -> api.DevicePluginOptions:
        return api.DevicePluginOptions(
            pre_start_required=False, get_preferred_allocation_available=True
        )

    async def ListAndWatch(
        self, request: api.Empty, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[api.ListAndWatchResponse]:
        server = self.server
        sent: tuple[Advertised, ...] | None = None
        while self.server is server and server is not None:
            devices = self.devices
            if devices != sent:
                sent = devices
                yield api.ListAndWatchResponse(devices=[d.to_proto() for d in devices])
            self.changed.clear()
            if self.devices is devices and self.server is server:
                await self.changed.wait()

    async def GetPreferredAllocation(
        self, request: api.PreferredAllocationRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> api.PreferredAllocationResponse:
        try:
            plans, _ = await self.plugins.finder.plans(self.resource)
        except APIError as exc:  # no preference: the kubelet picks, Allocate still decides
            log.warning("GetPreferredAllocation %s: cannot list pods: %s", self.resource, exc)
            plans = []
        responses = [
            api.ContainerPreferredAllocationResponse(
                deviceIDs=prefer(
                    plans,
                    list(req.available_deviceIDs),
                    list(req.must_include_deviceIDs),
                    req.allocation_size,
                )
            )
            for req in request.container_requests
        ]
        return api.PreferredAllocationResponse(container_responses=responses)

    async def Allocate(
        self, request: api.AllocateRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> api.AllocateResponse:
        responses = []
        for req in request.container_requests:
            try:
                responses.append(await self.plugins.allocate(self.resource, list(req.devices_ids)))
            except AllocationError as exc:
                log.warning("Allocate %s %s: %s", self.resource, list(req.devices_ids), exc)
                await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
            except APIError as exc:
                log.warning("Allocate %s: the API server failed: %s", self.resource, exc)
                await context.abort(
                    grpc.StatusCode.UNAVAILABLE,
                    f"gpusched device plugin: cannot read or annotate the pods of node "
                    f"{self.plugins.node_name} on the API server: {exc}",
                )
        return api.AllocateResponse(container_responses=responses)

    async def PreStartContainer(
        self, request: api.PreStartContainerRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> api.PreStartContainerResponse:
        return api.PreStartContainerResponse()


class DevicePlugins:
    """gpusched's device plugins for one node: ``await start()``, ``update(inv)``, ``await stop()``.

    ``kube`` reads and annotates the node's pods; ``shared_replicas`` is the client slots per
    GPU of the shared resources (0: not advertised); ``whole_gpu_replicas`` > 1 advertises
    each GPU that many times as ``nvidia.com/gpu`` (HAMi's way, for HAMi-form pods: see
    docs/device_plugin.md); ``dev_root`` is where the host's ``/dev`` is seen (device specs
    are passed only for nodes that exist there); ``clock`` paces the kubelet watch every
    ``poll_seconds`` (tests pass a fake clock).
    """

    def __init__(
        self,
        kube: Kube,
        node_name: str,
        inventory: GPUNodeInventory,
        *,
        socket_dir: Path | str = DEFAULT_SOCKET_DIR,
        shared_replicas: int = 10,
        whole_gpu_replicas: int = 1,
        dev_root: Path | str = Path("/dev"),
        poll_seconds: float = 5.0,
        clock: Clock | None = None,
    ) -> None:
        if shared_replicas < 0 or whole_gpu_replicas < 1:
            raise ValueError("shared_replicas must be >= 0 and whole_gpu_replicas >= 1")
        self.node_name = node_name
        self.socket_dir = Path(socket_dir)
        self.shared_replicas = shared_replicas
        self.whole_gpu_replicas = whole_gpu_replicas
        self.dev_root = Path(dev_root)
        self.poll_seconds = poll_seconds
        self.finder = PodFinder(kube, node_name)
        self._clock = clock or RealClock()
        self._inventory = inventory
        self._servers: dict[str, _ResourceServer] = {}
        self._lock = asyncio.Lock()
        self._kubelet_seen: tuple[int, int] | None = None
        self._watch: asyncio.Task[None] | None = None

    @property
    def kubelet_socket(self) -> Path:
        return self.socket_dir / KUBELET_SOCKET

    @property
    def inventory(self) -> GPUNodeInventory:
        return self._inventory

    def resources(self) -> dict[str, int]:
        """Resource -> devices advertised now (healthy or not)."""
        return {r: len(s.devices) for r, s in sorted(self._servers.items())}

    def registered(self) -> dict[str, bool]:
        return {r: s.registered for r, s in sorted(self._servers.items())}

    def serving(self) -> bool:
        """Every resource's server is up and registered with the kubelet (for ``/readyz``)."""
        return bool(self._servers) and all(
            s.server is not None and s.registered for s in self._servers.values()
        )

    async def start(self) -> None:
        """Start every resource's server, register what the kubelet is up for, then watch."""
        try:
            await self.sync()
        finally:  # a first pass that fails (no socket directory yet) is retried by the watch
            self._watch = asyncio.create_task(self._watch_kubelet(), name="device-plugin-kubelet")

    async def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
            self._watch = None
        for server in self._servers.values():
            await server.stop()
            with contextlib.suppress(FileNotFoundError):
                server.path.unlink()

    def update(self, inventory: GPUNodeInventory) -> None:
        """Advertise ``inventory`` from now on (ListAndWatch sends what changed)."""
        self._inventory = inventory
        wanted = self._advertised()
        for resource, server in self._servers.items():
            server.set_devices(wanted.get(resource, ()))

    def _advertised(self) -> dict[str, tuple[Advertised, ...]]:
        return advertise(self._inventory, self.shared_replicas, self.whole_gpu_replicas)

    async def sync(self) -> None:
        """One pass of the watch: (re)start servers whose socket is gone or that are new, and
        (re)register every server after a kubelet restart or a failed registration."""
        kubelet = _stat(self.kubelet_socket)
        restarted = kubelet is not None and kubelet != self._kubelet_seen
        for resource, devices in self._advertised().items():
            if resource not in self._servers:
                self._servers[resource] = _ResourceServer(self, resource, devices)
        for server in self._servers.values():
            if server.server is None or restarted or _stat(server.path) is None:
                await server.start()
        if kubelet is None:
            return
        self._kubelet_seen = kubelet
        for server in self._servers.values():
            if not server.registered:
                try:
                    await server.register(self.kubelet_socket)
                except grpc.aio.AioRpcError as exc:
                    log.warning(
                        "registering %s with the kubelet failed (retrying in %ss): %s",
                        server.resource,
                        self.poll_seconds,
                        exc.details(),
                    )

    async def _watch_kubelet(self) -> None:
        while True:
            await self._clock.sleep(self.poll_seconds)
            try:
                await self.sync()
            except OSError as exc:  # the socket directory: said once at start, with its fix
                log.debug("device plugin: %s; retrying in %ss", exc, self.poll_seconds)
            except Exception:
                log.exception("device plugin watch failed; retrying")

    async def allocate(self, resource: str, device_ids: list[str]) -> api.ContainerAllocateResponse:
        """The container response for an Allocate of ``device_ids`` of ``resource``."""
        async with self._lock:
            for _ in range(_CONFLICT_RETRIES):
                plans, problems = await self.finder.plans(resource)
                plan = choose(plans, device_ids)
                if plan is None:
                    raise AllocationError(self._no_pod(resource, device_ids, problems))
                start, end = plan.next_container()[1:]
                known = gpus_by_uuid(self._inventory)
                granted: list[Granted] = []
                for i in range(start, end):
                    uuid = plan.uuids[i]
                    if uuid not in known:
                        raise AllocationError(
                            f"pod {plan.key} is annotated with device {uuid}, which node "
                            f"{self.node_name} does not have"
                        )
                    base = known[uuid]
                    vram = plan.vram_mib[i] if plan.vram_mib is not None else None
                    granted.append(Granted(base.gpu, base.mig, vram))
                try:
                    await self.finder.mark_served(plan)
                except APIConflict:
                    continue
                log.info(
                    "Allocate %s for pod %s container %s: %s",
                    resource,
                    plan.key,
                    plan.next_container()[0],
                    ",".join(g.uuid for g in granted),
                )
                return container_response(
                    granted,
                    cores_percent=plan.cores_percent,
                    dev_root=self.dev_root,
                    mig_minors=read_mig_minors() if any(g.mig for g in granted) else None,
                )
            raise AllocationError(
                f"the pods on node {self.node_name} kept changing while allocating {resource}; "
                "the kubelet will reject the pod, and its controller recreate it"
            )

    def _no_pod(self, resource: str, device_ids: list[str], problems: list[str]) -> str:
        text = (
            f"gpusched device plugin: no pod bound to node {self.node_name} waits for "
            f"{len(device_ids)} {resource} device(s): a pod using gpusched's devices must be "
            "scheduled by gpusched (annotations gpusched.io/gpu-ids and gpu-uuids) and not "
            "yet allocated"
        )
        if problems:
            text += "; pods left out: " + "; ".join(problems)
        return text


class DevicePluginListener:
    """The agent's side of the device plugins (an ``InventoryListener`` of
    :class:`gpusched.agent.main.Agent`): the first inventory starts :class:`DevicePlugins`,
    each later one is advertised (a GPU turning unhealthy leaves the kubelet's allocatable at
    once). A start that fails (no kubelet device-plugin directory mounted, say) is logged with
    its fix and leaves the agent publishing; the watch goes on trying every ``poll_seconds``,
    and :meth:`ready` (the agent's ``/readyz``) stays false until every resource is served
    and registered."""

    def __init__(self, kube: Kube, node_name: str, **options: Any) -> None:
        self.kube = kube
        self.node_name = node_name
        self.options = options
        self.plugins: DevicePlugins | None = None
        self._starting: asyncio.Task[None] | None = None

    def update(self, inventory: GPUNodeInventory) -> None:
        if self.plugins is not None:
            self.plugins.update(inventory)
            return
        self.plugins = DevicePlugins(self.kube, self.node_name, inventory, **self.options)
        self._starting = asyncio.create_task(self._start(self.plugins), name="device-plugins")

    async def _start(self, plugins: DevicePlugins) -> None:
        try:
            await plugins.start()
        except Exception as exc:  # a bad mount must not stop the inventory being published
            log.error(
                "device plugin: cannot serve in %s (%s): mount the kubelet's device-plugin "
                "directory there (hostPath /var/lib/kubelet/device-plugins), or run the agent "
                "with --no-device-plugin",
                plugins.socket_dir,
                exc,
            )
            return
        log.info(
            "device plugin: serving %s in %s",
            ", ".join(f"{r} ({n})" for r, n in plugins.resources().items()) or "no resources",
            plugins.socket_dir,
        )

    def ready(self) -> bool:
        return self.plugins is not None and self.plugins.serving()

    async def stop(self) -> None:
        if self._starting is not None:
            self._starting.cancel()
            await asyncio.gather(self._starting, return_exceptions=True)
        if self.plugins is not None:
            await self.plugins.stop()
