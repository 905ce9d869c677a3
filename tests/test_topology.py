"""The per-node interconnect graph and its pair and set scores (gpusched.topology)."""

from __future__ import annotations

import dataclasses

import pytest

import gpusched.topology as topology
from gpusched.topology import (
    NVLINK_SCORE,
    PCIE_LEVELS,
    PCIE_SCORE,
    Link,
    PCIeLevel,
    build_topology,
    link_score,
    nvlink_domains,
    pair_score,
    set_score,
    weakest_link,
)


def square() -> list[Link]:
    """4 GPUs: 0-1 and 2-3 bridged (NV4, PIX), 0-2/1-3 same socket, the rest cross socket."""
    return [
        Link(0, 1, 4, "PIX"),
        Link(0, 2, 0, "NODE"),
        Link(0, 3, 0, "SYS"),
        Link(1, 2, 0, "SYS"),
        Link(1, 3, 0, "NODE"),
        Link(2, 3, 4, "PIX"),
    ]


def test_levels_are_ranked_like_go_gpuallocator() -> None:
    assert PCIE_LEVELS == ("PIX", "PXB", "PHB", "NODE", "SYS")
    assert [level.value for level in PCIeLevel] == list(PCIE_LEVELS)
    scores = [PCIE_SCORE[level] for level in PCIE_LEVELS]
    assert scores == sorted(scores, reverse=True)
    assert scores == [50, 40, 30, 20, 10]
    # Any NVLink outranks the best PCIe path.
    assert link_score(1, "SYS") > link_score(0, "PIX")
    assert NVLINK_SCORE == 100


@pytest.mark.parametrize(
    ("nvlinks", "pcie", "score"),
    [(0, "SYS", 10), (0, "PIX", 50), (1, "PHB", 130), (2, "SYS", 210), (18, "NODE", 1820)],
)
def test_link_score(nvlinks: int, pcie: str, score: int) -> None:
    assert link_score(nvlinks, pcie) == score


@pytest.mark.parametrize(
    ("nvlinks", "pcie", "message"),
    [(-1, "PIX", "nvlinks must be >= 0"), (0, "QPI", "unknown PCIe level 'QPI'")],
)
def test_link_score_rejects(nvlinks: int, pcie: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        link_score(nvlinks, pcie)


def test_build_topology_edges_carry_link_and_weight() -> None:
    g = build_topology(range(4), square())
    assert sorted(g.nodes) == [0, 1, 2, 3]
    assert g.number_of_edges() == 6
    assert g.edges[0, 1] == {"nvlinks": 4, "pcie": "PIX", "weight": 450}
    assert g.edges[1, 0]["weight"] == 450  # undirected
    assert g.edges[0, 3] == {"nvlinks": 0, "pcie": "SYS", "weight": 10}


@pytest.mark.parametrize(
    ("links", "message"),
    [
        ([Link(1, 1)], "link 1-1: a GPU cannot link to itself"),
        ([Link(0, 9)], "link 0-9: GPU 9 is not among the node's GPUs"),
        ([Link(0, 1), Link(1, 0)], "link 1-0: the pair is given more than once"),
        ([Link(0, 1, -2)], "link 0-1: nvlinks must be >= 0"),
        ([Link(0, 1, 0, "PCIe")], "link 0-1: unknown PCIe level 'PCIe'"),
    ],
)
def test_build_topology_rejects_bad_links(links: list[Link], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build_topology(range(2), links)


def test_pair_score() -> None:
    g = build_topology(range(5), square())  # GPU 4 has no links at all
    assert pair_score(g, 0, 1) == 450
    assert pair_score(g, 3, 2) == 450
    assert pair_score(g, 0, 2) == 20
    assert pair_score(g, 0, 4) == 0  # no link reported: worst
    with pytest.raises(ValueError, match="two different GPUs"):
        pair_score(g, 1, 1)
    with pytest.raises(KeyError):
        pair_score(g, 0, 7)


def test_set_score_and_weakest_link() -> None:
    g = build_topology(range(4), square())
    assert set_score(g, [0, 1]) == 450
    assert set_score(g, [1, 0, 1]) == 450  # duplicates ignored
    assert set_score(g, [0, 1, 2, 3]) == 450 + 20 + 10 + 10 + 20 + 450
    assert set_score(g, [2]) == 0
    assert set_score(g, []) == 0
    assert weakest_link(g, [0, 1, 2]) == 10
    assert weakest_link(g, [2, 3]) == 450
    assert weakest_link(g, [3]) is None
    # The bridged pairs beat the cross pairs, which is what GPU-set selection will rely on.
    assert set_score(g, [0, 1]) > set_score(g, [0, 2]) > set_score(g, [0, 3])


def test_nvlink_domains() -> None:
    g = build_topology(range(5), square())
    assert nvlink_domains(g) == [frozenset({0, 1}), frozenset({2, 3}), frozenset({4})]
    all_to_all = build_topology(
        range(4), [Link(a, b, 18, "NODE") for a in range(4) for b in range(a + 1, 4)]
    )
    assert nvlink_domains(all_to_all) == [frozenset(range(4))]
    assert nvlink_domains(build_topology([], [])) == []


def test_link_is_frozen_and_defaults_to_pcie_sys() -> None:
    link = Link(0, 1)
    assert (link.nvlinks, link.pcie) == (0, "SYS")
    with pytest.raises(dataclasses.FrozenInstanceError):
        link.a = 3  # type: ignore[misc]


def test_all_is_complete() -> None:
    modules = {"graph", "selection", "bandwidth"}
    public = {name for name in vars(topology) if not name.startswith("_")} - modules
    assert set(topology.__all__) == public
    for name in topology.__all__:
        assert hasattr(topology, name)
