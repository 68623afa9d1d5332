#!/usr/bin/env bash
# check.sh BUILD SOURCE: installs BUILD into a scratch prefix and checks what a
# user of the install gets, with neither tree to lean on:
# - SONAME, only flare_* symbols exported;
# - flare.pc, the CMake package and the shared library's strings name neither
#   the build nor the source tree; Swagger UI's files are installed;
# - the prefix is then moved elsewhere (relocatable: pkg-config and
#   find_package must follow), and a consumer, the README's Hello, World and
#   an app serving Swagger UI are built against it with find_package(flare)
#   and with pkg-config;
# - the two servers run on a free loopback port with the source and build
#   trees hidden (a private mount namespace, where unshare is allowed) and
#   answer: /plaintext, /users/{id}, /openapi.json, /docs/ (200, the Swagger
#   UI page) and the installed copy of swagger-ui.css (marked by this test).
set -euo pipefail
build=$(cd "${1:?build dir}" && pwd)
root=$(cd "${2:?source dir}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
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

# Nothing installed may lean on the trees it came from: the files the build
# writes (flare.pc, the CMake package) must not name them; the library (debug
# info aside, which names the sources) must not name the build tree. Paths end
# in / here: a short one ("/src") must not match other text.
libdir=$(dirname "$lib")
for dir in "$build/" "$root/"; do
    hits=$(grep -rlF "$dir" "$libdir/pkgconfig" "$libdir/cmake" || true)
    [ -z "$hits" ] || fail "installed files name $dir: ${hits//$tmp\/prefix\//}"
done
strip --strip-debug -o "$tmp/lib.nodebug" "$lib"
if strings -a "$tmp/lib.nodebug" | grep -F "$build/"; then
    fail "the installed library names the build tree"
fi
pcfile=$libdir/pkgconfig/flare.pc
[ -f "$pcfile" ] || fail "no flare.pc next to the library"
grep -q '^Description:.*HTTP/2' "$pcfile" || fail "flare.pc: $(grep '^Description' "$pcfile")"
ui=$tmp/prefix/share/flare/swagger-ui
[ -f "$ui/swagger-ui-bundle.js" ] && [ -f "$ui/swagger-ui.css" ] ||
    fail "Swagger UI's files are not installed in share/flare/swagger-ui"

# Move the prefix: whatever still points at where it was installed breaks.
mv "$tmp/prefix" "$tmp/moved"
prefix=$tmp/moved
libdir=$prefix${libdir#"$tmp/prefix"}
pcdir=$libdir/pkgconfig
marker="/* the installed copy, $$ */"
printf '\n%s\n' "$marker" >>"$prefix/share/flare/swagger-ui/swagger-ui.css"

port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
awk '/^```c$/ {f = 1; next} /^```$/ {if (f) exit} f' "$root/README.md" >"$tmp/readme.c"
sed "s/127\.0\.0\.1:8080/127.0.0.1:$port/" "$tmp/readme.c" >"$tmp/hello.c"
grep -q "127.0.0.1:$port" "$tmp/hello.c" || fail "README.md: no Hello, World on 127.0.0.1:8080"

cmake -S "$here" -B "$tmp/cm" -DCMAKE_PREFIX_PATH="$prefix" -DHELLO_SRC="$tmp/hello.c" \
    -DCMAKE_C_FLAGS="-Wall -Wextra -Werror" >"$tmp/cm.log" 2>&1 || { cat "$tmp/cm.log"; fail "cmake"; }
found=$(sed -n 's/^flare_DIR:PATH=//p' "$tmp/cm/CMakeCache.txt")
case $found in "$prefix"/*) ;; *) fail "find_package(flare) found $found, not the moved prefix" ;; esac
cmake --build "$tmp/cm" >"$tmp/cm.log" 2>&1 || { cat "$tmp/cm.log"; fail "cmake --build"; }

flags=$(PKG_CONFIG_PATH="$pcdir" pkg-config --cflags --libs flare)
mkdir "$tmp/pc"
for app in "$here/consumer.c" "$here/openapi_app.c" "$tmp/hello.c"; do
    out=$tmp/pc/$(basename "$app" .c)
    # shellcheck disable=SC2086 # flags are words
    cc -std=c17 -Wall -Wextra -Werror "$app" $flags -o "$out" || fail "pkg-config build of $app ($flags)"
done

"$tmp/cm/consumer" | grep -q "invalid route pattern" || fail "find_package consumer"
LD_LIBRARY_PATH=$libdir "$tmp/pc/consumer" | grep -q "invalid route pattern" || fail "pkg-config consumer"

# The servers run where the source and build trees are empty directories.
hide=()
if unshare -rm true 2>/dev/null; then
    hide=(unshare -rm sh -c 'cd / && mount -t tmpfs hidden "$1" && mount -t tmpfs hidden "$2" &&
        ! [ -e "$1/CMakeCache.txt" ] && shift 2 && exec "$@"' sh "$build" "$root")
else
    echo "package: unshare -rm not allowed here: the trees stay visible to the servers"
fi
for kind in cm pc; do
    env -u FLARE_SWAGGER_UI_DIR LD_LIBRARY_PATH="$libdir" "$py" "$here/serve.py" "$port" \
        --get /plaintext 200 "Hello, World!" --get /users/42 200 42 \
        -- "${hide[@]}" "$tmp/$kind/hello" || fail "README hello ($kind)"
    env -u FLARE_SWAGGER_UI_DIR LD_LIBRARY_PATH="$libdir" "$py" "$here/serve.py" "$port" \
        --get /hello 200 "Hello, World!" --get /openapi.json 200 '"Say hello"' \
        --get /docs/ 200 'src="/docs/swagger-ui-bundle.js"' \
        --get /docs/swagger-ui.css 200 "$marker" --get /docs/swagger-ui-bundle.js 200 SwaggerUIBundle \
        -- "${hide[@]}" "$tmp/$kind/openapi_app" "127.0.0.1:$port" || fail "openapi_app ($kind)"
done
echo "package ok: SONAME $soname; moved prefix; find_package and pkg-config builds of the" \
    "consumer, the README's hello and a Swagger UI app; /docs/ served from the install" \
    "${hide:+with the trees hidden}"
