"""Metrics keep kube-scheduler's names; the operations endpoint serves them and health."""

from __future__ import annotations

import aiohttp

from gpusched.metrics import Metrics, OperationsServer


async def test_operations_endpoint_serves_metrics_and_readiness() -> None:
    metrics = Metrics()
    metrics.schedule_attempts.labels(result="scheduled", profile="gpusched").inc()
    metrics.pending_pods.labels(queue="active").set(3)
    ready = False
    server = OperationsServer(metrics, lambda: ready)
    await server.start("127.0.0.1", 0)
    try:
        async with aiohttp.ClientSession() as session:
            base = f"http://127.0.0.1:{server.port}"
            async with session.get(f"{base}/metrics") as r:
                text = await r.text()
            assert (
                'scheduler_schedule_attempts_total{profile="gpusched",result="scheduled"} 1.0'
                in text
            )
            assert 'scheduler_pending_pods{queue="active"} 3.0' in text
            async with session.get(f"{base}/healthz") as r:
                assert r.status == 200
            async with session.get(f"{base}/readyz") as r:
                assert r.status == 503
            ready = True
            async with session.get(f"{base}/readyz") as r:
                assert r.status == 200
    finally:
        await server.stop()


def test_two_schedulers_do_not_share_counters() -> None:
    a, b = Metrics(), Metrics()
    a.lease_conflicts.inc()
    assert b"gpusched_lease_conflicts_total 0.0" in b.render()
