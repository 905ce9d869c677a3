"""Writes one node's ``GPUNodeInventory`` and GPU labels, only when something changed.

What it writes is what the simulated fleet writes for the same node (:mod:`gpusched.sim.fleet`),
built by the same functions, so the scheduler cannot tell the two apart:

- the inventory object (:func:`gpusched.inventory.inventory_to_object`: spec, the two
  ``gpusched.io/gpu-*`` labels, an ownerReference to the Node). Created when missing; else
  replaced (PUT with the resourceVersion read) when its spec, those labels or the owner
  differ, keeping everything else on the object. A 409 Conflict is retried with a fresh read.
- its ``status`` (telemetry), merge-patched through the ``/status`` subresource when the
  figures differ from the last written (the observation time alone is no change).
- the Node's GPU feature discovery labels (:func:`gpusched.inventory.node_labels`: product,
  count, memory, CUDA versions, MIG profiles), merge-patched when they differ. The keys it set
  are kept in the Node annotation :data:`OWNED_LABELS_ANNOTATION` (as Node Feature Discovery
  does), so a label it set and no longer wants (a MIG profile gone) is removed, and labels
  others own (NVIDIA's GFD also writes ``nvidia.com/``) are left alone. A node without GPUs
  gets none.

Costs: nothing when nothing changed (the last written state is compared in memory); a change
costs a GET and a write. :meth:`Publisher.forget` drops that memory so the next call reads
the cluster again and repairs drift (the agent calls it every resync interval). It writes
nothing but its own node's objects, which is what the agent's RBAC and admission policy allow.
"""

from __future__ import annotations

import copy
import logging
from collections import Counter
from collections.abc import Callable
from typing import Any, Final

from gpusched.inventory import (
    API_GROUP,
    LABEL_INVENTORY_GPU_COUNT,
    LABEL_INVENTORY_GPU_PRODUCT,
    PLURAL,
    VERSION,
    GPUNodeInventory,
    GPUNodeInventoryStatus,
    inventory_status_to_object,
    inventory_to_object,
    node_labels,
)
from gpusched.kube.client import Kube, resource_path
from gpusched.kube.errors import APIConflict, APINotFound

__all__ = [
    "CONFLICT_RETRIES",
    "OWNED_LABELS_ANNOTATION",
    "PublishError",
    "Publisher",
    "desired_labels",
]

log = logging.getLogger(__name__)

OWNED_LABELS_ANNOTATION: Final = "gpusched.io/agent-labels"
"""Node annotation: the label keys the agent set, comma-separated, sorted."""
CONFLICT_RETRIES: Final = 5


class PublishError(RuntimeError):
    """The node's objects could not be written; the message says which and why."""


def desired_labels(inventory: GPUNodeInventory) -> dict[str, str]:
    """The Node labels for ``inventory``; none without GPUs (as a simulated CPU node)."""
    return node_labels(inventory) if inventory.gpus else {}


class Publisher:
    """Publishes one node's inventory, status and labels through ``kube``."""

    def __init__(
        self, kube: Kube, node_name: str, on_write: Callable[[str], None] | None = None
    ) -> None:
        self.kube = kube
        self.on_write = on_write
        self.node_name = node_name
        self.node_path = resource_path("", "v1", "nodes", name=node_name)
        self.inventory_path = resource_path(API_GROUP, VERSION, PLURAL, name=node_name)
        self.writes: Counter[str] = Counter()
        """Writes by kind: ``inventory``, ``status``, ``labels``."""
        self._node_uid: str | None = None
        self._spec: GPUNodeInventory | None = None
        self._labels: dict[str, str] | None = None
        self._status: dict[str, Any] | None = None

    def _wrote(self, kind: str) -> None:
        self.writes[kind] += 1
        if self.on_write is not None:
            self.on_write(kind)

    def forget(self) -> None:
        """Drop what was last written: the next calls read the cluster and repair drift. The
        status is kept: it is written again only with new figures or a new object."""
        self._spec = self._labels = self._node_uid = None

    async def publish(self, inventory: GPUNodeInventory) -> None:
        """Make the inventory object and the Node labels say ``inventory``."""
        if self._spec != inventory:
            await self._write_inventory(inventory)
            self._spec = inventory
        labels = desired_labels(inventory)
        if self._labels != labels:
            await self._write_labels(labels)
            self._labels = labels

    async def publish_status(self, status: GPUNodeInventoryStatus) -> bool:
        """Write ``status`` unless its figures are those last written; returns whether it did."""
        body = inventory_status_to_object(status)
        figures = {k: v for k, v in body.items() if k != "observedTime"}
        if self._status == figures:
            return False
        await self.kube.patch(f"{self.inventory_path}/status", {"status": body})
        self._wrote("status")
        self._status = figures
        return True

    async def _uid(self) -> tuple[str, dict[str, Any]]:
        try:
            node: dict[str, Any] = await self.kube.get(self.node_path)
        except APINotFound:
            raise PublishError(
                f"Node {self.node_name!r} not found: --node-name (or NODE_NAME) must be the "
                "Node's name (in a DaemonSet: the downward API's spec.nodeName)"
            ) from None
        self._node_uid = str(node["metadata"]["uid"])
        return self._node_uid, node

    async def _write_inventory(self, inventory: GPUNodeInventory) -> None:
        uid = self._node_uid or (await self._uid())[0]
        desired = inventory_to_object(inventory, uid)
        for _attempt in range(CONFLICT_RETRIES):
            try:
                current: dict[str, Any] = await self.kube.get(self.inventory_path)
            except APINotFound:
                try:
                    await self.kube.create(resource_path(API_GROUP, VERSION, PLURAL), desired)
                except APIConflict:
                    continue  # created meanwhile: read it
                self._wrote("inventory")
                self._status = None  # a new object has no status yet
                return
            body = _merged(current, desired)
            if body == current:
                return
            try:
                await self.kube.replace(self.inventory_path, body)
            except APIConflict:
                continue  # changed since read: read again
            self._wrote("inventory")
            return
        raise PublishError(f"GPUNodeInventory {self.node_name}: a conflict on every write")

    async def _write_labels(self, labels: dict[str, str]) -> None:
        _, node = await self._uid()
        metadata = node["metadata"]
        current = metadata.get("labels") or {}
        owned = (metadata.get("annotations") or {}).get(OWNED_LABELS_ANNOTATION, "")
        patch: dict[str, Any] = {k: v for k, v in labels.items() if current.get(k) != v}
        patch.update({k: None for k in owned.split(",") if k and k not in labels and k in current})
        keys = ",".join(sorted(labels))
        if not patch and owned == keys:
            return
        body: dict[str, Any] = {"metadata": {"annotations": {OWNED_LABELS_ANNOTATION: keys}}}
        if patch:
            body["metadata"]["labels"] = patch
        await self.kube.patch(self.node_path, body)
        self._wrote("labels")


def _merged(current: dict[str, Any], desired: dict[str, Any]) -> dict[str, Any]:
    """``current`` with ``desired``'s spec, labels and owner; everything else kept."""
    body = copy.deepcopy(current)
    body["spec"] = desired["spec"]
    metadata = body["metadata"]
    labels = {**(metadata.get("labels") or {}), **desired["metadata"]["labels"]}
    for key in (LABEL_INVENTORY_GPU_COUNT, LABEL_INVENTORY_GPU_PRODUCT):
        if key not in desired["metadata"]["labels"]:
            labels.pop(key, None)
    metadata["labels"] = labels
    owner = desired["metadata"]["ownerReferences"][0]
    owners = [o for o in metadata.get("ownerReferences") or [] if o.get("kind") != "Node"]
    metadata["ownerReferences"] = [*owners, owner]
    return body
