"""``gpusched scheduler --leader-elect`` end to end, as two processes.

Two replicas start against the cluster (the simulation, served by the test's event loop, or the
cluster named by ``GPUSCHED_E2E_KUBECONFIG``; see ``test_scheduler_integration.py``): exactly
one leads (it holds the leader Lease, is ready and binds the pods) while the other stands by
(it makes no scheduling attempt); the leader is killed with SIGKILL, so it neither releases the
Lease nor finishes anything, and the standby takes over once the Lease has gone unrenewed for
``leaseDuration`` and binds the pods created after the kill; SIGTERM then stops it gracefully,
with exit status 0.

The replicas read a configuration file written by the test: its own scheduler name, a
namespace of its own for the reservation Leases and the leader Lease, and leader-election
timings short enough (leaseDuration 4 s instead of 15 s) that the test takes about 10 seconds.
"""

from __future__ import annotations

import asyncio
import re
import signal
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from conftest import E2E_KUBECONFIG, Target
from scheduler_bed import (
    WAIT,
    Bed,
    assert_no_double_booking,
    bound,
    objects_until,
    open_bed,
    reservations,
)

from gpusched.annotations import RESERVATION_UID

LEASE_DURATION = 4


@pytest.fixture
async def bed(target: Target) -> AsyncIterator[Bed]:
    async with open_bed(target) as bed:
        await bed.add_nodes(2)
        yield bed


@dataclass
class Replica:
    """A ``gpusched scheduler`` process."""

    identity: str
    process: asyncio.subprocess.Process
    stderr: Path
    metrics_port: int = 0

    def log(self) -> str:
        return f"--- {self.identity} stderr ---\n{self.stderr.read_text()[-4000:]}"

    async def get(self, path: str) -> tuple[int, str]:
        """GET ``path`` (``/readyz``, ``/metrics``) on its operations port."""
        url = f"http://127.0.0.1:{self.metrics_port}{path}"
        async with aiohttp.ClientSession() as session, session.get(url) as response:
            return response.status, await response.text()

    async def schedule_attempts(self) -> float:
        """Its ``scheduler_schedule_attempts_total``, over all results and profiles."""
        status, text = await self.get("/metrics")
        assert status == 200, text
        samples = re.findall(r"^scheduler_schedule_attempts_total\{.*\} (\S+)$", text, re.M)
        return sum(float(value) for value in samples)

    async def stop(self, sig: signal.Signals) -> int:
        """Send ``sig`` and wait for the exit status (``-sig`` if it killed the process)."""
        if self.process.returncode is None:
            self.process.send_signal(sig)
        await asyncio.wait_for(self.process.communicate(), timeout=WAIT)
        assert self.process.returncode is not None
        return self.process.returncode


def write_config(bed: Bed, path: Path) -> Path:
    path.write_text(
        f"""\
apiVersion: gpusched.io/v1alpha1
kind: SchedulerConfiguration
profiles:
  - schedulerName: {bed.scheduler_name}
leaderElection:
  leaderElect: true
  leaseDuration: {LEASE_DURATION}s
  renewDeadline: 3s
  retryPeriod: 500ms
  resourceNamespace: {bed.system_namespace}
  resourceName: gpusched
reservations:
  namespace: {bed.system_namespace}
"""
    )
    return path


async def start_replica(
    identity: str, scheduler_name: str, kubeconfig: str, config: Path, logs: Path
) -> Replica:
    """Start ``gpusched scheduler --leader-elect`` and read the metrics port it printed."""
    stderr = logs / f"{identity}.stderr"
    with stderr.open("wb") as err:
        process = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "gpusched", "scheduler", "--kubeconfig", kubeconfig),
            *("--config", str(config), "--leader-elect", "--identity", identity),
            *("--scheduler-name", scheduler_name),
            *("--metrics-port", "0"),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=err,
        )
    replica = Replica(identity, process, stderr)
    assert process.stdout is not None
    line = (await asyncio.wait_for(process.stdout.readline(), timeout=WAIT)).decode()
    match = re.search(r"metrics on :(\d+)", line)
    assert match, f"{identity} printed {line!r}\n{replica.log()}"
    replica.metrics_port = int(match[1])
    return replica


def holders(pods: dict[str, dict[str, Any]], leases: dict[str, dict[str, Any]]) -> set[str]:
    """The replicas that reserved the GPUs of ``pods`` (each reservation names its writer)."""
    by_node = reservations(leases)
    return {
        by_node[p["spec"]["nodeName"]][p["metadata"]["annotations"][RESERVATION_UID]]["holder"]
        for p in pods.values()
    }


def only(pods: dict[str, dict[str, Any]], prefix: str) -> dict[str, dict[str, Any]]:
    return {name: pod for name, pod in pods.items() if name.startswith(prefix)}


def pod_names(prefix: str) -> Iterator[str]:
    return (f"{prefix}-{i}" for i in range(4))


async def test_one_leader_binds_and_the_standby_takes_over_when_it_is_killed(
    bed: Bed, tmp_path: Path
) -> None:
    kubeconfig = str(bed.target.sim.kubeconfig_path) if bed.target.sim else E2E_KUBECONFIG
    config = write_config(bed, tmp_path / "gpusched.yaml")
    leader_lease = f"{bed.leases_path}/gpusched"
    replicas: dict[str, Replica] = {}
    try:
        for identity in ("replica-a", "replica-b"):
            replicas[identity] = await start_replica(
                identity, bed.scheduler_name, kubeconfig, config, tmp_path
            )

        # Exactly one leads: it holds the Lease and binds every pod; the other never tries.
        leases = await objects_until(
            bed.kube,
            bed.leases_path,
            lambda ls: (
                "gpusched" in ls and ls["gpusched"]["spec"].get("holderIdentity") in replicas
            ),
        )
        leader = leases["gpusched"]["spec"]["holderIdentity"]
        (standby,) = set(replicas) - {leader}
        await bed.create_pods(bed.pod(name) for name in pod_names("before"))
        pods = await bed.pods_until(lambda ps: len(bound(ps)) == 4)
        leases = await bed.leases()
        assert_no_double_booking(pods, leases)
        assert holders(pods, leases) == {leader}
        assert (await replicas[leader].get("/readyz"))[0] == 200
        assert await replicas[standby].schedule_attempts() == 0, replicas[standby].log()
        lease = await bed.kube.get(leader_lease)
        assert lease["spec"]["holderIdentity"] == leader
        assert lease["spec"].get("leaseTransitions", 0) == 0  # it never changed hands
        assert lease["spec"]["leaseDurationSeconds"] == LEASE_DURATION

        # Killed, the leader renews no more; the standby takes over and binds the new pods.
        assert await replicas[leader].stop(signal.SIGKILL) == -signal.SIGKILL
        await bed.create_pods(bed.pod(name) for name in pod_names("after"))
        pods = await bed.pods_until(lambda ps: len(bound(ps)) == 8)
        leases = await bed.leases()
        assert_no_double_booking(pods, leases)
        assert holders(only(pods, "before"), leases) == {leader}
        assert holders(only(pods, "after"), leases) == {standby}
        lease = await bed.kube.get(leader_lease)
        assert lease["spec"]["holderIdentity"] == standby
        assert lease["spec"]["leaseTransitions"] == 1
        assert (await replicas[standby].get("/readyz"))[0] == 200

        # SIGTERM is a graceful shutdown.
        status = await replicas[standby].stop(signal.SIGTERM)
        assert status == 0, replicas[standby].log()
    finally:
        for replica in replicas.values():
            await replica.stop(signal.SIGKILL)
