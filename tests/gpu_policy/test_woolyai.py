"""WoolyAI's policy objects: each reader's table of examples, the errors, the CRDs, and the
precedence between a WoolyAI object and a gpusched one of the same scope (resolver and
manager)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from gpusched.cache.ledger import SharingPolicy
from gpusched.clock import FakeClock
from gpusched.gpu_policy.crds import WOOLYAI_KINDS, CRDKind, crd_manifest, render
from gpusched.gpu_policy.manager import REASON_SHADOWED, PolicyManager
from gpusched.gpu_policy.models import PolicyError
from gpusched.gpu_policy.resolve import BUILTIN_SOURCE, PolicyResolver, policy_ref
from gpusched.gpu_policy.woolyai import READ_FROM, parse_woolyai_object
from gpusched.kube.errors import APIClientError
from gpusched.sim import SimCluster
from gpusched.sim import crd as apiserver_crd

W = "woolyai.dev/v1alpha1"


def wooly(kind: str, name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    return {"apiVersion": W, "kind": kind, "metadata": {"name": name}, "spec": dict(spec)}


# The seed's examples (000, "Configuration") and variations: WoolyAI object -> what gpusched
# reads (kind, spec as its wire form, defaults dropped).
READS: list[tuple[str, dict[str, Any], str, dict[str, Any]]] = [
    (
        "cluster policy: 20 % extra is 120",
        wooly("ClusterGPUPolicy", "default", {"defaultVramOvercommitPercent": 20}),
        "ClusterGPUPolicy",
        {"vramOvercommitPercent": 120},
    ),
    (
        "cluster policy: nothing set",
        wooly("ClusterGPUPolicy", "default", {}),
        "ClusterGPUPolicy",
        {},
    ),
    (
        "node policy: the seed's",
        wooly(
            "WoolyNodePolicy",
            "high-memory-nodes",
            {
                "targetSelector": {"node-type": "gpu-high-mem"},
                "maxClientsPerGPU": 4,
                "maxClientsPerNode": 16,
                "vramOvercommitPercent": 30,
            },
        ),
        "GPUNodePolicy",
        {
            "nodeSelector": {"matchLabels": {"node-type": "gpu-high-mem"}},
            "maxClientsPerGPU": 4,
            "maxClientsPerNode": 16,
            "vramOvercommitPercent": 130,
        },
    ),
    (
        "node policy: no selector is every node, 0 % extra is 100",
        wooly("WoolyNodePolicy", "all", {"vramOvercommitPercent": 0}),
        "GPUNodePolicy",
        {"nodeSelector": {}, "vramOvercommitPercent": 100},
    ),
    (
        "class: the seed's",
        wooly(
            "GPUClass",
            "a100-shared",
            {
                "description": "Shared A100 GPUs",
                "matchLabels": {"woolyai.com/gpu.product": "A100-SXM4-40GB"},
                "requirements": {"minVramMiB": 40000},
                "sharing": {"mode": "shared", "replicas": 4},
            },
        ),
        "GPUClass",
        {
            "description": "Shared A100 GPUs",
            "nodeSelector": {"matchLabels": {"woolyai.com/gpu.product": "A100-SXM4-40GB"}},
            "minVramMiB": 40000,
            "sharing": {"maxClientsPerGPU": 4},
        },
    ),
    (
        "class: exclusive",
        wooly("GPUClass", "solo", {"sharing": {"mode": "exclusive"}}),
        "GPUClass",
        {"sharing": {"mode": "exclusive"}},
    ),
]


@pytest.mark.parametrize(("what", "obj", "kind", "spec"), READS, ids=[r[0] for r in READS])
def test_reads_as_gpusched(what: str, obj: dict[str, Any], kind: str, spec: dict[str, Any]) -> None:
    read = parse_woolyai_object(obj)
    assert read.kind == kind
    assert read.api_version == "gpusched.io/v1alpha1"
    assert read.name == obj["metadata"]["name"]
    got = read.spec.model_dump(by_alias=True, exclude_defaults=True)
    assert got == spec
    wooly_kind = {
        "ClusterGPUPolicy": "ClusterGPUPolicy.woolyai.dev",
        "GPUClass": "GPUClass.woolyai.dev",
    }
    ref = f"{wooly_kind.get(obj['kind'], obj['kind'])}/{obj['metadata']['name']}"
    assert policy_ref(read) == ref
    assert getattr(read.metadata, "annotations", {})[READ_FROM] == ref


REJECTED: list[tuple[str, dict[str, Any], str]] = [
    (
        "negative overcommit",
        wooly("WoolyNodePolicy", "x", {"vramOvercommitPercent": -5}),
        "WoolyNodePolicy/x: spec.vramOvercommitPercent",
    ),
    (
        "overcommit beyond gpusched's bound",
        wooly("ClusterGPUPolicy", "default", {"defaultVramOvercommitPercent": 901}),
        "spec.defaultVramOvercommitPercent",
    ),
    (
        "exclusive with replicas",
        wooly("GPUClass", "c", {"sharing": {"mode": "exclusive", "replicas": 4}}),
        "remove replicas or set mode: shared",
    ),
    (
        "gpusched's field name in a WoolyAI object",
        wooly("WoolyNodePolicy", "x", {"nodeSelector": {}}),
        "spec.nodeSelector",
    ),
    ("not a WoolyAI kind", wooly("Pod", "x", {}), "not one of WoolyAI's policy kinds"),
]


@pytest.mark.parametrize(("what", "obj", "words"), REJECTED, ids=[r[0] for r in REJECTED])
def test_rejected(what: str, obj: dict[str, Any], words: str) -> None:
    with pytest.raises(PolicyError) as info:
        parse_woolyai_object(obj)
    assert words in str(info.value)


@pytest.mark.parametrize("kind", WOOLYAI_KINDS, ids=lambda k: k.kind)
def test_crds_accept_the_seed_examples(kind: CRDKind) -> None:
    manifest = crd_manifest(kind)
    apiserver_crd.validate_crd(manifest)
    assert manifest["spec"]["group"] == "woolyai.dev"
    assert "subresources" not in manifest["spec"]["versions"][0]
    schema = apiserver_crd.CRDInfo.from_crd(manifest).versions[0].schema
    for _, obj, _, _ in READS:
        if obj["kind"] != kind.kind:
            continue
        assert apiserver_crd.unknown_field_paths(obj, schema) == []
        assert apiserver_crd.validate_custom_resource(obj, schema, kind=kind.kind) == []
    assert render(kind).startswith(f"# {kind.kind}: generated from gpusched/gpu_policy/woolyai.py")


async def test_the_simulated_cluster_serves_woolyai_kinds() -> None:
    async with SimCluster(None, kubelets=False) as sim:
        for _, obj, _, _ in READS[::2]:
            plural = next(k.plural for k in WOOLYAI_KINDS if k.kind == obj["kind"])
            created = await sim.kube.create(f"/apis/woolyai.dev/v1alpha1/{plural}", obj)
            assert created["spec"] == obj["spec"]
            parse_woolyai_object(created)
        with pytest.raises(APIClientError) as info:
            await sim.kube.create(
                "/apis/woolyai.dev/v1alpha1/woolynodepolicies",
                wooly("WoolyNodePolicy", "bad", {"maxClientsPerGPU": 0}),
            )
        assert info.value.code == 422


# --- precedence ---------------------------------------------------------------------------


def node_policy(name: str, match: dict[str, str], **fields: Any) -> dict[str, Any]:
    return {
        "apiVersion": "gpusched.io/v1alpha1",
        "kind": "GPUNodePolicy",
        "metadata": {"name": name},
        "spec": {"nodeSelector": {"matchLabels": match}, **fields},
    }


def own(kind: str, name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "gpusched.io/v1alpha1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": dict(spec),
    }


@dataclass
class Rig:
    cache: dict[str, SharingPolicy] = field(default_factory=dict)
    events: list[tuple[str, str, str]] = field(default_factory=list)
    manager: PolicyManager = field(init=False)

    def __post_init__(self) -> None:
        self.manager = PolicyManager(self._set, FakeClock(), event=self._event)

    def _set(self, node: str, policy: SharingPolicy | None) -> None:
        if policy is None:
            self.cache.pop(node, None)
        else:
            self.cache[node] = policy

    def _event(
        self, regarding: Mapping[str, Any], type_: str, reason: str, action: str, message: str
    ) -> None:
        self.events.append((regarding["metadata"]["name"], reason, message))

    def add(self, obj: dict[str, Any], event: str = "ADDED") -> None:
        m = self.manager
        handlers = {
            ("gpusched.io/v1alpha1", "GPUNodePolicy"): m.on_node_policy,
            ("gpusched.io/v1alpha1", "ClusterGPUPolicy"): m.on_cluster_policy,
            ("gpusched.io/v1alpha1", "GPUClass"): m.on_class,
            (W, "WoolyNodePolicy"): m.on_woolyai_node_policy,
            (W, "ClusterGPUPolicy"): m.on_woolyai_cluster_policy,
            (W, "GPUClass"): m.on_woolyai_class,
        }
        handlers[obj["apiVersion"], obj["kind"]](event, obj, None)


@dataclass
class Case:
    what: str
    objects: list[dict[str, Any]]
    want: SharingPolicy
    """Node ``n`` (labels ``node-type: big``)'s limits."""
    sources: dict[str, str] = field(default_factory=dict)


BIG = {"node-type": "big"}
PRECEDENCE = [
    Case(
        "WoolyAI's node policy alone",
        [wooly("WoolyNodePolicy", "w", {"targetSelector": BIG, "maxClientsPerGPU": 4})],
        SharingPolicy(max_clients_per_gpu=4),
        {"maxClientsPerGPU": "WoolyNodePolicy/w"},
    ),
    Case(
        "equal specificity: gpusched's node policy wins, field by field",
        [
            wooly(
                "WoolyNodePolicy",
                "a",
                {"targetSelector": BIG, "maxClientsPerGPU": 4, "vramOvercommitPercent": 30},
            ),
            node_policy("z", BIG, maxClientsPerGPU=2),
        ],
        SharingPolicy(max_clients_per_gpu=2, vram_percent=130),
        {"maxClientsPerGPU": "GPUNodePolicy/z", "vramOvercommitPercent": "WoolyNodePolicy/a"},
    ),
    Case(
        "a more specific WoolyAI selector wins",
        [
            wooly(
                "WoolyNodePolicy",
                "w",
                {"targetSelector": {**BIG, "zone": "z"}, "maxClientsPerGPU": 4},
            ),
            node_policy("g", BIG, maxClientsPerGPU=2),
        ],
        SharingPolicy(max_clients_per_gpu=4),
        {"maxClientsPerGPU": "WoolyNodePolicy/w"},
    ),
    Case(
        "same name in both groups: both apply, told apart",
        [
            wooly("WoolyNodePolicy", "same", {"targetSelector": BIG, "maxClientsPerNode": 8}),
            node_policy("same", BIG, maxClientsPerGPU=3),
        ],
        SharingPolicy(max_clients_per_gpu=3, max_clients_per_node=8),
        {"maxClientsPerGPU": "GPUNodePolicy/same", "maxClientsPerNode": "WoolyNodePolicy/same"},
    ),
    Case(
        "cluster policies: gpusched's default first, then WoolyAI's",
        [
            wooly("ClusterGPUPolicy", "default", {"defaultVramOvercommitPercent": 20}),
            own("ClusterGPUPolicy", "default", {"maxClientsPerGPU": 5}),
        ],
        SharingPolicy(max_clients_per_gpu=5, vram_percent=120),
        {
            "maxClientsPerGPU": "ClusterGPUPolicy/default",
            "vramOvercommitPercent": "ClusterGPUPolicy.woolyai.dev/default",
            "maxClientsPerNode": BUILTIN_SOURCE,
        },
    ),
    Case(
        "gpusched's cluster policy setting the field hides WoolyAI's",
        [
            wooly("ClusterGPUPolicy", "default", {"defaultVramOvercommitPercent": 20}),
            own("ClusterGPUPolicy", "default", {"vramOvercommitPercent": 150}),
        ],
        SharingPolicy(vram_percent=150),
        {"vramOvercommitPercent": "ClusterGPUPolicy/default"},
    ),
    Case(
        "WoolyAI's cluster policy not named default does not apply",
        [wooly("ClusterGPUPolicy", "other", {"defaultVramOvercommitPercent": 20})],
        SharingPolicy(),
    ),
]


@pytest.mark.parametrize("case", PRECEDENCE, ids=[c.what for c in PRECEDENCE])
def test_precedence(case: Case) -> None:
    rig = Rig()
    rig.manager.on_node("n", {**BIG, "zone": "z"})
    for obj in case.objects:
        rig.add(obj)
    assert rig.cache.get("n", SharingPolicy()) == case.want
    effective = rig.manager.effective("n")
    assert effective is not None
    for wire, source in case.sources.items():
        assert effective.source[wire] == source
    rig.manager.flush()  # reports over both groups: no collision, no status for WoolyAI's
    assert all(not w.kind.startswith("Wooly") for w in rig.manager.flush())


def test_resolver_without_woolyai_is_unchanged() -> None:
    resolver = PolicyResolver((), None)
    assert resolver.cluster_policies == ()
    assert resolver.resolve({}).source["vramOvercommitPercent"] == BUILTIN_SOURCE


def test_classes_of_both_groups() -> None:
    rig = Rig()
    classes = rig.manager.classes
    rig.add(wooly("GPUClass", "a100", {"sharing": {"replicas": 4}}))
    rig.add(wooly("GPUClass", "shared", {}))
    assert classes["a100"].spec.sharing.max_clients_per_gpu == 4
    rig.add(own("GPUClass", "a100", {"products": ["NVIDIA A100-SXM4-40GB"]}))
    assert classes["a100"].spec.products == ("NVIDIA A100-SXM4-40GB",)  # gpusched's wins
    assert [(name, reason) for name, reason, _ in rig.events] == [("a100", REASON_SHADOWED)]
    assert "GPUClass.woolyai.dev/a100 is not used" in rig.events[0][2]
    rig.add(own("GPUClass", "a100", {"products": ["NVIDIA A100-SXM4-40GB"]}), "MODIFIED")
    assert len(rig.events) == 1  # told once while shadowed
    rig.add(own("GPUClass", "a100", {}), "DELETED")
    assert classes["a100"].spec.sharing.max_clients_per_gpu == 4  # WoolyAI's is back
    rig.add(wooly("GPUClass", "a100", {}), "DELETED")
    assert sorted(classes) == ["shared"]
    writes = {f"{w.kind}/{w.name}" for w in rig.manager.flush()}
    assert writes == set()  # no status for WoolyAI's classes


def test_invalid_woolyai_object_is_ignored_with_an_event() -> None:
    rig = Rig()
    rig.manager.on_node("n", BIG)
    rig.add(wooly("WoolyNodePolicy", "bad", {"targetSelector": BIG, "vramOvercommitPercent": -1}))
    assert rig.cache == {}
    assert "WoolyNodePolicy/bad" in rig.manager.invalid()
    ((name, reason, message),) = rig.events
    assert (name, reason) == ("bad", "InvalidSpec")
    assert "vramOvercommitPercent" in message


def test_a_woolyai_policy_that_loses_a_field_is_told() -> None:
    rig = Rig()
    rig.manager.on_node("n", BIG)
    rig.add(wooly("WoolyNodePolicy", "w", {"targetSelector": BIG, "maxClientsPerGPU": 4}))
    rig.add(node_policy("g", BIG, maxClientsPerGPU=2))
    rig.manager.flush()
    ((name, reason, message),) = rig.events
    assert (name, reason) == ("w", "Overridden")
    assert message.startswith("WoolyNodePolicy/w loses maxClientsPerGPU on 1 nodes (n)")
    assert "GPUNodePolicy/g" in message
    assert rig.manager.reports["WoolyNodePolicy/w"].matching_nodes == 1
