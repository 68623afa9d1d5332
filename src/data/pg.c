/* The PostgreSQL driver: the URL, the per-worker state, statements and
 * their parameters, the wait queue, deferred completions, transactions and
 * LISTEN registrations. The wire side (connections, the pipeline, results,
 * timeouts) is pg_conn.c; pg_int.h says how the two fit. */
#include <arpa/inet.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker.h"
#include "core/core.h"
#include "data/pg_int.h"

static const char msg_qfull[] = "database unavailable: the wait queue is full";
static const char msg_qtimeout[] =
    "database unavailable: no connection was free within queue_timeout_ms";
static const char msg_nul[] = "text parameter contains a NUL byte";
static const char msg_nomem[] = "database unavailable: out of memory";
static const char msg_ended[] =
    "database unavailable: the request ended before the transaction began";

/* ---- opening ---- */

static void pd_free(pg_db_t *pd)
{
    if (pd == NULL)
        return;
    for (unsigned i = 0; i < pd->nkw; i++) {
        free((char *)pd->kw[i]);
        free((char *)pd->val[i]);
    }
    free(pd->kw);
    free(pd->val);
    free(pd->listens);
    if (pd->c_locale != (locale_t)0)
        freelocale(pd->c_locale);
    free(pd);
}

static bool numeric_host(const char *h)
{
    unsigned char buf[sizeof(struct in6_addr)];
    return inet_pton(AF_INET, h, buf) == 1 || inet_pton(AF_INET6, h, buf) == 1;
}

static int open_(flare_db_t *db, const char *url)
{
    char *err = NULL;
    PQconninfoOption *opts = PQconninfoParse(url, &err);
    if (opts == NULL) {
        int rc;
        if (err == NULL)
            return flare__fail(FLARE_ENOMEM, 0, "postgresql: out of memory parsing the URL");
        size_t n = strlen(err);
        while (n > 0 && (err[n - 1] == '\n' || err[n - 1] == ' '))
            err[--n] = '\0';
        rc = flare__fail(FLARE_EINVAL, 0, "postgresql URL: %s", err);
        PQfreemem(err);
        return rc;
    }
    pg_db_t *pd = calloc(1, sizeof(*pd));
    if (pd == NULL)
        goto nomem;
    unsigned n = 0;
    for (PQconninfoOption *o = opts; o->keyword != NULL; o++)
        n += o->val != NULL;
    pd->kw = calloc(n + 1, sizeof(*pd->kw));
    pd->val = calloc(n + 1, sizeof(*pd->val));
    pd->c_locale = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
    if (pd->kw == NULL || pd->val == NULL || pd->c_locale == (locale_t)0)
        goto nomem;
    const char *host = NULL, *hostaddr = NULL;
    for (PQconninfoOption *o = opts; o->keyword != NULL; o++) {
        if (o->val == NULL)
            continue;
        char *k = strdup(o->keyword), *v = strdup(o->val);
        pd->kw[pd->nkw] = k;
        pd->val[pd->nkw] = v;
        pd->nkw++;
        if (k == NULL || v == NULL)
            goto nomem;
        if (strcmp(k, "host") == 0)
            host = v;
        else if (strcmp(k, "hostaddr") == 0)
            hostaddr = v;
    }
    PQconninfoFree(opts);
    opts = NULL;
    if ((host != NULL && strchr(host, ',') != NULL) ||
        (hostaddr != NULL && strchr(hostaddr, ',') != NULL)) {
        pd_free(pd);
        return flare__fail(FLARE_EINVAL, 0, "postgresql URL: one host only (no host list)");
    }
    /* a name (not a socket directory, not an address, no hostaddr given)
     * is resolved on the job pool before each connect */
    if (hostaddr == NULL && host != NULL && host[0] != '\0' && host[0] != '/' && host[0] != '@' &&
        !numeric_host(host)) {
        if (strlen(host) >= sizeof(pd->host)) {
            pd_free(pd);
            return flare__fail(FLARE_EINVAL, 0, "postgresql URL: host name too long");
        }
        strcpy(pd->host, host);
    }
    db->impl = pd;
    return 0;
nomem:
    if (opts != NULL)
        PQconninfoFree(opts);
    pd_free(pd);
    return flare__fail(FLARE_ENOMEM, 0, "postgresql: out of memory");
}

/* flare_db_exec_setup: a blocking connection of its own, on the caller's
 * thread (never a worker: flare_db_exec_setup refuses a running app), so
 * libpq may resolve the name itself here. */
static int exec_setup(flare_db_t *db, const char *sql)
{
    pg_db_t *pd = db->impl;
    PGconn *pg = PQconnectdbParams(pd->kw, pd->val, 0);
    if (pg == NULL)
        return flare__fail(FLARE_ENOMEM, 0, "postgresql: out of memory");
    int rc = 0;
    if (PQstatus(pg) != CONNECTION_OK) {
        rc = flare__fail(FLARE_EUNAVAIL, 0, "postgresql: cannot connect: %s", PQerrorMessage(pg));
    } else {
        PGresult *res = PQexec(pg, sql);
        ExecStatusType st = PQresultStatus(res);
        if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
            const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
            rc = flare__fail(FLARE_EDB, 0, "postgresql: %s (SQLSTATE %s)",
                             PQresultErrorMessage(res), state != NULL ? state : "none");
        }
        PQclear(res);
    }
    PQfinish(pg);
    return rc;
}

static void close_(flare_db_t *db)
{
    pd_free(db->impl);
    db->impl = NULL;
}

static int listen_(flare_db_t *db, unsigned worker, const char *channel, flare_db_notify_fn cb,
                   void *ud)
{
    pg_db_t *pd = db->impl;
    pg_listen_t *l = realloc(pd->listens, (pd->nlistens + 1) * sizeof(*l));
    if (l == NULL)
        return flare__fail(FLARE_ENOMEM, 0, "flare_db_listen: out of memory");
    pd->listens = l;
    l += pd->nlistens++;
    *l = (pg_listen_t){ .worker = worker, .cb = cb, .ud = ud };
    size_t n = strlen(channel); /* checked by db.c: 1-63 identifier bytes */
    for (size_t i = 0; i <= n; i++)
        l->channel[i] = (char)flare__lower((unsigned char)channel[i]);
    memcpy(l->sql, "LISTEN \"", 8);
    memcpy(l->sql + 8, l->channel, n);
    memcpy(l->sql + 8 + n, "\"", 2);
    return 0;
}

/* ---- records ---- */

pg_query_t *flare__pg_qalloc(pg_worker_t *pw)
{
    pg_query_t *q = pw->freeq;
    if (q != NULL)
        pw->freeq = q->next;
    else if ((q = malloc(sizeof(*q))) == NULL)
        return NULL;
    memset(q, 0, offsetof(pg_query_t, inl)); /* inl is written before it is read */
    q->stmt = PG_NO_STMT;
    return q;
}

void flare__pg_qfree(pg_worker_t *pw, pg_query_t *q)
{
    if (q->params != q->inl)
        free(q->params);
    q->params = NULL;
    q->next = pw->freeq;
    pw->freeq = q;
}

/* ---- deferred completions: a call that returned 0 never runs its
 * callback from inside; errors known at once are delivered after the
 * current loop iteration (the ready list costs no syscall) ---- */

void flare__pg_defer(pg_worker_t *pw, pg_query_t *q, int err, const char *msg)
{
    q->err = err;
    q->msg = msg;
    q->next = NULL;
    if (pw->dtail != NULL)
        pw->dtail->next = q;
    else
        pw->dhead = q;
    pw->dtail = q;
    flare__loop_ready(pw->loop, &pw->ready_io);
}

void flare__pg_complete_err(pg_worker_t *pw, pg_query_t *q, int err, const char *msg)
{
    flare_db_fn cb = q->cb;
    void *ud = q->ud;
    if (q->counted)
        flare__db_stat_done(pw->st, err);
    flare__pg_qfree(pw, q);
    flare__db_fail(cb, ud, err, msg);
}

static void ready_cb(flare_loop_t *l, flare_io_t *io, uint32_t events)
{
    (void)l, (void)events;
    pg_worker_t *pw = (pg_worker_t *)((char *)io - offsetof(pg_worker_t, ready_io));
    /* one flush per connection for what this iteration sent */
    for (unsigned i = 0; i < pw->nconns; i++) {
        pg_conn_t *c = &pw->conns[i];
        if (c->need_flush && !c->broken && c->state == C_UP)
            flare__pg_flush(c);
        if (c->broken && c->pg != NULL)
            flare__pg_conn_down(c, PQerrorMessage(c->pg));
    }
    pg_query_t *q = pw->dhead;
    pw->dhead = pw->dtail = NULL;
    while (q != NULL) {
        pg_query_t *next = q->next;
        flare__pg_complete_err(pw, q, q->err, q->msg);
        q = next;
    }
    flare__pg_pump(pw);
}

/* ---- statistics helpers ---- */

void flare__pg_busy_update(pg_conn_t *c)
{
    bool b = c->state == C_UP && (c->inflight > 0 || c->tx != NULL);
    if (b != c->busy) {
        c->busy = b;
        flare__db_stat_add(&c->pw->st->conns_busy, b ? 1 : -1);
    }
}

/* ---- statements: the SQL text is the key, one table per worker ---- */

static bool ident_char(unsigned char ch)
{
    return (unsigned)((ch | 0x20) - 'a') < 26u || (unsigned)(ch - '0') < 10u || ch == '_' ||
           ch == '$' || ch >= 0x80;
}

/* Whether sql, from s, begins with the keyword kw (lower case). */
static bool keyword_at(const char *s, const char *end, const char *kw)
{
    size_t n = strlen(kw);
    if ((size_t)(end - s) < n)
        return false;
    for (size_t i = 0; i < n; i++)
        if (flare__lower((unsigned char)s[i]) != (unsigned char)kw[i])
            return false;
    return s + n == end || !ident_char((unsigned char)s[n]);
}

/* Whether a statement cannot write, so that it may share a pipeline
 * segment with others (pg_int.h): its first word, after white space and
 * comments, is SELECT, and the words INTO (SELECT INTO creates a table)
 * and FOR (row locks, FOR UPDATE / SHARE: held to the end of the segment,
 * they could deadlock where statements of their own would not) appear
 * nowhere in it, nor ';'. Anything else counts as a write, which is only
 * ever slower. Not seen: a function called by the SELECT that writes
 * (db.h states the limit). */
static bool stmt_reads_only(const char *sql, size_t len)
{
    const char *p = sql, *end = sql + len;
    for (;;) {
        while (p < end && (*p == ' ' || (*p >= '\t' && *p <= '\r')))
            p++;
        if (end - p >= 2 && p[0] == '-' && p[1] == '-') {
            while (p < end && *p != '\n')
                p++;
        } else if (end - p >= 2 && p[0] == '/' && p[1] == '*') {
            unsigned depth = 0; /* PostgreSQL's block comments nest */
            do {
                if (end - p >= 2 && p[0] == '/' && p[1] == '*')
                    depth++, p += 2;
                else if (end - p >= 2 && p[0] == '*' && p[1] == '/')
                    depth--, p += 2;
                else
                    p++;
            } while (depth > 0 && p < end);
        } else {
            break;
        }
    }
    if (!keyword_at(p, end, "select"))
        return false;
    for (p += 6; p < end; p++) {
        if (*p == ';')
            return false;
        if (ident_char((unsigned char)p[-1]))
            continue;
        if (keyword_at(p, end, "into") || keyword_at(p, end, "for"))
            return false;
    }
    return true;
}

static int stmt_rehash(pg_worker_t *pw, uint32_t nslots)
{
    uint32_t *slots = calloc(nslots, sizeof(*slots));
    if (slots == NULL)
        return FLARE_ENOMEM;
    for (uint32_t id = 0; id < pw->nstmts; id++) {
        uint32_t i = (uint32_t)pw->stmts[id].hash & (nslots - 1);
        while (slots[i] != 0)
            i = (i + 1) & (nslots - 1);
        slots[i] = id + 1;
    }
    free(pw->slots);
    pw->slots = slots;
    pw->nslots = nslots;
    return 0;
}

/* The id of sql (added on first sight, its parameter types taken from
 * that first call), or a negative FLARE_E*. */
static int64_t stmt_id(pg_worker_t *pw, const char *sql, const flare_db_val_t *params, size_t n)
{
    size_t len = strlen(sql);
    uint64_t h = flare__hash(sql, len);
    if (pw->nslots > 0) {
        for (uint32_t i = (uint32_t)h & (pw->nslots - 1);; i = (i + 1) & (pw->nslots - 1)) {
            uint32_t s = pw->slots[i];
            if (s == 0)
                break;
            pg_stmt_t *st = &pw->stmts[s - 1];
            if (st->hash == h && st->len == len && memcmp(st->sql, sql, len) == 0)
                return s - 1;
        }
    }
    if (pw->nstmts == INT32_MAX)
        return FLARE_ENOMEM;
    if ((pw->nstmts + 1) * 2 > pw->nslots && stmt_rehash(pw, pw->nslots ? pw->nslots * 2 : 64) != 0)
        return FLARE_ENOMEM;
    if (pw->nstmts == pw->capstmts) {
        uint32_t cap = pw->capstmts ? pw->capstmts * 2 : 16;
        pg_stmt_t *s = realloc(pw->stmts, cap * sizeof(*s));
        if (s == NULL)
            return FLARE_ENOMEM;
        pw->stmts = s;
        pw->capstmts = cap;
    }
    pg_stmt_t *st = &pw->stmts[pw->nstmts];
    *st = (pg_stmt_t){
        .len = len, .hash = h, .nparams = (uint32_t)n, .read = stmt_reads_only(sql, len)
    };
    st->sql = malloc(len + 1);
    st->types = n > 0 ? calloc(n, sizeof(Oid)) : NULL;
    if (st->sql == NULL || (n > 0 && st->types == NULL)) {
        free(st->sql);
        free(st->types);
        return FLARE_ENOMEM;
    }
    memcpy(st->sql, sql, len + 1);
    for (size_t i = 0; i < n; i++)
        st->types[i] = params[i].type == FLARE_DB_BYTES ? 17 : 0;
    uint32_t id = pw->nstmts++;
    st->name[0] = 'f';
    st->name[1 + flare__u64toa(st->name + 1, id)] = '\0';
    uint32_t i = (uint32_t)h & (pw->nslots - 1);
    while (pw->slots[i] != 0)
        i = (i + 1) & (pw->nslots - 1);
    pw->slots[i] = id + 1;
    return id;
}

/* ---- parameters ----
 *
 * Rendered into one block: per parameter an int32 length (-1: NULL), a
 * format byte (0 text, 1 binary), the bytes, a NUL (libpq reads text
 * parameters up to their NUL). Sent at once from the worker's scratch, or
 * copied with the query when it has to wait. */

int flare__pg_params_reserve(pg_worker_t *pw, uint32_t n)
{
    if (n <= pw->capparams)
        return 0;
    uint32_t cap = n < 16 ? 16 : n;
    const char **v = realloc(pw->vals, cap * sizeof(*v));
    if (v != NULL)
        pw->vals = v;
    int *l = realloc(pw->lens, cap * sizeof(*l));
    if (l != NULL)
        pw->lens = l;
    int *f = realloc(pw->fmts, cap * sizeof(*f));
    if (f != NULL)
        pw->fmts = f;
    if (v == NULL || l == NULL || f == NULL)
        return FLARE_ENOMEM;
    pw->capparams = cap;
    return 0;
}

static size_t fmt_double(char *p, double d)
{
    if (isnan(d))
        return (size_t)(memcpy(p, "NaN", 3), 3);
    if (isinf(d))
        return d > 0 ? (size_t)(memcpy(p, "Infinity", 8), 8)
                     : (size_t)(memcpy(p, "-Infinity", 9), 9);
    int n = snprintf(p, 32, "%.17g", d);
    /* a comma-decimal LC_NUMERIC would print "1,5" */
    for (int i = 0; i < n; i++)
        if (p[i] == ',')
            p[i] = '.';
    return (size_t)n;
}

/* Renders params into pw->scratch; *len gets the block's size. 0,
 * FLARE_ENOMEM, or FLARE_EDB for text holding a NUL byte. */
static int render(pg_worker_t *pw, const flare_db_val_t *p, size_t n, size_t *len)
{
    size_t need = 0;
    for (size_t i = 0; i < n; i++) {
        need += PG_PARAM_HDR + 1;
        if (p[i].type == FLARE_DB_TEXT || p[i].type == FLARE_DB_BYTES)
            need += p[i].s.len;
        else if (p[i].type != FLARE_DB_NULL)
            need += 32;
    }
    if (need > pw->scap) {
        size_t cap = need < 4096 ? 4096 : need;
        char *s = realloc(pw->scratch, cap);
        if (s == NULL)
            return FLARE_ENOMEM;
        pw->scratch = s;
        pw->scap = cap;
    }
    char *o = pw->scratch;
    for (size_t i = 0; i < n; i++) {
        int32_t l = -1;
        char fmt = 0;
        char *d = o + PG_PARAM_HDR;
        switch (p[i].type) {
        case FLARE_DB_NULL:
            break;
        case FLARE_DB_INT64: {
            uint64_t v = (uint64_t)p[i].i;
            size_t k = 0;
            if (p[i].i < 0) {
                d[k++] = '-';
                v = 0 - v;
            }
            l = (int32_t)(k + flare__u64toa(d + k, v));
            break;
        }
        case FLARE_DB_DOUBLE:
            l = (int32_t)fmt_double(d, p[i].d);
            break;
        case FLARE_DB_TEXT:
            if (p[i].s.len > INT32_MAX)
                return FLARE_ENOMEM;
            if (p[i].s.len > 0 && memchr(p[i].s.ptr, '\0', p[i].s.len) != NULL)
                return FLARE_EDB;
            l = (int32_t)p[i].s.len;
            if (l > 0)
                memcpy(d, p[i].s.ptr, (size_t)l);
            break;
        case FLARE_DB_BYTES:
            if (p[i].s.len > INT32_MAX)
                return FLARE_ENOMEM;
            l = (int32_t)p[i].s.len;
            fmt = 1;
            if (l > 0)
                memcpy(d, p[i].s.ptr, (size_t)l);
            break;
        }
        memcpy(o, &l, 4);
        o[4] = fmt;
        o = d + (l > 0 ? l : 0);
        *o++ = '\0';
    }
    *len = (size_t)(o - pw->scratch);
    return 0;
}

/* ---- choosing a connection, the wait queue ---- */

/* The usable pool connection with room for one more statement: one whose
 * segment is open, else the one with the fewest statements in flight; NULL
 * when none. An open segment holds reads sent during this loop iteration
 * (the ready callback closes it): the next statement joins it, so the
 * reads of an iteration share one Sync and one implicit transaction
 * (pg_int.h), and a write joins them as their last.
 *
 * `queued`: for a statement from the wait queue, a connection without an
 * open segment takes it only once it has drained to half its depth; then
 * it is filled up to its depth in that one segment. Otherwise the queue,
 * refilled as each batch of results freed room, went out in segments as
 * small as those batches, and each came back as one more such batch: under
 * load the segments stayed small, and /updates?queries=20 with 64
 * connections cost 1.5 to 2.5 transactions per request here, up to 8.6
 * elsewhere, instead of 1 to 2 (spread by fewest in flight, the 20 reads
 * of a request alone also took a segment on each connection: 3). */
static pg_conn_t *pick(pg_worker_t *pw, bool queued)
{
    pg_conn_t *best = NULL;
    unsigned depth = pw->db->cfg.pipeline_depth;
    for (unsigned i = 0; i < pw->npool; i++) {
        pg_conn_t *c = &pw->conns[i];
        if (c->state != C_UP || c->broken || c->tx != NULL || c->reserved || c->inflight >= depth)
            continue;
        if (queued && !c->seg_open && c->inflight > depth / 2)
            continue;
        if (best == NULL || c->seg_open > best->seg_open ||
            (c->seg_open == best->seg_open && c->inflight < best->inflight))
            best = c;
    }
    return best;
}

static void queue_len_add(pg_worker_t *pw, int d)
{
    flare__db_stat_add(&pw->st->queue_len, d);
}

static void qtimer_arm(pg_worker_t *pw)
{
    if (pw->qtimer.active || (pw->qhead == NULL && pw->txhead == NULL))
        return;
    uint64_t t = pw->qhead != NULL ? pw->qhead->t : UINT64_MAX;
    if (pw->txhead != NULL && pw->txhead->t < t)
        t = pw->txhead->t;
    uint64_t when = t + pw->db->cfg.queue_timeout_ms, now = pg_now(pw);
    flare__timer_start(pw->loop, &pw->qtimer, when > now ? when - now : 0);
}

/* Sends q on c; one that could not be sent completes later with
 * FLARE_EUNAVAIL. */
static void dispatch(pg_conn_t *c, pg_query_t *q, const char *params)
{
    if (flare__pg_send(c, q, params) != 0)
        flare__pg_defer(c->pw, q, FLARE_EUNAVAIL,
                        c->broken ? "database unavailable: sending failed" : msg_nomem);
}

static void tx_start(pg_tx_t *tx, pg_conn_t *c);

static pg_conn_t *idle_conn(pg_worker_t *pw)
{
    pg_conn_t *best = NULL;
    for (unsigned i = 0; i < pw->npool; i++) {
        pg_conn_t *c = &pw->conns[i];
        if (c->state == C_UP && !c->broken && c->tx == NULL && c->inflight == 0 &&
            (best == NULL || c->reserved))
            best = c;
    }
    return best;
}

void flare__pg_pump(pg_worker_t *pw)
{
    if (pw->disposing)
        return;
    while (pw->txhead != NULL) {
        pg_conn_t *c = idle_conn(pw);
        if (c == NULL)
            break;
        pg_tx_t *tx = pw->txhead;
        pw->txhead = tx->qnext;
        if (pw->txhead == NULL)
            pw->txtail = NULL;
        pw->txlen--;
        queue_len_add(pw, -1);
        tx_start(tx, c);
    }
    if (pw->txhead != NULL) {
        /* keep one connection from taking new queries until it drains */
        bool any = false;
        for (unsigned i = 0; i < pw->npool; i++)
            any |= pw->conns[i].reserved;
        if (!any) {
            pg_conn_t *c = pick(pw, false);
            if (c != NULL)
                c->reserved = true;
        }
    }
    while (pw->qhead != NULL) {
        pg_conn_t *c = pick(pw, true);
        if (c == NULL)
            break;
        pg_query_t *q = pw->qhead;
        pw->qhead = q->next;
        if (pw->qhead == NULL)
            pw->qtail = NULL;
        pw->qlen--;
        queue_len_add(pw, -1);
        dispatch(c, q, q->params); /* kept in q until it completes */
    }
}

static void tx_fail_waiting(pg_tx_t *tx, int err, const char *msg);

/* Fails everything waiting (the server is down, or the queue deadline). */
static void fail_waiting(pg_worker_t *pw, bool all, int err, const char *msg)
{
    uint64_t now = pg_now(pw), qto = pw->db->cfg.queue_timeout_ms;
    while (pw->qhead != NULL && (all || pw->qhead->t + qto <= now)) {
        pg_query_t *q = pw->qhead;
        pw->qhead = q->next;
        if (pw->qhead == NULL)
            pw->qtail = NULL;
        pw->qlen--;
        queue_len_add(pw, -1);
        flare__pg_complete_err(pw, q, err, msg); /* may queue more: checked again */
    }
    while (pw->txhead != NULL && (all || pw->txhead->t + qto <= now)) {
        pg_tx_t *tx = pw->txhead;
        pw->txhead = tx->qnext;
        if (pw->txhead == NULL)
            pw->txtail = NULL;
        pw->txlen--;
        queue_len_add(pw, -1);
        tx_fail_waiting(tx, err, msg);
    }
}

static void qtimer_fire(void *ud)
{
    pg_worker_t *pw = ud;
    fail_waiting(pw, false, FLARE_EUNAVAIL, msg_qtimeout);
    qtimer_arm(pw);
}

void flare__pg_went_down(pg_worker_t *pw)
{
    for (unsigned i = 0; i < pw->npool; i++)
        pw->conns[i].reserved = false;
    fail_waiting(pw, true, FLARE_EUNAVAIL, pw->down_msg);
}

/* ---- queries ---- */

/* What flare_db_query and flare_db_tx_query share: the statement's id, its
 * parameters rendered into pw's scratch (*len bytes), a query record. NULL with *rc the
 * error when nothing was made; else *rc is render's result (0, or
 * FLARE_EDB for a value PostgreSQL cannot take, which the caller defers). */
static pg_query_t *query_new(pg_worker_t *pw, const char *sql, const flare_db_val_t *params,
                             size_t n, flare_db_fn cb, void *ud, size_t *len, int *rc)
{
    int64_t id = stmt_id(pw, sql, params, n);
    if (id < 0) {
        *rc = (int)id;
        return NULL;
    }
    *len = 0;
    *rc = render(pw, params, n, len);
    if (*rc == FLARE_ENOMEM)
        return NULL;
    pg_query_t *q = flare__pg_qalloc(pw);
    if (q == NULL) {
        *rc = FLARE_ENOMEM;
        return NULL;
    }
    q->cb = cb;
    q->ud = ud;
    q->stmt = (uint32_t)id;
    q->nparams = (uint32_t)n;
    q->counted = true;
    return q;
}

static int query_tx(pg_tx_t *tx, const char *sql, const flare_db_val_t *params, size_t n,
                    flare_db_fn cb, void *ud);

static int query(void *ws, flare_db_tx_t *txh, const char *sql, const flare_db_val_t *params,
                 size_t n, flare_db_fn cb, void *ud)
{
    if (txh != NULL)
        return query_tx((pg_tx_t *)txh, sql, params, n, cb, ud);
    pg_worker_t *pw = ws;
    if (pw->disposing)
        return FLARE_ESTATE;
    int rc;
    size_t len;
    pg_query_t *q = query_new(pw, sql, params, n, cb, ud, &len, &rc);
    if (q == NULL)
        return rc;
    if (rc == FLARE_EDB) {
        flare__pg_defer(pw, q, FLARE_EDB, msg_nul);
        return 0;
    }
    if (pw->down) {
        flare__pg_defer(pw, q, FLARE_EUNAVAIL, pw->down_msg);
        return 0;
    }
    /* FIFO: while others wait, a new query waits behind them */
    pg_conn_t *c = pw->qhead == NULL ? pick(pw, false) : NULL;
    if (c != NULL) {
        dispatch(c, q, pw->scratch);
        return 0;
    }
    if (pw->qlen + pw->txlen >= pw->db->cfg.queue_max) {
        flare__pg_defer(pw, q, FLARE_EUNAVAIL, msg_qfull);
        return 0;
    }
    if (len > 0) {
        q->params = len <= sizeof(q->inl) ? q->inl : malloc(len);
        if (q->params == NULL) {
            flare__pg_qfree(pw, q);
            return FLARE_ENOMEM;
        }
        memcpy(q->params, pw->scratch, len);
    }
    q->t = pg_now(pw);
    if (pw->qtail != NULL)
        pw->qtail->next = q;
    else
        pw->qhead = q;
    pw->qtail = q;
    pw->qlen++;
    queue_len_add(pw, 1);
    qtimer_arm(pw);
    return 0;
}

/* ---- transactions ---- */

static void tx_unref(pg_tx_t *tx)
{
    if (--tx->refs > 0)
        return;
    pg_worker_t *pw = tx->pw;
    if (pw != NULL) {
        if (tx->prev != NULL)
            tx->prev->next = tx->next;
        else
            pw->txs = tx->next;
        if (tx->next != NULL)
            tx->next->prev = tx->prev;
    }
    free(tx);
}

static void tx_drop_driver(pg_tx_t *tx)
{
    if (tx->drv_ref) {
        tx->drv_ref = false;
        tx_unref(tx);
    }
}

/* The connection goes back to the pool. */
static void tx_release(pg_tx_t *tx)
{
    pg_conn_t *c = tx->c;
    if (c == NULL)
        return;
    c->tx = NULL;
    tx->c = NULL;
    flare__pg_busy_update(c);
}

/* conn_down: the pinned connection is gone; the server rolled back. */
void flare__pg_tx_detach_conn(pg_tx_t *tx)
{
    tx->c = NULL;
    if (tx->state == TX_OPEN)
        tx->state = TX_BROKEN;
}

static void tx_begin_failed(flare_db_res_t *r, void *ud)
{
    pg_tx_t *tx = ud;
    tx->begin_cb(NULL, r, tx->begin_ud);
    tx_drop_driver(tx);
}

static void tx_fail_waiting(pg_tx_t *tx, int err, const char *msg)
{
    tx->state = TX_DONE;
    pg_worker_t *pw = tx->pw;
    pg_query_t *q = flare__pg_qalloc(pw);
    if (q != NULL) {
        q->cb = tx_begin_failed;
        q->ud = tx;
        q->counted = true;
        flare__pg_defer(pw, q, err, msg);
        return;
    }
    /* no record to defer with: this is never inside flare_db_begin */
    flare__db_stat_done(pw->st, err);
    flare_db_res_t r = { .err = err, .sqlstate = "", .message = msg };
    tx_begin_failed(&r, tx);
}

static int tx_send_end(pg_tx_t *tx, bool commit, flare_db_fn cb, void *ud, bool counted);

static void tx_ended(flare_db_res_t *r, void *ud)
{
    pg_tx_t *tx = ud;
    tx_release(tx);
    tx->state = TX_DONE;
    if (tx->end_cb != NULL)
        tx->end_cb(r, tx->end_ud);
    tx_drop_driver(tx);
}

static void tx_begun(flare_db_res_t *r, void *ud)
{
    pg_tx_t *tx = ud;
    if (r->err != 0) {
        tx_release(tx);
        tx->state = TX_DONE;
        tx->begin_cb(NULL, r, tx->begin_ud);
        tx_drop_driver(tx);
        return;
    }
    if (tx->owner_gone) {
        /* the request ended while BEGIN ran: roll back, report it */
        tx->refs++; /* held across the callback */
        tx->state = TX_OPEN;
        if (tx_send_end(tx, false, NULL, NULL, false) != 0) {
            tx_release(tx);
            tx->state = TX_DONE;
            tx_drop_driver(tx);
        }
        flare_db_res_t e = { .err = FLARE_EUNAVAIL, .sqlstate = "", .message = msg_ended };
        tx->begin_cb(NULL, &e, tx->begin_ud);
        tx_unref(tx);
        return;
    }
    tx->state = TX_OPEN;
    tx->begin_cb((flare_db_tx_t *)tx, r, tx->begin_ud);
}

static void tx_start(pg_tx_t *tx, pg_conn_t *c)
{
    c->reserved = false;
    c->tx = tx;
    tx->c = c;
    tx->state = TX_BEGIN;
    flare__pg_busy_update(c);
    pg_query_t *q = flare__pg_qalloc(tx->pw);
    if (q == NULL) {
        tx_release(tx);
        tx_fail_waiting(tx, FLARE_EUNAVAIL, msg_nomem);
        return;
    }
    q->sql = "BEGIN";
    q->cb = tx_begun;
    q->ud = tx;
    q->counted = true;
    dispatch(c, q, NULL);
}

static int tx_send_end(pg_tx_t *tx, bool commit, flare_db_fn cb, void *ud, bool counted)
{
    pg_query_t *q = flare__pg_qalloc(tx->pw);
    if (q == NULL)
        return FLARE_ENOMEM;
    tx->state = TX_ENDING;
    tx->end_cb = cb;
    tx->end_ud = ud;
    q->sql = commit ? "COMMIT" : "ROLLBACK";
    q->commit = commit;
    q->cb = tx_ended;
    q->ud = tx;
    q->counted = counted;
    dispatch(tx->c, q, NULL);
    return 0;
}

/* The owner's exchange ended (flare_req_on_cleanup): a transaction still
 * open is rolled back. This may run inside flare_res_send called from one
 * of the transaction's own callbacks, or after the worker was disposed. */
static void tx_owner_ended(void *ud)
{
    pg_tx_t *tx = ud;
    tx->owner_gone = true;
    pg_worker_t *pw = tx->pw;
    if (pw != NULL && !pw->disposing) {
        switch (tx->state) {
        case TX_WAIT: {
            pg_tx_t **pp = &pw->txhead, *prev = NULL;
            while (*pp != NULL && *pp != tx) {
                prev = *pp;
                pp = &(*pp)->qnext;
            }
            if (*pp == tx) {
                *pp = tx->qnext;
                if (pw->txtail == tx)
                    pw->txtail = prev;
                pw->txlen--;
                queue_len_add(pw, -1);
            }
            tx_fail_waiting(tx, FLARE_EUNAVAIL, msg_ended);
            break;
        }
        case TX_OPEN:
            if (tx_send_end(tx, false, NULL, NULL, false) != 0) {
                /* no memory for a ROLLBACK: drop the connection instead,
                 * which rolls back too */
                pg_conn_t *c = tx->c;
                c->broken = true;
                flare__loop_ready(pw->loop, &pw->ready_io);
            }
            break;
        case TX_BROKEN:
            tx->state = TX_DONE;
            tx_drop_driver(tx);
            break;
        default:
            break; /* BEGIN: tx_begun rolls back; ENDING, DONE: nothing */
        }
    }
    tx_unref(tx);
}

static int begin(void *ws, flare_req_t *owner, flare_db_tx_fn cb, void *ud)
{
    pg_worker_t *pw = ws;
    if (pw->disposing)
        return FLARE_ESTATE;
    pg_tx_t *tx = calloc(1, sizeof(*tx));
    if (tx == NULL)
        return FLARE_ENOMEM;
    tx->base.db = pw->db;
    tx->pw = pw;
    tx->refs = 1;
    tx->drv_ref = true;
    tx->begin_cb = cb;
    tx->begin_ud = ud;
    tx->state = TX_WAIT;
    if (owner != NULL) {
        int rc = flare_req_on_cleanup(owner, tx_owner_ended, tx);
        if (rc != 0) {
            free(tx);
            return rc;
        }
        tx->refs++;
    }
    tx->next = pw->txs;
    if (pw->txs != NULL)
        pw->txs->prev = tx;
    pw->txs = tx;
    if (pw->down) {
        tx_fail_waiting(tx, FLARE_EUNAVAIL, pw->down_msg);
        return 0;
    }
    pg_conn_t *c = pw->txhead == NULL ? idle_conn(pw) : NULL;
    if (c != NULL) {
        tx_start(tx, c);
        return 0;
    }
    if (pw->qlen + pw->txlen >= pw->db->cfg.queue_max) {
        tx_fail_waiting(tx, FLARE_EUNAVAIL, msg_qfull);
        return 0;
    }
    tx->t = pg_now(pw);
    if (pw->txtail != NULL)
        pw->txtail->qnext = tx;
    else
        pw->txhead = tx;
    pw->txtail = tx;
    pw->txlen++;
    queue_len_add(pw, 1);
    flare__pg_pump(pw); /* reserves a connection for it */
    qtimer_arm(pw);
    return 0;
}

static int query_tx(pg_tx_t *tx, const char *sql, const flare_db_val_t *params, size_t n,
                    flare_db_fn cb, void *ud)
{
    pg_worker_t *pw = tx->pw;
    if (pw == NULL || pw->disposing || (tx->state != TX_OPEN && tx->state != TX_BROKEN))
        return FLARE_ESTATE;
    int rc;
    size_t len;
    pg_query_t *q = query_new(pw, sql, params, n, cb, ud, &len, &rc);
    if (q == NULL)
        return rc;
    if (rc == FLARE_EDB)
        flare__pg_defer(pw, q, FLARE_EDB, msg_nul);
    else if (tx->state == TX_BROKEN)
        flare__pg_defer(pw, q, FLARE_EUNAVAIL,
                        "database unavailable: the transaction's connection was lost");
    else
        dispatch(tx->c, q, pw->scratch);
    return 0;
}

static void tx_broken_end(flare_db_res_t *r, void *ud)
{
    pg_tx_t *tx = ud;
    if (tx->end_cb != NULL)
        tx->end_cb(r, tx->end_ud);
    tx_drop_driver(tx);
}

static int tx_end(flare_db_tx_t *txh, bool commit, flare_db_fn cb, void *ud)
{
    pg_tx_t *tx = (pg_tx_t *)txh;
    pg_worker_t *pw = tx->pw;
    if (pw == NULL || pw->disposing)
        return FLARE_ESTATE;
    if (tx->state == TX_OPEN)
        return tx_send_end(tx, commit, cb, ud, true);
    if (tx->state != TX_BROKEN)
        return FLARE_ESTATE;
    pg_query_t *q = flare__pg_qalloc(pw);
    if (q == NULL)
        return FLARE_ENOMEM;
    tx->state = TX_DONE;
    tx->end_cb = cb;
    tx->end_ud = ud;
    q->cb = tx_broken_end;
    q->ud = tx;
    q->counted = true;
    flare__pg_defer(pw, q, FLARE_EUNAVAIL,
                    "database unavailable: the connection was lost; the server rolled the "
                    "transaction back");
    return 0;
}

/* ---- the worker ---- */

static void wdispose(flare_db_t *db, flare_worker_t *w, void *ws);

static int winit(flare_db_t *db, flare_worker_t *w, flare_db_wstats_t *st, void **ws)
{
    pg_db_t *pd = db->impl;
    pg_worker_t *pw = calloc(1, sizeof(*pw));
    if (pw == NULL)
        return flare__fail(FLARE_ENOMEM, 0, "postgresql: out of memory");
    pw->db = db;
    pw->pd = pd;
    pw->w = w;
    pw->loop = &w->loop;
    pw->st = st;
    pw->ready_io = (flare_io_t){ .fd = -1, .cb = ready_cb };
    flare__timer_init(&pw->qtimer, qtimer_fire, pw);
    bool listens = false;
    for (unsigned i = 0; i < pd->nlistens; i++)
        listens |= pd->listens[i].worker == flare_worker_id(w);
    pw->npool = db->cfg.pool_size;
    pw->nconns = pw->npool + listens;
    pw->conns = calloc(pw->nconns, sizeof(*pw->conns));
    pw->ckw = calloc(pd->nkw + 2, sizeof(*pw->ckw));
    pw->cval = calloc(pd->nkw + 2, sizeof(*pw->cval));
    if (pw->conns == NULL || pw->ckw == NULL || pw->cval == NULL ||
        flare__pg_params_reserve(pw, 16) != 0) {
        wdispose(db, w, pw);
        return flare__fail(FLARE_ENOMEM, 0, "postgresql: out of memory");
    }
    /* the loop exists but runs later, on the worker's thread: each
     * connection starts from its timer's first firing there */
    for (unsigned i = 0; i < pw->nconns; i++) {
        flare__pg_conn_init(&pw->conns[i], pw, i >= pw->npool);
        flare__timer_start(pw->loop, &pw->conns[i].timer, 0);
    }
    *ws = pw;
    return 0;
}

/* Shutdown, on the worker's thread after its loop ended (or on the run
 * thread for a worker that never ran): every pending callback gets
 * FLARE_EUNAVAIL (callbacks may answer orphaned exchanges, whose cleanup
 * hooks may end transactions: new work is refused meanwhile), then the
 * connections are closed (which rolls back open transactions on the
 * server) and everything freed. */
static void wdispose(flare_db_t *db, flare_worker_t *w, void *ws)
{
    (void)db, (void)w;
    pg_worker_t *pw = ws;
    pw->disposing = true;
    static const char bye[] = "database unavailable: the worker is shutting down";
    flare__timer_stop(pw->loop, &pw->qtimer);
    for (unsigned i = 0; pw->conns != NULL && i < pw->nconns; i++)
        flare__pg_conn_close(&pw->conns[i]);
    while (pw->qhead != NULL) {
        pg_query_t *q = pw->qhead;
        pw->qhead = q->next;
        flare__pg_complete_err(pw, q, FLARE_EUNAVAIL, bye);
    }
    while (pw->txhead != NULL) {
        pg_tx_t *tx = pw->txhead;
        pw->txhead = tx->qnext;
        tx->state = TX_DONE;
        flare_db_res_t r = { .err = FLARE_EUNAVAIL, .sqlstate = "", .message = bye };
        tx_begin_failed(&r, tx);
    }
    while (pw->dhead != NULL) {
        pg_query_t *q = pw->dhead;
        pw->dhead = q->next;
        flare__pg_complete_err(pw, q, q->err, q->msg);
    }
    if (pw->ready_io.ready_next != NULL) {
        /* still on the loop's list (a worker whose loop never ran) */
        flare_io_t **pp = &pw->loop->ready;
        while (*pp != NULL && *pp != FLARE__IO_READY_END && *pp != &pw->ready_io)
            pp = &(*pp)->ready_next;
        if (*pp == &pw->ready_io)
            *pp = pw->ready_io.ready_next;
        pw->ready_io.ready_next = NULL;
    }
    while (pw->txs != NULL) {
        pg_tx_t *tx = pw->txs;
        pw->txs = tx->next;
        tx->prev = tx->next = NULL;
        tx->pw = NULL;
        tx->c = NULL;
        tx->state = TX_DONE;
        tx_drop_driver(tx); /* the owner's hook, if still to run, frees it */
    }
    while (pw->jobs != NULL) {
        pg_job_t *j = pw->jobs;
        pw->jobs = j->next;
        j->pw = NULL; /* its done half frees it */
        j->c = NULL;
    }
    for (unsigned i = 0; pw->conns != NULL && i < pw->nconns; i++) {
        free(pw->conns[i].ops);
        free(pw->conns[i].prepared);
        free(pw->conns[i].prep_err.msg);
    }
    while (pw->freeq != NULL) {
        pg_query_t *q = pw->freeq;
        pw->freeq = q->next;
        free(q);
    }
    for (uint32_t i = 0; i < pw->nstmts; i++) {
        free(pw->stmts[i].sql);
        free(pw->stmts[i].types);
    }
    free(pw->stmts);
    free(pw->slots);
    free(pw->conns);
    free(pw->scratch);
    free(pw->vals);
    free(pw->lens);
    free(pw->fmts);
    free(pw->ckw);
    free(pw->cval);
    free(pw);
}

const flare_db_driver_t flare__db_pg = {
    .name = "postgresql",
    .open = open_,
    .close = close_,
    .worker_init = winit,
    .worker_dispose = wdispose,
    .query = query,
    .begin = begin,
    .tx_end = tx_end,
    .exec_setup = exec_setup,
    .listen = listen_,
};
