/* flare/proxy.h — a reverse proxy: routes whose requests go to a pool of
 * upstream servers (flare/client.h underneath).
 *
 *     flare_proxy_t *p;
 *     const char *ups[] = { "127.0.0.1:9001", "127.0.0.1:9002", NULL };
 *     flare_proxy_new(app, &(flare_proxy_config_t){ .upstreams = ups }, &p);
 *     flare_proxy_route(app, "/api", p);      // /api and everything under it
 *
 * Each request goes to the next upstream that is up (round robin, or the
 * one with the fewest requests in flight), with its method, target (path
 * and query as sent) and body. On the way:
 * - hop-by-hop fields are removed both ways (Connection and the fields it
 *   names, Keep-Alive, Proxy-Connection, TE, Trailer, Transfer-Encoding,
 *   Upgrade); the framing is the proxy's own (Content-Length from the body
 *   it read whole), so a request whose framing the server's parser would
 *   not trust never reaches an upstream, and one it trusts reaches it with
 *   one unambiguous framing: smuggling through the proxy is impossible by
 *   construction;
 * - X-Forwarded-For, X-Forwarded-Proto, X-Forwarded-Host and Forwarded
 *   (RFC 7239) are set: the incoming ones are dropped, or kept and
 *   appended to when trust_forwarded; Via gets "1.1 flare" both ways;
 * - Host is the upstream's (as nginx's default), or the client's with
 *   keep_host.
 * Failures: a request whose connection could not be made (refused, reset
 * in the handshake, connect timeout, name not found) is tried on the next
 * upstream, once per upstream; an upstream that failed max_fails times in
 * a row is left out for fail_timeout_ms. No upstream answered: 502; a
 * timeout after the request left: 504; a bad answer: 502 (nginx's
 * mapping). Requests are never retried once sent.
 *
 * Not yet: streaming bodies (both are read whole, up to the app's max_body
 * and client.max_response), WebSocket pass-through, active health checks. */
#ifndef FLARE_PROXY_H
#define FLARE_PROXY_H

#include <stdbool.h>

#include "flare/client.h"
#include "flare/flare.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A proxy: its upstreams, their health and a client (opaque; made by
 * flare_proxy_new, freed with the app). */
typedef struct flare_proxy flare_proxy_t;

/* How an upstream is chosen for a request. */
typedef enum flare_proxy_balance {
    FLARE_PROXY_ROUND_ROBIN = 0, /* each upstream in turn */
    FLARE_PROXY_LEAST_CONN,      /* the one with the fewest requests in flight */
} flare_proxy_balance_t;

/* Zero fields take the defaults in brackets. */
typedef struct flare_proxy_config {
    const char *const *upstreams;  /* "HOST:PORT", "http://HOST:PORT" or "https://HOST:PORT",
                                      NULL-terminated, at least one; copied */
    flare_proxy_balance_t balance; /* [FLARE_PROXY_ROUND_ROBIN] */
    bool keep_host;                /* send the client's Host [the upstream's] */
    bool trust_forwarded;          /* keep incoming X-Forwarded-* / Forwarded and append
                                      [drop them: the proxy is the edge] */
    unsigned max_fails;            /* connect failures in a row that take an upstream out [1] */
    unsigned fail_timeout_ms;      /* for this long [10 s] */
    flare_client_config_t client;  /* timeouts and limits toward the upstreams */
} flare_proxy_config_t;

/* Makes a proxy for app as cfg says (before flare_app_run; freed with the app). 0 and
 * *out, FLARE_EINVAL (no upstream, a bad one: flare_last_error says which),
 * FLARE_ESTATE, FLARE_ENOMEM, or flare_client_new's codes. */
FLARE_API int flare_proxy_new(flare_app_t *app, const flare_proxy_config_t *cfg,
                              flare_proxy_t **out);

/* Routes every method on prefix and everything under it ("" or "/": all
 * paths) to p. The flare_route codes. */
FLARE_API int flare_proxy_route(flare_app_t *app, const char *prefix, flare_proxy_t *p);

/* The handler itself, for a route or group of your own: forwards req and
 * answers res (ud: the proxy). */
FLARE_API int flare_proxy_handler(flare_req_t *req, flare_res_t *res, void *ud);

#ifdef __cplusplus
}
#endif

#endif
