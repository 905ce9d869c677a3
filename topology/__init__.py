"""GPU interconnect topology: pure graph code over networkx, no Kubernetes imports.

Installed as ``gpusched.topology``. Two modules, re-exported here:

- :mod:`.graph`: the per-node NVLink/PCIe graph (:func:`build_topology`) and the pair and set
  scores;
- :mod:`.selection`: GPU-set selection on that graph, the best ``n`` of a node's free GPUs
  (:func:`best_gpu_set`, :func:`greedy_gpu_set`, and :class:`GPUTopology`, which holds one
  layout's score matrix and memoises its searches).

Neither imports anything from Kubernetes or the rest of gpusched (a test checks it); the
scheduler's GPUFit plugin turns a node's ``GPUNodeInventory`` into GPU indices and links.
"""

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
    best_gpu_set,
    greedy_gpu_set,
    matrix_set_score,
    score_matrix,
)

__all__ = [
    "NVLINK_SCORE",
    "PCIE_LEVELS",
    "PCIE_SCORE",
    "QUALITY_CEILING",
    "QUALITY_FLOOR",
    "GPUTopology",
    "Link",
    "LinkLike",
    "PCIeLevel",
    "Scores",
    "best_gpu_set",
    "build_topology",
    "greedy_gpu_set",
    "link_score",
    "matrix_set_score",
    "nvlink_domains",
    "pair_score",
    "score_matrix",
    "set_quality",
    "set_score",
    "weakest_link",
]
