"""Locality (gpusched/locality.py, plugins/image_locality.py, plugins/model_locality.py):
image names normalised as the runtime reports them, upstream ImageLocality's score (thresholds,
spread, init containers, several containers), the node's cached-models annotation read or
refused with a message, the pod's model from its annotation or label, the image index
following a snapshot, signatures that carry the spread, and the real scheduler on the
simulated cluster putting a pod where its image and its model already are."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from builders import Cluster, make_node, make_pod

from gpusched.framework import CycleState
from gpusched.kube.client import Kube, resource_path
from gpusched.locality import (
    MB,
    ImageIndex,
    image_score,
    label_safe,
    model_score,
    node_images,
    node_models,
    normalize_image,
    pod_images,
    pod_models,
)
from gpusched.plugins.image_locality import ImageLocality
from gpusched.plugins.model_locality import ModelLocality
from gpusched.scheduler import Scheduler
from gpusched.sim import SimCluster
from gpusched.sim.fleet import load_cluster_spec

GB = 1024 * MB


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("nginx", "docker.io/library/nginx:latest"),
        ("nginx:1.25", "docker.io/library/nginx:1.25"),
        ("library/nginx", "docker.io/library/nginx:latest"),
        ("docker.io/nginx", "docker.io/library/nginx:latest"),
        ("index.docker.io/vllm/vllm-openai:v0.6.3", "docker.io/vllm/vllm-openai:v0.6.3"),
        ("vllm/vllm-openai:v0.6.3", "docker.io/vllm/vllm-openai:v0.6.3"),
        ("nvcr.io/nvidia/pytorch:24.05-py3", "nvcr.io/nvidia/pytorch:24.05-py3"),
        ("registry:5000/team/app", "registry:5000/team/app:latest"),  # a port is not a tag
        ("localhost/app", "localhost/app:latest"),
        ("nginx@sha256:" + "a" * 64, "docker.io/library/nginx@sha256:" + "a" * 64),
        ("  busybox ", "docker.io/library/busybox:latest"),
        ("", ""),
    ],
)
def test_normalize_image(name: str, want: str) -> None:
    assert normalize_image(name) == want


def _node(images: list[tuple[list[str], int]], annotations: dict[str, str] | None = None) -> Any:
    return {
        "metadata": {"name": "n", "annotations": annotations or {}},
        "status": {"images": [{"names": names, "sizeBytes": size} for names, size in images]},
    }


def test_node_images_by_every_name() -> None:
    node = _node(
        [
            (["docker.io/library/nginx@sha256:" + "b" * 64, "docker.io/library/nginx:1.25"], 70),
            (["nvcr.io/nvidia/pytorch:24.05-py3"], 20 * GB),
        ]
    )
    assert node_images(node) == {
        "docker.io/library/nginx@sha256:" + "b" * 64: 70,
        "docker.io/library/nginx:1.25": 70,
        "nvcr.io/nvidia/pytorch:24.05-py3": 20 * GB,
    }
    odd = {"status": {"images": [None, {"names": None}, {"names": ["x"], "sizeBytes": "big"}]}}
    assert node_images(odd) == {"docker.io/library/x:latest": 0}
    assert node_images(None) == {}
    assert node_images({"status": {"images": "nope"}}) == {}


def test_pod_images_init_containers_first() -> None:
    pod = {
        "spec": {
            "initContainers": [{"name": "i", "image": "busybox"}],
            "containers": [{"name": "a", "image": "nginx"}, {"name": "b", "image": "nginx"}],
        }
    }
    assert pod_images(pod) == (
        "docker.io/library/busybox:latest",
        "docker.io/library/nginx:latest",
        "docker.io/library/nginx:latest",
    )
    assert pod_images({}) == ()


A = "docker.io/library/a:latest"
B = "docker.io/library/b:latest"


@pytest.mark.parametrize(
    ("images", "on_node", "holders", "total", "want"),
    [
        ((A,), {}, {}, 10, 0),  # not here
        ((A,), {A: 10 * MB}, {A: 10}, 10, 0),  # under 23 MB
        ((A,), {A: 23 * MB}, {A: 10}, 10, 0),  # at the floor
        ((A,), {A: 1000 * MB}, {A: 10}, 10, 100),  # at the cap
        ((A,), {A: 20 * GB}, {A: 1}, 10, 100),  # 2 GB after spread: still over the cap
        ((A,), {A: 500 * MB}, {A: 10}, 10, 48),  # (500 - 23) / (1000 - 23) = 0.488
        ((A,), {A: 500 * MB}, {A: 5}, 10, 23),  # half the nodes: 250 MB
        ((A, B), {A: 1000 * MB}, {A: 10}, 10, 49),  # two containers double the cap
        ((A, B), {A: 1000 * MB, B: 1000 * MB}, {A: 10, B: 10}, 10, 100),
        ((A, A), {A: 600 * MB}, {A: 10}, 10, 59),  # the same image counts per container
        ((), {A: GB}, {A: 1}, 1, 0),  # no containers
        ((A,), {A: GB}, {A: 1}, 0, 0),  # no nodes
    ],
)
def test_image_score_as_upstream(
    images: tuple[str, ...], on_node: dict[str, int], holders: dict[str, int], total: int, want: int
) -> None:
    assert image_score(images, on_node, holders, total) == want


def _with_images(name: str, *images: tuple[str, int]) -> dict[str, Any]:
    obj, _ = make_node(name).gpus(8).build()
    obj.setdefault("status", {})["images"] = [{"names": [n], "sizeBytes": s} for n, s in images]
    return obj


def test_image_index_follows_the_snapshot() -> None:
    cluster = Cluster(make_node("c").gpus(8))
    cluster.cache.add_node(_with_images("a", ("nginx", GB)))
    cluster.cache.add_node(_with_images("b", ("nginx", GB), ("busybox", 5 * MB)))
    index = ImageIndex()
    index.refresh(cluster.snapshot())
    nginx = "docker.io/library/nginx:latest"
    assert (index.holders(nginx), index.total_nodes) == (2, 3)
    # A Node update (the kubelet garbage-collected nginx on b) is followed.
    cluster.cache.update_node(_with_images("b", ("busybox", 5 * MB)))
    index.refresh(cluster.snapshot())
    assert index.holders(nginx) == 1
    assert index.holders("docker.io/library/busybox:latest") == 1
    # A pod bound changes the node info, not the Node: nothing to parse again.
    cluster.bind(make_pod("x", uid="x").gpus(1).on("a").assigned([0]))
    index.refresh(cluster.snapshot())
    assert index.holders(nginx) == 1
    # A node leaving rebuilds the counts.
    cluster.cache.remove_node("a")
    index.refresh(cluster.snapshot())
    assert (index.holders(nginx), index.total_nodes) == (0, 2)


class _Handle:
    """What ImageLocality reads of the framework's handle: the cycle's snapshot."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    @property
    def node_lister(self) -> Any:
        return self.cluster.snapshot()


def _pod(image: str, **annotations: str) -> dict[str, Any]:
    pod = make_pod("p").gpus(1).obj()
    pod["spec"]["containers"][0]["image"] = image
    pod["metadata"].setdefault("annotations", {}).update(annotations)
    return pod


def test_image_locality_scores_signs_and_skips() -> None:
    cluster = Cluster()
    cluster.cache.add_node(_with_images("a", ("vllm/vllm-openai:v0.6.3", 15 * GB)))
    cluster.cache.add_node(_with_images("b"))
    plugin = ImageLocality(_Handle(cluster))  # type: ignore[arg-type]
    pod = _pod("docker.io/vllm/vllm-openai:v0.6.3")
    state = CycleState()
    assert plugin.pre_score(state, pod, cluster.nodes()).is_success
    assert plugin.score(state, pod, cluster.node("a"))[0] == 100  # 7.5 GB after spread
    assert plugin.score(state, pod, cluster.node("b"))[0] == 0
    assert plugin.score(CycleState(), pod, cluster.node("a"))[0] == 100  # without PreScore
    # Nobody holds busybox: PreScore skips the pod.
    assert plugin.pre_score(CycleState(), _pod("busybox"), cluster.nodes()).is_skip
    # The signature carries the spread: when b pulls the image, the class changes.
    before = plugin.sign_pod(pod)
    cluster.cache.update_node(_with_images("b", ("vllm/vllm-openai:v0.6.3", 15 * GB)))
    assert plugin.sign_pod(pod) != before
    assert plugin.sign_pod(pod) == plugin.sign_pod(_pod("vllm/vllm-openai:v0.6.3"))


@pytest.mark.parametrize(
    ("annotation", "want", "problem"),
    [
        (None, {}, None),
        (
            "facebook/opt-125m, mistralai/Mistral-7B-v0.1",
            ["facebook/opt-125m", "mistralai/Mistral-7B-v0.1"],
            None,
        ),
        ('["facebook/opt-125m"]', ["facebook/opt-125m"], None),
        (
            '[{"name": "meta-llama/Llama-2-7b-chat-hf", "sizeBytes": 13476839424}, "x/y"]',
            {"meta-llama/Llama-2-7b-chat-hf": 13476839424, "x/y": None},
            None,
        ),
        ('["a", ', {}, "gpusched.io/cached-models is not valid JSON"),
        ('[{"name": "a", "sizeBytes": -1}]', {}, "[0].sizeBytes must be a non-negative integer"),
        ("[42]", {}, '[0] must be a model name or {"name": ..., "sizeBytes": ...} (got 42)'),
    ],
)
def test_node_models(annotation: str | None, want: Any, problem: str | None) -> None:
    annotations = {} if annotation is None else {"gpusched.io/cached-models": annotation}
    models, message = node_models({"metadata": {"annotations": annotations}})
    assert models == (dict.fromkeys(want) if isinstance(want, list) else want)
    if problem is None:
        assert message is None
    else:
        assert message is not None
        assert problem in message


@pytest.mark.parametrize(
    ("meta", "want"),
    [
        ({}, ((), False)),
        (
            {"annotations": {"gpusched.io/model": "meta-llama/Llama-2-7b"}},
            (("meta-llama/Llama-2-7b",), False),
        ),
        ({"annotations": {"gpusched.io/model": "a/b, c/d, a/b"}}, (("a/b", "c/d"), False)),
        ({"labels": {"gpusched.io/model": "llama2"}}, (("llama2",), True)),
        (
            {"annotations": {"gpusched.io/model": "a/b"}, "labels": {"gpusched.io/model": "a-b"}},
            (("a/b",), False),
        ),
        ({"annotations": {"gpusched.io/model": "  "}}, ((), False)),
    ],
)
def test_pod_models(meta: dict[str, Any], want: tuple[tuple[str, ...], bool]) -> None:
    assert pod_models({"metadata": meta}) == want


@pytest.mark.parametrize(
    ("models", "from_label", "cached", "want"),
    [
        ((), False, {"a/b": None}, 0),
        (("a/b",), False, {"a/b": None}, 100),
        (("a/b",), False, {"c/d": None}, 0),
        (("a/b", "c/d"), False, {"a/b": 1}, 50),
        (("meta-llama-Llama-2-7b",), True, {"meta-llama/Llama-2-7b": None}, 100),
        (("a/b",), False, {}, 0),
    ],
)
def test_model_score(
    models: tuple[str, ...], from_label: bool, cached: dict[str, int | None], want: int
) -> None:
    assert model_score(models, from_label, cached) == want


def test_label_safe_is_the_controllers_rule() -> None:
    assert label_safe("meta-llama/Llama-2-7b-chat-hf") == "meta-llama-Llama-2-7b-chat-hf"
    assert len(label_safe("x" * 100)) == 63


def test_model_locality_scores_signs_skips_and_logs_a_bad_annotation(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cluster = Cluster(make_node("b").gpus(8))
    a, _ = make_node("a").gpus(8).build()
    a["metadata"].setdefault("annotations", {})["gpusched.io/cached-models"] = "facebook/opt-125m"
    bad, _ = make_node("c").gpus(8).build()
    bad["metadata"].setdefault("annotations", {})["gpusched.io/cached-models"] = "[oops"
    cluster.cache.add_node(a)
    cluster.cache.add_node(bad)
    plugin = ModelLocality()
    pod = _pod("busybox", **{"gpusched.io/model": "facebook/opt-125m"})
    state = CycleState()
    assert plugin.pre_score(state, pod, cluster.nodes()).is_success
    scores = {n: plugin.score(state, pod, cluster.node(n))[0] for n in ("a", "b", "c")}
    assert scores == {"a": 100, "b": 0, "c": 0}
    assert "node c: gpusched.io/cached-models is not valid JSON" in caplog.text
    assert plugin.pre_score(CycleState(), _pod("busybox"), cluster.nodes()).is_skip
    assert plugin.sign_pod(pod) == (("facebook/opt-125m",), False)


# -- the real scheduler on the simulated cluster ------------------------------------------------

NS = "default"
PODS = resource_path("", "v1", "pods", NS)


@pytest.fixture
async def sim(tmp_path: Path) -> AsyncIterator[tuple[SimCluster, Scheduler]]:
    """Two identical DGX H100 nodes and gpusched's scheduler with its default profile."""
    spec = load_cluster_spec("dgx-h100", nodes=2)
    async with SimCluster(spec, kubelets=False) as cluster:
        await cluster.kube.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpusched-system"}},
        )
        scheduler = Scheduler(Kube(cluster.api_client()), identity="locality", rng=random.Random(3))
        task = asyncio.create_task(scheduler.run())
        try:
            await asyncio.wait_for(scheduler.ready.wait(), 60)
            yield cluster, scheduler
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def _bound_node(cluster: SimCluster, name: str) -> str:
    async with asyncio.timeout(30):
        while True:
            pod = await cluster.kube.get(f"{PODS}/{name}")
            if pod["spec"].get("nodeName"):
                return str(pod["spec"]["nodeName"])
            await asyncio.sleep(0.02)


async def _until_seen(scheduler: Scheduler, node: str, check: Any) -> None:
    """Wait until the scheduler's cache has the Node as patched (the watch delivers it)."""
    async with asyncio.timeout(30):
        while True:
            info = scheduler.cache.node_info(node)
            if info is not None and info.node is not None and check(info.node):
                return
            await asyncio.sleep(0.02)


def _gpu_pod(name: str, image: str, **annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "schedulerName": "gpusched",
            "containers": [
                {"name": "main", "image": image, "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ],
        },
    }


@pytest.mark.parametrize("holder_at", [0, 1])
@pytest.mark.parametrize("what", ["image", "model"])
async def test_a_pod_goes_where_its_image_or_its_model_is(
    sim: tuple[SimCluster, Scheduler], what: str, holder_at: int
) -> None:
    """Two empty, identical nodes: all else equal, the one holding what the pod needs wins
    (the other scoring plugins tie and the draw between them is seeded: whichever node holds
    it, the pod goes there; without locality one of the two cases fails)."""
    cluster, scheduler = sim
    listed = await cluster.kube.get("/api/v1/nodes")
    nodes = sorted(n["metadata"]["name"] for n in listed["items"])
    holder = nodes[holder_at]
    if what == "image":
        images = [{"names": ["docker.io/vllm/vllm-openai:v0.6.3"], "sizeBytes": 15 * GB}]
        await cluster.kube.patch(f"/api/v1/nodes/{holder}/status", {"status": {"images": images}})
        await _until_seen(scheduler, holder, lambda n: n.get("status", {}).get("images"))
        pod = _gpu_pod("serve", "vllm/vllm-openai:v0.6.3")
    else:
        cached = {"gpusched.io/cached-models": json.dumps(["facebook/opt-125m"])}
        await cluster.kube.patch(f"/api/v1/nodes/{holder}", {"metadata": {"annotations": cached}})
        await _until_seen(
            scheduler,
            holder,
            lambda n: "gpusched.io/cached-models" in n["metadata"].get("annotations", {}),
        )
        pod = _gpu_pod("serve", "busybox", **{"gpusched.io/model": "facebook/opt-125m"})
    await cluster.kube.create(PODS, pod)
    assert await _bound_node(cluster, "serve") == holder
