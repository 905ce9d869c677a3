"""A gang as preemptor, end to end with the real Scheduler: it preempts as a whole or not at
all (``Evaluator.preempt_group`` through ``DefaultPreemption.post_filter_group``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import preemption_paths  # noqa: F401  (puts tests/plugins and tests/scheduler on sys.path)
import pytest
from conftest import Target
from scheduler_bed import Bed, assert_no_double_booking, bound, objects_until, open_bed
from test_preemption_e2e import events_until, fill, gpu_pod, waiting

from gpusched.gangs import kueue

pytestmark = pytest.mark.simonly  # fake nodes need the simulation's kubelets to end pods


@pytest.fixture
async def bed(target: Target) -> AsyncIterator[Bed]:
    async with open_bed(target) as bed:
        yield bed


def member(bed: Bed, name: str, group: str, size: int, gpus: int, level: int) -> dict[str, Any]:
    body = gpu_pod(bed, name, gpus, level, {kueue.LABEL: group})
    body["metadata"]["annotations"][kueue.COUNT_ANNOTATION] = str(size)
    return body


async def test_a_gang_preempts_as_a_whole(bed: Bed) -> None:
    nodes = await bed.add_nodes(2, "dgx-h100")
    async with bed.running():
        await fill(bed, "low", 3)
        await fill(bed, "lower", 4)
        await bed.create_pods(member(bed, f"m{i}", "train", 2, 8, 0) for i in range(2))
        pods = await bed.pods_until(lambda ps: {"m0", "m1"} <= set(bound(ps)))
        assert {pods[m]["spec"]["nodeName"] for m in ("m0", "m1")} == set(nodes)
        preempted = await events_until(bed, "Preempted", 16)
        assert len({e["involvedObject"]["name"] for e in preempted}) == 16
        assert_no_double_booking(pods, await bed.leases())


async def test_a_gang_that_cannot_make_room_for_every_member_evicts_nothing(bed: Bed) -> None:
    await bed.add_nodes(2, "dgx-h100")
    async with bed.running():
        await fill(bed, "low", 3)  # on one node or spread: either way 8 GPUs of low pods
        await fill(bed, "peer", 0)  # 8 GPUs held at the gang's own priority: not victims
        await bed.create_pods(member(bed, f"m{i}", "train", 2, 8, 0) for i in range(2))
        pods = await bed.pods_until(
            lambda ps: all("pod group" in waiting(ps.get(m, {})) for m in ("m0", "m1"))
        )
        assert "the gang does not preempt" in waiting(pods["m0"]), waiting(pods["m0"])
        assert not [n for n in bound(pods) if n.startswith("m")]
        assert len([n for n in bound(pods) if n.startswith(("low", "peer"))]) == 16
        events = await objects_until(bed.kube, bed.events_path, lambda _: True)
        assert not [e for e in events.values() if e.get("reason") == "Preempted"]
