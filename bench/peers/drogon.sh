#!/usr/bin/env bash
# bench/peers/drogon.sh — builds bench/peers/drogon_updates.cc (a Drogon app serving TFB's
# /db and /updates on PostgreSQL) against an installed Drogon, for bench/db_xact.sh's
# PEER=drogon (docs/perf.md, "/updates against Drogon").
#
# usage (from the repository root):
#   DROGON_PREFIX=/opt/drogon bash bench/peers/drogon.sh [OUT_DIR]   # default build-bench/peers
# prints the path of the binary on stdout.
#
# Getting Drogon: it is not packaged by Debian. Build it from source
# (https://github.com/drogonframework/drogon, with its trantor submodule) as its README's
# "Install" steps say, as a Release build with PostgreSQL support, and install it into a
# prefix of your own: DROGON_PREFIX is that prefix (it holds lib/cmake/Drogon). libpq must
# be 14 or newer (Debian 12: 15) so that Drogon compiles its pipeline ("batch") mode, which
# auto_batch needs; Drogon's configure step says "The libpq supports batch mode". Its
# dependencies on Debian: g++ cmake libjsoncpp-dev uuid-dev zlib1g-dev libssl-dev libpq-dev
# (libbrotli-dev optional). docs/perf.md names the commit its figures were measured with.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DROGON_PREFIX=${DROGON_PREFIX:?DROGON_PREFIX: the prefix Drogon was installed into (see the header of this script)}
OUT=${1:-$ROOT/build-bench/peers}
[[ -f $DROGON_PREFIX/lib/cmake/Drogon/DrogonConfig.cmake ]] ||
    { echo "drogon.sh: no Drogon CMake package under $DROGON_PREFIX/lib/cmake/Drogon" >&2; exit 1; }
mkdir -p "$OUT/drogon-cmake"
# a one-target CMake project, so that Drogon's package brings its own dependencies
cat >"$OUT/drogon-cmake/CMakeLists.txt" <<EOF
cmake_minimum_required(VERSION 3.13)
project(drogon_updates CXX)
set(CMAKE_CXX_STANDARD 17)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
find_package(Drogon CONFIG REQUIRED)
add_executable(drogon_updates "$ROOT/bench/peers/drogon_updates.cc")
target_link_libraries(drogon_updates PRIVATE Drogon::Drogon)
EOF
if ! cmake -S "$OUT/drogon-cmake" -B "$OUT/drogon-cmake/build" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$DROGON_PREFIX" >"$OUT/drogon-cmake/build.log" 2>&1 ||
    ! cmake --build "$OUT/drogon-cmake/build" -j2 >>"$OUT/drogon-cmake/build.log" 2>&1; then
    tail -n 30 "$OUT/drogon-cmake/build.log" >&2
    echo "drogon.sh: the build failed" >&2
    exit 1
fi
cp "$OUT/drogon-cmake/build/drogon_updates" "$OUT/drogon_updates"
echo "$OUT/drogon_updates"
