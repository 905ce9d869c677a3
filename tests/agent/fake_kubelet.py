"""A fake kubelet device manager that speaks the real ``deviceplugin/v1beta1`` gRPC API.

It plays what ``pkg/kubelet/cm/devicemanager`` does, on a unix socket in a test's directory:

- serves ``Registration`` on ``<dir>/kubelet.sock``; ``Register`` checks the version
  (``v1beta1``) and that the resource is an extended resource name, dials the plugin's socket
  ``<dir>/<endpoint>``, asks its options, and follows its ``ListAndWatch`` stream (as the
  kubelet's plugin client does), keeping each resource's devices and their health;
- :meth:`admit` admits a pod as the device manager does: containers in order (init, then app),
  for each device-plugin resource in the limits it picks free healthy devices (reusing an init
  container's devices for the app containers), asks ``GetPreferredAllocation`` when the plugin
  offers it, calls ``Allocate`` with one container request, and on a failed call rejects the
  pod with the kubelet's message ("Allocate failed due to ..., which is unexpected");
  admissions are serial, as the kubelet's pod-addition loop is;
- :meth:`restart` is a kubelet restart: the server stops, every socket in the directory is
  removed (``removeContents``) and a new ``kubelet.sock`` is served.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from gpusched.agent.deviceplugin import api_pb2 as api
from gpusched.agent.deviceplugin import api_pb2_grpc as api_grpc
from gpusched.quantity import parse_quantity

__all__ = ["AdmissionError", "FakeKubelet", "Plugin"]

_EXTENDED = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


class AdmissionError(Exception):
    """The pod was rejected (UnexpectedAdmissionError); the message is the kubelet's."""


@dataclass
class Plugin:
    """One registered resource as the kubelet sees it."""

    resource: str
    endpoint: str
    options: api.DevicePluginOptions
    channel: grpc.aio.Channel
    stub: api_grpc.DevicePluginAsyncStub
    devices: dict[str, str] = field(default_factory=dict)
    """Device ID -> health, from the last ListAndWatch response."""
    updates: int = 0
    stream: asyncio.Task[None] | None = None


class FakeKubelet(api_grpc.RegistrationServicer):
    def __init__(self, socket_dir: Path) -> None:
        self.socket_dir = socket_dir
        self.plugins: dict[str, Plugin] = {}
        self.registrations: list[api.RegisterRequest] = []
        self.allocated: dict[str, dict[str, set[str]]] = {}
        """Pod uid -> resource -> device IDs it holds."""
        self.responses: dict[str, dict[str, list[api.ContainerAllocateResponse]]] = {}
        """Pod uid -> container name -> Allocate responses (one per resource)."""
        self._server: grpc.aio.Server | None = None
        self._changed = asyncio.Condition()
        self._admit = asyncio.Lock()

    @property
    def socket(self) -> Path:
        return self.socket_dir / "kubelet.sock"

    async def start(self) -> None:
        server = grpc.aio.server()
        api_grpc.add_RegistrationServicer_to_server(self, server)
        server.add_insecure_port(f"unix://{self.socket}")
        await server.start()
        self._server = server

    async def stop(self) -> None:
        for plugin in self.plugins.values():
            await self._disconnect(plugin)
        self.plugins.clear()
        if self._server is not None:
            await self._server.stop(grace=None)
            self._server = None

    async def restart(self) -> None:
        """Stop, remove every socket in the directory (as a starting kubelet does), start."""
        await self.stop()
        for path in self.socket_dir.iterdir():
            if path.is_socket():
                path.unlink()
        self.allocated.clear()
        await self.start()

    async def _disconnect(self, plugin: Plugin) -> None:
        if plugin.stream is not None:
            plugin.stream.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await plugin.stream
        await plugin.channel.close()

    # -- Registration -------------------------------------------------------------------------

    async def Register(
        self, request: api.RegisterRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> api.Empty:
        if request.version != "v1beta1":
            await context.abort(
                grpc.StatusCode.UNKNOWN,
                f"requested device plugin version {request.version} is not supported",
            )
        if not _EXTENDED.match(request.resource_name) or request.resource_name.startswith(
            "kubernetes.io/"
        ):
            await context.abort(
                grpc.StatusCode.UNKNOWN, f"invalid resource name {request.resource_name!r}"
            )
        channel = grpc.aio.insecure_channel(f"unix://{self.socket_dir / request.endpoint}")
        stub = api_grpc.DevicePluginStub(channel)
        options = await stub.GetDevicePluginOptions(api.Empty(), timeout=10)
        old = self.plugins.get(request.resource_name)
        if old is not None:
            await self._disconnect(old)
        plugin = Plugin(request.resource_name, request.endpoint, options, channel, stub)
        self.plugins[request.resource_name] = plugin
        self.registrations.append(request)
        plugin.stream = asyncio.create_task(self._follow(plugin), name=f"law-{plugin.resource}")
        return api.Empty()

    async def _follow(self, plugin: Plugin) -> None:
        with contextlib.suppress(grpc.aio.AioRpcError):
            async for response in plugin.stub.ListAndWatch(api.Empty()):
                plugin.devices = {d.ID: d.health for d in response.devices}
                plugin.updates += 1
                async with self._changed:
                    self._changed.notify_all()

    async def wait_for(self, check: Callable[[], bool], timeout: float = 10.0) -> None:
        """Until ``check()`` holds after some ListAndWatch update or registration."""

        async def wait() -> None:
            async with self._changed:
                await self._changed.wait_for(check)

        await asyncio.wait_for(wait(), timeout)

    def healthy(self, resource: str) -> set[str]:
        plugin = self.plugins.get(resource)
        if plugin is None:
            return set()
        return {i for i, h in plugin.devices.items() if h == "Healthy"}

    # -- admission ----------------------------------------------------------------------------

    async def admit(
        self, pod: Mapping[str, Any]
    ) -> dict[str, dict[str, api.ContainerAllocateResponse]]:
        """Allocate the pod's device-plugin resources; container -> resource -> response."""
        async with self._admit:
            return await self._admit_one(pod)

    async def _admit_one(
        self, pod: Mapping[str, Any]
    ) -> dict[str, dict[str, api.ContainerAllocateResponse]]:
        uid = pod["metadata"]["uid"]
        spec = pod["spec"]
        out: dict[str, dict[str, api.ContainerAllocateResponse]] = {}
        reusable: dict[str, set[str]] = {}
        for init in spec.get("initContainers") or []:
            got = await self._container(uid, init, reusable, out)
            for resource, ids in got.items():
                reusable.setdefault(resource, set()).update(ids)
        for app in spec["containers"]:
            got = await self._container(uid, app, reusable, out)
            for resource, ids in got.items():
                reusable.get(resource, set()).difference_update(ids)
        return out

    async def _container(
        self,
        uid: str,
        container: Mapping[str, Any],
        reusable: dict[str, set[str]],
        out: dict[str, dict[str, api.ContainerAllocateResponse]],
    ) -> dict[str, list[str]]:
        limits = (container.get("resources") or {}).get("limits") or {}
        got: dict[str, list[str]] = {}
        for resource, raw in limits.items():
            plugin = self.plugins.get(resource)
            if plugin is None:
                continue
            needed = int(parse_quantity(str(raw)))
            if needed <= 0:
                continue
            held = self.allocated.setdefault(uid, {}).setdefault(resource, set())
            chosen = sorted(reusable.get(resource, set()))[:needed]
            in_use = {i for pod in self.allocated.values() for i in pod.get(resource, set())}
            available = sorted(self.healthy(resource) - in_use - set(chosen))
            if len(available) < needed - len(chosen):
                raise AdmissionError(
                    f"Allocate failed due to requested number of devices unavailable for "
                    f"{resource}. Requested: {needed}, Available: {len(available)}, which is "
                    "unexpected"
                )
            if len(chosen) < needed:
                if plugin.options.get_preferred_allocation_available:
                    preferred = await plugin.stub.GetPreferredAllocation(
                        api.PreferredAllocationRequest(
                            container_requests=[
                                api.ContainerPreferredAllocationRequest(
                                    available_deviceIDs=[*chosen, *available],
                                    must_include_deviceIDs=chosen,
                                    allocation_size=needed,
                                )
                            ]
                        )
                    )
                    picks = [
                        i
                        for i in preferred.container_responses[0].deviceIDs
                        if i in available and i not in chosen
                    ]
                    chosen += picks[: needed - len(chosen)]
                chosen += [i for i in available if i not in chosen][: needed - len(chosen)]
            held.update(chosen)
            try:
                response = await plugin.stub.Allocate(
                    api.AllocateRequest(
                        container_requests=[api.ContainerAllocateRequest(devices_ids=chosen)]
                    ),
                    timeout=10,
                )
            except grpc.aio.AioRpcError as exc:
                held.difference_update(chosen)
                raise AdmissionError(
                    f"Allocate failed due to rpc error: code = {exc.code().name} desc = "
                    f"{exc.details()}, which is unexpected"
                ) from None
            name = str(container["name"])
            out.setdefault(name, {})[resource] = response.container_responses[0]
            self.responses.setdefault(uid, {}).setdefault(name, []).append(
                response.container_responses[0]
            )
            got[resource] = chosen
        return got
