"""Helpers shared by the API-server conformance tests (``test_conformance_*.py``).

The tests drive the target cluster (the simulated kube-apiserver, or a real one when
``GPUSCHED_E2E_KUBECONFIG`` is set) through the real kubernetes-asyncio client over HTTP. The
typed APIs are used wherever their models can hold what the server sends; where a model would
hide or reject part of the answer (a ``metav1.Status`` from ``pods/binding``, an
``events.k8s.io`` Event without ``eventTime``, response headers, watch streams read line by
line) the same generated methods are called with ``_preload_content=False`` and the JSON is
read as sent.

Nothing here sleeps to let things settle: waiting is done on watch events, and every wait is
bounded by ``WAIT`` seconds so that a broken server fails a test instead of hanging it.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException

WAIT = 30.0
"""Upper bound, in seconds, on any wait for the server; never asserted on."""

NO_SCHEDULER = "gpusched-conformance-none"
"""``spec.schedulerName`` of test pods, so that no scheduler of a real cluster binds them."""

RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"


# --------------------------------------------------------------------------- plain HTTP


@dataclass
class Reply:
    """One HTTP answer: status code, headers and the decoded JSON body (or text)."""

    status: int
    headers: Any  # a CIMultiDictProxy: use .get() / .getall()
    body: Any


def _decode(data: bytes) -> Any:
    if not data:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return data.decode("utf-8", "replace")


async def call(method: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Reply:
    """Call a generated API method with ``_preload_content=False``; any status is returned."""
    response = await method(*args, _preload_content=False, **kwargs)
    try:
        data = await response.read()
    finally:
        response.release()
    return Reply(response.status, response.headers, _decode(data))


async def http(
    api: k8s.ApiClient,
    method: str,
    path: str,
    *,
    query: Mapping[str, str] | None = None,
    body: Any = None,
    content_type: str = "application/json",
) -> Reply:
    """A request on any path through the client's own ``call_api`` (auth, TLS, session)."""
    response = await api.call_api(
        path,
        method,
        query_params=list((query or {}).items()),
        header_params={"Accept": "application/json", "Content-Type": content_type},
        body=body,
        auth_settings=["BearerToken"],
        _preload_content=False,
    )
    try:
        data = await response.read()
    finally:
        response.release()
    return Reply(response.status, response.headers, _decode(data))


async def fails(awaitable: Awaitable[Any], code: int) -> dict[str, Any]:
    """Await a typed call that must fail with HTTP ``code``; returns the Status body."""
    with pytest.raises(ApiException) as info:
        await awaitable
    exc = info.value
    assert exc.status == code, f"expected HTTP {code}, got {exc.status}: {exc.body!r}"
    raw = exc.body.encode() if isinstance(exc.body, str) else exc.body or b""
    body = _decode(raw)
    assert isinstance(body, dict), f"the error body is not a JSON object: {exc.body!r}"
    return body


def failure(
    code: int, reason: str, message: str, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A ``metav1.Status`` of failure exactly as kube-apiserver encodes it."""
    status: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    }
    if details is not None:
        status["details"] = details
    status["code"] = code
    return status


def details(name: str, resource: str, group: str = "") -> dict[str, Any]:
    """``StatusDetails`` for a named object (``kind`` holds the resource, as upstream)."""
    out: dict[str, Any] = {"name": name}
    if group:
        out["group"] = group
    out["kind"] = resource
    return out


# --------------------------------------------------------------------------- objects


def rv(obj: Mapping[str, Any]) -> int:
    """An object's resourceVersion as a number (etcd revisions; only compared in tests)."""
    return int(obj["metadata"]["resourceVersion"])


def ts(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def names(items: list[dict[str, Any]]) -> list[str]:
    return [item["metadata"]["name"] for item in items]


def pod(name: str, *, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    """A minimal pod no scheduler will touch; ``spec`` entries are merged into its spec."""
    metadata: dict[str, Any] = {"name": name}
    if labels:
        metadata["labels"] = labels
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "schedulerName": NO_SCHEDULER,
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
            **spec,
        },
    }


def gpu_pod(name: str, gpus: int, **metadata: Any) -> dict[str, Any]:
    body = pod(name)
    body["metadata"].update(metadata)
    body["spec"]["containers"][0]["resources"] = {
        "requests": {"nvidia.com/gpu": str(gpus)},
        "limits": {"nvidia.com/gpu": str(gpus)},
    }
    return body


def node(name: str) -> dict[str, Any]:
    """A Node with no kubelet behind it (neither the simulated one nor a real one)."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"gpusched.io/conformance": "true"}},
    }


def lease(name: str, holder: str = "gpusched-0", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, **spec},
    }


def binding(pod_name: str, node_name: str, **annotations: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": pod_name}
    if annotations:
        meta["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": meta,
        "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
    }


def condition(obj: Mapping[str, Any], kind: str) -> dict[str, Any] | None:
    for cond in (obj.get("status") or {}).get("conditions") or ():
        if cond.get("type") == kind:
            return dict(cond)
    return None


def phase(obj: Mapping[str, Any]) -> str:
    return str((obj.get("status") or {}).get("phase", ""))


# --------------------------------------------------------------------------- waiting


async def eventually(check: Callable[[], Any]) -> None:
    """Poll ``check`` (a function or coroutine function) until it is true, bounded by WAIT.

    Only for progress no watch can show: a real server's handlers and discovery catching up
    with a CRD, or a simulated kubelet arming a timer on its clock.
    """
    async with asyncio.timeout(WAIT):
        while True:
            result = check()
            if inspect.isawaitable(result):
                result = await result
            if result:
                return
            await asyncio.sleep(0.02)


# --------------------------------------------------------------------------- watching


class EventStream:
    """A watch read line by line, as sent (``watch=true`` on a list method, raw JSON).

    ``async with EventStream(core.list_namespaced_pod, ns, resource_version=v) as events``;
    ``await events.next()`` is the next event, or ``None`` once the server ended the stream.
    """

    def __init__(self, method: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> None:
        self._method = method
        self._args = args
        self._kwargs = kwargs
        self._response: Any = None

    async def __aenter__(self) -> EventStream:
        self._response = await self._method(
            *self._args, watch=True, _preload_content=False, **self._kwargs
        )
        if self._response.status != 200:
            data = await self._response.read()
            self._response.release()
            raise AssertionError(f"watch answered HTTP {self._response.status}: {data!r}")
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._response.close()

    async def next(self) -> dict[str, Any] | None:
        async with asyncio.timeout(WAIT):
            while True:
                line = await self._response.content.readline()
                if not line:
                    return None
                if line.strip():
                    event: dict[str, Any] = json.loads(line)
                    return event

    async def take(self, count: int, *, skip_bookmarks: bool = True) -> list[dict[str, Any]]:
        """The next ``count`` events (bookmarks skipped); fails if the stream ends first."""
        out: list[dict[str, Any]] = []
        while len(out) < count:
            event = await self.next()
            assert event is not None, f"the stream ended after {out}"
            if skip_bookmarks and event["type"] == "BOOKMARK":
                continue
            out.append(event)
        return out

    async def until(self, predicate: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """Read until an event matches ``predicate``; fails if the stream ends first."""
        while True:
            event = await self.next()
            assert event is not None, "the stream ended before the awaited event"
            if predicate(event):
                return event

    async def rest(self) -> list[dict[str, Any]]:
        """Every event until the server ends the stream."""
        out: list[dict[str, Any]] = []
        while (event := await self.next()) is not None:
            out.append(event)
        return out


def summary(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """``[(type, name), ...]`` of watch events, for readable assertions."""
    return [(e["type"], e["object"].get("metadata", {}).get("name", "")) for e in events]


async def wait_for(
    list_method: Callable[..., Awaitable[Any]],
    *args: Any,
    name: str,
    until: Callable[[dict[str, Any]], bool],
) -> dict[str, Any]:
    """List ``name`` and watch it until ``until(object)`` holds; returns that object.

    Re-lists when the server ends the watch, so it also survives cut or expired streams.
    """
    selector = f"metadata.name={name}"
    async with asyncio.timeout(WAIT):
        while True:
            listing = await call(list_method, *args, field_selector=selector)
            assert listing.status == 200, listing.body
            for item in listing.body["items"]:
                if until(item):
                    return dict(item)
            version = listing.body["metadata"]["resourceVersion"]
            async with EventStream(
                list_method, *args, field_selector=selector, resource_version=version
            ) as events:
                while (event := await events.next()) is not None:
                    if event["type"] == "ERROR":
                        break
                    if event["type"] in ("ADDED", "MODIFIED") and until(event["object"]):
                        return dict(event["object"])


async def wait_gone(
    list_method: Callable[..., Awaitable[Any]], *args: Any, name: str
) -> dict[str, Any] | None:
    """Wait until ``name`` is deleted; returns the DELETED event's object (None if never seen)."""
    selector = f"metadata.name={name}"
    async with asyncio.timeout(WAIT):
        while True:
            listing = await call(list_method, *args, field_selector=selector)
            assert listing.status == 200, listing.body
            if not listing.body["items"]:
                return None
            version = listing.body["metadata"]["resourceVersion"]
            async with EventStream(
                list_method, *args, field_selector=selector, resource_version=version
            ) as events:
                while (event := await events.next()) is not None:
                    if event["type"] == "DELETED":
                        return dict(event["object"])
                    if event["type"] == "ERROR":
                        break


async def default_service_account(target: Any) -> None:
    """On a real cluster, wait for the namespace's ``default`` ServiceAccount: pods are
    rejected until the controller-manager has created it. The simulation has none to wait for.
    """
    if target.is_sim:
        return
    core = target.core()
    await wait_for(
        core.list_namespaced_service_account, target.namespace, name="default", until=bool
    )
