"""One replica's own state (its cache, the phantoms of reservations, its queue) through what its
informers deliver and through binding cycles whose failures only the API server can explain.

Tests that only call the informer handlers (``_on_node``, ``_on_pod``, ``_on_lease``) and read
the cache need no API: their Scheduler's Kube is never connected (as in
``benchmarks/scheduler_perf.py``). Tests that run binding cycles (a Lease write, a Binding, the
read of the pod after a failed Binding) run them against the simulated cluster through the real
client; their scheduler's informers are listed once (``synced``), and faults are injected only
around the step that needs them. In both, the test runs each cycle itself (``cycle``): no
scheduling loop, no sleeps; a FakeClock, shared with the API server, moves time for backoff and
reservation expiry.

Every node is the one of ``SPEC`` (4 GPUs, inventory and all), built by the simulated fleet.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections.abc import AsyncIterator, Iterator
from typing import Any, cast

import pytest

from gpusched.annotations import Assignment
from gpusched.clock import FakeClock
from gpusched.framework import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    CycleState,
    EnqueueExtensions,
    PermitPlugin,
    PluginRef,
    Plugins,
    PluginSet,
    Pod,
    Profile,
    SchedulerConfiguration,
    Status,
    default_config,
    in_tree,
)
from gpusched.framework.config import apply_default_plugins
from gpusched.inventory import RESOURCE_GPU
from gpusched.kube.client import Kube, resource_path
from gpusched.kube.errors import APINotFound
from gpusched.queue import ACTIVE, BACKOFF
from gpusched.reservation_book import phantom_key
from gpusched.reservations import (
    LEASE_PREFIX,
    NODE_LABEL,
    RESERVATIONS_ANNOTATION,
    Reservation,
    ReservationWriter,
)
from gpusched.scheduler import Scheduler, SchedulingResult
from gpusched.sim import FaultRule, SimCluster
from gpusched.sim.fleet import ClusterSpec, build_fleet, node_names

SPEC = ClusterSpec.model_validate(
    {
        "name": "state",
        "pools": [
            {
                "name": "n",
                "count": 1,
                "cpu": 32,
                "memory": "128Gi",
                "gpu": {
                    "product": "NVIDIA H100 80GB HBM3",
                    "memoryMiB": 81559,
                    "count": 4,
                    "topology": "nvswitch",
                },
            }
        ],
    }
)
NODE = node_names(SPEC)[0]
NS = default_config().reservations.namespace
"""Where the reservation Leases live (the default configuration's namespace)."""
PODS = resource_path("", "v1", "pods", "default")
LEASES = resource_path("coordination.k8s.io", "v1", "leases", NS)


# ---------------------------------------------------------------------------------- helpers


def gpu_pod(name: str, gpus: int, *, uid: str | None = None) -> dict[str, Any]:
    """A pending pod for the default profile asking for ``gpus`` GPUs; ``uid`` for a pod handed
    straight to the handlers (the API server sets its own)."""
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulerName": default_config().profiles[0].scheduler_name,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {
                        "requests": {RESOURCE_GPU: str(gpus)},
                        "limits": {RESOURCE_GPU: str(gpus)},
                    },
                }
            ],
        },
    }
    if uid is not None:
        pod["metadata"]["uid"] = uid
        pod["status"] = {"phase": "Pending"}
    return pod


def scheduler(kube: Kube, clock: FakeClock, **kwargs: Any) -> Scheduler:
    config = kwargs.pop("config", None) or default_config()
    return Scheduler(kube, config, identity="me", clock=clock, rng=random.Random(0), **kwargs)


def handlers_only(clock: FakeClock, **kwargs: Any) -> Scheduler:
    """A Scheduler whose Kube is never connected, told of ``SPEC``'s nodes by its handlers."""
    sched = scheduler(Kube(cast(Any, None)), clock, **kwargs)
    add_nodes(sched)
    return sched


def add_nodes(sched: Scheduler) -> None:
    for node in build_fleet(SPEC):
        if node.inventory is not None:
            sched.cache.set_inventory(node.name, node.inventory)
        sched._on_node("ADDED", node.node, None)


@contextlib.asynccontextmanager
async def open_sim(clock: FakeClock) -> AsyncIterator[SimCluster]:
    """``SPEC`` on the simulated cluster (no kubelets), with the reservations namespace."""
    async with SimCluster(SPEC, kubelets=False, clock=clock) as sim:
        await sim.kube.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
        )
        yield sim


async def synced(sim: SimCluster, clock: FakeClock, **kwargs: Any) -> Scheduler:
    """A Scheduler on ``sim`` whose informers have listed the cluster once (and watch nothing:
    what happens later reaches it only when the test lists again)."""
    sched = scheduler(Kube(sim.api_client()), clock, **kwargs)
    for informer in sched.informers:
        try:
            await informer.list()
        except APINotFound:  # a kind the simulation does not serve (Volcano's)
            if not informer.optional:
                raise
    return sched


def lease_object(node: str, *reservations: Reservation, rv: str = "7") -> dict[str, Any]:
    """A reservations Lease as the informer delivers it."""
    payload = {"v": 1, "r": {r.uid: r.to_json() for r in reservations}}
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": LEASE_PREFIX + node,
            "namespace": NS,
            "resourceVersion": rv,
            "labels": {NODE_LABEL: node},
            "annotations": {RESERVATIONS_ANNOTATION: json.dumps(payload)},
        },
        "spec": {},
    }


def reservation(
    uid: str, pod: dict[str, Any], gpus: tuple[int, ...], *, holder: str = "other", expires: float
) -> Reservation:
    meta = pod["metadata"]
    return Reservation(
        uid=uid,
        pod=f"{meta['namespace']}/{meta['name']}",
        pod_uid=meta["uid"],
        gpu_ids=gpus,
        vram_mib=(),
        exclusive=True,
        expires=expires,
        holder=holder,
    )


def expiry(clock: FakeClock, seconds: float = 60.0) -> float:
    return clock.now().timestamp() + seconds


def free_gpus(sched: Scheduler, node: str = NODE) -> list[int]:
    info = sched.cache.node_info(node)
    assert info is not None
    return [d.index for d in info.ledger.devices if d.free]


async def held_gpus(sim: SimCluster, node: str = NODE) -> list[int]:
    """The GPUs the reservations in ``node``'s Lease hold, read from the API (none if the
    Lease does not exist)."""
    try:
        lease = await sim.kube.get(f"{LEASES}/{LEASE_PREFIX}{node}")
    except APINotFound:
        return []
    payload = json.loads(lease["metadata"]["annotations"][RESERVATIONS_ANNOTATION])
    return sorted(g for r in payload["r"].values() for g in r["gpus"])


async def cycle(sched: Scheduler, pod: dict[str, Any]) -> SchedulingResult:
    """Pop ``pod`` (it must be active), run its scheduling cycle and await its binding."""
    info = sched.queue.pop_nowait()
    assert info is not None
    assert info.uid == pod["metadata"]["uid"], info
    result = sched.schedule_one(info)
    task = sched._binding.get(info.uid)
    if task is not None:
        await task
    return result


async def create_pods(sim: SimCluster, sched: Scheduler, *pods: dict[str, Any]) -> list[Any]:
    """Create ``pods`` and let the scheduler's pods informer list them."""
    created = [await sim.kube.create(PODS, pod) for pod in pods]
    await sched.pods.list()
    return created


@contextlib.contextmanager
def unknown_binding_outcome(sim: SimCluster) -> Iterator[None]:
    """The Binding fails (before it is applied), and so does the read of the pod that would
    tell whether it landed: the binding cycle cannot know the outcome."""
    sim.faults.set(
        [FaultRule("create", "pods/binding", 1.0, 500), FaultRule("get", "pods", 1.0, 500)]
    )
    try:
        yield
    finally:
        sim.faults.clear()
    assert sim.faults.injected[("create", 500)] >= 1
    assert sim.faults.injected[("get", 500)] >= 1


# ------------------------------------------------------ phantoms (handlers only, no API)


def test_phantom_is_counted_when_its_lease_arrives_before_its_node() -> None:
    """Informers sync concurrently: at start-up (or when a node joins) the reservations Lease
    can be handled before the Node. The reservation must be counted once the Node arrives, or
    the cache shows another replica's in-flight GPUs as free for as long as it lives."""
    clock = FakeClock()
    sched = scheduler(Kube(cast(Any, None)), clock)
    pod = gpu_pod("p", 2, uid="uid-p")
    r = reservation("r-a", pod, (0, 1), expires=expiry(clock))
    sched._on_lease("ADDED", lease_object(NODE, r), None)  # the Lease first
    add_nodes(sched)  # then the Node
    sched._on_pod("ADDED", pod, None)
    assert free_gpus(sched) == [2, 3], "reservation r-a of another replica is not counted"


def test_own_dead_reservation_does_not_become_a_phantom() -> None:
    """A reservation this replica knows holds nothing (``mark_dead``: its bind failed, the release
    is pending or failed) must not become a phantom of its own pod when its Lease event arrives
    after the failure was handled; else this replica cannot assume the pod (CacheError at
    assume, requeue with backoff) until a write or the collector prunes it."""
    clock = FakeClock()
    sched = handlers_only(clock)
    pod = gpu_pod("p", 1, uid="uid-p")
    sched._on_pod("ADDED", pod, None)
    r = reservation("r-dead", pod, (0,), holder="me", expires=expiry(clock))
    sched.book.mark_dead(r.uid)  # _bind_failed marked it before the Lease event came in
    sched._on_lease("ADDED", lease_object(NODE, r), None)
    assert sched.cache.get_pod(phantom_key("r-dead")) is None, "dead reservation assumed"
    assert free_gpus(sched) == [0, 1, 2, 3]


def test_stale_phantom_entry_forgets_our_own_inflight_assumption() -> None:
    """A phantom that leaves the cache other than through ``_drop_phantom`` (the assumed-pod
    TTL) must not leave bookkeeping behind: if this replica then assumes the same pod itself,
    the old reservation leaving its Lease must not forget *our* in-flight assumption (its GPUs
    would look free while our Binding is in flight: "a bind in flight never loses its
    devices")."""
    clock = FakeClock()
    sched = handlers_only(clock)
    pod = gpu_pod("p", 1, uid="uid-p")
    uid = pod["metadata"]["uid"]
    r = reservation("r-a", pod, (0,), expires=expiry(clock, 3600))
    sched._on_lease("ADDED", lease_object(NODE, r, rv="1"), None)
    assert sched.cache.is_assumed(phantom_key("r-a"))  # under a key of its own
    clock._t += 16 * 60  # the assumed-pod TTL (15 min) passes
    assert sched.cache.cleanup_expired_assumed_pods() == [phantom_key("r-a")]
    # Our own decision for the pod, its binding cycle in flight.
    sched.cache.assume_pod(pod, NODE, Assignment((0,), (), (), "r-ours"))
    assert sched.cache.is_assumed(uid)
    # Later the old reservation leaves the Lease (pruned by someone).
    sched._on_lease("MODIFIED", lease_object(NODE, rv="2"), lease_object(NODE, r, rv="1"))
    assert sched.cache.is_assumed(uid), "our in-flight assumption was forgotten"


def test_phantom_bookkeeping_is_dropped_when_the_pod_is_deleted() -> None:
    """Deleting a pod whose phantom exists forgets the phantom and its ``_phantoms`` and
    ``_phantom_pods`` entries (not only once the reservation leaves the Lease: a leak, and the
    source of the stale entry above)."""
    clock = FakeClock()
    sched = handlers_only(clock)
    pod = gpu_pod("p", 1, uid="uid-p")
    uid = pod["metadata"]["uid"]
    sched._on_pod("ADDED", pod, None)
    r = reservation("r-a", pod, (0,), expires=expiry(clock))
    sched._on_lease("ADDED", lease_object(NODE, r), None)
    assert sched.cache.is_assumed(phantom_key("r-a"))
    sched._on_pod("DELETED", pod, pod)
    assert sched.cache.get_pod(phantom_key("r-a")) is None
    assert uid not in sched.book._phantom_pods
    assert r.uid not in sched.book._phantoms


# ------------------------------------------------ the scheduling cycle (no API either)


class Gate(PermitPlugin, EnqueueExtensions):
    """Rejects every pod at Permit (a gang whose quorum is not there yet, say)."""

    NAME = "Gate"

    def permit(self, state: CycleState, pod: Pod, node_name: str) -> tuple[Status, float]:
        return Status.unschedulable("no quorum", plugin=self.NAME), 0.0

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [ClusterEventWithHint(ClusterEvent("Pod", ActionType.ADD))]


async def test_permit_rejection_waits_in_unschedulable() -> None:
    """A pod rejected at Permit waits in unschedulable for an event its rejecting plugin
    registered. Forgetting the assumed pod must not emit a Pod/Delete within the pod's own
    cycle: the queue would record a move request at that cycle and ``add_unschedulable`` would
    send the pod to backoff (retried every 1..10 s), and every other pod rejected by GPUFit or
    NodeResourcesFit would be woken for nothing."""
    registry = in_tree()
    registry.register(Gate)
    config = apply_default_plugins(
        SchedulerConfiguration(
            profiles=[Profile(plugins=Plugins(permit=PluginSet(enabled=[PluginRef(name="Gate")])))]
        )
    )
    sched = handlers_only(FakeClock(), config=config, registry=registry)
    pod = gpu_pod("p", 1, uid="uid-p")
    sched._on_pod("ADDED", pod, None)
    await cycle(sched, pod)
    assert sched.queue.location(pod["metadata"]["uid"]) == "unschedulable"


async def test_a_pod_bound_and_finished_within_a_watch_gap_frees_its_gpus_for_waiters() -> None:
    """Another replica reserved all four GPUs for a pod this replica saw pending (a phantom
    holds them), so a second pod waits as unschedulable. After a watch gap the informer
    reports the first pod bound *and* finished in one MODIFIED whose old object has no node:
    its GPUs are free, and the waiting pod must be woken (the plugins' hints look for a bound
    pod that went away, which the old object is not)."""
    clock = FakeClock()
    sched = handlers_only(clock)
    holder = gpu_pod("holder", 4, uid="uid-holder")
    sched._on_pod("ADDED", holder, None)
    sched.queue.delete(holder)  # another replica is scheduling it, not this one
    r = reservation("r-other", holder, (0, 1, 2, 3), expires=expiry(clock))
    sched._on_lease("ADDED", lease_object(NODE, r), None)
    assert free_gpus(sched) == []
    waiting = gpu_pod("waiting", 1, uid="uid-waiting")
    sched._on_pod("ADDED", waiting, None)
    await cycle(sched, waiting)
    assert sched.queue.location("uid-waiting") == "unschedulable"
    finished = json.loads(json.dumps(holder))
    finished["spec"]["nodeName"] = NODE
    finished["status"] = {"phase": "Succeeded"}
    sched._on_pod("MODIFIED", finished, holder)
    assert free_gpus(sched) == [0, 1, 2, 3]
    assert sched.queue.location("uid-waiting") in ("active", "backoff")


# ------------------------------------------- binding cycles, on the simulated cluster


@pytest.mark.simonly
async def test_unknown_binding_outcome_keeps_its_gpus_counted() -> None:
    """A Binding that failed and whose outcome could not be read (UNKNOWN) keeps its
    reservation in the Lease until it expires; the cache must go on counting those GPUs (the
    pod may be bound with them), or the retry picks the same GPUs and its Lease write conflicts
    with the pod's own old reservation again and again until that expires (lease duration +
    clock-skew tolerance, ~90 s by default). The Lease's own watch event is not delivered
    here: the cache must not need it."""
    clock = FakeClock()
    async with open_sim(clock) as sim:
        sched = await synced(sim, clock)
        (pod,) = await create_pods(sim, sched, gpu_pod("p", 1))
        with unknown_binding_outcome(sim):
            await cycle(sched, pod)
        assert sched.failed_binds == 1
        held = await held_gpus(sim)
        assert len(held) == 1  # the reservation is kept: its Binding may have landed
        assert held[0] not in free_gpus(sched), "the kept reservation's GPU looks free"


@pytest.mark.simonly
async def test_retry_after_unknown_outcome_is_not_blocked_by_its_own_reservation() -> None:
    clock = FakeClock()
    async with open_sim(clock) as sim:
        sched = await synced(sim, clock)
        (pod,) = await create_pods(sim, sched, gpu_pod("p", 1))
        with unknown_binding_outcome(sim):
            await cycle(sched, pod)
        clock._t += 30  # past the backoff
        await cycle(sched, pod)
        assert sched.scheduled == 1, (
            f"retry failed: {sched.failed_binds} failed binds, "
            f"{dict(sched.reservations.writes)} lease writes"
        )
        bound = await sim.kube.get(f"{PODS}/p")
        assert bound["spec"]["nodeName"] == NODE


@pytest.mark.simonly
async def test_other_pods_do_not_pile_onto_gpus_an_unknown_bind_still_holds() -> None:
    """The same hole seen from another pod: every pod that ranks the node first (a whole
    equivalence class does) would get the GPU the Lease still holds: Lease conflict, retry."""
    clock = FakeClock()
    async with open_sim(clock) as sim:
        sched = await synced(sim, clock)
        (p,) = await create_pods(sim, sched, gpu_pod("p", 1))
        with unknown_binding_outcome(sim):
            await cycle(sched, p)
        (q,) = await create_pods(sim, sched, gpu_pod("q", 1))
        await cycle(sched, q)
        assert sched.scheduled == 1, f"q failed too: {sched.failed_binds} failed binds"


@pytest.mark.simonly
async def test_malformed_lease_does_not_strand_the_pod() -> None:
    """A reservations Lease gpusched cannot read (written by a newer format version during an
    upgrade, or damaged) makes ``ReservationWriter.read`` raise LeaseFormatError; the binding
    cycle must fail like any other, not die: a dead task leaves the pod in flight in the queue
    and assumed in the cache (binding never finished, so not even the TTL frees it) forever."""
    clock = FakeClock()
    async with open_sim(clock) as sim:
        await sim.kube.create(
            LEASES,
            {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": LEASE_PREFIX + NODE,
                    "labels": {NODE_LABEL: NODE},
                    "annotations": {RESERVATIONS_ANNOTATION: json.dumps({"v": 2, "r": {}})},
                },
                "spec": {},
            },
        )
        sched = await synced(sim, clock)
        (pod,) = await create_pods(sim, sched, gpu_pod("p", 1))
        info = sched.queue.pop_nowait()
        assert info is not None
        sched.schedule_one(info)
        task = sched._binding[info.uid]
        await asyncio.gather(task, return_exceptions=True)
        assert task.exception() is None, f"binding task died: {task.exception()!r}"
        uid = pod["metadata"]["uid"]
        assert sched.queue.location(uid) != "in flight", "pod stranded in flight"
        assert not sched.cache.is_assumed(uid), "assumed forever"


# ------------------------------------- a binding cycle always ends (exceptions, cancellation)


class Injected(Exception):
    """What the tests below raise inside a binding cycle."""


async def boom(*_args: Any, **_kwargs: Any) -> Any:
    raise Injected("injected")


def pod_has_settled(sched: Scheduler, uid: str, *, bound: bool) -> None:
    """Bound, or back in the queue; never assumed under its own uid, nothing in flight."""
    assert not sched.cache.is_assumed(uid), "the pod stays assumed"
    assert not sched.queue._in_flight, f"left in flight: {list(sched.queue._in_flight)}"
    where = sched.queue.location(uid)
    if bound:
        assert where is None, where
    else:
        assert where in (BACKOFF, ACTIVE), where


@pytest.mark.simonly
@pytest.mark.parametrize(
    ("step", "bound", "kept"),
    [
        ("permit", False, 0),  # waiting on Permit
        ("reserve", False, 0),  # the reservation write (the ReservationWriter instance)
        ("prebind", False, 0),  # written, then PreBind: released, nothing else holds it
        ("bind", False, 1),  # a Binding may have been sent: its reservation stays
        ("outcome", False, 1),  # the Binding failed and reading the pod raised: the same
        ("postbind", True, 1),  # bound: nothing undoes it
    ],
)
async def test_an_exception_at_any_step_of_the_binding_cycle_binds_or_requeues(
    step: str, bound: bool, kept: int
) -> None:
    clock = FakeClock()
    async with open_sim(clock) as sim:
        sched = await synced(sim, clock)
        fw = next(iter(sched.frameworks.values()))
        (pod,) = await create_pods(sim, sched, gpu_pod("p", 1))
        uid = pod["metadata"]["uid"]
        if step == "permit":
            fw.wait_on_permit = boom  # type: ignore[method-assign]
        elif step == "reserve":
            sched.reservations.reserve = boom  # type: ignore[method-assign]
        elif step == "prebind":
            fw.run_pre_bind = boom  # type: ignore[method-assign]
        elif step == "bind":
            fw.run_bind = boom  # type: ignore[method-assign]
        elif step == "outcome":

            async def refused(*_args: Any) -> Status:
                return Status.error("refused")

            fw.run_bind = refused  # type: ignore[method-assign]
            sched._binding_outcome = boom  # type: ignore[method-assign]
        else:
            fw.run_post_bind = boom  # type: ignore[method-assign]
        info = sched.queue.pop_nowait()
        assert info is not None
        sched.schedule_one(info)
        task = sched._binding[uid]
        await asyncio.gather(task, return_exceptions=True)
        assert task.exception() is None, f"binding task died: {task.exception()!r}"
        await sched.pods.list()
        pod_has_settled(sched, uid, bound=bound)
        assert sched.scheduled == int(bound)
        assert len(await held_gpus(sim)) == kept
        current = await sim.kube.get(f"{PODS}/p")
        assert bool(current["spec"].get("nodeName")) == bound


@pytest.mark.simonly
async def test_a_cancelled_binding_cycle_forgets_and_requeues_and_stays_cancelled() -> None:
    """Shutdown cancels a binding cycle waiting on Permit after its reservation would have
    been written: the pod is forgotten and requeued, and the task ends cancelled (the
    cancellation is not swallowed)."""
    clock = FakeClock()
    async with open_sim(clock) as sim:
        sched = await synced(sim, clock)
        fw = next(iter(sched.frameworks.values()))
        (pod,) = await create_pods(sim, sched, gpu_pod("p", 1))
        uid = pod["metadata"]["uid"]
        entered = asyncio.Event()

        async def forever(*_args: Any) -> Status:
            entered.set()
            await asyncio.Future()
            raise AssertionError("unreachable")

        fw.run_pre_bind = forever  # type: ignore[method-assign]
        info = sched.queue.pop_nowait()
        assert info is not None
        sched.schedule_one(info)
        task = sched._binding[uid]
        await entered.wait()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert task.cancelled()
        pod_has_settled(sched, uid, bound=False)
        assert len(await held_gpus(sim)) == 1  # written: left to expire


# ------------------------------------------------- superseded reservations, GPU gauges


@pytest.mark.simonly
async def test_a_reservation_superseded_by_the_binding_is_released_at_once_and_once() -> None:
    """Another replica reserved GPU 0 for a pod and stopped (nothing releases it); this
    replica binds the pod with GPU 1. Once its informer shows the pod bound, the other
    reservation leaves the Lease at once (the clock does not move: no expiry), in one write;
    a second replica that saw the same finds the Lease clean and writes nothing."""
    clock = FakeClock()
    async with open_sim(clock) as sim:
        probe = await synced(sim, clock)
        (pod,) = await create_pods(sim, probe, gpu_pod("p", 1))
        other = ReservationWriter(sim.kube, NS, "other", now=clock.now)
        await other.reserve(
            NODE, other.new_reservation("r-other", "default/p", pod["metadata"]["uid"], [0], [1])
        )
        sched = await synced(sim, clock)
        await cycle(sched, pod)
        assert sched.scheduled == 1
        assert await held_gpus(sim) == [0, 1]
        second = await synced(sim, clock)  # sees the pod bound and r-other, as sched will
        await sched.pods.list()
        assert sched.book.dirty == {NODE}
        writes = sum(sched.reservations.writes.values())
        await sched.book.release_dirty()
        assert await held_gpus(sim) == [1]
        assert sum(sched.reservations.writes.values()) == writes + 1
        assert second.book.dirty == {NODE}
        await second.book.release_dirty()
        assert sum(second.reservations.writes.values()) == 0
        assert second.reservations.conflicts == 0


def test_gpu_gauges_of_a_deleted_node_are_removed() -> None:
    clock = FakeClock()
    sched = handlers_only(clock)
    sched.cache.update_snapshot(sched.snapshot)
    sched._publish_gpu_metrics_once()
    assert f'gpusched_node_gpus_allocated{{node="{NODE}"}}' in sched.metrics.render().decode()
    node = build_fleet(SPEC)[0].node
    sched._on_node("DELETED", node, node)
    sched._publish_gpu_metrics_once()  # the snapshot still has the node: the cache does not
    rendered = sched.metrics.render().decode()
    assert f'node="{NODE}"' not in rendered


def test_gpu_gauges_follow_the_nodes_that_changed_only() -> None:
    """The periodic publish is incremental while no node joins or leaves: a node whose GPUs
    changed is published again; nothing is recomputed when nothing changed."""
    sched = handlers_only(FakeClock())
    sched.cache.update_snapshot(sched.snapshot)
    sched._publish_gpu_metrics_once()
    gauge = f'gpusched_node_gpus_allocated{{node="{NODE}"}}'
    assert f"{gauge} 0.0" in sched.metrics.render().decode()
    pod = gpu_pod("p", 2, uid="uid-p")
    sched.cache.assume_pod(pod, NODE, Assignment((0, 1), (), (), "r"))
    sched.cache.update_snapshot(sched.snapshot)
    sched._publish_gpu_metrics_once()
    assert f"{gauge} 2.0" in sched.metrics.render().decode()


# ------------------------------------------------ Permit waits, and binding tasks that overlap


class Hold(PermitPlugin, EnqueueExtensions):
    """Makes pods whose name starts with ``wait`` wait at Permit (a gang short of its quorum)."""

    NAME = "Hold"

    def permit(self, state: CycleState, pod: Pod, node_name: str) -> tuple[Status, float]:
        if pod["metadata"]["name"].startswith("wait"):
            return Status.wait(), 600.0
        return Status.success(), 0.0

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [ClusterEventWithHint(ClusterEvent("Pod", ActionType.ADD))]


def hold_config() -> tuple[SchedulerConfiguration, Any]:
    registry = in_tree()
    registry.register(Hold)
    config = apply_default_plugins(
        SchedulerConfiguration(
            profiles=[Profile(plugins=Plugins(permit=PluginSet(enabled=[PluginRef(name="Hold")])))]
        )
    )
    return config, registry


@pytest.mark.simonly
async def test_a_pod_rejected_while_waiting_at_permit_waits_in_unschedulable() -> None:
    """A pod that waited at Permit and was rejected (a gang's timeout) is unschedulable, as
    upstream's binding cycle makes it (a FitError on its node): it waits for an event its
    rejecting plugin registered for, the attempt counts as unschedulable, not as an error, and
    the devices it frees do not move it straight back."""
    clock = FakeClock()
    async with open_sim(clock) as sim:
        config, registry = hold_config()
        sched = await synced(sim, clock, config=config, registry=registry)
        fw = next(iter(sched.frameworks.values()))
        (pod,) = await create_pods(sim, sched, gpu_pod("wait-0", 1))
        uid = pod["metadata"]["uid"]
        info = sched.queue.pop_nowait()
        assert info is not None
        sched.schedule_one(info)
        task = sched._binding[uid]
        await asyncio.sleep(0)
        assert fw.reject_waiting_pod(uid, "Hold", "quorum not reached")
        await task
        assert sched.queue.location(uid) == "unschedulable"
        queued = sched.queue.get(uid)
        assert queued is not None
        assert queued.unschedulable_plugins == {"Hold"}
        assert not sched.cache.is_assumed(uid)
        rendered = sched.metrics.render().decode()
        assert (
            'scheduler_schedule_attempts_total{profile="gpusched",result="unschedulable"} 1.0'
            in (rendered)
        ), [line for line in rendered.splitlines() if "attempts_total{" in line]


@pytest.mark.simonly
async def test_a_pod_waiting_at_permit_does_not_hold_a_bind_slot() -> None:
    """Pods waiting at Permit (for minutes, a gang) must not take the bind slots that bound
    the concurrent Lease writes and Bindings: another pod binds while they wait."""
    clock = FakeClock()
    async with open_sim(clock) as sim:
        config, registry = hold_config()
        sched = await synced(sim, clock, config=config, registry=registry)
        sched._bind_slots = asyncio.Semaphore(1)
        fw = next(iter(sched.frameworks.values()))
        waiting, other = await create_pods(sim, sched, gpu_pod("wait-0", 1), gpu_pod("x-other", 1))
        for pod in (waiting, other):  # the waiting pod first (the queue sorts by name here)
            info = sched.queue.pop_nowait()
            assert info is not None
            assert info.uid == pod["metadata"]["uid"]
            sched.schedule_one(info)
            await asyncio.sleep(0)  # its binding task starts
        await asyncio.wait_for(sched._binding[other["metadata"]["uid"]], 60)  # a hang bound
        assert sched.scheduled == 1
        held = fw.get_waiting_pod(waiting["metadata"]["uid"])
        assert held is not None
        held.allow("Hold")
        await sched._binding[waiting["metadata"]["uid"]]
        assert sched.scheduled == 2


@pytest.mark.simonly
async def test_a_failed_binding_task_ending_late_leaves_the_next_one_registered() -> None:
    """A binding cycle that failed is still releasing its reservation when the pod, requeued
    and out of backoff, starts its next binding cycle. When the first task ends it must not
    take the second out of ``_binding``: shutdown waits for and cancels the tasks found
    there, and the informer handlers skip pods found there."""
    clock = FakeClock()
    async with open_sim(clock) as sim:
        sched = await synced(sim, clock)
        fw = next(iter(sched.frameworks.values()))
        (pod,) = await create_pods(sim, sched, gpu_pod("p", 1))
        uid = pod["metadata"]["uid"]
        release_may_go = asyncio.Event()
        second_in_prebind = asyncio.Event()
        release = sched.book.release
        calls = 0

        first_releasing = asyncio.Event()

        async def slow_release(node: str, uids: list[str]) -> None:
            first_releasing.set()  # requeued already: _bind_failed releases last
            await release_may_go.wait()
            await release(node, uids)

        async def pre_bind(*_args: Any) -> Status:
            nonlocal calls
            calls += 1
            if calls == 1:
                return Status.error("first PreBind fails")
            second_in_prebind.set()
            await release_may_go.wait()
            return Status.success()

        sched.book.release = slow_release  # type: ignore[method-assign]
        fw.run_pre_bind = pre_bind  # type: ignore[method-assign]
        info = sched.queue.pop_nowait()
        assert info is not None
        sched.schedule_one(info)
        first = sched._binding[uid]
        await first_releasing.wait()
        assert sched.queue.location(uid) == BACKOFF
        clock._t += 30  # past the backoff
        info = sched.queue.pop_nowait()
        assert info is not None
        sched.schedule_one(info)
        second = sched._binding[uid]
        assert second is not first
        await second_in_prebind.wait()
        release_may_go.set()
        await first
        assert sched._binding.get(uid) is second
        await second
        assert sched.scheduled == 1
        assert uid not in sched._binding


@pytest.mark.simonly
async def test_a_pod_requeued_after_a_failed_bind_is_its_latest_version() -> None:
    """Updates to a pod whose binding cycle runs are skipped by the informer handler (the pod
    is assumed). If the binding fails, the pod goes back to the queue as the informer has it
    now, as upstream's failure handler requeues the informer's copy: not as it was popped."""
    clock = FakeClock()
    async with open_sim(clock) as sim:
        sched = await synced(sim, clock)
        fw = next(iter(sched.frameworks.values()))
        (pod,) = await create_pods(sim, sched, gpu_pod("p", 1))
        uid = pod["metadata"]["uid"]

        async def pre_bind(*_args: Any) -> Status:
            patch = {"metadata": {"labels": {"changed": "while-binding"}}}
            await sim.kube.patch(f"{PODS}/p", patch, "application/merge-patch+json")
            await sched.pods.list()  # the update reaches the handler while the pod is assumed
            return Status.error("PreBind fails")

        fw.run_pre_bind = pre_bind  # type: ignore[method-assign]
        await cycle(sched, pod)
        queued = sched.queue.get(uid)
        assert queued is not None
        assert queued.pod["metadata"].get("labels") == {"changed": "while-binding"}


async def test_pending_pods_are_published_while_no_cycle_runs() -> None:
    """A gated pod never causes a scheduling cycle: ``scheduler_pending_pods{queue="gated"}``
    must not wait for one to be published."""
    sched = handlers_only(FakeClock())
    pod = gpu_pod("gated", 1, uid="uid-gated")
    pod["spec"]["schedulingGates"] = [{"name": "example.com/wait"}]
    sched._on_pod("ADDED", pod, None)
    assert sched.queue.location("uid-gated") == "gated"
    publisher = asyncio.create_task(sched._publish_metrics())
    await asyncio.sleep(0)
    publisher.cancel()
    await asyncio.gather(publisher, return_exceptions=True)
    rendered = sched.metrics.render().decode()
    assert 'scheduler_pending_pods{queue="gated"} 1.0' in rendered, [
        line for line in rendered.splitlines() if line.startswith("scheduler_pending_pods")
    ]


async def test_a_pod_pinned_to_a_node_that_does_not_exist_waits_for_that_node() -> None:
    """NodeAffinity's PreFilter pins the pod to a node the cluster does not have (yet): as
    upstream, every node is 'didn't satisfy plugin(s) [NodeAffinity]', and the pod waits in
    unschedulable for a Node event NodeAffinity registered for (not in backoff, retried every
    few seconds, told 'no nodes available' with nodes there)."""
    sched = handlers_only(FakeClock())
    pod = gpu_pod("pinned", 1, uid="uid-pinned")
    pod["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": ["not-yet"]}
                        ]
                    }
                ]
            }
        }
    }
    sched._on_pod("ADDED", pod, None)
    result = await cycle(sched, pod)
    assert result.node is None
    assert {s.message() for s in result.statuses.values()} == {
        "node(s) didn't satisfy plugin(s) [NodeAffinity]"
    }
    assert sched.queue.location("uid-pinned") == "unschedulable"


async def test_a_pod_held_by_its_scheduling_gates_is_left_to_the_api_server() -> None:
    """spec.schedulingGates: the API server set PodScheduled=False (SchedulingGated) at create;
    the scheduler writes no Event or condition for it. An invalid annotation is still told."""
    sched = handlers_only(FakeClock())
    gated = gpu_pod("gated", 1, uid="uid-gated")
    gated["spec"]["schedulingGates"] = [{"name": "example.com/wait"}]
    sched._on_pod("ADDED", gated, None)
    assert sched.queue.location("uid-gated") == "gated"
    assert sched.events.pending == 0
    invalid = gpu_pod("invalid", 1, uid="uid-invalid")
    invalid["metadata"].setdefault("annotations", {})["gpusched.io/priority"] = "urgent"
    sched._on_pod("ADDED", invalid, None)
    assert sched.queue.location("uid-invalid") == "gated"
    assert sched.events.pending > 0
