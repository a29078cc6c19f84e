"""Promise: a secret reaches the rig only whole, in a 0600 file in a 0700 folder, and is never in a command
(rigforge/operations/secrets.py). Planned through pyinfra's own API on ``@local`` (the ``planning`` fixture), the
rig's file described by the File and Sha256File facts; the key-making command runs for real with this machine's
``od`` and ``tr``. The same operations run end to end through pyinfra in tests/unit/test_secret_env_file.py.
"""

from __future__ import annotations

import hashlib
import logging
import subprocess
from pathlib import Path

import pytest
from pyinfra.api import FileUploadCommand, State, StringCommand
from pyinfra.api.host import Host
from pyinfra.facts.files import File, Sha256File

from rigforge.operations.secrets import rig_secret_file, secret_env_file

DEST, TEMP = "/etc/rigforge/secrets/hf.env", "/etc/rigforge/secrets/hf.env.rigforge-new"
KEY_DEST = "/etc/rigforge/secrets/engine-api-key"
SHOW = f"sudo cat {KEY_DEST}"
SECRET = "hf_secret_that_stays_in_its_file_77"
ROOT_0600 = {"mode": 600, "user": "root", "group": "root", "size": 65}


def planned(state: State, host: Host) -> list[str]:
    """Every planned command as text; an upload as ``upload DEST <content>``."""
    lines = []
    for op in state.get_op_order():
        for command in state.get_op_data_for_host(host, op).command_generator():
            if isinstance(command, FileUploadCommand):
                lines.append(f"upload {command.dest} {command.src.getvalue()!r}")
            elif isinstance(command, StringCommand):
                lines.append(command.get_raw_value())
    return lines


def written_whole(dest: str, content: str) -> list[str]:
    temp = f"{dest}.rigforge-new"
    return [f"install -d -m 700 {Path(dest).parent}", f"install -m 600 /dev/null {temp}",
            f"upload {temp} {content!r}", f"mv -f {temp} {dest}"]


@pytest.fixture()
def rig(planning: tuple[State, Host, dict], monkeypatch: pytest.MonkeyPatch) -> tuple[State, Host, dict]:
    """The planning fixture, its facts answering only for the file the operation was asked to write."""
    state, host, facts = planning
    facts.update({File: None, Sha256File: None})
    asked = host.get_fact

    def get_fact(fact: type, *args: object, **kwargs: object) -> object:
        assert (args, kwargs) in (((), {"path": DEST}), ((), {"path": KEY_DEST})), f"{fact} of {args} {kwargs}"
        return asked(fact)

    monkeypatch.setattr(host, "get_fact", get_fact)
    for variable in ("HF_TOKEN", "RIGFORGE_API_KEY"):
        monkeypatch.delenv(variable, raising=False)
    return state, host, facts


def test_a_given_token_is_written_whole_private_and_only_in_the_upload(
        rig: tuple[State, Host, dict], monkeypatch: pytest.MonkeyPatch) -> None:
    state, host, _ = rig
    monkeypatch.setenv("HF_TOKEN", f"  {SECRET}\n")
    secret_env_file(name="token", dest=DEST, variable="HF_TOKEN")
    state.is_executing = True
    assert planned(state, host) == written_whole(DEST, f"HF_TOKEN={SECRET}\n")


def test_a_token_from_a_file_here_is_its_first_line(
        rig: tuple[State, Host, dict], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    state, host, _ = rig
    monkeypatch.setenv("HF_TOKEN", "from-the-environment")
    local = tmp_path / "token"
    local.write_text(f" {SECRET} \nsecond line\n")
    secret_env_file(name="token", dest=DEST, variable="HF_TOKEN", local_file=str(local))
    state.is_executing = True
    assert planned(state, host) == written_whole(DEST, f"HF_TOKEN={SECRET}\n")


@pytest.mark.parametrize(("on_rig", "digest", "changes"), [
    ({**ROOT_0600}, f"HF_TOKEN={SECRET}\n", False),  # the same token, private: nothing to do
    ({**ROOT_0600, "mode": 644}, f"HF_TOKEN={SECRET}\n", True),  # the same token, readable by all: rewritten
    ({**ROOT_0600}, "HF_TOKEN=an-older-token\n", True),  # another token: replaced
    ({"user": "root", "group": "root", "size": 65}, f"HF_TOKEN={SECRET}\n", True),  # no mode known: rewritten
])
def test_the_rigs_file_is_compared_by_hash_and_mode(
        rig: tuple[State, Host, dict], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        on_rig: dict, digest: str, changes: bool) -> None:
    state, host, facts = rig
    facts.update({File: on_rig, Sha256File: hashlib.sha256(digest.encode()).hexdigest()})
    monkeypatch.setenv("HF_TOKEN", SECRET)
    with caplog.at_level(logging.DEBUG):
        secret_env_file(name="token", dest=DEST, variable="HF_TOKEN")
    state.is_executing = True
    assert planned(state, host) == (written_whole(DEST, f"HF_TOKEN={SECRET}\n") if changes else [])
    assert (f"{DEST} is up to date" in caplog.text) is not changes


@pytest.mark.parametrize(("on_rig", "said"), [(None, "not written (public repositories need none)"),
                                              (ROOT_0600, "left as it is")])
def test_without_a_token_nothing_is_written_and_the_run_says_so(
        rig: tuple[State, Host, dict], caplog: pytest.LogCaptureFixture, on_rig: dict | None, said: str) -> None:
    state, host, facts = rig
    facts[File] = on_rig
    with caplog.at_level(logging.INFO):
        secret_env_file(name="token", dest=DEST, variable="HF_TOKEN")
    state.is_executing = True
    assert planned(state, host) == []
    assert f"no HF_TOKEN given on this machine: {DEST} {said}" in caplog.text


def test_a_given_api_key_is_written_whole_and_the_run_says_how_to_show_it_not_the_key(
        rig: tuple[State, Host, dict], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    state, host, _ = rig
    monkeypatch.setenv("RIGFORGE_API_KEY", SECRET)
    with caplog.at_level(logging.INFO):
        rig_secret_file(name="key", dest=KEY_DEST, variable="RIGFORGE_API_KEY", show=SHOW)
    state.is_executing = True
    assert planned(state, host) == written_whole(KEY_DEST, SECRET + "\n")
    assert f"{KEY_DEST}: the key from RIGFORGE_API_KEY on this machine (show it on the rig with: {SHOW})" in caplog.text
    assert SECRET not in caplog.text


def test_a_key_file_named_here_is_said_so(rig: tuple[State, Host, dict], tmp_path: Path,
                                          caplog: pytest.LogCaptureFixture) -> None:
    state, host, _ = rig
    local = tmp_path / "key"
    local.write_text(SECRET + "\n")
    with caplog.at_level(logging.INFO):
        rig_secret_file(name="key", dest=KEY_DEST, variable="RIGFORGE_API_KEY", show=SHOW, local_file=str(local))
    state.is_executing = True
    assert planned(state, host) == written_whole(KEY_DEST, SECRET + "\n")
    assert f"{KEY_DEST}: the key from {local} on this machine" in caplog.text


@pytest.mark.parametrize(("on_rig", "commands"), [
    (ROOT_0600, []),
    ({**ROOT_0600, "mode": 640}, [f"chown root:root {KEY_DEST}", f"chmod 600 {KEY_DEST}"]),
    ({**ROOT_0600, "user": "ubuntu"}, [f"chown root:root {KEY_DEST}", f"chmod 600 {KEY_DEST}"]),
    ({**ROOT_0600, "group": "adm"}, [f"chown root:root {KEY_DEST}", f"chmod 600 {KEY_DEST}"]),
    ({"user": "root", "group": "root", "size": 65}, [f"chown root:root {KEY_DEST}", f"chmod 600 {KEY_DEST}"]),
])
def test_without_a_key_given_the_rigs_key_is_kept_and_made_private(
        rig: tuple[State, Host, dict], caplog: pytest.LogCaptureFixture, on_rig: dict, commands: list[str]) -> None:
    state, host, facts = rig
    facts[File] = on_rig
    with caplog.at_level(logging.INFO):
        rig_secret_file(name="key", dest=KEY_DEST, variable="RIGFORGE_API_KEY", show=SHOW)
    state.is_executing = True
    assert planned(state, host) == commands
    assert f"no RIGFORGE_API_KEY given on this machine: {KEY_DEST} kept as it is (show it on the rig with: {SHOW})" \
        in caplog.text


@pytest.mark.parametrize("on_rig", [None, {**ROOT_0600, "size": 0}])
def test_without_any_key_one_is_made_on_the_rig_from_256_random_bits(
        rig: tuple[State, Host, dict], caplog: pytest.LogCaptureFixture, tmp_path: Path, on_rig: dict | None) -> None:
    state, host, facts = rig
    facts[File] = on_rig
    with caplog.at_level(logging.INFO):
        rig_secret_file(name="key", dest=KEY_DEST, variable="RIGFORGE_API_KEY", show=SHOW)
    state.is_executing = True
    prepare, make, move = planned(state, host)[:2], planned(state, host)[2], planned(state, host)[3:]
    temp = f"{KEY_DEST}.rigforge-new"
    assert prepare == [f"install -d -m 700 {Path(KEY_DEST).parent}", f"install -m 600 /dev/null {temp}"]
    assert move == [f"mv -f {temp} {KEY_DEST}"]
    assert "no RIGFORGE_API_KEY given on this machine: a new key made on the rig" in caplog.text
    here = tmp_path / "key"
    keys = set()
    for _ in range(2):
        subprocess.run(["sh", "-c", make.replace(temp, str(here))], check=True)
        key = here.read_text()
        assert len(key) == 65 and key.endswith("\n") and int(key, 16) >= 0
        keys.add(key)
    assert len(keys) == 2, "two keys made alike"
