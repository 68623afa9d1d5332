#!/usr/bin/env bash
# bench/h2.sh — HTTP/2 side by side: Flare, h2o and nginx in one run, h2load (Debian
# nghttp2-client) with CONNECTIONS connections x STREAMS concurrent streams each (-c64 -m16),
# one worker/process per server pinned to one core, h2load pinned to the other. The figure
# compared is the server's CPU time per request (utime+stime of all its threads and processes
# from /proc/PID/stat, before and after the run), quoted as ratios; requests/s beside it.
#
# usage (from the repository root):
#   bash bench/h2.sh                        # every scenario, 5 s x 3 rounds (about 4 minutes)
#   DURATION=3 ROUNDS=1 bash bench/h2.sh    # a quick look (about 1 minute)
#   SCENARIOS=h2c-plaintext,h2-plaintext SERVERS="flare h2o" bash bench/h2.sh
#
# scenarios (SCENARIOS, comma- or space-separated; default: all, in this order):
#   h2c-plaintext   GET /plaintext, h2c with prior knowledge on the plaintext port
#   h2c-static-4k   GET /static/4k.bin (4,096 bytes), h2c; every server serves the same file
#   h2-plaintext    GET /plaintext over TLS 1.3, ALPN h2
#   h2-static-4k    GET /static/4k.bin over TLS 1.3, ALPN h2
#
# environment:
#   DURATION=5 ROUNDS=3 CONNECTIONS=64 STREAMS=16 SERVERS="flare h2o nginx"
#   SERVER_CPU=0 CLIENT_CPU=1   NICE=-10 (root only; 0 to disable)
#   RESULTS_DIR=...  default bench/results/h2-<timestamp>/      KEEP_TMP=1 keeps configs and logs
#
# The servers, configured alike (one worker, the same certificate and files, keep-alive without
# a request limit, access logs off):
#   flare   build-bench/examples/hello --workers 1 --static DIR, TLS on --listen (--tls-cert,
#           --tls-key) and h2c on --listen-plain
#   h2o     Debian 2.2.5, num-threads 1, a plaintext listener (h2c prior knowledge) and a TLS one
#   nginx   Debian nginx-light (1.22, http_v2 built in: checked with nginx -V), one process,
#           "listen ... http2" on the plaintext port (h2c prior knowledge) and "ssl http2"
# Every server is checked before the runs (curl --http2-prior-knowledge and --http2: status
# 200, HTTP/2, the exact body). Each run must have every request succeed with a 2xx, and
# the bytes of data h2load received must cover the bodies; a run that does not is marked
# FAILED, left out of the figures, and the script exits 1.
#
# Output in bench/results/h2-<timestamp>/: runs.csv, table.md (also printed), env.txt, the raw
# h2load output. Instructions and heap allocations per request: bench/h2_counts.sh.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DURATION=${DURATION:-5}
ROUNDS=${ROUNDS:-3}
CONNECTIONS=${CONNECTIONS:-64}
STREAMS=${STREAMS:-16}
SERVERS=${SERVERS:-"flare h2o nginx"}
ALL_H2_SCENARIOS="h2c-plaintext h2c-static-4k h2-plaintext h2-static-4k"
SCENARIOS=${SCENARIOS:-$ALL_H2_SCENARIOS}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
NICE=${NICE:--10}

[[ $DURATION =~ ^[0-9]+$ && $DURATION -gt 0 ]] || die "DURATION must be a positive integer (seconds)"
[[ $ROUNDS =~ ^[0-9]+$ && $ROUNDS -gt 0 ]] || die "ROUNDS must be a positive integer"
[[ $CONNECTIONS =~ ^[0-9]+$ && $CONNECTIONS -gt 0 ]] || die "CONNECTIONS must be a positive integer"
[[ $STREAMS =~ ^[0-9]+$ && $STREAMS -gt 0 ]] || die "STREAMS must be a positive integer"
scenarios=()
for sc in ${SCENARIOS//,/ }; do
    case " $ALL_H2_SCENARIOS " in *" $sc "*) ;; *) die "unknown scenario '$sc' (known: $ALL_H2_SCENARIOS)" ;; esac
    case " ${scenarios[*]} " in *" $sc "*) continue ;; esac
    scenarios+=("$sc")
done
((${#scenarios[@]})) || die "no scenario selected"
for s in $SERVERS; do
    case $s in flare | nginx | h2o) ;; *) die "unknown server '$s' (bench/h2.sh knows flare h2o nginx)" ;; esac
done

bench_init
tools=(ps taskset curl cmake cc openssl)
for s in $SERVERS; do
    case $s in nginx | h2o) tools+=("$s") ;; esac
done
ensure_tools "${tools[@]}"
if ! command -v h2load >/dev/null 2>&1; then
    [[ $(id -u) == 0 ]] || die "h2load missing (apt-get install -y nghttp2-client)"
    log "installing nghttp2-client (h2load)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nghttp2-client >&2 ||
        die "apt-get install nghttp2-client failed"
fi
raise_nofile 65536
build_bench

NOTES=()
if [[ " $SERVERS " == *" nginx "* ]] && ! nginx -V 2>&1 | grep -q -- --with-http_v2_module; then
    warn "this nginx is built without http_v2: compared with h2o only"
    NOTES+=("nginx left out: $(nginx -v 2>&1) has no http_v2 module")
    SERVERS=${SERVERS//nginx/}
fi
# shellcheck disable=SC2086 # SERVERS is a space-separated list
read -r -a servers <<<"$(filter_servers $SERVERS)"
((${#servers[@]})) || die "no server to benchmark"

TLS_DIR=$BENCH_TMP/tls
mkdir -p "$TLS_DIR"
chmod 755 "$TLS_DIR"
CERT=$TLS_DIR/cert.pem KEY=$TLS_DIR/key.pem
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -sha256 -days 2 \
    -subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 \
    -keyout "$KEY" -out "$CERT" >/dev/null 2>&1 || die "openssl req failed"
chmod 644 "$CERT" "$KEY"
make_static_dir "$BENCH_TMP/static"

# h2_server_command NAME PLAIN_PORT TLS_PORT -> SERVER_CMD, SERVER_DIR
h2_server_command() {
    local name=$1 pport=$2 tport=$3 dir=$BENCH_TMP/$1-$2 nofile
    nofile=$(ulimit -n)
    [[ $nofile =~ ^[0-9]+$ ]] || nofile=65536
    mkdir -p "$dir/www" "$dir/tmp"
    chmod 755 "$dir" "$dir/www"
    printf '%s' "$BODY" >"$dir/www/plaintext"
    chmod 644 "$dir/www/plaintext"
    case $name in
    flare)
        SERVER_CMD=("$FLARE_HELLO" --listen "127.0.0.1:$tport" --tls-cert "$CERT" --tls-key "$KEY"
            --listen-plain "127.0.0.1:$pport" --workers 1 --static "$STATIC_DIR")
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
    http2_max_requests 100000000;
    http2_max_concurrent_streams 128;
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_session_cache shared:SSL:10m;
    ssl_session_tickets on;
    server {
        listen 127.0.0.1:$pport http2 backlog=4096;
        listen 127.0.0.1:$tport ssl http2 backlog=4096;
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
http2-idle-timeout: 300
error-log: $dir/error.log
pid-file: $dir/h2o.pid
file.mime.setdefaulttype: text/plain
listen:
  host: 127.0.0.1
  port: $pport
listen:
  host: 127.0.0.1
  port: $tport
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
        [[ $(id -u) == 0 ]] || sed -i '/^user: root$/d' "$dir/h2o.conf"
        SERVER_CMD=(h2o -m worker -c "$dir/h2o.conf")
        ;;
    esac
    SERVER_DIR=$dir
}

# h2_check URL [EXPECTED_FILE]: HTTP/2, 200 and the exact body (TLS: certificate verified)
h2_check() {
    local url=$1 efile=${2:-} out port
    local -a proto=(--http2-prior-knowledge)
    if [[ $url == https://* ]]; then
        port=${url#https://localhost:}
        port=${port%%/*}
        proto=(--http2 --cacert "$CERT" --resolve "localhost:$port:127.0.0.1")
    fi
    out=$(curl -s --max-time 5 "${proto[@]}" -o "$BENCH_TMP/check.body" -w '%{http_version} %{http_code}' \
        "$url" 2>/dev/null) || {
        CHECK_ERR="no answer"
        return 1
    }
    [[ $out == "2 200" ]] || {
        CHECK_ERR="HTTP/version status: $out"
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

OUT=${RESULTS_DIR:-$BENCH_ROOT/bench/results/h2-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
CSV=$OUT/runs.csv
echo "timestamp,round,scenario,server,requests,req_per_s,cpu_us,cpu_us_per_req,status,note" >"$CSV"

declare -A PPORT TPORT PID DEAD
read -r -a ports <<<"$(free_ports $((2 * ${#servers[@]})))"
i=0
for s in "${servers[@]}"; do
    PPORT[$s]=${ports[$i]}
    TPORT[$s]=${ports[$((i + 1))]}
    i=$((i + 2))
    h2_server_command "$s" "${PPORT[$s]}" "${TPORT[$s]}"
    "${SRV_PIN[@]}" "${SERVER_CMD[@]}" >"$SERVER_DIR/stdout.log" 2>&1 </dev/null &
    PID[$s]=$!
    BENCH_PIDS+=("${PID[$s]}")
    DEAD[$s]=0
    ok=0
    for _ in $(seq 1 100); do
        kill -0 "${PID[$s]}" 2>/dev/null || break
        if h2_check "http://127.0.0.1:${PPORT[$s]}/plaintext"; then
            ok=1
            break
        fi
        sleep 0.2
    done
    if ((ok == 0)); then
        show_server_logs "$SERVER_DIR"
        die "$s did not answer GET /plaintext over h2c on port ${PPORT[$s]} (${CHECK_ERR:-exited})"
    fi
    h2_check "http://127.0.0.1:${PPORT[$s]}/static/4k.bin" "$STATIC_DIR/4k.bin" ||
        die "$s: /static/4k.bin over h2c: $CHECK_ERR"
    h2_check "https://localhost:${TPORT[$s]}/plaintext" || die "$s: /plaintext over h2 (TLS): $CHECK_ERR"
    h2_check "https://localhost:${TPORT[$s]}/static/4k.bin" "$STATIC_DIR/4k.bin" ||
        die "$s: /static/4k.bin over h2 (TLS): $CHECK_ERR"
    log "$s ready: pid ${PID[$s]}, h2c http://127.0.0.1:${PPORT[$s]}/, h2 https://localhost:${TPORT[$s]}/"
done

{
    echo "date: $(date -Is)"
    echo "kernel: $(uname -r)"
    echo "cpus: $(nproc) ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'))"
    echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "DURATION=$DURATION ROUNDS=$ROUNDS CONNECTIONS=$CONNECTIONS STREAMS=$STREAMS"
    echo "scenarios: ${scenarios[*]}"
    echo "server: ${SRV_PIN[*]:-no wrapper}; client: ${CLI_PIN[*]:-no wrapper}"
    echo "h2load: $(h2load --version 2>&1 | head -1)"
    echo "openssl: $(openssl version)"
    for s in "${servers[@]}"; do
        case $s in
        nginx) echo "nginx: $(nginx -v 2>&1); http_v2: $(nginx -V 2>&1 | grep -c -- --with-http_v2_module)" ;;
        h2o) echo "h2o: $(h2o --version 2>&1 | head -1)" ;;
        esac
    done
    for n in "${NOTES[@]}"; do echo "note: $n"; done
} >"$OUT/env.txt"
log "results in ${OUT#"$BENCH_ROOT"/}/"

FAILURES=0
run_one() {
    local sc=$1 s=$2 round=$3 pid=${PID[$2]} url raw rc=0 status=ok cpu0 cpu1 min_bytes
    local -a why=()
    case $sc in
    h2c-*) url="http://127.0.0.1:${PPORT[$s]}" ;;
    h2-*) url="https://127.0.0.1:${TPORT[$s]}" ;;
    esac
    case $sc in
    *-plaintext) url+=/plaintext min_bytes=${#BODY} ;;
    *-static-4k) url+=/static/4k.bin min_bytes=$STATIC_4K_LEN ;;
    esac
    raw=$OUT/h2load-$sc-$s-$round.txt
    if ! kill -0 "$pid" 2>/dev/null; then
        DEAD[$s]=1
        return
    fi
    cpu0=$(cpu_tree_us "$pid")
    "${CLI_PIN[@]}" h2load -t1 "-c$CONNECTIONS" "-m$STREAMS" "-D$DURATION" "$url" >"$raw" 2>&1 || rc=$?
    cpu1=$(cpu_tree_us "$pid" 2>/dev/null) || {
        cpu1=$cpu0
        DEAD[$s]=1
        why+=("server died")
    }
    # "requests: 1000 total, 1000 started, 1000 done, 1000 succeeded, 0 failed, 0 errored, 0 timeout"
    local done_ succ failed errored rate x2xx data
    read -r done_ succ failed errored < <(awk '/^requests:/ { print $6, $8, $10, $12; exit }' "$raw")
    rate=$(awk '/^finished in/ { gsub(/,/, "", $4); print $4; exit }' "$raw")
    x2xx=$(awk '/^status codes:/ { print $3; exit }' "$raw")
    # "traffic: 1.23MB (1289845) total, 12.34KB (12345) headers (space savings 90.00%), 1.00MB (1048576) data"
    data=$(sed -n 's/^traffic:.*(\([0-9]*\)) data$/\1/p' "$raw" | head -1)
    done_=${done_:-0} succ=${succ:-0} failed=${failed:-0} errored=${errored:-0} x2xx=${x2xx:-0} rate=${rate:-0}
    ((rc == 0)) || why+=("h2load exit status $rc")
    ((succ > 0)) || why+=("nothing succeeded")
    ((failed == 0 && errored == 0)) || why+=("$failed failed, $errored errored")
    # (a stream still in flight when the duration ends may have its 2xx head counted and not
    # be "done": at least one 2xx per success, and no other status)
    ((x2xx >= succ)) || why+=("$x2xx 2xx for $succ successes")
    local others
    others=$(awk '/^status codes:/ { print $5 + $7 + $9; exit }' "$raw")
    ((${others:-0} == 0)) || why+=("$others non-2xx responses")
    if [[ -z $data ]] || ((data < succ * min_bytes)); then
        why+=("${data:-no} data bytes for $succ responses of $min_bytes")
    fi
    if ((${#why[@]})); then
        status=FAILED
        FAILURES=$((FAILURES + 1))
        printf '\n!!!!!!!! FAILED: %s %s round %s: %s (see %s)\n\n' "$s" "$sc" "$round" "${why[*]}" \
            "${raw#"$BENCH_ROOT"/}" >&2
        tail -n 8 "$raw" >&2
    fi
    local per
    per=$(awk -v c=$((cpu1 - cpu0)) -v n="$succ" 'BEGIN { printf "%.2f", (n > 0 ? c / n : 0) }')
    echo "$(date -Is),$round,$sc,$s,$succ,$rate,$((cpu1 - cpu0)),$per,$status," >>"$CSV"
    log "round $round $sc $s: $succ requests, $rate /s, $per server CPU µs/request [$status]"
    sleep 0.3
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

"$PY" - "$CSV" "$CONNECTIONS" "$STREAMS" "${servers[@]}" >"$OUT/table.md" <<'EOF'
import csv, statistics, sys
path, conns, streams, servers = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
rows = [r for r in csv.DictReader(open(path)) if r["status"] == "ok"]
titles = {
    "h2c-plaintext": "GET /plaintext, h2c (prior knowledge)",
    "h2c-static-4k": "GET /static/4k.bin (4,096 bytes), h2c",
    "h2-plaintext": "GET /plaintext, h2 over TLS 1.3 (ALPN)",
    "h2-static-4k": "GET /static/4k.bin, h2 over TLS 1.3",
}
scen = [s for s in titles if any(r["scenario"] == s for r in rows)]
med = {}
for sc in scen:
    for s in servers:
        got = [r for r in rows if r["scenario"] == sc and r["server"] == s]
        if got:
            med[sc, s] = (statistics.median(float(r["cpu_us_per_req"]) for r in got),
                          statistics.median(float(r["req_per_s"]) for r in got))
peers = [p for p in servers if p != "flare"]
head = "| scenario | " + " | ".join("%s µs/req (req/s)" % s for s in servers)
if "flare" in servers and peers:
    head += " | flare ÷ best peer (CPU/req) | flare ÷ best peer (req/s)"
print(head + " |")
print("|" + "---|" * (1 + len(servers) + (2 if "flare" in servers and peers else 0)))
for sc in scen:
    cells = []
    for s in servers:
        m = med.get((sc, s))
        cells.append("%.2f (%.0f)" % m if m else "—")
    if "flare" in servers and peers:
        f = med.get((sc, "flare"))
        got = [med[sc, p] for p in peers if (sc, p) in med]
        if f and got:
            best_cpu = min(g[0] for g in got)
            best_rate = max(g[1] for g in got)
            cells.append("%.2f×" % (f[0] / best_cpu) if best_cpu > 0 else "—")
            cells.append("%.2f×" % (f[1] / best_rate) if best_rate > 0 else "—")
        else:
            cells += ["—", "—"]
    print("| %s | %s |" % (sc, " | ".join(cells)))
print()
for sc in scen:
    print("- %s: %s" % (sc, titles[sc]))
print("\nh2load -c%s -m%s; medians over the rounds of the server's utime+stime per request "
      "(lower is better) and requests/s. CPU ratio below 1.00× (requests/s ratio above 1.00×): "
      "Flare is ahead of the best peer. The issue's target: CPU ratio to h2o <= 0.80×." % (conns, streams))
EOF
echo
cat "$OUT/table.md"
log "results: ${OUT#"$BENCH_ROOT"/}/ (runs.csv, table.md, env.txt, raw output); $((SECONDS - T_START)) s of measurement"
if ((FAILURES)); then
    printf '\n!!!!!!!! %d FAILED run(s) — see above. Figures exclude them.\n' "$FAILURES" >&2
    exit 1
fi
