"""The topology options (gpusched.io/topology, min-bandwidth-gbps, contiguous): read by the
native reader into GPURequest for whole GPUs, in any form that asks for them, and rejected with
a message that says what to fix."""

from __future__ import annotations

from typing import Any

import pytest
from gpu_request_pods import pod

from gpusched.gpu_requests import GPURequest, RequestError, read_gpu_request

GPU = "nvidia.com/gpu"
TOPOLOGY = "gpusched.io/topology"
BANDWIDTH = "gpusched.io/min-bandwidth-gbps"
CONTIGUOUS = "gpusched.io/contiguous"


def whole(count: int = 4, **kw: Any) -> GPURequest:
    return GPURequest(mode="whole", count=count, source="nvidia", **kw)


ACCEPTED: list[tuple[str, dict[str, Any], GPURequest]] = [
    ("no option: Preferred, nothing asked", pod({GPU: "4"}), whole()),
    ("a floor, Preferred", pod({GPU: "4"}, {BANDWIDTH: "600"}), whole(min_bandwidth_gbps=600.0)),
    ("a decimal floor", pod({GPU: "2"}, {BANDWIDTH: "112.5"}), whole(2, min_bandwidth_gbps=112.5)),
    ("spaces around", pod({GPU: "4"}, {BANDWIDTH: " 300 "}), whole(min_bandwidth_gbps=300.0)),
    (
        "Required floor",
        pod({GPU: "4"}, {TOPOLOGY: "Required", BANDWIDTH: "600"}),
        whole(topology="Required", min_bandwidth_gbps=600.0),
    ),
    ("contiguous", pod({GPU: "4"}, {CONTIGUOUS: "true"}), whole(contiguous=True)),
    ("contiguous false", pod({GPU: "4"}, {CONTIGUOUS: "False"}), whole()),
    (
        "Required contiguous",
        pod({GPU: "8"}, {TOPOLOGY: "Required", CONTIGUOUS: "true"}),
        whole(8, topology="Required", contiguous=True),
    ),
    ("Preferred stated alone", pod({GPU: "4"}, {TOPOLOGY: "Preferred"}), whole()),
    (
        "both options, one GPU (trivially met)",
        pod({GPU: "1"}, {TOPOLOGY: "Required", BANDWIDTH: "900", CONTIGUOUS: "true"}),
        whole(1, topology="Required", min_bandwidth_gbps=900.0, contiguous=True),
    ),
]


@pytest.mark.parametrize(("pod_", "want"), [a[1:] for a in ACCEPTED], ids=[a[0] for a in ACCEPTED])
def test_accepted(pod_: dict[str, Any], want: GPURequest) -> None:
    assert read_gpu_request(pod_) == want


REJECTED: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
    (
        "a unit",
        pod({GPU: "4"}, {BANDWIDTH: "600GB/s"}),
        (
            'gpusched.io/min-bandwidth-gbps: "600GB/s" must be a positive number of GB/s',
            'e.g. "600"',
        ),
    ),
    ("zero", pod({GPU: "4"}, {BANDWIDTH: "0"}), ("must be a positive number",)),
    ("negative", pod({GPU: "4"}, {BANDWIDTH: "-5"}), ("must be a positive number",)),
    ("exponent", pod({GPU: "4"}, {BANDWIDTH: "6e2"}), ("without a unit",)),
    ("too large", pod({GPU: "4"}, {BANDWIDTH: "1000000"}), ("at most 100000",)),
    (
        "wrong case",
        pod({GPU: "4"}, {TOPOLOGY: "required", BANDWIDTH: "600"}),
        ('gpusched.io/topology: "required" must be "Required" or "Preferred"; write "Required"',),
    ),
    (
        "unknown mode",
        pod({GPU: "4"}, {TOPOLOGY: "Strict", BANDWIDTH: "600"}),
        ('must be "Required" or "Preferred"',),
    ),
    (
        "Required alone",
        pod({GPU: "4"}, {TOPOLOGY: "Required"}),
        ("requires nothing by itself", 'gpusched.io/min-bandwidth-gbps: "600"'),
    ),
    ("contiguous not a boolean", pod({GPU: "4"}, {CONTIGUOUS: "yes"}), ("is not a boolean",)),
    (
        "on shared GPUs",
        pod({"gpusched.io/gpu": "2", "gpusched.io/vram": "10Gi"}, {CONTIGUOUS: "true"}),
        ("applies to whole GPUs (nvidia.com/gpu)", "asks for shared GPUs; remove it"),
    ),
    (
        "on MIG devices",
        pod({"nvidia.com/mig-1g.10gb": "2"}, {BANDWIDTH: "100"}),
        ("applies to whole GPUs", "asks for MIG devices"),
    ),
    (
        "no GPU",
        pod({"cpu": "1"}, {BANDWIDTH: "100"}),
        ("is set but the pod asks for no GPU",),
    ),
]


@pytest.mark.parametrize(
    ("pod_", "fragments"), [r[1:] for r in REJECTED], ids=[r[0] for r in REJECTED]
)
def test_rejected(pod_: dict[str, Any], fragments: tuple[str, ...]) -> None:
    with pytest.raises(RequestError) as err:
        read_gpu_request(pod_)
    for fragment in fragments:
        assert fragment in str(err.value)
