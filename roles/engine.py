"""Engine role: the native inference server and its launcher, ready for the service role to start.

Container engines (SGLang, vLLM) run the image the images role provides — built from ``engine.build`` or
pulled from ``engine.image`` (``roles/images.py``, in the serving layer of full.py and deploys/serve.py);
their tag comes from ``rigforge.images.plans.image_ref``. The native llama.cpp server (the sandbox) is xllamacpp
from PyPI in a venv keyed by its pin, plus the launcher that runs it in the foreground for systemd.
"""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import files

from rigforge.context import current_profile
from rigforge.operations import apt
from rigforge.operations.venv import python_venv
from rigforge.profile import Profile
from rigforge.serving.engines import LLAMA_VENV, REMOTE_LIB_DIR
from roles.weights import upload_remote_script

#: Shared libraries the xllamacpp CPU wheel links against that a minimal Debian/Ubuntu lacks (OpenMP runtime).
NATIVE_RUNTIME_PACKAGES = ["libgomp1"]


@deploy("Engine")
def apply_engine(profile: Profile | None = None) -> None:
    """Install the native server (venv keyed by its pin) and its launcher; container engines need nothing here.

    + profile: the profile to serve (default: the current host's, with the recipe this run gives it)
    """
    profile = profile or current_profile()
    native = profile.engine.native
    if native is None:
        return
    apt.packages(name="Install the native server's runtime libraries", packages=NATIVE_RUNTIME_PACKAGES)
    for folder in host.loop(["/opt/rigforge", REMOTE_LIB_DIR]):
        files.directory(name=f"Create {folder}", path=folder, mode="755", user="root", group="root")
    python_venv(name=f"llama.cpp server venv ({native.package})", path=LLAMA_VENV, package=native.package)
    upload_remote_script(profile, "llama_launcher.py")
