#!/usr/bin/env bash
# Creates and fills the TFB tables (create.sql, then 10,000 world rows).
#   examples/tfb/setup.sh sqlite:PATH
#   examples/tfb/setup.sh postgresql://user:pass@host:port/dbname
# PostgreSQL through psql (postgresql-client), SQLite through sqlite3.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
url=${1:?usage: $0 sqlite:PATH | postgresql://user:pass@host:port/dbname}
# the world rows: one INSERT, random numbers 1..10000
world_sql() {
    awk 'BEGIN { srand(); printf "INSERT INTO world (id, randomnumber) VALUES ";
                 for (i = 1; i <= 10000; i++) printf "%s(%d,%d)", (i > 1 ? "," : ""), i, int(rand() * 10000) + 1;
                 print ";" }'
}
case "$url" in
sqlite:*)
    path=${url#sqlite:}
    [[ -n $path && $path != ":memory:" ]] || { echo "$0: sqlite needs a file path" >&2; exit 2; }
    command -v sqlite3 >/dev/null || { echo "$0: sqlite3 not found (Debian: sqlite3)" >&2; exit 1; }
    { echo "BEGIN;"; cat "$here/create.sql"; world_sql; echo "COMMIT;"; } | sqlite3 -bail "$path"
    ;;
postgresql://* | postgres://*)
    command -v psql >/dev/null || { echo "$0: psql not found (Debian: postgresql-client)" >&2; exit 1; }
    { echo "SET client_encoding = 'UTF8';"; echo "BEGIN;"; cat "$here/create.sql"; world_sql; echo "COMMIT;"; echo "ANALYZE world; ANALYZE fortune;"; } |
        psql -q -v ON_ERROR_STOP=1 "$url" >/dev/null
    ;;
*)
    echo "$0: unknown URL '$url' (sqlite:PATH or postgresql://...)" >&2
    exit 2
    ;;
esac
echo "setup.sh: world (10000 rows) and fortune (12 rows) ready (${url%%:*})" >&2
