"""Simulated fleets: shipped cluster specs, topology presets, MIG placement, Node objects,
and apply/delete through kubernetes-asyncio against a minimal in-process API double."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from kubernetes_asyncio import client as k8s

import gpusched.sim.fleet as fleet
from gpusched.inventory import (
    API_VERSION,
    CRD_NAME,
    KIND,
    PLURAL,
    GPUNodeInventory,
    inventory_from_object,
    inventory_to_object,
    node_extended_resources,
)
from gpusched.sim.fleet import (
    KUBELET_VERSION,
    ClusterSpec,
    ClusterSpecError,
    FleetError,
    apply_fleet,
    build_fleet,
    delete_fleet,
    ensure_crd,
    load_cluster_spec,
    place_mig,
    shipped_clusters,
)
from gpusched.topology import build_topology, nvlink_domains, set_score

NOW = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
GPU_UUID = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
MIG_UUID = re.compile(r"^MIG-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def inventory_of(cluster: str, index: int = 0) -> GPUNodeInventory:
    inv = build_fleet(load_cluster_spec(cluster), now=NOW)[index].inventory
    assert inv is not None
    return inv


def matrix(inv: GPUNodeInventory) -> dict[tuple[int, int], str]:
    """``nvidia-smi topo -m`` cells, both directions: NV<n> or the PCIe level."""
    cells = {}
    for link in inv.links:
        cell = f"NV{link.nvlinks}" if link.nvlinks else link.pcie
        cells[link.a, link.b] = cells[link.b, link.a] = cell
    return cells


# --- Every shipped cluster --------------------------------------------------------------


def test_the_promised_clusters_are_shipped() -> None:
    assert set(shipped_clusters()) >= {
        "dgx-h100",
        "dgx-h100-500",
        "dgx-h100-5000",
        "dgx-v100",
        "mig-h200",
        "mig-medium",
        "mig-small",
        "mixed",
        "pcie-bridged-pairs",
    }


@pytest.mark.parametrize("name", [n for n in shipped_clusters() if n != "dgx-h100-5000"])
def test_every_shipped_cluster_loads_and_builds(name: str) -> None:
    spec = load_cluster_spec(name)
    assert spec.name == name
    assert spec.description
    nodes = build_fleet(spec, now=NOW)
    assert len(nodes) == spec.node_count > 0
    assert len({n.name for n in nodes}) == len(nodes)
    for sim in nodes:
        node = sim.node
        assert node["metadata"]["name"] == sim.name
        labels = node["metadata"]["labels"]
        assert labels["kubernetes.io/hostname"] == sim.name
        assert labels["gpusched.io/pool"] == sim.pool
        status = node["status"]
        assert {c["type"]: c["status"] for c in status["conditions"]} == {
            "MemoryPressure": "False",
            "DiskPressure": "False",
            "PIDPressure": "False",
            "Ready": "True",
        }
        assert status["nodeInfo"]["kubeletVersion"] == KUBELET_VERSION == "v1.32.0-gpusched-sim"
        assert {"cpu", "memory", "pods", "ephemeral-storage"} <= status["allocatable"].keys()
        if sim.inventory is None:
            assert "nvidia.com/gpu" not in status["capacity"]
            assert not [k for k in labels if k.startswith("nvidia.com/")]
            continue
        inv = sim.inventory
        assert inv.node_name == sim.name
        assert inv.source == "simulated"
        for key, value in node_extended_resources(inv).items():
            assert status["capacity"][key] == status["allocatable"][key] == value
        assert labels["nvidia.com/gpu.count"] == str(len(inv.gpus))
        assert inventory_from_object(inventory_to_object(inv, "uid")) == inv
        for gpu in inv.gpus:
            assert GPU_UUID.match(gpu.uuid)
            assert all(MIG_UUID.match(dev.uuid) for dev in gpu.mig_devices)


def test_big_fleet_names_are_padded_to_the_count() -> None:
    spec = load_cluster_spec("dgx-h100-5000")
    assert spec.node_count == 5000
    names = fleet.node_names(spec)
    assert names[0] == "dgx-h100-0000"
    assert names[-1] == "dgx-h100-4999"
    assert fleet.node_names(load_cluster_spec("dgx-h100"))[:2] == ["dgx-h100-000", "dgx-h100-001"]


def test_build_is_deterministic_and_uuids_are_unique() -> None:
    spec = load_cluster_spec("mixed")
    first = build_fleet(spec, now=NOW)
    assert first == build_fleet(spec, now=NOW)
    uuids = [
        u
        for sim in first
        if sim.inventory
        for gpu in sim.inventory.gpus
        for u in (gpu.uuid, *(d.uuid for d in gpu.mig_devices))
    ]
    assert len(uuids) == len(set(uuids))
    ips = [sim.node["status"]["addresses"][0]["address"] for sim in first]
    assert len(ips) == len(set(ips))
    heartbeat = first[0].node["status"]["conditions"][-1]["lastHeartbeatTime"]
    assert heartbeat == "2025-01-02T03:04:05Z"


# --- Topology presets -------------------------------------------------------------------


def test_dgx1_hybrid_cube_mesh_matches_nvidia_smi() -> None:
    inv = inventory_of("dgx-v100")
    assert [g.product for g in inv.gpus] == ["Tesla V100-SXM2-32GB"] * 8
    cells = matrix(inv)
    expected_rows = [
        "X NV1 NV1 NV2 NV2 SYS SYS SYS",
        "NV1 X NV2 NV1 SYS NV2 SYS SYS",
        "NV1 NV2 X NV2 SYS SYS NV1 SYS",
        "NV2 NV1 NV2 X SYS SYS SYS NV1",
        "NV2 SYS SYS SYS X NV1 NV1 NV2",
        "SYS NV2 SYS SYS NV1 X NV2 NV1",
        "SYS SYS NV1 SYS NV1 NV2 X NV2",
        "SYS SYS SYS NV1 NV2 NV1 NV2 X",
    ]
    for a, row in enumerate(expected_rows):
        assert [cells.get((a, b), "X") for b in range(8)] == row.split()
    # symmetric, and the expected mix: 8 NV1 pairs, 8 NV2 pairs, 12 pairs without NVLink
    assert all(cells[a, b] == cells[b, a] for a, b in itertools.permutations(range(8), 2))
    mix = [link.nvlinks for link in inv.links]
    assert (mix.count(1), mix.count(2), mix.count(0)) == (8, 8, 12)
    for gpu in range(8):  # V100: six NVLink 2 links each
        assert sum(link.nvlinks for link in inv.links if gpu in (link.a, link.b)) == 6
    pcie = [link.pcie for link in inv.links]
    assert (pcie.count("PIX"), pcie.count("PHB"), pcie.count("SYS")) == (4, 8, 16)
    assert [g.numa_node for g in inv.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert nvlink_domains(build_topology(range(8), inv.links)) == [frozenset(range(8))]


def test_nvswitch_is_all_to_all() -> None:
    inv = inventory_of("dgx-h100")
    assert len(inv.gpus) == 8
    assert {(g.product, g.memory_mib) for g in inv.gpus} == {("NVIDIA H100 80GB HBM3", 81559)}
    assert len(inv.links) == 28
    assert {link.nvlinks for link in inv.links} == {18}
    assert {link.type for link in inv.links} == {"NVLink"}
    for link in inv.links:
        same_socket = inv.gpus[link.a].numa_node == inv.gpus[link.b].numa_node
        assert link.pcie == ("NODE" if same_socket else "SYS")
    g = build_topology(range(8), inv.links)
    assert nvlink_domains(g) == [frozenset(range(8))]
    assert inv.gpus[0].pci_bus_id == "00000000:18:00.0"


def test_bridged_pairs() -> None:
    inv = inventory_of("pcie-bridged-pairs")
    assert {g.product for g in inv.gpus} == {"NVIDIA A40"}
    cells = matrix(inv)
    assert [cells[a, a + 1] for a in (0, 2, 4, 6)] == ["NV4"] * 4
    assert cells[1, 2] == "NODE"
    assert cells[0, 7] == "SYS"
    g = build_topology(range(8), inv.links)
    assert nvlink_domains(g) == [frozenset({a, a + 1}) for a in (0, 2, 4, 6)]
    assert set_score(g, [0, 1]) > set_score(g, [1, 2]) > set_score(g, [0, 7])


def test_explicit_links(tmp_path: Path) -> None:
    path = tmp_path / "two.yaml"
    path.write_text(
        "name: two\npools:\n- name: p\n  count: 1\n  cpu: 8\n  memory: 64Gi\n  gpu:\n"
        "    product: NVIDIA H100 80GB HBM3\n    memoryMiB: 81559\n    count: 2\n"
        "    topology: [{a: 0, b: 1, nvlinks: 6, pcie: PXB}]\n"
    )
    (sim,) = build_fleet(load_cluster_spec(path), now=NOW)
    assert sim.inventory is not None
    assert [(lk.type, lk.nvlinks, lk.pcie) for lk in sim.inventory.links] == [("NVLink", 6, "PXB")]


# --- MIG ----------------------------------------------------------------------------------


def test_mig_small_layout() -> None:
    inv = inventory_of("mig-small")
    assert len(inv.gpus) == 4
    for gpu in inv.gpus:
        assert gpu.mig_enabled
        assert [d.profile for d in gpu.mig_devices] == ["1g.10gb"] * 7
        assert [(d.placement_start, d.placement_size) for d in gpu.mig_devices] == [
            (i, 1) for i in range(7)
        ]
        assert [d.gpu_instance_id for d in gpu.mig_devices] == list(range(7, 14))
        assert {d.memory_mib for d in gpu.mig_devices} == {9984}
    assert node_extended_resources(inv) == {"nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb": "28"}


def test_mig_medium_layout() -> None:
    inv = inventory_of("mig-medium")
    for gpu in inv.gpus:
        placed = [
            (d.profile, d.placement_start, d.placement_size, d.gpu_instance_id)
            for d in gpu.mig_devices
        ]
        assert placed == [
            ("2g.20gb", 0, 2, 3),
            ("2g.20gb", 2, 2, 4),
            ("2g.20gb", 4, 2, 5),
            ("1g.10gb", 6, 1, 13),
        ]
    assert node_extended_resources(inv) == {
        "nvidia.com/gpu": "0",
        "nvidia.com/mig-1g.10gb": "4",
        "nvidia.com/mig-2g.20gb": "12",
    }


def test_place_mig_backtracks_to_a_valid_placement() -> None:
    # Largest-first, lowest-start-first would put 3g at 0, 2g at 4, 1g at 6 and strand the
    # second 1g; the valid layout puts 3g at 4.
    placed = place_mig("NVIDIA H100 80GB HBM3", ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"])
    assert [(p.profile, p.start, p.size, p.gpu_instance_id) for p in placed] == [
        ("3g.40gb", 4, 4, 2),
        ("2g.20gb", 0, 2, 3),
        ("1g.10gb", 2, 1, 9),
        ("1g.10gb", 3, 1, 10),
    ]
    (whole,) = place_mig("NVIDIA A100-SXM4-80GB", ["7g.80gb"])
    assert (whole.start, whole.size, whole.gpu_instance_id, whole.memory_mib) == (0, 8, 0, 80896)
    assert [p.start for p in place_mig("NVIDIA H100 PCIe", ["1g.20gb"] * 4)] == [0, 2, 4, 6]


@pytest.mark.parametrize(
    ("product", "layout", "message"),
    [
        ("NVIDIA A40", ["1g.10gb"], "no MIG profile table for product 'NVIDIA A40'"),
        ("NVIDIA H100 80GB HBM3", ["1g.18gb"], "has no MIG profile '1g.18gb'"),
        ("NVIDIA H100 80GB HBM3", ["4g.40gb", "4g.40gb"], "more than the GPU's 7 compute"),
        ("NVIDIA H100 80GB HBM3", ["3g.40gb"] * 2 + ["1g.10gb"], "does not fit on one"),
        ("NVIDIA H100 80GB HBM3", ["1g.20gb"] * 5, "does not fit on one"),
    ],
)
def test_place_mig_rejects(product: str, layout: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        place_mig(product, layout)


# --- Node objects -------------------------------------------------------------------------


def test_mixed_cluster_pools() -> None:
    nodes = build_fleet(load_cluster_spec("mixed"), now=NOW)
    by_pool: dict[str, list[fleet.SimNode]] = {}
    for sim in nodes:
        by_pool.setdefault(sim.pool, []).append(sim)
    assert list(by_pool) == ["system", "dgx-h100", "dgx-v100", "a40", "mig-small", "mig-medium"]
    assert all(sim.inventory is None for sim in by_pool["system"])
    h100 = by_pool["dgx-h100"][0].node
    assert h100["spec"]["taints"] == [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    ]
    assert "taints" not in by_pool["dgx-v100"][0].node["spec"]
    assert h100["status"]["capacity"]["nvidia.com/gpu"] == "8"
    assert h100["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    mig = by_pool["mig-medium"][0].node["metadata"]["labels"]
    assert mig["nvidia.com/mig.strategy"] == "mixed"
    assert mig["nvidia.com/mig-2g.20gb.count"] == "12"


def test_node_status_quantities() -> None:
    (sim, *_) = build_fleet(load_cluster_spec("dgx-h100"), now=NOW)
    status = sim.node["status"]
    assert status["capacity"]["cpu"] == "224"
    assert status["capacity"]["memory"] == f"{2 * 1024**3}Ki"  # 2Ti
    assert status["allocatable"]["memory"] == f"{2 * 1024**3 - 100 * 1024}Ki"
    assert status["capacity"]["pods"] == "110"
    assert int(status["allocatable"]["ephemeral-storage"]) == 1788 * 1024**3 * 9 // 10
    assert "status" not in sim.create_body()
    assert sim.create_body()["metadata"] == sim.node["metadata"]


# --- Loading specs ------------------------------------------------------------------------


def test_unknown_cluster_lists_the_shipped_ones() -> None:
    with pytest.raises(ClusterSpecError) as caught:
        load_cluster_spec("dgx-b300")
    message = str(caught.value)
    assert "unknown cluster 'dgx-b300'" in message
    for name in shipped_clusters():
        assert name in message


def test_yaml_error_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("name: x\npools: [\n")
    with pytest.raises(ClusterSpecError, match=f"^{re.escape(str(path))}: invalid YAML"):
        load_cluster_spec(path)


def test_missing_file_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(ClusterSpecError, match=r"nope\.yaml: cannot read"):
        load_cluster_spec(str(tmp_path / "nope.yaml"))


@pytest.mark.parametrize(
    ("gpu", "message"),
    [
        ("memoryMiB: 0", "pools[0].gpu.memoryMiB: Input should be greater than or equal to 1"),
        ("memoryMiB: '80GB'", "pools[0].gpu.memoryMiB: Input should be a valid integer"),
        ("topology: torus", "pools[0].gpu.topology: unknown preset 'torus'"),
        (
            "topology: dgx1-hybrid-cube-mesh",
            "pools[0].gpu.count: dgx1-hybrid-cube-mesh has 8 GPUs, got 4",
        ),
        ("mig: [1g.18gb]", "pools[0].gpu.mig: NVIDIA H100 80GB HBM3 has no MIG profile"),
        ("vendor: nvidia", "pools[0].gpu.vendor: Extra inputs are not permitted"),
        (
            "topology: [{a: 0, b: 1, pcie: PIX}]",
            "pools[0].gpu.topology: every GPU pair needs a link",
        ),
    ],
)
def test_validation_error_names_file_and_field(tmp_path: Path, gpu: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    base = {
        "product": "product: NVIDIA H100 80GB HBM3",
        "memoryMiB": "memoryMiB: 81559",
        "count": "count: 4",
        "topology": "topology: pcie",
    }
    key = gpu.split(":", 1)[0]
    base[key] = gpu
    lines = "\n".join(f"    {line}" for line in base.values())
    path.write_text(
        f"name: bad\npools:\n- name: p\n  count: 1\n  cpu: 8\n  memory: 64Gi\n  gpu:\n{lines}\n"
    )
    with pytest.raises(ClusterSpecError) as caught:
        load_cluster_spec(path)
    assert str(caught.value).startswith(f"{path}: ")
    assert message in str(caught.value)


def test_duplicate_pool_names_are_rejected() -> None:
    pool = {"name": "p", "count": 1, "cpu": 8, "memory": "64Gi"}
    with pytest.raises(ValueError, match="pools: names given more than once: p"):
        ClusterSpec.model_validate({"name": "x", "pools": [pool, pool]})


def test_nodes_override_rescales_in_proportion() -> None:
    spec = load_cluster_spec("mixed", nodes=20)  # pools 2:2:2:2:1:1 of 10
    assert [p.count for p in spec.pools] == [4, 4, 4, 4, 2, 2]
    spec = load_cluster_spec("mixed", nodes=5)  # remainders go to the earliest pools
    assert [p.count for p in spec.pools] == [1, 1, 1, 1, 1, 0]
    assert spec.node_count == 5
    big = load_cluster_spec("dgx-h100", nodes=1000)
    assert big.node_count == 1000
    assert fleet.node_names(big)[-1] == "dgx-h100-999"
    with pytest.raises(ClusterSpecError, match="nodes must be >= 0"):
        load_cluster_spec("dgx-h100", nodes=-1)


def test_all_is_complete() -> None:
    for name in fleet.__all__:
        assert hasattr(fleet, name), name
    public_defs = {
        name
        for name, value in vars(fleet).items()
        if not name.startswith("_") and getattr(value, "__module__", None) == fleet.__name__
    }
    assert public_defs <= set(fleet.__all__)


# --- The CRD as an API server sees it ------------------------------------------------------


def test_crd_and_inventories_pass_apiserver_validation() -> None:
    """The simulated apiserver's port of CRD validation accepts the CRD, prunes nothing
    from any shipped inventory and finds no schema error in it."""
    from gpusched.sim import crd as apiserver_crd

    apiserver_crd.validate_crd(fleet.load_crd())
    info = apiserver_crd.CRDInfo.from_crd(fleet.load_crd())
    assert (info.plural, info.short_names, info.namespaced) == (PLURAL, ("gni",), False)
    (version,) = info.versions
    schema = version.schema
    for name in ("mixed", "pcie-bridged-pairs"):
        for sim in build_fleet(load_cluster_spec(name), now=NOW):
            if sim.inventory is None:
                continue
            obj = inventory_to_object(sim.inventory, "5f0c2a8e-0000-4000-8000-000000000001")
            assert apiserver_crd.unknown_field_paths(obj, schema) == []
            assert apiserver_crd.prepare_custom_resource(obj, schema) == obj
            errors = apiserver_crd.validate_custom_resource(
                obj, schema, kind=KIND, api_version=API_VERSION
            )
            assert errors == []


# --- Applying to an API server ------------------------------------------------------------


class FakeAPI:
    """Just enough of kube-apiserver for nodes, the CRD and inventories: create (409 when
    present), get, merge patch (status too), replace with resourceVersion, delete, list and a
    CRD watch that reports Established (or, with ``establish=False``, ends at once)."""

    def __init__(self, establish: bool = True) -> None:
        self.establish = establish
        self.objects: dict[str, dict[str, Any]] = {}
        self.version = itertools.count(1)
        self.requests: list[tuple[str, str, str]] = []
        self.watches = 0
        app = web.Application()
        app.router.add_route("*", "/{path:.*}", self.handle)
        self.server = TestServer(app)

    def _stamp(self, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj.setdefault("metadata", {})
        meta["resourceVersion"] = str(next(self.version))
        meta.setdefault("uid", f"uid-{meta['resourceVersion']}")
        return obj

    @staticmethod
    def _merge(target: Any, patch: Any) -> Any:
        if not isinstance(patch, dict):
            return patch
        out = dict(target) if isinstance(target, dict) else {}
        for key, value in patch.items():
            if value is None:
                out.pop(key, None)
            else:
                out[key] = FakeAPI._merge(out.get(key), value)
        return out

    async def handle(self, request: web.Request) -> web.StreamResponse:
        path = "/" + request.match_info["path"]
        self.requests.append((request.method, path, request.content_type))
        body = await request.json() if request.can_read_body else None
        crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        if request.method == "GET" and path == crds:
            return await self._list_crds(request)
        collection, _, name = path.rpartition("/")
        subresource = ""
        if name == "status":
            subresource = name
            collection, _, name = collection.rpartition("/")
        if request.method == "POST":
            collection, name = path, body["metadata"]["name"]
        key = f"{collection}/{name}"
        current = self.objects.get(key)
        if request.method == "POST":
            if current is not None:
                return web.json_response({"kind": "Status", "code": 409}, status=409)
            if collection == "/api/v1/nodes":
                body.pop("status", None)  # create ignores status, as kube-apiserver does
            self.objects[key] = self._stamp(body)
            return web.json_response(self.objects[key], status=201)
        if current is None:
            return web.json_response({"kind": "Status", "code": 404}, status=404)
        if request.method == "GET":
            return web.json_response(current)
        if request.method == "DELETE":
            del self.objects[key]
            return web.json_response({"kind": "Status", "status": "Success"})
        if request.method == "PATCH":
            assert request.content_type == "application/merge-patch+json"
            if collection == "/api/v1/nodes":
                assert ("status" in body) == (subresource == "status"), body
            self.objects[key] = self._stamp(self._merge(current, body))
            return web.json_response(self.objects[key])
        assert request.method == "PUT"
        if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            return web.json_response({"kind": "Status", "code": 409}, status=409)
        body["metadata"]["uid"] = current["metadata"]["uid"]
        self.objects[key] = self._stamp(body)
        return web.json_response(self.objects[key])

    async def _list_crds(self, request: web.Request) -> web.StreamResponse:
        assert request.query["fieldSelector"] == f"metadata.name={CRD_NAME}"
        crd = self.objects.get(
            f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}"
        )
        if request.query.get("watch", "").lower() != "true":
            items = [crd] if crd else []
            return web.json_response({"metadata": {"resourceVersion": "7"}, "items": items})
        self.watches += 1
        response = web.StreamResponse()
        await response.prepare(request)
        if self.establish and crd is not None:
            crd["status"] = {"conditions": [{"type": "Established", "status": "True"}]}
            event = {"type": "MODIFIED", "object": crd}
            await response.write(json.dumps(event).encode() + b"\n")
        await response.write_eof()
        return response

    def nodes(self) -> dict[str, dict[str, Any]]:
        return {
            k.rsplit("/", 1)[1]: v
            for k, v in self.objects.items()
            if k.startswith("/api/v1/nodes/")
        }

    def inventories(self) -> dict[str, dict[str, Any]]:
        prefix = "/apis/gpusched.io/v1alpha1/gpunodeinventories/"
        return {k[len(prefix) :]: v for k, v in self.objects.items() if k.startswith(prefix)}


@pytest.fixture
async def api() -> AsyncIterator[tuple[FakeAPI, k8s.ApiClient]]:
    fake = FakeAPI()
    await fake.server.start_server()
    configuration = k8s.Configuration(host=str(fake.server.make_url("")).rstrip("/"))
    api_client = k8s.ApiClient(configuration)
    try:
        yield fake, api_client
    finally:
        await api_client.close()
        await fake.server.close()


async def test_apply_creates_crd_nodes_status_and_owned_inventories(
    api: tuple[FakeAPI, k8s.ApiClient],
) -> None:
    fake, api_client = api
    spec = load_cluster_spec("mixed")
    await apply_fleet(api_client, spec, concurrency=4, now=NOW)
    crd = fake.objects[f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}"]
    assert crd["metadata"]["annotations"][fleet.CRD_DIGEST_ANNOTATION]
    assert fake.watches == 1  # waited by watching, not by polling
    nodes = fake.nodes()
    expected = {sim.name: sim for sim in build_fleet(spec, now=NOW)}
    assert set(nodes) == set(expected)
    for name, node in nodes.items():
        assert node["status"] == expected[name].node["status"]
        assert node["metadata"]["labels"] == expected[name].node["metadata"]["labels"]
    inventories = fake.inventories()
    assert set(inventories) == {n for n, sim in expected.items() if sim.inventory is not None}
    for name, obj in inventories.items():
        assert obj["metadata"]["ownerReferences"][0]["uid"] == nodes[name]["metadata"]["uid"]
        assert inventory_from_object(obj) == expected[name].inventory


async def test_apply_is_idempotent_and_updates_what_changed(
    api: tuple[FakeAPI, k8s.ApiClient],
) -> None:
    fake, api_client = api
    small = load_cluster_spec("mig-small")
    await apply_fleet(api_client, small, now=NOW)
    uids = {name: node["metadata"]["uid"] for name, node in fake.nodes().items()}
    await apply_fleet(api_client, small, now=NOW)  # again: 409s handled, nothing changes
    assert {name: node["metadata"]["uid"] for name, node in fake.nodes().items()} == uids
    # Same pool re-cut into 2 x 3g.40gb: the 1g.10gb labels and resources must go.
    pool = small.pools[0]
    recut = small.model_copy(
        update={
            "pools": (
                pool.model_copy(
                    update={
                        "gpu": pool.gpu.model_copy(update={"mig": ("3g.40gb", "3g.40gb")}),
                        "taints": (fleet.TaintSpec(key="example.com/mig", effect="NoSchedule"),),
                    }
                ),
            )
        }
    )
    await apply_fleet(api_client, recut, create_crd=False, now=NOW)
    for name, node in fake.nodes().items():
        assert node["metadata"]["uid"] == uids[name]
        assert node["status"]["capacity"]["nvidia.com/mig-3g.40gb"] == "8"
        assert "nvidia.com/mig-1g.10gb" not in node["status"]["capacity"]
        assert "nvidia.com/mig-1g.10gb" not in node["status"]["allocatable"]
        assert not [k for k in node["metadata"]["labels"] if k.startswith("nvidia.com/mig-1g")]
        assert node["spec"]["taints"] == [{"key": "example.com/mig", "effect": "NoSchedule"}]
        inv = inventory_from_object(fake.inventories()[name])
        assert inv.mig_profiles() == {"3g.40gb": 8}


async def test_delete_removes_nodes_and_inventories(api: tuple[FakeAPI, k8s.ApiClient]) -> None:
    fake, api_client = api
    spec = load_cluster_spec("mixed")
    await apply_fleet(api_client, spec, now=NOW)
    await delete_fleet(api_client, spec)
    assert fake.nodes() == {}
    assert fake.inventories() == {}
    await delete_fleet(api_client, spec)  # already gone: fine


async def test_ensure_crd_times_out_when_never_established() -> None:
    fake = FakeAPI(establish=False)
    await fake.server.start_server()
    api_client = k8s.ApiClient(k8s.Configuration(host=str(fake.server.make_url("")).rstrip("/")))
    try:
        with pytest.raises(TimeoutError, match=r"not Established within 0\.3s"):
            await ensure_crd(api_client, timeout_s=0.3)
    finally:
        await api_client.close()
        await fake.server.close()
        await asyncio.sleep(0)


async def test_api_errors_name_the_node(api: tuple[FakeAPI, k8s.ApiClient]) -> None:
    fake, api_client = api
    spec = load_cluster_spec("dgx-h100")
    await fake.server.close()  # nothing listens any more
    with pytest.raises(FleetError, match="applying cluster 'dgx-h100'"):
        await apply_fleet(api_client, spec, create_crd=False)
