"""MIG profiles per product (NVIDIA's "Supported MIG Profiles" tables), layout validity,
inventory validation against the tables, and the H200 fleet that uses H200's own names."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest

import gpusched.mig_profiles as mig
from gpusched.inventory import (
    GPUNodeInventory,
    InventoryError,
    inventory_from_object,
    inventory_to_object,
    node_extended_resources,
    node_labels,
)
from gpusched.mig_profiles import (
    MIG_PRODUCTS,
    gpu_instance_profile,
    layout_problems,
    place,
    product_table,
    products_offering,
    profile,
    profiles_for,
)
from gpusched.sim.fleet import build_fleet, load_cluster_spec

NOW = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
SEVEN = (0, 1, 2, 3, 4, 5, 6)

# --- Each product's table ------------------------------------------------------------------

# (name, compute slices, memory slices, instances, starts) per NVIDIA's table for the family.
_H100_80 = [
    ("1g.10gb", 1, 1, 7, SEVEN),
    ("1g.10gb+me", 1, 1, 1, SEVEN),
    ("1g.20gb", 1, 2, 4, (0, 2, 4, 6)),
    ("2g.20gb", 2, 2, 3, (0, 2, 4)),
    ("3g.40gb", 3, 4, 2, (0, 4)),
    ("4g.40gb", 4, 4, 1, (0,)),
    ("7g.80gb", 7, 8, 1, (0,)),
]
_H200 = [
    ("1g.18gb", 1, 1, 7, SEVEN),
    ("1g.18gb+me", 1, 1, 1, SEVEN),
    ("1g.35gb", 1, 2, 4, (0, 2, 4, 6)),
    ("2g.35gb", 2, 2, 3, (0, 2, 4)),
    ("3g.71gb", 3, 4, 2, (0, 4)),
    ("4g.71gb", 4, 4, 1, (0,)),
    ("7g.141gb", 7, 8, 1, (0,)),
]
_A100_40 = [
    ("1g.5gb", 1, 1, 7, SEVEN),
    ("1g.5gb+me", 1, 1, 1, SEVEN),
    ("1g.10gb", 1, 2, 4, (0, 2, 4, 6)),
    ("2g.10gb", 2, 2, 3, (0, 2, 4)),
    ("3g.20gb", 3, 4, 2, (0, 4)),
    ("4g.20gb", 4, 4, 1, (0,)),
    ("7g.40gb", 7, 8, 1, (0,)),
]
_A100_80 = [
    ("1g.10gb", 1, 1, 7, SEVEN),
    ("1g.10gb+me", 1, 1, 1, SEVEN),
    ("1g.20gb", 1, 2, 4, (0, 2, 4, 6)),
    ("2g.20gb", 2, 2, 3, (0, 2, 4)),
    ("3g.40gb", 3, 4, 2, (0, 4)),
    ("4g.40gb", 4, 4, 1, (0,)),
    ("7g.80gb", 7, 8, 1, (0,)),
]
_H100_94 = [
    ("1g.12gb", 1, 1, 7, SEVEN),
    ("1g.12gb+me", 1, 1, 1, SEVEN),
    ("1g.24gb", 1, 2, 4, (0, 2, 4, 6)),
    ("2g.24gb", 2, 2, 3, (0, 2, 4)),
    ("3g.47gb", 3, 4, 2, (0, 4)),
    ("4g.47gb", 4, 4, 1, (0,)),
    ("7g.94gb", 7, 8, 1, (0,)),
]
_H100_96 = [
    ("1g.12gb", 1, 1, 7, SEVEN),
    ("1g.12gb+me", 1, 1, 1, SEVEN),
    ("1g.24gb", 1, 2, 4, (0, 2, 4, 6)),
    ("2g.24gb", 2, 2, 3, (0, 2, 4)),
    ("3g.48gb", 3, 4, 2, (0, 4)),
    ("4g.48gb", 4, 4, 1, (0,)),
    ("7g.96gb", 7, 8, 1, (0,)),
]
_A30 = [
    ("1g.6gb", 1, 1, 4, (0, 1, 2, 3)),
    ("1g.6gb+me", 1, 1, 1, (0, 1, 2, 3)),
    ("2g.12gb", 2, 2, 2, (0, 2)),
    ("2g.12gb+me", 2, 2, 1, (0, 2)),
    ("4g.24gb", 4, 4, 1, (0,)),
]
_B200 = [
    ("1g.23gb", 1, 1, 7, SEVEN),
    ("1g.23gb+me", 1, 1, 1, SEVEN),
    ("1g.45gb", 1, 2, 4, (0, 2, 4, 6)),
    ("2g.45gb", 2, 2, 3, (0, 2, 4)),
    ("3g.90gb", 3, 4, 2, (0, 4)),
    ("4g.90gb", 4, 4, 1, (0,)),
    ("7g.180gb", 7, 8, 1, (0,)),
]


@pytest.mark.parametrize(
    ("product", "expected"),
    [
        ("NVIDIA H100 80GB HBM3", _H100_80),
        ("NVIDIA H100 PCIe", _H100_80),
        ("NVIDIA H100 NVL", _H100_94),
        ("NVIDIA GH200 480GB", _H100_96),
        ("NVIDIA H200", _H200),
        ("NVIDIA H200 NVL", _H200),
        ("NVIDIA A100-SXM4-40GB", _A100_40),
        ("NVIDIA A100-PCIE-40GB", _A100_40),
        ("NVIDIA A100-SXM4-80GB", _A100_80),
        ("NVIDIA A100 80GB PCIe", _A100_80),
        ("NVIDIA A30", _A30),
        ("NVIDIA B200", _B200),
    ],
)
def test_product_table(product: str, expected: list[tuple[Any, ...]]) -> None:
    table = profiles_for(product)
    got = [
        (p.name, p.compute_slices, p.memory_slices, p.max_instances, p.starts)
        for p in table.values()
    ]
    assert got == expected


def test_a100_80gb_names_are_the_80gb_table() -> None:
    assert list(profiles_for("NVIDIA A100-SXM4-80GB")) == [
        "1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("product", "name", "memory_mib"),
    [
        ("NVIDIA H100 80GB HBM3", "1g.10gb", 9984),  # -lgip 9.75 GiB
        ("NVIDIA H100 PCIe", "2g.20gb", 20096),  # 19.62 GiB
        ("NVIDIA H100 PCIe", "7g.80gb", 81152),  # 79.25 GiB
        ("NVIDIA A100-SXM4-80GB", "1g.10gb", 9728),  # 9.50 GiB
        ("NVIDIA A100-SXM4-40GB", "1g.5gb", 4864),  # 4.75 GiB
        ("NVIDIA H200", "1g.18gb", 16384),  # 16.00 GiB
        ("NVIDIA H200", "2g.35gb", 33280),  # 32.50 GiB
        ("NVIDIA H200", "7g.141gb", 143360),  # 140.00 GiB
        ("NVIDIA A30", "4g.24gb", 23344),
    ],
)
def test_memory_as_nvml_reports_it(product: str, name: str, memory_mib: int) -> None:
    found = profile(product, name)
    assert found is not None
    assert found.memory_mib == memory_mib


def test_every_table_is_internally_consistent() -> None:
    pattern = re.compile(r"^(\d+)g\.(\d+)gb(\+me)?$")
    for product, table in MIG_PRODUCTS.items():
        assert product in table.names
        by_slices: dict[int, int] = {}
        for p in table.profiles.values():
            match = pattern.match(p.name)
            assert match, (product, p.name)
            assert int(match.group(1)) == p.compute_slices <= table.compute_slices
            # The name's GB is the memory rounded as NVIDIA rounds it: within 25% of the MiB.
            assert 0.75 < p.memory_mib / 1024 / int(match.group(2)) <= 1.0, (product, p.name)
            assert p.size == p.memory_slices
            assert 1 <= p.max_instances <= len(p.starts)
            for start in p.starts:
                assert start % p.memory_slices == 0
                assert start + p.memory_slices <= table.memory_slices
            assert by_slices.setdefault(p.memory_slices, p.memory_mib) == p.memory_mib
        sizes = sorted(by_slices)
        assert [by_slices[s] for s in sizes] == sorted(by_slices.values())


# --- Lookups --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("product", "name", "found"),
    [
        ("NVIDIA H200", "2g.35gb", "2g.35gb"),
        ("NVIDIA H200", "2g.20gb", None),  # an H100/A100 80GB name: never assumed
        ("NVIDIA H100 80GB HBM3", "1g.18gb", None),
        ("NVIDIA H100 80GB HBM3", "1c.3g.40gb", "3g.40gb"),  # compute instance in a 3g GI
        ("NVIDIA H100 80GB HBM3", "1g.10gb+me", "1g.10gb+me"),
        ("NVIDIA A40", "1g.10gb", None),  # no MIG
        ("no such GPU", "1g.10gb", None),
    ],
)
def test_profile_lookup(product: str, name: str, found: str | None) -> None:
    got = profile(product, name)
    assert (got.name if got else None) == found


def test_products_without_mig_have_no_profiles() -> None:
    assert dict(profiles_for("NVIDIA A40")) == {}
    assert product_table("Tesla V100-SXM2-32GB") is None
    assert product_table("NVIDIA H200") is product_table("NVIDIA H200 NVL")


@pytest.mark.parametrize(
    ("name", "products"),
    [
        ("1g.18gb", ("NVIDIA H200", "NVIDIA H200 NVL")),
        ("2g.35gb", ("NVIDIA H200", "NVIDIA H200 NVL")),
        (
            "2g.20gb",
            (
                "NVIDIA A100-SXM4-80GB",
                "NVIDIA A100 80GB PCIe",
                "NVIDIA H100 80GB HBM3",
                "NVIDIA H100 PCIe",
            ),
        ),
        # 1g.10gb is the 1-slice profile of 80 GB parts and the 2-slice 1g of A100 40GB.
        (
            "1g.10gb",
            (
                "NVIDIA A100-SXM4-40GB",
                "NVIDIA A100-PCIE-40GB",
                "NVIDIA A100-SXM4-80GB",
                "NVIDIA A100 80GB PCIe",
                "NVIDIA H100 80GB HBM3",
                "NVIDIA H100 PCIe",
            ),
        ),
        ("1c.2g.12gb", ("NVIDIA A30",)),
        ("9g.1tb", ()),
    ],
)
def test_products_offering(name: str, products: tuple[str, ...]) -> None:
    assert products_offering(name) == products


@pytest.mark.parametrize(
    ("name", "gi"),
    [("1c.3g.40gb", "3g.40gb"), ("2c.7g.80gb", "7g.80gb"), ("1g.10gb+me", "1g.10gb+me")],
)
def test_gpu_instance_profile(name: str, gi: str) -> None:
    assert gpu_instance_profile(name) == gi


# --- Layout validity ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("product", "instances"),
    [
        ("NVIDIA H200", [("2g.35gb", 0), ("2g.35gb", 2), ("2g.35gb", 4), ("1g.18gb", 6)]),
        ("NVIDIA H200", [("1g.18gb", s) for s in SEVEN]),
        ("NVIDIA H200", [("3g.71gb", 4), ("4g.71gb", 0)]),
        ("NVIDIA H200", [("7g.141gb", 0)]),
        ("NVIDIA H200", [("1g.35gb", 6), ("3g.71gb", 0), ("1g.18gb", 4), ("1g.18gb+me", 5)]),
        ("NVIDIA H100 PCIe", [("2g.20gb", 0), ("2g.20gb", 2), ("2g.20gb", 4), ("1g.10gb", 6)]),
        ("NVIDIA H100 PCIe", [("1c.3g.40gb", 0), ("3g.40gb", 4)]),
        ("NVIDIA A30", [("2g.12gb", 0), ("1g.6gb", 2), ("1g.6gb+me", 3)]),
        ("NVIDIA A30", []),
    ],
)
def test_valid_layouts(product: str, instances: list[tuple[str, int]]) -> None:
    assert layout_problems(product, instances) == []


@pytest.mark.parametrize(
    ("product", "instances", "problem"),
    [
        (
            "NVIDIA H200",
            [("2g.20gb", 0)],
            "[0]: NVIDIA H200 has no MIG profile '2g.20gb' (2g.20gb is a profile of "
            "NVIDIA A100-SXM4-80GB, NVIDIA A100 80GB PCIe, NVIDIA H100 80GB HBM3, "
            "NVIDIA H100 PCIe); its profiles: 1g.18gb, 1g.18gb+me, 1g.35gb, 2g.35gb, "
            "3g.71gb, 4g.71gb, 7g.141gb",
        ),
        (
            "NVIDIA H200",
            [("2g.35gb", 6)],
            "[0]: 2g.35gb cannot start at memory slice 6 on NVIDIA H200; it starts at 0, 2, 4",
        ),
        ("NVIDIA H200", [("1g.18gb", 7)], "1g.18gb cannot start at memory slice 7"),
        (
            "NVIDIA H200",
            [("3g.71gb", 0), ("2g.35gb", 2)],
            "3g.71gb at 0 and 2g.35gb at 2 share memory slices",
        ),
        (
            "NVIDIA H100 80GB HBM3",
            [("1g.10gb+me", 0), ("1g.10gb+me", 1)],
            "2 x 1g.10gb+me: NVIDIA H100 80GB HBM3 allows at most 1",
        ),
        (
            "NVIDIA H100 80GB HBM3",
            [("3g.40gb", 4), ("1g.10gb", 6)],
            "3g.40gb at 4 and 1g.10gb at 6 share memory slices",
        ),
        (
            "NVIDIA H100 80GB HBM3",
            [("4g.40gb", 0), ("1g.20gb", 4), ("1g.20gb", 6)],
            "",  # 6 compute slices, 8 memory slices: valid
        ),
        (
            "NVIDIA A30",
            [("4g.24gb", 0), ("1g.6gb", 1)],
            "4g.24gb at 0 and 1g.6gb at 1 share memory slices",
        ),
        ("NVIDIA A40", [("1g.10gb", 0)], "no MIG profile table for product 'NVIDIA A40'"),
    ],
)
def test_layout_problems(product: str, instances: list[tuple[str, int]], problem: str) -> None:
    problems = layout_problems(product, instances)
    if not problem:
        assert problems == []
    else:
        assert any(problem in p for p in problems), problems


def test_compute_slices_are_counted() -> None:
    # 4g + 3 x 1g uses all 7 compute slices of an 8-slice GPU (1g never starts at slice 7);
    # on an A30 two 2g and a 1g would need 5 of its 4.
    problems = layout_problems(
        "NVIDIA H100 80GB HBM3",
        [("4g.40gb", 0), ("1g.10gb", 4), ("1g.10gb", 5), ("1g.10gb", 6)],
    )
    assert problems == []
    over = layout_problems("NVIDIA A30", [("2g.12gb", 0), ("2g.12gb+me", 2), ("1g.6gb", 3)])
    assert "the instances need 5 compute slices; NVIDIA A30 has 4" in over


# --- Placing a layout -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("product", "layout", "starts"),
    [
        ("NVIDIA H200", ["2g.35gb", "2g.35gb", "2g.35gb", "1g.18gb"], [0, 2, 4, 6]),
        ("NVIDIA H200", ["1g.18gb"] * 7, list(SEVEN)),
        ("NVIDIA H200", ["1g.18gb", "3g.71gb", "2g.35gb"], [6, 0, 4]),
        ("NVIDIA H200", ["1g.35gb"] * 4, [0, 2, 4, 6]),
        ("NVIDIA A30", ["1g.6gb", "2g.12gb", "1g.6gb"], [2, 0, 3]),
        # 3g at 0 leaves one 1g start (6): backtracking puts the 3g at 4 instead.
        ("NVIDIA A100-SXM4-40GB", ["3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"], [4, 0, 2, 3]),
    ],
)
def test_place(product: str, layout: list[str], starts: list[int]) -> None:
    placed = place(product, layout)
    assert [p.profile.name for p in placed] == layout
    assert [p.start for p in placed] == starts
    assert layout_problems(product, [(p.profile.name, p.start) for p in placed]) == []


@pytest.mark.parametrize(
    ("product", "layout", "message"),
    [
        ("NVIDIA H200", ["1g.10gb"], "NVIDIA H200 has no MIG profile '1g.10gb'"),
        ("NVIDIA H200", ["4g.71gb", "4g.71gb"], "more than the GPU's 7 compute slices"),
        ("NVIDIA H200", ["1g.35gb"] * 5, "does not fit on one NVIDIA H200"),
        ("NVIDIA H200", ["1g.18gb+me"] * 2, "NVIDIA H200 allows at most 1 x 1g.18gb+me"),
        ("NVIDIA A30", ["2g.12gb", "2g.12gb", "1g.6gb"], "more than the GPU's 4 compute"),
        ("NVIDIA L40S", ["1g.10gb"], "no MIG profile table for product 'NVIDIA L40S'"),
    ],
)
def test_place_rejects(product: str, layout: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        place(product, layout)


# --- Inventory validation uses the tables --------------------------------------------------


def _mig(n: int, name: str, memory: int, gi: int, start: int, size: int) -> dict[str, Any]:
    return {
        "uuid": f"MIG-{n:08x}-0000-4000-8000-{n:012x}",
        "profile": name,
        "memoryMiB": memory,
        "gpuInstanceId": gi,
        "computeInstanceId": 0,
        "placementStart": start,
        "placementSize": size,
    }


def _object(product: str, devices: list[dict[str, Any]]) -> dict[str, Any]:
    spec = {
        "nodeName": "mig-node",
        "source": "nvml",
        "driverVersion": "550.127.05",
        "cudaDriverVersion": "12.4",
        "gpus": [
            {
                "index": 0,
                "uuid": "GPU-00000000-0000-4000-8000-000000000000",
                "product": product,
                "memoryMiB": 143771,
                "pciBusId": "00000000:18:00.0",
                "migEnabled": True,
                "migDevices": devices,
            }
        ],
    }
    return {
        "apiVersion": "gpusched.io/v1alpha1",
        "kind": "GPUNodeInventory",
        "metadata": {"name": "mig-node"},
        "spec": spec,
    }


_FIX = "the node agent must report the profile names NVML gives (nvidia-smi mig -lgi)"


@pytest.mark.parametrize(
    ("product", "devices", "problem"),
    [
        (
            "NVIDIA H200",
            [_mig(1, "2g.35gb", 33280, 3, 0, 2), _mig(2, "1g.10gb", 9984, 13, 6, 1)],
            "spec.gpus[0].migDevices[1].profile: NVIDIA H200 (H200 141GB) has no MIG profile "
            "'1g.10gb'; its profiles are 1g.18gb, 1g.18gb+me, 1g.35gb, 2g.35gb, 3g.71gb, "
            f"4g.71gb, 7g.141gb; {_FIX}",
        ),
        (
            "NVIDIA H100 80GB HBM3",
            [_mig(1, "2g.20gb", 20096, 3, 6, 2)],
            "spec.gpus[0].migDevices[0]: on NVIDIA H100 80GB HBM3 a 2g.20gb spans 2 memory "
            f"slices starting at 0, 2, 4; got 6+2; {_FIX}",
        ),
        (
            "NVIDIA H100 80GB HBM3",
            [_mig(1, "3g.40gb", 40448, 1, 0, 2)],
            "spec.gpus[0].migDevices[0]: on NVIDIA H100 80GB HBM3 a 3g.40gb spans 4 memory slices",
        ),
        (
            "NVIDIA H200",
            [_mig(1, "1g.18gb+me", 16384, 7, 0, 1), _mig(2, "1g.18gb+me", 16384, 8, 1, 1)],
            "spec.gpus[0].migDevices: 2 x 1g.18gb+me: NVIDIA H200 allows at most 1",
        ),
    ],
)
def test_inventory_rejects_profiles_the_product_lacks(
    product: str, devices: list[dict[str, Any]], problem: str
) -> None:
    with pytest.raises(InventoryError) as caught:
        inventory_from_object(_object(product, devices))
    assert any(p.startswith(problem) for p in caught.value.problems), caught.value.problems


def test_inventory_accepts_a_valid_layout_and_unknown_products() -> None:
    devices = [_mig(1, "2g.35gb", 33280, 3, 0, 2), _mig(2, "1g.18gb", 16384, 13, 6, 1)]
    inv = inventory_from_object(_object("NVIDIA H200", devices))
    assert inv.mig_profiles() == {"1g.18gb": 1, "2g.35gb": 1}
    # A GPU newer than the tables is taken as reported, never rejected for being new.
    newer = inventory_from_object(_object("NVIDIA B300", [_mig(1, "1g.34gb", 33000, 7, 0, 1)]))
    assert newer.mig_profiles() == {"1g.34gb": 1}


# --- The H200 fleet -------------------------------------------------------------------------


def _h200_nodes() -> dict[str, GPUNodeInventory]:
    nodes = build_fleet(load_cluster_spec("mig-h200"), now=NOW)
    out = {}
    for sim in nodes:
        assert sim.inventory is not None
        out[sim.pool] = sim.inventory
    return out


def test_h200_fleet_builds_with_h200_profiles_only() -> None:
    nodes = build_fleet(load_cluster_spec("mig-h200"), now=NOW)
    assert [n.name for n in nodes] == ["mig-h200-small-000", "mig-h200-medium-000"]
    h200_names = set(profiles_for("NVIDIA H200"))
    for sim in nodes:
        inv = sim.inventory
        assert inv is not None
        assert inventory_from_object(inventory_to_object(inv, "uid")) == inv
        assert len(inv.gpus) == 8
        for gpu in inv.gpus:
            assert gpu.product == "NVIDIA H200"
            assert gpu.mig_enabled
            assert {d.profile for d in gpu.mig_devices} <= h200_names
            problems = layout_problems(
                gpu.product, [(d.profile, d.placement_start) for d in gpu.mig_devices]
            )
            assert problems == []
        uuids = [d.uuid for gpu in inv.gpus for d in gpu.mig_devices]
        assert len(set(uuids)) == len(uuids)


@pytest.mark.parametrize(
    ("pool", "layout", "resources"),
    [
        (
            "mig-h200-small",
            [("1g.18gb", s, 1, 7 + s, 16384) for s in SEVEN],
            {"nvidia.com/gpu": "0", "nvidia.com/mig-1g.18gb": "56"},
        ),
        (
            "mig-h200-medium",
            [
                ("2g.35gb", 0, 2, 3, 33280),
                ("2g.35gb", 2, 2, 4, 33280),
                ("2g.35gb", 4, 2, 5, 33280),
                ("1g.18gb", 6, 1, 13, 16384),
            ],
            {
                "nvidia.com/gpu": "0",
                "nvidia.com/mig-1g.18gb": "8",
                "nvidia.com/mig-2g.35gb": "24",
            },
        ),
    ],
)
def test_h200_fleet_layouts_and_resources(
    pool: str, layout: list[tuple[str, int, int, int, int]], resources: dict[str, str]
) -> None:
    (sim,) = [n for n in build_fleet(load_cluster_spec("mig-h200"), now=NOW) if n.pool == pool]
    inv = sim.inventory
    assert inv is not None
    for gpu in inv.gpus:
        assert [
            (d.profile, d.placement_start, d.placement_size, d.gpu_instance_id, d.memory_mib)
            for d in gpu.mig_devices
        ] == layout
    assert node_extended_resources(inv) == resources
    capacity = sim.node["status"]["capacity"]
    allocatable = sim.node["status"]["allocatable"]
    for key, value in resources.items():
        assert capacity[key] == allocatable[key] == value
    assert not [k for k in capacity if re.match(r"nvidia\.com/mig-(1g\.10gb|2g\.20gb)", k)]


def test_h200_fleet_node_labels() -> None:
    nodes = {n.pool: n for n in build_fleet(load_cluster_spec("mig-h200"), now=NOW)}
    labels = nodes["mig-h200-medium"].node["metadata"]["labels"]
    assert labels == {**labels, **node_labels(_h200_nodes()["mig-h200-medium"])}
    expected = {
        "nvidia.com/gpu.product": "NVIDIA-H200",
        "nvidia.com/gpu.memory": "143771",
        "nvidia.com/gpu.count": "8",
        "nvidia.com/mig.strategy": "mixed",
        "nvidia.com/mig-2g.35gb.count": "24",
        "nvidia.com/mig-2g.35gb.memory": "33280",
        "nvidia.com/mig-2g.35gb.product": "NVIDIA-H200-MIG-2g.35gb",
        "nvidia.com/mig-2g.35gb.slices.gi": "2",
        "nvidia.com/mig-2g.35gb.slices.ci": "2",
        "nvidia.com/mig-1g.18gb.count": "8",
        "nvidia.com/mig-1g.18gb.memory": "16384",
        "nvidia.com/mig-1g.18gb.product": "NVIDIA-H200-MIG-1g.18gb",
    }
    assert {k: labels.get(k) for k in expected} == expected
    small = nodes["mig-h200-small"].node["metadata"]["labels"]
    assert small["nvidia.com/mig-1g.18gb.count"] == "56"
    assert not [k for k in small if k.startswith("nvidia.com/mig-2g")]


def test_h100_fleets_stay_valid_for_h100_80gb() -> None:
    for cluster in ("mig-small", "mig-medium"):
        for sim in build_fleet(load_cluster_spec(cluster), now=NOW):
            inv = sim.inventory
            assert inv is not None
            for gpu in inv.gpus:
                assert profiles_for(gpu.product) is profiles_for("NVIDIA H100 80GB HBM3")
                assert (
                    layout_problems(
                        gpu.product, [(d.profile, d.placement_start) for d in gpu.mig_devices]
                    )
                    == []
                )


def test_all_is_complete() -> None:
    exported = set(mig.__all__)
    for name in exported:
        assert hasattr(mig, name), name
    public_defs = {
        name
        for name, value in vars(mig).items()
        if not name.startswith("_") and getattr(value, "__module__", None) == mig.__name__
    }
    assert public_defs <= exported
