"""ResourceQuota in the simulated API server, through the real Kubernetes client.

A quota on ``requests.gpusched.io/gpu`` stops the pod that would exceed it with upstream's 403,
``status.used`` is the recount of the namespace's live pods, and quota objects are validated
as kube-apiserver validates them.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException

from gpusched.sim import SimCluster
from gpusched.sim.fleet import load_cluster_spec
from gpusched.sim.quota import matching_resources, pod_usage

NS = "default"


def _pod(
    name: str,
    limits: dict[str, str] | None = None,
    requests: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if limits:
        resources["limits"] = limits
    if requests:
        resources["requests"] = requests
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": "gpusched",
            "containers": [{"name": "main", "image": "cuda", "resources": resources}],
            **spec,
        },
    }


def _shared(name: str, gpus: int = 1, **spec: Any) -> dict[str, Any]:
    return _pod(name, {"gpusched.io/gpu": str(gpus), "gpusched.io/vram": "20Gi"}, **spec)


def _quota(name: str, hard: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": name},
        "spec": {"hard": hard, **spec},
    }


@pytest.fixture
async def core() -> AsyncIterator[k8s.CoreV1Api]:
    async with SimCluster(load_cluster_spec("dgx-h100", nodes=1), kubelets=False) as sim:
        yield k8s.CoreV1Api(sim.api_client())


async def _refused(call: Any) -> dict[str, Any]:
    with pytest.raises(ApiException) as info:
        await call
    body: dict[str, Any] = json.loads(info.value.body)
    body["_status"] = info.value.status
    return body


async def _used(core: k8s.CoreV1Api, name: str) -> dict[str, str]:
    quota = await core.read_namespaced_resource_quota(name, NS)
    return dict(quota.status.used or {})


# --------------------------------------------------------------------------- usage, pure

_NOW = datetime(2026, 1, 1, tzinfo=UTC)

USAGE_CASES = [
    pytest.param(
        # As stored: the API server defaults an extended resource's request to its limit.
        _pod("s", *[{"gpusched.io/gpu": "2", "gpusched.io/vram": "20Gi"}] * 2),
        {
            "count/pods": "1",
            "pods": "1",
            "requests.gpusched.io/gpu": "2",
            "requests.gpusched.io/vram": "20Gi",
        },
        id="extended-resources-only-as-requests",
    ),
    pytest.param(
        _pod("c", {"cpu": "2", "memory": "1Gi"}, {"cpu": "500m", "memory": "512Mi"}),
        {
            "count/pods": "1",
            "pods": "1",
            "cpu": "500m",
            "requests.cpu": "500m",
            "limits.cpu": "2",
            "memory": "512Mi",
            "requests.memory": "512Mi",
            "limits.memory": "1Gi",
        },
        id="cpu-and-memory",
    ),
    pytest.param(
        {**_shared("done"), "status": {"phase": "Succeeded"}},
        {"count/pods": "1"},
        id="a-finished-pod-counts-as-an-object-only",
    ),
    pytest.param(
        {
            **_shared("gone"),
            "metadata": {
                "name": "gone",
                "deletionTimestamp": "2025-12-31T23:59:00Z",
                "deletionGracePeriodSeconds": 30,
            },
        },
        {"count/pods": "1"},
        id="past-its-deletion-grace",
    ),
]


@pytest.mark.parametrize(("pod", "want"), USAGE_CASES)
def test_pod_usage(pod: dict[str, Any], want: dict[str, str]) -> None:
    assert pod_usage(pod, _NOW) == want


def test_only_the_requests_prefix_limits_an_extended_resource() -> None:
    names = ["gpusched.io/gpu", "limits.gpusched.io/gpu", "requests.gpusched.io/gpu", "pods"]
    assert matching_resources(names) == ["pods", "requests.gpusched.io/gpu"]


# --------------------------------------------------------------------------- admission


async def test_a_gpu_quota_stops_the_fifth_shared_gpu(core: k8s.CoreV1Api) -> None:
    await core.create_namespaced_resource_quota(
        NS, _quota("gpus", {"requests.gpusched.io/gpu": "4", "pods": "10"})
    )
    for i in range(4):
        await core.create_namespaced_pod(NS, _shared(f"share-{i}"))
    assert await _used(core, "gpus") == {"pods": "4", "requests.gpusched.io/gpu": "4"}
    refused = await _refused(core.create_namespaced_pod(NS, _shared("share-4")))
    assert refused["_status"] == 403
    assert refused["reason"] == "Forbidden"
    assert refused["message"] == (
        'pods "share-4" is forbidden: exceeded quota: gpus, requested: '
        "requests.gpusched.io/gpu=1, used: requests.gpusched.io/gpu=4, limited: "
        "requests.gpusched.io/gpu=4"
    )
    assert refused["details"] == {"name": "share-4", "kind": "pods"}
    # A deleted pod (unscheduled, so gone at once) gives its GPU back.
    await core.delete_namespaced_pod("share-0", NS)
    assert (await _used(core, "gpus"))["requests.gpusched.io/gpu"] == "3"
    await core.create_namespaced_pod(NS, _shared("share-4"))
    assert (await _used(core, "gpus"))["requests.gpusched.io/gpu"] == "4"


async def test_a_finished_pod_stops_counting(core: k8s.CoreV1Api) -> None:
    await core.create_namespaced_resource_quota(
        NS, _quota("gpus", {"requests.gpusched.io/gpu": "2"})
    )
    await core.create_namespaced_pod(NS, _shared("a", 2))
    await core.patch_namespaced_pod_status(
        "a", NS, {"status": {"phase": "Failed", "reason": "UnexpectedAdmissionError"}}
    )
    assert await _used(core, "gpus") == {"requests.gpusched.io/gpu": "0"}
    await core.create_namespaced_pod(NS, _shared("b", 2))


async def test_a_generated_name_is_reported_by_its_prefix(core: k8s.CoreV1Api) -> None:
    await core.create_namespaced_resource_quota(
        NS, _quota("none", {"requests.gpusched.io/gpu": "0"})
    )
    pod = _shared("x")
    pod["metadata"] = {"generateName": "job-"}
    refused = await _refused(core.create_namespaced_pod(NS, pod))
    assert refused["message"].startswith('pods "job-" is forbidden: exceeded quota: none, ')


@pytest.mark.parametrize(
    "hard",
    [
        pytest.param({"gpusched.io/gpu": "1"}, id="bare-extended-name"),
        pytest.param({"limits.gpusched.io/gpu": "1"}, id="limits-prefix"),
    ],
)
async def test_an_extended_resource_without_the_requests_prefix_limits_nothing(
    core: k8s.CoreV1Api, hard: dict[str, str]
) -> None:
    await core.create_namespaced_resource_quota(NS, _quota("q", hard))
    await core.create_namespaced_pod(NS, _shared("a", 4))
    quota = await core.read_namespaced_resource_quota("q", NS)
    assert quota.status.hard == hard
    assert quota.status.used == dict.fromkeys(hard, "0")


async def test_a_cpu_quota_requires_every_container_to_state_cpu(core: k8s.CoreV1Api) -> None:
    await core.create_namespaced_resource_quota(NS, _quota("cpu", {"requests.cpu": "4"}))
    refused = await _refused(core.create_namespaced_pod(NS, _shared("a")))
    assert refused["_status"] == 403
    assert refused["message"] == (
        'pods "a" is forbidden: failed quota: cpu: must specify requests.cpu for: main'
    )
    await core.create_namespaced_pod(NS, _pod("b", requests={"cpu": "3"}))
    refused = await _refused(core.create_namespaced_pod(NS, _pod("c", requests={"cpu": "2"})))
    assert refused["message"] == (
        'pods "c" is forbidden: exceeded quota: cpu, requested: requests.cpu=2, used: '
        "requests.cpu=3, limited: requests.cpu=4"
    )


async def test_scopes_choose_the_pods_a_quota_counts(core: k8s.CoreV1Api) -> None:
    await core.create_namespaced_resource_quota(
        NS, _quota("batch", {"requests.gpusched.io/gpu": "1"}, scopes=["Terminating"])
    )
    await core.create_namespaced_pod(NS, _shared("service", 4))  # not Terminating: not counted
    await core.create_namespaced_pod(NS, _shared("job", 1, activeDeadlineSeconds=600))
    refused = await _refused(
        core.create_namespaced_pod(NS, _shared("job-2", 1, activeDeadlineSeconds=600))
    )
    assert "exceeded quota: batch" in refused["message"]
    assert await _used(core, "batch") == {"requests.gpusched.io/gpu": "1"}


async def test_quota_in_another_namespace_does_not_apply(core: k8s.CoreV1Api) -> None:
    await core.create_namespace({"metadata": {"name": "team-a"}})
    await core.create_namespaced_resource_quota(
        "team-a", _quota("gpus", {"requests.gpusched.io/gpu": "0"})
    )
    await core.create_namespaced_pod(NS, _shared("a", 8))


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("spec", "causes"),
    [
        pytest.param(
            {"hard": {"gpus": "1"}},
            [("spec.hard[gpus]", "must be a standard resource type or fully qualified")],
            id="unqualified-name",
        ),
        pytest.param(
            {"hard": {"nvidia.com/gpu": "1500m"}},
            [("spec.hard[nvidia.com/gpu]", "must be an integer")],
            id="fractional-extended-resource",
        ),
        pytest.param(
            {"hard": {"pods": "-1"}},
            [("spec.hard[pods]", "must be greater than or equal to 0")],
            id="negative",
        ),
        pytest.param(
            {"hard": {"requests.cpu": "1"}, "scopes": ["BestEffort"]},
            [("spec.scopes", "unsupported scope applied to resource")],
            id="best-effort-limits-pods-only",
        ),
        pytest.param(
            {"hard": {"pods": "1"}, "scopes": ["Terminating", "NotTerminating"]},
            [("spec.scopes", "conflicting scopes")],
            id="conflicting-scopes",
        ),
        pytest.param(
            {"hard": {"pods": "1"}, "scopes": ["Nightly"]},
            [("spec.scopes", "unsupported scope")],
            id="unknown-scope",
        ),
    ],
)
async def test_quota_objects_are_validated(
    core: k8s.CoreV1Api, spec: dict[str, Any], causes: list[tuple[str, str]]
) -> None:
    body = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q"}, "spec": spec}
    refused = await _refused(core.create_namespaced_resource_quota(NS, body))
    assert refused["_status"] == 422
    got = [(c["field"], c["message"].split(": ")[-1]) for c in refused["details"]["causes"]]
    assert got == causes


async def test_the_controller_fills_status_as_a_client_sees_it(core: k8s.CoreV1Api) -> None:
    created = await core.create_namespaced_resource_quota(
        NS, _quota("gpus", {"requests.gpusched.io/gpu": "4", "requests.memory": "1Gi"})
    )
    assert created.status.used is None  # the create's answer; the recount comes after
    listed = await core.list_namespaced_resource_quota(NS)
    [quota] = listed.items
    assert quota.status.hard == {"requests.gpusched.io/gpu": "4", "requests.memory": "1Gi"}
    assert quota.status.used == {"requests.gpusched.io/gpu": "0", "requests.memory": "0"}


async def test_kubectl_get_quota_shows_used_over_hard(core: k8s.CoreV1Api) -> None:
    hard = {"requests.gpusched.io/gpu": "4", "limits.ephemeral-storage": "1Gi", "pods": "10"}
    await core.create_namespaced_resource_quota(NS, _quota("gpus", hard))
    await core.create_namespaced_pod(NS, _shared("a", 3))
    reply = await core.api_client.call_api(
        f"/api/v1/namespaces/{NS}/resourcequotas",
        "GET",
        header_params={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
        response_types_map={200: "object"},
        auth_settings=["BearerToken"],
        _return_http_data_only=True,
    )
    assert [c["name"] for c in reply["columnDefinitions"]] == ["Name", "Age", "Request", "Limit"]
    [row] = reply["rows"]
    assert row["cells"][0] == "gpus"
    assert row["cells"][2:] == [
        "pods: 1/10, requests.gpusched.io/gpu: 3/4",
        "limits.ephemeral-storage: 0/1Gi",
    ]
