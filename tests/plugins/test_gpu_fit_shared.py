"""GPUFit for shared GPUs (by VRAM slice), exclusive shared-API pods and MIG devices: Filter's
choice and reasons, the strategies' scores, Reserve's assignment (booked back by the cache as
the same claim), MIG fallback, signatures, NodeResourcesFit's per-GPU resources."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from builders import H100_MIB, Cluster, NodeBuilder, PodBuilder, make_node, make_pod

from gpusched.cache.ledger import DEFAULT_POLICY, REFUSAL_KINDS, SharingPolicy
from gpusched.framework import (
    DEVICE_ASSIGNMENT,
    SUCCESS,
    Code,
    CycleState,
    Handle,
    Status,
)
from gpusched.gpu_requests import read_gpu_request
from gpusched.plugins import gpu_fit
from gpusched.plugins.default_binder import BINDING_ANNOTATIONS, binding_body
from gpusched.plugins.gpu_fit import (
    GPU_CHOICES,
    MIG_FALLBACK_APPLIED,
    NAME,
    REASON_GPU_IDS,
    REASON_MIG_BUSY,
    REASON_MIG_MISSING,
    REASON_NO_IDLE_GPU,
    REASON_NODE_CLIENTS,
    REASON_SHARE_CLIENTS,
    REASON_SHARE_CORES,
    REASON_SHARE_EXCLUSIVE,
    REASON_SHARE_NEVER,
    REASON_SHARE_PHYSICAL,
    REASON_SHARE_VRAM,
    WOOLYAI_GPU_IDS,
    WOOLYAI_RESERVED_VRAM_MIB,
    GPUFit,
    GPUFitArgs,
    choice_for,
    never_fits_plan,
)
from gpusched.plugins.node_resources_fit import NodeResourcesFit

MIG = ["2g.20gb", "2g.20gb", "2g.20gb", "1g.10gb"]
GI = 1024


def node(name: str = "n", gpus: int = 2) -> NodeBuilder:
    return make_node(name).gpus(gpus, topology="pcie")


def share(name: str, gpu: int, gib: int, on: str = "n") -> PodBuilder:
    """A bound pod sharing GPU ``gpu`` with ``gib`` GiB."""
    return make_pod(name).shared(1, f"{gib}Gi").on(on).assigned([gpu], vram_mib=[gib * GI])


def whole(name: str, gpu: int, on: str = "n") -> PodBuilder:
    return make_pod(name).gpus(1).on(on).assigned([gpu], vram_mib=[H100_MIB])


BINPACK = GPUFitArgs()
SPREAD = GPUFitArgs(strategy="spread")


@dataclass
class Case:
    what: str
    pod: PodBuilder
    bound: list[PodBuilder] = field(default_factory=list)
    args: GPUFitArgs = BINPACK
    ids: tuple[int, ...] | None = None
    """The GPUs chosen; ``None``: the node is rejected with ``reason``."""
    vram: tuple[int, ...] = ()
    reason: str = ""
    code: Code = Code.UNSCHEDULABLE


FILTER_CASES = [
    Case("empty node: the first GPU", make_pod().shared(1, "20Gi"), ids=(0,), vram=(20 * GI,)),
    Case(
        "binpack: the fullest GPU that fits",
        make_pod().shared(1, "20Gi"),
        [share("a", 1, 40)],
        ids=(1,),
        vram=(20 * GI,),
    ),
    Case(
        "spread: the emptiest GPU",
        make_pod().shared(1, "20Gi"),
        [share("a", 0, 40)],
        SPREAD,
        ids=(1,),
        vram=(20 * GI,),
    ),
    Case(
        "binpack skips a GPU without room",
        make_pod().shared(1, "30Gi"),
        [share("a", 0, 60)],
        ids=(1,),
        vram=(30 * GI,),
    ),
    Case(
        "two GPUs",
        make_pod().shared(2, "10Gi"),
        [share("a", 1, 10)],
        ids=(1, 0),
        vram=(10 * GI, 10 * GI),
    ),
    Case(
        "no GPU with enough free VRAM",
        make_pod().shared(1, "30Gi"),
        [share("a", 0, 60), share("b", 1, 60)],
        reason=REASON_SHARE_VRAM,
    ),
    Case(
        "larger than any GPU: never",
        make_pod().shared(1, "90Gi"),
        reason=REASON_SHARE_NEVER,
        code=Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
    ),
    Case(
        "more GPUs than the node has: never",
        make_pod().shared(3, "1Gi"),
        reason=REASON_SHARE_NEVER,
        code=Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
    ),
    Case(
        "ten clients per GPU (HAMi's default)",
        make_pod().shared(1, "1Gi"),
        [share(f"c{g}{i}", g, 1) for g in (0, 1) for i in range(10)],
        reason=REASON_SHARE_CLIENTS,
    ),
    Case(
        "a shared pod never joins a GPU held whole or exclusively",
        make_pod().shared(1, "1Gi"),
        [whole("a", 0), whole("b", 1)],
        reason=REASON_SHARE_EXCLUSIVE,
    ),
    Case(
        "named GPU index",
        make_pod().shared(1, "1Gi").annotate("gpusched.io/gpu-ids-request", "1"),
        ids=(1,),
        vram=(GI,),
    ),
    Case(
        "named GPU index without room",
        make_pod().shared(1, "30Gi").annotate("gpusched.io/gpu-ids-request", "1"),
        [share("a", 1, 60)],
        reason=REASON_SHARE_VRAM,
    ),
    Case(
        "named GPU index too small for the share",
        make_pod().shared(1, "90Gi").annotate("gpusched.io/gpu-ids-request", "1"),
        reason=REASON_GPU_IDS,
    ),
    Case(
        "named GPU index the node lacks",
        make_pod().shared(1, "1Gi").annotate("gpusched.io/gpu-ids-request", "5"),
        reason=REASON_GPU_IDS,
        code=Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
    ),
    Case(
        "whole GPUs named by index (nvidia.com/gpu with gpu-ids-request)",
        make_pod().gpus(1).annotate("gpusched.io/gpu-ids-request", "1"),
        ids=(1,),
        vram=(H100_MIB,),
    ),
    Case(
        "a named whole GPU held by another pod",
        make_pod().gpus(1).annotate("gpusched.io/gpu-ids-request", "1"),
        [share("a", 1, 1)],
        reason=REASON_GPU_IDS,
    ),
    Case(
        "a named whole GPU the node lacks",
        make_pod().gpus(1).annotate("gpusched.io/gpu-ids-request", "5"),
        reason=REASON_GPU_IDS,
        code=Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
    ),
    Case(
        "exclusive: an idle GPU, all its memory",
        make_pod().shared(1, "10Gi").exclusive(),
        [share("a", 0, 1)],
        ids=(1,),
        vram=(H100_MIB,),
    ),
    Case(
        "exclusive: no idle GPU",
        make_pod().shared(1, "10Gi").exclusive(),
        [share("a", 0, 1), share("b", 1, 1)],
        reason=REASON_NO_IDLE_GPU,
    ),
    Case(
        "a fraction of each GPU (HAMi gpumem-percentage)",
        make_pod().limit("nvidia.com/gpu", 1).limit("nvidia.com/gpumem-percentage", 50),
        ids=(0,),
        vram=(H100_MIB // 2,),
    ),
]


def run(
    plugin: GPUFit, pod: PodBuilder, cluster: Cluster, name: str = "n"
) -> tuple[CycleState, Status]:
    state = CycleState()
    obj = pod.obj()
    _, status = plugin.pre_filter(state, obj)
    assert status is SUCCESS, status
    return state, plugin.filter(state, obj, cluster.node(name))


@pytest.mark.parametrize("case", FILTER_CASES, ids=[c.what for c in FILTER_CASES])
def test_filter_shared(case: Case) -> None:
    cluster = Cluster(node()).bind(*case.bound)
    plugin = GPUFit(case.args)
    state, status = run(plugin, case.pod, cluster)
    choice = choice_for(state, "n")
    if case.ids is None:
        assert (status.code, status.reasons, status.plugin) == (case.code, (case.reason,), NAME)
        assert choice is None
        return
    assert status is SUCCESS, status
    assert choice is not None
    assert (choice.gpu_ids, choice.vram_mib) == (case.ids, case.vram)
    assert 0 <= choice.fill <= 100


OVERCOMMIT = SharingPolicy(vram_percent=150)


@pytest.mark.parametrize(
    ("what", "policy", "bound", "pod", "reason"),
    [
        (
            "node client limit",
            SharingPolicy(max_clients_per_node=1),
            [share("a", 0, 1)],
            make_pod().shared(1, "1Gi"),
            REASON_NODE_CLIENTS,
        ),
        (
            "overcommitted VRAM: a pod that cannot swap needs physical room",
            OVERCOMMIT,
            [share("a", 0, 70), share("b", 1, 70)],
            make_pod().shared(1, "20Gi"),
            REASON_SHARE_PHYSICAL,
        ),
        (
            "overcommitted VRAM: a pod that can swap uses it",
            OVERCOMMIT,
            [share("a", 0, 70), share("b", 1, 70)],
            make_pod().shared(1, "20Gi").swap(),
            "",
        ),
        (
            "overcommit still has a ceiling",
            OVERCOMMIT,
            [share("a", 0, 70), share("b", 1, 70)],
            make_pod().shared(1, "60Gi").swap(),
            REASON_SHARE_VRAM,
        ),
        (
            "compute share (HAMi gpucores)",
            DEFAULT_POLICY,
            [
                make_pod(f"c{g}")
                .limit("nvidia.com/gpu", 1)
                .limit("nvidia.com/gpumem", 1000)
                .limit("nvidia.com/gpucores", 80)
                .on("n")
                .assigned([g], vram_mib=[1000])
                for g in (0, 1)
            ],
            make_pod()
            .limit("nvidia.com/gpu", 1)
            .limit("nvidia.com/gpumem", 1000)
            .limit("nvidia.com/gpucores", 30),
            REASON_SHARE_CORES,
        ),
    ],
)
def test_filter_by_policy(
    what: str, policy: SharingPolicy, bound: list[PodBuilder], pod: PodBuilder, reason: str
) -> None:
    cluster = Cluster(node())
    cluster.cache.set_node_policy("n", policy)
    cluster.bind(*bound)
    _, status = run(GPUFit(), pod, cluster)
    if reason:
        assert status.reasons == (reason,)
    else:
        assert status is SUCCESS


@pytest.mark.parametrize(
    ("args", "expected"), [(BINPACK, "busy"), (SPREAD, "idle")], ids=["binpack", "spread"]
)
def test_score_strategy(args: GPUFitArgs, expected: str) -> None:
    cluster = Cluster(node("busy"), node("idle")).bind(share("a", 0, 40, on="busy"))
    plugin = GPUFit(args)
    pod = make_pod().shared(1, "10Gi").obj()
    state = CycleState()
    plugin.pre_filter(state, pod)
    nodes = cluster.nodes()
    for info in nodes:
        assert plugin.filter(state, pod, info) is SUCCESS
    assert plugin.pre_score(state, pod, nodes) is SUCCESS
    scores = {info.name: plugin.score(state, pod, info)[0] for info in nodes}
    assert all(0 <= s <= 100 for s in scores.values())
    assert max(scores, key=lambda n: scores[n]) == expected
    # binpack joins GPU 0 (50 of 80Gi after: 50 + 62 // 2); on the idle node it opens a GPU
    # of an idle node (node part 0 of 12) keeping 70 of 80Gi free (36 * 70/80 = 31).
    busy = 50 + (100 * 50 * GI // H100_MIB) // 2
    idle = 36 * (H100_MIB - 10 * GI) // H100_MIB
    want = (
        {"busy": busy, "idle": idle}
        if args is BINPACK
        # spread takes the busy node's idle GPU 1 (node 1 of 2 in use: 12 // 2 = 6) and
        # mirrors the node part only: 100 - (6 + 36 - 31) and 100 - (0 + 36 - 31).
        else {"busy": 100 - (6 + 36 - idle), "idle": 100 - (36 - idle)}
    )
    assert scores == want


@pytest.mark.parametrize(
    ("pod", "exclusive"),
    [
        (make_pod("new").shared(2, "10Gi"), False),
        (make_pod("new").shared(1, "10Gi").exclusive(), True),
        (make_pod("new").shared(1, "10Gi").swap(), False),
    ],
    ids=["shared", "exclusive", "swap"],
)
def test_reserve_books_what_filter_chose(pod: PodBuilder, exclusive: bool) -> None:
    """Reserve's assignment, assumed by the cache, is the same claim Filter chose: a share
    with its slice (or an exclusive hold), read back from the pod as nodeinfo books it."""
    cluster = Cluster(node()).bind(share("a", 0, 5))
    plugin = GPUFit()
    state, status = run(plugin, pod, cluster)
    assert status is SUCCESS
    assert plugin.reserve(state, pod.obj(), "n") is SUCCESS
    assignment = state.read(DEVICE_ASSIGNMENT)
    choice = choice_for(state, "n")
    assert choice is not None
    assert assignment.gpu_ids == choice.gpu_ids
    cluster.cache.assume_pod(pod.obj(), "n", assignment)
    ledger = cluster.node("n").ledger
    booked = ledger.assignment_of(pod.uid)
    assert booked is not None
    assert (booked.gpu_ids, booked.vram_mib) == (assignment.gpu_ids, assignment.vram_mib)
    for index in assignment.gpu_ids:
        assert (ledger.devices[index].exclusive == pod.uid) is exclusive
    plugin.unreserve(state, pod.obj(), "n")
    assert DEVICE_ASSIGNMENT not in state


def test_woolyai_binding_annotations() -> None:
    pod = make_pod().limit("woolyai.com/gpu", 1).annotate("woolyai.com/pod-vram", "16000Mi")
    request = read_gpu_request(pod.obj())
    assert request is not None
    assert request.source == "woolyai"
    cluster = Cluster(node())
    plugin = GPUFit()
    state, status = run(plugin, pod, cluster)
    assert status is SUCCESS
    assert plugin.reserve(state, pod.obj(), "n") is SUCCESS
    extra = state.read(BINDING_ANNOTATIONS)
    assert extra == {WOOLYAI_GPU_IDS: "0", WOOLYAI_RESERVED_VRAM_MIB: "16000"}
    body = binding_body(pod.obj(), "n", state.read(DEVICE_ASSIGNMENT), extra)
    assert body["metadata"]["annotations"][WOOLYAI_GPU_IDS] == "0"
    assert body["metadata"]["annotations"]["gpusched.io/reserved-vram-mib"] == "16000"


# -- MIG ----------------------------------------------------------------------------------


def mig_node(name: str = "m", gpus: int = 1) -> NodeBuilder:
    return make_node(name).gpus(gpus, topology="pcie", mig=MIG)


def mig_holders(cluster: Cluster, profile: str, count: int, name: str = "m") -> list[PodBuilder]:
    """Bound pods holding ``count`` MIG devices of ``profile`` on node ``name``."""
    ledger = cluster.node(name).ledger
    free = ledger.free_mig(f"nvidia.com/mig-{profile}")[:count]
    return [
        make_pod(f"h{profile}{i}").mig(profile).on(name).assigned([gpu], [uuid])
        for i, (gpu, uuid) in enumerate(free)
    ]


@pytest.mark.parametrize(
    ("what", "profile", "held", "reason", "code"),
    [
        ("free profile", "2g.20gb", 0, "", Code.SUCCESS),
        ("all of the profile held", "2g.20gb", 3, REASON_MIG_BUSY, Code.UNSCHEDULABLE),
        (
            "a profile the node lacks",
            "3g.40gb",
            0,
            REASON_MIG_MISSING,
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
        ),
    ],
)
def test_filter_mig(what: str, profile: str, held: int, reason: str, code: Code) -> None:
    cluster = Cluster(mig_node())
    cluster.bind(*mig_holders(cluster, "2g.20gb", held))
    plugin = GPUFit()
    pod = make_pod("new").mig(profile)
    state, status = run(plugin, pod, cluster, "m")
    if code == Code.SUCCESS:
        assert status is SUCCESS
        assert plugin.reserve(state, pod.obj(), "m") is SUCCESS
        assignment = state.read(DEVICE_ASSIGNMENT)
        assert assignment.gpu_uuids[0].startswith("MIG-")
        cluster.cache.assume_pod(pod.obj(), "m", assignment)
        assert len(cluster.node("m").ledger.free_mig("nvidia.com/mig-2g.20gb")) == 2
    else:
        assert (status.code, status.reasons) == (code, (reason,))


@dataclass
class _Events:
    sent: list[tuple[str, str, str]] = field(default_factory=list)

    def eventf(
        self, regarding: Mapping[str, Any], event_type: str, reason: str, action: str, message: str
    ) -> None:
        self.sent.append((event_type, reason, message))


@dataclass
class _Handle:
    """The two services GPUFit reads: the snapshot and the event recorder."""

    node_lister: Any
    events: _Events = field(default_factory=_Events)
    claim_specs: None = None


@pytest.mark.parametrize(
    ("fallbacks", "held", "placed", "applied"),
    [
        ((), 0, "nvidia.com/mig-2g.20gb", None),
        (("1g.10gb",), 0, "nvidia.com/mig-2g.20gb", None),
        (("1g.10gb",), 3, "nvidia.com/mig-1g.10gb", "2g.20gb->1g.10gb"),
        ((), 3, None, None),
    ],
    ids=["free, no list", "free, list unused", "falls back", "no list: waits"],
)
def test_mig_fallback(
    fallbacks: tuple[str, ...], held: int, placed: str | None, applied: str | None
) -> None:
    cluster = Cluster(mig_node())
    cluster.bind(*mig_holders(cluster, "2g.20gb", held))
    handle = _Handle(cluster.snapshot())
    plugin = GPUFit(handle=cast(Handle, handle))
    pod = make_pod("new").mig("2g.20gb")
    if fallbacks:
        pod.mig_fallback(*fallbacks)
    state, status = run(plugin, pod, cluster, "m")
    if placed is None:
        assert status.reasons == (REASON_MIG_BUSY,)
        return
    assert status is SUCCESS
    assert plugin.reserve(state, pod.obj(), "m") is SUCCESS
    uuid = state.read(DEVICE_ASSIGNMENT).gpu_uuids[0]
    ledger = cluster.node("m").ledger
    assert any(m.uuid == uuid and m.resource == placed for d in ledger.devices for m in d.mig)
    extra = state.get(BINDING_ANNOTATIONS)
    if applied is None:
        assert extra is None
        assert not handle.events.sent
    else:
        assert extra == {MIG_FALLBACK_APPLIED: applied}
        assert [e[:2] for e in handle.events.sent] == [("Normal", "MIGFallback")]
        assert "2g.20gb is free on no node" in handle.events.sent[0][2]


def test_a_fallback_the_webhook_applied_gets_its_event_at_reserve() -> None:
    """The admission webhook rewrote the pod's MIG request and recorded it in the annotation:
    the scheduler places what the pod now asks for and says so in an Event (the webhook, at
    admission, has no pod to write one about); no Binding annotation is added again."""
    cluster = Cluster(mig_node())
    handle = _Handle(cluster.snapshot())
    plugin = GPUFit(handle=cast(Handle, handle))
    pod = make_pod("new").mig("1g.10gb").annotate(MIG_FALLBACK_APPLIED, "2g.20gb->1g.10gb")
    state, status = run(plugin, pod, cluster, "m")
    assert status is SUCCESS
    assert plugin.reserve(state, pod.obj(), "m") is SUCCESS
    assert state.get(BINDING_ANNOTATIONS) is None
    assert [e[:2] for e in handle.events.sent] == [("Normal", "MIGFallback")]
    assert "the admission webhook gave it 1g.10gb" in handle.events.sent[0][2]


def test_node_resources_fit_leaves_per_gpu_and_fallback_mig_resources_to_gpufit() -> None:
    """gpusched.io/vram (no node advertises it) never rejects a node; a MIG pod with
    fallbacks is not held to the profile it requests."""
    cluster = Cluster(node())
    fit = NodeResourcesFit()
    pod = make_pod().shared(1, "20Gi").obj()
    state = CycleState()
    fit.pre_filter(state, pod)
    assert fit.filter(state, pod, cluster.node("n")) is SUCCESS
    mig = Cluster(mig_node())
    mig.bind(*mig_holders(mig, "2g.20gb", 3))
    for fallback, fits in ((False, False), (True, True)):
        builder = make_pod("f").mig("2g.20gb")
        if fallback:
            builder.mig_fallback("1g.10gb")
        obj = builder.obj()
        state = CycleState()
        fit.pre_filter(state, obj)
        assert (fit.filter(state, obj, mig.node("m")) is SUCCESS) is fits


@pytest.mark.parametrize(
    ("pod", "nodes", "message"),
    [
        (make_pod().shared(1, "20Gi"), [node()], None),
        (
            make_pod().shared(1, "96Gi"),
            [node()],
            "The pod asks for 96Gi per GPU; the largest GPU here can give a pod 79.6Gi: ask "
            "for at most that much gpusched.io/vram",
        ),
        (make_pod().mig("2g.20gb"), [mig_node()], None),
        (
            make_pod().mig("3g.40gb"),
            [mig_node()],
            "The pod asks for MIG profile 3g.40gb, which no node offers; the nodes offer "
            "nvidia.com/mig-1g.10gb, nvidia.com/mig-2g.20gb: ask for one of those, or list "
            "one in gpusched.io/mig-fallback",
        ),
        (
            make_pod().mig("3g.40gb"),
            [node()],
            "The pod asks for MIG profile 3g.40gb, but no node offers MIG devices: ask for "
            "whole GPUs (nvidia.com/gpu) or shared ones (gpusched.io/gpu)",
        ),
    ],
    ids=["fits", "vram too large", "mig offered", "mig profile missing", "no mig at all"],
)
def test_never_fits_plan(pod: PodBuilder, nodes: list[NodeBuilder], message: str | None) -> None:
    request = read_gpu_request(pod.obj())
    assert request is not None
    assert never_fits_plan(request, Cluster(*nodes).nodes()) == message


# -- signatures --------------------------------------------------------------------------------

SHARED = make_pod().shared(1, "20Gi")


@pytest.mark.parametrize(
    ("a", "b", "equal"),
    [
        (SHARED, make_pod("other").shared(1, "20Gi"), True),
        (SHARED, make_pod().shared(1, "20Gi").cpu("2"), True),
        (SHARED, make_pod().shared(1, "21Gi"), False),
        (SHARED, make_pod().shared(2, "20Gi"), False),
        (SHARED, make_pod().shared(1, "20Gi").exclusive(), False),
        (SHARED, make_pod().shared(1, "20Gi").swap(), False),
        (SHARED, make_pod().shared(1, "20Gi").priority(2), False),
        (SHARED, make_pod().shared(1, "20Gi").annotate("gpusched.io/gpu-ids-request", "1"), False),
        (make_pod().mig("2g.20gb"), make_pod("o").mig("2g.20gb"), True),
        (make_pod().mig("2g.20gb"), make_pod().mig("1g.10gb"), False),
    ],
)
def test_signatures(a: PodBuilder, b: PodBuilder, equal: bool) -> None:
    plugin = GPUFit()
    sa, sb = plugin.sign_pod(a.obj()), plugin.sign_pod(b.obj())
    assert sa is not None
    assert sb is not None
    assert (sa == sb) is equal


def test_mig_with_fallbacks_is_not_signed() -> None:
    assert GPUFit().sign_pod(make_pod().mig("2g.20gb").mig_fallback("1g.10gb").obj()) is None


def test_bad_request_is_unresolvable_and_unsigned() -> None:
    pod = make_pod().limit("gpusched.io/gpu", 1).obj()  # no VRAM
    _, status = GPUFit().pre_filter(CycleState(), pod)
    assert status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert "gpusched.io/vram" in status.message()
    assert GPUFit().sign_pod(pod) is None


def test_read_once_per_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    """SignPod and PreFilter of one cycle read the pod once."""
    calls = []
    real = gpu_fit.read_gpu_request

    def counting(pod: Mapping[str, Any], claims: Any = None) -> Any:
        calls.append(pod)
        return real(pod, claims)

    monkeypatch.setattr(gpu_fit, "read_gpu_request", counting)
    plugin = GPUFit()
    pod = SHARED.obj()
    plugin.sign_pod(pod)
    plugin.pre_filter(CycleState(), pod)
    assert len(calls) == 1
    assert GPU_CHOICES  # the key stays public


@pytest.mark.parametrize(
    ("bound", "gib", "swap", "kind"),
    [
        ([], 10, False, None),
        ([share("a", 0, 70)], 20, False, "capacity"),
        ([whole("a", 0)], 1, False, "exclusive"),
        ([share(f"c{i}", 0, 1) for i in range(10)], 1, False, "clients"),
    ],
    ids=["fits", "capacity", "exclusive", "clients"],
)
def test_ledger_refusal_kind(
    bound: list[PodBuilder], gib: int, swap: bool, kind: str | None
) -> None:
    """The fixed words Filter's reasons are chosen by agree with the ledger's sentences."""
    ledger = Cluster(node()).bind(*bound).node("n").ledger
    assert ledger.refusal_kind(0, gib * GI, None, swap) == kind
    assert (0 in ledger.refusals(gib * GI, None, swap)) is (kind is not None)
    assert kind is None or kind in REFUSAL_KINDS.values()


@pytest.mark.parametrize(
    "pod",
    [{"metadata": {"annotations": "not a map"}}, {"spec": {"containers": 5}}],
    ids=["annotations", "containers"],
)
def test_unreadable_pod_is_unresolvable_not_an_error(pod: dict[str, Any]) -> None:
    _, status = GPUFit().pre_filter(CycleState(), pod)
    assert status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert "cannot be read" in status.message()
