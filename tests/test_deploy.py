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
