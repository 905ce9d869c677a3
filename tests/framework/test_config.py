"""Configuration: a good file, defaults and merging, and one message per kind of mistake.

Every message names the file, the line, the field path and what to fix.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from gpusched.framework import (
    SUCCESS,
    BindPlugin,
    ConfigError,
    CycleState,
    FilterPlugin,
    Framework,
    PluginArgs,
    PluginRef,
    PluginRegistry,
    Plugins,
    PluginSet,
    QueueSortPlugin,
    SchedulerConfiguration,
    ScorePlugin,
    Status,
    build_frameworks,
    default_config,
    load_config,
    parse_config,
)
from gpusched.framework.config import merge_plugin_set, parse_duration

HEADER = "apiVersion: gpusched.io/v1alpha1\nkind: SchedulerConfiguration\n"


def write(tmp_path: Path, body: str, header: bool = True) -> Path:
    path = tmp_path / "gpusched.yaml"
    path.write_text((HEADER if header else "") + textwrap.dedent(body))
    return path


def problems(tmp_path: Path, body: str, header: bool = True) -> str:
    path = write(tmp_path, body, header)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.source == str(path)
    return str(info.value).replace(str(path), "gpusched.yaml")


# -- good configurations ---------------------------------------------------------------------


def test_a_good_file(tmp_path: Path) -> None:
    config = load_config(
        write(
            tmp_path,
            """\
            profiles:
            - schedulerName: gpusched
              plugins:
                score:
                  enabled: [{name: PreferH100, weight: 2}]
              pluginConfig:
              - name: PreferH100
                args: {bonus: 10}
            - schedulerName: gpusched-batch
            podInitialBackoffSeconds: 2
            podMaxBackoffSeconds: 20
            podMaxInUnschedulablePodsDuration: 2m
            percentageOfNodesToScore: 30
            parallelism: 8
            leaderElection:
              leaseDuration: 30s
              renewDeadline: 20s
              retryPeriod: 500ms
            reservations: {namespace: gpu-leases, leaseDurationSeconds: 90}
            """,
        )
    )
    assert [p.scheduler_name for p in config.profiles] == ["gpusched", "gpusched-batch"]
    score = config.profiles[0].plugins.score
    assert score.enabled == [PluginRef(name="PreferH100", weight=2)]
    assert config.profiles[0].plugin_args("PreferH100") == (0, {"bonus": 10})
    assert config.pod_max_in_unschedulable_pods_duration == 120.0
    assert config.leader_election.retry_period == 0.5
    assert config.reservations.lease_duration_seconds == 90
    assert config.model_dump()["podMaxBackoffSeconds"] == 20  # camelCase out, as in


def test_defaults_are_kube_schedulers() -> None:
    config = default_config()
    assert config.api_version == "gpusched.io/v1alpha1"
    assert config.kind == "SchedulerConfiguration"
    assert [p.scheduler_name for p in config.profiles] == ["gpusched"]
    assert (config.pod_initial_backoff_seconds, config.pod_max_backoff_seconds) == (1, 10)
    assert config.pod_max_in_unschedulable_pods_duration == 300.0
    assert config.percentage_of_nodes_to_score == 0
    le = config.leader_election
    assert (le.leader_elect, le.lease_duration, le.renew_deadline, le.retry_period) == (
        True,
        15.0,
        10.0,
        2.0,
    )
    assert (le.resource_name, le.resource_namespace) == ("gpusched", "gpusched-system")
    assert config.reservations.namespace == "gpusched-system"


def test_a_minimal_file_is_the_default(tmp_path: Path) -> None:
    assert load_config(write(tmp_path, "")) == default_config()


def test_every_field_has_a_docstring() -> None:
    def models(model: Any, seen: set[Any]) -> None:
        if model in seen:
            return
        seen.add(model)
        for name, f in model.model_fields.items():
            assert f.description, f"{model.__name__}.{name} has no docstring"
            sub = getattr(f.annotation, "model_fields", None)
            if sub is not None:
                models(f.annotation, seen)

    seen: set[Any] = set()
    models(SchedulerConfiguration, seen)
    from gpusched.framework.config import (
        LeaderElection,
        PluginConfig,
        Profile,
        Reservations,
    )

    for model in (Profile, PluginConfig, LeaderElection, Reservations, PluginSet, PluginRef):
        models(model, seen)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("15s", 15.0), ("1m30s", 90.0), ("500ms", 0.5), ("1.5h", 5400.0), ("2h0m1s", 7201.0)],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "15", "s", "1m 30s", "-1s", "1d"])
def test_not_durations(text: str) -> None:
    assert parse_duration(text) is None


# -- default plugins -------------------------------------------------------------------------


def _names(pset: PluginSet) -> list[tuple[str, int | None]]:
    return [(p.name, p.weight) for p in pset.enabled]


def _set(*enabled: str | tuple[str, int], disabled: tuple[str, ...] = ()) -> PluginSet:
    refs = [
        PluginRef(name=e) if isinstance(e, str) else PluginRef(name=e[0], weight=e[1])
        for e in enabled
    ]
    return PluginSet.model_validate({"enabled": refs, "disabled": [{"name": d} for d in disabled]})


@pytest.mark.parametrize(
    ("custom", "expected"),
    [
        pytest.param(_set(), [("D1", None), ("D2", 2), ("D3", None)], id="defaults"),
        pytest.param(
            _set("Mine"), [("D1", None), ("D2", 2), ("D3", None), ("Mine", None)], id="appended"
        ),
        pytest.param(_set(disabled=("D2",)), [("D1", None), ("D3", None)], id="one-disabled"),
        pytest.param(_set("Mine", disabled=("*",)), [("Mine", None)], id="star-disables-all"),
        pytest.param(
            _set("Mine", ("D2", 5)),
            [("D1", None), ("D2", 5), ("D3", None), ("Mine", None)],
            id="default-reconfigured-in-place",
        ),
    ],
)
def test_merge_with_defaults(custom: PluginSet, expected: list[tuple[str, int | None]]) -> None:
    defaults = _set("D1", ("D2", 2), "D3")
    merged = merge_plugin_set(defaults, custom)
    assert _names(merged) == expected
    assert merge_plugin_set(defaults, merged) == merged  # idempotent


def test_default_plugins_are_merged_into_each_profile(tmp_path: Path) -> None:
    defaults = Plugins(multi_point=_set("Sort", "Binder", "Fit"), filter=_set("Taints"))
    config = load_config(
        write(
            tmp_path,
            """\
            profiles:
            - schedulerName: a
              plugins:
                multiPoint: {enabled: [{name: Mine}], disabled: [{name: Fit}]}
            - schedulerName: b
              plugins:
                filter: {disabled: [{name: "*"}]}
            """,
        ),
        default_plugins=defaults,
    )
    a, b = config.profiles
    assert [p.name for p in a.plugins.multi_point.enabled] == ["Sort", "Binder", "Mine"]
    assert [p.name for p in a.plugins.filter.enabled] == ["Taints"]
    assert [p.name for p in b.plugins.multi_point.enabled] == ["Sort", "Binder", "Fit"]
    assert b.plugins.filter.enabled == []


# -- bad files: one message per mistake ------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param(
            """\
            profiles:
            - plugins:
                score:
                  enabled:
                  - name: A
                  - {name: B, weight: 0}
            """,
            "gpusched.yaml:8: profiles[0].plugins.score.enabled[1].weight: must be >= 1 (got 0)",
            id="weight-zero",
        ),
        pytest.param(
            """\
            profiles:
            - plugin: {}
            """,
            "gpusched.yaml:4: profiles[0].plugin: unknown field; did you mean 'plugins'? "
            "(allowed here: schedulerName, plugins, pluginConfig)",
            id="unknown-field",
        ),
        pytest.param(
            "podInitialBackoffSeconds: soon\n",
            "gpusched.yaml:3: podInitialBackoffSeconds: must be an integer (got 'soon')",
            id="wrong-type",
        ),
        pytest.param(
            "percentageOfNodesToScore: 150\n",
            "gpusched.yaml:3: percentageOfNodesToScore: must be <= 100 (got 150)",
            id="out-of-range",
        ),
        pytest.param(
            "leaderElection: {leaseDuration: 15 seconds}\n",
            "gpusched.yaml:3: leaderElection.leaseDuration: must be a duration such as 15s, 1m30s "
            "or 500ms, or a number of seconds (got '15 seconds')",
            id="bad-duration",
        ),
        pytest.param(
            "leaderElection: {leaseDuration: 8s}\n",
            "gpusched.yaml:3: leaderElection.renewDeadline: must be less than leaseDuration "
            "(10s >= 8s)",
            id="renew-deadline-vs-lease",
        ),
        pytest.param(
            "podMaxBackoffSeconds: 5\npodInitialBackoffSeconds: 8\n",
            "gpusched.yaml:3: podMaxBackoffSeconds: must be >= podInitialBackoffSeconds (5 < 8)",
            id="backoff-order",
        ),
        pytest.param(
            "profiles: []\n",
            "gpusched.yaml:3: profiles: must have at least 1 item(s)",
            id="no-profiles",
        ),
        pytest.param(
            """\
            profiles:
            - schedulerName: gpusched
            - schedulerName: gpusched
            """,
            "gpusched.yaml:5: profiles[1].schedulerName: 'gpusched' is also used by profiles[0]; "
            "each profile needs its own schedulerName",
            id="duplicate-scheduler-name",
        ),
        pytest.param(
            """\
            profiles:
            - pluginConfig:
              - {name: A, args: {}}
              - {name: A, args: {x: 1}}
            """,
            "gpusched.yaml:6: profiles[0].pluginConfig[1].name: 'A' is configured twice "
            "(also pluginConfig[0]); merge the two entries",
            id="duplicate-plugin-config",
        ),
        pytest.param(
            """\
            profiles:
            - plugins:
                filter: {enabled: [{name: A, weight: 2}]}
            """,
            "gpusched.yaml:5: profiles[0].plugins.filter.enabled[0].weight: weight is only used "
            "in score and multiPoint, not in filter; remove it",
            id="weight-outside-score",
        ),
        pytest.param(
            """\
            profiles:
            - plugins:
                score: {enabled: [{name: A}, {name: A}]}
            """,
            "gpusched.yaml:5: profiles[0].plugins.score.enabled[1].name: plugin 'A' is enabled "
            "twice (also enabled[0])",
            id="enabled-twice",
        ),
        pytest.param(
            """\
            profiles:
            - plugins:
                score: {enabled: [{weight: 2}]}
            """,
            "gpusched.yaml:5: profiles[0].plugins.score.enabled[0].name: is required",
            id="missing-name",
        ),
        pytest.param(
            """\
            profiles:
            - plugins:
                filter: {disabled: [{name: A, weight: 1}]}
            """,
            "gpusched.yaml:5: profiles[0].plugins.filter.disabled[0].weight: unknown field "
            "(allowed here: name)",
            id="weight-in-disabled",
        ),
        pytest.param(
            "events: {qps: 0, burst: 10}\n",
            "gpusched.yaml:3: events.qps: must be > 0.0 (got 0)",
            id="events-qps",
        ),
        pytest.param(
            "profiles: {schedulerName: x}\n",
            "gpusched.yaml:3: profiles: must be a list (got a mapping)",
            id="not-a-list",
        ),
    ],
)
def test_bad_files(tmp_path: Path, body: str, message: str) -> None:
    assert problems(tmp_path, body) == message


def test_several_problems_are_all_reported(tmp_path: Path) -> None:
    text = problems(tmp_path, "parallelism: 0\nprofiles: [{bogus: 1}]\n")
    assert text.splitlines() == [
        "gpusched.yaml:4: profiles[0].bogus: unknown field (allowed here: schedulerName, "
        "plugins, pluginConfig)",
        "gpusched.yaml:3: parallelism: must be >= 1 (got 0)",
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "apiVersion: gpusched.io/v1alpha1\nkind: [SchedulerConfiguration\nparallelism: 2\n",
            "gpusched.yaml:3:12: invalid YAML: expected ',' or ']', but got ':' "
            "(while parsing a flow sequence)",
            id="syntax",
        ),
        pytest.param(
            "apiVersion: gpusched.io/v1alpha1\n\tkind: SchedulerConfiguration\n",
            "gpusched.yaml:2:1: invalid YAML: found character '\\t' that cannot start any token "
            "(while scanning for the next token)",
            id="tab",
        ),
        pytest.param(
            HEADER + "parallelism: 4\nparallelism: 8\n",
            "gpusched.yaml:4:1: invalid YAML: duplicate key 'parallelism' (first on line 3)",
            id="duplicate-key",
        ),
        pytest.param(
            "",
            "gpusched.yaml: the configuration is empty; it needs at least apiVersion: "
            "gpusched.io/v1alpha1 and kind: SchedulerConfiguration",
            id="empty",
        ),
        pytest.param(
            "- a\n- b\n",
            "gpusched.yaml:1: the top level must be a mapping with apiVersion: "
            "gpusched.io/v1alpha1 and kind: SchedulerConfiguration (got a list)",
            id="not-a-mapping",
        ),
        pytest.param(
            "kind: SchedulerConfiguration\n",
            "gpusched.yaml:1: apiVersion: is required; add apiVersion: gpusched.io/v1alpha1",
            id="no-api-version",
        ),
        pytest.param(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n",
            "gpusched.yaml:1: apiVersion: must be 'gpusched.io/v1alpha1' (got "
            "'kubescheduler.config.k8s.io/v1')\n"
            "gpusched.yaml:2: kind: must be 'SchedulerConfiguration' (got "
            "'KubeSchedulerConfiguration'); this looks like kube-scheduler's configuration: "
            "gpusched reads apiVersion: gpusched.io/v1alpha1, kind: SchedulerConfiguration",
            id="kube-scheduler-file",
        ),
    ],
)
def test_bad_documents(tmp_path: Path, text: str, message: str) -> None:
    assert problems(tmp_path, text, header=False) == message


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "missing.yaml")
    assert str(info.value) == (
        f"{tmp_path / 'missing.yaml'}: cannot read the configuration: No such file or directory"
    )


# -- mistakes found when the framework is built ----------------------------------------------


class Sort(QueueSortPlugin):
    NAME = "Sort"

    def sort_key(self, info: Any) -> tuple[Any, ...]:
        return (info.timestamp,)


class OtherSort(Sort):
    NAME = "OtherSort"


class Binder(BindPlugin):
    NAME = "Binder"

    async def bind(self, state: CycleState, pod: Any, node_name: str) -> Status:
        return SUCCESS


class FitArgs(PluginArgs):
    max_gpus: int = 8
    """Most GPUs a pod may ask for."""


class Fit(FilterPlugin):
    NAME = "Fit"
    ARGS = FitArgs

    def __init__(self, max_gpus: int = 8) -> None:
        self.max_gpus = max_gpus

    @classmethod
    def new(cls, args: FitArgs, handle: Any) -> Fit:
        if args.max_gpus == 13:
            raise ValueError("13 is unlucky")
        return cls(args.max_gpus)

    def filter(self, state: CycleState, pod: Any, node_info: Any) -> Status:
        return SUCCESS


class Ranker(ScorePlugin):
    NAME = "Ranker"

    def score(self, state: CycleState, pod: Any, node_info: Any) -> tuple[int, Status]:
        return 0, SUCCESS


REGISTRY = PluginRegistry()
for _cls in (Sort, OtherSort, Binder, Fit, Ranker):
    REGISTRY.register(_cls)

DEFAULTS = Plugins(
    multi_point=PluginSet(enabled=[PluginRef(name="Sort"), PluginRef(name="Binder")])
)


def framework_problem(body: str) -> str:
    config = parse_config(HEADER + textwrap.dedent(body), "gpusched.yaml", default_plugins=DEFAULTS)
    with pytest.raises(ConfigError) as info:
        build_frameworks(config, REGISTRY, source="gpusched.yaml")
    return str(info.value)


def test_plugin_args_are_validated_and_passed() -> None:
    config = parse_config(
        HEADER
        + textwrap.dedent(
            """\
            profiles:
            - plugins: {filter: {enabled: [{name: Fit}]}}
              pluginConfig: [{name: Fit, args: {maxGpus: 4}}]
            """
        ),
        default_plugins=DEFAULTS,
    )
    fw = build_frameworks(config, REGISTRY)["gpusched"]
    assert isinstance(fw, Framework)
    fit = fw.plugins["Fit"]
    assert isinstance(fit, Fit)
    assert fit.max_gpus == 4


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param(
            """\
            profiles:
            - plugins: {filter: {enabled: [{name: GPUFitt}]}}
            """,
            "gpusched.yaml:4: profiles[0].plugins.filter: unknown plugin 'GPUFitt'; known plugins: "
            "Binder, Fit, OtherSort, Ranker, Sort",
            id="unknown-plugin",
        ),
        pytest.param(
            """\
            profiles:
            - pluginConfig: [{name: Nope, args: {}}]
            """,
            "gpusched.yaml:4: profiles[0].pluginConfig[0].name: unknown plugin 'Nope'; known "
            "plugins: Binder, Fit, OtherSort, Ranker, Sort",
            id="unknown-plugin-config",
        ),
        pytest.param(
            """\
            profiles:
            - plugins: {score: {enabled: [{name: Fit}]}}
            """,
            "gpusched.yaml:4: profiles[0].plugins.score: plugin 'Fit' does not implement score: "
            "Fit is not a ScorePlugin; remove it from score.enabled",
            id="wrong-extension-point",
        ),
        pytest.param(
            """\
            profiles:
            - plugins: {filter: {enabled: [{name: Fit}]}}
              pluginConfig: [{name: Fit, args: {maxGpus: many}}]
            """,
            "gpusched.yaml:5: profiles[0].pluginConfig[0].args.maxGpus: must be an integer "
            "(got 'many')",
            id="bad-args",
        ),
        pytest.param(
            """\
            profiles:
            - plugins: {filter: {enabled: [{name: Fit}]}}
              pluginConfig: [{name: Fit, args: {maxGPUs: 2}}]
            """,
            "gpusched.yaml:5: profiles[0].pluginConfig[0].args.maxGPUs: unknown field; did you "
            "mean 'maxGpus'? (allowed here: maxGpus)",
            id="unknown-arg",
        ),
        pytest.param(
            """\
            profiles:
            - plugins: {filter: {enabled: [{name: Fit}]}}
              pluginConfig: [{name: Fit, args: {maxGpus: 13}}]
            """,
            "gpusched.yaml:5: profiles[0].pluginConfig[0].args: initializing plugin 'Fit' "
            f"({Fit.__module__}.Fit) failed: ValueError: 13 is unlucky",
            id="factory-fails",
        ),
        pytest.param(
            """\
            profiles:
            - plugins: {queueSort: {enabled: [{name: OtherSort}]}}
            """,
            "gpusched.yaml:4: profiles[0].plugins.queueSort: exactly one queue sort plugin must be "
            "enabled (got 2: Sort, OtherSort)",
            id="two-queue-sorts",
        ),
        pytest.param(
            """\
            profiles:
            - plugins: {multiPoint: {disabled: [{name: Sort}]}}
            """,
            "gpusched.yaml:4: profiles[0].plugins.queueSort: exactly one queue sort plugin must be "
            "enabled (got 0)",
            id="no-queue-sort",
        ),
        pytest.param(
            """\
            profiles:
            - plugins: {bind: {disabled: [{name: "*"}]}}
            """,
            "gpusched.yaml:4: profiles[0].plugins.bind: at least one bind plugin must be enabled",
            id="no-binder",
        ),
        pytest.param(
            """\
            profiles:
            - schedulerName: a
            - schedulerName: b
              plugins:
                multiPoint: {disabled: [{name: Sort}]}
                queueSort: {enabled: [{name: OtherSort}]}
            """,
            "gpusched.yaml:8: profiles[1].plugins.queueSort: uses 'OtherSort' but profile 'a' uses "
            "'Sort'; all profiles share one queue, so they must use the same queue sort plugin",
            id="profiles-disagree-on-queue-sort",
        ),
    ],
)
def test_framework_errors(body: str, message: str) -> None:
    assert framework_problem(body) == message


def test_the_event_budget_reaches_the_recorder(tmp_path: Path) -> None:
    from typing import cast

    from gpusched.kube.client import Kube
    from gpusched.scheduler import Scheduler

    path = tmp_path / "gpusched.yaml"
    path.write_text(HEADER + "events: {qps: 200, burst: 20}\n")
    config = load_config(path)
    scheduler = Scheduler(Kube(cast(Any, None)), config)  # never connected
    assert (scheduler.events.bucket.qps, scheduler.events.bucket.burst) == (200.0, 20)
