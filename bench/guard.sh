#!/usr/bin/env bash
# bench/guard.sh — the performance regression guard (a CI step): Flare's stable counts against
# the figures recorded in bench/baseline.txt. Times are too noisy to gate on; counts are not.
#
# usage (from the repository root):
#   bash bench/guard.sh                     # measure, compare, exit 1 on a regression
#   UPDATE_BASELINE=1 bash bench/guard.sh   # measure and write bench/baseline.txt (after a
#                                           # deliberate change: commit it with the change)
#
# What it measures (bench/counts.sh's method, trimmed to Flare and what is worth gating on):
#   instructions per request  valgrind --tool=callgrind, user space; WARMUP_REQUESTS requests per
#                             case, counters zeroed (callgrind_control -z), exactly REQUESTS
#                             requests, dumped (-d); the dump's Ir / REQUESTS
#   heap allocations/request  valgrind memcheck's "total heap usage" of two fresh servers, after
#                             HEAP_BASE and after HEAP_BASE + HEAP_REQUESTS requests;
#                             (difference) / HEAP_REQUESTS
# hello runs with FLARE_METRICS=off: the library's default path, an app without metrics (what
# the baseline measured before hello served /metrics). METRICS=on runs it with FLARE_METRICS=on
# instead (hello's default: counting, /metrics) and compares against bench/baseline-metrics.txt,
# the same method and cases: what counting costs per request is the difference between the two
# (bench/metrics.sh adds CPU time under wrk). For these cases, each on ONE connection driven by bench/reqclient (exact request counts,
# every response checked to be 200 "Hello, World!"), with GAP_US between batches so the server
# always waits in epoll for the next one (timing-independent counts):
#   keepalive     GET /plaintext, one request at a time
#   pipelined     GET /plaintext, DEPTH (16) requests per write
#   mw-keepalive  GET /mw/plaintext (10 pass-through middlewares), one at a time
#   mw-pipelined  GET /mw/plaintext, DEPTH per write
#
# It fails (exit 1) when, for any case, instructions per request exceed the baseline by more
# than IR_MARGIN_PCT (5) percent, or allocations per request exceed the baseline by more than
# ALLOC_MARGIN (0.01, i.e. rounding), or a measurement fails. It builds Flare itself exactly
# as bench/run.sh and bench/counts.sh do (Release, LTO, gcc; into BUILD_DIR, default
# build-bench/), so its figures are comparable with theirs and with the baseline, and installs
# valgrind when missing. Takes about 1.5 minutes plus the build (15 s to 1 min).
#
# environment: REQUESTS=10000 WARMUP_REQUESTS=2000 HEAP_BASE=1000 HEAP_REQUESTS=5000 DEPTH=16
#   GAP_US=1000 IR_MARGIN_PCT=5 ALLOC_MARGIN=0.01 BASELINE=bench/baseline.txt
#   UPDATE_BASELINE=0 METRICS=off (on: bench/baseline-metrics.txt is the default BASELINE)
#   RESULTS_DIR=... (default bench/results/guard-<timestamp>/) KEEP_TMP=1
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

REQUESTS=${REQUESTS:-10000}
WARMUP_REQUESTS=${WARMUP_REQUESTS:-2000}
HEAP_BASE=${HEAP_BASE:-1000}
HEAP_REQUESTS=${HEAP_REQUESTS:-5000}
DEPTH=${DEPTH:-16}
GAP_US=${GAP_US:-1000}
IR_MARGIN_PCT=${IR_MARGIN_PCT:-5}
ALLOC_MARGIN=${ALLOC_MARGIN:-0.01}
METRICS=${METRICS:-off}
[[ $METRICS == off || $METRICS == on ]] || { echo "METRICS must be off or on" >&2; exit 1; }
if [[ $METRICS == on ]]; then
    BASELINE=${BASELINE:-$BENCH_ROOT/bench/baseline-metrics.txt}
else
    BASELINE=${BASELINE:-$BENCH_ROOT/bench/baseline.txt}
fi
UPDATE_BASELINE=${UPDATE_BASELINE:-0}
CASES="keepalive pipelined mw-keepalive mw-pipelined"

for v in REQUESTS WARMUP_REQUESTS HEAP_BASE HEAP_REQUESTS DEPTH; do
    [[ ${!v} =~ ^[0-9]+$ && ${!v} -gt 0 ]] || die "$v must be a positive integer"
done
[[ $GAP_US =~ ^[0-9]+$ ]] || die "GAP_US must be an integer (microseconds)"

bench_init
ensure_tools valgrind callgrind_control curl cmake cc
raise_nofile 65536
T0=$SECONDS
build_bench
[[ $FLARE_BUILD_OK == 1 ]] || die "Flare does not build: nothing to guard (see the build log above)"
[[ -n ${RESULTS_DIR:-} ]] || RESULTS_DIR=$BENCH_ROOT/bench/results/guard-$(date +%Y%m%d-%H%M%S)
OUT=$(results_dir)
log "results in ${OUT#"$BENCH_ROOT"/}/ (build: $((SECONDS - T0)) s)"

RC=$BENCH_BIN/reqclient
declare -A NOW
MEASURE_FAILED=0

path_of() { [[ $1 == mw-* ]] && echo /mw/plaintext || echo /plaintext; }
depth_of() { [[ $1 == *pipelined ]] && echo "$DEPTH" || echo 1; }
client() { # PORT N CASE [extra]
    local port=$1 n=$2 c=$3
    shift 3
    "$RC" --connect "127.0.0.1:$port" --requests "$n" --pipeline "$(depth_of "$c")" \
        --path "$(path_of "$c")" --expect "$BODY" --gap-us "$GAP_US" --timeout 120 --quiet "$@"
}

# Instructions per request: one server under callgrind, every case in turn.
measure_instructions() {
    local port pid dir c n=0 dump ir
    port=$(free_ports 1)
    start_server flare "$port" env FLARE_METRICS=$METRICS valgrind --tool=callgrind --dump-instr=no --dump-line=no \
        "--callgrind-out-file=$BENCH_TMP/flare-$port/callgrind.out"
    pid=$SERVER_PID dir=$SERVER_DIR
    wait_ready flare "$pid" "$port" 180 || { stop_server "$pid"; return 1; }
    for c in $CASES; do
        client "$port" "$WARMUP_REQUESTS" "$c" || { stop_server "$pid"; return 1; }
    done
    for c in $CASES; do
        callgrind_control -z "$pid" >>"$dir/callgrind_control.log" 2>&1 || { stop_server "$pid"; return 1; }
        client "$port" "$REQUESTS" "$c" || { stop_server "$pid"; return 1; }
        callgrind_control -d "$pid" >>"$dir/callgrind_control.log" 2>&1 || { stop_server "$pid"; return 1; }
        n=$((n + 1))
        dump=$dir/callgrind.out.$n
        for _ in $(seq 1 100); do
            [[ -s $dump ]] && grep -q '^totals:' "$dump" && break
            sleep 0.1
        done
        ir=$(awk '/^summary:/ { print $2; exit }' "$dump" 2>/dev/null)
        [[ -n $ir ]] || { stop_server "$pid"; echo "no summary in $dump" >&2; return 1; }
        cp "$dump" "$OUT/callgrind-$c.out"
        NOW[instructions/$c]=$(awk -v a="$ir" -v n="$REQUESTS" 'BEGIN { printf "%.0f", a / n }')
        log "instructions $c: $ir Ir / $REQUESTS requests = ${NOW[instructions/$c]} per request"
    done
    stop_server "$pid"
}

# total heap allocations of a fresh server under memcheck after N requests of CASE -> ALLOCS
heap_run() {
    local c=$1 n=$2 port pid vlog ok=1
    port=$(free_ports 1)
    vlog=$OUT/memcheck-$c-$n.log
    start_server flare "$port" env FLARE_METRICS=$METRICS valgrind --tool=memcheck --leak-check=no "--log-file=$vlog"
    pid=$SERVER_PID
    wait_ready flare "$pid" "$port" 180 || { stop_server "$pid"; return 1; }
    client "$port" "$n" "$c" || ok=0
    stop_server "$pid"
    ((ok)) || return 1
    ALLOCS=$(grep -m1 'total heap usage:' "$vlog" | tr -d , |
        awk '{ for (i = 1; i <= NF; i++) if ($i == "allocs") print $(i - 1) }')
    [[ -n $ALLOCS ]] || { echo "no heap summary in $vlog" >&2; return 1; }
    local errors
    errors=$(grep -m1 'ERROR SUMMARY:' "$vlog" | awk '{ for (i = 1; i <= NF; i++) if ($i == "SUMMARY:") print $(i + 1) }')
    [[ ${errors:-0} == 0 ]] || warn "memcheck reports $errors error(s) ($c): see ${vlog#"$BENCH_ROOT"/}"
}

measure_allocations() {
    local c a1 a2
    for c in $CASES; do
        heap_run "$c" "$HEAP_BASE" || return 1
        a1=$ALLOCS
        heap_run "$c" "$((HEAP_BASE + HEAP_REQUESTS))" || return 1
        a2=$ALLOCS
        NOW[allocations/$c]=$(awk -v a="$a1" -v b="$a2" -v n="$HEAP_REQUESTS" 'BEGIN { printf "%.3f", (b - a) / n }')
        log "allocations $c: $a1 after $HEAP_BASE requests, $a2 after $((HEAP_BASE + HEAP_REQUESTS)) = ${NOW[allocations/$c]} per request"
    done
}

log "== instructions per request (callgrind)"
measure_instructions || {
    MEASURE_FAILED=1
    printf '\n!!!!!!!! FAILED: the callgrind measurement\n\n' >&2
}
log "== heap allocations per request (memcheck)"
measure_allocations || {
    MEASURE_FAILED=1
    printf '\n!!!!!!!! FAILED: the memcheck measurement\n\n' >&2
}

if [[ $UPDATE_BASELINE == 1 ]]; then
    ((MEASURE_FAILED == 0)) || die "a measurement failed: baseline not written"
    {
        echo "# ${BASELINE#"$BENCH_ROOT"/}: the figures bench/guard.sh (a CI step) compares against."
        echo "# Flare examples/hello, built by bench/lib.sh's build_bench (Release, LTO, Debian 12 gcc),"
        echo "# FLARE_METRICS=$METRICS, one connection, bench/reqclient, $GAP_US µs between batches; see bench/guard.sh."
        echo "# Written by UPDATE_BASELINE=1 bash bench/guard.sh on $(date '+%Y-%m-%d') ($(gcc --version | head -1))."
        echo "# The guard fails when instructions grow by more than ${IR_MARGIN_PCT}% or allocations by more than $ALLOC_MARGIN."
        echo "# metric value"
        for c in $CASES; do echo "instructions/$c ${NOW[instructions/$c]}"; done
        for c in $CASES; do echo "allocations/$c ${NOW[allocations/$c]}"; done
    } >"$BASELINE"
    log "baseline written: ${BASELINE#"$BENCH_ROOT"/}"
    cat "$BASELINE"
    exit 0
fi

[[ -r $BASELINE ]] || die "no baseline at $BASELINE (UPDATE_BASELINE=1 bash bench/guard.sh writes one)"
declare -A BASE
while read -r key val _; do
    [[ -z $key || $key == \#* ]] && continue
    BASE[$key]=$val
done <"$BASELINE"

REGRESSIONS=0
IMPROVED=0
{
    echo "## Performance regression guard — $(date '+%Y-%m-%d %H:%M')"
    echo
    echo "Flare /plaintext (and /mw/plaintext) on one connection, FLARE_METRICS=$METRICS; instructions: callgrind, $REQUESTS requests;"
    echo "allocations: memcheck, ($((HEAP_BASE + HEAP_REQUESTS)) − $HEAP_BASE) / $HEAP_REQUESTS requests. Baseline: ${BASELINE#"$BENCH_ROOT"/}."
    echo
    printf '| %-26s | %9s | %9s | %8s | %9s | %-10s |\n' metric baseline now change limit verdict
    printf '|%s|%s|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..28})" "$(printf -- '-%.0s' {1..10})-" \
        "$(printf -- '-%.0s' {1..10})-" "$(printf -- '-%.0s' {1..9})-" "$(printf -- '-%.0s' {1..10})-" \
        "$(printf -- '-%.0s' {1..12})"
    for kind in instructions allocations; do
        for c in $CASES; do
            key=$kind/$c
            base=${BASE[$key]:-}
            now=${NOW[$key]:-}
            if [[ -z $now ]]; then
                verdict=FAILED change=– limit=–
                REGRESSIONS=$((REGRESSIONS + 1))
            elif [[ -z $base ]]; then
                verdict="no baseline" change=– limit=–
            else
                read -r change limit verdict < <(awk -v k="$kind" -v b="$base" -v n="$now" \
                    -v m="$IR_MARGIN_PCT" -v am="$ALLOC_MARGIN" 'BEGIN {
                    if (k == "instructions") {
                        lim = b * (1 + m / 100)
                        ch = b > 0 ? sprintf("%+.1f%%", 100 * (n - b) / b) : "–"
                        v = n > lim ? "REGRESSION" : (n < b * (1 - m / 100) ? "improved" : "ok")
                        printf "%s %.0f %s\n", ch, lim, v
                    } else {
                        lim = b + am
                        ch = sprintf("%+.3f", n - b)
                        v = n > lim + 1e-9 ? "REGRESSION" : "ok"
                        printf "%s %.3f %s\n", ch, lim, v
                    } }')
                [[ $verdict == REGRESSION ]] && REGRESSIONS=$((REGRESSIONS + 1))
                [[ $verdict == improved ]] && IMPROVED=$((IMPROVED + 1))
            fi
            printf '| %-26s | %9s | %9s | %8s | %9s | %-10s |\n' "$key" "${base:-–}" "${now:-–}" "$change" "$limit" "$verdict"
        done
    done
    echo
} >"$OUT/guard.md"
echo
cat "$OUT/guard.md"
log "total: $((SECONDS - T0)) s; results: ${OUT#"$BENCH_ROOT"/}/ (guard.md, callgrind-*.out: callgrind_annotate shows where)"

if ((REGRESSIONS)) || ((MEASURE_FAILED)); then
    printf '\n!!!!!!!! performance regression guard FAILED: %d figure(s) over the limit or not measured.\n' "$REGRESSIONS" >&2
    printf 'Where the instructions go: callgrind_annotate %s/callgrind-keepalive.out\n' "${OUT#"$BENCH_ROOT"/}" >&2
    printf 'If the growth is deliberate, update the baseline in the same change: UPDATE_BASELINE=1 bash bench/guard.sh\n' >&2
    exit 1
fi
if ((IMPROVED)); then
    printf '\nFewer instructions than the baseline by more than %s%%: consider UPDATE_BASELINE=1 bash bench/guard.sh\n' "$IR_MARGIN_PCT"
fi
echo "performance regression guard: all figures within their limits"
