"""The profile's measuring settings: the smoke bench (cells, repeats, floors, what counts as a regression) and
how a driver update is rolled through a rig (drain, undrain, how recent a baseline may be)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from rigforge.profile.types import PositiveInt, SafeText, StrictModel


class Floor(StrictModel):
    concurrency: PositiveInt
    input_tokens: PositiveInt
    min_output_tps: Annotated[float, Field(ge=0)]
    min_decode_tps_per_user: Annotated[float, Field(ge=0)]


class RegressionTolerance(StrictModel):
    # How much worse (in %) a metric may get between two bench runs before it counts as a regression;
    # no concurrency / input_tokens: every cell. The most specific rule for a cell applies.
    metric: Literal["decode_tps_per_user", "output_tps", "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms"]
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

    @model_validator(mode="after")
    def _floors_name_measured_cells(self) -> Bench:
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
