"""KAI-Scheduler's form: GPU sharing by annotation (NVIDIA/KAI-Scheduler).

Read as KAI validates and reads a pod (``pkg/common/resources``: ``ValidateGPUFractionRequest``,
``GetNumGPUFractionDevices``; the scheduler's ``pod_info``)::

    gpu-fraction: "0.5"             share of each GPU's memory, 0 < f <= 1
    gpu-memory: "2000"              MiB of each GPU, a plain whole number (KAI rejects "2Gi")
    gpu-fraction-num-devices: "2"   how many such GPUs (default 1)

- ``gpu-fraction`` and ``gpu-memory`` are mutually exclusive, and ``gpu-fraction-num-devices``
  needs one of them (KAI's own two rules);
- a fraction beside a whole ``nvidia.com/gpu`` limit is rejected, as KAI does;
- ``gpu-fraction.limit`` / ``gpu-memory.limit`` (KAI's burst limits over the request) cannot
  be honoured: gpusched reserves and isolates nothing beyond the request, so they are rejected
  rather than ignored. ``gpu-fraction-container-name`` only names the container and has no
  effect on placement.

O(annotations + containers).
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Final

from gpusched.inventory import RESOURCE_GPU

from ._common import Partial, PodView, RequestError, parse_plain_int

__all__ = [
    "ANNOTATIONS",
    "GPU_FRACTION",
    "GPU_FRACTION_LIMIT",
    "GPU_FRACTION_NUM_DEVICES",
    "GPU_MEMORY",
    "GPU_MEMORY_LIMIT",
    "RESOURCES",
    "SOURCE",
    "read",
]

SOURCE: Final = "kai"
GPU_FRACTION: Final = "gpu-fraction"
GPU_MEMORY: Final = "gpu-memory"
GPU_FRACTION_NUM_DEVICES: Final = "gpu-fraction-num-devices"
GPU_FRACTION_LIMIT: Final = GPU_FRACTION + ".limit"
GPU_MEMORY_LIMIT: Final = GPU_MEMORY + ".limit"
ANNOTATIONS: Final = frozenset(
    {GPU_FRACTION, GPU_MEMORY, GPU_FRACTION_NUM_DEVICES, GPU_FRACTION_LIMIT, GPU_MEMORY_LIMIT}
)
"""The annotations this form reads (the package's fast path skips pods without any)."""
RESOURCES: Final = frozenset({RESOURCE_GPU})
"""The container resources it reads (``nvidia.com/gpu``, only beside its annotations)."""

_DECIMAL: Final = re.compile(r"^(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)$")


def _fraction(text: str) -> Fraction:
    stripped = text.strip()
    value = Fraction(stripped) if _DECIMAL.match(stripped) else None
    if value is None or not 0 < value <= 1:
        raise RequestError(
            f'{GPU_FRACTION}: "{text}" is not a share of a GPU; write a decimal number above 0 '
            'and at most 1, e.g. "0.5"'
        )
    return value


def read(pod: PodView) -> Partial | None:
    """The shared request of a pod in KAI's form; None when the pod does not use it."""
    fraction = pod.annotation(GPU_FRACTION) or None
    memory = pod.annotation(GPU_MEMORY) or None
    devices = pod.annotation(GPU_FRACTION_NUM_DEVICES)
    for limit in (GPU_FRACTION_LIMIT, GPU_MEMORY_LIMIT):
        if pod.annotation(limit) is not None:
            raise RequestError(
                f"{limit} asks KAI to let the pod burst above its request, which gpusched "
                f"cannot enforce; remove {limit} (the pod is placed by its "
                f"{GPU_FRACTION} or {GPU_MEMORY} request)"
            )
    if fraction is None and memory is None:
        if devices is not None:
            raise RequestError(
                f'{GPU_FRACTION_NUM_DEVICES}: "{devices}" needs {GPU_FRACTION} or {GPU_MEMORY} '
                "to say how much of each GPU; add one of them"
            )
        return None
    if fraction is not None and memory is not None:
        raise RequestError(
            f'{GPU_FRACTION}: "{fraction}" and {GPU_MEMORY}: "{memory}" are both set; KAI '
            "accepts one of them: keep the share or the MiB"
        )
    if pod.has_resource(RESOURCE_GPU):
        raise RequestError(
            f"the pod asks for a GPU share ({GPU_FRACTION if fraction else GPU_MEMORY}) and for "
            f"whole GPUs ({RESOURCE_GPU}) together; remove {RESOURCE_GPU} from its limits, or "
            "the annotation"
        )
    out = Partial(SOURCE)
    origin = f'{GPU_FRACTION}: "{fraction}"' if fraction else f'{GPU_MEMORY}: "{memory}"'
    if fraction is not None:
        out.give("vram_fraction", _fraction(fraction), origin)
    elif memory is not None:
        out.give("vram_mib", parse_plain_int(GPU_MEMORY, memory, minimum=1), origin)
    out.give("mode", "shared", origin)
    if devices is not None:
        count = parse_plain_int(GPU_FRACTION_NUM_DEVICES, devices, minimum=1)
        out.give("count", count, f'{GPU_FRACTION_NUM_DEVICES}: "{devices}"')
    else:
        out.defaults["count"] = 1
    return out
