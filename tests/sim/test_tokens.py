"""Service-account tokens in the simulated API server (gpusched.sim.auth): TokenRequest over
HTTP (defaults, validation, binding to a Pod or Node), who a token authenticates as
(SelfSubjectReview), and the end of a token's life: expiry on the fake clock, its service
account or bound object deleted or recreated; kubectl with a token's kubeconfig."""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gpusched.clock import FakeClock
from gpusched.kube.client import Kube
from gpusched.kube.errors import APIError
from gpusched.sim import SimCluster
from gpusched.sim.auth import EXTRA_NODE_NAME

pytestmark = pytest.mark.simonly

WHOAMI = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
TOKEN = "/api/v1/namespaces/team/serviceaccounts/bot/token"


def _request(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}


def _pod(name: str, account: str, node: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "serviceAccountName": account,
        "containers": [{"name": "c", "image": "busybox"}],
    }
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def _claims(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    decoded: dict[str, Any] = json.loads(
        base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
    )
    return decoded


@pytest.fixture
async def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def sim(clock: FakeClock) -> AsyncIterator[SimCluster]:
    async with SimCluster(kubelets=False, clock=clock) as cluster:
        kube = cluster.kube
        await kube.create("/api/v1/namespaces", {"metadata": {"name": "team"}})
        await kube.create("/api/v1/namespaces/team/serviceaccounts", {"metadata": {"name": "bot"}})
        await kube.create("/api/v1/nodes", {"metadata": {"name": "n1"}})
        yield cluster


async def _whoami(sim: SimCluster, token: str) -> dict[str, Any]:
    kube = Kube(sim.api_client(token=token))
    review = await kube.create(
        WHOAMI, {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    )
    info: dict[str, Any] = review["status"]["userInfo"]
    return info


async def _authenticates(sim: SimCluster, token: str) -> bool:
    try:
        await _whoami(sim, token)
    except APIError as exc:
        if exc.code != 401:
            raise
        return False
    return True


async def test_token_request_defaults(sim: SimCluster, clock: FakeClock) -> None:
    reply = await sim.kube.create(TOKEN, _request())
    assert reply["kind"] == "TokenRequest"
    assert reply["apiVersion"] == "authentication.k8s.io/v1"
    assert reply["metadata"]["name"] == "bot"
    assert reply["metadata"]["namespace"] == "team"
    assert reply["spec"] == {
        "audiences": ["https://kubernetes.default.svc.cluster.local"],
        "expirationSeconds": 3600,
        "boundObjectRef": None,
    }
    assert reply["status"]["expirationTimestamp"] == "2026-01-01T01:00:00Z"
    claims = _claims(reply["status"]["token"])
    account = await sim.kube.get("/api/v1/namespaces/team/serviceaccounts/bot")
    assert claims["sub"] == "system:serviceaccount:team:bot"
    assert claims["kubernetes.io"]["serviceaccount"] == {
        "name": "bot",
        "uid": account["metadata"]["uid"],
    }
    assert claims["exp"] - claims["iat"] == 3600


async def test_who_a_token_is(sim: SimCluster) -> None:
    token = sim.service_account_token("team", "bot")
    info = await _whoami(sim, token)
    account = await sim.kube.get("/api/v1/namespaces/team/serviceaccounts/bot")
    assert info["username"] == "system:serviceaccount:team:bot"
    assert info["uid"] == account["metadata"]["uid"]
    assert info["groups"] == [
        "system:serviceaccounts",
        "system:serviceaccounts:team",
        "system:authenticated",
    ]
    assert list(info["extra"]) == ["authentication.kubernetes.io/credential-id"]
    admin = await _whoami(sim, sim.server.token)
    assert admin == {
        "username": "gpusched-sim",
        "groups": ["system:masters", "system:authenticated"],
    }


async def test_pod_bound_token_carries_the_node(sim: SimCluster) -> None:
    pod = await sim.kube.create("/api/v1/namespaces/team/pods", _pod("agent-x", "bot", "n1"))
    node = await sim.kube.get("/api/v1/nodes/n1")
    reply = await sim.kube.create(
        TOKEN, _request(boundObjectRef={"apiVersion": "v1", "kind": "Pod", "name": "agent-x"})
    )
    info = await _whoami(sim, reply["status"]["token"])
    assert info["extra"][EXTRA_NODE_NAME] == ["n1"]
    assert info["extra"]["authentication.kubernetes.io/node-uid"] == [node["metadata"]["uid"]]
    assert info["extra"]["authentication.kubernetes.io/pod-name"] == ["agent-x"]
    assert info["extra"]["authentication.kubernetes.io/pod-uid"] == [pod["metadata"]["uid"]]
    # The helper binds to a Node directly (1.31+ ServiceAccountTokenNodeBinding).
    info = await _whoami(sim, sim.service_account_token("team", "bot", node="n1"))
    assert info["extra"][EXTRA_NODE_NAME] == ["n1"]


@pytest.mark.parametrize(
    ("path", "body", "code", "message"),
    [
        (
            "/api/v1/namespaces/team/serviceaccounts/ghost/token",
            _request(),
            404,
            'serviceaccounts "ghost" not found',
        ),
        (
            TOKEN,
            _request(expirationSeconds=60),
            422,
            'TokenRequest.authentication.k8s.io "bot" is invalid: spec.expirationSeconds: '
            "Invalid value: 60: may not specify a duration less than 10 minutes",
        ),
        (
            TOKEN,
            _request(boundObjectRef={"apiVersion": "v1", "kind": "Pod", "name": "other"}),
            400,
            'cannot bind token for serviceaccount "bot" to pod running with different '
            "serviceaccount name.",
        ),
        (
            TOKEN,
            _request(boundObjectRef={"apiVersion": "v1", "kind": "Pod", "name": "missing"}),
            404,
            'pods "missing" not found',
        ),
        (
            TOKEN,
            _request(boundObjectRef={"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"}),
            400,
            "cannot bind token to object of type apps/v1, Kind=Deployment",
        ),
    ],
)
async def test_token_request_errors(
    sim: SimCluster, path: str, body: dict[str, Any], code: int, message: str
) -> None:
    await sim.kube.create("/api/v1/namespaces/team/pods", _pod("other", "default"))
    with pytest.raises(APIError) as caught:
        await sim.kube.create(path, body)
    assert (caught.value.code, caught.value.message) == (code, message)


async def test_unknown_and_forged_tokens_are_401(sim: SimCluster) -> None:
    token = sim.service_account_token("team", "bot")
    head, _, signature = token.split(".")
    claims = _claims(token)
    claims["sub"] = "system:serviceaccount:kube-system:admin"
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    for bad in ("nonsense", "caf\u00e9", f"{head}.{forged}.{signature}", token + "x"):
        assert not await _authenticates(sim, bad)
    assert await _authenticates(sim, token)


async def test_token_expires_on_the_server_clock(sim: SimCluster, clock: FakeClock) -> None:
    token = sim.service_account_token("team", "bot", expiration_seconds=600)
    await clock.advance(599)
    assert await _authenticates(sim, token)
    await clock.advance(1)
    assert not await _authenticates(sim, token)


async def test_token_dies_with_its_service_account(sim: SimCluster) -> None:
    token = sim.service_account_token("team", "bot")
    await sim.kube.delete("/api/v1/namespaces/team/serviceaccounts/bot")
    assert not await _authenticates(sim, token)
    await sim.kube.create("/api/v1/namespaces/team/serviceaccounts", {"metadata": {"name": "bot"}})
    assert not await _authenticates(sim, token)  # same name, another UID
    assert await _authenticates(sim, sim.service_account_token("team", "bot"))


async def test_pod_bound_token_dies_with_its_pod(sim: SimCluster) -> None:
    await sim.kube.create("/api/v1/namespaces/team/pods", _pod("p", "bot"))
    token = sim.service_account_token("team", "bot", pod="p")
    assert await _authenticates(sim, token)
    await sim.kube.delete("/api/v1/namespaces/team/pods/p", query={"gracePeriodSeconds": "0"})
    assert not await _authenticates(sim, token)


@pytest.mark.kubectl
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
async def test_kubectl_with_a_token_kubeconfig(sim: SimCluster, tmp_path: Path) -> None:
    token = sim.service_account_token("team", "bot")
    config = sim.write_kubeconfig(tmp_path / "kc", token=token)

    async def kubectl(*args: str) -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec(
            "kubectl",
            "--kubeconfig",
            str(config),
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await proc.communicate()
        return proc.returncode or 0, out.decode()

    code, out = await kubectl("auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
    assert (code, out) == (0, "system:serviceaccount:team:bot")
    code, out = await kubectl("auth", "can-i", "list", "pods")  # a protobuf review
    assert (code, out.strip()) == (1, "no")
    code, out = await kubectl("get", "pods", "-n", "team")
    assert code == 1
    assert (
        'User "system:serviceaccount:team:bot" cannot list resource "pods" in API group "" in '
        'the namespace "team"'
    ) in out


@pytest.mark.kubectl
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
async def test_kubectl_create_token(sim: SimCluster, tmp_path: Path) -> None:
    """``kubectl create token`` sends a protobuf TokenRequest (gpusched.sim.protobuf)."""
    await sim.kube.create("/api/v1/namespaces/team/pods", _pod("p", "bot", "n1"))
    config = sim.write_kubeconfig(tmp_path / "kc")
    proc = await asyncio.create_subprocess_exec(
        *("kubectl", "--kubeconfig", str(config), "-n", "team", "create", "token", "bot"),
        *("--duration", "20m", "--bound-object-kind", "Pod", "--bound-object-name", "p"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    token = out.decode().strip()
    claims = _claims(token)
    assert claims["exp"] - claims["iat"] == 1200
    assert claims["kubernetes.io"]["pod"]["name"] == "p"
    info = await _whoami(sim, token)
    assert info["extra"][EXTRA_NODE_NAME] == ["n1"]
