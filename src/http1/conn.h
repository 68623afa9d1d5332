/* An HTTP/1.1 connection: a stream, the in-order queue of exchanges in
 * flight, and the worker-level calls worker.c makes (sweep, drain, close). */
#ifndef FLARE_HTTP1_CONN_H
#define FLARE_HTTP1_CONN_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "worker.h"
#include "http/exchange.h"
#include "net/stream.h"

/* Connection flags (the stream has its own: FLARE_S_*) */
enum {
    C_CLOSING = 1u << 0,  /* close once the output is flushed */
    C_IN_BATCH = 1u << 2, /* inside on_read processing: flush at the end */
    C_DEAD = 1u << 4,
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

struct flare_conn {
    flare_stream_t s; /* first: the loop hands us &s.io */
    uint32_t flags;
    uint32_t nqueue;
    flare_worker_t *w;
    uint32_t scan;                   /* head bytes already scanned for a line end */
    struct flare_req *qhead, *qtail; /* in-flight exchanges, in request order */
    struct flare_req *recv;          /* exchange whose body is still arriving */
    flare_upgrade_fn upgrade_fn;     /* C_UPGRADE: who takes the stream */
    void *upgrade_ud;
    const struct flare_listener *listener;
    uint8_t peer[16]; /* client address (IPv4 in the first 4 bytes) */
    uint8_t peer_family;
    uint64_t t_head; /* first byte of the current head (ms) */
    uint64_t t_open; /* accept (ms): the TLS handshake deadline counts from here */
    flare_conn_t *prev, *next;
    struct flare_h2 *h2; /* C_H2: the HTTP/2 session (src/http2/) */
};

/* Draining: an idle connection is closed once idle this long (ms), so a
 * request already on its way is answered (Connection: close), not reset. */
#define FLARE__DRAIN_IDLE_GRACE_MS 250

/* http1/conn.c */
struct flare_listener;
void flare__conn_open(flare_worker_t *w, int fd, const struct sockaddr *sa,
                      const struct flare_listener *l);
void flare__conn_close(flare_conn_t *c);
void flare__conn_close_clean(flare_conn_t *c); /* the conversation is over: TLS close_notify */
void flare__conn_flush(flare_conn_t *c);
void flare__conn_sweep(flare_worker_t *w);
void flare__conn_free_dead(flare_worker_t *w);
void flare__conn_drain(flare_worker_t *w);

#endif
