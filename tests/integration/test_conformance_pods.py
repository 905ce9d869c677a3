"""Conformance: pods/binding, graceful deletion and finalizers, as kube-apiserver v1.32 does them.

Pods here are bound to node names no kubelet serves (on the simulation the simulated kubelet
only runs nodes labelled ``sim.gpusched.io/kubelet``), so nothing confirms their deletion but
the test itself. Upstream references are under kubernetes/kubernetes ``pkg/registry`` and
``staging/src/k8s.io/apiserver/pkg/registry``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from conformance_helpers import (
    EventStream,
    binding,
    call,
    condition,
    default_service_account,
    details,
    fails,
    failure,
    lease,
    node,
    pod,
    rv,
    summary,
    ts,
)
from conftest import Target
from kubernetes_asyncio import client as k8s

TYPE_META = ("kind", "apiVersion")


@pytest.fixture
async def cluster(target: Target) -> Target:
    await default_service_account(target)
    return target


async def create_pod(target: Target, name: str, **spec: Any) -> dict[str, Any]:
    reply = await call(target.core().create_namespaced_pod, target.namespace, pod(name, **spec))
    assert reply.status == 201, reply.body
    body: dict[str, Any] = reply.body
    return body


async def bind(target: Target, name: str, node_name: str, **annotations: str) -> Any:
    return await call(
        target.core().create_namespaced_pod_binding,
        name,
        target.namespace,
        binding(name, node_name, **annotations),
    )


async def bound_pod(target: Target, name: str, **spec: Any) -> dict[str, Any]:
    """A pod bound to a node name no kubelet serves; returns it as stored after the binding."""
    await create_pod(target, name, **spec)
    reply = await bind(target, name, target.name("ghost"))
    assert reply.status == 201, reply.body
    got = await call(target.core().read_namespaced_pod, name, target.namespace)
    body: dict[str, Any] = got.body
    return body


async def force_delete(target: Target, name: str) -> None:
    reply = await call(
        target.core().delete_namespaced_pod, name, target.namespace, grace_period_seconds=0
    )
    assert reply.status in (200, 404), reply.body


def pod_events(target: Target, name: str, after: int) -> EventStream:
    return EventStream(
        target.core().list_namespaced_pod,
        target.namespace,
        field_selector=f"metadata.name={name}",
        resource_version=str(after),
    )


# --------------------------------------------------------------------------- binding


async def test_binding_sets_node_name_scheduled_condition_and_annotations(
    cluster: Target,
) -> None:
    """BindingREST.Create (pkg/registry/core/pod/storage/storage.go): sets spec.nodeName,
    copies the Binding's annotations, sets PodScheduled=True, answers 201 with a Status of
    success; watchers see exactly one MODIFIED event."""
    created = await create_pod(cluster, "bindme")
    target_node = cluster.name("n1")
    reply = await bind(cluster, "bindme", target_node, **{"gpusched.io/gpus": "0,1"})
    assert reply.status == 201, reply.body
    assert reply.body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "code": 201,
    }
    got = (await call(cluster.core().read_namespaced_pod, "bindme", cluster.namespace)).body
    assert got["spec"]["nodeName"] == target_node
    assert got["metadata"]["annotations"] == {"gpusched.io/gpus": "0,1"}
    scheduled = condition(got, "PodScheduled")
    assert scheduled is not None
    assert scheduled["status"] == "True"
    assert "lastTransitionTime" in scheduled
    assert [c["type"] for c in got["status"]["conditions"]] == ["PodScheduled"]

    async with pod_events(cluster, "bindme", rv(created)) as events:
        [event] = await events.take(1)
    assert event["type"] == "MODIFIED"
    assert event["object"] == got


async def test_binding_through_the_bindings_collection(cluster: Target) -> None:
    """POST /api/v1/namespaces/NS/bindings (LegacyBindingREST) binds the pod the Binding names."""
    await create_pod(cluster, "legacy")
    target_node = cluster.name("n1")
    reply = await call(
        cluster.core().create_namespaced_binding,
        cluster.namespace,
        binding("legacy", target_node),
    )
    assert reply.status == 201, reply.body
    assert reply.body["status"] == "Success"
    got = (await call(cluster.core().read_namespaced_pod, "legacy", cluster.namespace)).body
    assert got["spec"]["nodeName"] == target_node


async def test_second_binding_is_409_conflict(cluster: Target) -> None:
    """setPodNodeAndMetadata returns "pod X is already assigned to node N"; assignPod wraps
    a non-Status error in errors.NewConflict(Resource("pods/binding"), name, err)."""
    await create_pod(cluster, "twice")
    first, second = cluster.name("n1"), cluster.name("n2")
    assert (await bind(cluster, "twice", first)).status == 201
    reply = await bind(cluster, "twice", second)
    assert reply.status == 409
    assert reply.body == failure(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on pods/binding "twice": pod twice is already '
        f'assigned to node "{first}"',
        details("twice", "pods/binding"),
    )
    got = (await call(cluster.core().read_namespaced_pod, "twice", cluster.namespace)).body
    assert got["spec"]["nodeName"] == first


async def test_binding_a_missing_pod_is_404(cluster: Target) -> None:
    """GuaranteedUpdate on a missing key -> storeerr.InterpretGetError -> NotFound for pods."""
    reply = await bind(cluster, "nobody", cluster.name("n1"))
    assert reply.status == 404
    assert reply.body == failure(
        404, "NotFound", 'pods "nobody" not found', details("nobody", "pods")
    )


async def test_binding_a_terminating_pod_is_409(cluster: Target) -> None:
    """setPodNodeAndMetadata refuses a pod with a deletionTimestamp (held here by a finalizer)."""
    core = cluster.core()
    ns = cluster.namespace
    body = pod("dying")
    body["metadata"]["finalizers"] = ["gpusched.io/hold"]
    await core.create_namespaced_pod(ns, body)
    try:
        await core.delete_namespaced_pod("dying", ns)
        reply = await bind(cluster, "dying", cluster.name("n1"))
        assert reply.status == 409
        assert reply.body == failure(
            409,
            "Conflict",
            'Operation cannot be fulfilled on pods/binding "dying": pod dying is being deleted, '
            "cannot be assigned to a host",
            details("dying", "pods/binding"),
        )
    finally:
        await call(core.patch_namespaced_pod, "dying", ns, {"metadata": {"finalizers": None}})


@pytest.mark.parametrize("bound", [True, False], ids=["bound", "unbound"])
async def test_node_name_cannot_be_changed_by_an_update(cluster: Target, bound: bool) -> None:
    """ValidatePodUpdate (pkg/apis/core/validation): spec.nodeName is immutable through pod
    updates; only pods/binding sets it. 422 with a single spec Forbidden cause."""
    name = "moving" if bound else "sneaky"
    current = await bound_pod(cluster, name) if bound else await create_pod(cluster, name)
    current["spec"]["nodeName"] = cluster.name("elsewhere")
    try:
        status = await fails(
            cluster.core().replace_namespaced_pod(name, cluster.namespace, current), 422
        )
        assert status["reason"] == "Invalid"
        assert status["message"].startswith(
            f'Pod "{name}" is invalid: spec: Forbidden: pod updates may not change fields '
            "other than "
        )
        assert [(c["reason"], c["field"]) for c in status["details"]["causes"]] == [
            ("FieldValueForbidden", "spec")
        ]
    finally:
        await force_delete(cluster, name)


# --------------------------------------------------------------------------- graceful deletion


async def test_deleting_a_bound_pod_is_graceful(cluster: Target) -> None:
    """podStrategy.CheckGracefulDelete uses spec.terminationGracePeriodSeconds (30 by default)
    for a pod on a node; rest.BeforeDelete sets deletionTimestamp = now + period and keeps the
    object; a repeated DELETE may only shorten the period (deadline moves back by the
    difference); gracePeriodSeconds=0 removes it. Each DELETE answers 200 with the pod
    (ReturnDeletedObject)."""
    core = cluster.core()
    ns = cluster.namespace
    stored = await bound_pod(cluster, "graceful")
    created_at = ts(stored["metadata"]["creationTimestamp"])

    first = await call(core.delete_namespaced_pod, "graceful", ns)
    assert first.status == 200, first.body
    assert first.body["kind"] == "Pod"
    meta = first.body["metadata"]
    assert meta["deletionGracePeriodSeconds"] == 30
    deadline = ts(meta["deletionTimestamp"])
    assert deadline >= created_at + timedelta(seconds=30)

    got = (await call(core.read_namespaced_pod, "graceful", ns)).body
    assert got == first.body

    again = await call(core.delete_namespaced_pod, "graceful", ns)
    assert again.status == 200
    assert again.body == first.body

    shorter = await call(core.delete_namespaced_pod, "graceful", ns, grace_period_seconds=10)
    assert shorter.status == 200, shorter.body
    assert shorter.body["metadata"]["deletionGracePeriodSeconds"] == 10
    assert ts(shorter.body["metadata"]["deletionTimestamp"]) == deadline - timedelta(seconds=20)

    final = await call(core.delete_namespaced_pod, "graceful", ns, grace_period_seconds=0)
    assert final.status == 200, final.body
    assert final.body["kind"] == "Pod"
    assert final.body["metadata"]["uid"] == stored["metadata"]["uid"]
    await fails(core.read_namespaced_pod("graceful", ns), 404)


@pytest.mark.parametrize(
    ("spec", "query", "period"),
    [
        ({"terminationGracePeriodSeconds": 7}, {}, 7),
        ({}, {"grace_period_seconds": 12}, 12),
        ({"terminationGracePeriodSeconds": 7}, {"grace_period_seconds": 3}, 3),
    ],
    ids=["from-spec", "from-request", "request-wins"],
)
async def test_grace_period_comes_from_the_request_or_the_spec(
    cluster: Target, spec: dict[str, Any], query: dict[str, Any], period: int
) -> None:
    """podStrategy.CheckGracefulDelete: DeleteOptions.gracePeriodSeconds, else the pod's
    spec.terminationGracePeriodSeconds."""
    await bound_pod(cluster, "period", **spec)
    try:
        reply = await call(
            cluster.core().delete_namespaced_pod, "period", cluster.namespace, **query
        )
        assert reply.status == 200, reply.body
        assert reply.body["metadata"]["deletionGracePeriodSeconds"] == period
    finally:
        await force_delete(cluster, "period")


async def test_a_terminating_pod_still_holds_its_name(cluster: Target) -> None:
    """Store.Create on an existing key whose object has a deletionTimestamp prefixes the
    AlreadyExists message with "object is being deleted: "."""
    await bound_pod(cluster, "holder")
    try:
        await cluster.core().delete_namespaced_pod("holder", cluster.namespace)
        status = await fails(
            cluster.core().create_namespaced_pod(cluster.namespace, pod("holder")), 409
        )
        assert status == failure(
            409,
            "AlreadyExists",
            'object is being deleted: pods "holder" already exists',
            details("holder", "pods"),
        )
    finally:
        await force_delete(cluster, "holder")


async def test_deleting_an_unbound_pod_removes_it_at_once(cluster: Target) -> None:
    """CheckGracefulDelete: a pod with no spec.nodeName gets period 0 and is removed at once;
    the answer is 200 with the pod (ReturnDeletedObject)."""
    created = await create_pod(cluster, "unbound")
    reply = await call(cluster.core().delete_namespaced_pod, "unbound", cluster.namespace)
    assert reply.status == 200, reply.body
    assert reply.body["kind"] == "Pod"
    assert reply.body["metadata"]["uid"] == created["metadata"]["uid"]
    await fails(cluster.core().read_namespaced_pod("unbound", cluster.namespace), 404)


async def test_deleting_a_finished_pod_removes_it_at_once(cluster: Target) -> None:
    """CheckGracefulDelete: a pod in phase Succeeded or Failed gets period 0."""
    core = cluster.core()
    ns = cluster.namespace
    await bound_pod(cluster, "finished", restartPolicy="Never")
    done = await call(
        core.patch_namespaced_pod_status, "finished", ns, {"status": {"phase": "Succeeded"}}
    )
    assert done.status == 200, done.body
    reply = await call(core.delete_namespaced_pod, "finished", ns)
    assert reply.status == 200, reply.body
    await fails(core.read_namespaced_pod("finished", ns), 404)


async def start_immediate_deletion(target: Target, case: str) -> tuple[int, Any]:
    """Set up ``case`` and delete the pod "now"; returns (revision before, DELETE reply)."""
    core = target.core()
    ns = target.namespace
    if case == "unbound":
        before = rv(await create_pod(target, "now"))
        return before, await call(core.delete_namespaced_pod, "now", ns)
    stored = await bound_pod(target, "now")
    if case == "bound-grace-0":
        return rv(stored), await call(core.delete_namespaced_pod, "now", ns, grace_period_seconds=0)
    terminating = await call(core.delete_namespaced_pod, "now", ns)
    assert terminating.status == 200, terminating.body
    return rv(terminating.body), await call(
        core.delete_namespaced_pod, "now", ns, grace_period_seconds=0
    )


@pytest.mark.parametrize("case", ["unbound", "bound-grace-0", "terminating-shortened-to-0"])
async def test_immediate_pod_deletion_first_records_the_deletion(
    cluster: Target, case: str
) -> None:
    """Pods have a graceful-delete strategy, so even a zero-period delete goes through
    Store.updateForGracefulDeletionAndFinalizers: rest.BeforeDelete stamps deletionTimestamp
    and deletionGracePeriodSeconds=0 and that state is written (a MODIFIED event) before
    Storage.Delete removes it (a DELETED event). The DELETE answer is that last state."""
    before, reply = await start_immediate_deletion(cluster, case)
    assert reply.status == 200, reply.body
    assert reply.body["metadata"].get("deletionGracePeriodSeconds") == 0, reply.body["metadata"]
    assert "deletionTimestamp" in reply.body["metadata"]
    async with pod_events(cluster, "now", before) as events:
        got = await events.take(2)
    assert summary(got) == [("MODIFIED", "now"), ("DELETED", "now")]
    for event in got:
        assert event["object"]["metadata"]["deletionGracePeriodSeconds"] == 0
    assert rv(got[0]["object"]) < rv(got[1]["object"])


@pytest.mark.parametrize("which", ["uid", "resourceVersion"])
async def test_delete_with_a_failed_precondition_is_409(cluster: Target, which: str) -> None:
    """rest.BeforeDelete checks DeleteOptions.preconditions first and answers
    errors.NewConflict(GroupResource{Group, Resource: kind}, name, ...)."""
    stored = await create_pod(cluster, "guarded")
    actual = stored["metadata"][which]
    wrong = "00000000-0000-0000-0000-000000000000" if which == "uid" else "1"
    if which == "uid":
        detail = (
            f"the UID in the precondition ({wrong}) does not match the UID in record ({actual}). "
            "The object might have been deleted and then recreated"
        )
        body = k8s.V1DeleteOptions(preconditions=k8s.V1Preconditions(uid=wrong))
    else:
        detail = (
            f"the ResourceVersion in the precondition ({wrong}) does not match the "
            f"ResourceVersion in record ({actual}). The object might have been modified"
        )
        body = k8s.V1DeleteOptions(preconditions=k8s.V1Preconditions(resource_version=wrong))
    status = await fails(
        cluster.core().delete_namespaced_pod("guarded", cluster.namespace, body=body), 409
    )
    assert status == failure(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on Pod "guarded": {detail}',
        details("guarded", "Pod"),
    )


@pytest.mark.parametrize("resource", ["nodes", "leases"])
async def test_deleting_other_kinds_answers_a_status_of_success(
    cluster: Target, resource: str
) -> None:
    """Nodes and leases have no graceful strategy and do not return the deleted object:
    Store.finalizeDelete answers Status{Success, details{name, group, kind: resource, uid}}."""
    core = cluster.core()
    coord = k8s.CoordinationV1Api(cluster.api())
    name = cluster.name("gone")
    if resource == "nodes":
        uid = (await core.create_node(node(name))).metadata.uid
        reply = await call(core.delete_node, name)
        group = ""
    else:
        uid = (await coord.create_namespaced_lease(cluster.namespace, lease(name))).metadata.uid
        reply = await call(coord.delete_namespaced_lease, name, cluster.namespace)
        group = "coordination.k8s.io"
    assert reply.status == 200, reply.body
    expected_details = details(name, resource, group)
    expected_details["uid"] = uid
    assert reply.body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": expected_details,
    }
    if resource == "nodes":
        await fails(core.read_node(name), 404)
    else:
        await fails(coord.read_namespaced_lease(name, cluster.namespace), 404)


# --------------------------------------------------------------------------- finalizers


async def held_lease(target: Target, name: str) -> dict[str, Any]:
    body = lease(name)
    body["metadata"]["finalizers"] = ["gpusched.io/hold"]
    reply = await call(
        k8s.CoordinationV1Api(target.api()).create_namespaced_lease, target.namespace, body
    )
    assert reply.status == 201, reply.body
    created: dict[str, Any] = reply.body
    return created


async def test_finalizers_hold_an_object_until_removed(cluster: Target) -> None:
    """Store.Delete with pending finalizers and no graceful strategy: markAsDeleting sets
    deletionTimestamp and deletionGracePeriodSeconds=0, the object stays and the answer is the
    object; ValidateObjectMetaUpdate forbids new finalizers on it; the update that empties
    the finalizers deletes it (Store.Update -> deleteWithoutFinalizers) and answers the object
    as the request left it."""
    coord = k8s.CoordinationV1Api(cluster.api())
    ns = cluster.namespace
    created = await held_lease(cluster, "held")

    deleted = await call(coord.delete_namespaced_lease, "held", ns)
    assert deleted.status == 200, deleted.body
    assert deleted.body["kind"] == "Lease"
    meta = deleted.body["metadata"]
    assert meta["deletionGracePeriodSeconds"] == 0
    assert "deletionTimestamp" in meta
    assert meta["finalizers"] == ["gpusched.io/hold"]
    assert rv(deleted.body) > rv(created)

    still = await call(coord.read_namespaced_lease, "held", ns)
    assert still.status == 200
    assert still.body == deleted.body

    status = await fails(
        coord.patch_namespaced_lease(
            "held",
            ns,
            {"metadata": {"finalizers": ["gpusched.io/hold", "gpusched.io/other"]}},
            _content_type="application/merge-patch+json",
        ),
        422,
    )
    assert status["reason"] == "Invalid"
    assert status["message"].startswith(
        'Lease.coordination.k8s.io "held" is invalid: metadata.finalizers: Forbidden: '
        "no new finalizers can be added if the object is being deleted"
    )
    assert [c["field"] for c in status["details"]["causes"]] == ["metadata.finalizers"]

    released = await call(
        coord.patch_namespaced_lease,
        "held",
        ns,
        [{"op": "remove", "path": "/metadata/finalizers"}],
        _content_type="application/json-patch+json",
    )
    assert released.status == 200, released.body
    assert "finalizers" not in released.body["metadata"]
    assert "deletionTimestamp" in released.body["metadata"]
    await fails(coord.read_namespaced_lease("held", ns), 404)


async def test_removing_the_last_finalizer_deletes_without_another_write(
    cluster: Target,
) -> None:
    """Store.Update: ShouldDeleteDuringUpdate holds, so the emptied object is never written;
    Storage.Delete removes the stored one. Watchers see MODIFIED (the DELETE's deletion mark)
    and then DELETED, whose object is the last stored state, finalizer included."""
    coord = k8s.CoordinationV1Api(cluster.api())
    ns = cluster.namespace
    created = await held_lease(cluster, "last")
    await coord.delete_namespaced_lease("last", ns)
    await coord.patch_namespaced_lease(
        "last", ns, {"metadata": {"finalizers": None}}, _content_type="application/merge-patch+json"
    )
    async with EventStream(
        coord.list_namespaced_lease,
        ns,
        field_selector="metadata.name=last",
        resource_version=str(rv(created)),
    ) as events:
        got = await events.take(2)
    assert summary(got) == [("MODIFIED", "last"), ("DELETED", "last")]
    assert got[1]["object"]["metadata"]["finalizers"] == ["gpusched.io/hold"]
    assert "deletionTimestamp" in got[1]["object"]["metadata"]


# --------------------------------------------------------------------------- what a pod gets


async def test_a_new_pod_gets_defaults_a_pending_status_and_its_gate_condition(
    cluster: Target,
) -> None:
    """SetDefaults_PodSpec / SetDefaults_Container (pkg/apis/core/v1/defaults.go) fill the
    spec; podStrategy.PrepareForCreate replaces any status with phase Pending and the QoS
    class, and applySchedulingGatedCondition adds PodScheduled=False/SchedulingGated for a
    gated pod (the gate also keeps a real scheduler away from it)."""
    body = pod("defaults")
    del body["spec"]["schedulerName"]
    body["spec"]["schedulingGates"] = [{"name": "gpusched.io/hold"}]
    body["status"] = {"phase": "Running", "podIP": "10.0.0.1"}
    reply = await call(cluster.core().create_namespaced_pod, cluster.namespace, body)
    assert reply.status == 201, reply.body
    spec = reply.body["spec"]
    assert spec["restartPolicy"] == "Always"
    assert spec["terminationGracePeriodSeconds"] == 30
    assert spec["dnsPolicy"] == "ClusterFirst"
    assert spec["securityContext"] == {}
    assert spec["schedulerName"] == "default-scheduler"
    assert spec["enableServiceLinks"] is True
    main = spec["containers"][0]
    assert main["terminationMessagePath"] == "/dev/termination-log"
    assert main["terminationMessagePolicy"] == "File"
    assert main["imagePullPolicy"] == "IfNotPresent"
    assert main["resources"] == {}
    status = reply.body["status"]
    assert status["phase"] == "Pending"
    assert status["qosClass"] == "BestEffort"
    assert "podIP" not in status
    gated = condition(reply.body, "PodScheduled")
    assert gated is not None
    assert gated["status"] == "False"
    assert gated["reason"] == "SchedulingGated"
    assert gated["message"] == "Scheduling is blocked due to non-empty scheduling gates"


async def test_binding_a_gated_pod_is_409(cluster: Target) -> None:
    """setPodNodeAndMetadata rejects a pod whose spec.schedulingGates is not empty."""
    await create_pod(cluster, "gated", schedulingGates=[{"name": "gpusched.io/hold"}])
    reply = await bind(cluster, "gated", cluster.name("n1"))
    assert reply.status == 409
    assert reply.body == failure(
        409,
        "Conflict",
        'Operation cannot be fulfilled on pods/binding "gated": pod gated has non-empty '
        ".spec.schedulingGates",
        details("gated", "pods/binding"),
    )


async def test_quantities_are_stored_in_canonical_form(cluster: Target) -> None:
    """resource.Quantity marshals canonically: 0.5 -> 500m, 1000m -> 1, 1024Mi -> 1Gi."""
    body = pod("quantities")
    body["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "0.5", "memory": "1024Mi", "nvidia.com/gpu": "2"},
        "limits": {"cpu": "1000m", "memory": "1024Mi", "nvidia.com/gpu": "2"},
    }
    reply = await call(cluster.core().create_namespaced_pod, cluster.namespace, body)
    assert reply.status == 201, reply.body
    resources = reply.body["spec"]["containers"][0]["resources"]
    assert resources == {
        "requests": {"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": "2"},
        "limits": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "2"},
    }
    assert reply.body["status"]["qosClass"] == "Burstable"


async def test_delete_collection_answers_the_list_it_deleted(cluster: Target) -> None:
    """Store.DeleteCollection lists the selection, deletes each item and answers that list
    (the items as listed, before deletion); unselected pods stay."""
    core = cluster.core()
    ns = cluster.namespace
    before = {}
    for name, labels in (("dc-a", {"batch": "x"}), ("dc-b", {"batch": "x"}), ("dc-c", {})):
        before[name] = (await call(core.create_namespaced_pod, ns, pod(name, labels=labels))).body
    reply = await call(core.delete_collection_namespaced_pod, ns, label_selector="batch=x")
    assert reply.status == 200, reply.body
    assert reply.body["kind"] == "PodList"
    assert reply.body["apiVersion"] == "v1"
    assert [item["metadata"]["name"] for item in reply.body["items"]] == ["dc-a", "dc-b"]
    for item in reply.body["items"]:
        # Typed list items carry no kind/apiVersion.
        listed = {k: v for k, v in before[item["metadata"]["name"]].items() if k not in TYPE_META}
        assert item == listed
    left = await call(core.list_namespaced_pod, ns)
    assert [item["metadata"]["name"] for item in left.body["items"]] == ["dc-c"]


async def test_pod_status_and_spec_are_written_through_their_own_endpoints(
    cluster: Target,
) -> None:
    """podStrategy.PrepareForUpdate keeps the old status on the main endpoint (a status-only
    patch there changes nothing, not even the resourceVersion); podStatusStrategy keeps the
    old spec on /status but lets metadata such as labels through."""
    core = cluster.core()
    ns = cluster.namespace
    created = await create_pod(cluster, "split")
    ignored = await call(
        core.patch_namespaced_pod, "split", ns, {"status": {"message": "from main"}}
    )
    assert ignored.status == 200, ignored.body
    assert "message" not in ignored.body["status"]
    assert rv(ignored.body) == rv(created)

    through_status = await call(
        core.patch_namespaced_pod_status,
        "split",
        ns,
        {
            "metadata": {"labels": {"via": "status"}},
            "spec": {"activeDeadlineSeconds": 5},
            "status": {"message": "from status"},
        },
    )
    assert through_status.status == 200, through_status.body
    assert through_status.body["status"]["message"] == "from status"
    assert through_status.body["metadata"]["labels"] == {"via": "status"}
    assert "activeDeadlineSeconds" not in through_status.body["spec"]
