/* The PostgreSQL driver's inside, shared by pg.c (the driver table, the
 * per-worker state, statements, the wait queue, transactions) and pg_conn.c
 * (connecting, the pipeline on the wire, results, timeouts, reconnects).
 *
 * Threads: everything here belongs to one worker and is touched on its
 * thread only, except a pg_job_t's `work` half, which runs on the job pool
 * and reads nothing but the job itself.
 *
 * The pipeline, per connection. The statements between two Syncs are one
 * implicit transaction: a failing one aborts the rest of the segment (they
 * come back PGRES_PIPELINE_ABORTED) and rolls back the effects of those
 * before it. So:
 *   - a read (pg_stmt_t.read: the text is a plain SELECT, see
 *     stmt_reads_only in pg.c) outside a transaction joins the connection's
 *     open segment, with no Sync of its own;
 *   - a write outside a transaction joins it too, as its last statement,
 *     and closes it with a Sync: nothing after it can undo it, and what
 *     came before it only read;
 *   - anything else (statements of a transaction, BEGIN/COMMIT/ROLLBACK,
 *     LISTEN) closes an open segment first and has one of its own;
 *   - the ready callback closes every open segment once per loop iteration
 *     (one Sync, which with libpq 15 is also the one flush).
 * So a batch of N reads issued in one loop iteration leaves in one send
 * and costs the server one transaction and one ReadyForQuery. For that,
 * a statement goes to a connection whose segment is open before any other
 * (pick in pg.c), and the wait queue goes out in large segments: a
 * connection without an open segment takes from it only once it has
 * drained to half of pipeline_depth.
 * A statement that was not first in its segment may come back aborted
 * because an earlier one failed (or an earlier Parse): it was independent,
 * so it is sent again with its own result to give. That needs its
 * parameters after the first send: such a statement keeps a copy in its
 * record (inline up to PG_INLINE bytes) until its result arrives. Sent
 * again, it joins the next segment; aborted a second time, it goes alone,
 * with its own text as an unnamed statement (a name's Parse may sit in a
 * segment still in flight that another statement aborts), which cannot be
 * aborted by anyone else: every statement completes. A Bind refused with
 * 26000 is such an echo too when its Parse was in flight at its send, even
 * if the name has been prepared again by the time its result arrives.
 * An aborted statement behind a failed Parse of its own text reports that
 * Parse's error instead. */
#ifndef FLARE_DATA_PG_INT_H
#define FLARE_DATA_PG_INT_H

#include <libpq-fe.h>
#include <locale.h>
#include <netinet/in.h>

#include "loop/loop.h"
#include "data/db_int.h"

#define PG_NO_STMT UINT32_MAX
#define PG_MSG_MAX 256
#define PG_ADDRS   4
#define PG_INLINE  48 /* parameter bytes kept in the record (/db's id: 10) */

typedef struct pg_query pg_query_t;
typedef struct pg_conn pg_conn_t;
typedef struct pg_worker pg_worker_t;
typedef struct pg_tx pg_tx_t;
typedef struct pg_job pg_job_t;

/* One statement from flare_db_query / tx_query, or one the driver runs
 * itself (BEGIN, COMMIT, ROLLBACK, LISTEN: `sql` set, not prepared).
 * Records are recycled through the worker's free list. */
struct pg_query {
    pg_query_t *next; /* wait queue, deferred list, free list */
    flare_db_fn cb;
    void *ud;
    const char *sql; /* unprepared text (static or owned by pg_db_t), or NULL */
    uint32_t stmt;   /* prepared statement id, PG_NO_STMT with sql */
    uint32_t nparams;
    /* rendered parameters kept while queued, or in flight behind another
     * statement of its segment (it may have to be sent again): `inl` or
     * malloc'd; NULL when none is kept */
    char *params;
    uint64_t t; /* when queued (wait queue) or sent (in flight), loop ms */
    int err;    /* deferred completion */
    const char *msg;
    bool counted;   /* a statement the user asked for: in the statistics */
    bool commit;    /* a COMMIT: the server answering ROLLBACK is an error */
    bool timed_out; /* past query_timeout_ms: a cancel was asked for it */
    bool behind;    /* in flight behind another statement of its segment */
    uint8_t resent; /* times sent again after being aborted */
    char inl[PG_INLINE];
};

/* What a connection has sent and waits the results of, in order. */
enum { OP_PREP, OP_QUERY, OP_SYNC };
typedef struct pg_op {
    uint32_t kind, stmt;
    pg_query_t *q; /* OP_QUERY */
} pg_op_t;

enum { C_IDLE, C_RESOLVING, C_CONNECTING, C_UP, C_BACKOFF };

struct pg_conn {
    pg_worker_t *pw;
    PGconn *pg;
    flare_watch_t *watch;
    int fd;
    int state;
    uint32_t gen;  /* bumped at each teardown: a late job result is ignored */
    bool listen;   /* the worker's LISTEN connection: no queries of the pool */
    bool broken;   /* a send failed: torn down from the ready callback */
    bool reserved; /* kept free of new queries so that a waiting BEGIN gets it */
    bool busy;     /* counted in stats.conns_busy */
    bool ever_up;  /* a later connect counts as a reconnect */
    bool want_write;
    bool need_flush;   /* sent since the last flush: flushed from the ready callback */
    bool seg_open;     /* statements sent since the last Sync: closed by the ready callback */
    bool got_result;   /* the op at the head has had its result (its NULL is next) */
    unsigned inflight; /* OP_QUERY entries in ops */
    unsigned npreps;   /* OP_PREP entries in ops */
    pg_tx_t *tx;       /* the transaction it is pinned to */
    pg_query_t *hhead, *htail; /* held while the pipeline is aborted (pg_conn.c hold) */
    /* a write outside a transaction and its result, given once its Sync
     * has answered: the implicit transaction commits at the Sync, where a
     * deferred constraint or a serialization failure is reported */
    pg_query_t *wq;
    PGresult *wr;
    pg_op_t *ops; /* ring: ohead, olen of ocap (a power of two) */
    uint32_t ohead, olen, ocap;
    uint64_t *prepared;   /* bit per statement id: Parse sent on this connection */
    uint32_t nprepared;   /* words */
    uint64_t backoff;     /* next reconnect delay, ms (0: none yet) */
    flare__timer_t timer; /* connect timeout, reconnect, query timeouts */
    pg_query_t *cancel_q; /* the query a cancel was sent for */
    struct {              /* the last failed Parse: what its followers report */
        uint32_t stmt;
        char sqlstate[6];
        char *msg;
    } prep_err;
    /* resolved on the job pool (up to PG_ADDRS addresses, comma-separated,
     * tried in turn by libpq), "" if not needed; host repeated as many times */
    char hostaddr[PG_ADDRS * INET6_ADDRSTRLEN];
    char hostrep[PG_ADDRS * 257];
};

enum { TX_WAIT, TX_BEGIN, TX_OPEN, TX_ENDING, TX_BROKEN, TX_DONE };

/* A transaction. Freed when both the driver (until it ended) and the
 * owner's cleanup hook (when it has one) have let go: the hook may run
 * after the worker's state is gone (exchanges orphaned at shutdown are
 * released after the modules are disposed). */
struct pg_tx {
    flare_db_tx_t base; /* first: db.c sees this */
    pg_worker_t *pw;    /* NULL once the worker was disposed */
    pg_conn_t *c;       /* pinned connection (NULL while waiting, or lost) */
    int state;
    int refs;
    bool drv_ref;    /* the driver's reference is held */
    bool owner_gone; /* the owner's exchange ended (its hook ran) */
    flare_db_tx_fn begin_cb;
    void *begin_ud;
    flare_db_fn end_cb;
    void *end_ud;
    uint64_t t;           /* queued at */
    pg_tx_t *qnext;       /* wait list */
    pg_tx_t *prev, *next; /* pw->txs */
};

/* Blocking work handed to the job pool: name resolution, cancel requests.
 * Lives until its done half has run, which may be after the worker was
 * disposed (pw NULL then: it only frees itself). */
struct pg_job {
    pg_worker_t *pw;
    pg_job_t *prev, *next; /* pw->jobs */
    pg_conn_t *c;
    uint32_t gen;
    bool cancel;
    PGcancel *pgcancel;
    char host[256];
    char addr[PG_ADDRS * INET6_ADDRSTRLEN];
    unsigned naddr;
    char err[PG_MSG_MAX];
};

typedef struct pg_stmt {
    char *sql;
    size_t len;
    uint64_t hash;
    uint32_t nparams;
    bool read;  /* cannot write (pg_int.h's header): may share a segment */
    Oid *types; /* 17 (bytea) for a parameter first passed as bytes, else 0 */
    char name[12];
} pg_stmt_t;

typedef struct pg_listen {
    unsigned worker;
    char channel[64]; /* lower case, as SQL folds an unquoted name */
    char sql[80];     /* LISTEN "channel" */
    flare_db_notify_fn cb;
    void *ud;
} pg_listen_t;

/* App-wide, read-only while running. */
typedef struct pg_db {
    const char **kw, **val; /* the URL's options (libpq's parse), NULL-terminated */
    unsigned nkw;
    char host[256]; /* a host name to resolve on the job pool, "" when none */
    pg_listen_t *listens;
    unsigned nlistens;
    locale_t c_locale; /* numbers in results are parsed in the C locale */
} pg_db_t;

struct pg_worker {
    flare_db_t *db;
    pg_db_t *pd;
    flare_worker_t *w;
    flare_loop_t *loop;
    flare_db_wstats_t *st;
    pg_conn_t *conns; /* npool, then the LISTEN connection if any */
    unsigned npool, nconns, nup;
    bool down;      /* no connection up and the last attempt failed: fail fast */
    bool disposing; /* no new work */
    char down_msg[PG_MSG_MAX];
    /* statements: ids in order of first use, an open-addressing table */
    pg_stmt_t *stmts;
    uint32_t nstmts, capstmts;
    uint32_t *slots; /* id + 1, 0 empty */
    uint32_t nslots;
    /* the wait queue (queries, transactions waiting for a connection) */
    pg_query_t *qhead, *qtail;
    pg_tx_t *txhead, *txtail;
    unsigned qlen, txlen;
    flare__timer_t qtimer;
    /* completions owed later (never from inside the call that asked) */
    pg_query_t *dhead, *dtail;
    flare_io_t ready_io; /* on the loop's ready list while any is owed */
    pg_query_t *freeq;
    pg_tx_t *txs;
    pg_job_t *jobs;
    /* scratch for one statement's parameters */
    char *scratch;
    size_t scap;
    const char **vals;
    int *lens, *fmts;
    uint32_t capparams;
    const char **ckw, **cval; /* connect options: the URL's plus hostaddr */
};

/* pg.c */
pg_query_t *flare__pg_qalloc(pg_worker_t *pw);
void flare__pg_qfree(pg_worker_t *pw, pg_query_t *q);
void flare__pg_defer(pg_worker_t *pw, pg_query_t *q, int err, const char *msg);
void flare__pg_pump(pg_worker_t *pw);
void flare__pg_went_down(pg_worker_t *pw);
void flare__pg_busy_update(pg_conn_t *c);
void flare__pg_tx_detach_conn(pg_tx_t *tx);
/* Calls q's callback with an error and recycles q (counted if it is). */
void flare__pg_complete_err(pg_worker_t *pw, pg_query_t *q, int err, const char *msg);
/* Grows pw's value/length/format arrays to n parameters. 0 or FLARE_ENOMEM. */
int flare__pg_params_reserve(pg_worker_t *pw, uint32_t n);

/* A rendered parameter: int32 length (-1: NULL), format byte, bytes, NUL. */
#define PG_PARAM_HDR 5

/* pg_conn.c */
void flare__pg_conn_init(pg_conn_t *c, pg_worker_t *pw, bool listen);
/* Sends q on c (params: a rendered block, NULL when none; it may be
 * q->params). 0: q is in c's pipeline; otherwise q was not sent (the caller
 * completes it) and c, if it failed, is marked broken. Never calls a
 * callback. */
int flare__pg_send(pg_conn_t *c, pg_query_t *q, const char *params);
/* Closes c's open segment (its Sync) and flushes: once per loop iteration,
 * from the ready callback. */
void flare__pg_flush(pg_conn_t *c);
/* Closes c (after a failure: why), fails what it had in flight, reconnects
 * later. Calls callbacks: never from inside a call the user made. */
void flare__pg_conn_down(pg_conn_t *c, const char *why);
void flare__pg_conn_close(pg_conn_t *c); /* dispose: fail ops, finish, free */
void flare__pg_job_done(void *ud);
extern const flare_db_res_ops_t flare__pg_res_ops;

static inline uint64_t pg_now(const pg_worker_t *pw)
{
    return pw->loop->now;
}

#endif
