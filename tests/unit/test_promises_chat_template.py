"""Promise: the chat template a server applies is read from the server itself and judged by the model's own
tokenizer; a template whose turn markers are not the model's fails, naming the likely cause and the fix
(rigforge/bench/chat.py). The server here is a STAND-IN on 127.0.0.1 (no llama.cpp needed to serve two JSON
documents) answering with what llama.cpp's server answered for Gemma 3 270M
(tests/bench_support/captures/llamacpp_chat_template_props.json).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from rigforge.bench import chat
from rigforge.bench.config import BenchConfig, CellKind, config_from_dict
from rigforge.bench.sanity import CheckResult
from rigforge.bench.stream import RequestRecord
from tests.bench_support.captured import capture_text

TEMPLATES = json.loads(capture_text("llamacpp_chat_template_props.json"))
GEMMA = TEMPLATES["gemma"]


class StandInServer:
    """Answers GET /props and POST /apply-template with what it is given; records what it was asked."""

    def __init__(self) -> None:
        self.answers: dict[str, tuple[int, str]] = {}
        self.hang, self.released = threading.Event(), threading.Event()  # hang set: requests wait for released
        self.asked: list[tuple[str, str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                server.asked.append((method, self.path, body))
                if server.hang.is_set():
                    server.released.wait()
                status, text = server.answers.get(f"{method} {self.path}", (404, '{"error": "not found"}'))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(text.encode())

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                self._answer("GET")

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                self._answer("POST")

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.handle_error = lambda request, address: None  # a client that gave up closed its socket
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"


@pytest.fixture()
def server() -> Iterator[StandInServer]:
    stand_in = StandInServer()
    thread = threading.Thread(target=stand_in.httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield stand_in
    stand_in.released.set()
    stand_in.httpd.shutdown()
    stand_in.httpd.server_close()


def config(url: str, **fields: Any) -> BenchConfig:
    return config_from_dict({"base_url": f"{url}/v1", "model": "m", "request_timeout_s": 10, **fields})


def test_the_template_is_read_from_the_servers_props_and_its_rendering_of_a_greeting(server: StandInServer) -> None:
    server.answers = {"GET /props": (200, json.dumps({"chat_template": GEMMA["props_chat_template"]})),
                      "POST /apply-template": (200, json.dumps({"prompt": GEMMA["apply_template_prompt"]}))}
    assert chat.served_template(config(server.url)) == chat.ServedTemplate(GEMMA["props_chat_template"],
                                                                           GEMMA["apply_template_prompt"])
    assert server.asked == [("GET", "/props", None),
                            ("POST", "/apply-template", {"messages": [{"role": "user", "content": "Hi"}]})]


@pytest.mark.parametrize(("answers", "expected"), [
    ({}, chat.ServedTemplate(None, None)),  # vLLM, SGLang: neither endpoint
    ({"GET /props": (200, "[1, 2]"), "POST /apply-template": (200, "not json")}, chat.ServedTemplate(None, None)),
    ({"GET /props": (200, '{"chat_template": 7}'), "POST /apply-template": (200, "[]")},
     chat.ServedTemplate(None, None)),
    ({"GET /props": (200, "{}"), "POST /apply-template": (200, '{"prompt": ["a"]}')},
     chat.ServedTemplate(None, None)),
    ({"POST /apply-template": (500, '{"prompt": "x"}')}, chat.ServedTemplate(None, None)),
    ({"GET /props": (200, '{"chat_template": "t"}'), "POST /apply-template": (200, '{"other": 1}')},
     chat.ServedTemplate("t", None)),
])
def test_an_engine_that_shows_no_template_gives_none_rather_than_a_guess(
        server: StandInServer, answers: dict[str, tuple[int, str]], expected: chat.ServedTemplate) -> None:
    server.answers = answers
    assert chat.served_template(config(server.url)) == expected


def test_a_server_that_never_answers_gives_no_template_once_the_request_times_out(server: StandInServer) -> None:
    server.hang.set()
    assert chat.served_template(config(server.url, request_timeout_s=0.2)) == chat.ServedTemplate(None, None)
    assert [path for _, path, _ in server.asked] == ["/props", "/apply-template"]


def counts(name: str):  # noqa: ANN201 - the tokenizer's answer per marker
    return lambda marker: TEMPLATES[name]["tokenize_counts"].get(marker)


def test_chatml_served_to_gemma_fails_naming_each_foreign_marker_the_template_and_the_fix() -> None:
    source = "{%- for message in messages -%}" * 3
    verdict = chat.template_check(chat.ServedTemplate(source, TEMPLATES["chatml"]["apply_template_prompt"]),
                                  counts("chatml"))
    assert verdict == CheckResult("chat_template", False, (
        "chat_template: the served chat template is not the model's: its turn markers <|im_start|> (6 tokens), "
        f"<|im_end|> (6 tokens) are not tokens of the model; /props chat_template {source[:40]!r}; fix: "
        f"{chat.TEMPLATE_FIX}"))
    unnamed = chat.template_check(chat.ServedTemplate(None, TEMPLATES["chatml"]["apply_template_prompt"]),
                                  counts("chatml"))
    assert unnamed.detail.endswith(f"are not tokens of the model; fix: {chat.TEMPLATE_FIX}")


def test_the_models_own_template_passes_and_says_what_it_rendered() -> None:
    rendered = GEMMA["apply_template_prompt"] + "x" * 150
    verdict = chat.template_check(chat.ServedTemplate("gemma", rendered), counts("gemma"))
    assert verdict == CheckResult("chat_template", True, f"the served template renders {rendered[:120]!r}; its turn "
                                                         "markers <start_of_turn>, <end_of_turn> are each one token "
                                                         "of the model")


def test_no_markers_or_no_rendering_pass_saying_there_was_nothing_to_check() -> None:
    plain = "User: Hi\nAssistant:"
    assert chat.template_check(chat.ServedTemplate("t", plain), counts("gemma")) == CheckResult(
        "chat_template", True, f"the served template renders {plain!r}, with no turn markers to check")
    assert chat.template_check(chat.ServedTemplate(None, None), counts("gemma")) == CheckResult(
        "chat_template", True, "the engine shows no rendered chat prompt (no /apply-template): the probes' answers "
                               "alone show its template")


def answer(content: str) -> RequestRecord:
    return RequestRecord(status=200, prompt_tokens=20, completion_tokens=3, output_chunks=3, finish_reason="stop",
                         text=content, content=content)


def test_the_template_check_comes_first_then_each_probe_asked_as_written(server: StandInServer) -> None:
    server.answers = {"POST /apply-template": (200, json.dumps({"prompt": GEMMA["apply_template_prompt"]}))}
    asked: list[tuple[CellKind, str, int]] = []

    def send(kind: CellKind, question: str, tokens: int) -> RequestRecord:
        asked.append((kind, question, tokens))
        return answer("Paris" if "France" in question else "a base model rambles")

    results, template = chat.chat_checks(config(server.url, chat_probes="path"), send, counts("gemma"))
    assert template == chat.ServedTemplate(None, GEMMA["apply_template_prompt"])
    assert [(result.name, result.passed) for result in results] == [
        ("chat_template", True), ("chat_capital", True), ("chat_arithmetic", True)]
    assert asked == [(CellKind("chat"), probe.question, 32) for probe in chat.CHAT_PROBES]
    answered = chat.run_chat_probes(config(server.url, chat_probes="answer"), send)
    assert [(result.name, result.passed) for result in answered] == [("chat_capital", True),
                                                                     ("chat_arithmetic", False)]
    assert chat.chat_checks(config(server.url), send, counts("gemma")) == ([], None)


def test_the_reasoning_parser_setting_reaches_the_judge() -> None:
    def send(kind: CellKind, question: str, tokens: int) -> RequestRecord:
        return answer("</think>Paris 4")

    with_parser = config("http://127.0.0.1:9", chat_probes="answer", reasoning_parser=True)
    assert all(result.detail.startswith("chat_reasoning: </think>") for result in
               chat.run_chat_probes(with_parser, send) if "thinking_off" in result.name)
    without = chat.run_chat_probes(config("http://127.0.0.1:9", chat_probes="answer"), send)
    assert [result.passed for result in without] == [True, True]


def test_a_probe_is_sent_greedy_streamed_and_timed_from_when_it_left() -> None:
    sent: list[tuple[Any, ...]] = []
    bench = config("http://127.0.0.1:9")
    before = time.perf_counter()
    record = chat.timed_sender(bench, lambda *words: sent.append(words) or answer("x"))(CellKind("chat"), "q", 8)
    assert record == answer("x")
    (words,) = sent
    assert words[:5] == (bench, CellKind("chat"), "q", 8, False)
    assert before <= words[5] <= time.perf_counter()
