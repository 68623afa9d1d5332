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
    uint32_t flags;
    uint32_t nqueue;
    uint32_t scan;                   /* head bytes already scanned for a line end */
    struct flare_req *qhead, *qtail; /* in-flight exchanges, in request order */
    struct flare_req *recv;          /* exchange whose body is still arriving */
    flare_upgrade_fn upgrade_fn;     /* C_UPGRADE: who takes the stream */
    void *upgrade_ud;
    uint64_t t_head; /* first byte of the current head (ms) */
    uint64_t t_open; /* accept (ms): the TLS handshake deadline counts from here */
} h1conn_t;

static inline flare_worker_t *h1_worker(const h1conn_t *c)
{
    return flare__conn_worker(&c->base);
}

void flare__conn_flush(h1conn_t *c);
extern const flare_conn_ops_t flare__h1_conn_ops;

#endif
