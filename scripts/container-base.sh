#!/usr/bin/env bash
# Build (or reuse) a local Debian bookworm image with python3, pip and venv, to stand in for
# python:3.11-slim-bookworm as docker/Dockerfile's BASE on machines with podman but no registry.
#
#   eval "$(scripts/container-base.sh)"      # exports KOMPAKT_BASE_IMAGE and CONTAINERS_CONF
#   podman build --format docker --isolation chroot --network host \
#       --build-arg BASE="$KOMPAKT_BASE_IMAGE" -f docker/Dockerfile -t kompakt .
#   podman run --init --network host --health-interval disable -e KOMPAKT_ADMIN_API_TOKEN=... kompakt
#       (no systemd: no health timers; the image binds the admin API to 0.0.0.0, so it needs a token)
#
# Steps, each skipped when its result exists (so CI pays debootstrap once per machine/cache):
#   1. containers.conf in the cache dir: runc, cgroupfs, file events, host network and ulimits below
#      the hard limits (this sandbox may not raise RLIMIT_NPROC/NOFILE to podman's defaults);
#   2. the image $KOMPAKT_BASE_IMAGE in podman's storage -> done;
#   3. else the rootfs tarball in the cache dir -> `podman import` it;
#   4. else `debootstrap --variant=minbase --include=python3,python3-pip,python3-venv bookworm`
#      from the Debian mirror apt uses here, apt caches dropped, tarred into the cache, imported.
# Environment: KOMPAKT_BASE_IMAGE (default localhost/kompakt-base:bookworm),
#   KOMPAKT_CONTAINER_CACHE (default ${XDG_CACHE_HOME:-$HOME/.cache}/kompakt-containers),
#   DEBIAN_MIRROR (default: the first Debian URI in /etc/apt/sources.list*), --rebuild forces step 4.
# Progress goes to stderr; stdout carries only the two export lines. Needs root (podman, debootstrap).
set -euo pipefail

IMAGE="${KOMPAKT_BASE_IMAGE:-localhost/kompakt-base:bookworm}"
CACHE="${KOMPAKT_CONTAINER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kompakt-containers}"
TARBALL="$CACHE/kompakt-base-bookworm.tar"
CONF="$CACHE/containers.conf"
REBUILD=0
[ "${1:-}" = "--rebuild" ] && REBUILD=1

say() { echo "container-base: $*" >&2; }
die() { say "error: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (podman import and debootstrap need it here)"
command -v podman >/dev/null || die "podman is not installed (apt-get install podman buildah runc)"
mkdir -p "$CACHE"

# --- 1. containers.conf -------------------------------------------------------------------------
if [ ! -s "$CONF" ]; then
    nofile_hard=$(ulimit -Hn); nproc_hard=$(ulimit -Hu)
    nofile=16384; nproc=8192
    [ "$nofile_hard" != unlimited ] && [ "$nofile_hard" -lt $((nofile * 2)) ] && nofile=$((nofile_hard / 2))
    [ "$nproc_hard" != unlimited ] && [ "$nproc_hard" -lt $((nproc * 2)) ] && nproc=$((nproc_hard / 2))
    cat > "$CONF.tmp" <<EOF
# Written by scripts/container-base.sh for podman without systemd or a registry.
[containers]
netns = "host"
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
    mv "$CONF.tmp" "$CONF"
    say "wrote $CONF"
fi
export CONTAINERS_CONF="$CONF"

emit() {
    echo "export KOMPAKT_BASE_IMAGE=$IMAGE"
    echo "export CONTAINERS_CONF=$CONF"
}

# --- 2. image already present -------------------------------------------------------------------
if [ "$REBUILD" = 0 ] && podman image exists "$IMAGE"; then
    say "using existing image $IMAGE"
    emit
    exit 0
fi

# --- 4. debootstrap (only when no cached tarball) -----------------------------------------------
if [ "$REBUILD" = 1 ] || [ ! -s "$TARBALL" ]; then
    command -v debootstrap >/dev/null || die "debootstrap is not installed (apt-get install debootstrap)"
    mirror="${DEBIAN_MIRROR:-}"
    if [ -z "$mirror" ]; then
        mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list 2>/dev/null \
                 | grep -vE '^[[:space:]]*#' | grep -oE 'https?://[^ ]*/debian/?' | grep -v security | head -n1 || true)
    fi
    mirror="${mirror:-http://deb.debian.org/debian}"
    rootfs=$(mktemp -d "${TMPDIR:-/var/tmp}/kompakt-rootfs.XXXXXX")
    trap 'rm -rf "$rootfs"' EXIT
    say "debootstrap bookworm from $mirror into $rootfs (a minute or two)"
    debootstrap --variant=minbase --include=python3,python3-pip,python3-venv bookworm "$rootfs" "$mirror" \
        > "$CACHE/debootstrap.log" 2>&1 || { tail -n 20 "$CACHE/debootstrap.log" >&2; die "debootstrap failed"; }
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/tmp/*
    tar -C "$rootfs" -cf "$TARBALL.tmp" .
    mv "$TARBALL.tmp" "$TARBALL"
    rm -rf "$rootfs"
    trap - EXIT
fi

# --- 3. import ----------------------------------------------------------------------------------
say "importing $TARBALL as $IMAGE"
podman import --change 'CMD ["/bin/bash"]' "$TARBALL" "$IMAGE" >&2
emit
