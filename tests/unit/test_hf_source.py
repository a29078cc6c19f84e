"""The huggingface source (``weights_tool.py hf-download``) with the real huggingface_hub client.

The Hub cannot be reached from here, so a STAND-IN (tests/standins/hf_hub.py, shared with the e2e token test)
serves its HTTP API on 127.0.0.1, named to the tool with ``--endpoint``: the revision's file list with sizes,
LFS sha256 and git blob ids and the files (HEAD + GET with ranges), as huggingface_hub 2.4 asks for them.
Everything else — the client, the tool, the files, the manifest — is real.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.standins.hf_hub import REPO, StandInHub

pytest.importorskip("huggingface_hub")

TOOL = Path(__file__).resolve().parents[2] / "rigforge" / "remote" / "weights_tool.py"
TOKEN = "hf_not_a_real_token_0123456789"


V1 = {"config.json": b'{"model_type": "tiny"}\n', "model.safetensors": os.urandom(300_000),
      "README.md": b"# not wanted\n"}
V2 = {**V1, "model.safetensors": os.urandom(300_000)}


@pytest.fixture()
def hub() -> Iterator[StandInHub]:
    with StandInHub({"v1": V1, "v2": V2}, lfs={"model.safetensors"}) as server:
        yield server


@pytest.fixture()
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "hf.env"
    path.write_text(f"HF_TOKEN={TOKEN}\n")
    path.chmod(0o600)
    return path


def download(folder: Path, hub: StandInHub, revision: str, token_file: Path) -> subprocess.CompletedProcess[str]:
    # HF_ENDPOINT points elsewhere: the tool must reach the Hub through its own --endpoint.
    env = {**os.environ, "HF_ENDPOINT": "http://127.0.0.1:9", "HF_HOME": str(folder.parent / "hf-home"),
           "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_XET": "1"}
    return subprocess.run([sys.executable, str(TOOL), "hf-download", "--dir", str(folder), "--repo", REPO,
                           "--revision", revision, "--allow", "*.json", "--allow", "*.safetensors",
                           "--token-file", str(token_file), "--endpoint", hub.url],
                          capture_output=True, text=True, env=env, timeout=120)


def file_downloads(hub: StandInHub) -> list[str]:
    return [path.rsplit("/", 1)[-1] for method, path, _ in hub.requests if method == "GET" and "/resolve/" in path]


def test_pinned_revision_lands_verified_and_recorded(tmp_path: Path, hub: StandInHub, token_file: Path) -> None:
    folder = tmp_path / "model"
    done = download(folder, hub, "v1", token_file)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in folder.iterdir()) == [".rigforge-manifest.json", "config.json", "model.safetensors"]
    assert (folder / "model.safetensors").read_bytes() == V1["model.safetensors"]
    manifest = json.loads((folder / ".rigforge-manifest.json").read_text())
    assert (manifest["source"], manifest["origin"], manifest["revision"]) == ("huggingface", REPO, "v1")
    assert manifest["allow_patterns"] == ["*.json", "*.safetensors"]
    assert {e["name"]: e["sha256"] for e in manifest["files"]} == {
        name: hashlib.sha256(V1[name]).hexdigest() for name in ("config.json", "model.safetensors")}
    # The token reaches the hub, from the file; it is never printed.
    assert {auth for _, _, auth in hub.requests} == {f"Bearer {TOKEN}"}
    assert TOKEN not in done.stdout + done.stderr


def test_second_run_downloads_nothing(tmp_path: Path, hub: StandInHub, token_file: Path) -> None:
    folder = tmp_path / "model"
    assert download(folder, hub, "v1", token_file).returncode == 0
    hub.requests.clear()
    again = download(folder, hub, "v1", token_file)
    assert again.returncode == 0, again.stderr
    assert "0 downloaded" in again.stdout
    assert file_downloads(hub) == []


def test_new_revision_fetches_only_the_changed_file(tmp_path: Path, hub: StandInHub, token_file: Path) -> None:
    folder = tmp_path / "model"
    assert download(folder, hub, "v1", token_file).returncode == 0
    hub.requests.clear()
    assert download(folder, hub, "v2", token_file).returncode == 0
    assert file_downloads(hub) == ["model.safetensors"]
    assert (folder / "model.safetensors").read_bytes() == V2["model.safetensors"]


def test_wrong_bytes_from_the_hub_never_get_the_final_name(tmp_path: Path, hub: StandInHub,
                                                           token_file: Path) -> None:
    hub.corrupt = {"model.safetensors"}
    folder = tmp_path / "model"
    failed = download(folder, hub, "v1", token_file)
    assert failed.returncode == 1
    assert "model.safetensors: sha256 is" in failed.stderr
    assert not (folder / "model.safetensors").exists()


def test_a_token_file_others_can_read_is_refused(tmp_path: Path, hub: StandInHub, token_file: Path) -> None:
    token_file.chmod(0o644)
    failed = download(tmp_path / "model", hub, "v1", token_file)
    assert failed.returncode == 1 and "mode 0600" in failed.stderr
    assert hub.requests == []


def test_a_gated_repo_takes_the_token_from_the_file_only(tmp_path: Path, token_file: Path) -> None:
    gated = {"v1": V1}
    with StandInHub(gated, lfs={"model.safetensors"}, token_sha256=hashlib.sha256(TOKEN.encode()).hexdigest()) as hub:
        refused = download(tmp_path / "refused", hub, "v1", tmp_path / "no-such-file")
        assert refused.returncode == 1 and not (tmp_path / "refused" / "model.safetensors").exists()
        done = download(tmp_path / "model", hub, "v1", token_file)
    assert done.returncode == 0, done.stderr
    assert TOKEN not in refused.stdout + refused.stderr + done.stdout + done.stderr


def test_the_revision_size_is_what_the_hub_lists(hub: StandInHub, token_file: Path, tmp_path: Path) -> None:
    """``hf-size``: the bytes of the wanted files of a revision, as the hub's file list gives them, for the disk
    checks to expect in place of the profile's size_gb (rigforge.facts.weights.HubRevisionSize says which)."""
    from rigforge.facts.weights import parse_hub_size

    env = {**os.environ, "HF_HOME": str(tmp_path / "hf-home"), "HF_HUB_DISABLE_TELEMETRY": "1"}
    done = subprocess.run([sys.executable, str(TOOL), "hf-size", "--repo", REPO, "--revision", "v1",
                           "--allow", "*.json", "--allow", "*.safetensors", "--token-file", str(token_file),
                           "--endpoint", hub.url], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["bytes"] == len(V1["config.json"]) + len(V1["model.safetensors"]) and answer["files"] == 2
    assert file_downloads(hub) == []  # the file list only, no file
    size = parse_hub_size(f"{REPO}@v1\n{done.stdout}")
    assert size.size == answer["bytes"] and size.said.startswith(f"the hub's file list of {REPO}@v1 (")
    unknown = parse_hub_size(f"{REPO}@v1\nthe Hugging Face client is not installed on the rig yet")
    assert unknown.size is None and unknown.said == (
        f"the profile's model.size_gb (the hub's file list of {REPO}@v1 is not known: the Hugging Face client is "
        "not installed on the rig yet)")
