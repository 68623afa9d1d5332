/* The connection: one accepted socket as the worker sees it, whatever
 * protocol speaks on it.
 *
 * struct flare_conn is the stream (first member: the loop hands the io
 * callback &c->s.io), the protocol's operations table `ops`, the client's
 * address, and the worker's list link (w->conns: the sweep, drain and
 * close-all walk it; a closed connection moves to w->dead and is freed
 * after the event batch, so a pending poller event never points into freed
 * memory), and its worker (flare__conn_worker). It holds no protocol's fields: each protocol embeds
 * it first in its own object (http1/conn.h: struct flare_h1conn; http2/h2.h:
 * struct flare_h2conn) and casts.
 *
 * The operations (struct flare_conn_ops), protocol-prefixed in each
 * implementation (h1_*, h2_*):
 *   closed  net/conn.c's flare__conn_close, once, after the stream is closed
 *           and the connection left the worker's list: the protocol lets go
 *           of what is in flight (exchanges orphaned, streams freed).
 *   sweep   worker.c's periodic sweep (flare__conn_sweep_all), with the
 *           loop's clock: the protocol enforces its deadlines (header,
 *           body, idle, write, linger; TLS handshake) and may close.
 *   drain   worker.c's graceful shutdown (flare__conn_drain_all), once per
 *           connection: finish what is in flight, then close (the sweep
 *           closes whatever is left at the drain deadline).
 *   free    after the event batch (flare__conn_free_dead): frees the object.
 *   stats   obs/ (metrics gauges, health): what is in flight, by kind.
 *
 * Who owns the connection: HTTP/1.1 accepts it (http1/conn.c,
 * flare__conn_open: every listener speaks HTTP/1.1 first). When ALPN chose
 * h2, or the HTTP/1.1 parser meets the client preface, HTTP/2 takes the same
 * object over in place (flare__h2_start: its ops replace HTTP/1.1's, its
 * session pointer lies where HTTP/1.1's fields were, the io callback becomes
 * HTTP/2's). A WebSocket upgrade moves the stream into the WebSocket's own
 * object once the 101 is out (flare__stream_move; ws/conn.c) and the
 * HTTP/1.1 connection ends.
 *
 * The path of one read:
 *   HTTP/1.1: epoll -> loop -> http1 conn_io_cb(&c->s.io) -> on_readable:
 *     flare__stream_read (inline on plain TCP: one read(2) into the pool
 *     buffer the stream lends; TLS: the transport's read) -> process()
 *     parses every complete head in the buffer, routes and dispatches ->
 *     responses are serialized into the stream's queue -> one
 *     flare__stream_flush (one write/writev) at the end of the batch ->
 *     flare__stream_idle gives the buffers back.
 *   HTTP/2: epoll -> loop -> http2 h2_io_cb -> on_readable: flare__stream_read
 *     -> nghttp2_session_mem_recv over the buffer (feed) -> ready streams
 *     dispatched -> send_flush: nghttp2's frames appended to the stream's
 *     queue, one flush.
 *   WebSocket: epoll -> loop -> ws io_cb (its own object, stream moved in)
 *     -> flare__stream_read -> frames parsed in place, messages delivered ->
 *     replies queued on the stream and flushed at the end of the batch.
 *   TLS is below the stream (net/transport.h): every path above reads
 *   plaintext through the same flare__stream_read.
 * Readiness is still each protocol's: the loop calls the io callback the
 * protocol set on the stream (HTTP/1.1's conn_io_cb, HTTP/2's h2_io_cb,
 * WebSocket's io_cb), which reads and flushes through the stream. The
 * design's "data arrived" / "output drained" operations, one callback in
 * net/ calling them, are the next step; the table has no entries for them
 * yet.
 *
 * Size: an idle keep-alive HTTP/1.1 connection allocates 192 bytes (this
 * struct, 152, and HTTP/1.1's 40; asserted in http1/conn.h). What an idle
 * one does not need lives elsewhere: the stream's segments and partial
 * write state behind one pointer (flare_outq_t, made on first use), the
 * TLS handshake's callback and deadline in the transport, the buffer pool
 * in the loop, the listener only as what is read of it (the admin flag,
 * FLARE_CONN_ADMIN; the TLS handshake deadline), a pending upgrade's taker
 * in HTTP/1.1's list of them.
 */
#ifndef FLARE_NET_CONN_H
#define FLARE_NET_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "net/stream.h"
#include "worker.h"

struct flare_listener;
struct flare_req;

/* What a connection speaks (flare_conn_ops.kind). */
typedef enum flare_conn_kind {
    FLARE_CONN_HTTP1 = 0,
    FLARE_CONN_HTTP2,
    FLARE_CONN_WS,
} flare_conn_kind_t;

/* A connection's statistics (obs/: sampled gauges, health). */
typedef struct flare_conn_stats {
    unsigned inflight; /* exchanges (HTTP/1.1) or request streams (HTTP/2) in flight */
    bool active;       /* something in flight, or request bytes unread */
    /* the exchange whose response goes out next when responses leave in
     * request order (HTTP/1.1: the head of its queue); NULL when they need
     * no order (HTTP/2) or none is in flight */
    const struct flare_req *next_out;
} flare_conn_stats_t;

typedef struct flare_conn_ops {
    const char *name; /* "http/1.1", "h2" */
    flare_conn_kind_t kind;
    void (*closed)(flare_conn_t *c);
    void (*sweep)(flare_conn_t *c, uint64_t now);
    void (*drain)(flare_conn_t *c);
    void (*free)(flare_conn_t *c);
    void (*stats)(const flare_conn_t *c, flare_conn_stats_t *st);
} flare_conn_ops_t;

/* Generic connection flags (c->s.conn_flags) */
enum {
    FLARE_CONN_DEAD = 1u << 0,  /* closed: on w->dead until the batch ends */
    FLARE_CONN_ADMIN = 1u << 1, /* accepted on an admin listener (flare_app_admin_listen) */
};

struct flare_conn {
    flare_stream_t s; /* first: the loop hands the io callback &s.io */
    const flare_conn_ops_t *ops;
    /* its worker. A pointer, not derived from the stream's loop: passing a
     * derived pointer on costs an instruction at each use (bench/guard.sh:
     * 1,256 instructions per keep-alive request derived, against 1,248) */
    flare_worker_t *w;
    flare_conn_t *prev, *next; /* the worker's list (w->conns; w->dead once closed) */
    uint8_t peer[16];          /* client address (IPv4 in the first 4 bytes) */
    /* and in the stream's spare bytes (no padding here): s.conn_flags
     * (FLARE_CONN_*) and s.conn_family (the peer's: AF_INET, AF_INET6,
     * AF_UNIX; 0: unknown), read through the functions below */
};

/* An idle HTTP/1.1 connection allocates this and 40 bytes of its own
 * (http1/conn.h: 192 in all): keep it at 152. */
_Static_assert(sizeof(struct flare_conn) <= 152, "the connection grew");

/* The worker a connection lives on. */
static inline flare_worker_t *flare__conn_worker(const flare_conn_t *c)
{
    return c->w;
}

/* Sets c's address from the accepted socket's (sa may be NULL). After the
 * stream's open: the family is kept in the stream. */
struct sockaddr;
void flare__conn_set_peer(flare_conn_t *c, const struct sockaddr *sa);

/* Puts c (its stream open on w's loop) on w's list with its ops. */
void flare__conn_attach(flare_conn_t *c, flare_worker_t *w, const flare_conn_ops_t *ops);

/* Closes c: the stream (after a clean end when `clean`: TLS close_notify),
 * off the worker's list, then ops->closed; c is freed (ops->free) after the
 * event batch. Idempotent. */
void flare__conn_close(flare_conn_t *c, bool clean);

static inline bool flare__conn_dead(const flare_conn_t *c)
{
    return c->s.conn_flags & FLARE_CONN_DEAD;
}

/* Was c accepted on an admin listener? */
static inline bool flare__conn_admin(const flare_conn_t *c)
{
    return c->s.conn_flags & FLARE_CONN_ADMIN;
}

static inline int flare__conn_peer_family(const flare_conn_t *c)
{
    return c->s.conn_family;
}

/* worker.c: each live connection's ops->sweep / ops->drain; then, past the
 * drain deadline, the close of what is left. */
void flare__conn_sweep_all(flare_worker_t *w);
void flare__conn_drain_all(flare_worker_t *w);
/* Closes every connection of w (the worker stops) and frees the dead. */
void flare__conn_close_all(flare_worker_t *w);
void flare__conn_free_dead(flare_worker_t *w);

/* Draining: an idle connection is closed once idle this long (ms), so a
 * request already on its way is answered (Connection: close), not reset. */
#define FLARE__DRAIN_IDLE_GRACE_MS 250

#endif
