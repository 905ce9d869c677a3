"""HAMi's form: nvidia.com/gpu with nvidia.com/gpumem, gpumem-percentage, gpucores."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest
from gpu_request_pods import pod

from gpusched.gpu_requests import GPURequest, RequestError, read_gpu_request

GPU, MEM, PCT, CORES = (
    "nvidia.com/gpu",
    "nvidia.com/gpumem",
    "nvidia.com/gpumem-percentage",
    "nvidia.com/gpucores",
)


def hami(count: int = 1, **kw: Any) -> GPURequest:
    return GPURequest(mode="shared", count=count, source="hami", **kw)


ACCEPTED: list[tuple[str, dict[str, Any], GPURequest | None]] = [
    ("gpumem", pod({GPU: "1", MEM: "3000"}), hami(vram_mib=3000)),
    ("gpumem x2", pod({GPU: "2", MEM: "16000"}), hami(2, vram_mib=16000)),
    ("gpumem int", pod({GPU: 1, MEM: 3000}), hami(vram_mib=3000)),
    ("gpumem 3k is 3000 MiB", pod({GPU: "1", MEM: "3k"}), hami(vram_mib=3000)),
    ("percentage", pod({GPU: "1", PCT: "50"}), hami(vram_fraction=Fraction(1, 2))),
    ("percentage 100", pod({GPU: "1", PCT: "100"}), hami(vram_fraction=Fraction(1))),
    # HAMi: neither memory field -> defaultMem 0 -> 100% of each GPU.
    (
        "cores only: whole memory",
        pod({GPU: "1", CORES: "30"}),
        hami(vram_fraction=Fraction(1), cores_percent=30),
    ),
    ("cores 0", pod({GPU: "1", MEM: "1000", CORES: "0"}), hami(vram_mib=1000, cores_percent=0)),
    # HAMi: gpucores 100 takes an idle GPU and lets nobody join (checkCardExclusive).
    (
        "cores 100 is exclusive",
        pod({GPU: "1", MEM: "1000", CORES: "100"}),
        hami(vram_mib=1000, cores_percent=100, exclusive=True),
    ),
    # HAMi's webhook adds defaultGPUNum (1) when only memory or cores are named.
    ("no nvidia.com/gpu: one GPU", pod({MEM: "2000"}), hami(vram_mib=2000)),
    ("requests only", pod(requests={GPU: "1", MEM: "3000"}), hami(vram_mib=3000)),
    (
        "gpusched annotations apply",
        pod(
            {GPU: "1", MEM: "3000"},
            {"gpusched.io/priority": "2", "gpusched.io/swap-from-vram": "true"},
        ),
        hami(vram_mib=3000, priority=2, swap_from_vram=True),
    ),
    (
        "agrees with gpusched.io/vram",
        pod({GPU: "1", MEM: "20480", "gpusched.io/vram": "20Gi"}),
        hami(vram_mib=20480),
    ),
    (
        "exclusive annotation agrees with cores 100",
        pod({GPU: "1", MEM: "1", CORES: "100"}, {"gpusched.io/exclusive": "true"}),
        hami(vram_mib=1, cores_percent=100, exclusive=True),
    ),
]


@pytest.mark.parametrize(("pod_", "want"), [a[1:] for a in ACCEPTED], ids=[a[0] for a in ACCEPTED])
def test_accepted(pod_: dict[str, Any], want: GPURequest | None) -> None:
    assert read_gpu_request(pod_) == want


REJECTED: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
    (
        "gpumem Gi",
        pod({GPU: "1", MEM: "3Gi"}),
        ("has a binary unit", 'write nvidia.com/gpumem: "16000"', 'gpusched.io/vram: "3Gi"'),
    ),
    (
        "gpumem garbage",
        pod({GPU: "1", MEM: "lots"}),
        ('nvidia.com/gpumem: "lots" is not a number',),
    ),
    ("gpumem zero", pod({GPU: "1", MEM: "0"}), ("out of range; use 1 or more",)),
    ("gpumem fractional", pod({GPU: "1", MEM: "1.5"}), ("is not a whole number",)),
    (
        "both memory fields",
        pod({GPU: "1", MEM: "3000", PCT: "50"}),
        ("are both set", "keep one of them"),
    ),
    (
        "percentage 0",
        pod({GPU: "1", PCT: "0"}),
        ('nvidia.com/gpumem-percentage: "0" is out of range; use from 1 to 100',),
    ),
    ("percentage 150", pod({GPU: "1", PCT: "150"}), ("use from 1 to 100",)),
    (
        "cores 101",
        pod({GPU: "1", MEM: "1000", CORES: "101"}),
        ('nvidia.com/gpucores: "101" is out of range; use from 0 to 100',),
    ),
    ("cores negative", pod({GPU: "1", MEM: "1000", CORES: "-5"}), ("use from 0 to 100",)),
    (
        "gpu 0",
        pod({GPU: "0", MEM: "1000"}),
        ("nvidia.com/gpu is 0 but the pod sets HAMi's per-GPU fields (nvidia.com/gpumem)",),
    ),
    ("gpu fractional", pod({GPU: "0.5", MEM: "1000"}), ("is not a whole number",)),
    (
        "gpumem in two containers",
        pod({GPU: "1", MEM: "1000"}, more=({GPU: "1", MEM: "1000"},)),
        ("must come from one container",),
    ),
    ("gpumem apart from gpu", pod({MEM: "1000"}, more=({GPU: "1"},)), ("same container",)),
    (
        "contradicts gpusched.io/vram",
        pod({GPU: "1", MEM: "3000", "gpusched.io/vram": "20Gi"}),
        ('gpusched.io/vram: "20Gi"', 'nvidia.com/gpumem: "3000"', "different VRAM per GPU"),
    ),
    (
        "percentage beside gpusched.io/vram",
        pod({GPU: "1", PCT: "50", "gpusched.io/vram": "20Gi"}),
        ("both say how much of each GPU",),
    ),
    (
        "contradicts exclusive false",
        pod({GPU: "1", MEM: "1", CORES: "100"}, {"gpusched.io/exclusive": "false"}),
        ('nvidia.com/gpucores: "100"', 'gpusched.io/exclusive: "false"', "different exclusivity"),
    ),
    (
        "count differs from gpusched.io/gpu",
        pod({GPU: "2", MEM: "1000", "gpusched.io/gpu": "1"}),
        ("different numbers of GPUs",),
    ),
    (
        "with mig",
        pod({MEM: "1000", "nvidia.com/mig-1g.10gb": "1"}),
        ("applies to shared GPUs, but nvidia.com/mig-1g.10gb",),
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
