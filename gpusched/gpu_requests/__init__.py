"""One GPU request, read from whichever form a pod is written in.

Users come with manifests written for other systems; each form has its own small reader that
translates it, with its system's defaults, into the one :class:`GPURequest` the scheduler
places. Pure code: a pod dict in, a request (or ``None``: no GPU) or a :class:`RequestError`
out; no cluster knowledge (whether a class exists or the VRAM fits a GPU here is the plugin's
check). The full field reference: docs/gpu_requests.md.

==========  ===============================================================  ============
source      what the pod writes                                              module
==========  ===============================================================  ============
gpusched    ``gpusched.io/gpu`` + ``gpusched.io/vram``; ``gpusched.io/*``     :mod:`.native`
            annotations (these modify every form)
nvidia      ``nvidia.com/gpu`` alone (whole GPUs), ``nvidia.com/mig-<p>``     :mod:`.nvidia`
hami        ``nvidia.com/gpumem[-percentage]``, ``nvidia.com/gpucores``       :mod:`.hami`
kai         ``gpu-fraction`` / ``gpu-memory`` annotations                     :mod:`.kai`
woolyai     ``woolyai.com/gpu`` + ``woolyai.com/*`` annotations               :mod:`.woolyai`
gpuclaim    ``gpu.scheduling/claim: NAME``: a GpuClaim's spec (the            :mod:`.gpuclaim`
            scheduler's claims, with the pod's own device resource)
==========  ===============================================================  ============

**Combining forms.** Every reader states the fields its form gives; the states are merged
field by field. Two forms that state the same field alike combine (``gpusched.io/priority: 1``
beside ``woolyai.com/priority: 1``); two that state it differently are a :class:`RequestError`
naming both, never a silent choice. The *source* is the first foreign form that asks for GPUs,
in the order woolyai, hami, kai, nvidia, gpuclaim, else gpusched; a field nobody states takes the
source's default (``swap_from_vram`` is true for WoolyAI, false otherwise), then any other
form's. Then the request must make sense as a whole (shared GPUs need VRAM, MIG devices take no
VRAM slice, ``gpu-ids-request`` lists one index per GPU ...).

Cost: O(containers x resources + annotations) per pod. The scheduler reads every pod in every
cycle, so the shapes nearly all pods have take fast paths: one pass over the pod's dicts that
hands anything else to the general path and gives exactly its result (hypothesis tests compare
them). Measured with timeit (CPython 3.11, one container with cpu/memory in limits and
requests, min of 5 x 20,000 calls, on the shared 2-core dev machine: +-20%):

=================================================  ================  ============
call, pod                                          fast path         general path
=================================================  ================  ============
``read_gpu_request``, no GPU field                 ~1 us             ~6.5 us
``read_gpu_request``, ``nvidia.com/gpu: 2``        ~3-3.5 us         ~22 us
(with or without ``gpusched.io/priority``)
``read_gpu_request``, ``gpusched.io/gpu`` + vram   (general)         ~28-33 us
``read_share_terms``, ``gpusched.io/gpu`` + vram   ~3 us             ~25 us
=================================================  ================  ============

:func:`read_share_terms` gives the three terms of a share (exclusive, swap, cores) that
:func:`read_gpu_request` would give, even where the rest of the request is incomplete: the
cache books bound pods by their assignment and takes only these terms from the request.
:data:`SHARED_RESOURCES` are the resources that make a pod's GPUs shared.

No memo here: a pod is a dict, and the plugin memoises per pod and cycle.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Final, Literal, NamedTuple

from gpusched.annotations import PRIORITY
from gpusched.inventory import RESOURCE_GPU

from . import gpuclaim, hami, kai, native, nvidia, woolyai
from ._common import (
    ClaimSpecs,
    Given,
    Partial,
    PodView,
    RequestError,
    parse_bool,
    parse_mib_quantity,
)

__all__ = [
    "SHARED_RESOURCES",
    "SOURCES",
    "ClaimSpecs",
    "GPURequest",
    "RequestError",
    "ShareTerms",
    "read_gpu_request",
    "read_share_terms",
]

Mode = Literal["whole", "shared", "mig"]
TopologyMode = Literal["Required", "Preferred"]


@dataclass(frozen=True, slots=True)
class GPURequest:
    """What a pod asks for, whatever form it was written in."""

    mode: Mode
    """``whole``: exclusive devices (``nvidia.com/gpu``); ``shared``: slices of GPUs by VRAM;
    ``mig``: MIG devices of one profile."""
    count: int
    """GPUs (whole, shared) or MIG devices (mig); at least 1."""
    vram_mib: int | None = None
    """Shared: MiB on each GPU (exactly one of this and ``vram_fraction`` is set)."""
    vram_fraction: Fraction | None = None
    """Shared: share of each GPU's memory, 0 < f <= 1 (HAMi gpumem-percentage, KAI gpu-fraction)."""
    cores_percent: int | None = None
    """Shared: percent of each GPU's compute, 0..100 (HAMi ``nvidia.com/gpucores``)."""
    exclusive: bool = False
    """Shared API, but an idle GPU that nobody joins."""
    swap_from_vram: bool = False
    """May be placed on overcommitted VRAM (it can spill to host memory)."""
    gpu_class: str | None = None
    gpu_ids: tuple[int, ...] | None = None
    """Specific device indices, one per GPU asked, in the order given."""
    preferred_node: str | None = None
    mig_profile: str | None = None
    """MIG: ``"2g.20gb"`` for ``nvidia.com/mig-2g.20gb``."""
    mig_fallbacks: tuple[str, ...] = ()
    """MIG: profiles accepted instead, in order of preference (``gpusched.io/mig-fallback``)."""
    priority: int = 0
    """0 (highest) .. 4."""
    topology: TopologyMode = "Preferred"
    """``Required``: a set that misses ``min_bandwidth_gbps`` or ``contiguous`` is never
    given; ``Preferred``: such a set ranks below every set that meets them (whole GPUs)."""
    min_bandwidth_gbps: float | None = None
    """Whole GPUs: GB/s (both directions) the slowest pair of the set must move."""
    contiguous: bool = False
    """Whole GPUs: the set is connected over the NVLinks among its GPUs."""
    source: str = "gpusched"
    """The form it was read from: gpusched, nvidia, hami, kai, woolyai or gpuclaim."""
    claim: str | None = None
    """``namespace/name`` of the GpuClaim the request was read from, if any: messages about its
    fields name the claim's fields, not the pod's annotations."""


_READERS: Final = (woolyai, hami, kai, nvidia, gpuclaim, native)
SOURCES: Final = tuple(reader.SOURCE for reader in _READERS)
"""The forms, in order of precedence for :attr:`GPURequest.source`."""
SHARED_RESOURCES: Final = frozenset(
    {
        native.RESOURCE_SHARED_GPU,
        woolyai.RESOURCE_GPU,
        hami.RESOURCE_GPUMEM,
        hami.RESOURCE_GPUMEM_PERCENTAGE,
        hami.RESOURCE_GPUCORES,
    }
)
"""Container resources that put a pod in a shared form (its ``nvidia.com/gpu``, if any, is then
HAMi's count of shared GPUs): what the cache reads to tell a bound pod's share from whole GPUs."""

_WHAT: Final = {
    "mode": "kinds of GPU",
    "count": "numbers of GPUs",
    "vram_mib": "VRAM per GPU",
    "vram_fraction": "shares of each GPU",
    "cores_percent": "compute shares",
    "exclusive": "exclusivity",
    "swap_from_vram": "VRAM swap permissions",
    "gpu_class": "GPU classes",
    "gpu_ids": "GPU indices",
    "preferred_node": "preferred nodes",
    "mig_profile": "MIG profiles",
    "mig_fallbacks": "MIG fallbacks",
    "priority": "priorities",
    "topology": "topology modes",
    "min_bandwidth_gbps": "bandwidth floors",
    "contiguous": "contiguity",
}
_KIND: Final = {"whole": "whole GPUs", "shared": "shared GPUs", "mig": "MIG devices"}
_DEFAULTS: Final = {
    "exclusive": False,
    "swap_from_vram": False,
    "priority": 0,
    "topology": "Preferred",
    "contiguous": False,
}
_ALTERNATIVE: Final = {"vram_mib": "vram_fraction", "vram_fraction": "vram_mib"}
"""A default of one of these is not applied when the pod states the other."""
_NEEDS_GPU: Final = (
    "vram_mib",
    "vram_fraction",
    "cores_percent",
    "gpu_ids",
    "mig_fallbacks",
    "topology",
    "min_bandwidth_gbps",
    "contiguous",
)
_TOPOLOGY_OPTIONS: Final = ("min_bandwidth_gbps", "contiguous")


def _merge(partials: list[Partial]) -> dict[str, Given]:
    merged: dict[str, Given] = {}
    for partial in partials:
        for name, given in partial.values.items():
            prior = merged.get(name)
            if prior is None:
                merged[name] = given
            elif name == "mode" and prior.value != given.value:
                raise RequestError(
                    f"{prior.origin} ({_KIND[prior.value]}) and {given.origin} "
                    f"({_KIND[given.value]}) ask for different kinds of GPU; a pod asks for one "
                    "kind: remove one of them"
                )
            elif prior.value != given.value:
                raise RequestError(
                    f"{prior.origin} and {given.origin} ask for different {_WHAT[name]}; "
                    "remove one of them or make them agree"
                )
    return merged


def read_gpu_request(pod: Mapping[str, Any], claims: ClaimSpecs | None = None) -> GPURequest | None:
    """The pod's GPU request; ``None`` when it asks for no GPU at all.

    ``claims``: where a pod's GpuClaim (``gpu.scheduling/claim``) is found; without it the
    annotation is not read (:mod:`.gpuclaim`). Raises :class:`RequestError` for a malformed or
    contradictory request; the message names the field and says what would fix it. Pods that
    ask for no GPU or for plain whole GPUs take the fast path (module docstring), with exactly
    the general path's result.
    """
    fast = _read_fast(pod)
    if fast is not _Fallback.GENERAL:
        return fast
    return _read_general(pod, claims)


# The fast paths. They read the shapes nearly every pod has, by one pass over plain dicts
# (_scan) that bails out (to the general path) at the first thing they do not handle
# themselves: a field of another form (ANNOTATIONS / RESOURCES of every reader, MIG
# resources), a GPU field in an init container, any value that is not a plain count, any part
# of the pod that is not the dict or list the API gives; a value a parser rejects goes to the
# general path too, which raises its own (first) error. What they handle is what the general
# path does with it:
# - no GPU field at all: every reader returns None, so the request is None;
# - nvidia.com/gpu alone (and gpusched.io/priority): nvidia's whole-GPU partial. Counts are
#   summed over app containers; init containers (and sidecars) name no GPU field here, so
#   kube-scheduler's init peak (gpusched.cache.pod_requests) adds nothing to the sum;
# - share terms of gpusched's own form (gpusched.io/gpu, vram, priority, exclusive,
#   swap-from-vram): native's reader alone states anything, so its two booleans are the terms.
# tests/gpu_requests/test_gpu_requests_fast.py compares both paths on random pods.
class _Fallback(enum.Enum):
    GENERAL = enum.auto()
    """A fast path's answer for a pod it leaves to the general path."""


_GENERAL: Final = _Fallback.GENERAL
_GPU: Final = RESOURCE_GPU
_ALL_ANNOTATIONS: Final = frozenset().union(*(r.ANNOTATIONS for r in _READERS))
_ALL_RESOURCES: Final = frozenset().union(*(r.RESOURCES for r in _READERS))
_MIG_PREFIX: Final = nvidia.RESOURCE_PREFIX
_WHOLE_RESOURCES: Final = frozenset({_GPU})
_WHOLE_SLOW_ANNOTATIONS: Final = _ALL_ANNOTATIONS - {PRIORITY}
_NATIVE_RESOURCES: Final = frozenset({native.RESOURCE_SHARED_GPU, native.RESOURCE_VRAM})
_NATIVE_SLOW_ANNOTATIONS: Final = _ALL_ANNOTATIONS - {
    PRIORITY,
    native.EXCLUSIVE,
    native.SWAP_FROM_VRAM,
}
_MAX_FAST_DIGITS: Final = 9
"""Longer counts (and any quantity with a unit or a sign) take the general path."""
_EMPTY: Final[dict[str, Any]] = {}


def _fast_count(raw: Any) -> int | None:
    """``raw`` as parse_int reads a count, when it is plain digits or an int; else None."""
    if type(raw) is str:
        if raw.isdigit() and raw.isascii() and len(raw) <= _MAX_FAST_DIGITS:
            return int(raw)
        return None
    if type(raw) is int and 0 <= raw < 10**_MAX_FAST_DIGITS:
        return raw
    return None


def _scan(
    pod: Mapping[str, Any], slow_annotations: frozenset[str], fast_resources: frozenset[str]
) -> tuple[Mapping[str, Any], list[dict[str, Any]]] | _Fallback:
    """The pod's annotations, and the GPU resources of each app container that names any
    (limits over requests, as :class:`PodView`), when no annotation is in
    ``slow_annotations`` and every GPU resource is in ``fast_resources``; else
    :data:`_GENERAL`. O(containers x resources + annotations)."""
    if type(pod) is not dict:
        return _GENERAL
    annotations: Mapping[str, Any] = _EMPTY
    meta = pod.get("metadata")
    if meta:
        if type(meta) is not dict:
            return _GENERAL
        found = meta.get("annotations")
        if found:
            if type(found) is not dict or not slow_annotations.isdisjoint(found):
                return _GENERAL
            annotations = found
    held: list[dict[str, Any]] = []
    spec = pod.get("spec")
    if not spec:
        return annotations, held
    if type(spec) is not dict:
        return _GENERAL
    for key in ("containers", "initContainers"):
        containers = spec.get(key)
        if not containers:
            continue
        if type(containers) is not list:
            return _GENERAL
        for container in containers:
            if type(container) is not dict:
                return _GENERAL
            resources = container.get("resources")
            if not resources:
                continue
            if type(resources) is not dict:
                return _GENERAL
            limits = resources.get("limits") or _EMPTY
            requests = resources.get("requests") or _EMPTY
            if type(limits) is not dict or type(requests) is not dict:
                return _GENERAL
            mine: dict[str, Any] | None = None
            for names in (limits, requests):
                for name in names:
                    if type(name) is not str:
                        return _GENERAL
                    if name in _ALL_RESOURCES or name.startswith(_MIG_PREFIX):
                        if name not in fast_resources or key == "initContainers":
                            return _GENERAL
                        if mine is None:
                            mine = {}
                        mine.setdefault(name, names[name])  # limits over requests
            if mine is not None:
                held.append(mine)
    return annotations, held


def _read_fast(pod: Mapping[str, Any]) -> GPURequest | _Fallback | None:
    """The request of a pod without GPU fields or with plain ``nvidia.com/gpu`` counts;
    :data:`_GENERAL` for any other pod. O(containers x resources + annotations)."""
    scanned = _scan(pod, _WHOLE_SLOW_ANNOTATIONS, _WHOLE_RESOURCES)
    if scanned is _GENERAL:
        return _GENERAL
    annotations, held = scanned
    count = 0
    for resources in held:
        amount = _fast_count(resources[_GPU])
        if amount is None:
            return _GENERAL
        count += amount
    text = annotations.get(PRIORITY)
    priority = 0
    if text is not None:
        try:
            priority = native.parse_priority_text(str(text))
        except RequestError:
            return _GENERAL
    if not count:
        return None
    return GPURequest(mode="whole", count=count, priority=priority, source=nvidia.SOURCE)


def _read_general(pod: Mapping[str, Any], claims: ClaimSpecs | None = None) -> GPURequest | None:
    """Every reader, merged and checked (module docstring)."""
    partials = _partials(pod, claims)
    if not partials:
        return None
    merged = _merge(partials)
    primary = _primary(partials)
    if primary is None:
        stray = next((merged[n] for n in _NEEDS_GPU if n in merged), None)
        if stray is not None:
            raise RequestError(
                f"{stray.origin} is set but the pod asks for no GPU; ask for GPUs in a "
                "container's limits (gpusched.io/gpu: 1 with gpusched.io/vram for a shared GPU, "
                "nvidia.com/gpu: 1 for a whole one), or remove it"
            )
        return None
    values = _values(merged, partials, primary)
    _check(values, merged, primary.source)
    return GPURequest(source=primary.source, **values)


def _partials(pod: Mapping[str, Any], claims: ClaimSpecs | None = None) -> list[Partial]:
    view = PodView(pod, claims)
    return [p for reader in _READERS if (p := reader.read(view)) is not None]


def _primary(partials: list[Partial]) -> Partial | None:
    """The source: the first form that asks for GPUs, else the first that would by default."""
    return next(
        (p for p in partials if "mode" in p.values),
        next((p for p in partials if "mode" in p.defaults), None),
    )


def _values(
    merged: dict[str, Given], partials: list[Partial], primary: Partial | None
) -> dict[str, Any]:
    """The stated fields, then the source's defaults, then the other forms', then ours."""
    values = {name: given.value for name, given in merged.items()}
    for partial in (primary, *partials) if primary is not None else partials:
        for name, value in partial.defaults.items():
            if _ALTERNATIVE.get(name) not in values:
                values.setdefault(name, value)
    for name, value in _DEFAULTS.items():
        values.setdefault(name, value)
    return values


class ShareTerms(NamedTuple):
    """How a pod shares the GPUs it holds: :class:`GPURequest`'s fields of the same names."""

    exclusive: bool
    swap_from_vram: bool
    cores_percent: int
    """0 when the pod states no compute share."""


def read_share_terms(pod: Mapping[str, Any]) -> ShareTerms:
    """The share terms :func:`read_gpu_request` gives the pod, without requiring the rest of
    its request to be complete or consistent as a whole.

    For the cache, which books a bound pod's declared share: the devices and VRAM come from
    its assignment, the terms from here, so the rules of every form (which annotations ask for
    a dedicated GPU or allow swap, WoolyAI's swap default, HAMi's ``gpucores``, 100 meaning
    the GPU alone) live in the readers only. Raises :class:`RequestError` when a reader
    rejects a field or two forms disagree. Cost: ~3 us for gpusched's own form (a fast path,
    module docstring), else the readers and the merge, ~20-35 us.
    """
    fast = _share_terms_fast(pod)
    if fast is not _Fallback.GENERAL:
        return fast
    return _share_terms_general(pod)


def _share_terms_general(pod: Mapping[str, Any]) -> ShareTerms:
    partials = _partials(pod)
    merged = _merge(partials)
    values = _values(merged, partials, _primary(partials))
    return ShareTerms(
        values["exclusive"], values["swap_from_vram"], values.get("cores_percent") or 0
    )


def _share_terms_fast(pod: Mapping[str, Any]) -> ShareTerms | _Fallback:
    """The terms of a pod in gpusched's own form: what :func:`native.read` checks, checked the
    same way (a count per container, VRAM from the one container that asks the GPUs)."""
    scanned = _scan(pod, _NATIVE_SLOW_ANNOTATIONS, _NATIVE_RESOURCES)
    if scanned is _GENERAL:
        return _GENERAL
    annotations, held = scanned
    vram: list[dict[str, Any]] = []
    any_gpu = False
    for resources in held:
        if native.RESOURCE_SHARED_GPU in resources:
            any_gpu = True
            if _fast_count(resources[native.RESOURCE_SHARED_GPU]) is None:
                return _GENERAL
        if native.RESOURCE_VRAM in resources:
            vram.append(resources)
    try:
        if vram:
            if len(vram) > 1 or (any_gpu and native.RESOURCE_SHARED_GPU not in vram[0]):
                return _GENERAL
            parse_mib_quantity(native.RESOURCE_VRAM, vram[0][native.RESOURCE_VRAM])
        text = annotations.get(PRIORITY)
        if text is not None:
            native.parse_priority_text(str(text))
        exclusive = swap = False
        if (text := annotations.get(native.EXCLUSIVE)) is not None:
            exclusive = parse_bool(native.EXCLUSIVE, str(text))
        if (text := annotations.get(native.SWAP_FROM_VRAM)) is not None:
            swap = parse_bool(native.SWAP_FROM_VRAM, str(text))
    except RequestError:
        return _GENERAL
    return ShareTerms(exclusive, swap, 0)


def _origin(merged: dict[str, Given], name: str) -> str:
    return merged[name].origin


def _check(values: dict[str, Any], merged: dict[str, Given], source: str) -> None:
    """The request as a whole makes sense (fields of single forms are checked by readers)."""
    mode = values["mode"]
    if values.get("vram_mib") is not None and values.get("vram_fraction") is not None:
        raise RequestError(
            f"{_origin(merged, 'vram_mib')} and {_origin(merged, 'vram_fraction')} both say how "
            "much of each GPU the pod needs; keep one of them"
        )
    if mode == "shared" and values.get("vram_mib") is None and values.get("vram_fraction") is None:
        raise RequestError(_missing_vram(source, merged))
    if mode != "shared":
        kind = "whole GPUs" if mode == "whole" else "MIG devices"
        asked = _origin(merged, "mode")
        for name in ("vram_mib", "vram_fraction", "cores_percent", "swap_from_vram"):
            if name in merged and (name != "swap_from_vram" or values[name]):
                raise RequestError(
                    f"{merged[name].origin} applies to shared GPUs, but {asked} asks for "
                    f"{kind}; remove it, or ask for shared GPUs with gpusched.io/gpu"
                )
    if mode != "mig" and values.get("mig_fallbacks"):
        raise RequestError(
            f"{_origin(merged, 'mig_fallbacks')} applies to MIG requests "
            "(nvidia.com/mig-<profile>), but the pod asks for none; remove it"
        )
    if mode == "mig":
        profile = values["mig_profile"]
        if profile in values.get("mig_fallbacks", ()):
            raise RequestError(
                f"{_origin(merged, 'mig_fallbacks')} lists {profile}, the profile the pod asks "
                "for; list only the other profiles it accepts"
            )
        if values.get("gpu_ids") is not None:
            raise RequestError(
                f"{_origin(merged, 'gpu_ids')} names GPUs, but MIG devices are placed by "
                "profile; remove it"
            )
    _check_topology(values, merged, mode)
    ids = values.get("gpu_ids")
    if ids is not None and len(ids) != values["count"]:
        raise RequestError(
            f"{_origin(merged, 'gpu_ids')} lists {len(ids)} GPU(s) but the pod asks for "
            f"{values['count']}; list one index per GPU"
        )


def _check_topology(values: dict[str, Any], merged: dict[str, Given], mode: str) -> None:
    """Topology options are for whole GPUs, and ``Required`` needs something to require."""
    stated = [n for n in ("topology", *_TOPOLOGY_OPTIONS) if n in merged]
    if stated and mode != "whole":
        raise RequestError(
            f"{merged[stated[0]].origin} applies to whole GPUs (nvidia.com/gpu), but "
            f"{_origin(merged, 'mode')} asks for {_KIND[mode]}; remove it"
        )
    if values.get("topology") == "Required" and not (
        values.get("min_bandwidth_gbps") or values.get("contiguous")
    ):
        raise RequestError(
            f"{_origin(merged, 'topology')} requires nothing by itself; add "
            f'{native.MIN_BANDWIDTH_GBPS}: "600" (GB/s between any two of the GPUs) or '
            f'{native.CONTIGUOUS}: "true", or remove it'
        )


def _missing_vram(source: str, merged: dict[str, Given]) -> str:
    asked = merged["mode"].origin if "mode" in merged else "the request"
    if source == woolyai.SOURCE:
        return (
            f"{asked} asks for shared GPUs but {woolyai.POD_VRAM} is missing; WoolyAI requires "
            f'it: add the annotation {woolyai.POD_VRAM}: "16000Mi" (VRAM per GPU)'
        )
    return (
        f"{asked} asks for shared GPUs but says no VRAM per GPU; add "
        f'{native.RESOURCE_VRAM}: "20Gi" (VRAM per GPU) to the same container\'s limits'
    )
