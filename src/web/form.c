/* application/x-www-form-urlencoded and query strings. */
#include <string.h>

#include "core/core.h"
#include "flare/flare.h"
#include "flare/form.h"

/* Decodes the byte at raw[*i] (and its escape), advancing *i. */
static inline unsigned char decode_at(flare_str_t raw, size_t *i)
{
    unsigned char c = (unsigned char)raw.ptr[*i];
    if (c == '+') {
        (*i)++;
        return ' ';
    }
    if (c == '%' && raw.len - *i >= 3) {
        int hi = flare__hexval((unsigned char)raw.ptr[*i + 1]);
        int lo = flare__hexval((unsigned char)raw.ptr[*i + 2]);
        if (hi >= 0 && lo >= 0) {
            *i += 3;
            return (unsigned char)(hi << 4 | lo);
        }
    }
    (*i)++;
    return c;
}

void flare_form_iter_init(flare_form_iter_t *it, flare_str_t input)
{
    it->p = input.ptr;
    it->end = input.ptr != NULL ? input.ptr + input.len : NULL;
    it->count = 0;
    it->max_pairs = FLARE_FORM_MAX_PAIRS;
}

int flare_form_next(flare_form_iter_t *it, flare_str_t *key, flare_str_t *value)
{
    while (it->p != NULL && it->p < it->end) {
        const char *s = it->p;
        const char *amp = memchr(s, '&', (size_t)(it->end - s));
        const char *e = amp != NULL ? amp : it->end;
        if (e == s) {
            it->p = e + 1; /* empty piece */
            continue;
        }
        if (it->max_pairs != 0 && it->count >= it->max_pairs)
            return FLARE_ETOOBIG; /* stays here: every later call says the same */
        it->p = amp != NULL ? amp + 1 : it->end;
        it->count++;
        const char *eq = memchr(s, '=', (size_t)(e - s));
        if (eq != NULL) {
            *key = (flare_str_t){ s, (size_t)(eq - s) };
            *value = (flare_str_t){ eq + 1, (size_t)(e - eq - 1) };
        } else {
            *key = (flare_str_t){ s, (size_t)(e - s) };
            *value = (flare_str_t){ e, 0 };
        }
        return 0;
    }
    return FLARE_EEND;
}

/* Does raw decode to exactly key? No allocation. */
static bool key_matches(flare_str_t raw, flare_str_t key)
{
    if (raw.len < key.len)
        return false; /* decoding never lengthens */
    size_t i = 0, k = 0;
    while (i < raw.len) {
        if (k == key.len)
            return false;
        if (decode_at(raw, &i) != (unsigned char)key.ptr[k++])
            return false;
    }
    return k == key.len;
}

int flare_form_find(flare_form_iter_t *it, flare_str_t key, flare_str_t *raw_value)
{
    flare_str_t k, v;
    int rc;
    while ((rc = flare_form_next(it, &k, &v)) == 0) {
        if (key_matches(k, key)) {
            *raw_value = v;
            return 0;
        }
    }
    return rc;
}

size_t flare_form_decode_into(flare_str_t raw, char *out)
{
    size_t i = 0, n = 0;
    while (i < raw.len)
        out[n++] = (char)decode_at(raw, &i);
    return n;
}

int flare_form_decode(flare_str_t raw, flare_alloc_fn alloc, void *ctx, flare_str_t *out)
{
    bool plain = raw.len == 0 ||
                 (memchr(raw.ptr, '%', raw.len) == NULL && memchr(raw.ptr, '+', raw.len) == NULL);
    if (plain) {
        *out = raw.ptr != NULL ? raw : (flare_str_t){ "", 0 };
        return 0;
    }
    char *p = alloc != NULL ? alloc(ctx, raw.len + 1) : NULL;
    if (p == NULL)
        return FLARE_ENOMEM;
    size_t n = flare_form_decode_into(raw, p);
    p[n] = '\0';
    *out = (flare_str_t){ p, n };
    return 0;
}

int flare_form_next_decoded(flare_form_iter_t *it, flare_alloc_fn alloc, void *ctx,
                            flare_str_t *key, flare_str_t *value)
{
    flare_str_t k, v;
    int rc = flare_form_next(it, &k, &v);
    if (rc != 0)
        return rc;
    rc = flare_form_decode(k, alloc, ctx, key);
    if (rc == 0)
        rc = flare_form_decode(v, alloc, ctx, value);
    return rc;
}

int flare_form_get(flare_str_t input, flare_str_t key, flare_alloc_fn alloc, void *ctx,
                   flare_str_t *value)
{
    flare_form_iter_t it;
    flare_str_t raw;
    flare_form_iter_init(&it, input);
    int rc = flare_form_find(&it, key, &raw);
    if (rc == FLARE_EEND)
        return FLARE_ENOTFOUND;
    if (rc != 0)
        return rc;
    return flare_form_decode(raw, alloc, ctx, value);
}

int flare_form_get_all(flare_str_t input, flare_str_t key, flare_alloc_fn alloc, void *ctx,
                       flare_str_t *values, size_t max, size_t *count)
{
    flare_form_iter_t it;
    flare_str_t raw;
    int rc;
    *count = 0;
    flare_form_iter_init(&it, input);
    while ((rc = flare_form_find(&it, key, &raw)) == 0) {
        if (*count < max) {
            int drc = flare_form_decode(raw, alloc, ctx, &values[*count]);
            if (drc < 0)
                return drc;
        }
        (*count)++;
    }
    return rc == FLARE_EEND ? 0 : rc;
}

/* The request's query through the same parser as every other form input,
 * so that a key means the same here as in flare_form_get (empty keys,
 * empty pieces, escapes, the pair bound). */
static void *req_alloc(void *ctx, size_t n)
{
    return flare_req_alloc(ctx, n);
}

flare_str_t flare_req_query_param(flare_req_t *req, const char *name)
{
    flare_str_t v;
    if (name == NULL ||
        flare_form_get(flare_req_query(req), flare_str(name), req_alloc, req, &v) != 0)
        return FLARE_STR_NULL;
    return v.len > 0 ? v : (flare_str_t){ "", 0 };
}
