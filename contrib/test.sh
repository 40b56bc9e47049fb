#!/usr/bin/env bash
# The README's test command: installs what the tests need, then runs every
# check and test of the workspace (format, lints, unit, property and
# integration tests) against Debian 12's Slurm 22.05, and the Slurm-facing
# tests again against Slurm 24.11 (built from Debian 13's source by
# contrib/build-slurm.sh, cached under /var/cache/compass): the select
# plugin's lab tests (SPANK options included), the budget service's
# enforcement lab test, the replay lab test, and each release's plugins
# refused by the other release. Prints each step's duration.
#
#   COMPASS_TEST_RELEASES="22.05 24.11"   the releases to test (default both)
#   COMPASS_LAB_PORT_BASE                 moves the lab tests' ports
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
# A clean clone gains nothing from incremental builds, and they double the
# space the target directory takes.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
RELEASES=${COMPASS_TEST_RELEASES:-22.05 24.11}
TARGET=${CARGO_TARGET_DIR:-$PWD/target}
T_ALL=$(date +%s)

step() { # step NAME CMD...: runs CMD, then prints "== NAME (N s)"
    local name=$1 t0
    shift
    t0=$(date +%s)
    echo "== $name"
    "$@"
    echo "== $name ($(( $(date +%s) - t0 )) s)"
}

has() { case " $RELEASES " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

# The shellcheck package: tests/packaging.rs lints contrib/*.sh with it;
# liblua5.1-0-dev: it runs etc/job_submit.lua with the Lua slurmctld's
# job_submit/lua links (required here, never skipped).
step "install test dependencies" ./contrib/install-deps.sh shellcheck liblua5.1-0-dev
export COMPASS_TEST_REQUIRE_LUA=1
step "install budget service dependencies" ./contrib/install-budget-deps.sh
step "install Slurm 22.05" ./contrib/install-slurm-deps.sh
step "prepare the Slurm 22.05 source tree" ./contrib/prepare-slurm-source.sh
if has 24.11; then
    # Built once, then restored from /var/cache/compass in seconds.
    step "build Slurm 24.11" ./contrib/build-slurm.sh 24.11
fi

step "cargo fmt --check" cargo fmt --all -- --check
if has 22.05; then
    step "cargo clippy (Slurm 22.05)" cargo clippy --workspace --all-targets --locked -- -D warnings
    step "cargo doc (Slurm 22.05)" env RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked
    step "cargo test (Slurm 22.05)" cargo test --workspace --locked
fi

if has 24.11; then
    # The same sources built against 24.11's headers: bindgen's output
    # differs, so a target directory of its own (else every switch of
    # release rebuilds everything that depends on slurm-sys).
    T24=$TARGET/slurm-24.11
    # The packages of every 24.11 build and test step but clippy's: cargo
    # unifies the features of the packages it builds together, so another
    # set would build the shared dependencies again.
    P24=(-p compass-select -p compass-budget -p compass)
    run24() { COMPASS_SLURM_PREFIX=/opt/slurm-24.11 CARGO_TARGET_DIR=$T24 "$@"; }
    # Only the crates whose code differs by release (their lints too: a
    # field's type can differ, e.g. state_reason).
    step "cargo clippy (Slurm 24.11)" run24 cargo clippy --locked --all-targets \
        -p slurm-sys -p compass-select -p compass-spank -p compass-budget -- -D warnings
    # The select plugin's lab tests (SPANK options included), the budget
    # service's enforcement on a live cluster, and the replay of a window
    # on a compass and a stock cluster (tests/replay_lab.rs, with its AFRs
    # in the log).
    step "build the lab tests (Slurm 24.11)" run24 cargo test --locked --no-run "${P24[@]}" \
        --test lab --test lab_enforce --test replay_lab
    step "lab tests (Slurm 24.11)" run24 cargo test --locked "${P24[@]}" --test lab
    step "budget enforcement lab test (Slurm 24.11)" run24 cargo test --locked "${P24[@]}" --test lab_enforce
    step "replay lab test (Slurm 24.11)" run24 cargo test --locked "${P24[@]}" --test replay_lab -- --nocapture
fi

if has 22.05 && has 24.11; then
    # Each release's plugins in the other release's lab: refused with one
    # line, slurmctld never crashes (both builds exist by now).
    step "plugins of 24.11 in a 22.05 lab" env COMPASS_OTHER_RELEASE_PLUGINS="$TARGET/slurm-24.11/debug/deps" \
        cargo test --locked -p compass-select --test release_mismatch -- --ignored
    step "plugins of 22.05 in a 24.11 lab" env COMPASS_OTHER_RELEASE_PLUGINS="$TARGET/debug/deps" \
        COMPASS_SLURM_PREFIX=/opt/slurm-24.11 CARGO_TARGET_DIR="$TARGET/slurm-24.11" \
        cargo test --locked "${P24[@]}" --test release_mismatch -- --ignored
fi
echo "== all tests passed ($(( $(date +%s) - T_ALL )) s)"
