"""The ``gpusched`` command: clear messages and exit status 2 for bad input, never a traceback;
``gpusched scheduler`` stops gracefully on SIGTERM at any time. (Its exit statuses when
leadership is lost or the scheduler crashes: ``tests/scheduler/test_leader_election_e2e.py``.)"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from gpusched.sim import SimCluster


def gpusched(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpusched", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_clusters_lists_the_shipped_specs() -> None:
    out = gpusched("sim", "clusters")
    assert out.returncode == 0, out.stderr
    for name in ("dgx-h100", "dgx-v100", "pcie-bridged-pairs", "mig-small", "mig-medium"):
        assert name in out.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["sim", "serve", "--cluster", "no-such-cluster"], "no-such-cluster"),
        (["sim", "serve", "--cluster", "dgx-h100", "--faults", "create=2:500"], "--faults"),
        (["sim", "serve", "--cluster", "dgx-h100", "--faults", "frobnicate=0.1:500"], "verb"),
    ],
)
def test_bad_input_is_a_message_and_status_2(args: list[str], message: str) -> None:
    out = gpusched(*args)
    assert out.returncode == 2
    assert message in out.stderr
    assert "Traceback" not in out.stderr


def test_a_broken_cluster_file_names_the_file_and_field(tmp_path: Path) -> None:
    spec = tmp_path / "broken.yaml"
    spec.write_text("name: broken\npools:\n- name: p\n  count: -1\n  cpu: 8\n  memory: 64Gi\n")
    out = gpusched("sim", "serve", "--cluster", str(spec))
    assert out.returncode == 2
    assert "broken.yaml" in out.stderr
    assert "count" in out.stderr
    assert "Traceback" not in out.stderr


def test_serve_runs_and_stops(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kc"
    out = gpusched(
        "sim",
        "serve",
        "--cluster",
        "dgx-h100",
        "--nodes",
        "2",
        "--kubeconfig",
        str(kubeconfig),
        "--for",
        "0.5",
    )
    assert out.returncode == 0, out.stderr
    assert "API server at https://127.0.0.1:" in out.stdout
    assert "2 nodes, 16 GPUs" in out.stdout
    assert "certificate-authority-data" in kubeconfig.read_text()


@pytest.mark.parametrize(("flags", "served"), [((), True), (("--no-webhook",), False)])
def test_serve_runs_gpuscheds_webhook_unless_told_not_to(
    tmp_path: Path, flags: tuple[str, ...], served: bool
) -> None:
    out = gpusched(
        "sim", "serve", "--cluster", "none", "--kubeconfig", str(tmp_path / "kc"), "--for", "0.3",
        *flags,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert ("gpusched's admission webhook at https://127.0.0.1:" in out.stdout) is served


def test_a_lease_duration_under_a_second_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "gpusched.yaml"
    config.write_text(
        "apiVersion: gpusched.io/v1alpha1\n"
        "kind: SchedulerConfiguration\n"
        "leaderElection: {leaseDuration: 500ms, renewDeadline: 400ms, retryPeriod: 100ms}\n"
    )
    out = gpusched("scheduler", "--config", str(config), "--leader-elect")
    assert out.returncode == 2
    assert (
        "gpusched.yaml:3: leaderElection.leaseDuration: must be at least 1s, as the leader Lease "
        "stores whole seconds (got 0.5s)"
    ) in out.stderr
    assert "Traceback" not in out.stderr


# Sends this process SIGTERM while it connects to the API server, before its start-up line.
SIGTERM_WHILE_CONNECTING = """\
import os, signal, sys
from gpusched import cli

connect = cli._connect

async def connect_and_get_sigterm(args):
    os.kill(os.getpid(), signal.SIGTERM)
    return await connect(args)

cli._connect = connect_and_get_sigterm
sys.exit(cli.main(sys.argv[1:]))
"""


async def test_sigterm_while_starting_is_a_graceful_stop(tmp_path: Path) -> None:
    async with SimCluster(None, kubelets=False, kubeconfig_path=tmp_path / "kc") as sim:
        process = await asyncio.create_subprocess_exec(
            *(sys.executable, "-c", SIGTERM_WHILE_CONNECTING, "scheduler"),
            *("--kubeconfig", str(sim.kubeconfig_path), "--metrics-port", "0"),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        _, stderr = await asyncio.wait_for(process.communicate(), timeout=60)
    # Killed by the signal, the status would be -SIGTERM.
    assert process.returncode == 0, stderr.decode()


async def test_the_collector_is_off_while_the_informers_list_then_frozen() -> None:
    """``gpusched scheduler`` turns the garbage collector off from the start of the initial
    lists until they have synced, then freezes what survived and turns it back on; cancelled
    half-way (a stop while starting), it is back on too."""
    import gc
    import types

    from gpusched.cli import _gc_around_sync

    for finish in (True, False):
        scheduler = types.SimpleNamespace(syncing=asyncio.Event(), synced=asyncio.Event())
        task = asyncio.create_task(_gc_around_sync(scheduler))  # type: ignore[arg-type]
        await asyncio.sleep(0)
        assert gc.isenabled()  # not listing yet
        scheduler.syncing.set()
        await asyncio.sleep(0)
        assert not gc.isenabled()
        frozen = gc.get_freeze_count()
        try:
            if finish:
                scheduler.synced.set()
                await task
                assert gc.get_freeze_count() >= frozen
            else:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            assert gc.isenabled()
        finally:
            gc.unfreeze()
