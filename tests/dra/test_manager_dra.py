"""DraManager (gpusched.dra.manager): pod -> claim resolution, the allocated-device index and
the ledger's view of it, in-flight allocations, release marks (table-driven, no I/O); and its
writes against the simulated API server (the status write as the atomic step, release and
deallocation, claims from templates)."""

from __future__ import annotations

import asyncio
import copy
import functools
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from gpusched.dra.allocator import Allocation
from gpusched.dra.manager import (
    FINALIZER,
    POD_CLAIM_NAME_ANNOTATION,
    RESERVED_FOR_MAX,
    DraManager,
    PodClaims,
    Refusal,
    claims_path,
)
from gpusched.inventory import GPUNodeInventory
from gpusched.kube.client import Kube, resource_path
from gpusched.sim.cluster import SimCluster
from gpusched.sim.fleet import build_fleet, load_cluster_spec
from gpusched.sim.resource_slices import DEVICE_CLASSES, resource_slice

NS = "default"
NODE = "node-a"


@functools.cache
def inventory() -> GPUNodeInventory:
    found = build_fleet(load_cluster_spec("dgx-h100", nodes=1))[0].inventory
    assert found is not None
    return found


def node_slice() -> dict[str, Any]:
    body = resource_slice(inventory())
    body["spec"]["nodeName"] = NODE
    body["spec"]["pool"]["name"] = NODE
    body["metadata"]["name"] = f"{NODE}-gpu"
    return body


def claim(
    name: str,
    count: int = 1,
    *,
    allocated: list[int] | None = None,
    reserved: list[str] = (),  # type: ignore[assignment]
    owner: str | None = None,
    deleting: bool = False,
    rv: int = 1,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "uid": f"uid-{name}"}
    meta["resourceVersion"] = str(rv)
    if owner:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": owner, "uid": owner, "controller": True}
        ]
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    body: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": meta,
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpus",
                        "exactly": {"deviceClassName": "gpu.nvidia.com", "count": count},
                    }
                ]
            }
        },
        "status": {},
    }
    if allocated is not None:
        body["status"]["allocation"] = allocation(allocated)
    if reserved:
        body["status"]["reservedFor"] = [
            {"resource": "pods", "name": uid, "uid": uid} for uid in reserved
        ]
    return body


def allocation(indices: list[int]) -> dict[str, Any]:
    return {
        "devices": {
            "results": [
                {"request": "gpus", "driver": "gpu.nvidia.com", "pool": NODE, "device": f"gpu-{i}"}
                for i in indices
            ]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}
            ]
        },
    }


def pod(name: str, *entries: dict[str, Any], statuses: list[dict[str, Any]] = ()) -> dict[str, Any]:  # type: ignore[assignment]
    body: dict[str, Any] = {
        "metadata": {"name": name, "namespace": NS, "uid": name},
        "spec": {"resourceClaims": list(entries), "containers": [{"name": "c"}]},
        "status": {"phase": "Pending"},
    }
    if statuses:
        body["status"]["resourceClaimStatuses"] = list(statuses)
    return body


def direct(name: str, entry: str = "gpus") -> dict[str, Any]:
    return {"name": entry, "resourceClaimName": name}


def templated(template: str, entry: str = "gpus") -> dict[str, Any]:
    return {"name": entry, "resourceClaimTemplateName": template}


def manager(*claims: dict[str, Any]) -> DraManager:
    m = DraManager()
    m.on_slice("ADDED", node_slice(), None)
    for c in DEVICE_CLASSES:
        m.on_class("ADDED", c, None)
    for c in claims:
        m.on_claim("ADDED", c, None)
    m._check()
    return m


def uuid(index: int) -> str:
    return inventory().gpus[index].uuid


# -- resolution ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    name: str
    claims: tuple[dict[str, Any], ...]
    pod: dict[str, Any]
    want: str
    """``allocated:N pending:M``, or a fragment of the refusal."""


CASES = [
    Case("no claims", (), pod("p"), "allocated:0 pending:0"),
    Case("direct, pending", (claim("c"),), pod("p", direct("c")), "allocated:0 pending:1"),
    Case(
        "direct, allocated and shared",
        (claim("c", allocated=[0], reserved=["q"]),),
        pod("p", direct("c")),
        "allocated:1 pending:0",
    ),
    Case("direct, missing", (), pod("p", direct("c")), 'resourceclaim "c" not found'),
    Case(
        "direct, being deleted",
        (claim("c", deleting=True),),
        pod("p", direct("c")),
        'resourceclaim "c" is being deleted',
    ),
    Case(
        "template, not created yet",
        (),
        pod("p", templated("t")),
        'pod "default/p": ResourceClaim not created yet',
    ),
    Case(
        "template, created and owned",
        (claim("p-gpus-x", owner="p"),),
        pod("p", templated("t"), statuses=[{"name": "gpus", "resourceClaimName": "p-gpus-x"}]),
        "allocated:0 pending:1",
    ),
    Case(
        "template, claim of another pod",
        (claim("p-gpus-x", owner="other"),),
        pod("p", templated("t"), statuses=[{"name": "gpus", "resourceClaimName": "p-gpus-x"}]),
        "was not created for pod default/p (pod is not owner)",
    ),
    Case(
        "template, no claim needed",
        (),
        pod("p", templated("t"), statuses=[{"name": "gpus"}]),
        "allocated:0 pending:0",
    ),
    Case(
        "neither field",
        (),
        pod("p", {"name": "gpus"}),
        "none of the supported fields are set",
    ),
    Case(
        "reservedFor full",
        (claim("c", allocated=[0], reserved=[f"q{i}" for i in range(RESERVED_FOR_MAX)]),),
        pod("p", direct("c")),
        'resourceclaim "c" in use',
    ),
    Case(
        "reservedFor full, the pod among them",
        (claim("c", allocated=[0], reserved=["p", *(f"q{i}" for i in range(255))]),),
        pod("p", direct("c")),
        "allocated:1 pending:0",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_resolve(case: Case) -> None:
    got = manager(*case.claims).resolve(case.pod)
    if isinstance(got, PodClaims):
        assert f"allocated:{len(got.allocated)} pending:{len(got.pending)}" == case.want
    else:
        assert case.want in got.message


def test_a_cluster_without_the_api_refuses_claim_pods_saying_so() -> None:
    m = manager(claim("c"))
    m.served = False
    got = m.resolve(pod("p", direct("c")))
    assert isinstance(got, Refusal)
    assert "does not serve resource.k8s.io/v1" in got.message


def test_a_pod_waiting_for_its_claim_is_activated_when_it_appears() -> None:
    m = manager()
    assert isinstance(m.resolve(pod("p", direct("c"))), Refusal)
    assert m.on_claim("ADDED", claim("c"), None) == ["p"]
    assert m.on_claim("MODIFIED", claim("c", rv=2), claim("c")) == []


def test_a_claim_being_allocated_for_another_pod_makes_the_pod_wait() -> None:
    m = manager(claim("c"))
    m.reserve(pod("p", direct("c")), NODE, {(NS, "c"): allocation([0])})
    got = m.resolve(pod("q", direct("c")))
    assert isinstance(got, Refusal)
    assert not got.unresolvable
    assert "being allocated for another pod" in got.message
    assert m.unreserve(pod("p", direct("c"))) == ["q"]
    m._check()


# -- the allocated-device index and the ledger's view -------------------------------------


@pytest.mark.parametrize(
    ("claims", "want"),
    [
        ((), {}),
        ((claim("a", allocated=[0, 1]),), {0: "a", 1: "a"}),
        ((claim("a", allocated=[0]), claim("b", allocated=[7])), {0: "a", 7: "b"}),
        ((claim("a"),), {}),
    ],
)
def test_claimed_on_names_each_allocated_gpu_by_uuid(
    claims: tuple[dict[str, Any], ...], want: dict[int, str]
) -> None:
    m = manager(*claims)
    assert m.claimed_on(NODE) == {uuid(i): f"{NS}/{c}" for i, c in want.items()}
    assert m.claimed_on("node-b") == {}


def test_a_claim_deallocated_unmarks_its_node_and_wakes_pods_waiting_for_devices() -> None:
    m = manager(claim("a", allocated=[0, 1], rv=1))
    m.take_dirty_nodes()
    m.no_devices(pod("w"))
    assert m.on_claim("MODIFIED", claim("a", rv=2), claim("a", allocated=[0, 1])) == ["w"]
    assert m.take_dirty_nodes() == {NODE}
    assert m.claimed_on(NODE) == {}
    m._check()


def test_an_older_copy_of_a_claim_is_ignored() -> None:
    m = manager(claim("a", allocated=[0], rv=5))
    m.on_claim("MODIFIED", claim("a", rv=4), None)
    assert m.claimed_on(NODE) == {uuid(0): f"{NS}/a"}


def test_allocate_skips_allocated_in_flight_and_ledger_held_gpus() -> None:
    m = manager(claim("a", allocated=[0, 1]), claim("b", 3))
    m.reserve(pod("p"), NODE, {(NS, "x"): allocation([2, 3])})
    resolved = m.resolve(pod("q", direct("b")))
    assert isinstance(resolved, PodClaims)
    held = {uuid(4)}
    got = m.allocate(resolved.pending, NODE, held_by_pods=held.__contains__, inventory=inventory())
    assert isinstance(got, Allocation)
    devices = {r["device"] for r in got.allocations[0]["devices"]["results"]}
    assert devices == {"gpu-5", "gpu-6", "gpu-7"}


def test_allocate_says_why_when_the_node_is_full() -> None:
    m = manager(claim("a", allocated=list(range(6))), claim("b", 4))
    resolved = m.resolve(pod("q", direct("b")))
    assert isinstance(resolved, PodClaims)
    got = m.allocate(resolved.pending, NODE)
    assert not isinstance(got, Allocation)
    assert "cannot allocate all claims" in got.reason


# -- release marks -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("event", "phase", "marked"),
    [
        ("DELETED", "Running", True),
        ("MODIFIED", "Succeeded", True),
        ("MODIFIED", "Failed", True),
        ("MODIFIED", "Running", False),
    ],
)
def test_a_pod_gone_or_done_is_marked_for_release(event: str, phase: str, marked: bool) -> None:
    m = manager(claim("c", allocated=[0], reserved=["p"]))
    p = pod("p", direct("c"))
    p["spec"]["nodeName"] = NODE
    p["status"]["phase"] = phase
    m.on_pod(event, p, None)
    assert m.changed.is_set() == marked
    assert ((NS, "c") in m._release) == marked


# -- writes against the simulated API server ----------------------------------------------


@pytest.fixture
async def kube() -> AsyncIterator[Kube]:
    async with SimCluster(None, kubelets=False, resource_claims=False) as sim:
        yield sim.kube


async def create_claim(kube: Kube, body: dict[str, Any]) -> dict[str, Any]:
    body = copy.deepcopy(body)
    body["metadata"] = {"name": body["metadata"]["name"]}
    body.pop("status", None)
    created: dict[str, Any] = await kube.create(claims_path(NS), body)
    return created


async def create_pod(kube: Kube, name: str, *entries: dict[str, Any]) -> dict[str, Any]:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "resourceClaims": list(entries),
            "containers": [
                {
                    "name": "c",
                    "image": "pause",
                    "resources": {"claims": [{"name": e["name"]} for e in entries]},
                }
            ],
        },
    }
    created: dict[str, Any] = await kube.create(resource_path("", "v1", "pods", NS), body)
    return created


async def test_bind_writes_the_finalizer_then_allocation_and_reservation(kube: Kube) -> None:
    created = await create_claim(kube, claim("c", 2))
    p = await create_pod(kube, "p", direct("c"))
    m = manager(created)
    chosen = {(NS, "c"): allocation([0, 1])}
    m.reserve(p, NODE, chosen)
    assert await m.bind(kube, p, NODE, chosen) is None
    got = await kube.get(claims_path(NS, "c"))
    assert got["metadata"]["finalizers"] == [FINALIZER]
    assert got["status"]["allocation"] == allocation([0, 1])
    assert got["status"]["reservedFor"] == [
        {"resource": "pods", "name": "p", "uid": p["metadata"]["uid"]}
    ]
    assert m.claimed_on(NODE) == {uuid(0): f"{NS}/c", uuid(1): f"{NS}/c"}
    # A second pod sharing the allocated claim is only added to reservedFor.
    q = await create_pod(kube, "q", direct("c"))
    assert await m.bind(kube, q, NODE, {}) is None
    got = await kube.get(claims_path(NS, "c"))
    assert [r["name"] for r in got["status"]["reservedFor"]] == ["p", "q"]
    m._check()


async def test_two_replicas_allocating_one_claim_one_wins(kube: Kube) -> None:
    created = await create_claim(kube, claim("c", 1))
    p = await create_pod(kube, "p", direct("c"))
    q = await create_pod(kube, "q", direct("c"))
    a, b = manager(created), manager(created)
    for m, pod_, gpu in ((a, p, 0), (b, q, 5)):
        m.reserve(pod_, NODE, {(NS, "c"): allocation([gpu])})
    outcomes = await asyncio.gather(
        a.bind(kube, p, NODE, {(NS, "c"): allocation([0])}),
        b.bind(kube, q, NODE, {(NS, "c"): allocation([5])}),
    )
    assert sorted(o is None for o in outcomes) == [False, True]
    loser = next(o for o in outcomes if o is not None)
    assert "allocated elsewhere" in loser
    got = await kube.get(claims_path(NS, "c"))
    assert len(got["status"]["reservedFor"]) == 1


async def test_release_removes_the_pod_deallocates_and_drops_the_finalizer(kube: Kube) -> None:
    created = await create_claim(kube, claim("c", 1))
    p = await create_pod(kube, "p", direct("c"))
    m = manager(created)
    chosen = {(NS, "c"): allocation([0])}
    m.reserve(p, NODE, chosen)
    assert await m.bind(kube, p, NODE, chosen) is None
    m.on_pod("DELETED", p, None)
    assert await m.flush(kube) == 2  # the status (reservedFor, allocation), the finalizer
    got = await kube.get(claims_path(NS, "c"))
    assert "allocation" not in got["status"]
    assert "reservedFor" not in got["status"]
    assert not got["metadata"].get("finalizers")
    assert m.claimed_on(NODE) == {}
    assert await m.flush(kube) == 0  # idempotent
    m._check()


async def test_unreserve_after_prebind_takes_the_pod_out_again(kube: Kube) -> None:
    created = await create_claim(kube, claim("c", 1))
    p = await create_pod(kube, "p", direct("c"))
    m = manager(created)
    chosen = {(NS, "c"): allocation([0])}
    m.reserve(p, NODE, chosen)
    assert await m.bind(kube, p, NODE, chosen) is None
    m.unreserve(p)
    await m.flush(kube)
    got = await kube.get(claims_path(NS, "c"))
    assert not got["status"].get("reservedFor")
    assert not got["status"].get("allocation")


async def test_a_retry_bound_before_the_release_was_written_keeps_its_claim(kube: Kube) -> None:
    """Unreserve queues the pod's removal; when the pod's retry reaches PreBind first (the
    claim still reserved for it), the queued release is dropped: its claim stays allocated."""
    created = await create_claim(kube, claim("c", 1))
    p = await create_pod(kube, "p", direct("c"))
    m = manager(created)
    chosen = {(NS, "c"): allocation([0])}
    m.reserve(p, NODE, chosen)
    assert await m.bind(kube, p, NODE, chosen) is None
    m.unreserve(p)  # Permit rejected it after PreBind, say; the release is not written yet
    assert await m.bind(kube, p, NODE, {}) is None  # the retry, on the same node
    await m.flush(kube)
    got = await kube.get(claims_path(NS, "c"))
    assert got["status"]["allocation"] == allocation([0])
    assert [r["name"] for r in got["status"]["reservedFor"]] == ["p"]
    assert got["metadata"]["finalizers"] == [FINALIZER]


async def test_a_claim_allocated_elsewhere_after_reserve_fails_prebind(kube: Kube) -> None:
    """Another scheduler allocates the claim (for another pod, on the same node) between this
    pod's Reserve and PreBind: the pod is not bound to devices it was not given."""
    created = await create_claim(kube, claim("c", 1))
    p = await create_pod(kube, "p", direct("c"))
    q = await create_pod(kube, "q", direct("c"))
    m = manager(created)
    chosen = {(NS, "c"): allocation([0])}
    m.reserve(p, NODE, chosen)
    other = manager(created)  # kube-scheduler, or a second replica
    other.reserve(q, NODE, {(NS, "c"): allocation([5])})
    assert await other.bind(kube, q, NODE, {(NS, "c"): allocation([5])}) is None
    m.on_claim("MODIFIED", await kube.get(claims_path(NS, "c")), created)
    why = await m.bind(kube, p, NODE, chosen)
    assert why is not None
    assert "allocated elsewhere in the meantime" in why
    got = await kube.get(claims_path(NS, "c"))
    assert [r["name"] for r in got["status"]["reservedFor"]] == ["q"]
    assert got["status"]["allocation"] == allocation([5])


async def test_create_claims_makes_the_claim_of_a_template_entry(kube: Kube) -> None:
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "two"},
        "spec": {"spec": claim("x", 2)["spec"]},
    }
    created_template = await kube.create(
        resource_path("resource.k8s.io", "v1", "resourceclaimtemplates", NS), template
    )
    p = await create_pod(kube, "p", templated("two"))
    m = DraManager(create_claims=True)
    m.on_template("ADDED", created_template, None)
    assert isinstance(m.resolve(p), Refusal)
    assert await m.flush(kube) == 2  # the claim, the pod's status
    listed = (await kube.get(claims_path(NS)))["items"]
    assert len(listed) == 1
    made = listed[0]
    assert made["metadata"]["annotations"][POD_CLAIM_NAME_ANNOTATION] == "gpus"
    assert made["metadata"]["ownerReferences"][0]["uid"] == p["metadata"]["uid"]
    fresh = await kube.get(resource_path("", "v1", "pods", NS, "p"))
    assert fresh["status"]["resourceClaimStatuses"] == [
        {"name": "gpus", "resourceClaimName": made["metadata"]["name"]}
    ]
    assert isinstance(m.resolve(fresh), PodClaims)


@pytest.mark.parametrize(
    ("change", "node_moves", "all_move"),
    [
        ("allocate a claim here", True, False),
        ("reserve in flight here", True, False),
        ("publish a slice here", True, False),
        ("add a class", False, True),
        ("reserve a claim with unknown devices", False, True),
    ],
)
def test_version_of_moves_with_what_may_change_an_allocation(
    change: str, node_moves: bool, all_move: bool
) -> None:
    m = manager(claim("a"))
    before = m.version_of(NODE)
    if change == "allocate a claim here":
        m.on_claim("MODIFIED", claim("a", allocated=[3], rv=2), claim("a"))
    elif change == "reserve in flight here":
        m.reserve(pod("p"), NODE, {(NS, "x"): allocation([2])})
    elif change == "publish a slice here":
        m.on_slice("MODIFIED", node_slice(), node_slice())
    elif change == "add a class":
        m.on_class("ADDED", {"metadata": {"name": "other"}, "spec": {}}, None)
    else:
        m.reserve(
            pod("p"),
            NODE,
            {
                (NS, "x"): {
                    "devices": {
                        "results": [
                            {"request": "r", "driver": "d", "pool": "elsewhere", "device": "x"}
                        ]
                    }
                }
            },
        )
    after = m.version_of(NODE)
    assert (after[1] != before[1]) == node_moves
    assert (after[0] != before[0]) == all_move
    assert m.version_of("node-b")[1] == 0


def test_a_device_allocated_with_admin_access_is_not_taken() -> None:
    admin = claim("a", allocated=[0, 1])
    admin["status"]["allocation"]["devices"]["results"][0]["adminAccess"] = True
    m = manager(admin)
    assert m.claimed_on(NODE) == {uuid(1): f"{NS}/a"}
    m._check()
