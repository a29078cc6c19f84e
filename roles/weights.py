"""Weights role: the profile's model at ``model.path``, from Hugging Face, a LAN mirror or this machine.

Every source ends the same way: files verified against their sha256 before they get their final name,
and a manifest recording them, so the next run checks sizes and mtimes only. ``--data
verify_weights=true`` re-hashes everything and fetches again what changed.
"""

from __future__ import annotations

from pathlib import Path

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import files

from rigforge.context import current_profile, run_settings
from rigforge.facts.weights import MANIFEST_NAME
from rigforge.operations.files import managed_file
from rigforge.operations.secrets import secret_env_file
from rigforge.operations.venv import python_venv
from rigforge.operations.weights import verify_weights, weights_from_files, weights_from_hub
from rigforge.profile import Profile
from rigforge.render import render
from rigforge.serving.api_key import SECRETS_DIR
from rigforge.serving.engines import REMOTE_LIB_DIR

REMOTE_SOURCES = Path(__file__).resolve().parent.parent / "rigforge" / "remote"
WEIGHTS_TOOL = f"{REMOTE_LIB_DIR}/weights_tool.py"
HF_VENV = "/opt/rigforge/hf-venv"
#: The Hugging Face client the huggingface source installs; a new pin rebuilds the venv once.
HF_HUB_PACKAGE = "huggingface_hub==2.4.0"
HF_TOKEN_FILE = f"{SECRETS_DIR}/hf.env"


def manifest_path(profile: Profile) -> str:
    """Where the weights manifest of the profile's model lives on the rig."""
    return f"{profile.model.path.rstrip('/')}/{MANIFEST_NAME}"


def remote_script_text(profile: Profile, name: str) -> str:
    """``rigforge/remote/<name>`` as installed on the rig: the managed-by header, then the source unchanged."""
    source = (REMOTE_SOURCES / name).read_text()
    return render("engine/remote-script.py.j2", profile, source=source, source_name=name)


def upload_remote_script(profile: Profile, name: str) -> None:
    """Copy ``rigforge/remote/<name>`` to the rig's script folder (with the managed-by header)."""
    managed_file(
        name=f"Install {REMOTE_LIB_DIR}/{name}",
        dest=f"{REMOTE_LIB_DIR}/{name}",
        content=remote_script_text(profile, name),
        mode="755",
    )


@deploy("Weights")
def apply_weights(profile: Profile | None = None) -> None:
    """Put the profile's model in place (verified, resumable, recorded); re-hash it with verify_weights.

    + profile: the profile to serve (default: the current host's, with the recipe this run gives it); each
      recipe's checkpoint has its own ``model.path``, kept beside the others
    """
    profile = profile or current_profile()
    model = profile.model
    for folder in host.loop(["/opt/rigforge", REMOTE_LIB_DIR]):
        files.directory(name=f"Create {folder}", path=folder, mode="755", user="root", group="root")
    scripts = ["weights_tool.py"] + {"mirror": ["fetch.py"], "huggingface": ["hf_source.py"]}.get(model.source, [])
    for script in host.loop(scripts):
        upload_remote_script(profile, script)
    files.directory(name=f"Create {model.path}", path=model.path, mode="755", user="root", group="root")
    python = f"{HF_VENV}/bin/python" if model.source == "huggingface" else "python3"
    if model.source == "huggingface":
        python_venv(name=f"Hugging Face client venv ({HF_HUB_PACKAGE})", path=HF_VENV, package=HF_HUB_PACKAGE)
        secret_env_file(name=f"Hugging Face token in {HF_TOKEN_FILE}", dest=HF_TOKEN_FILE, variable="HF_TOKEN",
                        local_file=host.data.get("hf_token_file"))
    if run_settings().verify_weights:
        verify_weights(name=f"Re-hash the weights in {model.path}", path=model.path, tool=WEIGHTS_TOOL)
    if model.source == "huggingface":
        weights_from_hub(name=f"Weights {model.repo_id}@{model.revision} in {model.path}", model=model,
                         tool=WEIGHTS_TOOL, python=python, token_file=HF_TOKEN_FILE)
    else:
        weights_from_files(name=f"Weights ({model.source}) in {model.path}", model=model, tool=WEIGHTS_TOOL)
