"""Conformance: list and watch -- selectors, paging, resource versions, bookmarks, 410 Gone.

As kube-apiserver v1.32 serves them from etcd3 and the watch cache
(``staging/src/k8s.io/apiserver/pkg/storage/{etcd3,cacher}``). Tests that need the server to
forget history quickly build their own simulated cluster with a tiny event window and are
marked ``simonly``; a real cluster's history cannot be expired on demand.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from conformance_helpers import (
    EventStream,
    call,
    default_service_account,
    fails,
    failure,
    lease,
    names,
    pod,
    rv,
    summary,
)
from conftest import Target
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import watch
from kubernetes_asyncio.client.exceptions import ApiException

from gpusched.sim import SimCluster

INCONSISTENT_CONTINUE = (
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter, or use the continue token in this "
    "response to retrieve the remainder of the results. Continuing with the provided token "
    "results in an inconsistent list - objects that were created, modified, or deleted between "
    "the time the first chunk was returned and now may show up in the list."
)


@pytest.fixture
async def cluster(target: Target) -> Target:
    await default_service_account(target)
    return target


async def make_pods(target: Target, specs: dict[str, dict[str, str]]) -> dict[str, Any]:
    """Create pods ``{name: labels}``; returns the last create's answer."""
    core = target.core()
    last: Any = None
    for name, labels in specs.items():
        last = await call(core.create_namespaced_pod, target.namespace, pod(name, labels=labels))
        assert last.status == 201, last.body
    return dict(last.body)


async def list_names(target: Target, **query: Any) -> list[str]:
    reply = await call(target.core().list_namespaced_pod, target.namespace, **query)
    assert reply.status == 200, reply.body
    return names(reply.body["items"])


# --------------------------------------------------------------------------- selectors

LABELLED = {
    "p-a": {"app": "a", "tier": "gpu"},
    "p-b": {"app": "b"},
    "p-c": {"app": "c", "tier": "cpu"},
    "p-d": {},
}


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=a", ["p-a"]),
        ("app==b", ["p-b"]),
        ("app!=a", ["p-b", "p-c", "p-d"]),
        ("app in (a,b)", ["p-a", "p-b"]),
        ("app notin (a,b)", ["p-c", "p-d"]),
        ("tier", ["p-a", "p-c"]),
        ("!tier", ["p-b", "p-d"]),
        ("app=a,tier=gpu", ["p-a"]),
        ("app in (a,c),tier!=cpu", ["p-a"]),
    ],
)
async def test_label_selectors(cluster: Target, selector: str, expected: list[str]) -> None:
    """apimachinery/pkg/labels: =, ==, !=, in, notin, exists, !exists; != and notin also match
    objects without the label. Items come in key order."""
    await make_pods(cluster, LABELLED)
    assert await list_names(cluster, label_selector=selector) == expected


async def test_an_unparsable_label_selector_is_400(cluster: Target) -> None:
    status = await fails(
        cluster.core().list_namespaced_pod(cluster.namespace, label_selector="app in a"), 400
    )
    assert status["reason"] == "BadRequest"


@pytest.fixture
async def placed(cluster: Target) -> Target:
    """p-a bound to n1 and Running, p-b bound to n2, p-c unbound with another scheduler."""
    core = cluster.core()
    ns = cluster.namespace
    await make_pods(cluster, {"p-a": {}, "p-b": {}})
    other = pod("p-c")
    other["spec"]["schedulerName"] = "other-scheduler"
    await core.create_namespaced_pod(ns, other)
    for name, node_name in (("p-a", "n1"), ("p-b", "n2")):
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name},
            "target": {"kind": "Node", "name": cluster.name(node_name)},
        }
        reply = await call(core.create_namespaced_pod_binding, name, ns, body)
        assert reply.status == 201, reply.body
    running = await call(
        core.patch_namespaced_pod_status, "p-a", ns, {"status": {"phase": "Running"}}
    )
    assert running.status == 200, running.body
    return cluster


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("spec.nodeName={n1}", ["p-a"]),
        ("spec.nodeName!=", ["p-a", "p-b"]),
        ("spec.nodeName=", ["p-c"]),
        ("spec.host={n2}", ["p-b"]),
        ("spec.schedulerName=other-scheduler", ["p-c"]),
        ("spec.schedulerName!=other-scheduler", ["p-a", "p-b"]),
        ("status.phase=Running", ["p-a"]),
        ("status.phase!=Running", ["p-b", "p-c"]),
        ("metadata.name=p-b", ["p-b"]),
        ("metadata.namespace={ns}", ["p-a", "p-b", "p-c"]),
        ("metadata.namespace=elsewhere", []),
        ("spec.nodeName={n1},status.phase=Running", ["p-a"]),
    ],
)
async def test_pod_field_selectors(placed: Target, selector: str, expected: list[str]) -> None:
    """The Pod field-label conversion (pkg/apis/core/v1/conversion.go) and pod.GetAttrs
    (pkg/registry/core/pod/strategy.go); spec.host is the legacy alias of spec.nodeName."""
    query = selector.format(n1=placed.name("n1"), n2=placed.name("n2"), ns=placed.namespace)
    assert await list_names(placed, field_selector=query) == expected


async def test_an_unsupported_pod_field_is_400(cluster: Target) -> None:
    """ListResource wraps the conversion error in errors.NewBadRequest."""
    status = await fails(
        cluster.core().list_namespaced_pod(cluster.namespace, field_selector="spec.foo=bar"), 400
    )
    assert status == failure(400, "BadRequest", "field label not supported: spec.foo")


async def test_an_unsupported_lease_field_is_400(cluster: Target) -> None:
    """Kinds without their own conversion use runtime.DefaultMetaV1FieldSelectorConversion."""
    coord = k8s.CoordinationV1Api(cluster.api())
    status = await fails(
        coord.list_namespaced_lease(cluster.namespace, field_selector="spec.holderIdentity=x"), 400
    )
    assert status == failure(
        400,
        "BadRequest",
        '"spec.holderIdentity" is not a known field selector: only "metadata.name", '
        '"metadata.namespace"',
    )


# --------------------------------------------------------------------------- paging


async def test_paging_with_limit_and_continue_is_a_consistent_snapshot(cluster: Target) -> None:
    """etcd3 store.GetList: each page is read at the first page's revision (the token carries
    it), so writes between pages do not show; remainingItemCount counts the keys after the
    page when there is no selector; the last page has neither continue nor remainingItemCount."""
    core = cluster.core()
    ns = cluster.namespace
    await make_pods(cluster, {f"p-{c}": {} for c in "abcde"})

    first = await call(core.list_namespaced_pod, ns, limit=2)
    meta = first.body["metadata"]
    assert names(first.body["items"]) == ["p-a", "p-b"]
    assert meta["remainingItemCount"] == 3
    assert meta["continue"]
    snapshot = meta["resourceVersion"]

    await core.create_namespaced_pod(ns, pod("p-z"))
    await core.delete_namespaced_pod("p-e", ns)
    await core.patch_namespaced_pod("p-c", ns, {"metadata": {"labels": {"late": "yes"}}})

    second = await call(core.list_namespaced_pod, ns, limit=2, _continue=meta["continue"])
    assert second.status == 200, second.body
    assert names(second.body["items"]) == ["p-c", "p-d"]
    assert "late" not in (second.body["items"][0]["metadata"].get("labels") or {})
    assert second.body["metadata"]["resourceVersion"] == snapshot
    assert second.body["metadata"]["remainingItemCount"] == 1

    third = await call(
        core.list_namespaced_pod, ns, limit=2, _continue=second.body["metadata"]["continue"]
    )
    assert names(third.body["items"]) == ["p-e"]
    assert third.body["metadata"]["resourceVersion"] == snapshot
    assert not third.body["metadata"].get("continue")
    assert "remainingItemCount" not in third.body["metadata"]


async def test_paging_with_a_selector_has_no_remaining_count(cluster: Target) -> None:
    """With a non-empty predicate the count of remaining keys would be wrong, so etcd3 leaves
    remainingItemCount unset; pages still hold at most ``limit`` matching items."""
    await make_pods(cluster, {f"p-{c}": {"odd": str(i % 2)} for i, c in enumerate("abcde")})
    reply = await call(
        cluster.core().list_namespaced_pod, cluster.namespace, limit=1, label_selector="odd=0"
    )
    assert names(reply.body["items"]) == ["p-a"]
    assert reply.body["metadata"]["continue"]
    assert "remainingItemCount" not in reply.body["metadata"]


@pytest.mark.simonly
async def test_an_expired_continue_token_is_410_with_a_fresh_token() -> None:
    """etcd3 interpretListError -> handleCompactedErrorForPaging: 410 Expired with the
    inconsistent-continue message and, in the Status's metadata, a continue token at
    resourceVersion -1 that lists the rest from the latest state."""
    async with SimCluster(None, window=5, kubelets=False) as sim:
        core = k8s.CoreV1Api(sim.api_client())
        for c in "abcd":
            await core.create_namespaced_pod("default", pod(f"p-{c}"))
        first = await call(core.list_namespaced_pod, "default", limit=2)
        token = first.body["metadata"]["continue"]
        for i in range(10):
            await core.patch_namespaced_pod(
                "p-a", "default", {"metadata": {"labels": {"i": str(i)}}}
            )
        await core.create_namespaced_pod("default", pod("p-e"))

        expired = await call(core.list_namespaced_pod, "default", limit=2, _continue=token)
        assert expired.status == 410, expired.body
        fresh = expired.body["metadata"].get("continue")
        assert fresh, expired.body
        assert expired.body == failure(410, "Expired", INCONSISTENT_CONTINUE) | {
            "metadata": {"continue": fresh}
        }
        rest = await call(core.list_namespaced_pod, "default", _continue=fresh)
        assert rest.status == 200, rest.body
        assert names(rest.body["items"]) == ["p-c", "p-d", "p-e"]


# --------------------------------------------------------------------------- watch


async def test_watch_from_a_resource_version_replays_the_later_events_in_order(
    cluster: Target,
) -> None:
    """A watch from revision R gets every later event exactly once, in revision order, each
    object at the revision of its write (cacher/watch_cache.go getAllEventsSinceLocked)."""
    core = cluster.core()
    ns = cluster.namespace
    start = await make_pods(cluster, {"w-a": {}})
    writes = [
        await call(core.create_namespaced_pod, ns, pod("w-b")),
        await call(core.patch_namespaced_pod, "w-a", ns, {"metadata": {"labels": {"x": "1"}}}),
        await call(core.patch_namespaced_pod, "w-b", ns, {"metadata": {"labels": {"y": "2"}}}),
        await call(core.patch_namespaced_pod, "w-a", ns, {"metadata": {"labels": {"x": "3"}}}),
    ]
    async with EventStream(core.list_namespaced_pod, ns, resource_version=str(rv(start))) as events:
        got = await events.take(4)
    assert summary(got) == [
        ("ADDED", "w-b"),
        ("MODIFIED", "w-a"),
        ("MODIFIED", "w-b"),
        ("MODIFIED", "w-a"),
    ]
    assert [e["object"] for e in got] == [w.body for w in writes]


@pytest.mark.parametrize("version", [None, "0"], ids=["unset", "zero"])
async def test_watch_without_a_resource_version_starts_with_the_current_objects(
    cluster: Target, version: str | None
) -> None:
    """resourceVersion unset or "0": synthetic ADDED events for the current state, then the
    changes (the watch-cache interval from the store)."""
    core = cluster.core()
    ns = cluster.namespace
    await make_pods(cluster, {"s-a": {}, "s-b": {}, "s-c": {}})
    query = {} if version is None else {"resource_version": version}
    async with EventStream(core.list_namespaced_pod, ns, **query) as events:
        initial = await events.take(3)
        assert sorted(summary(initial)) == [("ADDED", "s-a"), ("ADDED", "s-b"), ("ADDED", "s-c")]
        await core.create_namespaced_pod(ns, pod("s-d"))
        [later] = await events.take(1)
    assert summary([later]) == [("ADDED", "s-d")]


async def test_typed_watch_ends_when_timeout_seconds_pass(cluster: Target) -> None:
    """timeoutSeconds bounds the watch on the server, which then closes the stream; the
    kubernetes-asyncio Watch (with timeout_seconds set) stops iterating."""
    core = cluster.core()
    listed = await call(core.list_namespaced_pod, cluster.namespace)
    seen = []
    async with watch.Watch() as stream:
        async for event in stream.stream(
            core.list_namespaced_pod,
            cluster.namespace,
            resource_version=listed.body["metadata"]["resourceVersion"],
            timeout_seconds=1,
        ):
            seen.append(event)
    assert seen == []


async def test_bookmarks_when_asked_for(cluster: Target) -> None:
    """allowWatchBookmarks: the cacher sends BOOKMARK events carrying only a resourceVersion
    (never older than the events already sent), before the watch times out."""
    core = cluster.core()
    ns = cluster.namespace
    listed = await call(core.list_namespaced_pod, ns)
    made = await make_pods(cluster, {"bm": {}})
    async with EventStream(
        core.list_namespaced_pod,
        ns,
        resource_version=listed.body["metadata"]["resourceVersion"],
        allow_watch_bookmarks=True,
        timeout_seconds=5,
    ) as events:
        [added] = await events.take(1)
        bookmark = await events.until(lambda e: e["type"] == "BOOKMARK")
    assert summary([added]) == [("ADDED", "bm")]
    obj = bookmark["object"]
    assert obj["kind"] == "Pod"
    assert obj["apiVersion"] == "v1"
    assert rv(obj) >= rv(made)
    assert "name" not in obj["metadata"]


async def test_a_pod_bookmark_is_an_empty_pod(cluster: Target) -> None:
    """The cacher's bookmark object is newFunc() with only the resourceVersion set
    (cacher.go); an empty v1.Pod encodes the fields Go's encoding/json cannot omit:
    creationTimestamp null, spec.containers null, an empty status."""
    core = cluster.core()
    ns = cluster.namespace
    listed = await call(core.list_namespaced_pod, ns)
    async with EventStream(
        core.list_namespaced_pod,
        ns,
        resource_version=listed.body["metadata"]["resourceVersion"],
        allow_watch_bookmarks=True,
        timeout_seconds=5,
    ) as events:
        bookmark = await events.until(lambda e: e["type"] == "BOOKMARK")
    version = bookmark["object"]["metadata"]["resourceVersion"]
    assert bookmark["object"] == {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": version, "creationTimestamp": None},
        "spec": {"containers": None},
        "status": {},
    }


async def test_no_bookmarks_unless_asked(cluster: Target) -> None:
    """Without allowWatchBookmarks no BOOKMARK is ever sent; the stream ends at timeoutSeconds."""
    core = cluster.core()
    listed = await call(core.list_namespaced_pod, cluster.namespace)
    async with EventStream(
        core.list_namespaced_pod,
        cluster.namespace,
        resource_version=listed.body["metadata"]["resourceVersion"],
        timeout_seconds=1,
    ) as events:
        assert await events.rest() == []


async def test_a_label_filtered_watch_sees_objects_enter_and_leave(cluster: Target) -> None:
    """cacheWatcher.convertToWatchEvent: an update into the selection is ADDED, within it
    MODIFIED, out of it DELETED carrying the previous content at the new resourceVersion."""
    core = cluster.core()
    ns = cluster.namespace
    start = await make_pods(cluster, {"f-x": {"app": "other"}})
    async with EventStream(
        core.list_namespaced_pod, ns, label_selector="app=match", resource_version=str(rv(start))
    ) as events:
        into = await call(
            core.patch_namespaced_pod, "f-x", ns, {"metadata": {"labels": {"app": "match"}}}
        )
        within = await call(
            core.patch_namespaced_pod, "f-x", ns, {"metadata": {"annotations": {"n": "1"}}}
        )
        out = await call(
            core.patch_namespaced_pod, "f-x", ns, {"metadata": {"labels": {"app": "gone"}}}
        )
        created = await call(core.create_namespaced_pod, ns, pod("f-y", labels={"app": "match"}))
        got = await events.take(4)
    assert summary(got) == [
        ("ADDED", "f-x"),
        ("MODIFIED", "f-x"),
        ("DELETED", "f-x"),
        ("ADDED", "f-y"),
    ]
    assert got[0]["object"] == into.body
    assert got[1]["object"] == within.body
    left = got[2]["object"]
    assert left["metadata"]["labels"] == {"app": "match"}
    assert left["metadata"]["resourceVersion"] == out.body["metadata"]["resourceVersion"]
    expected_left = dict(within.body, metadata=dict(within.body["metadata"]))
    expected_left["metadata"]["resourceVersion"] = out.body["metadata"]["resourceVersion"]
    assert left == expected_left
    assert got[3]["object"] == created.body


async def test_a_node_name_filtered_watch_sees_the_pod_when_it_is_bound(cluster: Target) -> None:
    """The kubelet's watch: spec.nodeName=N matches a pod once pods/binding sets it."""
    core = cluster.core()
    ns = cluster.namespace
    node_name = cluster.name("n1")
    start = await make_pods(cluster, {"b-x": {}})
    async with EventStream(
        core.list_namespaced_pod,
        ns,
        field_selector=f"spec.nodeName={node_name}",
        resource_version=str(rv(start)),
    ) as events:
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": "b-x"},
            "target": {"kind": "Node", "name": node_name},
        }
        assert (await call(core.create_namespaced_pod_binding, "b-x", ns, body)).status == 201
        [event] = await events.take(1)
    assert summary([event]) == [("ADDED", "b-x")]
    assert event["object"]["spec"]["nodeName"] == node_name


async def test_watching_leases_from_a_resource_version(cluster: Target) -> None:
    """The same replay semantics for another group (coordination.k8s.io), deletes included:
    a DELETED event carries the last state at the deletion's revision."""
    coord = k8s.CoordinationV1Api(cluster.api())
    ns = cluster.namespace
    first = await call(coord.create_namespaced_lease, ns, lease("l-a"))
    second = await call(coord.create_namespaced_lease, ns, lease("l-b"))
    renewed = await call(
        coord.patch_namespaced_lease, "l-a", ns, {"spec": {"holderIdentity": "gpusched-1"}}
    )
    await call(coord.delete_namespaced_lease, "l-a", ns)
    async with EventStream(
        coord.list_namespaced_lease, ns, resource_version=str(rv(first.body))
    ) as events:
        got = await events.take(3)
    assert summary(got) == [("ADDED", "l-b"), ("MODIFIED", "l-a"), ("DELETED", "l-a")]
    assert got[0]["object"] == second.body
    assert got[1]["object"] == renewed.body
    deleted = got[2]["object"]
    assert rv(deleted) > rv(renewed.body)
    assert deleted["spec"] == renewed.body["spec"]
    assert deleted["metadata"]["uid"] == renewed.body["metadata"]["uid"]


@pytest.mark.simonly
async def test_a_watch_from_an_expired_resource_version_gets_410() -> None:
    """watchCache.getAllEventsSinceLocked: a revision older than the window is
    errors.NewResourceExpired("too old resource version: R (OLDEST)"); the cacher sends it as
    an ERROR event on a 200 stream (newErrWatcher) and ends the stream. kubernetes-asyncio's
    Watch raises ApiException(status=410) for it."""
    async with SimCluster(None, window=5, kubelets=False) as sim:
        core = k8s.CoreV1Api(sim.api_client())
        first = await call(core.create_namespaced_pod, "default", pod("old-0"))
        for i in range(1, 8):
            await core.create_namespaced_pod("default", pod(f"old-{i}"))
        since = first.body["metadata"]["resourceVersion"]

        async with EventStream(
            core.list_namespaced_pod, "default", resource_version=since
        ) as events:
            got = await events.rest()
        assert [e["type"] for e in got] == ["ERROR"]
        status = got[0]["object"]
        message = status.pop("message")
        assert status == {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "reason": "Expired",
            "code": 410,
        }
        match = re.fullmatch(r"too old resource version: (\d+) \((\d+)\)", message)
        assert match is not None, message
        assert match.group(1) == since

        async def typed_watch() -> None:
            async with watch.Watch() as stream:
                async for _ in stream.stream(
                    core.list_namespaced_pod, "default", resource_version=since, timeout_seconds=5
                ):
                    pass

        with pytest.raises(ApiException) as info:
            await typed_watch()
        assert info.value.status == 410
