"""Structured DRA allocation (gpusched.dra.allocator) over NVIDIA-DRA-driver-like slices."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusched.dra.allocator import (
    Allocation,
    DeviceID,
    Unallocatable,
    allocate,
    allocated_devices,
)
from gpusched.dra.cel import compile_selector, device_activation
from gpusched.inventory import GPUNodeInventory
from gpusched.sim.fleet import build_fleet, load_cluster_spec
from gpusched.topology import GPUTopology

DRIVER = "gpu.nvidia.com"
NODE = "node-a"
GPU_CLASS: dict[str, Any] = {
    "metadata": {"name": "gpu.nvidia.com"},
    "spec": {
        "selectors": [
            {
                "cel": {
                    "expression": "device.driver == 'gpu.nvidia.com' && "
                    "device.attributes['gpu.nvidia.com'].type == 'gpu'"
                }
            }
        ],
        "config": [{"opaque": {"driver": DRIVER, "parameters": {"sharing": "none"}}}],
    },
}
MIG_CLASS: dict[str, Any] = {
    "metadata": {"name": "mig.nvidia.com"},
    "spec": {
        "selectors": [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].type == 'mig'"}}]
    },
}
CLASSES = {"gpu.nvidia.com": GPU_CLASS, "mig.nvidia.com": MIG_CLASS}


@functools.cache
def _inventory(cluster: str) -> GPUNodeInventory:
    inventory = build_fleet(load_cluster_spec(cluster))[0].inventory
    assert inventory is not None
    return inventory


def gpu(
    index: int, product: str = "Tesla V100-SXM2-32GB", memory: str = "32Gi", **extra: Any
) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "type": {"string": "gpu"},
        "index": {"int": index},
        "uuid": {"string": f"GPU-{index}"},
        "productName": {"string": product},
        "driverVersion": {"version": "550.54.15"},
    }
    attributes.update({k: {"string": v} for k, v in extra.items()})
    return {
        "name": f"gpu-{index}",
        "attributes": attributes,
        "capacity": {"memory": {"value": memory}},
    }


def mig(parent: int, slot: int, profile: str = "1g.10gb") -> dict[str, Any]:
    return {
        "name": f"gpu-{parent}-mig-{slot}",
        "attributes": {
            "type": {"string": "mig"},
            "profile": {"string": profile},
            "parentIndex": {"int": parent},
            "parentUUID": {"string": f"GPU-{parent}"},
        },
        "capacity": {"memory": {"value": "10Gi"}},
    }


def slice_of(devices: list[dict[str, Any]], pool: str = NODE, node: str = NODE) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def claim(
    *requests: dict[str, Any],
    constraints: list[dict[str, Any]] | None = None,
    config: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": list(requests)}
    if constraints:
        devices["constraints"] = constraints
    if config:
        devices["config"] = config
    return {"metadata": {"name": "c", "namespace": "default"}, "spec": {"devices": devices}}


def exactly(
    name: str,
    count: int = 1,
    cls: str = "gpu.nvidia.com",
    *selectors: str,
    mode: str = "ExactCount",
    admin: bool = False,
) -> dict[str, Any]:
    body: dict[str, Any] = {"deviceClassName": cls, "allocationMode": mode}
    if mode == "ExactCount":
        body["count"] = count
    if selectors:
        body["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    if admin:
        body["adminAccess"] = True
    return {"name": name, "exactly": body}


def first_available(name: str, *subs: tuple[str, int, str, str]) -> dict[str, Any]:
    return {
        "name": name,
        "firstAvailable": [
            {
                "name": sub,
                "deviceClassName": cls,
                "count": count,
                "selectors": [{"cel": {"expression": expr}}],
            }
            for sub, count, cls, expr in subs
        ],
    }


def taken(*indices: int) -> frozenset[DeviceID]:
    return frozenset((DRIVER, NODE, f"gpu-{i}") for i in indices)


@dataclass
class Case:
    name: str
    claims: list[dict[str, Any]]
    devices: list[dict[str, Any]]
    want: list[list[tuple[str, str]]] | None
    """Per claim, ``(request, device)`` in result order; ``None``: unallocatable."""
    allocated: frozenset[DeviceID] = frozenset()
    reason: str = ""
    error: bool = False
    inventory: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


PROD = "device.attributes['gpu.nvidia.com'].productName"
MEM = "device.capacity['gpu.nvidia.com'].memory"
EIGHT = [gpu(i) for i in range(8)]
MIXED = [
    gpu(0, "A100", "40Gi"),
    gpu(1, "H100", "80Gi"),
    gpu(2, "A100", "40Gi"),
    gpu(3, "H100", "80Gi"),
]

CASES = [
    Case("one gpu", [claim(exactly("r"))], EIGHT[:2], [[("r", "gpu-0")]]),
    Case(
        "exact count 3",
        [claim(exactly("r", 3))],
        EIGHT[:4],
        [[("r", "gpu-0"), ("r", "gpu-1"), ("r", "gpu-2")]],
    ),
    Case("too few", [claim(exactly("r", 3))], EIGHT[:2], None, reason="too few devices match"),
    Case(
        "excluded devices skipped",
        [claim(exactly("r", 2))],
        EIGHT[:4],
        [[("r", "gpu-1"), ("r", "gpu-3")]],
        allocated=taken(0, 2),
    ),
    Case(
        "all",
        [claim(exactly("r", mode="All"))],
        EIGHT[:3],
        [[("r", "gpu-0"), ("r", "gpu-1"), ("r", "gpu-2")]],
    ),
    Case(
        "all needs every match free",
        [claim(exactly("r", mode="All"))],
        EIGHT[:3],
        None,
        allocated=taken(1),
    ),
    Case(
        "all needs one match",
        [claim(exactly("r", 1, "gpu.nvidia.com", f"{PROD} == 'B200'", mode="All"))],
        EIGHT[:3],
        None,
    ),
    Case(
        "selector by quantity",
        [claim(exactly("r", 1, "gpu.nvidia.com", f"{MEM}.compareTo(quantity('64Gi')) >= 0"))],
        MIXED,
        [[("r", "gpu-1")]],
    ),
    Case(
        "two requests",
        [
            claim(
                exactly("a", 1, "gpu.nvidia.com", f"{PROD} == 'A100'"),
                exactly("h", 2, "gpu.nvidia.com", f"{PROD} == 'H100'"),
            )
        ],
        MIXED,
        [[("a", "gpu-0"), ("h", "gpu-1"), ("h", "gpu-3")]],
    ),
    Case(
        "match attribute satisfied",
        [claim(exactly("r", 2), constraints=[{"matchAttribute": "gpu.nvidia.com/productName"}])],
        MIXED,
        [[("r", "gpu-0"), ("r", "gpu-2")]],
        allocated=frozenset(),
    ),
    Case(
        "match attribute across requests",
        [
            claim(
                exactly("a", 1, "gpu.nvidia.com", f"{MEM}.compareTo(quantity('64Gi')) >= 0"),
                exactly("b", 1),
                constraints=[
                    {"requests": ["a", "b"], "matchAttribute": "gpu.nvidia.com/productName"}
                ],
            )
        ],
        MIXED,
        [[("a", "gpu-1"), ("b", "gpu-3")]],
    ),
    Case(
        "match attribute backtracks",
        [
            claim(
                exactly("a"),
                exactly("b"),
                constraints=[{"matchAttribute": "gpu.nvidia.com/productName"}],
            )
        ],
        MIXED,
        [[("a", "gpu-1"), ("b", "gpu-3")]],
        allocated=taken(2),
    ),
    Case(
        "match attribute impossible",
        [claim(exactly("r", 3), constraints=[{"matchAttribute": "gpu.nvidia.com/productName"}])],
        MIXED,
        None,
    ),
    Case(
        "match attribute missing on devices",
        [claim(exactly("r", 2), constraints=[{"matchAttribute": "gpu.nvidia.com/rack"}])],
        [gpu(0), gpu(1, rack="r1"), gpu(2, rack="r1")],
        [[("r", "gpu-1"), ("r", "gpu-2")]],
    ),
    Case(
        "first available falls back",
        [
            claim(
                first_available(
                    "r",
                    ("h100", 2, "gpu.nvidia.com", f"{PROD} == 'H100'"),
                    ("a100", 2, "gpu.nvidia.com", f"{PROD} == 'A100'"),
                )
            )
        ],
        MIXED,
        [[("r/a100", "gpu-0"), ("r/a100", "gpu-2")]],
        allocated=taken(3),
    ),
    Case(
        "first available takes the first",
        [
            claim(
                first_available(
                    "r",
                    ("h100", 2, "gpu.nvidia.com", f"{PROD} == 'H100'"),
                    ("a100", 2, "gpu.nvidia.com", f"{PROD} == 'A100'"),
                )
            )
        ],
        MIXED,
        [[("r/h100", "gpu-1"), ("r/h100", "gpu-3")]],
    ),
    Case(
        "mig devices by profile",
        [
            claim(
                exactly(
                    "m",
                    2,
                    "mig.nvidia.com",
                    "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'",
                )
            )
        ],
        [gpu(0), mig(1, 0), mig(1, 1, "3g.40gb"), mig(2, 0)],
        [[("m", "gpu-1-mig-0"), ("m", "gpu-2-mig-0")]],
    ),
    Case(
        "several claims share nothing",
        [claim(exactly("r", 2)), claim(exactly("r", 2))],
        EIGHT[:4],
        [[("r", "gpu-0"), ("r", "gpu-1")], [("r", "gpu-2"), ("r", "gpu-3")]],
    ),
    Case(
        "several claims do not fit",
        [claim(exactly("r", 2)), claim(exactly("r", 2))],
        EIGHT[:3],
        None,
    ),
    Case(
        "admin access refused",
        [claim(exactly("r", admin=True))],
        EIGHT[:1],
        None,
        reason="admin access",
        error=True,
    ),
    Case(
        "admin access allowed uses a taken device",
        [claim(exactly("r", mode="All", admin=True))],
        EIGHT[:2],
        [[("r", "gpu-0"), ("r", "gpu-1")]],
        allocated=taken(0, 1),
        extra={"allow_admin_access": True},
    ),
    Case(
        "unknown class",
        [claim(exactly("r", 1, "tpu.example.com"))],
        EIGHT[:1],
        None,
        reason="device class tpu.example.com does not exist",
        error=True,
    ),
    Case(
        "bad CEL gives a message",
        [claim(exactly("r", 1, "gpu.nvidia.com", "device.("))],
        EIGHT[:1],
        None,
        reason="compilation failed: syntax error",
        error=True,
    ),
    Case(
        "CEL runtime error gives a message",
        [claim(exactly("r", 1, "gpu.nvidia.com", "device.attributes['gpu.nvidia.com'].nope"))],
        EIGHT[:1],
        None,
        reason="no such member",
        error=True,
    ),
    # DGX-1V hybrid cube mesh: with 3, 4, 6, 7 taken the NV2 pairs left are 1-2 (PHB) and
    # 1-5 (SYS); device order alone would give 0-1 (one NVLink).
    Case(
        "topology prefers the NVLink-best pair",
        [claim(exactly("r", 2))],
        EIGHT,
        [[("r", "gpu-1"), ("r", "gpu-2")]],
        allocated=taken(3, 4, 6, 7),
        inventory="dgx-v100",
    ),
    Case(
        "topology: four GPUs make a quad",
        [claim(exactly("r", 4))],
        EIGHT,
        [[("r", "gpu-4"), ("r", "gpu-5"), ("r", "gpu-6"), ("r", "gpu-7")]],
        allocated=taken(1),
        inventory="dgx-v100",
    ),
    Case(
        "no inventory: device order",
        [claim(exactly("r", 2))],
        EIGHT,
        [[("r", "gpu-0"), ("r", "gpu-1")]],
        allocated=taken(3, 4, 6, 7),
    ),
]


def pairs(allocation: dict[str, Any]) -> list[tuple[str, str]]:
    return [(r["request"], r["device"]) for r in allocation["devices"]["results"]]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_allocate(case: Case) -> None:
    inventory = _inventory(case.inventory) if case.inventory else None
    found = allocate(
        case.claims,
        node_name=NODE,
        slices=[slice_of(case.devices)],
        classes=CLASSES,
        allocated=case.allocated,
        inventory=inventory,
        **case.extra,
    )
    if case.want is None:
        assert isinstance(found, Unallocatable), found
        assert case.reason in found.reason
        assert found.error is case.error
        return
    assert isinstance(found, Allocation), found
    assert [pairs(a) for a in found.allocations] == case.want


def test_result_shape() -> None:
    # Two requests, the second a firstAvailable that falls back to "b/any": the class's
    # config names both requests (so its list is dropped: empty means all), the claim's
    # config for "b/h100" (not picked) is left out, the one for "b/any" kept.
    opaque = {"driver": DRIVER, "parameters": {}}
    found = allocate(
        [
            claim(
                exactly("a"),
                first_available(
                    "b",
                    ("h100", 1, "gpu.nvidia.com", f"{PROD} == 'H100'"),
                    ("any", 1, "gpu.nvidia.com", "true"),
                ),
                config=[
                    {"requests": ["b/h100"], "opaque": opaque},
                    {"requests": ["b/any"], "opaque": opaque},
                    {"opaque": opaque},
                ],
            )
        ],
        node_name=NODE,
        slices=[slice_of(EIGHT[:2])],
        classes=CLASSES,
    )
    assert isinstance(found, Allocation)
    assert found.allocations == (
        {
            "devices": {
                "results": [
                    {"request": "a", "driver": DRIVER, "pool": NODE, "device": "gpu-0"},
                    {"request": "b/any", "driver": DRIVER, "pool": NODE, "device": "gpu-1"},
                ],
                "config": [
                    {
                        "source": "FromClass",
                        "opaque": {"driver": DRIVER, "parameters": {"sharing": "none"}},
                    },
                    {"source": "FromClaim", "requests": ["b/any"], "opaque": opaque},
                    {"source": "FromClaim", "opaque": opaque},
                ],
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}
                ]
            },
        },
    )


def test_all_with_an_incomplete_pool_waits() -> None:
    incomplete = slice_of(EIGHT[:1], pool="other")
    incomplete["spec"]["pool"]["resourceSliceCount"] = 2
    found = allocate(
        [claim(exactly("r", mode="All"))],
        node_name=NODE,
        slices=[slice_of(EIGHT[1:2]), incomplete],
        classes=CLASSES,
    )
    assert found == Unallocatable(
        "request r: asks for all devices, but resource pool gpu.nvidia.com/other is "
        "currently being updated"
    )


def test_at_most_32_devices_per_claim() -> None:
    many = [slice_of([gpu(i) for i in range(33)])]
    too_many = allocate(
        [claim(exactly("r", mode="All"))], node_name=NODE, slices=many, classes=CLASSES
    )
    assert isinstance(too_many, Unallocatable)
    just = allocate([claim(exactly("r", 32))], node_name=NODE, slices=many, classes=CLASSES)
    assert isinstance(just, Allocation)
    assert len(just.allocations[0]["devices"]["results"]) == 32


def test_ledger_predicate_and_admin_flag() -> None:
    held = {(DRIVER, NODE, "gpu-0")}
    found = allocate(
        [claim(exactly("r"))],
        node_name=NODE,
        slices=[slice_of(EIGHT[:2])],
        classes=CLASSES,
        allocated=held.__contains__,
    )
    assert isinstance(found, Allocation)
    assert pairs(found.allocations[0]) == [("r", "gpu-1")]
    admin = allocate(
        [claim(exactly("r", admin=True))],
        node_name=NODE,
        slices=[slice_of(EIGHT[:1])],
        classes=CLASSES,
        allow_admin_access=True,
    )
    assert isinstance(admin, Allocation)
    assert admin.allocations[0]["devices"]["results"][0]["adminAccess"] is True


@pytest.mark.parametrize(
    ("slices", "want"),
    [
        # another node's slice is not ours; an older generation is ignored
        ([slice_of(EIGHT[:1], node="node-b")], None),
        (
            [
                slice_of(EIGHT[:1]),
                {
                    **slice_of(EIGHT[1:2]),
                    "spec": {
                        **slice_of(EIGHT[1:2])["spec"],
                        "pool": {"name": NODE, "generation": 2, "resourceSliceCount": 1},
                    },
                },
            ],
            "gpu-1",
        ),
        # an incomplete pool still serves ExactCount requests, as upstream
        (
            [
                {
                    **slice_of(EIGHT[:1]),
                    "spec": {
                        **slice_of(EIGHT[:1])["spec"],
                        "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 2},
                    },
                }
            ],
            "gpu-0",
        ),
    ],
)
def test_pools(slices: list[dict[str, Any]], want: str | None) -> None:
    found = allocate([claim(exactly("r"))], node_name=NODE, slices=slices, classes=CLASSES)
    if want is None:
        assert isinstance(found, Unallocatable)
    else:
        assert isinstance(found, Allocation)
        assert pairs(found.allocations[0]) == [("r", want)]


def test_search_is_bounded() -> None:
    # 13 requests of 1 over the same 12 devices (pigeonhole): a plain depth-first search
    # tries every placement of the first 12 before the 13th fails; max_steps stops it.
    devices = [gpu(i) for i in range(24)]
    low = "device.attributes['gpu.nvidia.com'].index < 12"
    requests = [exactly(f"r{i}", 1, "gpu.nvidia.com", low) for i in range(13)]
    found = allocate(
        [claim(*requests)],
        node_name=NODE,
        slices=[slice_of(devices)],
        classes=CLASSES,
        max_steps=1000,
    )
    assert found == Unallocatable("gave up after trying 1000 device sets")


def test_hopeless_request_fails_before_searching() -> None:
    requests = [exactly(f"r{i}") for i in range(12)]
    requests.append(exactly("x", 1, "gpu.nvidia.com", f"{PROD} == 'none'"))
    found = allocate(
        [claim(*requests)],
        node_name=NODE,
        slices=[slice_of([gpu(i) for i in range(24)])],
        classes=CLASSES,
        max_steps=1,
    )
    assert found == Unallocatable("cannot allocate all claims: too few devices match request x")


PRODUCTS = ["A100", "H100"]


@settings(max_examples=60, deadline=None)
@given(
    products=st.lists(st.sampled_from(PRODUCTS), min_size=1, max_size=8),
    taken_mask=st.integers(0, 255),
    counts=st.lists(st.integers(1, 3), min_size=1, max_size=3),
    want_product=st.lists(st.sampled_from([None, *PRODUCTS]), min_size=3, max_size=3),
    match=st.booleans(),
)
def test_property(
    products: list[str],
    taken_mask: int,
    counts: list[int],
    want_product: list[str | None],
    match: bool,
) -> None:
    devices = [gpu(i, p) for i, p in enumerate(products)]
    held = frozenset((DRIVER, NODE, f"gpu-{i}") for i in range(8) if taken_mask >> i & 1)
    requests = [
        exactly(
            f"r{i}",
            n,
            "gpu.nvidia.com",
            *([f"{PROD} == '{want_product[i]}'"] if want_product[i] else []),
        )
        for i, n in enumerate(counts)
    ]
    constraints = [{"matchAttribute": "gpu.nvidia.com/productName"}] if match else None
    c = claim(*requests, constraints=constraints)
    found = allocate(
        [c],
        node_name=NODE,
        slices=[slice_of(devices)],
        classes=CLASSES,
        allocated=held,
        inventory=_inventory("dgx-v100"),
    )
    free = [d for d in devices if (DRIVER, NODE, d["name"]) not in held]
    if isinstance(found, Unallocatable):
        assert not found.error
        # Sanity: with no selector and no constraint, failure means too few free devices.
        if not match and not any(want_product[: len(counts)]):
            assert sum(counts) > len(free)
        return
    results = found.allocations[0]["devices"]["results"]
    by_name = {d["name"]: d for d in devices}
    names = [r["device"] for r in results]
    assert len(names) == len(set(names)) == sum(counts)
    for r in results:
        assert (DRIVER, NODE, r["device"]) not in held
        index = int(r["request"][1:])
        assert sum(x["request"] == r["request"] for x in results) == counts[index]
        activation = device_activation(DRIVER, by_name[r["device"]])
        assert isinstance(activation, dict)
        for s in [
            *GPU_CLASS["spec"]["selectors"],
            *requests[index]["exactly"].get("selectors", []),
        ]:
            assert compile_selector(s["cel"]["expression"]).matches(activation).matched
    if match:
        assert len({by_name[n]["attributes"]["productName"]["string"] for n in names}) == 1


def test_shared_match_cache() -> None:
    cache: dict[tuple[str, DeviceID, str], bool] = {}
    slices = [slice_of(EIGHT[:2])]
    first = allocate(
        [claim(exactly("r"))], node_name=NODE, slices=slices, classes=CLASSES, match_cache=cache
    )
    assert isinstance(first, Allocation)
    expression = GPU_CLASS["spec"]["selectors"][0]["cel"]["expression"]
    key = (expression, (DRIVER, NODE, "gpu-0"), "generation 1")
    assert cache[key] is True
    # A cached verdict is used as is: poison it and the device is no longer selected.
    cache[key] = False
    again = allocate(
        [claim(exactly("r"))], node_name=NODE, slices=slices, classes=CLASSES, match_cache=cache
    )
    assert isinstance(again, Allocation)
    assert pairs(again.allocations[0]) == [("r", "gpu-1")]
    # A new slice version is evaluated afresh.
    newer = [{**slices[0], "metadata": {"name": "s", "resourceVersion": "7"}}]
    fresh = allocate(
        [claim(exactly("r"))], node_name=NODE, slices=newer, classes=CLASSES, match_cache=cache
    )
    assert isinstance(fresh, Allocation)
    assert pairs(fresh.allocations[0]) == [("r", "gpu-0")]


@pytest.mark.parametrize("by", ["parentIndex", "parentUUID"])
def test_mig_devices_map_to_their_gpu(by: str) -> None:
    # MIG devices on GPUs 0, 5 and 3 of a DGX-1V: 0-3 have two NVLinks, 0-5 none.
    inventory = _inventory("dgx-v100")
    devices = [mig(0, 0), mig(5, 0), mig(3, 0)]
    for device in devices:
        parent = device["attributes"]["parentIndex"]["int"]
        if by == "parentUUID":
            del device["attributes"]["parentIndex"]
            device["attributes"]["parentUUID"] = {"string": inventory.gpus[parent].uuid}
    request = [claim(exactly("m", 2, "mig.nvidia.com"))]
    flat = allocate(request, node_name=NODE, slices=[slice_of(devices)], classes=CLASSES)
    best = allocate(
        request, node_name=NODE, slices=[slice_of(devices)], classes=CLASSES, inventory=inventory
    )
    assert isinstance(flat, Allocation)
    assert isinstance(best, Allocation)
    assert pairs(flat.allocations[0]) == [("m", "gpu-0-mig-0"), ("m", "gpu-5-mig-0")]
    assert pairs(best.allocations[0]) == [("m", "gpu-0-mig-0"), ("m", "gpu-3-mig-0")]


@settings(max_examples=60, deadline=None)
@given(taken_mask=st.integers(0, 255), count=st.integers(1, 5))
def test_topology_agrees_with_gpu_fit_selection(taken_mask: int, count: int) -> None:
    # One request of `count` whole GPUs on a DGX-1V: the same set GPUFit's selection picks.
    inventory = _inventory("dgx-v100")
    topology = GPUTopology.build(len(inventory.gpus), inventory.links, 10_000)
    free = [i for i in range(8) if not taken_mask >> i & 1]
    found = allocate(
        [claim(exactly("r", count))],
        node_name=NODE,
        slices=[slice_of(EIGHT)],
        classes=CLASSES,
        allocated=taken(*(i for i in range(8) if taken_mask >> i & 1)),
        inventory=inventory,
    )
    if count > len(free):
        assert isinstance(found, Unallocatable)
        return
    assert isinstance(found, Allocation)
    chosen = [
        int(r["device"].removeprefix("gpu-")) for r in found.allocations[0]["devices"]["results"]
    ]
    assert tuple(chosen) == topology.choose(free, count)[0]


def test_a_pool_with_a_device_name_in_two_slices_is_invalid() -> None:
    """As upstream: nothing is allocated from it (never one device twice), and a request for
    all devices says why."""
    first, second = slice_of(EIGHT[:1]), slice_of(EIGHT[:1])
    for item in (first, second):
        item["spec"]["pool"]["resourceSliceCount"] = 2
    slices = [first, second]
    two = allocate([claim(exactly("r", count=2))], node_name=NODE, slices=slices, classes=CLASSES)
    assert two == Unallocatable(
        "cannot allocate all claims: too few devices match request r; resource pool "
        f"gpu.nvidia.com/{NODE} is invalid: device gpu-0 is in two slices"
    )
    every = allocate(
        [claim(exactly("r", mode="All"))], node_name=NODE, slices=slices, classes=CLASSES
    )
    assert every == Unallocatable(
        f"request r: asks for all devices, but resource pool gpu.nvidia.com/{NODE} is "
        "invalid: device gpu-0 is in two slices"
    )


def shared_slice(devices: list[dict[str, Any]], **where: Any) -> dict[str, Any]:
    """A slice for a set of nodes (``nodeSelector``) or all (``allNodes``), its own pool."""
    return {
        "metadata": {"name": "shared"},
        "spec": {
            "driver": DRIVER,
            "pool": {"name": "shared", "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
            **where,
        },
    }


RACK_A = {"key": "rack", "operator": "In", "values": ["a"]}
ZONE = {"key": "zone", "operator": "Exists"}
BY_NAME = {"key": "metadata.name", "operator": "In", "values": [NODE]}


@pytest.mark.parametrize(
    ("where", "labels", "node_selector"),
    [
        pytest.param(
            {"nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [RACK_A]}]}},
            {"rack": "a"},
            {"nodeSelectorTerms": [{"matchExpressions": [RACK_A]}]},
            id="selector-matches",
        ),
        pytest.param(
            {"nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [RACK_A]}]}},
            {"rack": "b"},
            None,
            id="selector-does-not-match",
        ),
        pytest.param(
            {"nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [RACK_A]}]}},
            None,
            None,
            id="no-labels-given",
        ),
        pytest.param(
            {"nodeSelector": {"nodeSelectorTerms": [{"matchFields": [BY_NAME]}]}},
            None,
            {"nodeSelectorTerms": [{"matchFields": [BY_NAME]}]},
            id="match-fields-on-the-name",
        ),
        pytest.param({"allNodes": True}, None, {}, id="all-nodes-no-selector"),
        pytest.param({"perDeviceNodeSelection": True}, {"rack": "a"}, None, id="per-device"),
    ],
)
def test_slices_for_a_set_of_nodes(
    where: dict[str, Any], labels: dict[str, str] | None, node_selector: dict[str, Any] | None
) -> None:
    """As upstream's GatherPools / createNodeSelector: a ``nodeSelector`` slice serves the
    nodes it matches, and its term becomes the allocation's node selector."""
    found = allocate(
        [claim(exactly("r"))],
        node_name=NODE,
        slices=[shared_slice(EIGHT[:1], **where)],
        classes=CLASSES,
        node_labels=labels,
    )
    if node_selector is None:
        assert isinstance(found, Unallocatable)
        return
    assert isinstance(found, Allocation)
    allocation = found.allocations[0]
    assert pairs(allocation) == [("r", "gpu-0")]
    assert allocation.get("nodeSelector", {}) == node_selector


def test_node_selectors_of_several_slices_are_anded_and_a_local_device_wins() -> None:
    rack = shared_slice(
        [gpu(0)], nodeSelector={"nodeSelectorTerms": [{"matchExpressions": [RACK_A]}]}
    )
    zone = shared_slice(
        [gpu(1)], nodeSelector={"nodeSelectorTerms": [{"matchExpressions": [RACK_A, ZONE]}]}
    )
    zone["spec"]["pool"]["name"] = "zone"
    labels = {"rack": "a", "zone": "z1"}
    both = allocate(
        [claim(exactly("r", 2))],
        node_name=NODE,
        slices=[rack, zone],
        classes=CLASSES,
        node_labels=labels,
    )
    assert isinstance(both, Allocation)
    assert both.allocations[0]["nodeSelector"] == {
        "nodeSelectorTerms": [{"matchExpressions": [RACK_A, ZONE]}]
    }
    local = allocate(
        [claim(exactly("r", 2))],
        node_name=NODE,
        slices=[rack, slice_of([gpu(5)])],
        classes=CLASSES,
        node_labels=labels,
    )
    assert isinstance(local, Allocation)
    assert local.allocations[0]["nodeSelector"] == {
        "nodeSelectorTerms": [{"matchFields": [BY_NAME]}]
    }


def test_an_incomplete_pool_serves_exact_counts_not_all() -> None:
    incomplete = slice_of(EIGHT[:2])
    incomplete["spec"]["pool"]["resourceSliceCount"] = 2
    two = allocate([claim(exactly("r", 2))], node_name=NODE, slices=[incomplete], classes=CLASSES)
    assert isinstance(two, Allocation)
    every = allocate(
        [claim(exactly("r", mode="All"))], node_name=NODE, slices=[incomplete], classes=CLASSES
    )
    assert every == Unallocatable(
        f"request r: asks for all devices, but resource pool gpu.nvidia.com/{NODE} is "
        "currently being updated"
    )


def test_admin_access_takes_devices_in_use_and_is_no_use() -> None:
    """Upstream's allocateDevice skips the in-use check for admin access, and
    GatherAllocatedState leaves admin results out of what is allocated."""
    one = [slice_of(EIGHT[:1])]
    held = taken(0)
    busy = allocate(
        [claim(exactly("r"))], node_name=NODE, slices=one, classes=CLASSES, allocated=held
    )
    assert isinstance(busy, Unallocatable)
    admin = allocate(
        [claim(exactly("r", admin=True))],
        node_name=NODE,
        slices=one,
        classes=CLASSES,
        allocated=held,
        allow_admin_access=True,
    )
    assert isinstance(admin, Allocation)
    assert pairs(admin.allocations[0]) == [("r", "gpu-0")]
    # one device, two claims in one call: the plain one and the admin one both get it
    together = allocate(
        [claim(exactly("r")), claim(exactly("a", admin=True))],
        node_name=NODE,
        slices=one,
        classes=CLASSES,
        allow_admin_access=True,
    )
    assert isinstance(together, Allocation)
    claims = [{"status": {"allocation": allocation}} for allocation in together.allocations]
    assert allocated_devices(claims) == {(DRIVER, NODE, "gpu-0")}
    assert allocated_devices(claims[1:]) == set()
    all_admin = allocate(
        [claim(exactly("a", mode="All", admin=True))],
        node_name=NODE,
        slices=[slice_of(EIGHT[:3])],
        classes=CLASSES,
        allocated=held,
        allow_admin_access=True,
    )
    assert isinstance(all_admin, Allocation)
    assert len(all_admin.allocations[0]["devices"]["results"]) == 3


def partition(name: str, memory: str, counter_set: str = "gpu-0-counters") -> dict[str, Any]:
    """A partitionable device (as dynamic MIG publishes them): it consumes shared counters."""
    device = gpu(0, memory=memory)
    device["name"] = name
    device["consumesCounters"] = [
        {"counterSet": counter_set, "counters": {"memory": {"value": memory}}}
    ]
    return device


def counter_pool(devices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    counters = slice_of([])
    del counters["spec"]["devices"]
    counters["spec"]["sharedCounters"] = [
        {"name": "gpu-0-counters", "counters": {"memory": {"value": "80Gi"}}}
    ]
    with_devices = slice_of(devices)
    for item in (counters, with_devices):
        item["spec"]["pool"]["resourceSliceCount"] = 2
    return [counters, with_devices]


WHOLE, HALF_A, HALF_B = (
    partition("whole", "80Gi"),
    partition("half-a", "40Gi"),
    partition("half-b", "40Gi"),
)


@pytest.mark.parametrize(
    ("requests", "held", "admin", "want"),
    [
        pytest.param([exactly("r", 2)], set(), False, ["half-a", "half-b"], id="two-halves"),
        pytest.param([exactly("r", 3)], set(), False, None, id="whole-and-half-overflow"),
        pytest.param([exactly("r")], {"whole"}, False, None, id="whole-held-no-half"),
        pytest.param([exactly("r")], {"half-a"}, False, ["half-b"], id="one-half-held"),
        pytest.param(
            [
                exactly(
                    "r",
                    1,
                    "gpu.nvidia.com",
                    "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('80Gi')) == 0",
                    admin=True,
                )
            ],
            {"half-a", "half-b"},
            True,
            ["whole"],
            id="admin-access-consumes-nothing",
        ),
    ],
)
def test_shared_counters(
    requests: list[dict[str, Any]], held: set[str], admin: bool, want: list[str] | None
) -> None:
    """Upstream's partitionable devices: what devices consume of their pool's counters
    may not exceed them, counting devices already allocated."""
    found = allocate(
        [claim(*requests)],
        node_name=NODE,
        slices=counter_pool([WHOLE, HALF_A, HALF_B]),
        classes=CLASSES,
        allocated={(DRIVER, NODE, name) for name in held},
        allow_admin_access=admin,
    )
    if want is None:
        assert isinstance(found, Unallocatable)
        return
    assert isinstance(found, Allocation)
    assert sorted(r["device"] for r in found.allocations[0]["devices"]["results"]) == want


def test_a_counter_set_the_pool_lacks_makes_devices_unallocatable() -> None:
    orphan = partition("orphan", "10Gi", counter_set="missing")
    found = allocate(
        [claim(exactly("r"))],
        node_name=NODE,
        slices=counter_pool([orphan]),
        classes=CLASSES,
    )
    assert isinstance(found, Unallocatable)
