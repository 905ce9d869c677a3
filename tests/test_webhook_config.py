"""The webhook's settings and registration: deploy/webhook/ is what the code generates,
failurePolicy reaches both configurations, least-privilege RBAC, the cert-manager overlay, and
the ``gpusched webhook`` command (its errors, and its TLS modes run as a process)."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pydantic
import pytest
import yaml

from gpusched.cli import main
from gpusched.sim import SimCluster
from gpusched.sim.tls import make_serving_certs
from gpusched.webhook import WebhookConfig, webhook_manifests
from gpusched.webhook.certs import service_dns_names
from gpusched.webhook.config import MANIFEST_FILES

DEPLOY = Path(__file__).resolve().parent.parent / "deploy" / "webhook"
CERT_MANAGER = DEPLOY.parent / "overlays" / "cert-manager"


def by_kind(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in docs}


def test_deploy_webhook_is_the_generated_default(tmp_path: Path) -> None:
    assert main(["webhook", "--print-manifests", "--output-dir", str(tmp_path)]) == 0
    generated = {p.name: p.read_text() for p in tmp_path.iterdir()}
    shipped = {p.name: p.read_text() for p in DEPLOY.iterdir()}
    assert generated == shipped, (
        "regenerate: gpusched webhook --print-manifests --output-dir deploy/webhook"
    )
    assert {"kustomization.yaml", *MANIFEST_FILES} == set(shipped)
    docs = [d for name in MANIFEST_FILES for d in yaml.safe_load_all(shipped[name]) if d]
    assert docs == webhook_manifests()


@pytest.mark.parametrize("policy", ["Ignore", "Fail"])
def test_failure_policy_reaches_both_configurations_and_the_server(policy: str) -> None:
    docs = by_kind(webhook_manifests(WebhookConfig(failure_policy=policy)))  # type: ignore[arg-type]
    for kind, path in (
        ("MutatingWebhookConfiguration", "/mutate"),
        ("ValidatingWebhookConfiguration", "/validate"),
    ):
        (hook,) = docs[kind]["webhooks"]
        assert hook["failurePolicy"] == policy
        assert hook["clientConfig"]["service"]["path"] == path
        assert hook["admissionReviewVersions"] == ["v1"]
        assert hook["sideEffects"] == "None"
        assert hook["rules"][0]["operations"] == ["CREATE"]
        excluded = hook["namespaceSelector"]["matchExpressions"][0]
        assert excluded["operator"] == "NotIn"
        assert "gpusched-system" in excluded["values"]
    (container,) = docs["Deployment"]["spec"]["template"]["spec"]["containers"]
    command = container["command"]
    assert command[command.index("--failure-policy") + 1] == policy
    assert docs["MutatingWebhookConfiguration"]["webhooks"][0]["reinvocationPolicy"] == "IfNeeded"


@pytest.mark.parametrize(
    "settings",
    [{"failure_policy": "Open"}, {"timeout_seconds": 31}, {"port": 0}, {"unknown": 1}],
)
def test_bad_settings_are_refused(settings: dict[str, Any]) -> None:
    with pytest.raises(pydantic.ValidationError):
        WebhookConfig(**settings)


def test_camel_case_settings() -> None:
    config = WebhookConfig.model_validate({"failurePolicy": "Fail", "schedulerNames": ["a"]})
    assert config.failure_policy == "Fail"
    assert config.scheduler_names == ("a",)


def test_print_manifests(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["webhook", "--print-manifests", "--failure-policy", "Fail"]) == 0
    docs = by_kind([d for d in yaml.safe_load_all(capsys.readouterr().out) if d])
    assert docs["ValidatingWebhookConfiguration"]["webhooks"][0]["failurePolicy"] == "Fail"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["webhook"], "--tls self-signed needs the cluster"),
        (["webhook", "--tls", "cert-manager", "--cert-dir", "/nonexistent"], "cannot load"),
        (["webhook", "--cert", "/x.crt"], "give both --cert and --key"),
        (["webhook", "--cert", "/nonexistent.crt", "--key", "/nonexistent.key"], "cannot load"),
        (["webhook", "--print-manifests", "--port", "0"], "need a port 1-65535"),
    ],
)
def test_webhook_command_errors_say_what_to_fix(
    argv: list[str],
    expected: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert main(argv) == 2
    assert expected in capsys.readouterr().err


async def test_the_command_serves_https_and_stops_on_sigterm(tmp_path: Path) -> None:
    certs = make_serving_certs(directory=tmp_path)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpusched", "webhook",
        "--cert", str(tmp_path / "tls.crt"), "--key", str(tmp_path / "tls.key"),
        "--host", "127.0.0.1", "--port", "0", "--failure-policy", "Fail",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        line = (await asyncio.wait_for(process.stdout.readline(), timeout=30)).decode()
        assert "failurePolicy Fail" in line, line
        url = re.search(r"https://\S+", line)
        assert url is not None
        ctx = ssl.create_default_context(cafile=str(certs.ca_file))
        async with (
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as session,
            session.get(url.group(0) + "/healthz") as resp,
        ):
            assert resp.status == 200
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), timeout=30) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


def rules_of(docs: list[dict[str, Any]]) -> set[tuple[str, str, str, str]]:
    """(group, resource, name or "*", verb) for every rule bound to the webhook's account,
    with the namespace of a Role's rules checked."""
    docs_by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    account = by_kind(docs)["ServiceAccount"]["metadata"]
    out = set()
    for binding in (d for d in docs if d["kind"].endswith("RoleBinding")):
        (subject,) = binding["subjects"]
        assert (subject["name"], subject["namespace"]) == (account["name"], account["namespace"])
        role = docs_by[(binding["roleRef"]["kind"], binding["roleRef"]["name"])]
        if role["kind"] == "Role":
            assert role["metadata"]["namespace"] == binding["metadata"]["namespace"]
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for name in rule.get("resourceNames", ["*"]):
                        out |= {(group, resource, name, verb) for verb in rule["verbs"]}
    return out


ADMISSION = "admissionregistration.k8s.io"
MIG_FALLBACK_RULES = {
    ("", resource, "*", verb) for resource in ("nodes", "pods") for verb in ("get", "list", "watch")
}
SELF_SIGNED_RULES = {
    ("", "secrets", "gpusched-webhook-tls", "get"),
    ("", "secrets", "gpusched-webhook-tls", "update"),
    ("", "secrets", "*", "create"),  # RBAC cannot limit create to a name
    *(
        (ADMISSION, f"{kind}webhookconfigurations", "gpusched-webhook", verb)
        for kind in ("mutating", "validating")
        for verb in ("get", "patch")
    ),
}


def test_the_webhook_has_exactly_the_permissions_it_uses() -> None:
    docs = webhook_manifests()
    assert rules_of(docs) == MIG_FALLBACK_RULES | SELF_SIGNED_RULES
    account = by_kind(docs)["Deployment"]["spec"]["template"]["spec"]["serviceAccountName"]
    assert account == by_kind(docs)["ServiceAccount"]["metadata"]["name"]


def test_the_deployment_is_hardened_and_kept_available() -> None:
    docs = by_kind(webhook_manifests())
    spec = docs["Deployment"]["spec"]
    assert spec["replicas"] == 2
    pod = spec["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    command = container["command"]
    assert command[command.index("--tls") + 1] == "self-signed"
    # The one writable place (the certificate's files) is an emptyDir.
    (mount,) = container["volumeMounts"]
    (volume,) = pod["volumes"]
    assert (mount["mountPath"], mount["name"], "emptyDir" in volume) == (
        "/tmp",
        volume["name"],
        True,
    )
    pdb = docs["PodDisruptionBudget"]["spec"]
    assert pdb["minAvailable"] == 1
    assert pdb["selector"] == spec["selector"]
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        assert "annotations" not in docs[kind]["metadata"]  # caBundle is the webhook's to patch
        assert "caBundle" not in docs[kind]["webhooks"][0]["clientConfig"]


def kustomize(directory: Path) -> list[dict[str, Any]]:
    out = subprocess.run(
        ["kubectl", "kustomize", str(directory)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_the_cert_manager_component_hands_tls_to_cert_manager(tmp_path: Path) -> None:
    # The overlay lists every component of the install; its webhook part is built here on
    # deploy/webhook alone (kustomize takes relative paths only).
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "resources": [os.path.relpath(DEPLOY, tmp_path)],
                "components": [os.path.relpath(CERT_MANAGER / "webhook-tls", tmp_path)],
            }
        )
    )
    base, docs = webhook_manifests(), kustomize(tmp_path)
    assert rules_of(docs) == MIG_FALLBACK_RULES  # it writes nothing
    kinds = by_kind(docs)
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        annotations = kinds[kind]["metadata"]["annotations"]
        assert annotations == {"cert-manager.io/inject-ca-from": "gpusched-system/gpusched-webhook"}
    certificates = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "Certificate"}
    serving = certificates["gpusched-webhook"]
    assert serving["secretName"] == "gpusched-webhook-tls"
    assert serving["dnsNames"] == list(service_dns_names("gpusched-webhook", "gpusched-system")[:2])
    pod = kinds["Deployment"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    command = container["command"]
    assert command[command.index("--tls") + 1] == "cert-manager"
    mount = next(m for m in container["volumeMounts"] if m["name"] == "tls")
    volume = next(v for v in pod["volumes"] if v["name"] == "tls")
    assert volume["secret"]["secretName"] == serving["secretName"]
    assert mount["mountPath"] == "/etc/gpusched-webhook"  # the default --cert-dir
    assert (CERT_MANAGER / "namespace.yaml").read_text() == (
        DEPLOY.parent / "namespace.yaml"
    ).read_text()
    overlay = yaml.safe_load((CERT_MANAGER / "kustomization.yaml").read_text())
    assert "../../webhook" in overlay["resources"]
    assert overlay["components"] == ["webhook-tls"]
    # Nothing else changes.
    untouched = {("Service", "gpusched-webhook"), ("PodDisruptionBudget", "gpusched-webhook")}
    for doc in base:
        if (doc["kind"], doc["metadata"]["name"]) in untouched:
            assert doc in docs


def test_a_kubeconfig_that_does_not_load_is_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_serving_certs(directory=tmp_path)
    argv = ["webhook", "--cert", str(tmp_path / "tls.crt"), "--key", str(tmp_path / "tls.key")]
    assert main([*argv, "--port", "0", "--kubeconfig", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert "cannot load kubeconfig" in err
    assert "Traceback" not in err


async def test_the_command_watches_the_cluster_of_its_kubeconfig(tmp_path: Path) -> None:
    make_serving_certs(directory=tmp_path)
    async with SimCluster(kubelets=False) as sim:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gpusched", "webhook",
            "--cert", str(tmp_path / "tls.crt"), "--key", str(tmp_path / "tls.key"),
            "--host", "127.0.0.1", "--port", "0", "--kubeconfig", str(sim.kubeconfig_path),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            assert process.stdout is not None
            line = (await asyncio.wait_for(process.stdout.readline(), timeout=30)).decode()
            assert "MIG fallback on" in line, line
            process.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(process.wait(), timeout=30) == 0
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
