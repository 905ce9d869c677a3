"""The scheduler's events, both kinds.

Cluster events (gpusched.scheduler's queueing hints), table-driven over the default profile:
the events the scheduler emits, the plugins registered for each, and what their hints say; a
Node heartbeat wakes nobody. And Event objects: a burst of 2,000 pods bound by a Scheduler on
the simulated cluster gets its 2,000 ``Scheduled`` Events, counted from the API, with the
recorder's rate limit waiting on a fake clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections import Counter
from typing import Any

import pytest

from gpusched.clock import FakeClock
from gpusched.events import EventRecorder
from gpusched.framework import QueueingHint, build_frameworks, default_config, in_tree
from gpusched.kube.client import resource_path
from gpusched.scheduler import EVENTS, Scheduler, _scheduling_properties, event_hints
from gpusched.sim import SimCluster
from gpusched.sim.fleet import load_cluster_spec


def _hints() -> dict[str, dict[str, list[Any]]]:
    return event_hints(build_frameworks(default_config(), in_tree()).values())


def _pod(gpus: int = 1, node: str = "", phase: str = "Pending") -> dict[str, Any]:
    pod: dict[str, Any] = {
        "metadata": {"name": "p", "namespace": "default", "uid": "u"},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "resources": {  # as the API server defaults them: requests from limits
                        "limits": {"nvidia.com/gpu": str(gpus)},
                        "requests": {"nvidia.com/gpu": str(gpus)},
                    },
                }
            ]
        },
        "status": {"phase": phase},
    }
    if node:
        pod["spec"]["nodeName"] = node
    return pod


def _node(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "n", "labels": {"zone": "a"}},
        "spec": {},
        "status": {
            "allocatable": {"nvidia.com/gpu": "8"},
            "conditions": [
                {"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-11-21T10:00:00Z"}
            ],
            **status,
        },
    }


def test_every_emitted_event_has_its_plugins() -> None:
    hints = _hints()
    assert set(hints) <= set(EVENTS)
    assert "GPUFit" in hints["Pod/Delete"]
    assert "NodeResourcesFit" in hints["Pod/Delete"]
    assert "GPUFit" in hints["GPUNodeInventory/Add"]
    assert "TaintToleration" in hints["Node/Update"]
    assert "TaintToleration" not in hints.get("Pod/Delete", {})


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (_pod(1, node="n"), None, QueueingHint.QUEUE),  # a bound GPU pod deleted
        (_pod(1), None, QueueingHint.QUEUE_SKIP),  # an unbound one: nothing was held
        (_pod(1, node="n"), _pod(1, node="n", phase="Succeeded"), QueueingHint.QUEUE),
        (_pod(1, node="n"), _pod(1, node="n", phase="Running"), QueueingHint.QUEUE_SKIP),
    ],
)
def test_gpufit_hints_on_pods(old: Any, new: Any, expected: QueueingHint) -> None:
    hints = _hints()
    event = "Pod/Delete" if new is None else "Pod/Update"
    (fn,) = hints[event]["GPUFit"]
    assert fn is not None
    assert fn(_pod(2), old, new) == expected


def test_a_heartbeat_is_no_scheduling_change_but_a_label_or_allocatable_is() -> None:
    node = _node()
    beat = copy.deepcopy(node)
    beat["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-11-21T10:00:10Z"
    assert _scheduling_properties(beat) == _scheduling_properties(node)
    relabelled = copy.deepcopy(node)
    relabelled["metadata"]["labels"]["zone"] = "b"
    assert _scheduling_properties(relabelled) != _scheduling_properties(node)
    grown = _node(allocatable={"nvidia.com/gpu": "16"})
    assert _scheduling_properties(grown) != _scheduling_properties(node)
    not_ready = copy.deepcopy(node)
    not_ready["status"]["conditions"][0]["status"] = "False"
    assert _scheduling_properties(not_ready) != _scheduling_properties(node)


BURST = 2000


def _gpu_pod(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"burst-{i:04d}", "namespace": "default"},
        "spec": {
            "schedulerName": "gpusched",
            "containers": [
                {"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ],
        },
    }


async def test_every_pod_of_a_burst_gets_its_scheduled_event() -> None:
    spec = load_cluster_spec("dgx-h100", nodes=BURST // 8)
    async with SimCluster(spec, kubelets=False) as sim:
        kube = sim.kube
        await kube.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpusched-system"}},
        )
        scheduler = Scheduler(kube, default_config(), identity="burst")
        clock = FakeClock()  # the Events' budget waits on it; scheduling does not
        scheduler.events = recorder = EventRecorder(
            kube,
            clock,
            instance="burst",
            on_write=scheduler.metrics.api_write,
            metrics=scheduler.metrics,
        )
        task = asyncio.create_task(scheduler.run())
        try:
            await asyncio.wait_for(scheduler.ready.wait(), 60)
            gate = asyncio.Semaphore(32)

            async def create(i: int) -> None:
                async with gate:
                    await kube.create(resource_path("", "v1", "pods", "default"), _gpu_pod(i))

            await asyncio.gather(*(create(i) for i in range(BURST)))
            async with asyncio.timeout(300):
                while recorder.written < BURST:  # then every Event is written (or lost)
                    if clock.sleepers:
                        await clock.advance(1.0)
                    else:
                        await asyncio.sleep(0)  # binds and writes are on their way
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        pods = (await kube.get("/api/v1/namespaces/default/pods"))["items"]
        events = (await kube.get("/api/v1/namespaces/default/events"))["items"]
    assert sum(1 for p in pods if p["spec"].get("nodeName")) == BURST
    scheduled = Counter(e["involvedObject"]["uid"] for e in events if e["reason"] == "Scheduled")
    assert scheduled == Counter({p["metadata"]["uid"]: 1 for p in pods})
    assert recorder.dropped == 0
    assert clock.monotonic() >= (BURST - 100) / 50  # the burst waited for its tokens
