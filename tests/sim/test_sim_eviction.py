"""The ``pods/eviction`` subresource, through the simulated API server.

As ``pkg/registry/core/pod/storage/eviction.go``: a PDB that allows no disruption answers 429
with its ``DisruptionBudget`` cause, one that does is decremented and records the pod in
``disruptedPods`` in the same request; pending and terminal pods go without a PDB check;
several PDBs are a 500; dry run changes nothing; the evicted pod gets ``DisruptionTarget``
before its (graceful) deletion. Two evictions racing for the last allowed disruption: one wins.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, cast

import pytest
from policy_helpers import NS, PDBS, PODS, failure, pdb, pod, running_pod, set_ready, wait_for

from gpusched.kube.client import Kube
from gpusched.kube.errors import APIError, APINotFound
from gpusched.sim import SimCluster
from gpusched.sim.fleet import load_cluster_spec

APP = {"matchLabels": {"app": "train"}}
LABELS = {"app": "train"}


def eviction(name: str, api_version: str = "policy/v1", **delete_options: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": api_version,
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": NS},
    }
    if delete_options:
        body["deleteOptions"] = delete_options
    return body


async def evict(kube: Kube, name: str, query: dict[str, str] | None = None, **opts: Any) -> Any:
    return await kube.create(f"{PODS}/{name}/eviction", eviction(name, **opts), query)


async def synced(kube: Kube, name: str, pred: Any = None) -> dict[str, Any]:
    def ready(o: dict[str, Any]) -> bool:
        observed = o["status"].get("observedGeneration") == o["metadata"]["generation"]
        return observed and (pred is None or pred(o))

    return await wait_for(kube, f"{PDBS}/{name}", ready)


@pytest.fixture
async def kube() -> AsyncIterator[Kube]:
    async with SimCluster(None, kubelets=False) as sim:
        yield sim.kube


async def test_without_a_budget_the_pod_is_marked_and_deleted_gracefully(kube: Kube) -> None:
    await running_pod(kube, "p", LABELS)
    answer = await evict(kube, "p")
    assert answer == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "code": 201,
    }
    gone = await kube.get(f"{PODS}/p")  # terminating until its kubelet confirms
    assert gone["metadata"]["deletionGracePeriodSeconds"] == 30
    (target,) = [c for c in gone["status"]["conditions"] if c["type"] == "DisruptionTarget"]
    assert (target["status"], target["reason"], target["message"]) == (
        "True",
        "EvictionByEvictionAPI",
        "Eviction API: evicting",
    )


async def test_blocked_then_allowed(kube: Kube) -> None:
    for i in range(2):
        await running_pod(kube, f"p{i}", LABELS)
    await kube.create(PDBS, pdb("b", APP, minAvailable=2))
    await synced(kube, "b")
    err = await failure(evict(kube, "p0"))
    assert (err.code, err.reason) == (429, "TooManyRequests")
    assert err.status["message"] == (
        "Cannot evict pod as it would violate the pod's disruption budget."
    )
    assert err.status["details"] == {
        "causes": [
            {
                "reason": "DisruptionBudget",
                "message": "The disruption budget b needs 2 healthy pods and has 2 currently",
            }
        ]
    }
    assert "deletionTimestamp" not in (await kube.get(f"{PODS}/p0"))["metadata"]
    await running_pod(kube, "p2", LABELS)
    await synced(kube, "b", lambda o: o["status"]["disruptionsAllowed"] == 1)
    await evict(kube, "p0")
    assert (await kube.get(f"{PODS}/p0"))["metadata"]["deletionTimestamp"]
    after = await synced(kube, "b", lambda o: o["status"]["currentHealthy"] == 2)
    assert after["status"]["disruptionsAllowed"] == 0
    err = await failure(evict(kube, "p1"))
    assert err.code == 429


async def test_the_decrement_and_disrupted_pods_are_written_with_the_eviction(
    kube: Kube,
) -> None:
    for i in range(2):
        await running_pod(kube, f"p{i}", LABELS)
    await kube.create(PDBS, pdb("b", APP, minAvailable=0))
    before = await synced(kube, "b", lambda o: o["status"]["disruptionsAllowed"] == 2)
    events = cast(
        AsyncGenerator[dict[str, Any]],
        kube.watch(PDBS, {"resourceVersion": before["metadata"]["resourceVersion"]}),
    )
    await evict(kube, "p0", gracePeriodSeconds=0)
    with pytest.raises(APINotFound):
        await kube.get(f"{PODS}/p0")
    first = await anext(events)  # the eviction's own status write, before the pod went
    assert first["object"]["status"]["disruptionsAllowed"] == 1
    assert set(first["object"]["status"]["disruptedPods"]) == {"p0"}
    await events.aclose()


async def test_dry_run_changes_nothing(kube: Kube) -> None:
    await running_pod(kube, "p", LABELS)
    await kube.create(PDBS, pdb("b", APP, minAvailable=0))
    before = await synced(kube, "b", lambda o: o["status"]["disruptionsAllowed"] == 1)
    await evict(kube, "p", {"dryRun": "All"})
    await evict(kube, "p", dryRun=["All"])
    pod_after = await kube.get(f"{PODS}/p")
    assert "deletionTimestamp" not in pod_after["metadata"]
    assert all(c["type"] != "DisruptionTarget" for c in pod_after["status"]["conditions"])
    after = await kube.get(f"{PDBS}/b")
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


async def test_two_evictions_race_for_the_last_allowed_disruption(kube: Kube) -> None:
    for i in range(3):
        await running_pod(kube, f"p{i}", LABELS)
    await kube.create(PDBS, pdb("b", APP, minAvailable=2))
    await synced(kube, "b", lambda o: o["status"]["disruptionsAllowed"] == 1)
    results = await asyncio.gather(evict(kube, "p0"), evict(kube, "p1"), return_exceptions=True)
    won = [r for r in results if not isinstance(r, BaseException)]
    lost = [r for r in results if isinstance(r, APIError)]
    assert len(won) == 1
    assert len(lost) == 1
    assert lost[0].code == 429
    terminating = [
        n
        for n in ("p0", "p1")
        if (await kube.get(f"{PODS}/{n}"))["metadata"].get("deletionTimestamp")
    ]
    assert len(terminating) == 1


async def test_pending_and_terminal_pods_skip_the_budget(kube: Kube) -> None:
    await kube.create(PODS, pod("pending", LABELS))
    await running_pod(kube, "done", LABELS)
    await kube.patch(
        f"{PODS}/done/status",
        {"status": {"phase": "Succeeded"}},
        "application/strategic-merge-patch+json",
    )
    await kube.create(PDBS, pdb("b", APP, minAvailable=5))
    await synced(kube, "b")
    await evict(kube, "pending")
    await evict(kube, "done")
    with pytest.raises(APINotFound):  # not on a node: deleted at once
        await kube.get(f"{PODS}/pending")


async def test_more_than_one_budget_is_a_500(kube: Kube) -> None:
    await running_pod(kube, "p", LABELS)
    await kube.create(PDBS, pdb("one", APP, minAvailable=0))
    await kube.create(PDBS, pdb("two", {}, minAvailable=0))
    await synced(kube, "two")
    err = await failure(evict(kube, "p"))
    assert err.code == 500
    assert err.status == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "This pod has more than one PodDisruptionBudget, which the eviction "
        "subresource does not support.",
        "code": 500,
    }


UNREADY = [
    pytest.param(None, 2, True, id="budget-met-lets-an-unready-pod-go"),
    pytest.param(None, 3, False, id="budget-short-keeps-it"),
    pytest.param("AlwaysAllow", 3, True, id="always-allow"),
]


@pytest.mark.parametrize(("policy", "min_available", "evicted"), UNREADY)
async def test_unready_pods(
    kube: Kube, policy: str | None, min_available: int, evicted: bool
) -> None:
    for i in range(2):
        await running_pod(kube, f"ok{i}", LABELS)
    await running_pod(kube, "sick", LABELS, ready=False)
    spec: dict[str, Any] = {"minAvailable": min_available}
    if policy:
        spec["unhealthyPodEvictionPolicy"] = policy
    await kube.create(PDBS, pdb("b", APP, **spec))
    before = await synced(kube, "b")
    if evicted:
        await evict(kube, "sick")
        after = await kube.get(f"{PDBS}/b")
        assert "disruptedPods" not in after["status"]  # no decrement was needed
        assert before["status"]["disruptionsAllowed"] == after["status"]["disruptionsAllowed"]
    else:
        err = await failure(evict(kube, "sick"))
        assert err.code == 429


async def test_becoming_ready_meanwhile_is_noticed(kube: Kube) -> None:
    await running_pod(kube, "p", LABELS, ready=False)
    await kube.create(PDBS, pdb("b", APP, minAvailable=1))
    await synced(kube, "b")
    await set_ready(kube, "p", True)
    err = await failure(evict(kube, "p"))  # now Ready, and the budget needs it
    assert err.code == 429


BAD = [
    pytest.param(
        {"metadata": {"name": "other"}},
        400,
        "name in URL does not match name in Eviction object",
        id="name",
    ),
    pytest.param({"apiVersion": "v1"}, 400, "does not match the expected API version", id="gv"),
]


@pytest.mark.parametrize(("change", "code", "message"), BAD)
async def test_bad_bodies(kube: Kube, change: dict[str, Any], code: int, message: str) -> None:
    await running_pod(kube, "p", LABELS)
    body = {**eviction("p"), **change}
    err = await failure(kube.create(f"{PODS}/p/eviction", body))
    assert err.code == code
    assert message in err.message


async def test_v1beta1_bodies_and_preconditions(kube: Kube) -> None:
    running = await running_pod(kube, "p", LABELS)
    err = await failure(
        kube.create(
            f"{PODS}/p/eviction",
            eviction("p", "policy/v1beta1", preconditions={"resourceVersion": "1"}),
        )
    )
    assert err.code == 409
    rv = running["metadata"]["resourceVersion"]
    await kube.create(
        f"{PODS}/p/eviction",
        eviction("p", "policy/v1beta1", preconditions={"resourceVersion": rv}),
    )
    assert (await kube.get(f"{PODS}/p"))["metadata"]["deletionTimestamp"]


async def test_missing_pod_and_discovery(kube: Kube) -> None:
    err = await failure(evict(kube, "ghost"))
    assert err.code == 404
    listing = await kube.get("/api/v1")
    (entry,) = [r for r in listing["resources"] if r["name"] == "pods/eviction"]
    assert entry == {
        "name": "pods/eviction",
        "singularName": "",
        "namespaced": True,
        "group": "policy",
        "version": "v1",
        "kind": "Eviction",
        "verbs": ["create"],
    }


async def test_with_kubelets_the_evicted_pod_goes_and_the_budget_recovers() -> None:
    """End to end: the simulated kubelet runs the pods (Ready), the eviction marks one
    terminating, the kubelet confirms its deletion and the controller counts again."""
    node = "dgx-h100-000"
    async with SimCluster(load_cluster_spec("dgx-h100", nodes=1)) as sim:
        kube = sim.kube
        for i in range(3):
            await kube.create(PODS, pod(f"p{i}", LABELS, nodeName=node))
        await kube.create(PDBS, pdb("b", APP, minAvailable=2))
        await synced(kube, "b", lambda o: o["status"]["currentHealthy"] == 3)
        await evict(kube, "p0")
        await wait_gone(kube, "p0")
        after = await synced(kube, "b", lambda o: o["status"]["expectedPods"] == 2)
        assert (after["status"]["currentHealthy"], after["status"]["disruptionsAllowed"]) == (
            2,
            0,
        )
        assert "disruptedPods" not in after["status"]
        err = await failure(evict(kube, "p1"))
        assert err.code == 429


async def wait_gone(kube: Kube, name: str) -> None:
    async with asyncio.timeout(10):
        listing = await kube.get(PODS, {"fieldSelector": f"metadata.name={name}"})
        if not listing["items"]:
            return
        query = {
            "fieldSelector": f"metadata.name={name}",
            "resourceVersion": listing["metadata"]["resourceVersion"],
        }
        async for ev in kube.watch(PODS, query):
            if ev["type"] == "DELETED":
                return
