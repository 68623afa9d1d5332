#!/usr/bin/env bash
# bench/cluster.sh — channel fan-out through the Redis backplane against the same fan-out on one
# instance's local channel layer, side by side in one run (issue 25, "Performance").
#
#   local    one bench/cluster_server instance (--workers 1), no cluster: every subscriber on it,
#            every message published through it
#   cluster  two instances (--workers 1 each, --cluster redis://...) and a private redis-server
#            (--save '' --appendonly no): half the subscribers on each (every channel has
#            subscribers on both), the messages published through both in turn
#
# The load: bench/cluster_client opens SUBS WebSocket subscribers (/sub?ch=N) spread over
# CHANNELS channels and the instances, and one control connection (/pub) per instance, through
# which it has the servers publish (flare_ws_broadcast from the worker, as a chat handler does),
# each message carrying the publisher's CLOCK_MONOTONIC. Two modes:
#   rate   a fixed rate of published messages per second in all: RATE_<CHANNELS> (RATE_100 =
#          10000, the issue's target; RATE_1 = 100, the same 100,000 copies/s: 10,000 messages/s
#          to 1,000 subscribers of one channel would be 10 million copies/s)
#   max    as fast as deliveries come back: at most WINDOW copies published but not yet received
# Every copy is checked (right channel, in order per publisher, each message once to every
# subscriber of its channel, nothing missing after the run); a run that is not exact is FAILED.
#
# Figures per run: messages published/s and copies delivered/s (measured seconds only), server
# CPU µs per delivered copy (utime+stime of the server processes, all threads, from
# /proc/PID/stat, ÷ copies), latency p50/p99 (client's CLOCK_MONOTONIC at receipt minus the
# publisher's), and Redis's CPU per published message (separately: it is not in the server's).
# Tables: medians over ROUNDS (local and cluster alternate, order swapped each round) and the
# ratios cluster ÷ local; the targets: CPU per copy ≤ 1.5× local, p99 ≤ 5 ms at 10,000
# messages/s (the rate scenario of 100 channels).
#
# Placement (2 cores): the server processes (the local one, the two cluster instances) on
# SERVER_CPU, the client on CLIENT_CPU, redis-server on REDIS_CPU (default: the client's core;
# it is a separate service, and its CPU is reported apart). Everything at nice NICE (-10), and
# this session's autogroup too (see boost_priority in bench/lib.sh).
#
# usage (from the repository root):
#   bash bench/cluster.sh                                  # 2 channel counts × 2 modes × 3 rounds × 5 s (~3 min)
#   DURATION=3 ROUNDS=1 bash bench/cluster.sh              # a quick look
#   CHANNELS=100 MODES=rate bash bench/cluster.sh          # the target scenario only
#
# environment: DURATION=5 WARMUP=1 ROUNDS=3 SUBS=1000 CHANNELS="1 100" MODES="rate max"
#   RATE_1=100 RATE_100=10000 (RATE_<n> for other channel counts; default 10000) WINDOW=20000
#   SIZE=64 (message bytes) SERVER_CPU=0 CLIENT_CPU=1 REDIS_CPU=1 NICE=-10
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
CHANNELS=${CHANNELS:-"1 100"}
MODES=${MODES:-"rate max"}
RATE_1=${RATE_1:-100}
RATE_100=${RATE_100:-10000}
WINDOW=${WINDOW:-20000}
SIZE=${SIZE:-64}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
REDIS_CPU=${REDIS_CPU:-1}
NICE=${NICE:--10}

for v in DURATION ROUNDS SUBS WINDOW SIZE; do
    [[ ${!v} =~ ^[0-9]+$ && ${!v} -gt 0 ]] || die "$v must be a positive integer"
done
for m in $MODES; do
    [[ $m == rate || $m == max ]] || die "MODES: rate and/or max, not '$m'"
done

rate_of() {
    local v="RATE_$1"
    echo "${!v:-10000}"
}

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
    cmake --build "$BUILD_DIR" -j2 --target cluster_server cluster_client >>"$blog" 2>&1; }; then
    tail -n 20 "$blog" >&2
    die "build failed (see above)"
fi
SRV_BIN=$BENCH_BIN/cluster_server
CLI_BIN=$BENCH_BIN/cluster_client

[[ -n ${RESULTS_DIR:-} ]] || RESULTS_DIR=$BENCH_ROOT/bench/results/cluster-$(date +%Y%m%d-%H%M%S)
OUT=$(results_dir)

PRIO=()
[[ $NICE != 0 ]] && PRIO=(nice -n "$NICE")

read -r REDIS_PORT LOCAL_PORT A_PORT B_PORT <<<"$(free_ports 4)"
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

# start_cs NAME PORT [FLAGS...] -> CS_PID
start_cs() {
    local name=$1 port=$2
    shift 2
    "${PRIO[@]}" taskset -c "$SERVER_CPU" "$SRV_BIN" --listen "127.0.0.1:$port" --workers 1 "$@" \
        </dev/null >"$BENCH_TMP/$name.log" 2>&1 &
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
log "local: pid $LOCAL_PID port $LOCAL_PORT; cluster: pids $A_PID $B_PID ports $A_PORT $B_PORT;" \
    "redis-server: pid $REDIS_PID port $REDIS_PORT"

{
    echo "date: $(date -Is)"
    echo "commit: $(git -C "$BENCH_ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "kernel: $(uname -r)"
    echo "cpus: $(nproc) ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'))"
    echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "redis: $(redis-server --version)"
    echo "DURATION=$DURATION WARMUP=$WARMUP ROUNDS=$ROUNDS SUBS=$SUBS CHANNELS=\"$CHANNELS\"" \
        "MODES=\"$MODES\" WINDOW=$WINDOW SIZE=$SIZE"
    for c in $CHANNELS; do echo "RATE_$c=$(rate_of "$c")"; done
    echo "placement: servers on CPU $SERVER_CPU, client on CPU $CLIENT_CPU, redis-server on" \
        "CPU $REDIS_CPU; nice $NICE"
    echo "open-file limit: $(ulimit -n)"
} >"$OUT/env.txt"
log "results in ${OUT#"$BENCH_ROOT"/}/"

CSV=$OUT/runs.csv
FIELDS="msgs_per_s copies_per_s us_per_copy p50_us p99_us p999_us max_us server_cpu_pct"
FIELDS+=" redis_us_per_msg client_cpu_pct published copies lost_copies dups reorders wrong"
echo "round,channels,mode,config,status,${FIELDS// /,}" >"$CSV"
FAILED=0

# run_one ROUND CHANNELS MODE CONFIG
run_one() {
    local round=$1 ch=$2 mode=$3 cfg=$4 raw line status=ok
    local -a args=(--subs "$SUBS" --channels "$ch" --size "$SIZE" --warmup "$WARMUP"
        --seconds "$DURATION")
    if [[ $mode == rate ]]; then
        args+=(--rate "$(rate_of "$ch")")
    else
        args+=(--window "$WINDOW")
    fi
    if [[ $cfg == local ]]; then
        args+=(--ports "$LOCAL_PORT" --server-pids "$LOCAL_PID")
    else
        args+=(--ports "$A_PORT,$B_PORT" --server-pids "$A_PID,$B_PID" --redis-pid "$REDIS_PID")
    fi
    raw=$OUT/raw-$ch-$mode-$cfg-r$round.txt
    echo "cluster_client ${args[*]}" >"$raw"
    if ! "${PRIO[@]}" taskset -c "$CLIENT_CPU" "$CLI_BIN" "${args[@]}" >>"$raw" 2>&1; then
        status=FAILED
        FAILED=$((FAILED + 1))
    fi
    for p in "$LOCAL_PID" "$A_PID" "$B_PID" "$REDIS_PID"; do
        kill -0 "$p" 2>/dev/null || die "process $p died (see $raw and the logs in $BENCH_TMP)"
    done
    line=$(grep -m1 '^RESULT ' "$raw" || true)
    if [[ -z $line && $status == ok ]]; then
        status=FAILED
        FAILED=$((FAILED + 1))
    fi
    local row="$round,$ch,$mode,$cfg,$status" f v
    for f in $FIELDS; do
        v=$(sed -n "s/.* $f=\([^ ]*\).*/\1/p" <<<"$line")
        row+=",${v:-}"
    done
    echo "$row" >>"$CSV"
    if [[ $status == ok ]]; then
        log "round $round, $ch channel(s), $mode, $cfg: $(sed -n 's/.* copies_per_s=\([^ ]*\).*/\1/p' <<<"$line")" \
            "copies/s, $(sed -n 's/.* us_per_copy=\([^ ]*\).*/\1/p' <<<"$line") µs/copy," \
            "p99 $(sed -n 's/.* p99_us=\([^ ]*\).*/\1/p' <<<"$line") µs"
    else
        warn "round $round, $ch channel(s), $mode, $cfg: FAILED (see ${raw#"$BENCH_ROOT"/})"
        tail -n 3 "$raw" >&2
    fi
}

for r in $(seq 1 "$ROUNDS"); do
    for ch in $CHANNELS; do
        for mode in $MODES; do
            if ((r % 2)); then order="local cluster"; else order="cluster local"; fi
            for cfg in $order; do
                run_one "$r" "$ch" "$mode" "$cfg"
            done
        done
    done
done

"$PY" - "$CSV" "$SUBS" "$DURATION" "$ROUNDS" "$WINDOW" "$(for c in $CHANNELS; do printf '%s=%s ' "$c" "$(rate_of "$c")"; done)" \
    >"$OUT/table.md" <<'EOF'
import csv, statistics, sys
path, subs, dur, rounds, window, rates = sys.argv[1:7]
rates = dict(kv.split("=") for kv in rates.split())
rows = [r for r in csv.DictReader(open(path)) if r["status"] == "ok"]
failed = sum(1 for r in csv.DictReader(open(path)) if r["status"] != "ok")
def med(ch, mode, cfg, f):
    v = [float(r[f]) for r in rows if r["channels"] == ch and r["mode"] == mode and r["config"] == cfg and r[f] != ""]
    return statistics.median(v) if v else None
def rng(ch, mode, cfg, f):
    v = [float(r[f]) for r in rows if r["channels"] == ch and r["mode"] == mode and r["config"] == cfg and r[f] != ""]
    return (min(v), max(v)) if v else (None, None)
def fmt(x, d=0):
    return "–" if x is None else f"{x:,.{d}f}"
def ratio(a, b):
    return "–" if a is None or b is None or b == 0 else f"{a / b:.2f}×"
keys = []
for r in rows:
    k = (r["channels"], r["mode"])
    if k not in keys:
        keys.append(k)
print(f"{subs} subscribers; local: 1 instance; cluster: 2 instances + Redis. Medians of {rounds} round(s) of {dur} s.")
print()
print("| channels | mode | config | published msg/s | delivered copies/s | server CPU µs/copy (min–max) | server CPU % | p50 ms | p99 ms | Redis CPU µs/msg |")
print("|---|---|---|---|---|---|---|---|---|---|")
verdict = []
for ch, mode in keys:
    label = f"rate {int(float(rates.get(ch, 10000))):,}/s" if mode == "rate" else f"max (window {int(window):,})"
    for cfg in ("local", "cluster"):
        lo, hi = rng(ch, mode, cfg, "us_per_copy")
        p50, p99 = med(ch, mode, cfg, "p50_us"), med(ch, mode, cfg, "p99_us")
        redis = med(ch, mode, cfg, "redis_us_per_msg") if cfg == "cluster" else None
        print(f"| {ch} | {label} | {cfg} | {fmt(med(ch, mode, cfg, 'msgs_per_s'))} | {fmt(med(ch, mode, cfg, 'copies_per_s'))} "
              f"| {fmt(med(ch, mode, cfg, 'us_per_copy'), 2)} ({fmt(lo, 2)}–{fmt(hi, 2)}) | {fmt(med(ch, mode, cfg, 'server_cpu_pct'))} "
              f"| {fmt(None if p50 is None else p50 / 1000, 2)} | {fmt(None if p99 is None else p99 / 1000, 2)} | {fmt(redis, 1) if cfg == 'cluster' else ''} |")
    c_l, c_c = med(ch, mode, "local", "us_per_copy"), med(ch, mode, "cluster", "us_per_copy")
    print(f"| {ch} | {label} | **cluster ÷ local** | {ratio(med(ch, mode, 'cluster', 'msgs_per_s'), med(ch, mode, 'local', 'msgs_per_s'))} "
          f"| {ratio(med(ch, mode, 'cluster', 'copies_per_s'), med(ch, mode, 'local', 'copies_per_s'))} "
          f"| **{ratio(c_c, c_l)}** | | {ratio(med(ch, mode, 'cluster', 'p50_us'), med(ch, mode, 'local', 'p50_us'))} "
          f"| {ratio(med(ch, mode, 'cluster', 'p99_us'), med(ch, mode, 'local', 'p99_us'))} | |")
    if c_l and c_c:
        verdict.append(f"- CPU per copy, {ch} channel(s), {label}: cluster {c_c:.2f} µs ÷ local {c_l:.2f} µs = "
                       f"{c_c / c_l:.2f}× (target ≤ 1.5×: {'met' if c_c / c_l <= 1.5 else 'MISSED'})")
    p99c = med(ch, mode, "cluster", "p99_us")
    if mode == "rate" and float(rates.get(ch, 0)) >= 10000 and p99c is not None:
        verdict.append(f"- p99 at {int(float(rates[ch])):,} msg/s, {ch} channel(s), cluster: {p99c / 1000:.2f} ms "
                       f"(local {med(ch, mode, 'local', 'p99_us') / 1000:.2f} ms; target ≤ 5 ms: {'met' if p99c <= 5000 else 'MISSED'})")
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
