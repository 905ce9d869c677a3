"""PreEnqueue and PostFilter plugins run where kube-scheduler runs them, end to end on the
target cluster (the simulation by default; see ``test_scheduler_integration``).

- PreEnqueue: a pod a plugin rejects waits gated, its owner is told why (a FailedScheduling
  Event and ``PodScheduled=False`` with reason ``SchedulingGated``), and it is tried once an
  update to it or an event the plugin registered for lets PreEnqueue pass.
- PostFilter: called once per failed cycle with every node's status; its message joins the
  FailedScheduling message; a nominated node sends the pod back to be retried.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping
from typing import Any, ClassVar

import pytest
from conftest import Target
from scheduler_bed import Bed, bound, objects_until, open_bed

from gpusched.framework import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    Code,
    CycleState,
    EnqueueExtensions,
    FilterPlugin,
    PluginRef,
    Plugins,
    PluginSet,
    Pod,
    PostFilterPlugin,
    PostFilterResult,
    PreEnqueuePlugin,
    SchedulerConfiguration,
    Status,
    apply_default_plugins,
    in_tree,
)
from gpusched.framework.config import Profile
from gpusched.scheduler import Scheduler
from gpusched.sim.fleet import node_names

READY = "gpusched.test/ready"


class LabelGate(PreEnqueuePlugin, EnqueueExtensions):
    """Holds back pods without the ``gpusched.test/ready`` label (only an update adds it)."""

    NAME = "LabelGate"

    def pre_enqueue(self, pod: Pod) -> Status:
        if READY in (pod["metadata"].get("labels") or {}):
            return Status.success()
        return Status.unschedulable(f"waiting for the label {READY}", plugin=self.NAME)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return []


class NodeGate(PreEnqueuePlugin, EnqueueExtensions):
    """Holds back every pod until ``opened`` (state outside the pod); registered for Node/Add."""

    NAME = "NodeGate"

    def __init__(self) -> None:
        self.opened = False

    def pre_enqueue(self, pod: Pod) -> Status:
        return Status.success() if self.opened else Status.unschedulable("closed", plugin=self.NAME)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [ClusterEventWithHint(ClusterEvent("Node", ActionType.ADD))]


class Raiser(PreEnqueuePlugin, EnqueueExtensions):
    """Raises for pods labelled ``boom``: a plugin bug."""

    NAME = "Raiser"

    def pre_enqueue(self, pod: Pod) -> Status:
        if "boom" in (pod["metadata"].get("labels") or {}):
            raise RuntimeError("kaboom")
        return Status.success()

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return []


class Recorder(PostFilterPlugin):
    """Records the statuses of every call; nominates nothing."""

    NAME = "Recorder"
    MESSAGE: ClassVar[str] = "recorder: nothing to preempt"

    def __init__(self) -> None:
        self.calls: list[dict[str, Status]] = []
        self.pods: list[str] = []

    def post_filter(
        self, state: CycleState, pod: Pod, statuses: Mapping[str, Status]
    ) -> tuple[PostFilterResult | None, Status]:
        self.calls.append(dict(statuses))
        self.pods.append(pod["metadata"]["name"])
        return None, Status.unschedulable(self.MESSAGE, plugin=self.NAME)


class Evictor(FilterPlugin, PostFilterPlugin, EnqueueExtensions):
    """Every node is "full" until PostFilter "makes room" on the first one it sees and
    nominates it; then that node passes. It registers for no event, so only the nomination
    (which sends the pod back to the queue) gets the pod tried again in time."""

    NAME = "Evictor"

    def __init__(self) -> None:
        self.room_on: str | None = None
        self.nominations = 0

    def filter(self, state: CycleState, pod: Pod, node_info: Any) -> Status:
        if node_info.name == self.room_on:
            return Status.success()
        return Status.unschedulable("full until evicted", plugin=self.NAME)

    def post_filter(
        self, state: CycleState, pod: Pod, statuses: Mapping[str, Status]
    ) -> tuple[PostFilterResult | None, Status]:
        self.room_on = min(statuses)
        self.nominations += 1
        return PostFilterResult(self.room_on), Status.success()

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return []


def config_with(bed: Bed, plugins: Plugins) -> SchedulerConfiguration:
    """The bed's configuration with ``plugins`` enabled on top of the defaults."""
    base = bed.config()
    profile = Profile(scheduler_name=bed.scheduler_name, plugins=plugins)
    return apply_default_plugins(base.model_copy(update={"profiles": [profile]}))


def registry() -> Any:
    reg = in_tree()
    for cls in (LabelGate, NodeGate, Raiser, Recorder, Evictor):
        reg.register(cls)
    return reg


def plugin(scheduler: Scheduler, bed: Bed, name: str) -> Any:
    return scheduler.frameworks[bed.scheduler_name].plugins[name]


def condition(pod: dict[str, Any]) -> dict[str, Any] | None:
    for c in (pod.get("status") or {}).get("conditions") or ():
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return dict(c)
    return None


@pytest.fixture
async def bed(target: Target) -> AsyncIterator[Bed]:
    async with open_bed(target) as bed:
        await bed.add_nodes(2)
        yield bed


def incoming_pods(metrics: str) -> dict[tuple[str, str], float]:
    """``scheduler_queue_incoming_pods_total`` by (queue, event), from the rendered metrics."""
    pattern = r'^scheduler_queue_incoming_pods_total\{event="([^"]*)",queue="([^"]*)"\} (\S+)$'
    return {(m[2], m[1]): float(m[3]) for m in re.finditer(pattern, metrics, flags=re.MULTILINE)}


def enabled(point: str, name: str) -> Plugins:
    return Plugins(**{point: PluginSet(enabled=[PluginRef(name=name)])})


async def test_a_pre_enqueue_rejection_is_reported_and_an_update_releases_the_pod(
    bed: Bed,
) -> None:
    config = config_with(bed, enabled("pre_enqueue", "LabelGate"))
    async with bed.running(config=config, registry=registry()) as scheduler:
        ready = bed.pod("ready")
        ready["metadata"]["labels"][READY] = "yes"
        await bed.create_pod(bed.pod("waiting"))
        await bed.create_pod(ready)
        pods = await bed.pods_until(lambda ps: bool(bound(ps)) and condition(ps["waiting"]))
        assert bound(pods) == ["ready"]
        cond = condition(pods["waiting"])
        assert cond is not None
        assert (cond["reason"], cond["message"]) == (
            "SchedulingGated",
            f"waiting for the label {READY}",
        )
        events = await objects_until(
            bed.kube,
            bed.events_path,
            lambda evs: any(e["reason"] == "FailedScheduling" for e in evs.values()),
            query={"fieldSelector": "involvedObject.name=waiting"},
        )
        assert {e["message"] for e in events.values()} == {f"waiting for the label {READY}"}
        info = scheduler.queue.get(pods["waiting"]["metadata"]["uid"])
        assert info is not None
        assert (info.gating_plugin, info.attempts) == ("LabelGate", 0)  # never tried
        await bed.kube.patch(f"{bed.pods_path}/waiting", {"metadata": {"labels": {READY: "y"}}})
        await bed.pods_until(lambda ps: len(bound(ps)) == 2)
        incoming = incoming_pods(scheduler.metrics.render().decode())
    assert incoming == {
        ("active", "PodAdd"): 1,
        ("unschedulable", "PodAdd"): 1,  # gated, counted as upstream counts it
        ("active", "PodUpdate"): 1,
    }


async def test_a_gated_pod_re_enters_on_an_event_its_plugin_registered_for(bed: Bed) -> None:
    config = config_with(bed, enabled("pre_enqueue", "NodeGate"))
    async with bed.running(config=config, registry=registry()) as scheduler:
        created = await bed.create_pod(bed.pod("held"))
        uid = created["metadata"]["uid"]
        await bed.pods_until(lambda ps: condition(ps["held"]) is not None)
        assert scheduler.queue.location(uid) == "gated"
        plugin(scheduler, bed, "NodeGate").opened = True  # nothing tells the queue yet...
        assert scheduler.queue.location(uid) == "gated"
        await bed.add_nodes(3)  # ...until a Node/Add, which NodeGate registered for
        pods = await bed.pods_until(lambda ps: bool(bound(ps)))
        assert bound(pods) == ["held"]


async def test_a_pre_enqueue_that_raises_gates_the_pod_with_the_error(bed: Bed) -> None:
    config = config_with(bed, enabled("pre_enqueue", "Raiser"))
    async with bed.running(config=config, registry=registry()):
        broken = bed.pod("broken")
        broken["metadata"]["labels"]["boom"] = "1"
        await bed.create_pod(broken)
        await bed.create_pod(bed.pod("fine"))
        pods = await bed.pods_until(lambda ps: bool(bound(ps)) and condition(ps["broken"]))
        assert bound(pods) == ["fine"]
        cond = condition(pods["broken"]) or {}
        assert cond["reason"] == "SchedulingGated"
        assert "Raiser" in cond["message"]
        assert "RuntimeError: kaboom" in cond["message"]


async def test_post_filter_gets_every_node_once_per_failed_cycle(bed: Bed) -> None:
    config = config_with(bed, enabled("post_filter", "Recorder"))
    async with bed.running(config=config, registry=registry()) as scheduler:
        # The nodes are full (a pod asking more than a node has, GPUFit would call hopeless:
        # UnschedulableAndUnresolvable, and no PostFilter after it would run).
        await bed.create_pods([bed.pod("full-0", gpus=8), bed.pod("full-1", gpus=8)])
        await bed.pods_until(lambda ps: len(bound(ps)) == 2)
        created = await bed.create_pod(bed.pod("huge", gpus=8))
        pods = await bed.pods_until(lambda ps: condition(ps["huge"]) is not None)
        message = (condition(pods["huge"]) or {})["message"]
        assert message.startswith("0/"), message
        assert message.endswith(f" {Recorder.MESSAGE}."), message
        recorder: Recorder = plugin(scheduler, bed, "Recorder")
        info = scheduler.queue.get(created["metadata"]["uid"])
        assert info is not None
        assert len(recorder.calls) == info.attempts >= 1
        names = {n.name for n in scheduler.snapshot.node_infos()}
        for statuses in recorder.calls:
            assert set(statuses) == names
            assert all(s.is_rejected for s in statuses.values())
        assert info.nominated_node_name is None
        assert scheduler.queue.location(info.uid) == "unschedulable"


async def test_post_filter_sees_nodes_a_pre_filter_result_left_out_as_unresolvable(
    bed: Bed,
) -> None:
    node = node_names(bed.fleet(2))[0]
    pinned = bed.pod("pinned")
    pinned["spec"]["tolerations"] = []  # the test's nodes are tainted: node fails Filter
    pinned["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            }
        }
    }
    config = config_with(bed, enabled("post_filter", "Recorder"))
    async with bed.running(config=config, registry=registry()) as scheduler:
        await bed.create_pod(pinned)
        await bed.pods_until(lambda ps: condition(ps["pinned"]) is not None)
        recorder: Recorder = plugin(scheduler, bed, "Recorder")
        statuses = recorder.calls[0]
        assert set(statuses) == {n.name for n in scheduler.snapshot.node_infos()}
        assert statuses[node].plugin == "TaintToleration"
        others = [s for name, s in statuses.items() if name != node]
        assert others
        assert all(s.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE for s in others)


async def test_a_nominated_node_sends_the_pod_back_to_be_retried(bed: Bed) -> None:
    config = config_with(bed, enabled("multi_point", "Evictor"))
    async with bed.running(config=config, registry=registry()) as scheduler:
        await bed.create_pod(bed.pod("preemptor"))
        pods = await bed.pods_until(lambda ps: bool(bound(ps)))
        evictor: Evictor = plugin(scheduler, bed, "Evictor")
        assert evictor.nominations == 1
        assert pods["preemptor"]["spec"]["nodeName"] == evictor.room_on
