#!/usr/bin/env bash
# Builds the Debian packages of compass into out/debs (root, Debian 12):
#   compass                the CLI (simulators, status, budget manager commands)
#   compass-slurm-plugins  select/cons_tres_compass + the SPANK plugin, in the
#                          private PluginDir /usr/lib/x86_64-linux-gnu/slurm-wlm-compass
#   compass-budget         compass-budgetd, its systemd unit and default config
# The package contents are the [package.metadata.deb] sections of Cargo.toml,
# slurm-plugin/select/Cargo.toml and budget-service/Cargo.toml; cargo-deb
# (installed from crates.io if missing) builds them. The plugins are built
# against THIS machine's Slurm: build on the Slurm release you deploy.
#
#   contrib/build-debs.sh            (OUT=dir to write elsewhere)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
OUT=${OUT:-out/debs}
CARGO_DEB_VERSION=3.8.0

./contrib/install-slurm-deps.sh          # Slurm headers, libslurm, dpkg-dev (dpkg-shlibdeps)
./contrib/install-deps.sh libmunge-dev
./contrib/prepare-slurm-source.sh        # internal headers of the select plugin
if ! cargo deb --version 2>/dev/null | grep -q "$CARGO_DEB_VERSION"; then
    echo "build-debs: installing cargo-deb $CARGO_DEB_VERSION from crates.io"
    cargo install cargo-deb --version "$CARGO_DEB_VERSION" --locked
fi

echo "== cargo build --release (compass, compass-budget, compass-select, compass-spank)"
cargo build --release --locked -p compass -p compass-budget -p compass-select -p compass-spank
echo "== man pages and shell completions of the compass CLI"
./contrib/generate-man-completions.sh target/release/compass target/release/generated
mkdir -p "$OUT"
rm -f "$OUT"/*.deb
for crate in compass compass-select compass-budget; do
    echo "== cargo deb -p $crate"
    cargo deb --no-build --locked -p "$crate" -o "$OUT/"
done
echo
for deb in "$OUT"/*.deb; do
    dpkg-deb -f "$deb" Package Version Depends | sed 's/^/  /'
    echo "  -> $deb"
done
