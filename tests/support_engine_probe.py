"""Run by an engine release's own Python (its cached venv): judge launches with the release's own CLI parser.

Reads one JSON object on stdin — ``{"engine": "vllm"|"sglang", "launches": {ID: {"lines": [[flag, value?], ...],
"variables": [NAME, ...]}}}``: each launch's engine words as rigforge renders them, one flag per line, and the
``VLLM_*``/``SGLANG_*`` variables it sets — and prints one JSON object: ``release`` and, per ID, ``refused``
(each flag the release does not know or whose value it refuses, with the release's own words; ``flag`` is None
for a check that names none), ``checked`` (the steps that ran), ``unread`` (variables the release never reads)
and ``read_at`` (where SGLang reads a variable outside its registry).

The checks are the release's own, in the order its server runs them before it loads a model:
- vLLM (``python -m vllm.entrypoints.openai.api_server``): FlexibleArgumentParser + make_arg_parser, parse_args,
  validate_parsed_serve_args; then the registries the server looks names up in when it starts (tool-call and
  reasoning parsers), AttentionConfig's backend validator, and the SpeculativeConfig fields the JSON names.
- SGLang (``python -m sglang.launch_server``): argparse + ServerArgs.add_cli_args, parse_args (parsers and
  backends are argparse choices there).
Nothing is started and no model is read: what needs the checkpoint (the speculative method against the model's
architecture, the quantization against its config) is out of reach here.

Stand-in: there is no GPU here, so vLLM is told it runs on its CPU platform (a CUDA platform cannot load without
the CUDA libraries); the flags and their choices come from the release's config classes, not the platform.
Only the standard library and the engine are imported: this file runs outside rigforge's environment.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.metadata
import json
import re
import sys
import typing
from collections.abc import Callable
from pathlib import Path

#: Parse rounds per launch: each round drops the lines of the flags the previous one refused.
MAX_ROUNDS = 40

Check = tuple[str | None, Callable[[argparse.Namespace], object]]


class Refused(Exception):
    """The parser's error, raised instead of its exit."""


def _first(modules: list[str], name: str):
    """``name`` from the first of ``modules`` that has it (entry points move between releases)."""
    for module in modules:
        try:
            found = getattr(importlib.import_module(module), name, None)
        except ModuleNotFoundError as error:
            if not module.startswith(error.name or "-"):
                raise  # the module is there but something it imports is not
            continue
        if found is not None:
            return found
    raise ImportError(f"none of {modules} has {name}")


def _registered(kind: str, modules: list[str], manager: str, name: str | None) -> None:
    names = _first(modules, manager).list_registered()
    if name and name not in names:
        raise KeyError(f"invalid {kind}: {name} (choose from {', '.join(sorted(names))})")


def _speculative_config(args: argparse.Namespace) -> None:
    """Each key of ``--speculative-config`` must be a SpeculativeConfig field, its value of that field's type."""
    given = args.speculative_config
    if not given:
        return
    import pydantic
    from vllm.config import SpeculativeConfig

    hints = typing.get_type_hints(SpeculativeConfig)
    fields = {field.name for field in dataclasses.fields(SpeculativeConfig)}
    for key, value in given.items():
        if key not in fields:
            raise KeyError(f"SpeculativeConfig has no field {key!r}")
        pydantic.TypeAdapter(hints[key]).validate_python(value)


def vllm_parser() -> tuple[argparse.ArgumentParser, list[Check]]:
    """The parser of vLLM's OpenAI server and the checks the server runs on the parsed arguments."""
    import vllm.platforms
    from vllm.platforms.cpu import CpuPlatform

    vllm.platforms.current_platform = CpuPlatform()  # stand-in for the GPU this machine lacks (module docstring)
    from vllm.config import AttentionConfig

    flexible = _first(["vllm.utils.argparse_utils", "vllm.utils"], "FlexibleArgumentParser")
    cli = ["vllm.entrypoints.common.cli_args", "vllm.entrypoints.openai.cli_args"]
    parser = _first(cli, "make_arg_parser")(flexible(description="vLLM OpenAI-Compatible RESTful API server."))
    tools = ["vllm.tool_parsers", "vllm.entrypoints.openai.tool_parsers"]
    return parser, [
        (None, _first(cli, "validate_parsed_serve_args")),
        ("--tool-call-parser", lambda args: _registered("tool call parser", tools, "ToolParserManager",
                                                        args.tool_call_parser)),
        ("--reasoning-parser", lambda args: _registered("reasoning parser", ["vllm.reasoning"],
                                                        "ReasoningParserManager", args.reasoning_parser)),
        ("--attention-backend", lambda args: args.attention_backend is None
         or AttentionConfig.validate_backend_before(args.attention_backend)),
        ("--speculative-config", _speculative_config),
    ]


def sglang_parser() -> tuple[argparse.ArgumentParser, list[Check]]:
    """The parser of SGLang's server; its parsers and backends are argparse choices. ServerArgs itself is not
    built: older releases resolve the device and read the model there (``__post_init__``)."""
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return parser, []


def _named_flags(message: str, lines: list[list[str]]) -> list[str]:
    """The rendered flags an argparse error names: every word of "unrecognized arguments: ...", the flag of
    "ambiguous option: --x could match ...", or the option of "argument --x/-y: ..." (as rendered)."""
    rendered = [line[0] for line in lines]
    if message.startswith("unrecognized arguments:"):
        return [word for word in message.split(":", 1)[1].split() if word in rendered]
    ambiguous = re.match(r"ambiguous option: ([^\s=]+)", message)
    if ambiguous:
        return [flag for flag in rendered if flag == ambiguous.group(1)]
    option = re.match(r"argument ([^:]+):", message)
    if option:
        spellings = option.group(1).split("/")
        exact = [flag for flag in rendered if flag in spellings]
        # a rendered abbreviation argparse expanded (--speculative-algo) is named by its full spelling
        return exact or [flag for flag in rendered if any(name.startswith(flag) for name in spellings)]
    return []


def judge_flags(parser: argparse.ArgumentParser, checks: list[Check],
                lines: list[list[str]]) -> tuple[list[dict[str, str | None]], list[str]]:
    """Every refused flag with the release's words: parse (again without each refused flag's line), then check."""
    refused: list[dict[str, str | None]] = []
    for _ in range(MAX_ROUNDS):
        try:
            args = parser.parse_args([word for line in lines for word in line])
            break
        except Refused as error:
            named = _named_flags(str(error), lines)
            refused += [{"flag": flag, "message": str(error)} for flag in named]
            if not named:
                return [*refused, {"flag": None, "message": str(error)}], ["parse_args"]
            lines = [line for line in lines if line[0] not in named]
    else:
        return [*refused, {"flag": None, "message": f"still refused after {MAX_ROUNDS} rounds"}], ["parse_args"]
    checked = ["parse_args"]
    rendered = {line[0] for line in lines}
    for flag, check in checks:
        if flag is not None and flag not in rendered:
            continue
        checked.append(getattr(check, "__qualname__", "check") if flag is None else f"{flag} value")
        try:
            check(args)
        except (ValueError, TypeError, KeyError) as error:
            refused.append({"flag": flag, "message": str(error).strip("'\"")})
    return refused, checked


def registered_variables(engine: str) -> set[str]:
    """The variables the release declares in its own registry: vllm.envs, sglang.srt.environ."""
    if engine == "vllm":
        import vllm.envs

        return set(vllm.envs.environment_variables)
    from sglang.srt import environ

    fields = [value for value in vars(environ.Envs).values() if isinstance(value, environ.EnvField)]
    aliases = {field.deprecated_name for field in fields if getattr(field, "deprecated_name", None)}
    # A deprecated name that forwards its value to a replacement is still read; one without is only warned about.
    forwarded = {name for name, old in getattr(environ, "_DEPRECATED_ENVS", {}).items() if old.replacement}
    return {field.name for field in fields} | aliases | forwarded


def read_outside_registry(package: Path, name: str) -> list[str]:
    """Where the package's source names ``name`` as a whole string literal (``get_bool_env_var("NAME")``), as
    ``path:line``; a mention inside a longer message does not count."""
    literal = re.compile(r"""["']""" + re.escape(name) + r"""["']""")
    found = []
    for path in sorted(package.rglob("*.py")):
        text = path.read_text(errors="replace")
        if name in text:
            found += [f"{path.relative_to(package.parent)}:{number}"
                      for number, line in enumerate(text.splitlines(), 1) if literal.search(line)]
    return found


def judge_variables(engine: str, names: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    """The variables the release never reads, and where SGLang reads those outside its registry.

    vLLM's own rule: a ``VLLM_*`` variable missing from ``vllm.envs.environment_variables`` is an "Unknown vLLM
    environment variable" (its validate_environ). SGLang also reads variables ad hoc, so its source counts too.
    """
    registry = registered_variables(engine)
    package = Path(importlib.import_module(engine).__file__).parent
    unread: list[str] = []
    read_at: dict[str, list[str]] = {}
    for name in sorted(set(names) - registry):
        places = read_outside_registry(package, name) if engine == "sglang" else []
        if places:
            read_at[name] = places
        else:
            unread.append(name)
    return unread, read_at


def main() -> int:
    answer, sys.stdout = sys.stdout, sys.stderr  # vLLM logs to stdout; only the verdicts go there
    request = json.load(sys.stdin)
    engine = request["engine"]
    parser, checks = vllm_parser() if engine == "vllm" else sglang_parser()

    def refuse(message: str) -> typing.NoReturn:
        raise Refused(message)

    parser.error = refuse  # argparse reports unknown flags and refused values through error(), then exits
    verdicts = {"release": f"{engine}=={importlib.metadata.version(engine)}"}
    for launch_id, launch in request["launches"].items():
        refused, checked = judge_flags(parser, checks, launch["lines"])
        unread, read_at = judge_variables(engine, launch["variables"])
        verdicts[launch_id] = {"refused": refused, "checked": checked, "unread": unread, "read_at": read_at}
    print(json.dumps(verdicts), file=answer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
