"""GpuClaims (``gpu.scheduling/v1``): who holds each claim, and its status (docs/gpuclaim.md).

:class:`GpuClaimManager` is tested on its own; ``plugins/gpu_claims.py`` is the thin plugin
over it. The claim's request is read by :mod:`gpusched.gpu_requests.gpuclaim`.
"""

from __future__ import annotations

from .manager import GpuClaimManager, Holder, Key, slowest_link

__all__ = ["GpuClaimManager", "Holder", "Key", "slowest_link"]
