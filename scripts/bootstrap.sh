# Install what rigforge needs on this machine (Debian/Ubuntu, as root), then activate its virtualenv.
# Sourced by scripts/sandbox and scripts/test; safe to run again (it only installs what is missing).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# System packages: venv/pip for the controller; gnupg and curl build and fetch the signed stand-in apt
# repositories of the tests. The Docker engine and debootstrap are installed by `python -m rigforge.sandbox`.
missing=()
python3 -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv python3-pip)
for tool in gpg:gnupg curl:curl git:git; do
    command -v "${tool%%:*}" >/dev/null 2>&1 || missing+=("${tool##*:}")
done
if ((${#missing[@]})); then
    echo "bootstrap: installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [[ ! -x .venv/bin/python ]]; then
    echo "bootstrap: creating .venv"
    python3 -m venv .venv
fi
# shellcheck disable=SC1091
source .venv/bin/activate
stamp=.venv/.rigforge-installed
if [[ ! -f $stamp || pyproject.toml -nt $stamp ]]; then
    echo "bootstrap: installing rigforge and its test dependencies into .venv"
    python -m pip install -q --upgrade pip
    python -m pip install -q -e ".[test]"
    touch "$stamp"
fi
# promtool, for the alerting rules' unit tests (tests/unit/test_monitoring_rules.py): the binary alone, unpacked
# from Debian's prometheus package into .cache/promtool. Installing the package would start a Prometheus server
# on this machine; the sandbox hosts get theirs from deploys/monitoring.py.
promtool=.cache/promtool/usr/bin/promtool
if [[ ! -x $promtool ]] && ! command -v promtool >/dev/null 2>&1; then
    echo "bootstrap: fetching promtool from Debian's prometheus package"
    mkdir -p .cache/promtool
    (cd .cache/promtool && { apt-get download -qq prometheus 2>/dev/null \
        || { apt-get update -qq && apt-get download -qq prometheus; }; } \
        && dpkg-deb --fsys-tarfile prometheus_*.deb | tar -x ./usr/bin/promtool && rm -f prometheus_*.deb) \
        || echo "bootstrap: could not fetch promtool (apt-get download prometheus): the rules' tests will fail"
fi
# amtool, for Alertmanager's configuration check (tests/unit/test_monitoring_config.py): the same way, from Debian's
# prometheus-alertmanager package into .cache/amtool.
amtool=.cache/amtool/usr/bin/amtool
if [[ ! -x $amtool ]] && ! command -v amtool >/dev/null 2>&1; then
    echo "bootstrap: fetching amtool from Debian's prometheus-alertmanager package"
    mkdir -p .cache/amtool
    (cd .cache/amtool && { apt-get download -qq prometheus-alertmanager 2>/dev/null \
        || { apt-get update -qq && apt-get download -qq prometheus-alertmanager; }; } \
        && dpkg-deb --fsys-tarfile prometheus-alertmanager_*.deb | tar -x ./usr/bin/amtool \
        && rm -f prometheus-alertmanager_*.deb) \
        || echo "bootstrap: could not fetch amtool (apt-get download prometheus-alertmanager): its test will fail"
fi
echo "bootstrap: ready ($(python --version), pyinfra $(python -c 'import pyinfra; print(pyinfra.__version__)'))"
