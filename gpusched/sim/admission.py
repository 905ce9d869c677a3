"""Admission webhooks in the simulated API server (``admissionregistration.k8s.io/v1``).

What kube-apiserver's MutatingAdmissionWebhook and ValidatingAdmissionWebhook plugins do, so a
webhook (gpusched's own, or any other) can be tested end to end against ``SimCluster``:

* ``MutatingWebhookConfiguration`` and ``ValidatingWebhookConfiguration`` are served like any
  built-in, cluster-scoped, defaulted as ``admissionregistration/v1/defaults.go`` and validated
  as ``pkg/apis/admissionregistration/validation/validation.go`` (:class:`WebhookStrategy`).
* On every create, update, patch and delete (``pods/binding`` and ``/status`` included) the
  server asks :class:`Admission`: mutating webhooks first, configurations sorted by name and
  webhooks in their order, each getting the object as the previous one left it (a JSONPatch
  answer is applied with :func:`gpusched.sim.patch.json_patch`); then the registry's own
  defaulting and validation (a dry run); then the validating webhooks, concurrently, on that
  object; then the write. A denial answers ``admission webhook "<name>" denied the request:
  <message>`` (``webhook/errors/statuserror.go``); a webhook that cannot be called, times out
  or answers nonsense is skipped under ``failurePolicy: Ignore`` and answers 500 ``failed
  calling webhook`` under ``Fail`` (the default).
* Rules match as ``pkg/admission/plugin/webhook/predicates/rules/rules.go``: operations,
  groups, versions, ``resource``, ``resource/sub``, ``*``, ``*/*``, ``pods/*``, scope; the
  ``namespaceSelector`` looks at the namespace's labels (a Namespace's own labels when the
  object is one; cluster-scoped objects always match); the ``objectSelector`` matches when the
  object's or the old object's labels match. Webhook configurations themselves are never sent
  to a webhook (upstream's guard against locking them); ``response.warnings`` become the
  reply's ``Warning`` headers.

Why a dry run: the registry is synchronous (a request is atomic between two awaits, as etcd's
transactions make it) and webhooks are HTTP calls. An update is therefore admitted against the
version it read and written with that ``resourceVersion``; when another write came in between,
admission runs again on the new version, as ``GuaranteedUpdate`` re-runs it upstream.

Cost: with no configuration stored, one length check per write; when no rule matches the
request, O(webhooks x rules) and the plain write. Otherwise two dry runs of the write besides
it, and one HTTPS round trip per matching webhook (one TLS context per ``caBundle``, one
connection pool for the server).

Differences from kube-apiserver (all observable):

* ``clientConfig.service``: the simulation has no Service networking, so a service must be
  mapped to a URL with :meth:`Admission.map_service` (``SimCluster.map_service``); the TLS
  certificate is still verified against ``caBundle`` with the server name
  ``<name>.<namespace>.svc``, as the real server does. An unmapped service fails the call.
* ``reinvocationPolicy: IfNeeded`` is validated and stored but never re-invokes a webhook.
* ``matchPolicy: Equivalent`` matches as ``Exact`` (no conversion between versions);
  ``matchConditions`` (CEL) are rejected at validation; ``deletecollection`` does not call the
  webhooks per item; ``CONNECT`` never happens (no exec/attach/portforward here).
* Mutating webhooks see a create's object before the kind's defaults (the registry applies
  them while preparing the object); upstream decodes with defaults first.
* Of several validating denials, the first in configuration order answers (upstream: the
  first to finish).
* Only ``admission.k8s.io/v1`` reviews are sent (``admissionReviewVersions`` must list v1 to be
  useful; upstream would fall back to v1beta1).

ValidatingAdmissionPolicies (``gpusched.sim.vap``) run here too, before the validating webhooks,
with the requesting user (``gpusched.sim.auth.current_user``) as ``userInfo``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import os
import ssl
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

import aiohttp
import orjson

from gpusched.sim import errors, vap
from gpusched.sim import field as fieldlib
from gpusched.sim import patch as patchlib
from gpusched.sim.apimachinery import go_quote, is_dns1035_label, is_dns1123_subdomain
from gpusched.sim.auth import current_user, user_info
from gpusched.sim.field import FieldError
from gpusched.sim.kinds import _AGE_COL, _NAME_COL, Strategy, _col, _row, _since, _table
from gpusched.sim.selectors import LabelSelector, SelectorError, label_selector_from_object
from gpusched.sim.store import Entry

if TYPE_CHECKING:
    from gpusched.sim.registry import Registry, Resource

__all__ = [
    "GROUP",
    "MUTATING_KIND",
    "USER_INFO",
    "VALIDATING_KIND",
    "Admission",
    "Attributes",
    "WebhookStrategy",
    "denied_message",
    "rule_matches",
]

log = logging.getLogger(__name__)

GROUP: Final = "admissionregistration.k8s.io"
MUTATING_KIND: Final = "MutatingWebhookConfiguration"
VALIDATING_KIND: Final = "ValidatingWebhookConfiguration"
_MUTATING_STORAGE: Final = f"mutatingwebhookconfigurations.{GROUP}"
_VALIDATING_STORAGE: Final = f"validatingwebhookconfigurations.{GROUP}"
USER_INFO: Final[Mapping[str, Any]] = {
    # The one user of the simulation: the kubeconfig's bearer token, a cluster admin.
    "username": "gpusched-sim",
    "groups": ["system:masters", "system:authenticated"],
}

# Sorted, as upstream's sets.String.List() lists them in "supported values".
_OPERATIONS: Final = ("*", "CONNECT", "CREATE", "DELETE", "UPDATE")
_SCOPES: Final = ("*", "Cluster", "Namespaced")
_FAILURE_POLICIES: Final = ("Fail", "Ignore")
_MATCH_POLICIES: Final = ("Equivalent", "Exact")
_SIDE_EFFECTS_V1: Final = ("None", "NoneOnDryRun")
_REINVOCATION: Final = ("IfNeeded", "Never")
_REVIEW_VERSIONS: Final = ("v1", "v1beta1")  # AcceptedAdmissionReviewVersions
_DEFAULT_TIMEOUT: Final = 10
_MAX_CALL_ATTEMPTS: Final = 5  # re-admissions after a conflicting write in between


# =============================================================================================
# The two configuration kinds: defaults and validation
# =============================================================================================


def _default_webhook(hook: dict[str, Any], mutating: bool) -> None:
    """``SetDefaults_*Webhook``, ``SetDefaults_Rule`` and ``SetDefaults_ServiceReference``."""
    hook.setdefault("failurePolicy", "Fail")
    hook.setdefault("matchPolicy", "Equivalent")
    if hook.get("namespaceSelector") is None:
        hook["namespaceSelector"] = {}
    if hook.get("objectSelector") is None:
        hook["objectSelector"] = {}
    if hook.get("timeoutSeconds") is None:
        hook["timeoutSeconds"] = _DEFAULT_TIMEOUT
    if mutating:
        hook.setdefault("reinvocationPolicy", "Never")
    for rule in hook.get("rules") or ():
        if isinstance(rule, dict) and not rule.get("scope"):
            rule["scope"] = "*"
    service = (hook.get("clientConfig") or {}).get("service")
    if isinstance(service, dict) and service.get("port") is None:
        service["port"] = 443


def _has_wildcard(values: Sequence[Any]) -> bool:
    return "*" in values


def _validate_rule(rule: Mapping[str, Any], path: str) -> list[FieldError]:
    """``validateRuleWithOperations`` and ``validateRule``."""
    errs: list[FieldError] = []
    ops = list(rule.get("operations") or [])
    if not ops:
        errs.append(fieldlib.required(f"{path}.operations", ""))
    if len(ops) > 1 and _has_wildcard(ops):
        errs.append(
            fieldlib.invalid(
                f"{path}.operations", ops, "if '*' is present, must not specify other operations"
            )
        )
    for i, op in enumerate(ops):
        if op not in _OPERATIONS:
            errs.append(fieldlib.not_supported(f"{path}.operations[{i}]", op, _OPERATIONS))
    for key, what in (("apiGroups", "API groups"), ("apiVersions", "API versions")):
        values = list(rule.get(key) or [])
        if not values:
            errs.append(fieldlib.required(f"{path}.{key}", ""))
        if len(values) > 1 and _has_wildcard(values):
            errs.append(
                fieldlib.invalid(
                    f"{path}.{key}", values, f"if '*' is present, must not specify other {what}"
                )
            )
        if key == "apiVersions":
            for i, v in enumerate(values):
                if v == "":
                    errs.append(fieldlib.required(f"{path}.{key}[{i}]", ""))
    resources = list(rule.get("resources") or [])
    if not resources:
        errs.append(fieldlib.required(f"{path}.resources", ""))
    errs.extend(_validate_resources(resources, f"{path}.resources"))
    scope = rule.get("scope")
    if scope is not None and scope not in _SCOPES:
        errs.append(fieldlib.not_supported(f"{path}.scope", scope, _SCOPES))
    return errs


def _validate_resources(resources: Sequence[Any], path: str) -> list[FieldError]:
    """``validateResources``: ``*``, ``*/*``, ``res/*`` and ``*/sub`` exclude their overlaps."""
    errs: list[FieldError] = []
    wildcard_subs: set[str] = set()  # x/*
    wildcard_resources: set[str] = set()  # */x
    double_wildcard = single_wildcard = without_sub = False
    for i, r in enumerate(resources):
        p = f"{path}[{i}]"
        if not isinstance(r, str) or r == "":
            errs.append(fieldlib.required(p, ""))
            continue
        double_wildcard |= r == "*/*"
        single_wildcard |= r == "*"
        if "/" not in r:
            without_sub = r != "*"
            continue
        res, sub = r.split("/", 1)
        if res in wildcard_subs:
            errs.append(fieldlib.invalid(p, r, f"if '{res}/*' is present, must not specify {r}"))
        if sub in wildcard_resources:
            errs.append(fieldlib.invalid(p, r, f"if '*/{sub}' is present, must not specify {r}"))
        if sub == "*":
            wildcard_subs.add(res)
        if res == "*":
            wildcard_resources.add(sub)
    if len(resources) > 1 and double_wildcard:
        errs.append(
            fieldlib.invalid(
                path, list(resources), "if '*/*' is present, must not specify other resources"
            )
        )
    if single_wildcard and without_sub:
        errs.append(
            fieldlib.invalid(
                path,
                list(resources),
                "if '*' is present, must not specify other resources without subresources",
            )
        )
    return errs


def _validate_selector(selector: Any, path: str) -> list[FieldError]:
    if selector is None:
        return []
    if not isinstance(selector, dict):
        return [fieldlib.invalid(path, selector, "must be a label selector")]
    try:
        label_selector_from_object(selector)
    except SelectorError as exc:
        return [fieldlib.invalid(path, fieldlib.struct(selector), str(exc))]
    return []


def _validate_url(url: str, path: str) -> list[FieldError]:
    """``webhook.ValidateWebhookURL`` (https only, a host, no user, query or fragment)."""
    form = "; desired format: https://host[/path]"
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        return [fieldlib.required(path, f"url must be a valid URL: {exc}{form}")]
    errs: list[FieldError] = []
    if parts.scheme != "https":
        errs.append(
            fieldlib.invalid(path, parts.scheme, "'https' is the only allowed URL scheme" + form)
        )
    host = parts.netloc.rpartition("@")[2]
    if not host:
        errs.append(fieldlib.invalid(path, host, "host must be provided" + form))
    if "@" in parts.netloc:
        user = parts.netloc.rpartition("@")[0]
        errs.append(fieldlib.invalid(path, user, "user information is not permitted in the URL"))
    if parts.fragment:
        errs.append(
            fieldlib.invalid(path, parts.fragment, "fragments are not permitted in the URL")
        )
    if parts.query:
        errs.append(
            fieldlib.invalid(path, parts.query, "query parameters are not permitted in the URL")
        )
    return errs


def _validate_service(service: Mapping[str, Any], path: str) -> list[FieldError]:
    """``webhook.ValidateWebhookService`` (the port defaulted to 443 first)."""
    errs: list[FieldError] = []
    if not service.get("name"):
        errs.append(fieldlib.required(f"{path}.name", "service name is required"))
    if not service.get("namespace"):
        errs.append(fieldlib.required(f"{path}.namespace", "service namespace is required"))
    port = service.get("port", 443)
    if not isinstance(port, int) or not 1 <= port <= 65535:
        errs.append(
            fieldlib.invalid(
                f"{path}.port", port, "port is not valid: must be between 1 and 65535, inclusive"
            )
        )
    url_path = service.get("path")
    if url_path is None or url_path in ("", "/"):
        return errs
    url_path = str(url_path)
    if url_path == "//":
        return [*errs, fieldlib.invalid(f"{path}.path", url_path, "segment[0] may not be empty")]
    if not url_path.startswith("/"):
        errs.append(fieldlib.invalid(f"{path}.path", url_path, "must start with a '/'"))
    steps = url_path[1:].removesuffix("/").split("/")
    for i, step in enumerate(steps):
        if not step:
            errs.append(
                fieldlib.invalid(f"{path}.path", url_path, f"segment[{i}] may not be empty")
            )
            continue
        errs.extend(
            fieldlib.invalid(f"{path}.path", url_path, f"segment[{i}]: {m}")
            for m in is_dns1123_subdomain(step)
        )
    return errs


def _validate_webhook(hook: Any, path: str, mutating: bool) -> list[FieldError]:
    """``validateMutatingWebhook`` / ``validateValidatingWebhook`` for the v1 API, in their
    order (admissionReviewVersions and name uniqueness are the configuration's checks)."""
    if not isinstance(hook, dict):
        return [fieldlib.invalid(path, fieldlib.struct(hook), "must be an object")]
    errs: list[FieldError] = []
    name = str(hook.get("name") or "")
    # utilvalidation.IsFullyQualifiedName: the first problem only.
    if not name:
        errs.append(fieldlib.required(f"{path}.name", ""))
    elif dns := is_dns1123_subdomain(name):
        errs.append(fieldlib.invalid(f"{path}.name", name, ",".join(dns)))
    elif len(name.split(".")) < 3:
        errs.append(
            fieldlib.invalid(
                f"{path}.name",
                name,
                "should be a domain with at least three segments separated by dots",
            )
        )
    for j, rule in enumerate(hook.get("rules") or []):
        errs.extend(_validate_rule(rule if isinstance(rule, dict) else {}, f"{path}.rules[{j}]"))
    policy = hook.get("failurePolicy")
    if policy is not None and policy not in _FAILURE_POLICIES:
        errs.append(fieldlib.not_supported(f"{path}.failurePolicy", policy, _FAILURE_POLICIES))
    match = hook.get("matchPolicy")
    if match is not None and match not in _MATCH_POLICIES:
        errs.append(fieldlib.not_supported(f"{path}.matchPolicy", match, _MATCH_POLICIES))
    side = hook.get("sideEffects")
    if side is None:
        errs.append(
            fieldlib.required(
                f"{path}.sideEffects", "must specify one of " + ", ".join(_SIDE_EFFECTS_V1)
            )
        )
    elif side not in _SIDE_EFFECTS_V1:
        errs.append(fieldlib.not_supported(f"{path}.sideEffects", side, _SIDE_EFFECTS_V1))
    timeout = hook.get("timeoutSeconds")
    if timeout is not None and (not isinstance(timeout, int) or not 1 <= timeout <= 30):
        errs.append(
            fieldlib.invalid(
                f"{path}.timeoutSeconds",
                timeout,
                "the timeout value must be between 1 and 30 seconds",
            )
        )
    errs.extend(_validate_selector(hook.get("namespaceSelector"), f"{path}.namespaceSelector"))
    errs.extend(_validate_selector(hook.get("objectSelector"), f"{path}.objectSelector"))
    if mutating:
        reinvoke = hook.get("reinvocationPolicy")
        if reinvoke is not None and reinvoke not in _REINVOCATION:
            errs.append(
                fieldlib.not_supported(f"{path}.reinvocationPolicy", reinvoke, _REINVOCATION)
            )
    config = hook.get("clientConfig")
    config = config if isinstance(config, dict) else {}
    url, service = config.get("url"), config.get("service")
    if (url is None) == (service is None):
        errs.append(
            fieldlib.required(f"{path}.clientConfig", "exactly one of url or service is required")
        )
    elif url is not None:
        errs.extend(_validate_url(str(url), f"{path}.clientConfig.url"))
    else:
        service = service if isinstance(service, dict) else {}
        errs.extend(_validate_service(service, f"{path}.clientConfig.service"))
    if hook.get("matchConditions"):
        errs.append(
            fieldlib.forbidden(
                f"{path}.matchConditions",
                "not supported by the simulated API server (no CEL); remove matchConditions "
                "and use rules and selectors",
            )
        )
    return errs


def _validate_review_versions(versions: Any, path: str) -> list[FieldError]:
    """``validateAdmissionReviewVersions`` (required; must include one the server sends)."""
    accepted = ", ".join(_REVIEW_VERSIONS)
    values = [str(v) for v in versions or []]
    if not values:
        return [fieldlib.required(path, f"must specify one of {accepted}")]
    errs: list[FieldError] = []
    seen: set[str] = set()
    for i, v in enumerate(values):
        if v in seen:
            errs.append(fieldlib.invalid(f"{path}[{i}]", v, "duplicate version"))
            continue
        seen.add(v)
        errs.extend(fieldlib.invalid(f"{path}[{i}]", v, m) for m in is_dns1035_label(v))
    if not seen & set(_REVIEW_VERSIONS):
        errs.append(fieldlib.invalid(path, values, f"must include at least one of {accepted}"))
    return errs


class WebhookStrategy(Strategy):
    """Both configuration kinds (``pkg/registry/admissionregistration/*/strategy.go``)."""

    def __init__(self, mutating: bool) -> None:
        kind = MUTATING_KIND if mutating else VALIDATING_KIND
        super().__init__(kind, GROUP, kind.lower() + "s", namespaced=False, tracks_generation=True)
        self.mutating = mutating

    def prepare_for_create(self, obj: dict[str, Any]) -> None:
        self._default(obj)

    def prepare_for_update(self, new: dict[str, Any], old: dict[str, Any]) -> None:
        self._default(new)

    def _default(self, obj: dict[str, Any]) -> None:
        for hook in obj.get("webhooks") or ():
            if isinstance(hook, dict):
                _default_webhook(hook, self.mutating)

    def _validate(self, obj: Mapping[str, Any]) -> list[FieldError]:
        errs: list[FieldError] = []
        names: set[str] = set()
        hooks = obj.get("webhooks") or []
        if not isinstance(hooks, list):
            return [fieldlib.invalid("webhooks", fieldlib.struct(hooks), "must be a list")]
        for i, hook in enumerate(hooks):
            path = f"webhooks[{i}]"
            errs.extend(_validate_webhook(hook, path, self.mutating))
            versions = hook.get("admissionReviewVersions") if isinstance(hook, dict) else None
            errs.extend(_validate_review_versions(versions, f"{path}.admissionReviewVersions"))
            name = hook.get("name") if isinstance(hook, dict) else None
            if name:
                if name in names:
                    errs.append(fieldlib.duplicate(f"{path}.name", name))
                else:
                    names.add(name)
        return errs

    def validate_create(self, obj: dict[str, Any]) -> list[FieldError]:
        return super().validate_create(obj) + self._validate(obj)

    def validate_update(self, new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
        return super().validate_update(new, old) + self._validate(new)

    def table(self, objs: list[dict[str, Any]], now: datetime) -> dict[str, Any]:
        """``kubectl get``: Name, Webhooks (their number), Age, as upstream's printers."""
        webhooks = _col(
            "Webhooks",
            "Webhooks indicates the number of webhooks registered in this configuration",
            type_="integer",
        )
        rows = [
            _row(
                o,
                [
                    str((o.get("metadata") or {}).get("name") or ""),
                    len(o.get("webhooks") or ()),
                    _since((o.get("metadata") or {}).get("creationTimestamp"), now),
                ],
            )
            for o in objs
        ]
        return _table([_NAME_COL, webhooks, _AGE_COL], rows)


# =============================================================================================
# Matching
# =============================================================================================


@dataclass
class Attributes:
    """``admission.Attributes``: what a request does, as the webhooks are told."""

    group: str
    version: str
    resource: str
    kind: str
    subresource: str
    namespace: str
    name: str
    operation: str  # CREATE, UPDATE, DELETE
    namespaced: bool
    old: dict[str, Any] | None = None
    dry_run: bool = False
    options: dict[str, Any] = field(default_factory=dict)
    kind_group: str = ""
    kind_version: str = ""
    warnings: list[str] = field(default_factory=list)
    """Filled with the webhooks' ``response.warnings``, for the reply's Warning headers."""

    def __post_init__(self) -> None:
        if not self.kind_version:
            self.kind_group, self.kind_version = self.group, self.version


def rule_matches(rule: Mapping[str, Any], attrs: Attributes) -> bool:
    """``rules.Matcher.Matches``: operation, group, version, resource/subresource, scope."""
    ops = rule.get("operations") or ()
    if "*" not in ops and attrs.operation not in ops:
        return False
    groups = rule.get("apiGroups") or ()
    if "*" not in groups and attrs.group not in groups:
        return False
    versions = rule.get("apiVersions") or ()
    if "*" not in versions and attrs.version not in versions:
        return False
    scope = rule.get("scope") or "*"
    if scope != "*":
        # A Namespace is cluster-scoped even though its requests carry a namespace.
        namespaced = attrs.namespaced and not (attrs.group == "" and attrs.resource == "namespaces")
        if (scope == "Namespaced") != namespaced:
            return False
    wanted = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    for r in rule.get("resources") or ():
        if r in ("*/*", wanted):
            return True
        res, _, sub = r.partition("/")
        if res == "*" and sub == "" and not attrs.subresource:
            return True
        if res == "*" and sub == attrs.subresource:
            return True
        if res == attrs.resource and sub == "*" and attrs.subresource:
            return True
    return False


def _labels(obj: Mapping[str, Any] | None) -> dict[str, str]:
    if not obj:
        return {}
    labels = (obj.get("metadata") or {}).get("labels")
    return labels if isinstance(labels, dict) else {}


def _selector(obj: Any) -> LabelSelector:
    try:
        return label_selector_from_object(obj if isinstance(obj, dict) else {})
    except SelectorError:
        return LabelSelector.nothing()  # validation keeps these out; never match on one


def denied_message(webhook: str, status: Mapping[str, Any] | None) -> dict[str, Any]:
    """``webhookerrors.ToStatusErr`` as of v1.32: the Status of a denial (code at least 400).

    Newer upstream releases also prefix ``<resource> "<name>" is forbidden:`` and default the
    code to 403; the simulation follows the version it serves.
    """
    result = dict(status or {})
    denied_by = f"admission webhook {go_quote(webhook)} denied the request"
    code = result.get("code")
    if not isinstance(code, int) or code < 400:
        code = 400
    message = result.get("message") or ""
    reason = result.get("reason") or ""
    if message:
        text = f"{denied_by}: {message}"
    elif reason:
        text = f"{denied_by}: {reason}"
    else:
        text = f"{denied_by} without explanation"
    out: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": text,
        "code": code,
    }
    if reason:
        out["reason"] = reason
    if isinstance(result.get("details"), dict):
        out["details"] = result["details"]
    return out


class _CallError(Exception):
    """``webhookutil.ErrCallingWebhook``: subject to the webhook's failurePolicy."""


# =============================================================================================
# The dispatcher
# =============================================================================================


class Admission:
    """Calls the registered webhooks for the simulated API server's writes.

    The server asks :meth:`active` first; when it is true, ``create``/``update``/``patch`` admit
    and write, ``admit_delete``/``admit_binding`` admit and leave the write to the server.
    """

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.policies = vap.Policies(registry.store)
        self.services: dict[tuple[str, str, int], str] = {}
        self._session: aiohttp.ClientSession | None = None
        self._contexts: dict[str, ssl.SSLContext] = {}

    # ------------------------------------------------------------------ configuration

    def map_service(self, namespace: str, name: str, url: str, port: int = 443) -> None:
        """Route calls to ``service: {namespace, name, port}`` to ``url`` (``https://host:port``;
        the service's ``path`` is appended). The simulation has no Service networking; this is
        the one place where a webhook served by a Service differs from a real cluster."""
        self.services[(namespace, name, port)] = url.rstrip("/")

    def active(self) -> bool:
        """Whether any configuration is stored (O(1): the hot path's only cost without any)."""
        storages = self.registry.store.storages
        return bool(
            len(storages[_MUTATING_STORAGE].objects)
            or len(storages[_VALIDATING_STORAGE].objects)
            or self.policies.active()
        )

    def _hooks(self, storage: str) -> list[dict[str, Any]]:
        """Webhooks of all configurations, configurations sorted by name (the storage key)."""
        out: list[dict[str, Any]] = []
        for entry in self.registry.store.storages[storage].objects.values():
            out.extend(h for h in entry.obj.get("webhooks") or () if isinstance(h, dict))
        return out

    def _relevant(self, attrs: Attributes, *operations: str) -> bool:
        """Whether any webhook's rules match the request as one of ``operations``: when none
        does, the write skips admission (and its dry runs) entirely. O(webhooks x rules)."""
        if attrs.group == GROUP:
            return False
        probes = [replace(attrs, operation=op) for op in operations]
        if any(self.policies.relevant(vap.request_from(p, None)) for p in probes):
            return True
        return any(
            rule_matches(rule, probe)
            for storage in (_MUTATING_STORAGE, _VALIDATING_STORAGE)
            for hook in self._hooks(storage)
            for rule in hook.get("rules") or ()
            for probe in probes
        )

    def _matches(
        self, hook: Mapping[str, Any], attrs: Attributes, obj: Mapping[str, Any] | None
    ) -> bool:
        if attrs.group == GROUP:
            return False  # never for webhook configurations: a broken webhook cannot lock them
        if not any(rule_matches(r, attrs) for r in hook.get("rules") or ()):
            return False
        obj_sel = _selector(hook.get("objectSelector"))
        if not obj_sel.empty() and not (
            obj_sel.matches(_labels(obj)) or obj_sel.matches(_labels(attrs.old))
        ):
            return False
        ns_sel = _selector(hook.get("namespaceSelector"))
        if ns_sel.empty():
            return True
        if attrs.group == "" and attrs.resource == "namespaces":
            return ns_sel.matches(_labels(obj if obj is not None else attrs.old))
        if not attrs.namespaced:
            return True  # namespaceSelector does not apply to cluster-scoped objects
        ns = self.registry.store.storages["namespaces"].get(attrs.namespace)
        return ns_sel.matches(_labels(ns.obj if ns is not None else None))

    # ------------------------------------------------------------------ admission

    async def mutate(self, attrs: Attributes, obj: dict[str, Any] | None) -> dict[str, Any] | None:
        """Run the matching mutating webhooks in order; the object as the last one left it."""
        for hook in self._hooks(_MUTATING_STORAGE):
            if not self._matches(hook, attrs, obj):
                continue
            response = await self._call(hook, attrs, obj, mutating=True)
            if response is None:
                continue
            patch = response.get("patch")
            if patch and obj is not None:
                obj = self._apply_patch(hook, obj, patch)
        return obj

    async def validate(self, attrs: Attributes, obj: dict[str, Any] | None) -> None:
        """Run the bound ValidatingAdmissionPolicies, then the matching validating webhooks
        concurrently; raise the first denial."""
        attrs.warnings.extend(self.policies.validate(vap.request_from(attrs, obj)))
        hooks = [h for h in self._hooks(_VALIDATING_STORAGE) if self._matches(h, attrs, obj)]
        if not hooks:
            return
        results = await asyncio.gather(
            *(self._call(h, attrs, obj, mutating=False) for h in hooks), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result

    @staticmethod
    def _apply_patch(hook: Mapping[str, Any], obj: dict[str, Any], patch: str) -> dict[str, Any]:
        try:
            ops = orjson.loads(base64.b64decode(patch))
            return patchlib.json_patch(obj, ops)
        except (ValueError, binascii.Error, patchlib.PatchError) as exc:
            # Upstream answers an unusable patch with an internal error, whatever the policy.
            raise errors.internal_error(
                f"admission webhook {go_quote(hook['name'])} returned a patch that cannot be "
                f"applied: {exc}; fix the webhook's JSONPatch"
            ) from None

    def _review(self, attrs: Attributes, obj: dict[str, Any] | None, uid: str) -> dict[str, Any]:
        request: dict[str, Any] = {
            "uid": uid,
            "kind": {"group": attrs.kind_group, "version": attrs.kind_version, "kind": attrs.kind},
            "resource": {
                "group": attrs.group,
                "version": attrs.version,
                "resource": attrs.resource,
            },
        }
        if attrs.subresource:
            request["subResource"] = attrs.subresource
        request["requestKind"] = request["kind"]
        request["requestResource"] = request["resource"]
        if attrs.subresource:
            request["requestSubResource"] = attrs.subresource
        if attrs.name:
            request["name"] = attrs.name
        if attrs.namespace:
            request["namespace"] = attrs.namespace
        request.update(
            operation=attrs.operation,
            userInfo=user_info(current_user()),
            object=obj,
            oldObject=attrs.old,
            dryRun=attrs.dry_run,
            options=attrs.options or None,
        )
        return {"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": request}

    async def _call(
        self,
        hook: Mapping[str, Any],
        attrs: Attributes,
        obj: dict[str, Any] | None,
        mutating: bool,
    ) -> dict[str, Any] | None:
        """Call one webhook: its response when allowed, None when skipped (Ignore policy);
        raises the denial, or the 500 of a failed call under ``failurePolicy: Fail``."""
        name = str(hook.get("name"))
        uid = str(uuid.uuid4())
        try:
            response = await self._post(hook, self._review(attrs, obj, uid))
            result = self._verify(response, uid, mutating)
        except _CallError as exc:
            message = f"failed calling webhook {go_quote(name)}: {exc}"
            if hook.get("failurePolicy", "Fail") == "Ignore":
                log.warning("gpusched sim: %s (failurePolicy Ignore: request admitted)", message)
                return None
            raise errors.internal_error(message) from None
        if not result.get("allowed"):
            raise errors.APIError(denied_message(name, result.get("status")))
        for warning in result.get("warnings") or ():
            attrs.warnings.append(str(warning))
        return result

    def _target(self, hook: Mapping[str, Any]) -> tuple[str, str | None]:
        """The URL to post to and the TLS server name to verify (None: the URL's host)."""
        config = hook.get("clientConfig") or {}
        timeout = int(hook.get("timeoutSeconds") or _DEFAULT_TIMEOUT)
        if config.get("url"):
            return f"{config['url']}?timeout={timeout}s", None
        service = config.get("service") or {}
        ns, svc = str(service.get("namespace")), str(service.get("name"))
        port = int(service.get("port", 443))
        path = service.get("path") or ""
        base = self.services.get((ns, svc, port))
        if base is None:
            raise _CallError(
                f'failed to call webhook: Post "https://{svc}.{ns}.svc:{port}{path}?timeout='
                f'{timeout}s": service "{ns}/{svc}" port {port} is not mapped to a URL in the '
                f"simulation; call SimCluster.map_service({ns!r}, {svc!r}, URL, port={port})"
            )
        return f"{base}{path}?timeout={timeout}s", f"{svc}.{ns}.svc"

    def _ssl(self, ca_bundle: str) -> ssl.SSLContext:
        ctx = self._contexts.get(ca_bundle)
        if ctx is None:
            if ca_bundle:
                try:
                    pem = base64.b64decode(ca_bundle).decode()
                    ctx = ssl.create_default_context(cadata=pem)
                except (ValueError, ssl.SSLError) as exc:
                    raise _CallError(f"failed to call webhook: invalid caBundle: {exc}") from None
            else:
                ctx = ssl.create_default_context()
            self._contexts[ca_bundle] = ctx
        return ctx

    async def _post(self, hook: Mapping[str, Any], review: dict[str, Any]) -> Any:
        url, server_name = self._target(hook)
        ctx = self._ssl(str((hook.get("clientConfig") or {}).get("caBundle") or ""))
        timeout = aiohttp.ClientTimeout(total=float(hook.get("timeoutSeconds") or _DEFAULT_TIMEOUT))
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        try:
            async with self._session.post(
                url,
                data=orjson.dumps(review),
                headers={"Content-Type": "application/json", "Accept": "application/json"},
                ssl=ctx,
                server_hostname=server_name,
                timeout=timeout,
            ) as resp:
                body = await resp.read()
                if resp.status < 200 or resp.status >= 300:
                    raise _CallError(
                        f"failed to call webhook: the server responded with status {resp.status}"
                        f": {body[:200].decode(errors='replace')}"
                    )
        except TimeoutError:
            raise _CallError(
                f'failed to call webhook: Post "{url}": context deadline exceeded'
            ) from None
        except aiohttp.ClientError as exc:
            raise _CallError(f'failed to call webhook: Post "{url}": {_reason(exc)}') from None
        try:
            return orjson.loads(body)
        except ValueError as exc:
            raise _CallError(f"received invalid webhook response: {exc}") from None

    @staticmethod
    def _verify(review: Any, uid: str, mutating: bool) -> dict[str, Any]:
        """``request.VerifyAdmissionResponse`` for a v1 AdmissionReview."""
        invalid = "received invalid webhook response: "
        if not isinstance(review, dict):
            raise _CallError(invalid + "expected an AdmissionReview object")
        gvk = (review.get("apiVersion"), review.get("kind"))
        if gvk != ("admission.k8s.io/v1", "AdmissionReview"):
            raise _CallError(
                invalid + "expected webhook response of admission.k8s.io/v1, "
                f"Kind=AdmissionReview, got {gvk[0]}, Kind={gvk[1]}"
            )
        response = review.get("response")
        if not isinstance(response, dict):
            raise _CallError(invalid + "webhook response was absent")
        got = str(response.get("uid") or "")
        if got != uid:
            raise _CallError(
                invalid + f"expected response.uid={go_quote(uid)}, got {go_quote(got)}"
            )
        patch, patch_type = response.get("patch"), response.get("patchType")
        if not mutating and (patch or patch_type):
            raise _CallError(invalid + "validating webhook may not return response.patch")
        if patch and patch_type is None:
            raise _CallError(invalid + "webhook returned response.patch but not response.patchType")
        if patch_type is not None and patch_type != "JSONPatch":
            raise _CallError(
                invalid
                + f"webhook returned invalid response.patchType of {go_quote(str(patch_type))}"
            )
        return response

    # ------------------------------------------------------------------ the verbs

    @staticmethod
    def _attrs(
        res: Resource,
        namespace: str | None,
        name: str,
        subresource: str,
        operation: str,
        old: dict[str, Any] | None,
        dry_run: bool,
    ) -> Attributes:
        options_kind = {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions"}.get(
            operation, "DeleteOptions"
        )
        options: dict[str, Any] = {"kind": options_kind, "apiVersion": "meta.k8s.io/v1"}
        if dry_run:
            options["dryRun"] = ["All"]
        return Attributes(
            group=res.group,
            version=res.version,
            resource=res.plural,
            kind=res.kind,
            subresource=subresource,
            namespace=(namespace or "") if res.namespaced else "",
            name=name,
            operation=operation,
            namespaced=res.namespaced,
            old=old,
            dry_run=dry_run,
            options=options,
        )

    def _current(self, res: Resource, namespace: str | None, name: str) -> Entry | None:
        try:
            return self.registry.get(res, namespace, name)
        except errors.APIError as exc:
            if exc.code == 404:
                return None
            raise

    async def create(
        self,
        res: Resource,
        namespace: str | None,
        body: Any,
        dry_run: bool,
        strict: bool,
        warnings: list[str] | None = None,
    ) -> Entry:
        """Admit a create (mutate, dry-run, validate) and write it."""
        registry = self.registry
        if not isinstance(body, dict) or not isinstance(body.get("metadata", {}), dict):
            return registry.create(res, namespace, body, dry_run=dry_run, strict=strict)
        _type_meta(body, res)
        meta = body.setdefault("metadata", {})
        if res.namespaced and namespace and not meta.get("namespace"):
            meta["namespace"] = namespace
        attrs = self._attrs(res, namespace, meta.get("name") or "", "", "CREATE", None, dry_run)
        if not self._relevant(attrs, "CREATE"):
            return registry.create(res, namespace, body, dry_run=dry_run, strict=strict)
        attrs.warnings = warnings if warnings is not None else []
        obj = await self.mutate(attrs, body)
        assert obj is not None
        trial = registry.create(res, namespace, _copy(obj), dry_run=True, strict=strict)
        attrs.name = trial.obj["metadata"]["name"]
        await self.validate(attrs, trial.obj)
        # A generated name is kept: the validating webhooks saw it.
        obj.setdefault("metadata", {})["name"] = attrs.name
        return registry.create(res, namespace, obj, dry_run=dry_run, strict=strict)

    async def update(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        body: Any,
        subresource: str,
        dry_run: bool,
        strict: bool,
        warnings: list[str] | None = None,
    ) -> tuple[Entry, bool]:
        """Admit a PUT against the stored version and write it (re-admitted on a conflict
        when the client sent no resourceVersion, as GuaranteedUpdate retries)."""
        registry = self.registry
        if not isinstance(body, dict) or not isinstance(body.get("metadata", {}), dict):
            return registry.update(res, namespace, name, body, subresource, dry_run, strict)
        probe = self._attrs(res, namespace, name, subresource, "UPDATE", None, dry_run)
        if not self._relevant(probe, "UPDATE", "CREATE"):
            return registry.update(res, namespace, name, body, subresource, dry_run, strict)
        user_rv = (body.get("metadata") or {}).get("resourceVersion")
        for attempt in range(_MAX_CALL_ATTEMPTS):
            current = self._current(res, namespace, name)
            if current is None:
                if res.allow_create_on_update and not subresource:
                    body.setdefault("metadata", {})["name"] = name
                    entry = await self.create(res, namespace, body, dry_run, strict, warnings)
                    return entry, True
                return registry.update(res, namespace, name, body, subresource, dry_run, strict)
            attrs = self._attrs(
                res, namespace, name, subresource, "UPDATE", current.copy(), dry_run
            )
            if warnings is not None:
                attrs.warnings = warnings
            obj = await self.mutate(attrs, _type_meta(_copy(body), res))
            assert obj is not None
            if not user_rv:
                obj.setdefault("metadata", {})["resourceVersion"] = current.obj["metadata"][
                    "resourceVersion"
                ]
            try:
                # Both writes carry the version admitted against: a write that came in during
                # a webhook call is a conflict, and admission runs again on the new version.
                trial, _ = registry.update(
                    res, namespace, name, _copy(obj), subresource, True, strict
                )
                await self.validate(attrs, trial.copy())
                return registry.update(res, namespace, name, obj, subresource, dry_run, strict)
            except errors.APIError as exc:
                if exc.reason != "Conflict" or user_rv or attempt == _MAX_CALL_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")

    async def patch(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        content_type: str,
        raw: bytes,
        subresource: str,
        dry_run: bool,
        strict: bool,
        warnings: list[str] | None = None,
    ) -> tuple[Entry, bool]:
        """Admit a PATCH: the patch applied (a dry run) is what the webhooks see as the new
        object; the result is written as an update of the version it was applied to."""
        registry = self.registry
        probe = self._attrs(res, namespace, name, subresource, "UPDATE", None, dry_run)
        if not self._relevant(probe, "UPDATE", "CREATE"):
            return registry.patch(
                res, namespace, name, content_type, raw, subresource, dry_run, strict
            )
        for attempt in range(_MAX_CALL_ATTEMPTS):
            current = self._current(res, namespace, name)
            trial, created = registry.patch(
                res, namespace, name, content_type, raw, subresource, True, strict
            )
            if created or current is None:
                # Server-side apply of an absent object: admitted as the create it is.
                obj = trial.copy()
                for owned in ("uid", "creationTimestamp", "resourceVersion", "generation"):
                    obj["metadata"].pop(owned, None)
                return await self.create(res, namespace, obj, dry_run, strict, warnings), True
            attrs = self._attrs(
                res, namespace, name, subresource, "UPDATE", current.copy(), dry_run
            )
            if warnings is not None:
                attrs.warnings = warnings
            mutated = await self.mutate(attrs, trial.copy())
            assert mutated is not None
            mutated["metadata"]["resourceVersion"] = current.obj["metadata"]["resourceVersion"]
            try:
                checked, _ = registry.update(
                    res, namespace, name, _copy(mutated), subresource, True, strict
                )
                await self.validate(attrs, checked.copy())
                return registry.update(res, namespace, name, mutated, subresource, dry_run, strict)
            except errors.APIError as exc:
                if exc.reason != "Conflict" or attempt == _MAX_CALL_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")

    async def admit_delete(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        options: Mapping[str, Any],
        dry_run: bool,
    ) -> None:
        """Admit a DELETE: ``oldObject`` is the stored object, ``object`` null. A mutating
        webhook's patch has nothing to apply to and is ignored."""
        attrs = self._attrs(res, namespace, name, "", "DELETE", None, dry_run)
        current = self._current(res, namespace, name) if self._relevant(attrs, "DELETE") else None
        if current is None:
            return  # nothing to call, or the registry answers 404
        attrs.old = current.copy()
        attrs.options.update({k: v for k, v in options.items() if k not in ("kind", "apiVersion")})
        await self.mutate(attrs, None)
        await self.validate(attrs, None)

    async def admit_binding(self, namespace: str, name: str, body: Any) -> Any:
        """Admit a ``pods/binding`` create (or a create of ``bindings`` without a pod name):
        the object is the Binding."""
        if not isinstance(body, dict):
            return body
        pods = self.registry.resources[("", "v1", "pods")]
        meta = body.get("metadata")
        if not isinstance(meta, dict):
            meta = body["metadata"] = {}
        meta.setdefault("namespace", namespace)
        body.setdefault("kind", "Binding")
        body.setdefault("apiVersion", "v1")
        attrs = self._attrs(
            pods, namespace, name or str(meta.get("name") or ""), "binding", "CREATE", None, False
        )
        attrs.kind = "Binding"
        if not name:
            attrs.resource, attrs.subresource = "bindings", ""
        if not self._relevant(attrs, "CREATE"):
            return body
        obj = await self.mutate(attrs, body)
        await self.validate(attrs, obj)
        return obj

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _copy(obj: dict[str, Any]) -> dict[str, Any]:
    """A deep copy (the registry writes into the bodies it is given)."""
    out: dict[str, Any] = orjson.loads(orjson.dumps(obj))
    return out


def _reason(exc: aiohttp.ClientError) -> str:
    """A client error worded as Go's net/http words it (``dial tcp ...: connect: ...``)."""
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return f"tls: failed to verify certificate: {exc.certificate_error}"
    if isinstance(exc, aiohttp.ClientConnectorError):
        err = exc.os_error
        text = (os.strerror(err.errno) if err.errno else str(err)).lower()
        return f"dial tcp {exc.host}:{exc.port}: connect: {text}"
    return str(exc) or type(exc).__name__


def _type_meta(obj: dict[str, Any], res: Resource) -> dict[str, Any]:
    """Kind and apiVersion, which a decoded object always has upstream."""
    if not obj.get("kind"):
        obj["kind"] = res.kind
    if not obj.get("apiVersion"):
        obj["apiVersion"] = res.api_version
    return obj
