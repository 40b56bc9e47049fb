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
set -euo pipefail

if [ "$(id -u)" -ne 0 ]; then
    echo "install-slurm-deps.sh: must run as root" >&2
    exit 1
fi

PKGS=(munge slurmctld slurmd slurm-client libslurm-dev libclang-dev clang dpkg-dev build-essential
      pkg-config ca-certificates)

# deb-src for bookworm, so `apt-get source slurm-wlm` works.
SRC_LIST=/etc/apt/sources.list.d/compass-bookworm-src.sources
if ! grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/ && ! grep -qs '^deb-src ' /etc/apt/sources.list; then
    cat > "$SRC_LIST" <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    NEED_UPDATE=1
fi

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
