"""The simulated API server's REST semantics, independent of HTTP.

This is the part of kube-apiserver that ``k8s.io/apiserver/pkg/registry/generic/registry``
(the generic store) and the endpoint handlers implement: metadata the server owns (uid,
resourceVersion, creationTimestamp, generation, deletionTimestamp), optimistic concurrency,
create-on-existing and stale-update conflicts, the patch types, graceful deletion and
finalizers, owner-reference garbage collection (Background, Foreground, Orphan),
namespaces and their termination, the
``pods/binding`` subresource, CustomResourceDefinitions that bring their resources to life,
and list/watch with selectors, pagination and resource-version semantics.

Per-kind behaviour (defaults, validation, which fields a selector may name, graceful periods)
comes from ``gpusched.sim.kinds`` strategies; CRD schemas from ``gpusched.sim.crd``.

Every method is synchronous: a request is handled atomically between two awaits, which is
the serialisation etcd's transactions give the real server.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import copy
import hashlib
import json
import random
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import yaml

from gpusched.sim import admission as admissionlib
from gpusched.sim import crd as crdlib
from gpusched.sim import errors, kinds, rbac
from gpusched.sim import field as fieldlib
from gpusched.sim import job_controller as joblib
from gpusched.sim import patch as patchlib
from gpusched.sim import policy as policylib
from gpusched.sim import quota as quotalib
from gpusched.sim import resource as resourcelib
from gpusched.sim import scheduling as schedulinglib
from gpusched.sim.selectors import (
    FieldSelector,
    LabelSelector,
    SelectorError,
    default_field_label_conversion,
    field_label_conversion,
    parse_field_selector,
    parse_label_selector,
)
from gpusched.sim.store import Entry, Storage, Store, Watcher, dumps

__all__ = ["Clock", "ListResult", "Registry", "Resource", "WatchStart", "format_time"]

Clock = Callable[[], datetime]

_STANDARD_VERBS = (
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
)
_CUSTOM_RESOURCE_VERBS = (  # customresource_discovery_controller.go lists them unsorted
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "create",
    "update",
    "watch",
)
_ZERO_BODIES: dict[tuple[str, str], dict[str, Any]] = {
    # What a bookmark carries besides metadata: the kind's Go zero value, JSON-encoded.
    ("", "Pod"): {"spec": {"containers": None}, "status": {}},
    ("", "Namespace"): {"spec": {}, "status": {}},
    ("coordination.k8s.io", "Lease"): {"spec": {}},
}
_CRD_CLEANUP_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"
_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # utilrand.String's alphabet
_CONTINUE_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter, or use the continue token in this response "
    "to retrieve the remainder of the results. Continuing with the provided token results in an "
    "inconsistent list - objects that were created, modified, or deleted between the time the "
    "first chunk was returned and now may show up in the list."
)


def format_time(t: datetime) -> str:
    """RFC 3339 with second precision in UTC, as ``metav1.Time`` marshals."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


_STORED_KINDS: tuple[tuple[str, str, str, bool, tuple[str, ...], tuple[str, ...]], ...] = (
    ("", "serviceaccounts", "ServiceAccount", True, ("sa",), ("token",)),
    ("", "configmaps", "ConfigMap", True, ("cm",), ()),
    ("", "secrets", "Secret", True, (), ()),
    ("", "services", "Service", True, ("svc",), ("status",)),
    ("apps", "deployments", "Deployment", True, ("deploy",), ("status", "scale")),
    ("apps", "daemonsets", "DaemonSet", True, ("ds",), ("status",)),
    ("rbac.authorization.k8s.io", "roles", "Role", True, (), ()),
    ("rbac.authorization.k8s.io", "rolebindings", "RoleBinding", True, (), ()),
    ("rbac.authorization.k8s.io", "clusterroles", "ClusterRole", False, (), ()),
    ("rbac.authorization.k8s.io", "clusterrolebindings", "ClusterRoleBinding", False, (), ()),
    (
        "admissionregistration.k8s.io",
        "validatingadmissionpolicies",
        "ValidatingAdmissionPolicy",
        False,
        (),
        ("status",),
    ),
    (
        "admissionregistration.k8s.io",
        "validatingadmissionpolicybindings",
        "ValidatingAdmissionPolicyBinding",
        False,
        (),
        (),
    ),
)
"""Built-in kinds served with the generic strategy (group, plural, kind, namespaced, short
names, subresources)."""


@dataclass(frozen=True)
class Resource:
    """One served resource of one group/version, as discovery lists it."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    singular: str
    storage: str
    strategy: kinds.Strategy
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    verbs: tuple[str, ...] = _STANDARD_VERBS
    subresources: tuple[str, ...] = ()
    # Conversion between the stored form and this version's form (events.k8s.io/v1 events).
    to_external: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    to_internal: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    schema: Mapping[str, Any] | None = None  # CRD openAPIV3Schema for custom resources
    crd_name: str = ""
    allow_create_on_update: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    def type_prefix(self) -> bytes:
        """The encoding's first bytes, stripped for list items (typed lists omit TypeMeta)."""
        return b'{"kind":%s,"apiVersion":%s,' % (
            dumps(self.kind),
            dumps(self.api_version),
        )


@dataclass
class ListResult:
    resource: Resource
    items: list[Entry]
    rv: int
    continue_token: str = ""
    remaining: int | None = None


@dataclass
class WatchStart:
    """A watcher already registered, and the lines to send before its live events."""

    watcher: Watcher
    initial: list[bytes] = field(default_factory=list)
    bookmarks: bool = False


def _key(namespace: str | None, name: str) -> str:
    return f"{namespace}/{name}" if namespace else name


def _encode_continue(rv: int, start: str) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode_continue(token: str) -> tuple[int, str]:
    try:
        padded = token + "=" * (-len(token) % 4)
        data = json.loads(base64.urlsafe_b64decode(padded.encode()))
        if data.get("v") != "meta.k8s.io/v1":
            raise ValueError("continue key is not valid")
        rv = int(data["rv"])
        start = str(data["start"])
    except (ValueError, KeyError, TypeError, binascii.Error) as exc:
        raise errors.bad_request(f"continue key is not valid: {exc}") from None
    if rv == 0:
        raise errors.bad_request(
            "continue key is not valid: incorrect encoded start resourceVersion "
            "(version meta.k8s.io/v1)"
        )
    return rv, start


def _parse_rv(text: str, param: str = "resourceVersion") -> int:
    try:
        value = int(text)
    except ValueError:
        raise errors.bad_request(f'invalid {param}: "{text}"') from None
    if value < 0:
        raise errors.bad_request(f'invalid {param}: "{text}"')
    return value


def _spec_changed(new: Mapping[str, Any], old: Mapping[str, Any], with_status: bool) -> bool:
    """Whether anything outside metadata (and status, when it is a subresource) changed."""
    ignored = (
        {"metadata", "apiVersion", "kind"}
        if with_status
        else {"metadata", "status", "apiVersion", "kind"}
    )
    keys = (set(new) | set(old)) - ignored
    return any(new.get(k) != old.get(k) for k in keys)


ORPHAN_FINALIZER = "orphan"  # metav1.FinalizerOrphanDependents
FOREGROUND_FINALIZER = "foregroundDeletion"  # metav1.FinalizerDeleteDependents
_GC_FINALIZERS = frozenset((ORPHAN_FINALIZER, FOREGROUND_FINALIZER))


def _gc_finalizers(
    default_policy: str,
    finalizers: list[str],
    propagation: str,
    orphan_dependents: bool | None,
) -> list[str]:
    """``deletionFinalizersForGarbageCollection``: the object's finalizers after a DELETE, by
    the request's options first, then the collector's finalizers it already has, then the
    kind's default policy (``shouldOrphanDependents``, ``shouldDeleteDependents``)."""
    if default_policy == "Unsupported":
        return finalizers
    orphan = foreground = False
    if orphan_dependents is not None:
        orphan = orphan_dependents
    elif propagation:
        orphan = propagation == "Orphan"
        foreground = propagation == "Foreground"
    elif ORPHAN_FINALIZER in finalizers or FOREGROUND_FINALIZER in finalizers:
        first = next(f for f in finalizers if f in _GC_FINALIZERS)
        orphan = first == ORPHAN_FINALIZER
        foreground = first == FOREGROUND_FINALIZER
    else:
        orphan = default_policy == "OrphanDependents"
    out = [f for f in finalizers if f not in _GC_FINALIZERS]
    if orphan:
        out.append(ORPHAN_FINALIZER)
    if foreground:
        out.append(FOREGROUND_FINALIZER)
    return out if set(out) != set(finalizers) else finalizers


class Registry:
    """All resources of the simulated cluster and the verbs on them."""

    def __init__(self, store: Store, clock: Clock) -> None:
        self.store = store
        self.clock = clock
        self.resources: dict[tuple[str, str, str], Resource] = {}
        self._owners: dict[str, set[tuple[str, str]]] = {}  # owner uid -> {(storage, key)}
        self._storage_resource: dict[str, Resource] = {}
        self.pending_gc: list[str] = []  # uids of deleted owners, for the background collector
        # Deleted objects holding an ``orphan``/``foregroundDeletion`` finalizer, (storage, key),
        # and the foreground-deleted owners waiting for blocking dependents, uid -> (storage, key).
        self.pending_finalize: list[tuple[str, str]] = []
        self._foreground: dict[str, tuple[str, str]] = {}
        self._uids: dict[str, str] = {}  # uid -> storage name, of every live object
        self.terminating_namespaces: set[str] = set()
        self.pending_crds: list[str] = []  # created CRDs the "controllers" have yet to establish
        self.pending_crd_cleanups: list[str] = []  # deleted CRDs whose resources must go
        self._warnings: list[str] = []  # for the Warning headers of the current request
        self._install_builtins()
        self.quotas = quotalib.QuotaTracker(store, clock)
        self.priority_classes = schedulinglib.StoredPriorityClasses(store)
        pods = self.resources[("", "v1", "pods")].strategy
        assert isinstance(pods, kinds.PodStrategy)
        pods.priority_classes = self.priority_classes
        self.disruption = policylib.DisruptionController(store, clock)
        priority_classes = self.resources[(schedulinglib.GROUP, "v1", "priorityclasses")]
        for system_class in schedulinglib.SYSTEM_PRIORITY_CLASSES:
            self.create(priority_classes, None, copy.deepcopy(system_class))

    # ------------------------------------------------------------------ resources

    def add_resource(self, res: Resource) -> None:
        self.resources[(res.group, res.version, res.plural)] = res
        if res.to_internal is None:
            self._storage_resource[res.storage] = res
        strategy = res.strategy
        self.store.storage(res.storage, strategy.field_set)

    def remove_resource(self, res: Resource) -> None:
        self.resources.pop((res.group, res.version, res.plural), None)
        if not any(r.storage == res.storage for r in self.resources.values()):
            self.store.drop_storage(res.storage)
            self._storage_resource.pop(res.storage, None)

    def _builtin(
        self,
        group: str,
        version: str,
        plural: str,
        kind: str,
        namespaced: bool,
        short_names: tuple[str, ...] = (),
        subresources: tuple[str, ...] = (),
        storage: str | None = None,
        strategy: kinds.Strategy | None = None,
        **extra: Any,
    ) -> None:
        self.add_resource(
            Resource(
                group=group,
                version=version,
                plural=plural,
                kind=kind,
                namespaced=namespaced,
                singular=kind.lower(),
                storage=storage or (f"{plural}.{group}" if group else plural),
                strategy=strategy or kinds.strategy_for(group, kind),
                short_names=short_names,
                subresources=subresources,
                **extra,
            )
        )

    def _install_builtins(self) -> None:
        self._builtin(
            "",
            "v1",
            "namespaces",
            "Namespace",
            False,
            ("ns",),
            ("status", "finalize"),
            verbs=("create", "delete", "get", "list", "patch", "update", "watch"),
        )
        self._builtin("", "v1", "nodes", "Node", False, ("no",), ("status",))
        self._builtin(
            "",
            "v1",
            "pods",
            "Pod",
            True,
            ("po",),
            ("status", "binding", "eviction"),
            categories=("all",),
        )
        self._builtin("", "v1", "events", "Event", True, ("ev",), allow_create_on_update=True)
        self._builtin(
            "events.k8s.io",
            "v1",
            "events",
            "Event",
            True,
            ("ev",),
            storage="events",
            to_external=kinds.event_to_events_v1,
            to_internal=kinds.event_from_events_v1,
            allow_create_on_update=True,
        )
        self._builtin(
            "coordination.k8s.io", "v1", "leases", "Lease", True, allow_create_on_update=True
        )
        self.add_resource(
            Resource(
                group="",
                version="v1",
                plural="resourcequotas",
                kind="ResourceQuota",
                namespaced=True,
                singular="resourcequota",
                storage="resourcequotas",
                strategy=quotalib.ResourceQuotaStrategy(),
                short_names=("quota",),
                subresources=("status",),
            )
        )
        self._builtin(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            False,
            ("crd", "crds"),
            ("status",),
            categories=("api-extensions",),
        )
        self._builtin(
            schedulinglib.GROUP,
            "v1",
            "priorityclasses",
            "PriorityClass",
            False,
            ("pc",),
            strategy=schedulinglib.PriorityClassStrategy(),
        )
        self._builtin(
            schedulinglib.GROUP,
            "v1alpha2",
            "workloads",
            "Workload",
            True,
            strategy=schedulinglib.WorkloadStrategy(),
        )
        self._builtin(
            schedulinglib.GROUP,
            "v1alpha2",
            "podgroups",
            "PodGroup",
            True,
            subresources=("status",),
            strategy=schedulinglib.PodGroupStrategy(),
        )
        self._builtin(
            joblib.GROUP,
            "v1",
            "jobs",
            "Job",
            True,
            (),
            ("status",),
            strategy=joblib.JobStrategy(),
            categories=("all",),
        )
        self._builtin(
            "policy",
            "v1",
            "poddisruptionbudgets",
            "PodDisruptionBudget",
            True,
            ("pdb",),
            ("status",),
            strategy=policylib.PodDisruptionBudgetStrategy(),
        )
        # Kinds that `kubectl apply -k deploy/` creates and that no simulated controller acts
        # on (the simulation plays the Deployments' and DaemonSets' processes itself): stored
        # with the generic strategy, so the install can be applied and read back.
        for group, plural, kind, namespaced, short, subs in _STORED_KINDS:
            strategy = rbac.RBACStrategy(kind, group) if group == rbac.GROUP else None
            self._builtin(group, "v1", plural, kind, namespaced, short, subs, strategy=strategy)
        for plural, kind, namespaced, subs, dra in resourcelib.strategies():
            self._builtin(resourcelib.GROUP, "v1", plural, kind, namespaced, (), subs, strategy=dra)
        for mutating in (True, False):
            webhooks = admissionlib.WebhookStrategy(mutating)
            self._builtin(
                admissionlib.GROUP,
                "v1",
                webhooks.resource,
                webhooks.kind,
                False,
                categories=("api-extensions",),
                strategy=webhooks,
            )

    def resource(self, group: str, version: str, plural: str) -> Resource | None:
        return self.resources.get((group, version, plural))

    def storage_of(self, res: Resource) -> Storage:
        return self.store.storages[res.storage]

    # ------------------------------------------------------------------ helpers

    def _now(self) -> datetime:
        return self.clock()

    def _external(self, res: Resource, entry: Entry) -> Entry:
        if res.to_external is None:
            return entry
        return Entry(res.to_external(entry.obj))

    def _check_namespace(
        self, res: Resource, namespace: str | None, creating: bool, name: str = ""
    ) -> None:
        if not res.namespaced or namespace is None:
            return
        ns = self.store.storages["namespaces"].get(namespace)
        if ns is None:
            raise errors.not_found("", "namespaces", namespace)
        if creating and ns.obj["metadata"].get("deletionTimestamp"):
            # The NamespaceLifecycle admission plugin, through apierrors.NewForbidden.
            raise errors.forbidden_with_causes(
                res.group,
                res.plural,
                name,
                f"unable to create new content in namespace {namespace} because it is being "
                "terminated",
                [
                    {
                        "reason": "NamespaceTerminating",
                        "message": f"namespace {namespace} is being terminated",
                        "field": "metadata.namespace",
                    }
                ],
            )

    def _body_meta(self, res: Resource, obj: Any, namespace: str | None) -> dict[str, Any]:
        if not isinstance(obj, dict):
            raise errors.bad_request("the body of the request was in an unknown format")
        kind = obj.get("kind")
        api_version = obj.get("apiVersion")
        if kind not in (None, "", res.kind) or api_version not in (None, "", res.api_version):
            raise errors.bad_request(
                f"the API version in the data ({api_version}) does not match the expected API "
                f"version ({res.api_version})"
                if api_version not in (None, "", res.api_version)
                else f"the kind in the data ({kind}) does not match the expected kind ({res.kind})"
            )
        meta = obj.get("metadata")
        if meta is None:
            meta = obj["metadata"] = {}
        if not isinstance(meta, dict):
            raise errors.bad_request("metadata must be an object")
        if res.namespaced and namespace is not None:
            body_ns = meta.get("namespace") or ""
            if body_ns and body_ns != namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent on "
                    "the request"
                )
            meta["namespace"] = namespace
        elif not res.namespaced:
            meta.pop("namespace", None)
        return meta

    def _typed(self, res: Resource, obj: dict[str, Any]) -> dict[str, Any]:
        """Put kind and apiVersion first (the list-item trick in ``Resource.type_prefix``)."""
        out = {"kind": res.kind, "apiVersion": res.api_version}
        for k, v in obj.items():
            if k not in ("kind", "apiVersion"):
                out[k] = v
        return out

    def _validate(self, res: Resource, errs: list[fieldlib.FieldError], name: str) -> None:
        if errs:
            raise errors.invalid(res.kind, res.group, name, errs)

    def _index_owners(self, storage: str, key: str, obj: Mapping[str, Any] | None) -> None:
        if obj is None:
            return
        for ref in obj["metadata"].get("ownerReferences") or ():
            uid = ref.get("uid")
            if uid:
                self._owners.setdefault(uid, set()).add((storage, key))

    # ------------------------------------------------------------------ create

    def create(
        self,
        res: Resource,
        namespace: str | None,
        body: Any,
        dry_run: bool = False,
        strict: bool = False,
    ) -> Entry:
        meta = self._body_meta(res, body, namespace)
        obj = res.to_internal(body) if res.to_internal else body
        meta = obj["metadata"]
        if meta.get("resourceVersion"):
            raise errors.unexpected("resourceVersion should not be set on objects to be created")
        name = meta.get("name") or ""
        # What admission errors call the object (extractResourceName): no name is generated yet.
        admission_name = name or meta.get("generateName") or "Unknown"
        self._check_namespace(res, namespace, creating=True, name=name)
        if not name:
            prefix = meta.get("generateName") or ""
            if not prefix:
                raise errors.invalid(
                    res.kind,
                    res.group,
                    "",
                    [fieldlib.required("metadata.name", "name or generateName is required")],
                )
            name = prefix + "".join(random.choices(_GENERATE_ALPHABET, k=5))
            meta["name"] = name
        storage = self.storage_of(res)
        key = _key(namespace if res.namespaced else None, name)
        # Server-owned metadata (rest.FillObjectMetaSystemFields + BeforeCreate).
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = format_time(self._now())
        for owned in (
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "resourceVersion",
            "selfLink",
        ):
            meta.pop(owned, None)
        meta.pop("generation", None)
        if res.strategy.tracks_generation:
            meta["generation"] = 1
        if res.schema is not None:
            self._check_unknown_fields(res, obj, strict)
            obj = crdlib.prepare_custom_resource(obj, res.schema)
            meta = obj["metadata"]
        if res.kind == "CustomResourceDefinition":
            obj = self._validate_crd(obj)
            obj["status"] = crdlib.crd_initial_status(obj)
        res.strategy.prepare_for_create(obj)
        self._validate(res, list(res.strategy.validate_create(obj)), name)
        self._validate_custom(res, obj, name)
        if res.storage == "pods" and namespace:
            # The ResourceQuota admission plugin (validating, so after the object's validation).
            quotalib.check_pod(obj, admission_name, self.quotas.quotas_in(namespace), self._now())
        if res.storage == schedulinglib.PRIORITY_CLASS_STORAGE:
            schedulinglib.admit_priority_class(obj, self.priority_classes, updating=False)
        if res.storage == schedulinglib.POD_GROUP_STORAGE:
            schedulinglib.admit_pod_group(obj, self.store)
        existing = storage.get(key)
        if existing is not None:
            deleting = bool(existing.obj["metadata"].get("deletionTimestamp"))
            raise errors.already_exists(res.group, res.plural, name, deleting)
        obj = self._typed(self._storage_res(res), obj)
        if dry_run:
            obj["metadata"]["resourceVersion"] = ""
            return self._external(res, Entry(obj))
        entry = self.store.write(storage, key, obj)
        self._uids[obj["metadata"]["uid"]] = storage.name
        self._index_owners(storage.name, key, obj)
        if res.kind == "CustomResourceDefinition":
            self.pending_crds.append(name)
        return self._external(res, entry)

    def _storage_res(self, res: Resource) -> Resource:
        return self._storage_resource.get(res.storage, res)

    # ------------------------------------------------------------------ read

    def get(self, res: Resource, namespace: str | None, name: str) -> Entry:
        if res.namespaced and namespace is None:
            raise errors.not_found(res.group, res.plural, name)
        entry = self.storage_of(res).get(_key(namespace if res.namespaced else None, name))
        if entry is None:
            raise errors.not_found(res.group, res.plural, name)
        return self._external(res, entry)

    def parse_selectors(
        self, res: Resource, label_selector: str, field_selector: str
    ) -> tuple[LabelSelector | None, FieldSelector | None]:
        try:
            labels = parse_label_selector(label_selector) if label_selector else None
            fields = parse_field_selector(field_selector) if field_selector else None
            if fields is not None:
                fields = fields.transform(self._field_conversion(res))
        except SelectorError as exc:
            raise errors.bad_request(str(exc)) from None
        if labels is not None and labels.empty():
            labels = None
        if fields is not None and fields.empty():
            fields = None
        return labels, fields

    @staticmethod
    def _field_conversion(res: Resource) -> Callable[[str, str], tuple[str, str]]:
        """Core and events.k8s.io kinds, ResourceSlice and custom resources register a
        field-label conversion; the others accept only metadata.name and metadata.namespace."""
        if (
            res.group in ("", "events.k8s.io")
            or res.schema is not None
            or (res.group, res.kind) == (resourcelib.GROUP, "ResourceSlice")
        ):
            renames = {"spec.host": "spec.nodeName"} if res.kind == "Pod" else None
            return field_label_conversion(res.strategy.supported_fields, renames)
        return default_field_label_conversion

    def list_objects(
        self,
        res: Resource,
        namespace: str | None,
        label_selector: str = "",
        field_selector: str = "",
        limit: int = 0,
        continue_token: str = "",
        resource_version: str = "",
        resource_version_match: str = "",
    ) -> ListResult:
        labels, fields = self.parse_selectors(res, label_selector, field_selector)
        if resource_version_match and not resource_version:
            raise errors.bad_request(
                "resourceVersionMatch is forbidden unless resourceVersion is provided"
            )
        if continue_token and resource_version and resource_version != "0":
            raise errors.bad_request(
                "specifying resource version is not allowed when using continue"
            )
        if resource_version_match not in ("", "NotOlderThan", "Exact"):
            unsupported = fieldlib.not_supported(
                "resourceVersionMatch", resource_version_match, ["Exact", "NotOlderThan"]
            )
            raise errors.bad_request(str(unsupported))
        storage = self.storage_of(res)
        current = self.store.rv
        state = storage.objects
        at = current
        start = ""
        if continue_token:
            at, start = _decode_continue(continue_token)
            if at < 0:  # a token from a 410: continue from the latest state
                at = current
            past = storage.state_at(at)
            if past is None:
                expired = errors.expired(_CONTINUE_EXPIRED)
                expired.status["metadata"] = {"continue": _encode_continue(-1, start)}
                raise expired
            state = past
        elif resource_version:
            wanted = _parse_rv(resource_version)
            if resource_version_match == "Exact":
                if wanted == 0:
                    raise errors.bad_request(
                        'resourceVersionMatch "exact" is forbidden for resourceVersion "0"'
                    )
                if wanted > current:
                    raise self._too_large(wanted, current)
                past = storage.state_at(wanted)
                if past is None:
                    raise errors.expired(
                        f"too old resource version: {wanted} ({storage.oldest_rv()})"
                    )
                state, at = past, wanted
            elif wanted > current:
                raise self._too_large(wanted, current)
        ns_prefix = f"{namespace}/" if res.namespaced and namespace else ""
        begin = max(start, ns_prefix)
        keys = state.irange(minimum=begin) if begin else iter(state)
        items: list[Entry] = []
        next_key = ""
        remaining = 0
        for key in keys:
            if ns_prefix and not key.startswith(ns_prefix):
                break
            entry: Entry = state[key]
            if limit and len(items) >= limit:
                next_key = key
                break
            if self._matches(storage, entry, labels, fields):
                items.append(self._external(res, entry))
        token = ""
        count: int | None = None
        if next_key:
            token = _encode_continue(at, next_key)
            if labels is None and fields is None:
                for key in state.irange(minimum=next_key):
                    if ns_prefix and not key.startswith(ns_prefix):
                        break
                    remaining += 1
                count = remaining
        return ListResult(res, items, at, token, count)

    def _too_large(self, wanted: int, current: int) -> errors.APIError:
        return errors.timeout(
            f"Too large resource version: {wanted}, current: {current}",
            retry_after=1,
            causes=[{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
        )

    @staticmethod
    def _matches(
        storage: Storage, entry: Entry, labels: LabelSelector | None, fields: FieldSelector | None
    ) -> bool:
        if labels is not None and not labels.matches(entry.obj["metadata"].get("labels") or {}):
            return False
        return fields is None or fields.matches(storage.fields_of(entry.obj))

    def watch(
        self,
        res: Resource,
        namespace: str | None,
        label_selector: str = "",
        field_selector: str = "",
        resource_version: str = "",
        resource_version_match: str = "",
        allow_bookmarks: bool = False,
        send_initial_events: bool | None = None,
    ) -> WatchStart:
        """Register a watcher; raises APIError for 400s; a 410 becomes an ERROR event."""
        labels, fields = self.parse_selectors(res, label_selector, field_selector)
        if send_initial_events is not None:
            if not allow_bookmarks and send_initial_events:
                raise errors.invalid(
                    "ListOptions",
                    "meta.k8s.io",
                    "",
                    [
                        fieldlib.forbidden(
                            "allowWatchBookmarks",
                            "allowWatchBookmarks required when sendInitialEvents is set",
                        )
                    ],
                )
            if resource_version_match != "NotOlderThan":
                raise errors.invalid(
                    "ListOptions",
                    "meta.k8s.io",
                    "",
                    [
                        fieldlib.forbidden(
                            "resourceVersionMatch",
                            "sendInitialEvents requires setting resourceVersionMatch to "
                            "NotOlderThan",
                        )
                    ],
                )
        elif resource_version_match:
            raise errors.invalid(
                "ListOptions",
                "meta.k8s.io",
                "",
                [
                    fieldlib.forbidden(
                        "resourceVersionMatch",
                        "resourceVersionMatch is forbidden for watch unless sendInitialEvents "
                        "is provided",
                    )
                ],
            )
        storage = self.storage_of(res)
        ns = namespace if res.namespaced else None
        watcher = Watcher(storage, ns, labels, fields, res.to_external)
        start = WatchStart(watcher, bookmarks=allow_bookmarks)
        initial_state = send_initial_events or (
            send_initial_events is None and resource_version in ("", "0")
        )
        if initial_state:
            for entry in storage.objects.values():
                if (ns is None or entry.obj["metadata"].get("namespace") == ns) and self._matches(
                    storage, entry, labels, fields
                ):
                    ext = self._external(res, entry)
                    start.initial.append(b'{"type":"ADDED","object":%s}\n' % ext.raw)
            if send_initial_events:
                start.initial.append(self.bookmark_line(res, initial_events_end=True))
        else:
            wanted = _parse_rv(resource_version)
            events = storage.events_after(wanted)
            if events is None:
                oldest = storage.oldest_rv()
                status = errors.expired(
                    f"too old resource version: {wanted} ({max(oldest - 1, 0)})"
                ).status
                start.initial.append(b'{"type":"ERROR","object":%s}\n' % dumps(status))
                watcher.closed = True
                return start
            for ev in events:
                before = len(watcher.buffer)
                watcher.offer(ev)
                if len(watcher.buffer) > before:
                    start.initial.append(watcher.buffer.pop())
        storage.watchers.add(watcher)
        return start

    def bookmark_line(self, res: Resource, initial_events_end: bool = False) -> bytes:
        meta: dict[str, Any] = {"resourceVersion": str(self.store.rv)}
        if res.schema is None:
            meta["creationTimestamp"] = None  # a typed zero object, as Go encodes it
        if initial_events_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        obj = {
            "kind": res.kind,
            "apiVersion": res.api_version,
            "metadata": meta,
            **_ZERO_BODIES.get((res.group, res.kind), {}),
        }
        return b'{"type":"BOOKMARK","object":%s}\n' % dumps(obj)

    # ------------------------------------------------------------------ update

    def update(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        body: Any,
        subresource: str = "",
        dry_run: bool = False,
        strict: bool = False,
    ) -> tuple[Entry, bool]:
        """PUT: returns (entry, created)."""
        self._body_meta(res, body, namespace)
        obj = res.to_internal(body) if res.to_internal else body
        meta = obj["metadata"]
        body_name = meta.get("name") or ""
        if body_name and body_name != name:
            raise errors.bad_request(
                f"the name of the object ({body_name}) does not match the name on the URL ({name})"
            )
        meta["name"] = name
        storage = self.storage_of(res)
        key = _key(namespace if res.namespaced else None, name)
        current = storage.get(key)
        if current is None:
            if res.allow_create_on_update and not subresource:
                return self.create(res, namespace, body, dry_run, strict), True
            raise errors.not_found(res.group, res.plural, name)
        rv = meta.get("resourceVersion") or ""
        if not rv and not self._allow_unconditional_update(res):
            raise errors.invalid(
                res.plural,
                res.group,
                name,
                [
                    fieldlib.invalid(
                        "metadata.resourceVersion",
                        fieldlib.Printed("0x0"),  # uint64 0 as %#v prints it
                        "must be specified for an update",
                    )
                ],
            )
        if rv and rv != current.obj["metadata"]["resourceVersion"]:
            raise errors.conflict(res.group, res.plural, name, errors.OPTIMISTIC_LOCK_ERROR)
        return (
            self._commit_update(res, storage, key, current, obj, subresource, dry_run, strict),
            False,
        )

    @staticmethod
    def _allow_unconditional_update(res: Resource) -> bool:
        """AllowUnconditionalUpdate: false for leases, CRDs and custom resources."""
        return not (
            res.schema is not None
            or res.kind == "CustomResourceDefinition"
            or (res.group, res.kind) == ("coordination.k8s.io", "Lease")
        )

    def _commit_update(
        self,
        res: Resource,
        storage: Storage,
        key: str,
        current: Entry,
        obj: dict[str, Any],
        subresource: str,
        dry_run: bool,
        strict: bool = False,
    ) -> Entry:
        old = current.obj
        meta = obj["metadata"]
        old_meta = old["metadata"]
        name = old_meta["name"]
        uid = meta.get("uid")
        if uid and uid != old_meta["uid"]:
            raise errors.conflict(
                res.group,
                res.plural,
                name,
                f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
                f"{old_meta['uid']}",
            )
        # Metadata the server owns survives any update.
        for owned in (
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
        ):
            if owned in old_meta:
                meta[owned] = old_meta[owned]
            else:
                meta.pop(owned, None)
        if res.namespaced:
            meta["namespace"] = old_meta["namespace"]
        strategy = res.strategy
        if subresource == "status":
            strategy.prepare_for_status_update(obj, old)
            errs = list(strategy.validate_status_update(obj, old))
        else:
            if res.schema is not None:
                self._check_unknown_fields(res, obj, strict)
                obj = crdlib.prepare_custom_resource(obj, res.schema)
                meta = obj["metadata"]
            if res.kind == "CustomResourceDefinition":
                obj = self._validate_crd(obj)
            strategy.prepare_for_update(obj, old)
            errs = list(strategy.validate_update(obj, old))
            self._validate(res, errs, name)
            self._validate_custom(res, obj, name)
            if res.storage == schedulinglib.PRIORITY_CLASS_STORAGE:
                schedulinglib.admit_priority_class(obj, self.priority_classes, updating=True)
            if res.kind == "CustomResourceDefinition":
                obj["status"] = old.get("status", {})
        self._validate(res, errs, name)
        if strategy.tracks_generation and _spec_changed(obj, old, not strategy.has_status):
            obj["metadata"]["generation"] = int(old_meta.get("generation", 0)) + 1
        obj = self._typed(self._storage_res(res), obj)
        obj["metadata"]["resourceVersion"] = old_meta["resourceVersion"]
        if obj == old:
            return self._external(res, current)  # no-op: etcd skips the write, no event
        if dry_run:
            return self._external(res, Entry(obj))
        new_meta = obj["metadata"]
        if (
            new_meta.get("deletionTimestamp")
            and not new_meta.get("finalizers")
            and not new_meta.get("deletionGracePeriodSeconds")
        ):
            # ShouldDeleteDuringUpdate: the last finalizer of a deleted object went away; the
            # object is deleted as last stored, the emptied version is never written (but is
            # what the request is answered with).
            removed = self._remove(res, storage, key)
            obj["metadata"]["resourceVersion"] = removed.obj["metadata"]["resourceVersion"]
            return self._external(res, Entry(obj))
        entry = self.store.write(storage, key, obj)
        self._index_owners(storage.name, key, obj)
        return self._external(res, entry)

    # ------------------------------------------------------------------ patch

    def patch(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        content_type: str,
        body: bytes,
        subresource: str = "",
        dry_run: bool = False,
        strict: bool = False,
    ) -> tuple[Entry, bool]:
        storage = self.storage_of(res)
        key = _key(namespace if res.namespaced else None, name)
        current = storage.get(key)
        ctype = content_type.split(";")[0].strip().lower()
        if ctype == "application/apply-patch+yaml":
            return self._apply(res, namespace, name, body, current, subresource, dry_run, strict)
        # The handler checks the patch type before it reads the object (415 before 404).
        strategic_ok = res.schema is None and patchlib.supports_strategic_merge(res.kind)
        if ctype not in (
            "application/json-patch+json",
            "application/merge-patch+json",
            "application/strategic-merge-patch+json",
        ):
            raise errors.unsupported_media_type(strategic=res.schema is None)
        if ctype == "application/strategic-merge-patch+json" and not strategic_ok:
            raise errors.unsupported_media_type(strategic=False)
        if current is None:
            raise errors.not_found(res.group, res.plural, name)
        try:
            patch_doc = json.loads(body)
        except ValueError as exc:
            raise errors.bad_request(f"error decoding patch: {exc}") from None
        ext = self._external(res, current).copy()
        try:
            if ctype == "application/json-patch+json":
                new = patchlib.json_patch(ext, patch_doc)
            elif ctype == "application/merge-patch+json":
                new = patchlib.json_merge_patch(ext, patch_doc)
            elif ctype == "application/strategic-merge-patch+json":
                if res.schema is not None or not patchlib.supports_strategic_merge(res.kind):
                    raise errors.unsupported_media_type(strategic=False)
                new = patchlib.strategic_merge_patch(ext, patch_doc, res.kind)
            else:
                raise errors.unsupported_media_type(strategic=res.schema is None)
        except patchlib.PatchError as exc:
            raise errors.APIError(exc.to_status()) from None
        if not isinstance(new, dict) or not isinstance(new.get("metadata"), dict):
            raise errors.bad_request("patched object is not a Kubernetes object")
        obj = res.to_internal(new) if res.to_internal else new
        meta = obj["metadata"]
        if meta.get("name", name) != name:
            raise errors.bad_request(
                f"the name of the object ({meta.get('name')}) does not match the name on the "
                f"URL ({name})"
            )
        meta["name"] = name
        rv = meta.get("resourceVersion") or ""
        if rv and rv != current.obj["metadata"]["resourceVersion"]:
            raise errors.conflict(res.group, res.plural, name, errors.OPTIMISTIC_LOCK_ERROR)
        return (
            self._commit_update(res, storage, key, current, obj, subresource, dry_run, strict),
            False,
        )

    def _apply(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        body: bytes,
        current: Entry | None,
        subresource: str,
        dry_run: bool,
        strict: bool,
    ) -> tuple[Entry, bool]:
        """Server-side apply, approximated: create if absent, else merge the applied config.

        Field ownership (managedFields) is not tracked, so fields a manager stops applying are
        not removed; conflicts between managers are never reported.
        """
        try:
            doc = yaml.safe_load(body)
        except yaml.YAMLError as exc:
            raise errors.bad_request(f"error decoding YAML: {exc}") from None
        if not isinstance(doc, dict):
            raise errors.bad_request("the body of the request was in an unknown format")
        if current is None:
            if subresource:
                raise errors.not_found(res.group, res.plural, name)
            doc.setdefault("metadata", {})["name"] = name
            return self.create(res, namespace, doc, dry_run, strict), True
        ext = self._external(res, current).copy()
        if patchlib.supports_strategic_merge(res.kind) and res.schema is None:
            new = patchlib.strategic_merge_patch(ext, doc, res.kind)
        else:
            new = patchlib.json_merge_patch(ext, doc)
        obj = res.to_internal(new) if res.to_internal else new
        obj["metadata"]["resourceVersion"] = current.obj["metadata"]["resourceVersion"]
        storage = self.storage_of(res)
        key = _key(namespace if res.namespaced else None, name)
        return (
            self._commit_update(res, storage, key, current, obj, subresource, dry_run, strict),
            False,
        )

    # ------------------------------------------------------------------ delete

    def delete(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        grace_period: int | None = None,
        preconditions: Mapping[str, Any] | None = None,
        propagation: str = "",
        dry_run: bool = False,
        orphan_dependents: bool | None = None,
    ) -> dict[str, Any] | Entry:
        """DELETE: the object (still terminating, or as deleted) or a Status of success.

        ``propagation`` (and the deprecated ``orphan_dependents``) decide the garbage
        collector's finalizers as ``deletionFinalizersForGarbageCollection`` does: ``orphan``
        (dependents lose their owner reference), ``foregroundDeletion`` (dependents go first),
        or none (background: dependents go after). ``background`` runs the collector."""
        storage = self.storage_of(res)
        key = _key(namespace if res.namespaced else None, name)
        current = storage.get(key)
        if current is None:
            raise errors.not_found(res.group, res.plural, name)
        meta = current.obj["metadata"]
        if preconditions:
            # rest.BeforeDelete checks them first, naming the Kind (not the resource).
            uid = preconditions.get("uid")
            if uid and uid != meta["uid"]:
                raise errors.conflict(
                    res.group,
                    res.kind,
                    name,
                    f"the UID in the precondition ({uid}) does not match the UID in record "
                    f"({meta['uid']}). The object might have been deleted and then recreated",
                )
            rv = preconditions.get("resourceVersion")
            if rv and rv != meta["resourceVersion"]:
                raise errors.conflict(
                    res.group,
                    res.kind,
                    name,
                    f"the ResourceVersion in the precondition ({rv}) does not match the "
                    f"ResourceVersion in record ({meta['resourceVersion']}). The object might "
                    "have been modified",
                )
        if propagation and orphan_dependents is not None:
            # ValidateDeleteOptions
            raise errors.invalid(
                "DeleteOptions",
                "",
                "",
                [
                    fieldlib.invalid(
                        "propagationPolicy",
                        propagation,
                        "orphanDependents and deletionPropagation cannot be both set",
                    )
                ],
            )
        if propagation not in ("", "Orphan", "Background", "Foreground"):
            raise errors.invalid(
                "DeleteOptions",
                "",
                "",
                [
                    fieldlib.not_supported(
                        "propagationPolicy",
                        propagation,
                        ["Foreground", "Background", "Orphan", "nil"],
                    )
                ],
            )
        if res.storage == schedulinglib.PRIORITY_CLASS_STORAGE:
            schedulinglib.forbid_system_class_delete(name)
        if res.kind == "Namespace":
            return self._delete_namespace(storage, key, current, dry_run)
        if res.kind == "CustomResourceDefinition" and not meta.get("deletionTimestamp"):
            return self._external(res, self._delete_crd(storage, key, current, dry_run))
        old_finalizers = list(meta.get("finalizers") or [])
        new_finalizers = _gc_finalizers(
            res.strategy.gc_policy, old_finalizers, propagation, orphan_dependents
        )
        finalizers = bool(new_finalizers)
        graceful = res.kind == "Pod"  # the only kind here with a graceful-delete strategy
        obj: dict[str, Any] | None = None
        if meta.get("deletionTimestamp"):
            # Already terminating (rest.BeforeDelete): a request may only shorten the period;
            # once the period is 0 it may still change the collector's finalizers.
            pending = int(meta.get("deletionGracePeriodSeconds") or 0)
            if pending > 0:
                if grace_period is None or grace_period >= pending:
                    return self._external(res, current)
                obj = current.copy()
                deadline = parse_time(meta["deletionTimestamp"]) - timedelta(seconds=pending)
                obj["metadata"]["deletionTimestamp"] = format_time(
                    deadline + timedelta(seconds=grace_period)
                )
                obj["metadata"]["deletionGracePeriodSeconds"] = grace_period
            elif finalizers:
                if set(new_finalizers) == set(old_finalizers):
                    return self._external(res, current)
                obj = current.copy()
        else:
            period = res.strategy.graceful_period(current.obj, grace_period)
            if graceful or finalizers:
                # The deletion is recorded first; pods go through this write even when they are
                # then removed at once (updateForGracefulDeletionAndFinalizers).
                obj = current.copy()
                obj["metadata"]["deletionTimestamp"] = format_time(
                    self._now() + timedelta(seconds=period)
                )
                obj["metadata"]["deletionGracePeriodSeconds"] = period
                if obj["metadata"].get("generation", 0) > 0:
                    obj["metadata"]["generation"] += 1
        if obj is not None:
            if new_finalizers != old_finalizers:
                if new_finalizers:
                    obj["metadata"]["finalizers"] = new_finalizers
                else:
                    obj["metadata"].pop("finalizers", None)
            if dry_run:
                return self._external(res, Entry(obj))
            written = self.store.write(storage, key, obj)
            if _GC_FINALIZERS & set(new_finalizers):
                self.pending_finalize.append((storage.name, key))
            if obj["metadata"]["deletionGracePeriodSeconds"] > 0 or finalizers:
                return self._external(res, written)
        elif dry_run:
            return self._external(res, current)
        entry = self._remove(res, storage, key)
        if res.strategy.return_deleted_object:
            return self._external(res, entry)
        return errors.status_success(name, res.group, res.plural, meta["uid"])

    def _delete_crd(self, storage: Storage, key: str, current: Entry, dry_run: bool) -> Entry:
        """CRDs take a cleanup finalizer and go Terminating; ``background`` then removes their
        custom resources and the CRD (customresourcedefinition/etcd.go, the finalizer
        controller)."""
        obj = current.copy()
        meta = obj["metadata"]
        meta["finalizers"] = [*meta.get("finalizers", []), _CRD_CLEANUP_FINALIZER]
        meta["deletionTimestamp"] = format_time(self._now())
        meta["deletionGracePeriodSeconds"] = 0
        if meta.get("generation", 0) > 0:
            meta["generation"] += 1
        conditions = [
            c
            for c in obj.setdefault("status", {}).get("conditions", [])
            if c["type"] != "Terminating"
        ]
        conditions.append(
            {
                "type": "Terminating",
                "status": "True",
                "lastTransitionTime": format_time(self._now()),
                "reason": "InstanceDeletionPending",
                "message": "CustomResourceDefinition marked for deletion; CustomResource "
                "deletion will begin soon",
            }
        )
        obj["status"]["conditions"] = conditions
        if dry_run:
            return Entry(obj)
        entry = self.store.write(storage, key, obj)
        self.pending_crd_cleanups.append(key)
        return entry

    def _cleanup_crd(self, name: str) -> None:
        crds = self.resources[("apiextensions.k8s.io", "v1", "customresourcedefinitions")]
        storage = self.storage_of(crds)
        current = storage.get(name)
        if current is None:
            return
        self._drop_crd(current.obj)
        obj = current.copy()
        obj["metadata"]["finalizers"] = [
            f for f in obj["metadata"].get("finalizers", []) if f != _CRD_CLEANUP_FINALIZER
        ]
        if not obj["metadata"]["finalizers"]:
            del obj["metadata"]["finalizers"]
            self._remove(crds, storage, name)
        else:
            self.store.write(storage, name, obj)

    def _write(self, storage: Storage, key: str, obj: dict[str, Any], dry_run: bool) -> Entry:
        return Entry(obj) if dry_run else self.store.write(storage, key, obj)

    def _remove(self, res: Resource, storage: Storage, key: str) -> Entry:
        entry = self.store.delete(storage, key)
        uid = entry.obj["metadata"]["uid"]
        self._uids.pop(uid, None)
        self._foreground.pop(uid, None)
        if uid in self._owners:
            self.pending_gc.append(uid)
        for ref in entry.obj["metadata"].get("ownerReferences") or ():
            waiting = self._foreground.get(ref.get("uid", ""))
            if waiting is not None:  # a foreground-deleted owner may now have none left
                self.pending_finalize.append(waiting)
        if res.namespaced:
            self._namespace_changed(entry.obj["metadata"].get("namespace", ""))
        return entry

    def delete_collection(
        self,
        res: Resource,
        namespace: str | None,
        label_selector: str = "",
        field_selector: str = "",
        grace_period: int | None = None,
        propagation: str = "",
        orphan_dependents: bool | None = None,
    ) -> ListResult:
        """Delete what a list selects; answers that list, as listed before the deletions."""
        listed = self.list_objects(res, namespace, label_selector, field_selector)
        for entry in listed.items:
            meta = entry.obj["metadata"]
            ns = meta.get("namespace") if res.namespaced else None
            with contextlib.suppress(errors.APIError):  # gone meanwhile, or held: as upstream
                self.delete(
                    res,
                    ns,
                    meta["name"],
                    grace_period,
                    propagation=propagation,
                    orphan_dependents=orphan_dependents,
                )
        return ListResult(res, listed.items, listed.rv)

    # ------------------------------------------------------------------ garbage collector

    def collect_garbage(self) -> int:
        """What kube-controller-manager's garbage collector does, for owners that went away or
        are being deleted with the ``orphan`` or ``foregroundDeletion`` finalizer; returns how
        many dependents it deleted.

        As ``attemptToDeleteItem``: a dependent with another live owner ("solid") stays and
        loses its references to the gone owners; one with none is deleted, with
        ``Foreground`` when its owner waits for it and it has dependents of its own, else as
        its own finalizers say, else ``Background``."""
        removed = 0
        while self.pending_gc or self.pending_finalize:
            while self.pending_finalize:
                removed += self._finalize_owner(*self.pending_finalize.pop(0))
            while self.pending_gc:
                uid = self.pending_gc.pop()
                for res, storage, key, entry in self._dependents(uid, self._owners.pop(uid, set())):
                    removed += self._collect(res, storage, key, entry, waited_on=False)
        return removed

    def _dependents(
        self, uid: str, keys: Iterable[tuple[str, str]]
    ) -> list[tuple[Resource, Storage, str, Entry]]:
        """The live objects among ``keys`` that still name ``uid`` as an owner."""
        out = []
        for storage_name, key in sorted(keys):
            storage = self.store.storages.get(storage_name)
            entry = storage.get(key) if storage is not None else None
            res = self._storage_resource.get(storage_name)
            if entry is None or res is None or storage is None:
                continue
            refs = entry.obj["metadata"].get("ownerReferences") or []
            if any(r.get("uid") == uid for r in refs):
                out.append((res, storage, key, entry))
        return out

    def _collect(
        self, res: Resource, storage: Storage, key: str, entry: Entry, waited_on: bool
    ) -> int:
        """Delete a dependent of a gone (or foreground-deleted) owner, or keep it for its solid
        owners and drop its references to the others (``classifyReferences``)."""
        meta = entry.obj["metadata"]
        refs = meta.get("ownerReferences") or []
        solid = [r for r in refs if self._solid(r.get("uid", ""))]
        if solid:
            if len(solid) != len(refs):
                obj = entry.copy()
                obj["metadata"]["ownerReferences"] = solid
                self._gc_write(res, storage, key, obj)
            return 0
        if meta.get("deletionTimestamp"):
            return 0  # already going (a second DELETE would only re-state its finalizers)
        finalizers = meta.get("finalizers") or []
        if waited_on and meta["uid"] in self._owners:
            policy = "Foreground"
        elif ORPHAN_FINALIZER in finalizers:
            policy = "Orphan"
        elif FOREGROUND_FINALIZER in finalizers:
            policy = "Foreground"
        else:
            policy = "Background"
        try:
            self.delete(res, meta.get("namespace"), meta["name"], propagation=policy)
        except errors.APIError:
            return 0
        return 1

    def _solid(self, uid: str) -> bool:
        """An owner that exists and is not waiting for its dependents to go."""
        storage_name = self._uids.get(uid)
        return storage_name is not None and uid not in self._foreground

    def _finalize_owner(self, storage_name: str, key: str) -> int:
        """An owner deleted with a collector's finalizer: orphan its dependents, or delete
        them first (``foregroundDeletion``), then drop the finalizer."""
        storage = self.store.storages.get(storage_name)
        entry = storage.get(key) if storage is not None else None
        res = self._storage_resource.get(storage_name)
        if entry is None or res is None or storage is None:
            return 0
        meta = entry.obj["metadata"]
        finalizers = meta.get("finalizers") or []
        uid = meta["uid"]
        if not meta.get("deletionTimestamp"):
            return 0
        removed = 0
        if ORPHAN_FINALIZER in finalizers:
            # orphanDependents: each dependent loses its reference, then the finalizer goes.
            for dep_res, dep_storage, dep_key, dep in self._dependents(
                uid, self._owners.pop(uid, set())
            ):
                obj = dep.copy()
                refs = [r for r in obj["metadata"]["ownerReferences"] if r.get("uid") != uid]
                if refs:
                    obj["metadata"]["ownerReferences"] = refs
                else:
                    obj["metadata"].pop("ownerReferences")
                self._gc_write(dep_res, dep_storage, dep_key, obj)
            self._drop_finalizer(res, storage, key, ORPHAN_FINALIZER)
        elif FOREGROUND_FINALIZER in finalizers:
            # processDeletingDependentsItem: every dependent is deleted; the owner waits only
            # for those whose reference blocks its deletion.
            self._foreground[uid] = (storage_name, key)
            dependents = self._dependents(uid, self._owners.get(uid, set()))
            for dep_res, dep_storage, dep_key, dep in dependents:
                removed += self._collect(dep_res, dep_storage, dep_key, dep, waited_on=True)
            blocking = [
                dep
                for _, _, _, dep in self._dependents(uid, self._owners.get(uid, set()))
                if any(
                    r.get("uid") == uid and r.get("blockOwnerDeletion")
                    for r in dep.obj["metadata"].get("ownerReferences") or []
                )
            ]
            if not blocking:
                self._foreground.pop(uid, None)
                self._drop_finalizer(res, storage, key, FOREGROUND_FINALIZER)
        return removed

    def _drop_finalizer(self, res: Resource, storage: Storage, key: str, name: str) -> None:
        entry = storage.get(key)
        if entry is None:
            return
        obj = entry.copy()
        left = [f for f in obj["metadata"].get("finalizers") or [] if f != name]
        if left:
            obj["metadata"]["finalizers"] = left
        else:
            obj["metadata"].pop("finalizers", None)
        self._gc_write(res, storage, key, obj)

    def _gc_write(self, res: Resource, storage: Storage, key: str, obj: dict[str, Any]) -> None:
        """The collector's update (a patch of metadata); a deleted object whose last finalizer
        it removed is deleted as last stored (``ShouldDeleteDuringUpdate``)."""
        meta = obj["metadata"]
        if (
            meta.get("deletionTimestamp")
            and not meta.get("finalizers")
            and not meta.get("deletionGracePeriodSeconds")
        ):
            self._remove(res, storage, key)
            return
        self.store.write(storage, key, obj)

    def _alive(self, uid: str) -> bool:
        return uid in self._uids

    # ------------------------------------------------------------------ namespaces

    def _delete_namespace(self, storage: Storage, key: str, current: Entry, dry_run: bool) -> Entry:
        """Namespaces go Terminating; the namespace controller empties and removes them."""
        if current.obj["metadata"].get("deletionTimestamp"):
            return current
        obj = current.copy()
        obj["metadata"]["deletionTimestamp"] = format_time(self._now())
        obj.setdefault("status", {})["phase"] = "Terminating"
        if dry_run:
            return Entry(obj)
        entry = self.store.write(storage, key, obj)
        self.terminating_namespaces.add(key)
        self._namespace_changed(key)
        return entry

    def _namespace_changed(self, namespace: str) -> None:
        """Run the namespace controller's step for a terminating namespace."""
        if namespace not in self.terminating_namespaces or self._finalizing:
            return
        self._finalizing = True
        try:
            left = 0
            for res in list(self._storage_resource.values()):
                if not res.namespaced:
                    continue
                storage = self.storage_of(res)
                keys = list(
                    storage.objects.irange(minimum=f"{namespace}/", maximum=f"{namespace}0")
                )
                for key in keys:
                    entry = storage.objects[key]
                    left += 1
                    if entry.obj["metadata"].get("deletionTimestamp"):
                        continue
                    try:  # namespacedResourcesDeleter: DeleteCollection, Background
                        self.delete(
                            res, namespace, entry.obj["metadata"]["name"], propagation="Background"
                        )
                    except errors.APIError:
                        continue
                    if storage.get(key) is None:
                        left -= 1
            if left == 0:
                self.terminating_namespaces.discard(namespace)
                namespaces = self.resources[("", "v1", "namespaces")]
                st = self.storage_of(namespaces)
                if st.get(namespace) is not None:
                    self._remove(namespaces, st, namespace)
        finally:
            self._finalizing = False

    _finalizing = False

    def ensure_namespace(self, name: str) -> None:
        if self.store.storages["namespaces"].get(name) is None:
            self.create(
                self.resources[("", "v1", "namespaces")],
                None,
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
            )

    # ------------------------------------------------------------------ binding

    def bind(self, namespace: str, name: str, binding: Any) -> dict[str, Any]:
        pods = self.resources[("", "v1", "pods")]
        if not isinstance(binding, dict):
            raise errors.bad_request("the body of the request was in an unknown format")
        bmeta = binding.get("metadata") or {}
        bname = bmeta.get("name") or name
        if name and bname != name:
            raise errors.bad_request(
                f"the name of the object ({bname}) does not match the name on the URL ({name})"
            )
        bns = bmeta.get("namespace") or namespace
        if bns != namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the "
                "request"
            )
        storage = self.storage_of(pods)
        key = _key(namespace, bname)
        current = storage.get(key)
        if current is None:
            raise errors.not_found("", "pods", bname)
        uid = bmeta.get("uid")
        if uid and uid != current.obj["metadata"]["uid"]:
            raise errors.conflict(
                "",
                "pods",
                bname,
                f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
                f"{current.obj['metadata']['uid']}",
            )
        new = kinds.bind_pod(current.copy(), binding, self._now())
        self.store.write(storage, key, new)
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "code": 201,
        }

    # ------------------------------------------------------------------ CRDs

    def _validate_crd(self, obj: dict[str, Any]) -> dict[str, Any]:
        """The CRD with the defaults the server stores, or 422 naming every problem."""
        try:
            crdlib.validate_crd(obj)
        except crdlib.CRDError as exc:
            raise errors.APIError(exc.status()) from None
        return crdlib.default_crd(obj)

    def take_warnings(self) -> list[str]:
        """Warnings of the request just handled (each request is handled synchronously)."""
        warnings, self._warnings = self._warnings, []
        return warnings

    def _check_unknown_fields(self, res: Resource, obj: dict[str, Any], strict: bool) -> None:
        """Unknown fields are pruned with a warning (``fieldValidation=Warn``, the default) or,
        with ``fieldValidation=Strict``, refused."""
        if res.schema is None:
            return
        unknown = crdlib.unknown_field_paths(obj, res.schema)
        if not strict:
            self._warnings = [f'unknown field "{path}"' for path in unknown]
        elif unknown:
            raise errors.bad_request(
                f'{res.kind} in version "{res.version}" cannot be handled as a {res.kind}: '
                + crdlib.strict_decoding_message(unknown)
            )

    def _validate_custom(self, res: Resource, obj: dict[str, Any], name: str) -> None:
        if res.schema is None:
            return
        errs = crdlib.validate_custom_resource(
            obj, res.schema, kind=res.kind, api_version=res.api_version
        )
        if errs:
            raise errors.invalid(res.kind, res.group, name, errs)

    def pending_work(self) -> bool:
        """Whether ``background`` has something to do."""
        return bool(
            self.pending_gc
            or self.pending_finalize
            or self.pending_crds
            or self.pending_crd_cleanups
            or self.disruption.pending
        )

    def evict(self, namespace: str, name: str, body: Any, dry_run: bool) -> dict[str, Any]:
        """The ``pods/eviction`` subresource (``gpusched.sim.policy.evict``)."""
        return policylib.evict(self, namespace, name, body, dry_run)

    def background(self) -> None:
        """What the controllers do after a request: GC, establishing new CRDs, PDB status."""
        while self.pending_crds:
            name = self.pending_crds.pop(0)
            entry = self.store.storages["customresourcedefinitions.apiextensions.k8s.io"].get(name)
            if entry is not None:
                self._crd_established(entry)
        while self.pending_crd_cleanups:
            self._cleanup_crd(self.pending_crd_cleanups.pop(0))
        self.collect_garbage()
        self.disruption.due()
        self.disruption.sync_pending()

    def _crd_established(self, entry: Entry) -> Entry:
        """Accept the CRD's names and serve its versions, as the CRD controllers do."""
        info = crdlib.CRDInfo.from_crd(entry.obj)
        for version in info.versions:
            if not version.served:
                continue
            if self.resource(info.group, version.name, info.plural) is not None:
                continue
            self.add_resource(
                Resource(
                    group=info.group,
                    version=version.name,
                    plural=info.plural,
                    kind=info.kind,
                    namespaced=info.namespaced,
                    singular=info.singular,
                    storage=f"{info.plural}.{info.group}",
                    strategy=kinds.generic_strategy(
                        info.group,
                        info.kind,
                        info.plural,
                        info.namespaced,
                        version.has_status_subresource,
                        version.additional_printer_columns,
                    ),
                    short_names=info.short_names,
                    categories=info.categories,
                    subresources=("status",) if version.has_status_subresource else (),
                    verbs=_CUSTOM_RESOURCE_VERBS,
                    schema=version.schema,
                    crd_name=entry.obj["metadata"]["name"],
                )
            )
        obj = entry.copy()
        obj["status"] = crdlib.crd_status_after_create(obj, now=format_time(self._now()))
        storage = self.store.storages["customresourcedefinitions.apiextensions.k8s.io"]
        return self.store.write(storage, obj["metadata"]["name"], obj)

    def _drop_crd(self, crd: Mapping[str, Any]) -> None:
        name = crd["metadata"]["name"]
        for res in [r for r in self.resources.values() if r.crd_name == name]:
            storage = self.storage_of(res)
            for key in list(storage.objects.keys()):
                self._remove(res, storage, key)
            self.remove_resource(res)

    # ------------------------------------------------------------------ discovery

    def groups(self) -> dict[str, list[str]]:
        """group -> served versions, in a stable order (core group first)."""
        out: dict[str, list[str]] = {}
        for group, version, _ in sorted(self.resources, key=lambda k: (k[0] != "", k[0], k[1])):
            versions = out.setdefault(group, [])
            if version not in versions:
                versions.append(version)
        return out

    def resource_list(self, group: str, version: str) -> dict[str, Any] | None:
        resources = [
            r for (g, v, _), r in sorted(self.resources.items()) if g == group and v == version
        ]
        if not resources:
            return None
        entries: list[dict[str, Any]] = []
        for r in resources:
            item: dict[str, Any] = {
                "name": r.plural,
                "singularName": r.singular,
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": list(r.verbs),
            }
            if r.short_names:
                item["shortNames"] = list(r.short_names)
            if r.categories:
                item["categories"] = list(r.categories)
            stored = self._storage_res(r)
            item["storageVersionHash"] = storage_version_hash(
                stored.group, stored.version, stored.kind
            )
            entries.append(item)
            for sub in r.subresources:
                verbs = ["create"] if sub in ("binding", "eviction") else ["get", "patch", "update"]
                if sub == "finalize":
                    verbs = ["update"]
                entry: dict[str, Any] = {
                    "name": f"{r.plural}/{sub}",
                    "singularName": "",
                    "namespaced": r.namespaced,
                    "kind": "Binding" if sub == "binding" else r.kind,
                    "verbs": verbs,
                }
                if sub == "token":  # served as authentication.k8s.io/v1 TokenRequest
                    entry = {
                        "name": f"{r.plural}/{sub}",
                        "singularName": "",
                        "namespaced": r.namespaced,
                        "group": "authentication.k8s.io",
                        "version": "v1",
                        "kind": "TokenRequest",
                        "verbs": ["create"],
                    }
                if sub == "eviction":  # served as policy/v1 Eviction
                    entry = {
                        "name": f"{r.plural}/{sub}",
                        "singularName": "",
                        "namespaced": r.namespaced,
                        "group": "policy",
                        "version": "v1",
                        "kind": "Eviction",
                        "verbs": verbs,
                    }
                entries.append(entry)
        if group == "":
            entries.append(
                {
                    "name": "bindings",
                    "singularName": "binding",
                    "namespaced": True,
                    "kind": "Binding",
                    "verbs": ["create"],
                }
            )
            entries.sort(key=lambda e: e["name"])
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version,
            "resources": entries,
        }


def storage_version_hash(group: str, version: str, kind: str) -> str:
    """``storageversionhash.StorageVersionHash``: 8 bytes of sha256("group/version/kind")."""
    digest = hashlib.sha256(f"{group}/{version}/{kind}".encode()).digest()
    return base64.b64encode(digest[:8]).decode()
