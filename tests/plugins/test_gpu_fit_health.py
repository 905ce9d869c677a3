"""GPUFit and unhealthy GPUs: an unhealthy GPU (the node's inventory says so) takes no new pod,
whole, shared or MIG, and the reason says so; it may recover, so the pod waits (Unschedulable,
not UnschedulableAndUnresolvable) for an inventory update."""

from __future__ import annotations

from typing import Any

import pytest
from builders import Cluster, make_node, make_pod

from gpusched.framework import SUCCESS, Code, CycleState, Status
from gpusched.plugins.gpu_fit import (
    REASON_GPU_UNHEALTHY,
    REASON_INSUFFICIENT_FREE_GPUS,
    REASON_MIG_BUSY,
    GPUFit,
)


def _cluster(unhealthy: tuple[int, ...], mig: list[str] | None = None) -> Cluster:
    node = make_node("n").gpus(4, mig=mig)
    cluster = Cluster(node)
    _obj, inventory = node.build()
    assert inventory is not None
    gpus = list(inventory.gpus)
    for i in unhealthy:
        gpus[i] = gpus[i].model_copy(
            update={"health": "Unhealthy", "health_reason": "XID 48 (double-bit ECC error)"}
        )
    cluster.cache.set_inventory("n", inventory.model_copy(update={"gpus": tuple(gpus)}))
    return cluster


def _filter(cluster: Cluster, pod: Any) -> Status:
    plugin = GPUFit()
    state = CycleState()
    obj = pod.obj()
    _, status = plugin.pre_filter(state, obj)
    assert status is SUCCESS, status
    return plugin.filter(state, obj, cluster.node("n"))


@pytest.mark.parametrize(
    ("unhealthy", "pod", "reason"),
    [
        ((), make_pod().gpus(4), None),
        ((1,), make_pod().gpus(3), None),
        ((1,), make_pod().gpus(4), REASON_GPU_UNHEALTHY),
        ((0, 1, 2, 3), make_pod().shared(1, "10Gi"), REASON_GPU_UNHEALTHY),
        ((0, 1, 2), make_pod().shared(1, "10Gi"), None),
    ],
    ids=["healthy", "three of four healthy", "four asked, one unhealthy", "shares: none", "one"],
)
def test_unhealthy_gpus(unhealthy: tuple[int, ...], pod: Any, reason: str | None) -> None:
    cluster = _cluster(unhealthy)
    status = _filter(cluster, pod)
    if reason is None:
        assert status is SUCCESS, status
    else:
        assert status.reasons == (reason,)
        assert status.code == Code.UNSCHEDULABLE  # it may recover


def test_busy_gpus_still_say_busy() -> None:
    """Held GPUs are not "unhealthy": four asked, one held, one unhealthy -> not free."""
    cluster = _cluster((1,)).bind(make_pod("held").gpus(1).node_name("n").assigned([0]))
    assert _filter(cluster, make_pod().gpus(4)).reasons == (REASON_INSUFFICIENT_FREE_GPUS,)


def test_mig_devices_of_an_unhealthy_gpu_are_busy() -> None:
    cluster = _cluster((0, 1, 2, 3), mig=["1g.10gb"] * 7)
    status = _filter(cluster, make_pod().mig("1g.10gb"))
    assert status.reasons == (REASON_MIG_BUSY,)
