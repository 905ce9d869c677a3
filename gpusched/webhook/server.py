"""The HTTPS server that answers the API server's AdmissionReview v1 requests.

``POST /mutate`` and ``POST /validate`` take an ``admission.k8s.io/v1`` ``AdmissionReview``
and answer one with the request's ``uid``:

- ``/validate``: ``allowed: false`` with ``status.message`` (the validator's message, which
  says what is wrong and what fixes it) and ``status.code`` 403, or ``allowed: true``;
- ``/mutate``: ``allowed: true`` with ``patchType: JSONPatch`` and the base64 ``patch`` when
  there is something to change, and ``warnings`` (printed by kubectl) when a user's own
  variable was kept.

Only ``CREATE`` of a ``Pod`` is looked at (the registration asks for nothing else; anything
else is allowed unchanged). A body that is not an AdmissionReview v1 is answered 400 with
what was expected. An exception in a validator or the MIG fallback hook is answered as the
``failurePolicy`` setting says (``gpusched.webhook.config``).

The validator and the fallback hook are constructor arguments, so the scheduler's request
readers and its cluster knowledge plug in without this module knowing them. One request
costs one JSON parse and the mutation's O(containers x variables); nothing is shared between
requests, so the server needs no locks and scales by replicas.
"""

from __future__ import annotations

import base64
import logging
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from gpusched.webhook.config import WebhookConfig
from gpusched.webhook.mutate import MigFallback, Mutation, mutate_pod
from gpusched.webhook.validate import Validator, default_validator

__all__ = ["API_VERSION", "ReviewError", "WebhookServer", "server_ssl_context"]

log = logging.getLogger(__name__)

API_VERSION = "admission.k8s.io/v1"
# The API server sends objects of up to ~1.5 MiB (etcd's limit) wrapped in a review, with the
# old object too on updates: aiohttp's 1 MiB default would refuse a large pod.
MAX_BODY = 8 * 1024 * 1024


class ReviewError(ValueError):
    """A request body that is not an AdmissionReview v1; answered 400 with this message."""


def server_ssl_context(cert: str | Path, key: str | Path) -> ssl.SSLContext:
    """A TLS 1.2+ server context from PEM files (API servers speak TLS 1.2 and 1.3)."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(cert), str(key))
    return ctx


def _parse(body: bytes) -> dict[str, Any]:
    try:
        review = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ReviewError(f"the body is not JSON ({exc}): send an AdmissionReview") from None
    if not isinstance(review, dict) or review.get("kind") != "AdmissionReview":
        raise ReviewError("the body is not an AdmissionReview")
    if review.get("apiVersion") != API_VERSION:
        raise ReviewError(
            f"AdmissionReview {review.get('apiVersion')} is not served: register the webhook "
            f'with admissionReviewVersions: ["v1"]'
        )
    request = review.get("request")
    if not isinstance(request, dict) or not request.get("uid"):
        raise ReviewError("the AdmissionReview has no request with a uid")
    return request


def _is_pod_create(request: Mapping[str, Any]) -> bool:
    kind = request.get("kind") or {}
    return (
        request.get("operation") == "CREATE"
        and kind.get("group", "") == ""
        and kind.get("kind") == "Pod"
        and isinstance(request.get("object"), dict)
    )


class WebhookServer:
    """gpusched's admission webhook: ``start()`` serves, ``stop()`` stops.

    ``validator`` defaults to ``default_validator()``; ``mig_fallback`` to none (no request is
    rewritten). ``review_mutate``/``review_validate`` answer a parsed request without HTTP.
    """

    def __init__(
        self,
        *,
        validator: Validator | None = None,
        mig_fallback: MigFallback | None = None,
        config: WebhookConfig | None = None,
    ) -> None:
        self.validator = validator if validator is not None else default_validator()
        self.mig_fallback = mig_fallback
        self.config = config or WebhookConfig()
        self.port = 0
        self._runner: web.AppRunner | None = None

    # -- answers, without HTTP -------------------------------------------------------------

    def _ours(self, request: Mapping[str, Any]) -> bool:
        spec = request["object"].get("spec") or {}
        return spec.get("schedulerName") in self.config.scheduler_names

    def _failed(self, uid: str, what: str, exc: Exception) -> dict[str, Any]:
        log.error("%s failed", what, exc_info=exc)
        text = f"gpusched's webhook could not {what} ({type(exc).__name__}: {exc})"
        if self.config.failure_policy == "Ignore":
            return {
                "uid": uid,
                "allowed": True,
                "warnings": [f"{text}; admitted unchecked because its failurePolicy is Ignore"],
            }
        return {
            "uid": uid,
            "allowed": False,
            "status": {
                "code": 500,
                "message": f"{text}; retry, or ask the cluster admin to check the webhook's logs",
            },
        }

    def review_validate(self, request: Mapping[str, Any]) -> dict[str, Any]:
        uid = request["uid"]
        if not _is_pod_create(request) or not self._ours(request):
            return {"uid": uid, "allowed": True}
        try:
            message = self.validator(request["object"])
        except Exception as exc:
            return self._failed(uid, "validate the pod", exc)
        if message is None:
            return {"uid": uid, "allowed": True}
        return {
            "uid": uid,
            "allowed": False,
            "status": {"code": 403, "reason": "Forbidden", "message": message},
        }

    async def review_mutate(self, request: Mapping[str, Any]) -> dict[str, Any]:
        uid = request["uid"]
        if not _is_pod_create(request):
            return {"uid": uid, "allowed": True}
        try:
            mutation: Mutation = await mutate_pod(
                request["object"],
                scheduler_names=self.config.scheduler_names,
                mig_fallback=self.mig_fallback,
                visible_devices_for_device_plugin_pods=(
                    self.config.visible_devices_for_device_plugin_pods
                ),
            )
        except Exception as exc:
            return self._failed(uid, "mutate the pod", exc)
        response: dict[str, Any] = {"uid": uid, "allowed": True}
        if mutation.ops:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(orjson.dumps(mutation.ops)).decode()
        if mutation.warnings:
            response["warnings"] = mutation.warnings
        return response

    # -- HTTP ------------------------------------------------------------------------------

    @staticmethod
    def _answer(response: dict[str, Any]) -> web.Response:
        review = {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}
        return web.Response(body=orjson.dumps(review), content_type="application/json")

    async def _mutate(self, http: web.Request) -> web.Response:
        try:
            request = _parse(await http.read())
        except ReviewError as exc:
            return web.Response(status=400, text=str(exc))
        return self._answer(await self.review_mutate(request))

    async def _validate(self, http: web.Request) -> web.Response:
        try:
            request = _parse(await http.read())
        except ReviewError as exc:
            return web.Response(status=400, text=str(exc))
        return self._answer(self.review_validate(request))

    async def _healthz(self, http: web.Request) -> web.Response:
        return web.Response(text="ok")

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_post("/mutate", self._mutate)
        app.router.add_post("/validate", self._validate)
        app.router.add_get("/healthz", self._healthz)
        return app

    async def start(
        self, host: str = "0.0.0.0", port: int = 8443, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        """Serve on ``host:port`` (0: a free port, then in ``self.port``); HTTPS when
        ``ssl_context`` is given, which is what API servers require."""
        self._runner = web.AppRunner(self.app(), access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, ssl_context=ssl_context)
        await site.start()
        sockets = getattr(site._server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
