#!/usr/bin/env bash
# `make run` builds only what it runs: the showcase and what it links, not every example and
# bench tool (a newcomer's first command should not wait for them).
#   1. the commands `make -n run` prints: the build line names --target showcase, and no line
#      builds everything;
#   2. the target graph of a tree configured as `make run` configures it (cmake --graphviz):
#      no other executable is among the showcase's dependencies.
# Nothing is built; it takes a configure (a few seconds).
set -euo pipefail
src=${1:?source dir}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "make run: $*" >&2; exit 1; }

plan=$(make -s -C "$src" -n run BUILD="$tmp/b" JOBS=2)
grep -Eq "^cmake --build $tmp/b .*--target showcase\$" <<<"$plan" ||
    fail "no 'cmake --build ... --target showcase' among its commands:"$'\n'"$plan"
if grep -Eq "^cmake --build $tmp/b( -j[0-9]+)?\$" <<<"$plan"; then
    fail "it builds every target:"$'\n'"$plan"
fi

configure=$(make -s -C "$src" -n configure-run BUILD="$tmp/b" | grep '^cmake -S ') ||
    fail "no configure line in 'make -n configure-run'"
(cd "$src" && eval "$configure --graphviz=$tmp/g/deps.dot" >/dev/null)
# executables are drawn as eggs; the showcase's own graph lists everything it depends on
execs=$(sed -n 's/.*label = "\([^"]*\)", shape = egg.*/\1/p' "$tmp/g/deps.dot" | sort -u)
[ -n "$execs" ] || fail "no executable in the target graph"
grep -qx showcase <<<"$execs" || fail "no showcase target"
deps=$(sed -n 's/.*label = "\([^"]*\)".*/\1/p' "$tmp/g/deps.dot.showcase" | sort -u)
extra=$(comm -12 <(echo "$execs") <(echo "$deps") | grep -vx showcase || true)
[ -z "$extra" ] || fail "the showcase target also builds: $extra"
echo "make run: builds the showcase target only ($(wc -l <<<"$execs") executables in the tree)"
