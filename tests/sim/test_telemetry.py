"""Simulated GPU telemetry: what the Running pods were given, written into the inventories'
status through the ``/status`` subresource, and only when it changed."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gpusched.annotations import GPU_IDS, GPU_UUIDS, RESERVATION_UID, RESERVED_VRAM_MIB
from gpusched.inventory import API_GROUP, PLURAL, VERSION, inventory_status_from_object
from gpusched.kube.client import resource_path
from gpusched.sim import SimCluster
from gpusched.sim.fleet import load_cluster_spec
from gpusched.sim.telemetry import UTILIZATION_PER_POD, SimTelemetry, measure

H100_MIB = 81559


def _pod(name: str, node: str, ids: str, vram: str, phase: str = "Running") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "annotations": {
                GPU_IDS: ids,
                GPU_UUIDS: "",
                RESERVED_VRAM_MIB: vram,
                RESERVATION_UID: f"r-{name}",
            },
        },
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
        "status": {"phase": phase},
    }


@pytest.mark.parametrize(
    ("pods", "used", "utilisation"),
    [
        ([], [0, 0], [0, 0]),
        ([("0", "20480")], [20480, 0], [UTILIZATION_PER_POD, 0]),
        ([("0", "20480"), ("0", "10240"), ("1", "")], [30720, H100_MIB], [70, 35]),
        ([("0,1", f"{H100_MIB},{H100_MIB}")], [H100_MIB, H100_MIB], [35, 35]),
        ([("0", "20480")] * 4, [H100_MIB, 0], [100, 0]),  # capped at the GPU
    ],
    ids=["idle", "one share", "two shares and a whole GPU", "two whole GPUs", "capped"],
)
def test_measure(pods: list[tuple[str, str]], used: list[int], utilisation: list[int]) -> None:
    inventory = _inventory_object(gpus=2)
    objects = [_pod(f"p{i}", "n", ids, vram) for i, (ids, vram) in enumerate(pods)]
    status = measure(inventory, objects, "2026-11-25T10:00:00Z")
    assert status is not None
    assert [g.used_memory_mib for g in status.gpus] == used
    assert [g.utilization_percent for g in status.gpus] == utilisation
    assert status.used_memory_mib == sum(used)


def _inventory_object(gpus: int) -> dict[str, Any]:
    from gpusched.sim.fleet import build_fleet

    spec = load_cluster_spec("dgx-h100", nodes=1)
    node = build_fleet(spec)[0]
    assert node.inventory is not None
    inv = node.inventory.model_copy(
        update={
            "gpus": node.inventory.gpus[:gpus],
            "links": tuple(link for link in node.inventory.links if link.b < gpus),
        }
    )
    from gpusched.inventory import inventory_to_object

    return inventory_to_object(inv, "uid")


async def test_status_is_written_once_per_change_through_the_subresource() -> None:
    async with SimCluster(load_cluster_spec("dgx-h100", nodes=1), kubelets=False) as sim:
        kube = sim.kube
        path = resource_path(API_GROUP, VERSION, PLURAL)
        (inventory,) = (await kube.get(path))["items"]
        node = inventory["metadata"]["name"]
        pods = resource_path("", "v1", "pods", "default")
        for pod in (_pod("a", node, "0", "20480"), _pod("b", node, "1", "", phase="Pending")):
            status = pod.pop("status")
            created = await kube.create(pods, pod)
            await kube.patch(f"{pods}/{created['metadata']['name']}/status", {"status": status})
        telemetry = SimTelemetry(kube, period=10.0)
        tasks = [asyncio.create_task(r.run()) for r in (telemetry.inventories, telemetry.pods)]
        try:
            await telemetry.inventories.synced.wait()
            await telemetry.pods.synced.wait()
            assert await telemetry.publish_once() == 1
            stored = await kube.get(f"{path}/{node}")
            status = inventory_status_from_object(stored)
            assert status is not None
            assert [g.used_memory_mib for g in status.gpus][:2] == [20480, 0]  # b: not Running
            assert stored["metadata"]["generation"] == inventory["metadata"]["generation"]
            assert await telemetry.publish_once() == 0  # nothing changed: no write
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
