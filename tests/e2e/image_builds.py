"""Engine image builds on sandbox hosts: the sandbox profile with an image build, and a tiny base image.

The base image is made inside a sandbox host from the host's own files (no registry is reachable here):
``docker import`` of its python3, sh, a few tools and the libraries they load (~40 MB; with git ~45 MB), enough
for rigforge's build chain (build args, a git checkout, patches, the contents file) in seconds.

    overrides = build_overrides({"dockerfile": "chain-check", "base_image": "rigforge-test/minimal:1", "args": {}})
    import_minimal_image(host, "rigforge-test/minimal:1", extra_tools=("git",))
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
