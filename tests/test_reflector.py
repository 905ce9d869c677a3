"""The reflector keeps an exact copy of the server's objects through cut watches, 410s and
injected errors (what the kubelet and the scheduler's informers rely on)."""

from __future__ import annotations

import asyncio
import contextlib
import random
from typing import Any

import pytest

from gpusched.annotations import Assignment, assignment_annotations
from gpusched.inventory import RESOURCE_GPU
from gpusched.kube.client import Kube, resource_path
from gpusched.kube.errors import APIError, APIGone, APINotFound
from gpusched.kube.reflector import Reflector, object_key
from gpusched.scheduler import Scheduler
from gpusched.sim import FaultRule, SimCluster
from gpusched.sim.fleet import ClusterSpec, ensure_crd, node_names

LEASES = "/apis/coordination.k8s.io/v1/namespaces/default/leases"
PODS = "/api/v1/namespaces/default/pods"


def lease(name: str, holder: str) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "labels": {"holder": holder}},
        "spec": {"holderIdentity": holder},
    }


async def _mutate(kube: Kube, rng: random.Random, steps: int) -> None:
    """Random creates, updates and deletes, retried through injected errors."""
    for _ in range(steps):
        name = f"l{rng.randrange(15)}"
        op = rng.choice(["create", "update", "delete"])
        for _attempt in range(50):
            try:
                if op == "create":
                    await kube.create(LEASES, lease(name, f"h{rng.randrange(3)}"))
                elif op == "update":
                    body = {"metadata": {"labels": {"holder": f"h{rng.randrange(3)}"}}}
                    await kube.patch(f"{LEASES}/{name}", body)
                else:
                    await kube.delete(f"{LEASES}/{name}")
                break
            except APIError as exc:
                if exc.code in (404, 409):
                    break  # the operation does not apply to the current state
                continue  # injected 500/429: try again


async def _converged(reflector: Reflector, kube: Kube) -> bool:
    fresh = await kube.get(LEASES)
    truth = {object_key(o): o["metadata"]["resourceVersion"] for o in fresh["items"]}
    mine = {k: o["metadata"]["resourceVersion"] for k, o in reflector.items.items()}
    return truth == mine


@pytest.mark.simonly
@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_reflector_converges_through_cut_watches_410s_and_errors(seed: int) -> None:
    rng = random.Random(seed)
    # A window of 8 events makes resumes after a cut regularly fall out of it (410, re-list).
    async with SimCluster(None, kubelets=False, window=8) as sim:
        seen: list[str] = []
        marker = asyncio.Event()
        marker_gone = asyncio.Event()

        def handler(kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
            seen.append(kind)
            if obj["metadata"]["name"] == "marker":
                (marker_gone if kind == "DELETED" else marker).set()

        reflector = Reflector(
            Kube(sim.api_client()),
            LEASES,
            handler=handler,
            page_size=4,
            backoff_initial=0.01,
            backoff_max=0.05,
        )
        task = asyncio.create_task(reflector.run())
        try:
            await asyncio.wait_for(reflector.synced.wait(), timeout=30)
            sim.faults.set(
                [FaultRule("watch", "leases", 0.3, 500), FaultRule("list", "leases", 0.3, 429)],
                watch_events=3,
            )
            await _mutate(sim.kube, rng, 75)
            # Every watch fails while 40 writes push the reflector's resourceVersion out of the
            # 8-event window: when watches work again the resume gets 410 and it must re-list.
            sim.faults.set([FaultRule("watch", "leases", 1.0, 500)])
            for i in range(40):
                await sim.kube.create(LEASES, lease(f"gap{i}", "h0"))
            sim.faults.set(
                [FaultRule("watch", "leases", 0.3, 500), FaultRule("list", "leases", 0.3, 429)]
            )
            await _mutate(sim.kube, rng, 75)
            sim.faults.clear()
            # Converged once the reflector has caught up with a final marker write.
            await sim.kube.create(LEASES, lease("marker", "done"))
            await asyncio.wait_for(marker.wait(), timeout=60)
            assert await _converged(reflector, sim.kube)
            assert reflector.lists > 1, "the small window should have forced a re-list"
            assert sim.faults.total() > 0
            await sim.kube.delete(f"{LEASES}/marker")
            await asyncio.wait_for(marker_gone.wait(), timeout=60)
            assert await _converged(reflector, sim.kube)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


@pytest.mark.simonly
async def test_watch_streams_are_cut_after_the_configured_seconds() -> None:
    async with SimCluster(None, kubelets=False) as sim:
        sim.faults.set(watch_seconds=0.2)
        rv = (await sim.kube.get(LEASES))["metadata"]["resourceVersion"]
        events = [e async for e in sim.kube.watch(LEASES, {"resourceVersion": rv})]
        assert events == []  # the stream ended on its own, with nothing to deliver


def _gpu_pod(name: str, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": "gpusched",
            "terminationGracePeriodSeconds": 0,  # deleted at once, kubelet or not
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"limits": {RESOURCE_GPU: str(gpus)}},
                }
            ],
        },
    }


@pytest.mark.simonly
async def test_a_pod_recreated_under_its_name_is_deleted_then_added_on_relist() -> None:
    """A StatefulSet pod (or any pod re-created under its name) deleted and re-created while
    the pods watch was down: the re-list that follows the 410 keys objects by namespace/name,
    yet must report DELETED(old) then ADDED(new), as a watch would have, not a MODIFIED from
    the old uid to the new one. The scheduler's cache, fed by that informer, must free the old
    pod's GPUs (handled as a MODIFIED, the old bound pod stayed booked until a restart)."""
    spec = ClusterSpec.model_validate(
        {
            "name": "relist",
            "pools": [
                {
                    "name": "n",
                    "count": 1,
                    "cpu": 32,
                    "memory": "128Gi",
                    "gpu": {
                        "product": "NVIDIA H100 80GB HBM3",
                        "memoryMiB": 81559,
                        "count": 2,
                        "topology": "nvswitch",
                    },
                }
            ],
        }
    )
    (node,) = node_names(spec)
    # A window of one event: any resume from before the re-creation is answered 410 Gone.
    async with SimCluster(spec, kubelets=False, window=1) as sim:
        sched = Scheduler(Kube(sim.api_client()), identity="me", rng=random.Random(0))
        seen: list[tuple[str, str]] = []
        on_pod = sched.pods.handler
        assert on_pod is not None

        def handler(kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
            seen.append((kind, obj["metadata"]["uid"]))
            on_pod(kind, obj, old)

        sched.pods.handler = handler
        # Bound by a scheduler to both GPUs (as its Binding leaves it: node and annotations).
        body = _gpu_pod("web-0", 2)
        body["spec"]["nodeName"] = node
        body["metadata"]["annotations"] = assignment_annotations(Assignment((0, 1), (), (), ""))
        old = await sim.kube.create(PODS, body)
        for informer in sched.informers:  # the scheduler's informers, listed once
            try:
                await informer.list()
            except APINotFound:  # a kind the simulation does not serve (Volcano's)
                if not informer.optional:
                    raise
        info = sched.cache.node_info(node)
        assert info is not None
        assert [d.index for d in info.ledger.devices if d.free] == []
        # While the pods watch is down: deleted, and created again (pending) under its name.
        await sim.kube.delete(f"{PODS}/web-0")
        new = await sim.kube.create(PODS, _gpu_pod("web-0", 2))
        with pytest.raises(APIGone):  # the resume: what Reflector.run re-lists on
            await sched.pods.watch_once()
        seen.clear()
        await sched.pods.list()
        assert seen == [
            ("DELETED", old["metadata"]["uid"]),
            ("ADDED", new["metadata"]["uid"]),
        ]
        assert sched.cache.get_pod(old["metadata"]["uid"]) is None, (
            "the deleted pod's GPUs are still held"
        )
        info = sched.cache.node_info(node)
        assert info is not None
        assert [d.index for d in info.ledger.devices if d.free] == [0, 1]


@pytest.mark.simonly  # deletes a CRD
async def test_an_optional_resource_not_served_is_synced_and_empty_until_it_is(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A CRD not installed: synced at once with nothing, one warning however often it is
    retried, its objects once installed, and deletions when it goes again."""
    path = resource_path("gpusched.io", "v1alpha1", "gpuclasses")
    crd = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gpuclasses.gpusched.io"
    async with SimCluster(None, kubelets=False) as sim:
        await sim.kube.delete(crd)
        seen: list[tuple[str, str]] = []
        changed = asyncio.Event()

        def handler(kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
            seen.append((kind, obj["metadata"]["name"]))
            changed.set()

        reflector = Reflector(
            Kube(sim.api_client()),
            path,
            handler=handler,
            backoff_max=0.02,
            watch_timeout=1,
            name="gpuclasses",
            optional=True,
        )
        task = asyncio.create_task(reflector.run())
        try:
            await asyncio.wait_for(reflector.synced.wait(), timeout=30)
            assert reflector.missing
            assert reflector.items == {}
            await ensure_crd(sim.api_client(), name="gpuclasses.gpusched.io")
            await sim.kube.create(
                path,
                {
                    "apiVersion": "gpusched.io/v1alpha1",
                    "kind": "GPUClass",
                    "metadata": {"name": "h100"},
                    "spec": {},
                },
            )
            await asyncio.wait_for(changed.wait(), timeout=30)
            assert seen == [("ADDED", "h100")]
            assert not reflector.missing
            # Retried every 20 ms while the CRD was being installed, told once.
            warnings = [r for r in caplog.records if "going on without it" in r.message]
            assert len(warnings) == 1
            assert "404" in warnings[0].message
            changed.clear()
            await sim.kube.delete(crd)
            await asyncio.wait_for(changed.wait(), timeout=30)
            assert seen[-1] == ("DELETED", "h100")
            assert reflector.items == {}
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
