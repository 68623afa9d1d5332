#!/usr/bin/env bash
# Runs every libFuzzer target in BUILD_DIR/fuzz for SECONDS each, starting from
# the seed corpus; new inputs go to a scratch corpus, crashes to fuzz/crashes/.
# On a failure it prints the offending input (hex) so a CI log alone is enough
# to reproduce it, and it ends with one summary line either way.
#   tools/fuzz.sh BUILD_DIR SECONDS
set -euo pipefail
build=${1:?build dir}
secs=${2:-60}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$root/fuzz/crashes"
failed=()
n=0
for bin in "$build"/fuzz/fuzz_*; do
    [ -x "$bin" ] || continue
    name=$(basename "$bin")
    short=${name#fuzz_}
    scratch=$(mktemp -d)
    dict=()
    [ -f "$root/fuzz/$short.dict" ] && dict=(-dict="$root/fuzz/$short.dict")
    n=$((n + 1))
    echo "== $name for ${secs}s"
    before=$(ls "$root/fuzz/crashes" | grep -c "^$short-" || true)
    # The fuzzer's progress lines go to a log (thousands of them); its summary is printed.
    flog=$(mktemp)
    if "$bin" "${dict[@]}" -max_total_time="$secs" -print_final_stats=1 \
        -artifact_prefix="$root/fuzz/crashes/$short-" "$scratch" "$root/fuzz/corpus/$short" >"$flog" 2>&1; then
        grep -E '^(Done|stat::(number_of_executed_units|new_units_added|peak_rss_mb))' "$flog" | tr '\n' ' ' || true
        echo
    else
        rc=$?
        failed+=("$name")
        echo "!! $name failed (exit status $rc); the end of its report:" >&2
        grep -v -E '^#[0-9]+[[:space:]]+(NEW|REDUCE|pulse)' "$flog" | tail -n 80 >&2 || true
        echo "!! new artifacts of $name:" >&2
        after=$(ls "$root/fuzz/crashes" | grep -c "^$short-" || true)
        if [ "$after" -gt "$before" ]; then
            for f in $(ls -t "$root/fuzz/crashes" | grep "^$short-" | head -n $((after - before))); do
                echo "   fuzz/crashes/$f ($(stat -c %s "$root/fuzz/crashes/$f") bytes; first 512 in hex):" >&2
                od -An -tx1 -N512 -v "$root/fuzz/crashes/$f" >&2 || true
            done
        else
            echo "   (none: see the fuzzer's own report above)" >&2
        fi
    fi
    rm -rf "$scratch" "$flog"
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "!! fuzz: ${#failed[@]} of $n targets failed: ${failed[*]}" >&2
    exit 1
fi
echo "fuzz: all $n targets ran ${secs}s without a failure"
