"""GPU-set selection (gpusched.topology.selection): the searches, the score matrix, the memo."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations
from typing import Any

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusched.topology import (
    GPUTopology,
    Link,
    Scores,
    SetRule,
    best_gpu_set,
    build_topology,
    greedy_gpu_set,
    link_score_of,
    matrix_set_score,
    score_matrix,
    set_score,
)
from gpusched.topology import selection as selection_module

# DGX-1 (V100) hybrid cube-mesh, as the simulated fleet builds it: NVLinks per pair; PCIe PIX
# within a pair of GPUs, PHB within a quad, SYS across the sockets.
DGX1_NVLINKS = {
    (0, 1): 1, (0, 2): 1, (0, 3): 2, (0, 4): 2,
    (1, 2): 2, (1, 3): 1, (1, 5): 2,
    (2, 3): 2, (2, 6): 1,
    (3, 7): 1,
    (4, 5): 1, (4, 6): 1, (4, 7): 2,
    (5, 6): 2, (5, 7): 1,
    (6, 7): 2,
}  # fmt: skip


def dgx1_links() -> list[Link]:
    return [
        Link(
            a,
            b,
            DGX1_NVLINKS.get((a, b), 0),
            "PIX" if a // 2 == b // 2 else "PHB" if a // 4 == b // 4 else "SYS",
        )
        for a, b in combinations(range(8), 2)
    ]


def dgx1() -> nx.Graph:
    return build_topology(range(8), dgx1_links())


def brute_force(scores: Scores, free: Sequence[int], n: int) -> tuple[tuple[int, ...], int]:
    """The module docstring's "best set", by its definition: max score, min cut, lowest ids."""

    def key(combo: tuple[int, ...]) -> tuple[int, int, int, tuple[int, ...]]:
        score = matrix_set_score(scores, combo)
        links = sum(link_score_of(scores[a][b]) for a, b in combinations(combo, 2))
        cut = sum(scores[g][h] for g in combo for h in free if h not in combo)
        return (-links, -score, cut, combo)

    best = min(combinations(free, n), key=key)
    return best, matrix_set_score(scores, best)


# -- the score matrix --------------------------------------------------------------------------


def test_score_matrix_is_the_pair_scores() -> None:
    graph = dgx1()
    scores = score_matrix(graph)
    assert len(scores) == 8
    assert all(len(row) == 8 for row in scores)
    for a in range(8):
        assert scores[a][a] == 0
        for b in range(8):
            if a != b:
                assert scores[a][b] == scores[b][a] == set_score(graph, [a, b])
    assert scores[2][3] == 250  # NV2 + PIX
    assert scores[0][5] == 10  # no NVLink, across the sockets


def test_score_matrix_scores_unlinked_pairs_zero() -> None:
    scores = score_matrix(build_topology(range(3), [Link(0, 1, 1, "PIX")]))
    assert scores == ((0, 150, 0), (150, 0, 0), (0, 0, 0))


def test_score_matrix_needs_indices_from_zero() -> None:
    with pytest.raises(ValueError, match=r"GPU indices must be 0\.\.1, got \[1, 2\]"):
        score_matrix(build_topology([1, 2], []))
    assert score_matrix(build_topology([], [])) == ()


def test_matrix_set_score_agrees_with_the_graph() -> None:
    graph = dgx1()
    scores = score_matrix(graph)
    for n in range(9):
        for combo in combinations(range(8), n):
            assert matrix_set_score(scores, combo) == set_score(graph, combo)


# -- the searches on a DGX-1 -------------------------------------------------------------------


@pytest.mark.parametrize("n", range(1, 9))
def test_greedy_finds_the_optimum_on_a_dgx1(n: int) -> None:
    scores = score_matrix(dgx1())
    free = list(range(8))
    best, best_score = best_gpu_set(scores, free, n)
    greedy, greedy_score = greedy_gpu_set(scores, free, n)
    assert len(best) == len(greedy) == n
    assert greedy_score == best_score
    assert best_score == max(matrix_set_score(scores, c) for c in combinations(free, n))


@pytest.mark.parametrize(
    ("free", "n", "expected"),
    [
        (range(8), 2, (2, 3)),  # NV2 behind one PCIe switch: the best pair of all
        (range(8), 4, (0, 1, 2, 3)),  # a fully NVLinked quad
        ([4, 5, 6, 7], 2, (6, 7)),
        ([0, 1, 4, 5, 6, 7], 2, (6, 7)),
        ([0, 1, 4, 5], 2, (0, 4)),  # NV2 across the quads beats NV1 behind a switch
        ([7], 1, (7,)),
        ([3, 4, 5, 6, 7], 1, (3,)),  # GPU 3 is the least connected to the others
        # Free 0, 1, 4, 6: 6 is the least connected (150 in all); 0-4, the NV2 pair, stays.
        ([0, 1, 4, 6], 1, (6,)),
        (range(8), 8, tuple(range(8))),
    ],
)
def test_best_set_on_a_dgx1(free: Sequence[int], n: int, expected: tuple[int, ...]) -> None:
    graph = dgx1()
    ids, score = best_gpu_set(score_matrix(graph), list(free), n)
    assert ids == expected
    assert score == set_score(graph, ids)


def test_ties_go_to_the_set_least_connected_to_the_rest_then_the_lowest_ids() -> None:
    # 0-1 and 2-3 are equally good pairs; 2-3 is less connected to the free GPUs left out.
    scores = [
        [0, 100, 10, 10, 30],
        [100, 0, 10, 10, 30],
        [10, 10, 0, 100, 0],
        [10, 10, 100, 0, 0],
        [30, 30, 0, 0, 0],
    ]
    assert best_gpu_set(scores, [0, 1, 2, 3, 4], 2) == ((2, 3), 100)
    # Without GPU 4 the two pairs are alike in every way: the lowest ids win.
    assert best_gpu_set(scores, [0, 1, 2, 3], 2) == ((0, 1), 100)
    assert greedy_gpu_set(scores, [0, 1, 2, 3], 2) == ((0, 1), 100)
    # All pairs scoring 0: the lowest ids.
    zeros = [[0] * 4 for _ in range(4)]
    assert best_gpu_set(zeros, [1, 2, 3], 2) == ((1, 2), 0)
    assert greedy_gpu_set(zeros, [1, 2, 3], 2) == ((1, 2), 0)


@pytest.mark.parametrize("search", [best_gpu_set, greedy_gpu_set])
@pytest.mark.parametrize(("free", "n"), [([0, 1], 0), ([0, 1], 3), ([], 1), ([2], -1)])
def test_searches_reject_impossible_requests(search: Any, free: list[int], n: int) -> None:
    with pytest.raises(ValueError, match=f"cannot choose {n} of {len(free)} free GPUs"):
        search(score_matrix(dgx1()), free, n)


# -- random matrices: exhaustive is optimal, greedy is valid -----------------------------------

# Few distinct values, so that ties (and the tie-breaks) are common.
PAIR_SCORES = st.sampled_from([0, 10, 20, 50, 110, 130, 150, 210, 250, 1820])


@st.composite
def problems(draw: st.DrawFn) -> tuple[list[list[int]], list[int], int]:
    """A random symmetric score matrix of 1 to 8 GPUs, a non-empty free set and an ``n``."""
    count = draw(st.integers(1, 8))
    scores = [[0] * count for _ in range(count)]
    for a, b in combinations(range(count), 2):
        scores[a][b] = scores[b][a] = draw(PAIR_SCORES)
    free = sorted(draw(st.sets(st.integers(0, count - 1), min_size=1)))
    n = draw(st.integers(1, len(free)))
    return scores, free, n


@settings(max_examples=300, deadline=None)
@given(problems())
def test_exhaustive_search_is_optimal(problem: tuple[list[list[int]], list[int], int]) -> None:
    scores, free, n = problem
    ids, score = best_gpu_set(scores, free, n)

    def order(c: tuple[int, ...]) -> tuple[int, int]:  # NVLinks first, then the set score
        links = sum(link_score_of(scores[a][b]) for a, b in combinations(c, 2))
        return links, matrix_set_score(scores, c)

    assert order(ids) == max(order(c) for c in combinations(free, n))
    assert score == matrix_set_score(scores, ids)
    assert (ids, score) == brute_force(scores, free, n)  # tie-breaks too


@settings(max_examples=300, deadline=None)
@given(problems())
def test_greedy_search_gives_a_valid_set(problem: tuple[list[list[int]], list[int], int]) -> None:
    scores, free, n = problem
    ids, score = greedy_gpu_set(scores, free, n)
    assert len(ids) == n
    assert len(set(ids)) == n
    assert set(ids) <= set(free)
    assert list(ids) == sorted(ids)
    assert score == matrix_set_score(scores, ids)
    assert score <= max(matrix_set_score(scores, c) for c in combinations(free, n))
    if n in (1, 2, len(free)):  # greedy is exact for these (for a pair, the most score is
        # the most NVLinks too: link_score_of never decreases with the pair score)
        assert score == best_gpu_set(scores, free, n)[1]


# -- GPUTopology: exhaustive or greedy, and the memo -------------------------------------------


class Calls:
    """Counts the searches GPUTopology runs, keeping their results."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[str] = []
        real_best, real_greedy = best_gpu_set, greedy_gpu_set

        def best(*args: Any) -> Any:
            self.calls.append("exhaustive")
            return real_best(*args)

        def greedy(*args: Any) -> Any:
            self.calls.append("greedy")
            return real_greedy(*args)

        monkeypatch.setattr(selection_module, "best_gpu_set", best)
        monkeypatch.setattr(selection_module, "greedy_gpu_set", greedy)


def test_gpu_topology_turns_greedy_past_max_combinations(monkeypatch: pytest.MonkeyPatch) -> None:
    searches = Calls(monkeypatch)
    topology = GPUTopology(dgx1(), max_combinations=69)  # C(8, 4) = 70
    free = list(range(8))
    assert topology.choose(free, 4) == ((0, 1, 2, 3), set_score(dgx1(), [0, 1, 2, 3]))
    assert topology.choose(free, 2) == ((2, 3), 250)  # C(8, 2) = 28: exhaustive
    assert searches.calls == ["greedy", "exhaustive"]
    assert GPUTopology(dgx1(), max_combinations=70).choose(free, 4)[0] == (0, 1, 2, 3)
    assert searches.calls == ["greedy", "exhaustive", "exhaustive"]


def test_gpu_topology_memoises_by_free_set_and_n(monkeypatch: pytest.MonkeyPatch) -> None:
    searches = Calls(monkeypatch)
    topology = GPUTopology.build(8, dgx1_links(), max_combinations=5000)
    assert topology.gpu_count == 8
    assert topology.scores == score_matrix(dgx1())
    first = topology.choose([4, 5, 6, 7], 2)
    assert first == ((6, 7), 250)
    assert topology.choose([4, 5, 6, 7], 2, mask=0b1111_0000) == first  # the same key
    assert topology.memo == {(0b1111_0000, 2, SetRule()): first}
    assert searches.calls == ["exhaustive"]
    topology.choose([4, 5, 6, 7], 3)  # another n
    topology.choose([0, 4, 5, 6, 7], 2)  # another free set
    assert searches.calls == ["exhaustive"] * 3
    assert len(topology.memo) == 3


def test_gpu_topology_memo_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(selection_module, "_MEMO_MAX", 2)
    topology = GPUTopology(dgx1(), max_combinations=5000)
    for gpu in range(3):
        topology.choose([gpu, 7], 1)
    assert list(topology.memo) == [((1 << 2) | (1 << 7), 1, SetRule())]  # cleared when full


def test_gpu_topology_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="max_combinations must be >= 1"):
        GPUTopology(dgx1(), max_combinations=0)
    with pytest.raises(ValueError, match="link 0-9: GPU 9 is not among the node's GPUs"):
        GPUTopology.build(2, [Link(0, 9)], max_combinations=1)
    with pytest.raises(ValueError, match="cannot choose 3 of 2 free GPUs"):
        GPUTopology(dgx1(), max_combinations=1).choose([0, 1], 3)
