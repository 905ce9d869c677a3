"""Kubernetes' own gang API (``scheduling.k8s.io/v1alpha2``, release 1.36, feature gate
GenericWorkload): the pod names its PodGroup in ``spec.schedulingGroup.podGroupName``.

Examples (the pod's field, then the PodGroup's spec)::

    pod spec.schedulingGroup       PodGroup spec                               reads as
    -----------------------------  ------------------------------------------  ---------------------
    (none)                         -                                           not this form
    podGroupName: train            schedulingPolicy: {gang: {minCount: 8}}     8 members
    podGroupName: train            schedulingPolicy: {basic: {}}               grouped, no quorum
    podGroupName: train            gang minCount 4, schedulingConstraints:     4 members, all in one
                                   {topologyConstraints: [{topologyKey: K}]}   value of node label K
    podGroupName: train            (no PodGroup ns/train)                      error: create it
    {} (no podGroupName)           -                                           error: name a group

A topology constraint is REQUIRED (upstream's semantics); the PodGroup has no timeout field, so
members wait at Permit for the plugin's ``permitWaitingTimeSeconds``. Costs: O(1) per pod.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from .spec import Form, GroupRef, GroupSpec, parse_count, topology_of

__all__ = ["GROUP", "PLURAL", "VERSION", "read", "spec_of"]

GROUP: Final = "scheduling.k8s.io"
VERSION: Final = "v1alpha2"
PLURAL: Final = "podgroups"


def read(pod: Mapping[str, Any]) -> GroupRef | None:
    """The pod's group from ``spec.schedulingGroup``; ``None`` without that field."""
    ref = (pod.get("spec") or {}).get("schedulingGroup")
    if ref is None:
        return None
    meta = pod.get("metadata") or {}
    namespace = meta.get("namespace") or "default"
    topology, required, error = topology_of(meta.get("annotations"))
    name = ref.get("podGroupName") if isinstance(ref, Mapping) else None
    if not isinstance(name, str) or not name:
        return GroupRef(
            Form.KUBERNETES,
            namespace,
            "",
            error="spec.schedulingGroup.podGroupName must name a PodGroup in the pod's namespace",
        )
    return GroupRef(Form.KUBERNETES, namespace, name, None, topology, required, error)


def spec_of(obj: Mapping[str, Any] | None, ref: GroupRef) -> GroupSpec:
    """The terms of the PodGroup ``obj`` (``None``: it does not exist yet)."""
    if obj is None:
        return GroupSpec(
            error=(
                f"PodGroup {ref.key} ({GROUP}/{VERSION}) does not exist yet: the pod waits for "
                f"it (create it, or clear spec.schedulingGroup)"
            )
        )
    spec = obj.get("spec") or {}
    policy = spec.get("schedulingPolicy") or {}
    constraints = (spec.get("schedulingConstraints") or {}).get("topologyConstraints") or []
    topology, required = ref.topology, ref.topology_required
    if constraints and isinstance(constraints[0], Mapping) and constraints[0].get("topologyKey"):
        topology, required = str(constraints[0]["topologyKey"]), True
    if "gang" not in policy:
        return GroupSpec(gang=False, topology=topology, topology_required=required, error=ref.error)
    count, error = parse_count(
        (policy.get("gang") or {}).get("minCount"),
        f"PodGroup {ref.key} spec.schedulingPolicy.gang.minCount",
    )
    return GroupSpec(
        min_member=count, topology=topology, topology_required=required, error=ref.error or error
    )
