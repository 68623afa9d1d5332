#!/usr/bin/env bash
# tools/fresh-check.sh — the README's commands on a new, minimal Debian 12 machine.
#
# CI runs on a machine where every package is already installed, so it cannot see an install
# step that is missing or wrong. This builds a minimal bookworm root with mmdebstrap (apt, dpkg
# and make, nothing else: no compiler, no python3, no apt lists), copies a clean clone of HEAD
# into it and, inside it as root:
#   make run    until GET / answers the showcase's index page, then stops the server; checks
#               that it installed none of the test packages (cmocka, chromium, python3-websockets)
#   make test   the whole suite; a test that skipped counts as a failure here (in a root that
#               `tools/deps.sh test` just provisioned, a skip means a missing dependency)
# and reports each command's result and wall time. Exit status 0 only when both pass.
#
#   sudo tools/fresh-check.sh          # needs root (chroot, mounts), as CI has
#
# Takes about 5 minutes on 2 cores with a nearby mirror (root 1, make run 1, make test 3), more
# where downloads are slow (about 250 packages; chromium is the big one). Only committed changes are checked (a clone of HEAD). Uncommitted ones are not.
#
# environment:
#   FRESH_ROOT=DIR      where to build the root (default: a new directory under /tmp, removed
#                       at the end). A DIR that already holds a root from an earlier run with
#                       FRESH_KEEP=1 is reused: faster, but no longer fresh (packages installed).
#   FRESH_KEEP=1        keep the root afterwards (for a look inside, or for FRESH_ROOT reuse)
#   FRESH_APT_CACHE=DIR keep the downloaded .deb files in DIR across runs (the root stays fresh:
#                       only the downloads are reused)
#   FRESH_PORT=N        the port for `make run` (default 8080, or the next free one when 8080 is
#                       taken: the root shares the host's loopback)
#   FRESH_MIRROR=...    an apt sources file or mirror URI for mmdebstrap (default: the host's
#                       bookworm entries from /etc/apt/sources.list{,.d/*})
#   FRESH_RUN_TIMEOUT=1800 FRESH_TEST_TIMEOUT=3600   seconds for each command
#   FRESH_LOG_DIR=DIR   logs (default /tmp/flare-fresh-<time>/): mmdebstrap, each command,
#                       the packages installed by each
#   FRESH_ALLOW_SKIP=1  do not count skipped tests as a failure
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
KEEP=${FRESH_KEEP:-0}
RUN_TIMEOUT=${FRESH_RUN_TIMEOUT:-1800}
TEST_TIMEOUT=${FRESH_TEST_TIMEOUT:-3600}
LOG_DIR=${FRESH_LOG_DIR:-/tmp/flare-fresh-$(date +%Y%m%d-%H%M%S)}
SRC_IN_ROOT=/root/flare
MARKER=.flare-fresh-root

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() {
    log "ERROR: $*"
    exit 2
}

[ "$(id -u)" -eq 0 ] || die "needs root (mmdebstrap, chroot and mounts): sudo $0"

# --- the host's tools -------------------------------------------------------------------------
need=()
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
command -v curl >/dev/null || need+=(curl)
command -v git >/dev/null || need+=(git)
if [ ${#need[@]} -ne 0 ]; then
    log "installing on the host: ${need[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

mkdir -p "$LOG_DIR"
HEAD=$(git -C "$REPO" rev-parse HEAD)
if [ -n "$(git -C "$REPO" status --porcelain --untracked-files=no)" ]; then
    log "note: uncommitted changes are not checked (a clone of HEAD ${HEAD:0:12} is)"
fi

# --- state and cleanup ------------------------------------------------------------------------
ROOT=''
CREATED_ROOT=0
MOUNTS=()
RUN_PID=''

# Every process whose root directory is the chroot (servers, browsers left behind).
root_pids() {
    local p r
    for p in /proc/[0-9]*; do
        r=$(readlink "$p/root" 2>/dev/null) || continue
        [ "$r" = "$ROOT" ] && echo "${p#/proc/}"
    done
    return 0
}

cleanup() {
    local rc=$? m i pids
    if [ -n "$RUN_PID" ] && kill -0 "$RUN_PID" 2>/dev/null; then
        kill -TERM -- "-$RUN_PID" 2>/dev/null || true
    fi
    if [ -n "$ROOT" ]; then
        pids=$(root_pids)
        if [ -n "$pids" ]; then
            # shellcheck disable=SC2086
            kill -TERM $pids 2>/dev/null || true
            sleep 2
            pids=$(root_pids)
            # shellcheck disable=SC2086
            [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
        fi
    fi
    for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do
        m=${MOUNTS[i]}
        umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "could not unmount $m"
    done
    if [ -n "$ROOT" ] && [ "$CREATED_ROOT" = 1 ] && [ "$KEEP" != 1 ]; then
        # Never delete through a mount that is still there (it could be the host's /dev).
        if awk -v r="$ROOT/" 'index($5 "/", r) == 1 { found = 1 } END { exit !found }' \
            /proc/self/mountinfo; then
            log "mounts remain under $ROOT; not removing it"
        else
            rm -rf --one-file-system "$ROOT"
        fi
    elif [ -n "$ROOT" ]; then
        log "root kept: $ROOT (FRESH_ROOT=$ROOT FRESH_KEEP=1 reuses it)"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the apt sources for the root -------------------------------------------------------------
# The host's Debian bookworm entries (its configured mirror), both formats; other archives
# (third-party repositories) are left out.
host_sources() {
    local f
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        awk 'BEGIN { RS = ""; ORS = "\n\n" }
             /(^|\n)Types:[^\n]*deb([ \t]|\n|$)/ &&
             /(^|\n)Suites:[ \t]*(bookworm(-updates|-security)?[ \t]*)+(\n|$)/ &&
             !/(^|\n)Enabled:[ \t]*no/ { print }' "$f"
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        awk '$1 == "deb" {
                 i = 2; if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
                 if ($(i + 1) ~ /^bookworm(-updates|-security)?$/) print
             }' "$f"
    done
}

mirror_args=()
if [ -n "${FRESH_MIRROR:-}" ]; then
    mirror_args=("$FRESH_MIRROR")
else
    host_sources >"$LOG_DIR/sources"
    if [ -s "$LOG_DIR/sources" ]; then
        mirror_args=("$LOG_DIR/sources")
    else
        log "no bookworm entries in the host's apt sources; mmdebstrap's default mirror it is"
    fi
fi

# --- the root ---------------------------------------------------------------------------------
t_root0=$(date +%s)
if [ -n "${FRESH_ROOT:-}" ] && [ -f "$FRESH_ROOT/$MARKER" ]; then
    ROOT=$(cd "$FRESH_ROOT" && pwd)
    log "reusing the root in $ROOT (not fresh: what earlier runs installed is still there)"
else
    if [ -n "${FRESH_ROOT:-}" ]; then
        mkdir -p "$FRESH_ROOT"
        [ -z "$(ls -A "$FRESH_ROOT")" ] || die "FRESH_ROOT=$FRESH_ROOT is neither empty nor a root from an earlier run"
        ROOT=$(cd "$FRESH_ROOT" && pwd)
    else
        ROOT=$(mktemp -d /tmp/flare-fresh-root.XXXXXX)
    fi
    CREATED_ROOT=1
    log "building a minimal Debian 12 root in $ROOT (mmdebstrap --variant=apt, + make)"
    # --variant=apt: Essential packages and apt. make: the README's commands start with it.
    # mmdebstrap removes the apt lists at the end, as on a new machine.
    if ! mmdebstrap --variant=apt --include=make bookworm "$ROOT" "${mirror_args[@]}" \
        >"$LOG_DIR/mmdebstrap.log" 2>&1; then
        tail -n 20 "$LOG_DIR/mmdebstrap.log" >&2
        die "mmdebstrap failed (log: $LOG_DIR/mmdebstrap.log)"
    fi
    touch "$ROOT/$MARKER"
fi
t_root=$(($(date +%s) - t_root0))

# What a container runtime or an installer would provide: name resolution and localhost.
cp /etc/resolv.conf "$ROOT/etc/resolv.conf" 2>/dev/null || true
[ -s "$ROOT/etc/hosts" ] || printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$ROOT/etc/hosts"

# A clean clone of HEAD (what a newcomer gets from git clone).
rm -rf "${ROOT:?}$SRC_IN_ROOT"
git clone -q --no-hardlinks "$REPO" "$ROOT$SRC_IN_ROOT"
git -C "$ROOT$SRC_IN_ROOT" checkout -q --detach "$HEAD"

mount_one() { # mount ARGS... TARGET: record TARGET for the cleanup
    local target=${*: -1}
    mkdir -p "$target"
    mount "$@"
    MOUNTS+=("$target")
}
mount_one -t proc proc "$ROOT/proc"
mount_one --bind /sys "$ROOT/sys"
mount --make-private "$ROOT/sys"
mount_one --bind /dev "$ROOT/dev"
mount --make-private "$ROOT/dev" # nothing mounted below it may reach the host's /dev
mount_one --bind /dev/pts "$ROOT/dev/pts"
mount_one -t tmpfs -o mode=1777 tmpfs "$ROOT/dev/shm"
mount_one -t tmpfs -o mode=1777 tmpfs "$ROOT/tmp"
if [ -n "${FRESH_APT_CACHE:-}" ]; then
    mkdir -p "$FRESH_APT_CACHE/partial"
    mount_one --bind "$FRESH_APT_CACHE" "$ROOT/var/cache/apt/archives"
fi

# The certificate authorities this host added itself (/usr/local/share/ca-certificates: e.g.
# a TLS-inspecting proxy on the way to the npm registry) are part of the network, not of the
# packages: a new machine on the same network has them too. They go into the root as one file
# for Node (NODE_EXTRA_CA_CERTS), so npm reaches the registry from there as it does from here;
# Debian's own trust store in the root stays as its packages make it.
EXTRA_CA=''
shopt -s nullglob
local_cas=(/usr/local/share/ca-certificates/*.crt)
shopt -u nullglob
if [ ${#local_cas[@]} -gt 0 ]; then
    cat "${local_cas[@]}" >"$ROOT/root/.host-local-ca.pem"
    EXTRA_CA=NODE_EXTRA_CA_CERTS=/root/.host-local-ca.pem
fi
export EXTRA_CA

# A command in the root as root, with the environment of a login on a new machine.
in_root() {
    env -i HOME=/root USER=root LOGNAME=root TERM=dumb LANG=C.UTF-8 SHELL=/bin/bash \
        PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin ${EXTRA_CA:+"$EXTRA_CA"} \
        chroot "$ROOT" /bin/bash -c "cd $SRC_IN_ROOT && $1"
}
# shellcheck disable=SC2016 # dpkg-query's format, not the shell's
packages() { chroot "$ROOT" dpkg-query -W -f='${Package}\n' | sort; }
export ROOT SRC_IN_ROOT
export -f in_root
# kill -0 is true for a zombie too: a process that exited is "alive" until reaped.
alive() { [ -r "/proc/$1/status" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null; }

# --- the port ---------------------------------------------------------------------------------
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
if [ -n "${FRESH_PORT:-}" ]; then
    PORT=$FRESH_PORT
    ! port_busy "$PORT" || die "FRESH_PORT=$PORT is in use on 127.0.0.1"
else
    PORT=8080
    while port_busy "$PORT"; do
        PORT=$((PORT + 1))
        [ "$PORT" -lt 8180 ] || die "no free port in 8080-8179"
    done
fi

declare -A RESULT TIME NOTE
packages >"$LOG_DIR/packages.0"

# --- make run ---------------------------------------------------------------------------------
log "make run LISTEN=127.0.0.1:$PORT (log: $LOG_DIR/make-run.log)"
t0=$(date +%s)
# setsid: the make, the build and the server form one process group, stopped together.
setsid bash -c "in_root 'exec make run LISTEN=127.0.0.1:$PORT'" >"$LOG_DIR/make-run.log" 2>&1 &
RUN_PID=$!
RESULT[run]=FAIL
answer=''
while :; do
    answer=$(curl -s --max-time 2 "http://127.0.0.1:$PORT/" 2>/dev/null || true)
    if [[ "$answer" == *"<title>Flare showcase</title>"* ]]; then
        RESULT[run]=PASS
        # Swagger UI comes from npm at build time: /docs/ must be the page, not the 503
        docs=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "http://127.0.0.1:$PORT/docs/" ||
            true)
        if [ "$docs" != 200 ]; then
            RESULT[run]=FAIL
            NOTE[run]="GET /docs/ answered $docs, not 200"
        fi
        break
    fi
    if ! alive "$RUN_PID"; then
        NOTE[run]="exited before answering"
        break
    fi
    if (($(date +%s) - t0 > RUN_TIMEOUT)); then
        NOTE[run]="no answer within ${RUN_TIMEOUT}s"
        break
    fi
    sleep 2
done
TIME[run]=$(($(date +%s) - t0))
kill -TERM -- "-$RUN_PID" 2>/dev/null || true
for _ in $(seq 1 50); do
    alive "$RUN_PID" || break
    sleep 0.2
done
kill -KILL -- "-$RUN_PID" 2>/dev/null || true
wait "$RUN_PID" 2>/dev/null || true
RUN_PID=''
packages >"$LOG_DIR/packages.run"
comm -13 "$LOG_DIR/packages.0" "$LOG_DIR/packages.run" >"$LOG_DIR/installed-by-make-run"
# "No more than its path needs": the test-only packages must not be there yet.
# (python3 itself is no longer one: nodejs, under the build's npm, depends on it)
extra=$(grep -xE 'chromium|libcmocka-dev|python3-websockets|python3-brotli' \
    "$LOG_DIR/installed-by-make-run" | tr '\n' ' ' || true)
if [ -n "$extra" ]; then
    RESULT[run]=FAIL
    NOTE[run]="${NOTE[run]:+${NOTE[run]}; }installed test packages: $extra"
fi
NOTE[run]="${NOTE[run]:+${NOTE[run]}; }$(wc -l <"$LOG_DIR/installed-by-make-run") packages installed"
if [ "${RESULT[run]}" != PASS ]; then
    log "make run failed; its last lines:"
    tail -n 25 "$LOG_DIR/make-run.log" >&2
fi

# --- make test --------------------------------------------------------------------------------
log "make test (log: $LOG_DIR/make-test.log)"
t0=$(date +%s)
RESULT[test]=FAIL
if timeout --kill-after=30 "$TEST_TIMEOUT" bash -c "in_root 'make test'" \
    >"$LOG_DIR/make-test.log" 2>&1; then
    RESULT[test]=PASS
else
    rc=$?
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then NOTE[test]="timed out after ${TEST_TIMEOUT}s"; else NOTE[test]="exit $rc"; fi
fi
TIME[test]=$(($(date +%s) - t0))
packages >"$LOG_DIR/packages.test"
comm -13 "$LOG_DIR/packages.run" "$LOG_DIR/packages.test" >"$LOG_DIR/installed-by-make-test"
summary=$(grep -E '^[0-9]+% tests passed' "$LOG_DIR/make-test.log" | tail -n 1 || true)
[ -z "$summary" ] || NOTE[test]="${NOTE[test]:+${NOTE[test]}; }$summary"
# Tests that skipped themselves (python's unittest ends with "OK (skipped=N)", flaretest's
# runner with "N passed, 0 failed, M skipped", cmocka prints "[  SKIPPED ]"), from ctest's
# record of every test's output.
lastlog=$ROOT$SRC_IN_ROOT/build/Testing/Temporary/LastTest.log
if [ -f "$lastlog" ]; then
    cp "$lastlog" "$LOG_DIR/LastTest.log"
    skipped=$(awk '/^[0-9]+\/[0-9]+ Testing: / { t = $3 }
                   /skipped=[1-9]|\[  SKIPPED \]|[ ,:][1-9][0-9]* skipped/ { if (t != "" && !(t in s)) { s[t] = 1; print t } }' \
        "$lastlog" | tr '\n' ' ')
    if [ -n "$skipped" ]; then
        NOTE[test]="${NOTE[test]:+${NOTE[test]}; }skipped: $skipped"
        if [ "${FRESH_ALLOW_SKIP:-0}" != 1 ]; then RESULT[test]=FAIL; fi
    fi
fi
NOTE[test]="${NOTE[test]:+${NOTE[test]}; }$(wc -l <"$LOG_DIR/installed-by-make-test") more packages installed"
if [ "${RESULT[test]}" != PASS ]; then
    log "make test failed; its last lines:"
    tail -n 40 "$LOG_DIR/make-test.log" >&2
fi

# --- report -----------------------------------------------------------------------------------
fmt() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }
echo
echo "fresh Debian 12 root, HEAD ${HEAD:0:12} (root: $(fmt "$t_root"); logs: $LOG_DIR)"
printf '  %-10s %-5s %8s  %s\n' "make run" "${RESULT[run]}" "$(fmt "${TIME[run]}")" "${NOTE[run]:-}"
printf '  %-10s %-5s %8s  %s\n' "make test" "${RESULT[test]}" "$(fmt "${TIME[test]}")" "${NOTE[test]:-}"
[ "${RESULT[run]}" = PASS ] && [ "${RESULT[test]}" = PASS ]
