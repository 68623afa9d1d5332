/* TLS for listeners (OpenSSL 3): one flare_tls_t per TLS listener, shared
 * by every worker (OpenSSL's SSL_CTX is safe to share), and the TLS
 * transport for each accepted connection. */
#ifndef FLARE_NET_TLS_H
#define FLARE_NET_TLS_H

#include <stdint.h>

#include "flare/common.h"
#include "flare/tls.h"
#include "net/transport.h"

typedef struct flare_tls flare_tls_t;

/* Per-worker counters (worker.h). */
struct flare_tls_counters;

/* Builds a listener's TLS state from *cfg (copied): loads the
 * certificates, checks each key matches its certificate, sets versions,
 * ciphers, ALPN, SNI, tickets and the session cache. 0, or FLARE_ETLS /
 * FLARE_EINVAL / FLARE_ENOMEM with flare_last_error() naming the file or
 * field and OpenSSL's reason. */
int flare__tls_new(flare_tls_t **out, const flare_tls_config_t *cfg);

/* Re-reads the certificate files; on any failure nothing changes (0 or
 * FLARE_ETLS). Thread-safe against flare__tls_accept on every worker:
 * connections already made keep the context they started with. */
int flare__tls_reload(flare_tls_t *t);

void flare__tls_free(flare_tls_t *t);

/* Rotates the session ticket keys now (the current key becomes the
 * previous one, which still decrypts until the next rotation), as the
 * ticket_rotate_s timer would. Any thread. For tests and operators. */
void flare__tls_rotate_ticket_keys(flare_tls_t *t);

/* The handshake deadline, from accept (ms). */
unsigned flare__tls_handshake_timeout(const flare_tls_t *t);

/* A server-side TLS transport on the accepted socket fd (not owned: the
 * stream closes it). The handshake runs inside the first reads. NULL when
 * out of memory. ctr: the accepting worker's counters (kept; must outlive
 * the transport). */
flare_transport_t *flare__tls_accept(flare_tls_t *t, int fd, struct flare_tls_counters *ctr);

/* The protocol ALPN chose ("" before the handshake or without ALPN), and
 * the name the client asked for with SNI ("" when none). Views valid while
 * the transport lives. */
flare_str_t flare__tls_alpn(const flare_transport_t *tr);
flare_str_t flare__tls_sni(const flare_transport_t *tr);

#endif
