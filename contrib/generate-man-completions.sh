#!/usr/bin/env bash
# Writes the manual pages and shell completions of the compass CLI, generated
# from its clap definitions, into OUT (what the `compass` package ships:
# [package.metadata.deb] assets of Cargo.toml; checked by tests/packaging.rs).
#
#   contrib/generate-man-completions.sh COMPASS_BINARY OUT
#     OUT/man/compass.1, OUT/man/compass-SUBCOMMAND.1, ...
#     OUT/completions/compass (bash), _compass (zsh), compass.fish (fish)
set -euo pipefail
BIN=${1:?usage: $0 COMPASS_BINARY OUT}
OUT=${2:?usage: $0 COMPASS_BINARY OUT}
rm -rf "$OUT/man" "$OUT/completions"
mkdir -p "$OUT/man" "$OUT/completions"
"$BIN" man --dir "$OUT/man"
"$BIN" completions bash >"$OUT/completions/compass"
"$BIN" completions zsh >"$OUT/completions/_compass"
"$BIN" completions fish >"$OUT/completions/compass.fish"
