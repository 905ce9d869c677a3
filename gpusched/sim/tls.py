"""Serving certificates for the simulated API server.

kubectl (client-go) does not send a bearer token over plain HTTP, and real API servers only
speak HTTPS, so the simulation serves HTTPS too: a throwaway CA and a server certificate for
``127.0.0.1``/``localhost`` (and the host it binds), made with ``cryptography`` at start. The CA
goes into the written kubeconfig as ``certificate-authority-data``, so clients verify the
server exactly as they would a real one.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["ServingCerts", "make_serving_certs"]


@dataclass(frozen=True)
class ServingCerts:
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes
    directory: Path
    """Holds ca.crt, tls.crt and tls.key (the ssl module loads certificates from files)."""

    @property
    def ca_file(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def ca_data(self) -> str:
        """``certificate-authority-data`` for a kubeconfig."""
        return base64.b64encode(self.ca_pem).decode()

    def server_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(self.directory / "tls.crt", self.directory / "tls.key")
        return ctx


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def make_serving_certs(host: str = "127.0.0.1", directory: Path | None = None) -> ServingCerts:
    """A fresh CA and a server certificate valid for ``host``, loopback and localhost."""
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("gpusched-sim-ca"))
        .issuer_name(_name("gpusched-sim-ca"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    alt_names: list[x509.GeneralName] = [
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
    ]
    try:
        ip = ipaddress.ip_address(host)
        if str(ip) != "127.0.0.1":
            alt_names.append(x509.IPAddress(ip))
    except ValueError:
        alt_names.append(x509.DNSName(host))
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("kube-apiserver"))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    out = directory or Path(tempfile.mkdtemp(prefix="gpusched-sim-tls-"))
    out.mkdir(parents=True, exist_ok=True)
    pem = serialization.Encoding.PEM
    certs = ServingCerts(
        ca_pem=ca_cert.public_bytes(pem),
        cert_pem=cert.public_bytes(pem),
        key_pem=key.private_bytes(
            pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
        directory=out,
    )
    certs.ca_file.write_bytes(certs.ca_pem)
    (out / "tls.crt").write_bytes(certs.cert_pem)
    key_file = out / "tls.key"
    key_file.write_bytes(certs.key_pem)
    key_file.chmod(0o600)
    return certs
