"""PreferH100: rank nodes with H100 GPUs first."""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING

from gpusched.framework import SUCCESS, CycleState, Pod, ScorePlugin, SignPlugin, Status

if TYPE_CHECKING:
    from gpusched.cache import NodeInfo


class PreferH100(ScorePlugin, SignPlugin):
    NAME = "PreferH100"

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> tuple[int, Status]:
        product = node_info.labels.get("nvidia.com/gpu.product", "")
        return (100 if "H100" in product else 0), SUCCESS

    def sign_pod(self, pod: Pod) -> Hashable:
        return ()  # Score reads the node only: to this plugin, every pod is alike
