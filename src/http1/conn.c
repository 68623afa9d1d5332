/* The HTTP/1.1 connection state machine.
 *
 * Invariants:
 * - Parse before read: on_readable reads once, then handles every complete
 *   request in the buffer before returning; all responses produced by one
 *   read batch leave in one write/writev (flush at the end of the batch).
 * - Responses go out in request order: exchanges sit in c->qhead..qtail; the
 *   head of the queue serializes straight into c->wbuf, later ones into their
 *   own ex->out until they become the head.
 * - When process() returns, no exchange holds a view into c->rbuf: one that
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
#include "server.h"

#define MAX_UNSENT   (1u << 20) /* response bytes waiting for a slow reader */
#define MAX_INFLIGHT 64         /* pipelined requests in flight before we stop reading */
#define LINGER_MS    2000       /* read-and-discard time after an error response */
#define MAX_IOV      64

static void conn_io_cb(flare_loop_t *l, flare_io_t *io, uint32_t events);
static void process(flare_conn_t *c);
static void queue_advance(flare_conn_t *c);

/* ---- worker pools ---- */

char *flare__worker_buf_get(flare_worker_t *w)
{
    flare_pool_buf_t *b = w->bufs;
    if (b != NULL) {
        w->bufs = b->next;
        w->nbufs--;
        return (char *)b;
    }
    return malloc(FLARE_CONN_BUF);
}

void flare__worker_buf_put(flare_worker_t *w, char *buf)
{
    if (w->nbufs >= 1024) {
        free(buf);
        return;
    }
    flare_pool_buf_t *b = (flare_pool_buf_t *)(void *)buf;
    b->next = w->bufs;
    w->bufs = b;
    w->nbufs++;
}

struct flare_req *flare__ex_get(flare_worker_t *w)
{
    struct flare_req *ex = w->free_ex;
    if (ex != NULL) {
        w->free_ex = ex->next;
        w->nfree_ex--;
    } else {
        ex = calloc(1, sizeof(*ex));
        if (ex == NULL)
            return NULL;
        ex->headers = malloc(w->app->limits.max_headers * sizeof(flare_header_t));
        if (ex->headers == NULL) {
            free(ex);
            return NULL;
        }
        flare__arena_init(&ex->arena);
        ex->worker = w;
        ex->file_fd = -1;
    }
    ex->next = NULL;
    ex->flags = 0;
    ex->route = NULL;
    ex->head.headers = ex->headers;
    ex->body.ptr = NULL;
    ex->body.len = 0;
    ex->match.nparams = 0;
    ex->match.route = NULL;
    ex->match.allowed = 0;
    ex->chain = NULL;
    ex->nchain = ex->mw_pos = 0;
    ex->res.status = 0;
    ex->res.hdrs = NULL;
    ex->res.hdrs_tail = &ex->res.hdrs;
    ex->cleanups = NULL;
    ex->attrs = NULL;
    ex->bodybuf.len = 0;
    ex->out.len = 0;
    return ex;
}

void flare__ex_put(flare_worker_t *w, struct flare_req *ex)
{
    if (ex->flags & EX_ORPHAN) {
        if (ex->oprev != NULL)
            ex->oprev->next = ex->next;
        else
            w->orphans = ex->next;
        if (ex->next != NULL)
            ex->next->oprev = ex->oprev;
        ex->flags &= ~(uint32_t)EX_ORPHAN;
    }
    while (ex->cleanups != NULL) {
        flare_cleanup_t *cl = ex->cleanups;
        ex->cleanups = cl->next;
        cl->fn(cl->ud);
    }
    if (flare__arena_used(&ex->arena))
        flare__arena_reset(&ex->arena);
    /* keep small buffers for the next exchange; give big ones back */
    if (ex->bodybuf.cap > 65536)
        flare__buf_free(&ex->bodybuf);
    if (ex->out.cap > 65536)
        flare__buf_free(&ex->out);
    ex->conn = NULL;
    if (w->nfree_ex >= 256) {
        flare__arena_dispose(&ex->arena);
        flare__buf_free(&ex->bodybuf);
        flare__buf_free(&ex->out);
        free(ex->headers);
        free(ex);
        return;
    }
    ex->next = w->free_ex;
    w->free_ex = ex;
    w->nfree_ex++;
}

/* ---- open / close ---- */

void flare__conn_open(flare_worker_t *w, int fd, const struct sockaddr *sa)
{
    flare_conn_t *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        close(fd);
        return;
    }
    if (sa != NULL && sa->sa_family == AF_INET) {
        memcpy(c->peer, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, 4);
        c->peer_family = AF_INET;
    } else if (sa != NULL && sa->sa_family == AF_INET6) {
        memcpy(c->peer, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, 16);
        c->peer_family = AF_INET6;
    }
    c->io.fd = fd;
    c->io.cb = conn_io_cb;
    c->w = w;
    if (flare__loop_add(&w->loop, &c->io, FLARE_IO_READ) != 0) {
        close(fd);
        free(c);
        return;
    }
    c->t_active = c->t_head = w->loop.now;
    c->next = w->conns;
    if (w->conns != NULL)
        w->conns->prev = c;
    w->conns = c;
    w->nconns++;
}

static void release_segs(flare_conn_t *c)
{
    for (uint32_t i = 0; i < c->nsegs; i++) {
        if (c->segs[i].release != NULL)
            c->segs[i].release(c->segs[i].ud);
    }
    c->nsegs = 0;
}

static inline void give_back_buffers(flare_conn_t *c)
{
    flare_worker_t *w = c->w;
    if (c->rbuf != NULL && c->rpos == c->rlen) {
        if (c->rcap == FLARE_CONN_BUF)
            flare__worker_buf_put(w, c->rbuf);
        else
            free(c->rbuf);
        c->rbuf = NULL;
        c->rlen = c->rpos = c->rcap = 0;
    }
    if (c->wbuf.data != NULL && c->wbuf.len == 0 && c->nsegs == 0) {
        if (c->wbuf.cap == FLARE_CONN_BUF)
            flare__worker_buf_put(w, c->wbuf.data);
        else
            free(c->wbuf.data);
        c->wbuf.data = NULL;
        c->wbuf.cap = 0;
    }
}

void flare__conn_close(flare_conn_t *c)
{
    if (c->flags & C_DEAD)
        return;
    flare_worker_t *w = c->w;
    c->flags |= C_DEAD;
    if ((c->flags & C_UPGRADE) && c->upgrade_fn != NULL) {
        /* the 101 never got out: the would-be owner learns it with fd -1 */
        c->flags &= ~(uint32_t)C_UPGRADE;
        c->upgrade_fn(w, -1, NULL, 0, c->upgrade_ud);
    }
    if (c->io.fd >= 0) {
        flare__loop_del(&w->loop, &c->io);
        close(c->io.fd);
        c->io.fd = -1;
    }

    /* in-flight exchanges: finished ones are recycled, the others are
     * orphaned so a late send is a no-op that frees them */
    struct flare_req *ex = c->qhead;
    while (ex != NULL) {
        struct flare_req *next = ex->next;
        ex->conn = NULL;
        ex->next = NULL;
        /* finished ones, and the one still receiving its body (no handler
         * has seen it, none will send), are freed now */
        if (((ex->flags & EX_SENT) && !(ex->flags & EX_IN_HANDLER)) || ex == c->recv)
            flare__ex_put(w, ex);
        else {
            ex->flags |= EX_ORPHAN;
            ex->oprev = NULL;
            ex->next = w->orphans;
            if (w->orphans != NULL)
                w->orphans->oprev = ex;
            w->orphans = ex;
        }
        ex = next;
    }
    c->qhead = c->qtail = c->recv = NULL;
    c->nqueue = 0;
    release_segs(c);
    c->wbuf.len = 0;
    c->rpos = c->rlen;
    give_back_buffers(c);
    free(c->segs);
    c->segs = NULL;

    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        w->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    w->nconns--;
    c->next = w->dead;
    w->dead = c;
    w->loop.deferred = true;
}

void flare__conn_free_dead(flare_worker_t *w)
{
    while (w->dead != NULL) {
        flare_conn_t *c = w->dead;
        w->dead = c->next;
        free(c);
    }
}

/* Error responses leave the connection through a lingering close: shut the
 * write side so the response is not lost to a RST, then read and discard
 * until EOF or LINGER_MS (nginx's lingering_close). */
static void start_linger(flare_conn_t *c)
{
    if (c->flags & C_RD_EOF) {
        flare__conn_close(c);
        return;
    }
    shutdown(c->io.fd, SHUT_WR);
    c->flags |= C_LINGER;
    c->t_active = c->w->loop.now;
    c->rpos = c->rlen;
    give_back_buffers(c);
    flare__loop_mod(&c->w->loop, &c->io, FLARE_IO_READ);
}

/* ---- output ---- */

/* The 101 is out: the socket and the bytes after the upgrade request go
 * to their new owner; this connection object ends without closing the fd. */
static void handoff(flare_conn_t *c)
{
    flare_worker_t *w = c->w;
    int fd = c->io.fd;
    flare__loop_del(&w->loop, &c->io);
    c->io.fd = -1;
    flare_upgrade_fn fn = c->upgrade_fn;
    void *ud = c->upgrade_ud;
    c->flags &= ~(uint32_t)C_UPGRADE; /* handed over: closing c must not report a failure */
    const char *pending = c->rbuf != NULL ? c->rbuf + c->rpos : NULL;
    size_t npending = c->rbuf != NULL ? c->rlen - c->rpos : 0;
    fn(w, fd, pending, npending, ud);
    flare__conn_close(c);
}

/* All output is written. Returns true when reading resumed and the
 * requests already buffered produced more output (flush again). */
static bool after_output(flare_conn_t *c)
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
    if (c->flags & C_RD_EOF) {
        flare__conn_close(c);
        return false;
    }
    if (c->flags & C_READ_PAUSED) {
        c->flags &= ~C_READ_PAUSED;
        flare__loop_mod(&c->w->loop, &c->io, FLARE_IO_READ);
        /* requests already buffered while paused: their responses are
         * flushed by the caller's loop (not here: no recursion) */
        if (c->rpos < c->rlen) {
            process(c);
            return !(c->flags & C_DEAD) && (c->wbuf.len > 0 || c->nsegs > 0);
        }
    }
    return false;
}

int flare__conn_add_seg(flare_conn_t *c, const flare_outseg_t *seg)
{
    if (c->nsegs == c->capsegs) {
        uint32_t cap = c->capsegs != 0 ? c->capsegs * 2 : 4;
        flare_outseg_t *s = realloc(c->segs, cap * sizeof(*s));
        if (s == NULL) {
            if (seg->release != NULL)
                seg->release(seg->ud);
            return FLARE_ENOMEM;
        }
        c->segs = s;
        c->capsegs = cap;
    }
    c->segs[c->nsegs] = *seg;
    c->segs[c->nsegs].at = c->wbuf.len;
    c->nsegs++;
    return 0;
}

/* Response bytes produced but not yet written (wbuf and segments). */
static size_t unsent(const flare_conn_t *c)
{
    size_t all = c->wbuf.len;
    for (uint32_t i = 0; i < c->nsegs; i++)
        all += c->segs[i].len;
    return all - c->wsent;
}

/* Sends what of file segment i is not yet written, starting `skip` bytes
 * into it. Returns bytes sent, or -errno. */
static ssize_t send_file_seg(flare_conn_t *c, const flare_outseg_t *seg, size_t skip)
{
    off_t off = (off_t)(seg->off + skip);
    size_t n = seg->len - skip;
    if (n > (1u << 30))
        n = 1u << 30;
    ssize_t wr = sendfile(c->io.fd, seg->fd, &off, n);
    if (wr < 0)
        return -errno;
    if (wr == 0)
        return -EIO; /* the file shrank under us: the promised length cannot be kept */
    return wr;
}

/* The general output path: borrowed segments, file ranges, partial writes,
 * and what follows the output (flare__conn_flush takes the common case). */
static bool flush_once(flare_conn_t *c)
{
    while (c->wbuf.len > 0 || c->nsegs > 0) {
        struct iovec iov[MAX_IOV];
        int n = 0;
        size_t skip = c->wsent, wpos = 0, total = 0;
        const flare_outseg_t *file = NULL; /* the next unsent piece is this file range */
        size_t file_skip = 0;
        bool more = false; /* a file range follows the gathered bytes */
        for (uint32_t i = 0; i <= c->nsegs && n < MAX_IOV; i++) {
            size_t at = i < c->nsegs ? c->segs[i].at : c->wbuf.len;
            /* wbuf bytes [wpos, at) */
            size_t part = at - wpos;
            if (skip >= part) {
                skip -= part;
            } else {
                iov[n].iov_base = c->wbuf.data + wpos + skip;
                iov[n].iov_len = part - skip;
                total += part - skip;
                n++;
                skip = 0;
            }
            wpos = at;
            if (i == c->nsegs || n == MAX_IOV)
                break;
            if (skip >= c->segs[i].len) {
                skip -= c->segs[i].len;
            } else if (c->segs[i].fd >= 0) {
                /* gathered bytes go first (with MSG_MORE: the file follows);
                 * the file range itself by sendfile on its own turn */
                if (n == 0) {
                    file = &c->segs[i];
                    file_skip = skip;
                } else {
                    more = true;
                }
                break;
            } else {
                iov[n].iov_base = (char *)c->segs[i].ptr + skip;
                iov[n].iov_len = c->segs[i].len - skip;
                total += c->segs[i].len - skip;
                n++;
                skip = 0;
            }
        }
        ssize_t wr;
        if (file != NULL) {
            total = file->len - file_skip;
            wr = send_file_seg(c, file, file_skip);
        } else if (more) {
            struct msghdr mh = { .msg_iov = iov, .msg_iovlen = (size_t)n };
            wr = sendmsg(c->io.fd, &mh, MSG_MORE | MSG_NOSIGNAL);
            if (wr < 0)
                wr = -errno;
        } else {
            wr = n == 1 ? flare__write(c->io.fd, iov[0].iov_base, iov[0].iov_len)
                        : flare__writev(c->io.fd, iov, n);
        }
        if (wr < 0) {
            if (wr == -EINTR)
                continue;
            if (wr == -EAGAIN) {
                if (!(c->flags & C_WANT_WRITE)) {
                    c->flags |= C_WANT_WRITE;
                    c->t_active = c->w->loop.now;
                    uint32_t ev = FLARE_IO_WRITE |
                                  (c->flags & (C_RD_EOF | C_READ_PAUSED) ? 0 : FLARE_IO_READ);
                    flare__loop_mod(&c->w->loop, &c->io, ev);
                }
                return false;
            }
            flare__conn_close(c);
            return false;
        }
        c->t_active = c->w->loop.now;
        size_t all = c->wbuf.len;
        for (uint32_t i = 0; i < c->nsegs; i++)
            all += c->segs[i].len;
        c->wsent += (size_t)wr;
        if (c->wsent == all) {
            c->wbuf.len = 0;
            c->wsent = 0;
            release_segs(c);
            break;
        }
        if ((size_t)wr < total) {
            /* short write: the socket is full; wait for FLARE_IO_WRITE */
            if (!(c->flags & C_WANT_WRITE)) {
                c->flags |= C_WANT_WRITE;
                uint32_t ev =
                    FLARE_IO_WRITE | (c->flags & (C_RD_EOF | C_READ_PAUSED) ? 0 : FLARE_IO_READ);
                flare__loop_mod(&c->w->loop, &c->io, ev);
            }
            return false;
        }
    }
    if (c->flags & C_WANT_WRITE) {
        c->flags &= ~C_WANT_WRITE;
        uint32_t ev = c->flags & (C_RD_EOF | C_READ_PAUSED) ? 0 : FLARE_IO_READ;
        flare__loop_mod(&c->w->loop, &c->io, ev);
    }
    return after_output(c);
}

void flare__conn_flush(flare_conn_t *c)
{
    /* the common case, without a call: one buffer, nothing borrowed,
     * nothing sent yet, and nothing to do once it is out */
    if (flare__likely(
            c->nsegs == 0 && c->wsent == 0 && c->wbuf.len > 0 &&
            !(c->flags & (C_WANT_WRITE | C_CLOSING | C_RD_EOF | C_READ_PAUSED | C_UPGRADE)))) {
        ssize_t wr = flare__write(c->io.fd, c->wbuf.data, c->wbuf.len);
        if (flare__likely((size_t)wr == c->wbuf.len)) {
            c->wbuf.len = 0;
            c->t_active = c->w->loop.now;
            return;
        }
        if (wr > 0) {
            c->wsent = (size_t)wr; /* flush_once takes the rest */
        } else if (wr != -EAGAIN && wr != -EINTR) {
            flare__conn_close(c);
            return;
        }
    }
    while (flush_once(c)) {
    }
}

static void close_file(void *ud)
{
    close((int)(intptr_t)ud);
}

int flare__conn_push_file(flare_conn_t *c, int fd, uint64_t off, uint64_t len)
{
    flare_outseg_t seg = { 0, NULL, (size_t)len, close_file, (void *)(intptr_t)fd, fd, off };
    return flare__conn_add_seg(c, &seg);
}

/* ---- exchange queue ---- */

static void enqueue(flare_conn_t *c, struct flare_req *ex)
{
    ex->conn = c;
    ex->next = NULL;
    if (c->qtail != NULL)
        c->qtail->next = ex;
    else
        c->qhead = ex;
    c->qtail = ex;
    c->nqueue++;
}

static void send_continue(flare_conn_t *c, struct flare_req *ex);

/* queue_advance runs inside flush paths: queue the 100 without flushing. */
static void send_continue_later(flare_conn_t *c, struct flare_req *ex)
{
    uint32_t batch = c->flags & C_IN_BATCH;
    c->flags |= C_IN_BATCH;
    send_continue(c, ex);
    c->flags = (c->flags & ~(uint32_t)C_IN_BATCH) | batch;
}

/* Pops finished exchanges off the head of the queue; a new head moves its
 * privately buffered output into the connection buffer. */
static void queue_advance(flare_conn_t *c)
{
    struct flare_req *ex;
    while ((ex = c->qhead) != NULL) {
        if (ex->out.len > 0) {
            if (flare__buf_append(&c->wbuf, ex->out.data, ex->out.len) != 0) {
                flare__conn_close(c);
                return;
            }
            ex->out.len = 0;
            /* a file body follows its head (which is never empty) */
            if (flare__unlikely(ex->file_fd >= 0)) {
                int fd = ex->file_fd;
                ex->file_fd = -1; /* the pending-file cleanup has nothing left to close */
                if (flare__conn_push_file(c, fd, ex->file_off, ex->file_len) != 0) {
                    flare__conn_close(c);
                    return;
                }
            }
        }
        if (!(ex->flags & EX_SENT) || (ex->flags & EX_IN_HANDLER)) {
            if (ex->flags & EX_NEED_CONTINUE)
                send_continue_later(c, ex);
            return;
        }
        if (ex->flags & EX_CLOSE)
            c->flags |= C_CLOSING;
        c->qhead = ex->next;
        if (c->qhead == NULL)
            c->qtail = NULL;
        c->nqueue--;
        flare__ex_put(c->w, ex);
    }
}

/* Called when a response is complete, or more output was produced. */
void flare__ex_complete(struct flare_req *ex)
{
    flare_conn_t *c = ex->conn;
    if (c == NULL) {
        if ((ex->flags & EX_ORPHAN) && (ex->flags & EX_SENT) && !(ex->flags & EX_IN_HANDLER))
            flare__ex_put(ex->worker, ex);
        return;
    }
    if (c->qhead != ex)
        return;
    queue_advance(c);
    if (!(c->flags & (C_IN_BATCH | C_DEAD)))
        flare__conn_flush(c);
}

/* ---- request handling ---- */

static void rebase(flare_str_t *s, const char *old, size_t len, const char *new)
{
    if (s->ptr >= old && s->ptr <= old + len)
        s->ptr = new + (s->ptr - old);
}

/* Copies the head (and a body still in the read buffer) into the exchange's
 * arena so it survives the read buffer. */
static int detach(struct flare_req *ex)
{
    if (ex->flags & EX_DETACHED)
        return 0;
    const char *old = ex->raw;
    size_t len = ex->raw_len;
    char *copy = flare__arena_dup(&ex->arena, old, len);
    if (copy == NULL)
        return FLARE_ENOMEM;
    flare_http_head_t *h = &ex->head;
    rebase(&h->method, old, len, copy);
    rebase(&h->target, old, len, copy);
    rebase(&h->path, old, len, copy);
    rebase(&h->query, old, len, copy);
    rebase(&h->host, old, len, copy);
    for (size_t i = 0; i < h->nheaders; i++) {
        rebase(&h->headers[i].name, old, len, copy);
        rebase(&h->headers[i].value, old, len, copy);
    }
    for (unsigned i = 0; i < ex->match.nparams; i++)
        rebase(&ex->match.params[i].value, old, len, copy);
    if (ex->body.len > 0 && ex->bodybuf.data != ex->body.ptr) {
        char *b = flare__arena_dup(&ex->arena, ex->body.ptr, ex->body.len);
        if (b == NULL)
            return FLARE_ENOMEM;
        ex->body.ptr = b;
    }
    ex->raw = copy;
    ex->flags |= EX_DETACHED;
    return 0;
}

static void set_chain(flare_app_t *app, struct flare_req *ex)
{
    if (ex->route != NULL) {
        ex->chain = ex->route->chain;
        ex->nchain = ex->route->nchain;
        if (ex->route->has_after)
            ex->flags |= EX_HAS_AFTER;
    } else {
        ex->chain = app->mws.v;
        ex->nchain = (uint32_t)app->mws.n;
        if (app->mws_have_after)
            ex->flags |= EX_HAS_AFTER;
    }
}

/* A path with %-escapes is routed, and seen by handlers, in its normal
 * form (unreserved characters decoded, hex upper-cased: `/pl%61intext` is
 * `/plaintext`, `/a%2fb` one segment `/a%2Fb`), copied into the arena. The
 * parser flags such paths while it scans the target: the others pay one
 * test. Out of memory: routed as sent. */
__attribute__((noinline)) static void normalize_path(struct flare_req *ex)
{
    flare_str_t p = ex->head.path;
    char *out = p.ptr[0] == '/' ? flare__arena_alloc(&ex->arena, p.len) : NULL;
    if (out != NULL)
        ex->head.path = (flare_str_t){ out, flare__router_normalize_path(p, out) };
}

static void route(flare_app_t *app, struct flare_req *ex)
{
    flare_method_t m = ex->head.method_id;
    if (flare__unlikely(ex->head.path_pct))
        normalize_path(ex);
    if (m == FLARE_METHOD_HEAD)
        ex->flags |= EX_HEAD_ONLY;
    if (flare__router_match(app->router, m, ex->head.path, &ex->match)) {
        ex->route = ex->match.route;
    } else if (m == FLARE_METHOD_HEAD &&
               flare__router_match(app->router, FLARE_METHOD_GET, ex->head.path, &ex->match)) {
        ex->route = ex->match.route;
    } else {
        ex->route = NULL;
        ex->match.nparams = 0;
        uint32_t allowed = ex->match.allowed;
        if (allowed != 0) {
            /* 405 or automatic OPTIONS on a path that has routes: run the
             * middlewares of that path's routes (a group's CORS must see
             * its preflights), then the automatic answer */
            flare_route_match_t other;
            flare_method_t om = (flare_method_t)__builtin_ctz(allowed);
            if (flare__router_match(app->router, om, ex->head.path, &other)) {
                const flare_route_t *r = other.route;
                ex->chain = r->chain;
                ex->nchain = r->nchain;
                if (r->has_after)
                    ex->flags |= EX_HAS_AFTER;
                return;
            }
        }
    }
    set_chain(app, ex);
}

/* Runs the chain from where it stands (start, or a paused before hook) and
 * settles the outcome: answered, asynchronous (detach), or an error. */
static void run_chain(struct flare_req *ex)
{
    ex->flags |= EX_IN_HANDLER;
    int rc = flare__chain_run(ex);
    ex->flags &= ~EX_IN_HANDLER;
    if (ex->flags & EX_ORPHAN) {
        if (ex->flags & EX_SENT)
            flare__ex_put(ex->worker, ex);
        return;
    }
    if (!(ex->flags & EX_SENT)) {
        if (rc == FLARE_ASYNC) {
            if (detach(ex) != 0) {
                ex->flags |= EX_CLOSE;
                flare__res_error(ex, 500, "out of memory");
            }
        } else if (!(ex->flags & EX_STREAM)) {
            ex->flags |= EX_CLOSE;
            flare__res_error(ex, 500,
                             rc < 0 ? flare_strerror(rc) : "handler returned without a response");
        } else if (detach(ex) != 0) {
            flare_res_close(&ex->res);
            flare_res_end(&ex->res);
        }
    }
    flare__ex_complete(ex);
}

static void dispatch(flare_conn_t *c, struct flare_req *ex)
{
    (void)c;
    if (ex->flags & EX_SENT)
        return;
    run_chain(ex);
}

void flare_next(flare_req_t *req)
{
    struct flare_req *ex = req;
    if (ex->flags & (EX_SENT | EX_STREAM | EX_IN_HANDLER))
        return;
    if (ex->flags & EX_ORPHAN) {
        /* the client is gone: nothing to resume; free the exchange */
        ex->flags |= EX_SENT;
        flare__ex_put(ex->worker, ex);
        return;
    }
    run_chain(ex);
}

/* Error for an exchange being parsed: answer and stop reading requests. */
static void framing_error(flare_conn_t *c, struct flare_req *ex, int status, const char *msg)
{
    ex->flags |= EX_CLOSE | EX_ERROR;
    c->flags |= C_CLOSING;
    flare__res_error(ex, status, msg);
    flare__ex_complete(ex);
}

static const char continue_line[] = "HTTP/1.1 100 Continue\r\n\r\n";

static void send_continue(flare_conn_t *c, struct flare_req *ex)
{
    ex->flags &= ~(uint32_t)EX_NEED_CONTINUE;
    if (c->recv != ex)
        return; /* the body arrived anyway */
    if (flare__buf_append(&c->wbuf, continue_line, sizeof(continue_line) - 1) == 0 &&
        !(c->flags & (C_IN_BATCH | C_DEAD)))
        flare__conn_flush(c);
}

/* Expect: 100-continue with the body not here yet: 100 only when the route
 * exists and the size is allowed; otherwise the final status and close. */
static bool expect_continue(flare_conn_t *c, struct flare_req *ex)
{
    if (!ex->head.expect_continue)
        return true;
    if (ex->route == NULL) {
        ex->flags |= EX_CLOSE;
        c->flags |= C_CLOSING;
        dispatch(c, ex); /* 404 / 405 */
        return false;
    }
    /* the 100 must not overtake earlier responses: it goes out when this
     * exchange becomes the head of the queue */
    ex->flags |= EX_NEED_CONTINUE;
    if (c->qhead == ex)
        send_continue(c, ex);
    return true;
}

/* Continues receiving the body of c->recv from the read buffer. Returns
 * true when the exchange was dispatched and parsing may go on. */
static bool recv_body(flare_conn_t *c)
{
    struct flare_req *ex = c->recv;
    const char *p = c->rbuf + c->rpos;
    size_t avail = c->rlen - c->rpos;
    if (ex->head.chunked) {
        for (;;) {
            size_t used = 0;
            flare_str_t data;
            int st = 0;
            const char *err = NULL;
            int rc = flare__chunked_decode(&ex->chunked, p, avail, c->w->app->cfg.max_body, &used,
                                           &data, &st, &err);
            p += used;
            avail -= used;
            c->rpos += (uint32_t)used;
            if (rc == FLARE_CHUNKED_DATA) {
                if (flare__buf_append(&ex->bodybuf, data.ptr, data.len) != 0) {
                    c->recv = NULL;
                    framing_error(c, ex, 500, "out of memory");
                    return false;
                }
                continue;
            }
            if (rc == FLARE_CHUNKED_DONE)
                break;
            if (rc == FLARE_PARSE_PARTIAL)
                return false;
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
        c->rpos += (uint32_t)take;
        ex->body_need -= take;
        if (ex->body_need > 0)
            return false;
    }
    c->recv = NULL;
    ex->body.ptr = ex->bodybuf.data;
    ex->body.len = ex->bodybuf.len;
    dispatch(c, ex);
    return true;
}

/* Starts the body of a freshly parsed exchange. Returns true when it was
 * dispatched (body complete in the buffer), false when it waits (c->recv)
 * or failed. */
static bool start_body(flare_conn_t *c, struct flare_req *ex)
{
    flare_app_t *app = c->w->app;
    int64_t cl = ex->head.content_length;
    if (ex->head.chunked) {
        flare__chunked_init(&ex->chunked);
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
        size_t avail = c->rlen - c->rpos;
        if (cl <= 0 || avail >= (uint64_t)cl) {
            if (cl > 0) {
                ex->body.ptr = c->rbuf + c->rpos;
                ex->body.len = (size_t)cl;
                c->rpos += (uint32_t)cl;
            }
            dispatch(c, ex);
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
    if (detach(ex) != 0) {
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
static bool head_worth_parsing(flare_conn_t *c, const char *p, size_t len)
{
    const flare_http_limits_t *lim = &c->w->app->limits;
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

static void process(flare_conn_t *c)
{
    flare_worker_t *w = c->w;
    flare_app_t *app = w->app;
    c->flags |= C_IN_BATCH;
    while (!(c->flags & C_DEAD)) {
        if (c->recv != NULL) {
            if (!recv_body(c))
                break;
            continue;
        }
        if (c->rpos == c->rlen || (c->flags & (C_CLOSING | C_UPGRADE)))
            break;
        if (c->nqueue >= MAX_INFLIGHT ||
            (c->nsegs == 0 ? c->wbuf.len - c->wsent : unsent(c)) > MAX_UNSENT) {
            /* a client that sends but does not read: stop reading until its
             * responses drain, instead of buffering them without bound */
            c->flags |= C_READ_PAUSED;
            flare__loop_mod(&w->loop, &c->io, c->io.events & ~(uint32_t)FLARE_IO_READ);
            break;
        }
        const char *p = c->rbuf + c->rpos;
        size_t len = c->rlen - c->rpos;
        if (c->scan != 0 && !head_worth_parsing(c, p, len))
            break;
        struct flare_req *ex = flare__ex_get(w);
        if (ex == NULL) {
            flare__conn_close(c);
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
            framing_error(c, ex, ex->head.status, ex->head.error);
            break;
        }
        ex->raw = p;
        ex->raw_len = (size_t)rc;
        c->rpos += (uint32_t)rc;
        c->scan = 0;
        c->flags &= ~C_LINE_SEEN;
        if (!ex->head.keep_alive || w->draining)
            ex->flags |= EX_CLOSE;
        route(app, ex);
        bool done = start_body(c, ex);
        if (ex->flags & EX_CLOSE)
            c->flags |= C_CLOSING; /* no request after this one is read */
        if (!done)
            continue; /* c->recv set, or closing: the loop condition decides */
        if (c->rpos < c->rlen)
            c->t_head = w->loop.now;
    }
    c->flags &= ~C_IN_BATCH;
}

/* Frees the exchange whose body was still arriving (the queue's tail). */
static void drop_recv(flare_conn_t *c)
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
    flare__ex_put(c->w, ex);
}

static void on_readable(flare_conn_t *c)
{
    flare_worker_t *w = c->w;
    if (c->flags & C_LINGER) {
        char tmp[4096];
        ssize_t n = read(c->io.fd, tmp, sizeof(tmp));
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
            flare__conn_close(c);
        return;
    }
    if (c->rbuf == NULL) {
        c->rbuf = flare__worker_buf_get(w);
        if (c->rbuf == NULL) {
            flare__conn_close(c);
            return;
        }
        c->rcap = FLARE_CONN_BUF;
        c->rlen = c->rpos = 0;
    }
    if (c->rpos == c->rlen) {
        c->rpos = c->rlen = 0;
        c->scan = 0;
        c->flags &= ~C_LINE_SEEN;
        c->t_head = w->loop.now;
    } else if (c->rlen == c->rcap) {
        if (c->rpos > 0) {
            memmove(c->rbuf, c->rbuf + c->rpos, c->rlen - c->rpos);
            c->rlen -= c->rpos;
            c->rpos = 0;
        } else {
            /* a head larger than the buffer: grow up to the head limit; the
             * parser reports 431/414 past it */
            size_t cap = (size_t)c->rcap * 2;
            size_t limit = w->app->limits.max_head + 4096;
            if (cap > limit)
                cap = limit;
            if (cap <= c->rcap) {
                flare__conn_close(c);
                return;
            }
            char *nb = malloc(cap);
            if (nb == NULL) {
                flare__conn_close(c);
                return;
            }
            memcpy(nb, c->rbuf, c->rlen);
            if (c->rcap == FLARE_CONN_BUF)
                flare__worker_buf_put(w, c->rbuf);
            else
                free(c->rbuf);
            c->rbuf = nb;
            c->rcap = (uint32_t)cap;
        }
    }
    ssize_t n;
    do {
        n = flare__read(c->io.fd, c->rbuf + c->rlen, c->rcap - c->rlen);
    } while (n == -EINTR);
    if (n < 0) {
        if (n != -EAGAIN)
            flare__conn_close(c);
        else
            give_back_buffers(c);
        return;
    }
    if (n == 0) {
        c->flags |= C_RD_EOF;
        if (c->recv != NULL)
            drop_recv(c);  /* its body can never complete */
        c->rpos = c->rlen; /* nor can a partial head */
        if (c->qhead == NULL && c->wbuf.len == 0 && c->nsegs == 0) {
            flare__conn_close(c);
            return;
        }
        flare__loop_mod(&w->loop, &c->io, c->io.events & ~(uint32_t)FLARE_IO_READ);
        give_back_buffers(c);
        return;
    }
    c->rlen += (uint32_t)n;
    c->t_active = w->loop.now;
    process(c);
    if (c->flags & C_DEAD)
        return;
    if (c->rpos > 0 && c->rpos < c->rlen && c->recv == NULL) {
        /* a partial head: move it to the front so the buffer has room */
        memmove(c->rbuf, c->rbuf + c->rpos, c->rlen - c->rpos);
        c->rlen -= c->rpos;
        c->rpos = 0;
    }
    flare__conn_flush(c);
    if (!(c->flags & C_DEAD))
        give_back_buffers(c);
}

static void conn_io_cb(flare_loop_t *l, flare_io_t *io, uint32_t events)
{
    (void)l;
    flare_conn_t *c = (flare_conn_t *)io; /* io is the first member */
    if (c->flags & C_DEAD)
        return;
    if ((events & FLARE_IO_ERR) && !(events & FLARE_IO_READ)) {
        flare__conn_close(c);
        return;
    }
    if (events & FLARE_IO_WRITE) {
        flare__conn_flush(c);
        if (c->flags & C_DEAD)
            return;
    }
    if (events & (FLARE_IO_READ | FLARE_IO_HUP | FLARE_IO_ERR)) {
        if ((c->flags & C_RD_EOF) && !(c->flags & C_LINGER)) {
            if (events & (FLARE_IO_HUP | FLARE_IO_ERR))
                flare__conn_close(c);
            return;
        }
        on_readable(c);
    }
}

/* ---- timeouts: one coarse sweep per worker, no per-request timers ---- */

static void timeout_error(flare_conn_t *c, int status, const char *msg)
{
    flare_worker_t *w = c->w;
    struct flare_req *ex = c->recv;
    c->recv = NULL;
    if (ex == NULL) {
        ex = flare__ex_get(w);
        if (ex == NULL) {
            flare__conn_close(c);
            return;
        }
        enqueue(c, ex);
    }
    c->rpos = c->rlen;
    framing_error(c, ex, status, msg);
    if (!(c->flags & C_DEAD))
        flare__conn_flush(c);
}

void flare__conn_sweep(flare_worker_t *w)
{
    const flare_config_t *cfg = &w->app->cfg;
    uint64_t now = w->loop.now;
    flare_conn_t *c = w->conns;
    while (c != NULL) {
        flare_conn_t *next = c->next;
        bool out_pending = c->wbuf.len > 0 || c->nsegs > 0;
        if (c->flags & C_LINGER) {
            if (now - c->t_active > LINGER_MS)
                flare__conn_close(c);
        } else if (out_pending && (c->flags & C_WANT_WRITE)) {
            if (now - c->t_active > cfg->write_timeout_ms)
                flare__conn_close(c);
        } else if (c->recv != NULL) {
            if (now - c->t_active > cfg->body_timeout_ms)
                timeout_error(c, 408, "request body timeout");
        } else if (c->rpos < c->rlen && !(c->flags & C_READ_PAUSED)) {
            if (now - c->t_head > cfg->header_timeout_ms)
                timeout_error(c, 408, "request header timeout");
        } else if (c->qhead == NULL && !out_pending) {
            unsigned limit =
                (c->flags & C_HAD_REQUEST) ? cfg->idle_timeout_ms : cfg->header_timeout_ms;
            if (w->draining || now - c->t_active > limit)
                flare__conn_close(c);
        }
        if (w->draining && now >= w->drain_deadline && !(c->flags & C_DEAD))
            flare__conn_close(c);
        c = next;
    }
}

/* Graceful shutdown for one worker: idle connections go now, the others
 * finish their in-flight requests (with Connection: close) or hit the
 * drain deadline in the sweep. */
/* The last queued response was serialized before the drain began, without
 * "Connection: close": add it, since it is the last one this connection
 * will carry. */
static void mark_last_close(flare_conn_t *c)
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

void flare__conn_drain(flare_worker_t *w)
{
    flare_conn_t *c = w->conns;
    while (c != NULL) {
        flare_conn_t *next = c->next;
        if (c->qhead == NULL && c->recv == NULL && c->rpos == c->rlen && c->wbuf.len == 0 &&
            c->nsegs == 0)
            flare__conn_close(c);
        else {
            c->flags |= C_CLOSING;
            mark_last_close(c);
        }
        c = next;
    }
}
