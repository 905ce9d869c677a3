"""A test bed for the scheduler, on the simulated cluster or on a real one.

``Bed`` (the ``bed`` fixture in ``conftest.py``) gives each test what it needs on the target
cluster (``tests/conftest.py``'s ``target``: the simulation with its kubelets by default, the
cluster named by ``GPUSCHED_E2E_KUBECONFIG`` otherwise), all of it unique to the test so that
test runs, and the cluster's own workloads, never see each other's:

- a namespace for the pods (``target.namespace``) and one for the reservation Leases (and the
  leader-election Lease), both deleted at the end;
- a scheduler name, ``gpusched-<prefix>``: only the test's own Scheduler picks its pods up;
- fake GPU nodes written with the fleet code (``gpusched.sim.fleet``, as ``gpusched sim fleet
  apply`` writes them to any API server), their pools renamed ``<prefix>-<pool>``, labelled
  and tainted ``gpusched.io/e2e=<prefix>``, and deleted at the end. The test's pods select
  those nodes and tolerate that taint, so a scheduler of this run never binds to another
  run's nodes (nor to the cluster's real ones), and nothing else the cluster runs is placed on
  a node that has no kubelet;
- the GPUNodeInventory CRD, installed when absent (and left installed: it is shared).

On a real cluster nobody runs the fake nodes: a bound pod stays Pending with ``spec.nodeName``
set, so tests assert on the binding (node, ``gpusched.io/`` annotations, reservation Lease).
Without kubelet heartbeats the node lifecycle controller marks the nodes unreachable after about
40 seconds and taints them ``node.kubernetes.io/unreachable``; the test pods tolerate that taint
(and ``not-ready``), so long tests keep scheduling and bound pods are not evicted.

Waiting is on the API (a list, then a watch until a condition holds), never on sleeps; every
wait is bounded by ``WAIT`` seconds so that a broken scheduler fails a test instead of hanging.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from conftest import Target

from gpusched.annotations import GPU_IDS, RESERVATION_UID
from gpusched.framework import SchedulerConfiguration, default_config
from gpusched.framework.config import Profile
from gpusched.kube.client import Kube, resource_path
from gpusched.kube.errors import (
    APIForbidden,
    APIGone,
    APINotFound,
    APIServerError,
    APITooManyRequests,
)
from gpusched.reservations import LEASE_PREFIX, RESERVATIONS_ANNOTATION
from gpusched.scheduler import Scheduler
from gpusched.sim.fleet import (
    ClusterSpec,
    TaintSpec,
    apply_fleet,
    delete_fleet,
    load_cluster_spec,
    node_names,
)

__all__ = [
    "E2E_LABEL",
    "WAIT",
    "Bed",
    "assert_no_double_booking",
    "bound",
    "objects_until",
    "open_bed",
    "reservations",
]

WAIT: Final = 60.0
"""Upper bound, in seconds, on any wait for the cluster or the scheduler; never asserted on."""

E2E_LABEL: Final = "gpusched.io/e2e"
"""Label and taint key of a test's fake nodes; the value is the test's prefix."""

# Taints a real cluster's node lifecycle controller puts on nodes whose kubelet is silent.
_SILENT_NODE_TAINTS: Final = ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")

Objects = dict[str, dict[str, Any]]


async def objects_until(
    kube: Kube,
    path: str,
    done: Callable[[Objects], bool],
    *,
    query: dict[str, str] | None = None,
    timeout: float = WAIT,
) -> Objects:
    """List ``path`` and watch it until ``done(objects by name)``; returns that state.

    Re-lists when the watch expires (410 Gone); follows on when the server ends a stream.
    Faults the simulation injects into every client's requests (the test's too) are retried.
    """
    objects: Objects = {}

    async def follow() -> Objects:
        rv = ""
        while True:
            if not rv:
                try:
                    listed = await kube.get(path, query)
                except (APIServerError, APITooManyRequests):
                    continue
                objects.clear()
                objects.update({o["metadata"]["name"]: o for o in listed["items"]})
                rv = listed["metadata"]["resourceVersion"]
            if done(objects):
                return objects
            try:
                async for ev in kube.watch(
                    path, {**(query or {}), "resourceVersion": rv, "allowWatchBookmarks": "true"}
                ):
                    obj = ev["object"]
                    rv = obj["metadata"]["resourceVersion"]
                    if ev["type"] == "BOOKMARK":
                        continue
                    if ev["type"] == "DELETED":
                        objects.pop(obj["metadata"]["name"], None)
                    else:
                        objects[obj["metadata"]["name"]] = obj
                    if done(objects):
                        return objects
            except APIGone:
                rv = ""
            except (APIServerError, APITooManyRequests):
                pass

    return await asyncio.wait_for(follow(), timeout=timeout)


def bound(pods: Objects) -> list[str]:
    """Names of the pods bound to a node."""
    return [n for n, p in pods.items() if p["spec"].get("nodeName")]


def reservations(leases: Objects) -> dict[str, dict[str, dict[str, Any]]]:
    """Reservation entries by node, then by reservation uid, from reservation Leases."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for name, lease in leases.items():
        if not name.startswith(LEASE_PREFIX):
            continue
        text = (lease["metadata"].get("annotations") or {}).get(RESERVATIONS_ANNOTATION)
        out[name.removeprefix(LEASE_PREFIX)] = json.loads(text)["r"] if text else {}
    return out


def assert_no_double_booking(pods: Objects, leases: Objects | None = None) -> None:
    """No GPU held by two live pods, checked from the API.

    From the pods' assignment annotations; with ``leases`` (the reservation Leases, read after
    ``pods``), also that every bound pod is bound with a reservation recorded in its node's
    Lease for exactly its GPUs, and that no two reservations in a Lease share a GPU. On the
    simulation, the kubelets must have rejected no pod as over-committed.
    """
    held: dict[str, list[int]] = defaultdict(list)
    for p in pods.values():
        if (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        node = p["spec"].get("nodeName")
        ids = (p["metadata"].get("annotations") or {}).get(GPU_IDS)
        if node and ids:
            held[node].extend(int(i) for i in ids.split(","))
    for node, gpus in held.items():
        assert len(gpus) == len(set(gpus)), f"GPUs double-booked on {node}: {sorted(gpus)}"
    rejected = [
        n for n, p in pods.items() if (p.get("status") or {}).get("reason", "").startswith("OutOf")
    ]
    assert not rejected, f"kubelets rejected over-committed pods: {rejected}"
    if leases is None:
        return
    by_node = reservations(leases)
    for node, entries in by_node.items():
        taken: list[int] = [
            g for r in entries.values() if r.get("exclusive", True) for g in r["gpus"]
        ]
        assert len(taken) == len(set(taken)), f"reservations overlap on {node}: {entries}"
    for name in bound(pods):
        pod = pods[name]
        annotations = pod["metadata"].get("annotations") or {}
        uid = annotations.get(RESERVATION_UID)
        assert uid, f"pod {name} is bound without a reservation: {annotations}"
        entry = by_node.get(pod["spec"]["nodeName"], {}).get(uid)
        assert entry is not None, f"pod {name}'s reservation {uid} is not in its node's Lease"
        assert entry["podUID"] == pod["metadata"]["uid"]
        assert sorted(entry["gpus"]) == sorted(int(i) for i in annotations[GPU_IDS].split(","))


@dataclass
class Bed:
    """What one test has on the target cluster; see the module docstring."""

    target: Target
    specs: list[ClusterSpec] = field(default_factory=list)
    _service_account_ready: bool = False

    @property
    def kube(self) -> Kube:
        return self.target.kube

    @property
    def prefix(self) -> str:
        return self.target.prefix

    @property
    def namespace(self) -> str:
        """The test's pods live here."""
        return self.target.namespace

    @property
    def system_namespace(self) -> str:
        """The reservation Leases (and the leader-election Lease) live here."""
        return f"{self.prefix}-system"

    @property
    def scheduler_name(self) -> str:
        return f"gpusched-{self.prefix}"

    @property
    def pods_path(self) -> str:
        return resource_path("", "v1", "pods", self.namespace)

    @property
    def leases_path(self) -> str:
        return resource_path("coordination.k8s.io", "v1", "leases", self.system_namespace)

    @property
    def events_path(self) -> str:
        return resource_path("", "v1", "events", self.namespace)

    # ------------------------------------------------------------------ set-up and clean-up

    async def start(self) -> None:
        await self.kube.create(
            "/api/v1/namespaces",
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": self.system_namespace, "labels": {E2E_LABEL: self.prefix}},
            },
        )

    async def close(self) -> None:
        """Delete what the test wrote, all of it even if a deletion fails (that one raises)."""
        errors: list[Exception] = []
        for spec in reversed(self.specs):
            try:
                await delete_fleet(self.target.api(), spec)
            except Exception as exc:
                errors.append(exc)
        try:
            await self.kube.delete(f"/api/v1/namespaces/{self.system_namespace}")
        except APINotFound:
            pass
        except Exception as exc:
            errors.append(exc)
        if errors:
            raise errors[0]

    # ------------------------------------------------------------------ nodes

    def fleet(self, nodes: int, cluster: str = "dgx-h100") -> ClusterSpec:
        """``cluster`` scaled to ``nodes``, its pools renamed, labelled and tainted for this
        test (see the module docstring)."""
        spec = load_cluster_spec(cluster, nodes=nodes)
        taint = TaintSpec(key=E2E_LABEL, value=self.prefix, effect="NoSchedule")
        pools = tuple(
            pool.model_copy(
                update={
                    "name": f"{self.prefix}-{pool.name}",
                    "labels": {**pool.labels, E2E_LABEL: self.prefix},
                    "taints": (*pool.taints, taint),
                }
            )
            for pool in spec.pools
        )
        return spec.model_copy(update={"name": f"{self.prefix}-{spec.name}", "pools": pools})

    async def add_nodes(self, nodes: int, cluster: str = "dgx-h100") -> list[str]:
        """Write ``cluster``'s first ``nodes`` nodes (and inventories); returns their names.

        Idempotent, so a bigger count adds nodes to those already there.
        """
        spec = self.fleet(nodes, cluster)
        self.specs.append(spec)
        await apply_fleet(self.target.api(), spec)
        return node_names(spec)

    # ------------------------------------------------------------------ pods

    def pod(self, name: str, gpus: int = 1, **annotations: str) -> dict[str, Any]:
        """A pod for this test's scheduler, asking for ``gpus`` whole GPUs, that only fits this
        test's nodes."""
        tolerations: list[dict[str, str]] = [
            {"key": E2E_LABEL, "operator": "Equal", "value": self.prefix, "effect": "NoSchedule"}
        ]
        tolerations += [{"key": key, "operator": "Exists"} for key in _SILENT_NODE_TAINTS]
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "labels": {"app": "test"},
                "annotations": dict(annotations),
            },
            "spec": {
                "schedulerName": self.scheduler_name,
                "terminationGracePeriodSeconds": 0,
                "nodeSelector": {E2E_LABEL: self.prefix},
                "tolerations": tolerations,
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.k8s.io/pause:3.10",
                        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                    }
                ],
            },
        }

    async def create_pod(self, body: dict[str, Any]) -> dict[str, Any]:
        """Create a pod in the test's namespace.

        A real API server refuses pods (403) until the controller-manager has created the new
        namespace's ``default`` ServiceAccount; then this waits for it, once, and retries.
        """
        while True:
            try:
                created: dict[str, Any] = await self.kube.create(self.pods_path, body)
                return created
            except APIForbidden as exc:
                if self._service_account_ready or "service account" not in exc.message.lower():
                    raise
                await objects_until(
                    self.kube,
                    resource_path("", "v1", "serviceaccounts", self.namespace),
                    lambda accounts: "default" in accounts,
                )
                self._service_account_ready = True

    async def create_pods(self, bodies: Iterable[dict[str, Any]], concurrency: int = 1) -> None:
        """Create pods, in order when ``concurrency`` is 1."""
        gate = asyncio.Semaphore(concurrency)

        async def one(body: dict[str, Any]) -> None:
            async with gate:
                await self.create_pod(body)

        if concurrency == 1:
            for body in bodies:
                await self.create_pod(body)
            return
        await asyncio.gather(*(one(body) for body in bodies))

    async def delete_pod(self, name: str, *, now: bool = False) -> None:
        """Delete a pod; ``now``: with grace period 0, so that it goes at once even when bound
        to a node no kubelet runs (on a real cluster it would stay terminating)."""
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}
        await self.kube.delete(f"{self.pods_path}/{name}", body if now else None)

    async def pods_until(self, done: Callable[[Objects], bool], timeout: float = WAIT) -> Objects:
        return await objects_until(self.kube, self.pods_path, done, timeout=timeout)

    async def leases(self) -> Objects:
        listed = await self.kube.get(self.leases_path)
        return {lease["metadata"]["name"]: lease for lease in listed["items"]}

    # ------------------------------------------------------------------ the scheduler

    def config(
        self, *, reservation_seconds: int | None = None, max_clock_skew: float | None = None
    ) -> SchedulerConfiguration:
        """The default configuration with this test's scheduler name and reservation
        namespace (and reservations lasting ``reservation_seconds``, a clock skew tolerance of
        ``max_clock_skew`` seconds, when given)."""
        config = default_config()
        profile: Profile = config.profiles[0].model_copy(
            update={"scheduler_name": self.scheduler_name}
        )
        update: dict[str, Any] = {"namespace": self.system_namespace}
        if reservation_seconds is not None:
            update["lease_duration_seconds"] = reservation_seconds
        if max_clock_skew is not None:
            update["max_clock_skew_seconds"] = max_clock_skew
        return config.model_copy(
            update={
                "profiles": [profile],
                "reservations": config.reservations.model_copy(update=update),
            }
        )

    def scheduler(
        self, identity: str, config: SchedulerConfiguration | None = None, **kw: Any
    ) -> Scheduler:
        """A Scheduler for this test (not started); its rng is seeded 1 unless ``rng`` is
        given."""
        kw.setdefault("rng", random.Random(1))
        return Scheduler(Kube(self.target.api()), config or self.config(), identity=identity, **kw)

    @contextlib.asynccontextmanager
    async def running(
        self, identity: str = "a", config: SchedulerConfiguration | None = None, **kw: Any
    ) -> AsyncIterator[Scheduler]:
        """A Scheduler for this test, started and synced; cancelled on exit."""
        scheduler = self.scheduler(identity, config, **kw)
        task = asyncio.create_task(scheduler.run())
        try:
            await asyncio.wait_for(scheduler.ready.wait(), timeout=WAIT)
            yield scheduler
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


@contextlib.asynccontextmanager
async def open_bed(target: Target) -> AsyncIterator[Bed]:
    """A ``Bed`` on ``target``: its reservation namespace created, and everything the test
    wrote (nodes, inventories, that namespace) deleted at the end; the pods' namespace is
    ``target``'s, deleted by the ``target`` fixture."""
    bed = Bed(target)
    await bed.start()
    try:
        yield bed
    finally:
        await bed.close()
