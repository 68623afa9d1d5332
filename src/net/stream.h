/* The stream: one connection's I/O, shared by every protocol on it
 * (HTTP/1.1 now, WebSocket after an upgrade, HTTP/2 next).
 *
 * - Input: a read buffer lent from the worker's pool while bytes are held,
 *   given back when the protocol has consumed them all (an idle
 *   connection holds no buffer). rbuf[rpos, rlen) is unconsumed.
 * - Output: one queue of bytes (wbuf: copied) with borrowed segments and
 *   file ranges between them (segs, each placed before wbuf offset `at`),
 *   written with write/writev, sendmsg(MSG_MORE) before a file range, and
 *   sendfile. Bytes are never copied twice: a borrowed segment goes out by
 *   reference; a file range from the file.
 * - A transport under it: none for plain TCP (direct syscalls, the fast
 *   path), or one with ops (net/transport.h: TLS). The stream reads
 *   everything the transport holds before it waits for the socket again.
 * - Interest: the stream keeps the poller's interest in step with what it
 *   waits for (input unless paused, the socket's room while output is
 *   blocked, and whatever the transport needs).
 * - Lingering close and a clean end (close_notify for TLS).
 *
 * The protocol owns the io callback (it knows what readiness means to it)
 * and calls the stream; the stream never calls up. A protocol switch moves
 * the stream to its new owner (flare__stream_move): transport state and
 * buffered input go with it. */
#ifndef FLARE_NET_STREAM_H
#define FLARE_NET_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/uio.h>

#include "core/buf.h"
#include "core/bufpool.h"
#include "core/core.h"
#include "core/sys.h"
#include "flare/flare.h"
#include "loop/loop.h"
#include "net/transport.h"

void flare__bufpool_dispose(flare_bufpool_t *p);
/* Frees the free buffers past keep; returns the bytes freed. */
size_t flare__bufpool_trim(flare_bufpool_t *p, unsigned keep);

/* Output that is not in wbuf: borrowed memory (fd -1: ptr, len) or a file
 * range (fd >= 0: len bytes from offset off). release(ud) runs once it is
 * written or dropped. */
typedef struct flare_outseg {
    size_t at; /* offset in wbuf before which this segment goes */
    const char *ptr;
    size_t len;
    flare_task_fn release;
    void *ud;
    int fd;
    uint64_t off;
} flare_outseg_t;

/* Stream flags */
enum {
    FLARE_S_WANT_WRITE = 1u << 0, /* output blocked: waiting for room */
    FLARE_S_NO_READ = 1u << 1,    /* the protocol does not want input now */
    FLARE_S_RD_EOF = 1u << 2,     /* the peer finished sending */
    FLARE_S_LINGER = 1u << 3,     /* write side shut: reading until EOF, then close */
    FLARE_S_RD_WAITS_W = 1u << 4, /* the transport's read waits for writability */
    FLARE_S_WR_WAITS_R = 1u << 5, /* the transport's write waits for readability */
    FLARE_S_ATTACHED = 1u << 6,   /* has a socket (a moved-to stream gets one later) */
    FLARE_S_SEG_FILE = 1u << 7,   /* some queued segment is a file range */
    FLARE_S_OUT_LAST = 1u << 8,   /* what is queued is the last output (see flare__stream_last) */
};

typedef struct flare_stream flare_stream_t;

/* The output a busy stream needs besides wbuf: borrowed segments and file
 * ranges, and how much of the queue a partial write already took. Made on
 * the first segment or partial write, kept until the stream closes (a
 * connection that sends files keeps its array); a stream that only ever
 * writes whole buffers (a keep-alive connection's small responses) never
 * has one. */
typedef struct flare_outq {
    size_t wsent;    /* bytes of the whole queue (wbuf + seg) already written */
    size_t segbytes; /* sum of seg[].len */
    uint32_t nsegs, capsegs;
    flare_outseg_t seg[];
} flare_outq_t;

/* The transport's handshake is done (TLS: the ALPN choice is known). */
typedef void (*flare_stream_open_fn)(flare_stream_t *s);

/* Laid out so that an idle HTTP/1.1 connection fits in 192 bytes
 * (http1/conn.h): what only a busy stream needs is behind `oq`, the
 * handshake's callback in the transport, the buffer pool in the loop. */
struct flare_stream {
    flare_io_t io;         /* first: the loop hands the protocol &io */
    flare_transport_t *tr; /* NULL: plain TCP */
    flare_loop_t *loop;    /* its loop: interest, clock, the worker's buffer pool */
    char *rbuf;
    uint32_t rlen, rcap, rpos;
    uint16_t sflags;
    /* the connection's (net/conn.h: FLARE_CONN_* flags, the peer's address
     * family), kept here where they cost no padding */
    uint8_t conn_flags, conn_family;
    flare_buf_t wbuf;  /* queued output bytes */
    uint64_t t_active; /* last progress, either direction (ms, loop clock) */
    flare_outq_t *oq;  /* NULL: no segment queued, no partial write */
};
/* Plain TCP on a loop that receives for the stream (io_uring: the loop's
 * multishot receive reads the socket, flare__loop_recv hands the bytes
 * over, no read(2)): s->tr is this marker, not NULL, so the inline fast
 * paths below (tr == NULL: epoll's plain TCP) stay as they are and the
 * slow paths take the received bytes. It has no state and no socket: only
 * flare__stream_tls transports have an object of their own. */
extern const flare_transport_t flare__recv_tr;
#define FLARE__RECV_TR ((flare_transport_t *)&flare__recv_tr)

/* Is there a transport with an object of its own (TLS)? */
static inline bool flare__stream_tls(const flare_stream_t *s)
{
    return s->tr != NULL && s->tr != FLARE__RECV_TR;
}

/* Sets up a stream on an accepted socket (tr NULL: plain) and starts
 * watching it for input with io->cb = cb (plain on an io_uring loop: input
 * as data, FLARE__RECV_TR). 0, or FLARE_ESYS (the caller still owns fd and
 * tr). */
int flare__stream_open(flare_stream_t *s, flare_loop_t *loop, int fd, flare_transport_t *tr,
                       flare_io_fn cb);

/* A stream that gets its socket later (flare__stream_move): output queues. */
void flare__stream_init_detached(flare_stream_t *s, flare_loop_t *loop, flare_io_fn cb);

/* Hands src's socket, transport and unconsumed input to dst (made with
 * flare__stream_init_detached; its queued output is kept and goes first),
 * and starts watching for input with dst's callback. src must have no
 * output left; it is left without a socket (closing it is then only
 * freeing). 0, or FLARE_ESYS: dst is then closed. */
int flare__stream_move(flare_stream_t *dst, flare_stream_t *src);

/* Closes the socket (after a clean end when `clean`: TLS sends close_notify
 * if the socket takes it now), frees the transport and releases queued
 * output; the read buffer stays (views into it may still be in use).
 * Idempotent. */
void flare__stream_close_socket(flare_stream_t *s, bool clean);

/* flare__stream_close_socket, and the buffers go back. Idempotent. */
void flare__stream_close(flare_stream_t *s, bool clean);

/* Reads once into the read buffer (taken from the pool when absent; when
 * full: compacted, or grown up to max_cap). >0 bytes added at rbuf+rlen
 * (the old rlen), 0 EOF (FLARE_S_RD_EOF set), -EAGAIN, or another -errno
 * (-ENOBUFS: the buffer is at max_cap; -ENOMEM). */
ssize_t flare__stream_read_slow(flare_stream_t *s, size_t max_cap);
void flare__stream_eof(flare_stream_t *s); /* the peer's end: FLARE_S_RD_EOF, no read interest */

/* Input a completion backend received into a buffer it owns (io_uring: a
 * provided buffer of its ring), handed to the stream instead of a read:
 * buf[0, len) is appended to the read buffer exactly as flare__stream_read
 * would have put it there (taken from the pool when absent; its consumed
 * front dropped, or grown up to max_cap, when the bytes do not fit), and
 * release(ud) returns the backend's buffer before this returns, whatever
 * the result. len, 0 when len is 0 (the peer's end: FLARE_S_RD_EOF, as a
 * read of 0), -ENOBUFS (they do not fit in max_cap) or -ENOMEM. The
 * protocol then consumes rbuf[rpos, rlen) as after a read. */
ssize_t flare__stream_give(flare_stream_t *s, const char *buf, size_t len, size_t max_cap,
                           flare_task_fn release, void *ud);

static inline ssize_t flare__stream_read(flare_stream_t *s, size_t max_cap)
{
    /* the common case inline: plain TCP, a buffer from the pool or one
     * whose bytes were all consumed */
    if (flare__likely(s->tr == NULL)) {
        if (s->rbuf == NULL) {
            s->rbuf = flare__bufpool_get(&s->loop->pool);
            if (s->rbuf == NULL)
                return -ENOMEM;
            s->rcap = FLARE_CONN_BUF;
            s->rlen = s->rpos = 0;
        } else if (s->rpos == s->rlen) {
            s->rpos = s->rlen = 0;
        } else if (s->rlen == s->rcap) {
            return flare__stream_read_slow(s, max_cap);
        }
        ssize_t n;
        do {
            n = flare__read(s->io.fd, s->rbuf + s->rlen, s->rcap - s->rlen);
        } while (n == -EINTR);
        if (flare__likely(n > 0)) {
            s->rlen += (uint32_t)n;
            s->t_active = s->loop->now;
            return n;
        }
        if (n == 0)
            flare__stream_eof(s);
        return n;
    }
    return flare__stream_read_slow(s, max_cap);
}

/* Application bytes the transport holds that epoll cannot see: read them
 * before waiting for the socket. Always false for plain TCP. */
static inline bool flare__stream_has_pending(const flare_stream_t *s)
{
    return s->tr != NULL && s->tr->ops->pending(s->tr) > 0;
}

/* Gives the read buffer back if everything in it was consumed, and the
 * output buffer if it is empty. */
void flare__stream_free_rbuf(flare_stream_t *s);
void flare__stream_free_wbuf(flare_stream_t *s);

/* Segments queued (borrowed memory, file ranges). */
static inline uint32_t flare__stream_nsegs(const flare_stream_t *s)
{
    return s->oq != NULL ? s->oq->nsegs : 0;
}

static inline void flare__stream_idle(flare_stream_t *s)
{
    if (s->rbuf != NULL && s->rpos == s->rlen) {
        if (flare__likely(s->rcap == FLARE_CONN_BUF)) {
            flare__bufpool_put(&s->loop->pool, s->rbuf);
            s->rbuf = NULL;
            s->rlen = s->rpos = s->rcap = 0;
        } else {
            flare__stream_free_rbuf(s);
        }
    }
    if (s->wbuf.data != NULL && s->wbuf.len == 0 && flare__stream_nsegs(s) == 0) {
        if (flare__likely(s->wbuf.cap == FLARE_CONN_BUF)) {
            flare__bufpool_put(&s->loop->pool, s->wbuf.data);
            s->wbuf.data = NULL;
            s->wbuf.cap = 0;
        } else {
            flare__stream_free_wbuf(s);
        }
    }
}

/* Output bytes queued and not yet written. */
static inline size_t flare__stream_unsent(const flare_stream_t *s)
{
    return s->wbuf.len + (s->oq != NULL ? s->oq->segbytes - s->oq->wsent : 0);
}

static inline bool flare__stream_has_output(const flare_stream_t *s)
{
    return s->wbuf.len > 0 || flare__stream_nsegs(s) > 0;
}

/* The output buffer, taken from the pool when absent (NULL data when out
 * of memory: appending then grows it from the heap). */
static inline flare_buf_t *flare__stream_wbuf(flare_stream_t *s)
{
    if (s->wbuf.data == NULL) {
        char *b = flare__bufpool_get(&s->loop->pool);
        if (b != NULL) {
            s->wbuf.data = b;
            s->wbuf.cap = FLARE_CONN_BUF;
            s->wbuf.len = 0;
        }
    }
    return &s->wbuf;
}

/* Appends a segment after the queued bytes (fd -1: borrowed memory, else a
 * file range; release(ud) runs once it is written or dropped). On failure
 * release(ud) runs at once and FLARE_ENOMEM is returned. */
int flare__stream_add_seg(flare_stream_t *s, const flare_outseg_t *seg);

/* A file range as the next output; takes fd (closed once sent or dropped). */
int flare__stream_push_file(flare_stream_t *s, int fd, uint64_t off, uint64_t len);

/* Writes now what the socket takes: iov[0..n) straight from the caller's
 * memory when nothing is queued before it, the rest queued (copied; the
 * last entry borrowed instead when release is set: release(ud) then runs
 * once it is out). 0, or a negative code: FLARE_ECLOSED when the socket
 * failed (the caller closes), FLARE_ENOMEM. */
int flare__stream_send(flare_stream_t *s, const struct iovec *iov, int n, flare_task_fn release,
                       void *ud);

/* Queues iov[0..n) without writing (copied; the last entry borrowed when
 * release is set). 0 or FLARE_ENOMEM (release has run either way when it
 * is not kept). */
int flare__stream_queue(flare_stream_t *s, const struct iovec *iov, int n, flare_task_fn release,
                        void *ud);

/* Output as a queue completed through a callback, in two steps that a
 * readiness backend runs together (flare__stream_flush_slow: out_next,
 * writev/sendfile, out_done, in the same turn) and a completion backend
 * apart (out_next, a send submitted with those iovecs, out_done from its
 * completion). */
typedef struct flare_out_next {
    /* non-NULL: the next piece is this file range, sent on its own from
     * file->off + file_skip (iov is then empty) */
    const flare_outseg_t *file;
    size_t file_skip;
    size_t total; /* bytes offered: in iov[0..n), or left of the file range */
    bool more;    /* a file range follows the gathered bytes (MSG_MORE) */
    bool all;     /* the gathered bytes are everything queued */
} flare_out_next_t;

/* What to send next: fills iov[0..max) with the queued bytes from the
 * first unsent one, in order (copied bytes and borrowed segments), up to a
 * file range; returns their count (0 with nx->file set: the range is next;
 * 0 with nothing set: nothing is queued). Changes nothing: the same offer
 * is made until out_done. The iovecs point into the queue, valid until
 * out_done or anything else queued. */
int flare__stream_out_next(const flare_stream_t *s, struct iovec *iov, int max,
                           flare_out_next_t *nx);

/* n bytes of what out_next offered were written (n may be less than
 * nx->total: a short send). Advances the queue; borrowed segments and file
 * ranges are released here once written (when the queue empties, or when
 * its written front is compacted), never at submission. true when the
 * queue is empty now (the protocol's "drained"). */
bool flare__stream_out_done(flare_stream_t *s, size_t n);

/* Writes queued output. 1: all written; 0: waiting for the socket
 * (interest set); -1: the socket failed (the caller closes the stream). */
int flare__stream_flush_slow(flare_stream_t *s);

/* A partial write of wbuf from the inline path: records it (in s->oq). */
void flare__stream_wrote_part(flare_stream_t *s, size_t n);

/* The common case inline: one buffer, nothing borrowed, plain TCP. */
static inline int flare__stream_flush(flare_stream_t *s)
{
    /* plain TCP: epoll's (tr NULL, tested first: its path is unchanged) or
     * io_uring's receiving marker, whose writes are plain write(2) too */
    if (flare__likely(s->oq == NULL && (s->tr == NULL || s->tr == FLARE__RECV_TR) &&
                      !(s->sflags & FLARE_S_WANT_WRITE))) {
        if (s->wbuf.len == 0)
            return 1;
        ssize_t wr = flare__write(s->io.fd, s->wbuf.data, s->wbuf.len);
        if (flare__likely((size_t)wr == s->wbuf.len)) {
            s->wbuf.len = 0;
            s->t_active = s->loop->now;
            return 1;
        }
        if (wr > 0)
            flare__stream_wrote_part(s, (size_t)wr);
        else if (wr != -EAGAIN && wr != -EINTR)
            return -1;
    }
    return flare__stream_flush_slow(s);
}

/* The protocol has queued the last bytes this connection will send (it
 * closes once they are out): a transport may end its side in the same send
 * (TLS seals close_notify behind them). Nothing may be queued after. */
static inline void flare__stream_last(flare_stream_t *s)
{
    s->sflags |= FLARE_S_OUT_LAST;
}

/* Input interest on or off (paused by a protocol that has enough queued,
 * or done with input). */
void flare__stream_read_enable(flare_stream_t *s, bool on);

/* Readiness as work: a transport read that waited for writability runs on
 * FLARE_IO_WRITE (and a write that waited for input on FLARE_IO_READ). */
static inline uint32_t flare__stream_ready(const flare_stream_t *s, uint32_t ev)
{
    if (flare__unlikely(s->sflags & (FLARE_S_RD_WAITS_W | FLARE_S_WR_WAITS_R))) {
        if ((ev & FLARE_IO_WRITE) && (s->sflags & FLARE_S_RD_WAITS_W))
            ev |= FLARE_IO_READ;
        if ((ev & FLARE_IO_READ) && (s->sflags & FLARE_S_WR_WAITS_R))
            ev |= FLARE_IO_WRITE;
    }
    return ev;
}

/* Ends the write side cleanly (close_notify, then shutdown(SHUT_WR)) and
 * discards input until EOF: the caller closes on EOF or when its linger
 * time is up (flare__stream_linger_read). */
void flare__stream_linger(flare_stream_t *s);

/* How long a lingering stream waits for the peer's EOF before it closes
 * anyway: every protocol's error path (HTTP/1.1, HTTP/2, WebSocket). */
#define FLARE_LINGER_MS 2000

/* In linger: reads and drops input. true when the stream should close now
 * (EOF or an error). */
bool flare__stream_linger_read(flare_stream_t *s);

/* Is the transport still handshaking (TLS before its first application byte
 * can flow)? */
static inline bool flare__stream_handshaking(const flare_stream_t *s)
{
    return s->tr != NULL && !(s->tr->state & FLARE_TR_ESTABLISHED);
}

#endif
