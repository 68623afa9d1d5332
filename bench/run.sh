#!/usr/bin/env bash
# bench/run.sh — throughput, server CPU per request and latency: Flare side by side with the
# null server (the kernel-path ceiling), nginx, h2o and lighttpd, over the scenarios below.
#
# usage (from the repository root):
#   bash bench/run.sh                                  # everything (about 15 minutes)
#   DURATION=3 ROUNDS=1 bash bench/run.sh              # quick look (about 4 minutes)
#   SCENARIOS=plaintext,pipeline SERVERS="flare null nginx" bash bench/run.sh
#   SCENARIOS=middleware,middleware-pipeline bash bench/run.sh   # the middleware cost only
#   SCENARIOS=static bash bench/run.sh                 # the static files only (4 KiB, 1 MiB)
#
# scenarios (SCENARIOS, comma- or space-separated; default: all of them, in this order):
#   plaintext            GET /plaintext, keep-alive, CONNECTIONS (64) connections
#   plaintext-512        the same with 512 connections
#   plaintext-4096       the same with 4,096 connections (the open-file limit is raised as far
#                        as the hard limit allows)
#   pipeline             GET /plaintext, CONNECTIONS connections, DEPTH (16) requests per write
#   json                 GET /json -> {"message":"Hello, World!"}
#   users                GET /users/123 -> {"id":"123"}, a path-parameter route (nginx: a regex
#                        location; h2o: an mruby handler; lighttpd: a mod_magnet Lua script)
#   echo                 POST /echo with a 1 KiB body, echoed with its Content-Type (flare; h2o
#                        with an mruby handler; nginx and lighttpd cannot echo a body without
#                        extra modules: n/a)
#   static-4k            GET /static/4k.bin, a 4,096-byte file, keep-alive, CONNECTIONS connections
#   static-1m            GET /static/1m.bin, a 1,048,576-byte file, keep-alive, CONNECTIONS_1M (16)
#                        connections. The two files are written once per run into the scratch
#                        dir with fixed content; flare (--static), nginx (alias, sendfile on), h2o
#                        (file.dir) and lighttpd (mod_alias) serve that directory under /static/,
#                        null-4k and null-1m answer with the same bytes from memory
#   middleware           Flare only: /mw/plaintext (behind 10 synchronous pass-through
#                        middlewares, "flare-mw") against /plaintext ("flare"), keep-alive,
#                        interleaved; reports the ratio of server CPU per request
#   middleware-pipeline  the same, DEPTH requests per write (user space's share is larger)
#   (aliases: keepalive = plaintext, pipelined = pipeline, static = static-4k and static-1m,
#   all = everything)
#
# environment:
#   DURATION=5        seconds per wrk run
#   ROUNDS=3          rounds; each round runs every scenario on every server, interleaved
#                     (flare null nginx h2o lighttpd flare null ...) so drift hits all alike
#   WARMUP=1          seconds of unrecorded wrk load per server and scenario before round 1
#   CONNECTIONS=64    wrk connections of the 64-connection scenarios (static-4k included)
#   CONNECTIONS_1M=16 wrk connections of static-1m
#   DEPTH=16          requests per write in the pipelined scenarios
#   SERVERS="flare null nginx h2o lighttpd"
#   SERVER_CPU=0 CLIENT_CPU=1   pinning (taskset); servers on one core, wrk -t1 on the other
#   NICE=-10          nice level of the servers and wrk, and of this session's scheduler
#                     autogroup (root only; 0 to disable), so that other work on a shared
#                     machine yields to the measurement
#   MW_REPEAT=2       times the middleware pair (flare, flare-mw) runs per round, alternating
#                     A B, B A, ...: more paired ratios for a small difference
#   CHART=1           render the chart with gnuplot (installed when missing); 0 to skip
#   RESULTS_DIR=...   default bench/results/<timestamp>/
#   KEEP_TMP=1        keep the scratch dir (server configs and logs) for inspection
#
# What it does: installs missing tools (apt), builds Flare in Release into build-bench/
# (examples/hello and bench/null_server), starts every server once on its own free port on
# 127.0.0.1 pinned to SERVER_CPU (the null server once per canned body: null, null-json,
# null-users, null-echo, null-4k, null-1m; all reported as "null"), checks each route answers
# 200 with the right body, then runs wrk pinned to CLIENT_CPU with bench/check.lua, which checks
# the status (exactly 200), body (for the static files: its length and every byte) and for echo
# the Content-Type of EVERY response. For each run it records wrk's request count, latency
# percentiles, and the server's CPU time (utime+stime of all its threads from /proc/PID/stat,
# before and after the run) and derives req/s, server CPU µs per request and the share of the
# core used.
#
# Output in bench/results/<timestamp>/: runs.csv (one row per run, and one "n/a" row per
# server a scenario does not apply to), wrk-*.txt (raw wrk output), env.txt, table.md (also
# printed: per scenario and server the medians and their ratios to the null server and to the
# best peer; the middleware ratio), summary.csv, and chart.png / chart.svg (CPU µs per request
# ÷ the null server's, per scenario and server; chart.gp and chart.dat to re-render it).
#
# A run with socket errors, non-2xx responses, a wrong body, zero requests or a dead server is
# marked FAILED (loudly), left out of the figures, and the script exits 1 at the end. A server
# whose binary is missing (e.g. Flare while it does not build) is skipped with a warning.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DURATION=${DURATION:-5}
ROUNDS=${ROUNDS:-3}
WARMUP=${WARMUP:-1}
CONNECTIONS=${CONNECTIONS:-64}
CONNECTIONS_1M=${CONNECTIONS_1M:-16}
DEPTH=${DEPTH:-16}
SERVERS=${SERVERS:-$ALL_SERVERS}
ALL_SCENARIOS="plaintext plaintext-512 plaintext-4096 pipeline json users echo static-4k static-1m"
ALL_SCENARIOS+=" middleware middleware-pipeline"
SCENARIOS=${SCENARIOS:-$ALL_SCENARIOS}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
NICE=${NICE:--10}
CHART=${CHART:-1}
MW_REPEAT=${MW_REPEAT:-2}

[[ $DURATION =~ ^[0-9]+$ && $DURATION -gt 0 ]] || die "DURATION must be a positive integer (seconds)"
[[ $ROUNDS =~ ^[0-9]+$ && $ROUNDS -gt 0 ]] || die "ROUNDS must be a positive integer"
[[ $WARMUP =~ ^[0-9]+$ ]] || die "WARMUP must be an integer (seconds)"
[[ $CONNECTIONS =~ ^[0-9]+$ && $CONNECTIONS -gt 0 ]] || die "CONNECTIONS must be a positive integer"
[[ $CONNECTIONS_1M =~ ^[0-9]+$ && $CONNECTIONS_1M -gt 0 ]] || die "CONNECTIONS_1M must be a positive integer"
[[ $DEPTH =~ ^[0-9]+$ && $DEPTH -gt 0 ]] || die "DEPTH must be a positive integer"
[[ $MW_REPEAT =~ ^[0-9]+$ && $MW_REPEAT -gt 0 ]] || die "MW_REPEAT must be a positive integer"

scenarios=()
for sel in ${SCENARIOS//,/ }; do
    case $sel in
    keepalive) sel=plaintext ;;
    pipelined) sel=pipeline ;;
    static) sel="static-4k static-1m" ;;
    all) sel=$ALL_SCENARIOS ;;
    esac
    for sc in $sel; do
        case " $ALL_SCENARIOS " in
        *" $sc "*) ;;
        *) die "unknown scenario '$sc' (known: $ALL_SCENARIOS; aliases: keepalive pipelined static all)" ;;
        esac
        case " ${scenarios[*]} " in *" $sc "*) continue ;; esac
        scenarios+=("$sc")
    done
done
((${#scenarios[@]})) || die "no scenario selected"

bench_init
tools=(wrk ps taskset curl cmake cc)
for s in $SERVERS; do
    case $s in nginx | h2o | lighttpd) tools+=("$s") ;; esac
done
[[ $CHART == 1 ]] && tools+=(gnuplot)
ensure_tools "${tools[@]}"
[[ " $SERVERS " == *" lighttpd "* ]] && ensure_magnet
raise_nofile 65536
build_bench

# shellcheck disable=SC2086 # SERVERS is a space-separated list
read -r -a servers <<<"$(filter_servers $SERVERS)"
((${#servers[@]})) || die "no server to benchmark"
has_server() { [[ " ${servers[*]} " == *" $1 "* ]]; }

# scenario_def SC: SC_PATH SC_CONNS SC_DEPTH SC_METHOD SC_EXPECT SC_NULL (the null instance),
# SC_BODYFILE SC_CTYPE (request body and its type), SC_EXPECT_FILE SC_EXPECT_LEN (the expected
# body as a file, and its length: the static files)
scenario_def() {
    SC_PATH=/plaintext SC_CONNS=$CONNECTIONS SC_DEPTH=1 SC_METHOD=GET SC_EXPECT=$BODY SC_NULL=null
    SC_BODYFILE='' SC_CTYPE='' SC_EXPECT_FILE='' SC_EXPECT_LEN=''
    case $1 in
    plaintext) ;;
    plaintext-512) SC_CONNS=512 ;;
    plaintext-4096) SC_CONNS=4096 ;;
    pipeline) SC_DEPTH=$DEPTH ;;
    json) SC_PATH=/json SC_EXPECT=$JSON_BODY SC_NULL=null-json ;;
    users) SC_PATH=/users/123 SC_EXPECT=$USERS_BODY SC_NULL=null-users ;;
    echo)
        SC_PATH=/echo SC_METHOD=POST SC_NULL=null-echo SC_BODYFILE=$ECHO_BODY_FILE SC_CTYPE=$ECHO_CTYPE
        SC_EXPECT=$(<"$ECHO_BODY_FILE")
        ;;
    static-4k)
        SC_PATH=/static/4k.bin SC_EXPECT='' SC_NULL=null-4k
        SC_EXPECT_FILE=$STATIC_DIR/4k.bin SC_EXPECT_LEN=$STATIC_4K_LEN
        ;;
    static-1m)
        SC_PATH=/static/1m.bin SC_CONNS=$CONNECTIONS_1M SC_EXPECT='' SC_NULL=null-1m
        SC_EXPECT_FILE=$STATIC_DIR/1m.bin SC_EXPECT_LEN=$STATIC_1M_LEN
        ;;
    middleware) SC_NULL='' ;;
    middleware-pipeline) SC_DEPTH=$DEPTH SC_NULL='' ;;
    esac
}

# targets_of SC -> TARGETS (labels, in order) and, per label, T_INST (server instance) and
# T_PATH; NA_REASON[label] for the servers the scenario does not apply to.
declare -A T_INST T_PATH NA_REASON
targets_of() {
    local sc=$1 s
    TARGETS=()
    NA_REASON=()
    scenario_def "$sc"
    case $sc in
    middleware | middleware-pipeline)
        if has_server flare; then
            TARGETS=(flare flare-mw)
            T_INST[flare]=flare T_PATH[flare]=/plaintext
            T_INST[flare-mw]=flare T_PATH[flare-mw]=/mw/plaintext
        fi
        return 0
        ;;
    esac
    for s in "${servers[@]}"; do
        case $sc/$s in
        echo/nginx) NA_REASON[$s]="cannot echo a request body without extra modules" ;;
        echo/lighttpd) NA_REASON[$s]="cannot echo a request body without extra modules (mod_magnet cannot read it in 1.4.69)" ;;
        users/lighttpd)
            lighttpd_has_magnet || NA_REASON[$s]="needs mod_magnet (lighttpd-modules-lua), not installed"
            ;;
        static-*/flare)
            flare_has_static || NA_REASON[$s]="examples/hello has no --static DIR (no static files)"
            ;;
        esac
        [[ -n ${NA_REASON[$s]:-} ]] && continue
        TARGETS+=("$s")
        T_INST[$s]=$s
        [[ $s == null ]] && T_INST[$s]=$SC_NULL
        [[ $s == null-uring ]] && T_INST[$s]=$SC_NULL-uring
        T_PATH[$s]=$SC_PATH
    done
}

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
make_echo_body "$OUT/echo-body.txt"
# The static scenarios' files, once per run; every server started below serves them under
# /static/ (whether or not a static scenario was selected, so the servers are set up alike).
make_static_dir "$BENCH_TMP/static"
CSV=$OUT/runs.csv
echo "timestamp,round,scenario,server,path,connections,depth,duration_s,requests,req_per_s,cpu_us,cpu_us_per_req,server_cpu_pct,server_core_busy_pct,client_core_busy_pct,latency_p50_us,latency_p99_us,socket_errors,non_2xx,bad_responses,status,note" >"$CSV"

# Which server instances do the selected scenarios need?
instances=()
for sc in "${scenarios[@]}"; do
    targets_of "$sc"
    if ((${#TARGETS[@]} == 0)); then
        warn "scenario $sc: no server to run it on (Flare missing?)"
    fi
    for t in "${TARGETS[@]}"; do
        i=${T_INST[$t]}
        [[ " ${instances[*]} " == *" $i "* ]] || instances+=("$i")
    done
    for s in "${!NA_REASON[@]}"; do
        echo "$(date -Is),0,$sc,$s,$SC_PATH,$SC_CONNS,$SC_DEPTH,0,0,0,0,0,0,0,0,,,0,0,0,n/a,${NA_REASON[$s]//,/;}" >>"$CSV"
    done
done

{
    echo "date: $(date -Is)"
    echo "kernel: $(uname -r)"
    echo "cpus: $(nproc) ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'))"
    echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "DURATION=$DURATION ROUNDS=$ROUNDS WARMUP=$WARMUP CONNECTIONS=$CONNECTIONS CONNECTIONS_1M=$CONNECTIONS_1M DEPTH=$DEPTH"
    echo "static files: $(cd "$STATIC_DIR" && sha256sum 4k.bin 1m.bin | awk '{ printf "%s%s sha256 %s", (NR > 1 ? ", " : ""), $2, $1 }')"
    echo "scenarios: ${scenarios[*]}"
    echo "open-file limit: $(ulimit -n)"
    echo "server: ${SRV_PIN[*]:-no wrapper}; wrk: ${CLI_PIN[*]:-no wrapper}"
    echo "wrk: $(wrk -v 2>&1 | head -1)"
    has_server nginx && echo "nginx: $(nginx -v 2>&1)"
    has_server h2o && echo "h2o: $(h2o --version 2>&1 | head -1)"
    has_server lighttpd && echo "lighttpd: $(lighttpd -v 2>&1 | head -1)"
    echo "servers: ${servers[*]} (instances: ${instances[*]})"
} >"$OUT/env.txt"
log "results in ${OUT#"$BENCH_ROOT"/}/"

declare -A PORT PID DEAD
read -r -a ports <<<"$(free_ports ${#instances[@]})"
i=0
for s in "${instances[@]}"; do
    PORT[$s]=${ports[$i]}
    i=$((i + 1))
    start_server "$s" "${PORT[$s]}" "${SRV_PIN[@]}"
    PID[$s]=$SERVER_PID
    DEAD[$s]=0
    wait_ready "$s" "${PID[$s]}" "${PORT[$s]}" 20 || die "$s did not start"
    log "$s ready: pid ${PID[$s]}, http://127.0.0.1:${PORT[$s]}/"
done

# wrk_cmd LABEL DURATION -> WRK array (scenario_def/targets_of of the scenario already run)
wrk_cmd() {
    local t=$1 d=$2 inst=${T_INST[$1]}
    local url="http://127.0.0.1:${PORT[$inst]}${T_PATH[$t]}"
    WRK=("${CLI_PIN[@]}" wrk -t1 "-c$SC_CONNS" "-d${d}s" --latency --timeout 5s
        -s "$BENCH_ROOT/bench/check.lua" "$url" -- "depth=$SC_DEPTH")
    if [[ $SC_METHOD == POST ]]; then
        WRK+=(method=POST "body_file=$SC_BODYFILE" "ctype=$SC_CTYPE" "expect_file=$SC_BODYFILE"
            "expect_ctype=$SC_CTYPE")
    elif [[ -n $SC_EXPECT_FILE ]]; then
        WRK+=("expect_file=$SC_EXPECT_FILE" "expect_len=$SC_EXPECT_LEN")
    else
        WRK+=("expect=$SC_EXPECT")
    fi
}

FAILURES=0
fail_run() {
    FAILURES=$((FAILURES + 1))
    printf '\n!!!!!!!! FAILED: %s\n\n' "$*" >&2
}

# wrk's latency ("812.00us", "1.25ms", "2.01s") in microseconds
to_us() {
    awk -v v="$1" 'BEGIN {
        if (v == "") { print ""; exit }
        n = v + 0
        if (v ~ /us$/) m = 1; else if (v ~ /ms$/) m = 1000; else if (v ~ /m$/) m = 60e6; else if (v ~ /s$/) m = 1e6; else m = 1
        printf "%.1f", n * m }'
}

if ((WARMUP > 0)); then
    for sc in "${scenarios[@]}"; do
        targets_of "$sc"
        for t in "${TARGETS[@]}"; do
            log "warm-up: $sc $t (${WARMUP}s)"
            wrk_cmd "$t" "$WARMUP"
            "${WRK[@]}" >"$OUT/wrk-warmup-$sc-$t.txt" 2>&1 || warn "warm-up of $t ($sc) failed, see wrk-warmup-$sc-$t.txt"
        done
    done
fi

T_START=$SECONDS
for round in $(seq 1 "$ROUNDS"); do
    for sc in "${scenarios[@]}"; do
        targets_of "$sc"
        # items: LABEL@RUN-TAG. The middleware pair runs MW_REPEAT times per round, in the
        # order A B, B A, A B, ... (tags 1.1, 1.2, ...), so drift cancels in the paired ratios.
        items=()
        if [[ $sc == middleware* ]] && ((${#TARGETS[@]} == 2)); then
            for rep in $(seq 1 "$MW_REPEAT"); do
                tag=$round
                ((MW_REPEAT > 1)) && tag=$round.$rep
                if ((((round - 1) * MW_REPEAT + rep) % 2 == 0)); then
                    items+=("${TARGETS[1]}@$tag" "${TARGETS[0]}@$tag")
                else
                    items+=("${TARGETS[0]}@$tag" "${TARGETS[1]}@$tag")
                fi
            done
        else
            for t in "${TARGETS[@]}"; do items+=("$t@$round"); done
        fi
        for item in "${items[@]}"; do
            t=${item%@*} rtag=${item##*@}
            inst=${T_INST[$t]}
            [[ ${DEAD[$inst]} == 1 ]] && continue
            pid=${PID[$inst]}
            raw=$OUT/wrk-$sc-$t-r$rtag.txt
            if ! kill -0 "$pid" 2>/dev/null; then
                DEAD[$inst]=1
                show_server_logs "$BENCH_TMP/$inst-${PORT[$inst]}"
                fail_run "$t ($inst) died (round $rtag, before $sc)"
                continue
            fi
            if ! check_route "${PORT[$inst]}" "$SC_METHOD" "${T_PATH[$t]}" "$SC_EXPECT" "$SC_BODYFILE" \
                "$SC_CTYPE" "$SC_EXPECT_FILE"; then
                fail_run "$t: $SC_METHOD ${T_PATH[$t]} check failed before round $rtag $sc (${CHECK_ERR:-no answer})"
            fi
            wrk_cmd "$t" "$DURATION"
            read -r sb0 st0 < <(cpu_jiffies "$SERVER_CPU")
            read -r cb0 ct0 < <(cpu_jiffies "$CLIENT_CPU")
            cpu0=$(cpu_us "$pid")
            wrk_rc=0
            "${WRK[@]}" >"$raw" 2>&1 || wrk_rc=$?
            # let the server finish closing the connections: part of the work
            sleep "$(awk -v c="$SC_CONNS" 'BEGIN { printf "%.2f", 0.2 + c / 8192 }')"
            read -r sb1 st1 < <(cpu_jiffies "$SERVER_CPU")
            read -r cb1 ct1 < <(cpu_jiffies "$CLIENT_CPU")
            score=$(awk -v b="$((sb1 - sb0))" -v t="$((st1 - st0))" 'BEGIN { printf "%.1f", (t > 0 ? 100 * b / t : 0) }')
            ccore=$(awk -v b="$((cb1 - cb0))" -v t="$((ct1 - ct0))" 'BEGIN { printf "%.1f", (t > 0 ? 100 * b / t : 0) }')
            if ! cpu1=$(cpu_us "$pid" 2>/dev/null); then
                cpu1=$cpu0
                DEAD[$inst]=1
            fi

            requests=$(awk '/ requests in / { print $1; exit }' "$raw")
            rps=$(awk '/^Requests\/sec:/ { print $2; exit }' "$raw")
            sock=$(awk '/Socket errors:/ { gsub(/,/, ""); print $4 + $6 + $8 + $10; exit }' "$raw")
            non2xx=$(awk '/Non-2xx or 3xx responses:/ { print $NF; exit }' "$raw")
            p50=$(awk '/Latency Distribution/ { d = 1 } d && $1 == "50%" { print $2; exit }' "$raw")
            p99=$(awk '/Latency Distribution/ { d = 1 } d && $1 == "99%" { print $2; exit }' "$raw")
            checked=$(awk '/^CHECK responses=/ { sub(/responses=/, "", $2); print $2; exit }' "$raw")
            bad=$(awk '/^CHECK responses=/ { sub(/bad=/, "", $3); print $3; exit }' "$raw")
            requests=${requests:-0} rps=${rps:-0} sock=${sock:-0} non2xx=${non2xx:-0}

            status=ok
            why=()
            ((wrk_rc == 0)) || why+=("wrk exit status $wrk_rc")
            ((requests > 0)) || why+=("no requests completed")
            ((sock == 0)) || why+=("$sock socket errors")
            ((non2xx == 0)) || why+=("$non2xx non-2xx responses")
            if [[ -z $bad ]]; then
                why+=("no CHECK line from bench/check.lua: responses not verified")
            elif ((bad > 0)); then
                why+=("$bad of $checked responses had a wrong status, body (length) or Content-Type")
            fi
            [[ ${DEAD[$inst]} == 0 ]] || why+=("server died")
            if ((${#why[@]})); then
                status=FAILED
                fail_run "$t $sc round $rtag: ${why[*]} (see ${raw#"$BENCH_ROOT"/})"
                grep -E 'Socket errors|Non-2xx|requests in|^CHECK' "$raw" >&2 || tail -n 5 "$raw" >&2
            fi

            read -r cpu per_req pct < <(awk -v c0="$cpu0" -v c1="$cpu1" -v n="$requests" -v r="$rps" 'BEGIN {
                cpu = c1 - c0
                per = n > 0 ? cpu / n : 0
                secs = (r > 0) ? n / r : 0
                pct = secs > 0 ? 100 * cpu / (secs * 1e6) : 0
                printf "%d %.3f %.1f\n", cpu, per, pct }')
            p50us=$(to_us "${p50:-}") p99us=$(to_us "${p99:-}")
            note=''
            [[ $inst != "$t" ]] && note="instance $inst"
            echo "$(date -Is),$rtag,$sc,$t,${T_PATH[$t]},$SC_CONNS,$SC_DEPTH,$DURATION,$requests,$rps,$cpu,$per_req,$pct,$score,$ccore,$p50us,$p99us,$sock,$non2xx,${bad:-},$status,$note" >>"$CSV"
            log "round $rtag $sc $t: $requests requests, $rps req/s, $per_req CPU µs/req, p50 ${p50:-?} p99 ${p99:-?}, server CPU ${pct}% (core $SERVER_CPU busy ${score}%, wrk core ${ccore}%) [$status]"
        done
    done
    log "round $round done ($((SECONDS - T_START)) s so far)"
done

for s in "${instances[@]}"; do
    stop_server "${PID[$s]}"
done

{
    echo "## Flare vs peers — $(date '+%Y-%m-%d %H:%M'), ${DURATION} s × $ROUNDS rounds, wrk -t1"
    echo
    echo "Server pinned to CPU $SERVER_CPU (one worker/process), wrk to CPU $CLIENT_CPU, both at nice $NICE;"
    echo "load average at the start: $(awk -F': ' '/^load average/ { print $2 }' "$OUT/env.txt")."
    echo "CPU µs/req = server utime+stime (all threads) / requests completed. Ratios: \"÷ null\" = that"
    echo "figure ÷ the null server's (same scenario, same canned body), \"÷ peer\" = ÷ the best of"
    echo "nginx/h2o/lighttpd for that figure (highest req/s, lowest CPU and latency). Medians over the"
    echo "rounds; every response was checked (status 200, body: for the static files its length and"
    echo "every byte; Content-Type for echo)."
    echo
    "$PY" "$BENCH_ROOT/bench/summarize.py" "$CSV" --out-dir "$OUT" -- "${servers[@]}"
} >"$OUT/table.md"

if [[ $CHART == 1 ]]; then
    if command -v gnuplot >/dev/null 2>&1 && [[ -s $OUT/chart.dat ]]; then
        if (cd "$OUT" && gnuplot chart.gp >"$OUT/gnuplot.log" 2>&1); then
            log "chart: ${OUT#"$BENCH_ROOT"/}/chart.png, chart.svg"
        else
            warn "gnuplot failed: $(tail -n 3 "$OUT/gnuplot.log")"
        fi
    else
        warn "no chart (gnuplot missing or no scenario with a null server)"
    fi
fi

echo
cat "$OUT/table.md"
log "results: ${OUT#"$BENCH_ROOT"/}/ (runs.csv, table.md, chart.png, raw wrk output); $((SECONDS - T_START)) s of measurement"

if ((FAILURES)); then
    printf '\n!!!!!!!! %d FAILED run(s) — see above. Figures exclude them.\n' "$FAILURES" >&2
    exit 1
fi
