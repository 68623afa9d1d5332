/* The HTTP/1.1 connection state machine.
 *
 * Invariants:
 * - Parse before read: on_readable reads once, then handles every complete
 *   request in the buffer before returning; all responses produced by one
 *   read batch leave in one write/writev (flush at the end of the batch).
 * - Responses go out in request order: exchanges sit in c->qhead..qtail; the
 *   head of the queue serializes straight into c->wbuf, later ones into their
 *   own ex->out until they become the head.
 * - When process() returns, no exchange holds a view into c->base.s.rbuf: one that
 *   must outlive the batch (asynchronous handler, body spanning reads) copies
 *   its head into its arena first ("detach"). So the read buffer can be
 *   compacted or handed back to the worker's pool at any time outside
 *   process(), and an idle connection holds no buffer at all.
 * - Closing never frees memory that a pending poller event may still point to:
 *   closed connections wait on w->dead until the event batch is over. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/sys.h"
#include "net/tls.h"
#include "http1/http1.h"
#include "http1/conn.h"
#include "http1/parser.h"
#include "http/svc.h"
#include "http2/h2.h"
#include "app.h"
#include "obs/metrics.h"

#define MAX_UNSENT   (1u << 20) /* response bytes waiting for a slow reader */
#define MAX_INFLIGHT 64         /* pipelined requests in flight before we stop reading */
#define MAX_IOV      64

static void conn_io_cb(flare_loop_t *l, flare_io_t *io, uint32_t events);
static void tls_open(flare_stream_t *s);
static void process(h1conn_t *c);
static void queue_advance(h1conn_t *c);

/* ---- exchanges ---- */

/* ---- open / close ---- */

void flare__conn_open(flare_worker_t *w, int fd, const struct sockaddr *sa,
                      const struct flare_listener *l)
{
    h1conn_t *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        close(fd);
        return;
    }
    flare_transport_t *tr = NULL;
    if (l != NULL && flare__unlikely(l->tls != NULL)) {
        tr = flare__tls_accept(l->tls, fd, &w->tls_counters);
        if (tr == NULL) {
            close(fd);
            free(c);
            return;
        }
    }
    if (flare__stream_open(&c->base.s, &w->loop, fd, tr, conn_io_cb) != 0) {
        if (tr != NULL)
            tr->ops->free(tr);
        close(fd);
        free(c);
        return;
    }
    if (tr != NULL) {
        tr->on_open = tls_open;
        tr->hs_deadline = w->loop.now + flare__tls_handshake_timeout(l->tls);
    }
    c->t_head = (uint32_t)w->loop.now;
    flare__conn_set_peer(&c->base, sa); /* (in the stream's spare bytes: after its open) */
    if (l != NULL && l->admin)
        c->base.s.conn_flags |= FLARE_CONN_ADMIN;
    flare__conn_attach(&c->base, w, &flare__h1_conn_ops);
}

/* Upgrades whose 101 is not out yet. Few at a time, so a list per worker
 * thread instead of two pointers in every connection (an idle connection
 * stays within 192 bytes); a connection is only touched on its worker's
 * thread. */
typedef struct h1_upgrade {
    const h1conn_t *c;
    flare_upgrade_fn fn;
    void *ud;
    struct h1_upgrade *next;
} h1_upgrade_t;

static _Thread_local h1_upgrade_t *upgrades;

int flare__h1_upgrade_set(h1conn_t *c, flare_upgrade_fn fn, void *ud)
{
    if (c->flags & C_UPGRADE) { /* a second 101 on it: the last one's taker, as before */
        h1_upgrade_t *u = upgrades;
        while (u->c != c)
            u = u->next;
        u->fn = fn;
        u->ud = ud;
        return 0;
    }
    h1_upgrade_t *u = malloc(sizeof(*u));
    if (u == NULL)
        return FLARE_ENOMEM;
    *u = (h1_upgrade_t){ c, fn, ud, upgrades };
    upgrades = u;
    c->flags |= C_UPGRADE;
    return 0;
}

/* C_UPGRADE's fn and ud, off the list (C_UPGRADE cleared). */
static void upgrade_take(h1conn_t *c, flare_upgrade_fn *fn, void **ud)
{
    h1_upgrade_t **pp = &upgrades;
    while ((*pp)->c != c)
        pp = &(*pp)->next;
    h1_upgrade_t *u = *pp;
    *pp = u->next;
    *fn = u->fn;
    *ud = u->ud;
    free(u);
    c->flags &= ~(uint32_t)C_UPGRADE;
}

/* ops->closed: the stream is closed and the connection off the worker's
 * list (net/conn.c). */
static void h1_closed(flare_conn_t *base)
{
    h1conn_t *c = (h1conn_t *)base;
    flare_worker_t *w = h1_worker(c);
    c->flags |= C_DEAD;
    if (c->flags & C_UPGRADE) {
        /* the 101 never got out: the would-be owner learns it with no stream */
        flare_upgrade_fn fn;
        void *ud;
        upgrade_take(c, &fn, &ud);
        fn(w, NULL, ud);
    }

    /* in-flight exchanges: finished ones are recycled, the others are
     * orphaned so a late send is a no-op that frees them; a streamed body
     * still arriving is orphaned too, and its handler told (below) */
    struct flare_req *streamed =
        c->recv != NULL && (c->recv->flags & EX_BODY_STREAM) ? c->recv : NULL;
    if (streamed != NULL)
        c->recv = NULL;
    struct flare_req *ex = c->qhead;
    while (ex != NULL) {
        struct flare_req *next = ex->next;
        ex->conn = NULL;
        ex->next = NULL;
        /* finished ones, and the one still receiving its body (no handler
         * has seen it, none will send), are freed now */
        if (((ex->flags & EX_SENT) && !(ex->flags & EX_IN_HANDLER)) || ex == c->recv)
            flare__ex_put(w, ex);
        else
            flare__ex_orphan(w, ex);
        ex = next;
    }
    c->qhead = c->qtail = c->recv = NULL;
    c->nqueue = 0;
    if (streamed != NULL)
        flare__ex_body_end(streamed, FLARE_ECLOSED); /* an orphan: freed there */
}

/* Closes on an error or a timeout: no clean TLS end. */
static void conn_close(h1conn_t *c)
{
    flare__conn_close(&c->base, false);
}

/* The conversation is over (the peer's EOF, idle, drained): TLS says
 * close_notify first. */
static void conn_close_clean(h1conn_t *c)
{
    flare__conn_close(&c->base, true);
}

static void h1_free(flare_conn_t *c)
{
    free(c);
}

/* Error responses, and closes the server decides (draining), leave the
 * connection through a lingering close: shut the write side so the response
 * is not lost to a RST, then read and discard until EOF or FLARE_LINGER_MS
 * (nginx's lingering_close). When the client asked for the close itself and
 * everything it sent was read, nothing more is coming but its FIN (and TLS
 * close_notify): close at once, as nginx does (lingering_close on). That
 * saves each such connection a shutdown(2), two wake-ups, two reads and
 * its time in the connection list (measured: 20 -> 16 syscalls besides
 * getpid per TLS handshake + request with Connection: close). */
static void start_linger(h1conn_t *c)
{
    if ((c->base.s.sflags & FLARE_S_RD_EOF) ||
        ((c->flags & C_PEER_CLOSE) && c->recv == NULL && c->base.s.rpos == c->base.s.rlen &&
         !flare__stream_has_pending(&c->base.s))) {
        conn_close_clean(c);
        return;
    }
    flare__stream_linger(&c->base.s);
}

/* ---- output ---- */

/* The 101 is out: the stream (socket, transport, the bytes after the
 * upgrade request) goes to its new owner; this connection object ends. */
static void handoff(h1conn_t *c)
{
    flare_upgrade_fn fn;
    void *ud;
    upgrade_take(c, &fn, &ud); /* handed over: closing c must not report a failure */
    fn(h1_worker(c), &c->base.s, ud);
    conn_close(c); /* the stream has moved: only the object is left to free */
}

/* All output is written. Returns true when reading resumed and the
 * requests already buffered produced more output (flush again). */
static bool after_output(h1conn_t *c)
{
    if (c->qhead != NULL)
        return false;
    if (c->flags & C_UPGRADE) {
        handoff(c);
        return false;
    }
    if (c->flags & C_CLOSING) {
        start_linger(c);
        return false;
    }
    if (c->base.s.sflags & FLARE_S_RD_EOF) {
        conn_close_clean(c);
        return false;
    }
    if (c->flags & C_READ_PAUSED) {
        c->flags &= ~C_READ_PAUSED;
        if (!(c->flags & C_BODY_WAIT))
            flare__stream_read_enable(&c->base.s, true);
        /* TLS: records OpenSSL holds wake no poller: read them after this batch */
        if (flare__unlikely(flare__stream_has_pending(&c->base.s)))
            flare__loop_ready(c->base.s.loop, &c->base.s.io);
        /* requests already buffered while paused: their responses are
         * flushed by the caller's loop (not here: no recursion) */
        if (c->base.s.rpos < c->base.s.rlen) {
            process(c);
            return !(c->flags & C_DEAD) && flare__stream_has_output(&c->base.s);
        }
    }
    return false;
}

static __attribute__((noinline)) void flush_more(h1conn_t *c, int rc)
{
    for (;;) {
        if (rc < 0) {
            conn_close(c);
            return;
        }
        if (rc == 0 || !after_output(c))
            return;
        rc = flare__stream_flush(&c->base.s);
    }
}

/* metrics on: the flush, counting the bytes it wrote */
static __attribute__((noinline)) int metered_flush(h1conn_t *c)
{
    size_t before = flare__stream_unsent(&c->base.s);
    int rc = flare__stream_flush(&c->base.s);
    size_t after = flare__stream_unsent(&c->base.s);
    if (rc >= 0 && before > after)
        flare__metrics_tx(h1_worker(c), before - after);
    return rc;
}

void flare__conn_flush(h1conn_t *c)
{
    int rc = flare__unlikely(h1_worker(c)->metrics != NULL) ? metered_flush(c)
                                                            : flare__stream_flush(&c->base.s);
    /* the common case: written, nothing to do once it is out */
    if (flare__likely(rc > 0 && !(c->flags & (C_CLOSING | C_READ_PAUSED | C_UPGRADE)) &&
                      !(c->base.s.sflags & FLARE_S_RD_EOF)))
        return;
    flush_more(c, rc);
}

/* ---- exchange queue ---- */

static void enqueue(h1conn_t *c, struct flare_req *ex)
{
    ex->ops = &flare__http1_ops;
    ex->conn = &c->base;
    ex->next = NULL;
    if (c->qtail != NULL)
        c->qtail->next = ex;
    else
        c->qhead = ex;
    c->qtail = ex;
    c->nqueue++;
}

static void send_continue(h1conn_t *c, struct flare_req *ex);

/* queue_advance runs inside flush paths: queue the 100 without flushing. */
static void send_continue_later(h1conn_t *c, struct flare_req *ex)
{
    uint32_t batch = c->flags & C_IN_BATCH;
    c->flags |= C_IN_BATCH;
    send_continue(c, ex);
    c->flags = (c->flags & ~(uint32_t)C_IN_BATCH) | batch;
}

/* Pops finished exchanges off the head of the queue; a new head moves its
 * privately buffered output into the connection buffer. */
/* A new head of the queue: its privately buffered output joins the
 * stream's. false when out of memory (the connection is closed). */
static __attribute__((noinline)) bool adopt_out(h1conn_t *c, struct flare_req *ex)
{
    if (flare__buf_append(flare__stream_wbuf(&c->base.s), ex->out.data, ex->out.len) != 0) {
        conn_close(c);
        return false;
    }
    ex->out.len = 0;
    /* a file body follows its head (which is never empty) */
    if (flare__unlikely(ex->file_fd >= 0)) {
        int fd = ex->file_fd;
        ex->file_fd = -1; /* the pending-file cleanup has nothing left to close */
        if (flare__stream_push_file(&c->base.s, fd, ex->file_off, ex->file_len) != 0) {
            conn_close(c);
            return false;
        }
    }
    return true;
}

/* The queue head is not complete: it owes a 100 Continue, or it streams
 * (the I/O callbacks then watch its backpressure: stream_out_check). */
static void head_waits(h1conn_t *c, struct flare_req *ex)
{
    if (ex->flags & EX_NEED_CONTINUE)
        send_continue_later(c, ex);
    if ((ex->flags & (EX_STREAM | EX_SENT)) == EX_STREAM && !(c->flags & C_STREAM_OUT)) {
        c->flags |= C_STREAM_OUT;
        /* it may have come to the head with its backpressure already on
         * (written while queued behind another response) and the socket
         * may take it all at once: look again after this loop turn */
        if (ex->flags & EX_BACKPRESSURED)
            flare__loop_ready(c->base.s.loop, &c->base.s.io);
    }
}

/* After I/O on a connection whose head streams (C_STREAM_OUT): its drain
 * callback when its output has fallen far enough. Runs from the I/O
 * callback only, so the application's callback is never nested in one of
 * its own calls. */
static void stream_out_check(h1conn_t *c)
{
    struct flare_req *ex = c->qhead;
    if (ex == NULL || !(ex->flags & EX_STREAM) || (ex->flags & EX_SENT)) {
        c->flags &= ~(uint32_t)C_STREAM_OUT;
        return;
    }
    if (ex->flags & EX_BACKPRESSURED)
        flare__res_drain_check(ex);
}

static void queue_advance(h1conn_t *c)
{
    struct flare_req *ex;
    while ((ex = c->qhead) != NULL) {
        if (flare__unlikely(ex->out.len > 0) && !adopt_out(c, ex))
            return;
        if (!(ex->flags & EX_SENT) || (ex->flags & EX_IN_HANDLER)) {
            /* one test for both rare cases: the keep-alive path pays nothing */
            if (flare__unlikely(ex->flags & (EX_NEED_CONTINUE | EX_STREAM)))
                head_waits(c, ex);
            return;
        }
        if (ex->flags & EX_CLOSE) {
            c->flags |= C_CLOSING;
            /* no request is read after a closing one: the stream holds the
             * connection's last bytes (TLS: close_notify in the same send) */
            if (ex->next == NULL)
                flare__stream_last(&c->base.s);
        }
        c->qhead = ex->next;
        if (c->qhead == NULL)
            c->qtail = NULL;
        c->nqueue--;
        flare__ex_put(h1_worker(c), ex);
    }
}

/* A streaming route answered before its body ended: the rest of the body
 * is not read (the lingering close after the answer discards it). */
static __attribute__((noinline)) void stream_answered(h1conn_t *c, struct flare_req *ex)
{
    c->recv = NULL;
    ex->flags &= ~(uint32_t)(EX_BODY_OPEN | EX_BODY_LIVE | EX_BODY_PAUSED);
    ex->flags |= EX_CLOSE;
    c->flags |= C_CLOSING;
    c->flags &= ~(uint32_t)(C_BODY_WAIT | C_PEER_CLOSE);
}

/* Called when a response is complete, or more output was produced. */
void flare__http1_complete(struct flare_req *ex)
{
    h1conn_t *c = (h1conn_t *)ex->conn;
    if (c == NULL) {
        if ((ex->flags & EX_ORPHAN) && (ex->flags & EX_SENT) && !(ex->flags & EX_IN_HANDLER))
            flare__ex_put(ex->worker, ex);
        return;
    }
    if (flare__unlikely(c->recv == ex) && (ex->flags & (EX_SENT | EX_STREAM)))
        stream_answered(c, ex);
    if (c->qhead != ex)
        return;
    queue_advance(c);
    if (!(c->flags & (C_IN_BATCH | C_DEAD)))
        flare__conn_flush(c);
}

/* ---- request handling ---- */

/* Error for an exchange being parsed: answer and stop reading requests. */
static void framing_error(h1conn_t *c, struct flare_req *ex, int status, const char *msg)
{
    ex->flags |= EX_CLOSE | EX_ERROR;
    c->flags |= C_CLOSING;
    if (status != 408) /* timeouts are counted by kind (flare__conn_sweep) */
        flare__metrics_parse_error(h1_worker(c), status);
    c->flags &= ~(uint32_t)C_PEER_CLOSE; /* what it sends next may still be arriving */
    flare__res_error(ex, status, msg);
    flare__http1_complete(ex);
}

static const char continue_line[] = "HTTP/1.1 100 Continue\r\n\r\n";

static void send_continue(h1conn_t *c, struct flare_req *ex)
{
    ex->flags &= ~(uint32_t)EX_NEED_CONTINUE;
    if (c->recv != ex)
        return; /* the body arrived anyway */
    if (flare__buf_append(flare__stream_wbuf(&c->base.s), continue_line,
                          sizeof(continue_line) - 1) == 0 &&
        !(c->flags & (C_IN_BATCH | C_DEAD)))
        flare__conn_flush(c);
}

/* Expect: 100-continue with the body not here yet: 100 only when the route
 * exists and the size is allowed; otherwise the final status and close. */
static bool expect_continue(h1conn_t *c, struct flare_req *ex)
{
    if (!ex->head.expect_continue)
        return true;
    if (ex->route == NULL) {
        ex->flags |= EX_CLOSE;
        c->flags |= C_CLOSING;
        flare__http_dispatch(ex); /* 404 / 405 */
        return false;
    }
    /* the 100 must not overtake earlier responses: it goes out when this
     * exchange becomes the head of the queue */
    ex->flags |= EX_NEED_CONTINUE;
    if (c->qhead == ex)
        send_continue(c, ex);
    return true;
}

/* ---- request trailers (chunked bodies only: off the common path) ---- */

/* A chunked body begins: its decoder, and no trailer bytes yet (the
 * exchange's last ones lived in an arena since reset). */
static void chunked_start(struct flare_req *ex)
{
    flare__chunked_init(&ex->chunked);
    ex->traw = NULL;
    ex->traw_len = ex->traw_cap = 0;
}

/* Keeps n bytes of the trailer section (they may come in many reads) in
 * the arena until the body ends. 0 or FLARE_ENOMEM. */
static __attribute__((noinline)) int trailer_keep(struct flare_req *ex, const char *p, size_t n)
{
    if (ex->traw_len == 0 && n == 2 && p[0] == '\r')
        return 0; /* the usual section: its final CRLF, nothing in it */
    if (ex->traw_len + n > ex->traw_cap) {
        size_t cap = ex->traw_cap != 0 ? (size_t)ex->traw_cap * 2 : 256;
        while (cap < ex->traw_len + n)
            cap *= 2;
        char *nb = flare__arena_alloc(&ex->arena, cap);
        if (nb == NULL)
            return FLARE_ENOMEM;
        if (ex->traw_len > 0)
            memcpy(nb, ex->traw, ex->traw_len);
        ex->traw = nb;
        ex->traw_cap = (uint32_t)cap;
    }
    memcpy(ex->traw + ex->traw_len, p, n);
    ex->traw_len += (uint32_t)n;
    return 0;
}

/* The body ended: the fields of its trailer section become the request's
 * trailers (flare_req_trailer), apart from its header fields. 0, or the
 * status to answer (431, 500) with *msg. */
static __attribute__((noinline)) int trailers_done(h1conn_t *c, struct flare_req *ex,
                                                   const char **msg)
{
    size_t pos = 0;
    flare_str_t name, value;
    while (flare__chunked_trailer_next(ex->traw, ex->traw_len, &pos, &name, &value)) {
        if (flare_req_trailer_count(ex) >= h1_worker(c)->app->limits.max_headers) {
            *msg = "too many trailer fields";
            return 431;
        }
        if (flare__ex_trailer_add(ex, name, value) != 0) {
            *msg = "out of memory";
            return 500;
        }
    }
    return 0;
}

/* ---- streaming request bodies (flare/body.h) ---- */

/* The streamed body of c->recv cannot complete: its handler hears err
 * (on_end), then the request gets status/msg unless the handler answered,
 * and the connection closes after it. */
static void stream_fail(h1conn_t *c, int err, int status, const char *msg)
{
    struct flare_req *ex = c->recv;
    c->recv = NULL;
    c->flags &= ~(uint32_t)C_BODY_WAIT;
    if (!(c->flags & C_READ_PAUSED))
        flare__stream_read_enable(&c->base.s, true);
    ex->flags |= EX_CLOSE; /* an answer from on_end says so too */
    flare__ex_body_end(ex, err);
    framing_error(c, ex, status, msg); /* no second answer when it answered */
}

/* Delivers what the read buffer holds of c->recv's streamed body, while
 * the handler reads. Returns true when the body ended (parsing may go
 * on with the next request). */
static bool recv_stream(h1conn_t *c)
{
    struct flare_req *ex = c->recv;
    while (!(c->flags & (C_BODY_WAIT | C_DEAD))) {
        const char *p = c->base.s.rbuf + c->base.s.rpos;
        size_t avail = c->base.s.rlen - c->base.s.rpos;
        flare_str_t data = { p, 0 };
        bool done;
        if (ex->head.chunked) {
            size_t used = 0;
            int st = 0;
            const char *err = NULL;
            uint64_t limit = flare__ex_body_limit(ex, h1_worker(c)->app->cfg.max_body);
            uint32_t tlen = ex->chunked.trailer_len;
            int rc = flare__chunked_decode(&ex->chunked, p, avail, limit, &used, &data, &st, &err);
            c->base.s.rpos += (uint32_t)used;
            if (rc != FLARE_CHUNKED_DATA && rc != FLARE_CHUNKED_DONE && rc != FLARE_PARSE_PARTIAL) {
                stream_fail(c, st == 413 ? FLARE_ETOOBIG : FLARE_EINVAL, st != 0 ? st : 400,
                            err != NULL ? err : "invalid chunked body");
                return false;
            }
            size_t tadd = ex->chunked.trailer_len - tlen;
            if (tadd > 0 && trailer_keep(ex, p + used - tadd, tadd) != 0) {
                stream_fail(c, FLARE_ENOMEM, 500, "out of memory");
                return false;
            }
            if (rc == FLARE_PARSE_PARTIAL)
                return false;
            done = rc == FLARE_CHUNKED_DONE;
            if (done) {
                data.len = 0;
                st = ex->traw_len != 0 ? trailers_done(c, ex, &err) : 0;
                if (st != 0) {
                    stream_fail(c, st == 431 ? FLARE_ETOOBIG : FLARE_ENOMEM, st, err);
                    return false;
                }
            }
        } else {
            if (avail == 0)
                return false;
            size_t take = avail < ex->body_need ? avail : (size_t)ex->body_need;
            data.len = take;
            c->base.s.rpos += (uint32_t)take;
            ex->body_need -= take;
            done = ex->body_need == 0;
        }
        if (data.len > 0 && flare__ex_body_data(ex, data) != 0) {
            /* answered (or failed) before the end: stream_answered ran */
            flare__ex_complete(ex);
            return false;
        }
        if (c->recv != ex)
            return false; /* answered from elsewhere during the call */
        if (done) {
            c->recv = NULL;
            flare__ex_body_end(ex, 0); /* settles ex: it may be gone now */
            if (c->base.s.rpos < c->base.s.rlen)
                c->t_head = (uint32_t)h1_worker(c)->loop.now;
            return true;
        }
    }
    return false;
}

/* A streaming route's head: limits, then the handler (on_start); the body
 * follows through recv_stream once the handler reads. */
static __attribute__((noinline)) void start_stream(h1conn_t *c, struct flare_req *ex)
{
    int64_t cl = ex->head.content_length;
    if (!ex->head.chunked &&
        (uint64_t)cl > flare__ex_body_limit(ex, h1_worker(c)->app->cfg.max_body)) {
        framing_error(c, ex, 413, "request body too large");
        return;
    }
    if (ex->head.chunked)
        chunked_start(ex);
    else
        ex->body_need = (uint64_t)cl;
    ex->flags |= EX_BODY_STREAM | EX_BODY_OPEN;
    c->flags |= C_BODY_WAIT; /* until the handler reads (flare__http1_body_read) */
    c->recv = ex;
    flare__http_dispatch(ex);
    if (c->recv == ex && (c->flags & C_BODY_WAIT) && !(c->flags & C_DEAD))
        flare__stream_read_enable(&c->base.s, false); /* paused, or a middleware waits */
}

void flare__http1_body_read(struct flare_req *ex, bool on)
{
    h1conn_t *c = (h1conn_t *)ex->conn;
    if (c == NULL || c->recv != ex || (c->flags & C_DEAD))
        return;
    if (!on) {
        c->flags |= C_BODY_WAIT;
        flare__stream_read_enable(&c->base.s, false);
        return;
    }
    if (!(c->flags & C_BODY_WAIT))
        return;
    c->flags &= ~(uint32_t)C_BODY_WAIT;
    c->base.s.t_active = h1_worker(c)->loop.now; /* the body timeout counts from here */
    if (ex->head.expect_continue) {
        /* the handler reads: the client may send (once, and in order: at
         * the head of the queue) */
        ex->head.expect_continue = false;
        ex->flags |= EX_NEED_CONTINUE;
        if (c->qhead == ex)
            send_continue(c, ex);
    }
    if (!(c->flags & C_READ_PAUSED))
        flare__stream_read_enable(&c->base.s, true);
    if (c->flags & C_IN_BATCH)
        return; /* the batch's loop goes on with the buffered bytes */
    /* a resume from outside a read batch (a timer, a job's completion):
     * the bytes already buffered are delivered now */
    if (flare__unlikely(flare__stream_has_pending(&c->base.s)))
        flare__loop_ready(c->base.s.loop, &c->base.s.io);
    if (c->base.s.rpos < c->base.s.rlen) {
        process(c);
        if (!(c->flags & C_DEAD))
            flare__conn_flush(c);
        if (!(c->flags & C_DEAD))
            flare__stream_idle(&c->base.s);
    }
}

/* Continues receiving the body of c->recv from the read buffer. Returns
 * true when the exchange was dispatched and parsing may go on. */
static bool recv_body(h1conn_t *c)
{
    struct flare_req *ex = c->recv;
    if (flare__unlikely(ex->flags & EX_BODY_STREAM))
        return recv_stream(c);
    const char *p = c->base.s.rbuf + c->base.s.rpos;
    size_t avail = c->base.s.rlen - c->base.s.rpos;
    if (ex->head.chunked) {
        for (;;) {
            size_t used = 0;
            flare_str_t data;
            int st = 0;
            const char *err = NULL;
            uint32_t tlen = ex->chunked.trailer_len;
            int rc = flare__chunked_decode(&ex->chunked, p, avail, h1_worker(c)->app->cfg.max_body,
                                           &used, &data, &st, &err);
            p += used;
            avail -= used;
            c->base.s.rpos += (uint32_t)used;
            if (rc == FLARE_CHUNKED_DATA) {
                if (flare__buf_append(&ex->bodybuf, data.ptr, data.len) != 0) {
                    c->recv = NULL;
                    framing_error(c, ex, 500, "out of memory");
                    return false;
                }
                continue;
            }
            if (rc == FLARE_CHUNKED_DONE || rc == FLARE_PARSE_PARTIAL) {
                /* the trailer section's bytes are the last ones consumed */
                size_t tadd = ex->chunked.trailer_len - tlen;
                if (tadd > 0 && trailer_keep(ex, p - tadd, tadd) != 0)
                    st = 500, err = "out of memory";
                else if (rc == FLARE_CHUNKED_DONE && ex->traw_len != 0)
                    st = trailers_done(c, ex, &err);
                if (st == 0 && rc == FLARE_CHUNKED_DONE)
                    break;
                if (st == 0)
                    return false;
            }
            c->recv = NULL;
            framing_error(c, ex, st != 0 ? st : 400, err != NULL ? err : "invalid chunked body");
            return false;
        }
    } else {
        size_t take = avail < ex->body_need ? avail : (size_t)ex->body_need;
        if (flare__buf_append(&ex->bodybuf, p, take) != 0) {
            c->recv = NULL;
            framing_error(c, ex, 500, "out of memory");
            return false;
        }
        c->base.s.rpos += (uint32_t)take;
        ex->body_need -= take;
        if (ex->body_need > 0)
            return false;
    }
    c->recv = NULL;
    ex->body.ptr = ex->bodybuf.data;
    ex->body.len = ex->bodybuf.len;
    flare__http_dispatch(ex);
    return true;
}

/* Starts the body of a freshly parsed exchange. Returns true when it was
 * dispatched (body complete in the buffer), false when it waits (c->recv)
 * or failed. */
static bool start_body(h1conn_t *c, struct flare_req *ex)
{
    flare_app_t *app = h1_worker(c)->app;
    int64_t cl = ex->head.content_length;
    if ((ex->head.chunked || cl > 0) && flare__unlikely(flare__ex_body_route(ex))) {
        start_stream(c, ex);
        return false; /* the loop goes on with c->recv, or stops: closing */
    }
    if (ex->head.chunked) {
        chunked_start(ex);
        ex->bodybuf.len = 0;
        c->recv = ex;
        if (recv_body(c))
            return true;
        if (c->recv != ex)
            return false; /* failed */
    } else {
        if (cl > 0 && (uint64_t)cl > app->cfg.max_body) {
            framing_error(c, ex, 413, "request body too large");
            return false;
        }
        size_t avail = c->base.s.rlen - c->base.s.rpos;
        if (cl <= 0 || avail >= (uint64_t)cl) {
            if (cl > 0) {
                ex->body.ptr = c->base.s.rbuf + c->base.s.rpos;
                ex->body.len = (size_t)cl;
                c->base.s.rpos += (uint32_t)cl;
            }
            flare__http_dispatch(ex);
            return true;
        }
        ex->body_need = (uint64_t)cl;
        ex->bodybuf.len = 0;
        /* grow with the data, not with the claim: a client that declares
         * 1 MiB and sends little costs little */
        if (flare__buf_reserve(&ex->bodybuf, (size_t)(cl < 65536 ? cl : 65536)) != 0) {
            framing_error(c, ex, 500, "out of memory");
            return false;
        }
        c->recv = ex;
        recv_body(c); /* takes what is there */
    }
    /* body still arriving */
    if (flare__ex_detach(ex) != 0) {
        c->recv = NULL;
        framing_error(c, ex, 500, "out of memory");
        return false;
    }
    if (!expect_continue(c, ex)) {
        if (c->recv == ex)
            c->recv = NULL;
        return false;
    }
    return false;
}

/* The first attempt at a head always parses (the common case: it is all
 * there). After a partial parse the parser runs again only when the new
 * bytes complete a line (an error in it, or the end of the head, can only
 * show then) or a limit needs reporting. The parser fails past 100 fields
 * and 32 KiB, so a client sending a byte at a time costs a bounded number of
 * parses, not one per byte. */
static bool head_worth_parsing(h1conn_t *c, const char *p, size_t len)
{
    const flare_http_limits_t *lim = &h1_worker(c)->app->limits;
    size_t from = c->scan;
    c->scan = (uint32_t)len;
    if (from < len && memchr(p + from, '\n', len - from) != NULL) {
        c->flags |= C_LINE_SEEN;
        return true;
    }
    if (!(c->flags & C_LINE_SEEN) && len > lim->max_request_line)
        return true;            /* 414 */
    return len > lim->max_head; /* 431 */
}

/* HTTP/2 with prior knowledge (h2c, or h2 after ALPN): the client preface
 * is not an HTTP/1.1 head, so only the parser's error path looks for it,
 * and only when nothing else is in flight on the connection. true when it
 * was seen (C_H2: the caller hands the connection over) or may be still
 * arriving; the exchange is then dropped. */
static __attribute__((noinline)) bool h2_preface(h1conn_t *c, struct flare_req *ex, const char *p,
                                                 size_t len)
{
    bool partial;
    if (!flare__h2_preface(p, len, &partial))
        return false;
    c->qhead = c->qtail = NULL;
    c->nqueue = 0;
    flare__ex_put(h1_worker(c), ex);
    if (!partial)
        c->flags |= C_H2;
    return true;
}

/* RFC 9113 3.4: once ALPN chose h2 the client must begin with the HTTP/2
 * preface, and anything else is a connection error (GOAWAY
 * PROTOCOL_ERROR): the connection is HTTP/2's from its first byte, never
 * parsed as HTTP/1.1. The stream calls this when the TLS handshake is
 * done, inside the read that completed it: process() then leaves the bytes
 * alone and on_readable hands the connection over. Once per connection,
 * and only on TLS: HTTP/1.1's request path pays nothing. */
static void tls_open(flare_stream_t *s)
{
    h1conn_t *c = (h1conn_t *)s; /* s is the first member */
    flare_str_t alpn = flare__tls_alpn(s->tr);
    if (alpn.len == 2 && memcmp(alpn.ptr, "h2", 2) == 0)
        c->flags |= C_ALPN_H2;
}

static void process(h1conn_t *c)
{
    flare_worker_t *w = h1_worker(c);
    flare_app_t *app = w->app;
    c->flags |= C_IN_BATCH;
    while (!(c->flags & (C_DEAD | C_ALPN_H2))) {
        if (c->recv != NULL) {
            if (!recv_body(c))
                break;
            continue;
        }
        if (c->base.s.rpos == c->base.s.rlen || (c->flags & (C_CLOSING | C_UPGRADE)))
            break;
        if (c->nqueue >= MAX_INFLIGHT || flare__stream_unsent(&c->base.s) > MAX_UNSENT) {
            /* a client that sends but does not read: stop reading until its
             * responses drain, instead of buffering them without bound */
            c->flags |= C_READ_PAUSED;
            flare__stream_read_enable(&c->base.s, false);
            break;
        }
        const char *p = c->base.s.rbuf + c->base.s.rpos;
        size_t len = c->base.s.rlen - c->base.s.rpos;
        if (c->scan != 0 && !head_worth_parsing(c, p, len))
            break;
        struct flare_req *ex = flare__ex_get(w);
        if (ex == NULL) {
            conn_close(c);
            break;
        }
        int rc = flare__http_parse_head(p, len, &app->limits, &ex->head);
        if (rc == FLARE_PARSE_PARTIAL) {
            /* from now on, rescan only the new bytes until a head may be
             * complete: a client sending a byte at a time costs O(n) */
            c->scan = (uint32_t)len;
            if (memchr(p, '\n', len) != NULL)
                c->flags |= C_LINE_SEEN;
            flare__ex_put(w, ex);
            break;
        }
        enqueue(c, ex);
        c->flags |= C_HAD_REQUEST;
        if (rc < 0) {
            if (flare__unlikely(c->qhead == ex) && h2_preface(c, ex, p, len))
                break;
            framing_error(c, ex, ex->head.status, ex->head.error);
            break;
        }
        ex->raw = p;
        ex->raw_len = (size_t)rc;
        c->base.s.rpos += (uint32_t)rc;
        c->scan = 0;
        c->flags &= ~C_LINE_SEEN;
        if (!ex->head.keep_alive || w->draining)
            ex->flags |= EX_CLOSE;
        flare__http_route(app, ex);
        bool done = start_body(c, ex);
        if (ex->flags & EX_CLOSE) {
            c->flags |= C_CLOSING; /* no request after this one is read */
            /* read whole (not waiting for a body or a 100-continue) */
            if (done && !ex->head.keep_alive && !(ex->flags & EX_ERROR))
                c->flags |= C_PEER_CLOSE;
        }
        if (!done)
            continue; /* c->recv set, or closing: the loop condition decides */
        if (c->base.s.rpos < c->base.s.rlen)
            c->t_head = (uint32_t)w->loop.now;
    }
    c->flags &= ~C_IN_BATCH;
}

/* Frees the exchange whose body was still arriving (the queue's tail). */
static void drop_recv(h1conn_t *c)
{
    struct flare_req *ex = c->recv, **pp = &c->qhead, *prev = NULL;
    c->recv = NULL;
    while (*pp != NULL && *pp != ex) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    if (*pp == ex) {
        *pp = ex->next;
        if (c->qtail == ex)
            c->qtail = prev;
        c->nqueue--;
    }
    flare__ex_put(h1_worker(c), ex);
}

/* The client ended its side in the middle of a streamed body: the
 * exchange leaves the queue as an orphan and its handler gets
 * on_end(FLARE_ECLOSED) (then it is freed); earlier responses still go. */
static void stream_gone(h1conn_t *c)
{
    struct flare_req *ex = c->recv, **pp = &c->qhead, *prev = NULL;
    c->recv = NULL;
    c->flags &= ~(uint32_t)C_BODY_WAIT;
    while (*pp != NULL && *pp != ex) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    if (*pp == ex) {
        *pp = ex->next;
        if (c->qtail == ex)
            c->qtail = prev;
        c->nqueue--;
    }
    flare__ex_orphan(h1_worker(c), ex);
    flare__ex_body_end(ex, FLARE_ECLOSED);
}

static void on_readable(h1conn_t *c)
{
    flare_worker_t *w = h1_worker(c);
    flare_stream_t *s = &c->base.s;
    if (flare__unlikely(s->sflags & FLARE_S_LINGER)) {
        if (flare__stream_linger_read(s))
            conn_close(c);
        return;
    }
    do {
        if (s->rpos == s->rlen) {
            c->scan = 0;
            c->flags &= ~C_LINE_SEEN;
            c->t_head = (uint32_t)w->loop.now;
        }
        /* a head larger than the buffer grows it up to the head limit; the
         * parser reports 431/414 past it */
        ssize_t n = flare__stream_read(s, w->app->limits.max_head + 4096);
        if (n < 0) {
            if (n != -EAGAIN) {
                conn_close(c);
                return;
            }
            if (flare__unlikely(c->flags & C_ALPN_H2)) {
                flare__h2_start(&c->base); /* handshake done, no byte yet: our SETTINGS go now */
                return;
            }
            break; /* (TLS: a record not complete yet) what was parsed still goes out */
        }
        if (n == 0) {
            if (c->recv != NULL && (c->recv->flags & EX_BODY_STREAM))
                stream_gone(c); /* the handler hears it; nothing to answer */
            else if (c->recv != NULL)
                drop_recv(c);  /* its body can never complete */
            s->rpos = s->rlen; /* nor can a partial head */
            if (c->qhead == NULL && !flare__stream_has_output(s)) {
                conn_close_clean(c);
                return;
            }
            break; /* what the requests before the end produced still goes out */
        }
        flare__metrics_rx(w, (size_t)n);
        process(c);
        if (flare__unlikely(c->flags & (C_DEAD | C_H2 | C_ALPN_H2))) {
            if (!(c->flags & C_DEAD))
                flare__h2_start(&c->base); /* takes the connection over */
            return;
        }
        if (s->rpos > 0 && s->rpos < s->rlen &&
            (c->recv == NULL || (c->recv->flags & EX_BODY_STREAM))) {
            /* a partial head: move it to the front so the buffer has room */
            memmove(s->rbuf, s->rbuf + s->rpos, s->rlen - s->rpos);
            s->rlen -= s->rpos;
            s->rpos = 0;
        }
        /* TLS: records OpenSSL already holds are not seen by the poller */
    } while (flare__unlikely(flare__stream_has_pending(s)) &&
             !(c->flags & (C_READ_PAUSED | C_CLOSING | C_UPGRADE | C_BODY_WAIT)));
    flare__conn_flush(c);
    if (flare__likely(!(c->flags & (C_DEAD | C_STREAM_OUT)))) {
        flare__stream_idle(s);
    } else if (!(c->flags & C_DEAD)) {
        stream_out_check(c);
        if (!(c->flags & C_DEAD))
            flare__stream_idle(s);
    }
}

static void conn_io_cb(flare_loop_t *l, flare_io_t *io, uint32_t events)
{
    (void)l;
    h1conn_t *c = (h1conn_t *)io; /* io is the first member */
    if (c->flags & C_DEAD)
        return;
    events = flare__stream_ready(&c->base.s, events);
    if ((events & FLARE_IO_ERR) && !(events & FLARE_IO_READ)) {
        conn_close(c);
        return;
    }
    if (events & FLARE_IO_WRITE) {
        flare__conn_flush(c);
        if (c->flags & (C_DEAD | C_STREAM_OUT)) {
            if (!(c->flags & C_DEAD))
                stream_out_check(c);
            if (c->flags & C_DEAD)
                return;
        }
    }
    if (events & (FLARE_IO_READ | FLARE_IO_HUP | FLARE_IO_ERR)) {
        if ((c->base.s.sflags & FLARE_S_RD_EOF) && !(c->base.s.sflags & FLARE_S_LINGER)) {
            if (events & (FLARE_IO_HUP | FLARE_IO_ERR))
                conn_close(c);
            return;
        }
        on_readable(c);
    }
}

/* ---- timeouts: one coarse sweep per worker, no per-request timers ---- */

static void timeout_error(h1conn_t *c, int status, const char *msg)
{
    flare_worker_t *w = h1_worker(c);
    struct flare_req *ex = c->recv;
    if (ex != NULL && (ex->flags & EX_BODY_STREAM)) {
        c->base.s.rpos = c->base.s.rlen;
        stream_fail(c, FLARE_ETIMEDOUT, status, msg);
        if (!(c->flags & C_DEAD))
            flare__conn_flush(c);
        return;
    }
    c->recv = NULL;
    if (ex == NULL) {
        ex = flare__ex_get(w);
        if (ex == NULL) {
            conn_close(c);
            return;
        }
        enqueue(c, ex);
    }
    c->base.s.rpos = c->base.s.rlen;
    framing_error(c, ex, status, msg);
    if (!(c->flags & C_DEAD))
        flare__conn_flush(c);
}

/* Whether draining may close c once it has been idle for the grace: no
 * request in flight, none being read, no unread bytes, nothing to send. */
static bool drain_idle(const h1conn_t *c)
{
    return c->qhead == NULL && c->recv == NULL && c->base.s.rpos == c->base.s.rlen &&
           !flare__stream_has_output(&c->base.s);
}

/* ops->sweep: the deadlines of one HTTP/1.1 connection. */
static void h1_sweep(flare_conn_t *base, uint64_t now)
{
    h1conn_t *c = (h1conn_t *)base;
    flare_worker_t *w = h1_worker(c);
    const flare_config_t *cfg = &w->app->cfg;
    bool out_pending = flare__stream_has_output(&c->base.s);
    uint64_t t_active = c->base.s.t_active;
    if (w->draining && !(c->base.s.sflags & FLARE_S_LINGER) && drain_idle(c)) {
        /* nothing in flight (a TLS handshake counts as nothing):
         * closed once idle for the grace, whatever state it is in */
        if (now - t_active >= FLARE__DRAIN_IDLE_GRACE_MS)
            conn_close_clean(c);
    } else if (c->base.s.sflags & FLARE_S_LINGER) {
        if (now - t_active > FLARE_LINGER_MS)
            conn_close(c);
    } else if (flare__unlikely(flare__stream_handshaking(&c->base.s))) {
        /* counted from accept: a client trickling its hello gains nothing */
        if (now > c->base.s.tr->hs_deadline) {
            atomic_fetch_add_explicit(&w->tls_counters.handshake_timeouts, 1, memory_order_relaxed);
            flare__metrics_timeout(w, FLARE__TO_HANDSHAKE);
            conn_close(c);
        }
    } else if (out_pending && (c->base.s.sflags & FLARE_S_WANT_WRITE)) {
        if (now - t_active > cfg->write_timeout_ms) {
            flare__metrics_timeout(w, FLARE__TO_WRITE);
            conn_close(c);
        }
    } else if (c->recv != NULL) {
        /* a paused streamed body waits for its handler, not the client */
        if (!(c->flags & C_BODY_WAIT) && now - t_active > cfg->body_timeout_ms) {
            flare__metrics_timeout(w, FLARE__TO_BODY);
            timeout_error(c, 408, "request body timeout");
        }
    } else if (c->base.s.rpos < c->base.s.rlen && !(c->flags & C_READ_PAUSED)) {
        if ((uint32_t)now - c->t_head > cfg->header_timeout_ms) {
            flare__metrics_timeout(w, FLARE__TO_HEADER);
            timeout_error(c, 408, "request header timeout");
        }
    } else if (c->qhead == NULL && !out_pending) {
        unsigned limit = (c->flags & C_HAD_REQUEST) ? cfg->idle_timeout_ms : cfg->header_timeout_ms;
        if (w->draining ? now - t_active >= FLARE__DRAIN_IDLE_GRACE_MS : now - t_active > limit) {
            if (!w->draining)
                flare__metrics_timeout(w, FLARE__TO_IDLE);
            conn_close_clean(c);
        }
    }
}

/* The last queued response was serialized before the drain began, without
 * "Connection: close": add it, since it is the last one this connection
 * will carry. */
static void mark_last_close(h1conn_t *c)
{
    struct flare_req *ex = c->qtail;
    if (ex == NULL || (ex->flags & EX_CLOSE) || !(ex->flags & EX_SENT) || ex->out.len == 0 ||
        ex == c->qhead)
        return;
    static const char line[] = "Connection: close\r\n";
    size_t n = sizeof(line) - 1, at = ex->out_head_end;
    if (at == 0 || at > ex->out.len || flare__buf_reserve(&ex->out, n) != 0)
        return;
    memmove(ex->out.data + at + n, ex->out.data + at, ex->out.len - at);
    memcpy(ex->out.data + at, line, n);
    ex->out.len += n;
    ex->flags |= EX_CLOSE;
}

/* Graceful shutdown for one worker (SIGTERM, or an upgrade's hand-over):
 * the connections with work in flight finish it, their last response says
 * Connection: close; an idle connection is closed once it has been idle
 * for FLARE__DRAIN_IDLE_GRACE_MS (the sweep, every 100 ms while draining),
 * never at once: a client that just had a response may have its next
 * request on the wire, and closing under it would lose that request (the
 * client sees a reset or an EOF instead of an answer). A request that
 * arrives in the grace is answered, with Connection: close. Whatever is
 * left at the drain deadline is closed by the sweep. */
static void h1_drain(flare_conn_t *base)
{
    h1conn_t *c = (h1conn_t *)base;
    if (drain_idle(c)) {
        if (h1_worker(c)->loop.now - c->base.s.t_active >= FLARE__DRAIN_IDLE_GRACE_MS)
            conn_close_clean(c); /* idle long enough: nothing is on its way */
    } else {
        c->flags |= C_CLOSING;
        mark_last_close(c);
    }
}

/* ops->stats: the exchanges in flight; active while one is, or a head is
 * arriving. */
static void h1_stats(const flare_conn_t *base, flare_conn_stats_t *st)
{
    const h1conn_t *c = (const h1conn_t *)base;
    st->inflight = c->nqueue;
    st->next_out = c->qhead;
    st->active = c->qhead != NULL || c->recv != NULL || c->base.s.rpos < c->base.s.rlen;
}

const flare_conn_ops_t flare__h1_conn_ops = {
    .name = "http/1.1",
    .kind = FLARE_CONN_HTTP1,
    .closed = h1_closed,
    .sweep = h1_sweep,
    .drain = h1_drain,
    .free = h1_free,
    .stats = h1_stats,
};

/* HTTP/2 takes this object over in place (flare__h2_start). */
_Static_assert(sizeof(struct flare_h2conn) <= sizeof(h1conn_t), "HTTP/2 must fit in place");
