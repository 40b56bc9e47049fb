#!/usr/bin/env bash
# Builds the compass Slurm plugins against THIS machine's Slurm and installs
# them (root). Run after contrib/install-slurm-deps.sh. Idempotent.
#
#   contrib/install-compass-slurm.sh [PLUGIN_DIR]
#   contrib/install-compass-slurm.sh --etc-only    # only the files and the state directory below, no build
#
# PLUGIN_DIR (default /usr/lib/x86_64-linux-gnu/slurm-wlm-compass) becomes the
# PluginDir of slurm.conf: every stock plugin except select_cons_tres.so, plus
# select_cons_tres_compass.so and compass_spank.so. /etc/slurm/compass.conf
# and /etc/slurm/job_submit.lua are installed only when absent (SLURM_ETC
# overrides /etc/slurm). The state directory /run/compass (COMPASS_STATE_DIR),
# where the select plugin inside slurmctld writes as SlurmUser, is declared in
# /etc/tmpfiles.d/compass.conf (COMPASS_TMPFILES_DIR overrides the
# directory; contrib/tmpfiles/compass.conf with slurm.conf's SlurmUser), so
# it is made again at every boot, and created now.
# See docs/admin-guide.md. Re-run after every Slurm upgrade.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
ETC=${SLURM_ETC:-/etc/slurm}     # where slurm.conf lives
STATE_DIR=${COMPASS_STATE_DIR:-/run/compass}
TMPFILES_DIR=${COMPASS_TMPFILES_DIR:-/etc/tmpfiles.d}

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

# SlurmUser of $ETC/slurm.conf (keys are case-insensitive; the last one
# wins), else slurm when that user exists (Debian's), else root (Slurm's
# default).
slurm_user() {
    local u=""
    if [ -f "$ETC/slurm.conf" ]; then
        u=$(awk -F= '{ sub(/#.*/, "") } tolower($1) ~ /^[ \t]*slurmuser[ \t]*$/ { v = $2; gsub(/[ \t]/, "", v) } END { print v }' "$ETC/slurm.conf")
    fi
    if [ -z "$u" ]; then
        if id slurm >/dev/null 2>&1; then u=slurm; else u=root; fi
    fi
    echo "$u"
}

# The state directory, owned by SlurmUser: contrib/tmpfiles/compass.conf
# (its `d` line made for this directory and user) in $TMPFILES_DIR, applied
# with systemd-tmpfiles (or, without it, the directory made by hand: it is
# then gone after a reboot). Idempotent.
install_state_dir() {
    local user group
    user=$(slurm_user)
    group=$(id -gn "$user" 2>/dev/null) || {
        echo "install-compass-slurm.sh: SlurmUser $user (from $ETC/slurm.conf) does not exist; create it, then re-run" >&2
        exit 1
    }
    mkdir -p "$TMPFILES_DIR"
    awk -v d="d $STATE_DIR 0755 $user $group -" '/^d / { print d; next } { print }' \
        contrib/tmpfiles/compass.conf >"$TMPFILES_DIR/.compass.conf.new"
    mv -f "$TMPFILES_DIR/.compass.conf.new" "$TMPFILES_DIR/compass.conf"
    chmod 0644 "$TMPFILES_DIR/compass.conf"
    if command -v systemd-tmpfiles >/dev/null 2>&1; then
        systemd-tmpfiles --create "$TMPFILES_DIR/compass.conf"
    else
        echo "install-compass-slurm.sh: no systemd-tmpfiles: $STATE_DIR made by hand (again after each reboot)"
        install -d -m 0755 -o "$user" -g "$group" "$STATE_DIR"
    fi
}

if [ "${1:-}" = --etc-only ]; then
    install_etc
    install_state_dir
    exit 0
fi

DEST=${1:-/usr/lib/x86_64-linux-gnu/slurm-wlm-compass}
TARGET=${CARGO_TARGET_DIR:-$PWD/target}

./contrib/prepare-slurm-source.sh
cargo build --release --locked -p compass-select -p compass-spank
./contrib/install-select-plugin.sh "$TARGET/release/libselect_cons_tres_compass.so" "$DEST"
cp "$TARGET/release/libcompass_spank.so" "$DEST/.compass_spank.so.new"
mv -f "$DEST/.compass_spank.so.new" "$DEST/compass_spank.so"

install_etc
install_state_dir

cat <<MSG
install-compass-slurm.sh: installed into $DEST. Now set, in slurm.conf:
    PluginDir=$DEST
    SelectType=select/cons_tres_compass
    JobSubmitPlugins=lua
and in plugstack.conf:
    required $DEST/compass_spank.so conf=$ETC/compass.conf
then restart slurmctld (and slurmd, for the PluginDir).
MSG
if [ "$ETC" != /etc/slurm ]; then
    cat <<MSG
slurmctld (the select plugin and job_submit.lua) reads \$COMPASS_CONF, else
/etc/slurm/compass.conf, not $ETC/compass.conf: set
    Environment=COMPASS_CONF=$ETC/compass.conf
in slurmctld's systemd unit (systemctl edit slurmctld), or export it
wherever slurmctld is started.
MSG
fi
