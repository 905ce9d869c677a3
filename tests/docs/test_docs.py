"""The documentation stays true to the code: links resolve, the reference lists what the code
reads and writes, and the plugin guide's worked example runs.

- Every relative link in ``README.md`` and ``docs/*.md`` names a file that exists, and a
  ``#fragment`` names a heading of that file (GitHub's anchors). ``docs/README.md``, the
  index, links every doc.
- ``docs/reference.md`` names every annotation, label and resource the code defines for pods
  and nodes (``gpusched.annotations``, each request reader's ``ANNOTATIONS`` and
  ``RESOURCES``, the gang readers, the labels the agent writes) and every field of every CRD in
  ``deploy/crds/`` (``crd_fields``, which also printed the tables there).
- ``docs/operations.md`` names every metric the scheduler, the agent, the GPUWorkload controller
  and preflight register.
- Every whole manifest in the pages written with this test (the README, concepts, reference,
  operations, migrating) is accepted: custom resources by the simulated API server with strict
  field validation and then by gpusched's own readers, pods' GPU requests by
  ``read_gpu_request``, scheduler configurations by ``parse_config``.
- ``docs/plugins.md``'s "A worked example": its plugin file, registered as one more file of a
  plugins package and enabled by its configuration block, changes where pods go on the
  simulated cluster (the same pods land elsewhere without it), and its entry point block
  names the class.

Cost: the file checks take well under a second; the manifests one simulated API server
(about a second); the worked example two schedulers on a simulated cluster and a mypy run
(about 15 s).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import re
import subprocess
import sys
import tomllib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from prometheus_client import CollectorRegistry

import gpusched.annotations as annotations
import gpusched.locality as locality
from gpusched.agent.main import AgentMetrics
from gpusched.clock import FakeClock
from gpusched.framework import SchedulerConfiguration, default_config, in_tree, parse_config
from gpusched.gangs import kueue, scheduler_plugins, spec, volcano
from gpusched.gpu_policy.models import parse_policy_object
from gpusched.gpu_policy.woolyai import parse_woolyai_object
from gpusched.gpu_requests import gpuclaim, hami, kai, native, nvidia, woolyai
from gpusched.inventory import (
    LABEL_CUDA_DRIVER_MAJOR,
    LABEL_CUDA_DRIVER_MINOR,
    LABEL_CUDA_DRIVER_REV,
    LABEL_CUDA_RUNTIME_MAJOR,
    LABEL_CUDA_RUNTIME_MINOR,
    LABEL_GPU_COUNT,
    LABEL_GPU_MEMORY,
    LABEL_GPU_PRESENT,
    LABEL_GPU_PRODUCT,
    LABEL_INVENTORY_GPU_COUNT,
    LABEL_INVENTORY_GPU_PRODUCT,
    LABEL_MIG_STRATEGY,
)
from gpusched.kube.client import Kube, resource_path
from gpusched.kube.errors import APIConflict, APIError
from gpusched.metrics import Metrics
from gpusched.plugins import gpu_cost, gpu_fit
from gpusched.preflight import Preflight
from gpusched.scheduler import Scheduler
from gpusched.sim import SimCluster
from gpusched.sim.fleet import ClusterSpec, load_cluster_spec, node_names
from gpusched.webhook.mutate import MIG_FALLBACK_APPLIED
from gpusched.workloads.controller import WorkloadMetrics

sys.path.insert(0, str(Path(__file__).parents[1] / "scheduler"))

from scheduler_bed import bound, objects_until

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)
_CODE_SPAN = re.compile(r"`[^`\n]*`")


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def anchors(text: str) -> set[str]:
    """GitHub's heading anchors: lowercase, punctuation dropped, spaces to hyphens."""
    out = set()
    for line in _FENCE.sub("", text).splitlines():
        if match := re.match(r"#{1,6}\s+(.*)", line):
            slug = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower()).replace(" ", "-")
            out.add(slug)
    return out


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    broken = []
    for target in _LINK.findall(_CODE_SPAN.sub("", _FENCE.sub("", text))):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        file_part, _, fragment = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        if not resolved.exists():
            broken.append(target)
            continue
        text_there = resolved.read_text(encoding="utf-8") if resolved.suffix == ".md" else ""
        if fragment and text_there and fragment not in anchors(text_there):
            broken.append(target)
    assert not broken, f"{path.relative_to(ROOT)}: links that do not resolve: {broken}"


def test_the_index_links_every_doc() -> None:
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    linked = set(_LINK.findall(index))
    expected = {p.name for p in DOCS.glob("*.md") if p.name != "README.md"}
    assert not expected - linked, f"docs/README.md does not link: {sorted(expected - linked)}"


# -- the reference ----------------------------------------------------------------------------

REFERENCE = DOCS / "reference.md"


def code_names() -> set[str]:
    """Every annotation, label and resource name the code defines for pods and nodes."""
    names = {
        getattr(annotations, n)
        for n in annotations.__all__
        if isinstance(getattr(annotations, n), str) and n != "PREFIX"
    }
    for reader in (native, nvidia, hami, kai, woolyai, gpuclaim):
        names |= set(reader.ANNOTATIONS) | set(reader.RESOURCES)
    names |= set(kai.ANNOTATIONS)
    names |= {*volcano.ANNOTATIONS, scheduler_plugins.LABEL, kueue.LABEL, kueue.COUNT_ANNOTATION}
    names |= {spec.TOPOLOGY_ANNOTATION, spec.TOPOLOGY_POLICY_ANNOTATION}
    names |= {MIG_FALLBACK_APPLIED, gpu_fit.WOOLYAI_GPU_IDS, gpu_fit.WOOLYAI_RESERVED_VRAM_MIB}
    names |= {gpu_cost.PRICE_LABEL, gpu_cost.CHEAP_LABEL}
    names |= {locality.MODEL_ANNOTATION, locality.MODEL_LABEL, locality.CACHED_MODELS_ANNOTATION}
    names |= {
        LABEL_GPU_PRESENT,
        LABEL_GPU_COUNT,
        LABEL_GPU_PRODUCT,
        LABEL_GPU_MEMORY,
        LABEL_MIG_STRATEGY,
        LABEL_CUDA_DRIVER_MAJOR,
        LABEL_CUDA_DRIVER_MINOR,
        LABEL_CUDA_DRIVER_REV,
        LABEL_CUDA_RUNTIME_MAJOR,
        LABEL_CUDA_RUNTIME_MINOR,
        LABEL_INVENTORY_GPU_COUNT,
        LABEL_INVENTORY_GPU_PRODUCT,
    }
    return names


def test_the_reference_names_every_annotation_label_and_resource() -> None:
    text = REFERENCE.read_text(encoding="utf-8")
    missing = sorted(name for name in code_names() if f"`{name}" not in text)
    assert not missing, f"docs/reference.md does not list: {missing}"
    assert f"`{nvidia.RESOURCE_PREFIX}<profile>`" in text  # the MIG resources, by pattern


_NOT_WALKED = ("nodeSelector", "minResources", "matchLabels", "targetSelector", "conditions")
"""Fields whose contents are a standard type (a label selector, a resource list, conditions):
listed themselves, not field by field."""


def crd_fields(schema: dict[str, Any], prefix: str) -> Iterator[tuple[str, str, str]]:
    """``(path, type, first sentence of the description)`` of every field under ``schema``."""
    for key, value in (schema.get("properties") or {}).items():
        path = f"{prefix}.{key}"
        kind = value.get("type", "")
        text = " ".join((value.get("description") or "").split())
        first = re.split(r"(?<!e\.g\.)(?<!i\.e\.)(?<=\.)\s+(?=[A-Z`])", text)[0]
        if kind == "array":
            items = value.get("items") or {}
            yield path, f"list of {items.get('type', '')}", first
            if items.get("type") == "object" and key not in _NOT_WALKED:
                yield from crd_fields(items, path + "[]")
        else:
            yield path, kind, first
            if kind == "object" and key not in _NOT_WALKED:
                yield from crd_fields(value, path)


def crds() -> Iterator[tuple[str, str, list[tuple[str, str, str]]]]:
    """``(kind, group/version, fields)`` of every CRD version in ``deploy/crds``."""
    for path in sorted((ROOT / "deploy" / "crds").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text(encoding="utf-8"))
        for version in crd["spec"]["versions"]:
            properties = version["schema"]["openAPIV3Schema"]["properties"]
            fields = [
                f
                for part in ("spec", "status")
                if part in properties
                for f in crd_fields(properties[part], part)
            ]
            yield crd["spec"]["names"]["kind"], f"{crd['spec']['group']}/{version['name']}", fields


def test_the_reference_lists_every_crd_field() -> None:
    text = REFERENCE.read_text(encoding="utf-8")
    missing = []
    for kind, group_version, fields in crds():
        section = f"`{kind}` ({group_version}"
        if section not in text:
            missing.append(section)
            continue
        body = text.split(section, 1)[1].split("\n#", 1)[0]
        missing += [f"{kind} {path}" for path, _, _ in fields if f"`{path}`" not in body]
    assert not missing, f"docs/reference.md lacks: {missing}"


# -- operations -------------------------------------------------------------------------------


def registered_metrics() -> set[str]:
    names = set()
    preflight_registry = CollectorRegistry()
    Preflight(cast(Kube, None), SchedulerConfiguration(), FakeClock(), registry=preflight_registry)
    registries = (Metrics(), AgentMetrics(), WorkloadMetrics())
    for registry in (*(r.registry for r in registries), preflight_registry):
        for family in registry.collect():
            names.add(family.name + ("_total" if family.type == "counter" else ""))
    return names


def test_operations_names_every_metric() -> None:
    text = (DOCS / "operations.md").read_text(encoding="utf-8")
    missing = sorted(name for name in registered_metrics() if f"`{name}" not in text)
    assert not missing, f"docs/operations.md does not list: {missing}"


# -- the plugin guide's worked example --------------------------------------------------------


def worked_example() -> dict[str, str]:
    """The code blocks of docs/plugins.md's "A worked example", by the file their first line
    names (``# prefer_gpu_memory.py``), without that line."""
    text = (DOCS / "plugins.md").read_text(encoding="utf-8")
    section = text.split("## A worked example", 1)[1].split("\n## ", 1)[0]
    blocks = {}
    for body in re.findall(r"```\w+\n(.*?)```", section, flags=re.DOTALL):
        first, _, rest = body.partition("\n")
        if first.startswith("# ") and "." in first:
            blocks[first[2:].strip()] = rest
    return blocks


def test_the_worked_example_has_its_files() -> None:
    blocks = worked_example()
    assert {"plugins/prefer_gpu_memory.py", "gpusched.yaml", "pyproject.toml"} <= set(blocks)
    entry_points = tomllib.loads(blocks["pyproject.toml"])["project"]["entry-points"]
    assert entry_points["gpusched.plugins"] == {
        "PreferGPUMemory": "prefer_gpu_memory:PreferGPUMemory"
    }


@pytest.fixture
def example_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A plugins package holding the worked example's file, as ``plugins/`` would."""
    name = "docs_worked_example"
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text("")
    source = worked_example()["plugins/prefer_gpu_memory.py"]
    (tmp_path / name / "prefer_gpu_memory.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    yield name
    for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[module]


def fleet() -> ClusterSpec:
    """The ``mixed`` fleet's DGX H100 (80 GB, tainted), DGX-1V (32 GB) and A40 (45 GB) pools."""
    mixed = load_cluster_spec("mixed")
    pools = tuple(p for p in mixed.pools if p.name in ("dgx-h100", "dgx-v100", "a40"))
    return mixed.model_copy(update={"pools": pools})


PODS = resource_path("", "v1", "pods", "default")


def pod(name: str, gpus: int, node: str = "") -> dict[str, Any]:
    spec_: dict[str, Any] = {
        "schedulerName": "gpusched",
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        "containers": [
            {
                "name": "main",
                "image": "pause",
                "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
            }
        ],
    }
    if node:
        spec_["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec_}


@contextlib.asynccontextmanager
async def running(sim: SimCluster, scheduler: Scheduler) -> AsyncIterator[None]:
    task = asyncio.create_task(scheduler.run())
    try:
        await asyncio.wait_for(scheduler.ready.wait(), timeout=60)
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def placements(sim: SimCluster, names: list[str]) -> dict[str, str]:
    """Where the pods named went, once all are bound (a watch, never a sleep)."""
    pods = await objects_until(sim.kube, PODS, lambda ps: set(names) <= set(bound(ps)))
    return {n: pods[n]["spec"]["nodeName"] for n in names}


@pytest.mark.parametrize("with_plugin", [True, False], ids=["enabled", "without"])
async def test_the_worked_example_changes_where_pods_go(
    example_package: str, tmp_path: Path, with_plugin: bool
) -> None:
    """The A40 and V100 nodes already run pods, so GPUFit's bin packing prefers them; with
    the example enabled, 1-GPU pods go to the H100 nodes (the most memory) all the same."""
    blocks = worked_example()
    registry = in_tree().merged(in_tree(example_package).values())
    config = (
        parse_config(blocks["gpusched.yaml"], "gpusched.yaml") if with_plugin else default_config()
    )
    async with SimCluster(fleet(), kubelets=False, kubeconfig_path=tmp_path / "kc") as sim:
        await sim.kube.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpusched-system"}},
        )
        nodes = node_names(fleet())
        busy = [n for n in nodes if "h100" not in n]
        for i, node in enumerate(busy):
            await sim.kube.create(PODS, pod(f"running-{i}", 4, node))
        async with running(sim, Scheduler(sim.kube, config, registry=registry)):
            names = [f"train-{i}" for i in range(4)]
            for name in names:
                await sim.kube.create(PODS, pod(name, 1))
            placed = await placements(sim, names)
    on_h100 = {name for name, node in placed.items() if "h100" in node}
    assert on_h100 == (set(names) if with_plugin else set()), placed


def test_the_worked_example_is_clean_code(example_package: str, tmp_path: Path) -> None:
    """ruff (the repository's rules) and mypy strict pass on the example's file as written."""
    path = tmp_path / example_package / "prefer_gpu_memory.py"
    config = str(ROOT / "pyproject.toml")
    for command in (
        ["ruff", "check", "--config", config, str(path)],
        ["ruff", "format", "--check", "--config", config, str(path)],
        ["mypy", "--strict", "--no-incremental", str(path)],
    ):
        out = subprocess.run(
            [sys.executable, "-m", *command], capture_output=True, text=True, check=False
        )
        assert out.returncode == 0, out.stdout + out.stderr


# -- the manifests the docs show --------------------------------------------------------------

WRITTEN_HERE = ("README.md", "concepts.md", "reference.md", "operations.md", "migrating.md")
"""The pages whose manifests this test checks (the topic docs test their own)."""


def manifests() -> Iterator[tuple[str, dict[str, Any]]]:
    """``(page, object)`` for every whole object (``apiVersion`` and ``kind``) in a YAML block."""
    for name in WRITTEN_HERE:
        text = (DOCS / name).read_text(encoding="utf-8")
        for block in re.findall(r"^```yaml\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE):
            for obj in yaml.safe_load_all(block):
                if isinstance(obj, dict) and "apiVersion" in obj and "kind" in obj:
                    yield name, obj


def served_crds() -> dict[tuple[str, str], dict[str, Any]]:
    """The CRDs of ``deploy/crds`` by ``(apiVersion, kind)``."""
    out = {}
    for path in sorted((ROOT / "deploy" / "crds").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text(encoding="utf-8"))
        for version in crd["spec"]["versions"]:
            out[f"{crd['spec']['group']}/{version['name']}", crd["spec"]["names"]["kind"]] = crd
    return out


async def test_the_manifests_shown_are_accepted(tmp_path: Path) -> None:
    """Custom resources are created on the simulated API server with strict field validation
    (an unknown or misspelt field fails), pods' GPU requests read without error, and
    scheduler configurations parse."""
    from gpusched.gpu_requests import read_gpu_request

    crds = served_crds()
    objects = list(manifests())
    kinds = {(o["apiVersion"], o["kind"]) for _, o in objects}
    assert ("v1", "Pod") in kinds, kinds
    assert len(kinds & set(crds)) >= 5, kinds
    async with SimCluster("dgx-h100", kubelets=False, kubeconfig_path=tmp_path / "kc") as sim:
        for crd in crds.values():
            with contextlib.suppress(APIConflict):  # shipped with the simulation already
                await sim.kube.create(
                    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd
                )
        for page, obj in objects:
            where = f"{page}: {obj['kind']} {obj.get('metadata', {}).get('name', '')}"
            if obj["kind"] == "Pod":
                read_gpu_request(obj)  # raises RequestError naming the field
            elif obj["kind"] == "SchedulerConfiguration":
                parse_config(yaml.safe_dump(obj), where)
            elif (obj["apiVersion"], obj["kind"]) in crds:
                crd = crds[obj["apiVersion"], obj["kind"]]
                group, version = obj["apiVersion"].split("/")
                namespace = "default" if crd["spec"]["scope"] == "Namespaced" else None
                path = resource_path(group, version, crd["spec"]["names"]["plural"], namespace)
                try:
                    stored = await sim.kube.create(path, obj, {"fieldValidation": "Strict"})
                except APIError as exc:
                    pytest.fail(f"{where}: {exc}")
                # ... and gpusched reads it as valid (raises PolicyError / RequestError).
                if group == "gpusched.io" and obj["kind"] != "GPUNodeInventory":
                    parse_policy_object(stored)
                elif group == "woolyai.dev":
                    parse_woolyai_object(stored)
                elif obj["kind"] == "GpuClaim":
                    gpuclaim.partial_from_spec(where, stored["spec"])
