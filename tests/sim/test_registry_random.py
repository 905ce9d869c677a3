"""Random operations on the simulated API server's registry, checking invariants after each.

No HTTP here: the registry is driven directly, thousands of operations per second, and after
every step the store's ``_check()`` asserts its invariants. Watchers opened at the start (one
unfiltered, one by label, one by field) must, by replaying what they received, hold exactly
the objects a fresh filtered list returns; ``state_at`` of every past revision must equal the
snapshot taken then (that is what ``continue`` tokens and ``resourceVersionMatch=Exact`` rely on).
"""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gpusched.sim import errors
from gpusched.sim.registry import Registry
from gpusched.sim.store import Store, Watcher


class _Clock:
    def __init__(self) -> None:
        self.t = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.t += timedelta(seconds=1)
        return self.t


def _pod(name: str, rng: random.Random) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"team": rng.choice(["a", "b"])}},
        "spec": {"containers": [{"name": "c", "image": "img:1"}]},
    }


def _replay(watcher: Watcher, state: dict[str, dict[str, Any]]) -> None:
    while watcher.buffer:
        event = json.loads(watcher.buffer.popleft())
        obj = event["object"]
        meta = obj["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        if event["type"] == "DELETED":
            state.pop(key, None)
        else:
            state[key] = obj


@pytest.mark.parametrize("seed", range(8))
def test_random_operations_keep_invariants_and_watchers_consistent(seed: int) -> None:
    rng = random.Random(seed)
    store = Store(window=10_000)
    registry = Registry(store, _Clock())
    for ns in ("n1", "n2"):
        registry.ensure_namespace(ns)
    pods = registry.resource("", "v1", "pods")
    assert pods is not None
    watches = {
        "all": registry.watch(pods, None, resource_version=str(store.rv)),
        "team-a": registry.watch(pods, None, "team=a", resource_version=str(store.rv)),
        "on-node": registry.watch(pods, "n1", "", "spec.nodeName=node-1", str(store.rv)),
    }
    seen: dict[str, dict[str, dict[str, Any]]] = {k: {} for k in watches}
    snapshots: dict[int, dict[str, str]] = {}
    names = [f"p{i}" for i in range(12)]

    for _ in range(400):
        ns = rng.choice(["n1", "n2"])
        name = rng.choice(names)
        op = rng.choice(["create", "label", "status", "bind", "delete", "force", "stale"])
        try:
            if op == "create":
                registry.create(pods, ns, _pod(name, rng))
            elif op == "label":
                body = {"metadata": {"labels": {"team": rng.choice(["a", "b"])}}}
                registry.patch(
                    pods, ns, name, "application/merge-patch+json", json.dumps(body).encode()
                )
            elif op == "status":
                body = {"status": {"phase": rng.choice(["Pending", "Running"])}}
                registry.patch(
                    pods,
                    ns,
                    name,
                    "application/merge-patch+json",
                    json.dumps(body).encode(),
                    "status",
                )
            elif op == "bind":
                binding = {
                    "metadata": {"name": name},
                    "target": {"kind": "Node", "name": rng.choice(["node-1", "node-2"])},
                }
                registry.bind(ns, name, binding)
            elif op == "delete":
                registry.delete(pods, ns, name)
            elif op == "force":
                registry.delete(pods, ns, name, grace_period=0)
            elif op == "stale":
                current = registry.get(pods, ns, name).copy()
                current["metadata"]["resourceVersion"] = "1"
                with pytest.raises(errors.APIError) as exc:
                    registry.update(pods, ns, name, current)
                assert exc.value.code == 409
        except errors.APIError as exc:
            failure = exc.status
        else:
            failure = {"code": 0}
        assert failure["code"] in (0, 404, 409), failure
        store._check()
        snapshots[store.rv] = {k: e.raw.decode() for k, e in store.storages["pods"].objects.items()}

    current = {k: e.obj for k, e in store.storages["pods"].objects.items()}
    for label, start in watches.items():
        watcher = start.watcher
        for line in start.initial:
            watcher.buffer.appendleft(line)
        _replay(watcher, seen[label])
    assert seen["all"] == current
    assert seen["team-a"] == {
        k: o for k, o in current.items() if o["metadata"].get("labels", {}).get("team") == "a"
    }
    assert seen["on-node"] == {
        k: o
        for k, o in current.items()
        if k.startswith("n1/") and o["spec"].get("nodeName") == "node-1"
    }
    storage = store.storages["pods"]
    for rv in rng.sample(sorted(snapshots), 40):
        state = storage.state_at(rv)
        assert state is not None
        assert {k: e.raw.decode() for k, e in state.items()} == snapshots[rv]


def test_window_eviction_turns_old_watches_into_410() -> None:
    store = Store(window=5)
    registry = Registry(store, _Clock())
    registry.ensure_namespace("default")
    leases = registry.resource("coordination.k8s.io", "v1", "leases")
    assert leases is not None
    start_rv = store.rv
    for i in range(10):
        registry.create(leases, "default", {"metadata": {"name": f"l{i}"}, "spec": {}})
        store._check()
    start = registry.watch(leases, "default", resource_version=str(start_rv))
    assert start.watcher.closed
    event = json.loads(start.initial[0])
    assert event["type"] == "ERROR"
    assert event["object"]["code"] == 410
    assert event["object"]["reason"] == "Expired"
    # A watch from inside the window replays the rest.
    recent = registry.watch(leases, "default", resource_version=str(store.rv - 3))
    assert [json.loads(line)["type"] for line in recent.initial] == ["ADDED"] * 3
