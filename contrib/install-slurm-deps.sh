#!/usr/bin/env bash
# Installs what the Slurm plugins need to build and to run their lab-cluster
# tests on Debian 12 (bookworm), as root. Idempotent: a second run only
# checks. See docs/admin-guide.md.
#
# - munge, slurmctld, slurmd, slurm-client: the daemons and clients
#   (Slurm 22.05.8 in bookworm).
# - libslurm-dev: the public headers (/usr/include/slurm) and libslurm.so.
# - libclang-dev, clang: bindgen parses the headers with libclang.
# - dpkg-dev: `apt-get source` (contrib/prepare-slurm-source.sh) needs it.
# - build-essential: ./configure of the Slurm source tree needs a C compiler.
#
# Never install slurm-wlm-emulator: it repoints /usr/sbin/slurmctld and
# slurmd (update-alternatives priority 60) at a front-end build that does not
# work with the normal libslurmfull.so. If it is present, this script
# points the alternatives back at the real daemons.
#
# deb-src: when the machine has no deb-src line of its own, this script
# writes /etc/apt/sources.list.d/compass-bookworm-src.sources (and keeps it
# up to date on later runs): bookworm and bookworm-updates, plus
# bookworm-security from the URI of the machine's own binary entry for that
# suite when there is one (a Slurm security update is only there until the
# next point release, and prepare-slurm-source.sh fetches the source of
# exactly the installed version). `--sources-only` writes that file and
# stops; COMPASS_APT_ETC (default /etc/apt) is where the sources are.
set -euo pipefail

APT_ETC=${COMPASS_APT_ETC:-/etc/apt}
SOURCES_ONLY=0
[ "${1:-}" = --sources-only ] && SOURCES_ONLY=1
if [ "$SOURCES_ONLY" = 0 ] && [ "$(id -u)" -ne 0 ]; then
    echo "install-slurm-deps.sh: must run as root" >&2
    exit 1
fi

PKGS=(munge slurmctld slurmd slurm-client libslurm-dev libclang-dev clang dpkg-dev build-essential
      pkg-config ca-certificates)

# deb-src for bookworm, so `apt-get source slurm-wlm` works.
SRC_LIST=$APT_ETC/sources.list.d/compass-bookworm-src.sources

# The URI of the machine's enabled binary (deb) entry for bookworm-security,
# from deb822 .sources files or one-line .list files; empty when none.
security_uri() {
    local f
    for f in "$APT_ETC"/sources.list.d/*.sources; do
        if [ ! -f "$f" ] || [ "$f" = "$SRC_LIST" ]; then continue; fi
        awk 'function flush() {
                 if (deb && sec && on && uri != "") { print uri; found = 1; exit }
                 deb = sec = 0; on = 1; uri = ""
             }
             BEGIN { on = 1 }
             /^[ \t]*#/ { next }
             /^[ \t]*$/ { flush(); next }
             { k = tolower($1) }
             k == "types:" { for (i = 2; i <= NF; i++) if ($i == "deb") deb = 1 }
             k == "suites:" { for (i = 2; i <= NF; i++) if ($i == "bookworm-security") sec = 1 }
             k == "uris:" { uri = $2 }
             k == "enabled:" && tolower($2) == "no" { on = 0 }
             END { if (!found) flush() }' "$f"
    done
    for f in "$APT_ETC/sources.list" "$APT_ETC"/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        awk '$1 == "deb" {
                 i = 2
                 if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
                 if ($(i + 1) == "bookworm-security") { print $i; exit }
             }' "$f"
    done
}

src_list() {
    local sec
    sec=$(security_uri | sed -n 1p)   # reads all: no SIGPIPE under pipefail
    cat <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    if [ -n "$sec" ]; then
        cat <<SRC

Types: deb-src
URIs: $sec
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    fi
}

# Ours to write: it exists already (a run of this script made it), or the
# machine has no deb-src line at all.
other_deb_src() {
    local f
    for f in "$APT_ETC"/sources.list.d/*.sources; do
        if [ ! -f "$f" ] || [ "$f" = "$SRC_LIST" ]; then continue; fi
        if grep -qs '^Types:.*deb-src' "$f"; then return 0; fi
    done
    for f in "$APT_ETC/sources.list" "$APT_ETC"/sources.list.d/*.list; do
        if grep -qs '^deb-src ' "$f"; then return 0; fi
    done
    return 1
}
if [ -e "$SRC_LIST" ] || ! other_deb_src; then
    want=$(src_list)
    if [ "$(cat "$SRC_LIST" 2>/dev/null || true)" != "$want" ]; then
        mkdir -p "$(dirname "$SRC_LIST")"
        printf '%s\n' "$want" >"$SRC_LIST"
        NEED_UPDATE=1
        echo "install-slurm-deps.sh: wrote $SRC_LIST"
    fi
fi
[ "$SOURCES_ONLY" = 1 ] && exit 0

missing=()
for p in "${PKGS[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done

if [ "${#missing[@]}" -gt 0 ] || [ -n "${NEED_UPDATE:-}" ]; then
    apt-get update -q
fi
if [ "${#missing[@]}" -gt 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# Trap 1 of the lab report: the emulator hijacks the daemon alternatives.
for d in slurmctld slurmd; do
    if [ -x "/usr/sbin/$d-wlm" ] && update-alternatives --query "$d" >/dev/null 2>&1; then
        update-alternatives --set "$d" "/usr/sbin/$d-wlm" >/dev/null
    fi
done

for b in /usr/sbin/slurmctld /usr/sbin/slurmd /usr/sbin/slurmstepd /usr/sbin/munged /usr/include/slurm/slurm.h; do
    if [ ! -e "$b" ]; then
        echo "install-slurm-deps.sh: $b missing after install" >&2
        exit 1
    fi
done
echo "install-slurm-deps.sh: ok ($(dpkg-query -W -f='${Version}' slurmctld))"
