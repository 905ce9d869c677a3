"""The agent's shipped RBAC and own-node policy on the simulated API server, which authorizes
service-account tokens by the stored RBAC and enforces ValidatingAdmissionPolicies with CEL
(gpusched.sim.vap): after `kubectl apply -k deploy/`, a token bound to node A (as the
DaemonSet pod's is) writes A's Node, GPUNodeInventory and pods, and nothing of node B's, nor
the label that chooses the device-plugin DaemonSet."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from deploy_helpers import DEPLOY, KUBECTL, NAMESPACE

from gpusched.kube.client import Kube, resource_path
from gpusched.kube.errors import APIError, APIForbidden
from gpusched.sim import SimCluster
from gpusched.sim.fleet import load_cluster_spec

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.simonly,
    pytest.mark.skipif(KUBECTL is None, reason="kubectl (with kustomize) is not installed"),
]

A, B = "dgx-h100-000", "dgx-h100-001"
AGENT = "gpusched-agent"
INVENTORIES = resource_path("gpusched.io", "v1alpha1", "gpunodeinventories")


@pytest.fixture
async def sim() -> AsyncIterator[SimCluster]:
    async with SimCluster(load_cluster_spec("dgx-h100", nodes=2), kubelets=False) as cluster:
        assert KUBECTL is not None
        proc = await asyncio.create_subprocess_exec(
            *(KUBECTL, "--kubeconfig", str(cluster.kubeconfig_path), "apply", "-k", str(DEPLOY)),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={"HOME": str(cluster.kubeconfig_path.parent), "PATH": "/usr/bin:/bin"},
        )
        _, err = await proc.communicate()
        assert proc.returncode == 0, err.decode()
        yield cluster


def node_path(name: str) -> str:
    return resource_path("", "v1", "nodes", name=name)


def pod_path(name: str) -> str:
    return resource_path("", "v1", "pods", "default", name)


async def _pod(sim: SimCluster, name: str, node: str | None) -> None:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "x"}]}
    if node:
        spec["nodeName"] = node
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}
    await sim.kube.create(resource_path("", "v1", "pods", "default"), pod)


def _labels(labels: dict[str, str | None]) -> dict[str, Any]:
    return {"metadata": {"labels": labels}}


def _annotations(annotations: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"annotations": annotations}}


WRITES = [
    # (what, the token's node, path, body, allowed, message of the refusal). Node B is labelled
    # to keep NVIDIA's device plugin (gpusched.io/device-plugin=false).
    ("own node's gpusched label", A, node_path(A), _labels({"gpusched.io/check": "1"}), False,
     "may change only the GPU labels it publishes"),
    ("another node's labels", A, node_path(B), _labels({"gpusched.io/check": "1"}), False,
     f"the gpusched agent of node {A} may only write the nodes named {A}"),
    ("own node's device-plugin label", A, node_path(A),
     _labels({"gpusched.io/device-plugin": "false"}), False,
     "may not change its node's gpusched.io/device-plugin label"),
    ("labels beside the device-plugin label", B, node_path(B),
     _labels({"nvidia.com/gpu.count": "8"}), True, ""),
    ("the device-plugin label away", B, node_path(B),
     _labels({"gpusched.io/device-plugin": None}), False,
     "may not change its node's gpusched.io/device-plugin label"),
    ("own inventory", A, f"{INVENTORIES}/{A}", _labels({"gpusched.io/check": "1"}), True, ""),
    ("another node's inventory", A, f"{INVENTORIES}/{B}", _labels({"gpusched.io/check": "1"}),
     False, f"may only write the gpunodeinventories named {A}"),
    ("own inventory's status", A, f"{INVENTORIES}/{A}/status",
     {"status": {"usedMemoryMiB": 1}}, True, ""),
    ("another inventory's status", A, f"{INVENTORIES}/{B}/status",
     {"status": {"usedMemoryMiB": 1}}, False, f"may only write the gpunodeinventories named {A}"),
    ("a pod on its node", A, pod_path("on-a"), _annotations({"gpusched.io/allocated": "x"}),
     True, ""),
    ("a pod on another node", A, pod_path("on-b"),
     _annotations({"gpusched.io/allocated": "x"}), False,
     f"the gpusched agent of node {A} may only write pods bound to that node"),
    ("a pod's image on its node", A, pod_path("on-a"),
     {"spec": {"containers": [{"name": "c", "image": "evil:latest"}]}}, False,
     "may not change the spec, finalizers or owners of pods"),
    ("a pod's labels on its node", A, pod_path("on-a"), _labels({"app": "hijack"}), False,
     "may not change the labels of pods"),
    ("a pod's other annotation", A, pod_path("on-a"), _annotations({"gpusched.io/gpu-ids": "0"}),
     False, "only the gpusched.io/allocated annotation"),
    ("a pod's finalizers", A, pod_path("on-a"), {"metadata": {"finalizers": ["x.io/keep"]}},
     False, "may not change the spec, finalizers or owners of pods"),
    ("own node's taints", A, node_path(A),
     {"spec": {"taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]}}, False,
     "may not change the spec, finalizers or owners of nodes"),
    ("own node unschedulable", A, node_path(A), {"spec": {"unschedulable": True}}, False,
     "may not change the spec, finalizers or owners of nodes"),
    ("own node's role label", A, node_path(A),
     _labels({"node-role.kubernetes.io/control-plane": ""}), False,
     "may change only the GPU labels it publishes"),
    ("own node's GPU labels", A, node_path(A),
     _labels({"nvidia.com/gpu.product": "X", "nvidia.com/mig-1g.10gb.count": "7"}), True, ""),
    ("own node's gpusched annotation", A, node_path(A),
     _annotations({"gpusched.io/agent-labels": "nvidia.com/gpu.product"}), True, ""),
    ("own node's other annotation", A, node_path(A), _annotations({"x.io/y": "z"}), False,
     "may change only gpusched.io/ annotations of its node"),
    ("a pod bound to no node", A, pod_path("unbound"),
     _annotations({"gpusched.io/allocated": "x"}), False,
     f"the gpusched agent of node {A} may only write pods bound to that node"),
]  # fmt: skip


@pytest.mark.parametrize(("what", "node", "path", "body", "allowed", "message"), WRITES,
                         ids=[w[0] for w in WRITES])  # fmt: skip
async def test_the_agent_of_a_node_writes_only_that_node(
    sim: SimCluster, what: str, node: str, path: str, body: dict[str, Any], allowed: bool,
    message: str,
) -> None:  # fmt: skip
    await sim.kube.patch(node_path(B), _labels({"gpusched.io/device-plugin": "false"}))
    await _pod(sim, "on-a", A)
    await _pod(sim, "on-b", B)
    await _pod(sim, "unbound", None)
    agent = Kube(sim.api_client(token=sim.service_account_token(NAMESPACE, AGENT, node=node)))
    if allowed:
        await agent.patch(path, body)
        return
    with pytest.raises(APIForbidden) as refused:
        await agent.patch(path, body)
    assert "ValidatingAdmissionPolicy 'gpusched-agent-own-node'" in str(refused.value)
    assert message in str(refused.value)


async def test_other_users_are_not_held_to_a_node(sim: SimCluster) -> None:
    await sim.kube.patch(node_path(B), _labels({"gpusched.io/device-plugin": "false"}))
    await sim.kube.patch(node_path(B), _labels({"gpusched.io/device-plugin": None}))


async def test_a_token_without_a_node_writes_nothing(sim: SimCluster) -> None:
    agent = Kube(sim.api_client(token=sim.service_account_token(NAMESPACE, AGENT)))
    with pytest.raises(APIForbidden, match="token carries no node name"):
        await agent.patch(node_path(A), _labels({"gpusched.io/check": "1"}))
    assert (await agent.get(node_path(A)))["metadata"]["name"] == A  # reads are RBAC's


@pytest.mark.parametrize(("verb", "path"), [
    ("delete", node_path(A)),
    ("delete", f"{INVENTORIES}/{A}"),
    ("get", resource_path("", "v1", "secrets", NAMESPACE)),
    ("get", resource_path("coordination.k8s.io", "v1", "leases", NAMESPACE)),
])  # fmt: skip
async def test_rbac_refuses_the_agent_what_it_does_not_need(
    sim: SimCluster, verb: str, path: str
) -> None:
    agent = Kube(sim.api_client(token=sim.service_account_token(NAMESPACE, AGENT, node=A)))
    with pytest.raises(APIError) as refused:
        await (agent.delete(path) if verb == "delete" else agent.get(path))
    assert refused.value.code == 403
    assert "ValidatingAdmissionPolicy" not in str(refused.value)
