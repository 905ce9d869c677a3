"""Shared pieces of the PriorityClass, PDB, eviction and gang API tests (tests/sim)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from gpusched.kube.client import Kube
from gpusched.kube.errors import APIError

NS = "default"
PODS = f"/api/v1/namespaces/{NS}/pods"
PDBS = f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets"
PCS = "/apis/scheduling.k8s.io/v1/priorityclasses"


def pod(name: str, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"containers": [{"name": "main", "image": "cuda"}], **spec},
    }


def pdb(name: str, selector: dict[str, Any] | None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"selector": selector, **spec}
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name},
        "spec": {k: v for k, v in body.items() if v is not None},
    }


async def running_pod(
    kube: Kube, name: str, labels: dict[str, str], ready: bool = True, **spec: Any
) -> dict[str, Any]:
    """A pod on node n1, Running, Ready or not (as its kubelet would report it)."""
    await kube.create(PODS, pod(name, labels, nodeName="n1", **spec))
    return await set_ready(kube, name, ready)


async def set_ready(kube: Kube, name: str, ready: bool) -> dict[str, Any]:
    flag = "True" if ready else "False"
    status = {
        "phase": "Running",
        "conditions": [
            {"type": "Ready", "status": flag, "lastProbeTime": None},
            {"type": "ContainersReady", "status": flag, "lastProbeTime": None},
        ],
    }
    result: dict[str, Any] = await kube.patch(
        f"{PODS}/{name}/status",
        {"status": status},
        "application/strategic-merge-patch+json",
    )
    return result


async def failure(call: Any) -> APIError:
    try:
        await call
    except APIError as exc:
        return exc
    raise AssertionError("the request succeeded")


async def wait_for(
    kube: Kube, path: str, pred: Callable[[dict[str, Any]], bool], timeout: float = 10.0
) -> dict[str, Any]:
    """The object at ``path`` once ``pred`` holds: a GET, then a watch from it (no sleeping).
    The timeout only stops a broken test from hanging."""
    collection, _, name = path.rpartition("/")
    async with asyncio.timeout(timeout):
        while True:
            obj: dict[str, Any] = await kube.get(path)
            if pred(obj):
                return obj
            query = {
                "fieldSelector": f"metadata.name={name}",
                "resourceVersion": obj["metadata"]["resourceVersion"],
            }
            events: AsyncIterator[dict[str, Any]] = kube.watch(collection, query)
            async for ev in events:
                if ev["type"] == "MODIFIED" and pred(ev["object"]):
                    return dict(ev["object"])
