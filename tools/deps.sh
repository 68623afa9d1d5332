#!/usr/bin/env bash
# Installs the Debian packages a make target needs, only those missing.
#   tools/deps.sh build|test|ci|bench
set -euo pipefail

build_pkgs=(build-essential cmake pkg-config libjansson-dev libssl-dev zlib1g-dev)
test_pkgs=("${build_pkgs[@]}" libcmocka-dev python3 curl python3-websockets chromium chromium-driver)
ci_pkgs=("${test_pkgs[@]}" clang libclang-rt-14-dev clang-format)
bench_pkgs=("${build_pkgs[@]}" wrk nginx-light h2o lighttpd valgrind strace procps util-linux curl)

case "${1:-build}" in
build) pkgs=("${build_pkgs[@]}") ;;
test) pkgs=("${test_pkgs[@]}") ;;
ci) pkgs=("${ci_pkgs[@]}") ;;
bench) pkgs=("${bench_pkgs[@]}") ;;
*) echo "usage: $0 build|test|ci|bench" >&2; exit 2 ;;
esac

missing=()
for p in "${pkgs[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "installing: ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
    SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
