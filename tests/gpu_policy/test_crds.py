"""The policy CRDs: generated from the models, on disk as generated, served by the simulation."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpusched.gpu_policy import crds
from gpusched.gpu_policy.crds import CRD_NAMES, KINDS, CRDKind, crd_manifest, render
from gpusched.gpu_policy.models import parse_policy_object
from gpusched.kube.errors import APIClientError
from gpusched.sim import SimCluster
from gpusched.sim import crd as apiserver_crd

REPO = Path(__file__).resolve().parents[2]
KUBECTL = shutil.which("kubectl")

SAMPLES: dict[str, dict[str, Any]] = {
    "GPUClass": {
        "apiVersion": "gpusched.io/v1alpha1",
        "kind": "GPUClass",
        "metadata": {"name": "h100-mig"},
        "spec": {
            "description": "MIG slices of H100s",
            "nodeSelector": {
                "matchLabels": {"nvidia.com/mig.strategy": "mixed"},
                "matchExpressions": [
                    {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["x"]}
                ],
            },
            "products": ["NVIDIA H100 80GB HBM3"],
            "minVramMiB": 9000,
            "migProfiles": ["1g.10gb", "2g.20gb"],
            "sharing": {"mode": "exclusive"},
            "price": 1.25,
        },
    },
    "GPUNodePolicy": {
        "apiVersion": "gpusched.io/v1alpha1",
        "kind": "GPUNodePolicy",
        "metadata": {"name": "big"},
        "spec": {
            "nodeSelector": {"matchLabels": {"pool": "big"}},
            "allowSharing": True,
            "maxClientsPerGPU": 4,
            "maxClientsPerNode": 16,
            "vramOvercommitPercent": 150,
        },
    },
    "ClusterGPUPolicy": {
        "apiVersion": "gpusched.io/v1alpha1",
        "kind": "ClusterGPUPolicy",
        "metadata": {"name": "default"},
        "spec": {"maxClientsPerGPU": 8, "vramOvercommitPercent": 120},
    },
}


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
def test_files_on_disk_are_the_generated_ones(kind: CRDKind) -> None:
    on_disk = REPO / "deploy" / "crds" / kind.file_name
    assert on_disk.read_text() == render(kind), (
        f"{on_disk} is stale: run `python -m gpusched.gpu_policy.crds`"
    )
    packaged = REPO / "gpusched" / "crds" / kind.file_name  # the link into deploy/crds
    assert packaged.read_bytes() == on_disk.read_bytes()
    kustomization = yaml.safe_load((REPO / "deploy" / "crds" / "Kustomization").read_text())
    assert kind.file_name in kustomization["resources"]


def test_generator_writes_every_kind(tmp_path: Path) -> None:
    assert crds.main([str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"{n}.yaml" for n in CRD_NAMES)
    assert crds.main([str(tmp_path / "missing")]) == 2


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
def test_crd_passes_apiserver_validation_and_keeps_every_sample_field(kind: CRDKind) -> None:
    manifest = crd_manifest(kind)
    apiserver_crd.validate_crd(manifest)
    info = apiserver_crd.CRDInfo.from_crd(manifest)
    assert (info.plural, info.short_names, info.namespaced) == (
        kind.plural,
        kind.short_names,
        False,
    )
    (version,) = info.versions
    assert version.has_status_subresource
    schema = version.schema
    sample = SAMPLES[kind.kind]
    parse_policy_object(sample)  # the model accepts it too
    assert apiserver_crd.unknown_field_paths(sample, schema) == []
    assert apiserver_crd.prepare_custom_resource(sample, schema) == sample
    assert apiserver_crd.validate_custom_resource(sample, schema, kind=kind.kind) == []


def _structural_nodes(schema: dict[str, Any]) -> list[dict[str, Any]]:
    out = [schema]
    for sub in (schema.get("properties") or {}).values():
        out += _structural_nodes(sub)
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            out += _structural_nodes(schema[key])
    return out


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
def test_schema_is_structural_and_described(kind: CRDKind) -> None:
    root = crd_manifest(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for node in _structural_nodes(root):
        assert "type" in node, node
        assert not {"$ref", "anyOf", "allOf", "oneOf", "title", "default"} & node.keys(), node
    spec = root["properties"]["spec"]
    for name, prop in spec["properties"].items():
        assert prop.get("description"), f"spec.{name} has no description"
        assert "``" not in prop["description"]


COLUMNS = [
    ("GPUClass", ["Mode", "Clients/GPU", "MinVRAM(MiB)", "MIG", "Nodes", "GPUs", "Age"]),
    (
        "GPUNodePolicy",
        ["Sharing", "Clients/GPU", "Clients/Node", "Overcommit%", "Nodes", "Applied", "Age"],
    ),
    (
        "ClusterGPUPolicy",
        ["Sharing", "Clients/GPU", "Clients/Node", "Overcommit%", "Nodes", "Applied", "Age"],
    ),
]


@pytest.mark.parametrize(("kind_name", "shown"), COLUMNS)
def test_printer_columns(kind_name: str, shown: list[str]) -> None:
    (kind,) = [k for k in KINDS if k.kind == kind_name]
    columns = crd_manifest(kind)["spec"]["versions"][0]["additionalPrinterColumns"]
    assert [c["name"] for c in columns if not c.get("priority")] == shown


# --- Served by the simulated cluster --------------------------------------------------------


def _path(plural: str, name: str = "") -> str:
    return f"/apis/gpusched.io/v1alpha1/{plural}" + (f"/{name}" if name else "")


REJECTED_BY_SERVER = [
    ("gpunodepolicies", {"nodeSelector": {}, "vramOvercommitPercent": 30}, "vramOvercommitPercent"),
    ("gpunodepolicies", {"maxClientsPerGPU": 4}, "spec.nodeSelector"),
    ("clustergpupolicies", {"maxClientsPerGPU": 0}, "spec.maxClientsPerGPU"),
    ("gpuclasses", {"sharing": {"mode": "Shared"}}, "spec.sharing.mode"),
    ("gpuclasses", {"migProfiles": ["big"]}, "spec.migProfiles[0]"),
]


async def test_the_simulated_cluster_serves_the_policy_kinds() -> None:
    async with SimCluster(None, kubelets=False) as sim:
        kube = sim.kube
        for kind in KINDS:
            crd = await kube.get(
                f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{kind.crd_name}"
            )
            established = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
            assert established["Established"] == "True"
            sample = SAMPLES[kind.kind]
            created = await kube.create(_path(kind.plural), sample)
            assert created["spec"] == sample["spec"]
            parse_policy_object(created)

        # status is a subresource: a write to the main resource leaves it alone
        name = SAMPLES["GPUNodePolicy"]["metadata"]["name"]
        current = await kube.get(_path("gpunodepolicies", name))
        current["status"] = {
            "matchingNodes": 3,
            "conditions": [
                {
                    "type": "Overridden",
                    "status": "True",
                    "reason": "Overridden",
                    "message": "GPUNodePolicy/big loses maxClientsPerGPU on 3 nodes",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ],
        }
        updated = await kube.replace(_path("gpunodepolicies", name) + "/status", current)
        assert updated["status"]["matchingNodes"] == 3
        assert parse_policy_object(updated).status is not None

        for plural, spec, fragment in REJECTED_BY_SERVER:
            kind = {"gpunodepolicies": "GPUNodePolicy", "clustergpupolicies": "ClusterGPUPolicy"}
            body = {
                "apiVersion": "gpusched.io/v1alpha1",
                "kind": kind.get(plural, "GPUClass"),
                "metadata": {"name": "bad"},
                "spec": spec,
            }
            with pytest.raises(APIClientError) as info:
                await kube.create(_path(plural), body)
            assert info.value.code == 422
            assert fragment in info.value.message, info.value.message


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
async def test_kubectl_get_shows_the_columns() -> None:
    assert KUBECTL is not None
    async with SimCluster(None, kubelets=False) as sim:
        for kind in KINDS:
            await sim.kube.create(_path(kind.plural), SAMPLES[kind.kind])
        proc = await asyncio.create_subprocess_exec(
            KUBECTL,
            "--kubeconfig",
            str(sim.kubeconfig_path),
            "get",
            "gnp,cgp,gpuc",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={"HOME": str(sim.kubeconfig_path.parent), "PATH": "/usr/bin:/bin"},
        )
        out, err = await proc.communicate()
        assert proc.returncode == 0, err.decode()
        text = out.decode()
        assert "OVERCOMMIT%" in text
        assert "gpunodepolicy.gpusched.io/big" in text
        assert "clustergpupolicy.gpusched.io/default" in text
        assert "gpuclass.gpusched.io/h100-mig" in text
        big = next(line for line in text.splitlines() if "/big" in line).split()
        assert big[1:5] == ["true", "4", "16", "150"]
