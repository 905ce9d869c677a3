"""The mutating webhook's patch, table-driven: which pods and containers get which variables,
user variables kept with a warning, idempotence (the patch applied as the API server applies
it, then a second pass changes nothing), and the MIG fallback seam."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

import gpusched.webhook as webhook
from gpusched.annotations import GPU_IDS, GPU_UUIDS, RESERVED_VRAM_MIB
from gpusched.gpu_requests import read_gpu_request
from gpusched.sim.patch import json_patch
from gpusched.webhook import PatchOp, fallback_ops, gpu_kind, mutate_pod
from gpusched.webhook.mutate import MIG_FALLBACK_APPLIED, annotation_env, pointer

SHARED_VARS = [
    "NVIDIA_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
    "GPUSCHED_GPU_IDS",
    "GPUSCHED_GPU_UUIDS",
    "GPUSCHED_VRAM_MIB",
]
DEVICE_PLUGIN_VARS = ["GPUSCHED_GPU_IDS", "GPUSCHED_GPU_UUIDS"]


def container(
    name: str = "main", limits: Mapping[str, str] | None = None, **extra: Any
) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "image": "cuda"}
    if limits:
        out["resources"] = {"limits": dict(limits)}
    out.update(extra)
    return out


def pod(
    *containers: dict[str, Any],
    init: Sequence[dict[str, Any]] = (),
    scheduler: str | None = "gpusched",
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if init:
        spec["initContainers"] = list(init)
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    meta: dict[str, Any] = {"name": "p", "namespace": "default"}
    if annotations is not None:
        meta["annotations"] = dict(annotations)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def env_names(p: Mapping[str, Any], group: str = "containers", index: int = 0) -> list[str]:
    c = p["spec"][group][index]
    return [e["name"] for e in c.get("env") or []]


GPU = {"nvidia.com/gpu": "2"}
SHARED = {"gpusched.io/gpu": "1", "gpusched.io/vram": "20Gi"}

# name, pod, {(group, index): variables expected after the patch}, warnings expected
CASES: list[tuple[str, dict[str, Any], dict[tuple[str, int], list[str]], int]] = [
    ("no GPUs", pod(container()), {("containers", 0): []}, 0),
    (
        "another scheduler",
        pod(container(limits=SHARED), scheduler="default-scheduler"),
        {("containers", 0): []},
        0,
    ),
    ("no schedulerName", pod(container(limits=GPU), scheduler=None), {("containers", 0): []}, 0),
    (
        "whole GPUs: ids only, the device plugin sets the rest",
        pod(container(limits=GPU)),
        {("containers", 0): DEVICE_PLUGIN_VARS},
        0,
    ),
    (
        "MIG profile",
        pod(container(limits={"nvidia.com/mig-2g.20gb": "1"})),
        {("containers", 0): DEVICE_PLUGIN_VARS},
        0,
    ),
    ("gpusched share", pod(container(limits=SHARED)), {("containers", 0): SHARED_VARS}, 0),
    (
        "HAMi share",
        pod(container(limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000"})),
        {("containers", 0): SHARED_VARS},
        0,
    ),
    (
        "WoolyAI share",
        pod(container(limits={"woolyai.com/gpu": "1"})),
        {("containers", 0): SHARED_VARS},
        0,
    ),
    (
        "KAI fraction by annotation: every app container, no init container",
        pod(
            container("a"),
            container("b"),
            init=[container("i")],
            annotations={"gpu-fraction": "0.5"},
        ),
        {("containers", 0): SHARED_VARS, ("containers", 1): SHARED_VARS, ("initContainers", 0): []},
        0,
    ),
    (
        "only the containers that ask; the sidecar gets nothing",
        pod(container("main", limits=SHARED), container("sidecar")),
        {("containers", 0): SHARED_VARS, ("containers", 1): []},
        0,
    ),
    (
        "an init container that asks gets them too",
        pod(container("main", limits=GPU), init=[container("loader", limits=GPU)]),
        {("containers", 0): DEVICE_PLUGIN_VARS, ("initContainers", 0): DEVICE_PLUGIN_VARS},
        0,
    ),
    (
        "existing env is appended to",
        pod(container(limits=SHARED, env=[{"name": "A", "value": "1"}])),
        {("containers", 0): ["A", *SHARED_VARS]},
        0,
    ),
    (
        "env: null is replaced",
        pod(container(limits=GPU, env=None)),
        {("containers", 0): DEVICE_PLUGIN_VARS},
        0,
    ),
    (
        "a variable gpusched already set is not set twice nor warned about",
        pod(container(limits=GPU, env=[annotation_env("GPUSCHED_GPU_IDS", GPU_IDS)])),
        {("containers", 0): DEVICE_PLUGIN_VARS},
        0,
    ),
    (
        "a user's own CUDA_VISIBLE_DEVICES is kept, with a warning",
        pod(container(limits=SHARED, env=[{"name": "CUDA_VISIBLE_DEVICES", "value": "0"}])),
        {
            ("containers", 0): [
                "CUDA_VISIBLE_DEVICES",
                *[v for v in SHARED_VARS if v != "CUDA_VISIBLE_DEVICES"],
            ]
        },
        1,
    ),
]


@pytest.mark.parametrize(
    ("pod_", "expected", "warnings"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
async def test_mutation(
    pod_: dict[str, Any], expected: dict[tuple[str, int], list[str]], warnings: int
) -> None:
    mutation = await mutate_pod(pod_)
    patched = json_patch(pod_, mutation.ops) if mutation.ops else pod_
    for (group, index), names in expected.items():
        assert env_names(patched, group, index) == names
    assert len(mutation.warnings) == warnings
    for text in mutation.warnings:
        assert "left it as set" in text
        assert "remove it" in text
    # Idempotent: a second pass (reinvocation) changes nothing and warns the same.
    again = await mutate_pod(patched)
    assert again.ops == []
    assert len(again.warnings) == warnings


async def test_values_are_fieldrefs_to_the_binding_annotations() -> None:
    mutation = await mutate_pod(pod(container(limits=SHARED)))
    env = {
        e["name"]: e
        for e in json_patch(pod(container(limits=SHARED)), mutation.ops)["spec"]["containers"][0][
            "env"
        ]
    }
    assert env["CUDA_VISIBLE_DEVICES"] == annotation_env("CUDA_VISIBLE_DEVICES", GPU_UUIDS)
    assert env["NVIDIA_VISIBLE_DEVICES"]["valueFrom"]["fieldRef"] == {
        "apiVersion": "v1",
        "fieldPath": f"metadata.annotations['{GPU_UUIDS}']",
    }
    assert env["GPUSCHED_GPU_IDS"] == annotation_env("GPUSCHED_GPU_IDS", GPU_IDS)
    assert env["GPUSCHED_VRAM_MIB"] == annotation_env("GPUSCHED_VRAM_MIB", RESERVED_VRAM_MIB)


async def test_visible_devices_for_device_plugin_pods_when_asked() -> None:
    p = pod(container(limits=GPU))
    mutation = await mutate_pod(p, visible_devices_for_device_plugin_pods=True)
    assert env_names(json_patch(p, mutation.ops)) == SHARED_VARS


async def test_other_scheduler_names() -> None:
    p = pod(container(limits=GPU), scheduler="gpu-batch")
    assert (await mutate_pod(p)).ops == []
    assert (await mutate_pod(p, scheduler_names=("gpusched", "gpu-batch"))).ops


@pytest.mark.parametrize(
    ("pod_", "kind"),
    [
        (pod(container()), None),
        (pod(container(limits={"cpu": "1"})), None),
        (pod(container(limits=GPU)), "device-plugin"),
        (pod(container(resources={"requests": {"nvidia.com/mig-1g.10gb": "1"}})), "device-plugin"),
        (pod(container(limits={"gpusched.io/gpu": "1"})), "shared"),
        (pod(container(limits={"nvidia.com/gpu": "1", "nvidia.com/gpucores": "30"})), "shared"),
        (pod(container(), annotations={"gpu-memory": "4000"}), "shared"),
    ],
)
def test_gpu_kind(pod_: dict[str, Any], kind: str | None) -> None:
    assert gpu_kind(pod_) == kind


# -- MIG fallback seam -----------------------------------------------------------------------

MIG_POD = pod(
    container(
        "main",
        limits={"nvidia.com/mig-2g.20gb": "1"},
        resources={
            "limits": {"nvidia.com/mig-2g.20gb": "1"},
            "requests": {"nvidia.com/mig-2g.20gb": "1"},
        },
    ),
)


@pytest.mark.parametrize("annotations", [None, {"team": "a"}])
def test_fallback_ops_rewrite_the_request_and_record_it(
    annotations: dict[str, str] | None,
) -> None:
    p = pod(*MIG_POD["spec"]["containers"], annotations=annotations)
    patched = json_patch(p, fallback_ops(p, "2g.20gb", "1g.10gb"))
    resources = patched["spec"]["containers"][0]["resources"]
    assert resources == {
        "limits": {"nvidia.com/mig-1g.10gb": "1"},
        "requests": {"nvidia.com/mig-1g.10gb": "1"},
    }
    assert patched["metadata"]["annotations"][MIG_FALLBACK_APPLIED] == "2g.20gb->1g.10gb"
    assert patched["metadata"]["annotations"].get("team") == (annotations or {}).get("team")


@pytest.mark.parametrize(
    ("listed", "chosen", "left"),
    [
        ("1g.10gb", "1g.10gb", None),
        ("3g.40gb,1g.10gb", "1g.10gb", None),
        ("1g.10gb,1g.5gb", "1g.10gb", "1g.5gb"),
        ("3g.40gb, 1g.10gb ,1g.5gb", "1g.10gb", "1g.5gb"),
        ("1g.5gb", "1g.10gb", "1g.5gb"),  # a profile the list does not name: the list stays
    ],
)
def test_fallback_ops_keep_only_the_fallbacks_after_the_chosen_one(
    listed: str, chosen: str, left: str | None
) -> None:
    p = pod(*MIG_POD["spec"]["containers"], annotations={"gpusched.io/mig-fallback": listed})
    patched = json_patch(p, fallback_ops(p, "2g.20gb", chosen))
    assert patched["metadata"]["annotations"].get("gpusched.io/mig-fallback") == left
    request = read_gpu_request(patched)  # what the validator reads after the mutation
    assert request is not None
    assert (request.mig_profile, request.mig_fallbacks) == (
        chosen,
        tuple(left.split(",")) if left else (),
    )


async def test_the_fallback_hook_is_called_for_mig_pods_only_and_its_ops_come_first() -> None:
    seen: list[str] = []

    async def hook(p: Mapping[str, Any]) -> Sequence[PatchOp] | None:
        seen.append(p["spec"]["containers"][0]["name"])
        return fallback_ops(p, "2g.20gb", "1g.10gb")

    await mutate_pod(pod(container("whole", limits=GPU)), mig_fallback=hook)
    mutation = await mutate_pod(MIG_POD, mig_fallback=hook)
    assert seen == ["main"]
    assert mutation.ops[0]["op"] == "remove"
    patched = json_patch(MIG_POD, mutation.ops)
    assert "nvidia.com/mig-1g.10gb" in patched["spec"]["containers"][0]["resources"]["limits"]
    assert env_names(patched) == DEVICE_PLUGIN_VARS


async def test_a_hook_that_declines_changes_nothing_but_the_env() -> None:
    async def hook(p: Mapping[str, Any]) -> Sequence[PatchOp] | None:
        return None

    mutation = await mutate_pod(MIG_POD, mig_fallback=hook)
    assert all("/env" in op["path"] for op in mutation.ops)


def test_pointer_escapes_slashes_and_tildes() -> None:
    assert pointer("a", "nvidia.com/mig-1g.10gb", 0, "x~y") == "/a/nvidia.com~1mig-1g.10gb/0/x~0y"


def test_all_is_complete() -> None:
    import gpusched.webhook.certs as certs
    import gpusched.webhook.config as config
    import gpusched.webhook.mig_view as mig_view
    import gpusched.webhook.mutate as mutate
    import gpusched.webhook.server as server
    import gpusched.webhook.validate as validate

    for module in (webhook, certs, config, mig_view, mutate, server, validate):
        for name in module.__all__:
            assert hasattr(module, name), (module.__name__, name)
    public = {n for n in vars(webhook) if not n.startswith("_")} - {
        "annotations",
        "certs",
        "config",
        "mig_view",
        "mutate",
        "server",
        "validate",
    }
    assert public <= set(webhook.__all__)
