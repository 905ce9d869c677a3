"""Each gang reader against its table of examples (the tables in the readers' docstrings)."""

from __future__ import annotations

from typing import Any

import pytest

from gpusched.gangs import kubernetes, kueue, read_ref, scheduler_plugins, volcano
from gpusched.gangs.spec import (
    TOPOLOGY_ANNOTATION,
    TOPOLOGY_POLICY_ANNOTATION,
    Form,
    GroupRef,
    parse_count,
)


def pod(
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    spec: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "uid": "u",
            "labels": labels or {},
            "annotations": annotations or {},
        },
        "spec": spec or {},
    }


SP = scheduler_plugins.LABEL


@pytest.mark.parametrize(
    ("labels", "obj", "want"),
    [
        ({}, None, None),
        ({SP: "train"}, {"spec": {"minMember": 8}}, (8, None, "")),
        ({SP: "train"}, {"spec": {"minMember": 4, "scheduleTimeoutSeconds": 30}}, (4, 30.0, "")),
        ({SP: "train"}, {"spec": {"minMember": 0}}, (0, None, "at least 1")),
        ({SP: "train"}, {"spec": {}}, (0, None, "must be an integer")),
        ({SP: "train"}, None, (1, None, "does not exist: create it")),
        (
            {SP: ""},
            {"spec": {"minMember": 2}},
            (2, None, "label scheduling.x-k8s.io/pod-group is empty"),
        ),
    ],
    ids=["none", "eight", "timeout", "zero", "no-min", "missing", "empty-label"],
)
def test_scheduler_plugins(
    labels: dict[str, str], obj: dict[str, Any] | None, want: tuple[int, float | None, str] | None
) -> None:
    ref = scheduler_plugins.read(pod(labels))
    if want is None:
        assert ref is None
        return
    assert ref is not None
    assert ref.form is Form.SCHEDULER_PLUGINS
    spec = scheduler_plugins.spec_of(obj, ref)
    assert (spec.min_member, spec.timeout_seconds) == want[:2]
    assert want[2] in spec.error if want[2] else not spec.error


GANG8 = {"schedulingPolicy": {"gang": {"minCount": 8}}}


@pytest.mark.parametrize(
    ("field", "obj_spec", "want"),
    [
        (None, None, None),
        ({"podGroupName": "train"}, GANG8, (True, 8, None, False, "")),
        (
            {"podGroupName": "train"},
            {"schedulingPolicy": {"basic": {}}},
            (False, 1, None, False, ""),
        ),
        (
            {"podGroupName": "train"},
            {
                "schedulingPolicy": {"gang": {"minCount": 4}},
                "schedulingConstraints": {"topologyConstraints": [{"topologyKey": "rack"}]},
            },
            (True, 4, "rack", True, ""),
        ),
        ({"podGroupName": "train"}, "missing", (True, 1, None, False, "does not exist yet")),
        (
            {"podGroupName": "train"},
            {"schedulingPolicy": {"gang": {"minCount": 0}}},
            (True, 0, None, False, "at least 1"),
        ),
        ({}, GANG8, (True, 1, None, False, "podGroupName must name")),
    ],
    ids=["none", "gang", "basic", "topology", "missing", "zero", "no-name"],
)
def test_kubernetes(field: Any, obj_spec: Any, want: Any) -> None:
    ref = kubernetes.read(pod(spec={"schedulingGroup": field} if field is not None else {}))
    if want is None:
        assert ref is None
        return
    assert ref is not None
    assert ref.form is Form.KUBERNETES
    if ref.error:
        assert want[4] in ref.error
        return
    spec = kubernetes.spec_of(None if obj_spec == "missing" else {"spec": obj_spec}, ref)
    assert (spec.gang, spec.min_member, spec.topology, spec.topology_required) == want[:4]
    assert want[4] in spec.error if want[4] else not spec.error


@pytest.mark.parametrize(
    ("labels", "annotations", "want"),
    [
        ({}, {}, None),
        ({kueue.LABEL: "train"}, {kueue.COUNT_ANNOTATION: "8"}, (8, "")),
        ({kueue.LABEL: "train"}, {}, (1, "no annotation kueue.x-k8s.io/pod-group-total-count")),
        ({kueue.LABEL: "train"}, {kueue.COUNT_ANNOTATION: "eight"}, (1, "integer >= 1")),
        ({kueue.LABEL: "train"}, {kueue.COUNT_ANNOTATION: "0"}, (1, "at least 1")),
    ],
    ids=["none", "eight", "no-count", "word", "zero"],
)
def test_kueue(labels: dict[str, str], annotations: dict[str, str], want: Any) -> None:
    ref = kueue.read(pod(labels, annotations))
    if want is None:
        assert ref is None
        return
    assert ref is not None
    assert ref.form is Form.KUEUE
    spec = kueue.spec_of(ref)
    assert spec.min_member == want[0]
    assert want[1] in spec.error if want[1] else not spec.error


@pytest.mark.parametrize(
    ("annotations", "obj", "want"),
    [
        ({}, None, None),
        ({"scheduling.k8s.io/group-name": "job"}, {"spec": {"minMember": 4}}, (4, "")),
        ({"scheduling.volcano.sh/group-name": "job"}, {"spec": {"minMember": 4}}, (4, "")),
        ({"scheduling.k8s.io/group-name": "job"}, {"spec": {}}, (1, "")),
        ({"scheduling.k8s.io/group-name": "job"}, {"spec": {"minMember": -1}}, (0, "at least 1")),
        ({"scheduling.k8s.io/group-name": "job"}, None, (1, "CRD installed?")),
    ],
    ids=["none", "k8s-annotation", "volcano-annotation", "default", "negative", "missing"],
)
def test_volcano(annotations: dict[str, str], obj: Any, want: Any) -> None:
    ref = volcano.read(pod(annotations=annotations))
    if want is None:
        assert ref is None
        return
    assert ref is not None
    assert ref.form is Form.VOLCANO
    assert ref.key == "ns/job"
    spec = volcano.spec_of(obj, ref)
    assert spec.min_member == want[0]
    assert want[1] in spec.error if want[1] else not spec.error


@pytest.mark.parametrize(
    ("annotations", "want"),
    [
        ({}, (None, False, "")),
        ({TOPOLOGY_ANNOTATION: "rack"}, ("rack", False, "")),
        ({TOPOLOGY_ANNOTATION: "rack", TOPOLOGY_POLICY_ANNOTATION: "Required"}, ("rack", True, "")),
        (
            {TOPOLOGY_ANNOTATION: "rack", TOPOLOGY_POLICY_ANNOTATION: "Always"},
            (None, False, "Required or Preferred"),
        ),
    ],
    ids=["none", "preferred", "required", "bad-policy"],
)
def test_topology_annotations_on_any_form(annotations: dict[str, str], want: Any) -> None:
    ref = kueue.read(pod({kueue.LABEL: "g"}, {kueue.COUNT_ANNOTATION: "2", **annotations}))
    assert ref is not None
    assert (ref.topology, ref.topology_required) == want[:2]
    assert want[2] in ref.error if want[2] else not ref.error


def test_the_first_form_wins_and_keys_are_namespaced() -> None:
    both = pod(
        {SP: "a", kueue.LABEL: "b"},
        {kueue.COUNT_ANNOTATION: "2"},
        {"schedulingGroup": {"podGroupName": "c"}},
    )
    ref = read_ref(both)
    assert ref == GroupRef(Form.KUBERNETES, "ns", "c")
    assert ref.key == "ns/c"
    assert read_ref(pod()) is None


@pytest.mark.parametrize(
    ("value", "want"),
    [(3, 3), ("3", 3), (" 4 ", 4), (0, 0), ("-1", 0), (True, 0), (2.5, 0), (None, 0)],
)
def test_parse_count(value: Any, want: int) -> None:
    count, error = parse_count(value, "x")
    assert count == want
    assert bool(error) == (want == 0)
