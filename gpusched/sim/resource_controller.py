"""The resourceclaim controller of kube-controller-manager, played by the simulation.

In a real cluster ``pkg/controller/resourceclaim/controller.go`` does this; the simulated
cluster runs :class:`ResourceClaimController` as an ordinary API client on the
:class:`~gpusched.kube.controller.Controller` base (list/watch, create, ``/status`` updates,
DELETE with a uid precondition), as it runs the kubelets:

* **claims from templates**: for each entry of a pod's ``spec.resourceClaims`` that names a
  ``resourceClaimTemplateName``, it creates a ResourceClaim from the template (the template's
  labels, annotations and ``spec.spec``) with ``generateName`` ``<pod>-<claim>-`` (both names
  shortened in proportion when that is over 57 characters), the annotation
  ``resource.kubernetes.io/pod-claim-name: <claim>`` and a controller ``ownerReference`` to the
  pod (``blockOwnerDeletion``), unless the pod already owns one for that entry; then it records
  ``status.resourceClaimStatuses[{name, resourceClaimName}]`` on the pod. Pods being deleted
  or done get no new claims. A template that does not exist is retried (its creation syncs the
  pod again) and told on the pod once, with upstream's Warning Event
  ``FailedResourceClaimCreation`` (the scheduler holds such a pod back without an Event).
* **reservedFor cleanup**: a claim's ``status.reservedFor`` entries for pods that are gone
  (or have another uid) or done (Succeeded, Failed, or deleted before being scheduled) are
  removed; when the last one goes and the claim carries the
  ``resource.kubernetes.io/delete-protection`` finalizer, the allocation is cleared too, and
  then the finalizer is removed (so a deleted claim can go).
* **generated claims of pods that are done**: an unreserved claim owned by a pod that is done
  is deleted. A deleted pod's claims are removed by the garbage collector (its ownerReference).

Cost: nothing while no ResourceClaim or ResourceClaimTemplate exists (the pod watch starts
with the first one, so a cluster without DRA carries no extra pod watch); then one queue
entry per pod or claim event, each synced in O(claims of the pod).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any, Final

from gpusched.clock import Clock
from gpusched.kube.client import Kube, resource_path
from gpusched.kube.controller import Controller
from gpusched.kube.errors import APIConflict, APINotFound
from gpusched.kube.reflector import object_key
from gpusched.kube.workqueue import ItemExponentialRateLimiter
from gpusched.sim.resource import DELETE_PROTECTION_FINALIZER, GROUP

__all__ = ["POD_CLAIM_NAME_ANNOTATION", "ResourceClaimController", "generate_name", "is_pod_done"]

POD_CLAIM_NAME_ANNOTATION: Final = "resource.kubernetes.io/pod-claim-name"
_MAX_BASE_LEN: Final = 57  # 63 - len("-") - 5 random characters
_RETRY_INITIAL: Final = 0.1
_RETRY_MAX: Final = 10.0


def generate_name(pod: str, claim: str) -> str:
    """The ``generateName`` of a claim made for ``pod`` from its entry ``claim``: upstream
    shortens both names in proportion to their lengths (and then drops the final hyphen)."""
    name = f"{pod}-{claim}-"
    if len(name) > _MAX_BASE_LEN:
        total = len(name)
        name = (
            pod[: len(pod) * _MAX_BASE_LEN // total]
            + "-"
            + claim[: len(claim) * _MAX_BASE_LEN // total]
        )
    return name


def is_pod_done(pod: Mapping[str, Any]) -> bool:
    """``isPodDone``: terminal, or deleted before it was scheduled."""
    phase = (pod.get("status") or {}).get("phase")
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    return phase in ("Succeeded", "Failed") or (
        bool(meta.get("deletionTimestamp")) and not spec.get("nodeName")
    )


def _owning_pod(claim: Mapping[str, Any]) -> tuple[str, str]:
    for ref in (claim.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("apiVersion") == "v1" and ref.get("kind") == "Pod" and ref.get("controller"):
            return str(ref.get("name", "")), str(ref.get("uid", ""))
    return "", ""


class ResourceClaimController(Controller):
    """``await run()`` until cancelled; ``synced`` is set once claims and templates are listed.

    Queue items are ``pod:<key>`` and ``claim:<key>``. A failed sync (a 409 included) is
    retried after 0.1 s doubling to 10 s per item, without holding up the others."""

    conflicts_at_once = False

    def __init__(self, kube: Kube, clock: Clock | None = None) -> None:
        limiter = ItemExponentialRateLimiter(_RETRY_INITIAL, _RETRY_MAX)
        super().__init__("resourceclaim", clock=clock, rate_limiter=limiter)
        self.kube = kube
        self.claims = self.informer(
            kube, resource_path(GROUP, "v1", "resourceclaims"), self._on_claim, name="claims"
        )
        self.templates = self.informer(
            kube,
            resource_path(GROUP, "v1", "resourceclaimtemplates"),
            self._on_template,
            name="templates",
        )
        self.pods = self.informer(
            kube, resource_path("", "v1", "pods"), self._on_pod, name="pods", start=False
        )
        self.background("pods", self._pods_when_needed)
        self._pods_wanted = asyncio.Event()
        self._by_pod_uid: dict[str, set[str]] = {}  # reserved or owning pod uid -> claim keys
        self._created: dict[tuple[str, str], str] = {}  # (pod uid, entry) -> claim made
        self._told: set[tuple[str, str]] = set()  # (pod uid, entry) told its template is missing
        self.created = 0
        self.deleted = 0

    async def _pods_when_needed(self) -> None:
        await self._pods_wanted.wait()
        await self.pods.run()

    # ------------------------------------------------------------------ events

    def _want_pods(self) -> None:
        self._pods_wanted.set()

    def _on_template(self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        self._want_pods()
        if kind == "ADDED" and self.pods.synced.is_set():
            namespace = obj["metadata"].get("namespace")
            for key, pod in self.pods.items.items():
                if pod["metadata"].get("namespace") == namespace:
                    self.queue.add(f"pod:{key}")

    def _on_claim(self, kind: str, claim: dict[str, Any], old: dict[str, Any] | None) -> None:
        self._want_pods()
        key = object_key(claim)
        before = self._pod_uids(old) if old is not None else set()
        after = self._pod_uids(claim) if kind != "DELETED" else set()
        for uid in before - after:
            keys = self._by_pod_uid.get(uid, set())
            keys.discard(key)
            if not keys:
                self._by_pod_uid.pop(uid, None)
        for uid in after:
            self._by_pod_uid.setdefault(uid, set()).add(key)
        if kind != "DELETED":
            self.queue.add(f"claim:{key}")

    @staticmethod
    def _pod_uids(claim: Mapping[str, Any]) -> set[str]:
        uids = {
            str(r.get("uid"))
            for r in (claim.get("status") or {}).get("reservedFor") or []
            if r.get("resource") == "pods" and not r.get("apiGroup")
        }
        _, owner = _owning_pod(claim)
        if owner:
            uids.add(owner)
        return uids

    def _on_pod(self, kind: str, pod: dict[str, Any], old: dict[str, Any] | None) -> None:
        key = object_key(pod)
        if kind != "DELETED":
            self.queue.add(f"pod:{key}")
        else:
            uid = pod["metadata"].get("uid", "")
            for made in [k for k in self._created if k[0] == uid]:
                del self._created[made]
        for claim in self._by_pod_uid.get(pod["metadata"].get("uid", ""), set()).copy():
            self.queue.add(f"claim:{claim}")

    async def sync(self, key: str) -> None:
        kind, _, name = key.partition(":")
        if kind == "pod":
            await self._sync_pod(name)
        else:
            await self._sync_claim(name)

    # ------------------------------------------------------------------ pods

    async def _sync_pod(self, key: str) -> None:
        pod = self.pods.items.get(key)
        if pod is None:
            return
        meta, spec = pod["metadata"], pod.get("spec") or {}
        if meta.get("deletionTimestamp") or is_pod_done(pod):
            return
        entries = [
            c for c in spec.get("resourceClaims") or [] if c.get("resourceClaimTemplateName")
        ]
        if not entries:
            return
        namespace = meta.get("namespace", "")
        recorded = {
            s.get("name"): s.get("resourceClaimName")
            for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
        }
        statuses: list[dict[str, Any]] = []
        for entry in entries:
            name = entry["name"]
            claim_name = (
                recorded.get(name)
                or self._created.get((meta["uid"], name))
                or self._find_claim(namespace, meta["uid"], name)
            )
            if claim_name is None:
                claim_name = await self._create_claim(pod, entry)
            if recorded.get(name) != claim_name:
                statuses.append({"name": name, "resourceClaimName": claim_name})
        if statuses:
            await self.kube.patch(
                resource_path("", "v1", "pods", namespace, meta["name"], "status"),
                {"status": {"resourceClaimStatuses": statuses}},
                "application/strategic-merge-patch+json",
            )

    def _find_claim(self, namespace: str, pod_uid: str, entry: str) -> str | None:
        for key in self._by_pod_uid.get(pod_uid, set()):
            claim = self.claims.items.get(key)
            if claim is None or claim["metadata"].get("namespace") != namespace:
                continue
            annotations = claim["metadata"].get("annotations") or {}
            if (
                _owning_pod(claim)[1] == pod_uid
                and annotations.get(POD_CLAIM_NAME_ANNOTATION) == entry
            ):
                return str(claim["metadata"]["name"])
        return None

    async def _create_claim(self, pod: Mapping[str, Any], entry: Mapping[str, Any]) -> str:
        meta = pod["metadata"]
        namespace = meta.get("namespace", "")
        template_name = str(entry["resourceClaimTemplateName"])
        try:
            template = await self.kube.get(
                resource_path(GROUP, "v1", "resourceclaimtemplates", namespace, template_name)
            )
        except APINotFound as exc:  # retried, and the template's creation syncs the pod again
            await self._tell_missing(pod, str(entry["name"]), template_name, exc)
            raise
        tspec = template.get("spec") or {}
        tmeta = tspec.get("metadata") or {}
        annotations = {**(tmeta.get("annotations") or {}), POD_CLAIM_NAME_ANNOTATION: entry["name"]}
        claim_meta: dict[str, Any] = {
            "generateName": generate_name(meta["name"], entry["name"]),
            "namespace": namespace,
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        }
        if tmeta.get("labels"):
            claim_meta["labels"] = dict(tmeta["labels"])
        body = {
            "apiVersion": f"{GROUP}/v1",
            "kind": "ResourceClaim",
            "metadata": claim_meta,
            "spec": tspec.get("spec") or {},
        }
        created = await self.kube.create(
            resource_path(GROUP, "v1", "resourceclaims", namespace), body
        )
        self.created += 1
        # Remember it at once: the watch event may come after the pod's next sync.
        self._created[(meta["uid"], entry["name"])] = str(created["metadata"]["name"])
        return str(created["metadata"]["name"])

    async def _tell_missing(
        self, pod: Mapping[str, Any], entry: str, template: str, exc: APINotFound
    ) -> None:
        """The Event upstream's controller writes on the pod when it cannot make the claim
        (``FailedResourceClaimCreation``), once per pod and claim entry: the scheduler holds
        such a pod back quietly, so this is what tells its owner."""
        meta = pod["metadata"]
        if (meta["uid"], entry) in self._told:
            return
        self._told.add((meta["uid"], entry))
        now = self.clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta["uid"],
            },
            "reason": "FailedResourceClaimCreation",
            "message": f"PodResourceClaim {entry}: resource claim template {template!r}: "
            f"{exc.message or exc}",
            "type": "Warning",
            "source": {"component": "resourceclaim-controller"},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        with contextlib.suppress(APIConflict, APINotFound):
            await self.kube.create(resource_path("", "v1", "events", meta["namespace"]), event)

    # ------------------------------------------------------------------ claims

    def _pod_valid(self, namespace: str, name: str, uid: str) -> bool:
        pod = self.pods.items.get(f"{namespace}/{name}")
        return pod is not None and pod["metadata"].get("uid") == uid and not is_pod_done(pod)

    async def _sync_claim(self, key: str) -> None:
        claim = self.claims.items.get(key)
        if claim is None or not self.pods.synced.is_set():
            if claim is not None:
                await self.pods.synced.wait()
                self.queue.add(f"claim:{key}")
            return
        meta = claim["metadata"]
        namespace, name = meta.get("namespace", ""), meta["name"]
        path = resource_path(GROUP, "v1", "resourceclaims", namespace, name)
        status = claim.get("status") or {}
        reserved = status.get("reservedFor") or []
        valid = [
            r
            for r in reserved
            if r.get("resource") != "pods"
            or r.get("apiGroup")
            or self._pod_valid(namespace, str(r.get("name")), str(r.get("uid")))
        ]
        finalizers = meta.get("finalizers") or []
        # A claim allocated but no longer reserved (or never) that is being deleted: clear
        # its allocation so that the finalizer can go (upstream's "else if" branch).
        deleting_allocated = (
            not valid
            and bool(meta.get("deletionTimestamp"))
            and DELETE_PROTECTION_FINALIZER in finalizers
            and status.get("allocation") is not None
        )
        shrunk = len(valid) < len(reserved)
        if shrunk or deleting_allocated:
            body = dict(claim)
            body["status"] = {**status, "reservedFor": valid}
            if not valid:
                del body["status"]["reservedFor"]
                if DELETE_PROTECTION_FINALIZER in finalizers:
                    body["status"].pop("allocation", None)
                    body["status"].pop("devices", None)
            try:
                claim = await self.kube.replace(f"{path}/status", body)
            except APIConflict:
                return  # a newer version is on its way through the watch
            status = claim.get("status") or {}
        # Upstream removes the finalizer only on the transition to unused (or while the claim
        # is being deleted): a claim the scheduler has just given the finalizer, and not yet
        # its allocation (two writes, finalizer first), keeps it.
        if (
            (shrunk or meta.get("deletionTimestamp"))
            and not valid
            and status.get("allocation") is None
            and DELETE_PROTECTION_FINALIZER in finalizers
        ):
            body = dict(claim)
            body["metadata"] = {
                **claim["metadata"],
                "finalizers": [f for f in finalizers if f != DELETE_PROTECTION_FINALIZER],
            }
            with contextlib.suppress(APIConflict, APINotFound):
                claim = await self.kube.replace(path, body)
        if not valid and not claim["metadata"].get("deletionTimestamp"):
            pod_name, pod_uid = _owning_pod(claim)
            pod = self.pods.items.get(f"{namespace}/{pod_name}") if pod_name else None
            if pod is not None and pod["metadata"].get("uid") == pod_uid and is_pod_done(pod):
                with contextlib.suppress(APINotFound, APIConflict):
                    await self.kube.delete(
                        path, {"preconditions": {"uid": claim["metadata"]["uid"]}}
                    )
                    self.deleted += 1
