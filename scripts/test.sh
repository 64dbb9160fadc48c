#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what the tests need, then runs pytest.
# Used verbatim by .ci/run. Safe to re-run: installs are skipped when already present.
set -euo pipefail
cd "$(dirname "$0")/.."

# System packages used by the tests (real clients and servers, never imitations).
APT_PACKAGES="kcat prometheus podman buildah debootstrap runc catatonit openjdk-17-jdk-headless postgresql"
missing=""
for p in $APT_PACKAGES; do
    dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -n "$missing" ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing system packages:$missing"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null) \
        || echo "warning: could not install$missing; tests needing them will fail"
fi

python3 -m pip install -q -e '.[test,spark]'
exec python3 -m pytest -q -p no:cacheprovider "$@"
