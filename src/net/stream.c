/* The stream: a connection's read buffer, output queue and writing, over
 * plain TCP (direct syscalls) or a transport (TLS). See stream.h.
 *
 * Output queue layout: wbuf holds copied bytes; oq->seg[i] goes before wbuf
 * offset oq->seg[i].at. oq->wsent counts bytes of the whole sequence
 * already written (no oq: none). When everything is written the queue resets; a queue that
 * never drains completely (a slow WebSocket reader fed by broadcasts) is
 * compacted once enough of its front is written, so it does not grow with
 * everything ever sent. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "net/stream.h"

#define MAX_IOV     64
#define COMPACT_MIN 65536 /* written bytes at the front worth a memmove */
#define COPY_MAX    512   /* borrowed bytes this small are copied instead */

/* ---- the worker's buffer pool ---- */

void flare__bufpool_dispose(flare_bufpool_t *p)
{
    while (p->head != NULL) {
        flare_pool_buf_t *b = p->head;
        p->head = b->next;
        free(b);
    }
    p->n = 0;
}

size_t flare__bufpool_trim(flare_bufpool_t *p, unsigned keep)
{
    unsigned drop = p->n > keep ? p->n - keep : 0;
    for (unsigned i = 0; i < drop; i++) {
        flare_pool_buf_t *b = p->head;
        p->head = b->next;
        free(b);
    }
    p->n -= drop;
    return (size_t)drop * FLARE_CONN_BUF;
}

/* ---- the received-input marker (stream.h) ---- */

static ssize_t recv_tr_read(flare_transport_t *t, char *buf, size_t len)
{
    (void)t, (void)buf, (void)len;
    return -EAGAIN; /* never called: the stream takes its bytes from the loop */
}

static ssize_t recv_tr_writev(flare_transport_t *t, const struct iovec *iov, int n, bool more)
{
    (void)t, (void)iov, (void)n, (void)more;
    return -EBADF; /* never called: the stream writes the socket itself */
}

static ssize_t recv_tr_sendfile(flare_transport_t *t, int fd, uint64_t off, size_t len)
{
    (void)t, (void)fd, (void)off, (void)len;
    return -EBADF;
}

static int recv_tr_none(flare_transport_t *t)
{
    (void)t;
    return 0;
}

static size_t recv_tr_pending(const flare_transport_t *t)
{
    (void)t;
    return 0; /* what the loop holds, it announces itself */
}

static void recv_tr_free(flare_transport_t *t)
{
    (void)t;
}

static const flare_transport_ops_t recv_tr_ops = {
    recv_tr_read, recv_tr_writev,  recv_tr_sendfile, recv_tr_none,
    recv_tr_none, recv_tr_pending, recv_tr_free,
};

/* const: never written (a write would fault), shared by every worker */
const flare_transport_t flare__recv_tr = { .ops = &recv_tr_ops,
                                           .fd = -1,
                                           .state = FLARE_TR_ESTABLISHED };

/* ---- interest ---- */

static void interest(flare_stream_t *s)
{
    if (!(s->sflags & FLARE_S_ATTACHED))
        return;
    uint32_t f = s->sflags, ev = 0;
    if (!(f & (FLARE_S_NO_READ | FLARE_S_RD_EOF)) || (f & (FLARE_S_LINGER | FLARE_S_WR_WAITS_R)))
        ev |= FLARE_IO_READ;
    if (((f & FLARE_S_WANT_WRITE) && !(f & FLARE_S_WR_WAITS_R)) || (f & FLARE_S_RD_WAITS_W))
        ev |= FLARE_IO_WRITE;
    if (s->tr == FLARE__RECV_TR)
        ev |= FLARE_IO_RECV;
    flare__loop_mod(s->loop, &s->io, ev);
}

void flare__stream_read_enable(flare_stream_t *s, bool on)
{
    if (on)
        s->sflags &= ~(uint32_t)FLARE_S_NO_READ;
    else
        s->sflags |= FLARE_S_NO_READ;
    interest(s);
}

/* ---- open, move, close ---- */

void flare__stream_init_detached(flare_stream_t *s, flare_loop_t *loop, flare_io_fn cb)
{
    memset(s, 0, sizeof(*s));
    s->io.fd = -1;
    s->io.cb = cb;
    s->loop = loop;
    s->t_active = loop->now;
}

int flare__stream_open(flare_stream_t *s, flare_loop_t *loop, int fd, flare_transport_t *tr,
                       flare_io_fn cb)
{
    flare__stream_init_detached(s, loop, cb);
    s->io.fd = fd;
    s->tr = tr;
    uint32_t ev = FLARE_IO_READ;
    if (tr == NULL && flare__loop_can_recv(loop)) {
        s->tr = FLARE__RECV_TR;
        ev |= FLARE_IO_RECV;
    }
    if (flare__loop_add(loop, &s->io, ev) != 0) {
        s->io.fd = -1;
        s->tr = NULL;
        return FLARE_ESYS;
    }
    s->sflags |= FLARE_S_ATTACHED;
    return 0;
}

/* Releases the queued segments; the queue is empty after (written or
 * dropped). */
static void release_segs(flare_stream_t *s)
{
    flare_outq_t *q = s->oq;
    if (q == NULL)
        return;
    for (uint32_t i = 0; i < q->nsegs; i++) {
        if (q->seg[i].release != NULL)
            q->seg[i].release(q->seg[i].ud);
    }
    q->nsegs = 0;
    q->segbytes = 0;
    q->wsent = 0;
    s->sflags &= ~(uint32_t)FLARE_S_SEG_FILE;
}

/* s->oq with room for one more segment (made on first use). NULL when out
 * of memory. */
static flare_outq_t *outq(flare_stream_t *s, uint32_t need)
{
    flare_outq_t *q = s->oq;
    if (q != NULL && q->capsegs >= need)
        return q;
    uint32_t cap = q != NULL && q->capsegs != 0 ? q->capsegs * 2 : 4;
    if (cap < need)
        cap = need;
    flare_outq_t *v = realloc(q, sizeof(*v) + cap * sizeof(v->seg[0]));
    if (v == NULL)
        return NULL;
    if (q == NULL) {
        v->wsent = v->segbytes = 0;
        v->nsegs = 0;
    }
    v->capsegs = cap;
    s->oq = v;
    return v;
}

/* Out of line: inlined into the flush fast path, it kept the written
 * count in a callee-saved register there (+2 instructions per keep-alive
 * request, bench/guard.sh). */
__attribute__((cold, noinline)) void flare__stream_wrote_part(flare_stream_t *s, size_t n)
{
    flare_outq_t *q = outq(s, 0);
    if (q != NULL) {
        q->wsent = n;
        return;
    }
    /* out of memory: drop the written bytes from the front instead */
    memmove(s->wbuf.data, s->wbuf.data + n, s->wbuf.len - n);
    s->wbuf.len -= n;
}

void flare__stream_free_rbuf(flare_stream_t *s)
{
    if (s->rbuf == NULL)
        return;
    if (s->rcap == FLARE_CONN_BUF)
        flare__bufpool_put(&s->loop->pool, s->rbuf);
    else
        free(s->rbuf);
    s->rbuf = NULL;
    s->rlen = s->rpos = s->rcap = 0;
}

void flare__stream_free_wbuf(flare_stream_t *s)
{
    if (s->wbuf.data == NULL)
        return;
    if (s->wbuf.cap == FLARE_CONN_BUF)
        flare__bufpool_put(&s->loop->pool, s->wbuf.data);
    else
        free(s->wbuf.data);
    s->wbuf.data = NULL;
    s->wbuf.len = s->wbuf.cap = 0;
}

int flare__stream_move(flare_stream_t *dst, flare_stream_t *src)
{
    /* the input not consumed yet goes along in the buffer it is in */
    dst->rbuf = src->rbuf;
    dst->rlen = src->rlen;
    dst->rpos = src->rpos;
    dst->rcap = src->rcap;
    src->rbuf = NULL;
    src->rlen = src->rpos = src->rcap = 0;
    if (dst->rbuf != NULL && dst->rpos == dst->rlen)
        flare__stream_free_rbuf(dst);
    dst->tr = src->tr;
    src->tr = NULL;
    int fd = src->io.fd;
    int rc;
    if (dst->tr == FLARE__RECV_TR && (src->sflags & FLARE_S_ATTACHED)) {
        /* the same registration: bytes received for src and not read yet,
         * and those in flight, are dst's */
        dst->io.fd = fd;
        rc = flare__loop_move(dst->loop, &src->io, &dst->io, FLARE_IO_READ | FLARE_IO_RECV);
        src->io.fd = -1;
        src->sflags &= ~(uint32_t)FLARE_S_ATTACHED;
    } else {
        if (src->sflags & FLARE_S_ATTACHED)
            flare__loop_del(src->loop, &src->io);
        src->io.fd = -1;
        src->sflags &= ~(uint32_t)FLARE_S_ATTACHED;
        dst->io.fd = fd;
        rc = flare__loop_add(dst->loop, &dst->io,
                             FLARE_IO_READ | (dst->tr == FLARE__RECV_TR ? FLARE_IO_RECV : 0));
    }
    /* nothing was written to this socket through dst yet */
    dst->sflags = (dst->sflags & FLARE_S_SEG_FILE) | (src->sflags & FLARE_S_RD_EOF);
    dst->t_active = dst->loop->now;
    if (rc != 0) {
        dst->io.fd = fd;
        flare__stream_close(dst, false);
        return FLARE_ESYS;
    }
    dst->sflags |= FLARE_S_ATTACHED;
    return 0;
}

void flare__stream_close_socket(flare_stream_t *s, bool clean)
{
    if (s->tr == FLARE__RECV_TR) {
        s->tr = NULL;
    } else if (s->tr != NULL) {
        flare_transport_t *tr = s->tr;
        s->tr = NULL;
        if (clean && s->io.fd >= 0 && (tr->state & FLARE_TR_ESTABLISHED) &&
            !(tr->state & FLARE_TR_FAILED) && !(s->sflags & FLARE_S_LINGER))
            (void)tr->ops->shutdown(tr); /* close_notify, if the socket takes it now */
        tr->ops->free(tr);
    }
    if (s->io.fd >= 0) {
        if (s->sflags & FLARE_S_ATTACHED)
            flare__loop_del(s->loop, &s->io);
        close(s->io.fd);
        s->io.fd = -1;
    }
    s->sflags &= ~(uint32_t)(FLARE_S_ATTACHED | FLARE_S_WANT_WRITE);
    release_segs(s);
    s->wbuf.len = 0;
    flare__stream_free_wbuf(s);
    free(s->oq);
    s->oq = NULL;
}

void flare__stream_close(flare_stream_t *s, bool clean)
{
    flare__stream_close_socket(s, clean);
    flare__stream_free_rbuf(s);
}

/* ---- input ---- */

ssize_t flare__stream_read_slow(flare_stream_t *s, size_t max_cap)
{
    if (s->rbuf == NULL) {
        s->rbuf = flare__bufpool_get(&s->loop->pool);
        if (s->rbuf == NULL)
            return -ENOMEM;
        s->rcap = FLARE_CONN_BUF;
        s->rlen = s->rpos = 0;
    }
    if (s->rpos == s->rlen) {
        s->rpos = s->rlen = 0;
    } else if (s->rlen == s->rcap) {
        if (s->rpos > 0) {
            memmove(s->rbuf, s->rbuf + s->rpos, s->rlen - s->rpos);
            s->rlen -= s->rpos;
            s->rpos = 0;
        } else {
            size_t cap = (size_t)s->rcap * 2;
            if (cap > max_cap)
                cap = max_cap;
            if (cap <= s->rcap)
                return -ENOBUFS;
            char *nb = malloc(cap);
            if (nb == NULL)
                return -ENOMEM;
            memcpy(nb, s->rbuf, s->rlen);
            uint32_t len = s->rlen;
            flare__stream_free_rbuf(s);
            s->rbuf = nb;
            s->rlen = len;
            s->rcap = (uint32_t)cap;
        }
    }
    ssize_t n;
    bool opening = false;
    if (flare__likely(s->tr == NULL)) {
        do {
            n = flare__read(s->io.fd, s->rbuf + s->rlen, s->rcap - s->rlen);
        } while (n == -EINTR);
    } else if (s->tr == FLARE__RECV_TR) {
        n = flare__loop_recv(s->loop, &s->io, s->rbuf + s->rlen, s->rcap - s->rlen);
    } else {
        opening = !(s->tr->state & FLARE_TR_ESTABLISHED);
        n = s->tr->ops->read(s->tr, s->rbuf + s->rlen, s->rcap - s->rlen);
        uint32_t was = s->sflags;
        if (n == -EAGAIN && (s->tr->want & FLARE_IO_WRITE))
            s->sflags |= FLARE_S_RD_WAITS_W;
        else
            s->sflags &= ~(uint32_t)FLARE_S_RD_WAITS_W;
        if (was != s->sflags)
            interest(s);
    }
    if (n > 0) {
        s->rlen += (uint32_t)n;
        s->t_active = s->loop->now;
    } else if (n == 0) {
        flare__stream_eof(s);
    }
    if (flare__unlikely(opening) && (s->tr->state & FLARE_TR_ESTABLISHED) && s->tr->on_open != NULL)
        s->tr->on_open(s);
    return n;
}

/* Room for `need` more bytes after rlen: the buffer taken from the pool,
 * its consumed front dropped, or grown up to max_cap. 0, -ENOBUFS or
 * -ENOMEM. */
static int rbuf_room(flare_stream_t *s, size_t need, size_t max_cap)
{
    if (s->rbuf == NULL) {
        s->rbuf = flare__bufpool_get(&s->loop->pool);
        if (s->rbuf == NULL)
            return -ENOMEM;
        s->rcap = FLARE_CONN_BUF;
        s->rlen = s->rpos = 0;
    } else if (s->rpos == s->rlen) {
        s->rpos = s->rlen = 0;
    }
    if (s->rcap - s->rlen >= need)
        return 0;
    if (s->rpos > 0) {
        memmove(s->rbuf, s->rbuf + s->rpos, s->rlen - s->rpos);
        s->rlen -= s->rpos;
        s->rpos = 0;
        if (s->rcap - s->rlen >= need)
            return 0;
    }
    size_t cap = s->rcap;
    while (cap - s->rlen < need && cap < max_cap)
        cap *= 2;
    if (cap > max_cap)
        cap = max_cap;
    if (cap - s->rlen < need || cap > UINT32_MAX)
        return -ENOBUFS;
    char *nb = malloc(cap);
    if (nb == NULL)
        return -ENOMEM;
    memcpy(nb, s->rbuf, s->rlen);
    uint32_t len = s->rlen;
    flare__stream_free_rbuf(s);
    s->rbuf = nb;
    s->rlen = len;
    s->rcap = (uint32_t)cap;
    return 0;
}

ssize_t flare__stream_give(flare_stream_t *s, const char *buf, size_t len, size_t max_cap,
                           flare_task_fn release, void *ud)
{
    ssize_t rc = (ssize_t)len;
    if (len == 0) {
        flare__stream_eof(s);
    } else {
        int r = rbuf_room(s, len, max_cap);
        if (r == 0) {
            memcpy(s->rbuf + s->rlen, buf, len);
            s->rlen += (uint32_t)len;
            s->t_active = s->loop->now;
        } else {
            rc = r;
        }
    }
    if (release != NULL)
        release(ud); /* copied (or refused): the backend's buffer is free again */
    return rc;
}

void flare__stream_eof(flare_stream_t *s)
{
    s->sflags |= FLARE_S_RD_EOF;
    interest(s);
}

/* ---- output queue ---- */

int flare__stream_add_seg(flare_stream_t *s, const flare_outseg_t *seg)
{
    flare_outq_t *q = outq(s, flare__stream_nsegs(s) + 1);
    if (q == NULL) {
        if (seg->release != NULL)
            seg->release(seg->ud);
        return FLARE_ENOMEM;
    }
    q->seg[q->nsegs] = *seg;
    q->seg[q->nsegs].at = s->wbuf.len;
    q->nsegs++;
    q->segbytes += seg->len;
    if (seg->fd >= 0)
        s->sflags |= FLARE_S_SEG_FILE;
    return 0;
}

static void close_file(void *ud)
{
    close((int)(intptr_t)ud);
}

int flare__stream_push_file(flare_stream_t *s, int fd, uint64_t off, uint64_t len)
{
    flare_outseg_t seg = { 0, NULL, (size_t)len, close_file, (void *)(intptr_t)fd, fd, off };
    return flare__stream_add_seg(s, &seg);
}

/* Drops what is written at the front of the queue: whole segments and the
 * wbuf bytes before the first unwritten piece. */
static void compact(flare_stream_t *s)
{
    flare_outq_t *q = s->oq; /* (there is one: wsent is in it) */
    size_t done = q->wsent, wpos = 0;
    uint32_t i = 0;
    while (done > 0) {
        size_t at = i < q->nsegs ? q->seg[i].at : s->wbuf.len;
        size_t part = at - wpos;
        if (done < part) {
            wpos += done;
            done = 0;
            break;
        }
        done -= part;
        wpos = at;
        if (i == q->nsegs || done < q->seg[i].len)
            break;
        done -= q->seg[i].len;
        q->segbytes -= q->seg[i].len;
        if (q->seg[i].release != NULL)
            q->seg[i].release(q->seg[i].ud);
        i++;
    }
    if (i > 0) {
        memmove(q->seg, q->seg + i, (q->nsegs - i) * sizeof(*q->seg));
        q->nsegs -= i;
    }
    if (wpos > 0) {
        memmove(s->wbuf.data, s->wbuf.data + wpos, s->wbuf.len - wpos);
        s->wbuf.len -= wpos;
        for (uint32_t k = 0; k < q->nsegs; k++)
            q->seg[k].at -= wpos;
    }
    q->wsent = done;
}

/* ---- writing ---- */

static void blocked(flare_stream_t *s, bool waits_read)
{
    uint32_t was = s->sflags;
    s->sflags |= FLARE_S_WANT_WRITE;
    if (waits_read)
        s->sflags |= FLARE_S_WR_WAITS_R;
    else
        s->sflags &= ~(uint32_t)FLARE_S_WR_WAITS_R;
    if (!(was & FLARE_S_WANT_WRITE))
        s->t_active = s->loop->now; /* the write timeout counts from here */
    if (was != s->sflags)
        interest(s);
}

static ssize_t tx_writev(flare_stream_t *s, const struct iovec *iov, int n, bool more)
{
    if (flare__stream_tls(s))
        return s->tr->ops->writev(s->tr, iov, n, more);
    ssize_t wr;
    do {
        if (more) {
            struct msghdr mh = { .msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)n };
            wr = sendmsg(s->io.fd, &mh, MSG_MORE | MSG_NOSIGNAL);
            if (wr < 0)
                wr = -errno;
        } else {
            wr = n == 1 ? flare__write(s->io.fd, iov[0].iov_base, iov[0].iov_len)
                        : flare__writev(s->io.fd, iov, n);
        }
    } while (wr == -EINTR);
    return wr;
}

static ssize_t tx_sendfile(flare_stream_t *s, const flare_outseg_t *seg, size_t skip)
{
    size_t n = seg->len - skip;
    if (n > (1u << 30))
        n = 1u << 30;
    if (flare__stream_tls(s))
        return s->tr->ops->sendfile(s->tr, seg->fd, seg->off + skip, n);
    off_t off = (off_t)(seg->off + skip);
    ssize_t wr;
    do {
        wr = sendfile(s->io.fd, seg->fd, &off, n);
        if (wr < 0)
            wr = -errno;
    } while (wr == -EINTR);
    if (wr == 0)
        return -EIO; /* the file shrank under us: the promised length cannot be kept */
    return wr;
}

int flare__stream_out_next(const flare_stream_t *s, struct iovec *iov, int max,
                           flare_out_next_t *nx)
{
    const flare_outq_t *q = s->oq;
    uint32_t nsegs = q != NULL ? q->nsegs : 0;
    size_t skip = q != NULL ? q->wsent : 0, wpos = 0;
    int n = 0;
    *nx = (flare_out_next_t){ 0 };
    for (uint32_t i = 0; i <= nsegs && n < max; i++) {
        size_t at = i < nsegs ? q->seg[i].at : s->wbuf.len;
        size_t part = at - wpos; /* wbuf bytes [wpos, at) */
        if (skip >= part) {
            skip -= part;
        } else {
            iov[n].iov_base = s->wbuf.data + wpos + skip;
            iov[n].iov_len = part - skip;
            nx->total += part - skip;
            n++;
            skip = 0;
        }
        wpos = at;
        if (i == nsegs) {
            nx->all = true;
            break;
        }
        if (n == max)
            break;
        if (skip >= q->seg[i].len) {
            skip -= q->seg[i].len;
        } else if (q->seg[i].fd >= 0) {
            /* gathered bytes go first (with MSG_MORE: the file follows);
             * the file range itself on its own turn */
            if (n == 0) {
                nx->file = &q->seg[i];
                nx->file_skip = skip;
                nx->total = q->seg[i].len - skip;
            } else {
                nx->more = true;
            }
            break;
        } else {
            iov[n].iov_base = (char *)q->seg[i].ptr + skip;
            iov[n].iov_len = q->seg[i].len - skip;
            nx->total += q->seg[i].len - skip;
            n++;
            skip = 0;
        }
    }
    return n;
}

bool flare__stream_out_done(flare_stream_t *s, size_t n)
{
    flare_outq_t *q = s->oq;
    s->t_active = s->loop->now;
    size_t sent = (q != NULL ? q->wsent : 0) + n;
    if (sent == s->wbuf.len + (q != NULL ? q->segbytes : 0)) {
        s->wbuf.len = 0;
        release_segs(s); /* (and wsent = 0) */
        return true;
    }
    if (q != NULL)
        q->wsent = sent;
    else
        flare__stream_wrote_part(s, sent);
    if (s->oq != NULL && s->oq->wsent >= COMPACT_MIN)
        compact(s); /* releases the segments written whole */
    return false;
}

int flare__stream_flush_slow(flare_stream_t *s)
{
    if (!(s->sflags & FLARE_S_ATTACHED))
        return 0;
    while (s->wbuf.len > 0 || flare__stream_nsegs(s) > 0) {
        struct iovec iov[MAX_IOV];
        flare_out_next_t nx;
        int n = flare__stream_out_next(s, iov, MAX_IOV, &nx);
        ssize_t wr;
        if (nx.file != NULL) {
            wr = tx_sendfile(s, nx.file, nx.file_skip);
        } else if (flare__unlikely(nx.all && (s->sflags & FLARE_S_OUT_LAST) &&
                                   flare__stream_tls(s))) {
            s->tr->state |= FLARE_TR_LAST;
            wr = tx_writev(s, iov, n, nx.more);
            s->tr->state &= ~(uint32_t)FLARE_TR_LAST;
        } else {
            wr = tx_writev(s, iov, n, nx.more);
        }
        if (wr < 0) {
            if (wr == -EAGAIN) {
                blocked(s, s->tr != NULL && s->tr->want == FLARE_IO_READ);
                return 0;
            }
            return -1;
        }
        if (flare__stream_out_done(s, (size_t)wr))
            break;
        /* a short write: the socket is full. Not so through a transport: TLS
         * takes one record per call, and only -EAGAIN says it would block */
        if ((size_t)wr < nx.total && !flare__stream_tls(s)) {
            blocked(s, false);
            return 0;
        }
    }
    if (flare__unlikely(flare__stream_tls(s) && (s->tr->state & FLARE_TR_HELD))) {
        /* the transport's own output (TLS session tickets) when no response
         * carried it: it goes out with this batch, never later */
        int r = s->tr->ops->flush(s->tr);
        if (r == -EAGAIN) {
            blocked(s, s->tr->want == FLARE_IO_READ);
            return 0;
        }
        if (r < 0)
            return -1;
    }
    if (s->sflags & (FLARE_S_WANT_WRITE | FLARE_S_WR_WAITS_R)) {
        s->sflags &= ~(uint32_t)(FLARE_S_WANT_WRITE | FLARE_S_WR_WAITS_R);
        interest(s);
    }
    return 1;
}

/* Queues iov[from..n) starting `skip` bytes into iov[from]: copied, the
 * last entry borrowed when release is set. */
static int queue_rest(flare_stream_t *s, const struct iovec *iov, int n, int from, size_t skip,
                      flare_task_fn release, void *ud)
{
    for (int i = from; i < n; i++, skip = 0) {
        const char *p = (const char *)iov[i].iov_base + skip;
        size_t len = iov[i].iov_len - skip;
        if (len == 0)
            continue;
        if (i == n - 1 && release != NULL && len > COPY_MAX) {
            flare_outseg_t seg = { 0, p, len, release, ud, -1, 0 };
            return flare__stream_add_seg(s, &seg); /* runs release on failure */
        }
        flare__stream_wbuf(s);
        if (flare__buf_append(&s->wbuf, p, len) != 0) {
            if (release != NULL)
                release(ud);
            return FLARE_ENOMEM;
        }
    }
    if (release != NULL)
        release(ud);
    return 0;
}

int flare__stream_queue(flare_stream_t *s, const struct iovec *iov, int n, flare_task_fn release,
                        void *ud)
{
    return queue_rest(s, iov, n, 0, 0, release, ud);
}

int flare__stream_send(flare_stream_t *s, const struct iovec *iov, int n, flare_task_fn release,
                       void *ud)
{
    if (!(s->sflags & FLARE_S_ATTACHED) || (s->sflags & FLARE_S_WANT_WRITE) ||
        flare__stream_has_output(s) || n > MAX_IOV)
        return queue_rest(s, iov, n, 0, 0, release, ud);
    if (flare__stream_tls(s)) {
        /* a transport writes a record per call: queue, then write until the
         * socket would block */
        int rc = queue_rest(s, iov, n, 0, 0, release, ud);
        if (rc == 0 && flare__stream_flush_slow(s) < 0)
            rc = FLARE_ECLOSED;
        return rc;
    }
    ssize_t wr = tx_writev(s, iov, n, false);
    if (wr < 0 && wr != -EAGAIN) {
        if (release != NULL)
            release(ud);
        return FLARE_ECLOSED;
    }
    size_t done = wr > 0 ? (size_t)wr : 0;
    if (wr > 0)
        s->t_active = s->loop->now;
    int i = 0;
    while (i < n && done >= iov[i].iov_len) {
        done -= iov[i].iov_len;
        i++;
    }
    if (i == n) {
        if (release != NULL)
            release(ud);
        return 0;
    }
    int rc = queue_rest(s, iov, n, i, done, release, ud);
    blocked(s, wr == -EAGAIN && s->tr != NULL && s->tr->want == FLARE_IO_READ);
    return rc;
}

/* ---- ending ---- */

void flare__stream_linger(flare_stream_t *s)
{
    if (flare__stream_tls(s) && (s->tr->state & FLARE_TR_ESTABLISHED) &&
        !(s->tr->state & FLARE_TR_FAILED))
        (void)s->tr->ops->shutdown(s->tr);
    shutdown(s->io.fd, SHUT_WR);
    s->sflags |= FLARE_S_LINGER;
    s->sflags &= ~(uint32_t)(FLARE_S_WANT_WRITE | FLARE_S_WR_WAITS_R | FLARE_S_RD_WAITS_W);
    s->t_active = s->loop->now;
    s->rpos = s->rlen;
    flare__stream_idle(s);
    interest(s);
}

bool flare__stream_linger_read(flare_stream_t *s)
{
    char tmp[4096];
    ssize_t n;
    if (s->tr == FLARE__RECV_TR) {
        /* all the loop holds: it announces no more until more arrives */
        while ((n = flare__loop_recv(s->loop, &s->io, tmp, sizeof(tmp))) > 0)
            ;
        return n == 0 || (n < 0 && n != -EAGAIN);
    }
    do {
        n = flare__read(s->io.fd, tmp, sizeof(tmp));
    } while (n == -EINTR);
    return n == 0 || (n < 0 && n != -EAGAIN);
}
