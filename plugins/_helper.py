"""Helpers shared by the built-in plugins (not a plugin: ``in_tree`` skips ``_`` modules).

Upstream counterparts:

- :func:`default_normalize_score`: pkg/scheduler/framework/plugins/helper/normalize_score.go;
- :func:`tolerates_taint`, :func:`tolerations_tolerate_taint`, :func:`find_untolerated_taint`:
  ``Toleration.ToleratesTaint`` (k8s.io/api/core/v1/toleration.go) and
  k8s.io/component-helpers/scheduling/corev1/helpers.go, exactly: an empty toleration effect
  matches every effect, an empty key matches every key (with ``Exists``: every taint), an empty
  operator means ``Equal``. The alpha ``Gt``/``Lt`` toleration operators
  (TaintTolerationComparisonOperators, 1.35) are not supported: they tolerate nothing, as
  upstream with the feature gate off;
- :func:`node_of`, :func:`pod_of`: what a queueing hint gets (upstream's ``util.As``);
- :func:`freeze`: JSON made hashable, for ``SignPlugin.sign_pod`` fragments.

Pods, nodes, taints and tolerations are the JSON dicts the API server sends.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence
from typing import Any, Final

from gpusched.framework import NodeScore

__all__ = [
    "DO_NOT_SCHEDULE_EFFECTS",
    "NO_EXECUTE",
    "NO_SCHEDULE",
    "PREFER_NO_SCHEDULE",
    "TAINT_NODE_UNSCHEDULABLE",
    "default_normalize_score",
    "find_untolerated_taint",
    "freeze",
    "node_of",
    "pod_of",
    "pod_spec",
    "pod_tolerations",
    "tolerates_taint",
    "tolerations_tolerate_taint",
]

NO_SCHEDULE: Final = "NoSchedule"
PREFER_NO_SCHEDULE: Final = "PreferNoSchedule"
NO_EXECUTE: Final = "NoExecute"
DO_NOT_SCHEDULE_EFFECTS: Final = frozenset({NO_SCHEDULE, NO_EXECUTE})
"""The taint effects Filter enforces (upstream's ``DoNotScheduleTaintsFilterFunc``)."""

TAINT_NODE_UNSCHEDULABLE: Final = "node.kubernetes.io/unschedulable"
"""The taint the node lifecycle controller mirrors ``spec.unschedulable`` into."""

_EMPTY: Final[Mapping[str, Any]] = {}


def pod_spec(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    """``pod.spec``, or an empty mapping."""
    spec: Mapping[str, Any] | None = pod.get("spec")
    return spec if spec else _EMPTY


def pod_tolerations(pod: Mapping[str, Any]) -> Sequence[Mapping[str, Any]]:
    """``pod.spec.tolerations``, or an empty sequence."""
    tolerations: Sequence[Mapping[str, Any]] | None = pod_spec(pod).get("tolerations")
    return tolerations if tolerations else ()


def tolerates_taint(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """Whether one toleration tolerates one taint (upstream's ``ToleratesTaint``). O(1)."""
    effect = toleration.get("effect") or ""
    if effect and effect != (taint.get("effect") or ""):
        return False
    key = toleration.get("key") or ""
    if key and key != (taint.get("key") or ""):
        return False
    operator = toleration.get("operator") or ""
    if operator == "Exists":
        return True
    if operator in ("", "Equal"):
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return False


def tolerations_tolerate_taint(
    tolerations: Iterable[Mapping[str, Any]], taint: Mapping[str, Any]
) -> bool:
    """Whether any of ``tolerations`` tolerates ``taint``. O(tolerations)."""
    return any(tolerates_taint(t, taint) for t in tolerations)


def find_untolerated_taint(
    taints: Iterable[Mapping[str, Any]],
    tolerations: Sequence[Mapping[str, Any]],
    effects: Collection[str] = DO_NOT_SCHEDULE_EFFECTS,
) -> Mapping[str, Any] | None:
    """The first taint (in node order) with one of ``effects`` that no toleration tolerates,
    or ``None`` (upstream's ``FindMatchingUntoleratedTaint``). O(taints x tolerations)."""
    for taint in taints:
        if taint.get("effect") in effects and not tolerations_tolerate_taint(tolerations, taint):
            return taint
    return None


def default_normalize_score(max_priority: int, reverse: bool, scores: list[NodeScore]) -> None:
    """Scale scores in place to ``0..max_priority`` by the highest one (upstream's
    ``DefaultNormalizeScore``); ``reverse`` turns high raw scores into low ones. When every raw
    score is 0, they stay 0 (or all become ``max_priority`` when reversed). O(nodes)."""
    highest = max((s.score for s in scores), default=0)
    if highest <= 0:
        if reverse:
            for s in scores:
                s.score = max_priority
        return
    for s in scores:
        value = max_priority * s.score // highest
        s.score = max_priority - value if reverse else value


def node_of(obj: object) -> Mapping[str, Any] | None:
    """A queueing hint's Node object, or ``None`` (a deletion, or not a Node)."""
    return obj if isinstance(obj, Mapping) else None


def pod_of(obj: object) -> Mapping[str, Any] | None:
    """A queueing hint's Pod object, or ``None``."""
    return obj if isinstance(obj, Mapping) else None


def freeze(value: object) -> Hashable:
    """A hashable copy of decoded JSON: objects become sorted tuples of items, arrays tuples.
    Equal JSON gives equal results (key order aside). O(size)."""
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), freeze(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    return value if isinstance(value, Hashable) else repr(value)
