"""Engine image builds on sandbox hosts: the sandbox profile with an image build, and a tiny base image.

The base image is made inside a sandbox host from the host's own files (no registry is reachable here):
``docker import`` of its python3, sh, a few tools and the libraries they load (~40 MB; with git ~45 MB), enough
for rigforge's build chain (build args, a git checkout, patches, the contents file) in seconds.

    overrides = build_overrides({"dockerfile": "chain-check", "base_image": "rigforge-test/minimal:1", "args": {}})
    import_minimal_image(host, "rigforge-test/minimal:1", extra_tools=("git",))
    repository = serve_stand_in_repository(host)      # git://ADDRESS/standin.git, branch main moves
    commit = push_commit(host, "one")

The stand-in repository stands in for GitHub, which is not reachable here: a bare repository served by
``git daemon`` (git://) on the host's own network address, which the other sandbox hosts and the host's own
build containers reach.
"""

from __future__ import annotations

from typing import Any

from rigforge.profile.loader import load_profile
from rigforge.sandbox import SandboxHost, exec_in

JIT_VOLUME = "rigforge-jit-cache"

TOOLS = ("python3.11", "python3", "dash", "sh", "cat", "rm", "find", "printf", "mkdir", "ls", "env")

# A root file system of the host's own tools (/usr/bin/NAME), with the libraries they load.
_ROOTFS = r"""
set -eu
tools="{tools}"
files=""
for t in $tools; do files="$files usr/bin/$t"; done
libs=$( (for t in $tools; do ldd "/usr/bin/$t" 2>/dev/null || true; done
         for f in /usr/lib/python3.11/lib-dynload/*.so; do ldd "$f"; done) \
       | awk '/=>/ {{print $3}} /ld-linux/ {{print $1}}' | sed 's#^/lib#/usr/lib#' | sort -u)
for l in $libs; do files="$files ${{l#/}} $(readlink -f "$l" | sed 's#^/##')"; done
tar -C / -c --exclude=__pycache__ --exclude=usr/lib/python3.11/test --exclude=usr/lib/python3.11/idlelib \
  --exclude=usr/lib/python3.11/tkinter bin lib lib64 sbin etc/passwd etc/group usr/lib/python3.11 \
  usr/lib/python3/dist-packages $(echo $files | tr ' ' '\n' | sort -u) 2>/dev/null
"""


def minimal_rootfs_script(extra_tools: tuple[str, ...] = ()) -> str:
    """The shell script that writes the root file system's tar to stdout."""
    return _ROOTFS.format(tools=" ".join((*TOOLS, *extra_tools)))


def import_minimal_image(host: SandboxHost, tag: str, extra_tools: tuple[str, ...] = ()) -> None:
    """``docker import`` the host's minimal root file system as ``tag`` in the host's own Docker engine."""
    proc = exec_in(host, ["sh", "-c", f"({minimal_rootfs_script(extra_tools)}) | docker import - {tag} >/dev/null"],
                   timeout=300)
    assert proc.returncode == 0, f"{host.name}: docker import of the minimal image failed: {proc.stderr}"


def build_overrides(build: dict[str, Any]) -> dict[str, Any]:
    """The sandbox profile serving from an engine image build ``build`` (no NVIDIA toolkit: test_container covers
    it). Its recipes that tune the native server are given a whole one (a recipe naming a native server runs that,
    not the image): recipes are checked against the profile they make, and a partial one is refused."""
    native = load_profile("sandbox").engine.native
    assert native is not None
    recipes = {name: {"native": {**native.model_dump(mode="json"), **recipe.native.model_dump(exclude_none=True)}}
               for name, recipe in load_profile("sandbox").engine.recipes.items() if recipe.native is not None}
    return {
        "container": {"runtime": "docker", "nvidia_toolkit": False},
        "engine": {
            "native": None,
            "build": build,
            "docker": {"gpus": "all", "ipc": "host", "shm_size": "1g", "ulimits": {}, "network": "host",
                       "volumes": {JIT_VOLUME: "/cache/jit"}, "jit_cache_volume": JIT_VOLUME},
            "recipes": recipes,
        },
    }


_STAND_IN = r"""
set -eu
mkdir -p /srv/git && git init -q --bare /srv/git/standin.git
git -C /srv/git/standin.git config uploadpack.allowAnySHA1InWant true  # fetch one commit by id, as GitHub allows
git init -q /srv/work && cd /srv/work && git config user.email t@example.org && git config user.name test
address=$(ip -4 -o addr show eth0 | awk '{print $4}' | cut -d/ -f1)
systemd-run --unit git-standin --collect git daemon --reuseaddr --base-path=/srv/git --export-all \
  --listen="$address" --port=9418 /srv/git >/dev/null 2>&1
echo "git://$address/standin.git"
"""


def serve_stand_in_repository(host: SandboxHost) -> str:
    """Serve an empty stand-in repository from ``host`` (git must be installed there); return its URL."""
    proc = exec_in(host, ["sh", "-c", _STAND_IN])
    assert proc.returncode == 0, f"{host.name}: the stand-in repository: {proc.stderr}"
    return proc.stdout.strip()


def push_commit(host: SandboxHost, message: str) -> str:
    """A new commit on main of the stand-in repository served from ``host``; its id."""
    proc = exec_in(host, f"cd /srv/work && echo {message} > file && git add file && git commit -qm {message} && "
                         "git push -q /srv/git/standin.git HEAD:main && git rev-parse HEAD")
    assert proc.returncode == 0, f"{host.name}: commit {message}: {proc.stderr}"
    return proc.stdout.strip()


def moving_ref_overrides(repository: str, base_image: str, ref: str = "main") -> dict[str, Any]:
    """The sandbox profile building chain-check from ``ref`` of ``repository`` (git on the rigs for ls-remote)."""
    build = build_overrides({"dockerfile": "chain-check", "base_image": base_image, "patches": [],
                             "args": {"SOURCE_REPOSITORY": repository, "SOURCE_REF": ref}})
    return {**build, "base_packages": [*load_profile("sandbox").base_packages, "git"]}
