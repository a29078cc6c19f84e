"""A whole benchmark run: probes, then every (input length x concurrency) cell, into one result dict."""

from __future__ import annotations

import copy
import platform
import sys
import time
from datetime import datetime, timezone
from typing import Any, TextIO

from rigforge.bench import chat, sanity
from rigforge.bench.cell import cell_result, failed_cell, run_requests
from rigforge.bench.client import count_tokens, send
from rigforge.bench.config import COMPLETIONS, BenchConfig, CellKind, cell_where
from rigforge.bench.prompts import NonceSource, SizedBody, size_body
from rigforge.bench.quality import quality_line, run_quality
from rigforge.bench.server_metrics import parse_prometheus
from rigforge.bench.transport import get_json, request

SCHEMA_VERSION = 1


def utc_now() -> str:
    """An ISO-8601 UTC timestamp for the result file."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def scrape_metrics(config: BenchConfig) -> dict[str, float] | None:
    """The server's /metrics as summed samples; None when it exposes none."""
    status, text = request(config.root_url, "GET", "/metrics", None, config.request_timeout_s)
    return parse_prometheus(text) if status == 200 else None


def run_probes(config: BenchConfig) -> list[sanity.CheckResult]:
    """Fixed-answer prompts, greedy and free to stop: a broken model or kernel fails here by name."""
    results = []
    kind = CellKind(config.endpoint)
    on_chat = kind.endpoint == "chat"
    for probe in sanity.PROBES:
        max_tokens = probe.max_tokens if not on_chat else 256  # room for a chat model's preamble or reasoning
        record = send(config, kind, probe.prompt, max_tokens, fixed_length=False, origin=time.perf_counter())
        failure = sanity.request_failure(record, expected_output_tokens=None)
        if failure is not None:
            results.append(sanity.CheckResult(probe.name, False, f"{failure.name}: {failure.detail}"))
            continue
        passed = probe.passes(record.text, on_chat)
        results.append(sanity.CheckResult(probe.name, passed, f"{probe.prompt!r} -> {record.text[:120]!r}"))
    return results


def run_cell(config: BenchConfig, kind: CellKind, sized: SizedBody, concurrency: int,
             nonces: NonceSource) -> dict[str, Any]:
    """Warm up, snapshot server counters, run the measured window, snapshot again, and judge."""

    def sender(origin: float) -> Any:
        return send(config, kind, nonces.next_prefix() + sized.body, config.output_tokens, True, origin)

    if config.warmup_requests:
        run_requests(min(concurrency, config.warmup_requests), sender, None, config.warmup_requests)
    before = scrape_metrics(config)
    started = time.perf_counter()
    records = run_requests(concurrency, sender, started + config.cell_seconds, None)
    duration_s = time.perf_counter() - started
    after = scrape_metrics(config)
    target = sized.measured_prompt_tokens
    cell = cell_result(concurrency, sized.target_tokens, records, duration_s, config, target, before, after)
    return kind.stamp(cell)


def run_repeated_cell(config: BenchConfig, kind: CellKind, sized: SizedBody, concurrency: int,
                      nonces: NonceSource) -> dict[str, Any]:
    """The cell measured ``config.repeats`` times: the first repeat's full record plus ``repeats``.

    ``repeats`` holds every repeat's metrics block (None for a failed repeat), so a comparison can
    measure the run-to-run spread; any failed repeat fails the cell with its reason.
    """
    cell = run_cell(config, kind, sized, concurrency, nonces)
    repeats = [copy.deepcopy(cell.get("metrics"))]  # its own copy: the cell's metrics block is not shared
    for index in range(2, config.repeats + 1):
        again = run_cell(config, kind, sized, concurrency, nonces)
        repeats.append(again.get("metrics"))
        if again["status"] != "ok" and cell["status"] == "ok":
            cell.update(status=again["status"], reason=f"repeat {index}: {again.get('reason')}")
        cell["failed_checks"] += [check for check in again["failed_checks"] if check not in cell["failed_checks"]]
    cell["repeats"] = repeats
    return cell


def progress_line(cell: dict[str, Any]) -> str:
    """One line per cell for stderr."""
    head = f"cell {cell_where(cell)} out={cell['output_tokens']}"
    if cell["status"] != "ok":
        return f"{head}: FAILED {cell['reason'][:300]}"
    metrics = cell["metrics"]
    decode = metrics["decode_tps_per_user"] or {}
    ttft = metrics["ttft_ms"] or {}
    return (
        f"{head}: ok {metrics['completed']} req, output {metrics['output_throughput']:.1f} tok/s, "
        f"decode/user median {decode.get('median', 0):.1f} tok/s, TTFT median {ttft.get('median', 0):.1f} ms"
    )


def run_bench(config: BenchConfig, progress: TextIO = sys.stderr) -> dict[str, Any]:
    """Run the probes and every cell; the result says ``ok`` only if every check passed."""
    result: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "metadata": config.metadata, "config": config.as_dict()}
    result["started"] = utc_now()
    result["client"] = {"python": platform.python_version(), "host": platform.node()}
    models = get_json(config.root_url, "/v1/models", config.request_timeout_s)
    if config.quality_only:  # the reference's A/A in another engine start: the answers, no speed
        result.update(server={"models": models}, quality=run_quality(config), sanity={"probes": []}, cells=[],
                      failed_checks=[], status="ok", finished=utc_now())
        print(quality_line(result["quality"]), file=progress, flush=True)
        return result
    probes = run_probes(config)
    chat_probes, template = chat.chat_checks(config, chat.timed_sender(config, send),
                                             lambda text: count_tokens(config, text))
    probes += chat_probes
    for probe in probes:
        print(probe_line(probe), file=progress, flush=True)
    has_tokenizer = count_tokens(config, "probe") is not None
    result["server"] = {"models": models, "tokenize_endpoint": has_tokenizer}
    if template is not None:
        result["server"]["chat_template"] = {"source": template.source, "rendered": template.rendered}
    wrong = config.stop_on_wrong_output and not all(probe.passed for probe in probes)
    result["quality"] = None if wrong else run_quality(config)
    if result["quality"] is not None:
        print(quality_line(result["quality"]), file=progress, flush=True)
    cells = [] if wrong else run_cells(config, progress)
    result["sanity"] = {"probes": [probe.as_dict() for probe in probes]}
    result["cells"] = cells
    result["failed_checks"] = failed_check_names(probes, cells)
    result["status"] = "failed" if result["failed_checks"] else "ok"
    result["finished"] = utc_now()
    return result


def run_cells(config: BenchConfig, progress: TextIO) -> list[dict[str, Any]]:
    """Every grid of the config (the main one, then ``extra_cells``), each input length sized for its kind."""
    nonces = NonceSource()
    cells: list[dict[str, Any]] = []
    for kind, concurrency_levels, input_lengths in config.cell_grids():
        for input_tokens in input_lengths:

            def calibrate(prompt: str, kind: CellKind = kind) -> Any:
                return send(config, kind, prompt, 1, True, time.perf_counter())

            sized = size_body(input_tokens, lambda text: count_tokens(config, text), calibrate, nonces)
            for concurrency in concurrency_levels:
                if sized.failure is not None:
                    cell = kind.stamp(failed_cell(concurrency, input_tokens, config.output_tokens, sized.failure))
                else:
                    cell = run_repeated_cell(config, kind, sized, concurrency, nonces)
                cell["prompt_sizing"] = {"method": sized.method,
                                         "measured_prompt_tokens": sized.measured_prompt_tokens}
                cells.append(cell)
                print(progress_line(cell), file=progress, flush=True)
    return cells


def probe_line(probe: sanity.CheckResult) -> str:
    """A probe's line: ``probe chat_capital: FAILED chat_template_tokens: ...`` (the journal gets the failed)."""
    return f"probe {probe.name}: {'ok' if probe.passed else 'FAILED'} {probe.detail}"


def failure_lines(result: dict[str, Any]) -> list[str]:
    """The lines of every failed probe and cell, as printed during the run (what the rig's journal keeps)."""
    probes = [sanity.CheckResult(**probe) for probe in result["sanity"]["probes"] if not probe["passed"]]
    return [probe_line(probe) for probe in probes] + [
        progress_line(cell) for cell in result["cells"] if cell["status"] != "ok"]


def failed_check_names(probes: list[sanity.CheckResult], cells: list[dict[str, Any]]) -> list[str]:
    """Every failed check as ``name`` (probes) or ``C=..,in=..:name`` (cells; ``C=..,in=..,chat:name``
    for another kind), in run order."""
    names = [probe.name for probe in probes if not probe.passed]
    for cell in cells:
        kind = CellKind.of(cell)
        where = f"C={cell['concurrency']},in={cell['input_tokens']}"
        where += "" if kind == COMPLETIONS else f",{kind.label.replace(', ', ' ')}"
        names += [f"{where}:{check['name']}" for check in cell["failed_checks"]]
    return list(dict.fromkeys(names))  # a check failed by several repeats is named once


def summary_line(result: dict[str, Any], out_path: str) -> str:
    """The one-line summary printed at the end of a run."""
    cells = result["cells"]
    ok_cells = sum(1 for cell in cells if cell["status"] == "ok")
    probes_ok = all(probe["passed"] for probe in result["sanity"]["probes"])
    verdict = "ok" if result["status"] == "ok" else "FAILED (" + ", ".join(result["failed_checks"][:6]) + ")"
    probes = "ok" if probes_ok else "failed"
    return f"bench {verdict}: {ok_cells}/{len(cells)} cells ok, probes {probes}, result {out_path}"
