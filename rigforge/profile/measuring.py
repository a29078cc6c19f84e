"""The profile's measuring settings: the smoke bench (cells, repeats, floors, what counts as a regression, the
primary metric and how verdicts are reached) and
how a driver update is rolled through a rig (drain, undrain, how recent a baseline may be)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from rigforge.profile.quality import Quality
from rigforge.profile.types import PositiveInt, SafeText, StrictModel


class Floor(StrictModel):
    concurrency: PositiveInt
    input_tokens: PositiveInt
    min_output_tps: Annotated[float, Field(ge=0)]
    min_decode_tps_per_user: Annotated[float, Field(ge=0)]


MetricName = Literal["decode_tps_per_user", "output_tps", "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms"]


class RegressionTolerance(StrictModel):
    # How much worse (in %) a metric may get between two bench runs before it counts as a regression;
    # no concurrency / input_tokens: every cell. The most specific rule for a cell applies.
    metric: MetricName
    max_worse_percent: Annotated[float, Field(ge=0)]
    concurrency: PositiveInt | None = None
    input_tokens: PositiveInt | None = None


class ExtraCells(StrictModel):
    """Cells measured beside the completion grid through another endpoint, with the same accounting (usage)."""

    endpoint: Literal["chat"]  # /v1/chat/completions with the server's own chat template
    # chat_template_kwargs.enable_thinking sent with every request; None: the template's default.
    thinking: bool | None = None
    concurrency: list[PositiveInt]
    input_tokens: list[PositiveInt]


class PrimaryMetric(StrictModel):
    """The one number that alone can call a recipe or a driver better (keep=best follows it); the other judged
    metrics can only veto. A completion cell of the grid, judged by a regression_tolerance rule."""

    metric: MetricName
    concurrency: PositiveInt
    input_tokens: PositiveInt
    reason: SafeText  # why this number is what the rig's owner cares about


class Verdicts(StrictModel):
    """How a comparison (recipe tournament, driver update) decides: rigforge.updates.verdict."""

    # The chance of any false better/worse claim in one comparison (A against B).
    false_claim_rate: Annotated[float, Field(gt=0, le=0.2)]
    # Engine starts a side: each start is measured (its own warm-up and repeats) and gives one value; the
    # start-to-start spread decides (rigforge/recipes/rounds.py interleaves them in a tournament).
    starts: Annotated[int, Field(ge=1, le=20)]
    # Seconds one engine start takes until it answers healthy on this rig: what the plan's cost counts per start.
    engine_start_s: Annotated[int, Field(ge=0)]
    # Seconds a tournament may spend on more starts where a verdict cannot tell.
    decide_budget_s: Annotated[int, Field(ge=0)]


class Bench(StrictModel):
    concurrency: list[PositiveInt]
    input_tokens: list[PositiveInt]
    output_tokens: PositiveInt
    cell_seconds: Annotated[float, Field(gt=0)]
    warmup_requests: Annotated[int, Field(ge=0)]
    repeats: Annotated[int, Field(ge=1, le=20)]
    floors: list[Floor]
    regression_tolerance: list[RegressionTolerance]
    extra_cells: list[ExtraCells]
    primary: PrimaryMetric
    verdicts: Verdicts
    quality: Quality  # the quality pass and its veto (rigforge/profile/quality.py)

    @model_validator(mode="after")
    def _floors_name_measured_cells(self) -> Bench:
        primary = self.primary
        if primary.concurrency not in self.concurrency or primary.input_tokens not in self.input_tokens:
            raise ValueError(f"primary {primary.metric} names concurrency {primary.concurrency} / input "
                             f"{primary.input_tokens}, not measured (concurrency {self.concurrency}, "
                             f"input_tokens {self.input_tokens})")
        if not any(rule.metric == primary.metric and rule.concurrency in (None, primary.concurrency)
                   and rule.input_tokens in (None, primary.input_tokens) for rule in self.regression_tolerance):
            raise ValueError(f"primary {primary.metric} at concurrency {primary.concurrency} / input "
                             f"{primary.input_tokens} has no regression_tolerance rule: its tolerance is the "
                             "smallest change a verdict claims")
        for floor in self.floors:
            if floor.concurrency not in self.concurrency or floor.input_tokens not in self.input_tokens:
                raise ValueError(
                    f"floor for concurrency {floor.concurrency} / input {floor.input_tokens} names a cell "
                    f"that is not measured (concurrency {self.concurrency}, input_tokens {self.input_tokens})"
                )
        for rule in self.regression_tolerance:
            if (rule.concurrency is not None and rule.concurrency not in self.concurrency) or (
                rule.input_tokens is not None and rule.input_tokens not in self.input_tokens
            ):
                raise ValueError(
                    f"regression_tolerance for {rule.metric} names concurrency {rule.concurrency} / input "
                    f"{rule.input_tokens}, not measured "
                    f"(concurrency {self.concurrency}, input_tokens {self.input_tokens})"
                )
        kinds = [(cells.endpoint, cells.thinking) for cells in self.extra_cells]
        if len(set(kinds)) != len(kinds):
            raise ValueError("extra_cells names one endpoint and thinking mode twice: merge their cells into one entry")
        return self


class DriverUpdate(StrictModel):
    # A command (argv) run on the rig before its engine stops, e.g. to take it out of a load balancer;
    # empty: none. Its counterpart runs once the engine is healthy again.
    drain_command: list[SafeText]
    undrain_command: list[SafeText]
    # A bench result this recent, of the same workload on the same driver, serves as the baseline.
    baseline_max_age_minutes: Annotated[int, Field(ge=0)]
    # Seconds a measured change (driver update, engine build change) may spend on its engine starts, both sides:
    # k grows from bench.verdicts.starts until the primary's tolerance is resolved or this is spent.
    starts_budget_s: Annotated[int, Field(ge=0)]
    # The primary metric's start-to-start spread (standard deviation of one start's value, in %) assumed until a
    # measured change on the rig has measured one (rigforge/updates/sizing.py).
    assumed_spread_percent: Annotated[float, Field(gt=0, le=50)]
