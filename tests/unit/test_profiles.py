"""The profiles as data: the real ones load, bad ones fail with the file and field named."""

from __future__ import annotations

from pathlib import Path

import pytest

from rigforge.profile.loader import PROFILES_DIR, ProfileError, load_profile, profile_hash

REAL_PROFILES = ["2x-pix", "4x-threadripper", "8x-turin", "sandbox"]


@pytest.mark.parametrize("name", REAL_PROFILES)
def test_real_profiles_load(name: str) -> None:
    profile = load_profile(name)
    assert profile.name == name
    assert len(profile_hash(profile)) == 16


def test_rig_files_only_set_what_differs() -> None:
    """No rig file repeats a value it already inherits (one source of truth per setting)."""
    import yaml

    base = yaml.safe_load((PROFILES_DIR / "gpu-rig.yaml").read_text())
    for name in ["2x-pix", "4x-threadripper", "8x-turin"]:
        rig = yaml.safe_load((PROFILES_DIR / f"{name}.yaml").read_text())
        for section, values in rig.items():
            if isinstance(values, dict) and isinstance(base.get(section), dict):
                for key, value in values.items():
                    assert base[section].get(key, object()) != value, f"{name}.yaml repeats {section}.{key}"


def test_every_rig_setting_cites_a_source() -> None:
    for name in ["gpu-rig", "2x-pix", "4x-threadripper", "8x-turin"]:
        text = (PROFILES_DIR / f"{name}.yaml").read_text()
        assert text.count("source:") >= 5, name


def test_topology_decides_force_p2p() -> None:
    assert load_profile("4x-threadripper").modprobe.force_p2p_override is True
    assert load_profile("2x-pix").modprobe.force_p2p_override is False


def test_graph_xml_only_on_the_8_gpu_rig() -> None:
    assert [n for n in REAL_PROFILES if (p := load_profile(n)).nccl and p.nccl.graph_xml] == ["8x-turin"]


def test_profile_hash_changes_with_a_setting() -> None:
    assert profile_hash(load_profile("2x-pix")) != profile_hash(load_profile("2x-pix", {"engine": {"port": 8001}}))


# --- bad input: each case names the file and the exact field --------------------------------------------------

OVERRIDES = "host data 'profile_overrides'"

BAD_OVERRIDES = [
    # (overrides, field path, words the message must hold)
    ({"engine": {"prot": 8000}}, "engine.prot", "unknown setting; allowed here: auth, build, command, docker"),
    ({"engine": {"port": "eighty"}}, "engine.port", "valid integer"),
    ({"engine": {"port": 70000}}, "engine.port", "less than or equal to 65535"),
    ({"engine": {"port": -1}}, "engine.port", "greater than or equal to 1"),
    ({"driver": {"version": "595"}}, "driver.version", "should match pattern"),
    ({"driver": {"version": "595.45.04; reboot"}}, "driver.version", "should match pattern"),
    ({"driver": {"flavor": "closed"}}, "driver.flavor", "'open' or 'proprietary'"),
    ({"engine": {"kind": "tgi"}}, "engine.kind", "'sglang', 'vllm' or 'llama.cpp'"),
    ({"gpus": {"count": -2}}, "gpus.count", "greater than or equal to 1"),
    ({"gpus": {"count": "two"}}, "gpus.count", "valid integer"),
    ({"gpus": {"topology": "PHB"}}, "gpus.topology", "'PIX', 'PXB', 'NODE', 'SYS' or 'NV'"),
    ({"boot": {"kernel_params": ["iommu=pt; rm -rf /"]}}, "boot.kernel_params.0", "should match pattern"),
    ({"boot": {"kernel_params": ["iommu=pt\nGRUB_X=1"]}}, "boot.kernel_params.0", "should match pattern"),
    ({"boot": {"kernel_params": ["iommu=pt", "iommu=off"]}}, "boot.kernel_params", "duplicate kernel parameter"),
    ({"nccl": {"env": {"NCCL P2P": "SYS"}}}, "nccl.env.NCCL P2P", "invalid name"),
    ({"nccl": {"env": {"NCCL_P2P_LEVEL": 4}}}, "nccl.env", "must be a name such as SYS"),
    ({"nccl": {"env": {"NCCL_DEBUG": "INFO\nExecStartPre=/bin/sh"}}}, "nccl.env.NCCL_DEBUG", "newlines"),
    ({"engine": {"env": {"A": "x\ny"}}}, "engine.env.A", "newlines"),
    ({"engine": {"flags": {"-tp": 2}}}, "engine.flags.-tp", "invalid name"),
    ({"engine": {"flags": {"--served": "x\n--evil"}}}, "engine.flags.--served", "newlines"),
    ({"modprobe": {"options": {"nvidia": {"NVreg_X": "1 2"}}}}, "modprobe.options", "letters, digits"),
    ({"modprobe": {"force_p2p_override": True}}, "(top level)", "only allowed when gpus.topology is NODE"),
    ({"modprobe": {"p2p_registry_dwords": "ForceP2P=1\"; rm"}}, "modprobe.p2p_registry_dwords", "match pattern"),
    ({"model": {"path": "/srv/../etc"}}, "model.path", "must not contain '..'"),
    ({"model": {"path": "relative/path"}}, "model.path", "should match pattern"),
    ({"model": {"repo_id": "not a repo"}}, "model.repo_id", "should match pattern"),
    ({"model": {"source": "ftp"}}, "model.source", "'huggingface', 'mirror' or 'local'"),
    ({"model": {"source": "mirror"}}, "model", "source 'mirror' needs mirror_url"),
    ({"model": {"hf_endpoint": "hub.example.lan"}}, "model.hf_endpoint", "should match pattern"),
    ({"model": {"source": "mirror", "mirror_url": "http://mirror.lan/", "hf_endpoint": "http://hub.lan"}}, "model",
     "hf_endpoint is for source 'huggingface', not 'mirror'"),
    ({"tuning": {"cpu_governor": "turbo"}}, "tuning.cpu_governor", "'performance'"),
    ({"tuning": {"sysctl": {"vm swappiness": 0}}}, "tuning.sysctl.vm swappiness", "invalid name"),
    ({"bench": {"concurrency": [0, 1]}}, "bench.concurrency.0", "greater than 0"),
    ({"bench": {"floors": [{"concurrency": 3, "input_tokens": 128, "min_output_tps": 1,
                            "min_decode_tps_per_user": 1}]}}, "bench", "names a cell that is not measured"),
    ({"engine": {"image": "voipmonitor/sglang:cu130"}}, "engine", "set exactly one of image, build, native"),
    ({"engine": {"build": {"patches": [{"url": "https://x/p.diff", "sha256": "abc", "root": "flashinfer"}]}}},
     "engine.build.patches.0.sha256", "should match pattern"),
    ({"engine": {"docker": {"shm_size": "8 GB"}}}, "engine.docker.shm_size", "should match pattern"),
    ({"gpus": {"power_limit_w": 5000}}, "gpus.power_limit_w", "less than or equal to 1000"),
]


@pytest.mark.parametrize(("overrides", "field", "words"), BAD_OVERRIDES, ids=[c[1] for c in BAD_OVERRIDES])
def test_bad_override_names_field(overrides: dict, field: str, words: str) -> None:
    with pytest.raises(ProfileError) as caught:
        load_profile("2x-pix", overrides)
    message = str(caught.value)
    first = message.split(" (+", 1)[0]
    assert f": {field}: " in first, message
    assert words in first, message


def test_override_error_names_the_override_source() -> None:
    with pytest.raises(ProfileError, match=r"^host data 'profile_overrides': engine.port: "):
        load_profile("2x-pix", {"engine": {"port": "x"}})


def write_profiles(tmp_path: Path, **files: str) -> Path:
    for name, text in files.items():
        (tmp_path / f"{name}.yaml").write_text(text)
    return tmp_path


def test_error_names_the_file_that_set_the_value(tmp_path: Path) -> None:
    real = (PROFILES_DIR / "gpu-rig.yaml").read_text().replace("compute_capability: \"12.0\"", "compute_capability: x")
    for name in ["base", "2x-pix"]:
        (tmp_path / f"{name}.yaml").write_text((PROFILES_DIR / f"{name}.yaml").read_text())
    (tmp_path / "gpu-rig.yaml").write_text(real)
    with pytest.raises(ProfileError) as caught:
        load_profile("2x-pix", profiles_dir=tmp_path)
    assert str(caught.value).startswith(f"{tmp_path / 'gpu-rig.yaml'}: gpus.compute_capability: ")


def test_typo_key_in_file_lists_allowed_keys(tmp_path: Path) -> None:
    text = (PROFILES_DIR / "sandbox.yaml").read_text().replace("  port: 8080", "  porrt: 8080")
    write_profiles(tmp_path, base=(PROFILES_DIR / "base.yaml").read_text(), sandbox=text)
    with pytest.raises(ProfileError, match=r"sandbox.yaml: engine.porrt: unknown setting; allowed here: .*port"):
        load_profile("sandbox", profiles_dir=tmp_path)


def test_duplicate_env_name_in_yaml_is_refused(tmp_path: Path) -> None:
    write_profiles(tmp_path, base="description: x\nengine:\n  env:\n    A: '1'\n    A: '2'\n")
    with pytest.raises(ProfileError, match=r"base.yaml: invalid YAML: line 5: duplicate key 'A'$"):
        load_profile("base", profiles_dir=tmp_path)


def test_unknown_profile_file() -> None:
    with pytest.raises(ProfileError, match=r"inventory/profiles/3x-nothing.yaml: no such profile file"):
        load_profile("3x-nothing")


def test_profile_name_with_path_tricks_is_refused() -> None:
    with pytest.raises(ProfileError, match=r"profile name '../etc/passwd' is not a profile file name"):
        load_profile("../etc/passwd")


def test_circular_extends(tmp_path: Path) -> None:
    write_profiles(tmp_path, a="extends: b\n", b="extends: a\n")
    with pytest.raises(ProfileError, match=r"extends: circular chain"):
        load_profile("a", profiles_dir=tmp_path)


def test_top_level_not_a_mapping(tmp_path: Path) -> None:
    write_profiles(tmp_path, a="- just\n- a list\n")
    with pytest.raises(ProfileError, match=r"a.yaml: expected a mapping of settings at the top level"):
        load_profile("a", profiles_dir=tmp_path)


def test_overrides_must_be_a_mapping() -> None:
    with pytest.raises(ProfileError, match=r"profile_overrides': expected a mapping"):
        load_profile("2x-pix", ["engine"])  # type: ignore[arg-type]
