"""Framework: construction (one instance, hooks detected once, multiPoint) and every run_* rule.

Table-driven, with small scripted plugins; permit timeouts run on a FakeClock (no sleeping).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from gpusched.clock import FakeClock
from gpusched.framework import (
    MAX_PERMIT_TIMEOUT,
    SUCCESS,
    WILDCARD,
    ActionType,
    BindPlugin,
    ClusterEvent,
    ClusterEventWithHint,
    Code,
    CycleState,
    EnqueueExtensions,
    FilterPlugin,
    Framework,
    NodeScore,
    PermitPlugin,
    Plugin,
    PluginRef,
    PluginRegistry,
    Plugins,
    PluginSet,
    PostBindPlugin,
    PostFilterPlugin,
    PostFilterResult,
    PreBindPlugin,
    PreEnqueuePlugin,
    PreFilterPlugin,
    PreFilterResult,
    PreScorePlugin,
    Profile,
    QueueingHint,
    QueueSortPlugin,
    ReservePlugin,
    SchedulerConfiguration,
    ScoreExtensions,
    ScorePlugin,
    Status,
    apply_default_plugins,
)

# -- scaffolding -----------------------------------------------------------------------------


@dataclass
class Node:
    """A stand-in for the cache's NodeInfo: the framework reads only ``name``."""

    name: str
    labels: dict[str, str] = field(default_factory=dict)


NODES = [Node("n0"), Node("n1"), Node("n2")]


def make_pod(name: str = "p", priority: int = 0) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"priority": priority},
    }


POD = make_pod()


class Sort(QueueSortPlugin):
    NAME = "Sort"

    def sort_key(self, info: Any) -> tuple[Any, ...]:
        return (-info.pod["spec"]["priority"], info.timestamp)


class Binder(BindPlugin):
    NAME = "Binder"

    async def bind(self, state: CycleState, pod: dict[str, Any], node_name: str) -> Status:
        return SUCCESS


BASE = Plugins(
    queue_sort=PluginSet(enabled=[PluginRef(name="Sort")]),
    bind=PluginSet(enabled=[PluginRef(name="Binder")]),
)


def build(
    plugins: Mapping[str, Any],
    *classes: type[Plugin],
    clock: FakeClock | None = None,
    observer: Any = None,
) -> Framework:
    registry = PluginRegistry()
    for cls in (Sort, Binder, *classes):
        if cls.NAME not in registry:
            registry.register(cls)
    profile = Profile.model_validate({"plugins": plugins})
    merged = apply_default_plugins(SchedulerConfiguration(profiles=[profile]), BASE)
    return Framework(merged.profiles[0], registry, clock=clock, observer=observer)


_BASES: dict[str, type] = {
    "pre_enqueue": PreEnqueuePlugin,
    "pre_filter": PreFilterPlugin,
    "filter": FilterPlugin,
    "post_filter": PostFilterPlugin,
    "pre_score": PreScorePlugin,
    "score": ScorePlugin,
    "normalize_score": ScoreExtensions,
    "reserve": ReservePlugin,
    "unreserve": ReservePlugin,
    "permit": PermitPlugin,
    "pre_bind": PreBindPlugin,
    "bind": BindPlugin,
    "post_bind": PostBindPlugin,
    "events_to_register": EnqueueExtensions,
}
_ASYNC = {"pre_bind", "bind", "post_bind"}


def scripted(name: str, calls: list[str], **stages: Any) -> type[Plugin]:
    """A plugin class ``name`` implementing ``stages``; each call is logged as ``name.stage``.

    A stage's value is returned as is, raised if it is an exception, or called with the
    stage's arguments if it is callable.
    """
    if "reserve" in stages:
        stages.setdefault("unreserve", None)

    def stage(method: str, answer: Any) -> Callable[..., Any]:
        def run(self: Plugin, *args: Any) -> Any:
            calls.append(f"{name}.{method}")
            if isinstance(answer, BaseException):
                raise answer
            return answer(*args) if callable(answer) else answer

        if method in _ASYNC:

            async def run_async(self: Plugin, *args: Any) -> Any:
                return run(self, *args)

            return run_async
        return run

    bases = tuple(dict.fromkeys(_BASES[m] for m in stages))
    namespace: dict[str, Any] = {"NAME": name}
    namespace.update({m: stage(m, a) for m, a in stages.items()})
    return type(name, bases, namespace)


def by_node(**verdicts: Any) -> Callable[..., Any]:
    """A per-node answer: ``by_node(n1=Status.unschedulable("x"))``, default SUCCESS."""
    return lambda state, pod, node: verdicts.get(node.name, SUCCESS)


def enabled(*names: str, weights: Mapping[str, int] | None = None) -> dict[str, Any]:
    weights = weights or {}
    return {
        "enabled": [{"name": n, **({"weight": weights[n]} if n in weights else {})} for n in names]
    }


# -- construction ----------------------------------------------------------------------------


class Everything(PreFilterPlugin, FilterPlugin, ScorePlugin, ReservePlugin):
    """One plugin at four points: one instance, counted."""

    NAME = "Everything"
    made = 0

    @classmethod
    def new(cls, args: Any, handle: Any) -> Everything:
        cls.made += 1
        return cls()

    def pre_filter(self, state: CycleState, pod: Any) -> tuple[PreFilterResult | None, Status]:
        return None, SUCCESS

    def filter(self, state: CycleState, pod: Any, node_info: Any) -> Status:
        return SUCCESS

    def score(self, state: CycleState, pod: Any, node_info: Any) -> tuple[int, Status]:
        return 7, SUCCESS

    def reserve(self, state: CycleState, pod: Any, node_name: str) -> Status:
        return SUCCESS

    def unreserve(self, state: CycleState, pod: Any, node_name: str) -> None:
        return None


def test_a_plugin_at_several_points_is_one_instance() -> None:
    Everything.made = 0
    fw = build({"multiPoint": enabled("Everything")}, Everything)
    assert Everything.made == 1
    instance = fw.plugins["Everything"]
    assert fw.list_plugins() == {
        "preEnqueue": [],
        "queueSort": ["Sort"],
        "preFilter": ["Everything"],
        "filter": ["Everything"],
        "postFilter": [],
        "preScore": [],
        "score": ["Everything"],
        "reserve": ["Everything"],
        "permit": [],
        "preBind": [],
        "bind": ["Binder"],
        "postBind": [],
    }
    # the hot-path tables hold the instance's bound methods: detected once, no lookups later
    assert fw._filter[0][1].__self__ is instance  # type: ignore[attr-defined]
    assert fw._score[0][1].__self__ is instance  # type: ignore[attr-defined]


def test_stages_a_plugin_does_not_implement_are_never_called() -> None:
    calls: list[str] = []
    only_filter = scripted("OnlyFilter", calls, filter=SUCCESS)
    fw = build({"multiPoint": enabled("OnlyFilter")}, only_filter)
    state = CycleState()
    assert fw.run_pre_filter(state, POD) == (None, SUCCESS)
    assert fw.run_score(state, POD, NODES) == ([NodeScore(n.name, 0) for n in NODES], SUCCESS)
    assert fw.run_reserve(state, POD, "n0") is SUCCESS
    assert fw.run_permit(state, POD, "n0") is SUCCESS
    assert calls == []
    assert fw.run_filter(state, POD, NODES[0]) is SUCCESS
    assert calls == ["OnlyFilter.filter"]


def test_sync_and_async_stages_are_checked_when_the_class_is_defined() -> None:
    with pytest.raises(TypeError, match=r"Bad\.filter must be a plain 'def'"):

        class Bad(FilterPlugin):
            NAME = "Bad"

            async def filter(self, state: Any, pod: Any, node_info: Any) -> Status:  # type: ignore[override]
                return SUCCESS

    with pytest.raises(TypeError, match=r"SyncBind\.bind must be an 'async def'"):

        class SyncBind(BindPlugin):
            NAME = "SyncBind"

            def bind(self, state: Any, pod: Any, node_name: str) -> Status:  # type: ignore[override]
                return SUCCESS


_C: list[str] = []
A = scripted("A", _C, filter=SUCCESS, score=(1, SUCCESS))
B = scripted("B", _C, filter=SUCCESS, score=(1, SUCCESS))
C = scripted("C", _C, filter=SUCCESS)


@pytest.mark.parametrize(
    ("plugins", "point", "expected"),
    [
        pytest.param({"filter": enabled("A", "B", "C")}, "filter", ["A", "B", "C"], id="specific"),
        pytest.param({"multiPoint": enabled("C", "A")}, "filter", ["C", "A"], id="multipoint"),
        pytest.param(
            {"multiPoint": enabled("C", "A")}, "score", ["A"], id="multipoint-only-implementers"
        ),
        pytest.param(
            {"multiPoint": enabled("A", "B", "C"), "filter": {"disabled": [{"name": "B"}]}},
            "filter",
            ["A", "C"],
            id="multipoint-disabled-at-one-point",
        ),
        pytest.param(
            {"multiPoint": enabled("A", "B"), "filter": {"disabled": [{"name": "*"}]}},
            "filter",
            [],
            id="star-disables-multipoint-expansion",
        ),
        pytest.param(
            # a plugin enabled both ways comes first, in the specific point's order
            {"multiPoint": enabled("A", "B", "C"), "filter": enabled("C", "B")},
            "filter",
            ["C", "B", "A"],
            id="specific-overrides-first",
        ),
        pytest.param(
            {"multiPoint": enabled("A"), "filter": enabled("C")},
            "filter",
            ["A", "C"],
            id="multipoint-then-other-specific",
        ),
    ],
)
def test_multipoint_expansion(plugins: dict[str, Any], point: str, expected: list[str]) -> None:
    assert build(plugins, A, B, C).list_plugins()[point] == expected


@pytest.mark.parametrize(
    ("plugins", "expected"),
    [
        ({"score": enabled("A", "B", weights={"A": 3})}, {"A": 3, "B": 1}),
        ({"multiPoint": enabled("A", "B", weights={"B": 5})}, {"A": 1, "B": 5}),
        # the score point's own entry wins over multiPoint's, even without a weight
        ({"multiPoint": enabled("A", weights={"A": 5}), "score": enabled("A")}, {"A": 1}),
        ({"multiPoint": enabled("A"), "score": enabled("A", weights={"A": 4})}, {"A": 4}),
    ],
)
def test_score_weights(plugins: dict[str, Any], expected: dict[str, int]) -> None:
    assert dict(build(plugins, A, B).score_weights) == expected


# -- PreEnqueue, QueueSort -------------------------------------------------------------------


def test_pre_enqueue_first_rejection_wins() -> None:
    calls: list[str] = []
    gate = scripted("Gate", calls, pre_enqueue=Status.unschedulable("gated"))
    after = scripted("After", calls, pre_enqueue=SUCCESS)
    fw = build({"preEnqueue": enabled("Gate", "After")}, gate, after)
    status = fw.run_pre_enqueue(POD)
    assert (status.code, status.plugin, status.reasons) == (Code.UNSCHEDULABLE, "Gate", ("gated",))
    assert calls == ["Gate.pre_enqueue"]


def test_queue_sort_key_is_the_plugins() -> None:
    fw = build({})

    @dataclass
    class Info:
        pod: dict[str, Any]
        timestamp: float

    infos = [Info(make_pod("a", 0), 1.0), Info(make_pod("b", 10), 2.0), Info(make_pod("c", 0), 0.5)]
    ordered = sorted(infos, key=fw.queue_sort_key)
    assert [i.pod["metadata"]["name"] for i in ordered] == ["b", "c", "a"]


# -- PreFilter -------------------------------------------------------------------------------


def _nodes(*names: str) -> PreFilterResult:
    return PreFilterResult(frozenset(names))


@pytest.mark.parametrize(
    ("answers", "code", "plugin", "message", "nodes", "called"),
    [
        pytest.param(
            {"P1": (None, SUCCESS), "P2": (None, SUCCESS)}, Code.SUCCESS, "", "", None, 2, id="ok"
        ),
        pytest.param(
            {"P1": (_nodes("n0", "n1"), SUCCESS), "P2": (_nodes("n1", "n2"), SUCCESS)},
            Code.SUCCESS,
            "",
            "",
            {"n1"},
            2,
            id="results-intersect",
        ),
        pytest.param(
            {"P1": (_nodes("n0"), SUCCESS), "P2": (_nodes("n2"), SUCCESS)},
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
            "P2",
            "node(s) didn't satisfy plugins P1, P2 simultaneously",
            set(),
            2,
            id="empty-intersection",
        ),
        pytest.param(
            {"P1": (_nodes(), SUCCESS), "P2": (None, SUCCESS)},
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
            "P1",
            "node(s) didn't satisfy plugin P1",
            set(),
            1,
            id="one-plugin-no-nodes",
        ),
        pytest.param(
            {"P1": (None, Status.unschedulable("no")), "P2": (_nodes("n0"), SUCCESS)},
            Code.UNSCHEDULABLE,
            "P1",
            "no",
            {"n0"},
            2,
            id="unschedulable-lets-the-rest-run",
        ),
        pytest.param(
            {"P1": (None, Status.unresolvable("never")), "P2": (None, SUCCESS)},
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
            "P1",
            "never",
            None,
            1,
            id="unresolvable-stops",
        ),
        pytest.param(
            {"P1": (None, Status.error("api down")), "P2": (None, SUCCESS)},
            Code.ERROR,
            "P1",
            "running PreFilter plugin 'P1': api down",
            None,
            1,
            id="error-wrapped",
        ),
        pytest.param(
            {"P1": ValueError("bug"), "P2": (None, SUCCESS)},
            Code.ERROR,
            "P1",
            "running PreFilter plugin 'P1': ValueError: bug",
            None,
            1,
            id="raise-becomes-error",
        ),
        pytest.param(
            {"P1": (_nodes(), Status.skip()), "P2": (None, SUCCESS)},
            Code.SUCCESS,
            "",
            "",
            None,
            2,
            id="skip-ignores-result",
        ),
    ],
)
def test_pre_filter(
    answers: dict[str, Any],
    code: Code,
    plugin: str,
    message: str,
    nodes: set[str] | None,
    called: int,
) -> None:
    calls: list[str] = []
    classes = [scripted(n, calls, pre_filter=a) for n, a in answers.items()]
    fw = build({"preFilter": enabled(*answers)}, *classes)
    result, status = fw.run_pre_filter(CycleState(), POD)
    assert (status.code, status.plugin, status.message()) == (code, plugin, message)
    assert (None if result is None else set(result.node_names or ())) == nodes
    assert len(calls) == called


def test_pre_filter_result_names_the_restricting_plugins() -> None:
    calls: list[str] = []
    p1 = scripted("P1", calls, pre_filter=(_nodes("n0", "n1"), SUCCESS))
    p2 = scripted("P2", calls, pre_filter=(None, SUCCESS))
    p3 = scripted("P3", calls, pre_filter=(_nodes("n1"), SUCCESS))
    fw = build({"preFilter": enabled("P1", "P2", "P3")}, p1, p2, p3)
    result, _ = fw.run_pre_filter(CycleState(), POD)
    assert result == PreFilterResult(frozenset({"n1"}), frozenset({"P1", "P3"}))


# -- Filter ----------------------------------------------------------------------------------

REJECT_PREBUILT = Status.unschedulable("prebuilt", plugin="F2")


@pytest.mark.parametrize(
    ("answers", "code", "plugin", "message", "calls_expected"),
    [
        pytest.param([SUCCESS, SUCCESS, SUCCESS], Code.SUCCESS, "", "", 3, id="all-pass"),
        pytest.param(
            [SUCCESS, Status.unschedulable("full"), Status.unresolvable("x")],
            Code.UNSCHEDULABLE,
            "F2",
            "full",
            2,
            id="first-failure-wins",
        ),
        pytest.param(
            [Status.unresolvable("tainted"), SUCCESS, SUCCESS],
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
            "F1",
            "tainted",
            1,
            id="unresolvable",
        ),
        pytest.param(
            [SUCCESS, Status.error("bad inventory"), SUCCESS],
            Code.ERROR,
            "F2",
            "running Filter plugin 'F2': bad inventory",
            2,
            id="error-wrapped",
        ),
        pytest.param(
            [SUCCESS, SUCCESS, Status.skip()],
            Code.ERROR,
            "F3",
            "running Filter plugin 'F3': returned Skip",
            3,
            id="skip-from-filter-is-an-error",
        ),
        pytest.param(
            [KeyError("gpus"), SUCCESS, SUCCESS],
            Code.ERROR,
            "F1",
            "running Filter plugin 'F1': KeyError: 'gpus'",
            1,
            id="raise-becomes-error",
        ),
        pytest.param(
            [SUCCESS, Status.pending("later"), SUCCESS],
            Code.PENDING,
            "F2",
            "later",
            2,
            id="pending-is-a-rejection",
        ),
    ],
)
def test_filter(
    answers: list[Any], code: Code, plugin: str, message: str, calls_expected: int
) -> None:
    calls: list[str] = []
    classes = [scripted(f"F{i + 1}", calls, filter=a) for i, a in enumerate(answers)]
    fw = build({"filter": enabled(*(c.NAME for c in classes))}, *classes)
    status = fw.run_filter(CycleState(), POD, NODES[0])
    assert (status.code, status.plugin, status.message()) == (code, plugin, message)
    assert len(calls) == calls_expected


def test_filter_allocates_nothing_on_success_or_a_prebuilt_rejection() -> None:
    calls: list[str] = []
    f1 = scripted("F1", calls, filter=SUCCESS)
    f2 = scripted("F2", calls, filter=by_node(n1=REJECT_PREBUILT))
    fw = build({"filter": enabled("F1", "F2")}, f1, f2)
    state = CycleState()
    assert fw.run_filter(state, POD, NODES[0]) is SUCCESS
    assert fw.run_filter(state, POD, NODES[1]) is REJECT_PREBUILT


def test_filter_skips_plugins_whose_pre_filter_skipped_this_cycle() -> None:
    calls: list[str] = []
    skip_next = [True, False]
    gpu = scripted(
        "GPU",
        calls,
        pre_filter=lambda state, pod: (None, Status.skip() if skip_next.pop(0) else SUCCESS),
        filter=Status.unschedulable("no GPU"),
    )
    fw = build({"multiPoint": enabled("GPU")}, gpu)
    state = CycleState()
    fw.run_pre_filter(state, POD)
    assert state.skip_filter_plugins == {"GPU"}
    assert fw.run_filter(state, POD, NODES[0]) is SUCCESS
    fw.run_pre_filter(state, POD)  # next cycle: PreFilter no longer skips
    assert state.skip_filter_plugins == set()
    assert fw.run_filter(state, POD, NODES[0]).code == Code.UNSCHEDULABLE
    assert calls == ["GPU.pre_filter", "GPU.pre_filter", "GPU.filter"]


# -- PostFilter ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answers", "code", "plugin", "reasons", "nominated", "called"),
    [
        pytest.param(
            [(None, Status.unschedulable("a")), (PostFilterResult("n1"), SUCCESS)],
            Code.SUCCESS,
            "",
            (),
            "n1",
            2,
            id="success-stops",
        ),
        pytest.param(
            [(None, Status.unresolvable("no")), (None, SUCCESS)],
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
            "Q1",
            ("no",),
            None,
            1,
            id="unresolvable-stops",
        ),
        pytest.param(
            [(None, Status.unschedulable("a")), (None, Status.unschedulable("b"))],
            Code.UNSCHEDULABLE,
            "Q1",
            ("a", "b"),
            None,
            2,
            id="reasons-collected-first-plugin-named",
        ),
        pytest.param(
            [(None, Status.error("x")), (None, SUCCESS)],
            Code.ERROR,
            "Q1",
            ("running PostFilter plugin 'Q1': x",),
            None,
            1,
            id="error",
        ),
    ],
)
def test_post_filter(
    answers: list[Any],
    code: Code,
    plugin: str,
    reasons: tuple[str, ...],
    nominated: str | None,
    called: int,
) -> None:
    calls: list[str] = []
    classes = [scripted(f"Q{i + 1}", calls, post_filter=a) for i, a in enumerate(answers)]
    fw = build({"postFilter": enabled(*(c.NAME for c in classes))}, *classes)
    statuses = {"n0": Status.unschedulable("full", plugin="F")}
    result, status = fw.run_post_filter(CycleState(), POD, statuses)
    assert (status.code, status.plugin, status.reasons) == (code, plugin, reasons)
    assert (result.nominated_node_name if result else None) == nominated
    assert len(calls) == called


# -- PreScore and Score ----------------------------------------------------------------------


def _by_index(scale: int) -> Callable[..., tuple[int, Status]]:
    return lambda state, pod, node: (int(node.name[1:]) * scale, SUCCESS)


def _normalise_to_100(state: Any, pod: Any, scores: list[NodeScore]) -> Status:
    top = max(s.score for s in scores) or 1
    for s in scores:
        s.score = s.score * 100 // top
    return SUCCESS


@pytest.mark.parametrize(
    ("plugins", "weights", "expected"),
    [
        pytest.param({"S1": {"score": _by_index(10)}}, {}, [0, 10, 20], id="one-plugin"),
        pytest.param(
            {"S1": {"score": _by_index(10)}}, {"S1": 3}, [0, 30, 60], id="weight-multiplies"
        ),
        pytest.param(
            {"S1": {"score": _by_index(10)}, "S2": {"score": (50, SUCCESS)}},
            {"S2": 2},
            [100, 110, 120],
            id="weighted-sum",
        ),
        pytest.param(
            # raw scores 0..2000 are out of range until normalised to 0..100
            {"S1": {"score": _by_index(1000), "normalize_score": _normalise_to_100}},
            {"S1": 2},
            [0, 100, 200],
            id="normalised-then-weighted",
        ),
    ],
)
def test_score(
    plugins: dict[str, dict[str, Any]], weights: dict[str, int], expected: list[int]
) -> None:
    calls: list[str] = []
    classes = [scripted(name, calls, **stages) for name, stages in plugins.items()]
    fw = build({"score": enabled(*plugins, weights=weights)}, *classes)
    scores, status = fw.run_score(CycleState(), POD, NODES)
    assert status is SUCCESS
    assert scores == [NodeScore(n.name, t) for n, t in zip(NODES, expected, strict=True)]


@pytest.mark.parametrize(
    ("stages", "message"),
    [
        pytest.param(
            {"score": _by_index(60)},
            "plugin 'S1' returned an invalid score 120 for node 'n2'; it must be in [0, 100]",
            id="out-of-range",
        ),
        pytest.param(
            {"score": _by_index(1000), "normalize_score": SUCCESS},
            "plugin 'S1' returned an invalid score 1000 for node 'n1'; it must be in [0, 100] "
            "after normalizing",
            id="out-of-range-after-normalizing",
        ),
        pytest.param(
            {"score": (1, Status.error("no inventory"))},
            "running Score plugin 'S1': no inventory",
            id="score-error",
        ),
        pytest.param(
            {"score": (1, SUCCESS), "normalize_score": Status.error("empty")},
            "running ScoreExtensionNormalize plugin 'S1': empty",
            id="normalize-error",
        ),
        pytest.param(
            {"score": ZeroDivisionError("division by zero")},
            "running Score plugin 'S1': ZeroDivisionError: division by zero",
            id="raise",
        ),
    ],
)
def test_score_failures(stages: dict[str, Any], message: str) -> None:
    fw = build({"score": enabled("S1")}, scripted("S1", [], **stages))
    scores, status = fw.run_score(CycleState(), POD, NODES)
    assert (scores, status.code, status.plugin, status.message()) == (
        [],
        Code.ERROR,
        "S1",
        message,
    )


def test_pre_score_skip_skips_that_plugins_score() -> None:
    calls: list[str] = []
    topo = scripted("Topo", calls, pre_score=Status.skip(), score=(100, SUCCESS))
    other = scripted("Other", calls, pre_score=SUCCESS, score=(1, SUCCESS))
    fw = build({"multiPoint": enabled("Topo", "Other")}, topo, other)
    state = CycleState()
    assert fw.run_pre_score(state, POD, NODES) is SUCCESS
    assert state.skip_score_plugins == {"Topo"}
    scores, _ = fw.run_score(state, POD, NODES)
    assert [s.score for s in scores] == [1, 1, 1]
    assert "Topo.score" not in calls


def test_pre_score_failure_is_an_error() -> None:
    bad = scripted("Bad", [], pre_score=Status.unschedulable("nope"), score=(1, SUCCESS))
    fw = build({"multiPoint": enabled("Bad")}, bad)
    status = fw.run_pre_score(CycleState(), POD, NODES)
    assert (status.code, status.plugin) == (Code.ERROR, "Bad")


# -- Reserve and Unreserve -------------------------------------------------------------------


def test_reserve_stops_at_the_first_failure_and_unreserve_runs_all_in_reverse(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[str] = []
    r1 = scripted("R1", calls, reserve=SUCCESS)
    r2 = scripted("R2", calls, reserve=Status.unschedulable("lease taken"))
    r3 = scripted("R3", calls, reserve=SUCCESS, unreserve=RuntimeError("unreserve bug"))
    fw = build({"reserve": enabled("R1", "R2", "R3")}, r1, r2, r3)
    state = CycleState()
    status = fw.run_reserve(state, POD, "n0")
    assert (status.code, status.plugin) == (Code.UNSCHEDULABLE, "R2")
    assert calls == ["R1.reserve", "R2.reserve"]
    calls.clear()
    with caplog.at_level(logging.ERROR, logger="gpusched.framework.runtime"):
        fw.run_unreserve(state, POD, "n0")  # must not raise
    assert calls == ["R3.unreserve", "R2.unreserve", "R1.unreserve"]
    assert "Unreserve plugin 'R3' failed for pod default/p on node n0" in caplog.text


def test_reserve_error_is_wrapped() -> None:
    fw = build({"reserve": enabled("R1")}, scripted("R1", [], reserve=Status.error("x")))
    status = fw.run_reserve(CycleState(), POD, "n0")
    assert (status.code, status.message()) == (Code.ERROR, "running Reserve plugin 'R1': x")


# -- Permit and waiting pods -----------------------------------------------------------------


def permit_framework(
    answers: Mapping[str, Any], clock: FakeClock | None = None
) -> tuple[Framework, list[str]]:
    calls: list[str] = []
    classes = [scripted(n, calls, permit=a) for n, a in answers.items()]
    return build({"permit": enabled(*answers)}, *classes, clock=clock or FakeClock()), calls


@pytest.mark.parametrize(
    ("answers", "code", "plugin", "called", "waiting_on"),
    [
        pytest.param({"G1": (SUCCESS, 0), "G2": (SUCCESS, 0)}, Code.SUCCESS, "", 2, None, id="ok"),
        pytest.param(
            {"G1": (Status.wait(), 10), "G2": (Status.unschedulable("no"), 0)},
            Code.UNSCHEDULABLE,
            "G2",
            2,
            None,
            id="rejection-beats-wait",
        ),
        pytest.param(
            {"G1": (Status.unschedulable("no"), 0), "G2": (Status.wait(), 10)},
            Code.UNSCHEDULABLE,
            "G1",
            1,
            None,
            id="first-rejection-stops",
        ),
        pytest.param(
            {"G1": (Status.wait(), 10), "G2": (SUCCESS, 0), "G3": (Status.wait(), 30)},
            Code.WAIT,
            "",
            3,
            ("G1", "G3"),
            id="waits-collected",
        ),
        pytest.param(
            {"G1": (Status.skip(), 0)},
            Code.ERROR,
            "G1",
            1,
            None,
            id="skip-is-an-error",
        ),
    ],
)
def test_permit(
    answers: dict[str, Any],
    code: Code,
    plugin: str,
    called: int,
    waiting_on: tuple[str, ...] | None,
) -> None:
    fw, calls = permit_framework(answers)
    status = fw.run_permit(CycleState(), POD, "n0")
    assert (status.code, status.plugin, len(calls)) == (code, plugin, called)
    waiting = fw.get_waiting_pod("uid-p")
    assert (waiting.pending_plugins if waiting else None) == waiting_on


def test_permit_wait_deadline_is_the_earliest_and_timeouts_are_capped() -> None:
    clock = FakeClock()
    fw, _ = permit_framework({"G1": (Status.wait(), 30), "G2": (Status.wait(), 1e9)}, clock)
    assert fw.run_permit(CycleState(), POD, "n0").code == Code.WAIT
    waiting = fw.get_waiting_pod("uid-p")
    assert waiting is not None
    assert waiting.deadline == 30
    waiting.allow("G1")
    assert waiting.deadline == MAX_PERMIT_TIMEOUT


async def test_wait_on_permit_succeeds_when_every_waiting_plugin_allows() -> None:
    fw, _ = permit_framework({"G1": (Status.wait(), 10), "G2": (Status.wait(), 20)})
    fw.run_permit(CycleState(), POD, "n0")
    task = asyncio.create_task(fw.wait_on_permit(POD))
    await asyncio.sleep(0)
    waiting = next(fw.iterate_waiting_pods())
    waiting.allow("G1")
    await asyncio.sleep(0)
    assert not task.done()
    waiting.allow("G2")
    assert await task is SUCCESS
    assert fw.get_waiting_pod("uid-p") is None


async def test_wait_on_permit_ends_at_the_first_rejection() -> None:
    fw, _ = permit_framework({"G1": (Status.wait(), 10), "G2": (Status.wait(), 20)})
    fw.run_permit(CycleState(), POD, "n0")
    task = asyncio.create_task(fw.wait_on_permit(POD))
    await asyncio.sleep(0)
    assert fw.reject_waiting_pod("uid-p", "G2", "gang member failed")
    status = await task
    assert (status.code, status.plugin, status.message()) == (
        Code.UNSCHEDULABLE,
        "G2",
        "gang member failed",
    )
    assert not fw.reject_waiting_pod("uid-p", "G2", "again")  # no longer waiting


async def test_wait_on_permit_times_out_on_the_clock() -> None:
    clock = FakeClock()
    fw, _ = permit_framework({"G1": (Status.wait(), 10), "G2": (Status.wait(), 30)}, clock)
    fw.run_permit(CycleState(), POD, "n0")
    task = asyncio.create_task(fw.wait_on_permit(POD))
    await clock.wait_for_sleepers(1)
    fw.get_waiting_pod("uid-p").allow("G1")  # type: ignore[union-attr]
    await clock.advance(10)  # G1's deadline passes, but G1 has allowed: still waiting
    assert not task.done()
    await clock.wait_for_sleepers(1)
    await clock.advance(19.5)
    assert not task.done()
    await clock.advance(0.5)
    status = await task
    assert (status.code, status.plugin, status.message()) == (
        Code.UNSCHEDULABLE,
        "G2",
        "rejected due to timeout after waiting 30s at plugin G2",
    )
    assert list(fw.iterate_waiting_pods()) == []


async def test_a_timeout_that_passed_before_waiting_rejects_at_once() -> None:
    clock = FakeClock()
    fw, _ = permit_framework({"G1": (Status.wait(), 5)}, clock)
    fw.run_permit(CycleState(), POD, "n0")
    await clock.advance(6)
    status = await fw.wait_on_permit(POD)
    assert status.message() == "rejected due to timeout after waiting 5s at plugin G1"


async def test_allowed_before_waiting_succeeds_at_once() -> None:
    fw, _ = permit_framework({"G1": (Status.wait(), 5)})
    fw.run_permit(CycleState(), POD, "n0")
    fw.get_waiting_pod("uid-p").allow("G1")  # type: ignore[union-attr]
    assert await fw.wait_on_permit(POD) is SUCCESS
    assert await fw.wait_on_permit(make_pod("other")) is SUCCESS  # not waiting at all


async def test_cancelled_wait_leaves_nothing_behind() -> None:
    clock = FakeClock()
    fw, _ = permit_framework({"G1": (Status.wait(), 10)}, clock)
    fw.run_permit(CycleState(), POD, "n0")
    task = asyncio.create_task(fw.wait_on_permit(POD))
    await clock.wait_for_sleepers(1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert fw.get_waiting_pod("uid-p") is None
    assert clock.sleepers == 0


# -- binding cycle ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answers", "code", "plugin", "called"),
    [
        pytest.param([Status.skip(), SUCCESS, SUCCESS], Code.SUCCESS, "", 2, id="first-not-skip"),
        pytest.param([Status.skip(), Status.skip()], Code.SKIP, "", 2, id="all-skip"),
        pytest.param(
            [Status.error("409 Conflict"), SUCCESS], Code.ERROR, "B1", 1, id="error-stops"
        ),
        pytest.param([OSError("reset"), SUCCESS], Code.ERROR, "B1", 1, id="raise"),
    ],
)
async def test_bind(answers: list[Any], code: Code, plugin: str, called: int) -> None:
    calls: list[str] = []
    classes = [scripted(f"B{i + 1}", calls, bind=a) for i, a in enumerate(answers)]
    fw = build(
        {"bind": {"disabled": [{"name": "*"}], **enabled(*(c.NAME for c in classes))}}, *classes
    )
    status = await fw.run_bind(CycleState(), POD, "n0")
    assert (status.code, status.plugin, len(calls)) == (code, plugin, called)


async def test_pre_bind_first_failure_stops() -> None:
    calls: list[str] = []
    p1 = scripted("P1", calls, pre_bind=SUCCESS)
    p2 = scripted("P2", calls, pre_bind=Status.unschedulable("lease lost"))
    p3 = scripted("P3", calls, pre_bind=SUCCESS)
    fw = build({"preBind": enabled("P1", "P2", "P3")}, p1, p2, p3)
    status = await fw.run_pre_bind(CycleState(), POD, "n0")
    assert (status.code, status.plugin) == (Code.UNSCHEDULABLE, "P2")
    assert calls == ["P1.pre_bind", "P2.pre_bind"]


async def test_post_bind_runs_all_and_logs_exceptions(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[str] = []
    p1 = scripted("P1", calls, post_bind=RuntimeError("event recorder down"))
    p2 = scripted("P2", calls, post_bind=None)
    fw = build({"postBind": enabled("P1", "P2")}, p1, p2)
    with caplog.at_level(logging.ERROR, logger="gpusched.framework.runtime"):
        await fw.run_post_bind(CycleState(), POD, "n0")
    assert calls == ["P1.post_bind", "P2.post_bind"]
    assert "PostBind plugin 'P1' failed" in caplog.text


# -- events and observation ------------------------------------------------------------------


def test_enqueue_extensions() -> None:
    def on_gpu_freed(pod: Any, old: Any, new: Any) -> QueueingHint:
        return QueueingHint.QUEUE

    lease_event = ClusterEventWithHint(ClusterEvent("Lease", ActionType.DELETE), on_gpu_freed)
    calls: list[str] = []
    with_events = scripted("WithEvents", calls, filter=SUCCESS, events_to_register=[lease_event])
    without = scripted("Without", calls, reserve=SUCCESS)
    scorer = scripted("Scorer", calls, score=(1, SUCCESS), events_to_register=[])
    fw = build(
        {"multiPoint": enabled("WithEvents", "Without", "Scorer")}, with_events, without, scorer
    )
    assert fw.enqueue_extensions() == {
        "WithEvents": [lease_event],
        "Without": [ClusterEventWithHint(ClusterEvent(WILDCARD, ActionType.ALL))],
    }


def test_cluster_event_matching() -> None:
    registered = ClusterEvent("Node", ActionType.ADD | ActionType.UPDATE)
    assert registered.matches(ClusterEvent("Node", ActionType.UPDATE))
    assert not registered.matches(ClusterEvent("Node", ActionType.DELETE))
    assert not registered.matches(ClusterEvent("Pod", ActionType.ADD))
    assert ClusterEvent(WILDCARD, ActionType.ALL).matches(ClusterEvent("Lease", ActionType.DELETE))


class Recorder:
    def __init__(self) -> None:
        self.points: list[tuple[str, Code]] = []
        self.plugins: list[tuple[str, str, Code]] = []
        self.permit_waits: list[Code] = []

    def extension_point_duration(self, point: str, status_code: Code, seconds: float) -> None:
        assert seconds >= 0
        self.points.append((point, status_code))

    def plugin_duration(self, plugin: str, point: str, status_code: Code, seconds: float) -> None:
        assert seconds >= 0
        self.plugins.append((plugin, point, status_code))

    def permit_wait_duration(self, status_code: Code, seconds: float) -> None:
        self.permit_waits.append(status_code)


@pytest.mark.parametrize("sampled", [False, True])
async def test_observer(sampled: bool) -> None:
    calls: list[str] = []
    plugin = scripted(
        "P",
        calls,
        pre_filter=(None, SUCCESS),
        filter=by_node(n1=Status.unschedulable("full")),
        score=(5, SUCCESS),
        reserve=SUCCESS,
        permit=(Status.wait(), 5),
    )
    recorder = Recorder()
    fw = build({"multiPoint": enabled("P")}, plugin, observer=recorder)
    state = CycleState(record_plugin_metrics=sampled)
    fw.run_pre_filter(state, POD)
    for node in NODES:
        fw.run_filter(state, POD, node)
    fw.run_score(state, POD, NODES)
    fw.run_reserve(state, POD, "n0")
    fw.run_permit(state, POD, "n0")
    fw.get_waiting_pod("uid-p").allow("P")  # type: ignore[union-attr]
    await fw.wait_on_permit(POD)
    await fw.run_bind(state, POD, "n0")
    # Filter runs per node: the cycle times the whole filter phase, the framework does not
    assert recorder.points == [
        ("PreFilter", Code.SUCCESS),
        ("Score", Code.SUCCESS),
        ("Reserve", Code.SUCCESS),
        ("Permit", Code.WAIT),
        ("Bind", Code.SUCCESS),
    ]
    assert recorder.permit_waits == [Code.SUCCESS]
    expected_plugins = [
        ("P", "PreFilter", Code.SUCCESS),
        ("P", "Filter", Code.SUCCESS),
        ("P", "Filter", Code.UNSCHEDULABLE),
        ("P", "Filter", Code.SUCCESS),
        ("P", "Score", Code.SUCCESS),
        ("P", "Score", Code.SUCCESS),
        ("P", "Score", Code.SUCCESS),
        ("P", "Reserve", Code.SUCCESS),
        ("P", "Permit", Code.WAIT),
        ("Binder", "Bind", Code.SUCCESS),
    ]
    assert recorder.plugins == (expected_plugins if sampled else [])


# -- the Handle ------------------------------------------------------------------------------


def test_the_handle_gives_the_services_it_was_built_with() -> None:
    from gpusched.cache import Snapshot
    from gpusched.framework import Handle, NodeLister

    class Recorder:
        def __init__(self) -> None:
            self.events: list[tuple[str, ...]] = []

        def eventf(
            self, regarding: Any, event_type: str, reason: str, action: str, message: str
        ) -> None:
            self.events.append((regarding["metadata"]["name"], event_type, reason, action, message))

    seen: dict[str, Any] = {}

    class Probe(FilterPlugin):
        NAME = "Probe"

        def __init__(self, handle: Handle) -> None:
            self.handle = handle

        @classmethod
        def new(cls, args: Any, handle: Handle) -> Probe:
            return cls(handle)

        def filter(self, state: CycleState, pod: Any, node_info: Any) -> Status:
            seen["nodes"] = self.handle.node_lister.num_nodes
            self.handle.events.eventf(pod, "Normal", "Probed", "Filter", node_info.name)
            return SUCCESS

    snapshot: NodeLister = Snapshot()  # the scheduler's snapshot is the Handle's node lister
    recorder = Recorder()
    profile = Profile.model_validate({"plugins": {"filter": {"enabled": [{"name": "Probe"}]}}})
    config = apply_default_plugins(SchedulerConfiguration(profiles=[profile]), BASE)
    registry = PluginRegistry()
    for cls in (Sort, Binder, Probe):
        registry.register(cls)
    fw = Framework(config.profiles[0], registry, node_lister=snapshot, events=recorder)
    assert fw.run_filter(CycleState(), POD, NODES[0]) is SUCCESS
    assert seen == {"nodes": 0}
    assert recorder.events == [("p", "Normal", "Probed", "Filter", "n0")]
    bare = build({"filter": {"enabled": [{"name": "Probe"}]}}, Probe)
    for service in ("node_lister", "events", "kube"):
        with pytest.raises(RuntimeError, match="built without"):
            getattr(bare, service)
