"""The GPU Scheduler's GpuClaim (seed 004, ``gpu.scheduling/v1``): GPUs asked by an object.

A pod writes the annotation ``gpu.scheduling/claim: NAME``; the GpuClaim ``NAME`` in the pod's
namespace says what it needs, and this reader states it as the other forms do::

    spec.devices.count              count (whole GPUs; MIG devices with migProfile)
    spec.devices.exclusivity        Exclusive (default): whole GPUs; Shared: a VRAM slice of
                                    each GPU (needs vramPerDevice), beside other pods
    spec.devices.policy             contiguous: the GPUs joined over the NVLinks among them
    spec.devices.vramPerDevice      Shared: VRAM on each GPU ("20Gi")
    spec.devices.gpuClass           a GPUClass
    spec.devices.migProfile         MIG devices of this profile ("1g.10gb")
    spec.topology.mode              Required | Preferred (default)
    spec.topology.minBandwidthGBps  GB/s the slowest pair of the GPUs must move

The fields merge with the pod's own (``nvidia.com/gpu`` equal to the count combines; another
count is a :class:`RequestError` naming both). The kubelet hands devices to a container by its
resources, so the pod must also ask for the claim's kind of device (``nvidia.com/gpu: N``,
``nvidia.com/mig-<profile>: N`` or ``gpusched.io/gpu: N``); without it the message says
what to add.

The claim's spec comes from the cluster, so the reader asks the :class:`ClaimSpecs` its
caller passes (``read_gpu_request(pod, claims)``; in the scheduler, ``Handle.claim_specs``:
the GpuClaims plugin's manager). Without one (the webhook, the node agent, the cache's
nominations, a profile without GpuClaims) the annotation is not read: those see the pod's own
fields, which state the claim's count too. When the source does not know the claim, a
:class:`RequestError` says it does not exist (the plugin keeps such a pod pending and retries
it when the claim appears). O(annotations + containers) plus one dict lookup.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from gpusched.inventory import RESOURCE_GPU

from . import native, nvidia
from ._common import (
    ClaimSpecs,
    Partial,
    PodView,
    RequestError,
    parse_mib_quantity,
    parse_name,
    parse_profile,
)

__all__ = [
    "ANNOTATION",
    "ANNOTATIONS",
    "GROUP",
    "KIND",
    "PLURAL",
    "RESOURCES",
    "SOURCE",
    "VERSION",
    "ClaimSpecs",
    "claim_name",
    "partial_from_spec",
    "read",
]

SOURCE: Final = "gpuclaim"
GROUP: Final = "gpu.scheduling"
VERSION: Final = "v1"
PLURAL: Final = "gpuclaims"
KIND: Final = "GpuClaim"
ANNOTATION: Final = "gpu.scheduling/claim"
ANNOTATIONS: Final = frozenset({ANNOTATION})
"""The annotations this form reads (a pod with one takes the package's general path)."""
RESOURCES: Final[frozenset[str]] = frozenset()


def claim_name(pod: Mapping[str, Any]) -> str | None:
    """The annotation's text (stripped), or ``None`` when the pod names no claim."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    text = annotations.get(ANNOTATION)
    return None if text is None else str(text).strip()


def read(pod: PodView) -> Partial | None:
    """The claim's fields, when the pod names one and the caller gave its claims."""
    text = pod.annotation(ANNOTATION)
    if text is None:
        return None
    if pod.claims is None:
        return None
    name = parse_name(ANNOTATION, text, KIND)
    spec = pod.claims.claim_spec(pod.namespace, name)
    where = f"{KIND} {pod.namespace}/{name}"
    if spec is None:
        raise RequestError(
            f'{ANNOTATION}: "{text}" refers to {where}, which does not exist; create it '
            f"(kubectl get gclaim -n {pod.namespace}), or fix the name; the pod is retried when "
            "it appears"
        )
    partial = partial_from_spec(where, spec)
    partial.give("claim", f"{pod.namespace}/{name}", f'{ANNOTATION}: "{text}"')
    _check_resources(pod, where, partial)
    return partial


def _field(where: str, path: str, value: Any) -> str:
    return f"{where} {path}: {value}"


def partial_from_spec(where: str, spec: Mapping[str, Any]) -> Partial:
    """The fields a claim's ``spec`` states; ``where`` (``GpuClaim ns/name``) names them in
    messages. The CRD's schema already checked types and enums; what it cannot say (a Shared
    claim without VRAM, VRAM on an exclusive claim) is checked here."""
    out = Partial(SOURCE)
    devices = spec.get("devices") or {}
    topology = spec.get("topology") or {}
    count = devices.get("count")
    if type(count) is not int or count < 1:
        raise RequestError(
            f"{_field(where, 'spec.devices.count', count)} must be a whole number, 1 or more"
        )
    exclusivity = devices.get("exclusivity", "Exclusive")
    profile = devices.get("migProfile")
    vram = devices.get("vramPerDevice")
    origin = _field(where, "spec.devices.count", count)
    if profile is not None:
        if exclusivity == "Shared":
            raise RequestError(
                f"{_field(where, 'spec.devices.migProfile', profile)} asks for MIG devices, "
                "which are not shared: remove exclusivity: Shared or the profile"
            )
        out.give("mode", "mig", origin)
        out.give(
            "mig_profile", parse_profile(f"{where} spec.devices.migProfile", str(profile)), origin
        )
    elif exclusivity == "Shared":
        if vram is None:
            raise RequestError(
                f"{_field(where, 'spec.devices.exclusivity', 'Shared')} asks for a slice of each "
                'GPU but says no VRAM: add spec.devices.vramPerDevice: "20Gi", or make it Exclusive'
            )
        out.give("mode", "shared", origin)
    elif exclusivity == "Exclusive":
        out.give("mode", "whole", origin)
    else:
        raise RequestError(
            f"{_field(where, 'spec.devices.exclusivity', exclusivity)} must be Exclusive or Shared"
        )
    out.give("count", count, origin)
    if vram is not None:
        vram_where = _field(where, "spec.devices.vramPerDevice", vram)
        if exclusivity != "Shared":
            raise RequestError(
                f"{vram_where} applies to Shared claims (a slice of each GPU); an Exclusive claim "
                "gets whole GPUs: remove it, or pick GPUs by model with spec.devices.gpuClass"
            )
        out.give("vram_mib", parse_mib_quantity(vram_where, vram), vram_where)
    if (cls := devices.get("gpuClass")) is not None:
        cls_where = _field(where, "spec.devices.gpuClass", cls)
        out.give("gpu_class", parse_name(cls_where, cls, "GPUClass"), cls_where)
    if (policy := devices.get("policy")) is not None:
        if policy != "contiguous":
            raise RequestError(
                f'{_field(where, "spec.devices.policy", policy)} must be "contiguous" (or absent)'
            )
        out.give("contiguous", True, _field(where, "spec.devices.policy", policy))
    if (mode := topology.get("mode")) is not None:
        mode_where = f"{where} spec.topology.mode"
        out.give(
            "topology", native.parse_topology_mode(mode_where, str(mode)), f"{mode_where}: {mode}"
        )
    if (gbps := topology.get("minBandwidthGBps")) is not None:
        gbps_where = f"{where} spec.topology.minBandwidthGBps"
        if type(gbps) not in (int, float) or isinstance(gbps, bool):
            raise RequestError(f"{gbps_where}: {gbps!r} must be a number of GB/s")
        if gbps > 0:  # 0 asks for nothing (the schema's minimum)
            value = native.parse_bandwidth(gbps_where, _number_text(gbps))
            out.give("min_bandwidth_gbps", value, f"{gbps_where}: {gbps}")
    return out


def _number_text(value: float) -> str:
    text = repr(float(value))
    return text.removesuffix(".0") if "e" not in text else str(int(value))


_RESOURCE_OF: Final = {"whole": RESOURCE_GPU, "shared": native.RESOURCE_SHARED_GPU}


def _check_resources(pod: PodView, where: str, partial: Partial) -> None:
    """The pod asks for the claim's kind of device in its resources (module docstring)."""
    mode = partial.values["mode"].value
    count = partial.values["count"].value
    if mode == "mig":
        resource = nvidia.RESOURCE_PREFIX + partial.values["mig_profile"].value
    else:
        resource = _RESOURCE_OF[mode]
    if pod.has_resource(resource):
        return  # any other count: the merge names both
    hint = f'add {resource}: "{count}" to the limits of the container that uses them'
    if mode == "shared":
        hint += f" (with {native.RESOURCE_VRAM} as the claim's vramPerDevice)"
    raise RequestError(
        f"{where} asks for {count} {_KINDS[mode]} but the pod's containers ask for no "
        f"{resource}; {hint}: the kubelet hands devices to containers by that resource"
    )


_KINDS: Final = {"whole": "whole GPU(s)", "shared": "shared GPU(s)", "mig": "MIG device(s)"}
