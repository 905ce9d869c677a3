"""DefaultBinder: the Binding POST, its annotations, and what 409 and 404 say."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from builders import make_pod

from gpusched.annotations import (
    GPU_IDS,
    GPU_UUIDS,
    RESERVATION_UID,
    RESERVED_VRAM_MIB,
    Assignment,
    parse_assignment,
)
from gpusched.framework import (
    DEVICE_ASSIGNMENT,
    SUCCESS,
    Code,
    CycleState,
    Framework,
    build_frameworks,
    default_config,
    in_tree,
)
from gpusched.kube import Kube
from gpusched.plugins.default_binder import NAME, DefaultBinder, binding_body
from gpusched.sim import SimCluster

NS = "ml"
ASSIGNED = Assignment((2, 3), ("GPU-a", "GPU-b"), (32510, 32510), "res-1")


@pytest.fixture
async def kube() -> AsyncIterator[Kube]:
    async with SimCluster(None, kubelets=False) as sim:
        await sim.kube.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
        )
        yield sim.kube


def framework(kube: Kube) -> Framework:
    return build_frameworks(default_config(), in_tree(), kube=kube)["gpusched"]


async def create_pod(kube: Kube, name: str = "train") -> dict[str, Any]:
    body = make_pod(name, namespace=NS).gpus(2).obj()
    del body["metadata"]["uid"], body["status"]
    pod: dict[str, Any] = await kube.create(f"/api/v1/namespaces/{NS}/pods", body)
    return pod


def test_binding_body() -> None:
    pod = make_pod("p", namespace=NS, uid="u-1").obj()
    assert binding_body(pod, "node-1", ASSIGNED) == {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {
            "name": "p",
            "namespace": NS,
            "uid": "u-1",
            "annotations": {
                GPU_IDS: "2,3",
                GPU_UUIDS: "GPU-a,GPU-b",
                RESERVED_VRAM_MIB: "32510,32510",
                RESERVATION_UID: "res-1",
            },
        },
        "target": {"apiVersion": "v1", "kind": "Node", "name": "node-1"},
    }
    assert "annotations" not in binding_body(pod, "node-1", None)["metadata"]


async def test_bind_sets_the_node_and_the_annotations(kube: Kube) -> None:
    fw = framework(kube)
    assert fw.list_plugins()["bind"] == [NAME]
    pod = await create_pod(kube)
    state = CycleState()
    state.write(DEVICE_ASSIGNMENT, ASSIGNED)
    assert await fw.run_bind(state, pod, "node-1") is SUCCESS
    bound = await kube.get(f"/api/v1/namespaces/{NS}/pods/train")
    assert bound["spec"]["nodeName"] == "node-1"
    assert parse_assignment(bound) == ASSIGNED


async def test_a_pod_without_gpus_is_bound_without_annotations(kube: Kube) -> None:
    pod = await create_pod(kube)
    assert await framework(kube).run_bind(CycleState(), pod, "node-1") is SUCCESS
    bound = await kube.get(f"/api/v1/namespaces/{NS}/pods/train")
    assert bound["spec"]["nodeName"] == "node-1"
    assert parse_assignment(bound) is None


async def test_already_bound_is_an_error_that_says_so(kube: Kube) -> None:
    fw = framework(kube)
    pod = await create_pod(kube)
    assert await fw.run_bind(CycleState(), pod, "node-1") is SUCCESS
    status = await fw.run_bind(CycleState(), pod, "node-2")
    assert status.code == Code.ERROR
    assert status.plugin == NAME
    assert (
        f"binding pod {NS}/train to node node-2: the pod was bound or is being deleted meanwhile"
        in status.message()
    )
    assert "already assigned to node" in status.message()


async def test_deleted_is_an_error_that_says_so(kube: Kube) -> None:
    pod = await create_pod(kube)
    await kube.delete(f"/api/v1/namespaces/{NS}/pods/train")
    status = await framework(kube).run_bind(CycleState(), pod, "node-1")
    assert status.code == Code.ERROR
    assert "the pod was deleted meanwhile" in status.message()


async def test_a_recreated_pod_is_not_bound_by_mistake(kube: Kube) -> None:
    old = await create_pod(kube)
    await kube.delete(f"/api/v1/namespaces/{NS}/pods/train")
    await create_pod(kube)  # same name, new uid
    status = await framework(kube).run_bind(CycleState(), old, "node-1")
    assert status.code == Code.ERROR
    assert "Precondition failed" in status.message()
    fresh = await kube.get(f"/api/v1/namespaces/{NS}/pods/train")
    assert not fresh["spec"].get("nodeName")


async def test_a_framework_without_a_client_builds_and_fails_at_bind() -> None:
    fw = build_frameworks(default_config(), in_tree())["gpusched"]
    plugin = fw.plugins[NAME]
    assert isinstance(plugin, DefaultBinder)
    status = await fw.run_bind(CycleState(), make_pod().obj(), "node-1")
    assert status.code == Code.ERROR
    assert "without an API client" in status.message()
