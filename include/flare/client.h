/* flare/client.h — an HTTP client on the worker's loop.
 *
 * A handler (or any code on a worker: a timer, a WebSocket callback) calls
 * another service without blocking its worker: the request is sent and its
 * answer read on the same loop, and the callback runs later on the same
 * worker, the way database calls complete (flare/db.h).
 *
 *     static void got(int rc, const flare_client_res_t *r, void *ud)
 *     {
 *         flare_res_t *res = ud;
 *         if (rc != 0)
 *             return (void)flare_res_send(res, 502, FLARE_STR("text/plain"),
 *                                         FLARE_STR("upstream failed\n"));
 *         flare_res_send(res, r->status, FLARE_STR("application/json"), r->body);
 *     }
 *     static int h(flare_req_t *req, flare_res_t *res, void *ud)
 *     {
 *         int rc = flare_client_request(ud, flare_req_worker(req),
 *                                       &(flare_client_req_t){ .url = "http://127.0.0.1:9000/x" },
 *                                       got, res, NULL);
 *         return rc == 0 ? FLARE_ASYNC : rc;
 *     }
 *
 * What it does: HTTP/1.1 over TCP or TLS; per worker, a pool of keep-alive
 * connections per origin (scheme, host, port) with a limit (requests past
 * it wait for a connection, in order) and an idle timeout; a request that
 * finds its pooled connection closed by the server before any answer byte
 * is sent again on a new one when its method is idempotent (GET, HEAD, PUT,
 * DELETE, OPTIONS), never otherwise. Host names are resolved on the app's
 * blocking-job pool (never on the loop), cached per worker for 30 s. TLS
 * verifies the certificate against the system's store (or ca_file) and the
 * host name, with SNI; a bad certificate fails the request with
 * FLARE_ETLS, never a silent downgrade. Answers are read with a strict
 * parser: malformed status lines or fields, conflicting Content-Length /
 * Transfer-Encoding, a body shorter than declared, resets and silence are
 * errors for the caller, never a crash or a hang (bytes after a whole
 * answer are not read as another: the connection is closed).
 *
 * Not yet: HTTP/2 upstreams, streaming bodies (both are read and sent
 * whole, up to max_response), redirects, metrics per upstream, automatic
 * cancellation when the inbound request goes away (cancel it yourself). */
#ifndef FLARE_CLIENT_H
#define FLARE_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "flare/flare.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A client: its configuration and, per worker, its connection pools
 * (opaque; made by flare_client_new, freed with the app). */
typedef struct flare_client flare_client_t;
/* One request in flight (opaque): flare_client_cancel's handle. */
typedef struct flare_client_call flare_client_call_t;

/* Zero fields take the defaults in brackets. */
typedef struct flare_client_config {
    unsigned connect_timeout_ms;    /* TCP connect and TLS handshake [5 s] */
    unsigned first_byte_timeout_ms; /* request sent -> first answer byte [30 s] */
    unsigned idle_timeout_ms;       /* no progress while sending or receiving [30 s] */
    unsigned total_timeout_ms;      /* the whole call, waiting for a connection included [60 s] */
    unsigned pool_idle_ms;          /* an unused keep-alive connection is closed after [30 s] */
    unsigned max_per_origin;        /* connections per origin per worker [32] */
    size_t max_response;            /* answer body bytes; more: FLARE_ETOOBIG [64 MiB] */
    const char *ca_file;            /* PEM CA bundle for https; NULL: the system's store */
    /* Fixed answers for names, like curl's --resolve: "host:port:addr[,addr]..."
     * strings (up to 4 addresses each, IPv6 ones bare or in brackets),
     * NULL-terminated; may be NULL. A call to that host and port uses these
     * addresses, in order, instead of the resolver's; copied. */
    const char *const *resolve;
} flare_client_config_t;

/* Makes a client for app (before flare_app_run; freed with the app). cfg
 * may be NULL. 0 and *out, or FLARE_EINVAL, FLARE_ESTATE (running),
 * FLARE_ETLS (ca_file unreadable: flare_last_error says why), FLARE_ENOMEM. */
FLARE_API int flare_client_new(flare_app_t *app, const flare_client_config_t *cfg,
                               flare_client_t **out);

/* A request. Fields left zero take defaults. */
typedef struct flare_client_req {
    const char *method;         /* NULL: "GET" */
    const char *url;            /* "http://host[:port]/path?query" or "https://..." */
    const char *const *headers; /* "Name: value" strings, NULL-terminated; may be NULL.
                                   Host, Content-Length and Connection are the client's */
    flare_str_t body;           /* sent with Content-Length; copied */
    unsigned timeout_ms;        /* > 0: this call's total timeout */
    const char *host;           /* the Host header's value; NULL: the URL's authority */
    /* > 0: answers 301, 302, 303, 307 and 308 with a Location are followed,
     * up to this many times (more: FLARE_EIO, "too many redirects"). 303,
     * and 301/302 to a POST, continue as GET without the body; 307/308 keep
     * the method and body. Authorization, Cookie, Proxy-Authorization and
     * the host override are dropped when the redirect leaves the origin.
     * 0: a redirect is an answer like any other. */
    unsigned max_redirects;
    /* The inbound request this call serves, or NULL: when its client goes
     * away first (flare_req_on_abort), the call is cancelled and its
     * callback runs (from the loop, soon after) with FLARE_ECANCELED, so the
     * handler ends as usual; its answer goes nowhere. */
    flare_req_t *req;
} flare_client_req_t;

/* An answer, valid during the callback only. */
typedef struct flare_client_res {
    int status;                    /* the status code, 200..599 */
    const flare_header_t *headers; /* the answer's fields, in order */
    size_t nheaders;               /* entries in headers[] */
    flare_str_t body;              /* the whole body (NUL-terminated after body.len) */
} flare_client_res_t;

/* rc 0 with the answer (any status), or: FLARE_ETIMEDOUT (a timeout
 * passed), FLARE_ECLOSED (the server closed or reset the connection before
 * the answer was whole), FLARE_EIO (the answer is not valid HTTP/1.1:
 * flare_client_error_text says what), FLARE_ETLS (handshake or certificate
 * failure), FLARE_ENOTFOUND (the host name does not resolve), FLARE_ESYS
 * (connect refused, ...), FLARE_ETOOBIG (past max_response), FLARE_EUNAVAIL
 * (the worker is shutting down), FLARE_ENOMEM. res is NULL unless rc is 0. */
typedef void (*flare_client_fn)(int rc, const flare_client_res_t *res, void *ud);

/* Starts the request req of client c on worker w (call from w's thread),
 * with cb(rc, res, ud) as its callback. 0: cb runs exactly
 * once, later, on w (never from inside this call), unless the call is
 * cancelled; *call (may be NULL) is its handle until then. Or FLARE_EINVAL
 * (a bad URL, method or header: flare_last_error says which), FLARE_ESTATE
 * (not on w's thread, or w not running), FLARE_ENOMEM: cb will not run. */
FLARE_API int flare_client_request(flare_client_t *c, flare_worker_t *w,
                                   const flare_client_req_t *req, flare_client_fn cb, void *ud,
                                   flare_client_call_t **call);

/* Cancels a call whose callback has not run: it will not run. The
 * connection it used is closed (its answer would be unread). On the
 * call's worker. */
FLARE_API void flare_client_cancel(flare_client_call_t *call);

/* Inside a callback with rc != 0: a description of the failure. */
FLARE_API const char *flare_client_error_text(void);

/* Inside a callback with rc != 0: whether the request never left (the name
 * did not resolve, the connection or its TLS handshake failed): sending it
 * elsewhere cannot do anything twice. */
FLARE_API bool flare_client_error_before_send(void);

#ifdef __cplusplus
}
#endif

#endif
