"""Metrics keep kube-scheduler's names; the operations endpoint serves them and health."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from gpusched.cache import NodeInfo, SchedulerCache, Snapshot
from gpusched.clock import FakeClock
from gpusched.framework import (
    Code,
    CycleState,
    Framework,
    build_frameworks,
    default_config,
    in_tree,
)
from gpusched.metrics import FrameworkObserver, Metrics, OperationsServer
from gpusched.sim.fleet import build_fleet, load_cluster_spec


async def test_operations_endpoint_serves_metrics_and_readiness() -> None:
    metrics = Metrics()
    metrics.schedule_attempts.labels(result="scheduled", profile="gpusched").inc()
    metrics.pending_pods.labels(queue="active").set(3)
    ready = False
    server = OperationsServer(metrics, lambda: ready)
    await server.start("127.0.0.1", 0)
    try:
        async with aiohttp.ClientSession() as session:
            base = f"http://127.0.0.1:{server.port}"
            async with session.get(f"{base}/metrics") as r:
                text = await r.text()
            assert (
                'scheduler_schedule_attempts_total{profile="gpusched",result="scheduled"} 1.0'
                in text
            )
            assert 'scheduler_pending_pods{queue="active"} 3.0' in text
            async with session.get(f"{base}/healthz") as r:
                assert r.status == 200
            async with session.get(f"{base}/readyz") as r:
                assert r.status == 503
            ready = True
            async with session.get(f"{base}/readyz") as r:
                assert r.status == 200
    finally:
        await server.stop()


def test_two_schedulers_do_not_share_counters() -> None:
    a, b = Metrics(), Metrics()
    a.lease_conflicts.inc()
    assert b"gpusched_lease_conflicts_total 0.0" in b.render()


# -- the framework's observer ------------------------------------------------------------------

EXTENSION = "scheduler_framework_extension_point_duration_seconds"
PLUGIN = "scheduler_plugin_execution_duration_seconds"
PERMIT_WAIT = "scheduler_permit_wait_duration_seconds"


def gpu_pod(gpus: int, name: str = "p", scheduler: str = "gpusched") -> dict[str, Any]:
    """A pod asking for ``gpus`` whole GPUs (requests and limits, as the API server stores)."""
    resources = {"requests": {"nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {
            "schedulerName": scheduler,
            "containers": [{"name": "main", "image": "pause", "resources": resources}],
        },
        "status": {"phase": "Pending"},
    }


def dgx_nodes(count: int) -> list[NodeInfo]:
    """``count`` DGX H100 node infos (8 GPUs each), from the simulated fleet via the cache."""
    cache = SchedulerCache(FakeClock())
    for sim in build_fleet(load_cluster_spec("dgx-h100", nodes=count)):
        cache.add_node(sim.node)
        if sim.inventory is not None:
            cache.set_inventory(sim.name, sim.inventory)
    snapshot = Snapshot()
    cache.update_snapshot(snapshot)
    return list(snapshot.node_infos())


def default_framework(metrics: Metrics) -> Framework:
    return build_frameworks(default_config(), in_tree(), observer_for=metrics.observer)["gpusched"]


def count(metrics: Metrics, name: str, **labels: str) -> float:
    """A histogram's sample count for ``labels``; 0 when that child was never created."""
    return metrics.registry.get_sample_value(f"{name}_count", labels) or 0.0


def run_filters(
    fw: Framework, state: CycleState, pod: dict[str, Any], nodes: list[NodeInfo]
) -> Code:
    _, status = fw.run_pre_filter(state, pod)
    assert status.code == Code.SUCCESS, status
    codes = {fw.run_filter(state, pod, node).code for node in nodes}
    assert len(codes) == 1, codes
    return codes.pop()


def test_extension_points_are_recorded_every_cycle_plugins_only_when_sampled() -> None:
    metrics = Metrics()
    fw = default_framework(metrics)
    nodes = dgx_nodes(3)
    assert run_filters(fw, CycleState(), gpu_pod(1), nodes) == Code.SUCCESS
    prefilter = {"extension_point": "PreFilter", "profile": "gpusched"}
    assert count(metrics, EXTENSION, status="Success", **prefilter) == 1
    assert metrics.registry.get_sample_value(f"{PLUGIN}_count", {}) is None
    assert f"{PLUGIN}_count".encode() not in metrics.render()  # no plugin child at all

    # A sampled cycle (CycleState.record_plugin_metrics, 10% of them in the scheduler).
    assert run_filters(fw, CycleState(record_plugin_metrics=True), gpu_pod(1), nodes) == (
        Code.SUCCESS
    )
    assert count(metrics, EXTENSION, status="Success", **prefilter) == 2
    for plugin in fw.list_plugins()["preFilter"]:
        pre = count(metrics, PLUGIN, plugin=plugin, extension_point="PreFilter", status="Success")
        skipped = count(metrics, PLUGIN, plugin=plugin, extension_point="PreFilter", status="Skip")
        assert pre + skipped == 1, plugin
    assert count(metrics, PLUGIN, plugin="GPUFit", extension_point="PreFilter", status="Success")
    # Filter: one sample per plugin per node (the scheduling cycle times the phase as a whole).
    assert count(metrics, PLUGIN, plugin="GPUFit", extension_point="Filter", status="Success") == 3
    assert count(metrics, EXTENSION, extension_point="Filter", status="Success") == 0


def test_a_rejection_is_labelled_with_upstreams_code_name() -> None:
    metrics = Metrics()
    fw = default_framework(metrics)
    nodes = dgx_nodes(2)
    state = CycleState(record_plugin_metrics=True)
    code = run_filters(fw, state, gpu_pod(16), nodes)  # 16 GPUs: no 8-GPU node fits
    assert code in (Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)
    rejected = [
        plugin
        for plugin in fw.list_plugins()["filter"]
        if count(metrics, PLUGIN, plugin=plugin, extension_point="Filter", status=code.label)
    ]
    assert len(rejected) == 1
    assert count(
        metrics, PLUGIN, plugin=rejected[0], extension_point="Filter", status=code.label
    ) == len(nodes)
    assert code.label in ("Unschedulable", "UnschedulableAndUnresolvable")


def test_each_profile_gets_its_own_profile_label() -> None:
    base = default_config()
    profiles = [base.profiles[0].model_copy(update={"scheduler_name": n}) for n in ("a", "b")]
    config = base.model_copy(update={"profiles": profiles})
    metrics = Metrics()
    frameworks = build_frameworks(config, in_tree(), observer_for=metrics.observer)
    for name, fw in frameworks.items():
        fw.run_pre_filter(CycleState(), gpu_pod(1, scheduler=name))
    for name in ("a", "b"):
        assert (
            count(metrics, EXTENSION, extension_point="PreFilter", status="Success", profile=name)
            == 1
        )
    assert metrics.observer("a") is metrics.observer("a")
    assert metrics.observer("a").profile == "a"


def test_permit_wait_uses_upstreams_name_and_buckets() -> None:
    metrics = Metrics()
    observer = metrics.observer("gpusched")
    observer.permit_wait_duration(Code.SUCCESS, 0.003)
    observer.permit_wait_duration(Code.UNSCHEDULABLE, 20.0)
    assert count(metrics, PERMIT_WAIT, result="Success") == 1
    assert count(metrics, PERMIT_WAIT, result="Unschedulable") == 1
    sample = metrics.registry.get_sample_value
    # ExponentialBuckets(0.001, 2, 15): 1 ms ... 16.384 s, then +Inf.
    assert sample(f"{PERMIT_WAIT}_bucket", {"result": "Success", "le": "0.002"}) == 0
    assert sample(f"{PERMIT_WAIT}_bucket", {"result": "Success", "le": "0.004"}) == 1
    assert sample(f"{PERMIT_WAIT}_bucket", {"result": "Unschedulable", "le": "16.384"}) == 0
    assert sample(f"{PERMIT_WAIT}_bucket", {"result": "Unschedulable", "le": "+Inf"}) == 1


@pytest.mark.parametrize(
    ("code", "label"),
    [
        (Code.SUCCESS, "Success"),
        (Code.ERROR, "Error"),
        (Code.UNSCHEDULABLE, "Unschedulable"),
        (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, "UnschedulableAndUnresolvable"),
        (Code.WAIT, "Wait"),
        (Code.SKIP, "Skip"),
    ],
)
def test_status_labels_are_upstreams_code_strings(code: Code, label: str) -> None:
    metrics = Metrics()
    observer = FrameworkObserver(metrics, "gpusched")
    observer.extension_point_duration("Permit", code, 0.001)
    observer.plugin_duration("GPUFit", "Permit", code, 0.001)
    assert count(metrics, EXTENSION, extension_point="Permit", status=label, profile="gpusched")
    assert count(metrics, PLUGIN, plugin="GPUFit", extension_point="Permit", status=label)


def test_labelled_children_are_looked_up_once(monkeypatch: pytest.MonkeyPatch) -> None:
    metrics = Metrics()
    observer = metrics.observer("gpusched")
    calls: list[tuple[str, ...]] = []
    for histogram in (metrics.extension_point_duration, metrics.plugin_duration):
        labels = histogram.labels

        def counting(*values: str, _labels: Any = labels) -> Any:
            calls.append(values)
            return _labels(*values)

        monkeypatch.setattr(histogram, "labels", counting)
    for _ in range(100):
        observer.extension_point_duration("Score", Code.SUCCESS, 0.001)
        observer.plugin_duration("GPUFit", "Score", Code.SUCCESS, 0.0001)
    observer.extension_point_duration("Score", Code.ERROR, 0.001)
    assert calls == [
        ("Score", "Success", "gpusched"),
        ("GPUFit", "Score", "Success"),
        ("Score", "Error", "gpusched"),
    ]
    assert (
        count(metrics, EXTENSION, extension_point="Score", status="Success", profile="gpusched")
        == 100
    )


def test_api_writes_are_counted_by_resource_and_verb() -> None:
    metrics = Metrics()
    metrics.api_write("leases", "create")
    metrics.api_write("leases", "update")
    metrics.api_write("leases", "update")
    sample = metrics.registry.get_sample_value
    assert sample("gpusched_api_writes_total", {"resource": "leases", "verb": "create"}) == 1
    assert sample("gpusched_api_writes_total", {"resource": "leases", "verb": "update"}) == 2


def test_the_event_recorders_metrics_are_exported_and_pending_is_live() -> None:
    from gpusched.events import EventRecorder
    from gpusched.kube.client import Kube

    metrics = Metrics()
    recorder = EventRecorder(Kube(Any), FakeClock(), metrics=metrics)  # never connected
    for i in range(3):
        recorder.scheduled({"metadata": {"name": f"p{i}", "namespace": "d", "uid": f"u{i}"}}, "n")
    text = metrics.render().decode()
    assert "gpusched_events_pending 3.0" in text
    for name in (
        "gpusched_events_written_total",
        "gpusched_events_aggregated_total",
        "gpusched_events_dropped_total",
    ):
        assert f"# TYPE {name} counter" in text
