"""kubectl against the simulated cluster: get, apply (a CRD and a custom resource), describe.

Needs the kubectl binary (Debian's ``kubernetes-client``); skipped when it is not installed.
kubectl runs as a subprocess while the simulation serves from this test's event loop.
"""

from __future__ import annotations

import asyncio
import shutil
import textwrap
from pathlib import Path

import pytest

from gpusched.sim import SimCluster
from gpusched.sim.fleet import load_cluster_spec

KUBECTL = shutil.which("kubectl")
pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.simonly,
    pytest.mark.skipif(
        KUBECTL is None, reason="kubectl is not installed (apt-get install kubernetes-client)"
    ),
]

CRD = textwrap.dedent(
    """\
    apiVersion: apiextensions.k8s.io/v1
    kind: CustomResourceDefinition
    metadata:
      name: widgets.example.com
    spec:
      group: example.com
      scope: Namespaced
      names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd]}
      versions:
      - name: v1
        served: true
        storage: true
        schema:
          openAPIV3Schema:
            type: object
            properties:
              spec:
                type: object
                properties:
                  size: {type: integer, default: 3}
    """
)
WIDGET = "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1}\nspec: {size: 5}\n"
POD = textwrap.dedent(
    """\
    apiVersion: v1
    kind: Pod
    metadata: {name: demo}
    spec:
      containers:
      - name: main
        image: registry.k8s.io/pause:3.10
        resources: {limits: {nvidia.com/gpu: 1}}
    """
)


async def kubectl(sim: SimCluster, *args: str) -> str:
    assert KUBECTL is not None
    proc = await asyncio.create_subprocess_exec(
        KUBECTL,
        "--kubeconfig",
        str(sim.kubeconfig_path),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={"HOME": str(sim.kubeconfig_path.parent), "PATH": "/usr/bin:/bin"},
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, f"kubectl {' '.join(args)} failed: {err.decode()}"
    return out.decode()


async def test_get_apply_describe(tmp_path: Path) -> None:
    spec = load_cluster_spec("dgx-h100", nodes=2)
    async with SimCluster(spec) as sim:
        out = await kubectl(sim, "get", "nodes,pods", "-A")
        assert "node/dgx-h100-000" in out
        assert "node/dgx-h100-001" in out

        out = await kubectl(sim, "get", "nodes", "-L", "nvidia.com/gpu.product")
        assert "NVIDIA-H100-80GB-HBM3" in out

        (tmp_path / "crd.yaml").write_text(CRD)
        (tmp_path / "widget.yaml").write_text(WIDGET)
        (tmp_path / "pod.yaml").write_text(POD)
        assert "created" in await kubectl(sim, "apply", "-f", str(tmp_path / "crd.yaml"))
        await kubectl(sim, "wait", "--for", "condition=established", "crd/widgets.example.com")
        assert "widget.example.com/w1 created" in await kubectl(
            sim, "apply", "-f", str(tmp_path / "widget.yaml")
        )
        assert "unchanged" in await kubectl(sim, "apply", "-f", str(tmp_path / "widget.yaml"))
        out = await kubectl(sim, "get", "wd", "w1", "-o", "jsonpath={.spec.size}")
        assert out == "5"

        assert "pod/demo created" in await kubectl(sim, "apply", "-f", str(tmp_path / "pod.yaml"))
        pod = await sim.kube.get("/api/v1/namespaces/default/pods/demo")
        await sim.kube.create(
            "/api/v1/namespaces/default/pods/demo/binding",
            {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": "demo"},
                "target": {"apiVersion": "v1", "kind": "Node", "name": "dgx-h100-000"},
            },
        )
        await sim.kube.create(
            "/api/v1/namespaces/default/events",
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": "demo.1"},
                "involvedObject": {
                    "kind": "Pod",
                    "namespace": "default",
                    "name": "demo",
                    "uid": pod["metadata"]["uid"],
                    "apiVersion": "v1",
                },
                "reason": "Scheduled",
                "message": "Successfully assigned default/demo to dgx-h100-000",
                "type": "Normal",
                "source": {"component": "gpusched"},
            },
        )
        out = await kubectl(sim, "describe", "pod", "demo")
        assert "dgx-h100-000" in out
        assert "Successfully assigned default/demo to dgx-h100-000" in out
        assert "nvidia.com/gpu" in out
