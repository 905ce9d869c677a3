"""The fast path of ``read_gpu_request`` gives exactly the general path's result.

Table tests pin which pods it handles; a hypothesis test compares both paths (value, or the
exception's type and message) on random pods shaped like the ones it handles, mutated towards
the ones it must hand on; a recording test checks that every annotation and resource a reader
looks up is listed in its module's ANNOTATIONS / RESOURCES, which the fast path trusts.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpusched.gpu_requests as package
from gpusched.gpu_requests import (
    GPURequest,
    RequestError,
    gpuclaim,
    hami,
    kai,
    native,
    nvidia,
    woolyai,
)
from gpusched.gpu_requests._common import PodView, _parse_mib_general, parse_mib_quantity

_read_fast = package._read_fast
_read_general = package._read_general
_GENERAL = package._GENERAL


def _pod(
    containers: list[dict[str, Any]],
    annotations: dict[str, Any] | None = None,
    init: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": f"c{i}", "resources": r} for i, r in enumerate(containers)]
    }
    if init is not None:
        spec["initContainers"] = [{"name": f"i{i}", "resources": r} for i, r in enumerate(init)]
    meta: dict[str, Any] = {"name": "p", "namespace": "default"}
    if annotations is not None:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": spec}


CPU = {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "1", "memory": "1Gi"}}
GPU2 = {"limits": {"cpu": "1", "nvidia.com/gpu": "2"}}
GPU_ONE = {"limits": {"gpusched.io/gpu": "1"}}
WHOLE_2 = GPURequest(mode="whole", count=2, source="nvidia")

# (id, pod, what the fast path answers: a request, None, or _GENERAL)
FAST: list[tuple[str, dict[str, Any], Any]] = [
    ("empty pod", {}, None),
    ("cpu only", _pod([CPU]), None),
    ("foreign annotations", _pod([CPU], {"app": "x", "gpusched.io/gpu-ids": "0"}), None),
    ("other vendor", _pod([{"limits": {"amd.com/gpu": "1"}}]), None),
    ("priority without gpu", _pod([CPU], {"gpusched.io/priority": "3"}), None),
    ("whole", _pod([GPU2]), WHOLE_2),
    ("whole int", _pod([{"limits": {"nvidia.com/gpu": 2}}]), WHOLE_2),
    ("requests only", _pod([{"requests": {"nvidia.com/gpu": "2"}}]), WHOLE_2),
    ("limits over requests", _pod([{"limits": {"nvidia.com/gpu": "2"}, "requests": {}}]), WHOLE_2),
    ("summed", _pod([{"limits": {"nvidia.com/gpu": "1"}}] * 2), WHOLE_2),
    ("cpu init", _pod([GPU2], init=[CPU]), WHOLE_2),
    (
        "priority",
        _pod([GPU2], {"gpusched.io/priority": "1"}),
        GPURequest(mode="whole", count=2, priority=1, source="nvidia"),
    ),
    ("zero", _pod([{"limits": {"nvidia.com/gpu": "0"}}]), None),
    # handed on
    ("gpu in init", _pod([CPU], init=[GPU2]), _GENERAL),
    ("unit", _pod([{"limits": {"nvidia.com/gpu": "1k"}}]), _GENERAL),
    ("negative", _pod([{"limits": {"nvidia.com/gpu": "-1"}}]), _GENERAL),
    ("spaces", _pod([{"limits": {"nvidia.com/gpu": " 1"}}]), _GENERAL),
    ("bool", _pod([{"limits": {"nvidia.com/gpu": True}}]), _GENERAL),
    ("unicode digit", _pod([{"limits": {"nvidia.com/gpu": "\u0663"}}]), _GENERAL),
    ("mig", _pod([{"limits": {"nvidia.com/mig-1g.10gb": "1"}}]), _GENERAL),
    ("hami", _pod([{"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "50"}}]), _GENERAL),
    ("shared", _pod([{"limits": {"gpusched.io/gpu": "1"}}]), _GENERAL),
    ("woolyai", _pod([{"limits": {"woolyai.com/gpu": "1"}}]), _GENERAL),
    ("kai", _pod([CPU], {"gpu-fraction": "0.5"}), _GENERAL),
    ("gpusched annotation", _pod([GPU2], {"gpusched.io/exclusive": "true"}), _GENERAL),
    ("annotations not a dict", {"metadata": {"annotations": ["x"]}}, _GENERAL),
    ("containers not a list", {"spec": {"containers": ({"resources": GPU2},)}}, _GENERAL),
]


@pytest.mark.parametrize(("pod_", "expected"), [c[1:] for c in FAST], ids=[c[0] for c in FAST])
def test_fast_path_table(pod_: dict[str, Any], expected: Any) -> None:
    assert _read_fast(pod_) == expected
    if expected is not _GENERAL:
        assert _read_general(pod_) == expected


BAD_PRIORITY = _pod([GPU2], {"gpusched.io/priority": "9"})


@pytest.mark.parametrize("pod_", [BAD_PRIORITY, _pod([CPU], {"gpusched.io/priority": "x"})])
def test_rejected_values_go_to_the_general_path(pod_: dict[str, Any]) -> None:
    assert _read_fast(pod_) is _GENERAL
    with pytest.raises(RequestError, match="is not a priority"):
        package.read_gpu_request(pod_)


def _outcome(read: Any, pod_: dict[str, Any]) -> tuple[Any, ...]:
    try:
        return ("ok", read(pod_))
    except Exception as exc:  # both paths must fail alike, whatever the failure
        return ("raised", type(exc), str(exc))


# Mostly pods the fast path handles (only cpu/memory/nvidia.com/gpu, priority), mutated
# towards the ones it hands on: a field of another form, an odd value or shape.
_FAST_RES = st.sampled_from(["nvidia.com/gpu"] * 3 + ["cpu", "memory", "amd.com/gpu"])
_ANY_RES = st.sampled_from(
    [
        "nvidia.com/gpu",
        "cpu",
        "nvidia.com/mig-1g.10gb",
        "nvidia.com/gpumem",
        "nvidia.com/gpucores",
        "gpusched.io/gpu",
        "gpusched.io/vram",
        "woolyai.com/gpu",
    ]
)
_FAST_VALUES = st.sampled_from(["0", "1", "2", "8", "01", 0, 3])
_ANY_VALUES = st.one_of(
    st.sampled_from(["1k", " 1", "-1", "0.5", "x", "", "\u0663", "9999999999", "1e3"]),
    st.sampled_from([None, True, -2, 1.0, 10**10, "99999999999999999999"]),
)
_FAST_ANN = st.sampled_from(["gpusched.io/priority", "app", "gpusched.io/gpu-ids"])
_ANY_ANN = st.sampled_from(sorted(native.ANNOTATIONS | kai.ANNOTATIONS | woolyai.ANNOTATIONS))
_ANN_VALUES = st.sampled_from(["0", "2", "4", "5", " 1", "x", "", "true", "0.5", None, 3])
_LIST = st.one_of(
    st.dictionaries(_FAST_RES, _FAST_VALUES, max_size=3),
    st.dictionaries(_FAST_RES, _FAST_VALUES, max_size=3),
    st.dictionaries(_FAST_RES, st.one_of(_FAST_VALUES, _ANY_VALUES), max_size=3),
    st.dictionaries(_ANY_RES, st.one_of(_FAST_VALUES, _ANY_VALUES), max_size=3),
)
_ANNOTATIONS = st.one_of(
    st.none(),
    st.dictionaries(_FAST_ANN, _ANN_VALUES, max_size=2),
    st.dictionaries(st.one_of(_FAST_ANN, _ANY_ANN), _ANN_VALUES, max_size=3),
)
_RESOURCES = st.one_of(
    st.fixed_dictionaries({"limits": _LIST}),
    st.fixed_dictionaries({"limits": _LIST, "requests": _LIST}),
    st.fixed_dictionaries({"requests": _LIST}),
    st.sampled_from([{}, {"limits": None}, {"limits": {}, "requests": None}]),
)
_CONTAINER = st.fixed_dictionaries(
    {"name": st.sampled_from(["a", "b"]), "resources": _RESOURCES},
    optional={"restartPolicy": st.just("Always")},
)

_CPU_CONTAINER = st.fixed_dictionaries(
    {"name": st.just("i"), "resources": st.just(CPU)},
    optional={"restartPolicy": st.just("Always")},
)


@settings(max_examples=1500, deadline=None)
@given(
    st.lists(_CONTAINER, max_size=3),
    st.one_of(st.none(), st.lists(_CPU_CONTAINER, max_size=2), st.lists(_CONTAINER, max_size=2)),
    _ANNOTATIONS,
)
def test_fast_path_equals_general_path(
    containers: list[dict[str, Any]],
    init: list[dict[str, Any]] | None,
    annotations: dict[str, Any] | None,
) -> None:
    spec: dict[str, Any] = {"containers": containers}
    if init is not None:
        spec["initContainers"] = init
    pod_ = {"metadata": {"name": "p", "annotations": annotations}, "spec": spec}
    assert _outcome(package.read_gpu_request, pod_) == _outcome(_read_general, pod_)


class _Recording(dict[str, Any]):
    """Annotations that remember which names the readers looked up."""

    def __init__(self, seen: set[str]) -> None:
        super().__init__(app="x")  # not empty: PodView reads an empty mapping as none
        self.seen = seen

    def get(self, key: str, default: Any = None) -> Any:
        self.seen.add(key)
        return super().get(key, default)


# One pod per reader shape, so each reader reads all it reads (none of them raises first).
RECORDED = [
    _pod([{"limits": {"gpusched.io/gpu": "1", "gpusched.io/vram": "1Gi"}}]),
    _pod([{"limits": {"nvidia.com/gpu": "1"}}]),
    _pod([{"limits": {"nvidia.com/mig-1g.10gb": "1"}}]),
    _pod([{"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}}]),
    _pod([{"limits": {"woolyai.com/gpu": "1"}}]),
    _pod([CPU]),
]


@pytest.mark.parametrize("pod_", RECORDED)
def test_readers_list_every_field_they_read(
    pod_: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    annotations: set[str] = set()
    resources: set[str] = set()
    for method in ("has_resource", "total", "per_gpu"):
        original = getattr(PodView, method)

        def record(self: PodView, name: str, *args: Any, _f: Any = original, **kw: Any) -> Any:
            resources.add(name)
            return _f(self, name, *args, **kw)

        monkeypatch.setattr(PodView, method, record)
    pod_["metadata"]["annotations"] = _Recording(annotations)
    with contextlib.suppress(RequestError):  # raised by the checks after all reads
        _read_general(pod_)
    readers = (native, nvidia, hami, kai, woolyai, gpuclaim)
    listed = set().union(*(r.RESOURCES for r in readers))
    assert {n for n in resources if not n.startswith(nvidia.RESOURCE_PREFIX)} <= listed
    assert annotations <= set().union(*(r.ANNOTATIONS for r in readers))
    assert annotations  # the recording works


_TERMS_RES = st.sampled_from(
    [
        "gpusched.io/gpu",
        "gpusched.io/gpu",
        "gpusched.io/vram",
        "gpusched.io/vram",
        "cpu",
        "nvidia.com/gpu",
        "woolyai.com/gpu",
        "nvidia.com/gpucores",
    ]
)
_TERMS_VALUES = st.sampled_from(
    ["1", "2", "0", "20Gi", "16000Mi", "0Mi", "01Gi", "1.5Gi", "20", "20G", "x", None, 1, 2.5]
)
_TERMS_ANN = st.sampled_from(
    [
        *([native.EXCLUSIVE, native.SWAP_FROM_VRAM, "gpusched.io/priority", "app"] * 2),
        woolyai.SWAP_FROM_VRAM,
        native.GPU_CLASS,
        "gpu-fraction",
    ]
)
_TERMS_ANN_VALUES = st.sampled_from(["true", "false", "True", " false", "yes", "1", "0.5", None])
_TERMS_LIST = st.dictionaries(_TERMS_RES, _TERMS_VALUES, max_size=3)
_TERMS_CONTAINER = st.fixed_dictionaries(
    {
        "name": st.sampled_from(["a", "b"]),
        "resources": st.one_of(
            st.fixed_dictionaries({"limits": _TERMS_LIST}),
            st.fixed_dictionaries({"limits": _TERMS_LIST, "requests": _TERMS_LIST}),
        ),
    }
)


@settings(max_examples=1000, deadline=None)
@given(
    st.lists(_TERMS_CONTAINER, max_size=2),
    st.one_of(
        st.none(), st.lists(_CPU_CONTAINER, max_size=1), st.lists(_TERMS_CONTAINER, max_size=1)
    ),
    st.dictionaries(_TERMS_ANN, _TERMS_ANN_VALUES, max_size=3),
)
def test_share_terms_fast_path_equals_general_path(
    containers: list[dict[str, Any]],
    init: list[dict[str, Any]] | None,
    annotations: dict[str, Any],
) -> None:
    spec: dict[str, Any] = {"containers": containers}
    if init is not None:
        spec["initContainers"] = init
    pod_ = {"metadata": {"name": "p", "annotations": annotations}, "spec": spec}
    fast = _outcome(package.read_share_terms, pod_)
    assert fast == _outcome(package._share_terms_general, pod_)


@settings(max_examples=500, deadline=None)
@given(
    st.from_regex(r"\A[0-9]{1,11}(Mi|Gi|Ki|G|M|)\Z"),
    st.booleans(),
)
def test_plain_mib_quantities_read_as_the_general_rule(text: str, unitless: bool) -> None:
    fast = _outcome(
        lambda t: parse_mib_quantity("gpusched.io/vram", t, unitless_mib=unitless), text
    )
    general = _outcome(lambda t: _parse_mib_general("gpusched.io/vram", t, unitless), text)
    assert fast == general


_SHARED = {"gpusched.io/gpu": "1", "gpusched.io/vram": "20Gi"}
# (id, pod, what the share-terms fast path answers)
FAST_TERMS: list[tuple[str, dict[str, Any], Any]] = [
    ("plain", _pod([{"limits": _SHARED}]), package.ShareTerms(False, False, 0)),
    ("no gpu", _pod([CPU]), package.ShareTerms(False, False, 0)),
    (
        "annotations",
        _pod([{"limits": _SHARED}], {native.EXCLUSIVE: "TRUE", native.SWAP_FROM_VRAM: "true"}),
        package.ShareTerms(True, True, 0),
    ),
    ("vram elsewhere", _pod([{"limits": {"gpusched.io/vram": "1Gi"}}, GPU_ONE]), _GENERAL),
    ("two vram", _pod([{"limits": _SHARED}, {"limits": _SHARED}]), _GENERAL),
    ("vram in init", _pod([{"limits": _SHARED}], init=[{"limits": _SHARED}]), _GENERAL),
    ("bad vram", _pod([{"limits": {**_SHARED, "gpusched.io/vram": "20"}}]), _GENERAL),
    ("bad boolean", _pod([{"limits": _SHARED}], {native.EXCLUSIVE: "yes"}), _GENERAL),
    ("other form", _pod([{"limits": _SHARED}], {woolyai.SWAP_FROM_VRAM: "true"}), _GENERAL),
]


@pytest.mark.parametrize(
    ("pod_", "expected"), [c[1:] for c in FAST_TERMS], ids=[c[0] for c in FAST_TERMS]
)
def test_share_terms_fast_path_table(pod_: dict[str, Any], expected: Any) -> None:
    assert package._share_terms_fast(pod_) == expected
    assert _outcome(package.read_share_terms, pod_) == _outcome(package._share_terms_general, pod_)
