"""The dispatch: which form is the source, how forms combine, and never a crash."""

from __future__ import annotations

import importlib
from fractions import Fraction
from typing import Any

import pytest
from gpu_request_pods import pod
from hypothesis import given, settings
from hypothesis import strategies as st

import gpusched.gpu_requests as package
from gpusched.cache import pod_requests
from gpusched.gpu_requests import SOURCES, GPURequest, RequestError, read_gpu_request

MODULES = ["", ".native", ".nvidia", ".hami", ".kai", ".woolyai", "._common"]


@pytest.mark.parametrize("suffix", MODULES)
def test_all_is_complete(suffix: str) -> None:
    module = importlib.import_module("gpusched.gpu_requests" + suffix)
    public = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and callable(value)
        and getattr(value, "__module__", None) == module.__name__
    }
    assert set(module.__all__) >= public
    assert all(hasattr(module, name) for name in module.__all__)


def test_sources_in_order_of_precedence() -> None:
    assert SOURCES == ("woolyai", "hami", "kai", "nvidia", "gpuclaim", "gpusched")


def test_request_error_is_a_value_error() -> None:
    assert issubclass(RequestError, ValueError)
    assert package.RequestError is RequestError


SOURCE: list[tuple[str, dict[str, Any], str]] = [
    ("native alone", pod({"gpusched.io/gpu": "1", "gpusched.io/vram": "1Gi"}), "gpusched"),
    ("nvidia whole", pod({"nvidia.com/gpu": "1"}), "nvidia"),
    (
        "nvidia mig with gpusched fallback",
        pod({"nvidia.com/mig-2g.20gb": "1"}, {"gpusched.io/mig-fallback": "1g.10gb"}),
        "nvidia",
    ),
    (
        "hami over gpusched",
        pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1024", "gpusched.io/gpu": "1"}),
        "hami",
    ),
    ("kai over gpusched", pod({"gpusched.io/gpu": "1"}, {"gpu-memory": "1024"}), "kai"),
    (
        "woolyai over gpusched",
        pod({"woolyai.com/gpu": "1", "gpusched.io/gpu": "1"}, {"woolyai.com/pod-vram": "1Gi"}),
        "woolyai",
    ),
    (
        "woolyai over kai",
        pod({"woolyai.com/gpu": "1"}, {"woolyai.com/pod-vram": "1024Mi", "gpu-memory": "1024"}),
        "woolyai",
    ),
    # The WoolyAI annotations alone ask for nothing: the count is gpusched's, so is the source.
    (
        "woolyai modifiers on gpusched",
        pod({"gpusched.io/gpu": "1"}, {"woolyai.com/pod-vram": "1Gi"}),
        "gpusched",
    ),
]


@pytest.mark.parametrize(("pod_", "source"), [s[1:] for s in SOURCE], ids=[s[0] for s in SOURCE])
def test_source(pod_: dict[str, Any], source: str) -> None:
    request = read_gpu_request(pod_)
    assert request is not None
    assert request.source == source


def test_defaults_follow_the_source() -> None:
    # swap-from-vram: WoolyAI's default (true) only when WoolyAI's form asks for the GPUs.
    wooly = read_gpu_request(pod({"woolyai.com/gpu": "1"}, {"woolyai.com/pod-vram": "1Gi"}))
    native = read_gpu_request(pod({"gpusched.io/gpu": "1"}, {"woolyai.com/pod-vram": "1Gi"}))
    assert wooly is not None
    assert wooly.swap_from_vram
    assert native is not None
    assert not native.swap_from_vram
    # HAMi's 100% memory default gives way to a VRAM another form states.
    hami = read_gpu_request(pod({"nvidia.com/gpucores": "50", "gpusched.io/vram": "1Gi"}))
    assert hami == GPURequest(
        mode="shared", count=1, vram_mib=1024, cores_percent=50, source="hami"
    )


def test_request_defaults() -> None:
    request = GPURequest(mode="whole", count=1)
    assert (request.priority, request.source, request.mig_fallbacks) == (0, "gpusched", ())
    assert not request.exclusive
    assert not request.swap_from_vram


WHOLE = [
    pod({"nvidia.com/gpu": "1"}),
    pod({"nvidia.com/gpu": "2"}, more=({"nvidia.com/gpu": "3"},)),
    pod({"nvidia.com/gpu": "1"}, init=({"nvidia.com/gpu": "8"},)),
    pod({"nvidia.com/gpu": "4", "cpu": "2", "memory": "8Gi"}),
]


@pytest.mark.parametrize("pod_", WHOLE)
def test_whole_gpus_count_as_kube_scheduler_does(pod_: dict[str, Any]) -> None:
    # What GPUFit counts today: the effective nvidia.com/gpu request.
    for container in pod_["spec"]["containers"] + pod_["spec"].get("initContainers", []):
        container["resources"]["requests"] = container["resources"]["limits"]
    request = read_gpu_request(pod_)
    assert request is not None
    assert request == GPURequest(
        mode="whole", count=pod_requests(pod_).scalar["nvidia.com/gpu"], source="nvidia"
    )


_KEYS_RES = st.sampled_from(
    [
        "nvidia.com/gpu",
        "nvidia.com/mig-2g.20gb",
        "nvidia.com/mig-x",
        "nvidia.com/gpumem",
        "nvidia.com/gpumem-percentage",
        "nvidia.com/gpucores",
        "gpusched.io/gpu",
        "gpusched.io/vram",
        "woolyai.com/gpu",
        "cpu",
    ]
)
_KEYS_ANN = st.sampled_from(
    [
        "gpusched.io/priority",
        "gpusched.io/exclusive",
        "gpusched.io/swap-from-vram",
        "gpusched.io/gpu-class",
        "gpusched.io/gpu-ids-request",
        "gpusched.io/preferred-node",
        "gpusched.io/mig-fallback",
        "gpu-fraction",
        "gpu-memory",
        "gpu-fraction-num-devices",
        "woolyai.com/pod-vram",
        "woolyai.com/priority",
        "woolyai.com/exclusive-gpu-use",
        "woolyai.com/swap-from-vram",
        "cuda.scheduler.io/gpu-class",
    ]
)
_VALUES = st.one_of(
    st.sampled_from(["0", "1", "2", "-1", "0.5", "1.5", "20Gi", "16000Mi", "100", "true", "x"]),
    st.sampled_from(["1g.10gb", "0,1", "1,1", "", " ", "1e3", "9999999999999999999Gi"]),
    st.text(max_size=6),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.dictionaries(_KEYS_RES, _VALUES, max_size=4), min_size=1, max_size=3),
    st.dictionaries(_KEYS_ANN, _VALUES, max_size=4),
)
def test_never_crashes(containers: list[dict[str, str]], annotations: dict[str, str]) -> None:
    try:
        request = read_gpu_request(pod(containers[0], annotations, more=tuple(containers[1:])))
    except RequestError as exc:
        message = str(exc)
        assert message
        return
    if request is not None:
        assert request.count >= 1
        assert request.mode in ("whole", "shared", "mig")
        if request.mode == "shared":
            assert (request.vram_mib is None) != (request.vram_fraction is None)
            assert request.vram_mib is None or request.vram_mib >= 1
            assert request.vram_fraction is None or 0 < request.vram_fraction <= Fraction(1)
        if request.gpu_ids is not None:
            assert len(request.gpu_ids) == request.count
        assert 0 <= request.priority <= 4


CONTRADICTIONS: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
    (
        "shared and whole",
        pod({"gpusched.io/gpu": "1", "gpusched.io/vram": "1Gi", "nvidia.com/gpu": "1"}),
        ('nvidia.com/gpu: "1" (whole GPUs) and gpusched.io/gpu: "1" (shared GPUs)', "one kind"),
    ),
    (
        "shared and mig",
        pod(
            {"woolyai.com/gpu": "1", "nvidia.com/mig-1g.10gb": "1"}, {"woolyai.com/pod-vram": "1Gi"}
        ),
        ("(shared GPUs) and nvidia.com/mig-1g.10gb", "(MIG devices)"),
    ),
    (
        "vram twice",
        pod({"gpusched.io/gpu": "1", "gpusched.io/vram": "1Gi"}, {"gpu-fraction": "0.5"}),
        ('gpusched.io/vram: "1Gi"', 'gpu-fraction: "0.5"', "keep one of them"),
    ),
    (
        "counts differ",
        pod({"woolyai.com/gpu": "2", "gpusched.io/gpu": "1"}, {"woolyai.com/pod-vram": "1Gi"}),
        ('woolyai.com/gpu: "2" and gpusched.io/gpu: "1" ask for different numbers of GPUs',),
    ),
]


@pytest.mark.parametrize(
    ("pod_", "fragments"), [c[1:] for c in CONTRADICTIONS], ids=[c[0] for c in CONTRADICTIONS]
)
def test_contradictions_name_both_fields(pod_: dict[str, Any], fragments: tuple[str, ...]) -> None:
    with pytest.raises(RequestError) as err:
        read_gpu_request(pod_)
    for fragment in fragments:
        assert fragment in str(err.value)
