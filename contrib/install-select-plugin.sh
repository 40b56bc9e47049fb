#!/usr/bin/env bash
# Builds the private PluginDir of select/cons_tres_compass:
#   install-select-plugin.sh PLUGIN_SO [DEST_DIR] [STOCK_DIR]
# DEST_DIR (default /usr/lib/x86_64-linux-gnu/slurm-wlm-compass) gets a
# symlink to every stock plugin of STOCK_DIR (default
# /usr/lib/x86_64-linux-gnu/slurm-wlm) EXCEPT select_cons_tres.so, and a copy
# of PLUGIN_SO named select_cons_tres_compass.so.
#
# Why: slurmctld loads every select_*.so of its PluginDir and aborts on two
# plugins with one plugin_id; ours must claim cons_tres's id 109 (slurmctld
# checks it in several places), so the stock cons_tres must not be in the
# PluginDir. Ours dlopen()s the stock one by its full path and forwards to it.
# Idempotent; re-run after every rebuild of the plugin or upgrade of Slurm.
set -euo pipefail

SO=${1:?usage: install-select-plugin.sh PLUGIN_SO [DEST_DIR] [STOCK_DIR]}
DEST=${2:-/usr/lib/x86_64-linux-gnu/slurm-wlm-compass}
STOCK=${3:-/usr/lib/x86_64-linux-gnu/slurm-wlm}

if [ ! -f "$SO" ]; then
    echo "install-select-plugin.sh: $SO does not exist (cargo build -p compass-select first)" >&2
    exit 1
fi
if [ ! -f "$STOCK/select_cons_tres.so" ]; then
    echo "install-select-plugin.sh: $STOCK/select_cons_tres.so missing (install slurmctld)" >&2
    exit 1
fi

mkdir -p "$DEST"
# Drop links to plugins that no longer exist (Slurm upgrade).
find "$DEST" -maxdepth 1 -type l ! -exec test -e {} \; -delete
for f in "$STOCK"/*.so "$STOCK"/*.so.*; do
    [ -e "$f" ] || continue
    name=$(basename "$f")
    [ "$name" = select_cons_tres.so ] && continue
    ln -sfn "$f" "$DEST/$name"
done
rm -f "$DEST/select_cons_tres.so"
# Copy then rename: a running slurmctld keeps its mapping of the old file.
# (The Debian package installs the plugin in DEST itself: nothing to copy.)
if [ "$(realpath "$SO")" != "$(realpath -m "$DEST/select_cons_tres_compass.so")" ]; then
    cp "$SO" "$DEST/.select_cons_tres_compass.so.new"
    chmod 0755 "$DEST/.select_cons_tres_compass.so.new"
    mv -f "$DEST/.select_cons_tres_compass.so.new" "$DEST/select_cons_tres_compass.so"
fi
echo "install-select-plugin.sh: $DEST ready"
