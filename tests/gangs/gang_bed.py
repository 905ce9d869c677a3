"""What the gang integration tests share: member pods in each form, group objects, CRDs; and
``scheduler_bed`` (tests/scheduler) made importable."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scheduler"))

from scheduler_bed import Bed, objects_until

from gpusched.gangs import kueue, scheduler_plugins, volcano
from gpusched.kube.client import Kube, resource_path
from gpusched.kube.errors import APIConflict, APINotFound

__all__ = [
    "ensure_crd",
    "kueue_member",
    "served",
    "sp_group",
    "sp_member",
    "sp_path",
    "volcano_group",
    "volcano_member",
]

_HERE = Path(__file__).resolve().parent
_DEPLOY = _HERE.parent.parent / "deploy" / "crds"
_CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


async def served(kube: Kube, group: str, version: str, plural: str, namespace: str) -> bool:
    """Whether the cluster serves the kind (a list answers)."""
    try:
        await kube.get(resource_path(group, version, plural, namespace))
    except APINotFound:
        return False
    return True


async def ensure_crd(kube: Kube, name: str) -> None:
    """Install the CRD ``name`` (deploy/crds' copy, else this folder's: Volcano's cut) unless
    the cluster serves the kind (the simulation serves scheduler-plugins' PodGroup)."""
    group, plural = name.split(".", 1)[1], name.split(".", 1)[0]
    version = {"scheduling.x-k8s.io": "v1alpha1", "scheduling.volcano.sh": "v1beta1"}[group]
    if await served(kube, group, version, plural, "default"):
        return
    path = _DEPLOY / f"{name}.yaml"
    if not path.exists():
        path = _HERE / "crds" / f"{name}.yaml"
    crd = yaml.safe_load(path.read_text())
    with contextlib.suppress(APIConflict):
        await kube.create(_CRDS, crd)

    def established(crds: dict[str, dict[str, Any]]) -> bool:
        conditions = (crds.get(name, {}).get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)

    await objects_until(kube, _CRDS, established)


def sp_path(bed: Bed) -> str:
    return resource_path(
        scheduler_plugins.GROUP, scheduler_plugins.VERSION, "podgroups", bed.namespace
    )


def sp_group(name: str, min_member: int, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{scheduler_plugins.GROUP}/{scheduler_plugins.VERSION}",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"minMember": min_member, **spec},
    }


def sp_member(bed: Bed, name: str, group: str, gpus: int = 1) -> dict[str, Any]:
    pod = bed.pod(name, gpus)
    pod["metadata"]["labels"][scheduler_plugins.LABEL] = group
    return pod


def kueue_member(bed: Bed, name: str, group: str, total: int, gpus: int = 1) -> dict[str, Any]:
    pod = bed.pod(name, gpus, **{kueue.COUNT_ANNOTATION: str(total)})
    pod["metadata"]["labels"][kueue.LABEL] = group
    return pod


def volcano_group(name: str, min_member: int) -> dict[str, Any]:
    return {
        "apiVersion": f"{volcano.GROUP}/{volcano.VERSION}",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"minMember": min_member},
    }


def volcano_member(bed: Bed, name: str, group: str, gpus: int = 1) -> dict[str, Any]:
    return bed.pod(name, gpus, **{volcano.ANNOTATIONS[0]: group})
