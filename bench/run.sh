#!/usr/bin/env bash
# bench/run.sh — throughput and CPU per request for GET /plaintext: Flare side by side with
# the null server (the kernel-path ceiling), nginx, h2o and lighttpd.
#
# usage (from the repository root):
#   bash bench/run.sh
#   DURATION=3 ROUNDS=1 bash bench/run.sh             # quick look
#   SERVERS="flare null nginx" bash bench/run.sh       # a subset
#
# environment:
#   DURATION=10       seconds per wrk run
#   ROUNDS=3          rounds; each round runs every scenario on every server, interleaved
#                     (flare null nginx h2o lighttpd flare null ...) so drift hits all alike
#   WARMUP=2          seconds of unrecorded wrk load per server and scenario before round 1
#   CONNECTIONS=64    wrk connections
#   DEPTH=16          requests per write in the pipelined scenario (bench/pipeline.lua)
#   SERVERS="flare null nginx h2o lighttpd"
#   SCENARIOS="keepalive pipelined"
#   SERVER_CPU=0 CLIENT_CPU=1   pinning (taskset); servers on one core, wrk -t1 on the other
#   NICE=-10          nice level of the servers and wrk, and of this session's scheduler
#                     autogroup (root only; 0 to disable), so that other work on a shared
#                     machine yields to the measurement
#   RESULTS_DIR=...   default bench/results/<timestamp>/
#   KEEP_TMP=1        keep the scratch dir (server configs and logs) for inspection
#
# What it does: installs missing tools (apt), builds Flare in Release into build-bench/
# (examples/hello and bench/null_server), starts every server once on its own free port on
# 127.0.0.1 pinned to SERVER_CPU, checks GET /plaintext returns 200 "Hello, World!", then
# runs wrk pinned to CLIENT_CPU. For each run it records wrk's request count and the
# server's CPU time (utime+stime of all its threads from /proc/PID/stat, before and after
# the run) and derives req/s, server CPU µs per request and the share of the core used.
#
# Output: bench/results/<timestamp>/runs.csv (one row per run), wrk-*.txt (raw wrk
# output), env.txt, and table.md, which is also printed: per scenario and server the median
# req/s (min–max), median CPU µs/request and its ratio to the null server's.
#
# A run with socket errors, non-2xx responses, zero requests or a dead server is marked
# FAILED (loudly) and the script exits 1 at the end. A server whose binary is missing (e.g.
# Flare while it does not build) is skipped with a warning.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DURATION=${DURATION:-10}
ROUNDS=${ROUNDS:-3}
WARMUP=${WARMUP:-2}
CONNECTIONS=${CONNECTIONS:-64}
DEPTH=${DEPTH:-16}
SERVERS=${SERVERS:-$ALL_SERVERS}
SCENARIOS=${SCENARIOS:-keepalive pipelined}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
NICE=${NICE:--10}

[[ $DURATION =~ ^[0-9]+$ && $DURATION -gt 0 ]] || die "DURATION must be a positive integer (seconds)"
[[ $ROUNDS =~ ^[0-9]+$ && $ROUNDS -gt 0 ]] || die "ROUNDS must be a positive integer"
[[ $WARMUP =~ ^[0-9]+$ ]] || die "WARMUP must be an integer (seconds)"
for sc in $SCENARIOS; do
    [[ $sc == keepalive || $sc == pipelined ]] || die "unknown scenario '$sc' (keepalive, pipelined)"
done

bench_init
ensure_tools wrk nginx h2o lighttpd valgrind strace ps taskset curl cmake cc
raise_nofile 65536
build_bench

# shellcheck disable=SC2086 # SERVERS is a space-separated list
read -r -a servers <<<"$(filter_servers $SERVERS)"
((${#servers[@]})) || die "no server to benchmark"

SRV_PIN=() CLI_PIN=()
if [[ $NICE != 0 ]]; then
    if [[ $(id -u) == 0 ]]; then
        SRV_PIN=(nice -n "$NICE")
        CLI_PIN=(nice -n "$NICE")
        boost_priority "$NICE"
    else
        warn "not root: NICE=$NICE ignored"
        NICE=0
    fi
fi
if (($(nproc) >= 2)); then
    SRV_PIN+=(taskset -c "$SERVER_CPU")
    CLI_PIN+=(taskset -c "$CLIENT_CPU")
else
    warn "fewer than 2 CPUs: no pinning, server and wrk share the machine (ratios still hold, roughly)"
    SERVER_CPU=0 CLIENT_CPU=0
fi

# busy jiffies and total jiffies of one CPU from /proc/stat: "busy total"
cpu_jiffies() {
    awk -v c="cpu$1" '$1 == c { t = 0; for (i = 2; i <= 9 && i <= NF; i++) t += $i; print t - $5 - $6, t; exit }' /proc/stat
}

OUT=$(results_dir)
CSV=$OUT/runs.csv
echo "timestamp,round,scenario,server,connections,depth,duration_s,requests,req_per_s,cpu_us,cpu_us_per_req,server_cpu_pct,server_core_busy_pct,client_core_busy_pct,latency_p50,latency_p99,socket_errors,non_2xx,status" >"$CSV"
{
    echo "date: $(date -Is)"
    echo "kernel: $(uname -r)"
    echo "cpus: $(nproc) ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'))"
    echo "DURATION=$DURATION ROUNDS=$ROUNDS WARMUP=$WARMUP CONNECTIONS=$CONNECTIONS DEPTH=$DEPTH"
    echo "server: ${SRV_PIN[*]:-no wrapper}; wrk: ${CLI_PIN[*]:-no wrapper}"
    echo "wrk: $(wrk -v 2>&1 | head -1)"
    echo "nginx: $(nginx -v 2>&1)"
    echo "h2o: $(h2o --version 2>&1 | head -1)"
    echo "lighttpd: $(lighttpd -v 2>&1 | head -1)"
    echo "servers: ${servers[*]}"
} >"$OUT/env.txt"
log "results in ${OUT#"$BENCH_ROOT"/}/"

declare -A PORT PID DEAD
read -r -a ports <<<"$(free_ports ${#servers[@]})"
i=0
for s in "${servers[@]}"; do
    PORT[$s]=${ports[$i]}
    i=$((i + 1))
    start_server "$s" "${PORT[$s]}" "${SRV_PIN[@]}"
    PID[$s]=$SERVER_PID
    DEAD[$s]=0
    wait_ready "$s" "${PID[$s]}" "${PORT[$s]}" 20 || die "$s did not start"
    log "$s ready: pid ${PID[$s]}, http://127.0.0.1:${PORT[$s]}/plaintext"
done

# wrk_cmd SCENARIO SERVER DURATION -> WRK array
wrk_cmd() {
    local sc=$1 s=$2 d=$3 url="http://127.0.0.1:${PORT[$2]}/plaintext"
    WRK=("${CLI_PIN[@]}" wrk -t1 "-c$CONNECTIONS" "-d${d}s" --latency --timeout 5s)
    if [[ $sc == pipelined ]]; then
        WRK+=(-s "$BENCH_ROOT/bench/pipeline.lua" "$url" -- "$DEPTH")
    else
        WRK+=("$url")
    fi
}

FAILURES=0
fail_run() {
    FAILURES=$((FAILURES + 1))
    printf '\n!!!!!!!! FAILED: %s\n\n' "$*" >&2
}

if ((WARMUP > 0)); then
    for sc in $SCENARIOS; do
        for s in "${servers[@]}"; do
            log "warm-up: $sc $s (${WARMUP}s)"
            wrk_cmd "$sc" "$s" "$WARMUP"
            "${WRK[@]}" >"$OUT/wrk-warmup-$sc-$s.txt" 2>&1 || warn "warm-up of $s ($sc) failed, see wrk-warmup-$sc-$s.txt"
        done
    done
fi

for round in $(seq 1 "$ROUNDS"); do
    for sc in $SCENARIOS; do
        depth=1
        [[ $sc == pipelined ]] && depth=$DEPTH
        for s in "${servers[@]}"; do
            [[ ${DEAD[$s]} == 1 ]] && continue
            pid=${PID[$s]}
            raw=$OUT/wrk-$sc-$s-r$round.txt
            if ! kill -0 "$pid" 2>/dev/null; then
                DEAD[$s]=1
                show_server_logs "$BENCH_TMP/$s-${PORT[$s]}"
                fail_run "$s died (round $round, before $sc)"
                continue
            fi
            if ! check_plaintext "${PORT[$s]}"; then
                fail_run "$s: GET /plaintext check failed before round $round $sc (${CHECK_ERR:-no answer})"
            fi
            wrk_cmd "$sc" "$s" "$DURATION"
            read -r sb0 st0 < <(cpu_jiffies "$SERVER_CPU")
            read -r cb0 ct0 < <(cpu_jiffies "$CLIENT_CPU")
            cpu0=$(cpu_us "$pid")
            wrk_rc=0
            "${WRK[@]}" >"$raw" 2>&1 || wrk_rc=$?
            sleep 0.2 # let the server finish closing the connections: part of the work
            read -r sb1 st1 < <(cpu_jiffies "$SERVER_CPU")
            read -r cb1 ct1 < <(cpu_jiffies "$CLIENT_CPU")
            score=$(awk -v b="$((sb1 - sb0))" -v t="$((st1 - st0))" 'BEGIN { printf "%.1f", (t > 0 ? 100 * b / t : 0) }')
            ccore=$(awk -v b="$((cb1 - cb0))" -v t="$((ct1 - ct0))" 'BEGIN { printf "%.1f", (t > 0 ? 100 * b / t : 0) }')
            if ! cpu1=$(cpu_us "$pid" 2>/dev/null); then
                cpu1=$cpu0
                DEAD[$s]=1
            fi

            requests=$(awk '/ requests in / { print $1; exit }' "$raw")
            rps=$(awk '/^Requests\/sec:/ { print $2; exit }' "$raw")
            sock=$(awk '/Socket errors:/ { gsub(/,/, ""); print $4 + $6 + $8 + $10; exit }' "$raw")
            non2xx=$(awk '/Non-2xx or 3xx responses:/ { print $NF; exit }' "$raw")
            p50=$(awk '/Latency Distribution/ { d = 1 } d && $1 == "50%" { print $2; exit }' "$raw")
            p99=$(awk '/Latency Distribution/ { d = 1 } d && $1 == "99%" { print $2; exit }' "$raw")
            requests=${requests:-0} rps=${rps:-0} sock=${sock:-0} non2xx=${non2xx:-0}

            status=ok
            why=()
            ((wrk_rc == 0)) || why+=("wrk exit status $wrk_rc")
            ((requests > 0)) || why+=("no requests completed")
            ((sock == 0)) || why+=("$sock socket errors")
            ((non2xx == 0)) || why+=("$non2xx non-2xx responses")
            [[ ${DEAD[$s]} == 0 ]] || why+=("server died")
            if ((${#why[@]})); then
                status=FAILED
                fail_run "$s $sc round $round: ${why[*]} (see ${raw#"$BENCH_ROOT"/})"
                grep -E 'Socket errors|Non-2xx|requests in' "$raw" >&2 || tail -n 5 "$raw" >&2
            fi

            read -r cpu per_req pct < <(awk -v c0="$cpu0" -v c1="$cpu1" -v n="$requests" -v r="$rps" 'BEGIN {
                cpu = c1 - c0
                per = n > 0 ? cpu / n : 0
                secs = (r > 0) ? n / r : 0
                pct = secs > 0 ? 100 * cpu / (secs * 1e6) : 0
                printf "%d %.3f %.1f\n", cpu, per, pct }')
            echo "$(date -Is),$round,$sc,$s,$CONNECTIONS,$depth,$DURATION,$requests,$rps,$cpu,$per_req,$pct,$score,$ccore,${p50:-},${p99:-},$sock,$non2xx,$status" >>"$CSV"
            log "round $round $sc $s: $requests requests, $rps req/s, $per_req CPU µs/req, server CPU ${pct}% (core $SERVER_CPU busy ${score}%, wrk core ${ccore}%) [$status]"
        done
    done
done

{
    echo "## GET /plaintext — $(date '+%Y-%m-%d %H:%M'), ${DURATION}s × $ROUNDS rounds, wrk -t1 -c$CONNECTIONS"
    echo
    echo "Server pinned to CPU $SERVER_CPU, wrk to CPU $CLIENT_CPU, both at nice $NICE. CPU µs/request ="
    echo "server utime+stime (all threads) / requests completed; \"vs null\" = that ÷ the null server's."
    echo "server CPU = the server's share of its core; cores busy = whole-core busy time of the server's"
    echo "and wrk's cores (anything well above \"server CPU\" on the server's core is someone else's work)."
    echo
    "$PY" "$BENCH_ROOT/bench/summarize.py" "$CSV" "${servers[@]}"
} >"$OUT/table.md"
echo
cat "$OUT/table.md"
log "results: ${OUT#"$BENCH_ROOT"/}/ (runs.csv, table.md, raw wrk output)"

if ((FAILURES)); then
    printf '\n!!!!!!!! %d FAILED run(s) — see above. Figures exclude them.\n' "$FAILURES" >&2
    exit 1
fi
