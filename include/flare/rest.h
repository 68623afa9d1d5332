/* REST helpers: JSON responses written into the request arena, and request
 * bodies parsed or bound to structs with the error answer already sent. */
#ifndef FLARE_REST_H
#define FLARE_REST_H

#include "flare/flare.h"
#include "flare/json.h"
#include "flare/mapping.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A JSON writer whose output becomes the response body (sent with
 * status): write the document,
 * then call flare_json_end. Memory comes from the request arena (nothing to
 * free). NULL on out of memory. */
FLARE_API flare_json_t *flare_res_json(flare_res_t *res, int status);

/* Finishes a writer from flare_res_json and sends the response
 * (application/json). A writer error (unbalanced document, NaN...) becomes a
 * 500. Returns what flare_res_send returns, for `return flare_json_end(j);`,
 * or FLARE_EINVAL (nothing sent) for NULL, a writer that did not come from
 * flare_res_json (flare_json_init and the like) or one already ended. */
FLARE_API int flare_json_end(flare_json_t *w);

/* Parses the request body as JSON; res answers a bad one. The body must be labelled as JSON:
 * Content-Type application/json or TYPE/SUBTYPE+json, with any parameters
 * (charset...). Another type, or a body without Content-Type, is answered
 * 415 {"error":"..."} before anything is parsed (a browser sends text/plain
 * and form types cross-origin without a CORS preflight);
 * flare_config_t.json_any_content_type turns that check off. On success
 * returns the root (valid until the response completes; freed
 * automatically). Otherwise it has already answered — 415 as above, 400
 * with {"error":"invalid JSON","line":..,"column":..,"reason":..} — and
 * returns NULL: the handler just returns 0. */
FLARE_API const flare_json_val_t *flare_req_json(flare_req_t *req, flare_res_t *res);

/* Decodes and validates the body into *obj per the field table (fields,
 * n entries), answering through res on failure (strings in
 * the request arena). The Content-Type must say JSON, as for flare_req_json
 * (415 otherwise, FLARE_EINVAL). Returns 0, or answers 400 with every
 * validation error ({"errors":[{"field":..,"reason":..}]}) / 415 / 500 and
 * returns the error code: the handler then returns 0. flags: `FLARE_MAP_*`. If present is
 * not NULL it gets bit i set when top-level fields[i] was in the body (what
 * a PATCH needs to know). */
FLARE_API int flare_req_bind(flare_req_t *req, flare_res_t *res, const flare_field_t *fields,
                             size_t n, void *obj, unsigned flags, uint64_t *present);

#ifdef __cplusplus
}
#endif
#endif
