"""The webhook's serving certificate: where it comes from, when it is renewed, how it is served.

API servers call webhooks over HTTPS only, verifying the certificate against ``caBundle`` in
the Mutating/ValidatingWebhookConfiguration for the name ``<service>.<namespace>.svc``. Three
modes (``gpusched webhook --tls``):

- ``self-signed`` (default; as controller-runtime's cert-controller and Kyverno do): the
  replicas share the Secret ``<service>-tls`` (``kubernetes.io/tls`` with ``ca.crt`` and
  ``ca.key``). At start and every ``check_period`` a replica reads it; when it is absent, not
  for the service's DNS names, unreadable, or expires within ``renew_before``, it makes a new
  serving certificate (signed by the stored CA while that is good, else by a new CA; the old CA
  stays in ``ca.crt`` until it expires, so replicas still serving the old certificate keep
  verifying) and writes it. Races between replicas are settled by the API server: a create
  answered AlreadyExists, or an update (with the ``resourceVersion`` read) answered Conflict,
  means another replica won, so this one re-reads and uses theirs. Then it patches ``caBundle``
  into every webhook of both configurations (by name) where it differs.
- ``cert-manager``: cert-manager issues the Secret (mounted as files) and its CA injector
  fills ``caBundle`` (annotation ``cert-manager.io/inject-ca-from``): this writes nothing.
- ``files``: a certificate and key from files (mounted, or made by hand).

In every mode the ``ssl.SSLContext`` handed to the server is reloaded in place when the
certificate changes, so new connections get the new one without a restart. Each step and each
problem is logged; a 403 names the RBAC rule that is missing. Permissions are asked with
SelfSubjectAccessReviews at start, and again at each check while one is denied. Cost per
check: one Secret GET and two configuration GETs (self-signed) or two file reads; a key pair
(EC P-256, about a millisecond) only on renewal.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import ipaddress
import logging
import os
import shutil
import ssl
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from gpusched.clock import Clock, RealClock
from gpusched.kube.client import Kube, resource_path
from gpusched.kube.errors import APIConflict, APIError, APIForbidden, APINotFound
from gpusched.webhook.config import WebhookConfig

__all__ = [
    "ADMISSION_GROUP",
    "CertBundle",
    "CertError",
    "CertSettings",
    "TLSMode",
    "WebhookCerts",
    "generate_bundle",
    "missing_rule",
    "service_dns_names",
]

log = logging.getLogger(__name__)

TLSMode = Literal["self-signed", "cert-manager", "files"]
ADMISSION_GROUP: Final = "admissionregistration.k8s.io"
CONFIGURATIONS: Final = ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")
_BACKDATE = dt.timedelta(minutes=5)  # tolerate clocks a little behind ours
_WRITE_ATTEMPTS = 5


class CertError(Exception):
    """No certificate can be served; the message says what to fix."""


@dataclass(frozen=True)
class CertSettings:
    """Lifetimes and periods of the self-signed mode (and the reload period of the others)."""

    validity: dt.timedelta = dt.timedelta(days=365)
    """Lifetime of a serving certificate. Default one year."""
    ca_validity: dt.timedelta = dt.timedelta(days=3650)
    """Lifetime of a CA. Default ten years."""
    renew_before: dt.timedelta = dt.timedelta(days=30)
    """A certificate (or CA) expiring within this is replaced. Default 30 days."""
    check_period: float = 60.0
    """Seconds between checks of the Secret (or files) and ``caBundle``. Default 60."""


def service_dns_names(service: str, namespace: str) -> tuple[str, ...]:
    """The names the API server may use for the webhook's Service, the first two required."""
    return (
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
        f"{service}.{namespace}",
        service,
    )


def missing_rule(
    verb: str, resource: str, name: str | None = None, *, group: str = "", namespace: str = ""
) -> str:
    """What to add to the webhook's RBAC when ``verb`` on ``resource`` is forbidden."""
    where = f"a Role in {namespace}" if namespace else "its ClusterRole"
    rule = f"apiGroups: [{group!r}], resources: [{resource}]"
    if name:
        rule += f", resourceNames: [{name}]"
    what = f"{resource} {name}" if name else resource
    return (
        f"the webhook's ServiceAccount may not {verb} {what}: add to {where} the rule "
        f"{{{rule}, verbs: [{verb}]}} (deploy/webhook/rbac.yaml has it)"
    )


# -- certificates -------------------------------------------------------------------------


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _pem_certs(data: bytes) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(data) if data.strip() else []


@dataclass(frozen=True)
class CertBundle:
    """PEM bytes: ``ca_pem`` may hold several CAs (the current one first); ``ca_key_pem`` is
    empty where the CA's key is not ours (cert-manager, files)."""

    cert_pem: bytes
    key_pem: bytes
    ca_pem: bytes = b""
    ca_key_pem: bytes = b""

    @property
    def cert(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)

    @property
    def ca_bundle(self) -> str:
        """``caBundle`` for the webhook configurations (base64 of ``ca_pem``)."""
        return base64.b64encode(self.ca_pem).decode()

    def problem(self, names: tuple[str, ...], now: dt.datetime, renew_before: dt.timedelta) -> str:
        """Why this bundle must be replaced, or ``""`` when it is good."""
        try:
            cert = self.cert
            cas = _pem_certs(self.ca_pem)
            ca_key = serialization.load_pem_private_key(self.ca_key_pem, None)
            key = serialization.load_pem_private_key(self.key_pem, None)
        except ValueError as exc:
            return f"it does not parse ({exc})"
        if not cas:
            return "it has no CA"
        if key.public_key() != cert.public_key() or ca_key.public_key() != cas[0].public_key():
            return "a key does not match its certificate"
        try:
            cert.verify_directly_issued_by(cas[0])
        except (ValueError, TypeError, InvalidSignature):
            return "the certificate is not signed by its CA"
        try:
            san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            dns = set(san.get_values_for_type(x509.DNSName))
        except x509.ExtensionNotFound:
            dns = set()
        if missing := [n for n in names[:2] if n not in dns]:
            return f"it is not for {', '.join(missing)}"
        for what, c in (("certificate", cert), ("CA", cas[0])):
            if c.not_valid_after_utc - renew_before <= now:
                return f"its {what} expires at {c.not_valid_after_utc:%Y-%m-%dT%H:%M:%SZ}"
            if c.not_valid_before_utc > now:
                return f"its {what} is not valid before {c.not_valid_before_utc:%Y-%m-%dT%H:%MZ}"
        return ""


def _san(name: str) -> x509.GeneralName:
    """An IP address SAN for an address, a DNS name SAN otherwise."""
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def _ca(
    now: dt.datetime, validity: dt.timedelta
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    usage = x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=True,
        crl_sign=True,
        encipher_only=False,
        decipher_only=False,
    )
    name = _name(f"gpusched-webhook-ca@{int(now.timestamp())}")
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(usage, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def generate_bundle(
    names: tuple[str, ...],
    now: dt.datetime,
    settings: CertSettings = CertSettings(),
    previous: CertBundle | None = None,
) -> CertBundle:
    """A serving certificate for ``names``, signed by ``previous``'s CA while that CA is good
    for ``renew_before`` past the new certificate's expiry, else by a new CA; ``ca_pem`` then
    keeps the previous CAs that are still valid, so their certificates keep verifying."""
    pem = serialization.Encoding.PEM
    ca_cert: x509.Certificate | None = None
    ca_key: Any = None
    older: list[x509.Certificate] = []
    if previous is not None:
        try:
            cas = _pem_certs(previous.ca_pem)
            key = serialization.load_pem_private_key(previous.ca_key_pem, None)
        except ValueError:
            cas, key = [], None
        if cas and isinstance(key, ec.EllipticCurvePrivateKey):
            if cas[0].not_valid_after_utc - settings.renew_before > now + settings.validity:
                ca_cert, ca_key = cas[0], key
            older = [c for c in cas if c.not_valid_after_utc > now]
    if ca_cert is None:
        ca_cert, ca_key = _ca(now, settings.ca_validity)
        chain = [ca_cert, *older]
    else:
        chain = [ca_cert, *(c for c in older if c != ca_cert)]
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(names[0]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(min(now + settings.validity, ca_cert.not_valid_after_utc))
        .add_extension(x509.SubjectAlternativeName([_san(n) for n in names]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    pkcs8 = serialization.PrivateFormat.PKCS8
    none = serialization.NoEncryption()
    return CertBundle(
        cert_pem=cert.public_bytes(pem),
        key_pem=key.private_bytes(pem, pkcs8, none),
        ca_pem=b"".join(c.public_bytes(pem) for c in chain),
        ca_key_pem=ca_key.private_bytes(pem, pkcs8, none),
    )


def _b64(data: Any, key: str) -> bytes:
    value = (data or {}).get(key) or ""
    try:
        return base64.b64decode(value)
    except ValueError:
        return b""


def _from_secret(secret: dict[str, Any]) -> CertBundle:
    data = secret.get("data")
    return CertBundle(
        cert_pem=_b64(data, "tls.crt"),
        key_pem=_b64(data, "tls.key"),
        ca_pem=_b64(data, "ca.crt"),
        ca_key_pem=_b64(data, "ca.key"),
    )


# -- the manager --------------------------------------------------------------------------


@dataclass
class WebhookCerts:
    """Keeps the webhook's certificate: ``await start()`` returns the ``ssl.SSLContext`` to
    serve with (or raises ``CertError``), ``run()`` checks every ``settings.check_period``
    seconds of ``clock`` (``check()`` once).

    ``kube`` is required in ``self-signed`` mode; ``cert_file``/``key_file`` in the others.
    Each problem is logged once when it appears and once when it is resolved.
    """

    config: WebhookConfig
    mode: TLSMode = "self-signed"
    kube: Kube | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    clock: Clock = field(default_factory=RealClock)
    settings: CertSettings = field(default_factory=CertSettings)
    work_dir: Path | None = None
    """Where the self-signed mode writes the files the ssl module loads (default a new
    temporary directory: put TMPDIR on an emptyDir under a read-only root filesystem)."""
    bundle: CertBundle | None = field(default=None, init=False)
    """What is served now."""
    _ctx: ssl.SSLContext | None = field(default=None, init=False)
    _denied: set[tuple[str, str]] = field(default_factory=set, init=False)
    _problems: dict[tuple[str, str], str] = field(default_factory=dict, init=False)
    _own_dir: bool = field(default=False, init=False)

    @property
    def secret_name(self) -> str:
        return f"{self.config.service_name}-tls"

    @property
    def names(self) -> tuple[str, ...]:
        return service_dns_names(self.config.service_name, self.config.namespace)

    @property
    def problems(self) -> list[str]:
        """The problems now standing (missing permissions, missing configurations)."""
        return list(self._problems.values())

    @property
    def ssl_context(self) -> ssl.SSLContext:
        assert self._ctx is not None, "WebhookCerts.start() first"
        return self._ctx

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> ssl.SSLContext:
        if self.mode == "self-signed":
            if self.kube is None:
                raise CertError(
                    "--tls self-signed needs the cluster (in-cluster or --kubeconfig) to keep "
                    "its Secret and caBundle; or give --cert/--key (--tls files)"
                )
            log.info(
                "TLS self-signed: Secret %s/%s, webhook configurations %s",
                self.config.namespace,
                self.secret_name,
                self.config.service_name,
            )
            await self._check_permissions()
        else:
            if self.cert_file is None or self.key_file is None:
                raise CertError(f"--tls {self.mode} needs --cert and --key (or --cert-dir)")
            if self.mode == "cert-manager":
                log.info(
                    "TLS cert-manager: serving %s; cert-manager renews it and its CA injector "
                    "fills caBundle (annotation cert-manager.io/inject-ca-from); nothing is "
                    "written",
                    self.cert_file,
                )
            else:
                log.info("TLS files: serving %s", self.cert_file)
        await self.check()
        return self.ssl_context

    def close(self) -> None:
        """Remove the temporary directory the self-signed mode made (it holds the key)."""
        if self._own_dir and self.work_dir is not None:
            shutil.rmtree(self.work_dir, ignore_errors=True)
            self.work_dir, self._own_dir = None, False

    async def run(self) -> None:
        """Check forever; problems are logged and retried next period."""
        while True:
            await self.clock.sleep(self.settings.check_period)
            try:
                await self.check()
            except (APIError, CertError, OSError) as exc:
                log.error("TLS check failed (retrying in %gs): %s", self.settings.check_period, exc)

    async def check(self) -> bool:
        """Bring the served certificate (and in self-signed mode the Secret and caBundle) up
        to date; True when the served certificate changed."""
        if self.mode == "self-signed":
            if self._denied:
                await self._check_permissions()
            bundle = await self._ensure_secret()
            # caBundle first: a certificate from a new CA is served only once the API server
            # trusts that CA (every replica checks, so none serves it before the patch).
            await self._ensure_ca_bundle(bundle)
            return self._serve(bundle)
        assert self.cert_file is not None
        assert self.key_file is not None
        try:
            bundle = CertBundle(self.cert_file.read_bytes(), self.key_file.read_bytes())
        except OSError as exc:
            raise CertError(
                f"cannot load --cert {self.cert_file} / --key {self.key_file}: {exc}; give a PEM "
                "certificate and its matching key"
            ) from None
        return self._serve(bundle)

    # -- serving ---------------------------------------------------------------------------

    def _serve(self, bundle: CertBundle) -> bool:
        if bundle == self.bundle:
            return False
        if self.mode == "self-signed":
            if self.work_dir is None:
                self.work_dir = Path(tempfile.mkdtemp(prefix="gpusched-webhook-tls-"))
                self._own_dir = True
            directory = self.work_dir
            cert_file, key_file = directory / "tls.crt", directory / "tls.key"
            cert_file.write_bytes(bundle.cert_pem)
            key_file.touch(mode=0o600)
            os.chmod(key_file, 0o600)
            key_file.write_bytes(bundle.key_pem)
        else:
            assert self.cert_file is not None
            assert self.key_file is not None
            cert_file, key_file = self.cert_file, self.key_file
        ctx = self._ctx
        if ctx is None:
            ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            # In place: the listening socket keeps this context; new handshakes get the new pair.
            ctx.load_cert_chain(str(cert_file), str(key_file))
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            raise CertError(
                f"cannot load the certificate {cert_file} with its key {key_file}: {exc}"
            ) from None
        first = self._ctx is None
        self._ctx, self.bundle = ctx, bundle
        try:
            cert = bundle.cert
            log.info(
                "TLS: %s certificate serial %x for %s, valid until %s",
                "serving" if first else "reloaded: serving",
                cert.serial_number,
                cert.subject.rfc4514_string(),
                cert.not_valid_after_utc.isoformat(),
            )
        except ValueError:
            pass
        return not first

    # -- self-signed: the Secret -----------------------------------------------------------

    def _secret_path(self, name: str | None = None) -> str:
        return resource_path("", "v1", "secrets", self.config.namespace, name)

    async def _read_secret(self) -> dict[str, Any] | None:
        assert self.kube is not None
        try:
            secret: dict[str, Any] = await self.kube.get(self._secret_path(self.secret_name))
        except APINotFound:
            return None
        except APIForbidden:
            raise CertError(self._forbidden("get", "secrets", self.secret_name)) from None
        return secret

    async def _ensure_secret(self) -> CertBundle:
        observed = await self._read_secret()
        for _ in range(_WRITE_ATTEMPTS):
            now = self.clock.now()
            if observed is None:
                log.info(
                    "TLS: Secret %s/%s is absent: creating it",
                    self.config.namespace,
                    self.secret_name,
                )
                previous = None
            else:
                previous = _from_secret(observed)
                why = previous.problem(self.names, now, self.settings.renew_before)
                if not why:
                    return previous
                log.info(
                    "TLS: renewing Secret %s/%s: %s", self.config.namespace, self.secret_name, why
                )
            fresh = generate_bundle(self.names, now, self.settings, previous)
            stored = await self.store(observed, fresh)
            if stored is not None:
                return stored
            observed = await self._read_secret()
        raise CertError(
            f"Secret {self.config.namespace}/{self.secret_name} changed under every one of "
            f"{_WRITE_ATTEMPTS} writes; is something else writing it?"
        )

    async def store(self, observed: dict[str, Any] | None, bundle: CertBundle) -> CertBundle | None:
        """Write ``bundle`` over ``observed`` (``None``: create). Returns what the Secret now
        holds: ``bundle``, or another replica's good one when it won the race; ``None`` when the
        race must be run again (theirs is not good either)."""
        assert self.kube is not None
        secret: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": {
                "name": self.secret_name,
                "namespace": self.config.namespace,
                "labels": {"app.kubernetes.io/name": self.config.service_name},
            },
            "data": {
                key: base64.b64encode(value).decode()
                for key, value in (
                    ("tls.crt", bundle.cert_pem),
                    ("tls.key", bundle.key_pem),
                    ("ca.crt", bundle.ca_pem),
                    ("ca.key", bundle.ca_key_pem),
                )
            },
        }
        try:
            if observed is None:
                await self.kube.create(self._secret_path(), secret)
            else:
                secret["metadata"]["resourceVersion"] = observed["metadata"]["resourceVersion"]
                # A Secret's type is immutable: a hand-made Opaque one stays Opaque.
                secret["type"] = observed.get("type") or "Opaque"
                await self.kube.replace(self._secret_path(self.secret_name), secret)
        except APIConflict as exc:
            log.info(
                "TLS: another replica wrote Secret %s/%s first (%s): using theirs",
                self.config.namespace,
                self.secret_name,
                exc.reason or "Conflict",
            )
            theirs = await self._read_secret()
            if theirs is None:
                return None
            bundle = _from_secret(theirs)
            if bundle.problem(self.names, self.clock.now(), self.settings.renew_before):
                return None
            return bundle
        except APIForbidden:
            verb = "create" if observed is None else "update"
            raise CertError(
                self._forbidden(verb, "secrets", None if verb == "create" else self.secret_name)
            ) from None
        except APIError as exc:  # e.g. 422 for an immutable Secret made by hand
            raise CertError(
                f"cannot write Secret {self.config.namespace}/{self.secret_name} ({exc}); delete "
                "it and the webhook makes a new one"
            ) from None
        log.info(
            "TLS: %s Secret %s/%s (certificate valid until %s)",
            "created" if observed is None else "updated",
            self.config.namespace,
            self.secret_name,
            bundle.cert.not_valid_after_utc.isoformat(),
        )
        return bundle

    # -- self-signed: caBundle -------------------------------------------------------------

    async def _ensure_ca_bundle(self, bundle: CertBundle) -> None:
        assert self.kube is not None
        name = self.config.service_name
        for resource in CONFIGURATIONS:
            path = resource_path(ADMISSION_GROUP, "v1", resource, None, name)
            if ("patch", resource) in self._denied:
                continue
            try:
                current = await self.kube.get(path)
            except APINotFound:
                self._problem(
                    ("exists", resource),
                    f"{resource} {name} not found: apply the webhook's manifests "
                    "(kubectl apply -k deploy/); caBundle is patched once it exists",
                )
                continue
            except APIForbidden:
                key = ("get", resource)
                self._problem(key, self._forbidden("get", resource, name, group=ADMISSION_GROUP))
                continue
            hooks = current.get("webhooks") or []
            ops: list[dict[str, Any]] = []
            for i, hook in enumerate(hooks):
                if (hook.get("clientConfig") or {}).get("caBundle") != bundle.ca_bundle:
                    # The test pins the entry: a reordered list fails the patch (422), not
                    # another webhook's caBundle; the next check re-reads.
                    ops.append({"op": "test", "path": f"/webhooks/{i}/name", "value": hook["name"]})
                    ops.append(
                        {
                            "op": "add",
                            "path": f"/webhooks/{i}/clientConfig/caBundle",
                            "value": bundle.ca_bundle,
                        }
                    )
            self._resolve(("exists", resource))
            if not ops:
                continue
            try:
                await self.kube.patch(path, ops, "application/json-patch+json")
            except APIForbidden:
                key = ("patch", resource)
                self._problem(key, self._forbidden("patch", resource, name, group=ADMISSION_GROUP))
                continue
            except APIError as exc:
                log.warning(
                    "TLS: patching caBundle of %s %s failed (retrying): %s", resource, name, exc
                )
                continue
            log.info(
                "TLS: patched caBundle into %d webhook(s) of %s %s", len(ops) // 2, resource, name
            )

    # -- problems ------------------------------------------------------------------------

    def _forbidden(self, verb: str, resource: str, name: str | None, *, group: str = "") -> str:
        namespace = self.config.namespace if resource == "secrets" else ""
        return missing_rule(verb, resource, name, group=group, namespace=namespace)

    def _problem(self, key: tuple[str, str], message: str) -> None:
        if self._problems.get(key) != message:
            self._problems[key] = message
            log.error("TLS: %s", message)

    def _resolve(self, key: tuple[str, str]) -> None:
        message = self._problems.pop(key, None)
        if message is not None:
            log.info("TLS: resolved: %s", message)

    async def _check_permissions(self) -> None:
        """One SelfSubjectAccessReview per verb the self-signed mode uses, so that a missing
        rule is reported at start rather than as a 403 later (a server without the reviews:
        skipped). A denied patch of a configuration is not tried until a later check allows
        it; the Secret's verbs are tried anyway (the 403 then stops the start)."""
        assert self.kube is not None
        ns, secret, name = self.config.namespace, self.secret_name, self.config.service_name
        asks = [
            ("get", "", "secrets", ns, secret),
            ("create", "", "secrets", ns, None),
            ("update", "", "secrets", ns, secret),
            *(
                (verb, ADMISSION_GROUP, resource, "", name)
                for resource in CONFIGURATIONS
                for verb in ("get", "patch")
            ),
        ]
        path = resource_path("authorization.k8s.io", "v1", "selfsubjectaccessreviews")
        kube = self.kube

        async def ask(
            verb: str, group: str, resource: str, namespace: str, obj: str | None
        ) -> bool:
            attrs = {"verb": verb, "group": group, "resource": resource}
            if namespace:
                attrs["namespace"] = namespace
            if obj:
                attrs["name"] = obj
            body = {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": attrs},
            }
            answer = await kube.create(path, body)
            return bool((answer.get("status") or {}).get("allowed"))

        try:
            answers = await asyncio.gather(*(ask(*a) for a in asks))
        except APIError as exc:
            log.info("TLS: permissions not checked in advance (%s)", exc)
            return
        for (verb, group, resource, namespace, obj), allowed in zip(asks, answers, strict=True):
            key = (verb, resource)
            if allowed:
                self._denied.discard(key)
                self._resolve(key)
            else:
                self._denied.add(key)
                self._problem(
                    key, missing_rule(verb, resource, obj, group=group, namespace=namespace)
                )
