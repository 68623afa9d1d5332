/* libFuzzer target: query strings / urlencoded forms.
 *
 * The input is a query string. Checked (abort() on violation):
 *   - iteration: views inside the input, keys hold no '&' or '=', values no
 *     '&', at most max_pairs pairs and FLARE_ETOOBIG exactly when there are
 *     more, no empty piece yielded;
 *   - decoding equals a naive reference decoder, is never longer than its
 *     input, and in-place decoding gives the same bytes;
 *   - flare_form_decode copies only when needed;
 *   - flare_form_get / get_all / find agree with a plain walk over the
 *     decoded pairs, for the first key of the input and for a key taken
 *     from its middle.
 * Decoded bytes go to a bump allocator over a buffer of exactly the size
 * needed, so ASan sees any overrun. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "flare/form.h"

#define CHECK(x)     \
    do {             \
        if (!(x))    \
            abort(); \
    } while (0)

typedef struct bump {
    char *mem;
    size_t cap;
    size_t used;
} bump_t;

static void *bump_alloc(void *ctx, size_t n)
{
    bump_t *b = ctx;
    if (n > b->cap - b->used)
        return NULL;
    void *p = b->mem + b->used;
    b->used += n;
    return p;
}

static int hexv(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* The obvious decoder, to compare against. */
static size_t ref_decode(const char *s, size_t n, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '+') {
            out[o++] = ' ';
        } else if (s[i] == '%' && i + 2 < n && hexv((unsigned char)s[i + 1]) >= 0 &&
                   hexv((unsigned char)s[i + 2]) >= 0) {
            out[o++] = (char)(hexv((unsigned char)s[i + 1]) * 16 + hexv((unsigned char)s[i + 2]));
            i += 2;
        } else {
            out[o++] = s[i];
        }
    }
    return o;
}

static bool inside(flare_str_t v, const char *data, size_t size)
{
    return v.ptr >= data && v.ptr + v.len <= data + size;
}

static bool eq(flare_str_t a, const char *b, size_t n)
{
    return a.len == n && (n == 0 || memcmp(a.ptr, b, n) == 0);
}

/* Walks every pair with the reference decoder, checking get/get_all/find
 * for `key` against it. */
static void check_key(flare_str_t in, flare_str_t key, size_t max_pairs_hit)
{
    size_t n = in.len;
    char *tmpk = malloc(n + 1), *tmpv = malloc(n + 1);
    CHECK(tmpk != NULL && tmpv != NULL);
    flare_form_iter_t it;
    flare_str_t k, v;
    size_t matches = 0;
    char *first = NULL;
    size_t first_len = 0;
    flare_form_iter_init(&it, in);
    int rc;
    while ((rc = flare_form_next(&it, &k, &v)) == 0) {
        size_t kl = ref_decode(k.ptr, k.len, tmpk);
        if (kl == key.len && (kl == 0 || memcmp(tmpk, key.ptr, kl) == 0)) {
            if (matches == 0) {
                first_len = ref_decode(v.ptr, v.len, tmpv);
                first = malloc(first_len + 1);
                CHECK(first != NULL);
                memcpy(first, tmpv, first_len);
            }
            matches++;
        }
    }
    CHECK(rc == FLARE_EEND || (rc == FLARE_ETOOBIG && max_pairs_hit));

    bump_t b = { malloc(2 * n + 64), 2 * n + 64, 0 };
    CHECK(b.mem != NULL);
    flare_str_t got;
    int grc = flare_form_get(in, key, bump_alloc, &b, &got);
    if (matches > 0) {
        CHECK(grc == 0 && eq(got, first, first_len));
    } else {
        CHECK(grc == (rc == FLARE_ETOOBIG ? FLARE_ETOOBIG : FLARE_ENOTFOUND));
    }
    flare_str_t vals[4];
    size_t count = 99;
    /* every value may need a copy: give the allocator room for all */
    bump_t big = { malloc(n + 4 * (n + 1) + 64), n + 4 * (n + 1) + 64, 0 };
    CHECK(big.mem != NULL);
    int arc = flare_form_get_all(in, key, bump_alloc, &big, vals, 4, &count);
    CHECK(arc == (rc == FLARE_EEND ? 0 : rc));
    CHECK(count == matches);
    if (matches > 0)
        CHECK(eq(vals[0], first, first_len));
    free(big.mem);
    free(b.mem);
    free(first);
    free(tmpk);
    free(tmpv);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *in = malloc(size != 0 ? size : 1);
    CHECK(in != NULL);
    memcpy(in, data, size);
    flare_str_t input = { in, size };
    char *out = malloc(size + 1), *ref = malloc(size + 1);
    CHECK(out != NULL && ref != NULL);

    /* iteration, decoding */
    flare_form_iter_t it;
    flare_str_t k, v, first_key = FLARE_STR_NULL, mid_key = FLARE_STR_NULL;
    size_t pairs = 0;
    int rc;
    flare_form_iter_init(&it, input);
    while ((rc = flare_form_next(&it, &k, &v)) == 0) {
        pairs++;
        CHECK(pairs <= FLARE_FORM_MAX_PAIRS);
        CHECK(inside(k, in, size) && inside(v, in, size));
        CHECK(k.len + v.len > 0 || (v.ptr > k.ptr)); /* "=" alone is a pair, "" is not */
        CHECK(memchr(k.ptr, '&', k.len) == NULL && memchr(k.ptr, '=', k.len) == NULL);
        CHECK(v.len == 0 || memchr(v.ptr, '&', v.len) == NULL);
        flare_str_t raws[2] = { k, v };
        for (int r = 0; r < 2; r++) {
            size_t n = flare_form_decode_into(raws[r], out);
            size_t m = ref_decode(raws[r].ptr, raws[r].len, ref);
            CHECK(n == m && n <= raws[r].len && memcmp(out, ref, n) == 0);
            /* in place */
            char *copy = malloc(raws[r].len + 1);
            CHECK(copy != NULL);
            memcpy(copy, raws[r].ptr, raws[r].len);
            size_t p = flare_form_decode_into((flare_str_t){ copy, raws[r].len }, copy);
            CHECK(p == n && memcmp(copy, ref, n) == 0);
            free(copy);
            /* copies only when needed, into exactly len + 1 bytes */
            bump_t b = { malloc(raws[r].len + 1), raws[r].len + 1, 0 };
            CHECK(b.mem != NULL);
            flare_str_t d;
            CHECK(flare_form_decode(raws[r], bump_alloc, &b, &d) == 0);
            CHECK(eq(d, ref, n));
            bool plain = memchr(raws[r].ptr, '%', raws[r].len) == NULL &&
                         memchr(raws[r].ptr, '+', raws[r].len) == NULL;
            CHECK(plain ? (b.used == 0 && (raws[r].len == 0 || d.ptr == raws[r].ptr))
                        : (b.used == raws[r].len + 1 && d.ptr[d.len] == '\0'));
            free(b.mem);
        }
        if (pairs == 1)
            first_key = k;
        if (pairs == 1 + size / 16)
            mid_key = k;
    }
    CHECK(rc == FLARE_EEND || rc == FLARE_ETOOBIG);
    if (rc == FLARE_ETOOBIG)
        CHECK(pairs == FLARE_FORM_MAX_PAIRS && flare_form_next(&it, &k, &v) == FLARE_ETOOBIG);

    /* lookups agree with the walk (keys compared decoded) */
    flare_str_t keys[2] = { first_key, mid_key };
    for (int i = 0; i < 2; i++) {
        if (keys[i].ptr == NULL)
            continue;
        char *dk = malloc(keys[i].len + 1);
        CHECK(dk != NULL);
        size_t dl = flare_form_decode_into(keys[i], dk);
        check_key(input, (flare_str_t){ dk, dl }, rc == FLARE_ETOOBIG);
        free(dk);
    }
    free(out);
    free(ref);
    free(in);
    return 0;
}
