"""GPU interconnect topology: pure graph code over networkx, no Kubernetes imports.

Installed as ``gpusched.topology``. :mod:`.graph` holds the per-node NVLink/PCIe graph and
the pair and set scores; GPU-set selection builds on it.
"""

from .graph import (
    NVLINK_SCORE,
    PCIE_LEVELS,
    PCIE_SCORE,
    Link,
    LinkLike,
    PCIeLevel,
    build_topology,
    link_score,
    nvlink_domains,
    pair_score,
    set_score,
    weakest_link,
)

__all__ = [
    "NVLINK_SCORE",
    "PCIE_LEVELS",
    "PCIE_SCORE",
    "Link",
    "LinkLike",
    "PCIeLevel",
    "build_topology",
    "link_score",
    "nvlink_domains",
    "pair_score",
    "set_score",
    "weakest_link",
]
