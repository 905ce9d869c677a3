"""Locality: what a node already holds that a pod needs, and what that is worth as a score.

Two things take minutes to bring to a GPU node and nothing once there: the pod's container
images (often 10-20 GB for CUDA and vLLM images) and the model weights it loads. k8shazgpu
pre-caches both on its nodes (``k8shazgpu cache add image|model``); gpusched prefers the
nodes that already have them, as two Score plugins over this module:

- **Images** (``plugins/image_locality.py``), as kube-scheduler's ImageLocality: the node's
  ``status.images`` (the kubelet reports names and sizes). A pod's score on a node is the sum,
  over its containers and init containers whose image the node has, of the image's size times
  its *spread* (the share of all nodes that have it: an image on every node says nothing, and
  scaling by spread keeps pods from piling onto the one node that pulled it first), clamped
  between 23 MB and 1000 MB per container and scaled to 0..100 (:func:`image_score`). Names
  are normalised as the container runtime reports them: upstream appends ``:latest`` to an
  untagged name; gpusched also expands Docker Hub's short names (``nginx`` ->
  ``docker.io/library/nginx:latest``), which upstream leaves as a TODO, so a pod writing
  ``vllm/vllm-openai:v0.6.3`` matches containerd's ``docker.io/vllm/vllm-openai:v0.6.3``.
- **Models** (``plugins/model_locality.py``): the pod names the models it loads in the
  annotation ``gpusched.io/model`` (comma-separated Hugging Face names, e.g.
  ``meta-llama/Llama-2-7b-chat-hf``; the GPUWorkload controller writes its ``modelName``
  there), or, failing that, the label ``gpusched.io/model`` (a label value cannot hold a ``/``,
  so a label is compared in its label-safe form). A node reports the models cached on it in
  the annotation ``gpusched.io/cached-models``: a JSON list of names or of
  ``{"name": ..., "sizeBytes": ...}`` objects, or a comma-separated list of names; the node
  agent may write it (its ValidatingAdmissionPolicy lets it set ``gpusched.io/`` annotations
  on its own Node), as may an operator or a cache DaemonSet (:func:`node_models`). A pod
  scores ``100 x`` the share of its models the node holds (:func:`model_score`); sizes, where
  given, are for other tools reading the annotation. No spread scaling: weights are loaded
  per pod, so every pod that lands where its model is saves the download.

:class:`ImageIndex` keeps each node's parsed images and how many nodes hold each image,
refreshed from the cycle's snapshot in O(nodes changed) (``Snapshot.changed_since``), so the
spread costs O(pod's images) per cycle, not O(nodes).

Costs: parsing a node's images O(images x names) once per Node object; a cycle O(changed
nodes + pod's images); Score O(pod's containers) per node.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from gpusched.cache import NodeInfo
    from gpusched.framework import NodeLister

__all__ = [
    "CACHED_MODELS_ANNOTATION",
    "MAX_CONTAINER_THRESHOLD",
    "MIN_THRESHOLD",
    "MODEL_ANNOTATION",
    "MODEL_LABEL",
    "ImageIndex",
    "image_score",
    "label_safe",
    "model_score",
    "node_images",
    "node_models",
    "normalize_image",
    "pod_images",
    "pod_models",
]

MB: Final = 1024 * 1024
MIN_THRESHOLD: Final = 23 * MB
"""Below this the sum scores 0 (upstream's ``minThreshold``)."""
MAX_CONTAINER_THRESHOLD: Final = 1000 * MB
"""Per container, the sum that scores 100 (upstream's ``maxContainerThreshold``)."""
MAX_SCORE: Final = 100

MODEL_ANNOTATION: Final = "gpusched.io/model"
MODEL_LABEL: Final = "gpusched.io/model"
CACHED_MODELS_ANNOTATION: Final = "gpusched.io/cached-models"

_DOCKER_HUB: Final = "docker.io"


# ------------------------------------------------------------------ images


def normalize_image(name: str) -> str:
    """The name a container runtime reports for ``name``: Docker Hub's short forms expanded
    (``nginx`` -> ``docker.io/library/nginx``, ``user/app`` -> ``docker.io/user/app``) and
    ``:latest`` appended when there is neither tag nor digest (upstream's
    ``normalizedImageName``). Never raises; an empty name stays empty."""
    name = name.strip()
    if not name:
        return name
    first, slash, rest = name.partition("/")
    if not slash:
        name = f"{_DOCKER_HUB}/library/{name}"
    elif "." not in first and ":" not in first and first != "localhost":
        name = f"{_DOCKER_HUB}/{name}"
    elif first in ("index.docker.io", _DOCKER_HUB) and "/" not in rest:
        name = f"{_DOCKER_HUB}/library/{rest}"
    elif first == "index.docker.io":
        name = f"{_DOCKER_HUB}/{rest}"
    if "@" not in name and name.rfind(":") <= name.rfind("/"):
        name += ":latest"
    return name


def node_images(node: Mapping[str, Any] | None) -> dict[str, int]:
    """The node's images (``status.images``) by every normalised name, with their sizes.
    Malformed entries are skipped (the kubelet writes these; nothing to tell a user)."""
    status = (node or {}).get("status")
    images = status.get("images") if isinstance(status, Mapping) else None
    out: dict[str, int] = {}
    if not isinstance(images, list):
        return out
    for image in images:
        if not isinstance(image, Mapping):
            continue
        size = image.get("sizeBytes")
        size = size if isinstance(size, int) and size >= 0 else 0
        for name in image.get("names") or ():
            if isinstance(name, str) and name:
                out[normalize_image(name)] = size
    return out


def pod_images(pod: Mapping[str, Any]) -> tuple[str, ...]:
    """The normalised images of the pod's init containers then containers, one entry per
    container (a repeated image counts once per container, as upstream's sum does)."""
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        return ()
    out: list[str] = []
    for key in ("initContainers", "containers"):
        for container in spec.get(key) or ():
            image = container.get("image") if isinstance(container, Mapping) else None
            if isinstance(image, str) and image:
                out.append(normalize_image(image))
    return tuple(out)


def image_score(
    images: Sequence[str],
    on_node: Mapping[str, int],
    holders: Mapping[str, int],
    total_nodes: int,
    containers: int | None = None,
) -> int:
    """Upstream's ``calculatePriority(sumImageScores(...))``: for each of the pod's images on
    the node, ``size x holders / total_nodes``; the sum clamped to ``[23 MB, containers x
    1000 MB]`` and scaled to 0..100 (integer arithmetic, as upstream). ``containers`` defaults
    to ``len(images)``."""
    count = len(images) if containers is None else containers
    if count <= 0 or total_nodes <= 0:
        return 0
    total = 0
    for image in images:
        size = on_node.get(image)
        if size is not None:
            total += int(size * (holders.get(image, 0) / total_nodes))
    ceiling = MAX_CONTAINER_THRESHOLD * count
    total = min(max(total, MIN_THRESHOLD), ceiling)
    return MAX_SCORE * (total - MIN_THRESHOLD) // (ceiling - MIN_THRESHOLD)


class ImageIndex:
    """Each node's images and how many nodes hold each, following one snapshot.

    :meth:`refresh` brings it up to date at the start of a cycle: a full rebuild when nodes
    joined or left (``membership``), else only the nodes newer than the last refresh; a node
    whose Node object did not change (a pod bound there) costs one identity check."""

    __slots__ = ("_generation", "_holders", "_membership", "_nodes", "total_nodes")

    def __init__(self) -> None:
        self._nodes: dict[str, tuple[object, dict[str, int]]] = {}
        self._holders: dict[str, int] = {}
        self._membership = -2
        self._generation = 0
        self.total_nodes = 0

    def refresh(self, lister: NodeLister) -> None:
        if lister.membership != self._membership:
            self._nodes.clear()
            self._holders.clear()
            self._membership = lister.membership
            self._generation = 0
            changed = lister.node_infos()
        else:
            changed = lister.changed_since(self._generation)
        for info in changed:
            self._generation = max(self._generation, info.generation)
            self._update(info)
        self.total_nodes = lister.num_nodes

    def _update(self, info: NodeInfo) -> None:
        known = self._nodes.get(info.name)
        if known is not None and known[0] is info.node:
            return
        if known is not None:
            for name in known[1]:
                left = self._holders[name] - 1
                if left:
                    self._holders[name] = left
                else:
                    del self._holders[name]
        images = node_images(info.node)
        self._nodes[info.name] = (info.node, images)
        for name in images:
            self._holders[name] = self._holders.get(name, 0) + 1

    @property
    def version(self) -> tuple[int, int]:
        """Moves whenever the index may have changed (membership, newest generation seen)."""
        return (self._membership, self._generation)

    def holders(self, image: str) -> int:
        """How many nodes hold ``image`` (normalised)."""
        return self._holders.get(image, 0)

    def images(self, info: NodeInfo) -> Mapping[str, int]:
        """The node's images: as indexed when the index saw this Node object, else parsed."""
        known = self._nodes.get(info.name)
        if known is not None and known[0] is info.node:
            return known[1]
        return node_images(info.node)


# ------------------------------------------------------------------ models


def label_safe(text: str) -> str:
    """A model name as a label value can hold it (the GPUWorkload controller's rule): every
    character but letters, digits, ``-_.`` becomes ``-``, at most 63, trimmed."""
    cleaned = "".join(c if c.isalnum() or c in "-_." else "-" for c in text)[:63]
    return cleaned.strip("-_.")


def _names(raw: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(p.strip() for p in raw.split(",") if p.strip()))


def pod_models(pod: Mapping[str, Any]) -> tuple[tuple[str, ...], bool]:
    """The models the pod names and whether they came from the label (label-safe form):
    the annotation ``gpusched.io/model`` (comma-separated), else the label. ``((), False)``
    when it names none."""
    meta = pod.get("metadata")
    if not isinstance(meta, Mapping):
        return (), False
    annotations = meta.get("annotations")
    raw = annotations.get(MODEL_ANNOTATION) if isinstance(annotations, Mapping) else None
    if isinstance(raw, str) and raw.strip():
        return _names(raw), False
    labels = meta.get("labels")
    raw = labels.get(MODEL_LABEL) if isinstance(labels, Mapping) else None
    if isinstance(raw, str) and raw.strip():
        return (raw.strip(),), True
    return (), False


def node_models(node: Mapping[str, Any] | None) -> tuple[dict[str, int | None], str | None]:
    """The models cached on the node (``gpusched.io/cached-models``) with their sizes where
    given, and a message when the annotation cannot be read (then no models). Accepted:
    ``["a/b", "c/d"]``, ``[{"name": "a/b", "sizeBytes": 13476839424}]``, ``a/b, c/d``."""
    meta = (node or {}).get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    raw = annotations.get(CACHED_MODELS_ANNOTATION) if isinstance(annotations, Mapping) else None
    if not isinstance(raw, str) or not raw.strip():
        return {}, None
    text = raw.strip()
    if not text.startswith("["):
        return dict.fromkeys(_names(text)), None
    try:
        items = json.loads(text)
    except ValueError as exc:
        return {}, f"{CACHED_MODELS_ANNOTATION} is not valid JSON ({exc})"
    out: dict[str, int | None] = {}
    for i, item in enumerate(items):
        if isinstance(item, str) and item.strip():
            out[item.strip()] = None
        elif isinstance(item, Mapping) and isinstance(item.get("name"), str):
            size = item.get("sizeBytes")
            if size is not None and (
                not isinstance(size, int) or isinstance(size, bool) or size < 0
            ):
                return {}, (
                    f"{CACHED_MODELS_ANNOTATION}[{i}].sizeBytes must be a non-negative "
                    f"integer (got {size!r})"
                )
            out[item["name"].strip()] = size
        else:
            return {}, (
                f"{CACHED_MODELS_ANNOTATION}[{i}] must be a model name or "
                f'{{"name": ..., "sizeBytes": ...}} (got {item!r})'
            )
    return out, None


def model_score(models: Sequence[str], from_label: bool, cached: Mapping[str, int | None]) -> int:
    """``100 x`` the share of the pod's models the node holds (0 when it names none)."""
    if not models:
        return 0
    if from_label:
        cached = {label_safe(name): size for name, size in cached.items()}
    held = sum(1 for m in models if m in cached)
    return MAX_SCORE * held // len(models)
