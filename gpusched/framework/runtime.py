"""``Framework``: one profile's plugins, instantiated once and run per extension point.

Upstream: pkg/scheduler/framework/runtime/framework.go (``NewFramework``, ``Run*Plugins``) and
waiting_pods_map.go. Construction does everything that can be done once: it instantiates each
enabled plugin once (a plugin at several points is one object), validates its args, expands
``multiPoint`` as upstream, checks the profile (one QueueSort, at least one Bind), and finds out
which points each plugin implements (trio's instruments): every point is a tuple of
``(name, bound method)``, so the hot path never calls a stage a plugin lacks. Mistakes are
``ConfigError`` naming the file, line and field path.

Running follows upstream's rules (noted on each ``run_*``). A plugin that raises gets an Error
status naming it: a bug in one plugin fails that pod's cycle, not the scheduler.

Costs: ``run_filter`` is O(filter plugins) per node and allocates nothing when the node fits or
a plugin rejects with a prebuilt status; ``run_score`` is O(score plugins x nodes). With an
``observer``, each ``run_*`` reports its extension point's duration (but ``run_filter``, called
per node: the cycle times the filter loop) and, in cycles whose
``CycleState.record_plugin_metrics`` is set, each plugin call too. Both are one wrapper
(``_timed``) applied at construction, so without an observer nothing is timed and choosing a
stage's timed table costs one attribute test. Details, and the waiting pods of Permit:
docs/plugins.md.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from time import perf_counter
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, TypeVar

from pydantic import ValidationError

from gpusched.clock import Clock, RealClock

from .config import (
    EXTENSION_POINTS,
    ConfigError,
    ConfigOrigin,
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
    BackgroundPlugin,
    BindPlugin,
    ClaimSpecsPlugin,
    ClusterEvent,
    ClusterEventWithHint,
    EnqueueExtensions,
    EventRecorder,
    FilterPlugin,
    GroupPostFilterPlugin,
    Informer,
    InformerPlugin,
    NodeLister,
    NodeScore,
    PermitPlugin,
    Plugin,
    Pod,
    PodEventHandler,
    PodGroup,
    PodGroupPlugin,
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
    WaitingPod,
)
from .registry import PluginRegistry
from .status import SUCCESS, Code, Status

if TYPE_CHECKING:
    from gpusched.cache import NodeInfo
    from gpusched.gpu_policy.models import GPUClass
    from gpusched.kube import Kube

__all__ = [
    "MAX_PERMIT_TIMEOUT",
    "POINT_LABELS",
    "Framework",
    "Observer",
    "build_frameworks",
]

log = logging.getLogger(__name__)

MAX_PERMIT_TIMEOUT = 15 * 60.0
"""The longest a Permit plugin may make a pod wait, in seconds (upstream's ``maxTimeout``)."""

POINT_LABELS: dict[str, str] = {key: key[0].upper() + key[1:] for key in EXTENSION_POINTS}
"""Configuration key -> the ``extension_point`` label upstream's metrics use (``preFilter`` ->
``PreFilter``). Also used: ``ScoreExtensionNormalize`` and ``Unreserve``."""

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

_STAGES: tuple[tuple[str, str, str, str], ...] = (
    *(
        (key, key, method, POINT_LABELS[key])
        for key, method in EXTENSION_POINTS.items()
        if key not in ("queueSort", "score")  # a key function; Score has its own table
    ),
    ("unreserve", "reserve", "unreserve", "Unreserve"),
)
"""The stages run from ``(name, bound method)`` tables: the stage, the configuration key whose
plugins run it, their method (the framework's is ``run_<method>``) and the metrics label."""

# Plugins at these points can reject a pod, so their EnqueueExtensions matter (upstream's
# shouldHaveEnqueueExtensions).
_REJECTING_POINTS = ("preEnqueue", "preFilter", "filter", "reserve", "permit")


class Observer(Protocol):
    """Receives durations; the metrics module implements it (labels as upstream's metrics)."""

    def extension_point_duration(self, point: str, status_code: Code, seconds: float) -> None:
        """``scheduler_framework_extension_point_duration_seconds{extension_point, status}``"""

    def plugin_duration(self, plugin: str, point: str, status_code: Code, seconds: float) -> None:
        """``scheduler_plugin_execution_duration_seconds{plugin, extension_point, status}``"""

    def preemption(self, victims: int | None) -> None:
        """``scheduler_preemption_attempts_total``, and with ``victims`` (a candidate was
        chosen) ``scheduler_preemption_victims``."""

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


def _until_failure(
    point: str, plugins: Iterable[tuple[str, Callable[..., Status]]], *args: Any
) -> Status:
    """Call each plugin's method with ``args`` in order; the first non-success stops and is
    passed on (``_passed_on``); one that raises is an Error naming it."""
    name = ""
    try:
        for name, fn in plugins:
            s = fn(*args)
            if s.code:
                return _passed_on(point, name, s)
    except Exception as exc:
        return _raised(point, name, exc)
    return SUCCESS


def _uid(pod: Pod) -> str:
    meta = pod.get("metadata") or {}
    uid = meta.get("uid")
    return str(uid) if uid else f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _pod_name(pod: Pod) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


# -- timing, wrapped once -------------------------------------------------------------------

_F = TypeVar("_F", bound=Callable[..., Any])
_Entries = tuple[tuple[str, _F], ...]
_ScoreEntry: TypeAlias = (
    "tuple[str, Callable[[CycleState, Pod, NodeInfo], tuple[int, Status]], "
    "Callable[[CycleState, Pod, list[NodeScore]], Status] | None, int]"
)
"""A Score plugin: its name, ``score``, ``normalize_score`` (or ``None``) and weight."""


def _code_of(out: Any) -> Code:
    """The status code in a stage's result: a Status, a tuple holding one, or None (Success)."""
    if isinstance(out, Status):
        return out.code
    if isinstance(out, tuple):
        return next((o.code for o in out if isinstance(o, Status)), Code.SUCCESS)
    return Code.SUCCESS


def _timed(fn: _F, report: Callable[[Code, float], None]) -> _F:
    """``fn`` (plain or async) calling ``report(code, seconds)`` after each call; an exception
    is reported as Error and re-raised. Built once, at construction, for a plugin's method
    (``Observer.plugin_duration``) and for a ``run_*`` method (the extension point's)."""
    if asyncio.iscoroutinefunction(fn):

        async def timed_async(*args: Any) -> Any:
            t0 = perf_counter()
            try:
                out = await fn(*args)
            except Exception:
                report(Code.ERROR, perf_counter() - t0)
                raise
            report(_code_of(out), perf_counter() - t0)
            return out

        return timed_async  # type: ignore[return-value]

    def timed(*args: Any) -> Any:
        t0 = perf_counter()
        try:
            out = fn(*args)
        except Exception:
            report(Code.ERROR, perf_counter() - t0)
            raise
        report(_code_of(out), perf_counter() - t0)
        return out

    return timed  # type: ignore[return-value]


# -- waiting pods ----------------------------------------------------------------------------


class _WaitingPod:
    """A pod that Permit plugins told to wait (upstream's ``waitingPod``; the ``WaitingPod``
    protocol of ``interfaces``).

    Allow and reject it from the event loop's thread (plugins, event handlers); its binding
    cycle awaits the outcome through ``Framework.wait_on_permit``. Each plugin's deadline
    counts from ``run_permit`` on the injected ``Clock``; the wait ends at the earliest
    deadline of the plugins still waiting (a plugin that allowed no longer bounds it).
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


if TYPE_CHECKING:
    _implements: type[WaitingPod] = _WaitingPod  # the protocol plugins see


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
        source: str | None = None,
        path: str = "profiles[0]",
        kube: Kube | None = None,
        node_lister: NodeLister | None = None,
        events: EventRecorder | None = None,
        origin: ConfigOrigin | None = None,
        gpu_classes: Mapping[str, GPUClass] | None = None,
        activate: Callable[[Iterable[str]], object] | None = None,
    ) -> None:
        """Build the framework; ``ConfigError`` (naming ``source``, or ``origin``'s file, with
        field paths under ``path`` and lines from ``origin``) for unknown plugins, bad args,
        plugins at points they do not implement, and a profile without exactly one QueueSort
        plugin or without a Bind plugin. ``kube``, ``node_lister``, ``events`` and
        ``gpu_classes`` are the services the ``Handle`` gives plugins."""
        self._profile = profile
        self._gpu_classes: Mapping[str, GPUClass] = gpu_classes if gpu_classes is not None else {}
        self._kube = kube
        self._node_lister = node_lister
        self._events = events
        self._activate = activate
        self._clock: Clock = clock if clock is not None else RealClock()
        self._observer = observer
        self._origin = origin
        self._source = source or (origin.source if origin is not None else "<config>")
        self._path = path
        self._waiting: dict[str, _WaitingPod] = {}
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

        # Hot-path tables, built once: per stage, (name, bound method) in order, plain and, with
        # an observer, timed per call (the variant cycles that record plugin metrics use).
        self._stages: dict[str, tuple[_Entries[Any], _Entries[Any]]] = {}
        for stage, key, method, label in _STAGES:
            plain = tuple((p.NAME, getattr(p, method)) for p in of(key, _POINT_CLASSES[key]))
            if stage == "unreserve":
                plain = plain[::-1]
            timed = tuple((name, self._time(name, fn, label)) for name, fn in plain)
            self._stages[stage] = (plain, timed)
        self._filter: _Entries[Callable[[CycleState, Pod, NodeInfo], Status]]
        self._filter, self._filter_t = self._stages["filter"]  # per node: read directly
        self._score: tuple[_ScoreEntry, ...] = tuple(
            (
                p.NAME,
                p.score,
                p.normalize_score if isinstance(p, ScoreExtensions) else None,
                self._weights[p.NAME],
            )
            for p in of("score", ScorePlugin)
        )
        self._score_t: tuple[_ScoreEntry, ...] = tuple(
            (
                name,
                self._time(name, score, "Score"),
                None if norm is None else self._time(name, norm, "ScoreExtensionNormalize"),
                weight,
            )
            for name, score, norm, weight in self._score
        )
        if observer is not None:  # each run_* reports its extension point's duration
            for stage, _key, method, label in (*_STAGES, ("score", "score", "score", "Score")):
                if stage != "filter":  # called per node: the cycle times the filter loop
                    runner = f"run_{method}"
                    report = functools.partial(observer.extension_point_duration, label)
                    setattr(self, runner, _timed(getattr(self, runner), report))

        # Signing (SignPlugin): possible only if every plugin that decides where a pod fits
        # signs; the normalised Score plugins are the ones whose raw scores the batched path
        # must find equal on every feasible node.
        deciders = {
            p.NAME: p
            for key in ("preFilter", "filter", "preScore", "score")
            for p in (self._plugins[name] for name in at[key])
        }
        self._unsigned = tuple(n for n, p in deciders.items() if not isinstance(p, SignPlugin))
        self._unsigned_by_design = {
            n: deciders[n].UNSIGNED_BY_DESIGN
            for n in self._unsigned
            if deciders[n].UNSIGNED_BY_DESIGN
        }
        self._signers: tuple[Callable[[Pod], Hashable | None], ...] | None = (
            None
            if self._unsigned
            else tuple(p.sign_pod for p in deciders.values() if isinstance(p, SignPlugin))
        )

        # The mixins, found once (``gpusched.framework.interfaces``, at the end).
        enabled = list(self._plugins.values())
        groups = [p for p in enabled if isinstance(p, PodGroupPlugin)]
        if len(groups) > 1:
            raise self._error(
                "plugins",
                "at most one pod group (gang) plugin may be enabled per profile (got "
                + ", ".join(p.NAME for p in groups if isinstance(p, Plugin))
                + ")",
            )
        self._group: PodGroupPlugin | None = groups[0] if groups else None
        claim_specs = [p for p in enabled if isinstance(p, ClaimSpecsPlugin)]
        if len(claim_specs) > 1:
            raise self._error(
                "plugins",
                "at most one GpuClaim plugin (ClaimSpecsPlugin) may be enabled per profile (got "
                + ", ".join(p.NAME for p in claim_specs if isinstance(p, Plugin))
                + ")",
            )
        self._claim_specs: ClaimSpecsPlugin | None = claim_specs[0] if claim_specs else None
        self._pod_handlers = tuple(p.on_pod for p in enabled if isinstance(p, PodEventHandler))
        self._informer_plugins = tuple(p for p in enabled if isinstance(p, InformerPlugin))
        self._background = tuple(p for p in enabled if isinstance(p, BackgroundPlugin))
        self._group_post_filters = tuple(
            p for p in of("postFilter", PostFilterPlugin) if isinstance(p, GroupPostFilterPlugin)
        )

    def _time(self, plugin: str, fn: _F, label: str) -> _F:
        """``fn``, a method of ``plugin`` at ``label``, timed (itself without an observer)."""
        observer = self._observer
        if observer is None:
            return fn
        return _timed(fn, functools.partial(observer.plugin_duration, plugin, label))

    def _plugins_at(self, stage: str, state: CycleState | None) -> _Entries[Any]:
        """A stage's table: timed in cycles that record plugin metrics (and without a
        ``CycleState``, at PreEnqueue, whenever there is an observer)."""
        plain, timed = self._stages[stage]
        return timed if state is None or state.record_plugin_metrics else plain

    # -- construction helpers ------------------------------------------------------------

    def _error(self, subpath: str, message: str, name: str | None = None) -> ConfigError:
        """A ``ConfigError`` at ``subpath`` of this profile, with the line of the field (or of
        the plugin ``name`` enabled under it) when the configuration came from a file."""
        path = f"{self._path}.{subpath}"
        line = self._origin.line(path, name) if self._origin is not None else None
        return ConfigError(self._source, [Problem(path, message, line)])

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
            raise self._error(f"plugins.{key}", registry.unknown_message(name), name)
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
                node = self._origin.node_at(args_path) if self._origin and args_path else None
                raise ConfigError(
                    self._source, validation_problems(exc, entry.args_model, prefix, node)
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
                        self._origin.line(args_path or f"{self._path}.plugins.{key}", name)
                        if self._origin is not None
                        else None,
                    )
                ],
            ) from exc
        if not isinstance(plugin, Plugin) or plugin.name != name:
            got = plugin.name if isinstance(plugin, Plugin) else repr(plugin)
            raise self._error(
                f"plugins.{key}",
                f"the factory for {name!r} ({entry.origin}) returned {got}, not a plugin named "
                f"{name!r}",
                name,
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
                    ref.name,
                )
            if ref.name in specific:
                raise self._error(
                    f"plugins.{key}", f"plugin {ref.name!r} is enabled twice", ref.name
                )
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
                raise self._error(
                    "plugins.multiPoint", f"plugin {ref.name!r} is enabled twice", ref.name
                )
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
    def node_lister(self) -> NodeLister:
        """The scheduling cycle's snapshot of the nodes (``Handle.node_lister``)."""
        if self._node_lister is None:
            raise RuntimeError("this framework was built without a node lister (snapshot)")
        return self._node_lister

    @property
    def events(self) -> EventRecorder:
        """The event recorder (``Handle.events``)."""
        if self._events is None:
            raise RuntimeError("this framework was built without an event recorder")
        return self._events

    @property
    def gpu_classes(self) -> Mapping[str, GPUClass]:
        """The valid GPU classes by name (``Handle.gpu_classes``); empty without a scheduler."""
        return self._gpu_classes

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
        return bool(self._stages["postFilter"][0])

    def has_score_plugins(self) -> bool:
        return bool(self._score)

    def unsigned_plugins(self) -> tuple[str, ...]:
        """The PreFilter, Filter, PreScore and Score plugins that are not ``SignPlugin``s, in
        order. Any one of them keeps every pod of the profile off the batched path
        (equivalence classes): ``sign_pod`` is then always ``None``."""
        return self._unsigned

    def unsigned_by_design(self) -> dict[str, str]:
        """Those of :meth:`unsigned_plugins` that say why they never sign
        (``Plugin.UNSIGNED_BY_DESIGN``), with the reason."""
        return dict(self._unsigned_by_design)

    @property
    def queue_sort_key(self) -> Callable[[QueuedPodInfo], tuple[Any, ...]]:
        """The QueueSort plugin's key function."""
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

    # -- the mixins: pod groups, informers, pod events, background tasks ----------------

    def group_key(self, pod: Pod) -> str | None:
        """The pod's group key from the profile's ``PodGroupPlugin``; ``None`` without one."""
        group = self._group
        return None if group is None else group.group_key(pod)

    @property
    def claim_specs(self) -> ClaimSpecsPlugin | None:
        """The profile's ``ClaimSpecsPlugin`` (``Handle.claim_specs``); ``None`` without one."""
        return self._claim_specs

    @property
    def group_plugin_name(self) -> str:
        """The name of the profile's ``PodGroupPlugin`` (``""`` without one)."""
        group = self._group
        return group.NAME if isinstance(group, Plugin) else ""

    def pod_group(self, pod: Pod) -> PodGroup | None:
        """The group to plan whole with ``pod`` now (``PodGroupPlugin.pod_group``)."""
        group = self._group
        return None if group is None else group.pod_group(pod)

    def record_preemption(self, victims: int | None) -> None:
        """A preemption attempt (``Handle.record_preemption``), for the metrics."""
        if self._observer is not None:
            self._observer.preemption(victims)

    def has_group_post_filter(self) -> bool:
        return bool(self._group_post_filters)

    def run_post_filter_group(
        self, group: PodGroup, members: Sequence[Pod]
    ) -> tuple[Mapping[str, str] | None, Status]:
        """The ``GroupPostFilterPlugin``s in PostFilter order until one nominates every
        member; else the last one's status (an exception is an Error status)."""
        status = Status.unschedulable()
        for plugin in self._group_post_filters:
            name = plugin.NAME if isinstance(plugin, Plugin) else type(plugin).__name__
            try:
                nominations, status = plugin.post_filter_group(group, members)
            except Exception as exc:
                return None, _raised("PostFilter", name, exc)
            if nominations is not None:
                return nominations, status
        return None, status

    def informers(self) -> list[Informer]:
        """Every ``InformerPlugin``'s informers. Call once, at start-up."""
        return [inf for p in self._informer_plugins for inf in p.informers()]

    def has_pod_handlers(self) -> bool:
        return bool(self._pod_handlers)

    def on_pod(self, kind: str, pod: Pod, old: Pod | None) -> None:
        """Tell every ``PodEventHandler`` of a pod event; an exception is logged."""
        for handler in self._pod_handlers:
            try:
                handler(kind, pod, old)
            except Exception:
                log.exception("pod event handler %r failed for %s", handler, _pod_name(pod))

    def background_plugins(self) -> tuple[BackgroundPlugin, ...]:
        """The ``BackgroundPlugin``s, whose ``background()`` the scheduler runs as tasks."""
        return self._background

    def get_waiting_pod(self, uid: str) -> _WaitingPod | None:
        return self._waiting.get(uid)

    def iterate_waiting_pods(self) -> Iterator[_WaitingPod]:
        """The waiting pods (a snapshot: allowing or rejecting while iterating is fine)."""
        return iter(list(self._waiting.values()))

    def activate(self, uids: Iterable[str]) -> None:
        if self._activate is not None:
            self._activate(uids)

    def reject_waiting_pod(self, uid: str, plugin: str, message: str) -> bool:
        """Reject a waiting pod (it was deleted, say); False if no such pod is waiting."""
        waiting = self._waiting.get(uid)
        return waiting is not None and waiting.reject(plugin, message)

    # -- scheduling cycle: never awaits --------------------------------------------------

    def run_pre_enqueue(self, pod: Pod) -> Status:
        """First non-success wins (rejections keep their code; others become Error).

        No ``CycleState`` here, so plugin durations are recorded whenever an observer is set.
        """
        return _until_failure("PreEnqueue", self._plugins_at("preEnqueue", None), pod)

    def run_pre_filter(self, state: CycleState, pod: Pod) -> tuple[PreFilterResult | None, Status]:
        """Run every PreFilter plugin (upstream's ``RunPreFilterPlugins``).

        Skip puts the plugin in ``state.skip_filter_plugins``. Unresolvable stops at once;
        Unschedulable lets the rest run (their state serves preemption) and the first such
        status is returned. Results restricting nodes are intersected; an empty intersection
        is Unresolvable. The returned result's ``plugins`` names the plugins that restricted
        the nodes.
        """
        skip = state.skip_filter_plugins
        skip.clear()
        result: PreFilterResult | None = None
        rejected: Status | None = None
        name = ""
        try:
            for name, fn in self._plugins_at("preFilter", state):
                r, s = fn(state, pod)
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
        path (module docstring). Not timed as a point: the cycle times the filter phase.
        """
        skip = state.skip_filter_plugins
        name = ""
        try:
            for name, fn in self._filter_t if state.record_plugin_metrics else self._filter:
                if skip and name in skip:
                    continue
                status = fn(state, pod, node_info)
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
        result: PostFilterResult | None = None
        reasons: list[str] = []
        rejector = ""
        name = ""
        try:
            for name, fn in self._plugins_at("postFilter", state):
                r, s = fn(state, pod, statuses)
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
        skip = state.skip_score_plugins
        skip.clear()
        name = ""
        try:
            for name, fn in self._plugins_at("preScore", state):
                s = fn(state, pod, nodes)
                if s.code == Code.SKIP:
                    skip.add(name)
                elif s.code:
                    return _failed("PreScore", name, s)
        except Exception as exc:
            return _raised("PreScore", name, exc)
        return SUCCESS

    def run_score(
        self,
        state: CycleState,
        pod: Pod,
        nodes: Sequence[NodeInfo],
        breakdown: dict[str, list[int]] | None = None,
    ) -> tuple[list[NodeScore], Status]:
        """Each node's weighted total score, in the order of ``nodes``.

        For each Score plugin not in ``state.skip_score_plugins``: score every node, normalise
        (if the plugin has ``ScoreExtensions``), check each score is in 0..100, add
        ``score x weight`` to the node's total. Any failure is an Error and ``[]``.
        ``breakdown`` (``gpusched explain``) receives each plugin's weighted scores, in the
        order of ``nodes``. O(score plugins x nodes).
        """
        skip = state.skip_score_plugins
        totals = [0] * len(nodes)
        name = ""
        try:
            for name, score, normalize, weight in (
                self._score_t if state.record_plugin_metrics else self._score
            ):
                if skip and name in skip:
                    continue
                if breakdown is not None:
                    before = list(totals)
                if normalize is None:  # the common case, kept tight
                    for i, node_info in enumerate(nodes):
                        value, status = score(state, pod, node_info)
                        if status.code:
                            return [], _failed("Score", name, status)
                        if value < MIN_NODE_SCORE or value > MAX_NODE_SCORE:
                            return [], _out_of_range(name, node_info.name, value, False)
                        totals[i] += value * weight
                    if breakdown is not None:
                        breakdown[name] = [t - b for t, b in zip(totals, before, strict=True)]
                    continue
                scores: list[NodeScore] = []
                for node_info in nodes:
                    value, status = score(state, pod, node_info)
                    if status.code:
                        return [], _failed("Score", name, status)
                    scores.append(NodeScore(node_info.name, value))
                status = normalize(state, pod, scores)
                if status.code:
                    return [], _failed("ScoreExtensionNormalize", name, status)
                for i, node_score in enumerate(scores):
                    value = node_score.score
                    if value < MIN_NODE_SCORE or value > MAX_NODE_SCORE:
                        return [], _out_of_range(name, node_score.name, value, True)
                    totals[i] += value * weight
                if breakdown is not None:
                    breakdown[name] = [t - b for t, b in zip(totals, before, strict=True)]
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
        return _until_failure("Reserve", self._plugins_at("reserve", state), state, pod, node_name)

    def run_unreserve(self, state: CycleState, pod: Pod, node_name: str) -> None:
        """Unreserve every Reserve plugin, in reverse order; exceptions are logged, not raised."""
        for name, unreserve in self._plugins_at("unreserve", state):
            try:
                unreserve(state, pod, node_name)
            except Exception:
                log.exception(
                    "Unreserve plugin %r failed for pod %s on node %s",
                    name,
                    _pod_name(pod),
                    node_name,
                )

    def run_permit(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        """Run Permit plugins (upstream's ``RunPermitPlugins``).

        The first rejection (or Error) is returned at once. Plugins that return Wait are
        collected with their timeouts (capped at ``MAX_PERMIT_TIMEOUT``); if any did and none
        rejected, the pod becomes a waiting pod and the result is Wait: the binding cycle then
        awaits ``wait_on_permit``. The wait times out at the earliest pending deadline.
        """
        waits: dict[str, float] = {}
        name = ""
        try:
            for name, fn in self._plugins_at("permit", state):
                s, timeout = fn(state, pod, node_name)
                if not s.code:
                    continue
                if s.code == Code.WAIT:
                    waits[name] = min(max(float(timeout), 0.0), MAX_PERMIT_TIMEOUT)
                    continue
                return _passed_on("Permit", name, s)
        except Exception as exc:
            return _raised("Permit", name, exc)
        if not waits:
            # A waiting entry left by an earlier attempt (rejected while nothing waited on
            # it) must not reject this one in wait_on_permit.
            if self._waiting:
                self._waiting.pop(_uid(pod), None)
            return SUCCESS
        waiting = _WaitingPod(pod, waits, self._clock)
        previous = self._waiting.get(waiting.uid)
        if previous is not None:
            previous.reject("", "superseded by a new scheduling attempt")
        self._waiting[waiting.uid] = waiting
        return Status(
            Code.WAIT,
            (f"one or more plugins asked to wait and no plugin rejected pod {_pod_name(pod)}",),
        )

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

    async def run_pre_bind(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        """PreBind in order; the first failure stops (the caller then unreserves)."""
        name = ""
        try:
            for name, fn in self._plugins_at("preBind", state):
                s = await fn(state, pod, node_name)
                if s.code:
                    return _passed_on("PreBind", name, s)
        except Exception as exc:
            return _raised("PreBind", name, exc)
        return SUCCESS

    async def run_bind(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        """Bind plugins in order until one does not return Skip; its status is the result.

        Skip if every plugin skipped (the caller treats that as a failure to bind).
        """
        name = ""
        try:
            for name, fn in self._plugins_at("bind", state):
                s = await fn(state, pod, node_name)
                if s.code == Code.SKIP:
                    continue
                return _passed_on("Bind", name, s) if s.code else s
        except Exception as exc:
            return _raised("Bind", name, exc)
        return Status.skip()

    async def run_post_bind(self, state: CycleState, pod: Pod, node_name: str) -> None:
        """Informational PostBind plugins; exceptions are logged, and all plugins run."""
        for name, fn in self._plugins_at("postBind", state):
            try:
                await fn(state, pod, node_name)
            except Exception:
                log.exception(
                    "PostBind plugin %r failed for pod %s on node %s",
                    name,
                    _pod_name(pod),
                    node_name,
                )

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
    source: str | None = None,
    kube: Kube | None = None,
    node_lister: NodeLister | None = None,
    events: EventRecorder | None = None,
    gpu_classes: Mapping[str, GPUClass] | None = None,
    activate: Callable[[Iterable[str]], object] | None = None,
) -> dict[str, Framework]:
    """One ``Framework`` per profile, by scheduler name (upstream's ``profile.NewMap``).

    All profiles must use the same QueueSort plugin (one queue serves them all). ``observer``
    is shared by every profile; ``observer_for`` (it wins) gives each profile its own, called
    with the profile's scheduler name, since extension-point durations carry a ``profile``
    label (``Metrics.observer``). Errors name ``source``, else the file the configuration was
    loaded from (``config.origin``), with its lines.
    """
    origin = config.origin
    where = source or (origin.source if origin is not None else "<config>")
    frameworks: dict[str, Framework] = {}
    first_sort: tuple[str, str] | None = None
    for i, profile in enumerate(config.profiles):
        fw = Framework(
            profile,
            registry,
            clock=clock,
            observer=observer_for(profile.scheduler_name) if observer_for else observer,
            source=where,
            path=f"profiles[{i}]",
            kube=kube,
            node_lister=node_lister,
            events=events,
            origin=origin,
            gpu_classes=gpu_classes,
            activate=activate,
        )
        sort_name = fw.list_plugins()["queueSort"][0]
        if first_sort is None:
            first_sort = (sort_name, profile.scheduler_name)
        elif sort_name != first_sort[0]:
            path = f"profiles[{i}].plugins.queueSort"
            raise ConfigError(
                where,
                [
                    Problem(
                        path,
                        f"uses {sort_name!r} but profile {first_sort[1]!r} uses "
                        f"{first_sort[0]!r}; all profiles share one queue, so they must use "
                        f"the same queue sort plugin",
                        origin.line(path) if origin is not None else None,
                    )
                ],
            )
        frameworks[profile.scheduler_name] = fw
    return frameworks
