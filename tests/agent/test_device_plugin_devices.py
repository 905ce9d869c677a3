"""What the device plugin advertises and hands out, and which pod a call is for: pure code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpusched.agent import discover
from gpusched.agent.deviceplugin import advertise, container_response
from gpusched.agent.deviceplugin.allocation import (
    ALLOCATED,
    AllocationError,
    choose,
    format_allocated,
    parse_allocated,
    plan_pod,
    prefer,
)
from gpusched.agent.deviceplugin.devices import Granted, device_names, device_uuid, read_mig_minors
from gpusched.agent.fake_nvml import FakeNVML
from gpusched.inventory import GPUNodeInventory, node_extended_resources
from gpusched.sim.fleet import SHARED_CLIENTS_PER_GPU, build_fleet, load_cluster_spec


def _inventory(cluster: str) -> GPUNodeInventory:
    spec = load_cluster_spec(cluster)
    pool = next(p for p in spec.pools if p.gpu is not None).model_copy(update={"count": 1})
    small = spec.model_copy(update={"pools": (pool,)})
    node = build_fleet(small)[0]
    return discover(FakeNVML.of_sim_node(node, small), node.name)


@pytest.mark.parametrize(
    ("cluster", "expected"),
    [
        ("dgx-h100", {"nvidia.com/gpu": 8, "gpusched.io/gpu": 80, "woolyai.com/gpu": 80}),
        (
            "mig-small",
            {
                "nvidia.com/gpu": 0,
                "gpusched.io/gpu": 0,
                "woolyai.com/gpu": 0,
                "nvidia.com/mig-1g.10gb": 28,
            },
        ),
        ("dgx-v100", {"nvidia.com/gpu": 8, "gpusched.io/gpu": 80, "woolyai.com/gpu": 80}),
    ],
)
def test_advertised_counts(cluster: str, expected: dict[str, int]) -> None:
    advertised = advertise(_inventory(cluster))
    assert {r: len(d) for r, d in advertised.items()} == expected


@pytest.mark.parametrize("cluster", ["dgx-h100", "mig-small", "mig-medium", "mixed", "dgx-v100"])
def test_the_kubelet_sees_what_the_simulated_node_advertises(cluster: str) -> None:
    """The capacity a real node's kubelet reports from these plugins is the simulated Node's."""
    spec = load_cluster_spec(cluster)
    for node in build_fleet(spec):
        if node.inventory is None:
            continue
        advertised = {r: str(len(d)) for r, d in advertise(node.inventory).items()}
        capacity = node.node["status"]["capacity"]
        simulated = {r: capacity[r] for r in advertised}
        assert advertised == simulated, node.name
        assert set(node_extended_resources(node.inventory)) <= set(advertised)
        assert SHARED_CLIENTS_PER_GPU == 10


def test_device_ids_health_and_numa() -> None:
    inv = _inventory("dgx-h100")
    gpus = list(inv.gpus)
    gpus[2] = gpus[2].model_copy(update={"health": "Unhealthy"})
    advertised = advertise(inv.model_copy(update={"gpus": tuple(gpus)}), shared_replicas=2)
    whole = [d.to_proto() for d in advertised["nvidia.com/gpu"]]
    assert [d.ID for d in whole] == [g.uuid for g in gpus]
    assert [d.health for d in whole].count("Unhealthy") == 1
    assert whole[2].health == "Unhealthy"
    assert [n.ID for n in whole[0].topology.nodes] == [gpus[0].numa_node]
    shared = [d.id for d in advertised["gpusched.io/gpu"]]
    assert shared[:2] == [f"{gpus[0].uuid}::0", f"{gpus[0].uuid}::1"]
    assert all(len(i) <= 63 for i in shared)  # the API's limit on a device ID
    assert {device_uuid(i) for i in shared} == {g.uuid for g in gpus}


def test_whole_gpu_replicas_and_no_shared_resources() -> None:
    inv = _inventory("dgx-h100")
    advertised = advertise(inv, shared_replicas=0, whole_gpu_replicas=4)
    assert set(advertised) == {"nvidia.com/gpu"}
    assert len(advertised["nvidia.com/gpu"]) == 32


def test_mig_devices_carry_their_parent_gpu() -> None:
    inv = _inventory("mig-small")
    devices = advertise(inv)["nvidia.com/mig-1g.10gb"]
    assert [d.id for d in devices] == [m.uuid for g in inv.gpus for m in g.mig_devices]
    assert all(d.mig is not None and d.mig in d.gpu.mig_devices for d in devices)


# -- container responses ---------------------------------------------------------------------


def test_container_response_env_and_device_specs(tmp_path: Path) -> None:
    inv = _inventory("dgx-h100")
    g0, g3 = inv.gpus[0], inv.gpus[3]
    for name in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia3"):
        (tmp_path / name).touch()
    response = container_response(
        [Granted(g3, vram_mib=2048), Granted(g0, vram_mib=1024)],
        cores_percent=25,
        dev_root=tmp_path,
    )
    assert dict(response.envs) == {
        "NVIDIA_VISIBLE_DEVICES": f"{g3.uuid},{g0.uuid}",
        "CUDA_VISIBLE_DEVICES": f"{g3.uuid},{g0.uuid}",
        "CUDA_DEVICE_MEMORY_LIMIT_0": "2048m",
        "CUDA_DEVICE_MEMORY_LIMIT_1": "1024m",
        "CUDA_DEVICE_SM_LIMIT": "25",
    }
    # only the nodes that exist on the host (nvidia-modeset and nvidia0 do not, here)
    assert [(d.container_path, d.host_path, d.permissions) for d in response.devices] == [
        ("/dev/nvidiactl", "/dev/nvidiactl", "rw"),
        ("/dev/nvidia-uvm", "/dev/nvidia-uvm", "rw"),
        ("/dev/nvidia-uvm-tools", "/dev/nvidia-uvm-tools", "rw"),
        ("/dev/nvidia3", "/dev/nvidia3", "rw"),
    ]


MIG_MINORS_TEXT = """\
config 1
monitor 2
gpu0/gi1/access 12
gpu0/gi1/ci0/access 13
gpu5/gi2/access 57
gpu5/gi2/ci0/access 58
"""


@pytest.mark.parametrize(
    ("minor", "mig", "names"),
    [
        # /dev/nvidiaN is the driver's minor number, not the NVML index (here index 2)
        (5, False, ["nvidia5"]),
        (None, False, ["nvidia2"]),  # NVML gave no minor: the index
        # a MIG device: its GPU and its GPU and compute instances' capability nodes
        (5, True, ["nvidia5", "nvidia-caps/nvidia-cap57", "nvidia-caps/nvidia-cap58"]),
        (0, True, ["nvidia0"]),  # not in the driver's table: no capability node to pass
    ],
)
def test_device_nodes_follow_the_minor_number(
    tmp_path: Path, minor: int | None, mig: bool, names: list[str]
) -> None:
    (tmp_path / "mig-minors").write_text(MIG_MINORS_TEXT)
    minors = read_mig_minors(tmp_path / "mig-minors")
    assert minors["gpu5/gi2/ci0/access"] == 58
    inv = _inventory("mig-small")
    gpu = next(g for g in inv.gpus if g.mig_devices)
    gpu = gpu.model_copy(update={"index": 2, "minor_number": minor})
    dev = gpu.mig_devices[0].model_copy(update={"gpu_instance_id": 2, "compute_instance_id": 0})
    if minor == 0:
        dev = dev.model_copy(update={"gpu_instance_id": 9})
    assert device_names(Granted(gpu, dev if mig else None), minors) == names


def test_no_mig_minors_table_is_empty(tmp_path: Path) -> None:
    assert read_mig_minors(tmp_path / "absent") == {}


def test_whole_gpus_have_no_limits() -> None:
    inv = _inventory("dgx-h100")
    response = container_response([Granted(inv.gpus[1])], cores_percent=50, dev_root=Path("/x"))
    assert set(response.envs) == {"NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"}
    assert list(response.devices) == []


# -- which pod, which devices --------------------------------------------------------------


def _pod(
    name: str,
    containers: list[tuple[str, int]],
    uuids: list[str],
    *,
    init: list[tuple[str, int]] | None = None,
    resource: str = "nvidia.com/gpu",
    bound: str = "2026-11-28T01:00:00Z",
    allocated: str | None = None,
) -> dict[str, Any]:
    annotations = {
        "gpusched.io/gpu-ids": ",".join(str(i) for i in range(len(uuids))),
        "gpusched.io/gpu-uuids": ",".join(uuids),
        "gpusched.io/reserved-vram-mib": ",".join("1000" for _ in uuids),
    }
    if allocated is not None:
        annotations[ALLOCATED] = allocated

    def c(n: str, k: int) -> dict[str, Any]:
        return {"name": n, "resources": {"limits": {resource: str(k)}} if k else {}}

    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "annotations": annotations,
            "creationTimestamp": "2026-11-28T00:00:00Z",
        },
        "spec": {
            "initContainers": [c(n, k) for n, k in init or []],
            "containers": [c(n, k) for n, k in containers],
        },
        "status": {
            "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": bound}]
        },
    }


@pytest.mark.parametrize(
    ("containers", "init", "slices"),
    [
        ([("main", 2)], [], [("main", 0, 2)]),
        ([("a", 1), ("b", 0), ("c", 2)], [], [("a", 0, 1), ("c", 1, 3)]),
        ([("a", 2), ("b", 1)], [("setup", 1)], [("setup", 0, 1), ("a", 0, 2), ("b", 2, 3)]),
    ],
)
def test_containers_split_the_devices_in_order(
    containers: list[tuple[str, int]], init: list[tuple[str, int]], slices: list[Any]
) -> None:
    uuids = ["GPU-a", "GPU-b", "GPU-c"][: sum(k for _, k in containers)]
    plan = plan_pod(_pod("p", containers, uuids, init=init), "nvidia.com/gpu")
    assert plan is not None
    assert list(plan.containers) == slices


@pytest.mark.parametrize(
    ("containers", "uuids", "message"),
    [
        (
            [("main", 2)],
            ["GPU-a"],
            "containers ask for 2 nvidia.com/gpu but its annotations list 1",
        ),
        (
            [("main", 1)],
            ["GPU-a", "GPU-b"],
            "containers ask for 1 nvidia.com/gpu but its annotations list 2",
        ),
    ],
)
def test_disagreeing_pods_are_named(
    containers: list[tuple[str, int]], uuids: list[str], message: str
) -> None:
    with pytest.raises(AllocationError, match=f"pod ns/p: its {message}"):
        plan_pod(_pod("p", containers, uuids), "nvidia.com/gpu")


def test_pods_without_the_resource_or_an_assignment_are_not_plans() -> None:
    pod = _pod("p", [("main", 1)], ["GPU-a"])
    assert plan_pod(pod, "gpusched.io/gpu") is None
    del pod["metadata"]["annotations"]["gpusched.io/gpu-ids"]
    assert plan_pod(pod, "nvidia.com/gpu") is None


def _plans(*pods: dict[str, Any]) -> list[Any]:
    out = [plan_pod(p, "nvidia.com/gpu") for p in pods]
    assert all(p is not None for p in out)
    return out


@pytest.mark.parametrize(
    ("ids", "chosen"),
    [
        (["GPU-c", "GPU-d"], "late"),  # the devices name the pod
        (["GPU-b", "GPU-a"], "early"),  # in any order
        (["GPU-x", "GPU-y"], "early"),  # the kubelet ignored the preference: oldest bind
        (["GPU-a"], None),  # no pod waits for one device
    ],
)
def test_choose(ids: list[str], chosen: str | None) -> None:
    plans = _plans(
        _pod("late", [("main", 2)], ["GPU-c", "GPU-d"], bound="2026-11-28T01:00:05Z"),
        _pod("early", [("main", 2)], ["GPU-a", "GPU-b"], bound="2026-11-28T01:00:01Z"),
        _pod("served", [("main", 2)], ["GPU-e", "GPU-f"], allocated="nvidia.com/gpu=1"),
    )
    plan = choose(plans, ids)
    assert (plan.pod["metadata"]["name"] if plan else None) == chosen


def test_replica_ids_name_their_gpu() -> None:
    plans = _plans(
        _pod("a", [("main", 1)], ["GPU-a"], bound="2026-11-28T01:00:01Z"),
        _pod("b", [("main", 1)], ["GPU-b"], bound="2026-11-28T01:00:05Z"),
    )
    plan = choose(plans, ["GPU-b::7"])
    assert plan is not None
    assert plan.pod["metadata"]["name"] == "b"


@pytest.mark.parametrize(
    ("available", "must", "size", "picked"),
    [
        (["GPU-z", "GPU-b", "GPU-a"], [], 2, ["GPU-a", "GPU-b"]),
        (["GPU-a::0", "GPU-a::1", "GPU-b::0"], [], 2, ["GPU-a::0", "GPU-b::0"]),
        (["GPU-z", "GPU-b"], ["GPU-a"], 2, ["GPU-a", "GPU-b"]),  # reused init device first
        (["GPU-z", "GPU-y"], [], 2, ["GPU-z", "GPU-y"]),  # not available: filled up
        (["GPU-z", "GPU-a"], [], 1, ["GPU-z"]),  # no pod waits for 1: the first available
    ],
)
def test_prefer(available: list[str], must: list[str], size: int, picked: list[str]) -> None:
    plans = _plans(_pod("p", [("main", 2)], ["GPU-a", "GPU-b"]))
    assert prefer(plans, available, must, size) == picked


def test_allocated_annotation_round_trips() -> None:
    served = {"nvidia.com/gpu": 2, "gpusched.io/gpu": 1}
    text = format_allocated(served)
    assert text == "gpusched.io/gpu=1,nvidia.com/gpu=2"
    assert parse_allocated(text) == served
    assert parse_allocated(None) == {}
    assert parse_allocated("junk,=3,x=y") == {}
