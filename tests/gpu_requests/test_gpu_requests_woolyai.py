"""The WoolyAI operator's form (seed 000): woolyai.com/gpu with woolyai.com/* annotations."""

from __future__ import annotations

from typing import Any

import pytest
from gpu_request_pods import pod

from gpusched.gpu_requests import GPURequest, RequestError, read_gpu_request

GPU = "woolyai.com/gpu"
VRAM = "woolyai.com/pod-vram"


def wooly(count: int = 1, **kw: Any) -> GPURequest:
    # WoolyAI's default: swap-from-vram true.
    return GPURequest(
        mode="shared", count=count, source="woolyai", **{"swap_from_vram": True, **kw}
    )


ACCEPTED: list[tuple[str, dict[str, Any], GPURequest | None]] = [
    ("minimal", pod({GPU: "1"}, {VRAM: "11Gi"}), wooly(vram_mib=11264)),
    ("MiB", pod({GPU: "2"}, {VRAM: "16000Mi"}), wooly(2, vram_mib=16000)),
    ("bare number is MiB", pod({GPU: "1"}, {VRAM: "16000"}), wooly(vram_mib=16000)),
    (
        "full example",
        pod(
            {GPU: "2"},
            {
                VRAM: "16000Mi",
                "woolyai.com/priority": "1",
                "woolyai.com/exclusive-gpu-use": "false",
                "woolyai.com/swap-from-vram": "true",
                "cuda.scheduler.io/gpu-class": "a100-shared",
            },
        ),
        wooly(2, vram_mib=16000, priority=1, gpu_class="a100-shared"),
    ),
    (
        "no swap",
        pod({GPU: "1"}, {VRAM: "1Gi", "woolyai.com/swap-from-vram": "false"}),
        wooly(vram_mib=1024, swap_from_vram=False),
    ),
    (
        "exclusive",
        pod({GPU: "1"}, {VRAM: "1Gi", "woolyai.com/exclusive-gpu-use": "true"}),
        wooly(vram_mib=1024, exclusive=True),
    ),
    (
        "priorities agree",
        pod({GPU: "1"}, {VRAM: "1Gi", "woolyai.com/priority": "2", "gpusched.io/priority": "2"}),
        wooly(vram_mib=1024, priority=2),
    ),
    (
        "classes agree",
        pod(
            {GPU: "1"},
            {VRAM: "1Gi", "cuda.scheduler.io/gpu-class": "l4", "gpusched.io/gpu-class": "l4"},
        ),
        wooly(vram_mib=1024, gpu_class="l4"),
    ),
    (
        "with gpusched.io/gpu and vram alike",
        pod({GPU: "1", "gpusched.io/gpu": "1", "gpusched.io/vram": "1Gi"}, {VRAM: "1024Mi"}),
        wooly(vram_mib=1024),
    ),
    ("gpu 0", pod({GPU: "0"}), None),
    ("class alone is no request", pod({"cpu": "1"}, {"cuda.scheduler.io/gpu-class": "l4"}), None),
]


@pytest.mark.parametrize(("pod_", "want"), [a[1:] for a in ACCEPTED], ids=[a[0] for a in ACCEPTED])
def test_accepted(pod_: dict[str, Any], want: GPURequest | None) -> None:
    assert read_gpu_request(pod_) == want


REJECTED: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
    (
        "vram missing",
        pod({GPU: "1"}),
        (
            'woolyai.com/gpu: "1" asks for shared GPUs but woolyai.com/pod-vram is missing',
            'woolyai.com/pod-vram: "16000Mi"',
        ),
    ),
    (
        "vram GB",
        pod({GPU: "1"}, {VRAM: "16GB"}),
        ('woolyai.com/pod-vram: "16GB" is not a quantity; write it as 20Gi or 20000Mi',),
    ),
    ("vram zero", pod({GPU: "1"}, {VRAM: "0"}), ("must be more than zero",)),
    (
        "vram without gpu",
        pod({"cpu": "1"}, {VRAM: "1Gi"}),
        ('woolyai.com/pod-vram: "1Gi" is set but the pod asks for no GPU',),
    ),
    (
        "priority 7",
        pod({GPU: "1"}, {VRAM: "1Gi", "woolyai.com/priority": "7"}),
        ('woolyai.com/priority: "7" is out of range; use from 0 to 4',),
    ),
    (
        "priority text",
        pod({GPU: "1"}, {VRAM: "1Gi", "woolyai.com/priority": "high"}),
        ("is not a whole number",),
    ),
    (
        "priorities differ",
        pod({GPU: "1"}, {VRAM: "1Gi", "woolyai.com/priority": "1", "gpusched.io/priority": "3"}),
        ('woolyai.com/priority: "1"', 'gpusched.io/priority: "3"', "different priorities"),
    ),
    (
        "exclusive yes",
        pod({GPU: "1"}, {VRAM: "1Gi", "woolyai.com/exclusive-gpu-use": "yes"}),
        ('woolyai.com/exclusive-gpu-use: "yes" is not a boolean',),
    ),
    (
        "swap maybe",
        pod({GPU: "1"}, {VRAM: "1Gi", "woolyai.com/swap-from-vram": "maybe"}),
        ("is not a boolean",),
    ),
    (
        "swaps differ",
        pod(
            {GPU: "1"},
            {
                VRAM: "1Gi",
                "woolyai.com/swap-from-vram": "true",
                "gpusched.io/swap-from-vram": "false",
            },
        ),
        ("different VRAM swap permissions",),
    ),
    (
        "class bad",
        pod({GPU: "1"}, {VRAM: "1Gi", "cuda.scheduler.io/gpu-class": "A100_Shared"}),
        ("is not a valid GPUClass name",),
    ),
    (
        "classes differ",
        pod(
            {GPU: "1"},
            {VRAM: "1Gi", "cuda.scheduler.io/gpu-class": "a", "gpusched.io/gpu-class": "b"},
        ),
        ("different GPU classes",),
    ),
    (
        "vram differs",
        pod({GPU: "1", "gpusched.io/gpu": "1", "gpusched.io/vram": "2Gi"}, {VRAM: "1Gi"}),
        ("different VRAM per GPU",),
    ),
    ("count fractional", pod({GPU: "0.5"}, {VRAM: "1Gi"}), ("is not a whole number",)),
    (
        "with nvidia.com/gpu",
        pod({GPU: "1", "nvidia.com/gpu": "1"}, {VRAM: "1Gi"}),
        ('woolyai.com/gpu: "1"', 'nvidia.com/gpu: "1"', "different kinds of GPU"),
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
