"""GPUClass, GPUNodePolicy and ClusterGPUPolicy: what parses, and what each rejection says."""

from __future__ import annotations

from typing import Any

import pytest

from gpusched.gpu_policy import models
from gpusched.gpu_policy.models import (
    ClusterGPUPolicy,
    GPUClass,
    GPUNodePolicy,
    LabelSelector,
    PolicyError,
    parse_policy_object,
)


def obj(kind: str, spec: dict[str, Any] | None, name: str = "p") -> dict[str, Any]:
    out: dict[str, Any] = {
        "apiVersion": "gpusched.io/v1alpha1",
        "kind": kind,
        "metadata": {"name": name, "generation": 2, "uid": "u-1", "resourceVersion": "7"},
    }
    if spec is not None:
        out["spec"] = spec
    return out


def test_a_woolyai_style_class_parses() -> None:
    cls = parse_policy_object(
        obj(
            "GPUClass",
            {
                "description": "Shared A100 GPUs",
                "nodeSelector": {"matchLabels": {"nvidia.com/gpu.product": "A100-SXM4-40GB"}},
                "minVramMiB": 40000,
                "sharing": {"mode": "shared", "maxClientsPerGPU": 4},
                "price": 2,
            },
            name="a100-shared",
        )
    )
    assert isinstance(cls, GPUClass)
    assert cls.name == "a100-shared"
    assert cls.spec.min_vram_mib == 40000
    assert cls.spec.sharing.max_clients_per_gpu == 4
    assert cls.spec.price == 2.0
    assert cls.spec.mig_profiles == ()
    assert cls.metadata.generation == 2


def test_defaults_leave_every_limit_unset() -> None:
    """Unset means "inherit": the built-in defaults live in resolve, not in the objects."""
    cluster = parse_policy_object(obj("ClusterGPUPolicy", None, name="default"))
    assert isinstance(cluster, ClusterGPUPolicy)
    spec = cluster.spec
    assert (spec.allow_sharing, spec.max_clients_per_gpu) == (None, None)
    assert (spec.max_clients_per_node, spec.vram_overcommit_percent) == (None, None)
    cls = parse_policy_object(obj("GPUClass", None))
    assert isinstance(cls, GPUClass)
    assert cls.spec.sharing.mode == "shared"
    assert cls.spec.node_selector == LabelSelector()


def test_wire_names_round_trip() -> None:
    policy = parse_policy_object(
        obj(
            "GPUNodePolicy",
            {
                "nodeSelector": {
                    "matchLabels": {"pool": "a"},
                    "matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}],
                },
                "allowSharing": False,
                "maxClientsPerGPU": 4,
                "maxClientsPerNode": 16,
                "vramOvercommitPercent": 130,
            },
        )
    )
    assert isinstance(policy, GPUNodePolicy)
    dumped = policy.model_dump(mode="json", exclude_none=True)
    assert dumped["spec"]["maxClientsPerGPU"] == 4
    assert dumped["spec"]["vramOvercommitPercent"] == 130
    assert GPUNodePolicy.model_validate(dumped) == policy


REJECTED = [
    # (kind, spec, expected fragments of the one problem)
    (
        "GPUNodePolicy",
        {"nodeSelector": {}, "vramOvercommitPercent": 30},
        ["spec.vramOvercommitPercent", "100 for none", "write 130"],
    ),
    (
        "GPUNodePolicy",
        {"nodeSelector": {}, "vramOvercommitPercent": 5000},
        ["spec.vramOvercommitPercent", "write at most 1000"],
    ),
    (
        "ClusterGPUPolicy",
        {"maxClientsPerGPU": 0},
        ["spec.maxClientsPerGPU", "greater than or equal to 1", "(got 0)"],
    ),
    (
        "ClusterGPUPolicy",
        {"maxClientsPerGPU": 2.5},
        ["spec.maxClientsPerGPU", "valid integer", "(got 2.5)"],
    ),
    ("ClusterGPUPolicy", {"maxClientsPerNode": -1}, ["spec.maxClientsPerNode", "(got -1)"]),
    ("ClusterGPUPolicy", {"maxClientPerGPU": 4}, ["spec.maxClientPerGPU", "not permitted"]),
    ("GPUNodePolicy", {"maxClientsPerGPU": 4}, ["spec.nodeSelector", "Field required"]),
    (
        "GPUNodePolicy",
        {"nodeSelector": {"matchExpressions": [{"key": "pool", "operator": "In"}]}},
        ["spec.nodeSelector.matchExpressions[0].values", "needs at least one value", "use Exists"],
    ),
    (
        "GPUNodePolicy",
        {
            "nodeSelector": {
                "matchExpressions": [{"key": "pool", "operator": "Exists", "values": ["a"]}]
            }
        },
        ["takes no values; remove them"],
    ),
    (
        "GPUNodePolicy",
        {"nodeSelector": {"matchExpressions": [{"key": "pool", "operator": "Gt"}]}},
        ["operator", "'In', 'NotIn', 'Exists' or 'DoesNotExist'"],
    ),
    (
        "GPUNodePolicy",
        {"nodeSelector": {"matchLabels": {"nvidia.com/gpu.product": "NVIDIA H100 80GB HBM3"}}},
        ["spec.nodeSelector.matchLabels", "not a label value", "NVIDIA-H100-80GB-HBM3"],
    ),
    (
        "GPUNodePolicy",
        {"nodeSelector": {"matchLabels": {"bad key!": "x"}}},
        ["spec.nodeSelector.matchLabels", "not a label key"],
    ),
    (
        "GPUClass",
        {"sharing": {"mode": "exclusive", "maxClientsPerGPU": 2}},
        ["spec.sharing", "remove maxClientsPerGPU or set mode: shared"],
    ),
    ("GPUClass", {"sharing": {"mode": "Shared"}}, ["spec.sharing.mode", "'shared' or 'exclusive'"]),
    ("GPUClass", {"minVramMiB": "20Gi"}, ["spec.minVramMiB", "valid integer", "(got '20Gi')"]),
    ("GPUClass", {"migProfiles": ["2g.20gb", "2g.20gb"]}, ["spec.migProfiles", "list each once"]),
    (
        "GPUClass",
        {"migProfiles": ["2g20gb"]},
        ["spec.migProfiles[0]", "not a MIG profile", "e.g. 1g.10gb"],
    ),
    ("GPUClass", {"price": -1}, ["spec.price", "(got -1)"]),
]


@pytest.mark.parametrize(("kind", "spec", "fragments"), REJECTED)
def test_rejections_name_the_field_and_the_fix(
    kind: str, spec: dict[str, Any], fragments: list[str]
) -> None:
    with pytest.raises(PolicyError) as info:
        parse_policy_object(obj(kind, spec, name="bad"))
    assert info.value.ref == f"{kind}/bad"
    assert len(info.value.problems) == 1, info.value.problems
    (problem,) = info.value.problems
    for fragment in fragments:
        assert fragment in problem, problem


def test_unknown_kind_is_named() -> None:
    with pytest.raises(PolicyError, match="'WoolyNodePolicy' is not a policy kind; use one of"):
        parse_policy_object(obj("WoolyNodePolicy", {}))


SELECTOR_CASES = [
    # (selector, labels, matches, specificity)
    ({}, {}, True, 0),
    ({"matchLabels": {"pool": "a"}}, {"pool": "a", "x": "y"}, True, 1),
    ({"matchLabels": {"pool": "a"}}, {"pool": "b"}, False, 1),
    ({"matchLabels": {"pool": "a"}}, {}, False, 1),
    (
        {"matchExpressions": [{"key": "z", "operator": "In", "values": ["1", "2"]}]},
        {"z": "2"},
        True,
        1,
    ),
    ({"matchExpressions": [{"key": "z", "operator": "NotIn", "values": ["1"]}]}, {}, True, 1),
    (
        {"matchExpressions": [{"key": "z", "operator": "NotIn", "values": ["1"]}]},
        {"z": "1"},
        False,
        1,
    ),
    ({"matchExpressions": [{"key": "z", "operator": "Exists"}]}, {"z": ""}, True, 1),
    ({"matchExpressions": [{"key": "z", "operator": "DoesNotExist"}]}, {"z": ""}, False, 1),
    (
        {
            "matchLabels": {"pool": "a"},
            "matchExpressions": [{"key": "z", "operator": "Exists"}],
        },
        {"pool": "a"},
        False,
        2,
    ),
]


@pytest.mark.parametrize(("selector", "labels", "matches", "specificity"), SELECTOR_CASES)
def test_label_selector(
    selector: dict[str, Any], labels: dict[str, str], matches: bool, specificity: int
) -> None:
    parsed = LabelSelector.model_validate(selector)
    assert parsed.matches(labels) is matches
    assert parsed.specificity == specificity


def test_all_is_complete() -> None:
    exported = set(models.__all__)
    for name in exported:
        assert hasattr(models, name), name
    public_defs = {
        name
        for name, value in vars(models).items()
        if not name.startswith("_") and getattr(value, "__module__", None) == models.__name__
    }
    assert public_defs <= exported
