"""A pod no node could ever take is told why, end to end (the simulation by default, or the
cluster named by ``GPUSCHED_E2E_KUBECONFIG``): FailedScheduling and ``PodScheduled=False`` say
what is wrong and what would fix it (GPUFit's PostFilter, ``never_fits``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from conftest import Target
from scheduler_bed import Bed, objects_until, open_bed


@pytest.fixture
async def bed(target: Target) -> AsyncIterator[Bed]:
    async with open_bed(target) as bed:
        yield bed


def _condition(pod: dict[str, Any]) -> dict[str, Any] | None:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return dict(cond)
    return None


async def test_whole_gpus_on_mig_partitioned_nodes_and_too_many_gpus(bed: Bed) -> None:
    await bed.add_nodes(2, "mig-medium")  # 4 H100s each, every one MIG-partitioned
    async with bed.running():
        await bed.create_pod(bed.pod("whole", gpus=1))
        await bed.create_pod(bed.pod("huge", gpus=16))
        pods = await bed.pods_until(
            lambda ps: all(_condition(ps[n]) is not None for n in ("whole", "huge"))
        )
        whole = (_condition(pods["whole"]) or {})["message"]
        assert "The pod asks for 1 whole GPU (nvidia.com/gpu: 1), but every GPU of the nodes" in (
            whole
        )
        assert "nvidia.com/mig-1g.10gb, nvidia.com/mig-2g.20gb" in whole
        huge = (_condition(pods["huge"]) or {})["message"]
        assert "the largest node it can run on has 4" in huge
        events = await objects_until(
            bed.kube,
            bed.events_path,
            lambda evs: any(
                e["reason"] == "FailedScheduling" and e["involvedObject"]["name"] == "whole"
                for e in evs.values()
            ),
        )
        messages = {e["message"] for e in events.values() if e["involvedObject"]["name"] == "whole"}
        assert any("MIG-partitioned" in m for m in messages)
