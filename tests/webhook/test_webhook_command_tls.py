"""``gpusched webhook`` as a process on the simulated cluster, TLS self-signed (the default of
the shipped Deployment): it makes its Secret, patches ``caBundle``, and the API server's calls
to it over TLS succeed (a created pod is mutated); and deploy/webhook applied with kubectl."""

from __future__ import annotations

import asyncio
import re
import shutil
import signal
import sys
from pathlib import Path

import pytest

from gpusched.sim import SimCluster
from gpusched.webhook import WebhookCerts, WebhookConfig, webhook_manifests

KUBECTL = shutil.which("kubectl")
DEPLOY_WEBHOOK = Path(__file__).resolve().parents[2] / "deploy" / "webhook"
PODS = "/api/v1/namespaces/default/pods"
SECRET = "/api/v1/namespaces/gpusched-system/secrets/gpusched-webhook-tls"
MWC = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/gpusched-webhook"


async def test_the_command_keeps_its_own_certificate_and_is_called_over_tls() -> None:
    async with SimCluster(kubelets=False) as sim:
        await sim.kube.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpusched-system"}},
        )
        for doc in webhook_manifests(WebhookConfig()):
            if doc["kind"].endswith("WebhookConfiguration"):
                await sim.kube.create(
                    f"/apis/admissionregistration.k8s.io/v1/{doc['kind'].lower()}s", doc
                )
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gpusched", "-v", "webhook",
            "--host", "127.0.0.1", "--port", "0", "--kubeconfig", str(sim.kubeconfig_path),
            "--no-mig-fallback",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            assert process.stdout is not None
            line = (await asyncio.wait_for(process.stdout.readline(), timeout=30)).decode()
            assert "TLS self-signed" in line, line
            url = re.search(r"https://\S+", line)
            assert url is not None
            sim.map_service("gpusched-system", "gpusched-webhook", url.group(0))
            secret = await sim.kube.get(SECRET)
            (hook,) = (await sim.kube.get(MWC))["webhooks"]
            assert hook["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "p"},
                "spec": {
                    "schedulerName": "gpusched",
                    "containers": [
                        {
                            "name": "main",
                            "image": "cuda",
                            "resources": {
                                "limits": {"gpusched.io/gpu": "1", "gpusched.io/vram": "8Gi"}
                            },
                        }
                    ],
                },
            }
            created = await sim.kube.create(PODS, pod)
            assert created["spec"]["containers"][0]["env"]
            process.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(process.wait(), timeout=30) == 0
            assert process.stderr is not None
            logs = (await process.stderr.read()).decode()
            assert "created Secret gpusched-system/gpusched-webhook-tls" in logs, logs
            assert "patched caBundle into 1 webhook(s) of mutatingwebhookconfigurations" in logs
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
async def test_kubectl_apply_of_deploy_webhook_then_the_webhook_patches_ca_bundle() -> None:
    """As a user installs it: ``kubectl apply -k deploy/webhook``; the webhook fills
    ``caBundle``; applying the manifests again keeps it (it is not in what kubectl applied)."""
    async with SimCluster(kubelets=False) as sim:

        async def kubectl(*args: str) -> str:
            assert KUBECTL is not None
            proc = await asyncio.create_subprocess_exec(
                KUBECTL, "--kubeconfig", str(sim.kubeconfig_path), *args,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env={"HOME": str(sim.kubeconfig_path.parent), "PATH": "/usr/bin:/bin"},
            )  # fmt: skip
            out, err = await proc.communicate()
            assert proc.returncode == 0, f"kubectl {' '.join(args)}: {err.decode()}"
            return out.decode()

        await sim.kube.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpusched-system"}},
        )
        applied = await kubectl("apply", "-k", str(DEPLOY_WEBHOOK))
        assert "mutatingwebhookconfiguration.admissionregistration.k8s.io/gpusched-webhook" in (
            applied
        )
        certs = WebhookCerts(WebhookConfig(), kube=sim.kube)
        await certs.start()
        assert certs.problems == []
        assert certs.bundle is not None
        (hook,) = (await sim.kube.get(MWC))["webhooks"]
        assert hook["clientConfig"]["caBundle"] == certs.bundle.ca_bundle
        await kubectl("apply", "-k", str(DEPLOY_WEBHOOK))
        (hook,) = (await sim.kube.get(MWC))["webhooks"]
        assert hook["clientConfig"]["caBundle"] == certs.bundle.ca_bundle
        assert await certs.check() is False
