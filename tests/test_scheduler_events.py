"""Which cluster events wake which unschedulable pods (gpusched.scheduler's queueing hints).

Table-driven over the default profile: the events the scheduler emits, the plugins registered
for each, and what their hints say; a Node heartbeat wakes nobody.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpusched.framework import QueueingHint, build_frameworks, default_config, in_tree
from gpusched.scheduler import EVENTS, _scheduling_properties, event_hints


def _hints() -> dict[str, dict[str, list[Any]]]:
    return event_hints(build_frameworks(default_config(), in_tree()).values())


def _pod(gpus: int = 1, node: str = "", phase: str = "Pending") -> dict[str, Any]:
    pod: dict[str, Any] = {
        "metadata": {"name": "p", "namespace": "default", "uid": "u"},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "resources": {  # as the API server defaults them: requests from limits
                        "limits": {"nvidia.com/gpu": str(gpus)},
                        "requests": {"nvidia.com/gpu": str(gpus)},
                    },
                }
            ]
        },
        "status": {"phase": phase},
    }
    if node:
        pod["spec"]["nodeName"] = node
    return pod


def _node(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "n", "labels": {"zone": "a"}},
        "spec": {},
        "status": {
            "allocatable": {"nvidia.com/gpu": "8"},
            "conditions": [
                {"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-11-21T10:00:00Z"}
            ],
            **status,
        },
    }


def test_every_emitted_event_has_its_plugins() -> None:
    hints = _hints()
    assert set(hints) <= set(EVENTS)
    assert "GPUFit" in hints["Pod/Delete"]
    assert "NodeResourcesFit" in hints["Pod/Delete"]
    assert "GPUFit" in hints["GPUNodeInventory/Add"]
    assert "TaintToleration" in hints["Node/Update"]
    assert "TaintToleration" not in hints.get("Pod/Delete", {})


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (_pod(1, node="n"), None, QueueingHint.QUEUE),  # a bound GPU pod deleted
        (_pod(1), None, QueueingHint.QUEUE_SKIP),  # an unbound one: nothing was held
        (_pod(1, node="n"), _pod(1, node="n", phase="Succeeded"), QueueingHint.QUEUE),
        (_pod(1, node="n"), _pod(1, node="n", phase="Running"), QueueingHint.QUEUE_SKIP),
    ],
)
def test_gpufit_hints_on_pods(old: Any, new: Any, expected: QueueingHint) -> None:
    hints = _hints()
    event = "Pod/Delete" if new is None else "Pod/Update"
    (fn,) = hints[event]["GPUFit"]
    assert fn is not None
    assert fn(_pod(2), old, new) == expected


def test_a_heartbeat_is_no_scheduling_change_but_a_label_or_allocatable_is() -> None:
    node = _node()
    beat = copy.deepcopy(node)
    beat["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-11-21T10:00:10Z"
    assert _scheduling_properties(beat) == _scheduling_properties(node)
    relabelled = copy.deepcopy(node)
    relabelled["metadata"]["labels"]["zone"] = "b"
    assert _scheduling_properties(relabelled) != _scheduling_properties(node)
    grown = _node(allocatable={"nvidia.com/gpu": "16"})
    assert _scheduling_properties(grown) != _scheduling_properties(node)
    not_ready = copy.deepcopy(node)
    not_ready["status"]["conditions"][0]["status"] = "False"
    assert _scheduling_properties(not_ready) != _scheduling_properties(node)
