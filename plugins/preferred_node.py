"""PreferredNode: a pod that names a node it would rather run on goes there when it fits.

The pod writes ``gpusched.io/preferred-node: NAME`` (k8shazgpu's ``--prefer-node``; the request
readers parse it into ``GPURequest.preferred_node``). It is a preference, not a constraint: a
pod that must run on one node uses ``spec.nodeName`` or a required node affinity. So this is a
Score plugin only: the named node scores 100, every other node 0, and Filter decides as ever
whether the named node fits; when it does not, the pod goes wherever the other plugins send it.

The score is a function of the pod's preferred name and the node's name alone, never of the
other nodes, so the plugin signs the pod with that name (pods preferring the same node share
one equivalence class) and has no NormalizeScore. Give it a weight above the other Score
plugins' total (the default profile's weights add up to about 6) so that the preference wins
over packing: ``{name: PreferredNode, weight: 10}``.

An annotation that is not a valid node name gives no preference here; GPUFit's PreFilter
rejects such a pod with the reader's message (what is wrong and how to write it), so the
pod never runs with its preference silently dropped while GPUFit is enabled.

Costs: PreScore and SignPod one annotation lookup per cycle; Score O(1) per node.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from gpusched.framework import (
    MAX_NODE_SCORE,
    MIN_NODE_SCORE,
    SUCCESS,
    CycleState,
    Pod,
    PreScorePlugin,
    ScorePlugin,
    SignPlugin,
    StateKey,
    Status,
)
from gpusched.gpu_requests import RequestError
from gpusched.gpu_requests._common import parse_name
from gpusched.gpu_requests.native import PREFERRED_NODE

if TYPE_CHECKING:
    from gpusched.cache import NodeInfo

__all__ = ["NAME", "PreferredNode", "preferred_node"]

NAME: Final = "PreferredNode"

_PREFERRED: Final = StateKey[str]("PreScorePreferredNode")


def preferred_node(pod: Mapping[str, Any]) -> str | None:
    """The node the pod prefers (``gpusched.io/preferred-node``), or ``None`` when it names
    none or the name is not a valid node name. O(1); never raises."""
    meta = pod.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    if not isinstance(annotations, Mapping):
        return None
    raw = annotations.get(PREFERRED_NODE)
    if raw is None:
        return None
    try:
        return parse_name(PREFERRED_NODE, raw, "node")
    except RequestError:
        return None


class PreferredNode(PreScorePlugin, ScorePlugin, SignPlugin):
    """The pod's preferred node scores 100, every other node 0."""

    NAME = NAME

    def pre_score(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        """Skip (no Score calls) for a pod that prefers no node."""
        name = preferred_node(pod)
        if name is None:
            return Status.skip()
        state.write(_PREFERRED, name)
        return SUCCESS

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> tuple[int, Status]:
        name = state.get(_PREFERRED)
        if name is None:  # PreScore disabled for this plugin
            name = preferred_node(pod)
        return (MAX_NODE_SCORE if node_info.name == name else MIN_NODE_SCORE), SUCCESS

    def sign_pod(self, pod: Pod) -> Hashable:
        """The preferred node's name (``None`` for none is a valid fragment: the pods that
        prefer no node score 0 everywhere alike), so the fragment is a tuple."""
        return (preferred_node(pod),)
