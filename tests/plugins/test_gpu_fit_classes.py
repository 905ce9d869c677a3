"""GPUFit with GPU classes (``gpusched.io/gpu-class``): PreFilter resolves the class, Filter
places the pod on the class's GPUs only with the class's sharing mode and client cap, PostFilter
says why no node has a GPU of the class, signatures carry the class, and a class change
re-queues the pods that ask for it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from builders import H100, H100_MIB, Cluster, NodeBuilder, PodBuilder, make_node, make_pod

from gpusched.framework import (
    DEVICE_ASSIGNMENT,
    SHARED_CLAIM,
    SUCCESS,
    Code,
    CycleState,
    Handle,
    QueueingHint,
    Status,
)
from gpusched.gpu_policy.models import GPUClass, parse_policy_object
from gpusched.plugins.gpu_fit import (
    NAME,
    REASON_CLASS_MISSING,
    REASON_GPU_IDS,
    REASON_MIG_MISSING,
    REASON_NO_IDLE_GPU,
    REASON_SHARE_CLIENTS,
    GPUFit,
    choice_for,
    never_fits_class,
)

GI = 1024
A100 = "NVIDIA A100-SXM4-40GB"
POOL = "gpusched.io/pool"


def gpu_class(name: str, **spec: Any) -> GPUClass:
    obj = parse_policy_object({"kind": "GPUClass", "metadata": {"name": name}, "spec": spec})
    assert isinstance(obj, GPUClass)
    return obj


CLASSES = {
    c.name: c
    for c in (
        gpu_class("h100", products=[H100]),
        gpu_class("a100", products=[A100]),
        gpu_class("pool-a", nodeSelector={"matchLabels": {POOL: "a"}}),
        gpu_class("two-per-gpu", products=[H100], sharing={"maxClientsPerGPU": 2}),
        gpu_class("dedicated", sharing={"mode": "exclusive"}),
        gpu_class("huge", minVramMiB=200 * GI),
        gpu_class("small-mig", migProfiles=["1g.10gb"]),
    )
}


@dataclass
class _Events:
    sent: list[tuple[str, str, str]] = field(default_factory=list)

    def eventf(
        self, regarding: Mapping[str, Any], event_type: str, reason: str, action: str, message: str
    ) -> None:
        self.sent.append((event_type, reason, message))


@dataclass
class _Handle:
    """What GPUFit reads: the snapshot, the event recorder and the classes."""

    node_lister: Any
    gpu_classes: Mapping[str, GPUClass] = field(default_factory=lambda: dict(CLASSES))
    claim_specs: None = None
    events: _Events = field(default_factory=_Events)


def mixed(cluster: Cluster, name: str = "n", a100: tuple[int, ...] = (0,)) -> Cluster:
    """Make the GPUs ``a100`` of node ``name`` A100s (40 GB), the others staying H100s."""
    info = cluster.node(name)
    inventory = info.ledger.inventory
    assert inventory is not None
    gpus = tuple(
        g.model_copy(update={"product": A100, "memory_mib": 40 * GI}) if g.index in a100 else g
        for g in inventory.gpus
    )
    cluster.cache.set_inventory(name, inventory.model_copy(update={"gpus": gpus}))
    return cluster


def share(name: str, gpu: int, gib: int) -> PodBuilder:
    return make_pod(name).shared(1, f"{gib}Gi").on("n").assigned([gpu], vram_mib=[gib * GI])


def classed(pod: PodBuilder, name: str) -> PodBuilder:
    return pod.annotate("gpusched.io/gpu-class", name)


def run(
    plugin: GPUFit, pod: PodBuilder, cluster: Cluster, name: str = "n"
) -> tuple[CycleState, Status, Status]:
    state = CycleState()
    obj = pod.obj()
    _, pre = plugin.pre_filter(state, obj)
    if not pre.is_success:
        return state, pre, pre
    return state, pre, plugin.filter(state, obj, cluster.node(name))


@dataclass
class Case:
    what: str
    pod: PodBuilder
    node: NodeBuilder = field(default_factory=lambda: make_node("n").gpus(2, topology="pcie"))
    bound: list[PodBuilder] = field(default_factory=list)
    a100: tuple[int, ...] = ()
    """GPUs of the node made A100s."""
    ids: tuple[int, ...] | None = None
    """The GPUs chosen; ``None``: rejected with ``reason``."""
    vram: tuple[int, ...] = ()
    reason: str = ""
    code: Code = Code.UNSCHEDULABLE


FILTER_CASES = [
    Case("no class: binpack's first GPU", make_pod().shared(1, "10Gi"), a100=(0,), ids=(0,)),
    Case(
        "a class of products: only its GPUs on a mixed node",
        classed(make_pod().shared(1, "10Gi"), "h100"),
        a100=(0,),
        ids=(1,),
        vram=(10 * GI,),
    ),
    Case(
        "the other product of the same node",
        classed(make_pod().shared(1, "10Gi"), "a100"),
        a100=(0,),
        ids=(0,),
        vram=(10 * GI,),
    ),
    Case(
        "a class's GPUs are all busy: not another GPU of the node",
        classed(make_pod().shared(1, "30Gi"), "a100"),
        bound=[share("a", 0, 30)],
        a100=(0,),
        reason="node(s) had too few GPUs with enough free VRAM for the pod's share",
    ),
    Case(
        "no GPU of the class on the node",
        classed(make_pod().shared(1, "10Gi"), "a100"),
        reason=REASON_CLASS_MISSING,
        code=Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
    ),
    Case(
        "the node lacks the class's label",
        classed(make_pod().shared(1, "10Gi"), "pool-a"),
        reason=REASON_CLASS_MISSING,
        code=Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
    ),
    Case(
        "the node has the class's label",
        classed(make_pod().shared(1, "10Gi"), "pool-a"),
        node=make_node("n").gpus(2, topology="pcie").label(POOL, "a"),
        ids=(0,),
        vram=(10 * GI,),
    ),
    Case(
        "minVramMiB above every GPU",
        classed(make_pod().shared(1, "10Gi"), "huge"),
        reason=REASON_CLASS_MISSING,
        code=Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
    ),
    Case(
        "shared class, 2 clients per GPU: binpack skips a GPU at the cap",
        classed(make_pod().shared(1, "1Gi"), "two-per-gpu"),
        bound=[share("a", 0, 1), share("b", 0, 1)],
        ids=(1,),
        vram=(GI,),
    ),
    Case(
        "shared class: every GPU at the cap",
        classed(make_pod().shared(1, "1Gi"), "two-per-gpu"),
        bound=[share(f"{g}{i}", g, 1) for g in (0, 1) for i in range(2)],
        reason=REASON_SHARE_CLIENTS,
    ),
    Case(
        "shared class: a named GPU of another class",
        classed(make_pod().shared(1, "1Gi"), "h100").annotate("gpusched.io/gpu-ids-request", "0"),
        a100=(0,),
        reason=REASON_GPU_IDS,
        code=Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
    ),
    Case(
        "exclusive class makes a shared pod exclusive: an idle GPU, all its memory",
        classed(make_pod().shared(1, "10Gi"), "dedicated"),
        bound=[share("a", 0, 1)],
        ids=(1,),
        vram=(H100_MIB,),
    ),
    Case(
        "exclusive class: no idle GPU",
        classed(make_pod().shared(1, "10Gi"), "dedicated"),
        bound=[share("a", 0, 1), share("b", 1, 1)],
        reason=REASON_NO_IDLE_GPU,
    ),
    Case(
        "whole GPUs of a class: an idle GPU of the class",
        classed(make_pod().gpus(1), "h100"),
        a100=(0,),
        ids=(1,),
        vram=(H100_MIB,),
    ),
    Case(
        "whole GPUs of a class: its only GPU is in use",
        classed(make_pod().gpus(1), "a100"),
        bound=[share("a", 0, 1)],
        a100=(0,),
        reason=REASON_NO_IDLE_GPU,
    ),
    Case(
        "MIG class: a device of its profile",
        classed(make_pod().mig("1g.10gb"), "small-mig"),
        node=make_node("n").gpus(1, topology="pcie", mig=["2g.20gb", "1g.10gb"]),
        ids=(0,),
    ),
    Case(
        "MIG class: a profile the class does not mean",
        classed(make_pod().mig("2g.20gb"), "small-mig"),
        node=make_node("n").gpus(1, topology="pcie", mig=["2g.20gb", "1g.10gb"]),
        reason=REASON_MIG_MISSING,
        code=Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
    ),
]


@pytest.mark.parametrize("case", FILTER_CASES, ids=[c.what for c in FILTER_CASES])
def test_filter_with_class(case: Case) -> None:
    cluster = Cluster(case.node).bind(*case.bound)
    if case.a100:
        mixed(cluster, a100=case.a100)
    plugin = GPUFit(handle=cast(Handle, _Handle(cluster.snapshot())))
    state, pre, status = run(plugin, case.pod, cluster)
    assert pre is SUCCESS, pre
    choice = choice_for(state, "n")
    if case.ids is None:
        assert (status.code, status.reasons, status.plugin) == (case.code, (case.reason,), NAME)
        assert choice is None
        return
    assert status is SUCCESS, status
    assert choice is not None
    assert choice.gpu_ids == case.ids
    if case.vram:
        assert choice.vram_mib == case.vram


@pytest.mark.parametrize(
    ("classes", "name", "words"),
    [
        (CLASSES, "nope", ["'nope'", "does not exist", "a100, dedicated, h100", "ask for one"]),
        ({}, "nope", ["'nope'", "no GPUClass exists", "create it"]),
    ],
    ids=["unknown class: the ones that exist", "no class at all"],
)
def test_unknown_class_is_unresolvable(
    classes: Mapping[str, GPUClass], name: str, words: list[str]
) -> None:
    cluster = Cluster(make_node("n").gpus(2, topology="pcie"))
    plugin = GPUFit(handle=cast(Handle, _Handle(cluster.snapshot(), dict(classes))))
    pod = classed(make_pod().shared(1, "1Gi"), name)
    _, status, _ = run(plugin, pod, cluster)
    assert status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    for word in words:
        assert word in status.message()
    assert plugin.sign_pod(pod.obj()) is None  # the full path, which says why


def test_whole_gpus_of_a_class_are_booked_whole() -> None:
    cluster = mixed(Cluster(make_node("n").gpus(2, topology="pcie")))
    plugin = GPUFit(handle=cast(Handle, _Handle(cluster.snapshot())))
    pod = classed(make_pod().gpus(1), "h100")
    state, _, status = run(plugin, pod, cluster)
    assert status is SUCCESS
    assert plugin.reserve(state, pod.obj(), "n") is SUCCESS
    assert state.read(DEVICE_ASSIGNMENT).gpu_ids == (1,)
    assert SHARED_CLAIM not in state


def test_post_filter_says_why_no_node_has_the_class() -> None:
    cluster = Cluster(make_node("n").gpus(2, topology="pcie"), make_node("m").gpus(1))
    nodes = cluster.nodes()
    why = never_fits_class(CLASSES["a100"], nodes)
    assert why is not None
    assert "GPUClass a100" in why
    assert "2 nodes" in why
    assert A100 in why
    assert "kubectl edit gpuclass a100" in why
    assert never_fits_class(CLASSES["h100"], nodes) is None
    plugin = GPUFit(handle=cast(Handle, _Handle(cluster.snapshot())))
    state = CycleState()
    pod = classed(make_pod().shared(1, "1Gi"), "a100").obj()
    plugin.pre_filter(state, pod)
    statuses = {n.name: plugin.filter(state, pod, n) for n in nodes}
    _, status = plugin.post_filter(state, pod, statuses)
    assert status.reasons == (why,)


def test_signatures_carry_the_class() -> None:
    cluster = Cluster(make_node("n").gpus(2, topology="pcie"))
    handle = _Handle(cluster.snapshot())
    plugin = GPUFit(handle=cast(Handle, handle))

    def sign(pod: PodBuilder) -> object:
        return plugin.sign_pod(pod.obj())

    plain = make_pod().shared(1, "1Gi")
    h100 = classed(make_pod("q").shared(1, "1Gi"), "h100")
    assert sign(classed(make_pod().shared(1, "1Gi"), "h100")) == sign(h100)
    assert sign(h100) != sign(plain)
    assert sign(h100) != sign(classed(make_pod().shared(1, "1Gi"), "a100"))
    before = sign(h100)
    handle.gpu_classes["h100"] = gpu_class("h100", products=[H100], minVramMiB=1)
    assert sign(h100) not in (before, None)  # an edited class signs its pods anew
    whole = classed(make_pod().gpus(1), "h100")
    assert sign(whole) is not None
    assert sign(whole) != sign(make_pod().gpus(1))


@pytest.mark.parametrize(
    ("annotation", "changed", "hint"),
    [
        ("gpusched.io/gpu-class", "h100", QueueingHint.QUEUE),
        ("cuda.scheduler.io/gpu-class", "h100", QueueingHint.QUEUE),
        ("gpusched.io/gpu-class", "a100", QueueingHint.QUEUE_SKIP),
    ],
    ids=["its class", "its class (WoolyAI's annotation)", "another class"],
)
def test_class_change_requeues_its_pods(annotation: str, changed: str, hint: QueueingHint) -> None:
    registration = next(r for r in GPUFit().events_to_register() if r.event.resource == "GPUClass")
    fn = registration.queueing_hint_fn
    assert fn is not None
    pod = make_pod().shared(1, "1Gi").annotate(annotation, "h100").obj()
    obj = {"kind": "GPUClass", "metadata": {"name": changed}}
    assert fn(pod, None, obj) == hint
    assert fn(pod, obj, None) == hint


def test_several_gpus_of_a_class_are_chosen_by_topology() -> None:
    # Bridged pairs (0-1, 2-3, ...): with GPU 1 busy, the two free GPUs of the class best
    # connected are a pair (2, 3), not the first two free (0, 2).
    cluster = Cluster(make_node("n").gpus(8, topology="bridged-pairs"))
    cluster.bind(make_pod("a").gpus(1).on("n").assigned([1], vram_mib=[H100_MIB]))
    plugin = GPUFit(handle=cast(Handle, _Handle(cluster.snapshot())))
    state, _, status = run(plugin, classed(make_pod().gpus(2), "h100"), cluster)
    assert status is SUCCESS, status
    choice = choice_for(state, "n")
    assert choice is not None
    assert choice.gpu_ids == (2, 3)


def test_an_exclusive_class_is_written_on_the_pod_at_reserve() -> None:
    """The class made the share exclusive; the Binding says so (``gpusched.io/exclusive``), so
    the cache books the bound pod alone on its GPU, as it was placed."""
    from gpusched.plugins.default_binder import BINDING_ANNOTATIONS

    cluster = Cluster(make_node("n").gpus(2, topology="pcie"))
    plugin = GPUFit(handle=cast(Handle, _Handle(cluster.snapshot())))
    pod = classed(make_pod().shared(1, "10Gi"), "dedicated")
    state, _pre, status = run(plugin, pod, cluster)
    assert status is SUCCESS
    assert plugin.reserve(state, pod.obj(), "n") is SUCCESS
    assert state.get(BINDING_ANNOTATIONS) == {"gpusched.io/exclusive": "true"}
    # A pod that says it itself gets nothing more; a shared class writes nothing.
    says_it = classed(make_pod("b").shared(1, "10Gi"), "dedicated").exclusive()
    shared_class = classed(make_pod("c").shared(1, "10Gi"), "h100")
    for pod in (says_it, shared_class):
        state, _pre, status = run(plugin, pod, cluster)
        assert status is SUCCESS
        assert plugin.reserve(state, pod.obj(), "n") is SUCCESS
        assert state.get(BINDING_ANNOTATIONS) is None
