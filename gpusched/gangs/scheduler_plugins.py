"""scheduler-plugins' PodGroup (``scheduling.x-k8s.io/v1alpha1``): pods join by label.

Examples (pod label ``scheduling.x-k8s.io/pod-group``, then the PodGroup's spec)::

    pod label            PodGroup spec                                  reads as
    -------------------  ---------------------------------------------  --------------------------
    (none)               -                                              not this form
    pod-group: train     minMember: 8                                   ns/train, 8 members
    pod-group: train     minMember: 4, scheduleTimeoutSeconds: 30       4 members, wait 30s
    pod-group: train     minMember: 0                                   error: minMember >= 1
    pod-group: train     (no PodGroup ns/train)                         error: create it
    pod-group: ""        -                                              error: empty label

The object's own ``gpusched.io/gang-topology`` annotations set a topology domain (the pod's
win). Costs: O(1) per pod; the object is read from the plugin's informer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from .spec import Form, GroupRef, GroupSpec, parse_count, topology_of

__all__ = ["GROUP", "LABEL", "PLURAL", "VERSION", "read", "spec_of"]

GROUP: Final = "scheduling.x-k8s.io"
VERSION: Final = "v1alpha1"
PLURAL: Final = "podgroups"
LABEL: Final = "scheduling.x-k8s.io/pod-group"


def read(pod: Mapping[str, Any]) -> GroupRef | None:
    """The pod's group when it carries the label; ``None`` otherwise."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    name = labels.get(LABEL)
    if name is None:
        return None
    namespace = meta.get("namespace") or "default"
    topology, required, error = topology_of(meta.get("annotations"))
    if not name:
        error = f"the label {LABEL} is empty: set it to the name of a PodGroup"
    return GroupRef(Form.SCHEDULER_PLUGINS, namespace, name, None, topology, required, error)


def spec_of(obj: Mapping[str, Any] | None, ref: GroupRef) -> GroupSpec:
    """The terms of the PodGroup ``obj`` (``None``: it does not exist)."""
    if obj is None:
        return GroupSpec(
            error=(
                f"PodGroup {ref.key} ({GROUP}/{VERSION}) does not exist: create it, or remove "
                f"the label {LABEL} from the pod"
            )
        )
    spec = obj.get("spec") or {}
    min_member, error = parse_count(spec.get("minMember"), f"PodGroup {ref.key} spec.minMember")
    timeout: float | None = None
    raw = spec.get("scheduleTimeoutSeconds")
    if raw is not None and not error:
        seconds, error = parse_count(raw, f"PodGroup {ref.key} spec.scheduleTimeoutSeconds")
        timeout = float(seconds)
    topology, required, topo_error = topology_of((obj.get("metadata") or {}).get("annotations"))
    if ref.topology is not None:
        topology, required = ref.topology, ref.topology_required
    resources = spec.get("minResources") or {}
    return GroupSpec(
        min_member=min_member,
        timeout_seconds=timeout,
        min_resources={str(k): str(v) for k, v in resources.items()},
        topology=topology,
        topology_required=required,
        error=ref.error or error or topo_error,
    )
