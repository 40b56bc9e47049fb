#!/usr/bin/env bash
# Builds the compass Slurm plugins against THIS machine's Slurm and installs
# them (root). Run after contrib/install-slurm-deps.sh. Idempotent.
#
#   contrib/install-compass-slurm.sh [PLUGIN_DIR]
#   contrib/install-compass-slurm.sh --etc-only    # only the two files below
#
# PLUGIN_DIR (default /usr/lib/x86_64-linux-gnu/slurm-wlm-compass) becomes the
# PluginDir of slurm.conf: every stock plugin except select_cons_tres.so, plus
# select_cons_tres_compass.so and compass_spank.so. /etc/slurm/compass.conf
# and /etc/slurm/job_submit.lua are installed only when absent (SLURM_ETC
# overrides /etc/slurm).
# See docs/admin-guide.md. Re-run after every Slurm upgrade.
set -euo pipefail
cd "$(dirname "$0")/.."
ETC=${SLURM_ETC:-/etc/slurm}     # where slurm.conf lives

# compass.conf and job_submit.lua, each only when absent: a site's own
# file is never overwritten, not even a job_submit.lua with our part merged
# in (it may hold the site's own logic beside it).
install_etc() {
    mkdir -p "$ETC"
    [ -e "$ETC/compass.conf" ] || install -m 0644 etc/compass.conf "$ETC/compass.conf"
    if [ ! -e "$ETC/job_submit.lua" ]; then
        install -m 0644 etc/job_submit.lua "$ETC/job_submit.lua"
    elif ! cmp -s etc/job_submit.lua "$ETC/job_submit.lua"; then
        if grep -q COMPASS_MIN_RUNTIME "$ETC/job_submit.lua"; then
            echo "install-compass-slurm.sh: $ETC/job_submit.lua kept; it differs from etc/job_submit.lua" \
                "(compare: diff -u $ETC/job_submit.lua $PWD/etc/job_submit.lua)" >&2
        else
            echo "install-compass-slurm.sh: $ETC/job_submit.lua exists: merge etc/job_submit.lua into it by hand" >&2
        fi
    fi
}

if [ "${1:-}" = --etc-only ]; then
    install_etc
    exit 0
fi

DEST=${1:-/usr/lib/x86_64-linux-gnu/slurm-wlm-compass}
TARGET=${CARGO_TARGET_DIR:-$PWD/target}
STATE_DIR=${COMPASS_STATE_DIR:-/run/compass}

./contrib/prepare-slurm-source.sh
cargo build --release --locked -p compass-select -p compass-spank
./contrib/install-select-plugin.sh "$TARGET/release/libselect_cons_tres_compass.so" "$DEST"
cp "$TARGET/release/libcompass_spank.so" "$DEST/.compass_spank.so.new"
mv -f "$DEST/.compass_spank.so.new" "$DEST/compass_spank.so"

mkdir -p "$STATE_DIR"
install_etc

cat <<MSG
install-compass-slurm.sh: installed into $DEST. Now set, in slurm.conf:
    PluginDir=$DEST
    SelectType=select/cons_tres_compass
    JobSubmitPlugins=lua
and in plugstack.conf:
    required $DEST/compass_spank.so conf=$ETC/compass.conf
then restart slurmctld (and slurmd, for the PluginDir).
MSG
