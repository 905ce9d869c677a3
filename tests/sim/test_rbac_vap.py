"""ValidatingAdmissionPolicies in the simulated API server (gpusched.sim.vap): which writes a
bound policy refuses, with upstream's status (message, reason, code, cause); matching by rules,
names, selectors, exclusions and the binding's matchResources; Warn; failurePolicy; and a
service account confined to its own node through its token's node name."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from gpusched.kube.client import Kube
from gpusched.kube.errors import APIError
from gpusched.sim import SimCluster

pytestmark = pytest.mark.simonly

ADMISSION = "/apis/admissionregistration.k8s.io/v1"
POLICIES = f"{ADMISSION}/validatingadmissionpolicies"
BINDINGS = f"{ADMISSION}/validatingadmissionpolicybindings"
PODS = "/api/v1/namespaces/team/pods"
NODE_KEY = "authentication.kubernetes.io/node-name"


def _policy(name: str, validations: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    spec.setdefault(
        "matchConstraints",
        {
            "resourceRules": [
                {
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": ["pods"],
                }
            ]
        },
    )
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {**spec, "validations": validations},
    }


def _binding(name: str, policy: str, actions: list[str], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": policy, "validationActions": actions, **spec},
    }


def _pod(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


NO_BAD = {"expression": "!has(object.metadata.labels.bad)", "message": "no bad pods"}


@pytest.fixture
async def sim() -> AsyncIterator[SimCluster]:
    async with SimCluster(kubelets=False) as cluster:
        kube = cluster.kube
        for ns, labels in (("team", {"env": "prod"}), ("lab", {"env": "dev"})):
            await kube.create("/api/v1/namespaces", {"metadata": {"name": ns, "labels": labels}})
        yield cluster


async def _install(kube: Kube, policy: dict[str, Any], binding: dict[str, Any]) -> None:
    await kube.create(POLICIES, policy)
    await kube.create(BINDINGS, binding)


async def _refusal(kube: Kube, path: str, body: dict[str, Any]) -> dict[str, Any] | None:
    try:
        await kube.create(path, body)
    except APIError as exc:
        return exc.status
    return None


async def test_deny_with_upstream_status(sim: SimCluster) -> None:
    await _install(sim.kube, _policy("no-bad", [NO_BAD]), _binding("no-bad-b", "no-bad", ["Deny"]))
    assert await _refusal(sim.kube, PODS, _pod("good")) is None
    text = "ValidatingAdmissionPolicy 'no-bad' with binding 'no-bad-b' denied request: no bad pods"
    assert await _refusal(sim.kube, PODS, _pod("evil", bad="yes")) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f'pods "evil" is forbidden: {text}',
        "reason": "Invalid",
        "details": {"name": "evil", "kind": "pods", "causes": [{"message": text}]},
        "code": 422,
    }


@pytest.mark.parametrize(
    ("validation", "policy", "reason", "code", "message"),
    [
        ({**NO_BAD, "reason": "Forbidden"}, {}, "Forbidden", 403, "no bad pods"),
        (
            {"expression": "!has(object.metadata.labels.bad)"},
            {},
            "Invalid",
            422,
            "failed expression: !has(object.metadata.labels.bad)",
        ),
        (
            {
                "expression": "!has(object.metadata.labels.bad)",
                "messageExpression": "'pod ' + object.metadata.name + ' is bad'",
            },
            {},
            "Invalid",
            422,
            "pod evil is bad",
        ),
        (  # an expression error denies under failurePolicy Fail (the default)
            {"expression": "object.spec.nothing.deeper == 1"},
            {},
            "Invalid",
            422,
            "expression 'object.spec.nothing.deeper == 1' resulted in error",
        ),
        ({"expression": "object.spec.nothing.deeper == 1"}, {"failurePolicy": "Ignore"}, "", 0, ""),
        (  # matchConditions false: not evaluated
            NO_BAD,
            {"matchConditions": [{"name": "c", "expression": "request.namespace == 'other'"}]},
            "",
            0,
            "",
        ),
        (  # the request's user is the caller: the admin token's
            NO_BAD,
            {
                "matchConditions": [
                    {"name": "c", "expression": "request.userInfo.username == 'gpusched-sim'"}
                ]
            },
            "Invalid",
            422,
            "no bad pods",
        ),
    ],
)
async def test_validation_outcomes(
    sim: SimCluster,
    validation: dict[str, Any],
    policy: dict[str, Any],
    reason: str,
    code: int,
    message: str,
) -> None:
    await _install(sim.kube, _policy("p", [validation], **policy), _binding("b", "p", ["Deny"]))
    status = await _refusal(sim.kube, PODS, _pod("evil", bad="yes"))
    if not code:
        assert status is None
        return
    assert status is not None
    assert (status["reason"], status["code"]) == (reason, code)
    assert message in status["message"]


@pytest.mark.parametrize(
    ("constraints", "binding", "namespace", "denied"),
    [
        ({}, {}, "team", True),
        ({"namespaceSelector": {"matchLabels": {"env": "prod"}}}, {}, "team", True),
        ({"namespaceSelector": {"matchLabels": {"env": "prod"}}}, {}, "lab", False),
        ({"objectSelector": {"matchLabels": {"tier": "web"}}}, {}, "team", False),
        (
            {"excludeResourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                       "operations": ["*"], "resources": ["pods"],
                                       "resourceNames": ["evil"]}]},
            {}, "team", False,
        ),
        (
            {},
            {"matchResources": {"namespaceSelector": {"matchLabels": {"env": "dev"}},
                                "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                   "operations": ["*"], "resources": ["*"]}]}},
            "team", False,
        ),
        ({"paramKind": True}, {}, "team", False),  # params unsupported: the binding is skipped
    ],
)  # fmt: skip
async def test_matching(
    sim: SimCluster,
    constraints: dict[str, Any],
    binding: dict[str, Any],
    namespace: str,
    denied: bool,
) -> None:
    policy = _policy("p", [NO_BAD])
    if constraints.pop("paramKind", False):
        policy["spec"]["paramKind"] = {"apiVersion": "v1", "kind": "ConfigMap"}
    policy["spec"]["matchConstraints"].update(constraints)
    await _install(sim.kube, policy, _binding("b", "p", ["Deny"], **binding))
    status = await _refusal(sim.kube, f"/api/v1/namespaces/{namespace}/pods", _pod("evil", bad="1"))
    assert (status is not None) is denied


async def test_warn_answers_a_warning_header(sim: SimCluster) -> None:
    await _install(sim.kube, _policy("p", [NO_BAD]), _binding("b", "p", ["Warn"]))
    assert sim.server.certs is not None
    context = ssl.create_default_context(cafile=str(sim.server.certs.ca_file))
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{sim.url}{PODS}",
            json=_pod("evil", bad="yes"),
            headers={"Authorization": f"Bearer {sim.server.token}"},
            ssl=context,
        ) as response,
    ):
        assert response.status == 201
        assert response.headers.getall("Warning") == [
            "299 - \"Validation failed for ValidatingAdmissionPolicy 'p' with binding "
            "'b': no bad pods\""
        ]


async def test_delete_sees_the_old_object(sim: SimCluster) -> None:
    await sim.kube.create(PODS, _pod("keep", protected="yes"))
    policy = _policy(
        "p",
        [{"expression": "!has(oldObject.metadata.labels.protected)", "message": "protected"}],
    )
    policy["spec"]["matchConstraints"]["resourceRules"][0]["operations"] = ["DELETE"]
    await _install(sim.kube, policy, _binding("b", "p", ["Deny"]))
    with pytest.raises(APIError) as caught:
        await sim.kube.delete(f"{PODS}/keep")
    assert caught.value.message.endswith("denied request: protected")
    await sim.kube.create(PODS, _pod("other"))
    await sim.kube.delete(f"{PODS}/other")


OWN_NODE = _policy(
    "own-node",
    [
        {
            "expression": "variables.node != '' && object.metadata.name == variables.node",
            "messageExpression": "'may only write the node named ' + variables.node",
            "reason": "Forbidden",
        }
    ],
    matchConstraints={
        "resourceRules": [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"],
                "resources": ["nodes", "nodes/status"],
            }
        ]
    },
    matchConditions=[
        {
            "name": "agent",
            "expression": "request.userInfo.username == 'system:serviceaccount:team:agent'",
        }
    ],
    variables=[
        {
            "name": "node",
            "expression": f"'{NODE_KEY}' in request.userInfo.extra ? "
            f"request.userInfo.extra['{NODE_KEY}'][0] : ''",
        }
    ],
)


async def test_a_token_confined_to_its_node(sim: SimCluster) -> None:
    kube = sim.kube
    for node in ("n1", "n2"):
        await kube.create("/api/v1/nodes", {"metadata": {"name": node}})
    await kube.create("/api/v1/namespaces/team/serviceaccounts", {"metadata": {"name": "agent"}})
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    await kube.create(
        f"{rbac}/clusterroles",
        {
            "metadata": {"name": "agent"},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["nodes", "nodes/status"],
                    "verbs": ["get", "patch", "update"],
                }
            ],
        },
    )
    await kube.create(
        f"{rbac}/clusterrolebindings",
        {
            "metadata": {"name": "agent"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "agent"},
            "subjects": [{"kind": "ServiceAccount", "name": "agent", "namespace": "team"}],
        },
    )  # fmt: skip
    await _install(kube, OWN_NODE, _binding("own-node", "own-node", ["Deny"]))
    agent = Kube(sim.api_client(token=sim.service_account_token("team", "agent", node="n1")))
    label = {"metadata": {"labels": {"gpu": "ok"}}}
    await agent.patch("/api/v1/nodes/n1", label, "application/merge-patch+json")
    await agent.patch("/api/v1/nodes/n1/status", label, "application/merge-patch+json")
    with pytest.raises(APIError) as caught:
        await agent.patch("/api/v1/nodes/n2", label, "application/merge-patch+json")
    assert (caught.value.code, caught.value.message) == (
        403,
        "nodes \"n2\" is forbidden: ValidatingAdmissionPolicy 'own-node' with binding 'own-node' "
        "denied request: may only write the node named n1",
    )
    unbound = Kube(sim.api_client(token=sim.service_account_token("team", "agent")))
    with pytest.raises(APIError) as caught:
        await unbound.patch("/api/v1/nodes/n1", label, "application/merge-patch+json")
    assert caught.value.code == 403
    await kube.patch("/api/v1/nodes/n2", label, "application/merge-patch+json")  # the admin
