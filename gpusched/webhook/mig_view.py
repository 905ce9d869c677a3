"""MIG fallback at admission: which MIG profiles are free where, kept by informers.

A kubelet admits a pod only for the devices the pod *requests*, so when a MIG pod must fall
back to a smaller profile its request itself has to change, before it is created: that is the
webhook's job (seed 001's fallback webhook rewrites ``nvidia.com/mig-2g.20gb`` to
``nvidia.com/mig-1g.10gb`` when no node has a 2g.20gb device left). :class:`MigView` is the
:data:`gpusched.webhook.MigFallback` that decides it:

- the pod's request is read by the scheduler's readers (:func:`gpusched.gpu_requests.
  read_gpu_request`): MIG profile, count and the ``gpusched.io/mig-fallback`` list, so the
  webhook and the scheduler read one pod the same way. A pod without a list is never
  rewritten (it never silently gets less memory than it asked for); a malformed one is left
  to the validator, which rejects it with the readers' message;
- *free* devices of profile ``p`` on a node: ``allocatable[nvidia.com/mig-<p>]`` (what the
  device plugin advertises, healthy devices only) minus what the node's bound, non-terminal
  pods request of it (their effective requests, ``gpusched.cache.pod_requests``), exactly the
  kubelet's admission arithmetic. Nodes marked unschedulable offer nothing;
- the preferred profile free on some node with ``count`` devices: the pod is left alone.
  Otherwise the first fallback that is: the request is rewritten (:func:`fallback_ops`) and
  ``gpusched.io/mig-fallback-applied`` records it. None free either: left alone, and the pod
  waits for its preferred profile like any unschedulable pod.

Two informers (nodes, pods: :class:`gpusched.kube.reflector.Reflector`) keep the counts
incrementally; no ``GPUNodeInventory`` informer, because the kubelet admits against the node's
allocatable, not the inventory, and an unhealthy MIG device leaves allocatable too. Costs: an
event O(resources of the object); a decision O(nodes x profiles tried). Not counted as taken:
pods admitted but not yet bound, so a burst of pods created together may all keep a profile
that only some of them get; those wait for it, as the seed's webhook does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Final

from gpusched.cache import MIG_RESOURCE_PREFIX, TERMINAL_PHASES, pod_requests
from gpusched.cache.resources import node_allocatable
from gpusched.gpu_requests import RequestError, read_gpu_request
from gpusched.kube.client import Kube, resource_path
from gpusched.kube.reflector import Reflector, object_key
from gpusched.webhook.mutate import PatchOp, fallback_ops

__all__ = ["SYNC_WAIT_SECONDS", "MigView"]

log = logging.getLogger(__name__)

SYNC_WAIT_SECONDS: Final = 2.0
"""How long a decision waits for the informers' first list; after it, no fallback is applied
(the pod keeps its request), so a webhook still starting never stalls pod creation."""


def _mig_counts(resources: Mapping[str, int]) -> Counter[str]:
    return Counter(
        {
            name.removeprefix(MIG_RESOURCE_PREFIX): value
            for name, value in resources.items()
            if name.startswith(MIG_RESOURCE_PREFIX) and value > 0
        }
    )


class MigView:
    """Free MIG devices per node and profile; awaitable as a ``MigFallback``.

    ``run()`` lists and watches until cancelled; ``await view(pod)`` gives the fallback patch
    (or None). ``free(node)`` is exposed for tests and tools.
    """

    def __init__(self, kube: Kube) -> None:
        self._offered: dict[str, Counter[str]] = {}
        """node -> profile -> advertised (allocatable) devices; schedulable nodes only."""
        self._used: dict[str, Counter[str]] = {}
        """node -> profile -> devices requested by bound, non-terminal pods."""
        self._pods: dict[str, tuple[str, Counter[str]]] = {}
        """pod key -> (node, its MIG requests), for pods counted in ``_used``."""
        self._nodes = Reflector(
            kube, resource_path("", "v1", "nodes"), handler=self._on_node, name="webhook-nodes"
        )
        self._pod_reflector = Reflector(
            kube, resource_path("", "v1", "pods"), handler=self._on_pod, name="webhook-pods"
        )

    # -- informers -------------------------------------------------------------------------

    async def run(self) -> None:
        """List and watch nodes and pods until cancelled."""
        tasks = [
            asyncio.create_task(self._nodes.run(), name="mig-view-nodes"),
            asyncio.create_task(self._pod_reflector.run(), name="mig-view-pods"),
        ]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    @property
    def synced(self) -> bool:
        return self._nodes.synced.is_set() and self._pod_reflector.synced.is_set()

    async def wait_synced(self, timeout: float = SYNC_WAIT_SECONDS) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                asyncio.gather(self._nodes.synced.wait(), self._pod_reflector.synced.wait()),
                timeout,
            )
        return self.synced

    def _on_node(self, kind: str, node: dict[str, Any], old: dict[str, Any] | None) -> None:
        name = node["metadata"]["name"]
        if kind == "DELETED" or (node.get("spec") or {}).get("unschedulable"):
            self._offered.pop(name, None)
            return
        try:
            offered = _mig_counts(node_allocatable(node).scalar)
        except ValueError:  # a malformed quantity: this node offers nothing we can count
            offered = Counter()
        if offered:
            self._offered[name] = offered
        else:
            self._offered.pop(name, None)

    def _on_pod(self, kind: str, pod: dict[str, Any], old: dict[str, Any] | None) -> None:
        key = object_key(pod)
        prior = self._pods.pop(key, None)
        if prior is not None:
            node, counts = prior
            used = self._used[node]
            used.subtract(counts)
            if not +used:
                del self._used[node]
            else:
                self._used[node] = +used
        if kind == "DELETED":
            return
        bound: str | None = (pod.get("spec") or {}).get("nodeName")
        if not bound or (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
            return
        try:
            counts = _mig_counts(pod_requests(pod).scalar)
        except ValueError:
            return
        if counts:
            self._pods[key] = (bound, counts)
            self._used.setdefault(bound, Counter()).update(counts)

    def _check(self) -> None:
        """Assert that the incremental counts equal a recount from the informers' objects."""
        offered: dict[str, Counter[str]] = {}
        for node in self._nodes.items.values():
            if not (node.get("spec") or {}).get("unschedulable"):
                counts = _mig_counts(node_allocatable(node).scalar)
                if counts:
                    offered[node["metadata"]["name"]] = counts
        used: dict[str, Counter[str]] = {}
        for pod in self._pod_reflector.items.values():
            bound = (pod.get("spec") or {}).get("nodeName")
            if bound and (pod.get("status") or {}).get("phase") not in TERMINAL_PHASES:
                counts = _mig_counts(pod_requests(pod).scalar)
                if counts:
                    used.setdefault(bound, Counter()).update(counts)
        assert offered == self._offered, (offered, self._offered)
        assert used == self._used, (used, self._used)

    # -- decisions -------------------------------------------------------------------------

    def free(self, node: str) -> dict[str, int]:
        """Free devices per profile on ``node`` (never negative)."""
        used = self._used.get(node, Counter())
        return {p: max(n - used[p], 0) for p, n in self._offered.get(node, Counter()).items()}

    def fits_somewhere(self, profile: str, count: int) -> bool:
        """Whether some node has ``count`` free devices of ``profile``. O(nodes)."""
        for node, offered in self._offered.items():
            if offered[profile] - self._used.get(node, Counter())[profile] >= count:
                return True
        return False

    async def __call__(self, pod: Mapping[str, Any]) -> Sequence[PatchOp] | None:
        try:
            request = read_gpu_request(pod)
        except RequestError:
            return None  # the validating webhook rejects it with this very message
        if request is None or request.mode != "mig" or not request.mig_fallbacks:
            return None
        assert request.mig_profile is not None
        if not self.synced and not await self.wait_synced():
            log.warning("MIG fallback skipped: the node and pod informers have not synced yet")
            return None
        if self.fits_somewhere(request.mig_profile, request.count):
            return None
        for fallback in request.mig_fallbacks:
            if self.fits_somewhere(fallback, request.count):
                return fallback_ops(pod, request.mig_profile, fallback)
        return None
