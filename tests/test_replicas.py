"""Replica membership and shares (gpusched.replicas): rendezvous hashing, liveness from the
membership Leases on a fake clock, and the Lease kept on the simulated cluster."""

from __future__ import annotations

import asyncio
import copy
import random
from collections import Counter
from typing import Any

import pytest

from gpusched.clock import FakeClock
from gpusched.kube.client import Kube, resource_path
from gpusched.replicas import (
    MEMBER_LABEL,
    MEMBER_PREFIX,
    SYNCING_ANNOTATION,
    Member,
    Membership,
    Share,
    member_lease_name,
    owner,
)
from gpusched.sim import SimCluster

NODES = [f"node-{i:04d}" for i in range(600)]


def membership(clock: FakeClock, identity: str = "a", **kw: Any) -> Membership:
    m = Membership(identity, ["gpusched"], clock, namespace="gpusched-system", **kw)
    m.active = True
    return m


def members(m: Membership, name: str = "gpusched") -> tuple[str, ...]:
    """The live replicas serving ``name`` as ``m`` sees them (``()``: alone)."""
    share = m.share(name)
    return share.members if share is not None else ()


def lease_of(
    clock: FakeClock,
    identity: str,
    names: tuple[str, ...] = ("gpusched",),
    duration: int = 15,
    syncing: bool = False,
) -> dict[str, Any]:
    """The membership Lease ``identity`` would write now on ``clock`` (started now)."""
    other = Membership(identity, names, clock, namespace="gpusched-system", lease_duration=duration)
    other.syncing = syncing
    return other.lease_body()


# ------------------------------------------------------------------ shares


def test_owner_is_stable_and_independent_of_order() -> None:
    members = ["a", "b", "c"]
    for node in NODES[:50]:
        assert owner(node, members) == owner(node, reversed(members)) == owner(node, list(members))


@pytest.mark.parametrize("count", [2, 3, 5])
def test_shares_are_balanced(count: int) -> None:
    members = [f"gpusched-{i}" for i in range(count)]
    sizes = Counter(owner(node, members) for node in NODES)
    assert set(sizes) == set(members)
    expected = len(NODES) / count
    for size in sizes.values():
        assert abs(size - expected) < 0.25 * expected, sizes


def test_a_replica_joining_or_leaving_moves_only_its_share() -> None:
    before = {node: owner(node, ["a", "b"]) for node in NODES}
    joined = {node: owner(node, ["a", "b", "c"]) for node in NODES}
    moved = [node for node in NODES if before[node] != joined[node]]
    assert moved
    assert all(joined[node] == "c" for node in moved)  # only to the newcomer
    left = {node: owner(node, ["a", "c"]) for node in NODES}  # then b leaves
    for node in NODES:
        if joined[node] != "b":
            assert left[node] == joined[node]  # a and c keep all they had


def test_share_views_partition_the_nodes_and_pods() -> None:
    views = [Share(me, ["a", "b", "c"]) for me in ("a", "b", "c")]
    for node in NODES:
        assert sum(v.mine(node) for v in views) == 1
    rng = random.Random(7)
    for _ in range(300):
        uid = f"{rng.getrandbits(128):032x}"
        assert sum(v.takes(uid) for v in views) == 1


def test_member_lease_names_are_dns_and_distinct() -> None:
    names = {member_lease_name(i) for i in ("Host_A", "host-a", "host.a", "x" * 90, "___")}
    assert len(names) == 5
    for name in names:
        assert name.startswith(MEMBER_PREFIX)
        assert len(name) <= 63
        assert all(c in "abcdefghijklmnopqrstuvwxyz0123456789-" for c in name)


# ------------------------------------------------------------------ liveness (fake clock)


async def test_alone_means_no_share() -> None:
    clock = FakeClock()
    m = membership(clock)
    assert m.share("gpusched") is None
    assert m.takes("any-uid", "gpusched")
    m.active = False
    m.on_lease("ADDED", lease_of(clock, "b"), None)
    assert m.share("gpusched") is None  # not active: not counted in, so alone
    m._check()


async def test_replicas_joining_leaving_and_expiring() -> None:
    clock = FakeClock()
    changes: list[tuple[str, ...]] = []
    m = membership(clock, skew=2.0)
    m.on_change = lambda: changes.append(tuple(x.identity for x in m.live()))
    b = lease_of(clock, "b", duration=15)
    m.on_lease("ADDED", b, None)
    assert members(m) == ("a", "b")
    assert m.share("gpusched") is m.share("gpusched")  # the same object while nothing changes
    m.on_lease("ADDED", lease_of(clock, "c"), None)
    assert members(m) == ("a", "b", "c")
    m._check()

    # c leaves cleanly (deletes its Lease).
    c_lease = lease_of(clock, "c")
    m.on_lease("DELETED", c_lease, None)
    assert members(m) == ("a", "b")

    # b stops renewing: live until renewTime + 15 s + 2 s skew.
    await clock.advance(16.9)
    assert members(m) == ("a", "b")
    await clock.advance(0.2)
    assert m.share("gpusched") is None
    assert m.takes("pod-uid", "gpusched")
    # b renews again (it was only slow): back in.
    m.on_lease("MODIFIED", lease_of(clock, "b"), b)
    assert members(m) == ("a", "b")
    assert changes == [("b",), ("b", "c"), ("b",), (), ("b",)]
    m._check()


async def test_own_lease_and_other_profiles_do_not_count() -> None:
    clock = FakeClock()
    m = membership(clock)
    m.on_lease("ADDED", lease_of(clock, "a"), None)  # our own, as the informer shows it
    m.on_lease("ADDED", lease_of(clock, "b", names=("other-scheduler",)), None)
    assert m.share("gpusched") is None
    assert m.share("other-scheduler") is None  # b alone serves it
    m.on_lease("ADDED", lease_of(clock, "c", names=("gpusched", "other-scheduler")), None)
    assert members(m) == ("a", "c")


async def test_a_replica_that_changes_the_profiles_it_serves_changes_the_shares() -> None:
    """A replica restarted under the same identity (so the same Lease) with a new
    configuration: the others must stop leaving it the pods of a profile it no longer serves
    (they would wait for it forever: it renews its Lease), and queue them (``on_change``)."""
    clock = FakeClock()
    changes: list[tuple[str, ...]] = []
    m = membership(clock)
    m.on_change = lambda: changes.append(tuple(x.identity for x in m.live()))
    b = lease_of(clock, "b", names=("gpusched",))
    m.on_lease("ADDED", b, None)
    assert members(m) == ("a", "b")
    m.on_lease("MODIFIED", lease_of(clock, "b", names=("other-scheduler",)), b)
    assert m.share("gpusched") is None  # a alone serves it now
    assert members(m, "other-scheduler") == ()  # a does not serve it
    assert changes == [("b",), ("b",)]
    m._check()


def test_invalid_membership_lease_is_ignored() -> None:
    clock = FakeClock()
    m = membership(clock)
    bad = lease_of(clock, "b")
    bad["spec"]["renewTime"] = "yesterday"
    assert Member.from_lease(bad) is None
    m.on_lease("ADDED", bad, None)
    assert m.share("gpusched") is None


async def test_a_syncing_replica_counts_for_the_sync_grace_from_its_start() -> None:
    """A replica announces itself before its informers sync: the others leave its share to it
    from then on, for at most ``sync_grace`` (plus skew) from its start; one still syncing
    after that is left out until its Lease says it is ready."""
    clock = FakeClock()
    m = membership(clock, skew=1.0, sync_grace=30.0)
    b = lease_of(clock, "b", syncing=True)
    assert b["metadata"]["annotations"][SYNCING_ANNOTATION] == "true"
    assert b["spec"]["acquireTime"] == b["spec"]["renewTime"]
    m.on_lease("ADDED", b, None)
    assert members(m) == ("a", "b")
    renewed = b
    for _ in range(3):  # b renews while it still syncs: its start is what counts
        await clock.advance(10.0)
        old, renewed = renewed, copy.deepcopy(renewed)
        renewed["spec"]["renewTime"] = lease_of(clock, "b")["spec"]["renewTime"]
        m.on_lease("MODIFIED", renewed, old)
    await clock.advance(0.9)
    assert members(m) == ("a", "b")
    await clock.advance(0.2)  # 31.1 s after its start: no longer waited for
    assert members(m) == ()
    m._check()
    ready = lease_of(clock, "b")  # it has synced
    assert SYNCING_ANNOTATION not in ready["metadata"]["annotations"]
    m.on_lease("MODIFIED", ready, renewed)
    assert members(m) == ("a", "b")
    m._check()


def test_a_syncing_lease_without_a_start_counts_from_its_renewal() -> None:
    clock = FakeClock()
    b = lease_of(clock, "b", syncing=True)
    del b["spec"]["acquireTime"]
    member = Member.from_lease(b, sync_grace=5.0)
    assert member is not None
    assert member.syncing_until == clock.now().timestamp() + 5.0
    assert member.live_until(skew=1.0) == clock.now().timestamp() + 6.0


# ------------------------------------------------------------------ the Lease, on the simulation


async def test_keep_writes_renews_and_deletes_the_lease() -> None:
    clock = FakeClock()
    async with SimCluster() as sim:
        kube: Kube = sim.kube
        await kube.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpusched-system"}},
        )
        writes: list[tuple[str, str]] = []
        m = Membership(
            "replica-a",
            ["gpusched"],
            clock,
            namespace="gpusched-system",
            lease_duration=15,
            renew_period=5.0,
            on_write=lambda resource, verb: writes.append((resource, verb)),
        )
        path = resource_path("coordination.k8s.io", "v1", "leases", "gpusched-system")
        task = asyncio.create_task(m.keep(kube))
        await clock.wait_for_sleepers()
        listed = await kube.get(path, {"labelSelector": MEMBER_LABEL})
        assert [i["spec"]["holderIdentity"] for i in listed["items"]] == ["replica-a"]
        first = listed["items"][0]["spec"]["renewTime"]
        await clock.advance(5.0)
        await clock.wait_for_sleepers()
        renewed = await kube.get(f"{path}/{m.lease_name}")
        assert renewed["spec"]["renewTime"] > first
        assert writes == [("leases", "create"), ("leases", "update")]

        # Another replica reading it counts it live.
        other = Membership("replica-b", ["gpusched"], clock, namespace="gpusched-system")
        other.active = True
        other.on_lease("ADDED", renewed, None)
        assert members(other) == ("replica-a", "replica-b")

        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not (await kube.get(path, {"labelSelector": MEMBER_LABEL}))["items"]
        assert writes[-1] == ("leases", "delete")

        # A restart under the same identity takes over the Lease left behind by a crash.
        await kube.create(path, m.lease_body())
        task = asyncio.create_task(m.keep(kube))
        await clock.wait_for_sleepers()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert writes[-2:] == [("leases", "update"), ("leases", "delete")]
