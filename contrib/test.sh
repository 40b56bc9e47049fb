#!/usr/bin/env bash
# The README's test command: installs what the tests need, then runs every
# check and test of the workspace (format, lints, unit, property and
# integration tests).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
# A clean clone gains nothing from incremental builds, and they double the
# space the target directory takes.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

# The shellcheck package: tests/packaging.rs lints contrib/*.sh with it.
./contrib/install-deps.sh shellcheck
./contrib/install-budget-deps.sh
./contrib/install-slurm-deps.sh
./contrib/prepare-slurm-source.sh

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test"
cargo test --workspace --locked
