"""``gpusched run``'s pure part (gpusched/runner.py): options to manifests, every option and the
gang, the requests checked by the scheduler's own reader, bad input refused with a message
(``gpusched run`` exits 2 before contacting any cluster), durations."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpusched.cli import main
from gpusched.gpu_requests import read_gpu_request
from gpusched.runner import (
    DEFAULT_IMAGE,
    RunError,
    RunOptions,
    build_plan,
    kubeconfig_namespace,
    parse_duration,
    parse_node_selector,
    parse_toleration,
)

LABELS = {"gpusched.io/run": "job", "app.kubernetes.io/managed-by": "gpusched-run"}


def _opts(**kw: Any) -> RunOptions:
    return RunOptions(name="job", **kw)


# (options, the pod's limits, the pod's annotations)
PODS: list[tuple[RunOptions, dict[str, str], dict[str, str]]] = [
    (_opts(), {"nvidia.com/gpu": "1"}, {}),
    (_opts(gpus=4), {"nvidia.com/gpu": "4"}, {}),
    (
        _opts(gpus=2, vram="16Gi"),
        {"gpusched.io/gpu": "2", "gpusched.io/vram": "16Gi"},
        {},
    ),
    (
        _opts(gpus=1, vram="40Gi", exclusive=True),
        {"gpusched.io/gpu": "1", "gpusched.io/vram": "40Gi"},
        {"gpusched.io/exclusive": "true"},
    ),
    (_opts(gpu_ids="0,2"), {"nvidia.com/gpu": "2"}, {"gpusched.io/gpu-ids-request": "0,2"}),
    (
        _opts(prefer_node="dgx-h100-003", priority="1"),
        {"nvidia.com/gpu": "1"},
        {"gpusched.io/preferred-node": "dgx-h100-003", "gpusched.io/priority": "1"},
    ),
    (
        _opts(annotations=(("sim.gpusched.io/duration", "90s"),)),
        {"nvidia.com/gpu": "1"},
        {"sim.gpusched.io/duration": "90s"},
    ),
]


@pytest.mark.parametrize(("opts", "limits", "annotations"), PODS)
def test_one_pod_written_the_documented_way(
    opts: RunOptions, limits: dict[str, str], annotations: dict[str, str]
) -> None:
    plan = build_plan(opts)
    assert plan.pod_group is None
    [pod] = plan.pods
    assert pod["metadata"]["name"] == "job"
    assert pod["metadata"]["namespace"] == "default"
    assert pod["metadata"]["labels"] == LABELS
    assert pod["metadata"].get("annotations", {}) == annotations
    assert pod["spec"]["schedulerName"] == "gpusched"
    assert pod["spec"]["restartPolicy"] == "Never"
    [container] = pod["spec"]["containers"]
    assert container["image"] == DEFAULT_IMAGE
    assert container["resources"] == {"limits": limits}
    assert read_gpu_request(pod) is not None  # what the scheduler reads


def test_command_image_namespace() -> None:
    plan = build_plan(
        _opts(command=("python", "train.py", "--lr", "3e-4"), image="me/train:1", namespace="ml")
    )
    container = plan.pods[0]["spec"]["containers"][0]
    assert container["command"] == ["python", "train.py", "--lr", "3e-4"]
    assert container["image"] == "me/train:1"
    assert plan.pods[0]["metadata"]["namespace"] == "ml"
    assert "command" not in build_plan(_opts()).pods[0]["spec"]["containers"][0]


def test_a_gang_is_n_pods_and_their_podgroup() -> None:
    plan = build_plan(_opts(gang=3, gpus=8, priority="0"))
    assert plan.pod_names == ["job-0", "job-1", "job-2"]
    for pod in plan.pods:
        assert pod["metadata"]["labels"] == {**LABELS, "scheduling.x-k8s.io/pod-group": "job"}
        assert pod["metadata"]["annotations"] == {"gpusched.io/priority": "0"}
        assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    assert plan.pod_group == {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "job", "namespace": "default", "labels": LABELS},
        "spec": {"minMember": 3},
    }


# (options, what the message says)
REFUSED: list[tuple[RunOptions, str]] = [
    (_opts(gpus=0), "--gpus 0: ask for at least 1 GPU"),
    (_opts(gpus=-2), "--gpus -2: ask for at least 1 GPU"),
    (_opts(vram="16Gi"), "--vram is VRAM per GPU: give --gpus N too"),
    (_opts(gpus=1, vram="lots"), '--vram (gpusched.io/vram): "lots" is not a quantity'),
    (_opts(gpus=1, vram="16"), '"16" has no unit, so it means 16 bytes'),
    (_opts(gpu_ids="0,x"), '--gpu-ids (gpusched.io/gpu-ids-request): "0,x" must list GPU'),
    (_opts(gpu_ids="1,1"), '"1,1" lists GPU 1 twice'),
    (_opts(gpu_ids="0,2", gpus=3), '"0,2" lists 2 GPU(s) but the pod asks for 3'),
    (_opts(priority="7"), '--priority (gpusched.io/priority)="7" is not a priority'),
    (_opts(prefer_node="Node A"), '"Node A" is not a valid node name'),
    (RunOptions(name="My_Job"), "--name 'My_Job' is not a valid name"),
    (_opts(namespace="a/b"), "--namespace 'a/b' is not a valid name"),
    (_opts(gang=0), "--gang 0: a gang has at least 1 pod"),
    (_opts(image=" "), "--image is empty"),
    (
        _opts(priority="1", annotations=(("gpusched.io/priority", "2"),)),
        "--annotation gpusched.io/priority=2 contradicts the flag",
    ),
]


@pytest.mark.parametrize(("opts", "message"), REFUSED)
def test_bad_options_are_refused_with_what_to_fix(opts: RunOptions, message: str) -> None:
    with pytest.raises(RunError) as refused:
        build_plan(opts)
    assert message in str(refused.value)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30m", 1800.0),
        ("90s", 90.0),
        ("1h30m", 5400.0),
        ("250ms", 0.25),
        ("1.5h", 5400.0),
        ("0", 0.0),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["30", "ten", "5d", "", "m", "-3s", "1h 30m"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(RunError, match="is not a duration: write a number with a unit"):
        parse_duration(text)


# (arguments, what stderr says): exit status 2, and no cluster is contacted (the kubeconfig
# does not exist).
USAGE: list[tuple[list[str], str]] = [
    (["--gpus", "0"], "gpusched: run: --gpus 0: ask for at least 1 GPU"),
    (["--vram", "16Gi"], "gpusched: run: --vram is VRAM per GPU"),
    (["--gpu-ids", "a"], '"a" must list GPU indices'),
    (["--timeout", "3days"], "--timeout '3days' is not a duration"),
    (["--annotation", "novalue"], "--annotation 'novalue': write KEY=VALUE"),
    (["--node-selector", "pool"], "--node-selector 'pool': write KEY=VALUE"),
    (["--toleration", "gpu:NoWay"], "--toleration 'gpu:NoWay': write KEY[=VALUE][:EFFECT]"),
    (["--scheduler-name", ""], "--scheduler-name '': name a gpusched profile"),
]


@pytest.mark.parametrize(
    ("text", "toleration"),
    [
        ("nvidia.com/gpu", {"key": "nvidia.com/gpu", "operator": "Exists"}),
        (
            "nvidia.com/gpu=present:NoSchedule",
            {
                "key": "nvidia.com/gpu",
                "operator": "Equal",
                "value": "present",
                "effect": "NoSchedule",
            },
        ),
        ("dedicated:NoExecute", {"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}),
        ("team=ml", {"key": "team", "operator": "Equal", "value": "ml"}),
    ],
)
def test_tolerations_are_written_as_taints_are(text: str, toleration: dict[str, str]) -> None:
    assert parse_toleration(text) == toleration


def test_profile_selector_and_tolerations_reach_the_pod_spec() -> None:
    plan = build_plan(
        _opts(
            scheduler_name="gpusched-spread",
            node_selector=(parse_node_selector("pool=a100"),),
            tolerations=(parse_toleration("nvidia.com/gpu=present:NoSchedule"),),
        )
    )
    spec = plan.pods[0]["spec"]
    assert spec["schedulerName"] == "gpusched-spread"
    assert spec["nodeSelector"] == {"pool": "a100"}
    assert spec["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}
    ]
    assert "nodeSelector" not in build_plan(_opts()).pods[0]["spec"]


@pytest.mark.parametrize(("args", "message"), USAGE)
def test_the_command_exits_2_on_bad_input(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", "--name", "job", "--kubeconfig", "/nonexistent/kc", *args, "--", "true"]
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def _kubeconfig(path: Path, current: str, namespaces: dict[str, str | None]) -> str:
    contexts = [
        {"name": n, "context": {"cluster": "c", "user": "u", **({"namespace": ns} if ns else {})}}
        for n, ns in namespaces.items()
    ]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": contexts,
        "current-context": current,
    }
    path.write_text(yaml.safe_dump(config))
    return str(path)


@pytest.mark.parametrize(
    ("current", "context", "expected"),
    [("ml", None, "ml"), ("ml", "team", "team"), ("bare", None, "default"), ("ml", "nope", "ml")],
)
def test_the_namespace_defaults_to_the_kubeconfig_contexts(
    tmp_path: Path, current: str, context: str | None, expected: str
) -> None:
    kc = _kubeconfig(tmp_path / "kc", current, {"ml": "ml", "team": "team", "bare": None})
    assert kubeconfig_namespace(kc, context) == expected
    assert kubeconfig_namespace(str(tmp_path / "missing"), None) == "default"
