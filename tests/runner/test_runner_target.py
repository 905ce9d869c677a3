"""``gpusched run``, ``cleanup`` and ``explain`` as a user runs them (subprocesses with
``--kubeconfig``, output read line by line and as JSON) against the target cluster: the
simulation, or the real one named by ``GPUSCHED_E2E_KUBECONFIG`` (no kubelets there: a bound
pod never runs, so these tests stop at the binding and never ``--follow``).

The runs go to this test's scheduler and fake nodes (``--scheduler-name``, ``--node-selector``,
``--toleration``: the flags a user needs for a gpusched profile or a tainted GPU pool), so they
never touch the cluster's other nodes. Covered: a run bound with its node and GPUs; a gang of 2
with its PodGroup; a request no node can meet timing out with the scheduler's reason; explain's
per-node verdicts agreeing with the pod's own PodScheduled message, and its JSON for a bound
pod; cleanup deleting exactly what run labelled (a bound pod on a real cluster stays
terminating: cleanup's work is the DELETE, and a second cleanup says it is already going)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Target

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "gangs"))

from gang_bed import ensure_crd
from scheduler_bed import E2E_LABEL, WAIT, Bed, objects_until, open_bed

from gpusched.kube.client import resource_path
from gpusched.kube.errors import APIForbidden


@pytest.fixture
async def bed(target: Target) -> AsyncIterator[Bed]:
    async with open_bed(target) as bed:
        yield bed


async def gpusched(target: Target, command: str, *args: str) -> tuple[int, list[str]]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gpusched",
        command,
        "--kubeconfig",
        target.kubeconfig_path,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), WAIT * 2)
    assert proc.returncode is not None
    return proc.returncode, out.decode().splitlines()


def _placement(bed: Bed) -> list[str]:
    """The flags that send a run to this test's scheduler and nodes."""
    return [
        "-n",
        bed.namespace,
        "--scheduler-name",
        bed.scheduler_name,
        "--node-selector",
        f"{E2E_LABEL}={bed.prefix}",
        "--toleration",
        f"{E2E_LABEL}={bed.prefix}:NoSchedule",
        "--toleration",
        "node.kubernetes.io/unreachable",
        "--toleration",
        "node.kubernetes.io/not-ready",
        "--image",
        "registry.k8s.io/pause:3.10",
    ]


def _explain_config(bed: Bed, tmp_path: Path) -> str:
    """The scheduler configuration of this test's scheduler, for ``explain --config``."""
    path = tmp_path / "config.yaml"
    path.write_text(
        "apiVersion: gpusched.io/v1alpha1\n"
        "kind: SchedulerConfiguration\n"
        f"profiles: [{{schedulerName: {bed.scheduler_name}}}]\n"
        f"reservations: {{namespace: {bed.system_namespace}}}\n"
    )
    return str(path)


async def _service_account(bed: Bed) -> None:
    """A real API server refuses pods until the namespace's default ServiceAccount exists."""
    path = resource_path("", "v1", "serviceaccounts", bed.namespace)
    if bed.target.is_sim:
        return
    await objects_until(bed.kube, path, lambda sas: "default" in sas)


def _condition(pod: dict[str, Any]) -> dict[str, Any]:
    return next(
        c for c in (pod.get("status") or {}).get("conditions") or [] if c["type"] == "PodScheduled"
    )


async def test_run_explain_and_cleanup(bed: Bed, target: Target, tmp_path: Path) -> None:
    (node,) = await bed.add_nodes(1, "dgx-h100")
    try:
        await ensure_crd(bed.kube, "podgroups.scheduling.x-k8s.io")
    except APIForbidden as exc:
        pytest.skip(f"cannot install the PodGroup CRD (deploy/crds): {exc.message}")
    await _service_account(bed)
    ns = bed.namespace
    pods = resource_path("", "v1", "pods", ns)
    async with bed.running():
        code, lines = await gpusched(
            target, "run", "--name", "hello", "--gpus", "2", *_placement(bed), "--", "nvidia-smi"
        )
        assert code == 0, lines
        hello = await bed.kube.get(f"{pods}/hello")
        ids = hello["metadata"]["annotations"]["gpusched.io/gpu-ids"]
        assert lines[0] == f"pod {ns}/hello created: 2 whole GPUs, nvidia.com/gpu: 2"
        assert f"pod {ns}/hello bound to {node}: GPUs {ids}" in lines
        assert len(ids.split(",")) == 2
        assert hello["spec"]["schedulerName"] == bed.scheduler_name

        code, lines = await gpusched(
            target, "run", "--name", "team", "--gang", "2", "--gpus", "2", *_placement(bed)
        )
        assert code == 0, lines
        for name in ("team-0", "team-1"):
            assert any(line.startswith(f"pod {ns}/{name} bound to {node}") for line in lines)

        # 8 GPUs, 6 taken: a 4-GPU run cannot be bound; the scheduler's reason, exit 1.
        code, lines = await gpusched(
            target, "run", "--name", "big", "--gpus", "4", "--timeout", "5s", *_placement(bed)
        )
        assert code == 1, lines
        assert any(line.startswith("gpusched run: not bound after 5 s: 0/") for line in lines)
        big = await bed.kube.get(f"{pods}/big")
        message = _condition(big)["message"]

        # explain: the same verdict, per node, from the scheduler's own plugins.
        config = _explain_config(bed, tmp_path)
        code, lines = await gpusched(target, "explain", f"{ns}/big", "--config", config)
        assert code == 0, lines
        text = "\n".join(lines)
        assert message in text
        assert node in text
        code, lines = await gpusched(
            target,
            "explain",
            f"{ns}/hello",
            "--config",
            config,
            "-o",
            "json",
        )
        assert code == 0, lines
        doc = json.loads("\n".join(lines))
        assert doc["node"] == node
        assert doc["devices"]["gpusched.io/gpu-ids"] == ids

    # cleanup: exactly what run labelled, however the cluster then finishes the deletion.
    bystander = bed.pod("bystander")
    bystander["metadata"]["labels"]["gpusched.io/run"] = "hello"
    await bed.create_pod(bystander)
    code, lines = await gpusched(target, "cleanup", "--name", "hello", "-n", ns)
    assert (code, lines) == (0, [f"deleted pod {ns}/hello"])
    code, lines = await gpusched(target, "cleanup", "--all", "-n", ns)
    assert code == 0
    assert f"deleted podgroup {ns}/team" in lines
    assert {f"deleted pod {ns}/{n}" for n in ("team-0", "team-1", "big")} <= set(lines)
    if not target.is_sim:  # bound pods without a kubelet stay terminating
        code, lines = await gpusched(target, "cleanup", "--name", "hello", "-n", ns)
        assert (code, lines) == (0, [f"pod {ns}/hello is already terminating"])
    left = await objects_until(bed.kube, pods, lambda ps: not any(n in ps for n in ("big",)))
    assert "bystander" in left
