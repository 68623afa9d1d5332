/* Built-in middleware: CORS, security headers, rate limiting, request ids.
 *
 * Each constructor validates its configuration, precomputes every header
 * value, and fills a flare_middleware_t whose state belongs to the app (freed
 * by flare_app_free). Register it with flare_use, flare_group_use or
 * flare_route_mw. Call before flare_app_run. */
#ifndef FLARE_MIDDLEWARE_H
#define FLARE_MIDDLEWARE_H

#include <stdbool.h>

#include "flare/flare.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- CORS ---- */

/* flare_cors's options. */
typedef struct flare_cors_config {
    /* Allowed origins, exact ("https://app.example.com"), NULL-terminated.
     * A single "*" allows any origin (then credentials must be false). */
    const char *const *origins;
    /* Optional pattern such as "https://" "*" ".example.com" (one '*' standing for one or
     * more DNS labels). */
    const char *origin_pattern;
    const char *methods;        /* default "GET, HEAD, POST, PUT, PATCH, DELETE" */
    const char *headers;        /* allowed request headers; default "Content-Type" */
    const char *expose_headers; /* default none */
    bool credentials;           /* Access-Control-Allow-Credentials: true */
    unsigned max_age;           /* preflight cache seconds; 0: not sent */
} flare_cors_config_t;

/* The CORS middleware, configured by cfg, written to out.
 * Preflights (OPTIONS with Origin and Access-Control-Request-Method) are
 * answered 204 by the middleware itself when the origin and method are
 * allowed, 403 otherwise. Other requests from an allowed origin get
 * Access-Control-Allow-Origin (the origin itself unless "*"), credentials and
 * exposed headers; responses that depend on Origin carry Vary: Origin.
 * FLARE_EINVAL: no origin at all (origins and origin_pattern are the one
 * part without a default), credentials with "*", a malformed origin or
 * pattern; flare_last_error() names the field. */
FLARE_API int flare_cors(flare_app_t *app, const flare_cors_config_t *cfg, flare_middleware_t *out);

/* ---- security headers ---- */

/* flare_security_headers's options; a zeroed struct means the defaults. */
typedef struct flare_security_config {
    const char *frame_options;   /* default "DENY"; "" to omit */
    const char *referrer_policy; /* default "no-referrer"; "" to omit */
    unsigned hsts_max_age;       /* seconds; 0: no Strict-Transport-Security */
    bool hsts_subdomains;        /* includeSubDomains */
    const char *csp;             /* Content-Security-Policy; NULL: none */
    /* Per-request CSP (e.g. with a nonce): returns the policy for this
     * response, or a .ptr == NULL view to use `csp`. */
    flare_str_t (*csp_fn)(flare_req_t *req, void *ud);
    void *csp_ud;
} flare_security_config_t;

/* Fills *out with a middleware, configured by cfg, that adds
 * X-Content-Type-Options: nosniff, X-Frame-Options, Referrer-Policy,
 * Strict-Transport-Security (when configured) and Content-Security-Policy
 * (when configured) to every response. */
FLARE_API int flare_security_headers(flare_app_t *app, const flare_security_config_t *cfg,
                                     flare_middleware_t *out);

/* ---- rate limiting ---- */

struct flare_redis;

/* flare_ratelimit's options. */
typedef struct flare_ratelimit_config {
    double rate;          /* tokens added per second, > 0 (required: no default) */
    unsigned burst;       /* bucket size [0: rate rounded up, at least 1] */
    unsigned max_clients; /* addresses tracked in memory [65536], <= 16777216 (least recent
                             evicted); not used with redis */
    /* Where the buckets live [NULL: in this process]. A Redis handle
     * (flare/redis.h): the buckets live in Redis, one key per client, so
     * every instance using the same Redis and redis_prefix enforces one
     * shared limit. Each decision is one round trip (a Lua script, atomic
     * in Redis, on Redis's clock); the request waits for it, at most the
     * handle's command_timeout_ms. The handle must outlive the middleware
     * (both belong to the app: fine). */
    struct flare_redis *redis;
    /* The keys' prefix, copied [NULL: "flare:rl:"]: a client's key is the
     * prefix and its address as text ("flare:rl:" then "192.0.2.1"). */
    const char *redis_prefix;
    /* When Redis cannot decide (down, a timeout, an error reply): false lets
     * the request through (fail open, the default: an outage of the limiter
     * is not an outage of the service); true answers 503 with Retry-After: 1
     * (fail closed). Either way the error is counted and logged. */
    bool fail_closed;
} flare_ratelimit_config_t;

/* Fills *out with a rate limiter configured by cfg: a token bucket per
 * client address. In memory (cfg->redis NULL): shared by all workers of the
 * process (sharded, one short lock per request). In Redis: shared by every
 * instance, as cfg->redis says above; the series
 * flare_ratelimit_decisions_total{prefix,result} (allowed, limited, error)
 * count its decisions (docs/metrics.md). Past the limit: 429 with
 * Retry-After (seconds, rounded up) and a text body. FLARE_EINVAL
 * (flare_last_error() names the field) when rate is not positive,
 * max_clients is out of range or redis_prefix is longer than 200 bytes;
 * FLARE_ENOMEM. */
FLARE_API int flare_ratelimit(flare_app_t *app, const flare_ratelimit_config_t *cfg,
                              flare_middleware_t *out);

/* ---- request ids ---- */

/* Fills *out with a middleware that takes a valid incoming X-Request-Id (1-128 characters of A-Z
 * a-z 0-9 - _ . : / + =) or generates 16 hex digits (thread-local PRNG, no lock), echoes it in the
 * response's X-Request-Id and stores it as the string attribute "request_id" (flare_req_get_str).
 */
FLARE_API int flare_request_id(flare_app_t *app, flare_middleware_t *out);

/* The request attribute flare_request_id stores the id under. */
#define FLARE_REQUEST_ID_ATTR "request_id"

#ifdef __cplusplus
}
#endif
#endif
