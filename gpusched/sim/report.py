"""What a ``gpusched sim run`` saw, as data (``--output run.json``) and as a page (``--report``).

**run.json** (:class:`RunFile`: ``kind: gpusched.io/sim-run``, ``version: 1``) holds every pod
of the workload as the run's watch saw it (node, GPU indices, VRAM, claim kind, priority,
created / bound / started / finished times, the PodScheduled messages of its pending spell),
each node's pool, product and GPU count, and the summary (:class:`Summary`: the ``RunReport``
fields). Times are seconds since the workload's first arrival was due. Field descriptions are
the models' docstrings (``RunFile.model_json_schema()`` prints them); names are camelCase, as
in Kubernetes objects. ``version`` changes when a field is removed or changes meaning, not
when one is added; :func:`load_run` refuses a version it does not know. Written atomically
(a temporary file beside it, then a rename): a reader never sees half a file.

**The report** is made from a ``RunFile`` alone, so ``gpusched sim report run.json`` makes it
later. Pure functions turn the run into series (:func:`gpu_allocation`, :func:`queue_length`,
:func:`binds_per_bin`, :func:`latencies_by_priority`, :func:`fragmentation`); matplotlib, the
optional extra ``report`` (imported only when drawing), draws each on an Axes; the page embeds
them as base64 PNG images beside the summary table: one file, nothing fetched when opened.
Why not a core dependency: the scheduler, the agent and the webhook never draw, and matplotlib
brings numpy, Pillow and fonttools into every image.

Costs: each series is O(pods x GPUs per pod) plus O(nodes x bins) for the heat map (at most
:data:`MAX_BINS` time bins, nodes grouped into at most :data:`MAX_ROWS` rows); drawing is about
a second for the four figures; run.json is about 0.5 kB a pod.
"""

from __future__ import annotations

import base64
import html
import io
import json
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.alias_generators import to_camel

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "FIGURES",
    "FRAGMENT_SIZES",
    "KIND",
    "MAX_BINS",
    "MAX_ROWS",
    "VERSION",
    "Bins",
    "NodeRecord",
    "PendingReason",
    "PlottingUnavailable",
    "PodRecord",
    "RunFile",
    "RunFileError",
    "Summary",
    "binds_per_bin",
    "format_mib",
    "fragmentation",
    "gpu_allocation",
    "latencies_by_priority",
    "load_run",
    "percentile",
    "priority_name",
    "queue_length",
    "render_html",
    "require_plotting",
    "summary_rows",
    "time_bins",
    "write_atomic",
    "write_pngs",
    "write_report",
    "write_run",
]

KIND: Final = "gpusched.io/sim-run"
VERSION: Final = 1
MAX_BINS: Final = 200
"""Time bins of the heat map and the bind rate, at most."""
MAX_ROWS: Final = 64
"""Heat map rows at most: a larger fleet's nodes are grouped, consecutive by name, per row."""
FRAGMENT_SIZES: Final = (1, 2, 4, 8)
"""The GPU counts whose requests :func:`fragmentation` counts."""
INSTALL_HINT: Final = (
    "the report needs matplotlib: pip install 'gpusched[report]' (or pip install matplotlib)"
)


class _Model(BaseModel):
    """Closed and immutable; Python names snake_case, JSON names camelCase."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        use_attribute_docstrings=True,
    )


class PendingReason(_Model):
    at: float
    """Seconds since the start when the watch first saw this message."""
    reason: str
    """The pod's ``PodScheduled`` condition reason (``Unschedulable``, ``SchedulerError``)."""
    message: str
    """Its message: the scheduler's ``FailedScheduling`` text."""


class PodRecord(_Model):
    namespace: str
    name: str
    wave: str
    """The workload wave that made it (label ``gpusched.io/wave``)."""
    priority: int
    """gpusched priority level (``gpusched.io/priority``; 0 is the highest; docs/priority.md)."""
    spec_priority: int
    """``spec.priority`` (from its PriorityClass), 0 when unset."""
    shape: str
    """How it asks for GPUs: ``whole``, ``shared``, ``exclusive``, ``MIG``, ``DRA`` or ``""``."""
    claim: Literal["gpuclaim", "dra"] | None
    """Its claim kind (a wave's ``claim:``), null for none."""
    node: str | None
    """``spec.nodeName`` once bound."""
    gpus: list[int]
    """GPU indices on the node it holds (``gpusched.io/gpu-ids``; for a DRA pod, the GPUs of its
    claim's allocated devices); a MIG device counts as its GPU."""
    gpu_uuids: list[str]
    """``gpusched.io/gpu-uuids``, one per index (MIG devices by their own UUID); may be empty."""
    vram_mib: list[int]
    """VRAM reserved per GPU of ``gpus`` (``gpusched.io/reserved-vram-mib``); empty when not
    annotated (the whole GPU)."""
    created: float
    """When the watch first saw the pod."""
    bound: float | None
    """When it first saw ``spec.nodeName`` set."""
    started: float | None
    """When it first saw phase Running."""
    finished: float | None
    """When it first saw phase Succeeded or Failed, or the pod deleted: its GPUs free again."""
    phase: str
    """The last phase seen."""
    deleted: bool
    """The pod was deleted during the run (preempted pods are)."""
    preempted: bool
    """A ``DisruptionTarget`` condition was seen: evicted for a higher-priority pod."""
    pending_reasons: list[PendingReason]
    """Each distinct ``PodScheduled=False`` message seen, in order."""


class NodeRecord(_Model):
    name: str
    pool: str
    product: str | None
    """Its GPUs' product (``nvidia.com/gpu.product``), null without GPUs."""
    gpus: int
    """Its GPU count."""


class Summary(_Model):
    """The run's ``RunReport`` (gpusched.sim.run), as printed at its end; seconds, MiB."""

    created: int
    bound: int
    succeeded: int
    failed: int
    preempted: int
    pending: dict[str, str]
    """``namespace/name`` -> its last PodScheduled message, for pods never bound."""
    latencies: list[float]
    """Creation to binding, seconds, one per bound pod."""
    latencies_by_priority: dict[str, list[float]]
    """:func:`priority_name` -> its pods' latencies."""
    gpu_seconds_used: dict[str, float]
    """Pool -> GPU-seconds held by Running pods."""
    gpu_seconds_total: dict[str, float]
    """Pool -> GPU-seconds of all its GPUs over the run."""
    elapsed: float
    gpus_by_pool: dict[str, int]
    mig_fallbacks: dict[str, int]
    """``"2g.20gb->1g.10gb"`` -> pods the admission webhook moved to a fallback profile."""
    vram_total_mib: dict[str, int]
    """GPU product -> VRAM of all its GPUs."""
    vram_peak_mib: dict[str, int]
    """GPU product -> most VRAM reserved at once."""
    pods_by_product: dict[str, dict[str, int]]
    """GPU product -> pod shape -> pods bound on it."""
    claim_pods: dict[str, int]
    claim_bound: dict[str, int]
    claim_allocated: dict[str, int]
    gpuclaims_deleted: int
    gpuclaims_left: int


class RunFile(_Model):
    kind: Literal["gpusched.io/sim-run"] = KIND
    version: Literal[1] = VERSION
    cluster: str
    """The cluster spec's name."""
    workload: str
    """The workload's name."""
    description: str = ""
    """The workload's description."""
    started_at: str
    """Wall-clock UTC time (RFC 3339) of time 0."""
    nodes: list[NodeRecord]
    pods: list[PodRecord]
    summary: Summary


class RunFileError(ValueError):
    """A file that is not a run.json this gpusched reads; the message says why."""


class PlottingUnavailable(RuntimeError):
    """matplotlib is not installed; the message says how to install it."""


def load_run(path: str | Path) -> RunFile:
    """Read and validate a run.json; :class:`RunFileError` names what is wrong."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise RunFileError(f"{path}: {exc}") from None
    if not isinstance(data, dict) or data.get("kind") != KIND:
        raise RunFileError(f'{path}: not a run file (wants "kind": "{KIND}")')
    if data.get("version") != VERSION:
        raise RunFileError(
            f"{path}: version {data.get('version')!r}; this gpusched reads version {VERSION}"
        )
    try:
        return RunFile.model_validate(data)
    except ValidationError as exc:
        raise RunFileError(f"{path}: {exc}") from None


def write_atomic(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file beside it and a rename."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def write_run(run: RunFile, path: str | Path) -> None:
    write_atomic(path, run.model_dump_json(indent=1).encode() + b"\n")


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest rank (the summary's rule): the value at ``int(p/100 * n)`` of the sorted values;
    0.0 for none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(int(p / 100 * len(ordered)), len(ordered) - 1)]


def format_mib(mib: float) -> str:
    """``319488`` -> ``"312Gi"``, ``1335296`` -> ``"1.3Ti"``, ``512`` -> ``"512Mi"``."""
    if mib >= 1 << 20:
        return f"{mib / (1 << 20):.1f}Ti"
    if mib >= 10 << 10:
        return f"{mib / 1024:.0f}Gi"
    if mib >= 1024:
        return f"{mib / 1024:.1f}Gi"
    return f"{mib:.0f}Mi"


def priority_name(level: int, spec_priority: int) -> str:
    """``"priority 2"``, ``"priority 0 (spec.priority 1000)"``: how the summary names it."""
    return f"priority {level}" + (f" (spec.priority {spec_priority})" if spec_priority else "")


# --- series: pure functions of the run data --------------------------------------------------


@dataclass(frozen=True, slots=True)
class Bins:
    """``count`` equal time bins of ``width`` seconds from 0."""

    width: float
    count: int

    def edges(self) -> list[float]:
        return [i * self.width for i in range(self.count + 1)]


def time_bins(elapsed: float, *, max_bins: int = MAX_BINS, min_width: float = 0.5) -> Bins:
    """Bins of at least ``min_width`` seconds, at most ``max_bins``, covering ``elapsed``."""
    width = max(min_width, elapsed / max_bins)
    return Bins(width, max(1, min(max_bins, -int(-elapsed // width))))


def _held(run: RunFile) -> dict[tuple[str, int], list[tuple[float, float]]]:
    """(node, GPU index) -> the merged intervals while some pod held it (bound to finished, or
    to the end of the run)."""
    spans: dict[tuple[str, int], list[tuple[float, float]]] = {}
    end = run.summary.elapsed
    for pod in run.pods:
        if pod.node is None or pod.bound is None:
            continue
        stop = pod.finished if pod.finished is not None else max(end, pod.bound)
        for index in set(pod.gpus):
            spans.setdefault((pod.node, index), []).append((pod.bound, stop))
    merged: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for key, intervals in spans.items():
        out: list[tuple[float, float]] = []
        for a, b in sorted(intervals):
            if out and a <= out[-1][1]:
                out[-1] = (out[-1][0], max(out[-1][1], b))
            else:
                out.append((a, b))
        merged[key] = out
    return merged


def gpu_allocation(
    run: RunFile, bins: Bins, *, max_rows: int = MAX_ROWS
) -> tuple[list[str], list[list[float]]]:
    """The heat map: row labels and, per row and bin, the mean GPUs held on a node of that row
    over the bin (a GPU counts while any pod holds any part of it). Nodes without GPUs are left
    out; more than ``max_rows`` nodes are grouped in name order (``"a .. b"``)."""
    nodes = [n for n in run.nodes if n.gpus]
    row_of: dict[str, int] = {}
    labels: list[str] = []
    per_row = max(1, -(-len(nodes) // max_rows))
    for i in range(0, len(nodes), per_row):
        group = nodes[i : i + per_row]
        for n in group:
            row_of[n.name] = len(labels)
        labels.append(group[0].name if len(group) == 1 else f"{group[0].name} .. {group[-1].name}")
    sums = [[0.0] * bins.count for _ in labels]
    for (node, _), intervals in _held(run).items():
        row = row_of.get(node)
        if row is None:
            continue
        for a, b in intervals:
            first = min(int(a // bins.width), bins.count - 1)
            last = min(int(b // bins.width), bins.count - 1)
            for i in range(first, last + 1):
                lo, hi = i * bins.width, (i + 1) * bins.width
                sums[row][i] += max(0.0, min(b, hi) - max(a, lo)) / bins.width
    sizes = Counter(row_of.values())
    return labels, [[v / sizes[r] for v in row] for r, row in enumerate(sums)]


def _steps(events: Iterable[tuple[float, int]]) -> list[tuple[float, int]]:
    """Running total of (time, change) events, one point per distinct time, from (0, 0)."""
    out = [(0.0, 0)]
    total = 0
    for t, delta in sorted(events):
        total += delta
        if out[-1][0] == t:
            out[-1] = (t, total)
        else:
            out.append((t, total))
    return out


def queue_length(run: RunFile) -> list[tuple[float, int]]:
    """Pods created and not yet bound (nor finished unbound) over time, as steps."""
    events: list[tuple[float, int]] = []
    for pod in run.pods:
        events.append((pod.created, 1))
        leave = pod.bound if pod.bound is not None else pod.finished
        if leave is not None:
            events.append((max(leave, pod.created), -1))
    return _steps(events)


def binds_per_bin(run: RunFile, bins: Bins) -> list[int]:
    """Pods bound in each bin (divide by ``bins.width`` for a rate)."""
    counts = [0] * bins.count
    for pod in run.pods:
        if pod.bound is not None:
            counts[min(max(int(pod.bound // bins.width), 0), bins.count - 1)] += 1
    return counts


def latencies_by_priority(run: RunFile) -> dict[str, list[float]]:
    """:func:`priority_name` -> creation-to-binding seconds of its bound pods, highest
    priority (lowest level) first."""
    out: dict[tuple[int, int], list[float]] = {}
    for pod in run.pods:
        if pod.bound is not None:
            out.setdefault((pod.priority, -pod.spec_priority), []).append(pod.bound - pod.created)
    return {priority_name(level, -neg): out[level, neg] for level, neg in sorted(out)}


def fragmentation(
    run: RunFile, sizes: Sequence[int] = FRAGMENT_SIZES
) -> list[tuple[float, dict[int, int]]]:
    """How many requests of each size in ``sizes`` GPUs the cluster could still take, over
    time (steps): per node, free GPUs // size, summed. By free GPU counts alone: a request the
    topology, taints or CPU would refuse still counts. O(GPU intervals x log + nodes)."""
    total = {n.name: n.gpus for n in run.nodes}
    held: Counter[str] = Counter()
    events: list[tuple[float, int, str]] = []
    for (node, _), intervals in _held(run).items():
        if node in total:
            for a, b in intervals:
                events += [(a, 1, node), (b, -1, node)]
    capacity = {k: sum(g // k for g in total.values()) for k in sizes}
    out = [(0.0, dict(capacity))]
    for t, delta, node in sorted(events, key=lambda e: (e[0], e[1])):
        free = total[node] - held[node]
        held[node] += delta
        for k in sizes:
            capacity[k] += (free - delta) // k - free // k
        if out[-1][0] == t:
            out[-1] = (t, dict(capacity))
        else:
            out.append((t, dict(capacity)))
    return out


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def summary_rows(run: RunFile) -> list[tuple[str, str]]:
    """The summary table: (what, value) rows, from the run's ``summary``."""
    s = run.summary
    rows = [
        ("workload", f"{run.workload} on {run.cluster}, {s.elapsed:.1f} s"),
        (
            "pods",
            f"{s.created} created, {s.bound} bound, {s.succeeded} succeeded, {s.failed} failed, "
            f"{s.preempted} preempted, {len(s.pending)} pending",
        ),
    ]
    if s.latencies:
        rows.append(
            (
                "scheduling latency",
                f"p50 {_ms(percentile(s.latencies, 50))}, p90 {_ms(percentile(s.latencies, 90))}, "
                f"p99 {_ms(percentile(s.latencies, 99))}, max {_ms(max(s.latencies))}",
            )
        )
    for label, values in sorted(s.latencies_by_priority.items()):
        rows.append(
            (
                f"latency, {label}",
                f"{len(values)} pods, p50 {_ms(percentile(values, 50))}, "
                f"p99 {_ms(percentile(values, 99))}",
            )
        )
    for pool, total in sorted(s.gpu_seconds_total.items()):
        if total:
            used = s.gpu_seconds_used.get(pool, 0.0)
            rows.append((f"GPU utilisation, pool {pool}", f"{100 * used / total:.0f}%"))
    for product, total in sorted(s.vram_total_mib.items()):
        peak = s.vram_peak_mib.get(product, 0)
        rows.append(
            (
                f"VRAM reserved at peak, {product}",
                f"{format_mib(peak)} of {format_mib(total)} ({100 * peak / total:.0f}%)",
            )
        )
    for kind, pods in sorted(s.claim_pods.items()):
        rows.append(
            (
                f"{kind} pods",
                f"{s.claim_bound.get(kind, 0)} of {pods} bound, "
                f"{s.claim_allocated.get(kind, 0)} with their claim allocated",
            )
        )
    for change, count in sorted(s.mig_fallbacks.items()):
        rows.append(("MIG fallback at admission", f"{count} pod(s) {change}"))
    for message, count in Counter(s.pending.values()).most_common(5):
        rows.append((f"pending: {count} pod(s)", message))
    return rows


# --- drawing (matplotlib, imported here only) ------------------------------------------------


def require_plotting() -> None:
    """Raise :class:`PlottingUnavailable` (how to install it) when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise PlottingUnavailable(INSTALL_HINT) from None


def _figure(width: float = 10.0, height: float = 4.0) -> Figure:
    require_plotting()
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def _draw_allocation(fig: Figure, ax: Axes, run: RunFile) -> None:
    bins = time_bins(run.summary.elapsed)
    labels, matrix = gpu_allocation(run, bins)
    top = max((n.gpus for n in run.nodes), default=1) or 1
    image = ax.imshow(
        matrix or [[0.0]],
        aspect="auto",
        interpolation="nearest",
        cmap="viridis",
        vmin=0,
        vmax=top,
        extent=(0.0, bins.count * bins.width, len(labels) or 1, 0),
    )
    ax.set_yticks([i + 0.5 for i in range(len(labels))], labels if len(labels) <= 32 else [])
    ax.set_xlabel("seconds")
    ax.set_title("GPUs allocated per node")
    fig.colorbar(image, ax=ax, label="GPUs held")


def _draw_queue(fig: Figure, ax: Axes, run: RunFile) -> None:
    steps = queue_length(run)
    steps.append((max(run.summary.elapsed, steps[-1][0]), steps[-1][1]))
    ax.step([t for t, _ in steps], [n for _, n in steps], where="post", color="C0")
    ax.set_ylabel("pods pending", color="C0")
    ax.set_xlabel("seconds")
    bins = time_bins(run.summary.elapsed)
    rate = [n / bins.width for n in binds_per_bin(run, bins)]
    twin = ax.twinx()
    twin.bar(bins.edges()[:-1], rate, width=bins.width, align="edge", color="C1", alpha=0.4)
    twin.set_ylabel("binds per second", color="C1")
    ax.set_zorder(twin.get_zorder() + 1)  # the line over the bars
    ax.patch.set_visible(False)
    ax.set_title("Queue length and bind rate")


def _draw_latency(fig: Figure, ax: Axes, run: RunFile) -> None:
    groups = latencies_by_priority(run)
    values = [v * 1000 for vs in groups.values() for v in vs]
    if not values:
        ax.text(0.5, 0.5, "no pod bound", ha="center", va="center", transform=ax.transAxes)
    else:
        edges, log = _histogram_edges(min(values), max(values))
        if log:
            ax.set_xscale("log")
        for i, (label, latencies) in enumerate(groups.items()):
            ms = [v * 1000 for v in latencies]
            ax.hist(
                ms,
                bins=edges,
                histtype="step",
                linewidth=1.5,
                color=f"C{i}",
                label=f"{label}: {len(ms)} pods, p50 {percentile(ms, 50):.0f} ms, "
                f"p99 {percentile(ms, 99):.0f} ms",
            )
            ax.axvline(percentile(ms, 99), color=f"C{i}", linestyle=":", linewidth=1)
        ax.legend(fontsize="small")
    ax.set_xlabel("creation to binding, ms (dotted: p99)")
    ax.set_ylabel("pods")
    ax.set_title("Scheduling latency per priority")


def _histogram_edges(low: float, high: float, count: int = 40) -> tuple[list[float], bool]:
    """Bin edges over [low, high] and whether they are logarithmic (a range over 100x: binds
    in milliseconds and waits of seconds in one picture)."""
    if high <= low:
        return [low - 0.5, high + 0.5], False
    if low > 0 and high / low > 100:
        ratio = (high / low) ** (1 / count)
        return [low * ratio**i for i in range(count + 1)], True
    step = (high - low) / count
    return [low + i * step for i in range(count + 1)], False


def _draw_fragmentation(fig: Figure, ax: Axes, run: RunFile) -> None:
    steps = fragmentation(run)
    steps.append((max(run.summary.elapsed, steps[-1][0]), steps[-1][1]))
    for k in FRAGMENT_SIZES:
        ax.step(
            [t for t, _ in steps],
            [c[k] for _, c in steps],
            where="post",
            label=f"{k}-GPU requests",
        )
    ax.set_xlabel("seconds")
    ax.set_ylabel("requests that would still fit")
    ax.set_title("Fragmentation: free capacity by request size")
    ax.legend(fontsize="small")


FIGURES: Final = {
    "allocation": ("GPU allocation per node over time", _draw_allocation),
    "queue": ("Queue length and bind rate over time", _draw_queue),
    "latency": ("Scheduling latency per priority (histogram; p50 and p99)", _draw_latency),
    "fragmentation": (
        "Fragmentation: 1/2/4/8-GPU requests the cluster could still take",
        _draw_fragmentation,
    ),
}
"""Figure name -> (caption, drawing function): the report's figures, in order."""


def _figures(run: RunFile) -> dict[str, Figure]:
    out = {}
    for name, (_, draw) in FIGURES.items():
        fig = _figure()
        draw(fig, fig.add_subplot(), run)
        out[name] = fig
    return out


def _overview(run: RunFile) -> Figure:
    """The four figures on one 2 x 2 page (the README's picture)."""
    fig = _figure(16.0, 9.0)
    axes = fig.subplots(2, 2).flat
    for ax, (_, draw) in zip(axes, FIGURES.values(), strict=True):
        draw(fig, ax, run)
    fig.suptitle(f"gpusched sim run: {run.workload} on {run.cluster}")
    return fig


def _png(fig: Figure, dpi: int = 100) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def write_pngs(run: RunFile, directory: str | Path) -> list[Path]:
    """Each figure as ``NAME.png`` and all four as ``overview.png`` in ``directory``."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    figures = {**_figures(run), "overview": _overview(run)}
    for name, fig in figures.items():
        path = out / f"{name}.png"
        write_atomic(path, _png(fig, dpi=80 if name == "overview" else 100))
        written.append(path)
    return written


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1050px; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
td, th { text-align: left; padding: 0.2em 0.8em; border-bottom: 1px solid #ddd;
  vertical-align: top; }
figure { margin: 1.5em 0; } img { max-width: 100%; height: auto; }
figcaption { color: #555; }
"""


def render_html(run: RunFile, images: Mapping[str, bytes] | None = None) -> str:
    """The report page: title, summary table, the figures as base64 PNG ``<img>``. Every text
    from the run is escaped. ``images``: figure name -> PNG (default: drawn here)."""
    if images is None:
        images = {name: _png(fig) for name, fig in _figures(run).items()}
    e = html.escape
    title = f"gpusched sim run: {run.workload} on {run.cluster}"
    rows = "\n".join(f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in summary_rows(run))
    figures = "\n".join(
        f'<figure id="{e(name)}"><img alt="{e(caption)}" src="data:image/png;base64,'
        f'{base64.b64encode(images[name]).decode()}"><figcaption>{e(caption)}</figcaption>'
        "</figure>"
        for name, (caption, _) in FIGURES.items()
        if name in images
    )
    return (
        f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{e(title)}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n"
        f"<h1>{e(title)}</h1>\n<p>{e(run.description)} (started {e(run.started_at)})</p>\n"
        f'<table class="summary">\n{rows}\n</table>\n{figures}\n</body>\n</html>\n'
    )


def write_report(run: RunFile, path: str | Path) -> None:
    write_atomic(path, render_html(run).encode())
