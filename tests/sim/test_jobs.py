"""``batch/v1`` Jobs on the simulated API server and its Job controller
(gpusched.sim.job_controller), checked against what kube-apiserver and kube-controller-manager
do: defaults and the generated selector, validation messages, a Job that completes, a Job whose
pods fail until ``backoffLimit`` with the controller's doubling backoff (on a FakeClock), and
deletion with propagation removing the pods.

The pods name their node (``spec.nodeName``), so the sim's kubelets run them without a
scheduler; a container "crashes" when the test writes the Failed status a kubelet would.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from gpusched.clock import FakeClock
from gpusched.kube.client import Kube, resource_path
from gpusched.kube.errors import APIError
from gpusched.sim import SimCluster
from gpusched.sim.faults import FaultRule
from gpusched.sim.job_controller import (
    CONTROLLER_UID_LABEL,
    JOB_NAME_LABEL,
    JobStrategy,
    pod_backoff,
)

pytestmark = pytest.mark.simonly

NS = "default"
JOBS = resource_path("batch", "v1", "jobs", NS)
PODS = resource_path("", "v1", "pods", NS)
NODE = "dgx-h100-000"
WAIT = 20.0


def job(name: str = "train", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "nodeName": NODE,
                    "containers": [{"name": "main", "image": "busybox"}],
                }
            },
            **spec,
        },
    }
    return body


@pytest.fixture
async def cluster() -> AsyncIterator[tuple[SimCluster, FakeClock]]:
    clock = FakeClock(datetime(2026, 11, 28, tzinfo=UTC))
    async with SimCluster("dgx-h100", clock=clock) as sim:
        assert sim.jobs is not None
        async with asyncio.timeout(WAIT):
            await sim.jobs.synced.wait()
        yield sim, clock


async def until(
    kube: Kube, path: str, done: Callable[[dict[str, Any]], bool]
) -> dict[str, dict[str, Any]]:
    async with asyncio.timeout(WAIT):
        while True:
            items = {i["metadata"]["name"]: i for i in (await kube.get(path))["items"]}
            if done(items):
                return items
            await asyncio.sleep(0.02)


async def job_until(
    kube: Kube, name: str, done: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    return (await until(kube, JOBS, lambda js: name in js and done(js[name])))[name]


def running(pods: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods.values() if (p.get("status") or {}).get("phase") == "Running"]


async def crash(kube: Kube, pod: dict[str, Any], at: datetime) -> None:
    status = {
        "phase": "Failed",
        "containerStatuses": [
            {
                "name": "main",
                "ready": False,
                "restartCount": 0,
                "image": "busybox",
                "imageID": "",
                "state": {
                    "terminated": {
                        "exitCode": 1,
                        "reason": "Error",
                        "finishedAt": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
                    }
                },
            }
        ],
    }
    meta = pod["metadata"]
    await kube.patch(
        resource_path("", "v1", "pods", NS, meta["name"], "status"),
        {"metadata": {"uid": meta["uid"]}, "status": status},
    )


def conditions(obj: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {
        c["type"]: (c["status"], c.get("reason", ""))
        for c in (obj.get("status") or {}).get("conditions") or ()
    }


# ------------------------------------------------------------------ the API server


async def test_defaults_and_the_generated_selector(cluster: tuple[SimCluster, FakeClock]) -> None:
    sim, _ = cluster
    created = await sim.kube.create(JOBS, job())
    uid, spec = created["metadata"]["uid"], created["spec"]
    assert (spec["completions"], spec["parallelism"], spec["backoffLimit"]) == (1, 1, 6)
    assert spec["completionMode"] == "NonIndexed"
    assert spec["suspend"] is False
    assert spec["podReplacementPolicy"] == "TerminatingOrFailed"
    assert spec["selector"] == {"matchLabels": {CONTROLLER_UID_LABEL: uid}}
    assert spec["template"]["metadata"]["labels"] == {
        "controller-uid": uid,
        "job-name": "train",
        CONTROLLER_UID_LABEL: uid,
        JOB_NAME_LABEL: "train",
    }
    assert spec["template"]["spec"]["dnsPolicy"] == "ClusterFirst"  # the pod's defaults
    assert created["metadata"]["generation"] == 1
    assert created["status"] == {}


def _without(path: str) -> Callable[[dict[str, Any]], None]:
    def edit(body: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        holder = body
        for p in parents:
            holder = holder[p]
        del holder[last]

    return edit


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(body: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        holder = body
        for p in parents:
            holder = holder.setdefault(p, {})
        holder[last] = value

    return edit


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            _without("spec.template.spec.restartPolicy"),
            'spec.template.spec.restartPolicy: Unsupported value: "Always": supported values: '
            '"OnFailure", "Never"',
        ),
        (
            _set("spec.backoffLimit", -1),
            "spec.backoffLimit: Invalid value: -1: must be greater than or equal to 0",
        ),
        (
            _set("spec.parallelism", -2),
            "spec.parallelism: Invalid value: -2: must be greater than or equal to 0",
        ),
        (
            _set("spec.selector", {"matchLabels": {"app": "x"}}),
            "`selector` not auto-generated",
        ),
        (
            lambda b: b["spec"].update(manualSelector=True, selector={"matchLabels": {"app": "x"}}),
            "spec.template.metadata.labels: Invalid value: ",
        ),
        (
            _set("spec.template.spec.containers", []),
            "spec.template.spec.containers: Required value",
        ),
    ],
)
async def test_invalid_jobs_are_refused_as_the_server_words_it(
    cluster: tuple[SimCluster, FakeClock], edit: Callable[[dict[str, Any]], None], message: str
) -> None:
    sim, _ = cluster
    body = job()
    edit(body)
    with pytest.raises(APIError) as caught:
        await sim.kube.create(JOBS, body)
    assert caught.value.code == 422
    assert message in caught.value.message
    assert caught.value.message.startswith('Job.batch "train" is invalid: ')


async def test_the_template_is_immutable(cluster: tuple[SimCluster, FakeClock]) -> None:
    sim, _ = cluster
    await sim.kube.create(JOBS, job(backoffLimit=0))
    patch = {"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "nginx"}]}}}}
    with pytest.raises(APIError) as caught:
        await sim.kube.patch(f"{JOBS}/train", patch, "application/strategic-merge-patch+json")
    assert "spec.template: Invalid value: " in caught.value.message
    assert "field is immutable" in caught.value.message


@pytest.mark.parametrize(
    ("failures", "seconds"),
    [(0, 0.0), (1, 10.0), (2, 20.0), (3, 40.0), (6, 320.0), (7, 600.0), (30, 600.0)],
)
def test_pod_backoff_doubles_from_10s_up_to_10min(failures: int, seconds: float) -> None:
    assert pod_backoff(failures) == seconds


def test_kubectl_get_jobs_columns() -> None:
    now = datetime(2026, 11, 28, 0, 5, tzinfo=UTC)
    obj = job()
    obj["metadata"]["creationTimestamp"] = "2026-11-28T00:00:00Z"
    obj["spec"].update(completions=1, selector={"matchLabels": {CONTROLLER_UID_LABEL: "u"}})
    obj["status"] = {
        "succeeded": 1,
        "startTime": "2026-11-28T00:00:00Z",
        "completionTime": "2026-11-28T00:01:30Z",
        "conditions": [{"type": "Complete", "status": "True"}],
    }
    table = JobStrategy().table([obj], now)
    assert [c["name"] for c in table["columnDefinitions"]][:5] == [
        "Name",
        "Status",
        "Completions",
        "Duration",
        "Age",
    ]
    assert table["rows"][0]["cells"][:5] == ["train", "Complete", "1/1", "90s", "5m"]


# ------------------------------------------------------------------ the controller


async def test_a_job_runs_its_pod_to_completion(cluster: tuple[SimCluster, FakeClock]) -> None:
    sim, clock = cluster
    body = job()
    body["spec"]["template"]["metadata"] = {"annotations": {"sim.gpusched.io/duration": "30s"}}
    created = await sim.kube.create(JOBS, body)
    pods = await until(sim.kube, PODS, lambda ps: len(running(ps)) == 1)
    (pod,) = pods.values()
    assert pod["metadata"]["generateName"] == "train-"
    assert pod["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "train",
            "uid": created["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert pod["metadata"]["labels"][JOB_NAME_LABEL] == "train"
    active = await job_until(sim.kube, "train", lambda j: j["status"].get("active") == 1)
    assert active["status"]["startTime"] == "2026-11-28T00:00:00Z"
    await clock.advance(31)
    done = await job_until(sim.kube, "train", lambda j: "Complete" in conditions(j))
    assert conditions(done) == {
        "SuccessCriteriaMet": ("True", "CompletionsReached"),
        "Complete": ("True", "CompletionsReached"),
    }
    assert done["status"]["succeeded"] == 1
    assert "active" not in done["status"]
    assert done["status"]["completionTime"] == "2026-11-28T00:00:31Z"


async def test_failed_pods_are_replaced_with_backoff_until_the_limit(
    cluster: tuple[SimCluster, FakeClock],
) -> None:
    sim, clock = cluster
    await sim.kube.create(JOBS, job(backoffLimit=2))
    seen: set[str] = set()
    for failures, delay in ((1, 10), (2, 20)):
        pods = await until(
            sim.kube, PODS, lambda ps: any(n not in seen for n in running(ps)[:1] and ps)
        )
        (pod,) = [p for p in running(pods) if p["metadata"]["name"] not in seen]
        seen.add(pod["metadata"]["name"])
        await crash(sim.kube, pod, clock.now())
        await job_until(sim.kube, "train", lambda j, f=failures: j["status"].get("failed") == f)
        await clock.advance(delay - 1)
        await asyncio.sleep(0.1)
        assert not running(await until(sim.kube, PODS, lambda ps: True))  # still backing off
        await clock.advance(1)
    pods = await until(sim.kube, PODS, lambda ps: len(running(ps)) == 1)
    await crash(sim.kube, running(pods)[0], clock.now())
    failed = await job_until(sim.kube, "train", lambda j: "Failed" in conditions(j))
    assert conditions(failed) == {
        "FailureTarget": ("True", "BackoffLimitExceeded"),
        "Failed": ("True", "BackoffLimitExceeded"),
    }
    assert failed["status"]["failed"] == 3
    assert "completionTime" not in failed["status"]
    await clock.advance(3600)
    assert len(await until(sim.kube, PODS, lambda ps: True)) == 3  # no fourth pod


@pytest.mark.parametrize("propagation", ["Background", "Foreground"])
async def test_deleting_a_job_deletes_its_pods(
    cluster: tuple[SimCluster, FakeClock], propagation: str
) -> None:
    sim, _ = cluster
    await sim.kube.create(JOBS, job(parallelism=2, completions=2))
    await until(sim.kube, PODS, lambda ps: len(running(ps)) == 2)
    options = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
    await sim.kube.delete(f"{JOBS}/train", copy.deepcopy(options))
    await until(sim.kube, PODS, lambda ps: not ps)
    assert not await until(sim.kube, JOBS, lambda js: True)


async def test_api_errors_are_retried_as_upstream_after_1s_then_2s(
    cluster: tuple[SimCluster, FakeClock],
) -> None:
    """The controller's queue (gpusched.kube.controller) retries a Job whose sync failed on an
    API error after ``DefaultJobApiBackOff`` (1 s), doubling, and forgets it once synced."""
    sim, clock = cluster
    assert sim.jobs is not None
    queue = sim.jobs.queue
    sim.faults.set([FaultRule("create", "pods", 1.0, 500)])
    await sim.kube.create(JOBS, job())
    key = f"{NS}/train"
    for tries, delay in ((1, 1.0), (2, 2.0)):
        async with asyncio.timeout(WAIT):
            while True:  # failed, and the retry is timed
                if queue.num_requeues(key) == tries and clock.sleepers:
                    break
                await asyncio.sleep(0.01)
        assert sim.faults.injected[("create", 500)] == tries
        await clock.advance(delay - 0.1)
        await asyncio.sleep(0.1)
        assert sim.faults.injected[("create", 500)] == tries  # not before its time
        if tries == 2:
            sim.faults.set([])
        await clock.advance(0.1)
    await until(sim.kube, PODS, lambda ps: len(ps) == 1)
    await job_until(sim.kube, "train", lambda j: j["status"].get("active") == 1)
    assert queue.num_requeues(key) == 0
