#!/usr/bin/env bash
# Slurm's own regression tests as a guard for select/cons_tres_compass
# (issue #11): runs a subset of Slurm 22.05's testsuite (expect and python,
# local-config mode) against two lab clusters side by side, one with
# select/cons_tres_compass and one with stock select/cons_tres, while a load
# driver keeps --resumable GPU jobs of mixed shapes coming on both labs (so
# the compass lab makes Compact migrations while the tests run), and reports
# every test that passes on stock and fails under compass. See
# docs/slurm-testsuite.md.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
PROG=slurm-testsuite.sh

usage() {
    cat <<'EOF'
Usage: contrib/slurm-testsuite.sh [OPTIONS] [REGEX...]

Runs Slurm's own testsuite (SRC/testsuite/expect and testsuite/python in
local-config mode) on a compass lab (select/cons_tres_compass) and a stock
lab (select/cons_tres), in parallel, with a background driver submitting
--resumable GPU jobs of mixed shapes to both labs, then prints a table of
outcomes per lab and every difference. Root only.

REGEX (Perl-compatible, matched with grep -P against test names such as
"expect/test39.1" or "python/commands/srun/test_-t.py"; a test runs if any
REGEX matches). Default: the guard subset (see docs/slurm-testsuite.md):
  ^expect/test39\.          every GPU test
  ^expect/test17\.          every sbatch test
  ^python/commands/(sbatch|srun|salloc|scontrol|squeue|sinfo)/
  ^python/features/(gres|job_arrays)/
(about 25 minutes on a loaded 2-core machine). The srun tests take longer:
add them with '^expect/test1\.'. Use "." for the whole testsuite (hours).

Options:
  --src DIR          Slurm source tree (default /var/cache/compass/slurm-src/slurm-wlm-22.05.8)
  --out DIR          work and result directory (default /tmp/testsuite-run); it
                     holds the labs, the patched testsuite copies, per-test logs,
                     results.tsv and summary.md (wiped at start)
  --labs LIST        compass,stock (default), or one of them
  --suites LIST      expect,python (default), or one of them
  --no-load          do not run the background --resumable job driver
  --load-gpus N      GPUs the driver keeps busy or queued per lab (default 20)
  --timeout SEC      wall-clock limit per expect test / python file (default 420)
  --retries N        re-run a test that passed on stock and did not pass under
                     compass (failed, timed out or skipped) N more times on both
                     labs, one lab after the other (default 1); the last attempt
                     decides
  --keep             leave both labs running at the end (stop them with
                     contrib/slurm-lab.sh down OUT/LAB/lab)
  --list             print the tests the REGEXes select and exit
  -h, --help         this help

Environment:
  COMPASS_SELECT_SO  select plugin (default target/debug/libselect_cons_tres_compass.so)
  COMPASS_SPANK_SO   SPANK plugin (default target/debug/libcompass_spank.so)
                     build both first: cargo build -p compass-select -p compass-spank
  CARGO_TARGET_DIR   where target/ is, if not ROOT/target
  COMPASS_PORT_BASE  slurmctld port of the compass lab (default 19100)
  STOCK_PORT_BASE    slurmctld port of the stock lab (default 19300)

Both labs load the SPANK plugin and job_submit.lua (so --resumable is
accepted on both); they differ only in SelectType. The testsuite is copied
to OUT and patched there (check_config_select in expect/globals and
require_config_parameter in python/lib/atf.py accept
select/cons_tres_compass as cons_tres); the source tree is never changed.

Exit status: 0 no regression, 1 some test passed on stock and failed under
compass in the same attempt (even if a re-run passed), 2 usage or setup error.
EOF
}

die() { echo "$PROG: $*" >&2; exit 2; }
log() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*"; }

SRC=/var/cache/compass/slurm-src/slurm-wlm-22.05.8
OUT=/tmp/testsuite-run
LABS=compass,stock
SUITES=expect,python
LOAD=1
LOAD_GPUS=20
TIMEOUT=420
RETRIES=1
KEEP=0
LIST=0
PATTERNS=()
while [ $# -gt 0 ]; do
    case "$1" in
    -h | --help) usage; exit 0 ;;
    --src) SRC=${2:?--src needs a directory}; shift 2 ;;
    --out) OUT=${2:?--out needs a directory}; shift 2 ;;
    --labs) LABS=${2:?--labs needs a list}; shift 2 ;;
    --suites) SUITES=${2:?--suites needs a list}; shift 2 ;;
    --no-load) LOAD=0; shift ;;
    --load-gpus) LOAD_GPUS=${2:?--load-gpus needs a number}; shift 2 ;;
    --timeout) TIMEOUT=${2:?--timeout needs seconds}; shift 2 ;;
    --retries) RETRIES=${2:?--retries needs a number}; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --list) LIST=1; shift ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) PATTERNS+=("$1"); shift ;;
    esac
done
[ "${#PATTERNS[@]}" -gt 0 ] || PATTERNS=(
    '^expect/test39\.'
    '^expect/test17\.'
    '^python/commands/(sbatch|srun|salloc|scontrol|squeue|sinfo)/'
    '^python/features/(gres|job_arrays)/'
)
for n in "$LOAD_GPUS" "$TIMEOUT" "$RETRIES"; do
    [[ $n =~ ^[0-9]+$ ]] || die "not a number: $n"
done
IFS=, read -r -a LAB_LIST <<<"$LABS"
IFS=, read -r -a SUITE_LIST <<<"$SUITES"
for l in "${LAB_LIST[@]}"; do
    case "$l" in compass | stock) ;; *) die "unknown lab $l (compass, stock)" ;; esac
done
for s in "${SUITE_LIST[@]}"; do
    case "$s" in expect | python) ;; *) die "unknown suite $s (expect, python)" ;; esac
done
has() { local x=$1; shift; local y; for y in "$@"; do [ "$x" = "$y" ] && return 0; done; return 1; }

TS=$SRC/testsuite
if [ ! -d "$TS/expect" ] || [ ! -d "$TS/python" ]; then
    die "no testsuite under $SRC (contrib/prepare-slurm-source.sh fetches the source tree)"
fi

# ---------------------------------------------------------------- selection
matches() { # name -> 0 if any pattern matches
    local p
    for p in "${PATTERNS[@]}"; do
        grep -qP -- "$p" <<<"$1" && return 0
    done
    return 1
}
select_tests() { # prints "suite<TAB>name<TAB>path-in-suite"
    local f name
    if has expect "${SUITE_LIST[@]}"; then
        while read -r f; do
            name=expect/$f
            matches "$name" && printf 'expect\t%s\t%s\n' "$name" "$f"
        done < <(find "$TS/expect" -maxdepth 1 -name 'test*' -printf '%f\n' \
            | grep -E '^test[0-9]+\.[0-9]+$' | sort -t. -k1.5,1n -k2,2n)
    fi
    if has python "${SUITE_LIST[@]}"; then
        while read -r f; do
            name=python/${f#tests/}
            matches "$name" && printf 'python\t%s\t%s\n' "$name" "$f"
        done < <(cd "$TS/python" && find tests -name 'test_*.py' | sort)
    fi
    return 0
}
mapfile -t TESTS < <(select_tests)
if [ "$LIST" = 1 ]; then
    printf '%s\n' "${TESTS[@]}" | cut -f2
    echo "${#TESTS[@]} tests" >&2
    exit 0
fi
[ "${#TESTS[@]}" -gt 0 ] || die "no test matches ${PATTERNS[*]}"

# ---------------------------------------------------------------- preflight
[ "$(id -u)" -eq 0 ] || die "must run as root (it starts munge, slurmctld and slurmd)"
[ -x /usr/sbin/slurmctld-wlm ] || die "Slurm is not installed: run contrib/install-slurm-deps.sh"
if has expect "${SUITE_LIST[@]}"; then
    command -v expect >/dev/null || die "expect is missing: apt-get install expect"
fi
if has python "${SUITE_LIST[@]}"; then
    command -v pytest-3 >/dev/null || die "pytest is missing: apt-get install python3-pytest"
    python3 -c 'import pexpect' 2>/dev/null \
        || echo "$PROG: warning: python3-pexpect is missing: some srun tests will error on both labs" >&2
fi
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
SELECT_SO=${COMPASS_SELECT_SO:-$TARGET/debug/libselect_cons_tres_compass.so}
SPANK_SO=${COMPASS_SPANK_SO:-$TARGET/debug/libcompass_spank.so}
for so in "$SELECT_SO" "$SPANK_SO"; do
    [ -f "$so" ] || die "$so missing: cargo build -p compass-select -p compass-spank (or set COMPASS_SELECT_SO / COMPASS_SPANK_SO)"
done

port_of() { if [ "$1" = compass ]; then echo "${COMPASS_PORT_BASE:-19100}"; else echo "${STOCK_PORT_BASE:-19300}"; fi; }

case "$OUT" in /) die "--out / is not allowed" ;; esac
for l in compass stock; do
    if [ -d "$OUT/$l/lab/run" ]; then "$HERE/slurm-lab.sh" down "$OUT/$l/lab" >/dev/null 2>&1 || true; fi
done
rm -rf "$OUT"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
RESULTS=$OUT/results.tsv # lab suite name outcome seconds note
: >"$RESULTS"

BG_PIDS=()
# shellcheck disable=SC2317  # invoked by the EXIT trap
cleanup() {
    local p
    for p in "${BG_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    if [ "$KEEP" = 0 ]; then
        for l in "${LAB_LIST[@]}"; do
            if [ -d "$OUT/$l/lab" ]; then "$HERE/slurm-lab.sh" down "$OUT/$l/lab" >/dev/null 2>&1 || true; fi
        done
    fi
}
trap cleanup EXIT
trap 'echo "$PROG: interrupted" >&2; exit 2' INT TERM

# ---------------------------------------------------------------- labs
# compass.conf of both labs: short migration timings, and Compact's moves
# made whenever they are worth it (move_when = "always"), so that Compact
# moves the driver's --resumable jobs within a test run. (Under the default
# "pays" the driver's short jobs move only to start a waiting job, which at
# this load is seldom: a run of the default subset made no migration.)
cat >"$OUT/compass.conf" <<'EOF'
# compass.conf of contrib/slurm-testsuite.sh (@LAB@ is the lab dir)
[spank]
max_min_runtime = "8h"

[select]
state_file = "@LAB@/run/compass-state.json"
migration_cooldown = "1m"
min_run_before_migration = "0"
move_when = "always"
EOF

lab_up() { # lab
    local l=$1 dir=$OUT/$1/lab
    mkdir -p "$dir"
    log "[$l] starting the lab in $dir (slurmctld port $(port_of "$l"))"
    if [ "$l" = compass ]; then
        env LAB_PORT_BASE="$(port_of "$l")" COMPASS_SELECT_SO="$SELECT_SO" COMPASS_SPANK_SO="$SPANK_SO" \
            COMPASS_CONF="$OUT/compass.conf" COMPASS_JOB_SUBMIT_LUA="$ROOT/etc/job_submit.lua" \
            "$HERE/slurm-lab.sh" up "$dir" >"$OUT/$l/lab-up.log" 2>&1
    else
        env -u COMPASS_SELECT_SO LAB_PORT_BASE="$(port_of "$l")" COMPASS_SPANK_SO="$SPANK_SO" \
            COMPASS_CONF="$OUT/compass.conf" COMPASS_JOB_SUBMIT_LUA="$ROOT/etc/job_submit.lua" \
            "$HERE/slurm-lab.sh" up "$dir" >"$OUT/$l/lab-up.log" 2>&1
    fi || { cat "$OUT/$l/lab-up.log" >&2; die "[$l] lab did not start"; }
    local st
    st=$(SLURM_CONF=$dir/etc/slurm.conf scontrol show config | awk '$1=="SelectType"{print $3}')
    log "[$l] up: SelectType=$st"
}

# The testsuite copy of one lab, patched so that select/cons_tres_compass
# counts as cons_tres, with the lab's globals.local and testsuite.conf.
prepare_suite() { # lab
    local l=$1 dir=$OUT/$1
    mkdir -p "$dir"
    cp -a "$TS" "$dir/testsuite"
    # expect: check_config_select compares "select/$type" with SelectType.
    perl -0pi -e 's/(proc check_config_select \{ type \} \{\n\tset select_type \[get_config_param "SelectType"\]\n)/$1\t# compass (contrib\/slurm-testsuite.sh): select\/cons_tres_compass is cons_tres\n\tif {\$select_type eq "select\/cons_tres_compass"} {\n\t\tset select_type "select\/cons_tres"\n\t}\n/' \
        "$dir/testsuite/expect/globals"
    grep -q 'select_type eq "select/cons_tres_compass"' "$dir/testsuite/expect/globals" \
        || die "could not patch expect/globals (check_config_select changed?)"
    # python: require_config_parameter compares the slurm.conf value.
    perl -0pi -e 's/(\n(\s+)observed_value = get_config_parameter\(parameter_name, live=False, source=source, quiet=True\)\n)/$1$2# compass (contrib\/slurm-testsuite.sh): select\/cons_tres_compass is cons_tres\n$2if parameter_name.lower() == "selecttype" and observed_value == "select\/cons_tres_compass":\n$2    observed_value = "select\/cons_tres"\n/' \
        "$dir/testsuite/python/lib/atf.py"
    grep -q 'observed_value == "select/cons_tres_compass"' "$dir/testsuite/python/lib/atf.py" \
        || die "could not patch python/lib/atf.py (require_config_parameter changed?)"
    cat >"$dir/testsuite/testsuite.conf" <<EOF
SlurmSourceDir=$SRC
SlurmBuildDir=$SRC
SlurmInstallDir=/usr
SlurmConfigDir=$dir/lab/etc
EOF
    cat >"$dir/testsuite/expect/globals.local" <<EOF
set slurm_dir "/usr"
set build_dir "$SRC"
set src_dir "$SRC"
set testsuite_colorize false
EOF
}

# ---------------------------------------------------------------- load driver
# Keeps about LOAD_GPUS GPUs of --resumable jobs busy or queued: shapes
# 1x1, 1x2, 2x1, 1x4, 2x2, 1x8 (tasks x GPUs per task), 20-70 s each, the
# same pseudo-random sequence on both labs. Departures leave holes that the
# compass lab's Compact fills by migrating (requeueing) these jobs.
load_driver() { # lab
    local l=$1 conf=$OUT/$1/lab/etc/slurm.conf logf=$OUT/$1/load.log
    local shapes=("1 1" "1 2" "2 1" "1 4" "2 2" "1 8") i=0 busy shape w g secs id
    local -A gpus=()
    RANDOM=11
    while :; do
        busy=0
        for id in $(SLURM_CONF=$conf squeue -h -n compass-load -o '%i' 2>/dev/null); do
            busy=$((busy + ${gpus[$id]:-0}))
        done
        if [ "$busy" -lt "$LOAD_GPUS" ]; then
            shape=${shapes[$((RANDOM % ${#shapes[@]}))]}
            w=${shape% *}
            g=${shape#* }
            secs=$((20 + RANDOM % 51))
            i=$((i + 1))
            if id=$(SLURM_CONF=$conf sbatch --parsable -J compass-load -o /dev/null --resumable -t 5 \
                --ntasks="$w" --gpus-per-task="$g" --cpus-per-task=1 --wrap "sleep $secs" 2>>"$logf"); then
                id=${id%%;*}
                gpus[$id]=$((w * g))
                echo "job $id ${w}x$g ${secs}s" >>"$logf"
            else
                echo "submit $i (${w}x$g) failed" >>"$logf"
                sleep 2
            fi
        else
            sleep 2
        fi
    done
}

# ---------------------------------------------------------------- runners
# outcome words: PASS FAIL SKIP TIMEOUT (a python file gives one row per test
# function, plus ERROR for collection or fixture errors)
record() { # lab suite name outcome secs note
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$RESULTS"
}

run_expect() { # lab name file attempt -> prints the outcome
    local l=$1 name=$2 f=$3 attempt=$4 dir=$OUT/$1/testsuite/expect logf rc note t0
    logf=$OUT/$l/logs/$f${attempt:+.retry$attempt}.log
    t0=$(date +%s)
    set +e
    (cd "$dir" && SLURM_CONF=$OUT/$l/lab/etc/slurm.conf SLURM_TESTSUITE_CONF=$OUT/$l/testsuite/testsuite.conf \
        timeout -k 15 "$TIMEOUT" expect -f "./$f") </dev/null >"$logf" 2>&1
    rc=$?
    set -e
    local secs=$(($(date +%s) - t0)) out
    case $rc in
    0) out=PASS ;;
    255) out=SKIP ;;
    124 | 137) out=TIMEOUT ;;
    *) out=FAIL ;;
    esac
    note=$(grep -aE '\] (Fatal|Warning) ' "$logf" | grep -aE 'Fatal|skip' | tail -1 \
        | sed -E 's/^\[[^]]*\] (Fatal|Warning) +//' | cut -c1-140 | tr '\t' ' ' || true)
    [ "$out" = SKIP ] && note=$(grep -a 'Warning' "$logf" | tail -1 | sed -E 's/^\[[^]]*\] Warning +//' | cut -c1-140 | tr '\t' ' ' || true)
    [ "$out" = TIMEOUT ] && note="killed after ${TIMEOUT}s"
    echo "$out	$secs	$note"
}

run_python() { # lab file attempt -> records rows itself, prints "p/f/s" counts
    local l=$1 f=$2 attempt=$3 dir=$OUT/$1/testsuite/python logf xml rc t0
    local base=${f//\//_}
    logf=$OUT/$l/logs/$base${attempt:+.retry$attempt}.log
    xml=$OUT/$l/logs/$base${attempt:+.retry$attempt}.xml
    t0=$(date +%s)
    set +e
    (cd "$dir" && SLURM_CONF=$OUT/$l/lab/etc/slurm.conf SLURM_TESTSUITE_CONF=$OUT/$l/testsuite/testsuite.conf \
        timeout -k 15 "$TIMEOUT" pytest-3 -p no:cacheprovider --local-config -rfEs -v \
        --junitxml="$xml" "$f") </dev/null >"$logf" 2>&1
    rc=$?
    set -e
    local secs=$(($(date +%s) - t0))
    if [ ! -s "$xml" ]; then
        local out=ERROR
        [ "$rc" = 124 ] || [ "$rc" = 137 ] && out=TIMEOUT
        echo "python/${f#tests/}	$out	$secs	pytest rc $rc, no junit report"
        return 0
    fi
    python3 - "$xml" "python/${f#tests/}" "$secs" <<'PY'
import sys, xml.etree.ElementTree as ET
xml, name, secs = sys.argv[1], sys.argv[2], sys.argv[3]
for tc in ET.parse(xml).getroot().iter("testcase"):
    out, note = "PASS", ""
    for child, word in (("failure", "FAIL"), ("error", "ERROR"), ("skipped", "SKIP")):
        el = tc.find(child)
        if el is not None:
            out = word
            note = (el.get("message") or "").splitlines()[0][:140] if el.get("message") else ""
            break
    t = tc.get("time") or secs
    print(f"{name}::{tc.get('name')}\t{out}\t{float(t):.0f}\t{note.replace(chr(9), ' ')}")
PY
}

run_one() { # lab suite name file attempt -> rows "name<TAB>outcome<TAB>secs<TAB>note"
    local l=$1 s=$2 name=$3 f=$4 attempt=${5:-}
    if [ "$s" = expect ]; then
        printf '%s\t%s\n' "$name" "$(run_expect "$l" "$name" "$f" "$attempt")"
    else
        run_python "$l" "$f" "$attempt"
    fi
}

run_lab() { # lab: every selected test, in order
    local l=$1 k=0 n=${#TESTS[@]} t s name f rname out secs note
    mkdir -p "$OUT/$l/logs"
    for t in "${TESTS[@]}"; do
        IFS=$'\t' read -r s name f <<<"$t"
        k=$((k + 1))
        while IFS=$'\t' read -r rname out secs note; do
            [ -n "$rname" ] || continue
            record "$l" "$s" "$rname" "$out" "$secs" "$note"
            printf '%s [%-7s %3d/%d] %-7s %4ss %s\n' "$(date +%H:%M:%S)" "$l" "$k" "$n" "$out" "$secs" "$rname"
        done < <(run_one "$l" "$s" "$name" "$f")
    done
}

# ---------------------------------------------------------------- main
T_START=$(date +%s)
log "$PROG: ${#TESTS[@]} test files on lab(s) ${LAB_LIST[*]}, suites ${SUITE_LIST[*]}, results in $OUT"
for l in "${LAB_LIST[@]}"; do
    prepare_suite "$l"
    lab_up "$l"
done
if [ "$LOAD" = 1 ]; then
    for l in "${LAB_LIST[@]}"; do
        load_driver "$l" &
        BG_PIDS+=("$!")
    done
    log "load driver: --resumable GPU jobs (about $LOAD_GPUS GPUs per lab) submitting in the background"
    sleep 20
fi

RUN_PIDS=()
for l in "${LAB_LIST[@]}"; do
    run_lab "$l" &
    RUN_PIDS+=("$!")
    BG_PIDS+=("$!")
done
for p in "${RUN_PIDS[@]}"; do wait "$p" || true; done

# Regressions: in some attempt, PASS on stock and FAIL/TIMEOUT/ERROR under
# compass. "confirmed" if the last attempt says so too, else "intermittent"
# (a defect that shows only in some cluster states looks like this, e.g.
# test39.23 in docs/results.md: it still counts). Re-run candidates: PASS on
# stock, anything but PASS under compass, in the last attempt.
last_pairs() { # prints "name<TAB>compass<TAB>stock" from the last attempt of each
    awk -F'\t' '
        { last[$1 SUBSEP $3] = $4; names[$3] = 1 }
        END { for (n in names) printf "%s\t%s\t%s\n", n, last["compass" SUBSEP n], last["stock" SUBSEP n] }' "$RESULTS" | sort -V
}
regressions() { # prints "name<TAB>confirmed|intermittent"
    awk -F'\t' '
        function bad(o) { return o == "FAIL" || o == "TIMEOUT" || o == "ERROR" }
        { a = 0; if ($6 ~ /^retry [0-9]+:/) { a = $6; sub(/^retry /, "", a); sub(/:.*/, "", a) }
          out[$1 SUBSEP $3 SUBSEP a] = $4; if (a > na[$3]) na[$3] = a; names[$3] = 1 }
        END { for (n in names) {
                hit = 0
                for (a = 0; a <= na[n]; a++)
                    if (out["stock" SUBSEP n SUBSEP a] == "PASS" && bad(out["compass" SUBSEP n SUBSEP a])) hit = 1
                if (!hit) continue
                a = na[n]
                c = (out["stock" SUBSEP n SUBSEP a] == "PASS" && bad(out["compass" SUBSEP n SUBSEP a])) ? "confirmed" : "intermittent"
                printf "%s\t%s\n", n, c } }' "$RESULTS" | sort -V
}
retry_candidates() {
    last_pairs | awk -F'\t' '$3 == "PASS" && $2 != "" && $2 != "PASS" { print $1 }'
}
RETRIED=()
if has compass "${LAB_LIST[@]}" && has stock "${LAB_LIST[@]}"; then
    for a in $(seq 1 "$RETRIES"); do
        mapfile -t REG < <(retry_candidates)
        [ "${#REG[@]}" -gt 0 ] || break
        log "retry $a: ${#REG[@]} test(s) passed on stock and not under compass; re-running on both labs"
        for name in "${REG[@]}"; do
            file=${name%%::*}
            for t in "${TESTS[@]}"; do
                IFS=$'\t' read -r s tname f <<<"$t"
                [ "$tname" = "$file" ] || continue
                for l in stock compass; do
                    while IFS=$'\t' read -r rname out secs note; do
                        [ "$rname" = "$name" ] || continue
                        record "$l" "$s" "$rname" "$out" "$secs" "retry $a: $note"
                        log "[retry $a $l] $out ${secs}s $rname"
                    done < <(run_one "$l" "$s" "$tname" "$f" "$a")
                done
            done
            RETRIED+=("$name")
        done
    done
fi

# Stop the load, count migrations.
for p in "${BG_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
MIGR_STATE=n/a
MIGR_LOG=n/a
LOAD_JOBS=""
if has compass "${LAB_LIST[@]}"; then
    cl=$OUT/compass/lab
    MIGR_LOG=$(grep -ac 'migration of job [0-9]*: requeued' "$cl/log/slurmctld.log" || true)
    MIGR_STATE=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("migrations_done","n/a"))' \
        "$cl/run/compass-state.json" 2>/dev/null || echo n/a)
fi
# Migrations, from the plugin's log lines and Slurm's starts: where did each
# requeued job start again (the same nodes as before, other nodes, not yet)?
# Where the migrated jobs started again: slurmctld.log -> "M migrations: A
# restarted elsewhere, B on the same nodes, C not restarted; of those with a
# logged target (`; target n1`), D on it, E elsewhere; F requeued while a
# node they restarted on was kept for a waiting job (G jobs had nodes
# kept)". Node lists are compared as sets (Slurm logs hostlists, `n[1-2]`;
# the plugin `n1,n2`). A node stays kept until its job starts, ends or is
# cancelled.
migration_moves() {
    awk '
        # Hostlists (n[1-3,5],n7) as sorted, space-separated node names.
        function expand1(it,    b, pre, body, n, rr, j, lo, hi, k, out, w, x) {
            b = index(it, "["); if (b == 0) return it " "
            pre = substr(it, 1, b - 1); body = substr(it, b + 1); sub(/\].*/, "", body)
            n = split(body, rr, ","); out = ""
            for (j = 1; j <= n; j++) {
                if (split(rr[j], x, "-") == 2) { lo = x[1]; hi = x[2] } else { lo = rr[j]; hi = rr[j] }
                w = length(lo)
                for (k = lo + 0; k <= hi + 0; k++) out = out sprintf("%s%0" w "d ", pre, k)
            }
            return out
        }
        function hosts(s,    i, c, depth, cur, res, n, a, j, k, t) {
            res = ""; depth = 0; cur = ""
            for (i = 1; i <= length(s); i++) {
                c = substr(s, i, 1)
                if (c == "[") depth++
                if (c == "]") depth--
                if (c == "," && depth == 0) { res = res expand1(cur); cur = "" } else cur = cur c
            }
            res = res expand1(cur)
            n = split(res, a, " ")
            for (j = 2; j <= n; j++) { t = a[j]; k = j - 1; while (k > 0 && a[k] > t) { a[k + 1] = a[k]; k-- } a[k + 1] = t }
            res = ""; for (j = 1; j <= n; j++) if (j == 1 || a[j] != a[j - 1]) res = res a[j] " "
            return res
        }
        function started(j, nodes,    h, k, n, a, i) {
            h = hosts(nodes)
            if (j in pend) {
                if (h == last[j]) same++; else moved++
                if (j in target) { if (h == target[j]) ontarget++; else offtarget++ }
                n = split(h, a, " ")
                for (k in kept) if (keptat[k] < requeuedat[j]) for (i = 1; i <= n; i++) if (index(" " kept[k], " " a[i] " ")) { onkept++; break }
                delete pend[j]; delete target[j]
            }
            delete kept[j]
            last[j] = h
        }
        /_start_job: Started JobId=[0-9]+ in [^ ]+ on / { j = $0; sub(/.*JobId=/, "", j); sub(/ .*/, "", j); started(j, $NF) }
        /sched: Allocate JobId=[0-9]+ NodeList=/ { j = $0; sub(/.*JobId=/, "", j); sub(/ .*/, "", j)
            n = $0; sub(/.*NodeList=/, "", n); sub(/ .*/, "", n); started(j, n) }
        /compass: migration of job [0-9]+: requeued/ { j = $0; sub(/.*migration of job /, "", j); sub(/:.*/, "", j)
            pend[j] = 1; requeuedat[j] = NR; m++; if (!(j in seen)) { seen[j] = 1; mj++ }
            if (index($0, "; target ")) { t = $0; sub(/.*; target /, "", t); sub(/ .*/, "", t); target[j] = hosts(t) } }
        /compass: job [0-9]+ waits for node\(s\) / { j = $0; sub(/.*compass: job /, "", j); sub(/ .*/, "", j)
            n = $0; sub(/.*waits for node\(s\) /, "", n); sub(/:.*/, "", n); if (!(j in kept)) keptat[j] = NR
            kept[j] = hosts(n); if (!(j in keptseen)) { keptseen[j] = 1; kj++ } }
        /_job_complete: JobId=[0-9]+ done|of pending JobId=[0-9]+|REQUEST_KILL_JOB JobId=[0-9]+|deadline_ok: JobId=[0-9]+/ { j = $0; sub(/.*JobId=/, "", j); sub(/[^0-9].*/, "", j); delete kept[j] }
        END { c = 0; for (j in pend) c++
              printf "%d migrations of %d jobs: %d restarted on other nodes, %d on the same nodes, %d not restarted when the run stopped", m, mj, moved, same, c
              if (ontarget + offtarget > 0) printf "; of those restarted with a logged target, %d on it, %d elsewhere (a hold released)", ontarget, offtarget
              printf "; %d requeued while a node they restarted on was kept for a waiting job (%d jobs had nodes kept)", onkept, kj }
    ' "$1"
}
# The driver's jobs: how they ended (last _job_complete line of each).
load_outcomes() { # lab
    awk '
        FNR == NR { if ($1 == "job") ids[$2] = 1; next }
        /_job_complete: JobId=[0-9]+ (WEXITSTATUS|WTERMSIG) / { j = $0; sub(/.*JobId=/, "", j); sub(/ .*/, "", j)
            if (j in ids) end[j] = $(NF-1) " " $NF }
        END { n = 0; ok = 0; bad = 0; for (j in ids) { n++; if (!(j in end)) continue
                  if (end[j] == "WEXITSTATUS 0") ok++; else bad++ }
              printf "%d submitted, %d ended with exit 0, %d ended otherwise, %d not ended when the run stopped", n, ok, bad, n - ok - bad }
    ' "$OUT/$1/load.log" "$OUT/$1/lab/log/slurmctld.log"
}
MOVES=n/a
ENGINE=n/a
if has compass "${LAB_LIST[@]}"; then
    MOVES=$(migration_moves "$OUT/compass/lab/log/slurmctld.log")
    # Jobs the engine could not record (`adopt_foreign job N: ... would put
    # 10 GPUs on a node of 8`), and migrations whose target Slurm gave to
    # another job (their pins dropped).
    ENGINE="$(grep -ac 'compass: adopt' "$OUT/compass/lab/log/slurmctld.log" || true) jobs the engine could not record (\"compass: adopt...\" errors), $(grep -ac 'engine held room for migrating job' "$OUT/compass/lab/log/slurmctld.log" || true) starts on a migration's target that dropped its pin"
fi
for l in "${LAB_LIST[@]}"; do
    [ -f "$OUT/$l/load.log" ] || continue
    LOAD_JOBS="$LOAD_JOBS
- $l: $(load_outcomes "$l")"
done
T_END=$(date +%s)

# ---------------------------------------------------------------- report
final() { # last outcome per lab and test: "name<TAB>compass<TAB>stock"
    awk -F'\t' '{ last[$1 SUBSEP $3] = $4; note[$1 SUBSEP $3] = $6; names[$3] = 1 }
        END { for (n in names) printf "%s\t%s\t%s\t%s\t%s\n", n,
                (("compass" SUBSEP n) in last) ? last["compass" SUBSEP n] : "-",
                (("stock" SUBSEP n) in last) ? last["stock" SUBSEP n] : "-",
                note["compass" SUBSEP n], note["stock" SUBSEP n] }' "$RESULTS" | sort -V
}
SUMMARY=$OUT/summary.md
{
    echo "### Outcomes per lab"
    echo
    echo "| lab | suite | ran | pass | fail | skip | timeout | error |"
    echo "|---|---|---|---|---|---|---|---|"
    for l in "${LAB_LIST[@]}"; do
        for s in "${SUITE_LIST[@]}"; do
            awk -F'\t' -v l="$l" -v s="$s" '
                $1 == l && $2 == s && $6 !~ /^retry / { n++; c[$4]++ }
                END { printf "| %s | %s | %d | %d | %d | %d | %d | %d |\n", l, s, n,
                      c["PASS"], c["FAIL"], c["SKIP"], c["TIMEOUT"], c["ERROR"] }' "$RESULTS"
        done
    done
    echo
    echo "(first attempt of each test; a python file counts one row per test function)"
    echo
    if has compass "${LAB_LIST[@]}" && has stock "${LAB_LIST[@]}"; then
        echo "### Differences (last attempt)"
        echo
        diffs=$(final | awk -F'\t' '$2 != $3')
        if [ -z "$diffs" ]; then
            echo "none: every test has the same outcome on both labs"
        else
            echo "| test | compass | stock | compass says | stock says |"
            echo "|---|---|---|---|---|"
            while IFS=$'\t' read -r n c s nc ns; do
                echo "| $n | $c | $s | ${nc//|//} | ${ns//|//} |"
            done <<<"$diffs"
        fi
        echo
        if [ "${#RETRIED[@]}" -gt 0 ]; then
            echo "Re-run because they passed on stock and not under compass: ${RETRIED[*]}"
            echo
        fi
        mapfile -t REG < <(regressions)
        if [ "${#REG[@]}" -eq 0 ]; then
            echo "**Regressions (pass on stock, fail under compass): none.**"
        else
            echo "**Regressions (pass on stock, fail under compass, in the same attempt): ${#REG[@]}**"
            echo
            for r in "${REG[@]}"; do
                IFS=$'\t' read -r n kind <<<"$r"
                case $kind in
                confirmed) echo "- $n: confirmed (also in the last attempt)" ;;
                *) echo "- $n: intermittent (no regression on the last attempt: it passed under compass or failed on stock too; it still counts: read its logs)" ;;
                esac
            done
        fi
        echo
    fi
    echo "Migrations on the compass lab during the run: $MIGR_LOG requeues logged by the plugin"
    echo "(\"migration of job N: requeued\" in slurmctld.log), migrations_done=$MIGR_STATE in its state file."
    echo "Where the migrated jobs started again: $MOVES."
    echo "Engine against Slurm: $ENGINE."
    echo
    if [ -n "$LOAD_JOBS" ]; then
        echo "Load driver (--resumable GPU jobs) per lab:$LOAD_JOBS"
        echo
    fi
    echo "Wall time: $(((T_END - T_START) / 60)) min."
} >"$SUMMARY"
echo
cat "$SUMMARY"
echo
log "per-test logs: $OUT/<lab>/logs/, all rows: $RESULTS, this summary: $SUMMARY"
mapfile -t REG < <(regressions)
if [ "${#REG[@]}" -gt 0 ]; then exit 1; fi
exit 0
