"""The annotations gpusched reads from pods and writes onto them, defined once.

Read (set by users):

- ``gpusched.io/priority``: ``"0"`` (highest) .. ``"4"``; default 0.

Written (by the scheduler, on the Binding, which the API server copies onto the pod in the same
write that sets ``spec.nodeName``):

- ``gpusched.io/gpu-ids``: GPU indices on the node, comma-separated, e.g. ``"0,1,2,3"``;
- ``gpusched.io/gpu-uuids``: their UUIDs in the same order (``GPU-...`` or ``MIG-...``);
- ``gpusched.io/reserved-vram-mib``: VRAM reserved on each of those GPUs, same order;
- ``gpusched.io/reservation-uid``: the id of the Lease reservation that backs the decision.

Parsing errors are ``AnnotationError``s whose message says what to fix; the scheduler turns
them into a pod Event and condition, never a crash.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CONTIGUOUS",
    "GPU_IDS",
    "GPU_UUIDS",
    "MIN_BANDWIDTH_GBPS",
    "PREFIX",
    "PRIORITY",
    "RESERVATION_UID",
    "RESERVED_VRAM_MIB",
    "TOPOLOGY",
    "AnnotationError",
    "Assignment",
    "assignment_annotations",
    "parse_assignment",
    "parse_priority",
]

PREFIX = "gpusched.io/"
PRIORITY = PREFIX + "priority"
GPU_IDS = PREFIX + "gpu-ids"
GPU_UUIDS = PREFIX + "gpu-uuids"
RESERVED_VRAM_MIB = PREFIX + "reserved-vram-mib"
RESERVATION_UID = PREFIX + "reservation-uid"
TOPOLOGY = PREFIX + "topology"
"""``Required`` | ``Preferred`` (default): how the two options below bind (docs/gpu_fit.md)."""
MIN_BANDWIDTH_GBPS = PREFIX + "min-bandwidth-gbps"
"""GB/s (both directions) the slowest pair of the pod's GPUs must move, e.g. ``"600"``."""
CONTIGUOUS = PREFIX + "contiguous"
"""``"true"``: the pod's GPUs are connected over the NVLinks among them."""

PRIORITY_LEVELS = range(5)
DEFAULT_PRIORITY = 0


class AnnotationError(ValueError):
    """A malformed gpusched annotation; the message names the annotation and the fix."""


def _annotations(pod: Mapping[str, Any]) -> Mapping[str, str]:
    meta = pod.get("metadata") or {}
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    return annotations


def parse_priority(pod: Mapping[str, Any]) -> int:
    """The pod's gpusched priority, 0 (highest) to 4; 0 when not annotated."""
    text = _annotations(pod).get(PRIORITY)
    if text is None:
        return DEFAULT_PRIORITY
    try:
        value = int(text.strip())
    except ValueError:
        value = -1
    if value not in PRIORITY_LEVELS:
        raise AnnotationError(
            f'annotation {PRIORITY}="{text}" is not a priority: use an integer from 0 '
            "(highest) to 4 (lowest), or remove it for the default 0"
        )
    return value


@dataclass(frozen=True, slots=True)
class Assignment:
    """The devices a bound pod holds, as its annotations record them."""

    gpu_ids: tuple[int, ...]
    gpu_uuids: tuple[str, ...]
    vram_mib: tuple[int, ...]
    reservation_uid: str


def assignment_annotations(assignment: Assignment) -> dict[str, str]:
    return {
        GPU_IDS: ",".join(str(i) for i in assignment.gpu_ids),
        GPU_UUIDS: ",".join(assignment.gpu_uuids),
        RESERVED_VRAM_MIB: ",".join(str(v) for v in assignment.vram_mib),
        RESERVATION_UID: assignment.reservation_uid,
    }


def _split(text: str) -> list[str]:
    return [part.strip() for part in text.split(",")] if text.strip() else []


def parse_assignment(pod: Mapping[str, Any]) -> Assignment | None:
    """The devices recorded on a pod, or None when it has no gpusched assignment."""
    annotations = _annotations(pod)
    if GPU_IDS not in annotations:
        return None
    ids_text = annotations[GPU_IDS]
    try:
        ids = tuple(int(part) for part in _split(ids_text))
    except ValueError:
        raise AnnotationError(
            f'annotation {GPU_IDS}="{ids_text}" must be comma-separated GPU indices'
        ) from None
    uuids = tuple(_split(annotations.get(GPU_UUIDS, "")))
    vram_text = annotations.get(RESERVED_VRAM_MIB, "")
    try:
        vram = tuple(int(part) for part in _split(vram_text))
    except ValueError:
        raise AnnotationError(
            f'annotation {RESERVED_VRAM_MIB}="{vram_text}" must be comma-separated MiB counts'
        ) from None
    if uuids and len(uuids) != len(ids):
        raise AnnotationError(f"annotations {GPU_IDS} and {GPU_UUIDS} list different counts")
    if vram and len(vram) != len(ids):
        raise AnnotationError(
            f"annotations {GPU_IDS} and {RESERVED_VRAM_MIB} list different counts"
        )
    return Assignment(ids, uuids, vram, annotations.get(RESERVATION_UID, ""))
