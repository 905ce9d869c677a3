"""The webhook's settings and registration: deploy/webhook.yaml is what the code generates,
failurePolicy reaches both configurations, and the ``gpusched webhook`` command's errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pydantic
import pytest
import yaml

from gpusched.cli import main
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
    ],
)
def test_webhook_command_errors_say_what_to_fix(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert expected in capsys.readouterr().err
