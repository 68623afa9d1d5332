/* The SQLite driver's connections (sqlite_int.h): the URL, opening, the progress
 * and busy handlers that enforce the deadlines, and the per-connection
 * statement cache with its $N parameter maps. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "core/clock.h"
#include "core/core.h"
#include "data/sqlite_int.h"

#define PROGRESS_OPS 4096 /* VM steps between two looks at the clock */

/* Query timeout and shutdown: SQLite asks every PROGRESS_OPS steps. */
static int on_progress(void *ud)
{
    sq_conn_t *c = ud;
    if (c->cancel != NULL && atomic_load_explicit(c->cancel, memory_order_relaxed))
        return 1;
    if (flare__now_ms() >= c->deadline) {
        c->timed_out = true;
        return 1;
    }
    return 0;
}

/* The busy timeout, also cut short by the query deadline and shutdown. */
static int on_busy(void *ud, int n)
{
    static const unsigned delay_ms[] = { 1, 2, 5, 10, 20, 50 };
    sq_conn_t *c = ud;
    uint64_t now = flare__now_ms();
    if (n == 0)
        c->busy_since = now;
    if (c->cancel != NULL && atomic_load_explicit(c->cancel, memory_order_relaxed))
        return 0;
    if (now >= c->deadline) {
        c->timed_out = true;
        return 0;
    }
    if (now - c->busy_since >= c->busy_timeout_ms)
        return 0;
    unsigned d = delay_ms[n < 5 ? n : 5];
    struct timespec ts = { 0, (long)d * 1000000L };
    nanosleep(&ts, NULL);
    return 1;
}

static const char *const sync_levels[] = { "OFF", "NORMAL", "FULL", "EXTRA" };

int flare__sq_url(const char *url, char **path, const char **sync)
{
    const char *p = url + strlen("sqlite:"), *q = strchr(p, '?');
    size_t plen = q != NULL ? (size_t)(q - p) : strlen(p);
    *path = NULL;
    *sync = "NORMAL";
    if (plen == 0)
        return flare__fail(FLARE_EINVAL, 0,
                           "flare_db_open: empty SQLite path (sqlite:PATH or sqlite::memory:)");
    while (q != NULL) {
        const char *k = q + 1, *end = strchr(k, '&');
        if (end == NULL)
            end = k + strlen(k);
        const char *eq = memchr(k, '=', (size_t)(end - k));
        size_t klen = (size_t)((eq != NULL ? eq : end) - k);
        if (eq == NULL || klen != 11 || memcmp(k, "synchronous", 11) != 0)
            return flare__fail(FLARE_EINVAL, 0,
                               "flare_db_open: unknown SQLite URL parameter \"%.*s\" "
                               "(known: synchronous=off|normal|full|extra)",
                               (int)(end - k), k);
        const char *v = eq + 1;
        size_t vlen = (size_t)(end - v), i = 0;
        while (i < 4 &&
               !(strlen(sync_levels[i]) == vlen && strncasecmp(v, sync_levels[i], vlen) == 0))
            i++;
        if (i == 4)
            return flare__fail(FLARE_EINVAL, 0,
                               "flare_db_open: SQLite synchronous=\"%.*s\": expected "
                               "off|normal|full|extra",
                               (int)vlen, v);
        *sync = sync_levels[i];
        q = *end == '&' ? end : NULL;
    }
    if ((*path = strndup(p, plen)) == NULL)
        return flare__fail(FLARE_ENOMEM, 0, "sqlite: out of memory");
    return 0;
}

int flare__sq_conn_open(sq_conn_t *c, const char *path, bool writer, bool memory,
                        unsigned busy_timeout_ms, const char *sync)
{
    int flags = SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE |
                (writer ? SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE : SQLITE_OPEN_READONLY);
    c->writer = writer;
    c->busy_timeout_ms = busy_timeout_ms;
    int rc = sqlite3_open_v2(path, &c->db, flags, NULL);
    const char *what = "open";
    if (rc == SQLITE_OK && writer && !memory) {
        what = "PRAGMA journal_mode=WAL";
        rc = sqlite3_exec(c->db, "PRAGMA journal_mode=WAL", NULL, NULL, NULL);
    }
    char pragma[32];
    if (rc == SQLITE_OK && !memory) {
        /* on the readers too: the one that closes last checkpoints the WAL
         * into the database file, with this level's syncs */
        snprintf(pragma, sizeof(pragma), "PRAGMA synchronous=%s", sync);
        what = pragma;
        rc = sqlite3_exec(c->db, pragma, NULL, NULL, NULL);
    }
    if (rc == SQLITE_OK && !writer) {
        /* a read-only connection reads the schema at its first statement:
         * do it now, so a bad file fails the open and not a query */
        what = "reading the schema";
        rc = sqlite3_exec(c->db, "SELECT count(*) FROM sqlite_schema", NULL, NULL, NULL);
    }
    if (rc != SQLITE_OK) {
        rc = flare__fail(FLARE_EDB, 0, "sqlite: %s \"%s\": %s", what, path,
                         c->db != NULL ? sqlite3_errmsg(c->db) : sqlite3_errstr(rc));
        sqlite3_close_v2(c->db);
        c->db = NULL;
        return rc;
    }
    sqlite3_progress_handler(c->db, PROGRESS_OPS, on_progress, c);
    sqlite3_busy_handler(c->db, on_busy, c);
    return 0;
}

void flare__sq_conn_close(sq_conn_t *c)
{
    for (unsigned i = 0; i < c->ncache; i++) {
        sqlite3_finalize(c->cache[i].st);
        free(c->cache[i].sql);
    }
    c->ncache = 0;
    sqlite3_close_v2(c->db);
    c->db = NULL;
}

/* $N (and ?N) -> N; 0 for any other name. */
static unsigned param_pos(const char *name)
{
    if (name[0] != '$' && name[0] != '?')
        return 0;
    unsigned v = 0;
    const char *p = name + 1;
    if (*p < '1' || *p > '9')
        return 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        v = v * 10 + (unsigned)(*p - '0');
        if (v > 65535)
            return 0;
    }
    return *p == '\0' ? v : 0;
}

/* The cached statement for sql on c, prepared on first use. SQLITE_OK or
 * an error code: *why says why when it is the driver's refusal, else the
 * connection's message does. */
int flare__sq_stmt_get(sq_conn_t *c, const char *sql, size_t len, uint64_t h, sq_stmt_t **out,
                       const char **why)
{
    c->tick++;
    for (unsigned i = 0; i < c->ncache; i++) {
        sq_stmt_t *s = &c->cache[i];
        if (s->hash == h && s->len == len && memcmp(s->sql, sql, len) == 0) {
            s->used = c->tick;
            *out = s;
            return SQLITE_OK;
        }
    }
    if (len > INT32_MAX) {
        *why = "statement too long";
        return SQLITE_TOOBIG;
    }
    sqlite3_stmt *st = NULL;
    const char *tail = NULL;
    int rc = sqlite3_prepare_v3(c->db, sql, (int)len, SQLITE_PREPARE_PERSISTENT, &st, &tail);
    if (rc != SQLITE_OK)
        return rc;
    if (st == NULL) {
        *why = "empty statement";
        return SQLITE_MISUSE;
    }
    /* one statement per call: what follows may only be comments and ';' */
    if (tail != NULL && tail < sql + len) {
        sqlite3_stmt *more = NULL;
        int rc2 = sqlite3_prepare_v2(c->db, tail, (int)(sql + len - tail), &more, NULL);
        bool extra = rc2 != SQLITE_OK || more != NULL;
        sqlite3_finalize(more);
        if (extra) {
            sqlite3_finalize(st);
            *why = "one statement per query (text follows the first one)";
            return SQLITE_MISUSE;
        }
    }
    unsigned n = (unsigned)sqlite3_bind_parameter_count(st);
    sq_stmt_t s = { .st = st, .hash = h, .used = c->tick, .len = len, .nmap = n };
    s.sql = malloc(len + 1 + n * sizeof(uint16_t) + sizeof(uint16_t));
    if (s.sql == NULL) {
        sqlite3_finalize(st);
        *why = "out of memory";
        return SQLITE_NOMEM;
    }
    memcpy(s.sql, sql, len);
    s.sql[len] = '\0';
    s.map = (uint16_t *)(void *)(s.sql + ((len + 2) & ~(size_t)1));
    for (unsigned k = 1; k <= n; k++) {
        const char *name = sqlite3_bind_parameter_name(st, (int)k);
        unsigned pos = name == NULL ? k : param_pos(name);
        s.map[k - 1] = (uint16_t)pos;
        if (pos > s.maxpos)
            s.maxpos = pos;
    }
    s.ro = sqlite3_stmt_readonly(st) != 0;
    unsigned slot = c->ncache;
    if (slot == FLARE__SQ_STMT_CACHE) {
        slot = 0;
        for (unsigned i = 1; i < c->ncache; i++)
            if (c->cache[i].used < c->cache[slot].used)
                slot = i;
        sqlite3_finalize(c->cache[slot].st);
        free(c->cache[slot].sql);
    } else {
        c->ncache++;
    }
    c->cache[slot] = s;
    *out = &c->cache[slot];
    return SQLITE_OK;
}
