"""The Helm chart ships what the kustomize base ships (rendered by Helm's own library,
helm-python-sdk), its values do what values.yaml says, and each overlay changes what it says and
nothing else."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from deploy_helpers import (
    CHART,
    DEPLOY,
    NAMESPACE,
    OVERLAYS,
    Key,
    Obj,
    key,
    kustomize,
    needs_kubectl,
    one,
    pod_specs,
    render_chart,
)

import gpusched


def by_key(objs: list[Obj]) -> dict[Key, Obj]:
    out = {key(o): o for o in objs}
    assert len(out) == len(objs), "an object is defined twice"
    return out


def images(objs: list[Obj]) -> set[str]:
    return {c["image"] for _, spec in pod_specs(objs) for c in spec["containers"]}


@needs_kubectl
def test_the_chart_renders_the_kustomize_base() -> None:
    """Default values, release namespace gpusched-system: the same objects, field for field,
    except the Namespace (Helm's convention: `helm install --create-namespace`)."""
    base = by_key(kustomize(DEPLOY))
    chart = by_key(render_chart())
    assert base.pop(("Namespace", "", NAMESPACE))
    assert sorted(chart) == sorted(base)
    for k, obj in base.items():
        assert chart[k] == obj, k


def test_the_chart_follows_the_release_namespace() -> None:
    objs = render_chart(namespace="gpu")
    namespaces = {o["metadata"].get("namespace") for o in objs} - {None}
    assert namespaces == {"gpu"}
    config = one(objs, "ConfigMap", "gpusched-config")["data"]["config.yaml"]
    assert "gpusched-system" not in config
    policy = one(objs, "ValidatingAdmissionPolicy", "gpusched-agent-own-node")
    (condition,) = policy["spec"]["matchConditions"]
    assert "system:serviceaccount:gpu:gpusched-agent" in condition["expression"]
    for binding in (o for o in objs if o["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        assert {s["namespace"] for s in binding["subjects"]} == {"gpu"}


def _components(objs: list[Obj]) -> set[str]:
    names = {o["metadata"]["name"] for o in objs if o["kind"] in ("Deployment", "DaemonSet")}
    return {"webhook" if "webhook" in n else "agent" if "agent" in n
            else "controller" if "controller" in n else "scheduler"
            for n in names}  # fmt: skip


@pytest.mark.parametrize(("values", "components", "check"), [
    ({}, {"scheduler", "agent", "webhook"}, {}),
    ({"scheduler": {"enabled": False}}, {"agent", "webhook"}, {}),
    ({"agent": {"enabled": False}}, {"scheduler", "webhook"}, {}),
    ({"webhook": {"enabled": False}}, {"scheduler", "agent"}, {}),
    ({"controller": {"enabled": False}}, {"scheduler", "agent", "webhook"}, {}),
    ({"scheduler": {"replicas": 1, "leaderElect": False}}, {"scheduler", "agent", "webhook"},
     {"replicas": 1, "leader_elect": False}),
    ({"image": {"repository": "r.example/gs", "tag": "t1"}}, {"scheduler", "agent", "webhook"},
     {"images": {"r.example/gs:t1"}}),
    ({"agent": {"runtimeClassName": ""}}, {"scheduler", "agent", "webhook"},
     {"runtime_class": None}),
    ({"agent": {"ownNodePolicy": False}}, {"scheduler", "agent", "webhook"},
     {"policy": False}),
    ({"scheduler": {"nodeSelector": {"pool": "sys"}}}, {"scheduler", "agent", "webhook"},
     {"scheduler_node_selector": {"pool": "sys"}}),
    ({"agent": {"devicePluginDir": "/var/lib/k0s/kubelet/device-plugins"}},
     {"scheduler", "agent", "webhook"}, {"plugin_dir": "/var/lib/k0s/kubelet/device-plugins"}),
    ({"agent": {"nodeSelector": {"pool": "gpu"}}}, {"scheduler", "agent", "webhook"},
     {"agent_node_selector": {"pool": "gpu"}}),
])  # fmt: skip
def test_chart_values(values: dict[str, Any], components: set[str], check: dict[str, Any]) -> None:
    objs = render_chart(values)
    controller = values.get("controller", {}).get("enabled", True)  # the GPUWorkload controller
    assert _components(objs) == components | ({"controller"} if controller else set())
    kinds = {o["kind"] for o in objs}
    assert ("ValidatingAdmissionPolicy" in kinds) == check.get("policy", "agent" in components)
    assert images(objs) == check.get("images", {f"gpusched:{gpusched.__version__}"})
    if "scheduler" in components:
        deployment = one(objs, "Deployment", "gpusched")
        spec = deployment["spec"]["template"]["spec"]
        assert deployment["spec"]["replicas"] == check.get("replicas", 2)
        command = spec["containers"][0]["command"]
        assert ("--leader-elect" in command) == check.get("leader_elect", True)
        assert spec.get("nodeSelector") == check.get("scheduler_node_selector")
    if "agent" in components:
        agent = one(objs, "DaemonSet", "gpusched-agent")["spec"]["template"]["spec"]
        plain = one(objs, "DaemonSet", "gpusched-agent-no-device-plugin")["spec"]["template"]
        for pod in (agent, plain["spec"]):
            assert pod.get("runtimeClassName") == check.get("runtime_class", "nvidia")
        (volume,) = [v for v in agent["volumes"] if v["name"] == "device-plugins"]
        plugin_dir = check.get("plugin_dir", "/var/lib/kubelet/device-plugins")
        assert volume["hostPath"]["path"] == plugin_dir
        extra = check.get("agent_node_selector", {})
        assert agent.get("nodeSelector") == (extra or None)
        assert plain["spec"]["nodeSelector"] == {"gpusched.io/device-plugin": "false", **extra}


@pytest.mark.parametrize(("values", "error"), [
    ({"scheduler": {"replica": 1}}, "additional properties 'replica' not allowed"),
    ({"scheduler": {"replicas": 0}}, "scheduler/replicas"),
    ({"image": {"pullPolicy": "Sometimes"}}, "image/pullPolicy"),
    ({"scheduler": {"replicas": 2, "leaderElect": False}}, "needs scheduler.leaderElect"),
])  # fmt: skip
def test_chart_refuses_bad_values(values: dict[str, Any], error: str) -> None:
    helm = pytest.importorskip("helm_python", reason="helm-python-sdk (Helm's library) absent")
    with pytest.raises(helm.HelmError, match=re.escape(error)):
        render_chart(values)


# ------------------------------------------------------------------ overlays


def _webhook_keys() -> set[Key]:
    return set(by_key(kustomize(DEPLOY / "webhook")))


@needs_kubectl
def test_every_overlay_builds_and_keeps_one_image() -> None:
    assert {"dev", "no-webhook"} <= set(OVERLAYS)
    for overlay in OVERLAYS:
        text = (DEPLOY / "overlays" / overlay / "kustomization.yaml").read_text()
        assert "../..\n" not in text, (
            f"overlays/{overlay} names deploy/ as its base, which kustomize refuses (the base's "
            "folder holds the overlay): list ../../crds, ../../scheduler, ... and namespace.yaml"
        )
        objs = kustomize(DEPLOY / "overlays" / overlay)
        assert len(images(objs)) == 1, overlay
        assert ("Namespace", "", NAMESPACE) in by_key(objs)


@needs_kubectl
def test_the_dev_overlay() -> None:
    base = by_key(kustomize(DEPLOY))
    dev = by_key(kustomize(DEPLOY / "overlays" / "dev"))
    assert sorted(dev) == sorted(base)
    assert images(list(dev.values())) == {"gpusched:dev"}
    deployment = dev[("Deployment", NAMESPACE, "gpusched")]
    assert deployment["spec"]["replicas"] == 1
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert "--leader-elect" not in container["command"]
    requests = container["resources"]["requests"]
    base_container = base[("Deployment", NAMESPACE, "gpusched")]["spec"]["template"]["spec"]
    assert requests != base_container["containers"][0]["resources"]["requests"]
    for name in ("gpusched-agent", "gpusched-agent-no-device-plugin"):
        (agent,) = dev[("DaemonSet", NAMESPACE, name)]["spec"]["template"]["spec"]["containers"]
        assert agent["resources"]["requests"] == {"cpu": "10m", "memory": "64Mi"}
    changed = {k for k in base if base[k] != dev[k] and k[0] not in ("Deployment", "DaemonSet")}
    assert not changed, "the dev overlay changes only workloads"


@needs_kubectl
def test_the_no_webhook_overlay_is_the_base_without_the_webhook() -> None:
    base = by_key(kustomize(DEPLOY))
    no_webhook = by_key(kustomize(DEPLOY / "overlays" / "no-webhook"))
    webhook = _webhook_keys()
    assert webhook
    assert {k: v for k, v in base.items() if k not in webhook} == no_webhook


def test_helm_lint_is_clean() -> None:
    helm = pytest.importorskip("helm_python", reason="helm-python-sdk (Helm's library) absent")
    report = helm.lint(str(CHART), strict=True, namespace=NAMESPACE, kube_version="v1.30.0")
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_the_packaged_chart_is_self_contained(tmp_path: Path) -> None:
    """crds/ and files/webhook are links into deploy/: `helm package` copies what they point at,
    so the archive installs the same objects from anywhere."""
    helm = pytest.importorskip("helm_python", reason="helm-python-sdk (Helm's library) absent")
    chart = helm.Chart.load(str(CHART))
    archive = helm.Chart.load_archive(Path(chart.save(str(tmp_path))).read_bytes())
    assert [c["data"] for c in archive.crds] == [c["data"] for c in chart.crds]
    options = {"name": "gpusched", "namespace": NAMESPACE}
    assert archive.render(**options) == chart.render(**options)


@needs_kubectl
def test_every_container_of_the_install_is_read_only_and_unprivileged() -> None:
    objs = kustomize(DEPLOY)
    assert images(objs) == {f"gpusched:{gpusched.__version__}"}
    for workload, spec in pod_specs(objs):
        name = workload["metadata"]["name"]
        for container in spec["containers"]:
            security = container["securityContext"]
            assert security["readOnlyRootFilesystem"] is True, name
            assert security["allowPrivilegeEscalation"] is False, name
            assert not security.get("privileged"), name
        if name != "gpusched-agent":  # with the device plugin: the kubelet's directory is root's
            assert spec["securityContext"]["runAsNonRoot"] is True, name


@needs_kubectl
@pytest.mark.parametrize("folder", ["", *(f"overlays/{o}" for o in OVERLAYS)])
def test_every_command_parses_with_gpusched_cli(folder: str) -> None:
    """What the manifests run is what `gpusched` accepts (flags renamed in the CLI fail here,
    not in a crash-looping pod)."""
    from gpusched.cli import _parser

    for workload, spec in pod_specs(kustomize(DEPLOY / folder)):
        for container in spec["containers"]:
            program, *argv = container["command"] + container.get("args", [])
            assert program == "gpusched", workload["metadata"]["name"]
            try:
                _parser().parse_args(argv)
            except SystemExit:
                pytest.fail(f"{workload['metadata']['name']}: `gpusched {' '.join(argv)}` "
                            "does not parse")  # fmt: skip
