"""GPUCost: where a node's price comes from (label, GPUClass, cheap label, none), the score of
a price, the signature (class edits change it), args validation, and a profile that places on
the cheapest fitting node."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pytest
from builders import H100, V100, Cluster, NodeBuilder, make_node, make_pod, run_cycle

from gpusched.framework import ConfigError, CycleState, build_frameworks, in_tree, parse_config
from gpusched.gpu_policy.models import GPUClass
from gpusched.plugins.gpu_cost import (
    CHEAP_LABEL,
    PRICE_LABEL,
    GPUCost,
    GPUCostArgs,
    parse_price,
    price_score,
)


def _class(name: str, price: float | None, **spec: Any) -> GPUClass:
    body: dict[str, Any] = {"metadata": {"name": name}, "spec": dict(spec)}
    if price is not None:
        body["spec"]["price"] = price
    return GPUClass.model_validate(body)


class _Handle:
    claim_specs = None

    def __init__(self, classes: Mapping[str, GPUClass]) -> None:
        self.gpu_classes = classes


def _plugin(classes: Mapping[str, GPUClass] | None = None, **args: Any) -> GPUCost:
    return GPUCost(GPUCostArgs(**args), _Handle(classes if classes is not None else {}))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("2.49", 2.49),
        (" 3 ", 3.0),
        ("0", 0.0),
        ("-1", None),
        ("cheap", None),
        ("nan", None),
        ("inf", None),
        ("", None),
        (None, None),
    ],
)
def test_parse_price(text: str | None, want: float | None) -> None:
    assert parse_price(text) == want


@pytest.mark.parametrize(
    ("price", "maximum", "want"),
    [(0, 10, 100), (1, 10, 90), (2.49, 10, 75), (5, 10, 50), (10, 10, 0), (25, 10, 0), (3, 4, 25)],
)
def test_price_score(price: float, maximum: float, want: int) -> None:
    assert price_score(price, maximum) == want


H100_CLASS = _class("h100", 4.0, products=[H100])
V100_CLASS = _class("v100", 1.0, products=[V100])
CHEAP_POOL = _class("cheap-pool", 2.0, nodeSelector={"matchLabels": {"pool": "spot"}})
UNPRICED = _class("unpriced", None)


def _h100(name: str = "n") -> NodeBuilder:
    return make_node(name).gpus(8)


@pytest.mark.parametrize(
    ("labels", "classes", "pod_class", "want"),
    [
        # the label first, whatever the classes say
        ({PRICE_LABEL: "1"}, [H100_CLASS], None, 90),
        ({PRICE_LABEL: "1", CHEAP_LABEL: "true"}, [], None, 90),
        # a malformed label counts as none: the class price, else the cheap mark, else unpriced
        ({PRICE_LABEL: "one"}, [H100_CLASS], None, 60),
        ({PRICE_LABEL: "one", CHEAP_LABEL: "true"}, [], None, 100),
        # classes: the lowest price of the node's classes, or the pod's class when priced
        ({}, [H100_CLASS], None, 60),
        ({"pool": "spot"}, [H100_CLASS, CHEAP_POOL], None, 80),
        ({"pool": "spot"}, [H100_CLASS, CHEAP_POOL], "h100", 60),
        ({"pool": "spot"}, [H100_CLASS, CHEAP_POOL], "unpriced", 80),
        ({}, [V100_CLASS], None, 0),  # the node has no V100: unpriced
        ({}, [UNPRICED], None, 0),
        # the seed's label
        ({CHEAP_LABEL: "true"}, [], None, 100),
        ({CHEAP_LABEL: "false"}, [], None, 0),
        ({CHEAP_LABEL: "true"}, [V100_CLASS], None, 100),
        ({}, [], None, 0),
    ],
)
def test_price_sources(
    labels: dict[str, str], classes: list[GPUClass], pod_class: str | None, want: int
) -> None:
    node = _h100("n")
    for key, value in labels.items():
        node.label(key, value)
    cluster = Cluster(node)
    plugin = _plugin({c.name: c for c in classes})
    pod = make_pod("p").gpus(1)
    if pod_class is not None:
        pod.annotate("gpusched.io/gpu-class", pod_class)
    obj = pod.obj()
    state = CycleState()
    assert plugin.pre_score(state, obj, cluster.nodes()).is_success
    assert plugin.score(state, obj, cluster.node("n"))[0] == want
    assert plugin.score(CycleState(), obj, cluster.node("n"))[0] == want  # without PreScore


@pytest.mark.parametrize(
    ("args", "labels", "want"),
    [
        ({"max_price": 4}, {PRICE_LABEL: "1"}, 75),
        ({"cheap_score": 70}, {CHEAP_LABEL: "true"}, 70),
        ({"unpriced_score": 50}, {}, 50),
        ({"price_label": "example.com/cost"}, {"example.com/cost": "5"}, 50),
        ({"cheap_label": "example.com/spot"}, {"example.com/spot": "true"}, 100),
    ],
)
def test_args(args: dict[str, Any], labels: dict[str, str], want: int) -> None:
    node = _h100("n")
    for key, value in labels.items():
        node.label(key, value)
    cluster = Cluster(node)
    pod = make_pod("p").gpus(1).obj()
    assert _plugin(**args).score(CycleState(), pod, cluster.node("n"))[0] == want


def test_a_malformed_label_is_logged_once_with_the_fix(caplog: pytest.LogCaptureFixture) -> None:
    cluster = Cluster(_h100("n").label(PRICE_LABEL, "$3"))
    plugin = _plugin()
    pod = make_pod("p").gpus(1).obj()
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            plugin.score(CycleState(), pod, cluster.node("n"))
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1
    assert "'$3' is not a price" in messages[0]
    assert '"2.49"' in messages[0]


def test_signature_follows_the_pod_class_and_the_priced_classes() -> None:
    classes: dict[str, GPUClass] = {}
    plugin = _plugin(classes)
    plain = make_pod("p").gpus(1).obj()
    h100 = make_pod("q").gpus(2).annotate("gpusched.io/gpu-class", "h100").obj()
    assert plugin.sign_pod(plain) == plugin.sign_pod(h100) == ()  # nothing priced
    classes["h100"] = H100_CLASS
    first = plugin.sign_pod(plain)
    assert first != ()
    assert plugin.sign_pod(h100) != first
    assert plugin.sign_pod(make_pod("r").gpus(4).obj()) == first
    classes["h100"] = _class("h100", 3.0, products=[H100])  # a price edit: another class
    assert plugin.sign_pod(plain) != first
    classes["unpriced"] = UNPRICED  # an unpriced class changes nothing here
    second = plugin.sign_pod(plain)
    assert plugin.sign_pod(plain) == second


def test_a_class_edit_reaches_the_memoised_node() -> None:
    classes = {"h100": H100_CLASS}
    plugin = _plugin(classes)
    cluster = Cluster(_h100("n"))
    pod = make_pod("p").gpus(1).obj()
    assert plugin.score(CycleState(), pod, cluster.node("n"))[0] == 60
    classes["h100"] = _class("h100", 1.0, products=[H100])
    assert plugin.score(CycleState(), pod, cluster.node("n"))[0] == 90


def _config(args: str = "{}") -> str:
    return f"""
apiVersion: gpusched.io/v1alpha1
kind: SchedulerConfiguration
profiles:
- plugins:
    multiPoint: {{enabled: [{{name: GPUCost, weight: 10}}]}}
  pluginConfig:
  - {{name: GPUCost, args: {args}}}
"""


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ("{maxPrice: 0}", "maxPrice"),
        ("{maxPrice: .nan}", "maxPrice"),
        ("{cheapScore: 101}", "cheapScore"),
        ("{unpricedScore: -1}", "unpricedScore"),
        ("{priceLabel: ''}", "priceLabel"),
        ("{price: 1}", "price"),
    ],
)
def test_bad_args_fail_with_the_field(args: str, error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        build_frameworks(parse_config(_config(args)), in_tree())


@pytest.mark.parametrize(
    ("gpus", "want"),
    [(1, "cheap"), (4, "cheap"), (6, "mid"), (8, "dear")],
)
def test_in_a_profile_the_cheapest_fitting_node_wins(gpus: int, want: str) -> None:
    cluster = Cluster(
        _h100("dear").label(PRICE_LABEL, "6"),
        _h100("cheap").label(PRICE_LABEL, "1"),
        _h100("mid").label(PRICE_LABEL, "3"),
        make_node("v100").dgx1(),  # unpriced
    )
    cluster.bind(make_pod("on-cheap", uid="on-cheap").gpus(4).on("cheap").assigned(range(4)))
    cluster.bind(make_pod("on-mid", uid="on-mid").gpus(2).on("mid").assigned(range(2)))
    fw = build_frameworks(parse_config(_config()), in_tree())["gpusched"]
    assert run_cycle(fw, make_pod("p").gpus(gpus).obj(), cluster.nodes()).best == want


def test_in_a_profile_class_prices_rank_nodes() -> None:
    classes = {"h100": H100_CLASS, "v100": V100_CLASS}
    cluster = Cluster(_h100("h"), make_node("v").dgx1())
    fw = build_frameworks(parse_config(_config()), in_tree(), gpu_classes=classes)["gpusched"]
    assert run_cycle(fw, make_pod("p").gpus(1).obj(), cluster.nodes()).best == "v"


def test_all_names_the_public_api() -> None:
    import gpusched.plugins.gpu_cost as module

    classes_and_functions = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and getattr(value, "__module__", "") == module.__name__
    }
    assert classes_and_functions <= set(module.__all__)
    assert sorted(module.__all__) == sorted(
        [
            "CHEAP_LABEL",
            "NAME",
            "PRICE_LABEL",
            "GPUCost",
            "GPUCostArgs",
            "parse_price",
            "price_score",
        ]
    )
