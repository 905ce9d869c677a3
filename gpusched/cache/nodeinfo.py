"""``NodeInfo``: everything the scheduler knows of one node, aggregated over its pods.

Modelled on kube-scheduler's ``framework.NodeInfo`` (``pkg/scheduler/framework/types.go``):
the Node object with its labels, taints and ``allocatable``; the pods on it (bound or assumed)
as :class:`PodInfo`; their summed ``requested`` resources; and a ``generation`` taken from one
process-wide counter on every change, so that the cache can tell which node infos changed since
a snapshot was taken (``SchedulerCache.update_snapshot`` clones only those). gpusched adds the
node's device :class:`~gpusched.cache.ledger.NodeLedger`.

Which devices a pod holds
    - *declared*: the pod's assignment annotations (:mod:`gpusched.annotations`), or the
      assignment the scheduler assumed it with. Authoritative: booked exactly as given.
    - *inferred*: a pod bound by someone else asks for ``nvidia.com/gpu`` (or MIG resources)
      and declares nothing: it gets the lowest free devices, marked inferred
      (:meth:`NodeLedger.allocate_inferred`). A declared claim that collides only with
      inferred holders moves them: they are released, the declared claim is booked, and they
      are placed again on what is left. Informers deliver pods in any order (a restart lists
      them all), and a guess must never block the truth.
    - *conflict*: a bound pod's devices cannot be booked (taken by a declared or assumed claim,
      an index the node does not have, the node is not known yet). The pod still counts in
      ``requested`` (so ``nvidia.com/gpu`` arithmetic still sees it), its ``PodInfo.conflict``
      says why, and it is tried again whenever devices are released or the ledger is rebuilt,
      declared claims first. The pod exists whatever the cache thinks, so nothing raises.

Whole-GPU pods (``nvidia.com/gpu: N``) and MIG pods are exclusive, and so is a pod with
``spec.resourceClaims`` whose assignment declares the GPUs its ResourceClaims got (DRA: the
DynamicResources plugin writes them). The devices every ResourceClaim holds on the node are
marked in the ledger (:meth:`NodeInfo.set_claimed`, kept across ledger rebuilds).

A pod with a declared assignment in a shared form (``gpusched.io/gpu``, WoolyAI's
``woolyai.com/gpu``, HAMi's ``nvidia.com/gpumem``/``gpucores``, or no GPU resource at all: KAI's
fraction annotations) shares its GPUs with the VRAM its ``reserved-vram-mib`` lists, unless it
asks for a dedicated GPU (``gpusched.io/exclusive``/``woolyai.com/exclusive-gpu-use: "true"``,
HAMi's ``nvidia.com/gpucores: 100``); whether it may spill to host memory is its
``swap-from-vram`` (gpusched's default false, WoolyAI's true), its compute share HAMi's
``nvidia.com/gpucores``. These terms, and which resources are shared forms, are the request
readers' rules (:func:`gpusched.gpu_requests.read_share_terms`, ``SHARED_RESOURCES``), read
nowhere else; terms they reject are booked as a plain share and noted in ``PodInfo.error``. Cost
per add/update of a pod with a declared share: ~3 us for gpusched's own form (the readers' fast
path; building the PodInfo ~7 us where it took ~4 us with the terms read here), ~25 us for the
foreign forms.

A bound pod is booked even beyond its node's sharing limits (it runs whatever the cache
thinks; ``NodeLedger.allocate(enforce_limits=False)``); an assumed one, the scheduler's own
decision, must fit them.

The node's :class:`~gpusched.cache.ledger.SharingPolicy` is given at construction and by
:meth:`NodeInfo.set_policy` (the scheduler applies the node policy it resolved); the default is
issue 10's (:data:`~gpusched.cache.ledger.DEFAULT_POLICY`).

:class:`PodInfo` is immutable by convention (slots, never mutated after it is stored): node
info clones share them, so a snapshot clone costs O(pods) references, not O(pods) copies.
``allocatable`` is replaced, never mutated, and is shared too; ``requested`` and the ledger are
copied. Costs: ``add_pod``/``remove_pod``/``update_pod`` are O(containers + devices claimed)
plus, only while some pod is in conflict, O(conflicts x devices) to retry them; ``clone`` is
O(pods + GPUs + holders).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from gpusched.annotations import AnnotationError, Assignment, parse_assignment
from gpusched.cache.errors import CacheError, LedgerError
from gpusched.cache.ledger import (
    DEFAULT_POLICY,
    MIG_RESOURCE_PREFIX,
    NodeLedger,
    SharingPolicy,
)
from gpusched.cache.nominations import Nominee
from gpusched.cache.resources import Resources, node_allocatable, pod_requests
from gpusched.inventory import RESOURCE_GPU, GPUNodeInventory
from gpusched.priority import pod_priority

if TYPE_CHECKING:
    from gpusched.gpu_requests import ShareTerms

__all__ = ["NodeInfo", "PodInfo", "next_generation", "pod_uid"]

_generations = itertools.count(1)


@functools.cache
def _readers() -> tuple[frozenset[str], Callable[[Mapping[str, Any]], ShareTerms], type[Exception]]:
    """The request readers' shared-form resources, share-term reader and error (issue 10),
    imported on first use: the readers import :mod:`gpusched.cache` themselves."""
    from gpusched.gpu_requests import SHARED_RESOURCES, RequestError, read_share_terms

    return SHARED_RESOURCES, read_share_terms, RequestError


def _share_terms(pod: Mapping[str, Any]) -> tuple[bool, bool, int, str | None]:
    """(dedicated, swap, cores, problem) of a bound pod's declared share, as the request
    readers read them (:func:`gpusched.gpu_requests.read_share_terms`: the rules of every form
    live there). The assignment gives the devices and VRAM, so the rest of the request need
    not be complete.

    The pod is bound and runs whatever it asks, so nothing raises: terms the readers reject (a
    pod admitted without gpusched's webhook) are booked as a plain share, neither dedicated
    nor swapping, and ``problem`` says why. Cost: the readers' general path, ~20-30 us, once
    per add/update event of a bound pod holding a declared share; other pods never call it.
    """
    _, read, error = _readers()
    try:
        terms = read(pod)
    except error as exc:
        return False, False, 0, f"GPU request: {exc}"
    return terms.exclusive, terms.swap_from_vram, terms.cores_percent, None


def next_generation() -> int:
    """The next value of the process-wide generation counter (upstream's ``nextGeneration``).

    One counter for every node info, so generations order all changes and a snapshot's
    generation says which changes it has seen.
    """
    return next(_generations)


def pod_uid(pod: Mapping[str, Any]) -> str:
    """The key of a pod in the cache: ``metadata.uid`` (``namespace/name`` when it has none,
    which only hand-built pods lack)."""
    meta = pod.get("metadata") or {}
    uid = meta.get("uid")
    if uid:
        return str(uid)
    return f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}"


class PodInfo:
    """A pod on a node: the pod, its requests, and the devices it holds there.

    ``declared`` is the authoritative assignment (annotations, or what the scheduler assumed);
    ``assignment`` is what the node's ledger holds for it (``None`` when it holds nothing:
    no GPU demand, or in conflict); ``inferred`` says the devices were guessed; ``error``
    holds a problem parsing the pod (malformed annotations or quantities); ``conflict`` why
    its devices could not be booked. Never mutated once stored: see :meth:`with_placement`.
    """

    __slots__ = (
        "assignment",
        "conflict",
        "cores",
        "declared",
        "error",
        "exclusive",
        "gpus",
        "inferred",
        "mig",
        "pod",
        "priority",
        "requests",
        "swap",
        "uid",
    )

    def __init__(
        self,
        pod: Mapping[str, Any],
        uid: str,
        requests: Resources,
        declared: Assignment | None = None,
        *,
        error: str | None = None,
    ) -> None:
        self.pod = pod
        self.uid = uid
        self.requests = requests
        self.priority = pod_priority(pod)
        """The pod's :class:`~gpusched.priority.Priority` (preemption reads it per pod)."""
        scalar = requests.scalar
        self.gpus = scalar.get(RESOURCE_GPU, 0) if scalar else 0
        """Whole GPUs requested (``nvidia.com/gpu``)."""
        self.mig: tuple[tuple[str, int], ...] = (
            tuple(
                sorted(
                    (name, n) for name, n in scalar.items() if name.startswith(MIG_RESOURCE_PREFIX)
                )
            )
            if scalar
            else ()
        )
        """MIG devices requested, as (resource, count), sorted by resource."""
        self.declared = declared if declared is not None and declared.gpu_ids else None
        shared_form = bool(scalar) and not _readers()[0].isdisjoint(scalar)
        # A DRA pod's declared GPUs are its ResourceClaims' devices, held whole.
        dra = self.declared is not None and bool((pod.get("spec") or {}).get("resourceClaims"))
        self.exclusive = bool(self.mig) or ((bool(self.gpus) or dra) and not shared_form)
        """Whether the pod holds its GPUs alone (whole GPUs, MIG devices, a dedicated share)
        or shares them (a declared assignment in a shared form: module docstring)."""
        self.swap = False
        """A share that may spill to host memory (so may use overcommitted VRAM)."""
        self.cores = 0
        """Compute percent its share takes on each GPU (HAMi's ``gpucores``)."""
        if self.declared is not None and not self.exclusive:
            dedicated, self.swap, self.cores, problem = _share_terms(pod)
            self.exclusive = dedicated
            if problem is not None:
                error = f"{error}; {problem}" if error else problem
        self.assignment: Assignment | None = None
        self.inferred = False
        self.error = error
        self.conflict: str | None = None

    @classmethod
    def from_pod(cls, pod: Mapping[str, Any], assignment: Assignment | None = None) -> PodInfo:
        """Parse ``pod``: requests, and ``assignment`` or else the annotations. Never raises:
        what cannot be parsed is recorded in ``error`` (requests then count the pod only)."""
        problems: list[str] = []
        try:
            requests = pod_requests(pod)
        except ValueError as exc:
            problems.append(f"resources: {exc}")
            requests = Resources(pods=1)
        declared = assignment
        if declared is None:
            try:
                declared = parse_assignment(pod)
            except AnnotationError as exc:
                problems.append(str(exc))
        return cls(pod, pod_uid(pod), requests, declared, error="; ".join(problems) or None)

    @property
    def needs_devices(self) -> bool:
        """Whether the pod should hold devices in the ledger."""
        return self.declared is not None or bool(self.gpus) or bool(self.mig)

    @property
    def name(self) -> str:
        meta = self.pod.get("metadata") or {}
        return f"{meta.get('namespace', '')}/{meta.get('name', '')}"

    def with_placement(
        self, assignment: Assignment | None, inferred: bool, conflict: str | None
    ) -> PodInfo:
        """A copy holding ``assignment`` (or in ``conflict``)."""
        clone = PodInfo.__new__(PodInfo)
        clone.pod = self.pod
        clone.uid = self.uid
        clone.requests = self.requests
        clone.priority = self.priority
        clone.gpus = self.gpus
        clone.mig = self.mig
        clone.declared = self.declared
        clone.exclusive = self.exclusive
        clone.swap = self.swap
        clone.cores = self.cores
        clone.error = self.error
        clone.assignment = assignment
        clone.inferred = inferred
        clone.conflict = conflict
        return clone

    def describe(self) -> dict[str, Any]:
        """A JSON-friendly view, for ``dump()`` and tests."""
        a = self.assignment
        return {
            "name": self.name,
            "requests": self.requests.as_dict(),
            "gpuIds": list(a.gpu_ids) if a else None,
            "gpuUuids": list(a.gpu_uuids) if a else None,
            "vramMiB": list(a.vram_mib) if a else None,
            "inferred": self.inferred,
            "error": self.error,
            "conflict": self.conflict,
        }

    def __repr__(self) -> str:
        ids = self.assignment.gpu_ids if self.assignment else None
        return f"PodInfo({self.uid!r}, {self.name!r}, gpus={ids}, conflict={self.conflict!r})"


class NodeInfo:
    """One node's aggregated state (module docstring). Mutated only by the cache; plugins read
    snapshot clones. ``node`` is ``None`` for a *ghost*: a node the cache was told is gone, or
    not yet told exists, that still has pods (as upstream; ghosts never enter snapshots)."""

    __slots__ = (
        "_claimed",
        "_claimed_version",
        "_inventory",
        "_ledger_key",
        "_ranks",
        "_unplaced",
        "allocatable",
        "error",
        "generation",
        "labels",
        "ledger",
        "name",
        "node",
        "nominated",
        "pods",
        "policy",
        "requested",
        "taints",
        "unschedulable",
    )

    def __init__(
        self,
        name: str,
        node: Mapping[str, Any] | None = None,
        inventory: GPUNodeInventory | None = None,
        *,
        policy: SharingPolicy = DEFAULT_POLICY,
    ) -> None:
        self.name = name
        self.node: Mapping[str, Any] | None = None
        self.labels: Mapping[str, str] = {}
        self.taints: tuple[Mapping[str, Any], ...] = ()
        self.unschedulable = False
        self.allocatable = Resources()
        self.error: str | None = None
        """A problem reading the Node (a malformed allocatable quantity)."""
        self.requested = Resources()
        self.pods: dict[str, PodInfo] = {}
        self.nominated: dict[str, Nominee] = {}
        """Pods nominated to this node, by uid (:mod:`gpusched.cache.nominations`)."""
        self.policy = policy
        self.ledger = NodeLedger.anonymous(0, policy)
        self._inventory = inventory
        self._ledger_key: tuple[Any, ...] = ("anonymous", 0, policy)
        self._unplaced: dict[str, None] = {}
        self._ranks: dict[int, int] = {}
        """Pods per priority rank, for :attr:`lowest_priority_rank`."""
        self._claimed: Mapping[str | int, str] = {}
        """The devices ResourceClaims hold (:meth:`set_claimed`), never mutated."""
        self._claimed_version = 0
        if node is not None:
            self._apply_node(node)
        self._refresh_ledger()
        self.generation = next_generation()

    # --- Node ---------------------------------------------------------------------------

    @property
    def inventory(self) -> GPUNodeInventory | None:
        """The node's ``GPUNodeInventory`` (links for topology), if it publishes one."""
        return self.ledger.inventory

    def _apply_node(self, node: Mapping[str, Any]) -> None:
        meta = node.get("metadata") or {}
        spec = node.get("spec") or {}
        self.node = node
        self.labels = meta.get("labels") or {}
        self.taints = tuple(spec.get("taints") or ())
        self.unschedulable = bool(spec.get("unschedulable"))
        try:
            self.allocatable = node_allocatable(node)
            self.error = None
        except ValueError as exc:
            self.allocatable = Resources()
            self.error = f"status.allocatable: {exc}"

    def set_node(self, node: Mapping[str, Any] | None) -> None:
        """The Node object changed (``None``: it was deleted; pods and devices are kept until
        their own deletions arrive). Rebuilds the ledger only if the GPUs changed."""
        if node is None:
            self.node = None
        else:
            self._apply_node(node)
            self._refresh_ledger()
        self.generation = next_generation()

    def set_inventory(self, inventory: GPUNodeInventory | None) -> None:
        """The node's inventory changed (``None``: it has none, so anonymous GPUs)."""
        self._inventory = inventory
        self._refresh_ledger()
        self.generation = next_generation()

    def set_policy(self, policy: SharingPolicy) -> None:
        """Share the node's GPUs by ``policy`` (the node policy the scheduler resolved). A
        change rebuilds the ledger and books every pod again, O(pods x GPUs); bound pods beyond
        the new limits stay booked (module docstring). The same policy again costs O(1)."""
        if policy == self.policy:
            return
        self.policy = policy
        self._refresh_ledger()
        self.generation = next_generation()

    def set_claimed(self, claimed: Mapping[str | int, str], version: int = 0) -> bool:
        """The devices ResourceClaims hold here now (UUID, or index of an anonymous GPU ->
        claim: :meth:`NodeLedger.set_claimed`): never given to a pod that does not use the
        claim. ``version`` moves with anything else DRA sees on the node (its slices, devices
        in flight): a new one moves the generation too, so that cached Filter verdicts
        (equivalence classes) are recomputed. Returns whether anything changed (then the
        generation moves). O(GPUs + MIG).
        """
        self._claimed = dict(claimed)
        moved = version != self._claimed_version
        self._claimed_version = version
        if not self.ledger.set_claimed(claimed) and not moved:
            return False
        self.generation = next_generation()
        return True

    def _refresh_ledger(self) -> None:
        inventory = self._inventory
        if inventory is not None:
            key: tuple[Any, ...] = ("inventory", inventory, self.policy)
        else:
            count = self.allocatable.scalar.get(RESOURCE_GPU, 0) if self.node is not None else 0
            key = ("anonymous", count, self.policy)
        if key == self._ledger_key:
            return
        self._ledger_key = key
        if inventory is not None:
            self.ledger = NodeLedger.from_inventory(inventory, self.policy)
        else:
            self.ledger = NodeLedger.anonymous(key[1], self.policy)
        self.ledger.set_claimed(self._claimed)
        self._rebook_all()

    def _rebook_all(self) -> None:
        """Book every pod afresh on a new ledger: declared claims first, then inferred ones,
        each group in pod order. O(pods x devices)."""
        self._unplaced.clear()
        pods = self.pods
        declared = [uid for uid, info in pods.items() if info.declared is not None]
        guessed = [
            uid for uid, info in pods.items() if info.declared is None and info.needs_devices
        ]
        for uid in itertools.chain(declared, guessed):
            placed = self._place(pods[uid].with_placement(None, False, None))
            pods[uid] = placed
            if placed.conflict is not None:
                self._unplaced[uid] = None
        if self._unplaced:
            self._retry_unplaced()

    # --- Pods ---------------------------------------------------------------------------

    @property
    def unplaced(self) -> list[str]:
        """UIDs of the pods in conflict (holding no devices though they should)."""
        return list(self._unplaced)

    def add_pod(
        self,
        pod: Mapping[str, Any],
        assignment: Assignment | None = None,
        *,
        assumed: bool = False,
        enforce_limits: bool = True,
    ) -> PodInfo:
        """Add a pod; book ``assignment``, or else what its annotations declare, or else infer.

        ``assumed`` (the scheduler's own decision): the devices must be free now, else
        :class:`LedgerError` and nothing changes; no other pod is disturbed. Otherwise (an
        informer reported the pod) this never raises: a clash is recorded as a conflict.
        :class:`CacheError` if the pod is already here. ``enforce_limits=False``: an assumed
        share is booked even beyond the sharing limits (``SchedulerCache.assume_pod``).
        """
        uid = pod_uid(pod)
        if uid in self.pods:
            raise CacheError(f"pod {uid} is already on node {self.name}")
        info = PodInfo.from_pod(pod, assignment)
        if assumed:
            self._book(info, enforce_limits=enforce_limits)
            self._insert(self._placed(info))
        else:
            self._insert(self._place(info))
            if self._unplaced:  # inferred pods it moved, if any, are placed again
                self._retry_unplaced()
        self.generation = next_generation()
        return self.pods[uid]

    def update_pod(self, pod: Mapping[str, Any], assignment: Assignment | None = None) -> PodInfo:
        """Replace a pod by its new version; ``assignment`` as for :meth:`add_pod`.

        If its requests, declared devices and share terms did not change (a status or label
        update, or the Add that confirms an assumed pod) only the pod object is swapped:
        O(containers).
        """
        uid = pod_uid(pod)
        old = self.pods.get(uid)
        if old is None:
            raise CacheError(f"pod {uid} is not on node {self.name}")
        new = PodInfo.from_pod(pod, assignment)
        if (
            old.conflict is None
            and new.requests == old.requests
            and new.declared == old.declared
            and (new.exclusive, new.swap, new.cores) == (old.exclusive, old.swap, old.cores)
        ):
            self.pods[uid] = new.with_placement(old.assignment, old.inferred, None)
            if new.priority != old.priority:  # the gpusched.io/priority annotation changed
                self._count(old.priority.rank, -1)
                self._count(new.priority.rank, 1)
        else:
            self._detach(uid)
            self._insert(self._place(new))
            if self._unplaced:
                self._retry_unplaced()
        self.generation = next_generation()
        return self.pods[uid]

    def remove_pod(self, uid: str) -> PodInfo | None:
        """Remove a pod and free its devices (idempotent: ``None`` if it is not here)."""
        if uid not in self.pods:
            return None
        info, released = self._detach(uid)
        if released and self._unplaced:
            self._retry_unplaced()
        self.generation = next_generation()
        return info

    def _detach(self, uid: str) -> tuple[PodInfo, bool]:
        info = self.pods.pop(uid)
        self._count(info.priority.rank, -1)
        self.requested.sub(info.requests)
        self._unplaced.pop(uid, None)
        return info, self.ledger.release(uid)

    def _count(self, rank: int, delta: int) -> None:
        ranks = self._ranks
        n = ranks.get(rank, 0) + delta
        if n:
            ranks[rank] = n
        else:
            del ranks[rank]

    @property
    def lowest_priority_rank(self) -> int | None:
        """The lowest :attr:`Priority.rank` of the node's pods (``None``: no pod). O(distinct
        priorities): preemption skips a node with no pod below the preemptor without cloning."""
        return min(self._ranks) if self._ranks else None

    def _insert(self, info: PodInfo) -> None:
        self._count(info.priority.rank, 1)
        self.pods[info.uid] = info
        self.requested.add(info.requests)
        if info.conflict is not None:
            self._unplaced[info.uid] = None

    def _book(self, info: PodInfo, *, enforce_limits: bool = False) -> None:
        """Book ``info``'s devices as they are: declared, or else inferred. Raises LedgerError.
        A share is booked beyond the sharing limits unless ``enforce_limits`` (assumed pods)."""
        declared = info.declared
        if declared is not None:
            self.ledger.allocate(
                info.uid,
                declared.gpu_ids,
                declared.vram_mib or None,
                info.exclusive,
                uuids=declared.gpu_uuids,
                reservation_uid=declared.reservation_uid,
                swap=info.swap,
                cores=info.cores,
                enforce_limits=enforce_limits,
            )
        elif info.gpus or info.mig:
            self.ledger.allocate_inferred(info.uid, info.gpus, info.mig)

    def _rebook(self, info: PodInfo) -> None:
        """Book an inferred pod's devices again exactly as ``info.assignment`` says."""
        held = info.assignment
        assert held is not None, info
        assert info.inferred, info
        self.ledger.allocate(
            info.uid, held.gpu_ids, None, True, uuids=held.gpu_uuids, inferred=True
        )

    def _placed(self, info: PodInfo) -> PodInfo:
        if not info.needs_devices:
            return info
        return info.with_placement(
            self.ledger.assignment_of(info.uid), self.ledger.is_inferred(info.uid), None
        )

    def _place(self, info: PodInfo) -> PodInfo:
        """Book ``info`` (not yet holding anything), moving inferred holders out of a declared
        claim's way; the PodInfo to store, placed or in conflict. Never raises."""
        if not info.needs_devices:
            return info
        try:
            self._book(info)
            return self._placed(info)
        except LedgerError as exc:
            problem = exc
        declared = info.declared
        if declared is not None:
            ledger = self.ledger
            holders = ledger.holders_of(declared.gpu_ids, declared.gpu_uuids)
            if holders and all(self.pods[h].inferred for h in holders):
                moved = [self.pods[h] for h in holders]
                for holder in moved:
                    ledger.release(holder.uid)
                try:
                    self._book(info)
                except LedgerError as exc:
                    problem = exc
                    for holder in moved:  # put them back exactly: nothing moves in vain
                        self._rebook(holder)
                else:
                    why = f"its inferred devices were declared by pod {info.uid}"
                    for holder in moved:
                        self.pods[holder.uid] = holder.with_placement(None, False, why)
                        self._unplaced[holder.uid] = None
                    return self._placed(info)
        what = "declared devices" if declared is not None else "inferred devices"
        return info.with_placement(None, False, f"cannot book {what}: {problem}")

    def _retry_unplaced(self) -> None:
        """Try to book every pod in conflict again, declared claims first, until no more
        progress. Terminates: only declared bookings move inferred pods, and a declared pod,
        once booked, stays booked. O(rounds x conflicts x devices); free without conflicts."""
        progress = True
        while progress and self._unplaced:
            progress = False
            pods = self.pods
            order = sorted(self._unplaced, key=lambda uid: pods[uid].declared is None)
            for uid in order:  # moving inferred pods only adds to _unplaced
                placed = self._place(pods[uid].with_placement(None, False, None))
                pods[uid] = placed
                if placed.conflict is None:
                    del self._unplaced[uid]
                    progress = True

    # --- Nominations ------------------------------------------------------------------------

    def nominate(self, nominee: Nominee) -> None:
        """Keep GPUs for ``nominee`` (replacing an earlier nomination of the same pod). O(1)."""
        self.nominated[nominee.uid] = nominee
        self.generation = next_generation()

    def clear_nomination(self, uid: str) -> bool:
        """Forget the nomination of pod ``uid``; ``False`` if it has none here. O(1)."""
        if self.nominated.pop(uid, None) is None:
            return False
        self.generation = next_generation()
        return True

    # --- Copies and checks ------------------------------------------------------------------

    def clone(self) -> NodeInfo:
        """An independent copy for a snapshot: PodInfos and ``allocatable`` shared (never
        mutated), ``requested`` and the ledger copied. O(pods + GPUs + holders)."""
        clone = NodeInfo.__new__(NodeInfo)
        clone.name = self.name
        clone.node = self.node
        clone.labels = self.labels
        clone.taints = self.taints
        clone.unschedulable = self.unschedulable
        clone.allocatable = self.allocatable
        clone.error = self.error
        clone.requested = self.requested.copy()
        clone.pods = dict(self.pods)
        clone.nominated = dict(self.nominated) if self.nominated else {}
        clone.policy = self.policy
        clone.ledger = self.ledger.clone()
        clone.generation = self.generation
        clone._inventory = self._inventory
        clone._ledger_key = self._ledger_key
        clone._unplaced = dict(self._unplaced)
        clone._ranks = dict(self._ranks)
        clone._claimed = self._claimed
        clone._claimed_version = self._claimed_version
        return clone

    def describe(self) -> dict[str, Any]:
        """A JSON-friendly view, for ``dump()`` and tests (equal for equal states)."""
        return {
            "name": self.name,
            "generation": self.generation,
            "node": self.node is not None,
            "unschedulable": self.unschedulable,
            "labels": dict(self.labels),
            "taints": [dict(t) for t in self.taints],
            "allocatable": self.allocatable.as_dict(),
            "requested": self.requested.as_dict(),
            "error": self.error,
            "pods": {uid: info.describe() for uid, info in self.pods.items()},
            "unplaced": sorted(self._unplaced),
            "nominated": sorted(self.nominated),
            "gpus": self.ledger.describe(),
        }

    def _check(self) -> None:
        """Assert: ``requested`` is the sum of the pods' requests; the ledger's invariants;
        the ledger holds exactly the pods' assignments (declared ones as declared); the pods
        in conflict are exactly ``unplaced``, and none of them could be booked now."""
        total = Resources()
        for info in self.pods.values():
            total.add(info.requests)
        assert total == self.requested, (self.name, total, self.requested)
        ranks: dict[int, int] = {}
        for info in self.pods.values():
            ranks[info.priority.rank] = ranks.get(info.priority.rank, 0) + 1
        assert ranks == self._ranks, (self.name, ranks, self._ranks)
        ledger = self.ledger
        ledger._check()
        assert set(ledger.pods()) <= set(self.pods), (self.name, ledger.pods())
        for uid, info in self.pods.items():
            assert info.uid == uid, (uid, info)
            held = ledger.assignment_of(uid)
            assert held == info.assignment, (self.name, uid, held, info.assignment)
            assert info.inferred == ledger.is_inferred(uid), (self.name, uid)
            if not info.needs_devices:
                assert held is None, (self.name, info)
                assert info.conflict is None, (self.name, info)
            elif info.conflict is not None:
                assert held is None, (self.name, info)
                assert uid in self._unplaced, (self.name, info)
            else:
                assert held is not None, (self.name, info)
                assert uid not in self._unplaced, (self.name, info)
                declared = info.declared
                if declared is not None:
                    assert not info.inferred, info
                    assert held.gpu_ids == declared.gpu_ids, (held, declared)
                    if declared.gpu_uuids and held.gpu_uuids:
                        assert held.gpu_uuids == declared.gpu_uuids, (held, declared)
                else:
                    assert info.inferred, info
                    assert len(held.gpu_ids) == info.gpus + sum(n for _, n in info.mig), info
        assert set(self._unplaced) == {u for u, i in self.pods.items() if i.conflict}, self.name
        for uid in self._unplaced:
            # It cannot be booked, even by moving inferred holders out of a declared claim.
            info = self.pods[uid]
            trial = self.clone()
            if info.declared is not None:
                for other in self.pods.values():
                    if other.inferred:
                        trial.ledger.release(other.uid)
            try:
                trial._book(info)
            except LedgerError:
                continue
            raise AssertionError(f"{self.name}: pod {uid} is in conflict but fits now")
