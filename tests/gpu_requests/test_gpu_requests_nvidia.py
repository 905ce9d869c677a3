"""The NVIDIA device plugin's resources: whole GPUs (unchanged) and MIG devices."""

from __future__ import annotations

from typing import Any

import pytest
from gpu_request_pods import pod

from gpusched.gpu_requests import GPURequest, RequestError, read_gpu_request

GPU, MIG2, MIG1 = "nvidia.com/gpu", "nvidia.com/mig-2g.20gb", "nvidia.com/mig-1g.10gb"


def whole(count: int = 1, **kw: Any) -> GPURequest:
    return GPURequest(mode="whole", count=count, source="nvidia", **kw)


def mig(profile: str = "2g.20gb", count: int = 1, **kw: Any) -> GPURequest:
    return GPURequest(mode="mig", count=count, mig_profile=profile, source="nvidia", **kw)


ACCEPTED: list[tuple[str, dict[str, Any], GPURequest | None]] = [
    ("one GPU", pod({GPU: "1"}), whole()),
    ("eight GPUs", pod({GPU: "8"}), whole(8)),
    ("int", pod({GPU: 2}), whole(2)),
    ("requests only", pod(requests={GPU: "2"}), whole(2)),
    ("sum of containers", pod({GPU: "2"}, more=({GPU: "2"},)), whole(4)),
    ("init peak", pod({GPU: "1"}, init=({GPU: "4"},)), whole(4)),
    ("zero GPUs", pod({GPU: "0"}), None),
    ("priority", pod({GPU: "1"}, {"gpusched.io/priority": "4"}), whole(priority=4)),
    ("class", pod({GPU: "1"}, {"gpusched.io/gpu-class": "h100"}), whole(gpu_class="h100")),
    ("ids", pod({GPU: "2"}, {"gpusched.io/gpu-ids-request": "0,2"}), whole(2, gpu_ids=(0, 2))),
    (
        "exclusive is a no-op",
        pod({GPU: "1"}, {"gpusched.io/exclusive": "true"}),
        whole(exclusive=True),
    ),
    ("swap false is fine", pod({GPU: "1"}, {"gpusched.io/swap-from-vram": "false"}), whole()),
    ("mig", pod({MIG2: "1"}), mig()),
    ("mig x3", pod({MIG1: "3"}), mig("1g.10gb", 3)),
    ("mig +me", pod({"nvidia.com/mig-1g.10gb+me": "1"}), mig("1g.10gb+me")),
    ("mig h200 profile", pod({"nvidia.com/mig-2g.35gb": "1"}), mig("2g.35gb")),
    (
        "mig fallback",
        pod({MIG2: "1"}, {"gpusched.io/mig-fallback": "1g.10gb"}),
        mig(mig_fallbacks=("1g.10gb",)),
    ),
    (
        "mig fallbacks in order",
        pod({"nvidia.com/mig-3g.40gb": "1"}, {"gpusched.io/mig-fallback": "2g.20gb, 1g.10gb"}),
        mig("3g.40gb", mig_fallbacks=("2g.20gb", "1g.10gb")),
    ),
    ("mig zero", pod({MIG2: "0"}), None),
]


@pytest.mark.parametrize(("pod_", "want"), [a[1:] for a in ACCEPTED], ids=[a[0] for a in ACCEPTED])
def test_accepted(pod_: dict[str, Any], want: GPURequest | None) -> None:
    assert read_gpu_request(pod_) == want


REJECTED: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
    (
        "whole and mig",
        pod({GPU: "1", MIG2: "1"}),
        ("requests whole GPUs (nvidia.com/gpu) and MIG devices", "not both"),
    ),
    (
        "whole and mig apart",
        pod({GPU: "1"}, more=({MIG1: "1"},)),
        ("MIG devices (nvidia.com/mig-1g.10gb) together",),
    ),
    (
        "two profiles",
        pod({MIG2: "1", MIG1: "1"}),
        ("MIG devices of several profiles", "gpusched.io/mig-fallback"),
    ),
    (
        "fractional",
        pod({GPU: "0.5"}),
        ('nvidia.com/gpu: "0.5" (container "main") is not a whole number',),
    ),
    ("milli", pod({GPU: "500m"}), ("is not a whole number",)),
    ("negative", pod({GPU: "-2"}), ("out of range",)),
    ("garbage", pod({GPU: "lots"}), ('nvidia.com/gpu: "lots" (container "main") is not a number',)),
    (
        "bad profile",
        pod({"nvidia.com/mig-big": "1"}),
        ('"big" is not a MIG profile name', '"1g.10gb"'),
    ),
    (
        "bad fallback",
        pod({MIG2: "1"}, {"gpusched.io/mig-fallback": "small"}),
        ('"small" is not a MIG profile name',),
    ),
    (
        "fallback repeats",
        pod({MIG2: "1"}, {"gpusched.io/mig-fallback": "1g.10gb,1g.10gb"}),
        ("lists 1g.10gb twice",),
    ),
    (
        "fallback is the profile",
        pod({MIG2: "1"}, {"gpusched.io/mig-fallback": "2g.20gb"}),
        ("lists 2g.20gb, the profile the pod asks for",),
    ),
    (
        "fallback on whole",
        pod({GPU: "1"}, {"gpusched.io/mig-fallback": "1g.10gb"}),
        ("applies to MIG requests",),
    ),
    (
        "fallback alone",
        pod({"cpu": "1"}, {"gpusched.io/mig-fallback": "1g.10gb"}),
        ("asks for no GPU",),
    ),
    (
        "ids on mig",
        pod({MIG2: "1"}, {"gpusched.io/gpu-ids-request": "0"}),
        ("MIG devices are placed by profile",),
    ),
    (
        "ids count",
        pod({GPU: "2"}, {"gpusched.io/gpu-ids-request": "0"}),
        ("lists 1 GPU(s) but the pod asks for 2",),
    ),
    (
        "vram on whole",
        pod({GPU: "1", "gpusched.io/vram": "20Gi"}),
        (
            'gpusched.io/vram: "20Gi" applies to shared GPUs, but nvidia.com/gpu: "1"',
            "asks for whole GPUs",
        ),
    ),
    (
        "swap on whole",
        pod({GPU: "1"}, {"gpusched.io/swap-from-vram": "true"}),
        ("applies to shared GPUs",),
    ),
    ("vram on mig", pod({MIG2: "1", "gpusched.io/vram": "20Gi"}), ("asks for MIG devices",)),
]


@pytest.mark.parametrize(
    ("pod_", "fragments"), [r[1:] for r in REJECTED], ids=[r[0] for r in REJECTED]
)
def test_rejected(pod_: dict[str, Any], fragments: tuple[str, ...]) -> None:
    with pytest.raises(RequestError) as err:
        read_gpu_request(pod_)
    for fragment in fragments:
        assert fragment in str(err.value)
