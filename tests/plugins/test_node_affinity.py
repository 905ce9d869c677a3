"""NodeAffinity: nodeSelector and required affinity filter, preferred affinity scores."""

from __future__ import annotations

from typing import Any

import pytest
from builders import Cluster, PodBuilder, expr, field_expr, make_node, make_pod, run_cycle, term

from gpusched.cache import NodeInfo
from gpusched.framework import (
    SKIP,
    SUCCESS,
    Code,
    ConfigError,
    CycleState,
    NodeScore,
    QueueingHint,
    build_frameworks,
    in_tree,
    parse_config,
)
from gpusched.plugins.node_affinity import (
    NAME,
    REASON_CONFLICT,
    REASON_ENFORCED,
    REASON_POD,
    NodeAffinity,
    NodeAffinityArgs,
)

LABELS = {"zone": "a", "gpu": "h100", "gen": "9", "tier": "gold"}


def node(name: str = "n", labels: dict[str, str] = LABELS) -> NodeInfo:
    builder = make_node(name)
    for key, value in labels.items():
        builder.label(key, value)
    return Cluster(builder).node(name)


def fits(plugin: NodeAffinity, pod: dict[str, Any], info: NodeInfo) -> bool | None:
    """True/False as Filter says; None when PreFilter skips the plugin."""
    state = CycleState()
    result, status = plugin.pre_filter(state, pod)
    if status is SKIP:
        return None
    assert status is SUCCESS, status
    if result is not None and result.node_names is not None and info.name not in result.node_names:
        return False
    verdict = plugin.filter(state, pod, info)
    if verdict is SUCCESS:
        return True
    assert (verdict.code, verdict.reasons, verdict.plugin) == (
        Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
        (REASON_POD,),
        NAME,
    )
    return False


def req(*terms: dict[str, Any]) -> PodBuilder:
    """A pod with these required node selector terms."""
    return make_pod().required(*terms)


def one(key: str, operator: str, *values: str) -> PodBuilder:
    """A pod with one required term of one expression."""
    return req(term(expr(key, operator, *values)))


def by_name(operator: str, *values: str, key: str = "metadata.name") -> PodBuilder:
    """A pod with one required term of one field expression."""
    return req(term(fields=[field_expr(operator, *values, key=key)]))


CASES: list[tuple[str, PodBuilder, bool | None]] = [
    ("nothing to check", make_pod(), None),
    ("only preferences", make_pod().preferred(5, term(expr("zone", "In", "a"))), None),
    ("selector matches", make_pod().node_selector(zone="a", gpu="h100"), True),
    ("selector value differs", make_pod().node_selector(zone="b"), False),
    ("selector label missing", make_pod().node_selector(rack="r1"), False),
    ("empty selector", make_pod().selector({}), True),
    ("In", one("zone", "In", "b", "a"), True),
    ("In, no value listed", one("zone", "In", "b"), False),
    ("In, label missing", one("rack", "In", "a"), False),
    ("NotIn", one("zone", "NotIn", "b"), True),
    ("NotIn, listed", one("zone", "NotIn", "a"), False),
    ("NotIn, label missing", one("rack", "NotIn", "a"), True),
    ("Exists", one("gpu", "Exists"), True),
    ("Exists, missing", one("rack", "Exists"), False),
    ("DoesNotExist", one("rack", "DoesNotExist"), True),
    ("DoesNotExist, present", one("gpu", "DoesNotExist"), False),
    ("Gt", one("gen", "Gt", "8"), True),
    ("Gt, equal", one("gen", "Gt", "9"), False),
    ("Lt", one("gen", "Lt", "+10"), True),
    ("Lt, not a number on the node", one("zone", "Lt", "10"), False),
    ("Gt, label missing", one("rack", "Gt", "1"), False),
    ("ANDed in a term", req(term(expr("zone", "In", "a"), expr("gpu", "In", "a100"))), False),
    (
        "ORed across terms",
        req(term(expr("gpu", "In", "a100")), term(expr("zone", "In", "a"))),
        True,
    ),
    ("empty term matches nothing", req(term()), False),
    ("no terms match nothing", req(), False),
    ("malformed term ignored", req(term(expr("zone", "In")), term(expr("gpu", "Exists"))), True),
    ("malformed Gt value", one("gen", "Gt", "1.5"), False),
    ("Exists with values", one("gen", "Exists", "9"), False),
    ("unknown operator", one("gen", "Near", "9"), False),
    (
        "selector and affinity",
        make_pod().node_selector(zone="a").required(term(expr("gpu", "In", "x"))),
        False,
    ),
    ("matchFields In", by_name("In", "n"), True),
    ("matchFields In, other", by_name("In", "m"), False),
    ("matchFields NotIn", by_name("NotIn", "m"), True),
    ("matchFields two values", by_name("NotIn", "m", "o"), False),
    ("matchFields unknown field", by_name("In", "x", key="spec.x"), False),
    ("labels and fields", req(term(expr("zone", "In", "a"), fields=[field_expr("In", "n")])), True),
]


@pytest.mark.parametrize(("what", "pod", "expected"), CASES, ids=[c[0] for c in CASES])
def test_filter(what: str, pod: PodBuilder, expected: bool | None) -> None:
    assert fits(NodeAffinity(), pod.obj(), node()) is expected


def test_filter_without_prefilter_computes_the_same() -> None:
    plugin = NodeAffinity()
    info = node()
    for _, pod, expected in CASES:
        verdict = plugin.filter(CycleState(), pod.obj(), info) is SUCCESS
        assert verdict is (expected is not False)


@pytest.mark.parametrize(
    ("terms", "names"),
    [
        ([term(fields=[field_expr("In", "a")]), term(fields=[field_expr("In", "b")])], {"a", "b"}),
        ([term(fields=[field_expr("In", "a"), field_expr("In", "a")])], {"a"}),
        ([term(fields=[field_expr("In", "a")]), term(expr("zone", "Exists"))], None),
        ([term(fields=[field_expr("NotIn", "a")])], None),
    ],
)
def test_prefilter_narrows_to_named_nodes(
    terms: list[dict[str, Any]], names: set[str] | None
) -> None:
    result, status = NodeAffinity().pre_filter(CycleState(), make_pod().required(*terms).obj())
    assert status is SUCCESS
    assert (result.node_names if result is not None else None) == names


def test_conflicting_node_names_are_unresolvable() -> None:
    pod = make_pod().required(term(fields=[field_expr("In", "a"), field_expr("In", "b")])).obj()
    _, status = NodeAffinity().pre_filter(CycleState(), pod)
    assert (status.code, status.reasons) == (
        Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
        (REASON_CONFLICT,),
    )


# -- Score -------------------------------------------------------------------------------------

NODES = {
    "a": {"zone": "a", "gpu": "h100"},
    "b": {"zone": "b", "gpu": "h100"},
    "c": {"zone": "c", "gpu": "a100"},
}


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        (make_pod().preferred(10, term(expr("zone", "In", "a"))), {"a": 100, "b": 0, "c": 0}),
        (
            make_pod()
            .preferred(30, term(expr("zone", "In", "a")))
            .preferred(10, term(expr("gpu", "In", "h100"))),
            {"a": 100, "b": 25, "c": 0},
        ),
        (make_pod().preferred(0, term(expr("zone", "In", "a"))), {"a": 0, "b": 0, "c": 0}),
        (make_pod().preferred(5, term()), {"a": 0, "b": 0, "c": 0}),
        (make_pod().preferred(5, term(expr("zone", "In", "x"))), {"a": 0, "b": 0, "c": 0}),
    ],
)
def test_score(pod: PodBuilder, expected: dict[str, int]) -> None:
    plugin = NodeAffinity()
    infos = [node(name, labels) for name, labels in NODES.items()]
    state = CycleState()
    assert plugin.pre_score(state, pod.obj(), infos) is SUCCESS
    scores = [NodeScore(i.name, plugin.score(state, pod.obj(), i)[0]) for i in infos]
    assert plugin.normalize_score(state, pod.obj(), scores) is SUCCESS
    assert {s.name: s.score for s in scores} == expected


def test_score_is_skipped_without_preferences() -> None:
    assert NodeAffinity().pre_score(CycleState(), make_pod().obj(), []) is SKIP


def test_malformed_preference_is_an_error() -> None:
    pod = make_pod().preferred(5, term(expr("zone", "In"))).obj()
    status = NodeAffinity().pre_score(CycleState(), pod, [])
    assert status.code == Code.ERROR
    assert "values: must be non-empty" in status.message()


# -- args --------------------------------------------------------------------------------------

CONFIG = """\
apiVersion: gpusched.io/v1alpha1
kind: SchedulerConfiguration
profiles:
- schedulerName: gpusched
  pluginConfig:
  - name: NodeAffinity
    args:
      addedAffinity:
        requiredDuringSchedulingIgnoredDuringExecution:
          nodeSelectorTerms:
          - matchExpressions: [{key: gpu, operator: In, values: [h100]}]
        preferredDuringSchedulingIgnoredDuringExecution:
        - {weight: 10, preference: {matchExpressions: [{key: zone, operator: In, values: [b]}]}}
"""


def test_added_affinity_applies_to_every_pod() -> None:
    fw = build_frameworks(parse_config(CONFIG), in_tree())["gpusched"]
    plugin = fw.plugins[NAME]
    assert isinstance(plugin, NodeAffinity)
    cluster = Cluster(
        *(make_node(n).label("zone", v["zone"]).label("gpu", v["gpu"]) for n, v in NODES.items())
    )
    pod = make_pod().obj()
    result = run_cycle(fw, pod, cluster.nodes())
    c = result.statuses["c"]
    assert (c.code, c.reasons, c.plugin) == (
        Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
        (REASON_ENFORCED,),
        NAME,
    )
    assert result.feasible == ["a", "b"]
    assert result.best == "b"  # the added preference


REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def added_required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"addedAffinity": {REQUIRED: {"nodeSelectorTerms": list(terms)}}}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (added_required(), "at least 1 item"),
        ({"addedAffinity": {PREFERRED: [{"weight": 0, "preference": {}}]}}, "must be >= 1"),
        (added_required(term(expr("a", "Gt", "x"))), "one integer value"),
        (added_required(term(fields=[expr("metadata.name", "Exists")])), "must have one element"),
    ],
)
def test_bad_args_are_config_errors(args: dict[str, Any], message: str) -> None:
    config = parse_config(
        "apiVersion: gpusched.io/v1alpha1\nkind: SchedulerConfiguration\n"
        "profiles: [{pluginConfig: [{name: NodeAffinity, args: ARGS}]}]\n".replace(
            "ARGS", repr(args).replace("'", '"')
        )
    )
    with pytest.raises(ConfigError, match=message):
        build_frameworks(config, in_tree())


def test_args_model_round_trips() -> None:
    args = NodeAffinityArgs.model_validate({"addedAffinity": None})
    assert NodeAffinity(args).filter(CycleState(), make_pod().obj(), node()) is SUCCESS


def test_requeued_when_a_node_starts_to_match() -> None:
    (event,) = NodeAffinity().events_to_register()
    hint = event.queueing_hint_fn
    assert hint is not None
    pod = make_pod().node_selector(zone="a").obj()
    a, _ = make_node().label("zone", "a").build()
    b, _ = make_node().label("zone", "b").build()
    assert hint(pod, None, a) == QueueingHint.QUEUE
    assert hint(pod, None, b) == QueueingHint.QUEUE_SKIP
    assert hint(pod, b, a) == QueueingHint.QUEUE
    assert hint(pod, a, a) == QueueingHint.QUEUE_SKIP
