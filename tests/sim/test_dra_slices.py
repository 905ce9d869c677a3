"""GPU fleets published for DRA as NVIDIA's DRA driver does (``gpusched.sim.resource_slices``).

One ResourceSlice per GPU node (pool = node, driver ``gpu.nvidia.com``), devices matching the
node's GPUNodeInventory (whole GPUs with MIG off, MIG devices with it on), the driver's two
DeviceClasses, idempotent re-apply, and nothing at all without ``ClusterSpec.dra``.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpusched.dra import Allocation, allocate
from gpusched.sim import SimCluster
from gpusched.sim.fleet import apply_fleet, build_fleet, load_cluster_spec
from gpusched.sim.resource_slices import (
    DEVICE_CLASSES,
    DRIVER,
    PCI_BUS_ID,
    PCIE_ROOT,
    pcie_roots,
    product_info,
    resource_slice,
    slice_name,
)

SLICES = "/apis/resource.k8s.io/v1/resourceslices"
CLASSES = "/apis/resource.k8s.io/v1/deviceclasses"


def inventories(cluster: str) -> list[Any]:
    return [n.inventory for n in build_fleet(load_cluster_spec(cluster)) if n.inventory is not None]


def test_whole_gpus_as_the_driver_names_them() -> None:
    inv = inventories("dgx-h100")[0]
    body = resource_slice(inv)
    spec = body["spec"]
    assert body["metadata"]["name"] == slice_name(inv.node_name) == f"{inv.node_name}-{DRIVER}"
    assert spec["driver"] == "gpu.nvidia.com"
    assert spec["nodeName"] == inv.node_name
    assert spec["pool"] == {"name": inv.node_name, "generation": 1, "resourceSliceCount": 1}
    assert [d["name"] for d in spec["devices"]] == [f"gpu-{i}" for i in range(8)]
    roots = pcie_roots(inv)
    for gpu, dev in zip(inv.gpus, spec["devices"], strict=True):
        # as the driver's GpuInfo.Attributes today: no index or minor, the standard PCI ones
        assert dev["attributes"] == {
            "architecture": {"string": "Hopper"},
            "brand": {"string": "Nvidia"},
            "cudaComputeCapability": {"version": "9.0.0"},
            "cudaDriverVersion": {"version": "12.4.0"},
            "driverVersion": {"version": "550.127.5"},
            "productName": {"string": "NVIDIA H100 80GB HBM3"},
            "resource.kubernetes.io/pciBusID": {
                "string": gpu.pci_bus_id.lower().removeprefix("0000")
            },
            "resource.kubernetes.io/pcieRoot": {"string": roots[gpu.index]},
            "type": {"string": "gpu"},
            "uuid": {"string": gpu.uuid},
        }
        assert dev["capacity"] == {"memory": {"value": f"{gpu.memory_mib}Mi"}}


def test_mig_devices_replace_their_gpu() -> None:
    inv = inventories("mig-medium")[0]
    devices = resource_slice(inv)["spec"]["devices"]
    migs = [(gpu, mig) for gpu in inv.gpus for mig in gpu.mig_devices]
    assert len(devices) == len(migs) == 16
    for (gpu, mig), dev in zip(migs, devices, strict=True):
        profile_id = 14 if mig.profile == "2g.20gb" else 19
        assert dev["name"] == (
            f"gpu-{gpu.index}-mig-{profile_id}-{mig.placement_start}-{mig.placement_size}"
        )
        attrs = dev["attributes"]
        assert attrs["type"] == {"string": "mig"}
        assert attrs["uuid"] == {"string": mig.uuid}
        assert attrs["parentUUID"] == {"string": gpu.uuid}
        # as k8s-dra-driver-gpu's CommonAttributesMig: the GPU's PCI attributes, no index
        assert attrs[PCI_BUS_ID] == {"string": gpu.pci_bus_id.lower().removeprefix("0000")}
        assert attrs[PCIE_ROOT] == {"string": pcie_roots(inv)[gpu.index]}
        assert not {"index", "minor", "parentIndex"} & set(attrs)
        assert attrs["profile"] == {"string": mig.profile}
        slices = {f"memorySlice{i}" for i in range(mig.placement_start, mig.placement_end)}
        assert set(dev["capacity"]) == {"memory", *slices}
        assert dev["capacity"]["memory"] == {"value": f"{mig.memory_mib}Mi"}


@pytest.mark.parametrize(
    ("product", "expected"),
    [
        ("NVIDIA H200", ("Nvidia", "Hopper", "9.0")),
        ("NVIDIA A40", ("Nvidia", "Ampere", "8.6")),
        ("NVIDIA A100-SXM4-80GB", ("Nvidia", "Ampere", "8.0")),
        ("Tesla V100-SXM2-32GB", ("Tesla", "Volta", "7.0")),
        ("Mystery GPU", ("Nvidia", "Unknown", "")),
    ],
)
def test_product_info(product: str, expected: tuple[str, str, str]) -> None:
    assert product_info(product) == expected


def test_device_classes_select_on_type() -> None:
    assert {
        c["metadata"]["name"]: c["spec"]["selectors"][0]["cel"]["expression"]
        for c in DEVICE_CLASSES
    } == {
        "gpu.nvidia.com": "device.driver == 'gpu.nvidia.com' && "
        "device.attributes['gpu.nvidia.com'].type == 'gpu'",
        "mig.nvidia.com": "device.driver == 'gpu.nvidia.com' && "
        "device.attributes['gpu.nvidia.com'].type == 'mig'",
    }


async def test_fleet_publishes_one_slice_per_gpu_node() -> None:
    spec = load_cluster_spec("mixed").model_copy(update={"dra": True})
    gpu_nodes = sorted(n.name for n in build_fleet(spec) if n.inventory is not None)
    async with SimCluster(spec, kubelets=False) as sim:
        kube = sim.kube
        listed = await kube.get(SLICES)
        by_node = {s["spec"]["nodeName"]: s for s in listed["items"]}
        assert sorted(by_node) == gpu_nodes  # the CPU-only system pool has none
        for node in build_fleet(spec):
            if node.inventory is None:
                continue
            stored = by_node[node.name]
            assert stored["spec"]["devices"] == resource_slice(node.inventory)["spec"]["devices"]
            [owner] = stored["metadata"]["ownerReferences"]
            assert (owner["kind"], owner["name"]) == ("Node", node.name)
        classes = await kube.get(CLASSES)
        assert sorted(c["metadata"]["name"] for c in classes["items"]) == [
            "gpu.nvidia.com",
            "mig.nvidia.com",
        ]
        # Applying again changes nothing: same slices, same pool generation.
        await apply_fleet(kube.api_client, spec)
        again = await kube.get(SLICES)
        assert [s["spec"] for s in again["items"]] == [s["spec"] for s in listed["items"]]
        # A node's slice goes with its Node (garbage collection of the owner reference).
        await kube.delete(f"/api/v1/nodes/{gpu_nodes[0]}")
        remaining = await kube.get(SLICES)
        assert gpu_nodes[0] not in {s["spec"]["nodeName"] for s in remaining["items"]}


async def test_no_dra_no_slices() -> None:
    async with SimCluster(load_cluster_spec("dgx-h100", nodes=2), kubelets=False) as sim:
        assert (await sim.kube.get(SLICES))["items"] == []
        assert (await sim.kube.get(CLASSES))["items"] == []


@pytest.mark.parametrize(
    ("cluster", "roots"),
    [
        # DGX H100: every GPU on its own root complex (NODE / SYS between them)
        ("dgx-h100", 8),
        # DGX-1V: two PCIe trees of four GPUs (PIX / PHB inside, SYS across)
        ("dgx-v100", 2),
        ("mig-medium", 2),
    ],
)
def test_pcie_roots_follow_the_pcie_levels(cluster: str, roots: int) -> None:
    inv = inventories(cluster)[0]
    found = pcie_roots(inv)
    assert sorted(found) == [g.index for g in inv.gpus]
    assert len(set(found.values())) == roots
    for link in inv.links:
        same = link.pcie in ("PIX", "PXB", "PHB")
        assert (found[link.a] == found[link.b]) is same, link
    for root in found.values():
        domain, bus = root.removeprefix("pci").split(":")
        assert len(domain) == 4
        assert len(bus) == 2


def test_match_attribute_pcie_root_keeps_devices_on_one_root() -> None:
    """``matchAttribute: resource.kubernetes.io/pcieRoot`` over the published slice: with
    three GPUs of the first tree taken, two GPUs come from the second tree."""
    inv = inventories("dgx-v100")[0]
    body = resource_slice(inv)
    classes = {c["metadata"]["name"]: c for c in DEVICE_CLASSES}
    claim = {
        "metadata": {"name": "c", "namespace": "default"},
        "spec": {
            "devices": {
                "requests": [{"name": "r", "exactly": {"deviceClassName": DRIVER, "count": 2}}],
                "constraints": [{"matchAttribute": PCIE_ROOT}],
            }
        },
    }
    taken = {(DRIVER, inv.node_name, f"gpu-{i}") for i in (0, 1, 2)}
    found = allocate(
        [claim],
        node_name=inv.node_name,
        slices=[body],
        classes=classes,
        allocated=taken,
        inventory=inv,  # devices map to GPUs by uuid (the driver publishes no index)
    )
    assert isinstance(found, Allocation)
    chosen = sorted(
        int(r["device"].removeprefix("gpu-")) for r in found.allocations[0]["devices"]["results"]
    )
    roots = pcie_roots(inv)
    assert len({roots[i] for i in chosen}) == 1
    assert all(i >= 4 for i in chosen)
    [link] = [x for x in inv.links if sorted((x.a, x.b)) == chosen]
    assert link.nvlinks == max(x.nvlinks for x in inv.links if x.a >= 4 and x.b >= 4)
