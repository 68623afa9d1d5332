#!/usr/bin/env bash
# bench/tls.sh — HTTPS side by side: Flare, nginx and h2o in one run, with the same ECDSA P-256
# certificate (made here, never stored), TLS 1.3, one worker/process each, pinned to one core,
# the load generator pinned to the other. The figure compared is the server's CPU time per
# request or per handshake (utime+stime of all its threads and processes), quoted as ratios.
# All its processes: h2o does its private-key operations (the handshake's ECDSA signature) in a
# separate process (neverbleed, on by default), which a count of the main process alone misses.
#
# usage (from the repository root):
#   bash bench/tls.sh                       # every scenario, 5 s × 3 rounds (about 5 minutes)
#   DURATION=3 ROUNDS=1 bash bench/tls.sh   # a quick look (about 1 minute)
#   SCENARIOS=handshake-full,handshake-resumed SERVERS="flare nginx" bash bench/tls.sh
#
# scenarios (SCENARIOS, comma- or space-separated; default: all, in this order):
#   https-plaintext     wrk, GET /plaintext over TLS, keep-alive, CONNECTIONS (64) connections
#   https-static-1m     wrk, GET /static/1m.bin (1,048,576 bytes) over TLS, keep-alive,
#                       CONNECTIONS_1M (16) connections; every server serves the same file
#   handshake-full      bench/tls_handshake: new connections one after another, each a full
#                       handshake (certificate verified), one request, close_notify both ways
#   handshake-resumed   the same, each resuming the session of the one before (every one must
#                       resume, or the run fails)
#
# environment:
#   DURATION=5 ROUNDS=3 CONNECTIONS=64 CONNECTIONS_1M=16 SERVERS="flare nginx h2o"
#   SERVER_CPU=0 CLIENT_CPU=1   NICE=-10 (root only; 0 to disable)
#   RESULTS_DIR=...  default bench/results/tls-<timestamp>/      KEEP_TMP=1 keeps configs and logs
#
# The servers: build-bench/examples/hello --workers 1 --static DIR --tls-cert --tls-key; nginx
# (Debian nginx-light, one process, ssl_session_cache shared + tickets, sendfile on — which
# nginx does not use over TLS without kTLS); h2o (Debian 2.2.5, num-threads 1, its default
# session resumption). The kernel here has no kTLS (no "tls" in
# /proc/sys/net/ipv4/tcp_available_ulp is reported in env.txt): records are made in user
# space by all three. Every response is checked (wrk: bench/check.lua, status and every body
# byte; tls_handshake: status, body, close_notify). A failed run is marked FAILED, left out of
# the figures, and the script exits 1.
#
# Output in bench/results/tls-<timestamp>/: runs.csv, table.md (also printed), env.txt
# (versions, the negotiated protocol and cipher per server), raw wrk/tls_handshake output.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DURATION=${DURATION:-5}
ROUNDS=${ROUNDS:-3}
CONNECTIONS=${CONNECTIONS:-64}
CONNECTIONS_1M=${CONNECTIONS_1M:-16}
SERVERS=${SERVERS:-"flare nginx h2o"}
ALL_TLS_SCENARIOS="https-plaintext https-static-1m handshake-full handshake-resumed"
SCENARIOS=${SCENARIOS:-$ALL_TLS_SCENARIOS}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
NICE=${NICE:--10}

[[ $DURATION =~ ^[0-9]+$ && $DURATION -gt 0 ]] || die "DURATION must be a positive integer (seconds)"
[[ $ROUNDS =~ ^[0-9]+$ && $ROUNDS -gt 0 ]] || die "ROUNDS must be a positive integer"
[[ $CONNECTIONS =~ ^[0-9]+$ && $CONNECTIONS -gt 0 ]] || die "CONNECTIONS must be a positive integer"
[[ $CONNECTIONS_1M =~ ^[0-9]+$ && $CONNECTIONS_1M -gt 0 ]] || die "CONNECTIONS_1M must be a positive integer"
scenarios=()
for sc in ${SCENARIOS//,/ }; do
    case " $ALL_TLS_SCENARIOS " in *" $sc "*) ;; *) die "unknown scenario '$sc' (known: $ALL_TLS_SCENARIOS)" ;; esac
    case " ${scenarios[*]} " in *" $sc "*) continue ;; esac
    scenarios+=("$sc")
done
((${#scenarios[@]})) || die "no scenario selected"
for s in $SERVERS; do
    case $s in flare | nginx | h2o) ;; *) die "unknown server '$s' (bench/tls.sh knows flare nginx h2o)" ;; esac
done

bench_init
tools=(wrk ps taskset curl cmake cc openssl)
for s in $SERVERS; do
    case $s in nginx | h2o) tools+=("$s") ;; esac
done
ensure_tools "${tools[@]}"
raise_nofile 65536
build_bench
HANDSHAKE=$BENCH_BIN/tls_handshake
if [[ ! -x $HANDSHAKE ]]; then
    # the full build failed (Flare is skipped then): the client alone, by hand
    mkdir -p "$BENCH_BIN"
    cc -std=c17 -D_GNU_SOURCE -O2 -Wall -Wextra bench/tls_handshake.c -o "$HANDSHAKE" -lssl -lcrypto ||
        die "cannot build bench/tls_handshake.c (libssl-dev?)"
fi

# shellcheck disable=SC2086 # SERVERS is a space-separated list
read -r -a servers <<<"$(filter_servers $SERVERS)"
((${#servers[@]})) || die "no server to benchmark"

# The one certificate every server presents: ECDSA P-256, for localhost and 127.0.0.1.
TLS_DIR=$BENCH_TMP/tls
mkdir -p "$TLS_DIR"
chmod 755 "$TLS_DIR"
CERT=$TLS_DIR/cert.pem KEY=$TLS_DIR/key.pem
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -sha256 -days 2 \
    -subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 \
    -keyout "$KEY" -out "$CERT" >/dev/null 2>&1 || die "openssl req failed"
chmod 644 "$CERT" "$KEY"
make_static_dir "$BENCH_TMP/static"

# tls_server_command NAME PORT -> SERVER_CMD, SERVER_DIR (config in $BENCH_TMP/NAME-PORT/)
tls_server_command() {
    local name=$1 port=$2 dir=$BENCH_TMP/$1-$2 nofile
    nofile=$(ulimit -n)
    [[ $nofile =~ ^[0-9]+$ ]] || nofile=65536
    mkdir -p "$dir/www" "$dir/tmp"
    chmod 755 "$dir" "$dir/www"
    printf '%s' "$BODY" >"$dir/www/plaintext"
    chmod 644 "$dir/www/plaintext"
    case $name in
    flare)
        SERVER_CMD=("$FLARE_HELLO" --listen "127.0.0.1:$port" --workers 1 --static "$STATIC_DIR"
            --tls-cert "$CERT" --tls-key "$KEY")
        ;;
    nginx)
        cat >"$dir/nginx.conf" <<EOF
worker_processes 1;
worker_rlimit_nofile $nofile;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events {
    worker_connections $((nofile - 32));
}
http {
    access_log off;
    client_body_temp_path $dir/tmp/body;
    proxy_temp_path $dir/tmp/proxy;
    fastcgi_temp_path $dir/tmp/fastcgi;
    uwsgi_temp_path $dir/tmp/uwsgi;
    scgi_temp_path $dir/tmp/scgi;
    keepalive_requests 100000000;
    keepalive_timeout 300s;
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_session_cache shared:SSL:10m;
    ssl_session_timeout 1h;
    ssl_session_tickets on;
    server {
        listen 127.0.0.1:$port ssl backlog=4096;
        server_name localhost;
        ssl_certificate $CERT;
        ssl_certificate_key $KEY;
        location = /plaintext {
            default_type text/plain;
            return 200 "$BODY";
        }
        location /static/ {
            alias $STATIC_DIR/;
            default_type application/octet-stream;
            sendfile on;
        }
    }
}
EOF
        SERVER_CMD=(nginx -p "$dir/" -c "$dir/nginx.conf" -e "$dir/error.log"
            -g 'daemon off; master_process off;')
        ;;
    h2o)
        cat >"$dir/h2o.conf" <<EOF
user: root
num-threads: 1
max-connections: $((nofile - 32))
http1-request-timeout: 300
error-log: $dir/error.log
pid-file: $dir/h2o.pid
file.mime.setdefaulttype: text/plain
listen:
  host: 127.0.0.1
  port: $port
  ssl:
    certificate-file: $CERT
    key-file: $KEY
    minimum-version: TLSv1.2
hosts:
  default:
    paths:
      /plaintext:
        file.file: $dir/www/plaintext
      /static:
        file.dir: $STATIC_DIR
EOF
        SERVER_CMD=(h2o -m worker -c "$dir/h2o.conf")
        ;;
    esac
    SERVER_DIR=$dir
}

# https_check PORT PATH [EXPECTED_FILE]: 200 and the exact body over TLS (certificate verified)
https_check() {
    local port=$1 path=$2 efile=${3:-} code
    code=$(curl -s --max-time 5 --cacert "$CERT" --resolve "localhost:$port:127.0.0.1" \
        -o "$BENCH_TMP/check.body" -w '%{http_code}' "https://localhost:$port$path" 2>/dev/null) || {
        CHECK_ERR="no answer"
        return 1
    }
    [[ $code == 200 ]] || {
        CHECK_ERR="status $code"
        return 1
    }
    if [[ -n $efile ]]; then
        cmp -s "$BENCH_TMP/check.body" "$efile" || {
            CHECK_ERR="body differs from $efile"
            return 1
        }
    elif [[ $(<"$BENCH_TMP/check.body") != "$BODY" ]]; then
        CHECK_ERR="body '$(head -c 100 "$BENCH_TMP/check.body")'"
        return 1
    fi
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
    warn "fewer than 2 CPUs: no pinning"
fi

OUT=${RESULTS_DIR:-$BENCH_ROOT/bench/results/tls-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
CSV=$OUT/runs.csv
echo "timestamp,round,scenario,server,operations,ops_per_s,cpu_us,cpu_us_per_op,status,note" >"$CSV"

declare -A PORT PID DEAD
read -r -a ports <<<"$(free_ports ${#servers[@]})"
i=0
for s in "${servers[@]}"; do
    PORT[$s]=${ports[$i]}
    i=$((i + 1))
    tls_server_command "$s" "${PORT[$s]}"
    "${SRV_PIN[@]}" "${SERVER_CMD[@]}" >"$SERVER_DIR/stdout.log" 2>&1 </dev/null &
    PID[$s]=$!
    BENCH_PIDS+=("${PID[$s]}")
    DEAD[$s]=0
    ok=0
    for _ in $(seq 1 100); do
        kill -0 "${PID[$s]}" 2>/dev/null || break
        if https_check "${PORT[$s]}" /plaintext; then
            ok=1
            break
        fi
        sleep 0.2
    done
    if ((ok == 0)); then
        show_server_logs "$SERVER_DIR"
        die "$s did not answer GET /plaintext over TLS on port ${PORT[$s]} (${CHECK_ERR:-exited})"
    fi
    https_check "${PORT[$s]}" /static/1m.bin "$STATIC_DIR/1m.bin" ||
        die "$s: /static/1m.bin over TLS: $CHECK_ERR"
    log "$s ready: pid ${PID[$s]}, https://localhost:${PORT[$s]}/"
done

{
    echo "date: $(date -Is)"
    echo "kernel: $(uname -r); kTLS ULPs available: $(cat /proc/sys/net/ipv4/tcp_available_ulp 2>/dev/null || echo '?')"
    echo "cpus: $(nproc) ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'))"
    echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "DURATION=$DURATION ROUNDS=$ROUNDS CONNECTIONS=$CONNECTIONS CONNECTIONS_1M=$CONNECTIONS_1M"
    echo "scenarios: ${scenarios[*]}"
    echo "server: ${SRV_PIN[*]:-no wrapper}; clients: ${CLI_PIN[*]:-no wrapper}"
    echo "openssl: $(openssl version)"
    echo "wrk: $(wrk -v 2>&1 | head -1)"
    for s in "${servers[@]}"; do
        case $s in
        nginx) echo "nginx: $(nginx -v 2>&1)" ;;
        h2o) echo "h2o: $(h2o --version 2>&1 | head -1)" ;;
        esac
        # what a TLS 1.3-capable client gets (wrk and tls_handshake both are)
        neg=$(openssl s_client -connect "127.0.0.1:${PORT[$s]}" -servername localhost -brief \
            -CAfile "$CERT" </dev/null 2>&1 | grep -E '^(Protocol version|Ciphersuite|Peer Temp Key)' |
            tr '\n' ';')
        echo "$s negotiates: $neg"
        echo "$s processes: $(pgrep -P "${PID[$s]}" | tr '\n' ' ')(children of ${PID[$s]}: counted)"
    done
} >"$OUT/env.txt"
log "results in ${OUT#"$BENCH_ROOT"/}/"

FAILURES=0
# run_one SC SERVER ROUND: one measurement, one CSV row
run_one() {
    local sc=$1 s=$2 round=$3 port=${PORT[$2]} pid=${PID[$2]} raw cpu0 cpu1 rc=0 ops rate status=ok
    local -a why=()
    raw=$OUT/$sc-$s-r$round.txt
    if ! kill -0 "$pid" 2>/dev/null; then
        DEAD[$s]=1
        FAILURES=$((FAILURES + 1))
        warn "$s died before $sc round $round"
        return
    fi
    cpu0=$(cpu_tree_us "$pid")
    case $sc in
    https-plaintext | https-static-1m)
        local path=/plaintext conns=$CONNECTIONS
        local -a expect=("expect=$BODY")
        if [[ $sc == https-static-1m ]]; then
            path=/static/1m.bin conns=$CONNECTIONS_1M
            expect=("expect_file=$STATIC_DIR/1m.bin" "expect_len=$STATIC_1M_LEN")
        fi
        "${CLI_PIN[@]}" wrk -t1 "-c$conns" "-d${DURATION}s" --timeout 5s -s "$BENCH_ROOT/bench/check.lua" \
            "https://127.0.0.1:$port$path" -- depth=1 "${expect[@]}" >"$raw" 2>&1 || rc=$?
        sleep 0.3
        ops=$(awk '/ requests in / { print $1; exit }' "$raw")
        rate=$(awk '/^Requests\/sec:/ { print $2; exit }' "$raw")
        local sock non2xx bad
        sock=$(awk '/Socket errors:/ { gsub(/,/, ""); print $4 + $6 + $8 + $10; exit }' "$raw")
        non2xx=$(awk '/Non-2xx or 3xx responses:/ { print $NF; exit }' "$raw")
        bad=$(awk '/^CHECK responses=/ { sub(/bad=/, "", $3); print $3; exit }' "$raw")
        ((${sock:-0} == 0)) || why+=("$sock socket errors")
        ((${non2xx:-0} == 0)) || why+=("$non2xx non-2xx responses")
        if [[ -z $bad ]]; then why+=("no CHECK line from check.lua"); elif ((bad > 0)); then why+=("$bad bad responses"); fi
        ;;
    handshake-full | handshake-resumed)
        local -a resume=()
        [[ $sc == handshake-resumed ]] && resume=(--resume)
        "${CLI_PIN[@]}" "$HANDSHAKE" --connect "127.0.0.1:$port" --cafile "$CERT" \
            --servername localhost --duration "$DURATION" --expect "$BODY" "${resume[@]}" >"$raw" 2>&1 || rc=$?
        sleep 0.3
        ops=$(sed -n 's/.*connections=\([0-9]*\).*/\1/p' "$raw" | tail -1)
        rate=$(sed -n 's/.*per_second=\([0-9.]*\).*/\1/p' "$raw" | tail -1)
        ;;
    esac
    cpu1=$(cpu_tree_us "$pid" 2>/dev/null) || {
        cpu1=$cpu0
        DEAD[$s]=1
        why+=("server died")
    }
    ops=${ops:-0} rate=${rate:-0}
    ((rc == 0)) || why+=("client exit status $rc")
    ((ops > 0)) || why+=("nothing completed")
    if ((${#why[@]})); then
        status=FAILED
        FAILURES=$((FAILURES + 1))
        printf '\n!!!!!!!! FAILED: %s %s round %s: %s (see %s)\n\n' "$s" "$sc" "$round" "${why[*]}" \
            "${raw#"$BENCH_ROOT"/}" >&2
        tail -n 5 "$raw" >&2
    fi
    local per
    per=$(awk -v c=$((cpu1 - cpu0)) -v n="$ops" 'BEGIN { printf "%.2f", (n > 0 ? c / n : 0) }')
    echo "$(date -Is),$round,$sc,$s,$ops,$rate,$((cpu1 - cpu0)),$per,$status," >>"$CSV"
    log "round $round $sc $s: $ops ops, $rate /s, $per server CPU µs/op [$status]"
}

T_START=$SECONDS
for round in $(seq 1 "$ROUNDS"); do
    for sc in "${scenarios[@]}"; do
        for s in "${servers[@]}"; do
            [[ ${DEAD[$s]} == 1 ]] && continue
            run_one "$sc" "$s" "$round"
        done
    done
done
for s in "${servers[@]}"; do
    stop_server "${PID[$s]}"
done

"$PY" - "$CSV" "${servers[@]}" >"$OUT/table.md" <<'EOF'
import csv, statistics, sys
path, servers = sys.argv[1], sys.argv[2:]
rows = [r for r in csv.DictReader(open(path)) if r["status"] == "ok"]
titles = {
    "https-plaintext": "GET /plaintext over TLS 1.3, keep-alive (CPU µs per request)",
    "https-static-1m": "GET /static/1m.bin over TLS 1.3, keep-alive (CPU µs per request)",
    "handshake-full": "new connection, full handshake + 1 request (CPU µs per handshake)",
    "handshake-resumed": "new connection, resumed handshake + 1 request (CPU µs per handshake)",
}
scen = [s for s in titles if any(r["scenario"] == s for r in rows)]
med = {}
for sc in scen:
    for s in servers:
        got = [r for r in rows if r["scenario"] == sc and r["server"] == s]
        if got:
            med[sc, s] = (statistics.median(float(r["cpu_us_per_op"]) for r in got),
                          statistics.median(float(r["ops_per_s"]) for r in got), len(got))
head = "| scenario | " + " | ".join("%s µs/op (ops/s)" % s for s in servers)
peers = [p for p in ("nginx", "h2o") if p in servers and "flare" in servers]
head += "".join(" | flare ÷ %s (CPU/op)" % p for p in peers) + " |"
print(head)
print("|" + "---|" * (1 + len(servers) + len(peers)))
for sc in scen:
    cells = []
    for s in servers:
        m = med.get((sc, s))
        cells.append("%.1f (%.0f)" % (m[0], m[1]) if m else "—")
    for p in peers:
        f, q = med.get((sc, "flare")), med.get((sc, p))
        cells.append("%.2f×" % (f[0] / q[0]) if f and q and q[0] > 0 else "—")
    print("| %s | %s |" % (sc, " | ".join(cells)))
print()
for sc in scen:
    print("- %s: %s" % (sc, titles[sc]))
print("\nMedians over the rounds of the server's utime+stime per operation (lower is better); "
      "a ratio below 1.00× means Flare spends less CPU than that peer.")
EOF
echo
cat "$OUT/table.md"
log "results: ${OUT#"$BENCH_ROOT"/}/ (runs.csv, table.md, env.txt, raw output); $((SECONDS - T_START)) s of measurement"
if ((FAILURES)); then
    printf '\n!!!!!!!! %d FAILED run(s) — see above. Figures exclude them.\n' "$FAILURES" >&2
    exit 1
fi
