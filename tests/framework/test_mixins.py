"""The mixins the framework finds once on enabled plugins: pod groups, GpuClaim specs,
informers, pod events and background tasks; and the errors a profile gets for misusing them."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from test_runtime import build, enabled, make_pod

from gpusched.framework import (
    BackgroundPlugin,
    ClaimSpecsPlugin,
    ConfigError,
    Informer,
    InformerPlugin,
    PodEventHandler,
    PodGroup,
    PodGroupPlugin,
    PreEnqueuePlugin,
    Status,
)


class Gang(PreEnqueuePlugin, PodGroupPlugin, InformerPlugin, PodEventHandler, BackgroundPlugin):
    NAME = "Gang"

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self.ran = asyncio.Event()

    def pre_enqueue(self, pod: dict[str, Any]) -> Status:
        return Status.success()

    def group_key(self, pod: dict[str, Any]) -> str | None:
        return (pod["metadata"].get("labels") or {}).get("group")

    def pod_group(self, pod: dict[str, Any]) -> PodGroup | None:
        key = self.group_key(pod)
        return None if key is None else PodGroup(key, 2, (pod["metadata"]["uid"],))

    def informers(self) -> Sequence[Informer]:
        return [Informer("example.com", "v1", "groups", self.on_group)]

    def on_group(self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        pass

    def on_pod(self, kind: str, pod: dict[str, Any], old: dict[str, Any] | None) -> None:
        self.seen.append((kind, pod["metadata"]["name"]))
        if kind == "DELETED":
            raise RuntimeError("a handler bug is logged, not raised")

    async def background(self) -> None:
        self.ran.set()


class OtherGang(Gang):
    NAME = "OtherGang"


def test_the_framework_finds_the_mixins() -> None:
    fw = build({"preEnqueue": enabled("Gang")}, Gang)
    plugin = fw.plugins["Gang"]
    assert isinstance(plugin, Gang)
    pod = make_pod("a")
    assert fw.group_key(pod) is None
    assert fw.pod_group(pod) is None
    pod["metadata"]["labels"] = {"group": "ns/g"}
    assert fw.group_key(pod) == "ns/g"
    group = fw.pod_group(pod)
    assert group is not None
    assert group.min_member == 2
    assert group.domains == ()
    assert fw.group_plugin_name == "Gang"
    assert [i.plural for i in fw.informers()] == ["groups"]
    assert fw.has_pod_handlers()
    fw.on_pod("ADDED", pod, None)
    fw.on_pod("DELETED", pod, None)  # raises inside: logged
    assert plugin.seen == [("ADDED", "a"), ("DELETED", "a")]
    assert fw.background_plugins() == (plugin,)


def test_without_the_mixins() -> None:
    fw = build({})
    pod = make_pod("a")
    assert fw.group_key(pod) is None
    assert fw.pod_group(pod) is None
    assert fw.group_plugin_name == ""
    assert fw.informers() == []
    assert not fw.has_pod_handlers()
    assert fw.background_plugins() == ()


def test_one_group_plugin_per_profile() -> None:
    with pytest.raises(ConfigError, match="at most one pod group"):
        build({"preEnqueue": enabled("Gang", "OtherGang")}, Gang, OtherGang)


class Claims(PreEnqueuePlugin, ClaimSpecsPlugin):
    NAME = "Claims"

    def pre_enqueue(self, pod: dict[str, Any]) -> Status:
        return Status.success()

    def claim_spec(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return {"devices": {"count": 2}} if (namespace, name) == ("default", "c") else None


class OtherClaims(Claims):
    NAME = "OtherClaims"


def test_the_profiles_claim_specs_reach_the_request_readers() -> None:
    """``Handle.claim_specs`` is the profile's ClaimSpecsPlugin, per framework (no process-wide
    registry: a framework without one reads no claims)."""
    from gpusched.gpu_requests import read_gpu_request

    fw = build({"preEnqueue": enabled("Claims")}, Claims)
    assert fw.claim_specs is fw.plugins["Claims"]
    pod = make_pod("a")
    pod["metadata"]["annotations"] = {"gpu.scheduling/claim": "c"}
    pod["spec"]["containers"] = [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]
    request = read_gpu_request(pod, fw.claim_specs)
    assert request is not None
    assert request.count == 2
    assert build({}).claim_specs is None
    with pytest.raises(ConfigError, match="at most one GpuClaim plugin"):
        build({"preEnqueue": enabled("Claims", "OtherClaims")}, Claims, OtherClaims)


def test_mixin_methods_are_checked_for_sync_and_async() -> None:
    """As the stages are, when a plugin class defines them."""
    with pytest.raises(TypeError, match="on_pod must be a plain 'def'"):

        class _Bad(Gang):
            async def on_pod(self, kind: str, pod: Any, old: Any) -> None:  # type: ignore[override]
                pass

    with pytest.raises(TypeError, match="background must be an 'async def'"):

        class _Worse(Gang):
            def background(self) -> None:  # type: ignore[override]
                pass
