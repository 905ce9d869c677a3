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
      - name: distributed
        count: 8
        gang: 4                # two gangs of 4 pods, each a scheduler-plugins PodGroup
        pod: {gpus: 8, duration: 600s}

Shipped workloads live in ``gpusched/sim/workloads/``; ``load_workload`` takes a name or a
path. ``arrivals`` yields (seconds after start, pod manifest) in time order; ``replay``
creates them on a clock, so a test can replay an hour of arrivals on a ``FakeClock``.
Durations become ``sim.gpusched.io/duration`` annotations, which the simulated kubelet honours.

A pod template asks for GPUs in one of the four shapes of README's pod API table, and
``_manifest`` writes exactly what a user would::

    {gpus: 2}                                  nvidia.com/gpu: 2 (whole GPUs; the default, 1)
    {vram: 20Gi, shared: 2}                    gpusched.io/gpu: 2 + gpusched.io/vram: 20Gi
    {vram: 40Gi, exclusive: true}              the above + annotation gpusched.io/exclusive
    {mig: 2g.20gb, migFallback: [1g.10gb]}     nvidia.com/mig-2g.20gb: 1 + gpusched.io/mig-fallback

Or through a claim object, which ``replay`` creates first (labelled with workload and wave)::

    {gpus: 2, claim: gpuclaim}   a GpuClaim per pod, named as the pod, count 2, that the pod's
                                 gpu.scheduling/claim names; the pod asks nvidia.com/gpu: 2 too
                                 (vram: a Shared claim; mig: its migProfile; contiguous,
                                 topologyMode, minBandwidthGBps: its topology)
    {gpus: 2, claim: dra}        a ResourceClaimTemplate per wave (exactly 2 of DeviceClass
                                 gpu.nvidia.com) named in the pod's spec.resourceClaims; no
                                 device resource: the claim is the whole ask

Why the template and not raw limits: a typo in a limit would create pods the scheduler
rejects at run time, far from the file; the template is checked when the workload loads (one
shape per pod, VRAM a quantity, profiles spelled as the device plugin spells them), with
the same parsers the scheduler uses, so a workload that loads asks for what it means.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any, Final, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gpusched.annotations import PRIORITY
from gpusched.clock import Clock
from gpusched.gpu_requests import gpuclaim
from gpusched.gpu_requests._common import parse_mib_quantity, parse_profile
from gpusched.gpu_requests.native import (
    EXCLUSIVE,
    MIG_FALLBACK,
    RESOURCE_SHARED_GPU,
    RESOURCE_VRAM,
)
from gpusched.inventory import mig_resource_name
from gpusched.kube.client import Kube, resource_path
from gpusched.kube.errors import APIConflict
from gpusched.sim.kubelet import DURATION_ANNOTATION, parse_duration
from gpusched.sim.resource_slices import DEVICE_CLASSES

POD_GROUP_GROUP: Final = "scheduling.x-k8s.io"
"""scheduler-plugins' PodGroup API group (its CRD ships in ``deploy/crds/``)."""
POD_GROUP_LABEL: Final = f"{POD_GROUP_GROUP}/pod-group"
"""The pod label naming its scheduler-plugins PodGroup."""
CLAIM_KINDS: Final = ("gpuclaim", "dra")
"""``claim:`` values: a GpuClaim per pod, or a ResourceClaimTemplate per wave (DRA)."""
DRA_DEVICE_CLASS: Final = str(DEVICE_CLASSES[0]["metadata"]["name"])
"""The DeviceClass of whole GPUs that NVIDIA's DRA driver installs (``gpu.nvidia.com``)."""
DRA_CLAIM_NAME: Final = "gpus"
"""The entry of a DRA pod's ``spec.resourceClaims`` (and its container's ``resources.claims``)."""
WORKLOAD_LABEL: Final = "gpusched.io/workload"
WAVE_LABEL: Final = "gpusched.io/wave"

__all__ = [
    "CLAIM_KINDS",
    "DRA_CLAIM_NAME",
    "DRA_DEVICE_CLASS",
    "POD_GROUP_GROUP",
    "POD_GROUP_LABEL",
    "WAVE_LABEL",
    "WORKLOAD_LABEL",
    "PodTemplate",
    "Wave",
    "Workload",
    "WorkloadError",
    "arrivals",
    "claim_objects",
    "load_workload",
    "object_path",
    "pod_groups",
    "replay",
    "shipped_workloads",
]


class WorkloadError(ValueError):
    """A workload that cannot be loaded; the message names the file and field."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PodTemplate(_Model):
    gpus: int | None = Field(default=None, ge=0)
    """Whole GPUs (``nvidia.com/gpu`` limit); 1 when the pod asks for no other shape."""
    vram: str | None = None
    """VRAM on each shared GPU (``gpusched.io/vram``, e.g. ``20Gi``): a shared-GPU pod."""
    shared: int | None = Field(default=None, ge=1)
    """Shared GPUs (``gpusched.io/gpu``); 1 when ``vram`` is given alone."""
    exclusive: bool = False
    """``gpusched.io/exclusive: "true"``: a shared-API pod on an idle GPU nobody joins."""
    mig: str | None = None
    """One MIG device of this profile (``nvidia.com/mig-<profile>: 1``)."""
    mig_fallback: list[str] = Field(default_factory=list, alias="migFallback")
    """Profiles to accept instead, in order (``gpusched.io/mig-fallback``)."""
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
    claim: Literal["gpuclaim", "dra"] | None = None
    """Take the GPUs through a claim object: ``gpuclaim`` (a GpuClaim per pod) or ``dra`` (a
    ResourceClaimTemplate per wave); absent: the pod's resources alone."""
    contiguous: bool = False
    """GpuClaim ``spec.devices.policy: contiguous`` (the GPUs joined over NVLinks)."""
    topology_mode: Literal["Required", "Preferred"] | None = Field(
        default=None, alias="topologyMode"
    )
    """GpuClaim ``spec.topology.mode``."""
    min_bandwidth_gbps: float | None = Field(default=None, gt=0, alias="minBandwidthGBps")
    """GpuClaim ``spec.topology.minBandwidthGBps``: GB/s between the slowest pair."""

    @field_validator("claim", mode="before")
    @classmethod
    def _check_claim(cls, value: Any) -> Any:
        if value is not None and value not in CLAIM_KINDS:
            raise ValueError(
                f"unknown claim kind {value!r}: use gpuclaim (a GpuClaim, gpu.scheduling/v1, "
                "per pod) or dra (a ResourceClaimTemplate, resource.k8s.io/v1, per wave)"
            )
        return value

    @field_validator("vram")
    @classmethod
    def _check_vram(cls, value: str | None) -> str | None:
        if value is not None:
            parse_mib_quantity("vram", value)  # raises with the fix in the message
        return value

    @field_validator("mig")
    @classmethod
    def _check_mig(cls, value: str | None) -> str | None:
        return None if value is None else parse_profile("mig", value)

    @field_validator("mig_fallback")
    @classmethod
    def _check_fallbacks(cls, value: list[str]) -> list[str]:
        profiles = [parse_profile("migFallback", p) for p in value]
        if len(set(profiles)) != len(profiles):
            raise ValueError("migFallback lists a profile twice; list each profile once")
        return profiles

    @model_validator(mode="after")
    def _one_shape(self) -> PodTemplate:
        shapes = [
            name
            for name, given in (
                ("gpus", self.gpus is not None and self.gpus > 0),
                ("vram/shared", self.vram is not None or self.shared is not None),
                ("mig", self.mig is not None),
            )
            if given
        ]
        if len(shapes) > 1:
            raise ValueError(
                f"the pod asks for {' and '.join(shapes)}: a pod asks for one kind of GPU; "
                "split it into two waves"
            )
        if self.shared is not None and self.vram is None:
            raise ValueError("shared GPUs need vram (VRAM per GPU, e.g. vram: 20Gi); add it")
        if self.exclusive and self.vram is None:
            raise ValueError(
                "exclusive: true applies to shared-API pods: add vram (e.g. vram: 40Gi), or "
                "drop it, as whole gpus are exclusive already"
            )
        if self.mig_fallback and self.mig is None:
            raise ValueError("migFallback needs mig (the preferred profile, e.g. mig: 2g.20gb)")
        if self.mig is not None and self.mig in self.mig_fallback:
            raise ValueError(f"migFallback lists {self.mig}, the preferred profile; remove it")
        self._check_claim_shape()
        return self

    def _check_claim_shape(self) -> None:
        topology = [
            name
            for name, given in (
                ("contiguous", self.contiguous),
                ("topologyMode", self.topology_mode is not None),
                ("minBandwidthGBps", self.min_bandwidth_gbps is not None),
            )
            if given
        ]
        if topology and self.claim != "gpuclaim":
            fix = (
                "a ResourceClaimTemplate pod has none: drop them"
                if self.claim == "dra"
                else "add claim: gpuclaim, or say the same with annotations (docs/gpu_fit.md)"
            )
            raise ValueError(f"{', '.join(topology)}: fields of a GpuClaim; {fix}")
        if self.claim is None:
            return
        if self.gpus == 0:
            raise ValueError(
                f"claim: {self.claim} with gpus: 0: a claim asks for 1 GPU or more; give "
                "gpus: N, or drop claim for a pod without GPUs"
            )
        if self.claim == "gpuclaim":
            if self.exclusive:
                raise ValueError(
                    "claim: gpuclaim with exclusive: true: a GpuClaim with vram is Shared; for "
                    "GPUs of its own give gpus: N (an Exclusive claim) instead"
                )
            if self.mig_fallback:
                raise ValueError(
                    "claim: gpuclaim with migFallback: a claim names one migProfile; drop "
                    "migFallback"
                )
        elif self.vram is not None or self.mig is not None:
            raise ValueError(
                f"claim: dra asks for whole GPUs (DeviceClass {DRA_DEVICE_CLASS}): give "
                "gpus: N, or use claim: gpuclaim for shared GPUs or MIG devices"
            )

    @property
    def claim_count(self) -> int:
        """Devices the claim asks for: GPUs (shared GPUs with ``vram``; 1 MIG device)."""
        if self.mig is not None:
            return 1
        if self.vram is not None:
            return self.shared or 1
        return 1 if self.gpus is None else self.gpus

    @property
    def kind(self) -> str:
        """``whole``, ``shared``, ``exclusive``, ``mig`` or ``none`` (a CPU-only pod)."""
        if self.mig is not None:
            return "mig"
        if self.vram is not None:
            return "exclusive" if self.exclusive else "shared"
        return "none" if self.gpus == 0 else "whole"


class Wave(_Model):
    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=40)
    count: int = Field(ge=0)
    rate: float = Field(default=0.0, ge=0)
    """Pods per second; 0 creates the whole wave at ``start``."""
    start: float = Field(default=0.0, ge=0)
    """Seconds after the workload starts."""
    pod: PodTemplate = Field(default_factory=PodTemplate)
    gang: int | None = Field(default=None, ge=1)
    """Pods per gang: each run of ``gang`` consecutive pods of the wave is one scheduler-plugins
    ``PodGroup`` (``minMember: gang``), created before its first member; ``count`` must be a
    multiple of it."""

    @model_validator(mode="after")
    def _whole_gangs(self) -> Wave:
        if self.gang is not None and self.count % self.gang:
            raise ValueError(
                f"count {self.count} is not a multiple of gang {self.gang}: every gang is whole"
            )
        return self

    def group_of(self, workload: str, index: int) -> str | None:
        """The name of the PodGroup of the wave's pod ``index``, if the wave is in gangs."""
        return None if self.gang is None else f"{workload}-{self.name}-g{index // self.gang:04d}"


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


def _device_resources(t: PodTemplate, limits: dict[str, str], annotations: dict[str, str]) -> None:
    """Add the template's device resource (and its annotations) to the pod's."""
    if t.mig is not None:
        limits[mig_resource_name(t.mig)] = "1"
        if t.mig_fallback:
            annotations[MIG_FALLBACK] = ",".join(t.mig_fallback)
    elif t.vram is not None:
        limits[RESOURCE_SHARED_GPU] = str(t.shared or 1)
        limits[RESOURCE_VRAM] = t.vram
        if t.exclusive:
            annotations[EXCLUSIVE] = "true"
    elif t.gpus != 0:
        limits["nvidia.com/gpu"] = str(1 if t.gpus is None else t.gpus)


def _manifest(workload: Workload, wave: Wave, index: int) -> dict[str, Any]:
    t = wave.pod
    annotations = dict(t.annotations)
    if t.duration is not None:
        annotations[DURATION_ANNOTATION] = t.duration
    if t.priority is not None:
        annotations[PRIORITY] = str(t.priority)
    name = f"{workload.name}-{wave.name}-{index:05d}"
    limits: dict[str, str] = {"cpu": t.cpu, "memory": t.memory}
    if t.claim == "gpuclaim":
        annotations[gpuclaim.ANNOTATION] = name  # its GpuClaim is named as the pod
    if t.claim != "dra":  # a DRA claim is the whole ask: no device resource
        _device_resources(t, limits, annotations)
    spec: dict[str, Any] = {
        "schedulerName": t.scheduler_name,
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "main", "image": t.image, "resources": {"limits": limits}}],
    }
    if t.claim == "dra":
        template = _template_name(workload, wave)
        spec["resourceClaims"] = [{"name": DRA_CLAIM_NAME, "resourceClaimTemplateName": template}]
        spec["containers"][0]["resources"]["claims"] = [{"name": DRA_CLAIM_NAME}]
    if t.node_selector:
        spec["nodeSelector"] = dict(t.node_selector)
    if t.tolerations:
        spec["tolerations"] = list(t.tolerations)
    group = wave.group_of(workload.name, index)
    labels = _labels(workload, wave)
    if group is not None:
        labels[POD_GROUP_LABEL] = group
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": t.namespace,
            "labels": {**labels, **t.labels},
            "annotations": annotations,
        },
        "spec": spec,
    }


def _labels(workload: Workload, wave: Wave) -> dict[str, str]:
    return {WORKLOAD_LABEL: workload.name, WAVE_LABEL: wave.name}


def _template_name(workload: Workload, wave: Wave) -> str:
    return f"{workload.name}-{wave.name}"


def _gpu_claim(workload: Workload, wave: Wave, index: int) -> dict[str, Any]:
    """The GpuClaim of the wave's pod ``index`` (named as the pod)."""
    t = wave.pod
    devices: dict[str, Any] = {"count": t.claim_count}
    if t.vram is not None:
        devices.update(exclusivity="Shared", vramPerDevice=t.vram)
    else:
        devices["exclusivity"] = "Exclusive"
    if t.mig is not None:
        devices["migProfile"] = t.mig
    if t.contiguous:
        devices["policy"] = "contiguous"
    spec: dict[str, Any] = {"devices": devices}
    topology: dict[str, Any] = {}
    if t.topology_mode is not None:
        topology["mode"] = t.topology_mode
    if t.min_bandwidth_gbps is not None:
        topology["minBandwidthGBps"] = t.min_bandwidth_gbps
    if topology:
        spec["topology"] = topology
    return {
        "apiVersion": f"{gpuclaim.GROUP}/{gpuclaim.VERSION}",
        "kind": gpuclaim.KIND,
        "metadata": {
            "name": f"{workload.name}-{wave.name}-{index:05d}",
            "namespace": t.namespace,
            "labels": _labels(workload, wave),
        },
        "spec": spec,
    }


def _claim_template(workload: Workload, wave: Wave) -> dict[str, Any]:
    """The wave's ResourceClaimTemplate: ``exactly`` ``claim_count`` GPUs of the driver's
    whole-GPU DeviceClass; the claims made from it carry the workload's labels."""
    request = {
        "name": "gpu",
        "exactly": {"deviceClassName": DRA_DEVICE_CLASS, "count": wave.pod.claim_count},
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": _template_name(workload, wave),
            "namespace": wave.pod.namespace,
            "labels": _labels(workload, wave),
        },
        "spec": {
            "metadata": {"labels": _labels(workload, wave)},
            "spec": {"devices": {"requests": [request]}},
        },
    }


def claim_objects(workload: Workload) -> dict[str, list[dict[str, Any]]]:
    """Pod name -> the claim objects to create before it: a GpuClaim pod's own claim; a DRA
    wave's ResourceClaimTemplate before its first pod."""
    out: dict[str, list[dict[str, Any]]] = {}
    for wave in workload.waves:
        if wave.pod.claim is None:
            continue
        for index in range(wave.count):
            pod = f"{workload.name}-{wave.name}-{index:05d}"
            if wave.pod.claim == "gpuclaim":
                out[pod] = [_gpu_claim(workload, wave, index)]
            elif index == 0:
                out[pod] = [_claim_template(workload, wave)]
    return out


_PLURALS: Final = {
    gpuclaim.KIND: gpuclaim.PLURAL,
    "ResourceClaimTemplate": "resourceclaimtemplates",
    "PodGroup": "podgroups",
}
"""Kinds :func:`object_path` knows: those :func:`replay` creates besides pods."""


def object_path(obj: dict[str, Any], name: str | None = None) -> str:
    """The collection path of a claim object or PodGroup (with ``name``: the object's)."""
    group, _, version = str(obj["apiVersion"]).rpartition("/")
    return resource_path(group, version, _PLURALS[obj["kind"]], obj["metadata"]["namespace"], name)


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


def pod_groups(workload: Workload) -> dict[str, dict[str, Any]]:
    """The scheduler-plugins PodGroups of the workload's gangs, by name."""
    out: dict[str, dict[str, Any]] = {}
    for wave in workload.waves:
        if wave.gang is None:
            continue
        for index in range(0, wave.count, wave.gang):
            name = wave.group_of(workload.name, index)
            assert name is not None
            out[name] = {
                "apiVersion": f"{POD_GROUP_GROUP}/v1alpha1",
                "kind": "PodGroup",
                "metadata": {
                    "name": name,
                    "namespace": wave.pod.namespace,
                    "labels": {"gpusched.io/workload": workload.name},
                },
                "spec": {"minMember": wave.gang},
            }
    return out


async def replay(kube: Kube, workload: Workload, clock: Clock) -> list[dict[str, Any]]:
    """Create the workload's pods at their arrival times (a gang's PodGroup before its first
    member, a pod's claim objects before it: :func:`claim_objects`); returns the pods the
    server stored."""
    start = clock.monotonic()
    created: list[dict[str, Any]] = []
    namespaces: set[str] = set()
    groups = pod_groups(workload)
    claims = claim_objects(workload)
    for at, pod in arrivals(workload):
        ns = pod["metadata"]["namespace"]
        if ns not in namespaces:
            namespaces.add(ns)
            if ns != "default":
                await _ensure_namespace(kube, ns)
        await clock.sleep_until(start + at)
        group = groups.pop(pod["metadata"]["labels"].get(POD_GROUP_LABEL, ""), None)
        if group is not None:
            with contextlib.suppress(APIConflict):  # left by an earlier run
                await kube.create(object_path(group), group)
        for obj in claims.pop(pod["metadata"]["name"], ()):
            with contextlib.suppress(APIConflict):  # left by an earlier run
                await kube.create(object_path(obj), obj)
        created.append(await kube.create(resource_path("", "v1", "pods", ns), pod))
    return created


async def _ensure_namespace(kube: Kube, name: str) -> None:
    with contextlib.suppress(APIConflict):  # it exists already
        await kube.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
        )
