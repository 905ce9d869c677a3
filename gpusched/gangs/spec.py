"""What every gang reader returns: a pod's reference to its group, and the group's terms.

Four forms of gang exist in the wild (one reader module each, :mod:`gpusched.gangs`); the
manager and the plugin see only these two values:

- :class:`GroupRef`, read from the pod alone (a label, an annotation or a spec field): which
  group, in which form, and what the pod itself says (Kueue's total count, the topology
  annotations). Cheap and pure, so the scheduler can shard pods by ``key``.
- :class:`GroupSpec`, the group's terms once its object (if the form has one) is known:
  ``min_member``, the Permit timeout, the topology domain. ``error`` says what to fix when the
  input is malformed or the object is missing; the plugin gates the pod with it.

The topology annotations are gpusched's, for the forms that have no topology field:
``gpusched.io/gang-topology: <node label key>`` and ``gpusched.io/gang-topology-policy:
Required|Preferred`` (default Preferred), on a member pod or on the group object.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = [
    "TOPOLOGY_ANNOTATION",
    "TOPOLOGY_POLICY_ANNOTATION",
    "Form",
    "GroupRef",
    "GroupSpec",
    "parse_count",
    "topology_of",
]

TOPOLOGY_ANNOTATION: Final = "gpusched.io/gang-topology"
"""A node label key whose values are the domains the gang should share (a rack, a clique)."""
TOPOLOGY_POLICY_ANNOTATION: Final = "gpusched.io/gang-topology-policy"
"""``Required`` (the gang runs in one domain or not at all) or ``Preferred`` (the default)."""


class Form(enum.StrEnum):
    """Where a gang is declared."""

    SCHEDULER_PLUGINS = "scheduler-plugins"
    KUBERNETES = "kubernetes"
    KUEUE = "kueue"
    VOLCANO = "volcano"


@dataclass(frozen=True, slots=True)
class GroupRef:
    """A pod's reference to its group, from the pod alone.

    ``total_count`` is Kueue's per-pod count (the other forms read theirs from the group
    object). ``topology``/``topology_required`` come from the pod's gpusched annotations.
    ``error``: the pod's own gang fields are malformed; what to fix.
    """

    form: Form
    namespace: str
    name: str
    total_count: int | None = None
    topology: str | None = None
    topology_required: bool = False
    error: str = ""

    @property
    def key(self) -> str:
        """``<namespace>/<name>``: one group per name and namespace, whatever the form."""
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class GroupSpec:
    """A group's terms. ``gang=False``: the pods are grouped but need no quorum (upstream's
    ``basic`` policy). ``timeout_seconds``: how long members wait at Permit (``None``: the
    plugin's default). ``topology``: a node label key; ``topology_required``: one domain or
    nothing. ``error``: what to fix (the members are gated until it is fixed)."""

    min_member: int = 1
    gang: bool = True
    timeout_seconds: float | None = None
    min_resources: Mapping[str, str] = field(default_factory=dict)
    topology: str | None = None
    topology_required: bool = False
    error: str = ""


def parse_count(value: Any, what: str) -> tuple[int, str]:
    """``value`` as a member count >= 1: ``(count, "")``, or ``(0, what to fix)``."""
    if isinstance(value, bool):
        return 0, f"{what} must be an integer >= 1, not {value!r}"
    if isinstance(value, int):
        count = value
    elif isinstance(value, str) and value.strip().isdigit():
        count = int(value.strip())
    else:
        return 0, f"{what} must be an integer >= 1, not {value!r}"
    if count < 1:
        return 0, f"{what} must be at least 1, not {count}"
    return count, ""


def topology_of(annotations: Mapping[str, Any] | None) -> tuple[str | None, bool, str]:
    """The gpusched topology annotations: ``(label key or None, required, error)``."""
    if not annotations:
        return None, False, ""
    key = annotations.get(TOPOLOGY_ANNOTATION)
    policy = annotations.get(TOPOLOGY_POLICY_ANNOTATION, "Preferred")
    if policy not in ("Required", "Preferred"):
        return (
            None,
            False,
            (f"{TOPOLOGY_POLICY_ANNOTATION} must be Required or Preferred, not {policy!r}"),
        )
    if key is None:
        return None, False, ""
    if not isinstance(key, str) or not key.strip():
        return None, False, f"{TOPOLOGY_ANNOTATION} must name a node label key, not {key!r}"
    return key.strip(), policy == "Required", ""
