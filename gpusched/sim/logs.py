"""``GET /api/v1/namespaces/NS/pods/NAME/log``: container logs, synthesised from pod status.

The simulation runs no processes, so a container's log is made of lines that say what the
simulated kubelet reported about it, each stamped with the time of that report:

    [sim] started on node dgx-h100-001 with GPUs 0,1
    [sim] command: python train.py --epochs 3
    [sim] exited 0 (Completed)

The first two come once the container runs (``state.running.startedAt``), the last once it
terminated (``state.terminated``). Everything around them is the real server's: the options
and their validation (``PodLogOptions``: ``container``, ``follow``, ``previous``,
``timestamps``, ``tailLines``, ``limitBytes``, ``sinceSeconds``, ``sinceTime``; 422 for a
negative ``tailLines``), the container chosen as ``LogLocation`` chooses it (400 naming the
containers when there are several), a 404 for an unknown pod, an empty 200 for a pod not yet
on a node (``LogLocation`` returns no location), and the kubelet's 400s for a container with
nothing to show (``validateContainerLogStatus``: "container "main" in pod "x" is waiting to
start: ContainerCreating", "... is not available" for a pod the kubelet rejected).
``follow=true`` streams: the pod is watched in the registry and each new line is written as
the kubelet's status patch lands, until the container terminates or the pod is deleted.
RBAC sees ``pods/log`` as a subresource (``gpusched.sim.rbac.request_info``), and discovery
lists it (``get``), as upstream.

Cost: one registry read per request, and for ``follow`` one registry watcher (filtered by
name) held for the stream's life.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
from aiohttp import web

from gpusched.sim import errors
from gpusched.sim import field as fieldlib
from gpusched.sim.registry import Registry, Resource

__all__ = [
    "LogOptions",
    "is_log_route",
    "log_lines",
    "serve_log",
    "waiting_error",
    "with_log_resource",
]

PREFIX = "[sim] "
"""Every synthesised line starts so: nobody should mistake it for a program's output."""
_GPU_IDS = "gpusched.io/gpu-ids"


def is_log_route(group: str, plural: str, subresource: str) -> bool:
    return group == "" and plural == "pods" and subresource == "log"


def with_log_resource(listing: dict[str, Any]) -> dict[str, Any]:
    """``/api/v1``'s APIResourceList (its entries sorted by name, as the real server's) with
    ``pods/log`` (``get`` only) among them."""
    entry = {"name": "pods/log", "singularName": "", "namespaced": True, "kind": "Pod"}
    resources = [*(listing.get("resources") or []), {**entry, "verbs": ["get"]}]
    return {**listing, "resources": sorted(resources, key=lambda e: str(e["name"]))}


@dataclass(frozen=True)
class LogOptions:
    """``core/v1 PodLogOptions`` as the query string gives them."""

    container: str = ""
    follow: bool = False
    previous: bool = False
    timestamps: bool = False
    tail_lines: int | None = None
    limit_bytes: int | None = None
    since_seconds: int | None = None
    since_time: datetime | None = None

    @classmethod
    def from_query(cls, query: Mapping[str, str], name: str) -> LogOptions:
        """Decoded as the parameter codec does (400 for what does not parse), then checked as
        ``ValidatePodLogOptions`` (422 ``PodLogOptions "name" is invalid``)."""
        opts = cls(
            container=query.get("container", ""),
            follow=_bool(query.get("follow")),
            previous=_bool(query.get("previous")),
            timestamps=_bool(query.get("timestamps")),
            tail_lines=_int(query, "tailLines"),
            limit_bytes=_int(query, "limitBytes"),
            since_seconds=_int(query, "sinceSeconds"),
            since_time=_time(query.get("sinceTime")),
        )
        errs: list[fieldlib.FieldError] = []
        if opts.tail_lines is not None and opts.tail_lines < 0:
            errs.append(
                fieldlib.invalid("tailLines", opts.tail_lines, "must be greater than or equal to 0")
            )
        if opts.limit_bytes is not None and opts.limit_bytes < 1:
            errs.append(fieldlib.invalid("limitBytes", opts.limit_bytes, "must be greater than 0"))
        if opts.since_seconds is not None and opts.since_time is not None:
            errs.append(
                fieldlib.forbidden(
                    "", "at most one of `sinceTime` or `sinceSeconds` may be specified"
                )
            )
        elif opts.since_seconds is not None and opts.since_seconds < 1:
            errs.append(
                fieldlib.invalid("sinceSeconds", opts.since_seconds, "must be greater than 0")
            )
        if errs:
            raise errors.invalid("PodLogOptions", "", name, errs)
        return opts


def _bool(text: str | None) -> bool:
    # strconv.ParseBool's true spellings; anything else (absent included) is false here.
    return text is not None and text in ("1", "t", "T", "true", "TRUE", "True")


def _int(query: Mapping[str, str], key: str) -> int | None:
    text = query.get(key)
    if text is None or text == "":
        return None
    try:
        return int(text)
    except ValueError:
        raise errors.bad_request(f'strconv.ParseInt: parsing "{text}": invalid syntax') from None


def _time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)
    except ValueError:
        raise errors.bad_request(
            f'parsing time "{text}" as "2006-01-02T15:04:05Z07:00": cannot parse'
        ) from None


def _parse_ts(text: str | None) -> datetime | None:
    if not text:
        return None
    with contextlib.suppress(ValueError):
        return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)
    return None


def _rfc3339nano(t: datetime) -> str:
    """Go's ``time.RFC3339Nano``: the fraction only when non-zero, trailing zeros trimmed."""
    base = t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")
    frac = f"{t.microsecond:06d}000".rstrip("0")
    return f"{base}.{frac}Z" if frac else f"{base}Z"


def choose_container(pod: Mapping[str, Any], container: str) -> str:
    """``validateContainer`` of ``pkg/registry/core/pod/strategy.go``."""
    spec = pod.get("spec") or {}
    name = pod["metadata"]["name"]
    containers = spec.get("containers") or []
    every = [
        c.get("name", "")
        for key in ("initContainers", "containers", "ephemeralContainers")
        for c in spec.get(key) or []
    ]
    if not container:
        if len(containers) == 1:
            return str(containers[0].get("name", ""))
        if not containers:
            raise errors.bad_request(f"a container name must be specified for pod {name}")
        raise errors.bad_request(
            f"a container name must be specified for pod {name}, choose one of: [{' '.join(every)}]"
        )
    if container not in every:
        raise errors.bad_request(f"container {container} is not valid for pod {name}")
    return container


def _status_of(pod: Mapping[str, Any], container: str) -> Mapping[str, Any] | None:
    status = pod.get("status") or {}
    for key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
        for cs in status.get(key) or []:
            if cs.get("name") == container:
                found: Mapping[str, Any] = cs
                return found
    return None


def waiting_error(pod: Mapping[str, Any], container: str, previous: bool) -> str | None:
    """The kubelet's refusal (``validateContainerLogStatus``) for a pod on a node, or None when
    the container has a log. A pod bound but not yet reported by the simulated kubelet is
    what a kubelet reports while it creates the container: waiting, ContainerCreating."""
    pod_name = pod["metadata"]["name"]
    quoted = f'container "{container}" in pod "{pod_name}"'
    cs = _status_of(pod, container)
    if cs is None:
        if (pod.get("status") or {}).get("phase", "Pending") != "Pending":
            return f"{quoted} is not available"
        cs = {"state": {"waiting": {"reason": "ContainerCreating"}}}
    state = cs.get("state") or {}
    last = (cs.get("lastState") or {}).get("terminated")
    if previous:
        if not last or not last.get("containerID"):
            return f'previous terminated container "{container}" in pod "{pod_name}" not found'
        return None
    if state.get("running") is not None:
        return None
    terminated = state.get("terminated")
    if terminated is not None:
        if terminated.get("containerID") or (last and last.get("containerID")):
            return None
        return f"{quoted} is terminated"
    if last is not None:
        return None if last.get("containerID") else f"{quoted} is terminated"
    waiting = state.get("waiting")
    if waiting is not None:
        reason = waiting.get("reason", "")
        if reason == "ErrImagePull":
            return f"{quoted} is waiting to start: image can't be pulled"
        if reason == "ImagePullBackOff":
            return f"{quoted} is waiting to start: trying and failing to pull image"
        return f"{quoted} is waiting to start: {reason}"
    return f"{quoted} is waiting to start - no logs yet"


def log_lines(pod: Mapping[str, Any], container: str) -> tuple[list[tuple[datetime, str]], bool]:
    """The synthesised log of ``container`` so far, and whether it has terminated (no more
    lines will come)."""
    cs = _status_of(pod, container)
    if cs is None:
        return [], False
    state = cs.get("state") or {}
    running, terminated = state.get("running"), state.get("terminated")
    started = _parse_ts((running or terminated or {}).get("startedAt"))
    lines: list[tuple[datetime, str]] = []
    if started is not None:
        annotations = pod["metadata"].get("annotations") or {}
        ids = annotations.get(_GPU_IDS)
        node = (pod.get("spec") or {}).get("nodeName", "")
        gpus = f"with GPUs {ids}" if ids else "with no GPUs assigned by gpusched"
        lines.append((started, f"{PREFIX}started on node {node} {gpus}"))
        spec: Mapping[str, Any] = next(
            (
                c
                for key in ("containers", "initContainers")
                for c in (pod.get("spec") or {}).get(key) or []
                if c.get("name") == container
            ),
            {},
        )
        argv = [*(spec.get("command") or []), *(spec.get("args") or [])]
        what = shlex.join(argv) if argv else f"the entrypoint of {spec.get('image', '?')}"
        lines.append((started, f"{PREFIX}command: {what}"))
    if terminated is not None:
        finished = _parse_ts(terminated.get("finishedAt")) or started or datetime.now(UTC)
        reason = terminated.get("reason")
        code = terminated.get("exitCode", 0)
        lines.append((finished, f"{PREFIX}exited {code}" + (f" ({reason})" if reason else "")))
    return lines, terminated is not None


class _Writer:
    """Applies ``timestamps`` and ``limitBytes`` to what goes out."""

    def __init__(self, response: web.StreamResponse, opts: LogOptions) -> None:
        self.response = response
        self.opts = opts
        self.sent = 0
        self.full = False

    async def write(self, lines: list[tuple[datetime, str]]) -> None:
        data = b"".join(
            ((f"{_rfc3339nano(t)} " if self.opts.timestamps else "") + text + "\n").encode()
            for t, text in lines
        )
        limit = self.opts.limit_bytes
        if limit is not None and self.sent + len(data) >= limit:
            data = data[: limit - self.sent]
            self.full = True
        if data:
            await self.response.write(data)
            self.sent += len(data)


def _select(
    lines: list[tuple[datetime, str]], opts: LogOptions, now: datetime
) -> list[tuple[datetime, str]]:
    since = opts.since_time
    if opts.since_seconds is not None:
        since = now - timedelta(seconds=opts.since_seconds)
    if since is not None:
        lines = [(t, text) for t, text in lines if t >= since]
    if opts.tail_lines is not None:
        lines = lines[len(lines) - opts.tail_lines :] if opts.tail_lines else []
    return lines


async def serve_log(
    request: web.Request,
    registry: Registry,
    res: Resource,
    namespace: str,
    name: str,
    stopping: asyncio.Event,
) -> web.StreamResponse:
    """Answer one ``pods/log`` GET (raises ``errors.APIError`` for the error answers)."""
    opts = LogOptions.from_query(request.query, name)
    entry = registry.get(res, namespace, name)
    pod = entry.obj
    container = choose_container(pod, opts.container)
    if not (pod.get("spec") or {}).get("nodeName"):
        return web.Response(body=b"", content_type="text/plain")  # no location: empty
    refusal = waiting_error(pod, container, opts.previous)
    if refusal is not None:
        raise errors.bad_request(refusal)
    lines, done = ([], True) if opts.previous else log_lines(pod, container)
    now = registry.clock()
    response = web.StreamResponse(headers={"Content-Type": "text/plain"})
    if opts.follow:
        response.enable_chunked_encoding()
    await response.prepare(request)
    out = _Writer(response, opts)
    await out.write(_select(lines, opts, now))
    if opts.follow and not done and not out.full:
        with contextlib.suppress(ConnectionResetError, asyncio.CancelledError):
            await _follow(out, registry, res, pod, container, len(lines), stopping)
    with contextlib.suppress(ConnectionResetError):
        await response.write_eof()
    return response


async def _follow(
    out: _Writer,
    registry: Registry,
    res: Resource,
    pod: dict[str, Any],
    container: str,
    written: int,
    stopping: asyncio.Event,
) -> None:
    """Write each new line as the pod's status changes, until the container terminates, the
    pod goes (or is replaced by one of the same name), the limit is reached or the server
    stops."""
    meta = pod["metadata"]
    start = registry.watch(
        res,
        meta.get("namespace"),
        field_selector=f"metadata.name={meta['name']}",
        resource_version=str(meta["resourceVersion"]),
    )
    watcher = start.watcher
    stop = asyncio.ensure_future(stopping.wait())
    try:
        pending = list(start.initial)
        while not out.full:
            for raw in pending:
                event = orjson.loads(raw)
                obj = event.get("object") or {}
                if event.get("type") in ("DELETED", "ERROR"):
                    return
                if (obj.get("metadata") or {}).get("uid") != meta["uid"]:
                    return
                lines, done = log_lines(obj, container)
                await out.write(lines[written:])
                written = max(written, len(lines))
                if done:
                    return
            pending = []
            if watcher.closed and not watcher.buffer:
                return
            if not watcher.buffer:
                wait = asyncio.ensure_future(watcher.wait())
                await asyncio.wait({wait, stop}, return_when=asyncio.FIRST_COMPLETED)
                wait.cancel()
                if stopping.is_set():
                    return
            pending.extend(watcher.buffer)
            watcher.buffer.clear()
    finally:
        stop.cancel()
        watcher.close()
