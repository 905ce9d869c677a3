"""``gpusched scheduler --leader-elect`` end to end, as processes.

Two replicas start against the cluster (the simulation, served by the test's event loop, or the
cluster named by ``GPUSCHED_E2E_KUBECONFIG``; see ``test_scheduler_integration.py``): exactly
one leads (it holds the leader Lease, is ready and binds the pods) while the other stands by
(it is Ready too, and makes no scheduling attempt); the leader is killed with SIGKILL, so it
neither releases the Lease nor finishes anything, and the standby takes over once the Lease has
gone unrenewed for ``leaseDuration`` and binds the pods created after the kill. Then, as in a
rolling update, a third replica starts and is Ready as a standby, and the leader gets SIGTERM:
it exits 0 after releasing the Lease (``holderIdentity`` cleared), and the new replica takes it
over at its next attempt, without waiting for it to expire.

A replica whose scheduling loop crashes exits 1 with the traceback, releasing the Lease; one
that cannot renew the Lease exits 1 ("leaderelection lost"), as kube-scheduler does.

The replicas read a configuration file written by the test: its own scheduler name, a
namespace of its own for the reservation Leases and the leader Lease, and leader-election
timings short enough (leaseDuration 4 s instead of 15 s) that the test takes about 10 seconds.
"""

from __future__ import annotations

import asyncio
import re
import signal
import sys
from collections.abc import AsyncIterator, Callable, Iterator
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
from gpusched.kube.client import Kube
from gpusched.sim import FaultRule

LEASE_DURATION = 4

Spec = dict[str, Any]


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

    async def until_ready(self) -> None:
        """Wait until ``/readyz`` answers 200, as a Deployment waits for a new replica."""

        async def poll() -> None:
            while (await self.get("/readyz"))[0] != 200:
                pass

        await asyncio.wait_for(poll(), timeout=WAIT)

    async def stop(self, sig: signal.Signals) -> int:
        """Send ``sig`` and wait for the exit status (``-sig`` if it killed the process)."""
        if self.process.returncode is None:
            self.process.send_signal(sig)
        return await self.exited()

    async def exited(self) -> int:
        """Wait for the process to exit by itself; its exit status."""
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
    identity: str,
    scheduler_name: str,
    kubeconfig: str,
    config: Path,
    logs: Path,
    program: str | None = None,
) -> Replica:
    """Start ``gpusched scheduler --leader-elect`` and read the metrics port it printed.

    ``program``: Python code run with ``-c`` instead of ``-m gpusched`` (to patch something in
    the replica); it gets the command line in ``sys.argv[1:]``.
    """
    stderr = logs / f"{identity}.stderr"
    python = (sys.executable, "-c", program) if program else (sys.executable, "-m", "gpusched")
    with stderr.open("wb") as err:
        process = await asyncio.create_subprocess_exec(
            *python,
            *("scheduler", "--kubeconfig", kubeconfig),
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


async def lease_versions(
    kube: Kube, leases_path: str, name: str, resource_version: str, last: Callable[[Spec], bool]
) -> list[Spec]:
    """The specs that Lease ``name`` had after ``resource_version``, in order, up to and
    including the first for which ``last(spec)``, as a watch from that version delivers them."""
    versions: list[Spec] = []

    async def follow() -> list[Spec]:
        rv = resource_version
        while True:  # the server may end a watch: go on from the last version seen
            async for ev in kube.watch(leases_path, {"resourceVersion": rv}):
                obj = ev["object"]
                rv = obj["metadata"]["resourceVersion"]
                if ev["type"] == "BOOKMARK" or obj["metadata"]["name"] != name:
                    continue
                versions.append(obj["spec"])
                if last(obj["spec"]):
                    return versions

    return await asyncio.wait_for(follow(), timeout=WAIT)


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
        await replicas[standby].until_ready()  # a standby is Ready: it can take over
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

        # A rolling update: a new replica starts, is Ready as a standby, and the leader gets
        # SIGTERM. It stops, then releases the Lease, which the new replica takes over at its
        # next attempt: a takeover after expiry would show no released version in between.
        replicas["replica-c"] = await start_replica(
            "replica-c", bed.scheduler_name, kubeconfig, config, tmp_path
        )
        await replicas["replica-c"].until_ready()
        before = await bed.kube.get(leader_lease)
        assert before["spec"]["holderIdentity"] == standby
        watch = asyncio.create_task(
            lease_versions(
                bed.kube,
                bed.leases_path,
                "gpusched",
                before["metadata"]["resourceVersion"],
                lambda spec: spec.get("holderIdentity") == "replica-c",
            )
        )
        try:
            status = await replicas[standby].stop(signal.SIGTERM)
            versions = await watch
        finally:
            watch.cancel()
        assert status == 0, replicas[standby].log()
        summary = [
            (v.get("holderIdentity"), v["leaseDurationSeconds"], v["leaseTransitions"])
            for v in versions
        ]
        assert summary[-2:] == [("", 1, 1), ("replica-c", LEASE_DURATION, 2)], summary
        assert set(summary[:-2]) <= {(standby, LEASE_DURATION, 1)}, summary

        # The last replica stops gracefully too and leaves the Lease released.
        status = await replicas["replica-c"].stop(signal.SIGTERM)
        assert status == 0, replicas["replica-c"].log()
        lease = await bed.kube.get(leader_lease)
        assert lease["spec"]["holderIdentity"] == ""
        assert lease["spec"]["leaseTransitions"] == 2
    finally:
        for replica in replicas.values():
            await replica.stop(signal.SIGKILL)


# The scheduling loop raises once the informers have synced.
CRASHING_SCHEDULER = """\
import sys
from gpusched import cli, scheduler

async def crash(self):
    raise RuntimeError("the scheduling loop crashed")

scheduler.Scheduler._loop = crash
sys.exit(cli.main(sys.argv[1:]))
"""


async def test_a_crash_exits_1_with_the_traceback_and_releases_the_lease(
    bed: Bed, tmp_path: Path
) -> None:
    kubeconfig = str(bed.target.sim.kubeconfig_path) if bed.target.sim else E2E_KUBECONFIG
    config = write_config(bed, tmp_path / "gpusched.yaml")
    replica = await start_replica(
        "replica-a", bed.scheduler_name, kubeconfig, config, tmp_path, CRASHING_SCHEDULER
    )
    try:
        assert await replica.exited() == 1, replica.log()
    finally:
        await replica.stop(signal.SIGKILL)
    log = replica.stderr.read_text()
    assert "the scheduler crashed" in log
    assert "Traceback" in log
    assert "RuntimeError: the scheduling loop crashed" in log
    lease = await bed.kube.get(f"{bed.leases_path}/gpusched")
    assert lease["spec"]["holderIdentity"] == ""  # it led, then released the Lease
    assert lease["spec"]["leaseTransitions"] == 0


@pytest.mark.simonly
async def test_losing_leadership_exits_1(bed: Bed, tmp_path: Path) -> None:
    sim = bed.target.sim
    assert sim is not None
    config = write_config(bed, tmp_path / "gpusched.yaml")
    replica = await start_replica(
        "replica-a", bed.scheduler_name, str(sim.kubeconfig_path), config, tmp_path
    )
    try:
        await objects_until(
            bed.kube,
            bed.leases_path,
            lambda ls: "gpusched" in ls and ls["gpusched"]["spec"]["holderIdentity"] == "replica-a",
        )
        # Every Lease write fails from now on: the leader cannot renew within renewDeadline.
        sim.faults.set([FaultRule("update", "leases", 1.0, 500)])
        assert await replica.exited() == 1, replica.log()
    finally:
        sim.faults.set([])
        await replica.stop(signal.SIGKILL)
    assert "leaderelection lost" in replica.stderr.read_text()
