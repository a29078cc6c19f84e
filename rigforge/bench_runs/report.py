"""Controller-side reading of a benchmark result: a markdown table, a PNG plot and a verdict.

The result is the JSON written by ``python3 -m rigforge.bench`` on the rig. Failed cells
and failed sanity checks never turn into numbers here: they are shown and judged as failures.

Example::

    result = json.loads(Path("result.json").read_text())
    print(render_markdown(result))
    render_plot(result, Path("bench.png"))
    verdict = judge(result, profile.bench.floors)
    print(verdict.render())
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rigforge.bench.config import COMPLETIONS, CellKind, cell_where

DASH = "–"


@dataclass(frozen=True)
class Floor:
    """A minimum the rig must reach in one cell; a None minimum is not judged."""

    concurrency: int
    input_tokens: int
    min_output_tps: float | None = None
    min_decode_tps_per_user: float | None = None


@dataclass(frozen=True)
class VerdictLine:
    """One judged item with the numbers behind it."""

    name: str
    passed: bool
    detail: str


@dataclass(frozen=True)
class Verdict:
    """Pass only if every line passed."""

    passed: bool
    lines: tuple[VerdictLine, ...]

    def render(self) -> str:
        """Human-readable lines, the overall verdict last."""
        text = [f"{'PASS' if line.passed else 'FAIL'} {line.name}: {line.detail}" for line in self.lines]
        failed = sum(1 for line in self.lines if not line.passed)
        text.append(f"bench verdict: {'PASS' if self.passed else 'FAIL'} ({failed} of {len(self.lines)} failed)")
        return "\n".join(text)


def as_floor(item: Any) -> Floor:
    """A Floor from a mapping or any object with the same attribute names (e.g. the profile's model)."""

    def read(name: str) -> Any:
        return item.get(name) if isinstance(item, Mapping) else getattr(item, name, None)

    return Floor(
        concurrency=int(read("concurrency")),
        input_tokens=int(read("input_tokens")),
        min_output_tps=read("min_output_tps"),
        min_decode_tps_per_user=read("min_decode_tps_per_user"),
    )


def find_cell(result: Mapping[str, Any], concurrency: int, input_tokens: int,
              kind: CellKind = COMPLETIONS) -> Mapping[str, Any] | None:
    """The measured cell of ``kind`` (default: a completion cell, what floors name) for (concurrency,
    input_tokens), if the run had one."""
    for cell in result.get("cells", []):
        if (cell["concurrency"], cell["input_tokens"], CellKind.of(cell)) == (concurrency, input_tokens, kind):
            return cell
    return None


def median_decode(metrics: Mapping[str, Any]) -> float | None:
    """Median per-user decode rate (1/TPOT) of a cell's metrics."""
    summary = metrics.get("decode_tps_per_user") or {}
    return summary.get("median")


def judge_floor(result: Mapping[str, Any], floor: Floor) -> VerdictLine:
    """Compare one floor with its cell; a missing or failed cell fails the floor."""
    name = f"floor C={floor.concurrency} in={floor.input_tokens}"
    cell = find_cell(result, floor.concurrency, floor.input_tokens)
    if cell is None:
        return VerdictLine(name, False, "no such cell in the result")
    if cell["status"] != "ok" or not cell.get("metrics"):
        return VerdictLine(name, False, f"cell failed: {cell.get('reason')}")
    metrics = cell["metrics"]
    parts, passed = [], True
    if floor.min_output_tps is not None:
        value = metrics["output_throughput"]
        passed = passed and value >= floor.min_output_tps
        parts.append(f"output {value:.1f} tok/s (min {floor.min_output_tps:g})")
    if floor.min_decode_tps_per_user is not None:
        value = median_decode(metrics)
        passed = passed and value is not None and value >= floor.min_decode_tps_per_user
        shown = DASH if value is None else f"{value:.1f}"
        parts.append(f"decode/user median {shown} tok/s (min {floor.min_decode_tps_per_user:g})")
    return VerdictLine(name, passed, ", ".join(parts) or "no minimum set")


def judge(result: Mapping[str, Any], floors: Sequence[Any]) -> Verdict:
    """Pure verdict: failed probes, failed cells and every floor each give a line; any failure fails."""
    lines = [
        VerdictLine(f"sanity {probe['name']}", bool(probe["passed"]), probe["detail"])
        for probe in result.get("sanity", {}).get("probes", [])
    ]
    for cell in result.get("cells", []):
        if cell["status"] != "ok":
            where = f"cell {cell_where(cell)}"
            lines.append(VerdictLine(where, False, f"failed: {cell.get('reason')}"))
    if not result.get("cells"):
        lines.append(VerdictLine("cells", False, "the result holds no cells"))
    lines += [judge_floor(result, as_floor(floor)) for floor in floors]
    return Verdict(passed=all(line.passed for line in lines), lines=tuple(lines))


def _fmt(value: Any, digits: int = 1) -> str:
    """A number for the table, or a dash."""
    return DASH if value is None else f"{value:.{digits}f}"


def _stat(metrics: Mapping[str, Any], key: str, stat: str) -> Any:
    """metrics[key][stat] or None."""
    return (metrics.get(key) or {}).get(stat)


def table_row(cell: Mapping[str, Any]) -> str:
    """One markdown row; a failed cell shows its reason instead of numbers."""
    head = f"| {cell['concurrency']} | {cell['input_tokens']} | {cell['output_tokens']} |"
    if cell["status"] != "ok" or not cell.get("metrics"):
        reason = " ".join(str(cell.get("reason") or "failed").split()).replace("|", "/")[:160]
        return head + f" FAILED: {reason} |" + " |" * (TABLE_HEADER.count("|") - 5)
    metrics = cell["metrics"]
    server = cell.get("server") or {}
    match = {True: "yes", False: "NO"}.get(server.get("tokens_match"), DASH) if server.get("available") else DASH
    values = [
        str(metrics["completed"]),
        _fmt(metrics["output_throughput"]),
        _fmt(median_decode(metrics)),
        _fmt(_stat(metrics, "ttft_ms", "median")),
        _fmt(_stat(metrics, "ttft_ms", "p99")),
        _fmt(_stat(metrics, "tpot_ms", "median"), 2),
        _fmt(_stat(metrics, "itl_ms", "p99"), 2),
        _fmt(_stat(metrics, "server_decode_tps_per_user", "median")),
        match,
        f"{metrics['total_output_tokens']}/{metrics['total_output_chunks']}",
    ]
    return head + " ok | " + " | ".join(values) + " |"


TABLE_HEADER = (
    "| C | in | out | status | req | output tok/s | decode tok/s/user | TTFT ms p50 | TTFT ms p99 "
    "| TPOT ms p50 | ITL ms p99 | server tok/s/user | server tokens = usage | tokens/chunks |"
)


def render_markdown(result: Mapping[str, Any]) -> str:
    """A markdown report: run metadata, sanity, and one table row per cell."""
    metadata = result.get("metadata") or {}
    lines = [f"## Bench result: {result.get('status', 'unknown').upper()}", ""]
    lines += [f"- {key}: {value}" for key, value in sorted(metadata.items())]
    lines.append(f"- run: {result.get('started')} → {result.get('finished')}")
    for probe in result.get("sanity", {}).get("probes", []):
        lines.append(f"- sanity {probe['name']}: {'ok' if probe['passed'] else 'FAILED'} ({probe['detail']})")
    for kind, cells in cells_by_kind(result).items():
        if kind != COMPLETIONS:
            lines += ["", f"{kind.label} cells ({kind.endpoint} endpoint, the server's chat template):"]
        lines += ["", TABLE_HEADER, _separator(), *[table_row(cell) for cell in cells]]
    lines += ["", "Token counts are the server's usage.completion_tokens; chunks are streamed events with text."]
    return "\n".join(lines) + "\n"


def cells_by_kind(result: Mapping[str, Any]) -> dict[CellKind, list[Mapping[str, Any]]]:
    """The result's cells grouped by kind, completion cells first, each group in run order."""
    groups: dict[CellKind, list[Mapping[str, Any]]] = {COMPLETIONS: []}
    for cell in result.get("cells", []):
        groups.setdefault(CellKind.of(cell), []).append(cell)
    return {kind: cells for kind, cells in groups.items() if cells or kind == COMPLETIONS}


def _separator() -> str:
    """The markdown separator row matching TABLE_HEADER."""
    return "|" + "---|" * (TABLE_HEADER.count("|") - 1)


def render_plot(result: Mapping[str, Any], png_path: Path) -> Path:
    """Decode tok/s per user and system output tok/s against concurrency, one line per input length."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # Agg: no display needed on the controller
    from matplotlib.figure import Figure

    figure = Figure(figsize=(11, 4.5), dpi=110)
    FigureCanvasAgg(figure)
    per_user, system = figure.subplots(1, 2)
    ok_cells = [cell for cell in result.get("cells", []) if cell["status"] == "ok" and cell.get("metrics")]
    lines = sorted({(CellKind.of(cell) != COMPLETIONS, CellKind.of(cell).label, cell["input_tokens"])
                    for cell in ok_cells})
    for _, label, input_tokens in lines:
        cells = sorted((cell for cell in ok_cells if cell["input_tokens"] == input_tokens
                        and CellKind.of(cell).label == label), key=lambda c: c["concurrency"])
        concurrency = [cell["concurrency"] for cell in cells]
        name = f"in={input_tokens}" if label == COMPLETIONS.label else f"in={input_tokens} {label}"
        per_user.plot(concurrency, [median_decode(cell["metrics"]) for cell in cells], marker="o", label=name)
        system.plot(concurrency, [cell["metrics"]["output_throughput"] for cell in cells], marker="o", label=name)
    metadata = result.get("metadata") or {}
    title = " ".join(str(metadata[key]) for key in ("profile", "host", "engine") if key in metadata)
    levels = sorted({cell["concurrency"] for cell in ok_cells})
    for axes, label in ((per_user, "decode tok/s per user (median 1/TPOT)"), (system, "output tok/s (system)")):
        axes.set_xscale("log", base=2)
        axes.set_xticks(levels, [str(level) for level in levels])
        axes.minorticks_off()
        axes.set_xlabel("concurrency")
        axes.set_ylabel(label)
        axes.grid(True, alpha=0.3)
        if ok_cells:
            axes.legend()
    figure.suptitle(f"{title} — {result.get('status', 'unknown')}".strip(" —"))
    figure.tight_layout()
    png_path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(png_path)
    return png_path
