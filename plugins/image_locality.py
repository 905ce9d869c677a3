"""ImageLocality: nodes that already hold the pod's container images score higher.

kube-scheduler's ImageLocality (``pkg/scheduler/framework/plugins/imagelocality``), with its
thresholds and weight: for each of the pod's init containers and containers whose image the
node reports in ``status.images``, the image's size times its spread (the share of all
nodes holding it); the sum clamped to [23 MB, 1000 MB x containers] and scaled to 0..100
(:func:`gpusched.locality.image_score`). Spread scaling keeps pods from piling onto the one
node that pulled an image first. Image names are normalised as the runtime reports them
(``nginx`` == ``docker.io/library/nginx:latest``; upstream only appends the tag).

The spread depends on the other nodes, which a signature must not hide: the plugin signs a
pod with its images *and* how many nodes hold each, so when an image spreads the pods that
use it form a new equivalence class rather than keep a stale ranking. A pod none of whose
images any node holds scores 0 everywhere: PreScore skips its Score calls.

In the default profile with upstream's weight, 1. GPU images are large (a CUDA or vLLM image
is 10-20 GB: every such image on the node reaches the 1000 MB cap), so on a GPU cluster the
plugin mostly says "the image is here" (100 x spread), a tie-breaker beside GPUFit (weight 2).

Costs: SignPod and PreScore O(pod's containers + nodes changed since the last cycle) (an
:class:`~gpusched.locality.ImageIndex` follows the snapshot); Score O(pod's containers).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Self

from gpusched.framework import (
    MIN_NODE_SCORE,
    SUCCESS,
    CycleState,
    Handle,
    Pod,
    PreScorePlugin,
    ScorePlugin,
    SignPlugin,
    StateKey,
    Status,
)
from gpusched.locality import ImageIndex, image_score, node_images, pod_images

if TYPE_CHECKING:
    from gpusched.cache import NodeInfo

__all__ = ["NAME", "ImageLocality"]

NAME: Final = "ImageLocality"


@dataclass(frozen=True, slots=True)
class _Images:
    """What Score reads, written by PreScore."""

    images: tuple[str, ...]
    holders: dict[str, int]
    total_nodes: int


_IMAGES: Final = StateKey[_Images]("PreScoreImageLocality")


class ImageLocality(PreScorePlugin, ScorePlugin, SignPlugin):
    """Nodes holding the pod's images (weighted by size and spread) score higher."""

    NAME = NAME

    def __init__(self, handle: Handle | None = None) -> None:
        self._handle = handle
        self._index = ImageIndex()
        # The last pod's state and the index version it was computed at: SignPod and
        # PreScore of one cycle read the same pod.
        self._memo: tuple[object, tuple[int, int], _Images] | None = None

    @classmethod
    def new(cls, args: Any, handle: Handle) -> Self:
        return cls(handle)

    def _state(self, pod: Pod, nodes: Sequence[NodeInfo] | None = None) -> _Images:
        lister = None
        if self._handle is not None:
            try:
                lister = self._handle.node_lister
            except RuntimeError:  # a framework built without a snapshot
                lister = None
        if lister is not None:
            self._index.refresh(lister)
            version = self._index.version
            memo = self._memo
            if memo is not None and memo[0] is pod and memo[1] == version:
                return memo[2]
            images = pod_images(pod)
            holders = {i: self._index.holders(i) for i in images}
            result = _Images(images, holders, self._index.total_nodes)
            self._memo = (pod, version, result)
            return result
        # No snapshot: the spread over the nodes this cycle was given.
        images = pod_images(pod)
        seen = [node_images(n.node) for n in nodes or ()]
        holders = {i: sum(1 for s in seen if i in s) for i in images}
        return _Images(images, holders, len(seen))

    def pre_score(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        """Skip a pod none of whose images any node holds (it scores 0 everywhere)."""
        images = self._state(pod, nodes)
        if not any(images.holders.values()):
            return Status.skip()
        state.write(_IMAGES, images)
        return SUCCESS

    def score(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> tuple[int, Status]:
        images = state.get(_IMAGES)
        if images is None:  # PreScore disabled for this plugin
            images = self._state(pod, [node_info])
        if not images.images:
            return MIN_NODE_SCORE, SUCCESS
        on_node = self._index.images(node_info)
        return image_score(images.images, on_node, images.holders, images.total_nodes), SUCCESS

    def sign_pod(self, pod: Pod) -> Hashable:
        """The pod's images and how many nodes hold each (the spread is part of the score)."""
        images = self._state(pod)
        return (images.images, tuple(sorted(images.holders.items())), images.total_nodes)
