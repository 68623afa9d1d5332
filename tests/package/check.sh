#!/usr/bin/env bash
# Installs the build into a scratch prefix, then builds a consumer with
# find_package(flare) and another with pkg-config, and runs both. Also checks
# that only flare_* symbols are exported and the SONAME is set.
set -euo pipefail
build=${1:?build dir}
src=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
lib=$(ls "$tmp"/prefix/lib*/libflare.so.0* 2>/dev/null | head -1)
[ -n "$lib" ] || { echo "no libflare.so.0 installed"; exit 1; }
soname=$(objdump -p "$lib" | awk '/SONAME/ {print $2}')
[ "$soname" = "libflare.so.0" ] || { echo "bad SONAME: $soname"; exit 1; }
bad=$(nm -D --defined-only "$lib" | awk '$2 ~ /[TDB]/ {print $3}' | grep -v '^flare_' | grep -v '^_' || true)
[ -z "$bad" ] || { echo "unexpected exported symbols:"; echo "$bad"; exit 1; }
nm -D --defined-only "$lib" | grep -q ' flare__' && { echo "internal flare__ symbols exported"; exit 1; }

cmake -S "$src" -B "$tmp/cm" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/cm" >/dev/null
LD_LIBRARY_PATH=$(dirname "$lib") "$tmp/cm/consumer" | grep -q "invalid route pattern"

pcdir=$(dirname "$(ls "$tmp"/prefix/lib*/pkgconfig/flare.pc)")
flags=$(PKG_CONFIG_PATH="$pcdir" pkg-config --define-prefix --cflags --libs flare)
cc -std=c17 -Wall -Wextra -Werror "$src/consumer.c" $flags -o "$tmp/pc-consumer"
LD_LIBRARY_PATH=$(dirname "$lib") "$tmp/pc-consumer" | grep -q "invalid route pattern"
echo "package ok: SONAME $soname, find_package and pkg-config consumers run"
