"""Score strategies end to end (the simulation by default, or the cluster named by
``GPUSCHED_E2E_KUBECONFIG``): a profile enabling PreferredNode sends a pod to the node it
names while it fits there, and a profile enabling GPUCost fills the cheapest node first, by
price label and by GPUClass price. Pods come one at a time, so each sees the last one bound.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from conftest import Target
from scheduler_bed import E2E_LABEL, Bed, bound, objects_until, open_bed

from gpusched.framework import SchedulerConfiguration, parse_config
from gpusched.kube.client import resource_path
from gpusched.kube.errors import APINotFound

CLASSES = resource_path("gpusched.io", "v1alpha1", "gpuclasses")
PRICE = "gpusched.io/gpu-price"


@pytest.fixture
async def bed(target: Target) -> AsyncIterator[Bed]:
    async with open_bed(target) as bed:
        yield bed


def _config(bed: Bed, plugins: str) -> SchedulerConfiguration:
    return parse_config(
        f"""
apiVersion: gpusched.io/v1alpha1
kind: SchedulerConfiguration
reservations: {{namespace: {bed.system_namespace}}}
profiles:
- schedulerName: {bed.scheduler_name}
  plugins:
    multiPoint: {{enabled: [{plugins}]}}
"""
    )


async def _place(bed: Bed, body: dict[str, Any]) -> str:
    name = body["metadata"]["name"]
    await bed.create_pod(body)
    pods = await bed.pods_until(lambda ps: name in bound(ps))
    node: str = pods[name]["spec"]["nodeName"]
    return node


async def test_preferred_node_wins_while_the_pod_fits_there(bed: Bed) -> None:
    nodes = await bed.add_nodes(3)  # 8 H100s each
    async with bed.running(config=_config(bed, "{name: PreferredNode, weight: 10}")):
        assert await _place(bed, bed.pod("first", gpus=4)) in nodes
        # Binpack alone would join "first"; the preference sends both to the last node.
        want = {"gpusched.io/preferred-node": nodes[2]}
        assert await _place(bed, bed.pod("second", gpus=4, **want)) == nodes[2]
        assert await _place(bed, bed.pod("third", gpus=4, **want)) == nodes[2]
        # The preferred node is full: the preference gives way, the pod is placed elsewhere.
        elsewhere = await _place(bed, bed.pod("fourth", gpus=2, **want))
        assert elsewhere != nodes[2]


async def test_gpu_cost_fills_the_cheapest_node_by_class_and_label_prices(bed: Bed) -> None:
    nodes = await bed.add_nodes(3)
    for node, price in zip(nodes, ("4", "1"), strict=False):
        await bed.kube.patch(f"/api/v1/nodes/{node}", {"metadata": {"labels": {PRICE: price}}})
    name = bed.target.name("cheap")
    body = {
        "apiVersion": "gpusched.io/v1alpha1",
        "kind": "GPUClass",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {
                "matchLabels": {E2E_LABEL: bed.prefix, "kubernetes.io/hostname": nodes[2]}
            },
            "price": 0.0,
        },
    }
    await bed.kube.create(CLASSES, body)
    try:
        config = _config(bed, "{name: GPUCost, weight: 40}")
        async with bed.running(config=config) as scheduler:
            await objects_until(
                bed.kube,
                CLASSES,
                lambda cs: ((cs.get(name) or {}).get("status") or {}).get("matchingNodes") == 1,
            )
            assert all(name in fw.gpu_classes for fw in scheduler.frameworks.values())
            # The class prices the unlabelled node at 0: cheapest of all, until it is full.
            placed = [await _place(bed, bed.pod(f"p{i}", gpus=2)) for i in range(6)]
            assert placed == [nodes[2]] * 4 + [nodes[1]] * 2
            # Then by label: the rest of the cheaper node, then the dearer one.
            placed = [await _place(bed, bed.pod(f"q{i}", gpus=2)) for i in range(3)]
            assert placed == [nodes[1]] * 2 + [nodes[0]]
    finally:
        with contextlib.suppress(APINotFound):
            await bed.kube.delete(f"{CLASSES}/{name}")
