"""Gangs end to end on the target cluster (the simulation by default), with the real
Scheduler and the default profile (Coscheduling on): each form's members are gated until the
group is complete, bound whole when they fit together, and leave nothing reserved when they
do not; two gangs never deadlock; a member deleted mid-plan releases the others; a restarted
scheduler and two replicas handle gangs; the group's status follows.

The fleet is two 8-GPU nodes (``dgx-h100``). Invariants (no GPU double-booked, every bound pod
bound with its Lease reservation) are checked after each step that binds.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from conftest import Target
from gang_bed import (
    ensure_crd,
    kueue_member,
    served,
    sp_group,
    sp_member,
    sp_path,
    volcano_group,
    volcano_member,
)
from scheduler_bed import (
    Bed,
    Objects,
    assert_no_double_booking,
    bound,
    objects_until,
    open_bed,
    reservations,
)

from gpusched.framework import (
    CycleState,
    DisabledPlugin,
    PluginRef,
    Plugins,
    PluginSet,
    Pod,
    PreBindPlugin,
    SchedulerConfiguration,
    Status,
    apply_default_plugins,
    in_tree,
)
from gpusched.framework.config import Profile
from gpusched.gangs import kubernetes, volcano
from gpusched.kube.client import resource_path


@pytest.fixture
async def bed(target: Target) -> AsyncIterator[Bed]:
    async with open_bed(target) as bed:
        await bed.add_nodes(2)
        await ensure_crd(bed.kube, "podgroups.scheduling.x-k8s.io")
        yield bed


def gated_message(pod: dict[str, Any]) -> str:
    for c in (pod.get("status") or {}).get("conditions") or ():
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return str(c.get("message", ""))
    return ""


async def settled(bed: Bed, done: Any) -> Objects:
    pods = await bed.pods_until(done)
    assert_no_double_booking(pods, await bed.leases())
    return pods


async def no_reservations(bed: Bed) -> None:
    def empty(leases: Objects) -> bool:
        return not any(entries for entries in reservations(leases).values())

    await objects_until(bed.kube, bed.leases_path, empty)


async def test_a_gang_is_gated_until_complete_then_bound_whole(bed: Bed) -> None:
    await bed.kube.create(sp_path(bed), sp_group("train", 4))
    async with bed.running():
        await bed.create_pods(sp_member(bed, f"m{i}", "train", gpus=2) for i in range(3))
        # Each member says how many were created when it came (the group's Event: the latest).
        pods = await bed.pods_until(
            lambda ps: (
                [gated_message(ps[f"m{i}"])[-42:] for i in range(3) if f"m{i}" in ps]
                == [f"{i + 1} of 4 members created; waiting for {3 - i} more" for i in range(3)]
            )
        )
        assert not bound(pods)
        # The group itself says what it waits for.
        await objects_until(
            bed.kube,
            bed.events_path,
            lambda es: any(
                (e.get("involvedObject") or {}).get("kind") == "PodGroup"
                and e.get("reason") == "Waiting"
                and "3 of 4 members created" in e.get("message", "")
                for e in es.values()
            ),
        )
        await bed.create_pod(sp_member(bed, "m3", "train", gpus=2))
        pods = await settled(bed, lambda ps: len(bound(ps)) == 4)
        # The group's status follows, as scheduler-plugins' controller computes it.
        group = await objects_until(
            bed.kube,
            sp_path(bed),
            lambda gs: (gs["train"].get("status") or {}).get("phase") == "Running",
        )
        status = group["train"]["status"]
        assert (status["running"], status["failed"]) == (4, 0)
        assert status["scheduleStartTime"]


async def test_a_gang_that_does_not_fit_reserves_nothing(bed: Bed) -> None:
    await bed.kube.create(sp_path(bed), sp_group("big", 3))
    async with bed.running() as scheduler:
        await bed.create_pods(sp_member(bed, f"b{i}", "big", gpus=8) for i in range(3))
        pods = await bed.pods_until(
            lambda ps: (
                len(ps) == 3
                and all(
                    "pod group" in gated_message(p) and "can never run whole" in gated_message(p)
                    for p in ps.values()
                )
            )
        )
        assert not bound(pods)
        assert not any(scheduler.cache.is_assumed(p["metadata"]["uid"]) for p in pods.values())
        await no_reservations(bed)
        # A single pod still fits: nothing is held for the gang.
        await bed.create_pod(bed.pod("solo", 8))
        await settled(bed, lambda ps: bound(ps) == ["solo"])


async def test_two_gangs_that_exceed_the_cluster_never_deadlock(bed: Bed) -> None:
    await bed.kube.create(sp_path(bed), sp_group("a", 2))
    await bed.kube.create(sp_path(bed), sp_group("b", 2))
    async with bed.running():
        members = [sp_member(bed, f"{g}{i}", g, gpus=8) for i in range(2) for g in "ab"]
        await bed.create_pods(members, concurrency=4)
        pods = await settled(bed, lambda ps: len(bound(ps)) == 2)
        first = {n[0] for n in bound(pods)}
        assert len(first) == 1  # one whole gang, not one member of each
        (winner,) = first
        loser = "b" if winner == "a" else "a"
        for i in range(2):
            await bed.delete_pod(f"{winner}{i}", now=True)
        pods = await settled(bed, lambda ps: sorted(bound(ps)) == [f"{loser}0", f"{loser}1"])


class Hold(PreBindPlugin):
    """Holds the PreBind of pods labelled ``hold`` until ``release`` is set (a member slow to
    get its Lease written); runs before Coscheduling's barrier."""

    NAME = "Hold"
    release: asyncio.Event | None = None
    arrived: asyncio.Event | None = None

    async def pre_bind(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        if "hold" in (pod["metadata"].get("labels") or {}):
            assert self.release is not None
            assert self.arrived is not None
            self.arrived.set()
            await self.release.wait()
        return Status.success()


def hold_config(bed: Bed) -> SchedulerConfiguration:
    base = bed.config()
    plugins = Plugins(
        pre_bind=PluginSet(
            enabled=[PluginRef(name="Hold"), PluginRef(name="Coscheduling")],
            disabled=[DisabledPlugin(name="Coscheduling")],
        )
    )
    return apply_default_plugins(
        SchedulerConfiguration(
            profiles=[Profile(scheduler_name=bed.scheduler_name, plugins=plugins)],
            reservations=base.reservations,
        )
    )


async def test_a_member_deleted_mid_plan_releases_the_others(bed: Bed) -> None:
    Hold.release, Hold.arrived = asyncio.Event(), asyncio.Event()
    registry = in_tree().merged([])
    registry.register(Hold)
    await bed.kube.create(sp_path(bed), sp_group("g", 3))
    async with bed.running(config=hold_config(bed), registry=registry) as scheduler:
        fw = scheduler.frameworks[bed.scheduler_name]
        assert fw.list_plugins()["preBind"] == [
            "GpuClaims",
            "DynamicResources",
            "Hold",
            "Coscheduling",
        ]
        held = sp_member(bed, "m2", "g", gpus=2)
        held["metadata"]["labels"]["hold"] = "yes"
        await bed.create_pods(
            [sp_member(bed, "m0", "g", gpus=2), sp_member(bed, "m1", "g", gpus=2), held]
        )
        await asyncio.wait_for(Hold.arrived.wait(), timeout=60)
        await bed.delete_pod("m2", now=True)
        # The two others fail at the barrier (an Event says why), are not bound, and wait
        # for a third member again.
        pods = await bed.pods_until(
            lambda ps: (
                "m2" not in ps
                and all("2 of 3 members created" in gated_message(p) for p in ps.values())
            )
        )
        events = await objects_until(
            bed.kube,
            bed.events_path,
            lambda es: any(
                "m2 was deleted" in e.get("note", e.get("message", "")) for e in es.values()
            ),
        )
        assert events
        Hold.release.set()
        assert not bound(pods)
        await no_reservations(bed)
        # A replacement member completes the gang again.
        await bed.create_pod(sp_member(bed, "m3", "g", gpus=2))
        await settled(bed, lambda ps: sorted(bound(ps)) == ["m0", "m1", "m3"])


async def test_a_restarted_scheduler_finishes_the_gang(bed: Bed) -> None:
    await bed.kube.create(sp_path(bed), sp_group("r", 3))
    async with bed.running("first"):
        await bed.create_pods(sp_member(bed, f"r{i}", "r", gpus=4) for i in range(2))
        await bed.pods_until(lambda ps: "2 of 3 members created" in gated_message(ps.get("r1", {})))
    await bed.create_pod(sp_member(bed, "r2", "r", gpus=4))
    async with bed.running("second"):
        pods = await settled(bed, lambda ps: len(bound(ps)) == 3)
        # A fourth member joins a gang that runs: it is bound on its own.
        await bed.create_pod(sp_member(bed, "r3", "r", gpus=4))
        pods = await settled(bed, lambda ps: len(bound(ps)) == 4)
    assert len(pods) == 4


async def test_two_replicas_race_for_two_gangs(bed: Bed) -> None:
    await bed.kube.create(sp_path(bed), sp_group("x", 4))
    await bed.kube.create(sp_path(bed), sp_group("y", 4))
    async with bed.running("replica-a"), bed.running("replica-b"):
        members = [sp_member(bed, f"{g}{i}", g, gpus=2) for i in range(4) for g in "xy"]
        await bed.create_pods(members, concurrency=8)
        await settled(bed, lambda ps: len(bound(ps)) == 8)


async def test_kueue_groups_need_no_object(bed: Bed) -> None:
    async with bed.running():
        await bed.create_pod(kueue_member(bed, "k0", "kg", total=2))
        await bed.pods_until(lambda ps: "1 of 2 members created" in gated_message(ps.get("k0", {})))
        await bed.create_pod(kueue_member(bed, "k1", "kg", total=2))
        await settled(bed, lambda ps: len(bound(ps)) == 2)
        bad = kueue_member(bed, "k2", "other", total=2)
        bad["metadata"]["annotations"][  # a count that is not one
            "kueue.x-k8s.io/pod-group-total-count"
        ] = "two"
        await bed.create_pod(bad)
        await bed.pods_until(lambda ps: "integer >= 1" in gated_message(ps.get("k2", {})))


async def test_volcano_groups_are_read_from_their_object(bed: Bed) -> None:
    async with bed.running():
        await bed.create_pods(volcano_member(bed, f"v{i}", "vg", gpus=4) for i in range(2))
        # Without the object (or Volcano's CRD), the members say what is missing.
        await bed.pods_until(
            lambda ps: (
                len(ps) == 2 and all("CRD installed?" in gated_message(p) for p in ps.values())
            )
        )
        await ensure_crd(bed.kube, "podgroups.scheduling.volcano.sh")
        path = resource_path(volcano.GROUP, volcano.VERSION, "podgroups", bed.namespace)
        await bed.kube.create(path, volcano_group("vg", 2))
        await settled(bed, lambda ps: len(bound(ps)) == 2)


async def test_kubernetes_podgroups(bed: Bed) -> None:
    if not await served(bed.kube, kubernetes.GROUP, kubernetes.VERSION, "podgroups", bed.namespace):
        pytest.skip("the cluster does not serve scheduling.k8s.io/v1alpha2 PodGroups yet")
    path = resource_path(kubernetes.GROUP, kubernetes.VERSION, "podgroups", bed.namespace)
    await bed.kube.create(
        path,
        {
            "apiVersion": f"{kubernetes.GROUP}/{kubernetes.VERSION}",
            "kind": "PodGroup",
            "metadata": {"name": "kg"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
        },
    )
    async with bed.running():
        for i in range(2):
            pod = bed.pod(f"u{i}", 4)
            pod["spec"]["schedulingGroup"] = {"podGroupName": "kg"}
            await bed.create_pod(pod)
        await settled(bed, lambda ps: len(bound(ps)) == 2)
        groups = await objects_until(
            bed.kube,
            path,
            lambda gs: any(
                c.get("type") == "PodGroupScheduled" and c.get("status") == "True"
                for c in (gs["kg"].get("status") or {}).get("conditions") or ()
            ),
        )
        assert groups["kg"]["status"]["conditions"][-1]["reason"] == "Scheduled"


RACK = "topology.kubernetes.io/rack"


async def test_a_required_rack_holds_the_gang_or_says_why(bed: Bed) -> None:
    nodes = await bed.add_nodes(2)
    for node, rack in zip(nodes, ("r1", "r2"), strict=True):
        await bed.kube.patch(f"/api/v1/nodes/{node}", {"metadata": {"labels": {RACK: rack}}})
    await bed.kube.create(
        sp_path(bed),
        {
            **sp_group("wide", 2),
            "metadata": {
                "name": "wide",
                "annotations": {
                    "gpusched.io/gang-topology": RACK,
                    "gpusched.io/gang-topology-policy": "Required",
                },
            },
        },
    )
    async with bed.running():
        await bed.create_pods(sp_member(bed, f"w{i}", "wide", gpus=8) for i in range(2))
        want = f"needs 16 GPUs in one {RACK}; the largest {RACK} (r2) has 8 free"
        pods = await bed.pods_until(
            lambda ps: len(ps) == 2 and all(want in gated_message(p) for p in ps.values())
        )
        assert not bound(pods)
        await no_reservations(bed)
        # Two 4-GPU members fit one rack: they land there together.
        for name in ("w0", "w1"):
            await bed.delete_pod(name, now=True)
        await bed.create_pods(sp_member(bed, f"n{i}", "wide", gpus=4) for i in range(2))
        pods = await settled(bed, lambda ps: len(bound(ps)) == 2)
        assert len({pods[n]["spec"]["nodeName"] for n in ("n0", "n1")}) == 1


async def test_a_gang_that_loses_a_member_after_it_ran_is_reported(bed: Bed) -> None:
    await bed.kube.create(sp_path(bed), sp_group("lossy", 2))
    async with bed.running(reservation_gc_period=0.2):  # the deleted member's entry goes soon
        await bed.create_pods(sp_member(bed, f"l{i}", "lossy", gpus=4) for i in range(2))
        await settled(bed, lambda ps: len(bound(ps)) == 2)
        await objects_until(
            bed.kube,
            sp_path(bed),
            lambda gs: (gs["lossy"].get("status") or {}).get("phase") == "Running",
        )
        await bed.delete_pod("l1", now=True)
        events = await objects_until(
            bed.kube,
            bed.events_path,
            lambda es: any(
                (e.get("involvedObject") or {}).get("kind") == "PodGroup"
                and e.get("reason") == "GangMemberLost"
                for e in es.values()
            ),
        )
        (lost,) = [e for e in events.values() if e.get("reason") == "GangMemberLost"]
        assert lost["type"] == "Warning"
        assert (
            lost["message"] == "member l1 was deleted after the gang ran; 1 of 2 members still run"
        )
        # As scheduler-plugins' controller has it: fewer pods than minMember is Pending again.
        await objects_until(
            bed.kube,
            sp_path(bed),
            lambda gs: (gs["lossy"].get("status") or {}).get("phase") == "Pending",
        )
        await no_reservations_of(bed, "l1")


async def no_reservations_of(bed: Bed, name: str) -> None:
    def gone(leases: Objects) -> bool:
        return not any(
            r.get("pod", "").endswith(f"/{name}")
            for entries in reservations(leases).values()
            for r in entries.values()
        )

    await objects_until(bed.kube, bed.leases_path, gone)


async def test_members_beyond_min_member_are_optional(bed: Bed) -> None:
    """An elastic gang (minMember 2 of 3 members, 8 GPUs each, 16 GPUs in all): the two that
    fit run; the third waits on its own instead of holding the gang back."""
    await bed.kube.create(sp_path(bed), sp_group("elastic", 2))
    async with bed.running() as scheduler:
        await bed.create_pods(sp_member(bed, f"e{i}", "elastic", gpus=8) for i in range(3))
        pods = await settled(bed, lambda ps: len(bound(ps)) == 2 and len(ps) == 3)
        (waiting,) = [n for n in pods if n not in bound(pods)]
        assert "Insufficient nvidia.com/gpu" in gated_message(pods[waiting]), gated_message(
            pods[waiting]
        )
        assert not scheduler.cache.is_assumed(pods[waiting]["metadata"]["uid"])
        assert_no_double_booking(pods, await bed.leases())
