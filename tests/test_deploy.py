"""The sources in deploy/ read without kubectl: the shipped configuration loads, the scheduler and
agent manifests say what the issue asks (probes, security, GPU nodes, host paths), the agent's
RBAC and admission policy agree, the overlays' namespace copies and the Dockerfile are sound.
Built and rendered manifests are checked in tests/deploy/."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

import gpusched
from gpusched.framework import parse_config

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
COMPONENTS = ("scheduler", "agent")
"""The components whose folders this helper owns (deploy/webhook/ is checked by its own tests)."""


def documents(*folders: str) -> list[dict[str, Any]]:
    """The objects of the YAML files in ``folders`` of deploy/ (every component by default)."""
    docs = []
    for folder in folders or COMPONENTS:
        for path in sorted((DEPLOY / folder).glob("*.yaml")):
            if path.name != "kustomization.yaml":
                docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def find(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    return doc


AGENT = "gpusched-agent"  # with the device plugin (the default)
PLAIN = "gpusched-agent-no-device-plugin"  # on nodes labelled gpusched.io/device-plugin=false


def test_every_manifest_has_kind_name_and_namespace_where_due() -> None:
    cluster_scoped = {"ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy",
                      "ValidatingAdmissionPolicyBinding"}  # fmt: skip
    for doc in documents():
        assert doc["metadata"]["name"]
        assert ("namespace" in doc["metadata"]) == (doc["kind"] not in cluster_scoped), doc


def test_the_shipped_scheduler_configuration_is_valid() -> None:
    config_map = find(documents("scheduler"), "ConfigMap")
    config = parse_config(config_map["data"]["config.yaml"], source="deploy/scheduler/config.yaml")
    assert config.profiles[0].scheduler_name == "gpusched"
    assert config.leader_election.leader_elect
    assert config.reservations.namespace == "gpusched-system"


def test_the_scheduler_runs_two_leader_elected_replicas_with_probes() -> None:
    # /readyz is 200 on a standby too (see gpusched.cli), so a rolling update of the
    # leader-elected replicas can proceed; test_leader_election_e2e.py checks it on processes.
    docs = documents("scheduler")
    deployment = find(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert "--leader-elect" in container["command"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["resources"]["requests"]
    affinity = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    (term,) = affinity["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    pdb = find(docs, "PodDisruptionBudget")
    assert pdb["spec"]["selector"] == deployment["spec"]["selector"]
    assert pdb["spec"]["maxUnavailable"] == 1
    service = find(docs, "Service")
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 10259, "targetPort": "metrics"}]


@pytest.mark.parametrize(("component", "kind", "name", "root"), [
    ("scheduler", "Deployment", "gpusched", False),
    ("agent", "DaemonSet", AGENT, True),  # the kubelet's device-plugin directory is root's
    ("agent", "DaemonSet", PLAIN, False),
])  # fmt: skip
def test_containers_are_locked_down(component: str, kind: str, name: str, root: bool) -> None:
    spec = find(documents(component), kind, name)["spec"]["template"]["spec"]
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["securityContext"].get("runAsNonRoot", False) is not root
    assert (spec["securityContext"]["runAsUser"] == 0) is root
    for container in spec["containers"]:
        security = container["securityContext"]
        assert security["readOnlyRootFilesystem"] is True
        assert security["allowPrivilegeEscalation"] is False
        assert security["capabilities"] == {"drop": ["ALL"]}
        assert "privileged" not in security
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        tmp = next(v for v in spec["volumes"] if v["name"] == mounts["/tmp"])
        assert tmp == {"name": mounts["/tmp"], "emptyDir": {}}
        host_paths = {v["name"] for v in spec["volumes"] if "hostPath" in v}
        assert host_paths == ({"device-plugins"} if root else set())


@pytest.mark.parametrize("name", [AGENT, PLAIN])
def test_the_agents_run_on_gpu_nodes_with_the_driver(name: str) -> None:
    spec = find(documents("agent"), "DaemonSet", name)["spec"]["template"]["spec"]
    assert spec["priorityClassName"] == "system-node-critical"
    assert spec["runtimeClassName"] == "nvidia"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec[
        "tolerations"
    ]
    (container,) = spec["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert "nvidia.com/gpu" not in str(container["resources"])  # takes no GPU from workloads
    assert container["command"][:2] == ["gpusched", "agent"]
    assert ("--no-device-plugin" in container["command"]) is (name == PLAIN)
    assert container["ports"] == [{"name": "metrics", "containerPort": 10260}]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"


def test_each_gpu_node_runs_one_agent() -> None:
    """The agent with its device plugin runs on GPU nodes (GFD's or NFD's label) unless they are
    labelled gpusched.io/device-plugin=false; the agent without it exactly on those."""
    docs = documents("agent")
    agent = find(docs, "DaemonSet", AGENT)["spec"]["template"]["spec"]
    terms = agent["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    gpu_keys = set()
    for term in terms["nodeSelectorTerms"]:
        by_key = {e["key"]: e for e in term["matchExpressions"]}
        opt_out = by_key.pop("gpusched.io/device-plugin")
        assert (opt_out["operator"], opt_out["values"]) == ("NotIn", ["false"])
        ((key, expression),) = by_key.items()
        assert expression["operator"] == "In"
        assert expression["values"] == ["true"]
        gpu_keys.add(key)
    assert gpu_keys == {"nvidia.com/gpu.present", "feature.node.kubernetes.io/pci-10de.present"}
    volume = next(v for v in agent["volumes"] if v["name"] == "device-plugins")
    assert volume["hostPath"] == {"path": "/var/lib/kubelet/device-plugins", "type": "Directory"}
    (container,) = agent["containers"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["device-plugins"] == "/var/lib/kubelet/device-plugins"
    plain = find(docs, "DaemonSet", PLAIN)["spec"]["template"]["spec"]
    assert plain["nodeSelector"] == {"gpusched.io/device-plugin": "false"}
    assert "affinity" not in plain


def test_the_two_agent_daemonsets_differ_only_where_they_must() -> None:
    docs = documents("agent")
    agent_pod = find(docs, "DaemonSet", AGENT)["spec"]["template"]["spec"]
    plain_pod = find(docs, "DaemonSet", PLAIN)["spec"]["template"]["spec"]
    (agent_c,), (plain_c,) = agent_pod["containers"], plain_pod["containers"]
    assert plain_c["command"] == [*agent_c["command"][:2], "--no-device-plugin",
                                  *agent_c["command"][2:]]  # fmt: skip
    for field in ("command", "volumeMounts"):
        agent_c.pop(field)
        plain_c.pop(field)
    assert agent_c == plain_c
    for field in ("affinity", "nodeSelector", "securityContext", "volumes", "containers"):
        agent_pod.pop(field, None)
        plain_pod.pop(field, None)
    assert agent_pod == plain_pod


AGENT_RULES = {
    # (group, resource): verbs. What the agent does and nothing else (brief of issue 12).
    ("gpusched.io", "gpunodeinventories"): {"get", "list", "watch", "create", "update", "patch"},
    ("gpusched.io", "gpunodeinventories/status"): {"update", "patch"},
    ("", "nodes"): {"get", "patch"},
    ("", "pods"): {"get", "list", "watch", "patch"},
}
WRITES = {"create", "update", "patch", "delete", "deletecollection"}


def test_the_agent_rbac_grants_exactly_its_job() -> None:
    docs = documents("agent")
    granted: dict[tuple[str, str], set[str]] = {}
    for rule in find(docs, "ClusterRole")["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted.setdefault((group, resource), set()).update(rule["verbs"])
    assert granted == AGENT_RULES
    account = find(docs, "ServiceAccount")["metadata"]
    binding = find(docs, "ClusterRoleBinding")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["name"], "namespace": account["namespace"]}
    ]
    for name in (AGENT, PLAIN):
        spec = find(docs, "DaemonSet", name)["spec"]["template"]["spec"]
        assert spec["serviceAccountName"] == account["name"]


def test_the_own_node_policy_covers_every_write_of_the_agent() -> None:
    docs = documents("agent")
    policy = find(docs, "ValidatingAdmissionPolicy")
    binding = find(docs, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"] == {"policyName": policy["metadata"]["name"],
                               "validationActions": ["Deny"]}  # fmt: skip
    assert policy["spec"]["failurePolicy"] == "Fail"
    account = find(docs, "ServiceAccount")["metadata"]
    user = f"system:serviceaccount:{account['namespace']}:{account['name']}"
    (condition,) = policy["spec"]["matchConditions"]
    assert f"request.userInfo.username == '{user}'" == condition["expression"]
    matched = {
        (group, resource)
        for rule in policy["spec"]["matchConstraints"]["resourceRules"]
        if {"CREATE", "UPDATE"} <= set(rule["operations"])
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    written = {gr for gr, verbs in AGENT_RULES.items() if verbs & WRITES}
    assert written <= matched
    # The key under which the API server gives a bound token's node (k8s.io/apiserver's
    # serviceaccount.NodeNameKey), read once as variables.node and required by every validation.
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    assert "request.userInfo.extra['authentication.kubernetes.io/node-name']" in variables["node"]
    scoped = [v for v in policy["spec"]["validations"] if "variables.node" in v["expression"]]
    assert len(scoped) == 3


@pytest.mark.parametrize("overlay", ["dev", "no-webhook"])
def test_overlay_namespace_copies_equal_deploy_namespace(overlay: str) -> None:
    copy = DEPLOY / "overlays" / overlay / "namespace.yaml"
    assert copy.read_text() == (DEPLOY / "namespace.yaml").read_text()


def test_every_crd_is_in_the_kustomization_and_the_package() -> None:
    kustomization = yaml.safe_load((DEPLOY / "crds" / "Kustomization").read_text())
    package = DEPLOY.parent / "gpusched" / "crds"
    crds = sorted((DEPLOY / "crds").glob("*.yaml"))
    assert sorted(kustomization["resources"]) == [p.name for p in crds]
    for path in crds:
        assert (package / path.name).read_bytes() == path.read_bytes()
        assert yaml.safe_load(path.read_text())["kind"] == "CustomResourceDefinition"
    assert "crds" in yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())["resources"]


def test_one_image_and_tag_everywhere() -> None:
    chart = yaml.safe_load((DEPLOY / "helm" / "gpusched" / "Chart.yaml").read_text())
    assert chart["appVersion"] == chart["version"] == gpusched.__version__
    for _, spec in ((d, d["spec"]["template"]["spec"]) for d in documents()
                    if d["kind"] in ("Deployment", "DaemonSet")):  # fmt: skip
        for container in spec["containers"]:
            assert container["image"] == f"gpusched:{gpusched.__version__}"


# ------------------------------------------------------------------ the Dockerfile


def _stages() -> list[list[tuple[str, str]]]:
    """The Dockerfile's stages as lists of ``(INSTRUCTION, arguments)``, continuations joined."""
    text = re.sub(r"\\\n", " ", (DEPLOY / "Dockerfile").read_text())
    stages: list[list[tuple[str, str]]] = [[]]
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        word, _, rest = line.strip().partition(" ")
        if word.upper() == "FROM" and stages[-1] and any(w == "FROM" for w, _ in stages[-1]):
            stages.append([])
        stages[-1].append((word.upper(), rest.strip()))
    return stages


def test_the_image_runs_as_a_numeric_non_root_user() -> None:
    final = _stages()[-1]
    users = [args for word, args in final if word == "USER"]
    assert users, "the final stage sets no USER"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit()
    assert int(uid) != 0
    assert not gid or (gid.isdigit() and int(gid) != 0)
    assert ("ENTRYPOINT", '["gpusched"]') in final
    env = " ".join(args for word, args in final if word == "ENV")
    assert "HOME=/tmp" in env  # nothing writes outside /tmp (an emptyDir in the manifests)
    assert "PYTHONDONTWRITEBYTECODE=1" in env


def test_the_image_is_built_with_pip_install_in_a_builder_stage() -> None:
    stages = _stages()
    assert len(stages) == 2
    builder, final = stages
    assert any(w == "RUN" and "pip install ." in args for w, args in builder)
    assert not any(w == "RUN" for w, _ in final), "the final stage only copies the venv"
    assert any(w == "COPY" and args.startswith("--from=builder") for w, args in final)
    for word, args in builder + final:
        assert word != "ADD", "ADD fetches URLs and unpacks archives: COPY only"
        assert "http://" not in args
        assert "https://" not in args
        if word == "COPY" and not args.startswith("--from"):
            *sources, _ = args.split()
            for source in sources:
                assert (DEPLOY.parent / source).exists(), source


def test_the_image_context_builds_the_whole_package(tmp_path: Path) -> None:
    """What the builder stage COPYs is enough to build gpusched with every module and CRD (the
    setuptools build `pip install .` runs), so the image has what the editable install has."""
    builder = _stages()[0]
    for word, args in builder:
        if word == "COPY":
            *sources, _ = args.split()
            for source in sources:
                src, dst = DEPLOY.parent / source, tmp_path / source
                if src.is_dir():
                    shutil.copytree(src, dst, symlinks=True, ignore=shutil.ignore_patterns(
                        "__pycache__"))  # fmt: skip
                else:
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy(src, dst)
    out = subprocess.run(
        [sys.executable, "-c", "import setuptools; setuptools.setup()", "-q", "build_py",
         "-d", str(tmp_path / "lib")],
        cwd=tmp_path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    lib = tmp_path / "lib" / "gpusched"
    for folder, installed in (("gpusched", lib), ("plugins", lib / "plugins"),
                              ("topology", lib / "topology")):  # fmt: skip
        for module in (DEPLOY.parent / folder).rglob("*.py"):
            relative = module.relative_to(DEPLOY.parent / folder)
            if relative.parts[0] != "crds":
                assert (installed / relative).is_file(), f"{folder}/{relative} is not packaged"
    crds = sorted(p.name for p in (DEPLOY / "crds").glob("*.yaml"))
    assert sorted(p.name for p in (lib / "crds").iterdir()) == crds
