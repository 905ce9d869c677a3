"""The plugin framework, modelled on kube-scheduler's scheduling framework.

Upstream: staging/src/k8s.io/kube-scheduler/framework (interfaces, ``Status``, ``CycleState``)
and pkg/scheduler/framework/runtime (``NewFramework``, the ``Run*Plugins`` methods, the
registry, waiting pods); the configuration mirrors ``KubeSchedulerConfiguration``.

Modules, from the bottom up::

    status        Code, Status, SUCCESS: what plugins return instead of raising
    cycle_state   CycleState, StateKey: per-cycle data, written in PreFilter, read in Filter/Score
    interfaces    one base class per extension point, with its contract; events and hints
    config        SchedulerConfiguration (pydantic), load_config, default-plugin merging
    registry      PluginRegistry: names -> factories; in-tree discovery, entry points,
                  default_registry() (both, loaded once)
    runtime       Framework: a profile's plugins, instantiated once, run per extension point

Writing a plugin is one subclass and one line of configuration: see ``interfaces``, the
README's "Writing a plugin" and docs/plugins.md (every extension point's contract, signing,
the ``Handle``, ``DEVICE_ASSIGNMENT``, entry points, testing).

Exceptions::

    ValueError
    +-- ConfigError            the configuration is wrong: .source, .problems (path, message, line)
    Exception
    +-- RegistryError          a plugin cannot be registered or found
    |   +-- DuplicatePluginError   two plugins under one name
    |   +-- UnknownPluginError     (also a KeyError) a name that is not registered
    +-- StatusError            Status.as_error() for a failed status without an exception
    KeyError
    +-- StateNotFoundError     CycleState.read of a key nobody wrote this cycle

Building a ``Framework`` reports unknown plugin names, bad args and misplaced plugins as
``ConfigError`` naming the field path, so that every configuration mistake reads the same.
"""

from .config import (
    API_VERSION,
    EXTENSION_POINTS,
    KIND,
    ConfigError,
    ConfigOrigin,
    DisabledPlugin,
    Events,
    LeaderElection,
    PluginArgs,
    PluginConfig,
    PluginRef,
    Plugins,
    PluginSet,
    Problem,
    Profile,
    Replicas,
    Reservations,
    SchedulerConfiguration,
    apply_default_plugins,
    default_config,
    default_plugins,
    load_config,
    merge_plugin_set,
    parse_config,
)
from .cycle_state import CycleState, StateData, StateKey, StateNotFoundError
from .interfaces import (
    DEVICE_ASSIGNMENT,
    MAX_NODE_SCORE,
    MIN_NODE_SCORE,
    SHARED_CLAIM,
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
    Handle,
    Informer,
    InformerHandler,
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
    QueueingHint,
    QueueingHintFn,
    QueueSortPlugin,
    ReservePlugin,
    ScoreExtensions,
    ScorePlugin,
    SignPlugin,
    WaitingPod,
)
from .registry import (
    DuplicatePluginError,
    PluginFactory,
    PluginRegistry,
    RegistryEntry,
    RegistryError,
    UnknownPluginError,
    default_registry,
    in_tree,
)
from .runtime import MAX_PERMIT_TIMEOUT, Framework, Observer, build_frameworks
from .status import SKIP, SUCCESS, Code, Status, StatusError

__all__ = [
    "API_VERSION",
    "DEVICE_ASSIGNMENT",
    "EXTENSION_POINTS",
    "KIND",
    "MAX_NODE_SCORE",
    "MAX_PERMIT_TIMEOUT",
    "MIN_NODE_SCORE",
    "SHARED_CLAIM",
    "SKIP",
    "SUCCESS",
    "WILDCARD",
    "ActionType",
    "BackgroundPlugin",
    "BindPlugin",
    "ClaimSpecsPlugin",
    "ClusterEvent",
    "ClusterEventWithHint",
    "Code",
    "ConfigError",
    "ConfigOrigin",
    "CycleState",
    "DisabledPlugin",
    "DuplicatePluginError",
    "EnqueueExtensions",
    "EventRecorder",
    "Events",
    "FilterPlugin",
    "Framework",
    "GroupPostFilterPlugin",
    "Handle",
    "Informer",
    "InformerHandler",
    "InformerPlugin",
    "LeaderElection",
    "NodeLister",
    "NodeScore",
    "Observer",
    "PermitPlugin",
    "Plugin",
    "PluginArgs",
    "PluginConfig",
    "PluginFactory",
    "PluginRef",
    "PluginRegistry",
    "PluginSet",
    "Plugins",
    "Pod",
    "PodEventHandler",
    "PodGroup",
    "PodGroupPlugin",
    "PostBindPlugin",
    "PostFilterPlugin",
    "PostFilterResult",
    "PreBindPlugin",
    "PreEnqueuePlugin",
    "PreFilterPlugin",
    "PreFilterResult",
    "PreScorePlugin",
    "Problem",
    "Profile",
    "QueueSortPlugin",
    "QueuedPodInfo",
    "QueueingHint",
    "QueueingHintFn",
    "RegistryEntry",
    "RegistryError",
    "Replicas",
    "Reservations",
    "ReservePlugin",
    "SchedulerConfiguration",
    "ScoreExtensions",
    "ScorePlugin",
    "SignPlugin",
    "StateData",
    "StateKey",
    "StateNotFoundError",
    "Status",
    "StatusError",
    "UnknownPluginError",
    "WaitingPod",
    "apply_default_plugins",
    "build_frameworks",
    "default_config",
    "default_plugins",
    "default_registry",
    "in_tree",
    "load_config",
    "merge_plugin_set",
    "parse_config",
]
