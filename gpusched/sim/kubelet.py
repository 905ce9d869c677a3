"""Simulated kubelets: the part KWOK plays, for every node labelled as simulated.

It is an ordinary API client (list/watch pods and nodes, patch ``pods/status``, DELETE with
grace 0), so it runs unchanged against the simulated API server or a real cluster whose fake
GPU nodes have no kubelet (``gpusched sim kubelet --kubeconfig K``). For each pod bound to one
of its nodes it does what a kubelet does that a scheduler can observe:

- *admission*: :func:`admission_failure`, the kubelet's two hard admit handlers in their order
  (``pkg/kubelet/kubelet.go`` adds the container manager's resource allocator before the
  predicate handler), so a scheduler that double-books GPUs is caught here:

  1. the device manager (``pkg/kubelet/cm/devicemanager/manager.go``, ``devicesToAllocate``)
     hands each container devices of every *device-plugin* resource in its limits; when too
     few are free the pod fails with reason ``UnexpectedAdmissionError`` and "Allocate failed
     due to requested number of devices unavailable for R. Requested: N, Available: M, which
     is unexpected" (``pkg/kubelet/cm/admission/errors.go``). In the simulation every
     extended resource a node advertises is served by a device plugin (the NVIDIA plugin for
     ``nvidia.com/*``, the gpusched node agent for ``gpusched.io/gpu``: see
     :mod:`gpusched.sim.fleet`), and its devices are its allocatable count.
  2. the predicate handler (``pkg/kubelet/lifecycle/predicate.go``): first
     ``removeMissingExtendedResources`` drops every extended resource the node does not
     advertise at all (so ``gpusched.io/vram``, which no device plugin advertises, is never
     checked by a kubelet: VRAM is the scheduler's to count), then ``noderesources.Fits``
     checks, in this order, the pod count ("Too many pods"), cpu (in millicores), memory,
     ephemeral-storage, then hugepages and extended resources (a zero request is skipped).
     The first shortfall fails the pod with reason ``OutOf<resource>`` and "Node didn't have
     enough resource: R, requested: N, used: U, capacity: C".

  The status message is "Pod was rejected: " + that text, as ``kubelet.rejectPod`` writes it.
- *running*: admitted pods go Running with the conditions, IPs and container statuses a
  kubelet reports;
- *finishing*: a pod annotated ``sim.gpusched.io/duration: 90s`` (or ``5m``, ``1h``, a number of
  seconds) succeeds that long after it started; without the annotation it runs until deleted;
- *termination*: a pod with a deletionTimestamp is confirmed deleted (DELETE, grace 0, uid
  precondition) after ``sim.gpusched.io/termination-seconds`` (default 0) on the kubelet's
  clock.

All waiting is on an injectable ``Clock``: tests advance a ``FakeClock`` instead of sleeping.
Pod keys go through a :class:`~gpusched.kube.workqueue.WorkQueue` (deduplicated, never synced
by two workers at once, a failed sync retried 0.2 s later); the per-pod finish and termination
timers stay tasks of their own. Cost: ``workers`` tasks, one per timed pod, two reflectors.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from gpusched.clock import Clock, RealClock
from gpusched.kube.client import Kube, resource_path
from gpusched.kube.errors import APIConflict, APIError, APINotFound
from gpusched.kube.reflector import Reflector, object_key
from gpusched.kube.workqueue import ItemExponentialRateLimiter, WorkQueue
from gpusched.quantity import parse_quantity

__all__ = [
    "DURATION_ANNOTATION",
    "SIMULATED_NODE_LABEL",
    "TERMINATION_ANNOTATION",
    "UNEXPECTED_ADMISSION_ERROR",
    "AdmissionFailure",
    "SimKubelet",
    "admission_failure",
    "is_extended_resource",
    "parse_duration",
    "pod_requests",
]

log = logging.getLogger(__name__)

SIMULATED_NODE_LABEL = "sim.gpusched.io/kubelet"
"""Nodes carrying this label (value "true") are run by the simulated kubelet."""
DURATION_ANNOTATION = "sim.gpusched.io/duration"
TERMINATION_ANNOTATION = "sim.gpusched.io/termination-seconds"

UNEXPECTED_ADMISSION_ERROR = "UnexpectedAdmissionError"
"""The reason a device manager's allocation failure gives (``cm/admission/errors.go``)."""

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")


def parse_duration(text: str) -> float:
    """``90s``, ``5m``, ``1h``, ``250ms`` or plain seconds; ValueError otherwise."""
    m = _DURATION.match(text)
    if not m:
        raise ValueError(f"invalid duration {text!r}: use a number with s, m or h (e.g. 90s)")
    value = float(m.group(1))
    return value * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}[m.group(2)]


def pod_requests(pod: Mapping[str, Any]) -> dict[str, Fraction]:
    """Effective requests as the kubelet and scheduler compute them.

    max(sum over containers, max over init containers) per resource, plus pod overhead.
    """
    spec = pod.get("spec") or {}
    total: dict[str, Fraction] = {}
    for c in spec.get("containers") or ():
        for name, q in ((c.get("resources") or {}).get("requests") or {}).items():
            total[name] = total.get(name, Fraction(0)) + Fraction(parse_quantity(str(q)))
    for c in spec.get("initContainers") or ():
        for name, q in ((c.get("resources") or {}).get("requests") or {}).items():
            value = Fraction(parse_quantity(str(q)))
            if value > total.get(name, Fraction(0)):
                total[name] = value
    for name, q in (spec.get("overhead") or {}).items():
        total[name] = total.get(name, Fraction(0)) + Fraction(parse_quantity(str(q)))
    total["pods"] = Fraction(1)
    return total


def is_extended_resource(name: str) -> bool:
    """``v1helper.IsExtendedResourceName``: a domain-prefixed name outside
    ``kubernetes.io/`` (and not ``requests.*``); ``nvidia.com/gpu``, ``gpusched.io/vram``."""
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


@dataclass(frozen=True)
class AdmissionFailure:
    """Why a kubelet refuses a pod: the pod's ``status.reason`` and (unprefixed) message."""

    reason: str
    message: str


# noderesources.Fits checks these before the scalar resources, in this order.
_FIT_ORDER = ("cpu", "memory", "ephemeral-storage")


def _int64(value: Fraction, resource: str) -> int:
    """The int64 the kubelet prints: millicores for cpu (``MilliCPU``), else ``Value()``
    (rounded up, as ``Quantity.Value`` does)."""
    if resource == "cpu":
        value *= 1000
    return -((-value.numerator) // value.denominator)


def admission_failure(
    requests: Mapping[str, Fraction],
    allocatable: Mapping[str, str],
    used: Mapping[str, Fraction],
    running_pods: int,
) -> AdmissionFailure | None:
    """What the kubelet's hard admission says of a pod with these effective ``requests``
    (:func:`pod_requests`) on a node with ``allocatable``, where the admitted pods
    (``running_pods`` of them) already request ``used``; None when it is admitted.

    See the module docstring for the two handlers and where each rule comes from.
    O(resources of the pod + resources of the node).
    """
    cap = {name: Fraction(parse_quantity(str(q))) for name, q in allocatable.items()}
    # 1. The device manager: every advertised extended resource is a device-plugin resource.
    for name in sorted(requests):
        if not is_extended_resource(name) or name not in cap:
            continue
        want = requests[name]
        if want == 0:
            continue
        free = max(cap[name] - used.get(name, Fraction(0)), Fraction(0))
        if want > free:
            return AdmissionFailure(
                UNEXPECTED_ADMISSION_ERROR,
                "Allocate failed due to requested number of devices unavailable for "
                f"{name}. Requested: {_int64(want, name)}, Available: {_int64(free, name)}, "
                "which is unexpected",
            )
    # 2. The predicate handler: removeMissingExtendedResources, then noderesources.Fits.
    wanted = {
        name: q
        for name, q in requests.items()
        if name != "pods" and not (is_extended_resource(name) and name not in cap)
    }
    allowed_pods = _int64(cap.get("pods", Fraction(0)), "pods")
    if running_pods + 1 > allowed_pods:
        return _out_of("pods", 1, running_pods, allowed_pods)
    scalars = sorted(n for n in wanted if n not in _FIT_ORDER)
    for name in (*_FIT_ORDER, *scalars):
        want = wanted.get(name, Fraction(0))
        if want == 0:
            continue
        have = used.get(name, Fraction(0))
        total = cap.get(name, Fraction(0))
        if want > total - have:
            return _out_of(name, _int64(want, name), _int64(have, name), _int64(total, name))
    return None


def _out_of(resource: str, want: int, used: int, cap: int) -> AdmissionFailure:
    # lifecycle.InsufficientResourceError: reason "OutOf<resource>", its Error() as message.
    return AdmissionFailure(
        f"OutOf{resource}",
        f"Node didn't have enough resource: {resource}, requested: {want}, used: {used}, "
        f"capacity: {cap}",
    )


class SimKubelet:
    """Runs every simulated node's pods; ``await run()`` until cancelled."""

    def __init__(
        self,
        kube: Kube,
        clock: Clock | None = None,
        *,
        workers: int = 16,
        backoff_initial: float = 0.2,
        heartbeat: float | None = None,
    ) -> None:
        self.kube = kube
        self.heartbeat = heartbeat
        self.clock = clock or RealClock()
        self.nodes = Reflector(
            kube,
            resource_path("", "v1", "nodes"),
            handler=self._on_node,
            label_selector=f"{SIMULATED_NODE_LABEL}=true",
            clock=self.clock,
            backoff_initial=backoff_initial,
            name="kubelet/nodes",
        )
        self.pods = Reflector(
            kube,
            resource_path("", "v1", "pods"),
            handler=self._on_pod,
            field_selector="spec.nodeName!=",
            clock=self.clock,
            backoff_initial=backoff_initial,
            name="kubelet/pods",
        )
        self._workers = workers
        # Keys, as a client-go controller's: deduplicated, one worker per key at a time, and a
        # failed sync retried after 0.2 s on the clock (as the hand-written loop did).
        self._queue: WorkQueue[str] = WorkQueue(
            "kubelet", clock=self.clock, rate_limiter=ItemExponentialRateLimiter(0.2, 0.2)
        )
        self._admitted: dict[str, dict[str, set[str]]] = {}  # node -> uid set per key
        self._running: dict[str, tuple[str, str]] = {}  # pod uid -> (node, key)
        self._timers: dict[str, asyncio.Task[None]] = {}  # pod uid -> finish/termination timer
        self.started = 0
        self.rejected = 0
        self.finished = 0
        self.deleted = 0

    # ------------------------------------------------------------------ lifecycle

    async def run(self) -> None:
        tasks = [
            asyncio.create_task(self.nodes.run(), name="kubelet-nodes"),
            asyncio.create_task(self._start_pods_after_nodes(), name="kubelet-pods"),
        ]
        tasks += [
            asyncio.create_task(self._worker(), name=f"kubelet-worker-{i}")
            for i in range(self._workers)
        ]
        if self.heartbeat:
            tasks.append(asyncio.create_task(self._heartbeats(), name="kubelet-heartbeats"))
        try:
            await asyncio.gather(*tasks)
        finally:
            self._queue.shut_down()
            for t in [*tasks, *self._timers.values()]:
                t.cancel()
            for t in [*tasks, *self._timers.values()]:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t

    async def _heartbeats(self) -> None:
        """Renew each node's Lease in kube-node-lease, as kubelets do every 10 seconds.

        On a real cluster the node lifecycle controller marks a node NotReady (and taints it
        unreachable) 40 seconds after its Lease was last renewed; the simulation has no such
        controller, so ``SimCluster`` runs without heartbeats.
        """
        assert self.heartbeat is not None
        await self.nodes.synced.wait()
        while True:
            now = self.clock.now().strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            for name, node in list(self.nodes.items.items()):
                try:
                    await self._renew(name, node["metadata"]["uid"], now)
                except APIError as exc:
                    log.warning("kubelet: renewing the lease of node %s: %s", name, exc)
            await self.clock.sleep(self.heartbeat)

    async def _renew(self, node: str, uid: str, now: str) -> None:
        path = resource_path("coordination.k8s.io", "v1", "leases", "kube-node-lease", node)
        spec = {"holderIdentity": node, "leaseDurationSeconds": 40, "renewTime": now}
        try:
            await self.kube.patch(path, {"spec": spec})
        except APINotFound:
            lease = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": node,
                    "namespace": "kube-node-lease",
                    "ownerReferences": [
                        {"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid}
                    ],
                },
                "spec": spec,
            }
            with contextlib.suppress(APIConflict):
                await self.kube.create(path.rsplit("/", 1)[0], lease)

    async def _start_pods_after_nodes(self) -> None:
        await self.nodes.synced.wait()
        await self.pods.run()

    # ------------------------------------------------------------------ events

    def _managed(self, node: str) -> bool:
        return node in self.nodes.items

    def _on_node(self, kind: str, node: dict[str, Any], old: dict[str, Any] | None) -> None:
        if kind == "ADDED":
            name = node["metadata"]["name"]
            for key, pod in self.pods.items.items():
                if (pod.get("spec") or {}).get("nodeName") == name:
                    self._enqueue(key)

    def _on_pod(self, kind: str, pod: dict[str, Any], old: dict[str, Any] | None) -> None:
        self._enqueue(object_key(pod))

    def _enqueue(self, key: str) -> None:
        self._queue.add(key)

    async def _worker(self) -> None:
        while (key := await self._queue.get()) is not None:
            try:
                await self._sync(key)
                self._queue.forget(key)
            except APIError as exc:
                log.warning("kubelet: syncing %s: %s; will retry", key, exc)
                self._queue.add_rate_limited(key)
            finally:
                self._queue.done(key)

    # ------------------------------------------------------------------ the pod state machine

    async def _sync(self, key: str) -> None:
        pod = self.pods.items.get(key)
        if pod is None:
            self._forget_key(key)
            return
        spec = pod.get("spec") or {}
        node = spec.get("nodeName") or ""
        if not self._managed(node):
            return
        meta = pod["metadata"]
        uid = meta["uid"]
        status = pod.get("status") or {}
        phase = status.get("phase", "Pending")
        if meta.get("deletionTimestamp"):
            self._release(uid)
            if uid not in self._timers or self._timers[uid].get_name() != "terminate":
                self._cancel_timer(uid)
                self._timers[uid] = asyncio.create_task(self._terminate(pod), name="terminate")
            return
        if phase in ("Succeeded", "Failed"):
            self._release(uid)
            return
        if phase == "Pending" and uid not in self._running:
            await self._admit_and_start(key, pod, node)
        elif phase == "Running":
            self._running.setdefault(uid, (node, key))
            self._schedule_finish(pod)

    def _used(self, node: str, exclude: str) -> dict[str, Fraction]:
        used: dict[str, Fraction] = {}
        for uid, (n, key) in self._running.items():
            if n != node or uid == exclude:
                continue
            pod = self.pods.items.get(key)
            if pod is None:
                continue
            for name, q in pod_requests(pod).items():
                used[name] = used.get(name, Fraction(0)) + q
        return used

    async def _admit_and_start(self, key: str, pod: dict[str, Any], node_name: str) -> None:
        node = self.nodes.items[node_name]
        uid = pod["metadata"]["uid"]
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        used = self._used(node_name, uid)
        failure = admission_failure(
            pod_requests(pod), allocatable, used, int(used.get("pods", Fraction(0)))
        )
        if failure is not None:
            await self._reject(pod, failure)
            return
        self._running[uid] = (node_name, key)
        now = self.clock.now()
        ts = now.strftime("%Y-%m-%dT%H:%M:%SZ")
        host_ip = _node_ip(node)
        status = {
            "phase": "Running",
            "conditions": _conditions(pod, ts, ready=True),
            "hostIP": host_ip,
            "hostIPs": [{"ip": host_ip}],
            "podIP": _pod_ip(uid),
            "podIPs": [{"ip": _pod_ip(uid)}],
            "startTime": ts,
            "containerStatuses": [
                {
                    "name": c["name"],
                    "state": {"running": {"startedAt": ts}},
                    "lastState": {},
                    "ready": True,
                    "restartCount": 0,
                    "image": c.get("image", ""),
                    "imageID": _image_id(c.get("image", "")),
                    "containerID": _container_id(uid, c["name"]),
                    "started": True,
                }
                for c in (pod.get("spec") or {}).get("containers") or ()
            ],
        }
        try:
            updated = await self._patch_status(pod, status)
        except (APINotFound, APIConflict):
            self._running.pop(uid, None)
            return
        except APIError:
            self._running.pop(uid, None)
            raise
        self.started += 1
        self._schedule_finish(updated)

    async def _reject(self, pod: dict[str, Any], failure: AdmissionFailure) -> None:
        self.rejected += 1
        message = f"Pod was rejected: {failure.message}"  # kubelet.rejectPod's prefix
        log.warning(
            "kubelet: %s/%s: %s", pod["metadata"].get("namespace"), pod["metadata"]["name"], message
        )
        with contextlib.suppress(APINotFound, APIConflict):
            await self._patch_status(
                pod,
                {"phase": "Failed", "reason": failure.reason, "message": message},
            )

    async def _patch_status(self, pod: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        meta = pod["metadata"]
        path = resource_path("", "v1", "pods", meta.get("namespace"), meta["name"], "status")
        body = {"metadata": {"uid": meta["uid"]}, "status": status}
        result: dict[str, Any] = await self.kube.patch(path, body)
        return result

    def _schedule_finish(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        uid = meta["uid"]
        if uid in self._timers:
            return
        text = (meta.get("annotations") or {}).get(DURATION_ANNOTATION)
        if not text:
            return
        try:
            duration = parse_duration(text)
        except ValueError as exc:
            log.warning("kubelet: %s: %s; the pod runs until deleted", meta["name"], exc)
            return
        self._timers[uid] = asyncio.create_task(self._finish_after(pod, duration), name="finish")

    async def _finish_after(self, pod: dict[str, Any], duration: float) -> None:
        await self.clock.sleep(duration)
        meta = pod["metadata"]
        key = object_key(pod)
        current = self.pods.items.get(key)
        self._timers.pop(meta["uid"], None)
        if current is None or current["metadata"]["uid"] != meta["uid"]:
            return
        if current["metadata"].get("deletionTimestamp"):
            return
        ts = self.clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")
        started = (current.get("status") or {}).get("startTime", ts)
        status = {
            "phase": "Succeeded",
            "conditions": _conditions(current, ts, ready=False),
            "containerStatuses": [
                {
                    "name": c["name"],
                    "state": {
                        "terminated": {
                            "exitCode": 0,
                            "reason": "Completed",
                            "startedAt": started,
                            "finishedAt": ts,
                            "containerID": _container_id(meta["uid"], c["name"]),
                        }
                    },
                    "lastState": {},
                    "ready": False,
                    "restartCount": 0,
                    "image": c.get("image", ""),
                    "imageID": _image_id(c.get("image", "")),
                    "started": False,
                }
                for c in (current.get("spec") or {}).get("containers") or ()
            ],
        }
        while True:
            try:
                await self._patch_status(current, status)
                break
            except (APINotFound, APIConflict):
                return
            except APIError as exc:
                log.warning("kubelet: finishing %s: %s; retrying", meta["name"], exc)
                await self.clock.sleep(0.2)
        self._release(meta["uid"])
        self.finished += 1

    async def _terminate(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        text = (meta.get("annotations") or {}).get(TERMINATION_ANNOTATION, "0")
        try:
            delay = min(parse_duration(text), float(meta.get("deletionGracePeriodSeconds") or 0))
        except ValueError:
            delay = 0.0
        if delay > 0:
            await self.clock.sleep(delay)
        path = resource_path("", "v1", "pods", meta.get("namespace"), meta["name"])
        body = {
            "kind": "DeleteOptions",
            "apiVersion": "v1",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": meta["uid"]},
        }
        while True:
            try:
                await self.kube.delete(path, body)
                self.deleted += 1
                break
            except (APINotFound, APIConflict):
                break
            except APIError as exc:
                log.warning("kubelet: deleting %s: %s; retrying", meta["name"], exc)
                await self.clock.sleep(0.2)
        self._timers.pop(meta["uid"], None)

    def _release(self, uid: str) -> None:
        self._running.pop(uid, None)
        timer = self._timers.get(uid)
        if timer is not None and timer.get_name() == "finish":
            self._cancel_timer(uid)

    def _cancel_timer(self, uid: str) -> None:
        timer = self._timers.pop(uid, None)
        if timer is not None and timer is not asyncio.current_task():
            timer.cancel()

    def _forget_key(self, key: str) -> None:
        for uid, (_, k) in list(self._running.items()):
            if k == key:
                self._release(uid)


def _conditions(pod: dict[str, Any], ts: str, ready: bool) -> list[dict[str, Any]]:
    scheduled = next(
        (
            c
            for c in (pod.get("status") or {}).get("conditions") or ()
            if c.get("type") == "PodScheduled"
        ),
        {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": ts},
    )
    value = "True" if ready else "False"
    extra = {} if ready else {"reason": "PodCompleted"}
    return [
        {
            "type": "PodReadyToStartContainers",
            "status": value,
            "lastProbeTime": None,
            "lastTransitionTime": ts,
        },
        {
            "type": "Initialized",
            "status": "True",
            "lastProbeTime": None,
            "lastTransitionTime": ts,
            **extra,
        },
        {
            "type": "Ready",
            "status": value,
            "lastProbeTime": None,
            "lastTransitionTime": ts,
            **extra,
        },
        {
            "type": "ContainersReady",
            "status": value,
            "lastProbeTime": None,
            "lastTransitionTime": ts,
            **extra,
        },
        scheduled,
    ]


def _image_id(image: str) -> str:
    return f"{image}@sha256:{hashlib.sha256(image.encode()).hexdigest()}"


def _container_id(uid: str, name: str) -> str:
    return f"containerd://{hashlib.sha256((uid + name).encode()).hexdigest()}"


def _node_ip(node: Mapping[str, Any]) -> str:
    for addr in (node.get("status") or {}).get("addresses") or ():
        if addr.get("type") == "InternalIP":
            return str(addr.get("address", ""))
    digest = hashlib.sha256(node["metadata"]["name"].encode()).digest()
    return f"10.{digest[0]}.{digest[1]}.{digest[2] or 1}"


def _pod_ip(uid: str) -> str:
    digest = hashlib.sha256(uid.encode()).digest()
    return f"10.{128 + digest[0] % 64}.{digest[1]}.{digest[2] or 1}"
