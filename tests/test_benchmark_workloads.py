"""The benchmarks' pod streams are pods a real API server accepts, in the documented form.

benchmarks/scheduler_perf.py ``--workload mixed`` creates gpu_mix.py's stream through the API;
a stream that only worked in memory (a modifier written as a resource, say) would fail there or,
worse, be read as a different request. Each kind is created on the simulated cluster and read
back through the request readers.
"""

from __future__ import annotations

import sys
from pathlib import Path

from gpusched.gpu_requests import read_gpu_request
from gpusched.kube.client import resource_path
from gpusched.sim import SimCluster

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from scheduler_perf import mixed_bodies

EXPECTED = {  # the stream's kind -> (request mode, exclusive)
    "shared": ("shared", False),
    "exclusive": ("shared", True),
    "whole": ("whole", False),
    "mig": ("mig", False),
}


async def test_every_kind_of_the_mixed_stream_is_accepted_and_read_as_meant() -> None:
    from gpu_mix import mixed_stream

    kinds = [kind for kind, _pod in mixed_stream(200, seed=0)]
    body = mixed_bodies(200, seed=0)
    first = {kind: i for i, kind in reversed(list(enumerate(kinds)))}
    assert set(first) == set(EXPECTED)
    async with SimCluster() as sim:
        await sim.kube.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "perf"}},
        )
        path = resource_path("", "v1", "pods", "perf")
        for i, kind in enumerate(kinds[: max(first.values()) + 1]):
            created = await sim.kube.create(path, body(f"pod-{i}", "perf"))
            if first[kind] != i:
                continue
            request = read_gpu_request(created)
            assert request is not None, kind
            assert (request.mode, request.exclusive) == EXPECTED[kind], kind
