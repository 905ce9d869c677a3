"""The webhook's TLS on the simulated cluster (gpusched.webhook.certs).

The configurations are applied as ``deploy/webhook/`` ships them (no ``caBundle``); the
webhook makes its Secret and patches ``caBundle``; the simulated API server then calls it over
HTTPS, verifying the certificate against that CA for ``gpusched-webhook.gpusched-system.svc``
as kube-apiserver does. Certificates are dated by a fake clock set in the past, so the ones a
test renews are valid in real time, which TLS checks.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import logging
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from gpusched.clock import FakeClock
from gpusched.kube.client import Kube
from gpusched.kube.errors import APINotFound
from gpusched.sim import SimCluster
from gpusched.webhook import WebhookConfig, WebhookServer, webhook_manifests
from gpusched.webhook.certs import (
    CertBundle,
    CertError,
    CertSettings,
    WebhookCerts,
    generate_bundle,
    missing_rule,
    service_dns_names,
)

CONFIG = WebhookConfig()
NS = CONFIG.namespace
SECRET = f"/api/v1/namespaces/{NS}/secrets/gpusched-webhook-tls"
MWC = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/gpusched-webhook"
VWC = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/gpusched-webhook"
PODS = "/api/v1/namespaces/default/pods"
DAY = dt.timedelta(days=1)
# Short lifetimes so that a test can cross a renewal window; all in the real past and future.
SHORT = CertSettings(
    validity=30 * DAY, ca_validity=3650 * DAY, renew_before=10 * DAY, check_period=60
)
NAMES = service_dns_names(CONFIG.service_name, NS)


def past_clock(days: int = 25) -> FakeClock:
    return FakeClock(dt.datetime.now(dt.UTC) - days * DAY)


def gpu_pod(name: str) -> dict[str, Any]:
    limits = {"gpusched.io/gpu": "1", "gpusched.io/vram": "20Gi"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": "gpusched",
            "containers": [{"name": "main", "image": "cuda", "resources": {"limits": limits}}],
        },
    }


async def install(kube: Kube, config: WebhookConfig = CONFIG) -> None:
    """The namespace and the two configurations, as ``kubectl apply -k deploy/`` makes them."""
    await kube.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": config.namespace}},
    )
    for doc in webhook_manifests(config):
        if doc["kind"].endswith("WebhookConfiguration"):
            plural = doc["kind"].lower() + "s"
            await kube.create(f"/apis/admissionregistration.k8s.io/v1/{plural}", doc)


@asynccontextmanager
async def serving(sim: SimCluster, certs: WebhookCerts) -> AsyncIterator[WebhookServer]:
    """One webhook replica: its certificate from ``certs``, its Service mapped to it."""
    server = WebhookServer(config=certs.config)
    await server.start("127.0.0.1", 0, ssl_context=await certs.start())
    sim.map_service(NS, CONFIG.service_name, f"https://127.0.0.1:{server.port}")
    try:
        yield server
    finally:
        await server.stop()
        certs.close()


def ca_bundles(configuration: dict[str, Any]) -> list[str]:
    return [h["clientConfig"].get("caBundle", "") for h in configuration["webhooks"]]


async def served_serial(port: int, ca_pem: bytes) -> int:
    """The serial of the certificate a new TLS connection is given, verified as the API
    server verifies it (``ca_pem``, the service's DNS name)."""
    ctx = ssl.create_default_context(cadata=ca_pem.decode())
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname=NAMES[0])
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    finally:
        writer.close()
        await writer.wait_closed()
    return x509.load_der_x509_certificate(der).serial_number


def secret_bundle(secret: dict[str, Any]) -> CertBundle:
    data = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    return CertBundle(data["tls.crt"], data["tls.key"], data["ca.crt"], data["ca.key"])


async def test_a_fresh_cluster_gets_a_secret_a_ca_bundle_and_mutated_pods(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "gpusched.webhook.certs")
    async with SimCluster(kubelets=False) as sim:
        await install(sim.kube)
        certs = WebhookCerts(CONFIG, kube=sim.kube)
        async with serving(sim, certs) as server:
            secret = await sim.kube.get(SECRET)
            assert secret["type"] == "kubernetes.io/tls"
            stored = secret_bundle(secret)
            assert stored == certs.bundle
            assert stored.problem(NAMES, dt.datetime.now(dt.UTC), dt.timedelta(days=30)) == ""
            for path in (MWC, VWC):
                assert ca_bundles(await sim.kube.get(path)) == [stored.ca_bundle]
            assert await served_serial(server.port, stored.ca_pem) == stored.cert.serial_number
            # End to end: the API server calls the webhook over TLS with that CA.
            pod = await sim.kube.create(PODS, gpu_pod("p"))
            env = {e["name"] for e in pod["spec"]["containers"][0]["env"]}
            assert {"NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"} <= env
            # A second check changes nothing and patches nothing.
            version = (await sim.kube.get(MWC))["metadata"]["resourceVersion"]
            assert await certs.check() is False
            assert (await sim.kube.get(MWC))["metadata"]["resourceVersion"] == version
            directory = certs.work_dir
            assert directory is not None
            assert (directory / "tls.key").stat().st_mode & 0o077 == 0  # the key is private
    assert not directory.exists()  # close() removed it
    assert certs.problems == []
    text = caplog.text
    for step in ("is absent: creating it", "created Secret", "patched caBundle", "serving"):
        assert step in text, text


async def test_two_replicas_starting_at_once_agree_on_one_secret() -> None:
    async with SimCluster(kubelets=False) as sim:
        await install(sim.kube)
        replicas = [WebhookCerts(CONFIG, kube=sim.kube) for _ in range(3)]
        await asyncio.gather(*(r.start() for r in replicas))
        stored = secret_bundle(await sim.kube.get(SECRET))
        assert all(r.bundle == stored for r in replicas)
        assert ca_bundles(await sim.kube.get(MWC)) == [stored.ca_bundle]


@pytest.mark.parametrize("stale", ["absent", "expiring"])
async def test_a_replica_that_loses_the_write_uses_the_winners_secret(
    stale: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The race made certain: ``loser`` read the Secret (absent, or expiring at a
    resourceVersion) before ``winner`` wrote it; its create is answered AlreadyExists, its
    update Conflict, and it takes the winner's."""
    caplog.set_level(logging.INFO, "gpusched.webhook.certs")
    clock = past_clock()
    async with SimCluster(kubelets=False) as sim:
        await install(sim.kube)
        observed: dict[str, Any] | None = None
        if stale == "expiring":
            first = WebhookCerts(CONFIG, kube=sim.kube, clock=clock, settings=SHORT)
            await first.start()
            observed = await sim.kube.get(SECRET)
            await clock.advance((21 * DAY).total_seconds())
        winner = WebhookCerts(CONFIG, kube=sim.kube, clock=clock, settings=SHORT)
        await winner.start()
        loser = WebhookCerts(CONFIG, kube=sim.kube, clock=clock, settings=SHORT)
        mine = generate_bundle(NAMES, clock.now(), SHORT)
        assert await loser.store(observed, mine) == winner.bundle
        assert secret_bundle(await sim.kube.get(SECRET)) == winner.bundle
    assert "another replica wrote Secret gpusched-system/gpusched-webhook-tls first" in caplog.text


async def test_an_expiring_certificate_is_renewed_and_the_new_one_served(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "gpusched.webhook.certs")
    clock = past_clock()
    async with SimCluster(kubelets=False) as sim:
        await install(sim.kube)
        certs = WebhookCerts(CONFIG, kube=sim.kube, clock=clock, settings=SHORT)
        other = WebhookCerts(CONFIG, kube=sim.kube, clock=clock, settings=SHORT)
        async with serving(sim, certs) as server:
            await other.start()
            old = certs.bundle
            assert old is not None
            await clock.advance((15 * DAY).total_seconds())
            assert await certs.check() is False  # 15 days left: outside the 10-day window
            await clock.advance((6 * DAY).total_seconds())
            assert await certs.check() is True  # 9 days left: renewed
            new = secret_bundle(await sim.kube.get(SECRET))
            assert new == certs.bundle
            assert new.cert.serial_number != old.cert.serial_number
            assert new.ca_pem == old.ca_pem  # same CA (years left): caBundle unchanged
            assert await served_serial(server.port, new.ca_pem) == new.cert.serial_number
            assert (await sim.kube.create(PODS, gpu_pod("after")))["spec"]["containers"][0]["env"]
            # The other replica picks the renewed Secret up on its next check.
            assert await other.check() is True
            assert other.bundle == new
    assert "renewing Secret gpusched-system/gpusched-webhook-tls: its certificate expires" in (
        caplog.text
    )


async def test_a_ca_near_its_end_is_replaced_and_the_old_one_kept_in_the_bundle() -> None:
    clock = past_clock()
    settings = CertSettings(validity=5 * DAY, ca_validity=30 * DAY, renew_before=2 * DAY)
    async with SimCluster(kubelets=False) as sim:
        await install(sim.kube)
        certs = WebhookCerts(CONFIG, kube=sim.kube, clock=clock, settings=settings)
        await certs.start()
        first_ca = x509.load_pem_x509_certificates(secret_bundle(await sim.kube.get(SECRET)).ca_pem)
        await clock.advance((24 * DAY).total_seconds())
        assert await certs.check() is True
        bundle = secret_bundle(await sim.kube.get(SECRET))
        cas = x509.load_pem_x509_certificates(bundle.ca_pem)
        assert len(cas) == 2
        assert cas[1] == first_ca[0]  # the old CA still verifies replicas not yet reloaded
        bundle.cert.verify_directly_issued_by(cas[0])
        assert ca_bundles(await sim.kube.get(VWC)) == [bundle.ca_bundle]


@pytest.mark.parametrize(
    ("secret_data", "reason"),
    [
        ({"tls.crt": "bm90IGEgY2VydA=="}, "does not parse"),
        ("other-names", "it is not for gpusched-webhook.gpusched-system.svc"),
    ],
)
async def test_a_secret_that_is_not_good_is_replaced(secret_data: Any, reason: str) -> None:
    async with SimCluster(kubelets=False) as sim:
        await install(sim.kube)
        if secret_data == "other-names":
            bad = generate_bundle(("x.y.svc", "x.y.svc.cluster.local"), dt.datetime.now(dt.UTC))
            secret_data = {
                "tls.crt": base64.b64encode(bad.cert_pem).decode(),
                "tls.key": base64.b64encode(bad.key_pem).decode(),
                "ca.crt": base64.b64encode(bad.ca_pem).decode(),
                "ca.key": base64.b64encode(bad.ca_key_pem).decode(),
            }
            assert reason in bad.problem(NAMES, dt.datetime.now(dt.UTC), DAY)
        await sim.kube.create(
            f"/api/v1/namespaces/{NS}/secrets",
            {"metadata": {"name": "gpusched-webhook-tls"}, "type": "Opaque", "data": secret_data},
        )
        certs = WebhookCerts(CONFIG, kube=sim.kube)
        await certs.start()
        secret = await sim.kube.get(SECRET)
        assert secret["type"] == "Opaque"  # immutable: kept
        stored = secret_bundle(secret)
        assert stored == certs.bundle
        assert stored.problem(NAMES, dt.datetime.now(dt.UTC), DAY) == ""


async def test_cert_manager_mode_writes_nothing_and_reloads_the_mounted_files(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "gpusched.webhook.certs")
    issued = generate_bundle(NAMES, dt.datetime.now(dt.UTC))
    (tmp_path / "tls.crt").write_bytes(issued.cert_pem)
    (tmp_path / "tls.key").write_bytes(issued.key_pem)
    async with SimCluster(kubelets=False) as sim:
        await install(sim.kube)
        before = [await sim.kube.get(p) for p in (MWC, VWC)]
        certs = WebhookCerts(
            CONFIG,
            mode="cert-manager",
            kube=sim.kube,
            cert_file=tmp_path / "tls.crt",
            key_file=tmp_path / "tls.key",
        )
        server = WebhookServer(config=CONFIG)
        await server.start("127.0.0.1", 0, ssl_context=await certs.start())
        try:
            assert await served_serial(server.port, issued.ca_pem) == issued.cert.serial_number
            # cert-manager renews: the kubelet swaps the mounted files; the next check reloads.
            renewed = generate_bundle(NAMES, dt.datetime.now(dt.UTC), previous=issued)
            (tmp_path / "tls.crt").write_bytes(renewed.cert_pem)
            (tmp_path / "tls.key").write_bytes(renewed.key_pem)
            assert await certs.check() is True
            assert await served_serial(server.port, issued.ca_pem) == renewed.cert.serial_number
        finally:
            await server.stop()
        with pytest.raises(APINotFound):
            await sim.kube.get(SECRET)
        assert [await sim.kube.get(p) for p in (MWC, VWC)] == before
    assert "CA injector" in caplog.text


@pytest.mark.parametrize(
    ("denied", "expected"),
    [
        (
            ("patch", "admissionregistration.k8s.io", "mutatingwebhookconfigurations"),
            "may not patch mutatingwebhookconfigurations gpusched-webhook: add to its "
            "ClusterRole the rule {apiGroups: ['admissionregistration.k8s.io'], resources: "
            "[mutatingwebhookconfigurations], resourceNames: [gpusched-webhook], verbs: [patch]}",
        ),
        (
            ("update", "", "secrets"),
            "may not update secrets gpusched-webhook-tls: add to a Role in gpusched-system the "
            "rule {apiGroups: [''], resources: [secrets], resourceNames: "
            "[gpusched-webhook-tls], verbs: [update]}",
        ),
    ],
)
async def test_a_missing_permission_is_a_message_naming_the_rule(
    denied: tuple[str, str, str], expected: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with SimCluster(kubelets=False) as sim:
        await install(sim.kube)
        sim.server.access_reviews.denied.add(denied)
        certs = WebhookCerts(CONFIG, kube=sim.kube)
        await certs.start()
        assert certs.problems == [
            "the webhook's ServiceAccount " + expected + " (deploy/webhook/rbac.yaml has it)"
        ]
        assert expected in caplog.text
        if denied[2] == "mutatingwebhookconfigurations":
            # Not tried while denied; the validating one is patched.
            assert ca_bundles(await sim.kube.get(MWC)) == [""]
            assert ca_bundles(await sim.kube.get(VWC)) == [certs.bundle.ca_bundle]  # type: ignore[union-attr]
        # Granted later: the next check resolves it and patches.
        sim.server.access_reviews.denied.clear()
        await certs.check()
        assert certs.problems == []
        assert ca_bundles(await sim.kube.get(MWC)) == [certs.bundle.ca_bundle]  # type: ignore[union-attr]


async def test_missing_configurations_are_a_problem_until_applied() -> None:
    async with SimCluster(kubelets=False) as sim:
        await sim.kube.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
        )
        certs = WebhookCerts(CONFIG, kube=sim.kube)
        await certs.start()
        assert len(certs.problems) == 2
        assert "not found: apply the webhook's manifests" in certs.problems[0]
        for doc in webhook_manifests(CONFIG):
            if doc["kind"].endswith("WebhookConfiguration"):
                await sim.kube.create(
                    f"/apis/admissionregistration.k8s.io/v1/{doc['kind'].lower()}s", doc
                )
        await certs.check()
        assert certs.problems == []


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"mode": "self-signed"}, "needs the cluster"),
        ({"mode": "files"}, "needs --cert and --key"),
        (
            {"mode": "files", "cert_file": Path("/nonexistent.crt"), "key_file": Path("/x")},
            "cannot load",
        ),
    ],
)
async def test_start_errors_say_what_to_fix(kwargs: dict[str, Any], expected: str) -> None:
    with pytest.raises(CertError, match=expected):
        await WebhookCerts(CONFIG, **kwargs).start()


def test_missing_rule_without_a_name() -> None:
    assert missing_rule("create", "secrets", namespace="ns") == (
        "the webhook's ServiceAccount may not create secrets: add to a Role in ns the rule "
        "{apiGroups: [''], resources: [secrets], verbs: [create]} (deploy/webhook/rbac.yaml has it)"
    )


async def test_run_checks_every_period_of_its_clock() -> None:
    clock = past_clock()
    async with SimCluster(kubelets=False) as sim:
        await install(sim.kube)
        certs = WebhookCerts(CONFIG, kube=sim.kube, clock=clock, settings=SHORT)
        await certs.start()
        old = certs.bundle
        await clock.advance((21 * DAY).total_seconds())  # in the renewal window, not checked yet
        assert certs.bundle == old
        task = asyncio.create_task(certs.run())
        try:
            await clock.wait_for_sleepers()
            await clock.advance(SHORT.check_period)
            async with asyncio.timeout(30):
                await clock.wait_for_sleepers()  # the check is done: it sleeps again
            assert certs.bundle != old
            assert secret_bundle(await sim.kube.get(SECRET)) == certs.bundle
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
