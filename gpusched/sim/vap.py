"""ValidatingAdmissionPolicies enforced by the simulated API server (CEL via cel-python).

What kube-apiserver's ValidatingAdmissionPolicy plugin does
(staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/validating), for the writes the
simulation admits (``gpusched.sim.admission`` calls :meth:`Policies.validate` before the
validating webhooks): every ValidatingAdmissionPolicyBinding whose policy exists and whose
``matchConstraints`` (and the binding's ``matchResources``) match the request's operation,
group, version, resource/subresource, scope, ``resourceNames``, ``excludeResourceRules``,
``namespaceSelector`` and ``objectSelector``; then the policy's ``matchConditions`` (all true),
its ``variables`` in order, and each ``validation``. The first false validation of a binding
with the ``Deny`` action refuses the request as upstream does::

    nodes "n2" is forbidden: ValidatingAdmissionPolicy 'p' with binding 'b' denied request: <msg>

with the validation's ``reason`` (default ``Invalid``: 422; ``Forbidden``: 403) and the
message from ``message``, ``messageExpression`` or ``failed expression: <expression>``. A
``Warn`` binding adds a ``Warning`` header instead; ``Audit`` is ignored. An expression that
fails to compile or evaluate denies under ``failurePolicy: Fail`` (the default) and is skipped
under ``Ignore``.

The CEL variables are upstream's: ``object``, ``oldObject`` (null for a create or a delete
respectively), ``request`` (``kind``, ``resource``, ``subResource``, ``name``, ``namespace``,
``operation``, ``userInfo`` with the caller's ``extra``, ``dryRun``, ``options``),
``namespaceObject``, ``params`` (always null: ``paramKind`` is not supported) and
``variables``. Not supported: ``paramKind``/``paramRef`` (such a binding is skipped),
``authorizer``, ``auditAnnotations``, the Kubernetes CEL libraries beyond standard CEL (e.g.
``quantity()``, ``url()``), type checking at policy creation and ``status.typeChecking``.

Cost: with no binding stored, one length check per write. Otherwise O(bindings x rules) per
write, and for each matching one a CEL evaluation per condition, variable and validation
(compiled once per expression text and cached).
"""

from __future__ import annotations

import contextlib
import functools
import uuid
from collections.abc import Mapping
from typing import Any, Final

import celpy
from celpy import celtypes
from celpy.adapter import json_to_cel

from gpusched.sim import errors
from gpusched.sim.auth import current_user, user_info
from gpusched.sim.selectors import SelectorError, label_selector_from_object
from gpusched.sim.store import Store

__all__ = ["Policies", "Request", "request_from"]

GROUP: Final = "admissionregistration.k8s.io"
_POLICIES: Final = f"validatingadmissionpolicies.{GROUP}"
_BINDINGS: Final = f"validatingadmissionpolicybindings.{GROUP}"
_CODES: Final = {"Forbidden": 403, "Unauthorized": 401, "RequestEntityTooLarge": 413}

_ENV = celpy.Environment()


@functools.lru_cache(maxsize=1024)
def _program(expression: str) -> Any:
    return _ENV.program(_ENV.compile(expression))


class _ExpressionError(Exception):
    pass


def _evaluate(expression: str, activation: dict[str, Any]) -> Any:
    try:
        result = _program(expression).evaluate(activation)
    except Exception as exc:  # a parse error, or celpy's CELEvalError raised
        raise _ExpressionError(f"expression '{expression}' resulted in error: {exc}") from None
    if isinstance(result, Exception):
        raise _ExpressionError(f"expression '{expression}' resulted in error: {result}")
    return result


class Request:
    """One admitted write, as a policy sees it (a view of ``admission.Attributes``)."""

    def __init__(
        self,
        *,
        group: str,
        version: str,
        resource: str,
        subresource: str,
        kind: str,
        namespace: str,
        name: str,
        operation: str,
        namespaced: bool,
        obj: Mapping[str, Any] | None,
        old: Mapping[str, Any] | None,
        dry_run: bool,
        options: Mapping[str, Any],
    ) -> None:
        self.group, self.version, self.resource = group, version, resource
        self.subresource, self.kind = subresource, kind
        self.namespace, self.name, self.operation = namespace, name, operation
        self.namespaced, self.obj, self.old = namespaced, obj, old
        self.dry_run, self.options = dry_run, options

    def cel(self) -> dict[str, Any]:
        """The ``request`` variable (admissionv1.AdmissionRequest's fields)."""
        kind = {"group": self.group, "version": self.version, "kind": self.kind}
        resource = {"group": self.group, "version": self.version, "resource": self.resource}
        return {
            "uid": str(uuid.uuid4()),
            "kind": kind,
            "resource": resource,
            "subResource": self.subresource,
            "requestKind": kind,
            "requestResource": resource,
            "requestSubResource": self.subresource,
            "name": self.name,
            "namespace": self.namespace,
            "operation": self.operation,
            "userInfo": user_info(current_user()),
            "dryRun": self.dry_run,
            "options": dict(self.options),
        }


def request_from(attrs: Any, obj: Mapping[str, Any] | None) -> Request:
    """The :class:`Request` of an ``admission.Attributes`` and the object admitted."""
    return Request(
        group=attrs.group,
        version=attrs.version,
        resource=attrs.resource,
        subresource=attrs.subresource,
        kind=attrs.kind,
        namespace=attrs.namespace,
        name=attrs.name,
        operation=attrs.operation,
        namespaced=attrs.namespaced,
        obj=obj,
        old=attrs.old,
        dry_run=attrs.dry_run,
        options=attrs.options,
    )


def _rule_matches(rule: Mapping[str, Any], req: Request) -> bool:
    """A ``NamedRuleWithOperations``: operations, groups, versions, resources, scope, names."""
    ops = rule.get("operations") or ()
    if "*" not in ops and req.operation not in ops:
        return False
    if not _has(rule.get("apiGroups"), req.group) or not _has(rule.get("apiVersions"), req.version):
        return False
    scope = rule.get("scope") or "*"
    namespaced = req.namespaced and not (req.group == "" and req.resource == "namespaces")
    if scope != "*" and (scope == "Namespaced") != namespaced:
        return False
    names = rule.get("resourceNames") or ()
    if names and req.name not in names:
        return False
    wanted = f"{req.resource}/{req.subresource}" if req.subresource else req.resource
    for r in rule.get("resources") or ():
        res, _, sub = str(r).partition("/")
        if r in ("*/*", wanted) or (res == "*" and sub == req.subresource):
            return True
        if res == req.resource and sub == "*" and req.subresource:
            return True
    return False


def _has(values: Any, wanted: str) -> bool:
    return isinstance(values, (list, tuple)) and ("*" in values or wanted in values)


def _labels(obj: Mapping[str, Any] | None) -> Mapping[str, str]:
    return ((obj or {}).get("metadata") or {}).get("labels") or {}


class Policies:
    """The stored ValidatingAdmissionPolicies and their bindings, applied to writes."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def _objects(self, storage: str) -> list[dict[str, Any]]:
        st = self.store.storages.get(storage)
        return [] if st is None else [e.obj for e in st.objects.values()]

    def active(self) -> bool:
        st = self.store.storages.get(_BINDINGS)
        return st is not None and bool(len(st.objects))

    def relevant(self, req: Request) -> bool:
        """Whether a bound policy's resource rules could match (no selectors, no CEL)."""
        if not self.active() or req.group == GROUP:
            return False
        policies = {p["metadata"]["name"]: p for p in self._objects(_POLICIES)}
        for binding in self._objects(_BINDINGS):
            policy = policies.get((binding.get("spec") or {}).get("policyName", ""))
            if policy is None:
                continue
            rules = ((policy.get("spec") or {}).get("matchConstraints") or {}).get(
                "resourceRules"
            ) or []
            if any(_rule_matches(r, req) for r in rules):
                return True
        return False

    def _matches(self, match: Mapping[str, Any] | None, req: Request) -> bool:
        """``matchConstraints`` / ``matchResources`` (an absent binding constraint matches)."""
        if match is None:
            return True
        if not any(_rule_matches(r, req) for r in match.get("resourceRules") or []):
            return False
        if any(_rule_matches(r, req) for r in match.get("excludeResourceRules") or []):
            return False
        try:
            objects = label_selector_from_object(match.get("objectSelector") or {})
            namespaces = label_selector_from_object(match.get("namespaceSelector") or {})
        except SelectorError:
            return False
        if not objects.empty() and not (
            objects.matches(_labels(req.obj)) or objects.matches(_labels(req.old))
        ):
            return False
        if namespaces.empty() or not req.namespaced:
            return True
        if req.group == "" and req.resource == "namespaces":
            return namespaces.matches(_labels(req.obj or req.old))
        ns = self.store.storages["namespaces"].get(req.namespace)
        return namespaces.matches(_labels(ns.obj if ns is not None else None))

    def validate(self, req: Request) -> list[str]:
        """Raise the first denial; return the warnings of ``Warn`` bindings."""
        if req.group == GROUP:
            return []
        policies = {p["metadata"]["name"]: p for p in self._objects(_POLICIES)}
        warnings: list[str] = []
        for binding in self._objects(_BINDINGS):
            bspec = binding.get("spec") or {}
            policy = policies.get(bspec.get("policyName", ""))
            if policy is None:
                continue
            spec = policy.get("spec") or {}
            if spec.get("paramKind") or not self._matches(spec.get("matchConstraints"), req):
                continue
            if not self._matches(bspec.get("matchResources"), req):
                continue
            actions = bspec.get("validationActions") or []
            for message, reason in self._violations(spec, req):
                text = (
                    f"ValidatingAdmissionPolicy '{policy['metadata']['name']}' with binding "
                    f"'{binding['metadata']['name']}' denied request: {message}"
                )
                if "Deny" in actions:
                    raise self._denial(req, text, reason)
                if "Warn" in actions:
                    warnings.append(
                        f"Validation failed for ValidatingAdmissionPolicy "
                        f"'{policy['metadata']['name']}' with binding "
                        f"'{binding['metadata']['name']}': {message}"
                    )
        return warnings

    def _violations(self, spec: Mapping[str, Any], req: Request) -> list[tuple[str, str]]:
        """``(message, reason)`` of each failed validation (one for a failed expression)."""
        ignore = spec.get("failurePolicy") == "Ignore"
        namespace = None
        if req.namespaced and req.namespace:
            ns = self.store.storages["namespaces"].get(req.namespace)
            namespace = ns.obj if ns is not None else None
        activation: dict[str, Any] = {
            "object": json_to_cel(dict(req.obj) if req.obj is not None else None),
            "oldObject": json_to_cel(dict(req.old) if req.old is not None else None),
            "request": json_to_cel(req.cel()),
            "namespaceObject": json_to_cel(namespace),
            "params": None,
        }
        variables: dict[Any, Any] = {}
        activation["variables"] = celtypes.MapType(variables)
        out: list[tuple[str, str]] = []
        try:
            for condition in spec.get("matchConditions") or []:
                if not _evaluate(str(condition.get("expression", "")), activation):
                    return []
            for variable in spec.get("variables") or []:
                value = _evaluate(str(variable.get("expression", "")), activation)
                variables[celtypes.StringType(variable.get("name", ""))] = value
                activation["variables"] = celtypes.MapType(variables)
            for validation in spec.get("validations") or []:
                expression = str(validation.get("expression", ""))
                if _evaluate(expression, activation):
                    continue
                message = " ".join(str(validation.get("message") or "").split())
                if validation.get("messageExpression"):
                    with contextlib.suppress(_ExpressionError):
                        message = str(_evaluate(validation["messageExpression"], activation))
                if not message:
                    message = f"failed expression: {expression.strip()}"
                out.append((message, str(validation.get("reason") or "Invalid")))
        except _ExpressionError as exc:
            return [] if ignore else [(str(exc), "Invalid")]
        return out

    @staticmethod
    def _denial(req: Request, text: str, reason: str) -> errors.APIError:
        """``admission.NewForbidden`` with the validation's reason and code, text as cause."""
        name = req.name or str(((req.obj or req.old or {}).get("metadata") or {}).get("name", ""))
        target = f"{req.resource}.{req.group}" if req.group else req.resource
        if name:
            target = f'{target} "{name}"'
        details: dict[str, Any] = {"name": name} if name else {}
        if req.group:
            details["group"] = req.group
        details["kind"] = req.resource
        details["causes"] = [{"message": text}]
        return errors.APIError(
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": f"{target} is forbidden: {text}",
                "reason": reason,
                "details": details,
                "code": _CODES.get(reason, 422),
            }
        )
