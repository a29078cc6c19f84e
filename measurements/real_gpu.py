"""rigforge on a real NVIDIA machine, run on the machine itself (``inventory/local.py``, pyinfra's ``@local``).

Two commands, both run on the GPU machine as root from the repository root (not part of CI, which has no GPU):

    python3 measurements/real_gpu.py capture DIR   # the raw outputs the facts and checks parse, as fixtures
    python3 measurements/real_gpu.py run DIR       # preflight, probe, dry run, doctor, verify: one table

``capture`` writes each command's stdout byte for byte to DIR/NAME (stderr to NAME.stderr when there is any)
and a manifest.tsv of names, exit statuses and commands: the driver's origin (modinfo, ``dpkg -S`` of the module
file and of the user-space libraries the loader finds, the .run installer's traces, DKMS), nvidia-smi's XML
and topology, /proc/driver/nvidia, the kernel log's NVIDIA lines, and the output of every rigforge fact's own
command (``fact-<Name>.txt``, as pyinfra's ``@local`` runs it).

``run`` runs each step as a user would, with ``RIGFORGE_PROFILE`` (default ``2x-pix``), keeps each step's whole
output in DIR/<step>.txt and prints one table: step, exit status, seconds, whether a traceback appeared, and
the line that says what the step found. The probe runs with the machine's own ``python3`` (PyTorch there),
outside the wheels this checkout may have been given through PYTHONPATH.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import pkgutil
import re
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

#: NAME -> shell command; what the facts read, plus what tells where the driver came from.
RAW_COMMANDS = {
    "date.txt": "date -u +%Y-%m-%dT%H:%M:%SZ",
    "uname-a.txt": "uname -a",
    "os-release.txt": "cat /etc/os-release",
    "virt.txt": "systemd-detect-virt 2>&1; cat /sys/class/dmi/id/sys_vendor /sys/class/dmi/id/product_name 2>&1; "
                "echo pid1=$(cat /proc/1/comm); test -d /run/systemd/system && echo systemd-running",
    "tools.txt": "for t in nvidia-smi modinfo dpkg dpkg-query apt-get dkms update-initramfs dracut update-grub "
                 "journalctl systemctl docker lspci nvidia-uninstall nvidia-installer mokutil; do "
                 "printf '%s\\t%s\\n' $t \"$(command -v $t)\"; done",
    "python-torch.txt": "env -u PYTHONPATH python3 -c 'import sys, torch; print(sys.version.split()[0], "
                        "torch.__version__, torch.version.cuda, torch.cuda.nccl.version())'",
    "nvidia-smi-q-x.xml": "nvidia-smi -q -x",
    "nvidia-smi-topo-m.txt": "nvidia-smi topo -m",
    "nvidia-smi-version.txt": "nvidia-smi --version",
    "nvidia-smi-L.txt": "nvidia-smi -L",
    "proc-driver-nvidia-version.txt": "cat /proc/driver/nvidia/version",
    "proc-driver-nvidia-params.txt": "cat /proc/driver/nvidia/params",
    "proc-driver-nvidia-gpus-information.txt": "grep -H '' /proc/driver/nvidia/gpus/*/information",
    "sys-module-nvidia.txt": "cat /sys/module/nvidia/version; ls /sys/module | grep -i nvidia; "
                             "grep -i nvidia /proc/modules",
    "modinfo-nvidia.txt": "modinfo nvidia",
    "modinfo-filenames.txt": "for m in nvidia nvidia_uvm nvidia_modeset nvidia_drm nvidia_peermem; do "
                             "printf '%s\\t%s\\n' $m \"$(modinfo -F filename $m 2>&1)\"; done",
    "dpkg-S-module.txt": "for m in nvidia nvidia_uvm nvidia_modeset nvidia_drm; do f=$(modinfo -F filename $m "
                         "2>/dev/null); [ -n \"$f\" ] && dpkg -S \"$f\"; done; true",
    "ldconfig-nvidia.txt": "ldconfig -p | grep -E 'libcuda\\.so|libnvidia-(ml|ptxjitcompiler|nvvm)\\.so'",
    "userspace-libs.txt": "for l in libcuda.so.1 libnvidia-ml.so.1 libnvidia-ptxjitcompiler.so.1; do "
                          "for p in $(ldconfig -p | awk -v l=$l '$1 == l {print $NF}'); do "
                          "printf '%s\\t%s\\t%s\\n' $l $p \"$(readlink -f $p)\"; done; done",
    "dpkg-S-userspace.txt": "for l in libcuda.so.1 libnvidia-ml.so.1 libnvidia-ptxjitcompiler.so.1; do "
                            "for p in $(ldconfig -p | awk -v l=$l '$1 == l {print $NF}'); do "
                            "dpkg -S \"$p\" \"$(readlink -f $p)\" 2>&1; done; done; true",
    "dpkg-nvidia-cuda.txt": "dpkg-query -W -f='${db:Status-Abbrev} ${Package} ${Version} ${source:Package}\\n' "
                            "2>/dev/null | grep -Ei 'nvidia|cuda-compat|cuda-driver|libcuda|libnvidia'",
    "dpkg-L-cuda-compat.txt": "for p in $(dpkg-query -W -f='${Package}\\n' 'cuda-compat*' 2>/dev/null); do "
                              "echo \"## $p\"; dpkg -L $p; done",
    "apt-cache-policy-cuda-compat.txt": "LC_ALL=C apt-cache policy $(dpkg-query -W -f='${Package}\\n' "
                                        "'cuda-compat*' 2>/dev/null)",
    "runfile-traces.txt": "ls -la /usr/bin/nvidia-uninstall /usr/bin/nvidia-installer /var/log/nvidia-installer.log "
                          "/var/lib/nvidia 2>&1; head -n 20 /var/log/nvidia-installer.log 2>&1",
    "dkms-status.txt": "dkms status 2>&1; ls /var/lib/dkms 2>&1",
    "dev-nvidia.txt": "ls -la /dev/nvidia* 2>&1",
    "mounts-nvidia.txt": "grep -iE 'nvidia|libcuda' /proc/self/mountinfo",
    "dmesg-nvidia.txt": "dmesg 2>&1 | grep -iE 'nvidia|nvrm|xid|iommu|dmar' | head -n 300",
}


def fact_classes() -> dict[str, type]:
    """Every rigforge fact whose command takes no argument, by class name."""
    from pyinfra.api import FactBase

    import rigforge.facts as package

    found: dict[str, type] = {}
    for module_info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"rigforge.facts.{module_info.name}")
        for name, value in vars(module).items():
            if (inspect.isclass(value) and issubclass(value, FactBase) and value.__module__ == module.__name__
                    and all(parameter.default is not inspect.Parameter.empty
                            for parameter in list(inspect.signature(value.command).parameters.values())[1:])):
                found[name] = value
    return found


def capture(folder: Path) -> int:
    """Run the raw commands and every fact's command here (``sh -c``, as pyinfra's @local does)."""
    folder.mkdir(parents=True, exist_ok=True)
    commands = dict(RAW_COMMANDS)
    for name, fact in sorted(fact_classes().items()):
        instance = fact()
        command = instance.command()
        required = instance.requires_command()
        commands[f"fact-{name}.txt"] = (f"if command -v {required} >/dev/null 2>&1; then ( {command} ); fi"
                                        if required else command)
    manifest = ["file\trc\tcommand"]
    for name, command in commands.items():
        result = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=False, timeout=300)
        (folder / name).write_text(result.stdout)
        if result.stderr:
            (folder / f"{name}.stderr").write_text(result.stderr)
        manifest.append(f"{name}\t{result.returncode}\t{command}")
        print(f"captured {name} (rc={result.returncode})", flush=True)
    (folder / "manifest.tsv").write_text("\n".join(manifest) + "\n")
    return 0


def steps(profile: str) -> dict[str, list[str]]:
    """Step name -> command line, each as a user runs it on the rig."""
    pyinfra = [sys.executable, "-m", "pyinfra"]
    inventory = "inventory/local.py"
    return {
        "preflight": [*pyinfra, "-y", inventory, "deploys/preflight.py"],
        "preflight-probe": [*pyinfra, "-y", inventory, "deploys/preflight.py", "--data", "probe=true",
                            "--data", "probe_python=python3"],
        "full-dry": [*pyinfra, inventory, "deploys/full.py", "--dry"],
        "doctor": [sys.executable, "-m", "rigforge.doctor", inventory],
        "verify": [sys.executable, "-m", "pytest", "tests/verify", "--hosts=local://", "--profile", profile,
                   "-p", "no:cacheprovider", "-q", "-rfE", "-o", "addopts="],
        "probe": ["python3", "rigforge/probe/interconnect.py", "--step-timeout", "180"],
    }


#: Per step: the lines of its output that say what it found (the last match is shown).
FINDINGS = {
    "preflight": r"preflight @local: .*",
    "preflight-probe": r"probe: GPU\d+<->GPU\d+: .*|probe failed: .*|probe: the probe printed no report.*",
    "full-dry": r".*a run stops here before any change.*|--> (Operation error|pyinfra error).*",
    "doctor": r"\| @local \|.*",
    "verify": r"\d+ (passed|failed).*",
    "probe": r"probe: \d+ steps, .*",
}
#: The takeover table's driver row, first line (the table prints each row over several lines).
TAKEOVER_DRIVER = re.compile(r"\[@local\] (nvidia-driver\s*\|.*)")


def finding(step: str, output: str) -> str:
    """The line that says what a step found (for the dry run: how many missing tools it planned past, and the
    last of them or the error that ended it)."""
    matches = [match.group(0) for match in re.finditer(FINDINGS[step], output)]
    found = (matches[-1] if matches else "-").strip()
    if step == "full-dry":
        noted = sum("a run stops here before any change" in match for match in matches)
        found = f"{noted} missing tool(s) noted, planned on; last: {found}"
    return re.sub(r"\s+", " ", found)[:150]


def takeover_row(output: str) -> str:
    """The takeover table's driver row, its cells joined across the lines it spans."""
    lines = output.splitlines()
    for index, line in enumerate(lines):
        if TAKEOVER_DRIVER.search(line):
            cells = [cell.strip() for cell in line.split("] ", 1)[1].split("|")]
            for more in lines[index + 1:]:
                body = more.split("] ", 1)[1] if "] " in more else ""
                parts = body.split("|")
                if len(parts) != len(cells) or parts[0].strip():
                    break
                cells = [f"{cell} {part.strip()}".strip() for cell, part in zip(cells, parts, strict=True)]
            return " | ".join(cells)
    return "-"


def run(folder: Path, profile: str) -> int:
    """Run every step, keep its output under ``folder``, print one table."""
    folder.mkdir(parents=True, exist_ok=True)
    environment = {**os.environ, "RIGFORGE_PROFILE": profile, "PYTHONUNBUFFERED": "1"}
    rows = []
    takeover = "-"
    for step, command in steps(profile).items():
        step_environment = dict(environment)
        if step == "probe":  # the machine's own Python and PyTorch, not the carried wheels
            step_environment.pop("PYTHONPATH", None)
        start = time.monotonic()
        try:
            result = subprocess.run(command, cwd=REPO_ROOT, env=step_environment, capture_output=True, text=True,
                                    check=False, timeout=900)
            status, output = str(result.returncode), result.stdout + result.stderr
        except subprocess.TimeoutExpired as exc:
            status, output = "timeout", f"{exc.stdout or ''}{exc.stderr or ''}"
        seconds = time.monotonic() - start
        (folder / f"{step}.txt").write_text(f"$ {' '.join(command)}\n{output}\nexit status: {status}\n")
        if step == "preflight":
            takeover = takeover_row(output)
        # At a line's start: pytest quotes a failed command's own traceback behind "E ", which is no crash.
        traceback = "yes" if re.search(r"^Traceback \(most recent call last\)", output, re.MULTILINE) else "no"
        rows.append((step, status, f"{seconds:.1f}", traceback, finding(step, output)))
        print(f"{step}: exit {status} in {seconds:.1f} s", flush=True)
    print(f"\nrigforge on this machine as @local, profile {profile}:")
    print("| step | exit | s | traceback | what it found |")
    print("|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |")
    print(f"\nthe takeover's driver row: {takeover}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("capture", "run"))
    parser.add_argument("folder", type=Path)
    parser.add_argument("--profile", default=os.environ.get("RIGFORGE_PROFILE", "2x-pix"))
    args = parser.parse_args(argv)
    return capture(args.folder) if args.what == "capture" else run(args.folder, args.profile)


if __name__ == "__main__":
    sys.exit(main())
