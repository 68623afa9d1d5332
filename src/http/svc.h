/* What the layers above the exchange (web/, obs/, mw/, the app) ask of it
 * beyond the public API, without its insides (http/exchange.h): plain
 * error answers, precomputed header lines, holding a response, raw path
 * parameters, and the functions the app installs as the pieces of dispatch
 * (the streaming routes' handler, the answer to an unmatched request). */
#ifndef FLARE_HTTP_SVC_H
#define FLARE_HTTP_SVC_H

#include "flare/body.h"
#include "flare/flare.h"

struct flare_req;
struct flare_worker;

/* The exchange a response belongs to: the response is the exchange's first
 * member (http/exchange.h asserts it), so this compiles to nothing. */
static inline struct flare_req *flare__res_ex(flare_res_t *res)
{
    return (struct flare_req *)(void *)res;
}

/* exchange.c, for the worker: frees the recycled exchanges beyond `keep`
 * (its idle trim), returning the bytes given back; at shutdown, releases
 * the orphaned exchanges still owed a response (their cleanups run) and
 * frees every recycled one. */
size_t flare__ex_trim(struct flare_worker *w, unsigned keep);
void flare__ex_dispose_all(struct flare_worker *w);

/* ---- src/http/response.c ---- */

/* A plain-text answer `status` with msg and a newline as its body (headers
 * set so far stay). 0 or the send's error. */
int flare__res_error(struct flare_req *ex, int status, const char *msg);
/* The answer to a request no route matched: 404, 405 + Allow, automatic
 * OPTIONS. What the app gives the middleware chain as its last step
 * (flare__chains_build). */
int flare__res_auto(struct flare_req *ex);
/* Adds ready-made header lines ("Name: value\r\n"..., trusted: not
 * checked, not copied; valid until the response head is serialized, which
 * the flare_res_send* call does). For the web layer's precomputed headers. */
int flare__res_header_block(flare_res_t *res, flare_str_t block);
/* Holding a response until something outside has answered (the session
 * middleware waits for its store's save): called from an after hook, it
 * keeps the response that is being sent (status, headers, body: a copied
 * body is copied again into the arena, a borrowed one or a file stays
 * borrowed) instead of handing it to the protocol; the exchange stays
 * open, as for an asynchronous handler, and the caller of flare_res_send*
 * sees 0. flare__res_release, on the worker, later (or even before the
 * send call has returned), lets it go: as it was produced (status 0), or
 * replaced by a plain-text error answer `status` / `msg` (the held body is
 * released then). Headers may still be added in between. Every 0 from hold
 * must be paired with exactly one release. 0, FLARE_ESTATE (not inside the
 * after hooks of a complete response: a stream cannot be held), or
 * FLARE_ENOMEM. When the client goes meanwhile, release frees the exchange. */
int flare__res_hold(flare_res_t *res);
void flare__res_release(flare_res_t *res, int status, const char *msg);

/* ---- src/http/request.c ---- */

/* A path parameter as sent (not percent-decoded), for callers that decode
 * and check it themselves (static files) */
flare_str_t flare__req_param_raw(const flare_req_t *req, const char *name);

/* ---- src/http/body.c: streaming request bodies ---- */

/* The handler of every streaming route (route->fn): identifies them. */
int flare__body_handler(flare_req_t *req, flare_res_t *res, void *ud);

/* A streaming route's record for flare__body_handler (its ud): r copied
 * (r->max_body checked), ud kept. *out is malloc'd: the caller frees it
 * (with free) when the route is not added, else hands it to the app. 0,
 * FLARE_EINVAL (a callback missing, max_body above 2^62) or FLARE_ENOMEM,
 * with flare_last_error() naming `who`. */
int flare__body_route_new(const char *who, const flare_body_route_t *r, void *ud, void **out);

#endif
