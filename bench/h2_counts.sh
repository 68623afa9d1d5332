#!/usr/bin/env bash
# bench/h2_counts.sh — HTTP/2 stable counts next to HTTP/1.1's, on the same Flare build and the
# same server process: instructions per request (callgrind) and heap allocations per request
# once warm (memcheck), GET /plaintext on ONE connection.
#
# usage (from the repository root):
#   bash bench/h2_counts.sh
#   REQUESTS=2000 SECTIONS=callgrind bash bench/h2_counts.sh     # quick look
#
# environment:
#   SECTIONS="callgrind heap"
#   SCENARIOS="h1-keepalive h1-pipelined h2c-m1 h2c-m16"
#   REQUESTS=10000        measured requests per figure
#   WARMUP_REQUESTS=2000  requests of each scenario sent before counting (callgrind)
#   HEAP_BASE=1000        heap: the small run's request count (the big one is HEAP_BASE+REQUESTS)
#   DEPTH=16              h1-pipelined: requests per write; h2c-m16: concurrent streams
#   RESULTS_DIR=...       default bench/results/h2-counts-<timestamp>/      KEEP_TMP=1
#
# Scenarios (fixed-count clients, every response checked):
#   h1-keepalive  bench/reqclient, HTTP/1.1, one request at a time (as bench/counts.sh)
#   h1-pipelined  bench/reqclient, DEPTH requests per write (as bench/counts.sh)
#   h2c-m1        h2load -n REQUESTS -c1 -m1: h2c prior knowledge, one stream at a time
#   h2c-m16       h2load -n REQUESTS -c1 -mDEPTH: DEPTH concurrent streams
# An h2load run opens its own connection (preface, SETTINGS and their ACKs, GOAWAY at the end):
# that cost is in the h2c figures, spread over REQUESTS requests. h2load must report every
# request succeeded with a 2xx, or the figure is FAILED.
#
# Sections:
#   callgrind  the server under valgrind --tool=callgrind; each scenario warmed up; for each:
#              callgrind_control -z, exactly REQUESTS requests, callgrind_control -d; the
#              dump's "summary:" Ir / REQUESTS (user space only).
#   heap       memcheck's "total heap usage" of two fresh servers, after HEAP_BASE and after
#              HEAP_BASE+REQUESTS requests of the scenario; (difference) / REQUESTS.
#
# Output: a Markdown table on stdout and in the results directory (h2-counts.md), the raw
# numbers in h2-counts.csv, the raw tool outputs. Exits 1 if a measurement failed.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SECTIONS=${SECTIONS:-callgrind heap}
SCENARIOS=${SCENARIOS:-h1-keepalive h1-pipelined h2c-m1 h2c-m16}
REQUESTS=${REQUESTS:-10000}
WARMUP_REQUESTS=${WARMUP_REQUESTS:-2000}
HEAP_BASE=${HEAP_BASE:-1000}
DEPTH=${DEPTH:-16}
GAP_US=${GAP_US:-1000}

for v in REQUESTS WARMUP_REQUESTS HEAP_BASE DEPTH; do
    [[ ${!v} =~ ^[0-9]+$ && ${!v} -gt 0 ]] || die "$v must be a positive integer"
done
for sec in $SECTIONS; do
    case $sec in callgrind | heap) ;; *) die "unknown section '$sec' (callgrind heap)" ;; esac
done
for sc in $SCENARIOS; do
    case $sc in h1-keepalive | h1-pipelined | h2c-m1 | h2c-m16) ;; *) die "unknown scenario '$sc'" ;; esac
done

bench_init
ensure_tools valgrind callgrind_control curl cmake cc
if ! command -v h2load >/dev/null 2>&1; then
    [[ $(id -u) == 0 ]] || die "h2load missing (apt-get install -y nghttp2-client)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nghttp2-client >&2 ||
        die "apt-get install nghttp2-client failed"
fi
build_bench
server_available flare || die "the Flare release build failed: nothing to measure"

OUT=${RESULTS_DIR:-$BENCH_ROOT/bench/results/h2-counts-$(date +%Y%m%d-%H%M%S)}
RAW=$OUT/raw
mkdir -p "$RAW"
CSV=$OUT/h2-counts.csv
echo "section,scenario,metric,value" >"$CSV"
{
    echo "date: $(date -Is)"
    echo "kernel: $(uname -r)"
    echo "valgrind: $(valgrind --version); h2load: $(h2load --version 2>&1 | head -1)"
    echo "REQUESTS=$REQUESTS WARMUP_REQUESTS=$WARMUP_REQUESTS HEAP_BASE=$HEAP_BASE DEPTH=$DEPTH GAP_US=$GAP_US"
} >"$OUT/h2-counts-env.txt"
log "results in ${OUT#"$BENCH_ROOT"/}/"

RC=$BENCH_BIN/reqclient
declare -A VAL
FAILURES=0
record() { # section scenario metric value
    VAL[$1/$2/$3]=$4
    echo "$1,$2,$3,$4" >>"$CSV"
}
fail_measure() {
    FAILURES=$((FAILURES + 1))
    printf '\n!!!!!!!! FAILED: %s\n\n' "$*" >&2
}

# drive PORT SCENARIO N LOG: exactly N requests of SCENARIO on one connection, checked.
drive() {
    local port=$1 sc=$2 n=$3 out=$4
    case $sc in
    h1-keepalive | h1-pipelined)
        local depth=1
        [[ $sc == h1-pipelined ]] && depth=$DEPTH
        "$RC" --connect "127.0.0.1:$port" --requests "$n" --pipeline "$depth" --expect "$BODY" \
            --gap-us "$GAP_US" --quiet --timeout 120 >"$out" 2>&1 || {
            cat "$out" >&2
            return 1
        }
        ;;
    h2c-m1 | h2c-m16)
        local m=1
        [[ $sc == h2c-m16 ]] && m=$DEPTH
        h2load -t1 -c1 "-m$m" "-n$n" -T 120 "http://127.0.0.1:$port/plaintext" >"$out" 2>&1 || {
            tail -n 8 "$out" >&2
            return 1
        }
        local succ x2xx data
        succ=$(awk '/^requests:/ { print $8; exit }' "$out")
        x2xx=$(awk '/^status codes:/ { print $3; exit }' "$out")
        data=$(sed -n 's/^traffic:.*(\([0-9]*\)) data$/\1/p' "$out" | head -1)
        if [[ ${succ:-0} != "$n" || ${x2xx:-0} != "$n" || ${data:-0} != $((n * ${#BODY})) ]]; then
            echo "h2load: ${succ:-?} succeeded, ${x2xx:-?} 2xx, ${data:-?} data bytes for $n requests" >&2
            tail -n 8 "$out" >&2
            return 1
        fi
        ;;
    esac
}

measure_callgrind() {
    local port pid dir sc n=0 ir
    port=$(free_ports 1)
    start_server flare "$port" valgrind --tool=callgrind --dump-instr=no --dump-line=no \
        "--callgrind-out-file=$BENCH_TMP/flare-$port/callgrind.out"
    pid=$SERVER_PID dir=$SERVER_DIR
    wait_ready flare "$pid" "$port" 180 || { stop_server "$pid"; return 1; }
    for sc in $SCENARIOS; do
        drive "$port" "$sc" "$WARMUP_REQUESTS" "$dir/warmup-$sc.txt" ||
            { stop_server "$pid"; echo "warm-up $sc failed" >&2; return 1; }
    done
    for sc in $SCENARIOS; do
        callgrind_control -z "$pid" >>"$dir/callgrind_control.log" 2>&1 ||
            { stop_server "$pid"; echo "callgrind_control -z failed" >&2; return 1; }
        drive "$port" "$sc" "$REQUESTS" "$RAW/client-callgrind-$sc.txt" || { stop_server "$pid"; return 1; }
        callgrind_control -d "$pid" >>"$dir/callgrind_control.log" 2>&1 ||
            { stop_server "$pid"; echo "callgrind_control -d failed" >&2; return 1; }
        n=$((n + 1))
        local dump=$dir/callgrind.out.$n
        for _ in $(seq 1 100); do
            [[ -s $dump ]] && grep -q '^totals:' "$dump" && break
            sleep 0.1
        done
        ir=$(awk '/^summary:/ { print $2; exit }' "$dump" 2>/dev/null)
        [[ -n $ir ]] || { stop_server "$pid"; echo "no summary in $dump" >&2; return 1; }
        cp "$dump" "$RAW/callgrind-$sc.out"
        record callgrind "$sc" ir_per_req "$(awk -v a="$ir" -v n="$REQUESTS" 'BEGIN { printf "%.0f", a / n }')"
        log "callgrind $sc: $ir Ir / $REQUESTS requests = ${VAL[callgrind/$sc/ir_per_req]} Ir/request"
    done
    stop_server "$pid"
}

heap_run() { # SCENARIO N -> HEAP_ALLOCS HEAP_BYTES HEAP_ERRORS
    local sc=$1 n=$2 port pid vlog line
    port=$(free_ports 1)
    vlog=$BENCH_TMP/memcheck-$sc-$n.log
    start_server flare "$port" valgrind --tool=memcheck --leak-check=no "--log-file=$vlog"
    pid=$SERVER_PID
    wait_ready flare "$pid" "$port" 180 || { stop_server "$pid"; cat "$vlog" >&2; return 1; }
    local ok=1
    drive "$port" "$sc" "$n" "$RAW/client-heap-$sc-$n.txt" || ok=0
    stop_server "$pid"
    cp "$vlog" "$RAW/memcheck-$sc-$n.log"
    ((ok)) || return 1
    line=$(grep -m1 'total heap usage:' "$vlog" | tr -d ,)
    [[ -n $line ]] || { echo "no heap summary in $vlog" >&2; return 1; }
    HEAP_ERRORS=$(grep -m1 'ERROR SUMMARY:' "$vlog" | tr -d , | awk '{ for (i = 1; i <= NF; i++) if ($i == "SUMMARY:") print $(i + 1) }')
    read -r HEAP_ALLOCS HEAP_BYTES < <(awk '{ for (i = 1; i <= NF; i++) {
        if ($i == "allocs") a = $(i - 1); if ($i == "bytes") b = $(i - 1) } } END { print a, b }' <<<"$line")
}

measure_heap() {
    local sc a1 b1 a2 b2
    for sc in $SCENARIOS; do
        heap_run "$sc" "$HEAP_BASE" || { fail_measure "heap $sc (base)"; continue; }
        a1=$HEAP_ALLOCS b1=$HEAP_BYTES
        heap_run "$sc" "$((HEAP_BASE + REQUESTS))" || { fail_measure "heap $sc"; continue; }
        a2=$HEAP_ALLOCS b2=$HEAP_BYTES
        record heap "$sc" memcheck_errors "${HEAP_ERRORS:-?}"
        record heap "$sc" allocs_per_req "$(awk -v a="$a1" -v b="$a2" -v n="$REQUESTS" 'BEGIN { printf "%.3f", (b - a) / n }')"
        record heap "$sc" bytes_per_req "$(awk -v a="$b1" -v b="$b2" -v n="$REQUESTS" 'BEGIN { printf "%.1f", (b - a) / n }')"
        log "heap $sc: $a1 allocs after $HEAP_BASE requests, $a2 after $((HEAP_BASE + REQUESTS)): ${VAL[heap/$sc/allocs_per_req]} allocs/request"
    done
}

for sec in $SECTIONS; do
    case $sec in
    callgrind) measure_callgrind || fail_measure "callgrind" ;;
    heap) measure_heap ;;
    esac
done

v() { printf '%s' "${VAL[$1]:-FAILED}"; }
{
    echo "## HTTP/2 and HTTP/1.1 counts — $(date '+%Y-%m-%d %H:%M')"
    echo
    echo "Flare (examples/hello --workers 1), GET /plaintext on one connection, $REQUESTS measured requests."
    echo
    echo "| scenario | instructions/request | heap allocs/request | heap bytes/request | memcheck errors |"
    echo "|---|---:|---:|---:|---:|"
    for sc in $SCENARIOS; do
        case $sc in
        h1-keepalive) name="HTTP/1.1 keep-alive" ;;
        h1-pipelined) name="HTTP/1.1 pipelined ×$DEPTH" ;;
        h2c-m1) name="h2c, 1 stream at a time (h2load -c1 -m1)" ;;
        h2c-m16) name="h2c, $DEPTH concurrent streams (h2load -c1 -m$DEPTH)" ;;
        esac
        ir='–' al='–' by='–' er='–'
        [[ " $SECTIONS " == *" callgrind "* ]] && ir=$(v "callgrind/$sc/ir_per_req")
        if [[ " $SECTIONS " == *" heap "* ]]; then
            al=$(v "heap/$sc/allocs_per_req") by=$(v "heap/$sc/bytes_per_req") er=$(v "heap/$sc/memcheck_errors")
        fi
        echo "| $name | $ir | $al | $by | $er |"
    done
    echo
} >"$OUT/h2-counts.md"
echo
cat "$OUT/h2-counts.md"
log "results: ${OUT#"$BENCH_ROOT"/}/"
if ((FAILURES)); then
    printf '\n!!!!!!!! %d measurement(s) FAILED — see above.\n' "$FAILURES" >&2
    exit 1
fi
