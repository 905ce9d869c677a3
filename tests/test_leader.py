"""Leader election on a fake clock: one leader at a time, takeover after the lease lapses."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from gpusched.clock import FakeClock
from gpusched.kube.client import Kube
from gpusched.leader import LeaderElector
from gpusched.sim import FaultRule, SimCluster


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
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
