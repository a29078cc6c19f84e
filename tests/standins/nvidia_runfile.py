"""STAND-IN for NVIDIA's .run driver installer (``NVIDIA-Linux-<arch>-<v>.run --silent -m=kernel-open``) and the
``nvidia-uninstall`` it leaves (sandbox tests only: the real one needs a GPU and builds a kernel module).

``install_runfile`` leaves on a sandbox host what the real installer leaves, so that rigforge meets a
hand-built .run rig: ``nvidia-installer`` and ``nvidia-uninstall`` linked to it, the install log, the open
module where the .run puts it, ``nvidia-smi`` and libraries, the installer's record, and the module
"loaded" (/run/nvidia-standin/version, which tests/standins/nvidia_cuda_repo.py's ``nvidia-smi`` reads).
A unit "loads" it again at every boot while the module file is there, before the repository's own module
unit (depmod prefers DKMS's updates/ to kernel/). Nothing else is real; every file says so but the record's
two, which keep NVIDIA's format.

Real behaviour followed (NVIDIA/nvidia-installer at tag 580.95.05, commit 1168830, unless said):

- The record (backup.c, backup.h): /var/lib/nvidia (0700) with ``log`` (0600): ``1.0-<digits> (<version>)``
  (create_backwards_compatible_version_string), the description (``NVIDIA Accelerated Graphics Driver for
  Linux-x86_64``, also in the install log's last line), then ``1: PATH`` + CRC per installed file and
  ``0: PATH`` + target per link (INSTALLED_FILE, INSTALLED_SYMLINK; a real log quoted in public notes reads
  the same); ``dirs``: the directories the install made. CRC (crc.c): CRC-32, polynomial 0x04C11DB7, MSB
  first, start ~0, no final xor, 0 for an empty file.
- ``nvidia-uninstall`` is nvidia-installer by another name (nvidia-installer.c parse_commandline), the
  relative link ``/usr/bin/nvidia-uninstall -> nvidia-installer`` (``ls -l`` of .run installs in public
  notes); both are in the record, so the uninstall removes them too.
- The uninstall (backup.c do_uninstall): checks each recorded file (CRC) and link (target), leaves the
  changed ones (logged, a WARNING on stderr), removes the rest, restores backups, removes the created
  directories that are empty (longest first) and /var/lib/nvidia, tries ``rmmod`` nvidia-drm ... nvidia
  unless ``--skip-module-unload`` (a failure is no error), runs ``depmod -a <kernel>``, ldconfig and
  ``systemctl daemon-reload``, logs to /var/log/nvidia-uninstall.log (nvidia-installer.h), leaves
  /var/log/nvidia-installer.log (not recorded), exits 0, even with nothing recorded (main, and
  uninstall_existing_driver returning TRUE).
- Logs (log.c log_init): ``nvidia-installer log file '<path>'``, ``creation time: <ctime>``, ``installer
  version: <v>``, PATH, the command line, then ``-> `` lines. ``-s``/``--silent``: "no output is printed,
  except for error messages to stderr" (--advanced-options); warnings go to stderr too (user-interface.c).
- The install ends loading nvidia-drm, hence nvidia (install-from-cwd.c); modules go to
  /lib/modules/`uname -r`/kernel/drivers/video (NVIDIA README, "Listing of Installed Components").

Where the stand-in differs: the real uninstall unloads the module when nothing holds it; the stand-in
always leaves /run/nvidia-standin/version: a rig whose GPUs are in use (persistence daemon, engine), where
rmmod fails and the old module stays loaded until the reboot. Only nvidia.ko, text libraries, no ldconfig
at install, and no backups of files it overwrites (the real one moves them into /var/lib/nvidia).
"""

from __future__ import annotations

import inspect
import os
import shlex
import tempfile
import time
from pathlib import Path

from rigforge.sandbox import SandboxHost, exec_in
from rigforge.sandbox.docker import docker
from tests.standins.kernels import module_elf
from tests.standins.nvidia_cuda_repo import COMPUTE_APPS_FILE, LOADED_FILE, NVIDIA_SMI, module_version_line

RUNFILE_VERSION = "580.95.05"
STANDIN_NOTE = "STAND-IN built by rigforge's tests (tests/standins/nvidia_runfile.py); no GPU, no real driver."
INSTALLER = "/usr/bin/nvidia-installer"
UNINSTALLER = "/usr/bin/nvidia-uninstall"
INSTALLER_LOG = "/var/log/nvidia-installer.log"
UNINSTALL_LOG = "/var/log/nvidia-uninstall.log"
RECORD_DIR = "/var/lib/nvidia"
RECORD = f"{RECORD_DIR}/log"
RECORD_DIRS = f"{RECORD_DIR}/dirs"
UNIT = "nvidia-standin-runfile-module.service"
MODULE_VERSION_FILE = "/usr/lib/nvidia-standin-runfile/module-version"
#: What the install creates that ``nvidia-uninstall`` leaves: its log, and the module stays loaded.
LEFT_BY_UNINSTALL = (INSTALLER_LOG, LOADED_FILE)
STAGE = "/tmp/rigforge-standin-runfile"
MULTIARCH = {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu"}

MODULE_UNIT = """\
# {note}
# "Loads" the .run's kernel module at boot, as the kernel does with a module in /lib/modules.
[Unit]
Description=Stand-in NVIDIA .run kernel module load (rigforge tests)
DefaultDependencies=no
ConditionPathExists={module}
After=local-fs.target
Before=nvidia-standin-module.service nvidia-persistenced.service sysinit.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -c 'install -d /run/nvidia-standin && cp {version_file} {loaded}'
"""

# The host side of nvidia-installer: uninstall (and --version); the constants and helpers are put before it.
UNINSTALLER_MAIN = r'''
def read_record():
    lines = open(RECORD).read().split("\n")
    entries, at = [], 2
    while at < len(lines) and lines[at]:
        number, path = lines[at].split(": ", 1)
        size = 2 if int(number) == 2 else 1
        entries.append((int(number), path, lines[at + 1:at + 1 + size]))
        at += 1 + size
    return lines[0], lines[1], entries


def unchanged(number, path, extra, note):
    if number == 1 and not (os.path.isfile(path) and not os.path.islink(path)):
        note(f"Unable to find installed file '{path}'.")
        return False
    if number == 1 and nvidia_crc(open(path, "rb").read()) != int(extra[0]):
        note(f"The installed file '{path}' has a different checksum than when it was installed.")
        return False
    if number == 0 and (not os.path.islink(path) or os.readlink(path) != extra[0]):
        note(f"The previously installed symlink '{path}' is gone or has another target; not uninstalled.")
        return False
    return True


def uninstall(note):
    """Returns the closing message; as the real one, never fails."""
    if not os.path.isdir(RECORD_DIR):
        return "There is no NVIDIA driver currently installed."
    version_line, description, entries = read_record()
    note("Parsing log file:")
    note("done.")
    note("Validating previous installation:")
    good = [unchanged(number, path, extra, note) for number, path, extra in entries]
    note("done.")
    if not all(good):
        print("\nWARNING: Your driver installation has been altered since it was initially installed; "
              f"nvidia-installer will attempt to uninstall as best it can.  Please see the file "
              f"'{UNINSTALL_LOG}' for details.\n", file=sys.stderr)
    note(f"Uninstalling {description} ({version_line}):")
    for (number, path, _), ok in zip(entries, good):
        try:
            if ok and number in (0, 1):  # the stand-in backs nothing up: no entries 2 and 100+ to restore
                os.unlink(path)
        except OSError as error:
            note(f"Unable to remove installed file '{path}' ({error.strerror}).")
    created = open(RECORD_DIRS).read().split("\n") if os.path.exists(RECORD_DIRS) else []
    kept = []
    for folder in sorted(filter(None, created), key=len, reverse=True):
        try:
            os.rmdir(folder)
        except OSError as error:
            kept.append(folder)
            note(f"Failed to delete the directory '{folder}' ({error.strerror}).")
    if kept:
        print(f"\nWARNING: Failed to delete some directories. See {UNINSTALL_LOG} for details.\n", file=sys.stderr)
    note("done.")
    shutil.rmtree(RECORD_DIR)
    # The stand-in module stays "loaded" (/run/nvidia-standin/version): rmmod of a module in use fails.
    note("Running depmod and ldconfig:")
    subprocess.run(["depmod", "-a", os.uname().release], stderr=subprocess.DEVNULL, check=False)
    subprocess.run(["ldconfig"], stderr=subprocess.DEVNULL, check=False)
    note("done.")
    note("Running `/usr/bin/systemctl daemon-reload`:")
    subprocess.run(["systemctl", "daemon-reload"], stderr=subprocess.DEVNULL, check=False)
    note("done.")
    return f"Uninstallation of existing driver: {description} ({version_line.split('(')[-1].rstrip(')')}) is complete."


def main(args):
    if args[:1] in (["-v"], ["--version"]):
        print(f"\nnvidia-installer:  version {VERSION}\n  (stand-in)\n")
        return 0
    if os.path.basename(sys.argv[0]) == "nvidia-uninstall" or "--uninstall" in args:
        with open(UNINSTALL_LOG, "w") as log:
            log.write(log_header(UNINSTALL_LOG, [sys.argv[0], *args], VERSION, time.ctime(),
                                 os.environ.get("PATH", "")))
            message = uninstall(lambda line: log.write(f"-> {line}\n"))
            log.write(f"-> {message}\n")
        if "-s" not in args and "--silent" not in args:
            print(message)
        return 0
    print(f"stand-in nvidia-installer: {' '.join(args)} is not emulated", file=sys.stderr)
    return 2


sys.exit(main(sys.argv[1:]))
'''


def nvidia_crc(data: bytes) -> int:
    """nvidia-installer's checksum of a file (crc.c): CRC-32, polynomial 0x04C11DB7, MSB first, start ~0,
    no final xor; 0 for an empty file. Self-contained: the stand-in uninstaller runs this source."""
    if not data:
        return 0
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte << 24
        for _ in range(8):
            crc = ((crc << 1) ^ 0x04C11DB7 if crc & 0x80000000 else crc << 1) & 0xFFFFFFFF
    return crc


def log_header(path: str, argv: list[str], version: str, when: str, search_path: str) -> str:
    """The head of nvidia-installer's logs (log.c log_init; ctime's own newline ends the time line)."""
    command = "".join(f"    {arg}\n" for arg in argv)
    return (f"nvidia-installer log file '{path}'\ncreation time: {when}\ninstaller version: {version}\n\n"
            f"PATH: {search_path}\n\nnvidia-installer command line:\n{command}\n")


def record_version(version: str) -> str:
    """The record's first line: ``1.0-5809505 (580.95.05)``."""
    return f"1.0-{''.join(c for c in version if c.isdigit())} ({version})"


def _description(machine: str) -> str:
    return f"NVIDIA Accelerated Graphics Driver for Linux-{machine}"


def _installer_script(version: str) -> str:
    return "\n".join([
        "#!/usr/bin/python3", f"# {STANDIN_NOTE}",
        '"""Stand-in nvidia-installer: --uninstall (or called as nvidia-uninstall) and --version."""',
        "import os, shutil, subprocess, sys, time", "",
        f"VERSION = {version!r}", f"RECORD_DIR = {RECORD_DIR!r}", f"RECORD = {RECORD!r}",
        f"RECORD_DIRS = {RECORD_DIRS!r}", f"UNINSTALL_LOG = {UNINSTALL_LOG!r}", "", "",
        inspect.getsource(nvidia_crc), "", inspect.getsource(log_header), UNINSTALLER_MAIN])


def _payload(version: str, kernel: str, machine: str) -> tuple[dict[str, tuple[bytes, int]], dict[str, str]]:
    """What the install puts where: {path: (content, mode)} and {link: target}, in install order."""
    libdir = f"/usr/lib/{MULTIARCH[machine]}"
    module = f"/lib/modules/{kernel}/kernel/drivers/video/nvidia.ko"
    values = {"note": STANDIN_NOTE, "loaded": LOADED_FILE, "version": version, "module": module,
              "version_file": MODULE_VERSION_FILE, "apps": COMPUTE_APPS_FILE}
    library = f"{STANDIN_NOTE}\nNVIDIA driver {version} library stand-in.\n".encode()
    files = {
        INSTALLER: (_installer_script(version).encode(), 0o755),
        "/usr/bin/nvidia-smi": (NVIDIA_SMI.format(**values).encode(), 0o755),
        f"{libdir}/libnvidia-ml.so.{version}": (library, 0o755),
        f"{libdir}/libcuda.so.{version}": (library, 0o755),
        module: (module_elf(version, kernel, machine), 0o644),
        MODULE_VERSION_FILE: (module_version_line(version, machine).encode(), 0o644),
        f"/usr/lib/systemd/system/{UNIT}": (MODULE_UNIT.format(**values).encode(), 0o644),
    }
    links = {UNINSTALLER: "nvidia-installer", f"{libdir}/libnvidia-ml.so.1": f"libnvidia-ml.so.{version}",
             f"{libdir}/libcuda.so.1": f"libcuda.so.{version}",
             f"/etc/systemd/system/sysinit.target.wants/{UNIT}": f"/usr/lib/systemd/system/{UNIT}"}
    return files, links


def runfile_paths(version: str = RUNFILE_VERSION) -> list[str]:
    """Every file and link the stand-in install creates on a sandbox host (they run this machine's kernel).

    All are gone after ``nvidia-uninstall`` but ``LEFT_BY_UNINSTALL``; the created directories are in
    /var/lib/nvidia/dirs and go too, when empty.
    """
    files, links = _payload(version, os.uname().release, os.uname().machine)
    return [*files, *links, RECORD, RECORD_DIRS, INSTALLER_LOG, LOADED_FILE]


def _record(version: str, machine: str, files: dict[str, tuple[bytes, int]], links: dict[str, str]) -> str:
    entries = [f"1: {path}\n{nvidia_crc(content)}\n" for path, (content, _) in files.items()]
    entries += [f"0: {path}\n{target}\n" for path, target in links.items()]
    return f"{record_version(version)}\n{_description(machine)}\n" + "".join(entries)


def _installer_log(version: str, machine: str) -> str:
    description = _description(machine)
    lines = [STANDIN_NOTE, f"Installing NVIDIA driver version {version}.", "Kernel module compilation complete.",
             f"Installing '{description}' ({version}):", "done.", "Driver file installation is complete.",
             f"Installation of the {description} (version: {version}) is now complete."]
    head = log_header(INSTALLER_LOG, ["./nvidia-installer", "--silent", "-m=kernel-open"], version,
                      time.ctime(), "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    return head + "".join(f"-> {line}\n" for line in lines)


def _install_script(kernel: str, files: dict[str, tuple[bytes, int]], links: dict[str, str]) -> str:
    """Shell run on the host: a former .run install uninstalled first (as the real one does), then the files
    from the stage, the record with the directories made, depmod, the module "loaded", the log."""
    quote = shlex.quote
    steps = [f'[ "$(uname -r)" = {quote(kernel)} ] || {{ echo "host kernel is not {kernel}" >&2; exit 1; }}',
             f"[ ! -x {UNINSTALLER} ] || {UNINSTALLER} -s --skip-depmod", f"rm -rf {RECORD_DIR}", f": > {STAGE}/dirs",
             # A real host's kernel package made /lib/modules/<kernel>; the sandbox runs a kernel it has no tree of.
             f"mkdir -p /lib/modules/{quote(kernel)}",
             'made() { d=$1; new=; while [ ! -d "$d" ]; do new="$d $new"; d=$(dirname "$d"); done; '
             f'for d in $new; do mkdir -m 755 "$d"; echo "$d" >> {STAGE}/dirs; done; }}']
    for number, (path, (_, mode)) in enumerate(files.items()):
        steps += [f"made {quote(os.path.dirname(path))}", f"install -m {mode:o} {STAGE}/{number} {quote(path)}"]
    for link, target in links.items():
        steps += [f"made {quote(os.path.dirname(link))}", f"ln -sfn {quote(target)} {quote(link)}"]
    steps += [f"install -d -m 700 {RECORD_DIR}", f"install -m 600 {STAGE}/record {RECORD}",
              f"install -m 644 {STAGE}/dirs {RECORD_DIRS}", f"depmod -a {quote(kernel)}", "systemctl daemon-reload",
              f"install -d {os.path.dirname(LOADED_FILE)}", f"cp {MODULE_VERSION_FILE} {LOADED_FILE}",
              f"install -m 644 {STAGE}/installer.log {INSTALLER_LOG}", f"rm -rf {STAGE}"]
    return "set -e\n" + "\n".join(steps) + "\n"


def install_runfile(host: SandboxHost, version: str = RUNFILE_VERSION) -> None:
    """Leave on ``host`` what ``NVIDIA-Linux-<arch>-<version>.run --silent -m=kernel-open`` leaves, module loaded."""
    kernel, machine = os.uname().release, os.uname().machine
    files, links = _payload(version, kernel, machine)
    with tempfile.TemporaryDirectory(prefix="rf-runfile-") as scratch:
        stage = Path(scratch) / "stage"
        stage.mkdir()
        for number, (content, _) in enumerate(files.values()):
            (stage / str(number)).write_bytes(content)
        (stage / "record").write_text(_record(version, machine, files, links))
        (stage / "installer.log").write_text(_installer_log(version, machine))
        docker("exec", host.container, "rm", "-rf", STAGE)
        docker("cp", str(stage), f"{host.container}:{STAGE}")
    proc = exec_in(host, _install_script(kernel, files, links))
    if proc.returncode != 0:
        raise RuntimeError(f"stand-in .run install on {host.name} failed: {proc.stderr.strip()}")

