#!/usr/bin/env bash
# Builds the base image the project's Dockerfiles start FROM, debian:bookworm-slim, from
# Debian's own archive with debootstrap, and loads it into a Docker daemon: for machines that
# reach Debian's mirror but no container registry (the tests, air-gapped build hosts).
#
#   deploy/images/debian-base.sh [options]
#
# The result is what Debian's official slim image is made of: the minbase variant of
# debootstrap, without documentation, manual pages and translations, with apt set up to
# leave no caches behind. The root filesystem is kept as a tarball in a cache directory, so
# only a machine's first build runs debootstrap (the slow part); later ones import it.
#
# Options:
#   --tag NAME               the image name (default: debian:bookworm-slim)
#   --mirror URL             Debian's archive (default: http://deb.debian.org/debian)
#   --trust-local-certificates
#                            also trust the CA certificates this machine adds to Debian's own
#                            (/usr/local/share/ca-certificates/*.crt), for builds that reach
#                            PyPI or Maven Central through a TLS-inspecting proxy: installs
#                            ca-certificates with them, and points pip at that bundle
#   --rebuild                run debootstrap even when the cache has the tarball
#   --no-import              only make sure the cache has the tarball (no Docker needed)
#
# Environment: DOCKER (default: docker on PATH) and DOCKER_HOST choose the daemon;
# COORDINATOR_IMAGE_CACHE overrides the cache directory (default: coordinator-server/images
# in the user's cache directory, so that every clone on a machine shares it). Needs root
# (debootstrap chroots) and debootstrap.
set -euo pipefail

docker="${DOCKER:-docker}"
tag="debian:bookworm-slim" mirror="http://deb.debian.org/debian" trust_local="" rebuild="" no_import=""
while [ $# -gt 0 ]; do
    case "$1" in
        --tag) tag="$2"; shift 2 ;;
        --mirror) mirror="$2"; shift 2 ;;
        --trust-local-certificates) trust_local=1; shift ;;
        --rebuild) rebuild=1; shift ;;
        --no-import) no_import=1; shift ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) echo "debian-base.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done

suite="bookworm"
arch="$(dpkg --print-architecture)"
local_certificates=()
if [ -n "$trust_local" ]; then
    shopt -s nullglob
    local_certificates=(/usr/local/share/ca-certificates/*.crt)
    shopt -u nullglob
fi
# The certificates are part of the root filesystem, so they are part of the cache's key.
key="$suite-slim-$arch"
if [ ${#local_certificates[@]} -gt 0 ]; then
    key="$key-ca-$(cat "${local_certificates[@]}" | sha256sum | cut -c1-12)"
fi
cache="${COORDINATOR_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/coordinator-server/images}"
tarball="$cache/debian-$key.tar"
mkdir -p "$cache"

started_ns="$(date +%s%N)"
elapsed() { echo "$(( ($(date +%s%N) - started_ns) / 1000000 ))"; }

# Builds started side by side (test processes) run debootstrap once; the others wait.
exec 9>"$tarball.lock"
flock 9
if [ -n "$rebuild" ] || [ ! -f "$tarball" ]; then
    command -v debootstrap >/dev/null || { echo "debian-base.sh: debootstrap is not installed" >&2; exit 1; }
    work="$(mktemp -d "$cache/rootfs.XXXXXX")"
    trap 'rm -rf "$work"' EXIT
    rootfs="$work/rootfs"
    mkdir -p "$rootfs/etc/dpkg/dpkg.cfg.d"
    # What Debian's slim images leave out, set before the first package is unpacked.
    cat > "$rootfs/etc/dpkg/dpkg.cfg.d/docker-slim" <<'CFG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
CFG
    include=()
    if [ ${#local_certificates[@]} -gt 0 ]; then
        include=(--include=ca-certificates)
        mkdir -p "$rootfs/usr/local/share/ca-certificates"
        cp "${local_certificates[@]}" "$rootfs/usr/local/share/ca-certificates/"
    fi
    echo "debian-base.sh: debootstrap $suite ($arch) from $mirror" >&2
    debootstrap --variant=minbase "${include[@]+"${include[@]}"}" "$suite" "$rootfs" "$mirror" >&2
    if [ ${#local_certificates[@]} -gt 0 ]; then
        chroot "$rootfs" update-ca-certificates >&2
        printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' > "$rootfs/etc/pip.conf"
    fi
    # Debian's sources as the official image lists them: the release, its updates, security.
    rm -f "$rootfs/etc/apt/sources.list"
    cat > "$rootfs/etc/apt/sources.list.d/debian.sources" <<SOURCES
Types: deb
URIs: $mirror
Suites: $suite $suite-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${mirror%/debian}/debian-security
Suites: $suite-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
    # apt in an image build: no cached packages, no translations, no suggested packages kept.
    cat > "$rootfs/etc/apt/apt.conf.d/docker-clean" <<'CFG'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
CFG
    echo 'Acquire::Languages "none";' > "$rootfs/etc/apt/apt.conf.d/docker-no-languages"
    echo 'Apt::AutoRemove::SuggestsImportant "false";' > "$rootfs/etc/apt/apt.conf.d/docker-autoremove-suggests"
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
        "$rootfs"/var/log/*.log "$rootfs"/var/log/apt/* "$rootfs"/tmp/*
    : > "$rootfs/etc/machine-id"
    tar --numeric-owner -C "$rootfs" -cf "$tarball.partial" .
    mv "$tarball.partial" "$tarball"
    rm -rf "$work"
    trap - EXIT
    echo "debian-base.sh: built $tarball in $(elapsed) ms" >&2
fi
exec 9>&-
if [ -n "$no_import" ]; then
    echo "$tarball ready in $(elapsed) ms"
    exit 0
fi
"$docker" import --change 'CMD ["bash"]' "$tarball" "$tag" >/dev/null
echo "$tag ready in $(elapsed) ms ($(du -m "$tarball" | cut -f1) MB)"
