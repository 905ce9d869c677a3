"""``gpusched explain`` (gpusched/explain.py): it agrees with the scheduler's own
FailedScheduling message for every pod the scheduler finds unschedulable in the ``dgx-mixed``
workload, computed on the same snapshot at that moment; and the command, run as a user runs
it against the cluster afterwards, explains a pending pod per node, a bound pod's devices, a
pod of another scheduler, and a pod that does not exist."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gpusched.explain import explain
from gpusched.framework import CycleState, Framework
from gpusched.framework.queued_pod import QueuedPodInfo
from gpusched.kube.client import Kube, resource_path
from gpusched.scheduler import Scheduler, SchedulingResult, fit_error_message
from gpusched.sim import SimCluster
from gpusched.sim.fleet import load_cluster_spec
from gpusched.sim.workload import arrivals, load_workload

NS = "default"


class Explaining(Scheduler):
    """The scheduler, explaining each pod it finds unschedulable on the same snapshot."""

    def __init__(self, kube: Kube) -> None:
        super().__init__(kube, identity="explaining", rng=random.Random(7))
        self.compared: list[tuple[str, str, str]] = []

    def _unschedulable(
        self,
        fw: Framework,
        state: CycleState,
        info: QueuedPodInfo,
        result: SchedulingResult,
        started: float,
    ) -> None:
        if result.status is None or not result.status.is_error:
            said = fit_error_message(self.snapshot.num_nodes, result)
            explained = explain(self, info.pod)
            self.compared.append((info.pod["metadata"]["name"], said, explained.message))
        super()._unschedulable(fw, state, info, result, started)


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def settled(tmp_path: Path) -> AsyncIterator[tuple[SimCluster, Explaining]]:
    """The dgx-mixed pods created at once on 4 DGX H100 nodes without kubelets (nothing
    finishes), scheduled until every pod is bound or was found unschedulable."""
    spec = load_cluster_spec("dgx-h100", nodes=4)
    async with SimCluster(spec, kubelets=False, kubeconfig_path=tmp_path / "kc") as sim:
        await sim.kube.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpusched-system"}},
        )
        scheduler = Explaining(Kube(sim.api_client()))
        task = asyncio.create_task(scheduler.run())
        try:
            await asyncio.wait_for(scheduler.ready.wait(), 60)
            for _, pod in arrivals(load_workload("dgx-mixed")):
                await sim.kube.create(resource_path("", "v1", "pods", NS), pod)
            await asyncio.wait_for(_every_pod_decided(sim), 120)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        yield sim, scheduler


async def _every_pod_decided(sim: SimCluster) -> None:
    """Watch until each pod left (preemption deletes its victims) is bound or carries
    PodScheduled=False."""
    path = resource_path("", "v1", "pods", NS)
    listed = await sim.kube.get(path)
    pods = {p["metadata"]["name"]: p for p in listed["items"]}
    rv = listed["metadata"]["resourceVersion"]

    def decided() -> bool:
        return all(_decided(p) for p in pods.values())

    while not decided():
        async for event in sim.kube.watch(path, {"resourceVersion": rv}):
            obj = event["object"]
            rv = obj["metadata"]["resourceVersion"]
            if event["type"] == "DELETED":
                pods.pop(obj["metadata"]["name"], None)
            else:
                pods[obj["metadata"]["name"]] = obj
            if decided():
                return


def _decided(pod: dict[str, Any]) -> bool:
    if (pod.get("spec") or {}).get("nodeName"):
        return True
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "PodScheduled" and c.get("status") == "False" for c in conditions)


def gpusched(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpusched", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def test_explain_agrees_with_the_scheduler_and_explains_pods(
    settled: tuple[SimCluster, Explaining],
) -> None:
    sim, scheduler = settled
    # 1. Every unschedulable verdict of the run, explained on the same snapshot: the same text.
    assert scheduler.compared, "no pod of dgx-mixed was ever unschedulable"
    assert {name for name, _, _ in scheduler.compared} >= {"dgx-mixed-impossible-00000"}
    assert len({name for name, _, _ in scheduler.compared}) > 10  # the backlog, not one pod
    for name, said, explained in scheduler.compared:
        assert explained == said, name
    # 2. The command, as a user runs it afterwards (the scheduler stopped, nothing changed).
    kc = str(sim.kubeconfig_path)
    out = await asyncio.to_thread(
        gpusched, "explain", "default/dgx-mixed-impossible-00000", "--kubeconfig", kc
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "Pod default/dgx-mixed-impossible-00000 (schedulerName gpusched): Pending"
    assert lines[1].startswith("  Now: 0/4 nodes are available: 4 ")
    rows = [line.split() for line in lines if line.startswith("dgx-h100-")]
    assert sorted(r[0] for r in rows) == [f"dgx-h100-00{i}" for i in range(4)]
    # 16 GPUs: more than any node has (8), so every node says so.
    assert all(r[1:5] == ["no", "NodeResourcesFit", "-", "Insufficient"] for r in rows), rows
    out = await asyncio.to_thread(
        gpusched, "explain", "dgx-mixed-impossible-00000", "--kubeconfig", kc, "-o", "json"
    )
    data = json.loads(out.stdout)
    assert data["phase"] == "Pending"
    assert data["last_attempt"].startswith(data["message"])  # PostFilter may add its part
    assert {v["node"] for v in data["verdicts"]} == {f"dgx-h100-00{i}" for i in range(4)}
    # A bound pod: its node and devices.
    bound = next(
        p
        for p in (await sim.kube.get(resource_path("", "v1", "pods", NS)))["items"]
        if p["spec"].get("nodeName")
    )
    out = await asyncio.to_thread(
        gpusched, "explain", bound["metadata"]["name"], "--kubeconfig", kc, "-o", "json"
    )
    data = json.loads(out.stdout)
    assert data["phase"] == "Bound"
    assert data["node"] == bound["spec"]["nodeName"]
    assert data["devices"]["gpusched.io/gpu-ids"]
    # Not found, and a pod of another scheduler.
    out = await asyncio.to_thread(gpusched, "explain", "nope", "--kubeconfig", kc)
    assert out.returncode == 1
    assert "pod default/nope not found" in out.stderr
    other = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "other", "namespace": NS},
        "spec": {"schedulerName": "volcano", "containers": [{"name": "c", "image": "x"}]},
    }
    await sim.kube.create(resource_path("", "v1", "pods", NS), other)
    out = await asyncio.to_thread(gpusched, "explain", "other", "--kubeconfig", kc)
    assert out.returncode == 0, out.stderr
    assert "NotOurs" in out.stdout
    assert "set spec.schedulerName to one of them" in out.stdout
