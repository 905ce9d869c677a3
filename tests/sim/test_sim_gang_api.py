"""The gang objects the simulated API server serves.

Kubernetes 1.36's ``scheduling.k8s.io/v1alpha2`` Workload and PodGroup (validation as their
declarative tags say: exactly one policy, ``minCount >= 1``, at most 8 templates, immutable
specs, PodGroup ``status.conditions``), the pod's ``spec.schedulingGroup.podGroupName``, and
scheduler-plugins' ``scheduling.x-k8s.io/v1alpha1`` PodGroup CRD, installed with the cluster.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from policy_helpers import NS, PODS, failure, pod

from gpusched.kube.client import Kube
from gpusched.sim import SimCluster
from gpusched.sim.cluster import EXTRA_CRD_NAMES

V1A2 = f"/apis/scheduling.k8s.io/v1alpha2/namespaces/{NS}"
WORKLOADS = f"{V1A2}/workloads"
GROUPS = f"{V1A2}/podgroups"
X_GROUPS = f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{NS}/podgroups"
REPO = Path(__file__).resolve().parents[2]


def template(name: str, policy: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    if policy is None:
        policy = {"gang": {"minCount": 4}}
    return {"name": name, "schedulingPolicy": policy, **extra}


def workload(name: str, templates: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "Workload",
        "metadata": {"name": name},
        "spec": {"podGroupTemplates": templates, **spec},
    }


def group(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}, **spec},
    }


@pytest.fixture
async def kube() -> AsyncIterator[Kube]:
    async with SimCluster(None, kubelets=False) as sim:
        yield sim.kube


async def test_workload_round_trip(kube: Kube) -> None:
    body = workload(
        "job",
        [
            template(
                "workers",
                schedulingConstraints={
                    "topologyConstraints": [{"topologyKey": "nvlink.io/domain"}]
                },
            ),
            template("driver", {"basic": {}}),
        ],
        controllerRef={"apiGroup": "batch", "kind": "Job", "name": "job"},
    )
    created = await kube.create(WORKLOADS, body)
    assert created["spec"] == body["spec"]
    assert "generation" not in created["metadata"]  # neither strategy sets one upstream


WORKLOAD_INVALID = [
    pytest.param(
        [], "spec.podGroupTemplates: Required value: must have at least one item", id="none"
    ),
    pytest.param(
        [template(f"t{i}") for i in range(9)],
        "spec.podGroupTemplates: Too many: 9: must have at most 8 items",
        id="nine-templates",
    ),
    pytest.param(
        [template("t", {})],
        'spec.podGroupTemplates[0].schedulingPolicy: Invalid value: "": must specify one of: '
        "`basic`, `gang`",
        id="no-policy",
    ),
    pytest.param(
        [template("t", {"basic": {}, "gang": {"minCount": 1}})],
        'spec.podGroupTemplates[0].schedulingPolicy: Invalid value: "{`basic`, `gang`}": '
        "exactly one of `basic`, `gang` is required, but multiple fields are set",
        id="two-policies",
    ),
    pytest.param(
        [template("t", {"gang": {"minCount": 0}})],
        "spec.podGroupTemplates[0].schedulingPolicy.gang.minCount: Required value",
        id="min-count-zero",
    ),
    pytest.param(
        [template("t", {"gang": {"minCount": -2}})],
        "spec.podGroupTemplates[0].schedulingPolicy.gang.minCount: Invalid value: -2: must be "
        "greater than zero",
        id="min-count-negative",
    ),
    pytest.param(
        [template("t"), template("t")],
        'spec.podGroupTemplates[1]: Duplicate value: "t"',
        id="duplicate-names",
    ),
    pytest.param(
        [template("Not_A_Label")],
        'spec.podGroupTemplates[0].name: Invalid value: "Not_A_Label"',
        id="name-not-a-dns-label",
    ),
    pytest.param(
        [
            template(
                "t",
                schedulingConstraints={
                    "topologyConstraints": [{"topologyKey": "a"}, {"topologyKey": "b"}]
                },
            )
        ],
        "spec.podGroupTemplates[0].schedulingConstraints.topologyConstraints: Too many: 2: must "
        "have at most 1 item",
        id="two-topology-constraints",
    ),
]


@pytest.mark.parametrize(("templates", "message"), WORKLOAD_INVALID)
async def test_workload_validation(
    kube: Kube, templates: list[dict[str, Any]], message: str
) -> None:
    err = await failure(kube.create(WORKLOADS, workload("w", templates)))
    assert err.code == 422
    assert err.message.startswith('Workload.scheduling.k8s.io "w" is invalid: ')
    assert message in err.message


async def test_workload_templates_are_immutable(kube: Kube) -> None:
    await kube.create(WORKLOADS, workload("w", [template("t")]))
    err = await failure(
        kube.patch(WORKLOADS + "/w", {"spec": {"podGroupTemplates": [template("u")]}})
    )
    assert err.code == 422
    assert "spec.podGroupTemplates: Invalid value: " in err.message
    assert err.message.endswith("field is immutable")
    labelled = await kube.patch(WORKLOADS + "/w", {"metadata": {"labels": {"a": "b"}}})
    assert labelled["metadata"]["labels"] == {"a": "b"}


async def test_pod_group_spec_and_status(kube: Kube) -> None:
    await kube.create(WORKLOADS, workload("job", [template("workers")]))
    ref = {"workload": {"workloadName": "job", "podGroupTemplateName": "workers"}}
    created = await kube.create(
        GROUPS, {**group("job-workers-0", podGroupTemplateRef=ref), "status": {"x": 1}}
    )
    assert created["status"] == {}
    assert created["spec"]["podGroupTemplateRef"] == ref
    err = await failure(
        kube.patch(
            GROUPS + "/job-workers-0", {"spec": {"schedulingPolicy": {"gang": {"minCount": 3}}}}
        )
    )
    assert "spec.schedulingPolicy: Invalid value: " in err.message
    assert err.message.endswith("field is immutable")
    condition = {
        "type": "PodGroupScheduled",
        "status": "True",
        "reason": "Scheduled",
        "message": "",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    updated = await kube.patch(
        GROUPS + "/job-workers-0/status",
        {"metadata": {"labels": {"ignored": "yes"}}, "status": {"conditions": [condition]}},
    )
    assert updated["status"]["conditions"] == [condition]
    assert "labels" not in updated["metadata"]  # ResetObjectMetaForStatus


REFS = [
    pytest.param("ghost", "workers", 'PodGroup rejected: Workload "ghost" not found', id="none"),
    pytest.param(
        "job",
        "drivers",
        'PodGroup rejected: PodGroupTemplate "drivers" not found in Workload "job"',
        id="no-such-template",
    ),
]


@pytest.mark.parametrize(("workload_name", "template_name", "why"), REFS)
async def test_a_pod_group_needs_its_workload_and_template(
    kube: Kube, workload_name: str, template_name: str, why: str
) -> None:
    await kube.create(WORKLOADS, workload("job", [template("workers")]))
    ref = {"workload": {"workloadName": workload_name, "podGroupTemplateName": template_name}}
    err = await failure(kube.create(GROUPS, group("g", podGroupTemplateRef=ref)))
    assert (err.code, err.message) == (
        403,
        f'podgroups.scheduling.k8s.io "g" is forbidden: {why}',
    )


async def test_pod_group_validation(kube: Kube) -> None:
    err = await failure(
        kube.create(GROUPS, group("g", podGroupTemplateRef={"workload": {"workloadName": "w"}}))
    )
    assert "spec.podGroupTemplateRef.workload.podGroupTemplateName: Required value" in (err.message)
    no_policy = group("g")
    del no_policy["spec"]["schedulingPolicy"]
    err = await failure(kube.create(GROUPS, no_policy))
    assert "spec.schedulingPolicy: Required value" in err.message


POD_GROUP_REFS = [
    pytest.param({"podGroupName": "job-workers-0"}, "", id="valid"),
    pytest.param(
        {"podGroupName": "Bad_Name"},
        'spec.schedulingGroup.podGroupName: Invalid value: "Bad_Name"',
        id="not-a-dns-subdomain",
    ),
    pytest.param(
        {},
        'spec.schedulingGroup: Invalid value: "": must specify one of: `podGroupName`',
        id="empty",
    ),
]


@pytest.mark.parametrize(("ref", "message"), POD_GROUP_REFS)
async def test_pod_scheduling_group(kube: Kube, ref: dict[str, Any], message: str) -> None:
    body = pod("p", schedulingGroup=ref)
    if not message:
        created = await kube.create(PODS, body)  # the PodGroup need not exist yet
        assert created["spec"]["schedulingGroup"] == ref
        err = await failure(
            kube.patch(PODS + "/p", {"spec": {"schedulingGroup": {"podGroupName": "other"}}})
        )
        assert err.code == 422
        assert "pod updates may not change fields other than" in err.message
        return
    err = await failure(kube.create(PODS, body))
    assert err.code == 422
    assert message in err.message


async def test_scheduler_plugins_pod_group_crd(kube: Kube) -> None:
    created = await kube.create(
        X_GROUPS,
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "pg"},
            "spec": {"minMember": 3, "minResources": {"nvidia.com/gpu": 8}},
        },
    )
    assert created["spec"]["minMember"] == 3
    err = await failure(
        kube.create(
            X_GROUPS,
            {
                "apiVersion": "scheduling.x-k8s.io/v1alpha1",
                "kind": "PodGroup",
                "metadata": {"name": "none"},
                "spec": {"minMember": 0},
            },
        )
    )
    assert err.code == 422
    status = await kube.patch(
        X_GROUPS + "/pg/status", {"status": {"phase": "Running", "running": 3}}
    )
    assert status["status"] == {"phase": "Running", "running": 3}
    listing = await kube.get("/apis/scheduling.x-k8s.io/v1alpha1")
    (entry,) = [r for r in listing["resources"] if r["name"] == "podgroups"]
    assert entry["shortNames"] == ["pg", "pgs"]


def test_the_crd_ships_in_deploy_and_the_package() -> None:
    name = "podgroups.scheduling.x-k8s.io"  # the gang CRD among those the simulation serves
    assert name in EXTRA_CRD_NAMES
    deployed = REPO / "deploy" / "crds" / f"{name}.yaml"
    packaged = REPO / "gpusched" / "crds" / f"{name}.yaml"
    assert deployed.read_bytes() == packaged.read_bytes()
    crd = yaml.safe_load(deployed.read_text())
    assert crd["metadata"]["annotations"]["api-approved.kubernetes.io"]
    kustomization = yaml.safe_load((REPO / "deploy" / "crds" / "Kustomization").read_text())
    assert f"{name}.yaml" in kustomization["resources"]
    (version,) = crd["spec"]["versions"]
    schema = version["schema"]["openAPIV3Schema"]["properties"]
    assert set(schema["spec"]["properties"]) == {
        "minMember",
        "minResources",
        "scheduleTimeoutSeconds",
    }
    assert set(schema["status"]["properties"]) == {
        "phase",
        "occupiedBy",
        "running",
        "succeeded",
        "failed",
        "scheduleStartTime",
    }


async def test_a_controller_ref_may_be_set_once(kube: Kube) -> None:
    await kube.create(WORKLOADS, workload("w", [template("t")]))
    err = await failure(
        kube.patch(WORKLOADS + "/w", {"spec": {"controllerRef": {"kind": "Job", "name": "a/b"}}})
    )
    assert "spec.controllerRef.name: Invalid value: \"a/b\": may not contain '/'" in err.message
    ref = {"apiGroup": "batch", "kind": "Job", "name": "train"}
    set_once = await kube.patch(WORKLOADS + "/w", {"spec": {"controllerRef": ref}})
    assert set_once["spec"]["controllerRef"] == ref
    err = await failure(
        kube.patch(WORKLOADS + "/w", {"spec": {"controllerRef": {**ref, "name": "other"}}})
    )
    assert err.code == 422
    assert err.message.endswith("field is immutable")


async def test_strategic_merge_patches_merge_pod_group_conditions(kube: Kube) -> None:
    await kube.create(GROUPS, group("g"))
    smp = "application/strategic-merge-patch+json"

    def cond(ctype: str, status: str) -> dict[str, Any]:
        return {
            "type": ctype,
            "status": status,
            "reason": "R",
            "message": "",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }

    await kube.patch(
        GROUPS + "/g/status", {"status": {"conditions": [cond("PodGroupScheduled", "False")]}}, smp
    )
    merged = await kube.patch(
        GROUPS + "/g/status", {"status": {"conditions": [cond("DisruptionTarget", "True")]}}, smp
    )
    # Merged by type (the patch's items first, as strategicpatch orders them).
    assert [c["type"] for c in merged["status"]["conditions"]] == [
        "DisruptionTarget",
        "PodGroupScheduled",
    ]
    err = await failure(
        kube.patch(X_GROUPS + "/none", {"spec": {"minMember": 2}}, smp)  # a custom resource
    )
    assert err.code == 415
