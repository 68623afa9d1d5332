/* Flare: streaming request bodies.
 *
 * By default the server reads a request's body whole (up to
 * flare_config_t.max_body) before the handler runs (flare_req_body). A
 * streaming route takes its body as it arrives instead:
 *
 *   on_start  at the head, after the route's middlewares ran: headers,
 *             path and query are there, no body yet;
 *   on_chunk  once per piece of body, in order (Content-Length or de-chunked
 *             bytes; the split is the network's: anything from one byte up);
 *             the view is valid during the call only;
 *   on_end    once: err 0 when the body is complete, or a negative code
 *             when it never will be (FLARE_ECLOSED: the client went or the
 *             connection was closed; FLARE_ETOOBIG: past the route's limit;
 *             FLARE_EINVAL: bad chunked framing; FLARE_ETIMEDOUT: the client
 *             stopped sending for body_timeout_ms).
 *
 * The response: normally sent in on_end (err 0), then or later
 * (asynchronously, on the same worker, as any handler). A callback may also
 * answer early (a 401 from on_start, a 415 after the first chunk): the rest
 * of the body is then not read and the connection is closed after the
 * response ("Connection: close"). After on_end with an error the exchange
 * is over: the server answers it (413, 400, 408; nothing when the client is
 * gone) unless the callback did, and the handler must not touch req or res
 * again.
 *
 * Backpressure: flare_req_body_pause stops reading the body (the connection
 * is taken off read interest: no CPU, no buffer growth; the client's sends
 * block once the socket buffers are full); flare_req_body_resume goes on.
 * A paused body is exempt from body_timeout_ms. Expect: 100-continue is
 * answered when the handler starts reading: after on_start returns without
 * pausing or answering, or at the resume that follows a pause in on_start.
 *
 * Limits: the route's max_body (0: the app's flare_config_t.max_body)
 * replaces the app's for this route, above or below it: a 10 GiB upload
 * route on an app whose buffered default is 1 MiB. A declared
 * Content-Length past it is answered 413 before on_start; a chunked body
 * that goes past it ends with on_end(FLARE_ETOOBIG) and a 413. Either way
 * the connection is closed after the answer.
 *
 * Protocols: HTTP/1.1 delivers the body as it reads it. A protocol without
 * streaming input delivers its buffered body as one on_chunk (none when it
 * is empty) followed by on_end; pausing then only delays on_end. */
#ifndef FLARE_BODY_H
#define FLARE_BODY_H

#include <stdint.h>

#include "flare/flare.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The callbacks of a streaming route. Each returns 0 or a negative FLARE_E*
 * code; a negative code from on_start or on_chunk stops the body (the
 * client gets a 500 and the connection is closed, unless the callback
 * answered itself); from on_end (err 0) it gets a 500 unless something was
 * sent. on_end may also return FLARE_ASYNC (it will answer later). on_start
 * may be NULL. `ud` is the one given to flare_route_stream. */
typedef int (*flare_body_start_fn)(flare_req_t *req, flare_res_t *res, void *ud);
typedef int (*flare_body_chunk_fn)(flare_req_t *req, flare_res_t *res, flare_str_t data, void *ud);
typedef int (*flare_body_end_fn)(flare_req_t *req, flare_res_t *res, int err, void *ud);

/* A streaming route's callbacks and body limit (flare_route_stream copies it). */
typedef struct flare_body_route {
    flare_body_start_fn on_start; /* may be NULL */
    flare_body_chunk_fn on_chunk; /* required */
    flare_body_end_fn on_end;     /* required */
    uint64_t max_body;            /* bytes; 0: the app's max_body; <= 2^62 */
} flare_body_route_t;

/* Registers a streaming route for method and pattern (as for flare_route;
 * the app copies *r, whose callbacks get ud). Before flare_app_run.
 * Returns 0 or what flare_route returns, FLARE_EINVAL (r NULL, on_chunk or
 * on_end NULL, max_body out of range). The app's middlewares run before
 * on_start, as for any route. */
FLARE_API int flare_route_stream(flare_app_t *app, flare_method_t method, const char *pattern,
                                 const flare_body_route_t *r, void *ud);
/* The same in group g (its prefix and middlewares, as flare_group_route),
 * with method, pattern, r and ud as above. */
FLARE_API int flare_group_route_stream(flare_group_t *g, flare_method_t method, const char *pattern,
                                       const flare_body_route_t *r, void *ud);

/* Stops / restarts delivering the body of a streaming request. From its
 * callbacks or later on the worker (a timer, a job's completion); no-ops
 * on a request that is not streaming, whose body has ended, or whose client
 * is gone. Calls do not nest: one resume undoes any number of pauses. */
FLARE_API void flare_req_body_pause(flare_req_t *req);
FLARE_API void flare_req_body_resume(flare_req_t *req);

/* Body bytes delivered to on_chunk so far. */
FLARE_API uint64_t flare_req_body_received(const flare_req_t *req);

#ifdef __cplusplus
}
#endif
#endif
