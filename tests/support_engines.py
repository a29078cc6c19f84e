"""Engine releases from PyPI in cached venvs, and their own argument parsers run on rigforge's launches.

A release (``vllm==0.19.1``) gets a venv under .cache/engines/<package>-<version>/ (git-ignored), built once and
reused: the release itself without its dependencies (they are GPU kernels and libraries the argument parser never
loads), then only what importing its argument parser needs, at the versions the release itself requires, and a
torch to import it with. tests/support_engine_probe.py then runs in that venv, so rigforge's own environment never
imports an engine. A venv is used only once its build finished (the ``rigforge-ready`` file records what went in
and how long it took); an interrupted build is started over.

Without network access to the package index the calling test is skipped with the reason, except under CI=true.

Example::

    verdicts = judge_launches("vllm==0.19.1", {"wiki": {"lines": [["--model", "/m"]], "variables": []}})
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from importlib.metadata import Distribution
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from rigforge.profile import Profile
from rigforge.profile.loader import load_profile
from rigforge.sandbox.docker import file_lock
from rigforge.serving.api_key import keyed_command, needs_api_key
from rigforge.serving.engines import engine_env_file_variables, launch_command
from tests.support_flashinfer import UNREACHABLE_MARKERS

REPO = Path(__file__).resolve().parents[1]
RIG_PROFILES = ("2x-pix", "4x-threadripper", "8x-turin", "sandbox")
#: The engines' own variables, which their release must read (NCCL_*, CUDA_*, OMP_* are other programs').
ENGINE_VARIABLE_PREFIXES = ("VLLM_", "SGLANG_")
ENGINES_DIR = REPO / ".cache" / "engines"
PROBE = Path(__file__).resolve().parent / "support_engine_probe.py"

#: What importing each engine's argument parser needs besides the release and torch (found by importing it in a
#: bare venv until it imported: vLLM 0.17.1, 0.19.1, 0.33.0; SGLang 0.5.10(.post1), 0.5.23). Versions: the release's own
#: requirement where it names the package, else pip's choice.
PARSER_NEEDS = {
    "vllm": ("aiohttp", "cachetools", "cbor2", "cloudpickle", "fastapi", "gguf", "huggingface_hub", "llguidance",
             "msgspec", "networkx", "numpy", "openai", "openai-harmony", "packaging", "partial-json-parser",
             "pillow", "prometheus-client", "psutil", "py-cpuinfo", "pybase64", "pydantic", "pyyaml", "pyzmq",
             "regex", "safetensors", "transformers", "typing-extensions", "uvloop", "xgrammar"),
    "sglang": ("aiohttp", "dill", "huggingface_hub", "ipython", "msgspec", "numpy", "openai", "orjson",
               "packaging", "partial-json-parser", "pillow", "psutil", "pybase64", "pydantic", "pyzmq", "requests",
               "safetensors", "sentencepiece", "starlette", "tqdm", "transformers", "triton", "typing-extensions"),
}


def torch_for(package: str, version: str) -> tuple[str, ...]:
    """The torch the parser is imported with (it runs no kernel, so the build does not change what it accepts).

    ``torch==2.13.0`` is the CPU build this machine keeps on disk (pip takes it; 0.75 GB): PyPI has only CUDA
    builds for Linux, whose import needs ~3 GB of CUDA libraries. SGLang releases up to 0.5.20 import
    torchvision.io when server_args loads, and no torchvision imports beside that CPU build: those get torch
    2.14.1 with torchvision 0.29.1, the CUDA pair pip also finds on disk here (5.5 GB with its libraries).
    """
    if package == "sglang" and Version(version) <= Version("0.5.20"):
        return ("torch==2.14.1", "torchvision==0.29.1")
    return ("torch==2.13.0",)


def _pip(python: Path, *args: str) -> None:
    done = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                           "--retries", "1", "--timeout", "60", *args], capture_output=True, text=True)
    if done.returncode != 0:
        output = (done.stdout + done.stderr).strip()
        reason = f"pip install {' '.join(args)}: {output.splitlines()[-1] if output else 'failed'}"
        if any(marker in output for marker in UNREACHABLE_MARKERS) and os.environ.get("CI") != "true":
            pytest.skip(f"package index unreachable, engine release unavailable ({reason})")
        pytest.fail(f"{reason}\n{output[-3000:]}")


def _site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def _needs(venv: Path, package: str) -> list[str]:
    """PARSER_NEEDS of ``package`` under the release's own version specifiers (read from its metadata)."""
    dist_info = next(_site_packages(venv).glob(f"{package}-*.dist-info"))
    pinned: dict[str, str] = {}
    for text in Distribution.at(dist_info).requires or []:
        requirement = Requirement(text)
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            pinned.setdefault(canonicalize_name(requirement.name), str(requirement.specifier))
    return [f"{name}{pinned.get(canonicalize_name(name), '')}" for name in PARSER_NEEDS[package]]


def engine_python(release: str) -> Path:
    """The Python of the cached venv of ``release`` (``vllm==0.19.1``); builds the venv first when missing.

    + release: ``package==version`` as a recipe's ``engine_release`` names it
    """
    package, version = release.split("==")
    venv = ENGINES_DIR / f"{package}-{version}"
    python = venv / "bin" / "python"
    ready = venv / "rigforge-ready"
    if ready.exists():
        return python
    ENGINES_DIR.mkdir(parents=True, exist_ok=True)
    with file_lock(ENGINES_DIR / f".{venv.name}.lock"):  # two test workers build it once
        if ready.exists():
            return python
        shutil.rmtree(venv, ignore_errors=True)
        started = time.monotonic()
        print(f"building {venv} (the release, what its parser imports, torch)", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        _pip(python, "--no-deps", release)
        installed = [release, *_needs(venv, package), *torch_for(package, version)]
        _pip(python, *installed[1:])
        ready.write_text(json.dumps({"installed": installed, "seconds": round(time.monotonic() - started)}) + "\n")
    return python


def judged_recipes() -> list[tuple[str, str]]:
    """(profile, recipe) for every recipe of the rig profiles that names its ``engine_release``."""
    return [(name, recipe) for name in RIG_PROFILES
            for recipe, spec in load_profile(name).engine.recipes.items() if spec.engine_release]


def engine_launch(profile: Profile) -> dict[str, list]:
    """What the engine's own parser judges in ``profile``'s launch: the words after the engine command, one flag
    per line (rigforge's --model/--host/--port/--served-model-name included), and the engine's own variables the
    process gets (its engine env and the rig's env file)."""
    lines = launch_command(profile)
    command = list(profile.engine.command)
    if needs_api_key(profile):  # the engine's module runs through the key's entry (rigforge/serving/api_key.py)
        command = keyed_command(command)
    assert command in lines, f"{profile.name}: no engine command in the launch {lines}"
    variables = {**engine_env_file_variables(profile), **profile.engine.env}
    return {"lines": lines[lines.index(command) + 1:],
            "variables": sorted(name for name in variables if name.startswith(ENGINE_VARIABLE_PREFIXES))}


def judge_launches(release: str, launches: dict[str, dict[str, list]]) -> dict[str, dict]:
    """The release's own verdict on each launch (tests/support_engine_probe.py), keyed like ``launches``.

    + release: ``package==version``
    + launches: id -> {"lines": the engine's words, one flag per line; "variables": the names to check}
    """
    engine = release.split("==")[0]
    request = json.dumps({"engine": engine, "launches": launches})
    done = subprocess.run([str(engine_python(release)), str(PROBE)], input=request, capture_output=True, text=True)
    assert done.returncode == 0, f"{release}'s parser did not run:\n{done.stderr[-4000:]}"
    verdicts = json.loads(done.stdout)
    judged_by = verdicts.pop("release")
    assert judged_by == release, f"the venv of {release} holds {judged_by}"
    return verdicts
