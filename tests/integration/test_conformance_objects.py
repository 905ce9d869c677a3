"""Conformance: object metadata, errors and patches, as kube-apiserver v1.32 answers them.

Each test states what a real kube-apiserver does; the upstream code it follows is named in
the test's docstring (paths under kubernetes/kubernetes ``staging/src/k8s.io/``).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import pytest
from conformance_helpers import (
    JSON_PATCH,
    MERGE_PATCH,
    RFC3339,
    UUID,
    call,
    default_service_account,
    details,
    fails,
    failure,
    http,
    lease,
    node,
    pod,
    rv,
    wait_gone,
)
from conftest import Target
from kubernetes_asyncio import client as k8s

OPTIMISTIC_LOCK = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


@pytest.fixture
async def cluster(target: Target) -> Target:
    await default_service_account(target)
    return target


# --------------------------------------------------------------------------- resources

GROUPS = {"pods": "", "nodes": "", "leases": "coordination.k8s.io", "namespaces": ""}


def qualified(resource: str) -> str:
    """``schema.GroupResource.String()``: ``pods``, ``leases.coordination.k8s.io``."""
    group = GROUPS[resource]
    return f"{resource}.{group}" if group else resource


class Objects:
    """Create/read/replace/delete one kind of object by name, through the typed APIs."""

    def __init__(self, target: Target, resource: str) -> None:
        self.target = target
        self.resource = resource
        self.core = target.core()
        self.coord = k8s.CoordinationV1Api(target.api())
        self.created_nodes: list[str] = []

    def create(self, name: str) -> Awaitable[Any]:
        ns = self.target.namespace
        if self.resource == "pods":
            return self.core.create_namespaced_pod(ns, pod(name))
        if self.resource == "leases":
            return self.coord.create_namespaced_lease(ns, lease(name))
        self.created_nodes.append(name)
        return self.core.create_node(node(name))

    def read(self, name: str) -> Awaitable[Any]:
        ns = self.target.namespace
        return {
            "pods": lambda: self.core.read_namespaced_pod(name, ns),
            "leases": lambda: self.coord.read_namespaced_lease(name, ns),
            "nodes": lambda: self.core.read_node(name),
            "namespaces": lambda: self.core.read_namespace(name),
        }[self.resource]()

    def replace(self, name: str, body: dict[str, Any]) -> Awaitable[Any]:
        ns = self.target.namespace
        return {
            "pods": lambda: self.core.replace_namespaced_pod(name, ns, body),
            "leases": lambda: self.coord.replace_namespaced_lease(name, ns, body),
            "nodes": lambda: self.core.replace_node(name, body),
        }[self.resource]()

    async def read_raw(self, name: str) -> dict[str, Any]:
        ns = self.target.namespace
        if self.resource == "pods":
            reply = await call(self.core.read_namespaced_pod, name, ns)
        elif self.resource == "leases":
            reply = await call(self.coord.read_namespaced_lease, name, ns)
        else:
            reply = await call(self.core.read_node, name)
        assert reply.status == 200, reply.body
        body: dict[str, Any] = reply.body
        return body

    async def cleanup(self) -> None:
        for name in self.created_nodes:
            reply = await call(self.core.delete_node, name)
            assert reply.status in (200, 404), reply.body


@pytest.fixture
async def objects(cluster: Target, request: pytest.FixtureRequest) -> AsyncIterator[Objects]:
    made = Objects(cluster, request.param)
    try:
        yield made
    finally:
        await made.cleanup()


# --------------------------------------------------------------------------- metadata


async def test_create_fills_server_owned_metadata(cluster: Target) -> None:
    """rest.BeforeCreate (apiserver/pkg/registry/rest/create.go) clears deletionTimestamp and
    deletionGracePeriodSeconds, FillObjectMetaSystemFields sets a fresh uid and
    creationTimestamp whatever the client sent; a GET returns exactly what the create did."""
    core = cluster.core()
    body = pod("meta")
    body["metadata"].update(
        uid="00000000-0000-0000-0000-000000000000",
        creationTimestamp="2000-01-01T00:00:00Z",
        deletionTimestamp="2000-01-01T00:00:00Z",
        deletionGracePeriodSeconds=5,
    )
    created = await call(core.create_namespaced_pod, cluster.namespace, body)
    assert created.status == 201, created.body
    meta = created.body["metadata"]
    assert UUID.match(meta["uid"])
    assert meta["uid"] != "00000000-0000-0000-0000-000000000000"
    assert RFC3339.match(meta["creationTimestamp"])
    assert meta["creationTimestamp"] != "2000-01-01T00:00:00Z"
    assert "deletionTimestamp" not in meta
    assert "deletionGracePeriodSeconds" not in meta
    assert meta["namespace"] == cluster.namespace
    assert re.fullmatch(r"[1-9][0-9]*", meta["resourceVersion"])
    assert (created.body["kind"], created.body["apiVersion"]) == ("Pod", "v1")
    assert created.body["status"]["phase"] == "Pending"

    fetched = await call(core.read_namespaced_pod, "meta", cluster.namespace)
    assert fetched.status == 200
    assert fetched.body == created.body


async def test_create_records_managed_fields(cluster: Target) -> None:
    """Every write goes through the field manager (endpoints/handlers/create.go,
    fieldmanager): one ``Update`` entry for the given fieldManager with a FieldsV1 set.

    The simulation does not track field ownership (README, "Where the simulation differs"):
    this test documents the real server's behaviour and runs only against one."""
    if cluster.is_sim:
        pytest.skip("known difference: the simulation does not record managedFields")
    core = cluster.core()
    created = await call(
        core.create_namespaced_pod,
        cluster.namespace,
        pod("managed", labels={"app": "x"}),
        field_manager="gpusched-conformance",
    )
    assert created.status == 201, created.body
    entries = created.body["metadata"].get("managedFields")
    assert isinstance(entries, list), created.body["metadata"]
    assert len(entries) == 1, entries
    entry = entries[0]
    assert entry["manager"] == "gpusched-conformance"
    assert entry["operation"] == "Update"
    assert entry["apiVersion"] == "v1"
    assert entry["fieldsType"] == "FieldsV1"
    assert RFC3339.match(entry["time"])
    assert "f:labels" in entry["fieldsV1"]["f:metadata"]
    assert "f:containers" in entry["fieldsV1"]["f:spec"]


async def test_resource_version_increases_with_every_write(cluster: Target) -> None:
    """Each write is an etcd transaction: its revision becomes the object's resourceVersion,
    strictly increasing across create, patch, update and status writes."""
    core = cluster.core()
    ns = cluster.namespace
    versions = [rv((await call(core.create_namespaced_pod, ns, pod("rv"))).body)]
    patched = await call(core.patch_namespaced_pod, "rv", ns, {"metadata": {"labels": {"a": "1"}}})
    versions.append(rv(patched.body))
    current = patched.body
    current["metadata"]["annotations"] = {"note": "replaced"}
    replaced = await call(core.replace_namespaced_pod, "rv", ns, current)
    assert replaced.status == 200, replaced.body
    versions.append(rv(replaced.body))
    status = await call(
        core.patch_namespaced_pod_status,
        "rv",
        ns,
        {"status": {"conditions": [{"type": "gpusched.io/Checked", "status": "True"}]}},
    )
    assert status.status == 200, status.body
    versions.append(rv(status.body))
    assert versions == sorted(set(versions)), versions
    fetched = await call(core.read_namespaced_pod, "rv", ns)
    assert rv(fetched.body) == versions[-1]


async def test_update_that_changes_nothing_keeps_the_resource_version(cluster: Target) -> None:
    """GuaranteedUpdate skips the etcd write when the new encoding equals the stored one
    (apiserver/pkg/storage/etcd3/store.go); the resourceVersion stays the same."""
    core = cluster.core()
    ns = cluster.namespace
    await core.create_namespaced_pod(ns, pod("noop"))
    current = (await call(core.read_namespaced_pod, "noop", ns)).body
    again = await call(core.replace_namespaced_pod, "noop", ns, current)
    assert again.status == 200, again.body
    assert again.body["metadata"]["resourceVersion"] == current["metadata"]["resourceVersion"]
    same = await call(core.patch_namespaced_pod, "noop", ns, {"metadata": {"labels": None}})
    assert same.body["metadata"]["resourceVersion"] == current["metadata"]["resourceVersion"]


async def test_create_with_a_resource_version_is_rejected(cluster: Target) -> None:
    """etcd3 store.Create returns the plain error "resourceVersion should not be set on
    objects to be created"; ErrorToAPIStatus (endpoints/handlers/responsewriters/status.go)
    turns a non-Status error into a 500 without reason or details."""
    body = pod("with-rv")
    body["metadata"]["resourceVersion"] = "12345"
    status = await fails(cluster.core().create_namespaced_pod(cluster.namespace, body), 500)
    assert status == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "resourceVersion should not be set on objects to be created",
        "code": 500,
    }


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize("objects", ["pods", "nodes", "leases"], indirect=True)
async def test_create_on_an_existing_name_is_409_already_exists(objects: Objects) -> None:
    """storeerr.InterpretCreateError -> errors.NewAlreadyExists(qualifiedResource, name)."""
    name = objects.target.name("dup")
    await objects.create(name)
    status = await fails(objects.create(name), 409)
    assert status == failure(
        409,
        "AlreadyExists",
        f'{qualified(objects.resource)} "{name}" already exists',
        details(name, objects.resource, GROUPS[objects.resource]),
    )


# Not nodes: on a real cluster the node controllers write to a new Node at any moment.
@pytest.mark.parametrize("objects", ["pods", "leases"], indirect=True)
async def test_update_with_a_stale_resource_version_is_409_conflict(objects: Objects) -> None:
    """generic registry Store.Update: a resourceVersion other than the stored one is
    errors.NewConflict(qualifiedResource, name, OptimisticLockErrorMsg)."""
    name = objects.target.name("stale")
    await objects.create(name)
    first = await objects.read_raw(name)
    second = await objects.read_raw(name)
    first["metadata"]["labels"] = {"writer": "first"}
    second["metadata"]["labels"] = {"writer": "second"}
    await objects.replace(name, first)
    status = await fails(objects.replace(name, second), 409)
    assert status == failure(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified(objects.resource)} "{name}": '
        + OPTIMISTIC_LOCK,
        details(name, objects.resource, GROUPS[objects.resource]),
    )
    current = await objects.read_raw(name)
    assert current["metadata"]["labels"] == {"writer": "first"}


async def test_a_patch_carrying_a_stale_resource_version_is_409(cluster: Target) -> None:
    """A patch may name metadata.resourceVersion; the patched object then fails Store.Update's
    optimistic-concurrency check like a PUT would."""
    core = cluster.core()
    ns = cluster.namespace
    created = await call(core.create_namespaced_pod, ns, pod("patch-rv"))
    await core.patch_namespaced_pod("patch-rv", ns, {"metadata": {"labels": {"a": "1"}}})
    stale = {
        "metadata": {
            "resourceVersion": created.body["metadata"]["resourceVersion"],
            "labels": {"a": "2"},
        }
    }
    status = await fails(
        core.patch_namespaced_pod("patch-rv", ns, stale, _content_type=MERGE_PATCH), 409
    )
    assert status == failure(
        409,
        "Conflict",
        'Operation cannot be fulfilled on pods "patch-rv": ' + OPTIMISTIC_LOCK,
        details("patch-rv", "pods"),
    )


@pytest.mark.parametrize("objects", ["pods", "nodes", "leases", "namespaces"], indirect=True)
async def test_get_of_a_missing_object_is_404_not_found(objects: Objects) -> None:
    """storeerr.InterpretGetError -> errors.NewNotFound(qualifiedResource, name)."""
    name = objects.target.name("missing")
    status = await fails(objects.read(name), 404)
    assert status == failure(
        404,
        "NotFound",
        f'{qualified(objects.resource)} "{name}" not found',
        details(name, objects.resource, GROUPS[objects.resource]),
    )


async def test_create_in_a_missing_namespace_is_404(cluster: Target) -> None:
    """The NamespaceLifecycle admission plugin answers errors.NewNotFound for namespaces."""
    missing = cluster.name("no-such-ns")
    status = await fails(cluster.core().create_namespaced_pod(missing, pod("p")), 404)
    assert status == failure(
        404, "NotFound", f'namespaces "{missing}" not found', details(missing, "namespaces")
    )


async def test_replace_of_a_missing_pod_is_404(cluster: Target) -> None:
    """Pods do not allow create-on-update (podStrategy.AllowCreateOnUpdate is false)."""
    status = await fails(
        cluster.core().replace_namespaced_pod("ghost", cluster.namespace, pod("ghost")), 404
    )
    assert status == failure(404, "NotFound", 'pods "ghost" not found', details("ghost", "pods"))


async def test_generate_name(cluster: Target) -> None:
    """names.SimpleNameGenerator: the prefix plus 5 characters of utilrand's alphabet; a name
    given alongside generateName wins."""
    core = cluster.core()
    ns = cluster.namespace
    made = []
    for _ in range(2):
        body = pod("")
        body["metadata"] = {"generateName": "gen-"}
        reply = await call(core.create_namespaced_pod, ns, body)
        assert reply.status == 201, reply.body
        made.append(reply.body["metadata"])
    for meta in made:
        assert re.fullmatch(r"gen-[bcdfghjklmnpqrstvwxz2456789]{5}", meta["name"]), meta
        assert meta["generateName"] == "gen-"
    assert made[0]["name"] != made[1]["name"]

    body = pod("explicit")
    body["metadata"]["generateName"] = "gen-"
    reply = await call(core.create_namespaced_pod, ns, body)
    assert reply.body["metadata"]["name"] == "explicit"


async def test_no_name_and_no_generate_name_is_422(cluster: Target) -> None:
    """ValidateObjectMeta: field.Required(metadata.name, "name or generateName is required")."""
    body = pod("")
    body["metadata"] = {}
    status = await fails(cluster.core().create_namespaced_pod(cluster.namespace, body), 422)
    assert status == failure(
        422,
        "Invalid",
        'Pod "" is invalid: metadata.name: Required value: name or generateName is required',
        {
            "kind": "Pod",
            "causes": [
                {
                    "reason": "FieldValueRequired",
                    "message": "Required value: name or generateName is required",
                    "field": "metadata.name",
                }
            ],
        },
    )


async def test_lease_update_needs_a_resource_version(cluster: Target) -> None:
    """leaseStrategy.AllowUnconditionalUpdate is false, so a PUT without resourceVersion is
    rejected by Store.Update with field.Invalid(metadata.resourceVersion, uint64(0), ...),
    rendered with %#v as 0x0."""
    coord = k8s.CoordinationV1Api(cluster.api())
    ns = cluster.namespace
    await coord.create_namespaced_lease(ns, lease("uncond"))
    status = await fails(coord.replace_namespaced_lease("uncond", ns, lease("uncond")), 422)
    assert status == failure(
        422,
        "Invalid",
        'leases.coordination.k8s.io "uncond" is invalid: metadata.resourceVersion: '
        "Invalid value: 0x0: must be specified for an update",
        {
            "name": "uncond",
            "group": "coordination.k8s.io",
            "kind": "leases",
            "causes": [
                {
                    "reason": "FieldValueInvalid",
                    "message": "Invalid value: 0x0: must be specified for an update",
                    "field": "metadata.resourceVersion",
                }
            ],
        },
    )


async def test_pod_update_without_resource_version_is_unconditional(cluster: Target) -> None:
    """podStrategy.AllowUnconditionalUpdate is true: a PUT without resourceVersion applies."""
    core = cluster.core()
    ns = cluster.namespace
    await core.create_namespaced_pod(ns, pod("uncond"))
    current = (await call(core.read_namespaced_pod, "uncond", ns)).body
    del current["metadata"]["resourceVersion"]
    current["metadata"]["labels"] = {"updated": "yes"}
    reply = await call(core.replace_namespaced_pod, "uncond", ns, current)
    assert reply.status == 200, reply.body
    assert reply.body["metadata"]["labels"] == {"updated": "yes"}


async def test_put_creates_a_missing_lease(cluster: Target) -> None:
    """leaseStrategy.AllowCreateOnUpdate is true: a PUT on a missing lease creates it (201)."""
    coord = k8s.CoordinationV1Api(cluster.api())
    reply = await call(coord.replace_namespaced_lease, "fresh", cluster.namespace, lease("fresh"))
    assert reply.status == 201, reply.body
    assert reply.body["metadata"]["name"] == "fresh"
    assert UUID.match(reply.body["metadata"]["uid"])


# --------------------------------------------------------------------------- patches


async def test_merge_patch_sets_and_removes_labels(cluster: Target) -> None:
    """RFC 7386 (jsonpatch.MergePatch in endpoints/handlers/patch.go): null removes a key."""
    core = cluster.core()
    ns = cluster.namespace
    await core.create_namespaced_pod(ns, pod("merge", labels={"a": "1", "b": "2"}))
    reply = await call(
        core.patch_namespaced_pod,
        "merge",
        ns,
        {"metadata": {"labels": {"a": None, "c": "3"}}},
        _content_type=MERGE_PATCH,
    )
    assert reply.status == 200, reply.body
    assert reply.body["metadata"]["labels"] == {"b": "2", "c": "3"}


async def test_merge_patch_replaces_lists_whole(cluster: Target) -> None:
    """A merge patch replaces the containers list; one container fewer is refused by
    ValidateContainerUpdates (pkg/apis/core/validation): "may not add or remove containers"."""
    core = cluster.core()
    ns = cluster.namespace
    body = pod("mergelist")
    body["spec"]["containers"].append({"name": "sidecar", "image": "busybox:1.36"})
    await core.create_namespaced_pod(ns, body)
    patch = {"spec": {"containers": [{"name": "sidecar", "image": "busybox:1.37"}]}}
    status = await fails(
        core.patch_namespaced_pod("mergelist", ns, patch, _content_type=MERGE_PATCH), 422
    )
    assert status == failure(
        422,
        "Invalid",
        'Pod "mergelist" is invalid: spec.containers: Forbidden: pod updates may not add or '
        "remove containers",
        {
            "name": "mergelist",
            "kind": "Pod",
            "causes": [
                {
                    "reason": "FieldValueForbidden",
                    "message": "Forbidden: pod updates may not add or remove containers",
                    "field": "spec.containers",
                }
            ],
        },
    )


async def test_strategic_merge_patch_merges_containers_by_name(cluster: Target) -> None:
    """PodSpec.Containers carries patchMergeKey "name": the patch updates the named entry and
    keeps the others in place (apimachinery/pkg/util/strategicpatch)."""
    core = cluster.core()
    ns = cluster.namespace
    body = pod("smp", labels={"keep": "yes"})
    body["spec"]["containers"].append({"name": "sidecar", "image": "busybox:1.36"})
    await core.create_namespaced_pod(ns, body)
    reply = await call(
        core.patch_namespaced_pod,
        "smp",
        ns,
        {
            "metadata": {"labels": {"added": "yes"}},
            "spec": {"containers": [{"name": "sidecar", "image": "busybox:1.37"}]},
        },
    )
    assert reply.status == 200, reply.body
    assert reply.body["metadata"]["labels"] == {"keep": "yes", "added": "yes"}
    assert [(c["name"], c["image"]) for c in reply.body["spec"]["containers"]] == [
        ("main", "registry.k8s.io/pause:3.10"),
        ("sidecar", "busybox:1.37"),
    ]


async def test_strategic_merge_patch_merges_node_conditions_by_type(cluster: Target) -> None:
    """NodeStatus.Conditions carries patchMergeKey "type": patching Ready keeps MemoryPressure."""
    core = cluster.core()
    name = cluster.name("smp-node")
    await core.create_node(node(name))
    try:
        at = "2026-01-01T00:00:00Z"
        conditions = [
            {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"},
            {"type": "Ready", "status": "True", "reason": "KubeletReady"},
        ]
        for cond in conditions:
            cond.update(lastHeartbeatTime=at, lastTransitionTime=at, message="")
        first = await call(core.patch_node_status, name, {"status": {"conditions": conditions}})
        assert first.status == 200, first.body
        update = {
            "type": "Ready",
            "status": "False",
            "reason": "KubeletNotReady",
            "message": "container runtime is down",
            "lastHeartbeatTime": at,
            "lastTransitionTime": at,
        }
        reply = await call(core.patch_node_status, name, {"status": {"conditions": [update]}})
        assert reply.status == 200, reply.body
        by_type = {c["type"]: c for c in reply.body["status"]["conditions"]}
        assert set(by_type) == {"MemoryPressure", "Ready"}
        assert by_type["MemoryPressure"]["status"] == "False"
        assert by_type["Ready"]["status"] == "False"
        assert by_type["Ready"]["reason"] == "KubeletNotReady"
    finally:
        await core.delete_node(name)


async def test_json_patch_applies_its_operations_in_order(cluster: Target) -> None:
    """RFC 6902 (evanphx/json-patch): test, replace, add, remove applied in sequence."""
    core = cluster.core()
    ns = cluster.namespace
    await core.create_namespaced_pod(ns, pod("jsonpatch", labels={"a": "1", "gone": "x"}))
    ops = [
        {"op": "test", "path": "/metadata/labels/a", "value": "1"},
        {"op": "replace", "path": "/metadata/labels/a", "value": "2"},
        {"op": "add", "path": "/metadata/labels/b", "value": "3"},
        {"op": "remove", "path": "/metadata/labels/gone"},
    ]
    reply = await call(core.patch_namespaced_pod, "jsonpatch", ns, ops, _content_type=JSON_PATCH)
    assert reply.status == 200, reply.body
    assert reply.body["metadata"]["labels"] == {"a": "2", "b": "3"}


async def test_json_patch_with_a_failing_test_is_422(cluster: Target) -> None:
    """jsonPatcher.applyJSPatch returns errors.NewGenericServerResponse(422, "", GroupResource{},
    "", err, 0, false): reason Invalid, the generic message, empty details; nothing changes."""
    core = cluster.core()
    ns = cluster.namespace
    created = await call(core.create_namespaced_pod, ns, pod("jsontest", labels={"a": "1"}))
    ops = [
        {"op": "test", "path": "/metadata/labels/a", "value": "nope"},
        {"op": "replace", "path": "/metadata/labels/a", "value": "2"},
    ]
    status = await fails(
        core.patch_namespaced_pod("jsontest", ns, ops, _content_type=JSON_PATCH), 422
    )
    assert status == failure(
        422, "Invalid", "the server rejected our request due to an error in our request", {}
    )
    after = await call(core.read_namespaced_pod, "jsontest", ns)
    assert after.body["metadata"]["resourceVersion"] == created.body["metadata"]["resourceVersion"]


async def test_patch_with_an_unsupported_content_type_is_415(cluster: Target) -> None:
    """PatchResource checks the Content-Type against the route's patch types
    (endpoints/installer.go) and answers negotiation.NewUnsupportedMediaTypeError."""
    await cluster.core().create_namespaced_pod(cluster.namespace, pod("ctype"))
    reply = await http(
        cluster.api(),
        "PATCH",
        f"/api/v1/namespaces/{cluster.namespace}/pods/ctype",
        body=b'{"metadata":{"labels":{"a":"b"}}}',
        content_type="text/plain",
    )
    assert reply.status == 415
    assert reply.body == failure(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json, "
        "application/strategic-merge-patch+json, application/apply-patch+yaml",
    )


# --------------------------------------------------------------------------- nodes, namespaces


async def test_node_status_is_kept_on_create(cluster: Target) -> None:
    """nodeStrategy.PrepareForCreate keeps status (a kubelet registers its Node with
    capacity and conditions in one create); quantities come back canonical."""
    core = cluster.core()
    name = cluster.name("registered")
    body = node(name)
    body["status"] = {
        "capacity": {"cpu": "8", "memory": "32768Mi", "nvidia.com/gpu": "4", "pods": "110"},
        "allocatable": {"cpu": "7500m", "memory": "30Gi", "nvidia.com/gpu": "4", "pods": "110"},
    }
    try:
        reply = await call(core.create_node, body)
        assert reply.status == 201, reply.body
        assert reply.body["status"]["capacity"] == {
            "cpu": "8",
            "memory": "32Gi",
            "nvidia.com/gpu": "4",
            "pods": "110",
        }
        assert reply.body["status"]["allocatable"]["cpu"] == "7500m"
    finally:
        await call(core.delete_node, name)


async def test_namespace_lifecycle(target: Target) -> None:
    """namespaceStrategy.PrepareForCreate sets spec.finalizers [kubernetes] and phase Active;
    namespace REST.Delete marks it (deletionTimestamp, phase Terminating, no grace period) and
    answers the Namespace; while content remains (here a lease held by a finalizer) the
    NamespaceLifecycle admission plugin refuses new objects with 403 and a
    NamespaceTerminating cause; once the content is gone the namespace goes too."""
    core = target.core()
    coord = k8s.CoordinationV1Api(target.api())
    name = target.name("doomed")
    created = await call(
        core.create_namespace, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    assert created.status == 201, created.body
    assert created.body["spec"] == {"finalizers": ["kubernetes"]}
    assert created.body["status"] == {"phase": "Active"}
    held = lease("held")
    held["metadata"]["finalizers"] = ["gpusched.io/hold"]
    await coord.create_namespaced_lease(name, held)
    try:
        deleted = await call(core.delete_namespace, name)
        assert deleted.status == 200, deleted.body
        assert deleted.body["kind"] == "Namespace"
        assert "deletionTimestamp" in deleted.body["metadata"]
        assert deleted.body["status"]["phase"] == "Terminating"

        status = await fails(core.create_namespaced_pod(name, pod("late")), 403)
        assert status == failure(
            403,
            "Forbidden",
            f'pods "late" is forbidden: unable to create new content in namespace {name} '
            "because it is being terminated",
            {
                "name": "late",
                "kind": "pods",
                "causes": [
                    {
                        "reason": "NamespaceTerminating",
                        "message": f"namespace {name} is being terminated",
                        "field": "metadata.namespace",
                    }
                ],
            },
        )
    finally:
        await call(
            coord.patch_namespaced_lease,
            "held",
            name,
            {"metadata": {"finalizers": None}},
            _content_type=MERGE_PATCH,
        )
    await wait_gone(core.list_namespace, name=name)
    # Namespace REST.Delete sets only deletionTimestamp and the phase, never a grace period.
    assert "deletionGracePeriodSeconds" not in deleted.body["metadata"]
