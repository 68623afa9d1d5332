#!/usr/bin/env bash
# bench/db.sh — the TFB database routes against the database's own ceiling, in one run.
#
# usage (from the repository root):
#   bash bench/db.sh                        # PostgreSQL and SQLite, 5 s × 3 rounds
#   DURATION=3 ROUNDS=1 bash bench/db.sh    # a quick look
#   DRIVERS=pg SCENARIOS=db,queries bash bench/db.sh
#
# PostgreSQL 15 runs privately (tests/services.py --pg: initdb into a temporary directory, a
# free loopback port, fsync off), filled by examples/tfb/setup.sh. It is not pinned: it is
# what is measured against. Flare (examples/tfb --workers 1 --pool POOL) is pinned to
# SERVER_CPU, wrk (-t1 -c CONNECTIONS) to CLIENT_CPU.
#
# The ceiling (PostgreSQL): bench/db_null drives libpq in pipeline mode over the same POOL
# connections, with CONNECTIONS requests outstanding (as wrk's connections), sending exactly
# the statements each route sends (db: 1 SELECT; queries: 20; fortunes: 1; updates: 20 and
# one batched UPDATE), pinned to SERVER_CPU like Flare, and syncs as the driver does: the
# SELECTs started in one loop turn share one sync, each UPDATE has its own. Its queries/s is
# what the database serves when nothing else is in the way: no HTTP client, no HTTP server,
# so PostgreSQL has both cores to itself, where Flare shares them with wrk (on this 2-core
# machine wrk alone costs more CPU per request than PostgreSQL spends on one /db query).
# Flare's queries/s (requests/s × statements per request) is quoted as a ratio to it.
# The ceiling (SQLite): bench/sqlite_null runs the same SELECT on THREADS threads of its own
# (the driver's pool size), no HTTP, no hand-off between threads.
#
# scenarios (SCENARIOS): plaintext db queries fortunes updates (PostgreSQL); plaintext db
# fortunes (SQLite). plaintext is the same tfb process's /plaintext with the same wrk: no
# database at all, the most requests/s any route reaches on this machine (the HTTP cap).
# environment:
#   DURATION=5 ROUNDS=3 CONNECTIONS=64 POOL=2 THREADS=4 N=20 DRIVERS="pg sqlite"
#   SERVER_CPU=0 CLIENT_CPU=1   HEAP=1 (also count heap allocations per request, valgrind)
#   RESULTS_DIR=...  default bench/results/db-<timestamp>/
#
# Output in the results directory: runs.csv, table.md (also printed), env.txt, raw output.
# Every wrk run must have no errors and no non-2xx answers, or it is marked FAILED and the
# script exits 1.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DRIVERS=${DRIVERS:-"pg sqlite"}
if [[ " $DRIVERS " == *" pg "* && -z ${FLARE_TEST_PG_URL:-} ]]; then
    # a private cluster for the whole run, stopped when the run ends
    exec "$PY" "$BENCH_ROOT/tests/services.py" --pg -- bash "${BASH_SOURCE[0]}" "$@"
fi

DURATION=${DURATION:-5}
ROUNDS=${ROUNDS:-3}
CONNECTIONS=${CONNECTIONS:-64}
POOL=${POOL:-2}
THREADS=${THREADS:-4}
N=${N:-20}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
HEAP=${HEAP:-0}
SCENARIOS=${SCENARIOS:-"plaintext db queries fortunes updates"}
[[ $DURATION =~ ^[0-9]+$ && $DURATION -gt 0 ]] || die "DURATION must be a positive integer"
[[ $ROUNDS =~ ^[0-9]+$ && $ROUNDS -gt 0 ]] || die "ROUNDS must be a positive integer"

bench_init
ensure_tools wrk taskset
command -v psql >/dev/null || die "psql not found (Debian: postgresql-client)"
command -v sqlite3 >/dev/null || die "sqlite3 not found (Debian: sqlite3)"
build_bench
TFB=$BUILD_DIR/examples/tfb
[[ -x $TFB && -x $BENCH_BIN/db_null && -x $BENCH_BIN/sqlite_null ]] ||
    die "examples/tfb, bench/db_null or bench/sqlite_null did not build"
OUT=${RESULTS_DIR:-$BENCH_ROOT/bench/results/db-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
CSV=$OUT/runs.csv
echo "time,round,driver,scenario,what,requests_s,queries_s,cpu_us_per_req,status" >"$CSV"
{
    echo "date: $(date -Is)"
    echo "kernel: $(uname -r)"
    echo "cpus: $(nproc)"
    psql --version
    echo "sqlite: $(sqlite3 --version)"
    { wrk --version 2>&1 || true; } | head -1
    echo "DURATION=$DURATION ROUNDS=$ROUNDS CONNECTIONS=$CONNECTIONS POOL=$POOL THREADS=$THREADS N=$N"
} >"$OUT/env.txt"

statements() { # statements per request of a scenario
    case $1 in db | fortunes | plaintext) echo 1 ;; queries) echo "$N" ;; updates) echo $((N + 1)) ;; esac
}
route() {
    case $1 in db) echo /db ;; queries) echo "/queries?queries=$N" ;; fortunes) echo /fortunes ;;
    updates) echo "/updates?queries=$N" ;; plaintext) echo /plaintext ;; esac
}

failed=0
run_wrk() { # driver scenario round port pid
    local drv=$1 sc=$2 round=$3 port=$4 pid=$5 raw c0 c1 rps non2xx errs per st=ok
    raw=$OUT/wrk-$drv-$sc-$round.txt
    c0=$(cpu_us "$pid")
    taskset -c "$CLIENT_CPU" wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" \
        "http://127.0.0.1:$port$(route "$sc")" >"$raw" 2>&1 || st=FAILED
    c1=$(cpu_us "$pid")
    rps=$(awk '/^Requests\/sec:/ { print $2 }' "$raw")
    non2xx=$(awk '/Non-2xx or 3xx responses:/ { print $NF }' "$raw")
    errs=$(awk '/Socket errors:/ { print }' "$raw")
    [[ -n $rps && -z $non2xx && -z $errs ]] || st=FAILED
    local total
    total=$(awk '/requests in/ { print $1 }' "$raw")
    per=$(awk -v c=$((c1 - c0)) -v n="${total:-0}" 'BEGIN { printf "%.2f", (n > 0 ? c / n : 0) }')
    local q
    q=$(awk -v r="${rps:-0}" -v s="$(statements "$sc")" 'BEGIN { printf "%.0f", r * s }')
    echo "$(date -Is),$round,$drv,$sc,flare,${rps:-0},$q,$per,$st" >>"$CSV"
    [[ $st == ok ]] || { failed=1; warn "flare $drv $sc round $round FAILED (see $raw)"; }
    log "flare $drv $sc round $round: ${rps:-0} req/s, $q queries/s, $per µs CPU/request"
}

start_tfb() { # url port
    taskset -c "$SERVER_CPU" "$TFB" --listen "127.0.0.1:$2" --workers 1 --pool "$POOL" --db "$1" \
        >"$BENCH_TMP/tfb.log" 2>&1 &
    SERVER_PID=$!
    local i
    for ((i = 0; i < 100; i++)); do
        curl -sf "http://127.0.0.1:$2/db" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    cat "$BENCH_TMP/tfb.log" >&2
    die "examples/tfb did not answer /db"
}

heap_count() { # url port scenario: allocations per request, memcheck, two request counts
    local url=$1 port=$2 sc=$3 a=() n
    for n in 200 1200; do
        valgrind --tool=memcheck --leak-check=no --log-file="$BENCH_TMP/heap-$sc-$n.log" \
            "$TFB" --listen "127.0.0.1:$port" --workers 1 --pool "$POOL" --db "$url" \
            >/dev/null 2>&1 &
        local vp=$! i
        for ((i = 0; i < 300; i++)); do
            curl -sf "http://127.0.0.1:$port/plaintext" >/dev/null 2>&1 && break
            sleep 0.1
        done
        "$PY" - "$port" "$(route "$sc")" "$n" <<'EOF'
import http.client, sys
port, path, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
for _ in range(n):
    c.request("GET", path)
    r = c.getresponse()
    r.read()
    assert r.status == 200, r.status
EOF
        kill -TERM "$vp"
        wait "$vp" || true
        a+=("$(awk '/total heap usage/ { for (i = 1; i <= NF; i++) if ($i == "allocs,") print $(i - 1) }' \
            "$BENCH_TMP/heap-$sc-$n.log" | tr -d ,)")
    done
    awk -v a="${a[0]}" -v b="${a[1]}" 'BEGIN { printf "%.2f", (b - a) / 1000 }'
}

PORT=$(free_ports 1)
declare -A HEAPS=()
for drv in $DRIVERS; do
    case $drv in
    pg)
        url=$FLARE_TEST_PG_URL
        log "filling the TFB tables (PostgreSQL)"
        bash examples/tfb/setup.sh "$url"
        scs=$SCENARIOS
        ;;
    sqlite)
        url=sqlite:$BENCH_TMP/tfb.db
        log "filling the TFB tables (SQLite)"
        bash examples/tfb/setup.sh "$url"
        scs=""
        for sc in $SCENARIOS; do [[ $sc == db || $sc == fortunes || $sc == plaintext ]] && scs+="$sc "; done
        ;;
    *) die "unknown driver '$drv' (pg, sqlite)" ;;
    esac
    for sc in ${scs//,/ }; do
        for ((round = 1; round <= ROUNDS; round++)); do
            # the ceiling (none for plaintext: it is the HTTP cap itself)
            if [[ $sc == plaintext ]]; then
                :
            elif [[ $drv == pg ]]; then
                line=$(taskset -c "$SERVER_CPU" "$BENCH_BIN/db_null" --url "$url" --conns "$POOL" \
                    --inflight "$CONNECTIONS" --mode "$sc" --n "$N" --duration "$DURATION")
            else
                line=$(taskset -c "$SERVER_CPU" "$BENCH_BIN/sqlite_null" --path "${url#sqlite:}" \
                    --threads "$THREADS" --mode "$sc" --duration "$DURATION")
            fi
            if [[ $sc != plaintext ]]; then
                echo "$line" >"$OUT/ceiling-$drv-$sc-$round.txt"
                q=$(grep -oE '(queries_s|statements_s)=[0-9]+' <<<"$line" | cut -d= -f2)
                r=$(grep -oE 'req_s=[0-9]+' <<<"$line" | cut -d= -f2 || true)
                [[ -n $r ]] || r=$q
                echo "$(date -Is),$round,$drv,$sc,ceiling,$r,$q,,ok" >>"$CSV"
                log "ceiling $drv $sc round $round: $q queries/s"
            fi
            # flare
            start_tfb "$url" "$PORT"
            # warm: the prepared statements, the pool
            taskset -c "$CLIENT_CPU" wrk -t1 -c"$CONNECTIONS" -d1s "http://127.0.0.1:$PORT$(route "$sc")" \
                >/dev/null 2>&1 || true
            run_wrk "$drv" "$sc" "$round" "$PORT" "$SERVER_PID"
            stop_server "$SERVER_PID"
        done
        if [[ $HEAP == 1 ]]; then
            HEAPS[$drv/$sc]=$(heap_count "$url" "$PORT" "$sc")
            log "heap $drv $sc: ${HEAPS[$drv/$sc]} allocations/request"
        fi
    done
done

heap_args=()
for k in "${!HEAPS[@]}"; do heap_args+=("$k=${HEAPS[$k]}"); done
"$PY" - "$CSV" "$OUT/table.md" "${heap_args[@]}" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
heap = dict(a.split("=", 1) for a in sys.argv[3:])
out = ["| driver | scenario | ceiling queries/s | Flare req/s | Flare queries/s | ratio | "
       "Flare CPU µs/req | allocs/req |", "|---|---|---|---|---|---|---|---|"]
seen = []
for r in rows:
    k = (r["driver"], r["scenario"])
    if k not in seen:
        seen.append(k)
for drv, sc in seen:
    ok = [r for r in rows if (r["driver"], r["scenario"]) == (drv, sc) and r["status"] == "ok"]
    ceil = [float(r["queries_s"]) for r in ok if r["what"] == "ceiling"]
    fl = [r for r in ok if r["what"] == "flare"]
    if sc == "plaintext" and fl:
        rps = statistics.median(float(r["requests_s"]) for r in fl)
        cpu = statistics.median(float(r["cpu_us_per_req"]) for r in fl)
        out.append("| %s | plaintext (HTTP cap) | — | %.0f | — | — | %.1f | |" % (drv, rps, cpu))
        continue
    if not ceil or not fl:
        out.append("| %s | %s | FAILED | | | | | |" % (drv, sc))
        continue
    c = statistics.median(ceil)
    q = statistics.median(float(r["queries_s"]) for r in fl)
    rps = statistics.median(float(r["requests_s"]) for r in fl)
    cpu = statistics.median(float(r["cpu_us_per_req"]) for r in fl)
    out.append("| %s | %s | %.0f | %.0f | %.0f | %.2f | %.1f | %s |" % (
        drv, sc, c, rps, q, q / c, cpu, heap.get("%s/%s" % (drv, sc), "")))
text = "\n".join(out) + "\n\nMedians over the rounds; ratio = Flare's queries/s ÷ the ceiling's.\n"
open(sys.argv[2], "w").write(text)
print(text)
EOF
log "results in ${OUT#"$BENCH_ROOT"/}/"
exit "$failed"
