"""gpusched's webhook in the simulation: served in-process, registered through the API, and
deciding MIG fallback from its informers; end to end with the scheduler and kubelets on the
``mig-medium`` fleet (2 nodes x 4 cards x (3 x 2g.20gb + 1 x 1g.10gb): 24 x 2g.20gb, 8 x
1g.10gb)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from gpusched.clock import RealClock
from gpusched.gpu_requests import RequestError, read_gpu_request
from gpusched.kube.client import Kube
from gpusched.kube.errors import APIError, APIForbidden
from gpusched.scheduler import Scheduler
from gpusched.sim import SimCluster
from gpusched.sim import webhook as sim_webhook
from gpusched.sim.fleet import load_cluster_spec
from gpusched.sim.run import RunReport, summary
from gpusched.sim.workload import load_workload
from gpusched.webhook import WebhookConfig
from gpusched.webhook.mig_view import MigView
from gpusched.webhook.mutate import MIG_FALLBACK_APPLIED

PODS = "/api/v1/namespaces/default/pods"
MWC = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
VWC = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
MIG = "nvidia.com/mig-"
WAIT = 20.0


def mig_pod(
    name: str, profile: str = "2g.20gb", count: int = 1, node: str | None = None, **annotations: str
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "gpusched",
        "containers": [
            {
                "name": "main",
                "image": "cuda",
                "resources": {"limits": {MIG + profile: str(count)}},
            }
        ],
    }
    if node is not None:
        spec["nodeName"] = node  # bound at creation: fills devices without a scheduler
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": spec,
    }


def limits(pod: dict[str, Any]) -> dict[str, str]:
    return dict(pod["spec"]["containers"][0]["resources"]["limits"])


async def until(
    kube: Kube, name: str, done: Callable[[dict[str, Any]], bool], timeout: float = WAIT
) -> dict[str, Any]:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        pod = await kube.get(f"{PODS}/{name}")
        if done(pod):
            return pod
        assert asyncio.get_running_loop().time() < deadline, f"{name}: {pod.get('status')}"
        await asyncio.sleep(0.05)


def view_of(sim: SimCluster) -> MigView:
    assert sim.webhook is not None
    assert sim.webhook.view is not None
    return sim.webhook.view


@pytest.fixture
async def sim() -> AsyncIterator[SimCluster]:
    async with SimCluster("mig-medium", webhook=True) as cluster:
        yield cluster


def test_all_is_complete() -> None:
    assert sim_webhook.__all__ == ["SimWebhook"]


async def test_registered_as_deploy_webhook_yaml_registers_it(sim: SimCluster) -> None:
    assert sim.webhook is not None
    assert sim.webhook.url.startswith("https://127.0.0.1:")
    for path, name in ((MWC, "mutate.webhook.gpusched.io"), (VWC, "validate.webhook.gpusched.io")):
        (config,) = (await sim.kube.get(path))["items"]
        (hook,) = config["webhooks"]
        assert hook["name"] == name
        assert hook["clientConfig"]["service"]["name"] == "gpusched-webhook"
        assert hook["clientConfig"]["caBundle"]
    # Another scheduler's pods are not the webhook's to change.
    other = mig_pod("other")
    other["spec"]["schedulerName"] = "default-scheduler"
    created = await sim.kube.create(PODS, other)
    assert "env" not in created["spec"]["containers"][0]


async def test_off_by_default_and_configurable() -> None:
    async with SimCluster(kubelets=False) as plain:
        assert plain.webhook is None
        assert (await plain.kube.get(MWC))["items"] == []
    config = WebhookConfig(failure_policy="Fail")
    async with SimCluster(kubelets=False, webhook=config) as sim:
        assert sim.webhook is not None
        (hook,) = (await sim.kube.get(VWC))["items"][0]["webhooks"]
        assert hook["failurePolicy"] == "Fail"


BAD_REQUESTS = [
    ("shared-without-vram", {"gpusched.io/gpu": "1"}, {}),
    ("mig-and-whole", {"nvidia.com/gpu": "1", "nvidia.com/mig-1g.10gb": "1"}, {}),
    ("fallback-without-mig", {"nvidia.com/gpu": "1"}, {"gpusched.io/mig-fallback": "1g.10gb"}),
    ("priority-7", {"nvidia.com/gpu": "1"}, {"gpusched.io/priority": "7"}),
]


@pytest.mark.parametrize(
    ("limits_", "annotations"), [c[1:] for c in BAD_REQUESTS], ids=[c[0] for c in BAD_REQUESTS]
)
async def test_a_malformed_request_is_denied_with_the_readers_message(
    sim: SimCluster, limits_: dict[str, str], annotations: dict[str, str]
) -> None:
    body = mig_pod("bad", **annotations)
    body["spec"]["containers"][0]["resources"]["limits"] = limits_
    with pytest.raises(RequestError) as read:
        read_gpu_request(body)
    with pytest.raises(APIError) as denied:
        await sim.kube.create(PODS, body)
    assert isinstance(denied.value, APIForbidden)
    assert denied.value.message == (
        f'admission webhook "validate.webhook.gpusched.io" denied the request: {read.value}'
    )


async def _fill(sim: SimCluster, profile: str, per_node: int) -> None:
    nodes = [n["metadata"]["name"] for n in (await sim.kube.get("/api/v1/nodes"))["items"]]
    for node in nodes:
        await sim.kube.create(PODS, mig_pod(f"fill-{profile}-{node}", profile, per_node, node))
    view = view_of(sim)
    deadline = asyncio.get_running_loop().time() + WAIT
    while any(view.free(n).get(profile) for n in nodes):
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.02)


# (name, filled first: profile -> devices per node, asked, annotations, limits after, applied)
Case = tuple[str, dict[str, int], str, dict[str, str], dict[str, str], str | None]
FALLBACK_CASES: list[Case] = [
    ("preferred-free", {}, "2g.20gb", {"gpusched.io/mig-fallback": "1g.10gb"},
     {MIG + "2g.20gb": "1"}, None),
    ("preferred-full", {"2g.20gb": 12}, "2g.20gb", {"gpusched.io/mig-fallback": "1g.10gb"},
     {MIG + "1g.10gb": "1"}, "2g.20gb->1g.10gb"),
    ("no-list-no-fallback", {"2g.20gb": 12}, "2g.20gb", {}, {MIG + "2g.20gb": "1"}, None),
    ("all-full", {"2g.20gb": 12, "1g.10gb": 4}, "2g.20gb", {"gpusched.io/mig-fallback": "1g.10gb"},
     {MIG + "2g.20gb": "1"}, None),
    ("first-free-fallback", {"2g.20gb": 12}, "2g.20gb",
     {"gpusched.io/mig-fallback": "3g.40gb,1g.10gb"}, {MIG + "1g.10gb": "1"},
     "2g.20gb->1g.10gb"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("filled", "asked", "annotations", "expected", "applied"),
    [c[1:] for c in FALLBACK_CASES],
    ids=[c[0] for c in FALLBACK_CASES],
)
async def test_mig_fallback_at_admission(
    sim: SimCluster,
    filled: dict[str, int],
    asked: str,
    annotations: dict[str, str],
    expected: dict[str, str],
    applied: str | None,
) -> None:
    for profile, per_node in filled.items():
        await _fill(sim, profile, per_node)
    created = await sim.kube.create(PODS, mig_pod("p", asked, **annotations))
    assert limits(created) == expected
    assert created["metadata"].get("annotations", {}).get(MIG_FALLBACK_APPLIED) == applied
    read_gpu_request(created)  # what was admitted reads cleanly: the list no longer names it


async def test_free_counts_follow_pods_that_finish_or_go(sim: SimCluster) -> None:
    await _fill(sim, "2g.20gb", 12)
    view = view_of(sim)
    node = sorted(n["metadata"]["name"] for n in (await sim.kube.get("/api/v1/nodes"))["items"])[0]
    assert view.free(node) == {"2g.20gb": 0, "1g.10gb": 4}
    await sim.kube.delete(f"{PODS}/fill-2g.20gb-{node}", {"gracePeriodSeconds": 0})
    deadline = asyncio.get_running_loop().time() + WAIT
    while view.free(node)["2g.20gb"] != 12:
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.02)
    view._check()
    # A node cordoned offers nothing; uncordoned, it offers its devices again.
    for unschedulable, free in ((True, {}), (False, {"2g.20gb": 12, "1g.10gb": 4})):
        await sim.kube.patch(f"/api/v1/nodes/{node}", {"spec": {"unschedulable": unschedulable}})
        deadline = asyncio.get_running_loop().time() + WAIT
        while view.free(node) != free:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.02)
        view._check()


async def test_an_unsynced_view_applies_no_fallback() -> None:
    async with SimCluster(kubelets=False) as sim:
        view = MigView(Kube(sim.api_client()))  # never run: never synced
        pod = mig_pod("p", **{"gpusched.io/mig-fallback": "1g.10gb"})
        assert await view.wait_synced(timeout=0.01) is False
        assert await view(pod) is None


async def test_fallback_pod_ends_running_on_its_fallback_and_one_without_a_list_waits() -> None:
    clock = RealClock()
    async with SimCluster("mig-medium", clock=clock, webhook=True) as sim:
        scheduler = Scheduler(Kube(sim.api_client()), clock=clock, identity="test-webhook")
        task = asyncio.create_task(scheduler.run(), name="scheduler")
        try:
            await asyncio.wait_for(scheduler.ready.wait(), WAIT)
            # Fill every 2g.20gb device through the scheduler: 24 pods of one device each.
            for i in range(24):
                await sim.kube.create(PODS, mig_pod(f"fill-{i}"))
            for i in range(24):
                await until(sim.kube, f"fill-{i}", lambda p: p["status"].get("phase") == "Running")
            view = view_of(sim)
            deadline = asyncio.get_running_loop().time() + WAIT
            while view.fits_somewhere("2g.20gb", 1):
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.02)
            fallback = await sim.kube.create(
                PODS, mig_pod("fallback", **{"gpusched.io/mig-fallback": "1g.10gb"})
            )
            assert limits(fallback) == {MIG + "1g.10gb": "1"}
            view._check()
            waiting = await sim.kube.create(PODS, mig_pod("no-list"))
            assert limits(waiting) == {MIG + "2g.20gb": "1"}
            running = await until(
                sim.kube, "fallback", lambda p: p["status"].get("phase") == "Running"
            )
            assert running["metadata"]["annotations"][MIG_FALLBACK_APPLIED] == "2g.20gb->1g.10gb"
            assert running["spec"]["nodeName"]
            assert limits(running) == {MIG + "1g.10gb": "1"}
            names = {e["name"] for e in running["spec"]["containers"][0].get("env", ())}
            assert {"GPUSCHED_GPU_IDS", "GPUSCHED_GPU_UUIDS"} <= names
            pending = await until(
                sim.kube,
                "no-list",
                lambda p: any(
                    c.get("type") == "PodScheduled" and c.get("status") == "False"
                    for c in p["status"].get("conditions") or ()
                ),
            )
            assert not pending["spec"].get("nodeName")
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def test_the_run_summary_counts_mig_fallbacks() -> None:
    report = RunReport(mig_fallbacks=Counter({"2g.20gb->1g.10gb": 3}))
    text = summary(report, load_cluster_spec("mig-medium"), load_workload("smoke"))
    assert "MIG fallback at admission: 3 pod(s) 2g.20gb->1g.10gb" in text
