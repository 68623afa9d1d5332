#!/usr/bin/env bash
# bench/metrics.sh — the cost of counting: examples/hello /plaintext with metrics off
# (FLARE_METRICS=off: no /metrics, /healthz, /readyz, /status, no counting) and on (hello's
# default), in the same run, alternating, server pinned to one core and wrk to the other.
# Two figures per mode:
#   CPU µs per request   utime+stime of the server over a wrk run / requests answered
#                        (wrk -t1, CONNECTIONS keep-alive connections, every response checked
#                        by bench/check.lua), the median of ROUNDS rounds, and the on/off ratio
#   instructions/request valgrind --tool=callgrind, one connection, bench/reqclient, one
#                        request at a time (bench/guard.sh's keepalive case) and 16 pipelined
#
# usage (from the repository root):
#   bash bench/metrics.sh                   # 5 s × 5 rounds per mode + callgrind (~3 minutes)
#   DURATION=3 ROUNDS=3 bash bench/metrics.sh
#
# environment: DURATION=5 ROUNDS=5 CONNECTIONS=64 REQUESTS=10000 WARMUP_REQUESTS=2000
#   SERVER_CPU=0 CLIENT_CPU=1 RESULTS_DIR=... (default bench/results/metrics-<timestamp>/)
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DURATION=${DURATION:-5}
ROUNDS=${ROUNDS:-5}
CONNECTIONS=${CONNECTIONS:-64}
REQUESTS=${REQUESTS:-10000}
WARMUP_REQUESTS=${WARMUP_REQUESTS:-2000}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
MODES="off on"

for v in DURATION ROUNDS CONNECTIONS REQUESTS WARMUP_REQUESTS; do
    [[ ${!v} =~ ^[0-9]+$ && ${!v} -gt 0 ]] || die "$v must be a positive integer"
done

bench_init
ensure_tools wrk taskset valgrind callgrind_control curl cmake cc
raise_nofile 65536
build_bench
[[ $FLARE_BUILD_OK == 1 ]] || die "Flare does not build"
[[ -n ${RESULTS_DIR:-} ]] || RESULTS_DIR=$BENCH_ROOT/bench/results/metrics-$(date +%Y%m%d-%H%M%S)
OUT=$(results_dir)
log "results in ${OUT#"$BENCH_ROOT"/}/"

declare -A CPU IR
echo "mode,round,requests,cpu_us,us_per_request" >"$OUT/runs.csv"

# one wrk run against a fresh server in MODE -> appends to runs.csv, sets PER
wrk_round() {
    local mode=$1 round=$2 port pid cpu0 cpu1 n raw bad
    port=$(free_ports 1)
    start_server flare "$port" env "FLARE_METRICS=$mode" taskset -c "$SERVER_CPU"
    pid=$SERVER_PID
    wait_ready flare "$pid" "$port" 30 || { stop_server "$pid"; return 1; }
    if [[ $mode == on ]]; then
        local text
        text=$(curl -fsS "http://127.0.0.1:$port/metrics") || text=
        [[ $text == *$'\n'flare_http_requests_total* ]] ||
            { stop_server "$pid"; die "metrics on but /metrics does not answer"; }
    elif curl -fsS -o /dev/null "http://127.0.0.1:$port/metrics" 2>/dev/null; then
        stop_server "$pid"
        die "FLARE_METRICS=off but /metrics answers"
    fi
    taskset -c "$CLIENT_CPU" wrk -t1 -c"$CONNECTIONS" -d1s "http://127.0.0.1:$port/plaintext" >/dev/null
    raw=$OUT/wrk-$mode-r$round.txt
    cpu0=$(cpu_us "$pid")
    taskset -c "$CLIENT_CPU" wrk -t1 -c"$CONNECTIONS" "-d${DURATION}s" --timeout 5s \
        -s "$BENCH_ROOT/bench/check.lua" "http://127.0.0.1:$port/plaintext" -- depth=1 \
        "expect=$BODY" >"$raw" 2>&1
    cpu1=$(cpu_us "$pid")
    n=$(awk '/ requests in / { print $1; exit }' "$raw")
    bad=$(awk '/^CHECK responses=/ { sub(/bad=/, "", $3); print $3; exit }' "$raw")
    stop_server "$pid"
    [[ -n $n && $n -gt 0 && ${bad:-1} == 0 ]] || die "wrk run $mode/$round failed (see $raw)"
    PER=$(awk -v c=$((cpu1 - cpu0)) -v n="$n" 'BEGIN { printf "%.4f", c / n }')
    echo "$mode,$round,$n,$((cpu1 - cpu0)),$PER" >>"$OUT/runs.csv"
    log "$mode round $round: $n requests, $((cpu1 - cpu0)) µs CPU, $PER µs/request"
}

log "== CPU per request (wrk, $CONNECTIONS connections, ${DURATION}s × $ROUNDS rounds per mode)"
for r in $(seq 1 "$ROUNDS"); do
    for m in $MODES; do
        wrk_round "$m" "$r"
    done
done
for m in $MODES; do
    CPU[$m]=$(awk -F, -v m="$m" '$1 == m { print $5 }' "$OUT/runs.csv" | sort -n |
        awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
done

# instructions per request under callgrind, as bench/guard.sh measures them
callgrind_mode() {
    local mode=$1 depth=$2 port pid dir dump ir
    port=$(free_ports 1)
    start_server flare "$port" env "FLARE_METRICS=$mode" valgrind --tool=callgrind \
        --dump-instr=no --dump-line=no "--callgrind-out-file=$BENCH_TMP/flare-$port/callgrind.out"
    pid=$SERVER_PID dir=$SERVER_DIR
    wait_ready flare "$pid" "$port" 180 || { stop_server "$pid"; return 1; }
    "$BENCH_BIN/reqclient" --connect "127.0.0.1:$port" --requests "$WARMUP_REQUESTS" \
        --pipeline "$depth" --path /plaintext --expect "$BODY" --gap-us 1000 --timeout 120 --quiet
    callgrind_control -z "$pid" >>"$dir/callgrind_control.log" 2>&1
    "$BENCH_BIN/reqclient" --connect "127.0.0.1:$port" --requests "$REQUESTS" \
        --pipeline "$depth" --path /plaintext --expect "$BODY" --gap-us 1000 --timeout 120 --quiet
    callgrind_control -d "$pid" >>"$dir/callgrind_control.log" 2>&1
    dump=$dir/callgrind.out.1
    for _ in $(seq 1 100); do
        [[ -s $dump ]] && grep -q '^totals:' "$dump" && break
        sleep 0.1
    done
    ir=$(awk '/^summary:/ { print $2; exit }' "$dump")
    stop_server "$pid"
    cp "$dump" "$OUT/callgrind-$mode-d$depth.out"
    IR[$mode/$depth]=$(awk -v a="$ir" -v n="$REQUESTS" 'BEGIN { printf "%.0f", a / n }')
    log "callgrind $mode depth $depth: ${IR[$mode/$depth]} instructions per request"
}

log "== instructions per request (callgrind, one connection)"
for d in 1 16; do
    for m in $MODES; do
        callgrind_mode "$m" "$d"
    done
done

{
    echo "| /plaintext | metrics off | metrics on | on / off |"
    echo "|---|---|---|---|"
    awk -v a="${CPU[off]}" -v b="${CPU[on]}" 'BEGIN { printf "| CPU µs per request (wrk, median of rounds) | %.4f | %.4f | %.3f |\n", a, b, b / a }'
    for d in 1 16; do
        awk -v a="${IR[off/$d]}" -v b="${IR[on/$d]}" -v d="$d" 'BEGIN { printf "| instructions per request (callgrind, depth %d) | %d | %d | %.3f |\n", d, a, b, b / a }'
    done
} | tee "$OUT/table.md"
