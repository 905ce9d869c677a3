"""How fast two GPUs of one node talk: GB/s per pair, from the link and the GPU product.

A pod may ask for a floor (``gpusched.io/min-bandwidth-gbps``): the slowest pair among the GPUs
it gets must move at least that much. A pair's bandwidth is a table lookup:

- joined by NVLink: ``nvlinks x`` the product's per-link bandwidth (:data:`NVLINK_GBPS`);
- otherwise: the product's PCIe x16 link (:data:`PCIE_GBPS`), whatever the PCIe level (the
  level still orders pairs in the score; peer-to-peer across the sockets is often slower than
  the link, which this table does not model).

All figures are **GB/s in both directions together**, as NVIDIA's datasheets quote NVLink
("NVLink: 900 GB/s" for an H100 SXM is 18 links x 50 GB/s, 25 GB/s each way). An NVSwitch pair
(``NV18`` on a DGX H100) reports every link of the GPU, so it gets the GPU's full 900. A
product is matched by the first key of the table found in its NVML name (``"Tesla
V100-SXM2-32GB"`` contains ``V100``); an unknown product with NVLink gets
:data:`DEFAULT_NVLINK_GBPS` per link (NVLink 2, 3 and 4 all move 25 GB/s per link and direction)
and PCIe Gen3 (:data:`DEFAULT_PCIE_GBPS`). Sources and the exact numbers: docs/gpu_fit.md,
"Bandwidth".

Pure Python, O(1) per pair (O(table) per product name, memoised).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Final

__all__ = [
    "DEFAULT_NVLINK_GBPS",
    "DEFAULT_PCIE_GBPS",
    "NVLINK_GBPS",
    "PCIE_GBPS",
    "nvlink_gbps",
    "pair_gbps",
    "pcie_gbps",
]

NVLINK_GBPS: Final[tuple[tuple[str, float], ...]] = (
    ("GB200", 100.0),  # NVLink 5: 18 links, 1,800 GB/s per GPU
    ("B200", 100.0),
    ("B100", 100.0),
    ("GH200", 50.0),  # NVLink 4: 18 links, 900 GB/s
    ("H200", 50.0),
    ("H100", 50.0),  # SXM: 18 links, 900 GB/s; H100 NVL: bridges, 600 GB/s
    ("A100", 50.0),  # NVLink 3: 12 links, 600 GB/s
    ("A30", 50.0),  # NVLink 3 bridge: 4 links, 200 GB/s
    ("A40", 28.125),  # NVLink 3 bridge: 4 links, 112.5 GB/s
    ("A6000", 28.125),  # RTX A6000: as the A40
    ("V100", 50.0),  # NVLink 2: 6 links, 300 GB/s
    ("P100", 40.0),  # NVLink 1: 4 links, 160 GB/s
)
"""Per NVLink, GB/s both directions, by a key found in the product name (first match wins:
longer keys that contain shorter ones come first)."""

PCIE_GBPS: Final[tuple[tuple[str, float], ...]] = (
    ("GB200", 128.0),  # PCIe Gen5 x16
    ("B200", 128.0),
    ("B100", 128.0),
    ("GH200", 128.0),
    ("H200", 128.0),
    ("H100", 128.0),
    ("L40", 64.0),  # Gen4 (L40, L40S)
    ("A100", 64.0),  # Gen4
    ("A30", 64.0),
    ("A40", 64.0),
    ("A6000", 64.0),
    ("A10", 64.0),
    ("L4", 64.0),
    ("V100", 32.0),  # Gen3
    ("T4", 32.0),
    ("P100", 32.0),
)
"""A PCIe x16 link, GB/s both directions, by a key found in the product name."""

DEFAULT_NVLINK_GBPS: Final = 50.0
"""Per NVLink of a product not in :data:`NVLINK_GBPS`."""
DEFAULT_PCIE_GBPS: Final = 32.0
"""PCIe of a product not in :data:`PCIE_GBPS` (Gen3 x16: the slowest a data-centre GPU has)."""


def _lookup(table: tuple[tuple[str, float], ...], product: str, default: float) -> float:
    upper = product.upper()
    return next((gbps for key, gbps in table if key in upper), default)


@lru_cache(maxsize=256)
def nvlink_gbps(product: str) -> float:
    """GB/s (both directions) of one NVLink of ``product`` (its NVML name). O(1) memoised."""
    return _lookup(NVLINK_GBPS, product, DEFAULT_NVLINK_GBPS)


@lru_cache(maxsize=256)
def pcie_gbps(product: str) -> float:
    """GB/s (both directions) of ``product``'s PCIe x16 link. O(1) memoised."""
    return _lookup(PCIE_GBPS, product, DEFAULT_PCIE_GBPS)


def pair_gbps(nvlinks: int, product_a: str, product_b: str | None = None) -> float:
    """GB/s (both directions) between two GPUs joined by ``nvlinks`` NVLinks (0: PCIe only):
    the slower of the two products' figures. O(1).

    ``ValueError`` for a negative NVLink count.
    """
    if nvlinks < 0:
        raise ValueError(f"nvlinks must be >= 0, got {nvlinks}")
    other = product_a if product_b is None else product_b
    if nvlinks:
        return nvlinks * min(nvlink_gbps(product_a), nvlink_gbps(other))
    return min(pcie_gbps(product_a), pcie_gbps(other))
