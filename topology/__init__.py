"""GPU interconnect topology: pure graph code over networkx, no Kubernetes imports.

Installed as ``gpusched.topology``. Three modules, re-exported here:

- :mod:`.graph`: the per-node NVLink/PCIe graph (:func:`build_topology`) and the pair and set
  scores;
- :mod:`.selection`: GPU-set selection on that graph, the best ``n`` of a node's free GPUs
  (:func:`best_gpu_set`, :func:`greedy_gpu_set`, and :class:`GPUTopology`, which holds one
  layout's score matrix and memoises its searches), and sets that meet a pod's rule
  (:class:`SetRule`: a bandwidth floor, contiguity);
- :mod:`.bandwidth`: GB/s between two GPUs, by NVLink count and product (the floor's unit).

Neither imports anything from Kubernetes or the rest of gpusched (a test checks it); the
scheduler's GPUFit plugin turns a node's ``GPUNodeInventory`` into GPU indices and links.
"""

from .bandwidth import (
    DEFAULT_NVLINK_GBPS,
    DEFAULT_PCIE_GBPS,
    NVLINK_GBPS,
    PCIE_GBPS,
    nvlink_gbps,
    pair_gbps,
    pcie_gbps,
)
from .graph import (
    NVLINK_SCORE,
    PCIE_LEVELS,
    PCIE_SCORE,
    QUALITY_CEILING,
    QUALITY_FLOOR,
    Link,
    LinkLike,
    PCIeLevel,
    build_topology,
    link_score,
    nvlink_domains,
    pair_score,
    set_quality,
    set_score,
    weakest_link,
)
from .selection import (
    GPUTopology,
    Scores,
    SetRule,
    best_gpu_set,
    greedy_gpu_set,
    link_score_of,
    matrix_set_score,
    score_matrix,
)

__all__ = [
    "DEFAULT_NVLINK_GBPS",
    "DEFAULT_PCIE_GBPS",
    "NVLINK_GBPS",
    "NVLINK_SCORE",
    "PCIE_GBPS",
    "PCIE_LEVELS",
    "PCIE_SCORE",
    "QUALITY_CEILING",
    "QUALITY_FLOOR",
    "GPUTopology",
    "Link",
    "LinkLike",
    "PCIeLevel",
    "Scores",
    "SetRule",
    "best_gpu_set",
    "build_topology",
    "greedy_gpu_set",
    "link_score",
    "link_score_of",
    "matrix_set_score",
    "nvlink_domains",
    "nvlink_gbps",
    "pair_gbps",
    "pair_score",
    "pcie_gbps",
    "score_matrix",
    "set_quality",
    "set_score",
    "weakest_link",
]
