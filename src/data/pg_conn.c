/* The PostgreSQL driver on the wire: connecting without blocking (names
 * resolved on the job pool, PQconnectPoll driven by a watcher, a timer for
 * connect_timeout_ms), the pipeline (what each connection has sent, in
 * order, and the results that come back for it), query timeouts with
 * PQcancel on the job pool, reconnects with backoff, and the accessors of
 * a result. pg_int.h describes the pipeline's layout. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "core/core.h"
#include "data/pg_int.h"

#ifdef LIBPQ_HAS_SEND_PIPELINE_SYNC
#define pg_sync(pg) PQsendPipelineSync(pg) /* libpq 17: no flush, done per batch */
#else
#define pg_sync(pg) PQpipelineSync(pg) /* libpq 14-16: flushes */
#endif

static void conn_connect(pg_conn_t *c);
static void conn_timer(void *ud);

/* ---- the ring of what was sent ---- */

static int ring_reserve(pg_conn_t *c, uint32_t n)
{
    if (c->olen + n <= c->ocap)
        return 0;
    uint32_t cap = c->ocap ? c->ocap : 16;
    while (cap < c->olen + n)
        cap *= 2;
    pg_op_t *ops = malloc(cap * sizeof(*ops));
    if (ops == NULL)
        return FLARE_ENOMEM;
    for (uint32_t i = 0; i < c->olen; i++)
        ops[i] = c->ops[(c->ohead + i) & (c->ocap - 1)];
    free(c->ops);
    c->ops = ops;
    c->ocap = cap;
    c->ohead = 0;
    return 0;
}

static void ring_push(pg_conn_t *c, uint32_t kind, uint32_t stmt, pg_query_t *q)
{
    c->ops[(c->ohead + c->olen++) & (c->ocap - 1)] = (pg_op_t){ kind, stmt, q };
}

static void ring_pop(pg_conn_t *c)
{
    c->ohead = (c->ohead + 1) & (c->ocap - 1);
    c->olen--;
}

/* The oldest statement still waiting for its result. */
static pg_query_t *ring_oldest(const pg_conn_t *c)
{
    for (uint32_t i = 0; i < c->olen; i++) {
        const pg_op_t *op = &c->ops[(c->ohead + i) & (c->ocap - 1)];
        if (op->kind == OP_QUERY && op->q != NULL)
            return op->q;
    }
    return NULL;
}

static bool prepared_has(const pg_conn_t *c, uint32_t id)
{
    return id / 64 < c->nprepared && (c->prepared[id / 64] >> (id % 64) & 1u) != 0;
}

static int prepared_set(pg_conn_t *c, uint32_t id, bool on)
{
    if (id / 64 >= c->nprepared) {
        if (!on)
            return 0;
        uint32_t n = id / 64 + 1 < 4 ? 4 : (id / 64 + 1) * 2;
        uint64_t *p = realloc(c->prepared, n * sizeof(*p));
        if (p == NULL)
            return FLARE_ENOMEM;
        memset(p + c->nprepared, 0, (n - c->nprepared) * sizeof(*p));
        c->prepared = p;
        c->nprepared = n;
    }
    if (on)
        c->prepared[id / 64] |= UINT64_C(1) << (id % 64);
    else
        c->prepared[id / 64] &= ~(UINT64_C(1) << (id % 64));
    return 0;
}

void flare__pg_conn_init(pg_conn_t *c, pg_worker_t *pw, bool listen)
{
    *c = (pg_conn_t){ .pw = pw, .fd = -1, .listen = listen, .state = C_IDLE };
    c->prep_err.stmt = PG_NO_STMT;
    flare__timer_init(&c->timer, conn_timer, c);
}

/* ---- sending ---- */

static void set_interest(pg_conn_t *c)
{
    if (c->watch != NULL &&
        flare_watch_set(c->watch, FLARE_WATCH_READ | (c->want_write ? FLARE_WATCH_WRITE : 0)) != 0)
        c->broken = true;
}

static void mark_broken(pg_conn_t *c)
{
    c->broken = true;
    flare__loop_ready(c->pw->loop, &c->pw->ready_io);
}

/* What libpq still holds goes out; the rest when the socket is writable. */
static void flush_out(pg_conn_t *c)
{
    c->need_flush = false;
    int r = PQflush(c->pg);
    if (r < 0) {
        mark_broken(c);
        return;
    }
    if (c->want_write != (r == 1)) {
        c->want_write = r == 1;
        set_interest(c);
    }
}

/* Ends the open segment. Its ring slot was reserved with the statement
 * that opened it (flare__pg_send reserves one more than it pushes). */
static bool seg_close(pg_conn_t *c)
{
    c->seg_open = false;
    if (!pg_sync(c->pg)) {
        mark_broken(c);
        return false;
    }
    ring_push(c, OP_SYNC, PG_NO_STMT, NULL);
    return true;
}

void flare__pg_flush(pg_conn_t *c)
{
    if (c->seg_open && !seg_close(c))
        return;
    flush_out(c);
}

static void arm_timeout(pg_conn_t *c)
{
    pg_query_t *q = ring_oldest(c);
    if (q == NULL)
        return;
    uint64_t when = q->t + c->pw->db->cfg.query_timeout_ms, now = pg_now(c->pw);
    flare__timer_start(c->pw->loop, &c->timer, when > now ? when - now : 0);
}

/* Keeps q's parameters (the block starting at params, `len` bytes) for a
 * second send: in the record when they fit. */
static int keep_params(pg_query_t *q, const char *params, size_t len)
{
    if (q->params != NULL || len == 0)
        return 0; /* already its own (waited in the queue, or sent again) */
    char *p = len <= sizeof(q->inl) ? q->inl : malloc(len);
    if (p == NULL)
        return FLARE_ENOMEM;
    memcpy(p, params, len);
    q->params = p;
    return 0;
}

static size_t params_len(const char *params, uint32_t n)
{
    const char *p = params;
    for (uint32_t i = 0; i < n; i++) {
        int32_t l;
        memcpy(&l, p, 4);
        p += PG_PARAM_HDR + (size_t)(l > 0 ? l : 0) + 1;
    }
    return (size_t)(p - params);
}

/* libpq 15 must not be given a statement while its pipeline is aborted
 * (between an error and the Sync that ends its segment): it then skips
 * the NULL that ends the result being read and the ring loses step. What
 * is sent then waits on the connection, in order, and goes out when the
 * Sync's result has been read (conn_read). */
static int hold(pg_conn_t *c, pg_query_t *q, const char *params)
{
    if (q->stmt != PG_NO_STMT && keep_params(q, params, params_len(params, q->nparams)) != 0)
        return FLARE_ENOMEM;
    q->next = NULL;
    if (c->htail != NULL)
        c->htail->next = q;
    else
        c->hhead = q;
    c->htail = q;
    c->inflight++;
    flare__pg_busy_update(c);
    return 0;
}

static void release_held(pg_conn_t *c)
{
    pg_query_t *q = c->hhead;
    c->hhead = c->htail = NULL;
    while (q != NULL) {
        pg_query_t *next = q->next;
        c->inflight--;
        if (flare__pg_send(c, q, q->params) != 0)
            flare__pg_complete_err(c->pw, q, FLARE_EUNAVAIL,
                                   c->broken ? "database unavailable: sending failed"
                                             : "database unavailable: out of memory");
        q = next;
    }
    flare__pg_busy_update(c);
}

int flare__pg_send(pg_conn_t *c, pg_query_t *q, const char *params)
{
    pg_worker_t *pw = c->pw;
    if (c->hhead != NULL || PQpipelineStatus(c->pg) == PQ_PIPELINE_ABORTED)
        return hold(c, q, params);
    /* Sync before, Parse, the statement, Sync after (or the slot of the
     * Sync that will close the segment) */
    if (ring_reserve(c, 4) != 0)
        return FLARE_ENOMEM;
    pg_stmt_t *st = q->stmt != PG_NO_STMT ? &pw->stmts[q->stmt] : NULL;
    /* may share a segment (pg_int.h): a pool statement not yet aborted twice */
    bool join = st != NULL && c->tx == NULL && q->resent < 2;
    if (!join && c->seg_open && !seg_close(c))
        return FLARE_EUNAVAIL;
    q->behind = join && c->seg_open;
    /* kept for a second send: behind another statement, or sent while a
     * Parse is unanswered (if it was aborted, this one's Bind fails) */
    bool keep = join && (q->behind || c->npreps > 0);
    if (st != NULL) {
        uint32_t n = q->nparams;
        if (flare__pg_params_reserve(pw, n) != 0)
            return FLARE_ENOMEM;
        const char *p = params;
        for (uint32_t i = 0; i < n; i++) {
            int32_t l;
            memcpy(&l, p, 4);
            pw->fmts[i] = p[4];
            pw->vals[i] = l < 0 ? NULL : p + PG_PARAM_HDR;
            pw->lens[i] = l < 0 ? 0 : l;
            p += PG_PARAM_HDR + (size_t)(l > 0 ? l : 0) + 1;
        }
        if (keep && keep_params(q, params, (size_t)(p - params)) != 0)
            return FLARE_ENOMEM;
        if (!join && q->resent >= 2 && c->tx == NULL) {
            /* the last send of a statement aborted twice: its own text,
             * unnamed, in a segment of its own. Bound to the prepared name
             * it could fail once more, because the Parse that name relies
             * on went out in a segment still in flight that another
             * statement may abort (26000, "does not exist") */
            if (!PQsendQueryParams(c->pg, st->sql, (int)n, st->types, pw->vals, pw->lens, pw->fmts,
                                   0))
                goto fail;
        } else {
            if (!prepared_has(c, q->stmt)) {
                if (prepared_set(c, q->stmt, true) != 0)
                    return FLARE_ENOMEM;
                if (!PQsendPrepare(c->pg, st->name, st->sql, (int)st->nparams, st->types)) {
                    prepared_set(c, q->stmt, false);
                    goto fail;
                }
                ring_push(c, OP_PREP, q->stmt, NULL);
                c->npreps++;
            }
            if (!PQsendQueryPrepared(c->pg, st->name, (int)n, pw->vals, pw->lens, pw->fmts, 0))
                goto fail;
        }
    } else if (!PQsendQueryParams(c->pg, q->sql, 0, NULL, NULL, NULL, NULL, 0)) {
        goto fail;
    }
    ring_push(c, OP_QUERY, q->stmt, q);
    q->t = pg_now(pw);
    c->inflight++;
    flare__pg_busy_update(c);
    if (!c->timer.active)
        arm_timeout(c);
    if (join && st->read) {
        c->seg_open = true; /* closed from the ready callback */
    } else if (!seg_close(c)) {
        return 0; /* q is in the pipeline: it fails with the connection */
    }
    if (!c->need_flush) {
        c->need_flush = true;
        flare__loop_ready(pw->loop, &pw->ready_io);
    }
    return 0;
fail:
    mark_broken(c);
    return FLARE_EUNAVAIL;
}

/* ---- results ---- */

typedef struct pg_bytes {
    struct pg_bytes *next;
    unsigned char *p;
} pg_bytes_t;

typedef struct pg_res {
    PGresult *r;
    pg_bytes_t *bytes; /* get_bytes decodings, freed after the callback */
    locale_t loc;
} pg_res_t;

#define RES(r) ((pg_res_t *)(r)->impl)

static const char *res_col_name(const flare_db_res_t *r, size_t col)
{
    return PQfname(RES(r)->r, (int)col);
}

static bool res_is_null(const flare_db_res_t *r, size_t row, size_t col)
{
    return PQgetisnull(RES(r)->r, (int)row, (int)col) != 0;
}

static int64_t res_int64(const flare_db_res_t *r, size_t row, size_t col)
{
    const char *v = PQgetvalue(RES(r)->r, (int)row, (int)col);
    if (v[0] == 't' && v[1] == '\0') /* boolean */
        return 1;
    return strtoll(v, NULL, 10);
}

static double res_double(const flare_db_res_t *r, size_t row, size_t col)
{
    return strtod_l(PQgetvalue(RES(r)->r, (int)row, (int)col), NULL, RES(r)->loc);
}

static flare_str_t res_text(const flare_db_res_t *r, size_t row, size_t col)
{
    PGresult *res = RES(r)->r;
    return (flare_str_t){ PQgetvalue(res, (int)row, (int)col),
                          (size_t)PQgetlength(res, (int)row, (int)col) };
}

/* bytea arrives as text (\x hex): decoded into memory the result owns
 * until the callback returns. Other types give their text. */
static flare_str_t res_bytes(const flare_db_res_t *r, size_t row, size_t col)
{
    pg_res_t *pr = RES(r);
    if (PQftype(pr->r, (int)col) != 17)
        return res_text(r, row, col);
    size_t n = 0;
    unsigned char *p =
        PQunescapeBytea((const unsigned char *)PQgetvalue(pr->r, (int)row, (int)col), &n);
    pg_bytes_t *b = p != NULL ? malloc(sizeof(*b)) : NULL;
    if (b == NULL) {
        PQfreemem(p);
        return (flare_str_t){ "", 0 };
    }
    b->p = p;
    b->next = pr->bytes;
    pr->bytes = b;
    return (flare_str_t){ (const char *)p, n };
}

const flare_db_res_ops_t flare__pg_res_ops = {
    .col_name = res_col_name,
    .is_null = res_is_null,
    .get_int64 = res_int64,
    .get_double = res_double,
    .get_text = res_text,
    .get_bytes = res_bytes,
};

static int map_sqlstate(const char *s)
{
    if (s == NULL || s[0] == '\0')
        return FLARE_EUNAVAIL; /* libpq's own: the connection failed */
    if (strcmp(s, "57014") == 0)
        return FLARE_ETIMEDOUT; /* canceling statement (ours, or statement_timeout) */
    if ((strncmp(s, "08", 2) == 0 && strcmp(s, "08P01") != 0) || strncmp(s, "57P", 3) == 0)
        return FLARE_EUNAVAIL; /* connection exception, server shutting down */
    return FLARE_EDB;
}

/* A message that may be cut to fit (a host name, the server's reason, each
 * up to PG_MSG_MAX): vsnprintf, where snprintf would have gcc warn about
 * the cut it is meant to make. */
__attribute__((format(printf, 3, 4))) static void msg_fmt(char *out, size_t cap, const char *fmt,
                                                          ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out, cap, fmt, ap);
    va_end(ap);
}

static void trim_copy(char *dst, size_t cap, const char *src)
{
    size_t n = strlen(src);
    while (n > 0 && (src[n - 1] == '\n' || src[n - 1] == ' '))
        n--;
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* q's result: its callback with r, then r is cleared. */
static bool prep_failed(const pg_conn_t *c, const pg_query_t *q)
{
    return c->prep_err.stmt == q->stmt && q->stmt != PG_NO_STMT && c->prep_err.msg != NULL;
}

static void deliver(pg_conn_t *c, pg_query_t *q, PGresult *r)
{
    pg_worker_t *pw = c->pw;
    pg_res_t impl = { .r = r, .loc = pw->pd->c_locale };
    flare_db_res_t res = { .sqlstate = "", .message = "" };
    char buf[PG_MSG_MAX];
    ExecStatusType st = PQresultStatus(r);
    bool pfailed = prep_failed(c, q);
    if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK || st == PGRES_SINGLE_TUPLE) {
        res.nrows = (size_t)PQntuples(r);
        res.ncols = (size_t)PQnfields(r);
        res.affected = strtoull(PQcmdTuples(r), NULL, 10);
        if (res.nrows > 0 || res.ncols > 0) {
            res.ops = &flare__pg_res_ops;
            res.impl = &impl;
        }
        if (q->commit && strcmp(PQcmdStatus(r), "ROLLBACK") == 0)
            res = (flare_db_res_t){ .err = FLARE_EDB,
                                    .sqlstate = "25P02",
                                    .message = "COMMIT rolled back a transaction that had failed" };
    } else if (st == PGRES_PIPELINE_ABORTED) {
        /* behind a failed Parse of its own statement (others are sent again) */
        res.err = FLARE_EDB;
        res.sqlstate = pfailed ? c->prep_err.sqlstate : "";
        res.message = pfailed ? c->prep_err.msg : "statement skipped: the pipeline aborted";
    } else {
        const char *s = PQresultErrorField(r, PG_DIAG_SQLSTATE);
        const char *m = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
        if (m == NULL) {
            trim_copy(buf, sizeof(buf), PQresultErrorMessage(r));
            m = buf;
        }
        if (s != NULL && strcmp(s, "26000") == 0 && pfailed) {
            /* sent behind a Parse that failed: report why that failed */
            s = c->prep_err.sqlstate;
            m = c->prep_err.msg;
        }
        res.sqlstate = s != NULL ? s : "";
        res.message = m;
        res.err = map_sqlstate(s);
        if (q->timed_out && res.err != 0)
            res.err = FLARE_ETIMEDOUT;
    }
    flare_db_fn cb = q->cb;
    void *ud = q->ud;
    if (q->counted)
        flare__db_stat_done(pw->st, res.err);
    flare__pg_qfree(pw, q);
    cb(&res, ud);
    while (impl.bytes != NULL) {
        pg_bytes_t *b = impl.bytes;
        impl.bytes = b->next;
        PQfreemem(b->p);
        free(b);
    }
    PQclear(r);
}

static void prep_result(pg_conn_t *c, uint32_t stmt, PGresult *r)
{
    ExecStatusType st = PQresultStatus(r);
    c->npreps--;
    if (st == PGRES_COMMAND_OK) {
        if (c->prep_err.stmt == stmt)
            c->prep_err.stmt = PG_NO_STMT; /* it failed before, not now */
        return;
    }
    prepared_set(c, stmt, false); /* the next use prepares again */
    if (st == PGRES_PIPELINE_ABORTED)
        return; /* skipped behind another failure: not an error of its own */
    const char *s = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    const char *m = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
    char buf[PG_MSG_MAX];
    if (m == NULL) {
        trim_copy(buf, sizeof(buf), PQresultErrorMessage(r));
        m = buf;
    }
    free(c->prep_err.msg);
    c->prep_err.msg = strdup(m);
    c->prep_err.stmt = c->prep_err.msg != NULL ? stmt : PG_NO_STMT;
    trim_copy(c->prep_err.sqlstate, sizeof(c->prep_err.sqlstate), s != NULL ? s : "");
}

static void notifies(pg_conn_t *c)
{
    pg_worker_t *pw = c->pw;
    unsigned id = flare_worker_id(pw->w);
    PGnotify *n;
    while (c->pg != NULL && (n = PQnotifies(c->pg)) != NULL) {
        for (unsigned i = 0; i < pw->pd->nlistens; i++) {
            pg_listen_t *l = &pw->pd->listens[i];
            if (l->worker == id && strcmp(l->channel, n->relname) == 0)
                l->cb(flare_str(n->relname), flare_str(n->extra), l->ud);
        }
        PQfreemem(n);
    }
}

/* Whether q's result is only the echo of another statement's failure in
 * its segment (pg_int.h): skipped (aborted), or its Bind refused because
 * its Parse, in an earlier segment, was skipped. Then q never ran. */
static bool must_resend(const pg_conn_t *c, const pg_query_t *q, PGresult *r)
{
    if (q->resent >= 3 || q->timed_out || c->tx != NULL || prep_failed(c, q) ||
        (q->nparams > 0 && q->params == NULL))
        return false;
    ExecStatusType st = PQresultStatus(r);
    if (st == PGRES_PIPELINE_ABORTED)
        return q->behind;
    /* 26000 although its name may be prepared again by now: a statement
     * sent again since the failed Parse may have sent a new one */
    if (st != PGRES_FATAL_ERROR || q->stmt == PG_NO_STMT)
        return false;
    const char *s = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    return s != NULL && strcmp(s, "26000") == 0;
}

/* Whether q's successful result waits for its Sync (c->wq): a statement
 * that may write, in its own implicit transaction (flare__pg_send closes a
 * write's segment right after it). */
static bool holds_to_sync(const pg_conn_t *c, const pg_query_t *q, PGresult *r)
{
    ExecStatusType st = PQresultStatus(r);
    if (c->tx != NULL || (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK))
        return false;
    return q->stmt == PG_NO_STMT || !c->pw->stmts[q->stmt].read;
}

static void resend(pg_conn_t *c, pg_query_t *q)
{
    q->resent++;
    if (flare__pg_send(c, q, q->params) != 0)
        flare__pg_complete_err(c->pw, q, FLARE_EUNAVAIL,
                               c->broken ? "database unavailable: sending failed"
                                         : "database unavailable: out of memory");
}

static void conn_read(pg_conn_t *c)
{
    uint32_t gen = c->gen;
    if (!PQconsumeInput(c->pg)) {
        flare__pg_conn_down(c, PQerrorMessage(c->pg));
        return;
    }
    while (!c->broken && !PQisBusy(c->pg)) {
        PGresult *r = PQgetResult(c->pg);
        if (c->olen == 0) { /* nothing asked: an asynchronous error before a close */
            if (r == NULL)
                break;
            PQclear(r);
            continue;
        }
        pg_op_t *op = &c->ops[c->ohead];
        if (r == NULL) { /* the end of one statement's results */
            if (op->kind == OP_SYNC || !c->got_result)
                break;
            ring_pop(c);
            c->got_result = false;
            continue;
        }
        if (op->kind == OP_SYNC) { /* no NULL follows a sync */
            bool sync = PQresultStatus(r) == PGRES_PIPELINE_SYNC;
            if (c->wq != NULL) {
                /* the write's commit: its result, or why the commit failed */
                pg_query_t *wq = c->wq;
                PGresult *wr = c->wr;
                c->wq = NULL;
                c->wr = NULL;
                if (sync) {
                    deliver(c, wq, wr);
                } else {
                    PQclear(wr);
                    deliver(c, wq, r);
                    r = NULL;
                }
                if (c->gen != gen)
                    return;
            }
            PQclear(r);
            if (sync) {
                ring_pop(c);
                if (c->hhead != NULL && PQpipelineStatus(c->pg) != PQ_PIPELINE_ABORTED)
                    release_held(c);
            }
            continue;
        }
        if (c->got_result) { /* a second result for one statement: not ours to give */
            PQclear(r);
            continue;
        }
        c->got_result = true;
        if (op->kind == OP_PREP) {
            prep_result(c, op->stmt, r);
            PQclear(r);
            continue;
        }
        pg_query_t *q = op->q;
        op->q = NULL;
        c->inflight--;
        flare__pg_busy_update(c);
        bool rearm = q == c->cancel_q;
        if (rearm)
            c->cancel_q = NULL;
        if (must_resend(c, q, r)) {
            PQclear(r);
            resend(c, q);
        } else if (holds_to_sync(c, q, r)) {
            c->wq = q;
            c->wr = r;
        } else {
            deliver(c, q, r); /* may send on c, never tears it down */
        }
        if (c->gen != gen)
            return;
        if (rearm)
            arm_timeout(c);
    }
    notifies(c);
    if (!c->broken && PQstatus(c->pg) == CONNECTION_BAD) {
        flare__pg_conn_down(c, PQerrorMessage(c->pg));
        return;
    }
    flare__pg_pump(c->pw);
}

/* ---- connecting ---- */

static void listen_done(flare_db_res_t *r, void *ud)
{
    (void)r, (void)ud; /* a failed LISTEN shows as no notifications; nothing to tell */
}

static void conn_up(pg_conn_t *c)
{
    pg_worker_t *pw = c->pw;
    if (!PQenterPipelineMode(c->pg)) {
        flare__pg_conn_down(c, PQerrorMessage(c->pg));
        return;
    }
    flare__timer_stop(pw->loop, &c->timer);
    c->state = C_UP;
    c->backoff = 0;
    c->want_write = false;
    set_interest(c);
    flare__db_stat_add(&pw->st->conns_open, 1);
    if (c->ever_up)
        flare__db_stat_add(&pw->st->reconnects, 1);
    c->ever_up = true;
    if (c->listen) {
        unsigned id = flare_worker_id(pw->w);
        for (unsigned i = 0; i < pw->pd->nlistens; i++) {
            pg_listen_t *l = &pw->pd->listens[i];
            pg_query_t *q = l->worker == id ? flare__pg_qalloc(pw) : NULL;
            if (q == NULL)
                continue;
            q->sql = l->sql;
            q->cb = listen_done;
            if (flare__pg_send(c, q, NULL) != 0)
                flare__pg_qfree(pw, q);
        }
        return;
    }
    pw->nup++;
    pw->down = false;
    flare__pg_pump(pw);
}

static void conn_event(flare_watch_t *wt, unsigned events, void *ud);

/* Watches the socket libpq uses now for `events`. While connecting, libpq
 * may close its socket and open another (the next address), likely under
 * the same number, which the poller then no longer watches: the watcher is
 * made again after each step of the connect, never in the steady state. */
static int watch_socket(pg_conn_t *c, unsigned events)
{
    int fd = PQsocket(c->pg);
    if (fd < 0)
        return FLARE_ESYS;
    if (c->watch != NULL && fd == c->fd && c->state == C_UP)
        return flare_watch_set(c->watch, events);
    flare_watch_free(c->watch);
    c->watch = NULL;
    c->fd = fd;
    return flare_watch_new(c->pw->w, fd, events, conn_event, c, &c->watch);
}

static void connect_step(pg_conn_t *c)
{
    switch (PQconnectPoll(c->pg)) {
    case PGRES_POLLING_READING:
        if (watch_socket(c, FLARE_WATCH_READ) != 0)
            flare__pg_conn_down(c, "cannot watch the socket");
        break;
    case PGRES_POLLING_WRITING:
        if (watch_socket(c, FLARE_WATCH_WRITE) != 0)
            flare__pg_conn_down(c, "cannot watch the socket");
        break;
    case PGRES_POLLING_OK:
        if (watch_socket(c, FLARE_WATCH_READ) != 0)
            flare__pg_conn_down(c, "cannot watch the socket");
        else
            conn_up(c);
        break;
    default:
        flare__pg_conn_down(c, PQerrorMessage(c->pg));
        break;
    }
}

static void conn_event(flare_watch_t *wt, unsigned events, void *ud)
{
    (void)wt;
    pg_conn_t *c = ud;
    if (c->state == C_CONNECTING) {
        connect_step(c);
        return;
    }
    if (c->state != C_UP)
        return;
    uint32_t gen = c->gen;
    if (events & (FLARE_WATCH_READ | FLARE_WATCH_ERROR | FLARE_WATCH_HUP)) {
        conn_read(c);
        if (c->gen != gen)
            return;
    }
    /* what this iteration sends goes out from the ready callback, with the
     * Sync that closes its segment */
    if (!c->broken && c->want_write)
        flush_out(c);
    if (c->broken)
        flare__pg_conn_down(c, PQerrorMessage(c->pg));
}

static pg_job_t *job_new(pg_conn_t *c)
{
    pg_job_t *j = calloc(1, sizeof(*j));
    if (j == NULL)
        return NULL;
    pg_worker_t *pw = c->pw;
    j->pw = pw;
    j->c = c;
    j->gen = c->gen;
    j->next = pw->jobs;
    if (pw->jobs != NULL)
        pw->jobs->prev = j;
    pw->jobs = j;
    return j;
}

static void job_unlink(pg_job_t *j)
{
    pg_worker_t *pw = j->pw;
    if (pw == NULL)
        return;
    if (j->prev != NULL)
        j->prev->next = j->next;
    else
        pw->jobs = j->next;
    if (j->next != NULL)
        j->next->prev = j->prev;
}

/* On a job thread: only the job's own fields. */
static void job_work(void *ud)
{
    pg_job_t *j = ud;
    if (j->cancel) {
        if (!PQcancel(j->pgcancel, j->err, sizeof(j->err)))
            j->err[sizeof(j->err) - 1] = '\0';
        return;
    }
    struct addrinfo hints = { .ai_family = AF_UNSPEC,
                              .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_ADDRCONFIG },
                    *res = NULL;
    int e = getaddrinfo(j->host, NULL, &hints, &res);
    if (e != 0 || res == NULL) {
        msg_fmt(j->err, sizeof(j->err), "could not resolve host \"%s\": %s", j->host,
                e != 0 ? gai_strerror(e) : "no address");
        return;
    }
    size_t len = 0;
    for (struct addrinfo *ai = res; ai != NULL && j->naddr < PG_ADDRS; ai = ai->ai_next) {
        const void *a = NULL;
        if (ai->ai_family == AF_INET6)
            a = &((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr;
        else if (ai->ai_family == AF_INET)
            a = &((struct sockaddr_in *)ai->ai_addr)->sin_addr;
        char one[INET6_ADDRSTRLEN];
        if (a == NULL || inet_ntop(ai->ai_family, a, one, sizeof(one)) == NULL)
            continue;
        size_t n = strlen(one);
        if (len + n + 2 > sizeof(j->addr))
            break;
        if (j->naddr > 0)
            j->addr[len++] = ',';
        memcpy(j->addr + len, one, n + 1);
        len += n;
        j->naddr++;
    }
    if (j->naddr == 0)
        msg_fmt(j->err, sizeof(j->err), "could not resolve host \"%s\"", j->host);
    freeaddrinfo(res);
}

void flare__pg_job_done(void *ud)
{
    pg_job_t *j = ud;
    pg_conn_t *c = j->c;
    if (j->pw != NULL) {
        job_unlink(j);
        if (!j->cancel && c->gen == j->gen && c->state == C_RESOLVING) {
            if (j->naddr > 0) {
                /* host=name,name... beside hostaddr=a1,a2...: libpq tries
                 * each address in turn and still knows the name (TLS) */
                memcpy(c->hostaddr, j->addr, sizeof(c->hostaddr));
                size_t hl = strlen(j->host), o = 0;
                for (unsigned i = 0; i < j->naddr; i++) {
                    if (i > 0)
                        c->hostrep[o++] = ',';
                    memcpy(c->hostrep + o, j->host, hl);
                    o += hl;
                }
                c->hostrep[o] = '\0';
                conn_connect(c);
            } else {
                flare__pg_conn_down(c, j->err);
            }
        }
    }
    if (j->pgcancel != NULL)
        PQfreeCancel(j->pgcancel);
    free(j);
}

static int job_start(pg_job_t *j)
{
    int rc = flare_worker_job(j->pw->w, job_work, flare__pg_job_done, j);
    if (rc != 0) {
        job_unlink(j);
        if (j->pgcancel != NULL)
            PQfreeCancel(j->pgcancel);
        free(j);
    }
    return rc;
}

static void conn_connect(pg_conn_t *c)
{
    pg_worker_t *pw = c->pw;
    pg_db_t *pd = pw->pd;
    uint64_t cto = pw->db->cfg.connect_timeout_ms;
    if (pw->disposing)
        return;
    if (pd->host[0] != '\0' && c->hostaddr[0] == '\0') {
        pg_job_t *j = job_new(c);
        if (j != NULL)
            memcpy(j->host, pd->host, sizeof(j->host));
        c->state = C_RESOLVING;
        flare__timer_start(pw->loop, &c->timer, cto);
        if (j == NULL || job_start(j) != 0)
            flare__pg_conn_down(c, "cannot start the name resolution");
        return;
    }
    unsigned n = 0;
    for (; n < pd->nkw; n++) {
        pw->ckw[n] = pd->kw[n];
        pw->cval[n] =
            c->hostaddr[0] != '\0' && strcmp(pd->kw[n], "host") == 0 ? c->hostrep : pd->val[n];
    }
    if (c->hostaddr[0] != '\0') {
        pw->ckw[n] = "hostaddr";
        pw->cval[n++] = c->hostaddr;
    }
    pw->ckw[n] = pw->cval[n] = NULL;
    c->pg = PQconnectStartParams(pw->ckw, pw->cval, 0);
    c->hostaddr[0] = '\0'; /* resolved again for the next connect */
    if (c->pg == NULL) {
        c->state = C_CONNECTING;
        flare__pg_conn_down(c, "out of memory");
        return;
    }
    c->state = C_CONNECTING;
    flare__timer_start(pw->loop, &c->timer, cto);
    if (PQstatus(c->pg) == CONNECTION_BAD || PQsetnonblocking(c->pg, 1) != 0) {
        flare__pg_conn_down(c, PQerrorMessage(c->pg));
        return;
    }
    /* libpq's contract: poll first when the socket is writable */
    if (watch_socket(c, FLARE_WATCH_WRITE) != 0)
        flare__pg_conn_down(c, "cannot watch the socket");
}

/* ---- timeouts ---- */

static void send_cancel(pg_conn_t *c)
{
    pg_job_t *j = job_new(c);
    if (j == NULL)
        return;
    j->cancel = true;
    j->pgcancel = PQgetCancel(c->pg);
    if (j->pgcancel == NULL) {
        job_unlink(j);
        free(j);
        return;
    }
    job_start(j);
}

/* The oldest statement in flight is the first to reach its deadline (they
 * were sent in order with one timeout): one timer per connection, armed
 * for it. Past it, a cancel goes out from the job pool; if the statement
 * is still running a grace period later, the connection is dropped. */
static void check_timeouts(pg_conn_t *c)
{
    pg_worker_t *pw = c->pw;
    uint64_t now = pg_now(pw), qto = pw->db->cfg.query_timeout_ms;
    pg_query_t *q = ring_oldest(c);
    if (q == NULL)
        return;
    if (c->cancel_q != NULL) {
        if (c->cancel_q == q) {
            flare__pg_conn_down(c, "a query timed out and the server did not cancel it");
            return;
        }
        c->cancel_q = NULL;
    }
    if (q->t + qto > now) {
        flare__timer_start(pw->loop, &c->timer, q->t + qto - now);
        return;
    }
    q->timed_out = true;
    c->cancel_q = q;
    send_cancel(c);
    flare__timer_start(pw->loop, &c->timer, qto < 1000 ? 1000 : qto);
}

static void conn_timer(void *ud)
{
    pg_conn_t *c = ud;
    switch (c->state) {
    case C_IDLE:
    case C_BACKOFF:
        conn_connect(c);
        break;
    case C_RESOLVING:
    case C_CONNECTING:
        flare__pg_conn_down(c, "connecting took longer than connect_timeout_ms");
        break;
    case C_UP:
        check_timeouts(c);
        break;
    }
}

/* ---- losing a connection ---- */

/* Closes c; returns whether it was up. Its ops stay in the ring. */
static bool teardown(pg_conn_t *c)
{
    pg_worker_t *pw = c->pw;
    bool was_up = c->state == C_UP;
    c->gen++;
    flare__timer_stop(pw->loop, &c->timer);
    if (was_up) {
        flare__db_stat_add(&pw->st->conns_open, -1);
        if (!c->listen)
            pw->nup--;
    }
    c->state = C_BACKOFF;
    if (c->tx != NULL) {
        flare__pg_tx_detach_conn(c->tx);
        c->tx = NULL;
    }
    flare_watch_free(c->watch);
    c->watch = NULL;
    c->fd = -1;
    if (c->pg != NULL)
        PQfinish(c->pg);
    c->pg = NULL;
    c->inflight = 0;
    flare__pg_busy_update(c);
    c->broken = c->reserved = c->want_write = c->need_flush = c->got_result = c->seg_open = false;
    c->npreps = 0;
    c->cancel_q = NULL;
    if (c->prepared != NULL)
        memset(c->prepared, 0, c->nprepared * sizeof(*c->prepared));
    c->prep_err.stmt = PG_NO_STMT;
    return was_up;
}

static void fail_ops(pg_conn_t *c, const char *msg)
{
    if (c->wq != NULL) { /* its commit was never confirmed */
        pg_query_t *q = c->wq;
        PQclear(c->wr);
        c->wq = NULL;
        c->wr = NULL;
        flare__pg_complete_err(c->pw, q, q->timed_out ? FLARE_ETIMEDOUT : FLARE_EUNAVAIL, msg);
    }
    while (c->hhead != NULL) {
        pg_query_t *q = c->hhead;
        c->hhead = q->next;
        if (c->hhead == NULL)
            c->htail = NULL;
        flare__pg_complete_err(c->pw, q, q->timed_out ? FLARE_ETIMEDOUT : FLARE_EUNAVAIL, msg);
    }
    while (c->olen > 0) {
        pg_op_t op = c->ops[c->ohead];
        ring_pop(c);
        if (op.kind == OP_QUERY && op.q != NULL)
            flare__pg_complete_err(c->pw, op.q, op.q->timed_out ? FLARE_ETIMEDOUT : FLARE_EUNAVAIL,
                                   msg);
    }
}

void flare__pg_conn_down(pg_conn_t *c, const char *why)
{
    pg_worker_t *pw = c->pw;
    char msg[PG_MSG_MAX], reason[PG_MSG_MAX];
    trim_copy(reason, sizeof(reason), why != NULL && why[0] != '\0' ? why : "connection lost");
    msg_fmt(msg, sizeof(msg), "database unavailable: %s", reason);
    teardown(c);
    uint64_t lo = pw->db->cfg.reconnect_min_ms, hi = pw->db->cfg.reconnect_max_ms;
    c->backoff = c->backoff == 0 ? lo : (c->backoff * 2 > hi ? hi : c->backoff * 2);
    flare__timer_start(pw->loop, &c->timer, c->backoff);
    if (!c->listen && pw->nup == 0) {
        pw->down = true;
        memcpy(pw->down_msg, msg, sizeof(pw->down_msg));
    }
    fail_ops(c, msg);
    if (pw->down && pw->nup == 0)
        flare__pg_went_down(pw);
}

void flare__pg_conn_close(pg_conn_t *c)
{
    teardown(c);
    fail_ops(c, "database unavailable: the worker is shutting down");
}
