#!/usr/bin/env bash
# The README's main command. On a fresh Debian 12 machine (root, Rust >= 1.88
# on PATH): installs what is missing, builds compass in release mode, and
# replays the Venus trace sample under COMPASS and every baseline, with both
# queue policies, side by side. Results land in out/quickstart/.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

TRACE=${TRACE:-../shared/traces/venus/venus_sample.csv}
OUT=${OUT:-out/quickstart}

if [[ ! -r $TRACE ]]; then
    echo "quickstart: trace $TRACE not found; set TRACE=/path/to/venus_sample.csv" >&2
    exit 1
fi

echo "== installing build dependencies"
# libslurm-dev and libclang: the CLI includes the budget tools, which read
# Slurm through libslurm (bindings generated at build time).
./contrib/install-deps.sh libslurm-dev libclang-dev clang
echo "== building compass (release)"
cargo build --release --locked -p compass
echo "== replaying $TRACE under every policy (fifo and backfill queues)"
./target/release/compass compare --trace "$TRACE" --eta 0.9 --queue fifo,backfill --out "$OUT"
echo
echo "quickstart: table in $OUT/compare.md, charts in $OUT/timeseries-*.png"
