"""``gpusched sim run`` with claims: the ``claims`` workload on the ``dgx-h100-dra`` fleet.

What a wave's ``claim:`` becomes (the GpuClaim per pod, the ResourceClaimTemplate per wave and
what the pod says), the messages for bad input (exit status 2 from the command), and a short
real-clock run of the shipped workload with 3 s pods: the plain and GpuClaim pods bind, each
GpuClaim's status names its pod, and the run deletes every GpuClaim once its pod is done; the
DRA pods bind with their claim allocated by the DynamicResources plugin.
"""

from __future__ import annotations

import io
import subprocess
import sys
from importlib import resources
from pathlib import Path
from typing import Any, cast

import pytest

from gpusched.kube.client import Kube
from gpusched.sim.fleet import load_cluster_spec
from gpusched.sim.resource_slices import DEVICE_CLASSES
from gpusched.sim.run import RunReport, pod_shape, run_workload
from gpusched.sim.workload import (
    Workload,
    WorkloadError,
    arrivals,
    claim_objects,
    load_workload,
    object_path,
)

SHIPPED = resources.files("gpusched.sim").joinpath("workloads", "claims.yaml")


def one_wave(pod: dict[str, Any], count: int = 2) -> Workload:
    return Workload.model_validate(
        {"name": "w", "waves": [{"name": "a", "count": count, "pod": pod}]}
    )


def test_the_claims_workload_mixes_the_three_forms() -> None:
    workload = load_workload("claims")
    kinds = {w.name: w.pod.claim for w in workload.waves}
    assert set(kinds.values()) == {None, "gpuclaim", "dra"}
    objects = [o for objs in claim_objects(workload).values() for o in objs]
    gpuclaims = sum(w.count for w in workload.waves if w.pod.claim == "gpuclaim")
    assert [o["kind"] for o in objects].count("GpuClaim") == gpuclaims
    assert [o["kind"] for o in objects].count("ResourceClaimTemplate") == 1
    assert load_cluster_spec("dgx-h100-dra").dra


@pytest.mark.parametrize(
    ("pod", "limits", "devices"),
    [
        (
            {"gpus": 2, "claim": "gpuclaim"},
            {"nvidia.com/gpu": "2"},
            {"count": 2, "exclusivity": "Exclusive"},
        ),
        (
            {"vram": "20Gi", "shared": 2, "claim": "gpuclaim"},
            {"gpusched.io/gpu": "2", "gpusched.io/vram": "20Gi"},
            {"count": 2, "exclusivity": "Shared", "vramPerDevice": "20Gi"},
        ),
        (
            {"mig": "1g.10gb", "claim": "gpuclaim"},
            {"nvidia.com/mig-1g.10gb": "1"},
            {"count": 1, "exclusivity": "Exclusive", "migProfile": "1g.10gb"},
        ),
        (
            {"gpus": 4, "claim": "gpuclaim", "contiguous": True},
            {"nvidia.com/gpu": "4"},
            {"count": 4, "exclusivity": "Exclusive", "policy": "contiguous"},
        ),
    ],
)
def test_a_gpuclaim_pod_names_its_own_claim_and_asks_for_its_devices(
    pod: dict[str, Any], limits: dict[str, str], devices: dict[str, Any]
) -> None:
    workload = one_wave(pod)
    claims = claim_objects(workload)
    for _, manifest in arrivals(workload):
        name = manifest["metadata"]["name"]
        assert manifest["metadata"]["annotations"]["gpu.scheduling/claim"] == name
        assert manifest["spec"]["containers"][0]["resources"]["limits"] == {
            "cpu": "1",
            "memory": "4Gi",
            **limits,
        }
        (claim,) = claims[name]
        assert claim["metadata"]["name"] == name
        assert claim["metadata"]["labels"] == {"gpusched.io/workload": "w", "gpusched.io/wave": "a"}
        assert claim["spec"] == {"devices": devices}
        assert object_path(claim) == "/apis/gpu.scheduling/v1/namespaces/default/gpuclaims"


def test_gpuclaim_topology_fields() -> None:
    workload = one_wave(
        {"gpus": 2, "claim": "gpuclaim", "topologyMode": "Required", "minBandwidthGBps": 600}
    )
    (claim,) = claim_objects(workload)["w-a-00000"]
    assert claim["spec"]["topology"] == {"mode": "Required", "minBandwidthGBps": 600.0}


def test_a_dra_wave_has_one_template_and_its_pods_refer_to_it() -> None:
    workload = one_wave({"gpus": 2, "claim": "dra"}, count=3)
    claims = claim_objects(workload)
    assert list(claims) == ["w-a-00000"]  # created before the wave's first pod
    (template,) = claims["w-a-00000"]
    assert template["kind"] == "ResourceClaimTemplate"
    assert template["metadata"]["name"] == "w-a"
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    published = {c["metadata"]["name"] for c in DEVICE_CLASSES}
    assert request["exactly"]["deviceClassName"] in published
    assert request["exactly"] == {"deviceClassName": "gpu.nvidia.com", "count": 2}
    assert template["spec"]["metadata"]["labels"]["gpusched.io/workload"] == "w"
    for _, pod in arrivals(workload):
        assert pod["spec"]["resourceClaims"] == [
            {"name": "gpus", "resourceClaimTemplateName": "w-a"}
        ]
        (container,) = pod["spec"]["containers"]
        assert container["resources"]["claims"] == [{"name": "gpus"}]
        assert container["resources"]["limits"] == {"cpu": "1", "memory": "4Gi"}


BAD = [
    ("{gpus: 1, claim: volume}", "unknown claim kind 'volume': use gpuclaim"),
    ("{gpus: 0, claim: gpuclaim}", "a claim asks for 1 GPU or more"),
    ("{gpus: 0, claim: dra}", "a claim asks for 1 GPU or more"),
    ("{vram: 20Gi, claim: dra}", "claim: dra asks for whole GPUs"),
    ("{mig: 1g.10gb, claim: dra}", "claim: dra asks for whole GPUs"),
    ("{gpus: 2, contiguous: true}", "contiguous: fields of a GpuClaim; add claim: gpuclaim"),
    ("{gpus: 2, claim: dra, minBandwidthGBps: 600}", "a ResourceClaimTemplate pod has none"),
    ("{vram: 20Gi, exclusive: true, claim: gpuclaim}", "a GpuClaim with vram is Shared"),
    ("{mig: 2g.20gb, migFallback: [1g.10gb], claim: gpuclaim}", "drop migFallback"),
    ("{gpus: 2, claim: gpuclaim, topologyMode: Sometimes}", "topologyMode"),
]


@pytest.mark.parametrize(("pod", "message"), BAD)
def test_bad_claim_templates_name_the_problem(tmp_path: Path, pod: str, message: str) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(f"name: x\nwaves:\n- name: a\n  count: 1\n  pod: {pod}\n")
    with pytest.raises(WorkloadError, match=message) as exc:
        load_workload(path)
    assert "w.yaml" in str(exc.value)


@pytest.mark.parametrize(("pod", "message"), BAD[:2])
def test_the_command_exits_2_on_a_bad_claim(tmp_path: Path, pod: str, message: str) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(f"name: x\nwaves:\n- name: a\n  count: 1\n  pod: {pod}\n")
    command = ["sim", "run", "--cluster", "dgx-h100-dra", "--workload", str(path)]
    out = subprocess.run(
        [sys.executable, "-m", "gpusched", *command],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 2
    assert message in out.stderr
    assert "Traceback" not in out.stderr


_RUN: dict[str, tuple[RunReport, str]] = {}


async def short_run(tmp_path: Path) -> tuple[RunReport, str]:
    """The shipped workload with 3 s pods on the dgx-h100-dra fleet, once per module."""
    if "run" not in _RUN:
        path = tmp_path / "claims.yaml"
        path.write_text(SHIPPED.read_text().replace("duration: 20s", "duration: 3s"))
        out = io.StringIO()
        spec = load_cluster_spec("dgx-h100-dra")
        report = await run_workload(spec, load_workload(path), timeout=60, out=out, progress=False)
        _RUN["run"] = (report, out.getvalue())
    return _RUN["run"]


async def test_a_short_run_binds_plain_and_gpuclaim_pods_and_deletes_the_claims(
    tmp_path: Path,
) -> None:
    report, text = await short_run(tmp_path)
    workload = load_workload("claims")
    gpuclaims = sum(w.count for w in workload.waves if w.pod.claim == "gpuclaim")
    plain = sum(w.count for w in workload.waves if w.pod.claim is None)
    dra = workload.pod_count - gpuclaims - plain
    assert report.claim_pods == {"gpuclaim": gpuclaims, "dra": dra}
    assert report.claim_bound["gpuclaim"] == report.claim_allocated["gpuclaim"] == gpuclaims
    unbound = [key for key in report.pending if "-dra-" not in key]
    assert not unbound, report.pending  # every plain and GpuClaim pod bound
    assert report.succeeded >= plain + gpuclaims
    assert report.gpuclaims_deleted == gpuclaims
    assert report.gpuclaims_left == 0  # released by the scheduler, then gone
    line = (
        f"GpuClaim pods: {gpuclaims} of {gpuclaims} bound, {gpuclaims} with their claim "
        f"allocated to them; {gpuclaims} GpuClaims deleted after their pods finished, 0 left"
    )
    assert line in text
    assert "ResourceClaim (DRA) pods: " in text


async def test_dra_pods_bind_with_their_claim_allocated(tmp_path: Path) -> None:
    report, text = await short_run(tmp_path)
    dra = report.claim_pods["dra"]
    assert dra > 0
    assert report.claim_bound["dra"] == report.claim_allocated["dra"] == dra
    assert f"ResourceClaim (DRA) pods: {dra} of {dra} bound, {dra} with their claim" in text
    assert not report.pending
    # the devices are annotated on the pod as for any pod: the VRAM summary counts them
    assert report.pods_by_product["NVIDIA H100 80GB HBM3"]["DRA"] == dra


def allocated_claim(pod: str, devices: int, reserved: bool = True) -> dict[str, Any]:
    """A ResourceClaim as kube-scheduler's DynamicResources plugin leaves it (upstream's
    ``AllocationResult`` and ``ResourceClaimConsumerReference``)."""
    results = [
        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n0", "device": f"gpu-{i}"}
        for i in range(devices)
    ]
    status: dict[str, Any] = {"allocation": {"devices": {"results": results}}}
    if reserved:
        status["reservedFor"] = [{"resource": "pods", "name": pod, "uid": "u1"}]
    return {
        "metadata": {"name": f"{pod}-gpus-x1y2z", "namespace": "default"},
        "status": status,
    }


@pytest.mark.parametrize(
    ("claim", "allocated", "devices"),
    [
        (allocated_claim("w-a-00000", 2), {"default/w-a-00000"}, {"default/w-a-00000": 2}),
        (allocated_claim("w-a-00000", 2, reserved=False), set(), {}),
        ({"metadata": {"name": "c", "namespace": "default"}, "status": {}}, set(), {}),
    ],
)
def test_the_run_reads_a_dra_pods_allocation_from_its_claim(
    claim: dict[str, Any], allocated: set[str], devices: dict[str, int]
) -> None:
    """What the summary and GPU utilisation count for a DRA pod (runnable before the plugin)."""
    from gpusched.clock import RealClock
    from gpusched.sim.run import _Observer

    observer = _Observer(cast(Kube, None), one_wave({"gpus": 2, "claim": "dra"}), RealClock())
    observer._on_resourceclaim("MODIFIED", claim, None)
    assert observer.allocated == allocated
    assert observer.dra_devices == devices


def test_pod_shape_of_each_claims_wave() -> None:
    shapes = {
        pod["metadata"]["labels"]["gpusched.io/wave"]: pod_shape(pod)
        for _, pod in arrivals(load_workload("claims"))
    }
    assert shapes == {
        "plain": "whole",
        "plain-pair": "whole",
        "gpuclaim": "whole",
        "gpuclaim-shared": "shared",
        "dra": "DRA",
    }
