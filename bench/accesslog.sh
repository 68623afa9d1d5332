#!/usr/bin/env bash
# bench/accesslog.sh — the access log's cost on GET /plaintext: the same hello twice in one
# run, without and with --access-log FILE (combined format; JSON with FORMAT=json), one worker
# each, pinned to one core, wrk pinned to the other, rounds alternating between the two. The
# figure is the server's CPU time per request (utime+stime of all its threads: the workers
# and the log's writer thread), and the ratio with/without. The target is <= 1.15.
#
# usage (from the repository root):
#   bash bench/accesslog.sh                     # 5 s x 5 rounds each
#   DURATION=3 ROUNDS=3 bash bench/accesslog.sh # a quicker look
#
# environment: DURATION=5 ROUNDS=5 CONNECTIONS=64 DEPTH=1 FORMAT=combined|json
#   CALLGRIND=1 REQUESTS=10000 WARMUP_REQUESTS=2000
#   SERVER_CPU=0 CLIENT_CPU=1  NICE=-10 (root only; 0 to disable)
#   RESULTS_DIR=... (default bench/results/accesslog-<timestamp>/)
#
# Every response is checked (bench/check.lua). After the run the access log must hold one
# line per request served (wrk's and the readiness checks'), or the script fails: the
# "with" figure is only worth quoting if no line was dropped.
#
# Then the stable counts (CALLGRIND=0 skips them): instructions per request under valgrind
# --tool=callgrind (all threads: the worker and the log's writer), bench/guard.sh's method
# (FLARE_METRICS=off, one connection, bench/reqclient, WARMUP_REQUESTS then exactly REQUESTS
# requests between callgrind_control -z and -d), without and with the access log (through
# FLARE_ACCESS_LOG), one request at a time and 16 pipelined.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DURATION=${DURATION:-5}
ROUNDS=${ROUNDS:-5}
CONNECTIONS=${CONNECTIONS:-64}
DEPTH=${DEPTH:-1}
FORMAT=${FORMAT:-combined}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
NICE=${NICE:--10}
CALLGRIND=${CALLGRIND:-1}
REQUESTS=${REQUESTS:-10000}
WARMUP_REQUESTS=${WARMUP_REQUESTS:-2000}
[[ $REQUESTS =~ ^[0-9]+$ && $REQUESTS -gt 0 ]] || die "REQUESTS must be a positive integer"
[[ $WARMUP_REQUESTS =~ ^[0-9]+$ && $WARMUP_REQUESTS -gt 0 ]] || die "WARMUP_REQUESTS must be a positive integer"
[[ $DURATION =~ ^[0-9]+$ && $DURATION -gt 0 ]] || die "DURATION must be a positive integer"
[[ $ROUNDS =~ ^[0-9]+$ && $ROUNDS -gt 0 ]] || die "ROUNDS must be a positive integer"
[[ $FORMAT == combined || $FORMAT == json ]] || die "FORMAT is combined or json"

bench_init
ensure_tools wrk taskset curl cmake cc
((CALLGRIND == 0)) || ensure_tools valgrind callgrind_control
raise_nofile 65536
build_bench
((FLARE_BUILD_OK)) || die "the Flare tree does not build: nothing to measure"

SRV_PIN=() CLI_PIN=()
if [[ $NICE != 0 && $(id -u) == 0 ]]; then
    SRV_PIN=(nice -n "$NICE")
    CLI_PIN=(nice -n "$NICE")
    boost_priority "$NICE"
fi
if (($(nproc) >= 2)); then
    SRV_PIN+=(taskset -c "$SERVER_CPU")
    CLI_PIN+=(taskset -c "$CLIENT_CPU")
else
    warn "fewer than 2 CPUs: no pinning"
fi

OUT=${RESULTS_DIR:-$BENCH_ROOT/bench/results/accesslog-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
ACCESS=$BENCH_TMP/access.log
read -r -a ports <<<"$(free_ports 2)"
declare -A PORT PID SERVED
PORT[off]=${ports[0]}
PORT[on]=${ports[1]}
for v in off on; do
    args=("$FLARE_HELLO" --listen "127.0.0.1:${PORT[$v]}" --workers 1)
    [[ $v == on ]] && args+=(--access-log "$ACCESS" --access-log-format "$FORMAT")
    "${SRV_PIN[@]}" "${args[@]}" >"$OUT/server-$v.log" 2>&1 </dev/null &
    PID[$v]=$!
    BENCH_PIDS+=("${PID[$v]}")
    SERVED[$v]=0
    ok=0
    for _ in $(seq 1 100); do
        if curl -s --max-time 2 "http://127.0.0.1:${PORT[$v]}/plaintext" | grep -qx "$BODY"; then
            ok=1
            break
        fi
        sleep 0.1
    done
    ((ok)) || die "hello ($v) did not answer on port ${PORT[$v]}: $(cat "$OUT/server-$v.log")"
    SERVED[$v]=1 # the readiness check above
done
{
    echo "date: $(date -Is)"
    echo "cpus: $(nproc); load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "DURATION=$DURATION ROUNDS=$ROUNDS CONNECTIONS=$CONNECTIONS DEPTH=$DEPTH FORMAT=$FORMAT"
    echo "server: ${SRV_PIN[*]:-no wrapper}; client: ${CLI_PIN[*]:-no wrapper}"
} >"$OUT/env.txt"

CSV=$OUT/runs.csv
echo "round,variant,requests,rps,cpu_us,cpu_us_per_req" >"$CSV"
for r in $(seq 1 "$ROUNDS"); do
    for v in off on; do
        raw=$OUT/$v-r$r.txt
        c0=$(cpu_us "${PID[$v]}")
        "${CLI_PIN[@]}" wrk -t1 "-c$CONNECTIONS" "-d${DURATION}s" --timeout 5s \
            -s "$BENCH_ROOT/bench/check.lua" "http://127.0.0.1:${PORT[$v]}/plaintext" -- \
            "depth=$DEPTH" "expect=$BODY" >"$raw" 2>&1 || die "wrk failed: $(cat "$raw")"
        sleep 0.3
        c1=$(cpu_us "${PID[$v]}")
        n=$(awk '/^CHECK responses=/ { sub(/responses=/, "", $2); print $2; exit }' "$raw")
        bad=$(awk '/^CHECK responses=/ { sub(/bad=/, "", $3); print $3; exit }' "$raw")
        rps=$(awk '/^Requests\/sec:/ { print $2; exit }' "$raw")
        [[ -n $n && $bad == 0 ]] || die "bad responses in $raw"
        SERVED[$v]=$((SERVED[$v] + n))
        per=$(awk -v c=$((c1 - c0)) -v n="$n" 'BEGIN { printf "%.3f", c / n }')
        echo "$r,$v,$n,$rps,$((c1 - c0)),$per" >>"$CSV"
        log "round $r $v: $n requests, $per CPU us/request"
    done
done
stop_server "${PID[on]}"
stop_server "${PID[off]}"
lines=$(wc -l <"$ACCESS")
# wrk may leave a few requests unanswered when it stops: the log holds what was served,
# which is at least what wrk counted
((lines >= SERVED[on])) || die "access log has $lines lines for ${SERVED[on]} responses"
((lines <= SERVED[on] + CONNECTIONS * DEPTH * ROUNDS)) ||
    die "access log has $lines lines for ${SERVED[on]} responses (too many)"

"$PY" - "$CSV" "$lines" <<'EOF' | tee "$OUT/table.md"
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
med = {v: statistics.median(float(r["cpu_us_per_req"]) for r in rows if r["variant"] == v)
       for v in ("off", "on")}
rps = {v: statistics.median(float(r["rps"]) for r in rows if r["variant"] == v)
       for v in ("off", "on")}
print("| /plaintext, 1 worker | CPU us/request (median) | requests/s (median) |")
print("|---|---|---|")
print("| access log off | %.3f | %.0f |" % (med["off"], rps["off"]))
print("| access log on (file) | %.3f | %.0f |" % (med["on"], rps["on"]))
print()
print("ratio on/off: %.3f (target <= 1.15); access log lines: %s" % (med["on"] / med["off"],
                                                                     sys.argv[2]))
EOF

# instructions per request under callgrind: MODE off|on, DEPTH -> IR[MODE/DEPTH]
declare -A IR
callgrind_mode() {
    local mode=$1 depth=$2 port pid dir dump ir
    local envs=(env FLARE_METRICS=off)
    [[ $mode == on ]] && envs+=("FLARE_ACCESS_LOG=$BENCH_TMP/access-cg.log" "FLARE_ACCESS_LOG_FORMAT=$FORMAT")
    port=$(free_ports 1)
    start_server flare "$port" "${envs[@]}" valgrind --tool=callgrind --dump-instr=no \
        --dump-line=no "--callgrind-out-file=$BENCH_TMP/flare-$port/callgrind.out"
    pid=$SERVER_PID dir=$SERVER_DIR
    wait_ready flare "$pid" "$port" 180 || { stop_server "$pid"; die "hello under callgrind did not start"; }
    "$BENCH_BIN/reqclient" --connect "127.0.0.1:$port" --requests "$WARMUP_REQUESTS" \
        --pipeline "$depth" --path /plaintext --expect "$BODY" --gap-us 1000 --timeout 120 --quiet ||
        die "reqclient failed (callgrind $mode)"
    callgrind_control -z "$pid" >>"$dir/callgrind_control.log" 2>&1
    "$BENCH_BIN/reqclient" --connect "127.0.0.1:$port" --requests "$REQUESTS" \
        --pipeline "$depth" --path /plaintext --expect "$BODY" --gap-us 1000 --timeout 120 --quiet ||
        die "reqclient failed (callgrind $mode)"
    callgrind_control -d "$pid" >>"$dir/callgrind_control.log" 2>&1
    dump=$dir/callgrind.out.1
    for _ in $(seq 1 100); do
        [[ -s $dump ]] && grep -q '^totals:' "$dump" && break
        sleep 0.1
    done
    ir=$(awk '/^summary:/ { print $2; exit }' "$dump")
    stop_server "$pid"
    [[ -n $ir ]] || die "no callgrind summary in $dump"
    cp "$dump" "$OUT/callgrind-$mode-d$depth.out"
    IR[$mode/$depth]=$(awk -v a="$ir" -v n="$REQUESTS" 'BEGIN { printf "%.0f", a / n }')
    log "callgrind access log $mode, depth $depth: ${IR[$mode/$depth]} instructions per request"
}
if ((CALLGRIND)); then
    for d in 1 16; do
        callgrind_mode off "$d"
        callgrind_mode on "$d"
    done
    {
        echo
        echo "| /plaintext, instructions per request (callgrind, all threads) | access log off | on | on / off |"
        echo "|---|---|---|---|"
        for d in 1 16; do
            awk -v a="${IR[off/$d]}" -v b="${IR[on/$d]}" -v d="$d" \
                'BEGIN { printf "| one connection, %d per write | %d | %d | %.3f |\n", d, a, b, b / a }'
        done
    } | tee -a "$OUT/table.md"
fi
log "results in ${OUT#"$BENCH_ROOT"/}/"
