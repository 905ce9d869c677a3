"""Conformance: PriorityClass, Priority admission, PodDisruptionBudgets and eviction.

What a client sees of ``scheduling.k8s.io/v1`` and ``policy/v1`` against kube-apiserver with
kube-controller-manager's disruption controller, and against the simulation: the bootstrapped
system classes, upstream's 403 wording, the zeroed status a new PDB starts with and the
controller's first status, and evictions that need no budget (a pod not running yet). Pods
are never started here (no kubelet runs them), so the running-pod cases live in
``tests/sim/test_sim_eviction.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
from conformance_helpers import call, default_service_account, fails, http, pod, wait_for, wait_gone
from conftest import Target
from kubernetes_asyncio import client as k8s


@pytest.fixture
async def cluster(target: Target) -> Target:
    await default_service_account(target)
    return target


def priority_class(name: str, value: int, **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        **extra,
    }


async def test_system_priority_classes_exist(cluster: Target) -> None:
    api = k8s.SchedulingV1Api(cluster.api())
    reply = await call(api.read_priority_class, "system-node-critical")
    assert reply.status == 200
    assert reply.body["value"] == 2000001000
    assert reply.body["preemptionPolicy"] == "PreemptLowerPriority"
    reply = await call(api.read_priority_class, "system-cluster-critical")
    assert reply.body["value"] == 2000000000


async def test_priority_admission(cluster: Target) -> None:
    api = k8s.SchedulingV1Api(cluster.api())
    core = cluster.core()
    name = cluster.name("batch")
    reply = await call(
        api.create_priority_class, priority_class(name, 4242, preemptionPolicy="Never")
    )
    assert reply.status == 201, reply.body
    try:
        created = await call(
            core.create_namespaced_pod, cluster.namespace, pod("p", priorityClassName=name)
        )
        assert created.status == 201, created.body
        spec = created.body["spec"]
        assert (spec["priority"], spec["preemptionPolicy"]) == (4242, "Never")
        body = await fails(
            core.create_namespaced_pod(
                cluster.namespace, pod("q", priorityClassName=cluster.name("missing"))
            ),
            403,
        )
        assert body["message"] == (
            f'pods "q" is forbidden: no PriorityClass with name {cluster.name("missing")} was found'
        )
        body = await fails(
            core.create_namespaced_pod(
                cluster.namespace, pod("r", priorityClassName=name, priority=1)
            ),
            403,
        )
        assert body["message"] == (
            'pods "r" is forbidden: the integer value of priority (1) must not be provided in '
            "pod spec; priority admission controller computed 4242 from the given PriorityClass "
            "name"
        )
    finally:
        await call(api.delete_priority_class, name)


async def test_a_budget_starts_zeroed_and_the_controller_counts_pods(cluster: Target) -> None:
    core = cluster.core()
    policy = k8s.PolicyV1Api(cluster.api())
    for i in range(2):
        reply = await call(
            core.create_namespaced_pod,
            cluster.namespace,
            pod(f"p{i}", labels={"app": "train"}),
        )
        assert reply.status == 201, reply.body
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "b"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "train"}}},
    }
    reply = await call(policy.create_namespaced_pod_disruption_budget, cluster.namespace, budget)
    assert reply.status == 201, reply.body
    assert reply.body["metadata"]["generation"] == 1
    assert reply.body["status"] == {
        "disruptionsAllowed": 0,
        "currentHealthy": 0,
        "desiredHealthy": 0,
        "expectedPods": 0,
    }
    synced = await wait_for(
        policy.list_namespaced_pod_disruption_budget,
        cluster.namespace,
        name="b",
        until=lambda o: o["status"].get("observedGeneration") == 1,
    )
    status = synced["status"]
    assert (status["expectedPods"], status["desiredHealthy"], status["currentHealthy"]) == (
        2,
        1,
        0,
    )
    assert status["disruptionsAllowed"] == 0
    (cond,) = status["conditions"]
    assert (cond["type"], cond["status"], cond["reason"]) == (
        "DisruptionAllowed",
        "False",
        "InsufficientPods",
    )
    # A pod that is not running yet is evicted without looking at the budget.
    reply = await http(
        cluster.api(),
        "POST",
        f"/api/v1/namespaces/{cluster.namespace}/pods/p0/eviction",
        body={
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": "p0", "namespace": cluster.namespace},
        },
    )
    assert reply.status == 201, reply.body
    assert reply.body["status"] == "Success"
    await wait_gone(core.list_namespaced_pod, cluster.namespace, name="p0")
