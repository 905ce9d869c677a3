"""VRAMHeadroom: the score formula on ledgers (overcommit, exclusive and MIG devices, anonymous
GPUs, fractions), which pods it scores, its signature, and a profile that spreads shares."""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

import pytest
from builders import Cluster, PodBuilder, make_node, make_pod, run_cycle

from gpusched.cache.ledger import DEFAULT_POLICY, GPUDevice, MIGInstance, NodeLedger, SharingPolicy
from gpusched.framework import CycleState, SignPlugin, build_frameworks, in_tree, parse_config
from gpusched.plugins.vram_headroom import Share, VRAMHeadroom, headroom_score, share_of

GIB = 1024
OVER = SharingPolicy(vram_percent=150)
NO_SHARING = SharingPolicy(allow_shared=False)


def _ledger(*memories: int | None, policy: SharingPolicy = DEFAULT_POLICY) -> NodeLedger:
    return NodeLedger(
        [GPUDevice(i, f"GPU-{i}", "X", m, policy=policy) for i, m in enumerate(memories)],
        policy=policy,
    )


def _nothing(ledger: NodeLedger) -> None:
    pass


def _share_20_on_0(ledger: NodeLedger) -> None:
    ledger.allocate("a", [0], 20 * GIB, exclusive=False)


def _whole_0(ledger: NodeLedger) -> None:
    ledger.allocate("a", [0])


def _mig_1() -> NodeLedger:
    devices = [
        GPUDevice(0, "GPU-0", "X", 80 * GIB),
        GPUDevice(
            1, "GPU-1", "X", 80 * GIB, mig_enabled=True, mig=[MIGInstance("MIG-a", "1g.10gb", 10)]
        ),
    ]
    return NodeLedger(devices)


@pytest.mark.parametrize(
    ("ledger", "book", "share", "want"),
    [
        # empty 2 x 80Gi: 160Gi capacity, 10Gi asked -> 150/160
        (_ledger(80 * GIB, 80 * GIB), _nothing, Share(1, 10 * GIB, None), 93),
        # 20Gi already reserved: 130/160
        (_ledger(80 * GIB, 80 * GIB), _share_20_on_0, Share(1, 10 * GIB, None), 81),
        # two GPUs of 10Gi each: 140/160
        (_ledger(80 * GIB, 80 * GIB), _nothing, Share(2, 10 * GIB, None), 87),
        # a whole-GPU holder takes its device out of both sums: 70/80
        (_ledger(80 * GIB, 80 * GIB), _whole_0, Share(1, 10 * GIB, None), 87),
        # overcommit 150%: 240Gi capacity, 230 left
        (_ledger(80 * GIB, 80 * GIB, policy=OVER), _nothing, Share(1, 10 * GIB, None), 95),
        # a quarter of the largest GPU: 20Gi of 160
        (_ledger(80 * GIB, 80 * GIB), _nothing, Share(1, None, Fraction(1, 4)), 87),
        # more than is free: 0, never negative
        (_ledger(8 * GIB), _nothing, Share(1, 10 * GIB, None), 0),
        # no memory known (anonymous GPUs), sharing not allowed, no GPUs: 0
        (_ledger(None, None), _nothing, Share(1, 10 * GIB, None), 0),
        (_ledger(80 * GIB, policy=NO_SHARING), _nothing, Share(1, 10 * GIB, None), 0),
        (_ledger(), _nothing, Share(1, 10 * GIB, None), 0),
        # a MIG-enabled GPU adds nothing: 70/80
        (_mig_1(), _nothing, Share(1, 10 * GIB, None), 87),
    ],
)
def test_headroom_score(
    ledger: NodeLedger, book: Callable[[NodeLedger], None], share: Share, want: int
) -> None:
    book(ledger)
    assert headroom_score(ledger, share) == want


@pytest.mark.parametrize(
    ("pod", "want"),
    [
        (make_pod().shared(1, "10Gi"), Share(1, 10 * GIB, None)),
        (make_pod().shared(2, "16000Mi"), Share(2, 16000, None)),
        (
            make_pod().limit("nvidia.com/gpu", 1).limit("nvidia.com/gpumem-percentage", 25),
            Share(1, None, Fraction(1, 4)),
        ),
        (make_pod().shared(1, "10Gi").exclusive(), None),
        (make_pod().gpus(1), None),
        (make_pod().mig("1g.10gb"), None),
        (make_pod(), None),
        (make_pod().shared(1, "ten"), None),  # unreadable: GPUFit rejects it
    ],
)
def test_share_of(pod: PodBuilder, want: Share | None) -> None:
    assert share_of(pod.obj()) == want


def test_prescore_skips_pods_that_do_not_share_and_signs_by_shape() -> None:
    plugin = VRAMHeadroom()
    assert isinstance(plugin, SignPlugin)
    cluster = Cluster(make_node("n").gpus(8))
    whole = make_pod("w").gpus(1).obj()
    assert plugin.pre_score(CycleState(), whole, cluster.nodes()).is_skip
    shared = make_pod("s").shared(1, "10Gi").obj()
    state = CycleState()
    assert plugin.pre_score(state, shared, cluster.nodes()).is_success
    score = plugin.score(state, shared, cluster.node("n"))[0]
    assert score == plugin.score(CycleState(), shared, cluster.node("n"))[0] == 98
    assert plugin.sign_pod(shared) == plugin.sign_pod(make_pod("t").shared(1, "10Gi").obj())
    assert plugin.sign_pod(shared) != plugin.sign_pod(make_pod("u").shared(1, "11Gi").obj())
    assert plugin.sign_pod(whole) == plugin.sign_pod(make_pod("x").gpus(4).obj())


CONFIG = """
apiVersion: gpusched.io/v1alpha1
kind: SchedulerConfiguration
profiles:
- plugins:
    multiPoint: {enabled: [{name: VRAMHeadroom, weight: 10}]}
"""


def _bind_share(cluster: Cluster, node: str, uid: str, gpu: int, vram_mib: int) -> None:
    pod = make_pod(uid, uid=uid).shared(1, f"{vram_mib}Mi").on(node)
    cluster.bind(pod.assigned([gpu], vram_mib=[vram_mib]))


def _place(fw: Any, cluster: Cluster, name: str) -> str:
    best = run_cycle(fw, make_pod(name).shared(1, "20Gi").obj(), cluster.nodes()).best
    assert best is not None
    _bind_share(cluster, best, name, 0, 20 * GIB)
    return best


@pytest.mark.parametrize(("weight", "spread"), [(10, True), (None, False)])
def test_a_profile_spreads_shares_by_vram(weight: int | None, spread: bool) -> None:
    cluster = Cluster(make_node("a").gpus(2), make_node("b").gpus(2), make_node("c").gpus(2))
    _bind_share(cluster, "a", "old", 0, 40 * GIB)
    config = CONFIG if weight else CONFIG.replace("VRAMHeadroom, weight: 10", "GPUFit")
    fw = build_frameworks(parse_config(config), in_tree())["gpusched"]
    placed = [_place(fw, cluster, f"p{i}") for i in range(2)]
    if spread:
        # the emptiest nodes first, then each other: at weight 10 headroom outweighs GPUFit's
        # binpack, which scores joining a partly used GPU 50-100 and opening one 0-48
        assert sorted(placed) == ["b", "c"]
    else:
        assert placed == ["a", "a"]  # GPUFit's binpack alone fills the busy node


def test_all_names_the_public_api() -> None:
    import gpusched.plugins.vram_headroom as module

    classes_and_functions = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and getattr(value, "__module__", "") == module.__name__
    }
    assert classes_and_functions <= set(module.__all__)
    assert sorted(module.__all__) == sorted(
        ["NAME", "Share", "VRAMHeadroom", "headroom_score", "share_of"]
    )
