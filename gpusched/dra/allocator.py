"""Structured DRA allocation on one node: which devices a ResourceClaim's requests get.

The pure core the DynamicResources plugin will call from Filter, modelled on upstream's
``k8s.io/dynamic-resource-allocation/structured`` allocator: plain dicts in the shape of the
``resource.k8s.io/v1`` objects in (the node's ResourceSlices, the DeviceClasses, the claims),
each claim's ``status.allocation`` out, or why not. No I/O, no asyncio, never awaits.

- **Devices**: those of the slices published for the node (``nodeName``), for all nodes
  (``allNodes``) or for nodes their ``nodeSelector`` matches (the node's ``node_labels``,
  and ``metadata.name`` for ``matchFields``), from the newest generation of each pool. As
  upstream, an incomplete pool (fewer slices than ``resourceSliceCount``) still serves
  ``ExactCount`` requests while an ``All`` request fails until it is complete, and an invalid
  pool (a device name in two slices) serves nothing. Devices already allocated
  (``allocated``: a set of ``(driver, pool, device)`` or a predicate, the seam for
  gpusched's ledger of devices held by non-DRA pods; :func:`allocated_devices` reads it from
  claims) are skipped, except by admin access: an ``adminAccess`` request may take devices
  in use, and its results count as nobody's use. Counters (partitionable devices): a device
  that ``consumesCounters`` of its pool's ``sharedCounters`` is allocated only while what it
  consumes is left, after the devices already allocated and those this call picks (admin
  access consumes nothing); a counter set the pool lacks makes its devices unallocatable.
  Per-device node selection (``perDeviceNodeSelection``) is not read: such slices are left
  out, as by an upstream scheduler without that feature.
- **Requests**: ``exactly`` (``ExactCount`` with ``count``, default 1, or ``All``: every
  matching device, all of them free, at least one) or ``firstAvailable`` (the first
  subrequest that can be satisfied, result request ``"req/sub"``). A device matches when
  every selector of its class and of the request is true (:mod:`.cel`); a selector that
  cannot compile or fails at runtime fails the allocation with its message, as upstream.
  ``adminAccess`` is refused unless ``allow_admin_access`` (upstream: the namespace label).
- **Constraints**: ``matchAttribute``, over the named requests (or all): every device has the
  attribute, with one value. At most 32 devices per claim.
- **Result**: per claim, ``devices.results`` (request, driver, pool, device, ``adminAccess``),
  ``devices.config`` as upstream builds it (the classes' configs, then the claim's that name
  no request or one that was allocated; a list naming every request is dropped: empty means
  all), and a ``nodeSelector``: on ``metadata.name`` when a node-local device was used, else
  the requirements of the node-selector slices used (one term), else none.
- **Topology**: among the sets that satisfy a request, the best by gpusched's NVLink ranking
  (:mod:`gpusched.topology.selection`: most NVLinks, then PCIe proximity, then least cut from
  the free devices left), with each device mapped to its GPU through its ``uuid`` (GPUs) or
  ``parentUUID`` (MIG devices) attribute and the node's ``GPUNodeInventory`` (NVIDIA's
  driver publishes these; an ``index`` / ``parentIndex``, as older versions published, is
  read first). Without an inventory all sets rank equal (first in device order).
  The preference is per request, in request order: an earlier request's best set is not
  traded for a later one's.

**Search and cost.** Depth-first over the requests of all claims, backtracking, as upstream.
Per request, the candidate sets of ``count`` among ``m`` matching free devices: without
topology, in device order, lazily; with it, all ``C(m, count)`` ranked (memoised per free
set) while at most ``max_candidates``, past that the greedy topology set then the first
``max_candidates`` in device order (so a satisfying set may be missed there). Each request
with topology tries at most ``max_candidates`` sets; the whole search at most ``max_steps``
(then it stops with a reason): O(min(max_steps, Π candidates) x count²), after at most
O(devices x selectors) CEL evaluations (about 0.5 ms each on cel-python), each once per
call, or once per device version with a shared ``match_cache``.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import (
    Callable,
    Collection,
    Iterable,
    Iterator,
    Mapping,
    MutableMapping,
    Sequence,
)
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Final, TypeAlias

from gpusched.inventory import GPUNodeInventory
from gpusched.node_selector import NodeSelector
from gpusched.quantity import parse_quantity
from gpusched.topology import GPUTopology, link_score_of
from gpusched.topology.selection import greedy_gpu_set

from .cel import compile_selector, device_activation

__all__ = [
    "DEFAULT_MAX_CANDIDATES",
    "DEFAULT_MAX_STEPS",
    "MAX_RESULTS",
    "Allocated",
    "Allocation",
    "DeviceID",
    "MatchCache",
    "Unallocatable",
    "allocate",
    "allocated_devices",
]

DeviceID: TypeAlias = tuple[str, str, str]
"""``(driver, pool, device)``: a device's name in an allocation result."""
_Counter: TypeAlias = tuple[str, str, str, str]
"""``(driver, pool, counter set, counter)``."""
Allocated: TypeAlias = Collection[DeviceID] | Callable[[DeviceID], bool]
"""Devices that are taken: a collection, or a predicate (gpusched's ledger)."""
MatchCache: TypeAlias = MutableMapping[tuple[str, DeviceID, str], bool]
"""``(expression, device, slice version)`` -> whether the selector matched: pass one to
:func:`allocate` to share CEL verdicts across nodes, claims and cycles (errors are not
cached; the caller bounds its size)."""

MAX_RESULTS: Final = 32
"""``resourceapi.AllocationResultsMaxSize``: devices per claim."""
DEFAULT_MAX_CANDIDATES: Final = 5000
DEFAULT_MAX_STEPS: Final = 100_000


@dataclass(frozen=True, slots=True)
class Allocation:
    """Success: one ``status.allocation`` per claim, in the claims' order."""

    allocations: tuple[dict[str, Any], ...]


@dataclass(frozen=True, slots=True)
class Unallocatable:
    """Failure: ``reason`` for the claim's status or the node's rejection; ``error`` when the
    claim or a class is broken (bad CEL, unknown class: no node can help), else the node
    lacks free devices."""

    reason: str
    error: bool = False


@dataclass(slots=True)
class _Device:
    id: DeviceID
    position: int
    raw: Mapping[str, Any]
    """The slice's device object; its CEL activation is built on first use."""
    version: str
    """What changes when the device may have: the slice's resourceVersion (else the pool's
    generation); part of the shared cache's key."""
    attributes: dict[str, Any]
    """Qualified attribute name -> its one value (for matchAttribute)."""
    node_local: bool
    node_selector: Mapping[str, Any] | None = None
    """The slice's ``nodeSelector`` (a slice for a set of nodes)."""
    consumes: tuple[tuple[_Counter, Fraction], ...] = ()
    """What it takes of its pool's shared counters."""
    gpu: int | None = None


@dataclass(slots=True)
class _Alternative:
    """One way to satisfy a request: ``exactly``, or one ``firstAvailable`` subrequest."""

    name: str
    """The result's request name (``req`` or ``req/sub``)."""
    class_name: str
    selectors: list[str]
    all_mode: bool
    count: int
    admin: bool


@dataclass(slots=True)
class _Request:
    claim: int
    name: str
    alternatives: list[_Alternative]


@dataclass(slots=True)
class _Constraint:
    requests: frozenset[str] | None
    attribute: str
    value: Any = None
    bound: int = 0
    """How many devices bind ``value`` now (0: unbound)."""


class _Failure(Exception):
    """A broken claim or class; carries its message out of the search."""


@dataclass(slots=True)
class _Search:
    devices: list[_Device]
    taken: Callable[[DeviceID], bool]
    scores: list[list[int]]
    max_candidates: int
    max_steps: int
    flat: bool
    """No pair scores at all (no inventory, or no device mapped to a GPU)."""
    steps: int = 0
    used: set[int] = field(default_factory=set)
    left: dict[_Counter, Fraction] = field(default_factory=dict)
    """Shared counters not consumed yet (by allocated devices, then by this search's)."""
    shared: MatchCache = field(default_factory=dict)
    """CEL verdicts: the caller's :data:`MatchCache`, else one for this call."""
    activations: dict[int, dict[str, Any] | str] = field(default_factory=dict)
    selections: dict[int, list[_Device]] = field(default_factory=dict)
    memo: dict[tuple[tuple[int, ...], int], list[tuple[int, ...]]] = field(default_factory=dict)

    def selected(self, alt: _Alternative) -> list[_Device]:
        """The devices every selector of ``alt`` accepts (cached per alternative)."""
        found = self.selections.get(id(alt))
        if found is None:
            found = [
                device
                for device in self.devices
                if all(self._match(expr, device, alt) for expr in alt.selectors)
            ]
            self.selections[id(alt)] = found
        return found

    def _match(self, expression: str, device: _Device, alt: _Alternative) -> bool:
        shared = (expression, device.id, device.version)
        if shared in self.shared:
            return self.shared[shared]
        where = f"request {alt.name}: device {'/'.join(device.id)}"
        activation = self.activations.get(device.position)
        if activation is None:
            activation = device_activation(device.id[0], device.raw)
            self.activations[device.position] = activation
        if isinstance(activation, str):
            raise _Failure(f"{where}: {activation}")
        found = compile_selector(expression).matches(activation)
        if found.error is not None:
            raise _Failure(f"{where}: selector {expression!r}: {found.error}")
        self.shared[shared] = found.matched
        return found.matched

    def rank(self, ids: Sequence[int], free: Sequence[int]) -> tuple[int, int, int]:
        """gpusched's set order (topology.selection.best_gpu_set): links, score, -cut."""
        scores = self.scores
        score = links = 0
        for a, b in itertools.combinations(ids, 2):
            score += scores[a][b]
            links += link_score_of(scores[a][b])
        inside = set(ids)
        cut = sum(scores[a][b] for a in ids for b in free if b not in inside)
        return (links, score, -cut)

    def candidates(self, free: list[int], count: int) -> Iterator[tuple[int, ...]]:
        """The sets of ``count`` of ``free`` to try, best first (module docstring)."""
        if count > len(free):
            return
        if self.flat:  # no topology: every set ranks equal, device order, lazily
            yield from itertools.combinations(free, count)
        elif math.comb(len(free), count) <= self.max_candidates:
            yield from self._ranked(free, count)
        else:
            first = greedy_gpu_set(self.scores, free, count)[0]
            yield first
            combos = itertools.combinations(free, count)
            for ids in itertools.islice(combos, self.max_candidates - 1):
                if ids != first:
                    yield ids

    def _ranked(self, free: list[int], count: int) -> list[tuple[int, ...]]:
        """Every set of ``count`` of ``free``, best first, ties in device order; memoised by
        ``(free, count)``. O(C(free, count) x count²) uncached."""
        key = (tuple(free), count)
        found = self.memo.get(key)
        if found is None:
            scores = self.scores
            degree = {g: sum(scores[g][h] for h in free if h != g) for g in free}

            def order(ids: tuple[int, ...]) -> tuple[int, int, int]:
                score = links = 0
                for a, b in itertools.combinations(ids, 2):
                    score += scores[a][b]
                    links += link_score_of(scores[a][b])
                return (links, score, 2 * score - sum(degree[g] for g in ids))  # -cut

            found = sorted(itertools.combinations(free, count), key=order, reverse=True)
            self.memo[key] = found
        return found


def _taken_of(allocated: Allocated) -> Callable[[DeviceID], bool]:
    if callable(allocated):
        return allocated
    held = frozenset(allocated)
    return held.__contains__


def _qualify(name: str, driver: str) -> str:
    return name if "/" in name else f"{driver}/{name}"


def _scalar(value: Mapping[str, Any]) -> Any:
    for kind in ("int", "bool", "string", "version"):
        if kind in value:
            return (kind, value[kind])
    return None


def _uuids(inventory: GPUNodeInventory) -> dict[str, int]:
    """GPU and MIG UUIDs -> GPU index."""
    by_uuid = {gpu.uuid: gpu.index for gpu in inventory.gpus}
    by_uuid.update({mig.uuid: gpu.index for gpu in inventory.gpus for mig in gpu.mig_devices})
    return by_uuid


def _gpu_index(
    attributes: Mapping[str, Any], gpu_count: int, by_uuid: Mapping[str, int]
) -> int | None:
    """The GPU a device is or lives on (module docstring, "Topology"); ``by_uuid`` from
    :func:`_uuids`."""

    def attr(name: str) -> Any:
        for qualified, value in attributes.items():
            if qualified.rsplit("/", 1)[-1] == name:
                return value[1] if value is not None else None
        return None

    if attr("type") == "mig":
        index, uuid = attr("parentIndex"), attr("parentUUID") or attr("uuid")
    else:
        index, uuid = attr("index"), attr("uuid")
    if isinstance(index, int) and 0 <= index < gpu_count:
        return index
    return by_uuid.get(uuid) if isinstance(uuid, str) else None


def _slice_applies(spec: Mapping[str, Any], node_name: str, node_labels: Mapping[str, str]) -> bool:
    """Upstream's ``nodeMatches``: the slice's devices are reachable from the node."""
    if spec.get("nodeName"):
        return bool(spec["nodeName"] == node_name)
    if spec.get("allNodes"):
        return True
    selector = spec.get("nodeSelector")
    if selector is not None:
        return NodeSelector.compile(selector).matches(node_labels, node_name)
    return False  # perDeviceNodeSelection, or a future field: not read


@dataclass(slots=True)
class _Pools:
    """Why pools are left out of, or only partly in, the devices (module docstring), and
    their shared counters."""

    incomplete: list[str] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)
    counters: dict[_Counter, Fraction] = field(default_factory=dict)


def _amount(value: Any) -> Fraction:
    try:
        return parse_quantity(str((value or {}).get("value", "0")))
    except ValueError:
        return Fraction(0)


def _pool_devices(
    slices: Sequence[Mapping[str, Any]],
    node_name: str,
    node_labels: Mapping[str, str],
    inventory: GPUNodeInventory | None,
    pools: _Pools,
) -> list[_Device]:
    """The devices of the valid pools the node reaches, in pool then slice order; incomplete
    and invalid pools are noted in ``pools``. O(devices), plus one node-selector match per
    slice that has one."""
    newest: dict[tuple[str, str], tuple[int, list[Mapping[str, Any]]]] = {}
    for item in slices:
        spec = item.get("spec", {})
        if not _slice_applies(spec, node_name, node_labels):
            continue
        pool = spec.get("pool", {})
        key = (spec.get("driver", ""), pool.get("name", ""))
        generation = int(pool.get("generation", 0))
        seen = newest.get(key)
        if seen is None or generation > seen[0]:
            newest[key] = (generation, [item])
        elif generation == seen[0]:
            seen[1].append(item)
    devices: list[_Device] = []
    by_uuid = {} if inventory is None else _uuids(inventory)
    for (driver, pool), (_, items) in sorted(newest.items()):
        if len(items) != int(items[0]["spec"]["pool"].get("resourceSliceCount", 1)):
            # upstream still allocates ExactCount requests from it
            pools.incomplete.append(f"resource pool {driver}/{pool} is currently being updated")
        names = Counter(
            raw.get("name") for item in items for raw in item["spec"].get("devices") or ()
        )
        if twice := sorted(str(n) for n, times in names.items() if times > 1):
            # Upstream marks such a pool invalid: nothing in it is allocated, and a request
            # for all devices cannot be met.
            pools.invalid.append(
                f"resource pool {driver}/{pool} is invalid: device {twice[0]} is in two slices"
            )
            continue
        for item in items:
            for counter_set in item["spec"].get("sharedCounters") or ():
                for name, value in (counter_set.get("counters") or {}).items():
                    pools.counters[(driver, pool, counter_set.get("name", ""), name)] = _amount(
                        value
                    )
        for item in items:
            spec = item["spec"]
            for raw in spec.get("devices") or ():
                body = raw.get("basic", raw)
                attributes = {
                    _qualify(name, driver): _scalar(value)
                    for name, value in (body.get("attributes") or {}).items()
                }
                devices.append(
                    _Device(
                        id=(driver, pool, raw["name"]),
                        position=len(devices),
                        raw=raw,
                        version=str(
                            item.get("metadata", {}).get("resourceVersion")
                            or f"generation {spec['pool'].get('generation', 0)}"
                        ),
                        attributes=attributes,
                        node_local=bool(spec.get("nodeName")),
                        node_selector=spec.get("nodeSelector"),
                        consumes=tuple(
                            ((driver, pool, use.get("counterSet", ""), name), _amount(value))
                            for use in body.get("consumesCounters") or ()
                            for name, value in (use.get("counters") or {}).items()
                        ),
                        gpu=None
                        if inventory is None
                        else _gpu_index(attributes, len(inventory.gpus), by_uuid),
                    )
                )
    return devices


def _score_matrix(
    devices: Sequence[_Device], inventory: GPUNodeInventory | None
) -> list[list[int]]:
    count = len(devices)
    if inventory is None or not inventory.gpus:
        return [[0] * count for _ in range(count)]
    topology = GPUTopology.build(len(inventory.gpus), inventory.links, 1)
    gpus = [d.gpu for d in devices]
    return [
        [topology.scores[a][b] if a is not None and b is not None and a != b else 0 for b in gpus]
        for a in gpus
    ]


def _alternative(name: str, body: Mapping[str, Any], classes: Mapping[str, Any]) -> _Alternative:
    class_name = body.get("deviceClassName", "")
    device_class = classes.get(class_name)
    if device_class is None:
        raise _Failure(f"request {name}: device class {class_name} does not exist")
    selectors = [
        s["cel"]["expression"]
        for s in (*device_class.get("spec", {}).get("selectors", ()), *body.get("selectors", ()))
        if "cel" in s
    ]
    mode = body.get("allocationMode", "ExactCount")
    if mode not in ("ExactCount", "All"):
        raise _Failure(f"request {name}: unsupported allocationMode {mode}")
    return _Alternative(
        name=name,
        class_name=class_name,
        selectors=selectors,
        all_mode=mode == "All",
        count=int(body.get("count", 1)),
        admin=bool(body.get("adminAccess", False)),
    )


def _requests(
    claims: Sequence[Mapping[str, Any]], classes: Mapping[str, Any], allow_admin: bool
) -> list[_Request]:
    out = []
    for index, claim in enumerate(claims):
        for request in claim.get("spec", {}).get("devices", {}).get("requests", ()):
            name = request["name"]
            if "firstAvailable" in request:
                alternatives = [
                    _alternative(f"{name}/{sub['name']}", sub, classes)
                    for sub in request["firstAvailable"]
                ]
            else:
                alternatives = [_alternative(name, request.get("exactly", request), classes)]
            for alt in alternatives:
                if alt.admin and not allow_admin:
                    raise _Failure(
                        f"request {alt.name}: admin access to devices is not allowed here"
                    )
            out.append(_Request(index, name, alternatives))
    return out


def allocate(
    claims: Sequence[Mapping[str, Any]],
    *,
    node_name: str,
    slices: Sequence[Mapping[str, Any]],
    classes: Mapping[str, Mapping[str, Any]],
    allocated: Allocated = frozenset(),
    inventory: GPUNodeInventory | None = None,
    allow_admin_access: bool = False,
    max_candidates: int = DEFAULT_MAX_CANDIDATES,
    max_steps: int = DEFAULT_MAX_STEPS,
    match_cache: MatchCache | None = None,
    node_labels: Mapping[str, str] | None = None,
) -> Allocation | Unallocatable:
    """Allocate every claim in ``claims`` on ``node_name`` together (module docstring).

    ``classes``: DeviceClass objects by name; ``node_labels``: the node's labels, for slices
    with a ``nodeSelector``. Never raises for bad input it can name.
    """
    try:
        requests = _requests(claims, classes, allow_admin_access)
        pools = _Pools()
        devices = _pool_devices(slices, node_name, node_labels or {}, inventory, pools)
    except _Failure as exc:
        return Unallocatable(str(exc), error=True)
    for request in requests:
        if any(alt.all_mode for alt in request.alternatives):
            for why in (*pools.incomplete, *pools.invalid):
                return Unallocatable(f"request {request.name}: asks for all devices, but {why}")
    scores = _score_matrix(devices, inventory)
    search = _Search(
        devices=devices,
        taken=_taken_of(allocated),
        scores=scores,
        flat=not any(any(row) for row in scores),
        shared={} if match_cache is None else match_cache,
        max_candidates=max(1, max_candidates),
        max_steps=max_steps,
    )
    search.left = dict(pools.counters)
    for device in devices:
        if device.consumes and search.taken(device.id):
            _consume(search.left, device, 1)
    constraints = [
        [
            _Constraint(
                frozenset(c["requests"]) if c.get("requests") else None, c["matchAttribute"]
            )
            for c in claim.get("spec", {}).get("devices", {}).get("constraints", ())
            if c.get("matchAttribute")
        ]
        for claim in claims
    ]
    chosen: list[tuple[_Request, _Alternative, tuple[int, ...]]] = []
    # As upstream, an invalid pool is named only when the allocation fails.
    invalid = f"; {pools.invalid[0]}" if pools.invalid else ""
    try:
        short = _hopeless(search, requests)
        if short is not None:
            return Unallocatable(short + invalid)
        done = _place(search, requests, 0, constraints, chosen)
    except _Failure as exc:
        return Unallocatable(str(exc), error=True)
    if not done:
        if search.steps >= search.max_steps:
            return Unallocatable(f"gave up after trying {search.max_steps} device sets")
        return Unallocatable(
            "cannot allocate all claims: not enough matching free devices" + invalid
        )
    return Allocation(
        tuple(
            _result(claim, i, chosen, devices, classes, node_name) for i, claim in enumerate(claims)
        )
    )


def _hopeless(search: _Search, requests: list[_Request]) -> str | None:
    """A request that no alternative can meet even alone (too few matching devices, free
    or not): the reason, before the search wastes its budget. O(requests x devices)."""
    for request in requests:
        if not any(
            len(search.selected(alt)) >= (1 if alt.all_mode else alt.count)
            for alt in request.alternatives
        ):
            return f"cannot allocate all claims: too few devices match request {request.name}"
    return None


def _applies(constraint: _Constraint, request: _Request, alt: _Alternative) -> bool:
    names = constraint.requests
    return names is None or request.name in names or alt.name in names


def _place(
    search: _Search,
    requests: list[_Request],
    at: int,
    constraints: list[list[_Constraint]],
    chosen: list[tuple[_Request, _Alternative, tuple[int, ...]]],
) -> bool:
    if at == len(requests):
        return True
    request = requests[at]
    for alt in request.alternatives:
        applicable = [c for c in constraints[request.claim] if _applies(c, request, alt)]
        matching = search.selected(alt)
        free = [
            d.position
            for d in matching
            if alt.admin or (d.position not in search.used and not search.taken(d.id))
        ]
        if alt.all_mode:
            options: Iterator[tuple[int, ...]] = iter(
                [tuple(free)] if matching and len(free) == len(matching) else []
            )
        else:
            options = _grouped(search, free, alt.count, applicable)
        for ids in options:
            search.steps += 1
            if search.steps > search.max_steps:
                return False
            held = sum(len(c[2]) for c in chosen if c[0].claim == request.claim)
            if held + len(ids) > MAX_RESULTS or not _bind(search, ids, applicable):
                continue
            if not alt.admin:
                if not _fits(search, ids):
                    _unbind(ids, applicable)
                    continue
                search.used.update(ids)
                for i in ids:
                    _consume(search.left, search.devices[i], 1)
            chosen.append((request, alt, ids))
            if _place(search, requests, at + 1, constraints, chosen):
                return True
            chosen.pop()
            if not alt.admin:
                search.used.difference_update(ids)
                for i in ids:
                    _consume(search.left, search.devices[i], -1)
            _unbind(ids, applicable)
    return False


def _consume(left: dict[_Counter, Fraction], device: _Device, sign: int) -> None:
    for key, amount in device.consumes:
        if key in left:
            left[key] -= sign * amount


def _fits(search: _Search, ids: tuple[int, ...]) -> bool:
    """Whether the shared counters left cover what ``ids`` consume (a counter their pool
    does not declare covers nothing). O(counters consumed)."""
    need: dict[_Counter, Fraction] = {}
    for i in ids:
        for key, amount in search.devices[i].consumes:
            need[key] = need.get(key, Fraction(0)) + amount
    return all(key in search.left and search.left[key] >= amount for key, amount in need.items())


def _grouped(
    search: _Search, free: list[int], count: int, applicable: list[_Constraint]
) -> Iterator[tuple[int, ...]]:
    """Candidate sets; with constraints, within each group of devices sharing their values
    (the group holding the best-ranked set first)."""
    if not applicable:
        yield from search.candidates(free, count)
        return
    groups: dict[tuple[Any, ...], list[int]] = {}
    for position in free:
        attributes = search.devices[position].attributes
        values = tuple(attributes.get(c.attribute) for c in applicable)
        if any(v is None for v in values):
            continue
        if any(c.bound and c.value != v for c, v in zip(applicable, values, strict=True)):
            continue
        groups.setdefault(values, []).append(position)
    ranked = []
    for members in groups.values():
        first = next(search.candidates(members, count), None)
        if first is not None:
            ranked.append((search.rank(first, free), -members[0], members))
    ranked.sort(key=lambda entry: (entry[0], entry[1]), reverse=True)
    for _, _, members in ranked:
        yield from search.candidates(members, count)


def _bind(search: _Search, ids: tuple[int, ...], applicable: list[_Constraint]) -> bool:
    for constraint in applicable:
        values = {search.devices[i].attributes.get(constraint.attribute) for i in ids}
        if None in values or len(values) != 1:
            return False
        (value,) = values
        if constraint.bound and constraint.value != value:
            return False
    for constraint in applicable:
        constraint.value = search.devices[ids[0]].attributes.get(constraint.attribute)
        constraint.bound += len(ids)
    return True


def _unbind(ids: tuple[int, ...], applicable: list[_Constraint]) -> None:
    for constraint in applicable:
        constraint.bound -= len(ids)
        if not constraint.bound:
            constraint.value = None


def _result(
    claim: Mapping[str, Any],
    index: int,
    chosen: list[tuple[_Request, _Alternative, tuple[int, ...]]],
    devices: list[_Device],
    classes: Mapping[str, Mapping[str, Any]],
    node_name: str,
) -> dict[str, Any]:
    results: list[dict[str, Any]] = []
    config: list[dict[str, Any]] = []
    by_class: dict[str, list[str]] = {}
    node_local = False
    term: dict[str, list[Any]] = {"matchExpressions": [], "matchFields": []}
    for request, alt, ids in chosen:
        if request.claim != index:
            continue
        by_class.setdefault(alt.class_name, []).append(alt.name)
        for position in ids:
            device = devices[position]
            node_local = node_local or device.node_local
            for key, requirements in _only_term(device.node_selector).items():
                term[key].extend(r for r in requirements if r not in term[key])
            driver, pool, name = device.id
            result: dict[str, Any] = {
                "request": alt.name,
                "driver": driver,
                "pool": pool,
                "device": name,
            }
            if alt.admin:
                result["adminAccess"] = True
            results.append(result)
    for class_name, names in by_class.items():
        for entry in classes[class_name].get("spec", {}).get("config", ()):
            config.append({"source": "FromClass", "requests": names, **entry})
    picked = {alt.name for request, alt, _ in chosen if request.claim == index}
    picked |= {request.name for request, _, _ in chosen if request.claim == index}
    for entry in claim.get("spec", {}).get("devices", {}).get("config", ()):
        # As upstream: a claim's config applies when it names no request or a request (or
        # the subrequest that was picked) of this allocation.
        named = entry.get("requests") or []
        if not named or picked.intersection(named):
            config.append({"source": "FromClaim", **entry})
    count = len(claim.get("spec", {}).get("devices", {}).get("requests", ()))
    for entry in config:
        if len(entry.get("requests") or ()) == count:
            entry.pop("requests")  # names every request: empty means all
    devices_out: dict[str, Any] = {"results": results}
    if config:
        devices_out["config"] = config
    allocation: dict[str, Any] = {"devices": devices_out}
    if node_local:
        allocation["nodeSelector"] = {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
            ]
        }
    elif term["matchExpressions"] or term["matchFields"]:
        # upstream's createNodeSelector: the slices' single terms, requirements ANDed
        allocation["nodeSelector"] = {"nodeSelectorTerms": [{k: v for k, v in term.items() if v}]}
    return allocation


def _only_term(selector: Mapping[str, Any] | None) -> dict[str, list[Any]]:
    """The requirements of a slice's node selector (API validation allows one term)."""
    terms = (selector or {}).get("nodeSelectorTerms") or [{}]
    return {
        key: list(terms[0].get(key) or ())
        for key in ("matchExpressions", "matchFields")
        if terms[0].get(key)
    }


def allocated_devices(claims: Iterable[Mapping[str, Any]]) -> set[DeviceID]:
    """The devices ``claims`` hold, from their ``status.allocation`` (an ``allocated`` set
    for :func:`allocate`): results with ``adminAccess`` are left out, as upstream's
    ``GatherAllocatedState`` does, since admin access is not use. O(results)."""
    held: set[DeviceID] = set()
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or ():
            if not result.get("adminAccess"):
                held.add((result["driver"], result["pool"], result["device"]))
    return held
