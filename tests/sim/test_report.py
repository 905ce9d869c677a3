"""``gpusched sim run --output run.json --report report.html`` and ``gpusched sim report``.

One short real run (2 DGX nodes, pods of 1 to 8 GPUs lasting 1-2 s, shared and DRA pods, 8-GPU
pods that wait) writes run.json and the page; the tests read the file as another tool would
(its schema, each pod's placement and times, the summary), open the page in headless Chromium
(Debian's package; skipped without it) and check that every plot rendered. The series behind
the plots (fragmentation, queue, heat map, bind counts, latency per priority) are table-tested
on hand-made runs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import itertools
import json
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from gpusched.cli import main
from gpusched.sim.fleet import ClusterSpec
from gpusched.sim.report import (
    FIGURES,
    Bins,
    NodeRecord,
    PodRecord,
    RunFile,
    RunFileError,
    Summary,
    _histogram_edges,
    binds_per_bin,
    fragmentation,
    gpu_allocation,
    latencies_by_priority,
    load_run,
    percentile,
    priority_name,
    queue_length,
    render_html,
    summary_rows,
    time_bins,
    write_pngs,
)
from gpusched.sim.run import RunReport, run_workload
from gpusched.sim.workload import Workload

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"

CLUSTER = {
    "name": "two-dgx",
    "description": "2 DGX H100 nodes",
    "pools": [
        {
            "name": "dgx",
            "count": 2,
            "cpu": 224,
            "memory": "2Ti",
            "gpu": {
                "product": "NVIDIA H100 80GB HBM3",
                "memoryMiB": 81559,
                "count": 8,
                "topology": "nvswitch",
                "nvlinks": 18,
            },
        }
    ],
}
WORKLOAD = {
    "name": "tiny",
    "description": "short pods of 1 to 8 GPUs <b>& co</b>",
    "waves": [
        {"name": "one", "count": 4, "rate": 8, "pod": {"gpus": 1, "duration": "2s", "priority": 1}},
        {"name": "four", "count": 2, "pod": {"gpus": 4, "duration": "2s", "priority": 1}},
        {
            "name": "shared",
            "count": 2,
            "pod": {"vram": "20Gi", "shared": 1, "duration": "1s", "priority": 2},
        },
        {
            "name": "dra",
            "count": 1,
            "pod": {"gpus": 2, "claim": "dra", "duration": "1s", "priority": 2},
        },
        {
            "name": "eight",
            "start": 0.3,
            "count": 2,
            "pod": {"gpus": 8, "duration": "1s", "priority": 4},
        },
    ],
}
GPUS = {"one": 1, "four": 4, "shared": 1, "dra": 2, "eight": 8}
PRIORITY = {"one": 1, "four": 1, "shared": 2, "dra": 2, "eight": 4}
"""The 8-GPU pods come last, wait, and preempt nobody (4 is the lowest level)."""


@dataclasses.dataclass
class Done:
    report: RunReport
    json_path: Path
    html_path: Path
    raw: dict[str, Any]
    run: RunFile


@pytest.fixture(scope="module")
def done(tmp_path_factory: pytest.TempPathFactory) -> Done:
    tmp = tmp_path_factory.mktemp("run")
    spec = ClusterSpec.model_validate(CLUSTER)
    workload = Workload.model_validate(WORKLOAD)
    out = io.StringIO()
    report = asyncio.run(
        run_workload(
            spec,
            workload,
            timeout=60,
            out=out,
            progress=False,
            output=tmp / "run.json",
            html=tmp / "report.html",
        )
    )
    raw = json.loads((tmp / "run.json").read_text())
    return Done(report, tmp / "run.json", tmp / "report.html", raw, load_run(tmp / "run.json"))


# --- run.json from a real run ----------------------------------------------------------------


def test_run_json_names_its_schema_cluster_and_workload(done: Done) -> None:
    raw = done.raw
    assert (raw["kind"], raw["version"]) == ("gpusched.io/sim-run", 1)
    assert (raw["cluster"], raw["workload"]) == ("two-dgx", "tiny")
    assert raw["startedAt"].endswith("Z")
    assert raw["nodes"] == [
        {"name": f"dgx-00{i}", "pool": "dgx", "product": "NVIDIA H100 80GB HBM3", "gpus": 8}
        for i in range(2)
    ]
    assert sorted(p.name for p in done.run.pods) == sorted(
        f"tiny-{w['name']}-{i:05d}" for w in WORKLOAD["waves"] for i in range(w["count"])
    )
    assert [f.name for f in Path(done.json_path).parent.iterdir() if f.name.startswith(".")] == []


def test_every_pod_has_its_node_gpus_and_times_in_order(done: Done) -> None:
    for pod in done.raw["pods"]:
        assert pod["phase"] == "Succeeded", pod
        assert pod["node"] in {"dgx-000", "dgx-001"}
        assert len(pod["gpus"]) == len(set(pod["gpus"])) == GPUS[pod["wave"]], pod
        assert set(pod["gpus"]) <= set(range(8))
        assert pod["created"] <= pod["bound"] <= pod["started"] <= pod["finished"]
        assert pod["claim"] == ("dra" if pod["wave"] == "dra" else None)
        assert pod["priority"] == PRIORITY[pod["wave"]]
    by_wave = {p["wave"]: p for p in done.raw["pods"]}
    assert by_wave["shared"]["vramMib"] == [20480]
    assert by_wave["shared"]["shape"] == "shared"
    assert by_wave["one"]["vramMib"] == [81559]
    assert len(by_wave["one"]["gpuUuids"]) == 1
    assert by_wave["dra"]["shape"] == "DRA"


def test_a_pod_that_waited_has_the_schedulers_messages(done: Done) -> None:
    waited = [p for p in done.run.pods if p.pending_reasons]
    assert waited, "the 8-GPU pods wait for the first pods to finish"
    for pod in waited:
        first = pod.pending_reasons[0]
        assert first.reason == "Unschedulable"
        assert first.message.startswith("0/2 nodes are available")
        assert pod.created <= first.at <= (pod.bound or first.at)
        messages = [r.message for r in pod.pending_reasons]
        assert all(a != b for a, b in itertools.pairwise(messages))


def test_the_summary_is_the_run_report(done: Done) -> None:
    summary = done.run.summary
    report = done.report
    assert (summary.created, summary.bound, summary.succeeded) == (11, 11, 11)
    assert summary.elapsed == pytest.approx(report.elapsed)
    assert summary.latencies == report.latencies
    assert summary.vram_peak_mib == report.vram_peak_mib
    assert summary.pods_by_product == {k: dict(v) for k, v in report.pods_by_product.items()}
    assert done.raw["summary"]["gpusByPool"] == {"dgx": 16}
    assert len(summary.latencies) == sum(p.bound is not None for p in done.run.pods)


def test_the_summary_model_has_every_run_report_field() -> None:
    fields = {f.name for f in dataclasses.fields(RunReport)} - {"accounted_at"}
    assert set(Summary.model_fields) == fields


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{", "Expecting property name"),
        ('{"kind": "Pod"}', 'not a run file (wants "kind": "gpusched.io/sim-run")'),
        (
            '{"kind": "gpusched.io/sim-run", "version": 2}',
            "version 2; this gpusched reads version 1",
        ),
        ('{"kind": "gpusched.io/sim-run", "version": 1}', "cluster\n  Field required"),
    ],
)
def test_load_run_says_what_is_wrong(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "run.json"
    path.write_text(content)
    with pytest.raises(RunFileError, match=re.escape(message)):
        load_run(path)


# --- the page ---------------------------------------------------------------------------------


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def test_the_page_is_self_contained_and_escaped(done: Done) -> None:
    page = done.html_path.read_text()
    parser = _Tags()
    parser.feed(page)
    images = [a for t, a in parser.tags if t == "img"]
    assert len(images) == len(FIGURES)
    assert all((a["src"] or "").startswith("data:image/png;base64,") for a in images)
    assert not [t for t, a in parser.tags if t in ("script", "link", "iframe")]
    assert not [a for _, a in parser.tags if "href" in a]
    assert "short pods of 1 to 8 GPUs &lt;b&gt;&amp; co&lt;/b&gt;" in page
    assert "<b>" not in page


def _in_chromium(page: Path, tmp_path: Path) -> dict[str, Any]:
    """Open ``page`` (plus a checking script) in headless Chromium; what the script found."""
    check = """<script>
window.__errors = [];
window.addEventListener("error", e => window.__errors.push(String(e.message || e.type)), true);
const error = console.error; console.error = (...a) => { window.__errors.push(a.join(" ")); };
window.addEventListener("load", () => {
  const images = [...document.images].map(i => [i.complete, i.naturalWidth, i.naturalHeight,
    i.getBoundingClientRect().width]);
  const out = document.createElement("pre"); out.id = "check";
  out.textContent = JSON.stringify({images, errors: window.__errors});
  document.body.appendChild(out);
});
</script>"""
    checked = tmp_path / "checked.html"
    checked.write_text(page.read_text().replace("<head>", "<head>\n" + check, 1))
    dom = subprocess.run(
        [
            CHROMIUM,
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--virtual-time-budget=5000",
            "--dump-dom",
            checked.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    start = dom.index('<pre id="check">') + len('<pre id="check">')
    result: dict[str, Any] = json.loads(dom[start : dom.index("</pre>", start)])
    return result


@pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason="headless Chromium not installed (apt-get install chromium)"
)
def test_every_plot_renders_in_chromium(done: Done, tmp_path: Path) -> None:
    found = _in_chromium(done.html_path, tmp_path)
    assert found["errors"] == []
    assert len(found["images"]) == len(FIGURES)
    for complete, width, height, shown in found["images"]:
        assert complete
        assert width >= 400
        assert height >= 200
        assert shown > 0


def test_sim_report_remakes_the_page_and_writes_pngs(
    done: Done, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "again.html"
    assert (
        main(["sim", "report", str(done.json_path), "-o", str(page), "--png", str(tmp_path)]) == 0
    )
    assert page.read_text().count("data:image/png;base64,") == len(FIGURES)
    for name in [*FIGURES, "overview"]:
        assert (tmp_path / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "wrote" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["sim", "report", "run.json"], "nothing to write: give -o REPORT.html and/or --png DIR"),
        (
            ["sim", "run", "--output", "no/such/dir/run.json"],
            "--output no/such/dir/run.json: no such directory no/such/dir",
        ),
        (["sim", "report", "missing.json", "-o", "r.html"], "missing.json: [Errno 2]"),
    ],
)
def test_sim_report_usage_errors_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_without_matplotlib_the_commands_say_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    argv = ["sim", "run", "--workload", "smoke", "--report", str(tmp_path / "r.html")]
    assert main(argv) == 2  # before any run starts
    assert "--report: the report needs matplotlib: pip install 'gpusched[report]'" in (
        capsys.readouterr().err
    )
    assert main(["sim", "report", "x.json", "--png", str(tmp_path)]) == 2
    assert "pip install 'gpusched[report]'" in capsys.readouterr().err


# --- pure parts on hand-made runs -------------------------------------------------------------


def pod(
    name: str,
    node: str | None = None,
    gpus: tuple[int, ...] = (),
    created: float = 0.0,
    bound: float | None = None,
    finished: float | None = None,
    priority: int = 2,
    spec_priority: int = 0,
) -> PodRecord:
    return PodRecord(
        namespace="default",
        name=name,
        wave="w",
        priority=priority,
        spec_priority=spec_priority,
        shape="whole",
        claim=None,
        node=node,
        gpus=list(gpus),
        gpu_uuids=[],
        vram_mib=[],
        created=created,
        bound=bound,
        started=bound,
        finished=finished,
        phase="Succeeded" if finished else "Pending",
        deleted=False,
        preempted=False,
        pending_reasons=[],
    )


def make_run(pods: list[PodRecord], nodes: dict[str, int], elapsed: float = 10.0) -> RunFile:
    return RunFile(
        cluster="c",
        workload="w",
        started_at="2026-11-28T00:00:00Z",
        nodes=[
            NodeRecord(name=n, pool="p", product="H100" if g else None, gpus=g)
            for n, g in nodes.items()
        ],
        pods=pods,
        summary=Summary.model_validate(
            {
                f.name: getattr(RunReport(elapsed=elapsed), f.name)
                for f in dataclasses.fields(RunReport)
                if f.name != "accounted_at"
            }
        ),
    )


FULL = {1: 12, 2: 6, 4: 3, 8: 1}


@pytest.mark.parametrize(
    ("pods", "expected"),
    [
        pytest.param([], [(0.0, FULL)], id="empty cluster"),
        pytest.param(
            [
                pod("p", "a", (0, 1, 2, 3), bound=1, finished=3),
                pod("q", "b", (0,), bound=2, finished=4),
            ],
            [
                (0.0, FULL),
                (1.0, {1: 8, 2: 4, 4: 2, 8: 0}),
                (2.0, {1: 7, 2: 3, 4: 1, 8: 0}),
                (3.0, {1: 11, 2: 5, 4: 2, 8: 1}),
                (4.0, FULL),
            ],
            id="a 4-GPU pod takes the 8-GPU slot, a 1-GPU pod a 4-GPU one",
        ),
        pytest.param(
            [pod("p", "a", (0,), bound=1, finished=3), pod("q", "a", (0,), bound=2, finished=5)],
            [(0.0, FULL), (1.0, {1: 11, 2: 5, 4: 2, 8: 0}), (5.0, FULL)],
            id="two pods sharing a GPU hold it once, from the first bind to the last finish",
        ),
        pytest.param(
            [pod("p", "a", (7,), bound=1, finished=2), pod("q", "b", (3,), bound=2, finished=3)],
            [
                (0.0, FULL),
                (1.0, {1: 11, 2: 5, 4: 2, 8: 0}),
                (2.0, {1: 11, 2: 5, 4: 2, 8: 1}),
                (3.0, FULL),
            ],
            id="a release and a take at the same time: one point",
        ),
        pytest.param(
            [pod("p", "a", (0, 1), bound=1), pod("pending")],
            [(0.0, FULL), (1.0, {1: 10, 2: 5, 4: 2, 8: 0}), (10.0, FULL)],
            id="a pod still running holds its GPUs to the end; a pending pod holds none",
        ),
    ],
)
def test_fragmentation(pods: list[PodRecord], expected: list[tuple[float, dict[int, int]]]) -> None:
    assert fragmentation(make_run(pods, {"a": 8, "b": 4, "cpu": 0})) == expected


@pytest.mark.parametrize(
    ("pods", "expected"),
    [
        pytest.param([], [(0.0, 0)], id="none"),
        pytest.param(
            [pod("p", created=1, bound=2), pod("q", created=1.5, bound=4), pod("r", created=3)],
            [(0.0, 0), (1.0, 1), (1.5, 2), (2.0, 1), (3.0, 2), (4.0, 1)],
            id="pending from creation to binding; never bound: to the end",
        ),
        pytest.param(
            [pod("p", created=1, finished=2), pod("q", created=2, bound=2)],
            [(0.0, 0), (1.0, 1), (2.0, 0)],
            id="deleted unbound leaves at its finish; bound at once never counts",
        ),
    ],
)
def test_queue_length(pods: list[PodRecord], expected: list[tuple[float, int]]) -> None:
    assert queue_length(make_run(pods, {"a": 8})) == expected


@pytest.mark.parametrize(
    ("pods", "nodes", "max_rows", "labels", "matrix"),
    [
        pytest.param(
            [
                pod("p", "a", (0, 1), bound=0.5, finished=2.0),
                pod("q", "b", (3,), bound=3, finished=9),
            ],
            {"a": 8, "b": 8, "cpu": 0},
            64,
            ["a", "b"],
            [[1.0, 2.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]],
            id="mean GPUs held per bin; nodes without GPUs left out",
        ),
        pytest.param(
            [pod("p", "a", (0,), bound=0, finished=4), pod("q", "b", (0, 1, 2), bound=0)],
            {"a": 8, "b": 8, "c": 8},
            2,
            ["a .. b", "c"],
            [[2.0, 2.0, 2.0, 2.0], [0.0, 0.0, 0.0, 0.0]],
            id="more nodes than rows: a row is the mean of its nodes",
        ),
    ],
)
def test_gpu_allocation(
    pods: list[PodRecord],
    nodes: dict[str, int],
    max_rows: int,
    labels: list[str],
    matrix: list[list[float]],
) -> None:
    run = make_run(pods, nodes, elapsed=4.0)
    assert gpu_allocation(run, Bins(1.0, 4), max_rows=max_rows) == (labels, matrix)


@pytest.mark.parametrize(
    ("elapsed", "bins"),
    [(0.0, Bins(0.5, 1)), (3.2, Bins(0.5, 7)), (100.0, Bins(0.5, 200)), (1000.0, Bins(5.0, 200))],
)
def test_time_bins(elapsed: float, bins: Bins) -> None:
    assert time_bins(elapsed) == bins


def test_binds_per_bin_and_latency_per_priority() -> None:
    run = make_run(
        [
            pod("a", "a", (0,), created=0.0, bound=0.2, priority=2),
            pod("b", "a", (1,), created=0.5, bound=1.5, priority=0, spec_priority=1000),
            pod("c", "a", (2,), created=1.0, bound=1.25, priority=2),
            pod("d", created=1.0),
        ],
        {"a": 8},
        elapsed=3.0,
    )
    assert binds_per_bin(run, Bins(1.0, 3)) == [1, 2, 0]
    assert latencies_by_priority(run) == {
        "priority 0 (spec.priority 1000)": [1.0],
        "priority 2": [pytest.approx(0.2), 0.25],
    }


@pytest.mark.parametrize(
    ("values", "p", "expected"),
    [([], 50, 0.0), ([3.0, 1.0, 2.0], 50, 2.0), ([1.0, 2.0], 99, 2.0), ([5.0], 0, 5.0)],
)
def test_percentile(values: list[float], p: float, expected: float) -> None:
    assert percentile(values, p) == expected
    assert RunReport(latencies=values).percentile(p) == expected


@pytest.mark.parametrize(
    ("level", "value", "name"),
    [(2, 0, "priority 2"), (0, 1000, "priority 0 (spec.priority 1000)")],
)
def test_priority_name(level: int, value: int, name: str) -> None:
    assert priority_name(level, value) == name


def test_summary_rows_and_page_escape_what_the_run_holds() -> None:
    run = make_run([pod("p", "a", (0,), bound=1.0)], {"a": 8})
    run = run.model_copy(
        update={
            "workload": "<w>",
            "summary": run.summary.model_copy(
                update={"pending": {"default/x": "0/1 nodes <are> available"}, "created": 2}
            ),
        }
    )
    rows = dict(summary_rows(run))
    assert rows["workload"] == "<w> on c, 10.0 s"
    assert rows["pending: 1 pod(s)"] == "0/1 nodes <are> available"
    page = render_html(run, images=dict.fromkeys(FIGURES, b"png"))
    assert "&lt;w&gt;" in page
    assert "0/1 nodes &lt;are&gt; available" in page
    assert "<w>" not in page
    assert page.count("data:image/png;base64,cG5n") == len(FIGURES)


def test_write_pngs_of_a_hand_made_run(tmp_path: Path) -> None:
    run = make_run([pod("p", "a", (0, 1), bound=1.0, finished=3.0), pod("q")], {"a": 8})
    written = write_pngs(run, tmp_path / "png")
    assert sorted(p.name for p in written) == sorted(f"{n}.png" for n in [*FIGURES, "overview"])


@pytest.mark.parametrize(
    ("low", "high", "first", "last", "log"),
    [
        (5.0, 5.0, 4.5, 5.5, False),
        (0.0, 40.0, 0.0, 40.0, False),
        (4.0, 40000.0, 4.0, 40000.0, True),
    ],
)
def test_latency_histogram_bins_go_logarithmic_over_a_wide_range(
    low: float, high: float, first: float, last: float, log: bool
) -> None:
    edges, is_log = _histogram_edges(low, high)
    assert (edges[0], pytest.approx(edges[-1]), is_log) == (first, last, log)
