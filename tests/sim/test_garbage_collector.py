"""Deletion propagation as kube-apiserver and kube-controller-manager's garbage collector do it
(``deletionFinalizersForGarbageCollection`` in the generic store; ``attemptToDeleteItem``,
``orphanDependents`` and ``processDeletingDependentsItem`` in the collector): Background,
Orphan (explicit, the deprecated ``orphanDependents``, and batch/v1 Jobs' default), Foreground
(dependents first, the owner waiting for those that block it), a dependent with another live
owner kept, and a reference removed by an update no longer binding the dependent.

Written against ``target``: the same assertions hold on a real cluster, where the collector
runs asynchronously (every check waits for its condition, bounded)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from conftest import Target

from gpusched.kube.client import resource_path
from gpusched.kube.errors import APIError, APINotFound

WAIT = 30.0


def _configmaps(target: Target) -> str:
    return resource_path("", "v1", "configmaps", target.namespace)


def _ref(owner: dict[str, Any], block: bool = False) -> dict[str, Any]:
    ref = {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
    }
    if block:
        ref["blockOwnerDeletion"] = True
    return ref


async def _configmap(
    target: Target,
    name: str,
    owners: Sequence[dict[str, Any]] = (),
    finalizers: Sequence[str] = (),
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if owners:
        meta["ownerReferences"] = list(owners)
    if finalizers:
        meta["finalizers"] = list(finalizers)
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": "v"}}
    created: dict[str, Any] = await target.kube.create(_configmaps(target), body)
    created.setdefault("apiVersion", "v1")
    created.setdefault("kind", "ConfigMap")
    return created


async def _get(target: Target, path: str) -> dict[str, Any] | None:
    try:
        got: dict[str, Any] = await target.kube.get(path)
    except APINotFound:
        return None
    return got


async def _until(
    target: Target, path: str, done: Callable[[dict[str, Any] | None], bool]
) -> dict[str, Any] | None:
    """The object at ``path`` (None once gone) when ``done`` holds; the collector of a real
    cluster works in the background, so this waits (bounded) for the state, never for time."""
    async with asyncio.timeout(WAIT):
        while True:
            obj = await _get(target, path)
            if done(obj):
                return obj
            await asyncio.sleep(0.05)


def _delete_options(**options: Any) -> dict[str, Any]:
    return {"kind": "DeleteOptions", "apiVersion": "v1", **options}


async def test_background_deletes_dependents_after_the_owner(target: Target) -> None:
    cms = _configmaps(target)
    owner = await _configmap(target, "owner")
    await _configmap(target, "dep", [_ref(owner)])
    answer = await target.kube.delete(
        f"{cms}/owner", _delete_options(propagationPolicy="Background")
    )
    assert answer["kind"] == "Status"
    assert answer["status"] == "Success"
    assert await _get(target, f"{cms}/owner") is None
    await _until(target, f"{cms}/dep", lambda o: o is None)


@pytest.mark.parametrize(
    "options",
    [
        pytest.param({"propagationPolicy": "Orphan"}, id="propagationPolicy"),
        pytest.param({"orphanDependents": True}, id="orphanDependents"),
    ],
)
async def test_orphan_keeps_dependents_without_the_reference(
    target: Target, options: dict[str, Any]
) -> None:
    cms = _configmaps(target)
    owner = await _configmap(target, "owner")
    other = await _configmap(target, "other")
    await _configmap(target, "dep", [_ref(owner)])
    await _configmap(target, "shared", [_ref(owner), _ref(other)])
    answer = await target.kube.delete(f"{cms}/owner", _delete_options(**options))
    # The owner is answered terminating, held by the collector's finalizer.
    assert answer["metadata"]["finalizers"] == ["orphan"]
    assert answer["metadata"]["deletionTimestamp"]
    assert answer["metadata"]["deletionGracePeriodSeconds"] == 0
    await _until(target, f"{cms}/owner", lambda o: o is None)
    dep = await _get(target, f"{cms}/dep")
    shared = await _get(target, f"{cms}/shared")
    assert dep is not None
    assert "ownerReferences" not in dep["metadata"]
    assert shared is not None
    assert [r["name"] for r in shared["metadata"]["ownerReferences"]] == ["other"]


async def test_both_orphan_options_are_refused(target: Target) -> None:
    cms = _configmaps(target)
    await _configmap(target, "owner")
    with pytest.raises(APIError) as refused:
        await target.kube.delete(
            f"{cms}/owner", _delete_options(propagationPolicy="Orphan", orphanDependents=True)
        )
    assert refused.value.code == 422
    assert "orphanDependents and deletionPropagation cannot be both set" in str(refused.value)
    assert await _get(target, f"{cms}/owner") is not None


async def test_a_batch_v1_job_orphans_by_default(target: Target) -> None:
    """jobStrategy's default for batch/v1 is OrphanDependents (kubectl asks Background)."""
    jobs = resource_path("batch", "v1", "jobs", target.namespace)
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train"},
        "spec": {
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox"}],
                }
            },
        },
    }
    created = await target.kube.create(jobs, job)
    created.setdefault("apiVersion", "batch/v1")
    created.setdefault("kind", "Job")
    await _configmap(target, "dep", [_ref(created)])
    answer = await target.kube.delete(f"{jobs}/train")
    assert answer["metadata"]["finalizers"] == ["orphan"]
    await _until(target, f"{jobs}/train", lambda o: o is None)
    dep = await _get(target, f"{_configmaps(target)}/dep")
    assert dep is not None
    assert "ownerReferences" not in dep["metadata"]


async def test_foreground_waits_for_blocking_dependents(target: Target) -> None:
    cms = _configmaps(target)
    hold = "example.com/hold"
    owner = await _configmap(target, "owner")
    await _configmap(target, "blocking", [_ref(owner, block=True)], finalizers=[hold])
    await _configmap(target, "loose", [_ref(owner)])
    answer = await target.kube.delete(
        f"{cms}/owner", _delete_options(propagationPolicy="Foreground")
    )
    assert answer["metadata"]["finalizers"] == ["foregroundDeletion"]
    # Every dependent is deleted; the blocking one is held by its own finalizer ...
    await _until(target, f"{cms}/loose", lambda o: o is None)
    blocking = await _until(
        target, f"{cms}/blocking", lambda o: o is not None and "deletionTimestamp" in o["metadata"]
    )
    assert blocking is not None
    # ... and the owner waits for it.
    still = await _get(target, f"{cms}/owner")
    assert still is not None
    assert still["metadata"]["finalizers"] == ["foregroundDeletion"]
    blocking["metadata"]["finalizers"] = []
    await target.kube.replace(f"{cms}/blocking", blocking)
    await _until(target, f"{cms}/blocking", lambda o: o is None)
    await _until(target, f"{cms}/owner", lambda o: o is None)


async def test_a_dependent_with_a_live_owner_stays_and_drops_the_dangling_reference(
    target: Target,
) -> None:
    cms = _configmaps(target)
    gone = await _configmap(target, "gone")
    kept = await _configmap(target, "kept")
    await _configmap(target, "dep", [_ref(gone), _ref(kept)])
    await target.kube.delete(f"{cms}/gone", _delete_options(propagationPolicy="Background"))
    dep = await _until(
        target,
        f"{cms}/dep",
        lambda o: o is not None and len(o["metadata"].get("ownerReferences", [])) == 1,
    )
    assert dep is not None
    assert [r["name"] for r in dep["metadata"]["ownerReferences"]] == ["kept"]


async def test_a_reference_removed_by_an_update_no_longer_binds(target: Target) -> None:
    cms = _configmaps(target)
    owner = await _configmap(target, "owner")
    dep = await _configmap(target, "dep", [_ref(owner)])
    await _configmap(target, "witness", [_ref(owner)])
    del dep["metadata"]["ownerReferences"]
    await target.kube.replace(f"{cms}/dep", dep)
    await target.kube.delete(f"{cms}/owner", _delete_options(propagationPolicy="Background"))
    # The witness shows the collector has acted on the owner's deletion.
    await _until(target, f"{cms}/witness", lambda o: o is None)
    assert await _get(target, f"{cms}/dep") is not None
