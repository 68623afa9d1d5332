#!/usr/bin/env bash
# bench/db_xact.sh — PostgreSQL transactions and CPU per request of a TFB route, for one or
# more examples/tfb binaries side by side (an A/B of a driver change), in one private cluster.
#
# usage (from the repository root):
#   bash bench/db_xact.sh [TFB_BINARY...]          # default: build/examples/tfb
#   ROUNDS=3 DURATION=5 CONNECTIONS=64 ROUTE='/updates?queries=20' bash bench/db_xact.sh old/tfb new/tfb
#
# Per round and binary: a fresh examples/tfb (--workers 1 --pool POOL) pinned to SERVER_CPU,
# 20 /db requests to warm it, SETTLE seconds, then wrk -t1 -c CONNECTIONS pinned to CLIENT_CPU.
# Transactions: pg_stat_database.xact_commit of the test database, read through the postgres
# database (those reads are not counted) before the run and after the server has stopped and
# its backends have gone (a backend flushes its statistics when it exits; while alive it may
# keep them up to 10 s: SETTLE=11 makes the "before" figure exact, the warm-up's 20 are small
# beside a run's thousands). CPU: the server's utime+stime, and that of its PostgreSQL backends,
# over the wrk run, per request. The binaries alternate within each round.
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
printf '%-8s %-5s %9s %9s %9s %9s %11s %11s\n' round bin requests req/s xact/req rollback "cpu_us/req" "pg_us/req"
for ((r = 1; r <= ROUNDS; r++)); do
    for i in "${!bins[@]}"; do
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
        n=$(awk '/requests in/ { print $1 }' <<<"$out")
        rps=$(awk '/^Requests\/sec:/ { print $2 }' <<<"$out")
        awk -v r="$r" -v b="$i" -v n="$n" -v rps="$rps" -v c=$((c1 - c0)) -v rb=$((r1 - r0)) \
            -v t=$((t1 - t0)) -v p=$((p1 - p0)) -v hz="$hz" 'BEGIN {
            printf "%-8s %-5s %9d %9.0f %9.2f %9d %11.1f %11.1f\n", r, b, n, rps, c / n, rb,
                t * 1e6 / hz / n, p * 1e6 / hz / n }'
    done
done
