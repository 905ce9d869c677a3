"""The node agent's kubelet device plugin: gpusched's resources, and the scheduler's devices.

:class:`DevicePlugins` serves the kubelet's ``deviceplugin/v1beta1`` API (the vendored
``api.proto`` and its generated ``api_pb2*`` modules) for every resource of
:func:`advertise`, and answers each Allocate with the devices gpusched wrote on the pod.
docs/device_plugin.md describes the resources, the pod lookup and how to switch a node from
NVIDIA's plugin.
"""

from gpusched.agent.deviceplugin.allocation import ALLOCATED, AllocationError
from gpusched.agent.deviceplugin.devices import (
    SHARED_RESOURCES,
    Advertised,
    Granted,
    advertise,
    container_response,
)
from gpusched.agent.deviceplugin.server import (
    API_VERSION,
    DEFAULT_SOCKET_DIR,
    KUBELET_SOCKET,
    DevicePluginListener,
    DevicePlugins,
    socket_name,
)

__all__ = [
    "ALLOCATED",
    "API_VERSION",
    "DEFAULT_SOCKET_DIR",
    "KUBELET_SOCKET",
    "SHARED_RESOURCES",
    "Advertised",
    "AllocationError",
    "DevicePluginListener",
    "DevicePlugins",
    "Granted",
    "advertise",
    "container_response",
    "socket_name",
]
