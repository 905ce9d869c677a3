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

from typing import Any, Final, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

__all__ = [
    "MANIFEST_FILES",
    "FailurePolicy",
    "WebhookConfig",
    "webhook_manifest_files",
    "webhook_manifests",
]

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


MANIFEST_FILES: Final = ("rbac.yaml", "service.yaml", "deployment.yaml", "webhooks.yaml")
"""The files of ``deploy/webhook/`` besides its ``kustomization.yaml``, in apply order."""


def _labels(config: WebhookConfig) -> dict[str, str]:
    return {"app.kubernetes.io/name": config.service_name}


def _rbac(config: WebhookConfig) -> list[dict[str, Any]]:
    """Least privilege: read nodes and pods (the MIG fallback's informers); get/update only its
    own TLS Secret (create cannot be limited to a name in RBAC); get/patch only its own two
    webhook configurations (``caBundle``). ``gpusched.webhook.certs`` names these rules when
    one is missing."""
    name, ns, labels = config.service_name, config.namespace, _labels(config)
    account = [{"kind": "ServiceAccount", "name": name, "namespace": ns}]
    group = "rbac.authorization.k8s.io"

    def role(kind: str, role_name: str, rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
        meta: dict[str, Any] = {"name": role_name, "labels": labels}
        if kind == "Role":
            meta["namespace"] = ns
        binding_meta = dict(meta)
        return [
            {"apiVersion": f"{group}/v1", "kind": kind, "metadata": meta, "rules": rules},
            {
                "apiVersion": f"{group}/v1",
                "kind": f"{kind}Binding",
                "metadata": binding_meta,
                "roleRef": {"apiGroup": group, "kind": kind, "name": role_name},
                "subjects": account,
            },
        ]

    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
        },
        *role(
            "ClusterRole",
            name,
            [
                {
                    "apiGroups": [""],
                    "resources": ["nodes", "pods"],
                    "verbs": ["get", "list", "watch"],
                }
            ],
        ),
        *role(
            "ClusterRole",
            f"{name}-cabundle",
            [
                {
                    "apiGroups": ["admissionregistration.k8s.io"],
                    "resources": [
                        "mutatingwebhookconfigurations",
                        "validatingwebhookconfigurations",
                    ],
                    "resourceNames": [name],
                    "verbs": ["get", "patch"],
                }
            ],
        ),
        *role(
            "Role",
            f"{name}-tls",
            [
                {
                    "apiGroups": [""],
                    "resources": ["secrets"],
                    "resourceNames": [f"{name}-tls"],
                    "verbs": ["get", "update"],
                },
                {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
            ],
        ),
    ]


def _deployment(config: WebhookConfig) -> list[dict[str, Any]]:
    name, ns, labels = config.service_name, config.namespace, _labels(config)
    command = [
        "gpusched",
        "webhook",
        "--tls",
        "self-signed",
        "--service-name",
        name,
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
    return [
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
                        "securityContext": {
                            "runAsNonRoot": True,
                            "runAsUser": 65532,
                            "runAsGroup": 65532,
                            "seccompProfile": {"type": "RuntimeDefault"},
                        },
                        "affinity": {
                            "podAntiAffinity": {
                                "preferredDuringSchedulingIgnoredDuringExecution": [
                                    {
                                        "weight": 100,
                                        "podAffinityTerm": {
                                            "topologyKey": "kubernetes.io/hostname",
                                            "labelSelector": {"matchLabels": labels},
                                        },
                                    }
                                ]
                            }
                        },
                        "containers": [
                            {
                                "name": "webhook",
                                "image": config.image,
                                "command": command,
                                "env": [
                                    {
                                        # The Secret's namespace, and the names in the certificate.
                                        "name": "POD_NAMESPACE",
                                        "valueFrom": {
                                            "fieldRef": {"fieldPath": "metadata.namespace"}
                                        },
                                    }
                                ],
                                "ports": [{"name": "https", "containerPort": config.port}],
                                "livenessProbe": probe,
                                "readinessProbe": probe,
                                "resources": {
                                    "requests": {"cpu": "100m", "memory": "128Mi"},
                                    "limits": {"memory": "512Mi"},
                                },
                                "securityContext": {
                                    "allowPrivilegeEscalation": False,
                                    "readOnlyRootFilesystem": True,
                                    "capabilities": {"drop": ["ALL"]},
                                },
                                # The certificate's files for the ssl module (self-signed mode).
                                "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                            }
                        ],
                        "volumes": [{"name": "tmp", "emptyDir": {"medium": "Memory"}}],
                    },
                },
            },
        },
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}},
        },
    ]


def webhook_manifest_files(config: WebhookConfig | None = None) -> dict[str, list[dict[str, Any]]]:
    """``deploy/webhook/``'s files (:data:`MANIFEST_FILES`) and their documents for ``config``:
    ServiceAccount and RBAC, Service, Deployment and PodDisruptionBudget, and the
    Mutating- and ValidatingWebhookConfiguration.

    TLS is the webhook's own (``--tls self-signed``, ``gpusched.webhook.certs``): it keeps the
    Secret ``<service>-tls`` and patches ``caBundle`` into both configurations, which ship
    without one. ``deploy/overlays/cert-manager/`` hands both jobs to cert-manager instead.
    """
    config = config or WebhookConfig()
    name, labels = config.service_name, _labels(config)
    files: dict[str, list[dict[str, Any]]] = {
        "rbac.yaml": _rbac(config),
        "service.yaml": [
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": name, "namespace": config.namespace, "labels": labels},
                "spec": {
                    "selector": labels,
                    "ports": [{"name": "https", "port": 443, "targetPort": "https"}],
                },
            }
        ],
        "deployment.yaml": _deployment(config),
        "webhooks.yaml": [
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "MutatingWebhookConfiguration",
                "metadata": {"name": name, "labels": labels},
                "webhooks": [_webhook(config, "mutate.webhook.gpusched.io", "/mutate", True)],
            },
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingWebhookConfiguration",
                "metadata": {"name": name, "labels": labels},
                "webhooks": [_webhook(config, "validate.webhook.gpusched.io", "/validate", False)],
            },
        ],
    }
    # A JSON round trip: no dict shared between documents (YAML would print them as anchors).
    copied: dict[str, list[dict[str, Any]]] = orjson.loads(orjson.dumps(files))
    return copied


def webhook_manifests(config: WebhookConfig | None = None) -> list[dict[str, Any]]:
    """All of :func:`webhook_manifest_files`'s documents, in apply order."""
    return [doc for docs in webhook_manifest_files(config).values() for doc in docs]
