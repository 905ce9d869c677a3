"""HAMi's form: ``nvidia.com/gpu`` shared by memory and compute (Project-HAMi/HAMi).

Read as HAMi's NVIDIA device reads a container (``pkg/device/nvidia/device.go``,
``GenerateResourceRequests``; the fit rules in ``fit_checks.go``), with HAMi's default
configuration (``docs/config.md``):

- the pod uses HAMi's form when a container names ``nvidia.com/gpumem``,
  ``nvidia.com/gpumem-percentage`` or ``nvidia.com/gpucores``; ``nvidia.com/gpu: N`` is then
  ``N`` *shared* GPUs. Without ``nvidia.com/gpu`` HAMi's webhook adds ``defaultGPUNum`` (1).
- ``nvidia.com/gpumem``: MiB per GPU as a plain number (HAMi takes the quantity's integer
  value as MiB, so ``3Gi`` would be three billion MiB: rejected here with the fix).
- ``nvidia.com/gpumem-percentage``: percent of each GPU's memory, 1..100. With neither memory
  field HAMi reserves 100% (``defaultMem`` 0 means the whole memory).
- ``nvidia.com/gpucores``: percent of each GPU's compute, 0..100 (HAMi clamps larger values
  to 100; gpusched rejects them). 100 is exclusive use: HAMi only puts such a request on a GPU
  nobody uses and lets nobody join it (``checkCardExclusive``, ``checkCardComputeExhausted``).

Both memory fields at once is rejected: HAMi would silently ignore the percentage.
O(containers).
"""

from __future__ import annotations

from collections.abc import Iterable
from fractions import Fraction
from typing import Final

from gpusched.inventory import RESOURCE_GPU
from gpusched.quantity import parse_quantity

from ._common import Partial, PodView, RequestError, parse_int

__all__ = [
    "ANNOTATIONS",
    "DEFAULT_GPU_NUM",
    "RESOURCES",
    "RESOURCE_GPUCORES",
    "RESOURCE_GPUMEM",
    "RESOURCE_GPUMEM_PERCENTAGE",
    "SOURCE",
    "read",
    "uses_hami",
]

SOURCE: Final = "hami"
RESOURCE_GPUMEM: Final = "nvidia.com/gpumem"
RESOURCE_GPUMEM_PERCENTAGE: Final = "nvidia.com/gpumem-percentage"
RESOURCE_GPUCORES: Final = "nvidia.com/gpucores"
DEFAULT_GPU_NUM: Final = 1
"""HAMi's ``defaultGPUNum``: GPUs given to a container that names only memory or cores."""

_FIELDS: Final = (RESOURCE_GPUMEM, RESOURCE_GPUMEM_PERCENTAGE, RESOURCE_GPUCORES)
RESOURCES: Final = frozenset({RESOURCE_GPU, *_FIELDS})
"""The container resources this form reads (``nvidia.com/gpu`` only beside the others)."""
ANNOTATIONS: Final[frozenset[str]] = frozenset()


def uses_hami(resource_names: Iterable[str]) -> bool:
    """Whether these resource names put the pod in HAMi's form."""
    return any(name in _FIELDS for name in resource_names)


def _gpumem(text: str) -> int:
    stripped = text.strip()
    if stripped.endswith(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei")):
        raise RequestError(
            f'{RESOURCE_GPUMEM}: "{stripped}" has a binary unit, but HAMi counts this field in '
            f'MiB as a plain number; write {RESOURCE_GPUMEM}: "16000", or use '
            f'gpusched.io/vram: "{stripped}"'
        )
    try:
        parse_quantity(stripped)
    except ValueError:
        raise RequestError(
            f'{RESOURCE_GPUMEM}: "{stripped}" is not a number; write the MiB per GPU as a plain '
            'number, e.g. "16000"'
        ) from None
    return parse_int(RESOURCE_GPUMEM, stripped, minimum=1)


def read(pod: PodView) -> Partial | None:
    """The shared request of a pod in HAMi's form; None when the pod does not use it."""
    if not uses_hami(pod.resource_names()):
        return None
    out = Partial(SOURCE)
    total = pod.total(RESOURCE_GPU)
    if total is None:
        # HAMi's webhook adds defaultGPUNum; a default here, so another form's count wins.
        out.defaults["mode"] = "shared"
        out.defaults["count"] = DEFAULT_GPU_NUM
    elif total == 0:
        raise RequestError(
            f"{RESOURCE_GPU} is 0 but the pod sets HAMi's per-GPU fields "
            f"({', '.join(n for n in _FIELDS if pod.has_resource(n))}); ask for "
            f"{RESOURCE_GPU}: 1 or more, or remove them"
        )
    else:
        origin = f'{RESOURCE_GPU}: "{total}"'
        out.give("mode", "shared", origin)
        out.give("count", total, origin)
    mem = pod.per_gpu(RESOURCE_GPUMEM, owner=RESOURCE_GPU)
    pct = pod.per_gpu(RESOURCE_GPUMEM_PERCENTAGE, owner=RESOURCE_GPU)
    if mem is not None and pct is not None:
        raise RequestError(
            f'{RESOURCE_GPUMEM}: "{mem}" and {RESOURCE_GPUMEM_PERCENTAGE}: "{pct}" are both set; '
            "HAMi would use the MiB and ignore the percentage: keep one of them"
        )
    if mem is not None:
        out.give("vram_mib", _gpumem(mem), f'{RESOURCE_GPUMEM}: "{mem}"')
    elif pct is not None:
        percent = parse_int(RESOURCE_GPUMEM_PERCENTAGE, pct, minimum=1, maximum=100)
        out.give("vram_fraction", Fraction(percent, 100), f'{RESOURCE_GPUMEM_PERCENTAGE}: "{pct}"')
    else:
        out.defaults["vram_fraction"] = Fraction(1)
    cores = pod.per_gpu(RESOURCE_GPUCORES, owner=RESOURCE_GPU)
    if cores is not None:
        percent = parse_int(RESOURCE_GPUCORES, cores, minimum=0, maximum=100)
        out.give("cores_percent", percent, f'{RESOURCE_GPUCORES}: "{cores}"')
        if percent == 100:
            out.give("exclusive", True, f'{RESOURCE_GPUCORES}: "{cores}"')
    return out
