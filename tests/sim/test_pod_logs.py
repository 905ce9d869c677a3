"""``pods/log`` in the simulated API server (gpusched/sim/logs.py): the log synthesised from the
pod's status as the simulated kubelet moves it, the options (``tailLines``, ``timestamps``,
``limitBytes``, ``follow``), the real server's and kubelet's refusals word for word, RBAC on the
``pods/log`` subresource, and kubectl reading it."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from gpusched.clock import FakeClock
from gpusched.kube.client import Kube, resource_path
from gpusched.kube.errors import APIError
from gpusched.sim import SimCluster
from gpusched.sim.fleet import load_cluster_spec

pytestmark = pytest.mark.simonly

NS = "default"
NODE = "dgx-h100-000"
PODS = resource_path("", "v1", "pods", NS)
RBAC = "rbac.authorization.k8s.io"


def _pod(name: str, node: str | None = None, **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {"name": "main", "image": "cuda:12", "command": ["python", "train.py"], "args": ["-v"]}
        ]
    }
    if node:
        spec["nodeName"] = node
    spec.update(extra.pop("spec", {}))
    meta = {"name": name, "namespace": NS, **extra}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


async def _log(kube: Kube, name: str, **query: str) -> str:
    path = resource_path("", "v1", "pods", NS, name, "log")
    return b"".join([line async for line in kube.lines(path, query)]).decode()


async def _until(kube: Kube, name: str, ok: Callable[[dict[str, Any]], bool]) -> None:
    """Watch the pod until ``ok(pod)``."""
    listed = await kube.get(PODS, {"fieldSelector": f"metadata.name={name}"})
    if listed["items"] and ok(listed["items"][0]):
        return
    query = {
        "fieldSelector": f"metadata.name={name}",
        "resourceVersion": listed["metadata"]["resourceVersion"],
    }
    async for event in kube.watch(PODS, query):
        if ok(event["object"]):
            return


def _phase(phase: str) -> Callable[[dict[str, Any]], bool]:
    return lambda pod: (pod.get("status") or {}).get("phase") == phase


@pytest.fixture
async def sim() -> AsyncIterator[SimCluster]:
    async with SimCluster(load_cluster_spec("dgx-h100", nodes=1), clock=FakeClock()) as cluster:
        yield cluster


async def test_the_log_follows_the_pod_through_its_life(sim: SimCluster) -> None:
    kube, clock = sim.kube, sim.clock
    assert isinstance(clock, FakeClock)
    pod = _pod(
        "train",
        NODE,
        annotations={
            "sim.gpusched.io/duration": "5s",
            "gpusched.io/gpu-ids": "0,1",
        },
    )
    await kube.create(PODS, pod)
    await _until(kube, "train", _phase("Running"))
    started = f"[sim] started on node {NODE} with GPUs 0,1\n"
    command = "[sim] command: python train.py -v\n"
    assert await _log(kube, "train") == started + command
    assert await _log(kube, "train", tailLines="1") == command
    assert await _log(kube, "train", tailLines="0") == ""
    assert await _log(kube, "train", limitBytes="6") == "[sim] "
    stamped = await _log(kube, "train", timestamps="true")
    assert stamped.splitlines()[0] == "2026-01-01T00:00:00Z " + started.strip()
    # follow=true: what is there now, then each line as the kubelet reports it, until the end.
    path = resource_path("", "v1", "pods", NS, "train", "log")
    stream = kube.lines(path, {"follow": "true", "container": "main"})
    assert [await anext(stream), await anext(stream)] == [started.encode(), command.encode()]
    rest = asyncio.create_task(_collect(stream))
    await clock.wait_for_sleepers()  # the kubelet's timer for the 5 s run
    await clock.advance(5)
    assert await asyncio.wait_for(rest, 30) == ["[sim] exited 0 (Completed)\n"]
    # Terminated: the whole log, without follow and with it (which ends at once).
    assert await _log(kube, "train", follow="true") == started + command + (
        "[sim] exited 0 (Completed)\n"
    )


async def _collect(stream: AsyncIterator[bytes]) -> list[str]:
    return [line.decode() async for line in stream]


# (pod to create, query, expected code, expected message; 200 carries the body)
REFUSALS: list[tuple[str, dict[str, Any] | None, dict[str, str], int, str]] = [
    ("unknown pod", None, {}, 404, 'pods "x" not found'),
    ("not on a node: an empty log", _pod("x"), {}, 200, ""),
    ("not on a node, follow: empty too", _pod("x"), {"follow": "true"}, 200, ""),
    (
        "on a node that has not started it",
        _pod("x", "ghost-node"),
        {},
        400,
        'container "main" in pod "x" is waiting to start: ContainerCreating',
    ),
    (
        "no previous container",
        _pod("x", "ghost-node"),
        {"previous": "true"},
        400,
        'previous terminated container "main" in pod "x" not found',
    ),
    (
        "several containers, none named",
        _pod(
            "x",
            spec={
                "initContainers": [{"name": "init", "image": "i"}],
                "containers": [{"name": "a", "image": "i"}, {"name": "b", "image": "i"}],
            },
        ),
        {},
        400,
        "a container name must be specified for pod x, choose one of: [init a b]",
    ),
    (
        "a container the pod lacks",
        _pod("x"),
        {"container": "nope"},
        400,
        "container nope is not valid for pod x",
    ),
    (
        "negative tailLines",
        _pod("x"),
        {"tailLines": "-1"},
        422,
        'PodLogOptions "x" is invalid: tailLines: Invalid value: -1: '
        "must be greater than or equal to 0",
    ),
    (
        "tailLines not a number",
        _pod("x"),
        {"tailLines": "ten"},
        400,
        'strconv.ParseInt: parsing "ten": invalid syntax',
    ),
    (
        "sinceSeconds and sinceTime",
        _pod("x"),
        {"sinceSeconds": "5", "sinceTime": "2026-01-01T00:00:00Z"},
        422,
        'PodLogOptions "x" is invalid: : Forbidden: at most one of `sinceTime` or '
        "`sinceSeconds` may be specified",
    ),
]


async def test_refusals_are_the_real_servers() -> None:
    async with SimCluster(None, kubelets=False) as sim:
        for case, pod, query, code, message in REFUSALS:
            if pod is not None:
                await sim.kube.create(PODS, pod)
            try:
                body = await _log(sim.kube, "x", **query)
                got = (200, body)
            except APIError as exc:
                got = (exc.code, exc.message)
            assert got == (code, message), case
            if pod is not None:
                await sim.kube.delete(f"{PODS}/x", {"gracePeriodSeconds": 0})


async def test_pods_log_is_its_own_subresource_for_rbac() -> None:
    async with SimCluster(None, kubelets=False) as sim:
        kube = sim.kube
        await kube.create(
            "/api/v1/namespaces/default/serviceaccounts",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "bot"}},
        )
        rules = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]
        await _grant(kube, "reader", rules)
        await kube.create(PODS, _pod("x"))
        bot = Kube(sim.api_client(token=sim.service_account_token(NS, "bot")))
        await bot.get(f"{PODS}/x")  # pods: allowed
        with pytest.raises(APIError) as refused:
            await _log(bot, "x")
        assert refused.value.code == 403
        assert refused.value.message == (
            'pods "x" is forbidden: User "system:serviceaccount:default:bot" cannot get '
            'resource "pods/log" in API group "" in the namespace "default"'
        )
        await _grant(
            kube, "logs", [{"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}]
        )
        assert await _log(bot, "x") == ""


async def _grant(kube: Kube, name: str, rules: list[dict[str, Any]]) -> None:
    meta = {"name": name, "namespace": NS}
    await kube.create(
        resource_path(RBAC, "v1", "roles", NS),
        {"apiVersion": f"{RBAC}/v1", "kind": "Role", "metadata": meta, "rules": rules},
    )
    await kube.create(
        resource_path(RBAC, "v1", "rolebindings", NS),
        {
            "apiVersion": f"{RBAC}/v1",
            "kind": "RoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": "bot", "namespace": NS}],
        },
    )


@pytest.mark.kubectl
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
async def test_kubectl_logs(sim: SimCluster) -> None:
    await sim.kube.create(PODS, _pod("train", NODE))
    await _until(sim.kube, "train", _phase("Running"))
    proc = await asyncio.create_subprocess_exec(
        "kubectl",
        "--kubeconfig",
        str(sim.kubeconfig_path),
        "logs",
        "train",
        "--tail=1",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    assert out.decode() == "[sim] command: python train.py -v\n"


async def test_discovery_lists_pods_log() -> None:
    async with SimCluster(None, kubelets=False) as sim:
        listing = await sim.kube.get("/api/v1")
    names = [r["name"] for r in listing["resources"]]
    assert names == sorted(names)
    assert {
        "name": "pods/log",
        "singularName": "",
        "namespaced": True,
        "kind": "Pod",
        "verbs": ["get"],
    } in listing["resources"]
