"""``gpusched run`` and ``gpusched cleanup``: start a GPU job for gpusched and see it placed.

``run`` turns a few options into a pod (or a gang: N pods and their scheduler-plugins
``PodGroup`` with ``minMember`` N) whose GPU request is written the documented way
(docs/gpu_requests.md: ``nvidia.com/gpu`` for whole GPUs, ``gpusched.io/gpu`` and
``gpusched.io/vram`` for a VRAM slice, the ``gpusched.io/*`` annotations for the rest), checked
by the scheduler's own reader before anything is sent. Everything it creates carries
``gpusched.io/run: NAME`` and ``app.kubernetes.io/managed-by: gpusched-run``, which is all
``cleanup`` deletes, and what makes a name in use an error rather than a second set.

It then *watches* (list, then watch from the list's resourceVersion; no polling) the pods and
their Events, printing each new Event (FailedScheduling with its message, Scheduled, and
Pulled/Started where a kubelet reports them) until every pod is bound (exit 0, with node
and GPU ids from the binding's annotations), or, with ``--follow``, running; then it streams
their logs (``pods/log?follow=true``) and exits with the container's exit code. At
``--timeout``, or when a pod fails or is deleted first, it exits 1 with the last reason, the
``gpusched explain`` command and the cleanup command; Ctrl-C leaves everything running and says
how to clean up (exit 130). Bad options are a :class:`RunError` (the CLI exits 2), found
before the cluster is contacted.

Permissions (RBAC): create, get, list, watch and delete ``pods`` and ``podgroups``
(``scheduling.x-k8s.io``), list and watch ``events``, get ``pods/log`` (for ``--follow``).

Costs: one list and one watch each for the run's pods and the namespace's Events (filtered by
name for a single pod; client-side by uid for a gang), and one log stream per pod.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

from kubernetes_asyncio.config import list_kube_config_contexts

from gpusched.annotations import GPU_IDS, PRIORITY
from gpusched.gangs import scheduler_plugins as podgroups
from gpusched.gpu_requests import RequestError, read_gpu_request
from gpusched.gpu_requests.native import (
    EXCLUSIVE,
    GPU_IDS_REQUEST,
    PREFERRED_NODE,
    RESOURCE_SHARED_GPU,
    RESOURCE_VRAM,
)
from gpusched.inventory import RESOURCE_GPU
from gpusched.kube.client import Kube, resource_path
from gpusched.kube.errors import APIError, APIForbidden, APIGone, APINotFound

__all__ = [
    "CONTAINER",
    "DEFAULT_IMAGE",
    "MANAGED_BY",
    "MANAGER",
    "RUN_LABEL",
    "Plan",
    "RunError",
    "RunOptions",
    "build_plan",
    "cleanup",
    "kubeconfig_namespace",
    "parse_annotation",
    "parse_duration",
    "parse_node_selector",
    "parse_toleration",
    "run",
]

RUN_LABEL = "gpusched.io/run"
"""On everything ``gpusched run`` creates: the run's name."""
MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "gpusched-run"
CONTAINER = "main"
DEFAULT_IMAGE = "nvidia/cuda:12.6.3-base-ubuntu24.04"
SCHEDULER_NAME = "gpusched"
SCHEDULED_EVENT_GRACE = 2.0
"""Seconds a bound run waits for its pods' Scheduled Events (they trail the binding) before
exiting without them."""

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


class RunError(ValueError):
    """Options that cannot make a run; the message says what to change."""


def parse_duration(text: str) -> float:
    """``30m``, ``90s``, ``1h30m``, ``250ms`` (Go's ``time.ParseDuration`` units) in seconds;
    ``0`` for no limit."""
    value = text.strip()
    if value == "0":
        return 0.0
    parts = _DURATION_PART.findall(value)
    if not value or "".join(n + u for n, u in parts) != value:
        raise RunError(
            f"--timeout {text!r} is not a duration: write a number with a unit, e.g. 30m, 90s, "
            "1h30m or 250ms (0: no limit)"
        )
    return sum(float(n) * _UNIT[u] for n, u in parts)


def kubeconfig_namespace(kubeconfig: str | None, context: str | None) -> str:
    """The namespace of the kubeconfig's context (``context``, else the current one), as
    kubectl defaults ``-n``; ``default`` when it names none or cannot be read."""
    try:
        contexts, current = list_kube_config_contexts(config_file=kubeconfig)
    except Exception:  # no file, a broken one: connecting will say so
        return "default"
    chosen = next((c for c in contexts if c.get("name") == context), None) if context else None
    entry = (chosen or current or {}).get("context") or {}
    return str(entry.get("namespace") or "default")


def parse_annotation(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` of ``--annotation``."""
    key, eq, value = text.partition("=")
    if not eq or not key.strip() or " " in key:
        raise RunError(f"--annotation {text!r}: write KEY=VALUE, e.g. team=vision")
    return key.strip(), value


def parse_node_selector(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` of ``--node-selector``."""
    key, eq, value = text.partition("=")
    if not eq or not key.strip() or " " in key:
        raise RunError(
            f"--node-selector {text!r}: write KEY=VALUE, e.g. nvidia.com/gpu.product=NVIDIA-H100"
        )
    return key.strip(), value.strip()


_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def parse_toleration(text: str) -> dict[str, str]:
    """``KEY[=VALUE][:EFFECT]`` of ``--toleration``, as the taint it tolerates is written
    (``kubectl taint nodes n KEY=VALUE:EFFECT``): without a value any value is tolerated
    (``Exists``), without an effect every effect."""
    body, colon, effect = text.rpartition(":") if ":" in text else (text, "", "")
    key, eq, value = body.partition("=")
    key = key.strip()
    if not key or " " in key or (colon and effect not in _EFFECTS):
        raise RunError(
            f"--toleration {text!r}: write KEY[=VALUE][:EFFECT] as the node's taint is "
            f"written, e.g. nvidia.com/gpu=present:NoSchedule (EFFECT one of "
            f"{', '.join(_EFFECTS)})"
        )
    toleration = {"key": key, "operator": "Equal" if eq else "Exists"}
    if eq:
        toleration["value"] = value.strip()
    if colon:
        toleration["effect"] = effect
    return toleration


@dataclass(frozen=True)
class RunOptions:
    """What ``gpusched run`` was asked (each field is the flag of the same name)."""

    name: str
    command: tuple[str, ...] = ()
    gpus: int | None = None
    """GPUs per pod; default 1 (or as many as ``gpu_ids`` lists)."""
    vram: str | None = None
    """VRAM per GPU (``16Gi``): shared GPUs (``gpusched.io/gpu`` + ``gpusched.io/vram``);
    without it, whole GPUs (``nvidia.com/gpu``)."""
    exclusive: bool = False
    gpu_ids: str | None = None
    prefer_node: str | None = None
    gang: int | None = None
    priority: str | None = None
    image: str = DEFAULT_IMAGE
    namespace: str = "default"
    timeout: float = 1800.0
    """Seconds to wait until bound (running with ``follow``); 0: no limit."""
    follow: bool = False
    annotations: tuple[tuple[str, str], ...] = ()
    scheduler_name: str = SCHEDULER_NAME
    """The gpusched profile (``schedulerName``): ``gpusched``, or e.g. ``gpusched-spread``."""
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[dict[str, str], ...] = ()
    """Taints the pods tolerate (``nvidia.com/gpu=present:NoSchedule`` on GKE's GPU nodes)."""


@dataclass
class Plan:
    """The objects a run creates: its PodGroup (a gang) and its pods."""

    options: RunOptions
    pods: list[dict[str, Any]]
    pod_group: dict[str, Any] | None = None
    request: str = ""
    """The GPU request in words: ``2 whole GPUs (nvidia.com/gpu: 2)``."""

    @property
    def pod_names(self) -> list[str]:
        return [p["metadata"]["name"] for p in self.pods]


def _labels(name: str) -> dict[str, str]:
    return {RUN_LABEL: name, MANAGED_BY: MANAGER}


def build_plan(opts: RunOptions) -> Plan:
    """The pod (or the gang's pods and PodGroup) for ``opts``; :class:`RunError` for options
    that make no valid request. Pure: no cluster."""
    for what, value in (("--name", opts.name), ("--namespace", opts.namespace)):
        if len(value) > 63 or not _DNS1123_LABEL.match(value):
            raise RunError(
                f"{what} {value!r} is not a valid name: at most 63 lower-case letters, digits "
                "and '-', starting and ending with a letter or digit"
            )
    if opts.gang is not None and opts.gang < 1:
        raise RunError(f"--gang {opts.gang}: a gang has at least 1 pod")
    if opts.gang is not None and len(f"{opts.name}-{opts.gang - 1}") > 63:
        raise RunError(f"--name {opts.name!r} is too long for a gang's pod names (NAME-N)")
    if opts.vram is not None and opts.gpus is None:
        raise RunError("--vram is VRAM per GPU: give --gpus N too (e.g. --gpus 1 --vram 16Gi)")
    ids = [p.strip() for p in opts.gpu_ids.split(",")] if opts.gpu_ids is not None else None
    gpus = opts.gpus if opts.gpus is not None else (len(ids) if ids else 1)
    if gpus < 1:
        raise RunError(f"--gpus {gpus}: ask for at least 1 GPU")
    if not opts.image.strip():
        raise RunError("--image is empty: name a container image")
    if not opts.scheduler_name.strip() or " " in opts.scheduler_name:
        raise RunError(
            f"--scheduler-name {opts.scheduler_name!r}: name a gpusched profile, e.g. gpusched"
        )
    annotations: dict[str, str] = {}
    if opts.exclusive:
        annotations[EXCLUSIVE] = "true"
    if opts.gpu_ids is not None:
        annotations[GPU_IDS_REQUEST] = opts.gpu_ids
    if opts.prefer_node is not None:
        annotations[PREFERRED_NODE] = opts.prefer_node
    if opts.priority is not None:
        annotations[PRIORITY] = opts.priority
    for key, value in opts.annotations:
        if key in annotations and annotations[key] != value:
            raise RunError(f"--annotation {key}={value} contradicts the flag that sets {key}")
        annotations[key] = value
    if opts.vram is not None:
        limits = {RESOURCE_SHARED_GPU: str(gpus), RESOURCE_VRAM: opts.vram}
        request = (
            f"{gpus} shared GPU{'s' if gpus > 1 else ''} with {opts.vram} VRAM"
            f"{' each' if gpus > 1 else ''}, "
            f"{RESOURCE_SHARED_GPU}: {gpus}"
        )
    else:
        limits = {RESOURCE_GPU: str(gpus)}
        request = f"{gpus} whole GPU{'s' if gpus > 1 else ''}, {RESOURCE_GPU}: {gpus}"
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": opts.image,
        "resources": {"limits": limits},
    }
    if opts.command:
        container["command"] = list(opts.command)
    names = [opts.name] if opts.gang is None else [f"{opts.name}-{i}" for i in range(opts.gang)]
    pods = []
    for pod_name in names:
        labels = _labels(opts.name)
        if opts.gang is not None:
            labels[podgroups.LABEL] = opts.name
        meta: dict[str, Any] = {"name": pod_name, "namespace": opts.namespace, "labels": labels}
        if annotations:
            meta["annotations"] = dict(annotations)
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": meta,
                "spec": _pod_spec(opts, container),
            }
        )
    try:  # the scheduler's own reader: what it would reject, rejected here
        read_gpu_request(pods[0])
    except RequestError as exc:
        raise RunError(_as_flags(str(exc))) from None
    group = None
    if opts.gang is not None:
        group = {
            "apiVersion": f"{podgroups.GROUP}/{podgroups.VERSION}",
            "kind": "PodGroup",
            "metadata": {
                "name": opts.name,
                "namespace": opts.namespace,
                "labels": _labels(opts.name),
            },
            "spec": {"minMember": opts.gang},
        }
    return Plan(opts, pods, group, request)


def _pod_spec(opts: RunOptions, container: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": opts.scheduler_name,
        "restartPolicy": "Never",
        "containers": [dict(container)],
    }
    if opts.node_selector:
        spec["nodeSelector"] = dict(opts.node_selector)
    if opts.tolerations:
        spec["tolerations"] = [dict(t) for t in opts.tolerations]
    return spec


_FLAG_OF = {
    RESOURCE_VRAM: "--vram",
    GPU_IDS_REQUEST: "--gpu-ids",
    PREFERRED_NODE: "--prefer-node",
    PRIORITY: "--priority",
}


def _as_flags(message: str) -> str:
    """The reader's message, with the flag that wrote each field named beside it."""
    for key, flag in _FLAG_OF.items():
        message = message.replace(key, f"{flag} ({key})", 1) if key in message else message
    return message


# ---------------------------------------------------------------------------- run


def _say(out: TextIO, text: str) -> None:
    print(text, file=out, flush=True)


def _cleanup_hint(opts: RunOptions) -> str:
    return f"gpusched cleanup --name {opts.name} -n {opts.namespace}"


def _devices(pod: Mapping[str, Any]) -> str:
    """The GPU indices the binding annotated (their UUIDs: ``gpusched explain``)."""
    ids = (pod["metadata"].get("annotations") or {}).get(GPU_IDS)
    return f"GPUs {ids}" if ids else "no GPU ids annotated"


def _phase(pod: Mapping[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def _terminated(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") == CONTAINER:
            state: Mapping[str, Any] | None = (cs.get("state") or {}).get("terminated")
            return state
    return None


class _Failed(Exception):
    """The run cannot reach its goal (a pod failed or went away): the message says why."""


@dataclass
class _Watch:
    """The run's pods and Events as the watches report them, and what was printed."""

    kube: Kube
    plan: Plan
    out: TextIO
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    uids: set[str] = field(default_factory=set)
    last_reason: str = ""
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    failure: str = ""
    events_listed: asyncio.Event = field(default_factory=asyncio.Event)
    scheduled: set[str] = field(default_factory=set)
    """Pods whose Scheduled Event was printed."""
    _said: dict[str, str] = field(default_factory=dict)
    _bound: set[str] = field(default_factory=set)
    _running: set[str] = field(default_factory=set)

    @property
    def ns(self) -> str:
        return self.plan.options.namespace

    def pod_updated(self, kind: str, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        if name not in self.plan.pod_names:
            return
        if kind == "DELETED":
            self.pods.pop(name, None)
            self.failure = self.failure or f"pod {self.ns}/{name} was deleted"
        elif pod["metadata"].get("uid") in self.uids:
            self.pods[name] = pod
            node = (pod.get("spec") or {}).get("nodeName")
            if node and name not in self._bound:
                self._bound.add(name)
                _say(self.out, f"pod {self.ns}/{name} bound to {node}: {_devices(pod)}")
            status = pod.get("status") or {}
            if _phase(pod) == "Running" and name not in self._running:
                self._running.add(name)
                _say(self.out, f"pod {self.ns}/{name} running")
            if _phase(pod) == "Failed" and _terminated(pod) is None:
                why = ": ".join(s for s in (status.get("reason"), status.get("message")) if s)
                self.last_reason = why or self.last_reason
                self.failure = self.failure or f"pod {self.ns}/{name} failed: {why}"
            for cond in status.get("conditions") or []:
                if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                    self.last_reason = cond.get("message") or self.last_reason
        self.changed.set()

    def event_seen(self, event: Mapping[str, Any]) -> None:
        involved = event.get("involvedObject") or {}
        if involved.get("uid") not in self.uids:
            return
        uid = event["metadata"].get("uid", "")
        message = str(event.get("message") or "")
        if self._said.get(uid) == message:
            return  # the same Event again (a repeat counted in its series)
        self._said[uid] = message
        reason = str(event.get("reason") or "")
        if reason == "FailedScheduling":
            self.last_reason = message
        elif reason == "Scheduled" and involved.get("kind") == "Pod":
            self.scheduled.add(str(involved.get("name")))
        kind = str(involved.get("kind") or "").lower()
        _say(
            self.out,
            f"  {event.get('type', ''):7} {reason:16} {kind}/{involved.get('name', '')}: {message}",
        )
        self.changed.set()

    def goal(self, follow: bool) -> bool:
        if len(self.pods) < len(self.plan.pods):
            return False
        if not follow:
            return all((p.get("spec") or {}).get("nodeName") for p in self.pods.values())
        return all(_phase(p) != "Pending" for p in self.pods.values())

    def all_terminated(self) -> bool:
        return all(_terminated(self.pods.get(n) or {}) is not None for n in self.plan.pod_names)

    async def watch_pods(self) -> None:
        await self.events_listed.wait()  # the Events so far first, then what the pods say
        path = resource_path("", "v1", "pods", self.ns)
        selector = f"{RUN_LABEL}={self.plan.options.name}"
        await self._list_watch(path, {"labelSelector": selector}, self.pod_updated)

    async def watch_events(self) -> None:
        path = resource_path("", "v1", "events", self.ns)
        query: dict[str, str] = {}
        if len(self.plan.pods) == 1 and self.plan.pod_group is None:
            query["fieldSelector"] = f"involvedObject.name={self.plan.pod_names[0]}"

        def seen(kind: str, event: dict[str, Any]) -> None:
            if kind != "DELETED":
                self.event_seen(event)

        await self._list_watch(path, query, seen, self.events_listed)

    async def _list_watch(
        self,
        path: str,
        query: dict[str, str],
        handle: Callable[[str, dict[str, Any]], None],
        listed_once: asyncio.Event | None = None,
    ) -> None:
        """List, then watch from the list's resourceVersion; list again after a 410 or a
        broken stream (what an informer does), backing off on server errors."""
        while True:
            try:
                listed = await self.kube.get(path, query)
                for obj in listed.get("items") or []:
                    handle("ADDED", obj)
                if listed_once is not None:
                    listed_once.set()
                rv = listed["metadata"]["resourceVersion"]
                while True:
                    watch_query = {**query, "resourceVersion": rv, "allowWatchBookmarks": "true"}
                    async for event in self.kube.watch(path, watch_query):
                        obj = event.get("object") or {}
                        rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                        if event.get("type") != "BOOKMARK":
                            handle(str(event.get("type")), obj)
            except APIGone:
                continue
            except APIForbidden as exc:  # e.g. no RBAC for events: go on without them
                _say(self.out, f"gpusched run: cannot watch {path}: {exc.message}")
                if listed_once is not None:
                    listed_once.set()
                return
            except APIError:
                await asyncio.sleep(1.0)


async def _create(kube: Kube, plan: Plan, out: TextIO) -> list[dict[str, Any]] | None:
    """Create the PodGroup, then the pods: the objects as created. When the server refuses
    one (a name taken by an object not of this run, a missing CRD, RBAC), delete what this run
    created, say why, and return None."""
    opts = plan.options
    made: list[tuple[str, dict[str, Any]]] = []
    try:
        if plan.pod_group is not None:
            path = resource_path(
                podgroups.GROUP, podgroups.VERSION, podgroups.PLURAL, opts.namespace
            )
            made.append((path, await kube.create(path, plan.pod_group)))
            _say(
                out,
                f"podgroup {opts.namespace}/{opts.name} created (minMember {opts.gang}): "
                f"{opts.gang} pods, each {plan.request}",
            )
        for pod in plan.pods:
            path = resource_path("", "v1", "pods", opts.namespace)
            made.append((path, await kube.create(path, pod)))
            what = "" if plan.pod_group is not None else f": {plan.request}"
            _say(out, f"pod {opts.namespace}/{pod['metadata']['name']} created{what}")
        return [obj for _, obj in made]
    except APIError as exc:
        what = exc.message or str(exc)
        if isinstance(exc, APINotFound) and plan.pod_group is not None and not made:
            what += (
                " (is scheduler-plugins' PodGroup CRD, podgroups.scheduling.x-k8s.io, installed?)"
            )
        _say(out, f"gpusched run: {what}")
    for path, obj in reversed(made):
        with contextlib.suppress(APIError):
            await kube.delete(f"{path}/{obj['metadata']['name']}")
    if made:
        _say(out, f"gpusched run: deleted what run {opts.name} had created")
    return None


async def _in_use(kube: Kube, opts: RunOptions) -> list[str]:
    """``kind/name`` of the objects already labelled with this run's name."""
    selector = {"labelSelector": f"{RUN_LABEL}={opts.name}"}
    found = []
    for kind, group, version, plural in _KINDS:
        try:
            listed = await kube.get(resource_path(group, version, plural, opts.namespace), selector)
        except APINotFound:
            continue
        found += [f"{kind}/{o['metadata']['name']}" for o in listed.get("items") or []]
    return found


_KINDS = (
    ("pod", "", "v1", "pods"),
    ("podgroup", podgroups.GROUP, podgroups.VERSION, podgroups.PLURAL),
)
"""What ``gpusched run`` creates: (kind, group, version, plural)."""


async def run(
    kube: Kube,
    plan: Plan,
    *,
    out: TextIO = sys.stdout,
    interrupted: asyncio.Event | None = None,
) -> int:
    """Create ``plan``'s objects and follow them as the module docstring says; the exit status."""
    opts = plan.options
    stop = interrupted or asyncio.Event()
    try:
        in_use = await _in_use(kube, opts)
    except APIError as exc:
        _say(out, f"gpusched run: cannot list namespace {opts.namespace}: {exc}")
        return 1
    if in_use:
        _say(
            out,
            f"gpusched run: the name {opts.name} is in use in namespace {opts.namespace} "
            f"({', '.join(in_use)}); choose another --name, or delete it first: "
            f"{_cleanup_hint(opts)}",
        )
        return 1
    if stop.is_set():
        _say(out, "gpusched run: interrupted; nothing was created")
        return 130
    created = await _create(kube, plan, out)
    if created is None:
        return 1
    state = _Watch(kube, plan, out)
    state.uids = {obj["metadata"]["uid"] for obj in created}
    tasks = [
        asyncio.create_task(state.watch_pods(), name="run-pods"),
        asyncio.create_task(state.watch_events(), name="run-events"),
    ]
    try:
        return await _follow_through(kube, state, stop)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _until(state: _Watch, stop: asyncio.Event, done: Callable[[], bool]) -> bool:
    """Wait until ``done()`` (True) or ``stop`` is set (False); raises :class:`_Failed`."""
    while True:
        if state.failure:
            raise _Failed(state.failure)
        if done():
            return True
        if stop.is_set():
            return False
        state.changed.clear()
        changed = asyncio.ensure_future(state.changed.wait())
        stopped = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({changed, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            changed.cancel()
            stopped.cancel()


async def _follow_through(kube: Kube, state: _Watch, stop: asyncio.Event) -> int:
    opts = state.plan.options
    first = state.plan.pod_names[0]
    try:
        try:
            async with asyncio.timeout(opts.timeout or None):
                reached = await _until(state, stop, lambda: state.goal(opts.follow))
        except TimeoutError:
            waiting = "running" if opts.follow else "bound"
            _say(
                state.out,
                f"gpusched run: not {waiting} after {opts.timeout:g} s: "
                f"{state.last_reason or 'no reason reported yet'}\n"
                f"  why:      gpusched explain {opts.namespace}/{first}\n"
                f"  clean up: {_cleanup_hint(opts)}",
            )
            return 1
        if not reached:
            return _interrupted(state)
        if not opts.follow:
            with contextlib.suppress(TimeoutError):  # Scheduled Events trail the binding
                async with asyncio.timeout(SCHEDULED_EVENT_GRACE):
                    await _until(state, stop, lambda: state.scheduled >= set(state.pods))
            return 0
        return await _stream_logs(kube, state, stop)
    except _Failed as exc:
        _say(
            state.out,
            f"gpusched run: {exc}\n"
            f"  why:      gpusched explain {opts.namespace}/{first}\n"
            f"  clean up: {_cleanup_hint(opts)}",
        )
        return 1


def _interrupted(state: _Watch) -> int:
    _say(
        state.out,
        f"gpusched run: interrupted; run {state.plan.options.name} keeps going. "
        f"Clean up with: {_cleanup_hint(state.plan.options)}",
    )
    return 130


async def _stream_logs(kube: Kube, state: _Watch, stop: asyncio.Event) -> int:
    """Stream every pod's log (prefixed by pod name for a gang) until each container ended,
    then the first non-zero exit code (0 when all succeeded)."""
    opts = state.plan.options
    gang = opts.gang is not None

    async def stream(name: str) -> None:
        path = resource_path("", "v1", "pods", opts.namespace, name, "log")
        prefix = f"[{name}] " if gang else ""
        try:
            async for line in kube.lines(path, {"container": CONTAINER, "follow": "true"}):
                state.out.write(prefix + line.decode(errors="replace"))
                state.out.flush()
        except APIError as exc:  # e.g. no RBAC for pods/log: say so, wait for the end anyway
            _say(state.out, f"gpusched run: cannot read the log of pod {name}: {exc.message}")

    streams = [asyncio.create_task(stream(n), name=f"run-log-{n}") for n in state.plan.pod_names]
    try:
        if not await _until(state, stop, state.all_terminated):
            return _interrupted(state)
        await asyncio.gather(*streams)
    finally:
        for task in streams:
            task.cancel()
        await asyncio.gather(*streams, return_exceptions=True)
    codes = [
        int((_terminated(state.pods[n]) or {}).get("exitCode", 1)) for n in state.plan.pod_names
    ]
    code = next((c for c in codes if c != 0), 0)
    _say(state.out, f"gpusched run: {'all containers' if gang else 'container'} exited {code}")
    return code


# ---------------------------------------------------------------------------- cleanup


async def cleanup(
    kube: Kube, name: str | None, namespace: str | None, *, out: TextIO = sys.stdout
) -> int:
    """Delete the pods and PodGroups ``gpusched run`` labelled (run ``name``, or all runs when
    None) in ``namespace`` (every namespace when None); say what went. 0, or 1 when the server
    refused a list or a delete (said, and the rest still tried)."""
    selector = f"{MANAGED_BY}={MANAGER}" + (f",{RUN_LABEL}={name}" if name else "")
    deleted = 0
    refused = False
    for kind, group, version, plural in _KINDS:
        try:
            listed = await kube.get(
                resource_path(group, version, plural, namespace), {"labelSelector": selector}
            )
        except APINotFound:
            continue  # PodGroups not served here: nothing of that kind to delete
        except APIError as exc:
            _say(out, f"gpusched cleanup: cannot list {plural}: {exc.message or exc}")
            refused = True
            continue
        for obj in listed.get("items") or []:
            ns, obj_name = obj["metadata"].get("namespace"), obj["metadata"]["name"]
            where = f"{ns}/{obj_name}"
            if obj["metadata"].get("deletionTimestamp"):
                # Deleted before: its kubelet (or a finalizer) has yet to finish.
                deleted += 1
                _say(out, f"{kind} {where} is already terminating")
                continue
            try:
                await kube.delete(resource_path(group, version, plural, ns, obj_name))
            except APINotFound:
                continue  # gone meanwhile
            except APIError as exc:
                _say(out, f"gpusched cleanup: cannot delete {kind} {where}: {exc.message or exc}")
                refused = True
                continue
            deleted += 1
            _say(out, f"deleted {kind} {where}")
    if not deleted and not refused:
        what = f"run {name}" if name else "runs"
        where = f"namespace {namespace}" if namespace else "any namespace"
        _say(out, f"gpusched cleanup: no {what} to delete in {where}")
    return 1 if refused else 0
