"""Volcano's PodGroup (``scheduling.volcano.sh/v1beta1``): pods join by annotation.

Examples (annotation ``scheduling.k8s.io/group-name`` or ``scheduling.volcano.sh/group-name``,
then the PodGroup's spec)::

    annotation       Volcano PodGroup spec      reads as
    ---------------  -------------------------  -------------------------------------------
    (none)           -                          not this form
    group-name: job  minMember: 4               ns/job, 4 members
    group-name: job  (no minMember)             ns/job, 1 member (Volcano's default)
    group-name: job  minMember: -1              error: minMember >= 1
    group-name: job  (no PodGroup ns/job)       error: the object is missing (is Volcano's
                                                PodGroup CRD installed?)

gpusched reads the object through an optional informer: without Volcano's CRD the members stay
gated with that message rather than run as single pods. Costs: O(1) per pod.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from .spec import Form, GroupRef, GroupSpec, parse_count, topology_of

__all__ = ["ANNOTATIONS", "GROUP", "PLURAL", "VERSION", "read", "spec_of"]

GROUP: Final = "scheduling.volcano.sh"
VERSION: Final = "v1beta1"
PLURAL: Final = "podgroups"
ANNOTATIONS: Final = ("scheduling.k8s.io/group-name", "scheduling.volcano.sh/group-name")


def read(pod: Mapping[str, Any]) -> GroupRef | None:
    """The pod's group when it carries one of the annotations; ``None`` otherwise."""
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    name = next((annotations[a] for a in ANNOTATIONS if a in annotations), None)
    if name is None:
        return None
    namespace = meta.get("namespace") or "default"
    topology, required, error = topology_of(annotations)
    if not name:
        error = f"the annotation {ANNOTATIONS[0]} is empty: set it to a Volcano PodGroup's name"
    return GroupRef(Form.VOLCANO, namespace, name, None, topology, required, error)


def spec_of(obj: Mapping[str, Any] | None, ref: GroupRef) -> GroupSpec:
    """The terms of the Volcano PodGroup ``obj`` (``None``: not seen)."""
    if obj is None:
        return GroupSpec(
            error=(
                f"Volcano PodGroup {ref.key} ({GROUP}/{VERSION}) does not exist, or that kind "
                f"is not served (is Volcano's PodGroup CRD installed?): create it, or remove "
                f"the annotation {ANNOTATIONS[0]}"
            )
        )
    spec = obj.get("spec") or {}
    raw = spec.get("minMember", 1)
    min_member, error = parse_count(raw, f"Volcano PodGroup {ref.key} spec.minMember")
    topology, required, topo_error = topology_of((obj.get("metadata") or {}).get("annotations"))
    if ref.topology is not None:
        topology, required = ref.topology, ref.topology_required
    resources = spec.get("minResources") or {}
    return GroupSpec(
        min_member=min_member,
        min_resources={str(k): str(v) for k, v in resources.items()},
        topology=topology,
        topology_required=required,
        error=ref.error or error or topo_error,
    )
