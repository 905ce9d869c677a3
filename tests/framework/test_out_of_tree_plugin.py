"""The plugin author's path, end to end: a plugin package of its own, installed, is found
through its ``gpusched.plugins`` entry point by ``gpusched scheduler --config`` and changes where
pods go. The README's "Writing a plugin" is this test.

``tests/data/prefer-h100-plugin`` is that package (a ``pyproject.toml`` declaring the entry
point and one module: PreferH100, a Score plugin that signs). The test builds and installs it
with pip into a folder put on the scheduler's ``PYTHONPATH``, serves a simulated cluster (the
``mixed`` fleet's DGX H100 and A40 pools), and runs the scheduler as a separate process with a
configuration enabling the plugin. The A40 nodes already run pods, so GPUFit's bin packing
prefers them; the pods land on the H100 nodes all the same, which only the plugin explains.
A configuration naming a plugin that does not exist fails with its file and line, and the
plugins that exist.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "scheduler"))

from scheduler_bed import WAIT, bound, objects_until

from gpusched.framework import (
    SUCCESS,
    CycleState,
    PluginRef,
    Plugins,
    PluginSet,
    Pod,
    Profile,
    SchedulerConfiguration,
    ScorePlugin,
    Status,
    apply_default_plugins,
    in_tree,
)
from gpusched.kube.client import Kube, resource_path
from gpusched.scheduler import Scheduler
from gpusched.sim import SimCluster
from gpusched.sim.fleet import ClusterSpec, load_cluster_spec, node_names

PACKAGE = Path(__file__).parents[1] / "data" / "prefer-h100-plugin"
PODS = resource_path("", "v1", "pods", "default")

CONFIG = """\
apiVersion: gpusched.io/v1alpha1
kind: SchedulerConfiguration
profiles:
- plugins:
    multiPoint: {enabled: [{name: PreferH100, weight: 3}]}
"""


def install(target: Path, scratch: Path) -> None:
    """``pip install`` the plugin package into ``target``, as its author's users would.

    From a copy in ``scratch``, as pip builds in the source folder. Without build isolation
    when this environment can build a wheel by itself (setuptools 70.1 or later, or the
    ``wheel`` package); else pip sets up the build requirements from the configured index, as
    it did for gpusched itself.
    """
    import setuptools

    source = scratch / PACKAGE.name
    shutil.copytree(PACKAGE, source, ignore=shutil.ignore_patterns("build", "*.egg-info"))

    major, minor = (int(x) for x in setuptools.__version__.split(".")[:2])
    can_build = (major, minor) >= (70, 1) or importlib.util.find_spec("wheel") is not None
    isolation = ["--no-build-isolation"] if can_build else []
    command = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", *isolation]
    command += ["--target", str(target), str(source)]
    subprocess.run(command, check=True, capture_output=True, timeout=120)


def fleet() -> ClusterSpec:
    """The ``mixed`` fleet's DGX H100 (tainted) and A40 pools: two nodes each, 8 GPUs each."""
    spec = load_cluster_spec("mixed")
    pools = tuple(p for p in spec.pools if p.name in ("dgx-h100", "a40"))
    return spec.model_copy(update={"pools": pools})


def pod(name: str, gpus: int, node: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "gpusched",
        "terminationGracePeriodSeconds": 0,
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        "containers": [
            {
                "name": "main",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
            }
        ],
    }
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


@pytest.fixture
async def sim(tmp_path: Path) -> AsyncIterator[SimCluster]:
    async with SimCluster(fleet(), kubelets=False, kubeconfig_path=tmp_path / "kc") as sim:
        await sim.kube.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpusched-system"}},
        )
        yield sim


async def scheduler(
    sim: SimCluster, config: Path, env: dict[str, str]
) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "gpusched", "scheduler", "--config", str(config)),
        *("--kubeconfig", str(sim.kubeconfig_path), "--metrics-port", "0"),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )


async def test_an_installed_plugin_package_changes_where_pods_go(
    sim: SimCluster, tmp_path: Path
) -> None:
    site = tmp_path / "site"
    install(site, tmp_path)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])),
    }
    config = tmp_path / "gpusched.yaml"
    config.write_text(CONFIG)
    nodes = node_names(fleet())
    h100 = [n for n in nodes if "h100" in n]
    a40 = [n for n in nodes if "a40" in n]
    for i, node in enumerate(a40):  # half full: GPUFit's bin packing now prefers them
        await sim.kube.create(PODS, pod(f"running-{i}", 4, node))
    process = await scheduler(sim, config, env)
    try:
        for i in range(4):
            await sim.kube.create(PODS, pod(f"train-{i}", 1))
        pods = await objects_until(sim.kube, PODS, lambda ps: len(bound(ps)) == 6, timeout=WAIT)
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(process.communicate(), timeout=WAIT)
    log = stderr.decode()
    assert process.returncode == 0, log
    placed = {name: p["spec"]["nodeName"] for name, p in pods.items() if name.startswith("train")}
    assert sorted(placed) == [f"train-{i}" for i in range(4)]
    assert set(placed.values()) <= set(h100), placed
    assert "SignPlugin" not in log  # it signs: the profile keeps its batched fast path


async def test_a_bad_configuration_names_the_file_the_line_and_what_exists(
    sim: SimCluster, tmp_path: Path
) -> None:
    config = tmp_path / "gpusched.yaml"
    config.write_text(CONFIG.replace("PreferH100", "PreferH200"))
    process = await scheduler(sim, config, dict(os.environ))
    _, stderr = await asyncio.wait_for(process.communicate(), timeout=WAIT)
    message = stderr.decode()
    assert process.returncode == 2, message
    assert message.startswith(
        f"gpusched: {config}:5: profiles[0].plugins.multiPoint: unknown plugin 'PreferH200'; "
        "known plugins: "
    ), message
    known = message.split("known plugins: ", 1)[1].strip().split(", ")
    assert {"DefaultBinder", "GPUFit", "PrioritySort"} <= set(known)
    assert "Traceback" not in message


class Unsigned(ScorePlugin):
    NAME = "Unsigned"

    def score(self, state: CycleState, pod: Pod, node_info: Any) -> tuple[int, Status]:
        return 0, SUCCESS


def test_a_plugin_that_does_not_sign_is_named_once_at_start(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = in_tree().merged([])
    registry.register(Unsigned)
    config = apply_default_plugins(
        SchedulerConfiguration(
            profiles=[
                Profile(
                    plugins=Plugins(multi_point=PluginSet(enabled=[PluginRef(name="Unsigned")]))
                )
            ]
        )
    )
    with caplog.at_level(logging.WARNING, logger="gpusched.scheduler"):
        Scheduler(Kube(cast(Any, None)), config, registry=registry)
    warnings = [r.getMessage() for r in caplog.records if "SignPlugin" in r.getMessage()]
    assert warnings == [
        "plugin Unsigned is not a SignPlugin: pods of profile gpusched are not batched into "
        "equivalence classes (the fast path) and each takes a full Filter and Score cycle; "
        "implement sign_pod() returning what of the pod the plugin's PreFilter, Filter and Score "
        "read (see Signing in docs/plugins.md)"
    ]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="gpusched.scheduler"):
        Scheduler(Kube(cast(Any, None)), apply_default_plugins(SchedulerConfiguration()))
    assert not [r for r in caplog.records if "SignPlugin" in r.getMessage()]  # all sign


def test_a_plugin_unsigned_by_design_says_why_instead(caplog: pytest.LogCaptureFixture) -> None:
    class Dice(Unsigned):
        NAME = "Dice"
        UNSIGNED_BY_DESIGN = "a random score per pod"

    registry = in_tree().merged([])
    registry.register(Dice)
    config = apply_default_plugins(
        SchedulerConfiguration(
            profiles=[
                Profile(plugins=Plugins(multi_point=PluginSet(enabled=[PluginRef(name="Dice")])))
            ]
        )
    )
    with caplog.at_level(logging.WARNING, logger="gpusched.scheduler"):
        Scheduler(Kube(cast(Any, None)), config, registry=registry)
    assert [r.getMessage() for r in caplog.records if "Dice" in r.getMessage()] == [
        "plugin Dice never signs pods (a random score per pod): pods of profile gpusched are "
        "not batched into equivalence classes (the fast path) and each takes a full Filter and "
        "Score cycle"
    ]


def test_the_readme_shows_what_this_test_runs() -> None:
    """The README's "Writing a plugin" shows the package's two files and this configuration,
    verbatim (each code block after its first line, which names the file)."""
    readme = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Writing a plugin", 1)[1].split("\n## ", 1)[0]
    blocks = {
        body.split("\n", 1)[0]: body.split("\n", 1)[1]
        for body in re.findall(r"```\w+\n(.*?)```", section, flags=re.DOTALL)
    }
    assert blocks["# prefer_h100.py"] == (PACKAGE / "prefer_h100.py").read_text()
    assert blocks["# pyproject.toml"] == (PACKAGE / "pyproject.toml").read_text()
    assert blocks["# gpusched.yaml"] == CONFIG
