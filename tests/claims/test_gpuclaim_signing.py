"""Claim pods are batched: the default profile signs a GpuClaim pod by what its claim asks (the
request GPUFit reads through ``Handle.claim_specs``), not by the claim's name, so pods whose
claims ask the same share an equivalence class, and pods whose claims ask differently do not."""

from __future__ import annotations

from typing import Any

import pytest

from gpusched.framework import build_frameworks, default_config, default_registry


def claim(name: str, count: int, **topology: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"devices": {"count": count, "exclusivity": "Exclusive"}}
    if topology:
        spec["topology"] = topology
    return {
        "apiVersion": "gpu.scheduling/v1",
        "kind": "GpuClaim",
        "metadata": {"name": name, "namespace": "default", "resourceVersion": "1"},
        "spec": spec,
    }


def pod(name: str, claim_name: str, gpus: int) -> dict[str, Any]:
    gpu = {"nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "annotations": {"gpu.scheduling/claim": claim_name},
        },
        "spec": {
            "schedulerName": "gpusched",
            # as the API server stores it: an extended resource's request defaults to its limit
            "containers": [{"name": "c", "resources": {"limits": gpu, "requests": gpu}}],
        },
    }


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        (claim("a", 4), claim("b", 4), True),
        (
            claim("a", 2, mode="Required", minBandwidthGBps=600),
            claim("b", 2, mode="Required", minBandwidthGBps=600),
            True,
        ),
        (
            claim("a", 2, mode="Required", minBandwidthGBps=600),
            claim("b", 2, mode="Preferred", minBandwidthGBps=600),
            False,
        ),
        (
            claim("a", 2, mode="Required", minBandwidthGBps=600),
            claim("b", 2, mode="Required", minBandwidthGBps=300),
            False,
        ),
    ],
    ids=["same count", "same rule", "Required vs Preferred", "another floor"],
)
def test_claim_pods_sign_by_what_their_claims_ask(
    a: dict[str, Any], b: dict[str, Any], same: bool
) -> None:
    fw = build_frameworks(default_config(), default_registry())["gpusched"]
    assert fw.claim_specs is not None
    informer = next(i for i in fw.informers() if i.plural == "gpuclaims")
    for obj in (a, b):
        informer.handler("ADDED", obj, None)
    count = a["spec"]["devices"]["count"]
    sa = fw.sign_pod(pod("p", "a", count))
    sb = fw.sign_pod(pod("q", "b", count))
    assert sa is not None
    assert sb is not None
    assert (sa == sb) is same
    assert fw.sign_pod(pod("r", "a", count)) == sa  # a second pod of one claim: one class
