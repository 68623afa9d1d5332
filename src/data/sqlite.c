/* The SQLite driver (docs/data.md, "SQLite"). SQLite blocks, so statements
 * run on a small pool of threads of the driver's own, never on a worker;
 * each result is materialised there into one block and posted back to the
 * worker that asked, through its loop's post queue (as src/jobs.c does).
 *
 * Connections, opened by flare_db_open and closed by flare_app_free (so an
 * in-memory database lives as long as its handle, across runs of the app):
 *   conns[0]     the writer: read-write, WAL, synchronous=NORMAL unless the
 *                URL says ?synchronous=off|full|extra
 *   conns[1..]   cfg.pool_size readers, SQLITE_OPEN_READONLY; none for
 *                sqlite::memory:, where the writer serves everything
 * Threads: min(cfg.threads, connections), started by open, joined by close;
 * each takes a job and a free connection that can run it.
 *
 * This file: the pool, the jobs and the worker side. sqlite_conn.c opens
 * connections and keeps their statement caches; sqlite_res.c builds and
 * reads the result blocks.
 *
 * One mutex (sq->mu) guards the queues, which connection is busy, which
 * transaction holds the writer, and each worker's queued/in-flight counts.
 * A worker takes it once per loop iteration: the statements issued in one
 * iteration wait in ws->pending and go to the queues together from the
 * loop's ready list (flush_cb), with one signal; the reply comes back
 * through the lock-free post queue. Three queues, FIFO each:
 *   rq   statements that only read, as far as we know: the same text was
 *        seen read-only before, or never seen. A free reader takes one,
 *        checks sqlite3_stmt_readonly on its prepared statement, and hands a
 *        writing one over to wq (remembering it for next time)
 *   wq   writing statements and BEGINs: run when the writer is free and no
 *        transaction holds it, so writes are serialised
 *   txq  statements, COMMIT and ROLLBACK of the transaction that holds the
 *        writer, in the order the caller issued them
 *
 * Lifetimes:
 *   job     one malloc on the worker (record, parameters, SQL and the bytes
 *           of text and blob values copied in), freed on the worker after
 *           its callback. A transaction's BEGIN and end are embedded in it.
 *   result  one malloc on the pool thread when the statement has columns
 *           or failed with SQLite's message (none for a plain INSERT),
 *           freed after the callback. Rows are gathered in a scratch each
 *           pool thread keeps, then copied into the block at its size.
 *   ws      the per-worker state: freed by dispose, or after it by the last
 *           reply still in the worker's post queue (those run in the loop's
 *           dispose, on the thread running flare_app_run); `refs` counts
 *           them. Touched by the worker's thread, or by that thread once
 *           the worker thread has been joined: no lock.
 *   tx      freed once ended, with no reply pending and its owner request's
 *           cleanup run (that hook keeps a pointer to it).
 */
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "worker.h"
#include "core/clock.h"
#include "core/core.h"
#include "data/sqlite_int.h"

#define STMT_CACHE_MAX   64         /* prepared statements kept per connection (LRU) */
#define PROGRESS_OPS     4096       /* VM steps between two looks at the clock */
#define SCRATCH_KEEP     (1u << 20) /* a pool thread keeps this much scratch */
#define HINTS            256        /* remembered "this SQL writes" verdicts */
#define MSG_SHUTDOWN     "database: worker shutting down"
#define MSG_QUEUE_FULL   "database: wait queue full (queue_max)"
#define MSG_QUEUE_WAITED "database: waited in the queue past queue_timeout_ms"

enum { J_QUERY, J_BEGIN, J_TXQ, J_END };
enum { C_ANY, C_READ, C_WRITE };
enum { TX_BEGINNING, TX_OPEN, TX_ENDING, TX_ENDED };

typedef struct sq_db sq_db_t;
typedef struct sq_ws sq_ws_t;
typedef struct sq_tx sq_tx_t;

typedef struct job {
    struct job *next; /* in a queue (under mu) or a local list */
    flare_post_node_t reply;
    sq_ws_t *ws;
    sq_tx_t *tx; /* BEGIN, TXQ, END */
    uint8_t kind, cls;
    uint8_t learned; /* C_READ / C_WRITE found by a reader, for the hints */
    bool commit, embedded;
    _Atomic bool cancel; /* dispose: stop it (progress and busy handlers) */
    uint64_t deadline;   /* queue deadline, ms; 0: none */
    union {
        flare_db_fn cb;
        flare_db_tx_fn tcb;
    };
    void *ud;
    const char *sql;
    size_t sqllen;
    uint64_t hash;
    flare_db_val_t *params;
    size_t nparams;
    /* the outcome, written by the pool thread */
    int err, code;
    uint64_t affected;
    sq_res_t *res;   /* NULL: no columns, message in msg */
    const char *msg; /* static; NULL: the error's standard text */
} job_t;

typedef struct jobq {
    job_t *head, *tail;
} jobq_t;

struct sq_db {
    flare_db_t *db;
    bool memory;
    pthread_mutex_t mu;
    pthread_cond_t cv;   /* work for the pool */
    pthread_cond_t idle; /* a job of a closing worker finished */
    jobq_t rq, wq, txq;
    sq_tx_t *writer_tx; /* under mu: the transaction holding the writer */
    bool stop;
    unsigned nconns, nthreads;
    sq_conn_t *conns;
    pthread_t *threads;
    struct {
        uint64_t hash;
        uint8_t cls;
    } hints[HINTS]; /* under mu */
};

struct sq_ws {
    sq_db_t *sq;
    flare_worker_t *w;
    flare_db_wstats_t *st;
    unsigned queued, inflight; /* under mu */
    bool closing;              /* set under mu by dispose */
    jobq_t late;               /* under mu: finished after closing */
    unsigned refs;             /* worker thread: dispose + replies owed */
    bool disposed;
    sq_tx_t *txs;     /* not ended */
    jobq_t pending;   /* worker thread: submitted this loop iteration */
    flare_io_t flush; /* on the loop's ready list while pending has jobs */
};

struct sq_tx {
    flare_db_tx_t pub; /* first */
    sq_tx_t *next, *prev;
    sq_ws_t *ws;
    int state;
    bool owner_hooked; /* the owner's cleanup has not run yet */
    bool abandoned;    /* the owner ended while BEGIN was on its way */
    bool kill;         /* under mu: dispose asks the pool to roll back */
    unsigned pending;  /* jobs whose reply has not run */
    job_t job;         /* BEGIN, then COMMIT / ROLLBACK */
};

/* ---- queues (under mu) ---- */

static void q_push(jobq_t *q, job_t *j)
{
    j->next = NULL;
    if (q->tail != NULL)
        q->tail->next = j;
    else
        q->head = j;
    q->tail = j;
}

static void q_push_front(jobq_t *q, job_t *j)
{
    j->next = q->head;
    q->head = j;
    if (q->tail == NULL)
        q->tail = j;
}

static job_t *q_pop(jobq_t *q)
{
    job_t *j = q->head;
    if (j != NULL) {
        q->head = j->next;
        if (q->head == NULL)
            q->tail = NULL;
        j->next = NULL;
    }
    return j;
}

/* Moves ws's jobs from q to out. */
static void q_take_ws(jobq_t *q, sq_ws_t *ws, jobq_t *out)
{
    jobq_t keep = { 0 };
    job_t *j;
    while ((j = q_pop(q)) != NULL)
        q_push(j->ws == ws ? out : &keep, j);
    *q = keep;
}

/* The figure counts ws->pending too (submit, flush_pending): deltas. */
static void queue_len_add(sq_ws_t *ws, int d)
{
    atomic_fetch_add_explicit(&ws->st->queue_len, (uint64_t)(int64_t)d, memory_order_relaxed);
}

static void set_queued(sq_ws_t *ws, int d)
{
    ws->queued = (unsigned)((int)ws->queued + d);
    queue_len_add(ws, d);
}

static void busy_add(sq_ws_t *ws, int d)
{
    atomic_fetch_add_explicit(&ws->st->conns_busy, (uint64_t)(int64_t)d, memory_order_relaxed);
}

/* A finished job goes back to its worker, or to dispose when it is
 * closing: no post reaches a loop after its worker's dispose. Under mu. */
static void finish(sq_db_t *sq, job_t *j)
{
    sq_ws_t *ws = j->ws;
    if (ws->closing) {
        q_push(&ws->late, j);
        pthread_cond_broadcast(&sq->idle);
    } else {
        flare__loop_post_node(&ws->w->loop, &j->reply);
    }
}

static unsigned hint_slot(uint64_t h)
{
    return (unsigned)(h ^ (h >> 32)) & (HINTS - 1);
}

/* ---- running a statement: on a pool thread holding connection c ---- */

static void set_error(job_t *j, int err, int code, const char *msg)
{
    j->err = err;
    j->code = code;
    j->res = flare__sq_res_build(NULL, 0, 0, 0, msg);
    if (j->res == NULL)
        j->msg = "database: out of memory";
}

/* The outcome of a failed call on c (before sqlite3_reset, which may
 * change the connection's error): FLARE_EDB with SQLite's extended code and
 * message, FLARE_ETIMEDOUT past the query deadline, FLARE_EUNAVAIL when the
 * database stayed locked past the busy timeout or the worker is closing.
 * `why`: the driver's own message (rc is then its code). */
static void fail_stmt(const sq_db_t *sq, sq_conn_t *c, job_t *j, int rc, const char *why)
{
    char buf[96];
    int code = why != NULL ? rc : sqlite3_extended_errcode(c->db);
    const char *msg = why != NULL ? why : sqlite3_errmsg(c->db);
    int err = FLARE_EDB;
    if (atomic_load_explicit(&j->cancel, memory_order_relaxed)) {
        err = FLARE_EUNAVAIL;
        msg = MSG_SHUTDOWN;
    } else if (c->timed_out) {
        err = FLARE_ETIMEDOUT;
        snprintf(buf, sizeof(buf), "database: query ran past query_timeout_ms (%u ms)",
                 sq->db->cfg.query_timeout_ms);
        msg = buf;
    } else if ((code & 0xff) == SQLITE_BUSY) {
        err = FLARE_EUNAVAIL;
    }
    set_error(j, err, code, msg);
}

static int bind_params(const sq_stmt_t *s, const job_t *j, char *buf, size_t n, const char **why)
{
    if (j->nparams != s->maxpos) {
        snprintf(buf, n, "the statement takes %u parameters, %zu given", s->maxpos, j->nparams);
        *why = buf;
        return SQLITE_RANGE;
    }
    for (unsigned k = 1; k <= s->nmap; k++) {
        unsigned pos = s->map[k - 1];
        if (pos == 0) {
            snprintf(buf, n, "parameter %.32s: use $1, $2, ...",
                     sqlite3_bind_parameter_name(s->st, (int)k));
            *why = buf;
            return SQLITE_RANGE;
        }
        const flare_db_val_t *v = &j->params[pos - 1];
        int rc;
        switch (v->type) {
        case FLARE_DB_INT64:
            rc = sqlite3_bind_int64(s->st, (int)k, v->i);
            break;
        case FLARE_DB_DOUBLE:
            rc = sqlite3_bind_double(s->st, (int)k, v->d);
            break;
        case FLARE_DB_TEXT:
            rc = sqlite3_bind_text64(s->st, (int)k, v->s.len > 0 ? v->s.ptr : "", v->s.len,
                                     SQLITE_STATIC, SQLITE_UTF8);
            break;
        case FLARE_DB_BYTES:
            /* a NULL pointer would bind NULL, not an empty blob */
            rc = v->s.len > 0
                     ? sqlite3_bind_blob64(s->st, (int)k, v->s.ptr, v->s.len, SQLITE_STATIC)
                     : sqlite3_bind_zeroblob(s->st, (int)k, 0);
            break;
        default:
            rc = sqlite3_bind_null(s->st, (int)k);
            break;
        }
        if (rc != SQLITE_OK)
            return rc;
    }
    return SQLITE_OK;
}

/* Runs j on c and records its outcome in j. Returns true, without running
 * it, when c is a reader and the statement writes: it belongs on the
 * writer. */
static bool run(const sq_db_t *sq, sq_conn_t *c, job_t *j, scratch_t *sc)
{
    char buf[128];
    const char *why = NULL;
    sq_stmt_t *s;
    c->deadline = flare__now_ms() + sq->db->cfg.query_timeout_ms;
    c->timed_out = false;
    c->cancel = j->kind == J_END ? NULL : &j->cancel; /* an end always runs */
    int rc = flare__sq_stmt_get(c, j->sql, j->sqllen, j->hash, &s, &why);
    if (rc != SQLITE_OK) {
        fail_stmt(sq, c, j, rc, why);
        return false;
    }
    if (j->kind == J_QUERY || j->kind == J_TXQ)
        j->learned = s->ro ? C_READ : C_WRITE;
    if (!c->writer && !s->ro)
        return true;
    size_t nrows = 0, ncols = 0;
    int64_t before = sqlite3_total_changes64(c->db);
    rc = bind_params(s, j, buf, sizeof(buf), &why);
    if (rc == SQLITE_OK)
        rc = flare__sq_step_all(s->st, sc, &nrows, &ncols, &why);
    if (rc == SQLITE_DONE) {
        j->err = j->code = 0;
        if (sqlite3_total_changes64(c->db) != before)
            j->affected = (uint64_t)sqlite3_changes64(c->db);
        if (ncols > 0) {
            j->res = flare__sq_res_build(sc, nrows, ncols, j->affected, "");
            if (j->res == NULL)
                set_error(j, FLARE_EDB, SQLITE_NOMEM, "database: out of memory for the result");
        }
    } else {
        fail_stmt(sq, c, j, rc, why);
    }
    sqlite3_reset(s->st);
    sqlite3_clear_bindings(s->st); /* they point into j, freed soon */
    flare__sq_scratch_trim(sc);
    if (sqlite3_get_autocommit(c->db) == 0 && (j->kind == J_QUERY || j->kind == J_END)) {
        /* a statement outside flare_db_begin opened a transaction (BEGIN
         * passes for read-only, so a reader could run it), or COMMIT failed
         * and left this one open: end it, or the connection stays stuck */
        sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
        if (j->kind == J_QUERY && j->err == 0) {
            flare__sq_res_free(j->res);
            set_error(j, FLARE_EDB, SQLITE_MISUSE,
                      "transaction statements outside flare_db_begin (rolled back)");
        }
    }
    return false;
}

/* ---- the pool ---- */

/* The first job a free connection can take, with that connection. */
static job_t *pick(sq_db_t *sq, sq_conn_t **out)
{
    sq_conn_t *wr = &sq->conns[0];
    job_t *j = NULL;
    sq_conn_t *c = NULL;
    if (!wr->busy) {
        if (sq->writer_tx != NULL)
            j = q_pop(&sq->txq);
        else
            j = q_pop(&sq->wq);
        c = wr;
    }
    if (j == NULL && sq->rq.head != NULL) {
        for (unsigned i = 1; i < sq->nconns && j == NULL; i++) {
            if (!sq->conns[i].busy) {
                c = &sq->conns[i];
                j = q_pop(&sq->rq);
            }
        }
        /* a statement never seen before need not wait for a reader (all
         * busy with long reads) to be told where it goes: an idle writer
         * runs anything */
        if (j == NULL && !wr->busy && sq->writer_tx == NULL && sq->rq.head->cls == C_ANY) {
            c = wr;
            j = q_pop(&sq->rq);
        }
    }
    if (j == NULL)
        return NULL;
    c->busy = true;
    c->job = j;
    set_queued(j->ws, -1);
    j->ws->inflight++;
    if (j->kind == J_QUERY || j->kind == J_BEGIN)
        busy_add(j->ws, 1);
    *out = c;
    return j;
}

/* Fails the jobs at the head of q that waited past their deadline; *wake
 * gets the nearest deadline still ahead. */
static void expire(sq_db_t *sq, jobq_t *q, uint64_t now, uint64_t *wake)
{
    while (q->head != NULL && q->head->deadline != 0) {
        if (q->head->deadline > now) {
            if (*wake == 0 || q->head->deadline < *wake)
                *wake = q->head->deadline;
            return;
        }
        job_t *j = q_pop(q);
        set_queued(j->ws, -1);
        j->err = FLARE_EUNAVAIL;
        j->msg = MSG_QUEUE_WAITED;
        finish(sq, j);
    }
}

static void complete(sq_db_t *sq, sq_conn_t *c, job_t *j, bool to_writer)
{
    sq_ws_t *ws = j->ws;
    c->busy = false;
    c->job = NULL;
    ws->inflight--;
    if (j->learned != C_ANY) {
        unsigned h = hint_slot(j->hash);
        sq->hints[h].hash = j->hash;
        sq->hints[h].cls = j->learned;
    }
    switch (j->kind) {
    case J_QUERY:
        busy_add(ws, -1);
        break;
    case J_BEGIN:
        if (j->err == 0)
            sq->writer_tx = j->tx; /* stays busy until the end */
        else
            busy_add(ws, -1);
        break;
    case J_END:
        sq->writer_tx = NULL;
        busy_add(ws, -1);
        break;
    default:
        break;
    }
    if (to_writer && !ws->closing) {
        j->cls = C_WRITE;
        j->learned = C_ANY;
        q_push_front(&sq->wq, j);
        set_queued(ws, 1);
        return;
    }
    if (to_writer) {
        j->err = FLARE_EUNAVAIL;
        j->msg = MSG_SHUTDOWN;
    }
    finish(sq, j);
}

static void rollback_killed(sq_db_t *sq)
{
    sq_tx_t *tx = sq->writer_tx;
    sq_conn_t *wr = &sq->conns[0];
    wr->busy = true;
    pthread_mutex_unlock(&sq->mu);
    wr->cancel = NULL;
    wr->timed_out = false;
    wr->deadline = flare__now_ms() + sq->db->cfg.query_timeout_ms;
    sqlite3_exec(wr->db, "ROLLBACK", NULL, NULL, NULL);
    pthread_mutex_lock(&sq->mu);
    wr->busy = false;
    sq->writer_tx = NULL;
    busy_add(tx->ws, -1);
    pthread_cond_broadcast(&sq->idle);
}

static bool queues_empty(const sq_db_t *sq)
{
    return sq->rq.head == NULL && sq->wq.head == NULL && sq->txq.head == NULL;
}

static void *pool_main(void *arg)
{
    sq_db_t *sq = arg;
    scratch_t sc = { 0 };
    pthread_mutex_lock(&sq->mu);
    while (!sq->stop) {
        if (sq->writer_tx != NULL && sq->writer_tx->kill && !sq->conns[0].busy) {
            rollback_killed(sq);
            continue;
        }
        uint64_t wake = 0, now = flare__now_ms();
        expire(sq, &sq->rq, now, &wake);
        expire(sq, &sq->wq, now, &wake);
        sq_conn_t *c;
        job_t *j = pick(sq, &c);
        if (j == NULL) {
            if (wake == 0) {
                pthread_cond_wait(&sq->cv, &sq->mu);
            } else {
                /* the deadlines are on the coarse clock, which lags the
                 * precise one by up to a tick: wake a tick late, not early
                 * and then spin */
                wake += 5;
                struct timespec ts = { (time_t)(wake / 1000), (long)(wake % 1000) * 1000000L };
                pthread_cond_timedwait(&sq->cv, &sq->mu, &ts);
            }
            continue;
        }
        if (!queues_empty(sq))
            pthread_cond_signal(&sq->cv); /* another free connection may take one */
        pthread_mutex_unlock(&sq->mu);
        bool to_writer = run(sq, c, j, &sc);
        pthread_mutex_lock(&sq->mu);
        complete(sq, c, j, to_writer);
    }
    pthread_mutex_unlock(&sq->mu);
    free(sc.cells);
    free(sc.bytes);
    return NULL;
}

/* ---- the worker side ---- */

static void ws_unref(sq_ws_t *ws)
{
    if (--ws->refs == 0 && ws->disposed)
        free(ws);
}

static void tx_maybe_free(sq_tx_t *tx)
{
    if (tx->state == TX_ENDED && tx->pending == 0 && !tx->owner_hooked)
        free(tx);
}

/* The transaction gives the writer back (or never got it): off the list of
 * open ones. */
static void tx_set_ended(sq_tx_t *tx)
{
    if (tx->state == TX_ENDED)
        return;
    tx->state = TX_ENDED;
    if (tx->prev != NULL)
        tx->prev->next = tx->next;
    else
        tx->ws->txs = tx->next;
    if (tx->next != NULL)
        tx->next->prev = tx->prev;
    tx->next = tx->prev = NULL;
}

static void job_reply(void *ud);

/* Queues j (under mu; the worker's thread) or, past queue_max, returns
 * false: j then fails on this worker's next iteration. */
static bool enqueue(sq_db_t *sq, sq_ws_t *ws, job_t *j, uint64_t now)
{
    if (j->kind != J_END && ws->queued >= sq->db->cfg.queue_max)
        return false;
    jobq_t *q;
    if (j->kind == J_TXQ || j->kind == J_END) {
        q = &sq->txq;
    } else {
        j->deadline = now + sq->db->cfg.queue_timeout_ms;
        if (j->kind == J_BEGIN || sq->memory) {
            q = &sq->wq;
        } else {
            unsigned h = hint_slot(j->hash);
            j->cls = sq->hints[h].hash == j->hash ? sq->hints[h].cls : C_ANY;
            q = j->cls == C_WRITE ? &sq->wq : &sq->rq;
        }
    }
    q_push(q, j);
    set_queued(ws, 1);
    return true;
}

/* The jobs submitted since the last flush go to the pool's queues: one
 * lock, one signal (a pool thread that takes one signals the next while
 * work is left, pool_main). The ones past queue_max fail on the next
 * iteration, in order: callbacks never run inside the call. */
static void flush_pending(sq_ws_t *ws)
{
    sq_db_t *sq = ws->sq;
    jobq_t list = ws->pending, full = { 0 };
    ws->pending = (jobq_t){ 0 };
    if (list.head == NULL)
        return;
    uint64_t now = flare__now_ms();
    job_t *j;
    int n = 0;
    pthread_mutex_lock(&sq->mu);
    while ((j = q_pop(&list)) != NULL) {
        n++;
        if (!enqueue(sq, ws, j, now))
            q_push(&full, j);
    }
    queue_len_add(ws, -n); /* counted by submit; the queued ones again by enqueue */
    pthread_cond_signal(&sq->cv);
    pthread_mutex_unlock(&sq->mu);
    while ((j = q_pop(&full)) != NULL) {
        j->err = FLARE_EUNAVAIL;
        j->msg = MSG_QUEUE_FULL;
        flare__loop_post_node(&ws->w->loop, &j->reply);
    }
}

static void flush_cb(flare_loop_t *l, flare_io_t *io, uint32_t events)
{
    (void)l, (void)events;
    flush_pending((sq_ws_t *)((char *)io - offsetof(sq_ws_t, flush)));
}

/* Queues j for the pool at the end of this loop iteration (flush_cb). */
static void submit(sq_ws_t *ws, job_t *j)
{
    ws->refs++;
    if (j->tx != NULL)
        j->tx->pending++;
    j->reply = (flare_post_node_t){ .fn = job_reply, .ud = j };
    q_push(&ws->pending, j);
    queue_len_add(ws, 1);
    flare__loop_ready(&ws->w->loop, &ws->flush);
}

static void tx_submit_end(sq_tx_t *tx, bool commit, flare_db_fn cb, void *ud)
{
    job_t *j = &tx->job;
    *j = (job_t){ .ws = tx->ws,
                  .tx = tx,
                  .kind = J_END,
                  .commit = commit,
                  .embedded = true,
                  .cb = cb,
                  .ud = ud,
                  .sql = commit ? "COMMIT" : "ROLLBACK" };
    j->sqllen = strlen(j->sql);
    j->hash = flare__hash(j->sql, j->sqllen);
    tx->state = TX_ENDING;
    submit(tx->ws, j);
}

/* A finished job on its worker (or, for a reply posted just before the
 * worker stopped, on the thread disposing its loop): the callback, then
 * the memory. j is not touched after a callback: the user may end the
 * transaction an embedded job belongs to from inside it. */
static void job_reply(void *ud)
{
    job_t *j = ud;
    sq_ws_t *ws = j->ws;
    sq_tx_t *tx = j->tx;
    sq_res_t *res = j->res;
    int kind = j->kind;
    flare_db_fn cb = j->cb;
    flare_db_tx_fn tcb = j->tcb;
    void *cud = j->ud;
    flare_db_res_t r = {
        .err = j->err,
        .code = j->code,
        .sqlstate = "",
        .message = res != NULL      ? res->msg
                   : j->msg != NULL ? j->msg
                                    : "",
        .affected = j->affected,
    };
    if (res != NULL && res->ncols > 0) {
        r.nrows = res->nrows;
        r.ncols = res->ncols;
        r.ops = &flare__sq_res_ops;
        r.impl = res;
    }
    if (!j->embedded)
        free(j);
    flare__db_stat_done(ws->st, r.err);
    switch (kind) {
    case J_QUERY:
    case J_TXQ:
        cb(&r, cud);
        break;
    case J_BEGIN:
        if (r.err == 0 && (tx->state != TX_BEGINNING || tx->abandoned)) {
            /* the worker is closing (dispose rolled it back) or the owner
             * request ended meanwhile (roll back now) */
            if (tx->state == TX_BEGINNING)
                tx_submit_end(tx, false, NULL, NULL);
            r = (flare_db_res_t){ .err = FLARE_EUNAVAIL,
                                  .sqlstate = "",
                                  .message = tx->abandoned ? "database: the request ended first"
                                                           : MSG_SHUTDOWN };
            tcb(NULL, &r, cud);
        } else if (r.err == 0) {
            tx->state = TX_OPEN;
            tcb(&tx->pub, &r, cud);
        } else {
            tx_set_ended(tx);
            tcb(NULL, &r, cud);
        }
        break;
    case J_END:
        tx_set_ended(tx);
        if (cb != NULL)
            cb(&r, cud);
        break;
    default:
        break;
    }
    flare__sq_res_free(res);
    if (tx != NULL) {
        tx->pending--;
        tx_maybe_free(tx);
    }
    ws_unref(ws);
}

/* One allocation: the record, the parameters, the SQL and the bytes of the
 * text and blob values (the caller's memory is only valid during the call). */
static job_t *job_new(const char *sql, const flare_db_val_t *params, size_t n)
{
    size_t sqllen = strlen(sql), extra = sqllen + 1;
    for (size_t i = 0; i < n; i++) {
        if (params[i].type == FLARE_DB_TEXT || params[i].type == FLARE_DB_BYTES) {
            if (params[i].s.len > SIZE_MAX / 2 - extra)
                return NULL;
            extra += params[i].s.len;
        }
    }
    size_t size = sizeof(job_t) + n * sizeof(flare_db_val_t) + extra;
    job_t *j = malloc(size);
    if (j == NULL)
        return NULL;
    *j = (job_t){ .nparams = n, .sqllen = sqllen };
    j->params = (flare_db_val_t *)(void *)(j + 1);
    char *p = (char *)(j->params + n);
    memcpy(p, sql, sqllen + 1);
    j->sql = p;
    j->hash = flare__hash(sql, sqllen);
    p += sqllen + 1;
    for (size_t i = 0; i < n; i++) {
        j->params[i] = params[i];
        if (params[i].type == FLARE_DB_TEXT || params[i].type == FLARE_DB_BYTES) {
            if (params[i].s.len > 0)
                memcpy(p, params[i].s.ptr, params[i].s.len);
            j->params[i].s.ptr = p;
            p += params[i].s.len;
        }
    }
    return j;
}

static int query(void *wsp, flare_db_tx_t *ptx, const char *sql, const flare_db_val_t *params,
                 size_t nparams, flare_db_fn cb, void *ud)
{
    sq_tx_t *tx = (sq_tx_t *)ptx;
    sq_ws_t *ws = tx != NULL ? tx->ws : wsp;
    if (tx != NULL && tx->state != TX_OPEN)
        return FLARE_ESTATE;
    if (ws->closing)
        return FLARE_ESTATE;
    job_t *j = job_new(sql, params, nparams);
    if (j == NULL)
        return FLARE_ENOMEM;
    j->ws = ws;
    j->tx = tx;
    j->kind = tx != NULL ? J_TXQ : J_QUERY;
    j->cb = cb;
    j->ud = ud;
    submit(ws, j);
    return 0;
}

/* The owner request's exchange ended: roll back what is still open. */
static void tx_owner_gone(void *ud)
{
    sq_tx_t *tx = ud;
    tx->owner_hooked = false;
    if (tx->state == TX_OPEN)
        tx_submit_end(tx, false, NULL, NULL);
    else if (tx->state == TX_BEGINNING)
        tx->abandoned = true; /* rolled back when BEGIN comes back */
    tx_maybe_free(tx);
}

static int begin(void *wsp, flare_req_t *owner, flare_db_tx_fn cb, void *ud)
{
    sq_ws_t *ws = wsp;
    if (ws->closing)
        return FLARE_ESTATE;
    sq_tx_t *tx = calloc(1, sizeof(*tx));
    if (tx == NULL)
        return FLARE_ENOMEM;
    tx->pub.db = ws->sq->db;
    tx->ws = ws;
    if (owner != NULL) {
        int rc = flare_req_on_cleanup(owner, tx_owner_gone, tx);
        if (rc != 0) {
            free(tx);
            return rc;
        }
        tx->owner_hooked = true;
    }
    tx->state = TX_BEGINNING;
    tx->next = ws->txs;
    if (ws->txs != NULL)
        ws->txs->prev = tx;
    ws->txs = tx;
    job_t *j = &tx->job;
    /* IMMEDIATE: the write lock now, so a later write in the transaction
     * cannot fail with SQLITE_BUSY against another process */
    *j = (job_t){ .ws = ws,
                  .tx = tx,
                  .kind = J_BEGIN,
                  .embedded = true,
                  .tcb = cb,
                  .ud = ud,
                  .sql = "BEGIN IMMEDIATE" };
    j->sqllen = strlen(j->sql);
    j->hash = flare__hash(j->sql, j->sqllen);
    submit(ws, j);
    return 0;
}

static int tx_end(flare_db_tx_t *ptx, bool commit, flare_db_fn cb, void *ud)
{
    sq_tx_t *tx = (sq_tx_t *)ptx;
    if (tx->state != TX_OPEN)
        return FLARE_ESTATE;
    tx_submit_end(tx, commit, cb, ud);
    return 0;
}

static int winit(flare_db_t *db, flare_worker_t *w, flare_db_wstats_t *st, void **out)
{
    sq_db_t *sq = db->impl;
    sq_ws_t *ws = calloc(1, sizeof(*ws));
    if (ws == NULL)
        return flare__fail(FLARE_ENOMEM, 0, "sqlite: out of memory");
    *ws = (sq_ws_t){ .sq = sq, .w = w, .st = st, .refs = 1 };
    ws->flush = (flare_io_t){ .fd = -1, .cb = flush_cb };
    /* the connections are the app's, not a worker's: counted once */
    if (flare_worker_id(w) == 0)
        atomic_store_explicit(&st->conns_open, sq->nconns, memory_order_relaxed);
    *out = ws;
    return 0;
}

/* The worker's loop has ended. Its queued jobs fail with FLARE_EUNAVAIL,
 * the running ones are stopped (progress handler) and waited for, the
 * transactions holding the writer are rolled back by the pool; then the
 * callbacks of all of these run here. Replies posted before are still in
 * the loop's queue: they run when the loop is disposed, and keep ws alive
 * until then. */
static void wdispose(flare_db_t *db, flare_worker_t *w, void *p)
{
    (void)w;
    sq_db_t *sq = db->impl;
    sq_ws_t *ws = p;
    jobq_t dead = { 0 }, fresh = ws->pending; /* fresh: never queued */
    ws->pending = (jobq_t){ 0 };
    if (ws->flush.ready_next != NULL) {
        /* still on the loop's list (submitted after its last iteration) */
        flare_io_t **pp = &ws->w->loop.ready;
        while (*pp != NULL && *pp != FLARE__IO_READY_END && *pp != &ws->flush)
            pp = &(*pp)->ready_next;
        if (*pp == &ws->flush)
            *pp = ws->flush.ready_next;
        ws->flush.ready_next = NULL;
    }
    pthread_mutex_lock(&sq->mu);
    ws->closing = true;
    q_take_ws(&sq->rq, ws, &dead);
    q_take_ws(&sq->wq, ws, &dead);
    q_take_ws(&sq->txq, ws, &dead);
    for (job_t *f; (f = q_pop(&fresh)) != NULL;)
        q_push(&dead, f);
    ws->queued = 0;
    atomic_store_explicit(&ws->st->queue_len, 0, memory_order_relaxed);
    for (unsigned i = 0; i < sq->nconns; i++) {
        job_t *j = sq->conns[i].job;
        if (j != NULL && j->ws == ws && j->kind != J_END) /* an end always runs */
            atomic_store_explicit(&j->cancel, true, memory_order_relaxed);
    }
    while (ws->inflight > 0)
        pthread_cond_wait(&sq->idle, &sq->mu);
    if (sq->writer_tx != NULL && sq->writer_tx->ws == ws) {
        sq->writer_tx->kill = true;
        pthread_cond_broadcast(&sq->cv);
        while (sq->writer_tx != NULL && sq->writer_tx->ws == ws)
            pthread_cond_wait(&sq->idle, &sq->mu);
    }
    jobq_t late = ws->late;
    ws->late = (jobq_t){ 0 };
    pthread_mutex_unlock(&sq->mu);
    while (ws->txs != NULL) {
        sq_tx_t *tx = ws->txs;
        tx_set_ended(tx);
        tx_maybe_free(tx); /* else by its last reply, or its owner's cleanup */
    }
    job_t *j;
    while ((j = q_pop(&dead)) != NULL) {
        j->err = FLARE_EUNAVAIL;
        j->msg = MSG_SHUTDOWN;
        job_reply(j);
    }
    while ((j = q_pop(&late)) != NULL)
        job_reply(j);
    ws->disposed = true;
    ws_unref(ws);
}

static void sq_free(sq_db_t *sq)
{
    for (unsigned i = 0; i < sq->nconns; i++)
        if (sq->conns[i].db != NULL)
            flare__sq_conn_close(&sq->conns[i]);
    free(sq->conns);
    free(sq->threads);
    free(sq);
}

static void close_(flare_db_t *db)
{
    sq_db_t *sq = db->impl;
    if (sq == NULL)
        return;
    pthread_mutex_lock(&sq->mu);
    sq->stop = true;
    pthread_cond_broadcast(&sq->cv);
    pthread_mutex_unlock(&sq->mu);
    for (unsigned i = 0; i < sq->nthreads; i++)
        pthread_join(sq->threads[i], NULL);
    pthread_cond_destroy(&sq->cv);
    pthread_cond_destroy(&sq->idle);
    pthread_mutex_destroy(&sq->mu);
    sq_free(sq);
    db->impl = NULL;
}

static int sync_init(sq_db_t *sq)
{
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0)
        return -1;
    /* the queue deadlines are monotonic milliseconds */
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int e = pthread_mutex_init(&sq->mu, NULL);
    if (e == 0 && (e = pthread_cond_init(&sq->cv, &ca)) != 0)
        pthread_mutex_destroy(&sq->mu);
    if (e == 0 && (e = pthread_cond_init(&sq->idle, NULL)) != 0) {
        pthread_cond_destroy(&sq->cv);
        pthread_mutex_destroy(&sq->mu);
    }
    pthread_condattr_destroy(&ca);
    return e;
}

static int open_(flare_db_t *db, const char *url)
{
    char *path;
    const char *sync;
    int rc = flare__sq_url(url, &path, &sync);
    if (rc != 0)
        return rc;
    sq_db_t *sq = calloc(1, sizeof(*sq));
    if (sq == NULL) {
        free(path);
        return flare__fail(FLARE_ENOMEM, 0, "sqlite: out of memory");
    }
    sq->db = db;
    sq->memory = strcmp(path, ":memory:") == 0;
    unsigned n = sq->memory ? 1 : 1 + db->cfg.pool_size;
    sq->conns = calloc(n, sizeof(*sq->conns));
    unsigned nthreads = db->cfg.threads < n ? db->cfg.threads : n;
    sq->threads = calloc(nthreads, sizeof(*sq->threads));
    if (sq->conns == NULL || sq->threads == NULL) {
        free(path);
        sq_free(sq);
        return flare__fail(FLARE_ENOMEM, 0, "sqlite: out of memory");
    }
    for (sq->nconns = 0; sq->nconns < n; sq->nconns++) {
        rc = flare__sq_conn_open(&sq->conns[sq->nconns], path, sq->nconns == 0, sq->memory,
                                 db->cfg.busy_timeout_ms, sync);
        if (rc != 0) {
            free(path);
            sq_free(sq);
            return rc;
        }
    }
    free(path);
    int e = sync_init(sq);
    if (e != 0) {
        sq_free(sq);
        return flare__fail(FLARE_ESYS, e, "sqlite: pthread_mutex_init");
    }
    db->impl = sq;
    /* the pool takes no signal: the app's signalfd and handler get them */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    for (unsigned i = 0; i < nthreads; i++) {
        e = pthread_create(&sq->threads[i], NULL, pool_main, sq);
        if (e != 0)
            break;
        sq->nthreads++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (e != 0) {
        unsigned started = sq->nthreads;
        close_(db);
        return flare__fail(FLARE_ETHREAD, e, "sqlite: pthread_create (pool thread %u of %u)",
                           started, nthreads);
    }
    return 0;
}

/* flare_db_exec_setup: on the writer, on the caller's thread, the app not
 * running; under mu with the writer marked busy, so a pool thread never
 * shares the connection (none has work before the run anyway). */
static int exec_setup(flare_db_t *db, const char *sql)
{
    sq_db_t *sq = db->impl;
    sq_conn_t *c = &sq->conns[0];
    pthread_mutex_lock(&sq->mu);
    bool busy = c->busy || sq->writer_tx != NULL;
    if (!busy)
        c->busy = true;
    pthread_mutex_unlock(&sq->mu);
    if (busy)
        return flare__fail(FLARE_ESTATE, 0, "flare_db_exec_setup: the writer is in use");
    char *msg = NULL;
    int rc = sqlite3_exec(c->db, sql, NULL, NULL, &msg);
    int ext = sqlite3_extended_errcode(c->db);
    pthread_mutex_lock(&sq->mu);
    c->busy = false;
    pthread_mutex_unlock(&sq->mu);
    if (rc != SQLITE_OK) {
        int r = flare__fail(FLARE_EDB, 0, "sqlite: %s (extended code %d)",
                            msg != NULL ? msg : sqlite3_errstr(rc), ext);
        sqlite3_free(msg);
        return r;
    }
    return 0;
}

const flare_db_driver_t flare__db_sqlite = {
    .name = "sqlite",
    .open = open_,
    .close = close_,
    .worker_init = winit,
    .worker_dispose = wdispose,
    .query = query,
    .begin = begin,
    .tx_end = tx_end,
    .exec_setup = exec_setup,
    .listen = NULL, /* no LISTEN/NOTIFY: flare_db_listen answers FLARE_EINVAL */
};
