/* OpenAPI 3.1: route metadata kept on the app, and the document generated
 * from it.
 *
 * Everything is copied at registration into memory the app-wide state owns
 * (freed with the app); schemas are turned into JSON text then, so the
 * caller's tables need not outlive the call and a schema name used twice is
 * checked by comparing texts. The document is written when the app starts
 * (the module's init_worker, on the thread running flare_app_run, before any
 * worker thread exists) and is read-only while it runs: a request for it
 * formats nothing and allocates nothing. */
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app_svc.h"
#include "worker.h"
#include "core/core.h"
#include "flare/openapi.h"
#include "module.h"
#include "web/mapping_int.h"
#include "web/openapi_int.h"
#include "web/static_parse.h"

/* ---- owned memory: one list, freed with the state ---- */

typedef struct oa_block {
    struct oa_block *next;
    max_align_t align[];
} oa_block_t;

static void *oa_alloc(oa_state_t *st, size_t n)
{
    oa_block_t *b = malloc(sizeof(*b) + n);
    if (b == NULL)
        return NULL;
    b->next = st->mem;
    st->mem = b;
    return b->align;
}

static char *oa_strdup(oa_state_t *st, const char *s)
{
    if (s == NULL)
        return NULL;
    size_t n = strlen(s) + 1;
    char *p = oa_alloc(st, n);
    if (p != NULL)
        memcpy(p, s, n);
    return p;
}

static char *oa_strndup(oa_state_t *st, const char *s, size_t n)
{
    char *p = oa_alloc(st, n + 1);
    if (p != NULL) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

char *flare__openapi_strdup(oa_state_t *st, const char *s)
{
    return oa_strdup(st, s);
}

/* A strdup that reports failure only when s was set. */
#define DUP_OR_FAIL(dst, s)               \
    do {                                  \
        (dst) = oa_strdup(st, (s));       \
        if ((s) != NULL && (dst) == NULL) \
            return FLARE_ENOMEM;          \
    } while (0)

/* ---- the module: state on the app, the document made at start ---- */

static void oa_free_app(flare_app_t *app, void *state)
{
    (void)app;
    oa_state_t *st = state;
    for (oa_block_t *b = st->mem, *next; b != NULL; b = next) {
        next = b->next;
        free(b);
    }
    free(st->ops);
    free(st->schemas);
    free(st->schemes);
    free(st->doc);
    free(st->init_js);
    free(st->ui_page);
    free(st);
}

static int oa_init_worker(flare_worker_t *w, void *state);

static const flare_module_t oa_module = {
    .name = "openapi",
    .init_worker = oa_init_worker,
    .free_app = oa_free_app,
};

int flare__openapi_state(flare_app_t *app, oa_state_t **out)
{
    if (app == NULL)
        return FLARE_EINVAL;
    if (flare__app_running(app))
        return FLARE_ESTATE;
    oa_state_t *st = flare__app_module_state(app, &oa_module);
    if (st == NULL) {
        st = calloc(1, sizeof(*st));
        if (st == NULL)
            return FLARE_ENOMEM;
        st->app = app;
        unsigned slot;
        int rc = flare__app_module(app, &oa_module, st, &slot);
        if (rc != 0) {
            free(st);
            return rc;
        }
    }
    st->dirty = true;
    *out = st;
    return 0;
}

static const oa_state_t *oa_state_get(const flare_app_t *app)
{
    return flare__app_module_state(app, &oa_module);
}

/* ---- registration ---- */

static int grow(void **arr, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return 0;
    size_t ncap = *cap ? *cap * 2 : 8;
    void *p = realloc(*arr, ncap * elem);
    if (p == NULL)
        return FLARE_ENOMEM;
    *arr = p;
    *cap = ncap;
    return 0;
}

static char *schema_text(oa_state_t *st, int (*fn)(flare_json_t *w, const void *a, unsigned f),
                         const void *arg, unsigned flags, int *rc)
{
    flare_json_t w;
    flare_json_init_heap(&w, 256);
    *rc = fn(&w, arg, flags);
    if (*rc == 0)
        *rc = flare_json_finish(&w);
    char *s = NULL;
    if (*rc == 0) {
        flare_str_t out = flare_json_output(&w);
        s = oa_strndup(st, out.ptr, out.len);
        if (s == NULL)
            *rc = FLARE_ENOMEM;
    }
    flare_json_dispose(&w);
    return s;
}

static int write_table(flare_json_t *w, const void *arg, unsigned flags)
{
    const flare_op_content_t *c = arg;
    return flare__map_schema(c->fields, c->nfields, flags, w);
}

static int write_scalar(flare_json_t *w, const void *arg, unsigned flags)
{
    (void)flags;
    return flare__map_schema_scalar(arg, w);
}

/* Writes a parsed value back out (compact; the parser bounds the depth). */
static int write_val(flare_json_t *w, const flare_json_val_t *v)
{
    switch (flare_json_val_type(v)) {
    case FLARE_JSON_NULL:
        return flare_json_null(w);
    case FLARE_JSON_BOOL: {
        bool b = false;
        flare_json_val_bool(v, &b);
        return flare_json_bool(w, b);
    }
    case FLARE_JSON_INT: {
        int64_t i = 0;
        flare_json_val_int(v, &i);
        return flare_json_int(w, i);
    }
    case FLARE_JSON_DOUBLE: {
        double d = 0;
        flare_json_val_double(v, &d);
        return flare_json_double(w, d);
    }
    case FLARE_JSON_STRING: {
        flare_str_t str = FLARE_STR_NULL;
        flare_json_val_str(v, &str);
        return flare_json_str(w, str);
    }
    case FLARE_JSON_ARRAY:
        flare_json_array_begin(w);
        for (size_t i = 0, n = flare_json_val_len(v); i < n; i++)
            write_val(w, flare_json_val_at(v, i));
        return flare_json_array_end(w);
    case FLARE_JSON_OBJECT: {
        flare_json_object_begin(w);
        void *it = NULL;
        flare_str_t key;
        const flare_json_val_t *m;
        while (flare_json_val_next(v, &it, &key, &m) == 0) {
            flare_json_key(w, key);
            write_val(w, m);
        }
        return flare_json_object_end(w);
    }
    default:
        return FLARE_EINVAL;
    }
}

static int write_json_val(flare_json_t *w, const void *arg, unsigned flags)
{
    (void)flags;
    return write_val(w, arg);
}

/* A hand-written schema: checked to be JSON and an object or boolean (the
 * two forms a JSON Schema takes), then re-serialised. */
static char *hand_schema_text(oa_state_t *st, const char *json, const char *where, int *rc)
{
    flare_json_doc_t *doc = NULL;
    flare_json_error_t err;
    memset(&err, 0, sizeof(err));
    *rc = flare_json_parse(json, strlen(json), &doc, &err);
    if (*rc == FLARE_ENOMEM)
        return NULL;
    if (*rc != 0) {
        *rc = flare__fail(FLARE_EINVAL, 0, "%s: schema_json is not JSON (line %d, column %d: %s)",
                          where, err.line, err.column, err.reason);
        return NULL;
    }
    const flare_json_val_t *root = flare_json_doc_root(doc);
    flare_json_type_t t = flare_json_val_type(root);
    char *s = NULL;
    if (t != FLARE_JSON_OBJECT && t != FLARE_JSON_BOOL)
        *rc = flare__fail(FLARE_EINVAL, 0,
                          "%s: schema_json is %s %s, not a JSON Schema (an object or a boolean)",
                          where, t == FLARE_JSON_ARRAY || t == FLARE_JSON_INT ? "an" : "a",
                          flare_json_type_name(t));
    else
        s = schema_text(st, write_json_val, root, 0, rc);
    flare_json_doc_free(doc);
    return s;
}

static int register_schema(oa_state_t *st, const flare_op_content_t *c, char *text,
                           oa_content_t *out, const char *where);

/* Copies a body: its schema as JSON text, registered under its name. */
static int copy_content(oa_state_t *st, const flare_op_content_t *c, oa_content_t *out,
                        const char *where)
{
    memset(out, 0, sizeof(*out));
    out->array = c->array;
    DUP_OR_FAIL(out->ctype, c->content_type);
    int rc;
    char *text;
    if (c->schema_json != NULL) {
        if (c->fields != NULL || c->nfields > 0 || c->partial || c->closed)
            return flare__fail(FLARE_EINVAL, 0,
                               "%s: schema_json with fields, partial or closed (those are "
                               "for a field table)",
                               where);
        if ((text = hand_schema_text(st, c->schema_json, where, &rc)) == NULL)
            return rc;
        return register_schema(st, c, text, out, where);
    }
    if (c->fields == NULL) {
        if (c->name != NULL || c->array || c->nfields > 0)
            return flare__fail(FLARE_EINVAL, 0, "%s: a schema name or array without fields", where);
        if (c->content_type == NULL)
            return flare__fail(FLARE_EINVAL, 0, "%s: neither fields nor a content type", where);
        return 0;
    }
    rc = flare_map_check(c->fields, c->nfields);
    if (rc != 0)
        return flare__fail(rc, 0, "%s: the field table fails flare_map_check (%s)", where,
                           flare_strerror(rc));
    unsigned flags = FLARE__SCHEMA_OPENAPI | (c->partial ? FLARE__SCHEMA_PARTIAL : 0) |
                     (c->closed ? FLARE__SCHEMA_CLOSED : 0);
    if ((text = schema_text(st, write_table, c, flags, &rc)) == NULL)
        return rc;
    return register_schema(st, c, text, out, where);
}

/* Puts a body's schema text inline, or under components/schemas by name
 * (the same name twice must be the same text). */
static int register_schema(oa_state_t *st, const flare_op_content_t *c, char *text,
                           oa_content_t *out, const char *where)
{
    int rc;
    if (c->name == NULL) {
        out->schema = text;
        return 0;
    }
    if (c->name[0] == '\0' || strspn(c->name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                              "0123456789._-") != strlen(c->name))
        return flare__fail(FLARE_EINVAL, 0,
                           "%s: schema name \"%s\" must be made of A-Z a-z 0-9 . _ -", where,
                           c->name);
    for (size_t i = 0; i < st->nschemas; i++) {
        if (strcmp(st->schemas[i].name, c->name) != 0)
            continue;
        if (strcmp(st->schemas[i].json, text) != 0)
            return flare__fail(FLARE_EEXIST, 0,
                               "%s: schema name \"%s\" is already used for a different schema",
                               where, c->name);
        out->ref = st->schemas[i].name;
        return 0;
    }
    if ((rc = grow((void **)&st->schemas, &st->capschemas, st->nschemas, sizeof(oa_schema_t))))
        return rc;
    char *name = oa_strdup(st, c->name);
    if (name == NULL)
        return FLARE_ENOMEM;
    st->schemas[st->nschemas++] = (oa_schema_t){ name, text };
    out->ref = name;
    return 0;
}

/* The path parameters of a route pattern, in order, and the OpenAPI path
 * template ("{*rest}" becomes "{rest}"); the key compares templates the way
 * OpenAPI does (parameter names do not count). */
static int parse_pattern(oa_state_t *st, const char *pattern, oa_op_t *op)
{
    size_t n = strlen(pattern);
    char *path = oa_alloc(st, n + 1), *key = oa_alloc(st, n + 1);
    if (path == NULL || key == NULL)
        return FLARE_ENOMEM;
    size_t pl = 0, kl = 0;
    op->npath = 0;
    for (size_t i = 0; i < n;) {
        if (pattern[i] == '{') {
            size_t j = i + 1;
            if (pattern[j] == '*')
                j++;
            size_t s = j;
            while (j < n && pattern[j] != '}')
                j++;
            if (op->npath < FLARE_OA_MAX_PATH_PARAMS)
                op->path_params[op->npath++] = oa_strndup(st, pattern + s, j - s);
            if (op->path_params[op->npath - 1] == NULL)
                return FLARE_ENOMEM;
            path[pl++] = '{';
            memcpy(path + pl, pattern + s, j - s);
            pl += j - s;
            path[pl++] = '}';
            key[kl++] = '{';
            key[kl++] = '}';
            i = j + 1;
        } else {
            path[pl++] = pattern[i];
            key[kl++] = pattern[i];
            i++;
        }
    }
    path[pl] = key[kl] = '\0';
    op->path = path;
    op->key = key;
    return 0;
}

static const char *in_name(flare_param_in_t in)
{
    switch (in) {
    case FLARE_IN_PATH:
        return "path";
    case FLARE_IN_QUERY:
        return "query";
    case FLARE_IN_HEADER:
        return "header";
    case FLARE_IN_COOKIE:
        return "cookie";
    }
    return NULL;
}

static bool method_ok(flare_method_t m)
{
    switch (m) {
    case FLARE_METHOD_GET:
    case FLARE_METHOD_PUT:
    case FLARE_METHOD_POST:
    case FLARE_METHOD_DELETE:
    case FLARE_METHOD_OPTIONS:
    case FLARE_METHOD_HEAD:
    case FLARE_METHOD_PATCH:
    case FLARE_METHOD_TRACE:
        return true;
    default:
        return false;
    }
}

static int copy_params(oa_state_t *st, const flare_op_t *op, oa_op_t *o, const char *where)
{
    size_t total = op->nparams;
    for (size_t k = 0; k < o->npath; k++) {
        bool listed = false;
        for (size_t i = 0; i < op->nparams; i++)
            listed |= op->params[i].in == FLARE_IN_PATH && op->params[i].field.name != NULL &&
                      strcmp(op->params[i].field.name, o->path_params[k]) == 0;
        total += !listed;
    }
    o->params = total ? oa_alloc(st, total * sizeof(*o->params)) : NULL;
    if (total && o->params == NULL)
        return FLARE_ENOMEM;
    int rc;
    for (size_t i = 0; i < op->nparams; i++) {
        const flare_op_param_t *p = &op->params[i];
        const flare_field_t *f = &p->field;
        if (in_name(p->in) == NULL || f->name == NULL || f->name[0] == '\0')
            return flare__fail(FLARE_EINVAL, 0, "%s: parameter %zu: no name or no valid \"in\"",
                               where, i);
        if (f->type != FLARE_FIELD_STRING && f->type != FLARE_FIELD_INT &&
            f->type != FLARE_FIELD_DOUBLE && f->type != FLARE_FIELD_BOOL)
            return flare__fail(FLARE_EINVAL, 0, "%s: parameter \"%s\" is not a scalar", where,
                               f->name);
        if ((rc = flare_map_check(f, 1)) != 0)
            return flare__fail(rc, 0, "%s: parameter \"%s\": bad constraints (%s)", where, f->name,
                               flare_strerror(rc));
        for (size_t k = 0; k < i; k++) {
            if (op->params[k].in == p->in && strcmp(op->params[k].field.name, f->name) == 0)
                return flare__fail(FLARE_EINVAL, 0, "%s: parameter \"%s\" is listed twice", where,
                                   f->name);
        }
        if (p->in == FLARE_IN_PATH) {
            bool found = false;
            for (size_t k = 0; k < o->npath; k++)
                found |= strcmp(o->path_params[k], f->name) == 0;
            if (!found)
                return flare__fail(FLARE_EINVAL, 0,
                                   "%s: path parameter \"%s\" is not in the pattern", where,
                                   f->name);
        }
        oa_param_t *q = &o->params[o->nparams];
        q->in = p->in;
        q->required = p->in == FLARE_IN_PATH || f->required;
        DUP_OR_FAIL(q->name, f->name);
        DUP_OR_FAIL(q->description, f->description);
        if ((q->schema = schema_text(st, write_scalar, f, 0, &rc)) == NULL)
            return rc;
        o->nparams++;
    }
    /* path parameters nobody described: required strings (OpenAPI wants
     * every template variable declared) */
    for (size_t k = 0; k < o->npath; k++) {
        bool listed = false;
        for (size_t i = 0; i < op->nparams; i++)
            listed |= op->params[i].in == FLARE_IN_PATH &&
                      strcmp(op->params[i].field.name, o->path_params[k]) == 0;
        if (listed)
            continue;
        o->params[o->nparams++] = (oa_param_t){ .name = o->path_params[k],
                                                .in = FLARE_IN_PATH,
                                                .required = true,
                                                .schema = "{\"type\":\"string\"}" };
    }
    return 0;
}

/* Builds *o from *op (all in st's memory). */
static int copy_op(oa_state_t *st, flare_method_t method, const char *pattern, const flare_op_t *op,
                   oa_op_t *o, const char *where)
{
    memset(o, 0, sizeof(*o));
    o->method = method;
    int rc;
    if ((rc = parse_pattern(st, pattern, o)) != 0)
        return rc;
    if (op->nresponses == 0 || op->responses == NULL)
        return flare__fail(FLARE_EINVAL, 0, "%s: no response documented", where);
    if (op->nparams > 0 && op->params == NULL)
        return flare__fail(FLARE_EINVAL, 0, "%s: nparams without params", where);
    DUP_OR_FAIL(o->summary, op->summary);
    DUP_OR_FAIL(o->description, op->description);
    DUP_OR_FAIL(o->operation_id, op->operation_id);
    DUP_OR_FAIL(o->security, op->security);
    o->deprecated = op->deprecated;
    if (op->tags != NULL) {
        while (op->tags[o->ntags] != NULL)
            o->ntags++;
        o->tags = oa_alloc(st, (o->ntags ? o->ntags : 1) * sizeof(char *));
        if (o->tags == NULL)
            return FLARE_ENOMEM;
        for (size_t i = 0; i < o->ntags; i++)
            DUP_OR_FAIL(o->tags[i], op->tags[i]);
    }
    if ((rc = copy_params(st, op, o, where)) != 0)
        return rc;
    if (op->body != NULL) {
        o->has_body = true;
        o->body_required = !op->body_optional;
        if ((rc = copy_content(st, op->body, &o->body, where)) != 0)
            return rc;
    }
    o->res = oa_alloc(st, op->nresponses * sizeof(*o->res));
    if (o->res == NULL)
        return FLARE_ENOMEM;
    for (size_t i = 0; i < op->nresponses; i++) {
        const flare_op_response_t *r = &op->responses[i];
        if (r->status != 0 && (r->status < 100 || r->status > 599))
            return flare__fail(FLARE_EINVAL, 0, "%s: response status %d is not 100..599", where,
                               r->status);
        for (size_t k = 0; k < i; k++) {
            if (op->responses[k].status == r->status)
                return flare__fail(FLARE_EINVAL, 0, "%s: response %d is listed twice", where,
                                   r->status);
        }
        oa_response_t *q = &o->res[o->nres];
        q->status = r->status;
        DUP_OR_FAIL(q->description, r->description);
        const flare_op_content_t *b = &r->body;
        q->has_body = b->fields != NULL || b->content_type != NULL || b->name != NULL ||
                      b->schema_json != NULL;
        if (q->has_body && (rc = copy_content(st, b, &q->body, where)) != 0)
            return rc;
        o->nres++;
    }
    return 0;
}

int flare_route_doc(flare_app_t *app, flare_method_t method, const char *pattern,
                    const flare_op_t *op)
{
    if (app == NULL || pattern == NULL || op == NULL)
        return FLARE_EINVAL;
    flare_str_t mname = flare_method_name(method);
    char where[160];
    snprintf(where, sizeof(where), "flare_route_doc %.*s %.120s", (int)mname.len, mname.ptr,
             pattern);
    if (!method_ok(method))
        return flare__fail(FLARE_EINVAL, 0, "%s: OpenAPI has no such operation", where);
    if (!flare__app_has_route(app, method, pattern))
        return flare__fail(FLARE_ENOTFOUND, 0, "%s: no such route (register it first)", where);
    oa_state_t *st;
    int rc = flare__openapi_state(app, &st);
    if (rc != 0)
        return rc;
    oa_op_t o;
    if ((rc = copy_op(st, method, pattern, op, &o, where)) != 0)
        return rc;
    size_t replace = st->nops;
    for (size_t i = 0; i < st->nops; i++) {
        const oa_op_t *e = &st->ops[i];
        bool same = e->method == method && strcmp(e->pattern, pattern) == 0;
        if (same) {
            replace = i;
            continue;
        }
        if (o.operation_id != NULL && e->operation_id != NULL &&
            strcmp(o.operation_id, e->operation_id) == 0)
            return flare__fail(FLARE_EEXIST, 0, "%s: operationId \"%s\" is already used", where,
                               o.operation_id);
        if (strcmp(e->key, o.key) == 0 && strcmp(e->path, o.path) != 0)
            return flare__fail(FLARE_EINVAL, 0,
                               "%s: same path as %s with other parameter names (OpenAPI "
                               "needs one template per path)",
                               where, e->path);
    }
    if ((o.pattern = oa_strdup(st, pattern)) == NULL)
        return FLARE_ENOMEM;
    if (replace == st->nops) {
        if ((rc = grow((void **)&st->ops, &st->capops, st->nops, sizeof(oa_op_t))) != 0)
            return rc;
        st->nops++;
    }
    st->ops[replace] = o;
    return 0;
}

int flare_openapi_info(flare_app_t *app, const flare_openapi_info_t *info)
{
    if (info == NULL)
        return FLARE_EINVAL;
    oa_state_t *st;
    int rc = flare__openapi_state(app, &st);
    if (rc != 0)
        return rc;
    const char *t = st->title, *v = st->version, *d = st->description;
    if (info->title != NULL && (t = oa_strdup(st, info->title)) == NULL)
        return FLARE_ENOMEM;
    if (info->version != NULL && (v = oa_strdup(st, info->version)) == NULL)
        return FLARE_ENOMEM;
    if (info->description != NULL && (d = oa_strdup(st, info->description)) == NULL)
        return FLARE_ENOMEM;
    st->title = t;
    st->version = v;
    st->description = d;
    return 0;
}

int flare_openapi_cookie_auth(flare_app_t *app, const char *name, const char *cookie,
                              const char *description)
{
    if (name == NULL || name[0] == '\0' || cookie == NULL || cookie[0] == '\0')
        return FLARE_EINVAL;
    oa_state_t *st;
    int rc = flare__openapi_state(app, &st);
    if (rc != 0)
        return rc;
    for (size_t i = 0; i < st->nschemes; i++) {
        if (strcmp(st->schemes[i].name, name) == 0)
            return flare__fail(FLARE_EEXIST, 0, "security scheme \"%s\" already declared", name);
    }
    if ((rc = grow((void **)&st->schemes, &st->capschemes, st->nschemes, sizeof(oa_scheme_t))))
        return rc;
    oa_scheme_t s;
    DUP_OR_FAIL(s.name, name);
    DUP_OR_FAIL(s.cookie, cookie);
    DUP_OR_FAIL(s.description, description);
    st->schemes[st->nschemes++] = s;
    return 0;
}

/* ---- the document ---- */

static void write_schema(flare_json_t *w, const oa_content_t *c)
{
    if (c->ref != NULL) {
        char ref[320];
        snprintf(ref, sizeof(ref), "#/components/schemas/%.280s", c->ref);
        flare_json_object_begin(w);
        flare_json_kv_cstr(w, "$ref", ref);
        flare_json_object_end(w);
    } else {
        flare_json_raw(w, flare_str(c->schema));
    }
}

static void write_content(flare_json_t *w, const oa_content_t *c)
{
    flare_json_kv_object(w, "content");
    flare_json_kv_object(w, c->ctype != NULL ? c->ctype : "application/json");
    if (c->schema != NULL || c->ref != NULL) {
        flare_json_key(w, FLARE_STR("schema"));
        if (c->array) {
            flare_json_object_begin(w);
            flare_json_kv_cstr(w, "type", "array");
            flare_json_key(w, FLARE_STR("items"));
            write_schema(w, c);
            flare_json_object_end(w);
        } else {
            write_schema(w, c);
        }
    }
    flare_json_object_end(w);
    flare_json_object_end(w);
}

static const char *method_key(flare_method_t m)
{
    switch (m) {
    case FLARE_METHOD_GET:
        return "get";
    case FLARE_METHOD_PUT:
        return "put";
    case FLARE_METHOD_POST:
        return "post";
    case FLARE_METHOD_DELETE:
        return "delete";
    case FLARE_METHOD_OPTIONS:
        return "options";
    case FLARE_METHOD_HEAD:
        return "head";
    case FLARE_METHOD_PATCH:
        return "patch";
    case FLARE_METHOD_TRACE:
        return "trace";
    default:
        return "x-unknown";
    }
}

static void write_op(flare_json_t *w, const oa_op_t *o)
{
    flare_json_kv_object(w, method_key(o->method));
    if (o->ntags > 0) {
        flare_json_kv_array(w, "tags");
        for (size_t i = 0; i < o->ntags; i++)
            flare_json_cstr(w, o->tags[i]);
        flare_json_array_end(w);
    }
    if (o->summary != NULL)
        flare_json_kv_cstr(w, "summary", o->summary);
    if (o->description != NULL)
        flare_json_kv_cstr(w, "description", o->description);
    if (o->operation_id != NULL)
        flare_json_kv_cstr(w, "operationId", o->operation_id);
    if (o->nparams > 0) {
        flare_json_kv_array(w, "parameters");
        for (size_t i = 0; i < o->nparams; i++) {
            const oa_param_t *p = &o->params[i];
            flare_json_object_begin(w);
            flare_json_kv_cstr(w, "name", p->name);
            flare_json_kv_cstr(w, "in", in_name(p->in));
            if (p->description != NULL)
                flare_json_kv_cstr(w, "description", p->description);
            flare_json_kv_bool(w, "required", p->required);
            flare_json_key(w, FLARE_STR("schema"));
            flare_json_raw(w, flare_str(p->schema));
            flare_json_object_end(w);
        }
        flare_json_array_end(w);
    }
    if (o->has_body) {
        flare_json_kv_object(w, "requestBody");
        flare_json_kv_bool(w, "required", o->body_required);
        write_content(w, &o->body);
        flare_json_object_end(w);
    }
    flare_json_kv_object(w, "responses");
    for (size_t i = 0; i < o->nres; i++) {
        const oa_response_t *r = &o->res[i];
        char code[8];
        if (r->status == 0)
            memcpy(code, "default", 8);
        else
            snprintf(code, sizeof(code), "%d", r->status);
        flare_json_kv_object(w, code);
        if (r->description != NULL) {
            flare_json_kv_cstr(w, "description", r->description);
        } else {
            flare_str_t reason = r->status ? flare_status_reason(r->status) : FLARE_STR_NULL;
            if (reason.len == 0)
                reason = FLARE_STR("response");
            flare_json_kv_str(w, "description", reason);
        }
        if (r->has_body)
            write_content(w, &r->body);
        flare_json_object_end(w);
    }
    flare_json_object_end(w);
    if (o->security != NULL) {
        flare_json_kv_array(w, "security");
        flare_json_object_begin(w);
        flare_json_kv_array(w, o->security);
        flare_json_array_end(w);
        flare_json_object_end(w);
        flare_json_array_end(w);
    }
    if (o->deprecated)
        flare_json_kv_bool(w, "deprecated", true);
    flare_json_object_end(w);
}

int flare_openapi_write(const flare_app_t *app, flare_json_t *w)
{
    if (app == NULL || w == NULL)
        return FLARE_EINVAL;
    const oa_state_t *st = oa_state_get(app);
    static const oa_state_t empty;
    if (st == NULL)
        st = &empty;
    for (size_t i = 0; i < st->nops; i++) {
        const char *sec = st->ops[i].security;
        bool found = sec == NULL;
        for (size_t k = 0; k < st->nschemes && !found; k++)
            found = strcmp(st->schemes[k].name, sec) == 0;
        if (!found)
            return flare__fail(FLARE_EINVAL, 0,
                               "openapi: %s names security scheme \"%s\", never declared "
                               "(flare_openapi_cookie_auth)",
                               st->ops[i].pattern, sec);
    }
    flare_json_object_begin(w);
    flare_json_kv_cstr(w, "openapi", "3.1.0");
    flare_json_kv_object(w, "info");
    flare_json_kv_cstr(w, "title", st->title != NULL ? st->title : "Flare API");
    flare_json_kv_cstr(w, "version", st->version != NULL ? st->version : "0.1.0");
    if (st->description != NULL)
        flare_json_kv_cstr(w, "description", st->description);
    flare_json_object_end(w);
    flare_json_kv_object(w, "paths");
    for (size_t i = 0; i < st->nops; i++) {
        bool first = true;
        for (size_t k = 0; k < i && first; k++)
            first = strcmp(st->ops[k].path, st->ops[i].path) != 0;
        if (!first)
            continue; /* written with the first operation of its path */
        flare_json_kv_object(w, st->ops[i].path);
        for (size_t k = i; k < st->nops; k++) {
            if (strcmp(st->ops[k].path, st->ops[i].path) == 0)
                write_op(w, &st->ops[k]);
        }
        flare_json_object_end(w);
    }
    flare_json_object_end(w);
    if (st->nschemas > 0 || st->nschemes > 0) {
        flare_json_kv_object(w, "components");
        if (st->nschemas > 0) {
            flare_json_kv_object(w, "schemas");
            for (size_t i = 0; i < st->nschemas; i++) {
                flare_json_key(w, flare_str(st->schemas[i].name));
                flare_json_raw(w, flare_str(st->schemas[i].json));
            }
            flare_json_object_end(w);
        }
        if (st->nschemes > 0) {
            flare_json_kv_object(w, "securitySchemes");
            for (size_t i = 0; i < st->nschemes; i++) {
                const oa_scheme_t *s = &st->schemes[i];
                flare_json_kv_object(w, s->name);
                flare_json_kv_cstr(w, "type", "apiKey");
                flare_json_kv_cstr(w, "in", "cookie");
                flare_json_kv_cstr(w, "name", s->cookie);
                if (s->description != NULL)
                    flare_json_kv_cstr(w, "description", s->description);
                flare_json_object_end(w);
            }
            flare_json_object_end(w);
        }
        flare_json_object_end(w);
    }
    return flare_json_object_end(w);
}

/* ---- serving ---- */

/* Generates the document (and the Swagger UI script) when something changed
 * since the last run; the first worker's init does it, before any worker
 * thread runs. */
static int oa_init_worker(flare_worker_t *w, void *state)
{
    (void)w;
    oa_state_t *st = state;
    if (!st->dirty)
        return 0;
    if (st->route_path != NULL) {
        flare_json_t j;
        flare_json_init_heap(&j, 4096);
        int rc = flare_openapi_write(st->app, &j);
        if (rc == 0)
            rc = flare_json_finish(&j);
        if (rc != 0) {
            flare_json_dispose(&j);
            return rc;
        }
        flare_str_t out = flare_json_output(&j);
        free(st->doc);
        st->doc = j.buf; /* the heap writer's buffer is ours now */
        st->doc_len = out.len;
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned mdlen = 0;
        if (!EVP_Digest(st->doc, st->doc_len, md, &mdlen, EVP_sha256(), NULL))
            return flare__fail(FLARE_ENOMEM, 0, "openapi: SHA-256 of the document failed");
        static const char hex[] = "0123456789abcdef";
        st->etag[0] = '"';
        for (unsigned i = 0; i < 16; i++) {
            st->etag[1 + 2 * i] = hex[md[i] >> 4];
            st->etag[2 + 2 * i] = hex[md[i] & 15];
        }
        st->etag[33] = '"';
        st->etag[34] = '\0';
    }
    int rc = flare__swagger_prepare(st);
    if (rc != 0)
        return rc;
    st->dirty = false;
    return 0;
}

static int serve_doc(flare_req_t *req, flare_res_t *res, void *ud)
{
    const oa_state_t *st = ud;
    if (st->doc == NULL)
        return FLARE_ESTATE; /* not generated: cannot happen once running */
    flare_str_t etag = { st->etag, 34 };
    flare_res_header(res, FLARE_STR("ETag"), etag);
    flare_res_header(res, FLARE_STR("Cache-Control"), FLARE_STR("no-cache"));
    flare_str_t inm = flare_req_header(req, "If-None-Match");
    if (inm.ptr != NULL && flare__etag_match(inm, etag, false))
        return flare_res_send(res, 304, FLARE_STR_NULL, FLARE_STR_NULL);
    return flare_res_send_ref(res, 200, FLARE_STR("application/json"),
                              (flare_str_t){ st->doc, st->doc_len }, NULL, NULL);
}

int flare_openapi_route(flare_app_t *app, const char *path)
{
    if (path == NULL)
        return FLARE_EINVAL;
    oa_state_t *st;
    int rc = flare__openapi_state(app, &st);
    if (rc != 0)
        return rc;
    if (st->route_path != NULL)
        return flare__fail(FLARE_EEXIST, 0, "flare_openapi_route: already served at %s",
                           st->route_path);
    char *copy = oa_strdup(st, path);
    if (copy == NULL)
        return FLARE_ENOMEM;
    if ((rc = flare_get(app, path, serve_doc, st)) != 0)
        return rc;
    st->route_path = copy;
    return 0;
}
