"""What the cuda role promises: the profile's toolkit, found by login shells, the linker and services."""

from __future__ import annotations

import pytest

from rigforge.profile import Profile
from roles.cuda import cuda_home, render_cuda_files, toolkit_package


@pytest.fixture(scope="module")
def version(profile: Profile) -> str:
    if profile.cuda is None:
        pytest.skip(f"profile {profile.name} installs no CUDA toolkit")
    return profile.cuda.version


def test_toolkit_installed(host, version: str) -> None:
    assert host.package(toolkit_package(version)).is_installed


def test_files_are_the_profiles(host, profile: Profile, version: str) -> None:
    for path, content in render_cuda_files(profile).items():
        assert host.file(path).content_string == content, f"{path} differs from what the profile renders"


def test_login_shells_find_nvcc(host, version: str) -> None:
    nvcc = host.check_output("bash -lc 'command -v nvcc'")
    assert nvcc == f"{cuda_home(version)}/bin/nvcc"
    assert f"release {version}" in host.check_output(f"bash -lc {'nvcc --version'!r}")


def test_linker_knows_the_libraries(host, version: str) -> None:
    assert f"{cuda_home(version)}/lib64" in host.file("/etc/ld.so.conf.d/rigforge-cuda.conf").content_string
