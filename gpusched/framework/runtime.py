"""``Framework``: one profile's plugins, instantiated once and run per extension point.

Upstream: pkg/scheduler/framework/runtime/framework.go (``NewFramework``, ``Run*Plugins``) and
waiting_pods_map.go. What gpusched keeps of it, and where it differs:

**Construction** (``Framework(profile, registry)``) does everything that can be done once:
instantiates each plugin the profile enables *once* (a plugin at several extension points is one
object), validates its ``pluginConfig`` args against its args model, expands ``multiPoint`` as
upstream's ``expandMultiPointPlugins`` (plugins enabled at a specific point first, in that
point's order; then multiPoint ones; a plugin disabled at a point is left out there; ``*``
disables multiPoint expansion for that point), checks that there is exactly one QueueSort
plugin and at least one Bind plugin, and resolves Score weights (a point's own weight wins over
multiPoint's; unset is 1). Every mistake is a ``ConfigError`` naming the field path.

It also finds out once which extension points each plugin implements (trio's instruments):
each point gets a tuple of ``(name, bound method)`` pairs, so running a point is a loop over a
tuple, and a plugin is never called at a stage it does not implement.

**Running.** The ``run_*`` methods follow upstream's rules, noted on each. A plugin that raises
gets an ``Error`` status naming it (Python has exceptions where Go has none; a bug in one plugin
fails that pod's cycle, not the scheduler). Statuses passed on carry the plugin's name.

**Costs.** ``run_filter`` is O(filter plugins) per node, with no allocation when the node fits
(the shared ``SUCCESS``) or when a plugin rejects with a prebuilt status carrying its name; a
skipped plugin costs one set lookup, and none when nothing is skipped. ``run_score`` is
O(score plugins x nodes) plugin calls and allocates the totals, the result, and per normalising
plugin one ``NodeScore`` list. The serial scheduling cycle calls these for every node; there is
no thread pool, because in CPython threads would not make pure-Python plugins faster.

**Observation.** With an ``observer`` the framework reports each extension point's duration
(``scheduler_framework_extension_point_duration_seconds``: every point but Filter, which is
called per node; the scheduling cycle times the filter phase as a whole) and, for cycles whose
``CycleState.record_plugin_metrics`` is set, each plugin call's duration
(``scheduler_plugin_execution_duration_seconds``; upstream samples 10% of cycles). Without an
observer no clock is read at all: the check is one ``is None`` per point (Filter: one per call).

**Waiting pods.** Permit plugins that return Wait put the pod in the waiting map as a
``WaitingPod``; its binding cycle awaits ``wait_on_permit``, which finishes when every waiting
plugin allowed it, when one rejects it, or when a plugin's timeout passes (a rejection, with
upstream's message). Each plugin's deadline counts from ``run_permit`` on the injected ``Clock``
(``FakeClock`` in tests), so the wait ends at the earliest deadline of the plugins still
waiting: a plugin that already allowed no longer bounds it, as upstream's per-plugin timers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable, Iterator, Mapping, Sequence
from time import perf_counter
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import ValidationError

from gpusched.clock import Clock, RealClock

from .config import (
    EXTENSION_POINTS,
    ConfigError,
    Plugins,
    Problem,
    Profile,
    SchedulerConfiguration,
    validation_problems,
)
from .cycle_state import CycleState
from .interfaces import (
    MAX_NODE_SCORE,
    MIN_NODE_SCORE,
    WILDCARD,
    ActionType,
    BindPlugin,
    ClusterEvent,
    ClusterEventWithHint,
    EnqueueExtensions,
    FilterPlugin,
    NodeScore,
    PermitPlugin,
    Plugin,
    Pod,
    PostBindPlugin,
    PostFilterPlugin,
    PostFilterResult,
    PreBindPlugin,
    PreEnqueuePlugin,
    PreFilterPlugin,
    PreFilterResult,
    PreScorePlugin,
    QueuedPodInfo,
    QueueSortPlugin,
    ReservePlugin,
    ScoreExtensions,
    ScorePlugin,
    SignPlugin,
)
from .registry import PluginRegistry
from .status import SUCCESS, Code, Status

if TYPE_CHECKING:
    from gpusched.cache import NodeInfo
    from gpusched.kube import Kube

__all__ = [
    "MAX_PERMIT_TIMEOUT",
    "POINT_LABELS",
    "Framework",
    "Observer",
    "WaitingPod",
    "build_frameworks",
]

log = logging.getLogger(__name__)

MAX_PERMIT_TIMEOUT = 15 * 60.0
"""The longest a Permit plugin may make a pod wait, in seconds (upstream's ``maxTimeout``)."""

POINT_LABELS: dict[str, str] = {
    "preEnqueue": "PreEnqueue",
    "queueSort": "QueueSort",
    "preFilter": "PreFilter",
    "filter": "Filter",
    "postFilter": "PostFilter",
    "preScore": "PreScore",
    "score": "Score",
    "reserve": "Reserve",
    "permit": "Permit",
    "preBind": "PreBind",
    "bind": "Bind",
    "postBind": "PostBind",
}
"""Configuration key -> the ``extension_point`` label upstream's metrics use. Also used:
``ScoreExtensionNormalize`` and ``Unreserve``."""

_POINT_CLASSES: dict[str, type[Plugin]] = {
    "preEnqueue": PreEnqueuePlugin,
    "queueSort": QueueSortPlugin,
    "preFilter": PreFilterPlugin,
    "filter": FilterPlugin,
    "postFilter": PostFilterPlugin,
    "preScore": PreScorePlugin,
    "score": ScorePlugin,
    "reserve": ReservePlugin,
    "permit": PermitPlugin,
    "preBind": PreBindPlugin,
    "bind": BindPlugin,
    "postBind": PostBindPlugin,
}

# Plugins at these points can reject a pod, so their EnqueueExtensions matter (upstream's
# shouldHaveEnqueueExtensions).
_REJECTING_POINTS = ("preEnqueue", "preFilter", "filter", "reserve", "permit")


class Observer(Protocol):
    """Receives durations; the metrics module implements it (labels as upstream's metrics)."""

    def extension_point_duration(self, point: str, status_code: Code, seconds: float) -> None:
        """``scheduler_framework_extension_point_duration_seconds{extension_point, status}``"""

    def plugin_duration(self, plugin: str, point: str, status_code: Code, seconds: float) -> None:
        """``scheduler_plugin_execution_duration_seconds{plugin, extension_point, status}``"""

    def permit_wait_duration(self, status_code: Code, seconds: float) -> None:
        """``scheduler_permit_wait_duration_seconds{result}``"""


# -- statuses the framework makes ------------------------------------------------------------


def _failed(point: str, plugin: str, status: Status) -> Status:
    """A plugin returned a status its extension point does not allow: an Error naming it."""
    detail = status.message() or f"returned {status.code.label}"
    return Status(
        Code.ERROR, (f"running {point} plugin {plugin!r}: {detail}",), plugin, status.exception
    )


def _raised(point: str, plugin: str, exc: Exception) -> Status:
    """A plugin raised: an Error naming it, carrying the exception."""
    return Status(
        Code.ERROR,
        (f"running {point} plugin {plugin!r}: {type(exc).__name__}: {exc}",),
        plugin,
        exc,
    )


def _passed_on(point: str, plugin: str, status: Status) -> Status:
    """A rejection keeps its code and gets the plugin's name; anything else becomes an Error."""
    return status.with_plugin(plugin) if status.is_rejected else _failed(point, plugin, status)


def _uid(pod: Pod) -> str:
    meta = pod.get("metadata") or {}
    uid = meta.get("uid")
    return str(uid) if uid else f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _pod_name(pod: Pod) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


# -- waiting pods ----------------------------------------------------------------------------


class WaitingPod:
    """A pod that Permit plugins told to wait (upstream's ``waitingPod``).

    Allow and reject it from the event loop's thread (plugins, event handlers); its binding
    cycle awaits the outcome through ``Framework.wait_on_permit``.
    """

    __slots__ = ("_clock", "_pending", "_pod", "_result", "_uid", "_wakeup")

    def __init__(self, pod: Pod, timeouts: Mapping[str, float], clock: Clock) -> None:
        now = clock.monotonic()
        self._pod = pod
        self._uid = _uid(pod)
        self._clock = clock
        # plugin -> (deadline on clock.monotonic(), the timeout it asked for)
        self._pending: dict[str, tuple[float, float]] = {
            name: (now + t, t) for name, t in timeouts.items()
        }
        self._result: Status | None = None
        self._wakeup: asyncio.Future[None] | None = None

    @property
    def pod(self) -> Pod:
        return self._pod

    @property
    def uid(self) -> str:
        return self._uid

    @property
    def pending_plugins(self) -> tuple[str, ...]:
        """The plugins that have not allowed the pod yet."""
        return tuple(self._pending)

    @property
    def deadline(self) -> float | None:
        """When the wait times out (``Clock.monotonic()``): the earliest pending deadline."""
        return min((d for d, _ in self._pending.values()), default=None)

    @property
    def result(self) -> Status | None:
        """``SUCCESS`` once allowed by all, the rejection once rejected, else ``None``."""
        return self._result

    def allow(self, plugin: str) -> None:
        """``plugin`` allows the pod; once every waiting plugin has, the wait succeeds."""
        if self._result is not None:
            return
        self._pending.pop(plugin, None)
        if not self._pending:
            self._finish(SUCCESS)

    def reject(self, plugin: str, message: str) -> bool:
        """Reject the pod (Unschedulable, attributed to ``plugin``). False if already decided."""
        if self._result is not None:
            return False
        self._finish(Status(Code.UNSCHEDULABLE, (message,), plugin))
        return True

    def _finish(self, status: Status) -> None:
        self._result = status
        self._pending.clear()
        if self._wakeup is not None and not self._wakeup.done():
            self._wakeup.set_result(None)

    async def _wait(self) -> Status:
        while self._result is None:
            plugin, (deadline, timeout) = min(self._pending.items(), key=lambda kv: kv[1][0])
            if self._clock.monotonic() >= deadline:
                self.reject(
                    plugin, f"rejected due to timeout after waiting {timeout:g}s at plugin {plugin}"
                )
                break
            self._wakeup = asyncio.get_running_loop().create_future()
            sleeper = asyncio.ensure_future(self._clock.sleep_until(deadline))
            try:
                await asyncio.wait((self._wakeup, sleeper), return_when=asyncio.FIRST_COMPLETED)
            finally:
                sleeper.cancel()
                self._wakeup = None
                await asyncio.wait((sleeper,))
        assert self._result is not None
        return self._result

    def __repr__(self) -> str:
        return f"<WaitingPod {_pod_name(self._pod)} pending={list(self._pending)}>"


# -- the framework ---------------------------------------------------------------------------


class Framework:
    """A profile's plugins, ready to run (module docstring). Also the plugins' ``Handle``."""

    def __init__(
        self,
        profile: Profile,
        registry: PluginRegistry,
        *,
        clock: Clock | None = None,
        observer: Observer | None = None,
        source: str = "<config>",
        path: str = "profiles[0]",
        kube: Kube | None = None,
    ) -> None:
        """Build the framework; ``ConfigError`` (with ``source`` and field paths under ``path``)
        for unknown plugins, bad args, plugins at points they do not implement, and a profile
        without exactly one QueueSort plugin or without a Bind plugin."""
        self._profile = profile
        self._kube = kube
        self._clock: Clock = clock if clock is not None else RealClock()
        self._observer = observer
        self._source = source
        self._path = path
        self._waiting: dict[str, WaitingPod] = {}
        self._plugins: dict[str, Plugin] = {}

        plugins = profile.plugins
        self._check_plugin_config(profile, registry)
        for name, key in self._needed(plugins).items():
            self._plugins[name] = self._instantiate(name, key, profile, registry)
        at = {key: self._expand(key, plugins) for key in EXTENSION_POINTS}
        self._at: dict[str, tuple[str, ...]] = {key: tuple(at[key]) for key in at}

        def of(key: str, cls: type[Any]) -> list[Any]:
            return [self._plugins[name] for name in at[key] if isinstance(self._plugins[name], cls)]

        queue_sort: list[QueueSortPlugin] = of("queueSort", QueueSortPlugin)
        if len(queue_sort) != 1:
            raise self._error(
                "plugins.queueSort",
                f"exactly one queue sort plugin must be enabled (got {len(queue_sort)}"
                + (f": {', '.join(at['queueSort'])})" if queue_sort else ")"),
            )
        if not at["bind"]:
            raise self._error("plugins.bind", "at least one bind plugin must be enabled")
        self._queue_sort = queue_sort[0]
        self._weights = self._score_weights(plugins, at["score"])

        # Hot-path tables: (name, bound method) per extension point, in order.
        self._pre_enqueue = tuple(
            (p.NAME, p.pre_enqueue) for p in of("preEnqueue", PreEnqueuePlugin)
        )
        self._pre_filter = tuple((p.NAME, p.pre_filter) for p in of("preFilter", PreFilterPlugin))
        self._filter: tuple[tuple[str, Callable[[CycleState, Pod, NodeInfo], Status]], ...] = tuple(
            (p.NAME, p.filter) for p in of("filter", FilterPlugin)
        )
        self._post_filter = tuple(
            (p.NAME, p.post_filter) for p in of("postFilter", PostFilterPlugin)
        )
        self._pre_score = tuple((p.NAME, p.pre_score) for p in of("preScore", PreScorePlugin))
        self._score: tuple[
            tuple[
                str,
                Callable[[CycleState, Pod, NodeInfo], tuple[int, Status]],
                Callable[[CycleState, Pod, list[NodeScore]], Status] | None,
                int,
            ],
            ...,
        ] = tuple(
            (
                p.NAME,
                p.score,
                p.normalize_score if isinstance(p, ScoreExtensions) else None,
                self._weights[p.NAME],
            )
            for p in of("score", ScorePlugin)
        )
        self._reserve = tuple(
            (p.NAME, p.reserve, p.unreserve) for p in of("reserve", ReservePlugin)
        )
        self._permit = tuple((p.NAME, p.permit) for p in of("permit", PermitPlugin))
        self._pre_bind = tuple((p.NAME, p.pre_bind) for p in of("preBind", PreBindPlugin))
        self._bind = tuple((p.NAME, p.bind) for p in of("bind", BindPlugin))
        self._post_bind = tuple((p.NAME, p.post_bind) for p in of("postBind", PostBindPlugin))

        # Signing (SignPlugin): possible only if every plugin that decides where a pod fits
        # signs; the normalised Score plugins are the ones whose raw scores the batched path
        # must find equal on every feasible node.
        deciders = {
            p.NAME: p
            for key in ("preFilter", "filter", "preScore", "score")
            for p in (self._plugins[name] for name in at[key])
        }
        self._signers: tuple[Callable[[Pod], Hashable | None], ...] | None = (
            tuple(p.sign_pod for p in deciders.values() if isinstance(p, SignPlugin))
            if all(isinstance(p, SignPlugin) for p in deciders.values())
            else None
        )

    # -- construction helpers ------------------------------------------------------------

    def _error(self, subpath: str, message: str) -> ConfigError:
        return ConfigError.single(self._source, f"{self._path}.{subpath}", message)

    @staticmethod
    def _needed(plugins: Plugins) -> dict[str, str]:
        """Every plugin name enabled anywhere -> the first point (file key) enabling it."""
        needed: dict[str, str] = {}
        for key in (*EXTENSION_POINTS, "multiPoint"):
            for ref in plugins.point(key).enabled:
                needed.setdefault(ref.name, key)
        return needed

    def _check_plugin_config(self, profile: Profile, registry: PluginRegistry) -> None:
        for i, pc in enumerate(profile.plugin_config):
            if pc.name not in registry:
                raise self._error(f"pluginConfig[{i}].name", registry.unknown_message(pc.name))

    def _instantiate(
        self, name: str, key: str, profile: Profile, registry: PluginRegistry
    ) -> Plugin:
        if name not in registry:
            raise self._error(f"plugins.{key}", registry.unknown_message(name))
        entry = registry[name]
        found = profile.plugin_args(name)
        raw: dict[str, Any] = dict(found[1]) if found else {}
        args_path = f"{self._path}.pluginConfig[{found[0]}].args" if found else ""
        args: Any = raw
        if entry.args_model is not None:
            try:
                args = entry.args_model.model_validate(raw)
            except ValidationError as exc:
                prefix = args_path or f"{self._path}.pluginConfig[name={name}].args"
                raise ConfigError(
                    self._source, validation_problems(exc, entry.args_model, prefix)
                ) from None
        try:
            plugin = entry.factory(args, self)
        except ConfigError:
            raise
        except Exception as exc:
            raise ConfigError(
                self._source,
                [
                    Problem(
                        args_path or f"{self._path}.plugins.{key}",
                        f"initializing plugin {name!r} ({entry.origin}) failed: "
                        f"{type(exc).__name__}: {exc}",
                    )
                ],
            ) from exc
        if not isinstance(plugin, Plugin) or plugin.name != name:
            got = plugin.name if isinstance(plugin, Plugin) else repr(plugin)
            raise self._error(
                f"plugins.{key}",
                f"the factory for {name!r} ({entry.origin}) returned {got}, not a plugin named "
                f"{name!r}",
            )
        return plugin

    def _expand(self, key: str, plugins: Plugins) -> list[str]:
        """The plugin names at one point, in order (upstream's ``updatePluginList`` followed by
        ``expandMultiPointPlugins``)."""
        cls = _POINT_CLASSES[key]
        pset = plugins.point(key)
        specific: list[str] = []
        for ref in pset.enabled:
            plugin = self._plugins[ref.name]
            if not isinstance(plugin, cls):
                raise self._error(
                    f"plugins.{key}",
                    f"plugin {ref.name!r} does not implement {key}: "
                    f"{type(plugin).__qualname__} is not a {cls.__name__}; remove it from "
                    f"{key}.enabled",
                )
            if ref.name in specific:
                raise self._error(f"plugins.{key}", f"plugin {ref.name!r} is enabled twice")
            specific.append(ref.name)
        disabled = {d.name for d in pset.disabled}
        if "*" in disabled:
            return specific
        overrides: list[str] = []
        multi: list[str] = []
        for ref in plugins.multi_point.enabled:
            if not isinstance(self._plugins[ref.name], cls) or ref.name in disabled:
                continue
            if ref.name in specific:
                overrides.append(ref.name)
            elif ref.name in multi:
                raise self._error("plugins.multiPoint", f"plugin {ref.name!r} is enabled twice")
            else:
                multi.append(ref.name)
        return (
            [n for n in specific if n in overrides]
            + multi
            + [n for n in specific if n not in overrides]
        )

    def _score_weights(self, plugins: Plugins, names: Sequence[str]) -> dict[str, int]:
        weights: dict[str, int] = {}
        for ref in (*plugins.score.enabled, *plugins.multi_point.enabled):
            if ref.name in names and ref.name not in weights:
                weights[ref.name] = ref.weight or 1
        return weights

    # -- introspection and Handle --------------------------------------------------------

    @property
    def kube(self) -> Kube:
        """The API client plugins use in the binding cycle (``Handle.kube``)."""
        if self._kube is None:
            raise RuntimeError("this framework was built without an API client")
        return self._kube

    @property
    def profile_name(self) -> str:
        return self._profile.scheduler_name

    @property
    def profile(self) -> Profile:
        return self._profile

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def plugins(self) -> Mapping[str, Plugin]:
        """Every instantiated plugin by name (one instance per plugin)."""
        return self._plugins

    @property
    def score_weights(self) -> Mapping[str, int]:
        return self._weights

    def list_plugins(self) -> dict[str, list[str]]:
        """Extension point (file key) -> plugin names in run order (upstream's ``ListPlugins``)."""
        return {key: list(names) for key, names in self._at.items()}

    def has_filter_plugins(self) -> bool:
        return bool(self._filter)

    def has_post_filter_plugins(self) -> bool:
        return bool(self._post_filter)

    def has_score_plugins(self) -> bool:
        return bool(self._score)

    @property
    def queue_sort_key(self) -> Callable[[QueuedPodInfo], tuple[Any, ...]]:
        """The QueueSort plugin's key function, for the queue's ``SortedKeyList``."""
        return self._queue_sort.sort_key

    def enqueue_extensions(self) -> dict[str, list[ClusterEventWithHint]]:
        """Plugin name -> the events that may make pods it rejected schedulable.

        Only plugins at points that can reject (PreEnqueue, PreFilter, Filter, Reserve,
        Permit); those without ``EnqueueExtensions`` get every event (upstream's default).
        Calls ``events_to_register`` once per plugin per call: call it once, at start-up.
        """
        out: dict[str, list[ClusterEventWithHint]] = {}
        for key in _REJECTING_POINTS:
            for name in self._at[key]:
                if name in out:
                    continue
                plugin = self._plugins[name]
                if isinstance(plugin, EnqueueExtensions):
                    out[name] = list(plugin.events_to_register())
                else:
                    out[name] = [ClusterEventWithHint(ClusterEvent(WILDCARD, ActionType.ALL))]
        return out

    def get_waiting_pod(self, uid: str) -> WaitingPod | None:
        return self._waiting.get(uid)

    def iterate_waiting_pods(self) -> Iterator[WaitingPod]:
        """The waiting pods (a snapshot: allowing or rejecting while iterating is fine)."""
        return iter(list(self._waiting.values()))

    def reject_waiting_pod(self, uid: str, plugin: str, message: str) -> bool:
        """Reject a waiting pod (it was deleted, say); False if no such pod is waiting."""
        waiting = self._waiting.get(uid)
        return waiting is not None and waiting.reject(plugin, message)

    # -- scheduling cycle: never awaits --------------------------------------------------

    def _plugin_observer(self, state: CycleState) -> Observer | None:
        observer = self._observer
        return observer if observer is not None and state.record_plugin_metrics else None

    def run_pre_enqueue(self, pod: Pod) -> Status:
        """First non-success wins (rejections keep their code; others become Error).

        No ``CycleState`` here, so plugin durations are recorded whenever an observer is set.
        """
        observer = self._observer
        start = perf_counter() if observer is not None else 0.0
        status = SUCCESS
        name = ""
        try:
            for name, fn in self._pre_enqueue:
                if observer is None:
                    s = fn(pod)
                else:
                    t0 = perf_counter()
                    s = fn(pod)
                    observer.plugin_duration(name, "PreEnqueue", s.code, perf_counter() - t0)
                if s.code:
                    status = _passed_on("PreEnqueue", name, s)
                    break
        except Exception as exc:
            status = _raised("PreEnqueue", name, exc)
        if observer is not None:
            observer.extension_point_duration("PreEnqueue", status.code, perf_counter() - start)
        return status

    def run_pre_filter(self, state: CycleState, pod: Pod) -> tuple[PreFilterResult | None, Status]:
        """Run every PreFilter plugin (upstream's ``RunPreFilterPlugins``).

        Skip puts the plugin in ``state.skip_filter_plugins``. Unresolvable stops at once;
        Unschedulable lets the rest run (their state serves preemption) and the first such
        status is returned. Results restricting nodes are intersected; an empty intersection
        is Unresolvable. The returned result's ``plugins`` names the plugins that restricted
        the nodes.
        """
        observer = self._observer
        start = perf_counter() if observer is not None else 0.0
        result, status = self._run_pre_filter(state, pod, self._plugin_observer(state))
        if observer is not None:
            observer.extension_point_duration("PreFilter", status.code, perf_counter() - start)
        return result, status

    def _run_pre_filter(
        self, state: CycleState, pod: Pod, pobs: Observer | None
    ) -> tuple[PreFilterResult | None, Status]:
        skip = state.skip_filter_plugins
        skip.clear()
        result: PreFilterResult | None = None
        rejected: Status | None = None
        name = ""
        try:
            for name, fn in self._pre_filter:
                if pobs is None:
                    r, s = fn(state, pod)
                else:
                    t0 = perf_counter()
                    r, s = fn(state, pod)
                    pobs.plugin_duration(name, "PreFilter", s.code, perf_counter() - t0)
                code = s.code
                if code == Code.SKIP:
                    skip.add(name)
                    continue
                if code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                    return None, s.with_plugin(name)
                if code == Code.UNSCHEDULABLE:
                    if rejected is None:
                        rejected = s.with_plugin(name)
                    continue
                if code:
                    return None, _failed("PreFilter", name, s)
                if r is not None and r.node_names is not None:
                    contributed = PreFilterResult(r.node_names, frozenset({name}))
                    result = contributed if result is None else result.merge(contributed)
                    if not result.node_names:
                        names = sorted(result.plugins)
                        message = (
                            f"node(s) didn't satisfy plugin {names[0]}"
                            if len(names) == 1
                            else f"node(s) didn't satisfy plugins {', '.join(names)} simultaneously"
                        )
                        return result, Status(
                            Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (message,), names[-1]
                        )
        except Exception as exc:
            return None, _raised("PreFilter", name, exc)
        return result, rejected or SUCCESS

    def run_filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        """Whether the pod fits ``node_info``: the first non-success status wins.

        Rejections keep their code and get the plugin's name; other codes become Error.
        Plugins in ``state.skip_filter_plugins`` are not called. O(filter plugins); the hot
        path (module docstring).
        """
        if self._observer is not None and state.record_plugin_metrics:
            return self._run_filter_observed(state, pod, node_info, self._observer)
        skip = state.skip_filter_plugins
        name = ""
        try:
            for name, fn in self._filter:
                if skip and name in skip:
                    continue
                status = fn(state, pod, node_info)
                if status.code:
                    return _passed_on("Filter", name, status)
        except Exception as exc:
            return _raised("Filter", name, exc)
        return SUCCESS

    def _run_filter_observed(
        self, state: CycleState, pod: Pod, node_info: NodeInfo, observer: Observer
    ) -> Status:
        skip = state.skip_filter_plugins
        name = ""
        try:
            for name, fn in self._filter:
                if skip and name in skip:
                    continue
                t0 = perf_counter()
                status = fn(state, pod, node_info)
                observer.plugin_duration(name, "Filter", status.code, perf_counter() - t0)
                if status.code:
                    return _passed_on("Filter", name, status)
        except Exception as exc:
            return _raised("Filter", name, exc)
        return SUCCESS

    def run_post_filter(
        self, state: CycleState, pod: Pod, statuses: Mapping[str, Status]
    ) -> tuple[PostFilterResult | None, Status]:
        """Run PostFilter plugins until one succeeds or says Unresolvable (upstream's rules).

        Otherwise the result is Unschedulable with every plugin's reasons, attributed to the
        first; the last non-empty ``PostFilterResult`` is kept.
        """
        observer = self._observer
        start = perf_counter() if observer is not None else 0.0
        result, status = self._run_post_filter(state, pod, statuses, self._plugin_observer(state))
        if observer is not None:
            observer.extension_point_duration("PostFilter", status.code, perf_counter() - start)
        return result, status

    def _run_post_filter(
        self,
        state: CycleState,
        pod: Pod,
        statuses: Mapping[str, Status],
        pobs: Observer | None,
    ) -> tuple[PostFilterResult | None, Status]:
        result: PostFilterResult | None = None
        reasons: list[str] = []
        rejector = ""
        name = ""
        try:
            for name, fn in self._post_filter:
                if pobs is None:
                    r, s = fn(state, pod, statuses)
                else:
                    t0 = perf_counter()
                    r, s = fn(state, pod, statuses)
                    pobs.plugin_duration(name, "PostFilter", s.code, perf_counter() - t0)
                if s.code == Code.SUCCESS:
                    return r, s
                if s.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                    return r, s.with_plugin(name)
                if not s.is_rejected:
                    return None, _failed("PostFilter", name, s)
                if r is not None:
                    result = r
                reasons.extend(s.reasons)
                rejector = rejector or name
        except Exception as exc:
            return None, _raised("PostFilter", name, exc)
        return result, Status(Code.UNSCHEDULABLE, tuple(reasons), rejector)

    def run_pre_score(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]) -> Status:
        """Run PreScore plugins; Skip puts the plugin in ``state.skip_score_plugins``, anything
        but Success or Skip is an Error."""
        observer = self._observer
        start = perf_counter() if observer is not None else 0.0
        pobs = self._plugin_observer(state)
        skip = state.skip_score_plugins
        skip.clear()
        status = SUCCESS
        name = ""
        try:
            for name, fn in self._pre_score:
                if pobs is None:
                    s = fn(state, pod, nodes)
                else:
                    t0 = perf_counter()
                    s = fn(state, pod, nodes)
                    pobs.plugin_duration(name, "PreScore", s.code, perf_counter() - t0)
                if s.code == Code.SKIP:
                    skip.add(name)
                elif s.code:
                    status = _failed("PreScore", name, s)
                    break
        except Exception as exc:
            status = _raised("PreScore", name, exc)
        if observer is not None:
            observer.extension_point_duration("PreScore", status.code, perf_counter() - start)
        return status

    def run_score(
        self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo]
    ) -> tuple[list[NodeScore], Status]:
        """Each node's weighted total score, in the order of ``nodes``.

        For each Score plugin not in ``state.skip_score_plugins``: score every node, normalise
        (if the plugin has ``ScoreExtensions``), check each score is in 0..100, add
        ``score x weight`` to the node's total. Any failure is an Error and ``[]``.
        O(score plugins x nodes).
        """
        observer = self._observer
        start = perf_counter() if observer is not None else 0.0
        scores, status = self._run_score(state, pod, nodes, self._plugin_observer(state))
        if observer is not None:
            observer.extension_point_duration("Score", status.code, perf_counter() - start)
        return scores, status

    def _run_score(
        self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo], pobs: Observer | None
    ) -> tuple[list[NodeScore], Status]:
        skip = state.skip_score_plugins
        totals = [0] * len(nodes)
        name = ""
        try:
            for name, score, normalize, weight in self._score:
                if skip and name in skip:
                    continue
                if normalize is None and pobs is None:  # the common case, kept tight
                    for i, node_info in enumerate(nodes):
                        value, status = score(state, pod, node_info)
                        if status.code:
                            return [], _failed("Score", name, status)
                        if value < MIN_NODE_SCORE or value > MAX_NODE_SCORE:
                            return [], _out_of_range(name, node_info.name, value, False)
                        totals[i] += value * weight
                    continue
                scores: list[NodeScore] = []
                for node_info in nodes:
                    if pobs is None:
                        value, status = score(state, pod, node_info)
                    else:
                        t0 = perf_counter()
                        value, status = score(state, pod, node_info)
                        pobs.plugin_duration(name, "Score", status.code, perf_counter() - t0)
                    if status.code:
                        return [], _failed("Score", name, status)
                    scores.append(NodeScore(node_info.name, value))
                if normalize is not None:
                    if pobs is None:
                        status = normalize(state, pod, scores)
                    else:
                        t0 = perf_counter()
                        status = normalize(state, pod, scores)
                        pobs.plugin_duration(
                            name, "ScoreExtensionNormalize", status.code, perf_counter() - t0
                        )
                    if status.code:
                        return [], _failed("ScoreExtensionNormalize", name, status)
                for i, node_score in enumerate(scores):
                    value = node_score.score
                    if value < MIN_NODE_SCORE or value > MAX_NODE_SCORE:
                        return [], _out_of_range(
                            name, node_score.name, value, normalize is not None
                        )
                    totals[i] += value * weight
        except Exception as exc:
            return [], _raised("Score", name, exc)
        return [NodeScore(n.name, t) for n, t in zip(nodes, totals, strict=True)], SUCCESS

    def sign_pod(self, pod: Pod) -> Hashable | None:
        """The pod's signature (``SignPlugin``): the profile's name and every deciding plugin's
        fragment, or ``None`` when a plugin does not sign or declines this pod. Pods with equal
        signatures get equal Filter statuses and Scores on equal node infos."""
        signers = self._signers
        if signers is None:
            return None
        fragments: list[Hashable] = []
        for sign in signers:
            try:
                fragment = sign(pod)
            except Exception:  # a signer bug costs batching, never the pod
                log.exception("sign_pod failed for pod %s", _pod_name(pod))
                return None
            if fragment is None:
                return None
            fragments.append(fragment)
        return (self._profile.scheduler_name, tuple(fragments))

    def score_node(
        self, state: CycleState, pod: Pod, node_info: NodeInfo
    ) -> tuple[int, tuple[int, ...], Status]:
        """One node's score outside a whole-cycle ``run_score``, for the batched path.

        Returns ``(total, raw, status)``: ``total`` is ``score x weight`` summed over the
        Score plugins without ``ScoreExtensions``, ``raw`` the scores of those with them (in
        plugin order, un-normalised; a skipped plugin gives 0). Only meaningful for a signed
        pod, whose PreScore ran: normalised scores are equal on every node exactly when the
        raw ones are (``SignPlugin``'s contract), so ``total`` ranks the nodes. O(score
        plugins).
        """
        skip = state.skip_score_plugins
        total = 0
        raw: list[int] = []
        name = ""
        try:
            for name, score, normalize, weight in self._score:
                if skip and name in skip:
                    if normalize is not None:
                        raw.append(0)
                    continue
                value, status = score(state, pod, node_info)
                if status.code:
                    return 0, (), _failed("Score", name, status)
                if normalize is not None:
                    raw.append(value)
                    continue
                if value < MIN_NODE_SCORE or value > MAX_NODE_SCORE:
                    return 0, (), _out_of_range(name, node_info.name, value, False)
                total += value * weight
        except Exception as exc:
            return 0, (), _raised("Score", name, exc)
        return total, tuple(raw), SUCCESS

    def run_reserve(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        """Reserve in order; the first failure stops (rejections keep their code, others become
        Error). On failure the caller must call ``run_unreserve``."""
        observer = self._observer
        start = perf_counter() if observer is not None else 0.0
        pobs = self._plugin_observer(state)
        status = SUCCESS
        name = ""
        try:
            for name, reserve, _ in self._reserve:
                if pobs is None:
                    s = reserve(state, pod, node_name)
                else:
                    t0 = perf_counter()
                    s = reserve(state, pod, node_name)
                    pobs.plugin_duration(name, "Reserve", s.code, perf_counter() - t0)
                if s.code:
                    status = _passed_on("Reserve", name, s)
                    break
        except Exception as exc:
            status = _raised("Reserve", name, exc)
        if observer is not None:
            observer.extension_point_duration("Reserve", status.code, perf_counter() - start)
        return status

    def run_unreserve(self, state: CycleState, pod: Pod, node_name: str) -> None:
        """Unreserve every Reserve plugin, in reverse order; exceptions are logged, not raised."""
        observer = self._observer
        start = perf_counter() if observer is not None else 0.0
        pobs = self._plugin_observer(state)
        for name, _, unreserve in reversed(self._reserve):
            t0 = perf_counter() if pobs is not None else 0.0
            code = Code.SUCCESS
            try:
                unreserve(state, pod, node_name)
            except Exception:
                code = Code.ERROR
                log.exception(
                    "Unreserve plugin %r failed for pod %s on node %s",
                    name,
                    _pod_name(pod),
                    node_name,
                )
            if pobs is not None:
                pobs.plugin_duration(name, "Unreserve", code, perf_counter() - t0)
        if observer is not None:
            observer.extension_point_duration("Unreserve", Code.SUCCESS, perf_counter() - start)

    def run_permit(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        """Run Permit plugins (upstream's ``RunPermitPlugins``).

        The first rejection (or Error) is returned at once. Plugins that return Wait are
        collected with their timeouts (capped at ``MAX_PERMIT_TIMEOUT``); if any did and none
        rejected, the pod becomes a ``WaitingPod`` and the result is Wait: the binding cycle then
        awaits ``wait_on_permit``. The wait times out at the earliest pending deadline.
        """
        observer = self._observer
        start = perf_counter() if observer is not None else 0.0
        pobs = self._plugin_observer(state)
        waits: dict[str, float] = {}
        status = SUCCESS
        name = ""
        try:
            for name, fn in self._permit:
                if pobs is None:
                    s, timeout = fn(state, pod, node_name)
                else:
                    t0 = perf_counter()
                    s, timeout = fn(state, pod, node_name)
                    pobs.plugin_duration(name, "Permit", s.code, perf_counter() - t0)
                if not s.code:
                    continue
                if s.code == Code.WAIT:
                    waits[name] = min(max(float(timeout), 0.0), MAX_PERMIT_TIMEOUT)
                    continue
                status = _passed_on("Permit", name, s)
                break
        except Exception as exc:
            status = _raised("Permit", name, exc)
        if not status.code and waits:
            waiting = WaitingPod(pod, waits, self._clock)
            previous = self._waiting.get(waiting.uid)
            if previous is not None:
                previous.reject("", "superseded by a new scheduling attempt")
            self._waiting[waiting.uid] = waiting
            status = Status(
                Code.WAIT,
                (f"one or more plugins asked to wait and no plugin rejected pod {_pod_name(pod)}",),
            )
        if observer is not None:
            observer.extension_point_duration("Permit", status.code, perf_counter() - start)
        return status

    # -- binding cycle: asyncio ----------------------------------------------------------

    async def wait_on_permit(self, pod: Pod) -> Status:
        """Wait until the pod is allowed, rejected or timed out; Success if it is not waiting.

        The pod leaves the waiting map when this returns (or is cancelled).
        """
        uid = _uid(pod)
        waiting = self._waiting.get(uid)
        if waiting is None:
            return SUCCESS
        observer = self._observer
        start = perf_counter() if observer is not None else 0.0
        try:
            status = await waiting._wait()
        finally:
            if self._waiting.get(uid) is waiting:
                del self._waiting[uid]
        if observer is not None:
            observer.permit_wait_duration(status.code, perf_counter() - start)
        return status

    async def _run_async(
        self,
        point: str,
        plugins: tuple[tuple[str, Callable[[CycleState, Pod, str], Awaitable[Status]]], ...],
        state: CycleState,
        pod: Pod,
        node_name: str,
        bind: bool,
    ) -> Status:
        observer = self._observer
        start = perf_counter() if observer is not None else 0.0
        pobs = self._plugin_observer(state)
        status = Status.skip() if bind else SUCCESS
        name = ""
        try:
            for name, fn in plugins:
                t0 = perf_counter() if pobs is not None else 0.0
                s = await fn(state, pod, node_name)
                if pobs is not None:
                    pobs.plugin_duration(name, point, s.code, perf_counter() - t0)
                if bind and s.code == Code.SKIP:
                    continue
                if s.code:
                    status = _passed_on(point, name, s)
                    break
                if bind:
                    status = s
                    break
        except Exception as exc:
            status = _raised(point, name, exc)
        if observer is not None:
            observer.extension_point_duration(point, status.code, perf_counter() - start)
        return status

    async def run_pre_bind(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        """PreBind in order; the first failure stops (the caller then unreserves)."""
        return await self._run_async("PreBind", self._pre_bind, state, pod, node_name, False)

    async def run_bind(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        """Bind plugins in order until one does not return Skip; its status is the result.

        Skip if every plugin skipped (the caller treats that as a failure to bind).
        """
        return await self._run_async("Bind", self._bind, state, pod, node_name, True)

    async def run_post_bind(self, state: CycleState, pod: Pod, node_name: str) -> None:
        """Informational PostBind plugins; exceptions are logged, and all plugins run."""
        observer = self._observer
        start = perf_counter() if observer is not None else 0.0
        pobs = self._plugin_observer(state)
        for name, fn in self._post_bind:
            t0 = perf_counter() if pobs is not None else 0.0
            code = Code.SUCCESS
            try:
                await fn(state, pod, node_name)
            except Exception:
                code = Code.ERROR
                log.exception(
                    "PostBind plugin %r failed for pod %s on node %s",
                    name,
                    _pod_name(pod),
                    node_name,
                )
            if pobs is not None:
                pobs.plugin_duration(name, "PostBind", code, perf_counter() - t0)
        if observer is not None:
            observer.extension_point_duration("PostBind", Code.SUCCESS, perf_counter() - start)

    def __repr__(self) -> str:
        return f"<Framework {self.profile_name!r} plugins={list(self._plugins)}>"


def _out_of_range(plugin: str, node: str, value: int, normalized: bool) -> Status:
    after = " after normalizing" if normalized else ""
    return Status(
        Code.ERROR,
        (
            f"plugin {plugin!r} returned an invalid score {value} for node {node!r}; it must be "
            f"in [{MIN_NODE_SCORE}, {MAX_NODE_SCORE}]{after}",
        ),
        plugin,
    )


def build_frameworks(
    config: SchedulerConfiguration,
    registry: PluginRegistry,
    *,
    clock: Clock | None = None,
    observer: Observer | None = None,
    observer_for: Callable[[str], Observer] | None = None,
    source: str = "<config>",
    kube: Kube | None = None,
) -> dict[str, Framework]:
    """One ``Framework`` per profile, by scheduler name (upstream's ``profile.NewMap``).

    All profiles must use the same QueueSort plugin (one queue serves them all). ``observer``
    is shared by every profile; ``observer_for`` (it wins) gives each profile its own, called
    with the profile's scheduler name, since extension-point durations carry a ``profile``
    label (``Metrics.observer``).
    """
    frameworks: dict[str, Framework] = {}
    first_sort: tuple[str, str] | None = None
    for i, profile in enumerate(config.profiles):
        fw = Framework(
            profile,
            registry,
            clock=clock,
            observer=observer_for(profile.scheduler_name) if observer_for else observer,
            source=source,
            path=f"profiles[{i}]",
            kube=kube,
        )
        sort_name = fw.list_plugins()["queueSort"][0]
        if first_sort is None:
            first_sort = (sort_name, profile.scheduler_name)
        elif sort_name != first_sort[0]:
            raise ConfigError.single(
                source,
                f"profiles[{i}].plugins.queueSort",
                f"uses {sort_name!r} but profile {first_sort[1]!r} uses {first_sort[0]!r}; all "
                f"profiles share one queue, so they must use the same queue sort plugin",
            )
        frameworks[profile.scheduler_name] = fw
    return frameworks
