"""ModelLocality: nodes that already cache the model a pod loads score higher.

k8shazgpu pre-caches Hugging Face models on its nodes (``k8shazgpu cache add model
facebook/opt-125m``) so that a workload starts without downloading gigabytes of weights.
gpusched reads the same idea from two places (:mod:`gpusched.locality`):

- the pod names its models in the annotation ``gpusched.io/model`` (comma-separated, e.g.
  ``meta-llama/Llama-2-7b-chat-hf``; GPUWorkloads write their ``modelName`` there), or in the
  label ``gpusched.io/model`` (label-safe form: ``meta-llama-Llama-2-7b-chat-hf``);
- a node lists what it caches in the annotation ``gpusched.io/cached-models`` (a JSON list
  of names or ``{"name", "sizeBytes"}`` objects, or comma-separated names), written by the
  node agent, a cache DaemonSet or an operator.

A node scores ``100 x`` the share of the pod's models it caches; a pod that names no model
skips Score (PreScore), so other pods pay one annotation read. The score is a function of the
pod's models and the node alone, so the plugin signs the pod with them. A node annotation
that cannot be read counts as no models and is logged once per Node object with what to fix.

In the default profile with weight 1, beside ImageLocality's 1 and GPUFit's 2: a tie-breaker
among nodes GPUFit finds equally good. Raise it (``{name: ModelLocality, weight: 5}``) where
loading a model costs more than a less tidy GPU placement.

Costs: PreScore and SignPod O(1) (one annotation or label read); Score O(pod's models) per
node, the node's annotation parsed once per Node object.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Final

from gpusched.framework import (
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
from gpusched.locality import model_score, node_models, pod_models

if TYPE_CHECKING:
    from gpusched.cache import NodeInfo

__all__ = ["NAME", "ModelLocality"]

NAME: Final = "ModelLocality"

_log = logging.getLogger(__name__)
_MODELS: Final = StateKey[tuple[tuple[str, ...], bool]]("PreScoreModelLocality")
_MEMO_MAX: Final = 65536


class ModelLocality(PreScorePlugin, ScorePlugin, SignPlugin):
    """Nodes caching the pod's models score higher."""

    NAME = NAME

    def __init__(self) -> None:
        # node name -> (the Node object parsed, its cached models)
        self._memo: dict[str, tuple[object, Mapping[str, int | None]]] = {}

    def pre_score(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        """Skip a pod that names no model."""
        models = pod_models(pod)
        if not models[0]:
            return Status.skip()
        state.write(_MODELS, models)
        return SUCCESS

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> tuple[int, Status]:
        models = state.get(_MODELS)
        if models is None:  # PreScore disabled for this plugin
            models = pod_models(pod)
        if not models[0]:
            return MIN_NODE_SCORE, SUCCESS
        return model_score(models[0], models[1], self._cached(node_info)), SUCCESS

    def _cached(self, info: NodeInfo) -> Mapping[str, int | None]:
        known = self._memo.get(info.name)
        if known is not None and known[0] is info.node:
            return known[1]
        cached, problem = node_models(info.node)
        if problem is not None:
            _log.warning(
                "node %s: %s; its cached models are ignored until the annotation is fixed",
                info.name,
                problem,
            )
        if len(self._memo) >= _MEMO_MAX:
            self._memo.clear()
        self._memo[info.name] = (info.node, cached)
        return cached

    def sign_pod(self, pod: Pod) -> Hashable:
        """The pod's models (and whether they came from the label)."""
        return pod_models(pod)
