"""GPU-set selection: which ``n`` of a node's free GPUs a pod should get.

The input is the node's interconnect graph (:func:`~gpusched.topology.build_topology`), turned
once into a matrix of pair scores (:func:`score_matrix`, ``scores[a][b]`` =
:func:`~gpusched.topology.pair_score`), so the searches below index lists instead of asking
networkx for edges in their inner loops.

**Best set.** The set of ``n`` free GPUs with the most NVLinks: the highest *link score*, the
sum of its pair scores with the PCIe part dropped for pairs joined by NVLink
(:func:`link_score_of`), so a set never trades an NVLink for PCIe proximity; then the
highest set score (the sum of its pair scores, go-gpuallocator's measure: PCIe proximity
breaks ties); among equally good sets, the one least connected to the
free GPUs left out (the sum of pair scores across the cut, so the GPUs that remain stay well
connected for the next multi-GPU pod); then the lowest indices. For ``n = 1`` that is the free
GPU least connected to the other free GPUs.

- :func:`best_gpu_set` finds it exhaustively, over all ``C(free, n)`` sets;
- :func:`greedy_gpu_set` approximates it when that is too many: from each free GPU as a seed,
  add the GPU with the most score to the set so far, and keep the best result (by set
  score: it does not rank by NVLinks first). On the
  DGX-1's hybrid cube-mesh it finds the optimum for every ``n``; in general it does not.

:class:`GPUTopology` holds one layout's graph and matrix, picks the exhaustive search while
``C(free, n)`` is at most ``max_combinations`` and the greedy one above it, and memoises each
result by free set and ``n``: nodes with the same layout share one :class:`GPUTopology`, so a
fleet of identical nodes in identical states searches once.

**Rules.** A pod may require more of its set than the best score (:class:`SetRule`): a floor
on the slowest pair's bandwidth (:mod:`.bandwidth`, from a GB/s matrix the caller gives), and
*contiguity*: the chosen GPUs form one connected graph over the NVLinks among them (every GPU
reaches every other by NVLink hops that stay inside the set; so no pair depends on PCIe or a
GPU another pod holds). ``choose(..., rule=...)`` is the best set among those that meet the
rule, by the same order, or ``None``; :meth:`GPUTopology.offer` is the best bottleneck any set
of the size offers, which is what a rejection tells the user.

Pure Python over networkx, like :mod:`.graph`: nothing from Kubernetes or the rest of
gpusched. Callers turn their own records into GPU indices and links (anything
:class:`~gpusched.topology.LinkLike`) and call :func:`~gpusched.topology.build_topology`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final, TypeAlias

import networkx as nx

from .graph import NVLINK_SCORE, LinkLike, build_topology, pair_score

__all__ = [
    "GPUTopology",
    "Scores",
    "SetRule",
    "best_gpu_set",
    "greedy_gpu_set",
    "link_score_of",
    "matrix_set_score",
    "score_matrix",
]

Scores: TypeAlias = Sequence[Sequence[int]]
"""A symmetric matrix of pair scores by GPU index (``scores[a][b]``; the diagonal is unused)."""

_MEMO_MAX: Final = 1 << 16
"""Memoised searches per :class:`GPUTopology` before its memo resets."""


@dataclass(frozen=True, slots=True)
class SetRule:
    """What a chosen set must meet besides being the best (module docstring, "Rules")."""

    min_gbps: float = 0.0
    """Every pair of the set moves at least this many GB/s (0: no floor)."""
    contiguous: bool = False
    """The set is connected over the NVLinks among its GPUs."""

    def __bool__(self) -> bool:
        return self.min_gbps > 0 or self.contiguous


NO_RULE: Final = SetRule()


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


def link_score_of(pair: int) -> int:
    """A pair score with its PCIe part dropped when the pair has NVLink (``NV2`` + ``PIX``:
    250 -> 200; ``SYS`` alone stays 10). O(1)."""
    return pair - pair % NVLINK_SCORE if pair >= NVLINK_SCORE else pair


def best_gpu_set(scores: Scores, free: Sequence[int], n: int) -> tuple[tuple[int, ...], int]:
    """The best ``n`` of the ``free`` GPUs by exhaustive search: ``(ids, set score)``.

    Best: the highest link score (the sum of :func:`link_score_of` its pairs: NVLinks, and
    PCIe only for pairs without); then the highest set score (PCIe proximity breaks ties);
    then the least connected to the free GPUs left out (the sum of pair scores across); then
    the lowest indices. ``free`` ascending and distinct;
    ``ValueError`` unless ``1 <= n <= len(free)``. O(free² + C(free, n) x n²).
    """
    found = _best(scores, free, n, None)
    assert found is not None  # no predicate: every combination is allowed
    return found


Allowed: TypeAlias = Callable[[Sequence[int]], bool]
"""A predicate on a candidate set (ascending ids): whether it meets the pod's rule."""


def _best(
    scores: Scores, free: Sequence[int], n: int, allowed: Allowed | None
) -> tuple[tuple[int, ...], int] | None:
    """:func:`best_gpu_set` over the sets ``allowed`` accepts (all when ``None``); ``None``
    when it accepts none."""
    _check_request(free, n)
    degree = {g: sum(scores[g][h] for h in free if h != g) for g in free}
    best: tuple[int, ...] = ()
    best_key: tuple[int, int, int] | None = None
    for combo in itertools.combinations(free, n):
        score = links = 0
        for a, b in itertools.combinations(combo, 2):
            pair = scores[a][b]
            score += pair
            links += link_score_of(pair)
        cut = sum(degree[g] for g in combo) - 2 * score
        key = (links, score, -cut)
        if (best_key is None or key > best_key) and (allowed is None or allowed(combo)):
            best, best_key = combo, key
    return None if best_key is None else (best, best_key[1])


def greedy_gpu_set(scores: Scores, free: Sequence[int], n: int) -> tuple[tuple[int, ...], int]:
    """A good ``n`` of the ``free`` GPUs, greedily: ``(ids, set score)``.

    From each free GPU as a seed, repeatedly add the free GPU with the most pair score to the
    set so far (ties: lowest index); the best set over all seeds (ties: lowest indices).
    ``free`` distinct; ``ValueError`` unless ``1 <= n <= len(free)``. O(free² x n).
    """
    found = _greedy(scores, free, n, None)
    assert found is not None
    return found


def _greedy(
    scores: Scores,
    free: Sequence[int],
    n: int,
    allowed: Allowed | None,
    joinable: Callable[[Sequence[int], int], bool] | None = None,
) -> tuple[tuple[int, ...], int] | None:
    """:func:`greedy_gpu_set`, adding only GPUs ``joinable`` accepts next to the set so far
    and keeping only results ``allowed`` accepts; ``None`` when no seed gives one."""
    _check_request(free, n)
    best: tuple[int, ...] = ()
    best_score = -1
    for seed in free:
        chosen = [seed]
        gain = {g: scores[seed][g] for g in free if g != seed}
        total = 0
        while len(chosen) < n:
            options = [g for g in gain if joinable is None or joinable(chosen, g)]
            if not options:
                break
            pick = max(options, key=lambda g: (gain[g], -g))
            total += gain.pop(pick)
            chosen.append(pick)
            for g in gain:
                gain[g] += scores[pick][g]
        ids = tuple(sorted(chosen))
        if len(ids) < n or (allowed is not None and not allowed(ids)):
            continue
        if total > best_score or (total == best_score and ids < best):
            best, best_score = ids, total
    return None if best_score < 0 else (best, best_score)


class GPUTopology:
    """One interconnect layout: its graph, pair-score matrix and a memo of searches.

    Shared by every node with the same layout (and products, when ``gbps`` is given). Not
    thread-safe (gpusched's scheduling cycle is serial). The memo holds at most 65536 results
    and is cleared when full.
    """

    __slots__ = (
        "_nvlinked",
        "gbps",
        "graph",
        "link_scores",
        "max_combinations",
        "memo",
        "scores",
    )

    def __init__(
        self,
        graph: nx.Graph,
        max_combinations: int,
        gbps: Sequence[Sequence[float]] | None = None,
    ) -> None:
        """``graph`` from :func:`build_topology` over ``range(n)``; searches of more than
        ``max_combinations`` candidate sets (at least 1) are greedy. ``gbps``: the pair
        bandwidth matrix (:func:`~gpusched.topology.pair_gbps`), needed for a rule's floor
        (without it every pair counts 0 GB/s). O(n²)."""
        if max_combinations < 1:
            raise ValueError(f"max_combinations must be >= 1, got {max_combinations}")
        self.graph = graph
        self.scores = score_matrix(graph)
        self.link_scores = tuple(tuple(link_score_of(s) for s in row) for row in self.scores)
        """The pair scores with PCIe counted only for pairs without NVLink (``NV2`` + ``PIX``
        and ``NV2`` + ``PHB`` both 200): what a pair moves, in the score's units. Sets whose
        sums of these are equal are equally good between nodes (GPUFit's topologyFirst)."""
        count = len(self.scores)
        if gbps is not None and (len(gbps) != count or any(len(row) != count for row in gbps)):
            raise ValueError(f"gbps must be a {count} x {count} matrix")
        self.gbps: tuple[tuple[float, ...], ...] = (
            tuple(tuple(row) for row in gbps)
            if gbps is not None
            else tuple((0.0,) * count for _ in range(count))
        )
        self._nvlinked = tuple(
            sum(1 << b for b in range(count) if b != a and self.scores[a][b] >= NVLINK_SCORE)
            for a in range(count)
        )
        """Per GPU, a mask of the GPUs it has an NVLink to (a pair score >= one NVLink's)."""
        self.max_combinations = max_combinations
        self.memo: dict[tuple[int, int, SetRule], tuple[tuple[int, ...], int] | None] = {}
        """``(free mask, n, rule)`` -> the search's result."""

    @classmethod
    def build(
        cls,
        gpu_count: int,
        links: Iterable[LinkLike],
        max_combinations: int,
        gbps: Sequence[Sequence[float]] | None = None,
    ) -> GPUTopology:
        """The layout of ``gpu_count`` GPUs (indices ``0 .. gpu_count-1``) joined by ``links``.

        ``ValueError`` for a bad link, as :func:`build_topology`. O(n² + links).
        """
        return cls(build_topology(range(gpu_count), links), max_combinations, gbps)

    @property
    def gpu_count(self) -> int:
        return len(self.scores)

    def bottleneck(self, ids: Sequence[int]) -> float:
        """GB/s of the slowest pair of ``ids``; ``inf`` for fewer than two GPUs. O(k²)."""
        gbps = self.gbps
        return min((gbps[a][b] for a, b in itertools.combinations(ids, 2)), default=math.inf)

    def contiguous(self, ids: Sequence[int]) -> bool:
        """Whether ``ids`` are connected over the NVLinks among them (one GPU is). O(k²)."""
        if not ids:
            return True
        inside = 0
        for gpu in ids:
            inside |= 1 << gpu
        reached = frontier = 1 << ids[0]
        while frontier:
            low = frontier & -frontier
            frontier ^= low
            new = self._nvlinked[low.bit_length() - 1] & inside & ~reached
            reached |= new
            frontier |= new
        return reached == inside

    def meets(self, ids: Sequence[int], rule: SetRule) -> bool:
        """Whether the set ``ids`` meets ``rule``. O(k²)."""
        if rule.contiguous and not self.contiguous(ids):
            return False
        return not rule.min_gbps or self.bottleneck(ids) >= rule.min_gbps

    def choose(
        self, free: Sequence[int], n: int, *, mask: int | None = None
    ) -> tuple[tuple[int, ...], int]:
        """The best ``n`` of the ``free`` GPUs (module docstring): ``(ids ascending, score)``.

        ``free`` ascending and distinct; ``ValueError`` unless ``1 <= n <= len(free)``.
        ``mask``, bit ``i`` set for each free GPU ``i``, is the memo key; pass it when the
        caller has it at hand, else it is computed from ``free``. O(1) when memoised, else
        :func:`best_gpu_set` or :func:`greedy_gpu_set`.
        """
        found = self.choose_meeting(free, n, NO_RULE, mask=mask)
        assert found is not None  # without a rule every set qualifies
        return found

    def choose_meeting(
        self, free: Sequence[int], n: int, rule: SetRule, *, mask: int | None = None
    ) -> tuple[tuple[int, ...], int] | None:
        """:meth:`choose` among the sets that meet ``rule``; ``None`` when none does.

        Exhaustive, or greedy past ``max_combinations``: then only GPUs that keep the floor
        and, for a contiguous set, have an NVLink into the set so far are added, so a set that
        meets the rule may be missed there (never on nodes of up to 8 GPUs). Memoised by
        ``(mask, n, rule)``; O(1) then.
        """
        _check_request(free, n)
        if mask is None:
            mask = 0
            for gpu in free:
                mask |= 1 << gpu
        key = (mask, n, rule)
        if key in self.memo:
            return self.memo[key]
        exhaustive = math.comb(len(free), n) <= self.max_combinations
        found: tuple[tuple[int, ...], int] | None
        if not rule:
            found = (best_gpu_set if exhaustive else greedy_gpu_set)(self.scores, free, n)
        elif exhaustive:
            found = _best(self.scores, free, n, lambda ids: self.meets(ids, rule))
        else:
            meets = lambda ids: self.meets(ids, rule)  # noqa: E731
            found = _greedy(self.scores, free, n, meets, self._joinable(rule))
        if len(self.memo) >= _MEMO_MAX:
            self.memo.clear()
        self.memo[key] = found
        return found

    def _joinable(self, rule: SetRule) -> Callable[[Sequence[int], int], bool]:
        gbps, nvlinked = self.gbps, self._nvlinked

        def joinable(chosen: Sequence[int], gpu: int) -> bool:
            if rule.contiguous and not any(nvlinked[gpu] >> c & 1 for c in chosen):
                return False
            return all(gbps[gpu][c] >= rule.min_gbps for c in chosen)

        return joinable

    def offer(self, free: Sequence[int], n: int, contiguous: bool = False) -> float | None:
        """The most GB/s the slowest pair of any ``n`` of ``free`` offers (contiguous sets only
        when asked); ``None`` when no such set exists, ``inf`` for ``n = 1``. What a rejection
        tells the user. Exhaustive up to ``max_combinations`` sets, else the best bottleneck
        of the greedy sets (a lower bound). O(C(free, n) x n²)."""
        _check_request(free, n)
        if n == 1:
            return math.inf
        rule = SetRule(contiguous=contiguous)
        if math.comb(len(free), n) <= self.max_combinations:
            candidates: Iterable[Sequence[int]] = itertools.combinations(free, n)
        else:
            found = self.choose_meeting(free, n, rule)
            candidates = () if found is None else (found[0],)
        best: float | None = None
        for ids in candidates:
            if contiguous and not self.contiguous(ids):
                continue
            low = self.bottleneck(ids)
            if best is None or low > best:
                best = low
        return best
