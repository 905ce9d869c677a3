"""What is on the GPUs: the model behind ``gpusched status``, built from listed objects.

Pure code: Nodes, ``GPUNodeInventory`` objects and Pods (dicts as the API server returns them)
in, a :class:`ClusterStatus` out. Nothing here talks to a cluster, so the rules are tested over
hand-built objects and the command (:mod:`gpusched.status.command`) only lists and renders.

Where each figure comes from:

- a GPU's product, memory, health and MIG devices: the node's inventory ``spec``;
- who holds it and the VRAM *reserved*: the device record the scheduler wrote on each bound,
  unfinished pod (``gpusched.io/gpu-ids``, ``gpu-uuids``, ``reserved-vram-mib``; a whole GPU
  whose record says 0 MiB counts its whole memory); a MIG device's holder is the pod whose
  record names its ``MIG-`` UUID;
- *used* VRAM, utilisation, temperature: the inventory ``status`` (the node agent's NVML
  reading), absent where nobody measures;
- *exclusive* or *shared*: the holder's own request (:func:`read_gpu_request`): whole GPUs and
  dedicated shares hold a GPU alone, VRAM shares share it;
- pending pods: unbound, unfinished pods that ask for GPUs in any form gpusched reads (or name
  DRA ``resourceClaims``), with the ``PodScheduled=False`` condition's reason and message, the
  scheduler's own words;
- GPUs a ResourceClaim holds (DRA; whoever allocated it, pods or not): the claim's
  ``status.allocation`` results, named by the ResourceSlices' devices' ``uuid`` attribute (as
  NVIDIA's DRA driver publishes it); such a GPU is in use, ``claim`` names it.

Bound GPU pods without a device record (placed by another scheduler, or asking
``nvidia.com/gpu`` of the default one) cannot be pinned to a GPU: they are listed per node as
``otherPods``. Totals per GPU product and per pool count GPUs in use, free (no holder, healthy)
and unhealthy. The pool is the first of :data:`POOL_LABELS` a node carries.

Cost: O(nodes x GPUs + pods), one pass each; a request is read only for held and pending pods,
and with a :class:`Memo` an inventory or a pod only when it changed. Measured (CPython 3.11, the
shared 2-core dev machine, noisy): 5,000 DGX H100 nodes with 20,000 bound pods, 1.0-2.5 s to
build from scratch, 0.4 s with every object memoised; the table renders in 0.2 s.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from gpusched.annotations import AnnotationError, parse_assignment
from gpusched.gpu_requests import GPURequest, RequestError, read_gpu_request
from gpusched.gpu_requests.gpuclaim import ANNOTATION as GPUCLAIM_ANNOTATION
from gpusched.inventory import (
    RESOURCE_GPU,
    GPUNodeInventory,
    GPUNodeInventoryStatus,
    InventoryError,
    inventory_from_object,
    inventory_status_from_object,
)

__all__ = [
    "HIDDEN",
    "LABEL_POOL",
    "POOL_LABELS",
    "SCHEMA_VERSION",
    "Client",
    "ClusterStatus",
    "GPUState",
    "MIGSlot",
    "Memo",
    "Mode",
    "NodeState",
    "PendingPod",
    "Totals",
    "build_status",
    "describe_request",
]

SCHEMA_VERSION: Final = "gpusched.io/v1alpha1"
"""``apiVersion`` of the JSON/YAML document (kind ``GPUStatus``; docs/status.md)."""

LABEL_POOL: Final = "gpusched.io/pool"
"""The pool label of gpusched's simulated fleets (``gpusched.sim.fleet.LABEL_POOL``; kept
here so that the command does not import the simulation)."""

POOL_LABELS: Final = (
    LABEL_POOL,
    "karpenter.sh/nodepool",
    "cloud.google.com/gke-nodepool",
    "eks.amazonaws.com/nodegroup",
    "kubernetes.azure.com/agentpool",
)
"""Node labels that name a node's pool, first found wins: gpusched's (the simulated fleets
set it), then the cloud providers' node-pool labels."""

HIDDEN: Final = "(another namespace)"
"""A MIG device's holder outside the ``--namespace`` asked for."""

Mode = Literal["free", "exclusive", "shared", "mig"]


@dataclass(frozen=True, slots=True)
class Client:
    """A pod holding (part of) a GPU."""

    namespace: str
    name: str
    reserved_mib: int
    """VRAM its device record reserves on this GPU."""
    device: str
    """The UUID it holds (``GPU-...`` or ``MIG-...``); empty when the record has none."""
    exclusive: bool
    """Holds the GPU (or MIG device) alone."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class MIGSlot:
    """One MIG device of a GPU and its holder (``namespace/name``), if any."""

    uuid: str
    profile: str
    memory_mib: int
    holder: str | None


@dataclass(frozen=True, slots=True)
class GPUState:
    index: int
    uuid: str
    product: str
    memory_mib: int
    reserved_mib: int
    """VRAM the scheduler's device records reserve, at most ``memory_mib``."""
    used_mib: int | None
    """Measured by the node agent; None without a reading."""
    utilization_percent: int | None
    temperature_c: int | None
    mode: Mode
    healthy: bool
    health_reason: str | None
    clients: tuple[Client, ...]
    """Holders shown (in the ``--namespace`` given, if any), by namespace and name."""
    hidden_clients: int
    """Holders in other namespaces than the one asked for (counted in ``reserved_mib``)."""
    mig: tuple[MIGSlot, ...] = ()
    claim: str | None = None
    """The ResourceClaim (``namespace/name``) whose allocation holds this GPU (DRA), if any."""

    @property
    def in_use(self) -> bool:
        return bool(self.clients or self.hidden_clients or self.claim)


@dataclass(frozen=True, slots=True)
class NodeState:
    name: str
    pool: str | None
    ready: bool
    schedulable: bool
    source: str | None
    """The inventory's ``spec.source`` (``nvml`` or ``simulated``); None without one."""
    observed_time: str | None
    """When the node agent last measured the GPUs."""
    gpus: tuple[GPUState, ...]
    other_pods: tuple[str, ...] = ()
    """Bound GPU pods with no device record (see the module docstring)."""
    problem: str | None = None
    """Why the GPUs cannot be shown (no inventory, a malformed one), or a record that does not
    match them."""


@dataclass(frozen=True, slots=True)
class Totals:
    """GPUs of one product or one pool."""

    name: str
    gpus: int = 0
    in_use: int = 0
    free: int = 0
    unhealthy: int = 0
    memory_mib: int = 0
    reserved_mib: int = 0
    used_mib: int | None = None
    """Sum over the GPUs that have a reading; None when none has."""


@dataclass(frozen=True, slots=True)
class PendingPod:
    namespace: str
    name: str
    scheduler_name: str
    request: str
    """What it asks, in words: ``2 GPUs``, ``1 GPU x 10240 MiB shared``, ``1 x mig-1g.10gb``."""
    reason: str
    """``PodScheduled`` condition's reason (``Unschedulable``, ``SchedulingGated``...); empty
    when no scheduler has looked at it yet."""
    message: str
    since: str | None
    """The condition's ``lastTransitionTime``, else the pod's ``creationTimestamp``."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    nodes: tuple[NodeState, ...]
    products: tuple[Totals, ...]
    pools: tuple[Totals, ...]
    pending: tuple[PendingPod, ...]
    namespace: str | None = None
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The documented, stable JSON/YAML document (docs/status.md: ``GPUStatus``)."""
        return {
            "apiVersion": SCHEMA_VERSION,
            "kind": "GPUStatus",
            "namespace": self.namespace,
            "nodes": [_node_dict(n) for n in self.nodes],
            "totals": {
                "products": [_totals_dict(t) for t in self.products],
                "pools": [_totals_dict(t) for t in self.pools],
            },
            "pending": [
                {
                    "namespace": p.namespace,
                    "name": p.name,
                    "schedulerName": p.scheduler_name,
                    "request": p.request,
                    "reason": p.reason,
                    "message": p.message,
                    "since": p.since,
                }
                for p in self.pending
            ],
            "notes": list(self.notes),
        }


def _node_dict(n: NodeState) -> dict[str, Any]:
    return {
        "name": n.name,
        "pool": n.pool,
        "ready": n.ready,
        "schedulable": n.schedulable,
        "source": n.source,
        "observedTime": n.observed_time,
        "problem": n.problem,
        "gpus": [
            {
                "index": g.index,
                "uuid": g.uuid,
                "product": g.product,
                "memoryMiB": g.memory_mib,
                "reservedMiB": g.reserved_mib,
                "usedMiB": g.used_mib,
                "utilizationPercent": g.utilization_percent,
                "temperatureC": g.temperature_c,
                "mode": g.mode,
                "health": "Healthy" if g.healthy else "Unhealthy",
                "healthReason": g.health_reason,
                "clients": [
                    {
                        "namespace": c.namespace,
                        "name": c.name,
                        "reservedMiB": c.reserved_mib,
                        "device": c.device,
                        "exclusive": c.exclusive,
                    }
                    for c in g.clients
                ],
                "hiddenClients": g.hidden_clients,
                "claim": g.claim,
                "migDevices": [
                    {
                        "uuid": m.uuid,
                        "profile": m.profile,
                        "memoryMiB": m.memory_mib,
                        "holder": m.holder,
                    }
                    for m in g.mig
                ],
            }
            for g in n.gpus
        ],
        "otherPods": list(n.other_pods),
    }


def _totals_dict(t: Totals) -> dict[str, Any]:
    return {
        "name": t.name,
        "gpus": t.gpus,
        "inUse": t.in_use,
        "free": t.free,
        "unhealthy": t.unhealthy,
        "memoryMiB": t.memory_mib,
        "reservedMiB": t.reserved_mib,
        "usedMiB": t.used_mib,
    }


# --- reading objects ------------------------------------------------------------------------


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta: Mapping[str, Any] = obj.get("metadata") or {}
    return meta


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    labels: Mapping[str, str] = _meta(obj).get("labels") or {}
    return labels


def _ready(node: Mapping[str, Any]) -> bool:
    for cond in (node.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def _has_gpu_capacity(node: Mapping[str, Any]) -> bool:
    capacity: Mapping[str, Any] = (node.get("status") or {}).get("capacity") or {}
    for name, value in capacity.items():
        if (name == RESOURCE_GPU or name.startswith("nvidia.com/mig-")) and str(value) not in (
            "",
            "0",
        ):
            return True
    return False


def _pool(labels: Mapping[str, str], pool_labels: Sequence[str]) -> str | None:
    for key in pool_labels:
        value = labels.get(key)
        if value:
            return value
    return None


def _finished(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


_Request = GPURequest | RequestError | None


def _read_request(pod: Mapping[str, Any]) -> _Request:
    try:
        return read_gpu_request(pod)
    except RequestError as exc:
        return exc


_Parsed = tuple[GPUNodeInventory | None, GPUNodeInventoryStatus | None, tuple[str, ...]]


def _read_inventory(obj: Mapping[str, Any]) -> _Parsed:
    """Spec, telemetry and what is wrong with them."""
    problems = []
    inv = telemetry = None
    try:
        inv = inventory_from_object(obj)
    except InventoryError as exc:
        problems.append(str(exc))
    try:
        telemetry = inventory_status_from_object(obj)
    except InventoryError as exc:
        problems.append(str(exc))
    return inv, telemetry, tuple(problems)


class Memo:
    """What was parsed, kept from one :func:`build_status` to the next (``--watch``): an
    inventory or a pod is parsed again only when its resourceVersion changes. Entries the
    last build did not use are dropped by the next, so memory stays O(objects). Objects
    without a resourceVersion are parsed every time."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, str, str], Any] = {}
        self._now: dict[tuple[str, str, str], Any] = {}

    def start(self) -> None:
        """A new build begins."""
        self._last, self._now = self._now, {}

    def inventory(self, obj: Mapping[str, Any]) -> _Parsed:
        parsed: _Parsed = self._get("inventory", obj, _read_inventory)
        return parsed

    def request(self, pod: Mapping[str, Any]) -> _Request:
        request: _Request = self._get("pod", pod, _read_request)
        return request

    def _get(self, kind: str, obj: Mapping[str, Any], parse: Callable[[Any], Any]) -> Any:
        meta = _meta(obj)
        version = meta.get("resourceVersion")
        if not version:
            return parse(obj)
        key = (kind, str(meta.get("uid") or meta.get("name")), str(version))
        if key in self._now:
            return self._now[key]
        value = self._last[key] if key in self._last else parse(obj)
        self._now[key] = value
        return value


def describe_request(pod: Mapping[str, Any], memo: Memo | None = None) -> str | None:
    """What ``pod`` asks for, in a few words; None when it asks for no GPU.

    A GpuClaim pod is named by its claim (``GpuClaim NAME``, then what its own resources say,
    when they can be read without the claim: the claim itself is not listed)."""
    request = (memo or Memo()).request(pod)
    claim = (_meta(pod).get("annotations") or {}).get(GPUCLAIM_ANNOTATION)
    if claim:
        own = None if isinstance(request, RequestError) else _describe(request, pod)
        return f"GpuClaim {claim}" + (f" ({own})" if own else "")
    return _describe(request, pod)


def _describe(request: _Request, pod: Mapping[str, Any]) -> str | None:
    claims = [c.get("name", "?") for c in (pod.get("spec") or {}).get("resourceClaims") or ()]
    if isinstance(request, RequestError):
        return f"invalid: {request}"
    if request is None:
        return f"DRA claims {', '.join(claims)}" if claims else None
    gpus = f"{request.count} GPU{'s' if request.count != 1 else ''}"
    if request.mode == "mig":
        return f"{request.count} x mig-{request.mig_profile}"
    if request.mode == "shared":
        if request.vram_mib is not None:
            share = f"{request.vram_mib} MiB"
        else:
            share = f"{float(request.vram_fraction or 0):.0%}"
        return f"{gpus} x {share} {'exclusive' if request.exclusive else 'shared'}"
    return gpus


def _holds_alone(request: _Request, device: str, mib: int, memory: int) -> bool:
    if isinstance(request, GPURequest):
        return request.mode != "shared" or request.exclusive
    # No readable request: a MIG device or the whole memory is held alone.
    return device.startswith("MIG-") or mib in (0, memory)


def _pod_scheduled(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "PodScheduled":
            found: Mapping[str, Any] = cond
            return found
    return None


# --- building --------------------------------------------------------------------------------


@dataclass
class _Holding:
    clients: list[Client] = field(default_factory=list)
    hidden: int = 0
    reserved: int = 0


def build_status(
    nodes: Iterable[Mapping[str, Any]],
    inventories: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    *,
    namespace: str | None = None,
    node: str | None = None,
    pool_labels: Sequence[str] = POOL_LABELS,
    memo: Memo | None = None,
    claims: Iterable[Mapping[str, Any]] = (),
    slices: Iterable[Mapping[str, Any]] = (),
) -> ClusterStatus:
    """The status of the GPUs (module docstring).

    ``claims`` and ``slices``: the cluster's ResourceClaims and ResourceSlices (none where the
    cluster does not serve DRA): GPUs claims hold are in use.

    ``namespace``: show only that namespace's pods (holders elsewhere still count in the VRAM
    reserved, as ``hiddenClients``); ``node``: only that node (totals over it alone);
    ``memo``: what the previous build parsed (``--watch`` passes the same one each time).
    """
    memo = memo or Memo()
    memo.start()
    node_objs = {str(_meta(n).get("name")): n for n in nodes}
    inv_objs = {str(_meta(i).get("name")): i for i in inventories}
    bound: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    pending: list[PendingPod] = []
    for pod in pods:
        if _finished(pod):
            continue
        spec = pod.get("spec") or {}
        where = spec.get("nodeName")
        if where:
            bound[str(where)].append(pod)
            continue
        if _meta(pod).get("deletionTimestamp"):
            continue
        if namespace is not None and _meta(pod).get("namespace") != namespace:
            continue
        asked = describe_request(pod, memo)
        if asked is None:
            continue
        cond = _pod_scheduled(pod) or {}
        message = str(cond.get("message") or "")
        if not cond and spec.get("schedulingGates"):
            cond = {"reason": "SchedulingGated"}
            message = "waiting for scheduling gates: " + ", ".join(
                str(g.get("name")) for g in spec["schedulingGates"]
            )
        pending.append(
            PendingPod(
                namespace=str(_meta(pod).get("namespace", "")),
                name=str(_meta(pod).get("name", "")),
                scheduler_name=str(spec.get("schedulerName") or "default-scheduler"),
                request=asked,
                reason=str(cond.get("reason") or ""),
                message=message,
                since=cond.get("lastTransitionTime") or _meta(pod).get("creationTimestamp"),
            )
        )
    pending.sort(key=lambda p: (p.since or "", p.namespace, p.name))

    names = sorted(set(inv_objs) | {n for n, obj in node_objs.items() if _has_gpu_capacity(obj)})
    if node is not None:
        names = [n for n in names if n == node]
    claimed = claimed_gpus(claims, slices)
    states = [
        _node_state(
            name,
            node_objs.get(name),
            inv_objs.get(name),
            bound.get(name, []),
            namespace,
            pool_labels,
            memo,
            claimed,
        )
        for name in names
    ]
    notes = []
    if node is not None and not states:
        notes.append(f"node {node} has no GPUs gpusched knows of (no GPUNodeInventory)")
    return ClusterStatus(
        nodes=tuple(states),
        products=_totals(states, lambda n, g: g.product),
        pools=_totals(states, lambda n, g: n.pool or "-"),
        pending=tuple(pending),
        namespace=namespace,
        notes=tuple(notes),
    )


def _node_state(
    name: str,
    node_obj: Mapping[str, Any] | None,
    inv_obj: Mapping[str, Any] | None,
    pods: list[Mapping[str, Any]],
    namespace: str | None,
    pool_labels: Sequence[str],
    memo: Memo,
    claimed: Mapping[str, str],
) -> NodeState:
    labels = _labels(node_obj) if node_obj is not None else {}
    ready = node_obj is not None and _ready(node_obj)
    schedulable = node_obj is not None and not (node_obj.get("spec") or {}).get("unschedulable")
    pool = _pool(labels, pool_labels)
    problems: list[str] = []
    if node_obj is None:
        problems.append("no Node of this name (the inventory outlived it)")
    inv: GPUNodeInventory | None = None
    telemetry: GPUNodeInventoryStatus | None = None
    if inv_obj is None:
        problems.append("no GPUNodeInventory: no node agent has published this node's GPUs")
    else:
        inv, telemetry, wrong = memo.inventory(inv_obj)
        problems += wrong
    gpu_count = len(inv.gpus) if inv is not None else 0
    holdings = [_Holding() for _ in range(gpu_count)]
    mig_holder: dict[str, str] = {}
    other: list[str] = []
    for pod in sorted(pods, key=lambda p: (_meta(p).get("namespace", ""), _meta(p).get("name"))):
        meta = _meta(pod)
        key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        shown = namespace is None or meta.get("namespace") == namespace
        try:
            assignment = parse_assignment(pod)
        except AnnotationError as exc:
            problems.append(f"pod {key}: {exc}")
            continue
        if assignment is None or inv is None:
            if shown and describe_request(pod, memo) is not None:
                other.append(key)
            continue
        for k, index in enumerate(assignment.gpu_ids):
            if not 0 <= index < gpu_count:
                problems.append(f"pod {key} holds GPU {index}, which the inventory does not list")
                continue
            gpu = inv.gpus[index]
            device = assignment.gpu_uuids[k] if k < len(assignment.gpu_uuids) else ""
            mib = assignment.vram_mib[k] if k < len(assignment.vram_mib) else 0
            alone = _holds_alone(memo.request(pod), device, mib, gpu.memory_mib)
            if mib == 0 and alone and not device.startswith("MIG-"):
                mib = gpu.memory_mib
            if device.startswith("MIG-"):
                mig_holder[device] = key if shown else HIDDEN
            holding = holdings[index]
            holding.reserved += mib
            if shown:
                holding.clients.append(
                    Client(
                        namespace=str(meta.get("namespace", "")),
                        name=str(meta.get("name", "")),
                        reserved_mib=mib,
                        device=device,
                        exclusive=alone,
                    )
                )
            else:
                holding.hidden += 1
    readings = {g.index: g for g in telemetry.gpus} if telemetry is not None else {}
    gpus: list[GPUState] = []
    for gpu in inv.gpus if inv is not None else ():
        holding = holdings[gpu.index]
        reading = readings.get(gpu.index)
        mode: Mode
        claim = claimed.get(gpu.uuid)
        if gpu.mig_enabled:
            mode = "mig"
        elif any(c.exclusive for c in holding.clients) or (claim and not holding.clients):
            mode = "exclusive"
        elif holding.clients or holding.hidden:
            mode = "shared"
        else:
            mode = "free"
        gpus.append(
            GPUState(
                index=gpu.index,
                uuid=gpu.uuid,
                product=gpu.product,
                memory_mib=gpu.memory_mib,
                reserved_mib=min(holding.reserved, gpu.memory_mib),
                used_mib=reading.used_memory_mib if reading is not None else None,
                utilization_percent=reading.utilization_percent if reading is not None else None,
                temperature_c=reading.temperature_c if reading is not None else None,
                mode=mode,
                healthy=gpu.healthy,
                health_reason=gpu.health_reason,
                clients=tuple(holding.clients),
                hidden_clients=holding.hidden,
                mig=tuple(
                    MIGSlot(m.uuid, m.profile, m.memory_mib, mig_holder.get(m.uuid))
                    for m in gpu.mig_devices
                ),
                claim=claim,
            )
        )
    return NodeState(
        name=name,
        pool=pool,
        ready=ready,
        schedulable=schedulable,
        source=inv.source if inv is not None else None,
        observed_time=telemetry.observed_time if telemetry is not None else None,
        gpus=tuple(gpus),
        other_pods=tuple(other),
        problem="; ".join(problems) or None,
    )


def claimed_gpus(
    claims: Iterable[Mapping[str, Any]], slices: Iterable[Mapping[str, Any]]
) -> dict[str, str]:
    """GPU UUID -> the ResourceClaim (``namespace/name``) whose allocation holds it: each
    allocation result's ``(driver, pool, device)`` looked up in the slices, whose devices name
    their GPU by the ``uuid`` attribute (a MIG device by ``parentUUID``: its GPU is held).
    O(slice devices + allocation results)."""
    uuid_of: dict[tuple[str, str, str], str] = {}
    for obj in slices:
        spec = obj.get("spec") or {}
        driver = str(spec.get("driver") or "")
        pool = str((spec.get("pool") or {}).get("name") or "")
        for device in spec.get("devices") or ():
            attributes = device.get("attributes") or {}
            for name in ("parentUUID", "uuid"):
                value = (attributes.get(name) or {}).get("string")
                if value:
                    uuid_of[driver, pool, str(device.get("name") or "")] = str(value)
                    break
    out: dict[str, str] = {}
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        key = f"{_meta(claim).get('namespace', '')}/{_meta(claim).get('name', '')}"
        for result in (allocation.get("devices") or {}).get("results") or ():
            if result.get("adminAccess"):
                continue  # admin access is not use (upstream's rule)
            found = uuid_of.get(
                (str(result.get("driver")), str(result.get("pool")), str(result.get("device")))
            )
            if found is not None:
                out.setdefault(found, key)
    return out


def _totals(
    states: Sequence[NodeState], key: Callable[[NodeState, GPUState], str]
) -> tuple[Totals, ...]:
    acc: dict[str, dict[str, int]] = {}
    used: dict[str, int | None] = {}
    for state in states:
        for gpu in state.gpus:
            name = key(state, gpu)
            t = acc.setdefault(
                name,
                {"gpus": 0, "in_use": 0, "free": 0, "unhealthy": 0, "memory": 0, "reserved": 0},
            )
            t["gpus"] += 1
            t["in_use"] += gpu.in_use
            t["free"] += not gpu.in_use and gpu.healthy
            t["unhealthy"] += not gpu.healthy
            t["memory"] += gpu.memory_mib
            t["reserved"] += gpu.reserved_mib
            if gpu.used_mib is not None:
                used[name] = (used.get(name) or 0) + gpu.used_mib
            else:
                used.setdefault(name, None)
    return tuple(
        Totals(
            name=name,
            gpus=t["gpus"],
            in_use=t["in_use"],
            free=t["free"],
            unhealthy=t["unhealthy"],
            memory_mib=t["memory"],
            reserved_mib=t["reserved"],
            used_mib=used.get(name),
        )
        for name, t in sorted(acc.items())
    )
