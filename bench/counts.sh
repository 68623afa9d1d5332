#!/usr/bin/env bash
# bench/counts.sh — the stable counts: figures that do not depend on how noisy the machine is.
#
# usage (from the repository root):
#   bash bench/counts.sh
#   SERVERS="flare null" SECTIONS="callgrind heap" bash bench/counts.sh
#   REQUESTS=2000 IDLE_CONNS=1000 bash bench/counts.sh     # quick look
#
# environment:
#   SERVERS="flare null nginx"   any of: flare null nginx h2o lighttpd
#   SECTIONS="callgrind strace heap idle"
#   REQUESTS=20000        measured requests per scenario (a multiple of DEPTH keeps batches whole)
#   WARMUP_REQUESTS=2000  requests sent before counting (callgrind, strace)
#   HEAP_BASE=1000        heap: the small run's request count (the big one is HEAP_BASE+REQUESTS)
#   DEPTH=16              pipelined scenario: requests per write
#   IDLE_CONNS=10000      idle section: keep-alive connections held open
#   IDLE_HOLD=5           idle section: seconds the client holds them
#   GAP_US=1000           pause between batches (see below)
#   RESULTS_DIR=...       default bench/results/<timestamp>/
#   KEEP_TMP=1            keep the scratch dir (configs, valgrind/strace logs)
#
# Scenarios (all on ONE connection, driven by bench/reqclient, which sends an exact number of
# requests in wrk's format and checks every response is 200 "Hello, World!"):
#   keepalive  one request at a time, next one after the response
#   pipelined  DEPTH requests per write, then their DEPTH responses
# The client pauses GAP_US microseconds after each batch of responses, so the server has
# always drained its socket and gone back to epoll when the next batch arrives. Without it
# the counts depend on timing: a server that tries to read again right after writing (e.g.
# lighttpd) finds the next request already there when strace/valgrind slow it down, and its
# EAGAIN read and epoll_wait vanish from the count.
#
# Sections:
#   callgrind  instructions per request (user space only; the kernel's share is not in it).
#              Server under valgrind --tool=callgrind; warm up; callgrind_control -z; exactly
#              REQUESTS requests; callgrind_control -d; "summary:" Ir of that dump / REQUESTS.
#   strace     syscalls per request: strace -f -c attached (-p, all threads) around REQUESTS
#              requests, after a warm-up; read / write / epoll_wait / other per request.
#   heap       heap allocations per request once warm: valgrind memcheck's "total heap usage"
#              after HEAP_BASE and after HEAP_BASE+REQUESTS requests (two fresh servers);
#              (difference) / REQUESTS. 0 is the goal. Also bytes allocated per request.
#   idle       bytes per idle keep-alive connection: VmRSS before, and while reqclient holds
#              IDLE_CONNS connections that each served one request; (after-before)/IDLE_CONNS.
#              RSS is user memory only: the kernel's socket buffers are not in it.
#
# Output: a Markdown table on stdout and in bench/results/<timestamp>/counts.md, the raw
# numbers in counts.csv, and the raw tool outputs. A measurement that fails is reported
# loudly, shown as FAILED in the table, and makes the script exit 1 at the end.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SERVERS=${SERVERS:-flare null nginx}
SECTIONS=${SECTIONS:-callgrind strace heap idle}
REQUESTS=${REQUESTS:-20000}
WARMUP_REQUESTS=${WARMUP_REQUESTS:-2000}
HEAP_BASE=${HEAP_BASE:-1000}
DEPTH=${DEPTH:-16}
IDLE_CONNS=${IDLE_CONNS:-10000}
IDLE_HOLD=${IDLE_HOLD:-5}
GAP_US=${GAP_US:-1000}
SCENARIOS="keepalive pipelined"

[[ $GAP_US =~ ^[0-9]+$ ]] || die "GAP_US must be an integer (microseconds)"
for v in REQUESTS WARMUP_REQUESTS HEAP_BASE DEPTH IDLE_CONNS IDLE_HOLD; do
    [[ ${!v} =~ ^[0-9]+$ && ${!v} -gt 0 ]] || die "$v must be a positive integer"
done
for sec in $SECTIONS; do
    case $sec in callgrind | strace | heap | idle) ;; *) die "unknown section '$sec'" ;; esac
done

bench_init
ensure_tools nginx h2o lighttpd valgrind callgrind_control strace ps taskset curl cmake cc
raise_nofile 65536
build_bench

# shellcheck disable=SC2086 # SERVERS is a space-separated list
read -r -a servers <<<"$(filter_servers $SERVERS)"
((${#servers[@]})) || die "no server to measure"

OUT=$(results_dir)
RAW=$OUT/counts-raw
mkdir -p "$RAW"
CSV=$OUT/counts.csv
echo "section,server,scenario,metric,value" >"$CSV"
{
    echo "date: $(date -Is)"
    echo "kernel: $(uname -r)"
    echo "valgrind: $(valgrind --version)  strace: $(strace -V | head -1)"
    echo "REQUESTS=$REQUESTS WARMUP_REQUESTS=$WARMUP_REQUESTS HEAP_BASE=$HEAP_BASE DEPTH=$DEPTH GAP_US=$GAP_US IDLE_CONNS=$IDLE_CONNS"
    echo "servers: ${servers[*]}"
} >"$OUT/counts-env.txt"
log "results in ${OUT#"$BENCH_ROOT"/}/"

RC=$BENCH_BIN/reqclient
declare -A VAL # VAL[section/server/scenario/metric]
FAILURES=0
fail_measure() {
    FAILURES=$((FAILURES + 1))
    printf '\n!!!!!!!! FAILED: %s\n\n' "$*" >&2
}
record() { # section server scenario metric value
    VAL[$1/$2/$3/$4]=$5
    echo "$1,$2,$3,$4,$5" >>"$CSV"
}
depth_of() { [[ $1 == pipelined ]] && echo "$DEPTH" || echo 1; }

# reqclient_run PORT N SCENARIO [extra args]: exactly N requests on one connection.
reqclient_run() {
    local port=$1 n=$2 sc=$3
    shift 3
    "$RC" --connect "127.0.0.1:$port" --requests "$n" --pipeline "$(depth_of "$sc")" \
        --expect "$BODY" --gap-us "$GAP_US" --quiet "$@"
}

# Instructions per request --------------------------------------------------------------
measure_callgrind() {
    local s=$1 port pid dir sc n
    port=$(free_ports 1)
    start_server "$s" "$port" valgrind --tool=callgrind --dump-instr=no --dump-line=no \
        "--callgrind-out-file=$BENCH_TMP/$s-$port/callgrind.out"
    pid=$SERVER_PID dir=$SERVER_DIR
    wait_ready "$s" "$pid" "$port" 180 || { stop_server "$pid"; return 1; }
    for sc in $SCENARIOS; do
        reqclient_run "$port" "$WARMUP_REQUESTS" "$sc" --timeout 120 ||
            { stop_server "$pid"; echo "warm-up failed" >&2; return 1; }
    done
    n=0
    for sc in $SCENARIOS; do
        callgrind_control -z "$pid" >>"$dir/callgrind_control.log" 2>&1 ||
            { stop_server "$pid"; echo "callgrind_control -z failed" >&2; return 1; }
        reqclient_run "$port" "$REQUESTS" "$sc" --timeout 120 ||
            { stop_server "$pid"; return 1; }
        callgrind_control -d "$pid" >>"$dir/callgrind_control.log" 2>&1 ||
            { stop_server "$pid"; echo "callgrind_control -d failed" >&2; return 1; }
        n=$((n + 1))
        local dump=$dir/callgrind.out.$n
        for _ in $(seq 1 100); do
            [[ -s $dump ]] && grep -q '^totals:' "$dump" && break
            sleep 0.1
        done
        local ir
        ir=$(awk '/^summary:/ { print $2; exit }' "$dump" 2>/dev/null)
        [[ -n $ir ]] || { stop_server "$pid"; echo "no summary in $dump" >&2; return 1; }
        cp "$dump" "$RAW/callgrind-$s-$sc.out"
        record callgrind "$s" "$sc" ir_total "$ir"
        record callgrind "$s" "$sc" ir_per_req "$(awk -v a="$ir" -v n="$REQUESTS" 'BEGIN { printf "%.0f", a / n }')"
        log "callgrind $s $sc: $ir Ir / $REQUESTS requests = ${VAL[callgrind/$s/$sc/ir_per_req]} Ir/request"
    done
    stop_server "$pid"
}

# Syscalls per request -------------------------------------------------------------------
measure_strace() {
    local s=$1 port pid dir sc
    port=$(free_ports 1)
    start_server "$s" "$port"
    pid=$SERVER_PID dir=$SERVER_DIR
    wait_ready "$s" "$pid" "$port" 20 || { stop_server "$pid"; return 1; }
    for sc in $SCENARIOS; do
        reqclient_run "$port" "$WARMUP_REQUESTS" "$sc" || { stop_server "$pid"; return 1; }
    done
    for sc in $SCENARIOS; do
        local out=$dir/strace-$sc.txt err=$dir/strace-$sc.err spid
        strace -f -c -U name,calls -o "$out" -p "$pid" 2>"$err" &
        spid=$!
        for _ in $(seq 1 100); do
            grep -q 'attached' "$err" 2>/dev/null && break
            kill -0 "$spid" 2>/dev/null || break
            sleep 0.1
        done
        if ! grep -q 'attached' "$err"; then
            kill -INT "$spid" 2>/dev/null || true
            wait "$spid" 2>/dev/null || true
            cat "$err" >&2
            stop_server "$pid"
            echo "strace could not attach" >&2
            return 1
        fi
        sleep 0.3
        local ok=1
        reqclient_run "$port" "$REQUESTS" "$sc" || ok=0
        sleep 0.3
        kill -INT "$spid" 2>/dev/null || true
        wait "$spid" 2>/dev/null || true
        ((ok)) || { stop_server "$pid"; return 1; }
        cp "$out" "$RAW/strace-$s-$sc.txt"
        # "name calls" rows between the dashes; group them.
        local line
        line=$(awk -v n="$REQUESTS" '
            /^-/ || /^syscall/ || /^total/ || NF < 2 { next }
            {
                c = $2; name = $1; total += c
                if (name ~ /^(read|readv|recvfrom|recvmsg|recvmmsg)$/) rd += c
                else if (name ~ /^(write|writev|sendto|sendmsg|sendmmsg|sendfile|sendfile64|splice)$/) wr += c
                else if (name ~ /^(epoll_wait|epoll_pwait|epoll_pwait2)$/) ep += c
                else { other += c; per[name] += c }
            }
            END {
                top = ""
                for (k = 0; k < 3; k++) {
                    best = ""; bv = 0
                    for (x in per) if (per[x] > bv) { bv = per[x]; best = x }
                    if (best == "" || bv / n < 0.01) break
                    top = top (top == "" ? "" : " ") sprintf("%s:%.2f", best, bv / n)
                    delete per[best]
                }
                printf "%.3f %.3f %.3f %.3f %.3f %s\n", rd / n, wr / n, ep / n, other / n, total / n, (top == "" ? "-" : top)
            }' "$out")
        local rd wr ep other total top
        read -r rd wr ep other total top <<<"$line"
        record strace "$s" "$sc" read "$rd"
        record strace "$s" "$sc" write "$wr"
        record strace "$s" "$sc" epoll_wait "$ep"
        record strace "$s" "$sc" other "$other"
        record strace "$s" "$sc" total "$total"
        record strace "$s" "$sc" other_top "$top"
        log "strace $s $sc: per request read $rd write $wr epoll_wait $ep other $other ($top)"
    done
    stop_server "$pid"
}

# Heap allocations per request -----------------------------------------------------------
heap_run() { # SERVER SCENARIO N -> HEAP_ALLOCS HEAP_BYTES HEAP_ERRORS (no subshell: the trap must see the pid)
    local s=$1 sc=$2 n=$3 port pid dir vlog
    port=$(free_ports 1)
    vlog=$BENCH_TMP/memcheck-$s-$sc-$n.log
    start_server "$s" "$port" valgrind --tool=memcheck --leak-check=no "--log-file=$vlog"
    pid=$SERVER_PID dir=$SERVER_DIR
    wait_ready "$s" "$pid" "$port" 180 || { stop_server "$pid"; cat "$vlog" >&2; return 1; }
    local ok=1
    reqclient_run "$port" "$n" "$sc" --timeout 120 || ok=0
    stop_server "$pid"
    cp "$vlog" "$RAW/memcheck-$s-$sc-$n.log"
    ((ok)) || return 1
    local line
    line=$(grep -m1 'total heap usage:' "$vlog" | tr -d ,)
    [[ -n $line ]] || { echo "no heap summary in $vlog" >&2; tail -n 20 "$vlog" >&2; return 1; }
    # "==PID==   total heap usage: A allocs F frees B bytes allocated"
    HEAP_ERRORS=$(grep -m1 'ERROR SUMMARY:' "$vlog" | tr -d , | awk '{ for (i = 1; i <= NF; i++) if ($i == "SUMMARY:") print $(i + 1) }')
    HEAP_ERRORS=${HEAP_ERRORS:-?}
    read -r HEAP_ALLOCS HEAP_BYTES < <(awk '{ for (i = 1; i <= NF; i++) {
        if ($i == "allocs") a = $(i - 1); if ($i == "bytes") b = $(i - 1) } } END { print a, b }' <<<"$line")
}

measure_heap() {
    local s=$1 sc a1 b1 a2 b2
    for sc in $SCENARIOS; do
        heap_run "$s" "$sc" "$HEAP_BASE" || return 1
        a1=$HEAP_ALLOCS b1=$HEAP_BYTES
        heap_run "$s" "$sc" "$((HEAP_BASE + REQUESTS))" || return 1
        a2=$HEAP_ALLOCS b2=$HEAP_BYTES
        record heap "$s" "$sc" memcheck_errors "$HEAP_ERRORS"
        [[ $HEAP_ERRORS == 0 ]] || warn "memcheck reports $HEAP_ERRORS error(s) for $s ($sc): see counts-raw/memcheck-$s-$sc-$((HEAP_BASE + REQUESTS)).log"
        record heap "$s" "$sc" allocs_base "$a1"
        record heap "$s" "$sc" allocs_big "$a2"
        record heap "$s" "$sc" allocs_per_req "$(awk -v a="$a1" -v b="$a2" -v n="$REQUESTS" 'BEGIN { printf "%.3f", (b - a) / n }')"
        record heap "$s" "$sc" bytes_per_req "$(awk -v a="$b1" -v b="$b2" -v n="$REQUESTS" 'BEGIN { printf "%.1f", (b - a) / n }')"
        log "heap $s $sc: $a1 allocs after $HEAP_BASE requests, $a2 after $((HEAP_BASE + REQUESTS)): ${VAL[heap/$s/$sc/allocs_per_req]} allocs/request"
    done
}

# Bytes per idle keep-alive connection ---------------------------------------------------
measure_idle() {
    local s=$1 port pid dir nofile per=1 conns=$IDLE_CONNS
    nofile=$(ulimit -n)
    [[ $nofile =~ ^[0-9]+$ ]] || nofile=1048576
    [[ $s == lighttpd ]] && per=2 # lighttpd keeps half its descriptors for files
    if ((nofile < per * conns + 64)); then
        conns=$(((nofile - 64) / per))
        if ((conns < 1000)); then
            warn "idle: $s skipped: an open-file limit of $nofile allows only $conns connections"
            VAL[idle/$s/skipped]=1
            return 0
        fi
        warn "idle: $s measured with $conns connections, not $IDLE_CONNS: it needs $((per * IDLE_CONNS + 64)) descriptors, the limit is $nofile"
    fi
    port=$(free_ports 1)
    start_server "$s" "$port"
    pid=$SERVER_PID dir=$SERVER_DIR
    wait_ready "$s" "$pid" "$port" 20 || { stop_server "$pid"; return 1; }
    # Warm: pools, first-connection lazy setup.
    "$RC" --connect "127.0.0.1:$port" --idle 100 --hold 0 --expect "$BODY" --quiet --timeout 10 >/dev/null ||
        { stop_server "$pid"; return 1; }
    sleep 0.5
    local before after cpid out=$dir/idle.out
    before=$(rss_kb "$pid")
    "$RC" --connect "127.0.0.1:$port" --idle "$conns" --hold "$IDLE_HOLD" --expect "$BODY" \
        --timeout 10 >"$out" 2>"$dir/idle.err" &
    cpid=$!
    for _ in $(seq 1 1200); do
        grep -q READY "$out" 2>/dev/null && break
        kill -0 "$cpid" 2>/dev/null || break
        sleep 0.1
    done
    if ! grep -q READY "$out"; then
        wait "$cpid" 2>/dev/null || true
        cat "$dir/idle.err" >&2
        stop_server "$pid"
        echo "the client could not open $conns connections" >&2
        return 1
    fi
    sleep 1
    after=$(rss_kb "$pid")
    local crc=0
    wait "$cpid" || crc=$?
    cat "$dir/idle.err" >&2
    stop_server "$pid"
    ((crc == 0)) || { echo "reqclient --idle exited $crc" >&2; return 1; }
    if grep -q 'closed' "$dir/idle.err"; then
        echo "the server closed idle connections while they were held" >&2
        return 1
    fi
    record idle "$s" idle connections "$conns"
    record idle "$s" idle rss_before_kb "$before"
    record idle "$s" idle rss_after_kb "$after"
    record idle "$s" idle bytes_per_conn "$(awk -v a="$before" -v b="$after" -v n="$conns" 'BEGIN { printf "%.0f", (b - a) * 1024 / n }')"
    log "idle $s: VmRSS $before KiB -> $after KiB with $conns connections: ${VAL[idle/$s/idle/bytes_per_conn]} bytes/connection"
}

for sec in $SECTIONS; do
    for s in "${servers[@]}"; do
        log "== $sec: $s"
        if ! "measure_$sec" "$s"; then
            fail_measure "$sec for $s"
            VAL[$sec/$s/failed]=1
        fi
    done
done

# Table ----------------------------------------------------------------------------------
v() { # key -> value, or FAILED / –
    local key=$1 sec=${1%%/*} rest=${1#*/}
    local srv=${rest%%/*}
    if [[ -n ${VAL[$key]:-} ]]; then
        printf '%s' "${VAL[$key]}"
    elif [[ -n ${VAL[$sec/$srv/failed]:-} ]]; then
        printf 'FAILED'
    elif [[ -n ${VAL[$sec/$srv/skipped]:-} ]]; then
        printf 'skipped'
    else
        printf '–'
    fi
}
has() { [[ " $SECTIONS " == *" $1 "* ]]; }
{
    echo "## Stable counts — $(date '+%Y-%m-%d %H:%M')"
    echo
    echo "One connection; keep-alive = one request at a time; pipelined = $DEPTH requests per write;"
    echo "the client pauses ${GAP_US} µs between batches (the server always waits in epoll for the next one)."
    echo "$REQUESTS measured requests per figure (after $WARMUP_REQUESTS warm-up requests where it applies)."
    echo
    if has callgrind; then
        echo "### Instructions per request (callgrind, user space only)"
        echo
        echo "| server | keep-alive | pipelined ×$DEPTH |"
        echo "|---|---:|---:|"
        for s in "${servers[@]}"; do
            echo "| $s | $(v "callgrind/$s/keepalive/ir_per_req") | $(v "callgrind/$s/pipelined/ir_per_req") |"
        done
        echo
    fi
    if has strace; then
        echo "### Syscalls per request (strace -f -c)"
        echo
        echo "| server | scenario | read | write | epoll_wait | other | total | largest others |"
        echo "|---|---|---:|---:|---:|---:|---:|---|"
        for s in "${servers[@]}"; do
            for sc in $SCENARIOS; do
                k=strace/$s/$sc
                echo "| $s | $sc | $(v "$k/read") | $(v "$k/write") | $(v "$k/epoll_wait") | $(v "$k/other") | $(v "$k/total") | $(v "$k/other_top") |"
            done
        done
        echo
    fi
    if has heap; then
        echo "### Heap allocations per request once warm (memcheck: ($((HEAP_BASE + REQUESTS)) − $HEAP_BASE requests) / $REQUESTS)"
        echo
        echo "| server | keep-alive allocs/req | keep-alive bytes/req | pipelined allocs/req | pipelined bytes/req | memcheck errors |"
        echo "|---|---:|---:|---:|---:|---:|"
        for s in "${servers[@]}"; do
            echo "| $s | $(v "heap/$s/keepalive/allocs_per_req") | $(v "heap/$s/keepalive/bytes_per_req") | $(v "heap/$s/pipelined/allocs_per_req") | $(v "heap/$s/pipelined/bytes_per_req") | $(v "heap/$s/keepalive/memcheck_errors") / $(v "heap/$s/pipelined/memcheck_errors") |"
        done
        echo
    fi
    if has idle; then
        echo "### Memory per idle keep-alive connection (VmRSS; kernel socket memory not included)"
        echo
        echo "| server | idle connections | RSS before (KiB) | RSS with them (KiB) | bytes/connection |"
        echo "|---|---:|---:|---:|---:|"
        for s in "${servers[@]}"; do
            echo "| $s | $(v "idle/$s/idle/connections") | $(v "idle/$s/idle/rss_before_kb") | $(v "idle/$s/idle/rss_after_kb") | $(v "idle/$s/idle/bytes_per_conn") |"
        done
        echo
    fi
} >"$OUT/counts.md"
echo
cat "$OUT/counts.md"
log "results: ${OUT#"$BENCH_ROOT"/}/ (counts.md, counts.csv, counts-raw/)"

if ((FAILURES)); then
    printf '\n!!!!!!!! %d measurement(s) FAILED — see above.\n' "$FAILURES" >&2
    exit 1
fi
