#!/usr/bin/env bash
# examples/cluster/run.sh — one service made of several showcase instances, on one machine.
#
# Starts, all private to this run (a temporary directory, free loopback ports):
#   - a Redis (redis-server --save '': nothing written to disk), the cluster's backplane and
#     the session store;
#   - INSTANCES showcase instances, each on its own port, one worker each, sharing one SQLite
#     file and that Redis (--cluster, --sessions);
#   - nginx (Debian's nginx-light, its own configuration, pid and logs) in front of them,
#     round-robin, with WebSocket and SSE passed through;
# then prints the address to open. Open the chat (/chat.html) and the live feed in two tabs:
# nginx sends each to another instance, and they still talk. Ctrl-C stops everything.
#
#   make cluster                              # build, then this, on 127.0.0.1:8080
#   LISTEN=127.0.0.1:9000 INSTANCES=2 make cluster
#   bash examples/cluster/run.sh BUILD_DIR    # with a showcase already built in BUILD_DIR
#
# environment:
#   LISTEN=127.0.0.1:8080   the address nginx listens on
#   INSTANCES=3             showcase instances (1-16)
#   CLUSTER_DIR=DIR         where the run keeps its files (default: a new temporary directory,
#                           removed at the end); the instances' logs are DIR/instance-N.log
#   DB=URL                  the instances' database (default sqlite:DIR/showcase.db)
# docs/cluster.md explains the model, the guarantees and how to deploy it for real.
set -euo pipefail

BUILD_DIR=${1:-build}
LISTEN=${LISTEN:-127.0.0.1:8080}
INSTANCES=${INSTANCES:-3}
SHOWCASE=$BUILD_DIR/examples/showcase
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
REDIS=$(command -v redis-server || echo /usr/bin/redis-server)

die() {
    echo "cluster: $*" >&2
    exit 2
}

[[ $INSTANCES =~ ^[0-9]+$ ]] && [ "$INSTANCES" -ge 1 ] && [ "$INSTANCES" -le 16 ] ||
    die "INSTANCES=$INSTANCES: a number from 1 to 16"
[[ $LISTEN =~ ^(.+):([0-9]+)$ ]] || die "LISTEN=$LISTEN: HOST:PORT"
[ -x "$SHOWCASE" ] || die "$SHOWCASE is not built (make cluster builds it)"
[ -x "$NGINX" ] || die "nginx is not installed (tools/deps.sh cluster installs nginx-light)"
[ -x "$REDIS" ] || die "redis-server is not installed (tools/deps.sh cluster installs it)"

if [ -n "${CLUSTER_DIR:-}" ]; then
    DIR=$CLUSTER_DIR
    mkdir -p "$DIR"
    KEEP=1
else
    DIR=$(mktemp -d "${TMPDIR:-/tmp}/flare-cluster.XXXXXX")
    KEEP=0
fi
DIR=$(cd "$DIR" && pwd)
chmod 755 "$DIR" # nginx's workers read nothing here, but its master checks the prefix
DB=${DB:-sqlite:$DIR/showcase.db}

# A free loopback port: bind to port 0 and read what the kernel chose.
free_port() {
    local p
    p=$(python3 -c \
        'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' \
        2>/dev/null) || p=$((20000 + RANDOM % 20000))
    echo "$p"
}

pids=()
stop() {
    trap - INT TERM EXIT
    for p in "${pids[@]}"; do
        kill -TERM "$p" 2>/dev/null || true
    done
    for p in "${pids[@]}"; do
        wait "$p" 2>/dev/null || true
    done
    if [ "$KEEP" = 0 ]; then
        rm -rf "$DIR"
    fi
}
trap stop INT TERM EXIT

# Waits until HOST:PORT accepts a connection (bash's /dev/tcp), or the process $2 exits.
wait_port() {
    local hostport=$1 pid=$2 what=$3 i
    for i in $(seq 1 200); do
        if (exec 3<>"/dev/tcp/${hostport%:*}/${hostport##*:}") 2>/dev/null; then
            return 0
        fi
        kill -0 "$pid" 2>/dev/null || die "$what exited; its log: $4"
        sleep 0.05
    done
    die "$what did not listen on $hostport within 10 s; its log: $4"
}

# --- Redis ------------------------------------------------------------------------------------
RPORT=$(free_port)
"$REDIS" --port "$RPORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$DIR" \
    --logfile "$DIR/redis.log" &
pids+=($!)
wait_port "127.0.0.1:$RPORT" "${pids[-1]}" redis-server "$DIR/redis.log"
REDIS_URL=redis://127.0.0.1:$RPORT

# --- the instances ----------------------------------------------------------------------------
upstreams=""
for n in $(seq 1 "$INSTANCES"); do
    port=$(free_port)
    "$SHOWCASE" --listen "127.0.0.1:$port" --workers 1 --db "$DB" --cluster "$REDIS_URL" \
        --sessions "$REDIS_URL" >"$DIR/instance-$n.log" 2>&1 &
    pids+=($!)
    wait_port "127.0.0.1:$port" "${pids[-1]}" "instance $n" "$DIR/instance-$n.log"
    upstreams+="        server 127.0.0.1:$port max_fails=1 fail_timeout=2s;"$'\n'
    echo "cluster: instance $n on http://127.0.0.1:$port/ (log: $DIR/instance-$n.log)" >&2
done

# --- nginx in front -------------------------------------------------------------------------
mkdir -p "$DIR/nginx"
cat >"$DIR/nginx/nginx.conf" <<EOF
$([ "$(id -u)" = 0 ] && echo "user root;")
worker_processes 1;
daemon off;
pid $DIR/nginx/nginx.pid;
error_log $DIR/nginx/error.log warn;
events { worker_connections 1024; }
http {
    # which instance answered: upstream=ADDR
    log_format cluster '\$remote_addr "\$request" \$status upstream=\$upstream_addr';
    access_log $DIR/nginx/access.log cluster;
    client_body_temp_path $DIR/nginx/client_body;
    proxy_temp_path $DIR/nginx/proxy;
    fastcgi_temp_path $DIR/nginx/fastcgi;
    uwsgi_temp_path $DIR/nginx/uwsgi;
    scgi_temp_path $DIR/nginx/scgi;
    upstream showcase {
$upstreams        keepalive 16;
    }
    map \$http_upgrade \$connection_upgrade {
        default upgrade;
        '' '';
    }
    server {
        listen $LISTEN;
        location / {
            proxy_pass http://showcase;
            proxy_http_version 1.1;
            proxy_set_header Host \$http_host;
            proxy_set_header Upgrade \$http_upgrade;
            proxy_set_header Connection \$connection_upgrade;
            proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
            # server-sent events and WebSocket: no buffering, long reads
            proxy_buffering off;
            proxy_read_timeout 1h;
            # a dead instance: the request goes to the next one
            proxy_next_upstream error timeout http_502;
        }
    }
}
EOF
"$NGINX" -p "$DIR/nginx" -c "$DIR/nginx/nginx.conf" >"$DIR/nginx/nginx.out" 2>&1 &
pids+=($!)
wait_port "$LISTEN" "${pids[-1]}" nginx "$DIR/nginx/nginx.out"

echo "cluster: $INSTANCES instances behind nginx: open http://$LISTEN/ (Ctrl-C stops all)"
# Runs until interrupted, or until one of the processes exits (then stops the others).
wait -n "${pids[@]}" || true
echo "cluster: a process exited; stopping the others" >&2
exit 1
