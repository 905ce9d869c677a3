"""GpuClaims: pods that name a GpuClaim (``gpu.scheduling/claim``) wait for it, hold it, and
its status says what they got.

A thin adapter over :class:`gpusched.claims.GpuClaimManager` (docs/gpuclaim.md). What the
claim *asks* for is read by the request readers (:mod:`gpusched.gpu_requests.gpuclaim`), which
find claims through ``Handle.claim_specs``: this plugin (a ``ClaimSpecsPlugin``), answering
from the manager. So GPUFit places a claim pod as any other; this plugin adds:

- PreFilter (before GPUFit): a claim that does not exist, or that another pod holds, keeps the
  pod pending, UnschedulableAndUnresolvable with a message naming the claim; the pod is
  re-queued (``handle.activate``) when the claim appears or is released. Pods without a claim:
  Skip;
- Reserve/Unreserve: the pod holds its claim from Reserve, so the next cycle does not give it
  to a second pod;
- PreBind: the atomic step. Writes the claim's status (phase Allocated, node, devices as the
  Binding will carry them, slowest link, pods) conditional on the resourceVersion of a copy
  that shows no other live holder, so two replicas never give a claim to two pods (the loser
  fails PreBind and is retried), then the in-use finalizer (deleting the claim then waits for
  the pod): two merge patches per claim pod;
- informers on GpuClaims (optional: without the CRD, claim pods stay pending saying the claim
  does not exist), every pod event (a pod deleted or finished releases its claim), and a
  background task that writes what those events change (``Released``, no finalizer).

Cost for a pod without a claim: one annotation lookup at PreFilter, Reserve and in the pod
handler. Claim pods are batched as others: the request GPUFit signs carries the claim's fields.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any, Final, Self

from gpusched.claims import GpuClaimManager
from gpusched.framework import (
    DEVICE_ASSIGNMENT,
    SUCCESS,
    BackgroundPlugin,
    ClaimSpecsPlugin,
    ClusterEventWithHint,
    CycleState,
    EnqueueExtensions,
    Handle,
    Informer,
    InformerPlugin,
    Pod,
    PodEventHandler,
    PreBindPlugin,
    PreFilterPlugin,
    PreFilterResult,
    ReservePlugin,
    SignPlugin,
    Status,
)
from gpusched.gpu_requests import gpuclaim
from gpusched.inventory import GPUNodeInventory

__all__ = ["NAME", "GpuClaims"]

log = logging.getLogger(__name__)

NAME: Final = "GpuClaims"
_RETRY_SECONDS: Final = 1.0
"""After a status write failed (the API server refused or is away), the next try waits this."""


class GpuClaims(
    ClaimSpecsPlugin,
    PreFilterPlugin,
    ReservePlugin,
    PreBindPlugin,
    EnqueueExtensions,
    SignPlugin,
    InformerPlugin,
    PodEventHandler,
    BackgroundPlugin,
):
    """GpuClaim holders and status, over a GpuClaimManager (module docstring)."""

    NAME = NAME

    def __init__(self, handle: Handle) -> None:
        self.handle = handle
        self.manager = GpuClaimManager(self._inventory_of)

    @classmethod
    def new(cls, args: Any, handle: Handle) -> Self:
        return cls(handle)

    def claim_spec(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The claim's spec as last seen (``ClaimSpecsPlugin``: what the readers read)."""
        return self.manager.claim_spec(namespace, name)

    def _inventory_of(self, node: str) -> GPUNodeInventory | None:
        try:
            info = self.handle.node_lister.get(node)
        except RuntimeError:  # a framework built without a scheduler
            return None
        return None if info is None else info.inventory

    # -- scheduling cycle ----------------------------------------------------------------

    def pre_filter(self, state: CycleState, pod: Pod) -> tuple[PreFilterResult | None, Status]:
        if gpuclaim.claim_name(pod) is None:
            return None, Status.skip()
        why = self.manager.check(pod)
        if why is None:
            return None, SUCCESS
        return None, Status.unresolvable(why, plugin=NAME)

    def sign_pod(self, pod: Pod) -> Hashable | None:
        """One fragment for every pod: this plugin decides only at PreFilter (the claim
        exists, no one else holds it), which runs before a class is looked up; Filter and
        Score see the claim's fields through the request GPUFit signs. So claim pods whose
        claims ask the same share a class (and the fast path) with each other."""
        return (NAME,)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return []  # the manager re-queues the pods it turned away (handle.activate)

    def reserve(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        self.manager.reserve(pod)
        return SUCCESS

    def unreserve(self, state: CycleState, pod: Pod, node_name: str) -> None:
        self._activate(self.manager.unreserve(pod))

    # -- binding cycle -------------------------------------------------------------------

    async def pre_bind(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        if gpuclaim.claim_name(pod) is None:
            return SUCCESS
        assignment = state.get(DEVICE_ASSIGNMENT)
        devices: Iterable[tuple[int, str]] = ()
        if assignment is not None:
            uuids = assignment.gpu_uuids or ("",) * len(assignment.gpu_ids)
            devices = zip(assignment.gpu_ids, uuids, strict=True)
        why = await self.manager.acquire(self.handle.kube, pod, node_name, devices)
        return SUCCESS if why is None else Status.unschedulable(why, plugin=NAME)

    # -- informers, pod events, background ----------------------------------------------

    def informers(self) -> Sequence[Informer]:
        return [Informer(gpuclaim.GROUP, gpuclaim.VERSION, gpuclaim.PLURAL, self._on_claim)]

    def _on_claim(self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        self._activate(self.manager.on_claim(kind, obj, old))

    def on_pod(self, kind: str, pod: Pod, old: Pod | None) -> None:
        self._activate(self.manager.on_pod(kind, pod, old))

    def _activate(self, uids: list[str]) -> None:
        if uids:
            self.handle.activate(uids)

    async def background(self) -> None:
        while True:
            await self.manager.changed.wait()
            try:
                await self.manager.flush(self.handle.kube)
            except asyncio.CancelledError:
                raise
            except Exception:  # one bad round must not end the status writes for good
                log.exception("GpuClaims: writing claim status failed")
            if self.manager.failed:
                await self.handle.clock.sleep(_RETRY_SECONDS)
