"""The policy CRDs, generated from the models so the API server and the scheduler agree.

:func:`crd_manifest` turns a model's pydantic JSON schema into a Kubernetes *structural*
schema: ``$ref`` inlined, ``anyOf [X, null]`` (an optional field) collapsed to ``X``, titles,
pydantic defaults and ``additionalProperties: false`` dropped (an unset field means "inherit",
and the server prunes unknown fields instead), docstrings flattened into descriptions. Each
kind adds its names, printer columns and the status subresource. :func:`render` is the YAML
written to ``deploy/crds/`` (``gpusched/crds`` links there); regenerate after changing a model::

    python -m gpusched.gpu_policy.crds        # rewrites deploy/crds/<plural>.gpusched.io.yaml

and ``tests/gpu_policy/test_crds.py`` fails while the files on disk differ from the models.
The simulated cluster installs them like the inventory CRD (:data:`CRD_NAMES`).

:data:`WOOLYAI_KINDS` are WoolyAI's kinds under their group ``woolyai.dev``
(:mod:`gpusched.gpu_policy.woolyai`), so its users' manifests apply unchanged: without a status
subresource (the scheduler writes none to them) and with short names of their own, since two
share a kind and plural with gpusched's (``kubectl get gpuclasses.woolyai.dev``).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml
from pydantic import BaseModel

from gpusched.gpu_policy.models import (
    API_GROUP,
    VERSION,
    ClusterGPUPolicy,
    GPUClass,
    GPUNodePolicy,
)
from gpusched.gpu_policy.woolyai import (
    WOOLY_GROUP,
    WOOLY_VERSION,
    WoolyClusterGPUPolicy,
    WoolyGPUClass,
    WoolyNodePolicy,
)

__all__ = [
    "CRD_NAMES",
    "KINDS",
    "WOOLYAI_KINDS",
    "CRDKind",
    "crd_manifest",
    "main",
    "render",
    "structural_schema",
    "write_crds",
]


@dataclass(frozen=True, slots=True)
class CRDKind:
    """What a CRD states beyond the model's schema."""

    model: type[BaseModel]
    kind: str
    plural: str
    singular: str
    short_names: tuple[str, ...]
    description: str
    columns: tuple[dict[str, Any], ...]
    group: str = API_GROUP
    version: str = VERSION
    status: bool = True
    """Whether the kind has a ``status`` subresource (the scheduler writes it)."""
    source: str = "gpusched/gpu_policy/models.py"
    """The module of the model, named in the generated file's header."""

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{self.group}"

    @property
    def file_name(self) -> str:
        return f"{self.crd_name}.yaml"


def _column(
    name: str, type_: str, path: str, description: str, priority: int = 0
) -> dict[str, Any]:
    col: dict[str, Any] = {
        "name": name,
        "type": type_,
        "description": description,
        "jsonPath": path,
    }
    if priority:
        col["priority"] = priority
    return col


_AGE: Final = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


def _condition(type_: str) -> str:
    return f'.status.conditions[?(@.type=="{type_}")].status'


_LIMIT_COLUMNS: Final = (
    _column("Sharing", "boolean", ".spec.allowSharing", "Whether pods may share a GPU."),
    _column("Clients/GPU", "integer", ".spec.maxClientsPerGPU", "Most pods on one GPU."),
    _column("Clients/Node", "integer", ".spec.maxClientsPerNode", "Most GPU pods on a node."),
    _column(
        "Overcommit%",
        "integer",
        ".spec.vramOvercommitPercent",
        "Percent of physical VRAM that may be promised (100 = none).",
    ),
    _column("Nodes", "integer", ".status.matchingNodes", "Nodes the policy governs."),
    _column("Applied", "string", _condition("Applied"), "Whether it decides a field somewhere."),
    _column(
        "Overridden",
        "string",
        _condition("Overridden"),
        "Whether another policy wins a field it sets.",
        priority=1,
    ),
)

KINDS: Final[tuple[CRDKind, ...]] = (
    CRDKind(
        model=GPUClass,
        kind="GPUClass",
        plural="gpuclasses",
        singular="gpuclass",
        short_names=("gpuc",),
        description="A kind of GPU pods may ask for with gpusched.io/gpu-class.",
        columns=(
            _column("Mode", "string", ".spec.sharing.mode", "shared or exclusive."),
            _column(
                "Clients/GPU",
                "integer",
                ".spec.sharing.maxClientsPerGPU",
                "Most pods of the class on one GPU (empty: the node's policy).",
            ),
            _column("MinVRAM(MiB)", "integer", ".spec.minVramMiB", "Least memory per GPU."),
            _column("MIG", "string", ".spec.migProfiles", "MIG profiles the class means."),
            _column("Nodes", "integer", ".status.matchingNodes", "Nodes with a GPU of the class."),
            _column("GPUs", "integer", ".status.matchingGPUs", "GPUs of the class."),
            _column("Price", "number", ".spec.price", "Cost per GPU-hour.", priority=1),
            _column("Products", "string", ".spec.products", "NVML product names.", priority=1),
            _AGE,
        ),
    ),
    CRDKind(
        model=GPUNodePolicy,
        kind="GPUNodePolicy",
        plural="gpunodepolicies",
        singular="gpunodepolicy",
        short_names=("gnp",),
        description="GPU sharing limits for the nodes its nodeSelector matches.",
        columns=(
            *_LIMIT_COLUMNS,
            _column(
                "Selector",
                "string",
                ".spec.nodeSelector.matchLabels",
                "Labels of the nodes it governs.",
                priority=1,
            ),
            _AGE,
        ),
    ),
    CRDKind(
        model=ClusterGPUPolicy,
        kind="ClusterGPUPolicy",
        plural="clustergpupolicies",
        singular="clustergpupolicy",
        short_names=("cgp",),
        description="Cluster-wide GPU sharing defaults; only the one named default applies.",
        columns=(*_LIMIT_COLUMNS[:-1], _AGE),
    ),
)

_WOOLYAI: Final = "gpusched/gpu_policy/woolyai.py"

WOOLYAI_KINDS: Final[tuple[CRDKind, ...]] = (
    CRDKind(
        model=WoolyGPUClass,
        kind="GPUClass",
        plural="gpuclasses",
        singular="gpuclass",
        short_names=("wgpuc",),
        description="WoolyAI's GPU class (cuda.scheduler.io/gpu-class), read by gpusched as "
        "its own GPUClass.",
        columns=(
            _column("Mode", "string", ".spec.sharing.mode", "shared or exclusive."),
            _column("Replicas", "integer", ".spec.sharing.replicas", "Most pods per GPU."),
            _column(
                "MinVRAM(MiB)", "integer", ".spec.requirements.minVramMiB", "Least memory per GPU."
            ),
            _AGE,
        ),
        group=WOOLY_GROUP,
        version=WOOLY_VERSION,
        status=False,
        source=_WOOLYAI,
    ),
    CRDKind(
        model=WoolyNodePolicy,
        kind="WoolyNodePolicy",
        plural="woolynodepolicies",
        singular="woolynodepolicy",
        short_names=("wnp",),
        description="WoolyAI's GPU limits for the nodes its targetSelector matches, read by "
        "gpusched as a GPUNodePolicy.",
        columns=(
            _column("Clients/GPU", "integer", ".spec.maxClientsPerGPU", "Most pods on one GPU."),
            _column("Clients/Node", "integer", ".spec.maxClientsPerNode", "Most GPU pods."),
            _column(
                "Overcommit+%",
                "integer",
                ".spec.vramOvercommitPercent",
                "VRAM promised beyond the memory, percent (0 = none).",
            ),
            _AGE,
        ),
        group=WOOLY_GROUP,
        version=WOOLY_VERSION,
        status=False,
        source=_WOOLYAI,
    ),
    CRDKind(
        model=WoolyClusterGPUPolicy,
        kind="ClusterGPUPolicy",
        plural="clustergpupolicies",
        singular="clustergpupolicy",
        short_names=("wcgp",),
        description="WoolyAI's cluster-wide GPU defaults (the one named default), read by "
        "gpusched after its own ClusterGPUPolicy.",
        columns=(
            _column(
                "Overcommit+%",
                "integer",
                ".spec.defaultVramOvercommitPercent",
                "VRAM promised beyond the memory, percent (0 = none).",
            ),
            _AGE,
        ),
        group=WOOLY_GROUP,
        version=WOOLY_VERSION,
        status=False,
        source=_WOOLYAI,
    ),
)

CRD_NAMES: Final[tuple[str, ...]] = tuple(k.crd_name for k in (*KINDS, *WOOLYAI_KINDS))
"""``gpuclasses.gpusched.io``, ``gpunodepolicies.gpusched.io``,
``clustergpupolicies.gpusched.io`` and WoolyAI's ``gpuclasses.woolyai.dev``,
``woolynodepolicies.woolyai.dev``, ``clustergpupolicies.woolyai.dev``: the files under
``deploy/crds/`` are these plus ``.yaml``."""

_DROPPED: Final = frozenset({"title", "default", "$defs"})
_RST: Final = re.compile(r"``([^`]*)``")


def _description(text: str) -> str:
    """Docstring -> one paragraph of plain text."""
    return " ".join(_RST.sub(r"\1", text).split())


def structural_schema(schema: dict[str, Any], defs: dict[str, Any] | None = None) -> dict[str, Any]:
    """A pydantic JSON schema (validation mode, by alias) as a structural OpenAPI v3 schema."""
    defs = schema.get("$defs", {}) if defs is None else defs
    if "$ref" in schema:
        target = defs[schema["$ref"].rsplit("/", 1)[1]]
        merged = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
        return structural_schema(merged, defs)
    if "anyOf" in schema:
        branches = [b for b in schema["anyOf"] if b.get("type") != "null"]
        if len(branches) != 1:
            raise ValueError(f"cannot make a structural schema of anyOf {schema['anyOf']}")
        rest = {k: v for k, v in schema.items() if k != "anyOf"}
        return structural_schema({**branches[0], **rest}, defs)
    out: dict[str, Any] = {}
    if "const" in schema:  # apiVersion, kind: the server checks these itself
        return {"type": "string"}
    for key, value in schema.items():
        if key in _DROPPED:
            continue
        if key == "description":
            out[key] = _description(value)
        elif key == "properties":
            out[key] = {name: structural_schema(sub, defs) for name, sub in value.items()}
        elif key == "items":
            out[key] = structural_schema(value, defs)
        elif key == "additionalProperties":
            if isinstance(value, dict):
                out[key] = structural_schema(value, defs)
        else:
            out[key] = value
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    return out


def _order(schema: dict[str, Any]) -> dict[str, Any]:
    """Keys in the order people write them: type and description first."""
    first = [k for k in ("type", "description", "required") if k in schema]
    out: dict[str, Any] = {k: schema[k] for k in first}
    for k, v in schema.items():
        if k in out:
            continue
        if k == "properties":
            v = {name: _order(sub) for name, sub in v.items()}
        elif k in ("items", "additionalProperties") and isinstance(v, dict):
            v = _order(v)
        out[k] = v
    return out


def crd_manifest(kind: CRDKind) -> dict[str, Any]:
    """The ``CustomResourceDefinition`` of ``kind``."""
    model_schema = kind.model.model_json_schema(by_alias=True, mode="validation")
    root = structural_schema(model_schema)
    root["properties"]["metadata"] = {"type": "object"}
    root["required"] = [r for r in root.get("required", []) if r != "metadata"]
    if not root["required"]:
        del root["required"]
    root["description"] = kind.description
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": kind.crd_name,
            "labels": {
                "app.kubernetes.io/name": "gpusched",
                "app.kubernetes.io/component": "crd",
            },
        },
        "spec": {
            "group": kind.group,
            "scope": "Cluster",
            "names": {
                "kind": kind.kind,
                "listKind": f"{kind.kind}List",
                "plural": kind.plural,
                "singular": kind.singular,
                "shortNames": list(kind.short_names),
                "categories": ["gpusched"],
            },
            "versions": [
                {
                    "name": kind.version,
                    "served": True,
                    "storage": True,
                    **({"subresources": {"status": {}}} if kind.status else {}),
                    "additionalPrinterColumns": [dict(c) for c in kind.columns],
                    "schema": {"openAPIV3Schema": _order(root)},
                }
            ],
        },
    }


def render(kind: CRDKind) -> str:
    """The YAML file of ``kind``'s CRD, as written to ``deploy/crds/``."""
    header = (
        f"# {kind.kind}: generated from {kind.source} by\n"
        "# `python -m gpusched.gpu_policy.crds`; edit the model, not this file.\n"
    )
    body = yaml.safe_dump(crd_manifest(kind), sort_keys=False, width=100)
    return header + body


def write_crds(directory: Path) -> list[Path]:
    """Write every policy CRD (gpusched's and WoolyAI's) into ``directory``; returns the
    files written."""
    written = []
    for kind in (*KINDS, *WOOLYAI_KINDS):
        path = directory / kind.file_name
        path.write_text(render(kind))
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    """``python -m gpusched.gpu_policy.crds [DIR]``: DIR defaults to the repository's
    ``deploy/crds``."""
    args = sys.argv[1:] if argv is None else argv
    directory = Path(args[0]) if args else Path(__file__).resolve().parents[2] / "deploy" / "crds"
    if not directory.is_dir():
        print(f"{directory} is not a directory; pass the deploy/crds folder", file=sys.stderr)
        return 2
    for path in write_crds(directory):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
