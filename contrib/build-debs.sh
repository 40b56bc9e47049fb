#!/usr/bin/env bash
# Builds the Debian packages of compass into out/debs (root, Debian 12) for
# ONE Slurm release:
#   compass                the CLI (simulators, status, budget manager commands)
#   compass-slurm-plugins  select/cons_tres_compass + the SPANK plugin, in the
#                          private PluginDir /usr/lib/x86_64-linux-gnu/slurm-wlm-compass
#   compass-budget         compass-budgetd, its systemd unit and default config
# The package contents are the [package.metadata.deb] sections of Cargo.toml,
# slurm-plugin/select/Cargo.toml and budget-service/Cargo.toml; cargo-deb
# (installed from crates.io if missing) builds them.
#
# All three are built for one release (the plugins are ABI-bound to it,
# compass-budgetd links its libslurm, the CLI names it in --version), so
# each package's version names it: compass-slurm-plugins_0.1.0+slurm24.11_amd64.deb. The plugin
# package depends on exactly that Slurm (`slurm-wlm-basic-plugins (>= V),
# (<< V+1)`, V read from the headers). The releases:
#   22.05  Debian 12's packages (/usr), the default
#   24.11  the headers and libslurm of /opt/slurm-24.11 (contrib/build-slurm.sh);
#          the packages are for Debian 13's Slurm 24.11 packages, which
#          install to the same paths (their libslurm is libslurm42t64)
#
#   contrib/build-debs.sh [--slurm 22.05|24.11] [--dry-run] [--no-build]
#     --slurm R    the release (default: the one in COMPASS_SLURM_PREFIX when
#                  set, else 22.05)
#     --dry-run    print the release, the prefix, the target directory and the
#                  packages (file names, the plugins' Depends) and stop: no
#                  root, nothing installed or built
#     --no-build   package the release build already in the target directory
#                  (cargo build --release of compass, compass-budget,
#                  compass-select and compass-spank for this release, with
#                  the same COMPASS_STOCK_PLUGIN_DIR)
#   COMPASS_SLURM_PREFIX   where the release's headers and libslurm are
#                          (default /usr for 22.05, /opt/slurm-R otherwise)
#   COMPASS_STOCK_PLUGIN_DIR  where the Slurm that loads the plugins keeps its
#                          own (the default select.stock_plugin is the
#                          select_cons_tres.so there); default Debian's
#                          /usr/lib/x86_64-linux-gnu/slurm-wlm, also for a
#                          release built against a private prefix
#   OUT=dir                write the packages elsewhere (default out/debs)
#   CARGO_TARGET_DIR       default target (22.05 from /usr), else target/slurm-R
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
OUT=${OUT:-out/debs}
CARGO_DEB_VERSION=3.8.0

usage() { sed -n '/^#   contrib\/build-debs.sh/,/^#   CARGO_TARGET_DIR/p' "$0" | sed 's/^# \{0,3\}//'; }
die() { echo "build-debs.sh: $*" >&2; exit 2; }

REL="" DRY=0 BUILD=1
while [ $# -gt 0 ]; do
    case $1 in
    --slurm) [ $# -ge 2 ] || die "--slurm needs a release (22.05 or 24.11)"; REL=$2; shift 2 ;;
    --slurm=*) REL=${1#*=}; shift ;;
    --dry-run) DRY=1; shift ;;
    --no-build) BUILD=0; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
    esac
done

# X.YY.Z of a prefix's slurm_version.h (SLURM_VERSION_NUMBER 0xXXYYZZ).
slurm_version() {
    local h=$1/include/slurm/slurm_version.h n
    [ -f "$h" ] || return 1
    n=$(awk '$1 == "#define" && $2 == "SLURM_VERSION_NUMBER" { print $3 }' "$h")
    [ -n "$n" ] || return 1
    printf '%d.%02d.%d\n' $(((n >> 16) & 0xff)) $(((n >> 8) & 0xff)) $((n & 0xff))
}

PREFIX=${COMPASS_SLURM_PREFIX:-}
if [ -z "$REL" ]; then
    if [ -n "$PREFIX" ]; then
        V=$(slurm_version "$PREFIX") || die "no Slurm headers in COMPASS_SLURM_PREFIX=$PREFIX ($PREFIX/include/slurm/slurm_version.h)"
        REL=${V%.*}
    else
        REL=22.05
    fi
fi
case $REL in
22.05) PREFIX=${PREFIX:-/usr} LIBSLURM_PKG=libslurm38 ;;
24.11) PREFIX=${PREFIX:-/opt/slurm-24.11} LIBSLURM_PKG=libslurm42t64 ;;
*) die "Slurm $REL is not a supported release (22.05, 24.11); see docs/admin-guide.md, \"Slurm releases\"" ;;
esac
if [ "$PREFIX" = /usr ]; then
    TARGET=${CARGO_TARGET_DIR:-target}
    how="contrib/install-slurm-deps.sh"
else
    TARGET=${CARGO_TARGET_DIR:-target/slurm-$REL}
    how="contrib/build-slurm.sh $REL"
fi
if [ "$DRY" = 0 ] && [ "$BUILD" = 1 ] && [ "$REL" != 22.05 ] && [ "$PREFIX" = "/opt/slurm-$REL" ]; then
    # Builds (or restores from /var/cache/compass) the release and its
    # configured source tree, the internal headers of the select plugin.
    ./contrib/build-slurm.sh "$REL"
fi
V=$(slurm_version "$PREFIX") || die "Slurm $REL: no headers in $PREFIX/include/slurm (run $how)"
[ "${V%.*}" = "$REL" ] || die "--slurm $REL, but $PREFIX has Slurm $V (set COMPASS_SLURM_PREFIX to a $REL install)"

CRATE_VERSION=$(awk -F'"' '/^\[workspace.package\]/ { w = 1 } w && $1 ~ /^version *= */ { print $2; exit }' Cargo.toml)
VERSION=$CRATE_VERSION+slurm$REL
ARCH=amd64
IFS=. read -r VX VY VZ <<<"$V"
PLUGIN_DEPENDS="libc6, slurm-wlm-basic-plugins (>= $V), slurm-wlm-basic-plugins (<< $VX.$VY.$((VZ + 1))), slurmctld | slurmd | slurm-client"
# compass-budgetd links libslurm (the CLI does not): built against Debian's
# own, dpkg-shlibdeps names its package; against a private prefix it
# cannot, so the package is named here.
LIBSLURM_DEPENDS=""
[ "$PREFIX" = /usr ] || LIBSLURM_DEPENDS="$LIBSLURM_PKG (>= $V)"
# The packages are for Debian's Slurm packages, whatever prefix they were
# built against: the plugin's default stock cons_tres is Debian's
# (slurm-plugin/slurm-sys/build.rs would otherwise take PREFIX/lib/slurm).
STOCK_DIR=${COMPASS_STOCK_PLUGIN_DIR:-/usr/lib/x86_64-linux-gnu/slurm-wlm}

deb_name() { echo "${1}_${VERSION}_${ARCH}.deb"; }
echo "release $REL: Slurm $V in $PREFIX, target directory $TARGET, packages in $OUT"
for p in compass-slurm-plugins compass-budget compass; do
    echo "  $(deb_name "$p")"
done
echo "  compass-slurm-plugins Depends: $PLUGIN_DEPENDS"
[ -z "$LIBSLURM_DEPENDS" ] || echo "  compass-budget Depends (libslurm): $LIBSLURM_DEPENDS"
echo "  compass-slurm-plugins stock_plugin default: $STOCK_DIR/select_cons_tres.so"
[ "$DRY" = 1 ] && exit 0

if [ "$BUILD" = 1 ]; then
    ./contrib/install-slurm-deps.sh      # dpkg-dev (dpkg-shlibdeps); Slurm 22.05's headers and libslurm
    ./contrib/install-deps.sh libmunge-dev
    [ "$REL" = 22.05 ] && ./contrib/prepare-slurm-source.sh   # internal headers of the select plugin
fi
if ! cargo deb --version 2>/dev/null | grep -q "$CARGO_DEB_VERSION"; then
    echo "build-debs: installing cargo-deb $CARGO_DEB_VERSION from crates.io"
    cargo install cargo-deb --version "$CARGO_DEB_VERSION" --locked
fi
export CARGO_TARGET_DIR=$TARGET
[ "$PREFIX" = /usr ] || export COMPASS_SLURM_PREFIX=$PREFIX
export COMPASS_STOCK_PLUGIN_DIR=$STOCK_DIR

if [ "$BUILD" = 1 ]; then
    echo "== cargo build --release for Slurm $V (compass, compass-budget, compass-select, compass-spank)"
    cargo build --release --locked -p compass -p compass-budget -p compass-select -p compass-spank
fi
echo "== man pages and shell completions of the compass CLI"
./contrib/generate-man-completions.sh "$TARGET/release/compass" "$TARGET/release/generated"
if [ "$TARGET" != target ]; then
    # The CLI package's assets name target/release/generated literally.
    mkdir -p target/release
    rm -rf target/release/generated
    cp -a "$TARGET/release/generated" target/release/generated
fi
mkdir -p "$OUT"
rm -f "$OUT"/*.deb

# control FIELD VALUE DEB: sets one field of a built package's control file
# (after its Version line).
control() {
    local tmp
    tmp=$(mktemp -d)
    dpkg-deb -R "$3" "$tmp/p"
    awk -v f="$1" -v v="$2" 'index($0, f ":") == 1 { next }
        { print } /^Version:/ { print f ": " v }' "$tmp/p/DEBIAN/control" >"$tmp/control"
    cp "$tmp/control" "$tmp/p/DEBIAN/control"
    dpkg-deb --root-owner-group -Zxz -b "$tmp/p" "$3" >/dev/null
    rm -rf "$tmp"
}

# The shared libraries BIN needs but libslurm, as Debian packages
# (dpkg-shlibdeps fails as a whole on a library no package owns).
shlibdeps_but_slurm() {
    local tmp out
    tmp=$(mktemp -d)
    mkdir "$tmp/debian"
    printf 'Source: compass\n\nPackage: compass-budget\nArchitecture: any\n' >"$tmp/debian/control"
    out=$(cd "$tmp" && dpkg-shlibdeps --ignore-missing-info -xlibgcc -O "$1" 2>/dev/null)
    rm -rf "$tmp"
    echo "$out" | sed -n 's/^shlibs:Depends=//p'
}

for crate in compass compass-select compass-budget; do
    echo "== cargo deb -p $crate"
    cargo deb --no-build --locked -p "$crate" --deb-version "$VERSION" -o "$OUT/"
done
for p in compass-slurm-plugins compass-budget compass; do
    deb=$OUT/$(deb_name "$p")
    [ -f "$deb" ] || { ls -l "$OUT" >&2; die "cargo deb did not write $deb"; }
    if [ "$p" = compass-slurm-plugins ]; then
        control Depends "$PLUGIN_DEPENDS" "$deb"
    elif [ "$p" = compass-budget ] && [ -n "$LIBSLURM_DEPENDS" ]; then
        # cargo-deb's $auto came out empty (dpkg-shlibdeps refused the
        # private libslurm): the other libraries, the declared packages
        # (munge), and libslurm by name.
        auto=$(shlibdeps_but_slurm "$TARGET/release/compass-budgetd")
        [ -n "$auto" ] || die "dpkg-shlibdeps found no libraries for $TARGET/release/compass-budgetd"
        declared=$(dpkg-deb -f "$deb" Depends | tr ',' '\n' | sed 's/^ *//' | grep -v -e '^libslurm' -e '^libc6' -e '^$' | paste -sd, - | sed 's/,/, /g')
        control Depends "$auto${declared:+, $declared}, $LIBSLURM_DEPENDS" "$deb"
    fi
done
echo
for deb in "$OUT"/*.deb; do
    dpkg-deb -f "$deb" Package Version Depends | sed 's/^/  /'
    echo "  -> $deb"
done
