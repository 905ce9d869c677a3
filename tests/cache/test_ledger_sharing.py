"""Shared GPUs in the ledger: the fit rules with their exact messages, the plugin's queries,
bound pods beyond the limits, NodeInfo's shared claims, and random operations checked against
a recount after every step."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from cache_builders import make_inventory, make_node, make_pod

from gpusched.annotations import Assignment
from gpusched.cache import (
    DEFAULT_POLICY,
    EXCLUSIVE_ONLY,
    LedgerError,
    NodeInfo,
    NodeLedger,
    SchedulerCache,
    SharingPolicy,
    mib_text,
)
from gpusched.clock import FakeClock

GI = 1024
MEM = 80 * GI
MIG_LAYOUT = {2: [("3g.40gb", 40192), ("1g.10gb", 9984)]}


def led(policy: SharingPolicy = DEFAULT_POLICY, count: int = 2) -> NodeLedger:
    return NodeLedger.from_inventory(make_inventory("n1", count, memory_mib=MEM), policy)


# --- Fit rules, one row each: (policy, holders booked first, the share asked, message) ----


@dataclass(frozen=True)
class Share:
    mib: int
    swap: bool = False
    cores: int = 0


@dataclass(frozen=True)
class Case:
    policy: SharingPolicy
    before: list[tuple[str, int, Share | None]]  # (pod, GPU, share or None for a whole GPU)
    ask: Share
    message: str | None  # None: it fits
    gpu: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


CASES = {
    "fits": Case(DEFAULT_POLICY, [("a", 0, Share(60 * GI))], Share(20 * GI), None),
    "capacity": Case(
        DEFAULT_POLICY,
        [("a", 0, Share(68 * GI))],
        Share(20 * GI),
        "GPU 0 has 12Gi free of 80Gi (100% of its memory may be reserved), the pod asks 20Gi",
    ),
    "overcommit-capacity": Case(
        SharingPolicy(vram_percent=120),
        [("a", 0, Share(60 * GI, swap=True))],
        Share(40 * GI, swap=True),
        "GPU 0 has 36Gi free of 96Gi (120% of its 80Gi of memory may be reserved), "
        "the pod asks 40Gi",
    ),
    "swap-pod-uses-overcommit": Case(
        SharingPolicy(vram_percent=120), [("a", 0, Share(60 * GI))], Share(30 * GI, True), None
    ),
    "non-swap-beside-swap-fits-physical": Case(
        SharingPolicy(vram_percent=120),
        [("a", 0, Share(60 * GI, swap=True))],
        Share(30 * GI),
        None,
    ),
    "non-swap-pods-exceed-physical": Case(
        SharingPolicy(vram_percent=120),
        [("a", 0, Share(60 * GI))],
        Share(30 * GI),
        "GPU 0 has 20Gi of its 80Gi not promised to pods that cannot swap, the pod asks 30Gi "
        'and cannot swap to host memory (set gpusched.io/swap-from-vram: "true" to let it use '
        "overcommitted VRAM)",
    ),
    "clients-per-gpu": Case(
        SharingPolicy(max_clients_per_gpu=2),
        [("a", 0, Share(GI)), ("b", 0, Share(GI))],
        Share(GI),
        "GPU 0 already has 2 clients, the most its node's policy allows (maxClientsPerGPU: 2)",
    ),
    "clients-per-node": Case(
        SharingPolicy(max_clients_per_node=1),
        [("a", 1, Share(GI))],
        Share(GI),
        "the node already has 1 pod sharing its GPUs, the most its policy allows "
        "(maxClientsPerNode: 1)",
    ),
    "shared-never-joins-exclusive": Case(
        DEFAULT_POLICY, [("a", 0, None)], Share(GI), "GPU 0 is held exclusively by pod a"
    ),
    "exclusive-only-policy": Case(
        EXCLUSIVE_ONLY,
        [],
        Share(GI),
        "GPU 0 cannot be shared: its node's policy allows whole GPUs only",
    ),
    "mig-never-shared": Case(
        DEFAULT_POLICY,
        [],
        Share(GI),
        "GPU 2 is in MIG mode and MIG devices are never shared: ask for a MIG profile "
        "(nvidia.com/mig-<profile>) instead",
        gpu=2,
    ),
    "cores-budget": Case(
        DEFAULT_POLICY,
        [("a", 0, Share(GI, cores=60))],
        Share(GI, cores=50),
        "GPU 0 has 40% of its compute free, the pod asks 50%",
    ),
    "cores-all-of-a-used-gpu": Case(
        DEFAULT_POLICY,
        [("a", 0, Share(GI))],
        Share(GI, cores=100),
        "GPU 0 has clients that ask for no compute share, and the pod's 100% would leave them none",
    ),
    "cores-none-of-a-full-gpu": Case(
        DEFAULT_POLICY,
        [("a", 0, Share(GI, cores=100))],
        Share(GI),
        "GPU 0 has all its compute given to its clients; a pod asking for none of it would get "
        "no time on it",
    ),
    "cores-fit": Case(DEFAULT_POLICY, [("a", 0, Share(GI, cores=40))], Share(GI, cores=60), None),
}


def _book(ledger: NodeLedger, uid: str, gpu: int, share: Share | None) -> None:
    if share is None:
        ledger.allocate(uid, [gpu])
    else:
        ledger.allocate(uid, [gpu], share.mib, exclusive=False, swap=share.swap, cores=share.cores)


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_fit_rules(case: Case) -> None:
    inventory = make_inventory("n1", 3, memory_mib=MEM, mig=MIG_LAYOUT)
    ledger = NodeLedger.from_inventory(inventory, case.policy)
    for uid, gpu, share in case.before:
        _book(ledger, uid, gpu, share)
    ledger._check()
    ask = case.ask
    query = (ask.mib, None, ask.swap, ask.cores)
    listed = case.gpu in ledger.shareable_devices(*query)
    reason = ledger.refusals(*query).get(case.gpu)
    if ledger.node_refusal() is not None:
        reason = ledger.node_refusal()
    assert reason == case.message
    assert listed == (case.message is None)
    before = ledger.describe()
    if case.message is None:
        _book(ledger, "p", case.gpu, ask)
        ledger._check()
        assert ledger.holds("p")
        return
    with pytest.raises(LedgerError) as raised:
        _book(ledger, "p", case.gpu, ask)
    if case.gpu != 2:  # allocate names the MIG mode its own way
        assert str(raised.value) == case.message
    assert ledger.describe() == before


def test_exclusive_claims_need_an_idle_device() -> None:
    ledger = led()
    ledger.allocate("s", [0], GI, exclusive=False)
    with pytest.raises(LedgerError, match="GPU 0 is held by pod s"):
        ledger.allocate("x", [0])  # a dedicated share is booked like a whole GPU
    assert ledger.shareable_devices(exclusive=True) == [1]
    assert ledger.shareable_devices(70 * GI, exclusive=True) == [1]
    assert ledger.shareable_devices(90 * GI, exclusive=True) == []
    ledger.allocate("x", [1], 20 * GI, True)
    assert ledger.device_load(1) == (MEM, 1)
    assert ledger.shareable_devices(GI) == [0]
    ledger._check()


def test_queries_percent_load_and_can_fit() -> None:
    ledger = led(SharingPolicy(vram_percent=150), count=3)
    assert ledger.share_mib(0, vram_percent=25) == 20 * GI
    assert ledger.share_mib(0, 7, 25) == 7  # MiB win over a percentage
    ledger.allocate("a", [0, 1], [40 * GI, 10 * GI], exclusive=False, swap=True)
    assert ledger.device_load(0) == (40 * GI, 1)
    assert ledger.device_load(2) == (0, 0)
    assert ledger.shared_clients == 1
    # 50% of 80Gi = 40Gi: GPU 0 has 40Gi pinned by nobody, 80Gi left of 120Gi
    assert ledger.shareable_devices(vram_percent=50) == [0, 1, 2]
    assert ledger.shareable_devices(vram_percent=100) == [0, 1, 2]
    assert ledger.shareable_devices(vram_percent=100, swap=True) == [0, 1, 2]
    assert ledger.shareable_devices(81 * GI, swap=True) == [1, 2]
    assert ledger.can_fit(2, 81 * GI, exclusive=False, swap=True)
    assert not ledger.can_fit(3, 81 * GI, exclusive=False, swap=True)
    assert ledger.can_fit(3, exclusive=False, vram_percent=10)
    assert ledger.can_fit(1)  # whole GPUs unchanged: GPU 2 is idle
    assert not ledger.can_fit(2)
    with pytest.raises(ValueError, match="vram_mib > 0 or vram_percent"):
        ledger.shareable_devices()
    with pytest.raises(ValueError, match=r"cores must be 0\.\.100"):
        ledger.shareable_devices(GI, cores=101)
    with pytest.raises(LedgerError, match=r"0\.\.100 percent"):
        ledger.allocate("b", [2], GI, exclusive=False, cores=-1)
    ledger.release("a")
    assert ledger.shared_clients == 0
    assert ledger.device_load(0) == (0, 0)
    ledger._check()


def test_mig_devices_are_never_shared() -> None:
    inventory = make_inventory("n1", 3, memory_mib=MEM, mig=MIG_LAYOUT)
    ledger = NodeLedger.from_inventory(inventory)
    uuid = ledger.devices[2].mig[1].uuid
    with pytest.raises(LedgerError, match="cannot be shared: MIG devices never are"):
        ledger.allocate("a", [2], GI, exclusive=False, uuids=[uuid])
    with pytest.raises(LedgerError, match="in MIG mode"):
        ledger.allocate("a", [2], GI, exclusive=False)
    assert 2 not in ledger.shareable_devices(GI)


def test_anonymous_gpus_cannot_be_shared() -> None:
    ledger = NodeLedger.anonymous(2)
    assert ledger.shareable_devices(GI) == []
    assert ledger.refusals(vram_percent=10)[0].startswith("GPU 0 has unknown memory")
    with pytest.raises(LedgerError, match="unknown memory"):
        ledger.allocate("a", [0], GI, exclusive=False)


def test_policy_validation() -> None:
    for kwargs, message in [
        ({"vram_percent": 0}, "vram_percent must be at least 1"),
        ({"max_clients_per_gpu": 0}, "max_clients_per_gpu must be at least 1"),
        ({"max_clients_per_node": 0}, "max_clients_per_node must be at least 1"),
        ({"cores_percent": 0}, "cores_percent must be 1..100"),
    ]:
        with pytest.raises(ValueError, match=message):
            SharingPolicy(**kwargs)
    assert DEFAULT_POLICY.allow_shared
    assert DEFAULT_POLICY.max_clients_per_gpu == 10
    assert DEFAULT_POLICY.vram_percent == 100
    assert DEFAULT_POLICY.max_clients_per_node is None


@pytest.mark.parametrize(
    ("mib", "text"),
    [(0, "0Mi"), (512, "512Mi"), (1024, "1Gi"), (12 * GI, "12Gi"), (81559, "79.6Gi")],
)
def test_mib_text(mib: int, text: str) -> None:
    assert mib_text(mib) == text


def test_bound_pods_beyond_limits_are_booked_over() -> None:
    ledger = led(SharingPolicy(max_clients_per_gpu=1, max_clients_per_node=1))
    ledger.allocate("a", [0], 70 * GI, exclusive=False)
    ledger.allocate("b", [0], 70 * GI, exclusive=False, enforce_limits=False)
    assert ledger.is_over("b")
    assert not ledger.is_over("a")
    ledger._check()  # the limits are not asserted on a device with an over holder
    assert ledger.device_load(0) == (140 * GI, 2)
    assert ledger.shareable_devices(GI) == []  # node limit reached
    ledger.allocate("c", [1])
    with pytest.raises(LedgerError, match="held exclusively"):  # exclusivity is never waived
        ledger.allocate("d", [1], GI, exclusive=False, enforce_limits=False)
    ledger.release("b")
    ledger.release("a")
    ledger._check()


# --- Random operations, recounted after every step -------------------------------------------


def _recount(
    ledger: NodeLedger, model: dict[str, tuple[list[int], list[int], bool, Share]]
) -> None:
    """Devices rebuilt from the claims the test made must equal the ledger's, and every device
    must respect its limits unless a holder was booked beyond them."""
    reserved = [0] * len(ledger.devices)
    pinned = [0] * len(ledger.devices)
    cores = [0] * len(ledger.devices)
    holders: list[set[str]] = [set() for _ in ledger.devices]
    for uid, (ids, mibs, exclusive, share) in model.items():
        for index, mib in zip(ids, mibs, strict=True):
            if ledger.devices[index].mig_enabled:
                continue
            holders[index].add(uid)
            reserved[index] += mib
            if not exclusive:
                cores[index] += share.cores
                if not share.swap:
                    pinned[index] += mib
    shared = [uid for uid, (_, _, exclusive, _) in model.items() if not exclusive]
    assert ledger.shared_clients == len(shared)
    policy = ledger.policy
    for device in ledger.devices:
        i = device.index
        assert (device.reserved_mib, device.pinned_mib, device.cores_used) == (
            reserved[i],
            pinned[i],
            cores[i],
        )
        assert set(device.holders) == holders[i]
        if device.exclusive is not None:
            assert holders[i] == {device.exclusive}
        if any(ledger.is_over(uid) for uid in holders[i]) or device.exclusive or not holders[i]:
            continue
        assert device.memory_mib is not None
        assert reserved[i] <= policy.capacity_mib(device.memory_mib)
        assert pinned[i] <= device.memory_mib
        assert len(holders[i]) <= policy.max_clients_per_gpu
        assert cores[i] <= 100
    if policy.max_clients_per_node is not None and not any(ledger.is_over(u) for u in shared):
        assert len(shared) <= policy.max_clients_per_node


def _random_policy(rng: random.Random) -> SharingPolicy:
    return SharingPolicy(
        allow_shared=rng.random() < 0.85,
        vram_percent=rng.choice([100, 120, 150, 200, 200]),
        max_clients_per_gpu=rng.randint(1, 8),
        max_clients_per_node=rng.choice([None, None, 2, 4, 8]),
    )


@pytest.mark.parametrize("seed", range(12))
def test_random_operations(seed: int) -> None:
    rng = random.Random(seed)
    inventory = make_inventory("n1", 5, memory_mib=8000, mig={4: [("3g.40gb", 4000)] * 2})
    ledger = NodeLedger.from_inventory(inventory, _random_policy(rng))
    model: dict[str, tuple[list[int], list[int], bool, Share]] = {}
    for step in range(400):
        op = rng.random()
        uid = f"p{step}"
        if op < 0.3 and model:
            victim = rng.choice(sorted(model))
            assert ledger.release(victim)
            del model[victim]
        elif op < 0.75:  # a share on 1-3 devices
            ids = rng.sample(range(5), rng.randint(1, 3))
            share = Share(rng.choice([500, 1500, 2500, 4000, 6000]), rng.random() < 0.5)
            share = Share(share.mib, share.swap, rng.choice([0, 0, 0, 20, 50, 100]))
            forced = rng.random() < 0.1
            # one device: the query and allocate must agree
            expected = (
                ids[0] in ledger.shareable_devices(share.mib, None, share.swap, share.cores)
                if len(ids) == 1
                else None
            )
            before = ledger.describe()
            try:
                ledger.allocate(
                    uid,
                    ids,
                    share.mib,
                    exclusive=False,
                    swap=share.swap,
                    cores=share.cores,
                    enforce_limits=not forced,
                )
            except LedgerError:
                assert ledger.describe() == before
                assert expected is not True or forced
            else:
                assert expected is not False or forced
                model[uid] = (ids, [share.mib] * len(ids), False, share)
        elif op < 0.9:  # whole GPUs or a dedicated share
            ids = rng.sample(range(4), rng.randint(1, 2))
            fits = all(ledger.devices[i].free for i in ids)
            try:
                ledger.allocate(uid, ids, rng.choice([None, 1000]), True)
            except LedgerError:
                assert not fits
            else:
                assert fits
                model[uid] = (ids, [8000] * len(ids), True, Share(0))
        else:  # a MIG device
            gpu = ledger.devices[4]
            free = [m for m in gpu.mig if m.holder is None]
            if free:
                ledger.allocate(uid, [4], uuids=[free[0].uuid])
                model[uid] = ([4], [free[0].memory_mib], True, Share(0))
        if rng.random() < 0.02:  # a new node policy: rebook everything, bound pods forced
            policy = _random_policy(rng)
            fresh = NodeLedger.from_inventory(inventory, policy)
            for held in ledger.pods():
                assignment = ledger.assignment_of(held)
                assert assignment is not None
                ids, _mibs, exclusive, share = model[held]
                fresh.allocate(
                    held,
                    assignment.gpu_ids,
                    list(assignment.vram_mib),
                    exclusive,
                    uuids=assignment.gpu_uuids,
                    swap=share.swap,
                    cores=share.cores,
                    enforce_limits=False,
                )
            ledger = fresh
        ledger._check()
        _recount(ledger, model)
        assert ledger.clone().describe() == ledger.describe()


# --- NodeInfo: shared claims from annotations ------------------------------------------------

INV = make_inventory("n1", 4, memory_mib=MEM)


def node_info(policy: SharingPolicy = DEFAULT_POLICY) -> NodeInfo:
    return NodeInfo("n1", make_node("n1", inventory=INV), INV, policy=policy)


def shared_pod(
    name: str, ids: tuple[int, ...], mib: int, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    builder = make_pod(name).request("gpusched.io/gpu", len(ids))
    builder.assigned(Assignment(ids, (), (mib,) * len(ids), ""))
    for key, value in (annotations or {}).items():
        builder.annotate(key, value)
    return builder.obj()


SWAP = {"gpusched.io/swap-from-vram": "true"}


def test_nodeinfo_books_declared_shares() -> None:
    info = node_info(SharingPolicy(vram_percent=150))
    a = info.add_pod(shared_pod("a", (0, 1), 30 * GI))
    b = info.add_pod(shared_pod("b", (0,), 50 * GI, SWAP))
    assert not a.exclusive
    assert not a.swap
    assert b.swap
    assert a.conflict is None
    assert b.conflict is None
    assert info.ledger.devices[0].holders == {"uid-a": 30 * GI, "uid-b": 50 * GI}
    assert info.ledger.device_load(0) == (80 * GI, 2)
    info._check()


@pytest.mark.parametrize(
    ("build", "exclusive", "swap", "cores"),
    [
        pytest.param(lambda: shared_pod("p", (0,), GI), False, False, 0, id="gpusched"),
        pytest.param(
            lambda: shared_pod("p", (0,), GI, {"gpusched.io/exclusive": "true"}),
            True,
            False,
            0,
            id="gpusched-exclusive",
        ),
        pytest.param(
            lambda: (
                make_pod("p")
                .request("woolyai.com/gpu", 1)
                .assigned(Assignment((0,), (), (GI,), ""))
                .obj()
            ),
            False,
            True,
            0,
            id="woolyai-swaps-by-default",
        ),
        pytest.param(
            lambda: (
                make_pod("p")
                .request("woolyai.com/gpu", 1)
                .annotate("woolyai.com/swap-from-vram", "false")
                .annotate("woolyai.com/exclusive-gpu-use", "true")
                .assigned(Assignment((0,), (), (GI,), ""))
                .obj()
            ),
            True,
            False,
            0,
            id="woolyai-exclusive",
        ),
        pytest.param(
            lambda: (
                make_pod("p")
                .gpus(1)
                .request("nvidia.com/gpumem", 3000)
                .request("nvidia.com/gpucores", 30)
                .assigned(Assignment((0,), (), (3000,), ""))
                .obj()
            ),
            False,
            False,
            30,
            id="hami",
        ),
        pytest.param(
            lambda: (
                make_pod("p")
                .request("nvidia.com/gpucores", 100)
                .assigned(Assignment((0,), (), (3000,), ""))
                .obj()
            ),
            True,
            False,
            100,
            id="hami-cores-100-is-the-gpu-alone",
        ),
        pytest.param(
            lambda: shared_pod("p", (0,), GI, {"gpusched.io/exclusive": "True"}),
            True,
            False,
            0,
            id="booleans-read-as-the-readers-do",
        ),
        pytest.param(
            lambda: make_pod("p").gpus(1).assigned(Assignment((0,), (), (), "")).obj(),
            True,
            False,
            0,
            id="whole-gpu",
        ),
    ],
)
def test_nodeinfo_reads_share_terms(
    build: Callable[[], dict[str, Any]], exclusive: bool, swap: bool, cores: int
) -> None:
    info = node_info()
    p = info.add_pod(build())
    assert (p.exclusive, p.swap, p.cores) == (exclusive, swap, cores)
    assert p.conflict is None
    device = info.ledger.devices[0]
    assert (device.exclusive is not None) == exclusive
    assert device.cores_used == (0 if exclusive else cores)  # the GPU alone counts no shares
    info._check()


def test_nodeinfo_books_terms_the_readers_reject_as_a_plain_share() -> None:
    # Bound without gpusched's webhook: the pod runs, so it is booked, and the error says why
    # its terms were not read.
    info = node_info()
    bad = {"gpusched.io/exclusive": "yes", "gpusched.io/swap-from-vram": "true"}
    p = info.add_pod(shared_pod("p", (0,), GI, bad))
    assert (p.exclusive, p.swap, p.cores) == (False, False, 0)
    assert p.conflict is None
    assert p.error is not None
    assert 'GPU request: gpusched.io/exclusive: "yes" is not a boolean' in p.error
    info._check()


def test_nodeinfo_update_rebooks_when_share_terms_change() -> None:
    info = node_info(SharingPolicy(vram_percent=150))
    info.add_pod(shared_pod("a", (0,), 60 * GI))
    info.add_pod(shared_pod("b", (0,), 30 * GI, SWAP))
    assert info.ledger.devices[0].pinned_mib == 60 * GI
    info.update_pod(shared_pod("a", (0,), 60 * GI, SWAP))
    assert info.ledger.devices[0].pinned_mib == 0
    info._check()


def test_nodeinfo_exclusivity_both_ways() -> None:
    info = node_info()
    info.add_pod(make_pod("w").gpus(1).assigned(Assignment((0,), (), (), "")).obj())
    s = info.add_pod(shared_pod("s", (0,), GI))
    assert s.conflict == "cannot book declared devices: GPU 0 is held exclusively by pod uid-w"
    info.remove_pod("uid-w")  # released: the share is booked on retry
    assert info.pods["uid-s"].conflict is None
    w = info.add_pod(make_pod("w2").gpus(1).assigned(Assignment((0,), (), (), "")).obj())
    assert w.conflict == "cannot book declared devices: GPU 0 is held by pod uid-s"
    info._check()


def test_nodeinfo_share_moves_an_inferred_whole_gpu() -> None:
    info = node_info()
    info.add_pod(make_pod("k").gpus(1).obj())  # inferred onto GPU 0
    s = info.add_pod(shared_pod("s", (0,), GI))
    assert s.conflict is None
    assert info.pods["uid-k"].assignment is not None
    assert info.pods["uid-k"].assignment.gpu_ids == (1,)
    info._check()


def test_nodeinfo_policy_change_keeps_bound_pods_and_assumed_pods_must_fit() -> None:
    info = node_info()
    for name in ("a", "b", "c"):
        info.add_pod(shared_pod(name, (0,), 20 * GI))
    generation = info.generation
    info.set_policy(SharingPolicy(max_clients_per_gpu=2))
    assert info.generation > generation
    assert all(p.conflict is None for p in info.pods.values())  # bound pods stay booked
    assert info.ledger.device_load(0) == (60 * GI, 3)
    info._check()
    with pytest.raises(LedgerError, match="already has 3 clients"):
        info.add_pod(shared_pod("d", (0,), GI), assumed=True)
    assert "uid-d" not in info.pods
    info.set_policy(EXCLUSIVE_ONLY)
    assert all(info.ledger.is_over(uid) for uid in info.pods)
    info._check()
    same = info.generation
    info.set_policy(EXCLUSIVE_ONLY)
    assert info.generation == same


def test_cache_node_policy_setter() -> None:
    cache = SchedulerCache(FakeClock())
    tight = SharingPolicy(max_clients_per_gpu=1)
    cache.set_node_policy("n1", tight)  # before the Node: kept for it
    cache.add_node(make_node("n1", inventory=INV))
    cache.set_inventory("n1", INV)
    info = cache.node_info("n1")
    assert info is not None
    assert info.policy == tight
    cache.set_node_policy("n1", None)
    assert info.policy == DEFAULT_POLICY
    cache._check()


@pytest.mark.parametrize("seed", range(6))
def test_nodeinfo_recount_is_order_independent(seed: int) -> None:
    """Pods booked by the ledger's own rules, then reported by informers in any order (a
    restart), are booked exactly the same, none in conflict and none over the limits."""
    rng = random.Random(seed)
    policy = _random_policy(rng)
    if not policy.allow_shared:
        policy = SharingPolicy(vram_percent=policy.vram_percent)
    scratch = NodeLedger.from_inventory(INV, policy)
    pods = []
    for step in range(60):
        name = f"p{step}"
        if rng.random() < 0.2:
            free = scratch.free_gpus()
            if free:
                scratch.allocate(f"uid-{name}", free[:1])
                whole = Assignment(tuple(free[:1]), (), (), "")
                pods.append(make_pod(name).gpus(1).assigned(whole).obj())
            continue
        mib = rng.choice([4, 10, 20, 30]) * GI
        annotations = SWAP if rng.random() < 0.5 else {}
        swap = bool(annotations)
        fits = scratch.shareable_devices(mib, None, swap)
        if not fits:
            continue
        ids = tuple(sorted(rng.sample(fits, min(len(fits), rng.randint(1, 2)))))
        scratch.allocate(f"uid-{name}", ids, mib, exclusive=False, swap=swap)
        pods.append(shared_pod(name, ids, mib, annotations))
    infos = []
    for _ in range(2):
        rng.shuffle(pods)
        info = node_info(policy)
        for pod in pods:
            info.add_pod(pod)
            info._check()
        assert info.unplaced == []
        assert not any(info.ledger.is_over(uid) for uid in info.pods)
        infos.append(info)
    first, second = ({d["index"]: d["holders"] for d in i.ledger.describe()} for i in infos)
    assert first == second == {d["index"]: d["holders"] for d in scratch.describe()}
