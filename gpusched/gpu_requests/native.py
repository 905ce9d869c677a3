"""gpusched's own request form: shared GPUs by VRAM slice, and the modifiers of every form.

Resources (in a container's limits)::

    gpusched.io/gpu: N        shared GPUs (a positive whole number)
    gpusched.io/vram: 20Gi    VRAM on each of them (a quantity; required for shared GPUs)

Annotations (they also modify ``nvidia.com/gpu``, MIG and the foreign forms)::

    gpusched.io/priority          "0" (highest) .. "4"; default 0
    gpusched.io/exclusive         "true" | "false": an idle GPU that nobody joins
    gpusched.io/swap-from-vram    "true" | "false" (default "false"): may use overcommitted VRAM
    gpusched.io/gpu-class         a GPUClass name
    gpusched.io/gpu-ids-request   "0,2": these device indices, one per GPU asked
    gpusched.io/preferred-node    a node name, preferred (not required)
    gpusched.io/mig-fallback      "1g.10gb,1g.5gb": MIG profiles to accept instead, in order
    gpusched.io/topology          "Required" | "Preferred" (default): how the two below bind
    gpusched.io/min-bandwidth-gbps  "600": GB/s (both directions) between any two of its GPUs
    gpusched.io/contiguous        "true": its GPUs connected over the NVLinks among them

One pass over the annotations and the containers: O(containers + annotations).
"""

from __future__ import annotations

from typing import Final

from gpusched.annotations import (
    CONTIGUOUS,
    MIN_BANDWIDTH_GBPS,
    PREFIX,
    PRIORITY,
    PRIORITY_LEVELS,
    TOPOLOGY,
    AnnotationError,
    parse_priority,
)

from ._common import (
    Partial,
    PodView,
    RequestError,
    parse_bool,
    parse_mib_quantity,
    parse_name,
    parse_profile,
)

__all__ = [
    "ANNOTATIONS",
    "CONTIGUOUS",
    "EXCLUSIVE",
    "GPU_CLASS",
    "GPU_IDS_REQUEST",
    "MIG_FALLBACK",
    "MIN_BANDWIDTH_GBPS",
    "PREFERRED_NODE",
    "RESOURCES",
    "RESOURCE_SHARED_GPU",
    "RESOURCE_VRAM",
    "SOURCE",
    "SWAP_FROM_VRAM",
    "TOPOLOGY",
    "TOPOLOGY_MODES",
    "parse_bandwidth",
    "parse_fallbacks",
    "parse_gpu_ids",
    "parse_priority_text",
    "parse_topology_mode",
    "read",
]

SOURCE: Final = "gpusched"
RESOURCE_SHARED_GPU: Final = PREFIX + "gpu"
RESOURCE_VRAM: Final = PREFIX + "vram"
EXCLUSIVE: Final = PREFIX + "exclusive"
SWAP_FROM_VRAM: Final = PREFIX + "swap-from-vram"
GPU_CLASS: Final = PREFIX + "gpu-class"
GPU_IDS_REQUEST: Final = PREFIX + "gpu-ids-request"
PREFERRED_NODE: Final = PREFIX + "preferred-node"
MIG_FALLBACK: Final = PREFIX + "mig-fallback"
RESOURCES: Final = frozenset({RESOURCE_SHARED_GPU, RESOURCE_VRAM})
"""The container resources this form reads (the package's fast path skips pods without any)."""
ANNOTATIONS: Final = frozenset(
    {
        PRIORITY,
        EXCLUSIVE,
        SWAP_FROM_VRAM,
        GPU_CLASS,
        GPU_IDS_REQUEST,
        PREFERRED_NODE,
        MIG_FALLBACK,
        TOPOLOGY,
        MIN_BANDWIDTH_GBPS,
        CONTIGUOUS,
    }
)
"""The annotations this form reads."""

_PRIORITY_TEXTS: Final = {str(level): level for level in PRIORITY_LEVELS}


def parse_priority_text(text: str) -> int:
    """The level of a ``gpusched.io/priority`` annotation's text (:func:`parse_priority`'s
    rule); a dict lookup for the usual ``"0"`` .. ``"4"``."""
    level = _PRIORITY_TEXTS.get(text)
    if level is not None:
        return level
    try:
        return parse_priority({"metadata": {"annotations": {PRIORITY: text}}})
    except AnnotationError as exc:
        raise RequestError(str(exc)) from None


TOPOLOGY_MODES: Final = ("Required", "Preferred")
"""``gpusched.io/topology`` values, as the GpuClaim's ``topology.mode`` spells them."""
_MAX_GBPS: Final = 100_000


def parse_topology_mode(name: str, text: str) -> str:
    """``"Required"`` or ``"Preferred"``, spelled exactly so (Kubernetes enums are
    case-sensitive); a wrong case names the right spelling."""
    value = text.strip()
    if value in TOPOLOGY_MODES:
        return value
    near = next((m for m in TOPOLOGY_MODES if m.lower() == value.lower()), None)
    hint = f'; write "{near}"' if near else ""
    raise RequestError(f'{name}: "{text}" must be "Required" or "Preferred"{hint}')


def parse_bandwidth(name: str, text: str) -> float:
    """A positive number of GB/s, digits with at most one decimal point (``"600"``,
    ``"112.5"``), at most 100000; no unit (it is in the annotation's name)."""
    value = text.strip()
    whole, dot, fraction = value.partition(".")
    ok = (
        whole.isdigit()
        and whole.isascii()
        and (not dot or (fraction.isdigit() and fraction.isascii()))
    )
    gbps = float(value) if ok else 0.0
    if not ok or not 0 < gbps <= _MAX_GBPS:
        raise RequestError(
            f'{name}: "{text}" must be a positive number of GB/s (both directions, as NVIDIA '
            f'quotes NVLink), without a unit, at most {_MAX_GBPS}: e.g. "600" (an H100 pair on '
            "NVSwitch moves 900, a V100 NV2 pair 100)"
        )
    return gbps


def parse_gpu_ids(name: str, text: str) -> tuple[int, ...]:
    """``"0,2"`` -> ``(0, 2)``: distinct non-negative device indices, in the order given."""
    ids: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or not part.isascii():
            raise RequestError(
                f'{name}: "{text}" must list GPU indices as non-negative whole numbers '
                'separated by commas, e.g. "0,2"'
            )
        index = int(part)
        if index in ids:
            raise RequestError(
                f'{name}: "{text}" lists GPU {index} twice; list each device index once'
            )
        ids.append(index)
    return tuple(ids)


def parse_fallbacks(name: str, text: str) -> tuple[str, ...]:
    """``"2g.20gb, 1g.10gb"`` -> ``("2g.20gb", "1g.10gb")``: distinct MIG profiles, in order."""
    profiles: list[str] = []
    for part in text.split(","):
        profile = parse_profile(name, part)
        if profile in profiles:
            raise RequestError(f'{name}: "{text}" lists {profile} twice; list each profile once')
        profiles.append(profile)
    return tuple(profiles)


def read(pod: PodView) -> Partial | None:
    """The fields of gpusched's form the pod states; None when it uses none of them."""
    out = Partial(SOURCE)
    count = pod.total(RESOURCE_SHARED_GPU)
    if count:
        out.give("mode", "shared", f'{RESOURCE_SHARED_GPU}: "{count}"')
        out.give("count", count, f'{RESOURCE_SHARED_GPU}: "{count}"')
    vram = pod.per_gpu(RESOURCE_VRAM, owner=RESOURCE_SHARED_GPU)
    if vram is not None:
        out.give("vram_mib", parse_mib_quantity(RESOURCE_VRAM, vram), f'{RESOURCE_VRAM}: "{vram}"')
    ann = pod.annotation
    if (text := ann(PRIORITY)) is not None:
        out.give("priority", parse_priority_text(text), f'{PRIORITY}: "{text}"')
    if (text := ann(EXCLUSIVE)) is not None:
        out.give("exclusive", parse_bool(EXCLUSIVE, text), f'{EXCLUSIVE}: "{text}"')
    if (text := ann(SWAP_FROM_VRAM)) is not None:
        out.give("swap_from_vram", parse_bool(SWAP_FROM_VRAM, text), f'{SWAP_FROM_VRAM}: "{text}"')
    if (text := ann(GPU_CLASS)) is not None:
        out.give("gpu_class", parse_name(GPU_CLASS, text, "GPUClass"), f'{GPU_CLASS}: "{text}"')
    if (text := ann(GPU_IDS_REQUEST)) is not None:
        ids = parse_gpu_ids(GPU_IDS_REQUEST, text)
        out.give("gpu_ids", ids, f'{GPU_IDS_REQUEST}: "{text}"')
    if (text := ann(PREFERRED_NODE)) is not None:
        node = parse_name(PREFERRED_NODE, text, "node")
        out.give("preferred_node", node, f'{PREFERRED_NODE}: "{text}"')
    if (text := ann(MIG_FALLBACK)) is not None:
        fallbacks = parse_fallbacks(MIG_FALLBACK, text)
        out.give("mig_fallbacks", fallbacks, f'{MIG_FALLBACK}: "{text}"')
    if (text := ann(TOPOLOGY)) is not None:
        mode = parse_topology_mode(TOPOLOGY, text)
        out.give("topology", mode, f'{TOPOLOGY}: "{text}"')
    if (text := ann(MIN_BANDWIDTH_GBPS)) is not None:
        gbps = parse_bandwidth(MIN_BANDWIDTH_GBPS, text)
        out.give("min_bandwidth_gbps", gbps, f'{MIN_BANDWIDTH_GBPS}: "{text}"')
    if (text := ann(CONTIGUOUS)) is not None:
        out.give("contiguous", parse_bool(CONTIGUOUS, text), f'{CONTIGUOUS}: "{text}"')
    out.defaults["swap_from_vram"] = False
    return out if out.values else None
