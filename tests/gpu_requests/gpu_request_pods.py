"""A pod dict for the reader tables: limits per container and annotations, nothing else."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def pod(
    limits: Mapping[str, Any] | None = None,
    annotations: Mapping[str, str] | None = None,
    *,
    more: tuple[Mapping[str, Any], ...] = (),
    init: tuple[Mapping[str, Any], ...] = (),
    requests: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A pod whose first container has ``limits`` (and ``requests``), further containers
    ``more`` and init containers ``init`` (limits each)."""
    first: dict[str, Any] = {"name": "main", "resources": {}}
    if limits is not None:
        first["resources"]["limits"] = dict(limits)
    if requests is not None:
        first["resources"]["requests"] = dict(requests)
    containers = [first] + [
        {"name": f"c{i}", "resources": {"limits": dict(lim)}} for i, lim in enumerate(more, 1)
    ]
    spec: dict[str, Any] = {"schedulerName": "gpusched", "containers": containers}
    if init:
        spec["initContainers"] = [
            {"name": f"init{i}", "resources": {"limits": dict(lim)}} for i, lim in enumerate(init)
        ]
    meta: dict[str, Any] = {"name": "p", "namespace": "default"}
    if annotations:
        meta["annotations"] = dict(annotations)
    return {"metadata": meta, "spec": spec}
