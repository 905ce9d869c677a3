"""Gangs: pods that run all together or not at all, in the forms people already write.

- :mod:`.spec`: the two values every reader returns (``GroupRef`` from a pod, ``GroupSpec``
  from its group);
- one reader per form, each with its table of examples: :mod:`.scheduler_plugins`
  (``scheduling.x-k8s.io`` PodGroup), :mod:`.kubernetes` (``scheduling.k8s.io/v1alpha2``
  PodGroup), :mod:`.kueue` (label and count annotation), :mod:`.volcano`
  (``scheduling.volcano.sh`` PodGroup);
- :mod:`.manager`: ``GangManager``, the state the Coscheduling plugin is a thin adapter over;
- :mod:`.status`: the group objects' status as their controllers compute it.

No Kubernetes client here but in :mod:`.status`'s writer; the design is in docs/gangs.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import kubernetes, kueue, scheduler_plugins, volcano
from .spec import Form, GroupRef, GroupSpec

__all__ = ["Form", "GroupRef", "GroupSpec", "read_ref"]

_READERS = (kubernetes.read, scheduler_plugins.read, kueue.read, volcano.read)
_LABELS = (scheduler_plugins.LABEL, kueue.LABEL)


def read_ref(pod: Mapping[str, Any]) -> GroupRef | None:
    """The pod's group in the first form it uses (Kubernetes' field, scheduler-plugins' label,
    Kueue's label, Volcano's annotation), or ``None``. O(1): a few dict reads (about 0.3 us
    for a pod in no group, which every pod event and cycle pays)."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels")
    annotations = meta.get("annotations")
    if (
        not (labels and (_LABELS[0] in labels or _LABELS[1] in labels))
        and not (annotations and any(a in annotations for a in volcano.ANNOTATIONS))
        and "schedulingGroup" not in (pod.get("spec") or {})
    ):
        return None
    for read in _READERS:
        ref = read(pod)
        if ref is not None:
            return ref
    return None
