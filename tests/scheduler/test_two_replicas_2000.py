"""Two replicas without leader election schedule the same 2,000 pods at once.

Zero GPU capacity may be double-booked, checked from the API: the assignment annotations of
the bound pods and the reservation Leases, and on the simulation the kubelets too, which
reject any pod a node cannot hold. Every pod fits (2,000 single-GPU pods on 250 eight-GPU
nodes), so every pod must end up bound. The replicas see each other's membership Leases and
split the pods and nodes (gpusched.replicas), so they rarely race for a GPU: Lease conflicts
stay far fewer than pods (no timing is asserted).

Runs on the simulation by default and, like ``test_scheduler_integration.py`` (see its
docstring), against the cluster named by ``GPUSCHED_E2E_KUBECONFIG``, where it creates its 250
fake nodes and 2,000 pods (no kubelet runs them: they stay Pending, bound) and deletes them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from conftest import Target
from scheduler_bed import Bed, assert_no_double_booking, bound, open_bed

PODS_TOTAL = 2000


@pytest.fixture
async def bed(target: Target) -> AsyncIterator[Bed]:
    async with open_bed(target) as bed:
        await bed.add_nodes(PODS_TOTAL // 8)
        yield bed


async def test_two_replicas_2000_pods_no_double_booking(bed: Bed) -> None:
    async with bed.running("replica-a") as a, bed.running("replica-b") as b:
        await bed.create_pods((bed.pod(f"race-{i:04d}") for i in range(PODS_TOTAL)), concurrency=32)
        pods = await bed.pods_until(lambda ps: len(bound(ps)) == PODS_TOTAL, timeout=600)
        shares = [s.membership.share(bed.scheduler_name) for s in (a, b)]
        both = ("replica-a", "replica-b")
    assert_no_double_booking(pods, await bed.leases())
    # Each saw the other, and they split the work instead of racing for the same GPUs.
    assert [share.members if share is not None else () for share in shares] == [both, both]
    assert a.scheduled > PODS_TOTAL / 4
    assert b.scheduled > PODS_TOTAL / 4
    conflicts = a.reservations.conflicts + b.reservations.conflicts
    assert conflicts < PODS_TOTAL / 10, f"{conflicts} Lease conflicts for {PODS_TOTAL} pods"
    assert a.failed_binds + b.failed_binds < PODS_TOTAL / 10
