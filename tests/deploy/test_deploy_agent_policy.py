"""The agent's ValidatingAdmissionPolicy (deploy/agent/policy.yaml), evaluated with a CEL
interpreter (cel-python) the way the API server applies it: matchConditions, then variables in
order, then every validation; a request is denied with the messages of the validations that are
false. Table: each agent writes its own Node, GPUNodeInventory and pods, and nothing else."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from deploy_helpers import DEPLOY, one, render_chart

celpy = pytest.importorskip("celpy", reason="cel-python is not installed")

NODE_KEY = "authentication.kubernetes.io/node-name"
AGENT = "system:serviceaccount:gpusched-system:gpusched-agent"
SCHEDULER = "system:serviceaccount:gpusched-system:gpusched"


def admit(policy: dict[str, Any], request: dict[str, Any], obj: Any) -> list[str]:
    """The messages a policy denies ``request`` with; [] when it is admitted. ``obj`` is the
    object, or ``(object, oldObject)`` for an update that changes it."""
    env = celpy.Environment()
    spec = policy["spec"]

    def run(expression: str, activation: dict[str, Any]) -> Any:
        return env.program(env.compile(expression)).evaluate(activation)

    new, old = obj if isinstance(obj, tuple) else (obj, obj)
    if request["operation"] == "CREATE":
        old = None
    if request["operation"] == "DELETE":
        new = None
    activation: dict[str, Any] = {
        "request": celpy.json_to_cel(request),
        "object": celpy.json_to_cel(new),
        "oldObject": celpy.json_to_cel(old),
    }
    if not all(run(c["expression"], activation) for c in spec.get("matchConditions", [])):
        return []
    variables: dict[Any, Any] = {}
    for variable in spec.get("variables", []):
        activation["variables"] = celpy.celtypes.MapType(variables)
        variables[celpy.celtypes.StringType(variable["name"])] = run(
            variable["expression"], activation
        )
    activation["variables"] = celpy.celtypes.MapType(variables)
    denied = []
    for validation in spec["validations"]:
        if not run(validation["expression"], activation):
            if "messageExpression" in validation:
                denied.append(str(run(validation["messageExpression"], activation)))
            else:
                denied.append(" ".join(validation["message"].split()))
    return denied


def request(user: str, node: str | None, operation: str, resource: str) -> dict[str, Any]:
    plural, _, sub = resource.partition("/")
    group = "gpusched.io" if plural == "gpunodeinventories" else ""
    return {
        "operation": operation,
        "userInfo": {
            "username": user,
            "extra": {NODE_KEY: [node]} if node is not None else {},
        },
        "resource": {"group": group, "version": "v1", "resource": plural},
        "subResource": sub,
    }


def named(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}}


def labelled(
    name: str, labels: dict[str, str], old: dict[str, str] | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A Node update: ``(new, old)`` with these labels (``old``: none unless given)."""
    return (
        {"metadata": {"name": name, "labels": labels}},
        {"metadata": {"name": name, "labels": old or {}}},
    )


def pod_on(node: str | None) -> dict[str, Any]:
    return {"metadata": {"name": "p"}, "spec": {"nodeName": node} if node else {}}


CASES = [
    # (user, token's node, operation, resource, object, denied with)
    (AGENT, "n1", "UPDATE", "nodes", named("n1"), None),
    (AGENT, "n1", "UPDATE", "nodes", named("n2"), "may only write the nodes named n1"),
    (AGENT, "n1", "CREATE", "gpunodeinventories", named("n1"), None),
    (AGENT, "n1", "CREATE", "gpunodeinventories", named("n2"),
     "may only write the gpunodeinventories named n1"),
    (AGENT, "n1", "UPDATE", "gpunodeinventories/status", named("n1"), None),
    (AGENT, "n1", "UPDATE", "gpunodeinventories/status", named("n2"),
     "may only write the gpunodeinventories named n1"),
    (AGENT, "n1", "DELETE", "gpunodeinventories", named("n2"),
     "may only write the gpunodeinventories named n1"),
    (AGENT, "n1", "UPDATE", "pods", pod_on("n1"), None),
    (AGENT, "n1", "UPDATE", "pods", pod_on("n2"), "may only write pods bound to that node"),
    (AGENT, "n1", "UPDATE", "pods", pod_on(None), "may only write pods bound to that node"),
    (AGENT, None, "UPDATE", "nodes", named("n1"), "token carries no node name"),
    (AGENT, None, "UPDATE", "pods", pod_on("n1"), "token carries no node name"),
    (AGENT, "n1", "UPDATE", "nodes", labelled("n1", {"gpusched.io/gpu-count": "8"}), None),
    (AGENT, "n1", "UPDATE", "nodes", labelled("n1", {"gpusched.io/device-plugin": "true"}),
     "may not change its node's gpusched.io/device-plugin label"),
    (AGENT, "n1", "UPDATE", "nodes", labelled("n1", {}, old={"gpusched.io/device-plugin": "true"}),
     "may not change its node's gpusched.io/device-plugin label"),
    (AGENT, "n1", "UPDATE", "nodes",
     labelled("n1", {"gpusched.io/device-plugin": "true", "a": "b"},
              old={"gpusched.io/device-plugin": "true"}), None),
    (SCHEDULER, None, "UPDATE", "nodes", named("n2"), None),  # not the agent: not matched
    ("kubernetes-admin", None, "UPDATE", "pods", pod_on("n2"), None),
]  # fmt: skip


@pytest.mark.parametrize(("user", "node", "operation", "resource", "obj", "denied"), CASES)
def test_each_agent_writes_only_its_own_node(
    user: str, node: str | None, operation: str, resource: str, obj: Any, denied: str | None,
) -> None:  # fmt: skip
    docs = list(yaml.safe_load_all((DEPLOY / "agent" / "policy.yaml").read_text()))
    policy = one(docs, "ValidatingAdmissionPolicy", "gpusched-agent-own-node")
    messages = admit(policy, request(user, node, operation, resource), obj)
    if denied is None:
        assert messages == []
    else:
        assert len(messages) == 1
        assert denied in messages[0]


def test_the_chart_policy_names_the_release_namespace_agent() -> None:
    policy = one(render_chart(namespace="gpu"), "ValidatingAdmissionPolicy",
                 "gpusched-agent-own-node")  # fmt: skip
    agent = "system:serviceaccount:gpu:gpusched-agent"
    assert admit(policy, request(agent, "n1", "UPDATE", "nodes"), named("n2"))
    assert not admit(policy, request(AGENT, "n1", "UPDATE", "nodes"), named("n2"))
