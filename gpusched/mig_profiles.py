"""MIG profiles per GPU product, from NVIDIA's published tables: pure data and lookups.

A MIG profile name (``2g.20gb``) means different things on different GPUs: an H100 80GB's
1g slice is ``1g.10gb``, an H200's is ``1g.18gb``, an A100 40GB's ``1g.5gb``. A scheduler that
assumes one product's names for all would advertise, request or validate slices that do not
exist. So every lookup here is keyed by the *product* as NVML names it (``nvmlDeviceGetName``,
the inventory's ``gpus[].product``, GFD's ``nvidia.com/gpu.product`` before ``label_value``),
and a product missing from :data:`MIG_PRODUCTS` has no profiles at all rather than a guess.

Where the data comes from (NVIDIA MIG User Guide, "Supported MIG Profiles",
docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html; one table per
product: A30-24GB, A100-SXM4-40GB (80GB: names scaled), H100 80GB, H100 94GB, H100 96GB
(GH200), H200 141GB, B200 180GB):

- names, compute slices (the ``N`` of ``Ng``: fraction of SMs x 7, or x 4 on A30), memory
  slices (fraction of memory x 8, or x 4 on A30) and "Number of Instances Available" are the
  tables' columns;
- placements (start slices) are what ``nvidia-smi mig -lgipp`` prints and NVML's
  ``nvmlDeviceGetGpuInstancePossiblePlacements`` returns (NVIDIA's go-nvml mocks list the
  same): a profile of ``s`` memory slices starts on a multiple of ``s``; on 8-slice GPUs
  1-slice profiles start at 0..6 (never 7), 2g at 0, 2, 4, the 2-slice 1g at 0, 2, 4, 6,
  3g at 0 or 4, 4g and 7g at 0; on the A30 (4 slices) 1g at 0..3, 2g at 0 or 2, 4g at 0;
- ``memory_mib`` is what ``nvidia-smi mig -lgip`` reports (GiB x 1024), or, for products
  with no reading at hand, an estimate from the same table's fraction of memory; each
  product's comment below says which. Memory is informative: placement never depends on it.

Cost: every lookup is a dict access; :func:`place` is a backtracking search over at most 7
profiles with at most 7 starts each (microseconds); :func:`layout_problems` is O(n²) in the
number of GPU instances (at most 7).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from types import MappingProxyType
from typing import Final

__all__ = [
    "MIG_PRODUCTS",
    "MIGProduct",
    "MIGProfile",
    "Placement",
    "gpu_instance_profile",
    "layout_problems",
    "place",
    "product_table",
    "products_offering",
    "profile",
    "profiles_for",
]


@dataclass(frozen=True, slots=True)
class MIGProfile:
    """A GPU instance profile of one product.

    ``compute_slices`` of the product's compute slices (7, or 4 on A30), ``memory_slices``
    of its memory slices (8, or 4 on A30), at most ``max_instances`` at once on one GPU, each
    starting on one of ``starts`` (memory slices, as ``nvidia-smi mig -lgipp`` prints them).
    """

    name: str
    memory_mib: int
    compute_slices: int
    memory_slices: int
    max_instances: int
    starts: tuple[int, ...]

    @property
    def size(self) -> int:
        """Memory slices a placement spans (``nvidia-smi mig -lgi`` Size)."""
        return self.memory_slices


@dataclass(frozen=True, slots=True)
class MIGProduct:
    """The MIG geometry of one product family and the NVML names it goes by."""

    family: str
    """NVIDIA's name for the table, e.g. ``"H200 141GB"``."""
    names: tuple[str, ...]
    """NVML product names (``nvmlDeviceGetName``) that use this table."""
    compute_slices: int
    memory_slices: int
    profiles: Mapping[str, MIGProfile]


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one profile of a layout lands on a GPU."""

    profile: MIGProfile
    start: int

    @property
    def end(self) -> int:
        """One past the last memory slice."""
        return self.start + self.profile.memory_slices


def _gib(value: float) -> int:
    """``nvidia-smi mig -lgip`` prints GiB with two decimals; NVML counts MiB."""
    return round(value * 1024)


def _eight_slice(
    family: str, names: tuple[str, ...], gb: tuple[int, int, int, int, int], mib: Sequence[int]
) -> MIGProduct:
    """A product with 7 compute and 8 memory slices (A100, H100, H200, B200): the same seven
    profiles and placements, only the memory in the names differs.

    ``gb`` is the memory named by 1 memory slice, 2 slices, 4 slices, the whole GPU (the
    ``1g.<x>gb``, ``2g.<y>gb``, ``3g.<z>gb``, ``7g.<w>gb`` of NVIDIA's table) and the 1g profile
    with two memory slices (``1g.<y>gb``: 10 vs 20 on A100 80GB); ``mib`` the MiB of 1, 2, 4 and
    8 slices.
    """
    one, two, four, whole, one_double = gb
    m1, m2, m4, m8 = mib
    table = (
        MIGProfile(f"1g.{one}gb", m1, 1, 1, 7, (0, 1, 2, 3, 4, 5, 6)),
        MIGProfile(f"1g.{one}gb+me", m1, 1, 1, 1, (0, 1, 2, 3, 4, 5, 6)),
        MIGProfile(f"1g.{one_double}gb", m2, 1, 2, 4, (0, 2, 4, 6)),
        MIGProfile(f"2g.{two}gb", m2, 2, 2, 3, (0, 2, 4)),
        MIGProfile(f"3g.{four}gb", m4, 3, 4, 2, (0, 4)),
        MIGProfile(f"4g.{four}gb", m4, 4, 4, 1, (0,)),
        MIGProfile(f"7g.{whole}gb", m8, 7, 8, 1, (0,)),
    )
    return MIGProduct(family, names, 7, 8, MappingProxyType({p.name: p for p in table}))


_PRODUCTS: Final = (
    # A30-24GB: 4 compute and 4 memory slices. MiB as NVML reports them on an A30 (NVIDIA's
    # go-nvml A30 mock, pkg/nvml/mock/shared/gpus/a30.go).
    MIGProduct(
        "A30 24GB",
        ("NVIDIA A30",),
        4,
        4,
        MappingProxyType(
            {
                p.name: p
                for p in (
                    MIGProfile("1g.6gb", 5836, 1, 1, 4, (0, 1, 2, 3)),
                    MIGProfile("1g.6gb+me", 5836, 1, 1, 1, (0, 1, 2, 3)),
                    MIGProfile("2g.12gb", 11672, 2, 2, 2, (0, 2)),
                    MIGProfile("2g.12gb+me", 11672, 2, 2, 1, (0, 2)),
                    MIGProfile("4g.24gb", 23344, 4, 4, 1, (0,)),
                )
            }
        ),
    ),
    # A100 40GB: -lgip 4.75 / 9.62 / 19.50 / 39.25 GiB (go-nvml's DGX A100 mock: 4864, 9856,
    # 19968, 40192 MiB). The 2-slice 1g profile is 1g.10gb (R525+).
    _eight_slice(
        "A100 40GB",
        ("NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB"),
        (5, 10, 20, 40, 10),
        (4864, 9856, 19968, 40192),
    ),
    # A100 80GB: -lgip 9.50 / 19.50 / 39.25 / 79.00 GiB.
    _eight_slice(
        "A100 80GB",
        ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe"),
        (10, 20, 40, 80, 20),
        (_gib(9.5), _gib(19.5), _gib(39.25), _gib(79.0)),
    ),
    # H100 80GB (SXM5 "HBM3" and PCIe): -lgip 9.75 / 19.62 / 39.50 / 79.25 GiB.
    _eight_slice(
        "H100 80GB",
        ("NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe"),
        (10, 20, 40, 80, 20),
        (9984, 20096, 40448, 81152),
    ),
    # H100 94GB (H100 NVL): estimated, H100 80GB's MiB x 94/80, to 128 MiB.
    _eight_slice(
        "H100 94GB",
        ("NVIDIA H100 NVL",),
        (12, 24, 47, 94, 24),
        (11648, 23552, 47488, 95232),
    ),
    # H100 96GB (the H100 of a GH200): estimated, H100 80GB's MiB x 96/80, to 128 MiB.
    _eight_slice(
        "H100 96GB",
        ("NVIDIA GH200 480GB",),
        (12, 24, 48, 96, 24),
        (11904, 24064, 48512, 97280),
    ),
    # H200 141GB (SXM and NVL): -lgip 16.00 GiB for 1g.18gb and 32.50 for the 2-slice
    # profiles, 140.00 for 7g.141gb; the 4-slice 65.50 GiB is estimated between them.
    _eight_slice(
        "H200 141GB",
        ("NVIDIA H200", "NVIDIA H200 NVL"),
        (18, 35, 71, 141, 35),
        (_gib(16.0), _gib(32.5), _gib(65.5), _gib(140.0)),
    ),
    # B200 180GB: estimated from the table's fractions of ~179 GiB usable.
    _eight_slice(
        "B200 180GB",
        ("NVIDIA B200",),
        (23, 45, 90, 180, 45),
        (_gib(22.0), _gib(44.5), _gib(89.5), _gib(179.0)),
    ),
)

MIG_PRODUCTS: Final[Mapping[str, MIGProduct]] = MappingProxyType(
    {name: product for product in _PRODUCTS for name in product.names}
)
"""Every MIG-capable product by NVML name (several names share one table)."""


def product_table(product: str) -> MIGProduct | None:
    """The MIG table of ``product`` (an NVML name), or ``None`` when NVIDIA lists none."""
    return MIG_PRODUCTS.get(product)


def profiles_for(product: str) -> Mapping[str, MIGProfile]:
    """``product``'s profiles by name, smallest first; empty for a product without MIG."""
    table = MIG_PRODUCTS.get(product)
    return table.profiles if table is not None else MappingProxyType({})


_CI_PREFIX = re.compile(r"^[0-9]+c\.")


def gpu_instance_profile(name: str) -> str:
    """The GPU instance profile of a MIG device profile: ``1c.3g.40gb`` -> ``3g.40gb``
    (a compute instance smaller than its GPU instance is named with a ``<n>c.`` prefix)."""
    return _CI_PREFIX.sub("", name, count=1)


def profile(product: str, name: str) -> MIGProfile | None:
    """Profile ``name`` of ``product`` (a ``<n>c.`` compute-instance prefix is looked up as
    its GPU instance), or ``None`` when the product has no such profile."""
    return profiles_for(product).get(gpu_instance_profile(name))


def products_offering(name: str) -> tuple[str, ...]:
    """NVML product names that offer profile ``name``, in table order.

    ``"2g.20gb"`` -> the A100 80GB and H100 80GB names; ``"1g.18gb"`` -> the H200 names.
    """
    gi = gpu_instance_profile(name)
    return tuple(
        product_name
        for product in _PRODUCTS
        if gi in product.profiles
        for product_name in product.names
    )


def _known(product: str) -> MIGProduct:
    table = MIG_PRODUCTS.get(product)
    if table is None:
        raise ValueError(
            f"no MIG profile table for product {product!r}; known: {', '.join(MIG_PRODUCTS)}"
        )
    return table


def _unknown_profile(product: str, name: str) -> str:
    offered = products_offering(name)
    hint = f" ({name} is a profile of {', '.join(offered)})" if offered else ""
    return (
        f"{product} has no MIG profile {name!r}{hint}; "
        f"its profiles: {', '.join(profiles_for(product))}"
    )


def layout_problems(product: str, instances: Iterable[tuple[str, int]]) -> list[str]:
    """What is wrong with GPU instances ``(profile, start)`` on one ``product`` GPU.

    Empty when the layout is one NVML could create: every profile is the product's, every
    start one of the profile's placements, no two instances share a memory slice, no profile
    exceeds its instance count, and the compute slices add up to at most the product's.
    A product without a table gets one problem naming the known products.
    """
    table = MIG_PRODUCTS.get(product)
    if table is None:
        return [f"no MIG profile table for product {product!r}"]
    problems: list[str] = []
    placed: list[Placement] = []
    for i, (name, start) in enumerate(instances):
        found = table.profiles.get(gpu_instance_profile(name))
        if found is None:
            problems.append(f"[{i}]: {_unknown_profile(product, name)}")
            continue
        if start not in found.starts:
            problems.append(
                f"[{i}]: {found.name} cannot start at memory slice {start} on {product}; "
                f"it starts at {', '.join(map(str, found.starts))}"
            )
            continue
        placed.append(Placement(found, start))
    for x, y in combinations(placed, 2):
        if x.start < y.end and y.start < x.end:
            problems.append(
                f"{x.profile.name} at {x.start} and {y.profile.name} at {y.start} "
                "share memory slices"
            )
    for name, count in Counter(p.profile.name for p in placed).items():
        limit = table.profiles[name].max_instances
        if count > limit:
            problems.append(f"{count} x {name}: {product} allows at most {limit}")
    compute = sum(p.profile.compute_slices for p in placed)
    if compute > table.compute_slices:
        problems.append(
            f"the instances need {compute} compute slices; {product} has {table.compute_slices}"
        )
    return problems


def place(product: str, layout: Sequence[str]) -> tuple[Placement, ...]:
    """Place ``layout`` (profile names) on one ``product`` GPU, in layout order.

    Largest profiles first, lowest free start first, backtracking when a choice leaves no
    room, so every layout NVML accepts is placed. Raises ``ValueError`` for an unknown
    product or profile, too many instances of a profile, more compute slices than the GPU
    has, or a layout that does not fit.
    """
    table = _known(product)
    profiles: list[MIGProfile] = []
    for name in layout:
        found = table.profiles.get(name)
        if found is None:
            raise ValueError(_unknown_profile(product, name))
        profiles.append(found)
    if sum(p.compute_slices for p in profiles) > table.compute_slices:
        raise ValueError(
            f"MIG layout {list(layout)} needs more than the GPU's "
            f"{table.compute_slices} compute slices"
        )
    order = sorted(
        range(len(profiles)), key=lambda i: (-profiles[i].memory_slices, profiles[i].name)
    )
    used = [False] * table.memory_slices
    starts: list[int] = [-1] * len(profiles)

    def search(k: int) -> bool:
        if k == len(order):
            return True
        i = order[k]
        current = profiles[i]
        # Identical profiles are interchangeable: take their starts in increasing order.
        floor = starts[order[k - 1]] + 1 if k and profiles[order[k - 1]] == current else 0
        for start in current.starts:
            span = range(start, start + current.memory_slices)
            if start < floor or any(used[s] for s in span):
                continue
            for s in span:
                used[s] = True
            starts[i] = start
            if search(k + 1):
                return True
            for s in span:
                used[s] = False
        return False

    if not search(0):
        raise ValueError(f"MIG layout {list(layout)} does not fit on one {product}")
    for name, count in Counter(layout).items():
        if count > table.profiles[name].max_instances:
            raise ValueError(
                f"MIG layout {list(layout)}: {product} allows at most "
                f"{table.profiles[name].max_instances} x {name}"
            )
    return tuple(Placement(p, start) for p, start in zip(profiles, starts, strict=True))
