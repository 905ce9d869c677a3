"""The device assignment is a framework-level seam: a Reserve plugin writes
``DEVICE_ASSIGNMENT``, the scheduler assumes the pod with it, binders read it.

So GPUFit can be replaced by another device plugin without touching the scheduler: here a tiny
fake one, with GPUFit disabled, places a pod on the simulated cluster (or the cluster named by
``GPUSCHED_E2E_KUBECONFIG``), and the pod is bound with the devices the fake chose, in its
annotations, its reservation Lease and the scheduler's device ledger. And the scheduler imports
nothing from ``plugins/``.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "scheduler"))

from conftest import Target
from scheduler_bed import Bed, assert_no_double_booking, bound, open_bed, reservations

import gpusched.scheduler
from gpusched.annotations import GPU_IDS, RESERVATION_UID, Assignment
from gpusched.framework import (
    DEVICE_ASSIGNMENT,
    SUCCESS,
    CycleState,
    DisabledPlugin,
    PluginRef,
    Plugins,
    PluginSet,
    Pod,
    Profile,
    ReservePlugin,
    SchedulerConfiguration,
    Status,
    apply_default_plugins,
    in_tree,
)

FAKE_GPU = 5


class FakeDevices(ReservePlugin):
    """Gives every pod GPU 5 of its node (a stand-in for a replacement of GPUFit)."""

    NAME = "FakeDevices"

    def reserve(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        state.write(DEVICE_ASSIGNMENT, Assignment((FAKE_GPU,), (), (1024,), ""))
        return SUCCESS

    def unreserve(self, state: CycleState, pod: Pod, node_name: str) -> None:
        state.delete(DEVICE_ASSIGNMENT)


@pytest.fixture
async def bed(target: Target) -> AsyncIterator[Bed]:
    async with open_bed(target) as bed:
        await bed.add_nodes(1)
        yield bed


async def test_a_replacement_device_plugin_needs_no_change_to_the_scheduler(bed: Bed) -> None:
    registry = in_tree().merged([])
    registry.register(FakeDevices)
    plugins = Plugins(
        multi_point=PluginSet(
            enabled=[PluginRef(name="FakeDevices")], disabled=[DisabledPlugin(name="GPUFit")]
        )
    )
    base = bed.config()
    config = apply_default_plugins(
        SchedulerConfiguration(
            profiles=[Profile(scheduler_name=bed.scheduler_name, plugins=plugins)],
            reservations=base.reservations,
        )
    )
    async with bed.running(config=config, registry=registry) as scheduler:
        fw = scheduler.frameworks[bed.scheduler_name]
        assert fw.list_plugins()["reserve"] == [
            "GpuClaims",
            "DynamicResources",
            "Coscheduling",
            "FakeDevices",
        ]
        await bed.create_pod(bed.pod("one", gpus=1))
        pods = await bed.pods_until(lambda ps: bool(bound(ps)))
        node = pods["one"]["spec"]["nodeName"]
        snapshot = scheduler.snapshot
        scheduler.cache.update_snapshot(snapshot)
        info = snapshot.get(node)
        assert info is not None
        assert FAKE_GPU not in info.ledger.free_gpus()  # assumed, then bound, with its device
    annotations = pods["one"]["metadata"]["annotations"]
    assert annotations[GPU_IDS] == str(FAKE_GPU)
    leases = await bed.leases()
    assert_no_double_booking(pods, leases)
    entry = reservations(leases)[node][annotations[RESERVATION_UID]]
    assert entry["gpus"] == [FAKE_GPU]


def test_the_scheduler_imports_nothing_from_plugins() -> None:
    """The core depends on the framework, not on particular plugins (top level or in a
    function: every import statement of the module)."""
    source = Path(gpusched.scheduler.__file__).read_text(encoding="utf-8")
    imported: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.append(node.module)
    assert imported
    assert [
        m for m in imported if m == "gpusched.plugins" or m.startswith("gpusched.plugins.")
    ] == []
