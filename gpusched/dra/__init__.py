"""Dynamic Resource Allocation (``resource.k8s.io/v1``), the pure part: no I/O, no asyncio.

- :mod:`.cel`: device selectors in upstream's CEL environment, compiled once per expression,
  failures returned as messages;
- :mod:`.allocator`: structured allocation of ResourceClaims on one node's ResourceSlices,
  preferring NVLink-best device sets (:mod:`gpusched.topology`).

The DynamicResources plugin calls :func:`allocate` from Filter and reports an
:class:`Unallocatable` reason on the node (or, with ``error``, on the claim).
"""

from .allocator import (
    MAX_RESULTS,
    Allocated,
    Allocation,
    DeviceID,
    MatchCache,
    Unallocatable,
    allocate,
)
from .cel import Match, Selector, compile_selector, device_activation

__all__ = [
    "MAX_RESULTS",
    "Allocated",
    "Allocation",
    "DeviceID",
    "Match",
    "MatchCache",
    "Selector",
    "Unallocatable",
    "allocate",
    "compile_selector",
    "device_activation",
]
