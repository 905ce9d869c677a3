"""The reflector keeps an exact copy of the server's objects through cut watches, 410s and
injected errors (what the kubelet and the scheduler's informers rely on)."""

from __future__ import annotations

import asyncio
import contextlib
import random
from typing import Any

import pytest

from gpusched.kube.client import Kube
from gpusched.kube.errors import APIError
from gpusched.kube.reflector import Reflector, object_key
from gpusched.sim import FaultRule, SimCluster

LEASES = "/apis/coordination.k8s.io/v1/namespaces/default/leases"


def lease(name: str, holder: str) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "labels": {"holder": holder}},
        "spec": {"holderIdentity": holder},
    }


async def _mutate(kube: Kube, rng: random.Random, steps: int) -> None:
    """Random creates, updates and deletes, retried through injected errors."""
    for _ in range(steps):
        name = f"l{rng.randrange(15)}"
        op = rng.choice(["create", "update", "delete"])
        for _attempt in range(50):
            try:
                if op == "create":
                    await kube.create(LEASES, lease(name, f"h{rng.randrange(3)}"))
                elif op == "update":
                    body = {"metadata": {"labels": {"holder": f"h{rng.randrange(3)}"}}}
                    await kube.patch(f"{LEASES}/{name}", body)
                else:
                    await kube.delete(f"{LEASES}/{name}")
                break
            except APIError as exc:
                if exc.code in (404, 409):
                    break  # the operation does not apply to the current state
                continue  # injected 500/429: try again


async def _converged(reflector: Reflector, kube: Kube) -> bool:
    fresh = await kube.get(LEASES)
    truth = {object_key(o): o["metadata"]["resourceVersion"] for o in fresh["items"]}
    mine = {k: o["metadata"]["resourceVersion"] for k, o in reflector.items.items()}
    return truth == mine


@pytest.mark.simonly
@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_reflector_converges_through_cut_watches_410s_and_errors(seed: int) -> None:
    rng = random.Random(seed)
    # A window of 8 events makes resumes after a cut regularly fall out of it (410, re-list).
    async with SimCluster(None, kubelets=False, window=8) as sim:
        seen: list[str] = []
        marker = asyncio.Event()
        marker_gone = asyncio.Event()

        def handler(kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
            seen.append(kind)
            if obj["metadata"]["name"] == "marker":
                (marker_gone if kind == "DELETED" else marker).set()

        reflector = Reflector(
            Kube(sim.api_client()),
            LEASES,
            handler=handler,
            page_size=4,
            backoff_initial=0.01,
            backoff_max=0.05,
        )
        task = asyncio.create_task(reflector.run())
        try:
            await asyncio.wait_for(reflector.synced.wait(), timeout=30)
            sim.faults.set(
                [FaultRule("watch", "leases", 0.3, 500), FaultRule("list", "leases", 0.3, 429)],
                watch_events=3,
            )
            await _mutate(sim.kube, rng, 75)
            # Every watch fails while 40 writes push the reflector's resourceVersion out of the
            # 8-event window: when watches work again the resume gets 410 and it must re-list.
            sim.faults.set([FaultRule("watch", "leases", 1.0, 500)])
            for i in range(40):
                await sim.kube.create(LEASES, lease(f"gap{i}", "h0"))
            sim.faults.set(
                [FaultRule("watch", "leases", 0.3, 500), FaultRule("list", "leases", 0.3, 429)]
            )
            await _mutate(sim.kube, rng, 75)
            sim.faults.clear()
            # Converged once the reflector has caught up with a final marker write.
            await sim.kube.create(LEASES, lease("marker", "done"))
            await asyncio.wait_for(marker.wait(), timeout=60)
            assert await _converged(reflector, sim.kube)
            assert reflector.lists > 1, "the small window should have forced a re-list"
            assert sim.faults.total() > 0
            await sim.kube.delete(f"{LEASES}/marker")
            await asyncio.wait_for(marker_gone.wait(), timeout=60)
            assert await _converged(reflector, sim.kube)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


@pytest.mark.simonly
async def test_watch_streams_are_cut_after_the_configured_seconds() -> None:
    async with SimCluster(None, kubelets=False) as sim:
        sim.faults.set(watch_seconds=0.2)
        rv = (await sim.kube.get(LEASES))["metadata"]["resourceVersion"]
        events = [e async for e in sim.kube.watch(LEASES, {"resourceVersion": rv})]
        assert events == []  # the stream ended on its own, with nothing to deliver
