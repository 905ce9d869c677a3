"""NodeAffinity: ``nodeSelector`` and node affinity (upstream's ``nodeaffinity``).

Filter: a node must carry every label of ``spec.nodeSelector`` and match
``affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution``, else
UnschedulableAndUnresolvable ``node(s) didn't match Pod's node affinity/selector``.
Score: the sum of the weights of the ``preferredDuringSchedulingIgnoredDuringExecution`` terms
the node matches, normalised so the best node gets 100 (upstream's ``DefaultNormalizeScore``).

Matching is k8s.io/component-helpers/scheduling/corev1/nodeaffinity's:

- ``nodeSelectorTerms`` are ORed; within a term, ``matchExpressions`` and ``matchFields`` are
  ANDed; a term with neither matches nothing, and so does an empty list of terms;
- ``matchExpressions`` on node labels: ``In`` (label present, value listed), ``NotIn`` (label
  absent, or value not listed), ``Exists``, ``DoesNotExist``, ``Gt``/``Lt`` (label present and
  its value, parsed as a base-10 int64, greater/less than the single value given);
- ``matchFields`` on ``metadata.name`` only, ``In``/``NotIn`` with exactly one value;
- a malformed requirement (``In`` without values, ``Exists`` with values, ``Gt`` with a value
  that is not an integer, an unknown operator) makes its term match nothing, the other terms
  still count (upstream's lazy errors); a malformed preferred term is an Error, as upstream.
  Label key and value syntax is left to the API server's validation.

PreFilter compiles the pod's requirements once per cycle (``CycleState``) so that Filter only
compares strings; when every term pins ``metadata.name In [...]`` it also returns those node
names (a ``PreFilterResult``), and ``pod affinity terms conflict`` when they cannot overlap.
Pods with neither a node selector nor required affinity skip Filter entirely.

Args (``pluginConfig``, as upstream's ``NodeAffinityArgs``)::

    - name: NodeAffinity
      args:
        addedAffinity:           # applied to every pod of the profile, on top of its own
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms: [{matchExpressions: [{key: pool, operator: In, values: [gpu]}]}]
          preferredDuringSchedulingIgnoredDuringExecution:
          - {weight: 10, preference: {matchExpressions: [...]}}

Nodes the added required affinity excludes are rejected with
``node(s) didn't match scheduler-enforced node affinity``.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, Self

from pydantic import Field, model_validator

from gpusched.framework import (
    MAX_NODE_SCORE,
    SUCCESS,
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    CycleState,
    EnqueueExtensions,
    FilterPlugin,
    Handle,
    NodeScore,
    PluginArgs,
    Pod,
    PreFilterPlugin,
    PreFilterResult,
    PreScorePlugin,
    QueueingHint,
    ScoreExtensions,
    ScorePlugin,
    SignPlugin,
    StateKey,
    Status,
)
from gpusched.node_selector import (
    OBJECT_NAME_FIELD,
    NodeSelector,
    SelectorError,
    Term,
    compile_requirement,
)

from ._helper import default_normalize_score, freeze, node_of, pod_spec

if TYPE_CHECKING:
    from gpusched.cache import NodeInfo

__all__ = [
    "NAME",
    "OBJECT_NAME_FIELD",
    "REASON_CONFLICT",
    "REASON_ENFORCED",
    "REASON_POD",
    "AddedAffinityArgs",
    "NodeAffinity",
    "NodeAffinityArgs",
    "NodeSelector",
    "NodeSelectorArgs",
    "NodeSelectorRequirementArgs",
    "NodeSelectorTermArgs",
    "PreferredSchedulingTermArgs",
    "PreferredTerms",
    "RequiredNodeAffinity",
    "SelectorError",
    "Term",
]

NAME: Final = "NodeAffinity"

REASON_POD: Final = "node(s) didn't match Pod's node affinity/selector"
"""Upstream's ``ErrReasonPod``."""
REASON_ENFORCED: Final = "node(s) didn't match scheduler-enforced node affinity"
"""Upstream's ``errReasonEnforced``: the ``addedAffinity`` arg excludes the node."""
REASON_CONFLICT: Final = "pod affinity terms conflict"
"""Upstream's ``errReasonConflict``: the terms' ``metadata.name`` sets cannot all be met."""

_REJECTED: Final = Status.unresolvable(REASON_POD, plugin=NAME)
_REJECTED_ENFORCED: Final = Status.unresolvable(REASON_ENFORCED, plugin=NAME)
_CONFLICT: Final = Status.unresolvable(REASON_CONFLICT, plugin=NAME)


class RequiredNodeAffinity:
    """A pod's ``nodeSelector`` and required node affinity, compiled (upstream's
    ``RequiredNodeAffinity``). Either part may be absent (``None``)."""

    __slots__ = ("node_selector", "selector")

    def __init__(
        self, node_selector: tuple[tuple[str, str], ...] | None, selector: NodeSelector | None
    ) -> None:
        self.node_selector = node_selector
        self.selector = selector

    @classmethod
    def from_pod(cls, pod: Pod) -> RequiredNodeAffinity:
        spec = pod_spec(pod)
        labels: Mapping[str, Any] | None = spec.get("nodeSelector")
        node_selector = (
            tuple((str(k), str(v)) for k, v in labels.items()) if labels is not None else None
        )
        required = _required_of(spec)
        selector = NodeSelector.compile(required) if required is not None else None
        return cls(node_selector, selector)

    def matches(self, labels: Mapping[str, str], node_name: str) -> bool:
        if self.node_selector is not None:
            for key, value in self.node_selector:
                if labels.get(key) != value:
                    return False
        return self.selector is None or self.selector.matches(labels, node_name)


class PreferredTerms:
    """Compiled ``preferredDuringSchedulingIgnoredDuringExecution`` (upstream's
    ``PreferredSchedulingTerms``): terms with weight 0 or no requirements are dropped."""

    __slots__ = ("terms",)

    def __init__(self, terms: tuple[tuple[int, Term], ...]) -> None:
        self.terms = terms

    @classmethod
    def compile(
        cls,
        raw: Sequence[Mapping[str, Any]],
        path: str = "preferredDuringSchedulingIgnoredDuringExecution",
    ) -> PreferredTerms:
        """Raises ``SelectorError`` naming every malformed term."""
        terms: list[tuple[int, Term]] = []
        errors: list[str] = []
        for i, entry in enumerate(raw):
            weight = int(entry.get("weight") or 0)
            if weight == 0:
                continue
            try:
                term = Term.compile(entry.get("preference") or {}, f"{path}[{i}].preference")
            except SelectorError as exc:
                errors.append(str(exc))
                continue
            if term is not None:
                terms.append((weight, term))
        if errors:
            raise SelectorError("; ".join(errors))
        return cls(tuple(terms))

    def score(self, labels: Mapping[str, str], node_name: str) -> int:
        """The sum of the weights of the terms the node matches. O(terms x requirements)."""
        return sum(weight for weight, term in self.terms if term.matches(labels, node_name))


def _node_affinity(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    affinity = spec.get("affinity") or {}
    result: Mapping[str, Any] = affinity.get("nodeAffinity") or {}
    return result


def _required_of(spec: Mapping[str, Any]) -> Mapping[str, Any] | None:
    required: Mapping[str, Any] | None = _node_affinity(spec).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    return required


def _pinned_node_names(required: Mapping[str, Any]) -> frozenset[str] | None:
    """The node names every term restricts itself to with ``metadata.name In [...]``; ``None``
    when some term does not (so any node may match). Upstream's PreFilter logic."""
    names: set[str] = set()
    for term in required.get("nodeSelectorTerms") or ():
        term_names: set[str] | None = None
        for field in (term or {}).get("matchFields") or ():
            if field.get("key") == OBJECT_NAME_FIELD and field.get("operator") == "In":
                values = {str(v) for v in field.get("values") or ()}
                term_names = values if term_names is None else term_names & values
        if term_names is None:
            return None
        names |= term_names
    return frozenset(names)


# -- args ------------------------------------------------------------------------------------


class NodeSelectorRequirementArgs(PluginArgs):
    """One ``matchExpressions`` or ``matchFields`` entry."""

    key: str = Field(min_length=1)
    """The node label (or, in ``matchFields``, ``metadata.name``). Required."""
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    """How the values apply. Required."""
    values: list[str] = []
    """Values for ``In``/``NotIn`` (non-empty), one integer for ``Gt``/``Lt``, none otherwise."""

    @model_validator(mode="after")
    def _check(self) -> Self:
        try:
            compile_requirement(self.model_dump(by_alias=True), "")
        except SelectorError as exc:
            raise ValueError(str(exc).removeprefix(".")) from None
        return self


class NodeSelectorTermArgs(PluginArgs):
    """A ``NodeSelectorTerm``: requirements that must all hold."""

    match_expressions: list[NodeSelectorRequirementArgs] = []
    """Requirements on node labels."""
    match_fields: list[NodeSelectorRequirementArgs] = []
    """Requirements on node fields (``metadata.name``, ``In``/``NotIn``, one value)."""


class NodeSelectorArgs(PluginArgs):
    """A ``NodeSelector``: terms of which at least one must hold."""

    node_selector_terms: list[NodeSelectorTermArgs] = Field(min_length=1)
    """The terms, ORed. At least one."""


class PreferredSchedulingTermArgs(PluginArgs):
    """A weighted preference."""

    weight: int = Field(ge=1, le=100)
    """Added to a node's score when it matches ``preference`` (1..100). Required."""
    preference: NodeSelectorTermArgs
    """The term to match. Required."""


class AddedAffinityArgs(PluginArgs):
    """Node affinity applied to every pod of the profile (upstream's ``addedAffinity``)."""

    required_during_scheduling_ignored_during_execution: NodeSelectorArgs | None = None
    """Nodes outside it are rejected (``node(s) didn't match scheduler-enforced node
    affinity``). Default: none."""
    preferred_during_scheduling_ignored_during_execution: list[PreferredSchedulingTermArgs] = []
    """Weighted preferences added to every pod's own. Default: none."""


class NodeAffinityArgs(PluginArgs):
    """``pluginConfig`` args of NodeAffinity (upstream's ``NodeAffinityArgs``)."""

    added_affinity: AddedAffinityArgs | None = None
    """Affinity added to every pod's. Default: none."""


# -- the plugin ------------------------------------------------------------------------------

_PRE_FILTER: Final = StateKey[RequiredNodeAffinity]("PreFilterNodeAffinity")
_PRE_SCORE: Final = StateKey[PreferredTerms | None]("PreScoreNodeAffinity")


class NodeAffinity(
    PreFilterPlugin,
    FilterPlugin,
    PreScorePlugin,
    ScorePlugin,
    ScoreExtensions,
    SignPlugin,
    EnqueueExtensions,
):
    """Filters on ``nodeSelector`` and required node affinity; scores preferred affinity."""

    NAME = NAME
    ARGS = NodeAffinityArgs

    def __init__(self, args: NodeAffinityArgs | None = None) -> None:
        added = args.added_affinity if args is not None else None
        self._added_required: NodeSelector | None = None
        self._added_preferred: PreferredTerms | None = None
        if added is not None:
            raw = added.model_dump(by_alias=True, exclude_none=True)
            required = raw.get("requiredDuringSchedulingIgnoredDuringExecution")
            if required is not None:
                selector = NodeSelector.compile(
                    required, "addedAffinity.requiredDuringSchedulingIgnoredDuringExecution"
                )
                if selector.errors:
                    raise ValueError("; ".join(selector.errors))
                self._added_required = selector
            preferred = raw.get("preferredDuringSchedulingIgnoredDuringExecution")
            if preferred:
                self._added_preferred = PreferredTerms.compile(
                    preferred, "addedAffinity.preferredDuringSchedulingIgnoredDuringExecution"
                )

    @classmethod
    def new(cls, args: Any, handle: Handle) -> Self:
        return cls(args if isinstance(args, NodeAffinityArgs) else None)

    # -- PreFilter / Filter ----------------------------------------------------------------

    def pre_filter(self, state: CycleState, pod: Pod) -> tuple[PreFilterResult | None, Status]:
        spec = pod_spec(pod)
        required = _required_of(spec)
        if required is None and self._added_required is None and spec.get("nodeSelector") is None:
            return None, Status.skip()
        state.write(_PRE_FILTER, RequiredNodeAffinity.from_pod(pod))
        if required is None or not required.get("nodeSelectorTerms"):
            return None, SUCCESS
        names = _pinned_node_names(required)
        if names is None:
            return None, SUCCESS
        if not names:
            return None, _CONFLICT
        return PreFilterResult(names), SUCCESS

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        labels = node_info.labels
        added = self._added_required
        if added is not None and not added.matches(labels, node_info.name):
            return _REJECTED_ENFORCED
        required = state.get(_PRE_FILTER)
        if required is None:  # PreFilter disabled for this plugin
            required = RequiredNodeAffinity.from_pod(pod)
        return SUCCESS if required.matches(labels, node_info.name) else _REJECTED

    # -- PreScore / Score ------------------------------------------------------------------

    def pre_score(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        try:
            preferred = self._pod_preferred(pod)
        except SelectorError as exc:
            return Status.error(f"invalid preferred node affinity: {exc}", plugin=NAME)
        if preferred is None and self._added_preferred is None:
            return Status.skip()
        state.write(_PRE_SCORE, preferred)
        return SUCCESS

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> tuple[int, Status]:
        labels, name = node_info.labels, node_info.name
        total = 0
        if self._added_preferred is not None:
            total += self._added_preferred.score(labels, name)
        if _PRE_SCORE in state:
            preferred = state.read(_PRE_SCORE)
        else:  # PreScore disabled for this plugin
            try:
                preferred = self._pod_preferred(pod)
            except SelectorError as exc:
                return 0, Status.error(f"invalid preferred node affinity: {exc}", plugin=NAME)
        if preferred is not None:
            total += preferred.score(labels, name)
        return total, SUCCESS

    def normalize_score(self, state: CycleState, pod: Pod, scores: list[NodeScore]) -> Status:
        default_normalize_score(MAX_NODE_SCORE, False, scores)
        return SUCCESS

    @staticmethod
    def _pod_preferred(pod: Pod) -> PreferredTerms | None:
        preferred = _node_affinity(pod_spec(pod)).get(
            "preferredDuringSchedulingIgnoredDuringExecution"
        )
        return PreferredTerms.compile(preferred) if preferred is not None else None

    # -- SignPlugin ------------------------------------------------------------------------

    def sign_pod(self, pod: Pod) -> Hashable | None:
        """``nodeSelector`` and required node affinity; ``None`` for a pod with preferred
        terms (or with preferred ``addedAffinity``: its scores differ from node to node) and
        for one whose required terms pin node names (PreFilter restricts the nodes)."""
        if self._added_preferred is not None:
            return None
        spec = pod_spec(pod)
        affinity = _node_affinity(spec)
        if affinity.get("preferredDuringSchedulingIgnoredDuringExecution"):
            return None
        required = _required_of(spec)
        if required is not None and _pinned_node_names(required) is not None:
            return None
        return (freeze(spec.get("nodeSelector")), freeze(required))

    # -- events ----------------------------------------------------------------------------

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """A node added, or whose labels change, that now matches."""
        return [
            ClusterEventWithHint(
                ClusterEvent("Node", ActionType.ADD | ActionType.UPDATE),
                self._after_node_change,
            )
        ]

    def _after_node_change(self, pod: Pod, old: object, new: object) -> QueueingHint:
        node = node_of(new)
        if node is None:
            return QueueingHint.QUEUE_SKIP
        required = RequiredNodeAffinity.from_pod(pod)
        if not self._node_matches(required, node):
            return QueueingHint.QUEUE_SKIP
        before = node_of(old)
        if before is not None and self._node_matches(required, before):
            return QueueingHint.QUEUE_SKIP  # it matched before: this change is not what helps
        return QueueingHint.QUEUE

    def _node_matches(self, required: RequiredNodeAffinity, node: Mapping[str, Any]) -> bool:
        meta = node.get("metadata") or {}
        labels: Mapping[str, str] = meta.get("labels") or {}
        name = str(meta.get("name") or "")
        added = self._added_required
        if added is not None and not added.matches(labels, name):
            return False
        return required.matches(labels, name)
