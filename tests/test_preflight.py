"""gpusched.preflight on the simulated cluster: what is missing, the command that fixes it, and
the re-check that notices the fix (fake clock); the rule table kept equal to
deploy/scheduler/rbac.yaml; the simulated SelfSubjectAccessReviews (gpusched.sim.access)."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from gpusched.clock import FakeClock
from gpusched.framework import default_config
from gpusched.kube.client import Kube, resource_path
from gpusched.kube.errors import APIError
from gpusched.preflight import CRDS, SCHEDULER_RULES, Preflight, Problem, preflight
from gpusched.scheduler import Scheduler
from gpusched.sim import SimCluster
from gpusched.sim.faults import FaultRule
from gpusched.sim.fleet import ensure_crd

pytestmark = pytest.mark.simonly

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
INVENTORY_CRD = "gpunodeinventories.gpusched.io"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
REVIEWS = resource_path("authorization.k8s.io", "v1", "selfsubjectaccessreviews")


@pytest.fixture
async def sim() -> AsyncIterator[SimCluster]:
    """The simulated cluster with every CRD of deploy/crds (SimCluster() installs the policy
    and gang CRDs, a fleet the inventory's) and no gpusched-system namespace."""
    async with SimCluster(kubelets=False) as cluster:
        await ensure_crd(cluster.kube.api_client, name=INVENTORY_CRD)
        yield cluster


async def _remove_crd(kube: Kube, name: str) -> None:
    await kube.delete(f"{CRD_PATH}/{name}")
    for _ in range(100):  # the sim's CRD controller removes the resource on its next turn
        listing = await kube.get("/apis/gpusched.io/v1alpha1")
        if name.partition(".")[0] not in {r["name"] for r in listing["resources"]}:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{name} still served")


async def _create_namespace(kube: Kube, name: str) -> None:
    await kube.create(
        resource_path("", "v1", "namespaces"),
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
    )


def _keys(problems: list[Problem]) -> set[str]:
    return {p.key for p in problems}


# ------------------------------------------------------------------ checks


async def test_missing_inventory_crd_and_namespace(sim: SimCluster) -> None:
    await _remove_crd(sim.kube, INVENTORY_CRD)
    problems = await preflight(sim.kube, default_config())
    by_key = {p.key: p for p in problems}
    assert set(by_key) == {f"crd/{INVENTORY_CRD}", "namespace/gpusched-system"}
    crd = by_key[f"crd/{INVENTORY_CRD}"]
    assert crd.severity == "error"
    assert crd.fix == f"kubectl apply -f deploy/crds/{INVENTORY_CRD}.yaml"
    assert "no GPU node is known" in str(crd)
    ns = by_key["namespace/gpusched-system"]
    assert ns.severity == "error"
    assert ns.fix == "kubectl apply -f deploy/namespace.yaml"


@pytest.mark.parametrize(
    ("namespace", "fix"),
    [
        ("gpusched-system", "kubectl apply -f deploy/namespace.yaml"),
        ("gpu-leases", "kubectl create namespace gpu-leases"),
    ],
)
async def test_namespace_fix_names_the_namespace(sim: SimCluster, namespace: str, fix: str) -> None:
    config = default_config()
    config = config.model_copy(
        update={"reservations": config.reservations.model_copy(update={"namespace": namespace})}
    )
    problems = await preflight(sim.kube, config)
    assert [(p.key, p.fix) for p in problems] == [(f"namespace/{namespace}", fix)]


async def test_optional_crd_is_a_warning(sim: SimCluster) -> None:
    await _create_namespace(sim.kube, "gpusched-system")
    await _remove_crd(sim.kube, "gpuclasses.gpusched.io")
    problems = await preflight(sim.kube, default_config())
    assert [(p.key, p.severity, p.fix) for p in problems] == [
        (
            "crd/gpuclasses.gpusched.io",
            "warning",
            "kubectl apply -f deploy/crds/gpuclasses.gpusched.io.yaml",
        )
    ]
    assert "(optional)" in problems[0].what


@pytest.mark.parametrize(
    ("denied", "key", "severity", "what"),
    [
        (
            ("create", "", "pods/binding"),
            "rbac/pods/binding",
            "error",
            "no permission to create pods/binding",
        ),
        (
            ("*", "coordination.k8s.io", "leases"),
            "rbac/leases.coordination.k8s.io in namespace gpusched-system",
            "error",
            "no permission to get, list, watch, create, update, patch, delete "
            "leases.coordination.k8s.io in namespace gpusched-system",
        ),
        (
            ("list", "policy", "poddisruptionbudgets"),
            "rbac/poddisruptionbudgets.policy",
            "warning",
            "no permission to list poddisruptionbudgets.policy",
        ),
    ],
)
async def test_denied_permission_names_verb_resource_and_rbac_file(
    sim: SimCluster, denied: tuple[str, str, str], key: str, severity: str, what: str
) -> None:
    await _create_namespace(sim.kube, "gpusched-system")
    sim.server.access_reviews.denied.add(denied)
    problems = await preflight(sim.kube, default_config())
    assert [(p.key, p.severity, p.what, p.fix) for p in problems] == [
        (key, severity, what, "kubectl apply -f deploy/scheduler/rbac.yaml")
    ]


async def test_reviews_not_served_reported_once_and_skipped(
    sim: SimCluster, caplog: pytest.LogCaptureFixture
) -> None:
    await _create_namespace(sim.kube, "gpusched-system")
    sim.server.access_reviews.served = False
    checks = Preflight(sim.kube, default_config(), FakeClock())
    with caplog.at_level(logging.WARNING, logger="gpusched.preflight"):
        assert await checks.check() == []
        assert await checks.check() == []
    notes = [r for r in caplog.records if "SelfSubjectAccessReviews" in r.getMessage()]
    assert len(notes) == 1
    assert "kubectl apply -f deploy/scheduler/rbac.yaml" in notes[0].getMessage()


# ------------------------------------------------------------------ the loop


async def test_recheck_logs_resolved_and_stops(
    sim: SimCluster, caplog: pytest.LogCaptureFixture
) -> None:
    await _remove_crd(sim.kube, INVENTORY_CRD)
    clock = FakeClock()
    registry = CollectorRegistry()
    seen: list[list[Problem]] = []
    checks = Preflight(
        sim.kube, default_config(), clock, period=30.0, registry=registry, on_change=seen.append
    )
    with caplog.at_level(logging.INFO, logger="gpusched.preflight"):
        task = asyncio.create_task(checks.run())
        await clock.wait_for_sleepers(1)
        assert set(checks.problems) == {f"crd/{INVENTORY_CRD}", "namespace/gpusched-system"}
        assert registry.get_sample_value("gpusched_preflight_problems", {"severity": "error"}) == 2
        errors = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 2
        assert any(f"deploy/crds/{INVENTORY_CRD}.yaml" in r.getMessage() for r in errors)

        await _create_namespace(sim.kube, "gpusched-system")  # one fixed: still re-checking
        await clock.advance(30.0)
        await clock.wait_for_sleepers(1)
        assert set(checks.problems) == {f"crd/{INVENTORY_CRD}"}
        assert not task.done()

        await ensure_crd(sim.kube.api_client, name=INVENTORY_CRD)
        await clock.advance(30.0)
        await task  # nothing left: the loop ends
    assert checks.problems == {}
    assert registry.get_sample_value("gpusched_preflight_problems", {"severity": "error"}) == 0
    resolved = [r.getMessage() for r in caplog.records if "resolved:" in r.getMessage()]
    assert len(resolved) == 2
    assert [len(s) for s in seen] == [2, 1, 0]
    assert sum("kubectl apply -k deploy/" in r.getMessage() for r in caplog.records) == 1
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 2  # each problem logged once, not on every check


async def test_a_failed_check_is_retried(sim: SimCluster) -> None:
    await _create_namespace(sim.kube, "gpusched-system")
    sim.faults.set([FaultRule("get", "namespaces", 1.0, 500)])
    clock = FakeClock()
    checks = Preflight(sim.kube, default_config(), clock)
    task = asyncio.create_task(checks.run())
    await clock.wait_for_sleepers(1)  # failed, logged, waiting to retry
    assert not task.done()
    sim.faults.clear()
    await clock.advance(30.0)
    await task
    assert checks.problems == {}
    assert checks.checks == 2


async def test_scheduler_ready_without_inventory_crd_then_sees_it(sim: SimCluster) -> None:
    """Before: the inventory informer retried its 404 forever and readiness never came."""
    await _remove_crd(sim.kube, INVENTORY_CRD)
    await _create_namespace(sim.kube, "gpusched-system")
    scheduler = Scheduler(Kube(sim.api_client()), default_config())
    inventories = next(i for i in scheduler.informers if i.name == "gpunodeinventories")
    inventories.backoff_max = 0.0  # list again at once (the scheduler waits 30 s)
    task = asyncio.create_task(scheduler.run())
    try:
        await asyncio.wait_for(scheduler.ready.wait(), 30)
        assert inventories.missing
        await ensure_crd(sim.kube.api_client, name=INVENTORY_CRD)
        for _ in range(10_000):
            if not inventories.missing and inventories.synced.is_set():
                break
            await asyncio.sleep(0)
        assert not inventories.missing
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await scheduler.kube.close()


async def test_scheduler_command_logs_what_is_missing(sim: SimCluster, tmp_path: Path) -> None:
    """``gpusched scheduler`` against a cluster without the inventory CRD and namespace: one
    ERROR line each with its fix, and it keeps running (a SIGTERM stops it gracefully)."""
    await _remove_crd(sim.kube, INVENTORY_CRD)
    kubeconfig = sim.write_kubeconfig(tmp_path / "kc")
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "gpusched", "scheduler", "--kubeconfig", str(kubeconfig)),
        *("--metrics-port", "0"),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stderr is not None
    lines: list[str] = []
    try:
        async with asyncio.timeout(60):  # a bound for a broken build, not a timing
            while sum("ERROR gpusched.preflight" in line for line in lines) < 2:
                line = (await process.stderr.readline()).decode()
                assert line, "".join(lines)
                lines.append(line)
        assert process.returncode is None  # still running
    finally:
        process.send_signal(signal.SIGTERM)
        rest = await process.stderr.read()
        await process.wait()
    errors = [line for line in lines if "ERROR gpusched.preflight" in line]
    assert any(f"kubectl apply -f deploy/crds/{INVENTORY_CRD}.yaml" in line for line in errors), (
        errors
    )
    assert any("kubectl apply -f deploy/namespace.yaml" in line for line in errors), errors
    assert process.returncode == 0, rest.decode()


# ------------------------------------------------------------------ deploy/ in step


def _granted(rbac: list[dict[str, Any]]) -> set[tuple[str, str, str, bool]]:
    out = set()
    for doc in rbac:
        if doc["kind"] not in ("ClusterRole", "Role"):
            continue
        for rule in doc["rules"]:
            for group in rule["apiGroups"]:
                for res in rule["resources"]:
                    for verb in rule["verbs"]:
                        out.add((verb, group, res, doc["kind"] == "Role"))
    return out


def test_rules_equal_deploy_rbac() -> None:
    rbac = list(yaml.safe_load_all((DEPLOY / "scheduler" / "rbac.yaml").read_text()))
    ours = {(v, g, r, rule.namespaced) for rule in SCHEDULER_RULES for v, g, r in rule.expand()}
    assert ours == _granted(rbac)


def test_crds_equal_deploy_crds() -> None:
    on_disk = {p.name.removesuffix(".yaml") for p in (DEPLOY / "crds").glob("*.yaml")}
    assert {c.name for c in CRDS} == on_disk
    kustomized = yaml.safe_load((DEPLOY / "crds" / "Kustomization").read_text())["resources"]
    assert {f"{c.name}.yaml" for c in CRDS} <= set(kustomized)
    assert [c.name for c in CRDS if c.required] == [INVENTORY_CRD]


# ------------------------------------------------------------------ the simulated reviews


@pytest.mark.parametrize(
    ("spec", "code"),
    [
        ({}, 422),
        ({"resourceAttributes": {"verb": "get"}, "nonResourceAttributes": {"verb": "get"}}, 422),
        ({"nonResourceAttributes": {"verb": "get", "path": "/healthz"}}, 201),
        ({"resourceAttributes": {"verb": "get"}, "metadata": {"name": "x"}}, 422),
    ],
)
async def test_sim_review_validation(sim: SimCluster, spec: dict[str, Any], code: int) -> None:
    body: dict[str, Any] = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
    }
    if "metadata" in spec:  # ValidateSelfSubjectAccessReview: metadata must be empty
        body["metadata"] = spec.pop("metadata")
    if code == 201:
        answer = await sim.kube.create(REVIEWS, {**body, "spec": spec})
        assert answer["status"] == {"allowed": True}
        assert answer["spec"] == spec
        return
    with pytest.raises(APIError) as info:
        await sim.kube.create(REVIEWS, {**body, "spec": spec})
    assert info.value.code == code
    assert info.value.status["details"]["kind"] == "SelfSubjectAccessReview"


async def test_sim_reviews_are_create_only(sim: SimCluster) -> None:
    with pytest.raises(APIError) as info:
        await sim.kube.get(REVIEWS)
    assert info.value.code == 405
