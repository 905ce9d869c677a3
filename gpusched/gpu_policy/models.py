"""The cluster's GPU policy resources: ``GPUClass``, ``GPUNodePolicy``, ``ClusterGPUPolicy``.

Three cluster-scoped custom resources (``gpusched.io/v1alpha1``) that administrators write and
the scheduler only reads. Their CRDs are generated from these models
(:mod:`gpusched.gpu_policy.crds`), so the API server and :func:`parse_policy_object` accept
the same objects; the models add the checks a structural schema cannot express (a selector
operator with values it forbids, an exclusive class with a client limit) with messages that
say what to write instead.

- ``GPUClass``: a kind of GPU a pod may ask for (``gpusched.io/gpu-class: NAME``; WoolyAI's
  ``cuda.scheduler.io/gpu-class``): which nodes (label selector) and GPUs (product names,
  minimum memory, MIG profiles) it means, whether its pods share a GPU (``shared``, at most N
  clients per GPU) or hold it alone (``exclusive``), and an optional price for the
  cost-optimised strategy. Fields follow WoolyAI's GPUClass (``minVramMiB``,
  ``sharing.mode``), flattened.
- ``GPUNodePolicy``: limits for the nodes its ``nodeSelector`` matches. Every field is
  optional: an unset field leaves the decision to other policies
  (:mod:`gpusched.gpu_policy.resolve` has the precedence rule).
- ``ClusterGPUPolicy``: the same fields, cluster-wide, for nodes no node policy decides. One
  applies: the one named ``default`` (:data:`CLUSTER_POLICY_NAME`), as WoolyAI names it.

The built-in defaults (issue 10) live in :mod:`gpusched.gpu_policy.resolve`, not in the schema:
sharing allowed, at most 10 clients per GPU (HAMi's default ``deviceSplitCount``), no client
limit per node, no VRAM overcommit (100 %).

``vramOvercommitPercent`` is the share of a GPU's physical VRAM that may be promised to pods:
100 is none, 150 promises 1.5x. WoolyAI's ``vramOvercommitPercent: 30`` means 30 % *extra*; the
same intent is 130 here, and values below 100 are rejected with that hint.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from pydantic.alias_generators import to_camel

from gpusched.inventory import (
    API_GROUP,
    MIG_PROFILE_PATTERN,
    VERSION,
    FrozenList,
    validation_problems,
)

__all__ = [
    "API_GROUP",
    "API_VERSION",
    "CLUSTER_POLICY_NAME",
    "CONDITION_APPLIED",
    "CONDITION_MATCHED",
    "CONDITION_OVERRIDDEN",
    "MAX_CLIENTS_PER_GPU_LIMIT",
    "MAX_OVERCOMMIT_PERCENT",
    "VERSION",
    "ClusterGPUPolicy",
    "ClusterGPUPolicySpec",
    "Condition",
    "GPUClass",
    "GPUClassSpec",
    "GPUClassStatus",
    "GPUNodePolicy",
    "GPUNodePolicySpec",
    "LabelSelector",
    "LabelSelectorRequirement",
    "ObjectMeta",
    "PolicyError",
    "PolicyStatus",
    "SharingMode",
    "SharingSpec",
    "parse_policy_object",
]

API_VERSION: Final = f"{API_GROUP}/{VERSION}"
CLUSTER_POLICY_NAME: Final = "default"
"""The ``ClusterGPUPolicy`` that applies; any other is ignored (its status says so)."""
MAX_CLIENTS_PER_GPU_LIMIT: Final = 64
"""Upper bound of ``maxClientsPerGPU``: a sanity limit, far above HAMi's default of 10."""
MAX_OVERCOMMIT_PERCENT: Final = 1000
"""Upper bound of ``vramOvercommitPercent`` (10x): beyond it a typo is likelier than intent."""

CONDITION_APPLIED: Final = "Applied"
"""Node and cluster policies: True when the policy decides at least one field on some node."""
CONDITION_OVERRIDDEN: Final = "Overridden"
"""Node policies: True when, on some node, another policy wins a field this one sets; the
message names the winner (:class:`gpusched.gpu_policy.resolve.Override`)."""
CONDITION_MATCHED: Final = "Matched"
"""GPUClass: True when at least one node has a GPU of the class."""

# Kubernetes label keys and values (apimachinery validation.IsQualifiedName / IsValidLabelValue).
_LABEL_KEY: Final = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_LABEL_VALUE: Final = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
_LABEL_KEY_RE: Final = re.compile(_LABEL_KEY)
_LABEL_VALUE_RE: Final = re.compile(_LABEL_VALUE)


class _Model(BaseModel):
    """Strict, closed, immutable; Python names snake_case, wire names camelCase; each field's
    docstring is its description (and the CRD's)."""

    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        frozen=True,
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        use_attribute_docstrings=True,
    )


def _check_labels(labels: dict[str, str]) -> dict[str, str]:
    for key, value in labels.items():
        if len(key) > 316 or not _LABEL_KEY_RE.match(key):
            raise ValueError(
                f"{key!r} is not a label key; write a key such as nvidia.com/gpu.product"
            )
        if len(value) > 63 or not _LABEL_VALUE_RE.match(value):
            raise ValueError(
                f"{key}={value!r} is not a label value: at most 63 letters, digits, '-', '_' "
                "or '.', beginning and ending with a letter or digit (GPU feature discovery "
                "writes spaces in products as '-', e.g. NVIDIA-H100-80GB-HBM3)"
            )
    return labels


_LabelMap = Annotated[dict[str, str], AfterValidator(_check_labels)]


class LabelSelectorRequirement(_Model):
    """One ``matchExpressions`` term, as in Kubernetes' ``metav1.LabelSelectorRequirement``."""

    key: str = Field(pattern=_LABEL_KEY, max_length=316)
    """Label key the term tests, e.g. ``nvidia.com/gpu.product``."""
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    """``In``/``NotIn`` test the value against ``values``; ``Exists``/``DoesNotExist`` only
    the key's presence."""
    values: FrozenList[str] = Field(default=(), max_length=256)
    """Values for ``In``/``NotIn`` (at least one); must be empty for ``Exists`` and
    ``DoesNotExist``. Default: empty."""

    @model_validator(mode="after")
    def _check_values(self) -> LabelSelectorRequirement:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(
                f"values: operator {self.operator} needs at least one value; list them, "
                "or use Exists to match any value"
            )
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(
                f"values: operator {self.operator} takes no values; remove them, or use In"
            )
        return self

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.operator == "In":
            return value is not None and value in self.values
        if self.operator == "NotIn":
            return value is None or value not in self.values
        if self.operator == "Exists":
            return value is not None
        return value is None


class LabelSelector(_Model):
    """Kubernetes' ``metav1.LabelSelector``: every label of ``matchLabels`` and every term of
    ``matchExpressions`` must hold. The empty selector matches every node."""

    match_labels: _LabelMap = Field(default_factory=dict)
    """Labels the node must carry with exactly these values. Default: none."""
    match_expressions: FrozenList[LabelSelectorRequirement] = Field(default=(), max_length=64)
    """Terms the node's labels must satisfy, all of them. Default: none."""

    @property
    def specificity(self) -> int:
        """How many requirements the selector states: the precedence of node policies."""
        return len(self.match_labels) + len(self.match_expressions)

    def matches(self, labels: Mapping[str, str]) -> bool:
        """O(requirements)."""
        return all(labels.get(k) == v for k, v in self.match_labels.items()) and all(
            term.matches(labels) for term in self.match_expressions
        )

    def keys(self) -> frozenset[str]:
        """The label keys the selector reads."""
        return frozenset(self.match_labels) | {t.key for t in self.match_expressions}


class ObjectMeta(BaseModel):
    """The parts of ``metadata`` the scheduler reads; the rest is kept but not checked."""

    model_config = ConfigDict(extra="allow", frozen=True)

    name: str = Field(min_length=1, max_length=253)
    generation: int = 0
    uid: str = ""


class Condition(_Model):
    """Kubernetes' ``metav1.Condition``."""

    type: str = Field(max_length=316, pattern=r"^[A-Za-z]([A-Za-z0-9_.\-/]*[A-Za-z0-9])?$")
    """Condition type, e.g. Applied, Overridden, Matched."""
    status: Literal["True", "False", "Unknown"]
    """Whether the condition holds."""
    observed_generation: int | None = Field(default=None, ge=0)
    """``metadata.generation`` the condition was computed from."""
    last_transition_time: str = Field(min_length=1, json_schema_extra={"format": "date-time"})
    """RFC 3339 time the status last changed."""
    reason: str = Field(
        max_length=1024, min_length=1, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
    )
    """One CamelCase word for machines, e.g. Overridden."""
    message: str = Field(default="", max_length=32768)
    """What happened, for people; for Overridden, which policy won which field on which nodes."""


_CONDITIONS_LIST: Final[dict[str, Any]] = {
    "x-kubernetes-list-type": "map",
    "x-kubernetes-list-map-keys": ["type"],
}


def _check_profile(profile: str) -> str:
    if not _MIG_PROFILE_RE.match(profile):
        raise ValueError(
            f"{profile!r} is not a MIG profile; write it as nvidia-smi names it, e.g. 1g.10gb, "
            "2g.20gb or 1g.18gb (the names differ per product)"
        )
    return profile


_MIG_PROFILE_RE: Final = re.compile(MIG_PROFILE_PATTERN)
_MIGProfile = Annotated[
    str, Field(json_schema_extra={"pattern": MIG_PROFILE_PATTERN}), AfterValidator(_check_profile)
]

# --- GPUClass ------------------------------------------------------------------------------

SharingMode = Literal["shared", "exclusive"]


class SharingSpec(_Model):
    """How the class's pods use a GPU."""

    mode: SharingMode = "shared"
    """``shared``: pods of the class may share a GPU, by VRAM slice; ``exclusive``: each pod
    holds its GPUs alone (as ``gpusched.io/exclusive: "true"``). Default: shared."""
    max_clients_per_gpu: int | None = Field(
        default=None, ge=1, le=MAX_CLIENTS_PER_GPU_LIMIT, alias="maxClientsPerGPU"
    )
    """At most this many pods on one GPU of the class (WoolyAI's ``replicas``); the lower of
    this and the node's policy applies. Only for ``shared``. Default: the node's policy."""

    @model_validator(mode="after")
    def _check_mode(self) -> SharingSpec:
        if self.mode == "exclusive" and self.max_clients_per_gpu is not None:
            raise ValueError(
                "maxClientsPerGPU: an exclusive GPU has one client; remove maxClientsPerGPU "
                "or set mode: shared"
            )
        return self


class GPUClassSpec(_Model):
    """Which GPUs the class means and how its pods use them. Every criterion must hold."""

    description: str = Field(default="", max_length=1024)
    """Free text for people. Default: empty."""
    node_selector: LabelSelector = Field(default_factory=LabelSelector)
    """Labels of the nodes whose GPUs may belong to the class, e.g. GPU feature discovery's
    ``nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3``. Default: every node."""
    products: FrozenList[str] = Field(default=(), max_length=64)
    """GPU product names as NVML reports them (the inventory's ``product``, e.g.
    ``NVIDIA H100 80GB HBM3``); a GPU matches one of them. Default: any product."""
    min_vram_mib: int | None = Field(default=None, ge=1, alias="minVramMiB")
    """Least memory, in MiB, of each GPU (of each MIG device for a MIG class). Default: none."""
    mig_profiles: FrozenList[_MIGProfile] = Field(default=(), max_length=32, alias="migProfiles")
    """MIG profiles the class means (e.g. ``1g.10gb``, ``2g.20gb``): its GPUs are MIG-enabled
    GPUs with a device of one of them. Default: empty, the class means whole GPUs with MIG
    off. Profile names are per product (an H200 has 1g.18gb, not 1g.10gb)."""
    sharing: SharingSpec = Field(default_factory=SharingSpec)
    """Shared (at most N clients per GPU) or exclusive. Default: shared, the node's limit."""
    price: float | None = Field(default=None, ge=0)
    """Cost of one GPU of the class per hour, in any currency used for every class: the
    cost-optimised strategy prefers cheaper classes. Default: none (not priced)."""

    @model_validator(mode="after")
    def _check_mig(self) -> GPUClassSpec:
        if len(set(self.mig_profiles)) != len(self.mig_profiles):
            raise ValueError("migProfiles: lists a profile twice; list each once")
        return self


class GPUClassStatus(_Model):
    """Written by the scheduler."""

    observed_generation: int | None = Field(default=None, ge=0)
    """``metadata.generation`` the status was computed from."""
    matching_nodes: int | None = Field(default=None, ge=0)
    """Nodes with at least one GPU of the class."""
    matching_gpus: int | None = Field(default=None, ge=0, alias="matchingGPUs")
    """GPUs (or MIG devices, for a MIG class) of the class in the cluster."""
    conditions: FrozenList[Condition] = Field(
        default=(), max_length=16, json_schema_extra=_CONDITIONS_LIST
    )
    """``Matched``: whether any node has a GPU of the class."""


class GPUClass(_Model):
    """A kind of GPU pods may ask for by name (cluster-scoped)."""

    api_version: Literal["gpusched.io/v1alpha1"] = "gpusched.io/v1alpha1"
    kind: Literal["GPUClass"] = "GPUClass"
    metadata: ObjectMeta
    spec: GPUClassSpec = Field(default_factory=GPUClassSpec)
    status: GPUClassStatus | None = None

    @property
    def name(self) -> str:
        return self.metadata.name


# --- GPUNodePolicy and ClusterGPUPolicy ----------------------------------------------------


def _check_overcommit(value: int | None) -> int | None:
    if value is not None and value < 100:
        raise ValueError(
            f"vramOvercommitPercent is the share of physical VRAM that may be promised, "
            f"100 for none; {value} would promise less than the GPU has. For {value}% extra "
            f"(WoolyAI's meaning) write {100 + value}"
        )
    if value is not None and value > MAX_OVERCOMMIT_PERCENT:
        raise ValueError(
            f"vramOvercommitPercent {value} promises over {MAX_OVERCOMMIT_PERCENT // 100}x the "
            f"GPU's VRAM; write at most {MAX_OVERCOMMIT_PERCENT} (150 = 1.5x)"
        )
    return value


# The bounds are the validator's (its message says what to write) and the schema's, so the
# API server rejects the same values at ``kubectl apply``.
_OvercommitPercent = Annotated[
    int | None,
    Field(json_schema_extra={"minimum": 100, "maximum": MAX_OVERCOMMIT_PERCENT}),
    AfterValidator(_check_overcommit),
]


class _Limits(_Model):
    """The fields node and cluster policies share. Unset (null) leaves the decision to the
    next policy in precedence, and at the end to the built-in default."""

    allow_sharing: bool | None = None
    """Whether pods may share a GPU of the node (``false``: every pod takes whole GPUs).
    Default: true."""
    max_clients_per_gpu: int | None = Field(
        default=None, ge=1, le=MAX_CLIENTS_PER_GPU_LIMIT, alias="maxClientsPerGPU"
    )
    """Most pods on one GPU (HAMi's ``deviceSplitCount``). Default: 10."""
    max_clients_per_node: int | None = Field(default=None, ge=1)
    """Most GPU pods on the node, all its GPUs together. Default: no limit."""
    vram_overcommit_percent: _OvercommitPercent = Field(default=None, alias="vramOvercommitPercent")
    """Percent of each GPU's physical VRAM that may be promised to pods: 100 = none,
    150 = 1.5x. Default: 100."""


class GPUNodePolicySpec(_Limits):
    """Limits for the nodes ``nodeSelector`` matches."""

    node_selector: LabelSelector
    """Which nodes the policy governs, by their labels; ``{}`` matches every node."""


class ClusterGPUPolicySpec(_Limits):
    """Cluster-wide defaults for nodes no ``GPUNodePolicy`` decides."""


class PolicyStatus(_Model):
    """Written by the scheduler."""

    observed_generation: int | None = Field(default=None, ge=0)
    """``metadata.generation`` the status was computed from."""
    matching_nodes: int | None = Field(default=None, ge=0)
    """Nodes the policy governs: that its selector matches (a cluster policy: all nodes)."""
    conditions: FrozenList[Condition] = Field(
        default=(), max_length=16, json_schema_extra=_CONDITIONS_LIST
    )
    """``Applied``: it decides a field on some node; ``Overridden``: another policy wins a
    field it sets on some node (the message says which and where)."""


class GPUNodePolicy(_Model):
    """GPU sharing limits for a set of nodes (cluster-scoped)."""

    api_version: Literal["gpusched.io/v1alpha1"] = "gpusched.io/v1alpha1"
    kind: Literal["GPUNodePolicy"] = "GPUNodePolicy"
    metadata: ObjectMeta
    spec: GPUNodePolicySpec
    status: PolicyStatus | None = None

    @property
    def name(self) -> str:
        return self.metadata.name


class ClusterGPUPolicy(_Model):
    """Cluster-wide GPU sharing defaults; only the one named ``default`` applies."""

    api_version: Literal["gpusched.io/v1alpha1"] = "gpusched.io/v1alpha1"
    kind: Literal["ClusterGPUPolicy"] = "ClusterGPUPolicy"
    metadata: ObjectMeta
    spec: ClusterGPUPolicySpec = Field(default_factory=ClusterGPUPolicySpec)
    status: PolicyStatus | None = None

    @property
    def name(self) -> str:
        return self.metadata.name


# --- Parsing stored objects ----------------------------------------------------------------

_KINDS: Final[dict[str, type[GPUClass] | type[GPUNodePolicy] | type[ClusterGPUPolicy]]] = {
    "GPUClass": GPUClass,
    "GPUNodePolicy": GPUNodePolicy,
    "ClusterGPUPolicy": ClusterGPUPolicy,
}


class PolicyError(ValueError):
    """A policy object the scheduler cannot use; ``problems`` has one line per bad field,
    named by its wire path (``spec.vramOvercommitPercent: ...``)."""

    def __init__(self, ref: str, problems: list[str]) -> None:
        self.ref = ref
        self.problems = problems
        super().__init__(f"{ref}: " + "; ".join(problems))


def parse_policy_object(obj: Mapping[str, Any]) -> GPUClass | GPUNodePolicy | ClusterGPUPolicy:
    """Parse an object as the API server returns it (wire names, JSON values).

    Raises :class:`PolicyError` naming the kind and object (``GPUNodePolicy/big-nodes``) and
    every bad field. ``managedFields`` and other metadata are kept, not checked.
    """
    kind = obj.get("kind")
    name = (obj.get("metadata") or {}).get("name", "?")
    model = _KINDS.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise PolicyError(
            f"{kind}/{name}",
            [f"kind: {kind!r} is not a policy kind; use one of {', '.join(_KINDS)}"],
        )
    try:
        return model.model_validate(obj)
    except ValidationError as exc:
        raise PolicyError(f"{kind}/{name}", validation_problems(exc)) from None
