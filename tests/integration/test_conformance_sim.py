"""What only the simulation provides: simulated kubelets and injected faults.

The kubelet behaviour mirrors what a real kubelet shows through the API (pod phases,
conditions, admission failures as the device manager and
the lifecycle predicate report them, confirming terminations); faults are
the errors, latency and cut streams a client must survive. All ``simonly``. Time passes on a
``FakeClock`` where the test needs it to; nothing sleeps.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from conformance_helpers import (
    EventStream,
    binding,
    call,
    condition,
    eventually,
    fails,
    gpu_pod,
    lease,
    phase,
    pod,
    rv,
    summary,
    wait_for,
    wait_gone,
)
from conftest import Target, sim_of
from kubernetes_asyncio import client as k8s

from gpusched.clock import FakeClock
from gpusched.sim import FaultRule, SimCluster
from gpusched.sim.fleet import apply_fleet, delete_fleet, load_cluster_spec

pytestmark = pytest.mark.simonly

NODE = "dgx-h100-000"
"""The one node of ``load_cluster_spec("dgx-h100", nodes=1)``: 8 x H100, InternalIP 10.1.0.1."""


@pytest.fixture
async def fleet(target: Target) -> AsyncIterator[Target]:
    """One DGX H100 node, applied through the API as ``gpusched sim fleet apply`` does."""
    spec = load_cluster_spec("dgx-h100", nodes=1)
    await apply_fleet(target.api(), spec)
    try:
        yield target
    finally:
        await delete_fleet(target.api(), spec)


async def place(target: Target, body: dict[str, Any], node_name: str = NODE) -> dict[str, Any]:
    """Create a pod and bind it, as a scheduler would; returns the created pod."""
    core = target.core()
    created = await call(core.create_namespaced_pod, target.namespace, body)
    assert created.status == 201, created.body
    name = body["metadata"]["name"]
    bound = await call(
        core.create_namespaced_pod_binding, name, target.namespace, binding(name, node_name)
    )
    assert bound.status == 201, bound.body
    result: dict[str, Any] = created.body
    return result


def in_phase(*phases: str) -> Any:
    return lambda obj: phase(obj) in phases


# --------------------------------------------------------------------------- kubelets


async def test_a_pod_bound_to_a_fleet_node_runs(fleet: Target) -> None:
    """The kubelet admits the pod and reports Running with a kubelet's status fields."""
    await place(fleet, gpu_pod("runner", 2))
    running = await wait_for(
        fleet.core().list_namespaced_pod, fleet.namespace, name="runner", until=in_phase("Running")
    )
    status = running["status"]
    assert status["hostIP"] == "10.1.0.1"
    assert status["podIP"]
    assert status["startTime"]
    ready = condition(running, "Ready")
    assert ready is not None
    assert ready["status"] == "True"
    scheduled = condition(running, "PodScheduled")
    assert scheduled is not None
    assert scheduled["status"] == "True"
    [container] = status["containerStatuses"]
    assert container["name"] == "main"
    assert container["ready"] is True
    assert "running" in container["state"]


async def test_a_pod_with_a_duration_succeeds_when_the_clock_moves() -> None:
    """sim.gpusched.io/duration: the kubelet finishes the pod that long after it started, on
    its clock; a FakeClock makes 30 s pass in an instant."""
    clock = FakeClock()
    spec = load_cluster_spec("dgx-h100", nodes=1)
    async with SimCluster(spec, clock=clock, bookmark_interval=0.2) as sim:
        api = sim.api_client()
        core = k8s.CoreV1Api(api)
        body = gpu_pod("job", 1, annotations={"sim.gpusched.io/duration": "30s"})
        await core.create_namespaced_pod("default", body)
        bound = await call(
            core.create_namespaced_pod_binding, "job", "default", binding("job", NODE)
        )
        assert bound.status == 201, bound.body
        running = await wait_for(
            core.list_namespaced_pod, "default", name="job", until=in_phase("Running")
        )
        assert running["status"]["startTime"] == "2026-01-01T00:00:00Z"
        # The kubelet arms its 30 s timer right after reporting Running; wait until it has.
        await eventually(lambda: clock.sleepers > 0)
        async with EventStream(
            core.list_namespaced_pod,
            "default",
            field_selector="metadata.name=job",
            resource_version=str(rv(running)),
        ) as events:
            await clock.advance(31)
            done = await events.until(lambda e: phase(e["object"]) == "Succeeded")
    obj = done["object"]
    assert done["type"] == "MODIFIED"
    [container] = obj["status"]["containerStatuses"]
    terminated = container["state"]["terminated"]
    assert terminated["exitCode"] == 0
    assert terminated["reason"] == "Completed"
    ready = condition(obj, "Ready")
    assert ready is not None
    assert (ready["status"], ready.get("reason")) == ("False", "PodCompleted")


async def test_an_over_committed_pod_fails_admission(fleet: Target) -> None:
    """Kubelet admission: nvidia.com/gpu is a device-plugin resource, so the device manager
    (admitted before the lifecycle predicate) refuses a pod asking for more devices than are
    free, with reason UnexpectedAdmissionError and "Pod was rejected: Allocate failed ..."."""
    core = fleet.core()
    await place(fleet, gpu_pod("big", 6))
    await wait_for(core.list_namespaced_pod, fleet.namespace, name="big", until=in_phase("Running"))
    await place(fleet, gpu_pod("late", 4))
    failed = await wait_for(
        core.list_namespaced_pod, fleet.namespace, name="late", until=in_phase("Failed", "Running")
    )
    assert phase(failed) == "Failed"
    assert failed["status"]["reason"] == "UnexpectedAdmissionError"
    assert failed["status"]["message"] == (
        "Pod was rejected: Allocate failed due to requested number of devices unavailable for "
        "nvidia.com/gpu. Requested: 4, Available: 2, which is unexpected"
    )


async def test_the_kubelet_confirms_a_graceful_deletion(fleet: Target) -> None:
    """A DELETE marks the running pod terminating (grace 30); the kubelet stops it and
    confirms with a DELETE of grace 0 and a uid precondition; watchers then see DELETED."""
    core = fleet.core()
    ns = fleet.namespace
    await place(fleet, gpu_pod("stopping", 1))
    await wait_for(core.list_namespaced_pod, ns, name="stopping", until=in_phase("Running"))
    reply = await call(core.delete_namespaced_pod, "stopping", ns)
    assert reply.status == 200, reply.body
    assert reply.body["metadata"]["deletionGracePeriodSeconds"] == 30
    gone = await wait_gone(core.list_namespaced_pod, ns, name="stopping")
    if gone is not None:
        assert gone["metadata"]["uid"] == reply.body["metadata"]["uid"]
    await fails(core.read_namespaced_pod("stopping", ns), 404)


# --------------------------------------------------------------------------- faults


@pytest.fixture
async def quiet_sim() -> AsyncIterator[SimCluster]:
    """A cluster without kubelets, so no request but the test's meets the injected faults."""
    async with SimCluster(None, kubelets=False) as sim:
        yield sim


@pytest.mark.parametrize(
    ("rule", "attempt", "reason"),
    [
        (FaultRule("create", "pods", 1.0, 500), "create-pod", "InternalError"),
        (FaultRule("list", "pods", 1.0, 429), "list-pods", "TooManyRequests"),
        (FaultRule("update", "leases", 1.0, 409), "update-lease", "Conflict"),
        (FaultRule("create", "leases", 1.0, 409), "create-lease", "AlreadyExists"),
        (FaultRule("*", "pods/binding", 1.0, 500), "bind", "InternalError"),
    ],
    ids=["create-500", "list-429", "update-409", "create-409", "binding-500"],
)
async def test_injected_errors(
    quiet_sim: SimCluster, rule: FaultRule, attempt: str, reason: str
) -> None:
    """Each injected error is the Status a real server would send for that failure, counted
    per (verb, code); clearing the faults lets the same request through."""
    api = quiet_sim.api_client()
    core = k8s.CoreV1Api(api)
    coord = k8s.CoordinationV1Api(api)
    await core.create_namespaced_pod("default", pod("target"))
    current = await coord.create_namespaced_lease("default", lease("target"))
    attempts = {
        "create-pod": lambda: core.create_namespaced_pod("default", pod("fresh")),
        "list-pods": lambda: core.list_namespaced_pod("default"),
        "update-lease": lambda: coord.replace_namespaced_lease("target", "default", current),
        "create-lease": lambda: coord.create_namespaced_lease("default", lease("fresh")),
        "bind": lambda: call(
            core.create_namespaced_pod_binding, "target", "default", binding("target", "n1")
        ),
    }
    quiet_sim.faults.set([rule])
    if attempt == "bind":
        reply = await attempts[attempt]()
        assert reply.status == rule.code, reply.body
        status = reply.body
    else:
        status = await fails(attempts[attempt](), rule.code)
    assert status["kind"] == "Status"
    assert status["status"] == "Failure"
    assert status["reason"] == reason
    assert status["code"] == rule.code
    assert quiet_sim.faults.injected[(rule.verb if rule.verb != "*" else "create", rule.code)] == 1

    quiet_sim.faults.clear()
    result = await attempts[attempt]()
    if attempt == "bind":
        assert result.status == 201, result.body


async def test_an_injected_429_says_when_to_retry(quiet_sim: SimCluster) -> None:
    """429 TooManyRequests carries Retry-After and details.retryAfterSeconds, as the
    max-in-flight and priority-and-fairness filters send it."""
    core = k8s.CoreV1Api(quiet_sim.api_client())
    quiet_sim.faults.set([FaultRule("get", "pods", 1.0, 429)])
    reply = await call(core.read_namespaced_pod, "anything", "default")
    assert reply.status == 429
    assert reply.headers.get("Retry-After") == "1"
    assert reply.body["details"]["retryAfterSeconds"] == 1
    assert reply.body["reason"] == "TooManyRequests"


async def test_injected_latency_is_applied(quiet_sim: SimCluster) -> None:
    """Latency is a setting the server applies to each request; the request still succeeds."""
    core = k8s.CoreV1Api(quiet_sim.api_client())
    quiet_sim.faults.set(latency=0.001)
    before = quiet_sim.server.requests
    reply = await call(core.list_namespaced_pod, "default")
    assert reply.status == 200
    assert quiet_sim.faults.latency == 0.001
    assert quiet_sim.server.requests == before + 1
    assert quiet_sim.faults.total() == 0


@pytest.mark.parametrize("cut", [1, 3])
async def test_a_watch_is_cut_after_n_events(quiet_sim: SimCluster, cut: int) -> None:
    """watch-events=N: the server ends each watch stream after exactly N events, as a load
    balancer or an apiserver restart would; a client resumes from the last resourceVersion
    and misses nothing."""
    core = k8s.CoreV1Api(quiet_sim.api_client())
    start = await call(core.list_namespaced_pod, "default")
    since = start.body["metadata"]["resourceVersion"]
    for i in range(5):
        await core.create_namespaced_pod("default", pod(f"cut-{i}"))
    quiet_sim.faults.set(watch_events=cut)
    seen: list[tuple[str, str]] = []
    while len(seen) < 5:
        expected = min(cut, 5 - len(seen))
        async with EventStream(
            core.list_namespaced_pod, "default", resource_version=since
        ) as events:
            got = await events.take(expected)
            if expected == cut:
                assert await events.next() is None, "the stream went on after the cut"
        seen += summary(got)
        since = got[-1]["object"]["metadata"]["resourceVersion"]
    assert seen == [("ADDED", f"cut-{i}") for i in range(5)]


async def test_faults_are_per_verb_and_resource(target: Target) -> None:
    """A rule for one verb and resource leaves the others alone (here on the shared cluster,
    whose kubelets keep working)."""
    sim = sim_of(target)
    core = target.core()
    sim.faults.set([FaultRule("delete", "leases", 1.0, 500)])
    try:
        reply = await call(core.create_namespaced_pod, target.namespace, pod("unaffected"))
        assert reply.status == 201, reply.body
        coord = k8s.CoordinationV1Api(target.api())
        await coord.create_namespaced_lease(target.namespace, lease("l"))
        await fails(coord.delete_namespaced_lease("l", target.namespace), 500)
        assert sim.faults.injected[("delete", 500)] == 1
    finally:
        sim.faults.clear()
