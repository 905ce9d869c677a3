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
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

from gpusched.webhook.certs import generate_bundle

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


def make_serving_certs(host: str = "127.0.0.1", directory: Path | None = None) -> ServingCerts:
    """A fresh CA and a server certificate valid for ``host``, loopback and localhost (made
    as the webhook makes its own: :func:`gpusched.webhook.certs.generate_bundle`)."""
    names = tuple(dict.fromkeys((host, "localhost", "127.0.0.1")))
    bundle = generate_bundle(names, dt.datetime.now(dt.UTC))
    out = directory or Path(tempfile.mkdtemp(prefix="gpusched-sim-tls-"))
    out.mkdir(parents=True, exist_ok=True)
    certs = ServingCerts(
        ca_pem=bundle.ca_pem, cert_pem=bundle.cert_pem, key_pem=bundle.key_pem, directory=out
    )
    certs.ca_file.write_bytes(certs.ca_pem)
    (out / "tls.crt").write_bytes(certs.cert_pem)
    key_file = out / "tls.key"
    key_file.write_bytes(certs.key_pem)
    key_file.chmod(0o600)
    return certs
