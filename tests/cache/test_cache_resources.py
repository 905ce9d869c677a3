"""Resources: quantities to integers, and a pod's effective requests (table-driven)."""

from __future__ import annotations

from typing import Any

import pytest
from cache_builders import make_node, make_pod

from gpusched.cache import Resources, node_allocatable, pod_requests

GIB = 1024**3
MIB = 1024**2


@pytest.mark.parametrize(
    ("resource_list", "expected"),
    [
        pytest.param({"cpu": "1500m"}, {"cpu": 1500}, id="millicores"),
        pytest.param({"cpu": "1.5"}, {"cpu": 1500}, id="decimal-cpu"),
        pytest.param({"cpu": "2"}, {"cpu": 2000}, id="whole-cpu"),
        pytest.param({"cpu": "0.0001"}, {"cpu": 1}, id="cpu-rounds-up"),
        pytest.param({"cpu": "100u"}, {"cpu": 1}, id="micro-cpu-rounds-up"),
        pytest.param({"memory": "16Gi"}, {"memory": 16 * GIB}, id="binary-memory"),
        pytest.param({"memory": "1G"}, {"memory": 10**9}, id="decimal-memory"),
        pytest.param({"memory": "129e6"}, {"memory": 129 * 10**6}, id="exponent"),
        pytest.param({"memory": "0.5Ki"}, {"memory": 512}, id="fractional-binary"),
        pytest.param({"memory": "1500m"}, {"memory": 2}, id="milli-bytes-round-up"),
        pytest.param({"ephemeral-storage": "10Gi"}, {"ephemeral-storage": 10 * GIB}, id="eph"),
        pytest.param({"pods": "110"}, {"pods": 110}, id="pods"),
        pytest.param({"nvidia.com/gpu": "8"}, {"nvidia.com/gpu": 8}, id="extended"),
        pytest.param({"nvidia.com/gpu": "0"}, {}, id="zero-not-stored"),
        pytest.param({"hugepages-2Mi": "4Mi"}, {"hugepages-2Mi": 4 * MIB}, id="hugepages"),
        pytest.param(
            {"cpu": 4, "nvidia.com/gpu": 2}, {"cpu": 4000, "nvidia.com/gpu": 2}, id="ints"
        ),
    ],
)
def test_resource_list(resource_list: dict[str, Any], expected: dict[str, int]) -> None:
    assert Resources.from_resource_list(resource_list).as_dict() == expected


def test_malformed_quantity_raises_upstream_message() -> None:
    with pytest.raises(ValueError, match="quantities must match"):
        Resources.from_resource_list({"cpu": "lots"})


def test_add_sub_max_copy_eq() -> None:
    a = Resources(1000, 10, 0, 1, {"nvidia.com/gpu": 2})
    b = Resources(500, 5, 7, 1, {"nvidia.com/gpu": 1, "x/y": 3})
    total = a.copy()
    total.add(b)
    assert total == Resources(1500, 15, 7, 2, {"nvidia.com/gpu": 3, "x/y": 3})
    total.sub(b)
    assert total == a
    assert total.scalar == {"nvidia.com/gpu": 2}  # x/y went back to zero and was dropped
    assert total is not a
    assert total.scalar is not a.scalar
    peak = Resources(2000, 1, 0, 0, {"x/y": 1})
    peak.set_max(b)
    assert peak == Resources(2000, 5, 7, 1, {"nvidia.com/gpu": 1, "x/y": 3})
    assert peak.get("cpu") == 2000
    assert peak.get("x/y") == 3
    assert peak.get("absent") == 0
    assert Resources(scalar={"a": 0}) == Resources()
    assert Resources().__eq__(object()) is NotImplemented
    assert "cpu=2000" in repr(peak)


def _requests(**spec: Any) -> dict[str, int]:
    return pod_requests({"spec": spec}).as_dict()


def _c(**requests: str) -> dict[str, Any]:
    return {"name": "c", "resources": {"requests": requests}}


def _sidecar(**requests: str) -> dict[str, Any]:
    return {"name": "s", "restartPolicy": "Always", "resources": {"requests": requests}}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param({}, {"pods": 1}, id="empty-pod-counts-one"),
        pytest.param(
            {"containers": [{"name": "c"}, {"name": "d", "resources": {}}]},
            {"pods": 1},
            id="no-requests",
        ),
        pytest.param(
            {"containers": [_c(cpu="1", memory="1Gi"), _c(cpu="500m", memory="1Gi")]},
            {"cpu": 1500, "memory": 2 * GIB, "pods": 1},
            id="sum-of-containers",
        ),
        pytest.param(
            {
                "containers": [_c(cpu="1"), _c(cpu="1")],
                "initContainers": [_c(cpu="3"), _c(cpu="500m", memory="4Gi")],
            },
            {"cpu": 3000, "memory": 4 * GIB, "pods": 1},
            id="init-max-per-resource",
        ),
        pytest.param(
            {"containers": [_c(cpu="4")], "initContainers": [_c(cpu="3")]},
            {"cpu": 4000, "pods": 1},
            id="init-below-containers",
        ),
        pytest.param(
            {
                "containers": [_c(cpu="1", memory="1Gi")],
                "overhead": {"cpu": "250m", "memory": "120Mi"},
            },
            {"cpu": 1250, "memory": GIB + 120 * MIB, "pods": 1},
            id="overhead",
        ),
        pytest.param(
            {
                "containers": [_c(cpu="1")],
                "initContainers": [_c(cpu="2")],
                "overhead": {"cpu": "100m"},
            },
            {"cpu": 2100, "pods": 1},
            id="overhead-after-init-max",
        ),
        pytest.param(
            {"containers": [_c(cpu="1")], "initContainers": [_sidecar(cpu="500m")]},
            {"cpu": 1500, "pods": 1},
            id="sidecar-runs-beside-containers",
        ),
        pytest.param(
            {
                "containers": [_c(cpu="1")],
                "initContainers": [_sidecar(cpu="1"), _c(cpu="2")],
            },
            {"cpu": 3000, "pods": 1},
            id="init-after-sidecar-charged-with-it",
        ),
        pytest.param(
            {
                "containers": [_c(cpu="1")],
                "initContainers": [_c(cpu="2"), _sidecar(cpu="1")],
            },
            {"cpu": 2000, "pods": 1},
            id="init-before-sidecar-alone",
        ),
        pytest.param(
            {
                "containers": [_c(cpu="1", memory="1Gi")],
                "resources": {"requests": {"cpu": "4", "memory": "8Gi"}},
                "overhead": {"cpu": "100m"},
            },
            {"cpu": 4100, "memory": 8 * GIB, "pods": 1},
            id="pod-level-resources",
        ),
        pytest.param(
            {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
            {"pods": 1},
            id="limits-not-read",
        ),
        pytest.param(
            {"containers": [_c(**{"nvidia.com/gpu": "2"}), _c(**{"nvidia.com/mig-1g.10gb": "1"})]},
            {"nvidia.com/gpu": 2, "nvidia.com/mig-1g.10gb": 1, "pods": 1},
            id="gpu-and-mig",
        ),
    ],
)
def test_pod_requests(spec: dict[str, Any], expected: dict[str, int]) -> None:
    assert _requests(**spec) == expected


def test_pod_requests_from_builder() -> None:
    pod = make_pod("p").cpu("2").memory("8Gi").gpus(4).init({"cpu": "6"}).obj()
    assert pod_requests(pod).as_dict() == {
        "cpu": 6000,
        "memory": 8 * GIB,
        "nvidia.com/gpu": 4,
        "pods": 1,
    }


def test_node_allocatable() -> None:
    node = make_node("n", gpus=8, cpu="7500m", memory="30Gi")
    assert node_allocatable(node).as_dict() == {
        "cpu": 7500,
        "memory": 30 * GIB,
        "nvidia.com/gpu": 8,
        "pods": 110,
    }
    assert node_allocatable({"metadata": {"name": "bare"}}) == Resources()
