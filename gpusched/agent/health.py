"""GPU health: which NVML signals make a GPU ``Unhealthy`` in its inventory, and why.

Three signals, checked by the agent's loop (:mod:`gpusched.agent.telemetry`) each interval:

- **XID critical errors** (``nvmlEventTypeXidCriticalError`` events). Which XIDs count follows
  NVIDIA's device plugin (k8s-device-plugin ``internal/rm/health.go``): every XID but the
  application errors 13, 31, 43, 45, 68 and 109, which leave the GPU healthy;
  ``DP_DISABLE_HEALTHCHECKS`` lists more XIDs to ignore (``all`` or ``xids``: no health
  checks at all) and ``DP_ENABLE_HEALTHCHECKS`` XIDs to count even so (``all``: every one).
  An XID mark is sticky, as it is in NVIDIA's plugin: a GPU reset does not tell NVML's event
  stream that the fault is gone, so the mark lasts until the agent restarts (restart the
  agent's pod after resetting the GPU or rebooting the node). The first counted XID of a GPU
  is its reason, e.g. ``"XID 79 (GPU has fallen off the bus)"``.
- **Volatile uncorrected ECC errors** (``nvmlDeviceGetTotalEccErrors``): any since the last
  GPU reset. The count goes back to 0 when the GPU is reset, and the GPU is healthy again.
- **A lost GPU**: NVML answers ``GPU_IS_LOST`` (or another error) when the GPU is read;
  healthy again once it answers.

The inventory has one health per physical GPU (the scheduler's unit), so an XID on a MIG
device marks its GPU, and its reason names the instance. Pure state, no NVML and no I/O:
O(1) per event and per GPU checked.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from gpusched.inventory import Health

__all__ = [
    "APPLICATION_XIDS",
    "ENV_DISABLE_HEALTHCHECKS",
    "ENV_ENABLE_HEALTHCHECKS",
    "XID_NAMES",
    "HealthTracker",
    "XIDPolicy",
    "xid_reason",
]

ENV_DISABLE_HEALTHCHECKS: Final = "DP_DISABLE_HEALTHCHECKS"
ENV_ENABLE_HEALTHCHECKS: Final = "DP_ENABLE_HEALTHCHECKS"

APPLICATION_XIDS: Final = frozenset({13, 31, 43, 45, 68, 109})
"""XIDs an application causes; the GPU stays healthy (NVIDIA's device plugin's list)."""

XID_NAMES: Final[Mapping[int, str]] = {
    8: "GPU stopped processing",
    13: "Graphics Engine Exception",
    31: "GPU memory page fault",
    32: "Invalid or corrupted push buffer stream",
    38: "Driver firmware error",
    43: "GPU stopped processing",
    45: "Preemptive cleanup, due to previous errors",
    48: "Double Bit ECC Error",
    61: "Internal micro-controller breakpoint/warning",
    62: "Internal micro-controller halt",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    68: "Video processor exception",
    69: "Graphics Engine class error",
    74: "NVLink Error",
    79: "GPU has fallen off the bus",
    92: "High single-bit ECC error rate",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
    109: "Context Switch Timeout Error",
    119: "GSP RPC Timeout",
    120: "GSP Error",
}
"""Names of common XIDs, as NVIDIA's XID catalogue gives them; others are shown by number."""


def xid_reason(xid: int, where: str = "") -> str:
    """``"XID 79 (GPU has fallen off the bus)"``, with ``where`` appended when given."""
    name = XID_NAMES.get(xid)
    text = f"XID {xid}" + (f" ({name})" if name else "")
    return f"{text} {where}" if where else text


def _parse(value: str) -> tuple[bool, frozenset[int]]:
    """(``all`` given, the XIDs listed) of a comma-separated environment value; malformed
    entries are ignored, as NVIDIA's plugin ignores them."""
    xids = set()
    for item in value.lower().split(","):
        item = item.strip()
        if item in ("all", "xids"):
            return True, frozenset()
        if item.isdigit():
            xids.add(int(item))
    return False, frozenset(xids)


@dataclass(frozen=True, slots=True)
class XIDPolicy:
    """Which XIDs make a GPU unhealthy (module docstring). The default counts every XID but
    :data:`APPLICATION_XIDS`."""

    disabled: frozenset[int] = APPLICATION_XIDS
    enabled: frozenset[int] = frozenset()
    all_disabled: bool = False
    all_enabled: bool = False

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> XIDPolicy:
        """From ``DP_DISABLE_HEALTHCHECKS`` and ``DP_ENABLE_HEALTHCHECKS`` in ``env``."""
        all_disabled, disabled = _parse(env.get(ENV_DISABLE_HEALTHCHECKS, ""))
        all_enabled, enabled = _parse(env.get(ENV_ENABLE_HEALTHCHECKS, ""))
        return cls(
            disabled=disabled | APPLICATION_XIDS,
            enabled=enabled,
            all_disabled=all_disabled,
            all_enabled=all_enabled,
        )

    @property
    def checks_off(self) -> bool:
        """Health checks are off: every XID disabled and none enabled; every GPU is then
        reported healthy, as NVIDIA's plugin does."""
        return self.all_disabled and not self.all_enabled and not self.enabled

    def counts(self, xid: int) -> bool:
        """Whether ``xid`` makes a GPU unhealthy."""
        if self.all_enabled or xid in self.enabled:
            return True
        return not self.all_disabled and xid not in self.disabled


@dataclass
class HealthTracker:
    """Per GPU index: its sticky XID mark and, given this interval's readings, its health."""

    policy: XIDPolicy = field(default_factory=XIDPolicy)
    _xids: dict[int, str] = field(default_factory=dict)

    def xid(self, indices: Iterable[int], xid: int, where: str = "") -> bool:
        """Record XID ``xid`` on the GPUs ``indices``; returns whether the policy counts it.
        A GPU keeps its first mark."""
        if self.policy.checks_off or not self.policy.counts(xid):
            return False
        for index in indices:
            self._xids.setdefault(index, xid_reason(xid, where))
        return True

    def fault(self, indices: Iterable[int], reason: str) -> None:
        """A sticky mark that is not an XID (NVML could not say which GPU an XID was on)."""
        if self.policy.checks_off:
            return
        for index in indices:
            self._xids.setdefault(index, reason)

    def assess(
        self,
        index: int,
        *,
        lost: bool = False,
        read_error: str | None = None,
        ecc_uncorrected: int = 0,
    ) -> tuple[Health, str | None]:
        """GPU ``index``'s health and reason; the XID mark first, then a lost GPU, a GPU NVML
        could not read (``read_error``), then ECC."""
        if self.policy.checks_off:
            return "Healthy", None
        if index in self._xids:
            return "Unhealthy", self._xids[index]
        if lost:
            return "Unhealthy", "GPU is lost (NVML: GPU_IS_LOST); it has fallen off the bus"
        if read_error is not None:
            return "Unhealthy", f"NVML cannot read the GPU ({read_error})"
        if ecc_uncorrected > 0:
            return "Unhealthy", (
                f"{ecc_uncorrected} uncorrected ECC error(s) since the last GPU reset"
            )
        return "Healthy", None
