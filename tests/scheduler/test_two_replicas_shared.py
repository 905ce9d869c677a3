"""Two replicas racing for one node's shared GPUs never overbook their VRAM or clients.

With ``replicas: {shares: false}`` both replicas schedule on any node, so a burst of VRAM shares
(``gpusched.io/gpu: 1``, ``gpusched.io/vram: 30Gi``; 80Gi cards, so two fit a GPU and three do
not) on a one-node fleet has them race for the same GPUs. Several shares of one GPU do not
conflict as exclusive reservations do; what keeps them within the GPU is the Lease's share
check (gpusched.reservations ``shares_fit``; docs/reservations.md). After everything settles,
each GPU's bound shares must fit its memory and client limit (issue 10's defaults: no
overcommit, 10 clients per GPU).

Two ways to race, both checked:
- ``same-pods``: two replicas of one profile. They pop the pods in the same order, so they
  mostly race for the same pod (one Binding wins).
- ``other-pods``: two replicas each serving its own scheduler name, half the pods each, so
  they place *different* pods on one GPU at the same moment; each one's cache sees the other's
  in-flight shares only through the Lease. Without the share check this overbooks (4 x 30Gi on
  one GPU), most reliably when every pod asks for GPU 0 (``gpusched.io/gpu-ids-request``).
Each seed gives the replicas other random choices, so the races land differently.
"""

from __future__ import annotations

import contextlib
import random
from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from typing import Any

import pytest
from conftest import Target, sim_of
from scheduler_bed import E2E_LABEL, Bed, bound, open_bed, reservations

from gpusched.cache.nodeinfo import PodInfo
from gpusched.framework.config import SchedulerConfiguration
from gpusched.kube.client import resource_path
from gpusched.kube.errors import APINotFound

GPU_MIB = 80 * 1024  # dgx-h100 cards publish a little less; 2 x 30Gi fit, 3 do not
MAX_CLIENTS = 10  # issue 10's default maxClientsPerGPU
LATENCY = 0.005  # seconds per request on the simulation: widens the windows the replicas race in
PODS = 24
PIN = {"gpusched.io/gpu-ids-request": "0"}


@pytest.fixture
async def bed(target: Target) -> AsyncIterator[Bed]:
    async with open_bed(target) as bed:
        await bed.add_nodes(1, "dgx-h100")
        if target.sim is not None:  # a real cluster's round trips are slow enough on their own
            sim_of(target).faults.set(latency=LATENCY)
        yield bed


def _shared(bed: Bed, name: str, vram: str, **annotations: str) -> dict[str, Any]:
    body = bed.pod(name, **annotations)
    body["spec"]["containers"][0]["resources"] = {
        "limits": {"gpusched.io/gpu": "1", "gpusched.io/vram": vram}
    }
    return body


def _racing(bed: Bed, scheduler_name: str | None = None) -> SchedulerConfiguration:
    """The bed's configuration, every replica on every node (and ``scheduler_name``)."""
    config = bed.config()
    update: dict[str, Any] = {"replicas": config.replicas.model_copy(update={"shares": False})}
    if scheduler_name is not None:
        profile = config.profiles[0].model_copy(update={"scheduler_name": scheduler_name})
        update["profiles"] = [profile]
    return config.model_copy(update=update)


def _per_gpu(pods: dict[str, dict[str, Any]]) -> dict[tuple[str, int], list[int]]:
    """MiB reserved by each bound pod, by (node, GPU index), from the pods' annotations."""
    out: dict[tuple[str, int], list[int]] = defaultdict(list)
    for name in bound(pods):
        annotations = pods[name]["metadata"].get("annotations") or {}
        ids = [int(i) for i in annotations["gpusched.io/gpu-ids"].split(",")]
        mib = [int(v) for v in annotations["gpusched.io/reserved-vram-mib"].split(",")]
        for gpu, v in zip(ids, mib, strict=True):
            out[pods[name]["spec"]["nodeName"], gpu].append(v)
    return out


def _settled(pods: dict[str, dict[str, Any]], names: list[str]) -> bool:
    """Every pod exists and is bound or was found unschedulable."""
    for name in names:
        pod = pods.get(name)
        if pod is None:
            return False
        if (pod.get("spec") or {}).get("nodeName"):
            continue
        conditions = (pod.get("status") or {}).get("conditions") or []
        if not any(
            c.get("type") == "PodScheduled" and c.get("status") == "False" for c in conditions
        ):
            return False
    return True


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("pinned", [True, False], ids=["gpu0", "any-gpu"])
@pytest.mark.parametrize("race", ["same-pods", "other-pods"])
async def test_racing_replicas_keep_shared_gpus_within_vram_and_clients(
    bed: Bed, race: str, pinned: bool, seed: int
) -> None:
    other = f"{bed.scheduler_name}-b" if race == "other-pods" else None
    names = [f"s{i}" for i in range(PODS)]
    bodies = [_shared(bed, n, "30Gi", **(PIN if pinned else {})) for n in names]
    if other is not None:
        for body in bodies[1::2]:
            body["spec"]["schedulerName"] = other
    fit = 2 if pinned else 16  # by VRAM: 2 per GPU
    async with (
        bed.running("replica-a", _racing(bed), rng=random.Random(seed)),
        bed.running("replica-b", _racing(bed, other), rng=random.Random(seed + 100)),
    ):
        await bed.create_pods(bodies, concurrency=PODS)
        pods = await bed.pods_until(lambda ps: len(bound(ps)) >= fit and _settled(ps, names))
        leases = await bed.leases()
    for (node, gpu), mibs in sorted(_per_gpu(pods).items()):
        assert sum(mibs) <= GPU_MIB, f"GPU {gpu} of {node} overbooked: {mibs} MiB"
        assert len(mibs) <= MAX_CLIENTS, f"GPU {gpu} of {node} has {len(mibs)} clients"
    assert len(bound(pods)) == fit, sorted(bound(pods))
    # Every bound pod is bound with its entry in its node's Lease, a share (never exclusive).
    entries = reservations(leases)
    for name in bound(pods):
        pod = pods[name]
        uid = pod["metadata"]["annotations"]["gpusched.io/reservation-uid"]
        entry = entries[pod["spec"]["nodeName"]][uid]
        assert entry["podUID"] == pod["metadata"]["uid"]
        assert entry["exclusive"] is False


@pytest.mark.parametrize("seed", [1, 2])
async def test_racing_replicas_keep_shared_gpus_within_the_client_limit(
    bed: Bed, seed: int
) -> None:
    """1Gi shares pinned to GPU 0 from two schedulers: VRAM is plenty, clients are not."""
    other = f"{bed.scheduler_name}-b"
    names = [f"c{i}" for i in range(16)]
    bodies = [_shared(bed, n, "1Gi", **PIN) for n in names]
    for body in bodies[1::2]:
        body["spec"]["schedulerName"] = other
    async with (
        bed.running("replica-a", _racing(bed), rng=random.Random(seed)),
        bed.running("replica-b", _racing(bed, other), rng=random.Random(seed + 100)),
    ):
        await bed.create_pods(bodies, concurrency=len(bodies))
        pods = await bed.pods_until(
            lambda ps: len(bound(ps)) >= MAX_CLIENTS and _settled(ps, names)
        )
    clients = _per_gpu(pods)
    assert [len(mibs) for mibs in clients.values()] == [MAX_CLIENTS], clients


# ------------------------------------------------------------------ the other sharing rules

POLICIES = resource_path("gpusched.io", "v1alpha1", "gpunodepolicies")
PHYSICAL_MIB = 81559  # dgx-h100's cards


def _terms(pod: dict[str, Any]) -> tuple[bool, int]:
    """(swap, cores percent) of a bound share, as the cache reads them."""
    info = PodInfo.from_pod(pod)
    return info.swap, info.cores


def _hami(bed: Bed, name: str, cores: str, **annotations: str) -> dict[str, Any]:
    body = bed.pod(name, **annotations)
    body["spec"]["containers"][0]["resources"] = {
        "limits": {
            "nvidia.com/gpu": "1",
            "nvidia.com/gpumem": "1000",
            "nvidia.com/gpucores": cores,
        }
    }
    return body


# (case, the node policy's limits, a pod of the burst, pods that fit)
RULES: list[tuple[str, dict[str, int], Any, int]] = [
    (
        # 200% overcommit would take 5 x 30Gi; pods that cannot swap get physical memory: 2.
        "no-swap",
        {"vramOvercommitPercent": 200},
        lambda bed, name: _shared(bed, name, "30Gi", **PIN),
        2,
    ),
    (
        "clients-per-node",
        {"maxClientsPerNode": 3},
        lambda bed, name: _shared(bed, name, "1Gi"),
        3,
    ),
    (
        # HAMi's gpucores: 3 x 30% of GPU 0's compute; a fourth would take 120%.
        "cores",
        {},
        lambda bed, name: _hami(bed, name, "30", **PIN),
        3,
    ),
]


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize(
    ("limits", "make", "fit"), [case[1:] for case in RULES], ids=[case[0] for case in RULES]
)
async def test_racing_replicas_keep_the_no_swap_compute_and_per_node_rules(
    bed: Bed, limits: dict[str, int], make: Any, fit: int, seed: int
) -> None:
    """Two schedulers, each placing its own half of a burst on one node at once: each one's
    cache sees the other's shares only through the Lease, whose check now covers the no-swap
    rule, compute shares and the per-node client limit too (gpusched.reservations
    ``shares_fit``)."""
    other = f"{bed.scheduler_name}-b"
    names = [f"r{i}" for i in range(12)]
    bodies = [make(bed, name) for name in names]
    for body in bodies[1::2]:
        body["spec"]["schedulerName"] = other
    policy = {
        "apiVersion": "gpusched.io/v1alpha1",
        "kind": "GPUNodePolicy",
        "metadata": {"name": f"{bed.prefix}-race"},
        "spec": {"nodeSelector": {"matchLabels": {E2E_LABEL: bed.prefix}}, **limits},
    }
    await bed.kube.create(POLICIES, policy)
    try:
        async with (
            bed.running("replica-a", _racing(bed), rng=random.Random(seed)),
            bed.running("replica-b", _racing(bed, other), rng=random.Random(seed + 100)),
        ):
            await bed.create_pods(bodies, concurrency=len(bodies))
            pods = await bed.pods_until(lambda ps: len(bound(ps)) >= fit and _settled(ps, names))
    finally:
        with contextlib.suppress(APINotFound):
            await bed.kube.delete(f"{POLICIES}/{bed.prefix}-race")
    assert len(bound(pods)) == fit, sorted(bound(pods))
    per_gpu: dict[tuple[str, int], list[str]] = defaultdict(list)
    for name in bound(pods):
        annotations = pods[name]["metadata"]["annotations"]
        for gpu in annotations["gpusched.io/gpu-ids"].split(","):
            per_gpu[pods[name]["spec"]["nodeName"], int(gpu)].append(name)
    for (node, gpu), holders in per_gpu.items():
        mib = {
            n: int(pods[n]["metadata"]["annotations"]["gpusched.io/reserved-vram-mib"])
            for n in holders
        }
        pinned = sum(v for n, v in mib.items() if not _terms(pods[n])[0])
        assert pinned <= PHYSICAL_MIB, f"GPU {gpu} of {node}: {mib} MiB cannot swap"
        assert sum(_terms(pods[n])[1] for n in holders) <= 100, f"GPU {gpu} of {node}"
    if "maxClientsPerNode" in limits:
        per_node = Counter(pods[n]["spec"]["nodeName"] for n in bound(pods))
        assert max(per_node.values()) <= limits["maxClientsPerNode"], per_node
