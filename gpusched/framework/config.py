"""The scheduler's configuration file: models, defaults, loading, and messages that say what to fix.

Mirrors kube-scheduler's ``KubeSchedulerConfiguration`` (staging/src/k8s.io/kube-scheduler/
config/v1/types.go; defaults in pkg/scheduler/apis/config/v1/defaults.go and
default_plugins.go), as ``apiVersion: gpusched.io/v1alpha1``, ``kind: SchedulerConfiguration``::

    apiVersion: gpusched.io/v1alpha1
    kind: SchedulerConfiguration
    profiles:
    - schedulerName: gpusched
      plugins:
        score:
          enabled: [{name: PreferH100, weight: 2}]
          disabled: [{name: SomeDefault}]        # or [{name: "*"}]: drop every default Score plugin
      pluginConfig:
      - name: Coscheduling
        args: {permitWaitingTimeSeconds: 60}

Keys are camelCase in the file (as upstream), snake_case in Python; durations are numbers of
seconds or Go-style strings (``15s``, ``1m30s``, ``500ms``); unknown keys are errors.

**Default plugins** are merged into each profile as upstream's ``mergePlugins`` does: for every
extension point, the defaults come first in their order, minus those listed in ``disabled``
(``*`` disables them all); a default that the profile enables again is configured in place
(its weight, its position); the profile's other plugins follow. ``multiPoint`` enables a plugin
at every extension point it implements; the expansion happens when the framework is built
(``gpusched.framework.runtime``), where plugin names are also checked against the registry.

**Errors** are ``ConfigError``, one line per problem, each naming the file, line, the field's
path and what is wrong::

    gpusched.yaml:9: profiles[0].plugins.score.enabled[1].weight: must be >= 1 (got 0)
    gpusched.yaml:3:9: invalid YAML: mapping values are not allowed here
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Annotated, Any, Final, Literal, NamedTuple, Self

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

__all__ = [
    "API_VERSION",
    "EXTENSION_POINTS",
    "KIND",
    "ConfigError",
    "ConfigOrigin",
    "DisabledPlugin",
    "Events",
    "LeaderElection",
    "PluginArgs",
    "PluginConfig",
    "PluginRef",
    "PluginSet",
    "Plugins",
    "Problem",
    "Profile",
    "Replicas",
    "Reservations",
    "SchedulerConfiguration",
    "apply_default_plugins",
    "default_config",
    "default_plugins",
    "format_path",
    "load_config",
    "merge_plugin_set",
    "parse_config",
    "parse_duration",
    "validation_problems",
]

API_VERSION: Final = "gpusched.io/v1alpha1"
KIND: Final = "SchedulerConfiguration"

EXTENSION_POINTS: dict[str, str] = {
    "preEnqueue": "pre_enqueue",
    "queueSort": "queue_sort",
    "preFilter": "pre_filter",
    "filter": "filter",
    "postFilter": "post_filter",
    "preScore": "pre_score",
    "score": "score",
    "reserve": "reserve",
    "permit": "permit",
    "preBind": "pre_bind",
    "bind": "bind",
    "postBind": "post_bind",
}
"""Extension points in cycle order: the file's key -> the ``Plugins`` attribute."""


# -- errors ----------------------------------------------------------------------------------


class Problem(NamedTuple):
    """One thing wrong with a configuration: where (field path, line) and what."""

    path: str
    message: str
    line: int | None = None
    column: int | None = None

    def render(self, source: str) -> str:
        where = source
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        return f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


class ConfigError(ValueError):
    """The configuration is invalid; ``str()`` has one line per problem.

    ``source`` is the file (or ``<string>``), ``problems`` the list of ``Problem``.
    """

    def __init__(self, source: str, problems: Sequence[Problem]) -> None:
        self.source = source
        self.problems = list(problems)
        super().__init__("\n".join(p.render(source) for p in self.problems))

    @classmethod
    def single(cls, source: str, path: str, message: str) -> ConfigError:
        return cls(source, [Problem(path, message)])


_PATH_PART = re.compile(r"\.?([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]|\[name=([^\]]*)\]")


class ConfigOrigin(NamedTuple):
    """Where a configuration was read from: the file's name and its YAML document, so that
    errors found after loading (unknown plugins, when the frameworks are built) name the
    file and the line. ``load_config`` and ``parse_config`` attach it to the configuration
    (``SchedulerConfiguration.origin``)."""

    source: str
    node: yaml.Node | None = None

    def node_at(self, path: str) -> yaml.Node | None:
        """The YAML node at a field path (``profiles[0].plugins.multiPoint``), or ``None`` when
        the file does not have it (a default filled in after loading)."""
        node = self.node
        pos = 0
        while node is not None and pos < len(path):
            m = _PATH_PART.match(path, pos)
            if m is None:
                return None
            pos = m.end()
            key, index, name = m.groups()
            if key is not None and isinstance(node, yaml.MappingNode):
                node = next((v for k, v in node.value if k.value == key), None)
            elif index is not None and isinstance(node, yaml.SequenceNode):
                i = int(index)
                node = node.value[i] if i < len(node.value) else None
            elif name is not None and isinstance(node, yaml.SequenceNode):
                node = next((v for v in node.value if _name_of(v) == name), None)
            else:
                return None
        return node

    def line(self, path: str, plugin: str | None = None) -> int | None:
        """The 1-based line of the field at ``path`` or, with ``plugin``, of that plugin's entry
        under it (in ``enabled``); the nearest enclosing field the file has, else ``None``."""
        parts = [m.group(0) for m in _PATH_PART.finditer(path)]
        for n in range(len(parts), 0, -1):
            node = self.node_at("".join(parts[:n]))
            if node is None:
                continue
            if plugin is not None and n == len(parts) and isinstance(node, yaml.MappingNode):
                enabled = next((v for k, v in node.value if k.value == "enabled"), None)
                if isinstance(enabled, yaml.SequenceNode):
                    entry = next((v for v in enabled.value if _name_of(v) == plugin), None)
                    if entry is not None:
                        return int(entry.start_mark.line) + 1
            return int(node.start_mark.line) + 1
        return None


def _name_of(node: yaml.Node) -> object:
    if isinstance(node, yaml.MappingNode):
        return next((v.value for k, v in node.value if k.value == "name"), None)
    return None


def _invalid(path: tuple[str | int, ...], message: str) -> PydanticCustomError:
    """A cross-field error whose path (below the model raising it) is ``path``."""
    return PydanticCustomError("gpusched", "{message}", {"message": message, "subpath": path})


# -- durations -------------------------------------------------------------------------------

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION_HINT = "must be a duration such as 15s, 1m30s or 500ms, or a number of seconds"


def parse_duration(text: str) -> float | None:
    """Seconds in a Go duration string (``"1m30s"`` -> 90.0); ``None`` if it is not one."""
    text = text.strip()
    pos, total = 0, 0.0
    for match in _DURATION_PART.finditer(text):
        if match.start() != pos:
            return None
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    return total if pos == len(text) and text else None


def _to_seconds(value: object) -> object:
    if isinstance(value, bool):
        raise PydanticCustomError("duration", _DURATION_HINT)
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        seconds = parse_duration(value)
        if seconds is None:
            raise PydanticCustomError("duration", _DURATION_HINT)
        return seconds
    raise PydanticCustomError("duration", _DURATION_HINT)


Seconds = Annotated[float, BeforeValidator(_to_seconds)]
"""A duration: a number of seconds or a Go duration string, stored as float seconds."""


# -- models ----------------------------------------------------------------------------------


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        frozen=True,
        use_attribute_docstrings=True,
    )


class PluginArgs(_Model):
    """A base for plugins' ``ARGS`` models: the file's conventions (camelCase keys, unknown keys
    are errors, frozen, a docstring per field) for ``pluginConfig[].args``."""


class PluginRef(_Model):
    """A plugin enabled at an extension point (upstream's ``Plugin``)."""

    name: str = Field(min_length=1)
    """The plugin's registered name, e.g. ``GPUFit``. Required."""

    weight: int | None = Field(default=None, ge=1)
    """Score weight: the plugin's 0..100 score is multiplied by it. Only read in ``score`` and
    ``multiPoint``. A positive integer; default 1 (or the weight given in ``multiPoint``)."""


class DisabledPlugin(_Model):
    """A default plugin turned off at an extension point."""

    name: str = Field(min_length=1)
    """The plugin's name, or ``*`` for every default plugin of that extension point. Required."""


class PluginSet(_Model):
    """The plugins enabled and disabled at one extension point."""

    enabled: list[PluginRef] = []
    """Plugins to run, in order, after the (not disabled) defaults. Default: none."""

    disabled: list[DisabledPlugin] = []
    """Default plugins not to run here. Default: none."""

    def _check(self, point: str) -> None:
        seen: dict[str, int] = {}
        for i, ref in enumerate(self.enabled):
            if ref.name == "*":
                raise _invalid(
                    ("enabled", i, "name"), '"*" can only be used in disabled, to disable all'
                )
            if ref.name in seen:
                raise _invalid(
                    ("enabled", i, "name"),
                    f"plugin {ref.name!r} is enabled twice (also enabled[{seen[ref.name]}])",
                )
            seen[ref.name] = i
            if ref.weight is not None and point not in ("score", "multiPoint"):
                raise _invalid(
                    ("enabled", i, "weight"),
                    f"weight is only used in score and multiPoint, not in {point}; remove it",
                )


class Plugins(_Model):
    """Which plugins run at each extension point (upstream's ``Plugins``)."""

    pre_enqueue: PluginSet = PluginSet()
    """Gate pods before they enter the active queue."""
    queue_sort: PluginSet = PluginSet()
    """Order the active queue; exactly one plugin must end up enabled."""
    pre_filter: PluginSet = PluginSet()
    """Per-cycle checks and precomputation before Filter."""
    filter: PluginSet = PluginSet()
    """Per-node feasibility checks."""
    post_filter: PluginSet = PluginSet()
    """Run when no node fits (preemption)."""
    pre_score: PluginSet = PluginSet()
    """Per-cycle precomputation before Score."""
    score: PluginSet = PluginSet()
    """Per-node ranking, weighted."""
    reserve: PluginSet = PluginSet()
    """Claim the chosen node's resources in memory (and release them on failure)."""
    permit: PluginSet = PluginSet()
    """Allow, reject or hold the pod before binding (gangs)."""
    pre_bind: PluginSet = PluginSet()
    """Binding-cycle preparation (device Leases)."""
    bind: PluginSet = PluginSet()
    """Bind the pod; at least one plugin must end up enabled."""
    post_bind: PluginSet = PluginSet()
    """Informational, after a successful bind."""
    multi_point: PluginSet = PluginSet()
    """Plugins enabled at every extension point they implement (weights apply to Score)."""

    def point(self, key: str) -> PluginSet:
        """The set for an extension point by its file key (``"preFilter"``, ``"multiPoint"``)."""
        if key == "multiPoint":
            return self.multi_point
        result: PluginSet = getattr(self, EXTENSION_POINTS[key])
        return result

    @model_validator(mode="after")
    def _check_sets(self) -> Self:
        for key in (*EXTENSION_POINTS, "multiPoint"):
            try:
                self.point(key)._check(key)
            except PydanticCustomError as exc:
                ctx = exc.context or {}
                raise _invalid((key, *ctx["subpath"]), ctx["message"]) from None
        return self


class PluginConfig(_Model):
    """Arguments for one plugin (upstream's ``PluginConfig``)."""

    name: str = Field(min_length=1)
    """The plugin's name. Required."""

    args: dict[str, Any] = {}
    """The plugin's arguments, validated by the plugin's args model when the framework is built.
    Default: none (the plugin's defaults)."""


class Profile(_Model):
    """One scheduler name and its plugins (upstream's ``KubeSchedulerProfile``)."""

    scheduler_name: str = Field(default="gpusched", min_length=1)
    """Pods with this ``spec.schedulerName`` are scheduled by this profile. Default ``gpusched``."""

    plugins: Plugins = Plugins()
    """Plugins enabled and disabled per extension point, merged with the defaults."""

    plugin_config: list[PluginConfig] = []
    """Arguments per plugin, at most one entry per plugin. Default: none."""

    def plugin_args(self, name: str) -> tuple[int, dict[str, Any]] | None:
        """``(index in pluginConfig, args)`` for a plugin, or ``None`` if it has none."""
        for i, pc in enumerate(self.plugin_config):
            if pc.name == name:
                return i, pc.args
        return None

    @model_validator(mode="after")
    def _check_plugin_config(self) -> Self:
        seen: dict[str, int] = {}
        for i, pc in enumerate(self.plugin_config):
            if pc.name in seen:
                raise _invalid(
                    ("pluginConfig", i, "name"),
                    f"{pc.name!r} is configured twice (also pluginConfig[{seen[pc.name]}]); "
                    f"merge the two entries",
                )
            seen[pc.name] = i
        return self


class LeaderElection(_Model):
    """Leader election among replicas through a ``coordination.k8s.io/v1`` Lease (upstream's
    ``LeaderElectionConfiguration``; same defaults)."""

    leader_elect: bool = True
    """Run only while holding the leader Lease. Default true."""

    lease_duration: Seconds = Field(default=15.0, gt=0)
    """How long non-leaders wait after the last renewal before taking over. Seconds or a
    duration string, at least 1s (the Lease's ``leaseDurationSeconds`` is whole seconds; a
    fraction is rounded up); default 15s."""

    renew_deadline: Seconds = Field(default=10.0, gt=0)
    """How long the leader keeps trying to renew before giving up leadership; must be less than
    leaseDuration. Default 10s."""

    retry_period: Seconds = Field(default=2.0, gt=0)
    """Wait between attempts to acquire or renew. Default 2s."""

    resource_name: str = Field(default="gpusched", min_length=1)
    """Name of the leader Lease. Default ``gpusched``."""

    resource_namespace: str = Field(default="gpusched-system", min_length=1)
    """Namespace of the leader Lease. Default ``gpusched-system``."""

    @model_validator(mode="after")
    def _check_timing(self) -> Self:
        if self.lease_duration < 1:
            raise _invalid(
                ("leaseDuration",),
                f"must be at least 1s, as the leader Lease stores whole seconds "
                f"(got {self.lease_duration:g}s)",
            )
        if self.renew_deadline >= self.lease_duration:
            raise _invalid(
                ("renewDeadline",),
                f"must be less than leaseDuration ({self.renew_deadline:g}s >= "
                f"{self.lease_duration:g}s)",
            )
        if self.renew_deadline <= 1.2 * self.retry_period:
            raise _invalid(
                ("retryPeriod",),
                f"renewDeadline ({self.renew_deadline:g}s) must be more than 1.2 x retryPeriod "
                f"({self.retry_period:g}s)",
            )
        return self


class Reservations(_Model):
    """Device reservations: the Leases that claim GPUs so two replicas never double-book."""

    namespace: str = Field(default="gpusched-system", min_length=1)
    """Namespace of the reservation Leases. Default ``gpusched-system``."""

    lease_duration_seconds: int = Field(default=60, ge=1)
    """How long a reservation Lease holds its devices without renewal (whole seconds, as the
    Lease's ``spec.leaseDurationSeconds``); it must outlast the binding cycle. Default 60."""

    max_clock_skew_seconds: float = Field(default=30.0, ge=0)
    """The largest difference between two replicas' clocks (seconds) that reservation expiry
    tolerates: another replica's reservation counts as expired only this long after the
    expiry it wrote, and as written before this replica's first list of the pods only if it
    was written this long before (docs/reservations.md). Too small risks pruning a live
    reservation when clocks drift; too large keeps dead ones longer. Default 30."""


class Replicas(_Model):
    """Active replicas without leader election (gpusched.replicas): each announces itself in a
    membership Lease in the reservations namespace, and the live replicas split the pending pods
    and prefer disjoint shares of the nodes, so they rarely race for the same GPUs."""

    shares: bool = True
    """Split pods and nodes between live replicas. Alone (one replica, or leader election)
    nothing changes. ``false``: every replica schedules every pod on any node. Default true."""

    lease_duration_seconds: int = Field(default=15, ge=1)
    """How long a replica counts as live after its last membership renewal (whole seconds, the
    Lease's ``leaseDurationSeconds``): a replica that dies hands its share over this long (plus
    the clock-skew tolerance) after its last renewal. Default 15."""

    renew_period_seconds: float = Field(default=5.0, gt=0)
    """Seconds between renewals of the membership Lease; less than leaseDurationSeconds.
    Default 5."""

    sync_grace_seconds: float = Field(default=0.0, ge=0)
    """A replica announces itself as soon as it starts, before its informers have synced; the
    others leave its share to it for at most this long from its start (its Lease's
    ``acquireTime``) while it syncs. One still syncing after that is left out until it is
    ready. Default 0: a replica takes no share until it can schedule, so one that is ready
    first schedules every pod meanwhile (benchmarks/two_replicas.py at 5,000 nodes: two
    replicas 1.03-1.25x one with 0, 0.93-1.04x with 30, 0 failed binds either way)."""

    @model_validator(mode="after")
    def _check_timing(self) -> Self:
        if self.renew_period_seconds >= self.lease_duration_seconds:
            raise _invalid(
                ("renewPeriodSeconds",),
                f"must be less than leaseDurationSeconds ({self.renew_period_seconds:g} >= "
                f"{self.lease_duration_seconds})",
            )
        return self


class Events(_Model):
    """The write budget of Events and ``PodScheduled`` conditions (gpusched.events), apart from
    scheduling's own writes, as kube-scheduler's event client has its own QPS and burst. Events
    trail the binding in a burst and catch up; none is dropped below 50,000 waiting."""

    qps: float = Field(default=50.0, gt=0)
    """Event and condition writes per second, sustained. Default 50 (kube-scheduler's
    ``clientConnection.qps``)."""

    burst: int = Field(default=100, ge=1)
    """Writes allowed at once above the sustained rate. Default 100 (``clientConnection.burst``)."""


class SchedulerConfiguration(_Model):
    """The whole configuration file (upstream's ``KubeSchedulerConfiguration``)."""

    api_version: Literal["gpusched.io/v1alpha1"] = API_VERSION
    """Required in a file: ``gpusched.io/v1alpha1``."""

    kind: Literal["SchedulerConfiguration"] = KIND
    """Required in a file: ``SchedulerConfiguration``."""

    profiles: list[Profile] = Field(default_factory=lambda: [Profile()], min_length=1)
    """One profile per scheduler name. Default: one profile, ``gpusched``, default plugins."""

    pod_initial_backoff_seconds: int = Field(default=1, ge=1)
    """Backoff after a pod's first failed attempt, in seconds; doubles per attempt. Default 1."""

    pod_max_backoff_seconds: int = Field(default=10, ge=1)
    """Cap on a pod's backoff, in seconds; at least podInitialBackoffSeconds. Default 10."""

    pod_max_in_unschedulable_pods_duration: Seconds = Field(default=300.0, gt=0)
    """How long a pod may stay in the unschedulable pool before it is retried even without a
    cluster event. Seconds or a duration string; default 300s (5 minutes)."""

    percentage_of_nodes_to_score: int = Field(default=0, ge=0, le=100)
    """Stop filtering once this percentage of the nodes is found feasible (percent, 0..100).
    0 means adaptive, as upstream: 50% for 100 nodes, falling with cluster size to a floor of 5%.
    Default 0."""

    opportunistic_batching: bool = True
    """Keep one ranking of all nodes per kind of pod (equal signatures, ``SignPlugin``) and
    re-evaluate only the nodes that changed since, instead of filtering a sample of the nodes
    for every pod (gpusched.equivalence). Exact: the pod gets the best node of all nodes.
    ``false`` gives kube-scheduler's sampled cycle for every pod. Default true."""

    parallelism: int = Field(default=16, ge=1)
    """Upper bound on concurrent binding cycles (PreBind, Bind: Lease writes and Binding POSTs).
    kube-scheduler uses it for filter/score worker pools; gpusched's scheduling cycle is serial,
    so it bounds the binding work instead. Default 16."""

    leader_election: LeaderElection = LeaderElection()
    """Leader election among replicas."""

    reservations: Reservations = Reservations()
    """Device reservation Leases."""

    replicas: Replicas = Replicas()
    """Active replicas without leader election: shares of pods and nodes."""

    events: Events = Events()
    """The write budget of Events and pod conditions."""

    _origin: ConfigOrigin | None = PrivateAttr(default=None)

    @property
    def origin(self) -> ConfigOrigin | None:
        """The file (and YAML document) this configuration was loaded from, for messages;
        ``None`` when built in code. Kept by ``model_copy``."""
        return self._origin

    def __eq__(self, other: object) -> bool:
        """Equal settings, wherever they were read from (``origin`` is left out)."""
        if not isinstance(other, SchedulerConfiguration):
            return NotImplemented
        return self.__dict__ == other.__dict__

    __hash__ = _Model.__hash__

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.pod_max_backoff_seconds < self.pod_initial_backoff_seconds:
            raise _invalid(
                ("podMaxBackoffSeconds",),
                f"must be >= podInitialBackoffSeconds ({self.pod_max_backoff_seconds} < "
                f"{self.pod_initial_backoff_seconds})",
            )
        seen: dict[str, int] = {}
        for i, profile in enumerate(self.profiles):
            if profile.scheduler_name in seen:
                raise _invalid(
                    ("profiles", i, "schedulerName"),
                    f"{profile.scheduler_name!r} is also used by "
                    f"profiles[{seen[profile.scheduler_name]}]; each profile needs its own "
                    f"schedulerName",
                )
            seen[profile.scheduler_name] = i
        return self


# -- defaults and merging --------------------------------------------------------------------


def default_plugins() -> Plugins:
    """The plugins every profile starts from (upstream's ``getDefaultPlugins``).

    Under ``multiPoint``, so each runs at every extension point it implements, in upstream's
    order (which is also the order Filter tries them, so the reason a pod reads is upstream's)
    and with upstream's Score weights, then gpusched's GPUFit, weighted 2 so that the choice
    of GPUs outweighs NodeResourcesFit's spreading of cpu and memory::

        PrioritySort                 preEnqueue, queueSort
        NodeUnschedulable            filter
        NodeName                     filter
        TaintToleration    weight 3  filter, preScore, score
        NodeAffinity       weight 2  preFilter, filter, preScore, score
        NodeResourcesFit   weight 1  preFilter, filter, preScore, score
        GpuClaims                    preFilter, reserve, preBind (GpuClaims)
        GPUFit             weight 2  preFilter, filter, postFilter, preScore, score, reserve
        DynamicResources             preFilter, filter, reserve, preBind (ResourceClaims)
        NominatedReservation         filter
        DefaultPreemption            postFilter
        PreferredNode      weight 10 preScore, score
        ImageLocality      weight 1  preScore, score
        ModelLocality      weight 1  preScore, score
        DefaultBinder                bind
        SchedulingGates              preEnqueue
        Coscheduling                 preEnqueue, reserve, permit, preBind (gangs)

    NominatedReservation keeps a node's GPUs for the higher-priority pod preemption nominated
    to it; DefaultPreemption (after GPUFit's PostFilter, which only explains) evicts
    lower-priority pods for a pod that fits nowhere (docs/preemption.md).
    DynamicResources allocates pods' ResourceClaims (docs/dra.md); after GPUFit, so that its
    Reserve adds the claims' GPUs to GPUFit's assignment; pods without claims skip it and sign.
    PreferredNode honours the pod's ``gpusched.io/preferred-node`` (a modifier of the pod
    API, so on by default; weighted to win while the pod fits there); it skips every other
    pod at PreScore and signs, so batching is unaffected. ImageLocality (upstream's, weight 1)
    and ModelLocality prefer nodes that already hold the pod's images and the models it names
    (docs/strategies.md); both skip pods with nothing on any node at PreScore. Coscheduling
    reads the gang forms (docs/gangs.md); a pod without a group costs it a few label reads. The
    other score strategies (docs/strategies.md) are opt-in.
    """
    return Plugins(
        multi_point=PluginSet(
            enabled=[
                PluginRef(name="PrioritySort"),
                PluginRef(name="NodeUnschedulable"),
                PluginRef(name="NodeName"),
                PluginRef(name="TaintToleration", weight=3),
                PluginRef(name="NodeAffinity", weight=2),
                PluginRef(name="NodeResourcesFit", weight=1),
                PluginRef(name="GpuClaims"),
                PluginRef(name="GPUFit", weight=2),
                PluginRef(name="DynamicResources"),
                PluginRef(name="NominatedReservation"),
                PluginRef(name="DefaultPreemption"),
                PluginRef(name="PreferredNode", weight=10),
                PluginRef(name="ImageLocality", weight=1),
                PluginRef(name="ModelLocality", weight=1),
                PluginRef(name="DefaultBinder"),
                PluginRef(name="SchedulingGates"),
                PluginRef(name="Coscheduling"),
            ]
        )
    )


def merge_plugin_set(default: PluginSet, custom: PluginSet) -> PluginSet:
    """Upstream's ``mergePluginSet``: defaults (minus disabled, reconfigured in place), then the
    profile's other enabled plugins. ``disabled`` keeps both lists' names (for multiPoint)."""
    disabled_names = list(dict.fromkeys([d.name for d in (*custom.disabled, *default.disabled)]))
    disabled = set(disabled_names)
    custom_at = {ref.name: i for i, ref in enumerate(custom.enabled)}
    replaced: set[int] = set()
    enabled: list[PluginRef] = []
    if "*" not in disabled:
        for ref in default.enabled:
            if ref.name in disabled:
                continue
            i = custom_at.get(ref.name)
            if i is not None:
                ref = custom.enabled[i]
                replaced.add(i)
            enabled.append(ref)
    enabled.extend(ref for i, ref in enumerate(custom.enabled) if i not in replaced)
    return PluginSet(enabled=enabled, disabled=[DisabledPlugin(name=n) for n in disabled_names])


def _merge_plugins(default: Plugins, custom: Plugins) -> Plugins:
    fields = (*EXTENSION_POINTS.values(), "multi_point")
    return Plugins(**{f: merge_plugin_set(getattr(default, f), getattr(custom, f)) for f in fields})


def apply_default_plugins(
    config: SchedulerConfiguration, defaults: Plugins | None = None
) -> SchedulerConfiguration:
    """``config`` with each profile's plugins merged with ``defaults`` (``default_plugins()``)."""
    base = defaults if defaults is not None else default_plugins()
    profiles = [
        p.model_copy(update={"plugins": _merge_plugins(base, p.plugins)}) for p in config.profiles
    ]
    return config.model_copy(update={"profiles": profiles})


def default_config(default_plugins: Plugins | None = None) -> SchedulerConfiguration:
    """The configuration used when none is given: every default, one ``gpusched`` profile."""
    return apply_default_plugins(SchedulerConfiguration(), default_plugins)


# -- loading ---------------------------------------------------------------------------------


class _Loader(yaml.SafeLoader):
    """A safe loader that rejects duplicate keys (as Kubernetes' strict decoding does)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        seen: dict[object, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                first = seen.get(key)
            except TypeError:  # unhashable key: let SafeLoader report it
                break
            if first is not None:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (first on line {first + 1})",
                    key_node.start_mark,
                )
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


def _parse_yaml(text: str, source: str) -> tuple[Any, yaml.Node | None]:
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or "invalid YAML"
        if exc.context:
            problem = f"{problem} ({exc.context})"
        raise ConfigError(
            source,
            [
                Problem(
                    "",
                    f"invalid YAML: {problem}",
                    mark.line + 1 if mark else None,
                    mark.column + 1 if mark else None,
                )
            ],
        ) from None
    except yaml.YAMLError as exc:
        raise ConfigError.single(source, "", f"invalid YAML: {exc}") from None
    finally:
        loader.dispose()
    return data, node


def parse_config(
    text: str, source: str = "<string>", *, default_plugins: Plugins | None = None
) -> SchedulerConfiguration:
    """Parse and validate a configuration document, and merge in the default plugins.

    ``source`` names the document in error messages. Raises ``ConfigError``.
    """
    data, root = _parse_yaml(text, source)
    if data is None:
        raise ConfigError.single(
            source,
            "",
            f"the configuration is empty; it needs at least apiVersion: {API_VERSION} and "
            f"kind: {KIND}",
        )
    if not isinstance(data, dict):
        raise ConfigError(
            source,
            [
                Problem(
                    "",
                    f"the top level must be a mapping with apiVersion: {API_VERSION} and "
                    f"kind: {KIND} (got {_kind_of(data)})",
                    1,
                )
            ],
        )
    problems: list[Problem] = []
    for key, value in (("apiVersion", API_VERSION), ("kind", KIND)):
        if key not in data:
            problems.append(Problem(key, f"is required; add {key}: {value}", 1))
    try:
        config = SchedulerConfiguration.model_validate(data)
    except ValidationError as exc:
        problems.extend(validation_problems(exc, SchedulerConfiguration, node=root))
    if problems:
        raise ConfigError(source, problems)
    config = apply_default_plugins(config, default_plugins)
    config._origin = ConfigOrigin(source, root)
    return config


def load_config(
    path: str | Path, *, default_plugins: Plugins | None = None
) -> SchedulerConfiguration:
    """Read, validate and default a configuration file. Raises ``ConfigError``."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError.single(source, "", f"cannot read the configuration: {reason}") from None
    return parse_config(text, source, default_plugins=default_plugins)


# -- turning pydantic errors into problems ---------------------------------------------------


def format_path(loc: Sequence[str | int]) -> str:
    """``("profiles", 0, "plugins")`` -> ``profiles[0].plugins``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


def _kind_of(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, int | float):
        return "a number"
    return type(value).__name__


def _show(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return _kind_of(value)
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _unwrap(annotation: Any) -> Any:
    """The model class inside ``X | None``, ``list[X]``, ``Annotated[X, ...]``, if any."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (list, typing.Union, types.UnionType):
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(args) != 1:
                return None
            annotation = args[0]
        else:
            return annotation


def _model_at(root: type[BaseModel], loc: Sequence[str | int]) -> type[BaseModel] | None:
    current: Any = root
    for part in loc:
        if isinstance(part, int):
            continue  # list item: _unwrap already stepped into the element type
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        field = next(
            (f for n, f in current.model_fields.items() if part in (n, f.alias)),
            None,
        )
        if field is None:
            return None
        current = _unwrap(field.annotation)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


_MESSAGES: dict[str, str] = {
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be a whole number",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_type": "must be a string",
    "list_type": "must be a list",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
    "dict_type": "must be a mapping",
    "string_too_short": "must not be empty",
}


def _message(error: Any, root: type[BaseModel], loc: tuple[str | int, ...]) -> str:
    kind: str = error["type"]
    ctx: dict[str, Any] = error.get("ctx") or {}
    got = f" (got {_show(error.get('input'))})"
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        model = _model_at(root, loc[:-1])
        allowed = [f.alias or n for n, f in model.model_fields.items()] if model is not None else []
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        listing = f" (allowed here: {', '.join(allowed)})" if allowed else ""
        return f"unknown field{hint}{listing}"
    if kind == "greater_than_equal":
        return f"must be >= {ctx['ge']}{got}"
    if kind == "greater_than":
        return f"must be > {ctx['gt']}{got}"
    if kind == "less_than_equal":
        return f"must be <= {ctx['le']}{got}"
    if kind == "less_than":
        return f"must be < {ctx['lt']}{got}"
    if kind == "literal_error":
        message = f"must be {ctx['expected']}{got}"
        if loc == ("kind",) and error.get("input") == "KubeSchedulerConfiguration":
            message += (
                f"; this looks like kube-scheduler's configuration: gpusched reads "
                f"apiVersion: {API_VERSION}, kind: {KIND}"
            )
        return message
    if kind == "too_short":
        return f"must have at least {ctx['min_length']} item(s)"
    if kind in ("duration", "gpusched"):
        return str(error["msg"]) + (got if kind == "duration" else "")
    if kind in _MESSAGES:
        return _MESSAGES[kind] + got
    return str(error["msg"]) + got


def validation_problems(
    exc: ValidationError, model: type[BaseModel], prefix: str = "", node: yaml.Node | None = None
) -> list[Problem]:
    """``exc`` (from validating ``model``) as problems with paths under ``prefix``.

    ``node``: the YAML document, to give each problem its line.
    """
    problems: list[Problem] = []
    for error in exc.errors(include_url=False):
        loc: tuple[str | int, ...] = tuple(error["loc"])
        if error["type"] == "gpusched":
            loc = (*loc, *(error.get("ctx") or {}).get("subpath", ()))
        path = format_path(loc)
        if prefix:
            path = prefix + ("" if not path else path if path.startswith("[") else "." + path)
        problems.append(Problem(path, _message(error, model, loc), _line_of(node, loc)))
    return problems


def _line_of(node: yaml.Node | None, loc: Sequence[str | int]) -> int | None:
    """The 1-based line of the YAML node at ``loc`` (or of its nearest existing parent)."""
    if node is None:
        return None
    line = node.start_mark.line
    for part in loc:
        if isinstance(node, yaml.MappingNode) and isinstance(part, str):
            pair = next((kv for kv in node.value if kv[0].value == part), None)
            if pair is None:
                break
            line = pair[0].start_mark.line
            node = pair[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                break
            node = node.value[part]
            line = node.start_mark.line
        else:
            break
    return line + 1
