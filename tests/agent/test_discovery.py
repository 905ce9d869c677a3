"""Discovery through the fake NVML gives back what the simulation publishes, node kind by kind."""

from __future__ import annotations

from typing import NoReturn

import pynvml
import pytest

from gpusched.agent import AgentError, discover
from gpusched.agent.fake_nvml import FakeNVML
from gpusched.inventory import GPUNodeInventory
from gpusched.sim.fleet import SimNode, build_fleet, load_cluster_spec, shipped_clusters


def _node_kinds() -> list[tuple[str, str]]:
    """(cluster, pool) for every GPU pool of every shipped cluster spec."""
    return [
        (name, pool.name)
        for name in shipped_clusters()
        for pool in load_cluster_spec(name).pools
        if pool.gpu is not None and pool.count > 0
    ]


def _one_node(cluster: str, pool: str) -> tuple[SimNode, FakeNVML]:
    spec = load_cluster_spec(cluster)
    only = next(p for p in spec.pools if p.name == pool).model_copy(update={"count": 1})
    small = spec.model_copy(update={"pools": (only,)})
    node = build_fleet(small)[0]
    return node, FakeNVML.of_sim_node(node, small)


def _published(node: SimNode) -> GPUNodeInventory:
    assert node.inventory is not None
    return node.inventory.model_copy(update={"source": "nvml"})


@pytest.mark.parametrize(("cluster", "pool"), _node_kinds())
def test_discovery_reads_back_the_simulated_node(cluster: str, pool: str) -> None:
    node, nvml = _one_node(cluster, pool)
    assert discover(nvml, node.name) == _published(node)


@pytest.mark.parametrize(
    ("cluster", "pool", "pair", "nvlinks", "pcie"),
    [
        ("dgx-h100", "dgx-h100", (0, 7), 18, "SYS"),  # NVSwitch: every pair NV18
        ("dgx-h100", "dgx-h100", (0, 3), 18, "NODE"),
        ("dgx-v100", "dgx-v100", (0, 3), 2, "PHB"),  # hybrid cube-mesh NV2
        ("dgx-v100", "dgx-v100", (0, 1), 1, "PIX"),
        ("dgx-v100", "dgx-v100", (0, 5), 0, "SYS"),  # no NVLink between these
        ("pcie-bridged-pairs", "a40", (2, 3), 4, "PIX"),  # bridge
        ("pcie-bridged-pairs", "a40", (1, 2), 0, "NODE"),
    ],
)
def test_links_as_nvidia_smi_shows_them(
    cluster: str, pool: str, pair: tuple[int, int], nvlinks: int, pcie: str
) -> None:
    node, nvml = _one_node(cluster, pool)
    link = next(x for x in discover(nvml, node.name).links if (x.a, x.b) == pair)
    assert (link.nvlinks, link.pcie) == (nvlinks, pcie)


def test_nvswitch_links_go_to_switches() -> None:
    _, nvml = _one_node("dgx-h100", "dgx-h100")
    nvml.nvmlInit()
    gpu = nvml.nvmlDeviceGetHandleByIndex(0)
    kinds = {nvml.nvmlDeviceGetNvLinkRemoteDeviceType(gpu, link) for link in range(18)}
    assert kinds == {pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH}
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nvml.nvmlDeviceGetNvLinkState(gpu, 18)


@pytest.mark.parametrize(
    ("cluster", "pool", "call", "error"),
    [
        ("dgx-v100", "dgx-v100", "nvmlDeviceGetMigMode", pynvml.NVMLError_NotSupported),
        ("dgx-v100", "dgx-v100", "nvmlDeviceGetMaxMigDeviceCount", pynvml.NVMLError_NotSupported),
        ("mig-small", "mig-small", "nvmlDeviceGetNvLinkState", pynvml.NVMLError_NotSupported),
    ],
)
def test_fake_raises_where_nvml_does(
    cluster: str, pool: str, call: str, error: type[Exception]
) -> None:
    _, nvml = _one_node(cluster, pool)
    nvml.nvmlInit()
    gpu = nvml.nvmlDeviceGetHandleByIndex(0)
    args = (gpu, 0) if call == "nvmlDeviceGetNvLinkState" else (gpu,)
    with pytest.raises(error):
        getattr(nvml, call)(*args)


def test_empty_mig_slot_is_not_found() -> None:
    _, nvml = _one_node("mixed", "mig-medium")  # 4 MIG devices of 7 slots
    nvml.nvmlInit()
    gpu = nvml.nvmlDeviceGetHandleByIndex(0)
    nvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 3)
    with pytest.raises(pynvml.NVMLError_NotFound):
        nvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 4)


def test_calls_before_init_fail_and_discover_shuts_down() -> None:
    node, nvml = _one_node("dgx-v100", "dgx-v100")
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        nvml.nvmlDeviceGetCount()
    discover(nvml, node.name)
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        nvml.nvmlDeviceGetCount()


@pytest.mark.parametrize(
    ("init_error", "says"),
    [
        ("LibraryNotFound", "NVML library (libnvidia-ml.so.1) not found"),
        ("DriverNotLoaded", "NVIDIA kernel driver not loaded"),
        ("NoPermission", "no permission"),
    ],
)
def test_no_driver_is_a_clear_error(init_error: str, says: str) -> None:
    node, _ = _one_node("dgx-v100", "dgx-v100")
    assert node.inventory is not None
    nvml = FakeNVML(node.inventory, init_error=init_error)
    with pytest.raises(AgentError, match=says.replace("(", r"\(").replace(")", r"\)")):
        discover(nvml, node.name)


def test_real_pynvml_gives_an_inventory_or_a_clear_error() -> None:
    """The real library on this machine: an inventory where there is a driver, else AgentError
    (never a bare NVMLError for a missing library or driver)."""
    result: GPUNodeInventory | AgentError
    try:
        result = discover(pynvml, "this-node")
    except AgentError as exc:
        result = exc
    if isinstance(result, AgentError):
        assert "NVML library" in str(result) or "driver not loaded" in str(result)
    else:
        assert result.source == "nvml"
        assert len(result.links) == len(result.gpus) * (len(result.gpus) - 1) // 2


class _OldDriver(FakeNVML):
    """A driver before R460: no nvmlDeviceGetNvLinkRemoteDeviceType."""

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: object, link: int) -> NoReturn:
        raise pynvml.NVMLError_FunctionNotFound()


class _Unprivileged(FakeNVML):
    """An agent without the MIG monitor capability."""

    def nvmlDeviceGetGpuInstanceById(self, handle: object, gpu_instance: int) -> NoReturn:
        raise pynvml.NVMLError_NoPermission()


def test_switch_links_without_remote_device_type() -> None:
    node, nvml = _one_node("dgx-h100", "dgx-h100")
    assert node.inventory is not None
    old = _OldDriver(node.inventory, nvswitch=True)
    assert discover(old, node.name) == discover(nvml, node.name)


def test_mig_placement_without_permission_says_so() -> None:
    node, _ = _one_node("mig-small", "mig-small")
    assert node.inventory is not None
    with pytest.raises(AgentError, match="mig/monitor"):
        discover(_Unprivileged(node.inventory), node.name)
