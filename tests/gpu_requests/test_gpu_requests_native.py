"""gpusched's own form (gpusched.io/gpu + gpusched.io/vram) and the gpusched.io annotations."""

from __future__ import annotations

from typing import Any

import pytest
from gpu_request_pods import pod

from gpusched.gpu_requests import GPURequest, RequestError, read_gpu_request

G, V = "gpusched.io/gpu", "gpusched.io/vram"


def shared(**kw: Any) -> GPURequest:
    return GPURequest(mode="shared", **{"count": 1, "vram_mib": 20480, **kw})


ACCEPTED: list[tuple[str, dict[str, Any], GPURequest | None]] = [
    ("20Gi", pod({G: "1", V: "20Gi"}), shared()),
    ("16000Mi x2", pod({G: "2", V: "16000Mi"}), shared(count=2, vram_mib=16000)),
    ("int count", pod({G: 1, V: "20Gi"}), shared()),
    ("decimal G rounds up to MiB", pod({G: "1", V: "1G"}), shared(vram_mib=954)),
    ("requests only", pod(requests={G: "1", V: "20Gi"}), shared()),
    ("limits win over requests", pod({G: "1", V: "20Gi"}, requests={V: "10Gi"}), shared()),
    ("counts add across containers", pod({G: "1", V: "20Gi"}, more=({G: "1"},)), shared(count=2)),
    ("init container peak", pod({G: "1", V: "20Gi"}, init=({G: "1"},)), shared()),
    ("gpu 0 is no request", pod({G: "0"}), None),
    ("priority", pod({G: "1", V: "20Gi"}, {"gpusched.io/priority": "3"}), shared(priority=3)),
    (
        "exclusive",
        pod({G: "1", V: "20Gi"}, {"gpusched.io/exclusive": "true"}),
        shared(exclusive=True),
    ),
    ("exclusive False", pod({G: "1", V: "20Gi"}, {"gpusched.io/exclusive": "False"}), shared()),
    (
        "swap",
        pod({G: "1", V: "20Gi"}, {"gpusched.io/swap-from-vram": "true"}),
        shared(swap_from_vram=True),
    ),
    (
        "class",
        pod({G: "1", V: "20Gi"}, {"gpusched.io/gpu-class": "a100-shared"}),
        shared(gpu_class="a100-shared"),
    ),
    (
        "gpu ids",
        pod({G: "2", V: "20Gi"}, {"gpusched.io/gpu-ids-request": "2, 0"}),
        shared(count=2, gpu_ids=(2, 0)),
    ),
    (
        "preferred node",
        pod({G: "1", V: "20Gi"}, {"gpusched.io/preferred-node": "dgx-h100-003"}),
        shared(preferred_node="dgx-h100-003"),
    ),
    ("no GPU, priority only", pod({"cpu": "1"}, {"gpusched.io/priority": "2"}), None),
    ("no GPU at all", pod({"cpu": "1", "memory": "1Gi"}), None),
    ("no containers", {"metadata": {}, "spec": {}}, None),
]


@pytest.mark.parametrize(("pod_", "want"), [a[1:] for a in ACCEPTED], ids=[a[0] for a in ACCEPTED])
def test_accepted(pod_: dict[str, Any], want: GPURequest | None) -> None:
    assert read_gpu_request(pod_) == want


REJECTED: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
    (
        "vram missing",
        pod({G: "1"}),
        ('gpusched.io/gpu: "1" asks for shared GPUs', 'gpusched.io/vram: "20Gi"'),
    ),
    (
        "vram not a quantity",
        pod({G: "1", V: "20GB"}),
        ('gpusched.io/vram: "20GB" is not a quantity; write it as 20Gi or 20000Mi',),
    ),
    (
        "vram no unit",
        pod({G: "1", V: "16000"}),
        ("has no unit, so it means 16000 bytes", "20000Mi"),
    ),
    ("vram zero", pod({G: "1", V: "0Gi"}), ("must be more than zero",)),
    ("vram negative", pod({G: "1", V: "-1Gi"}), ("must be more than zero",)),
    ("vram under 1Mi", pod({G: "1", V: "512Ki"}), ("less than 1Mi",)),
    (
        "vram without gpu",
        pod({V: "20Gi"}),
        ('gpusched.io/vram: "20Gi" is set but the pod asks for no GPU',),
    ),
    (
        "count fractional",
        pod({G: "1.5", V: "20Gi"}),
        ('gpusched.io/gpu: "1.5" (container "main") is not a whole number',),
    ),
    ("count negative", pod({G: "-1", V: "20Gi"}), ("is out of range; use 0 or more",)),
    (
        "count garbage",
        pod({G: "two", V: "20Gi"}),
        ('gpusched.io/gpu: "two" (container "main") is not a number',),
    ),
    (
        "vram in two containers",
        pod({G: "1", V: "20Gi"}, more=({G: "1", V: "10Gi"},)),
        ('containers "main", "c1"', "one container"),
    ),
    (
        "vram apart from gpu",
        pod({V: "20Gi"}, more=({G: "1"},)),
        ("put both in the limits of the same container",),
    ),
    (
        "priority 7",
        pod({G: "1", V: "20Gi"}, {"gpusched.io/priority": "7"}),
        ('gpusched.io/priority="7" is not a priority', "0 (highest) to 4"),
    ),
    (
        "priority text",
        pod({G: "1", V: "20Gi"}, {"gpusched.io/priority": "high"}),
        ("is not a priority",),
    ),
    (
        "exclusive yes",
        pod({G: "1", V: "20Gi"}, {"gpusched.io/exclusive": "yes"}),
        ('gpusched.io/exclusive: "yes" is not a boolean; write "true" or "false"',),
    ),
    (
        "swap 1",
        pod({G: "1", V: "20Gi"}, {"gpusched.io/swap-from-vram": "1"}),
        ('gpusched.io/swap-from-vram: "1" is not a boolean',),
    ),
    (
        "class bad name",
        pod({G: "1", V: "20Gi"}, {"gpusched.io/gpu-class": "A100 Shared"}),
        ("is not a valid GPUClass name",),
    ),
    (
        "class empty",
        pod({G: "1", V: "20Gi"}, {"gpusched.io/gpu-class": ""}),
        ("is not a valid GPUClass name",),
    ),
    (
        "node bad name",
        pod({G: "1", V: "20Gi"}, {"gpusched.io/preferred-node": "-x"}),
        ("is not a valid node name",),
    ),
    (
        "ids not integers",
        pod({G: "2", V: "20Gi"}, {"gpusched.io/gpu-ids-request": "0,a"}),
        ('gpusched.io/gpu-ids-request: "0,a" must list GPU indices', '"0,2"'),
    ),
    (
        "ids negative",
        pod({G: "2", V: "20Gi"}, {"gpusched.io/gpu-ids-request": "0,-1"}),
        ("non-negative whole numbers",),
    ),
    (
        "ids empty",
        pod({G: "1", V: "20Gi"}, {"gpusched.io/gpu-ids-request": ""}),
        ("must list GPU indices",),
    ),
    (
        "ids duplicated",
        pod({G: "2", V: "20Gi"}, {"gpusched.io/gpu-ids-request": "1,1"}),
        ("lists GPU 1 twice",),
    ),
    (
        "ids count mismatch",
        pod({G: "1", V: "20Gi"}, {"gpusched.io/gpu-ids-request": "0,2"}),
        ("lists 2 GPU(s) but the pod asks for 1; list one index per GPU",),
    ),
    (
        "ids without gpu",
        pod({"cpu": "1"}, {"gpusched.io/gpu-ids-request": "0"}),
        ("is set but the pod asks for no GPU",),
    ),
    (
        "fallback on shared",
        pod({G: "1", V: "20Gi"}, {"gpusched.io/mig-fallback": "1g.10gb"}),
        ("applies to MIG requests",),
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
