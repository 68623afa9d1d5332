/* WebSocket output: frames shared between recipients, the per-connection
 * queue, and writing.
 *
 * Frames are written straight from the caller's memory when the socket
 * takes them; only what it refuses is kept: copied into chunks from the
 * worker's FLARE_CONN_BUF pool, or referenced when the frame is a shared
 * (broadcast) one. Inside a read batch small frames are queued and leave
 * together at its end. Once the queue is empty after our close frame and the
 * closing handshake is done (or failed), the write side is shut and the
 * connection lingers for the peer's EOF. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "core/sys.h"
#include "ws/ws_int.h"

#define MAX_IOV        64
#define BATCH_COPY_MAX 8192 /* in a read batch, frames up to this are queued, not written */
#define LINGER_MS      2000 /* after our close frame: wait this long for the peer's EOF */

static inline uint64_t now_ms(const flare_ws_t *ws)
{
    return ws->ww->w->loop.now;
}

/* ---- shared frames ---- */

ws_shared_t *flare__ws_shared_new(uint8_t opcode, bool rsv1, const void *payload, size_t len)
{
    uint8_t hdr[FLARE_WS_MAX_HEADER];
    size_t hl = flare__ws_frame_header(hdr, opcode, true, rsv1, len, NULL);
    if (len > SIZE_MAX - sizeof(ws_shared_t) - hl)
        return NULL;
    ws_shared_t *s = malloc(sizeof(*s) + hl + len);
    if (s == NULL)
        return NULL;
    atomic_init(&s->refs, 1);
    s->opcode = opcode;
    s->len = hl + len;
    s->plain_off = hl;
    memcpy(s->data, hdr, hl);
    if (len > 0)
        memcpy(s->data + hl, payload, len);
    return s;
}

void flare__ws_shared_ref(ws_shared_t *s)
{
    atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
}

void flare__ws_shared_unref(ws_shared_t *s)
{
    if (s != NULL && atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) == 1)
        free(s);
}

/* ---- output queue ---- */

static void out_free(ws_worker_t *ww, ws_out_t *o)
{
    if (o->shared != NULL) {
        flare__ws_shared_unref(o->shared);
        if (ww->nfree_nodes < 1024) {
            o->next = ww->free_nodes;
            ww->free_nodes = o;
            ww->nfree_nodes++;
        } else {
            free(o);
        }
    } else if (o->pooled) {
        flare__worker_buf_put(ww->w, (char *)o);
    } else {
        free(o);
    }
}

void flare__ws_queue_clear(flare_ws_t *ws)
{
    while (ws->ohead != NULL) {
        ws_out_t *o = ws->ohead;
        ws->ohead = o->next;
        out_free(ws->ww, o);
    }
    ws->otail = NULL;
    ws->queued = 0;
}

static void queue_link(flare_ws_t *ws, ws_out_t *o)
{
    o->next = NULL;
    if (ws->otail != NULL)
        ws->otail->next = o;
    else
        ws->ohead = o;
    ws->otail = o;
}

/* Copies bytes to the end of the queue, into pool-sized chunks. */
static int queue_copy(flare_ws_t *ws, const void *p, size_t n)
{
    const char *src = p;
    while (n > 0) {
        ws_out_t *o = ws->otail;
        if (o == NULL || o->shared != NULL || o->len == o->cap) {
            o = (ws_out_t *)(void *)flare__worker_buf_get(ws->ww->w);
            if (o == NULL)
                return FLARE_ENOMEM;
            o->shared = NULL;
            o->pos = o->len = 0;
            o->cap = FLARE_CONN_BUF - offsetof(ws_out_t, data);
            o->pooled = true;
            queue_link(ws, o);
        }
        size_t take = o->cap - o->len < n ? o->cap - o->len : n;
        memcpy(o->data + o->len, src, take);
        o->len += take;
        src += take;
        n -= take;
        ws->queued += take;
    }
    return 0;
}

static int queue_ref(flare_ws_t *ws, ws_shared_t *s, size_t pos)
{
    ws_worker_t *ww = ws->ww;
    ws_out_t *o = ww->free_nodes;
    if (o != NULL) {
        ww->free_nodes = o->next;
        ww->nfree_nodes--;
    } else {
        o = malloc(sizeof(*o));
        if (o == NULL)
            return FLARE_ENOMEM;
    }
    flare__ws_shared_ref(s);
    o->shared = s;
    o->pos = pos;
    o->len = s->len;
    o->cap = 0;
    o->pooled = false;
    queue_link(ws, o);
    ws->queued += s->len - pos;
    return 0;
}

static inline const char *out_base(const ws_out_t *o)
{
    return o->shared != NULL ? o->shared->data : o->data;
}

/* Drops n written bytes from the head of the queue. */
static void queue_consume(flare_ws_t *ws, size_t n)
{
    ws->queued -= n;
    while (n > 0) {
        ws_out_t *o = ws->ohead;
        size_t avail = o->len - o->pos;
        if (n < avail) {
            o->pos += n;
            return;
        }
        n -= avail;
        ws->ohead = o->next;
        if (ws->ohead == NULL)
            ws->otail = NULL;
        out_free(ws->ww, o);
    }
}

static void want_write(flare_ws_t *ws, bool on)
{
    if (on == ((ws->flags & WF_WANT_WRITE) != 0))
        return;
    if (on)
        ws->flags |= WF_WANT_WRITE;
    else
        ws->flags &= ~(uint32_t)WF_WANT_WRITE;
    flare__loop_mod(&ws->ww->w->loop, &ws->io, on ? FLARE_IO_READ | FLARE_IO_WRITE : FLARE_IO_READ);
}

/* Writes (queue, hdr, payload) as far as the socket takes them and keeps
 * the rest: copied, or referenced when the payload is the shared frame sh.
 * Frames go to the queue without a syscall when the socket is not ours yet,
 * is full, or a read batch is collecting small frames. */
int flare__ws_emit(flare_ws_t *ws, const void *hdr, size_t hlen, const void *pl, size_t plen,
                   ws_shared_t *sh)
{
    if (ws->state == WS_DEAD || ws->state == WS_LINGER)
        return FLARE_ECLOSED;
    bool now = ws->io.fd >= 0 && !(ws->flags & WF_WANT_WRITE) &&
               !((ws->flags & WF_BATCH) && hlen + plen <= BATCH_COPY_MAX);
    struct iovec iov[MAX_IOV];
    int n = 0;
    size_t qbytes = 0;
    if (now) {
        for (ws_out_t *o = ws->ohead; o != NULL; o = o->next) {
            if (n == MAX_IOV - 2) {
                now = false; /* a long queue: write it first, in order */
                break;
            }
            iov[n].iov_base = (char *)out_base(o) + o->pos;
            iov[n].iov_len = o->len - o->pos;
            qbytes += o->len - o->pos;
            n++;
        }
    }
    size_t written = 0;
    if (now) {
        if (hlen > 0) {
            iov[n].iov_base = (void *)hdr;
            iov[n++].iov_len = hlen;
        }
        if (plen > 0) {
            iov[n].iov_base = (void *)pl;
            iov[n++].iov_len = plen;
        }
        ssize_t wr;
        do {
            wr = n == 1 ? flare__write(ws->io.fd, iov[0].iov_base, iov[0].iov_len)
                        : flare__writev(ws->io.fd, iov, n);
        } while (wr == -EINTR);
        if (wr < 0 && wr != -EAGAIN) {
            flare__ws_go_dead(ws);
            return FLARE_ECLOSED;
        }
        if (wr > 0) {
            ws->t_progress = now_ms(ws);
            written = (size_t)wr;
            size_t q = written < qbytes ? written : qbytes;
            if (q > 0)
                queue_consume(ws, q);
            written -= q;
        }
    } else if (ws->ohead == NULL) {
        ws->t_progress = now_ms(ws); /* the stall clock starts now */
    }
    /* keep what is left of hdr, then of the payload */
    int rc = 0;
    if (written < hlen) {
        rc = queue_copy(ws, (const char *)hdr + written, hlen - written);
        written = 0;
    } else {
        written -= hlen;
    }
    if (rc == 0 && written < plen) {
        if (sh != NULL)
            rc = queue_ref(ws, sh, (size_t)((const char *)pl - sh->data) + written);
        else
            rc = queue_copy(ws, (const char *)pl + written, plen - written);
    }
    if (rc != 0) {
        flare__ws_go_dead(ws); /* the stream would be corrupt without these bytes */
        return rc;
    }
    if (now && ws->ohead != NULL)
        want_write(ws, true);
    else if (!now && ws->io.fd >= 0 && !(ws->flags & (WF_BATCH | WF_WANT_WRITE)))
        flare__ws_flush(ws);
    return 0;
}

static void maybe_linger(flare_ws_t *ws)
{
    if (ws->state != WS_OPEN || ws->ohead != NULL || !(ws->flags & WF_CLOSE_SENT) ||
        !(ws->flags & (WF_CLOSE_RECV | WF_FAILED)))
        return;
    /* handshake done (or failed) and our close frame is out */
    shutdown(ws->io.fd, SHUT_WR);
    ws->state = WS_LINGER;
    ws->deadline = now_ms(ws) + LINGER_MS;
    ws->rlen = 0;
    if (ws->rbuf != NULL) {
        flare__worker_buf_put(ws->ww->w, ws->rbuf);
        ws->rbuf = NULL;
    }
}

void flare__ws_flush(flare_ws_t *ws)
{
    while (ws->ohead != NULL && ws->io.fd >= 0) {
        struct iovec iov[MAX_IOV];
        int n = 0;
        size_t total = 0;
        for (ws_out_t *o = ws->ohead; o != NULL && n < MAX_IOV; o = o->next) {
            iov[n].iov_base = (char *)out_base(o) + o->pos;
            iov[n].iov_len = o->len - o->pos;
            total += iov[n].iov_len;
            n++;
        }
        ssize_t wr = n == 1 ? flare__write(ws->io.fd, iov[0].iov_base, iov[0].iov_len)
                            : flare__writev(ws->io.fd, iov, n);
        if (wr == -EINTR)
            continue;
        if (wr == -EAGAIN) {
            want_write(ws, true);
            return;
        }
        if (wr < 0) {
            flare__ws_go_dead(ws);
            return;
        }
        ws->t_progress = now_ms(ws);
        queue_consume(ws, (size_t)wr);
        if ((size_t)wr < total) {
            want_write(ws, true);
            return;
        }
    }
    if (ws->io.fd < 0)
        return;
    want_write(ws, false);
    maybe_linger(ws);
}
