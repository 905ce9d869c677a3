"""GPU-set selection: which ``n`` of a node's free GPUs a pod should get.

The input is the node's interconnect graph (:func:`~gpusched.topology.build_topology`), turned
once into a matrix of pair scores (:func:`score_matrix`, ``scores[a][b]`` =
:func:`~gpusched.topology.pair_score`), so the searches below index lists instead of asking
networkx for edges in their inner loops.

**Best set.** The set of ``n`` free GPUs with the highest set score (the sum of its pair
scores, go-gpuallocator's measure); among equally good sets, the one least connected to the
free GPUs left out (the sum of pair scores across the cut, so the GPUs that remain stay well
connected for the next multi-GPU pod); then the lowest indices. For ``n = 1`` that is the free
GPU least connected to the other free GPUs.

- :func:`best_gpu_set` finds it exhaustively, over all ``C(free, n)`` sets;
- :func:`greedy_gpu_set` approximates it when that is too many: from each free GPU as a seed,
  add the GPU with the most score to the set so far, and keep the best result. On the
  DGX-1's hybrid cube-mesh it finds the optimum for every ``n``; in general it does not.

:class:`GPUTopology` holds one layout's graph and matrix, picks the exhaustive search while
``C(free, n)`` is at most ``max_combinations`` and the greedy one above it, and memoises each
result by free set and ``n``: nodes with the same layout share one :class:`GPUTopology`, so a
fleet of identical nodes in identical states searches once.

Pure Python over networkx, like :mod:`.graph`: nothing from Kubernetes or the rest of
gpusched. Callers turn their own records into GPU indices and links (anything
:class:`~gpusched.topology.LinkLike`) and call :func:`~gpusched.topology.build_topology`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from typing import Final, TypeAlias

import networkx as nx

from .graph import LinkLike, build_topology, pair_score

__all__ = [
    "GPUTopology",
    "Scores",
    "best_gpu_set",
    "greedy_gpu_set",
    "matrix_set_score",
    "score_matrix",
]

Scores: TypeAlias = Sequence[Sequence[int]]
"""A symmetric matrix of pair scores by GPU index (``scores[a][b]``; the diagonal is unused)."""

_MEMO_MAX: Final = 1 << 16
"""Memoised searches per :class:`GPUTopology` before its memo resets."""


def score_matrix(graph: nx.Graph) -> tuple[tuple[int, ...], ...]:
    """The pair-score matrix of ``graph``: ``[a][b]`` = :func:`pair_score` (0 on the diagonal).

    The vertices must be the GPU indices ``0 .. n-1`` (as :func:`build_topology` makes them
    from ``range(n)``); anything else is a ``ValueError``. O(n²).
    """
    count = graph.number_of_nodes()
    if set(graph.nodes) != set(range(count)):
        raise ValueError(f"GPU indices must be 0..{count - 1}, got {sorted(graph.nodes)}")
    return tuple(
        tuple(0 if a == b else pair_score(graph, a, b) for b in range(count)) for a in range(count)
    )


def matrix_set_score(scores: Scores, ids: Sequence[int]) -> int:
    """Sum of ``scores[a][b]`` over every pair of ``ids`` (distinct indices). O(k²) for k ids.

    The matrix counterpart of :func:`gpusched.topology.set_score`, which reads the graph.
    """
    return sum(scores[a][b] for a, b in itertools.combinations(ids, 2))


def _check_request(free: Sequence[int], n: int) -> None:
    if not 1 <= n <= len(free):
        raise ValueError(f"cannot choose {n} of {len(free)} free GPUs: need 1 <= n <= free")


def best_gpu_set(scores: Scores, free: Sequence[int], n: int) -> tuple[tuple[int, ...], int]:
    """The best ``n`` of the ``free`` GPUs by exhaustive search: ``(ids, set score)``.

    Best: the highest set score; then the least connected to the free GPUs left out (the sum of
    pair scores across); then the lowest indices. ``free`` ascending and distinct;
    ``ValueError`` unless ``1 <= n <= len(free)``. O(free² + C(free, n) x n²).
    """
    _check_request(free, n)
    degree = {g: sum(scores[g][h] for h in free if h != g) for g in free}
    best: tuple[int, ...] = ()
    best_key: tuple[int, int] | None = None
    for combo in itertools.combinations(free, n):
        score = matrix_set_score(scores, combo)
        cut = sum(degree[g] for g in combo) - 2 * score
        key = (score, -cut)
        if best_key is None or key > best_key:
            best, best_key = combo, key
    assert best_key is not None  # n <= len(free): at least one combination
    return best, best_key[0]


def greedy_gpu_set(scores: Scores, free: Sequence[int], n: int) -> tuple[tuple[int, ...], int]:
    """A good ``n`` of the ``free`` GPUs, greedily: ``(ids, set score)``.

    From each free GPU as a seed, repeatedly add the free GPU with the most pair score to the
    set so far (ties: lowest index); the best set over all seeds (ties: lowest indices).
    ``free`` distinct; ``ValueError`` unless ``1 <= n <= len(free)``. O(free² x n).
    """
    _check_request(free, n)
    best: tuple[int, ...] = ()
    best_score = -1
    for seed in free:
        chosen = [seed]
        gain = {g: scores[seed][g] for g in free if g != seed}
        total = 0
        while len(chosen) < n:
            pick = max(gain, key=lambda g: (gain[g], -g))
            total += gain.pop(pick)
            chosen.append(pick)
            for g in gain:
                gain[g] += scores[pick][g]
        ids = tuple(sorted(chosen))
        if total > best_score or (total == best_score and ids < best):
            best, best_score = ids, total
    return best, max(best_score, 0)


class GPUTopology:
    """One interconnect layout: its graph, pair-score matrix and a memo of searches.

    Shared by every node with the same layout. Not thread-safe (gpusched's scheduling cycle
    is serial). The memo holds at most 65536 results and is cleared when full.
    """

    __slots__ = ("graph", "max_combinations", "memo", "scores")

    def __init__(self, graph: nx.Graph, max_combinations: int) -> None:
        """``graph`` from :func:`build_topology` over ``range(n)``; searches of more than
        ``max_combinations`` candidate sets (at least 1) are greedy. O(n²)."""
        if max_combinations < 1:
            raise ValueError(f"max_combinations must be >= 1, got {max_combinations}")
        self.graph = graph
        self.scores = score_matrix(graph)
        self.max_combinations = max_combinations
        self.memo: dict[tuple[int, int], tuple[tuple[int, ...], int]] = {}
        """``(free mask, n)`` -> the search's result."""

    @classmethod
    def build(cls, gpu_count: int, links: Iterable[LinkLike], max_combinations: int) -> GPUTopology:
        """The layout of ``gpu_count`` GPUs (indices ``0 .. gpu_count-1``) joined by ``links``.

        ``ValueError`` for a bad link, as :func:`build_topology`. O(n² + links).
        """
        return cls(build_topology(range(gpu_count), links), max_combinations)

    @property
    def gpu_count(self) -> int:
        return len(self.scores)

    def choose(
        self, free: Sequence[int], n: int, *, mask: int | None = None
    ) -> tuple[tuple[int, ...], int]:
        """The best ``n`` of the ``free`` GPUs (module docstring): ``(ids ascending, score)``.

        ``free`` ascending and distinct; ``ValueError`` unless ``1 <= n <= len(free)``.
        ``mask``, bit ``i`` set for each free GPU ``i``, is the memo key; pass it when the
        caller has it at hand, else it is computed from ``free``. O(1) when memoised, else
        :func:`best_gpu_set` or :func:`greedy_gpu_set`.
        """
        _check_request(free, n)
        if mask is None:
            mask = 0
            for gpu in free:
                mask |= 1 << gpu
        key = (mask, n)
        found = self.memo.get(key)
        if found is not None:
            return found
        if math.comb(len(free), n) <= self.max_combinations:
            found = best_gpu_set(self.scores, free, n)
        else:
            found = greedy_gpu_set(self.scores, free, n)
        if len(self.memo) >= _MEMO_MAX:
            self.memo.clear()
        self.memo[key] = found
        return found
