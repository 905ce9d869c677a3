"""PriorityClass objects and Priority admission, through the simulated API server.

The two system classes exist from the start and cannot be deleted; user classes are validated
as ``ValidatePriorityClass`` does; pods get ``spec.priority`` and ``spec.preemptionPolicy``
from their class, the global default when they name none, and 403 for a class that does not
exist, with upstream's words.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from policy_helpers import PCS, PODS, failure, pod

from gpusched.kube.client import Kube
from gpusched.sim import SimCluster


def pclass(name: str, value: int | None = None, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        **extra,
    }
    if value is not None:
        body["value"] = value
    return body


@pytest.fixture
async def kube() -> AsyncIterator[Kube]:
    async with SimCluster(None, kubelets=False) as sim:
        yield sim.kube


async def test_the_system_classes_are_bootstrapped_and_cannot_be_deleted(kube: Kube) -> None:
    listed = await kube.get(PCS)
    by_name = {i["metadata"]["name"]: i for i in listed["items"]}
    assert by_name["system-node-critical"]["value"] == 2000001000
    assert by_name["system-cluster-critical"]["value"] == 2000000000
    assert by_name["system-cluster-critical"]["preemptionPolicy"] == "PreemptLowerPriority"
    assert "globalDefault" not in by_name["system-cluster-critical"]
    err = await failure(kube.delete(f"{PCS}/system-node-critical"))
    assert err.code == 403
    assert err.message == (
        'priorityclasses.scheduling.k8s.io "system-node-critical" is forbidden: this is a '
        "system priority class and cannot be deleted"
    )


async def test_a_class_is_stored_with_upstream_defaults(kube: Kube) -> None:
    created = await kube.create(PCS, pclass("batch", 1000, description="batch jobs"))
    assert {k: created[k] for k in ("value", "description", "preemptionPolicy")} == {
        "value": 1000,
        "description": "batch jobs",
        "preemptionPolicy": "PreemptLowerPriority",
    }
    zero = await kube.create(PCS, pclass("zero"))  # value absent decodes to 0
    assert zero["value"] == 0


INVALID = [
    pytest.param(
        pclass("huge", 1_000_000_001),
        'PriorityClass.scheduling.k8s.io "huge" is invalid: value: Forbidden: maximum allowed '
        "value of a user defined priority is 1000000000",
        id="value-over-1e9",
    ),
    pytest.param(
        pclass("system-mine", 10),
        'PriorityClass.scheduling.k8s.io "system-mine" is invalid: metadata.name: Forbidden: '
        "priority class names with 'system-' prefix are reserved for system use only. error: "
        "system-mine is not a known system priority class",
        id="reserved-prefix",
    ),
    pytest.param(
        pclass("p", 1, preemptionPolicy="Sometimes"),
        'PriorityClass.scheduling.k8s.io "p" is invalid: preemptionPolicy: Unsupported value: '
        '"Sometimes": supported values: "Never", "PreemptLowerPriority"',
        id="bad-policy",
    ),
]


@pytest.mark.parametrize(("body", "message"), INVALID)
async def test_invalid_classes(kube: Kube, body: dict[str, Any], message: str) -> None:
    err = await failure(kube.create(PCS, body))
    assert (err.code, err.message) == (422, message)


async def test_value_and_preemption_policy_are_immutable(kube: Kube) -> None:
    await kube.create(PCS, pclass("imm", 10))
    err = await failure(kube.patch(f"{PCS}/imm", {"value": 11}))
    assert err.code == 422
    assert "value: Forbidden: may not be changed in an update." in err.message
    err = await failure(kube.patch(f"{PCS}/imm", {"preemptionPolicy": "Never"}))
    assert 'preemptionPolicy: Invalid value: "Never": field is immutable' in err.message
    updated = await kube.patch(f"{PCS}/imm", {"description": "may change"})
    assert updated["description"] == "may change"


async def test_only_one_global_default(kube: Kube) -> None:
    await kube.create(PCS, pclass("default-a", 5, globalDefault=True))
    err = await failure(kube.create(PCS, pclass("default-b", 6, globalDefault=True)))
    assert err.code == 403
    assert err.message == (
        'priorityclasses.scheduling.k8s.io "default-b" is forbidden: PriorityClass default-a is '
        "already marked as default. Only one default can exist"
    )
    await kube.create(PCS, pclass("other", 6))
    err = await failure(kube.patch(f"{PCS}/other", {"globalDefault": True}))
    assert err.code == 403


ADMISSION = [
    pytest.param({}, (0, "PreemptLowerPriority", None), id="no-class-no-default"),
    pytest.param(
        {"priorityClassName": "high"}, (900, "Never", "high"), id="class-value-and-policy"
    ),
    pytest.param(
        {"priorityClassName": "high", "priority": 900},
        (900, "Never", "high"),
        id="an-agreeing-priority-is-accepted",
    ),
    pytest.param(
        {"priorityClassName": "system-node-critical"},
        (2000001000, "PreemptLowerPriority", "system-node-critical"),
        id="system-class",
    ),
]


@pytest.mark.parametrize(("spec", "want"), ADMISSION)
async def test_pod_priority_from_its_class(
    kube: Kube, spec: dict[str, Any], want: tuple[int, str, str | None]
) -> None:
    await kube.create(PCS, pclass("high", 900, preemptionPolicy="Never"))
    created = await kube.create(PODS, pod("p", **spec))
    s = created["spec"]
    assert (s["priority"], s["preemptionPolicy"], s.get("priorityClassName")) == want


async def test_the_global_default_class_names_pods_without_one(kube: Kube) -> None:
    await kube.create(PCS, pclass("everyone", 7, globalDefault=True))
    created = await kube.create(PODS, pod("p"))
    assert created["spec"]["priorityClassName"] == "everyone"
    assert created["spec"]["priority"] == 7


FORBIDDEN = [
    pytest.param(
        {"priorityClassName": "nope"},
        'pods "p" is forbidden: no PriorityClass with name nope was found',
        id="unknown-class",
    ),
    pytest.param(
        {"priorityClassName": "high", "priority": 5},
        'pods "p" is forbidden: the integer value of priority (5) must not be provided in pod '
        "spec; priority admission controller computed 900 from the given PriorityClass name",
        id="disagreeing-priority",
    ),
    pytest.param(
        {"priorityClassName": "high", "preemptionPolicy": "PreemptLowerPriority"},
        'pods "p" is forbidden: the string value of PreemptionPolicy (PreemptLowerPriority) '
        "must not be provided in pod spec; priority admission controller computed Never from "
        "the given PriorityClass name",
        id="disagreeing-policy",
    ),
]


@pytest.mark.parametrize(("spec", "message"), FORBIDDEN)
async def test_pod_admission_refusals(kube: Kube, spec: dict[str, Any], message: str) -> None:
    await kube.create(PCS, pclass("high", 900, preemptionPolicy="Never"))
    err = await failure(kube.create(PODS, pod("p", **spec)))
    assert (err.code, err.reason, err.message) == (403, "Forbidden", message)


async def test_priority_survives_updates_and_the_class_may_go(kube: Kube) -> None:
    await kube.create(PCS, pclass("high", 900))
    await kube.create(PODS, pod("p", priorityClassName="high"))
    await kube.delete(f"{PCS}/high")
    updated = await kube.patch(f"{PODS}/p", {"metadata": {"labels": {"a": "b"}}})
    assert updated["spec"]["priority"] == 900


async def test_table(kube: Kube) -> None:
    await kube.create(PCS, pclass("batch", 1000, globalDefault=True))
    table = await kube.request(
        "GET",
        f"{PCS}/batch",
        None,
        None,
    )
    assert table["value"] == 1000  # plain JSON without the Table Accept header
    # kubectl get priorityclasses: Name, Value, Global-Default, Age, PreemptionPolicy.
    response = await kube.api_client.call_api(
        f"{PCS}/batch",
        "GET",
        header_params={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
        auth_settings=["BearerToken"],
        _preload_content=False,
    )
    data = await response.json()
    assert [c["name"] for c in data["columnDefinitions"]] == [
        "Name",
        "Value",
        "Global-Default",
        "Age",
        "PreemptionPolicy",
    ]
    cells = data["rows"][0]["cells"]
    assert cells[:3] == ["batch", 1000, True]
    assert cells[4] == "PreemptLowerPriority"
