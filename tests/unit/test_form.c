/* Query strings and urlencoded forms: iteration, decoding, repeated keys,
 * invalid escapes, the pair bound, allocation only when decoding needs it;
 * flare_req_query_param on a real server gives what flare_form_get gives. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "flare/flare.h"
#include "flare/form.h"
#include "harness.h"

#define S(lit) FLARE_STR(lit)

static char arena[65536];
static size_t arena_used;
static unsigned arena_calls;

static void *arena_alloc(void *ctx, size_t n)
{
    (void)ctx;
    arena_calls++;
    if (n > sizeof(arena) - arena_used)
        return NULL;
    void *p = arena + arena_used;
    arena_used += n;
    return p;
}

static void *no_alloc(void *ctx, size_t n)
{
    (void)ctx;
    (void)n;
    return NULL;
}

static void assert_view(flare_str_t v, const char *expected)
{
    assert_non_null(v.ptr);
    if (v.len != strlen(expected) || memcmp(v.ptr, expected, v.len) != 0)
        fail_msg("got [%.*s] expected [%s]", (int)v.len, v.ptr, expected);
}

static void test_iterate_raw(void **state)
{
    (void)state;
    static const char q[] = "a=1&&b=two+words&flag&=empty&c=x=y&d=&&e=%41&";
    static const char *expected[][2] = { { "a", "1" },    { "b", "two+words" }, { "flag", "" },
                                         { "", "empty" }, { "c", "x=y" },       { "d", "" },
                                         { "e", "%41" } };
    flare_form_iter_t it;
    flare_str_t k, v;
    size_t n = 0;
    int rc;
    flare_form_iter_init(&it, S(q));
    while ((rc = flare_form_next(&it, &k, &v)) == 0) {
        assert_true(n < 7);
        assert_view(k, expected[n][0]);
        assert_view(v, expected[n][1]);
        n++;
    }
    assert_int_equal(rc, FLARE_EEND);
    assert_int_equal(n, 7);
    assert_int_equal(flare_form_next(&it, &k, &v), FLARE_EEND);

    flare_form_iter_init(&it, S(""));
    assert_int_equal(flare_form_next(&it, &k, &v), FLARE_EEND);
    flare_form_iter_init(&it, FLARE_STR_NULL);
    assert_int_equal(flare_form_next(&it, &k, &v), FLARE_EEND);
    flare_form_iter_init(&it, S("&&&"));
    assert_int_equal(flare_form_next(&it, &k, &v), FLARE_EEND);
    /* ';' is not a separator */
    flare_form_iter_init(&it, S("a=1;b=2"));
    assert_int_equal(flare_form_next(&it, &k, &v), 0);
    assert_view(v, "1;b=2");
}

static void check_decode(const char *raw, const char *expected, size_t expected_len)
{
    char out[256];
    size_t n = flare_form_decode_into(flare_str(raw), out);
    assert_int_equal(n, expected_len);
    assert_memory_equal(out, expected, n);
    assert_true(n <= strlen(raw));
}
#define DECODE(raw, lit) check_decode(raw, lit, sizeof(lit) - 1)

static void test_decode(void **state)
{
    (void)state;
    DECODE("plain", "plain");
    DECODE("a+b", "a b");
    DECODE("%20%2B+", " + ");
    DECODE("%2b%2B", "++");
    DECODE("%C3%A9t%c3%a9", "\xc3\xa9t\xc3\xa9");
    DECODE("%00x", "\0x");
    DECODE("%ff", "\xff");
    DECODE("%25", "%");
    DECODE("%2525", "%25");
    /* invalid escapes stay literal */
    DECODE("%", "%");
    DECODE("%4", "%4");
    DECODE("a%", "a%");
    DECODE("%zz", "%zz");
    DECODE("%4g1", "%4g1");
    DECODE("%%41", "%A");
    DECODE("100%", "100%");
    /* in place */
    char buf[] = "a%20b+c";
    size_t n = flare_form_decode_into((flare_str_t){ buf, 7 }, buf);
    assert_int_equal(n, 5);
    assert_memory_equal(buf, "a b c", 5);
}

static void test_decode_alloc(void **state)
{
    (void)state;
    flare_str_t out;
    static const char raw[] = "no-escapes";
    arena_calls = 0;
    assert_int_equal(flare_form_decode(S(raw), arena_alloc, NULL, &out), 0);
    assert_true(out.ptr == raw); /* no copy */
    assert_int_equal(arena_calls, 0);
    assert_int_equal(flare_form_decode(S(raw), NULL, NULL, &out), 0);
    assert_int_equal(flare_form_decode(S("a%2Fb"), arena_alloc, NULL, &out), 0);
    assert_int_equal(arena_calls, 1);
    assert_view(out, "a/b");
    assert_int_equal(out.ptr[out.len], '\0');
    assert_int_equal(flare_form_decode(S("a+b"), NULL, NULL, &out), FLARE_ENOMEM);
    assert_int_equal(flare_form_decode(S("a+b"), no_alloc, NULL, &out), FLARE_ENOMEM);
    assert_int_equal(flare_form_decode(FLARE_STR_NULL, NULL, NULL, &out), 0);
    assert_non_null(out.ptr);
    assert_int_equal(out.len, 0);
}

static void test_get(void **state)
{
    (void)state;
    flare_str_t q = S("name=J%C3%BCrg+M&tag=a&tag=b%26c&n%61me=second&empty=&flag&t%61g=d");
    flare_str_t v;
    assert_int_equal(flare_form_get(q, S("name"), arena_alloc, NULL, &v), 0);
    assert_view(v, "J\xc3\xbcrg M");
    assert_int_equal(flare_form_get(q, S("empty"), arena_alloc, NULL, &v), 0);
    assert_view(v, "");
    assert_int_equal(flare_form_get(q, S("flag"), arena_alloc, NULL, &v), 0);
    assert_view(v, "");
    assert_int_equal(flare_form_get(q, S("missing"), arena_alloc, NULL, &v), FLARE_ENOTFOUND);
    assert_int_equal(flare_form_get(q, S("nam"), arena_alloc, NULL, &v), FLARE_ENOTFOUND);
    assert_int_equal(flare_form_get(q, S("names"), arena_alloc, NULL, &v), FLARE_ENOTFOUND);
    /* keys are compared decoded */
    assert_int_equal(flare_form_get(S("a%20b=1"), S("a b"), arena_alloc, NULL, &v), 0);
    assert_view(v, "1");
    assert_int_equal(flare_form_get(S("a+b=2"), S("a b"), arena_alloc, NULL, &v), 0);
    assert_view(v, "2");
    assert_int_equal(flare_form_get(S("a%2=3"), S("a%2"), arena_alloc, NULL, &v), 0);
    assert_view(v, "3");

    flare_str_t all[2];
    size_t count;
    assert_int_equal(flare_form_get_all(q, S("tag"), arena_alloc, NULL, all, 2, &count), 0);
    assert_int_equal(count, 3);
    assert_view(all[0], "a");
    assert_view(all[1], "b&c");
    assert_int_equal(flare_form_get_all(q, S("none"), arena_alloc, NULL, all, 2, &count), 0);
    assert_int_equal(count, 0);

    /* iterate by key without allocating */
    flare_form_iter_t it;
    flare_str_t raw;
    flare_form_iter_init(&it, q);
    assert_int_equal(flare_form_find(&it, S("tag"), &raw), 0);
    assert_view(raw, "a");
    assert_int_equal(flare_form_find(&it, S("tag"), &raw), 0);
    assert_view(raw, "b%26c");
    assert_int_equal(flare_form_find(&it, S("tag"), &raw), 0);
    assert_view(raw, "d");
    assert_int_equal(flare_form_find(&it, S("tag"), &raw), FLARE_EEND);
}

static void test_next_decoded(void **state)
{
    (void)state;
    flare_form_iter_t it;
    flare_str_t k, v;
    flare_form_iter_init(&it, S("a+b=c%3Dd&x=y"));
    assert_int_equal(flare_form_next_decoded(&it, arena_alloc, NULL, &k, &v), 0);
    assert_view(k, "a b");
    assert_view(v, "c=d");
    assert_int_equal(flare_form_next_decoded(&it, arena_alloc, NULL, &k, &v), 0);
    assert_view(k, "x");
    assert_int_equal(flare_form_next_decoded(&it, arena_alloc, NULL, &k, &v), FLARE_EEND);
    flare_form_iter_init(&it, S("a+b=1"));
    assert_int_equal(flare_form_next_decoded(&it, no_alloc, NULL, &k, &v), FLARE_ENOMEM);
}

static void test_pair_bound(void **state)
{
    (void)state;
    static char q[8 * 2000];
    size_t n = 0;
    for (int i = 0; i < 1001; i++)
        n += (size_t)snprintf(q + n, sizeof(q) - n, "%sk=%d", i ? "&" : "", i);
    flare_form_iter_t it;
    flare_str_t k, v;
    int rc;
    size_t pairs = 0;
    flare_form_iter_init(&it, (flare_str_t){ q, n });
    while ((rc = flare_form_next(&it, &k, &v)) == 0)
        pairs++;
    assert_int_equal(rc, FLARE_ETOOBIG);
    assert_int_equal(pairs, FLARE_FORM_MAX_PAIRS);
    assert_int_equal(flare_form_next(&it, &k, &v), FLARE_ETOOBIG); /* stays */
    /* the last value is beyond the bound */
    size_t count;
    flare_str_t vals[1];
    assert_int_equal(
        flare_form_get_all((flare_str_t){ q, n }, S("k"), arena_alloc, NULL, vals, 1, &count),
        FLARE_ETOOBIG);
    assert_int_equal(flare_form_get((flare_str_t){ q, n }, S("zz"), arena_alloc, NULL, &v),
                     FLARE_ETOOBIG);
    assert_int_equal(flare_form_get((flare_str_t){ q, n }, S("k"), arena_alloc, NULL, &v), 0);
    /* a changed bound; 0 is unbounded */
    flare_form_iter_init(&it, (flare_str_t){ q, n });
    it.max_pairs = 2;
    assert_int_equal(flare_form_next(&it, &k, &v), 0);
    assert_int_equal(flare_form_next(&it, &k, &v), 0);
    assert_int_equal(flare_form_next(&it, &k, &v), FLARE_ETOOBIG);
    flare_form_iter_init(&it, (flare_str_t){ q, n });
    it.max_pairs = 0;
    pairs = 0;
    while ((rc = flare_form_next(&it, &k, &v)) == 0)
        pairs++;
    assert_int_equal(rc, FLARE_EEND);
    assert_int_equal(pairs, 1001);
    /* empty pieces do not count */
    static char amps[100000];
    memset(amps, '&', sizeof(amps));
    memcpy(amps + sizeof(amps) - 3, "a=1", 3);
    assert_int_equal(flare_form_get((flare_str_t){ amps, sizeof(amps) }, S("a"), NULL, NULL, &v),
                     0);
    assert_view(v, "1");
}

/* ---- flare_req_query_param is flare_form_get on the query --------------- */

static const char *const query_keys[] = { "", "a", "b", " ", "+", "A", "a b", "x" };

static void *req_alloc(void *ctx, size_t n)
{
    return flare_req_alloc(ctx, n);
}

/* For each key: 'key'=[value], or 'key'=- when absent, space-separated;
 * "MISMATCH" when flare_req_query_param and flare_form_get disagree. */
static int h_keys(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    char out[1024];
    size_t n = 0;
    for (size_t i = 0; i < sizeof(query_keys) / sizeof(query_keys[0]); i++) {
        flare_str_t a = flare_req_query_param(req, query_keys[i]), b;
        int rc = flare_form_get(flare_req_query(req), flare_str(query_keys[i]), req_alloc, req, &b);
        bool same =
            rc == 0 ? a.ptr != NULL && flare_str_eq(a, b) : rc == FLARE_ENOTFOUND && a.ptr == NULL;
        if (!same)
            return flare_res_send(res, 200, FLARE_STR("text/plain"), FLARE_STR("MISMATCH"));
        if (a.ptr == NULL)
            n +=
                (size_t)snprintf(out + n, sizeof(out) - n, "%s'%s'=-", i ? " " : "", query_keys[i]);
        else
            n += (size_t)snprintf(out + n, sizeof(out) - n, "%s'%s'=[%.*s]", i ? " " : "",
                                  query_keys[i], (int)a.len, a.ptr);
    }
    return flare_res_send(res, 200, FLARE_STR("text/plain"), (flare_str_t){ out, n });
}

static void query_case(const harness_t *h, const char *query, const char *want)
{
    char req[512];
    snprintf(req, sizeof(req), "GET /q?%s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", query);
    char *r = harness_roundtrip(h, req);
    const char *body = strstr(r, "\r\n\r\n");
    if (strncmp(r, "HTTP/1.1 200 ", 13) != 0 || body == NULL || strcmp(body + 4, want) != 0)
        fail_msg("?%s: got\n%s\nwant body [%s]", query, r, want);
    free(r);
}

static void test_req_query_param(void **state)
{
    (void)state;
    flare_config_t cfg;
    flare_config_init(&cfg);
    cfg.workers = 1;
    harness_t h = { .app = flare_app_new(&cfg) };
    assert_non_null(h.app);
    assert_int_equal(flare_get(h.app, "/q", h_keys, NULL), 0);
    assert_int_equal(harness_start(&h), 0);

    /* an empty key is a key (the request's own parser used to skip it) */
    query_case(&h, "=x", "''=[x] 'a'=- 'b'=- ' '=- '+'=- 'A'=- 'a b'=- 'x'=-");
    query_case(&h, "a=1&a=2&=&=y", "''=[] 'a'=[1] 'b'=- ' '=- '+'=- 'A'=- 'a b'=- 'x'=-");
    /* empty pieces are skipped; no '=' is an empty value */
    query_case(&h, "a&&b", "''=- 'a'=[] 'b'=[] ' '=- '+'=- 'A'=- 'a b'=- 'x'=-");
    query_case(&h, "&&a=&", "''=- 'a'=[] 'b'=- ' '=- '+'=- 'A'=- 'a b'=- 'x'=-");
    query_case(&h, "a", "''=- 'a'=[] 'b'=- ' '=- '+'=- 'A'=- 'a b'=- 'x'=-");
    /* '+' is a space in keys and values; escapes in keys; the first of repeated keys */
    query_case(&h, "+", "''=- 'a'=- 'b'=- ' '=[] '+'=- 'A'=- 'a b'=- 'x'=-");
    query_case(&h, "%41=1&a%20b=2&%2B=3&a+b=4&x=a+b%2B",
               "''=- 'a'=- 'b'=- ' '=- '+'=[3] 'A'=[1] 'a b'=[2] 'x'=[a b+]");
    /* invalid escapes stay literal */
    query_case(&h, "x=%zz+%&b=%4", "''=- 'a'=- 'b'=[%4] ' '=- '+'=- 'A'=- 'a b'=- 'x'=[%zz %]");
    query_case(&h, "", "''=- 'a'=- 'b'=- ' '=- '+'=- 'A'=- 'a b'=- 'x'=-");

    assert_int_equal(harness_stop(&h), 0);
    flare_app_free(h.app);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_iterate_raw),     cmocka_unit_test(test_decode),
        cmocka_unit_test(test_decode_alloc),    cmocka_unit_test(test_get),
        cmocka_unit_test(test_next_decoded),    cmocka_unit_test(test_pair_bound),
        cmocka_unit_test(test_req_query_param),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
