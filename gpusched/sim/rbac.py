"""RBAC for the simulated API server: RequestInfo, the RBAC authorizer, the bootstrap policy.

Non-admin tokens (service-account tokens, :mod:`gpusched.sim.auth`) are authorized as
kube-apiserver's ``Node,RBAC`` chain authorizes a non-node user:

- :func:`request_info` is ``RequestInfoFactory.NewRequestInfo`` (k8s.io/apiserver endpoints/
  request/requestinfo.go): the verb from the method (``get`` without a name is ``list``, or
  ``watch`` with ``?watch=true`` or the ``/watch/`` prefix; ``delete`` without a name is
  ``deletecollection``), the group, namespace, resource, name (also from a
  ``metadata.name=`` field selector) and subresource; every other path is a non-resource URL
  with the lower-cased method as its verb;
- :class:`Authorizer` is plugin/pkg/auth/authorizer/rbac: ClusterRoleBindings, then the
  RoleBindings of the request's namespace, each to a Role or ClusterRole; a rule allows when
  verb, API group, resource (``*``, ``pods/binding``, ``*/status``), resourceNames and
  nonResourceURLs (``/apis/*``) match. No rule is NoOpinion, which is denied; a binding to a
  missing role adds ``RBAC: clusterrole.rbac.authorization.k8s.io "x" not found`` as reason.
  ClusterRoles with an ``aggregationRule`` are read with the rules of the ClusterRoles their
  selectors pick (what the aggregation controller writes into them);
- :func:`forbidden` is the 403 ``responsewriters.Forbidden`` writes, word for word;
- :data:`BOOTSTRAP` holds the roles and bindings every server creates that a service account
  relies on (bootstrappolicy/policy.go): ``system:discovery``, ``system:basic-user``,
  ``system:public-info-viewer`` bound to ``system:authenticated``, and ``cluster-admin`` to
  ``system:masters``; the server stores them at start.

Cost: one authorization reads every ClusterRoleBinding plus the namespace's RoleBindings and the
roles they name (microseconds for an install's few dozen); requests with the admin token skip it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from gpusched.sim import errors, kinds
from gpusched.sim.selectors import (
    SelectorError,
    label_selector_from_object,
    parse_field_selector,
)
from gpusched.sim.store import Store

__all__ = [
    "BOOTSTRAP",
    "GROUP",
    "MASTERS",
    "Attributes",
    "Authorizer",
    "Decision",
    "RBACStrategy",
    "UserInfo",
    "forbidden",
    "request_info",
]

GROUP: Final = "rbac.authorization.k8s.io"
MASTERS: Final = "system:masters"
AUTHENTICATED: Final = "system:authenticated"
UNAUTHENTICATED: Final = "system:unauthenticated"

_SPECIAL_VERBS: Final = frozenset({"proxy", "watch"})
_NAMESPACE_SUBRESOURCES: Final = frozenset({"status", "finalize"})
_METHOD_VERBS: Final = {
    "POST": "create",
    "GET": "get",
    "HEAD": "get",
    "PUT": "update",
    "PATCH": "patch",
    "DELETE": "delete",
}


@dataclass(frozen=True)
class UserInfo:
    """``user.Info``: who a token authenticates as."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def privileged(self) -> bool:
        """``system:masters``: allowed everything by the privileged-group authorizer."""
        return MASTERS in self.groups


@dataclass(frozen=True)
class Attributes:
    """``authorizer.Attributes`` of one request (or of one SelfSubjectAccessReview)."""

    verb: str
    resource_request: bool
    path: str = ""
    group: str = ""
    version: str = ""
    namespace: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""


def request_info(method: str, path: str, query: Mapping[str, str]) -> Attributes:
    """``RequestInfoFactory.NewRequestInfo``: API prefixes ``api`` (groupless) and ``apis``."""
    non_resource = Attributes(verb=method.lower(), resource_request=False, path=path)
    parts = path.strip("/").split("/") if path.strip("/") else []
    if len(parts) < 3 or parts[0] not in ("api", "apis"):
        return non_resource
    prefix, parts = parts[0], parts[1:]
    group = ""
    if prefix == "apis":
        if len(parts) < 3:
            return non_resource
        group, parts = parts[0], parts[1:]
    version, parts = parts[0], parts[1:]
    verb_via_path = parts[0] in _SPECIAL_VERBS
    if verb_via_path:
        if len(parts) < 2:
            return non_resource  # upstream: an error, served as a non-resource request
        verb, parts = parts[0], parts[1:]
    else:
        verb = _METHOD_VERBS.get(method.upper(), "")
    namespace = ""
    if parts[0] == "namespaces" and len(parts) > 1:
        namespace = parts[1]
        if len(parts) > 2 and parts[2] not in _NAMESPACE_SUBRESOURCES:
            parts = parts[2:]
    subresource = parts[2] if len(parts) >= 3 and verb != "proxy" else ""
    name = parts[1] if len(parts) >= 2 else ""
    resource = parts[0]
    if not name and verb == "get":
        watch = query.get("watch", "").lower() not in ("", "0", "f", "false")  # ParseBool
        verb = "watch" if watch else "list"
        selector = query.get("fieldSelector", "")
        if selector:
            try:
                exact = parse_field_selector(selector).requires_exact_match("metadata.name")
            except SelectorError:
                exact = None
            if exact and "/" not in exact and exact not in (".", ".."):
                name = exact
    if not name and verb == "delete":
        verb = "deletecollection"
    return Attributes(
        verb=verb,
        resource_request=True,
        path=path,
        group=group,
        version=version,
        namespace=namespace,
        resource=resource,
        subresource=subresource,
        name=name,
    )


def forbidden(user: UserInfo, attrs: Attributes, reason: str) -> errors.APIError:
    """The 403 of ``responsewriters.Forbidden`` (``forbiddenMessage`` in ``NewForbidden``)."""
    if not attrs.resource_request:
        message = f'User "{user.name}" cannot {attrs.verb} path "{attrs.path}"'
    else:
        resource = attrs.resource + (f"/{attrs.subresource}" if attrs.subresource else "")
        where = (
            f'in the namespace "{attrs.namespace}"' if attrs.namespace else "at the cluster scope"
        )
        message = (
            f'User "{user.name}" cannot {attrs.verb} resource "{resource}" in API group '
            f'"{attrs.group}" {where}'
        )
    if reason:
        message = f"{message}: {reason}"
    if not attrs.resource_request or not attrs.resource:
        return errors.APIError(
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": f"forbidden: {message}",
                "reason": "Forbidden",
                "details": {},
                "code": 403,
            }
        )
    target = f"{attrs.resource}.{attrs.group}" if attrs.group else attrs.resource
    if attrs.name:
        target = f'{target} "{attrs.name}"'
    return errors.forbidden(
        f"{target} is forbidden: {message}", attrs.group, attrs.resource, attrs.name
    )


@dataclass(frozen=True)
class Decision:
    """What an authorizer answers: allowed, and why (``reason`` as a SubjectAccessReview has it)."""

    allowed: bool
    reason: str = ""


# ---------------------------------------------------------------------- rule matching


def _has(values: Any, wanted: str) -> bool:
    return isinstance(values, list) and ("*" in values or wanted in values)


def rule_allows(attrs: Attributes, rule: Mapping[str, Any]) -> bool:
    """``RuleAllows`` (plugin/pkg/auth/authorizer/rbac/rbac.go) with rbacv1helpers' matchers."""
    if not _has(rule.get("verbs"), attrs.verb):
        return False
    if not attrs.resource_request:
        for url in rule.get("nonResourceURLs") or []:
            if url == "*" or url == attrs.path:
                return True
            if url.endswith("*") and attrs.path.startswith(url[:-1]):
                return True
        return False
    if not _has(rule.get("apiGroups"), attrs.group):
        return False
    combined = attrs.resource + (f"/{attrs.subresource}" if attrs.subresource else "")
    resources = rule.get("resources") or []
    if not (
        "*" in resources
        or combined in resources
        or (attrs.subresource and f"*/{attrs.subresource}" in resources)
    ):
        return False
    names = rule.get("resourceNames") or []
    return not names or attrs.name in names


def _applies_to(user: UserInfo, subject: Mapping[str, Any], namespace: str) -> bool:
    """``appliesToUser``: a User by name, a Group by membership, a ServiceAccount by its username
    (its namespace defaults to the RoleBinding's)."""
    kind, name = subject.get("kind"), subject.get("name", "")
    if kind == "User":
        return bool(user.name == name)
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        sa_namespace = subject.get("namespace") or namespace
        return bool(sa_namespace) and user.name == f"system:serviceaccount:{sa_namespace}:{name}"
    return False


def _describe_subject(subject: Mapping[str, Any], binding_namespace: str) -> str:
    kind, name = subject.get("kind", ""), subject.get("name", "")
    if kind == "ServiceAccount":
        return f'{kind} "{name}/{subject.get("namespace") or binding_namespace}"'
    return f'{kind} "{name}"'


class Authorizer:
    """The RBAC authorizer over the RBAC objects stored in the simulated server."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def _objects(self, plural: str) -> Iterator[dict[str, Any]]:
        storage = self.store.storages.get(f"{plural}.{GROUP}")
        if storage is None:
            return
        for entry in storage.objects.values():
            yield entry.obj

    def _get(self, plural: str, key: str) -> dict[str, Any] | None:
        storage = self.store.storages.get(f"{plural}.{GROUP}")
        entry = storage.get(key) if storage is not None else None
        return None if entry is None else entry.obj

    def _cluster_role_rules(self, role: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        rules: list[Mapping[str, Any]] = list(role.get("rules") or [])
        aggregation = role.get("aggregationRule")
        if not aggregation:
            return rules
        try:
            selectors = [
                label_selector_from_object(s) for s in aggregation.get("clusterRoleSelectors") or []
            ]
        except SelectorError:
            return rules
        for other in self._objects("clusterroles"):
            if other is role or other.get("aggregationRule"):
                continue
            labels = other["metadata"].get("labels") or {}
            if any(s.matches(labels) for s in selectors):
                rules.extend(other.get("rules") or [])
        return rules

    def _role_rules(
        self, ref: Mapping[str, Any], namespace: str
    ) -> tuple[list[Mapping[str, Any]], str]:
        """``GetRoleReferenceRules``: the rules of a binding's role, or the NotFound message."""
        kind, name = ref.get("kind"), str(ref.get("name", ""))
        if kind == "ClusterRole":
            role = self._get("clusterroles", name)
            if role is None:
                return [], f'clusterrole.{GROUP} "{name}" not found'
            return self._cluster_role_rules(role), ""
        if kind == "Role" and namespace:
            role = self._get("roles", f"{namespace}/{name}")
            if role is None:
                return [], f'role.{GROUP} "{name}" not found'
            return list(role.get("rules") or []), ""
        return [], f"unsupported role reference kind: {kind!r}"

    def authorize(self, user: UserInfo, attrs: Attributes) -> Decision:
        """The union of the privileged-group authorizer (``system:masters``) and RBAC."""
        if user.privileged:
            return Decision(True)
        problems: list[str] = []
        for binding in self._objects("clusterrolebindings"):
            found = self._check(user, attrs, binding, "", problems)
            if found:
                return Decision(True, found)
        if attrs.namespace:
            storage = self.store.storages.get(f"rolebindings.{GROUP}")
            if storage is not None:
                prefix = f"{attrs.namespace}/"
                for key in storage.keys_from(prefix):
                    if not key.startswith(prefix):
                        break
                    found = self._check(
                        user, attrs, storage.objects[key].obj, attrs.namespace, problems
                    )
                    if found:
                        return Decision(True, found)
        if not problems:
            return Decision(False)
        joined = problems[0] if len(problems) == 1 else f"[{', '.join(problems)}]"
        return Decision(False, f"RBAC: {joined}")

    def _check(
        self,
        user: UserInfo,
        attrs: Attributes,
        binding: Mapping[str, Any],
        namespace: str,
        problems: list[str],
    ) -> str:
        """Why ``binding`` allows the request (``RBAC: allowed by ...``), or ``""``."""
        subject = next(
            (s for s in binding.get("subjects") or [] if _applies_to(user, s, namespace)), None
        )
        if subject is None:
            return ""
        ref = binding.get("roleRef") or {}
        rules, problem = self._role_rules(ref, namespace)
        if problem:
            problems.append(problem)
        if not any(rule_allows(attrs, rule) for rule in rules):
            return ""
        name = binding["metadata"]["name"]
        if namespace:
            source = f'RoleBinding "{name}/{namespace}"'
        else:
            source = f'ClusterRoleBinding "{name}"'
        return (
            f'RBAC: allowed by {source} of {ref.get("kind")} "{ref.get("name")}" to '
            f"{_describe_subject(subject, namespace)}"
        )


# ---------------------------------------------------------------------- storage


class RBACStrategy(kinds.Strategy):
    """The generic strategy with RBAC's names: ``ValidateRBACName`` is
    ``path.IsValidPathSegmentName`` (``system:discovery`` is a valid name)."""

    def name_fn(self, name: str, prefix: bool) -> list[str]:
        if not prefix and name in (".", ".."):
            return [f"may not be '{name}'"]
        return [f"may not contain '{c}'" for c in ("/", "%") if c in name]


# ---------------------------------------------------------------------- bootstrap policy


def _bootstrap_meta(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
        "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
    }


def _cluster_role(name: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "ClusterRole",
        "metadata": _bootstrap_meta(name),
        "rules": rules,
    }


def _cluster_role_binding(name: str, groups: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "ClusterRoleBinding",
        "metadata": _bootstrap_meta(name),
        "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": name},
        "subjects": [{"apiGroup": GROUP, "kind": "Group", "name": g} for g in groups],
    }


_HEALTH_URLS: Final = ["/livez", "/readyz", "/healthz", "/version", "/version/"]

BOOTSTRAP: Final[tuple[dict[str, Any], ...]] = (
    _cluster_role(
        "cluster-admin",
        [
            {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
            {"nonResourceURLs": ["*"], "verbs": ["*"]},
        ],
    ),
    _cluster_role(
        "system:discovery",
        [
            {
                "nonResourceURLs": [
                    *_HEALTH_URLS,
                    "/openapi",
                    "/openapi/*",
                    "/api",
                    "/api/*",
                    "/apis",
                    "/apis/*",
                ],
                "verbs": ["get"],
            }
        ],
    ),
    _cluster_role(
        "system:basic-user",
        [
            {
                "apiGroups": ["authorization.k8s.io"],
                "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                "verbs": ["create"],
            },
            {
                "apiGroups": ["authentication.k8s.io"],
                "resources": ["selfsubjectreviews"],
                "verbs": ["create"],
            },
        ],
    ),
    _cluster_role(
        "system:public-info-viewer", [{"nonResourceURLs": _HEALTH_URLS, "verbs": ["get"]}]
    ),
    _cluster_role_binding("cluster-admin", [MASTERS]),
    _cluster_role_binding("system:discovery", [AUTHENTICATED]),
    _cluster_role_binding("system:basic-user", [AUTHENTICATED]),
    _cluster_role_binding("system:public-info-viewer", [AUTHENTICATED, UNAUTHENTICATED]),
)
"""The bootstrap ClusterRoles and ClusterRoleBindings that matter to a service account."""
