#!/usr/bin/env bash
# Prepares the Slurm source tree whose internal headers the select plugin is
# compiled against (src/slurmctld/slurmctld.h, src/common/select.h, ...):
# `apt-get source slurm-wlm` of the installed release, then ./configure once
# so config.h exists. Idempotent: does nothing when the tree is ready.
#
# Where: $COMPASS_SLURM_SRC, default /var/cache/compass/slurm-src. The tree
# ends up in $COMPASS_SLURM_SRC/slurm-wlm-<upstream version>, and
# $COMPASS_SLURM_SRC/current is a symlink to it (slurm-plugin/slurm-sys reads
# that). Needs contrib/install-slurm-deps.sh first (deb-src line, dpkg-dev).
set -euo pipefail

DEST=${COMPASS_SLURM_SRC:-/var/cache/compass/slurm-src}
VERSION=$(dpkg-query -W -f='${Version}' libslurm-dev 2>/dev/null || true)
if [ -z "$VERSION" ]; then
    echo "prepare-slurm-source.sh: libslurm-dev is not installed; run contrib/install-slurm-deps.sh first" >&2
    exit 1
fi
UPSTREAM=${VERSION%%-*}
TREE="$DEST/slurm-wlm-$UPSTREAM"
STAMP="$TREE/.compass-configured"

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$VERSION" ]; then
    ln -sfn "$TREE" "$DEST/current"
    echo "prepare-slurm-source.sh: $TREE already configured for $VERSION"
    exit 0
fi

mkdir -p "$DEST"
cd "$DEST"
if [ ! -f "$TREE/configure" ]; then
    rm -rf "$TREE"
    # Source package of exactly the installed binary version.
    apt-get source -q --only-source "slurm-wlm=$VERSION" >/dev/null
fi

cd "$TREE"
# Same options as Debian's build (debian/rules) where they change headers;
# only config.h and the generated headers are needed, nothing is compiled.
./configure -q --prefix=/usr --sysconfdir=/etc/slurm --without-rpath --disable-debug \
    --enable-multiple-slurmd --enable-deprecated --without-pmix >"$DEST/configure.log" 2>&1 || {
    echo "prepare-slurm-source.sh: ./configure failed, see $DEST/configure.log" >&2
    exit 1
}
echo "$VERSION" >"$STAMP"
ln -sfn "$TREE" "$DEST/current"
echo "prepare-slurm-source.sh: configured $TREE"
