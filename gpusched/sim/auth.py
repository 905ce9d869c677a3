"""Authentication for the simulated API server: the admin token and service-account tokens.

kube-apiserver authenticates each request's bearer token to a ``user.Info``; this module does
the same for two kinds of token:

- the admin token written into the cluster's kubeconfig: user ``gpusched-sim`` in
  ``system:masters``, allowed everything (as kubeadm's admin.conf);
- service-account tokens issued by ``POST /api/v1/namespaces/NS/serviceaccounts/NAME/token``
  (an ``authentication.k8s.io/v1`` TokenRequest, pkg/registry/core/serviceaccount/storage/
  token.go): user ``system:serviceaccount:NS:NAME`` with the service account's UID, groups
  ``system:serviceaccounts``, ``system:serviceaccounts:NS`` and ``system:authenticated``. A token
  bound to a Pod (``spec.boundObjectRef``) carries the pod's name and UID, and, as 1.30+ does,
  the name and UID of the pod's node as extra ``authentication.kubernetes.io/node-name`` and
  ``node-uid``; one bound to a Node carries the node's. Every token carries
  ``authentication.kubernetes.io/credential-id`` (``JTI=<jti>``).

Tokens are JWTs with the claims the real server writes (``iss``, ``sub``, ``aud``, ``exp``,
``iat``, ``nbf``, ``jti``, ``kubernetes.io``), signed HS256 with a key made per server (the
real server signs RS256; no client checks the signature). A token stops authenticating (401)
once it expires on the server's clock, or once its service account or bound object is deleted
or recreated with another UID, as the real token validator checks. ``POST
/apis/authentication.k8s.io/v1/selfsubjectreviews`` (``kubectl auth whoami``) shows the user a
token authenticates as. Nothing is stored: a TokenRequest costs one HMAC, an authentication one
HMAC and a store lookup per bound object.
"""

from __future__ import annotations

import base64
import contextvars
import hashlib
import hmac
import secrets
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import orjson

from gpusched.sim import errors
from gpusched.sim.field import ErrorType, FieldError
from gpusched.sim.rbac import AUTHENTICATED, MASTERS, UserInfo
from gpusched.sim.store import Store

__all__ = [
    "ADMIN",
    "AUDIENCE",
    "EXTRA_NODE_NAME",
    "GROUP",
    "ISSUER",
    "REVIEWS_PATH",
    "Tokens",
    "self_subject_review",
    "service_account_user",
    "set_current_user",
    "user_info",
]

GROUP: Final = "authentication.k8s.io"
ISSUER: Final = "https://kubernetes.default.svc.cluster.local"
AUDIENCE: Final = ISSUER
"""The API server's audience (``--api-audiences`` defaults to the issuer)."""
REVIEWS_PATH: Final = f"/apis/{GROUP}/v1/selfsubjectreviews"
"""SelfSubjectReviews (``kubectl auth whoami``): the caller's user as the server sees it."""
EXTRA_PREFIX: Final = "authentication.kubernetes.io/"
EXTRA_NODE_NAME: Final = f"{EXTRA_PREFIX}node-name"
DEFAULT_EXPIRATION: Final = 3600
MIN_EXPIRATION: Final = 600
MAX_EXPIRATION: Final = 1 << 32

ADMIN: Final = UserInfo("gpusched-sim", groups=(MASTERS, AUTHENTICATED))
"""Who the admin token authenticates as (the kubeconfig's user name)."""

_CURRENT_USER: contextvars.ContextVar[UserInfo] = contextvars.ContextVar(
    "gpusched_sim_user", default=ADMIN
)


def current_user() -> UserInfo:
    """Who made the request being served (admission's ``userInfo``); the admin outside one."""
    return _CURRENT_USER.get()


def set_current_user(user: UserInfo) -> None:
    """Set by the server for the task serving one request."""
    _CURRENT_USER.set(user)


def user_info(user: UserInfo) -> dict[str, Any]:
    """``authenticationv1.UserInfo`` as JSON (empty fields omitted)."""
    info: dict[str, Any] = {"username": user.name}
    if user.uid:
        info["uid"] = user.uid
    if user.groups:
        info["groups"] = list(user.groups)
    if user.extra:
        info["extra"] = {k: list(v) for k, v in sorted(user.extra.items())}
    return info


def service_account_user(namespace: str, name: str) -> str:
    """``serviceaccount.MakeUsername``."""
    return f"system:serviceaccount:{namespace}:{name}"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _timestamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Tokens:
    """Issues and authenticates the tokens of one simulated API server."""

    def __init__(self, store: Store, clock: Callable[[], datetime], admin_token: str) -> None:
        self.store = store
        self.clock = clock
        self.admin_token = admin_token
        self._key = secrets.token_bytes(32)
        self._header = _b64(orjson.dumps({"alg": "HS256", "kid": _b64(self._key[:8])}))

    # ------------------------------------------------------------------ lookups

    def _object(self, storage: str, key: str) -> dict[str, Any] | None:
        st = self.store.storages.get(storage)
        entry = st.get(key) if st is not None else None
        return None if entry is None else entry.obj

    # ------------------------------------------------------------------ issue

    def token_request(self, namespace: str, name: str, body: Any) -> dict[str, Any]:
        """Serve ``POST serviceaccounts/NAME/token``: the TokenRequest with its status filled."""
        if not isinstance(body, dict) or body.get("kind", "TokenRequest") != "TokenRequest":
            raise errors.bad_request("the body is not a TokenRequest")
        spec = dict(body.get("spec") or {})
        seconds = spec.get("expirationSeconds", DEFAULT_EXPIRATION)
        if seconds is None:
            seconds = DEFAULT_EXPIRATION
        errs: list[FieldError] = []
        if not isinstance(seconds, int) or seconds < MIN_EXPIRATION:
            errs.append(
                FieldError(
                    "spec.expirationSeconds",
                    ErrorType.INVALID,
                    seconds,
                    "may not specify a duration less than 10 minutes",
                )
            )
        elif seconds > MAX_EXPIRATION:
            errs.append(
                FieldError(
                    "spec.expirationSeconds",
                    ErrorType.INVALID,
                    seconds,
                    "may not specify a duration larger than 2^32 seconds",
                )
            )
        if errs:
            raise errors.invalid("TokenRequest", GROUP, name, errs)
        audiences = list(spec.get("audiences") or []) or [AUDIENCE]
        token, expiry = self.issue(
            namespace,
            name,
            bound=spec.get("boundObjectRef"),
            expiration_seconds=seconds,
            audiences=audiences,
        )
        spec.update(
            audiences=audiences,
            expirationSeconds=seconds,
            boundObjectRef=spec.get("boundObjectRef"),
        )
        metadata = {
            k: v for k, v in (body.get("metadata") or {}).items() if k not in ("managedFields",)
        }
        metadata.update(name=name, namespace=namespace, creationTimestamp=None)
        return {
            "kind": "TokenRequest",
            "apiVersion": f"{GROUP}/v1",
            "metadata": metadata,
            "spec": spec,
            "status": {"token": token, "expirationTimestamp": _timestamp(expiry)},
        }

    def issue(
        self,
        namespace: str,
        name: str,
        *,
        bound: dict[str, Any] | None = None,
        expiration_seconds: int = DEFAULT_EXPIRATION,
        audiences: list[str] | None = None,
    ) -> tuple[str, datetime]:
        """A token for the service account ``namespace/name`` and its expiry; raises the
        API error the real TokenRequest answers (NotFound, BadRequest, Conflict)."""
        account = self._object("serviceaccounts", f"{namespace}/{name}")
        if account is None:
            raise errors.not_found("", "serviceaccounts", name)
        now = self.clock()
        expiry = now + timedelta(seconds=expiration_seconds)
        jti = str(uuid.uuid4())
        private: dict[str, Any] = {
            "namespace": namespace,
            "serviceaccount": {"name": name, "uid": account["metadata"].get("uid", "")},
        }
        if bound is not None:
            private.update(self._bound(namespace, name, bound))
        claims = {
            "aud": audiences or [AUDIENCE],
            "exp": int(expiry.timestamp()),
            "iat": int(now.timestamp()),
            "iss": ISSUER,
            "jti": jti,
            "kubernetes.io": private,
            "nbf": int(now.timestamp()),
            "sub": service_account_user(namespace, name),
        }
        signing_input = f"{self._header}.{_b64(orjson.dumps(claims))}"
        return f"{signing_input}.{self._sign(signing_input)}", expiry

    def _bound(self, namespace: str, name: str, ref: dict[str, Any]) -> dict[str, Any]:
        kind, ref_name = ref.get("kind", ""), str(ref.get("name", ""))
        api_version = str(ref.get("apiVersion", ""))
        group = api_version.rpartition("/")[0] if "/" in api_version else ""
        out: dict[str, Any] = {}
        if group == "" and kind == "Pod":
            pod = self._object("pods", f"{namespace}/{ref_name}")
            if pod is None:
                raise errors.not_found("", "pods", ref_name)
            if (pod.get("spec") or {}).get("serviceAccountName") != name:
                raise errors.bad_request(
                    f'cannot bind token for serviceaccount "{name}" to pod running with '
                    "different serviceaccount name."
                )
            uid = pod["metadata"].get("uid", "")
            out["pod"] = {"name": ref_name, "uid": uid}
            node_name = (pod.get("spec") or {}).get("nodeName")
            if node_name:
                node = self._object("nodes", node_name)
                out["node"] = {"name": node_name}
                if node is not None:
                    out["node"]["uid"] = node["metadata"].get("uid", "")
        elif group == "" and kind == "Node":
            node = self._object("nodes", ref_name)
            if node is None:
                raise errors.not_found("", "nodes", ref_name)
            uid = node["metadata"].get("uid", "")
            out["node"] = {"name": ref_name, "uid": uid}
        elif group == "" and kind == "Secret":
            secret = self._object("secrets", f"{namespace}/{ref_name}")
            if secret is None:
                raise errors.not_found("", "secrets", ref_name)
            uid = secret["metadata"].get("uid", "")
            out["secret"] = {"name": ref_name, "uid": uid}
        else:
            gvk = f"{group}/{api_version.rpartition('/')[2]}, Kind={kind}"
            raise errors.bad_request(f"cannot bind token to object of type {gvk}")
        if ref.get("uid") and ref["uid"] != uid:
            raise errors.conflict(
                group,
                kind,
                ref_name,
                f"the UID in the bound object reference ({ref['uid']}) does not match the UID "
                f"in record ({uid}). The object might have been deleted and then recreated",
            )
        return out

    def _sign(self, signing_input: str) -> str:
        return _b64(hmac.new(self._key, signing_input.encode(), hashlib.sha256).digest())

    # ------------------------------------------------------------------ authenticate

    def authenticate(self, token: str) -> UserInfo | None:
        """Who ``token`` is, or None (401)."""
        if hmac.compare_digest(token.encode(), self.admin_token.encode()):
            return ADMIN
        head, _, rest = token.partition(".")
        payload, _, signature = rest.partition(".")
        if head != self._header or not hmac.compare_digest(
            signature.encode(), self._sign(f"{head}.{payload}").encode()
        ):
            return None
        claims = orjson.loads(_unb64(payload))
        if claims["exp"] <= self.clock().timestamp():
            return None
        private = claims["kubernetes.io"]
        namespace = private["namespace"]
        account = private["serviceaccount"]
        live = self._object("serviceaccounts", f"{namespace}/{account['name']}")
        if live is None or live["metadata"].get("uid", "") != account["uid"]:
            return None
        extra: dict[str, tuple[str, ...]] = {
            f"{EXTRA_PREFIX}credential-id": (f"JTI={claims['jti']}",)
        }
        for kind, storage, key in (
            ("pod", "pods", f"{namespace}/{(private.get('pod') or {}).get('name')}"),
            ("secret", "secrets", f"{namespace}/{(private.get('secret') or {}).get('name')}"),
        ):
            ref = private.get(kind)
            if ref is None:
                continue
            obj = self._object(storage, key)
            if obj is None or obj["metadata"].get("uid", "") != ref["uid"]:
                return None
            if kind == "pod":
                extra[f"{EXTRA_PREFIX}pod-name"] = (ref["name"],)
                extra[f"{EXTRA_PREFIX}pod-uid"] = (ref["uid"],)
        node = private.get("node")
        if node is not None:
            if "pod" not in private:  # a token bound to the node itself dies with it
                live_node = self._object("nodes", node["name"])
                if live_node is None or live_node["metadata"].get("uid", "") != node["uid"]:
                    return None
            extra[EXTRA_NODE_NAME] = (node["name"],)
            if node.get("uid"):
                extra[f"{EXTRA_PREFIX}node-uid"] = (node["uid"],)
        return UserInfo(
            service_account_user(namespace, account["name"]),
            uid=account["uid"],
            groups=("system:serviceaccounts", f"system:serviceaccounts:{namespace}", AUTHENTICATED),
            extra=extra,
        )


def self_subject_review(user: UserInfo) -> dict[str, Any]:
    """The created SelfSubjectReview: ``status.userInfo`` of the caller (omitempty fields)."""
    return {
        "kind": "SelfSubjectReview",
        "apiVersion": f"{GROUP}/v1",
        "metadata": {"creationTimestamp": None},
        "status": {"userInfo": user_info(user)},
    }
