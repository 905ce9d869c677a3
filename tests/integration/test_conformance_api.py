"""Conformance: leases, events (both API groups), authentication and discovery.

What a kube-apiserver v1.32 answers, checked through the kubernetes-asyncio client. Upstream
references are under kubernetes/kubernetes (``pkg/apis``, ``pkg/registry``) and
``staging/src/k8s.io/``.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from conformance_helpers import (
    MERGE_PATCH,
    STRATEGIC_MERGE_PATCH,
    EventStream,
    call,
    default_service_account,
    details,
    fails,
    failure,
    http,
    lease,
    names,
    rv,
    summary,
)
from conftest import Target
from kubernetes_asyncio import client as k8s

STANDARD_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
SUBRESOURCE_VERBS = ["get", "patch", "update"]


@pytest.fixture
async def cluster(target: Target) -> Target:
    await default_service_account(target)
    return target


# --------------------------------------------------------------------------- leases


async def test_two_updaters_from_the_same_version_one_wins(cluster: Target) -> None:
    """Optimistic concurrency: both PUTs carry the same resourceVersion; etcd's compare-and-swap
    lets exactly one through, the other is 409 Conflict (Store.Update)."""
    coord = k8s.CoordinationV1Api(cluster.api())
    ns = cluster.namespace
    await coord.create_namespaced_lease(ns, lease("leader", holder="nobody"))
    base = (await call(coord.read_namespaced_lease, "leader", ns)).body
    bodies = []
    for who in ("a", "b"):
        body = copy.deepcopy(base)
        body["spec"]["holderIdentity"] = who
        body["spec"]["leaseTransitions"] = 1
        bodies.append(body)
    replies = await asyncio.gather(
        *(call(coord.replace_namespaced_lease, "leader", ns, body) for body in bodies)
    )
    assert sorted(r.status for r in replies) == [200, 409], [r.body for r in replies]
    winner = next(r for r in replies if r.status == 200)
    loser = next(r for r in replies if r.status == 409)
    assert loser.body == failure(
        409,
        "Conflict",
        'Operation cannot be fulfilled on leases.coordination.k8s.io "leader": the object has '
        "been modified; please apply your changes to the latest version and try again",
        details("leader", "leases", "coordination.k8s.io"),
    )
    current = (await call(coord.read_namespaced_lease, "leader", ns)).body
    assert current["spec"]["holderIdentity"] == winner.body["spec"]["holderIdentity"]
    assert current["metadata"]["resourceVersion"] == winner.body["metadata"]["resourceVersion"]


async def test_lease_times_are_micro_times_in_utc(cluster: Target) -> None:
    """metav1.MicroTime parses RFC3339 with exactly six fractional digits and any offset, and
    always marshals in UTC with six digits ("2006-01-02T15:04:05.000000Z07:00")."""
    coord = k8s.CoordinationV1Api(cluster.api())
    body = lease(
        "micro",
        acquireTime="2026-01-02T05:04:05.123456+02:00",
        renewTime="2026-01-02T03:04:05.000000Z",
    )
    reply = await call(coord.create_namespaced_lease, cluster.namespace, body)
    assert reply.status == 201, reply.body
    assert reply.body["spec"]["acquireTime"] == "2026-01-02T03:04:05.123456Z"
    assert reply.body["spec"]["renewTime"] == "2026-01-02T03:04:05.000000Z"


async def test_lease_time_without_microseconds_is_400(cluster: Target) -> None:
    """MicroTime.UnmarshalJSON uses time.Parse(RFC3339Micro, ...), whose ".000000" needs six
    digits; the decode error becomes a 400 (endpoints/handlers/create.go transformDecodeError)."""
    coord = k8s.CoordinationV1Api(cluster.api())
    body = lease("coarse", renewTime="2026-01-02T03:04:05Z")
    status = await fails(coord.create_namespaced_lease(cluster.namespace, body), 400)
    assert status["reason"] == "BadRequest"
    assert status["message"].endswith(
        'parsing time "2026-01-02T03:04:05Z" as "2006-01-02T15:04:05.000000Z07:00": '
        'cannot parse "Z" as ".000000"'
    ), status["message"]


async def test_leases_by_label_selector(cluster: Target) -> None:
    """Leases list and watch by label like any resource: set-based selectors, and a write
    that takes a Lease out of the selection is DELETED to the filtered watch."""
    coord = k8s.CoordinationV1Api(cluster.api())
    ns = cluster.namespace
    for name, replica in (("l-a", "a"), ("l-b", "b"), ("l-c", "c")):
        body = lease(name)
        body["metadata"]["labels"] = {"gpusched.io/replica": replica}
        reply = await call(coord.create_namespaced_lease, ns, body)
        assert reply.status == 201, reply.body
    await call(coord.create_namespaced_lease, ns, lease("l-none"))
    for selector, expected in (
        ("gpusched.io/replica in (a,b)", ["l-a", "l-b"]),
        ("gpusched.io/replica!=a", ["l-b", "l-c", "l-none"]),
        ("!gpusched.io/replica", ["l-none"]),
        ("gpusched.io/replica", ["l-a", "l-b", "l-c"]),
    ):
        listed = await call(coord.list_namespaced_lease, ns, label_selector=selector)
        assert names(listed.body["items"]) == expected, selector
    start = await call(coord.list_namespaced_lease, ns)
    async with EventStream(
        coord.list_namespaced_lease,
        ns,
        label_selector="gpusched.io/replica in (a,b)",
        resource_version=start.body["metadata"]["resourceVersion"],
    ) as events:
        renewed = await call(
            coord.patch_namespaced_lease,
            "l-a",
            ns,
            {"spec": {"renewTime": "2026-01-01T00:00:01.000000Z"}},
        )
        moved = await call(
            coord.patch_namespaced_lease,
            "l-b",
            ns,
            {"metadata": {"labels": {"gpusched.io/replica": "c"}}},
        )
        got = await events.take(2)
    assert summary(got) == [("MODIFIED", "l-a"), ("DELETED", "l-b")]
    assert got[0]["object"] == renewed.body
    assert (
        got[1]["object"]["metadata"]["resourceVersion"] == moved.body["metadata"]["resourceVersion"]
    )


# --------------------------------------------------------------------------- events


def involved(namespace: str, name: str) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "namespace": namespace,
        "name": name,
        "uid": "11111111-2222-3333-4444-555555555555",
        "apiVersion": "v1",
    }


def core_event(namespace: str, name: str, about: str, **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name},
        "involvedObject": involved(namespace, about),
        "reason": "Scheduled",
        "message": f"Successfully assigned {namespace}/{about} to node-1",
        "type": "Normal",
        "source": {"component": "gpusched"},
        "firstTimestamp": "2026-01-01T00:00:00Z",
        "lastTimestamp": "2026-01-01T00:00:05Z",
        "count": 2,
        **extra,
    }


def v1_event(namespace: str, name: str, about: str) -> dict[str, Any]:
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": name},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "gpusched.io/scheduler",
        "reportingInstance": "gpusched-0",
        "action": "Binding",
        "reason": "Scheduled",
        "regarding": involved(namespace, about),
        "note": f"Successfully assigned {namespace}/{about} to node-1",
        "type": "Normal",
    }


def events_path(namespace: str, name: str = "") -> str:
    path = f"/apis/events.k8s.io/v1/namespaces/{namespace}/events"
    return f"{path}/{name}" if name else path


async def test_core_event_reads_as_events_k8s_io(cluster: Target) -> None:
    """pkg/apis/events/v1/conversion.go: note<-message, regarding<-involvedObject,
    deprecatedSource/FirstTimestamp/LastTimestamp/Count<-source/firstTimestamp/lastTimestamp/
    count, reportingController<-reportingComponent; eventTime has no omitempty (null)."""
    ns = cluster.namespace
    body = core_event(
        ns, "p1.1", "p1", reportingComponent="gpusched", reportingInstance="gpusched-0"
    )
    created = await call(cluster.core().create_namespaced_event, ns, body)
    assert created.status == 201, created.body
    reply = await http(cluster.api(), "GET", events_path(ns, "p1.1"))
    assert reply.status == 200, reply.body
    got = reply.body
    assert got["metadata"] == created.body["metadata"]
    assert {k: v for k, v in got.items() if k != "metadata"} == {
        "kind": "Event",
        "apiVersion": "events.k8s.io/v1",
        "eventTime": None,
        "reportingController": "gpusched",
        "reportingInstance": "gpusched-0",
        "reason": "Scheduled",
        "regarding": involved(ns, "p1"),
        "note": f"Successfully assigned {ns}/p1 to node-1",
        "type": "Normal",
        "deprecatedSource": {"component": "gpusched"},
        "deprecatedFirstTimestamp": "2026-01-01T00:00:00Z",
        "deprecatedLastTimestamp": "2026-01-01T00:00:05Z",
        "deprecatedCount": 2,
    }


async def test_core_event_always_carries_reporting_fields(cluster: Target) -> None:
    """core/v1 Event's reportingComponent and reportingInstance have no omitempty: an event
    created without them reads back with empty strings."""
    ns = cluster.namespace
    created = await call(cluster.core().create_namespaced_event, ns, core_event(ns, "p3.1", "p3"))
    assert created.status == 201, created.body
    assert created.body["reportingComponent"] == ""
    assert created.body["reportingInstance"] == ""


async def test_events_k8s_io_event_reads_as_core(cluster: Target) -> None:
    """The reverse conversion: message<-note, involvedObject<-regarding,
    reportingComponent<-reportingController; source {} and null first/lastTimestamp are
    always encoded by core/v1 (struct and metav1.Time fields)."""
    ns = cluster.namespace
    body = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": "p2.1"},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "gpusched.io/scheduler",
        "reportingInstance": "gpusched-0",
        "action": "Binding",
        "reason": "Scheduled",
        "regarding": involved(ns, "p2"),
        "note": "assigned to node-1",
        "type": "Normal",
    }
    created = await http(cluster.api(), "POST", events_path(ns), body=body)
    assert created.status == 201, created.body
    reply = await call(cluster.core().read_namespaced_event, "p2.1", ns)
    assert reply.status == 200, reply.body
    got = reply.body
    assert got["metadata"] == created.body["metadata"]
    assert {k: v for k, v in got.items() if k != "metadata"} == {
        "kind": "Event",
        "apiVersion": "v1",
        "involvedObject": involved(ns, "p2"),
        "reason": "Scheduled",
        "message": "assigned to node-1",
        "source": {},
        "firstTimestamp": None,
        "lastTimestamp": None,
        "type": "Normal",
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "action": "Binding",
        "reportingComponent": "gpusched.io/scheduler",
        "reportingInstance": "gpusched-0",
    }


async def test_event_field_selectors(cluster: Target) -> None:
    """core/v1 Event selects on involvedObject.*; events.k8s.io/v1 maps regarding.* to them
    (AddFieldLabelConversionsForEvent) and rejects the core names with 400."""
    ns = cluster.namespace
    core = cluster.core()
    for name, about in (("a.1", "pod-a"), ("b.1", "pod-b")):
        reply = await call(core.create_namespaced_event, ns, core_event(ns, name, about))
        assert reply.status == 201, reply.body

    listed = await call(core.list_namespaced_event, ns, field_selector="involvedObject.name=pod-a")
    assert [e["metadata"]["name"] for e in listed.body["items"]] == ["a.1"]
    new_api = await http(
        cluster.api(), "GET", events_path(ns), query={"fieldSelector": "regarding.name=pod-a"}
    )
    assert new_api.status == 200, new_api.body
    assert [e["metadata"]["name"] for e in new_api.body["items"]] == ["a.1"]
    assert new_api.body["kind"] == "EventList"
    assert new_api.body["apiVersion"] == "events.k8s.io/v1"

    wrong = await http(
        cluster.api(), "GET", events_path(ns), query={"fieldSelector": "involvedObject.name=pod-a"}
    )
    assert wrong.status == 400
    assert wrong.body == failure(
        400, "BadRequest", "field label not supported: involvedObject.name"
    )
    status = await fails(core.list_namespaced_event(ns, field_selector="regarding.name=pod-a"), 400)
    assert status == failure(400, "BadRequest", "field label not supported: regarding.name")


async def test_core_event_repeat_is_patched(cluster: Target) -> None:
    """client-go's recorder aggregates a repeat by PATCHing count and lastTimestamp on the
    existing Event (EventSinkImpl.Patch: a strategic merge patch); a merge patch works the
    same. Only the patched fields change; resourceVersion moves on."""
    ns = cluster.namespace
    created = await call(cluster.core().create_namespaced_event, ns, core_event(ns, "r.1", "r"))
    assert created.status == 201, created.body
    path = f"/api/v1/namespaces/{ns}/events/r.1"
    for count, content_type in ((3, STRATEGIC_MERGE_PATCH), (4, MERGE_PATCH)):
        patch = {"count": count, "lastTimestamp": f"2026-01-01T00:00:{count:02d}Z"}
        reply = await http(cluster.api(), "PATCH", path, body=patch, content_type=content_type)
        assert reply.status == 200, reply.body
        assert reply.body["count"] == count
        assert reply.body["lastTimestamp"] == f"2026-01-01T00:00:{count:02d}Z"
        assert reply.body["firstTimestamp"] == "2026-01-01T00:00:00Z"
        assert reply.body["message"] == created.body["message"]
        assert rv(reply.body) > rv(created.body)
    listed = await call(cluster.core().list_namespaced_event, ns)
    assert [(e["metadata"]["name"], e["count"]) for e in listed.body["items"]] == [("r.1", 4)]


async def test_events_k8s_io_series_is_patched(cluster: Target) -> None:
    """client-go's events.k8s.io recorder (tools/events) records a repeat by a merge patch of
    ``series`` on the existing Event; the core/v1 view shows the same series."""
    ns = cluster.namespace
    body = v1_event(ns, "s.1", "s")
    created = await http(cluster.api(), "POST", events_path(ns), body=body)
    assert created.status == 201, created.body
    patch = {"series": {"count": 2, "lastObservedTime": "2026-01-01T00:00:07.000000Z"}}
    reply = await http(
        cluster.api(), "PATCH", events_path(ns, "s.1"), body=patch, content_type=MERGE_PATCH
    )
    assert reply.status == 200, reply.body
    assert reply.body["series"] == patch["series"]
    assert reply.body["note"] == body["note"]
    core = await call(cluster.core().read_namespaced_event, "s.1", ns)
    assert core.body["series"] == patch["series"]


async def test_events_k8s_io_patch_of_an_immutable_field_is_422(cluster: Target) -> None:
    """ValidateEventUpdate (events.k8s.io/v1): all but series and metadata are immutable,
    reported at the internal (core) field path."""
    ns = cluster.namespace
    created = await http(cluster.api(), "POST", events_path(ns), body=v1_event(ns, "i.1", "i"))
    assert created.status == 201, created.body
    reply = await http(
        cluster.api(),
        "PATCH",
        events_path(ns, "i.1"),
        body={"note": "changed", "reportingInstance": "other"},
        content_type=MERGE_PATCH,
    )
    assert reply.status == 422, reply.body
    assert [c["field"] for c in reply.body["details"]["causes"]] == [
        "message",
        "reportingInstance",
    ]
    assert reply.body["details"]["causes"][0]["message"] == (
        'Invalid value: "changed": field is immutable'
    )


async def test_events_k8s_io_create_requires_the_new_fields(cluster: Target) -> None:
    """ValidateEventCreate for events.k8s.io/v1: eventTime, reportingController,
    reportingInstance, action and reason are required once eventTime is set; eventTime itself
    is required; the deprecated fields must be unset (reported at their internal names:
    deprecatedCount is count)."""
    ns = cluster.namespace
    no_time = v1_event(ns, "n.1", "n")
    del no_time["eventTime"]
    reply = await http(cluster.api(), "POST", events_path(ns), body=no_time)
    assert reply.status == 422, reply.body
    assert [(c["field"], c["reason"]) for c in reply.body["details"]["causes"]] == [
        ("eventTime", "FieldValueRequired")
    ]
    bare = v1_event(ns, "n.2", "n")
    for key in ("reportingController", "reportingInstance", "action", "reason"):
        del bare[key]
    bare["deprecatedCount"] = 3
    reply = await http(cluster.api(), "POST", events_path(ns), body=bare)
    assert reply.status == 422, reply.body
    assert [(c["field"], c["reason"]) for c in reply.body["details"]["causes"]] == [
        ("reportingController", "FieldValueRequired"),
        ("reportingController", "FieldValueInvalid"),
        ("reportingController", "FieldValueInvalid"),
        ("reportingInstance", "FieldValueRequired"),
        ("action", "FieldValueRequired"),
        ("reason", "FieldValueRequired"),
        ("count", "FieldValueInvalid"),
    ]


async def test_core_event_with_event_time_needs_reporting_fields(cluster: Target) -> None:
    """legacyValidateEvent, which core/v1 creates go through too: an Event with eventTime
    needs reportingComponent (named as the request's API version names it), reportingInstance
    and action; its involvedObject.namespace must match."""
    ns = cluster.namespace
    body = core_event(ns, "t.1", "t", eventTime="2026-01-01T00:00:00.000000Z")
    status = await fails(cluster.core().create_namespaced_event(ns, body), 422)
    assert [(c["field"], c["reason"]) for c in status["details"]["causes"]] == [
        ("reportingComponent", "FieldValueRequired"),
        ("reportingComponent", "FieldValueInvalid"),
        ("reportingComponent", "FieldValueInvalid"),
        ("reportingInstance", "FieldValueRequired"),
        ("action", "FieldValueRequired"),
    ]
    other = core_event("default", "t.2", "t")
    status = await fails(cluster.core().create_namespaced_event(ns, other), 422)
    assert status["message"] == (
        'Event "t.2" is invalid: involvedObject.namespace: Invalid value: "default": does not '
        "match event.namespace"
    )


# --------------------------------------------------------------------------- authentication


@pytest.mark.parametrize("path", ["/api/v1/namespaces", "/apis", "/version"])
async def test_a_wrong_token_is_401(target: Target, path: str) -> None:
    """A bearer token no authenticator accepts fails authentication on every path
    (endpoints/filters/authentication.go -> responsewriters.Unauthorized)."""
    configuration = copy.deepcopy(target.configuration)
    configuration.api_key = {"BearerToken": "not-the-token"}
    configuration.api_key_prefix = {"BearerToken": "Bearer"}
    configuration.refresh_api_key_hook = None
    configuration.cert_file = None
    configuration.key_file = None
    api = k8s.ApiClient(configuration)
    try:
        reply = await http(api, "GET", path)
        assert reply.status == 401
        assert reply.body == failure(401, "Unauthorized", "Unauthorized")
        if path == "/api/v1/namespaces":
            status = await fails(k8s.CoreV1Api(api).list_namespace(), 401)
            assert status["reason"] == "Unauthorized"
    finally:
        await api.close()


# --------------------------------------------------------------------------- discovery


async def test_discovery_roots(target: Target) -> None:
    """/api (APIVersions), /apis (APIGroupList), /apis/GROUP (APIGroup) and /version."""
    api = target.api()
    core = (await http(api, "GET", "/api")).body
    assert core["kind"] == "APIVersions"
    assert core["versions"] == ["v1"]
    assert core["serverAddressByClientCIDRs"][0]["clientCIDR"] == "0.0.0.0/0"

    groups = (await http(api, "GET", "/apis")).body
    assert groups["kind"] == "APIGroupList"
    assert groups["apiVersion"] == "v1"
    by_name = {g["name"]: g for g in groups["groups"]}
    assert "" not in by_name
    for group in ("coordination.k8s.io", "events.k8s.io", "apiextensions.k8s.io"):
        v1 = {"groupVersion": f"{group}/v1", "version": "v1"}
        assert by_name[group]["preferredVersion"] == v1
        assert v1 in by_name[group]["versions"]

    one = (await http(api, "GET", "/apis/coordination.k8s.io")).body
    assert one["kind"] == "APIGroup"
    assert one["apiVersion"] == "v1"
    assert one["name"] == "coordination.k8s.io"
    assert one["preferredVersion"] == {"groupVersion": "coordination.k8s.io/v1", "version": "v1"}

    version = (await http(api, "GET", "/version")).body
    assert {
        "major",
        "minor",
        "gitVersion",
        "gitCommit",
        "gitTreeState",
        "buildDate",
        "goVersion",
        "compiler",
        "platform",
    } <= set(version)
    assert version["major"] == "1"
    assert version["gitVersion"].startswith("v1.")


def resource(
    name: str, kind: str, namespaced: bool, verbs: list[str], **extra: Any
) -> dict[str, Any]:
    singular = "" if "/" in name else kind.lower()
    entry: dict[str, Any] = {
        "name": name,
        "singularName": singular,
        "namespaced": namespaced,
        "kind": kind,
        "verbs": verbs,
    }
    entry.update(extra)
    return entry


DISCOVERED = [
    (
        "/api/v1",
        resource("pods", "Pod", True, STANDARD_VERBS, shortNames=["po"], categories=["all"]),
    ),
    ("/api/v1", resource("pods/status", "Pod", True, SUBRESOURCE_VERBS)),
    ("/api/v1", resource("pods/binding", "Binding", True, ["create"])),
    ("/api/v1", resource("bindings", "Binding", True, ["create"])),
    ("/api/v1", resource("nodes", "Node", False, STANDARD_VERBS, shortNames=["no"])),
    ("/api/v1", resource("nodes/status", "Node", False, SUBRESOURCE_VERBS)),
    (
        "/api/v1",
        resource(
            "namespaces",
            "Namespace",
            False,
            ["create", "delete", "get", "list", "patch", "update", "watch"],
            shortNames=["ns"],
        ),
    ),
    ("/api/v1", resource("namespaces/status", "Namespace", False, SUBRESOURCE_VERBS)),
    ("/api/v1", resource("namespaces/finalize", "Namespace", False, ["update"])),
    ("/api/v1", resource("events", "Event", True, STANDARD_VERBS, shortNames=["ev"])),
    (
        "/apis/events.k8s.io/v1",
        resource("events", "Event", True, STANDARD_VERBS, shortNames=["ev"]),
    ),
    (
        "/api/v1",
        resource("resourcequotas", "ResourceQuota", True, STANDARD_VERBS, shortNames=["quota"]),
    ),
    ("/api/v1", resource("resourcequotas/status", "ResourceQuota", True, SUBRESOURCE_VERBS)),
    ("/apis/coordination.k8s.io/v1", resource("leases", "Lease", True, STANDARD_VERBS)),
    ("/apis/batch/v1", resource("jobs", "Job", True, STANDARD_VERBS, categories=["all"])),
    ("/apis/batch/v1", resource("jobs/status", "Job", True, SUBRESOURCE_VERBS)),
    (
        "/apis/apiextensions.k8s.io/v1",
        resource(
            "customresourcedefinitions",
            "CustomResourceDefinition",
            False,
            STANDARD_VERBS,
            shortNames=["crd", "crds"],
            categories=["api-extensions"],
        ),
    ),
    (
        "/apis/apiextensions.k8s.io/v1",
        resource(
            "customresourcedefinitions/status", "CustomResourceDefinition", False, SUBRESOURCE_VERBS
        ),
    ),
]


@pytest.mark.parametrize(("path", "expected"), DISCOVERED, ids=[e["name"] for _, e in DISCOVERED])
async def test_discovery_resource_lists(
    target: Target, path: str, expected: dict[str, Any]
) -> None:
    """APIResourceList entries as endpoints/installer.go builds them: verbs sorted, singular
    name for resources and "" for subresources, storageVersionHash on resources only."""
    reply = await http(target.api(), "GET", path)
    assert reply.status == 200, reply.body
    assert reply.body["kind"] == "APIResourceList"
    assert reply.body["groupVersion"] == path.removeprefix("/api/").removeprefix("/apis/")
    entries = {e["name"]: e for e in reply.body["resources"]}
    got = dict(entries[expected["name"]])
    version_hash = got.pop("storageVersionHash", None)
    assert got == expected
    if "/" in expected["name"] or expected["name"] == "bindings":
        assert version_hash is None
    else:
        assert isinstance(version_hash, str)
        assert version_hash


@pytest.mark.parametrize(
    "path",
    [
        "/apis/nope.gpusched.test/v1",
        "/api/v1/namespaces/default/widgets",
        "/apis/coordination.k8s.io/v9",
    ],
)
async def test_unknown_paths_are_404(target: Target, path: str) -> None:
    """Paths no handler serves fall through to the NotFound handler's generic Status."""
    reply = await http(target.api(), "GET", path)
    assert reply.status == 404
    assert reply.body == failure(
        404, "NotFound", "the server could not find the requested resource", {}
    )


@pytest.mark.parametrize(
    ("path", "kind"),
    [("/version/", None), ("/api/", "APIVersions"), ("/apis/", "APIGroupList")],
)
async def test_roots_answer_with_a_trailing_slash(target: Target, path: str, kind: str) -> None:
    """go-restful trims a trailing slash before matching (routes/version.go and the legacy
    /api web service are GET "/" routes), and /apis/ is registered beside /apis
    (NonGoRestfulMux.UnlistedHandle): each answers as without the slash."""
    api = target.api()
    with_slash = await http(api, "GET", path)
    without = await http(api, "GET", path.rstrip("/"))
    assert with_slash.status == 200, with_slash.body
    assert with_slash.body == without.body
    if kind is not None:
        assert with_slash.body["kind"] == kind


@pytest.mark.parametrize("path", ["/healthz/", "/livez/", "/readyz/", "/openapi/v2/"])
async def test_exact_paths_are_404_with_a_trailing_slash(target: Target, path: str) -> None:
    """The health handlers serve /healthz and /healthz/<check> only (healthz.go
    InstallPathHandler), and /openapi/v2 is an exact path: with a slash they are unknown."""
    reply = await http(target.api(), "GET", path)
    assert reply.status == 404


async def test_openapi_v3_group_version_it_does_not_know_is_empty(target: Target) -> None:
    """kube-openapi's HandleGroupVersion (every path under /openapi/v3/) returns without
    writing when the group-version is unknown, so the answer is an empty 200; the bare
    /openapi/v3/ names the empty group-version."""
    api = target.api()
    index = await http(api, "GET", "/openapi/v3")
    assert index.status == 200
    assert "api/v1" in index.body["paths"]
    for path in ("/openapi/v3/", "/openapi/v3/apis/nope.gpusched.test/v1", "/openapi/v3/api/v1/"):
        reply = await http(api, "GET", path)
        assert (reply.status, reply.body) == (200, None), path
    core = await http(api, "GET", "/openapi/v3/api/v1")
    assert core.status == 200
    assert "paths" in core.body
