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
# The tree is named by the upstream version but holds the source of one
# Debian version (the first line of its debian/changelog): after an update of
# the installed Slurm (22.05.8-4+deb12u2 -> 22.05.8-4+deb12u3) it is removed
# and fetched again, never reconfigured as the new one.
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
# The Debian version of the tree's source (empty: no tree, or not Debian's).
source_version() { sed -n '1s/^slurm-wlm (\([^)]*\)).*/\1/p' "$TREE/debian/changelog" 2>/dev/null || true; }

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$VERSION" ] && [ "$(source_version)" = "$VERSION" ]; then
    ln -sfn "$TREE" "$DEST/current"
    echo "prepare-slurm-source.sh: $TREE already configured for $VERSION"
    exit 0
fi

mkdir -p "$DEST"
cd "$DEST"
have=$(source_version)
if [ ! -f "$TREE/configure" ] || [ "$have" != "$VERSION" ]; then
    if [ -e "$TREE" ]; then
        echo "prepare-slurm-source.sh: $TREE is the source of ${have:-an unknown version}, not $VERSION: fetching it again"
    fi
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
