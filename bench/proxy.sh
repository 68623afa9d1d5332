#!/usr/bin/env bash
# bench/proxy.sh — the reverse proxy: examples/gateway against nginx's proxy_pass and h2o's
# proxy.reverse.url, configured alike (one worker, keep-alive to the upstream), in front of
# the same upstream (examples/hello, /plaintext), in one run, alternating.
#
# The proxy is pinned to SERVER_CPU; the upstream and wrk share the other core. What is
# compared is the proxy's own CPU time per proxied request (utime+stime over a wrk run /
# requests answered, every answer checked by bench/check.lua), the median of ROUNDS rounds,
# and its ratio to nginx's. Requests/s and p99 are printed too (they depend on the shared
# core: read them as a sanity check, not a ranking).
#
# usage (from the repository root):
#   bash bench/proxy.sh                       # 5 s x 5 rounds per proxy
#   DURATION=3 ROUNDS=3 PROXIES="flare nginx" bash bench/proxy.sh
#
# environment: DURATION=5 ROUNDS=5 CONNECTIONS=64 PROXIES="flare nginx h2o" SERVER_CPU=0
#   CLIENT_CPU=1 RESULTS_DIR=... (default bench/results/proxy-<timestamp>/)
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DURATION=${DURATION:-5}
ROUNDS=${ROUNDS:-5}
CONNECTIONS=${CONNECTIONS:-64}
PROXIES=${PROXIES:-flare nginx h2o}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}

for v in DURATION ROUNDS CONNECTIONS; do
    [[ ${!v} =~ ^[0-9]+$ && ${!v} -gt 0 ]] || die "$v must be a positive integer"
done

bench_init
ensure_tools wrk taskset curl cmake cc
raise_nofile 65536
build_bench
[[ $FLARE_BUILD_OK == 1 ]] || die "Flare does not build"
GATEWAY=$(dirname "$FLARE_HELLO")/gateway
[[ -x $GATEWAY ]] || die "no $GATEWAY"
[[ -n ${RESULTS_DIR:-} ]] || RESULTS_DIR=$BENCH_ROOT/bench/results/proxy-$(date +%Y%m%d-%H%M%S)
OUT=$(results_dir)
log "results in ${OUT#"$BENCH_ROOT"/}/"

avail=()
for p in $PROXIES; do
    case $p in
    flare) avail+=(flare) ;;
    nginx | h2o)
        if command -v "$p" >/dev/null; then avail+=("$p"); else warn "$p not installed: skipped"; fi
        ;;
    *) die "unknown proxy '$p' (flare nginx h2o)" ;;
    esac
done

# the upstream: hello, one worker, on the client's core
UP_PORT=$(free_ports 1)
taskset -c "$CLIENT_CPU" "$FLARE_HELLO" --listen "127.0.0.1:$UP_PORT" --workers 1 \
    >"$OUT/upstream.log" 2>&1 </dev/null &
UP_PID=$!
BENCH_PIDS+=("$UP_PID")
for _ in $(seq 1 100); do
    curl -fsS -o /dev/null "http://127.0.0.1:$UP_PORT/plaintext" 2>/dev/null && break
    sleep 0.1
done

proxy_cmd() {
    local name=$1 port=$2 dir=$BENCH_TMP/proxy-$1-$2
    mkdir -p "$dir/tmp"
    case $name in
    flare)
        PROXY_CMD=("$GATEWAY" --listen "127.0.0.1:$port" --workers 1
            --upstream "127.0.0.1:$UP_PORT")
        ;;
    nginx)
        # lib.sh's nginx, as the scenarios run it, with the proxy's blocks
        nginx_config "$dir" <<EOF
    upstream up {
        server 127.0.0.1:$UP_PORT;
        keepalive 64;
        keepalive_requests 100000000;
    }
    server {
        listen 127.0.0.1:$port reuseport;
        location / {
            proxy_pass http://up;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header X-Forwarded-For \$remote_addr;
            proxy_set_header X-Forwarded-Proto \$scheme;
            proxy_set_header Host \$proxy_host;
        }
    }
EOF
        PROXY_CMD=("${SERVER_CMD[@]}")
        ;;
    h2o)
        # as root h2o switches to nobody unless told (it must write its pid and log here)
        cat >"$dir/h2o.conf" <<EOF
user: root
num-threads: 1
pid-file: $dir/h2o.pid
error-log: $dir/error.log
proxy.timeout.keepalive: 60000
listen:
  host: 127.0.0.1
  port: $port
hosts:
  default:
    paths:
      /:
        proxy.reverse.url: http://127.0.0.1:$UP_PORT/
        proxy.preserve-host: OFF
EOF
        PROXY_CMD=(h2o -c "$dir/h2o.conf")
        ;;
    esac
}

echo "proxy,round,requests,cpu_us,us_per_request,rps,p99_ms" >"$OUT/runs.csv"
declare -A PER
round() {
    local name=$1 r=$2 port pid cpu0 cpu1 raw n rps p99
    port=$(free_ports 1)
    proxy_cmd "$name" "$port"
    taskset -c "$SERVER_CPU" "${PROXY_CMD[@]}" >"$OUT/$name-$r.log" 2>&1 </dev/null &
    pid=$!
    BENCH_PIDS+=("$pid")
    local ok=0
    for _ in $(seq 1 100); do
        if [[ $(curl -fsS "http://127.0.0.1:$port/plaintext" 2>/dev/null) == "Hello, World!" ]]; then
            ok=1
            break
        fi
        sleep 0.1
    done
    ((ok)) || { stop_server "$pid"; die "$name does not proxy /plaintext (see $OUT/$name-$r.log)"; }
    cpu0=$(cpu_tree_us "$pid")
    raw=$(taskset -c "$CLIENT_CPU" wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" --latency \
        -s "$BENCH_ROOT/bench/check.lua" "http://127.0.0.1:$port/plaintext" \
        -- "expect=Hello, World!" 2>&1) || true
    cpu1=$(cpu_tree_us "$pid")
    stop_server "$pid"
    n=$(awk '/requests in/ { print $1 }' <<<"$raw")
    rps=$(awk '/^Requests\/sec:/ { print $2 }' <<<"$raw")
    p99=$(awk '$1 == "99%" { v = $2; if (v ~ /us$/) { sub(/us$/, "", v); v /= 1000 }
        else if (v ~ /ms$/) { sub(/ms$/, "", v) } else if (v ~ /s$/) { sub(/s$/, "", v); v *= 1000 }
        print v }' <<<"$raw")
    grep -q "^CHECK responses=[0-9]* bad=0$" <<<"$raw" ||
        die "$name: wrong or unchecked answers: $(grep -A3 '^CHECK' <<<"$raw")"
    [[ $n =~ ^[0-9]+$ && $n -gt 0 ]] || die "$name: wrk made no request: $raw"
    local per
    per=$(awk -v c=$((cpu1 - cpu0)) -v n="$n" 'BEGIN { printf "%.3f", c / n }')
    echo "$name,$r,$n,$((cpu1 - cpu0)),$per,$rps,$p99" >>"$OUT/runs.csv"
    log "$name round $r: $per us/request, $rps req/s, p99 ${p99} ms"
}

for r in $(seq 1 "$ROUNDS"); do
    for p in "${avail[@]}"; do
        round "$p" "$r"
    done
done
stop_server "$UP_PID"

median() { sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
{
    echo "Proxy CPU per proxied request (median of $ROUNDS rounds, ${DURATION}s each, $CONNECTIONS connections)"
    base=
    for p in "${avail[@]}"; do
        m=$(awk -F, -v p="$p" '$1 == p { print $5 }' "$OUT/runs.csv" | median)
        rps=$(awk -F, -v p="$p" '$1 == p { print $6 }' "$OUT/runs.csv" | median)
        p99=$(awk -F, -v p="$p" '$1 == p { print $7 }' "$OUT/runs.csv" | median)
        [[ $p == nginx ]] && base=$m
        PER[$p]=$m
        printf '  %-6s %8s us/request  %10s req/s  p99 %s ms\n' "$p" "$m" "$rps" "$p99"
    done
    if [[ -n $base ]]; then
        for p in "${avail[@]}"; do
            printf '  %-6s %.2fx nginx\n' "$p" "$(awk -v a="${PER[$p]}" -v b="$base" 'BEGIN { print a / b }')"
        done
    fi
} | tee "$OUT/summary.txt"
