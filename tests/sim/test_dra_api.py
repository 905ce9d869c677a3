"""``resource.k8s.io/v1`` served by the simulated API server (``gpusched.sim.resource``).

Validation with upstream's messages (``pkg/apis/resource/validation``), defaulting, the
ResourceClaim ``status`` subresource (what create, update and ``/status`` keep or reset; the
``allocation`` / ``reservedFor`` invariants), generations, field selectors, the pod's
``spec.resourceClaims`` / ``resources.claims`` / ``status.resourceClaimStatuses`` rules, and
kubectl's tables.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from typing import Any

import pytest
from policy_helpers import NS, PODS, failure

from gpusched.kube.client import Kube
from gpusched.sim import SimCluster

R = "/apis/resource.k8s.io/v1"
CLAIMS = f"{R}/namespaces/{NS}/resourceclaims"
TEMPLATES = f"{R}/namespaces/{NS}/resourceclaimtemplates"
SLICES = f"{R}/resourceslices"
CLASSES = f"{R}/deviceclasses"
KUBECTL = shutil.which("kubectl")


@pytest.fixture
async def sim() -> AsyncIterator[SimCluster]:
    async with SimCluster(None, kubelets=False) as cluster:
        yield cluster


@pytest.fixture
def kube(sim: SimCluster) -> Kube:
    return sim.kube


def request(name: str = "gpu", **exactly: Any) -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": "gpu.nvidia.com", **exactly}}


def claim(
    name: str, requests: list[dict[str, Any]] | None = None, **devices: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [request()] if requests is None else requests, **devices}},
    }


def device(name: str = "gpu-0", **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "attributes": {"type": {"string": "gpu"}, "index": {"int": 0}},
        "capacity": {"memory": {"value": "80Gi"}},
        **extra,
    }


def rslice(name: str = "n1-gpu.nvidia.com", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "driver": "gpu.nvidia.com",
        "nodeName": "n1",
        "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
        "devices": [device()],
    }
    body.update(spec)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {k: v for k, v in body.items() if v is not None},
    }


ALLOCATION = {
    "devices": {
        "results": [{"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0"}]
    }
}


def consumer(name: str, uid: str, resource: str = "pods") -> dict[str, str]:
    ref = {"resource": resource, "name": name, "uid": uid}
    if resource != "pods":
        ref["apiGroup"] = "example.com"
    return ref


# ----------------------------------------------------------------------------- claims

CLAIM_INVALID = [
    pytest.param(
        [{"name": "gpu"}],
        {},
        "spec.devices.requests[0]: Required value: exactly one of `exactly` or `firstAvailable` "
        "is required",
        id="no-request-kind",
    ),
    pytest.param(
        [
            {
                **request(),
                "firstAvailable": [{"name": "a", "deviceClassName": "gpu.nvidia.com"}],
            }
        ],
        {},
        "spec.devices.requests[0]: Invalid value: null: exactly one of `exactly` or "
        "`firstAvailable` is required, but multiple fields are set",
        id="both-kinds",
    ),
    pytest.param(
        [request("GPU")],
        {},
        'spec.devices.requests[0].name: Invalid value: "GPU": a lowercase RFC 1123 label must '
        "consist of lower case alphanumeric characters or '-', and must start and end with an "
        "alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
        "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
        id="request-name",
    ),
    pytest.param(
        [request(), request()],
        {},
        'spec.devices.requests[1]: Duplicate value: "gpu"',
        id="duplicate-request",
    ),
    pytest.param(
        [request(f"r{i}") for i in range(33)],
        {},
        "spec.devices.requests: Too many: 33: must have at most 32 items",
        id="33-requests",
    ),
    pytest.param(
        [{"name": "gpu", "exactly": {}}],
        {},
        "spec.devices.requests[0].exactly.deviceClassName: Required value",
        id="no-class",
    ),
    pytest.param(
        [request(count=0, allocationMode="All", selectors=[])],
        {},
        None,
        id="all-mode-ok",
    ),
    pytest.param(
        [request(allocationMode="All", count=2)],
        {},
        "spec.devices.requests[0].exactly.count: Invalid value: 2: must not be specified when "
        "allocationMode is 'All'",
        id="all-with-count",
    ),
    pytest.param(
        [request(count=-1)],
        {},
        "spec.devices.requests[0].exactly.count: Invalid value: -1: must be greater than zero",
        id="negative-count",
    ),
    pytest.param(
        [request(allocationMode="Some")],
        {},
        'spec.devices.requests[0].exactly.allocationMode: Unsupported value: "Some": supported '
        'values: "All", "ExactCount"',
        id="bad-mode",
    ),
    pytest.param(
        [request(selectors=[{}])],
        {},
        "spec.devices.requests[0].exactly.selectors[0].cel: Required value",
        id="selector-without-cel",
    ),
    pytest.param(
        [request(selectors=[{"cel": {"expression": "x" * 10241}}])],
        {},
        "spec.devices.requests[0].exactly.selectors[0].cel.expression: Too long: may not be more "
        "than 10240 bytes",
        id="cel-too-long",
    ),
    # CEL selectors are compiled at create, as the real server does (gpusched.dra.cel)
    pytest.param(
        [request(selectors=[{"cel": {"expression": "device.driver =="}}])],
        {},
        "spec.devices.requests[0].exactly.selectors[0].cel.expression: Invalid value: "
        '"device.driver ==": compilation failed: syntax error at line 1, column 15',
        id="cel-syntax",
    ),
    pytest.param(
        [request(selectors=[{"cel": {"expression": "device.attributes['x'].y.lenght() > 1"}}])],
        {},
        "spec.devices.requests[0].exactly.selectors[0].cel.expression: Invalid value: "
        "\"device.attributes['x'].y.lenght() > 1\": compilation failed: undeclared reference "
        "to 'lenght' (in container '')",
        id="cel-undeclared-function",
    ),
    pytest.param(
        [
            {
                "name": "gpu",
                "firstAvailable": [
                    {
                        "name": "a",
                        "deviceClassName": "x",
                        "selectors": [{"cel": {"expression": "1"}}],
                    }
                ],
            }
        ],
        {},
        "spec.devices.requests[0].firstAvailable[0].selectors[0].cel.expression: Invalid value: "
        '"1": must evaluate to bool or the unknown type, not int',
        id="cel-not-bool-in-subrequest",
    ),
    pytest.param(
        [
            request(
                selectors=[
                    {
                        "cel": {
                            "expression": "[{l}].all(a, [{l}].all(b, [{l}].all(c, a == b)))".format(
                                l=",".join(["1"] * 100)
                            )
                        }
                    }
                ]
            )
        ],
        {},
        "spec.devices.requests[0].exactly.selectors[0].cel.expression: Forbidden: too complex, "
        "exceeds cost limit",
        id="cel-too-expensive",
    ),
    pytest.param(
        [
            request(
                selectors=[
                    {
                        "cel": {
                            "expression": "device.attributes['gpu.nvidia.com'].?productName"
                            ".orValue('').lowerAscii().contains('h100') && device.capacity["
                            "'gpu.nvidia.com'].memory.isGreaterThan(quantity('40Gi')) && "
                            "device.attributes['gpu.nvidia.com'].driverVersion.isGreaterThan("
                            "semver('550.0.0'))"
                        }
                    }
                ]
            )
        ],
        {},
        None,
        id="cel-upstream-libraries-ok",
    ),
    pytest.param(
        [{"name": "gpu", "firstAvailable": [{"name": "a", "deviceClassName": "x", "count": 0}]}],
        {},
        None,
        id="first-available-defaulted",
    ),
    pytest.param(
        [
            {
                "name": "gpu",
                "firstAvailable": [{"name": f"s{i}", "deviceClassName": "x"} for i in range(9)],
            }
        ],
        {},
        "spec.devices.requests[0].firstAvailable: Too many: 9: must have at most 8 items",
        id="nine-subrequests",
    ),
    pytest.param(
        [request("a"), request("b")],
        {"constraints": [{"requests": ["a", "b"], "matchAttribute": "gpu.nvidia.com/pcieRoot"}]},
        None,
        id="constraint-ok",
    ),
    pytest.param(
        [request()],
        {"constraints": [{"requests": ["nope"], "matchAttribute": "uuid"}]},
        'spec.devices.constraints[0].requests[0]: Invalid value: "nope": must be the name of a '
        "request in the claim or the name of a request and a subrequest separated by '/'; "
        'spec.devices.constraints[0].matchAttribute: Invalid value: "uuid": a fully qualified '
        "name must be a domain and a name separated by a slash",
        id="constraint-bad",
    ),
    pytest.param(
        [request()],
        {"constraints": [{}]},
        "spec.devices.constraints[0].matchAttribute: Required value",
        id="constraint-empty",
    ),
    pytest.param(
        [request()],
        {"constraints": [{"matchAttribute": "gpu.nvidia.com/1st"}]},
        'spec.devices.constraints[0].matchAttribute: Invalid value: "1st": a valid C identifier '
        "must start with alphabetic character or '_', followed by a string of alphanumeric "
        "characters or '_' (e.g. 'my_name',  or 'MY_NAME',  or 'MyName', regex used for "
        "validation is '[A-Za-z_][A-Za-z0-9_]*')",
        id="attribute-not-identifier",
    ),
    pytest.param(
        [request()],
        {"config": [{"requests": ["gpu"]}]},
        "spec.devices.config[0].opaque: Required value",
        id="config-without-opaque",
    ),
]


@pytest.mark.parametrize(("requests", "devices", "message"), CLAIM_INVALID)
async def test_claim_validation(
    kube: Kube, requests: list[dict[str, Any]], devices: dict[str, Any], message: str | None
) -> None:
    body = claim("c", requests, **devices)
    if message is None:
        created = await kube.create(CLAIMS, body)
        assert created["status"] == {}
        return
    err = await failure(kube.create(CLAIMS, body))
    assert err.code == 422
    assert str(err).endswith(message.replace("; ", ", ") + "]") or str(err).endswith(message)


async def test_claim_defaults_and_immutable_spec(kube: Kube) -> None:
    body = claim(
        "c", [request(), {"name": "alt", "firstAvailable": [{"name": "a", "deviceClassName": "x"}]}]
    )
    body["status"] = {"allocation": ALLOCATION}  # create resets the status
    created = await kube.create(CLAIMS, body)
    assert created["status"] == {}
    assert "generation" not in created["metadata"]
    reqs = created["spec"]["devices"]["requests"]
    assert reqs[0]["exactly"] == {
        "deviceClassName": "gpu.nvidia.com",
        "allocationMode": "ExactCount",
        "count": 1,
    }
    assert reqs[1]["firstAvailable"][0]["count"] == 1
    changed = dict(created, spec={"devices": {"requests": [request("other")]}})
    err = await failure(kube.replace(f"{CLAIMS}/c", changed))
    assert "spec: Invalid value: " in str(err)
    assert "field is immutable" in str(err)


async def test_claim_status_subresource(kube: Kube) -> None:
    created = await kube.create(CLAIMS, claim("c"))
    # An update of the main resource keeps the status.
    body = dict(created, status={"allocation": ALLOCATION})
    body["metadata"] = {**created["metadata"], "labels": {"a": "b"}}
    updated = await kube.replace(f"{CLAIMS}/c", body)
    assert updated["status"] == {}
    assert updated["metadata"]["labels"] == {"a": "b"}
    # /status keeps the spec and metadata, and takes the status.
    body = dict(updated, status={"allocation": ALLOCATION})
    body["metadata"] = {**updated["metadata"], "labels": {"x": "y"}}
    body["spec"] = {"devices": {"requests": [request("other")]}}
    allocated = await kube.replace(f"{CLAIMS}/c/status", body)
    assert allocated["status"]["allocation"] == ALLOCATION
    assert allocated["metadata"]["labels"] == {"a": "b"}
    assert allocated["spec"] == updated["spec"]
    # Reserve, then the allocation is immutable while set.
    body = dict(allocated, status={**allocated["status"], "reservedFor": [consumer("p", "u1")]})
    reserved = await kube.replace(f"{CLAIMS}/c/status", body)
    assert reserved["status"]["reservedFor"] == [consumer("p", "u1")]
    other = {"devices": {"results": [{**ALLOCATION["devices"]["results"][0], "device": "gpu-1"}]}}
    err = await failure(
        kube.replace(
            f"{CLAIMS}/c/status", dict(reserved, status={**reserved["status"], "allocation": other})
        )
    )
    assert "status.allocation: Invalid value: " in str(err)
    assert "field is immutable" in str(err)
    # Clearing both is allowed (deallocation).
    cleared = await kube.replace(f"{CLAIMS}/c/status", dict(reserved, status={}))
    assert cleared["status"] == {}


STATUS_INVALID = [
    pytest.param(
        {"reservedFor": [consumer("p", "u1")]},
        "status.reservedFor: Forbidden: may not be specified when `allocated` is not set",
        id="reserved-unallocated",
    ),
    pytest.param(
        {"allocation": ALLOCATION, "reservedFor": [consumer("p", "u1"), consumer("q", "u1")]},
        'status.reservedFor[1]: Duplicate value: "u1"',
        id="duplicate-consumer",
    ),
    pytest.param(
        {"allocation": ALLOCATION, "reservedFor": [{"resource": "pods"}]},
        "status.reservedFor[0].name: Required value, status.reservedFor[0].uid: Required value",
        id="consumer-fields",
    ),
    pytest.param(
        {"allocation": ALLOCATION, "reservedFor": [consumer(f"p{i}", f"u{i}") for i in range(257)]},
        "status.reservedFor: Too many: 257: must have at most 256 items",
        id="257-consumers",
    ),
    pytest.param(
        {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "nope",
                            "driver": "gpu.nvidia.com",
                            "pool": "n1",
                            "device": "gpu-0",
                        }
                    ]
                }
            }
        },
        'status.allocation.devices.results[0].request: Invalid value: "nope": must be the name '
        "of a request in the claim or the name of a request and a subrequest separated by '/'",
        id="unknown-request",
    ),
]


@pytest.mark.parametrize(("status", "message"), STATUS_INVALID)
async def test_claim_status_validation(kube: Kube, status: dict[str, Any], message: str) -> None:
    created = await kube.create(CLAIMS, claim("c"))
    err = await failure(kube.replace(f"{CLAIMS}/c/status", dict(created, status=status)))
    assert err.code == 422
    assert message in str(err)


async def test_no_new_consumer_once_deleted(kube: Kube) -> None:
    body = claim("c")
    body["metadata"]["finalizers"] = ["resource.kubernetes.io/delete-protection"]
    # Consumers that are not pods, so that the resourceclaim controller leaves them alone.
    created = await kube.create(CLAIMS, body)
    status = {"allocation": ALLOCATION, "reservedFor": [consumer("j", "u1", "jobs")]}
    reserved = await kube.replace(f"{CLAIMS}/c/status", dict(created, status=status))
    await kube.delete(f"{CLAIMS}/c")
    deleted = await kube.get(f"{CLAIMS}/c")  # kept by its finalizer
    assert deleted["metadata"]["deletionTimestamp"]
    more = {
        **reserved["status"],
        "reservedFor": [consumer("j", "u1", "jobs"), consumer("k", "u2", "jobs")],
    }
    err = await failure(kube.replace(f"{CLAIMS}/c/status", dict(deleted, status=more)))
    assert (
        "new entries may not be added while `deallocationRequested` or `deletionTimestamp` are set"
        in str(err)
    )
    # Removing one is fine, and the finalizer's removal lets it go.
    await kube.replace(f"{CLAIMS}/c/status", dict(deleted, status={}))
    current = await kube.get(f"{CLAIMS}/c")
    current["metadata"]["finalizers"] = []
    await kube.replace(f"{CLAIMS}/c", current)
    err = await failure(kube.get(f"{CLAIMS}/c"))
    assert err.code == 404


async def test_template(kube: Kube) -> None:
    body = {
        "metadata": {"name": "t"},
        "spec": {
            "metadata": {"labels": {"app": "x"}},
            "spec": {"devices": {"requests": [request()]}},
        },
    }
    created = await kube.create(TEMPLATES, body)
    assert created["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] == 1
    bad = {
        "metadata": {"name": "u"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu"}]}}},
    }
    err = await failure(kube.create(TEMPLATES, bad))
    assert (
        "spec.spec.devices.requests[0]: Required value: exactly one of `exactly` or "
        "`firstAvailable` is required" in str(err)
    )
    err = await failure(kube.replace(f"{TEMPLATES}/t", dict(created, spec={"spec": {}})))
    assert "field is immutable" in str(err)


# ----------------------------------------------------------------------------- classes


async def test_device_class_generation_and_validation(kube: Kube) -> None:
    body = {
        "metadata": {"name": "gpu.nvidia.com"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]},
    }
    created = await kube.create(CLASSES, body)
    assert created["metadata"]["generation"] == 1
    changed = dict(created, spec={"selectors": [{"cel": {"expression": "true"}}]})
    updated = await kube.replace(f"{CLASSES}/gpu.nvidia.com", changed)
    assert updated["metadata"]["generation"] == 2
    bad = {"metadata": {"name": "x"}, "spec": {"selectors": [{}], "config": [{}]}}
    err = await failure(kube.create(CLASSES, bad))
    assert str(err).endswith(
        "[spec.selectors[0].cel: Required value, spec.config[0].opaque: Required value]"
    )
    # selectors are compiled on create, and on update when they change
    typo = {"metadata": {"name": "y"}, "spec": {"selectors": [{"cel": {"expression": "dev"}}]}}
    err = await failure(kube.create(CLASSES, typo))
    assert err.code == 422
    assert str(err).endswith(
        'spec.selectors[0].cel.expression: Invalid value: "dev": compilation failed: '
        "undeclared reference to 'dev' (in container '')"
    )
    err = await failure(kube.replace(f"{CLASSES}/gpu.nvidia.com", dict(updated, spec=typo["spec"])))
    assert "undeclared reference to 'dev'" in str(err)


# ----------------------------------------------------------------------------- slices

SLICE_INVALID = [
    pytest.param({}, None, id="ok"),
    pytest.param(
        {"nodeName": None},
        "spec: Required value: exactly one of `nodeName`, `nodeSelector`, `allNodes`, "
        "`perDeviceNodeSelection` is required",
        id="no-node",
    ),
    pytest.param(
        {"allNodes": True},
        'spec: Invalid value: "{`nodeName`, `allNodes`}": exactly one of `nodeName`, '
        "`nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required, but multiple fields "
        "are set",
        id="two-node-fields",
    ),
    pytest.param(
        {"nodeName": None, "allNodes": False},
        "spec.allNodes: Invalid value: false: must be either unset or set to true",
        id="all-nodes-false",
    ),
    pytest.param(
        {"nodeName": None, "nodeSelector": {"nodeSelectorTerms": []}},
        "spec.nodeSelector.nodeSelectorTerms: Invalid value: []: must have exactly one node "
        "selector term",
        id="selector-terms",
    ),
    pytest.param(
        {"driver": ""},
        "spec.driver: Required value",
        id="no-driver",
    ),
    pytest.param(
        {"pool": {"name": "", "generation": -1, "resourceSliceCount": 0}},
        "spec.pool.name: Required value, spec.pool.resourceSliceCount: Invalid value: 0: must be "
        "greater than zero, spec.pool.generation: Invalid value: -1: must be greater than or "
        "equal to zero",
        id="pool",
    ),
    pytest.param(
        {"devices": [device(), device()]},
        'spec.devices[1]: Duplicate value: "gpu-0"',
        id="duplicate-device",
    ),
    pytest.param(
        {"devices": [device(f"gpu-{i}") for i in range(129)]},
        "spec.devices: Too many: 129: must have at most 128 items",
        id="129-devices",
    ),
    pytest.param(
        {"devices": [device(attributes={"type": {"string": "gpu", "int": 1}})]},
        'spec.devices[0].attributes[type]: Invalid value: {"string":"gpu","int":1}: exactly one '
        "value must be specified",
        id="two-values",
    ),
    pytest.param(
        {"devices": [device(attributes={"driverVersion": {"version": "550.127"}})]},
        'spec.devices[0].attributes[driverVersion].version: Invalid value: "550.127": must be a '
        "string compatible with semver.org spec 2.0.0",
        id="not-semver",
    ),
    pytest.param(
        {"devices": [device(attributes={"productName": {"string": "x" * 65}})]},
        "spec.devices[0].attributes[productName].string: Too long: may not be more than 64 bytes",
        id="long-string",
    ),
    pytest.param(
        {"devices": [device(attributes={f"a{i}": {"int": i} for i in range(32)})]},
        "spec.devices[0]: Invalid value: 33: the total number of attributes and capacities must "
        "not exceed 32",
        id="33-attributes-and-capacities",
    ),
]


@pytest.mark.parametrize(("spec", "message"), SLICE_INVALID)
async def test_slice_validation(kube: Kube, spec: dict[str, Any], message: str | None) -> None:
    if message is None:
        created = await kube.create(SLICES, rslice(**spec))
        assert created["metadata"]["generation"] == 1
        assert created["spec"]["devices"][0]["capacity"]["memory"] == {"value": "80Gi"}
        return
    err = await failure(kube.create(SLICES, rslice(**spec)))
    assert err.code == 422
    assert message in str(err)


async def test_slice_immutable_fields_and_selectors(kube: Kube) -> None:
    created = await kube.create(SLICES, rslice())
    await kube.create(
        SLICES,
        rslice(
            "n2-gpu.nvidia.com",
            nodeName="n2",
            pool={"name": "n2", "generation": 1, "resourceSliceCount": 1},
        ),
    )
    moved = rslice(nodeName="n9", driver="other.example.com")
    moved["metadata"] = created["metadata"]
    err = await failure(kube.replace(f"{SLICES}/n1-gpu.nvidia.com", moved))
    assert 'spec.driver: Invalid value: "other.example.com": field is immutable' in str(err)
    assert 'spec.nodeName: Invalid value: "n9": field is immutable' in str(err)
    listed = await kube.get(SLICES, {"fieldSelector": "spec.nodeName=n2"})
    assert [s["metadata"]["name"] for s in listed["items"]] == ["n2-gpu.nvidia.com"]
    listed = await kube.get(SLICES, {"fieldSelector": "spec.driver=gpu.nvidia.com"})
    assert len(listed["items"]) == 2


# ----------------------------------------------------------------------------- pods


def claim_pod(
    name: str, claims: list[dict[str, Any]], container_claims: list[str]
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "cuda",
                    "resources": {"claims": [{"name": c} for c in container_claims]},
                }
            ],
            "resourceClaims": claims,
        },
    }


POD_INVALID = [
    pytest.param([{"name": "gpu", "resourceClaimName": "c"}], ["gpu"], None, id="ok"),
    pytest.param(
        [{"name": "gpu"}],
        [],
        'spec.resourceClaims[0]: Invalid value: {"name":"gpu"}: must specify one of: '
        "`resourceClaimName`, `resourceClaimTemplateName`",
        id="neither",
    ),
    pytest.param(
        [{"name": "gpu", "resourceClaimName": "c", "resourceClaimTemplateName": "t"}],
        [],
        "at most one of `resourceClaimName` or `resourceClaimTemplateName` may be set",
        id="both",
    ),
    pytest.param(
        [{"name": "gpu", "resourceClaimName": "c"}, {"name": "gpu", "resourceClaimName": "d"}],
        [],
        'spec.resourceClaims[1].name: Duplicate value: "gpu"',
        id="duplicate",
    ),
    pytest.param(
        [{"name": "gpu", "resourceClaimName": "c"}],
        ["other"],
        'spec.containers[0].resources.claims[0]: Not found: "other": must be one of the names in '
        "pod.spec.resourceClaims: gpu",
        id="unknown-container-claim",
    ),
    pytest.param(
        [],
        ["gpu"],
        'spec.containers[0].resources.claims[0]: Not found: "gpu": must be one of the names in '
        "pod.spec.resourceClaims which is empty",
        id="no-pod-claims",
    ),
    pytest.param(
        [{"name": "gpu", "resourceClaimTemplateName": "Bad_Name"}],
        [],
        'spec.resourceClaims[0].resourceClaimTemplateName: Invalid value: "Bad_Name": a '
        "lowercase RFC 1123 subdomain",
        id="bad-template-name",
    ),
]


@pytest.mark.parametrize(("claims", "container_claims", "message"), POD_INVALID)
async def test_pod_resource_claims(
    kube: Kube, claims: list[dict[str, Any]], container_claims: list[str], message: str | None
) -> None:
    body = claim_pod("p", claims, container_claims)
    if message is None:
        created = await kube.create(PODS, body)
        assert created["spec"]["resourceClaims"] == claims
        assert created["spec"]["containers"][0]["resources"]["claims"] == [{"name": "gpu"}]
        return
    err = await failure(kube.create(PODS, body))
    assert err.code == 422
    assert message in str(err)


async def test_pod_resource_claim_statuses(kube: Kube) -> None:
    await kube.create(
        PODS, claim_pod("p", [{"name": "gpu", "resourceClaimTemplateName": "t"}], ["gpu"])
    )
    patch = {
        "status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu-abcde"}]}
    }
    patched = await kube.patch(f"{PODS}/p/status", patch, "application/merge-patch+json")
    assert patched["status"]["resourceClaimStatuses"] == patch["status"]["resourceClaimStatuses"]
    bad = {"status": {"resourceClaimStatuses": [{"name": "nope"}]}}
    err = await failure(kube.patch(f"{PODS}/p/status", bad, "application/merge-patch+json"))
    assert (
        'status.resourceClaimStatuses[0].name: Invalid value: "nope": must match the name of an '
        "entry in `spec.resourceClaims`"
    ) in str(err)


# ----------------------------------------------------------------------------- kubectl


@pytest.mark.kubectl
@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
async def test_kubectl_tables(sim: SimCluster) -> None:
    kube = sim.kube
    await kube.create(CLASSES, {"metadata": {"name": "gpu.nvidia.com"}, "spec": {}})
    await kube.create(SLICES, rslice())
    created = await kube.create(CLAIMS, claim("c"))
    await kube.replace(f"{CLAIMS}/c/status", dict(created, status={"allocation": ALLOCATION}))
    await kube.create(CLAIMS, claim("d"))
    assert KUBECTL is not None
    proc = await asyncio.create_subprocess_exec(
        KUBECTL,
        "--kubeconfig",
        str(sim.kubeconfig_path),
        "get",
        "resourceclaims,resourceslices,deviceclasses,resourceclaimtemplates",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={"HOME": str(sim.kubeconfig_path.parent), "PATH": "/usr/bin:/bin"},
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    lines = [line.split() for line in out.decode().splitlines() if line.strip()]
    assert ["NAME", "STATE", "AGE"] in lines
    assert any(row[:2] == ["resourceclaim.resource.k8s.io/c", "allocated"] for row in lines)
    assert any(row[:2] == ["resourceclaim.resource.k8s.io/d", "pending"] for row in lines)
    assert ["NAME", "NODE", "DRIVER", "POOL", "AGE"] in lines
    assert any(
        row[:4] == ["resourceslice.resource.k8s.io/n1-gpu.nvidia.com", "n1", "gpu.nvidia.com", "n1"]
        for row in lines
    )
    assert any(row[0] == "deviceclass.resource.k8s.io/gpu.nvidia.com" for row in lines)
