"""The scheduler does its whole job with exactly the permissions the shipped RBAC grants.

The shipped install is rendered with ``kubectl kustomize deploy/`` and its Namespaces,
ServiceAccounts, Roles, ClusterRoles, bindings and ValidatingAdmissionPolicies (picked by kind,
so the layout of deploy/ does not matter) are applied to the simulated cluster, which enforces
RBAC for service-account tokens (gpusched.sim.rbac) and the policies (gpusched.sim.vap). The
scheduler's ServiceAccount is the one its Deployment runs as. Then the real Scheduler, with
leader election, runs on a token of that ServiceAccount: preflight finds nothing missing, GPU
pods, a gang, a pod with a ResourceClaim (allocated, then released) and a preemption bind,
Events are written and the reservation and leader Leases are used; the API server refused none
of its requests.

Needs kubectl (with its built-in kustomize); skipped without it. Simulation only: a real cluster
would need impersonation, which this test does not do.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import Target

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scheduler"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "dra"))

from scheduler_bed import Bed, assert_no_double_booking, bound, objects_until, open_bed
from test_dra_e2e import DRA, claim_pod, claims_path, create_template, device_class, publish_slices

from gpusched.gangs import scheduler_plugins
from gpusched.kube.client import Kube, resource_path
from gpusched.kube.errors import APIConflict
from gpusched.leader import LeaderElectionConfig, LeaderElector
from gpusched.preflight import preflight
from gpusched.reservations import LEASE_PREFIX
from gpusched.scheduler import Scheduler

KUBECTL = shutil.which("kubectl")
DEPLOY = Path(__file__).resolve().parent.parent.parent / "deploy"
ACCESS_KINDS = (
    "Namespace",
    "ServiceAccount",
    "ClusterRole",
    "Role",
    "ClusterRoleBinding",
    "RoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
)
"""What decides what a component may do: applied from the render, in this order."""
WAIT = 60.0

pytestmark = [
    pytest.mark.simonly,
    pytest.mark.kubectl,
    pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (renders deploy/)"),
]


def _render() -> list[dict[str, Any]]:
    assert KUBECTL is not None
    out = subprocess.run(
        [KUBECTL, "kustomize", str(DEPLOY)], check=True, capture_output=True, text=True
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def _scheduler_account(docs: list[dict[str, Any]]) -> tuple[str, str]:
    """Namespace and name of the ServiceAccount the scheduler's Deployment runs as."""
    for doc in docs:
        if doc["kind"] != "Deployment":
            continue
        spec = doc["spec"]["template"]["spec"]
        words = [w for c in spec["containers"] for w in (*c.get("command", []), *c.get("args", []))]
        if "scheduler" in words:
            return doc["metadata"]["namespace"], spec.get("serviceAccountName", "default")
    raise AssertionError("no Deployment runs `gpusched scheduler` in deploy/")


async def _apply(kube: Kube, doc: dict[str, Any]) -> None:
    group, _, version = doc["apiVersion"].rpartition("/")
    kind = doc["kind"].lower()
    plural = kind[:-1] + "ies" if kind.endswith("y") else kind + "s"
    path = resource_path(group, version, plural, doc["metadata"].get("namespace"))
    with contextlib.suppress(APIConflict):
        await kube.create(path, doc)


@pytest.fixture
async def bed(target: Target) -> AsyncIterator[Bed]:
    async with open_bed(target) as bed:
        yield bed


async def test_scheduler_with_the_shipped_rbac(bed: Bed) -> None:
    sim = bed.target.sim
    assert sim is not None
    docs = _render()
    for doc in docs:
        if doc["kind"] in ACCESS_KINDS:
            await _apply(bed.kube, doc)
    namespace, account = _scheduler_account(docs)
    kube = Kube(sim.api_client(token=sim.service_account_token(namespace, account)))
    user = f"system:serviceaccount:{namespace}:{account}"
    config = bed.config()
    config = config.model_copy(
        update={"reservations": config.reservations.model_copy(update={"namespace": namespace})}
    )
    (node,) = await bed.add_nodes(1, "dgx-h100")

    assert await preflight(kube, config) == []

    scheduler = Scheduler(kube, config, identity="least")
    le = config.leader_election
    elector = LeaderElector(
        kube,
        scheduler.identity,
        LeaderElectionConfig(namespace=le.resource_namespace, name=le.resource_name),
    )
    task = asyncio.create_task(elector.run(scheduler.run))
    try:
        await asyncio.wait_for(scheduler.ready.wait(), WAIT)
        # GPU pods and a scheduler-plugins gang of three.
        await bed.create_pods([bed.pod("one", 1), bed.pod("two", 2)])
        await bed.kube.create(
            resource_path(
                scheduler_plugins.GROUP, scheduler_plugins.VERSION, "podgroups", bed.namespace
            ),
            {
                "apiVersion": f"{scheduler_plugins.GROUP}/{scheduler_plugins.VERSION}",
                "kind": "PodGroup",
                "metadata": {"name": "gang"},
                "spec": {"minMember": 3},
            },
        )
        members = [bed.pod(f"m{i}", 1) for i in range(3)]
        for member in members:
            member["metadata"]["labels"][scheduler_plugins.LABEL] = "gang"
        await bed.create_pods(members)
        # A pod whose ResourceClaim (from a template) the scheduler allocates and releases.
        await publish_slices(bed, [node])
        await bed.kube.create(resource_path(DRA, "v1", "deviceclasses"), device_class(bed))
        await create_template(bed, "one-gpu", 1)
        await bed.create_pod(claim_pod(bed, "dra", "one-gpu"))
        names = {"one", "two", "m0", "m1", "m2", "dra"}
        await bed.pods_until(lambda pods: names <= set(bound(pods)))
        for name in names:
            await bed.delete_pod(name, now=True)
        await bed.pods_until(lambda pods: not names & set(pods))
        await objects_until(  # released and deallocated: its GPU is free for "big" below
            bed.kube,
            claims_path(bed),
            lambda cs: all(not (c.get("status") or {}).get("allocation") for c in cs.values()),
        )

        # Preemption: eight 1-GPU pods at priority level 2, then an 8-GPU pod at level 0.
        low = [f"low{i}" for i in range(8)]
        await bed.create_pods(bed.pod(n, 1, **{"gpusched.io/priority": "2"}) for n in low)
        await bed.pods_until(lambda pods: set(low) <= set(bound(pods)))
        await bed.create_pod(bed.pod("big", 8, **{"gpusched.io/priority": "0"}))
        pods = await bed.pods_until(lambda ps: "big" in bound(ps))
        assert pods["big"]["spec"]["nodeName"] == node
        assert_no_double_booking(pods)

        events = await objects_until(
            bed.kube,
            bed.events_path,
            lambda evs: {"Scheduled", "Preempted"} <= {e.get("reason") for e in evs.values()},
        )
        assert events
        leases = await bed.kube.get(resource_path("coordination.k8s.io", "v1", "leases", namespace))
        names_ = {lease["metadata"]["name"] for lease in leases["items"]}
        assert f"{LEASE_PREFIX}{node}" in names_
        assert le.resource_name in names_
        assert elector.is_leader
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await kube.close()
    assert [m for u, m in sim.server.refusals if u == user] == []
