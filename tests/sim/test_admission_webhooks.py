"""Admission webhooks in the simulated API server, end to end over HTTPS.

A tiny webhook server (aiohttp, a self-signed CA from ``gpusched.sim.tls``) runs in the test;
webhook configurations are created through the API with the real client, and pods are created,
patched, bound and deleted through it, as on a real cluster.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest
from aiohttp import web

from gpusched.kube.errors import APIError
from gpusched.sim import SimCluster, admission
from gpusched.sim.admission import Attributes, WebhookStrategy, denied_message, rule_matches
from gpusched.sim.tls import ServingCerts, make_serving_certs

MWC = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
VWC = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
PODS = "/api/v1/namespaces/default/pods"
DEAD_URL = "https://127.0.0.1:1/dead"  # nothing listens on port 1


@dataclass
class Hooks:
    """The test's webhook server: what each path was asked."""

    url: str
    certs: ServingCerts
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    interfere: Callable[[], Awaitable[Any]] | None = None
    """Awaited by the first ``/interfere`` call: a write racing the admitted one."""
    """Set at teardown: lets a ``/hang`` call finish."""

    @property
    def ca_bundle(self) -> str:
        return base64.b64encode(self.certs.ca_pem).decode()

    def asked(self, path: str) -> list[dict[str, Any]]:
        return [req for p, req in self.calls if p == path]


def _allow(req: dict[str, Any], patch: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": req["uid"], "allowed": True}
    if patch is not None:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


def _handler(hooks: Hooks) -> web.Application:
    async def handle(request: web.Request) -> web.Response:
        req = (await request.json())["request"]
        path = request.path
        hooks.calls.append((path, req))
        obj = req.get("object") or {}
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if path.startswith("/order-"):
            # Appends its letter to the "order" label: proves order and that each webhook
            # sees what the previous one did.
            letter = path.removeprefix("/order-")
            ops: list[dict[str, Any]] = []
            if not labels:
                ops.append({"op": "add", "path": "/metadata/labels", "value": {}})
            ops.append(
                {
                    "op": "add",
                    "path": "/metadata/labels/order",
                    "value": labels.get("order", "") + letter,
                }
            )
            return web.json_response(_allow(req, ops))
        if path == "/deny":
            name = (obj.get("metadata") or {}).get("name", "")
            if name.startswith("bad"):
                return web.json_response(
                    {
                        "apiVersion": "admission.k8s.io/v1",
                        "kind": "AdmissionReview",
                        "response": {
                            "uid": req["uid"],
                            "allowed": False,
                            "status": {"code": 403, "message": f"pod {name} is not welcome here"},
                        },
                    }
                )
            return web.json_response(_allow(req))
        if path == "/interfere":
            if hooks.interfere is not None:
                racing, hooks.interfere = hooks.interfere, None
                await racing()
            return web.json_response(
                _allow(req, [{"op": "add", "path": "/metadata/labels/mutated", "value": "yes"}])
            )
        if path == "/hang":
            await hooks.release.wait()
        if path == "/bad-uid":
            return web.json_response(_allow({"uid": "not-the-request-uid"}))
        return web.json_response(_allow(req))

    app = web.Application()
    app.router.add_post("/{tail:.*}", handle)
    return app


@pytest.fixture
async def sim() -> AsyncIterator[SimCluster]:
    async with SimCluster(kubelets=False) as cluster:
        yield cluster


@pytest.fixture
async def hooks() -> AsyncIterator[Hooks]:
    certs = make_serving_certs("hook.webhooks.svc")
    state = Hooks(url="", certs=certs)
    runner = web.AppRunner(_handler(state), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=certs.server_context())
    await site.start()
    server = site._server
    assert server is not None
    port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
    state.url = f"https://127.0.0.1:{port}"
    yield state
    state.release.set()
    await runner.cleanup()


def webhook(name: str, url: str, ca: str, **extra: Any) -> dict[str, Any]:
    hook: dict[str, Any] = {
        "name": name,
        "clientConfig": {"url": url, "caBundle": ca},
        "rules": [
            {
                "operations": ["CREATE", "UPDATE"],
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "resources": ["pods"],
            }
        ],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    }
    hook.update(extra)
    return hook


def _rule(ops: list[str], resources: tuple[str, ...] = ("pods",)) -> dict[str, Any]:
    return {
        "operations": ops,
        "apiGroups": [""],
        "apiVersions": ["v1"],
        "resources": list(resources),
    }


async def register(sim: SimCluster, path: str, name: str, *hooks: dict[str, Any]) -> Any:
    return await sim.kube.create(path, {"metadata": {"name": name}, "webhooks": list(hooks)})


def pod(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


# --------------------------------------------------------------------------------------------
# Configurations: defaults and validation
# --------------------------------------------------------------------------------------------


async def test_defaults_are_applied(sim: SimCluster) -> None:
    hook = webhook("a.gpusched.io", "https://127.0.0.1:1/x", "")
    del hook["clientConfig"]["caBundle"]
    hook["clientConfig"] = {"service": {"namespace": "default", "name": "svc"}}
    stored = await register(sim, MWC, "cfg", hook)
    got = stored["webhooks"][0]
    assert (got["failurePolicy"], got["matchPolicy"], got["timeoutSeconds"]) == (
        "Fail",
        "Equivalent",
        10,
    )
    assert got["reinvocationPolicy"] == "Never"
    assert got["namespaceSelector"] == {}
    assert got["objectSelector"] == {}
    assert got["rules"][0]["scope"] == "*"
    assert got["clientConfig"]["service"]["port"] == 443


def _bad(**changes: Any) -> dict[str, Any]:
    hook = webhook("a.gpusched.io", "https://127.0.0.1:1/x", "")
    for key, value in changes.items():
        if value is None:
            hook.pop(key, None)
        else:
            hook[key] = value
    return hook


@pytest.mark.parametrize(
    ("hooks_", "message"),
    [
        ([_bad(name="short.name")], "should be a domain with at least three segments"),
        ([_bad(), _bad()], 'webhooks[1].name: Duplicate value: "a.gpusched.io"'),
        ([_bad(sideEffects=None)], "webhooks[0].sideEffects: Required value"),
        ([_bad(sideEffects="Some")], 'webhooks[0].sideEffects: Unsupported value: "Some"'),
        (
            [_bad(failurePolicy="Maybe")],
            'webhooks[0].failurePolicy: Unsupported value: "Maybe": supported values: "Fail", '
            '"Ignore"',
        ),
        (
            [_bad(sideEffects=None)],
            "webhooks[0].sideEffects: Required value: must specify one of None, NoneOnDryRun",
        ),
        (
            [_bad(clientConfig={"service": {"namespace": "a", "name": "b", "path": "/x//y"}})],
            'webhooks[0].clientConfig.service.path: Invalid value: "/x//y": segment[1] may not '
            "be empty",
        ),
        (
            [_bad(clientConfig={"url": "https://u:p@x/"})],
            'webhooks[0].clientConfig.url: Invalid value: "u:p": user information is not '
            "permitted in the URL",
        ),
        ([_bad(matchPolicy="Loose")], 'webhooks[0].matchPolicy: Unsupported value: "Loose"'),
        ([_bad(timeoutSeconds=31)], "the timeout value must be between 1 and 30 seconds"),
        ([_bad(timeoutSeconds=0)], "the timeout value must be between 1 and 30 seconds"),
        ([_bad(admissionReviewVersions=None)], "admissionReviewVersions: Required value"),
        ([_bad(admissionReviewVersions=["v2"])], "must include at least one of v1, v1beta1"),
        ([_bad(clientConfig={})], "exactly one of url or service is required"),
        (
            [_bad(clientConfig={"url": "https://x/", "service": {"namespace": "a", "name": "b"}})],
            "exactly one of url or service is required",
        ),
        ([_bad(clientConfig={"url": "http://x/"})], "'https' is the only allowed URL scheme"),
        ([_bad(clientConfig={"url": "https://x/?a=b"})], "query parameters are not permitted"),
        (
            [_bad(clientConfig={"service": {"namespace": "a", "name": "b", "port": 0}})],
            "port is not valid",
        ),
        (
            [
                _bad(
                    rules=[
                        {
                            "operations": ["*", "CREATE"],
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "resources": ["pods"],
                        }
                    ]
                )
            ],
            "if '*' is present, must not specify other operations",
        ),
        (
            [
                _bad(
                    rules=[
                        {
                            "operations": ["PATCH"],
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "resources": ["pods"],
                        }
                    ]
                )
            ],
            'operations[0]: Unsupported value: "PATCH"',
        ),
        (
            [
                _bad(
                    rules=[
                        {
                            "operations": ["CREATE"],
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "resources": ["pods"],
                            "scope": "Node",
                        }
                    ]
                )
            ],
            'scope: Unsupported value: "Node"',
        ),
        (
            [
                _bad(
                    rules=[
                        {
                            "operations": ["CREATE"],
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "resources": [],
                        }
                    ]
                )
            ],
            "rules[0].resources: Required value",
        ),
        (
            [_bad(rules=[_rule(["CREATE"], ("*", "pods"))])],
            "if '*' is present, must not specify other resources without subresources",
        ),
        (
            [_bad(rules=[_rule(["CREATE"], ("pods/*", "pods/status"))])],
            "if 'pods/*' is present, must not specify pods/status",
        ),
        ([_bad(rules=[_rule(["CREATE"], ("*/*", "pods"))])], "if '*/*' is present"),
        (
            [_bad(namespaceSelector={"matchExpressions": [{"key": "a", "operator": "Near"}]})],
            "namespaceSelector: Invalid value",
        ),
    ],
)
async def test_invalid_configurations_are_rejected(
    sim: SimCluster, hooks_: list[dict[str, Any]], message: str
) -> None:
    for path in (MWC, VWC):
        with pytest.raises(APIError) as err:
            await register(sim, path, "cfg", *hooks_)
        assert err.value.code == 422
        assert message in err.value.message


# --------------------------------------------------------------------------------------------
# Calls
# --------------------------------------------------------------------------------------------


async def test_mutating_in_name_order_then_validating_on_the_result(
    sim: SimCluster, hooks: Hooks
) -> None:
    ca = hooks.ca_bundle
    # Created in reverse: configurations run sorted by name, webhooks in their order.
    await register(
        sim,
        MWC,
        "b-config",
        webhook("c.gpusched.io", f"{hooks.url}/order-c", ca),
        webhook("d.gpusched.io", f"{hooks.url}/order-d", ca),
    )
    await register(sim, MWC, "a-config", webhook("a.gpusched.io", f"{hooks.url}/order-a", ca))
    await register(sim, VWC, "deny", webhook("deny.gpusched.io", f"{hooks.url}/deny", ca))
    created = await sim.kube.create(PODS, pod("good"))
    assert created["metadata"]["labels"]["order"] == "acd"
    seen = hooks.asked("/deny")[-1]
    assert seen["object"]["metadata"]["labels"]["order"] == "acd"
    assert (seen["object"]["kind"], seen["object"]["apiVersion"]) == ("Pod", "v1")
    assert hooks.asked("/order-a")[0]["object"]["kind"] == "Pod"
    assert seen["object"]["metadata"]["uid"]  # validating webhooks see the server's fields
    assert seen["operation"] == "CREATE"
    assert seen["oldObject"] is None
    assert seen["kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert seen["resource"] == {"group": "", "version": "v1", "resource": "pods"}
    assert (seen["namespace"], seen["name"], seen["dryRun"]) == ("default", "good", False)
    assert seen["options"]["kind"] == "CreateOptions"
    assert seen["userInfo"]["username"]

    with pytest.raises(APIError) as err:
        await sim.kube.create(PODS, pod("bad-one"))
    assert err.value.code == 403
    assert err.value.message == (
        'admission webhook "deny.gpusched.io" denied the request: pod bad-one is not welcome here'
    )
    with pytest.raises(APIError):
        await sim.kube.get(f"{PODS}/bad-one")


@pytest.mark.parametrize(
    ("policy", "created"),
    [("Ignore", True), ("Fail", False), (None, False)],  # None: the default, Fail
)
@pytest.mark.parametrize("path", [MWC, VWC])
async def test_failure_policy_with_a_dead_url(
    sim: SimCluster, path: str, policy: str | None, created: bool
) -> None:
    extra = {} if policy is None else {"failurePolicy": policy}
    await register(sim, path, "dead", webhook("dead.gpusched.io", DEAD_URL, "", **extra))
    if created:
        await sim.kube.create(PODS, pod("p"))
        return
    with pytest.raises(APIError) as err:
        await sim.kube.create(PODS, pod("p"))
    assert err.value.code == 500
    assert err.value.message == (
        'Internal error occurred: failed calling webhook "dead.gpusched.io": failed to call '
        'webhook: Post "https://127.0.0.1:1/dead?timeout=10s": dial tcp 127.0.0.1:1: connect: '
        "connection refused"
    )


@pytest.mark.parametrize(
    ("response_path", "fragment"),
    [("/bad-uid", 'expected response.uid="')],
)
async def test_a_malformed_response_is_a_failed_call(
    sim: SimCluster, hooks: Hooks, response_path: str, fragment: str
) -> None:
    await register(
        sim, VWC, "v", webhook("v.gpusched.io", f"{hooks.url}{response_path}", hooks.ca_bundle)
    )
    with pytest.raises(APIError) as err:
        await sim.kube.create(PODS, pod("p"))
    assert err.value.code == 500
    assert fragment in err.value.message


async def test_the_ca_bundle_is_verified(sim: SimCluster, hooks: Hooks) -> None:
    other_ca = base64.b64encode(make_serving_certs().ca_pem).decode()
    await register(sim, VWC, "v", webhook("v.gpusched.io", f"{hooks.url}/allow", other_ca))
    with pytest.raises(APIError) as err:
        await sim.kube.create(PODS, pod("p"))
    assert err.value.code == 500
    assert "certificate" in err.value.message.lower()


@pytest.mark.parametrize(
    ("selector_key", "selector", "namespace_labels", "pod_labels", "called"),
    [
        ("namespaceSelector", {"matchLabels": {"gpu": "yes"}}, {"gpu": "yes"}, {}, True),
        ("namespaceSelector", {"matchLabels": {"gpu": "yes"}}, {"gpu": "no"}, {}, False),
        (
            "namespaceSelector",
            {"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]},
            {},
            {},
            True,
        ),
        ("objectSelector", {"matchLabels": {"app": "x"}}, {}, {"app": "x"}, True),
        ("objectSelector", {"matchLabels": {"app": "x"}}, {}, {"app": "y"}, False),
    ],
)
async def test_selectors(
    sim: SimCluster,
    hooks: Hooks,
    selector_key: str,
    selector: dict[str, Any],
    namespace_labels: dict[str, str],
    pod_labels: dict[str, str],
    called: bool,
) -> None:
    await sim.kube.create(
        "/api/v1/namespaces", {"metadata": {"name": "ns1", "labels": namespace_labels}}
    )
    await register(
        sim,
        MWC,
        "m",
        webhook(
            "m.gpusched.io", f"{hooks.url}/order-x", hooks.ca_bundle, **{selector_key: selector}
        ),
    )
    created = await sim.kube.create("/api/v1/namespaces/ns1/pods", pod("p", pod_labels))
    assert bool(hooks.asked("/order-x")) is called
    assert ("order" in created["metadata"]["labels"]) is called


async def test_update_patch_and_delete(sim: SimCluster, hooks: Hooks) -> None:
    ca = hooks.ca_bundle
    await sim.kube.create(PODS, pod("p", {"keep": "1"}))
    await register(
        sim,
        MWC,
        "m",
        webhook("m.gpusched.io", f"{hooks.url}/order-u", ca, rules=[_rule(["UPDATE"])]),
    )
    await register(
        sim, VWC, "v", webhook("v.gpusched.io", f"{hooks.url}/allow", ca, rules=[_rule(["*"])])
    )
    await sim.kube.create(PODS, pod("q"))
    assert not hooks.asked("/order-u")  # an UPDATE-only webhook is not called on create
    patched = await sim.kube.patch(f"{PODS}/p", {"metadata": {"labels": {"new": "1"}}})
    assert patched["metadata"]["labels"] == {"keep": "1", "new": "1", "order": "u"}
    upd = hooks.asked("/order-u")[-1]
    assert upd["operation"] == "UPDATE"
    assert upd["oldObject"]["metadata"]["labels"] == {"keep": "1"}
    assert upd["object"]["metadata"]["labels"] == {"keep": "1", "new": "1"}
    assert upd["options"]["kind"] == "UpdateOptions"

    current = await sim.kube.get(f"{PODS}/p")
    current["metadata"]["labels"]["put"] = "1"
    replaced = await sim.kube.replace(f"{PODS}/p", current)
    assert replaced["metadata"]["labels"]["order"] == "uu"

    await sim.kube.delete(f"{PODS}/p")
    deleted = hooks.asked("/allow")[-1]
    assert deleted["operation"] == "DELETE"
    assert deleted["object"] is None
    assert deleted["oldObject"]["metadata"]["name"] == "p"
    assert deleted["options"]["kind"] == "DeleteOptions"


async def test_subresources_need_their_own_rule(sim: SimCluster, hooks: Hooks) -> None:
    await sim.kube.create("/api/v1/nodes", {"metadata": {"name": "n1"}})
    await sim.kube.create(PODS, pod("p"))
    await register(
        sim,
        VWC,
        "v",
        webhook(
            "v.gpusched.io", f"{hooks.url}/sub", hooks.ca_bundle, rules=[_rule(["*"], ("pods/*",))]
        ),
    )
    await sim.kube.patch(f"{PODS}/p", {"metadata": {"labels": {"a": "b"}}})
    assert not hooks.asked("/sub")  # pods/* does not match pods itself
    await sim.kube.create(
        f"{PODS}/p/binding",
        {"metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n1"}},
    )
    (binding,) = hooks.asked("/sub")
    assert (binding["subResource"], binding["kind"]["kind"], binding["name"]) == (
        "binding",
        "Binding",
        "p",
    )
    assert binding["object"]["target"]["name"] == "n1"
    assert (await sim.kube.get(f"{PODS}/p"))["spec"]["nodeName"] == "n1"


async def test_service_references_go_through_the_mapping(sim: SimCluster, hooks: Hooks) -> None:
    service = {"namespace": "webhooks", "name": "hook", "port": 8443, "path": "/order-s"}
    await register(
        sim,
        MWC,
        "m",
        webhook(
            "m.gpusched.io",
            "",
            "",
            clientConfig={"service": service, "caBundle": hooks.ca_bundle},
        ),
    )
    with pytest.raises(APIError) as err:
        await sim.kube.create(PODS, pod("p"))
    assert "SimCluster.map_service('webhooks', 'hook', URL, port=8443)" in err.value.message
    sim.map_service("webhooks", "hook", hooks.url, port=8443)
    created = await sim.kube.create(PODS, pod("p"))
    assert created["metadata"]["labels"]["order"] == "s"


# --------------------------------------------------------------------------------------------
# Pure parts
# --------------------------------------------------------------------------------------------


def _attrs(resource: str, sub: str = "", op: str = "CREATE", namespaced: bool = True) -> Attributes:
    return Attributes("", "v1", resource, "Pod", sub, "default", "p", op, namespaced)


@pytest.mark.parametrize(
    ("resources", "attrs", "matches"),
    [
        (["pods"], _attrs("pods"), True),
        (["pods"], _attrs("pods", "status"), False),
        (["pods/*"], _attrs("pods"), False),
        (["pods/*"], _attrs("pods", "binding"), True),
        (["pods/status"], _attrs("pods", "status"), True),
        (["*"], _attrs("pods"), True),
        (["*"], _attrs("pods", "status"), False),
        (["*/status"], _attrs("pods", "status"), True),
        (["*/*"], _attrs("pods", "binding"), True),
        (["nodes"], _attrs("pods"), False),
        (["pods"], _attrs("pods", op="DELETE"), False),
    ],
)
def test_rule_matching(resources: list[str], attrs: Attributes, matches: bool) -> None:
    assert rule_matches(_rule(["CREATE", "UPDATE"], tuple(resources)), attrs) is matches


@pytest.mark.parametrize(
    ("scope", "attrs", "matches"),
    [
        ("Namespaced", _attrs("pods"), True),
        ("Cluster", _attrs("pods"), False),
        ("Cluster", _attrs("nodes", namespaced=False), True),
        ("Cluster", _attrs("namespaces", namespaced=True), True),
        ("*", _attrs("nodes", namespaced=False), True),
    ],
)
def test_rule_scope(scope: str, attrs: Attributes, matches: bool) -> None:
    rule = {**_rule(["*"], ("*",)), "scope": scope}
    assert rule_matches(rule, attrs) is matches


@pytest.mark.parametrize(
    ("status", "message", "code"),
    [
        ({"message": "no", "code": 403}, 'admission webhook "w.x.y" denied the request: no', 403),
        ({"reason": "Nope"}, 'admission webhook "w.x.y" denied the request: Nope', 400),
        (None, 'admission webhook "w.x.y" denied the request without explanation', 400),
        ({"message": "m", "code": 200}, 'admission webhook "w.x.y" denied the request: m', 400),
    ],
)
def test_denial_status(status: dict[str, Any] | None, message: str, code: int) -> None:
    out = denied_message("w.x.y", status)
    assert (out["message"], out["code"], out["status"]) == (message, code, "Failure")


async def test_webhook_configurations_are_never_admitted_by_webhooks(sim: SimCluster) -> None:
    everything = {"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"]}
    await register(sim, VWC, "dead", webhook("dead.gpusched.io", DEAD_URL, "", rules=[everything]))
    # The dead, fail-closed webhook would refuse these; upstream never calls webhooks for them.
    await register(
        sim, VWC, "other", webhook("other.gpusched.io", DEAD_URL, "", failurePolicy="Ignore")
    )
    await sim.kube.delete(f"{VWC}/dead")
    await sim.kube.create(PODS, pod("p"))


async def test_dry_run_is_told_and_writes_nothing(sim: SimCluster, hooks: Hooks) -> None:
    await register(sim, MWC, "m", webhook("m.gpusched.io", f"{hooks.url}/order-z", hooks.ca_bundle))
    created = await sim.kube.create(PODS, pod("p"), {"dryRun": "All"})
    assert created["metadata"]["labels"]["order"] == "z"
    (asked,) = hooks.asked("/order-z")
    assert asked["dryRun"] is True
    assert asked["options"]["dryRun"] == ["All"]
    with pytest.raises(APIError):
        await sim.kube.get(f"{PODS}/p")


async def test_a_webhook_that_does_not_answer_in_time(sim: SimCluster, hooks: Hooks) -> None:
    # timeoutSeconds is at least 1: this test waits one real second.
    await register(
        sim,
        VWC,
        "v",
        webhook("v.gpusched.io", f"{hooks.url}/hang", hooks.ca_bundle, timeoutSeconds=1),
    )
    with pytest.raises(APIError) as err:
        await sim.kube.create(PODS, pod("p"))
    assert err.value.message.endswith(
        f'failed to call webhook: Post "{hooks.url}/hang?timeout=1s": context deadline exceeded'
    )


async def test_strategic_merge_patch_merges_webhooks_by_name(sim: SimCluster) -> None:
    await register(
        sim,
        VWC,
        "v",
        webhook("a.gpusched.io", DEAD_URL, ""),
        webhook("b.gpusched.io", DEAD_URL, ""),
    )
    patched = await sim.kube.patch(
        f"{VWC}/v",
        {"webhooks": [{"name": "b.gpusched.io", "failurePolicy": "Ignore"}]},
        "application/strategic-merge-patch+json",
    )
    policies = [(h["name"], h["failurePolicy"]) for h in patched["webhooks"]]
    assert policies == [("a.gpusched.io", "Fail"), ("b.gpusched.io", "Ignore")]


def test_kubectl_columns() -> None:
    now = datetime(2026, 1, 1, 0, 5, tzinfo=UTC)
    obj = {
        "metadata": {"name": "v", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "webhooks": [{"name": "a.b.c"}, {"name": "d.e.f"}],
    }
    table = WebhookStrategy(mutating=False).table([obj], now)
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Webhooks", "Age"]
    assert table["rows"][0]["cells"] == ["v", 2, "5m"]


async def test_a_write_racing_admission_makes_it_run_again(sim: SimCluster, hooks: Hooks) -> None:
    await sim.kube.create(PODS, pod("p", {"keep": "1"}))
    await register(
        sim,
        MWC,
        "m",
        webhook(
            "m.gpusched.io", f"{hooks.url}/interfere", hooks.ca_bundle, rules=[_rule(["UPDATE"])]
        ),
    )

    async def racing() -> None:
        await sim.kube.patch(f"{PODS}/p", {"metadata": {"labels": {"other": "1"}}})

    hooks.interfere = racing
    patched = await sim.kube.patch(f"{PODS}/p", {"metadata": {"labels": {"new": "1"}}})
    # The racing write landed first; the patch was applied again on top of it, and admitted again.
    assert patched["metadata"]["labels"] == {
        "keep": "1",
        "other": "1",
        "new": "1",
        "mutated": "yes",
    }
    assert len(hooks.asked("/interfere")) == 3


def test_all_is_complete() -> None:
    assert sorted(admission.__all__) == [
        "Admission",
        "Attributes",
        "GROUP",
        "MUTATING_KIND",
        "USER_INFO",
        "VALIDATING_KIND",
        "WebhookStrategy",
        "denied_message",
        "rule_matches",
    ]
    assert all(hasattr(admission, name) for name in admission.__all__)
