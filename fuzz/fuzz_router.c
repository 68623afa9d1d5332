/* Router: fuzz-derived patterns are added to a fresh router (validation must
 * reject bad ones cleanly), then fuzz-derived paths are matched against it
 * and against a fixed table, as sent and in normal form. Invariants:
 * parameter values lie inside the path; a match never reports an allowed
 * set; no leak, no crash. And for flare__router_normalize_path: never
 * longer, the same in place, idempotent, no escape left of an unreserved
 * character nor lower-case hex in one, and (when every '%' starts an
 * escape, as the parser ensures) percent-decoding the normal form gives
 * exactly what decoding the path gives. */
#include <ctype.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "router/match.h"
#include "router/router.h"

#define CHECK(x)     \
    do {             \
        if (!(x))    \
            abort(); \
    } while (0)

static flare_router_t *fixed;

static int hexv(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Percent-decodes p[0..n) into out; false if some '%' starts no escape. */
static bool decode(const char *p, size_t n, char *out, size_t *outlen)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] != '%') {
            out[k++] = p[i];
            continue;
        }
        if (n - i < 3 || hexv(p[i + 1]) < 0 || hexv(p[i + 2]) < 0)
            return false;
        out[k++] = (char)(hexv(p[i + 1]) << 4 | hexv(p[i + 2]));
        i += 2;
    }
    *outlen = k;
    return true;
}

static void check_normal_form(const char *p, size_t n)
{
    char *a = malloc(n + 1), *b = malloc(n + 1), *da = malloc(n + 1), *db = malloc(n + 1);
    CHECK(a != NULL && b != NULL && da != NULL && db != NULL);
    size_t na = flare__router_normalize_path((flare_str_t){ p, n }, a);
    CHECK(na <= n);
    memcpy(b, p, n);
    CHECK(flare__router_normalize_path((flare_str_t){ b, n }, b) == na); /* in place */
    CHECK(memcmp(a, b, na) == 0);
    size_t la, lb;
    if (decode(p, n, da, &la)) {
        /* well-formed, as every request path that reaches the router */
        CHECK(decode(a, na, db, &lb));
        CHECK(la == lb && memcmp(da, db, la) == 0);
        CHECK(flare__router_normalize_path((flare_str_t){ a, na }, b) == na); /* idempotent */
        CHECK(memcmp(a, b, na) == 0);
        for (size_t i = 0; i < na; i++) {
            if (a[i] != '%')
                continue;
            int c = hexv(a[i + 1]) << 4 | hexv(a[i + 2]);
            CHECK(!isalnum(c) && c != '-' && c != '.' && c != '_' && c != '~');
            CHECK(!islower((unsigned char)a[i + 1]) && !islower((unsigned char)a[i + 2]));
            i += 2;
        }
    }
    free(a);
    free(b);
    free(da);
    free(db);
}

static int tags[8];

static void check(const flare_route_match_t *m, int matched, const char *p, size_t n)
{
    if (matched && m->allowed != 0)
        abort();
    if (!matched)
        return;
    if (m->nparams > FLARE_ROUTER_MAX_PARAMS)
        abort();
    for (unsigned i = 0; i < m->nparams; i++) {
        flare_str_t v = m->params[i].value;
        if (v.len > 0 && (v.ptr < p || v.ptr + v.len > p + n))
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (fixed == NULL) {
        static const char *pats[] = { "/",
                                      "/plaintext",
                                      "/users/{id}",
                                      "/users/{id}/posts/{post}",
                                      "/static/{*path}",
                                      "/a/b/c",
                                      "/a/{x}/d",
                                      "/api/v1/items/{id}" };
        fixed = flare__router_new();
        for (int i = 0; i < 8; i++)
            flare__router_add(fixed, FLARE_METHOD_GET, flare_str(pats[i]), &tags[i]);
        flare__router_add(fixed, FLARE_METHOD_POST, flare_str("/users/{id}"), &tags[0]);
    }
    /* input: patterns separated by '\n', then "\n\n", then paths by '\n' */
    const char *p = (const char *)data, *end = p + size;
    const char *split = NULL;
    for (const char *q = p; q + 1 < end; q++) {
        if (q[0] == '\n' && q[1] == '\n') {
            split = q;
            break;
        }
    }
    flare_router_t *r = flare__router_new();
    if (r == NULL)
        return 0;
    const char *pe = split != NULL ? split : end;
    int k = 0;
    for (const char *s = p; s < pe;) {
        const char *nl = memchr(s, '\n', (size_t)(pe - s));
        const char *e = nl != NULL ? nl : pe;
        flare__router_add(r, (flare_method_t)(1 + k % (FLARE_METHOD_COUNT - 1)),
                          (flare_str_t){ s, (size_t)(e - s) }, &tags[k % 8]);
        k++;
        s = e + 1;
    }
    const char *ps = split != NULL ? split + 2 : p;
    for (const char *s = ps; s <= end;) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        const char *e = nl != NULL ? nl : end;
        size_t n = (size_t)(e - s);
        /* copy to an exact-size buffer so ASan sees any over-read */
        char *path = malloc(n ? n : 1);
        if (path == NULL)
            break;
        memcpy(path, s, n);
        flare_route_match_t m;
        for (int meth = FLARE_METHOD_GET; meth <= FLARE_METHOD_POST; meth++) {
            int got = flare__router_match(r, (flare_method_t)meth, (flare_str_t){ path, n }, &m);
            check(&m, got, path, n);
            got = flare__router_match(fixed, (flare_method_t)meth, (flare_str_t){ path, n }, &m);
            check(&m, got, path, n);
        }
        (void)flare__router_allowed(r, (flare_str_t){ path, n });
        check_normal_form(path, n);
        /* and matched in normal form, as the server does */
        char *norm = malloc(n ? n : 1);
        if (norm != NULL) {
            size_t nn = flare__router_normalize_path((flare_str_t){ path, n }, norm);
            int got = flare__router_match(fixed, FLARE_METHOD_GET, (flare_str_t){ norm, nn }, &m);
            check(&m, got, norm, nn);
            free(norm);
        }
        free(path);
        if (nl == NULL)
            break;
        s = e + 1;
    }
    flare__router_free(r);
    return 0;
}
