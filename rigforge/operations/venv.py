"""A Python virtualenv holding one pinned package, rebuilt only when the pin changes."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import QuoteString, StringCommand, operation
from pyinfra.facts.files import FileContents

MARKER_NAME = ".rigforge-package"


def venv_marker(path: str) -> str:
    """The file recording which package spec the venv at ``path`` was built with."""
    return f"{path.rstrip('/')}/{MARKER_NAME}"


def installed_spec(marker_lines: list[str] | None) -> str | None:
    """The package spec a venv marker records (its first line), None when there is no marker."""
    return marker_lines[0].strip() if marker_lines else None


@operation()
def python_venv(path: str, package: str, python: str = "python3"):
    """
    Make ``path`` a virtualenv with ``package`` installed; keyed by the spec, so a new pin rebuilds it once.

    + path: the venv folder (replaced whole when the spec changes: venvs cannot be moved or upgraded in place)
    + package: pip requirement, pinned (``xllamacpp==2026.10.11549``)
    + python: interpreter that creates the venv

    The marker file is written last, so an interrupted install is redone on the next run; pip runs on a
    terminal, so it dies with the controller's connection instead of going on beside the next run.

    **Example:**

    .. code:: python

        python_venv(name="llama.cpp server venv", path="/opt/rigforge/llama-venv",
                    package="xllamacpp==2026.10.11549")
    """
    marker = venv_marker(path)
    current = installed_spec(host.get_fact(FileContents, path=marker))
    if current == package:
        host.noop(f"{path} has {package}")
        return
    if current:
        host.log(f"{path}: replacing {current} with {package}")
    yield StringCommand("rm", "-rf", QuoteString(path))
    yield StringCommand(python, "-m", "venv", QuoteString(path))
    # On a terminal: when the controller goes away mid-install, the hang-up ends pip with it (without one, pip
    # ran on detached and wrote into the venv the next run was rebuilding).
    yield StringCommand(
        QuoteString(f"{path}/bin/pip"), "install", "--no-cache-dir", "--disable-pip-version-check",
        "--progress-bar", "off", QuoteString(package), _get_pty=True,
    )
    yield StringCommand("printf", "'%s\\n'", QuoteString(package), ">", QuoteString(marker))
