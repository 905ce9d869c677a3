"""The webhook's settings and the manifests that register it.

``failurePolicy`` is the one decision an operator must make, so it is a setting with a
documented default rather than a constant in a YAML file:

- ``Ignore`` (fail-open, the default): when the webhook is down or times out, the API server
  admits pods unchanged. Scheduling still works (the scheduler validates every request
  itself and reports a bad one as a ``FailedScheduling`` Event), but those pods miss their
  device environment and any admission-time MIG fallback. Chosen as the default because the
  webhook must match all pods (an ``objectSelector`` sees labels, not ``schedulerName``), and a
  fail-closed webhook that is down stops every pod creation in the matched namespaces.
- ``Fail`` (fail-closed): no pod is created without passing the webhook. Choose it where
  shared-GPU pods rely on ``NVIDIA_VISIBLE_DEVICES`` from the webhook: CUDA images set
  ``NVIDIA_VISIBLE_DEVICES=all``, so an unchanged shared pod would see every GPU of its node.

The server honours the same setting for its own errors (a validator or fallback hook that
raises): allowed with a warning under ``Ignore``, denied under ``Fail``, as the API server
would treat the webhook failing. The namespaces of the control plane and of gpusched itself
are excluded, so a fail-closed webhook can never block the pods that would bring it back.
"""

from __future__ import annotations

from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

__all__ = ["FailurePolicy", "WebhookConfig", "webhook_manifests"]

FailurePolicy = Literal["Fail", "Ignore"]


class WebhookConfig(BaseModel):
    """``gpusched webhook`` settings (camelCase in YAML, snake_case in Python)."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True
    )

    failure_policy: FailurePolicy = "Ignore"
    """What happens when the webhook cannot answer; see the module docstring. Default Ignore."""
    scheduler_names: tuple[str, ...] = ("gpusched",)
    """Pods with one of these ``spec.schedulerName`` are checked and changed; others never."""
    visible_devices_for_device_plugin_pods: bool = False
    """Also set ``NVIDIA_VISIBLE_DEVICES``/``CUDA_VISIBLE_DEVICES`` for ``nvidia.com/gpu`` and
    MIG pods. Only for nodes whose device plugin allocates the devices gpusched chose (the
    stock NVIDIA device plugin picks its own). Default false."""
    namespace: str = "gpusched-system"
    service_name: str = "gpusched-webhook"
    port: int = Field(default=8443, ge=1, le=65535)
    timeout_seconds: int = Field(default=5, ge=1, le=30)
    """How long the API server waits for an answer (Kubernetes allows 1 to 30; default 10)."""
    excluded_namespaces: tuple[str, ...] = ("kube-system", "gpusched-system")
    image: str = "gpusched:0.1.0"


def _webhook(config: WebhookConfig, name: str, path: str, mutating: bool) -> dict[str, Any]:
    hook: dict[str, Any] = {
        "name": name,
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "failurePolicy": config.failure_policy,
        "timeoutSeconds": config.timeout_seconds,
        "matchPolicy": "Equivalent",
        "clientConfig": {
            "service": {
                "namespace": config.namespace,
                "name": config.service_name,
                "path": path,
                "port": 443,
            },
        },
        "rules": [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE"],
                "resources": ["pods"],
                "scope": "Namespaced",
            }
        ],
        "namespaceSelector": {
            "matchExpressions": [
                {
                    "key": "kubernetes.io/metadata.name",
                    "operator": "NotIn",
                    "values": list(config.excluded_namespaces),
                }
            ]
        },
    }
    if mutating:
        # The mutation is idempotent, so being called again after other webhooks changed the
        # pod (a sidecar injector adding a GPU container) is safe and keeps it complete.
        hook["reinvocationPolicy"] = "IfNeeded"
    return hook


def webhook_manifests(config: WebhookConfig | None = None) -> list[dict[str, Any]]:
    """ServiceAccount and its read-only ClusterRole (nodes and pods, for the MIG fallback's
    informers), Service, Deployment, Mutating- and ValidatingWebhookConfiguration for ``config``.

    The serving certificate is the Secret ``<service>-tls`` (``tls.crt``/``tls.key``); the
    configurations ask cert-manager's CA injector to fill ``caBundle`` from the Certificate of
    that name. Without cert-manager, set ``caBundle`` to the base64 CA yourself.
    """
    config = config or WebhookConfig()
    name, ns = config.service_name, config.namespace
    labels = {"app.kubernetes.io/name": name}
    inject = {"cert-manager.io/inject-ca-from": f"{ns}/{name}"}
    command = [
        "gpusched",
        "webhook",
        "--cert",
        "/etc/gpusched-webhook/tls.crt",
        "--key",
        "/etc/gpusched-webhook/tls.key",
        "--port",
        str(config.port),
        "--failure-policy",
        config.failure_policy,
    ]
    for scheduler in config.scheduler_names:
        command += ["--scheduler-name", scheduler]
    if config.visible_devices_for_device_plugin_pods:
        command.append("--visible-devices-for-device-plugin-pods")
    probe = {"httpGet": {"path": "/healthz", "port": "https", "scheme": "HTTPS"}}
    docs = [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
        },
        {
            # The MIG fallback's informers (gpusched.webhook.mig_view): read-only.
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name, "labels": labels},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["nodes", "pods"],
                    "verbs": ["get", "list", "watch"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name, "labels": labels},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}],
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {
                "selector": labels,
                "ports": [{"name": "https", "port": 443, "targetPort": "https"}],
            },
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": name,
                        "priorityClassName": "system-cluster-critical",
                        "containers": [
                            {
                                "name": "webhook",
                                "image": config.image,
                                "command": command,
                                "ports": [{"name": "https", "containerPort": config.port}],
                                "livenessProbe": probe,
                                "readinessProbe": probe,
                                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                                "volumeMounts": [
                                    {
                                        "name": "tls",
                                        "mountPath": "/etc/gpusched-webhook",
                                        "readOnly": True,
                                    }
                                ],
                            }
                        ],
                        "volumes": [{"name": "tls", "secret": {"secretName": f"{name}-tls"}}],
                    },
                },
            },
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": name, "annotations": inject},
            "webhooks": [_webhook(config, "mutate.webhook.gpusched.io", "/mutate", True)],
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": name, "annotations": inject},
            "webhooks": [_webhook(config, "validate.webhook.gpusched.io", "/validate", False)],
        },
    ]
    # A JSON round trip: no dict shared between documents (YAML would print them as anchors).
    manifests: list[dict[str, Any]] = orjson.loads(orjson.dumps(docs))
    return manifests
