"""``gpusched status`` against a cluster (the simulation by default, or the one named by
``GPUSCHED_E2E_KUBECONFIG``): the real Scheduler places a few pods and the command's table and
JSON show them as a user reads them; ``--watch`` shows a change and exits 0 on SIGINT; a bad
kubeconfig, an unreachable server, a cluster without the CRD and a forbidden user each get a
message and their exit status."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import E2E_KUBECONFIG, Target

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scheduler"))

from scheduler_bed import WAIT, Bed, bound, open_bed

from gpusched import cli
from gpusched.sim import SimCluster
from gpusched.status.command import (
    StatusError,
    StatusOptions,
    resolve_kubeconfig,
    run,
    use_color,
)


@pytest.fixture
async def bed(target: Target) -> AsyncIterator[Bed]:
    async with open_bed(target) as bed:
        yield bed


def kubeconfig(target: Target) -> str:
    return E2E_KUBECONFIG or str(target.sim.kubeconfig_path if target.sim else "")


def _pod(bed: Bed, name: str, limits: dict[str, str]) -> dict[str, Any]:
    body = bed.pod(name)
    body["spec"]["containers"][0]["resources"] = {"limits": limits}
    return body


def _scheduled_false(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "PodScheduled" and c.get("status") == "False"
        for c in (pod.get("status") or {}).get("conditions") or ()
    )


async def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = await asyncio.to_thread(cli.main, ["status", *argv])
    out, err = capsys.readouterr()
    return code, out, err


async def test_status_shows_what_the_scheduler_placed(
    bed: Bed, target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    (h100,) = await bed.add_nodes(1, "dgx-h100")
    (mig,) = await bed.add_nodes(1, "mig-small")
    ns = bed.namespace
    async with bed.running():
        await bed.create_pod(_pod(bed, "train", {"nvidia.com/gpu": "2"}))
        await bed.create_pod(
            _pod(bed, "infer", {"gpusched.io/gpu": "1", "gpusched.io/vram": "10Gi"})
        )
        await bed.create_pod(_pod(bed, "slice", {"nvidia.com/mig-1g.10gb": "1"}))
        await bed.create_pod(_pod(bed, "huge", {"nvidia.com/gpu": "16"}))
        await bed.pods_until(
            lambda ps: (
                {"train", "infer", "slice"} <= set(bound(ps))
                and _scheduled_false(ps.get("huge", {}))
            )
        )
    config = kubeconfig(target)
    code, out, _ = await _cli(capsys, "--kubeconfig", config, "-n", ns)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["NODE", "POOL", "STATUS", "GPU"]
    train = [line for line in lines if f"{ns}/train" in line]
    assert len(train) == 2
    assert all(" exclusive " in line for line in train)
    # (On a real cluster the fake nodes, which no kubelet runs, turn NotReady after ~40 s.)
    ready = "Ready" if target.is_sim else train[0].split()[2]
    assert train[0].split()[:3] == [h100, f"{bed.prefix}-dgx-h100", ready]
    (infer,) = [line for line in lines if f"{ns}/infer" in line]
    assert " shared " in infer
    assert "10.0/79.6 GiB" in infer
    (mig_row,) = [line for line in lines if f"{ns}/slice" in line]
    assert "mig 1/7" in mig_row
    assert "(1g.10gb)" in mig_row
    (huge,) = [line for line in lines if line.startswith(f"{ns}/huge")]
    assert "16 GPUs" in huge
    assert "Unschedulable:" in huge

    code, out, _ = await _cli(capsys, "--kubeconfig", config, "-n", ns, "-o", "json")
    assert code == 0
    doc = json.loads(out)
    nodes = {n["name"]: n for n in doc["nodes"]}
    held = {
        c["name"]: (g["index"], g["mode"], c["reservedMiB"])
        for g in nodes[h100]["gpus"]
        for c in g["clients"]
    }
    assert held["infer"][1:] == ("shared", 10240)
    assert held["train"][1] == "exclusive"
    (mig_gpu,) = [g for g in nodes[mig]["gpus"] if any(m["holder"] for m in g["migDevices"])]
    assert [m["holder"] for m in mig_gpu["migDevices"]].count(f"{ns}/slice") == 1
    (pending,) = doc["pending"]
    assert (pending["name"], pending["reason"]) == ("huge", "Unschedulable")

    code, out, _ = await _cli(capsys, "--kubeconfig", config, "--node", mig, "-o", "yaml")
    assert code == 0
    assert [n["name"] for n in yaml.safe_load(out)["nodes"]] == [mig]


async def _read_until(stream: asyncio.StreamReader, text: str, seen: list[str]) -> None:
    while not any(text in line for line in seen):
        line = await asyncio.wait_for(stream.readline(), timeout=WAIT)
        assert line, f"the command ended before printing {text!r}: {''.join(seen)}"
        seen.append(line.decode())


async def test_watch_shows_a_change_and_exits_0_on_sigint(bed: Bed, target: Target) -> None:
    await bed.add_nodes(1, "dgx-h100")
    ns = bed.namespace
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "gpusched", "status", "--watch", "-n", ns),
        *("--kubeconfig", kubeconfig(target)),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None
    seen: list[str] = []
    try:
        await _read_until(proc.stdout, f"No pending GPU pods in namespace {ns}.", seen)
        await bed.create_pod(_pod(bed, "late", {"nvidia.com/gpu": "1"}))
        await _read_until(proc.stdout, f"{ns}/late", seen)
        proc.send_signal(signal.SIGINT)
        code = await asyncio.wait_for(proc.wait(), timeout=WAIT)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert code == 0
    late = next(line for line in seen if line.startswith(f"{ns}/late"))
    assert "1 GPU" in late
    assert "not tried yet" in late


# --- what goes wrong ------------------------------------------------------------------------


async def _run(options: StatusOptions) -> tuple[int, str]:
    try:
        return await run(options, out=io.StringIO(), env={}), ""
    except StatusError as exc:
        return exc.code, str(exc)


@pytest.mark.simonly
async def test_errors_say_what_to_do(tmp_path: Path) -> None:
    async with SimCluster(None, kubelets=False) as sim:
        config = str(sim.kubeconfig_path)
        # No GPUNodeInventory CRD on an empty cluster.
        code, message = await _run(StatusOptions(kubeconfig=config))
        assert code == 1
        assert "no GPUNodeInventory CRD" in message
        assert "kubectl apply -k deploy/crds" in message
        # A user with no RBAC at all.
        await sim.kube.create(
            "/api/v1/namespaces/default/serviceaccounts",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "nobody"}},
        )
        nobody = sim.write_kubeconfig(
            tmp_path / "nobody", token=sim.service_account_token("default", "nobody")
        )
        code, message = await _run(StatusOptions(kubeconfig=str(nobody)))
        assert code == 1
        assert message.startswith("forbidden: cannot list nodes at cluster scope")
        assert "get, list and watch on nodes, pods and gpunodeinventories" in message
        # Nobody listening where the kubeconfig points.
        doc = yaml.safe_load(sim.kubeconfig_path.read_text())
        doc["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:1"
        (tmp_path / "down").write_text(yaml.safe_dump(doc))
        code, message = await _run(StatusOptions(kubeconfig=str(tmp_path / "down")))
        assert code == 1
        assert message.startswith("cannot reach the API server at https://127.0.0.1:1")
        # A context the kubeconfig does not have.
        code, message = await _run(StatusOptions(kubeconfig=config, context="nope"))
        assert code == 2
        assert "context nope" in message


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["--kubeconfig", "/nonexistent/kubeconfig"], 2, "no such file"),
        (["--kubeconfig", "BROKEN"], 2, "cannot load kubeconfig"),
        (["-o", "xml"], 2, "invalid choice: 'xml'"),
    ],
)
def test_bad_kubeconfig_or_usage_is_a_message_and_exit_2(
    argv: list[str],
    code: int,
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "BROKEN").write_text("clusters: [this is not a kubeconfig\n")
    monkeypatch.chdir(tmp_path)
    try:
        got = cli.main(["status", *argv])
    except SystemExit as exc:  # argparse
        got = int(exc.code or 0)
    _, err = capsys.readouterr()
    assert got == code
    assert message in err
    assert "Traceback" not in err


def test_no_kubeconfig_is_exit_2_with_what_to_give(tmp_path: Path) -> None:
    """The resolution is every command's (tests/test_kube_client.py has its table); status
    turns its refusal into exit 2."""
    with pytest.raises(StatusError, match="no kubeconfig") as refused:
        resolve_kubeconfig(None, {}, tmp_path / "home")
    assert refused.value.code == 2
    assert resolve_kubeconfig(None, {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, tmp_path) is None


@pytest.mark.simonly
async def test_one_list_per_kind_and_nothing_else() -> None:
    async with SimCluster("dgx-h100", kubelets=False) as sim:
        before = sim.server.requests
        out = io.StringIO()
        assert await run(StatusOptions(kubeconfig=str(sim.kubeconfig_path)), out=out, env={}) == 0
        # nodes, gpunodeinventories, pods; resourceclaims, resourceslices (the sim serves DRA)
        assert sim.server.requests - before == 5
        assert "dgx-h100-003" in out.getvalue()


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("color", "out", "env", "coloured"),
    [
        (None, _Terminal(), {}, True),
        (None, _Terminal(), {"NO_COLOR": "1"}, False),
        (None, _Terminal(), {"TERM": "dumb"}, False),
        (None, io.StringIO(), {}, False),  # a pipe or a file
        (True, io.StringIO(), {}, True),
    ],
)
def test_colour_only_on_a_terminal_without_no_color(
    color: bool | None, out: io.StringIO, env: dict[str, str], coloured: bool
) -> None:
    assert use_color(StatusOptions(color=color), out, env) is coloured


@pytest.mark.simonly
async def test_a_namespace_reader_sees_its_namespace_and_is_told_so(tmp_path: Path) -> None:
    async with SimCluster("dgx-h100", kubelets=False) as sim:
        kube = sim.kube
        rbac = "/apis/rbac.authorization.k8s.io/v1"
        await kube.create(
            "/api/v1/namespaces/default/serviceaccounts",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "dev"}},
        )
        subject = [{"kind": "ServiceAccount", "name": "dev", "namespace": "default"}]
        await kube.create(
            f"{rbac}/clusterroles",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": "gpu-reader"},
                "rules": [
                    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]},
                    {
                        "apiGroups": ["gpusched.io"],
                        "resources": ["gpunodeinventories"],
                        "verbs": ["list", "watch"],
                    },
                ],
            },
        )
        await kube.create(
            f"{rbac}/clusterrolebindings",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "dev-gpu-reader"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "gpu-reader",
                },
                "subjects": subject,
            },
        )
        await kube.create(
            f"{rbac}/namespaces/default/roles",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": "pod-reader"},
                "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]}],
            },
        )
        await kube.create(
            f"{rbac}/namespaces/default/rolebindings",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": "dev-pods"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": "pod-reader",
                },
                "subjects": subject,
            },
        )
        dev = sim.write_kubeconfig(
            tmp_path / "dev", token=sim.service_account_token("default", "dev")
        )
        out = io.StringIO()
        options = StatusOptions(kubeconfig=str(dev), namespace="default", output="json")
        assert await run(options, out=out, env={}) == 0
        doc = json.loads(out.getvalue())
        assert len(doc["nodes"]) == 4
        note, dra = doc["notes"]
        assert note.startswith("pods listed in namespace default only")
        assert dra.startswith("resourceclaims.resource.k8s.io not listed (Forbidden)")
        assert dra.endswith("grant list on it to see them")
        # Without -n the same user is told what it lacks.
        code, message = await _run(StatusOptions(kubeconfig=str(dev)))
        assert code == 1
        assert message.startswith("forbidden: cannot list pods in all namespaces")
