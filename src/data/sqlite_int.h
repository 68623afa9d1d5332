/* The SQLite driver's inside, shared by its three files: sqlite.c (the
 * pool, the jobs, the worker side), sqlite_conn.c (connections, their
 * handlers and statement caches), sqlite_res.c (the result block). */
#ifndef FLARE_DATA_SQLITE_INT_H
#define FLARE_DATA_SQLITE_INT_H

#include <sqlite3.h>
#include <stdatomic.h>

#include "data/db_int.h"

#define FLARE__SQ_STMT_CACHE 64 /* prepared statements kept per connection (LRU) */

/* ---- connections (sqlite_conn.c) ---- */

typedef struct sq_stmt {
    sqlite3_stmt *st;
    uint64_t hash, used;
    char *sql; /* owned, with map in the same block */
    size_t len;
    uint16_t *map; /* parameter index k (1-based) -> $N; 0: not positional */
    unsigned nmap, maxpos;
    bool ro;
} sq_stmt_t;

/* Used by one pool thread at a time (handed over under the pool's mutex). */
typedef struct sq_conn {
    sqlite3 *db;
    bool writer;
    bool busy;       /* under mu */
    struct job *job; /* under mu (sqlite.c): what runs on it */
    /* written and read by the thread holding the connection */
    uint64_t deadline, busy_since;
    bool timed_out;
    unsigned busy_timeout_ms;
    _Atomic bool *cancel;
    uint64_t tick;
    unsigned ncache;
    sq_stmt_t cache[FLARE__SQ_STMT_CACHE];
} sq_conn_t;

/* Splits "sqlite:PATH[?synchronous=off|normal|full|extra]" into the path
 * (malloc'd, *path) and the level's name for PRAGMA synchronous (*sync,
 * static; NORMAL when not given, any case accepted). FLARE_EINVAL with the
 * reason in flare_last_error() for an empty path, an unknown parameter or
 * level; FLARE_ENOMEM. */
int flare__sq_url(const char *url, char **path, const char **sync);

/* Opens c on path: the writer (read-write, created when missing; WAL unless
 * `memory`) or a reader (read-only, schema read now); PRAGMA synchronous=sync
 * on both unless `memory`. Installs the progress handler (query deadline, cancel) and the
 * busy handler (busy_timeout_ms, also cut short by both). 0, or FLARE_EDB
 * with SQLite's message in flare_last_error(). */
int flare__sq_conn_open(sq_conn_t *c, const char *path, bool writer, bool memory,
                        unsigned busy_timeout_ms, const char *sync);
/* Finalizes the cached statements and closes c. */
void flare__sq_conn_close(sq_conn_t *c);

/* The cached statement for sql (hash h) on c, prepared on first use with
 * SQLITE_PREPARE_PERSISTENT, its $N map made once. SQLITE_OK, or an error
 * code: *why is set when the refusal is the driver's (empty text, a second
 * statement, out of memory), else the connection's message says why. */
int flare__sq_stmt_get(sq_conn_t *c, const char *sql, size_t len, uint64_t h, sq_stmt_t **out,
                       const char **why);

/* ---- results (sqlite_res.c) ---- */

/* One block: the header, ncols name cells then nrows * ncols value cells,
 * then their bytes (text and blobs NUL-terminated). Built on the pool
 * thread from a scratch the thread keeps; read on the worker. */
typedef struct cell {
    uint8_t type; /* FLARE_DB_NULL ... FLARE_DB_BYTES */
    uint32_t len;
    union {
        int64_t i;
        double d;
        size_t off; /* text, blob: into bytes, NUL-terminated */
    };
} cell_t;

typedef struct conv {
    struct conv *next;
    size_t used, cap;
    char buf[];
} conv_t;

typedef struct sq_res {
    size_t nrows, ncols;
    uint64_t affected;
    const char *msg;
    conv_t *conv; /* numbers read as text, formatted on the worker */
    char *bytes;
    cell_t cells[]; /* ncols names, then nrows * ncols values */
} sq_res_t;

typedef struct scratch {
    cell_t *cells;
    size_t ncells, capcells;
    char *bytes;
    size_t nbytes, capbytes;
} scratch_t;

/* Steps st to its end, materialising the column names and rows into sc
 * (reset first). The last sqlite3_step code (SQLITE_DONE on success), or
 * SQLITE_NOMEM with *why. */
int flare__sq_step_all(sqlite3_stmt *st, scratch_t *sc, size_t *nrows, size_t *ncols,
                       const char **why);
/* Gives back a scratch grown past what a thread keeps between queries. */
void flare__sq_scratch_trim(scratch_t *sc);
/* The block for sc (NULL: no cells) and msg; NULL when out of memory. */
sq_res_t *flare__sq_res_build(const scratch_t *sc, size_t nrows, size_t ncols, uint64_t affected,
                              const char *msg);
/* Frees a block and the text made from its numbers. NULL is fine. */
void flare__sq_res_free(sq_res_t *r);
/* The getters over a block (flare_db_res_t.impl). */
extern const flare_db_res_ops_t flare__sq_res_ops;

#endif
