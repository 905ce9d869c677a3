"""Workloads: pods arriving over time, described in YAML and replayed against any cluster.

A workload is a list of *waves*; each wave creates ``count`` pods from one template, spread
evenly at ``rate`` pods per second (0: all at once) after ``start`` seconds::

    name: dgx-mixed
    description: training jobs of 1 to 8 GPUs
    waves:
      - name: small
        count: 40
        rate: 20
        pod: {gpus: 1, duration: 120s, priority: 2}
      - name: large
        start: 5
        count: 8
        pod: {gpus: 8, duration: 300s, priority: 0, cpu: "32", memory: 256Gi}

Shipped workloads live in ``gpusched/sim/workloads/``; ``load_workload`` takes a name or a
path. ``arrivals`` yields (seconds after start, pod manifest) in time order; ``replay``
creates them on a clock, so a test can replay an hour of arrivals on a ``FakeClock``.
Durations become ``sim.gpusched.io/duration`` annotations, which the simulated kubelet honours.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpusched.annotations import PRIORITY
from gpusched.clock import Clock
from gpusched.kube.client import Kube, resource_path
from gpusched.kube.errors import APIConflict
from gpusched.sim.kubelet import DURATION_ANNOTATION, parse_duration

__all__ = [
    "PodTemplate",
    "Wave",
    "Workload",
    "WorkloadError",
    "arrivals",
    "load_workload",
    "replay",
    "shipped_workloads",
]


class WorkloadError(ValueError):
    """A workload that cannot be loaded; the message names the file and field."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PodTemplate(_Model):
    gpus: int = Field(default=1, ge=0)
    """Whole GPUs (``nvidia.com/gpu`` limit)."""
    cpu: str = "1"
    memory: str = "4Gi"
    duration: str | None = None
    """How long the pod runs once started (``90s``, ``5m``, ``1h``); absent: until deleted."""
    priority: int | None = Field(default=None, ge=0, le=4)
    """gpusched priority, 0 (highest) to 4."""
    scheduler_name: str = Field(default="gpusched", alias="schedulerName")
    namespace: str = "default"
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    node_selector: dict[str, str] = Field(default_factory=dict, alias="nodeSelector")
    tolerations: list[dict[str, Any]] = Field(default_factory=list)
    image: str = "registry.k8s.io/pause:3.10"


class Wave(_Model):
    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=40)
    count: int = Field(ge=0)
    rate: float = Field(default=0.0, ge=0)
    """Pods per second; 0 creates the whole wave at ``start``."""
    start: float = Field(default=0.0, ge=0)
    """Seconds after the workload starts."""
    pod: PodTemplate = Field(default_factory=PodTemplate)


class Workload(_Model):
    name: str
    description: str = ""
    waves: list[Wave] = Field(min_length=1)

    @property
    def pod_count(self) -> int:
        return sum(w.count for w in self.waves)


def _dir() -> Any:
    return resources.files("gpusched.sim").joinpath("workloads")


def shipped_workloads() -> list[str]:
    return sorted(p.name[:-5] for p in _dir().iterdir() if p.name.endswith(".yaml"))


def load_workload(name_or_path: str | os.PathLike[str]) -> Workload:
    text_name = os.fspath(name_or_path)
    path = Path(text_name)
    if path.suffix in (".yaml", ".yml") or os.sep in text_name or path.exists():
        source = text_name
        try:
            text = path.read_text()
        except OSError as exc:
            raise WorkloadError(f"workload {source}: cannot read it: {exc.strerror}") from None
    else:
        source = f"{text_name} (shipped)"
        entry = _dir().joinpath(f"{text_name}.yaml")
        if not entry.is_file():
            raise WorkloadError(
                f"unknown workload {text_name!r}: shipped ones are "
                f"{', '.join(shipped_workloads())}; or give a path to a YAML file"
            )
        text = entry.read_text()
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise WorkloadError(f"workload {source}: not valid YAML: {exc}") from None
    try:
        workload = Workload.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
        )
        raise WorkloadError(f"workload {source}: {problems}") from None
    for wave in workload.waves:
        if wave.pod.duration is not None:
            try:
                parse_duration(wave.pod.duration)
            except ValueError as exc:
                raise WorkloadError(
                    f"workload {source}: waves.{wave.name}.pod.duration: {exc}"
                ) from None
    return workload


def _manifest(workload: Workload, wave: Wave, index: int) -> dict[str, Any]:
    t = wave.pod
    annotations = dict(t.annotations)
    if t.duration is not None:
        annotations[DURATION_ANNOTATION] = t.duration
    if t.priority is not None:
        annotations[PRIORITY] = str(t.priority)
    limits: dict[str, str] = {"cpu": t.cpu, "memory": t.memory}
    if t.gpus:
        limits["nvidia.com/gpu"] = str(t.gpus)
    spec: dict[str, Any] = {
        "schedulerName": t.scheduler_name,
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "main", "image": t.image, "resources": {"limits": limits}}],
    }
    if t.node_selector:
        spec["nodeSelector"] = dict(t.node_selector)
    if t.tolerations:
        spec["tolerations"] = list(t.tolerations)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{workload.name}-{wave.name}-{index:05d}",
            "namespace": t.namespace,
            "labels": {
                "gpusched.io/workload": workload.name,
                "gpusched.io/wave": wave.name,
                **t.labels,
            },
            "annotations": annotations,
        },
        "spec": spec,
    }


def arrivals(workload: Workload) -> Iterator[tuple[float, dict[str, Any]]]:
    """(seconds after start, pod manifest), in arrival order."""
    timeline: list[tuple[float, int, dict[str, Any]]] = []
    seq = 0
    for wave in workload.waves:
        for i in range(wave.count):
            at = wave.start + (i / wave.rate if wave.rate else 0.0)
            timeline.append((at, seq, _manifest(workload, wave, i)))
            seq += 1
    timeline.sort(key=lambda item: (item[0], item[1]))
    for at, _, pod in timeline:
        yield at, pod


async def replay(kube: Kube, workload: Workload, clock: Clock) -> list[dict[str, Any]]:
    """Create the workload's pods at their arrival times; returns what the server stored."""
    start = clock.monotonic()
    created: list[dict[str, Any]] = []
    namespaces: set[str] = set()
    for at, pod in arrivals(workload):
        ns = pod["metadata"]["namespace"]
        if ns not in namespaces:
            namespaces.add(ns)
            if ns != "default":
                await _ensure_namespace(kube, ns)
        await clock.sleep_until(start + at)
        created.append(await kube.create(resource_path("", "v1", "pods", ns), pod))
    return created


async def _ensure_namespace(kube: Kube, name: str) -> None:
    with contextlib.suppress(APIConflict):  # it exists already
        await kube.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
        )
