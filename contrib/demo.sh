#!/usr/bin/env bash
# The README's main command: compass running inside real Slurm, side by side
# with stock Slurm, on one Debian 12 machine (root).
#
#   contrib/demo.sh          install what is missing, build (release), start two
#                            identical clusters of 16 nodes x 8 GPUs ("compass":
#                            the compass plugins + compass-budgetd; "stock":
#                            select/cons_tres), replay a window of the Venus
#                            sample through real sbatch on both (~10 min),
#                            print the report and the dashboard URL. The
#                            clusters and the service keep running.
#   contrib/demo.sh check    only the preflight checks (root, Debian 12, Slurm
#                            22.05 or none, trace, ports); changes nothing
#   contrib/demo.sh stop     stop and remove exactly what the demo started: its
#                            two clusters, its budget service and its state dir
#                            (the report in out/demo, the build and the
#                            installed Debian packages stay).
#
# Running it again while a demo is up restarts it from scratch (the previous
# clusters, jobs and budget database are discarded), so both clusters start
# empty and the comparison stays fair. Stale PID files of a crashed run are
# removed first.
#
# Environment (all optional):
#   TRACE            Venus trace (default ../shared/traces/venus/venus_sample.csv)
#   DEMO_HOURS       hours of the trace to replay (default 20)
#   DEMO_SPEEDUP     time compression of the replay (default 240: with the
#                    replay's own defaults, --start 204h --max-run 3m, about
#                    300 jobs in about 10 minutes; see docs/replay.md)
#   DEMO_OUT         report directory (default out/demo)
#   COMPASS_DEMO_DIR state directory (default /var/lib/compass-demo)
#   DEMO_COMPASS_PORT, DEMO_STOCK_PORT  slurmctld ports of the two clusters
#                    (default 18100, 18200; slurmd use the next 16 ports)
#   DEMO_BUDGET_PORT HTTP port of compass-budgetd on 127.0.0.1 (default 18080)
#   DEMO_ALLOW_OS=1  run on something other than Debian 12 (unsupported)
#   DEMO_NODES, DEMO_GPUS  cluster size (default 16 x 8)
#   DEMO_CONFIG      what runs besides the placement plugin, the same on both
#                    clusters so the comparison is fair (issue 10):
#                      placement  no budget service on either cluster
#                      order      compass-budgetd on each cluster with
#                                 [protection] enforce = false: fair-share
#                                 queue order only (it acts through Slurm's
#                                 API, so it orders the stock cluster too)
#                      enforce    compass-budgetd on each cluster, enforcing
#                                 protected and preemptible time (default)
#                    With order or enforce the report's simulated columns
#                    model the service too (compass replay --service-config).
#   DEMO_ENFORCE=false  old spelling of DEMO_CONFIG=order
#   DEMO_REPEATS     replay the window this many times in a row (default 1);
#                    the summary gives mean, sd, min and max of every figure
#   DEMO_NOT_RESUMABLE  share of the jobs made not resumable (0 to 1, e.g.
#                    0.5; default 0: the trace's own rule, 9 in 10 resumable)
#   DEMO_MOVE_WHEN   the select plugin's `move_when` for this demo (always,
#                    waiting, fits, starts, pays; default: etc/compass.conf's)
#   DEMO_STOCK_BUDGET_PORT  HTTP port of the stock cluster's compass-budgetd
#                    (default 18081; DEMO_CONFIG=order or enforce)
#   DEMO_REPLAY_ARGS more `compass replay` flags, e.g. "--check" or "--jobs 40"
set -Eeuo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export PATH="$HOME/.cargo/bin:$PATH"

DEMO=${COMPASS_DEMO_DIR:-/var/lib/compass-demo}
# How to stop this demo, as it must be typed: with its state directory when
# that is not the default (`stop` looks nowhere else).
STOP_CMD="contrib/demo.sh stop"
if [ -n "${COMPASS_DEMO_DIR:-}" ]; then STOP_CMD="COMPASS_DEMO_DIR=$(printf %q "$DEMO") $STOP_CMD"; fi
TRACE=${TRACE:-../shared/traces/venus/venus_sample.csv}
HOURS=${DEMO_HOURS:-20}
SPEEDUP=${DEMO_SPEEDUP:-240}
OUT=${DEMO_OUT:-out/demo}
case "$OUT" in /*) ;; *) OUT=$ROOT/$OUT ;; esac
NODES=${DEMO_NODES:-16}
GPUS=${DEMO_GPUS:-8}
COMPASS_PORT=${DEMO_COMPASS_PORT:-18100}
STOCK_PORT=${DEMO_STOCK_PORT:-18200}
BUDGET_PORT=${DEMO_BUDGET_PORT:-18080}
STOCK_BUDGET_PORT=${DEMO_STOCK_BUDGET_PORT:-18081}
if [ -z "${DEMO_CONFIG:-}" ] && [ "${DEMO_ENFORCE:-}" = false ]; then DEMO_CONFIG=order; fi
CONFIG=${DEMO_CONFIG:-enforce}
REPEATS=${DEMO_REPEATS:-1}
NOT_RESUMABLE=${DEMO_NOT_RESUMABLE:-0}
MOVE_WHEN=${DEMO_MOVE_WHEN:-}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
REL=$TARGET/release
MARKER=.compass-demo   # in $DEMO: proves the directory is the demo's before `stop` removes it
DASHBOARD=http://127.0.0.1:$BUDGET_PORT/

die() { echo "demo: $*" >&2; exit 1; }

STEP_NO=0 STEP_NAME="" STEP_START=0
step_done() {
    [ -n "$STEP_NAME" ] && printf '   done in %ds\n' $((SECONDS - STEP_START))
    STEP_NAME=""
}
step() { # step TITLE: closes the previous step (with its duration), opens the next
    step_done
    STEP_NO=$((STEP_NO + 1)) STEP_NAME=$1 STEP_START=$SECONDS
    echo "== [$STEP_NO] $1"
}
# shellcheck disable=SC2317 # invoked through `trap on_error ERR`
on_error() {
    local rc=$?
    [ -n "$STEP_NAME" ] && echo "demo: step [$STEP_NO] \"$STEP_NAME\" failed (exit $rc) after $((SECONDS - STEP_START))s." >&2
    echo "demo: logs: $DEMO/{compass,stock}/log/, $DEMO/budget/compass-budgetd.log; clean up with: $STOP_CMD" >&2
    exit "$rc"
}

# ---------------------------------------------------------------- processes
# PID of the process in PIDFILE if it is alive AND its command line names
# NEEDLE (a stale file whose PID was reused by another process does not count).
live_pid() {
    local file=$1 needle=$2 pid
    [ -f "$file" ] || return 1
    pid=$(tr -dc '0-9' <"$file")
    [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$needle" || return 1
    echo "$pid"
}

# Removes PID files of a demo cluster that name no live process of that
# cluster (after a crash or reboot), so slurm-lab.sh never signals a reused PID.
clean_stale_pidfiles() {
    local lab=$1 f n=0
    for f in "$lab"/run/*.pid "$lab"/munge/munged.pid; do
        [ -e "$f" ] || continue
        live_pid "$f" "$lab/" >/dev/null || { rm -f "$f"; n=$((n + 1)); }
    done
    if [ "$n" -gt 0 ]; then echo "demo: removed $n stale PID file(s) of $lab (processes gone)"; fi
}

# Every live process the demo started: those of its two clusters
# (`slurm-lab.sh pids`: their daemons, jobs' slurmstepd, scripts and
# processes), its compass-budgetd (the private copy in $DEMO/budget or
# $DEMO/stock-budget, by /proc/PID/exe) and the replay (the compass program
# running `replay` on the demo's clusters). Never another process, not even
# one whose command line names $DEMO/ (a `tail -f` of a log there).
demo_pids() {
    local c p pid cmd exe replay real
    local -a argv
    for c in compass stock; do
        if [ -d "$DEMO/$c" ]; then "$ROOT/contrib/slurm-lab.sh" pids "$DEMO/$c"; fi
    done
    replay=$(readlink -f "${COMPASS_REPLAY:-$REL/compass}" 2>/dev/null || true)
    real=$(readlink -f "$DEMO" 2>/dev/null || echo "$DEMO")   # what /proc/PID/exe shows
    for p in /proc/[0-9]*; do
        pid=${p#/proc/}
        [ "$pid" = "$$" ] && continue
        { mapfile -d '' -t argv <"$p/cmdline"; } 2>/dev/null || continue
        [ "${#argv[@]}" -gt 0 ] || continue
        printf -v cmd '%s ' "${argv[@]}"
        case "$cmd" in *"$DEMO/"*) ;; *) continue ;; esac
        exe=$(readlink "$p/exe" 2>/dev/null) || continue
        exe=${exe% (deleted)}
        case "$exe" in
        "$real/budget/compass-budgetd" | "$real/stock-budget/compass-budgetd") echo "$pid" ;;
        "$replay") if [ "${argv[1]:-}" = replay ]; then echo "$pid"; fi ;;
        esac
    done
    return 0
}

demo_running() { [ -n "$(demo_pids)" ]; }

stop_budgetd() { # stop_budgetd DIR: the service whose state is in DIR
    local b=$1 pid i
    if pid=$(live_pid "$b/compass-budgetd.pid" "$b/"); then
        kill -TERM "$pid" 2>/dev/null || true
        for i in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
        echo "demo: compass-budgetd (pid $pid, $b) stopped"
    fi
    rm -f "$b/compass-budgetd.pid"
}

# Stops everything the demo started; removes $DEMO when KEEP_DIR is empty.
stop_all() {
    [ -d "$DEMO" ] || { echo "demo: nothing to stop ($DEMO does not exist)"; return 0; }
    [ -e "$DEMO/$MARKER" ] || die "$DEMO is not a demo directory (no $MARKER); not touching it"
    stop_budgetd "$DEMO/budget"
    stop_budgetd "$DEMO/stock-budget"
    local c
    for c in compass stock; do
        [ -d "$DEMO/$c" ] || continue
        clean_stale_pidfiles "$DEMO/$c"
        SLURM_CONF=$DEMO/$c/etc/slurm.conf "$ROOT/contrib/slurm-lab.sh" down "$DEMO/$c"
    done
    local left
    left=$(demo_pids | tr '\n' ' ')
    if [ -n "$left" ]; then
        echo "demo: killing leftover demo processes: $left"
        # shellcheck disable=SC2086 # a list of PIDs
        kill -KILL $left 2>/dev/null || true
    fi
    if [ -z "${KEEP_DIR:-}" ]; then
        rm -rf "$DEMO"
        echo "demo: removed $DEMO"
    fi
}

# ---------------------------------------------------------------- preflight
check_root() {
    [ "$(id -u)" -eq 0 ] || die "must run as root (it installs packages and starts Slurm daemons): sudo $0 ${*:-}"
}

check_os() {
    local id="" ver="" pretty=""
    if [ -r /etc/os-release ]; then
        # shellcheck disable=SC1091 # the system's own file
        read -r id ver pretty < <(. /etc/os-release && echo "${ID:-} ${VERSION_ID:-} ${PRETTY_NAME:-}")
    fi
    if [ "$id" != debian ] || [ "$ver" != 12 ]; then
        [ "${DEMO_ALLOW_OS:-}" = 1 ] && { echo "demo: warning: not Debian 12 (${pretty:-unknown}); continuing because DEMO_ALLOW_OS=1"; return 0; }
        die "needs Debian 12 (bookworm; its Slurm is 22.05), found ${pretty:-an unknown system}; set DEMO_ALLOW_OS=1 to try anyway"
    fi
}

# An installed Slurm must be 22.05.x: the select plugin is built against
# slurmctld's internal structs of exactly the installed release.
check_slurm_version() {
    local v
    v=$(dpkg-query -W -f='${Status} ${Version}' slurmctld 2>/dev/null | sed -n 's/^install ok installed //p')
    if [ -n "$v" ]; then
        case "$v" in
        22.05.*) ;;
        *) die "Slurm $v is installed (package slurmctld); compass is built for Slurm 22.05 (Debian 12). Remove it (apt-get remove slurmctld slurmd slurm-client libslurm-dev) or use a clean Debian 12 machine" ;;
        esac
    elif command -v slurmctld >/dev/null 2>&1; then
        v=$(slurmctld -V 2>/dev/null | awk '{print $2}')
        case "$v" in
        22.05.*) ;;
        *) die "a Slurm not installed by Debian is on the PATH ($(command -v slurmctld), version ${v:-unknown}); compass needs Debian's Slurm 22.05: remove it or use a clean Debian 12 machine" ;;
        esac
    fi
}

check_trace() {
    [ -r "$TRACE" ] || die "trace $TRACE not found; set TRACE=/path/to/venus_sample.csv"
}

demo_ports() {
    local i
    echo "$BUDGET_PORT"
    echo "$STOCK_BUDGET_PORT"
    for i in $(seq 0 "$NODES"); do echo $((COMPASS_PORT + i)) $((STOCK_PORT + i)); done | tr ' ' '\n'
}

# Every port the demo needs must be free or held by the demo itself.
check_ports() {
    if ! command -v ss >/dev/null 2>&1; then
        echo "demo: installing iproute2 (for ss, to check the ports)"
        "$ROOT/contrib/install-deps.sh" iproute2
    fi
    local mine p line pid owner
    mine=" $(demo_pids | tr '\n' ' ') "
    local listening
    listening=$(ss -ltnpH 2>/dev/null || true)
    for p in $(demo_ports | sort -un); do
        line=$(awk -v p=":$p" '$4 ~ p"$"' <<<"$listening" | head -1)
        [ -n "$line" ] || continue
        pid=$(grep -o 'pid=[0-9]*' <<<"$line" | head -1 | cut -d= -f2)
        [ -n "$pid" ] && [[ $mine == *" $pid "* ]] && continue
        owner=$(grep -o '(("[^"]*"' <<<"$line" | head -1 | tr -d '("')
        die "port $p is in use by ${owner:-another process}${pid:+ (pid $pid)}; stop it, or move the demo with DEMO_COMPASS_PORT / DEMO_STOCK_PORT / DEMO_BUDGET_PORT / DEMO_STOCK_BUDGET_PORT (it needs $BUDGET_PORT, $STOCK_BUDGET_PORT, $COMPASS_PORT-$((COMPASS_PORT + NODES)), $STOCK_PORT-$((STOCK_PORT + NODES)))"
    done
}

# ---------------------------------------------------------------- phases
install_and_build() {
    step "install missing Debian packages (Slurm 22.05, munge, headers, Slurm source tree)"
    "$ROOT/contrib/install-slurm-deps.sh"
    # libmunge-dev: the budget service links libmunge. (install-budget-deps.sh
    # also installs chromium, which only the dashboard's test needs.)
    "$ROOT/contrib/install-deps.sh" libmunge-dev
    "$ROOT/contrib/prepare-slurm-source.sh"
    check_slurm_version

    step "build in release mode: compass, compass-budgetd, the two Slurm plugins"
    cargo build --release --locked -p compass -p compass-budget -p compass-select -p compass-spank
    local f
    for f in compass compass-budgetd libselect_cons_tres_compass.so libcompass_spank.so; do
        [ -f "$REL/$f" ] || die "build produced no $REL/$f"
    done
    echo "   $("$REL/compass" --version)"
}

# compass.conf of the demo: the example, with the state file inside the
# cluster's directory (slurm-lab.sh replaces @LAB@) and migration timings
# scaled down for a replay compressed in time, as in the replay's CI test
# (tests/replay-compass.conf). At 240x, the example's 5 min before a first
# migration and 10 min cool-down would be 20 h and 40 h of trace time; even
# 30 s / 2 min (2 h / 8 h) kept so many jobs immovable that Compact could not
# hold N*SIF <= 2 (measured: 3 at settled instants). A migration costs a
# replayed job about 3-5 s of wall time, not the example's site-scale 1 min.
write_compass_conf() {
    sed -e 's#^state_file = .*#state_file = "@LAB@/state.json"#' \
        -e 's#^migration_cooldown = .*#migration_cooldown = "20s"#' \
        -e 's#^min_run_before_migration = .*#min_run_before_migration = "0"#' \
        -e 's#^migration_cost = .*#migration_cost = "5s"#' \
        -e 's#^log_decisions = .*#log_decisions = true#' \
        "$ROOT/etc/compass.conf" >"$DEMO/compass.conf.in"
    if [ -n "$MOVE_WHEN" ]; then
        case $MOVE_WHEN in
            always | waiting | fits | starts | pays) ;;
            *) die "DEMO_MOVE_WHEN=$MOVE_WHEN: expected always, waiting, fits, starts or pays" ;;
        esac
        sed -i "s#^move_when = .*#move_when = \"$MOVE_WHEN\"#" "$DEMO/compass.conf.in"
        grep -q "^move_when = \"$MOVE_WHEN\"" "$DEMO/compass.conf.in" \
            || die "etc/compass.conf has no move_when line to adapt"
    fi
    grep -q '^log_decisions = true' "$DEMO/compass.conf.in" \
        || die "etc/compass.conf has no log_decisions line to adapt (the report reads the decisions)"
    grep -q '^state_file = "@LAB@/state.json"' "$DEMO/compass.conf.in" \
        || die "etc/compass.conf has no state_file line to adapt"
}

start_clusters() {
    step "start two clusters of $NODES nodes x $GPUS GPUs (compass on :$COMPASS_PORT, stock on :$STOCK_PORT)"
    mkdir -p "$DEMO/lib"
    write_compass_conf
    # etc/slurm-budget.conf without the lines the lab template already has
    # (Slurm warns about every key given twice).
    grep -vxFf "$ROOT/contrib/lab/slurm.conf.in" "$ROOT/etc/slurm-budget.conf" >"$DEMO/slurm-budget.conf"
    # Private copies: rebuilding the workspace never changes a running demo.
    install -m 0755 "$REL/libcompass_spank.so" "$DEMO/lib/compass_spank.so"
    # placement: neither cluster has the budget service's priority settings;
    # order/enforce: both have them, and the SPANK options and job_submit.lua
    # (the budget service reads --min-runtime/--resumable from AdminComment),
    # so the stock cluster differs only by its select plugin.
    local extra=""
    [ "$CONFIG" = placement ] || extra=$DEMO/slurm-budget.conf
    LAB_PORT_BASE=$COMPASS_PORT LAB_NODES=$NODES LAB_GPUS=$GPUS \
        COMPASS_SELECT_SO=$REL/libselect_cons_tres_compass.so \
        COMPASS_SPANK_SO=$DEMO/lib/compass_spank.so \
        COMPASS_CONF=$DEMO/compass.conf.in \
        COMPASS_JOB_SUBMIT_LUA=$ROOT/etc/job_submit.lua \
        LAB_EXTRA_CONF=$extra \
        "$ROOT/contrib/slurm-lab.sh" up "$DEMO/compass" 9<&-
    if [ "$CONFIG" = placement ]; then
        LAB_PORT_BASE=$STOCK_PORT LAB_NODES=$NODES LAB_GPUS=$GPUS \
            "$ROOT/contrib/slurm-lab.sh" up "$DEMO/stock" 9<&-
    else
        LAB_PORT_BASE=$STOCK_PORT LAB_NODES=$NODES LAB_GPUS=$GPUS \
            COMPASS_SPANK_SO=$DEMO/lib/compass_spank.so \
            COMPASS_CONF=$DEMO/compass.conf.in \
            COMPASS_JOB_SUBMIT_LUA=$ROOT/etc/job_submit.lua \
            LAB_EXTRA_CONF=$extra \
            "$ROOT/contrib/slurm-lab.sh" up "$DEMO/stock" 9<&-
    fi
    grep -q '^SelectType=select/cons_tres_compass$' "$DEMO/compass/etc/slurm.conf" || die "compass cluster is not running select/cons_tres_compass"
    grep -q '^SelectType=select/cons_tres$' "$DEMO/stock/etc/slurm.conf" || die "stock cluster is not running select/cons_tres"
}

# start_budgetd CLUSTER DIR PORT: compass-budgetd with its state in DIR,
# serving 127.0.0.1:PORT, ordering the demo cluster CLUSTER (compass or
# stock) and, with DEMO_CONFIG=enforce, enforcing protected time on it.
start_budgetd() {
    local cluster=$1 b=$2 port=$3
    local url=http://127.0.0.1:$port/ enforce=true
    [ "$CONFIG" = enforce ] || enforce=false
    step "start compass-budgetd on $url (Venus budget tree, against the $cluster cluster, enforce = $enforce)"
    mkdir -p "$b"
    install -m 0755 "$REL/compass-budgetd" "$b/compass-budgetd"
    # The service reads Slurm through libslurm.so, which loads the configured
    # select plugin to unpack node and job records. select_cons_tres_compass
    # only loads into slurmctld (it links slurmctld's internal symbols), and
    # it claims cons_tres's plugin id and forwards the packing to it, so the
    # records are cons_tres's: the service gets a client copy of the
    # cluster's slurm.conf naming the stock plugin (docs/admin-guide.md).
    sed -e 's#^PluginDir=.*#PluginDir=/usr/lib/x86_64-linux-gnu/slurm-wlm#' \
        -e 's#^SelectType=.*#SelectType=select/cons_tres#' \
        "$DEMO/$cluster/etc/slurm.conf" >"$b/slurm-client.conf"
    cat >"$b/compass-budgetd.toml" <<TOML
# compass-budgetd of the demo's $cluster cluster (written by contrib/demo.sh; see etc/compass-budgetd.toml)
listen = "127.0.0.1:$port"
db = "$b/budget.db"
admins = ["root"]
capacity_gpus = $((NODES * GPUS))
cycle_s = 2
# The fair-share window compressed like the replay (7 days / $SPEEDUP), so
# usage ratios mean what they would on the real cluster.
window_s = $((604800 / SPEEDUP))
slurm = "libslurm"
slurm_conf = "$b/slurm-client.conf"
munge_socket = "$DEMO/$cluster/munge/munge.socket.2"

[protection]
# Protected/preemptible time enforced every cycle (DEMO_CONFIG=enforce), or
# queue order only (DEMO_CONFIG=order).
enforce = $enforce
TOML
    # Detached (own session, stdin closed), so it outlives this script and a
    # Ctrl-C of the replay; the PID file is written by the process itself.
    # shellcheck disable=SC2016 # expanded by the inner bash
    setsid bash -c 'echo $$ >"$1"; shift; exec "$@"' _ "$b/compass-budgetd.pid" \
        "$b/compass-budgetd" --config "$b/compass-budgetd.toml" \
        </dev/null >>"$b/compass-budgetd.log" 2>&1 9<&- &
    local i up=""
    for i in $(seq 100); do # up to ~20 s
        if "$REL/compass" budget --url "$url" show >/dev/null 2>&1; then up=1; break; fi
        if [ -s "$b/compass-budgetd.pid" ] && ! live_pid "$b/compass-budgetd.pid" "$b/" >/dev/null; then
            tail -5 "$b/compass-budgetd.log" >&2
            die "compass-budgetd exited at start (log: $b/compass-budgetd.log)"
        fi
        sleep 0.2
    done
    [ -n "$up" ] || die "compass-budgetd does not answer on $url after 20 s (log: $b/compass-budgetd.log)"
    "$REL/compass" budget --url "$url" --munge-socket "$DEMO/$cluster/munge/munge.socket.2" \
        import "$ROOT/etc/budgets.venus.toml" --why "compass demo: Venus budget tree" --yes | tail -1
    echo "   pid $(cat "$b/compass-budgetd.pid"), log $b/compass-budgetd.log"
}

# The configuration in words, for the reports.
config_label() {
    local when=""
    [ -z "$MOVE_WHEN" ] || when="; select.move_when = $MOVE_WHEN"
    case "$CONFIG" in
    placement) echo "placement only: no budget service on either cluster$when" ;;
    order) echo "order only: compass-budgetd with enforce = false on both clusters$when" ;;
    enforce) echo "enforcement: compass-budgetd enforcing protected time on both clusters$when" ;;
    esac
}

# ==================================================================== REPLAY
# The one place that runs the replay (`compass replay`, docs/replay.md): the
# same window of the trace through real sbatch on both clusters at once, a
# live status line per cluster, report.md / report.json in $OUT.
# DEMO_REPLAY_ARGS adds flags (e.g. --check, --jobs 40); COMPASS_REPLAY
# replaces the program (tests of this script).
run_replay() {
    step "replay $HOURS h of $(basename "$TRACE") at ${SPEEDUP}x through sbatch on both clusters, $REPEATS time(s); $(config_label) (about 10 min a run with the defaults)"
    local replay=${COMPASS_REPLAY:-$REL/compass}
    if [ -z "${COMPASS_REPLAY:-}" ] && ! "$replay" replay --help >/dev/null 2>&1; then
        die "this build of compass has no \`replay\` subcommand (issue 6); the clusters and the service are up: stop them with: $STOP_CMD"
    fi
    mkdir -p "$OUT"
    local extra=() service=()
    read -r -a extra <<<"${DEMO_REPLAY_ARGS:-}"
    # order/enforce: the report's simulated columns model the budget service
    # both clusters run (the compass cluster's file; the stock cluster's
    # differs only in ports and paths), through the policy simulator.
    if [ "$CONFIG" != placement ]; then
        service=(--service-config "$DEMO/budget/compass-budgetd.toml")
    fi
    "$replay" replay --trace "$TRACE" --speedup "$SPEEDUP" --hours "$HOURS" \
        --label "$(config_label)" --repeat "$REPEATS" --not-resumable "$NOT_RESUMABLE" \
        --cluster "compass=$DEMO/compass/etc/slurm.conf:$DEMO/compass/state.json" \
        --cluster "stock=$DEMO/stock/etc/slurm.conf" \
        --budgets "$ROOT/etc/budgets.venus.toml" "${service[@]}" \
        --out "$OUT" "${extra[@]}"
}
# ==================================================================== /REPLAY

report() {
    step_done
    echo
    echo "demo: configuration: $(config_label); $REPEATS run(s)"
    if [ "$REPEATS" -gt 1 ]; then
        echo "demo: summary    $OUT/summary.md (mean, sd, min, max of every figure; each run in $OUT/run-N/)"
    else
        echo "demo: report     $OUT/report.md (and report.json; the tables above)"
    fi
    if [ "$CONFIG" != placement ]; then
        echo "demo: dashboard  $DASHBOARD   (budget tree, queue order, owed vs delivered)"
        echo "      stock cluster's budget service: http://127.0.0.1:$STOCK_BUDGET_PORT/"
    fi
    cat <<EOF
demo: the clusters keep running; try
        SLURM_CONF=$DEMO/compass/etc/slurm.conf squeue
        $REL/compass status --state-file $DEMO/compass/state.json
EOF
    if [ "$CONFIG" != placement ]; then echo "        $REL/compass budget --url $DASHBOARD show"; fi
    cat <<EOF
      stop everything with: $STOP_CMD
demo: total $((SECONDS / 60)) min $((SECONDS % 60)) s
EOF
}

preflight() {
    check_root "$@"
    check_os
    check_slurm_version
    check_trace
    case "${DEMO_ENFORCE:-true}" in true|false) ;; *) die "DEMO_ENFORCE must be true or false, not '$DEMO_ENFORCE'" ;; esac
    case "$CONFIG" in placement|order|enforce) ;; *) die "DEMO_CONFIG must be placement, order or enforce, not '$CONFIG'" ;; esac
    case "$REPEATS" in ''|*[!0-9]*|0) die "DEMO_REPEATS must be a whole number >= 1, not '$REPEATS'" ;; esac
    # One demo.sh run at a time per state directory (a `stop` from another
    # shell is still allowed). The lock is on the directory that holds $DEMO,
    # so it leaves no file behind. Daemons are started with fd 9 closed, so
    # they never hold it.
    mkdir -p "$(dirname "$DEMO")"
    exec 9<"$(dirname "$DEMO")"
    flock -n 9 || die "another contrib/demo.sh is running (state in $DEMO); stop it with: $STOP_CMD"
    check_ports
}

main_run() {
    preflight
    trap on_error ERR

    install_and_build

    step "clean up a previous demo"
    if [ -e "$DEMO/$MARKER" ]; then
        if demo_running; then
            echo "   a demo is running: restarting it from scratch (its clusters, jobs and budget database are discarded)"
        else
            echo "   leftovers of an earlier demo found: removing them"
        fi
        stop_all
    elif [ -e "$DEMO" ]; then
        die "$DEMO exists but was not made by the demo (no $MARKER); remove it or set COMPASS_DEMO_DIR"
    else
        echo "   none"
    fi
    mkdir -p "$DEMO"
    touch "$DEMO/$MARKER"

    start_clusters
    if [ "$CONFIG" != placement ]; then
        start_budgetd compass "$DEMO/budget" "$BUDGET_PORT"
        start_budgetd stock "$DEMO/stock-budget" "$STOCK_BUDGET_PORT"
    fi
    run_replay
    report
}

main() {
    case "${1:-}" in
    "") main_run ;;
    check)
        preflight check
        echo "demo: preflight ok (root, Debian 12, Slurm $(dpkg-query -W -f='${Version}' slurmctld 2>/dev/null || echo 'not installed yet'), trace $TRACE, ports free or the demo's own)"
        ;;
    stop)
        check_root stop
        stop_all
        ;;
    -h|--help|help) sed -n '2,/^set -Eeuo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' ;;
    *) die "unknown command '$1' (use: contrib/demo.sh [check|stop|help])" ;;
    esac
}

# Bash reads a script while it runs: everything is parsed before main runs,
# and nothing after this line is ever read, so an edit of this file during a
# 10-minute run cannot change it.
main "$@"; exit
