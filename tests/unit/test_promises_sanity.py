"""Promise: a broken server fails a run by name, with its evidence, instead of producing numbers
(rigforge/bench/sanity.py). Each record is constructed to show one failure; the thresholds are the module's own.
"""

from __future__ import annotations

import pytest

from rigforge.bench import sanity
from rigforge.bench.sanity import CheckResult
from rigforge.bench.stream import RequestRecord

LONG_BODY = "x" * 290 + "0123456789" + "tail past 300"
SIXTEEN = "abcdefghijklmnop"  # as many distinct characters as a repetition n-gram holds


def delivered(**fields: object) -> RequestRecord:
    """A request the server answered whole: HTTP 200, usage, some text."""
    return RequestRecord(**{"status": 200, "prompt_tokens": 128, "completion_tokens": 16, "text": "fine text",
                            "events": 17, **fields})


@pytest.mark.parametrize(("record", "expected"), [
    (delivered(transport_error="ConnectionRefusedError: [Errno 111]"),
     CheckResult("request_error", False, "ConnectionRefusedError: [Errno 111]")),
    (delivered(status=400, error_body="maximum context length exceeded " + LONG_BODY),
     CheckResult("context_overflow", False, "HTTP 400: " + ("maximum context length exceeded " + LONG_BODY)[:300])),
    (delivered(status=500, error_body=LONG_BODY),
     CheckResult("http_error", False, "HTTP 500: " + LONG_BODY[:300])),
    (delivered(status=400, error_body="bad sampling parameter"),
     CheckResult("http_error", False, "HTTP 400: bad sampling parameter")),
    (delivered(stream_errors=["first: engine died", "second"]), CheckResult("error_response", False,
                                                                             "first: engine died")),
    (delivered(non_finite=True), CheckResult("nan_response", False, "NaN or infinity in a streamed event")),
    (delivered(completion_tokens=None),
     CheckResult("missing_usage", False, "no usage with prompt_tokens and completion_tokens in the stream")),
    (delivered(prompt_tokens=None),
     CheckResult("missing_usage", False, "no usage with prompt_tokens and completion_tokens in the stream")),
])
def test_a_request_that_did_not_deliver_fails_by_name_with_its_evidence(
        record: RequestRecord, expected: CheckResult) -> None:
    assert sanity.delivery_failure(record) == expected
    assert sanity.request_failure(record, 16, 128) == expected


@pytest.mark.parametrize(("record", "expected"), [
    (delivered(text="  \n"), CheckResult("empty_output", False, "no text in 17 events")),
    (delivered(completion_tokens=15), CheckResult(
        "output_length", False, "completion_tokens 15 != max_tokens 16 (is ignore_eos honoured?)")),
    (delivered(cached_tokens=17), CheckResult("prefix_cache_hit", False, "cached_tokens 17 > 16")),
    (delivered(prompt_tokens=137), CheckResult("prompt_length", False, "prompt_tokens 137 vs target 128")),
    (delivered(prompt_tokens=119), CheckResult("prompt_length", False, "prompt_tokens 119 vs target 128")),
])
def test_a_request_unfit_to_measure_fails_by_name(record: RequestRecord, expected: CheckResult) -> None:
    assert sanity.request_failure(record, 16, 128) == expected


def test_the_limits_themselves_are_fit_to_measure() -> None:
    assert sanity.request_failure(delivered(cached_tokens=16, prompt_tokens=136), 16, 128) is None
    assert sanity.request_failure(delivered(prompt_tokens=120), 16, 128) is None
    assert sanity.request_failure(delivered(completion_tokens=3), None, None) is None


@pytest.mark.parametrize(("target", "tolerance"), [(32, 8), (160, 8), (200, 10), (219, 10), (4096, 204)])
def test_the_prompt_may_stray_by_a_twentieth_and_never_less_than_8_tokens(target: int, tolerance: int) -> None:
    assert sanity.prompt_tolerance(target) == tolerance
    assert type(sanity.prompt_tolerance(target)) is int


def test_repetition_is_the_share_of_repeated_16_grams() -> None:
    assert sanity.repeated_ngram_ratio(("ab" * 16)[:31]) == 1 - 2 / 16  # the shortest text judged: 16 n-grams
    assert sanity.repeated_ngram_ratio(("ab" * 16)[:30]) == 0.0  # shorter: a phrase, not a loop
    assert sanity.repeated_ngram_ratio((SIXTEEN * 3)[:47]) == 0.5
    assert sanity.repeated_ngram_ratio("The quick brown fox jumps over the lazy dog, then rests.") == 0.0


def test_garbage_is_the_share_of_undecodable_and_control_characters() -> None:
    assert sanity.garbage_share("") == 0.0
    assert sanity.garbage_share("ab\ufffd\x01") == 0.5
    assert sanity.garbage_share("line\nnext\r\n\ttabbed") == 0.0


def test_at_the_limits_a_cell_passes_and_past_them_fails() -> None:
    at_limit = [(SIXTEEN * 3)[:47], "a" * 19 + "\ufffd"]  # repetition exactly 0.5, garbage exactly 0.05
    assert [check.passed for check in sanity.text_checks(at_limit)] == [True, True]
    past = [(SIXTEEN * 4)[:48], "a" * 18 + "\ufffd\ufffd"]  # 1 - 16/33 and 0.1
    assert [check.passed for check in sanity.text_checks(past)] == [False, False]


def test_the_cells_verdicts_quote_the_worst_output() -> None:
    loop, noise = "ha" * 100, "ok" + "\ufffd" * 198
    repetition, garbage = sanity.text_checks(["fresh words here", loop, noise])
    assert repetition == CheckResult("repetition", False, "worst repeated 16-gram ratio 0.99 (max 0.5) in 3 outputs: "
                                                          f"{loop[:120]!r}")
    assert garbage == CheckResult("garbage", False, "worst U+FFFD/control share 0.99 (max 0.05) in 3 outputs: "
                                                    f"{noise[:120]!r}")


def test_among_equally_good_outputs_the_first_is_quoted_and_no_output_passes() -> None:
    repetition, garbage = sanity.text_checks(["a fine", "b fine"])
    assert repetition.detail.endswith("in 2 outputs: 'a fine'") and garbage.detail.endswith("in 2 outputs: 'a fine'")
    assert sanity.text_checks([]) == [
        CheckResult("repetition", True, "worst repeated 16-gram ratio 0.00 (max 0.5) in 0 outputs: ''"),
        CheckResult("garbage", True, "worst U+FFFD/control share 0.00 (max 0.05) in 0 outputs: ''")]


def test_request_failures_are_counted_per_check_with_the_first_evidence() -> None:
    failures = [CheckResult("http_error", False, "HTTP 500: first"), CheckResult("empty_output", False, "none"),
                CheckResult("http_error", False, "HTTP 502: second")]
    assert sanity.summarize_request_failures(failures, 10) == [
        CheckResult("http_error", False, "2 of 10 requests: HTTP 500: first"),
        CheckResult("empty_output", False, "1 of 10 requests: none")]


def test_a_completion_must_start_with_the_answer_where_a_chat_may_say_it_anywhere() -> None:
    arithmetic = sanity.PROBES[1]
    assert arithmetic.passes(" 4\n", chat=False) and not arithmetic.passes(" I think 4", chat=False)
    assert arithmetic.passes("I think it is 4.", chat=True)


def test_a_check_result_is_written_as_its_three_fields() -> None:
    assert CheckResult("garbage", False, "why").as_dict() == {"name": "garbage", "passed": False, "detail": "why"}
