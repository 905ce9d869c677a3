"""``authorization.k8s.io/v1`` SelfSubjectAccessReviews: "may I do this?", asked by a client.

The simulated API server has one bearer token with full access and enforces no RBAC, so every
review is allowed, as the real server answers a cluster-admin token, unless a test configures
denials (:attr:`AccessReviews.denied`) to play a service account whose Role lacks a rule, or
turns the resource off (:attr:`AccessReviews.served` False) to play an API server that does not
serve it (404). Create only, never stored (the real REST storage is ``rest.Creater`` alone):
the answer is the request with ``status`` filled in. Validation is upstream's
``ValidateSelfSubjectAccessReview`` (exactly one of resourceAttributes and
nonResourceAttributes; empty metadata). Costs nothing until a client asks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpusched.sim import errors
from gpusched.sim.field import ErrorType, FieldError, struct

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

    def create(self, body: Any) -> dict[str, Any]:
        """The created review (201), or raises the API error the real server would."""
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
        if attrs is not None:
            resource = str(attrs.get("resource", ""))
            if attrs.get("subresource"):
                resource += f"/{attrs['subresource']}"
            allowed = self.allows(str(attrs.get("verb", "")), str(attrs.get("group", "")), resource)
        else:
            allowed = self.allows(str((non_resource or {}).get("verb", "")), "", "*")
        status: dict[str, Any] = {"allowed": allowed}
        if not allowed:
            status["reason"] = ""  # RBAC has no opinion: denied without a reason, as upstream
        return {
            "kind": "SelfSubjectAccessReview",
            "apiVersion": f"{GROUP}/v1",
            "metadata": {"creationTimestamp": None},
            "spec": spec,
            "status": status,
        }
