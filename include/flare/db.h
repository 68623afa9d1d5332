/* Databases on the worker loops: PostgreSQL (libpq, pipeline mode) and
 * SQLite (a small thread pool), behind one API.
 *
 *     flare_db_t *db;
 *     flare_db_open(app, "postgresql://bench:pw@127.0.0.1:5432/tfb", NULL, &db);
 *     ...
 *     static void got_row(flare_db_res_t *r, void *ud)
 *     {
 *         flare_res_t *res = ud;
 *         if (flare_db_res_error(r) != 0) {
 *             flare_db_send_error(res, r);    // 503 unavailable / timed out, 500 query error
 *             return;
 *         }
 *         ... flare_db_get_int64(r, 0, 0) ...
 *         flare_res_send(res, 200, ...);
 *     }
 *     static int h_db(flare_req_t *req, flare_res_t *res, void *ud)
 *     {
 *         flare_db_val_t id = FLARE_DB_INT(42);
 *         int rc = flare_db_query(ud, flare_req_worker(req),
 *                                 "SELECT id, randomnumber FROM world WHERE id = $1", &id, 1,
 *                                 got_row, res);
 *         return rc == 0 ? FLARE_ASYNC : rc;
 *     }
 *
 * Threads: a flare_db_t is opened once per app, before flare_app_run, and
 * lives until flare_app_free. Each worker has its own connections (its own
 * pool): queries are asked for on a worker's thread, for that worker, and
 * their callbacks run on that same thread. Nothing is shared between
 * workers on the query path.
 *
 * SQL and parameters: statements use positional parameters $1, $2, ... (for
 * SQLite too: they are SQLite's own ?NNN under another spelling); values are
 * passed as typed flare_db_val_t, never formatted into the SQL, so a value
 * can never become SQL. Each distinct SQL text is prepared once per
 * connection, on first use, and reused (the text is the key: build it once,
 * not per request).
 *
 * Callbacks: when flare_db_query (or a transaction call) returns 0, its
 * callback runs exactly once, later, on the same worker — never from inside
 * the call — with the result or the error. Also when the client of the
 * request that asked has gone meanwhile: the callback still runs (to free
 * what it owns) and its late flare_res_send is a no-op, as for any
 * asynchronous handler. At worker shutdown, queries still pending complete
 * with FLARE_EUNAVAIL. A non-zero return means the callback will not run.
 *
 * An asynchronous handler: req and res stay valid until the response is
 * sent (flare_res_send, flare_db_send_error... returned), also after the
 * client has gone: the exchange is then kept aside, its memory and cleanup
 * hooks untouched, until the late send, which frees it without writing
 * anything. So the callback may read the request (its parameters, body,
 * session, attributes, arena memory) and log under its id, then answer;
 * after the answer neither may be touched. What the callback needs goes in
 * a context in the request's arena (freed with the exchange):
 *
 *     typedef struct add_ctx {
 *         flare_req_t *req;
 *         flare_res_t *res;
 *         flare_str_t user; // from the session: valid as long as req
 *     } add_ctx_t;
 *
 *     static void added(flare_db_res_t *r, void *ud)
 *     {
 *         add_ctx_t *c = ud;
 *         if (flare_db_error_class(r) == FLARE_DB_ERR_UNIQUE) {
 *             flare_res_send(c->res, 409, FLARE_STR("text/plain"), FLARE_STR("taken\n"));
 *             return;
 *         }
 *         if (flare_db_res_error(r) != 0) {
 *             flare_req_log(c->req, FLARE_LOG_WARN, "tag for %.*s: %s", (int)c->user.len,
 *                           c->user.ptr, flare_db_res_message(r));
 *             flare_db_send_error(c->res, r); // 500 or 503, no server text
 *             return;
 *         }
 *         flare_req_log(c->req, FLARE_LOG_INFO, "%.*s added a tag", (int)c->user.len,
 *                       c->user.ptr);
 *         flare_res_send(c->res, 201, FLARE_STR("text/plain"), FLARE_STR("added\n"));
 *     }
 *
 *     static int add_tag(flare_req_t *req, flare_res_t *res, void *ud) // POST /tags
 *     {
 *         add_ctx_t *c = flare_req_alloc(req, sizeof(*c));
 *         if (c == NULL)
 *             return FLARE_ENOMEM;
 *         *c = (add_ctx_t){ req, res, flare_session_get(req, "user") };
 *         if (c->user.ptr == NULL)
 *             return flare_res_send(res, 401, FLARE_STR("text/plain"), FLARE_STR("log in\n"));
 *         flare_str_t tag = flare_req_body(req);
 *         flare_db_val_t p[] = { FLARE_DB_TEXTV(c->user.ptr, c->user.len),
 *                                FLARE_DB_TEXTV(tag.ptr, tag.len) };
 *         int rc = flare_db_query(ud, flare_req_worker(req),
 *                                 "INSERT INTO tags (owner, tag) VALUES ($1, $2)", p, 2,
 *                                 added, c);
 *         return rc == 0 ? FLARE_ASYNC : rc; // FLARE_ASYNC: added() answers
 *     }
 *
 * (flare_post(app, "/tags", add_tag, db), behind flare_sessions' middleware.)
 *
 * Errors (flare_db_res_error):
 *   FLARE_EDB       the database refused the statement (syntax, constraint,
 *                   type...): flare_db_res_sqlstate / _code / _message say
 *                   what; HTTP 500.
 *   FLARE_EUNAVAIL  no connection could take it: the database is down or
 *                   reconnecting, the worker's wait queue is full, or the
 *                   query waited in it past queue_timeout_ms; HTTP 503.
 *   FLARE_ETIMEDOUT the query ran past query_timeout_ms and was cancelled;
 *                   HTTP 503.
 */
#ifndef FLARE_DB_H
#define FLARE_DB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "flare/flare.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Opaque handles: a database opened for the app's workers, a query's
 * result (valid during its callback) and an open transaction. */
typedef struct flare_db flare_db_t;
typedef struct flare_db_res flare_db_res_t;
typedef struct flare_db_tx flare_db_tx_t;

/* ---- opening -------------------------------------------------------------- */

/* Zero fields mean their default (in brackets); values past the bound after
 * "<=" are refused by flare_db_open with FLARE_EINVAL. */
typedef struct flare_db_config {
    /* PostgreSQL: connections per worker [2], <= 64.
     * SQLite: reader connections, shared by the workers [4], <= 64 (plus
     * one writer connection). */
    unsigned pool_size;
    /* PostgreSQL: queries in flight on one connection (pipeline) [256],
     * <= 65536. */
    unsigned pipeline_depth;
    /* Queries waiting for a connection, per worker [4096], <= 1,000,000.
     * Past it a query fails at once with FLARE_EUNAVAIL. */
    unsigned queue_max;
    /* How long a query may wait for a connection [2000 ms], <= INT_MAX. */
    unsigned queue_timeout_ms;
    /* How long a query may run once sent [10 s], <= INT_MAX; past it it is
     * cancelled (PostgreSQL: PQcancel on the job pool) and fails with
     * FLARE_ETIMEDOUT. */
    unsigned query_timeout_ms;
    /* PostgreSQL: how long connecting may take [5000 ms], <= INT_MAX. */
    unsigned connect_timeout_ms;
    /* PostgreSQL: reconnect backoff after the server went away: the first
     * retry after reconnect_min_ms [100], doubling up to reconnect_max_ms
     * [10 s], <= INT_MAX. */
    unsigned reconnect_min_ms;
    unsigned reconnect_max_ms;
    /* SQLite: threads that run the statements [4], <= 64. */
    unsigned threads;
    /* SQLite: busy timeout of each connection [5000 ms], <= INT_MAX. */
    unsigned busy_timeout_ms;
} flare_db_config_t;

/* Opens a database for every worker of app, from a URL (url):
 *   postgresql://user:pass@host:port/dbname?param=value...  (libpq's URI;
 *       also postgres://; host may be a unix socket directory, given as
 *       ?host=/path). No name resolution happens on a worker: a host name is
 *       resolved when the connection is made, on the job pool.
 *   sqlite:PATH          a file (created when missing), WAL mode, with
 *                        PRAGMA synchronous=NORMAL
 *   sqlite:PATH?synchronous=off|normal|full|extra   another fsync level
 *                        (docs/data.md: what each loses on power failure);
 *                        a '?' always ends PATH
 *   sqlite::memory:      an in-memory database (one connection: the writer
 *                        serves reads too), for tests
 * cfg may be NULL (all defaults); it is copied. Before flare_app_run (or
 * between runs) only; the connections are made as the workers start (and
 * remade whenever lost), so an unreachable server does not fail the open:
 * queries fail with FLARE_EUNAVAIL until it is reachable. What can be
 * checked without connecting is checked here: the URL scheme and syntax
 * (libpq's parser), the SQLite file opened once.
 * The app owns the handle: it is closed by flare_app_free. *out is set on
 * success. 0, or FLARE_EINVAL (NULL argument, unknown scheme, bad URL or
 * config value; flare_last_error() says which), FLARE_ESTATE (app running),
 * FLARE_EDB (SQLite could not open the file), FLARE_ENOMEM. */
FLARE_API int flare_db_open(flare_app_t *app, const char *url, const flare_db_config_t *cfg,
                            flare_db_t **out);

/* "postgresql" or "sqlite". */
FLARE_API const char *flare_db_driver(const flare_db_t *db);

/* Runs sql (one or more statements separated by ';', no parameters) once,
 * blocking the calling thread until done: for creating tables and other
 * setup before flare_app_run. Never on a worker (it blocks). PostgreSQL:
 * over a connection of its own, closed afterwards; SQLite: on the writer
 * connection (so sqlite::memory: sees it). 0, or FLARE_EINVAL, FLARE_ESTATE
 * (the app is running), FLARE_EUNAVAIL (cannot connect), FLARE_EDB (the
 * database refused it); flare_last_error() has the database's message. */
FLARE_API int flare_db_exec_setup(flare_db_t *db, const char *sql);

/* ---- parameters ------------------------------------------------------------- */

/* The type of a query parameter (flare_db_val_t.type). */
typedef enum flare_db_type {
    FLARE_DB_NULL = 0,
    FLARE_DB_INT64,
    FLARE_DB_DOUBLE,
    FLARE_DB_TEXT,  /* UTF-8 text; need not be NUL-terminated */
    FLARE_DB_BYTES, /* binary (PostgreSQL bytea, SQLite blob) */
} flare_db_type_t;

/* A query parameter: its type and value. */
typedef struct flare_db_val {
    flare_db_type_t type; /* which member of the union holds the value */
    union {
        int64_t i;
        double d;
        flare_str_t s; /* TEXT, BYTES: read during the call only (copied) */
    };
} flare_db_val_t;

/* Query parameters: NULL, an int64, a double, text or bytes (p, n: a
 * pointer and its length, read during the call). */
#define FLARE_DB_NULLV        ((flare_db_val_t){ .type = FLARE_DB_NULL })
#define FLARE_DB_INT(v)       ((flare_db_val_t){ .type = FLARE_DB_INT64, .i = (v) })
#define FLARE_DB_DBL(v)       ((flare_db_val_t){ .type = FLARE_DB_DOUBLE, .d = (v) })
#define FLARE_DB_TEXTV(p, n)  ((flare_db_val_t){ .type = FLARE_DB_TEXT, .s = { (p), (n) } })
#define FLARE_DB_BYTESV(p, n) ((flare_db_val_t){ .type = FLARE_DB_BYTES, .s = { (p), (n) } })

/* ---- queries ---------------------------------------------------------------- */

/* The result (or the error) of one statement, valid only during the
 * callback: copy what you keep. */
typedef void (*flare_db_fn)(flare_db_res_t *r, void *ud);

/* Runs sql with params[0..nparams) ($1..$n) on one of worker w's
 * connections, then cb(result, ud) on w. Call on w's thread (a handler: w =
 * flare_req_worker(req)). sql is read during the call only (it is copied
 * the first time it is seen and looked up by content afterwards).
 * Several calls in a row (one request asking for 20 rows) go out together
 * and complete independently: one failing does not fail the others.
 * PostgreSQL: the reads issued in one loop iteration share one pipeline
 * Sync, so the server runs them as one implicit transaction. A read is a
 * statement whose text, after white space and comments, starts with SELECT
 * and holds none of the words INTO and FOR, nor ';'. When one of them
 * fails, the server skips those after it; the driver sends them again, so
 * each still gets its own result. A write (anything else) ends the batch
 * with a Sync of its own: nothing sent after it can undo it.
 * The limit of that rule: a SELECT calling a function with side effects
 * (one that writes, pg_notify, set_config) is taken for a read, and if a
 * statement after it in the same batch fails, the server rolls those
 * effects back although the SELECT was reported as a success. Run such a
 * call in a transaction (flare_db_begin), or give it a text that does not
 * start with SELECT (WITH r AS (SELECT f()) SELECT * FROM r).
 * 0 (cb will run), or FLARE_EINVAL (NULL db, w, sql or cb; params NULL with
 * nparams > 0; more than 65535 parameters; called on another thread than
 * w's: post to w with flare_app_post), FLARE_ESTATE (w not running),
 * FLARE_ENOMEM. A database that is down, or a full wait queue, is not an
 * error here: cb gets FLARE_EUNAVAIL. */
FLARE_API int flare_db_query(flare_db_t *db, flare_worker_t *w, const char *sql,
                             const flare_db_val_t *params, size_t nparams, flare_db_fn cb,
                             void *ud);

/* 0 on success, else FLARE_EDB / FLARE_EUNAVAIL / FLARE_ETIMEDOUT (above). */
FLARE_API int flare_db_res_error(const flare_db_res_t *r);
/* PostgreSQL's SQLSTATE ("23505"), "" when there is none (SQLite, success,
 * or an error that is not the server's). Never NULL. */
FLARE_API const char *flare_db_res_sqlstate(const flare_db_res_t *r);
/* SQLite's extended result code (SQLITE_CONSTRAINT_PRIMARYKEY...), 0 for
 * PostgreSQL and on success. */
FLARE_API int flare_db_res_code(const flare_db_res_t *r);
/* The server's (or the driver's) message, "" on success. Never NULL. */
FLARE_API const char *flare_db_res_message(const flare_db_res_t *r);

/* What kind of error r holds, the same for every driver, so that code
 * that reacts to "this name is taken" runs on SQLite and PostgreSQL alike
 * (the driver's own code stays in flare_db_res_sqlstate / _code):
 *   NONE           no error
 *   UNIQUE         a unique or primary key already taken: SQLSTATE 23505;
 *                  SQLITE_CONSTRAINT_UNIQUE, SQLITE_CONSTRAINT_PRIMARYKEY
 *   FOREIGN_KEY    a reference to a row that does not exist, or a row still
 *                  referenced: 23503; SQLITE_CONSTRAINT_FOREIGNKEY
 *   NOT_NULL       NULL in a NOT NULL column: 23502; SQLITE_CONSTRAINT_NOTNULL
 *   CHECK          a CHECK constraint: 23514; SQLITE_CONSTRAINT_CHECK
 *   SERIALIZATION  lost to a concurrent transaction, running it again may
 *                  work: serialization failure 40001, deadlock 40P01;
 *                  SQLITE_BUSY and SQLITE_LOCKED with their extended codes
 *                  (locked past busy_timeout_ms, a stale WAL snapshot)
 *   CONNECTION     no connection: lost, refused, the server shutting down
 *                  (class 08 except 08P01, 57P01..57P03), and every
 *                  FLARE_EUNAVAIL without a database code (server down, wait
 *                  queue full or waited too long, worker shutting down); the
 *                  statement may not have run, later may work
 *   OTHER          anything else: syntax, types, a timeout (see
 *                  flare_db_res_error), other constraints (exclusion 23P01)
 * X(NAME, name): the enum FLARE_DB_ERR_NAME and its name for logs. */
/* clang-format off */
#define FLARE_DB_ERRCLASS_MAP(X)          \
    X(NONE, "none")                       \
    X(UNIQUE, "unique")                   \
    X(FOREIGN_KEY, "foreign_key")         \
    X(NOT_NULL, "not_null")               \
    X(CHECK, "check")                     \
    X(SERIALIZATION, "serialization")     \
    X(CONNECTION, "connection")           \
    X(OTHER, "other")

/* What kind of error a failed query had (the map above). */
typedef enum flare_db_errclass {
#define FLARE_DB_ERRCLASS_ENUM(name, text) FLARE_DB_ERR_##name,
    FLARE_DB_ERRCLASS_MAP(FLARE_DB_ERRCLASS_ENUM)
#undef FLARE_DB_ERRCLASS_ENUM
} flare_db_errclass_t;
/* clang-format on */

/* r's class: FLARE_DB_ERR_NONE on success (or r NULL). From PostgreSQL's
 * SQLSTATE when there is one, else from SQLite's extended code, else from
 * the error (FLARE_EUNAVAIL: CONNECTION; FLARE_ETIMEDOUT: OTHER). Valid
 * during the callback, as r. */
FLARE_API flare_db_errclass_t flare_db_error_class(const flare_db_res_t *r);
/* The name of class c: "unique", "foreign_key"... (the map above);
 * "unknown" for a value not in
 * it. Static storage. */
FLARE_API const char *flare_db_error_class_name(flare_db_errclass_t c);

/* Rows and columns returned (0 for a statement without rows or on error). */
FLARE_API size_t flare_db_res_rows(const flare_db_res_t *r);
FLARE_API size_t flare_db_res_cols(const flare_db_res_t *r);
/* Rows changed by INSERT, UPDATE or DELETE. */
FLARE_API uint64_t flare_db_res_affected(const flare_db_res_t *r);
/* Column col's name, "" when out of range. Never NULL. */
FLARE_API const char *flare_db_res_col_name(const flare_db_res_t *r, size_t col);
/* The index of the first column named name in *col. 0, FLARE_ENOTFOUND (no
 * such column), FLARE_EINVAL (a NULL argument). */
FLARE_API int flare_db_res_col_index(const flare_db_res_t *r, const char *name, size_t *col);

/* Typed getters of the value at row, col. Out of range or NULL: is_null is true and the others
 * return 0 / 0.0 / an empty view. A value of another type is converted the
 * way the database prints it (an integer read as text gives its digits;
 * text that is not a number read as int64 gives 0). Views are valid during
 * the callback. */
FLARE_API bool flare_db_is_null(const flare_db_res_t *r, size_t row, size_t col);
FLARE_API int64_t flare_db_get_int64(const flare_db_res_t *r, size_t row, size_t col);
FLARE_API double flare_db_get_double(const flare_db_res_t *r, size_t row, size_t col);
FLARE_API flare_str_t flare_db_get_text(const flare_db_res_t *r, size_t row, size_t col);
FLARE_API flare_str_t flare_db_get_bytes(const flare_db_res_t *r, size_t row, size_t col);

/* The HTTP status that reports r's error: 0 when there is none, 503 for
 * FLARE_EUNAVAIL and FLARE_ETIMEDOUT, 500 for FLARE_EDB. */
FLARE_API int flare_db_res_http_status(const flare_db_res_t *r);
/* Answers res with that status and a short text body ("database
 * unavailable", "database timeout", "database error"); the server's message
 * is not sent to the client. Returns what flare_res_send returns, or
 * FLARE_EINVAL when r has no error. */
FLARE_API int flare_db_send_error(flare_res_t *res, const flare_db_res_t *r);

/* ---- transactions ------------------------------------------------------------- */

/* Called once a transaction has started (err 0, tx usable) or could not
 * (err FLARE_EUNAVAIL..., tx NULL; r holds the error). */
typedef void (*flare_db_tx_fn)(flare_db_tx_t *tx, flare_db_res_t *r, void *ud);

/* Takes one of w's connections for this transaction alone, runs BEGIN on
 * it, then cb. Statements go to that connection with flare_db_tx_query,
 * one after another as the caller issues them; flare_db_tx_commit or
 * flare_db_tx_rollback end it and give the connection back.
 * owner (may be NULL) ties the transaction to a request: if the request's
 * exchange ends (answered, or the client gone and the handler done) while
 * the transaction is still open, it is rolled back and the connection
 * released, so a transaction never outlives the request that opened it.
 * At worker shutdown an open transaction is rolled back.
 * 0 (cb will run), or FLARE_EINVAL / FLARE_ESTATE / FLARE_ENOMEM. */
FLARE_API int flare_db_begin(flare_db_t *db, flare_worker_t *w, flare_req_t *owner,
                             flare_db_tx_fn cb, void *ud);

/* As flare_db_query (sql, params[0 .. nparams), then cb(..., ud)), inside
 * tx. After an error the transaction is aborted
 * (PostgreSQL refuses further statements): roll it back. 0, or FLARE_EINVAL,
 * FLARE_ESTATE (tx already ended or ending). */
FLARE_API int flare_db_tx_query(flare_db_tx_t *tx, const char *sql, const flare_db_val_t *params,
                                size_t nparams, flare_db_fn cb, void *ud);

/* COMMIT / ROLLBACK, then cb (may be NULL) with its result; tx is invalid
 * once the call returns 0 (the connection goes back when the statement
 * completes). 0, or FLARE_EINVAL, FLARE_ESTATE (already ending). */
FLARE_API int flare_db_tx_commit(flare_db_tx_t *tx, flare_db_fn cb, void *ud);
FLARE_API int flare_db_tx_rollback(flare_db_tx_t *tx, flare_db_fn cb, void *ud);

/* ---- LISTEN / NOTIFY (PostgreSQL) ---------------------------------------------- */

/* Called on the worker for each NOTIFY on a channel listened to with
 * flare_db_listen, with its payload. */
typedef void (*flare_db_notify_fn)(flare_str_t channel, flare_str_t payload, void *ud);

/* Delivers every NOTIFY on `channel` to cb(channel, payload, ud) on worker
 * `worker`, over a connection of its own (re-listened after a reconnect).
 * Before flare_app_run only; channel is copied (an SQL identifier: letters,
 * digits, '_'; at most 63 bytes). 0, or FLARE_EINVAL (bad argument, not
 * PostgreSQL, worker out of range), FLARE_ESTATE, FLARE_ENOMEM. */
FLARE_API int flare_db_listen(flare_db_t *db, unsigned worker, const char *channel,
                              flare_db_notify_fn cb, void *ud);

/* ---- statistics ------------------------------------------------------------------ */

/* A database's figures (flare_db_stats). */
typedef struct flare_db_stats {
    uint64_t conns_open; /* connections up now */
    uint64_t conns_busy; /* of those, with a query in flight or in a transaction */
    uint64_t queue_len;  /* queries waiting for a connection now */
    uint64_t queries;    /* statements completed, successfully or not */
    uint64_t errors;     /* of those, with an error (any of the three) */
    uint64_t timeouts;   /* of those, FLARE_ETIMEDOUT */
    uint64_t rejected;   /* of those, FLARE_EUNAVAIL (down, queue full, waited too long) */
    uint64_t reconnects; /* connections remade after being lost */
} flare_db_stats_t;

/* Worker `worker`'s figures, into *out (worker == UINT32_MAX: summed over
 * all). Safe
 * from any thread while the app runs (another worker's figures may be a
 * moment old); zero before. 0, or FLARE_EINVAL. */
FLARE_API int flare_db_stats(const flare_db_t *db, unsigned worker, flare_db_stats_t *out);

#ifdef __cplusplus
}
#endif

#endif
