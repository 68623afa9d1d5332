#!/usr/bin/env bash
# bench/cluster.sh — channel fan-out through the Redis backplane against the same fan-out on one
# instance's local channel layer, side by side in one run (issue 25, "Performance").
#
#   local    one bench/cluster_server instance (--workers 1), no cluster: every subscriber on it,
#            every message published through it
#   cluster  two instances (--workers 1 each, --cluster redis://...) and a private redis-server
#            (--save '' --appendonly no): half the subscribers on each (every channel has
#            subscribers on both), the messages published through both in turn
#   null     (NULL_FANOUT=1) bench/fanout_null, the same protocol with nothing of a real server
#            (one thread, edge-triggered epoll, one write per connection per loop turn): the
#            kernel's cost of the same fan-out, the ceiling any server on this machine meets
#
# The load: bench/cluster_client opens SUBS WebSocket subscribers (/sub?ch=N) spread over the
# channels and the instances, and one control connection (/pub) per instance, through which it
# has the servers publish (flare_ws_broadcast from the worker, as a chat handler does), each
# message carrying the publisher's CLOCK_MONOTONIC. A scenario is CHANNELS:RATE:
#   RATE a number  that many published messages per second in all, paced by the client's clock
#                  (100:10000 is the issue's target; 1:100 makes the same 100,000 copies/s:
#                  10,000 messages/s to 1,000 subscribers of one channel would be 10 million)
#   RATE max       as fast as deliveries come back: at most WINDOW copies published but not
#                  yet received
# Every copy is checked (right channel, in order per publisher, each message once to every
# subscriber of its channel, nothing missing after the run); a run that is not exact is FAILED.
#
# Figures per run: messages published/s and copies delivered/s (measured seconds only), server
# CPU µs per delivered copy (utime+stime of the server processes, all threads, from
# /proc/PID/stat, ÷ copies), the servers' write syscalls per copy (/proc/PID/io syscw: what
# batching the fan-out got), latency p50/p99 (client's CLOCK_MONOTONIC at receipt minus the
# publisher's), and Redis's CPU per published message (separately: it is not in the server's).
# Tables: medians over ROUNDS (local and cluster alternate, order swapped each round) and the
# ratios cluster ÷ local; the targets: CPU per copy ≤ 1.5× local, p99 ≤ 5 ms at 10,000
# messages/s (any scenario at a rate of 10,000 or more).
#
# Placement (2 cores): the server processes (the local one, the two cluster instances) on
# SERVER_CPU, the client on CLIENT_CPU, redis-server on REDIS_CPU (default: the client's core;
# it is a separate service, and its CPU is reported apart). Everything at nice NICE (-10), and
# this session's autogroup too (see boost_priority in bench/lib.sh). RT=N (root) runs the servers,
# the client and Redis under SCHED_FIFO priority N instead, so that the other processes of a
# shared machine cannot delay them (the kernel's RT throttling still leaves them 5 % of each
# core): for the latency of the path itself, not the machine's neighbours. Keep it for short runs
# of the rate scenarios: a max scenario holds both cores at 95 %.
#
# usage (from the repository root):
#   bash bench/cluster.sh                                  # 6 scenarios × 2 configs × 3 rounds × 7 s (~5 min)
#   DURATION=3 ROUNDS=1 bash bench/cluster.sh              # a quick look
#   SCENARIOS="100:2000 100:5000 100:10000" bash bench/cluster.sh   # latency against the rate
#
# environment: DURATION=5 WARMUP=1 ROUNDS=3 SUBS=1000
#   SCENARIOS="1:100 1:max 100:2000 100:5000 100:10000 100:max"
#   WINDOW=20000 SIZE=64 (message bytes) SERVER_CPU=0 CLIENT_CPU=1 REDIS_CPU=1 NICE=-10 RT=0
#   NULL_FANOUT=0 (1: the null fan-out as a third config in every round)
#   RESULTS_DIR=... (default bench/results/cluster-<timestamp>/) KEEP_TMP=1 (keep the logs)
#
# Output: runs.csv (every run's figures), raw-*.txt (the client's output), env.txt, table.md
# (also printed).
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DURATION=${DURATION:-5}
WARMUP=${WARMUP:-1}
ROUNDS=${ROUNDS:-3}
SUBS=${SUBS:-1000}
SCENARIOS=${SCENARIOS:-"1:100 1:max 100:2000 100:5000 100:10000 100:max"}
WINDOW=${WINDOW:-20000}
SIZE=${SIZE:-64}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
REDIS_CPU=${REDIS_CPU:-1}
NICE=${NICE:--10}
RT=${RT:-0}
NULL_FANOUT=${NULL_FANOUT:-0}

[[ $RT =~ ^[0-9]+$ && $RT -le 99 ]] || die "RT must be 0 (off) or a SCHED_FIFO priority 1..99"
for v in DURATION ROUNDS SUBS WINDOW SIZE; do
    [[ ${!v} =~ ^[0-9]+$ && ${!v} -gt 0 ]] || die "$v must be a positive integer"
done
for sc in $SCENARIOS; do
    [[ $sc =~ ^[0-9]+:([0-9]+|max)$ && ${sc%%:*} -gt 0 && ${sc%%:*} -le $SUBS ]] ||
        die "SCENARIOS: CHANNELS:RATE or CHANNELS:max (1 <= CHANNELS <= SUBS), not '$sc'"
done

bench_init
ensure_tools taskset cmake cc redis-server redis-cli
raise_nofile 65536
if [[ $NICE != 0 ]]; then
    boost_priority "$NICE"
fi

# Only what this bench runs: the server (Flare, Release + LTO, the same options as build_bench)
# and the client.
log "building bench/cluster_server and bench/cluster_client (Release) into ${BUILD_DIR#"$BENCH_ROOT"/}/"
blog=$BENCH_TMP/build.log
if ! { cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DFLARE_TESTS=OFF -DFLARE_WERROR=OFF \
    -DFLARE_LTO=ON -DFLARE_FRAME_POINTERS=OFF -DFLARE_SANITIZE= -DFLARE_FUZZ=OFF \
    -DFLARE_EXAMPLES=ON >"$blog" 2>&1 &&
    cmake --build "$BUILD_DIR" -j2 --target cluster_server cluster_client fanout_null >>"$blog" 2>&1; }; then
    tail -n 20 "$blog" >&2
    die "build failed (see above)"
fi
SRV_BIN=$BENCH_BIN/cluster_server
CLI_BIN=$BENCH_BIN/cluster_client
NULL_BIN=$BENCH_BIN/fanout_null

[[ -n ${RESULTS_DIR:-} ]] || RESULTS_DIR=$BENCH_ROOT/bench/results/cluster-$(date +%Y%m%d-%H%M%S)
OUT=$(results_dir)

PRIO=()
[[ $NICE != 0 ]] && PRIO=(nice -n "$NICE")
if [[ $RT != 0 ]]; then
    PRIO=(chrt -f "$RT")
fi

read -r REDIS_PORT LOCAL_PORT A_PORT B_PORT NULL_PORT <<<"$(free_ports 5)"
REDIS_URL=redis://127.0.0.1:$REDIS_PORT

mkdir -p "$BENCH_TMP/redis"
"${PRIO[@]}" taskset -c "$REDIS_CPU" redis-server --port "$REDIS_PORT" --bind 127.0.0.1 \
    --save '' --appendonly no --dir "$BENCH_TMP/redis" --logfile "$BENCH_TMP/redis/redis.log" \
    </dev/null >/dev/null 2>&1 &
REDIS_PID=$!
BENCH_PIDS+=("$REDIS_PID")
for _ in $(seq 1 100); do
    [[ $(redis-cli -p "$REDIS_PORT" ping 2>/dev/null) == PONG ]] && break
    sleep 0.1
done
[[ $(redis-cli -p "$REDIS_PORT" ping 2>/dev/null) == PONG ]] || die "redis-server did not start"

# start_cs NAME PORT [FLAGS...] -> CS_PID (NAME null: the null fan-out)
start_cs() {
    local name=$1 port=$2
    shift 2
    if [[ $name == null ]]; then
        "${PRIO[@]}" taskset -c "$SERVER_CPU" "$NULL_BIN" --listen "127.0.0.1:$port" \
            </dev/null >"$BENCH_TMP/$name.log" 2>&1 &
    else
        "${PRIO[@]}" taskset -c "$SERVER_CPU" "$SRV_BIN" --listen "127.0.0.1:$port" --workers 1 "$@" \
            </dev/null >"$BENCH_TMP/$name.log" 2>&1 &
    fi
    CS_PID=$!
    BENCH_PIDS+=("$CS_PID")
    local deadline=$((SECONDS + 20))
    while ((SECONDS < deadline)); do
        kill -0 "$CS_PID" 2>/dev/null || { tail -n 20 "$BENCH_TMP/$name.log" >&2; die "$name exited"; }
        check_plaintext "$port" && return 0
        sleep 0.2
    done
    tail -n 20 "$BENCH_TMP/$name.log" >&2
    die "$name on port $port did not answer"
}

start_cs local "$LOCAL_PORT"
LOCAL_PID=$CS_PID
start_cs cluster-a "$A_PORT" --cluster "$REDIS_URL"
A_PID=$CS_PID
start_cs cluster-b "$B_PORT" --cluster "$REDIS_URL"
B_PID=$CS_PID
NULL_PID=
if [[ $NULL_FANOUT == 1 ]]; then
    start_cs null "$NULL_PORT"
    NULL_PID=$CS_PID
fi
log "local: pid $LOCAL_PID port $LOCAL_PORT; cluster: pids $A_PID $B_PID ports $A_PORT $B_PORT;" \
    "redis-server: pid $REDIS_PID port $REDIS_PORT"

{
    echo "date: $(date -Is)"
    echo "commit: $(git -C "$BENCH_ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "kernel: $(uname -r)"
    echo "cpus: $(nproc) ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'))"
    echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "redis: $(redis-server --version)"
    echo "DURATION=$DURATION WARMUP=$WARMUP ROUNDS=$ROUNDS SUBS=$SUBS SCENARIOS=\"$SCENARIOS\"" \
        "WINDOW=$WINDOW SIZE=$SIZE"
    echo "placement: servers on CPU $SERVER_CPU, client on CPU $CLIENT_CPU, redis-server on" \
        "CPU $REDIS_CPU; $(if [[ $RT != 0 ]]; then echo "SCHED_FIFO priority $RT"; else echo "nice $NICE"; fi)"
    echo "open-file limit: $(ulimit -n)"
} >"$OUT/env.txt"
log "results in ${OUT#"$BENCH_ROOT"/}/"

CSV=$OUT/runs.csv
FIELDS="msgs_per_s copies_per_s us_per_copy writes_per_copy p50_us p99_us p999_us max_us server_cpu_pct"
FIELDS+=" redis_us_per_msg client_cpu_pct published copies lost_copies dups reorders wrong"
echo "round,scenario,channels,rate,config,status,${FIELDS// /,}" >"$CSV"
FAILED=0

# run_one ROUND SCENARIO CONFIG
run_one() {
    local round=$1 sc=$2 cfg=$3 raw line status=ok ch=${2%%:*} rate=${2#*:}
    local -a args=(--subs "$SUBS" --channels "$ch" --size "$SIZE" --warmup "$WARMUP"
        --seconds "$DURATION")
    if [[ $rate == max ]]; then
        args+=(--window "$WINDOW")
    else
        args+=(--rate "$rate")
    fi
    if [[ $cfg == local ]]; then
        args+=(--ports "$LOCAL_PORT" --server-pids "$LOCAL_PID")
    elif [[ $cfg == null ]]; then
        args+=(--ports "$NULL_PORT" --server-pids "$NULL_PID")
    else
        args+=(--ports "$A_PORT,$B_PORT" --server-pids "$A_PID,$B_PID" --redis-pid "$REDIS_PID")
    fi
    raw=$OUT/raw-$ch-$rate-$cfg-r$round.txt
    echo "cluster_client ${args[*]}" >"$raw"
    if ! "${PRIO[@]}" taskset -c "$CLIENT_CPU" "$CLI_BIN" "${args[@]}" >>"$raw" 2>&1; then
        status=FAILED
        FAILED=$((FAILED + 1))
    fi
    for p in "$LOCAL_PID" "$A_PID" "$B_PID" "$REDIS_PID" $NULL_PID; do
        kill -0 "$p" 2>/dev/null || die "process $p died (see $raw and the logs in $BENCH_TMP)"
    done
    line=$(grep -m1 '^RESULT ' "$raw" || true)
    if [[ -z $line && $status == ok ]]; then
        status=FAILED
        FAILED=$((FAILED + 1))
    fi
    local row="$round,$sc,$ch,$rate,$cfg,$status" f v
    for f in $FIELDS; do
        v=$(sed -n "s/.* $f=\([^ ]*\).*/\1/p" <<<"$line")
        row+=",${v:-}"
    done
    echo "$row" >>"$CSV"
    if [[ $status == ok ]]; then
        log "round $round, $sc, $cfg: $(sed -n 's/.* copies_per_s=\([^ ]*\).*/\1/p' <<<"$line")" \
            "copies/s, $(sed -n 's/.* us_per_copy=\([^ ]*\).*/\1/p' <<<"$line") µs/copy," \
            "p99 $(sed -n 's/.* p99_us=\([^ ]*\).*/\1/p' <<<"$line") µs"
    else
        warn "round $round, $sc, $cfg: FAILED (see ${raw#"$BENCH_ROOT"/})"
        tail -n 3 "$raw" >&2
    fi
}

for r in $(seq 1 "$ROUNDS"); do
    for sc in $SCENARIOS; do
        if ((r % 2)); then order="local cluster"; else order="cluster local"; fi
        for cfg in $order; do
            run_one "$r" "$sc" "$cfg"
        done
        if [[ $NULL_FANOUT == 1 ]]; then
            run_one "$r" "$sc" null
        fi
    done
done

"$PY" - "$CSV" "$SUBS" "$DURATION" "$ROUNDS" "$WINDOW" >"$OUT/table.md" <<'EOF'
import csv, statistics, sys
path, subs, dur, rounds, window = sys.argv[1:6]
allrows = list(csv.DictReader(open(path)))
rows = [r for r in allrows if r["status"] == "ok"]
failed = len(allrows) - len(rows)
def vals(sc, cfg, f):
    return [float(r[f]) for r in rows if r["scenario"] == sc and r["config"] == cfg and r[f] != ""]
def med(sc, cfg, f):
    v = vals(sc, cfg, f)
    return statistics.median(v) if v else None
def fmt(x, d=0):
    return "–" if x is None else f"{x:,.{d}f}"
def ms(x):
    return "–" if x is None else f"{x / 1000:.2f}"
def ratio(a, b):
    return "–" if a is None or b is None or b == 0 else f"{a / b:.2f}×"
scenarios = []
for r in allrows:
    if r["scenario"] not in scenarios:
        scenarios.append(r["scenario"])
print(f"{subs} subscribers; local: 1 instance; cluster: 2 instances + Redis. Medians of {rounds} round(s) of {dur} s.")
print()
print("| channels | published | config | msg/s | copies/s | server CPU µs/copy (min–max) | server CPU % | writes/copy | p50 ms | p99 ms | Redis CPU µs/msg | client CPU % |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
verdict = []
for sc in scenarios:
    ch, rate = sc.split(":")
    label = f"max (window {int(window):,})" if rate == "max" else f"{int(rate):,} msg/s"
    for cfg in ("local", "cluster", "null"):
        v = vals(sc, cfg, "us_per_copy")
        if cfg == "null" and not v:
            continue
        rng = f"{min(v):.2f}–{max(v):.2f}" if v else "–"
        redis = fmt(med(sc, cfg, "redis_us_per_msg"), 1) if cfg == "cluster" else ""
        print(f"| {ch} | {label} | {cfg} | {fmt(med(sc, cfg, 'msgs_per_s'))} | {fmt(med(sc, cfg, 'copies_per_s'))} "
              f"| {fmt(med(sc, cfg, 'us_per_copy'), 2)} ({rng}) | {fmt(med(sc, cfg, 'server_cpu_pct'))} "
              f"| {fmt(med(sc, cfg, 'writes_per_copy'), 2)} | {ms(med(sc, cfg, 'p50_us'))} | {ms(med(sc, cfg, 'p99_us'))} "
              f"| {redis} | {fmt(med(sc, cfg, 'client_cpu_pct'))} |")
    def rt(f):
        return ratio(med(sc, "cluster", f), med(sc, "local", f))
    print(f"| {ch} | {label} | **cluster ÷ local** | {rt('msgs_per_s')} | {rt('copies_per_s')} "
          f"| **{rt('us_per_copy')}** | | {rt('writes_per_copy')} | {rt('p50_us')} | {rt('p99_us')} | | |")
    if vals(sc, "null", "us_per_copy"):
        for cfg in ("local", "cluster"):
            def rn(f):
                return ratio(med(sc, cfg, f), med(sc, "null", f))
            print(f"| {ch} | {label} | {cfg} ÷ null | {rn('msgs_per_s')} | {rn('copies_per_s')} "
                  f"| {rn('us_per_copy')} | | {rn('writes_per_copy')} | {rn('p50_us')} | {rn('p99_us')} | | |")
    c_l, c_c = med(sc, "local", "us_per_copy"), med(sc, "cluster", "us_per_copy")
    if c_l and c_c:
        verdict.append(f"- CPU per copy, {ch} channel(s), {label}: cluster {c_c:.2f} µs ÷ local {c_l:.2f} µs = "
                       f"{c_c / c_l:.2f}× (target ≤ 1.5×: {'met' if c_c / c_l <= 1.5 else 'MISSED'})")
    p99c, p99l = med(sc, "cluster", "p99_us"), med(sc, "local", "p99_us")
    if rate != "max" and int(rate) >= 10000 and p99c is not None:
        verdict.append(f"- p99 at {int(rate):,} msg/s, {ch} channel(s), cluster: {p99c / 1000:.2f} ms "
                       f"(local {ms(p99l)} ms, null fan-out {ms(med(sc, 'null', 'p99_us'))} ms; "
                       f"target ≤ 5 ms: {'met' if p99c <= 5000 else 'MISSED'})")
print()
print("Targets:")
print("\n".join(verdict) if verdict else "- (no complete pair of runs)")
if failed:
    print()
    print(f"**{failed} run(s) FAILED** (left out; see runs.csv and raw-*.txt)")
EOF
cat "$OUT/table.md"
if ((FAILED > 0)); then
    die "$FAILED run(s) failed"
fi
