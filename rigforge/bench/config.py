"""The benchmark's configuration: a plain dataclass loaded from JSON and checked once."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rigforge.bench.quality import check_quality

ENDPOINT_PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
#: What the chat probes judge: the answers (a chat-tuned model), the chat path alone (a base model), or nothing.
CHAT_PROBE_MODES = ("answer", "path", "off")
EXTRA_CELL_KEYS = ("endpoint", "thinking", "concurrency", "input_tokens")


class ConfigError(ValueError):
    """The configuration file cannot drive a benchmark run."""


@dataclass(frozen=True)
class CellKind:
    """How a cell's requests are sent: the endpoint, and for chat the thinking switch (None: the template's)."""

    endpoint: str = "completions"
    thinking: bool | None = None

    @property
    def label(self) -> str:
        """How reports name the kind: ``completions``, ``chat``, ``chat, thinking on``, ``chat, thinking off``."""
        if self.thinking is None:
            return self.endpoint
        return f"{self.endpoint}, thinking {'on' if self.thinking else 'off'}"

    def stamp(self, cell: dict[str, Any]) -> dict[str, Any]:
        """The cell's JSON with its kind written in (``endpoint``, ``thinking``), so no reader mixes kinds."""
        cell.update(endpoint=self.endpoint, thinking=self.thinking)
        return cell

    @property
    def order(self) -> tuple[bool, str]:
        """Where cells of this kind go in a report: completion cells first, then by label."""
        return self != COMPLETIONS, self.label

    @classmethod
    def of(cls, cell: dict[str, Any]) -> CellKind:
        """The kind of a result's cell; a cell written before kinds were recorded is a completion cell."""
        return cls(cell.get("endpoint") or "completions", cell.get("thinking"))


#: The main grid's kind, and the kind of every cell of a result written before kinds were recorded.
COMPLETIONS = CellKind()


def cell_where(cell: dict[str, Any]) -> str:
    """``C=1 in=128`` for a completion cell, ``C=1 in=128 (chat, thinking on)`` for another kind."""
    kind = CellKind.of(cell)
    where = f"C={cell['concurrency']} in={cell['input_tokens']}"
    return where if kind == COMPLETIONS else f"{where} ({kind.label})"


@dataclass(frozen=True)
class BenchConfig:
    """What to measure and against which server.

    ``base_url`` is the server root (``http://127.0.0.1:8000``); a trailing ``/v1`` is dropped.
    Every cell is one (concurrency, input length) pair: ``concurrency`` workers each send
    streaming requests back-to-back for ``cell_seconds``, after ``warmup_requests`` unmeasured
    ones, each asking for exactly ``output_tokens`` tokens. Each cell is measured ``repeats`` times
    in a row so a comparison can see the run-to-run spread. ``metadata`` (profile, host,
    engine, versions) is copied into the result untouched. ``api_key_file`` names a file on the
    machine running the client whose first line is the server's API key, sent as a bearer token:
    the key itself is in neither the config nor the result.
    """

    base_url: str
    model: str
    endpoint: str = "completions"
    concurrency: list[int] = field(default_factory=lambda: [1])
    input_tokens: list[int] = field(default_factory=lambda: [128])
    output_tokens: int = 128
    cell_seconds: float = 10.0
    warmup_requests: int = 2
    request_timeout_s: float = 300.0
    repeats: int = 1
    chat_probes: str = "off"
    reasoning_parser: bool = False
    extra_cells: list[dict[str, Any]] = field(default_factory=list)
    # Measure no cell once a probe answered wrong (a recipe experiment: garbage output is not worth timing).
    stop_on_wrong_output: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)
    api_key_file: str | None = None
    # The quality pass (rigforge/bench/quality.py): texts, top-k, the reference's tokens; None: no pass.
    quality: dict[str, Any] | None = None
    # Only the quality pass: no probes, no cells (the reference's A/A noise, measured in a second engine start).
    quality_only: bool = False

    @property
    def root_url(self) -> str:
        """The base URL without a trailing slash or ``/v1``."""
        root = self.base_url.rstrip("/")
        return root[: -len("/v1")] if root.endswith("/v1") else root

    @property
    def endpoint_path(self) -> str:
        """HTTP path of the generation endpoint."""
        return ENDPOINT_PATHS[self.endpoint]

    def cell_grids(self) -> list[tuple[CellKind, list[int], list[int]]]:
        """Every grid to measure, as (kind, concurrency levels, input lengths): the main grid first."""
        grids = [(CellKind(self.endpoint), list(self.concurrency), list(self.input_tokens))]
        for extra in self.extra_cells:
            kind = CellKind(extra["endpoint"], extra.get("thinking"))
            grids.append((kind, list(extra["concurrency"]), list(extra["input_tokens"])))
        return grids

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready copy, for the result file."""
        return dataclasses.asdict(self)


def _positive_int_list(name: str, value: Any) -> list[int]:
    """Validate a non-empty list of positive integers."""
    if not isinstance(value, list) or not value:
        raise ConfigError(f"{name} must be a non-empty list of positive integers, got {value!r}")
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int) or item < 1:
            raise ConfigError(f"{name} must contain positive integers, got {item!r}")
    return list(value)


def validate(config: BenchConfig) -> BenchConfig:
    """Return ``config`` unchanged if every field makes sense, else raise ConfigError naming the field."""
    if not config.base_url.startswith(("http://", "https://")):
        raise ConfigError(f"base_url must start with http:// or https://, got {config.base_url!r}")
    if not config.model:
        raise ConfigError("model must name the served model")
    if config.endpoint not in ENDPOINT_PATHS:
        raise ConfigError(f"endpoint must be one of {sorted(ENDPOINT_PATHS)}, got {config.endpoint!r}")
    _positive_int_list("concurrency", config.concurrency)
    _positive_int_list("input_tokens", config.input_tokens)
    if isinstance(config.output_tokens, bool) or not isinstance(config.output_tokens, int) or config.output_tokens < 2:
        got = config.output_tokens
        raise ConfigError(f"output_tokens must be an integer >= 2 (TPOT needs two tokens), got {got!r}")
    if not config.cell_seconds > 0:
        raise ConfigError(f"cell_seconds must be > 0, got {config.cell_seconds!r}")
    if isinstance(config.warmup_requests, bool) or not isinstance(config.warmup_requests, int):
        raise ConfigError(f"warmup_requests must be an integer, got {config.warmup_requests!r}")
    if config.warmup_requests < 0:
        raise ConfigError(f"warmup_requests must be >= 0, got {config.warmup_requests!r}")
    if isinstance(config.repeats, bool) or not isinstance(config.repeats, int) or config.repeats < 1:
        raise ConfigError(f"repeats must be an integer >= 1, got {config.repeats!r}")
    if not config.request_timeout_s > 0:
        raise ConfigError(f"request_timeout_s must be > 0, got {config.request_timeout_s!r}")
    if config.chat_probes not in CHAT_PROBE_MODES:
        raise ConfigError(f"chat_probes must be one of {list(CHAT_PROBE_MODES)}, got {config.chat_probes!r}")
    if not isinstance(config.reasoning_parser, bool):
        raise ConfigError(f"reasoning_parser must be true or false, got {config.reasoning_parser!r}")
    _extra_cells(config.extra_cells)
    if not isinstance(config.stop_on_wrong_output, bool):
        raise ConfigError(f"stop_on_wrong_output must be true or false, got {config.stop_on_wrong_output!r}")
    if not isinstance(config.metadata, dict):
        raise ConfigError("metadata must be a JSON object")
    if config.api_key_file is not None and not (isinstance(config.api_key_file, str)
                                                and config.api_key_file.startswith("/")):
        raise ConfigError(f"api_key_file must be an absolute path or null, got {config.api_key_file!r}")
    if not isinstance(config.quality_only, bool) or (config.quality_only and not config.quality):
        raise ConfigError(f"quality_only must be true or false, and true only with a quality block, got "
                          f"{config.quality_only!r}")
    try:
        check_quality(config.quality)
    except ValueError as error:
        raise ConfigError(str(error)) from None
    return config


def _extra_cells(value: Any) -> None:
    """Validate ``extra_cells``: a list of {endpoint, thinking, concurrency, input_tokens}."""
    if not isinstance(value, list):
        raise ConfigError(f"extra_cells must be a list, got {value!r}")
    for index, extra in enumerate(value):
        where = f"extra_cells[{index}]"
        if not isinstance(extra, dict) or set(extra) - set(EXTRA_CELL_KEYS):
            raise ConfigError(f"{where} must be an object with keys from {list(EXTRA_CELL_KEYS)}, got {extra!r}")
        endpoint = extra.get("endpoint")
        if endpoint not in ENDPOINT_PATHS:
            raise ConfigError(f"{where}.endpoint must be one of {sorted(ENDPOINT_PATHS)}, got {endpoint!r}")
        thinking = extra.get("thinking")
        if thinking is not None and (not isinstance(thinking, bool) or extra["endpoint"] != "chat"):
            raise ConfigError(f"{where}.thinking must be true, false or null, and only for chat, got {thinking!r}")
        _positive_int_list(f"{where}.concurrency", extra.get("concurrency"))
        _positive_int_list(f"{where}.input_tokens", extra.get("input_tokens"))


def config_from_dict(data: dict[str, Any]) -> BenchConfig:
    """Build and validate a BenchConfig; unknown keys are an error so typos do not pass silently."""
    known = {item.name for item in dataclasses.fields(BenchConfig)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"unknown config keys: {', '.join(unknown)}")
    missing = sorted(name for name in ("base_url", "model") if name not in data)
    if missing:
        raise ConfigError(f"missing config keys: {', '.join(missing)}")
    try:
        return validate(BenchConfig(**data))
    except TypeError as error:
        raise ConfigError(str(error)) from error


def load_config(path: Path) -> BenchConfig:
    """Read a JSON config file into a validated BenchConfig."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as error:
        raise ConfigError(f"cannot read config {path}: {error}") from error
    if not isinstance(data, dict):
        raise ConfigError(f"config {path} must hold a JSON object")
    return config_from_dict(data)
