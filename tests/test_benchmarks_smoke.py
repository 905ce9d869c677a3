"""Smoke test of benchmarks/gpu_mix.py: a tiny run writes every field the README's table reads.

No timing is asserted (speed lives in benchmarks/README.md); only the shape of the JSON, that
the stream is reproducible and that every pod is accounted for.
"""

from __future__ import annotations

import importlib.util
import json
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu_mix.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_mix", BENCH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def figures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("gpu_mix") / "out.json"
    argv = ["--nodes", "20", "--pods", "60", "--warmup", "10", "--ref-pods", "40"]
    argv += ["--ref-warmup", "10", "--json", str(out)]
    _load().main(argv)
    result: dict[str, Any] = json.loads(out.read_text())
    return result


RUN_FIELDS = [
    ("nodes", int),
    ("profile", str),
    ("pods", int),
    ("pods_per_s", float),
    ("pods_placed", int),
    ("pods_unplaced", int),
    ("placed_by_kind", dict),
    ("unplaced_by_kind", dict),
    ("gpus", int),
    ("gpus_fully_idle", int),
    ("mig_gpus_fully_idle", int),
    ("nodes_evaluated_per_pod", float),
    ("gpus_shared_partly_used", int),
    ("stranded_vram_gib", float),
    ("gpu_price_per_hour", float),
]


@pytest.mark.parametrize(("field", "kind"), RUN_FIELDS)
def test_every_run_has_the_field(figures: dict[str, Any], field: str, kind: type) -> None:
    assert [r["profile"] for r in figures["runs"]] == [
        "binpack",
        "binpack-most-allocated",
        "spread",
        "cost",
        "random",
        "first-fit",
    ]
    for run in figures["runs"]:
        assert isinstance(run[field], kind), (run["profile"], field, run[field])


@pytest.mark.parametrize(
    ("section", "fields"),
    [
        ("machine", ["cpus", "python"]),
        ("workload", ["cluster", "mix", "pods", "warmup", "seed"]),
        ("goals", ["inmem_target_met", "binpack_more_idle_than_first_fit", "nodes"]),
    ],
)
def test_sections(figures: dict[str, Any], section: str, fields: list[str]) -> None:
    assert set(fields) <= set(figures[section])


def test_whole_gpu_reference_is_measured(figures: dict[str, Any]) -> None:
    (ref,) = figures["whole_gpu_reference"]
    assert ref["nodes"] == 20
    assert ref["pods_per_s"] > 0


def test_every_pod_is_placed_or_counted_unplaced(figures: dict[str, Any]) -> None:
    for run in figures["runs"]:
        assert run["pods_placed"] + run["pods_unplaced"] == run["pods"] == 60
        assert sum(run["placed_by_kind"].values()) == run["pods_placed"]
        assert 0 <= run["gpus_fully_idle"] <= run["gpus"]


def test_stream_is_reproducible_and_mixed() -> None:
    mod = _load()
    a = mod.mixed_stream(400, seed=3)
    b = mod.mixed_stream(400, seed=3)
    assert a == b
    kinds = Counter(kind for kind, _ in a)
    assert set(kinds) == {"shared", "exclusive", "whole", "mig"}
    assert kinds["shared"] > kinds["whole"] > kinds["exclusive"]


# -- benchmarks/topology.py ------------------------------------------------------------------

TOPOLOGY_BENCH = BENCH.parent / "topology.py"


@pytest.fixture(scope="module")
def topology_figures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    spec = importlib.util.spec_from_file_location("topology_bench", TOPOLOGY_BENCH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path_factory.mktemp("topology") / "out.json"
    argv = ["--nodes", "12", "--pods", "20", "--warmup", "4", "--sampled-pods", "10"]
    argv += ["--trace-nodes", "6", "--trace-pods", "120", "--json", str(out)]
    module.main(argv)
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def test_topology_bench_measures_every_profile_and_policy(
    topology_figures: dict[str, Any],
) -> None:
    assert [r["profile"] for r in topology_figures["throughput"]] == [
        "batched",
        "sampled",
        "1-GPU batched",
    ]
    for row in topology_figures["throughput"]:
        assert row["pods_per_s"] > 0
        assert row["pods_unplaced"] == 0  # the stream is capped to fit
    rows = topology_figures["fragmentation"]
    assert [r["policy"] for r in rows] == ["gpusched", "gpusched-weighed", "first-fit", "random"]
    for row in rows:
        assert row["pods_placed"] + row["pods_unplaced"] == 120
        assert row["can_take_2"] >= row["can_take_4"] >= row["can_take_8"] >= 0
        assert 0 <= row["mean_set_quality"] <= 100
    assert rows[0]["worse_than_best_offered"] == 0  # topology first: never a worse set
    assert {"multi_gpu_pods_per_s", "inmem_target_met"} <= set(topology_figures["goals"])


# -- benchmarks/gangs.py ---------------------------------------------------------------------

GANGS = Path(__file__).resolve().parent.parent / "benchmarks" / "gangs.py"


def test_gangs_benchmark_binds_each_gang_whole(tmp_path: Path) -> None:
    """A tiny run of benchmarks/gangs.py: every member bound, the fields the README reads."""
    spec = importlib.util.spec_from_file_location("gangs_bench", GANGS)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "gangs.json"
    module.main(["--nodes", "4", "--cases", "4x1,2x8", "--timeout", "60", "--json", str(out)])
    result = json.loads(out.read_text())
    assert [(c["members"], c["gpus_per_member"]) for c in result["cases"]] == [(4, 1), (2, 8)]
    for case in result["cases"]:
        assert case["complete"]
        assert case["bound"] == case["members"]
        assert case["double_booked_gpus"] == 0
        for field in ("bind_s", "total_s", "api_writes_per_pod", "lease_binding_writes_per_pod"):
            assert isinstance(case[field], float)


DEVICE_PLUGIN = Path(__file__).resolve().parent.parent / "benchmarks" / "device_plugin.py"


def test_device_plugin_benchmark_admits_every_pod(tmp_path: Path) -> None:
    """A tiny run of benchmarks/device_plugin.py: the fields, and the API requests per
    admission (a LIST for the preference, a LIST and a PATCH for Allocate)."""
    spec = importlib.util.spec_from_file_location("device_plugin_bench", DEVICE_PLUGIN)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "dp.json"
    module.main(["--waiting", "1,3", "--json", str(out)])
    cases = json.loads(out.read_text())["device_plugin"]
    assert [c["waiting"] for c in cases] == [1, 3]
    for case in cases:
        assert case["api_requests_per_admission"] == 3.0
        assert isinstance(case["ms_per_admission"], float)


CLAIMS = Path(__file__).resolve().parent.parent / "benchmarks" / "claims.py"


def test_claims_benchmark_measures_each_form_with_its_claim_written(tmp_path: Path) -> None:
    """A tiny run of benchmarks/claims.py: plain and GpuClaim pods all bound with their claim's
    status; a GpuClaim pod's claim writes (status, finalizer); a DRA pod's too."""

    spec = importlib.util.spec_from_file_location("claims_bench", CLAIMS)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "claims.json"
    module.main(["--nodes", "6", "--pods", "12", "--warmup", "2", "--json", str(out)])
    rows = {r["form"]: r for r in json.loads(out.read_text())["forms"]}
    assert list(rows) == ["plain", "gpuclaim", "dra"]
    for row in rows.values():
        assert row["complete"]
        assert row["bound"] == 12
        assert row["writes_per_pod_by_kind"]["binding"] == 1.0
        assert row["writes_per_pod_by_kind"]["event"] >= 1.0  # DRA: a FailedScheduling too
        for name in ("pods_per_s", "pods_per_s_complete", "latency_p99_s", "writes_per_pod"):
            assert isinstance(row[name], float)
    assert rows["plain"]["claim_writes_per_pod"] == 0.0
    assert rows["gpuclaim"]["with_claim_status"] == 12
    assert rows["gpuclaim"]["claim_writes_per_pod"] >= 2.0  # status, then the in-use finalizer
