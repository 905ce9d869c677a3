"""HTTP front of the simulated API server: the Kubernetes REST paths over aiohttp.

Paths, verbs, query parameters, content types and error bodies follow
k8s.io/apiserver/pkg/endpoints: ``/api/v1/...`` for the core group, ``/apis/GROUP/VERSION/...``
for the others, ``namespaces/NS/`` for namespaced resources, the ``/status``, ``/binding``,
``/eviction`` and ``/log`` (``gpusched.sim.logs``) subresources, ``?watch=true`` (or the
legacy ``/watch/`` prefix) for watch streams, and discovery at ``/api``, ``/apis``,
``/apis/GROUP``, ``/api/v1`` and ``/apis/GROUP/VERSION``.
Every request must carry a bearer token (401 otherwise), except the health endpoints: the
admin token written into the kubeconfig (``system:masters``, allowed everything) or a
service-account token from ``POST .../serviceaccounts/NAME/token`` (``gpusched.sim.auth``),
whose requests the RBAC authorizer checks against the stored Roles and bindings before any
handler runs (``gpusched.sim.rbac``; 403 with the real server's message).

The REST semantics live in ``registry.Registry``; this module parses requests, applies
injected faults, calls admission webhooks (``admission.Admission``, only when a webhook
configuration exists), and streams watch events (with bookmarks and server-side timeouts).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import random
import secrets
import shutil
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
import yaml
from aiohttp import web
from multidict import MultiDict

from gpusched import __version__
from gpusched.sim import errors, logs, openapi, protobuf
from gpusched.sim.access import PATH as ACCESS_REVIEWS_PATH
from gpusched.sim.access import AccessReviews
from gpusched.sim.admission import Admission
from gpusched.sim.auth import REVIEWS_PATH as WHOAMI_PATH
from gpusched.sim.auth import Tokens, self_subject_review, set_current_user
from gpusched.sim.faults import Faults
from gpusched.sim.rbac import BOOTSTRAP, Authorizer, forbidden, request_info
from gpusched.sim.registry import Clock, ListResult, Registry, Resource
from gpusched.sim.store import Entry, Store, dumps
from gpusched.sim.tls import ServingCerts, make_serving_certs

__all__ = ["KUBE_VERSION", "APIServer"]

log = logging.getLogger(__name__)

KUBE_VERSION = {"major": "1", "minor": "32", "gitVersion": "v1.32.0"}

_JSON = "application/json"
_NOT_FOUND_PATH = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": "the server could not find the requested resource",
    "reason": "NotFound",
    "details": {},
    "code": 404,
}
_HEALTH = frozenset({"/healthz", "/livez", "/readyz"})


@dataclass
class _Route:
    group: str
    version: str
    namespace: str | None
    plural: str
    name: str
    subresource: str
    watch_path: bool


def _is_named_check(path: str) -> bool:
    """``/healthz/<check>`` (likewise livez, readyz): each check has its own handler; the bare
    ``/healthz/`` has none and is 404 like any unknown path."""
    root, _, name = path.partition("/")[2].partition("/")
    return f"/{root}" in _HEALTH and name != ""


def _json_response(
    body: bytes | dict[str, Any], status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    data = body if isinstance(body, bytes) else dumps(body)
    return web.Response(body=data, status=status, content_type=_JSON, headers=headers)


def _error_response(exc: errors.APIError) -> web.Response:
    return _json_response(exc.body(), exc.code, exc.headers)


def _bool(value: str | None) -> bool:
    return value is not None and value.lower() in ("true", "1")


def _int_param(query: Any, name: str) -> int | None:
    text = query.get(name)
    if text is None or text == "":
        return None
    try:
        return int(text)
    except ValueError:
        raise errors.bad_request(f'invalid value for {name}: "{text}"') from None


class APIServer:
    """The simulated kube-apiserver: registry + HTTP server on loopback."""

    def __init__(
        self,
        *,
        token: str | None = None,
        faults: Faults | None = None,
        clock: Clock | None = None,
        window: int = 10_000,
        bookmark_interval: float = 60.0,
        tls: bool = True,
    ) -> None:
        self.token = token or secrets.token_hex(16)
        self.tls = tls
        self.certs: ServingCerts | None = None
        self.faults = faults or Faults()
        self.clock: Clock = clock or (lambda: datetime.now(UTC))
        self.store = Store(window=window)
        self.registry = Registry(self.store, self.clock)
        self.admission = Admission(self.registry)
        self.access_reviews = AccessReviews()  # SelfSubjectAccessReviews (gpusched.sim.access)
        self.tokens = Tokens(self.store, self.clock, self.token)
        self.authorizer = Authorizer(self.store)
        self.refusals: deque[tuple[str, str]] = deque(maxlen=1000)
        """``(user, message)`` of the last 1000 requests the authorizer refused (403)."""
        self.bookmark_interval = bookmark_interval
        self.requests = 0
        self._runner: web.AppRunner | None = None
        self._watches: set[asyncio.Task[Any]] = set()
        self._stopping = asyncio.Event()
        self.host = "127.0.0.1"
        self.port = 0
        for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
            self.registry.ensure_namespace(ns)
        rbac_group = "rbac.authorization.k8s.io"
        for obj in BOOTSTRAP:
            plural = "clusterroles" if obj["kind"] == "ClusterRole" else "clusterrolebindings"
            resource = self.registry.resource(rbac_group, "v1", plural)
            assert resource is not None
            self.registry.create(resource, None, copy.deepcopy(obj))

    @property
    def url(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{self.host}:{self.port}"

    # ------------------------------------------------------------------ lifecycle

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> None:
        ssl_context = None
        if self.tls:
            self.certs = make_serving_certs(host)
            ssl_context = self.certs.server_context()
        self._runner = web.AppRunner(
            self.app(), access_log=None, handle_signals=False, shutdown_timeout=5.0
        )
        await self._runner.setup()
        site = web.TCPSite(
            self._runner, host, port, backlog=1024, reuse_address=True, ssl_context=ssl_context
        )
        await site.start()
        server = site._server
        assert server is not None
        sockets = getattr(server, "sockets", None) or []
        self.host = host
        self.port = sockets[0].getsockname()[1] if sockets else port

    async def stop(self) -> None:
        self._stopping.set()
        for st in self.store.storages.values():
            for w in list(st.watchers):
                w.close("server stopping")
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self.admission.close()
        if self.certs is not None:
            shutil.rmtree(self.certs.directory, ignore_errors=True)
            self.certs = None

    def kubeconfig(self, name: str = "gpusched-sim", token: str | None = None) -> dict[str, Any]:
        """A kubeconfig that kubernetes-asyncio and kubectl both accept, for the admin token or
        for ``token`` (a service account's)."""
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": name, "cluster": self._cluster_entry()}],
            "users": [{"name": name, "user": {"token": token or self.token}}],
            "contexts": [
                {"name": name, "context": {"cluster": name, "user": name, "namespace": "default"}}
            ],
            "current-context": name,
            "preferences": {},
        }

    def _cluster_entry(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"server": self.url}
        if self.certs is not None:
            entry["certificate-authority-data"] = self.certs.ca_data
        return entry

    # ------------------------------------------------------------------ dispatch

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        path = request.path
        if path in _HEALTH or _is_named_check(path):
            return web.Response(text="ok", content_type="text/plain")
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        user = self.tokens.authenticate(token.strip()) if scheme.lower() == "bearer" else None
        if user is None:
            return _error_response(errors.unauthorized())
        set_current_user(user)  # this request's task only: admission's userInfo
        if self.faults.latency:
            await asyncio.sleep(self.faults.latency)
        try:
            if not user.privileged:
                attrs = request_info(request.method, path, request.query)
                decision = self.authorizer.authorize(user, attrs)
                if not decision.allowed:
                    refusal = forbidden(user, attrs, decision.reason)
                    self.refusals.append((user.name, str(refusal.status["message"])))
                    raise refusal
            # go-restful (TrimRightSlashEnabled) serves /version, /api and /api/v1 with a
            # trailing slash too; /apis/ is registered on its own (UnlistedHandle).
            if path in ("/version", "/version/"):
                return _json_response(self._version())
            if path in ("/api", "/api/"):
                return _json_response(
                    {
                        "kind": "APIVersions",
                        "versions": ["v1"],
                        "serverAddressByClientCIDRs": [
                            {"clientCIDR": "0.0.0.0/0", "serverAddress": f"{self.host}:{self.port}"}
                        ],
                    }
                )
            if path in ("/apis", "/apis/"):
                return _json_response(self._group_list())
            if path == "/openapi/v3" or path.startswith("/openapi/v3/"):
                return self._openapi(path)
            parts = path.strip("/").split("/")
            if len(parts) == 2 and parts[0] == "apis":
                versions = self.registry.groups().get(parts[1])
                if not versions:
                    return _json_response(_NOT_FOUND_PATH, 404)
                return _json_response(_group_discovery(parts[1], versions))
            if path == ACCESS_REVIEWS_PATH and self.access_reviews.served:
                if request.method != "POST":
                    raise errors.method_not_allowed()
                review = self.access_reviews.create(
                    await _read_body(request), user, self.authorizer
                )
                return _json_response(review, 201)
            if path == WHOAMI_PATH:
                if request.method != "POST":
                    raise errors.method_not_allowed()
                # No spec to read: kubectl sends it as protobuf, which the simulation cannot decode.
                return _json_response(self_subject_review(user), 201)
            route = self._route(path)
            if route is None:
                return _json_response(_NOT_FOUND_PATH, 404)
            if not route.plural:
                listing = self.registry.resource_list(route.group, route.version)
                if listing is None:
                    return _json_response(_NOT_FOUND_PATH, 404)
                if route.group == "" and route.version == "v1":
                    listing = logs.with_log_resource(listing)
                return _json_response(listing)
            lost: list[errors.APIError] = []
            response = await self._resource_request(request, route, lost)
            if lost and response.status < 400:
                raise lost[0]  # applied, but the client is told it failed
            return response
        except errors.APIError as exc:
            return _error_response(exc)
        except Exception as exc:  # a bug in the simulation: answer as the real server would
            log.exception("gpusched sim: %s %s failed", request.method, request.path_qs)
            return _error_response(errors.internal_error(f"{type(exc).__name__}: {exc}"))
        finally:
            registry = self.registry
            if registry.pending_work():
                asyncio.get_running_loop().call_soon(self.registry.background)

    def _openapi(self, path: str) -> web.Response:
        """kube-openapi's handler3: ``/openapi/v3`` is the index, ``/openapi/v3/<gv>`` a
        document; a ``<gv>`` it does not know (``""`` for ``/openapi/v3/``, or one with a
        trailing slash) gets an empty 200, as ``HandleGroupVersion`` returns without writing."""
        if path == "/openapi/v3":
            return _json_response(openapi.index(self.registry))
        parts = path[len("/openapi/v3/") :].split("/")
        doc = None
        if parts[0] == "api" and len(parts) == 2:
            doc = openapi.group_version_document(self.registry, "", parts[1])
        elif parts[0] == "apis" and len(parts) == 3:
            doc = openapi.group_version_document(self.registry, parts[1], parts[2])
        if doc is None:
            return web.Response(headers={"Vary": "Accept"})
        return _json_response(doc)

    def _version(self) -> dict[str, Any]:
        return {
            **KUBE_VERSION,
            "gitCommit": "gpusched-sim",
            "gitTreeState": "clean",
            "buildDate": "2026-01-01T00:00:00Z",
            "goVersion": f"python (gpusched {__version__})",
            "compiler": "gc",
            "platform": "linux/amd64",
        }

    def _group_list(self) -> dict[str, Any]:
        groups = []
        for group, versions in self.registry.groups().items():
            if not group:
                continue
            gvs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
            groups.append({"name": group, "versions": gvs, "preferredVersion": gvs[0]})
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}

    def _route(self, path: str) -> _Route | None:
        parts = [p for p in path.split("/") if p]
        if not parts:
            return None
        if parts[0] == "api":
            if len(parts) < 2:
                return None
            group, version, rest = "", parts[1], parts[2:]
        elif parts[0] == "apis":
            if len(parts) < 3:
                return None
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return None
        watch_path = False
        if rest and rest[0] == "watch":
            watch_path, rest = True, rest[1:]
        namespace: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in ("status", "finalize"):
            namespace, rest = rest[1], rest[2:]
        if len(rest) > 3:
            return None
        return _Route(
            group=group,
            version=version,
            namespace=namespace,
            plural=rest[0] if rest else "",
            name=rest[1] if len(rest) > 1 else "",
            subresource=rest[2] if len(rest) > 2 else "",
            watch_path=watch_path,
        )

    async def _resource_request(
        self, request: web.Request, route: _Route, lost: list[errors.APIError]
    ) -> web.StreamResponse:
        """Serve one resource request; a ``:lost`` fault puts the error to answer with, once
        the request is applied, into ``lost``."""
        registry = self.registry
        query = request.query
        res = registry.resource(route.group, route.version, route.plural)
        if route.plural == "bindings" and route.group == "" and route.namespace:
            return await self._binding(request, route.namespace, "")
        if res is None:
            return _json_response(_NOT_FOUND_PATH, 404)
        if route.namespace is not None and not res.namespaced:
            return _json_response(_NOT_FOUND_PATH, 404)
        pod_log = logs.is_log_route(res.group, res.plural, route.subresource)
        if route.subresource and route.subresource not in res.subresources and not pod_log:
            return _json_response(_NOT_FOUND_PATH, 404)
        ns = route.namespace if res.namespaced else None
        method = request.method
        watch = route.watch_path or _bool(query.get("watch"))
        verb = _verb(method, bool(route.name), watch)
        if verb is None:
            raise errors.method_not_allowed()
        fault_resource = res.plural + (f"/{route.subresource}" if route.subresource else "")
        after = self.faults.check(verb, fault_resource, route.name, res.group)
        if after is not None:
            lost.append(after)
        if pod_log:  # synthesised from the pod's status (gpusched.sim.logs)
            if method != "GET" or watch:
                raise errors.method_not_allowed()
            ns_name = route.namespace or ""
            return await logs.serve_log(request, registry, res, ns_name, route.name, self._stopping)
        if route.subresource == "binding":
            if method != "POST":
                raise errors.method_not_allowed()
            return await self._binding(request, route.namespace or "", route.name)
        if route.subresource == "token" and res.plural == "serviceaccounts":
            if method != "POST":
                raise errors.method_not_allowed()
            body = await _read_body(request)
            reply = self.tokens.token_request(route.namespace or "", route.name, body)
            return _json_response(reply, 201)
        if route.subresource == "eviction":
            if method != "POST":
                raise errors.method_not_allowed()
            body = await _read_body(request)
            status = registry.evict(
                route.namespace or "", route.name, body, query.get("dryRun") == "All"
            )
            return _json_response(status, int(status["code"]))
        dry_run = query.get("dryRun") == "All"
        strict = query.get("fieldValidation") == "Strict"
        table = _wants_table(request.headers.get("Accept", ""))
        if verb == "watch":
            return await self._watch(request, res, ns)
        if verb == "list":
            listed = registry.list_objects(
                res,
                ns,
                label_selector=query.get("labelSelector", ""),
                field_selector=query.get("fieldSelector", ""),
                limit=_int_param(query, "limit") or 0,
                continue_token=query.get("continue", ""),
                resource_version=query.get("resourceVersion", ""),
                resource_version_match=query.get("resourceVersionMatch", ""),
            )
            if table:
                return _json_response(self._table(res, listed.items, listed))
            return web.Response(body=_encode_list(listed), content_type=_JSON)
        if verb == "get":
            entry = registry.get(res, ns, route.name)
            if table:
                return _json_response(self._table(res, [entry], None))
            return web.Response(body=entry.raw, content_type=_JSON)
        admission = self.admission if self.admission.active() else None
        hook_warnings: list[str] = []
        if verb == "create":
            if route.subresource:
                raise errors.method_not_allowed()
            body = await _read_body(request)
            if admission is not None:
                entry = await admission.create(res, ns, body, dry_run, strict, hook_warnings)
            else:
                entry = registry.create(res, ns, body, dry_run=dry_run, strict=strict)
            return self._written(entry, True, hook_warnings)
        if verb == "update":
            body = await _read_body(request)
            sub = "" if route.subresource == "finalize" else route.subresource
            if admission is not None:
                entry, created = await admission.update(
                    res, ns, route.name, body, sub, dry_run, strict, hook_warnings
                )
            else:
                entry, created = registry.update(res, ns, route.name, body, sub, dry_run, strict)
            return self._written(entry, created, hook_warnings)
        if verb == "patch":
            raw = await request.read()
            ctype = request.headers.get("Content-Type", "")
            if admission is not None:
                entry, created = await admission.patch(
                    res,
                    ns,
                    route.name,
                    ctype,
                    raw,
                    route.subresource,
                    dry_run,
                    strict,
                    hook_warnings,
                )
            else:
                entry, created = registry.patch(
                    res, ns, route.name, ctype, raw, route.subresource, dry_run, strict
                )
            return self._written(entry, created, hook_warnings)
        if verb == "delete":
            options = await _delete_options(request)
            if admission is not None:
                await admission.admit_delete(
                    res, ns, route.name, options, dry_run or options.get("dryRun") == ["All"]
                )
            deleted = registry.delete(
                res,
                ns,
                route.name,
                grace_period=options.get("gracePeriodSeconds"),
                preconditions=options.get("preconditions"),
                propagation=options.get("propagationPolicy") or "",
                dry_run=dry_run or options.get("dryRun") == ["All"],
                orphan_dependents=_orphan_dependents(options),
            )
            if isinstance(deleted, Entry):
                return web.Response(body=deleted.raw, content_type=_JSON)
            return _json_response(deleted)
        if verb == "deletecollection":
            options = await _delete_options(request)
            deleted_list = registry.delete_collection(
                res,
                ns,
                query.get("labelSelector", ""),
                query.get("fieldSelector", ""),
                options.get("gracePeriodSeconds"),
                propagation=options.get("propagationPolicy") or "",
                orphan_dependents=_orphan_dependents(options),
            )
            return web.Response(body=_encode_list(deleted_list), content_type=_JSON)
        raise errors.method_not_allowed()

    def _written(self, entry: Entry, created: bool, hook_warnings: list[str]) -> web.Response:
        """The object a write stored: 201 when it created it, with the request's warnings."""
        return web.Response(
            body=entry.raw,
            status=201 if created else 200,
            content_type=_JSON,
            headers=self._warnings(hook_warnings),
        )

    def _warnings(self, hook_warnings: list[str]) -> MultiDict[str]:
        """``Warning: 299 - "..."`` headers for what the last registry call (and the admission
        webhooks) warned about."""
        headers: MultiDict[str] = MultiDict()
        for text in [*hook_warnings, *self.registry.take_warnings()]:
            escaped = text.replace("\\", "\\\\").replace('"', '\\"')
            headers.add("Warning", f'299 - "{escaped}"')
        return headers

    async def _binding(self, request: web.Request, namespace: str, name: str) -> web.Response:
        body = await _read_body(request)
        if self.admission.active():
            body = await self.admission.admit_binding(namespace, name, body)
        status = self.registry.bind(namespace, name, body)
        return _json_response(status, 201)

    def _table(
        self, res: Resource, items: list[Entry], listed: ListResult | None
    ) -> dict[str, Any]:
        table = res.strategy.table([e.obj for e in items], self.clock())
        meta: dict[str, Any] = {}
        if listed is not None:
            meta["resourceVersion"] = str(listed.rv)
            if listed.continue_token:
                meta["continue"] = listed.continue_token
            if listed.remaining is not None:
                meta["remainingItemCount"] = listed.remaining
        table["metadata"] = meta
        result: dict[str, Any] = table
        return result

    # ------------------------------------------------------------------ watch

    async def _watch(
        self, request: web.Request, res: Resource, ns: str | None
    ) -> web.StreamResponse:
        query = request.query
        sie = query.get("sendInitialEvents")
        start = self.registry.watch(
            res,
            ns,
            label_selector=query.get("labelSelector", ""),
            field_selector=query.get("fieldSelector", ""),
            resource_version=query.get("resourceVersion", ""),
            resource_version_match=query.get("resourceVersionMatch", ""),
            allow_bookmarks=_bool(query.get("allowWatchBookmarks")),
            send_initial_events=None if sie is None else _bool(sie),
        )
        watcher = start.watcher
        loop = asyncio.get_running_loop()
        timeout = _int_param(query, "timeoutSeconds")
        # Without timeoutSeconds the real server picks one in [minRequestTimeout, 2x) = 30-60 min.
        deadline = loop.time() + (timeout if timeout is not None else random.uniform(1800, 3600))
        if self.faults.watch_seconds:
            deadline = min(deadline, loop.time() + self.faults.watch_seconds)
        cut_after = self.faults.watch_events or 0
        response = web.StreamResponse(
            headers={"Content-Type": _JSON, "Cache-Control": "no-cache, private"}
        )
        response.enable_chunked_encoding()
        sent = 0
        try:
            await response.prepare(request)
            pending = list(start.initial)
            next_bookmark = loop.time() + self.bookmark_interval
            while True:
                if pending:
                    if cut_after and sent + len(pending) >= cut_after:
                        pending = pending[: cut_after - sent]
                        await response.write(b"".join(pending))
                        break
                    await response.write(b"".join(pending))
                    sent += len(pending)
                    pending = []
                if watcher.closed and not watcher.buffer:
                    break
                now = loop.time()
                if now >= deadline or self._stopping.is_set():
                    break
                if start.bookmarks and now >= next_bookmark:
                    await response.write(self.registry.bookmark_line(res))
                    next_bookmark = now + self.bookmark_interval
                wake = min(deadline, next_bookmark) if start.bookmarks else deadline
                if not watcher.buffer:
                    with contextlib.suppress(TimeoutError):  # not wait_for (3.11 cancellation)
                        async with asyncio.timeout(max(wake - now, 0.0)):
                            await watcher.wait()
                pending.extend(watcher.buffer)
                watcher.buffer.clear()
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            watcher.close()
        with contextlib.suppress(ConnectionResetError):
            await response.write_eof()
        return response


def _verb(method: str, named: bool, watch: bool) -> str | None:
    if method == "GET":
        if watch:
            return "watch"
        return "get" if named else "list"
    if method == "POST":
        return "create"
    if method == "PUT":
        return "update" if named else None
    if method == "PATCH":
        return "patch" if named else None
    if method == "DELETE":
        return "delete" if named else "deletecollection"
    return None


def _wants_table(accept: str) -> bool:
    for part in accept.split(","):
        params = {p.split("=")[0].strip(): p.split("=")[-1].strip() for p in part.split(";")[1:]}
        if (
            params.get("as") == "Table"
            and params.get("g") == "meta.k8s.io"
            and params.get("v") == "v1"
        ):
            return True
        if part.strip().split(";")[0] in ("application/json", "*/*") and "as" not in params:
            return False
    return False


async def _read_body(request: web.Request) -> Any:
    raw = await request.read()
    ctype = request.headers.get("Content-Type", _JSON).split(";")[0].strip().lower()
    try:
        if ctype in ("application/yaml", "application/x-yaml"):
            return yaml.safe_load(raw)
        decoded = protobuf.decode(raw) if ctype == protobuf.CONTENT_TYPE else None
        if decoded is not None:  # what kubectl create token / auth can-i send
            return decoded
        if ctype not in ("application/json", ""):
            raise errors.APIError(
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Failure",
                    "message": "the body of the request was in an unknown format - "
                    "accepted media types include: application/json, application/yaml",
                    "reason": "UnsupportedMediaType",
                    "code": 415,
                }
            )
        return orjson.loads(raw) if raw else None
    except (ValueError, yaml.YAMLError) as exc:
        raise errors.bad_request(f"the body of the request could not be decoded: {exc}") from None


async def _delete_options(request: web.Request) -> dict[str, Any]:
    options: dict[str, Any] = {}
    raw = await request.read()
    if raw:
        try:
            body = orjson.loads(raw)
        except ValueError as exc:
            raise errors.bad_request(
                f"the body of the request could not be decoded: {exc}"
            ) from None
        if isinstance(body, dict):
            options.update(body)
    grace = _int_param(request.query, "gracePeriodSeconds")
    if grace is not None:
        options["gracePeriodSeconds"] = grace
    if "propagationPolicy" in request.query:
        options["propagationPolicy"] = request.query["propagationPolicy"]
    if "orphanDependents" in request.query:
        options["orphanDependents"] = request.query["orphanDependents"] == "true"
    gp = options.get("gracePeriodSeconds")
    if gp is not None and not isinstance(gp, int):
        raise errors.bad_request("gracePeriodSeconds must be an integer")
    return options


def _orphan_dependents(options: dict[str, Any]) -> bool | None:
    """The deprecated ``orphanDependents`` option (a bool, or absent)."""
    value = options.get("orphanDependents")
    if value is not None and not isinstance(value, bool):
        raise errors.bad_request("orphanDependents must be a boolean")
    return value


def _encode_list(result: ListResult) -> bytes:
    res = result.resource
    prefix = res.type_prefix()
    meta: dict[str, Any] = {"resourceVersion": str(result.rv)}
    if result.continue_token:
        meta["continue"] = result.continue_token
    if result.remaining is not None:
        meta["remainingItemCount"] = result.remaining
    if res.schema is not None:
        items = b",".join(e.raw for e in result.items)  # unstructured lists keep TypeMeta
    else:
        items = b",".join(
            b"{" + e.raw[len(prefix) :] if e.raw.startswith(prefix) else e.raw for e in result.items
        )
    head = b'{"kind":%s,"apiVersion":%s,"metadata":%s,"items":[' % (
        dumps(res.list_kind),
        dumps(res.api_version),
        dumps(meta),
    )
    return head + items + b"]}"


def _group_discovery(group: str, versions: list[str]) -> dict[str, Any]:
    gvs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": group,
        "versions": gvs,
        "preferredVersion": gvs[0],
    }
