/* Streaming JSON writer.
 *
 * Invariants: `depth` containers are open; bit d of `stack` says whether the
 * container at depth d+1 is an object. F_FIRST: the innermost container has
 * no element yet (no comma due). F_KEY: a key was written in the innermost
 * object and its value is due. F_DONE: the root value is complete. Once
 * `err` is set nothing more is written, so a caller may check only at the
 * end. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "flare/json.h"

enum { F_FIRST = 1, F_KEY = 2, F_DONE = 4 };

static int fail(flare_json_t *w, int code)
{
    if (w->err == 0)
        w->err = code;
    return w->err;
}

static int heap_grow(flare_json_t *w, size_t need, void *ctx);
static int alloc_grow(flare_json_t *w, size_t need, void *ctx);

static size_t next_cap(const flare_json_t *w, size_t need)
{
    size_t want = w->len + need; /* caller checked for overflow */
    size_t cap = w->cap < 128 ? 256 : w->cap;
    while (cap < want) {
        if (cap > SIZE_MAX / 2)
            return want;
        cap *= 2;
    }
    return cap;
}

static int heap_grow(flare_json_t *w, size_t need, void *ctx)
{
    (void)ctx;
    size_t cap = next_cap(w, need);
    char *p = realloc(w->buf, cap);
    if (p == NULL)
        return FLARE_ENOMEM;
    w->buf = p;
    w->cap = cap;
    return 0;
}

static int alloc_grow(flare_json_t *w, size_t need, void *ctx)
{
    size_t cap = next_cap(w, need);
    char *p = w->alloc(ctx, cap);
    if (p == NULL)
        return FLARE_ENOMEM;
    if (w->len > 0)
        memcpy(p, w->buf, w->len);
    w->buf = p;
    w->cap = cap;
    return 0;
}

/* Makes room for at least one byte, `need` if the callback can: the slow
 * path of every write. Every write is split to fit (put_slow), so callers
 * only rely on one byte. */
static int ensure_slow(flare_json_t *w, size_t need)
{
    if (w->err != 0)
        return w->err;
    if (need > SIZE_MAX - w->len)
        return fail(w, FLARE_ETOOBIG);
    if (w->grow == NULL)
        return fail(w, FLARE_ETOOBIG);
    int rc = w->grow(w, need, w->grow_ctx);
    if (rc < 0)
        return fail(w, rc);
    if (w->len >= w->cap)
        return fail(w, FLARE_ESTATE); /* a grow callback that broke its contract */
    return 0;
}

static int put_slow(flare_json_t *w, const char *p, size_t n)
{
    while (n > 0) {
        size_t room = w->cap - w->len;
        if (room == 0) {
            /* Ask for what is left of this piece, bounded: a flushing
             * callback need not hold a whole long string at once. */
            int rc = ensure_slow(w, n < 4096 ? n : 4096);
            if (rc < 0)
                return rc;
            room = w->cap - w->len;
        }
        size_t k = room < n ? room : n;
        memcpy(w->buf + w->len, p, k);
        w->len += k;
        p += k;
        n -= k;
    }
    return 0;
}

static inline int put(flare_json_t *w, const char *p, size_t n)
{
    if (flare__likely(w->cap - w->len >= n)) {
        memcpy(w->buf + w->len, p, n);
        w->len += n;
        return 0;
    }
    return put_slow(w, p, n);
}

static inline int putc1(flare_json_t *w, char c)
{
    if (flare__unlikely(w->cap == w->len)) {
        int rc = ensure_slow(w, 1);
        if (rc < 0)
            return rc;
    }
    w->buf[w->len++] = c;
    return 0;
}

static void init_common(flare_json_t *w, char *buf, size_t cap)
{
    memset(w, 0, sizeof(*w));
    w->buf = buf;
    w->cap = buf != NULL ? cap : 0;
}

void flare_json_init(flare_json_t *w, char *buf, size_t cap)
{
    init_common(w, buf, cap);
}

void flare_json_init_alloc(flare_json_t *w, char *buf, size_t cap, flare_alloc_fn alloc, void *ctx)
{
    init_common(w, buf, cap);
    if (alloc != NULL) {
        w->alloc = alloc;
        w->grow = alloc_grow;
        w->grow_ctx = ctx;
    }
}

void flare_json_init_heap(flare_json_t *w, size_t initial_cap)
{
    init_common(w, NULL, 0);
    w->grow = heap_grow;
    /* a size no object can have is not asked of malloc: start empty */
    if (initial_cap > 0 && initial_cap <= (size_t)PTRDIFF_MAX) {
        w->buf = malloc(initial_cap);
        if (w->buf != NULL)
            w->cap = initial_cap;
    }
}

void flare_json_init_grow(flare_json_t *w, char *buf, size_t cap, flare_json_grow_fn grow,
                          void *ctx)
{
    init_common(w, buf, cap);
    w->grow = grow;
    w->grow_ctx = ctx;
}

void flare_json_dispose(flare_json_t *w)
{
    if (w->grow == heap_grow)
        free(w->buf);
    w->buf = NULL;
    w->len = 0;
    w->cap = 0;
    w->grow = NULL;
}

void flare_json_reset(flare_json_t *w)
{
    w->len = 0;
    w->err = 0;
    w->stack = 0;
    w->depth = 0;
    w->flags = 0;
}

int flare_json_finish(flare_json_t *w)
{
    if (w->err != 0)
        return w->err;
    if (w->depth != 0 || !(w->flags & F_DONE))
        return fail(w, FLARE_EINVAL);
    return 0;
}

flare_str_t flare_json_output(const flare_json_t *w)
{
    flare_str_t s = { w->buf != NULL ? w->buf : "", w->len };
    return s;
}

static inline bool in_object(const flare_json_t *w)
{
    return w->depth > 0 && (w->stack >> (w->depth - 1) & 1u);
}

/* Separator and state checks before any value (scalar or container). */
static int before_value(flare_json_t *w)
{
    if (w->err != 0)
        return w->err;
    if (w->depth == 0)
        return (w->flags & F_DONE) ? fail(w, FLARE_EINVAL) : 0;
    if (in_object(w)) {
        if (!(w->flags & F_KEY))
            return fail(w, FLARE_EINVAL);
        w->flags &= (uint8_t)~F_KEY;
        return 0;
    }
    if (!(w->flags & F_FIRST))
        return putc1(w, ',');
    w->flags &= (uint8_t)~F_FIRST;
    return 0;
}

static inline int after_value(flare_json_t *w)
{
    if (w->depth == 0)
        w->flags |= F_DONE;
    else
        w->flags &= (uint8_t)~F_FIRST;
    return w->err;
}

static int begin(flare_json_t *w, bool object)
{
    int rc = before_value(w);
    if (rc < 0)
        return rc;
    if (w->depth >= FLARE_JSON_MAX_DEPTH)
        return fail(w, FLARE_ETOOBIG);
    rc = putc1(w, object ? '{' : '[');
    if (rc < 0)
        return rc;
    if (object)
        w->stack |= 1u << w->depth;
    else
        w->stack &= ~(1u << w->depth);
    w->depth++;
    w->flags = F_FIRST;
    return 0;
}

static int end(flare_json_t *w, bool object)
{
    if (w->err != 0)
        return w->err;
    if (w->depth == 0 || in_object(w) != object || (w->flags & F_KEY))
        return fail(w, FLARE_EINVAL);
    int rc = putc1(w, object ? '}' : ']');
    if (rc < 0)
        return rc;
    w->depth--;
    w->flags = 0;
    return after_value(w);
}

int flare_json_object_begin(flare_json_t *w)
{
    return begin(w, true);
}

int flare_json_object_end(flare_json_t *w)
{
    return end(w, true);
}

int flare_json_array_begin(flare_json_t *w)
{
    return begin(w, false);
}

int flare_json_array_end(flare_json_t *w)
{
    return end(w, false);
}

/* ---- strings ---------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at p (2..4 bytes), or 0 with *bad set
 * to the length of the maximal invalid subpart (1..3 bytes) — Unicode
 * table 3-7, which excludes overlong forms, surrogates and > U+10FFFF. */
static size_t utf8_seq(const unsigned char *p, size_t avail, size_t *bad)
{
    unsigned char c = p[0];
    size_t n;
    unsigned char lo = 0x80, hi = 0xBF; /* range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
    } else {
        *bad = 1;
        return 0;
    }
    size_t k = 1;
    if (k < avail && p[1] >= lo && p[1] <= hi) {
        k = 2;
        while (k < n && k < avail && (p[k] & 0xC0) == 0x80)
            k++;
    }
    if (k == n)
        return n;
    *bad = k;
    return 0;
}

static int put_escaped(flare_json_t *w, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    int rc = putc1(w, '"');
    while (rc == 0 && i < n) {
        size_t run = i;
        while (run < n && p[run] >= 0x20 && p[run] < 0x80 && p[run] != '"' && p[run] != '\\')
            run++;
        if (run > i) {
            rc = put(w, s + i, run - i);
            i = run;
            continue;
        }
        unsigned char c = p[i];
        if (c < 0x80) {
            char e[6] = { '\\', 0, 0, 0, 0, 0 };
            size_t len = 2;
            switch (c) {
            case '"':
                e[1] = '"';
                break;
            case '\\':
                e[1] = '\\';
                break;
            case '\b':
                e[1] = 'b';
                break;
            case '\f':
                e[1] = 'f';
                break;
            case '\n':
                e[1] = 'n';
                break;
            case '\r':
                e[1] = 'r';
                break;
            case '\t':
                e[1] = 't';
                break;
            default:
                memcpy(e + 1, "u00", 3);
                e[4] = hex[c >> 4];
                e[5] = hex[c & 15];
                len = 6;
            }
            rc = put(w, e, len);
            i++;
            continue;
        }
        size_t bad = 0;
        size_t seq = utf8_seq(p + i, n - i, &bad);
        if (seq == 0) {
            rc = put(w, "\xEF\xBF\xBD", 3); /* U+FFFD */
            i += bad;
        } else if (seq == 3 && c == 0xE2 && p[i + 1] == 0x80 && (p[i + 2] & 0xFE) == 0xA8) {
            rc = put(w, p[i + 2] == 0xA8 ? "\\u2028" : "\\u2029", 6);
            i += 3;
        } else {
            rc = put(w, s + i, seq);
            i += seq;
        }
    }
    if (rc == 0)
        rc = putc1(w, '"');
    return rc;
}

int flare_json_key(flare_json_t *w, flare_str_t key)
{
    if (w->err != 0)
        return w->err;
    if (!in_object(w) || (w->flags & F_KEY) || (key.ptr == NULL && key.len != 0))
        return fail(w, FLARE_EINVAL);
    if (!(w->flags & F_FIRST)) {
        int rc = putc1(w, ',');
        if (rc < 0)
            return rc;
    }
    w->flags = F_KEY;
    int rc = put_escaped(w, key.ptr, key.len);
    if (rc < 0)
        return rc;
    return putc1(w, ':');
}

int flare_json_str(flare_json_t *w, flare_str_t s)
{
    if (s.ptr == NULL && s.len != 0)
        return fail(w, FLARE_EINVAL);
    int rc = before_value(w);
    if (rc < 0)
        return rc;
    rc = put_escaped(w, s.ptr, s.len);
    if (rc < 0)
        return rc;
    return after_value(w);
}

int flare_json_cstr(flare_json_t *w, const char *s)
{
    if (s == NULL)
        return flare_json_null(w);
    return flare_json_str(w, flare_str(s));
}

/* ---- scalars ---------------------------------------------------------- */

static int scalar(flare_json_t *w, const char *p, size_t n)
{
    int rc = before_value(w);
    if (rc < 0)
        return rc;
    rc = put(w, p, n);
    if (rc < 0)
        return rc;
    return after_value(w);
}

int flare_json_int(flare_json_t *w, int64_t v)
{
    char tmp[24];
    size_t n = 0;
    uint64_t u = (uint64_t)v;
    if (v < 0) {
        tmp[n++] = '-';
        u = 0 - u; /* exact for INT64_MIN too */
    }
    n += flare__u64toa(tmp + n, u);
    return scalar(w, tmp, n);
}

int flare_json_uint(flare_json_t *w, uint64_t v)
{
    char tmp[24];
    return scalar(w, tmp, flare__u64toa(tmp, v));
}

int flare_json_double(flare_json_t *w, double v)
{
    if (w->err != 0)
        return w->err;
    if (!isfinite(v))
        return fail(w, FLARE_EINVAL);
    char tmp[48];
    int n = 0;
    for (int prec = 15; prec <= 17; prec++) {
        n = snprintf(tmp, sizeof(tmp), "%.*g", prec, v);
        if (prec == 17 || strtod(tmp, NULL) == v)
            break;
    }
    if (n <= 0 || (size_t)n >= sizeof(tmp))
        return fail(w, FLARE_EINVAL);
    /* The locale may use another (even multi-byte) decimal separator. */
    char out[48];
    size_t k = 0;
    bool dot = false;
    for (int i = 0; i < n; i++) {
        char c = tmp[i];
        if ((c >= '0' && c <= '9') || c == 'e' || c == '+' || c == '-') {
            out[k++] = c;
        } else if (!dot) {
            out[k++] = '.';
            dot = true;
        }
    }
    return scalar(w, out, k);
}

int flare_json_bool(flare_json_t *w, bool v)
{
    return v ? scalar(w, "true", 4) : scalar(w, "false", 5);
}

int flare_json_null(flare_json_t *w)
{
    return scalar(w, "null", 4);
}

int flare_json_raw(flare_json_t *w, flare_str_t json)
{
    if (json.len == 0 || json.ptr == NULL)
        return fail(w, FLARE_EINVAL);
    return scalar(w, json.ptr, json.len);
}

/* ---- key + value ------------------------------------------------------ */

static int kv_key(flare_json_t *w, const char *key)
{
    if (key == NULL)
        return fail(w, FLARE_EINVAL);
    return flare_json_key(w, flare_str(key));
}

int flare_json_kv_str(flare_json_t *w, const char *key, flare_str_t v)
{
    int rc = kv_key(w, key);
    return rc < 0 ? rc : flare_json_str(w, v);
}

int flare_json_kv_cstr(flare_json_t *w, const char *key, const char *v)
{
    int rc = kv_key(w, key);
    return rc < 0 ? rc : flare_json_cstr(w, v);
}

int flare_json_kv_int(flare_json_t *w, const char *key, int64_t v)
{
    int rc = kv_key(w, key);
    return rc < 0 ? rc : flare_json_int(w, v);
}

int flare_json_kv_double(flare_json_t *w, const char *key, double v)
{
    /* Checked before the key so that a failed call leaves no dangling key. */
    if (!isfinite(v))
        return fail(w, FLARE_EINVAL);
    int rc = kv_key(w, key);
    return rc < 0 ? rc : flare_json_double(w, v);
}

int flare_json_kv_bool(flare_json_t *w, const char *key, bool v)
{
    int rc = kv_key(w, key);
    return rc < 0 ? rc : flare_json_bool(w, v);
}

int flare_json_kv_null(flare_json_t *w, const char *key)
{
    int rc = kv_key(w, key);
    return rc < 0 ? rc : flare_json_null(w);
}

int flare_json_kv_object(flare_json_t *w, const char *key)
{
    int rc = kv_key(w, key);
    return rc < 0 ? rc : flare_json_object_begin(w);
}

int flare_json_kv_array(flare_json_t *w, const char *key)
{
    int rc = kv_key(w, key);
    return rc < 0 ? rc : flare_json_array_begin(w);
}
