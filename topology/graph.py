"""The GPU interconnect graph of one node, and how close two GPUs are.

One node's GPUs form an undirected graph: a vertex per GPU index, an edge per pair of GPUs
that the node reported a link for. An edge carries what ``nvidia-smi topo -m`` shows for the
pair, split in two because a pair has both:

- ``nvlinks``: how many NVLinks join the pair (0 for none). ``NV2`` in ``nvidia-smi`` is 2.
  On NVSwitch systems (DGX H100) every pair reports the GPU's full link count (``NV18``),
  because all of a GPU's links reach every peer through the switches.
- ``pcie``: the closest common ancestor of the two GPUs in the PCIe tree, as NVML's
  ``nvmlDeviceGetTopologyCommonAncestor`` reports it, named as ``nvidia-smi`` names it
  (best first): ``PIX`` one PCIe switch, ``PXB`` several switches under one host bridge,
  ``PHB`` a host bridge, ``NODE`` host bridges within one NUMA node, ``SYS`` across the
  inter-socket link (QPI/UPI). NVML's ``INTERNAL`` level (two GPUs on one board, K80-era)
  is not modelled.

Scoring follows NVIDIA's go-gpuallocator best-effort policy (``calculateGPUPairScore``), so
results are comparable with the NVIDIA device plugin's allocator:

=========  =====================================
link       score
=========  =====================================
NVLink     100 per link (NV18 scores 1800)
PIX        50
PXB        40
PHB        30
NODE       20
SYS        10
=========  =====================================

A pair's score is the sum of its NVLink score and its PCIe score, so any NVLink outranks
every PCIe path and PCIe breaks ties between equal NVLink counts. Unlike go-gpuallocator,
which stops at twelve links, every NVLink count scores (NVSwitch pairs report 18). The score
is bandwidth-ish: NVLink 2, 3 and 4 all move about 25 GB/s per link and direction, so
``100 * nvlinks`` is proportional to NVLink bandwidth on V100, A100 and H100.

**Set quality** (:func:`set_quality`) puts a set's score on a fixed 0..100 scale that any
node can be judged on alone, without the other nodes of a scheduling cycle: the mean pair
score of the set on a logarithmic scale from one ``SYS`` hop (10, quality 0) to eighteen
NVLinks under one PCIe switch (``NV18`` + ``PIX``, 1850, a DGX H100 pair: quality 100), and
clamped to that range. Logarithmic because pair scores span two orders of magnitude: on a
linear scale every non-NVSwitch set would sit within a few points of 0 and topology would stop
telling a DGX-1's NV2 pair (quality 61) from its cross-socket PCIe pair (0), while on this one
the order across products stays the order of the pair scores: an NVSwitch pair 99-100, an
A40 bridged pair (``NV4`` + ``PIX``) 72, ``NV2`` + ``PIX`` 61, ``NV1`` + ``PIX`` 51, ``PIX``
alone 30, ``PHB`` 21, ``NODE`` 13, ``SYS`` 0. A layout better than the ceiling (more than
eighteen NVLinks a pair) scores 100 like a DGX H100.

This module is pure Python over networkx; it imports nothing from Kubernetes or gpusched.
Links are taken structurally (:class:`LinkLike`), so the inventory's link records and the
small :class:`Link` dataclass here are both accepted without conversion. GPU-set selection
builds on this in :mod:`.selection`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from itertools import combinations
from math import comb, log
from typing import Final, Protocol

import networkx as nx

__all__ = [
    "NVLINK_SCORE",
    "PCIE_LEVELS",
    "PCIE_SCORE",
    "QUALITY_CEILING",
    "QUALITY_FLOOR",
    "Link",
    "LinkLike",
    "PCIeLevel",
    "build_topology",
    "link_score",
    "nvlink_domains",
    "pair_score",
    "set_quality",
    "set_score",
    "weakest_link",
]


class PCIeLevel(StrEnum):
    """The closest common PCIe ancestor of two GPUs, named as ``nvidia-smi topo -m`` does.

    Members are ordered best (closest) first. NVML equivalents:
    ``PIX`` = ``NVML_TOPOLOGY_SINGLE``, ``PXB`` = ``NVML_TOPOLOGY_MULTIPLE``,
    ``PHB`` = ``NVML_TOPOLOGY_HOSTBRIDGE``, ``NODE`` = ``NVML_TOPOLOGY_NODE``,
    ``SYS`` = ``NVML_TOPOLOGY_SYSTEM``.
    """

    PIX = "PIX"
    PXB = "PXB"
    PHB = "PHB"
    NODE = "NODE"
    SYS = "SYS"


PCIE_LEVELS: tuple[str, ...] = tuple(level.value for level in PCIeLevel)
"""The PCIe level names, best first."""

NVLINK_SCORE = 100
"""Score per NVLink between a pair (go-gpuallocator's value)."""

PCIE_SCORE: dict[str, int] = {"PIX": 50, "PXB": 40, "PHB": 30, "NODE": 20, "SYS": 10}
"""Score of a pair's PCIe common ancestor (go-gpuallocator's values)."""


QUALITY_FLOOR: Final = 10
"""Mean pair score of quality 0: one ``SYS`` hop (go-gpuallocator's weakest PCIe path)."""
QUALITY_CEILING: Final = 18 * 100 + 50
"""Mean pair score of quality 100: ``NV18`` + ``PIX``, the best pair of a DGX H100."""


class LinkLike(Protocol):
    """Anything that describes the link between GPUs ``a`` and ``b`` of one node."""

    @property
    def a(self) -> int: ...

    @property
    def b(self) -> int: ...

    @property
    def nvlinks(self) -> int: ...

    @property
    def pcie(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Link:
    """The link between GPUs ``a`` and ``b``: NVLink count and PCIe common ancestor."""

    a: int
    b: int
    nvlinks: int = 0
    pcie: str = PCIeLevel.SYS.value


def link_score(nvlinks: int, pcie: str) -> int:
    """Score of one pair: ``NVLINK_SCORE * nvlinks + PCIE_SCORE[pcie]``. O(1).

    Raises ``ValueError`` for a negative NVLink count or an unknown PCIe level.
    """
    if nvlinks < 0:
        raise ValueError(f"nvlinks must be >= 0, got {nvlinks}")
    try:
        return NVLINK_SCORE * nvlinks + PCIE_SCORE[pcie]
    except KeyError:
        raise ValueError(f"unknown PCIe level {pcie!r}; expected one of {PCIE_LEVELS}") from None


def build_topology(gpu_indices: Iterable[int], links: Iterable[LinkLike]) -> nx.Graph:
    """Build the interconnect graph of one node.

    Vertices are the GPU indices; each link becomes an edge with attributes ``nvlinks``
    (int), ``pcie`` (str, a :data:`PCIE_LEVELS` name) and ``weight`` (int, the pair score of
    :func:`link_score`). Pairs with no link get no edge. O(n + m) for n GPUs and m links.

    Raises ``ValueError`` for a link to an unknown GPU, a self-link, a pair given twice, a
    negative NVLink count or an unknown PCIe level, naming the offending link.
    """
    graph = nx.Graph()
    graph.add_nodes_from(gpu_indices)
    for link in links:
        a, b = link.a, link.b
        where = f"link {a}-{b}"
        if a == b:
            raise ValueError(f"{where}: a GPU cannot link to itself")
        for end in (a, b):
            if end not in graph:
                raise ValueError(f"{where}: GPU {end} is not among the node's GPUs")
        if graph.has_edge(a, b):
            raise ValueError(f"{where}: the pair is given more than once")
        try:
            weight = link_score(link.nvlinks, link.pcie)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        graph.add_edge(a, b, nvlinks=link.nvlinks, pcie=link.pcie, weight=weight)
    return graph


def pair_score(graph: nx.Graph, a: int, b: int) -> int:
    """Score of the pair ``a``, ``b``; 0 if the node reported no link for it. O(1).

    Raises ``ValueError`` if ``a == b`` and ``KeyError`` if either GPU is not in the graph.
    """
    if a == b:
        raise ValueError(f"pair_score needs two different GPUs, got {a} twice")
    for gpu in (a, b):
        if gpu not in graph:
            raise KeyError(gpu)
    data = graph.get_edge_data(a, b)
    return 0 if data is None else int(data["weight"])


def set_score(graph: nx.Graph, gpus: Iterable[int]) -> int:
    """Sum of :func:`pair_score` over every pair in ``gpus`` (go-gpuallocator's set score).

    Duplicates in ``gpus`` are ignored; fewer than two GPUs score 0. O(k²) for k GPUs.
    """
    members = sorted(set(gpus))
    return sum(pair_score(graph, a, b) for a, b in combinations(members, 2))


@lru_cache(maxsize=4096)
def set_quality(score: int, n: int) -> int:
    """How well connected a set of ``n`` GPUs with set score ``score`` is, 0..100, judged
    alone (module docstring): ``100 * ln(mean / 10) / ln(1850 / 10)`` of the mean pair score
    ``score / C(n, 2)``, rounded down and clamped to 0..100. 0 for fewer than two GPUs or a
    set whose pairs average at most one ``SYS`` hop. O(1) (memoised).

    ``ValueError`` for a negative ``score`` or ``n``.
    """
    if score < 0 or n < 0:
        raise ValueError(f"set_quality needs score >= 0 and n >= 0, got {score} and {n}")
    pairs = comb(n, 2)
    if not pairs or score <= QUALITY_FLOOR * pairs:
        return 0
    if score >= QUALITY_CEILING * pairs:
        return 100
    span = log(QUALITY_CEILING / QUALITY_FLOOR)
    return min(int(100 * log(score / (QUALITY_FLOOR * pairs)) / span + 1e-9), 100)


def weakest_link(graph: nx.Graph, gpus: Iterable[int]) -> int | None:
    """Lowest :func:`pair_score` among the pairs in ``gpus`` (the set's bottleneck).

    ``None`` when there is no pair (fewer than two distinct GPUs). O(k²) for k GPUs.
    """
    members = sorted(set(gpus))
    return min((pair_score(graph, a, b) for a, b in combinations(members, 2)), default=None)


def nvlink_domains(graph: nx.Graph) -> list[frozenset[int]]:
    """GPUs grouped by NVLink reachability (connected components over NVLink edges).

    A GPU with no NVLink forms a domain of its own. Ordered by each domain's lowest index.
    O(n + m).
    """
    nvlink_graph = nx.Graph()
    nvlink_graph.add_nodes_from(graph.nodes)
    nvlink_graph.add_edges_from(
        (a, b) for a, b, nvlinks in graph.edges(data="nvlinks", default=0) if nvlinks > 0
    )
    domains = [frozenset(component) for component in nx.connected_components(nvlink_graph)]
    return sorted(domains, key=min)
