"""DraManager: the state behind the DynamicResources plugin, and the writes it makes.

kube-scheduler's DynamicResources plugin (``pkg/scheduler/framework/plugins/dynamicresources``)
over its DRA manager and assume cache, in gpusched's shape (a thin plugin over a manager):

- **State from informers**: ResourceClaims, ResourceSlices (by node; ``allNodes`` ones for
  every node), DeviceClasses; every allocated device (``status.allocation`` of any claim,
  whoever wrote it) indexed by ``(driver, pool, device)``, and the GPUs they are (the slices'
  ``uuid`` attribute, else a GPU's ``index``) by node: :meth:`claimed_on`, what the cache's
  ledger marks so that no ``nvidia.com/gpu`` pod gets them.
- **Pod -> claims** (:meth:`resolve`, upstream's ``resourceclaim.Name`` and ``IsForPod``): a
  ``resourceClaimName``; or a ``resourceClaimTemplateName`` through the pod's
  ``status.resourceClaimStatuses`` (no entry yet: "ResourceClaim not created yet"; an entry
  without a name: no claim needed), the claim owned by the pod. A claim missing, being deleted,
  reserved for 256 consumers already, or being allocated for another pod keeps the pod
  pending with that reason; the pod is activated again when the claim changes.
- **In-flight allocations** (upstream's ``inFlightAllocations`` and assume cache): Reserve
  records the allocation Filter chose; its devices count as allocated until the status write
  lands (then the informer's copy says so) or Unreserve drops it.
- **The write** (:meth:`bind`, PreBind), as upstream's ``bindClaim``: for a claim to allocate,
  the ``resource.kubernetes.io/delete-protection`` finalizer first (an update of the claim,
  conditional on its resourceVersion: the status subresource ignores metadata), then one status
  update conditional on the resourceVersion with ``allocation`` (results, config, node
  selector) and the pod appended to ``reservedFor``. On a conflict the claim is read again: if
  someone allocated it meanwhile, or it is being deleted, the pod fails PreBind and is retried
  (the claim-vs-claim atomic step); a claim already allocated only gets the pod added.
- **Release** (:meth:`flush`, background): a pod deleted or finished, or unreserved after its
  PreBind wrote it, is taken out of the ``reservedFor`` of its claims; a claim left with no
  consumer that carries the finalizer is deallocated in the same status write and then loses
  the finalizer, as kube-controller-manager's resourceclaim controller does. Both may do it: a
  conflict re-reads the claim, and a claim already released is left alone.
- **Claims from templates** (``create_claims``, off by default: in a real cluster
  kube-controller-manager creates them): the claim for each template entry of a pending pod
  (``generateName <pod>-<entry>-``, the ``resource.kubernetes.io/pod-claim-name`` annotation, a
  controller owner reference to the pod), then the pod's ``status.resourceClaimStatuses``.

Decision methods never await and cost O(claims of the pod) (plus the allocator's search in
:meth:`allocate`); informer handlers O(devices of the object). Everything runs on the event
loop between scheduling cycles, so no lock is needed. Costs in API writes per claim pod: two
when its claim is allocated (finalizer, status), one when a shared claim is reserved; one or
two when it is released (kube-controller-manager may make them first).
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from gpusched.inventory import GPUNodeInventory
from gpusched.kube.client import Kube, resource_path
from gpusched.kube.errors import APIConflict, APIError, APINotFound

from .allocator import Allocation, DeviceID, MatchCache, Unallocatable, allocate

__all__ = [
    "FINALIZER",
    "GROUP",
    "POD_CLAIM_NAME_ANNOTATION",
    "RESERVED_FOR_MAX",
    "VERSION",
    "DraManager",
    "PodClaim",
    "PodClaims",
    "Refusal",
]

log = logging.getLogger(__name__)

GROUP: Final = "resource.k8s.io"
VERSION: Final = "v1"
FINALIZER: Final = "resource.kubernetes.io/delete-protection"
"""``resourceapi.Finalizer``: on a claim the scheduler allocated, until it is deallocated."""
POD_CLAIM_NAME_ANNOTATION: Final = "resource.kubernetes.io/pod-claim-name"
RESERVED_FOR_MAX: Final = 256
"""``ResourceClaimReservedForMaxSize``: consumers of one claim."""
_TERMINAL: Final = ("Succeeded", "Failed")
_TRIES: Final = 5
_MATCH_CACHE_MAX: Final = 100_000

Key = tuple[str, str]
"""``(namespace, name)`` of a claim."""


@dataclass(frozen=True, slots=True)
class PodClaim:
    """One of a pod's claims as PreFilter found it."""

    entry: str
    """``pod.spec.resourceClaims[].name``."""
    key: Key
    claim: Mapping[str, Any]

    @property
    def allocation(self) -> Mapping[str, Any] | None:
        found: Mapping[str, Any] | None = (self.claim.get("status") or {}).get("allocation")
        return found


@dataclass(frozen=True, slots=True)
class PodClaims:
    """The pod's claims: those allocated already (their node selector decides) and those to
    allocate on the node Filter checks."""

    allocated: tuple[PodClaim, ...]
    pending: tuple[PodClaim, ...]


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why the pod cannot be scheduled now; ``unresolvable``: no node can help (the pod waits
    for its claims to change)."""

    message: str
    unresolvable: bool = True


@dataclass(frozen=True, slots=True)
class _InFlight:
    pod_uid: str
    node: str
    allocation: Mapping[str, Any]


@dataclass(slots=True)
class _Device:
    node: str | None
    """The slice's ``nodeName`` (``None``: not node-local)."""
    gpu: str | int | None
    """The ledger's name for it: its UUID, else a GPU's index; ``None``: not a GPU."""
    mig: bool = False


@dataclass(slots=True)
class _Pending:
    """A pod whose template claims this manager creates (``create_claims``)."""

    pod: Mapping[str, Any]
    entries: list[tuple[str, str]] = field(default_factory=list)
    """``(entry, template)`` without a claim yet."""


def _key(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or "default"), str(meta.get("name") or "")


def _uid(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def _rv(obj: Mapping[str, Any]) -> int:
    text = str((obj.get("metadata") or {}).get("resourceVersion") or "")
    return int(text) if text.isdigit() else -1


def _reserved_uids(claim: Mapping[str, Any]) -> list[str]:
    return [str(r.get("uid")) for r in (claim.get("status") or {}).get("reservedFor") or ()]


def _owned_by(claim: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    """``metav1.IsControlledBy(claim, pod)``."""
    uid = _uid(pod)
    return any(
        ref.get("controller") and str(ref.get("uid")) == uid
        for ref in (claim.get("metadata") or {}).get("ownerReferences") or ()
    )


def claims_path(namespace: str | None = None, name: str | None = None) -> str:
    return resource_path(GROUP, VERSION, "resourceclaims", namespace, name)


def pod_claim_entries(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """``pod.spec.resourceClaims`` (empty for a pod without claims)."""
    return list((pod.get("spec") or {}).get("resourceClaims") or ())


class DraManager:
    """ResourceClaims, slices and classes; allocation state and writes (module docstring)."""

    def __init__(self, *, create_claims: bool = False, allow_admin_access: bool = False) -> None:
        self.create_claims = create_claims
        self.allow_admin_access = allow_admin_access
        self.served: bool | None = None
        """Whether the API server serves ``resource.k8s.io/v1`` (``None``: not known yet)."""
        self.claims: dict[Key, Mapping[str, Any]] = {}
        self.classes: dict[str, Mapping[str, Any]] = {}
        self.templates: dict[Key, Mapping[str, Any]] = {}
        self._slices: dict[str, Mapping[str, Any]] = {}
        self._by_node: dict[str, dict[str, Mapping[str, Any]]] = {}
        self._cluster_wide: dict[str, Mapping[str, Any]] = {}
        self._devices: dict[DeviceID, _Device] = {}
        self._allocated: dict[DeviceID, Key] = {}
        """Devices of every claim's ``status.allocation``."""
        self._claim_devices: dict[Key, tuple[DeviceID, ...]] = {}
        self._in_flight: dict[Key, _InFlight] = {}
        self._in_flight_devices: dict[DeviceID, Key] = {}
        self._consumers: dict[str, set[Key]] = {}
        """Pod uid -> the claims whose ``reservedFor`` names it."""
        self._release: dict[Key, set[str]] = {}
        """Claims to take these pod uids out of (:meth:`flush`)."""
        self._written: dict[str, set[Key]] = {}
        """Pod uid -> claims its PreBind reserved, until the pod is seen bound or released."""
        self._waiting: dict[Key, set[str]] = {}
        self._unfinalize: set[Key] = set()
        """Claims this manager deallocated whose finalizer it could not remove yet."""
        """Claim -> pods waiting for it to appear or change."""
        self._waiting_devices: set[str] = set()
        """Pods no node had devices for: retried when devices may be free."""
        self._pending: dict[str, _Pending] = {}
        self._dirty_nodes: set[str] = set()
        self._version = 0
        """Bumped by what may change an allocation on every node (classes, slices for all
        nodes, allocated devices that are not node-local)."""
        self._node_versions: dict[str, int] = {}
        """Bumped by what may change an allocation on one node (its slices, its allocated and
        in-flight devices): :meth:`version_of`."""
        self.match_cache: MatchCache = {}
        self.changed = asyncio.Event()
        """Set when :meth:`flush` has work."""
        self.failed = 0
        """Writes the last :meth:`flush` could not make (kept, retried)."""

    # -- informers (each returns the pod uids to activate) -------------------------------

    def on_claim(
        self, kind: str, obj: Mapping[str, Any], old: Mapping[str, Any] | None
    ) -> list[str]:
        key = _key(obj)
        prior = self.claims.get(key)
        if kind == "DELETED":
            self.claims.pop(key, None)
            self._index_claim(key, None, prior)
            self._release.pop(key, None)
            self._unfinalize.discard(key)
            return self._wake(key, freed=True)
        if prior is not None and _rv(obj) >= 0 and _rv(obj) < _rv(prior):
            return []  # older than the copy our own write returned (the assume cache's rule)
        self.claims[key] = obj
        self._index_claim(key, obj, prior)
        flight = self._in_flight.get(key)
        if flight is not None and (obj.get("status") or {}).get("allocation") is not None:
            self._drop_in_flight(key)
        if self._release.get(key):
            self._mark()
        before = prior or {}
        freed = (
            prior is None
            or ((before.get("status") or {}).get("allocation") is not None)
            > ((obj.get("status") or {}).get("allocation") is not None)
            or len(_reserved_uids(before)) > len(_reserved_uids(obj))
            or bool((obj.get("metadata") or {}).get("deletionTimestamp"))
        )
        return self._wake(key, freed=freed)

    def on_slice(
        self, kind: str, obj: Mapping[str, Any], old: Mapping[str, Any] | None
    ) -> list[str]:
        name = str((obj.get("metadata") or {}).get("name") or "")
        prior = self._slices.pop(name, None)
        if prior is not None:
            self._unindex_slice(name, prior)
        if kind != "DELETED":
            self._slices[name] = obj
            spec = obj.get("spec") or {}
            node = spec.get("nodeName")
            if node:
                self._by_node.setdefault(str(node), {})[name] = obj
            elif spec.get("allNodes") or spec.get("nodeSelector"):
                self._cluster_wide[name] = obj
                self._version += 1
            self._index_slice(obj)
        return self._wake(None, freed=True)

    def on_class(
        self, kind: str, obj: Mapping[str, Any], old: Mapping[str, Any] | None
    ) -> list[str]:
        name = str((obj.get("metadata") or {}).get("name") or "")
        if kind == "DELETED":
            self.classes.pop(name, None)
            self._version += 1
            return []
        self.classes[name] = obj
        self._version += 1
        return self._wake(None, freed=True)

    def on_template(
        self, kind: str, obj: Mapping[str, Any], old: Mapping[str, Any] | None
    ) -> list[str]:
        key = _key(obj)
        if kind == "DELETED":
            self.templates.pop(key, None)
            return []
        self.templates[key] = obj
        if any(key[0] == _key(p.pod)[0] for p in self._pending.values()):
            self._mark()
        return []

    def on_pod(self, kind: str, pod: Mapping[str, Any], old: Mapping[str, Any] | None) -> list[str]:
        """A pod event: a pod gone or finished leaves its claims (:meth:`flush`); a pod whose
        ``resourceClaimStatuses`` changed is activated."""
        uid = _uid(pod)
        gone = kind == "DELETED" or (pod.get("status") or {}).get("phase") in _TERMINAL
        if gone:
            self._waiting_devices.discard(uid)
            for key in [k for k, waiting in self._waiting.items() if uid in waiting]:
                self._waiting[key].discard(uid)
                if not self._waiting[key]:
                    del self._waiting[key]  # a claim that never came leaves nothing behind
            self._pending.pop(uid, None)
            self._written.pop(uid, None)
            keys = self._consumers.get(uid, set())
            for key in keys:
                self._release.setdefault(key, set()).add(uid)
            if keys:
                self._mark()
            return []
        if (pod.get("spec") or {}).get("nodeName"):
            self._waiting_devices.discard(uid)
            self._pending.pop(uid, None)
            self._written.pop(uid, None)
            return []
        statuses = (pod.get("status") or {}).get("resourceClaimStatuses")
        before = ((old or {}).get("status") or {}).get("resourceClaimStatuses")
        if old is not None and statuses != before and pod_claim_entries(pod):
            return [uid]
        return []

    # -- claims on their way (PreEnqueue) -----------------------------------------------

    def claims_not_created(self, pod: Mapping[str, Any]) -> tuple[str, bool] | None:
        """Why the pod must wait for a claim its template has yet to become, and whether that
        wait is quiet (``None``: every template's claim is named in the pod's status).

        Upstream's PreEnqueue: the resourceclaim controller creates the claim within moments
        and names it in ``status.resourceClaimStatuses``, whose update lets the pod in; it
        writes ``FailedResourceClaimCreation`` on the pod itself when it cannot, so the wait is
        quiet. With ``create_claims`` gpusched is that controller: the wait is quiet while the
        template exists, and told (what to create) while it does not."""
        statuses = {
            s.get("name") for s in (pod.get("status") or {}).get("resourceClaimStatuses") or ()
        }
        for entry in pod_claim_entries(pod):
            template = entry.get("resourceClaimTemplateName")
            entry_name = str(entry.get("name") or "")
            if not template or entry_name in statuses:
                continue
            namespace, name = _key(pod)
            if not self.create_claims:
                return (
                    f'pod "{namespace}/{name}": waiting for resource claim {entry_name!r} to be '
                    f"created from template {template!r}",
                    True,
                )
            self._want_claim(pod, entry_name, str(template))
            if (namespace, str(template)) in self.templates:
                return (
                    f'pod "{namespace}/{name}": creating resource claim {entry_name!r} from '
                    f"template {template!r}",
                    True,
                )
            return (
                f'pod "{namespace}/{name}", spec.resourceClaims[{entry_name!r}]: '
                f"ResourceClaimTemplate {namespace}/{template} does not exist; create it (or "
                "fix resourceClaimTemplateName), and the pod's claim is created then",
                False,
            )
        return None

    # -- resolution (PreFilter) --------------------------------------------------------

    def resolve(self, pod: Mapping[str, Any]) -> PodClaims | Refusal:
        """The pod's claims, or why it must wait (module docstring). Never awaits."""
        namespace, name = _key(pod)
        uid = _uid(pod)
        if self.served is False:
            return Refusal(
                f"the pod uses ResourceClaims, but this cluster's API server does not serve "
                f"{GROUP}/{VERSION} (Kubernetes 1.34 or later with DynamicResourceAllocation); "
                "the pod stays pending"
            )
        allocated: list[PodClaim] = []
        pending: list[PodClaim] = []
        for entry in pod_claim_entries(pod):
            entry_name = str(entry.get("name") or "")
            claim_name: str | None
            must_own = False
            if entry.get("resourceClaimName"):
                claim_name = str(entry["resourceClaimName"])
            elif entry.get("resourceClaimTemplateName"):
                must_own = True
                found = [
                    s
                    for s in (pod.get("status") or {}).get("resourceClaimStatuses") or ()
                    if s.get("name") == entry_name
                ]
                if not found:
                    if self.create_claims:
                        self._want_claim(pod, entry_name, str(entry["resourceClaimTemplateName"]))
                    return Refusal(
                        f'pod "{namespace}/{name}": ResourceClaim not created yet (waiting for '
                        f"resource claim {entry_name!r} to be created from template "
                        f"{entry['resourceClaimTemplateName']!r})"
                    )
                claim_name = found[0].get("resourceClaimName")
                if not claim_name:
                    continue  # no claim needed
            else:
                return Refusal(
                    f'pod "{namespace}/{name}", spec.resourceClaim "{entry_name}": none of the '
                    "supported fields are set"
                )
            key = (namespace, str(claim_name))
            claim = self.claims.get(key)
            if claim is None:
                self._waiting.setdefault(key, set()).add(uid)
                return Refusal(f'resourceclaim "{claim_name}" not found')
            if (claim.get("metadata") or {}).get("deletionTimestamp"):
                self._waiting.setdefault(key, set()).add(uid)
                return Refusal(f'resourceclaim "{claim_name}" is being deleted')
            if must_own and not _owned_by(claim, pod):
                return Refusal(
                    f"ResourceClaim {namespace}/{claim_name} was not created for pod "
                    f"{namespace}/{name} (pod is not owner)"
                )
            flight = self._in_flight.get(key)
            if flight is not None and flight.pod_uid != uid:
                self._waiting.setdefault(key, set()).add(uid)
                return Refusal(
                    f'resourceclaim "{claim_name}" is being allocated for another pod',
                    unresolvable=False,
                )
            reserved = _reserved_uids(claim)
            if (claim.get("status") or {}).get("allocation") is not None:
                if uid not in reserved and len(reserved) >= RESERVED_FOR_MAX:
                    self._waiting.setdefault(key, set()).add(uid)
                    return Refusal(
                        f'resourceclaim "{claim_name}" in use: reserved for '
                        f"{RESERVED_FOR_MAX} pods already"
                    )
                allocated.append(PodClaim(entry_name, key, claim))
            else:
                pending.append(PodClaim(entry_name, key, claim))
        return PodClaims(tuple(allocated), tuple(pending))

    # -- allocation (Filter) -----------------------------------------------------------

    def slices_for(self, node: str) -> list[Mapping[str, Any]]:
        """The slices whose devices node ``node`` may use: its own, and those for all nodes or
        for a node selector (the allocator matches it). O(slices of the node + shared ones)."""
        return [*self._by_node.get(node, {}).values(), *self._cluster_wide.values()]

    def allocate(
        self,
        claims: Iterable[PodClaim],
        node: str,
        *,
        held_by_pods: Callable[[str | int], bool] | None = None,
        inventory: GPUNodeInventory | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> Allocation | Unallocatable:
        """:func:`~gpusched.dra.allocate` of ``claims`` on ``node``: devices of any claim's
        allocation and in-flight ones are taken, and so are GPUs ``held_by_pods(uuid)`` (the
        ledger's pods: ``nvidia.com/gpu``, shared, MIG). Never awaits."""
        allocated = self._allocated
        in_flight = self._in_flight_devices
        devices = self._devices

        def taken(device: DeviceID) -> bool:
            if device in allocated or device in in_flight:
                return True
            if held_by_pods is None:
                return False
            known = devices.get(device)
            return known is not None and known.gpu is not None and held_by_pods(known.gpu)

        if len(self.match_cache) > _MATCH_CACHE_MAX:
            self.match_cache.clear()
        return allocate(
            [c.claim for c in claims],
            node_name=node,
            slices=self.slices_for(node),
            classes=self.classes,
            allocated=taken,
            inventory=inventory,
            allow_admin_access=self.allow_admin_access,
            match_cache=self.match_cache,
            node_labels=labels,
        )

    def device(self, device: DeviceID) -> tuple[str | int | None, bool]:
        """(the ledger's name for a device: UUID, else GPU index, else ``None``; whether it is
        a MIG device)."""
        known = self._devices.get(device)
        return (None, False) if known is None else (known.gpu, known.mig)

    def no_devices(self, pod: Mapping[str, Any]) -> None:
        """No node had devices for the pod: it is activated when some may be free."""
        self._waiting_devices.add(_uid(pod))

    # -- Reserve / Unreserve -------------------------------------------------------------

    def reserve(self, pod: Mapping[str, Any], node: str, claims: Mapping[Key, Any]) -> None:
        """The allocations (claim -> ``status.allocation``) Filter chose for the pod on
        ``node``: in flight until written or unreserved."""
        uid = _uid(pod)
        for key, allocation in claims.items():
            self._drop_in_flight(key)
            self._in_flight[key] = _InFlight(uid, node, allocation)
            for device in _results(allocation):
                self._in_flight_devices[device] = key
                self._touch(device)

    def unreserve(self, pod: Mapping[str, Any]) -> list[str]:
        """Undo :meth:`reserve`; a claim PreBind already reserved for the pod loses it again
        (:meth:`flush`). Idempotent; returns the pods to activate."""
        uid = _uid(pod)
        woken: list[str] = []
        for key in [k for k, f in self._in_flight.items() if f.pod_uid == uid]:
            self._drop_in_flight(key)
            woken += self._wake(key, freed=True)
        written = self._written.pop(uid, set())
        for key in written:
            self._release.setdefault(key, set()).add(uid)
        if written:
            self._mark()
        return woken

    # -- PreBind -------------------------------------------------------------------------

    async def bind(
        self,
        kube: Kube,
        pod: Mapping[str, Any],
        node: str,
        chosen: Mapping[Key, Mapping[str, Any]],
    ) -> str | None:
        """Write every claim of the pod, placed on ``node`` (module docstring, "The write");
        ``chosen``: the allocations Reserve took for the claims that were not allocated (the
        cycle's own, not the in-flight map: a foreign allocation drops that entry). ``None``
        once all are written, else why not (the pod fails PreBind and is retried)."""
        resolved = self.resolve(pod)
        if isinstance(resolved, Refusal):
            return resolved.message
        uid = _uid(pod)
        self._unrelease(uid)
        for claim in (*resolved.allocated, *resolved.pending):
            flight = self._in_flight.get(claim.key)
            allocation = chosen.get(claim.key)
            if allocation is not None and claim.allocation is not None:
                # Allocated by someone else since this cycle chose (another replica, or
                # kube-scheduler): its devices are not the ones this pod was given.
                if flight is not None and flight.pod_uid == uid:
                    self._drop_in_flight(claim.key)
                return f'resourceclaim "{claim.key[1]}" got allocated elsewhere in the meantime'
            if allocation is None:
                if claim.allocation is None:
                    return f'resourceclaim "{claim.key[1]}": no allocation was reserved for the pod'
                if not _selects(claim.allocation, node):
                    return f'resourceclaim "{claim.key[1]}" got allocated for another node'
            why = await self._bind_claim(kube, pod, claim.key, allocation)
            if flight is not None and flight.pod_uid == uid:
                self._drop_in_flight(claim.key)
            if why is not None:
                return why
            self._written.setdefault(uid, set()).add(claim.key)
        return None

    async def _bind_claim(
        self,
        kube: Kube,
        pod: Mapping[str, Any],
        key: Key,
        allocation: Mapping[str, Any] | None,
    ) -> str | None:
        uid = _uid(pod)
        path = claims_path(*key)
        claim = copy.deepcopy(dict(self.claims.get(key) or {}))
        refresh = not claim
        for _ in range(_TRIES):
            try:
                if refresh:
                    claim = await kube.get(path)
                    self._store(key, claim)
                    if (claim.get("metadata") or {}).get("deletionTimestamp"):
                        return f'resourceclaim "{key[1]}" got deleted in the meantime'
                    if allocation is not None and (claim.get("status") or {}).get("allocation"):
                        return f'resourceclaim "{key[1]}" got allocated elsewhere in the meantime'
                refresh = True
                if uid in _reserved_uids(claim):
                    return None
                meta = claim.setdefault("metadata", {})
                if allocation is not None and FINALIZER not in (meta.get("finalizers") or ()):
                    meta["finalizers"] = [*(meta.get("finalizers") or ()), FINALIZER]
                    claim = await kube.replace(path, claim)
                    self._store(key, claim)
                status = claim.setdefault("status", {})
                if allocation is not None:
                    status["allocation"] = copy.deepcopy(dict(allocation))
                meta = pod.get("metadata") or {}
                status["reservedFor"] = [
                    *(status.get("reservedFor") or ()),
                    {"resource": "pods", "name": meta.get("name"), "uid": uid},
                ]
                self._store(key, await kube.replace(f"{path}/status", claim))
                return None
            except APIConflict:
                continue
            except APINotFound:
                return f'resourceclaim "{key[1]}" not found'
            except APIError as exc:
                return f'resourceclaim "{key[1]}": {exc}'
        return f'resourceclaim "{key[1]}" is being written by others; retried'

    def _unrelease(self, uid: str) -> None:
        """The pod is being bound again (a retry after Unreserve): a release queued for it
        and not yet written must not take its claims away (upstream removes the pod from
        ``reservedFor`` in Unreserve itself, so no such release can linger)."""
        for key in [k for k, uids in self._release.items() if uid in uids]:
            self._release[key].discard(uid)
            if not self._release[key]:
                del self._release[key]

    # -- release (background) ----------------------------------------------------------

    async def flush(self, kube: Kube) -> int:
        """Take released pods out of their claims, deallocating claims left with no
        consumer, and create the claims of template pods (``create_claims``); returns the
        writes. A write that fails (other than NotFound) is kept and counted in
        :attr:`failed`."""
        self.changed.clear()
        self.failed = 0
        writes = 0
        work, self._release = self._release, {}
        for key, uids in sorted(work.items()):
            try:
                writes += await self._release_claim(kube, key, uids)
            except APINotFound:
                continue
            except APIError as exc:
                log.warning("ResourceClaim %s/%s: releasing it failed: %s", *key, exc)
                self.failed += 1
                self._release.setdefault(key, set()).update(uids)
                self._mark()
        if self.create_claims and self._pending:
            writes += await self._create_pending(kube)
        return writes

    async def _release_claim(self, kube: Kube, key: Key, uids: set[str]) -> int:
        path = claims_path(*key)
        writes = 0
        claim = self.claims.get(key)
        deallocated = False
        for _ in range(_TRIES):
            if claim is None:
                return writes
            body = copy.deepcopy(dict(claim))
            status = body.setdefault("status", {})
            reserved = status.get("reservedFor") or []
            kept = [r for r in reserved if str(r.get("uid")) not in uids]
            finalizers = (body.get("metadata") or {}).get("finalizers") or []
            deallocate = not kept and FINALIZER in finalizers
            if len(kept) == len(reserved) and not (deallocate and status.get("allocation")):
                break
            if kept:
                status["reservedFor"] = kept
            else:
                status.pop("reservedFor", None)
                if deallocate:
                    status.pop("allocation", None)
                    status.pop("devices", None)
            try:
                claim = await kube.replace(f"{path}/status", body)
                self._store(key, claim)
                writes += 1
                deallocated = not kept and deallocate
                break
            except APIConflict:
                claim = await kube.get(path)
                self._store(key, claim)
        if claim is None:
            return writes
        meta = claim.get("metadata") or {}
        status = claim.get("status") or {}
        # The finalizer goes only from a claim this manager deallocated (or one being deleted):
        # a claim with no consumer and no allocation may be another writer's, between its
        # finalizer write and its status write (the order PreBind writes in).
        ours = deallocated or key in self._unfinalize or bool(meta.get("deletionTimestamp"))
        if (
            ours
            and FINALIZER in (meta.get("finalizers") or ())
            and not status.get("reservedFor")
            and status.get("allocation") is None
        ):
            body = copy.deepcopy(dict(claim))
            body["metadata"]["finalizers"] = [f for f in meta["finalizers"] if f != FINALIZER]
            try:
                self._store(key, await kube.replace(path, body))
                writes += 1
                self._unfinalize.discard(key)
            except APIConflict:  # changed meanwhile (the controller): judged again then
                self._unfinalize.add(key)
                self._release.setdefault(key, set())
                self._mark()
        else:
            self._unfinalize.discard(key)
        return writes

    # -- claims from templates (create_claims) -----------------------------------------

    def _want_claim(self, pod: Mapping[str, Any], entry: str, template: str) -> None:
        pending = self._pending.setdefault(_uid(pod), _Pending(pod))
        pending.pod = pod
        if (entry, template) not in pending.entries:
            pending.entries.append((entry, template))
        self._mark()

    async def _create_pending(self, kube: Kube) -> int:
        writes = 0
        for uid, pending in list(self._pending.items()):
            pod = pending.pod
            namespace, name = _key(pod)
            statuses = list((pod.get("status") or {}).get("resourceClaimStatuses") or ())
            made = False
            for entry, template_name in pending.entries:
                if any(s.get("name") == entry for s in statuses):
                    continue
                template = self.templates.get((namespace, template_name))
                if template is None:
                    continue  # created when it appears (on_template)
                claim_name = self._owned_claim(pod, entry)
                if claim_name is None:
                    try:
                        created = await kube.create(
                            claims_path(namespace), _claim_from(template, pod, entry)
                        )
                    except APIError as exc:
                        log.warning("creating the claim of %s/%s failed: %s", namespace, name, exc)
                        self.failed += 1
                        continue
                    writes += 1
                    claim_name = str(created["metadata"]["name"])
                    self.on_claim("ADDED", created, None)
                statuses.append({"name": entry, "resourceClaimName": claim_name})
                made = True
            if made:
                body = {"status": {"resourceClaimStatuses": statuses}}
                try:
                    pending.pod = await kube.patch(
                        resource_path("", "v1", "pods", namespace, f"{name}/status"), body
                    )
                    writes += 1
                except APINotFound:
                    self._pending.pop(uid, None)
                    continue
                except APIError as exc:
                    log.warning("recording the claims of %s/%s failed: %s", namespace, name, exc)
                    self.failed += 1
                    continue
            if all(any(s.get("name") == e for s in statuses) for e, _ in pending.entries):
                self._pending.pop(uid, None)
        return writes

    def _owned_claim(self, pod: Mapping[str, Any], entry: str) -> str | None:
        namespace = _key(pod)[0]
        for (ns, name), claim in self.claims.items():
            annotations = (claim.get("metadata") or {}).get("annotations") or {}
            if (
                ns == namespace
                and annotations.get(POD_CLAIM_NAME_ANNOTATION) == entry
                and _owned_by(claim, pod)
            ):
                return name
        return None

    # -- the ledger's view ---------------------------------------------------------------

    def claimed_on(self, node: str) -> dict[str | int, str]:
        """The GPUs and MIG devices claims hold on ``node`` (the ledger's name -> claim
        ``namespace/name``). O(devices of the node's slices)."""
        out: dict[str | int, str] = {}
        for item in self._by_node.get(node, {}).values():
            spec = item.get("spec") or {}
            driver = str(spec.get("driver") or "")
            pool = str((spec.get("pool") or {}).get("name") or "")
            for raw in spec.get("devices") or ():
                device = (driver, pool, str(raw.get("name")))
                key = self._allocated.get(device)
                known = self._devices.get(device)
                if key is not None and known is not None and known.gpu is not None:
                    out[known.gpu] = f"{key[0]}/{key[1]}"
        return out

    def take_dirty_nodes(self) -> set[str]:
        """The nodes whose :meth:`claimed_on` may have changed since the last call."""
        dirty, self._dirty_nodes = self._dirty_nodes, set()
        return dirty

    # -- internals -----------------------------------------------------------------------

    def _mark(self) -> None:
        self.changed.set()

    def _store(self, key: Key, claim: Any) -> None:
        """The server's answer to a write, as the claim's copy until a newer event."""
        if isinstance(claim, dict):
            self.on_claim("MODIFIED", claim, self.claims.get(key))

    def _wake(self, key: Key | None, *, freed: bool) -> list[str]:
        woken = set(self._waiting.pop(key, ())) if key is not None else set()
        if freed and self._waiting_devices:
            woken |= self._waiting_devices
            self._waiting_devices = set()
        return sorted(woken)

    def _drop_in_flight(self, key: Key) -> None:
        flight = self._in_flight.pop(key, None)
        if flight is None:
            return
        for device in _results(flight.allocation):
            if self._in_flight_devices.get(device) == key:
                del self._in_flight_devices[device]
                self._touch(device)

    def _index_claim(
        self, key: Key, claim: Mapping[str, Any] | None, prior: Mapping[str, Any] | None
    ) -> None:
        for device in self._claim_devices.pop(key, ()):
            if self._allocated.get(device) == key:
                del self._allocated[device]
                self._touch(device)
        for uid in _reserved_uids(prior or {}):
            keys = self._consumers.get(uid)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._consumers[uid]
        if claim is None:
            return
        allocation = (claim.get("status") or {}).get("allocation")
        if allocation is not None:
            devices = tuple(_results(allocation))
            self._claim_devices[key] = devices
            for device in devices:
                self._allocated[device] = key
                self._touch(device)
        for uid in _reserved_uids(claim):
            self._consumers.setdefault(uid, set()).add(key)

    def _touch(self, device: DeviceID) -> None:
        known = self._devices.get(device)
        if known is not None and known.node is not None:
            self._dirty_nodes.add(known.node)
            self._node_versions[known.node] = self._node_versions.get(known.node, 0) + 1
        else:
            self._version += 1

    def version_of(self, node: str) -> tuple[int, int]:
        """Changes whenever :meth:`allocate` on ``node`` may answer otherwise for the same
        claims and the same ledger (a memo's key). O(1)."""
        return self._version, self._node_versions.get(node, 0)

    def _index_slice(self, obj: Mapping[str, Any]) -> None:
        spec = obj.get("spec") or {}
        driver = str(spec.get("driver") or "")
        pool = str((spec.get("pool") or {}).get("name") or "")
        node = spec.get("nodeName")
        for raw in spec.get("devices") or ():
            body = raw.get("basic", raw)
            attributes = body.get("attributes") or {}

            def attr(name: str, attributes: Mapping[str, Any] = attributes) -> Any:
                value = attributes.get(name) or attributes.get(f"{driver}/{name}") or {}
                return next(iter(value.values()), None) if isinstance(value, dict) else None

            kind, uuid, index = attr("type"), attr("uuid"), attr("index")
            gpu: str | int | None = None
            if isinstance(uuid, str) and uuid:
                gpu = uuid
            elif kind == "gpu" and isinstance(index, int):
                gpu = index
            self._devices[(driver, pool, str(raw.get("name")))] = _Device(
                str(node) if node else None, gpu, kind == "mig"
            )
        if node:
            self._dirty_nodes.add(str(node))
            self._node_versions[str(node)] = self._node_versions.get(str(node), 0) + 1

    def _unindex_slice(self, name: str, obj: Mapping[str, Any]) -> None:
        spec = obj.get("spec") or {}
        node = spec.get("nodeName")
        if node:
            self._by_node.get(str(node), {}).pop(name, None)
            if not self._by_node.get(str(node)):
                self._by_node.pop(str(node), None)
            self._dirty_nodes.add(str(node))
            self._node_versions[str(node)] = self._node_versions.get(str(node), 0) + 1
        if self._cluster_wide.pop(name, None) is not None:
            self._version += 1
        driver = str(spec.get("driver") or "")
        pool = str((spec.get("pool") or {}).get("name") or "")
        for raw in spec.get("devices") or ():
            self._devices.pop((driver, pool, str(raw.get("name"))), None)

    def _check(self) -> None:
        """Every invariant (tests call it after each step)."""
        for key, devices in self._claim_devices.items():
            assert key in self.claims, key
            for device in devices:
                assert self._allocated[device] == key, (device, key)
        assert len(self._allocated) == sum(len(d) for d in self._claim_devices.values())
        for device, key in self._in_flight_devices.items():
            assert device in _results(self._in_flight[key].allocation), (device, key)
        for uid, keys in self._consumers.items():
            assert keys, uid
            for key in keys:
                assert uid in _reserved_uids(self.claims[key]), (uid, key)


def _selects(allocation: Mapping[str, Any], node: str) -> bool:
    """Whether an allocation's node selector may select ``node``: only a selector of node
    names alone (what allocators write for node-local devices) is judged; others pass."""
    selector = allocation.get("nodeSelector")
    if not selector:
        return True
    names: set[str] = set()
    for term in selector.get("nodeSelectorTerms") or ():
        fields = term.get("matchFields") or ()
        if term.get("matchExpressions") or not fields:
            return True
        for f in fields:
            if f.get("key") != "metadata.name" or f.get("operator") != "In":
                return True
            names.update(str(v) for v in f.get("values") or ())
    return node in names


def _results(allocation: Mapping[str, Any]) -> list[DeviceID]:
    """The devices an allocation takes: results with ``adminAccess`` are left out, as
    upstream's ``GatherAllocatedState`` (admin access is not use)."""
    return [
        (str(r.get("driver")), str(r.get("pool")), str(r.get("device")))
        for r in (allocation.get("devices") or {}).get("results") or ()
        if not r.get("adminAccess")
    ]


def _claim_from(template: Mapping[str, Any], pod: Mapping[str, Any], entry: str) -> dict[str, Any]:
    """The claim kube-controller-manager makes for ``entry`` of ``pod`` from ``template``
    (``pkg/controller/resourceclaim``: generateName ``<pod>-<entry>-``, shortened in
    proportion past 57 characters)."""
    meta = pod.get("metadata") or {}
    pod_name = str(meta.get("name") or "")
    base = f"{pod_name}-{entry}-"
    if len(base) > 57:
        total = len(base)
        base = pod_name[: len(pod_name) * 57 // total] + "-" + entry[: len(entry) * 57 // total]
    spec = template.get("spec") or {}
    tmeta = spec.get("metadata") or {}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ResourceClaim",
        "metadata": {
            "generateName": base,
            "labels": dict(tmeta.get("labels") or {}),
            "annotations": {**(tmeta.get("annotations") or {}), POD_CLAIM_NAME_ANNOTATION: entry},
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": pod_name,
                    "uid": str(meta.get("uid") or ""),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": copy.deepcopy(dict(spec.get("spec") or {})),
    }
