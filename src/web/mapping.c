/* Struct <-> JSON mapping driven by flare_field_t tables.
 *
 * Decoding walks the table, not the document: each field looks up its
 * member (a hash lookup in the parsed object), so the cost is linear in the
 * table, and the unknown-member check (opt-in) is the only walk of the
 * document's members. Every error is recorded and decoding goes on; only
 * server-side faults (memory, a broken table) stop it. */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flare/mapping.h"
#include "web/mapping_int.h"

/* ---- per-thread compiled pattern cache ----------------------------------
 * Tables are shared read-only by every worker; glibc's regexec() locks the
 * compiled regex, so each thread compiles its own copy (no lock, no sharing
 * on the request path). Keyed by the pattern pointer (the table's string). */

#define RE_CACHE_MAX 256

typedef struct re_entry {
    const char *pattern;
    regex_t re;
} re_entry_t;

typedef struct re_cache {
    size_t n;
    re_entry_t e[RE_CACHE_MAX];
} re_cache_t;

static pthread_key_t re_key;
static pthread_once_t re_once = PTHREAD_ONCE_INIT;
static int re_key_ok;
static _Thread_local re_cache_t *re_tls;

static void re_cache_free(void *p)
{
    re_cache_t *c = p;
    for (size_t i = 0; i < c->n; i++)
        regfree(&c->e[i].re);
    free(c);
}

static void re_key_init(void)
{
    re_key_ok = pthread_key_create(&re_key, re_cache_free) == 0;
}

static int pattern_compile(regex_t *re, const char *pattern)
{
    size_t n = strlen(pattern);
    char *anchored = malloc(n + 5);
    if (anchored == NULL)
        return FLARE_ENOMEM;
    anchored[0] = '^';
    anchored[1] = '(';
    memcpy(anchored + 2, pattern, n);
    memcpy(anchored + 2 + n, ")$", 3);
    int rc = regcomp(re, anchored, REG_EXTENDED | REG_NOSUB);
    free(anchored);
    if (rc == REG_ESPACE)
        return FLARE_ENOMEM;
    return rc == 0 ? 0 : FLARE_EPATTERN;
}

/* 1: matches, 0: does not, < 0: FLARE_E* (pattern broken, no memory).
 * s must be NUL-terminated at s[len] with no NUL inside. */
static int pattern_match(const char *pattern, const char *s)
{
    re_cache_t *c = re_tls;
    if (c == NULL) {
        pthread_once(&re_once, re_key_init);
        c = calloc(1, sizeof(*c));
        if (c != NULL) {
            if (re_key_ok && pthread_setspecific(re_key, c) == 0) {
                re_tls = c;
            } else {
                free(c);
                c = NULL;
            }
        }
    }
    if (c != NULL) {
        for (size_t i = 0; i < c->n; i++) {
            if (c->e[i].pattern == pattern)
                return regexec(&c->e[i].re, s, 0, NULL, 0) == 0;
        }
        if (c->n < RE_CACHE_MAX) {
            int rc = pattern_compile(&c->e[c->n].re, pattern);
            if (rc < 0)
                return rc;
            c->e[c->n].pattern = pattern;
            return regexec(&c->e[c->n++].re, s, 0, NULL, 0) == 0;
        }
    }
    /* No cache (full or no memory): compile for this call only. */
    regex_t re;
    int rc = pattern_compile(&re, pattern);
    if (rc < 0)
        return rc;
    rc = regexec(&re, s, 0, NULL, 0) == 0;
    regfree(&re);
    return rc;
}

/* ---- decoding ------------------------------------------------------------ */

typedef struct dctx {
    const flare_map_opts_t *opts;
    const flare_field_t *field; /* whose value is being checked (its message) */
    flare_map_errors_t *errs;
    int fatal;      /* server-side failure: stop */
    size_t plen;    /* current path length */
    char path[256]; /* "a.b[3]", NUL-terminated */
} dctx_t;

static flare_map_error_t *add_error(dctx_t *d, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Records an error at the current path; the reason is the field's message
 * when it has one. Returns the record, NULL when it did not fit. */
static flare_map_error_t *add_error(dctx_t *d, const char *fmt, ...)
{
    flare_map_errors_t *e = d->errs;
    e->total++;
    if (e->count >= FLARE_MAP_MAX_ERRORS)
        return NULL;
    flare_map_error_t *it = &e->items[e->count++];
    size_t n = d->plen < sizeof(it->field) - 1 ? d->plen : sizeof(it->field) - 1;
    memcpy(it->field, d->path, n);
    it->field[n] = '\0';
    it->pattern = NULL;
    if (d->field != NULL && d->field->message != NULL) {
        snprintf(it->reason, sizeof(it->reason), "%s", d->field->message);
        return it;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(it->reason, sizeof(it->reason), fmt, ap);
    va_end(ap);
    return it;
}

/* Appends ".name" (or "name" at the root) or "[i]" to the path; returns the
 * previous length to restore. A path that does not fit is cut (the error
 * record is cut to 63 bytes anyway). */
static size_t path_push_name(dctx_t *d, const char *name, size_t len)
{
    size_t old = d->plen;
    size_t room = sizeof(d->path) - 1 - d->plen;
    if (d->plen > 0 && room > 0) {
        d->path[d->plen++] = '.';
        room--;
    }
    if (len > room)
        len = room;
    memcpy(d->path + d->plen, name, len);
    d->plen += len;
    d->path[d->plen] = '\0';
    return old;
}

static size_t path_push_index(dctx_t *d, size_t i)
{
    size_t old = d->plen;
    int n = snprintf(d->path + d->plen, sizeof(d->path) - d->plen, "[%zu]", i);
    if (n > 0)
        d->plen +=
            (size_t)n < sizeof(d->path) - d->plen ? (size_t)n : sizeof(d->path) - 1 - d->plen;
    return old;
}

static void path_pop(dctx_t *d, size_t old)
{
    d->plen = old;
    d->path[old] = '\0';
}

static size_t utf8_count(const char *s, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        n += ((unsigned char)s[i] & 0xC0) != 0x80;
    return n;
}

static void range_error(dctx_t *d, const char *what, size_t lo, size_t hi)
{
    if (lo > 0 && hi > 0)
        add_error(d, "%s must be %zu..%zu", what, lo, hi);
    else if (lo > 0)
        add_error(d, "%s must be at least %zu", what, lo);
    else
        add_error(d, "%s must be at most %zu", what, hi);
}

static void decode_object(dctx_t *d, const flare_field_t *fields, size_t n,
                          const flare_json_val_t *v, char *base, bool top);

static void decode_string(dctx_t *d, const flare_field_t *f, const flare_json_val_t *v, char *dst)
{
    flare_str_t s;
    if (flare_json_val_str(v, &s) < 0) {
        add_error(d, "must be a string");
        return;
    }
    size_t chars = utf8_count(s.ptr, s.len);
    if (chars < f->min_len || (f->max_len > 0 && chars > f->max_len)) {
        range_error(d, "length", f->min_len, f->max_len);
        return;
    }
    if (f->size > 0 && s.len >= f->size) {
        add_error(d, "must be at most %zu bytes", f->size - 1);
        return;
    }
    if (f->pattern != NULL) {
        int m = pattern_match(f->pattern, s.ptr);
        if (m < 0) {
            d->fatal = m;
            return;
        }
        if (m == 0) {
            /* a regular expression means nothing to the user who typed
             * the value: it goes in a field of its own */
            flare_map_error_t *it = add_error(d, "has an invalid format");
            if (it != NULL)
                it->pattern = f->pattern;
            return;
        }
    }
    if (f->size > 0) {
        memcpy(dst, s.ptr, s.len);
        dst[s.len] = '\0';
        return;
    }
    flare_str_t out = { "", 0 };
    if (s.len > 0) {
        if (d->opts->alloc == NULL) {
            d->fatal = FLARE_ESTATE;
            return;
        }
        char *p = d->opts->alloc(d->opts->alloc_ctx, s.len + 1);
        if (p == NULL) {
            d->fatal = FLARE_ENOMEM;
            return;
        }
        memcpy(p, s.ptr, s.len + 1);
        out.ptr = p;
        out.len = s.len;
    }
    memcpy(dst, &out, sizeof(out));
}

static bool int_fits(int64_t x, size_t size)
{
    switch (size) {
    case 1:
        return x >= SCHAR_MIN && x <= SCHAR_MAX;
    case 2:
        return x >= SHRT_MIN && x <= SHRT_MAX;
    case 4:
        return x >= INT32_MIN && x <= INT32_MAX;
    default:
        return true;
    }
}

static void store_int(char *dst, int64_t x, size_t size)
{
    switch (size) {
    case 1: {
        signed char v = (signed char)x;
        memcpy(dst, &v, 1);
        break;
    }
    case 2: {
        int16_t v = (int16_t)x;
        memcpy(dst, &v, 2);
        break;
    }
    case 4: {
        int32_t v = (int32_t)x;
        memcpy(dst, &v, 4);
        break;
    }
    default:
        memcpy(dst, &x, 8);
    }
}

static int64_t load_int(const char *src, size_t size)
{
    switch (size) {
    case 1: {
        signed char v;
        memcpy(&v, src, 1);
        return v;
    }
    case 2: {
        int16_t v;
        memcpy(&v, src, 2);
        return v;
    }
    case 4: {
        int32_t v;
        memcpy(&v, src, 4);
        return v;
    }
    default: {
        int64_t v;
        memcpy(&v, src, 8);
        return v;
    }
    }
}

static void int_bounds_error(dctx_t *d, const flare_field_t *f)
{
    if (f->has_min && f->has_max)
        add_error(d, "must be between %lld and %lld", (long long)f->min, (long long)f->max);
    else if (f->has_min)
        add_error(d, "must be at least %lld", (long long)f->min);
    else
        add_error(d, "must be at most %lld", (long long)f->max);
}

static void decode_int(dctx_t *d, const flare_field_t *f, const flare_json_val_t *v, char *dst)
{
    int64_t x;
    if (flare_json_val_int(v, &x) < 0) {
        add_error(d, "must be an integer");
        return;
    }
    if ((f->has_min && x < f->min) || (f->has_max && x > f->max)) {
        int_bounds_error(d, f);
        return;
    }
    if (!int_fits(x, f->size)) {
        add_error(d, "is out of range");
        return;
    }
    store_int(dst, x, f->size);
}

static void decode_double(dctx_t *d, const flare_field_t *f, const flare_json_val_t *v, char *dst)
{
    double x;
    if (flare_json_val_double(v, &x) < 0) {
        add_error(d, "must be a number");
        return;
    }
    /* Integer bounds compared exactly when the value is an integer. */
    int64_t xi;
    bool is_int = flare_json_val_int(v, &xi) == 0;
    bool below = f->has_min && (is_int ? xi < f->min : x < (double)f->min);
    bool above = f->has_max && (is_int ? xi > f->max : x > (double)f->max);
    if (below || above) {
        int_bounds_error(d, f);
        return;
    }
    if ((f->has_dmin && x < f->dmin) || (f->has_dmax && x > f->dmax)) {
        if (f->has_dmin && f->has_dmax)
            add_error(d, "must be between %.17g and %.17g", f->dmin, f->dmax);
        else if (f->has_dmin)
            add_error(d, "must be at least %.17g", f->dmin);
        else
            add_error(d, "must be at most %.17g", f->dmax);
        return;
    }
    if (f->size == sizeof(float)) {
        if (fabs(x) > FLT_MAX) {
            add_error(d, "is out of range");
            return;
        }
        float y = (float)x;
        memcpy(dst, &y, sizeof(y));
    } else {
        memcpy(dst, &x, sizeof(x));
    }
}

static void decode_bool(dctx_t *d, const flare_json_val_t *v, char *dst)
{
    bool b;
    if (flare_json_val_bool(v, &b) < 0) {
        add_error(d, "must be a boolean");
        return;
    }
    memcpy(dst, &b, sizeof(b));
}

/* One value of type t (a field's type, or an array's element type). */
static void decode_value(dctx_t *d, const flare_field_t *f, flare_field_type_t t,
                         const flare_json_val_t *v, char *dst)
{
    switch (t) {
    case FLARE_FIELD_STRING:
        decode_string(d, f, v, dst);
        break;
    case FLARE_FIELD_INT:
        decode_int(d, f, v, dst);
        break;
    case FLARE_FIELD_DOUBLE:
        decode_double(d, f, v, dst);
        break;
    case FLARE_FIELD_BOOL:
        decode_bool(d, v, dst);
        break;
    case FLARE_FIELD_OBJECT:
        decode_object(d, f->fields, f->nfields, v, dst, false);
        break;
    case FLARE_FIELD_ARRAY:
        d->fatal = FLARE_EINVAL;
        break; /* arrays of arrays */
    }
}

static void decode_array(dctx_t *d, const flare_field_t *f, const flare_json_val_t *v, char *base)
{
    if (flare_json_val_type(v) != FLARE_JSON_ARRAY) {
        add_error(d, "must be an array");
        return;
    }
    size_t len = flare_json_val_len(v);
    size_t max = f->max_items > 0 && f->max_items < f->capacity ? f->max_items : f->capacity;
    if (len < f->min_items || len > max) {
        range_error(d, "number of items", f->min_items, max);
        return;
    }
    char *elems = base + f->offset;
    for (size_t i = 0; i < len && d->fatal == 0; i++) {
        size_t old = path_push_index(d, i);
        size_t stride = f->size > 0 ? f->size : sizeof(flare_str_t);
        decode_value(d, f, f->elem, flare_json_val_at(v, i), elems + i * stride);
        path_pop(d, old);
    }
    memcpy(base + f->count_offset, &len, sizeof(len));
}

static const flare_field_t *find_field(const flare_field_t *fields, size_t n, flare_str_t key)
{
    for (size_t i = 0; i < n; i++) {
        if (strlen(fields[i].name) == key.len && memcmp(fields[i].name, key.ptr, key.len) == 0)
            return &fields[i];
    }
    return NULL;
}

static void decode_object(dctx_t *d, const flare_field_t *fields, size_t n,
                          const flare_json_val_t *v, char *base, bool top)
{
    if (flare_json_val_type(v) != FLARE_JSON_OBJECT) {
        add_error(d, "must be an object");
        return;
    }
    bool partial = top && (d->opts->flags & FLARE_MAP_PARTIAL);
    const flare_field_t *outer = d->field;
    d->field = NULL; /* "is required", "unknown field": the default reasons */
    for (size_t i = 0; i < n && d->fatal == 0; i++) {
        const flare_field_t *f = &fields[i];
        const flare_json_val_t *m = flare_json_val_get(v, f->name);
        size_t old = path_push_name(d, f->name, strlen(f->name));
        if (m == NULL || flare_json_val_is_null(m)) {
            if (f->required && !partial)
                add_error(d, "is required");
        } else {
            if (top && i < 64)
                d->errs->present |= (uint64_t)1 << i;
            d->field = f;
            if (f->type == FLARE_FIELD_ARRAY)
                decode_array(d, f, m, base);
            else
                decode_value(d, f, f->type, m, base + f->offset);
            d->field = NULL;
        }
        path_pop(d, old);
    }
    if ((d->opts->flags & FLARE_MAP_REJECT_UNKNOWN) && d->fatal == 0) {
        void *it = NULL;
        flare_str_t key;
        const flare_json_val_t *m;
        while (flare_json_val_next(v, &it, &key, &m) == 0) {
            if (find_field(fields, n, key) == NULL) {
                size_t old = path_push_name(d, key.ptr, key.len);
                add_error(d, "unknown field");
                path_pop(d, old);
            }
        }
    }
    d->field = outer;
}

static void errs_init(flare_map_errors_t *errs)
{
    errs->count = 0;
    errs->total = 0;
    errs->invalid_json = false;
    errs->present = 0;
    memset(&errs->json, 0, sizeof(errs->json));
}

int flare_map_decode_val(const flare_field_t *fields, size_t n, const flare_json_val_t *v,
                         void *obj, const flare_map_opts_t *opts, flare_map_errors_t *errs)
{
    static const flare_map_opts_t defaults = { 0, NULL, NULL };
    dctx_t d;
    d.opts = opts != NULL ? opts : &defaults;
    d.field = NULL;
    d.errs = errs;
    d.fatal = 0;
    d.plen = 0;
    d.path[0] = '\0';
    errs_init(errs);
    decode_object(&d, fields, n, v, obj, true);
    if (d.fatal < 0)
        return d.fatal;
    return errs->total > 0 ? FLARE_EINVAL : 0;
}

int flare_map_decode(const flare_field_t *fields, size_t n, const char *json, size_t len, void *obj,
                     const flare_map_opts_t *opts, flare_map_errors_t *errs)
{
    flare_json_doc_t *doc;
    errs_init(errs);
    int rc = flare_json_parse(json, len, &doc, &errs->json);
    if (rc == FLARE_EINVAL) {
        errs->invalid_json = true;
        errs->total = 1;
        return rc;
    }
    if (rc < 0)
        return rc;
    rc = flare_map_decode_val(fields, n, flare_json_doc_root(doc), obj, opts, errs);
    flare_json_doc_free(doc);
    return rc;
}

int flare_map_errors_write(const flare_map_errors_t *errs, flare_json_t *w)
{
    if (errs->invalid_json)
        return flare_json_error_write(&errs->json, w);
    flare_json_object_begin(w);
    flare_json_kv_array(w, "errors");
    for (size_t i = 0; i < errs->count; i++) {
        flare_json_object_begin(w);
        flare_json_kv_cstr(w, "field", errs->items[i].field);
        flare_json_kv_cstr(w, "reason", errs->items[i].reason);
        if (errs->items[i].pattern != NULL)
            flare_json_kv_cstr(w, "pattern", errs->items[i].pattern);
        flare_json_object_end(w);
    }
    flare_json_array_end(w);
    if (errs->total > errs->count)
        flare_json_kv_int(w, "more", (int64_t)(errs->total - errs->count));
    return flare_json_object_end(w);
}

/* ---- encoding ------------------------------------------------------------ */

static int encode_value(const flare_field_t *f, flare_field_type_t t, const char *src,
                        flare_json_t *w);

int flare_map_encode(const flare_field_t *fields, size_t n, const void *obj, flare_json_t *w)
{
    const char *base = obj;
    flare_json_object_begin(w);
    for (size_t i = 0; i < n; i++) {
        const flare_field_t *f = &fields[i];
        flare_json_key(w, flare_str(f->name));
        if (f->type == FLARE_FIELD_ARRAY) {
            size_t count;
            memcpy(&count, base + f->count_offset, sizeof(count));
            if (count > f->capacity)
                count = f->capacity;
            size_t stride = f->size > 0 ? f->size : sizeof(flare_str_t);
            flare_json_array_begin(w);
            for (size_t k = 0; k < count; k++)
                encode_value(f, f->elem, base + f->offset + k * stride, w);
            flare_json_array_end(w);
        } else {
            encode_value(f, f->type, base + f->offset, w);
        }
    }
    return flare_json_object_end(w);
}

static int encode_value(const flare_field_t *f, flare_field_type_t t, const char *src,
                        flare_json_t *w)
{
    switch (t) {
    case FLARE_FIELD_STRING:
        if (f->size > 0)
            return flare_json_str(w, (flare_str_t){ src, strnlen(src, f->size) });
        flare_str_t s;
        memcpy(&s, src, sizeof(s));
        return s.ptr == NULL ? flare_json_null(w) : flare_json_str(w, s);
    case FLARE_FIELD_INT:
        return flare_json_int(w, load_int(src, f->size));
    case FLARE_FIELD_DOUBLE:
        if (f->size == sizeof(float)) {
            float y;
            memcpy(&y, src, sizeof(y));
            return flare_json_double(w, (double)y);
        } else {
            double x;
            memcpy(&x, src, sizeof(x));
            return flare_json_double(w, x);
        }
    case FLARE_FIELD_BOOL: {
        bool b;
        memcpy(&b, src, sizeof(b));
        return flare_json_bool(w, b);
    }
    case FLARE_FIELD_OBJECT:
        return flare_map_encode(f->fields, f->nfields, src, w);
    case FLARE_FIELD_ARRAY:
        break;
    }
    return flare_json_null(w);
}

/* ---- schema -------------------------------------------------------------- */

/* "type": "T", or with nullable (JSON Schema 2020-12, OpenAPI 3.1: no
 * "nullable" keyword any more) "type": ["T", "null"]. */
static void schema_type(flare_json_t *w, const char *t, bool nullable)
{
    if (!nullable) {
        flare_json_kv_cstr(w, "type", t);
        return;
    }
    flare_json_kv_array(w, "type");
    flare_json_cstr(w, t);
    flare_json_cstr(w, "null");
    flare_json_array_end(w);
}

static void schema_value(const flare_field_t *f, flare_field_type_t t, unsigned flags,
                         bool nullable, flare_json_t *w)
{
    switch (t) {
    case FLARE_FIELD_STRING: {
        schema_type(w, "string", nullable);
        if (f->min_len > 0)
            flare_json_kv_int(w, "minLength", (int64_t)f->min_len);
        size_t max = f->max_len;
        if (f->size > 0 && (max == 0 || max > f->size - 1))
            max = f->size - 1; /* a byte bound is also a (looser) character bound */
        if (max > 0 || f->size == 1)
            flare_json_kv_int(w, "maxLength", (int64_t)max);
        if (f->pattern != NULL) {
            size_t n = strlen(f->pattern);
            flare_json_key(w, FLARE_STR("pattern"));
            /* anchored the way decoding matches it */
            char small[256];
            char *p = n + 5 <= sizeof(small) ? small : malloc(n + 5);
            if (p == NULL) {
                flare_json_cstr(w, f->pattern);
                break;
            }
            memcpy(p, "^(", 2);
            memcpy(p + 2, f->pattern, n);
            memcpy(p + 2 + n, ")$", 2);
            flare_json_str(w, (flare_str_t){ p, n + 4 });
            if (p != small)
                free(p);
        }
        break;
    }
    case FLARE_FIELD_INT: {
        schema_type(w, "integer", nullable);
        flare_json_kv_cstr(w, "format", f->size == 8 ? "int64" : "int32");
        /* a member narrower than its format also bounds the value (decoding
         * refuses what does not fit) */
        int64_t lo = 0, hi = 0;
        bool narrow = (flags & FLARE__SCHEMA_OPENAPI) && (f->size == 1 || f->size == 2);
        if (narrow) {
            hi = f->size == 1 ? INT8_MAX : INT16_MAX;
            lo = -hi - 1;
        }
        if (f->has_min)
            flare_json_kv_int(w, "minimum", narrow && f->min < lo ? lo : f->min);
        else if (narrow)
            flare_json_kv_int(w, "minimum", lo);
        if (f->has_max)
            flare_json_kv_int(w, "maximum", narrow && f->max > hi ? hi : f->max);
        else if (narrow)
            flare_json_kv_int(w, "maximum", hi);
        break;
    }
    case FLARE_FIELD_DOUBLE:
        schema_type(w, "number", nullable);
        flare_json_kv_cstr(w, "format", f->size == sizeof(float) ? "float" : "double");
        if (f->has_dmin && (!f->has_min || f->dmin >= (double)f->min))
            flare_json_kv_double(w, "minimum", f->dmin);
        else if (f->has_min)
            flare_json_kv_int(w, "minimum", f->min);
        if (f->has_dmax && (!f->has_max || f->dmax <= (double)f->max))
            flare_json_kv_double(w, "maximum", f->dmax);
        else if (f->has_max)
            flare_json_kv_int(w, "maximum", f->max);
        break;
    case FLARE_FIELD_BOOL:
        schema_type(w, "boolean", nullable);
        break;
    case FLARE_FIELD_OBJECT:
        break; /* written by the caller */
    case FLARE_FIELD_ARRAY:
        break;
    }
}

static void schema_object_body(const flare_field_t *fields, size_t n, unsigned flags, bool nullable,
                               flare_json_t *w);

static void schema_field(const flare_field_t *f, unsigned flags, bool top, flare_json_t *w)
{
    /* decoding takes null for an absent member, so an optional one is
     * nullable (and with PARTIAL, every top-level one is optional) */
    bool optional = !f->required || (top && (flags & FLARE__SCHEMA_PARTIAL));
    bool nullable = (flags & FLARE__SCHEMA_OPENAPI) && optional;
    unsigned inner = flags & ~(unsigned)FLARE__SCHEMA_PARTIAL; /* nested objects are complete */
    flare_json_kv_object(w, f->name);
    if (f->description != NULL)
        flare_json_kv_cstr(w, "description", f->description);
    if (f->type == FLARE_FIELD_OBJECT) {
        schema_object_body(f->fields, f->nfields, inner, nullable, w);
    } else if (f->type == FLARE_FIELD_ARRAY) {
        schema_type(w, "array", nullable);
        if (f->min_items > 0)
            flare_json_kv_int(w, "minItems", (int64_t)f->min_items);
        size_t max = f->max_items > 0 && f->max_items < f->capacity ? f->max_items : f->capacity;
        flare_json_kv_int(w, "maxItems", (int64_t)max);
        flare_json_kv_object(w, "items");
        if (f->elem == FLARE_FIELD_OBJECT)
            schema_object_body(f->fields, f->nfields, inner, false, w);
        else
            schema_value(f, f->elem, inner, false, w);
        flare_json_object_end(w);
    } else {
        schema_value(f, f->type, inner, nullable, w);
    }
    flare_json_object_end(w);
}

static void schema_object_body(const flare_field_t *fields, size_t n, unsigned flags, bool nullable,
                               flare_json_t *w)
{
    schema_type(w, "object", nullable);
    flare_json_kv_object(w, "properties");
    for (size_t i = 0; i < n; i++)
        schema_field(&fields[i], flags, true, w);
    flare_json_object_end(w);
    bool any = false;
    for (size_t i = 0; i < n && !(flags & FLARE__SCHEMA_PARTIAL); i++) {
        if (!fields[i].required)
            continue;
        if (!any)
            flare_json_kv_array(w, "required");
        any = true;
        flare_json_cstr(w, fields[i].name);
    }
    if (any)
        flare_json_array_end(w);
    if (flags & FLARE__SCHEMA_CLOSED)
        flare_json_kv_bool(w, "additionalProperties", false);
}

int flare__map_schema(const flare_field_t *fields, size_t n, unsigned flags, flare_json_t *w)
{
    flare_json_object_begin(w);
    schema_object_body(fields, n, flags, false, w);
    return flare_json_object_end(w);
}

int flare_map_schema(const flare_field_t *fields, size_t n, flare_json_t *w)
{
    return flare__map_schema(fields, n, 0, w);
}

int flare__map_schema_scalar(const flare_field_t *f, flare_json_t *w)
{
    flare_json_object_begin(w);
    schema_value(f, f->type, FLARE__SCHEMA_OPENAPI, false, w);
    return flare_json_object_end(w);
}

/* ---- table check ------------------------------------------------------- */

static int check_scalar(const flare_field_t *f, flare_field_type_t t)
{
    switch (t) {
    case FLARE_FIELD_STRING:
        if (f->max_len > 0 && f->min_len > f->max_len)
            return FLARE_EINVAL;
        if (f->pattern != NULL) {
            int m = pattern_match(f->pattern, "");
            if (m < 0)
                return m;
        }
        return 0;
    case FLARE_FIELD_INT:
        if (f->size != 1 && f->size != 2 && f->size != 4 && f->size != 8)
            return FLARE_EINVAL;
        return f->has_min && f->has_max && f->min > f->max ? FLARE_EINVAL : 0;
    case FLARE_FIELD_DOUBLE:
        if (f->size != sizeof(float) && f->size != sizeof(double))
            return FLARE_EINVAL;
        if (f->has_dmin && f->has_dmax && !(f->dmin <= f->dmax))
            return FLARE_EINVAL;
        return f->has_min && f->has_max && f->min > f->max ? FLARE_EINVAL : 0;
    case FLARE_FIELD_BOOL:
        return f->size == sizeof(bool) ? 0 : FLARE_EINVAL;
    case FLARE_FIELD_OBJECT:
        return f->fields != NULL && f->nfields > 0 ? flare_map_check(f->fields, f->nfields)
                                                   : FLARE_EINVAL;
    case FLARE_FIELD_ARRAY:
        break;
    }
    return FLARE_EINVAL;
}

int flare_map_check(const flare_field_t *fields, size_t n)
{
    if (fields == NULL && n > 0)
        return FLARE_EINVAL;
    for (size_t i = 0; i < n; i++) {
        const flare_field_t *f = &fields[i];
        if (f->name == NULL)
            return FLARE_EINVAL;
        for (size_t k = 0; k < i; k++) {
            if (strcmp(fields[k].name, f->name) == 0)
                return FLARE_EINVAL;
        }
        int rc;
        if (f->type == FLARE_FIELD_ARRAY) {
            if (f->capacity == 0 || f->elem == FLARE_FIELD_ARRAY || f->elem == 0)
                return FLARE_EINVAL;
            if (f->max_items > 0 && f->min_items > f->max_items)
                return FLARE_EINVAL;
            rc = check_scalar(f, f->elem);
        } else {
            rc = check_scalar(f, f->type);
        }
        if (rc < 0)
            return rc;
    }
    return 0;
}
