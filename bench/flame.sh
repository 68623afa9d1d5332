#!/usr/bin/env bash
# bench/flame.sh — where Flare's time goes: a CPU profile of examples/hello under wrk load,
# as an interactive flame graph, a static SVG and a top-N self-time table.
#
# usage (from the repository root):
#   bash bench/flame.sh                          # /plaintext keep-alive and pipelined
#   SCENARIOS=plaintext DURATION=30 bash bench/flame.sh
#   DOCS=1 bash bench/flame.sh                   # also refresh docs/flame-plaintext.svg
#
# environment:
#   SCENARIOS="plaintext pipeline"   plaintext: GET /plaintext keep-alive, CONNECTIONS conns;
#                     pipeline: the same, DEPTH requests per write; json, users,
#                     mw (/mw/plaintext, 10 middlewares, keep-alive) also work
#   DURATION=20       seconds of recording per scenario (after WARMUP seconds of load)
#   WARMUP=2
#   CONNECTIONS=64 DEPTH=16
#   FREQ=999          perf sampling frequency (Hz, software clock: -e cpu-clock)
#   TOP=20            rows of the self-time table
#   SERVER_CPU=0 CLIENT_CPU=1 NICE=-10   as in bench/run.sh
#   PROF_BUILD_DIR=build-prof   RelWithDebInfo + frame pointers (-DFLARE_FRAME_POINTERS=ON)
#   DOCS=0            1: copy the plaintext SVG to docs/flame-plaintext.svg
#   RESULTS_DIR=...   default bench/results/flame-<timestamp>/
#
# What it does: installs what is missing (linux-perf, wrk, npm), builds examples/hello with
# frame pointers (RelWithDebInfo, LTO as in any optimized build) into build-prof/, starts it
# with one worker pinned to SERVER_CPU, puts wrk -t1 on CLIENT_CPU (bench/check.lua: every
# response checked), and after WARMUP seconds records
#   perf record -e cpu-clock -F 999 -g -p PID -- sleep DURATION
# (all the server's threads, user and kernel stacks). Then `perf script` is folded by
# bench/flame.py (no third-party code in the repository), and rendered:
#   flame-SC.html   interactive (d3-flame-graph and d3 from npm, installed at run time into a
#                   scratch directory and inlined: a single self-contained file)
#   flame-SC.svg    static flame graph (bench/flame.py's own SVG writer)
#   top-SC.md       kernel vs user share, samples per syscall, the top-TOP self-time table
#   folded-SC.txt   the folded stacks (input for any other flame graph tool)
# in bench/results/flame-<timestamp>/, and the tables are printed.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SCENARIOS=${SCENARIOS:-plaintext pipeline}
DURATION=${DURATION:-20}
WARMUP=${WARMUP:-2}
CONNECTIONS=${CONNECTIONS:-64}
DEPTH=${DEPTH:-16}
FREQ=${FREQ:-999}
TOP=${TOP:-20}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
NICE=${NICE:--10}
DOCS=${DOCS:-0}
PROF_BUILD_DIR=${PROF_BUILD_DIR:-$BENCH_ROOT/build-prof} # not lib.sh's BUILD_DIR (the release build)
FLARE_HELLO=$PROF_BUILD_DIR/examples/hello

for v in DURATION CONNECTIONS DEPTH FREQ TOP; do
    [[ ${!v} =~ ^[0-9]+$ && ${!v} -gt 0 ]] || die "$v must be a positive integer"
done
for sc in ${SCENARIOS//,/ }; do
    case $sc in plaintext | pipeline | json | users | mw) ;; *) die "unknown scenario '$sc' (plaintext pipeline json users mw)" ;; esac
done

bench_init
ensure_tools perf wrk taskset curl cmake cc
raise_nofile 65536
[[ -n ${RESULTS_DIR:-} ]] || RESULTS_DIR=$BENCH_ROOT/bench/results/flame-$(date +%Y%m%d-%H%M%S)
OUT=$(results_dir)
log "results in ${OUT#"$BENCH_ROOT"/}/"

log "building examples/hello (RelWithDebInfo, frame pointers) into ${PROF_BUILD_DIR#"$BENCH_ROOT"/}/"
blog=$OUT/build.log
if ! cmake -S . -B "$PROF_BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFLARE_FRAME_POINTERS=ON \
    -DFLARE_TESTS=OFF -DFLARE_WERROR=OFF -DFLARE_LTO=ON -DFLARE_SANITIZE= -DFLARE_FUZZ=OFF \
    -DFLARE_EXAMPLES=ON >"$blog" 2>&1 ||
    ! cmake --build "$PROF_BUILD_DIR" -j2 --target hello >>"$blog" 2>&1; then
    tail -n 20 "$blog" >&2
    die "the profiling build failed (see ${blog#"$BENCH_ROOT"/})"
fi
FLARE_BUILD_OK=1

# d3-flame-graph from npm, into the scratch dir (never into the repository).
HTML=1
NPM_DIR=$BENCH_TMP/npm
if command -v npm >/dev/null 2>&1; then
    mkdir -p "$NPM_DIR"
    log "npm install d3-flame-graph d3 (scratch: $NPM_DIR)"
    if ! (cd "$NPM_DIR" && npm init -y >/dev/null 2>&1 &&
        npm install --no-audit --no-fund --loglevel=error d3-flame-graph@5 d3@7 >"$OUT/npm.log" 2>&1); then
        warn "npm install failed (see ${OUT#"$BENCH_ROOT"/}/npm.log): no interactive HTML, SVG only"
        HTML=0
    fi
else
    warn "npm not available (apt-get install -y npm): no interactive HTML, SVG only"
    HTML=0
fi
FG_JS=$NPM_DIR/node_modules/d3-flame-graph/dist/d3-flamegraph.umd.min.js
FG_CSS=$NPM_DIR/node_modules/d3-flame-graph/dist/d3-flamegraph.css
D3_JS=$NPM_DIR/node_modules/d3/dist/d3.min.js
if ((HTML)) && [[ ! -s $FG_JS || ! -s $D3_JS ]]; then
    warn "d3-flame-graph's dist files not where expected: no interactive HTML"
    HTML=0
fi

SRV_PIN=() CLI_PIN=()
if [[ $NICE != 0 && $(id -u) == 0 ]]; then
    SRV_PIN=(nice -n "$NICE")
    CLI_PIN=(nice -n "$NICE")
    boost_priority "$NICE"
fi
if (($(nproc) >= 2)); then
    SRV_PIN+=(taskset -c "$SERVER_CPU")
    CLI_PIN+=(taskset -c "$CLIENT_CPU")
fi

{
    echo "date: $(date -Is)"
    echo "kernel: $(uname -r)"
    echo "perf: $(perf --version 2>&1)"
    echo "build: RelWithDebInfo, -DFLARE_FRAME_POINTERS=ON ($PROF_BUILD_DIR)"
    echo "scenarios: $SCENARIOS; DURATION=$DURATION WARMUP=$WARMUP FREQ=$FREQ CONNECTIONS=$CONNECTIONS DEPTH=$DEPTH"
    echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$OUT/env.txt"

FAILURES=0
for sc in ${SCENARIOS//,/ }; do
    path=/plaintext depth=1 expect=$BODY
    case $sc in
    pipeline) depth=$DEPTH ;;
    json) path=/json expect=$JSON_BODY ;;
    users) path=/users/123 expect=$USERS_BODY ;;
    mw) path=/mw/plaintext ;;
    esac
    port=$(free_ports 1)
    start_server flare "$port" "${SRV_PIN[@]}"
    pid=$SERVER_PID
    wait_ready flare "$pid" "$port" 20 || die "hello did not start"
    log "$sc: hello pid $pid on :$port; wrk -c$CONNECTIONS depth $depth for $((WARMUP + DURATION + 2)) s"
    "${CLI_PIN[@]}" wrk -t1 "-c$CONNECTIONS" "-d$((WARMUP + DURATION + 2))s" --latency --timeout 5s \
        -s "$BENCH_ROOT/bench/check.lua" "http://127.0.0.1:$port$path" -- "depth=$depth" "expect=$expect" \
        >"$OUT/wrk-$sc.txt" 2>&1 &
    wrk_pid=$!
    BENCH_PIDS+=("$wrk_pid")
    sleep "$WARMUP"
    log "$sc: perf record -e cpu-clock -F $FREQ -g -p $pid -- sleep $DURATION"
    if ! perf record -e cpu-clock -F "$FREQ" -g -p "$pid" -o "$OUT/perf-$sc.data" -- sleep "$DURATION" \
        >"$OUT/perf-record-$sc.log" 2>&1; then
        cat "$OUT/perf-record-$sc.log" >&2
        die "perf record failed"
    fi
    wait "$wrk_pid" || warn "wrk exited non-zero ($sc)"
    stop_server "$pid"
    bad=$(awk '/^CHECK responses=/ { sub(/bad=/, "", $3); print $3; exit }' "$OUT/wrk-$sc.txt")
    errs=$(awk '/Socket errors:|Non-2xx/ { print; exit }' "$OUT/wrk-$sc.txt")
    if [[ -z $bad || $bad != 0 || -n $errs ]]; then
        FAILURES=$((FAILURES + 1))
        printf '\n!!!!!!!! FAILED: %s: the server did not answer every request correctly under load (%s)\n\n' \
            "$sc" "${errs:-bad responses: ${bad:-unknown}}" >&2
    fi
    rps=$(awk '/^Requests\/sec:/ { print $2; exit }' "$OUT/wrk-$sc.txt")

    perf script -i "$OUT/perf-$sc.data" >"$OUT/perf-$sc.txt" 2>"$OUT/perf-script-$sc.log" ||
        die "perf script failed: $(tail -n 3 "$OUT/perf-script-$sc.log")"
    "$PY" "$BENCH_ROOT/bench/flame.py" fold "$OUT/perf-$sc.txt" >"$OUT/folded-$sc.txt"
    rm -f "$OUT/perf-$sc.txt" # large; perf-SC.data stays for perf report
    [[ -s $OUT/folded-$sc.txt ]] || die "no samples recorded for $sc"
    title="Flare examples/hello, GET $path, $CONNECTIONS connections, $depth per write ($(date '+%Y-%m-%d'))"
    {
        echo "### Flame graph: GET $path, $CONNECTIONS connections, $depth request(s) per write"
        echo
        echo "hello with 1 worker pinned to CPU $SERVER_CPU, wrk on CPU $CLIENT_CPU (${rps:-?} req/s during the run),"
        echo "perf record -e cpu-clock -F $FREQ -g for $DURATION s, RelWithDebInfo + frame pointers."
        echo
        "$PY" "$BENCH_ROOT/bench/flame.py" top "$OUT/folded-$sc.txt" -n "$TOP"
    } >"$OUT/top-$sc.md"
    "$PY" "$BENCH_ROOT/bench/flame.py" svg "$OUT/folded-$sc.txt" --title "$title" >"$OUT/flame-$sc.svg"
    if ((HTML)); then
        "$PY" "$BENCH_ROOT/bench/flame.py" html "$OUT/folded-$sc.txt" --d3 "$D3_JS" --fg "$FG_JS" \
            --css "$FG_CSS" --title "$title" --top "$OUT/top-$sc.md" >"$OUT/flame-$sc.html"
    fi
    echo
    cat "$OUT/top-$sc.md"
    log "$sc: ${OUT#"$BENCH_ROOT"/}/flame-$sc.svg$( ((HTML)) && echo ", flame-$sc.html")"
    if [[ $DOCS == 1 && $sc == plaintext ]]; then
        "$PY" "$BENCH_ROOT/bench/flame.py" svg "$OUT/folded-$sc.txt" --title "$title" --min-pct 0.25 \
            >"$BENCH_ROOT/docs/flame-plaintext.svg"
        log "docs/flame-plaintext.svg updated"
    fi
done

log "done: ${OUT#"$BENCH_ROOT"/}/ (flame-*.html interactive, flame-*.svg, top-*.md, perf-*.data for perf report -i)"
if ((FAILURES)); then
    printf '\n!!!!!!!! %d scenario(s) FAILED — see above.\n' "$FAILURES" >&2
    exit 1
fi
