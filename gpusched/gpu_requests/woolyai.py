"""The WoolyAI GPU operator's form: shared GPUs by VRAM (seed 000, "Pod Annotations Reference").

Resource ``woolyai.com/gpu: N`` in a container's limits, and annotations::

    woolyai.com/pod-vram           VRAM per GPU, required: "16000Mi", "11Gi" (a bare number is
                                   MiB, the unit WoolyAI documents for the field)
    woolyai.com/priority           "0" (highest) .. "4"; default 0
    woolyai.com/exclusive-gpu-use  "true" | "false" (default "false"): a dedicated GPU
    woolyai.com/swap-from-vram     "true" | "false" (default "true": WoolyAI's own default)
    cuda.scheduler.io/gpu-class    a GPUClass name

For such a pod the Binding also writes the annotations WoolyAI's node side reads
(``woolyai.com/gpu-ids``, ``woolyai.com/reserved-vram-mib``): ``source == "woolyai"`` tells the
binder. O(annotations + containers).
"""

from __future__ import annotations

from typing import Final

from gpusched.annotations import PRIORITY_LEVELS

from ._common import Partial, PodView, parse_bool, parse_mib_quantity, parse_name, parse_plain_int

__all__ = [
    "ANNOTATIONS",
    "EXCLUSIVE_GPU_USE",
    "GPU_CLASS",
    "POD_VRAM",
    "PRIORITY",
    "RESOURCES",
    "RESOURCE_GPU",
    "SOURCE",
    "SWAP_FROM_VRAM",
    "read",
]

SOURCE: Final = "woolyai"
RESOURCE_GPU: Final = "woolyai.com/gpu"
POD_VRAM: Final = "woolyai.com/pod-vram"
PRIORITY: Final = "woolyai.com/priority"
EXCLUSIVE_GPU_USE: Final = "woolyai.com/exclusive-gpu-use"
SWAP_FROM_VRAM: Final = "woolyai.com/swap-from-vram"
GPU_CLASS: Final = "cuda.scheduler.io/gpu-class"
RESOURCES: Final = frozenset({RESOURCE_GPU})
"""The container resources this form reads (the package's fast path skips pods without any)."""
ANNOTATIONS: Final = frozenset({POD_VRAM, PRIORITY, EXCLUSIVE_GPU_USE, SWAP_FROM_VRAM, GPU_CLASS})
"""The annotations this form reads."""


def read(pod: PodView) -> Partial | None:
    """The fields of WoolyAI's form the pod states; None when it uses none of them."""
    out = Partial(SOURCE)
    count = pod.total(RESOURCE_GPU)
    if count:
        out.give("mode", "shared", f'{RESOURCE_GPU}: "{count}"')
        out.give("count", count, f'{RESOURCE_GPU}: "{count}"')
    ann = pod.annotation
    if (text := ann(POD_VRAM)) is not None:
        vram = parse_mib_quantity(POD_VRAM, text, unitless_mib=True)
        out.give("vram_mib", vram, f'{POD_VRAM}: "{text}"')
    if (text := ann(PRIORITY)) is not None:
        level = parse_plain_int(PRIORITY, text, minimum=0, maximum=max(PRIORITY_LEVELS))
        out.give("priority", level, f'{PRIORITY}: "{text}"')
    if (text := ann(EXCLUSIVE_GPU_USE)) is not None:
        out.give("exclusive", parse_bool(EXCLUSIVE_GPU_USE, text), f'{EXCLUSIVE_GPU_USE}: "{text}"')
    if (text := ann(SWAP_FROM_VRAM)) is not None:
        out.give("swap_from_vram", parse_bool(SWAP_FROM_VRAM, text), f'{SWAP_FROM_VRAM}: "{text}"')
    if (text := ann(GPU_CLASS)) is not None:
        out.give("gpu_class", parse_name(GPU_CLASS, text, "GPUClass"), f'{GPU_CLASS}: "{text}"')
    if not out.values:
        return None
    out.defaults["swap_from_vram"] = True
    return out
