"""``gpusched explain`` as a user runs it (a subprocess with ``--kubeconfig``, output read as
table rows and as JSON) against the target cluster: the simulation, or the real one named by
``GPUSCHED_E2E_KUBECONFIG`` (no kubelets there; the test's own fake GPU nodes and in-process
scheduler, as in tests/status). Covered: a pod no node can fit explained per node with the
plugin that rejected it, its message agreeing with the pod's PodScheduled condition; a bound
pod explained with its node and GPUs; the ``-o json`` fields. Costs two fake nodes, ~5 s."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Target

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scheduler"))

from scheduler_bed import WAIT, Bed, bound, objects_until, open_bed

from gpusched.kube.client import resource_path


@pytest.fixture
async def bed(target: Target) -> AsyncIterator[Bed]:
    async with open_bed(target) as bed:
        yield bed


async def explain(target: Target, *args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gpusched",
        "explain",
        "--kubeconfig",
        target.kubeconfig_path,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), WAIT * 2)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


def _unschedulable(pod: dict[str, Any]) -> str | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c["type"] == "PodScheduled" and c["status"] == "False":
            return str(c["message"])
    return None


async def test_explain_per_node_and_bound(bed: Bed, target: Target, tmp_path: Path) -> None:
    nodes = await bed.add_nodes(2, "dgx-h100")
    ns = bed.namespace
    config = tmp_path / "config.yaml"
    config.write_text(
        "apiVersion: gpusched.io/v1alpha1\n"
        "kind: SchedulerConfiguration\n"
        f"profiles: [{{schedulerName: {bed.scheduler_name}}}]\n"
        f"reservations: {{namespace: {bed.system_namespace}}}\n"
    )
    pods = resource_path("", "v1", "pods", ns)
    async with bed.running():
        await bed.create_pod(bed.pod("small", gpus=2))
        await bed.create_pod(bed.pod("huge", gpus=16))  # 8 GPUs a node: never fits
        await bed.pods_until(lambda ps: "small" in bound(ps))
        await objects_until(
            bed.kube, pods, lambda ps: "huge" in ps and _unschedulable(ps["huge"]) is not None
        )
    huge = await bed.kube.get(f"{pods}/huge")
    message = _unschedulable(huge)
    assert message is not None

    # -o wide: every node's row (the table shows 20 at most; a real cluster may have more).
    code, out = await explain(target, f"{ns}/huge", "--config", str(config), "-o", "wide")
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0] == f"Pod {ns}/huge (schedulerName {bed.scheduler_name}): Pending", out
    assert message in out
    rows = {r[0]: r[1:5] for r in (line.split() for line in lines) if r and r[0] in nodes}
    assert rows == {n: ["no", "NodeResourcesFit", "-", "Insufficient"] for n in nodes}, out

    code, out = await explain(target, f"{ns}/huge", "--config", str(config), "-o", "json")
    assert code == 0, out
    data = json.loads(out)
    assert data["phase"] == "Pending"
    assert data["last_attempt"] == message
    assert data["last_attempt"].startswith(data["message"])  # PostFilter may add its part
    assert set(nodes) <= {v["node"] for v in data["verdicts"]}  # a real cluster has more

    small = await bed.kube.get(f"{pods}/small")
    code, out = await explain(target, f"{ns}/small", "--config", str(config), "-o", "json")
    assert code == 0, out
    data = json.loads(out)
    assert data["phase"] == "Bound"
    assert data["node"] == small["spec"]["nodeName"] in nodes
    ids = data["devices"]["gpusched.io/gpu-ids"]
    assert ids == small["metadata"]["annotations"]["gpusched.io/gpu-ids"]
    assert len(ids.split(",")) == 2

    # A pod that does not exist: exit 1, and it says so.
    code, out = await explain(target, f"{ns}/nope", "--config", str(config))
    assert code == 1, out
    assert f"pod {ns}/nope not found" in out
