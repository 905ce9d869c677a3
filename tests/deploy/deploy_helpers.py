"""What the deploy tests share: the built manifests (``kubectl kustomize`` of deploy/ and of each
overlay, the Helm chart rendered by Helm's own library) and small readers over them."""

from __future__ import annotations

import functools
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
CHART = DEPLOY / "helm" / "gpusched"
OVERLAYS = sorted(p.name for p in (DEPLOY / "overlays").iterdir() if p.is_dir())
NAMESPACE = "gpusched-system"
KUBECTL = shutil.which("kubectl")

needs_kubectl = pytest.mark.skipif(
    KUBECTL is None, reason="kubectl (with kustomize) is not installed"
)

Obj = dict[str, Any]
Key = tuple[str, str, str]


def key(obj: Obj) -> Key:
    """``(kind, namespace, name)``: what identifies an object in an install."""
    meta = obj.get("metadata") or {}
    return obj["kind"], meta.get("namespace", ""), meta["name"]


@functools.cache
def _kustomize(folder: str) -> tuple[Obj, ...]:
    assert KUBECTL is not None
    out = subprocess.run(
        [KUBECTL, "kustomize", folder], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    return tuple(d for d in yaml.safe_load_all(out.stdout) if d)


def kustomize(folder: Path) -> list[Obj]:
    """The objects ``kubectl kustomize folder`` prints (built once per folder and session)."""
    if KUBECTL is None:
        pytest.skip("kubectl (with kustomize) is not installed")
    return list(_kustomize(str(folder)))


def render_chart(values: dict[str, Any] | None = None, namespace: str = NAMESPACE) -> list[Obj]:
    """The chart's templates and CRDs as ``helm install -n namespace`` would create them."""
    helm = pytest.importorskip("helm_python", reason="helm-python-sdk (Helm's library) absent")
    chart = helm.Chart.load(str(CHART))
    out: list[Obj] = []
    for crd in chart.crds:
        out += [d for d in yaml.safe_load_all(crd["data"]) if d]
    for _, text in sorted(chart.render(values, name="gpusched", namespace=namespace).items()):
        out += [d for d in yaml.safe_load_all(text) if d]
    return out


def pod_specs(objs: list[Obj]) -> Iterator[tuple[Obj, Obj]]:
    """``(workload, pod spec)`` of every Deployment and DaemonSet."""
    for obj in objs:
        if obj["kind"] in ("Deployment", "DaemonSet"):
            yield obj, obj["spec"]["template"]["spec"]


def one(objs: list[Obj], kind: str, name: str) -> Obj:
    (found,) = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    return found
