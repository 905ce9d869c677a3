"""Preemption end to end with the real Scheduler (the simulation by default, or the cluster
named by ``GPUSCHED_E2E_KUBECONFIG``): evictions through the Eviction API free a node for a
priority-0 8-GPU pod and nothing else takes its GPUs meanwhile; ``preemptionPolicy: Never``
evicts nothing but still reserves; PodDisruptionBudgets steer the choice, and a 429 keeps the
victim. Every wait is bounded (``WAIT``) and none is asserted on."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import preemption_paths  # noqa: F401  (puts tests/plugins and tests/scheduler on sys.path)
import pytest
from conftest import Target
from scheduler_bed import Bed, assert_no_double_booking, bound, objects_until, open_bed

from gpusched.kube.client import resource_path
from gpusched.plugins.nominated_reservation import REASON_HELD

pytestmark = pytest.mark.simonly  # fake nodes need the simulation's kubelets to end pods


@pytest.fixture
async def bed(target: Target) -> AsyncIterator[Bed]:
    async with open_bed(target) as bed:
        yield bed


def gpu_pod(
    bed: Bed, name: str, gpus: int, level: int, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    body = bed.pod(name, gpus, **{"gpusched.io/priority": str(level)})
    if labels:
        body["metadata"]["labels"].update(labels)
    return body


async def fill(bed: Bed, prefix: str, level: int, labels: dict[str, str] | None = None) -> None:
    """Eight 1-GPU pods at ``level``, bound and running."""
    names = [f"{prefix}{i}" for i in range(8)]
    await bed.create_pods(gpu_pod(bed, n, 1, level, labels) for n in names)

    def running(pods: dict[str, dict[str, Any]]) -> bool:
        return all(
            n in pods and (pods[n].get("status") or {}).get("phase") == "Running" for n in names
        )

    await bed.pods_until(running)


def waiting(pod: dict[str, Any]) -> str:
    """The message of the pod's ``PodScheduled=False`` condition, or ``""``."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return str(cond.get("message", ""))
    return ""


async def events_until(bed: Bed, reason: str, count: int = 1) -> list[dict[str, Any]]:
    events = await objects_until(
        bed.kube,
        bed.events_path,
        lambda evs: sum(1 for e in evs.values() if e.get("reason") == reason) >= count,
    )
    return [e for e in events.values() if e.get("reason") == reason]


async def test_preemption_frees_a_node_for_a_priority_0_8_gpu_pod(bed: Bed) -> None:
    (node,) = await bed.add_nodes(1, "dgx-h100")
    async with bed.running() as scheduler:
        await fill(bed, "low", 2)
        big = await bed.create_pod(gpu_pod(bed, "big", 8, 0))
        # Lower-priority pods keep arriving while the victims go.
        await bed.create_pods(gpu_pod(bed, f"late{i}", 1, 2) for i in range(4))
        pods = await bed.pods_until(lambda ps: "big" in bound(ps))
        assert pods["big"]["spec"]["nodeName"] == node
        assert not [n for n in bound(pods) if n.startswith(("low", "late"))]
        preempted = await events_until(bed, "Preempted", 8)
        messages = {e["involvedObject"]["name"]: e["message"] for e in preempted}
        assert sorted(messages) == [f"low{i}" for i in range(8)]
        uid = big["metadata"]["uid"]
        assert set(messages.values()) == {f"Preempted by pod {uid} on node {node}"}
        assert_no_double_booking(pods, await bed.leases())
        metrics = scheduler.metrics.render().decode()
        assert "scheduler_preemption_attempts_total" in metrics
        assert 'scheduler_preemption_victims_bucket{le="8.0"} 1.0' in metrics, metrics


@contextlib.asynccontextmanager
async def never_class(bed: Bed) -> AsyncIterator[str]:
    """A PriorityClass with ``preemptionPolicy: Never`` (value 1000), deleted afterwards."""
    cls = bed.target.name("never")
    classes = resource_path("scheduling.k8s.io", "v1", "priorityclasses")
    await bed.kube.create(
        classes,
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": cls},
            "value": 1000,
            "preemptionPolicy": "Never",
        },
    )
    try:
        yield cls
    finally:
        await bed.kube.delete(f"{classes}/{cls}")


async def test_policy_never_evicts_nothing_but_reserves_the_node(bed: Bed) -> None:
    (node,) = await bed.add_nodes(1, "dgx-h100")
    async with never_class(bed) as cls, bed.running():
        await fill(bed, "low", 2)
        body = gpu_pod(bed, "big", 8, 0)
        body["spec"]["priorityClassName"] = cls
        await bed.create_pod(body)
        pods = await bed.pods_until(
            lambda ps: (ps.get("big", {}).get("status") or {}).get("nominatedNodeName") == node
        )
        assert len([n for n in bound(pods) if n.startswith("low")]) == 8  # nobody evicted
        # A GPU frees up: a newcomer of lower priority may not take it, the node is kept.
        await bed.delete_pod("low0", now=True)
        await bed.create_pod(gpu_pod(bed, "late", 1, 2))
        await bed.pods_until(lambda ps: REASON_HELD in waiting(ps.get("late", {})))
        for i in range(1, 8):
            await bed.delete_pod(f"low{i}", now=True)
        pods = await bed.pods_until(lambda ps: "big" in bound(ps))
        assert "late" not in bound(pods) or pods["late"]["spec"]["nodeName"] != node


def pdb(bed: Bed, name: str, app: str, min_available: int) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": app}}},
    }


async def wait_budget(bed: Bed, name: str) -> None:
    path = resource_path("policy", "v1", "poddisruptionbudgets", bed.namespace)
    await objects_until(
        bed.kube,
        path,
        lambda objs: (
            name in objs
            and (objs[name].get("status") or {}).get("observedGeneration") is not None
            and (objs[name].get("status") or {}).get("currentHealthy", 0) >= 8
        ),
    )


async def test_pdbs_steer_preemption_to_the_node_without_violations(bed: Bed) -> None:
    await bed.add_nodes(2, "dgx-h100")
    path = resource_path("policy", "v1", "poddisruptionbudgets", bed.namespace)
    await bed.kube.create(path, pdb(bed, "db", "db", 8))
    async with bed.running():
        await fill(bed, "db", 3, {"app": "db"})  # the lowest priority, but guarded
        await fill(bed, "web", 2)
        await wait_budget(bed, "db")
        await bed.create_pod(gpu_pod(bed, "big", 8, 0))
        pods = await bed.pods_until(lambda ps: "big" in bound(ps))
        assert len([n for n in bound(pods) if n.startswith("db")]) == 8
        web_node = {p["spec"]["nodeName"] for n, p in pods.items() if n.startswith("web")}
        assert not web_node or pods["big"]["spec"]["nodeName"] not in web_node


async def test_an_eviction_refused_by_a_pdb_keeps_the_victim(bed: Bed) -> None:
    await bed.add_nodes(1, "dgx-h100")
    path = resource_path("policy", "v1", "poddisruptionbudgets", bed.namespace)
    await bed.kube.create(path, pdb(bed, "db", "db", 8))
    async with bed.running():
        await fill(bed, "db", 3, {"app": "db"})
        await wait_budget(bed, "db")
        await bed.create_pod(gpu_pod(bed, "big", 1, 0))
        (blocked, *_) = await events_until(bed, "PreemptionBlocked")
        assert blocked["involvedObject"]["name"] == "big"
        assert "was not evicted" in blocked["message"]
        pods = await bed.pods_until(lambda ps: len(bound(ps)) >= 8)
        assert sorted(bound(pods)) == [f"db{i}" for i in range(8)]


async def test_a_nomination_written_by_another_replica_is_kept(bed: Bed) -> None:
    """``status.nominatedNodeName`` written by someone else (another replica, or this one
    before a restart) is read back from the informer: the node's GPUs are held for the pod,
    and freed when it is deleted."""
    (node,) = await bed.add_nodes(1, "dgx-h100")
    async with bed.running(), never_class(bed) as cls:
        # Fits no node, and may not preempt: this scheduler neither nominates it nor clears
        # the nomination written for it (an eligible pod's failed preemption would).
        body = gpu_pod(bed, "huge", 16, 0)
        body["spec"]["priorityClassName"] = cls
        await bed.create_pod(body)
        await bed.pods_until(lambda ps: bool(waiting(ps.get("huge", {}))))
        await bed.kube.patch(
            f"{bed.pods_path}/huge/status", {"status": {"nominatedNodeName": node}}
        )
        await bed.create_pod(gpu_pod(bed, "low", 1, 2))
        await bed.pods_until(lambda ps: REASON_HELD in waiting(ps.get("low", {})))
        await bed.delete_pod("huge", now=True)
        pods = await bed.pods_until(lambda ps: "low" in bound(ps))
        assert pods["low"]["spec"]["nodeName"] == node


async def test_a_nomination_cleared_by_another_replica_frees_the_node(bed: Bed) -> None:
    """The replica that owns a pod clears its nomination in the pod's status: every other
    replica's cache drops it too, and the pods it held off the node may take it."""
    (node,) = await bed.add_nodes(1, "dgx-h100")
    async with bed.running(), never_class(bed) as cls:
        body = gpu_pod(bed, "huge", 16, 0)
        body["spec"]["priorityClassName"] = cls
        await bed.create_pod(body)
        await bed.pods_until(lambda ps: bool(waiting(ps.get("huge", {}))))
        status = f"{bed.pods_path}/huge/status"
        await bed.kube.patch(status, {"status": {"nominatedNodeName": node}})
        await bed.create_pod(gpu_pod(bed, "low", 1, 2))
        await bed.pods_until(lambda ps: REASON_HELD in waiting(ps.get("low", {})))
        await bed.kube.patch(status, {"status": {"nominatedNodeName": None}})
        pods = await bed.pods_until(lambda ps: "low" in bound(ps))
        assert pods["low"]["spec"]["nodeName"] == node


async def test_a_nomination_that_no_longer_helps_is_cleared(bed: Bed) -> None:
    """An eligible pod whose preemption finds nothing has its nomination cleared (upstream's
    empty node name): ``status.nominatedNodeName`` goes, and the node's GPUs with it."""
    (node,) = await bed.add_nodes(1, "dgx-h100")
    async with bed.running():
        await bed.create_pod(gpu_pod(bed, "huge", 16, 0))
        await bed.pods_until(lambda ps: bool(waiting(ps.get("huge", {}))))
        await bed.kube.patch(
            f"{bed.pods_path}/huge/status", {"status": {"nominatedNodeName": node}}
        )
        await bed.kube.patch(f"{bed.pods_path}/huge", {"metadata": {"labels": {"retry": "1"}}})
        await bed.pods_until(
            lambda ps: (
                (ps["huge"]["metadata"].get("labels") or {}).get("retry") == "1"
                and not (ps["huge"].get("status") or {}).get("nominatedNodeName")
            )
        )
        await bed.create_pod(gpu_pod(bed, "low", 1, 2))
        pods = await bed.pods_until(lambda ps: "low" in bound(ps))
        assert pods["low"]["spec"]["nodeName"] == node
