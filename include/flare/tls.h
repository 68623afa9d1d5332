/* TLS listeners (OpenSSL 3).
 *
 * A listener speaks TLS when it is given a flare_tls_config_t: TLS 1.2 and
 * 1.3 only, ECDHE with AEAD ciphers for TLS 1.2, ALPN, SNI choosing among
 * several certificates, session resumption on every worker (tickets whose
 * keys all workers share and rotate, plus a shared session cache),
 * renegotiation refused, close_notify before a clean close, and a handshake
 * deadline counted from accept. kTLS is asked for and used when the kernel
 * has it; otherwise records are made in user space, silently.
 *
 *     flare_tls_config_t tls = { .cert_file = "cert.pem", .key_file = "key.pem" };
 *     flare_app_listen(app, "0.0.0.0:443", &tls);
 *     flare_app_listen(app, "0.0.0.0:80", NULL);
 *     flare_app_run(app, NULL);
 */
#ifndef FLARE_TLS_H
#define FLARE_TLS_H

#include <stdbool.h>
#include <stddef.h>

#include "flare/flare.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One certificate: a PEM file with the certificate chain (leaf first) and a
 * PEM file with its private key (RSA, ECDSA or Ed25519). SNI picks the
 * certificate whose names (subjectAltName DNS entries, else the CN) match
 * the name the client asks for; wildcards "*.example.com" match one label. */
typedef struct flare_tls_cert {
    const char *cert_file; /* certificate chain file (PEM) */
    const char *key_file;  /* its private key file (PEM) */
} flare_tls_cert_t;

/* A zeroed field takes its default (in brackets). The strings are copied. */
typedef struct flare_tls_config {
    const char *cert_file;              /* the default certificate: required */
    const char *key_file;               /* required */
    const flare_tls_cert_t *more_certs; /* more certificates, chosen by SNI */
    size_t nmore_certs;                 /* entries in more_certs[] */
    const char *ciphers;           /* TLS 1.2 cipher list [ECDHE + AES-GCM / ChaCha20-Poly1305] */
    const char *ciphersuites;      /* TLS 1.3 suites [OpenSSL's default] */
    const char *alpn;              /* ALPN protocols in preference order, comma-separated
                                      ["h2,http/1.1"]; a client offering none of them is refused */
    unsigned handshake_timeout_ms; /* from accept to the end of the handshake [10 s] */
    unsigned ticket_rotate_s;      /* ticket keys rotate this often; the previous key
                                      still decrypts for one more period [3600 s] */
    unsigned session_cache_size;   /* shared session cache entries [20480] */
    bool no_tickets;               /* resume only through the session cache */
    bool tls13_only;               /* refuse TLS 1.2 */
} flare_tls_config_t;

/* Adds a listening address addr (HOST:PORT or a unix socket, as for
 * flare_app_run), plain when tls is NULL (TLS over a unix socket works
 * too). Before flare_app_run; call it once per address ("0.0.0.0:80"
 * plain and "0.0.0.0:443" TLS in one app). The certificate files are read
 * here: a missing file, a key that does not match its certificate or a bad
 * cipher list fail now with FLARE_ETLS and flare_last_error() naming the
 * file and OpenSSL's reason. Returns 0, FLARE_EADDR, FLARE_ETLS,
 * FLARE_ENOMEM or FLARE_ESTATE (running). */
FLARE_API int flare_app_listen(flare_app_t *app, const char *addr, const flare_tls_config_t *tls);

/* The port listener i (in the order added; flare_app_run's own address, if
 * any, comes first) is bound to, once flare_app_run has bound them; 0 before,
 * for a unix socket, or when there is no such listener. */
FLARE_API int flare_app_listener_port(const flare_app_t *app, unsigned i);

/* Re-reads the certificate and key files of every TLS listener. New
 * handshakes use the new certificates; established connections keep going,
 * and the session ticket keys are kept, so sessions still resume. If any
 * file fails to load, nothing changes and FLARE_ETLS is returned (with
 * flare_last_error()). Safe from any thread while the app runs, and before. */
FLARE_API int flare_app_tls_reload(flare_app_t *app);

/* Counters of the TLS listeners, summed over workers (any thread, while the
 * app runs). */
typedef struct flare_tls_stats {
    unsigned long long handshakes;         /* completed, full and resumed */
    unsigned long long resumed;            /* of which resumed (ticket or cache) */
    unsigned long long handshake_errors;   /* failed: bad input, refused, reset */
    unsigned long long handshake_timeouts; /* handshakes that took too long */
    unsigned long long plaintext_http;     /* plain HTTP requests answered with 400 */
} flare_tls_stats_t;
/* Fills *out with the counters summed over the workers (zeros before the
 * first run). 0, or FLARE_EINVAL when app or out is NULL. */
FLARE_API int flare_app_tls_stats(flare_app_t *app, flare_tls_stats_t *out);

#ifdef __cplusplus
}
#endif

#endif
