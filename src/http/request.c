/* flare_req_* accessors: views into the parsed head, decoded lazily. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "http/exchange.h"

flare_method_t flare_req_method(const flare_req_t *req)
{
    return req->head.method_id;
}

flare_str_t flare_req_method_str(const flare_req_t *req)
{
    return req->head.method;
}

flare_str_t flare_req_target(const flare_req_t *req)
{
    return req->head.target;
}

flare_str_t flare_req_path(const flare_req_t *req)
{
    return req->head.path;
}

flare_str_t flare_req_query(const flare_req_t *req)
{
    return req->head.query;
}

flare_proto_t flare_req_protocol(const flare_req_t *req)
{
    return req->ops->protocol(req);
}

flare_str_t flare_req_protocol_name(const flare_req_t *req)
{
    static const flare_str_t names[] = {
#define PROTO_NAME(name, text) [FLARE_PROTO_##name] = { text, sizeof(text) - 1 },
        FLARE_PROTO_MAP(PROTO_NAME)
#undef PROTO_NAME
    };
    flare_proto_t p = flare_req_protocol(req);
    return (unsigned)p < FLARE_PROTO_COUNT ? names[p] : FLARE_STR("");
}

bool flare_req_secure(const flare_req_t *req)
{
    return req->ops->secure(req);
}

flare_str_t flare_req_header(const flare_req_t *req, const char *name)
{
    flare_str_t n = flare_str(name);
    for (size_t i = 0; i < req->head.nheaders; i++) {
        if (flare_str_ieq(req->head.headers[i].name, n))
            return req->head.headers[i].value;
    }
    return FLARE_STR_NULL;
}

size_t flare_req_header_count(const flare_req_t *req)
{
    return req->head.nheaders;
}

const flare_header_t *flare_req_header_at(const flare_req_t *req, size_t i)
{
    return i < req->head.nheaders ? &req->head.headers[i] : NULL;
}

/* Trailers are rare: nothing about them is reset per request (EX_TRAILERS
 * is a bit of the flags every exchange starts with at 0). */
size_t flare_req_trailer_count(const flare_req_t *req)
{
    return (req->flags & EX_TRAILERS) ? req->ntrailers : 0;
}

const flare_header_t *flare_req_trailer_at(const flare_req_t *req, size_t i)
{
    return i < flare_req_trailer_count(req) ? &req->trailers[i] : NULL;
}

flare_str_t flare_req_trailer(const flare_req_t *req, const char *name)
{
    flare_str_t n = flare_str(name);
    size_t count = flare_req_trailer_count(req);
    for (size_t i = 0; i < count; i++) {
        if (flare_str_ieq(req->trailers[i].name, n))
            return req->trailers[i].value;
    }
    return FLARE_STR_NULL;
}

int flare__ex_trailer_add(struct flare_req *ex, flare_str_t name, flare_str_t value)
{
    if (!(ex->flags & EX_TRAILERS)) {
        ex->flags |= EX_TRAILERS;
        ex->trailers = NULL;
        ex->ntrailers = ex->ctrailers = 0;
    }
    if (ex->ntrailers == ex->ctrailers) {
        uint32_t cap = ex->ctrailers != 0 ? ex->ctrailers * 2 : 8;
        flare_header_t *t = flare__arena_alloc(&ex->arena, cap * sizeof(*t));
        if (t == NULL)
            return FLARE_ENOMEM;
        if (ex->ntrailers > 0)
            memcpy(t, ex->trailers, ex->ntrailers * sizeof(*t));
        ex->trailers = t;
        ex->ctrailers = cap;
    }
    ex->trailers[ex->ntrailers].name = name;
    ex->trailers[ex->ntrailers].value = value;
    ex->ntrailers++;
    return 0;
}

/* Percent-decodes a path parameter into the arena when it has a '%'
 * ('+' is not a space in a path); invalid escapes stay as sent. */
static flare_str_t decode(struct flare_req *ex, flare_str_t s)
{
    if (memchr(s.ptr, '%', s.len) == NULL)
        return s;
    char *out = flare__arena_alloc(&ex->arena, s.len + 1);
    if (out == NULL)
        return s;
    size_t n = 0;
    for (size_t i = 0; i < s.len; i++) {
        unsigned char ch = (unsigned char)s.ptr[i];
        if (ch == '%') {
            int hi = i + 1 < s.len ? flare__hexval((unsigned char)s.ptr[i + 1]) : -1;
            int lo = i + 2 < s.len ? flare__hexval((unsigned char)s.ptr[i + 2]) : -1;
            if (hi >= 0 && lo >= 0) {
                out[n++] = (char)(hi * 16 + lo);
                i += 2;
                continue;
            }
        }
        out[n++] = (char)ch;
    }
    out[n] = '\0';
    return (flare_str_t){ out, n };
}

flare_str_t flare__req_param_raw(const flare_req_t *req, const char *name)
{
    flare_str_t n = flare_str(name);
    for (unsigned i = 0; i < req->match.nparams; i++) {
        if (flare_str_eq(req->match.params[i].name, n)) {
            flare_str_t v = req->match.params[i].value;
            return v.len > 0 ? v : (flare_str_t){ "", 0 };
        }
    }
    return FLARE_STR_NULL;
}

flare_str_t flare_req_param(flare_req_t *req, const char *name)
{
    flare_str_t v = flare__req_param_raw(req, name);
    return v.len > 0 ? decode(req, v) : v;
}

flare_str_t flare_req_body(const flare_req_t *req)
{
    return req->body;
}

void *flare_req_alloc(flare_req_t *req, size_t size)
{
    return flare__arena_alloc(&req->arena, size);
}

int flare_req_on_cleanup(flare_req_t *req, flare_task_fn fn, void *ud)
{
    if (fn == NULL)
        return FLARE_EINVAL;
    flare_cleanup_t *cl = flare__arena_alloc(&req->arena, sizeof(*cl));
    if (cl == NULL)
        return FLARE_ENOMEM;
    cl->fn = fn;
    cl->ud = ud;
    cl->abort = false;
    cl->next = req->cleanups;
    req->cleanups = cl;
    return 0;
}

int flare_req_on_abort(flare_req_t *req, flare_task_fn fn, void *ud)
{
    if (req == NULL || fn == NULL)
        return FLARE_EINVAL;
    if (req->flags & EX_ORPHAN)
        return FLARE_ECLOSED;
    flare_cleanup_t *cl = flare__arena_alloc(&req->arena, sizeof(*cl));
    if (cl == NULL)
        return FLARE_ENOMEM;
    *cl = (flare_cleanup_t){ .next = req->cleanups, .fn = fn, .ud = ud, .abort = true };
    req->cleanups = cl;
    return 0;
}

flare_worker_t *flare_req_worker(const flare_req_t *req)
{
    return req->worker;
}

bool flare_req_connected(const flare_req_t *req)
{
    return req->conn != NULL && !(req->flags & EX_ORPHAN);
}

/* ---- attributes ---- */

static const char attr_int[] = "int";

static flare_attr_t *attr_find(const struct flare_req *ex, const char *key)
{
    for (flare_attr_t *a = ex->attrs; a != NULL; a = a->next) {
        if (strcmp(a->key, key) == 0)
            return a;
    }
    return NULL;
}

static flare_attr_t *attr_slot(struct flare_req *ex, const char *key)
{
    if (key == NULL)
        return NULL;
    flare_attr_t *a = attr_find(ex, key);
    if (a != NULL)
        return a;
    size_t kl = strlen(key);
    a = flare__arena_alloc(&ex->arena, sizeof(*a) + kl + 1);
    if (a == NULL)
        return NULL;
    char *k = (char *)(a + 1);
    memcpy(k, key, kl + 1);
    a->key = k;
    a->next = ex->attrs;
    ex->attrs = a;
    return a;
}

int flare_req_set_str(flare_req_t *req, const char *key, flare_str_t value)
{
    if (value.len == SIZE_MAX || (value.len > 0 && value.ptr == NULL))
        return FLARE_EINVAL; /* no real view is that long: len + 1 would wrap */
    char *copy = flare__arena_alloc(&req->arena, value.len + 1);
    flare_attr_t *a = copy != NULL ? attr_slot(req, key) : NULL;
    if (a == NULL)
        return key == NULL ? FLARE_EINVAL : FLARE_ENOMEM;
    if (value.len > 0)
        memcpy(copy, value.ptr, value.len);
    copy[value.len] = '\0';
    a->type = NULL;
    a->str = (flare_str_t){ copy, value.len };
    return 0;
}

int flare_req_set_int(flare_req_t *req, const char *key, int64_t value)
{
    flare_attr_t *a = attr_slot(req, key);
    if (a == NULL)
        return key == NULL ? FLARE_EINVAL : FLARE_ENOMEM;
    a->type = attr_int;
    a->num = value;
    return 0;
}

int flare_req_set_ptr(flare_req_t *req, const char *key, const char *type, void *ptr)
{
    if (type == NULL)
        return FLARE_EINVAL;
    flare_attr_t *a = attr_slot(req, key);
    if (a == NULL)
        return key == NULL ? FLARE_EINVAL : FLARE_ENOMEM;
    a->type = type;
    a->ptr = ptr;
    return 0;
}

int flare_req_get_str(const flare_req_t *req, const char *key, flare_str_t *out)
{
    const flare_attr_t *a = key != NULL ? attr_find(req, key) : NULL;
    if (a == NULL || a->type != NULL)
        return FLARE_ENOTFOUND;
    if (out != NULL)
        *out = a->str;
    return 0;
}

int flare_req_get_int(const flare_req_t *req, const char *key, int64_t *out)
{
    const flare_attr_t *a = key != NULL ? attr_find(req, key) : NULL;
    if (a == NULL || a->type != attr_int)
        return FLARE_ENOTFOUND;
    if (out != NULL)
        *out = a->num;
    return 0;
}

void *flare_req_get_ptr(const flare_req_t *req, const char *key, const char *type)
{
    const flare_attr_t *a = key != NULL ? attr_find(req, key) : NULL;
    if (a == NULL || type == NULL || a->type != type)
        return NULL;
    return a->ptr;
}

/* ---- peer address ---- */

int flare_req_peer_raw(const flare_req_t *req, uint8_t addr[16])
{
    return req->ops->peer(req, addr);
}

flare_str_t flare_req_peer(flare_req_t *req)
{
    uint8_t a[16];
    int fam = flare_req_peer_raw(req, a);
    if (fam == 0)
        return FLARE_STR_NULL;
    if (fam == AF_UNIX)
        return FLARE_STR("unix:");
    char *out = flare__arena_alloc(&req->arena, INET6_ADDRSTRLEN);
    if (out == NULL || inet_ntop(fam, a, out, INET6_ADDRSTRLEN) == NULL)
        return FLARE_STR_NULL;
    return flare_str(out);
}
