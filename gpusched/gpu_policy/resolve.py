"""A node's effective GPU limits, and the GPU classes its GPUs belong to. Pure, no I/O.

**Precedence, field by field.** Each limit (``allowSharing``, ``maxClientsPerGPU``,
``maxClientsPerNode``, ``vramOvercommitPercent``) is decided on its own:

1. among the ``GPUNodePolicy`` objects whose ``nodeSelector`` matches the node and that *set*
   the field, the one with the most specific selector wins (more ``matchLabels`` entries plus
   ``matchExpressions`` terms); equal specificity: a gpusched object before one read from
   WoolyAI's ``WoolyNodePolicy`` (:mod:`gpusched.gpu_policy.woolyai`), then the name first in
   alphabetical order;
2. else the ``ClusterGPUPolicy`` named ``default``, if it sets the field; else WoolyAI's
   ``ClusterGPUPolicy`` named ``default`` (group ``woolyai.dev``), if it sets it;
3. else the built-in default: sharing allowed, 10 clients per GPU (HAMi's
   ``deviceSplitCount``), no per-node limit, 100 % (no VRAM overcommit).

Field by field, so a pool policy that only raises overcommit keeps the client limit a broader
policy sets. Every matching policy that set a field and lost it is reported as an
:class:`Override` (winner and loser) so the scheduler can put an Event on the loser and
``Overridden`` in its status; :func:`policy_reports` aggregates them over all nodes.

**Classes.** :func:`match_class` says which GPUs of a node belong to a ``GPUClass``, and if
none why not, in words a user can act on; :func:`classes_matching` lists the classes a node
serves. A class with ``migProfiles`` means MIG-enabled GPUs with a device of one of those
profiles (``minVramMiB`` then bounds the MIG device's memory); without, whole GPUs with MIG
off. :func:`apply_class` narrows a node's limits by a class's sharing mode.

Cost: :class:`PolicyResolver` sorts the policies once (O(P log P)); :meth:`~PolicyResolver.resolve`
is O(P·s) for P node policies of s requirements, memoised by the node's values of the label
keys any selector reads, so nodes of one pool cost a dictionary lookup after the first.
:func:`match_class` is O(selector + GPUs·(products + MIG devices)).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from gpusched.gpu_policy.models import (
    CLUSTER_POLICY_NAME,
    ClusterGPUPolicy,
    GPUClass,
    GPUNodePolicy,
    LabelSelector,
)
from gpusched.gpu_policy.woolyai import is_read_from_woolyai
from gpusched.inventory import GPUDevice

__all__ = [
    "BUILTIN_SOURCE",
    "DEFAULT_ALLOW_SHARING",
    "DEFAULT_MAX_CLIENTS_PER_GPU",
    "DEFAULT_MAX_CLIENTS_PER_NODE",
    "DEFAULT_VRAM_OVERCOMMIT_PERCENT",
    "FIELDS",
    "ClassMatch",
    "EffectivePolicy",
    "Override",
    "PolicyReport",
    "PolicyResolver",
    "apply_class",
    "classes_matching",
    "match_class",
    "policy_ref",
    "policy_reports",
    "resolve_policy",
    "select_cluster_policy",
]

DEFAULT_ALLOW_SHARING: Final = True
DEFAULT_MAX_CLIENTS_PER_GPU: Final = 10
"""HAMi's default ``deviceSplitCount`` (its chart's ``devicePlugin.deviceSplitCount: 10``)."""
DEFAULT_MAX_CLIENTS_PER_NODE: Final[int | None] = None
DEFAULT_VRAM_OVERCOMMIT_PERCENT: Final = 100
BUILTIN_SOURCE: Final = "built-in default"
"""The ``source`` of a field no policy set."""

FIELDS: Final[tuple[tuple[str, str], ...]] = (
    ("allow_sharing", "allowSharing"),
    ("max_clients_per_gpu", "maxClientsPerGPU"),
    ("max_clients_per_node", "maxClientsPerNode"),
    ("vram_overcommit_percent", "vramOvercommitPercent"),
)
"""(Python name, wire name) of each limit, in the order they are resolved and reported."""

_DEFAULTS: Final[dict[str, bool | int | None]] = {
    "allow_sharing": DEFAULT_ALLOW_SHARING,
    "max_clients_per_gpu": DEFAULT_MAX_CLIENTS_PER_GPU,
    "max_clients_per_node": DEFAULT_MAX_CLIENTS_PER_NODE,
    "vram_overcommit_percent": DEFAULT_VRAM_OVERCOMMIT_PERCENT,
}


def _ref(obj: GPUNodePolicy | ClusterGPUPolicy) -> str:
    return policy_ref(obj)


def policy_ref(obj: GPUClass | GPUNodePolicy | ClusterGPUPolicy) -> str:
    """``Kind/name`` of the object, or of the WoolyAI object it was read from
    (``WoolyNodePolicy/x``, ``ClusterGPUPolicy.woolyai.dev/default``): the key of reports and
    the name in messages."""
    return is_read_from_woolyai(obj) or f"{obj.kind}/{obj.name}"


@dataclass(frozen=True, slots=True)
class Override:
    """On one node, ``winner`` decided ``field`` (wire name) that ``loser`` also set."""

    field: str
    winner: str
    loser: str


@dataclass(frozen=True, slots=True)
class EffectivePolicy:
    """The limits that hold on one node, and who decided each."""

    allow_sharing: bool = DEFAULT_ALLOW_SHARING
    max_clients_per_gpu: int = DEFAULT_MAX_CLIENTS_PER_GPU
    max_clients_per_node: int | None = DEFAULT_MAX_CLIENTS_PER_NODE
    vram_overcommit_percent: int = DEFAULT_VRAM_OVERCOMMIT_PERCENT
    source: Mapping[str, str] = field(default_factory=dict, hash=False)
    """Wire field name -> ``Kind/name`` of the policy that decided it, or
    :data:`BUILTIN_SOURCE`; every field of :data:`FIELDS` is present once resolved."""
    matched: tuple[str, ...] = ()
    """Names of the node policies whose selector matches the node, in precedence order."""
    matched_refs: tuple[str, ...] = ()
    """The same policies by ``Kind/name`` (:func:`policy_ref`): unique where names are not
    (a ``GPUNodePolicy`` and a ``WoolyNodePolicy`` may share one)."""
    overrides: tuple[Override, ...] = ()
    """Each (field, winner, loser) where a matching policy set a field and lost it."""

    def vram_capacity_mib(self, physical_mib: int) -> int:
        """VRAM that may be promised on a GPU of ``physical_mib``: rounded down, so the
        promise never exceeds the percentage. O(1)."""
        return physical_mib * self.vram_overcommit_percent // 100


def select_cluster_policy(
    policies: Iterable[ClusterGPUPolicy],
) -> tuple[ClusterGPUPolicy | None, tuple[str, ...]]:
    """The ``ClusterGPUPolicy`` that applies (the one named ``default``) and the names of
    those ignored, sorted (their status should say: rename to ``default`` or merge into it)."""
    chosen = None
    ignored = []
    for policy in policies:
        if policy.name == CLUSTER_POLICY_NAME:
            chosen = policy
        else:
            ignored.append(policy.name)
    return chosen, tuple(sorted(ignored))


def _precedence(policy: GPUNodePolicy) -> tuple[int, bool, str]:
    woolyai = is_read_from_woolyai(policy) is not None
    return (-policy.spec.node_selector.specificity, woolyai, policy.name)


class PolicyResolver:
    """Node policies sorted once, plus the cluster policy; resolves nodes by their labels.

    Build a new one when any policy changes (the objects are immutable). Not thread-safe (the
    memo), like the rest of the scheduling cycle.
    """

    __slots__ = ("_cache", "_cluster", "_clusters", "_keys", "_policies")

    def __init__(
        self,
        node_policies: Iterable[GPUNodePolicy],
        cluster_policy: ClusterGPUPolicy | None,
        woolyai_cluster_policy: ClusterGPUPolicy | None = None,
    ) -> None:
        self._policies: tuple[GPUNodePolicy, ...] = tuple(sorted(node_policies, key=_precedence))
        self._cluster = cluster_policy
        self._clusters: tuple[ClusterGPUPolicy, ...] = tuple(
            c for c in (cluster_policy, woolyai_cluster_policy) if c is not None
        )
        keys: set[str] = set()
        for policy in self._policies:
            keys |= policy.spec.node_selector.keys()
        self._keys: tuple[str, ...] = tuple(sorted(keys))
        self._cache: dict[tuple[str | None, ...], EffectivePolicy] = {}

    @property
    def node_policies(self) -> tuple[GPUNodePolicy, ...]:
        """In precedence order: the first that matches a node and sets a field decides it."""
        return self._policies

    @property
    def cluster_policy(self) -> ClusterGPUPolicy | None:
        return self._cluster

    @property
    def cluster_policies(self) -> tuple[ClusterGPUPolicy, ...]:
        """gpusched's ``default`` then WoolyAI's, those that exist: consulted in this order."""
        return self._clusters

    def resolve(self, labels: Mapping[str, str]) -> EffectivePolicy:
        """The effective limits of a node with ``labels``. O(P·s) the first time a
        combination of the selectors' label values is seen, O(keys) after."""
        key = tuple(labels.get(k) for k in self._keys)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._cache[key] = self._resolve(labels)
        return hit

    def _resolve(self, labels: Mapping[str, str]) -> EffectivePolicy:
        matched = [p for p in self._policies if p.spec.node_selector.matches(labels)]
        values: dict[str, bool | int | None] = {}
        source: dict[str, str] = {}
        overrides: list[Override] = []
        for name, wire in FIELDS:
            winner: str | None = None
            for policy in matched:
                value = getattr(policy.spec, name)
                if value is None:
                    continue
                if winner is None:
                    winner = _ref(policy)
                    values[name] = value
                else:
                    overrides.append(Override(wire, winner, _ref(policy)))
            for cluster in self._clusters if winner is None else ():
                value = getattr(cluster.spec, name)
                if value is not None:
                    winner = _ref(cluster)
                    values[name] = value
                    break
            if winner is None:
                values[name] = _DEFAULTS[name]
                winner = BUILTIN_SOURCE
            source[wire] = winner
        allow_sharing = values["allow_sharing"]
        per_gpu = values["max_clients_per_gpu"]
        per_node = values["max_clients_per_node"]
        percent = values["vram_overcommit_percent"]
        assert isinstance(allow_sharing, bool)
        assert isinstance(per_gpu, int)
        assert isinstance(percent, int)
        assert per_node is None or isinstance(per_node, int)
        return EffectivePolicy(
            allow_sharing=allow_sharing,
            max_clients_per_gpu=per_gpu,
            max_clients_per_node=per_node,
            vram_overcommit_percent=percent,
            source=source,
            matched=tuple(p.name for p in matched),
            matched_refs=tuple(_ref(p) for p in matched),
            overrides=tuple(overrides),
        )


def resolve_policy(
    labels: Mapping[str, str],
    node_policies: Iterable[GPUNodePolicy],
    cluster_policy: ClusterGPUPolicy | None,
) -> EffectivePolicy:
    """One node's effective limits; for many nodes build a :class:`PolicyResolver` once."""
    return PolicyResolver(node_policies, cluster_policy).resolve(labels)


@dataclass(slots=True)
class PolicyReport:
    """What one policy did over all nodes: its status and its Events."""

    ref: str
    matching_nodes: int = 0
    """Nodes the policy governs (a node policy: its selector matches; cluster: all)."""
    applied_nodes: int = 0
    """Nodes where it decides at least one field."""
    overridden_by: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    """Winner ``Kind/name`` -> wire field -> nodes (sorted) where the winner took the field."""

    @property
    def applied(self) -> bool:
        return self.applied_nodes > 0

    @property
    def overridden(self) -> bool:
        return bool(self.overridden_by)

    def message(self, sample: int = 3) -> str:
        """For the ``Overridden`` condition and the Event on the losing policy."""
        if not self.overridden_by:
            return f"{self.ref} decides every field it sets on its {self.matching_nodes} nodes"
        parts = []
        for winner, fields in sorted(self.overridden_by.items()):
            for wire, nodes in sorted(fields.items()):
                shown = ", ".join(nodes[:sample]) + (
                    f" and {len(nodes) - sample} more" if len(nodes) > sample else ""
                )
                parts.append(f"{wire} on {len(nodes)} nodes ({shown}) to {winner}")
        return (
            f"{self.ref} loses " + "; ".join(parts) + ": on a node matched by several "
            "GPUNodePolicies each field goes to the most specific nodeSelector (ties: a "
            "GPUNodePolicy before a WoolyNodePolicy, then the first name); remove the field "
            "from one of them or make the intended selector more specific"
        )


def policy_reports(
    resolver: PolicyResolver, nodes: Mapping[str, Mapping[str, str]]
) -> dict[str, PolicyReport]:
    """Per policy (``Kind/name``), over ``nodes`` (name -> labels): matching and applied
    nodes and who overrode it where. Every node policy and the cluster policy get a report.
    O(nodes · P) (resolution memoised)."""
    reports = {_ref(p): PolicyReport(_ref(p)) for p in resolver.node_policies}
    for cluster in resolver.cluster_policies:
        reports[_ref(cluster)] = PolicyReport(_ref(cluster), matching_nodes=len(nodes))
    for node in sorted(nodes):
        effective = resolver.resolve(nodes[node])
        for ref in effective.matched_refs:
            reports[ref].matching_nodes += 1
        for winner in set(effective.source.values()):
            if winner in reports:
                reports[winner].applied_nodes += 1
        for o in effective.overrides:
            reports[o.loser].overridden_by.setdefault(o.winner, {}).setdefault(o.field, []).append(
                node
            )
    return reports


# --- Classes -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClassMatch:
    """Which GPUs of one node belong to a class."""

    name: str
    gpu_indices: tuple[int, ...] = ()
    """GPUs of the class, by index: for a MIG class, the GPUs with a device of its profiles."""
    mig_devices: tuple[tuple[int, str], ...] = ()
    """For a MIG class: (GPU index, MIG UUID) of each device of its profiles and size."""
    reason: str = ""
    """Why no GPU belongs to the class; empty when some does."""

    @property
    def matched(self) -> bool:
        return bool(self.gpu_indices)


def _selector_miss(selector: LabelSelector, labels: Mapping[str, str]) -> str:
    for key, want in selector.match_labels.items():
        have = labels.get(key)
        if have != want:
            got = "not set" if have is None else f"{have!r}"
            return f"node label {key} is {got}, the class's nodeSelector needs {want!r}"
    for term in selector.match_expressions:
        if not term.matches(labels):
            have = labels.get(term.key)
            got = "not set" if have is None else f"{have!r}"
            values = f" {list(term.values)}" if term.values else ""
            return f"node label {term.key} is {got}, the class needs {term.operator}{values}"
    return ""


def match_class(cls: GPUClass, labels: Mapping[str, str], gpus: Sequence[GPUDevice]) -> ClassMatch:
    """The GPUs of a node (its ``labels`` and inventory ``gpus``) that belong to ``cls``.

    A GPU belongs when the node matches ``nodeSelector``, its product is one of
    ``products`` (if any), and either the class has no ``migProfiles`` and the GPU has MIG
    off and at least ``minVramMiB``, or the GPU has a MIG device of one of ``migProfiles``
    with at least ``minVramMiB``. The reason of a miss names the first unmet criterion.
    """
    spec = cls.spec
    miss = _selector_miss(spec.node_selector, labels)
    if miss:
        return ClassMatch(cls.name, reason=miss)
    if not gpus:
        return ClassMatch(cls.name, reason="the node has no GPUs in its inventory")
    candidates = [g for g in gpus if not spec.products or g.product in spec.products]
    if not candidates:
        products = sorted({g.product for g in gpus})
        return ClassMatch(
            cls.name,
            reason=f"the node's GPUs are {', '.join(products)}; the class wants "
            f"{', '.join(spec.products)}",
        )
    floor = spec.min_vram_mib or 0
    if not spec.mig_profiles:
        whole = [g for g in candidates if not g.mig_enabled]
        if not whole:
            return ClassMatch(
                cls.name,
                reason="every GPU of the node has MIG on; the class means whole GPUs "
                "(give it migProfiles to mean MIG devices)",
            )
        big = tuple(g.index for g in whole if g.memory_mib >= floor)
        if not big:
            most = max(g.memory_mib for g in whole)
            return ClassMatch(
                cls.name,
                reason=f"the node's largest GPU has {most} MiB; the class needs minVramMiB {floor}",
            )
        return ClassMatch(cls.name, gpu_indices=big)
    wanted = set(spec.mig_profiles)
    devices = [
        (g.index, d.uuid, d.memory_mib)
        for g in candidates
        if g.mig_enabled
        for d in g.mig_devices
        if d.profile in wanted
    ]
    if not devices:
        offered = sorted({d.profile for g in candidates for d in g.mig_devices})
        have = f"offer {', '.join(offered)}" if offered else "offer no MIG devices"
        return ClassMatch(
            cls.name,
            reason=f"the node's GPUs {have}; the class wants {', '.join(spec.mig_profiles)}",
        )
    fit = [(i, uuid) for i, uuid, mib in devices if mib >= floor]
    if not fit:
        most = max(mib for _, _, mib in devices)
        return ClassMatch(
            cls.name,
            reason=f"the node's largest MIG device of the class's profiles has "
            f"{most} MiB; the class needs minVramMiB {floor}",
        )
    return ClassMatch(
        cls.name, gpu_indices=tuple(sorted({i for i, _ in fit})), mig_devices=tuple(fit)
    )


def classes_matching(
    labels: Mapping[str, str], gpus: Sequence[GPUDevice], classes: Iterable[GPUClass]
) -> tuple[ClassMatch, ...]:
    """The classes some GPU of the node belongs to, by class name."""
    matches = (match_class(c, labels, gpus) for c in sorted(classes, key=lambda c: c.name))
    return tuple(m for m in matches if m.matched)


def apply_class(policy: EffectivePolicy, cls: GPUClass) -> EffectivePolicy:
    """The node's limits for pods of ``cls``: an exclusive class forbids sharing; a shared
    class's ``maxClientsPerGPU`` lowers the node's (never raises it)."""
    sharing = cls.spec.sharing
    ref = f"GPUClass/{cls.name}"
    source = dict(policy.source)
    allow = policy.allow_sharing
    per_gpu = policy.max_clients_per_gpu
    if sharing.mode == "exclusive":
        if allow:
            source["allowSharing"] = ref
        allow = False
    elif sharing.max_clients_per_gpu is not None and sharing.max_clients_per_gpu < per_gpu:
        per_gpu = sharing.max_clients_per_gpu
        source["maxClientsPerGPU"] = ref
    return EffectivePolicy(
        allow_sharing=allow,
        max_clients_per_gpu=per_gpu,
        max_clients_per_node=policy.max_clients_per_node,
        vram_overcommit_percent=policy.vram_overcommit_percent,
        source=source,
        matched=policy.matched,
        matched_refs=policy.matched_refs,
        overrides=policy.overrides,
    )
