"""``gpusched status`` output: a table (plain or ``wide``), or the JSON/YAML document.

The table has three parts: one row per GPU (the node's name, pool and state on its first row
only), the totals per GPU product and per pool, and the pending GPU pods with the scheduler's
first reason. VRAM is shown in GiB with one decimal, *reserved/total*: what the scheduler's
device records reserve. ``wide`` adds the UUID, the agent's utilisation and temperature, the
health reason, a row per MIG device with its holder, the pending pods' scheduler, and pending
messages in full. Colour (ANSI) only when asked: unhealthy GPUs and nodes not ready in red,
free GPUs in green, pending reasons in yellow.

JSON and YAML print :meth:`ClusterStatus.to_dict` (its schema: docs/status.md).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Final, Literal

import yaml

from gpusched.status.model import ClusterStatus, GPUState, NodeState, Totals

__all__ = ["OUTPUTS", "Output", "render"]

Output = Literal["table", "wide", "json", "yaml"]
OUTPUTS: Final[tuple[Output, ...]] = ("table", "wide", "json", "yaml")

_RED: Final = "\x1b[31m"
_GREEN: Final = "\x1b[32m"
_YELLOW: Final = "\x1b[33m"
_BOLD: Final = "\x1b[1m"
_RESET: Final = "\x1b[0m"
_MESSAGE_WIDTH: Final = 100
"""Characters of a pending pod's message the plain table shows (``wide``: all of it)."""

Cell = tuple[str, str]
"""Text and its ANSI style ("" for none)."""


def render(status: ClusterStatus, output: Output = "table", *, color: bool = False) -> str:
    """``status`` as text ending in a newline."""
    if output == "json":
        return json.dumps(status.to_dict(), indent=2) + "\n"
    if output == "yaml":
        text: str = yaml.safe_dump(status.to_dict(), sort_keys=False)
        return text
    return _tables(status, wide=output == "wide", color=color)


def _gib(mib: int) -> str:
    return f"{mib / 1024:.1f}"


def _vram(reserved: int, total: int) -> str:
    return f"{_gib(reserved)}/{_gib(total)} GiB"


def _table(header: Sequence[str], rows: Sequence[Sequence[Cell]], color: bool) -> list[str]:
    widths = [len(h) for h in header]
    for row in rows:
        for i, (text, _) in enumerate(row):
            widths[i] = max(widths[i], len(text))
    last = len(header) - 1

    def line(cells: Sequence[Cell]) -> str:
        parts = []
        for i, (text, style) in enumerate(cells):
            padded = text if i == last else text.ljust(widths[i])
            parts.append(f"{style}{padded}{_RESET}" if color and style and text else padded)
        return "  ".join(parts).rstrip()

    head = line([(h, _BOLD) for h in header])
    return [head, *(line(row) for row in rows)]


def _node_state(node: NodeState) -> Cell:
    if not node.ready:
        return ("NotReady", _RED)
    if not node.schedulable:
        return ("Ready,SchedulingDisabled", _YELLOW)
    return ("Ready", "")


def _mode(gpu: GPUState) -> Cell:
    if gpu.mode == "mig":
        held = sum(1 for m in gpu.mig if m.holder)
        return (f"mig {held}/{len(gpu.mig)}", "")
    return (gpu.mode, _GREEN if gpu.mode == "free" and gpu.healthy else "")


def _pods(gpu: GPUState) -> str:
    if gpu.mode == "mig":
        names = [f"{m.holder} ({m.profile})" for m in gpu.mig if m.holder]
    elif gpu.mode == "shared":
        names = [f"{c.key} ({_gib(c.reserved_mib)})" for c in gpu.clients]
    else:
        names = [c.key for c in gpu.clients]
    if gpu.hidden_clients:
        names.append(f"+{gpu.hidden_clients} in other namespaces")
    if gpu.claim and not gpu.clients:
        names.append(f"claim {gpu.claim}")
    return ", ".join(names) or "-"


def _used(gpu: GPUState) -> str:
    return "-" if gpu.used_mib is None else f"{_gib(gpu.used_mib)} GiB"


def _gpu_rows(status: ClusterStatus, wide: bool) -> list[list[Cell]]:
    rows: list[list[Cell]] = []
    for node in status.nodes:
        first: list[Cell] = [(node.name, _BOLD), (node.pool or "-", ""), _node_state(node)]
        blank: list[Cell] = [("", ""), ("", ""), ("", "")]
        if not node.gpus:
            rows.append([*first, ("-", ""), (node.problem or "no GPUs", _RED)])
            continue
        for k, gpu in enumerate(node.gpus):
            health: Cell = ("ok", "") if gpu.healthy else ("UNHEALTHY", _RED)
            row = [
                *(first if k == 0 else blank),
                (str(gpu.index), ""),
                (gpu.product, ""),
                (_vram(gpu.reserved_mib, gpu.memory_mib), ""),
                (_used(gpu), ""),
                _mode(gpu),
                health,
            ]
            if wide:
                util = "-" if gpu.utilization_percent is None else f"{gpu.utilization_percent}%"
                temp = "-" if gpu.temperature_c is None else f"{gpu.temperature_c}C"
                row += [(gpu.uuid, ""), (util, ""), (temp, "")]
            pods = _pods(gpu)
            if wide and gpu.health_reason:
                pods = f"{pods}  [{gpu.health_reason}]"
            row.append((pods, ""))
            rows.append(row)
            if wide:
                for m in gpu.mig:
                    rows.append(
                        [
                            *blank,
                            ("", ""),
                            (f"  MIG {m.profile}", ""),
                            (f"{_gib(m.memory_mib)} GiB", ""),
                            ("", ""),
                            ("held" if m.holder else "free", "" if m.holder else _GREEN),
                            ("", ""),
                            (m.uuid, ""),
                            ("", ""),
                            ("", ""),
                            (m.holder or "-", ""),
                        ]
                    )
        if node.gpus and node.problem:
            rows.append([*blank, ("!", _RED), (node.problem, _RED)])
        if node.other_pods:
            rows.append(
                [
                    *blank,
                    ("?", ""),
                    ("pods with no device record: " + ", ".join(node.other_pods), ""),
                ]
            )
    return rows


def _pad(rows: list[list[Cell]], width: int) -> list[list[Cell]]:
    """Rows that end early (notes) padded with empty cells, their last text moved last."""
    out = []
    for row in rows:
        if len(row) < width:
            *head, tail = row
            row = [*head, *([("", "")] * (width - len(row))), tail]
        out.append(row)
    return out


def _totals_rows(totals: Sequence[Totals]) -> list[list[Cell]]:
    rows: list[list[Cell]] = []
    for t in totals:
        rows.append(
            [
                (t.name, ""),
                (str(t.gpus), ""),
                (str(t.in_use), ""),
                (str(t.free), _GREEN if t.free else ""),
                (str(t.unhealthy), _RED if t.unhealthy else ""),
                (_vram(t.reserved_mib, t.memory_mib), ""),
                ("-" if t.used_mib is None else f"{_gib(t.used_mib)} GiB", ""),
            ]
        )
    return rows


def _tables(status: ClusterStatus, *, wide: bool, color: bool) -> str:
    lines: list[str] = []
    header = ["NODE", "POOL", "STATUS", "GPU", "PRODUCT", "VRAM RESERVED", "USED", "MODE"]
    header += ["HEALTH", *(["UUID", "UTIL", "TEMP"] if wide else []), "PODS"]
    if status.nodes:
        lines += _table(header, _pad(_gpu_rows(status, wide), len(header)), color)
    else:
        lines.append("No GPU nodes.")
    totals_header = ["GPUS", "IN USE", "FREE", "UNHEALTHY", "VRAM RESERVED", "USED"]
    if status.products:
        lines.append("")
        lines += _table(["PRODUCT", *totals_header], _totals_rows(status.products), color)
        lines.append("")
        lines += _table(["POOL", *totals_header], _totals_rows(status.pools), color)
    lines.append("")
    if status.pending:
        rows: list[list[Cell]] = []
        for p in status.pending:
            message = p.message if wide else p.message.splitlines()[0] if p.message else ""
            if not wide and len(message) > _MESSAGE_WIDTH:
                message = message[: _MESSAGE_WIDTH - 3] + "..."
            reason = f"{p.reason}: {message}" if p.reason and message else p.reason or message
            row = [(p.key, ""), (p.request, "")]
            if wide:
                row.append((p.scheduler_name, ""))
            row.append((reason or "not tried yet", _YELLOW))
            rows.append(row)
        pending_header = ["PENDING POD", "REQUEST", *(["SCHEDULER"] if wide else []), "REASON"]
        lines += _table(pending_header, rows, color)
    else:
        where = f" in namespace {status.namespace}" if status.namespace else ""
        lines.append(f"No pending GPU pods{where}.")
    for note in status.notes:
        lines.append(f"note: {note}")
    return "\n".join(lines) + "\n"
