/* TLS internals shared by tls_ctx.c (a listener's contexts, certificates
 * and ticket keys) and tls.c (the transport of each accepted connection):
 * the listener's state, which the transport takes its contexts from at
 * accept. */
#ifndef FLARE_NET_TLS_INT_H
#define FLARE_NET_TLS_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <openssl/evp.h>
#include <openssl/ssl.h>

#include "net/tls.h"

/* ---- ticket key ring ---------------------------------------------------- */

/* Here because struct flare_tls holds one; only tls_ctx.c touches it. */
typedef struct ticket_key {
    unsigned char name[16];
    unsigned char aes[32];
    unsigned char hmac[32];
} ticket_key_t;

#define RING_WORDS (2 * sizeof(ticket_key_t) / sizeof(uint64_t))

/* Written once per rotation, read by every handshake: its own cache lines.
 * words[] holds the current key then the previous one. seq is odd while a
 * rotation writes them (the C11 seqlock: every access is atomic, so readers
 * racing a writer retry instead of racing). */
typedef struct ticket_ring {
    _Alignas(64) _Atomic uint64_t seq;
    _Atomic uint64_t words[RING_WORDS];
    _Atomic uint64_t rotate_at_ms;
    uint64_t period_ms;
    pthread_mutex_t lock;
} ticket_ring_t;

_Static_assert(sizeof(ticket_key_t) % sizeof(uint64_t) == 0, "key is whole words");

/* ---- listener state ----------------------------------------------------- */

typedef struct cert_slot {
    SSL_CTX *ctx;
    char *names; /* lower-case DNS names, each NUL-terminated, "" ends the list */
} cert_slot_t;

typedef struct ctx_set {
    _Atomic unsigned refs; /* the listener's (while published) + one per connection */
    flare_tls_t *tls;
    size_t n;
    cert_slot_t cert[]; /* cert[0]: the default certificate */
} ctx_set_t;

struct flare_tls {
    SSL_CTX *base;            /* session cache, ticket callback, protocol settings */
    pthread_mutex_t pub_lock; /* guards `set` and taking a reference on it */
    ctx_set_t *set;
    pthread_mutex_t reload_lock; /* one reload at a time */
    EVP_CIPHER *ticket_cipher;
    unsigned char *alpn; /* ALPN wire format: length-prefixed names */
    size_t alpn_len;
    size_t ncerts;
    char **cert_files, **key_files;
    char *ciphers, *ciphersuites;
    unsigned handshake_timeout_ms, session_cache_size;
    bool no_tickets, tls13_only;
    ticket_ring_t ring;
};

/* A reference on a set dropped: the last one frees it (a connection's when
 * it ends, the listener's when a reload replaces the set or the listener
 * goes). */
void flare__tls_set_release(ctx_set_t *s);

/* Whether the kernel has the TLS ULP (kTLS), asked once per process. */
bool flare__tls_ktls_available(void);

#endif
