"""PodDisruptionBudgets and the disruption controller, through the simulated API server.

The controller's status follows kube-controller-manager's ``pkg/controller/disruption``:
``expectedPods``, ``desiredHealthy``, ``currentHealthy``, ``disruptionsAllowed``,
``observedGeneration``, ``disruptedPods`` and the ``DisruptionAllowed`` condition, updated as
pods come, go and turn Ready or not. Time (``disruptedPods`` entries expire after 2 minutes)
runs on a fake clock.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from policy_helpers import PDBS, PODS, failure, pdb, pod, running_pod, set_ready, wait_for

from gpusched.clock import FakeClock
from gpusched.kube.client import Kube
from gpusched.sim import SimCluster

APP = {"matchLabels": {"app": "train"}}
LABELS = {"app": "train"}


@pytest.fixture
async def sim() -> AsyncIterator[SimCluster]:
    async with SimCluster(None, kubelets=False, clock=FakeClock()) as cluster:
        yield cluster


@pytest.fixture
def kube(sim: SimCluster) -> Kube:
    return sim.kube


def numbers(obj: dict[str, Any]) -> tuple[int, int, int, int]:
    s = obj["status"]
    return s["expectedPods"], s["desiredHealthy"], s["currentHealthy"], s["disruptionsAllowed"]


def condition(obj: dict[str, Any]) -> tuple[str, str, str]:
    (c,) = [c for c in obj["status"]["conditions"] if c["type"] == "DisruptionAllowed"]
    return c["status"], c["reason"], c["message"]


async def status_of(kube: Kube, name: str) -> dict[str, Any]:
    return await wait_for(
        kube,
        f"{PDBS}/{name}",
        lambda o: o["status"].get("observedGeneration") == o["metadata"]["generation"],
    )


async def test_a_new_budget_starts_zeroed_then_the_controller_fills_it(kube: Kube) -> None:
    for i in range(3):
        await running_pod(kube, f"p{i}", LABELS)
    created = await kube.create(PDBS, pdb("b", APP, minAvailable=2))
    assert created["metadata"]["generation"] == 1
    assert created["status"] == {
        "disruptionsAllowed": 0,
        "currentHealthy": 0,
        "desiredHealthy": 0,
        "expectedPods": 0,
    }
    done = await status_of(kube, "b")
    assert numbers(done) == (3, 2, 3, 1)
    assert condition(done) == ("True", "SufficientPods", "")
    assert done["status"]["observedGeneration"] == 1


async def test_status_follows_pods_coming_going_and_readiness(kube: Kube) -> None:
    await kube.create(PDBS, pdb("b", APP, minAvailable=1))
    path = f"{PDBS}/b"
    assert numbers(await status_of(kube, "b")) == (0, 1, 0, 0)
    await running_pod(kube, "p0", LABELS)
    await running_pod(kube, "p1", LABELS)
    got = await wait_for(kube, path, lambda o: o["status"]["currentHealthy"] == 2)
    assert numbers(got) == (2, 1, 2, 1)
    await set_ready(kube, "p1", False)
    got = await wait_for(kube, path, lambda o: o["status"]["currentHealthy"] == 1)
    assert numbers(got) == (2, 1, 1, 0)
    assert condition(got) == ("False", "InsufficientPods", "")
    await set_ready(kube, "p1", True)
    await wait_for(kube, path, lambda o: o["status"]["disruptionsAllowed"] == 1)
    await kube.create(PODS, pod("other", {"app": "serve"}))  # not selected
    await kube.delete(f"{PODS}/p0", query={"gracePeriodSeconds": "0"})
    got = await wait_for(kube, path, lambda o: o["status"]["expectedPods"] == 1)
    assert numbers(got) == (1, 1, 1, 0)


SELECTORS = [
    pytest.param(None, 0, id="nil-selects-nothing"),
    pytest.param({}, 3, id="empty-selects-every-pod"),
    pytest.param({"matchExpressions": [{"key": "app", "operator": "Exists"}]}, 2, id="exists"),
]


@pytest.mark.parametrize(("selector", "expected"), SELECTORS)
async def test_selectors(kube: Kube, selector: dict[str, Any] | None, expected: int) -> None:
    await running_pod(kube, "a", LABELS)
    await running_pod(kube, "b", {"app": "serve"})
    await running_pod(kube, "c", {})
    body = pdb("b", None, minAvailable=0)
    if selector is not None:
        body["spec"]["selector"] = selector
    await kube.create(PDBS, body)
    got = await status_of(kube, "b")
    assert got["status"]["expectedPods"] == expected


async def test_percentages_and_max_unavailable_count_unmanaged_pods_as_zero(kube: Kube) -> None:
    # Upstream needs the scale of the pods' controllers; pods without one are "unmanaged" and
    # count 0, so nothing is expected and no disruption is allowed.
    for i in range(4):
        await running_pod(kube, f"p{i}", LABELS)
    await kube.create(PDBS, pdb("pct", APP, minAvailable="50%"))
    await kube.create(PDBS, pdb("max", APP, maxUnavailable=1))
    for name in ("pct", "max"):
        got = await status_of(kube, name)
        assert numbers(got) == (0, 0, 4, 0)
        assert condition(got) == ("False", "InsufficientPods", "")


async def test_a_pod_with_a_controller_the_simulation_cannot_scale_fails_safe(kube: Kube) -> None:
    owned = pod("owned", LABELS, nodeName="n1")
    owned["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "name": "rs",
            "uid": "8b3f0b5e-0000-4000-8000-000000000001",
            "controller": True,
        }
    ]
    await kube.create(PODS, owned)
    await set_ready(kube, "owned", True)
    await kube.create(PDBS, pdb("b", APP, maxUnavailable="25%"))
    got = await wait_for(kube, f"{PDBS}/b", lambda o: bool(o["status"].get("conditions")))
    assert got["status"]["disruptionsAllowed"] == 0
    assert condition(got) == ("False", "SyncFailed", 'found no controllers for pod "owned"')


async def test_spec_updates_move_the_generation(kube: Kube) -> None:
    await running_pod(kube, "p0", LABELS)
    await kube.create(PDBS, pdb("b", APP, minAvailable=1))
    await status_of(kube, "b")
    updated = await kube.patch(f"{PDBS}/b", {"spec": {"minAvailable": 0}})
    assert updated["metadata"]["generation"] == 2
    got = await status_of(kube, "b")
    assert numbers(got) == (1, 0, 1, 1)
    same = await kube.patch(f"{PDBS}/b", {"metadata": {"labels": {"x": "y"}}})
    assert same["metadata"]["generation"] == 2


async def test_disrupted_pods_expire_after_two_minutes(sim: SimCluster, kube: Kube) -> None:
    clock = sim.clock
    assert isinstance(clock, FakeClock)
    await running_pod(kube, "p0", LABELS)
    await running_pod(kube, "p1", LABELS)
    await kube.create(PDBS, pdb("b", APP, minAvailable=0))
    got = await status_of(kube, "b")
    assert numbers(got) == (2, 0, 2, 2)
    # An eviction that was approved but whose delete never came (written as the eviction
    # handler writes it): p0 counts as disrupted until the controller gives up on it.
    got["status"]["disruptedPods"] = {"p0": clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")}
    got["status"]["disruptionsAllowed"] = 1
    await kube.replace(f"{PDBS}/b/status", got)
    held = await wait_for(kube, f"{PDBS}/b", lambda o: o["status"]["currentHealthy"] == 1)
    assert held["status"]["disruptedPods"] == got["status"]["disruptedPods"]
    await clock.wait_for_sleepers(1)
    await clock.advance(119)
    assert (await kube.get(f"{PDBS}/b"))["status"]["currentHealthy"] == 1
    await clock.advance(2)
    after = await wait_for(kube, f"{PDBS}/b", lambda o: o["status"]["currentHealthy"] == 2)
    assert "disruptedPods" not in after["status"]
    assert numbers(after) == (2, 0, 2, 2)


INVALID = [
    pytest.param(
        {"minAvailable": 1, "maxUnavailable": 1, "selector": APP},
        "minAvailable and maxUnavailable cannot be both set",
        id="both",
    ),
    pytest.param(
        {"minAvailable": "150%"},
        'spec.minAvailable: Invalid value: intstr.IntOrString{Type:1, IntVal:0, StrVal:"150%"}: '
        "must not be greater than 100%",
        id="over-100-percent",
    ),
    pytest.param(
        {"maxUnavailable": "half"},
        "spec.maxUnavailable: Invalid value: intstr.IntOrString{Type:1, IntVal:0, "
        'StrVal:"half"}: a valid percent string must be a numeric string followed by an '
        "ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')",
        id="not-a-percent",
    ),
    pytest.param(
        {"minAvailable": -1},
        "spec.minAvailable: Invalid value: -1: must be greater than or equal to 0",
        id="negative",
    ),
    pytest.param(
        {"minAvailable": 1, "unhealthyPodEvictionPolicy": "Sometimes"},
        'spec.unhealthyPodEvictionPolicy: Unsupported value: "Sometimes": supported values: '
        '"AlwaysAllow", "IfHealthyBudget"',
        id="unhealthy-policy",
    ),
    pytest.param(
        {"selector": {"matchExpressions": [{"key": "app", "operator": "In"}]}},
        "spec.selector.matchExpressions[0].values: Required value: must be specified when "
        "`operator` is 'In' or 'NotIn'",
        id="selector",
    ),
]


@pytest.mark.parametrize(("spec", "message"), INVALID)
async def test_validation(kube: Kube, spec: dict[str, Any], message: str) -> None:
    body = pdb("bad", None)
    body["spec"] = spec
    err = await failure(kube.create(PDBS, body))
    assert err.code == 422
    assert message in err.message
    assert err.message.startswith('PodDisruptionBudget.policy "bad" is invalid: ')


async def test_status_is_validated_and_kept_apart_from_spec(kube: Kube) -> None:
    await kube.create(PDBS, pdb("b", APP, minAvailable=1))
    synced = await status_of(kube, "b")
    synced["status"]["currentHealthy"] = -1
    err = await failure(kube.replace(f"{PDBS}/b/status", synced))
    assert err.code == 422
    assert "status.currentHealthy: Invalid value: -1: must be greater than or equal to 0" in (
        err.message
    )
    spec_write = await kube.patch(f"{PDBS}/b", {"status": {"expectedPods": 9}})
    assert spec_write["status"]["expectedPods"] != 9


async def test_table(sim: SimCluster, kube: Kube) -> None:
    await kube.create(PDBS, pdb("b", APP, maxUnavailable="10%"))
    response = await kube.api_client.call_api(
        PDBS,
        "GET",
        header_params={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
        auth_settings=["BearerToken"],
        _preload_content=False,
    )
    table = await response.json()
    assert [c["name"] for c in table["columnDefinitions"]] == [
        "Name",
        "Min Available",
        "Max Unavailable",
        "Allowed Disruptions",
        "Age",
    ]
    assert table["rows"][0]["cells"][:4] == ["b", "N/A", "10%", 0]
