"""The webhook server over real HTTPS: AdmissionReview v1 in, AdmissionReview v1 out, as an API
server would send and read them (certificate verified against the CA)."""

from __future__ import annotations

import base64
import json
import ssl
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gpusched.sim.patch import json_patch
from gpusched.sim.tls import ServingCerts, make_serving_certs
from gpusched.webhook import WebhookConfig, WebhookServer, server_ssl_context
from gpusched.webhook.validate import default_validator

SHARED = {"gpusched.io/gpu": "1", "gpusched.io/vram": "20Gi"}


def make_pod(
    limits: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    scheduler: str = "gpusched",
) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "main", "image": "cuda"}
    if limits:
        c["resources"] = {"limits": dict(limits)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "annotations": dict(annotations or {})},
        "spec": {"schedulerName": scheduler, "containers": [c]},
    }


def review(
    obj: dict[str, Any] | None, operation: str = "CREATE", kind: str = "Pod", uid: str = "u-1"
) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": kind},
            "resource": {"group": "", "version": "v1", "resource": kind.lower() + "s"},
            "namespace": "default",
            "operation": operation,
            "object": obj,
        },
    }


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> ServingCerts:
    return make_serving_certs(directory=tmp_path_factory.mktemp("tls"))


class Client:
    def __init__(self, session: aiohttp.ClientSession, base: str) -> None:
        self.session, self.base = session, base

    async def post(self, path: str, body: Any, raw: bool = False) -> tuple[int, Any]:
        data = body if raw else json.dumps(body)
        async with self.session.post(self.base + path, data=data) as resp:
            text = await resp.text()
            try:
                return resp.status, json.loads(text)
            except json.JSONDecodeError:
                return resp.status, text


async def serve(certs: ServingCerts, server: WebhookServer) -> AsyncIterator[Client]:
    await server.start("127.0.0.1", 0, ssl_context=certs.server_context())
    client_ctx = ssl.create_default_context(cafile=str(certs.ca_file))
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_ctx)) as s:
            yield Client(s, f"https://127.0.0.1:{server.port}")
    finally:
        await server.stop()


def rejecting_vram(pod: Mapping[str, Any]) -> str | None:
    limits = pod["spec"]["containers"][0].get("resources", {}).get("limits", {})
    if limits.get("gpusched.io/vram") == "96Gi":
        return "asks for 96Gi per GPU; the largest GPU here has 80Gi"
    return None


@pytest.fixture
async def client(certs: ServingCerts) -> AsyncIterator[Client]:
    async for c in serve(certs, WebhookServer(validator=rejecting_vram)):
        yield c


def response_of(body: Mapping[str, Any], uid: str = "u-1") -> dict[str, Any]:
    assert body["apiVersion"] == "admission.k8s.io/v1"
    assert body["kind"] == "AdmissionReview"
    response: dict[str, Any] = body["response"]
    assert response["uid"] == uid
    return response


def patch_of(response: Mapping[str, Any]) -> list[dict[str, Any]]:
    assert response["patchType"] == "JSONPatch"
    ops: list[dict[str, Any]] = json.loads(base64.b64decode(response["patch"]))
    return ops


# name, path, review, allowed, message (denials), patched (mutations)
CASES = [
    ("valid share", "/validate", review(make_pod(SHARED)), True, None, False),
    (
        "too much VRAM",
        "/validate",
        review(make_pod({**SHARED, "gpusched.io/vram": "96Gi"})),
        False,
        "asks for 96Gi per GPU; the largest GPU here has 80Gi",
        False,
    ),
    (
        "priority 7",
        "/validate",
        review(make_pod(SHARED, {"gpusched.io/priority": "7"})),
        True,
        None,
        False,
    ),  # this server's validator checks VRAM only
    (
        "another scheduler's pod is not judged",
        "/validate",
        review(make_pod({**SHARED, "gpusched.io/vram": "96Gi"}, scheduler="other")),
        True,
        None,
        False,
    ),
    (
        "an update is allowed",
        "/validate",
        review(make_pod({**SHARED, "gpusched.io/vram": "96Gi"}), operation="UPDATE"),
        True,
        None,
        False,
    ),
    ("a delete has no object", "/validate", review(None, operation="DELETE"), True, None, False),
    ("mutate a share", "/mutate", review(make_pod(SHARED)), True, None, True),
    ("mutate whole GPUs", "/mutate", review(make_pod({"nvidia.com/gpu": "1"})), True, None, True),
    ("no GPUs, no patch", "/mutate", review(make_pod()), True, None, False),
    ("not a pod", "/mutate", review({"kind": "ConfigMap"}, kind="ConfigMap"), True, None, False),
]


@pytest.mark.parametrize(
    ("path", "body", "allowed", "message", "patched"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
async def test_admission_review(
    client: Client,
    path: str,
    body: dict[str, Any],
    allowed: bool,
    message: str | None,
    patched: bool,
) -> None:
    status, answer = await client.post(path, body)
    assert status == 200
    response = response_of(answer)
    assert response["allowed"] is allowed
    if message is not None:
        assert response["status"]["message"] == message
        assert response["status"]["code"] == 403
    else:
        assert "status" not in response
    assert ("patch" in response) is patched
    if patched:
        after = json_patch(body["request"]["object"], patch_of(response))
        assert after["spec"]["containers"][0]["env"]
        # Reinvocation: the mutated pod comes back unchanged.
        _, again = await client.post("/mutate", review(after))
        assert "patch" not in response_of(again)


async def test_kept_user_variables_come_back_as_warnings(client: Client) -> None:
    pod = make_pod(SHARED)
    pod["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    _, answer = await client.post("/mutate", review(pod))
    response = response_of(answer)
    (warning,) = response["warnings"]
    assert "NVIDIA_VISIBLE_DEVICES" in warning
    ops = patch_of(response)
    assert all(op["value"]["name"] != "NVIDIA_VISIBLE_DEVICES" for op in ops)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("not json", "not JSON"),
        (json.dumps({"kind": "Pod"}), "not an AdmissionReview"),
        (
            json.dumps({**review(make_pod()), "apiVersion": "admission.k8s.io/v1beta1"}),
            'admissionReviewVersions: ["v1"]',
        ),
        (
            json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}),
            "no request with a uid",
        ),
    ],
)
async def test_malformed_reviews_are_400_with_what_was_expected(
    client: Client, body: str, expected: str
) -> None:
    for path in ("/mutate", "/validate"):
        status, text = await client.post(path, body, raw=True)
        assert status == 400
        assert expected in text


async def test_healthz(client: Client) -> None:
    async with client.session.get(client.base + "/healthz") as resp:
        assert resp.status == 200


def broken(pod: Mapping[str, Any]) -> str | None:
    raise RuntimeError("reader bug")


@pytest.mark.parametrize(
    ("policy", "allowed", "code"), [("Ignore", True, None), ("Fail", False, 500)]
)
async def test_failure_policy_decides_what_an_internal_error_answers(
    certs: ServingCerts, policy: str, allowed: bool, code: int | None
) -> None:
    async def bad_fallback(pod: Mapping[str, Any]) -> None:
        raise RuntimeError("lookup failed")

    server = WebhookServer(
        validator=broken,
        mig_fallback=bad_fallback,
        config=WebhookConfig(failure_policy=policy),  # type: ignore[arg-type]
    )
    async for c in serve(certs, server):
        for path, limits in (("/validate", SHARED), ("/mutate", {"nvidia.com/mig-2g.20gb": "1"})):
            _, answer = await c.post(path, review(make_pod(limits)))
            response = response_of(answer)
            assert response["allowed"] is allowed
            assert "patch" not in response
            if code is None:
                assert "failurePolicy is Ignore" in response["warnings"][0]
            else:
                assert response["status"]["code"] == code
                assert "retry" in response["status"]["message"]


async def test_the_default_validator_checks_priority(certs: ServingCerts) -> None:
    async for c in serve(certs, WebhookServer(validator=default_validator())):
        _, answer = await c.post(
            "/validate", review(make_pod(SHARED, {"gpusched.io/priority": "7"}))
        )
        response = response_of(answer)
        assert response["allowed"] is False
        assert "0 (highest) to 4" in response["status"]["message"]


def test_server_ssl_context_loads_pem_files(certs: ServingCerts) -> None:
    ctx = server_ssl_context(certs.directory / "tls.crt", certs.directory / "tls.key")
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    with pytest.raises(FileNotFoundError):
        server_ssl_context(Path("/nonexistent.crt"), Path("/nonexistent.key"))
