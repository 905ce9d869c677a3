"""``Kube`` reads the proxy environment once (as client-go honours HTTPS_PROXY/NO_PROXY)."""

from __future__ import annotations

import pytest
from kubernetes_asyncio import client as k8s_client

from gpusched.kube import Kube


def _api(host: str) -> k8s_client.ApiClient:
    configuration = k8s_client.Configuration()
    configuration.host = host
    return k8s_client.ApiClient(configuration)


@pytest.mark.parametrize(
    ("env", "proxy"),
    [
        ({}, None),
        ({"HTTPS_PROXY": "http://proxy.example:3128"}, "http://proxy.example:3128"),
        ({"HTTPS_PROXY": "http://proxy.example:3128", "NO_PROXY": "api.example"}, None),
    ],
)
async def test_the_proxy_is_settled_once(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], proxy: str | None
) -> None:
    for name in ("HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    kube = Kube(_api("https://api.example:6443"))
    try:
        rest = kube.api_client.rest_client
        assert rest.proxy == proxy
        assert not rest.pool_manager.trust_env  # no per-request lookups in worker threads
    finally:
        await kube.close()


async def test_warm_opens_pooled_connections_up_to_the_pool_size() -> None:
    """``Kube.warm(n)`` leaves ``n`` idle connections in the pool (capped at its size), so a
    burst of binds after start-up pays no handshake per connection."""
    from gpusched.sim import SimCluster

    async with SimCluster() as sim:
        kube: Kube = sim.kube
        connector = kube.api_client.rest_client.pool_manager.connector
        assert await kube.warm(5) == 5
        idle = sum(len(c) for c in connector._conns.values())  # aiohttp has no public count
        assert idle >= 5
        assert await kube.warm(kube.pool_size + 50) == kube.pool_size
        assert await kube.warm(0) == 0
