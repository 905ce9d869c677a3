"""The ``gpusched`` command: clear messages and exit status 2 for bad input, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


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
