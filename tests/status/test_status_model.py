"""The ``gpusched status`` model over hand-built objects: whole GPUs, shared VRAM, MIG devices,
an unhealthy GPU, telemetry, pending pods with their reason, the ``--namespace`` and ``--node``
filters, totals per product and pool; and the renderer's rows and JSON fields."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml

from gpusched.annotations import GPU_IDS, GPU_UUIDS, RESERVED_VRAM_MIB
from gpusched.inventory import inventory_to_object
from gpusched.sim.fleet import LABEL_POOL, build_fleet, load_cluster_spec
from gpusched.status.model import (
    HIDDEN,
    POOL_LABELS,
    SCHEMA_VERSION,
    ClusterStatus,
    build_status,
)
from gpusched.status.render import render

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
H100 = 81559  # MiB


def fleet(cluster: str, nodes: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Nodes and inventory objects of ``cluster``'s first ``nodes`` nodes."""
    built = build_fleet(load_cluster_spec(cluster, nodes=nodes), now=NOW)
    objs = [copy.deepcopy(n.node) for n in built]
    invs = [inventory_to_object(n.inventory, f"uid-{n.name}") for n in built if n.inventory]
    return objs, invs


def uuid_of(inv: dict[str, Any], index: int, mig: int | None = None) -> str:
    gpu = inv["spec"]["gpus"][index]
    return str(gpu["uuid"] if mig is None else gpu["migDevices"][mig]["uuid"])


def pod(
    name: str,
    limits: dict[str, str] | None = None,
    *,
    node: str | None = None,
    ids: str | None = None,
    uuids: str = "",
    vram: str = "",
    namespace: str = "team-a",
    phase: str = "Running",
    annotations: dict[str, str] | None = None,
    condition: dict[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-{name}",
        "creationTimestamp": "2026-11-28T11:00:00Z",
        "annotations": dict(annotations or {}),
    }
    if ids is not None:
        meta["annotations"].update({GPU_IDS: ids, GPU_UUIDS: uuids, RESERVED_VRAM_MIB: vram})
    spec: dict[str, Any] = {
        "schedulerName": "gpusched",
        "containers": [{"name": "m", "image": "x", "resources": {"limits": limits or {}}}],
    }
    status: dict[str, Any] = {"phase": phase if node else "Pending"}
    if node:
        spec["nodeName"] = node
    if condition:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", **condition}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def telemetry(inv: dict[str, Any], used: dict[int, int]) -> None:
    gpus = [
        {"index": i, "usedMemoryMiB": used.get(i, 0), "utilizationPercent": 35 if i in used else 0}
        for i in range(len(inv["spec"]["gpus"]))
    ]
    inv["status"] = {
        "observedTime": "2026-11-28T12:00:00Z",
        "usedMemoryMiB": sum(g["usedMemoryMiB"] for g in gpus),
        "gpus": gpus,
    }


# --- table-driven cases ----------------------------------------------------------------------


@dataclass
class Case:
    name: str
    cluster: str
    pods: Any  # (inventories) -> list of pods
    expect: dict[str, Any]
    """Checks: "gpus": {(node, index): (mode, reservedMiB, [client keys])}, "pending":
    [(key, request, reason substring)], "products"/"pools": {name: (gpus, inUse, free,
    unhealthy)}, "mig": {(node, index): [holder or None...]}"""
    namespace: str | None = None
    node: str | None = None
    unhealthy: dict[int, str] = field(default_factory=dict)


CASES = [
    Case(
        "whole GPUs: two exclusive, the rest free; a 0 MiB record counts the whole GPU",
        "dgx-h100",
        lambda invs: [
            pod(
                "train",
                {"nvidia.com/gpu": "2"},
                node="dgx-h100-000",
                ids="0,1",
                uuids=f"{uuid_of(invs[0], 0)},{uuid_of(invs[0], 1)}",
                vram=f"{H100},0",
            )
        ],
        {
            "gpus": {
                ("dgx-h100-000", 0): ("exclusive", H100, ["team-a/train"]),
                ("dgx-h100-000", 1): ("exclusive", H100, ["team-a/train"]),
                ("dgx-h100-000", 2): ("free", 0, []),
            },
            "products": {"NVIDIA H100 80GB HBM3": (16, 2, 14, 0)},
            "pools": {"dgx-h100": (16, 2, 14, 0)},
        },
    ),
    Case(
        "shared VRAM: two shares on one GPU add up; an exclusive share holds it alone",
        "dgx-h100",
        lambda invs: (
            [
                pod(
                    f"infer-{i}",
                    {"gpusched.io/gpu": "1", "gpusched.io/vram": "10Gi"},
                    node="dgx-h100-000",
                    ids="3",
                    uuids=uuid_of(invs[0], 3),
                    vram="10240",
                )
                for i in (1, 2)
            ]
            + [
                pod(
                    "alone",
                    {"gpusched.io/gpu": "1", "gpusched.io/vram": "10Gi"},
                    node="dgx-h100-000",
                    ids="4",
                    uuids=uuid_of(invs[0], 4),
                    vram=str(H100),
                    annotations={"gpusched.io/exclusive": "true"},
                )
            ]
        ),
        {
            "gpus": {
                ("dgx-h100-000", 3): ("shared", 20480, ["team-a/infer-1", "team-a/infer-2"]),
                ("dgx-h100-000", 4): ("exclusive", H100, ["team-a/alone"]),
            },
            "products": {"NVIDIA H100 80GB HBM3": (16, 2, 14, 0)},
        },
    ),
    Case(
        "MIG: the holder of each MIG device by UUID; the GPU's reserved VRAM is the devices'",
        "mig-small",
        lambda invs: [
            pod(
                "mig-a",
                {"nvidia.com/mig-1g.10gb": "1"},
                node="mig-small-000",
                ids="1",
                uuids=uuid_of(invs[0], 1, mig=2),
                vram="9984",
            ),
            pod(
                "mig-b",
                {"nvidia.com/mig-1g.10gb": "1"},
                node="mig-small-000",
                ids="1",
                uuids=uuid_of(invs[0], 1, mig=0),
                vram="9984",
            ),
        ],
        {
            "gpus": {
                ("mig-small-000", 1): ("mig", 2 * 9984, ["team-a/mig-a", "team-a/mig-b"]),
                ("mig-small-000", 0): ("mig", 0, []),
            },
            "mig": {
                ("mig-small-000", 1): ["team-a/mig-b", None, "team-a/mig-a", None, None, None, None]
            },
            "products": {"NVIDIA H100 PCIe": (8, 1, 7, 0)},
        },
    ),
    Case(
        "unhealthy: counted apart, still holding its pod, not free",
        "dgx-h100",
        lambda invs: [
            pod(
                "stuck",
                {"nvidia.com/gpu": "1"},
                node="dgx-h100-001",
                ids="5",
                uuids=uuid_of(invs[1], 5),
                vram=str(H100),
            )
        ],
        {
            "gpus": {
                ("dgx-h100-001", 5): ("exclusive", H100, ["team-a/stuck"]),
                ("dgx-h100-001", 6): ("free", 0, []),
            },
            "products": {"NVIDIA H100 80GB HBM3": (16, 1, 14, 2)},
            "unhealthy_rows": [("dgx-h100-001", 5), ("dgx-h100-001", 6)],
        },
        unhealthy={5: "XID 79 (GPU has fallen off the bus)", 6: "XID 48 (double-bit ECC)"},
    ),
    Case(
        "pending: GPU pods with the PodScheduled message; CPU pods and finished pods left out",
        "dgx-h100",
        lambda invs: [
            pod(
                "huge",
                {"nvidia.com/gpu": "16"},
                condition={
                    "reason": "Unschedulable",
                    "message": "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.",
                    "lastTransitionTime": "2026-11-28T11:30:00Z",
                },
            ),
            pod("fresh", {"gpusched.io/gpu": "2", "gpusched.io/vram": "20Gi"}),
            pod("mig", {"nvidia.com/mig-1g.10gb": "3"}),
            pod("cpu-only", {"cpu": "1"}),
            pod(
                "claimed",
                {"gpusched.io/gpu": "1"},
                annotations={"gpu.scheduling/claim": "chat"},
            ),
            pod(
                "done",
                {"nvidia.com/gpu": "1"},
                node="dgx-h100-000",
                ids="0",
                uuids=uuid_of(invs[0], 0),
                vram=str(H100),
                phase="Succeeded",
            ),
        ],
        {
            "pending": [
                ("team-a/claimed", "GpuClaim chat", ""),
                ("team-a/fresh", "2 GPUs x 20480 MiB shared", ""),
                ("team-a/mig", "3 x mig-1g.10gb", ""),
                ("team-a/huge", "16 GPUs", "Insufficient nvidia.com/gpu"),
            ],
            "gpus": {("dgx-h100-000", 0): ("free", 0, [])},
        },
    ),
    Case(
        "--namespace: others' pods hidden but their VRAM counted; their pending pods left out",
        "dgx-h100",
        lambda invs: [
            pod(
                "mine",
                {"gpusched.io/gpu": "1", "gpusched.io/vram": "8Gi"},
                node="dgx-h100-000",
                ids="0",
                uuids=uuid_of(invs[0], 0),
                vram="8192",
            ),
            pod(
                "theirs",
                {"gpusched.io/gpu": "1", "gpusched.io/vram": "4Gi"},
                node="dgx-h100-000",
                ids="0",
                uuids=uuid_of(invs[0], 0),
                vram="4096",
                namespace="team-b",
            ),
            pod("waiting", {"nvidia.com/gpu": "1"}, namespace="team-b"),
        ],
        {
            "gpus": {("dgx-h100-000", 0): ("shared", 12288, ["team-a/mine"])},
            "hidden": {("dgx-h100-000", 0): 1},
            "pending": [],
        },
        namespace="team-a",
    ),
    Case(
        "--node: one node, totals over it alone",
        "dgx-h100",
        lambda invs: [],
        {"nodes": ["dgx-h100-001"], "products": {"NVIDIA H100 80GB HBM3": (8, 0, 8, 0)}},
        node="dgx-h100-001",
    ),
]


def _build(case: Case) -> ClusterStatus:
    nodes, invs = fleet(case.cluster, 2)
    for index, reason in case.unhealthy.items():
        gpu = invs[1]["spec"]["gpus"][index]
        gpu["health"], gpu["healthReason"] = "Unhealthy", reason
    return build_status(nodes, invs, case.pods(invs), namespace=case.namespace, node=case.node)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_model(case: Case) -> None:
    status = _build(case)
    gpus = {(n.name, g.index): g for n in status.nodes for g in n.gpus}
    for key, (mode, reserved, clients) in case.expect.get("gpus", {}).items():
        gpu = gpus[key]
        shown = [c.key for c in gpu.clients] or [m.holder for m in gpu.mig if m.holder]
        assert (gpu.mode, gpu.reserved_mib, sorted(shown)) == (mode, reserved, clients), key
    for key, holders in case.expect.get("mig", {}).items():
        assert [m.holder for m in gpus[key].mig] == holders
    for key, hidden in case.expect.get("hidden", {}).items():
        assert gpus[key].hidden_clients == hidden
    for key in case.expect.get("unhealthy_rows", []):
        assert not gpus[key].healthy
        assert gpus[key].health_reason
    if "pending" in case.expect:
        got = [(p.key, p.request, p.message) for p in status.pending]
        assert [(k, r) for k, r, _ in got] == [(k, r) for k, r, _ in case.expect["pending"]]
        for (_, _, message), (_, _, part) in zip(got, case.expect["pending"], strict=True):
            assert part in message
    if "nodes" in case.expect:
        assert [n.name for n in status.nodes] == case.expect["nodes"]
    for attr in ("products", "pools"):
        totals = {t.name: (t.gpus, t.in_use, t.free, t.unhealthy) for t in getattr(status, attr)}
        for name, figures in case.expect.get(attr, {}).items():
            assert totals[name] == figures, (attr, name)


def test_telemetry_is_the_agents_reading_and_absent_without_one() -> None:
    nodes, invs = fleet("dgx-h100", 2)
    telemetry(invs[0], {0: 70000, 1: 12})
    status = build_status(nodes, invs, [])
    first, second = status.nodes
    assert (first.gpus[0].used_mib, first.gpus[0].utilization_percent) == (70000, 35)
    assert first.observed_time == "2026-11-28T12:00:00Z"
    assert second.gpus[0].used_mib is None
    assert second.observed_time is None
    (product,) = status.products
    assert product.used_mib == 70012


def test_nodes_without_inventory_and_pods_without_a_record_are_said() -> None:
    nodes, invs = fleet("dgx-h100", 2)
    nodes[1]["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    nodes[1]["spec"]["unschedulable"] = True
    stray = pod("other-scheduler", {"nvidia.com/gpu": "1"}, node="dgx-h100-000")
    cpu = pod("cpu", {"cpu": "1"}, node="dgx-h100-000")
    status = build_status(nodes, invs[:1], [stray, cpu])
    first, second = status.nodes
    assert first.other_pods == ("team-a/other-scheduler",)
    assert (second.ready, second.schedulable, second.gpus) == (False, False, ())
    assert second.problem is not None
    assert "no GPUNodeInventory" in second.problem
    text = render(status)
    assert "pods with no device record: team-a/other-scheduler" in text
    assert "NotReady" in text


def test_pool_is_the_first_pool_label_found() -> None:
    assert POOL_LABELS[0] == LABEL_POOL
    nodes, invs = fleet("dgx-h100", 2)
    del nodes[0]["metadata"]["labels"][LABEL_POOL]
    nodes[0]["metadata"]["labels"]["karpenter.sh/nodepool"] = "gpu-spot"
    status = build_status(nodes, invs, [])
    assert [n.pool for n in status.nodes] == ["gpu-spot", "dgx-h100"]
    assert [t.name for t in status.pools] == ["dgx-h100", "gpu-spot"]


def test_mig_holder_in_another_namespace_is_not_named() -> None:
    nodes, invs = fleet("mig-small", 1)
    held = pod(
        "secret",
        {"nvidia.com/mig-1g.10gb": "1"},
        node="mig-small-000",
        ids="0",
        uuids=uuid_of(invs[0], 0, mig=0),
        vram="9984",
        namespace="team-b",
    )
    status = build_status(nodes, invs, [held], namespace="team-a")
    gpu = status.nodes[0].gpus[0]
    assert gpu.mig[0].holder == HIDDEN
    assert gpu.clients == ()
    assert gpu.hidden_clients == 1


# --- rendering ------------------------------------------------------------------------------


def _rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines()]


def test_table_rows_read_as_a_user_reads_them() -> None:
    status = _build(CASES[1])  # shared
    text = render(status)
    header = text.splitlines()[0].split()
    assert header[:3] == ["NODE", "POOL", "STATUS"]
    assert header[-1] == "PODS"
    shared = next(line for line in text.splitlines() if "team-a/infer-1" in line)
    assert "20.0/79.6 GiB" in shared
    assert " shared " in shared
    assert "team-a/infer-1 (10.0), team-a/infer-2 (10.0)" in shared
    product = next(r for r in _rows(text) if r[:3] == ["NVIDIA", "H100", "80GB"] and len(r) > 6)
    assert product[4:8] == ["16", "2", "14", "0"]
    assert "No pending GPU pods." in text
    assert "\x1b[" not in text


def test_colour_only_when_asked_and_wide_adds_columns() -> None:
    case = next(c for c in CASES if c.unhealthy)
    status = _build(case)
    plain, coloured = render(status), render(status, color=True)
    assert "\x1b[31mUNHEALTHY" in coloured
    assert "\x1b[" not in plain
    wide = render(status, "wide")
    assert "XID 79 (GPU has fallen off the bus)" in wide
    assert wide.splitlines()[0].split()[-4:] == ["UUID", "UTIL", "TEMP", "PODS"]


def test_pending_table_and_wide_message() -> None:
    status = _build(next(c for c in CASES if c.name.startswith("pending")))
    text = render(status)
    row = next(line for line in text.splitlines() if line.startswith("team-a/huge"))
    assert "16 GPUs" in row
    assert "Unschedulable: 0/1 nodes are available" in row
    assert "not tried yet" in next(line for line in text.splitlines() if "team-a/fresh" in line)
    assert "SCHEDULER" in render(status, "wide")


def test_json_and_yaml_follow_the_documented_schema() -> None:
    status = _build(CASES[2])  # MIG
    doc = json.loads(render(status, "json"))
    assert yaml.safe_load(render(status, "yaml")) == doc
    assert (doc["apiVersion"], doc["kind"]) == (SCHEMA_VERSION, "GPUStatus")
    assert set(doc) == {"apiVersion", "kind", "namespace", "nodes", "totals", "pending", "notes"}
    node = doc["nodes"][0]
    assert set(node) == {
        "name",
        "pool",
        "ready",
        "schedulable",
        "source",
        "observedTime",
        "problem",
        "gpus",
        "otherPods",
    }
    gpu = node["gpus"][1]
    assert set(gpu) == {
        "index",
        "uuid",
        "product",
        "memoryMiB",
        "reservedMiB",
        "usedMiB",
        "utilizationPercent",
        "temperatureC",
        "mode",
        "health",
        "healthReason",
        "clients",
        "claim",
        "hiddenClients",
        "migDevices",
    }
    assert gpu["mode"] == "mig"
    assert gpu["reservedMiB"] == 2 * 9984
    assert set(gpu["clients"][0]) == {"namespace", "name", "reservedMiB", "device", "exclusive"}
    assert gpu["migDevices"][2]["holder"] == "team-a/mig-a"
    assert set(doc["totals"]) == {"products", "pools"}
    assert set(doc["totals"]["products"][0]) == {
        "name",
        "gpus",
        "inUse",
        "free",
        "unhealthy",
        "memoryMiB",
        "reservedMiB",
        "usedMiB",
    }


def test_a_memo_parses_only_what_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpusched.status import model

    nodes, invs = fleet("dgx-h100", 2)
    for k, inv in enumerate(invs):
        inv["metadata"]["resourceVersion"] = str(k + 1)
    memo = model.Memo()
    first = build_status(nodes, invs, [], memo=memo)
    parsed: list[str] = []
    real = model._read_inventory

    def counting(obj: dict[str, Any]) -> Any:
        parsed.append(obj["metadata"]["name"])
        return real(obj)

    monkeypatch.setattr(model, "_read_inventory", counting)
    assert build_status(nodes, invs, [], memo=memo) == first
    assert parsed == []
    telemetry(invs[1], {0: 1000})
    invs[1]["metadata"]["resourceVersion"] = "9"
    again = build_status(nodes, invs, [], memo=memo)
    assert parsed == ["dgx-h100-001"]
    assert again.nodes[1].gpus[0].used_mib == 1000


def test_gpus_a_resource_claim_holds_are_in_use_and_name_the_claim() -> None:
    """DRA: a claim allocated (by kube-scheduler, say) with no pod holding it yet: its GPUs are
    in use, named by the slice devices' ``uuid``; admin-access results are not use."""
    from gpusched.inventory import inventory_from_object
    from gpusched.sim.resource_slices import DRIVER, device_name, resource_slice

    nodes, invs = fleet("dgx-h100", 1)
    inventory = inventory_from_object(invs[0])
    slice_ = resource_slice(inventory)
    node = inventory.node_name

    def result(index: int, admin: bool = False) -> dict[str, Any]:
        out = {"request": "gpus", "driver": DRIVER, "pool": node}
        out["device"] = device_name(inventory.gpus[index])
        return {**out, "adminAccess": True} if admin else out

    claim = {
        "metadata": {"name": "train", "namespace": "ml"},
        "status": {"allocation": {"devices": {"results": [result(2), result(3), result(5, True)]}}},
    }
    status = build_status(nodes, invs, [], claims=[claim], slices=[slice_])
    gpus = status.nodes[0].gpus
    assert [g.index for g in gpus if g.claim == "ml/train"] == [2, 3]
    assert [g.mode for g in gpus[2:4]] == ["exclusive", "exclusive"]
    assert status.products[0].in_use == 2
    assert status.products[0].free == 6
    assert "claim ml/train" in render(status, "table", color=False)
    assert status.to_dict()["nodes"][0]["gpus"][2]["claim"] == "ml/train"
