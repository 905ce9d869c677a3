"""Builders for the plugin tests: fluent pods and nodes, a cache, and one scheduling cycle.

``make_pod("p").gpus(2).priority(1).toleration("nvidia.com/gpu", operator="Exists").obj()``
and ``make_node("n").gpus(8, topology="nvswitch").taint("dedicated", "ml")`` read as what the
test means. Nodes are built by the simulated fleet (:func:`gpusched.sim.fleet.build_fleet`), Node
object and ``GPUNodeInventory`` alike, and fed to a real :class:`SchedulerCache`; plugins get node
infos from its :class:`Snapshot`, exactly what the scheduler hands them.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpusched.annotations import PRIORITY, Assignment, assignment_annotations
from gpusched.cache import NodeInfo, SchedulerCache, Snapshot
from gpusched.clock import FakeClock
from gpusched.framework import SUCCESS, CycleState, Framework, NodeScore, Status
from gpusched.inventory import RESOURCE_GPU, GPUNodeInventory
from gpusched.sim.fleet import ClusterSpec, build_fleet, load_cluster_spec

__all__ = [
    "Cluster",
    "CycleResult",
    "NodeBuilder",
    "PodBuilder",
    "expr",
    "field_expr",
    "make_node",
    "make_pod",
    "run_cycle",
    "term",
]

V100 = "Tesla V100-SXM2-32GB"
V100_MIB = 32510
H100 = "NVIDIA H100 80GB HBM3"
H100_MIB = 81559


# -- pods --------------------------------------------------------------------------------------


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    """A ``matchExpressions`` entry."""
    out: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        out["values"] = list(values)
    return out


def field_expr(operator: str, *values: str, key: str = "metadata.name") -> dict[str, Any]:
    """A ``matchFields`` entry (on ``metadata.name`` unless told)."""
    return {"key": key, "operator": operator, "values": list(values)}


def term(*expressions: dict[str, Any], fields: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """A ``NodeSelectorTerm``."""
    out: dict[str, Any] = {}
    if expressions:
        out["matchExpressions"] = list(expressions)
    if fields:
        out["matchFields"] = list(fields)
    return out


class PodBuilder:
    """A v1 Pod built step by step; :meth:`obj` gives a fresh dict."""

    def __init__(self, name: str, *, namespace: str = "default", uid: str | None = None) -> None:
        self._pod: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": uid or f"uid-{name}"},
            "spec": {
                "schedulerName": "gpusched",
                "containers": [{"name": "main", "image": "pause", "resources": {}}],
            },
            "status": {"phase": "Pending"},
        }

    @property
    def uid(self) -> str:
        return str(self._pod["metadata"]["uid"])

    @property
    def _spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = self._pod["spec"]
        return spec

    def request(self, name: str, quantity: str | int) -> PodBuilder:
        resources = self._spec["containers"][0]["resources"]
        resources.setdefault("requests", {})[name] = str(quantity)
        return self

    def cpu(self, quantity: str) -> PodBuilder:
        return self.request("cpu", quantity)

    def memory(self, quantity: str) -> PodBuilder:
        return self.request("memory", quantity)

    def gpus(self, count: int) -> PodBuilder:
        """``nvidia.com/gpu`` in requests and limits, as the API server stores it."""
        self.request(RESOURCE_GPU, count)
        resources = self._spec["containers"][0]["resources"]
        resources.setdefault("limits", {})[RESOURCE_GPU] = str(count)
        return self

    def limit(self, name: str, quantity: str | int) -> PodBuilder:
        """``name`` in limits and requests, as the API server stores an extended resource."""
        self.request(name, quantity)
        resources = self._spec["containers"][0]["resources"]
        resources.setdefault("limits", {})[name] = str(quantity)
        return self

    def shared(self, count: int, vram: str) -> PodBuilder:
        """``count`` shared GPUs (``gpusched.io/gpu``) with ``vram`` on each
        (``gpusched.io/vram``), in limits (and requests)."""
        return self.limit("gpusched.io/gpu", count).limit("gpusched.io/vram", vram)

    def exclusive(self) -> PodBuilder:
        """``gpusched.io/exclusive: "true"``: an idle GPU that nobody joins."""
        return self.annotate("gpusched.io/exclusive", "true")

    def swap(self, allowed: bool = True) -> PodBuilder:
        """``gpusched.io/swap-from-vram``."""
        return self.annotate("gpusched.io/swap-from-vram", "true" if allowed else "false")

    def mig_fallback(self, *profiles: str) -> PodBuilder:
        """``gpusched.io/mig-fallback``: profiles accepted instead, in order."""
        return self.annotate("gpusched.io/mig-fallback", ",".join(profiles))

    def mig(self, profile: str, count: int = 1) -> PodBuilder:
        return self.request(f"nvidia.com/mig-{profile.replace('+', '.')}", count)

    def container(self, requests: Mapping[str, str] | None = None) -> PodBuilder:
        """Another app container (with these requests, or none)."""
        index = len(self._spec["containers"])
        resources = {"requests": dict(requests)} if requests else {}
        self._spec["containers"].append(
            {"name": f"c{index}", "image": "pause", "resources": resources}
        )
        return self

    def annotate(self, key: str, value: str) -> PodBuilder:
        self._pod["metadata"].setdefault("annotations", {})[key] = value
        return self

    def priority(self, value: int | str) -> PodBuilder:
        """``gpusched.io/priority``."""
        return self.annotate(PRIORITY, str(value))

    def pod_priority(self, value: int) -> PodBuilder:
        """``spec.priority`` (from a PriorityClass)."""
        self._spec["priority"] = value
        return self

    def toleration(
        self, key: str = "", value: str = "", *, operator: str = "", effect: str = ""
    ) -> PodBuilder:
        toleration = {
            k: v
            for k, v in (("key", key), ("operator", operator), ("value", value), ("effect", effect))
            if v
        }
        self._spec.setdefault("tolerations", []).append(toleration)
        return self

    def node_selector(self, **labels: str) -> PodBuilder:
        self._spec.setdefault("nodeSelector", {}).update(labels)
        return self

    def selector(self, labels: Mapping[str, str]) -> PodBuilder:
        """``nodeSelector`` with keys that are not identifiers."""
        self._spec.setdefault("nodeSelector", {}).update(labels)
        return self

    def _node_affinity(self) -> dict[str, Any]:
        affinity: dict[str, Any] = self._spec.setdefault("affinity", {}).setdefault(
            "nodeAffinity", {}
        )
        return affinity

    def required(self, *terms: dict[str, Any]) -> PodBuilder:
        """``requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms``."""
        required = self._node_affinity().setdefault(
            "requiredDuringSchedulingIgnoredDuringExecution", {"nodeSelectorTerms": []}
        )
        required["nodeSelectorTerms"].extend(terms)
        return self

    def preferred(self, weight: int, preference: dict[str, Any]) -> PodBuilder:
        """One ``preferredDuringSchedulingIgnoredDuringExecution`` term."""
        self._node_affinity().setdefault(
            "preferredDuringSchedulingIgnoredDuringExecution", []
        ).append({"weight": weight, "preference": preference})
        return self

    def node_name(self, node: str) -> PodBuilder:
        """``spec.nodeName`` (preset, or bound)."""
        self._spec["nodeName"] = node
        return self

    on = node_name

    def assigned(
        self, gpu_ids: Sequence[int], uuids: Sequence[str] = (), vram_mib: Sequence[int] = ()
    ) -> PodBuilder:
        """Assignment annotations, as a Binding from gpusched leaves them."""
        assignment = Assignment(tuple(gpu_ids), tuple(uuids), tuple(vram_mib), "")
        for key, value in assignment_annotations(assignment).items():
            self.annotate(key, value)
        return self

    def phase(self, phase: str) -> PodBuilder:
        self._pod["status"]["phase"] = phase
        return self

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self._pod)


def make_pod(name: str = "p", *, namespace: str = "default", uid: str | None = None) -> PodBuilder:
    return PodBuilder(name, namespace=namespace, uid=uid)


# -- nodes -------------------------------------------------------------------------------------

_NOT_DNS = re.compile(r"[^a-z0-9-]+")


class NodeBuilder:
    """A Node and its ``GPUNodeInventory``, built by the simulated fleet, then adjusted."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._cpu = 32
        self._memory = "128Gi"
        self._pods = 110
        self._gpu: dict[str, Any] | None = None
        self._anonymous_gpus: int | None = None
        self._labels: dict[str, str] = {}
        self._taints: list[dict[str, str]] = []
        self._unschedulable = False
        self._allocatable: dict[str, str] = {}

    def cpu(self, count: int) -> NodeBuilder:
        self._cpu = count
        return self

    def memory(self, quantity: str) -> NodeBuilder:
        self._memory = quantity
        return self

    def pods(self, count: int) -> NodeBuilder:
        self._pods = count
        return self

    def gpus(
        self,
        count: int,
        *,
        topology: str | None = "nvswitch",
        product: str = H100,
        memory_mib: int = H100_MIB,
        mig: Sequence[str] | None = None,
    ) -> NodeBuilder:
        """``count`` GPUs with a fleet topology preset (``nvswitch``,
        ``dgx1-hybrid-cube-mesh``, ``bridged-pairs``, ``pcie``), or ``topology=None`` for
        anonymous GPUs: ``nvidia.com/gpu`` advertised, no inventory."""
        if topology is None:
            self._anonymous_gpus = count
            self._gpu = None
            return self
        self._gpu = {
            "product": product,
            "memoryMiB": memory_mib,
            "count": count,
            "topology": topology,
        }
        if mig is not None:
            self._gpu["mig"] = list(mig)
        return self

    def dgx1(self) -> NodeBuilder:
        """A DGX-1 with V100s in the hybrid cube-mesh (as the ``dgx-v100`` spec)."""
        return (
            self.cpu(80)
            .memory("512Gi")
            .gpus(8, topology="dgx1-hybrid-cube-mesh", product=V100, memory_mib=V100_MIB)
        )

    def label(self, key: str, value: str) -> NodeBuilder:
        self._labels[key] = value
        return self

    def taint(self, key: str, value: str = "", effect: str = "NoSchedule") -> NodeBuilder:
        taint = {"key": key, "effect": effect}
        if value:
            taint["value"] = value
        self._taints.append(taint)
        return self

    def unschedulable(self) -> NodeBuilder:
        self._unschedulable = True
        return self

    def allocatable(self, name: str, quantity: str) -> NodeBuilder:
        """Override one ``status.allocatable`` entry (a malformed one, say)."""
        self._allocatable[name] = quantity
        return self

    def build(self) -> tuple[dict[str, Any], GPUNodeInventory | None]:
        pool = _NOT_DNS.sub("-", self.name.lower()).strip("-")[:50] or "node"
        pool_spec: dict[str, Any] = {
            "name": pool,
            "count": 1,
            "cpu": self._cpu,
            "memory": self._memory,
            "pods": self._pods,
        }
        if self._gpu is not None:
            pool_spec["gpu"] = self._gpu
        spec = ClusterSpec.model_validate({"name": "test", "pools": [pool_spec]})
        sim = build_fleet(spec)[0]
        node = copy.deepcopy(sim.node)
        node["metadata"]["name"] = self.name
        node["metadata"]["labels"]["kubernetes.io/hostname"] = self.name
        node["metadata"]["labels"].update(self._labels)
        status = node["status"]
        if self._anonymous_gpus is not None:
            for key in ("capacity", "allocatable"):
                status[key][RESOURCE_GPU] = str(self._anonymous_gpus)
        status["allocatable"].update(self._allocatable)
        if self._taints:
            node["spec"]["taints"] = copy.deepcopy(self._taints)
        if self._unschedulable:
            node["spec"]["unschedulable"] = True
        inventory = sim.inventory
        if inventory is not None:
            inventory = inventory.model_copy(update={"node_name": self.name})
        return node, inventory


def make_node(name: str = "n") -> NodeBuilder:
    return NodeBuilder(name)


# -- the cache ---------------------------------------------------------------------------------


class Cluster:
    """A :class:`SchedulerCache` with nodes and bound pods; plugins read its snapshots."""

    def __init__(self, *nodes: NodeBuilder) -> None:
        self.cache = SchedulerCache(FakeClock())
        self._snapshot = Snapshot()
        for node in nodes:
            self.add(node)

    @classmethod
    def fleet(cls, name: str, nodes: int | None = None) -> Cluster:
        """A shipped cluster spec's fleet (``"dgx-v100"``), as ``gpusched sim`` builds it."""
        cluster = cls()
        for sim in build_fleet(load_cluster_spec(name, nodes=nodes)):
            cluster.cache.add_node(sim.node)
            if sim.inventory is not None:
                cluster.cache.set_inventory(sim.name, sim.inventory)
        return cluster

    def add(self, node: NodeBuilder) -> Cluster:
        obj, inventory = node.build()
        if inventory is not None:
            self.cache.set_inventory(node.name, inventory)
        self.cache.add_node(obj)
        return self

    def bind(self, *pods: PodBuilder | dict[str, Any]) -> Cluster:
        """Pods bound (each must name its node), as the informers report them."""
        for pod in pods:
            self.cache.add_pod(pod.obj() if isinstance(pod, PodBuilder) else pod)
        return self

    def snapshot(self) -> Snapshot:
        self.cache.update_snapshot(self._snapshot)
        return self._snapshot

    def nodes(self) -> list[NodeInfo]:
        return list(self.snapshot().node_infos())

    def node(self, name: str) -> NodeInfo:
        info = self.snapshot().get(name)
        assert info is not None, name
        return info


# -- one cycle ---------------------------------------------------------------------------------


@dataclass
class CycleResult:
    """What one scheduling cycle's framework calls gave."""

    state: CycleState
    status: Status
    """PreFilter's status, or SUCCESS."""
    statuses: dict[str, Status] = field(default_factory=dict)
    """Filter's status per node (every node considered)."""
    scores: list[NodeScore] = field(default_factory=list)
    """Weighted total per feasible node."""

    @property
    def feasible(self) -> list[str]:
        return [name for name, s in self.statuses.items() if s is SUCCESS]

    @property
    def best(self) -> str | None:
        """The highest-scoring node (the first in node order on a tie), as the cycle picks."""
        if not self.scores:
            return None
        top = max(s.score for s in self.scores)
        return next(s.name for s in self.scores if s.score == top)


def run_cycle(fw: Framework, pod: dict[str, Any], nodes: Iterable[NodeInfo]) -> CycleResult:
    """PreFilter, Filter on every node (or those PreFilter kept), PreScore and Score."""
    state = CycleState()
    result, status = fw.run_pre_filter(state, pod)
    out = CycleResult(state, status)
    if status.code:
        return out
    allowed = result.node_names if result is not None else None
    feasible: list[NodeInfo] = []
    for info in nodes:
        if allowed is not None and info.name not in allowed:
            continue
        out.statuses[info.name] = s = fw.run_filter(state, pod, info)
        if s is SUCCESS:
            feasible.append(info)
    if not feasible:
        return out
    status = fw.run_pre_score(state, pod, feasible)
    assert status.is_success, status
    out.scores, status = fw.run_score(state, pod, feasible)
    assert status.is_success, status
    return out
