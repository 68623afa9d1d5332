#!/usr/bin/env bash
# bench/ratelimit.sh — the cost of a rate-limit decision: examples/hello /plaintext with no
# limiter, with the in-memory limiter and with the Redis one (FLARE_RATE_LIMIT=1000000000/s:
# every request is decided and allowed), in the same run, alternating fresh servers, server
# pinned to one core; wrk and a private redis-server share the other.
# Figures per mode:
#   req/s, server CPU µs per request   wrk -t1, CONNECTIONS keep-alive connections, every
#                        response checked (bench/check.lua); CPU = the server's utime+stime over
#                        the run / requests answered; the median of ROUNDS rounds
#   Redis CPU µs per request           the redis-server process's utime+stime, the same way
#   instructions per request           valgrind --tool=callgrind on the server, one connection,
#                        bench/reqclient, one request at a time (Redis's own work not included)
# A Redis round is refused unless /metrics shows every decision made by Redis (no error).
#
# usage (from the repository root):
#   bash bench/ratelimit.sh                    # 5 s × 3 rounds per mode + callgrind
#   DURATION=3 ROUNDS=3 bash bench/ratelimit.sh
#
# environment: DURATION=5 ROUNDS=3 CONNECTIONS=64 REQUESTS=5000 WARMUP_REQUESTS=1000
#   WRK=0 (callgrind only, to check a change quickly)
#   SERVER_CPU=0 CLIENT_CPU=1 RESULTS_DIR=... (default bench/results/ratelimit-<timestamp>/)
#   BUILD_DIR (default build-bench: a Release build of hello and the bench helpers only)
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DURATION=${DURATION:-5}
ROUNDS=${ROUNDS:-3}
CONNECTIONS=${CONNECTIONS:-64}
REQUESTS=${REQUESTS:-5000}
WARMUP_REQUESTS=${WARMUP_REQUESTS:-1000}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
MODES=${MODES:-none local redis}
WRK=${WRK:-1}
RATE=1000000000/s

for v in DURATION ROUNDS CONNECTIONS REQUESTS WARMUP_REQUESTS; do
    [[ ${!v} =~ ^[0-9]+$ && ${!v} -gt 0 ]] || die "$v must be a positive integer"
done

bench_init
ensure_tools wrk taskset valgrind callgrind_control curl cmake cc redis-server
raise_nofile 65536
log "building hello and the bench helpers (Release) into ${BUILD_DIR#"$BENCH_ROOT"/}/"
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DFLARE_TESTS=OFF -DFLARE_WERROR=OFF \
    -DFLARE_LTO=ON -DFLARE_FRAME_POINTERS=OFF -DFLARE_SANITIZE= -DFLARE_FUZZ=OFF \
    -DFLARE_EXAMPLES=ON >"$BENCH_TMP/build.log" 2>&1 &&
    cmake --build "$BUILD_DIR" -j2 --target hello reqclient >>"$BENCH_TMP/build.log" 2>&1 ||
    { tail -n 20 "$BENCH_TMP/build.log" >&2; die "the build failed"; }
[[ -n ${RESULTS_DIR:-} ]] || RESULTS_DIR=$BENCH_ROOT/bench/results/ratelimit-$(date +%Y%m%d-%H%M%S)
OUT=$(results_dir)
log "results in ${OUT#"$BENCH_ROOT"/}/"

# a private Redis (no persistence) on the client's core
REDIS_PORT=$(free_ports 1)
mkdir -p "$BENCH_TMP/redis"
taskset -c "$CLIENT_CPU" redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' \
    --appendonly no --dir "$BENCH_TMP/redis" --loglevel warning >"$BENCH_TMP/redis/log" 2>&1 &
REDIS_PID=$!
BENCH_PIDS+=("$REDIS_PID")
for _ in $(seq 1 100); do
    [[ $(redis-cli -p "$REDIS_PORT" ping 2>/dev/null) == PONG ]] && break
    sleep 0.1
done
[[ $(redis-cli -p "$REDIS_PORT" ping 2>/dev/null) == PONG ]] || die "redis-server did not start"

# the wrapper that puts MODE's settings in the server's environment
mode_env() {
    case $1 in
    none) MODE_ENV=(env) ;;
    local) MODE_ENV=(env "FLARE_RATE_LIMIT=$RATE") ;;
    # a timeout far above a decision's time: what is measured is the cost, and a decision that
    # timed out (fail open) would cost less (at the 250 ms default, 44 of 18,000 did once, at a
    # load average of 9 on 2 cores); the warning says why, in the server's log
    redis) MODE_ENV=(env "FLARE_RATE_LIMIT=$RATE" "FLARE_RATE_LIMIT_REDIS=redis://127.0.0.1:$REDIS_PORT"
        FLARE_RATE_LIMIT_TIMEOUT=2s FLARE_LOG_LEVEL=warn) ;;
    esac
}

# every decision of a Redis round was Redis's: allowed > 0, error 0
check_decisions() {
    local port=$1 text allowed errors
    text=$(curl -fsS "http://127.0.0.1:$port/metrics") || die "no /metrics"
    allowed=$(awk '/^flare_ratelimit_decisions_total\{.*result="allowed"\}/ { print $2 }' <<<"$text")
    errors=$(awk '/^flare_ratelimit_decisions_total\{.*result="error"\}/ { print $2 }' <<<"$text")
    [[ ${allowed:-0} -gt 0 && ${errors:-1} == 0 ]] || {
        show_server_logs "$SERVER_DIR"
        die "Redis decisions: allowed=${allowed:-none} error=${errors:-none}"
    }
}

declare -A CPU RCPU RPS IR
echo "mode,round,requests,rps,cpu_us,us_per_request,redis_cpu_us,redis_us_per_request" >"$OUT/runs.csv"

wrk_round() {
    local mode=$1 round=$2 port pid cpu0 cpu1 r0 r1 n rps raw bad
    port=$(free_ports 1)
    mode_env "$mode"
    start_server flare "$port" "${MODE_ENV[@]}" taskset -c "$SERVER_CPU"
    pid=$SERVER_PID
    wait_ready flare "$pid" "$port" 30 || { stop_server "$pid"; die "hello did not start"; }
    taskset -c "$CLIENT_CPU" wrk -t1 -c"$CONNECTIONS" -d1s "http://127.0.0.1:$port/plaintext" >/dev/null
    raw=$OUT/wrk-$mode-r$round.txt
    cpu0=$(cpu_us "$pid")
    r0=$(cpu_us "$REDIS_PID")
    taskset -c "$CLIENT_CPU" wrk -t1 -c"$CONNECTIONS" "-d${DURATION}s" --timeout 5s \
        -s "$BENCH_ROOT/bench/check.lua" "http://127.0.0.1:$port/plaintext" -- depth=1 \
        "expect=$BODY" >"$raw" 2>&1
    cpu1=$(cpu_us "$pid")
    r1=$(cpu_us "$REDIS_PID")
    [[ $mode != redis ]] || check_decisions "$port"
    n=$(awk '/ requests in / { print $1; exit }' "$raw")
    rps=$(awk '/^Requests\/sec:/ { print $2; exit }' "$raw")
    bad=$(awk '/^CHECK responses=/ { sub(/bad=/, "", $3); print $3; exit }' "$raw")
    stop_server "$pid"
    [[ -n $n && $n -gt 0 && ${bad:-1} == 0 ]] || die "wrk run $mode/$round failed (see $raw)"
    local per rper
    per=$(awk -v c=$((cpu1 - cpu0)) -v n="$n" 'BEGIN { printf "%.3f", c / n }')
    rper=$(awk -v c=$((r1 - r0)) -v n="$n" 'BEGIN { printf "%.3f", c / n }')
    echo "$mode,$round,$n,$rps,$((cpu1 - cpu0)),$per,$((r1 - r0)),$rper" >>"$OUT/runs.csv"
    log "$mode round $round: $rps req/s, $per µs server CPU/request, $rper µs Redis CPU/request"
}

median() { # column $2 of mode $1 in runs.csv
    awk -F, -v m="$1" -v c="$2" '$1 == m { print $c }' "$OUT/runs.csv" | sort -n |
        awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

log "== wrk ($CONNECTIONS connections, ${DURATION}s × $ROUNDS rounds per mode, alternating)"
[[ $WRK == 1 ]] || ROUNDS=0
for r in $(seq 1 "$ROUNDS"); do
    for m in $MODES; do
        wrk_round "$m" "$r"
    done
done
for m in $MODES; do
    [[ $WRK == 1 ]] || break
    RPS[$m]=$(median "$m" 4)
    CPU[$m]=$(median "$m" 6)
    RCPU[$m]=$(median "$m" 8)
done

callgrind_mode() {
    local mode=$1 port pid dir dump ir
    port=$(free_ports 1)
    mode_env "$mode"
    start_server flare "$port" "${MODE_ENV[@]}" valgrind --tool=callgrind \
        --dump-instr=no --dump-line=no "--callgrind-out-file=$BENCH_TMP/flare-$port/callgrind.out"
    pid=$SERVER_PID dir=$SERVER_DIR
    wait_ready flare "$pid" "$port" 180 || { stop_server "$pid"; die "hello under callgrind"; }
    "$BENCH_BIN/reqclient" --connect "127.0.0.1:$port" --requests "$WARMUP_REQUESTS" \
        --path /plaintext --expect "$BODY" --gap-us 1000 --timeout 120 --quiet
    callgrind_control -z "$pid" >>"$dir/callgrind_control.log" 2>&1
    "$BENCH_BIN/reqclient" --connect "127.0.0.1:$port" --requests "$REQUESTS" \
        --path /plaintext --expect "$BODY" --gap-us 1000 --timeout 120 --quiet
    callgrind_control -d "$pid" >>"$dir/callgrind_control.log" 2>&1
    dump=$dir/callgrind.out.1
    for _ in $(seq 1 100); do
        [[ -s $dump ]] && grep -q '^totals:' "$dump" && break
        sleep 0.1
    done
    ir=$(awk '/^summary:/ { print $2; exit }' "$dump")
    stop_server "$pid"
    cp "$dump" "$OUT/callgrind-$mode.out"
    IR[$mode]=$(awk -v a="$ir" -v n="$REQUESTS" 'BEGIN { printf "%.0f", a / n }')
    log "callgrind $mode: ${IR[$mode]} instructions per request"
}

log "== instructions per request (callgrind, one connection, one request at a time)"
for m in $MODES; do
    callgrind_mode "$m"
done

if [[ $WRK != 1 ]]; then
    for m in $MODES; do
        printf '%s: %s instructions per request\n' "$m" "${IR[$m]}"
    done | tee "$OUT/table.md"
    exit 0
fi
{
    echo "| /plaintext, hello --workers 1 | no limiter | in memory | in Redis | Redis / memory |"
    echo "|---|---|---|---|---|"
    awk -v a="${RPS[none]}" -v b="${RPS[local]}" -v c="${RPS[redis]}" 'BEGIN { printf "| req/s (wrk, median) | %.0f | %.0f | %.0f | %.2f |\n", a, b, c, c / b }'
    awk -v a="${CPU[none]}" -v b="${CPU[local]}" -v c="${CPU[redis]}" 'BEGIN { printf "| server CPU µs per request | %.2f | %.2f | %.2f | %.2f |\n", a, b, c, c / b }'
    awk -v c="${RCPU[redis]}" 'BEGIN { printf "| Redis CPU µs per request | | | %.2f | |\n", c }'
    awk -v a="${IR[none]}" -v b="${IR[local]}" -v c="${IR[redis]}" 'BEGIN { printf "| server instructions per request (callgrind) | %d | %d | %d | %.2f |\n", a, b, c, c / b }'
} | tee "$OUT/table.md"
