"""What the mutating webhook changes in a pod: the device environment, and the MIG fallback seam.

**The environment.** A container learns its devices from environment variables that are
Downward API references (``valueFrom.fieldRef``) to the annotations the scheduler's Binding
writes (``gpusched.annotations``). At admission those annotations do not exist yet, and that is
fine: the kubelet resolves ``fieldRef`` values when it starts a container
(kubelet_pods.go, ``makeEnvironmentVariables`` -> ``podFieldSelectorRuntimeValue`` ->
``fieldpath.ExtractFieldPathAsString``, which reads ``metadata.annotations[key]`` from the pod
it was given). A kubelet is only given pods bound to its node, and the Binding sets the
annotations in the same write as ``spec.nodeName``, so they are there when any container
(init or app) starts. A missing key reads as ``""``, never an error, and an empty
``CUDA_VISIBLE_DEVICES`` shows no GPU at all (CUDA Programming Guide, "CUDA Environment
Variables"): a container that somehow starts without an assignment sees nothing rather than
every GPU.

Which variables depends on who gives the container its devices:

- *shared* pods (``gpusched.io/gpu``, HAMi's ``nvidia.com/gpumem*``/``gpucores``,
  ``woolyai.com/gpu``, KAI's ``gpu-fraction``/``gpu-memory`` annotations): no stock device
  plugin picks their GPU, so gpusched's assignment is what the runtime must expose.
  ``NVIDIA_VISIBLE_DEVICES`` (read by the NVIDIA container runtime) and ``CUDA_VISIBLE_DEVICES``
  get the *UUIDs*: inside a container the runtime renumbers its devices from 0, so node
  indices would name the wrong GPU, while CUDA accepts ``GPU-...``/``MIG-...`` UUIDs in
  ``CUDA_VISIBLE_DEVICES`` (CUDA Programming Guide, "CUDA Environment Variables"), which mean
  the same device inside and outside. ``GPUSCHED_VRAM_MIB`` carries the VRAM slice per GPU.
- *device-plugin* pods (``nvidia.com/gpu``, ``nvidia.com/mig-*``): the node's device plugin
  chooses the devices and sets ``NVIDIA_VISIBLE_DEVICES`` itself (its Allocate response). An
  explicit container variable would override it (kubelet ``GenerateRunContainerOptions``
  appends the container's variables after the device manager's, and the runtime keeps the
  last of a name), so the container would use
  devices the kubelet's device manager counts as free. These pods get only
  ``GPUSCHED_GPU_IDS``/``GPUSCHED_GPU_UUIDS``, unless ``visible_devices_for_device_plugin_pods``
  says the node's device plugin honours gpusched's assignment.

Only containers that name a GPU resource are changed, init containers included (they get
devices from the same allocation and may need to know them, e.g. to pre-load a model); giving
``NVIDIA_VISIBLE_DEVICES`` to a sidecar that asked for no GPU would hand it the pod's GPUs. A
pod that asks by annotation only (KAI) has all its app containers changed.

**Never overwrite.** A variable the user set is kept, and the response carries an admission
warning (kubectl prints it) saying so and how to get gpusched's value. A variable that already
holds gpusched's reference is left alone, so a second pass (``reinvocationPolicy: IfNeeded``)
changes nothing.

**MIG fallback** needs cluster knowledge (which profiles are free where) that this module does
not have: ``MigFallback`` is the seam, called for gpusched pods that ask for a MIG profile
(``gpusched.webhook.mig_view.MigView`` fills it from informers); ``fallback_ops`` builds the
patch once the caller has chosen.

Cost: O(containers x variables) per pod, no I/O besides the fallback hook.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpusched.annotations import GPU_IDS, GPU_UUIDS, PREFIX, RESERVED_VRAM_MIB
from gpusched.cache import MIG_RESOURCE_PREFIX
from gpusched.gpu_requests import RequestError, hami, kai, native, read_gpu_request, woolyai
from gpusched.inventory import RESOURCE_GPU

__all__ = [
    "ENV_GPU_IDS",
    "ENV_GPU_UUIDS",
    "ENV_VRAM_MIB",
    "MIG_FALLBACK_APPLIED",
    "MIG_RESOURCE_PREFIX",
    "MigFallback",
    "Mutation",
    "PatchOp",
    "annotation_env",
    "fallback_ops",
    "gpu_kind",
    "mutate_pod",
    "pointer",
]

PatchOp = dict[str, Any]
"""One RFC 6902 JSON patch operation."""

MigFallback = Callable[[Mapping[str, Any]], Awaitable[Sequence[PatchOp] | None]]
"""``async (pod) -> patch ops | None``: the ops that move a MIG pod to a fallback profile
(``fallback_ops`` builds them), or None to leave its request as it is. Called at admission for
each pod of gpusched's that asks for an ``nvidia.com/mig-*`` resource; the ops are applied
before the environment's and must touch only resources and annotations."""

ENV_GPU_IDS = "GPUSCHED_GPU_IDS"
ENV_GPU_UUIDS = "GPUSCHED_GPU_UUIDS"
ENV_VRAM_MIB = "GPUSCHED_VRAM_MIB"
NVIDIA_VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
MIG_FALLBACK_APPLIED = PREFIX + "mig-fallback-applied"

WHOLE_GPU = RESOURCE_GPU
# Which names make a container's request a share of a GPU, and which annotations a pod's: the
# readers' own names (gpusched's, HAMi's, WoolyAI's, KAI's), not a list kept here. With
# nvidia.com/gpu, HAMi's memory and core limits turn whole GPUs into shares.
SHARED_RESOURCES = frozenset(
    {
        native.RESOURCE_SHARED_GPU,
        native.RESOURCE_VRAM,
        hami.RESOURCE_GPUMEM,
        hami.RESOURCE_GPUMEM_PERCENTAGE,
        hami.RESOURCE_GPUCORES,
        woolyai.RESOURCE_GPU,
    }
)
# KAI-Scheduler asks for a fraction of a GPU with pod annotations and no resource at all.
SHARED_ANNOTATIONS = frozenset({kai.GPU_FRACTION, kai.GPU_MEMORY})

_SHARED_ENV = (
    (NVIDIA_VISIBLE_DEVICES, GPU_UUIDS),
    (CUDA_VISIBLE_DEVICES, GPU_UUIDS),
    (ENV_GPU_IDS, GPU_IDS),
    (ENV_GPU_UUIDS, GPU_UUIDS),
    (ENV_VRAM_MIB, RESERVED_VRAM_MIB),
)
_DEVICE_PLUGIN_ENV = (
    (ENV_GPU_IDS, GPU_IDS),
    (ENV_GPU_UUIDS, GPU_UUIDS),
)


def pointer(*parts: str | int) -> str:
    """A JSON pointer (RFC 6901) to ``parts``: ``/`` in a key is written ``~1``."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def annotation_env(name: str, annotation: str) -> dict[str, Any]:
    """The env entry that reads ``annotation`` of the pod when its container starts."""
    return {
        "name": name,
        "valueFrom": {
            "fieldRef": {"apiVersion": "v1", "fieldPath": f"metadata.annotations['{annotation}']"}
        },
    }


def _resource_names(container: Mapping[str, Any]) -> set[str]:
    resources = container.get("resources") or {}
    return set(resources.get("limits") or {}) | set(resources.get("requests") or {})


def _container_kind(names: Iterable[str]) -> str | None:
    names = set(names)
    if names & SHARED_RESOURCES:
        return "shared"
    if WHOLE_GPU in names or any(n.startswith(MIG_RESOURCE_PREFIX) for n in names):
        return "device-plugin"
    return None


def gpu_kind(pod: Mapping[str, Any]) -> str | None:
    """``"shared"``, ``"device-plugin"`` (whole GPUs or MIG) or None for a pod without GPUs.

    The scheduler's readers decide (``read_gpu_request``: mode ``shared``, or ``whole``/``mig``).
    A request they reject is denied by the validating webhook with their message; it gets the
    environment its resource names call for, in case the validator is not registered.
    """
    try:
        request = read_gpu_request(pod)
    except RequestError:
        return _kind_by_names(pod)
    if request is None:
        return None
    return "shared" if request.mode == "shared" else "device-plugin"


def _kind_by_names(pod: Mapping[str, Any]) -> str | None:
    spec = pod.get("spec") or {}
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    kinds = {
        _container_kind(_resource_names(c))
        for group in ("initContainers", "containers")
        for c in spec.get(group) or []
    }
    if "shared" in kinds or SHARED_ANNOTATIONS & set(annotations):
        return "shared"
    return "device-plugin" if "device-plugin" in kinds else None


def _asks_for_mig(pod: Mapping[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    return any(
        name.startswith(MIG_RESOURCE_PREFIX)
        for group in ("initContainers", "containers")
        for c in spec.get(group) or []
        for name in _resource_names(c)
    )


@dataclass
class Mutation:
    """The patch for one pod and the warnings for its author."""

    ops: list[PatchOp] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _env_ops(pod: Mapping[str, Any], *, visible_devices_for_device_plugin_pods: bool) -> Mutation:
    kind = gpu_kind(pod)
    out = Mutation()
    if kind is None:
        return out
    wanted: tuple[tuple[str, str], ...] = _SHARED_ENV
    if kind == "device-plugin" and not visible_devices_for_device_plugin_pods:
        wanted = _DEVICE_PLUGIN_ENV
    spec = pod.get("spec") or {}
    by_annotation_only = not any(
        _container_kind(_resource_names(c))
        for group in ("initContainers", "containers")
        for c in spec.get(group) or []
    )
    for group in ("initContainers", "containers"):
        for index, container in enumerate(spec.get(group) or []):
            asks = _container_kind(_resource_names(container)) is not None
            if not asks and not (by_annotation_only and group == "containers"):
                continue
            env: list[dict[str, Any]] = list(container.get("env") or [])
            existing = {e.get("name"): e for e in env}
            added = []
            for name, annotation in wanted:
                entry = annotation_env(name, annotation)
                if name not in existing:
                    added.append(entry)
                elif existing[name] != entry:
                    out.warnings.append(
                        f'container "{container.get("name")}" sets {name} itself, so gpusched '
                        f"left it as set; remove it from the container's env to get the "
                        f"value gpusched assigns (annotation {annotation})"
                    )
            if not added:
                continue
            path = pointer("spec", group, index, "env")
            if "env" not in container or container["env"] is None:
                out.ops.append({"op": "add", "path": path, "value": added})
            else:
                out.ops += [{"op": "add", "path": path + "/-", "value": e} for e in added]
    return out


async def mutate_pod(
    pod: Mapping[str, Any],
    *,
    scheduler_names: Iterable[str] = ("gpusched",),
    mig_fallback: MigFallback | None = None,
    visible_devices_for_device_plugin_pods: bool = False,
) -> Mutation:
    """The patch for a pod being created: empty unless it is gpusched's and asks for GPUs.

    The MIG fallback's ops (when ``mig_fallback`` gives some) come first, then the
    environment's, computed on the pod as sent (the fallback changes no env).
    """
    spec = pod.get("spec") or {}
    if spec.get("schedulerName") not in set(scheduler_names):
        return Mutation()
    out = Mutation()
    if mig_fallback is not None and _asks_for_mig(pod):
        out.ops += list(await mig_fallback(pod) or ())
    env = _env_ops(
        pod, visible_devices_for_device_plugin_pods=visible_devices_for_device_plugin_pods
    )
    out.ops += env.ops
    out.warnings += env.warnings
    return out


def fallback_ops(pod: Mapping[str, Any], preferred: str, fallback: str) -> list[PatchOp]:
    """The ops that move every container's ``nvidia.com/mig-<preferred>`` request to
    ``nvidia.com/mig-<fallback>`` (same count, limits and requests) and record
    ``gpusched.io/mig-fallback-applied: "<preferred>-><fallback>"``, as seed 001's webhook does
    with its own annotation. Profiles are given without the prefix (``"2g.20gb"``).

    ``gpusched.io/mig-fallback`` keeps only the profiles listed after ``fallback`` (removed when
    none are): the readers refuse a list that names the profile asked for, and the profiles
    before it were not free either.
    """
    old, new = MIG_RESOURCE_PREFIX + preferred, MIG_RESOURCE_PREFIX + fallback
    ops: list[PatchOp] = []
    spec = pod.get("spec") or {}
    for group in ("initContainers", "containers"):
        for index, container in enumerate(spec.get(group) or []):
            resources = container.get("resources") or {}
            for section in ("limits", "requests"):
                values = resources.get(section) or {}
                if old in values:
                    base = ("spec", group, index, "resources", section)
                    ops.append({"op": "remove", "path": pointer(*base, old)})
                    ops.append({"op": "add", "path": pointer(*base, new), "value": values[old]})
    value = f"{preferred}->{fallback}"
    annotations = (pod.get("metadata") or {}).get("annotations")
    if annotations is None:
        ops.append({"op": "add", "path": "/metadata/annotations", "value": {}})
    elif (listed := annotations.get(native.MIG_FALLBACK)) is not None:
        try:
            fallbacks = native.parse_fallbacks(native.MIG_FALLBACK, listed)
        except RequestError:
            fallbacks = ()
        rest = fallbacks[fallbacks.index(fallback) + 1 :] if fallback in fallbacks else fallbacks
        path = pointer("metadata", "annotations", native.MIG_FALLBACK)
        if rest:
            ops.append({"op": "replace", "path": path, "value": ",".join(rest)})
        else:
            ops.append({"op": "remove", "path": path})
    ops.append(
        {
            "op": "add",
            "path": pointer("metadata", "annotations", MIG_FALLBACK_APPLIED),
            "value": value,
        }
    )
    return ops
