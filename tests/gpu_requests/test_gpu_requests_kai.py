"""KAI-Scheduler's form: gpu-fraction / gpu-memory / gpu-fraction-num-devices annotations."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest
from gpu_request_pods import pod

from gpusched.gpu_requests import GPURequest, RequestError, read_gpu_request

CPU = {"cpu": "1"}


def kai(count: int = 1, **kw: Any) -> GPURequest:
    return GPURequest(mode="shared", count=count, source="kai", **kw)


ACCEPTED: list[tuple[str, dict[str, Any], GPURequest | None]] = [
    ("fraction", pod(CPU, {"gpu-fraction": "0.5"}), kai(vram_fraction=Fraction(1, 2))),
    ("fraction .25", pod(CPU, {"gpu-fraction": ".25"}), kai(vram_fraction=Fraction(1, 4))),
    ("fraction 1", pod(CPU, {"gpu-fraction": "1"}), kai(vram_fraction=Fraction(1))),
    ("fraction exact", pod(CPU, {"gpu-fraction": "0.3"}), kai(vram_fraction=Fraction(3, 10))),
    ("memory", pod(CPU, {"gpu-memory": "2000"}), kai(vram_mib=2000)),
    (
        "fraction on two devices",
        pod(CPU, {"gpu-fraction": "0.5", "gpu-fraction-num-devices": "2"}),
        kai(2, vram_fraction=Fraction(1, 2)),
    ),
    (
        "memory on two devices",
        pod(CPU, {"gpu-memory": "1024", "gpu-fraction-num-devices": "2"}),
        kai(2, vram_mib=1024),
    ),
    (
        "container name has no effect",
        pod(CPU, {"gpu-fraction": "0.5", "gpu-fraction-container-name": "main"}),
        kai(vram_fraction=Fraction(1, 2)),
    ),
    ("empty fraction is none (as KAI)", pod(CPU, {"gpu-fraction": ""}), None),
    (
        "gpusched.io/gpu agrees on the count",
        pod({"gpusched.io/gpu": "2"}, {"gpu-memory": "1024", "gpu-fraction-num-devices": "2"}),
        kai(2, vram_mib=1024),
    ),
    (
        "priority",
        pod(CPU, {"gpu-memory": "1024", "gpusched.io/priority": "1"}),
        kai(vram_mib=1024, priority=1),
    ),
]


@pytest.mark.parametrize(("pod_", "want"), [a[1:] for a in ACCEPTED], ids=[a[0] for a in ACCEPTED])
def test_accepted(pod_: dict[str, Any], want: GPURequest | None) -> None:
    assert read_gpu_request(pod_) == want


REJECTED: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
    (
        "fraction 0",
        pod(CPU, {"gpu-fraction": "0"}),
        ('gpu-fraction: "0" is not a share of a GPU', '"0.5"'),
    ),
    ("fraction 1.5", pod(CPU, {"gpu-fraction": "1.5"}), ("at most 1",)),
    ("fraction negative", pod(CPU, {"gpu-fraction": "-0.5"}), ("is not a share of a GPU",)),
    ("fraction text", pod(CPU, {"gpu-fraction": "half"}), ("is not a share of a GPU",)),
    ("fraction percent", pod(CPU, {"gpu-fraction": "50%"}), ("is not a share of a GPU",)),
    (
        "memory Gi",
        pod(CPU, {"gpu-memory": "2Gi"}),
        ('gpu-memory: "2Gi" is not a whole number; write digits only',),
    ),
    (
        "memory 0",
        pod(CPU, {"gpu-memory": "0"}),
        ('gpu-memory: "0" is out of range; use 1 or more',),
    ),
    (
        "both",
        pod(CPU, {"gpu-fraction": "0.5", "gpu-memory": "2000"}),
        ("are both set", "keep the share or the MiB"),
    ),
    (
        "num devices alone",
        pod(CPU, {"gpu-fraction-num-devices": "2"}),
        ('gpu-fraction-num-devices: "2" needs gpu-fraction or gpu-memory',),
    ),
    (
        "num devices 0",
        pod(CPU, {"gpu-fraction": "0.5", "gpu-fraction-num-devices": "0"}),
        ("out of range; use 1 or more",),
    ),
    (
        "num devices text",
        pod(CPU, {"gpu-fraction": "0.5", "gpu-fraction-num-devices": "two"}),
        ("is not a whole number",),
    ),
    (
        "with nvidia.com/gpu",
        pod({"nvidia.com/gpu": "1"}, {"gpu-fraction": "0.5"}),
        ("a GPU share (gpu-fraction) and for whole GPUs (nvidia.com/gpu)",),
    ),
    (
        "fraction limit",
        pod(CPU, {"gpu-fraction": "0.5", "gpu-fraction.limit": "0.8"}),
        ("gpu-fraction.limit", "cannot enforce", "remove gpu-fraction.limit"),
    ),
    (
        "memory limit",
        pod(CPU, {"gpu-memory": "1000", "gpu-memory.limit": "2Gi"}),
        ("remove gpu-memory.limit",),
    ),
    (
        "count differs from gpusched.io/gpu",
        pod({"gpusched.io/gpu": "1"}, {"gpu-memory": "1024", "gpu-fraction-num-devices": "2"}),
        ("different numbers of GPUs",),
    ),
    (
        "memory differs from gpusched.io/vram",
        pod({"gpusched.io/gpu": "1", "gpusched.io/vram": "1Gi"}, {"gpu-memory": "2000"}),
        ('gpu-memory: "2000"', 'gpusched.io/vram: "1Gi"', "different VRAM per GPU"),
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
