"""``read_share_terms``: the share terms ``read_gpu_request`` gives, for incomplete requests too."""

from __future__ import annotations

from typing import Any

import pytest
from gpu_request_pods import pod
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusched.gpu_requests import (
    SHARED_RESOURCES,
    RequestError,
    ShareTerms,
    hami,
    native,
    read_gpu_request,
    read_share_terms,
    woolyai,
)

# (id, limits, annotations, terms): VRAM is left out where the cache's pods leave it out (their
# assignment carries it); read_gpu_request would reject those, read_share_terms does not.
TERMS = [
    ("plain", {"gpusched.io/gpu": "1"}, {}, ShareTerms(False, False, 0)),
    ("no gpu field", {}, {}, ShareTerms(False, False, 0)),
    ("exclusive", {"gpusched.io/gpu": "1"}, {native.EXCLUSIVE: "True"}, ShareTerms(True, False, 0)),
    ("swap", {"gpusched.io/gpu": "1"}, {native.SWAP_FROM_VRAM: "true"}, ShareTerms(False, True, 0)),
    ("woolyai default swap", {"woolyai.com/gpu": "1"}, {}, ShareTerms(False, True, 0)),
    (
        "woolyai exclusive, no swap",
        {"woolyai.com/gpu": "1"},
        {woolyai.EXCLUSIVE_GPU_USE: "true", woolyai.SWAP_FROM_VRAM: "false"},
        ShareTerms(True, False, 0),
    ),
    ("annotation only", {}, {native.EXCLUSIVE: "true"}, ShareTerms(True, False, 0)),
    ("kai", {}, {"gpu-fraction": "0.5"}, ShareTerms(False, False, 0)),
    (
        "hami cores",
        {"nvidia.com/gpu": "1", hami.RESOURCE_GPUCORES: "30"},
        {},
        ShareTerms(False, False, 30),
    ),
    ("hami alone", {hami.RESOURCE_GPUCORES: "100"}, {}, ShareTerms(True, False, 100)),
]


@pytest.mark.parametrize(
    ("limits", "annotations", "terms"), [t[1:] for t in TERMS], ids=[t[0] for t in TERMS]
)
def test_share_terms(
    limits: dict[str, str], annotations: dict[str, str], terms: ShareTerms
) -> None:
    assert read_share_terms(pod(limits, annotations)) == terms


REJECTED = [
    ("not a boolean", {"gpusched.io/gpu": "1"}, {native.EXCLUSIVE: "yes"}, "not a boolean"),
    (
        "forms disagree",
        {"woolyai.com/gpu": "1"},
        {native.SWAP_FROM_VRAM: "true", woolyai.SWAP_FROM_VRAM: "false"},
        "different VRAM swap permissions",
    ),
    ("cores out of range", {hami.RESOURCE_GPUCORES: "150"}, {}, "out of range"),
]


@pytest.mark.parametrize(
    ("limits", "annotations", "fragment"), [t[1:] for t in REJECTED], ids=[t[0] for t in REJECTED]
)
def test_share_terms_rejected(
    limits: dict[str, str], annotations: dict[str, str], fragment: str
) -> None:
    with pytest.raises(RequestError, match=fragment):
        read_share_terms(pod(limits, annotations))


# A complete shared request for each shared-form resource.
COMPLETE = {
    "gpusched.io/gpu": ({"gpusched.io/vram": "1Gi"}, {}),
    "woolyai.com/gpu": ({}, {woolyai.POD_VRAM: "1Gi"}),
    hami.RESOURCE_GPUMEM: ({}, {}),
    hami.RESOURCE_GPUMEM_PERCENTAGE: ({}, {}),
    hami.RESOURCE_GPUCORES: ({}, {}),
}


def test_shared_resources_are_the_shared_forms() -> None:
    assert set(COMPLETE) == SHARED_RESOURCES
    for name, (limits, notes) in COMPLETE.items():
        request = read_gpu_request(pod({name: "10", **limits}, notes))
        assert request is not None
        assert request.mode == "shared"


_BOOL = st.sampled_from(["true", "false"])
_RES = st.fixed_dictionaries(
    {},
    optional={
        "gpusched.io/gpu": st.sampled_from(["1", "2"]),
        "nvidia.com/gpu": st.just("1"),
        "woolyai.com/gpu": st.just("1"),
        hami.RESOURCE_GPUMEM: st.just("1000"),
        hami.RESOURCE_GPUMEM_PERCENTAGE: st.just("50"),
        hami.RESOURCE_GPUCORES: st.sampled_from(["30", "100"]),
    },
)
_ANN = st.fixed_dictionaries(
    {},
    optional={
        native.EXCLUSIVE: _BOOL,
        native.SWAP_FROM_VRAM: _BOOL,
        woolyai.EXCLUSIVE_GPU_USE: _BOOL,
        woolyai.SWAP_FROM_VRAM: _BOOL,
        woolyai.POD_VRAM: st.just("1024Mi"),
        "gpusched.io/priority": st.just("1"),
    },
)


@settings(max_examples=500, deadline=None)
@given(_RES, _ANN, st.booleans())
def test_share_terms_match_the_request(
    limits: dict[str, str], annotations: dict[str, Any], vram: bool
) -> None:
    if vram:
        limits = {**limits, "gpusched.io/vram": "1Gi"}
    pod_ = pod(limits, annotations)
    try:
        request = read_gpu_request(pod_)
    except RequestError:
        return
    if request is None:
        return
    terms = read_share_terms(pod_)
    assert terms == (request.exclusive, request.swap_from_vram, request.cores_percent or 0)
