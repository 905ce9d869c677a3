"""Leader election on a fake clock: one leader at a time, takeover after the lease lapses or
at once when the leader releases it; how ``run`` ends (its work's error, leadership lost)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gpusched.clock import FakeClock
from gpusched.kube.client import Kube
from gpusched.leader import LeaderElectionConfig, LeaderElector, LeadershipLost
from gpusched.sim import FaultRule, SimCluster

LEASE = "/apis/coordination.k8s.io/v1/namespaces/gpusched-system/leases/gpusched"


@pytest.fixture
async def sim() -> AsyncIterator[SimCluster]:
    async with SimCluster(None, kubelets=False) as sim:
        await sim.kube.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpusched-system"}},
        )
        yield sim


async def test_one_leader_then_takeover_when_it_stops_renewing(sim: SimCluster) -> None:
    clock = FakeClock()
    a = LeaderElector(Kube(sim.api_client()), "a", clock=clock)
    b = LeaderElector(Kube(sim.api_client()), "b", clock=clock)
    assert await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()  # b first observes a's renewal
    await clock.advance(10)
    assert not await b.try_acquire_or_renew()  # 10 s < the 15 s lease duration
    assert await a.try_acquire_or_renew()  # a renews: b's observation restarts
    await clock.advance(10)
    assert not await b.try_acquire_or_renew()
    await clock.advance(16)  # a stopped renewing 16 s ago on b's clock
    assert await b.try_acquire_or_renew()
    lease = await sim.kube.get(
        "/apis/coordination.k8s.io/v1/namespaces/gpusched-system/leases/gpusched"
    )
    assert lease["spec"]["holderIdentity"] == "b"
    assert lease["spec"]["leaseTransitions"] == 1
    assert not await a.try_acquire_or_renew()


async def test_run_leads_until_the_work_ends_and_steps_down_when_renewal_fails(
    sim: SimCluster,
) -> None:
    clock = FakeClock()
    elector = LeaderElector(Kube(sim.api_client()), "a", clock=clock)
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def lead() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    task = asyncio.create_task(elector.run(lead))
    try:
        await started.wait()
        assert elector.is_leader
        # The API starts refusing every lease write: after the renew deadline it steps down.
        sim.faults.set([FaultRule("update", "leases", 1.0, 500)])
        while not task.done():  # let fake time pass while the elector waits on it
            waiter = asyncio.create_task(clock.wait_for_sleepers(1))
            done, _ = await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
            if waiter in done:
                await clock.advance(2)
            else:
                waiter.cancel()
                await asyncio.gather(waiter, return_exceptions=True)
        assert cancelled.is_set()
        assert not elector.is_leader
        with pytest.raises(LeadershipLost, match="renewDeadline"):
            await task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, LeadershipLost):
            await task


async def lease_of(sim: SimCluster) -> dict[str, Any]:
    spec: dict[str, Any] = (await sim.kube.get(LEASE))["spec"]
    return spec


class Work:
    """A ``lead`` coroutine that runs until cancelled (or raises ``error``), and records
    who held the Lease when it was cancelled."""

    def __init__(self, sim: SimCluster, error: Exception | None = None) -> None:
        self.sim = sim
        self.error = error
        self.started = asyncio.Event()
        self.proceed = asyncio.Event()
        self.holder_when_cancelled: str | None = None

    async def __call__(self) -> None:
        self.started.set()
        try:
            await self.proceed.wait()
        except asyncio.CancelledError:
            self.holder_when_cancelled = (await lease_of(self.sim))["holderIdentity"]
            raise
        if self.error is not None:
            raise self.error


async def test_a_cancelled_leader_stops_its_work_then_releases_the_lease(sim: SimCluster) -> None:
    clock = FakeClock()
    a = LeaderElector(Kube(sim.api_client()), "a", clock=clock)
    b = LeaderElector(Kube(sim.api_client()), "b", clock=clock)
    work = Work(sim)
    task = asyncio.create_task(a.run(work))
    await work.started.wait()
    assert not await b.try_acquire_or_renew()  # b observes a's fresh renewal
    await clock.advance(1)
    task.cancel()  # a graceful stop (SIGTERM)
    with pytest.raises(asyncio.CancelledError):
        await task
    assert work.holder_when_cancelled == "a"  # the work had stopped before the release
    assert not a.is_leader
    spec = await lease_of(sim)
    now = clock.now().strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert spec == {  # client-go's release(): the holder cleared, transitions kept
        "holderIdentity": "",
        "leaseDurationSeconds": 1,
        "acquireTime": now,
        "renewTime": now,
        "leaseTransitions": 0,
    }
    # b takes over at its next attempt: no lease duration has passed on its clock.
    assert await b.try_acquire_or_renew()
    spec = await lease_of(sim)
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("b", 1)


async def test_the_error_of_the_work_propagates_and_the_lease_is_released(
    sim: SimCluster,
) -> None:
    a = LeaderElector(Kube(sim.api_client()), "a", clock=FakeClock())
    work = Work(sim, error=RuntimeError("the scheduling loop crashed"))
    task = asyncio.create_task(a.run(work))
    await work.started.wait()
    work.proceed.set()
    with pytest.raises(RuntimeError, match="the scheduling loop crashed"):
        await task
    assert (await lease_of(sim))["holderIdentity"] == ""


async def test_work_that_returns_ends_run_and_releases_the_lease(sim: SimCluster) -> None:
    a = LeaderElector(Kube(sim.api_client()), "a", clock=FakeClock())
    work = Work(sim)
    task = asyncio.create_task(a.run(work))
    await work.started.wait()
    work.proceed.set()
    await task
    assert (await lease_of(sim))["holderIdentity"] == ""


async def test_release_leaves_a_lease_that_another_candidate_holds(sim: SimCluster) -> None:
    clock = FakeClock()
    a = LeaderElector(Kube(sim.api_client()), "a", clock=clock)
    b = LeaderElector(Kube(sim.api_client()), "b", clock=clock)
    assert await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()
    await clock.advance(16)
    assert await b.try_acquire_or_renew()  # a stopped renewing: b took over
    assert not await a.release()
    spec = await lease_of(sim)
    assert (spec["holderIdentity"], spec["leaseDurationSeconds"]) == ("b", 15)


async def test_a_standby_that_stops_does_not_touch_the_lease(sim: SimCluster) -> None:
    clock = FakeClock()
    a = LeaderElector(Kube(sim.api_client()), "a", clock=clock)
    b = LeaderElector(Kube(sim.api_client()), "b", clock=clock)
    assert await a.try_acquire_or_renew()
    before = await sim.kube.get(LEASE)
    task = asyncio.create_task(b.run(Work(sim)))
    await clock.wait_for_sleepers(1)  # b read the Lease, lost, and waits to retry
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    after = await sim.kube.get(LEASE)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


async def test_release_is_best_effort(sim: SimCluster, caplog: pytest.LogCaptureFixture) -> None:
    a = LeaderElector(Kube(sim.api_client()), "a", clock=FakeClock())
    work = Work(sim)
    task = asyncio.create_task(a.run(work))
    await work.started.wait()
    sim.faults.set([FaultRule("update", "leases", 1.0, 500)])
    task.cancel()
    with (
        caplog.at_level(logging.ERROR, logger="gpusched.leader"),
        pytest.raises(asyncio.CancelledError),
    ):
        await task  # the failed release is logged; the cancellation still propagates
    assert "could not release the lease" in caplog.text
    sim.faults.set([])
    assert (await lease_of(sim))["holderIdentity"] == "a"  # it will expire instead


async def test_lease_readable_says_whether_the_last_attempt_read_the_lease(
    sim: SimCluster,
) -> None:
    a = LeaderElector(Kube(sim.api_client()), "a", clock=FakeClock())
    b = LeaderElector(Kube(sim.api_client()), "b", clock=FakeClock())
    assert not b.lease_readable
    assert await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()
    assert b.lease_readable
    sim.faults.set([FaultRule("get", "leases", 1.0, 500)])
    assert not await b.try_acquire_or_renew()
    assert not b.lease_readable


@pytest.mark.parametrize(("duration", "seconds"), [(0.5, 1), (1.0, 1), (1.5, 2), (15.0, 15)])
async def test_the_lease_duration_is_written_in_whole_seconds_rounded_up(
    sim: SimCluster, duration: float, seconds: int
) -> None:
    config = LeaderElectionConfig(lease_duration=duration, renew_deadline=0.4, retry_period=0.1)
    a = LeaderElector(Kube(sim.api_client()), "a", config, clock=FakeClock())
    assert await a.try_acquire_or_renew()  # creates the Lease
    assert await a.try_acquire_or_renew()  # renews it
    assert (await lease_of(sim))["leaseDurationSeconds"] == seconds


async def test_a_renewal_that_hangs_is_cut_at_what_is_left_of_the_renew_deadline(
    sim: SimCluster,
) -> None:
    """client-go bounds the renewal by RenewDeadline; a hanging request must not outlive it
    (a standby could take over meanwhile). The API server stalls every request five times longer
    than the deadline: the attempt fails at its timeout instead of hanging."""
    clock = FakeClock()
    config = LeaderElectionConfig(renew_deadline=0.2, retry_period=0.05)
    elector = LeaderElector(Kube(sim.api_client()), "a", clock=clock, config=config)
    assert await elector.try_acquire_or_renew()
    sim.faults.set(latency=1.0)  # five times the deadline
    try:
        assert not await elector.try_acquire_or_renew(timeout=0.2)
    finally:
        sim.faults.clear()
