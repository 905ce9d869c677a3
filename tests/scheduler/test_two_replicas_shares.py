"""Active replicas split the pods and nodes (gpusched.replicas), and hand them over.

A replica that joins is seen by the other through its membership Lease; one that stops cleanly
deletes it, and its share goes back at once; one that dies (its Lease left behind, no longer
renewed) keeps its share until the Lease expires, then the live replica schedules its pods too.
The dead replica is a membership Lease written by the test, on a fake clock shared with the
live replica, so its expiry is a clock step and not a wait. Both node choices are checked: the
equivalence classes and the sampled cycle.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest
from conftest import Target
from scheduler_bed import WAIT, Bed, assert_no_double_booking, bound, open_bed

from gpusched.clock import FakeClock
from gpusched.replicas import Membership, Share
from gpusched.scheduler import Scheduler
from gpusched.sim.fleet import node_names

NODES = 8


@pytest.fixture
async def bed(target: Target) -> AsyncIterator[Bed]:
    async with open_bed(target) as bed:
        await bed.add_nodes(NODES)
        yield bed


async def shares_until(scheduler: Scheduler, done: Callable[[], bool]) -> None:
    """Wait until ``done()``, looking again whenever the scheduler's live replicas change."""
    membership = scheduler.membership
    changed = asyncio.Event()
    original = membership.on_change

    def hook() -> None:
        if original is not None:
            original()
        changed.set()

    membership.on_change = hook
    try:
        while not done():
            changed.clear()
            await asyncio.wait_for(changed.wait(), timeout=WAIT)
    finally:
        membership.on_change = original


def members(scheduler: Scheduler, bed: Bed) -> tuple[str, ...]:
    share = scheduler.membership.share(bed.scheduler_name)
    return share.members if share is not None else (scheduler.identity,)


async def test_replicas_see_each_other_join_and_leave(bed: Bed) -> None:
    async with bed.running("replica-a") as a:
        assert members(a, bed) == ("replica-a",)
        async with bed.running("replica-b") as b:
            await shares_until(a, lambda: members(a, bed) == ("replica-a", "replica-b"))
            await shares_until(b, lambda: members(b, bed) == ("replica-a", "replica-b"))
        # b stopped cleanly: its Lease is gone, a is alone again without waiting for expiry.
        await shares_until(a, lambda: members(a, bed) == ("replica-a",))
    assert not [n for n in await bed.leases() if n.startswith("gpusched-replica-")]


@pytest.mark.parametrize("batching", [True, False], ids=["classes", "sampled"])
async def test_a_dead_replicas_share_is_taken_once_its_lease_expires(
    bed: Bed, batching: bool
) -> None:
    clock = FakeClock()
    config = bed.config().model_copy(update={"opportunistic_batching": batching})
    async with bed.running("replica-a", config, clock=clock) as a:
        dead = Membership(
            "replica-dead",
            [bed.scheduler_name],
            clock,
            namespace=bed.system_namespace,
            lease_duration=config.replicas.lease_duration_seconds,
        )
        expected = ("replica-a", "replica-dead")
        waiting = asyncio.create_task(shares_until(a, lambda: members(a, bed) == expected))
        await asyncio.sleep(0)  # the hook is installed before the Lease can be seen
        await bed.kube.create(bed.leases_path, dead.lease_body())
        await waiting

        names = [f"share-{i}" for i in range(NODES)]
        await bed.create_pods(bed.pod(n) for n in names)
        created = await bed.pods_until(lambda ps: all(n in ps for n in names))
        view = Share("replica-a", expected)
        mine = {n for n in names if view.takes(created[n]["metadata"]["uid"])}
        pods = await bed.pods_until(lambda ps: set(bound(ps)) >= mine)
        assert set(bound(pods)) == mine  # the dead replica's pods wait for it
        own_nodes = [n for spec in bed.specs for n in node_names(spec) if view.mine(n)]
        if own_nodes:  # 8 GPUs each: a's pods fit in its own share
            assert {pods[n]["spec"]["nodeName"] for n in mine} <= set(own_nodes)

        # The dead replica's Lease expires (duration + clock-skew tolerance): a takes over.
        skew = a.membership.skew
        await clock.advance(config.replicas.lease_duration_seconds + skew + 1)
        assert members(a, bed) == ("replica-a",)
        pods = await bed.pods_until(lambda ps: len(bound(ps)) == len(names))
    assert_no_double_booking(pods, await bed.leases())
