"""RandomScore: a random node among those that fit, the baseline strategies are measured by.

GPU_Orchestrator's ``random`` strategy picks any suitable node at random. Here each (pod, node)
pair gets a score drawn uniformly from 0..100, reproducibly: a keyed hash (BLAKE2b, keyed by
``seed``) of the pod's UID (namespace/name without one) and the node's name. The same seed,
pod and node give the same score in every process and whatever order nodes are scored in, so
a test or a benchmark run can be repeated; another seed gives another placement. Enabled
alone (or weighted above the others) it places each pod on a uniformly random feasible node.

**Unsigned, by design.** A signed plugin must score a node alike for every pod of an
equivalence class; a random score that is a function of the node alone would rank the nodes
in one fixed shuffled order for all those pods, which is first-fit over a shuffled node list
and not a random placement. So the score depends on the pod, the plugin is not a
``SignPlugin``, and a profile that enables it takes the full Filter and Score cycle for each
pod (with node sampling, ``percentageOfNodesToScore``); the scheduler says so at start. That
is the baseline's cost, paid only by the profiles that ask for it.

Costs: PreScore one hash key per pod; Score one 4-byte BLAKE2b digest per node (about a
microsecond).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Self

from pydantic import Field

from gpusched.framework import (
    MAX_NODE_SCORE,
    SUCCESS,
    CycleState,
    Handle,
    PluginArgs,
    Pod,
    PreScorePlugin,
    ScorePlugin,
    StateKey,
    Status,
)

if TYPE_CHECKING:
    from gpusched.cache import NodeInfo

__all__ = ["NAME", "RandomScore", "RandomScoreArgs", "random_score"]

NAME: Final = "RandomScore"

_KEY: Final = StateKey[bytes]("PreScoreRandomScore")


class RandomScoreArgs(PluginArgs):
    """``pluginConfig`` args of RandomScore."""

    seed: int = Field(default=0, ge=0, lt=2**63)
    """Seed of the draws: the same seed, pod and node always give the same score. Default 0."""


def _pod_key(pod: Mapping[str, Any]) -> bytes:
    meta = pod.get("metadata")
    if not isinstance(meta, Mapping):
        return b""
    uid = meta.get("uid")
    if uid:
        return str(uid).encode()
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}".encode()


def random_score(seed: int, pod: Mapping[str, Any], node_name: str) -> int:
    """The score of ``node_name`` for ``pod`` under ``seed``: uniform in 0..100 (the 32-bit
    digest's bias towards low values is below 1e-7)."""
    return _draw(_salt(seed, pod), node_name)


def _salt(seed: int, pod: Mapping[str, Any]) -> bytes:
    # BLAKE2b keys are at most 64 bytes: hash the pod key into the salt instead.
    return hashlib.blake2b(_pod_key(pod), digest_size=16, key=seed.to_bytes(8, "big")).digest()


def _draw(salt: bytes, node_name: str) -> int:
    digest = hashlib.blake2b(node_name.encode(), digest_size=4, key=salt).digest()
    return int.from_bytes(digest, "big") % (MAX_NODE_SCORE + 1)


class RandomScore(PreScorePlugin, ScorePlugin):
    """A reproducible random score per pod and node (a baseline; not signed, see above)."""

    NAME = NAME
    ARGS = RandomScoreArgs
    UNSIGNED_BY_DESIGN = "a random score per pod: signed, it would be one shuffle for all"

    def __init__(self, args: RandomScoreArgs | None = None) -> None:
        self._seed = (args or RandomScoreArgs()).seed

    @classmethod
    def new(cls, args: Any, handle: Handle) -> Self:
        return cls(args if isinstance(args, RandomScoreArgs) else None)

    def pre_score(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        state.write(_KEY, _salt(self._seed, pod))
        return SUCCESS

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> tuple[int, Status]:
        salt = state.get(_KEY)
        if salt is None:  # PreScore disabled for this plugin
            salt = _salt(self._seed, pod)
        return _draw(salt, node_info.name), SUCCESS
