/* The data layer's inside: what src/data/db.c (the public API, the app
 * module, statistics, result accessors) shares with its drivers (pg.c,
 * sqlite.c). A driver is a table of functions; db.c picks one by the URL's
 * scheme and calls it for each worker as the app runs. */
#ifndef FLARE_DATA_DB_INT_H
#define FLARE_DATA_DB_INT_H

#include <stdatomic.h>

#include "flare/db.h"

/* ---- results ---- */

/* How a driver's rows are read. Called by db.c's public getters after the
 * bounds check (row < nrows, col < ncols), so they never see out-of-range
 * indexes. */
typedef struct flare_db_res_ops {
    const char *(*col_name)(const flare_db_res_t *r, size_t col);
    bool (*is_null)(const flare_db_res_t *r, size_t row, size_t col);
    int64_t (*get_int64)(const flare_db_res_t *r, size_t row, size_t col);
    double (*get_double)(const flare_db_res_t *r, size_t row, size_t col);
    flare_str_t (*get_text)(const flare_db_res_t *r, size_t row, size_t col);
    flare_str_t (*get_bytes)(const flare_db_res_t *r, size_t row, size_t col);
} flare_db_res_ops_t;

/* What a callback is given: built by the driver (usually on its stack) for
 * the duration of the callback. */
struct flare_db_res {
    int err;              /* 0, FLARE_EDB, FLARE_EUNAVAIL, FLARE_ETIMEDOUT */
    int code;             /* SQLite extended result code, else 0 */
    const char *sqlstate; /* never NULL: "" when none */
    const char *message;  /* never NULL: "" on success */
    size_t nrows, ncols;
    uint64_t affected;
    const flare_db_res_ops_t *ops; /* NULL when nrows == 0 and ncols == 0 */
    void *impl;                    /* the driver's (PGresult *, materialised rows...) */
};

/* Calls cb with an error result: no rows, `err`, `message` (NULL: the
 * error's standard text). */
void flare__db_fail(flare_db_fn cb, void *ud, int err, const char *message);

/* ---- statistics: one writer (the worker), readers anywhere ---- */

typedef struct flare_db_wstats {
    _Atomic uint64_t conns_open, conns_busy, queue_len;
    _Atomic uint64_t queries, errors, timeouts, rejected, reconnects;
} flare_db_wstats_t;

static inline void flare__db_stat_add(_Atomic uint64_t *c, int64_t d)
{
    /* single writer: a relaxed load and store, no locked instruction */
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + (uint64_t)d,
                          memory_order_relaxed);
}

/* Counts a completed statement with its error (0 for success). */
static inline void flare__db_stat_done(flare_db_wstats_t *st, int err)
{
    flare__db_stat_add(&st->queries, 1);
    if (err != 0) {
        flare__db_stat_add(&st->errors, 1);
        if (err == FLARE_ETIMEDOUT)
            flare__db_stat_add(&st->timeouts, 1);
        else if (err == FLARE_EUNAVAIL)
            flare__db_stat_add(&st->rejected, 1);
    }
}

/* ---- drivers ---- */

typedef struct flare_db_driver {
    const char *name; /* "postgresql", "sqlite" */
    /* flare_db_open, on the caller's thread: checks the URL (and the
     * config fields the driver uses), sets db->impl. 0 or FLARE_E* with
     * flare__fail's message. */
    int (*open)(flare_db_t *db, const char *url);
    /* flare_app_free: frees db->impl (every worker has been disposed). */
    void (*close)(flare_db_t *db);
    /* The app's module hooks, per worker (see src/module.h for the threads
     * and order): init sets *ws, the driver's per-worker state, which db.c
     * hands back to every other call for that worker. */
    int (*worker_init)(flare_db_t *db, flare_worker_t *w, flare_db_wstats_t *st, void **ws);
    void (*worker_drain)(flare_db_t *db, flare_worker_t *w, void *ws);
    void (*worker_dispose)(flare_db_t *db, flare_worker_t *w, void *ws);
    /* flare_db_query (tx NULL) and flare_db_tx_query, arguments checked. */
    int (*query)(void *ws, flare_db_tx_t *tx, const char *sql, const flare_db_val_t *params,
                 size_t nparams, flare_db_fn cb, void *ud);
    int (*begin)(void *ws, flare_req_t *owner, flare_db_tx_fn cb, void *ud);
    int (*tx_end)(flare_db_tx_t *tx, bool commit, flare_db_fn cb, void *ud);
    /* flare_db_exec_setup, on the caller's thread, not running */
    int (*exec_setup)(flare_db_t *db, const char *sql);
    /* flare_db_listen, before the run; NULL: not supported (FLARE_EINVAL) */
    int (*listen)(flare_db_t *db, unsigned worker, const char *channel, flare_db_notify_fn cb,
                  void *ud);
} flare_db_driver_t;

extern const flare_db_driver_t flare__db_pg, flare__db_sqlite;

/* A transaction: drivers embed this as the first member of their own. */
struct flare_db_tx {
    flare_db_t *db;
};

struct flare_db {
    const flare_db_driver_t *drv;
    flare_app_t *app;
    flare_db_config_t cfg; /* defaults filled in */
    void *impl;            /* the driver's app-wide state */
    /* per worker, indexed by flare_worker_id: allocated at the first run,
     * for flare_app_workers(app) workers, kept until the app is freed */
    unsigned nworkers;
    void **ws;
    flare_db_wstats_t *stats;
    struct flare_db *next; /* the app's databases, in opening order */
};

/* The driver's per-worker state for w (NULL: w is not running this db). */
static inline void *flare__db_ws(const flare_db_t *db, const flare_worker_t *w, unsigned id)
{
    (void)w;
    return id < db->nworkers ? db->ws[id] : NULL;
}

#endif
