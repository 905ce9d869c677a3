"""WoolyAI's policy objects (``woolyai.dev/v1alpha1``), read as gpusched's.

Clusters moving from the WoolyAI GPU operator keep their ``ClusterGPUPolicy``,
``WoolyNodePolicy`` and ``GPUClass`` manifests (seed 000, "Configuration"). gpusched serves
those kinds under WoolyAI's group (CRDs generated from the models here into ``deploy/crds/``)
and reads each object as the gpusched object that means the same, so the rest of the
scheduler (precedence, Events, placement) knows one set of types. One small reader per kind:

=======================  ==============================================================
WoolyAI                  read as (``gpusched.io/v1alpha1``)
=======================  ==============================================================
ClusterGPUPolicy         ``ClusterGPUPolicy``: ``defaultVramOvercommitPercent: 20`` is
                         ``vramOvercommitPercent: 120``
WoolyNodePolicy          ``GPUNodePolicy``: ``targetSelector`` (labels) is
                         ``nodeSelector.matchLabels``; ``maxClientsPerGPU``,
                         ``maxClientsPerNode`` as they are; ``vramOvercommitPercent: 30``
                         (30 % extra) is ``130``
GPUClass                 ``GPUClass``: ``matchLabels`` is ``nodeSelector.matchLabels``,
                         ``requirements.minVramMiB`` is ``minVramMiB``, ``sharing.mode`` as
                         it is, ``sharing.replicas`` (pods per GPU) is
                         ``sharing.maxClientsPerGPU``
=======================  ==============================================================

WoolyAI states overcommit as the *extra* share (0 = none); gpusched as the whole promise
(100 = none), hence the +100. The object read keeps the name and carries
:data:`READ_FROM` (``gpusched.io/read-from: WoolyNodePolicy/high-memory-nodes``), which is how
Events, reports and the precedence rule tell it from a gpusched object of the same name.

**Precedence: a gpusched object and a WoolyAI object of the same scope.**

- *Cluster policies*: field by field, the gpusched ``ClusterGPUPolicy/default`` first, then
  WoolyAI's ``default``, then the built-in defaults (only objects named ``default`` apply, in
  both groups). So WoolyAI's overcommit applies until the gpusched policy sets its own.
- *Node policies*: a ``WoolyNodePolicy`` is one more node policy, ranked like the others by
  the specificity of its selector; at equal specificity a gpusched ``GPUNodePolicy`` wins
  (then names in alphabetical order), field by field as always, and the loser is told
  (``Overridden`` Event).
- *Classes*: pods name a class, so names must be unique: when both groups have a class of
  one name, the gpusched ``GPUClass`` is the one used and WoolyAI's is ignored (a Warning
  Event on it says so and how to fix it).

Unknown fields are rejected (the CRD's schema prunes them at the API server anyway); a value
the reader cannot translate is a :class:`~gpusched.gpu_policy.models.PolicyError` naming the
WoolyAI field, and the object is ignored like an invalid gpusched one. The scheduler writes no
status to WoolyAI's objects (their CRDs have none): Events only. Pure, no I/O; O(fields).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, Literal

from pydantic import Field, ValidationError, model_validator

from gpusched.gpu_policy.models import (
    MAX_CLIENTS_PER_GPU_LIMIT,
    MAX_OVERCOMMIT_PERCENT,
    ClusterGPUPolicy,
    GPUClass,
    GPUNodePolicy,
    ObjectMeta,
    PolicyError,
    SharingMode,
    _LabelMap,
    _Model,
)
from gpusched.inventory import validation_problems

__all__ = [
    "KIND_CLASS",
    "KIND_CLUSTER",
    "KIND_NODE_POLICY",
    "PLURALS",
    "READ_FROM",
    "WOOLY_API_VERSION",
    "WOOLY_GROUP",
    "WOOLY_VERSION",
    "WoolyClusterGPUPolicy",
    "WoolyClusterGPUPolicySpec",
    "WoolyGPUClass",
    "WoolyGPUClassSpec",
    "WoolyNodePolicy",
    "WoolyNodePolicySpec",
    "WoolyRequirements",
    "WoolySharing",
    "is_read_from_woolyai",
    "parse_woolyai_object",
    "read_cluster_policy",
    "read_gpu_class",
    "read_node_policy",
]

WOOLY_GROUP: Final = "woolyai.dev"
WOOLY_VERSION: Final = "v1alpha1"
WOOLY_API_VERSION: Final = f"{WOOLY_GROUP}/{WOOLY_VERSION}"
READ_FROM: Final = "gpusched.io/read-from"
"""Annotation on an object read from WoolyAI's: the original's ``Kind.group/name`` ref."""

KIND_CLUSTER: Final = f"ClusterGPUPolicy.{WOOLY_GROUP}"
"""How gpusched names WoolyAI's kinds in refs (``Kind.group/name``, as kubectl does), since
two of them share a kind name with gpusched's."""
KIND_NODE_POLICY: Final = "WoolyNodePolicy"
KIND_CLASS: Final = f"GPUClass.{WOOLY_GROUP}"
PLURALS: Final[dict[str, str]] = {
    KIND_CLUSTER: "clustergpupolicies",
    KIND_NODE_POLICY: "woolynodepolicies",
    KIND_CLASS: "gpuclasses",
}
"""Resource (plural, in group ``woolyai.dev``) of each of WoolyAI's kinds, by ref kind."""

_MAX_EXTRA_PERCENT: Final = MAX_OVERCOMMIT_PERCENT - 100


def _extra_percent() -> Any:
    return Field(default=None, ge=0, le=_MAX_EXTRA_PERCENT)


# --- the models (what WoolyAI's users write) ----------------------------------------------


class WoolyClusterGPUPolicySpec(_Model):
    """Cluster-wide defaults (WoolyAI)."""

    default_vram_overcommit_percent: int | None = _extra_percent()
    """VRAM that may be promised beyond each GPU's memory, in percent of it: 20 promises
    1.2x. gpusched reads it as vramOvercommitPercent 100 + this. Default: 0."""


class WoolyClusterGPUPolicy(_Model):
    """WoolyAI's cluster-wide GPU policy; only the one named default applies."""

    api_version: Literal["woolyai.dev/v1alpha1"] = "woolyai.dev/v1alpha1"
    kind: Literal["ClusterGPUPolicy"] = "ClusterGPUPolicy"
    metadata: ObjectMeta
    spec: WoolyClusterGPUPolicySpec = Field(default_factory=WoolyClusterGPUPolicySpec)


class WoolyNodePolicySpec(_Model):
    """Limits for the nodes ``targetSelector`` matches (WoolyAI)."""

    target_selector: _LabelMap = Field(default_factory=dict)
    """Labels the nodes must carry, all of them; empty: every node. Default: empty."""
    max_clients_per_gpu: int | None = Field(
        default=None, ge=1, le=MAX_CLIENTS_PER_GPU_LIMIT, alias="maxClientsPerGPU"
    )
    """Most pods on one GPU. Default: the next policy's."""
    max_clients_per_node: int | None = Field(default=None, ge=1)
    """Most GPU pods on the node. Default: the next policy's."""
    vram_overcommit_percent: int | None = _extra_percent()
    """VRAM that may be promised beyond each GPU's memory, in percent of it: 30 promises
    1.3x (gpusched's vramOvercommitPercent 130). Default: the next policy's."""


class WoolyNodePolicy(_Model):
    """WoolyAI's per-node (or node pool) GPU limits."""

    api_version: Literal["woolyai.dev/v1alpha1"] = "woolyai.dev/v1alpha1"
    kind: Literal["WoolyNodePolicy"] = "WoolyNodePolicy"
    metadata: ObjectMeta
    spec: WoolyNodePolicySpec = Field(default_factory=WoolyNodePolicySpec)


class WoolyRequirements(_Model):
    """What each GPU of the class must have."""

    min_vram_mib: int | None = Field(default=None, ge=1, alias="minVramMiB")
    """Least memory of each GPU, in MiB. Default: none."""


class WoolySharing(_Model):
    """How the class's pods use a GPU."""

    mode: SharingMode = "shared"
    """shared or exclusive. Default: shared."""
    replicas: int | None = Field(default=None, ge=1, le=MAX_CLIENTS_PER_GPU_LIMIT)
    """Most pods of the class on one GPU (shared only). Default: the node's policy."""

    @model_validator(mode="after")
    def _check(self) -> WoolySharing:
        if self.mode == "exclusive" and self.replicas not in (None, 1):
            raise ValueError(
                f"replicas: an exclusive GPU has one pod, not {self.replicas}; remove "
                "replicas or set mode: shared"
            )
        return self


class WoolyGPUClassSpec(_Model):
    """A kind of GPU (WoolyAI)."""

    description: str = Field(default="", max_length=1024)
    """Free text for people. Default: empty."""
    match_labels: _LabelMap = Field(default_factory=dict)
    """Labels of the nodes whose GPUs belong to the class. Default: every node."""
    requirements: WoolyRequirements = Field(default_factory=WoolyRequirements)
    """What each GPU must have. Default: nothing."""
    sharing: WoolySharing = Field(default_factory=WoolySharing)
    """Shared (at most replicas pods per GPU) or exclusive. Default: shared."""


class WoolyGPUClass(_Model):
    """WoolyAI's GPU class, which pods name with cuda.scheduler.io/gpu-class."""

    api_version: Literal["woolyai.dev/v1alpha1"] = "woolyai.dev/v1alpha1"
    kind: Literal["GPUClass"] = "GPUClass"
    metadata: ObjectMeta
    spec: WoolyGPUClassSpec = Field(default_factory=WoolyGPUClassSpec)


# --- the readers ---------------------------------------------------------------------------


def _metadata(meta: ObjectMeta, kind: str) -> dict[str, Any]:
    annotations = dict(getattr(meta, "annotations", None) or {})
    annotations[READ_FROM] = f"{kind}/{meta.name}"
    return {
        "name": meta.name,
        "generation": meta.generation,
        "uid": meta.uid,
        "annotations": annotations,
    }


def _percent(extra: int | None) -> int | None:
    return None if extra is None else 100 + extra


def read_cluster_policy(obj: WoolyClusterGPUPolicy) -> ClusterGPUPolicy:
    """WoolyAI's cluster policy as gpusched's (module docstring's table)."""
    return ClusterGPUPolicy.model_validate(
        {
            "metadata": _metadata(obj.metadata, KIND_CLUSTER),
            "spec": {"vramOvercommitPercent": _percent(obj.spec.default_vram_overcommit_percent)},
        }
    )


def read_node_policy(obj: WoolyNodePolicy) -> GPUNodePolicy:
    """A ``WoolyNodePolicy`` as a ``GPUNodePolicy`` (module docstring's table)."""
    spec = obj.spec
    return GPUNodePolicy.model_validate(
        {
            "metadata": _metadata(obj.metadata, KIND_NODE_POLICY),
            "spec": {
                "nodeSelector": {"matchLabels": dict(spec.target_selector)},
                "maxClientsPerGPU": spec.max_clients_per_gpu,
                "maxClientsPerNode": spec.max_clients_per_node,
                "vramOvercommitPercent": _percent(spec.vram_overcommit_percent),
            },
        }
    )


def read_gpu_class(obj: WoolyGPUClass) -> GPUClass:
    """WoolyAI's ``GPUClass`` as gpusched's (module docstring's table)."""
    spec = obj.spec
    sharing: dict[str, Any] = {"mode": spec.sharing.mode}
    if spec.sharing.mode == "shared" and spec.sharing.replicas is not None:
        sharing["maxClientsPerGPU"] = spec.sharing.replicas
    return GPUClass.model_validate(
        {
            "metadata": _metadata(obj.metadata, KIND_CLASS),
            "spec": {
                "description": spec.description,
                "nodeSelector": {"matchLabels": dict(spec.match_labels)},
                "minVramMiB": spec.requirements.min_vram_mib,
                "sharing": sharing,
            },
        }
    )


_READERS: Final[dict[str, tuple[type[_Model], Callable[[Any], Any]]]] = {
    KIND_CLUSTER: (WoolyClusterGPUPolicy, read_cluster_policy),
    KIND_NODE_POLICY: (WoolyNodePolicy, read_node_policy),
    KIND_CLASS: (WoolyGPUClass, read_gpu_class),
}
_BY_KIND: Final = {"ClusterGPUPolicy": KIND_CLUSTER, "WoolyNodePolicy": KIND_NODE_POLICY}


def parse_woolyai_object(
    obj: Mapping[str, Any],
) -> GPUClass | GPUNodePolicy | ClusterGPUPolicy:
    """Parse one of WoolyAI's objects as the API server returns it and read it as gpusched's.

    Raises :class:`PolicyError` naming the object (``WoolyNodePolicy/high-memory-nodes``) and
    every bad field, by WoolyAI's wire names."""
    kind = obj.get("kind")
    name = (obj.get("metadata") or {}).get("name", "?")
    ref_kind = _BY_KIND.get(kind, KIND_CLASS if kind == "GPUClass" else "") if kind else ""
    if not ref_kind:
        raise PolicyError(
            f"{kind}.{WOOLY_GROUP}/{name}",
            [
                f"kind: {kind!r} is not one of WoolyAI's policy kinds; use ClusterGPUPolicy, "
                "WoolyNodePolicy or GPUClass"
            ],
        )
    model, reader = _READERS[ref_kind]
    try:
        parsed = model.model_validate(obj)
    except ValidationError as exc:
        raise PolicyError(f"{ref_kind}/{name}", validation_problems(exc)) from None
    out: GPUClass | GPUNodePolicy | ClusterGPUPolicy = reader(parsed)
    return out


def is_read_from_woolyai(obj: GPUClass | GPUNodePolicy | ClusterGPUPolicy) -> str | None:
    """The WoolyAI ref (``WoolyNodePolicy/x``) an object was read from, or ``None``."""
    annotations = getattr(obj.metadata, "annotations", None)
    if isinstance(annotations, Mapping):
        ref = annotations.get(READ_FROM)
        if isinstance(ref, str) and ref:
            return ref
    return None
