"""``SimCluster``: the API server, its kubelets and a GPU fleet, started together.

The embedded default a new user runs first, the bed of every integration test and benchmark::

    async with SimCluster("dgx-h100") as sim:
        kube = sim.kube                      # a gpusched.kube.Kube on the simulated cluster
        api = sim.api_client()               # a kubernetes_asyncio ApiClient, for typed APIs
        sim.faults.set([FaultRule("create", "pods", 0.1, 500)])
        print(sim.kubeconfig_path)           # for kubectl
        token = sim.service_account_token("gpusched-system", "gpusched")
        scheduler_api = sim.api_client(token=token)  # what that ServiceAccount's RBAC allows

    async with SimCluster("mig-medium", webhook=True) as sim:
        print(sim.webhook.url)               # gpusched's admission webhook, registered

It listens on a free loopback port, writes a kubeconfig with a fresh bearer token, installs
the GPU policy CRDs (``GPUClass``, ``GPUNodePolicy``, ``ClusterGPUPolicy``) and
scheduler-plugins' ``PodGroup`` CRD (``scheduling.x-k8s.io``), applies the
fleet through the API exactly as ``gpusched sim fleet apply`` does on a real cluster, and runs
the simulated kubelets as API clients. With ``webhook=True`` (or a ``WebhookConfig``) it also
serves and registers gpusched's admission webhook (``gpusched.sim.webhook``); with
``telemetry=10.0`` it writes made-up GPU telemetry into the simulated inventories' status every
10 s (``gpusched.sim.telemetry``). Both are off by default, so that the many clusters tests start
stay cheap; ``gpusched sim serve`` and ``sim run`` turn them on. A controller loop on the
cluster's clock runs the work that waits for time (a PodDisruptionBudget's ``disruptedPods``
entries expire after two minutes), so a ``FakeClock`` drives it too. The resourceclaim
controller (``gpusched.sim.resource_controller``: claims from ResourceClaimTemplates, pods'
``resourceClaimStatuses``, ``reservedFor`` cleanup) runs as an API client, as
kube-controller-manager does, when ``resource_claims=True`` (by default with the kubelets or a
``dra`` fleet, so that ``kubelets=False`` stays a cluster where only the test's requests reach
the server); it watches pods only once a DRA claim or template exists. The Job controller
(``gpusched.sim.job_controller``) runs likewise with the kubelets (``jobs=`` overrides).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config

from gpusched.clock import Clock, RealClock
from gpusched.gpu_policy.crds import CRD_NAMES as POLICY_CRD_NAMES
from gpusched.kube.client import Kube
from gpusched.sim.faults import Faults
from gpusched.sim.fleet import ClusterSpec, apply_fleet, ensure_crd, load_cluster_spec
from gpusched.sim.job_controller import JobController
from gpusched.sim.kubelet import SimKubelet
from gpusched.sim.resource_controller import ResourceClaimController
from gpusched.sim.server import APIServer
from gpusched.sim.telemetry import SimTelemetry

if TYPE_CHECKING:
    from gpusched.sim.webhook import SimWebhook
    from gpusched.webhook.config import WebhookConfig

__all__ = ["EXTRA_CRD_NAMES", "SimCluster"]

EXTRA_CRD_NAMES: tuple[str, ...] = (
    "podgroups.scheduling.x-k8s.io",
    "gpuclaims.gpu.scheduling",
    "gpuworkloads.gpu.warp.dev",
)
"""CRDs of other projects that gpusched reads, installed with the policy CRDs."""


class SimCluster:
    def __init__(
        self,
        cluster: str | os.PathLike[str] | ClusterSpec | None = None,
        *,
        faults: Faults | None = None,
        clock: Clock | None = None,
        kubelets: bool = True,
        window: int = 10_000,
        bookmark_interval: float = 60.0,
        host: str = "127.0.0.1",
        port: int = 0,
        kubeconfig_path: str | os.PathLike[str] | None = None,
        token: str | None = None,
        tls: bool = True,
        webhook: bool | WebhookConfig = False,
        telemetry: float | None = None,
        resource_claims: bool | None = None,
        jobs: bool | None = None,
    ) -> None:
        if cluster is None or isinstance(cluster, ClusterSpec):
            self.spec = cluster
        else:
            self.spec = load_cluster_spec(cluster)
        self.clock = clock or RealClock()
        self.server = APIServer(
            token=token,
            faults=faults,
            clock=self.clock.now,
            window=window,
            bookmark_interval=bookmark_interval,
            tls=tls,
        )
        self._kubelets_enabled = kubelets
        self._host = host
        self._port = port
        self._kubeconfig_arg = kubeconfig_path
        self._tmpdir: tempfile.TemporaryDirectory[str] | None = None
        self.kubeconfig_path: Path = Path()
        self._kube: Kube | None = None
        self.kubelet: SimKubelet | None = None
        self._kubelet_task: asyncio.Task[None] | None = None
        self._clients: list[k8s_client.ApiClient] = []
        self._webhook_enabled = webhook is not False
        self._webhook_config = None if isinstance(webhook, bool) else webhook
        self.webhook: SimWebhook | None = None
        self._telemetry_period = telemetry
        self.telemetry: SimTelemetry | None = None
        self._telemetry_task: asyncio.Task[None] | None = None
        self._controller_task: asyncio.Task[None] | None = None
        if resource_claims is None:
            resource_claims = kubelets or (self.spec is not None and self.spec.dra)
        self._claims_enabled = resource_claims
        self.resource_claims: ResourceClaimController | None = None
        self._claims_task: asyncio.Task[None] | None = None
        self._jobs_enabled = kubelets if jobs is None else jobs
        self.jobs: JobController | None = None
        self._jobs_task: asyncio.Task[None] | None = None

    @property
    def faults(self) -> Faults:
        return self.server.faults

    @property
    def kube(self) -> Kube:
        assert self._kube is not None, "use SimCluster as an async context manager"
        return self._kube

    @property
    def url(self) -> str:
        return self.server.url

    def map_service(self, namespace: str, name: str, url: str, port: int = 443) -> None:
        """Send admission webhook calls addressed to the Service ``namespace/name:port``
        (``clientConfig.service``) to ``url``, e.g. ``https://127.0.0.1:8443``; the service's
        ``path`` is appended. The simulation has no Service networking: this is the one
        difference from a real cluster. TLS is verified against the webhook's ``caBundle``
        for the name ``<name>.<namespace>.svc``, as kube-apiserver does."""
        self.server.admission.map_service(namespace, name, url, port)

    def service_account_token(
        self,
        namespace: str,
        name: str,
        node: str | None = None,
        *,
        pod: str | None = None,
        expiration_seconds: int = 3600,
    ) -> str:
        """A token for the ServiceAccount ``namespace/name`` (which must exist), as
        ``kubectl create token`` gets one: bound to the Node ``node`` or the Pod ``pod`` when
        given (its user then carries the node's name as ``authentication.kubernetes.io/
        node-name``). Requests made with it are authorized by the stored RBAC."""
        bound: dict[str, str] | None = None
        if pod is not None:
            bound = {"apiVersion": "v1", "kind": "Pod", "name": pod}
        elif node is not None:
            bound = {"apiVersion": "v1", "kind": "Node", "name": node}
        token, _ = self.server.tokens.issue(
            namespace, name, bound=bound, expiration_seconds=expiration_seconds
        )
        return token

    def configuration(self, token: str | None = None) -> k8s_client.Configuration:
        """A kubernetes-asyncio Configuration for this cluster (as loaded from the kubeconfig),
        with the admin token or ``token``."""
        configuration = k8s_client.Configuration()
        configuration.host = self.server.url
        configuration.api_key = {"BearerToken": token or self.server.token}
        configuration.api_key_prefix = {"BearerToken": "Bearer"}
        if self.server.certs is not None:
            configuration.ssl_ca_cert = str(self.server.certs.ca_file)
        return configuration

    def api_client(self, token: str | None = None) -> k8s_client.ApiClient:
        """A new kubernetes-asyncio ApiClient on this cluster (the admin's, or ``token``'s),
        closed with the cluster."""
        client = k8s_client.ApiClient(self.configuration(token))
        self._clients.append(client)
        return client

    async def load_api_client(self) -> k8s_client.ApiClient:
        """An ApiClient loaded from the written kubeconfig file, the way users load one."""
        configuration = k8s_client.Configuration()
        await k8s_config.load_kube_config(
            config_file=str(self.kubeconfig_path), client_configuration=configuration
        )
        client = k8s_client.ApiClient(configuration)
        self._clients.append(client)
        return client

    def write_kubeconfig(self, path: str | os.PathLike[str], token: str | None = None) -> Path:
        """Write a kubeconfig for the admin token, or for ``token`` (a service account's)."""
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(yaml.safe_dump(self.server.kubeconfig(token=token), sort_keys=False))
        out.chmod(0o600)
        return out

    async def __aenter__(self) -> SimCluster:
        await self.server.start(self._host, self._port)
        if self._kubeconfig_arg is not None:
            self.kubeconfig_path = self.write_kubeconfig(self._kubeconfig_arg)
        else:
            self._tmpdir = tempfile.TemporaryDirectory(prefix="gpusched-sim-")
            self.kubeconfig_path = self.write_kubeconfig(Path(self._tmpdir.name) / "kubeconfig")
        try:
            self._kube = Kube(self.api_client())
            api = self._kube.api_client
            await asyncio.gather(
                *(ensure_crd(api, name=name) for name in (*POLICY_CRD_NAMES, *EXTRA_CRD_NAMES))
            )
            self._controller_task = asyncio.create_task(
                self._run_controllers(), name="sim-controllers"
            )
            if self._claims_enabled:
                self.resource_claims = ResourceClaimController(Kube(self.api_client()), self.clock)
                self._claims_task = asyncio.create_task(
                    self.resource_claims.run(), name="sim-resourceclaim-controller"
                )
            if self._jobs_enabled:
                self.jobs = JobController(Kube(self.api_client()), self.clock)
                self._jobs_task = asyncio.create_task(self.jobs.run(), name="sim-job-controller")
            if self.spec is not None:
                await apply_fleet(self._kube.api_client, self.spec)
            if self._webhook_enabled:
                from gpusched.sim.webhook import SimWebhook

                self.webhook = SimWebhook(self, self._webhook_config)
                await self.webhook.start()
            if self._kubelets_enabled:
                self.start_kubelets()
            if self._telemetry_period:
                self.telemetry = SimTelemetry(
                    Kube(self.api_client()), self.clock, period=self._telemetry_period
                )
                self._telemetry_task = asyncio.create_task(
                    self.telemetry.run(), name="sim-telemetry"
                )
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        return self

    async def _run_controllers(self) -> None:
        """Run the registry's background work when its timed work falls due (sleeping on the
        cluster's clock until the earliest ``disruptedPods`` entry expires)."""
        registry = self.server.registry
        disruption = registry.disruption
        while True:
            await disruption.wakeup.wait()
            disruption.wakeup.clear()
            while disruption.rechecks:
                delay = (min(disruption.rechecks.values()) - self.clock.now()).total_seconds()
                await self.clock.sleep(delay)  # yields even when already due
                if disruption.due():
                    registry.background()

    def start_kubelets(self) -> SimKubelet:
        """Start (or restart) the simulated kubelets."""
        if self._kubelet_task is not None and not self._kubelet_task.done():
            assert self.kubelet is not None
            return self.kubelet
        self.kubelet = SimKubelet(Kube(self.api_client()), self.clock)
        self._kubelet_task = asyncio.create_task(self.kubelet.run(), name="sim-kubelets")
        return self.kubelet

    async def stop_kubelets(self) -> None:
        if self._kubelet_task is not None:
            self._kubelet_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._kubelet_task
            self._kubelet_task = None

    async def __aexit__(self, *exc: Any) -> None:
        if self._jobs_task is not None:
            self._jobs_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._jobs_task
            self._jobs_task = None
        if self._claims_task is not None:
            self._claims_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._claims_task
            self._claims_task = None
        if self._controller_task is not None:
            self._controller_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._controller_task
            self._controller_task = None
        if self._telemetry_task is not None:
            self._telemetry_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._telemetry_task
            self._telemetry_task = None
        await self.stop_kubelets()
        if self.webhook is not None:
            await self.webhook.stop()
            self.webhook = None
        await self.server.stop()
        for client in self._clients:
            await client.close()
        self._clients.clear()
        if self._tmpdir is not None:
            self._tmpdir.cleanup()
            self._tmpdir = None
