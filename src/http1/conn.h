/* An HTTP/1.1 connection: the connection of net/conn.h with the in-order
 * queue of exchanges in flight; its operations table (flare__h1_conn_ops). */
#ifndef FLARE_HTTP1_CONN_H
#define FLARE_HTTP1_CONN_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "worker.h"
#include "http1/accept.h"
#include "http/exchange.h"
#include "net/conn.h"
#include "net/stream.h"

/* Connection flags (the stream has its own: FLARE_S_*) */
enum {
    C_CLOSING = 1u << 0,  /* close once the output is flushed */
    C_IN_BATCH = 1u << 2, /* inside on_read processing: flush at the end */
    C_DEAD = 1u << 4,     /* closed (mirrors FLARE_CONN_DEAD: tested with the other flags) */
    C_READ_PAUSED = 1u << 6,
    C_HAD_REQUEST = 1u << 7,
    C_LINE_SEEN = 1u << 8,   /* the partial head has its request line */
    C_UPGRADE = 1u << 9,     /* 101 sent: hand the socket over once flushed */
    C_PEER_CLOSE = 1u << 10, /* the client asked for the close; its request was read whole */
    C_BODY_WAIT = 1u << 11,  /* a streamed body (c->recv) is not being read: paused/not started */
    C_H2 = 1u << 12,         /* the client preface was seen: HTTP/2 (c->h2) owns the connection */
    C_ALPN_H2 = 1u << 13,    /* ALPN chose h2: HTTP/2 takes the connection before its first byte */
    C_STREAM_OUT = 1u << 14, /* a streamed response reached the queue head: check its
                                backpressure after I/O (stream_out_check) */
};

/* An HTTP/1.1 connection: the protocol-neutral connection (net/conn.h)
 * first, then HTTP/1.1's own state. HTTP/2 takes the object over in place
 * (http2/h2.h: struct flare_h2conn must fit in it). */
typedef struct flare_h1conn {
    flare_conn_t base; /* first: the loop hands us &base.s.io */
    /* 32 bits, not 16: gcc updates a 16-bit field with a 16-bit constant
     * by load, or, store, 8 instructions more per keep-alive request in
     * all (bench/guard.sh: 1,256 with 16 bits) */
    uint32_t flags;  /* C_* */
    uint16_t nqueue; /* exchanges in qhead..qtail (at most MAX_INFLIGHT + 1) */
    uint32_t scan;   /* head bytes already scanned for a line end */
    /* first byte of the current head: the loop clock's low 32 bits (ms),
     * compared by unsigned difference (a header timeout is far below the
     * 49 days that wrap) */
    uint32_t t_head;
    struct flare_req *qhead, *qtail; /* in-flight exchanges, in request order */
    struct flare_req *recv;          /* exchange whose body is still arriving */
    /* rarely used, so not here: who takes the stream after a 101 (C_UPGRADE:
     * conn.c's list of pending upgrades), the TLS handshake's start
     * (the transport's hs_deadline) */
} h1conn_t;

/* The bytes per idle keep-alive connection (bench/counts.sh, idle): the
 * stream lends its buffers back to the pool when idle, so this is all. */
_Static_assert(sizeof(h1conn_t) <= 192, "an idle HTTP/1.1 connection grew past 192 bytes");

static inline flare_worker_t *h1_worker(const h1conn_t *c)
{
    return flare__conn_worker(&c->base);
}

void flare__conn_flush(h1conn_t *c);
/* response.c's upgrade: once everything before the 101 is out, the stream
 * goes to fn(ud) (handoff); 0 or FLARE_ENOMEM. */
int flare__h1_upgrade_set(h1conn_t *c, flare_upgrade_fn fn, void *ud);
extern const flare_conn_ops_t flare__h1_conn_ops;

#endif
