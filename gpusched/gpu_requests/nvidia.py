"""The NVIDIA device plugin's resources: whole GPUs and MIG devices (mixed strategy).

- ``nvidia.com/gpu: N`` alone: ``N`` whole, exclusive GPUs, as gpusched has always read it.
  When the pod also names HAMi's per-GPU resources (``nvidia.com/gpumem``...), the count is
  HAMi's and :mod:`.hami` reads it instead.
- ``nvidia.com/mig-<profile>: N``: ``N`` MIG devices of that profile, the resource names the
  device plugin's ``mixed`` MIG strategy advertises (``nvidia.com/mig-2g.20gb``).

A pod holds whole GPUs or MIG devices, not both, and one MIG profile (the fallbacks of
``gpusched.io/mig-fallback`` are the way to accept others). O(containers x resources).
"""

from __future__ import annotations

from typing import Final

from gpusched.cache import MIG_RESOURCE_PREFIX
from gpusched.inventory import RESOURCE_GPU

from . import hami
from ._common import Partial, PodView, RequestError, parse_profile

__all__ = ["ANNOTATIONS", "RESOURCES", "RESOURCE_PREFIX", "SOURCE", "read"]

SOURCE: Final = "nvidia"
RESOURCES: Final = frozenset({RESOURCE_GPU})
"""The container resources this form reads, besides every name under :data:`RESOURCE_PREFIX`."""
RESOURCE_PREFIX: Final = MIG_RESOURCE_PREFIX
ANNOTATIONS: Final[frozenset[str]] = frozenset()


def read(pod: PodView) -> Partial | None:
    """Whole GPUs or MIG devices the pod asks for; None when it asks for neither."""
    names = pod.resource_names()
    out = Partial(SOURCE)
    whole = 0 if hami.uses_hami(names) else (pod.total(RESOURCE_GPU) or 0)
    mig: dict[str, int] = {}
    for name in sorted(names):
        if name.startswith(MIG_RESOURCE_PREFIX):
            count = pod.total(name) or 0
            if count:
                mig[parse_profile(name, name.removeprefix(MIG_RESOURCE_PREFIX))] = count
    if whole and mig:
        # The meaning of GPUFit's REASON_MIXED_REQUEST, kept: whole GPUs or MIG devices.
        raise RequestError(
            f"the pod requests whole GPUs ({RESOURCE_GPU}) and MIG devices "
            f"({', '.join(MIG_RESOURCE_PREFIX + p for p in mig)}) together; a pod holds one "
            "kind: ask for whole GPUs or for MIG devices, not both"
        )
    if len(mig) > 1:
        listed = ", ".join(MIG_RESOURCE_PREFIX + p for p in mig)
        raise RequestError(
            f"the pod requests MIG devices of several profiles ({listed}); ask for one profile "
            "and list the others as acceptable fallbacks in gpusched.io/mig-fallback"
        )
    if whole:
        origin = f'{RESOURCE_GPU}: "{whole}"'
        out.give("mode", "whole", origin)
        out.give("count", whole, origin)
    elif mig:
        ((profile, count),) = mig.items()
        origin = f'{MIG_RESOURCE_PREFIX}{profile}: "{count}"'
        out.give("mode", "mig", origin)
        out.give("count", count, origin)
        out.give("mig_profile", profile, origin)
    return out if out.values else None
