"""GRUB and initramfs updates that run only when their inputs changed.

Before ``update-grub`` the GRUB update composes the kernel command line exactly as grub-mkconfig does
(sourcing /etc/default/grub, then /etc/default/grub.d/*.cfg) and checks that every profile parameter
is in it, so a drop-in that another file overrides fails here with the composed line printed, not
silently at the next boot. Missing tools are errors that say what to do, never skipped steps (a dry run
notes them and plans on: rigforge/operations/missing_tool.py).

In a container host both tools run on the container's own files; grub-mkconfig needs grub-probe to
map the root file system, which a plain container cannot (the sandbox image diverts grub-probe for
that), and the kernel that runs is the machine's whatever grub.cfg says: a note says so.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from pyinfra import host, logger
from pyinfra.api import StringCommand, operation
from pyinfra.api.operation import OperationMeta

from rigforge.facts.packages import BootEnvironment
from rigforge.operations.followup import changed_this_run
from rigforge.operations.missing_tool import missing_tool


def grub_cmdline_check_script(kernel_params: Sequence[str], default_dir: str = "/etc/default") -> str:
    """Shell that composes GRUB's kernel command line from ``default_dir`` and checks ``kernel_params``."""
    wanted = " ".join(shlex.quote(param) for param in kernel_params)
    grub = shlex.quote(f"{default_dir}/grub")
    dropins = shlex.quote(f"{default_dir}/grub.d") + "/*.cfg"
    return (
        f'cmdline=$(if [ -e {grub} ]; then . {grub}; fi; '
        f'for f in {dropins}; do if [ -e "$f" ]; then . "$f"; fi; done; '
        'printf "%s" "$GRUB_CMDLINE_LINUX $GRUB_CMDLINE_LINUX_DEFAULT"); '
        'echo "GRUB kernel command line: $cmdline"; missing=""; '
        f'for p in {wanted}; do case " $cmdline " in *" $p "*) ;; *) missing="$missing $p";; esac; done; '
        'if [ -n "$missing" ]; then echo "the GRUB configuration lacks:$missing" >&2; exit 1; fi'
    )


@operation()
def update_grub(triggers: Sequence[OperationMeta], kernel_params: Sequence[str]):
    """
    Check the composed GRUB command line and run ``update-grub``, only when ``triggers`` changed.

    + triggers: the GRUB drop-in operation(s)
    + kernel_params: parameters the composed command line must contain

    **Example:**

    .. code:: python

        update_grub(name="Update GRUB", triggers=[dropin], kernel_params=["iommu=pt"])
    """
    if not changed_this_run(triggers):
        host.noop("GRUB drop-in unchanged")
        return
    tools = host.get_fact(BootEnvironment)
    if not tools.update_grub:
        missing_tool("update-grub is not installed: rigforge sets kernel parameters through GRUB "
                     "(/etc/default/grub.d); on a host that boots otherwise set them by hand")
        return
    if tools.container:
        host.log(f"{tools.container} container host: update-grub writes the container's grub.cfg; the kernel "
                 "that runs is the machine's", logger.info)
    yield StringCommand("sh", "-c", shlex.quote(grub_cmdline_check_script(kernel_params)))
    yield StringCommand("update-grub")


@operation()
def update_initramfs(triggers: Sequence[OperationMeta]):
    """
    Rebuild the initramfs of every installed kernel, only when ``triggers`` (its inputs) changed.

    + triggers: operations writing initramfs inputs (modprobe.d files)

    **Example:**

    .. code:: python

        update_initramfs(name="Update the initramfs", triggers=[blacklist_file])
    """
    if not changed_this_run(triggers):
        host.noop("initramfs inputs unchanged")
        return
    tools = host.get_fact(BootEnvironment)
    if not tools.update_initramfs:
        missing_tool("update-initramfs is not installed (Debian/Ubuntu's initramfs-tools): the modprobe.d "
                     "changes must reach the initramfs another way (dracut -f)")
        return
    if tools.container:
        host.log(f"{tools.container} container host: no kernel in /boot, update-initramfs has nothing to rebuild",
                 logger.info)
    yield StringCommand("update-initramfs", "-u", "-k", "all")
