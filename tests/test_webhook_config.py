"""The webhook's settings and registration: deploy/webhook.yaml is what the code generates,
failurePolicy reaches both configurations, and the ``gpusched webhook`` command's errors."""

from __future__ import annotations

import asyncio
import re
import signal
import ssl
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

DEPLOY = Path(__file__).resolve().parent.parent / "deploy" / "webhook.yaml"


def by_kind(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in docs}


def test_deploy_webhook_yaml_is_the_generated_default() -> None:
    shipped = [d for d in yaml.safe_load_all(DEPLOY.read_text()) if d]
    assert shipped == webhook_manifests(), "regenerate: gpusched webhook --print-manifests"


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
        (["webhook"], "--cert and --key are required"),
        (["webhook", "--cert", "/nonexistent.crt", "--key", "/nonexistent.key"], "cannot load"),
        (["webhook", "--print-manifests", "--port", "0"], "need a port 1-65535"),
    ],
)
def test_webhook_command_errors_say_what_to_fix(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
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


def test_the_webhook_may_read_what_its_mig_fallback_watches() -> None:
    docs = by_kind(webhook_manifests())
    (rule,) = docs["ClusterRole"]["rules"]
    assert (rule["resources"], rule["verbs"]) == (["nodes", "pods"], ["get", "list", "watch"])
    (subject,) = docs["ClusterRoleBinding"]["subjects"]
    account = docs["Deployment"]["spec"]["template"]["spec"]["serviceAccountName"]
    assert subject["name"] == account == docs["ServiceAccount"]["metadata"]["name"]


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
