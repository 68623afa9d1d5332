#!/usr/bin/env bash
# check.sh BUILD SOURCE: installs BUILD into a scratch prefix and checks what a
# user of the install gets, with neither tree to lean on:
# - SONAME, only flare_* symbols exported;
# - no installed text file (flare.pc, the CMake package) names the build or
#   source tree;
# - the prefix is then moved elsewhere (relocatable: pkg-config and
#   find_package must follow), and a consumer is built against it with
#   find_package(flare) and with pkg-config, and runs.
set -euo pipefail
build=$(cd "${1:?build dir}" && pwd)
root=$(cd "${2:?source dir}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "package: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
lib=$(find "$tmp/prefix" -name 'libflare.so.0*' -type f | head -1)
[ -n "$lib" ] || fail "no libflare.so.0 installed"
soname=$(objdump -p "$lib" | awk '/SONAME/ {print $2}')
[ "$soname" = "libflare.so.0" ] || fail "bad SONAME: $soname"
bad=$(nm -D --defined-only "$lib" | awk '$2 ~ /[TDB]/ {print $3}' | grep -v '^flare_' | grep -v '^_' || true)
[ -z "$bad" ] || fail "unexpected exported symbols: $bad"
if nm -D --defined-only "$lib" | grep -q ' flare__'; then fail "internal flare__ symbols exported"; fi

# Nothing installed may lean on the trees it came from.
for dir in "$build" "$root"; do
    hits=$(grep -rlIF "$dir" "$tmp/prefix" || true)
    [ -z "$hits" ] || fail "installed files name $dir: ${hits//$tmp\/prefix\//}"
done
libdir=$(dirname "$lib")
pcfile=$libdir/pkgconfig/flare.pc
[ -f "$pcfile" ] || fail "no flare.pc next to the library"
grep -q '^Description:.*HTTP/2' "$pcfile" || fail "flare.pc: $(grep '^Description' "$pcfile")"

# Move the prefix: whatever still points at where it was installed breaks.
mv "$tmp/prefix" "$tmp/moved"
prefix=$tmp/moved
libdir=$prefix${libdir#"$tmp/prefix"}
pcdir=$libdir/pkgconfig

cmake -S "$here" -B "$tmp/cm" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_C_FLAGS="-Wall -Wextra -Werror" >"$tmp/cm.log" 2>&1 || { cat "$tmp/cm.log"; fail "cmake"; }
found=$(sed -n 's/^flare_DIR:PATH=//p' "$tmp/cm/CMakeCache.txt")
case $found in "$prefix"/*) ;; *) fail "find_package(flare) found $found, not the moved prefix" ;; esac
cmake --build "$tmp/cm" >"$tmp/cm.log" 2>&1 || { cat "$tmp/cm.log"; fail "cmake --build"; }
"$tmp/cm/consumer" | grep -q "invalid route pattern" || fail "find_package consumer"

flags=$(PKG_CONFIG_PATH="$pcdir" pkg-config --cflags --libs flare)
# shellcheck disable=SC2086 # flags are words
cc -std=c17 -Wall -Wextra -Werror "$here/consumer.c" $flags -o "$tmp/pc-consumer" ||
    fail "pkg-config build ($flags)"
LD_LIBRARY_PATH=$libdir "$tmp/pc-consumer" | grep -q "invalid route pattern" || fail "pkg-config consumer"
echo "package ok: SONAME $soname; moved prefix; find_package and pkg-config consumers run"
