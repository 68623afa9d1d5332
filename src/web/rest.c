/* Glue between the JSON/mapping modules and requests/responses. */
#include <string.h>

#include "core/core.h"
#include "flare/cookie.h"
#include "flare/rest.h"
#include "app_svc.h"
#include "http/svc.h"
#include "worker.h"

typedef struct resjson {
    flare_json_t w; /* first: flare_json_end casts back */
    flare_res_t *res;
    int status;
} resjson_t;

/* w.kind of a writer made by flare_res_json. The mark lives in the writer
 * itself: any flare_json_t may be passed to flare_json_end, and only once
 * the mark is seen is it known to sit inside a resjson_t (a field of the
 * bigger struct would be read past the end of a plain writer). The
 * flare_json_init* constructors clear it. */
#define KIND_RESPONSE 0x52

static void *arena_alloc(void *ctx, size_t n)
{
    return flare_req_alloc(ctx, n);
}

flare_json_t *flare_res_json(flare_res_t *res, int status)
{
    flare_req_t *req = flare__res_ex(res);
    resjson_t *r = flare_req_alloc(req, sizeof(*r) + 512);
    if (r == NULL)
        return NULL;
    r->res = res;
    r->status = status;
    flare_json_init_alloc(&r->w, (char *)(r + 1), 512, arena_alloc, req);
    r->w.kind = KIND_RESPONSE;
    return &r->w;
}

int flare_json_end(flare_json_t *w)
{
    if (w == NULL || w->kind != KIND_RESPONSE)
        return FLARE_EINVAL;
    w->kind = 0; /* ended: a second end is refused too */
    resjson_t *r = (resjson_t *)(void *)w;
    if (flare_json_finish(w) != 0)
        return flare_res_send(r->res, 500, FLARE_STR("application/json"),
                              FLARE_STR("{\"error\":\"response could not be encoded\"}"));
    return flare_res_send(r->res, r->status, FLARE_STR("application/json"), flare_json_output(w));
}

/* application/json or TYPE/SUBTYPE+json, then nothing but optional white
 * space and parameters (";charset=utf-8"): the media type is compared
 * whole, so "application/jsonx" or "text/plain+jsonp" do not pass. */
static bool json_type(flare_str_t ct)
{
    size_t n = 0;
    while (n < ct.len && ct.ptr[n] != ';' && ct.ptr[n] != ' ' && ct.ptr[n] != '\t')
        n++;
    for (size_t i = n; i < ct.len && ct.ptr[i] != ';'; i++) {
        if (ct.ptr[i] != ' ' && ct.ptr[i] != '\t')
            return false; /* "application/json text/plain" */
    }
    flare_str_t mt = { ct.ptr, n };
    if (FLARE__IEQ(mt, "application/json"))
        return true;
    const char *slash = memchr(mt.ptr, '/', n);
    return slash != NULL && slash > mt.ptr && n >= 5 &&
           (size_t)(slash - mt.ptr) + 1 < n - 5 && /* a subtype before "+json" */
           FLARE__IEQ(((flare_str_t){ mt.ptr + n - 5, 5 }), "+json");
}

static int send_json_error(flare_res_t *res, int status, const char *msg)
{
    flare_json_t *w = flare_res_json(res, status);
    if (w == NULL)
        return FLARE_ENOMEM;
    flare_json_object_begin(w);
    flare_json_kv_cstr(w, "error", msg);
    flare_json_object_end(w);
    flare_json_end(w);
    return 0;
}

/* The body must say it is JSON (flare/rest.h: browsers send text/plain and
 * form bodies cross-origin without a preflight). An empty body without a
 * type goes on to the parser, which answers it as invalid JSON. Answers
 * 415 and returns false when refused. */
static bool check_type(flare_req_t *req, flare_res_t *res)
{
    if (flare__app_config(flare_req_worker(req)->app)->json_any_content_type)
        return true;
    flare_str_t ct = flare_req_header(req, "Content-Type");
    if (ct.ptr == NULL) {
        if (flare_req_body(req).len == 0)
            return true;
        send_json_error(res, 415,
                        "missing Content-Type: a JSON body must be sent as "
                        "application/json");
        return false;
    }
    if (!json_type(ct)) {
        send_json_error(res, 415,
                        "unsupported Content-Type: a JSON body must be sent as "
                        "application/json");
        return false;
    }
    return true;
}

static void doc_free(void *doc)
{
    flare_json_doc_free(doc);
}

const flare_json_val_t *flare_req_json(flare_req_t *req, flare_res_t *res)
{
    if (!check_type(req, res))
        return NULL;
    flare_str_t body = flare_req_body(req);
    flare_json_doc_t *doc = NULL;
    flare_json_error_t err;
    int rc = flare_json_parse(body.ptr != NULL ? body.ptr : "", body.len, &doc, &err);
    if (rc == FLARE_ENOMEM) {
        send_json_error(res, 500, "out of memory");
        return NULL;
    }
    if (rc != 0) {
        flare_json_t *w = flare_res_json(res, 400);
        if (w != NULL) {
            flare_json_error_write(&err, w);
            flare_json_end(w);
        }
        return NULL;
    }
    if (flare_req_on_cleanup(req, doc_free, doc) != 0) {
        flare_json_doc_free(doc);
        send_json_error(res, 500, "out of memory");
        return NULL;
    }
    return flare_json_doc_root(doc);
}

int flare_req_bind(flare_req_t *req, flare_res_t *res, const flare_field_t *fields, size_t n,
                   void *obj, unsigned flags, uint64_t *present)
{
    if (!check_type(req, res))
        return FLARE_EINVAL;
    flare_str_t body = flare_req_body(req);
    flare_map_opts_t opts = { flags, arena_alloc, req };
    flare_map_errors_t *errs = flare_req_alloc(req, sizeof(*errs));
    if (errs == NULL) {
        send_json_error(res, 500, "out of memory");
        return FLARE_ENOMEM;
    }
    int rc =
        flare_map_decode(fields, n, body.ptr != NULL ? body.ptr : "", body.len, obj, &opts, errs);
    if (present != NULL)
        *present = errs->present;
    if (rc == 0)
        return 0;
    if (rc == FLARE_EINVAL) {
        flare_json_t *w = flare_res_json(res, 400);
        if (w != NULL) {
            flare_map_errors_write(errs, w);
            flare_json_end(w);
        }
        return rc;
    }
    send_json_error(res, 500, rc == FLARE_ENOMEM ? "out of memory" : "server misconfiguration");
    return rc;
}

/* ---- cookies on requests and responses ---- */

flare_str_t flare_req_cookie(flare_req_t *req, const char *name)
{
    flare_str_t n = flare_str(name);
    for (size_t i = 0; i < flare_req_header_count(req); i++) {
        const flare_header_t *h = flare_req_header_at(req, i);
        if (!FLARE__IEQ(h->name, "cookie"))
            continue;
        flare_str_t v = flare_cookie_get(h->value, n);
        if (v.ptr != NULL)
            return v;
    }
    return FLARE_STR_NULL;
}

int flare_res_cookie(flare_res_t *res, const flare_cookie_t *c)
{
    char *buf = flare_req_alloc(flare__res_ex(res), FLARE_COOKIE_FORMAT_MAX);
    if (buf == NULL)
        return FLARE_ENOMEM;
    size_t len;
    int rc = flare_cookie_format(c, buf, FLARE_COOKIE_FORMAT_MAX, &len);
    if (rc != 0)
        return rc;
    return flare_res_header(res, FLARE_STR("Set-Cookie"), (flare_str_t){ buf, len });
}
