"""The manifests in deploy/ are well formed, and the shipped configuration loads."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from gpusched.framework import parse_config

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"


def documents() -> list[dict[str, object]]:
    docs = []
    for path in sorted(DEPLOY.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def test_every_manifest_has_kind_and_name() -> None:
    for doc in documents():
        assert doc.get("kind")
        assert (doc.get("metadata") or {}).get("name") or doc["kind"] == "Kustomization"  # type: ignore[union-attr]


def test_the_shipped_scheduler_configuration_is_valid() -> None:
    config_map = next(d for d in documents() if d.get("kind") == "ConfigMap")
    text = config_map["data"]["config.yaml"]  # type: ignore[index]
    config = parse_config(text, source="deploy/config.yaml")
    assert config.profiles[0].scheduler_name == "gpusched"
    assert config.leader_election.leader_elect


def test_the_scheduler_probes_liveness_and_readiness_apart() -> None:
    # /readyz is 200 on a standby too (see gpusched.cli), so a rolling update of the
    # leader-elected replicas can proceed; test_leader_election_e2e.py checks it on processes.
    deployment = next(d for d in documents() if d.get("kind") == "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]  # type: ignore[index]
    assert "--leader-elect" in container["command"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kustomize_builds() -> None:
    out = subprocess.run(
        ["kubectl", "kustomize", str(DEPLOY)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    kinds = {d["kind"] for d in yaml.safe_load_all(out.stdout) if d}
    assert {"CustomResourceDefinition", "Deployment", "ClusterRole", "ConfigMap"} <= kinds


def _allowed(rules: list[dict[str, object]], group: str, resource: str, verb: str) -> bool:
    return any(
        group in (r.get("apiGroups") or [])  # type: ignore[operator]
        and resource in (r.get("resources") or [])  # type: ignore[operator]
        and verb in (r.get("verbs") or [])  # type: ignore[operator]
        for r in rules
    )


@pytest.mark.parametrize(
    ("group", "resource", "verbs"),
    [
        ("scheduling.k8s.io", "priorityclasses", ("get", "list", "watch")),
        ("policy", "poddisruptionbudgets", ("get", "list", "watch")),
        ("scheduling.k8s.io", "podgroups", ("get", "list", "watch")),
        ("scheduling.k8s.io", "workloads", ("get", "list", "watch")),
        ("scheduling.x-k8s.io", "podgroups", ("get", "list", "watch")),
        ("scheduling.k8s.io", "podgroups/status", ("update", "patch")),
        ("scheduling.x-k8s.io", "podgroups/status", ("update", "patch")),
        ("", "pods/eviction", ("create",)),
        ("", "pods/status", ("patch",)),
    ],
)
def test_the_scheduler_may_preempt_and_read_gangs(
    group: str, resource: str, verbs: tuple[str, ...]
) -> None:
    role = next(d for d in documents() if d.get("kind") == "ClusterRole")
    rules: list[dict[str, object]] = role["rules"]  # type: ignore[assignment]
    for verb in verbs:
        assert _allowed(rules, group, resource, verb), (group, resource, verb)


def test_every_crd_is_in_the_kustomization_and_the_package() -> None:
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    package = DEPLOY.parent / "gpusched" / "crds"
    for path in sorted((DEPLOY / "crds").glob("*.yaml")):
        assert f"crds/{path.name}" in kustomization["resources"]
        assert (package / path.name).read_bytes() == path.read_bytes()
