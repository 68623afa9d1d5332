#!/usr/bin/env bash
# Runs every libFuzzer target in BUILD_DIR/fuzz for SECONDS each, starting from
# the seed corpus; new inputs go to a scratch corpus, crashes to fuzz/crashes/.
#   tools/fuzz.sh BUILD_DIR SECONDS
set -euo pipefail
build=${1:?build dir}
secs=${2:-60}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$root/fuzz/crashes"
status=0
for bin in "$build"/fuzz/fuzz_*; do
    [ -x "$bin" ] || continue
    name=$(basename "$bin")
    short=${name#fuzz_}
    scratch=$(mktemp -d)
    dict=()
    [ -f "$root/fuzz/$short.dict" ] && dict=(-dict="$root/fuzz/$short.dict")
    echo "== $name for ${secs}s"
    if ! "$bin" "${dict[@]}" -max_total_time="$secs" -print_final_stats=1 \
        -artifact_prefix="$root/fuzz/crashes/$short-" "$scratch" "$root/fuzz/corpus/$short"; then
        echo "!! $name found a failure: see fuzz/crashes/" >&2
        status=1
    fi
    rm -rf "$scratch"
done
exit $status
