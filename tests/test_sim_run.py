"""``gpusched sim run`` end to end: the gpu-mix workload on the mixed fleet, briefly.

Real clock (the simulated API server, kubelets and webhook are real asyncio servers): every
gpu-mix pod arrives within a second and runs 20 s, so a 10 s run (binding takes about 1.5 s
here: a wide margin for a slow machine) sees them all bound, none finished, and
stops at its timeout with the summary.
"""

from __future__ import annotations

import io
import re
from collections import Counter

import pytest

from gpusched.sim.fleet import load_cluster_spec
from gpusched.sim.run import format_mib, pod_shape, run_workload
from gpusched.sim.workload import arrivals, load_workload


async def test_gpu_mix_binds_every_shape_and_reports_vram_per_gpu_kind() -> None:
    out = io.StringIO()
    report = await run_workload(
        load_cluster_spec("mixed"), load_workload("gpu-mix"), timeout=10, out=out, progress=False
    )
    text = out.getvalue()
    shapes: Counter[str] = Counter()
    for per_shape in report.pods_by_product.values():
        shapes.update(per_shape)
    assert set(shapes) == {"shared", "exclusive", "MIG", "whole"}
    assert report.pods_by_product["NVIDIA H100 80GB HBM3"]["whole"] == 3  # selected onto DGX
    assert report.pods_by_product["NVIDIA H100 PCIe"]["MIG"] == 16  # the MIG pools' product
    lines = {line.split(":")[0].strip(): line for line in text.splitlines() if "VRAM, " in line}
    assert set(lines) == {
        "VRAM, NVIDIA H100 80GB HBM3",
        "VRAM, NVIDIA H100 PCIe",
        "VRAM, NVIDIA A40",
        "VRAM, Tesla V100-SXM2-32GB",
    }
    assert re.search(
        r"\S+ of 1\.2Ti reserved at peak \(\d+%\)", lines["VRAM, NVIDIA H100 80GB HBM3"]
    )
    assert "16 MIG pods" in lines["VRAM, NVIDIA H100 PCIe"]
    for product, peak in report.vram_peak_mib.items():
        assert 0 < peak <= report.vram_total_mib[product]


@pytest.mark.parametrize(
    ("mib", "text"),
    [(512, "512Mi"), (1536, "1.5Gi"), (319488, "312Gi"), (1304944, "1.2Ti")],
)
def test_format_mib(mib: int, text: str) -> None:
    assert format_mib(mib) == text


def test_pod_shape_of_each_gpu_mix_wave() -> None:
    shapes = {
        pod["metadata"]["labels"]["gpusched.io/wave"]: pod_shape(pod)
        for _, pod in arrivals(load_workload("gpu-mix"))
    }
    assert shapes == {
        "shared-infer": "shared",
        "shared-pair": "shared",
        "exclusive": "exclusive",
        "mig": "MIG",
        "whole": "whole",
    }
