"""GPUWorkloads end to end on the simulated cluster: the real Scheduler (with the shipped
profiles the strategies map to), the sim's kubelets and Job controller, and the
WorkloadController, all on one FakeClock so that retry backoffs pass without waiting.

A pod's container "crashes" when the test writes its status as a kubelet would (phase Failed,
exit code 1): the simulated kubelet has no crash switch, and this is what a real one reports.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpusched.clock import FakeClock
from gpusched.framework.config import parse_config
from gpusched.kube.client import Kube, resource_path
from gpusched.kube.errors import APINotFound
from gpusched.leader import LeaderElectionConfig, LeaderElector
from gpusched.scheduler import Scheduler
from gpusched.sim import SimCluster
from gpusched.workloads import WorkloadController
from gpusched.workloads.manager import ATTEMPT_LABEL, GROUP, PLURAL, VERSION, WORKLOAD_LABEL

pytestmark = pytest.mark.simonly

REPO = Path(__file__).resolve().parents[2]
NS = "default"
WORKLOADS = resource_path(GROUP, VERSION, PLURAL, NS)
JOBS = resource_path("batch", "v1", "jobs", NS)
PODS = resource_path("", "v1", "pods", NS)
EVENTS = resource_path("", "v1", "events", NS)
WAIT = 20.0


def scheduler_config() -> Any:
    """The scheduler's profiles as deploy/scheduler/config.yaml ships them."""
    config_map = yaml.safe_load((REPO / "deploy/scheduler/config.yaml").read_text())
    config = parse_config(config_map["data"]["config.yaml"], source="deploy/scheduler/config.yaml")
    return config.model_copy(
        update={
            "leader_election": config.leader_election.model_copy(update={"leader_elect": False}),
            "reservations": config.reservations.model_copy(update={"namespace": NS}),
        }
    )


@dataclass
class World:
    sim: SimCluster
    clock: FakeClock
    kube: Kube
    controller: WorkloadController

    async def until(self, path: str, done: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """Poll ``path`` (a list) until ``done(items by name)``; advances no time."""
        async with asyncio.timeout(WAIT):
            while True:
                listed = await self.kube.get(path)
                items = {i["metadata"]["name"]: i for i in listed["items"]}
                if done(items):
                    return items
                await asyncio.sleep(0.02)

    async def workload(self, name: str, done: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        items = await self.until(WORKLOADS, lambda ws: name in ws and done(ws[name]))
        return items[name]

    async def crash(self, pod: dict[str, Any]) -> None:
        """The pod's container exits 1, as its kubelet would report it."""
        meta = pod["metadata"]
        ts = self.clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")
        status = {
            "phase": "Failed",
            "containerStatuses": [
                {
                    "name": "workload",
                    "ready": False,
                    "restartCount": 0,
                    "image": pod["spec"]["containers"][0]["image"],
                    "imageID": "",
                    "state": {
                        "terminated": {
                            "exitCode": 1,
                            "reason": "Error",
                            "message": "CUDA error: out of memory",
                            "finishedAt": ts,
                        }
                    },
                }
            ],
        }
        await self.kube.patch(
            resource_path("", "v1", "pods", NS, meta["name"], "status"),
            {"metadata": {"uid": meta["uid"]}, "status": status},
        )

    async def running_pod(self, workload: str, attempt: int) -> dict[str, Any]:
        def ready(pods: dict[str, Any]) -> bool:
            return any(
                _is_attempt(p, workload, attempt) and _phase(p) == "Running" for p in pods.values()
            )

        pods = await self.until(PODS, ready)
        return next(p for p in pods.values() if _is_attempt(p, workload, attempt))

    async def reasons(self, name: str) -> list[str]:
        listed = await self.kube.get(EVENTS)
        return [
            e["reason"]
            for e in sorted(listed["items"], key=lambda e: e["metadata"]["creationTimestamp"])
            if e["involvedObject"].get("kind") == "GPUWorkload"
            and e["involvedObject"]["name"] == name
        ]


def _is_attempt(pod: dict[str, Any], workload: str, attempt: int) -> bool:
    labels = pod["metadata"].get("labels") or {}
    return labels.get(WORKLOAD_LABEL) == workload and labels.get(ATTEMPT_LABEL) == str(attempt)


def _phase(obj: dict[str, Any]) -> str:
    return str((obj.get("status") or {}).get("phase", ""))


@contextlib.asynccontextmanager
async def open_world(shipped_rbac: bool = False) -> AsyncIterator[World]:
    """The cluster, the scheduler and a controller: the admin's, or (``shipped_rbac``) one on
    a token of deploy/controller's ServiceAccount, leader elected as deployed."""
    clock = FakeClock()
    async with SimCluster("dgx-h100", clock=clock) as sim:
        kube = sim.kube
        scheduler = Scheduler(
            Kube(sim.api_client()), scheduler_config(), clock=clock, rng=random.Random(1)
        )
        token = None
        if shipped_rbac:
            await kube.create(
                "/api/v1/namespaces",
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpusched-system"}},
            )
            for doc in yaml.safe_load_all((REPO / "deploy/controller/rbac.yaml").read_text()):
                group, _, version = doc["apiVersion"].rpartition("/")
                plural = doc["kind"].lower() + "s"
                ns = doc["metadata"].get("namespace")
                await kube.create(resource_path(group, version, plural, ns), doc)
            token = sim.service_account_token("gpusched-system", "gpusched-controller")
        controller_kube = Kube(sim.api_client(token=token))
        controller = WorkloadController(controller_kube, clock=clock, rng=random.Random(1))
        if shipped_rbac:
            elector = LeaderElector(
                controller_kube,
                "test",
                LeaderElectionConfig(namespace="gpusched-system", name="gpusched-controller"),
                clock,
            )
            work = elector.run(controller.run)
        else:
            work = controller.run()
        tasks = [
            asyncio.create_task(scheduler.run(), name="test-scheduler"),
            asyncio.create_task(work, name="test-controller"),
        ]
        try:
            async with asyncio.timeout(WAIT):
                await scheduler.ready.wait()
                await controller.synced.wait()
            yield World(sim, clock, kube, controller)
        finally:
            for t in tasks:
                t.cancel()
            for t in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await t


@pytest.fixture
async def world() -> AsyncIterator[World]:
    async with open_world() as opened:
        yield opened


def workload(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "GPUWorkload",
        "metadata": {"name": name},
        "spec": {"modelName": "llama2", "gpuCount": 2, **spec},
    }


async def test_fails_twice_then_succeeds_on_the_third_attempt(world: World) -> None:
    body = workload("train", retryPolicy={"maxRetries": 3, "backoffSeconds": 30})
    body["metadata"]["annotations"] = {"sim.gpusched.io/duration": "60s"}
    await world.kube.create(WORKLOADS, body)
    for attempt in (1, 2):
        pod = await world.running_pod("train", attempt)
        status = (await world.workload("train", lambda w: _phase(w) == "Running"))["status"]
        assert status["attempts"] == attempt
        assert status["assignedNode"] == pod["spec"]["nodeName"]
        await world.crash(pod)
        status = (
            await world.workload("train", lambda w: "nextRetryTime" in (w.get("status") or {}))
        )["status"]
        assert status["phase"] == "Pending"
        assert "exited with code 1: CUDA error: out of memory" in status["lastError"]
        # 30 s, then 60 s, each with up to 20 % jitter: not due before the base delay.
        await world.clock.advance(30 * 2 ** (attempt - 1) - 1)
        assert (await world.kube.get(f"{WORKLOADS}/train"))["status"]["attempts"] == attempt
        await world.clock.advance(0.2 * 30 * 2 ** (attempt - 1) + 2)
    pod = await world.running_pod("train", 3)
    assert pod["spec"]["schedulerName"] == "gpusched-spread"  # leastLoaded, the default
    assert pod["metadata"]["annotations"]["gpusched.io/priority"] == "1"  # medium
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
    await world.clock.advance(61)  # the kubelet finishes it (sim.gpusched.io/duration)
    final = await world.workload("train", lambda w: _phase(w) == "Succeeded")
    assert final["status"]["attempts"] == 3
    conditions = {c["type"]: c["status"] for c in final["status"]["conditions"]}
    assert conditions["Succeeded"] == "True"
    jobs = await world.until(JOBS, lambda js: len(js) == 3)
    assert sorted(jobs) == ["train-1", "train-2", "train-3"]
    reasons = await world.until(EVENTS, lambda es: True) and await world.reasons("train")
    for reason in ("JobCreated", "Scheduled", "AttemptFailed", "Retrying", "Succeeded"):
        assert reason in reasons
    assert reasons.count("Retrying") == 2
    metrics = world.controller.metrics
    assert metrics.retries._value.get() == 2
    assert metrics.scheduled.labels("leastLoaded")._value.get() == 3


async def test_exhausting_max_retries_fails_with_the_last_error(world: World) -> None:
    await world.kube.create(
        WORKLOADS, workload("flaky", retryPolicy={"maxRetries": 1, "backoffSeconds": 10})
    )
    await world.crash(await world.running_pod("flaky", 1))
    await world.workload("flaky", lambda w: "nextRetryTime" in (w.get("status") or {}))
    await world.clock.advance(13)
    await world.crash(await world.running_pod("flaky", 2))
    final = await world.workload("flaky", lambda w: _phase(w) == "Failed")
    status = final["status"]
    assert status["attempts"] == 2
    assert status["lastError"].startswith("attempt 2: pod flaky-2-")
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "RetriesExhausted"
    assert "2 attempts failed (maxRetries 1)" in failed["message"]
    await world.clock.advance(3600)
    assert len(await world.until(JOBS, lambda js: True)) == 2  # no third attempt
    assert "RetriesExhausted" in await world.reasons("flaky")
    assert world.controller.metrics.failed.labels("RetriesExhausted")._value.get() == 1


async def test_deleting_the_workload_deletes_its_job_and_pods(world: World) -> None:
    await world.kube.create(WORKLOADS, workload("gone"))
    await world.running_pod("gone", 1)
    await world.kube.delete(
        f"{WORKLOADS}/gone",
        {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"},
    )
    await world.until(JOBS, lambda js: not js)
    await world.until(
        PODS, lambda ps: not any(p["metadata"]["labels"].get(WORKLOAD_LABEL) for p in ps.values())
    )
    with pytest.raises(APINotFound):
        await world.kube.get(f"{WORKLOADS}/gone")


async def test_bad_input_is_a_condition_and_an_event_without_retries(world: World) -> None:
    await world.kube.create(WORKLOADS, workload("bad", gpuCount=0, schedulingStrategy="fastest"))
    found = await world.workload("bad", lambda w: bool((w.get("status") or {}).get("lastError")))
    status = found["status"]
    valid = next(c for c in status["conditions"] if c["type"] == "SpecValid")
    assert valid["status"] == "False"
    assert valid["reason"] == "InvalidSpec"
    assert "spec.gpuCount 0" in valid["message"]
    assert "write 1 or more" in valid["message"]
    assert "leastLoaded, random, costOptimized" in valid["message"]
    await world.clock.advance(600)
    assert not await world.until(JOBS, lambda js: True)
    assert (await world.reasons("bad")).count("InvalidSpec") == 1
    # Fixed, it runs.
    await world.kube.patch(
        f"{WORKLOADS}/bad", {"spec": {"gpuCount": 1, "schedulingStrategy": "costOptimized"}}
    )
    pod = await world.running_pod("bad", 1)
    assert pod["spec"]["schedulerName"] == "gpusched-cheap"


async def test_the_seeds_example_manifest_applies_and_runs(world: World) -> None:
    seed = yaml.safe_load((REPO / "docs/examples/gpuworkload-sample.yaml").read_text())
    await world.kube.create(WORKLOADS, seed)
    name = seed["metadata"]["name"]
    pod = await world.running_pod(name, 1)
    found = await world.workload(name, lambda w: _phase(w) == "Running")
    assert found["spec"]["retryPolicy"] == {"maxRetries": 3, "backoffSeconds": 30}
    assert found["status"]["assignedNode"] == pod["spec"]["nodeName"]
    assert pod["metadata"]["annotations"]["gpusched.io/priority"] == "0"  # high
    assert pod["spec"]["containers"][0]["env"] == [{"name": "MODEL_NAME", "value": "llama2"}]


async def test_the_shipped_rbac_is_enough() -> None:
    async with open_world(shipped_rbac=True) as world:
        body = workload("least")
        body["metadata"]["annotations"] = {"sim.gpusched.io/duration": "10s"}
        await world.kube.create(WORKLOADS, body)
        await world.running_pod("least", 1)
        await world.clock.advance(11)
        await world.workload("least", lambda w: _phase(w) == "Succeeded")
        assert "Succeeded" in await world.reasons("least")
        await world.kube.delete(f"{WORKLOADS}/least")
        await world.until(JOBS, lambda js: not js)


async def test_the_controller_queue_has_client_go_workqueue_metrics(world: World) -> None:
    await world.kube.create(WORKLOADS, workload("metered"))
    await world.workload("metered", lambda w: _phase(w) == "Running")
    metrics = world.controller.metrics
    labels = {"name": "gpuworkload"}
    for name in ("workqueue_adds_total", "workqueue_work_duration_seconds_count"):
        assert (metrics.registry.get_sample_value(name, labels) or 0) >= 1, name
    assert metrics.registry.get_sample_value("workqueue_depth", labels) is not None
    assert b'workqueue_retries_total{name="gpuworkload"}' in metrics.render()
