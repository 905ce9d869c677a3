"""The GPUNodeInventory format: models, object round trip, errors, labels, resources, CRD."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args

import pytest
import yaml

import gpusched.inventory as inventory
from gpusched.inventory import (
    API_VERSION,
    CRD_NAME,
    KIND,
    PCIE_LEVEL_NAMES,
    PLURAL,
    SHORT_NAME,
    GPUNodeInventory,
    InventoryError,
    PCIeLevelName,
    inventory_from_object,
    inventory_to_object,
    label_value,
    mig_resource_name,
    node_extended_resources,
    node_labels,
)
from gpusched.topology import PCIE_LEVELS, build_topology, pair_score

REPO = Path(__file__).resolve().parent.parent
CRD_PATH = REPO / "gpusched" / "crds" / f"{CRD_NAME}.yaml"


def gpu_uuid(n: int) -> str:
    return f"GPU-{n:08x}-0000-4000-8000-{n:012x}"


def mig_uuid(n: int) -> str:
    return f"MIG-{n:08x}-0000-4000-8000-{n:012x}"


def sample_spec() -> dict[str, Any]:
    """Three H100s: GPU 0 in MIG mode (2g.20gb + 1g.10gb), GPUs 1 and 2 whole."""
    gpus: list[dict[str, Any]] = [
        {
            "index": i,
            "uuid": gpu_uuid(i),
            "product": "NVIDIA H100 80GB HBM3",
            "memoryMiB": 81559,
            "pciBusId": f"00000000:{0x18 + i:02X}:00.0",
            "numaNode": 0,
            "migEnabled": False,
        }
        for i in range(3)
    ]
    gpus[0]["migEnabled"] = True
    gpus[0]["migDevices"] = [
        {
            "uuid": mig_uuid(1),
            "profile": "2g.20gb",
            "memoryMiB": 20096,
            "gpuInstanceId": 3,
            "computeInstanceId": 0,
            "placementStart": 0,
            "placementSize": 2,
        },
        {
            "uuid": mig_uuid(2),
            "profile": "1g.10gb",
            "memoryMiB": 9984,
            "gpuInstanceId": 13,
            "computeInstanceId": 0,
            "placementStart": 6,
            "placementSize": 1,
        },
    ]
    del gpus[2]["numaNode"]  # optional
    return {
        "nodeName": "gpu-node-1",
        "source": "nvml",
        "driverVersion": "550.127.05",
        "cudaDriverVersion": "12.4",
        "gpus": gpus,
        "links": [
            {"a": 0, "b": 1, "type": "NVLink", "nvlinks": 18, "pcie": "NODE"},
            {"a": 0, "b": 2, "type": "NVLink", "nvlinks": 18, "pcie": "SYS"},
            {"a": 1, "b": 2, "type": "PCIe", "nvlinks": 0, "pcie": "PIX"},
        ],
    }


def sample() -> GPUNodeInventory:
    return GPUNodeInventory.model_validate(sample_spec())


def sample_object() -> dict[str, Any]:
    return inventory_to_object(sample(), "0b7c6c5e-node-uid")


# --- Round trip ---------------------------------------------------------------------------


def test_to_object_is_a_full_owned_custom_resource() -> None:
    obj = sample_object()
    assert obj["apiVersion"] == "gpusched.io/v1alpha1" == API_VERSION
    assert obj["kind"] == "GPUNodeInventory" == KIND
    assert obj["metadata"]["name"] == "gpu-node-1"
    assert obj["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "gpu-node-1", "uid": "0b7c6c5e-node-uid"}
    ]
    assert obj["metadata"]["labels"] == {
        "gpusched.io/gpu-count": "3",
        "gpusched.io/gpu-product": "NVIDIA-H100-80GB-HBM3",
    }
    expected = sample_spec()  # wire names; unset numaNode omitted, empty migDevices written
    for gpu in expected["gpus"][1:]:
        gpu["migDevices"] = []
    assert obj["spec"] == expected


def test_round_trip_through_object_and_json() -> None:
    inv = sample()
    assert inventory_from_object(inventory_to_object(inv, "uid")) == inv
    wire = json.loads(json.dumps(inventory_to_object(inv, "uid")))
    assert inventory_from_object(wire) == inv


def test_models_are_frozen_and_hashable() -> None:
    inv = sample()
    with pytest.raises(ValueError, match="frozen"):
        inv.gpus[0].index = 4  # type: ignore[misc]
    assert isinstance(inv.gpus, tuple)
    assert hash(inv) == hash(sample())


def test_python_names_work_too() -> None:
    inv = sample()
    gpu = inv.gpus[1].model_copy()
    assert gpu.memory_mib == 81559
    assert type(gpu).model_validate(gpu.model_dump()) == gpu  # snake_case names validate


# --- Errors name the field ----------------------------------------------------------------

Mutation = Callable[[dict[str, Any]], None]


def _set(path: str, value: Any) -> Mutation:
    def mutate(obj: dict[str, Any]) -> None:
        *head, last = path.split("/")
        target: Any = obj
        for key in head:
            target = target[int(key)] if key.isdigit() else target[key]
        if value is _DELETE:
            del target[int(last) if last.isdigit() else last]
        else:
            target[int(last) if last.isdigit() else last] = value

    return mutate


_DELETE = object()


def _both(first: Mutation, second: Mutation) -> Mutation:
    def mutate(obj: dict[str, Any]) -> None:
        first(obj)
        second(obj)

    return mutate


MALFORMED: list[tuple[str, Mutation, str]] = [
    (
        "zero memory",
        _set("spec/gpus/1/memoryMiB", 0),
        "spec.gpus[1].memoryMiB: Input should be greater than or equal to 1 (got 0)",
    ),
    (
        "memory as a string",
        _set("spec/gpus/1/memoryMiB", "81559"),
        "spec.gpus[1].memoryMiB: Input should be a valid integer (got '81559')",
    ),
    ("missing uuid", _set("spec/gpus/2/uuid", _DELETE), "spec.gpus[2].uuid: Field required"),
    (
        "bad uuid",
        _set("spec/gpus/2/uuid", "GPU-1234"),
        "spec.gpus[2].uuid: String should match pattern",
    ),
    ("unknown field", _set("spec/gpus/0/vendor", "x"), "spec.gpus[0].vendor: Extra inputs"),
    ("unknown pcie level", _set("spec/links/2/pcie", "QPI"), "spec.links[2].pcie: Input should"),
    (
        "bad source",
        _set("spec/source", "guess"),
        "spec.source: Input should be 'nvml' or 'simulated'",
    ),
    (
        "bad MIG profile",
        _set("spec/gpus/0/migDevices/1/profile", "big"),
        "spec.gpus[0].migDevices[1].profile: String should match pattern",
    ),
    (
        "index out of order",
        _set("spec/gpus/1/index", 5),
        "spec.gpus[1].index: expected 1 (GPUs are listed by index, 0..n-1), got 5",
    ),
    (
        "link type contradicts nvlinks",
        _set("spec/links/2/type", "NVLink"),
        "spec.links[2].type: 'NVLink' does not match nvlinks=0 (expected 'PCIe')",
    ),
    ("link a >= b", _set("spec/links/2/a", 2), "spec.links[2]: a must be less than b"),
    (
        "link to a missing GPU",
        _set("spec/links/2/b", 3),
        "spec.links[2].b: GPU 3 does not exist (3 GPUs)",
    ),
    (
        "missing pair",
        _set("spec/links/1", _DELETE),
        "spec.links: every GPU pair needs a link; missing 0-2",
    ),
    (
        "duplicate pair",
        _set("spec/links/1", {"a": 0, "b": 1, "type": "PCIe", "nvlinks": 0, "pcie": "SYS"}),
        "spec.links[1]: pair 0-1 is given more than once",
    ),
    (
        "duplicate uuid",
        _set("spec/gpus/2/uuid", gpu_uuid(1)),
        f"spec.gpus: UUIDs given more than once: {gpu_uuid(1)}",
    ),
    (
        "MIG devices on a whole GPU",
        _set("spec/gpus/0/migEnabled", False),
        "spec.gpus[0].migDevices: must be empty when migEnabled is false",
    ),
    (
        "overlapping placements",
        _set("spec/gpus/0/migDevices/1/placementStart", 1),
        "spec.gpus[0].migDevices: GPU instances 3 and 13 have overlapping placements",
    ),
    (
        "placement past the end",
        _set("spec/gpus/0/migDevices/1/placementSize", 3),
        "spec.gpus[0].migDevices[1]: placement 6+3 runs past the GPU's 8 memory slices",
    ),
    (
        "one GPU instance, two placements",
        _both(
            _set("spec/gpus/0/migDevices/1/gpuInstanceId", 3),
            _set("spec/gpus/0/migDevices/1/computeInstanceId", 1),
        ),
        "spec.gpus[0].migDevices[1]: gpuInstanceId 3 is given two placements",
    ),
    (
        "compute instance given twice",
        _set("spec/gpus/0/migDevices/1/gpuInstanceId", 3),
        "spec.gpus[0].migDevices[1]: gpuInstanceId 3 computeInstanceId 0 is given more than once",
    ),
    (
        "name mismatch",
        _set("metadata/name", "other-node"),
        "spec.nodeName: 'gpu-node-1' does not match metadata.name",
    ),
    ("wrong apiVersion", _set("apiVersion", "v1"), "apiVersion: expected 'gpusched.io/v1alpha1'"),
    ("wrong kind", _set("kind", "Node"), "kind: expected 'GPUNodeInventory', got 'Node'"),
    ("no spec", _set("spec", _DELETE), "spec: expected an object, got NoneType"),
]


@pytest.mark.parametrize(
    ("mutate", "message"), [pytest.param(m, msg, id=name) for name, m, msg in MALFORMED]
)
def test_malformed_inventory_names_the_field(mutate: Mutation, message: str) -> None:
    obj = copy.deepcopy(sample_object())
    mutate(obj)
    with pytest.raises(InventoryError) as caught:
        inventory_from_object(obj)
    assert message in str(caught.value)
    assert any(message in problem for problem in caught.value.problems)
    assert isinstance(caught.value, ValueError)


def test_every_problem_is_reported() -> None:
    obj = sample_object()
    obj["spec"]["gpus"][1]["memoryMiB"] = -1
    obj["spec"]["gpus"][2]["pciBusId"] = "nope"
    with pytest.raises(InventoryError) as caught:
        inventory_from_object(obj)
    assert [p.split(":")[0] for p in caught.value.problems] == [
        "spec.gpus[1].memoryMiB",
        "spec.gpus[2].pciBusId",
    ]
    assert str(caught.value).startswith("GPUNodeInventory 'gpu-node-1': ")


def test_not_an_object() -> None:
    with pytest.raises(InventoryError, match="expected an object, got list"):
        inventory_from_object([])  # type: ignore[arg-type]


def test_compute_instances_may_share_a_gpu_instance() -> None:
    spec = sample_spec()
    spec["gpus"][0]["migDevices"] = [
        {
            "uuid": mig_uuid(10 + ci),
            "profile": "1c.3g.40gb",
            "memoryMiB": 40448,
            "gpuInstanceId": 1,
            "computeInstanceId": ci,
            "placementStart": 0,
            "placementSize": 4,
        }
        for ci in range(3)
    ]
    inv = GPUNodeInventory.model_validate(spec)
    assert inv.mig_profiles() == {"1c.3g.40gb": 3}
    assert node_labels(inv)["nvidia.com/mig-1c.3g.40gb.slices.gi"] == "3"
    assert node_labels(inv)["nvidia.com/mig-1c.3g.40gb.slices.ci"] == "1"


def test_single_gpu_needs_no_links() -> None:
    spec = sample_spec()
    spec["gpus"] = spec["gpus"][1:2]
    spec["gpus"][0]["index"] = 0
    spec["links"] = []
    assert len(GPUNodeInventory.model_validate(spec).gpus) == 1


# --- Labels and resources -----------------------------------------------------------------


def test_extended_resources_mixed_strategy() -> None:
    assert node_extended_resources(sample()) == {
        "nvidia.com/gpu": "2",  # GPU 0 is in MIG mode and does not count
        "nvidia.com/mig-1g.10gb": "1",
        "nvidia.com/mig-2g.20gb": "1",
    }


def test_all_mig_node_advertises_zero_whole_gpus() -> None:
    spec = sample_spec()
    spec["gpus"] = spec["gpus"][:1]
    spec["links"] = []
    assert node_extended_resources(GPUNodeInventory.model_validate(spec)) == {
        "nvidia.com/gpu": "0",
        "nvidia.com/mig-1g.10gb": "1",
        "nvidia.com/mig-2g.20gb": "1",
    }


def test_mig_resource_name() -> None:
    assert mig_resource_name("1g.10gb") == "nvidia.com/mig-1g.10gb"
    assert mig_resource_name("1g.10gb+me") == "nvidia.com/mig-1g.10gb.me"


def test_node_labels_follow_gpu_feature_discovery() -> None:
    assert node_labels(sample()) == {
        "nvidia.com/cuda.driver.major": "550",
        "nvidia.com/cuda.driver.minor": "127",
        "nvidia.com/cuda.driver.rev": "05",
        "nvidia.com/cuda.runtime.major": "12",
        "nvidia.com/cuda.runtime.minor": "4",
        "nvidia.com/gpu.count": "3",
        "nvidia.com/gpu.memory": "81559",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/mig-1g.10gb.count": "1",
        "nvidia.com/mig-1g.10gb.memory": "9984",
        "nvidia.com/mig-1g.10gb.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb",
        "nvidia.com/mig-1g.10gb.slices.ci": "1",
        "nvidia.com/mig-1g.10gb.slices.gi": "1",
        "nvidia.com/mig-2g.20gb.count": "1",
        "nvidia.com/mig-2g.20gb.memory": "20096",
        "nvidia.com/mig-2g.20gb.product": "NVIDIA-H100-80GB-HBM3-MIG-2g.20gb",
        "nvidia.com/mig-2g.20gb.slices.ci": "2",
        "nvidia.com/mig-2g.20gb.slices.gi": "2",
        "nvidia.com/mig.strategy": "mixed",
    }


def test_node_without_mig_has_no_mig_labels() -> None:
    spec = sample_spec()
    spec["gpus"][0]["migEnabled"] = False
    del spec["gpus"][0]["migDevices"]
    labels = node_labels(GPUNodeInventory.model_validate(spec))
    assert not [key for key in labels if key.startswith("nvidia.com/mig")]
    assert labels["nvidia.com/gpu.count"] == "3"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3"),
        ("Tesla V100-SXM2-32GB", "Tesla-V100-SXM2-32GB"),
        ("  (weird) name!! ", "weird-name"),
        ("x" * 80, "x" * 63),
    ],
)
def test_label_value(text: str, value: str) -> None:
    assert label_value(text) == value


# --- The CRD and the models agree ---------------------------------------------------------

_COMPARED = ("type", "enum", "minimum", "maximum", "pattern", "minLength", "maxLength", "maxItems")


def _normalize(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """The structural core of a schema: types, properties, required, items, constraints."""
    if "$ref" in schema:
        return _normalize(defs[schema["$ref"].rsplit("/", 1)[1]], defs)
    if "anyOf" in schema:  # Optional[X]: pydantic writes anyOf [X, null]; the CRD omits it
        branches = [s for s in schema["anyOf"] if s.get("type") != "null"]
        assert len(branches) == 1, schema
        return _normalize(branches[0], defs)
    out: dict[str, Any] = {}
    for key in _COMPARED:
        if key in schema:
            out[key] = sorted(schema[key]) if key == "enum" else schema[key]
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    if "properties" in schema:
        out["type"] = "object"
        out["properties"] = {
            name: _normalize(sub, defs) for name, sub in schema["properties"].items()
        }
        out["required"] = sorted(schema.get("required", []))
    if "items" in schema:
        out["items"] = _normalize(schema["items"], defs)
    return out


def _crd() -> dict[str, Any]:
    crd: dict[str, Any] = yaml.safe_load(CRD_PATH.read_text())
    return crd


def test_crd_schema_matches_the_model() -> None:
    model = GPUNodeInventory.model_json_schema(by_alias=True, mode="validation")
    crd_spec = _crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert _normalize(crd_spec, {}) == _normalize(model, model.get("$defs", {}))


def test_crd_identity_matches_the_constants() -> None:
    crd = _crd()
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["metadata"]["name"] == CRD_NAME == "gpunodeinventories.gpusched.io"
    spec = crd["spec"]
    assert spec["group"] == inventory.API_GROUP
    assert spec["scope"] == "Cluster"
    assert spec["names"]["kind"] == KIND
    assert spec["names"]["plural"] == PLURAL
    assert spec["names"]["shortNames"] == [SHORT_NAME]
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == (
        inventory.VERSION,
        True,
        True,
    )
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["GPUs"] == r".metadata.labels.gpusched\.io/gpu-count"
    assert columns["Product"] == ".spec.gpus[0].product"
    assert columns["Age"] == ".metadata.creationTimestamp"
    assert inventory.LABEL_INVENTORY_GPU_COUNT == "gpusched.io/gpu-count"


def test_the_packaged_crds_are_the_deploy_crds() -> None:
    """deploy/crds holds the CRDs (kustomize needs real files there); the package reaches them
    through the relative link gpusched/crds -> ../deploy/crds."""
    link = REPO / "gpusched" / "crds"
    assert link.is_symlink()
    assert str(link.readlink()) == "../deploy/crds"
    assert (REPO / "deploy" / "crds" / CRD_PATH.name).read_bytes() == CRD_PATH.read_bytes()


def test_pcie_level_names_match_topology() -> None:
    assert PCIE_LEVEL_NAMES == PCIE_LEVELS
    assert get_args(PCIeLevelName) == PCIE_LEVELS


def test_inventory_links_feed_the_topology_graph_directly() -> None:
    inv = sample()
    g = build_topology([gpu.index for gpu in inv.gpus], inv.links)
    assert pair_score(g, 0, 1) == 1800 + 20
    assert pair_score(g, 1, 2) == 50


def test_all_is_complete() -> None:
    exported = set(inventory.__all__)
    for name in exported:
        assert hasattr(inventory, name), name
    public_defs = {
        name
        for name, value in vars(inventory).items()
        if not name.startswith("_") and getattr(value, "__module__", None) == inventory.__name__
    }
    assert public_defs <= exported


# --- status: telemetry ---------------------------------------------------------------------

TELEMETRY = {
    "observedTime": "2026-11-25T10:00:00Z",
    "usedMemoryMiB": 30000,
    "gpus": [
        {"index": 0, "usedMemoryMiB": 20000, "utilizationPercent": 87, "temperatureC": 61},
        {"index": 1, "usedMemoryMiB": 10000, "utilizationPercent": 0},
    ],
}


def test_status_round_trips_and_is_optional() -> None:
    obj = sample_object()
    assert inventory.inventory_status_from_object(obj) is None
    obj["status"] = copy.deepcopy(TELEMETRY)
    status = inventory.inventory_status_from_object(obj)
    assert status is not None
    assert status.gpus[0].utilization_percent == 87
    assert status.gpus[1].temperature_c is None
    assert inventory.inventory_status_to_object(status) == TELEMETRY
    built = inventory.GPUNodeInventoryStatus.of(
        "2026-11-25T10:00:00Z", [inventory.GPUTelemetry.model_validate(TELEMETRY["gpus"][0])]
    )
    assert built.used_memory_mib == 20000


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"usedMemoryMiB": 1}, "usedMemoryMiB: 1 is not the GPUs' sum 30000"),
        ({"observedTime": "yesterday"}, "status.observedTime"),
        (
            {"gpus": [{"index": 0, "usedMemoryMiB": 1, "utilizationPercent": 101}]},
            "utilizationPercent",
        ),
        (
            {"gpus": [{"index": 9, "usedMemoryMiB": 30000, "utilizationPercent": 1}]},
            "GPU 9 does not exist",
        ),
        (
            {"gpus": [TELEMETRY["gpus"][0], TELEMETRY["gpus"][0]]},
            "a GPU index is given more than once",
        ),
    ],
    ids=["sum", "time", "utilisation", "no such GPU", "twice"],
)
def test_malformed_status_names_the_field(change: dict[str, Any], message: str) -> None:
    obj = sample_object()
    obj["status"] = copy.deepcopy(TELEMETRY) | change
    with pytest.raises(InventoryError, match=message):
        inventory.inventory_status_from_object(obj)


def test_crd_status_schema_matches_the_model() -> None:
    version = _crd()["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    model = inventory.GPUNodeInventoryStatus.model_json_schema(by_alias=True, mode="validation")
    crd_status = version["schema"]["openAPIV3Schema"]["properties"]["status"]
    assert _normalize(crd_status, {}) == _normalize(model, model.get("$defs", {}))
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["Used MiB"] == ".status.usedMemoryMiB"
