"""``Kube``: plain-JSON requests and watch streams through kubernetes-asyncio's ApiClient.

kubernetes-asyncio does the parts worth having from a client: kubeconfig and in-cluster
configuration, bearer tokens and exec plugins, TLS, the aiohttp connection pool. Its generated
models, however, cost a deserialisation pass per object that dominates list and watch hot
paths, so gpusched keeps objects as the JSON dicts the server sent (``_preload_content=False``)
and decodes them once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import orjson
import yarl
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config

from gpusched.kube.errors import APIServerError, from_response

__all__ = ["Kube", "KubeconfigError", "connect", "resolve_kubeconfig", "resource_path"]

Query = Mapping[str, str | int | bool] | Sequence[tuple[str, str]]


def resource_path(
    group: str,
    version: str,
    plural: str,
    namespace: str | None = None,
    name: str | None = None,
    subresource: str | None = None,
) -> str:
    """``/api/v1/namespaces/ns/pods/name/status`` and the like."""
    base = f"/apis/{group}/{version}" if group else f"/api/{version}"
    if namespace:
        base += f"/namespaces/{quote(namespace, safe='')}"
    base += f"/{plural}"
    if name:
        base += f"/{quote(name, safe='')}"
        if subresource:
            base += f"/{subresource}"
    return base


def _query(query: Query | None) -> list[tuple[str, str]]:
    if not query:
        return []
    items = query.items() if isinstance(query, Mapping) else query
    out = []
    for k, v in items:
        if isinstance(v, bool):
            v = "true" if v else "false"
        out.append((k, str(v)))
    return out


def _read_environment_once(api_client: k8s_client.ApiClient) -> None:
    """Settle the proxy from the environment once, instead of on every request.

    kubernetes-asyncio opens its aiohttp session with ``trust_env=True``, so every request
    looks up ``~/.netrc`` and the ``*_PROXY`` variables in a worker thread (two thread
    round-trips per request: 15% of the scheduler's CPU per bound pod, measured with
    benchmarks/scheduler_perf.py). The environment does not change under a running process:
    the proxy for the API server (``HTTPS_PROXY``/``NO_PROXY``, as client-go honours them) is
    resolved here and set on the client, and the per-request lookup is turned off. netrc
    credentials, which no Kubernetes client uses, are not read.
    """
    rest = getattr(api_client, "rest_client", None)
    session = getattr(rest, "pool_manager", None)
    if rest is None or not isinstance(session, aiohttp.ClientSession) or not session.trust_env:
        return
    if not rest.proxy:
        with contextlib.suppress(LookupError, ValueError):
            proxy, proxy_auth = aiohttp.helpers.get_env_proxy_for_url(
                yarl.URL(str(api_client.configuration.host))
            )
            rest.proxy = str(proxy)
            if proxy_auth is not None:
                rest.proxy_headers = {"Proxy-Authorization": proxy_auth.encode()}
    session._trust_env = False  # aiohttp has no public setter


class Kube:
    """A JSON client over one ``kubernetes_asyncio.client.ApiClient``."""

    def __init__(self, api_client: k8s_client.ApiClient) -> None:
        self.api_client = api_client
        _read_environment_once(api_client)

    @property
    def host(self) -> str:
        return str(self.api_client.configuration.host)

    async def close(self) -> None:
        await self.api_client.close()

    async def __aenter__(self) -> Kube:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _send(
        self,
        method: str,
        path: str,
        query: Query | None,
        body: Any,
        content_type: str,
        timeout: float | aiohttp.ClientTimeout | None,
    ) -> aiohttp.ClientResponse:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        try:
            response: aiohttp.ClientResponse = await self.api_client.call_api(
                path,
                method,
                query_params=_query(query),
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=timeout,
            )
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise APIServerError(0, {"reason": "ConnectionError", "message": str(exc)}) from exc
        return response

    async def request(
        self,
        method: str,
        path: str,
        query: Query | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | None = 60.0,
    ) -> Any:
        """One request; returns the decoded JSON body or raises an ``APIError``."""
        response = await self._send(method, path, query, body, content_type, timeout)
        try:
            data = await response.read()
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise APIServerError(0, {"reason": "ConnectionError", "message": str(exc)}) from exc
        finally:
            response.release()
        if not 200 <= response.status < 300:
            raise from_response(response.status, data, response.headers)
        return orjson.loads(data) if data else None

    @property
    def pool_size(self) -> int:
        """Most connections the client keeps open to the API server."""
        return int(self.api_client.configuration.connection_pool_maxsize or 1)

    async def warm(self, connections: int) -> int:
        """Open up to ``connections`` pooled connections now (``connections`` concurrent ``GET
        /version``), so that a burst of requests later does not pay a TCP and TLS handshake per
        connection: client-go multiplexes one HTTP/2 connection, aiohttp opens one connection
        per concurrent HTTP/1.1 request, and at start-up a scheduler with a backlog opens as
        many as it binds at once, each handshake costing the client and the API server a few
        milliseconds of CPU. Idle connections close after aiohttp's keep-alive (15 s). Returns
        how many requests succeeded; failures are left to the requests that follow."""
        n = max(0, min(connections, self.pool_size))
        results = await asyncio.gather(
            *(self.request("GET", "/version", timeout=10.0) for _ in range(n)),
            return_exceptions=True,
        )
        return sum(1 for r in results if not isinstance(r, BaseException))

    async def get(self, path: str, query: Query | None = None) -> Any:
        return await self.request("GET", path, query)

    async def create(self, path: str, body: Any, query: Query | None = None) -> Any:
        return await self.request("POST", path, query, body)

    async def replace(self, path: str, body: Any) -> Any:
        return await self.request("PUT", path, None, body)

    async def patch(
        self, path: str, body: Any, patch_type: str = "application/merge-patch+json"
    ) -> Any:
        return await self.request("PATCH", path, None, body, content_type=patch_type)

    async def delete(self, path: str, body: Any = None, query: Query | None = None) -> Any:
        return await self.request("DELETE", path, query, body)

    async def watch(self, path: str, query: Query | None = None) -> AsyncIterator[dict[str, Any]]:
        """Yield decoded watch events until the server ends the stream.

        An ERROR event is raised as the matching ``APIError`` (a 410 becomes ``APIGone``).
        """
        params = dict(_query(query))
        params["watch"] = "true"
        async for line in self.lines(path, params):
            event = orjson.loads(line)
            if event.get("type") == "ERROR":
                status = event.get("object") or {}
                raise from_response(int(status.get("code", 500)), json.dumps(status))
            yield event

    async def lines(self, path: str, query: Query | None = None) -> AsyncIterator[bytes]:
        """Yield a plain-text body line by line as it arrives (``pods/log``, ``follow=true``
        streams until the container ends), each with its newline; raises the ``APIError`` of
        a failed request."""
        response = await self._send(
            "GET", path, query, None, "application/json", aiohttp.ClientTimeout(sock_read=None)
        )
        try:
            if not 200 <= response.status < 300:
                raise from_response(response.status, await response.read(), response.headers)
            while True:
                try:
                    line = await response.content.readline()
                except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                    raise APIServerError(
                        0, {"reason": "ConnectionError", "message": str(exc)}
                    ) from exc
                if not line:
                    return
                yield line
        finally:
            response.release()


class KubeconfigError(Exception):
    """No cluster configuration to load; the message says what to give."""


def resolve_kubeconfig(
    flag: str | os.PathLike[str] | None,
    env: Mapping[str, str] | None = None,
    home: Path | None = None,
) -> str | None:
    """The kubeconfig kubectl would read, for every gpusched command: ``--kubeconfig``, else
    ``KUBECONFIG`` (a ``:``-separated list, merged as kubectl merges it: the first file to
    set a key wins; empty counts as unset), else ``~/.kube/config``; ``None`` means the
    in-cluster service account (``KUBERNETES_SERVICE_HOST`` set). Raises
    :class:`KubeconfigError` when none of the named files exists, or there is nothing at all."""
    env = os.environ if env is None else env
    given = os.fspath(flag) if flag is not None else env.get("KUBECONFIG")
    if given:
        paths = [os.path.expanduser(p) for p in given.split(os.pathsep) if p]
        if not any(os.path.exists(p) for p in paths):
            what = "--kubeconfig" if flag is not None else "KUBECONFIG"
            raise KubeconfigError(f"{what} {given}: no such file")
        return given
    default = (home or Path.home()) / ".kube" / "config"
    if default.exists():
        return str(default)
    if env.get("KUBERNETES_SERVICE_HOST"):
        return None
    raise KubeconfigError(
        "no kubeconfig: give --kubeconfig FILE or set KUBECONFIG (none at ~/.kube/config, "
        "and not running in a cluster)"
    )


async def connect(
    kubeconfig: str | os.PathLike[str] | None = None,
    context: str | None = None,
    pool_size: int = 100,
    *,
    env: Mapping[str, str] | None = None,
) -> Kube:
    """A ``Kube`` for the kubeconfig :func:`resolve_kubeconfig` finds (``kubeconfig`` is the
    ``--kubeconfig`` flag), or the in-cluster service account. Raises
    :class:`KubeconfigError`, or the client library's error for a file it cannot load."""
    path = resolve_kubeconfig(kubeconfig, env)
    configuration = k8s_client.Configuration()
    if path is None:
        k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        await k8s_config.load_kube_config(
            config_file=path, context=context, client_configuration=configuration
        )
    configuration.connection_pool_maxsize = pool_size
    return Kube(k8s_client.ApiClient(configuration))
