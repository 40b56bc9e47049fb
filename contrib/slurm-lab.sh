#!/usr/bin/env bash
# A real Slurm cluster on one host, for tests and experiments (root only):
# munge + slurmctld + NODES slurmd (one per node name n1..nN, distinct ports,
# fake GPU char devices), all state under one scratch directory LAB.
#
#   slurm-lab.sh up LAB      start (idempotent); waits until every node is idle
#   slurm-lab.sh down LAB    stop everything started from LAB: the daemons of
#                            its PID files, then what is left of it (see
#                            lab_pids); never another process. With
#                            LAB_DOWN=kill, every process of LAB is killed at
#                            once (no job cancelled, no state saved): for a
#                            LAB about to be deleted (the tests' labs; about
#                            3.5 s less than slurmctld's and munged's own
#                            shutdown)
#   slurm-lab.sh pids LAB    list the live processes of LAB (see lab_pids)
#   slurm-lab.sh restart-ctld LAB   restart slurmctld only, keeping its state
#   slurm-lab.sh switch LAB  rewrite the configs from the environment below
#                            (e.g. set COMPASS_SELECT_SO to install the plugin
#                            under running jobs) and restart slurmctld
#
# Environment (read by `up`):
#   LAB_PORT_BASE       slurmctld port; slurmd ports are BASE+1..BASE+NODES (default 16817)
#   LAB_NODES           node count (default 8), LAB_GPUS GPUs per node (default 8)
#   LAB_LAYOUT          `homogeneous` (default: LAB_NODES x LAB_GPUS untyped
#                       GPUs, one partition) or `site`: a typical GPU cluster
#                       of 18 nodes n1..n18 (8 x gpu:a100:8, 4 x gpu:l40s:4,
#                       2 x gpu:2, 4 CPU-only; partitions gpu, cpu, debug;
#                       socket-bound GRES; CR_Core_Memory), from
#                       lab/slurm-site-nodes.conf.in and lab/gres-site.conf.in;
#                       LAB_NODES and LAB_GPUS are then ignored
#   COMPASS_SELECT_SO   if set: run select/cons_tres_compass from this .so in a
#                       private PluginDir (contrib/install-select-plugin.sh)
#   LAB_DEBUG_FLAGS     if set: slurm.conf DebugFlags (e.g. SelectType; the
#                       select plugin's detailed lines need it, or
#                       select.log_decisions in compass.conf)
#   COMPASS_SPANK_SO    if set: plugstack.conf loads this SPANK plugin
#   COMPASS_CONF        compass.conf for both plugins (copied to LAB/etc)
#   COMPASS_JOB_SUBMIT_LUA  if set: job_submit/lua with this script
#   LAB_SLURM           Slurm release: 22.05 (default, Debian 12's packages)
#                       or 24.11 (/opt/slurm-24.11 from contrib/build-slurm.sh;
#                       another prefix with LAB_SLURM_PREFIX)
#   LAB_EXTRA_CONF      if set: a file of slurm.conf lines appended to the
#                       generated slurm.conf (later lines win), e.g.
#                       etc/slurm-budget.conf for priority/multifactor
#
# The daemons run through symlinks named slurmctld/slurmd/slurmstepd in
# LAB/bin: Slurm keys behaviour on argv[0] (a daemon started as
# slurmctld-wlm silently drops every node's Gres=).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
CMD=${1:?usage: slurm-lab.sh up|down|restart-ctld|switch|pids LAB}
LAB=${2:?usage: slurm-lab.sh up|down|restart-ctld|switch|pids LAB}
if [ "$CMD" = pids ] && [ ! -d "$LAB" ]; then exit 0; fi   # a query creates nothing
mkdir -p "$LAB"
LAB=$(cd "$LAB" && pwd)
export SLURM_CONF=$LAB/etc/slurm.conf
case "${LAB_SLURM:-22.05}" in
22.05)
    SBIN=/usr/sbin SFX=-wlm STOCK_DIR=/usr/lib/x86_64-linux-gnu/slurm-wlm ;;
24.11)
    PFX=${LAB_SLURM_PREFIX:-/opt/slurm-24.11}
    SBIN=$PFX/sbin SFX="" STOCK_DIR=$PFX/lib/slurm
    [ -x "$SBIN/slurmctld" ] || { echo "slurm-lab.sh: $SBIN/slurmctld missing: run contrib/build-slurm.sh 24.11" >&2; exit 1; }
    export PATH=$PFX/bin:$PATH ;;
*) echo "slurm-lab.sh: LAB_SLURM=${LAB_SLURM} is not a supported release (22.05, 24.11)" >&2; exit 2 ;;
esac

pid_alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

stop_pidfiles() { # pidfiles...: TERM all at once, wait up to 10 s, then KILL
    local f pid pids=() i alive
    for f in "$@"; do
        [ -f "$f" ] || continue
        pid=$(cat "$f")
        if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid" 2>/dev/null || true
            pids+=("$pid")
        fi
    done
    for i in $(seq 100); do
        alive=0
        for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
        [ "$alive" = 0 ] && break
        sleep 0.1
    done
    for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
    rm -f "$@"
}

# The executables of this LAB's daemons (/proc/PID/exe names the file, not
# the LAB/bin link): those `up` linked, this release's, and munged.
lab_exes() {
    local b
    for b in "$LAB/bin/slurmctld" "$LAB/bin/slurmd" "$LAB/bin/slurmstepd" \
        "$SBIN/slurmctld$SFX" "$SBIN/slurmd$SFX" "$SBIN/slurmstepd$SFX" \
        /usr/sbin/munged "$(command -v munged || true)"; do
        if [ -e "$b" ]; then readlink -f "$b"; fi
    done
}

# Whether the process /proc/PID $1 has a file under LAB/ open.
lab_file_open() {
    local f
    for f in "$1"/fd/*; do
        case "$(readlink "$f" 2>/dev/null || true)" in "$LAB/"*) return 0 ;; esac
    done
    return 1
}

# Every live process this LAB started, one PID a line:
# - a daemon: its executable is slurmctld, slurmd, slurmstepd or munged, and
#   its command line names LAB/ (argv[0] LAB/bin/..., munged's --key-file=
#   LAB/munge/...), or, for a slurmstepd renamed "slurmstepd: [job]" (the
#   title overwrites its command line and environment), it has a file of
#   LAB open (the slurmd log it writes to) or SLURM_CONF=LAB/etc/slurm.conf
#   in its environment;
# - a batch script of its jobs: the interpreter running
#   LAB/spool/NODE/jobN/slurm_script (its argv[1] or argv[2]), inside a job
#   (SLURM_JOB_ID in its environment);
# - every descendant of those: the jobs' own processes (sleep, srun tasks),
#   which name no LAB, and slurmctld's slurmscriptd.
# Nothing else: not a `tail -f LAB/log/...` or an editor on LAB/etc/....
lab_pids() {
    local exes p pid stat exe cmd changed
    local -a argv
    local -A parent=() ours=()
    exes=" $(lab_exes | sort -u | tr '\n' ' ') "
    for p in /proc/[0-9]*; do
        pid=${p#/proc/}
        if [ "$pid" = "$$" ] || [ "$pid" = "$BASHPID" ]; then continue; fi
        { read -r stat <"$p/stat"; } 2>/dev/null || continue
        stat=${stat##*) }              # "S PPID ...", after "(comm)"
        stat=${stat#* }
        parent[$pid]=${stat%% *}
        { mapfile -d '' -t argv <"$p/cmdline"; } 2>/dev/null || continue
        [ "${#argv[@]}" -gt 0 ] || continue   # kernel thread, or gone
        case "${argv[1]:-}|${argv[2]:-}" in
        "$LAB/spool/"*/slurm_script\|* | *\|"$LAB/spool/"*/slurm_script)
            if grep -qsz '^SLURM_JOB_ID=' "$p/environ"; then ours[$pid]=1; fi
            continue ;;
        esac
        printf -v cmd '%s ' "${argv[@]}"
        case "$cmd" in
        *"$LAB/"*) ;;
        "slurmstepd: ["*) grep -qs "SLURM_CONF=$LAB/etc/slurm.conf" "$p/environ" || lab_file_open "$p" || continue ;;
        *) continue ;;
        esac
        exe=$(readlink "$p/exe" 2>/dev/null) || continue
        exe=${exe% (deleted)}            # a binary replaced by an upgrade
        if [[ $exes == *" $exe "* ]]; then ours[$pid]=1; fi
    done
    changed=1
    while [ "$changed" = 1 ]; do
        changed=0
        for pid in "${!parent[@]}"; do
            if [ -z "${ours[$pid]:-}" ] && [ -n "${ours[${parent[$pid]}]:-}" ]; then
                ours[$pid]=1 changed=1
            fi
        done
    done
    if [ "${#ours[@]}" -gt 0 ]; then printf '%s\n' "${!ours[@]}"; fi
}

# Whatever is left of this LAB once the PID-file daemons are gone (jobs'
# slurmstepd, scripts and processes; daemons whose PID file was lost).
stop_leftovers() {
    local pids
    pids=$(lab_pids | tr '\n' ' ')
    # shellcheck disable=SC2086 # a list of PIDs
    if [ -n "$pids" ]; then kill -KILL $pids 2>/dev/null || true; fi
    return 0
}

layout() {
    case "${LAB_LAYOUT:-homogeneous}" in
    homogeneous | site) echo "${LAB_LAYOUT:-homogeneous}" ;;
    *) echo "slurm-lab.sh: unknown LAB_LAYOUT=$LAB_LAYOUT (homogeneous|site)" >&2; exit 2 ;;
    esac
}

node_count() { # slurmd to start: n1..n<node_count>
    if [ "$(layout)" = site ]; then echo 18; else echo "${LAB_NODES:-8}"; fi
}

write_conf() {
    local nodes gpus=${LAB_GPUS:-8} base=${LAB_PORT_BASE:-16817} lay
    lay=$(layout)
    nodes=$(node_count)
    [ "$lay" = site ] && gpus=8
    local plugin_dir=$STOCK_DIR select_type=select/cons_tres job_submit="" debug_flags=""
    if [ -n "${COMPASS_SELECT_SO:-}" ]; then
        "$HERE/install-select-plugin.sh" "$COMPASS_SELECT_SO" "$LAB/plugins" "$STOCK_DIR" >/dev/null
        plugin_dir=$LAB/plugins
        select_type=select/cons_tres_compass
    fi
    [ -n "${LAB_DEBUG_FLAGS:-}" ] && debug_flags="DebugFlags=$LAB_DEBUG_FLAGS"
    if [ -n "${COMPASS_CONF:-}" ]; then
        sed "s#@LAB@#$LAB#g" "$COMPASS_CONF" >"$LAB/etc/compass.conf"
    else
        : >"$LAB/etc/compass.conf"
    fi
    if [ "$STOCK_DIR" != /usr/lib/x86_64-linux-gnu/slurm-wlm ] && ! grep -q '^stock_plugin' "$LAB/etc/compass.conf"; then
        # The stock cons_tres of this release (compass.conf's default is Debian's).
        if grep -q '^\[select\]' "$LAB/etc/compass.conf"; then
            sed -i "/^\[select\]/a stock_plugin = \"$STOCK_DIR/select_cons_tres.so\"" "$LAB/etc/compass.conf"
        else
            printf '[select]\nstock_plugin = "%s"\n' "$STOCK_DIR/select_cons_tres.so" >>"$LAB/etc/compass.conf"
        fi
    fi
    if [ -n "${COMPASS_JOB_SUBMIT_LUA:-}" ]; then
        cp "$COMPASS_JOB_SUBMIT_LUA" "$LAB/etc/job_submit.lua"
        job_submit="JobSubmitPlugins=lua"
    fi
    if [ -n "${COMPASS_SPANK_SO:-}" ]; then
        echo "required $COMPASS_SPANK_SO conf=$LAB/etc/compass.conf" >"$LAB/etc/plugstack.conf"
    else
        : >"$LAB/etc/plugstack.conf"
    fi
    sed -e "s#@LAB@#$LAB#g" -e "s#@NODES@#$nodes#g" -e "s#@GPUS@#$gpus#g" \
        -e "s#@CTLD_PORT@#$base#g" -e "s#@SLURMD_PORTS@#$((base + 1))-$((base + nodes))#g" \
        -e "s#@PLUGIN_DIR@#$plugin_dir#g" -e "s#@SELECT_TYPE@#$select_type#g" \
        -e "s#@JOB_SUBMIT@#$job_submit#g" -e "s#@DEBUG_FLAGS@#$debug_flags#g" \
        "$HERE/lab/slurm.conf.in" >"$LAB/etc/slurm.conf"
    if [ "$lay" = site ]; then
        # The site's nodes, partitions and memory accounting replace the
        # homogeneous ones (and the header line that counts them).
        sed -i -e '/^NodeName=/d' -e '/^PartitionName=/d' -e '/^SelectTypeParameters=/d' \
            -e "1s#.*#\# Lab cluster of contrib/slurm-lab.sh, LAB_LAYOUT=site: 18 nodes on ONE host#" \
            "$LAB/etc/slurm.conf"
        sed -e "s#@PORTS_A100_LO@#$((base + 1))-$((base + 4))#g" \
            -e "s#@PORTS_A100_HI@#$((base + 5))-$((base + 8))#g" \
            -e "s#@PORTS_L40S@#$((base + 9))-$((base + 12))#g" \
            -e "s#@PORTS_SMALL@#$((base + 13))-$((base + 14))#g" \
            -e "s#@PORTS_CPU@#$((base + 15))-$((base + 18))#g" \
            "$HERE/lab/slurm-site-nodes.conf.in" >>"$LAB/etc/slurm.conf"
    fi
    if [ -n "${LAB_EXTRA_CONF:-}" ]; then
        { echo "# appended from $LAB_EXTRA_CONF"; cat "$LAB_EXTRA_CONF"; } >>"$LAB/etc/slurm.conf"
    fi
    if [ "$lay" = site ]; then
        sed -e "s#@LAB@#$LAB#g" "$HERE/lab/gres-site.conf.in" >"$LAB/etc/gres.conf"
    else
        sed -e "s#@LAB@#$LAB#g" -e "s#@NODES@#$nodes#g" -e "s#@GPU_MAX@#$((gpus - 1))#g" \
            "$HERE/lab/gres.conf.in" >"$LAB/etc/gres.conf"
    fi
    if [ "${LAB_SLURM:-22.05}" != 22.05 ]; then
        # Nothing in the lab uses cgroups (proctrack/linuxproc, task/none),
        # and 24.11 can say so: the lab then runs on cgroup v1 and v2 hosts
        # alike, and build-slurm.sh need not build cgroup/v2 (dbus, bpf).
        echo "CgroupPlugin=disabled" >"$LAB/etc/cgroup.conf"
    fi
    for i in $(seq 0 $((gpus - 1))); do
        [ -e "$LAB/fakedev/nvidia$i" ] || mknod "$LAB/fakedev/nvidia$i" c 195 "$i" 2>/dev/null \
            || touch "$LAB/fakedev/nvidia$i"
    done
}

start_ctld() {
    pid_alive "$LAB/run/slurmctld.pid" && return 0
    COMPASS_CONF=$LAB/etc/compass.conf "$LAB/bin/slurmctld" -f "$SLURM_CONF"
}

ctld_running() { # this LAB's slurmctld is alive (PID file, or its command line before that exists)
    local p
    pid_alive "$LAB/run/slurmctld.pid" && return 0
    for p in /proc/[0-9]*; do
        case "$( { tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null || true)" in
        "$LAB/bin/slurmctld "*) return 0 ;;
        esac
    done
    return 1
}

wait_nodes_idle() {
    local nodes i idle
    nodes=$(node_count)
    for i in $(seq 300); do
        if ! ctld_running; then
            # It refused to run (e.g. a plugin of another release: 24.11
            # loads plugins after it daemonized); sinfo would only time out
            # (8 s per call).
            echo "slurm-lab.sh: slurmctld is not running:" >&2
            tail -5 "$LAB/log/slurmctld.log" >&2 || true
            return 1
        fi
        idle=$(sinfo -h -N -o '%N %T' 2>/dev/null | grep -c ' idle$' || true)
        [ "$idle" -ge "$nodes" ] && return 0
        sleep 0.1
    done
    echo "slurm-lab.sh: nodes not idle after 30 s:" >&2
    sinfo -N 2>&1 >&2 || true
    tail -20 "$LAB/log/slurmctld.log" >&2 || true
    return 1
}

up() {
    if [ "$(id -u)" -ne 0 ]; then echo "slurm-lab.sh: must run as root" >&2; exit 1; fi
    mkdir -p "$LAB"/{bin,etc,munge,state,spool,run,log,fakedev}
    chmod 700 "$LAB/munge"
    ln -sfn "$SBIN/slurmctld$SFX" "$LAB/bin/slurmctld"
    ln -sfn "$SBIN/slurmd$SFX" "$LAB/bin/slurmd"
    ln -sfn "$SBIN/slurmstepd$SFX" "$LAB/bin/slurmstepd"
    write_conf
    if ! pid_alive "$LAB/munge/munged.pid"; then
        [ -f "$LAB/munge/munge.key" ] || {
            dd if=/dev/urandom of="$LAB/munge/munge.key" bs=1k count=1 status=none
            chmod 400 "$LAB/munge/munge.key"
        }
        munged --force --key-file="$LAB/munge/munge.key" --socket="$LAB/munge/munge.socket.2" \
            --pid-file="$LAB/munge/munged.pid" --log-file="$LAB/munge/munged.log" \
            --seed-file="$LAB/munge/munged.seed"
    fi
    start_ctld
    local nodes n
    nodes=$(node_count)
    for n in $(seq 1 "$nodes"); do
        mkdir -p "$LAB/spool/n$n"
        pid_alive "$LAB/run/slurmd.n$n.pid" && continue
        "$LAB/bin/slurmd" -f "$SLURM_CONF" -N "n$n" -d "$LAB/bin/slurmstepd"
    done
    wait_nodes_idle
    echo "slurm-lab.sh: up ($LAB, SLURM_CONF=$SLURM_CONF)"
}

down() {
    if [ "${LAB_DOWN:-}" = kill ]; then
        stop_leftovers
        rm -f "$LAB"/run/slurmd.*.pid "$LAB/run/slurmctld.pid" "$LAB/munge/munged.pid"
        echo "slurm-lab.sh: down, killed ($LAB)"
        return 0
    fi
    # Cancel jobs first so the stepds end cleanly; never fails.
    if pid_alive "$LAB/run/slurmctld.pid"; then
        timeout 5 scancel --quiet --full -u root 2>/dev/null || true
    fi
    stop_pidfiles "$LAB"/run/slurmd.*.pid "$LAB/run/slurmctld.pid"
    stop_pidfiles "$LAB/munge/munged.pid"
    stop_leftovers
    echo "slurm-lab.sh: down ($LAB)"
}

case "$CMD" in
up) up ;;
down) down ;;
pids) lab_pids ;;
restart-ctld|switch)
    [ "$CMD" = switch ] && write_conf
    stop_pidfiles "$LAB/run/slurmctld.pid"
    start_ctld
    for i in $(seq 300); do scontrol ping >/dev/null 2>&1 && break; sleep 0.1; done
    ;;
*) echo "slurm-lab.sh: unknown command $CMD (up|down|restart-ctld|switch|pids)" >&2; exit 2 ;;
esac
