#!/usr/bin/env bash
# bench/db_xact.sh — PostgreSQL transactions and CPU per request of a TFB route, for one or
# more examples/tfb binaries side by side (an A/B of a driver change), in one private cluster.
#
# usage (from the repository root):
#   bash bench/db_xact.sh [TFB_BINARY...]          # default: build/examples/tfb
#   ROUNDS=3 DURATION=5 CONNECTIONS=64 ROUTE='/updates?queries=20' bash bench/db_xact.sh old/tfb new/tfb
#   PEER=drogon DROGON_PREFIX=/opt/drogon ROUNDS=6 bash bench/db_xact.sh build-bench/examples/tfb
#
# PEER=drogon adds bench/peers/drogon_updates (built by bench/peers/drogon.sh against the
# Drogon installed in DROGON_PREFIX; it serves /db and /updates only) as the last binary: it
# takes examples/tfb's flags (--workers 1: one event loop; --pool POOL: its connections).
#
# Per round and binary: a fresh examples/tfb (--workers 1 --pool POOL) pinned to SERVER_CPU,
# 20 /db requests to warm it, SETTLE seconds, then wrk -t1 -c CONNECTIONS pinned to CLIENT_CPU.
# Transactions: pg_stat_database.xact_commit of the test database, read through the postgres
# database (those reads are not counted) before the run and after the server has stopped and
# its backends have gone (a backend flushes its statistics when it exits; while alive it may
# keep them up to 10 s: SETTLE=11 makes the "before" figure exact, the warm-up's 20 are small
# beside a run's thousands). CPU: the server's utime+stime, and that of its PostgreSQL backends,
# over the wrk run, per request. The binaries alternate within each round, in the opposite
# order every other round (A B, B A, ...), so a drift of the machine's load favours none.
# The summary at the end: each binary's medians, and per round its req/s and CPU/request
# divided by binary 0's of the same round (median and range over the rounds). load: the
# 1-minute load average as the run ends (the machine's other work). A wrk run with errors or
# non-2xx answers is reported on stderr.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

if [[ -z ${FLARE_TEST_PG_URL:-} ]]; then
    exec "$PY" "$BENCH_ROOT/tests/services.py" --pg -- bash "${BASH_SOURCE[0]}" "$@"
fi
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
CONNECTIONS=${CONNECTIONS:-64}
ROUTE=${ROUTE:-/updates?queries=20}
POOL=${POOL:-2}
SETTLE=${SETTLE:-11}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
bins=("$@")
[[ ${#bins[@]} -gt 0 ]] || bins=("$BENCH_ROOT/build/examples/tfb")
case ${PEER:-} in
'') ;;
drogon) bins+=("$(bash "$BENCH_ROOT/bench/peers/drogon.sh")") || die "bench/peers/drogon.sh failed" ;;
*) die "unknown PEER '$PEER' (drogon)" ;;
esac
for b in "${bins[@]}"; do [[ -x $b ]] || die "not an executable: $b"; done
command -v wrk >/dev/null || die "wrk not found (Debian: wrk)"
url=$FLARE_TEST_PG_URL
bash "$BENCH_ROOT/examples/tfb/setup.sh" "$url" 2>/dev/null
db=${url##*/}
stat() {
    psql -At -F ' ' -h "$FLARE_TEST_PG_SOCKDIR" -p "$FLARE_TEST_PG_PORT" -U postgres -d postgres -c \
        "SELECT xact_commit, xact_rollback, (SELECT count(*) FROM pg_stat_activity WHERE datname = '$db')
         FROM pg_stat_database WHERE datname = '$db'"
}
ticks() { # utime+stime of the pids given
    local t=0 p
    for p in "$@"; do t=$((t + $(awk '{ print $14 + $15 }' "/proc/$p/stat" 2>/dev/null || echo 0))); done
    echo "$t"
}
hz=$(getconf CLK_TCK)
for i in "${!bins[@]}"; do echo "bin $i: ${bins[$i]}"; done
rows=$(mktemp)
trap 'rm -f "$rows"' EXIT
printf '%-8s %-5s %9s %9s %9s %9s %11s %11s %6s\n' round bin requests req/s xact/req rollback "cpu_us/req" \
    "pg_us/req" load
for ((r = 1; r <= ROUNDS; r++)); do
    order=("${!bins[@]}")
    if ((r % 2 == 0)); then
        mapfile -t order < <(printf '%s\n' "${order[@]}" | tac)
    fi
    for i in "${order[@]}"; do
        port=$(free_ports 1)
        taskset -c "$SERVER_CPU" "${bins[$i]}" --listen "127.0.0.1:$port" --workers 1 --pool "$POOL" \
            --db "$url" >/dev/null 2>&1 &
        pid=$!
        for ((k = 0; k < 100; k++)); do curl -sf "http://127.0.0.1:$port/db" >/dev/null && break; sleep 0.1; done
        for ((k = 0; k < 20; k++)); do curl -sf "http://127.0.0.1:$port/db" >/dev/null; done
        sleep "$SETTLE"
        read -r c0 r0 _ < <(stat)
        mapfile -t pgp < <(psql -At -h "$FLARE_TEST_PG_SOCKDIR" -p "$FLARE_TEST_PG_PORT" -U postgres \
            -d postgres -c "SELECT pid FROM pg_stat_activity WHERE datname = '$db'")
        t0=$(ticks "$pid") p0=$(ticks "${pgp[@]}")
        out=$(taskset -c "$CLIENT_CPU" wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" "http://127.0.0.1:$port$ROUTE")
        t1=$(ticks "$pid") p1=$(ticks "${pgp[@]}")
        kill "$pid"
        wait "$pid" 2>/dev/null || true
        while read -r c1 r1 n1 < <(stat) && [[ $n1 != 0 ]]; do sleep 0.2; done
        if grep -qE 'Non-2xx|Socket errors' <<<"$out"; then
            echo "WARNING: round $r bin $i: $(grep -E 'Non-2xx|Socket errors' <<<"$out" | tr -s ' ')" >&2
        fi
        n=$(awk '/requests in/ { print $1 }' <<<"$out")
        rps=$(awk '/^Requests\/sec:/ { print $2 }' <<<"$out")
        awk -v r="$r" -v b="$i" -v n="$n" -v rps="$rps" -v c=$((c1 - c0)) -v rb=$((r1 - r0)) \
            -v t=$((t1 - t0)) -v p=$((p1 - p0)) -v hz="$hz" -v load="$(cut -d' ' -f1 /proc/loadavg)" 'BEGIN {
            printf "%-8s %-5s %9d %9.0f %9.2f %9d %11.1f %11.1f %6s\n", r, b, n, rps, c / n, rb,
                t * 1e6 / hz / n, p * 1e6 / hz / n, load }' | tee -a "$rows"
    done
done
"$PY" - "$rows" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
by = {}
for r in rows:
    by.setdefault(r[1], {})[r[0]] = dict(rps=float(r[3]), xact=float(r[4]), cpu=float(r[6]),
                                         pg=float(r[7]))
med = lambda v: statistics.median(v) if v else float("nan")
print("\nmedians over the rounds; ratios: this binary / bin 0 within each round, median [min-max]")
print("%-5s %9s %9s %11s %11s %22s %22s" % ("bin", "req/s", "xact/req", "cpu_us/req", "pg_us/req",
                                            "req/s ratio", "cpu/req ratio"))
for b in sorted(by, key=int):
    d = by[b]
    line = "%-5s %9.0f %9.2f %11.1f %11.1f" % (b, med([x["rps"] for x in d.values()]),
        med([x["xact"] for x in d.values()]), med([x["cpu"] for x in d.values()]),
        med([x["pg"] for x in d.values()]))
    if b != "0":
        for k in ("rps", "cpu"):
            q = [d[r][k] / by["0"][r][k] for r in d if r in by["0"] and by["0"][r][k] > 0]
            line += " %22s" % ("%.2f [%.2f-%.2f]" % (med(q), min(q), max(q)) if q else "-")
    print(line)
EOF
