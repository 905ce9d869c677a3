"""RBAC in the simulated API server (gpusched.sim.rbac): RequestInfo parsing, a table of
allow/deny decisions for a service account's token over HTTP, the 403 bodies word for word, and
SelfSubjectAccessReviews answered by the same authorizer."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from gpusched.kube.client import Kube, resource_path
from gpusched.kube.errors import APIError, APIForbidden
from gpusched.sim import SimCluster
from gpusched.sim.rbac import Attributes, request_info

pytestmark = pytest.mark.simonly

RBAC = "rbac.authorization.k8s.io"
USER = "system:serviceaccount:team:bot"


# ------------------------------------------------------------------ RequestInfo


@pytest.mark.parametrize(
    ("method", "path", "query", "expected"),
    [
        ("GET", "/api/v1/pods", {}, ("list", "", "", "pods", "", "")),
        ("GET", "/api/v1/pods", {"watch": "true"}, ("watch", "", "", "pods", "", "")),
        ("GET", "/api/v1/pods", {"watch": "false"}, ("list", "", "", "pods", "", "")),
        ("GET", "/api/v1/watch/pods", {}, ("watch", "", "", "pods", "", "")),
        ("GET", "/api/v1/watch/namespaces/a/pods/p", {}, ("watch", "", "a", "pods", "p", "")),
        ("GET", "/api/v1/namespaces/a/pods/p", {}, ("get", "", "a", "pods", "p", "")),
        (
            "POST",
            "/api/v1/namespaces/a/pods/p/binding",
            {},
            ("create", "", "a", "pods", "p", "binding"),
        ),
        ("POST", "/api/v1/namespaces/a/bindings", {}, ("create", "", "a", "bindings", "", "")),
        (
            "PATCH",
            "/api/v1/namespaces/a/pods/p/status",
            {},
            ("patch", "", "a", "pods", "p", "status"),
        ),
        ("DELETE", "/api/v1/namespaces/a/pods", {}, ("deletecollection", "", "a", "pods", "", "")),
        ("DELETE", "/api/v1/namespaces/a/pods/p", {}, ("delete", "", "a", "pods", "p", "")),
        ("PUT", "/api/v1/namespaces/a", {}, ("update", "", "a", "namespaces", "a", "")),
        (
            "PUT",
            "/api/v1/namespaces/a/finalize",
            {},
            ("update", "", "a", "namespaces", "a", "finalize"),
        ),
        ("GET", "/api/v1/nodes/n1", {}, ("get", "", "", "nodes", "n1", "")),
        (
            "GET",
            "/apis/coordination.k8s.io/v1/namespaces/s/leases",
            {"fieldSelector": "metadata.name=lead"},
            ("list", "coordination.k8s.io", "s", "leases", "lead", ""),
        ),
        (
            "GET",
            "/apis/coordination.k8s.io/v1/namespaces/s/leases",
            {"fieldSelector": "metadata.name!=lead"},
            ("list", "coordination.k8s.io", "s", "leases", "", ""),
        ),
        (
            "POST",
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            {},
            ("create", "authorization.k8s.io", "", "selfsubjectaccessreviews", "", ""),
        ),
    ],
)
def test_request_info_resource(
    method: str, path: str, query: dict[str, str], expected: tuple[str, ...]
) -> None:
    info = request_info(method, path, query)
    assert info.resource_request
    got = (info.verb, info.group, info.namespace, info.resource, info.name, info.subresource)
    assert got == expected


@pytest.mark.parametrize(
    ("method", "path", "verb"),
    [
        ("GET", "/version", "get"),
        ("GET", "/api", "get"),
        ("GET", "/api/v1", "get"),
        ("GET", "/apis/apps", "get"),
        ("GET", "/apis/apps/v1", "get"),
        ("GET", "/openapi/v3", "get"),
        ("POST", "/metrics", "post"),
    ],
)
def test_request_info_non_resource(method: str, path: str, verb: str) -> None:
    assert request_info(method, path, {}) == Attributes(verb, False, path=path)


# ------------------------------------------------------------------ decisions over HTTP


def _meta(name: str, namespace: str | None = None) -> dict[str, Any]:
    return {"name": name, **({"namespace": namespace} if namespace else {})}


def _role(
    kind: str, name: str, rules: list[dict[str, Any]], ns: str | None = None
) -> dict[str, Any]:
    return {"apiVersion": f"{RBAC}/v1", "kind": kind, "metadata": _meta(name, ns), "rules": rules}


def _binding(
    kind: str, name: str, role_kind: str, role: str, ns: str | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": f"{RBAC}/v1",
        "kind": kind,
        "metadata": _meta(name, ns),
        "roleRef": {"apiGroup": RBAC, "kind": role_kind, "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": "bot", "namespace": "team"}],
    }


POLICY: list[dict[str, Any]] = [
    _role(
        "ClusterRole",
        "bot-read",
        [
            {"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]},
            {"apiGroups": ["*"], "resources": ["*/status"], "verbs": ["patch"]},
            {
                "apiGroups": [""],
                "resources": ["configmaps"],
                "verbs": ["get"],
                "resourceNames": ["allowed"],
            },
            {"nonResourceURLs": ["/metrics", "/debug/*"], "verbs": ["get"]},
        ],
    ),
    _binding("ClusterRoleBinding", "bot-read", "ClusterRole", "bot-read"),
    _role(
        "Role",
        "bot-leases",
        [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["*"]}],
        "team",
    ),
    _binding("RoleBinding", "bot-leases", "Role", "bot-leases", "team"),
    # A ClusterRole granted in one namespace only, through a RoleBinding.
    _role(
        "ClusterRole",
        "secret-reader",
        [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"]}],
    ),
    _binding("RoleBinding", "secrets", "ClusterRole", "secret-reader", "team"),
    # An aggregated ClusterRole: the rules of the ClusterRoles its selector picks.
    {
        "apiVersion": f"{RBAC}/v1",
        "kind": "ClusterRole",
        "metadata": _meta("aggregate"),
        "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"agg": "yes"}}]},
    },
    {
        **_role(
            "ClusterRole",
            "agg-part",
            [{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list"]}],
        ),
        "metadata": {"name": "agg-part", "labels": {"agg": "yes"}},
    },
    _binding("ClusterRoleBinding", "aggregate", "ClusterRole", "aggregate"),
]


async def _apply(kube: Kube, objects: list[dict[str, Any]]) -> None:
    for obj in objects:
        group, _, version = obj["apiVersion"].rpartition("/")
        plural = obj["kind"].lower() + "s"
        await kube.create(
            resource_path(group, version, plural, obj["metadata"].get("namespace")), obj
        )


async def _namespace(kube: Kube, name: str) -> None:
    await kube.create(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )


async def _service_account(kube: Kube, namespace: str, name: str) -> None:
    await kube.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
    )


@pytest.fixture
async def sim() -> AsyncIterator[SimCluster]:
    async with SimCluster(kubelets=False) as cluster:
        await _namespace(cluster.kube, "team")
        await _namespace(cluster.kube, "other")
        await _service_account(cluster.kube, "team", "bot")
        await _apply(cluster.kube, POLICY)
        yield cluster


@pytest.fixture
async def bot(sim: SimCluster) -> Kube:
    return Kube(sim.api_client(token=sim.service_account_token("team", "bot")))


DECISIONS: list[tuple[str, str, dict[str, str], bool]] = [
    # (method, path, query, allowed)
    ("GET", "/api/v1/nodes", {}, True),
    ("GET", "/api/v1/nodes", {"watch": "true", "timeoutSeconds": "1"}, True),
    ("GET", "/api/v1/namespaces/other/pods", {}, True),
    ("DELETE", "/api/v1/namespaces/other/pods/p", {}, False),
    ("POST", "/api/v1/namespaces/other/pods/p/binding", {}, True),
    ("POST", "/api/v1/namespaces/other/pods/p/eviction", {}, False),
    ("PATCH", "/api/v1/nodes/n1/status", {}, True),  # */status in any group
    ("PUT", "/api/v1/nodes/n1/status", {}, False),
    ("GET", "/api/v1/namespaces/other/configmaps/allowed", {}, True),
    ("GET", "/api/v1/namespaces/other/configmaps/denied", {}, False),
    ("GET", "/api/v1/namespaces/other/configmaps", {}, False),  # resourceNames: no list
    ("GET", "/api/v1/namespaces/team/secrets", {}, True),
    ("GET", "/api/v1/namespaces/other/secrets", {}, False),
    ("GET", "/api/v1/secrets", {}, False),
    ("DELETE", "/apis/coordination.k8s.io/v1/namespaces/team/leases/x", {}, True),
    ("GET", "/apis/coordination.k8s.io/v1/namespaces/other/leases", {}, False),
    ("GET", "/apis/apps/v1/deployments", {}, True),  # aggregated
    ("GET", "/apis/apps/v1/daemonsets", {}, False),
    ("GET", "/metrics", {}, True),
    ("GET", "/debug/pprof/heap", {}, True),
    ("GET", "/debug", {}, False),
    ("GET", "/version", {}, True),  # system:public-info-viewer
    ("GET", "/apis", {}, True),  # system:discovery
    ("GET", "/apis/apps/v1", {}, True),
    ("GET", "/openapi/v3", {}, True),
    ("GET", "/apis/nothing.example/v1/things", {}, False),  # authorized before routing
]


_CONTENT_TYPES = {"PATCH": "application/merge-patch+json"}


@pytest.mark.parametrize(("method", "path", "query", "allowed"), DECISIONS)
async def test_decision(
    bot: Kube, method: str, path: str, query: dict[str, str], allowed: bool
) -> None:
    try:
        await bot.request(
            method,
            path,
            query,
            body={} if method in ("POST", "PUT", "PATCH") else None,
            content_type=_CONTENT_TYPES.get(method, "application/json"),
        )
    except APIForbidden:
        assert not allowed
        return
    except APIError:
        pass  # past the authorizer: whatever the handler answers
    assert allowed


async def test_admin_token_allowed_everything(sim: SimCluster) -> None:
    await sim.kube.get("/api/v1/secrets")
    with pytest.raises(APIError) as caught:
        await sim.kube.get("/metrics")
    assert caught.value.code == 404  # past the authorizer; the simulation serves no /metrics


# ------------------------------------------------------------------ 403 bodies


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        (
            "DELETE",
            "/api/v1/namespaces/default/pods/x",
            {
                "message": f'pods "x" is forbidden: User "{USER}" cannot delete resource "pods" '
                'in API group "" in the namespace "default"',
                "details": {"name": "x", "kind": "pods"},
            },
        ),
        (
            "POST",
            "/api/v1/namespaces/default/pods/x/eviction",
            {
                "message": f'pods "x" is forbidden: User "{USER}" cannot create resource '
                '"pods/eviction" in API group "" in the namespace "default"',
                "details": {"name": "x", "kind": "pods"},
            },
        ),
        (
            "GET",
            "/apis/apps/v1/daemonsets",
            {
                "message": f'daemonsets.apps is forbidden: User "{USER}" cannot list resource '
                '"daemonsets" in API group "apps" at the cluster scope',
                "details": {"group": "apps", "kind": "daemonsets"},
            },
        ),
        (
            "GET",
            "/apis/coordination.k8s.io/v1/namespaces/other/leases/lead",
            {
                "message": f'leases.coordination.k8s.io "lead" is forbidden: User "{USER}" cannot '
                'get resource "leases" in API group "coordination.k8s.io" in the namespace "other"',
                "details": {"name": "lead", "group": "coordination.k8s.io", "kind": "leases"},
            },
        ),
        (
            "GET",
            "/logs",
            {
                "message": f'forbidden: User "{USER}" cannot get path "/logs"',
                "details": {},
            },
        ),
    ],
)
async def test_forbidden_body(bot: Kube, method: str, path: str, status: dict[str, Any]) -> None:
    with pytest.raises(APIForbidden) as caught:
        await bot.request(method, path, body={} if method == "POST" else None)
    assert caught.value.status == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "reason": "Forbidden",
        "code": 403,
        **status,
    }


async def test_binding_to_missing_role_is_the_reason(sim: SimCluster, bot: Kube) -> None:
    await _apply(
        sim.kube,
        [
            _binding("ClusterRoleBinding", "dangling", "ClusterRole", "gone"),
            _binding("RoleBinding", "dangling", "Role", "gone", "team"),
        ],
    )
    with pytest.raises(APIForbidden) as caught:
        await bot.get("/api/v1/namespaces/team/services")
    assert caught.value.message == (
        f'services is forbidden: User "{USER}" cannot list resource "services" in API group "" '
        f'in the namespace "team": RBAC: [clusterrole.{RBAC} "gone" not found, '
        f'role.{RBAC} "gone" not found]'
    )


async def test_pods_binding_message_from_the_brief(sim: SimCluster) -> None:
    await _service_account(sim.kube, "team", "nobody")
    kube = Kube(sim.api_client(token=sim.service_account_token("team", "nobody")))
    with pytest.raises(APIForbidden) as caught:
        await kube.create(
            "/api/v1/namespaces/default/pods/x/binding",
            {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": "x"},
                "target": {"kind": "Node", "name": "n"},
            },
        )
    assert caught.value.message == (
        'pods "x" is forbidden: User "system:serviceaccount:team:nobody" cannot create resource '
        '"pods/binding" in API group "" in the namespace "default"'
    )


async def test_rbac_changes_apply_to_the_next_request(sim: SimCluster, bot: Kube) -> None:
    with pytest.raises(APIForbidden):
        await bot.get("/api/v1/namespaces/team/services")
    await _apply(
        sim.kube,
        [
            _role(
                "Role",
                "svc",
                [{"apiGroups": [""], "resources": ["services"], "verbs": ["list"]}],
                "team",
            ),
            _binding("RoleBinding", "svc", "Role", "svc", "team"),
        ],
    )
    await bot.get("/api/v1/namespaces/team/services")
    await sim.kube.delete(resource_path(RBAC, "v1", "rolebindings", "team") + "/svc")
    with pytest.raises(APIForbidden):
        await bot.get("/api/v1/namespaces/team/services")


# ------------------------------------------------------------------ SelfSubjectAccessReviews


def _ssar(attrs: dict[str, Any], non_resource: bool = False) -> dict[str, Any]:
    key = "nonResourceAttributes" if non_resource else "resourceAttributes"
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {key: attrs},
    }


SSAR = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


@pytest.mark.parametrize(("method", "path", "query", "allowed"), DECISIONS)
async def test_access_review_matches_the_request(
    bot: Kube, method: str, path: str, query: dict[str, str], allowed: bool
) -> None:
    info = request_info(method, path, query)
    if info.resource_request:
        attrs = {
            "verb": info.verb,
            "group": info.group,
            "resource": info.resource,
            "subresource": info.subresource,
            "name": info.name,
            "namespace": info.namespace,
        }
        review = await bot.create(SSAR, _ssar(attrs))
    else:
        review = await bot.create(SSAR, _ssar({"verb": info.verb, "path": path}, True))
    assert review["status"]["allowed"] is allowed


@pytest.mark.parametrize(
    ("attrs", "reason"),
    [
        (
            {"verb": "list", "resource": "nodes"},
            'RBAC: allowed by ClusterRoleBinding "bot-read" of ClusterRole "bot-read" to '
            'ServiceAccount "bot/team"',
        ),
        (
            {
                "verb": "update",
                "group": "coordination.k8s.io",
                "resource": "leases",
                "namespace": "team",
            },
            'RBAC: allowed by RoleBinding "bot-leases/team" of Role "bot-leases" to '
            'ServiceAccount "bot/team"',
        ),
        ({"verb": "delete", "resource": "nodes"}, None),
    ],
)
async def test_access_review_reason(bot: Kube, attrs: dict[str, Any], reason: str | None) -> None:
    review = await bot.create(SSAR, _ssar(attrs))
    assert review["status"].get("reason") == reason
    assert review["status"]["allowed"] is (reason is not None)


async def test_access_review_test_denial_still_applies(sim: SimCluster) -> None:
    sim.server.access_reviews.denied.add(("list", "", "nodes"))
    review = await sim.kube.create(SSAR, _ssar({"verb": "list", "resource": "nodes"}))
    assert review["status"] == {"allowed": False}
    review = await sim.kube.create(SSAR, _ssar({"verb": "get", "resource": "nodes"}))
    assert review["status"] == {"allowed": True}
