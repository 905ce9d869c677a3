"""Shared fixtures.

Integration tests talk to a *target* cluster through the real kubernetes-asyncio client over
HTTP: the simulated cluster by default, or a real one when ``GPUSCHED_E2E_KUBECONFIG`` names a
kubeconfig (tests then create their own fake GPU nodes, namespaces and CRDs there and delete
them afterwards). Tests that check what only the simulation provides (kubelets, injected
faults) are marked ``simonly`` and skipped against a real cluster.

Every test must leave no asyncio task behind: ``no_task_leaks`` fails one that does.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config

from gpusched.kube.client import Kube
from gpusched.sim import SimCluster

E2E_KUBECONFIG = os.environ.get("GPUSCHED_E2E_KUBECONFIG", "")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not E2E_KUBECONFIG:
        return
    skip = pytest.mark.skip(
        reason="checks simulation-only behaviour; GPUSCHED_E2E_KUBECONFIG is set"
    )
    for item in items:
        if "simonly" in item.keywords:
            item.add_marker(skip)


@dataclass
class Target:
    """The cluster under test and what a test created on it."""

    sim: SimCluster | None
    configuration: k8s.Configuration
    namespace: str
    prefix: str
    kube: Kube
    clients: list[k8s.ApiClient] = field(default_factory=list)

    @property
    def is_sim(self) -> bool:
        return self.sim is not None

    def api(self) -> k8s.ApiClient:
        client = k8s.ApiClient(self.configuration)
        self.clients.append(client)
        return client

    def core(self) -> k8s.CoreV1Api:
        return k8s.CoreV1Api(self.api())

    @property
    def kubeconfig_path(self) -> str:
        """A kubeconfig file for this cluster: what a test passes to the commands it runs as a
        user would (``gpusched ... --kubeconfig``, in a subprocess)."""
        return str(self.sim.kubeconfig_path) if self.sim is not None else E2E_KUBECONFIG

    def name(self, base: str) -> str:
        """A name unique to this test run (cluster-scoped objects on a shared real cluster)."""
        return f"{self.prefix}-{base}"


@pytest.fixture(autouse=True)
async def no_task_leaks() -> AsyncIterator[None]:
    before = asyncio.all_tasks()
    yield
    await asyncio.sleep(0)
    leaked = [
        t for t in asyncio.all_tasks() - before if t is not asyncio.current_task() and not t.done()
    ]
    for _ in range(20):  # aiohttp closes connections with a few loop turns of delay
        if not leaked:
            break
        await asyncio.sleep(0)
        leaked = [t for t in leaked if not t.done()]
    assert not leaked, f"test left tasks running: {leaked}"


async def _target(sim: SimCluster | None) -> AsyncIterator[Target]:
    configuration = k8s.Configuration()
    if sim is not None:
        configuration = sim.configuration()
    else:
        await k8s_config.load_kube_config(
            config_file=E2E_KUBECONFIG, client_configuration=configuration
        )
    prefix = f"e2e-{secrets.token_hex(3)}"
    namespace = prefix
    kube = Kube(k8s.ApiClient(configuration))
    target = Target(sim, configuration, namespace, prefix, kube)
    await kube.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
    )
    try:
        yield target
    finally:
        with contextlib.suppress(Exception):
            await kube.delete(f"/api/v1/namespaces/{namespace}")
        for client in target.clients:
            await client.close()
        await kube.close()


@pytest.fixture
async def target() -> AsyncIterator[Target]:
    """A cluster with no fleet: the simulation (with kubelets) or the e2e cluster."""
    if E2E_KUBECONFIG:
        async for t in _target(None):
            yield t
        return
    async with SimCluster(None, bookmark_interval=0.2) as sim:
        async for t in _target(sim):
            yield t


def sim_of(target: Target) -> SimCluster:
    assert target.sim is not None
    return target.sim


def pod_manifest(name: str, **extra: Any) -> dict[str, Any]:
    """A minimal valid pod."""
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]},
    }
    for key, value in extra.items():
        pod[key] = value
    return pod
