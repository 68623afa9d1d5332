#!/usr/bin/env bash
# Installs the Debian 12 packages one make target needs, only those missing.
#   tools/deps.sh build|test|asan|fuzz|docs|cluster|ci|bench
#     build  the library and the examples      (make build, make run, make install)
#     test   build + what the test suite runs   (make test)
#     asan   test + clang and its sanitizers    (make test-asan)
#     fuzz   build + clang and libFuzzer        (make fuzz)
#     docs   build + doxygen                    (make docs)
#     cluster build + redis-server and nginx-light (make cluster)
#     ci     everything .ci/run uses            (test + asan + the format check + make docs +
#            bench/guard.sh)
#     bench  build + the peer servers and instruments (make bench, make bench-counts)
# Why each package is there: docs/dependencies.md. Packages are installed with
# --no-install-recommends, so every one a step needs is listed here by name;
# tools/fresh-check.sh proves the lists on a minimal Debian 12 root.
# Works as root or through sudo, and on a machine where apt-get update never ran.
set -euo pipefail

# libpq-dev, libsqlite3-dev, libhiredis-dev: the data layer's client libraries (src/data/).
# libyaml-dev: the configuration file (src/obs/settings*.c, docs/config.md).
# libbrotli-dev: brotli response compression (src/web/compress.c).
# libnghttp2-dev: HTTP/2 framing, HPACK and flow control (src/http2/).
# liburing-dev: the io_uring loop backend (src/loop/uring.c; epoll is the fallback at run time).
# npm: swagger-ui-dist for /docs, installed at build time (cmake/swagger_ui.cmake): the showcase
# that make run starts serves Swagger UI, so the build needs it (it brings nodejs, and python3).
build_pkgs=(build-essential cmake pkg-config libjansson-dev libssl-dev zlib1g-dev libpq-dev
    libsqlite3-dev libhiredis-dev libyaml-dev libbrotli-dev libnghttp2-dev liburing-dev npm)
# cmocka: unit tests; python3 (/usr/bin/python3) + python3-websockets: integration tests;
# chromium: the chat example in a real browser (driven over DevTools, no driver binary).
# locales: a comma-decimal locale for the JSON number test (generated below).
# openssl (the command): the TLS tests make their certificates and drive s_client; curl and
# testssl.sh: independent TLS clients of the TLS tests (tests/integ/test_tls*.py).
# redis-server: the private server of the Redis tests (tests/services_redis.py); postgresql:
# the server tests/services.py starts privately (tests/unit/test_db_pg.c, test_tfb); sqlite3 (the
# command): examples/tfb/setup.sh fills the SQLite TFB database.
# python3-brotli: decodes the server's brotli in tests/integ/test_compress.py.
# prometheus: a private server scrapes /metrics in tests/integ/test_metrics.py (promtool too).
# logrotate: the log-rotation test moves the log under load (tests/integ/test_logrotate.py).
# npm (from build): also the OpenAPI 3.1 validator tests/integ/test_openapi.py installs
# (tests/openapi/package.json).
# nghttp2-client (nghttp) and python3-h2: independent HTTP/2 clients of the HTTP/2 tests.
# nginx-light: a private nginx proxies to a unix socket listener (tests/integ/test_unix_socket.py).
test_pkgs=("${build_pkgs[@]}" libcmocka-dev python3 python3-websockets python3-brotli chromium
    locales openssl curl testssl.sh redis-server postgresql sqlite3 prometheus logrotate
    nghttp2-client python3-h2 nginx-light)
clang_pkgs=(clang libclang-rt-14-dev)
asan_pkgs=("${test_pkgs[@]}" "${clang_pkgs[@]}")
fuzz_pkgs=("${build_pkgs[@]}" "${clang_pkgs[@]}")
# doxygen: the API reference of include/flare/ and its check (make docs, docs/api.md).
docs_pkgs=("${build_pkgs[@]}" doxygen)
# redis-server and nginx-light: the private Redis and load balancer of examples/cluster/run.sh.
cluster_pkgs=("${build_pkgs[@]}" redis-server nginx-light)
# clang-format: the format check; valgrind + curl: bench/guard.sh; doxygen: make docs.
ci_pkgs=("${test_pkgs[@]}" "${clang_pkgs[@]}" clang-format valgrind curl doxygen)
# openssl: bench/tls.sh's certificate (its handshake client is bench/tls_handshake.c).
# nghttp2-client: h2load, the HTTP/2 load generator.
bench_pkgs=("${build_pkgs[@]}" wrk nginx-light h2o lighttpd valgrind strace procps util-linux curl
    openssl nghttp2-client)

mode=${1:-build}
needs_locale=0
case "$mode" in test | asan | ci) needs_locale=1 ;; esac
case "$mode" in
build) pkgs=("${build_pkgs[@]}") ;;
test) pkgs=("${test_pkgs[@]}") ;;
asan) pkgs=("${asan_pkgs[@]}") ;;
fuzz) pkgs=("${fuzz_pkgs[@]}") ;;
docs) pkgs=("${docs_pkgs[@]}") ;;
cluster) pkgs=("${cluster_pkgs[@]}") ;;
ci) pkgs=("${ci_pkgs[@]}") ;;
bench) pkgs=("${bench_pkgs[@]}") ;;
*)
    echo "usage: $0 build|test|asan|fuzz|docs|cluster|ci|bench" >&2
    exit 2
    ;;
esac

installed() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
}

if ! command -v dpkg-query >/dev/null || ! command -v apt-get >/dev/null; then
    # Not Debian: check nothing, say what the Debian names are.
    echo "tools/deps.sh: no dpkg/apt here; make sure the equivalents of these are installed:" \
        "${pkgs[*]}" >&2
    exit 0
fi

# A root-owned step: directly as root, else through sudo, else stop and say what to run.
as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null; then
        sudo "$@"
    else
        echo "tools/deps.sh: need root (or sudo) for: $*" >&2
        [ ${#missing[@]} -eq 0 ] ||
            echo "  as root: apt-get update && apt-get install --no-install-recommends ${missing[*]}" >&2
        exit 1
    fi
}

missing=()
for p in "${pkgs[@]}"; do
    # A Node.js from elsewhere (NodeSource's nodejs bundles npm, and its package conflicts with
    # Debian's npm) already gives the npm command the build and the tests call: keep it.
    if [ "$p" = npm ] && ! installed npm && command -v npm >/dev/null; then
        continue
    fi
    installed "$p" || missing+=("$p")
done
if [ ${#missing[@]} -ne 0 ]; then
    echo "tools/deps.sh $mode: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    # Always refresh the lists first: on a new machine there are none, and stale
    # ones name package versions the mirror no longer has.
    if ! as_root apt-get update -qq; then
        echo "tools/deps.sh: apt-get update failed (network? /etc/apt/sources.list*)" >&2
        exit 1
    fi
    if ! as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; then
        echo "tools/deps.sh: apt-get install failed for: ${missing[*]}" >&2
        exit 1
    fi
    still=()
    for p in "${missing[@]}"; do
        installed "$p" || still+=("$p")
    done
    if [ ${#still[@]} -ne 0 ]; then
        echo "tools/deps.sh: still not installed: ${still[*]}" >&2
        exit 1
    fi
fi

# The test suite checks that JSON numbers do not follow LC_NUMERIC (tests/unit/test_json.c
# switches to de_DE.UTF-8 or fr_FR.UTF-8, and skips without either): one such locale must be
# generated, the Debian way (/etc/locale.gen + locale-gen, from the locales package).
if [ "$needs_locale" = 1 ] && ! locale -a 2>/dev/null | grep -qiE '^(de_DE|fr_FR)\.utf-?8$'; then
    echo "tools/deps.sh $mode: generating the de_DE.UTF-8 locale (for tests/unit/test_json.c)" >&2
    if grep -qE '^# *de_DE\.UTF-8 UTF-8' /etc/locale.gen 2>/dev/null; then
        as_root sed -i -E 's/^# *(de_DE\.UTF-8 UTF-8)/\1/' /etc/locale.gen
    else
        echo 'de_DE.UTF-8 UTF-8' | as_root tee -a /etc/locale.gen >/dev/null
    fi
    as_root locale-gen >/dev/null
fi
