"""Conformance: CustomResourceDefinitions and their custom resources.

A CRD is created through ApiextensionsV1Api, awaited until Established by watching it, and
its resources are driven through CustomObjectsApi, as kube-apiserver v1.32's
apiextensions-apiserver serves them (``staging/src/k8s.io/apiextensions-apiserver``:
``pkg/apiserver/customresource_handler.go``, ``pkg/registry/customresource``,
``pkg/apiserver/schema``, ``pkg/controller``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from conformance_helpers import (
    MERGE_PATCH,
    STRATEGIC_MERGE_PATCH,
    UUID,
    EventStream,
    call,
    details,
    eventually,
    fails,
    failure,
    http,
    rv,
    summary,
    wait_for,
    wait_gone,
)
from conftest import Target
from kubernetes_asyncio import client as k8s

CLEANUP_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"
CR_VERBS = ["delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"]

WIDGET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "required": ["size"],
            "properties": {
                "size": {"type": "integer", "minimum": 1},
                "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
        },
        "status": {
            "type": "object",
            "properties": {
                "phase": {"type": "string"},
                "observedGeneration": {"type": "integer"},
            },
        },
    },
}


def crd_manifest(
    group: str, plural: str, kind: str, *, namespaced: bool, status: bool
) -> dict[str, Any]:
    version: dict[str, Any] = {
        "name": "v1",
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": WIDGET_SCHEMA},
    }
    if status:
        version["subresources"] = {"status": {}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced" if namespaced else "Cluster",
            "names": {
                "plural": plural,
                "singular": kind.lower(),
                "kind": kind,
                "listKind": f"{kind}List",
                "shortNames": [kind.lower()[:3]],
            },
            "versions": [version],
        },
    }


def established(crd: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Established" and c.get("status") == "True"
        for c in (crd.get("status") or {}).get("conditions") or ()
    )


@dataclass
class CRD:
    """A live CRD and the client calls for its resources."""

    target: Target
    group: str
    plural: str
    kind: str
    namespaced: bool
    custom: k8s.CustomObjectsApi
    ext: k8s.ApiextensionsV1Api

    version = "v1"

    @property
    def name(self) -> str:
        return f"{self.plural}.{self.group}"

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    def obj(self, name: str, spec: dict[str, Any] | None = None, **top: Any) -> dict[str, Any]:
        body: dict[str, Any] = {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "metadata": {"name": name},
            "spec": {"size": 1} if spec is None else spec,
        }
        body.update(top)
        return body

    def _scope(self) -> tuple[Any, ...]:
        if self.namespaced:
            return (self.group, self.version, self.target.namespace, self.plural)
        return (self.group, self.version, self.plural)

    def _method(self, verb: str, suffix: str = "") -> Any:
        scope = "namespaced" if self.namespaced else "cluster"
        return getattr(self.custom, f"{verb}_{scope}_custom_object{suffix}")

    async def create(self, body: dict[str, Any], **query: Any) -> Any:
        return await call(self._method("create"), *self._scope(), body, **query)

    async def get(self, name: str) -> Any:
        return await call(self._method("get"), *self._scope(), name)

    async def list(self, **query: Any) -> Any:
        return await call(self._method("list"), *self._scope(), **query)

    async def replace(self, name: str, body: dict[str, Any]) -> Any:
        return await call(self._method("replace"), *self._scope(), name, body)

    async def patch(self, name: str, body: Any, content_type: str = MERGE_PATCH) -> Any:
        return await call(
            self._method("patch"), *self._scope(), name, body, _content_type=content_type
        )

    async def patch_status(self, name: str, body: Any) -> Any:
        return await call(
            self._method("patch", "_status"), *self._scope(), name, body, _content_type=MERGE_PATCH
        )

    async def get_status(self, name: str) -> Any:
        return await call(self._method("get", "_status"), *self._scope(), name)

    async def delete(self, name: str) -> Any:
        return await call(self._method("delete"), *self._scope(), name)

    def events(self, **query: Any) -> EventStream:
        return EventStream(self._method("list"), *self._scope(), **query)

    def path(self, name: str = "") -> str:
        base = f"/apis/{self.group}/{self.version}"
        if self.namespaced:
            base += f"/namespaces/{self.target.namespace}"
        base += f"/{self.plural}"
        return f"{base}/{name}" if name else base


async def install_crd(
    target: Target, plural: str, kind: str, *, namespaced: bool = True, status: bool = True
) -> CRD:
    """Create the CRD, watch it until Established, and wait until its resource answers."""
    api = target.api()
    crd = CRD(
        target=target,
        group=f"{target.prefix}.gpusched.test",
        plural=plural,
        kind=kind,
        namespaced=namespaced,
        custom=k8s.CustomObjectsApi(api),
        ext=k8s.ApiextensionsV1Api(api),
    )
    manifest = crd_manifest(crd.group, plural, kind, namespaced=namespaced, status=status)
    created = await call(crd.ext.create_custom_resource_definition, manifest)
    assert created.status == 201, created.body
    await wait_for(crd.ext.list_custom_resource_definition, name=crd.name, until=established)
    # A real server's CR handler follows its CRD informer; allow it to catch up (bounded).

    async def served() -> bool:
        return bool((await crd.list()).status != 404)

    await eventually(served)
    return crd


async def remove_crd(crd: CRD) -> None:
    reply = await call(crd.ext.delete_custom_resource_definition, crd.name)
    assert reply.status in (200, 404), reply.body


@pytest.fixture
async def widgets(target: Target) -> AsyncIterator[CRD]:
    crd = await install_crd(target, "widgets", "Widget")
    try:
        yield crd
    finally:
        await remove_crd(crd)


# --------------------------------------------------------------------------- the CRD itself


async def test_a_new_crd_is_established_with_its_names_accepted(widgets: CRD) -> None:
    """The naming controller accepts the names (NamesAccepted, NoConflicts) and the
    establishing controller sets Established (InitialNamesAccepted); storedVersions lists
    the storage version."""
    reply = await call(widgets.ext.read_custom_resource_definition, widgets.name)
    crd = reply.body
    assert crd["status"]["acceptedNames"] == crd["spec"]["names"]
    assert crd["status"]["storedVersions"] == ["v1"]
    conditions = {c["type"]: c for c in crd["status"]["conditions"]}
    assert conditions["NamesAccepted"]["status"] == "True"
    assert conditions["NamesAccepted"]["reason"] == "NoConflicts"
    assert conditions["Established"]["status"] == "True"
    assert conditions["Established"]["reason"] == "InitialNamesAccepted"
    assert UUID.match(crd["metadata"]["uid"])


async def test_discovery_lists_the_new_group(widgets: CRD) -> None:
    """The CRD discovery controller (pkg/apiserver/customresource_discovery_controller.go)
    publishes the group, its version and the resources; CR verbs come in its fixed order."""
    api = widgets.target.api()
    gv = {"groupVersion": widgets.api_version, "version": "v1"}
    found: list[dict[str, Any]] = []

    async def published() -> bool:
        groups = (await http(api, "GET", "/apis")).body
        found[:] = [g for g in groups["groups"] if g["name"] == widgets.group]
        return bool(found)

    await eventually(published)
    assert found == [{"name": widgets.group, "versions": [gv], "preferredVersion": gv}]

    group = (await http(api, "GET", f"/apis/{widgets.group}")).body
    assert group == {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": widgets.group,
        "versions": [gv],
        "preferredVersion": gv,
    }

    listing = (await http(api, "GET", f"/apis/{widgets.api_version}")).body
    assert listing["kind"] == "APIResourceList"
    assert listing["groupVersion"] == widgets.api_version
    entries = {e["name"]: e for e in listing["resources"]}
    assert set(entries) == {"widgets", "widgets/status"}
    main = dict(entries["widgets"])
    assert isinstance(main.pop("storageVersionHash"), str)
    assert main == {
        "name": "widgets",
        "singularName": "widget",
        "namespaced": True,
        "kind": "Widget",
        "verbs": CR_VERBS,
        "shortNames": ["wid"],
    }
    assert entries["widgets/status"] == {
        "name": "widgets/status",
        "singularName": "",
        "namespaced": True,
        "kind": "Widget",
        "verbs": ["get", "patch", "update"],
    }


async def test_deleting_a_crd_waits_for_its_resources_to_be_cleaned_up(widgets: CRD) -> None:
    """customresourcedefinition REST.Delete: the first DELETE adds the
    customresourcecleanup finalizer, sets deletionTimestamp and Terminating
    (InstanceDeletionPending) and answers the CRD; the finalizing controller removes the
    custom resources, then the finalizer, and the CRD goes."""
    assert (await widgets.create(widgets.obj("doomed"))).status == 201
    reply = await call(widgets.ext.delete_custom_resource_definition, widgets.name)
    assert reply.status == 200, reply.body
    crd = reply.body
    assert crd["kind"] == "CustomResourceDefinition"
    assert "deletionTimestamp" in crd["metadata"]
    assert CLEANUP_FINALIZER in crd["metadata"]["finalizers"]
    terminating = [c for c in crd["status"]["conditions"] if c["type"] == "Terminating"]
    assert [(c["status"], c["reason"]) for c in terminating] == [
        ("True", "InstanceDeletionPending")
    ]
    await wait_gone(widgets.ext.list_custom_resource_definition, name=widgets.name)
    status = await fails(widgets.ext.read_custom_resource_definition(widgets.name), 404)
    assert status["reason"] == "NotFound"


# --------------------------------------------------------------------------- custom resources


async def test_create_get_and_list_a_custom_resource(widgets: CRD) -> None:
    """customResourceStrategy.PrepareForCreate sets generation 1; unstructured lists keep
    apiVersion/kind on every item and are of kind <Kind>List."""
    created = await widgets.create(widgets.obj("w1", {"size": 3, "tags": ["a"]}))
    assert created.status == 201, created.body
    obj = created.body
    assert obj["apiVersion"] == widgets.api_version
    assert obj["kind"] == "Widget"
    meta = obj["metadata"]
    assert meta["generation"] == 1
    assert UUID.match(meta["uid"])
    assert meta["namespace"] == widgets.target.namespace
    assert obj["spec"] == {"size": 3, "tags": ["a"], "color": "red"}

    got = await widgets.get("w1")
    assert got.status == 200
    assert got.body == obj

    listed = await widgets.list()
    assert listed.body["kind"] == "WidgetList"
    assert listed.body["apiVersion"] == widgets.api_version
    assert listed.body["items"] == [obj]
    assert int(listed.body["metadata"]["resourceVersion"]) >= rv(obj)


async def test_create_drops_status_when_there_is_a_status_subresource(widgets: CRD) -> None:
    """customResourceStrategy.PrepareForCreate: with a status subresource, create cannot set
    status."""
    reply = await widgets.create(widgets.obj("no-status", status={"phase": "Faked"}))
    assert reply.status == 201, reply.body
    assert "status" not in reply.body


async def test_custom_resource_errors_name_the_resource(widgets: CRD) -> None:
    """NotFound / AlreadyExists for a custom resource use "<plural>.<group>"."""
    resource = f"widgets.{widgets.group}"
    missing = await widgets.get("nope")
    assert missing.status == 404
    assert missing.body == failure(
        404, "NotFound", f'{resource} "nope" not found', details("nope", "widgets", widgets.group)
    )
    assert (await widgets.create(widgets.obj("once"))).status == 201
    again = await widgets.create(widgets.obj("once"))
    assert again.status == 409
    assert again.body == failure(
        409,
        "AlreadyExists",
        f'{resource} "once" already exists',
        details("once", "widgets", widgets.group),
    )


async def test_unknown_fields_are_pruned_with_a_warning(widgets: CRD) -> None:
    """Structural pruning (pkg/apiserver/schema/pruning) drops fields the schema does not
    declare; with the default fieldValidation=Warn each one is reported in a Warning header
    (299, agent "-", the quoted text)."""
    body = widgets.obj("pruned", {"size": 2, "junk": True}, extra={"x": 1})
    reply = await widgets.create(body)
    assert reply.status == 201, reply.body
    assert "extra" not in reply.body
    assert reply.body["spec"] == {"size": 2, "color": "red"}
    assert set(reply.headers.getall("Warning", [])) == {
        '299 - "unknown field \\"extra\\""',
        '299 - "unknown field \\"spec.junk\\""',
    }
    stored = await widgets.get("pruned")
    assert stored.body == reply.body


async def test_unknown_fields_with_strict_validation_are_400(widgets: CRD) -> None:
    """fieldValidation=Strict turns the pruned field into a strict decoding error, which the
    create handler reports through transformDecodeError as a 400."""
    body = widgets.obj("strict", {"size": 2, "junk": True})
    reply = await widgets.create(body, field_validation="Strict")
    assert reply.status == 400
    assert reply.body == failure(
        400,
        "BadRequest",
        'Widget in version "v1" cannot be handled as a Widget: strict decoding error: '
        'unknown field "spec.junk"',
    )
    assert (await widgets.get("strict")).status == 404


@pytest.mark.parametrize(
    ("spec", "reason", "field", "message"),
    [
        (
            {"size": 0},
            "FieldValueInvalid",
            "spec.size",
            "Invalid value: 0: spec.size in body should be greater than or equal to 1",
        ),
        ({}, "FieldValueRequired", "spec.size", "Required value"),
        (
            {"size": 1, "color": "purple"},
            "FieldValueNotSupported",
            "spec.color",
            'Unsupported value: "purple": supported values: "red", "blue"',
        ),
        (
            {"size": "big"},
            "FieldValueTypeInvalid",
            "spec.size",
            'Invalid value: "string": spec.size in body must be of type integer: "string"',
        ),
    ],
    ids=["minimum", "required", "enum", "type"],
)
async def test_schema_validation_errors_are_422(
    widgets: CRD, spec: dict[str, Any], reason: str, field: str, message: str
) -> None:
    """kube-openapi results converted by apiextensions validation
    (kubeOpenAPIResultToFieldErrors) into errors.NewInvalid(GroupKind{group, Kind}, ...)."""
    reply = await widgets.create(widgets.obj("bad", spec))
    assert reply.status == 422, reply.body
    assert reply.body == failure(
        422,
        "Invalid",
        f'Widget.{widgets.group} "bad" is invalid: {field}: {message}',
        {
            "name": "bad",
            "group": widgets.group,
            "kind": "Widget",
            "causes": [{"reason": reason, "message": message, "field": field}],
        },
    )


async def test_generation_moves_with_the_spec_only(widgets: CRD) -> None:
    """customResourceStrategy.PrepareForUpdate: with a status subresource the main endpoint
    keeps the old status, and generation increments only when something outside metadata
    changed; status writes through /status never move it."""
    created = await widgets.create(widgets.obj("gen", {"size": 1}))
    assert created.body["metadata"]["generation"] == 1

    spec_change = await widgets.patch("gen", {"spec": {"size": 2}})
    assert spec_change.body["metadata"]["generation"] == 2

    labels = await widgets.patch("gen", {"metadata": {"labels": {"l": "1"}}})
    assert labels.body["metadata"]["generation"] == 2
    assert rv(labels.body) > rv(spec_change.body)

    status = await widgets.patch_status(
        "gen", {"status": {"phase": "Ready", "observedGeneration": 2}}
    )
    assert status.status == 200, status.body
    assert status.body["metadata"]["generation"] == 2
    assert status.body["status"] == {"phase": "Ready", "observedGeneration": 2}

    ignored = await widgets.patch("gen", {"status": {"phase": "Hacked"}})
    assert ignored.status == 200, ignored.body
    assert ignored.body["status"] == {"phase": "Ready", "observedGeneration": 2}
    assert ignored.body["metadata"]["generation"] == 2
    assert ignored.body["metadata"]["resourceVersion"] == status.body["metadata"]["resourceVersion"]


async def test_the_status_subresource_writes_only_status(widgets: CRD) -> None:
    """customResourceStatusStrategy.PrepareForUpdate copies the old object and keeps only the
    new status: spec and labels sent to /status are dropped. GET /status is the whole object."""
    await widgets.create(widgets.obj("st", {"size": 1}))
    reply = await widgets.patch_status(
        "st",
        {"metadata": {"labels": {"sneaky": "yes"}}, "spec": {"size": 9}, "status": {"phase": "Up"}},
    )
    assert reply.status == 200, reply.body
    assert reply.body["status"] == {"phase": "Up"}
    assert reply.body["spec"]["size"] == 1
    assert "labels" not in reply.body["metadata"]
    whole = await widgets.get_status("st")
    assert whole.status == 200
    assert whole.body == reply.body


async def test_generation_without_a_status_subresource_counts_status_too(
    target: Target,
) -> None:
    """Without a status subresource the whole object but metadata is "spec" for
    customResourceStrategy: a status change moves generation; cluster-scoped resources live at
    /apis/GROUP/VERSION/PLURAL; /status is not served (404)."""
    gadgets = await install_crd(target, "gadgets", "Gadget", namespaced=False, status=False)
    name = target.name("g")
    try:
        created = await gadgets.create(gadgets.obj(name, {"size": 1}, status={"phase": "New"}))
        assert created.status == 201, created.body
        assert "namespace" not in created.body["metadata"]
        assert created.body["status"] == {"phase": "New"}
        moved = await gadgets.patch(name, {"status": {"phase": "Up"}})
        assert moved.body["status"] == {"phase": "Up"}
        assert moved.body["metadata"]["generation"] == 2
        labels = await gadgets.patch(name, {"metadata": {"labels": {"l": "1"}}})
        assert labels.body["metadata"]["generation"] == 2
        no_status = await http(target.api(), "GET", gadgets.path(name) + "/status")
        assert no_status.status == 404
        deleted = await gadgets.delete(name)
        assert deleted.status == 200, deleted.body
    finally:
        await remove_crd(gadgets)


async def test_update_of_a_custom_resource_needs_a_resource_version(widgets: CRD) -> None:
    """customResourceStrategy.AllowUnconditionalUpdate is false: Store.Update answers
    field.Invalid(metadata.resourceVersion, uint64(0)) rendered as 0x0, kind = the resource."""
    await widgets.create(widgets.obj("rv"))
    reply = await widgets.replace("rv", widgets.obj("rv", {"size": 5}))
    assert reply.status == 422
    assert reply.body == failure(
        422,
        "Invalid",
        f'widgets.{widgets.group} "rv" is invalid: metadata.resourceVersion: Invalid value: '
        "0x0: must be specified for an update",
        {
            "name": "rv",
            "group": widgets.group,
            "kind": "widgets",
            "causes": [
                {
                    "reason": "FieldValueInvalid",
                    "message": "Invalid value: 0x0: must be specified for an update",
                    "field": "metadata.resourceVersion",
                }
            ],
        },
    )


async def test_strategic_merge_patch_on_a_custom_resource_is_415(widgets: CRD) -> None:
    """crdHandler offers only JSON patch, merge patch and apply to custom resources."""
    await widgets.create(widgets.obj("smp"))
    reply = await widgets.patch("smp", {"spec": {"size": 2}}, content_type=STRATEGIC_MERGE_PATCH)
    assert reply.status == 415
    assert reply.body == failure(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
    )


async def test_deleting_a_custom_resource_answers_a_status_of_success(widgets: CRD) -> None:
    """The custom resource store does not return deleted objects: Store.finalizeDelete."""
    created = await widgets.create(widgets.obj("bye"))
    reply = await widgets.delete("bye")
    assert reply.status == 200, reply.body
    expected = details("bye", "widgets", widgets.group)
    expected["uid"] = created.body["metadata"]["uid"]
    assert reply.body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": expected,
    }
    assert (await widgets.get("bye")).status == 404


async def test_a_finalizer_holds_a_custom_resource_and_bumps_its_generation(
    widgets: CRD,
) -> None:
    """markAsDeleting (generic registry store.go) for a kind without graceful deletion: sets
    deletionTimestamp, deletionGracePeriodSeconds=0 and bumps generation once."""
    body = widgets.obj("fin")
    body["metadata"]["finalizers"] = ["gpusched.io/hold"]
    await widgets.create(body)
    reply = await widgets.delete("fin")
    assert reply.status == 200, reply.body
    meta = reply.body["metadata"]
    assert reply.body["kind"] == "Widget"
    assert meta["generation"] == 2
    assert meta["deletionGracePeriodSeconds"] == 0
    assert "deletionTimestamp" in meta
    released = await widgets.patch("fin", {"metadata": {"finalizers": None}})
    assert released.status == 200, released.body
    assert (await widgets.get("fin")).status == 404


async def test_watching_custom_resources(widgets: CRD) -> None:
    """Watch from a resourceVersion: ADDED, MODIFIED, DELETED in order; the DELETED object is
    the last state at the deletion's revision."""
    first = await widgets.create(widgets.obj("watched-0"))
    created = await widgets.create(widgets.obj("watched"))
    patched = await widgets.patch("watched", {"spec": {"tags": ["x"]}})
    await widgets.delete("watched")
    async with widgets.events(resource_version=str(rv(first.body))) as events:
        got = await events.take(3)
    assert summary(got) == [("ADDED", "watched"), ("MODIFIED", "watched"), ("DELETED", "watched")]
    assert got[0]["object"] == created.body
    assert got[1]["object"] == patched.body
    assert got[2]["object"]["spec"] == patched.body["spec"]
    assert rv(got[2]["object"]) > rv(patched.body)


async def test_custom_resource_selectors(widgets: CRD) -> None:
    """Label selectors and the metadata.name / metadata.namespace field selectors every
    custom resource supports."""
    for name, labels in (("sel-a", {"app": "a"}), ("sel-b", {"app": "b"})):
        body = widgets.obj(name)
        body["metadata"]["labels"] = labels
        assert (await widgets.create(body)).status == 201
    by_label = await widgets.list(label_selector="app=b")
    assert [i["metadata"]["name"] for i in by_label.body["items"]] == ["sel-b"]
    by_name = await widgets.list(field_selector="metadata.name=sel-a")
    assert [i["metadata"]["name"] for i in by_name.body["items"]] == ["sel-a"]
    by_ns = await widgets.list(field_selector=f"metadata.namespace={widgets.target.namespace}")
    assert [i["metadata"]["name"] for i in by_ns.body["items"]] == ["sel-a", "sel-b"]
