"""PolicyManager alone: informer events in, node limits to the cache (only on change), one
Event per change on a losing or invalid policy, and the status each policy should have."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from gpusched.cache.ledger import SharingPolicy
from gpusched.clock import FakeClock
from gpusched.gpu_policy import manager as manager_module
from gpusched.gpu_policy.manager import PolicyManager, StatusWrite, sharing_policy
from gpusched.gpu_policy.resolve import EffectivePolicy
from gpusched.inventory import GPUDevice, MIGDevice
from gpusched.kube.client import Kube, resource_path
from gpusched.mig_profiles import place
from gpusched.sim import SimCluster

H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"


def node_policy(
    name: str, match: dict[str, str] | None = None, gen: int = 1, **fields: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "gpusched.io/v1alpha1",
        "kind": "GPUNodePolicy",
        "metadata": {"name": name, "uid": f"uid-{name}", "generation": gen},
        "spec": {"nodeSelector": {"matchLabels": match or {}}, **fields},
    }


def cluster_policy(name: str = "default", gen: int = 1, **fields: Any) -> dict[str, Any]:
    return {
        "apiVersion": "gpusched.io/v1alpha1",
        "kind": "ClusterGPUPolicy",
        "metadata": {"name": name, "uid": f"uid-{name}", "generation": gen},
        "spec": fields,
    }


def gpu_class(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "gpusched.io/v1alpha1",
        "kind": "GPUClass",
        "metadata": {"name": name, "uid": f"uid-{name}", "generation": 1},
        "spec": spec,
    }


@dataclass
class Rig:
    """A manager with what it tells the cache (as the cache would hold it) and its Events."""

    cache: dict[str, SharingPolicy] = field(default_factory=dict)
    calls: list[tuple[str, SharingPolicy | None]] = field(default_factory=list)
    events: list[tuple[str, str, str, str]] = field(default_factory=list)
    manager: PolicyManager = field(init=False)

    def __post_init__(self) -> None:
        self.manager = PolicyManager(self._set, FakeClock(), event=self._event)

    def _set(self, node: str, policy: SharingPolicy | None) -> None:
        self.calls.append((node, policy))
        if policy is None:
            self.cache.pop(node, None)
        else:
            self.cache[node] = policy

    def _event(
        self, regarding: Mapping[str, Any], type_: str, reason: str, action: str, message: str
    ) -> None:
        self.events.append((regarding["metadata"]["name"], type_, reason, message))

    def node(self, name: str, **labels: str) -> None:
        self.manager.on_node(name, labels)

    def add(self, obj: dict[str, Any], event: str = "ADDED") -> None:
        handler = {
            "GPUNodePolicy": self.manager.on_node_policy,
            "ClusterGPUPolicy": self.manager.on_cluster_policy,
            "GPUClass": self.manager.on_class,
        }[obj["kind"]]
        handler(event, obj, None)

    def delete(self, obj: dict[str, Any]) -> None:
        self.add(obj, "DELETED")

    def writes(self) -> dict[str, StatusWrite]:
        return {f"{w.kind}/{w.name}": w for w in self.manager.flush()}


Step = Callable[[Rig], None]


def _pools(rig: Rig) -> None:
    rig.node("a1", pool="a")
    rig.node("a2", pool="a", zone="z1")
    rig.node("b1", pool="b")


CASES: list[tuple[str, list[Step], dict[str, SharingPolicy]]] = [
    ("no policy: nothing told, the cache's defaults hold", [_pools], {}),
    (
        "a node policy reaches the matching nodes only",
        [
            _pools,
            lambda r: r.add(node_policy("pa", {"pool": "a"}, vramOvercommitPercent=150)),
        ],
        {"a1": SharingPolicy(vram_percent=150), "a2": SharingPolicy(vram_percent=150)},
    ),
    (
        "policies before nodes",
        [
            lambda r: r.add(node_policy("pa", {"pool": "a"}, maxClientsPerGPU=2)),
            _pools,
        ],
        {"a1": SharingPolicy(max_clients_per_gpu=2), "a2": SharingPolicy(max_clients_per_gpu=2)},
    ),
    (
        "a changed policy",
        [
            _pools,
            lambda r: r.add(node_policy("pa", {"pool": "a"}, vramOvercommitPercent=150)),
            lambda r: r.add(
                node_policy("pa", {"pool": "a"}, gen=2, vramOvercommitPercent=200), "MODIFIED"
            ),
        ],
        {"a1": SharingPolicy(vram_percent=200), "a2": SharingPolicy(vram_percent=200)},
    ),
    (
        "a removed policy: the nodes go back to the defaults",
        [
            _pools,
            lambda r: r.add(node_policy("pa", {"pool": "a"}, vramOvercommitPercent=150)),
            lambda r: r.delete(node_policy("pa", {"pool": "a"}, vramOvercommitPercent=150)),
        ],
        {},
    ),
    (
        "a node relabelled into and out of pools",
        [
            _pools,
            lambda r: r.add(node_policy("pb", {"pool": "b"}, allowSharing=False)),
            lambda r: r.node("a1", pool="b"),
            lambda r: r.node("b1", pool="c"),
        ],
        {"a1": SharingPolicy(allow_shared=False)},
    ),
    (
        "a deleted node: the cache forgets it",
        [
            _pools,
            lambda r: r.add(node_policy("pa", {"pool": "a"}, maxClientsPerNode=4)),
            lambda r: r.manager.on_node("a1", None),
        ],
        {"a2": SharingPolicy(max_clients_per_node=4)},
    ),
    (
        "precedence field by field: the more specific selector, then the cluster default",
        [
            _pools,
            lambda r: r.add(cluster_policy(maxClientsPerGPU=4, vramOvercommitPercent=120)),
            lambda r: r.add(node_policy("pool-a", {"pool": "a"}, maxClientsPerGPU=6)),
            lambda r: r.add(node_policy("a-z1", {"pool": "a", "zone": "z1"}, maxClientsPerGPU=2)),
        ],
        {
            "a1": SharingPolicy(max_clients_per_gpu=6, vram_percent=120),
            "a2": SharingPolicy(max_clients_per_gpu=2, vram_percent=120),
            "b1": SharingPolicy(max_clients_per_gpu=4, vram_percent=120),
        },
    ),
    (
        "equal specificity: the first name wins",
        [
            _pools,
            lambda r: r.add(node_policy("zz", {"pool": "b"}, maxClientsPerGPU=3)),
            lambda r: r.add(node_policy("aa", {"pool": "b"}, maxClientsPerGPU=5)),
        ],
        {"b1": SharingPolicy(max_clients_per_gpu=5)},
    ),
    (
        "only the ClusterGPUPolicy named default applies",
        [_pools, lambda r: r.add(cluster_policy("other", vramOvercommitPercent=300))],
        {},
    ),
    (
        "an invalid policy is ignored; its valid version applied until then is dropped",
        [
            _pools,
            lambda r: r.add(node_policy("pa", {"pool": "a"}, vramOvercommitPercent=150)),
            lambda r: r.add(
                node_policy("pa", {"pool": "a"}, gen=2, vramOvercommitPercent=30), "MODIFIED"
            ),
        ],
        {},
    ),
]


@pytest.mark.parametrize(("steps", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_cache_holds_each_nodes_limits(
    steps: list[Step], expected: dict[str, SharingPolicy]
) -> None:
    rig = Rig()
    for step in steps:
        step(rig)
    assert rig.cache == expected
    for node, policy in expected.items():
        effective = rig.manager.effective(node)
        assert effective is not None
        assert sharing_policy(effective) == policy


def test_only_nodes_whose_limits_changed_are_told() -> None:
    rig = Rig()
    _pools(rig)
    rig.add(node_policy("pa", {"pool": "a"}, vramOvercommitPercent=150))
    assert sorted(n for n, _ in rig.calls) == ["a1", "a2"]
    rig.calls.clear()
    # A heartbeat (same labels), a status-only update, an unrelated policy: nothing.
    rig.node("a1", pool="a")
    rig.add(
        {**node_policy("pa", {"pool": "a"}, vramOvercommitPercent=150), "status": {"future": 1}},
        "MODIFIED",
    )
    rig.add(node_policy("pc", {"pool": "c"}, vramOvercommitPercent=300))
    assert rig.calls == []
    # A label the selectors do not read changes nothing either.
    rig.node("a2", pool="a", zone="z9")
    assert rig.calls == []


def test_a_heartbeat_does_not_mark_reports_dirty() -> None:
    rig = Rig()
    _pools(rig)
    rig.manager.flush()
    assert not rig.manager.dirty.is_set()
    rig.node("a1", pool="a")
    assert not rig.manager.dirty.is_set()
    rig.node("a3", pool="a")
    assert rig.manager.dirty.is_set()


def test_the_losing_policy_gets_one_event_per_change_not_per_node() -> None:
    rig = Rig()
    _pools(rig)
    rig.add(node_policy("broad", {}, maxClientsPerGPU=8))
    rig.add(node_policy("pool-a", {"pool": "a"}, maxClientsPerGPU=2))
    writes = rig.writes()
    assert [(n, t, r) for n, t, r, _ in rig.events] == [("broad", "Warning", "Overridden")]
    message = rig.events[0][3]
    assert "maxClientsPerGPU on 2 nodes (a1, a2) to GPUNodePolicy/pool-a" in message
    overridden = writes["GPUNodePolicy/broad"].status["conditions"][1]
    assert (overridden["type"], overridden["status"]) == ("Overridden", "True")
    assert overridden["message"] == message
    # Nothing changed: no new Event.
    rig.manager.flush()
    assert len(rig.events) == 1
    # Another node joins the pool: the message changes, one more Event.
    rig.node("a3", pool="a")
    rig.manager.flush()
    assert len(rig.events) == 2
    assert "on 3 nodes" in rig.events[1][3]
    # The winner leaves: no longer overridden, no Event; overridden again: told again.
    rig.delete(node_policy("pool-a", {"pool": "a"}, maxClientsPerGPU=2))
    rig.manager.flush()
    assert len(rig.events) == 2
    rig.add(node_policy("pool-a", {"pool": "a"}, maxClientsPerGPU=2))
    rig.manager.flush()
    assert len(rig.events) == 3


def _conditions(write: StatusWrite) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in write.status["conditions"]}


STATUS_CASES: list[tuple[str, list[dict[str, Any]], str, int, dict[str, tuple[str, str]]]] = [
    (
        "applied on its nodes",
        [node_policy("pa", {"pool": "a"}, vramOvercommitPercent=150)],
        "GPUNodePolicy/pa",
        2,
        {"Applied": ("True", "Applied"), "Overridden": ("False", "NotOverridden")},
    ),
    (
        "no node matches",
        [node_policy("px", {"pool": "x"}, vramOvercommitPercent=150)],
        "GPUNodePolicy/px",
        0,
        {"Applied": ("False", "NoMatchingNodes"), "Overridden": ("False", "NotOverridden")},
    ),
    (
        "every field it sets is won by another",
        [
            node_policy("broad", {}, maxClientsPerGPU=8),
            node_policy("everywhere", {"pool": "a"}, maxClientsPerGPU=2),
            node_policy("everywhere-b", {"pool": "b"}, maxClientsPerGPU=2),
        ],
        "GPUNodePolicy/broad",
        3,
        {"Applied": ("False", "NotApplied"), "Overridden": ("True", "Overridden")},
    ),
    (
        "the cluster default governs every node",
        [cluster_policy(maxClientsPerGPU=4)],
        "ClusterGPUPolicy/default",
        3,
        {"Applied": ("True", "Applied")},
    ),
    (
        "a cluster policy not named default",
        [cluster_policy("mine", maxClientsPerGPU=4)],
        "ClusterGPUPolicy/mine",
        0,
        {"Applied": ("False", "NotDefault")},
    ),
]


@pytest.mark.parametrize(
    ("objects", "ref", "matching", "conditions"),
    [c[1:] for c in STATUS_CASES],
    ids=[c[0] for c in STATUS_CASES],
)
def test_policy_status(
    objects: list[dict[str, Any]],
    ref: str,
    matching: int,
    conditions: dict[str, tuple[str, str]],
) -> None:
    rig = Rig()
    _pools(rig)
    for obj in objects:
        rig.add(obj)
    write = rig.writes()[ref]
    assert write.status["matchingNodes"] == matching
    assert write.status["observedGeneration"] == 1
    assert _conditions(write) == conditions
    kind, _, name = ref.partition("/")
    assert write.path == f"/apis/gpusched.io/v1alpha1/{manager_module.PLURALS[kind]}/{name}/status"


def test_a_status_already_shown_is_not_written_again_and_keeps_its_transition_time() -> None:
    rig = Rig()
    _pools(rig)
    obj = node_policy("pa", {"pool": "a"}, vramOvercommitPercent=150)
    rig.add(obj)
    first = rig.writes()["GPUNodePolicy/pa"]
    # Our write comes back through the informer: nothing more to write.
    rig.add({**obj, "status": first.status}, "MODIFIED")
    assert "GPUNodePolicy/pa" not in rig.writes()
    # A new generation: written again, conditions whose status held keep their time.
    rig.manager.on_node_policy(
        "MODIFIED",
        {
            **node_policy("pa", {"pool": "a"}, gen=2, vramOvercommitPercent=150),
            "status": first.status,
        },
        None,
    )
    again = rig.writes()["GPUNodePolicy/pa"]
    assert again.status["observedGeneration"] == 2
    times = [c["lastTransitionTime"] for c in again.status["conditions"]]
    assert times == [c["lastTransitionTime"] for c in first.status["conditions"]]


@pytest.mark.parametrize(
    ("obj", "condition", "problem"),
    [
        (
            node_policy("bad", {"pool": "a"}, vramOvercommitPercent=30),
            "Applied",
            "For 30% extra (WoolyAI's meaning) write 130",
        ),
        (cluster_policy(maxClientsPerGPU=0), "Applied", "maxClientsPerGPU"),
        (
            gpu_class("solo", sharing={"mode": "exclusive", "maxClientsPerGPU": 2}),
            "Matched",
            "an exclusive GPU has one client",
        ),
    ],
    ids=["node policy", "cluster policy", "class"],
)
def test_an_invalid_object_is_logged_told_once_and_ignored(
    obj: dict[str, Any], condition: str, problem: str, caplog: pytest.LogCaptureFixture
) -> None:
    rig = Rig()
    _pools(rig)
    rig.add(obj)
    rig.add(obj, "MODIFIED")  # the same version again: told once
    ref = f"{obj['kind']}/{obj['metadata']['name']}"
    assert [(n, t, r) for n, t, r, _ in rig.events] == [
        (obj["metadata"]["name"], "Warning", "InvalidSpec")
    ]
    assert problem in rig.events[0][3]
    assert "ignored until fixed" in rig.events[0][3]
    assert problem in caplog.text
    assert ref in rig.manager.invalid()
    assert rig.cache == {}
    assert obj["metadata"]["name"] not in rig.manager.classes
    write = rig.writes()[ref]
    cond = write.status["conditions"][0]
    assert (cond["type"], cond["status"], cond["reason"]) == (condition, "False", "InvalidSpec")
    assert problem in cond["message"]
    rig.delete(obj)
    assert rig.manager.invalid() == {}
    assert ref not in rig.writes()


def test_classes_are_a_live_read_only_view() -> None:
    rig = Rig()
    classes = rig.manager.classes
    rig.add(gpu_class("h100", products=[H100], sharing={"mode": "exclusive"}))
    rig.add(gpu_class("small", migProfiles=["1g.10gb"]))
    assert sorted(classes) == ["h100", "small"]
    assert classes["h100"].spec.sharing.mode == "exclusive"
    rig.delete(gpu_class("small"))
    assert sorted(classes) == ["h100"]
    with pytest.raises(TypeError):
        classes["x"] = classes["h100"]  # type: ignore[index]
    assert rig.cache == {}


def _gpu(index: int, product: str = H100, mig: tuple[str, ...] = ()) -> GPUDevice:
    placed = place(product, mig) if mig else ()
    return GPUDevice(
        index=index,
        uuid=f"GPU-{index:08x}-0000-4000-8000-000000000000",
        product=product,
        memory_mib=81559,
        pci_bus_id=f"00000000:{index + 16:02x}:00.0",
        mig_enabled=bool(mig),
        mig_devices=tuple(
            MIGDevice(
                uuid=f"MIG-{index:08x}-0000-4000-8000-{i:012x}",
                profile=profile,
                memory_mib=9984,
                gpu_instance_id=i,
                compute_instance_id=0,
                placement_start=where.start,
                placement_size=where.profile.memory_slices,
            )
            for i, (profile, where) in enumerate(zip(mig, placed, strict=True))
        ),
    )


# (case, class spec, GPUs by node, matchingNodes, matchingGPUs, Matched, message fragment)
CLASS_STATUS_CASES: list[
    tuple[str, dict[str, Any], dict[str, list[GPUDevice]], int, int, str, str]
] = [
    (
        "whole GPUs of a product",
        {"products": [H100]},
        {"a1": [_gpu(0), _gpu(1)], "a2": [_gpu(0, mig=("1g.10gb",))], "b1": [_gpu(0, A100)]},
        1,
        2,
        "True",
        "2 GPUs of the class on 1 node",
    ),
    (
        "MIG devices count one by one",
        {"migProfiles": ["1g.10gb"]},
        {"a1": [_gpu(0, mig=("1g.10gb", "1g.10gb")), _gpu(1, mig=("1g.10gb",))]},
        1,
        3,
        "True",
        "3 GPUs",
    ),
    (
        "no GPU matches: the commonest reasons",
        {"products": ["NVIDIA B200"]},
        {"a1": [_gpu(0)], "a2": [_gpu(0)]},
        0,
        0,
        "False",
        f"(2 nodes: the node's GPUs are {H100}; the class wants NVIDIA B200; 1 node: the "
        "node has no GPUs in its inventory)",
    ),
]


@pytest.mark.parametrize(
    ("spec", "inventories", "nodes", "gpus", "matched", "fragment"),
    [c[1:] for c in CLASS_STATUS_CASES],
    ids=[c[0] for c in CLASS_STATUS_CASES],
)
def test_class_status_counts_the_gpus_of_the_class(
    spec: dict[str, Any],
    inventories: dict[str, list[GPUDevice]],
    nodes: int,
    gpus: int,
    matched: str,
    fragment: str,
) -> None:
    rig = Rig()
    _pools(rig)
    rig.add(gpu_class("c", **spec))
    for node, devices in inventories.items():
        rig.manager.on_inventory(node, devices)
    status = rig.writes()["GPUClass/c"].status
    assert (status["matchingNodes"], status["matchingGPUs"]) == (nodes, gpus)
    (cond,) = status["conditions"]
    assert (cond["type"], cond["status"]) == ("Matched", matched)
    assert fragment in cond["message"]


def test_an_inventory_change_marks_class_status_dirty_unless_nothing_a_class_reads_changed() -> (
    None
):
    rig = Rig()
    _pools(rig)
    rig.manager.on_inventory("a1", [_gpu(0)])  # no class yet: nothing to report
    assert rig.manager.dirty.is_set()  # (the nodes were new)
    rig.add(gpu_class("c", products=[H100]))
    rig.manager.flush()
    rig.manager.on_inventory("a1", [_gpu(0)])
    assert not rig.manager.dirty.is_set()
    rig.manager.on_inventory("a1", [_gpu(0), _gpu(1)])
    assert rig.manager.dirty.is_set()
    rig.manager.flush()
    rig.manager.on_inventory("a1", None)
    assert rig.manager.dirty.is_set()


def test_sharing_policy_carries_every_limit() -> None:
    effective = EffectivePolicy(
        allow_sharing=False,
        max_clients_per_gpu=3,
        max_clients_per_node=7,
        vram_overcommit_percent=180,
    )
    assert sharing_policy(effective) == SharingPolicy(
        allow_shared=False, vram_percent=180, max_clients_per_gpu=3, max_clients_per_node=7
    )


def test_all_is_complete() -> None:
    exported = set(manager_module.__all__)
    for name in exported:
        assert hasattr(manager_module, name), name
    public_defs = {
        name
        for name, value in vars(manager_module).items()
        if not name.startswith("_")
        and getattr(value, "__module__", None) == manager_module.__name__
    }
    assert public_defs <= exported


async def _status_of(kube: Kube, path: str, name: str) -> dict[str, Any]:
    """The object's status, once it has one (list, then watch; bounded)."""

    async def follow() -> dict[str, Any]:
        listed = await kube.get(path)
        for obj in listed["items"]:
            if obj["metadata"]["name"] == name and obj.get("status"):
                return dict(obj["status"])
        query = {"resourceVersion": listed["metadata"]["resourceVersion"]}
        while True:
            async for event in kube.watch(path, query):
                obj = event["object"]
                query["resourceVersion"] = obj["metadata"]["resourceVersion"]
                if obj["metadata"].get("name") == name and obj.get("status"):
                    return dict(obj["status"])

    return await asyncio.wait_for(follow(), timeout=30)


async def test_run_writes_the_status_once_changes_are_quiet_for_a_period() -> None:
    clock = FakeClock()
    path = resource_path("gpusched.io", "v1alpha1", "gpunodepolicies")
    async with SimCluster(None, kubelets=False) as sim:
        body = node_policy("pa", {"pool": "a"}, vramOvercommitPercent=150)
        del body["metadata"]["uid"], body["metadata"]["generation"]
        created = await sim.kube.create(path, body)
        manager = PolicyManager(lambda node, policy: None, clock, debounce=1.0)
        task = asyncio.create_task(manager.run(sim.kube))
        try:
            manager.on_node_policy("ADDED", created, None)
            manager.on_node("a1", {"pool": "a"})
            await clock.wait_for_sleepers()
            await clock.advance(0.5)
            manager.on_node("a2", {"pool": "a"})  # within the period: it starts again
            await clock.advance(0.6)
            assert clock.sleepers == 1  # waiting, nothing written
            assert not (await sim.kube.get(f"{path}/pa")).get("status")
            await clock.advance(1.0)
            status = await _status_of(sim.kube, path, "pa")
            assert status["matchingNodes"] == 2
            assert status["observedGeneration"] == created["metadata"]["generation"]
            assert {c["type"]: c["status"] for c in status["conditions"]} == {
                "Applied": "True",
                "Overridden": "False",
            }
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
