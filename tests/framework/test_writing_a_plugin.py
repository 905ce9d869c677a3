"""The README's "Writing a plugin", run: a new plugin is one subclass and one line of config.

The README's plugin (PreferH100, read from its package in ``tests/data``) and a second one
with a PreFilter, a Filter and args are each dropped into a plugins package (as a new file in
``plugins/`` would be), discovered by ``in_tree``, enabled by one line of configuration, and
run through a scheduling cycle.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gpusched.framework import (
    SUCCESS,
    BindPlugin,
    ConfigError,
    CycleState,
    Framework,
    PluginRef,
    PluginRegistry,
    Plugins,
    PluginSet,
    QueueSortPlugin,
    Status,
    build_frameworks,
    in_tree,
    parse_config,
)

PREFER_H100 = (
    Path(__file__).parents[1] / "data" / "prefer-h100-plugin" / "prefer_h100.py"
).read_text()
"""The README's plugin, as its out-of-tree package ships it (test_out_of_tree_plugin.py)."""

MIN_GPU_MEMORY = '''\
"""MinGPUMemory: only nodes whose GPUs have at least the memory a pod asks for."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from gpusched.framework import (
    SUCCESS,
    CycleState,
    FilterPlugin,
    Handle,
    PluginArgs,
    Pod,
    PreFilterPlugin,
    PreFilterResult,
    StateKey,
    Status,
)

if TYPE_CHECKING:
    from gpusched.cache import NodeInfo

ANNOTATION = "gpusched.io/min-gpu-memory-mib"
MEMORY_LABEL = "nvidia.com/gpu.memory"  # MiB, as GPU feature discovery labels nodes
TOO_SMALL = "GPU memory below the pod's minimum"


class MinGPUMemoryArgs(PluginArgs):
    default_mib: int = Field(default=0, ge=0)
    """Minimum for pods without the annotation, in MiB. Default 0 (no minimum)."""


_MINIMUM = StateKey[int]("MinGPUMemory")


class MinGPUMemory(PreFilterPlugin, FilterPlugin):
    NAME = "MinGPUMemory"
    ARGS = MinGPUMemoryArgs
    _TOO_SMALL = Status.unresolvable(TOO_SMALL, plugin=NAME)  # built once: no allocation per node

    def __init__(self, default_mib: int) -> None:
        self.default_mib = default_mib

    @classmethod
    def new(cls, args: MinGPUMemoryArgs, handle: Handle) -> MinGPUMemory:
        return cls(args.default_mib)

    def pre_filter(self, state: CycleState, pod: Pod) -> tuple[PreFilterResult | None, Status]:
        annotations = pod["metadata"].get("annotations") or {}
        value = annotations.get(ANNOTATION, self.default_mib)
        try:
            minimum = int(value)
        except ValueError:
            return None, Status.unresolvable(f"{ANNOTATION} must be a number of MiB: {value!r}")
        if minimum <= 0:
            return None, Status.skip()  # nothing to check: Filter is not called this cycle
        state.write(_MINIMUM, minimum)
        return None, SUCCESS

    def filter(self, state: CycleState, pod: Pod, node_info: NodeInfo) -> Status:
        memory = int(node_info.labels.get(MEMORY_LABEL, "0"))
        return SUCCESS if memory >= state.read(_MINIMUM) else self._TOO_SMALL
'''

CONFIG = """\
apiVersion: gpusched.io/v1alpha1
kind: SchedulerConfiguration
profiles:
- plugins:
    multiPoint: {enabled: [{name: PreferH100, weight: 2}, {name: MinGPUMemory}]}
  pluginConfig:
  - {name: MinGPUMemory, args: {defaultMib: 20000}}
"""


# -- stand-ins for the defaults the built-in plugins will provide --------------------------


class PrioritySort(QueueSortPlugin):
    NAME = "PrioritySort"

    def sort_key(self, info: Any) -> tuple[Any, ...]:
        return (-(info.pod["spec"].get("priority") or 0), info.timestamp)


class DefaultBinder(BindPlugin):
    NAME = "DefaultBinder"

    async def bind(self, state: CycleState, pod: Any, node_name: str) -> Status:
        return SUCCESS


DEFAULTS = Plugins(
    multi_point=PluginSet(enabled=[PluginRef(name="PrioritySort"), PluginRef(name="DefaultBinder")])
)


@dataclass
class Node:
    name: str
    labels: dict[str, str] = field(default_factory=dict)


def gpu_node(name: str, product: str, memory_mib: int) -> Node:
    return Node(name, {"nvidia.com/gpu.product": product, "nvidia.com/gpu.memory": str(memory_mib)})


NODES = [
    gpu_node("a100-40", "NVIDIA-A100-SXM4-40GB", 40960),
    gpu_node("h100-80", "NVIDIA-H100-80GB-HBM3", 81559),
    gpu_node("t4", "Tesla-T4", 15360),
    gpu_node("a100-80", "NVIDIA-A100-SXM4-80GB", 81920),
]


@pytest.fixture
def plugins_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A plugins package holding the README's two plugin files, one file per plugin."""
    name = "readme_plugins"
    package = tmp_path / name
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "prefer_h100.py").write_text(PREFER_H100)
    (package / "min_gpu_memory.py").write_text(MIN_GPU_MEMORY)
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    yield name
    for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[module]


def framework(package: str, config_text: str = CONFIG) -> Framework:
    registry = in_tree(package).merged(in_tree_defaults().values())
    config = parse_config(config_text, "gpusched.yaml", default_plugins=DEFAULTS)
    return build_frameworks(config, registry, source="gpusched.yaml")["gpusched"]


def in_tree_defaults() -> PluginRegistry:
    registry = PluginRegistry()
    registry.register(PrioritySort)
    registry.register(DefaultBinder)
    return registry


def schedule(fw: Framework, pod: dict[str, Any]) -> tuple[str | None, Status]:
    """A scheduling cycle's framework calls, as the cycle module will make them."""
    state = CycleState()
    result, status = fw.run_pre_filter(state, pod)
    if status.code:
        return None, status
    candidates = [n for n in NODES if result is None or n.name in (result.node_names or ())]
    feasible = [n for n in candidates if fw.run_filter(state, pod, n) is SUCCESS]
    if not feasible:
        return None, Status.unschedulable("no node fits")
    assert fw.run_pre_score(state, pod, feasible) is SUCCESS
    scores, status = fw.run_score(state, pod, feasible)
    assert status is SUCCESS
    best = max(scores, key=lambda s: s.score)
    return best.name, SUCCESS


def pod(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "train", "namespace": "ml", "uid": "u1", "annotations": annotations},
        "spec": {"schedulerName": "gpusched"},
    }


def test_the_plugins_are_found_and_enabled_by_one_line(plugins_package: str) -> None:
    fw = framework(plugins_package)
    assert fw.list_plugins() == {
        "preEnqueue": [],
        "queueSort": ["PrioritySort"],
        "preFilter": ["MinGPUMemory"],
        "filter": ["MinGPUMemory"],
        "postFilter": [],
        "preScore": [],
        "score": ["PreferH100"],
        "reserve": [],
        "permit": [],
        "preBind": [],
        "bind": ["DefaultBinder"],
        "postBind": [],
    }
    assert fw.score_weights == {"PreferH100": 2}


@pytest.mark.parametrize(
    ("annotations", "chosen"),
    [
        ({}, "h100-80"),  # default 20000 MiB: the T4 is out, the H100 scores highest
        ({"gpusched.io/min-gpu-memory-mib": "90000"}, None),  # nobody has 90 GB
        ({"gpusched.io/min-gpu-memory-mib": "0"}, "h100-80"),  # Skip: no memory check at all
    ],
)
def test_the_plugins_schedule(
    plugins_package: str, annotations: dict[str, str], chosen: str | None
) -> None:
    node, _ = schedule(framework(plugins_package), pod(annotations))
    assert node == chosen


def test_the_plugins_reject_with_their_names(plugins_package: str) -> None:
    fw = framework(plugins_package)
    state = CycleState()
    fw.run_pre_filter(state, pod())
    status = fw.run_filter(state, pod(), NODES[2])
    assert (
        str(status)
        == "UnschedulableAndUnresolvable (MinGPUMemory): GPU memory below the pod's minimum"
    )
    _, status = fw.run_pre_filter(CycleState(), pod({"gpusched.io/min-gpu-memory-mib": "lots"}))
    assert (status.plugin, status.message()) == (
        "MinGPUMemory",
        "gpusched.io/min-gpu-memory-mib must be a number of MiB: 'lots'",
    )


def test_a_typo_in_the_one_line_says_what_exists(plugins_package: str) -> None:
    with pytest.raises(ConfigError) as info:
        framework(plugins_package, CONFIG.replace("PreferH100", "PreferH200", 1))
    assert str(info.value) == (
        "gpusched.yaml:5: profiles[0].plugins.multiPoint: unknown plugin 'PreferH200'; known "
        "plugins: DefaultBinder, MinGPUMemory, PreferH100, PrioritySort"
    )
