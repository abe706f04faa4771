#!/usr/bin/env bash
# Build a Python base image for chainlets without pulling anything: a minimal Debian root
# file system made by debootstrap from this machine's own apt mirror, imported with
# `docker import`. For engines that cannot reach a container registry (CI, offline machines).
#
#   docker/build-base-image.sh [IMAGE]        # default image: chains-python:bookworm
#
# Skips the work when IMAGE already exists (pass --force to rebuild). The mirror is read
# from the apt sources of this machine; set CHAINS_DEBIAN_MIRROR to choose another, and
# CHAINS_DEBIAN_SUITE for another release than the machine's own.
# Needs root, debootstrap, and a running engine reachable by the `docker` command
# (DOCKER_HOST is honoured).
set -euo pipefail

force=0
image=""
for arg in "$@"; do
    case "$arg" in
        --force) force=1 ;;
        -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "unknown option $arg (see --help)" >&2; exit 2 ;;
        *) image="$arg" ;;
    esac
done
image="${image:-chains-python:bookworm}"

if [[ $force == 0 ]] && docker image inspect "$image" >/dev/null 2>&1; then
    echo "base image $image exists; nothing to do (--force rebuilds it)"
    exit 0
fi
command -v debootstrap >/dev/null || { echo "debootstrap is missing: apt-get install -y debootstrap" >&2; exit 1; }
[[ $(id -u) == 0 ]] || { echo "debootstrap needs root; run this script as root" >&2; exit 1; }

suite="${CHAINS_DEBIAN_SUITE:-}"
if [[ -z $suite ]]; then
    suite="$(. /etc/os-release && echo "${VERSION_CODENAME:-}")"
fi
[[ -n $suite ]] || { echo "cannot tell the Debian release; set CHAINS_DEBIAN_SUITE (e.g. bookworm)" >&2; exit 1; }

# The first enabled apt source that serves "$suite" itself (not -updates or -security), in
# either the one-line format (sources.list) or the deb822 one (*.sources).
find_mirror() {
    local file
    for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [[ -f $file ]] || continue
        awk -v suite="$suite" '
            $1 == "deb" {
                i = 2
                if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
                if ($(i + 1) == suite) { print $i; exit }
            }' "$file"
    done
    for file in /etc/apt/sources.list.d/*.sources; do
        [[ -f $file ]] || continue
        awk -v suite="$suite" '
            function flush() {
                if (enabled && is_deb && has_suite && uri != "") { print uri; found = 1; exit }
                uri = ""; is_deb = 0; has_suite = 0; enabled = 1
            }
            BEGIN { enabled = 1 }
            /^[[:space:]]*$/ { flush(); next }
            /^#/ { next }
            tolower($1) == "types:" { for (i = 2; i <= NF; i++) if ($i == "deb") is_deb = 1 }
            tolower($1) == "uris:" { uri = $2 }
            tolower($1) == "suites:" { for (i = 2; i <= NF; i++) if ($i == suite) has_suite = 1 }
            tolower($1) == "enabled:" { enabled = (tolower($2) != "no") }
            END { if (!found) flush() }' "$file"
    done
}

mirror="${CHAINS_DEBIAN_MIRROR:-$(find_mirror | head -n 1)}"
[[ -n $mirror ]] || {
    echo "no apt source for $suite found in /etc/apt; set CHAINS_DEBIAN_MIRROR to a Debian mirror URL" >&2
    exit 1
}

rootfs="$(mktemp -d "${TMPDIR:-/tmp}/chains-rootfs.XXXXXX")"
log="$rootfs.log"
trap 'rm -rf "$rootfs" "$log"' EXIT

echo "debootstrap $suite (minbase, python3) into $rootfs ..."
debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates \
    "$suite" "$rootfs" "$mirror" >"$log" 2>&1 || {
    tail -n 30 "$log" >&2
    echo "debootstrap failed (the lines above are its last)" >&2
    exit 1
}
# Only what a running image needs: no apt lists or caches, no docs.
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb \
    "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/*

echo "importing it as $image ..."
tar --numeric-owner -C "$rootfs" -c . | docker import \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["python3"]' \
    - "$image" >/dev/null
echo "built base image $image ($(docker image inspect --format '{{.Size}}' "$image") bytes)"
