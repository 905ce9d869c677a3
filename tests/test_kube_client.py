"""``Kube`` reads the proxy environment once (as client-go honours HTTPS_PROXY/NO_PROXY);
every command finds its kubeconfig as kubectl does (``resolve_kubeconfig``) and says which
one is missing."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes_asyncio import client as k8s_client

from gpusched.kube import Kube
from gpusched.kube.client import KubeconfigError, resolve_kubeconfig


def _api(host: str) -> k8s_client.ApiClient:
    configuration = k8s_client.Configuration()
    configuration.host = host
    return k8s_client.ApiClient(configuration)


@pytest.mark.parametrize(
    ("env", "proxy"),
    [
        ({}, None),
        ({"HTTPS_PROXY": "http://proxy.example:3128"}, "http://proxy.example:3128"),
        ({"HTTPS_PROXY": "http://proxy.example:3128", "NO_PROXY": "api.example"}, None),
    ],
)
async def test_the_proxy_is_settled_once(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], proxy: str | None
) -> None:
    for name in ("HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    kube = Kube(_api("https://api.example:6443"))
    try:
        rest = kube.api_client.rest_client
        assert rest.proxy == proxy
        assert not rest.pool_manager.trust_env  # no per-request lookups in worker threads
    finally:
        await kube.close()


async def test_warm_opens_pooled_connections_up_to_the_pool_size() -> None:
    """``Kube.warm(n)`` leaves ``n`` idle connections in the pool (capped at its size), so a
    burst of binds after start-up pays no handshake per connection."""
    from gpusched.sim import SimCluster

    async with SimCluster() as sim:
        kube: Kube = sim.kube
        connector = kube.api_client.rest_client.pool_manager.connector
        assert await kube.warm(5) == 5
        idle = sum(len(c) for c in connector._conns.values())  # aiohttp has no public count
        assert idle >= 5
        assert await kube.warm(kube.pool_size + 50) == kube.pool_size
        assert await kube.warm(0) == 0


# -- one kubeconfig resolution for every command ------------------------------------------------


@pytest.mark.parametrize(
    ("flag", "env", "home_has_config", "expected"),
    [
        ("a.yaml", {"KUBECONFIG": "b.yaml"}, True, "a.yaml"),  # the flag wins
        (None, {"KUBECONFIG": "b.yaml:c.yaml"}, True, "b.yaml:c.yaml"),  # kubectl's merge list
        (None, {"KUBECONFIG": "gone.yaml:b.yaml"}, False, "gone.yaml:b.yaml"),  # one exists
        (None, {"KUBECONFIG": ""}, True, "HOME"),  # empty is unset
        (None, {}, True, "HOME"),
        (None, {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, True, "HOME"),  # a file before in-cluster
        (None, {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, False, None),  # in-cluster
        ("gone.yaml", {}, True, "--kubeconfig gone.yaml: no such file"),
        (None, {"KUBECONFIG": "gone.yaml"}, True, "KUBECONFIG gone.yaml: no such file"),
        (None, {}, False, "no kubeconfig: give --kubeconfig FILE or set KUBECONFIG"),
    ],
)
def test_every_command_finds_the_kubeconfig_as_kubectl_does(
    flag: str | None,
    env: dict[str, str],
    home_has_config: bool,
    expected: str | None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("a.yaml", "b.yaml"):
        (tmp_path / name).write_text("{}")
    home = tmp_path / "home"
    if home_has_config:
        (home / ".kube").mkdir(parents=True)
        (home / ".kube" / "config").write_text("{}")
    if expected is not None and ("no such file" in expected or "no kubeconfig" in expected):
        with pytest.raises(KubeconfigError, match=expected):
            resolve_kubeconfig(flag, env, home)
        return
    want = str(home / ".kube" / "config") if expected == "HOME" else expected
    assert resolve_kubeconfig(flag, env, home) == want


@pytest.mark.parametrize("command", [["explain", "default/p"], ["cleanup", "--all"]])
def test_a_missing_kubeconfig_is_a_usage_error_naming_it(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    from gpusched.cli import main

    assert main([*command, "--kubeconfig", "/nonexistent/kc"]) == 2
    assert "--kubeconfig /nonexistent/kc: no such file" in capsys.readouterr().err
