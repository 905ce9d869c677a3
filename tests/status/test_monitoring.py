"""deploy/monitoring/: every metric the alert rules and the Grafana dashboard query is one gpusched
registers, with the labels it has (and label values the code writes); the rule file has the
structure Prometheus loads (promtool is not here) and the PrometheusRule carries the same rules;
the kustomize Component adds the scrape configuration, the rules and the dashboard to the
install; the node agent's and the scheduler's metrics the dashboard needs are set."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpusched.agent.main import AgentMetrics
from gpusched.agent.telemetry import GPUReading
from gpusched.clock import RealClock
from gpusched.framework import default_config
from gpusched.inventory import GPUDevice, GPUNodeInventory
from gpusched.metrics import Metrics
from gpusched.preflight import Preflight

REPO = Path(__file__).resolve().parent.parent.parent
MONITORING = REPO / "deploy" / "monitoring"
DASHBOARD = MONITORING / "gpusched-dashboard.json"
KUBECTL = shutil.which("kubectl")

SCRAPE_LABELS = frozenset({"job", "instance", "node", "namespace", "pod", "service", "endpoint"})
"""Labels Prometheus (and the Prometheus Operator's relabelling) adds to every series."""
PROMETHEUS_SERIES = {"up": frozenset()}
"""Series Prometheus makes itself."""
PROMQL_WORDS = frozenset(
    {"by", "without", "on", "ignoring", "and", "or", "unless", "bool", "offset", "group_left"}
)


def registered() -> dict[str, frozenset[str]]:
    """Every series name gpusched exposes (scheduler, preflight, node agent), with its labels."""
    config = default_config()
    metrics = Metrics()
    Preflight(None, config, RealClock(), registry=metrics.registry)  # type: ignore[arg-type]
    series: dict[str, frozenset[str]] = {}
    for registry in (metrics.registry, AgentMetrics().registry):
        for collector in list(registry._collector_to_names):
            name, kind = collector._name, collector._type
            labels = frozenset(collector._labelnames)
            if kind == "counter":
                series[f"{name}_total"] = labels
            elif kind == "histogram":
                series[f"{name}_bucket"] = labels | {"le"}
                series[f"{name}_sum"] = series[f"{name}_count"] = labels
            else:
                series[name] = labels
    return series


def selectors(expr: str) -> tuple[list[tuple[str, dict[str, str]]], set[str]]:
    """The vector selectors of a PromQL expression (metric, equality matchers) and the label
    names of its ``by``/``without`` clauses."""
    expr = expr.replace("$__rate_interval", "5m")
    grouped: set[str] = set()
    for clause in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", expr):
        grouped |= {label.strip() for label in clause.split(",") if label.strip()}
    expr = re.sub(r"\b(?:by|without)\s*\([^)]*\)", " ", expr)
    expr = re.sub(r"\[[^\]]*\]", " ", expr)
    found = []
    for match in re.finditer(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{[^}]*\})?\s*(\()?", expr):
        name, matchers, call = match.groups()
        if call or name in PROMQL_WORDS:
            continue
        pairs = dict(re.findall(r'([a-zA-Z_]\w*)\s*=~?\s*"([^"]*)"', matchers or ""))
        for key in re.findall(r"([a-zA-Z_]\w*)\s*!=", matchers or ""):
            pairs.setdefault(key, "")
        found.append((name, pairs))
    return found, grouped


def rule_exprs() -> list[tuple[str, str]]:
    rules = yaml.safe_load((MONITORING / "rules.yaml").read_text())
    return [(r["alert"], r["expr"]) for g in rules["groups"] for r in g["rules"]]


def dashboard_exprs() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [
        (panel["title"], target["expr"])
        for panel in dashboard["panels"]
        for target in panel.get("targets", ())
    ]


_SOURCE = "\n".join(p.read_text() for p in (REPO / "gpusched").rglob("*.py"))


@pytest.mark.parametrize(
    ("where", "expr"), rule_exprs() + dashboard_exprs(), ids=lambda v: str(v)[:60]
)
def test_every_metric_and_label_queried_is_registered(where: str, expr: str) -> None:
    series = registered()
    found, grouped = selectors(expr)
    assert found, f"{where}: no metric in {expr!r}"
    labels: set[str] = set()
    for name, matchers in found:
        known = series.get(name, PROMETHEUS_SERIES.get(name))
        assert known is not None, f"{where}: {name} is not a metric gpusched registers"
        labels |= known
        for key, value in matchers.items():
            assert key in known | SCRAPE_LABELS, f"{where}: {name} has no label {key}"
            if value and key not in SCRAPE_LABELS and not value.startswith("$"):
                assert f'"{value}"' in _SOURCE, f"{where}: {name}{{{key}={value!r}}} is never set"
    unknown = grouped - labels - SCRAPE_LABELS
    assert not unknown, f"{where}: grouped by labels the metrics do not have: {unknown}"


def test_the_rule_file_has_the_structure_prometheus_loads() -> None:
    rules = yaml.safe_load((MONITORING / "rules.yaml").read_text())
    assert set(rules) == {"groups"}
    names = []
    for group in rules["groups"]:
        assert set(group) == {"name", "rules"}
        for rule in group["rules"]:
            assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}
            names.append(rule["alert"])
            assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", rule["alert"])
            assert isinstance(rule["expr"], str)
            assert rule["expr"].count("(") == rule["expr"].count(")")
            if "for" in rule:
                assert re.fullmatch(r"[0-9]+[smhd]", rule["for"])
            assert rule["labels"]["severity"] in ("critical", "warning")
            assert {"summary", "description"} <= set(rule["annotations"])
    assert len(names) == len(set(names))
    wanted = {
        "GpuschedPodsPendingLong",
        "GpuschedBindErrors",
        "GpuschedNoLeader",
        "GpuschedLeaderFlapping",
        "GpuschedReservationsExpiringUnused",
        "GpuschedAgentNotReporting",
        "GpuschedGPUUnhealthy",
    }
    assert wanted <= set(names)


def test_the_prometheus_rule_carries_the_same_rules() -> None:
    plain = yaml.safe_load((MONITORING / "rules.yaml").read_text())
    crd = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    assert (crd["apiVersion"], crd["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    assert crd["spec"] == plain


def test_the_dashboard_is_well_formed() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "gpusched"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24
        if panel["type"] != "row":
            assert panel["targets"]
            assert panel["datasource"]["uid"] == "${datasource}"
    (node,) = [v for v in dashboard["templating"]["list"] if v["name"] == "node"]
    metric, label = re.fullmatch(r"label_values\((\w+), (\w+)\)", node["definition"]).groups()
    assert label in registered()[metric]


@pytest.mark.kubectl
@pytest.mark.skipif(KUBECTL is None, reason="needs kubectl (kustomize)")
def test_the_component_adds_monitoring_to_the_install(tmp_path: Path) -> None:
    deploy = os.path.relpath(REPO / "deploy", tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        f"resources: [{deploy}]\ncomponents: [{deploy}/monitoring]\n"
    )
    assert KUBECTL is not None
    out = subprocess.run(
        [KUBECTL, "kustomize", str(tmp_path)], capture_output=True, text=True, check=True
    ).stdout
    objs: dict[tuple[str, str], dict[str, Any]] = {
        (o["kind"], o["metadata"]["name"]): o for o in yaml.safe_load_all(out) if o
    }
    for key in [
        ("ServiceMonitor", "gpusched"),
        ("PodMonitor", "gpusched-agent"),
        ("PrometheusRule", "gpusched"),
        ("Deployment", "gpusched"),
    ]:
        assert key in objs, key
    config_map = objs["ConfigMap", "gpusched-grafana-dashboard"]
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(config_map["data"]["gpusched-dashboard.json"]) == json.loads(
        DASHBOARD.read_text()
    )
    # The monitors select what the install labels.
    service = objs["Service", "gpusched-metrics"]
    wanted = objs["ServiceMonitor", "gpusched"]["spec"]["selector"]["matchLabels"]
    assert wanted.items() <= service["metadata"]["labels"].items()
    agent = objs["DaemonSet", "gpusched-agent"]["spec"]["template"]["metadata"]["labels"]
    assert (
        objs["PodMonitor", "gpusched-agent"]["spec"]["selector"]["matchLabels"].items()
        <= agent.items()
    )


def test_the_agent_exports_each_gpus_memory_and_the_reading_time() -> None:
    inventory = GPUNodeInventory(
        node_name="n",
        source="nvml",
        driver_version="550.127.05",
        cuda_driver_version="12.4",
        gpus=(
            GPUDevice(
                index=0,
                uuid="GPU-00000000-0000-0000-0000-000000000000",
                product="NVIDIA H100 80GB HBM3",
                memory_mib=81559,
                pci_bus_id="00000000:18:00.0",
                mig_enabled=False,
            ),
        ),
    )
    reading = GPUReading(0, 4096, 35, 50, 0, "Healthy", None)
    metrics = AgentMetrics()
    metrics.observe(inventory, [reading], 1_800_000_000.0)
    sample = metrics.registry.get_sample_value
    assert sample("gpusched_agent_gpu_memory_used_mib", {"gpu": "0"}) == 4096
    assert sample("gpusched_agent_gpu_memory_total_mib", {"gpu": "0"}) == 81559
    assert sample("gpusched_agent_gpu_utilization_percent", {"gpu": "0"}) == 35
    assert sample("gpusched_agent_last_reading_timestamp_seconds") == 1_800_000_000.0


def test_the_leader_gauge_reads_the_elector() -> None:
    metrics = Metrics()
    leading = [False]
    metrics.leader.labels("gpusched").set_function(lambda: float(leading[0]))
    sample = metrics.registry.get_sample_value
    assert sample("leader_election_master_status", {"name": "gpusched"}) == 0
    leading[0] = True
    assert sample("leader_election_master_status", {"name": "gpusched"}) == 1
