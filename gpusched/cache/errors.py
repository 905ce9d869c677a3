"""The cache's exceptions, drawn once::

    Exception
     └── CacheError        the cache was asked something its state machine forbids
          │                (assume a pod it already holds, assume onto an unknown node)
          └── LedgerError  a GPU device allocation that would over-commit a device, or names
                           a device (index, UUID, MIG device) the node does not have

Both are for the scheduler's own mistakes (a stale snapshot, a bug): an allocation that simply
does not fit is found by asking first (``NodeLedger.can_fit``, ``NodeLedger.free_gpus``), never
by catching. Events from informers never raise: what a bound pod claims but cannot be booked is
recorded on its :class:`~gpusched.cache.PodInfo` (``conflict``) instead, because the pod exists
whatever the cache thinks of it.
"""

from __future__ import annotations

__all__ = ["CacheError", "LedgerError"]


class CacheError(Exception):
    """The scheduler cache was used against its state machine (see :mod:`gpusched.cache.cache`)."""


class LedgerError(CacheError):
    """A device allocation was refused: over-commit, unknown device, or the pod already holds
    devices on this node. The ledger is unchanged when this is raised."""
