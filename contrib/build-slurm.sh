#!/usr/bin/env bash
# Builds a Slurm release other than the one Debian 12 ships, from Debian's
# source package, into a private prefix (as root). Only what the labs and the
# plugins need: munge auth, cons_tres, gres/gpu, job_submit/lua, several
# slurmd per host (--enable-multiple-slurmd). Never installs binaries of
# another Debian release: only the *source* comes from it, the build
# dependencies are Debian 12 packages.
#
#   build-slurm.sh 24.11     -> /opt/slurm-24.11 (Debian 13 "trixie" source)
#
# Cached under $COMPASS_SLURM_SRC (default /var/cache/compass/slurm-src),
# keyed by the source package version:
#   slurm-wlm-<upstream>/          the configured and built tree (its internal
#                                  headers are what the select plugin needs)
#   <release> -> slurm-wlm-<upstream>  symlink read by slurm-plugin/slurm-sys
#   slurm-<debian version>-install.tar  the installed prefix
# The tree records the Debian version it was fetched for (.compass-source): a
# new Debian revision of the same upstream release (a +deb13uN security
# update) removes it and fetches the source again.
# A second run with the same source version only restores /opt/slurm-<release>
# from the tarball (seconds). A fresh build of 24.11.5 took 32 min here (2
# cores shared with other builds, make -j2 under nice). The apt state for the other release's deb-src
# line is private ($CACHE/apt-<suite>); the machine's sources are untouched.
#
# COMPASS_SLURM_PREFIX (default /opt/slurm-<release>) is replaced whole by a
# restore or a build, so the script only ever replaces a prefix it made: one
# holding its stamp .compass-slurm-version, or an empty or absent directory.
# Any other (/usr, a site's production Slurm) is refused before anything
# else runs.
set -euo pipefail

REL=${1:?usage: build-slurm.sh 24.11}
case "$REL" in
24.11) SUITE=trixie ;;
*) echo "build-slurm.sh: unknown release $REL (known: 24.11; 22.05 is Debian 12's own package)" >&2; exit 2 ;;
esac
PREFIX=${COMPASS_SLURM_PREFIX:-/opt/slurm-$REL}
STAMP=$PREFIX/.compass-slurm-version
log() { echo "build-slurm.sh: $*" >&2; }

# PREFIX may be removed and rewritten: absent, an empty directory, or one
# this script made (its stamp).
ours_to_replace() {
    [ -e "$PREFIX" ] || [ -L "$PREFIX" ] || return 0
    [ -d "$PREFIX" ] || return 1
    [ -f "$STAMP" ] && return 0
    [ -z "$(ls -A "$PREFIX")" ]
}
if ! ours_to_replace; then
    log "$PREFIX exists and was not made by this script (no $STAMP, not empty): refusing to replace it." \
        "COMPASS_SLURM_PREFIX must name a new or empty directory, or one this script built"
    exit 1
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "build-slurm.sh: must run as root" >&2
    exit 1
fi

CACHE=${COMPASS_CACHE:-/var/cache/compass}
SRCDIR=${COMPASS_SLURM_SRC:-$CACHE/slurm-src}
JOBS=${BUILD_JOBS:-2}
APTDIR=$CACHE/apt-$SUITE

# Build dependencies, all from Debian 12.
PKGS=(build-essential dpkg-dev pkg-config python3 libmunge-dev munge liblua5.1-0-dev ca-certificates)
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# Private apt state with only the deb-src line of the other release.
mkdir -p "$APTDIR/lists/partial" "$APTDIR/cache/archives/partial"
echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $SUITE main" \
    >"$APTDIR/sources.list"
APT_OPTS=(-o "Dir::Etc::sourcelist=$APTDIR/sources.list" -o Dir::Etc::sourceparts=-
          -o "Dir::State::lists=$APTDIR/lists" -o "Dir::Cache=$APTDIR/cache" -o APT::Get::List-Cleanup=0)
version_of_source() { # empty (not a failure) before the first apt-get update
    { apt-cache "${APT_OPTS[@]}" showsrc slurm-wlm 2>/dev/null || true; } | sed -n 's/^Version: //p' | sort -V | tail -1
}
VERSION=$(version_of_source)
if [ -z "$VERSION" ]; then
    apt-get -q "${APT_OPTS[@]}" update >/dev/null
    VERSION=$(version_of_source)
fi
[ -n "$VERSION" ] || { log "no slurm-wlm source in $SUITE"; exit 1; }
case "$VERSION" in "$REL".*) ;; *) log "$SUITE has slurm-wlm $VERSION, not $REL"; exit 1 ;; esac
UPSTREAM=${VERSION%%-*}
TREE=$SRCDIR/slurm-wlm-$UPSTREAM
TARBALL=$SRCDIR/slurm-$VERSION-install.tar
# The Debian version the tree's source is of (.compass-source; trees fetched
# before that stamp existed: the version they were built for).
tree_version() { cat "$TREE/.compass-source" 2>/dev/null || cat "$TREE/.compass-built" 2>/dev/null || true; }
built() { [ "$(cat "$TREE/.compass-built" 2>/dev/null)" = "$VERSION" ]; }

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$VERSION" ] && built; then
    ln -sfn "$TREE" "$SRCDIR/$REL"
    log "$PREFIX already holds $VERSION"
    exit 0
fi
# The tarball holds the prefix the tree was last configured and built for.
if [ -f "$TARBALL" ] && built && [ "$(cat "$TREE/.compass-configured" 2>/dev/null)" = "$PREFIX" ]; then
    rm -rf "$PREFIX"
    # Stamped first: an interrupted restore leaves a prefix a re-run replaces.
    mkdir -p "$PREFIX"
    echo "incomplete $VERSION" >"$STAMP"
    tar -C "$(dirname "$PREFIX")" -xf "$TARBALL"
    ln -sfn "$TREE" "$SRCDIR/$REL"
    log "restored $PREFIX ($VERSION) from $TARBALL"
    exit 0
fi

START=$(date +%s)
mkdir -p "$SRCDIR"
cd "$SRCDIR"
have=$(tree_version)
if [ ! -f "$TREE/configure" ] || [ "$have" != "$VERSION" ]; then
    [ ! -e "$TREE" ] || log "$TREE is the source of ${have:-an unknown version}, not $VERSION: fetching it again"
    rm -rf "$TREE"
    # The upstream tarball is all the build needs (Debian's patches only
    # touch packaging and paths). When the mirror lacks the .dsc or the
    # Debian diff of the newest point release (seen here: 404), apt-get
    # source still fetched the orig tarball: extract that.
    if ! apt-get source -q "${APT_OPTS[@]}" "slurm-wlm=$VERSION" >"$SRCDIR/source-$REL.log" 2>&1; then
        ORIG=$SRCDIR/slurm-wlm_$UPSTREAM.orig.tar.gz
        [ -f "$ORIG" ] || { log "apt-get source failed, see $SRCDIR/source-$REL.log"; exit 1; }
        log "apt-get source: Debian diff unavailable, building the upstream tarball $ORIG"
        rm -rf "$TREE.tmp" && mkdir -p "$TREE.tmp"
        tar -C "$TREE.tmp" --strip-components=1 -xzf "$ORIG"
        mv "$TREE.tmp" "$TREE"
    fi
    echo "$VERSION" >"$TREE/.compass-source"
fi
cd "$TREE"
if [ ! -f config.status ] || [ ! -f .compass-configured ] || [ "$(cat .compass-configured)" != "$PREFIX" ]; then
    # Same spirit as Debian's debian/rules, minus what the labs never use
    # (no accounting database, REST daemon, PMIx, hwloc, NVML, IPMI, HDF5).
    # No -g (the autoconf default is "-g -O2") and no static libraries (libtool
    # would compile every file twice): half the time and disk.
    CFLAGS="-O2" ./configure -q --prefix="$PREFIX" --sysconfdir="$PREFIX/etc" --disable-debug --disable-static \
        --enable-multiple-slurmd --disable-slurmrestd --without-pmix --without-hwloc \
        --without-nvml --without-rsmi --without-freeipmi --without-hdf5 --without-ucx \
        --without-jwt --without-rdkafka --without-lz4 --without-yaml --without-http-parser \
        --without-mysql_config --disable-x11 --disable-pam \
        >"$SRCDIR/configure-$REL.log" 2>&1 || { log "./configure failed, see $SRCDIR/configure-$REL.log"; exit 1; }
    echo "$PREFIX" >.compass-configured
fi
# Only what the labs, the plugins and CI use, not all of Slurm (a full build
# took 32 min here): the libraries, the daemons, the clients the tests and
# scripts run, and the plugins a lab loads (found by reading the daemons'
# and clients' memory maps in a running 24.11 lab). `none` plugins
# (accounting_storage, jobcomp, switch, task, jobacct_gather, ...) are built
# into libslurm since 23.02. Dependencies inside src/ (libcommon,
# interfaces, conmgr, ...) are built by the directories that link them.
DIRS=(src/api src/lua src/stepmgr src/slurmctld src/slurmd
      src/sbatch src/squeue src/scontrol src/sinfo src/scancel src/srun src/salloc src/sdiag src/sprio)
for p in auth/munge cred/common cred/munge cred/none cgroup/common cgroup/v1 gpu/common gpu/generic \
         gres/common gres/gpu hash/common_xkcp hash/k12 job_submit/lua mpi/cray_shasta mpi/pmi2 \
         prep/script priority/basic priority/multifactor proctrack/linuxproc proctrack/pgid \
         sched/backfill sched/builtin select/cons_tres select/linear serializer/url-encoded \
         tls/none topology/common topology/default topology/tree; do
    DIRS+=("src/plugins/$p")
done
log "building $VERSION (the parts the labs need) with make -j$JOBS (log: $SRCDIR/make-$REL.log)"
: >"$SRCDIR/make-$REL.log"
for d in "${DIRS[@]}"; do
    nice -n 10 make -j"$JOBS" -C "$d" >>"$SRCDIR/make-$REL.log" 2>&1 \
        || { log "make in $d failed, see $SRCDIR/make-$REL.log"; exit 1; }
done
rm -rf "$PREFIX"
# Stamped first: an interrupted install leaves a prefix a re-run replaces.
mkdir -p "$PREFIX"
echo "incomplete $VERSION" >"$STAMP"
: >"$SRCDIR/install-$REL.log"
# The public headers (slurm/*.h) are the top Makefile's pkginclude_HEADERS.
for d in . "${DIRS[@]}"; do
    t=install
    [ "$d" = . ] && t=install-pkgincludeHEADERS
    make -C "$d" "$t" >>"$SRCDIR/install-$REL.log" 2>&1 \
        || { log "make $t in $d failed, see $SRCDIR/install-$REL.log"; exit 1; }
done
echo "$VERSION" >"$STAMP"
tar -C "$(dirname "$PREFIX")" -cf "$TARBALL.tmp" "$(basename "$PREFIX")"
mv "$TARBALL.tmp" "$TARBALL"
echo "$VERSION" >"$TREE/.compass-built"
ln -sfn "$TREE" "$SRCDIR/$REL"
log "built and installed $VERSION into $PREFIX in $(( $(date +%s) - START )) s"
