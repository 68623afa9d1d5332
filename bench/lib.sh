# shellcheck shell=bash
# Shared helpers for bench/run.sh and bench/counts.sh. Source it; do not run it.
#
# What it provides:
#   bench_init            cd to the repo root, make a scratch dir, install the EXIT trap
#   ensure_tools CMD...   apt-get install the packages of the commands that are missing
#   build_bench           release build into build-bench/ (falls back to building only the
#                         bench helpers when the Flare tree does not build right now; warnings
#                         are not errors here: they do not change the code being measured)
#   free_ports N          N currently free TCP ports on 127.0.0.1
#   nginx_config DIR      DIR/nginx.conf with the http block's servers from stdin (the
#                         scenarios' nginx, bench/proxy.sh's proxy); sets SERVER_CMD
#   server_available NAME is NAME's binary there?   (flare null nginx h2o lighttpd; null-json,
#                         null-users, null-echo, null-4k and null-1m are the null server with
#                         another canned body)
#   make_static_dir DIR   the static-file scenarios' files (4k.bin, 1m.bin) in DIR; sets
#                         STATIC_DIR, which makes start_server serve DIR under /static/
#   flare_has_static      does examples/hello take --static DIR?
#   start_server NAME PORT [WRAPPER...]   start NAME on 127.0.0.1:PORT under WRAPPER
#                         (e.g. taskset -c 0, or valgrind ...); sets SERVER_PID, SERVER_LOG
#   wait_ready NAME PID PORT TIMEOUT      until GET /plaintext answers 200 "Hello, World!"
#                         (returns 1 with the server's logs on stderr otherwise)
#   stop_server PID       SIGTERM, wait (SIGKILL after a grace period)
#   cpu_us PID            utime+stime of the whole process (all threads), microseconds
#   cpu_tree_us PID       the same summed over PID and its live descendant processes (h2o
#                         signs with its TLS keys in a child process, neverbleed)
#   rss_kb PID            VmRSS in KiB
#
# Conventions: every server answers GET /plaintext with 200 and the body "Hello, World!",
# listens on 127.0.0.1 only, and keeps its config, logs, pid and temp files in $BENCH_TMP.
# The routes beyond /plaintext (bench/run.sh's scenarios), where a server can answer them:
#   GET /json        {"message":"Hello, World!"}   application/json   (all)
#   GET /users/123   {"id":"123"}                  application/json   (flare, nginx: a regex
#                    location; h2o: an mruby handler; lighttpd: a mod_magnet Lua script)
#   POST /echo       the request body, with the request's Content-Type (flare; h2o: mruby)
#   GET /static/4k.bin, /static/1m.bin   the files of $STATIC_DIR, once make_static_dir was
#                    called (flare: --static; nginx: alias, sendfile on; h2o: file.dir;
#                    lighttpd: mod_alias)
# The null-* servers answer everything with one of those canned bodies (null-4k and null-1m:
# the contents of 4k.bin and 1m.bin, read at start-up).

export PATH=$PATH:/usr/sbin:/sbin
BENCH_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$BENCH_ROOT/build-bench}
BENCH_BIN=$BUILD_DIR/bench
FLARE_HELLO=$BUILD_DIR/examples/hello
PY=/usr/bin/python3
BODY='Hello, World!'
JSON_BODY='{"message":"Hello, World!"}'
USERS_BODY='{"id":"123"}'
ECHO_CTYPE=application/x-bench-echo
ECHO_BODY_FILE='' # set by make_echo_body
STATIC_DIR=''     # set by make_static_dir; servers started afterwards serve it under /static/
STATIC_4K_LEN=4096
STATIC_1M_LEN=1048576
ALL_SERVERS="flare flare-uring null null-uring nginx h2o lighttpd"
FLARE_BUILD_OK=0

declare -a BENCH_PIDS=()

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
warn() { printf '[%s] WARNING: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() {
    printf '[%s] ERROR: %s\n' "$(date +%H:%M:%S)" "$*" >&2
    exit 1
}

bench_cleanup() {
    if [[ -n ${AUTOGROUP_NICE0:-} ]]; then
        echo "$AUTOGROUP_NICE0" >/proc/self/autogroup 2>/dev/null || true
    fi
    local pid
    for pid in "${BENCH_PIDS[@]}"; do
        if kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid" 2>/dev/null || true; fi
    done
    for pid in "${BENCH_PIDS[@]}"; do
        for _ in $(seq 1 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
    done
    if [[ -n ${BENCH_TMP:-} && -d $BENCH_TMP ]]; then
        if [[ ${KEEP_TMP:-0} == 1 ]]; then
            log "scratch files kept in $BENCH_TMP"
        else
            rm -rf "$BENCH_TMP"
        fi
    fi
}

bench_init() {
    cd "$BENCH_ROOT" || exit 1
    BENCH_TMP=$(mktemp -d /tmp/flare-bench.XXXXXX)
    chmod 755 "$BENCH_TMP"
    trap bench_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    if [[ ! -x $PY && $(id -u) == 0 ]]; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y python3 >&2 || true
    fi
    [[ -x $PY ]] || die "$PY not found (the scripts need Debian's python3, stdlib only)"
}

# Results go to bench/results/<timestamp>/ unless RESULTS_DIR is set.
results_dir() {
    local d=${RESULTS_DIR:-$BENCH_ROOT/bench/results/$(date +%Y%m%d-%H%M%S)}
    mkdir -p "$d"
    printf '%s\n' "$d"
}

ensure_tools() {
    local -A pkg=([wrk]=wrk [nginx]=nginx-light [h2o]=h2o [lighttpd]=lighttpd
        [valgrind]=valgrind [callgrind_control]=valgrind [strace]=strace [ps]=procps
        [taskset]=util-linux [curl]=curl [cmake]=cmake [cc]=gcc [gnuplot]=gnuplot-nox
        [perf]=linux-perf [npm]=npm [node]=nodejs)
    local missing=() c
    for c in "$@"; do
        command -v "$c" >/dev/null 2>&1 || missing+=("${pkg[$c]:-$c}")
    done
    ((${#missing[@]})) || return 0
    # nginx/h2o/lighttpd packages live in /usr/sbin on Debian.
    log "installing missing packages: ${missing[*]}"
    if [[ $(id -u) != 0 ]]; then
        die "missing: ${missing[*]} (run as root, or apt-get install -y ${missing[*]})"
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}" >&2 ||
        { apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}" >&2; } ||
        die "apt-get install ${missing[*]} failed"
    # Debian starts the daemons it installs; we want none of them holding ports.
    for c in nginx h2o lighttpd; do
        if [[ " ${missing[*]} " == *" $c"* ]] && command -v systemctl >/dev/null 2>&1; then
            systemctl stop "$c" >/dev/null 2>&1 || true
        fi
    done
}

build_bench() {
    log "building Flare (Release) into ${BUILD_DIR#"$BENCH_ROOT"/}/"
    local blog=$BENCH_TMP/build.log
    # Every option that changes the code is set explicitly, so a stale CMake cache in
    # BUILD_DIR cannot change what is measured.
    if cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DFLARE_TESTS=OFF \
        -DFLARE_WERROR=OFF -DFLARE_LTO=ON -DFLARE_FRAME_POINTERS=OFF -DFLARE_SANITIZE= \
        -DFLARE_FUZZ=OFF -DFLARE_EXAMPLES=ON >"$blog" 2>&1 &&
        cmake --build "$BUILD_DIR" -j2 >>"$blog" 2>&1; then
        FLARE_BUILD_OK=1
    else
        FLARE_BUILD_OK=0
        warn "the full release build failed (last lines below); Flare will be skipped," \
            "building only the bench helpers"
        tail -n 15 "$blog" >&2 || true
        if ! cmake --build "$BUILD_DIR" -j2 --target null_server reqclient >>"$blog" 2>&1; then
            # Configure itself may be broken: compile the helpers by hand, same flags.
            mkdir -p "$BENCH_BIN"
            local src
            for src in bench/null_server.c bench/reqclient.c; do
                cc -std=c17 -D_GNU_SOURCE -O2 -Wall -Wextra -Wshadow -Wstrict-prototypes -Wvla \
                    -Werror "$src" -o "$BENCH_BIN/$(basename "$src" .c)" ||
                    die "cannot build $src"
            done
        fi
    fi
    [[ -x $BENCH_BIN/null_server && -x $BENCH_BIN/reqclient ]] ||
        die "bench helpers missing after the build (see $blog)"
}

free_ports() {
    "$PY" - "$1" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

server_available() {
    case $1 in
    flare | flare-uring)
        [[ -x $FLARE_HELLO ]] || return 1
        if [[ $FLARE_BUILD_OK != 1 ]]; then
            return 1 # a binary left over from an older build is not what we want to measure
        fi
        ;;
    null | null-*) [[ -x $BENCH_BIN/null_server ]] ;;
    nginx) command -v nginx >/dev/null 2>&1 ;;
    h2o) command -v h2o >/dev/null 2>&1 ;;
    lighttpd) command -v lighttpd >/dev/null 2>&1 ;;
    *) return 1 ;;
    esac
}

# Keep only the servers that exist; warn about the others.
filter_servers() {
    local out=() s
    for s in "$@"; do
        case " $ALL_SERVERS " in *" $s "*) ;; *) die "unknown server '$s' (known: $ALL_SERVERS)" ;; esac
        if server_available "$s"; then
            out+=("$s")
        elif [[ $s == flare ]]; then
            if [[ -x $FLARE_HELLO ]]; then
                warn "flare skipped: the release build failed, $FLARE_HELLO is stale"
            else
                warn "flare skipped: $FLARE_HELLO does not exist (yet)"
            fi
        else
            warn "$s skipped: binary not found"
        fi
    done
    printf '%s\n' "${out[*]}"
}

# make_echo_body FILE: the 1 KiB request body of the echo scenario (printable, no CRLF, so
# the null server, which counts "\r\n\r\n", sees exactly one request per request).
make_echo_body() {
    ECHO_BODY_FILE=$1
    "$PY" -c 'import sys
line = "Flare echo body: 0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ. "
sys.stdout.write((line * 20)[:1024])' >"$ECHO_BODY_FILE"
}

# make_static_dir DIR: the files of the static-file scenarios, DIR/4k.bin (4096 bytes) and
# DIR/1m.bin (1048576 bytes). Fixed, printable content (64-byte lines "<offset in hex> <filler>\n";
# 4k.bin is the first 4 KiB of 1m.bin), so every run serves the same bytes. Sets STATIC_DIR.
make_static_dir() {
    local dir=$1
    mkdir -p "$dir"
    "$PY" - "$dir" "$STATIC_4K_LEN" "$STATIC_1M_LEN" <<'EOF'
import os, sys
d, small, big = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
fill = ("Flare static-file benchmark: 0123456789 abcdefghijklmnopqrstuvwxyz " * 2)[:54]
data = "".join(f"{off:08x} {fill}\n" for off in range(0, big, 64)).encode()[:big]
for name, n in (("4k.bin", small), ("1m.bin", big)):
    with open(os.path.join(d, name), "wb") as f:
        f.write(data[:n])
EOF
    chmod 755 "$dir"
    chmod 644 "$dir/4k.bin" "$dir/1m.bin"
    [[ $(stat -c %s "$dir/4k.bin") == "$STATIC_4K_LEN" &&
        $(stat -c %s "$dir/1m.bin") == "$STATIC_1M_LEN" ]] ||
        die "make_static_dir: wrong file sizes in $dir"
    STATIC_DIR=$dir
}

# Does examples/hello take --static DIR (GET /static/... from DIR)? Its usage line says so.
# (Asked once, after build_bench.)
FLARE_HAS_STATIC=''
flare_has_static() {
    if [[ -z $FLARE_HAS_STATIC ]]; then
        FLARE_HAS_STATIC=0
        if [[ -x $FLARE_HELLO && $("$FLARE_HELLO" --help 2>&1) == *--static* ]]; then
            FLARE_HAS_STATIC=1
        fi
    fi
    [[ $FLARE_HAS_STATIC == 1 ]]
}

# Does lighttpd have mod_magnet (Debian: lighttpd-modules-lua)? It serves /users/{id} with it.
lighttpd_has_magnet() { [[ -e /usr/lib/lighttpd/mod_magnet.so ]]; }

# The descriptors a server may open: ulimit -n (65536 when "unlimited").
nofile_limit() {
    local nofile
    nofile=$(ulimit -n)
    [[ $nofile =~ ^[0-9]+$ ]] || nofile=65536
    echo "$nofile"
}

# Write DIR/nginx.conf and set SERVER_CMD to run it in the foreground: one worker and no master
# process, as many connections as the descriptor limit allows, every temporary path under
# DIR/tmp, no access log, keep-alive without a request limit; what goes inside the http block
# besides (its server and upstream blocks) is read from stdin. The scenarios' server
# (server_command) and bench/proxy.sh's proxy are written by it.
nginx_config() {
    local dir=$1 nofile
    nofile=$(nofile_limit)
    mkdir -p "$dir/tmp"
    {
        cat <<EOF
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
EOF
        cat
        echo "}"
    } >"$dir/nginx.conf"
    SERVER_CMD=(nginx -p "$dir/" -c "$dir/nginx.conf" -e "$dir/error.log"
        -g 'daemon off; master_process off;')
}

# Write NAME's config for PORT into $BENCH_TMP/NAME-PORT/ and set SERVER_CMD.
server_command() {
    local name=$1 port=$2 dir=$BENCH_TMP/$1-$2 nofile
    nofile=$(nofile_limit)
    mkdir -p "$dir/www"
    chmod 755 "$dir" "$dir/www"
    printf '%s' "$BODY" >"$dir/www/plaintext"
    printf '%s' "$JSON_BODY" >"$dir/www/json"
    printf '%s' "$JSON_BODY" >"$dir/www/message.json"
    chmod 644 "$dir/www/plaintext" "$dir/www/json" "$dir/www/message.json"
    # /static/: only once make_static_dir was called (run.sh does), so counts.sh and guard.sh
    # measure the servers exactly as before
    local nginx_static='' lighttpd_mime=''
    if [[ -n $STATIC_DIR ]]; then
        nginx_static="
        location /static/ {
            alias $STATIC_DIR/;
            default_type application/octet-stream;
            sendfile on;
        }"
        lighttpd_mime='"bin" => "application/octet-stream", '
    fi
    # NAME-uring: the same server on its io_uring backend (flare --io uring, null_server
    # --io uring); plain flare and null are the epoll ones
    local io=epoll
    if [[ $name == *-uring ]]; then
        io=uring
        name=${name%-uring}
    fi
    case $name in
    flare)
        SERVER_CMD=("$FLARE_HELLO" --listen "127.0.0.1:$port" --workers 1 --io "$io")
        if [[ -n $STATIC_DIR ]] && flare_has_static; then
            SERVER_CMD+=(--static "$STATIC_DIR")
        fi
        ;;
    null)
        SERVER_CMD=("$BENCH_BIN/null_server" --listen "127.0.0.1:$port")
        ;;
    null-json)
        SERVER_CMD=("$BENCH_BIN/null_server" --listen "127.0.0.1:$port"
            --content-type application/json --body "$JSON_BODY")
        ;;
    null-users)
        SERVER_CMD=("$BENCH_BIN/null_server" --listen "127.0.0.1:$port"
            --content-type application/json --body "$USERS_BODY")
        ;;
    null-echo)
        [[ -n $ECHO_BODY_FILE ]] || die "null-echo: make_echo_body was not called"
        SERVER_CMD=("$BENCH_BIN/null_server" --listen "127.0.0.1:$port"
            --content-type "$ECHO_CTYPE" --body-file "$ECHO_BODY_FILE")
        ;;
    null-4k | null-1m)
        [[ -n $STATIC_DIR ]] || die "$name: make_static_dir was not called"
        SERVER_CMD=("$BENCH_BIN/null_server" --listen "127.0.0.1:$port"
            --content-type application/octet-stream --body-file "$STATIC_DIR/${name#null-}.bin")
        ;;
    nginx)
        nginx_config "$dir" <<EOF
    server {
        listen 127.0.0.1:$port backlog=4096;
        location = /plaintext {
            default_type text/plain;
            return 200 "$BODY";
        }
        location = /json {
            default_type application/json;
            return 200 '$JSON_BODY';
        }
        location ~ ^/users/(\d+)\$ {
            default_type application/json;
            return 200 '{"id":"\$1"}';
        }$nginx_static
    }
EOF
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
hosts:
  default:
    paths:
      /plaintext:
        file.file: $dir/www/plaintext
      /json:
        file.file: $dir/www/message.json
      /users:
        mruby.handler: |
          Proc.new do |env|
            if env["PATH_INFO"] =~ /\A\/(\d+)\z/
              [200, {"content-type" => "application/json"}, ["{\"id\":\"#{\$1}\"}"]]
            else
              [404, {"content-type" => "text/plain"}, ["not found\n"]]
            end
          end
      /echo:
        mruby.handler: |
          Proc.new do |env|
            if env["REQUEST_METHOD"] == "POST"
              [200, {"content-type" => env["CONTENT_TYPE"] || "application/octet-stream"},
               [env["rack.input"].read]]
            else
              [405, {"content-type" => "text/plain"}, ["method not allowed\n"]]
            end
          end
EOF
        if [[ -n $STATIC_DIR ]]; then
            cat >>"$dir/h2o.conf" <<EOF
      /static:
        file.dir: $STATIC_DIR
EOF
        fi
        SERVER_CMD=(h2o -m worker -c "$dir/h2o.conf")
        ;;
    lighttpd)
        cat >"$dir/lighttpd.conf" <<EOF
server.document-root = "$dir/www"
server.bind = "127.0.0.1"
server.port = $port
server.errorlog = "$dir/error.log"
server.max-fds = $nofile
server.max-connections = $((nofile / 2 - 16))
server.max-keep-alive-requests = 65535
server.max-keep-alive-idle = 300
server.max-read-idle = 300
server.tag = "lighttpd"
mimetype.assign = (${lighttpd_mime}"json" => "application/json", "" => "text/plain")
EOF
        if [[ -n $STATIC_DIR ]]; then
            cat >>"$dir/lighttpd.conf" <<EOF
server.modules += ("mod_alias")
alias.url = ("/static/" => "$STATIC_DIR/")
EOF
        fi
        if lighttpd_has_magnet; then
            cat >"$dir/users.lua" <<'EOF'
local id = string.match(lighty.r.req_attr["uri.path"], "^/users/(%d+)$")
if id then
  lighty.r.resp_header["Content-Type"] = "application/json"
  lighty.r.resp_body:set({ '{"id":"', id, '"}' })
  return 200
end
EOF
            cat >>"$dir/lighttpd.conf" <<EOF
server.modules += ("mod_magnet")
\$HTTP["url"] =~ "^/users/" { magnet.attract-raw-url-to = ("$dir/users.lua") }
EOF
        fi
        SERVER_CMD=(lighttpd -D -f "$dir/lighttpd.conf")
        ;;
    *) die "unknown server $name" ;;
    esac
    if [[ $name == null* ]]; then
        SERVER_CMD+=(--io "$io")
    fi
    SERVER_DIR=$dir
}

# start_server NAME PORT [WRAPPER...] -> SERVER_PID, SERVER_LOG
start_server() {
    local name=$1 port=$2
    shift 2
    server_command "$name" "$port"
    SERVER_LOG=$SERVER_DIR/stdout.log
    # A plain simple command: $! is the server itself (wrappers such as taskset and
    # valgrind exec into it or run it in-process, so the pid stays the same).
    "$@" "${SERVER_CMD[@]}" >"$SERVER_LOG" 2>&1 </dev/null &
    SERVER_PID=$!
    BENCH_PIDS+=("$SERVER_PID")
}

show_server_logs() {
    local dir=$1 f
    for f in "$dir"/stdout.log "$dir"/error.log; do
        [[ -s $f ]] || continue
        printf -- '--- %s (last lines)\n' "$f" >&2
        tail -n 20 "$f" >&2
    done
}

# lighttpd answers /users/{id} through mod_magnet: install it when missing (best effort; without
# it lighttpd is "n/a" in that scenario).
ensure_magnet() {
    lighttpd_has_magnet && return 0
    command -v lighttpd >/dev/null 2>&1 || return 0
    [[ $(id -u) == 0 ]] || return 0
    log "installing lighttpd-modules-lua (mod_magnet, for lighttpd's /users/{id})"
    DEBIAN_FRONTEND=noninteractive apt-get install -y lighttpd-modules-lua >&2 ||
        warn "could not install lighttpd-modules-lua: lighttpd will be n/a for /users/{id}"
}

# check_route PORT METHOD PATH EXPECTED_BODY [REQUEST_BODY_FILE CONTENT_TYPE [EXPECTED_FILE]]:
# one request with curl; 200 and exactly EXPECTED_BODY (with EXPECTED_FILE: byte for byte that
# file's contents instead), and, with a request body, the Content-Type echoed? Sets CHECK_ERR
# when not.
check_route() {
    local port=$1 method=$2 path=$3 expect=$4 bfile=${5:-} ctype=${6:-} efile=${7:-} code
    local -a extra=()
    if [[ -n $bfile ]]; then
        extra=(-H "Content-Type: $ctype" --data-binary "@$bfile")
    fi
    code=$(curl -s --max-time 5 -X "$method" "${extra[@]}" -o "$BENCH_TMP/check.body" \
        -D "$BENCH_TMP/check.head" -w '%{http_code}' "http://127.0.0.1:$port$path" 2>/dev/null) || {
        CHECK_ERR="no answer"
        return 1
    }
    [[ $code == 200 ]] || {
        CHECK_ERR="status $code"
        return 1
    }
    if [[ -n $efile ]]; then
        if ! cmp -s "$BENCH_TMP/check.body" "$efile"; then
            CHECK_ERR="body of $(stat -c %s "$BENCH_TMP/check.body") bytes, not the"
            CHECK_ERR+=" $(stat -c %s "$efile") bytes of $efile"
            return 1
        fi
    elif [[ $(<"$BENCH_TMP/check.body") != "$expect" ]]; then
        CHECK_ERR="body '$(head -c 100 "$BENCH_TMP/check.body")'"
        return 1
    fi
    if [[ -n $ctype ]] && ! tr -d '\r' <"$BENCH_TMP/check.head" | grep -qix "content-type: *$ctype"; then
        CHECK_ERR="Content-Type is not $ctype: $(grep -i '^content-type' "$BENCH_TMP/check.head" | tr -d '\r')"
        return 1
    fi
}

# GET /plaintext once with curl: 200 and exactly the body?
check_plaintext() {
    local port=$1 out code
    out=$(curl -s --max-time 5 -o "$BENCH_TMP/check.body" -w '%{http_code}' \
        "http://127.0.0.1:$port/plaintext" 2>/dev/null) || return 1
    code=$out
    [[ $code == 200 ]] || {
        CHECK_ERR="status $code"
        return 1
    }
    [[ $(<"$BENCH_TMP/check.body") == "$BODY" ]] || {
        CHECK_ERR="body '$(head -c 100 "$BENCH_TMP/check.body")'"
        return 1
    }
}

# Is NAME on PORT answering? GET /plaintext (the null-* servers: their canned body).
ready_check() {
    case $1 in
    null-json) check_route "$2" GET / "$JSON_BODY" ;;
    null-users) check_route "$2" GET / "$USERS_BODY" ;;
    null-echo) check_route "$2" GET / "$(<"$ECHO_BODY_FILE")" ;;
    null-4k | null-1m) check_route "$2" GET / '' '' '' "$STATIC_DIR/${1#null-}.bin" ;;
    *) check_plaintext "$2" ;;
    esac
}

# wait_ready NAME PID PORT TIMEOUT_SECONDS: returns 1 (after showing the server's logs and
# the reason on stderr) if GET /plaintext does not answer 200 "Hello, World!" in time.
wait_ready() {
    local name=$1 pid=$2 port=$3 timeout=$4 deadline
    deadline=$((SECONDS + timeout))
    CHECK_ERR="no answer"
    while ((SECONDS < deadline)); do
        if ! kill -0 "$pid" 2>/dev/null; then
            show_server_logs "$BENCH_TMP/$name-$port"
            printf '[%s] %s exited during startup\n' "$(date +%H:%M:%S)" "$name" >&2
            return 1
        fi
        if ready_check "$name" "$port"; then
            return 0
        fi
        sleep 0.2
    done
    show_server_logs "$BENCH_TMP/$name-$port"
    printf "[%s] %s on port %s: no 200 with the expected body within %ss (%s)\n" \
        "$(date +%H:%M:%S)" "$name" "$port" "$timeout" "$CHECK_ERR" >&2
    return 1
}

stop_server() {
    local pid=$1
    kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 300); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        warn "pid $pid ignored SIGTERM for 30 s, killing it"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
    local keep=() p
    for p in "${BENCH_PIDS[@]}"; do
        [[ $p == "$pid" ]] || keep+=("$p")
    done
    BENCH_PIDS=("${keep[@]}")
}

# Raise the open-file limit to 65536, or as far as the hard limit allows.
raise_nofile() {
    local want=${1:-65536} hard
    ulimit -n "$want" 2>/dev/null && return 0
    hard=$(ulimit -Hn)
    if [[ $hard != unlimited ]] && ((hard < want)); then
        ulimit -n "$hard" 2>/dev/null || true
        warn "open-file limit is $(ulimit -n), not $want (hard limit $hard; raising it needs CAP_SYS_RESOURCE)"
    fi
}

# With CONFIG_SCHED_AUTOGROUP, nice only ranks tasks within one session's group; groups
# compete as equals. So also give this session's group the nice level (restored on exit),
# or a busy neighbour in another session keeps taking half the server's core.
boost_priority() {
    local nice=$1 cur
    [[ -w /proc/self/autogroup ]] || return 0
    cur=$(awk '{ print $3 }' /proc/self/autogroup 2>/dev/null) || return 0
    [[ $cur =~ ^-?[0-9]+$ ]] || return 0
    if echo "$nice" >/proc/self/autogroup 2>/dev/null; then
        AUTOGROUP_NICE0=$cur
    else
        warn "could not set this session's autogroup nice to $nice"
    fi
}

CLK_TCK=$(getconf CLK_TCK)

# utime + stime of the whole thread group (the process line aggregates all its threads).
cpu_us() {
    local stat rest
    stat=$(<"/proc/$1/stat") || return 1
    rest=${stat##*) } # the command name may contain spaces and parentheses
    local -a f
    read -r -a f <<<"$rest"
    # f[0] is field 3 (state); utime is field 14, stime field 15.
    echo $(((f[11] + f[12]) * 1000000 / CLK_TCK))
}

cpu_tree_us() {
    local total k c
    total=$(cpu_us "$1") || return 1
    for k in $(pgrep -P "$1" 2>/dev/null); do
        c=$(cpu_tree_us "$k" 2>/dev/null) || continue # it exited meanwhile
        total=$((total + c))
    done
    echo "$total"
}

rss_kb() {
    awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"
}
