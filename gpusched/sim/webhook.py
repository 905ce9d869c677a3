"""gpusched's admission webhook, served in-process and registered in a ``SimCluster``.

``gpusched sim serve`` and ``gpusched sim run`` run it by default (``SimCluster(webhook=True)``),
so pods created in the simulation are validated by the scheduler's readers, get their device
environment, and a MIG pod falls back at admission as it would on a real cluster. It is
registered the way ``deploy/webhook.yaml`` registers it: the same
Mutating/ValidatingWebhookConfiguration (``gpusched.webhook.webhook_manifests``) created through
the API, pointing at the Service ``gpusched-system/gpusched-webhook``, which
``SimCluster.map_service`` routes to this process's port. The certificate is a fresh
self-signed one for ``gpusched-webhook.gpusched-system.svc`` (``gpusched.sim.tls``), its CA in
``caBundle``; the API server verifies it as kube-apiserver would.

Opt-in, never part of a plain ``SimCluster``: tests start many clusters, and each webhook costs
a certificate (a few ms), a listening port and two informers on the cluster.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import shutil
from typing import TYPE_CHECKING, Any

from gpusched.kube.client import Kube
from gpusched.kube.errors import APIConflict
from gpusched.sim.tls import ServingCerts, make_serving_certs
from gpusched.webhook import WebhookConfig, WebhookServer, webhook_manifests
from gpusched.webhook.mig_view import MigView

if TYPE_CHECKING:
    from gpusched.sim.cluster import SimCluster

__all__ = ["SimWebhook"]

_PATHS = {
    "MutatingWebhookConfiguration": (
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
    ),
    "ValidatingWebhookConfiguration": (
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
    ),
}


class SimWebhook:
    """``start()`` serves and registers the webhook on ``sim``; ``stop()`` stops serving.

    ``url`` is where it listens (``https://127.0.0.1:PORT``), ``view`` its MIG fallback view.
    """

    def __init__(
        self, sim: SimCluster, config: WebhookConfig | None = None, *, host: str = "127.0.0.1"
    ) -> None:
        self.sim = sim
        self.config = config or WebhookConfig()
        self.host = host
        self.view: MigView | None = None
        self.server: WebhookServer | None = None
        self.certs: ServingCerts | None = None
        self._view_task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        assert self.server is not None, "SimWebhook.start() first"
        return f"https://{self.host}:{self.server.port}"

    async def start(self) -> None:
        config = self.config
        self.certs = make_serving_certs(f"{config.service_name}.{config.namespace}.svc")
        self.view = MigView(Kube(self.sim.api_client()))
        self._view_task = asyncio.create_task(self.view.run(), name="sim-webhook-mig-view")
        self.server = WebhookServer(mig_fallback=self.view, config=config)
        await self.server.start(self.host, 0, ssl_context=self.certs.server_context())
        kube = self.sim.kube
        with contextlib.suppress(APIConflict):
            await kube.create(
                "/api/v1/namespaces",
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": config.namespace}},
            )
        ca = base64.b64encode(self.certs.ca_pem).decode()
        for doc in webhook_manifests(config):
            path = _PATHS.get(doc["kind"])
            if path is None:
                continue  # the Service and Deployment: this process plays them
            port = doc["webhooks"][0]["clientConfig"]["service"]["port"]
            self.sim.map_service(config.namespace, config.service_name, self.url, port)
            await kube.create(path, _with_ca_bundle(doc, ca))

    async def stop(self) -> None:
        if self._view_task is not None:
            self._view_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._view_task
            self._view_task = None
        if self.server is not None:
            await self.server.stop()
        if self.certs is not None:
            shutil.rmtree(self.certs.directory, ignore_errors=True)
            self.certs = None


def _with_ca_bundle(configuration: dict[str, Any], ca_bundle: str) -> dict[str, Any]:
    """The configuration with ``caBundle`` set, as cert-manager's CA injector would set it."""
    configuration["metadata"].pop("annotations", None)
    for hook in configuration["webhooks"]:
        hook["clientConfig"]["caBundle"] = ca_bundle
    return configuration
