"""The scheduler end to end through the real client over HTTPS: on the simulated cluster, or on
a real one.

By default every test runs on a fresh simulated cluster (``gpusched.sim``) with its simulated
kubelets. With ``GPUSCHED_E2E_KUBECONFIG`` naming a kubeconfig, the same tests run against that
cluster instead, which needs no kubelet and no GPU::

    GPUSCHED_E2E_KUBECONFIG=~/.kube/config .venv/bin/python -m pytest -q tests/scheduler

Each test then creates what it needs there and deletes it at the end (``scheduler_bed``): fake
GPU nodes and their GPUNodeInventories (the CRD is installed if absent), a namespace for its
pods and one for the reservation Leases, and a scheduler name of its own; so the credentials
need to create and delete nodes, namespaces, pods, ``pods/binding``, events, Leases,
GPUNodeInventories and (once) the CRD. Tests that need what only the simulation has (injected
faults, cut watches) are marked ``simonly`` and skipped there.

The same mode checks the tests against a simulated cluster that has no kubelets and no fleet,
served by another process, which proves each test creates everything it needs::

    .venv/bin/gpusched sim serve --cluster none --no-kubelets --kubeconfig /tmp/sim.kubeconfig &
    GPUSCHED_E2E_KUBECONFIG=/tmp/sim.kubeconfig .venv/bin/python -m pytest -q tests/scheduler

Without kubelets a bound pod stays Pending with ``spec.nodeName`` set, so tests assert on the
binding (node, ``gpusched.io/`` annotations, reservation Lease) and free GPUs by deleting pods;
on the simulation they also see the kubelets run the pods, and the kubelets reject any pod a
node cannot hold. Waiting is on the API (a watch until a condition holds), never on sleeps;
every wait is bounded so a broken scheduler fails instead of hanging. Double-booking is checked
from the API (the pods' assignment annotations and the reservation Leases), not from the
scheduler's memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
from conftest import Target, sim_of
from scheduler_bed import (
    WAIT,
    Bed,
    assert_no_double_booking,
    bound,
    objects_until,
    open_bed,
    reservations,
)

from gpusched.annotations import GPU_IDS, RESERVATION_UID
from gpusched.sim import FaultRule
from gpusched.sim.faults import LOST


@pytest.fixture
async def bed(target: Target) -> AsyncIterator[Bed]:
    async with open_bed(target) as bed:
        await bed.add_nodes(2)  # 2 DGX H100: 16 GPUs
        yield bed


def api_writes(metrics: str) -> dict[tuple[str, str], float]:
    """``gpusched_api_writes_total`` by (resource, verb), from the rendered metrics."""
    pattern = r'^gpusched_api_writes_total\{resource="([^"]*)",verb="([^"]*)"\} (\S+)$'
    return {(m[1], m[2]): float(m[3]) for m in re.finditer(pattern, metrics, flags=re.MULTILINE)}


def unschedulable(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "PodScheduled" and c.get("status") == "False"
        for c in (pod.get("status") or {}).get("conditions") or ()
    )


async def test_a_pod_is_bound_with_its_gpus_and_a_scheduled_event(bed: Bed) -> None:
    async with bed.running() as scheduler:
        await bed.create_pod(bed.pod("one", gpus=2))
        pods = await bed.pods_until(lambda ps: bool(bound(ps)))
        # The event is recorded with the metrics, once the Binding was answered.
        await objects_until(
            bed.kube,
            bed.events_path,
            lambda events: any(e["reason"] == "Scheduled" for e in events.values()),
            query={"fieldSelector": "involvedObject.name=one"},
        )
        metrics = scheduler.metrics.render().decode()
        membership = sum(scheduler.membership.writes.values())
    # Two API writes for the pod: its node's reservation Lease (created, as it is the node's
    # first) and the Binding; Events are best effort and come on top, and so do the writes of
    # the replica's membership Lease (gpusched.replicas).
    writes = api_writes(metrics)
    assert sum(n for (resource, _), n in writes.items() if resource == "leases") == 1 + membership
    assert writes["pods/binding", "create"] == 1
    assert (
        f'scheduler_schedule_attempts_total{{profile="{bed.scheduler_name}",result="scheduled"}}'
        " 1.0" in metrics
    )
    pod = pods["one"]
    annotations = pod["metadata"]["annotations"]
    assert len(annotations[GPU_IDS].split(",")) == 2
    assert annotations[RESERVATION_UID]
    leases = await bed.leases()
    assert_no_double_booking(pods, leases)
    entry = reservations(leases)[pod["spec"]["nodeName"]][annotations[RESERVATION_UID]]
    assert entry["pod"] == f"{bed.namespace}/one"
    assert entry["holder"] == "a"
    if bed.target.is_sim:  # the simulated kubelet admits and runs it
        await bed.pods_until(lambda ps: (ps["one"].get("status") or {}).get("phase") == "Running")


async def test_more_pods_than_gpus_then_deleted_pods_free_theirs(bed: Bed) -> None:
    async with bed.running():
        await bed.create_pods(bed.pod(f"p{i:02d}") for i in range(20))
        pods = await bed.pods_until(lambda ps: len(bound(ps)) == 16)
        assert_no_double_booking(pods, await bed.leases())
        waiting = sorted(set(pods) - set(bound(pods)))
        assert len(waiting) == 4
        pods = await bed.pods_until(lambda ps: all(unschedulable(ps[n]) for n in waiting))
        condition = next(
            c for c in pods[waiting[0]]["status"]["conditions"] if c["type"] == "PodScheduled"
        )
        assert condition["reason"] == "Unschedulable"
        # The scheduler sees every node of the cluster (a real one has others): ours are full.
        message = condition["message"]
        assert re.match(r"0/\d+ nodes are available: ", message), message
        assert "2 Insufficient nvidia.com/gpu" in message
        if bed.target.is_sim:
            assert message == (  # upstream's wording, with preemption's part
                "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. preemption: 0/2 "
                "nodes are available: 2 No preemption victims found for incoming pod."
            )
        for name in bound(pods)[:4]:
            await bed.delete_pod(name)
        pods = await bed.pods_until(lambda ps: len(ps) == 16 and len(bound(ps)) == 16)
        assert set(waiting) <= set(bound(pods))
        assert_no_double_booking(pods, await bed.leases())


async def test_a_node_added_while_pods_wait(bed: Bed) -> None:
    async with bed.running():
        await bed.create_pods(bed.pod(f"big-{x}", gpus=8) for x in "abc")
        await bed.pods_until(lambda ps: len(bound(ps)) == 2)
        added = (await bed.add_nodes(3))[-1]
        pods = await bed.pods_until(lambda ps: len(bound(ps)) == 3)
        assert added in {p["spec"]["nodeName"] for p in pods.values()}
        assert_no_double_booking(pods, await bed.leases())


async def test_a_malformed_annotation_is_explained_and_nothing_crashes(bed: Bed) -> None:
    async with bed.running() as scheduler:
        await bed.create_pod(bed.pod("bad", **{"gpusched.io/priority": "urgent"}))
        await bed.create_pod(bed.pod("good"))
        pods = await bed.pods_until(lambda ps: bool(bound(ps)) and unschedulable(ps["bad"]))
        assert bound(pods) == ["good"]
        message = next(
            c for c in pods["bad"]["status"]["conditions"] if c["type"] == "PodScheduled"
        )["message"]
        assert "gpusched.io/priority" in message
        assert "from 0" in message
        await objects_until(
            bed.kube,
            bed.events_path,
            lambda events: any(e["reason"] == "FailedScheduling" for e in events.values()),
            query={"fieldSelector": "involvedObject.name=bad"},
        )
        # Fixing the annotation releases the pod.
        await bed.kube.patch(
            f"{bed.pods_path}/bad", {"metadata": {"annotations": {"gpusched.io/priority": "1"}}}
        )
        await bed.pods_until(lambda ps: len(bound(ps)) == 2)
        assert scheduler.ready.is_set()


def gpus_bound(pods: dict[str, dict[str, Any]]) -> int:
    return sum(
        int(p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
        for p in pods.values()
        if p["spec"].get("nodeName")
    )


async def test_two_replicas_racing_never_double_book(bed: Bed) -> None:
    """Two replicas, no leader election, the same pods: checked from the API."""
    async with bed.running("replica-a"), bed.running("replica-b"):
        await bed.create_pods(
            bed.pod(f"r{i:02d}", gpus=random.Random(i).choice([1, 2])) for i in range(40)
        )
        pods = await bed.pods_until(lambda ps: gpus_bound(ps) >= 14)
        assert_no_double_booking(pods, await bed.leases())


@pytest.mark.simonly  # injects API faults and cuts watches: only the simulation can
async def test_faults_and_cut_watches_still_converge(bed: Bed) -> None:
    sim = sim_of(bed.target)
    sim.faults.set(
        [
            FaultRule("create", "pods/binding", 0.2, 500),
            FaultRule("update", "leases", 0.2, 500),
            FaultRule("create", "leases", 0.2, 429),
            FaultRule("list", "", 0.1, 500),
        ],
        watch_events=5,
    )
    try:
        async with bed.running():
            await bed.create_pods(bed.pod(f"f{i:02d}") for i in range(12))
            pods = await bed.pods_until(lambda ps: len(bound(ps)) == 12)
    finally:
        sim.faults.clear()
    assert sim.faults.total() > 0
    assert_no_double_booking(pods, await bed.leases())


@pytest.mark.simonly
async def test_bindings_whose_answers_are_lost_are_not_undone(bed: Bed) -> None:
    """Half the Bindings are applied and answered 504 (a timeout after the write). Two replicas
    race for the same pods: each must find out from the pod whether its Binding landed, never
    release the reservation a pod is bound with, and not report a failure on a pod another
    replica bound. Everything ends bound, with its reservation, nothing double-booked."""
    sim = sim_of(bed.target)
    sim.faults.set([FaultRule("create", "pods/binding", 0.5, LOST)])
    try:
        async with bed.running("a") as a, bed.running("b") as b:
            await bed.create_pods((bed.pod(f"l{i:02d}") for i in range(16)), concurrency=8)
            pods = await bed.pods_until(lambda ps: len(bound(ps)) == 16)
            leases = await bed.leases()
    finally:
        sim.faults.clear()
    assert sim.faults.injected[("create", LOST)] > 0
    assert a.scheduled + b.scheduled == 16  # a lost answer still counts: the pod is bound
    assert_no_double_booking(pods, leases)
    # No pod another replica bound carries a SchedulerError condition from the loser.
    for name, pod in pods.items():
        for condition in (pod.get("status") or {}).get("conditions") or ():
            if condition.get("type") == "PodScheduled":
                assert condition.get("reason") != "SchedulerError", (name, condition)


async def test_a_scheduler_killed_mid_bind_leaks_nothing(bed: Bed) -> None:
    """Kill schedulers at arbitrary points while they bind; a fresh one finishes the job, no
    pod is bound without its reservation, and the killed ones' reservations are collected."""
    short = bed.config(reservation_seconds=2, max_clock_skew=0)  # leaks expire in the test
    await bed.create_pods(bed.pod(f"k{i:02d}") for i in range(10))
    for round_ in range(3):
        scheduler = bed.scheduler(f"victim-{round_}", short)
        task = asyncio.create_task(scheduler.run())
        await asyncio.wait_for(scheduler.ready.wait(), timeout=WAIT)
        for _ in range(random.Random(round_).randrange(20, 200)):
            await asyncio.sleep(0)  # a random point in its work, counted in loop turns
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    async with bed.running("survivor", short, reservation_gc_period=0.2):
        pods = await bed.pods_until(lambda ps: len(bound(ps)) == 10)
        final = {p["metadata"]["annotations"][RESERVATION_UID] for p in pods.values()}

        def recorded(leases: dict[str, dict[str, Any]]) -> set[str]:
            return {uid for entries in reservations(leases).values() for uid in entries}

        # Every bound pod's reservation is recorded, and nothing else once the rest expired.
        leases = await objects_until(bed.kube, bed.leases_path, lambda ls: recorded(ls) == final)
        assert recorded(leases) == final
        assert_no_double_booking(pods, leases)


def superseded(pods: dict[str, dict[str, Any]], leases: dict[str, dict[str, Any]]) -> list[str]:
    """Reservations of bound pods other than the one each is bound with, as ``node/uid``."""
    bound_with = {
        p["metadata"]["uid"]: p["metadata"]["annotations"].get(RESERVATION_UID)
        for p in pods.values()
        if p["spec"].get("nodeName")
    }
    return [
        f"{node}/{uid}"
        for node, entries in reservations(leases).items()
        for uid, entry in entries.items()
        if entry["podUID"] in bound_with and bound_with[entry["podUID"]] != uid
    ]


@pytest.mark.simonly
async def test_lost_write_answers_leave_no_reservation_beside_the_one_a_pod_is_bound_with(
    bed: Bed,
) -> None:
    """Two replicas (their rngs differ, so they often pick different nodes for one pod) race
    for 80 pods on 160 GPUs while 5% of their write answers are lost (applied, then answered
    504). A pod may end up reserved by both; once it is seen bound, the reservation it is not
    bound with must leave its Lease at once, not when it expires: reservations last an hour
    here and the collector never runs, and with GPUs to spare no later write needs to prune
    it. Replica b releases nothing itself (its writer's ``release`` does nothing, as if it
    died after reserving): replica a, seeing the pods bound, must."""
    sim = sim_of(bed.target)
    await bed.add_nodes(20)  # 160 GPUs
    config = bed.config(reservation_seconds=3600)
    writes = [("create", "pods/binding"), ("create", "leases"), ("update", "leases")]
    writes += [("patch", "pods"), ("create", "events")]
    try:
        async with (
            bed.running("a", config, reservation_gc_period=3600, rng=random.Random(1)),
            bed.running("b", config, reservation_gc_period=3600, rng=random.Random(2)) as b,
        ):

            async def released_by_nobody(node: str, uids: Any) -> None:
                pass

            b.reservations.release = released_by_nobody  # type: ignore[method-assign]
            sim.faults.set([FaultRule(verb, resource, 0.05, LOST) for verb, resource in writes])
            await bed.create_pods((bed.pod(f"x{i:03d}") for i in range(80)), concurrency=16)
            pods = await bed.pods_until(lambda ps: len(bound(ps)) == 80)
            sim.faults.clear()
            leases = await objects_until(
                bed.kube, bed.leases_path, lambda ls: not superseded(pods, ls)
            )
    finally:
        sim.faults.clear()
    assert sim.faults.injected[("create", LOST)] > 0
    assert_no_double_booking(pods, leases)


async def test_a_restarted_scheduler_frees_the_gpus_of_pods_deleted_while_none_ran(
    bed: Bed,
) -> None:
    """The nodes are filled, the scheduler stops, its pods are deleted and as many new ones
    created; a scheduler started then must bind them all at once: the reservations of the
    deleted pods (an hour long here) were written before its first list, which has no such
    pods, so they hold nothing, and they leave their Leases in its first writes. Every replica
    runs on this machine's clock: no skew to tolerate."""
    config = bed.config(reservation_seconds=3600, max_clock_skew=0)
    async with bed.running("first", config, reservation_gc_period=3600):
        await bed.create_pods((bed.pod(f"old-{i:02d}") for i in range(16)), concurrency=8)
        await bed.pods_until(lambda ps: len(bound(ps)) == 16)
    for i in range(16):
        await bed.delete_pod(f"old-{i:02d}", now=True)
    await bed.pods_until(lambda ps: not ps)
    await bed.create_pods((bed.pod(f"new-{i:02d}") for i in range(16)), concurrency=8)
    async with bed.running("second", config, reservation_gc_period=3600) as second:
        pods = await bed.pods_until(lambda ps: len(bound(ps)) == 16)
        leases = await bed.leases()
    assert second.failed_binds == 0
    assert_no_double_booking(pods, leases)
    recorded = {e["pod"] for entries in reservations(leases).values() for e in entries.values()}
    assert recorded == {f"{bed.namespace}/new-{i:02d}" for i in range(16)}
