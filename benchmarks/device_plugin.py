"""What a pod's admission costs on a node with gpusched's device plugin.

One simulated API server with one DGX H100 node, the device plugin (``DevicePlugins``) on it
and a fake kubelet speaking the real ``deviceplugin/v1beta1`` gRPC API over unix sockets
(tests/agent/fake_kubelet.py). For each case, ``W`` shared-GPU pods (``gpusched.io/gpu: 1``)
are bound to the node at once, as the scheduler binds them (the Binding carries the devices),
then the kubelet admits them one by one: GetPreferredAllocation and Allocate per pod, the
plugin finding each pod among those waiting and marking it allocated.

Reported per case: milliseconds per admission (both gRPC calls, the pod lookups and the
patch), and API requests per admission as the API server counted them (LISTs of the node's
pods and the annotation PATCH; NVIDIA's own plugin makes none, as it never learns which GPUs
the scheduler chose). The baseline is the same node with one pod waiting (``W = 1``): the cost
that grows with ``W`` is the LIST of the node's pods.

    python benchmarks/device_plugin.py [--waiting 1,20,80] [--json FILE]

Prints a table and writes the figures as JSON. Figures depend on the machine and on what else
runs on it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "agent"))

from fake_kubelet import FakeKubelet  # noqa: E402

from gpusched.agent import discover  # noqa: E402
from gpusched.agent.deviceplugin import DevicePlugins  # noqa: E402
from gpusched.agent.fake_nvml import FakeNVML  # noqa: E402
from gpusched.annotations import Assignment  # noqa: E402
from gpusched.clock import FakeClock  # noqa: E402
from gpusched.kube.client import resource_path  # noqa: E402
from gpusched.plugins.default_binder import binding_body  # noqa: E402
from gpusched.sim import SimCluster  # noqa: E402
from gpusched.sim.fleet import build_fleet, load_cluster_spec  # noqa: E402

NS = "default"


def _pod(name: str) -> dict[str, Any]:
    limits = {"gpusched.io/gpu": "1", "gpusched.io/vram": "1Gi"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "containers": [{"name": "main", "image": "cuda", "resources": {"limits": limits}}]
        },
    }


async def measure(waiting: int) -> dict[str, Any]:
    spec = load_cluster_spec("dgx-h100", nodes=1)
    node = build_fleet(spec)[0]
    inventory = discover(FakeNVML.of_sim_node(node, spec), node.name)
    with tempfile.TemporaryDirectory(prefix="dpb-", dir="/tmp") as sockets:
        async with SimCluster(spec, kubelets=False) as sim:
            kubelet = FakeKubelet(Path(sockets))
            await kubelet.start()
            plugins = DevicePlugins(
                sim.kube, node.name, inventory, socket_dir=sockets, clock=FakeClock()
            )
            await plugins.start()
            try:
                await kubelet.wait_for(
                    lambda: (
                        set(kubelet.plugins) == set(plugins.resources())
                        and all(p.updates for p in kubelet.plugins.values())
                    )
                )
                pods = []
                for i in range(waiting):
                    created = await sim.kube.create(
                        resource_path("", "v1", "pods", NS), _pod(f"p{i}")
                    )
                    gpu = inventory.gpus[i % len(inventory.gpus)]
                    assignment = Assignment((gpu.index,), (gpu.uuid,), (1024,), f"r{i}")
                    await sim.kube.create(
                        resource_path("", "v1", "pods", NS, f"p{i}", "binding"),
                        binding_body(created, node.name, assignment),
                    )
                    pods.append(await sim.kube.get(resource_path("", "v1", "pods", NS, f"p{i}")))
                before = sim.server.requests
                start = time.perf_counter()
                for pod in pods:
                    await kubelet.admit(pod)
                seconds = time.perf_counter() - start
                requests = sim.server.requests - before
            finally:
                await plugins.stop()
                await kubelet.stop()
    return {
        "waiting": waiting,
        "ms_per_admission": round(seconds * 1000 / waiting, 2),
        "api_requests_per_admission": round(requests / waiting, 2),
    }


async def run(cases: list[int]) -> list[dict[str, Any]]:
    return [await measure(w) for w in cases]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--waiting", default="1,20,80", help="pods waiting at once, per case")
    parser.add_argument("--json", default=None, help="write the figures here")
    args = parser.parse_args(argv)
    cases = [int(w) for w in args.waiting.split(",") if w]
    results = asyncio.run(run(cases))
    print(f"{'pods waiting':>12}  {'ms/admission':>12}  {'API requests/admission':>22}")
    for r in results:
        print(
            f"{r['waiting']:>12}  {r['ms_per_admission']:>12}  "
            f"{r['api_requests_per_admission']:>22}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"device_plugin": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
