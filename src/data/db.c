/* The database API (include/flare/db.h): opening by URL scheme, the app
 * module that gives each worker its driver state, argument checks, result
 * accessors and statistics. The drivers (pg.c, sqlite.c) do the I/O. */
#include <limits.h>
#include <stdlib.h>
#include <sqlite3.h>
#include <string.h>

#include "core/core.h"
#include "data/db_int.h"
#include "module.h"

/* The app's databases: one module registration per app, whatever the
 * number of databases (the module table is small). */
typedef struct db_app {
    flare_db_t *dbs, **tail;
    unsigned slot;
} db_app_t;

static int db_init_worker(flare_worker_t *w, void *state);
static void db_drain_worker(flare_worker_t *w, void *state);
static void db_dispose_worker(flare_worker_t *w, void *state);
static void db_free_app(flare_app_t *app, void *state);

static const flare_module_t db_module = {
    .name = "db",
    .init_worker = db_init_worker,
    .drain_worker = db_drain_worker,
    .dispose_worker = db_dispose_worker,
    .free_app = db_free_app,
};

/* Grows the per-worker arrays to the app's worker count: on the thread
 * running flare_app_run, before any worker thread of this run starts. */
static int db_size_workers(flare_db_t *db, unsigned n)
{
    if (db->nworkers >= n)
        return 0;
    void **ws = calloc(n, sizeof(*ws));
    flare_db_wstats_t *st = calloc(n, sizeof(*st));
    if (ws == NULL || st == NULL) {
        free(ws);
        free(st);
        return flare__fail(FLARE_ENOMEM, 0, "database: out of memory for %u workers", n);
    }
    free(db->ws);
    free(db->stats);
    db->ws = ws;
    db->stats = st;
    db->nworkers = n;
    return 0;
}

static int db_init_worker(flare_worker_t *w, void *state)
{
    db_app_t *da = state;
    unsigned id = flare_worker_id(w);
    for (flare_db_t *db = da->dbs; db != NULL; db = db->next) {
        if (id == 0) {
            int rc = db_size_workers(db, flare_app_workers(db->app));
            if (rc != 0)
                goto undo;
            memset(db->stats, 0, db->nworkers * sizeof(*db->stats));
        }
        void *ws = NULL;
        int rc = db->drv->worker_init(db, w, &db->stats[id], &ws);
        if (rc != 0) {
        undo:
            for (flare_db_t *d = da->dbs; d != db; d = d->next) {
                d->drv->worker_dispose(d, w, d->ws[id]);
                d->ws[id] = NULL;
            }
            return rc;
        }
        db->ws[id] = ws;
    }
    return 0;
}

static void db_drain_worker(flare_worker_t *w, void *state)
{
    db_app_t *da = state;
    unsigned id = flare_worker_id(w);
    for (flare_db_t *db = da->dbs; db != NULL; db = db->next)
        if (id < db->nworkers && db->ws[id] != NULL && db->drv->worker_drain != NULL)
            db->drv->worker_drain(db, w, db->ws[id]);
}

static void db_dispose_worker(flare_worker_t *w, void *state)
{
    db_app_t *da = state;
    unsigned id = flare_worker_id(w);
    for (flare_db_t *db = da->dbs; db != NULL; db = db->next)
        if (id < db->nworkers && db->ws[id] != NULL) {
            db->drv->worker_dispose(db, w, db->ws[id]);
            db->ws[id] = NULL;
        }
}

static void db_free_app(flare_app_t *app, void *state)
{
    (void)app;
    db_app_t *da = state;
    flare_db_t *db = da->dbs;
    while (db != NULL) {
        flare_db_t *next = db->next;
        db->drv->close(db);
        free(db->ws);
        free(db->stats);
        free(db);
        db = next;
    }
    free(da);
}

/* Defaults and bounds, in one place. */
static int db_config(flare_db_config_t *c)
{
#define DB_FIELD(f, def, max)                                                                 \
    do {                                                                                      \
        if (c->f == 0)                                                                        \
            c->f = (def);                                                                     \
        else if (c->f > (max))                                                                \
            return flare__fail(FLARE_EINVAL, 0, "flare_db_config_t." #f " is %u, at most %u", \
                               c->f, (unsigned)(max));                                        \
    } while (0)
    DB_FIELD(pool_size, 0, 64); /* the default depends on the driver */
    DB_FIELD(pipeline_depth, 256, 65536);
    DB_FIELD(queue_max, 4096, 1000000);
    DB_FIELD(queue_timeout_ms, 2000, INT_MAX);
    DB_FIELD(query_timeout_ms, 10000, INT_MAX);
    DB_FIELD(connect_timeout_ms, 5000, INT_MAX);
    DB_FIELD(reconnect_min_ms, 100, INT_MAX);
    DB_FIELD(reconnect_max_ms, 10000, INT_MAX);
    DB_FIELD(threads, 4, 64);
    DB_FIELD(busy_timeout_ms, 5000, INT_MAX);
#undef DB_FIELD
    if (c->reconnect_max_ms < c->reconnect_min_ms)
        c->reconnect_max_ms = c->reconnect_min_ms;
    return 0;
}

static const flare_db_driver_t *db_driver_for(const char *url)
{
    if (strncmp(url, "postgresql://", 13) == 0 || strncmp(url, "postgres://", 11) == 0)
        return &flare__db_pg;
    if (strncmp(url, "sqlite:", 7) == 0)
        return &flare__db_sqlite;
    return NULL;
}

int flare_db_open(flare_app_t *app, const char *url, const flare_db_config_t *cfg, flare_db_t **out)
{
    if (app == NULL || url == NULL || out == NULL)
        return flare__fail(FLARE_EINVAL, 0, "flare_db_open: NULL argument");
    const flare_db_driver_t *drv = db_driver_for(url);
    if (drv == NULL)
        return flare__fail(FLARE_EINVAL, 0,
                           "flare_db_open: unknown URL scheme (expected postgresql://, "
                           "postgres:// or sqlite:)");
    flare_db_t *db = calloc(1, sizeof(*db));
    if (db == NULL)
        return flare__fail(FLARE_ENOMEM, 0, "flare_db_open: out of memory");
    db->drv = drv;
    db->app = app;
    if (cfg != NULL)
        db->cfg = *cfg;
    int rc = db_config(&db->cfg);
    if (rc != 0) {
        free(db);
        return rc;
    }
    if (db->cfg.pool_size == 0)
        db->cfg.pool_size = drv == &flare__db_pg ? 2 : 4;
    db_app_t *da = flare__app_module_state(app, &db_module);
    bool fresh = da == NULL;
    if (fresh) {
        da = calloc(1, sizeof(*da));
        if (da == NULL) {
            free(db);
            return flare__fail(FLARE_ENOMEM, 0, "flare_db_open: out of memory");
        }
        da->tail = &da->dbs;
        rc = flare__app_module(app, &db_module, da, &da->slot);
        if (rc != 0) {
            free(da);
            free(db);
            return rc == FLARE_ESTATE
                       ? flare__fail(rc, 0, "flare_db_open: the app is running")
                       : flare__fail(rc, 0, "flare_db_open: cannot register the data module");
        }
    } else if (flare__app_running(app)) {
        free(db);
        return flare__fail(FLARE_ESTATE, 0, "flare_db_open: the app is running");
    }
    rc = drv->open(db, url);
    if (rc != 0) {
        free(db);
        return rc; /* da stays registered, empty: harmless, freed with the app */
    }
    *da->tail = db;
    da->tail = &db->next;
    *out = db;
    return 0;
}

const char *flare_db_driver(const flare_db_t *db)
{
    return db != NULL ? db->drv->name : "";
}

int flare_db_exec_setup(flare_db_t *db, const char *sql)
{
    if (db == NULL || sql == NULL)
        return flare__fail(FLARE_EINVAL, 0, "flare_db_exec_setup: NULL argument");
    if (flare__app_running(db->app))
        return flare__fail(FLARE_ESTATE, 0, "flare_db_exec_setup: the app is running");
    return db->drv->exec_setup(db, sql);
}

/* ---- queries ---- */

static int check_params(const flare_db_val_t *params, size_t n)
{
    if (n > 65535 || (params == NULL && n > 0))
        return FLARE_EINVAL;
    for (size_t i = 0; i < n; i++) {
        if ((unsigned)params[i].type > FLARE_DB_BYTES)
            return FLARE_EINVAL;
        if ((params[i].type == FLARE_DB_TEXT || params[i].type == FLARE_DB_BYTES) &&
            params[i].s.ptr == NULL && params[i].s.len > 0)
            return FLARE_EINVAL;
    }
    return 0;
}

int flare_db_query(flare_db_t *db, flare_worker_t *w, const char *sql, const flare_db_val_t *params,
                   size_t nparams, flare_db_fn cb, void *ud)
{
    if (db == NULL || w == NULL || sql == NULL || cb == NULL || check_params(params, nparams) != 0)
        return FLARE_EINVAL;
    /* w's driver state is w's thread's alone (as flare_redis_cmd) */
    if (!flare__worker_on_thread(w))
        return flare__fail(FLARE_EINVAL, 0, "flare_db_query: called off the thread of worker %u",
                           flare_worker_id(w));
    void *ws = flare__db_ws(db, w, flare_worker_id(w));
    if (ws == NULL)
        return FLARE_ESTATE;
    return db->drv->query(ws, NULL, sql, params, nparams, cb, ud);
}

int flare_db_begin(flare_db_t *db, flare_worker_t *w, flare_req_t *owner, flare_db_tx_fn cb,
                   void *ud)
{
    if (db == NULL || w == NULL || cb == NULL)
        return FLARE_EINVAL;
    if (!flare__worker_on_thread(w))
        return flare__fail(FLARE_EINVAL, 0, "flare_db_begin: called off the thread of worker %u",
                           flare_worker_id(w));
    void *ws = flare__db_ws(db, w, flare_worker_id(w));
    if (ws == NULL)
        return FLARE_ESTATE;
    return db->drv->begin(ws, owner, cb, ud);
}

int flare_db_tx_query(flare_db_tx_t *tx, const char *sql, const flare_db_val_t *params,
                      size_t nparams, flare_db_fn cb, void *ud)
{
    if (tx == NULL || sql == NULL || cb == NULL || check_params(params, nparams) != 0)
        return FLARE_EINVAL;
    return tx->db->drv->query(NULL, tx, sql, params, nparams, cb, ud);
}

int flare_db_tx_commit(flare_db_tx_t *tx, flare_db_fn cb, void *ud)
{
    if (tx == NULL)
        return FLARE_EINVAL;
    return tx->db->drv->tx_end(tx, true, cb, ud);
}

int flare_db_tx_rollback(flare_db_tx_t *tx, flare_db_fn cb, void *ud)
{
    if (tx == NULL)
        return FLARE_EINVAL;
    return tx->db->drv->tx_end(tx, false, cb, ud);
}

static bool sql_ident(const char *s)
{
    size_t n = 0;
    for (; s[n] != '\0'; n++) {
        char c = s[n];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                  (n > 0 && c >= '0' && c <= '9');
        if (!ok)
            return false;
    }
    return n > 0 && n <= 63;
}

int flare_db_listen(flare_db_t *db, unsigned worker, const char *channel, flare_db_notify_fn cb,
                    void *ud)
{
    if (db == NULL || channel == NULL || cb == NULL)
        return flare__fail(FLARE_EINVAL, 0, "flare_db_listen: NULL argument");
    if (db->drv->listen == NULL)
        return flare__fail(FLARE_EINVAL, 0, "flare_db_listen: %s has no LISTEN/NOTIFY",
                           db->drv->name);
    if (!sql_ident(channel))
        return flare__fail(FLARE_EINVAL, 0,
                           "flare_db_listen: channel must be 1-63 letters, digits or '_'");
    if (worker >= flare_app_workers(db->app))
        return flare__fail(FLARE_EINVAL, 0, "flare_db_listen: worker %u of %u", worker,
                           flare_app_workers(db->app));
    if (flare__app_running(db->app))
        return flare__fail(FLARE_ESTATE, 0, "flare_db_listen: the app is running");
    return db->drv->listen(db, worker, channel, cb, ud);
}

/* ---- results ---- */

static const char *const err_text[] = {
    [0] = "",
    [1] = "database error",
    [2] = "database unavailable",
    [3] = "database timeout",
};

static unsigned err_index(int err)
{
    switch (err) {
    case 0:
        return 0;
    case FLARE_EUNAVAIL:
        return 2;
    case FLARE_ETIMEDOUT:
        return 3;
    default:
        return 1;
    }
}

void flare__db_fail(flare_db_fn cb, void *ud, int err, const char *message)
{
    flare_db_res_t r = {
        .err = err,
        .sqlstate = "",
        .message = message != NULL ? message : err_text[err_index(err)],
    };
    cb(&r, ud);
}

int flare_db_res_error(const flare_db_res_t *r)
{
    return r != NULL ? r->err : FLARE_EINVAL;
}

const char *flare_db_res_sqlstate(const flare_db_res_t *r)
{
    return r != NULL && r->sqlstate != NULL ? r->sqlstate : "";
}

int flare_db_res_code(const flare_db_res_t *r)
{
    return r != NULL ? r->code : 0;
}

const char *flare_db_res_message(const flare_db_res_t *r)
{
    return r != NULL && r->message != NULL ? r->message : "";
}

size_t flare_db_res_rows(const flare_db_res_t *r)
{
    return r != NULL ? r->nrows : 0;
}

size_t flare_db_res_cols(const flare_db_res_t *r)
{
    return r != NULL ? r->ncols : 0;
}

uint64_t flare_db_res_affected(const flare_db_res_t *r)
{
    return r != NULL ? r->affected : 0;
}

const char *flare_db_res_col_name(const flare_db_res_t *r, size_t col)
{
    if (r == NULL || r->ops == NULL || col >= r->ncols)
        return "";
    const char *n = r->ops->col_name(r, col);
    return n != NULL ? n : "";
}

int flare_db_res_col_index(const flare_db_res_t *r, const char *name, size_t *col)
{
    if (r == NULL || name == NULL || col == NULL)
        return FLARE_EINVAL;
    for (size_t c = 0; r->ops != NULL && c < r->ncols; c++) {
        const char *n = r->ops->col_name(r, c);
        if (n != NULL && strcmp(n, name) == 0) {
            *col = c;
            return 0;
        }
    }
    return FLARE_ENOTFOUND;
}

static inline bool in_range(const flare_db_res_t *r, size_t row, size_t col)
{
    return r != NULL && r->ops != NULL && row < r->nrows && col < r->ncols;
}

bool flare_db_is_null(const flare_db_res_t *r, size_t row, size_t col)
{
    return !in_range(r, row, col) || r->ops->is_null(r, row, col);
}

int64_t flare_db_get_int64(const flare_db_res_t *r, size_t row, size_t col)
{
    return in_range(r, row, col) ? r->ops->get_int64(r, row, col) : 0;
}

double flare_db_get_double(const flare_db_res_t *r, size_t row, size_t col)
{
    return in_range(r, row, col) ? r->ops->get_double(r, row, col) : 0.0;
}

flare_str_t flare_db_get_text(const flare_db_res_t *r, size_t row, size_t col)
{
    return in_range(r, row, col) ? r->ops->get_text(r, row, col) : (flare_str_t){ "", 0 };
}

flare_str_t flare_db_get_bytes(const flare_db_res_t *r, size_t row, size_t col)
{
    return in_range(r, row, col) ? r->ops->get_bytes(r, row, col) : (flare_str_t){ "", 0 };
}

/* ---- error classes ---- */

static flare_db_errclass_t class_of_sqlstate(const char *s)
{
    static const struct {
        char state[6];
        flare_db_errclass_t cls;
    } exact[] = {
        { "23505", FLARE_DB_ERR_UNIQUE },
        { "23503", FLARE_DB_ERR_FOREIGN_KEY },
        { "23502", FLARE_DB_ERR_NOT_NULL },
        { "23514", FLARE_DB_ERR_CHECK },
        { "40001", FLARE_DB_ERR_SERIALIZATION },
        { "40P01", FLARE_DB_ERR_SERIALIZATION },
        /* the server shutting down or restarting: admin_shutdown,
         * crash_shutdown, cannot_connect_now */
        { "57P01", FLARE_DB_ERR_CONNECTION },
        { "57P02", FLARE_DB_ERR_CONNECTION },
        { "57P03", FLARE_DB_ERR_CONNECTION },
    };
    for (size_t i = 0; i < sizeof(exact) / sizeof(exact[0]); i++) {
        if (strcmp(s, exact[i].state) == 0)
            return exact[i].cls;
    }
    /* class 08, connection exception, but 08P01 (a protocol violation: a
     * statement the server refused, not a lost connection) */
    if (strncmp(s, "08", 2) == 0 && strcmp(s, "08P01") != 0)
        return FLARE_DB_ERR_CONNECTION;
    return FLARE_DB_ERR_OTHER;
}

static flare_db_errclass_t class_of_sqlite(int code)
{
    switch (code) {
    case SQLITE_CONSTRAINT_UNIQUE:
    case SQLITE_CONSTRAINT_PRIMARYKEY:
        return FLARE_DB_ERR_UNIQUE;
    case SQLITE_CONSTRAINT_FOREIGNKEY:
        return FLARE_DB_ERR_FOREIGN_KEY;
    case SQLITE_CONSTRAINT_NOTNULL:
        return FLARE_DB_ERR_NOT_NULL;
    case SQLITE_CONSTRAINT_CHECK:
        return FLARE_DB_ERR_CHECK;
    }
    /* the database locked by another connection or process past the busy
     * timeout, or a snapshot gone stale (SQLITE_BUSY_SNAPSHOT): the
     * statement lost to a concurrent transaction; running it again may
     * succeed, as after PostgreSQL's 40001 */
    if ((code & 0xff) == SQLITE_BUSY || (code & 0xff) == SQLITE_LOCKED)
        return FLARE_DB_ERR_SERIALIZATION;
    return FLARE_DB_ERR_OTHER;
}

flare_db_errclass_t flare_db_error_class(const flare_db_res_t *r)
{
    if (r == NULL || r->err == 0)
        return FLARE_DB_ERR_NONE;
    if (r->sqlstate != NULL && r->sqlstate[0] != '\0')
        return class_of_sqlstate(r->sqlstate);
    if (r->code != 0)
        return class_of_sqlite(r->code);
    /* no code from the database: the driver's own (server down, lost
     * connection, wait queue full or waited too long, shutdown) */
    return r->err == FLARE_EUNAVAIL ? FLARE_DB_ERR_CONNECTION : FLARE_DB_ERR_OTHER;
}

const char *flare_db_error_class_name(flare_db_errclass_t c)
{
    switch (c) {
#define FLARE_DB_ERR_NAME(name, text) \
    case FLARE_DB_ERR_##name:         \
        return text;
        FLARE_DB_ERRCLASS_MAP(FLARE_DB_ERR_NAME)
#undef FLARE_DB_ERR_NAME
    }
    return "unknown";
}

int flare_db_res_http_status(const flare_db_res_t *r)
{
    if (r == NULL || r->err == 0)
        return 0;
    return r->err == FLARE_EUNAVAIL || r->err == FLARE_ETIMEDOUT ? 503 : 500;
}

int flare_db_send_error(flare_res_t *res, const flare_db_res_t *r)
{
    int status = flare_db_res_http_status(r);
    if (status == 0)
        return FLARE_EINVAL;
    const char *text = err_text[err_index(r->err)];
    return flare_res_send(res, status, FLARE_STR("text/plain; charset=utf-8"),
                          (flare_str_t){ text, strlen(text) });
}

/* ---- statistics ---- */

static void stats_add(flare_db_stats_t *o, const flare_db_wstats_t *s)
{
#define LD(f) atomic_load_explicit(&s->f, memory_order_relaxed)
    o->conns_open += LD(conns_open);
    o->conns_busy += LD(conns_busy);
    o->queue_len += LD(queue_len);
    o->queries += LD(queries);
    o->errors += LD(errors);
    o->timeouts += LD(timeouts);
    o->rejected += LD(rejected);
    o->reconnects += LD(reconnects);
#undef LD
}

int flare_db_stats(const flare_db_t *db, unsigned worker, flare_db_stats_t *out)
{
    if (db == NULL || out == NULL)
        return FLARE_EINVAL;
    *out = (flare_db_stats_t){ 0 };
    if (worker == UINT32_MAX) {
        for (unsigned i = 0; i < db->nworkers; i++)
            stats_add(out, &db->stats[i]);
        return 0;
    }
    if (worker >= flare_app_workers(db->app))
        return FLARE_EINVAL;
    if (worker < db->nworkers)
        stats_add(out, &db->stats[worker]);
    return 0;
}
