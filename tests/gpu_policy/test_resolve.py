"""Policy resolution (precedence field by field) and GPU class matching, table-driven."""

from __future__ import annotations

from typing import Any

import pytest

from gpusched.gpu_policy import resolve
from gpusched.gpu_policy.models import ClusterGPUPolicy, GPUClass, GPUNodePolicy
from gpusched.gpu_policy.resolve import (
    BUILTIN_SOURCE,
    EffectivePolicy,
    Override,
    PolicyResolver,
    apply_class,
    classes_matching,
    match_class,
    policy_reports,
    resolve_policy,
    select_cluster_policy,
)
from gpusched.inventory import GPUDevice, MIGDevice


def node_policy(name: str, match: dict[str, str] | None = None, **fields: Any) -> GPUNodePolicy:
    return GPUNodePolicy.model_validate(
        {
            "metadata": {"name": name},
            "spec": {"nodeSelector": {"matchLabels": match or {}}, **fields},
        }
    )


def cluster(name: str = "default", **fields: Any) -> ClusterGPUPolicy:
    return ClusterGPUPolicy.model_validate({"metadata": {"name": name}, "spec": fields})


NP = "GPUNodePolicy/"
CP = "ClusterGPUPolicy/default"
BIG = {"pool": "big", "zone": "z1"}

# (case, node labels, node policies, cluster policy,
#  (allowSharing, maxClientsPerGPU, maxClientsPerNode, vramOvercommitPercent),
#  sources in FIELDS order, overrides)
RESOLVE_CASES = [
    ("built-in defaults", BIG, [], None, (True, 10, None, 100), [BUILTIN_SOURCE] * 4, []),
    (
        "cluster policy sets some fields",
        BIG,
        [],
        cluster(maxClientsPerGPU=8, vramOvercommitPercent=120),
        (True, 8, None, 120),
        [BUILTIN_SOURCE, CP, BUILTIN_SOURCE, CP],
        [],
    ),
    (
        "a matching node policy beats the cluster policy",
        BIG,
        [node_policy("pool", {"pool": "big"}, maxClientsPerGPU=4)],
        cluster(maxClientsPerGPU=8, maxClientsPerNode=20),
        (True, 4, 20, 100),
        [BUILTIN_SOURCE, NP + "pool", CP, BUILTIN_SOURCE],
        [],
    ),
    (
        "a node policy that does not match is ignored",
        BIG,
        [node_policy("small", {"pool": "small"}, allowSharing=False)],
        None,
        (True, 10, None, 100),
        [BUILTIN_SOURCE] * 4,
        [],
    ),
    (
        "the more specific selector wins a field both set",
        BIG,
        [
            node_policy("a-broad", {}, maxClientsPerGPU=2, vramOvercommitPercent=150),
            node_policy("z-narrow", {"pool": "big", "zone": "z1"}, maxClientsPerGPU=6),
        ],
        None,
        (True, 6, None, 150),
        [BUILTIN_SOURCE, NP + "z-narrow", BUILTIN_SOURCE, NP + "a-broad"],
        [Override("maxClientsPerGPU", NP + "z-narrow", NP + "a-broad")],
    ),
    (
        "equal specificity: the first name wins",
        BIG,
        [
            node_policy("zone", {"zone": "z1"}, allowSharing=True, maxClientsPerNode=5),
            node_policy("pool", {"pool": "big"}, allowSharing=False),
        ],
        cluster(allowSharing=True),
        (False, 10, 5, 100),
        [NP + "pool", BUILTIN_SOURCE, NP + "zone", BUILTIN_SOURCE],
        [Override("allowSharing", NP + "pool", NP + "zone")],
    ),
    (
        "three policies on one field: both losers are reported",
        BIG,
        [
            node_policy("c", {}, vramOvercommitPercent=110),
            node_policy("b", {"pool": "big"}, vramOvercommitPercent=120),
            node_policy("a", {"pool": "big", "zone": "z1"}, vramOvercommitPercent=130),
        ],
        cluster(vramOvercommitPercent=200),
        (True, 10, None, 130),
        [BUILTIN_SOURCE, BUILTIN_SOURCE, BUILTIN_SOURCE, NP + "a"],
        [
            Override("vramOvercommitPercent", NP + "a", NP + "b"),
            Override("vramOvercommitPercent", NP + "a", NP + "c"),
        ],
    ),
    (
        "an expression counts toward specificity like a label",
        {"pool": "big", "gpu": "h100"},
        [
            node_policy("a-label", {"pool": "big"}, maxClientsPerGPU=3),
            GPUNodePolicy.model_validate(
                {
                    "metadata": {"name": "b-expr"},
                    "spec": {
                        "nodeSelector": {
                            "matchLabels": {"pool": "big"},
                            "matchExpressions": [{"key": "gpu", "operator": "Exists"}],
                        },
                        "maxClientsPerGPU": 7,
                    },
                }
            ),
        ],
        None,
        (True, 7, None, 100),
        [BUILTIN_SOURCE, NP + "b-expr", BUILTIN_SOURCE, BUILTIN_SOURCE],
        [Override("maxClientsPerGPU", NP + "b-expr", NP + "a-label")],
    ),
]


@pytest.mark.parametrize(
    ("labels", "node_policies", "cluster_policy", "values", "sources", "overrides"),
    [case[1:] for case in RESOLVE_CASES],
    ids=[case[0] for case in RESOLVE_CASES],
)
def test_resolve(
    labels: dict[str, str],
    node_policies: list[GPUNodePolicy],
    cluster_policy: ClusterGPUPolicy | None,
    values: tuple[bool, int, int | None, int],
    sources: list[str],
    overrides: list[Override],
) -> None:
    effective = resolve_policy(labels, node_policies, cluster_policy)
    assert (
        effective.allow_sharing,
        effective.max_clients_per_gpu,
        effective.max_clients_per_node,
        effective.vram_overcommit_percent,
    ) == values
    assert [effective.source[wire] for _, wire in resolve.FIELDS] == sources
    assert list(effective.overrides) == overrides
    # the order the policies are given in never matters
    again = resolve_policy(labels, list(reversed(node_policies)), cluster_policy)
    assert again == effective


def test_resolver_memoises_by_the_selectors_label_values() -> None:
    resolver = PolicyResolver([node_policy("pool", {"pool": "big"}, maxClientsPerGPU=4)], None)
    first = resolver.resolve({"pool": "big", "kubernetes.io/hostname": "n1"})
    second = resolver.resolve({"pool": "big", "kubernetes.io/hostname": "n2"})
    assert first is second
    assert resolver.resolve({"pool": "small"}).max_clients_per_gpu == 10
    assert first.matched == ("pool",)


SELECT_CASES = [
    ([], None, ()),
    (["default"], "default", ()),
    (["other", "default", "b"], "default", ("b", "other")),
    (["other"], None, ("other",)),
]


@pytest.mark.parametrize(("names", "chosen", "ignored"), SELECT_CASES)
def test_select_cluster_policy(
    names: list[str], chosen: str | None, ignored: tuple[str, ...]
) -> None:
    policy, rest = select_cluster_policy(cluster(n) for n in names)
    assert (policy.name if policy else None) == chosen
    assert rest == ignored


OVERCOMMIT_CASES = [(100, 81559, 81559), (150, 81559, 122338), (130, 40960, 53248), (101, 99, 99)]


@pytest.mark.parametrize(("percent", "physical", "capacity"), OVERCOMMIT_CASES)
def test_vram_capacity_rounds_down(percent: int, physical: int, capacity: int) -> None:
    assert EffectivePolicy(vram_overcommit_percent=percent).vram_capacity_mib(physical) == capacity


def test_policy_reports_say_who_won_where() -> None:
    resolver = PolicyResolver(
        [
            node_policy("broad", {}, maxClientsPerGPU=2, vramOvercommitPercent=150),
            node_policy("big", {"pool": "big"}, maxClientsPerGPU=6),
            node_policy("unused", {"pool": "none"}, maxClientsPerGPU=1),
        ],
        cluster(maxClientsPerGPU=3, allowSharing=False),
    )
    nodes = {f"n{i}": {"pool": "big" if i < 4 else "small"} for i in range(6)}
    reports = policy_reports(resolver, nodes)
    broad, big, unused = reports[NP + "broad"], reports[NP + "big"], reports[NP + "unused"]
    assert (broad.matching_nodes, broad.applied_nodes, broad.overridden) == (6, 6, True)
    assert broad.overridden_by == {NP + "big": {"maxClientsPerGPU": ["n0", "n1", "n2", "n3"]}}
    assert (big.matching_nodes, big.applied_nodes, big.overridden) == (4, 4, False)
    assert (unused.matching_nodes, unused.applied, unused.overridden) == (0, False, False)
    default = reports[CP]
    assert (default.matching_nodes, default.applied_nodes) == (6, 6)  # allowSharing everywhere
    message = broad.message(sample=2)
    assert message.startswith(
        "GPUNodePolicy/broad loses maxClientsPerGPU on 4 nodes (n0, n1 and 2 more) to "
        "GPUNodePolicy/big: "
    )
    assert "most specific nodeSelector" in message
    assert "remove the field" in message
    assert "decides every field" in big.message()


# --- Classes --------------------------------------------------------------------------------

H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-40GB"


def gpu(index: int, product: str = H100, mib: int = 81559, mig: tuple[str, ...] = ()) -> GPUDevice:
    devices = tuple(
        MIGDevice(
            uuid=f"MIG-{index:08x}-0000-4000-8000-{i:012x}",
            profile=profile,
            memory_mib=int(profile.split(".")[1].removesuffix("gb")) * 1000 - 16,
            gpu_instance_id=i,
            compute_instance_id=0,
            placement_start=i,
            placement_size=1,
        )
        for i, profile in enumerate(mig)
    )
    return GPUDevice(
        index=index,
        uuid=f"GPU-{index:08x}-0000-4000-8000-000000000000",
        product=product,
        memory_mib=mib,
        pci_bus_id=f"00000000:{index + 16:02x}:00.0",
        mig_enabled=bool(mig),
        mig_devices=devices,
    )


def gpu_class(name: str = "c", **spec: Any) -> GPUClass:
    return GPUClass.model_validate({"metadata": {"name": name}, "spec": spec})


H100_LABELS = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
MIXED_NODE = [gpu(0), gpu(1, mig=("2g.20gb", "1g.10gb")), gpu(2, mig=("1g.10gb",))]

# (case, class spec, node labels, GPUs, matched GPU indices, MIG device count, reason fragment)
CLASS_CASES = [
    ("any GPU", {}, {}, [gpu(0), gpu(1)], (0, 1), 0, ""),
    (
        "node selector matches",
        {"nodeSelector": {"matchLabels": H100_LABELS}},
        H100_LABELS,
        [gpu(0)],
        (0,),
        0,
        "",
    ),
    (
        "node selector misses",
        {"nodeSelector": {"matchLabels": H100_LABELS}},
        {},
        [gpu(0)],
        (),
        0,
        "node label nvidia.com/gpu.product is not set, the class's nodeSelector needs "
        "'NVIDIA-H100-80GB-HBM3'",
    ),
    (
        "expression misses",
        {"nodeSelector": {"matchExpressions": [{"key": "z", "operator": "In", "values": ["a"]}]}},
        {"z": "b"},
        [gpu(0)],
        (),
        0,
        "node label z is 'b', the class needs In ['a']",
    ),
    (
        "product listed",
        {"products": [A100, H100]},
        {},
        [gpu(0), gpu(1, A100, 40960)],
        (0, 1),
        0,
        "",
    ),
    (
        "product not listed",
        {"products": [A100]},
        {},
        [gpu(0)],
        (),
        0,
        f"the node's GPUs are {H100}; the class wants {A100}",
    ),
    ("min VRAM met", {"minVramMiB": 80000}, {}, [gpu(0), gpu(1, A100, 40960)], (0,), 0, ""),
    (
        "min VRAM not met",
        {"minVramMiB": 100000},
        {},
        [gpu(0)],
        (),
        0,
        "the node's largest GPU has 81559 MiB; the class needs minVramMiB 100000",
    ),
    ("whole-GPU class skips MIG GPUs", {}, {}, MIXED_NODE, (0,), 0, ""),
    (
        "whole-GPU class on an all-MIG node",
        {},
        {},
        MIXED_NODE[1:],
        (),
        0,
        "every GPU of the node has MIG on; the class means whole GPUs",
    ),
    ("MIG class", {"migProfiles": ["1g.10gb"]}, {}, MIXED_NODE, (1, 2), 2, ""),
    (
        "MIG class, two profiles",
        {"migProfiles": ["2g.20gb", "1g.10gb"]},
        {},
        MIXED_NODE,
        (1, 2),
        3,
        "",
    ),
    (
        "MIG class, min VRAM on the MIG device",
        {"migProfiles": ["2g.20gb", "1g.10gb"], "minVramMiB": 15000},
        {},
        MIXED_NODE,
        (1,),
        1,
        "",
    ),
    (
        "MIG profile the node lacks",
        {"migProfiles": ["3g.40gb"]},
        {},
        MIXED_NODE,
        (),
        0,
        "the node's GPUs offer 1g.10gb, 2g.20gb; the class wants 3g.40gb",
    ),
    (
        "MIG class on a node without MIG",
        {"migProfiles": ["1g.18gb"]},
        {},
        [gpu(0)],
        (),
        0,
        "the node's GPUs offer no MIG devices; the class wants 1g.18gb",
    ),
    (
        "MIG devices too small",
        {"migProfiles": ["1g.10gb"], "minVramMiB": 20000},
        {},
        MIXED_NODE,
        (),
        0,
        "largest MIG device of the class's profiles has 9984 MiB; the class needs minVramMiB",
    ),
    ("no GPUs", {}, {}, [], (), 0, "the node has no GPUs in its inventory"),
]


@pytest.mark.parametrize(
    ("spec", "labels", "gpus", "indices", "mig_count", "reason"),
    [case[1:] for case in CLASS_CASES],
    ids=[case[0] for case in CLASS_CASES],
)
def test_match_class(
    spec: dict[str, Any],
    labels: dict[str, str],
    gpus: list[GPUDevice],
    indices: tuple[int, ...],
    mig_count: int,
    reason: str,
) -> None:
    match = match_class(gpu_class(**spec), labels, gpus)
    assert match.gpu_indices == indices
    assert match.matched is bool(indices)
    assert len(match.mig_devices) == mig_count
    if reason:
        assert reason in match.reason
    else:
        assert match.reason == ""


def test_classes_matching_lists_the_classes_a_node_serves_by_name() -> None:
    classes = [
        gpu_class("z-mig", migProfiles=["1g.10gb"]),
        gpu_class("a-whole"),
        gpu_class("big", minVramMiB=100000),
    ]
    assert [m.name for m in classes_matching({}, MIXED_NODE, classes)] == ["a-whole", "z-mig"]


APPLY_CLASS_CASES = [
    # (class sharing, node's (allow, per GPU), result (allow, per GPU), sources changed)
    ({}, (True, 10), (True, 10), {}),
    ({"maxClientsPerGPU": 4}, (True, 10), (True, 4), {"maxClientsPerGPU": "GPUClass/c"}),
    ({"maxClientsPerGPU": 12}, (True, 10), (True, 10), {}),
    ({"mode": "exclusive"}, (True, 10), (False, 10), {"allowSharing": "GPUClass/c"}),
    ({"mode": "exclusive"}, (False, 10), (False, 10), {}),
]


@pytest.mark.parametrize(("sharing", "node", "result", "changed"), APPLY_CLASS_CASES)
def test_apply_class(
    sharing: dict[str, Any],
    node: tuple[bool, int],
    result: tuple[bool, int],
    changed: dict[str, str],
) -> None:
    base = EffectivePolicy(
        allow_sharing=node[0], max_clients_per_gpu=node[1], source={"allowSharing": "x"}
    )
    narrowed = apply_class(base, gpu_class(sharing=sharing))
    assert (narrowed.allow_sharing, narrowed.max_clients_per_gpu) == result
    assert dict(narrowed.source) == {"allowSharing": "x", **changed}


def test_all_is_complete() -> None:
    exported = set(resolve.__all__)
    for name in exported:
        assert hasattr(resolve, name), name
    public_defs = {
        name
        for name, value in vars(resolve).items()
        if not name.startswith("_") and getattr(value, "__module__", None) == resolve.__name__
    }
    assert public_defs <= exported
