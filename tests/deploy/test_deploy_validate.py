"""Every manifest an install creates validates against the Kubernetes OpenAPI schemas
(kubernetes-validate, strict: unknown fields fail) of the supported versions: the kustomize base,
each overlay, and the Helm chart with its default values and with every component toggled.
Objects of gpusched's own CRDs are validated against the CRD's schema instead; third-party ones
(cert-manager's) are left out, by name."""

from __future__ import annotations

import functools
import json
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from deploy_helpers import DEPLOY, OVERLAYS, Obj, kustomize, needs_kubectl, render_chart

VERSIONS = ("1.30.0", "1.32.0", "1.34.0")
"""1.30: the oldest with admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy and bound
tokens that carry their node; 1.32: kubectl's here; 1.34: a recent one."""

THIRD_PARTY = {"cert-manager.io"}
"""Groups whose CRDs are not ours and not Kubernetes': their objects are not validated here."""


@functools.cache
def _crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """``(apiVersion, kind)`` -> openAPIV3Schema, for every version of every CRD of deploy/crds."""
    out = {}
    for path in (DEPLOY / "crds").glob("*.yaml"):
        spec = yaml.safe_load(path.read_text())["spec"]
        for version in spec["versions"]:
            api_version = f"{spec['group']}/{version['name']}"
            out[(api_version, spec["names"]["kind"])] = version["schema"]["openAPIV3Schema"]
    return out


def validate(objs: list[Obj], version: str) -> set[str]:
    """Validate ``objs`` for Kubernetes ``version``; return the groups of those left out."""
    assert objs
    left_out = set()
    for obj in objs:
        schema = _crd_schemas().get((obj["apiVersion"], obj["kind"]))
        group = obj["apiVersion"].rpartition("/")[0]
        if schema is not None:
            jsonschema.validate(obj, schema)
        elif group in THIRD_PARTY:
            left_out.add(group)
        else:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                pytest.fail(f"{obj['kind']} {obj['metadata']['name']} ({version}): {e.message}")
    return left_out


@needs_kubectl
@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("folder", ["", *(f"overlays/{o}" for o in OVERLAYS)])
def test_kustomize_output_validates(folder: str, version: str) -> None:
    assert validate(kustomize(DEPLOY / folder), version) <= THIRD_PARTY


CHART_VALUES: list[dict[str, Any]] = [
    {},
    {"scheduler": {"replicas": 1, "leaderElect": False}, "agent": {"runtimeClassName": ""}},
    {"webhook": {"enabled": False}, "agent": {"ownNodePolicy": False}},
    {"scheduler": {"enabled": False, "nodeSelector": {"pool": "system"}}},
    {"agent": {"enabled": False}, "image": {"repository": "registry.example/gpusched"}},
    {"agent": {"nodeSelector": {"pool": "gpu"}, "tolerations": []}},
]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("values", CHART_VALUES, ids=lambda v: json.dumps(v, separators=(",", ":")))
def test_the_chart_renders_valid_objects(values: dict[str, Any], version: str) -> None:
    assert not validate(render_chart(values), version)
