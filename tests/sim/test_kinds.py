"""Per-kind strategies of the simulated API server against kube-apiserver v1.32 behaviour.

Expected values are what a real server answers: defaults from pkg/apis/core/v1/defaults.go and
the admission plugins, messages from pkg/apis/core/validation and apimachinery's
util/validation, quantities as resource.Quantity re-encodes them, tables as the server-side
printers build them.
"""

from __future__ import annotations

import copy
import re
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from typing import Any

import pytest

from gpusched.sim import errors, kinds
from gpusched.sim.errors import APIError

NOW = datetime(2024, 1, 1, 1, 0, 0, tzinfo=UTC)
CREATED = "2024-01-01T00:00:00Z"

LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
QUANTITY_MSG = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)
UPDATABLE = (
    "pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only "
    "additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be "
    "set to 1 if it was previously negative)"
)
DEFAULT_TOLERATIONS = [
    {
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
    {
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
]


def strs(errs: list[errors.FieldError]) -> list[str]:
    return [str(e) for e in errs]


def new_pod(name: str = "p", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "default", "creationTimestamp": CREATED},
        "spec": {"containers": [{"name": "c", "image": "nginx:1.25"}]},
    }
    body["spec"].update(spec)
    return body


def created_pod(name: str = "p", **spec: Any) -> dict[str, Any]:
    pod = new_pod(name, **spec)
    kinds.strategy_for("", "Pod").prepare_for_create(pod)
    return pod


def with_resources(*containers: dict[str, Any]) -> dict[str, Any]:
    return new_pod(
        containers=[
            {"name": f"c{i}", "image": "busybox:1", "resources": r}
            for i, r in enumerate(containers)
        ]
    )


# ============================================================================ quantities


@pytest.mark.parametrize(
    ("text", "canonical", "value"),
    [
        ("1000m", "1", Fraction(1)),
        ("0.5", "500m", Fraction(1, 2)),
        ("1500m", "1500m", Fraction(3, 2)),
        ("1Gi", "1Gi", Fraction(2**30)),
        ("1024Mi", "1Gi", Fraction(2**30)),
        ("1.5Gi", "1536Mi", Fraction(3 * 2**29)),
        ("8Gi", "8Gi", Fraction(8 * 2**30)),
        ("123Mi", "123Mi", Fraction(123 * 2**20)),
        ("100M", "100M", Fraction(10**8)),
        ("1000k", "1M", Fraction(10**6)),
        ("128974848", "128974848", Fraction(128974848)),
        ("129e6", "129e6", Fraction(129 * 10**6)),
        ("1e3", "1e3", Fraction(1000)),
        ("5n", "5n", Fraction(5, 10**9)),
        ("0.0000000001", "1n", Fraction(1, 10**9)),  # rounded up to the smallest unit
        ("0", "0", Fraction(0)),
        ("0Gi", "0", Fraction(0)),
        ("-1", "-1", Fraction(-1)),
        ("0.1Gi", "107374182400m", Fraction(2**30, 10)),
        ("1023", "1023", Fraction(1023)),
        ("2", "2", Fraction(2)),
    ],
)
def test_quantity_parse_and_canonical_form(text: str, canonical: str, value: Fraction) -> None:
    assert kinds.parse_quantity(text) == value
    assert kinds._canonical_quantity_json(text) == canonical


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", QUANTITY_MSG),
        ("abc", QUANTITY_MSG),
        ("1x", QUANTITY_MSG),
        ("1KiB", QUANTITY_MSG),
        ("1.2.3", QUANTITY_MSG),
        ("1k3", "unable to parse quantity's suffix"),
    ],
)
def test_quantity_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)) as info:
        kinds.parse_quantity(text)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("value", "binary", "text"),
    [
        (Fraction(2**30), True, "1Gi"),
        (Fraction(2**30), False, "1073741824"),
        (Fraction(1, 2), False, "500m"),
        (Fraction(1500), True, "1500"),
        (Fraction(10**9), False, "1G"),
        (Fraction(0), True, "0"),
    ],
)
def test_format_quantity(value: Fraction, binary: bool, text: str) -> None:
    assert kinds.format_quantity(value, binary) == text


# ============================================================================ durations


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (-5, "<invalid>"),
        (-1, "0s"),
        (5, "5s"),
        (119, "119s"),
        (120, "2m"),
        (182, "3m2s"),
        (600, "10m"),
        (3 * 3600, "3h"),
        (3 * 3600 + 60, "3h1m"),
        (8 * 3600, "8h"),
        (50 * 3600, "2d2h"),
        (3 * 86400, "3d"),
        (10 * 86400, "10d"),
        (800 * 86400, "2y70d"),
        (9 * 365 * 86400, "9y"),
    ],
)
def test_human_duration(seconds: int, text: str) -> None:
    assert kinds.human_duration(timedelta(seconds=seconds)) == text


# ============================================================================ strategy_for


@pytest.mark.parametrize(
    ("group", "kind", "resource", "namespaced", "has_status", "generation", "returns_object"),
    [
        ("", "Pod", "pods", True, True, False, True),
        ("", "Node", "nodes", False, True, False, False),
        ("", "Namespace", "namespaces", False, True, False, False),
        ("", "Event", "events", True, False, False, False),
        ("events.k8s.io", "Event", "events", True, False, False, False),
        ("coordination.k8s.io", "Lease", "leases", True, False, False, False),
        (
            "apiextensions.k8s.io",
            "CustomResourceDefinition",
            "customresourcedefinitions",
            False,
            True,
            True,
            False,
        ),
        ("example.com", "Widget", "widgets", True, False, False, False),
    ],
)
def test_strategy_flags(
    group: str,
    kind: str,
    resource: str,
    namespaced: bool,
    has_status: bool,
    generation: bool,
    returns_object: bool,
) -> None:
    s = kinds.strategy_for(group, kind)
    assert (s.kind, s.group, s.resource, s.namespaced) == (kind, group, resource, namespaced)
    assert s.has_status is has_status
    assert s.tracks_generation is generation
    assert s.return_deleted_object is returns_object
    assert "metadata.name" in s.supported_fields
    assert ("metadata.namespace" in s.supported_fields) is namespaced


def test_generic_strategy_for_custom_resources() -> None:
    s = kinds.generic_strategy("example.com", "Widget", "widgets", False, True)
    assert (s.kind, s.group, s.resource, s.namespaced, s.has_status) == (
        "Widget",
        "example.com",
        "widgets",
        False,
        True,
    )
    assert s.tracks_generation is True
    assert s.return_deleted_object is False
    assert s.supported_fields == frozenset({"metadata.name"})


# ============================================================================ pod defaults


def test_pod_create_defaults_and_admission() -> None:
    pod = created_pod()
    assert pod["spec"] == {
        "containers": [
            {
                "name": "c",
                "image": "nginx:1.25",
                "resources": {},
                "imagePullPolicy": "IfNotPresent",
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
            }
        ],
        "dnsPolicy": "ClusterFirst",
        "restartPolicy": "Always",
        "securityContext": {},
        "terminationGracePeriodSeconds": 30,
        "schedulerName": "default-scheduler",
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
        "serviceAccountName": "default",
        "serviceAccount": "default",
        "priority": 0,
        "tolerations": DEFAULT_TOLERATIONS,
    }
    assert pod["status"] == {"phase": "Pending", "qosClass": "BestEffort"}


def test_pod_create_discards_client_status_and_keeps_node_name() -> None:
    pod = new_pod(nodeName="n1")
    pod["status"] = {"phase": "Running", "podIP": "10.0.0.1"}
    kinds.strategy_for("", "Pod").prepare_for_create(pod)
    assert pod["spec"]["nodeName"] == "n1"
    assert pod["status"] == {"phase": "Pending", "qosClass": "BestEffort"}


@pytest.mark.parametrize(
    ("image", "policy"),
    [
        ("nginx", "Always"),
        ("nginx:latest", "Always"),
        ("nginx:1.25", "IfNotPresent"),
        ("registry.local:5000/team/app", "Always"),
        ("registry.local:5000/team/app:v1", "IfNotPresent"),
        ("nginx@sha256:" + "a" * 64, "IfNotPresent"),
        ("nginx:1@sha256:" + "a" * 64, "IfNotPresent"),
        ("Nginx", "IfNotPresent"),  # does not parse: no tag, so not "latest"
    ],
)
def test_image_pull_policy_default(image: str, policy: str) -> None:
    pod = created_pod(containers=[{"name": "c", "image": image}])
    assert pod["spec"]["containers"][0]["imagePullPolicy"] == policy


def test_explicit_pull_policy_is_kept() -> None:
    pod = created_pod(containers=[{"name": "c", "image": "nginx", "imagePullPolicy": "Never"}])
    assert pod["spec"]["containers"][0]["imagePullPolicy"] == "Never"


def test_requests_default_from_limits_and_quantities_are_canonical() -> None:
    pod = created_pod(
        containers=[
            {
                "name": "c",
                "image": "cuda:12",
                "resources": {
                    "limits": {"cpu": "2000m", "memory": "1024Mi", "nvidia.com/gpu": 2},
                    "requests": {"cpu": "0.5"},
                },
                "ports": [{"containerPort": 80}],
            }
        ],
        initContainers=[{"name": "i", "image": "busybox:1"}],
    )
    c = pod["spec"]["containers"][0]
    assert c["resources"] == {
        "limits": {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "2"},
        "requests": {"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": "2"},
    }
    assert c["ports"] == [{"containerPort": 80, "protocol": "TCP"}]
    assert pod["spec"]["initContainers"][0]["resources"] == {}
    assert pod["spec"]["initContainers"][0]["terminationMessagePolicy"] == "File"
    assert pod["status"]["qosClass"] == "Burstable"


@pytest.mark.parametrize(
    ("resources", "qos"),
    [
        ([{}], "BestEffort"),
        ([{"limits": {"nvidia.com/gpu": "1"}}], "BestEffort"),
        ([{"requests": {"cpu": "0"}}], "BestEffort"),
        ([{"limits": {"cpu": "1", "memory": "1Gi"}}], "Guaranteed"),
        ([{"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "1000m"}}], "Guaranteed"),
        ([{"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m"}}], "Burstable"),
        ([{"limits": {"cpu": "1"}}], "Burstable"),
        ([{"requests": {"memory": "1Gi"}}], "Burstable"),
        ([{"limits": {"cpu": "1", "memory": "1Gi"}}, {}], "Burstable"),
        (
            [{"limits": {"cpu": "1", "memory": "1Gi"}}, {"limits": {"cpu": "1", "memory": "1"}}],
            "Guaranteed",
        ),
    ],
)
def test_qos_class(resources: list[dict[str, Any]], qos: str) -> None:
    pod = with_resources(*resources)
    kinds.strategy_for("", "Pod").prepare_for_create(pod)
    assert pod["status"]["qosClass"] == qos


@pytest.mark.parametrize(
    ("tolerations", "added"),
    [
        ([], DEFAULT_TOLERATIONS),
        ([{"operator": "Exists"}], []),
        ([{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}], DEFAULT_TOLERATIONS[1:]),
        (
            [
                {
                    "key": "node.kubernetes.io/unreachable",
                    "operator": "Exists",
                    "effect": "NoExecute",
                }
            ],
            DEFAULT_TOLERATIONS[:1],
        ),
        (
            [
                {
                    "key": "node.kubernetes.io/unreachable",
                    "operator": "Exists",
                    "effect": "NoSchedule",
                }
            ],
            DEFAULT_TOLERATIONS,
        ),
        ([{"operator": "Exists", "effect": "NoExecute"}], []),
    ],
)
def test_default_toleration_seconds(
    tolerations: list[dict[str, Any]], added: list[dict[str, Any]]
) -> None:
    pod = created_pod(tolerations=copy.deepcopy(tolerations))
    assert pod["spec"]["tolerations"] == tolerations + added


@pytest.mark.parametrize(
    ("spec", "priority"),
    [
        ({}, 0),
        ({"priority": 0}, 0),
        ({"priorityClassName": "system-node-critical"}, 2000001000),
        ({"priorityClassName": "system-cluster-critical"}, 2000000000),
    ],
)
def test_priority_admission(spec: dict[str, Any], priority: int) -> None:
    pod = created_pod(**spec)
    assert pod["spec"]["priority"] == priority


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"priority": 5},
            'pods "p" is forbidden: the integer value of priority (5) must not be provided in pod '
            "spec; priority admission controller computed 0 from the given PriorityClass name",
        ),
        (
            {"priorityClassName": "system-node-critical", "preemptionPolicy": "Never"},
            'pods "p" is forbidden: the string value of PreemptionPolicy (Never) must not be '
            "provided in pod spec; priority admission controller computed PreemptLowerPriority "
            "from the given PriorityClass name",
        ),
        (
            # On its own the pod strategy knows the system classes only (the registry's pods
            # resolve the stored PriorityClass objects: tests/sim/test_sim_priority.py).
            {"priorityClassName": "gpu-high"},
            'pods "p" is forbidden: no PriorityClass with name gpu-high was found',
        ),
    ],
)
def test_priority_admission_forbidden(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(APIError) as info:
        created_pod(**spec)
    assert info.value.code == 403
    assert info.value.status["reason"] == "Forbidden"
    assert info.value.status["message"] == message


def test_service_account_alias_and_explicit_name() -> None:
    assert created_pod(serviceAccount="builder")["spec"]["serviceAccountName"] == "builder"
    pod = created_pod(serviceAccountName="runner")
    assert (pod["spec"]["serviceAccountName"], pod["spec"]["serviceAccount"]) == (
        "runner",
        "runner",
    )


def test_scheduling_gates_add_scheduled_condition() -> None:
    pod = created_pod(schedulingGates=[{"name": "example.com/wait"}])
    assert pod["status"]["conditions"] == [
        {
            "type": "PodScheduled",
            "status": "False",
            "lastProbeTime": None,
            "lastTransitionTime": None,
            "reason": "SchedulingGated",
            "message": "Scheduling is blocked due to non-empty scheduling gates",
        }
    ]


def test_volume_and_probe_defaults() -> None:
    pod = created_pod(
        volumes=[{"name": "scratch"}, {"name": "cfg", "configMap": {"name": "x"}}],
        containers=[
            {
                "name": "c",
                "image": "app:1",
                "livenessProbe": {"httpGet": {"port": 8080}},
                "env": [
                    {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
                ],
            }
        ],
    )
    assert pod["spec"]["volumes"] == [
        {"name": "scratch", "emptyDir": {}},
        {"name": "cfg", "configMap": {"name": "x", "defaultMode": 420}},
    ]
    c = pod["spec"]["containers"][0]
    assert c["livenessProbe"] == {
        "httpGet": {"port": 8080, "path": "/", "scheme": "HTTP"},
        "timeoutSeconds": 1,
        "periodSeconds": 10,
        "successThreshold": 1,
        "failureThreshold": 3,
    }
    assert c["env"][0]["valueFrom"]["fieldRef"]["apiVersion"] == "v1"


def test_bad_quantity_is_a_decode_error() -> None:
    pod = with_resources({"limits": {"cpu": "lots"}})
    with pytest.raises(APIError) as info:
        kinds.strategy_for("", "Pod").prepare_for_create(pod)
    assert info.value.code == 400
    assert info.value.status["reason"] == "BadRequest"
    assert info.value.status["message"] == (
        f'Pod in version "v1" cannot be handled as a Pod: {QUANTITY_MSG}'
    )


def test_non_string_label_is_a_decode_error() -> None:
    pod = new_pod()
    pod["metadata"]["labels"] = {"tier": 3}
    with pytest.raises(APIError) as info:
        kinds.strategy_for("", "Pod").prepare_for_create(pod)
    assert info.value.status["message"] == (
        'Pod in version "v1" cannot be handled as a Pod: json: cannot unmarshal number into Go '
        "struct field ObjectMeta.metadata.labels of type string"
    )


# ============================================================================ pod validation


def pod_errors(body: dict[str, Any]) -> list[str]:
    s = kinds.strategy_for("", "Pod")
    s.prepare_for_create(body)
    return strs(s.validate_create(body))


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (new_pod(), []),
        (new_pod(containers=[]), ["spec.containers: Required value"]),
        (
            new_pod(containers=[{"name": "c"}]),
            ["spec.containers[0].image: Required value"],
        ),
        (
            new_pod(containers=[{"image": "x:1"}]),
            ["spec.containers[0].name: Required value"],
        ),
        (
            new_pod(containers=[{"name": "C", "image": "x:1"}]),
            [f'spec.containers[0].name: Invalid value: "C": {LABEL_MSG}'],
        ),
        (
            new_pod(containers=[{"name": "a", "image": "x:1"}, {"name": "a", "image": "x:1"}]),
            ['spec.containers[1].name: Duplicate value: "a"'],
        ),
        (
            new_pod(initContainers=[{"name": "c", "image": "x:1"}]),
            ['spec.initContainers[0].name: Duplicate value: "c"'],
        ),
        (
            new_pod("Bad_Name"),
            [f'metadata.name: Invalid value: "Bad_Name": {SUBDOMAIN_MSG}'],
        ),
        (
            new_pod(restartPolicy="Sometimes"),
            [
                'spec.restartPolicy: Unsupported value: "Sometimes": supported values: '
                '"Always", "OnFailure", "Never"'
            ],
        ),
        (
            new_pod(dnsPolicy="Custom"),
            [
                'spec.dnsPolicy: Unsupported value: "Custom": supported values: '
                '"ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"'
            ],
        ),
        (
            with_resources({"requests": {"nvidia.com/gpu": "1"}}),
            [
                "spec.containers[0].resources.limits: Required value: Limit must be set for "
                "non overcommitable resources"
            ],
        ),
        (
            with_resources(
                {"limits": {"nvidia.com/gpu": "2"}, "requests": {"nvidia.com/gpu": "1"}}
            ),
            [
                'spec.containers[0].resources.requests: Invalid value: "1": must be equal to '
                "nvidia.com/gpu limit of 2"
            ],
        ),
        (
            with_resources({"limits": {"cpu": "1"}, "requests": {"cpu": "2"}}),
            [
                'spec.containers[0].resources.requests: Invalid value: "2": must be less than or '
                "equal to cpu limit of 1"
            ],
        ),
        (
            with_resources({"limits": {"nvidia.com/gpu": "500m"}}),
            [
                'spec.containers[0].resources.limits[nvidia.com/gpu]: Invalid value: "500m": '
                "must be an integer",
                'spec.containers[0].resources.requests[nvidia.com/gpu]: Invalid value: "500m": '
                "must be an integer",
            ],
        ),
        (
            # gpusched's shared-GPU names follow the same extended-resource rules.
            with_resources({"limits": {"gpusched.io/gpu": "1500m", "gpusched.io/vram": "20Gi"}}),
            [
                'spec.containers[0].resources.limits[gpusched.io/gpu]: Invalid value: "1500m": '
                "must be an integer",
                'spec.containers[0].resources.requests[gpusched.io/gpu]: Invalid value: "1500m": '
                "must be an integer",
            ],
        ),
        (
            with_resources({"requests": {"gpusched.io/vram": "20Gi"}}),
            [
                "spec.containers[0].resources.limits: Required value: Limit must be set for "
                "non overcommitable resources"
            ],
        ),
        (
            with_resources({"requests": {"cpu": "-1"}}),
            [
                'spec.containers[0].resources.requests[cpu]: Invalid value: "-1": must be '
                "greater than or equal to 0"
            ],
        ),
        (
            with_resources({"requests": {"pods": "1"}}),
            [
                'spec.containers[0].resources.requests[pods]: Invalid value: "pods": must be a '
                "standard resource for containers"
            ],
        ),
        (
            new_pod(
                containers=[{"name": "c", "image": "x:1", "ports": [{"containerPort": 70000}]}]
            ),
            [
                "spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between "
                "1 and 65535, inclusive"
            ],
        ),
        (
            new_pod(
                containers=[
                    {
                        "name": "c",
                        "image": "x:1",
                        "volumeMounts": [{"name": "v", "mountPath": "/v"}],
                    }
                ]
            ),
            ['spec.containers[0].volumeMounts[0].name: Not found: "v"'],
        ),
        (
            new_pod(tolerations=[{"key": "a", "operator": "Exists", "value": "b"}]),
            [
                "spec.tolerations[0].operator: Invalid value: "
                '{"key":"a","operator":"Exists","value":"b"}: '
                "value must be empty when `operator` is 'Exists'"
            ],
        ),
        (
            new_pod(tolerations=[{"key": "a", "effect": "NoSchedule", "tolerationSeconds": 5}]),
            [
                'spec.tolerations[0].effect: Invalid value: "NoSchedule": effect must be '
                "'NoExecute' when `tolerationSeconds` is set"
            ],
        ),
        (
            new_pod(nodeName="n1", schedulingGates=[{"name": "wait"}]),
            ["spec.nodeName: Forbidden: cannot be set until all schedulingGates have been cleared"],
        ),
        (
            new_pod(schedulingGates=[{"name": "wait"}, {"name": "wait"}]),
            ['spec.schedulingGates[1]: Duplicate value: "wait"'],
        ),
        (
            new_pod(activeDeadlineSeconds=0),
            [
                "spec.activeDeadlineSeconds: Invalid value: 0: must be between 1 and 2147483647, "
                "inclusive"
            ],
        ),
        (
            new_pod(nodeSelector={"gpu": "a b"}),
            [
                'spec.nodeSelector: Invalid value: "a b": a valid label must be an empty string or '
                "consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
                "an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex "
                "used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
            ],
        ),
    ],
)
def test_pod_validate_create(body: dict[str, Any], expected: list[str]) -> None:
    assert pod_errors(body) == expected


def test_pod_metadata_validation() -> None:
    body = new_pod()
    body["metadata"]["finalizers"] = ["custom"]
    body["metadata"]["labels"] = {"-bad": "ok"}
    errs = pod_errors(body)
    assert errs[0].startswith('metadata.labels: Invalid value: "-bad": name part must consist of')
    assert errs[-1] == (
        'metadata.finalizers[0]: Invalid value: "custom": name is neither a standard finalizer '
        "name nor is it fully qualified"
    )


def test_pod_invalid_message_renders_like_the_server() -> None:
    body = new_pod(containers=[{"name": "c"}])
    s = kinds.strategy_for("", "Pod")
    s.prepare_for_create(body)
    err = errors.invalid("Pod", "", "p", s.validate_create(body))
    assert err.code == 422
    assert err.status["message"] == 'Pod "p" is invalid: spec.containers[0].image: Required value'


# ============================================================================ pod updates


def update_errors(old: dict[str, Any], mutate: Any) -> list[str]:
    s = kinds.strategy_for("", "Pod")
    new = copy.deepcopy(old)
    mutate(new)
    s.prepare_for_update(new, old)
    return strs(s.validate_update(new, old))


def _set(path: str, value: Any) -> Any:
    def apply(obj: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        cur: Any = obj
        for p in parents:
            cur = cur[int(p)] if isinstance(cur, list) else cur[p]
        if isinstance(cur, list):
            cur[int(last)] = value
        else:
            cur[last] = value

    return apply


@pytest.mark.parametrize(
    ("mutate", "ok"),
    [
        (_set("spec.containers.0.image", "nginx:2"), True),
        (_set("spec.activeDeadlineSeconds", 30), True),
        (_set("metadata.labels", {"a": "b"}), True),
        (_set("spec.nodeName", "n1"), False),
        (_set("spec.schedulerName", "other"), False),
        (_set("spec.terminationGracePeriodSeconds", 5), False),
        (lambda p: p["spec"].pop("terminationGracePeriodSeconds"), True),  # re-defaulted to 30
        (lambda p: p["spec"].pop("tolerations"), True),  # DefaultTolerationSeconds re-adds them
        (lambda p: p["spec"].pop("priority"), True),  # Priority admission keeps the old value
        (lambda p: p["spec"]["tolerations"].append({"key": "x", "operator": "Exists"}), True),
        (lambda p: p["spec"]["tolerations"][0].update(tolerationSeconds=10), True),
    ],
)
def test_pod_update_mutable_fields(mutate: Any, ok: bool) -> None:
    errs = update_errors(created_pod(), mutate)
    if ok:
        assert errs == []
    else:
        assert len(errs) == 1
        assert errs[0].startswith("spec: Forbidden: " + UPDATABLE + "\n")


def test_pod_update_changing_qos() -> None:
    errs = update_errors(
        created_pod(), _set("spec.containers.0.resources", {"limits": {"cpu": "1"}})
    )
    assert errs[0] == 'metadata: Invalid value: "BestEffort": Pod QoS is immutable'
    assert errs[1].startswith("spec: Forbidden: " + UPDATABLE + "\n")
    assert len(errs) == 2


def test_pod_update_specific_errors() -> None:
    pod = created_pod(activeDeadlineSeconds=60)
    assert update_errors(pod, _set("spec.activeDeadlineSeconds", 120)) == [
        "spec.activeDeadlineSeconds: Invalid value: 120: must be less than or equal to previous "
        "value"
    ]
    assert update_errors(pod, lambda p: p["spec"].pop("activeDeadlineSeconds")) == [
        "spec.activeDeadlineSeconds: Invalid value: null: must not update from a positive "
        "integer to nil value"
    ]
    assert update_errors(
        pod, lambda p: p["spec"]["containers"].append({"name": "d", "image": "x:1"})
    ) == ["spec.containers: Forbidden: pod updates may not add or remove containers"]
    # Removing a default toleration is undone by DefaultTolerationSeconds on update.
    assert update_errors(pod, lambda p: p["spec"]["tolerations"].pop(0)) == []
    assert update_errors(pod, _set("spec.containers.0.image", "")) == [
        "spec.containers[0].image: Required value",
        "spec.containers[0].image: Required value",
    ]
    tolerating = created_pod(tolerations=[{"key": "gpu", "operator": "Exists"}])
    assert update_errors(tolerating, lambda p: p["spec"]["tolerations"].pop(0)) == [
        "spec.tolerations: Forbidden: existing toleration can not be modified except its "
        "tolerationSeconds"
    ]


def test_pod_update_scheduling_gates_only_removed() -> None:
    pod = created_pod(schedulingGates=[{"name": "a"}, {"name": "b"}])
    assert update_errors(pod, _set("spec.schedulingGates", [{"name": "b"}])) == []
    assert update_errors(pod, _set("spec.schedulingGates", [])) == []
    assert update_errors(pod, _set("spec.schedulingGates", [{"name": "a"}, {"name": "c"}])) == [
        "spec.schedulingGates[1].name: Forbidden: only deletion is allowed, but found new "
        "scheduling gate 'c'"
    ]


def test_pod_update_keeps_status() -> None:
    pod = created_pod()
    new = copy.deepcopy(pod)
    new["status"] = {"phase": "Running"}
    kinds.strategy_for("", "Pod").prepare_for_update(new, pod)
    assert new["status"] == pod["status"]


# ============================================================================ pod status


def test_pod_status_update_prepare() -> None:
    s = kinds.strategy_for("", "Pod")
    old = created_pod()
    old["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "u1"}
    ]
    new = copy.deepcopy(old)
    new["spec"]["nodeName"] = "sneaky"
    new["metadata"]["ownerReferences"] = []
    new["metadata"]["labels"] = {"kept": "yes"}
    new["status"] = {"phase": "Running", "podIP": "10.1.0.5"}
    s.prepare_for_status_update(new, old)
    assert new["spec"] == old["spec"]
    assert new["metadata"]["ownerReferences"] == old["metadata"]["ownerReferences"]
    assert new["metadata"]["labels"] == {"kept": "yes"}  # upstream keeps metadata from /status
    assert new["status"] == {
        "phase": "Running",
        "podIP": "10.1.0.5",
        "podIPs": [{"ip": "10.1.0.5"}],
        "qosClass": "BestEffort",
    }
    assert s.validate_status_update(new, old) == []


def test_pod_status_update_validation() -> None:
    s = kinds.strategy_for("", "Pod")
    old = created_pod(restartPolicy="Never")
    old["status"]["containerStatuses"] = [{"name": "c", "state": {"terminated": {"exitCode": 0}}}]
    new = copy.deepcopy(old)
    new["status"]["containerStatuses"] = [{"name": "c", "state": {"running": {}}}]
    new["status"]["qosClass"] = "Guaranteed"
    new["status"]["nominatedNodeName"] = "Bad_Node"
    new["status"]["conditions"] = [{"type": "bad type", "status": "True"}]
    s.prepare_for_status_update(new, old)
    assert strs(s.validate_status_update(new, old)) == [
        'metadata.conditions[0].Type: Invalid value: "bad type": name part must consist of '
        "alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
        "character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
        "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
        f'status.nominatedNodeName: Invalid value: "Bad_Node": {SUBDOMAIN_MSG}',
        'status.qosClass: Invalid value: "Guaranteed": field is immutable',
        "status.containerStatuses[0].state: Forbidden: may not be transitioned to non-terminated "
        "state",
    ]


def test_pod_status_update_backfills_qos() -> None:
    s = kinds.strategy_for("", "Pod")
    old = created_pod()
    new = copy.deepcopy(old)
    new["status"] = {"phase": "Failed"}
    s.prepare_for_status_update(new, old)
    assert new["status"]["qosClass"] == "BestEffort"


# ============================================================================ graceful delete


@pytest.mark.parametrize(
    ("spec", "phase", "requested", "period"),
    [
        ({"nodeName": "n"}, "Running", None, 30),
        ({"nodeName": "n", "terminationGracePeriodSeconds": 5}, "Running", None, 5),
        ({"nodeName": "n"}, "Running", 10, 10),
        ({"nodeName": "n"}, "Running", 0, 0),
        ({"nodeName": "n"}, "Running", -3, 1),
        ({"nodeName": "n", "terminationGracePeriodSeconds": -1}, "Running", None, 1),
        ({}, "Pending", None, 0),
        ({}, "Pending", 30, 0),
        ({"nodeName": "n"}, "Succeeded", None, 0),
        ({"nodeName": "n"}, "Failed", 20, 0),
    ],
)
def test_pod_graceful_period(
    spec: dict[str, Any], phase: str, requested: int | None, period: int
) -> None:
    pod = created_pod(**spec)
    pod["status"]["phase"] = phase
    assert kinds.strategy_for("", "Pod").graceful_period(pod, requested) == period


@pytest.mark.parametrize(("group", "kind"), [("", "Node"), ("coordination.k8s.io", "Lease")])
def test_other_kinds_delete_at_once(group: str, kind: str) -> None:
    assert kinds.strategy_for(group, kind).graceful_period({"metadata": {}}, 30) == 0


# ============================================================================ binding


def test_bind_pod() -> None:
    pod = created_pod()
    pod["metadata"]["annotations"] = {"a": "1"}
    pod["status"]["conditions"] = [
        {
            "type": "PodScheduled",
            "status": "False",
            "lastProbeTime": None,
            "lastTransitionTime": "2023-12-31T00:00:00Z",
            "reason": "Unschedulable",
            "message": "0/3 nodes are available",
        }
    ]
    binding = {"metadata": {"name": "p", "annotations": {"b": "2"}}, "target": {"name": "gpu-1"}}
    out = kinds.bind_pod(pod, binding, NOW)
    assert out["spec"]["nodeName"] == "gpu-1"
    assert out["metadata"]["annotations"] == {"a": "1", "b": "2"}
    assert out["status"]["conditions"] == [
        {
            "type": "PodScheduled",
            "status": "True",
            "lastProbeTime": None,
            "lastTransitionTime": "2024-01-01T01:00:00Z",
        }
    ]


def test_bind_pod_adds_condition_when_absent() -> None:
    out = kinds.bind_pod(created_pod(), {"target": {"kind": "Node", "name": "n"}}, NOW)
    assert out["status"]["conditions"][-1]["type"] == "PodScheduled"
    assert out["metadata"]["annotations"] == {}


@pytest.mark.parametrize(
    ("prepare", "message"),
    [
        (
            lambda p: p["spec"].update(nodeName="n0"),
            'Operation cannot be fulfilled on pods/binding "p": pod p is already assigned to '
            'node "n0"',
        ),
        (
            lambda p: p["metadata"].update(deletionTimestamp="2024-01-01T00:00:00Z"),
            'Operation cannot be fulfilled on pods/binding "p": pod p is being deleted, cannot '
            "be assigned to a host",
        ),
        (
            lambda p: p["spec"].update(schedulingGates=[{"name": "g"}]),
            'Operation cannot be fulfilled on pods/binding "p": pod p has non-empty '
            ".spec.schedulingGates",
        ),
    ],
)
def test_bind_pod_conflicts(prepare: Any, message: str) -> None:
    pod = created_pod()
    prepare(pod)
    with pytest.raises(APIError) as info:
        kinds.bind_pod(pod, {"target": {"name": "n1"}}, NOW)
    assert info.value.code == 409
    assert info.value.status["reason"] == "Conflict"
    assert info.value.status["message"] == message
    assert info.value.status["details"] == {"name": "p", "kind": "pods/binding"}


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ({}, "target.name: Required value"),
        (
            {"kind": "Pod", "name": "x"},
            'target.kind: Unsupported value: "Pod": supported values: "Node", "<empty>"',
        ),
        (
            {"kind": "Pod"},
            '[target.kind: Unsupported value: "Pod": supported values: "Node", "<empty>", '
            "target.name: Required value]",
        ),
    ],
)
def test_bind_pod_invalid_binding(target: dict[str, Any], message: str) -> None:
    with pytest.raises(APIError) as info:
        kinds.bind_pod(created_pod(), {"target": target}, NOW)
    # ValidatePodBinding's aggregate is not a StatusError: 500 with no reason.
    assert info.value.status == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "code": 500,
    }


# ============================================================================ field selectors


def test_pod_field_set() -> None:
    pod = created_pod(nodeName="n1")
    pod["status"]["podIPs"] = [{"ip": "10.0.0.9"}]
    s = kinds.strategy_for("", "Pod")
    assert s.field_set(pod) == {
        "metadata.name": "p",
        "metadata.namespace": "default",
        "spec.nodeName": "n1",
        "spec.host": "n1",
        "spec.restartPolicy": "Always",
        "spec.schedulerName": "default-scheduler",
        "spec.serviceAccountName": "default",
        "spec.hostNetwork": "false",
        "status.phase": "Pending",
        "status.podIP": "10.0.0.9",
        "status.podIPs": "",
        "status.nominatedNodeName": "",
    }
    assert set(s.field_set(pod)) == s.supported_fields


@pytest.mark.parametrize(
    ("group", "kind", "obj", "expected"),
    [
        (
            "",
            "Node",
            {"metadata": {"name": "n"}, "spec": {"unschedulable": True}},
            {"metadata.name": "n", "spec.unschedulable": "true"},
        ),
        (
            "",
            "Node",
            {"metadata": {"name": "n"}},
            {"metadata.name": "n", "spec.unschedulable": "false"},
        ),
        (
            "",
            "Namespace",
            {"metadata": {"name": "ns"}, "status": {"phase": "Terminating"}},
            {"metadata.name": "ns", "status.phase": "Terminating"},
        ),
        (
            "coordination.k8s.io",
            "Lease",
            {"metadata": {"name": "l", "namespace": "kube-system"}},
            {"metadata.name": "l", "metadata.namespace": "kube-system"},
        ),
    ],
)
def test_field_sets(group: str, kind: str, obj: dict[str, Any], expected: dict[str, str]) -> None:
    assert kinds.strategy_for(group, kind).field_set(obj) == expected


def test_event_field_selectors() -> None:
    core = kinds.strategy_for("", "Event")
    v1 = kinds.strategy_for("events.k8s.io", "Event")
    ev = {
        "metadata": {"name": "e", "namespace": "default"},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default", "uid": "u"},
        "reason": "Scheduled",
        "source": {"component": "gpusched"},
        "type": "Normal",
        "reportingComponent": "gpusched",
    }
    fields = core.field_set(ev)
    assert core.supported_fields == {
        "metadata.name",
        "metadata.namespace",
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    }
    assert v1.supported_fields == {
        "metadata.name",
        "metadata.namespace",
        "regarding.kind",
        "regarding.namespace",
        "regarding.name",
        "regarding.uid",
        "regarding.apiVersion",
        "regarding.resourceVersion",
        "regarding.fieldPath",
        "reason",
        "reportingController",
        "type",
    }
    assert set(fields) >= core.supported_fields | v1.supported_fields
    assert fields["involvedObject.name"] == fields["regarding.name"] == "p"
    assert fields["source"] == "gpusched"
    assert fields["reportingController"] == "gpusched"


# ============================================================================ nodes


def new_node(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "gpu-1", "creationTimestamp": CREATED},
        "spec": {},
        "status": status,
    }


def test_node_create_keeps_status() -> None:
    node = new_node(capacity={"cpu": "64000m", "nvidia.com/gpu": 8, "memory": "512Gi"})
    node["spec"]["podCIDR"] = "10.0.1.0/24"
    kinds.strategy_for("", "Node").prepare_for_create(node)
    assert node["spec"] == {"podCIDR": "10.0.1.0/24", "podCIDRs": ["10.0.1.0/24"]}
    assert node["status"]["capacity"] == {"cpu": "64", "nvidia.com/gpu": "8", "memory": "512Gi"}
    assert node["status"]["allocatable"] == node["status"]["capacity"]
    assert node["status"]["daemonEndpoints"] == {"kubeletEndpoint": {"Port": 0}}
    assert node["status"]["nodeInfo"]["kubeletVersion"] == ""


def test_node_updates_split_spec_and_status() -> None:
    s = kinds.strategy_for("", "Node")
    old = new_node(capacity={"cpu": "8"})
    s.prepare_for_create(old)
    new = copy.deepcopy(old)
    new["spec"]["unschedulable"] = True
    new["status"]["capacity"] = {"cpu": "1"}
    s.prepare_for_update(new, old)
    assert new["spec"]["unschedulable"] is True
    assert new["status"] == old["status"]

    new = copy.deepcopy(old)
    new["spec"]["unschedulable"] = True
    new["metadata"]["labels"] = {"gpu": "a100"}
    new["status"]["allocatable"] = {"cpu": "7500m"}
    s.prepare_for_status_update(new, old)
    assert new["spec"] == old["spec"]
    assert new["status"]["allocatable"] == {"cpu": "7500m"}
    assert new["metadata"]["labels"] == {"gpu": "a100"}
    assert s.validate_status_update(new, old) == []


def test_node_validation() -> None:
    s = kinds.strategy_for("", "Node")
    node = new_node(capacity={"nvidia.com/gpu": "1500m"})
    node["spec"]["taints"] = [
        {"key": "gpu", "effect": "NoSchedule"},
        {"key": "gpu", "effect": "NoSchedule"},
        {"key": "x", "effect": "Sometimes"},
    ]
    s.prepare_for_create(node)
    assert strs(s.validate_create(node)) == [
        'metadata.taints[1]: Duplicate value: {"key":"gpu","effect":"NoSchedule"}: taints must '
        "be unique by key and effect pair",
        'metadata.taints[2].effect: Unsupported value: "Sometimes": supported values: '
        '"NoSchedule", "PreferNoSchedule", "NoExecute"',
        'status.capacity.nvidia.com/gpu: Invalid value: "1500m": must be an integer',
        'status.allocatable.nvidia.com/gpu: Invalid value: "1500m": must be an integer',
    ]
    old = new_node()
    old["spec"]["providerID"] = "aws://1"
    new = copy.deepcopy(old)
    new["spec"]["providerID"] = "aws://2"
    s.prepare_for_create(old)
    s.prepare_for_update(new, old)
    assert strs(s.validate_update(new, old)) == [
        'spec.providerID: Forbidden: node updates may not change providerID except from "" to valid'
    ]


# ============================================================================ namespaces


def test_namespace_create() -> None:
    s = kinds.strategy_for("", "Namespace")
    ns = {"metadata": {"name": "team-a"}, "status": {"phase": "Terminating"}}
    s.prepare_for_create(ns)
    assert ns == {
        "metadata": {"name": "team-a", "labels": {"kubernetes.io/metadata.name": "team-a"}},
        "status": {"phase": "Active"},
        "spec": {"finalizers": ["kubernetes"]},
    }
    assert s.validate_create(ns) == []


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("ok-name", []),
        ("has.dot", [f'metadata.name: Invalid value: "has.dot": {LABEL_MSG}']),
        (
            "x" * 64,
            [
                f'metadata.name: Invalid value: "{"x" * 64}": must be no more than 63 characters',
                # the defaulted kubernetes.io/metadata.name label is too long as well
                f'metadata.labels: Invalid value: "{"x" * 64}": must be no more than 63 characters',
            ],
        ),
    ],
)
def test_namespace_name_is_a_dns_label(name: str, expected: list[str]) -> None:
    s = kinds.strategy_for("", "Namespace")
    ns = {"metadata": {"name": name}}
    s.prepare_for_create(ns)
    assert strs(s.validate_create(ns)) == expected


def test_namespace_updates() -> None:
    s = kinds.strategy_for("", "Namespace")
    old = {"metadata": {"name": "a"}}
    s.prepare_for_create(old)
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {}
    new["spec"]["finalizers"] = []
    new["status"] = {"phase": "Terminating"}
    s.prepare_for_update(new, old)
    assert new["metadata"]["labels"] == {"kubernetes.io/metadata.name": "a"}
    assert new["spec"] == old["spec"]
    assert new["status"] == old["status"]

    new = copy.deepcopy(old)
    new["status"] = {"phase": "Terminating"}
    s.prepare_for_status_update(new, old)
    assert strs(s.validate_status_update(new, old)) == [
        "status.Phase: Invalid value: \"Terminating\": may only be 'Active' if "
        "`deletionTimestamp` is empty"
    ]


# ============================================================================ events


def core_event(**extra: Any) -> dict[str, Any]:
    ev: dict[str, Any] = {
        "metadata": {"name": "p.1", "namespace": "default", "creationTimestamp": CREATED},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
        "reason": "Scheduled",
        "message": "Successfully assigned default/p to n1",
        "source": {"component": "gpusched"},
        "firstTimestamp": "2024-01-01T00:50:00Z",
        "lastTimestamp": "2024-01-01T00:55:00Z",
        "count": 3,
        "type": "Normal",
    }
    ev.update(extra)
    return ev


def test_core_event_create_fills_zero_fields() -> None:
    s = kinds.strategy_for("", "Event")
    ev = {"metadata": {"name": "e", "namespace": "default"}, "involvedObject": {"kind": "Pod"}}
    s.prepare_for_create(ev)
    assert ev == {
        "metadata": {"name": "e", "namespace": "default"},
        "involvedObject": {"kind": "Pod"},
        "source": {},
        "firstTimestamp": None,
        "lastTimestamp": None,
        "eventTime": None,
        "reportingComponent": "",
        "reportingInstance": "",
    }
    assert s.validate_create(ev) == []


def test_event_conversion_round_trip() -> None:
    core = core_event(
        eventTime="2024-01-01T00:50:00.123456Z",
        series={"count": 4, "lastObservedTime": "2024-01-01T00:59:00.000000Z"},
        action="Binding",
        reportingComponent="gpusched",
        reportingInstance="gpusched-0",
        related={"kind": "Node", "name": "n1"},
    )
    kinds.strategy_for("", "Event").prepare_for_create(core)
    v1 = kinds.event_to_events_v1(core)
    assert list(v1) == [
        "kind",
        "apiVersion",
        "metadata",
        "eventTime",
        "series",
        "reportingController",
        "reportingInstance",
        "action",
        "reason",
        "regarding",
        "related",
        "note",
        "type",
        "deprecatedSource",
        "deprecatedFirstTimestamp",
        "deprecatedLastTimestamp",
        "deprecatedCount",
    ]
    assert v1["note"] == core["message"]
    assert v1["regarding"] == core["involvedObject"]
    assert v1["deprecatedCount"] == 3
    assert v1["reportingController"] == "gpusched"
    back = kinds.event_from_events_v1(v1)
    assert back == {"kind": "Event", "apiVersion": "v1", **core}


def test_minimal_events_v1_conversion() -> None:
    v1 = kinds.event_to_events_v1({"metadata": {"name": "e"}})
    assert v1 == {
        "kind": "Event",
        "apiVersion": "events.k8s.io/v1",
        "metadata": {"name": "e"},
        "eventTime": None,
        "regarding": {},
        "deprecatedSource": {},
        "deprecatedFirstTimestamp": None,
        "deprecatedLastTimestamp": None,
    }


@pytest.mark.parametrize(
    ("strict", "event", "expected"),
    [
        (False, core_event(), []),
        (
            False,
            core_event(involvedObject={"kind": "Pod", "name": "p", "namespace": "other"}),
            ['involvedObject.namespace: Invalid value: "other": does not match event.namespace'],
        ),
        (
            False,
            core_event(eventTime="2024-01-01T00:00:00.000000Z"),
            [
                "reportingComponent: Required value",
                'reportingComponent: Invalid value: "": name part must be non-empty',
                'reportingComponent: Invalid value: "": name part must consist of alphanumeric '
                "characters, '-', '_' or '.', and must start and end with an alphanumeric "
                "character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
                "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
                "reportingInstance: Required value",
                "action: Required value",
            ],
        ),
        (
            True,
            kinds.event_from_events_v1(
                {
                    "metadata": {"name": "e", "namespace": "default"},
                    "eventTime": "2024-01-01T00:00:00.000000Z",
                    "reportingController": "example.com/gpusched",
                    "reportingInstance": "gpusched-0",
                    "action": "Bind",
                    "reason": "Scheduled",
                    "type": "Normal",
                    "regarding": {"kind": "Pod", "name": "p", "namespace": "default"},
                }
            ),
            [],
        ),
        (
            True,
            core_event(
                eventTime="2024-01-01T00:00:00.000000Z",
                reportingComponent="gpusched",
                reportingInstance="i",
                action="Bind",
                type="Info",
            ),
            [
                'type: Invalid value: "": has invalid value: Info',
                'firstTimestamp: Invalid value: "": needs to be unset',
                'lastTimestamp: Invalid value: "": needs to be unset',
                'count: Invalid value: "": needs to be unset',
                'source: Invalid value: "": needs to be unset',
            ],
        ),
    ],
)
def test_event_validation(strict: bool, event: dict[str, Any], expected: list[str]) -> None:
    s = kinds.strategy_for("events.k8s.io" if strict else "", "Event")
    s.prepare_for_create(event)
    assert strs(s.validate_create(event)) == expected


def test_event_times_are_normalised() -> None:
    s = kinds.strategy_for("", "Event")
    ev = core_event(firstTimestamp="2024-01-01T02:00:00.75+02:00")
    s.prepare_for_create(ev)
    assert ev["firstTimestamp"] == "2024-01-01T00:00:00Z"
    with pytest.raises(APIError) as info:
        s.prepare_for_create(core_event(eventTime="2024-01-01T00:00:00Z"))
    assert info.value.status["message"] == (
        'Event in version "v1" cannot be handled as a Event: parsing time '
        '"2024-01-01T00:00:00Z" as "2006-01-02T15:04:05.000000Z07:00": cannot parse "Z" as '
        '".000000"'
    )


def test_events_v1_updates_are_mostly_immutable() -> None:
    s = kinds.strategy_for("events.k8s.io", "Event")
    old = kinds.event_from_events_v1(
        {
            "metadata": {"name": "e", "namespace": "default"},
            "eventTime": "2024-01-01T00:00:00.000000Z",
            "reportingController": "gpusched",
            "reportingInstance": "gpusched-0",
            "action": "Bind",
            "reason": "Scheduled",
            "type": "Normal",
            "note": "first",
        }
    )
    s.prepare_for_create(old)
    new = copy.deepcopy(old)
    new["message"] = "second"
    new["series"] = {"count": 2, "lastObservedTime": "2024-01-01T00:01:00.000000Z"}
    s.prepare_for_update(new, old)
    assert strs(s.validate_update(new, old)) == [
        'message: Invalid value: "second": field is immutable'
    ]


# ============================================================================ leases


def test_lease_micro_times_and_disabled_fields() -> None:
    s = kinds.strategy_for("coordination.k8s.io", "Lease")
    lease = {
        "metadata": {"name": "gpusched", "namespace": "kube-system"},
        "spec": {
            "holderIdentity": "a",
            "leaseDurationSeconds": 15,
            "renewTime": "2024-01-01T02:00:00.123456+02:00",
            "strategy": "OldestEmulationVersion",
            "preferredHolder": "b",
        },
    }
    s.prepare_for_create(lease)
    assert lease["spec"] == {
        "holderIdentity": "a",
        "leaseDurationSeconds": 15,
        "renewTime": "2024-01-01T00:00:00.123456Z",
    }
    assert s.validate_create(lease) == []


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "2024-01-01T00:00:00Z",
            'parsing time "2024-01-01T00:00:00Z" as "2006-01-02T15:04:05.000000Z07:00": cannot '
            'parse "Z" as ".000000"',
        ),
        (
            "2024-01-01T00:00:00.123Z",
            'parsing time "2024-01-01T00:00:00.123Z" as "2006-01-02T15:04:05.000000Z07:00": '
            'cannot parse ".123Z" as ".000000"',
        ),
        (
            "yesterday",
            'parsing time "yesterday" as "2006-01-02T15:04:05.000000Z07:00": cannot parse '
            '"yesterday" as "2006"',
        ),
    ],
)
def test_lease_micro_time_must_have_six_digits(value: str, message: str) -> None:
    lease = {"metadata": {"name": "l", "namespace": "d"}, "spec": {"acquireTime": value}}
    with pytest.raises(APIError) as info:
        kinds.strategy_for("coordination.k8s.io", "Lease").prepare_for_create(lease)
    assert info.value.code == 400
    assert info.value.status["message"] == (
        f'Lease in version "v1" cannot be handled as a Lease: {message}'
    )


def test_lease_validation() -> None:
    s = kinds.strategy_for("coordination.k8s.io", "Lease")
    lease = {
        "metadata": {"name": "l", "namespace": "d"},
        "spec": {"leaseDurationSeconds": 0, "leaseTransitions": -1},
    }
    assert strs(s.validate_create(lease)) == [
        "spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0",
        "spec.leaseTransitions: Invalid value: -1: must be greater than or equal to 0",
    ]
    old = {"metadata": {"name": "l", "namespace": "d"}, "spec": {"strategy": "X"}}
    new = copy.deepcopy(old)
    s.prepare_for_update(new, old)
    assert new["spec"] == {"strategy": "X"}


# ============================================================================ CRDs and CRs


def test_crd_strategy() -> None:
    s = kinds.strategy_for("apiextensions.k8s.io", "CustomResourceDefinition")
    crd: dict[str, Any] = {
        "metadata": {"name": "widgets.example.com"},
        "spec": {},
        "status": {"x": 1},
    }
    s.prepare_for_create(crd)
    assert crd["status"] == {}
    new = copy.deepcopy(crd)
    new["spec"] = {"group": "changed"}
    new["metadata"]["labels"] = {"a": "b"}
    new["status"] = {"acceptedNames": {}}
    s.prepare_for_status_update(new, crd)
    assert new["spec"] == {}
    assert new["metadata"]["labels"] == {"a": "b"}
    assert new["status"] == {"acceptedNames": {}}


def test_custom_resource_status_update_only_changes_status() -> None:
    s = kinds.generic_strategy("example.com", "Widget", "widgets", True, True)
    old = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "namespace": "d", "labels": {"a": "1"}},
        "spec": {"size": 1},
        "status": {"ready": False},
    }
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"a": "2"}
    new["spec"] = {"size": 2}
    new["status"] = {"ready": True}
    s.prepare_for_status_update(new, old)
    assert new == {**old, "status": {"ready": True}}
    new = copy.deepcopy(old)
    del new["status"]
    s.prepare_for_status_update(new, old)
    assert "status" not in new
    new = copy.deepcopy(old)
    new["status"] = {"ready": True}
    s.prepare_for_update(new, old)
    assert new["status"] == {"ready": False}


def test_custom_resource_table() -> None:
    columns = [
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
        {"name": "GPUs", "type": "integer", "jsonPath": ".spec.gpus", "description": "GPU count"},
        {"name": "First", "type": "string", "jsonPath": ".spec.nodes[*].name", "priority": 1},
        {"name": "Ready", "type": "boolean", "jsonPath": ".status.ready"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        {"name": "Missing", "type": "string", "jsonPath": ".status.nothing"},
        {"name": "Ratio", "type": "number", "jsonPath": ".spec.gpus"},
    ]
    s = kinds.generic_strategy("example.com", "Gang", "gangs", True, True, columns)
    obj = {
        "metadata": {"name": "g", "namespace": "d", "creationTimestamp": CREATED},
        "spec": {"gpus": 8, "nodes": [{"name": "n1"}, {"name": "n2"}]},
        "status": {"phase": "Running", "ready": True},
    }
    table = s.table([obj], NOW)
    assert [c["name"] for c in table["columnDefinitions"]] == [
        "Name",
        "Phase",
        "GPUs",
        "First",
        "Ready",
        "Age",
        "Missing",
        "Ratio",
    ]
    assert table["columnDefinitions"][1]["description"] == (
        "Custom resource definition column (in JSONPath format): .status.phase"
    )
    assert table["columnDefinitions"][2]["description"] == "GPU count"
    assert table["columnDefinitions"][3]["priority"] == 1
    assert table["rows"][0]["cells"] == ["g", "Running", 8, "n1", True, "60m", None, 8.0]
    assert table["rows"][0]["object"] == {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj["metadata"],
    }


def test_custom_resource_default_age_column() -> None:
    s = kinds.generic_strategy("example.com", "Widget", "widgets", False, False)
    table = s.table([{"metadata": {"name": "w", "creationTimestamp": CREATED}}], NOW)
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Age"]
    assert table["columnDefinitions"][1]["type"] == "date"
    assert table["rows"][0]["cells"] == ["w", "60m"]


def test_custom_resource_metadata_validation() -> None:
    s = kinds.generic_strategy("example.com", "Widget", "widgets", True, False)
    obj = {"metadata": {"name": "w", "namespace": "d", "labels": {"a": "b c"}}}
    errs = strs(s.validate_create(obj))
    assert len(errs) == 1
    assert errs[0].startswith('metadata.labels: Invalid value: "b c": a valid label')


# ============================================================================ tables


def table_cells(group: str, kind: str, obj: dict[str, Any]) -> list[Any]:
    table = kinds.strategy_for(group, kind).table([obj], NOW)
    assert table["kind"] == "Table"
    assert table["apiVersion"] == "meta.k8s.io/v1"
    assert table["metadata"] == {}
    row = table["rows"][0]
    assert row["object"]["kind"] == "PartialObjectMetadata"
    cells: list[Any] = row["cells"]
    assert len(cells) == len(table["columnDefinitions"])
    return cells


@pytest.mark.parametrize(
    ("group", "kind", "columns"),
    [
        (
            "",
            "Pod",
            [
                ("Name", 0),
                ("Ready", 0),
                ("Status", 0),
                ("Restarts", 0),
                ("Age", 0),
                ("IP", 1),
                ("Node", 1),
                ("Nominated Node", 1),
                ("Readiness Gates", 1),
            ],
        ),
        (
            "",
            "Node",
            [
                ("Name", 0),
                ("Status", 0),
                ("Roles", 0),
                ("Age", 0),
                ("Version", 0),
                ("Internal-IP", 1),
                ("External-IP", 1),
                ("OS-Image", 1),
                ("Kernel-Version", 1),
                ("Container-Runtime", 1),
            ],
        ),
        ("", "Namespace", [("Name", 0), ("Status", 0), ("Age", 0)]),
        (
            "",
            "Event",
            [
                ("Last Seen", 0),
                ("Type", 0),
                ("Reason", 0),
                ("Object", 0),
                ("Subobject", 1),
                ("Source", 1),
                ("Message", 0),
                ("First Seen", 1),
                ("Count", 1),
                ("Name", 1),
            ],
        ),
        ("coordination.k8s.io", "Lease", [("Name", 0), ("Holder", 0), ("Age", 0)]),
        ("apiextensions.k8s.io", "CustomResourceDefinition", [("Name", 0), ("Created At", 0)]),
    ],
)
def test_table_columns(group: str, kind: str, columns: list[tuple[str, int]]) -> None:
    table = kinds.strategy_for(group, kind).table([], NOW)
    defs = table["columnDefinitions"]
    assert [(c["name"], c["priority"]) for c in defs] == columns
    assert all(set(c) == {"name", "type", "format", "description", "priority"} for c in defs)
    assert table["rows"] == []


def test_pod_table_rows() -> None:
    pod = created_pod(nodeName="n1")
    pod["status"].update(
        phase="Running",
        podIPs=[{"ip": "10.0.0.7"}],
        containerStatuses=[
            {
                "name": "c",
                "ready": True,
                "restartCount": 2,
                "state": {"running": {}},
                "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2024-01-01T00:55:00Z"}},
            }
        ],
    )
    assert table_cells("", "Pod", pod) == [
        "p",
        "1/1",
        "Running",
        "2 (5m ago)",
        "60m",
        "10.0.0.7",
        "n1",
        "<none>",
        "<none>",
    ]
    gated = created_pod(schedulingGates=[{"name": "g"}])
    assert table_cells("", "Pod", gated)[:3] == ["p", "0/1", "SchedulingGated"]
    deleting = created_pod(nodeName="n1")
    deleting["metadata"]["deletionTimestamp"] = "2024-01-01T00:59:00Z"
    assert table_cells("", "Pod", deleting)[2] == "Terminating"
    done = created_pod()
    done["status"]["phase"] = "Succeeded"
    table = kinds.strategy_for("", "Pod").table([done], NOW)
    assert table["rows"][0]["conditions"] == [
        {
            "type": "Completed",
            "status": "True",
            "reason": "Succeeded",
            "message": "The pod has completed successfully.",
        }
    ]
    waiting = created_pod()
    waiting["status"]["containerStatuses"] = [
        {"name": "c", "state": {"waiting": {"reason": "ContainerCreating"}}}
    ]
    assert table_cells("", "Pod", waiting)[2] == "ContainerCreating"


def test_node_table_rows() -> None:
    node = {
        "metadata": {
            "name": "gpu-1",
            "creationTimestamp": CREATED,
            "labels": {"node-role.kubernetes.io/worker": "", "kubernetes.io/role": "gpu"},
        },
        "spec": {"unschedulable": True},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "addresses": [{"type": "InternalIP", "address": "192.168.0.2"}],
            "nodeInfo": {"kubeletVersion": "v1.32.0", "osImage": "Ubuntu"},
        },
    }
    assert table_cells("", "Node", node) == [
        "gpu-1",
        "Ready,SchedulingDisabled",
        "gpu,worker",
        "60m",
        "v1.32.0",
        "192.168.0.2",
        "<none>",
        "Ubuntu",
        "<unknown>",
        "<unknown>",
    ]
    assert table_cells("", "Node", {"metadata": {"name": "n"}})[:3] == ["n", "Unknown", "<none>"]


def test_other_table_rows() -> None:
    ns = {"metadata": {"name": "a", "creationTimestamp": CREATED}, "status": {"phase": "Active"}}
    assert table_cells("", "Namespace", ns) == ["a", "Active", "60m"]
    lease = {
        "metadata": {"name": "l", "creationTimestamp": "2023-12-31T23:00:00Z"},
        "spec": {"holderIdentity": "me"},
    }
    assert table_cells("coordination.k8s.io", "Lease", lease) == ["l", "me", "120m"]
    crd = {"metadata": {"name": "gangs.example.com", "creationTimestamp": CREATED}}
    assert table_cells("apiextensions.k8s.io", "CustomResourceDefinition", crd) == [
        "gangs.example.com",
        CREATED,
    ]
    assert table_cells("example.com", "Thing", {"metadata": {"name": "t"}}) == [
        "t",
        "0001-01-01T00:00:00Z",
    ]


def test_event_table_rows() -> None:
    ev = core_event(involvedObject={"kind": "Pod", "name": "p", "fieldPath": "spec.containers{c}"})
    assert table_cells("", "Event", ev) == [
        "5m",
        "Normal",
        "Scheduled",
        "pod/p",
        "spec.containers{c}",
        "gpusched",
        "Successfully assigned default/p to n1",
        "10m",
        3,
        "p.1",
    ]
    series = core_event(
        firstTimestamp=None,
        lastTimestamp=None,
        count=0,
        eventTime="2024-01-01T00:30:00.000000Z",
        series={"count": 7, "lastObservedTime": "2024-01-01T00:58:00.000000Z"},
        source={},
        reportingComponent="gpusched",
        reportingInstance="gpusched-0",
    )
    cells = table_cells("", "Event", series)
    assert (cells[0], cells[5], cells[7], cells[8]) == ("2m", "gpusched, gpusched-0", "30m", 7)
    # events.k8s.io objects are printed with the same printer.
    cells_v1 = table_cells("events.k8s.io", "Event", kinds.event_to_events_v1(series))
    assert cells_v1 == cells
