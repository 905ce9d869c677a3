"""Random operations against the cache, checking every invariant after every step.

Each seed runs a few hundred steps drawn from everything the informers and the scheduler do:
nodes and inventories come and go (anonymous GPUs, NVLinked GPUs, MIG), pods are bound by
others (with or without annotations, clashing or not, finishing), assumed from a possibly
stale snapshot, forgotten, confirmed, expired. After each step ``SchedulerCache._check()``
asserts the invariants and a small model of the state machine says where every pod must be;
after each snapshot update the snapshot must equal a fresh full copy, and the previous one
must not have changed under the cycle that read it.
"""

from __future__ import annotations

import inspect
import random
from dataclasses import dataclass, field
from typing import Any

import pytest
from cache_builders import make_inventory, make_node, make_pod

from gpusched.annotations import Assignment
from gpusched.cache import CacheError, LedgerError, SchedulerCache, Snapshot
from gpusched.clock import FakeClock
from gpusched.inventory import GPUNodeInventory

TTL = 30.0
NODES = [f"n{i}" for i in range(5)]
PODS = [f"p{i:02d}" for i in range(30)]
MIG_1G = "nvidia.com/mig-1g.10gb"


@dataclass
class Model:
    """Where each pod must be, by the state machine alone."""

    where: dict[str, tuple[str, bool]] = field(default_factory=dict)  # uid -> (node, assumed)
    deadline: dict[str, float] = field(default_factory=dict)
    assumed_with: dict[str, Assignment | None] = field(default_factory=dict)
    nominated: dict[str, str] = field(default_factory=dict)  # uid -> node

    def drop(self, uid: str) -> None:
        self.where.pop(uid, None)
        self.deadline.pop(uid, None)

    def added(self, uid: str, node: str) -> None:
        self.where[uid] = (node, False)
        self.deadline.pop(uid, None)


class Run:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.clock = FakeClock()
        self.cache = SchedulerCache(self.clock, assumed_ttl=TTL)
        self.model = Model()
        self.snapshot = Snapshot()
        self.seen: list[dict[str, Any]] = []
        self.inventories: dict[str, GPUNodeInventory] = {}
        self.nodes: set[str] = set()

    # --- generators ---------------------------------------------------------------------

    def inventory(self, name: str) -> GPUNodeInventory | None:
        kind = self.rng.choice(["none", "2", "4", "mig"])
        if kind == "none":
            return None
        if kind == "mig":
            return make_inventory(
                name, 2, mig={1: [("2g.20gb", 19968), ("1g.10gb", 9984), ("1g.10gb", 9984)]}
            )
        return make_inventory(name, int(kind))

    def node(self, name: str) -> dict[str, Any]:
        labels = {"kubernetes.io/hostname": name, "rev": str(self.rng.randrange(3))}
        inventory = self.inventories.get(name)
        if inventory is not None and self.rng.random() < 0.9:
            return make_node(name, inventory=inventory, labels=labels)
        return make_node(name, gpus=self.rng.randrange(5), labels=labels)

    def bound_pod(self, uid: str) -> dict[str, Any]:
        rng = self.rng
        state = self.model.where.get(uid)
        node = state[0] if state and rng.random() < 0.9 else rng.choice(NODES)
        pod = make_pod(uid, uid=uid).cpu(rng.choice(["100m", "1", "2"])).on(node)
        kind = rng.random()
        if kind < 0.15:
            pod.mig("1g.10gb")
            inventory = self.inventories.get(node)
            devices = (
                [(g.index, m.uuid) for g in inventory.gpus for m in g.mig_devices]
                if inventory
                else []
            )
            if devices and rng.random() < 0.5:  # declared MIG device, possibly taken
                index, mig_uuid = rng.choice(devices)
                pod.assigned(Assignment((index,), (mig_uuid,), (), f"lease-{uid}"))
        else:
            gpus = rng.choice([0, 0, 1, 1, 2, 3])
            if gpus:
                pod.gpus(gpus)
            assumed = self.model.assumed_with.get(uid)
            if state and state[1] and assumed is not None and rng.random() < 0.7:
                pod.assigned(assumed)  # the Add that confirms the scheduler's bind
            elif rng.random() < 0.35:
                count = gpus or 1
                ids = tuple(sorted(rng.sample(range(5), count)))
                pod.assigned(Assignment(ids, (), (), f"lease-{uid}"))
        pod.phase(rng.choice(["Pending", "Running", "Running", "Running", "Succeeded"]))
        return pod.obj()

    # --- steps --------------------------------------------------------------------------

    async def step(self) -> None:
        rng = self.rng
        op = rng.choices(
            [
                self.op_node,
                self.op_remove_node,
                self.op_inventory,
                self.op_bind_by_informer,
                self.op_remove_pod,
                self.op_assume,
                self.op_finish,
                self.op_forget,
                self.op_expire,
                self.op_snapshot,
                self.op_nominate,
                self.op_clear_nomination,
            ],
            weights=[6, 2, 3, 20, 6, 20, 8, 4, 4, 12, 6, 3],
        )[0]
        done = op()
        if inspect.isawaitable(done):
            await done

    def op_node(self) -> None:
        name = self.rng.choice(NODES)
        self.cache.update_node(self.node(name))
        self.nodes.add(name)

    def op_remove_node(self) -> None:
        name = self.rng.choice(NODES)
        removed = self.cache.remove_node(name)
        assert removed == (name in self.nodes)
        self.nodes.discard(name)
        for uid in [u for u, n in self.model.nominated.items() if n == name]:
            del self.model.nominated[uid]

    def op_inventory(self) -> None:
        name = self.rng.choice(NODES)
        inventory = self.inventory(name)
        if inventory is None:
            self.inventories.pop(name, None)
        else:
            self.inventories[name] = inventory
        self.cache.set_inventory(name, inventory)

    def op_bind_by_informer(self) -> None:
        uid = self.rng.choice(PODS)
        pod = self.bound_pod(uid)
        if self.rng.random() < 0.5:
            self.cache.add_pod(pod)
        else:
            self.cache.update_pod(pod)
        self.model.nominated.pop(uid, None)  # bound: placed
        if pod["status"]["phase"] == "Succeeded":
            self.model.drop(uid)
        else:
            self.model.added(uid, pod["spec"]["nodeName"])

    def op_remove_pod(self) -> None:
        uid = self.rng.choice(PODS)
        assert self.cache.remove_pod(uid) == (uid in self.model.where)
        self.model.drop(uid)

    def op_assume(self) -> None:
        rng = self.rng
        free = [uid for uid in PODS if uid not in self.model.where]
        infos = self.snapshot.node_infos()
        if not free or not infos:
            return
        uid = rng.choice(free)
        info = rng.choice(infos)  # from the last snapshot: possibly stale, as in a real cycle
        ledger = info.ledger
        pod = make_pod(uid, uid=uid).cpu("1")
        assignment: Assignment | None = None
        mig = ledger.free_mig(MIG_1G)
        if mig and rng.random() < 0.3:
            index, mig_uuid = rng.choice(mig)
            pod.mig("1g.10gb")
            assignment = Assignment((index,), (mig_uuid,), (), f"lease-{uid}")
        else:
            count = rng.randrange(min(len(ledger.free_gpus()), 3) + 1)
            if count:
                ids = tuple(sorted(rng.sample(ledger.free_gpus(), count)))
                uuids = tuple(ledger.devices[i].uuid or "" for i in ids)
                pod.gpus(count)
                assignment = Assignment(ids, uuids if all(uuids) else (), (), f"lease-{uid}")
        before = self.cache.dump()
        try:
            self.cache.assume_pod(pod.obj(), info.name, assignment)
        except (CacheError, LedgerError):
            assert self.cache.dump() == before, "a refused assume changed the cache"
            return
        self.model.where[uid] = (info.name, True)
        self.model.assumed_with[uid] = assignment
        self.model.nominated.pop(uid, None)

    def op_nominate(self) -> None:
        uid = self.rng.choice(PODS)
        node = self.rng.choice(NODES)
        pod = make_pod(uid, uid=uid).gpus(self.rng.choice([0, 1, 2])).obj()
        expected = node in self.nodes and uid not in self.model.where
        assert self.cache.nominate(pod, node) == expected
        if expected:
            self.model.nominated[uid] = node

    def op_clear_nomination(self) -> None:
        uid = self.rng.choice(PODS)
        assert self.cache.clear_nomination(uid) == (uid in self.model.nominated)
        self.model.nominated.pop(uid, None)

    def op_finish(self) -> None:
        uid = self.rng.choice(PODS)
        self.cache.finish_binding(uid)
        state = self.model.where.get(uid)
        if state and state[1]:
            self.model.deadline[uid] = self.clock.monotonic() + TTL

    def op_forget(self) -> None:
        uid = self.rng.choice(PODS)
        state = self.model.where.get(uid)
        forgotten = self.cache.forget_pod(uid)
        assert forgotten == bool(state and state[1])
        if forgotten:
            self.model.drop(uid)

    async def op_expire(self) -> None:
        await self.clock.advance(self.rng.choice([0.0, 1.0, 10.0, TTL]))
        now = self.clock.monotonic()
        expired = self.cache.cleanup_expired_assumed_pods()
        expected = sorted(
            uid
            for uid, (_, assumed) in self.model.where.items()
            if assumed and uid in self.model.deadline and now > self.model.deadline[uid]
        )
        assert sorted(expired) == expected
        for uid in expired:
            self.model.drop(uid)

    def op_snapshot(self) -> None:
        # What the last cycle read has not changed under it.
        assert [info.describe() for info in self.snapshot.node_infos()] == self.seen
        self.cache.update_snapshot(self.snapshot)
        self.cache._check(self.snapshot)
        full = Snapshot()
        self.cache.update_snapshot(full)
        self.seen = [info.describe() for info in self.snapshot.node_infos()]
        assert self.seen == [info.describe() for info in full.node_infos()]
        assert self.snapshot.generation >= full.generation  # equal unless the cache emptied

    # --- checks -------------------------------------------------------------------------

    def check(self) -> None:
        self.cache._check()
        cache = self.cache
        for uid in PODS:
            state = self.model.where.get(uid)
            assert cache.pod_node(uid) == (state[0] if state else None), uid
            assert cache.is_assumed(uid) == bool(state and state[1]), uid
        nominated = {uid: n for uid in PODS if (n := cache.nominated_node(uid)) is not None}
        assert nominated == self.model.nominated
        assert cache.node_count == len(self.nodes)
        assert cache.pod_count == len(self.model.where)


@pytest.mark.parametrize("seed", range(12))
async def test_random_operations_keep_every_invariant(seed: int) -> None:
    run = Run(seed)
    for _ in range(400):
        await run.step()
        run.check()
    run.op_snapshot()
