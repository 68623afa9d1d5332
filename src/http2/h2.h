/* HTTP/2 (nghttp2 through its memory interface) on a connection that
 * began as HTTP/1.1: what src/http1/conn.c calls once it has seen the
 * client preface, and from its sweep, drain and close paths. */
#ifndef FLARE_HTTP2_H2_H
#define FLARE_HTTP2_H2_H

#include <stdbool.h>
#include <stddef.h>

#include "http1/conn.h"

/* Whether buf[0..len) is the client preface ("PRI * HTTP/2.0..."), or a
 * prefix of it (*partial set: wait for more bytes). */
bool flare__h2_preface(const char *buf, size_t len, bool *partial);

/* Turns c into an HTTP/2 connection: the stream's unconsumed input (from
 * the preface on) is fed to a new nghttp2 server session, the io callback
 * becomes HTTP/2's. On failure the connection is closed. */
void flare__h2_start(flare_conn_t *c);

/* The worker's sweep, its drain, the connection's end (in-flight exchanges
 * are orphaned) and the free of a dead connection's HTTP/2 state. */
void flare__h2_sweep(flare_conn_t *c);
void flare__h2_drain(flare_conn_t *c);
void flare__h2_end(flare_conn_t *c);
void flare__h2_free(flare_conn_t *c);

/* Frees the worker's HTTP/2 block lists (after its connections are gone). */
void flare__h2_mem_dispose(flare_worker_t *w);
/* The sweep: frees the blocks of each list that none took since the last
 * call (its low-water mark); returns the bytes freed. */
size_t flare__h2_mem_trim(flare_worker_t *w);

/* stats.c: the request streams open on c (the metrics' sampled gauge; on
 * c's worker). */
unsigned flare__h2_streams_open(const flare_conn_t *c);

#endif
