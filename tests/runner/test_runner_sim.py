"""``gpusched run`` and ``gpusched cleanup`` as a user runs them (subprocesses, output read line by
line) against a simulated cluster with the real scheduler and simulated kubelets: a pod bound
with its node and GPUs, a name in use, a gang of 2, a job followed to its end through its
(synthesised) log, a pod that cannot fit timing out with the reason and what to run next,
Ctrl-C leaving the run in place, and cleanup deleting exactly what ``run`` labelled."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gpusched.kube.client import Kube, resource_path
from gpusched.scheduler import Scheduler
from gpusched.sim import SimCluster
from gpusched.sim.fleet import load_cluster_spec

pytestmark = pytest.mark.simonly

NS = "default"
PODS = resource_path("", "v1", "pods", NS)
PODGROUPS = resource_path("scheduling.x-k8s.io", "v1alpha1", "podgroups", NS)


@pytest.fixture
async def sim(tmp_path: Path) -> AsyncIterator[SimCluster]:
    """Two DGX H100 nodes, their kubelets and gpusched's scheduler."""
    spec = load_cluster_spec("dgx-h100", nodes=2)
    async with SimCluster(spec, kubeconfig_path=tmp_path / "kc") as cluster:
        await cluster.kube.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpusched-system"}},
        )
        scheduler = Scheduler(Kube(cluster.api_client()), identity="runner-test")
        task = asyncio.create_task(scheduler.run())
        try:
            await asyncio.wait_for(scheduler.ready.wait(), 60)
            yield cluster
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def _start(sim: SimCluster, command: str, *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gpusched",
        command,
        "--kubeconfig",
        str(sim.kubeconfig_path),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )


async def gpusched(sim: SimCluster, command: str, *args: str) -> tuple[int, list[str]]:
    proc = await _start(sim, command, *args)
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode().splitlines()


async def _names(sim: SimCluster, path: str) -> list[str]:
    listed = await sim.kube.get(path)
    return sorted(o["metadata"]["name"] for o in listed["items"])


def _foreign(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod someone else made (another scheduler's: it stays pending)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"schedulerName": "nobody", "containers": [{"name": "c", "image": "x"}]},
    }


def _bound_line(pod: dict[str, Any]) -> str:
    annotations = pod["metadata"]["annotations"]
    return (
        f"pod {NS}/{pod['metadata']['name']} bound to {pod['spec']['nodeName']}: GPUs "
        f"{annotations['gpusched.io/gpu-ids']}"
    )


async def test_run_binds_refuses_a_name_in_use_runs_a_gang_and_cleans_up(
    sim: SimCluster,
) -> None:
    code, lines = await gpusched(sim, "run", "--name", "hello", "--gpus", "2", "--", "nvidia-smi")
    assert code == 0, lines
    pod = await sim.kube.get(f"{PODS}/hello")
    assert lines[0] == "pod default/hello created: 2 whole GPUs, nvidia.com/gpu: 2"
    assert _bound_line(pod) in lines
    assert len(pod["metadata"]["annotations"]["gpusched.io/gpu-ids"].split(",")) == 2
    assert pod["spec"]["containers"][0]["command"] == ["nvidia-smi"]
    # The same name again: a clear message, never a second set.
    code, lines = await gpusched(sim, "run", "--name", "hello", "--", "true")
    assert code == 1
    assert lines == [
        "gpusched run: the name hello is in use in namespace default (pod/hello); choose "
        "another --name, or delete it first: gpusched cleanup --name hello -n default"
    ]
    # A gang of 2 with its PodGroup: both bound.
    code, lines = await gpusched(sim, "run", "--name", "team", "--gang", "2", "--gpus", "4")
    assert code == 0, lines
    assert lines[0] == (
        "podgroup default/team created (minMember 2): 2 pods, each 4 whole GPUs, nvidia.com/gpu: 4"
    )
    for name in ("team-0", "team-1"):
        assert _bound_line(await sim.kube.get(f"{PODS}/{name}")) in lines
    assert (await sim.kube.get(f"{PODGROUPS}/team"))["spec"]["minMember"] == 2
    # A name taken by a pod that is not a run's: refused at creation, nothing left behind.
    await sim.kube.create(PODS, _foreign("clash-1"))
    code, lines = await gpusched(sim, "run", "--name", "clash", "--gang", "2")
    assert code == 1
    assert lines[-2:] == [
        'gpusched run: pods "clash-1" already exists',
        "gpusched run: deleted what run clash had created",
    ]
    assert await _names(sim, PODGROUPS) == ["team"]
    assert "clash-0" not in await _names(sim, PODS)
    # cleanup deletes exactly what run labelled: a pod of someone else's survives.
    await sim.kube.create(PODS, _foreign("bystander", {"gpusched.io/run": "hello"}))
    code, lines = await gpusched(sim, "cleanup", "--name", "hello")
    assert (code, lines) == (0, ["deleted pod default/hello"])
    code, lines = await gpusched(sim, "cleanup", "--all", "-A")
    assert code == 0
    assert lines == [
        "deleted pod default/team-0",
        "deleted pod default/team-1",
        "deleted podgroup default/team",
    ]
    assert await _names(sim, PODGROUPS) == []
    assert await _names(sim, PODS) == ["bystander", "clash-1"]
    code, lines = await gpusched(sim, "cleanup", "--all")
    assert (code, lines) == (0, ["gpusched cleanup: no runs to delete in namespace default"])


async def test_follow_timeout_and_ctrl_c(sim: SimCluster) -> None:
    # --follow: the log streamed to its end, the container's exit code.
    code, lines = await gpusched(
        sim,
        "run",
        "--name",
        "job",
        "--annotation",
        "sim.gpusched.io/duration=1s",
        "--follow",
        "--",
        "python",
        "train.py",
    )
    assert code == 0, lines
    pod = await sim.kube.get(f"{PODS}/job")
    assert pod["status"]["phase"] == "Succeeded"
    started = lines.index(
        f"[sim] started on node {pod['spec']['nodeName']} with GPUs "
        f"{pod['metadata']['annotations']['gpusched.io/gpu-ids']}"
    )
    assert lines[started + 1 :] == [
        "[sim] command: python train.py",
        "[sim] exited 0 (Completed)",
        "gpusched run: container exited 0",
    ]
    # A gang followed: each pod's log, prefixed by its name.
    code, lines = await gpusched(
        sim,
        "run",
        "--name",
        "duo",
        "--gang",
        "2",
        "--annotation",
        "sim.gpusched.io/duration=1s",
        "--follow",
        "--",
        "echo",
        "hi",
    )
    assert code == 0, lines
    for name in ("duo-0", "duo-1"):
        assert f"[{name}] [sim] command: echo hi" in lines
        assert f"[{name}] [sim] exited 0 (Completed)" in lines
    assert lines[-1] == "gpusched run: all containers exited 0"
    # A pod no node can take: the scheduler's reason, then what to run, exit 1.
    code, lines = await gpusched(sim, "run", "--name", "big", "--gpus", "64", "--timeout", "3s")
    assert code == 1
    reason = next(line for line in lines if "FailedScheduling pod/big: " in line)
    assert reason.split("pod/big: ")[1].startswith("0/2 nodes are available: 2 Insufficient")
    assert lines[-3:] == [
        f"gpusched run: not bound after 3 s: {reason.split('pod/big: ')[1]}",
        "  why:      gpusched explain default/big",
        "  clean up: gpusched cleanup --name big -n default",
    ]
    # Ctrl-C once it said "created": the run stays, and how to remove it is said.
    proc = await _start(sim, "run", "--name", "waits", "--gpus", "64")
    assert proc.stdout is not None
    first = await asyncio.wait_for(proc.stdout.readline(), 60)
    assert first.decode().startswith("pod default/waits created")
    proc.send_signal(signal.SIGINT)
    rest, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 130
    assert rest.decode().splitlines()[-1] == (
        "gpusched run: interrupted; run waits keeps going. Clean up with: "
        "gpusched cleanup --name waits -n default"
    )
    assert "waits" in await _names(sim, PODS)


async def test_cleanup_says_what_the_server_refused(tmp_path: Path) -> None:
    async with SimCluster(None, kubelets=False) as cluster:
        kube = cluster.kube
        labels = {"gpusched.io/run": "x", "app.kubernetes.io/managed-by": "gpusched-run"}
        await kube.create(PODS, _foreign("x", labels))
        await kube.create(
            "/api/v1/namespaces/default/serviceaccounts",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "bot"}},
        )
        rbac = "rbac.authorization.k8s.io"
        meta = {"name": "list-pods", "namespace": NS}
        rules = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]
        await kube.create(
            resource_path(rbac, "v1", "roles", NS),
            {"apiVersion": f"{rbac}/v1", "kind": "Role", "metadata": meta, "rules": rules},
        )
        await kube.create(
            resource_path(rbac, "v1", "rolebindings", NS),
            {
                "apiVersion": f"{rbac}/v1",
                "kind": "RoleBinding",
                "metadata": meta,
                "roleRef": {"apiGroup": rbac, "kind": "Role", "name": "list-pods"},
                "subjects": [{"kind": "ServiceAccount", "name": "bot", "namespace": NS}],
            },
        )
        kc = cluster.write_kubeconfig(
            tmp_path / "bot", token=cluster.service_account_token(NS, "bot")
        )
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "gpusched",
            "cleanup",
            "--all",
            "--kubeconfig",
            str(kc),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
        user = "system:serviceaccount:default:bot"
        assert proc.returncode == 1
        assert out.decode().splitlines() == [
            f'gpusched cleanup: cannot delete pod default/x: pods "x" is forbidden: User "{user}" '
            'cannot delete resource "pods" in API group "" in the namespace "default"',
            "gpusched cleanup: cannot list podgroups: podgroups.scheduling.x-k8s.io is "
            f'forbidden: User "{user}" cannot list resource "podgroups" in API group '
            '"scheduling.x-k8s.io" in the namespace "default"',
        ]
        assert "x" in await _names(cluster, PODS)
