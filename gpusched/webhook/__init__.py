"""gpusched's admission webhook (``gpusched webhook``).

``server`` answers AdmissionReview v1 over HTTPS; ``mutate`` adds the device environment and
holds the MIG fallback seam, which ``mig_view`` fills from informers on nodes and pods;
``validate`` checks gpusched's fields with a pluggable function (the scheduler's readers);
``config`` has the settings (failurePolicy) and the manifests (``deploy/webhook/``); ``certs``
keeps the serving certificate (self-signed Secret and ``caBundle``, cert-manager, or files).
"""

from __future__ import annotations

from gpusched.webhook.certs import CertError, TLSMode, WebhookCerts
from gpusched.webhook.config import (
    FailurePolicy,
    WebhookConfig,
    webhook_manifest_files,
    webhook_manifests,
)
from gpusched.webhook.mig_view import MigView
from gpusched.webhook.mutate import (
    MigFallback,
    Mutation,
    PatchOp,
    fallback_ops,
    gpu_kind,
    mutate_pod,
)
from gpusched.webhook.server import WebhookServer, server_ssl_context
from gpusched.webhook.validate import Validator, default_validator

__all__ = [
    "CertError",
    "FailurePolicy",
    "MigFallback",
    "MigView",
    "Mutation",
    "PatchOp",
    "TLSMode",
    "Validator",
    "WebhookCerts",
    "WebhookConfig",
    "WebhookServer",
    "default_validator",
    "fallback_ops",
    "gpu_kind",
    "mutate_pod",
    "server_ssl_context",
    "webhook_manifest_files",
    "webhook_manifests",
]
