#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what the tests need, then runs pytest.
# Used verbatim by .ci/run. Safe to re-run: installs are skipped when already present.
#
# Python: the active interpreter (`python3`: a virtualenv's when one is active). Outside a
# virtualenv, an interpreter the OS manages (Debian's: PEP 668, "externally-managed-environment")
# refuses `pip install`, so the script makes ./.venv (python3 -m venv) and uses that instead.
# System packages: installed with apt-get when missing, which needs root (CI runs as root);
# otherwise it says which are missing and the tests needing them fail.
set -euo pipefail
cd "$(dirname "$0")/.."

# System packages used by the tests (real clients and servers, never imitations), and
# python3-venv, without which Debian's python3 cannot make a virtualenv.
APT_PACKAGES="kcat prometheus podman buildah debootstrap runc catatonit openjdk-17-jdk-headless chromium fonts-dejavu-core python3-venv postgresql"
missing=""
for p in $APT_PACKAGES; do
    dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
# Commands the tests need (kafkajs and @platformatic/kafka run on node; npm installs them), with the
# Debian package that provides each, installed only when the command is missing: node and npm
# often come from elsewhere (NodeSource's nodejs bundles npm, and Debian's npm conflicts with it).
for pair in node:nodejs npm:npm; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || dpkg -s "${pair#*:}" >/dev/null 2>&1 || missing="$missing ${pair#*:}"
done
if [ -n "$missing" ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing system packages:$missing"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null) \
        || echo "warning: could not install$missing (apt-get needs root); tests needing them will fail"
fi

externally_managed() {
    python3 - <<'EOF'
import os, sys, sysconfig
in_venv = sys.prefix != sys.base_prefix
marker = os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")
sys.exit(0 if not in_venv and os.path.exists(marker) else 1)
EOF
}
if externally_managed; then
    echo "$(command -v python3) is managed by the OS (PEP 668): using the virtualenv ./.venv"
    [ -x .venv/bin/python3 ] || python3 -m venv .venv
    . .venv/bin/activate      # its python3, and its bin/ (the `kompakt` script) on PATH
fi

python3 -m pip install -q -e '.[test,spark]'
exec python3 -m pytest -q -p no:cacheprovider -n 2 --dist loadgroup "$@"
