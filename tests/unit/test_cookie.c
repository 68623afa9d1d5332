/* Cookies: Cookie header parsing, Set-Cookie building (defaults, every
 * attribute, forced Secure, injection attempts), signed cookies. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "flare/cookie.h"

#define S(lit) FLARE_STR(lit)

static void assert_view(flare_str_t v, const char *expected)
{
    assert_non_null(v.ptr);
    if (v.len != strlen(expected) || memcmp(v.ptr, expected, v.len) != 0)
        fail_msg("got [%.*s] expected [%s]", (int)v.len, v.ptr, expected);
}

/* ---- parsing ---------------------------------------------------------------- */

static void test_iterate(void **state)
{
    (void)state;
    static const char hdr[] =
        "a=1; b=2;c=3 ; d = 4 ;e=\"q v\";f=;=x;noeq;g=h=i;  ;\th=\"\";i=\";j=x y";
    static const char *expected[][2] = { { "a", "1" },   { "b", "2" },   { "c", "3" },
                                         { "d", "4" },   { "e", "q v" }, { "f", "" },
                                         { "g", "h=i" }, { "h", "" },    { "i", "\"" },
                                         { "j", "x y" } };
    flare_cookie_iter_t it;
    flare_str_t n, v;
    size_t k = 0;
    flare_cookie_iter_init(&it, S(hdr));
    while (flare_cookie_next(&it, &n, &v) == 0) {
        assert_true(k < sizeof(expected) / sizeof(expected[0]));
        assert_view(n, expected[k][0]);
        assert_view(v, expected[k][1]);
        assert_true(v.ptr >= hdr && v.ptr + v.len <= hdr + sizeof(hdr) - 1);
        k++;
    }
    assert_int_equal(k, sizeof(expected) / sizeof(expected[0]));
    assert_int_equal(flare_cookie_next(&it, &n, &v), FLARE_EEND);

    flare_cookie_iter_init(&it, S(""));
    assert_int_equal(flare_cookie_next(&it, &n, &v), FLARE_EEND);
    flare_cookie_iter_init(&it, FLARE_STR_NULL);
    assert_int_equal(flare_cookie_next(&it, &n, &v), FLARE_EEND);
    flare_cookie_iter_init(&it, S(";;; ; noeq"));
    assert_int_equal(flare_cookie_next(&it, &n, &v), FLARE_EEND);
}

static void test_get(void **state)
{
    (void)state;
    flare_str_t h = S("sid=abc; theme=dark; sid=second; empty=; SID=upper");
    assert_view(flare_cookie_get(h, S("sid")), "abc");
    assert_view(flare_cookie_get(h, S("theme")), "dark");
    assert_view(flare_cookie_get(h, S("SID")), "upper");
    flare_str_t e = flare_cookie_get(h, S("empty"));
    assert_non_null(e.ptr);
    assert_int_equal(e.len, 0);
    assert_null(flare_cookie_get(h, S("missing")).ptr);
    assert_null(flare_cookie_get(h, S("si")).ptr);
    assert_null(flare_cookie_get(FLARE_STR_NULL, S("sid")).ptr);
}

/* ---- Set-Cookie ------------------------------------------------------------- */

static char out[FLARE_COOKIE_FORMAT_MAX];

static int format(const flare_cookie_t *c)
{
    size_t len = 12345;
    int rc = flare_cookie_format(c, out, sizeof(out) - 1, &len);
    if (rc == 0)
        out[len] = '\0';
    else
        assert_int_equal(len, 0);
    return rc;
}

static void expect_format(const flare_cookie_t *c, const char *expected)
{
    assert_int_equal(format(c), 0);
    assert_string_equal(out, expected);
}

static void test_defaults(void **state)
{
    (void)state;
    flare_cookie_t c;
    flare_cookie_init(&c, S("sid"), S("abc123"));
    expect_format(&c, "sid=abc123; Path=/; HttpOnly; SameSite=Lax");
    flare_cookie_init(&c, S("e"), S(""));
    expect_format(&c, "e=; Path=/; HttpOnly; SameSite=Lax");
    flare_cookie_init(&c, S("q"), S("\"quoted\""));
    expect_format(&c, "q=\"quoted\"; Path=/; HttpOnly; SameSite=Lax");
    flare_cookie_init(&c, S("q"), S("\"\""));
    expect_format(&c, "q=\"\"; Path=/; HttpOnly; SameSite=Lax");
}

static void test_all_attributes(void **state)
{
    (void)state;
    flare_cookie_t c;
    flare_cookie_init(&c, S("sid"), S("v"));
    c.path = S("/app");
    c.domain = S("example.com");
    c.max_age = 3600;
    c.expires = 784111777;
    c.secure = true;
    c.same_site = FLARE_SAME_SITE_STRICT;
    c.partitioned = true;
    expect_format(&c, "sid=v; Path=/app; Domain=example.com; Max-Age=3600; "
                      "Expires=Sun, 06 Nov 1994 08:49:37 GMT; Secure; HttpOnly; "
                      "SameSite=Strict; Partitioned");
    /* deleting */
    flare_cookie_init(&c, S("sid"), S(""));
    c.max_age = 0;
    c.expires = 1;
    expect_format(&c, "sid=; Path=/; Max-Age=0; Expires=Thu, 01 Jan 1970 00:00:01 GMT; HttpOnly; "
                      "SameSite=Lax");
    /* opting out of defaults */
    flare_cookie_init(&c, S("js"), S("1"));
    c.http_only = false;
    c.path = FLARE_STR_NULL;
    expect_format(&c, "js=1; SameSite=Lax");
    /* the last representable date */
    flare_cookie_init(&c, S("x"), S("1"));
    c.expires = (time_t)253402300799;
    expect_format(&c, "x=1; Path=/; Expires=Fri, 31 Dec 9999 23:59:59 GMT; HttpOnly; SameSite=Lax");
}

static void test_forced_secure(void **state)
{
    (void)state;
    flare_cookie_t c;
    flare_cookie_init(&c, S("a"), S("1"));
    c.same_site = FLARE_SAME_SITE_NONE;
    expect_format(&c, "a=1; Path=/; Secure; HttpOnly; SameSite=None");
    flare_cookie_init(&c, S("a"), S("1"));
    c.partitioned = true;
    expect_format(&c, "a=1; Path=/; Secure; HttpOnly; SameSite=Lax; Partitioned");
    flare_cookie_init(&c, S("__Secure-a"), S("1"));
    expect_format(&c, "__Secure-a=1; Path=/; Secure; HttpOnly; SameSite=Lax");
    flare_cookie_init(&c, S("__secure-a"), S("1"));
    expect_format(&c, "__secure-a=1; Path=/; Secure; HttpOnly; SameSite=Lax");
    flare_cookie_init(&c, S("__Host-a"), S("1"));
    expect_format(&c, "__Host-a=1; Path=/; Secure; HttpOnly; SameSite=Lax");
    /* __Host- forbids Domain and any Path but / */
    c.domain = S("example.com");
    assert_int_equal(format(&c), FLARE_EINVAL);
    c.domain = FLARE_STR_NULL;
    c.path = S("/app");
    assert_int_equal(format(&c), FLARE_EINVAL);
    c.path = FLARE_STR_NULL;
    assert_int_equal(format(&c), FLARE_EINVAL);
}

static void test_injection(void **state)
{
    (void)state;
    static const char *bad_names[] = { "",    "a b", "a;b", "a=b",   "a\r\nSet-Cookie: x",
                                       "a,b", "a\"", "(a)", "a\x7f", "a\xc3\xa9",
                                       "a/b", "a:b", "a\tb" };
    static const char *bad_values[] = { "a b",
                                        "a;b",
                                        "a,b",
                                        "a\\b",
                                        "a\"b",
                                        "\"ab",
                                        "ab\"",
                                        "\"",
                                        "a\r\nb",
                                        "a\x7f",
                                        "\xc3\xa9",
                                        "a\tb",
                                        "x; Domain=evil.com" };
    static const char *bad_paths[] = { "",      "app",   "/a;b",     "/a\r\nX: y",
                                       "/\x7f", "/\x01", "/\xc3\xa9" };
    static const char *bad_domains[] = { "a b",    "a;b",           "ex/ample.com", "a_b.com",
                                         "a\r\nb", "x.com; Secure", "\xc3\xa9.com", "a:80" };
    flare_cookie_t c;
    for (size_t i = 0; i < sizeof(bad_names) / sizeof(bad_names[0]); i++) {
        flare_cookie_init(&c, flare_str(bad_names[i]), S("v"));
        if (format(&c) != FLARE_EINVAL)
            fail_msg("name [%s] accepted", bad_names[i]);
    }
    for (size_t i = 0; i < sizeof(bad_values) / sizeof(bad_values[0]); i++) {
        flare_cookie_init(&c, S("n"), flare_str(bad_values[i]));
        if (format(&c) != FLARE_EINVAL)
            fail_msg("value [%s] accepted", bad_values[i]);
    }
    for (size_t i = 0; i < sizeof(bad_paths) / sizeof(bad_paths[0]); i++) {
        flare_cookie_init(&c, S("n"), S("v"));
        c.path = flare_str(bad_paths[i]);
        if (format(&c) != FLARE_EINVAL)
            fail_msg("path [%s] accepted", bad_paths[i]);
    }
    for (size_t i = 0; i < sizeof(bad_domains) / sizeof(bad_domains[0]); i++) {
        flare_cookie_init(&c, S("n"), S("v"));
        c.domain = flare_str(bad_domains[i]);
        if (format(&c) != FLARE_EINVAL)
            fail_msg("domain [%s] accepted", bad_domains[i]);
    }
    /* NUL inside a view */
    flare_cookie_init(&c, S("n"), (flare_str_t){ "a\0b", 3 });
    assert_int_equal(format(&c), FLARE_EINVAL);
    flare_cookie_init(&c, (flare_str_t){ "n\0", 2 }, S("v"));
    assert_int_equal(format(&c), FLARE_EINVAL);
    /* NULL views */
    flare_cookie_init(&c, FLARE_STR_NULL, S("v"));
    assert_int_equal(format(&c), FLARE_EINVAL);
    flare_cookie_init(&c, S("n"), (flare_str_t){ NULL, 3 });
    assert_int_equal(format(&c), FLARE_EINVAL);
    /* dates outside IMF-fixdate */
    flare_cookie_init(&c, S("n"), S("v"));
    c.expires = -1;
    assert_int_equal(format(&c), FLARE_EINVAL);
    c.expires = (time_t)253402300800;
    assert_int_equal(format(&c), FLARE_EINVAL);
    /* an unknown SameSite value */
    flare_cookie_init(&c, S("n"), S("v"));
    c.same_site = (flare_same_site_t)7;
    assert_int_equal(format(&c), FLARE_EINVAL);
    /* the token characters are all fine */
    flare_cookie_init(&c, S("!#$%&'*+-.^_`|~09azAZ"), S("!#$%&'()*+-./:<=>?@[]^_`{|}~"));
    assert_int_equal(format(&c), 0);
}

static void test_sizes(void **state)
{
    (void)state;
    static char big[FLARE_COOKIE_MAX_PAIR + 2];
    flare_cookie_t c;
    memset(big, 'v', sizeof(big));
    flare_cookie_init(&c, S("n"), (flare_str_t){ big, FLARE_COOKIE_MAX_PAIR - 1 });
    assert_int_equal(format(&c), 0);
    flare_cookie_init(&c, S("n"), (flare_str_t){ big, FLARE_COOKIE_MAX_PAIR });
    assert_int_equal(format(&c), FLARE_ETOOBIG);
    static char longpath[FLARE_COOKIE_MAX_ATTR + 2];
    memset(longpath, 'p', sizeof(longpath));
    longpath[0] = '/';
    flare_cookie_init(&c, S("n"), S("v"));
    c.path = (flare_str_t){ longpath, FLARE_COOKIE_MAX_ATTR + 1 };
    assert_int_equal(format(&c), FLARE_EINVAL);
    /* the worst case fits FLARE_COOKIE_FORMAT_MAX */
    static char dom[254];
    memset(dom, 'd', sizeof(dom));
    flare_cookie_init(&c, S("n"), (flare_str_t){ big, FLARE_COOKIE_MAX_PAIR - 1 });
    c.path = (flare_str_t){ longpath, FLARE_COOKIE_MAX_ATTR };
    c.domain = (flare_str_t){ dom, 253 };
    c.max_age = INT64_MAX;
    c.expires = 1;
    c.partitioned = true;
    c.same_site = FLARE_SAME_SITE_STRICT;
    assert_int_equal(format(&c), 0);
    c.domain = (flare_str_t){ dom, 254 };
    assert_int_equal(format(&c), FLARE_EINVAL);
    /* buffer too small, and exactly big enough */
    flare_cookie_init(&c, S("sid"), S("abc123"));
    size_t need = strlen("sid=abc123; Path=/; HttpOnly; SameSite=Lax");
    char small[64];
    size_t len;
    assert_int_equal(flare_cookie_format(&c, small, need - 1, &len), FLARE_ETOOBIG);
    assert_int_equal(flare_cookie_format(&c, small, need, &len), 0);
    assert_int_equal(len, need);
}

/* ---- signed cookies --------------------------------------------------------- */

#define KEY  "0123456789abcdef0123456789abcdef"
#define KEY2 "fedcba9876543210fedcba9876543210"

static void test_sign_known_vector(void **state)
{
    (void)state;
    char buf[128];
    size_t len;
    /* printf 'sid=user42' | openssl dgst -sha256 -hmac KEY -binary | base64url */
    assert_int_equal(flare_cookie_sign(S("sid"), S("user42"), S(KEY), buf, sizeof(buf), &len), 0);
    assert_int_equal(len, 6 + FLARE_COOKIE_SIG_LEN);
    assert_memory_equal(buf, "user42.3kfB3x9nptFn3dF1zDi6KgHyxpK9AWzTv_XmCZ_0cuE", len);
    assert_int_equal(flare_cookie_sign(S("sid"), S(""), S(KEY), buf, sizeof(buf), &len), 0);
    assert_memory_equal(buf, ".a1aZoh0TxoozpakwWXeRg3KR4i0BYDVVi7i7FEpfXBY", len);
}

static void test_sign_verify(void **state)
{
    (void)state;
    char buf[128];
    size_t len;
    const flare_str_t keys[] = { S(KEY2), S(KEY) };
    flare_str_t v;
    size_t idx = 99;
    assert_int_equal(flare_cookie_sign(S("sid"), S("a.b.c"), S(KEY), buf, sizeof(buf), &len), 0);
    flare_str_t sv = { buf, len };
    /* the signed value is a valid cookie value */
    flare_cookie_t c;
    flare_cookie_init(&c, S("sid"), sv);
    assert_int_equal(format(&c), 0);
    /* verifies with the old key in second position: rotation */
    assert_int_equal(flare_cookie_verify(S("sid"), sv, keys, 2, &v, &idx), 0);
    assert_view(v, "a.b.c");
    assert_true(v.ptr == buf);
    assert_int_equal(idx, 1);
    assert_int_equal(flare_cookie_verify(S("sid"), sv, &keys[1], 1, &v, NULL), 0);
    assert_int_equal(flare_cookie_verify(S("sid"), sv, keys, 1, &v, &idx), FLARE_EINVAL);
    /* bound to the cookie name */
    assert_int_equal(flare_cookie_verify(S("other"), sv, keys, 2, &v, &idx), FLARE_EINVAL);
    /* through a Cookie header */
    char hdr[256];
    snprintf(hdr, sizeof(hdr), "theme=dark; sid=%.*s", (int)len, buf);
    flare_str_t got = flare_cookie_get(flare_str(hdr), S("sid"));
    assert_int_equal(flare_cookie_verify(S("sid"), got, keys, 2, &v, &idx), 0);
    assert_view(v, "a.b.c");
}

static void test_tampered(void **state)
{
    (void)state;
    char buf[128], t[128];
    size_t len;
    const flare_str_t keys[] = { S(KEY) };
    flare_str_t v;
    assert_int_equal(flare_cookie_sign(S("sid"), S("user42"), S(KEY), buf, sizeof(buf), &len), 0);
    /* every single-byte change is caught */
    for (size_t i = 0; i < len; i++) {
        memcpy(t, buf, len);
        t[i] = t[i] == 'A' ? 'B' : 'A';
        assert_int_equal(flare_cookie_verify(S("sid"), (flare_str_t){ t, len }, keys, 1, &v, NULL),
                         FLARE_EINVAL);
    }
    /* truncated, extended, no separator, empty, only a signature */
    assert_int_equal(
        flare_cookie_verify(S("sid"), (flare_str_t){ buf, len - 1 }, keys, 1, &v, NULL),
        FLARE_EINVAL);
    memcpy(t, buf, len);
    t[len] = 'x';
    assert_int_equal(flare_cookie_verify(S("sid"), (flare_str_t){ t, len + 1 }, keys, 1, &v, NULL),
                     FLARE_EINVAL);
    assert_int_equal(flare_cookie_verify(S("sid"), S("user42"), keys, 1, &v, NULL), FLARE_EINVAL);
    assert_int_equal(flare_cookie_verify(S("sid"), S(""), keys, 1, &v, NULL), FLARE_EINVAL);
    assert_int_equal(
        flare_cookie_verify(S("sid"), (flare_str_t){ buf + 5, len - 5 }, keys, 1, &v, NULL),
        FLARE_EINVAL);
    /* a value swapped onto another signature */
    char other[128];
    size_t olen;
    assert_int_equal(flare_cookie_sign(S("sid"), S("user43"), S(KEY), other, sizeof(other), &olen),
                     0);
    memcpy(t, "user43", 6);
    memcpy(t + 6, buf + 6, len - 6);
    assert_int_equal(flare_cookie_verify(S("sid"), (flare_str_t){ t, len }, keys, 1, &v, NULL),
                     FLARE_EINVAL);
    /* no keys, short keys are skipped */
    assert_int_equal(flare_cookie_verify(S("sid"), (flare_str_t){ buf, len }, keys, 0, &v, NULL),
                     FLARE_EINVAL);
    const flare_str_t short_keys[] = { S("short"), S(KEY) };
    assert_int_equal(
        flare_cookie_verify(S("sid"), (flare_str_t){ buf, len }, short_keys, 2, &v, NULL), 0);
}

static void test_sign_errors(void **state)
{
    (void)state;
    char buf[128];
    size_t len;
    assert_int_equal(flare_cookie_sign(S("sid"), S("v"), S("too short"), buf, sizeof(buf), &len),
                     FLARE_EINVAL);
    assert_int_equal(flare_cookie_sign(S("s d"), S("v"), S(KEY), buf, sizeof(buf), &len),
                     FLARE_EINVAL);
    assert_int_equal(flare_cookie_sign(S("sid"), S("a b"), S(KEY), buf, sizeof(buf), &len),
                     FLARE_EINVAL);
    assert_int_equal(flare_cookie_sign(S("sid"), S("\"q\""), S(KEY), buf, sizeof(buf), &len),
                     FLARE_EINVAL);
    assert_int_equal(
        flare_cookie_sign(S("sid"), S("v"), S(KEY), buf, 1 + FLARE_COOKIE_SIG_LEN - 1, &len),
        FLARE_ETOOBIG);
    assert_int_equal(
        flare_cookie_sign(S("sid"), S("v"), S(KEY), buf, 1 + FLARE_COOKIE_SIG_LEN, &len), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_iterate),       cmocka_unit_test(test_get),
        cmocka_unit_test(test_defaults),      cmocka_unit_test(test_all_attributes),
        cmocka_unit_test(test_forced_secure), cmocka_unit_test(test_injection),
        cmocka_unit_test(test_sizes),         cmocka_unit_test(test_sign_known_vector),
        cmocka_unit_test(test_sign_verify),   cmocka_unit_test(test_tampered),
        cmocka_unit_test(test_sign_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
