"""The GpuClaim reader: a pod annotated ``gpu.scheduling/claim`` gets the claim's spec as the
same GPURequest the other forms build; contradictions, a missing claim and a pod without the
device resource are messages that say what to fix; read without claims (the webhook's and
the agent's case), the annotation is not read."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pytest
from gpu_request_pods import pod

from gpusched.gpu_requests import GPURequest, RequestError, gpuclaim, read_gpu_request

GPU = "nvidia.com/gpu"
CLAIM = "gpu.scheduling/claim"


class Claims:
    """A ClaimSpecs over a dict of ``(namespace, name) -> spec``."""

    def __init__(self, specs: Mapping[tuple[str, str], Mapping[str, Any]]) -> None:
        self.specs = dict(specs)

    def claim_spec(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.specs.get((namespace, name))


def spec(count: int = 4, topology: dict[str, Any] | None = None, **devices: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"devices": {"count": count, **devices}}
    if topology is not None:
        out["topology"] = topology
    return out


SPECS = {
    ("default", "single"): spec(1, exclusivity="Exclusive"),
    ("default", "training"): spec(
        4,
        policy="contiguous",
        exclusivity="Exclusive",
        topology={"mode": "Preferred", "minBandwidthGBps": 600},
    ),
    ("default", "strict"): spec(2, topology={"mode": "Required", "minBandwidthGBps": 112.5}),
    ("default", "shared"): spec(2, exclusivity="Shared", vramPerDevice="20Gi"),
    ("default", "mig"): spec(2, migProfile="1g.10gb"),
    ("default", "h100"): spec(2, gpuClass="h100"),
    ("default", "zero-floor"): spec(2, topology={"minBandwidthGBps": 0}),
    ("default", "shared-no-vram"): spec(1, exclusivity="Shared"),
    ("default", "vram-exclusive"): spec(1, vramPerDevice="20Gi"),
    ("default", "required-nothing"): spec(2, topology={"mode": "Required"}),
    ("default", "wrong-case"): spec(2, topology={"mode": "required", "minBandwidthGBps": 600}),
    ("default", "shared-mig"): spec(1, exclusivity="Shared", migProfile="1g.10gb"),
    ("other", "single"): spec(8),
}


@pytest.fixture
def claims() -> Claims:
    return Claims(SPECS)


def claimed(
    name: str, limits: Mapping[str, Any] | None = None, **annotations: str
) -> dict[str, Any]:
    return pod(limits if limits is not None else {GPU: "1"}, {CLAIM: name, **annotations})


def whole(count: int, **kw: Any) -> GPURequest:
    return GPURequest(mode="whole", count=count, source="nvidia", **kw)


ACCEPTED: list[tuple[str, dict[str, Any], GPURequest]] = [
    ("the seed's single GPU, nvidia.com/gpu equal", claimed("single"), whole(1)),
    (
        "the seed's training claim: contiguous, Preferred 600 GB/s",
        claimed("training", {GPU: "4"}),
        whole(4, contiguous=True, min_bandwidth_gbps=600.0),
    ),
    (
        "Required, a decimal floor",
        claimed("strict", {GPU: "2"}),
        whole(2, topology="Required", min_bandwidth_gbps=112.5),
    ),
    (
        "Shared with VRAM: gpusched.io/gpu, the same VRAM in the container",
        claimed("shared", {"gpusched.io/gpu": "2", "gpusched.io/vram": "20Gi"}),
        GPURequest(mode="shared", count=2, vram_mib=20480, source="gpuclaim"),
    ),
    (
        "Shared with VRAM from the claim alone",
        claimed("shared", {"gpusched.io/gpu": "2"}),
        GPURequest(mode="shared", count=2, vram_mib=20480, source="gpuclaim"),
    ),
    (
        "a MIG profile",
        claimed("mig", {"nvidia.com/mig-1g.10gb": "2"}),
        GPURequest(mode="mig", count=2, mig_profile="1g.10gb", source="nvidia"),
    ),
    ("a GPU class", claimed("h100", {GPU: "2"}), whole(2, gpu_class="h100")),
    ("a zero floor asks nothing", claimed("zero-floor", {GPU: "2"}), whole(2)),
    (
        "pod annotations that agree combine",
        claimed("training", {GPU: "4"}, **{"gpusched.io/contiguous": "true"}),
        whole(4, contiguous=True, min_bandwidth_gbps=600.0),
    ),
    ("spaces around the name", claimed(" single "), whole(1)),
]


@pytest.mark.parametrize(("pod_", "want"), [a[1:] for a in ACCEPTED], ids=[a[0] for a in ACCEPTED])
def test_accepted(claims: Claims, pod_: dict[str, Any], want: GPURequest) -> None:
    got = read_gpu_request(pod_, claims)
    assert got is not None
    assert got.claim == f"default/{gpuclaim.claim_name(pod_)}"  # messages name its fields
    assert dataclasses.replace(got, claim=None) == want


def test_the_claim_of_the_pods_namespace() -> None:
    p = claimed("single", {GPU: "8"})
    p["metadata"]["namespace"] = "other"
    assert read_gpu_request(p, Claims(SPECS)) == whole(8, claim="other/single")


REJECTED: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
    (
        "a missing claim",
        claimed("nope"),
        ("refers to GpuClaim default/nope, which does not exist", "retried when it appears"),
    ),
    (
        "a count that contradicts nvidia.com/gpu",
        claimed("training", {GPU: "2"}),
        (
            'nvidia.com/gpu: "2" and GpuClaim default/training spec.devices.count: 4',
            "different numbers of GPUs",
        ),
    ),
    (
        "no device resource",
        claimed("training", {"cpu": "1"}),
        (
            "GpuClaim default/training asks for 4 whole GPU(s)",
            'add nvidia.com/gpu: "4" to the limits',
        ),
    ),
    (
        "MIG claim without the MIG resource",
        claimed("mig", {GPU: "2"}),
        ("asks for 2 MIG device(s)", "nvidia.com/mig-1g.10gb"),
    ),
    (
        "a floor that contradicts the pod's",
        claimed("training", {GPU: "4"}, **{"gpusched.io/min-bandwidth-gbps": "300"}),
        ("different bandwidth floors",),
    ),
    (
        "Shared without VRAM",
        claimed("shared-no-vram", {"gpusched.io/gpu": "1"}),
        ("says no VRAM", "vramPerDevice"),
    ),
    (
        "VRAM on an Exclusive claim",
        claimed("vram-exclusive"),
        ("applies to Shared claims", "gpuClass"),
    ),
    (
        "Required with nothing to require",
        claimed("required-nothing", {GPU: "2"}),
        ("requires nothing",),
    ),
    ("a mode in the wrong case", claimed("wrong-case", {GPU: "2"}), ('write "Required"',)),
    ("Shared MIG", claimed("shared-mig", {"nvidia.com/mig-1g.10gb": "1"}), ("not shared",)),
    ("a claim name that is no name", claimed("Bad_Name"), ("not a valid GpuClaim name",)),
]


@pytest.mark.parametrize(("pod_", "parts"), [r[1:] for r in REJECTED], ids=[r[0] for r in REJECTED])
def test_rejected(claims: Claims, pod_: dict[str, Any], parts: tuple[str, ...]) -> None:
    with pytest.raises(RequestError) as err:
        read_gpu_request(pod_, claims)
    for part in parts:
        assert part in str(err.value)


def test_without_claims_the_annotation_is_not_read() -> None:
    # The webhook and the node agent: the pod's own fields decide.
    assert read_gpu_request(claimed("nope", {GPU: "2"})) == whole(2)


SPEC_ERRORS: list[tuple[str, dict[str, Any], str]] = [
    ("no count", {"devices": {}}, "spec.devices.count: None must be a whole number"),
    ("count 0", spec(0), "1 or more"),
    ("an unknown exclusivity", spec(1, exclusivity="Sometimes"), "must be Exclusive or Shared"),
    ("an unknown policy", spec(1, policy="packed"), 'must be "contiguous"'),
    ("a floor as text", spec(2, topology={"minBandwidthGBps": "600"}), "must be a number"),
    ("a floor too high", spec(2, topology={"minBandwidthGBps": 10**6}), "at most 100000"),
]


@pytest.mark.parametrize(
    ("spec_", "part"), [e[1:] for e in SPEC_ERRORS], ids=[e[0] for e in SPEC_ERRORS]
)
def test_spec_errors(spec_: dict[str, Any], part: str) -> None:
    with pytest.raises(RequestError) as err:
        gpuclaim.partial_from_spec("GpuClaim default/x", spec_)
    assert part in str(err.value)


def test_claim_name() -> None:
    assert gpuclaim.claim_name(claimed(" a ")) == "a"
    assert gpuclaim.claim_name(pod({GPU: "1"})) is None
