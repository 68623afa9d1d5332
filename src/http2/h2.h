/* HTTP/2 (nghttp2 through its memory interface) on a connection that
 * began as HTTP/1.1: what src/http1/conn.c calls once ALPN chose h2 or it
 * has seen the client preface. From then on the connection's operations
 * table is HTTP/2's (flare__h2_conn_ops: sweep, drain, close, statistics). */
#ifndef FLARE_HTTP2_H2_H
#define FLARE_HTTP2_H2_H

#include <stdbool.h>
#include <stddef.h>

#include "net/conn.h"

/* Whether buf[0..len) is the client preface ("PRI * HTTP/2.0..."), or a
 * prefix of it (*partial set: wait for more bytes). */
bool flare__h2_preface(const char *buf, size_t len, bool *partial);

/* An HTTP/2 connection: the connection of net/conn.h and the session.
 * HTTP/2 takes an HTTP/1.1 connection's object over in place, so this
 * must not be larger than it (http1/conn.c asserts it). */
typedef struct flare_h2conn {
    flare_conn_t base;
    struct flare_h2 *h2;
} flare_h2conn_t;

/* Turns c (an HTTP/1.1 connection with nothing in flight) into an HTTP/2
 * connection in place: the stream's unconsumed input (from the preface on)
 * is fed to a new nghttp2 server session, the ops and the io callback
 * become HTTP/2's. On failure the connection is closed. */
void flare__h2_start(flare_conn_t *c);

extern const flare_conn_ops_t flare__h2_conn_ops;

/* Frees the worker's HTTP/2 block lists (after its connections are gone). */
void flare__h2_mem_dispose(flare_worker_t *w);
/* The sweep: frees the blocks of each list that none took since the last
 * call (its low-water mark); returns the bytes freed. */
size_t flare__h2_mem_trim(flare_worker_t *w);

#endif
