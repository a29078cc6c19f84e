"""CUDA role: the ``cuda-toolkit-<major>-<minor>`` package from NVIDIA's repository, and where to find it.

NVIDIA's toolkit packages install side by side under /usr/local/cuda-<version>; the version in the
package name is the profile's ``cuda.version``, so the toolkit is not pinned further. Login shells get
its ``bin`` on PATH (/etc/profile.d), every process finds its libraries through ld.so.conf.d (ldconfig
runs only when that file changed), and services get a complete environment file (systemd does not
expand ``$PATH`` in one): ``EnvironmentFile=/etc/rigforge/cuda.env``.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyinfra.api import deploy
from pyinfra.api.operation import OperationMeta
from pyinfra.operations import files

from rigforge.context import current_profile
from rigforge.operations import apt
from rigforge.operations.files import managed_file
from rigforge.operations.followup import follow_up
from rigforge.profile import Profile
from rigforge.render import render

PROFILE_SCRIPT = "/etc/profile.d/rigforge-cuda.sh"
LD_CONF = "/etc/ld.so.conf.d/rigforge-cuda.conf"
#: For services: ``EnvironmentFile=`` (CUDA_HOME, PATH, LD_LIBRARY_PATH).
CUDA_ENV_FILE = "/etc/rigforge/cuda.env"


def toolkit_package(version: str) -> str:
    """NVIDIA's toolkit package for ``13.2``: ``cuda-toolkit-13-2``."""
    return f"cuda-toolkit-{version.replace('.', '-')}"


def cuda_home(version: str) -> str:
    """Where the toolkit of ``version`` installs."""
    return f"/usr/local/cuda-{version}"


def render_cuda_files(profile: Profile) -> dict[str, str]:
    """The PATH script, the ld.so.conf.d entry and the service environment: path -> content."""
    if profile.cuda is None:
        return {}
    context = {"version": profile.cuda.version, "home": cuda_home(profile.cuda.version)}
    return {
        PROFILE_SCRIPT: render("cuda/profile.sh.j2", profile, **context),
        LD_CONF: render("cuda/ld.so.conf.j2", profile, **context),
        CUDA_ENV_FILE: render("cuda/cuda.env.j2", profile, **context),
    }


@deploy("CUDA toolkit")
def apply_cuda(refreshed_by: Sequence[OperationMeta] = ()) -> None:
    """Install the toolkit and make it found by login shells, the dynamic linker and services.

    + refreshed_by: operations that may have refreshed apt's lists already this run
    """
    profile = current_profile()
    if profile.cuda is None:
        return
    rendered = render_cuda_files(profile)
    apt.packages(name=f"Install the CUDA {profile.cuda.version} toolkit",
                 packages=[toolkit_package(profile.cuda.version)], refreshed_by=refreshed_by)
    files.directory(name="Create /etc/rigforge", path="/etc/rigforge", mode="755", user="root", group="root")
    managed_file(name=f"Put CUDA on login shells' PATH ({PROFILE_SCRIPT})", dest=PROFILE_SCRIPT,
                 content=rendered[PROFILE_SCRIPT])
    ld_conf = managed_file(name=f"Add the CUDA libraries to {LD_CONF}", dest=LD_CONF, content=rendered[LD_CONF])
    follow_up(name="Refresh the linker cache (ld.so.conf.d changed)", commands=["ldconfig"], triggers=[ld_conf],
              what="ldconfig")
    managed_file(name=f"Write the CUDA service environment {CUDA_ENV_FILE}", dest=CUDA_ENV_FILE,
                 content=rendered[CUDA_ENV_FILE])
