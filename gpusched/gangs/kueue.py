"""Kueue's plain-pod groups: a label names the group, an annotation its size; no object.

Examples (label ``kueue.x-k8s.io/pod-group-name``, annotation
``kueue.x-k8s.io/pod-group-total-count``)::

    label        annotation          reads as
    -----------  ------------------  -------------------------------------------
    (none)       -                   not this form
    train        "8"                 ns/train, 8 members (minMember = total count)
    train        (none)              error: set the total count
    train        "eight" / "0"       error: an integer >= 1

Kueue admits the group (it removes its scheduling gate) when the quota holds it; gpusched then
places it whole. Costs: O(1) per pod.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from .spec import Form, GroupRef, GroupSpec, parse_count, topology_of

__all__ = ["COUNT_ANNOTATION", "LABEL", "read", "spec_of"]

LABEL: Final = "kueue.x-k8s.io/pod-group-name"
COUNT_ANNOTATION: Final = "kueue.x-k8s.io/pod-group-total-count"


def read(pod: Mapping[str, Any]) -> GroupRef | None:
    """The pod's group when it carries the label; ``None`` otherwise."""
    meta = pod.get("metadata") or {}
    name = (meta.get("labels") or {}).get(LABEL)
    if name is None:
        return None
    annotations = meta.get("annotations") or {}
    namespace = meta.get("namespace") or "default"
    topology, required, error = topology_of(annotations)
    raw = annotations.get(COUNT_ANNOTATION)
    if raw is None:
        return GroupRef(
            Form.KUEUE,
            namespace,
            name,
            error=f"the pod has the label {LABEL} but no annotation {COUNT_ANNOTATION}: set it "
            f"to the number of pods in the group",
        )
    count, count_error = parse_count(raw, f"the annotation {COUNT_ANNOTATION}")
    return GroupRef(
        Form.KUEUE, namespace, name, count or None, topology, required, count_error or error
    )


def spec_of(ref: GroupRef) -> GroupSpec:
    """The group's terms, from the pod's reference alone."""
    return GroupSpec(
        min_member=ref.total_count or 1,
        topology=ref.topology,
        topology_required=ref.topology_required,
        error=ref.error,
    )
