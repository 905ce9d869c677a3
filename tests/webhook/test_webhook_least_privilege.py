"""The webhook keeps its TLS with exactly the RBAC that deploy/webhook/rbac.yaml grants.

The simulated cluster enforces RBAC for service-account tokens (gpusched.sim.rbac). The
webhook's ServiceAccount, roles and bindings are created from ``webhook_manifests()`` (what
deploy/webhook/ ships, checked equal by tests/test_webhook_config.py), then the webhook runs on
a token of that ServiceAccount: it creates its Secret, patches both ``caBundle`` fields, renews
(an update), and reads what its MIG fallback watches. With a binding removed, the API server's
refusal becomes a message naming the missing rule.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from gpusched.clock import FakeClock
from gpusched.kube.client import Kube, resource_path
from gpusched.sim import SimCluster
from gpusched.webhook import WebhookConfig, webhook_manifests
from gpusched.webhook.certs import CertError, CertSettings, WebhookCerts

pytestmark = pytest.mark.simonly

CONFIG = WebhookConfig()
NS = CONFIG.namespace
DAY = dt.timedelta(days=1)
SECRET = f"/api/v1/namespaces/{NS}/secrets/gpusched-webhook-tls"
MWC = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/gpusched-webhook"
VWC = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/gpusched-webhook"
PLURALS = {
    "ServiceAccount": ("", "serviceaccounts"),
    "ClusterRole": ("rbac.authorization.k8s.io", "clusterroles"),
    "ClusterRoleBinding": ("rbac.authorization.k8s.io", "clusterrolebindings"),
    "Role": ("rbac.authorization.k8s.io", "roles"),
    "RoleBinding": ("rbac.authorization.k8s.io", "rolebindings"),
    "MutatingWebhookConfiguration": (
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
    ),
    "ValidatingWebhookConfiguration": (
        "admissionregistration.k8s.io",
        "validatingwebhookconfigurations",
    ),
}


def path_of(doc: dict[str, Any]) -> str:
    group, plural = PLURALS[doc["kind"]]
    return resource_path(group, "v1", plural, doc["metadata"].get("namespace"))


@asynccontextmanager
async def webhook_account(
    sim: SimCluster, without: tuple[str, str] | None = None
) -> AsyncIterator[Kube]:
    """The shipped RBAC and configurations (less the binding ``without``: (kind, name)), and a
    client with a token of the webhook's ServiceAccount."""
    await sim.kube.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
    )
    for doc in webhook_manifests(CONFIG):
        if doc["kind"] in PLURALS and (doc["kind"], doc["metadata"]["name"]) != without:
            await sim.kube.create(path_of(doc), doc)
    kube = Kube(sim.api_client(token=sim.service_account_token(NS, CONFIG.service_name)))
    try:
        yield kube
    finally:
        await kube.close()


async def test_the_shipped_rbac_is_enough_to_create_patch_and_renew() -> None:
    clock = FakeClock(dt.datetime.now(dt.UTC) - 25 * DAY)
    settings = CertSettings(validity=30 * DAY, renew_before=10 * DAY)
    async with SimCluster(kubelets=False) as sim, webhook_account(sim) as kube:
        certs = WebhookCerts(CONFIG, kube=kube, clock=clock, settings=settings)
        await certs.start()
        assert certs.problems == []
        assert certs.bundle is not None
        first = certs.bundle
        for path in (MWC, VWC):
            (hook,) = (await sim.kube.get(path))["webhooks"]
            assert hook["clientConfig"]["caBundle"] == first.ca_bundle
        await clock.advance((21 * DAY).total_seconds())
        assert await certs.check() is True  # renewed: an update of its own Secret
        assert certs.bundle != first
        assert certs.problems == []
        # What the MIG fallback's informers read.
        for path in ("/api/v1/nodes", "/api/v1/pods"):
            assert (await kube.get(path))["kind"].endswith("List")


@pytest.mark.parametrize(
    ("without", "expected"),
    [
        (
            ("ClusterRoleBinding", "gpusched-webhook-cabundle"),
            "may not patch mutatingwebhookconfigurations gpusched-webhook: add to its "
            "ClusterRole the rule {apiGroups: ['admissionregistration.k8s.io'], resources: "
            "[mutatingwebhookconfigurations], resourceNames: [gpusched-webhook], verbs: [patch]}",
        ),
        (
            ("RoleBinding", "gpusched-webhook-tls"),
            "may not get secrets gpusched-webhook-tls: add to a Role in gpusched-system the "
            "rule {apiGroups: [''], resources: [secrets], resourceNames: "
            "[gpusched-webhook-tls], verbs: [get]}",
        ),
    ],
)
async def test_a_missing_binding_is_a_message_naming_the_rule(
    without: tuple[str, str], expected: str
) -> None:
    async with SimCluster(kubelets=False) as sim, webhook_account(sim, without) as kube:
        certs = WebhookCerts(CONFIG, kube=kube)
        if without[0] == "RoleBinding":
            with pytest.raises(CertError, match="may not get secrets") as raised:
                await certs.start()
            assert expected in str(raised.value)
            assert any(expected in p for p in certs.problems)
            return
        await certs.start()  # the Secret is written; caBundle is not
        assert any(expected in p for p in certs.problems), certs.problems
        (hook,) = (await sim.kube.get(MWC))["webhooks"]
        assert "caBundle" not in hook["clientConfig"]
        # The binding applied later: the next check patches.
        doc = next(
            d for d in webhook_manifests(CONFIG) if (d["kind"], d["metadata"]["name"]) == without
        )
        await sim.kube.create(path_of(doc), doc)
        await certs.check()
        assert certs.problems == []
        (hook,) = (await sim.kube.get(MWC))["webhooks"]
        assert certs.bundle is not None
        assert hook["clientConfig"]["caBundle"] == certs.bundle.ca_bundle
