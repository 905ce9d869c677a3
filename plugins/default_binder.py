"""DefaultBinder: bind the pod through the ``pods/binding`` subresource (upstream's
``defaultbinder``), with gpusched's device assignment as annotations.

The binding cycle's last step. It POSTs, as kube-scheduler does::

    POST /api/v1/namespaces/{ns}/pods/{name}/binding
    {"apiVersion": "v1", "kind": "Binding",
     "metadata": {"name": ..., "namespace": ..., "uid": ...,
                  "annotations": {"gpusched.io/gpu-ids": "0,1", ...}},
     "target": {"apiVersion": "v1", "kind": "Node", "name": node}}

The API server sets ``spec.nodeName`` and copies the Binding's annotations onto the pod in the
same write, so a bound pod always carries the devices it was given
(:func:`gpusched.annotations.assignment_annotations`). The ``uid`` is a precondition: a pod
deleted and re-created under the same name is not bound by mistake.

The assignment comes from the cycle state: :data:`gpusched.framework.DEVICE_ASSIGNMENT`, which
the device plugin's Reserve wrote and the scheduler stamped with the reservation's UID; without
it the pod is bound without annotations. Plugins may add other annotations for the Binding to
carry in :data:`BINDING_ANNOTATIONS` (GPUFit: an applied MIG fallback, WoolyAI's own
annotations); gpusched's assignment annotations win over them. The API client is the
framework's (``Handle.kube``), read at bind time, so a framework built without one (tests,
``gpusched config check``) still builds.

Failures are Errors (the pod is unreserved and retried after backoff), with what happened:
a 409 means the pod was bound meanwhile (by another scheduler replica or a user) or is being
deleted, a 404 that it was deleted; anything else is the API error.
"""

from __future__ import annotations

from typing import Any, Final, Self

from gpusched.annotations import Assignment, assignment_annotations
from gpusched.framework import (
    DEVICE_ASSIGNMENT,
    SUCCESS,
    BindPlugin,
    Code,
    CycleState,
    Handle,
    Pod,
    StateKey,
    Status,
)
from gpusched.kube import APIConflict, APIError, APINotFound
from gpusched.kube.client import resource_path

__all__ = ["BINDING_ANNOTATIONS", "NAME", "BindingAnnotations", "DefaultBinder", "binding_body"]

NAME: Final = "DefaultBinder"


class BindingAnnotations(dict[str, str]):
    """Annotations, beyond the assignment's, that the Binding carries onto the pod. A dict
    that ``CycleState.clone()`` copies."""

    def clone(self) -> BindingAnnotations:
        return BindingAnnotations(self)


BINDING_ANNOTATIONS: Final = StateKey[BindingAnnotations]("DefaultBinder/annotations")
"""Written by Reserve plugins (deleted by their Unreserve); read by :meth:`DefaultBinder.bind`."""


def binding_body(
    pod: Pod,
    node_name: str,
    assignment: Assignment | None,
    extra: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The ``Binding`` object that binds ``pod`` to ``node_name`` with ``assignment`` (and the
    ``extra`` annotations, which the assignment's override)."""
    meta = pod.get("metadata") or {}
    metadata: dict[str, Any] = {
        "name": meta.get("name", ""),
        "namespace": meta.get("namespace") or "default",
    }
    if meta.get("uid"):
        metadata["uid"] = meta["uid"]
    annotations: dict[str, str] = dict(extra) if extra else {}
    if assignment is not None:
        annotations.update(assignment_annotations(assignment))
    if annotations:
        metadata["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": metadata,
        "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
    }


class DefaultBinder(BindPlugin):
    """POSTs the pod's Binding, carrying its GPU assignment as annotations."""

    NAME = NAME

    def __init__(self, handle: Handle) -> None:
        self._handle = handle

    @classmethod
    def new(cls, args: Any, handle: Handle) -> Self:
        return cls(handle)

    async def bind(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        body = binding_body(
            pod, node_name, state.get(DEVICE_ASSIGNMENT), state.get(BINDING_ANNOTATIONS)
        )
        meta = body["metadata"]
        who = f"pod {meta['namespace']}/{meta['name']}"
        path = resource_path("", "v1", "pods", meta["namespace"], meta["name"], "binding")
        try:
            await self._handle.kube.create(path, body)
        except APIConflict as exc:
            return _error(
                f"binding {who} to node {node_name}: the pod was bound or is being deleted "
                f"meanwhile (409 {exc.reason}: {exc.message})",
                exc,
            )
        except APINotFound as exc:
            return _error(
                f"binding {who} to node {node_name}: the pod was deleted meanwhile "
                f"(404: {exc.message})",
                exc,
            )
        except APIError as exc:
            return _error(f"binding {who} to node {node_name}: {exc}", exc)
        return SUCCESS


def _error(message: str, exc: BaseException) -> Status:
    return Status(Code.ERROR, (message,), NAME, exc)
