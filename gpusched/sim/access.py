"""``authorization.k8s.io/v1`` SelfSubjectAccessReviews: "may I do this?", asked by a client.

The review is answered by the authorizer that guards the caller's own requests
(:class:`gpusched.sim.rbac.Authorizer`): the admin token is allowed everything, a
service-account token what the stored RBAC grants it, with upstream's ``reason`` (``RBAC:
allowed by ...``). A test may also configure denials (:attr:`AccessReviews.denied`, applied
before the authorizer) to play a token whose Role lacks a rule, or turn the resource off
(:attr:`AccessReviews.served` False) to play an API server that does not serve it (404).
Create only, never stored (the real REST storage is ``rest.Creater`` alone): the answer is the
request with ``status`` filled in. Validation is upstream's ``ValidateSelfSubjectAccessReview``
(exactly one of resourceAttributes and nonResourceAttributes; empty metadata). Costs nothing
until a client asks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpusched.sim import errors
from gpusched.sim.field import ErrorType, FieldError, struct
from gpusched.sim.rbac import Attributes, Authorizer, UserInfo

__all__ = ["GROUP", "PATH", "AccessReviews"]

GROUP = "authorization.k8s.io"
PATH = f"/apis/{GROUP}/v1/selfsubjectaccessreviews"


@dataclass
class AccessReviews:
    """The answers to SelfSubjectAccessReviews.

    ``denied`` holds ``(verb, group, resource)`` triples (``resource`` with its subresource as
    ``pods/binding``; ``"*"`` in any place matches all) that the token may not do."""

    denied: set[tuple[str, str, str]] = field(default_factory=set)
    served: bool = True

    def allows(self, verb: str, group: str, resource: str) -> bool:
        return not any(
            all(d in ("*", v) for d, v in zip(rule, (verb, group, resource), strict=True))
            for rule in self.denied
        )

    def create(
        self, body: Any, user: UserInfo | None = None, authorizer: Authorizer | None = None
    ) -> dict[str, Any]:
        """The created review (201) for ``user`` (the admin when None), or raises the API
        error the real server would."""
        if not isinstance(body, dict) or body.get("kind", "SelfSubjectAccessReview") != (
            "SelfSubjectAccessReview"
        ):
            raise errors.bad_request("the body is not a SelfSubjectAccessReview")
        spec = body.get("spec") or {}
        attrs = spec.get("resourceAttributes")
        non_resource = spec.get("nonResourceAttributes")
        errs: list[FieldError] = []
        if attrs is not None and non_resource is not None:
            errs.append(
                FieldError(
                    "spec.nonResourceAttributes",
                    ErrorType.INVALID,
                    struct(non_resource),
                    "cannot be specified in combination with resourceAttributes",
                )
            )
        if attrs is None and non_resource is None:
            errs.append(
                FieldError(
                    "spec.resourceAttributes",
                    ErrorType.INVALID,
                    None,
                    "exactly one of nonResourceAttributes or resourceAttributes must be specified",
                )
            )
        metadata = {k: v for k, v in (body.get("metadata") or {}).items() if k != "managedFields"}
        if metadata:
            errs.append(
                FieldError("metadata", ErrorType.INVALID, struct(metadata), "must be empty")
            )
        if errs:
            raise errors.invalid("SelfSubjectAccessReview", GROUP, "", errs)
        status: dict[str, Any] = {"allowed": True}
        if attrs is not None:
            resource = str(attrs.get("resource", ""))
            if attrs.get("subresource"):
                resource += f"/{attrs['subresource']}"
            denied = not self.allows(
                str(attrs.get("verb", "")), str(attrs.get("group", "")), resource
            )
            asked = Attributes(
                verb=str(attrs.get("verb", "")),
                resource_request=True,
                group=str(attrs.get("group", "")),
                version=str(attrs.get("version", "")),
                namespace=str(attrs.get("namespace", "")),
                resource=str(attrs.get("resource", "")),
                subresource=str(attrs.get("subresource", "")),
                name=str(attrs.get("name", "")),
            )
        else:
            non_resource = non_resource or {}
            denied = not self.allows(str(non_resource.get("verb", "")), "", "*")
            asked = Attributes(
                verb=str(non_resource.get("verb", "")),
                resource_request=False,
                path=str(non_resource.get("path", "")),
            )
        if denied:
            status["allowed"] = False  # RBAC has no opinion: no reason (omitempty), as upstream
        elif user is not None and authorizer is not None:
            decision = authorizer.authorize(user, asked)
            status["allowed"] = decision.allowed
            if decision.reason:
                status["reason"] = decision.reason
        return {
            "kind": "SelfSubjectAccessReview",
            "apiVersion": f"{GROUP}/v1",
            "metadata": {"creationTimestamp": None},
            "spec": spec,
            "status": status,
        }
