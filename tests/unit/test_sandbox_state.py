"""Pure parts of the sandbox: recipe hash, state file round trip, known_hosts, key pair, docker flags."""

from __future__ import annotations

import stat
from pathlib import Path

import paramiko
import pytest

from rigforge.sandbox.docker import run_args
from rigforge.sandbox.image import IMAGE_FILES, PACKAGES, POST_STEPS, SUITE, image_tag, recipe_hash
from rigforge.sandbox.ssh import ensure_key_pair, host_key_line, merge_known_hosts
from rigforge.sandbox.state import (
    SandboxHost,
    SandboxState,
    host_names,
    load_or_empty_state,
    load_state,
    save_state,
    state_from_json,
    state_to_json,
)

# A real host key line as `cat /etc/ssh/ssh_host_ed25519_key.pub` printed it in a sandbox host.
HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBo69iX//vEpOJL9422MkRuomFoKgsJK5oKyb7ORvkQm root@rig1"
OTHER_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOOSqfKTAlfbNNA4J33IyTyA0ptKoX0QDY7yUnLypQQU root@rig2"


def test_recipe_hash_is_stable_and_follows_the_recipe() -> None:
    assert recipe_hash() == recipe_hash(SUITE, PACKAGES, POST_STEPS)
    assert recipe_hash(packages=tuple(reversed(PACKAGES))) == recipe_hash(), "package order is not the recipe"
    assert recipe_hash(packages=(*PACKAGES, "jq")) != recipe_hash()
    assert recipe_hash(post_steps=(*POST_STEPS, "true")) != recipe_hash()
    assert recipe_hash(suite="trixie") != recipe_hash()
    assert recipe_hash(files={**IMAGE_FILES, "/etc/motd": (0o644, "hi\n")}) != recipe_hash()
    assert image_tag() == f"rigforge-sandbox:bookworm-{recipe_hash()}"
    assert len(recipe_hash()) == 12


def test_recipe_has_what_roles_expect_of_a_server() -> None:
    for package in ("systemd", "systemd-sysv", "openssh-server", "python3", "dbus", "iproute2", "sudo",
                    "ca-certificates", "kmod", "pciutils", "procps", "gnupg", "grub2-common",
                    "initramfs-tools"):
        assert package in PACKAGES


def test_state_round_trip(tmp_path: Path) -> None:
    state = SandboxState(hosts=[SandboxHost("rig1", "rigforge-rig1", 39581),
                                SandboxHost("rig2", "rigforge-rig2", 42385)],
                         key_path=tmp_path / "id_ed25519", known_hosts_path=tmp_path / "known_hosts",
                         image="rigforge-sandbox:bookworm-495b377b7a22")
    assert state_from_json(state_to_json(state)) == state
    save_state(tmp_path, state)
    assert load_state(tmp_path) == state
    assert not (tmp_path / "state.json.tmp").exists()


def test_missing_state_says_what_to_run(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="rigforge.sandbox up"):
        load_state(tmp_path)
    empty = load_or_empty_state(tmp_path)
    assert empty.hosts == [] and empty.key_path == tmp_path / "id_ed25519"


def test_host_data_keeps_host_key_checking_strict(tmp_path: Path) -> None:
    state = SandboxState(hosts=[SandboxHost("rig1", "rigforge-rig1", 39581)], key_path=tmp_path / "k",
                         known_hosts_path=tmp_path / "kh", image="x")
    assert state.host_data(state.host("rig1")) == {
        "ssh_hostname": "127.0.0.1", "ssh_port": 39581, "ssh_user": "root", "ssh_key": str(tmp_path / "k"),
        "ssh_known_hosts_file": str(tmp_path / "kh"), "ssh_strict_host_key_checking": "yes"}
    with pytest.raises(RuntimeError, match="no sandbox host 'rig9'"):
        state.host("rig9")


def test_host_names() -> None:
    assert host_names(3) == ["rig1", "rig2", "rig3"]
    assert host_names(["a", "b"]) == ["a", "b"]


def test_known_hosts_lines_are_replaced_per_port() -> None:
    first = host_key_line(39581, HOST_KEY)
    assert first == "[127.0.0.1]:39581 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBo69iX//vEpOJL9422MkRuomFoKgsJK5oKyb7ORvkQm"
    text = merge_known_hosts("", {39581: first, 42385: host_key_line(42385, OTHER_KEY)})
    renewed = host_key_line(39581, OTHER_KEY)
    updated = merge_known_hosts(text, {39581: renewed})
    assert updated.splitlines() == [host_key_line(42385, OTHER_KEY), renewed]
    assert merge_known_hosts(updated, {42385: None, 39581: None}) == ""
    # Port 3958 must not match the line of port 39581.
    assert merge_known_hosts(text, {3958: None}) == text


def test_known_hosts_file_is_read_by_paramiko(tmp_path: Path) -> None:
    path = tmp_path / "known_hosts"
    path.write_text(merge_known_hosts("", {39581: host_key_line(39581, HOST_KEY)}))
    keys = paramiko.HostKeys(str(path))
    assert keys.lookup("[127.0.0.1]:39581")["ssh-ed25519"].get_base64() == HOST_KEY.split()[1]


def test_key_pair_is_private_loadable_and_kept(tmp_path: Path) -> None:
    key_path = tmp_path / "id_ed25519"
    public = ensure_key_pair(key_path)
    assert stat.S_IMODE(key_path.stat().st_mode) == 0o600
    loaded = paramiko.Ed25519Key.from_private_key_file(str(key_path))
    assert public.split()[:2] == ["ssh-ed25519", loaded.get_base64()]
    assert ensure_key_pair(key_path) == public, "a second call must keep the key"


def test_run_args_use_the_flags_that_work_here() -> None:
    args = run_args("rig1", 39581, "img:tag")
    assert args[:3] == ["run", "-d", "--name"] and "rigforge-rig1" in args
    assert "--privileged" not in args, "fails here: asks for capabilities the machine lacks"
    for flag in (["--restart", "always"], ["--hostname", "rig1"], ["-p", "127.0.0.1:39581:22"],
                 ["--label", "rigforge.sandbox=1"], ["--tmpfs", "/run"], ["--cgroupns=host"]):
        assert " ".join(flag) in " ".join(args)
    assert args[-2:] == ["img:tag", "/lib/systemd/systemd"]
    assert "/var/run/docker.sock:/var/run/docker.sock" not in args
    assert "/var/run/docker.sock:/var/run/docker.sock" in run_args("rig1", 1, "i", mount_docker_socket=True)


def test_cli_reads_the_state_directory_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """``python -m rigforge.sandbox`` honours RIGFORGE_SANDBOX_STATE as inventory/sandbox.py does."""
    from rigforge.sandbox.__main__ import main

    monkeypatch.setenv("RIGFORGE_SANDBOX_STATE", str(tmp_path / "elsewhere"))
    assert main(["status"]) == 1
    assert f"no sandbox state in {tmp_path / 'elsewhere' / 'state.json'}" in capsys.readouterr().out
    # --state-dir still wins over the environment.
    assert main(["--state-dir", str(tmp_path / "given"), "status"]) == 1
    assert str(tmp_path / "given" / "state.json") in capsys.readouterr().out
