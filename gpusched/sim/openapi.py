"""The OpenAPI v3 documents kubectl reads before ``apply``.

kubectl asks ``/openapi/v3`` for the index of group-version documents and, before sending an
apply, looks in the resource's document for a PATCH operation tagged with the kind's
``x-kubernetes-group-version-kind`` that accepts the ``fieldValidation`` query parameter; when
it finds one it leaves validation to the server (``fieldValidation=Strict``) instead of
validating against schemas itself. These documents carry exactly that: the paths and
operations of every served resource, with their parameters. Schemas of built-in kinds are not
served (kubectl then builds strategic merge patches from its compiled-in types); custom
resources get their CRD's ``openAPIV3Schema``.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from gpusched.sim.registry import Registry, Resource

__all__ = ["group_version_document", "index"]

_QUERY_PARAMS = {
    "patch": ("dryRun", "fieldManager", "fieldValidation", "force", "pretty"),
    "put": ("dryRun", "fieldManager", "fieldValidation", "pretty"),
    "post": ("dryRun", "fieldManager", "fieldValidation", "pretty"),
    "delete": ("dryRun", "gracePeriodSeconds", "orphanDependents", "propagationPolicy", "pretty"),
    "get": ("pretty",),
}
_LIST_PARAMS = (
    "allowWatchBookmarks",
    "continue",
    "fieldSelector",
    "labelSelector",
    "limit",
    "resourceVersion",
    "resourceVersionMatch",
    "sendInitialEvents",
    "timeoutSeconds",
    "watch",
)


def _key(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def _params(names: tuple[str, ...]) -> list[dict[str, Any]]:
    return [
        {"name": n, "in": "query", "schema": {"type": "string"}, "uniqueItems": True} for n in names
    ]


def _op(res: Resource, action: str, method: str, names: tuple[str, ...]) -> dict[str, Any]:
    prefix = "".join(p.capitalize() for p in res.group.split(".")[:1]) or "Core"
    return {
        "operationId": f"{action}{prefix}{res.version.capitalize()}{res.kind}",
        "parameters": _params(names),
        "responses": {"200": {"description": "OK"}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {
            "group": res.group,
            "version": res.version,
            "kind": res.kind,
        },
    }


def _paths(res: Resource) -> dict[str, Any]:
    base = f"/apis/{res.group}/{res.version}" if res.group else f"/api/{res.version}"
    scope = f"{base}/namespaces/{{namespace}}" if res.namespaced else base
    collection = f"{scope}/{res.plural}"
    item = f"{collection}/{{name}}"
    paths: dict[str, Any] = {
        collection: {
            "get": _op(res, "list", "get", _LIST_PARAMS),
            "post": _op(res, "post", "post", _QUERY_PARAMS["post"]),
            "delete": _op(
                res, "deletecollection", "delete", _QUERY_PARAMS["delete"] + _LIST_PARAMS
            ),
        },
        item: {
            "get": _op(res, "get", "get", _QUERY_PARAMS["get"]),
            "put": _op(res, "put", "put", _QUERY_PARAMS["put"]),
            "patch": _op(res, "patch", "patch", _QUERY_PARAMS["patch"]),
            "delete": _op(res, "delete", "delete", _QUERY_PARAMS["delete"]),
        },
    }
    for sub in res.subresources:
        if sub == "status":
            paths[f"{item}/status"] = {
                "get": _op(res, "get", "get", _QUERY_PARAMS["get"]),
                "put": _op(res, "put", "put", _QUERY_PARAMS["put"]),
                "patch": _op(res, "patch", "patch", _QUERY_PARAMS["patch"]),
            }
    return paths


def group_version_document(registry: Registry, group: str, version: str) -> dict[str, Any] | None:
    resources = [
        r for (g, v, _), r in sorted(registry.resources.items()) if g == group and v == version
    ]
    if not resources:
        return None
    paths: dict[str, Any] = {}
    schemas: dict[str, Any] = {}
    for res in resources:
        paths.update(_paths(res))
        if res.schema is not None:
            name = ".".join(reversed(res.group.split("."))) + f".{res.version}.{res.kind}"
            schemas[name] = {
                **res.schema,
                "x-kubernetes-group-version-kind": [
                    {"group": res.group, "version": res.version, "kind": res.kind}
                ],
            }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    }


def index(registry: Registry) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for group, versions in registry.groups().items():
        for version in versions:
            doc = group_version_document(registry, group, version)
            digest = hashlib.sha512(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:64]
            key = _key(group, version)
            paths[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash={digest.upper()}"}
    return {"paths": paths}
