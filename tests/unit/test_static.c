/* Static files, the pure parts: request path decoding and checks, Range,
 * entity-tag lists, Accept-Encoding, HTTP-dates, MIME types by extension. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include <sys/stat.h>
#include <unistd.h>

#include "core/clock.h"
#include "harness.h"
#include "flare/static.h"
#include "web/static_parse.h"

#define S(lit) FLARE_STR(lit)

static void assert_view(flare_str_t v, const char *expected)
{
    assert_non_null(v.ptr);
    if (v.len != strlen(expected) || memcmp(v.ptr, expected, v.len) != 0)
        fail_msg("got [%.*s] expected [%s]", (int)v.len, v.ptr, expected);
}

/* ---- flare__static_path ------------------------------------------------------ */

/* Runs the decoder on an exact-size heap copy of raw (n bytes) into an
 * output of exactly n + 1 bytes, as documented. */
static int run_path(const char *raw, size_t n, bool dotfiles, char **out, size_t *len, bool *dir)
{
    char *in = malloc(n != 0 ? n : 1);
    assert_non_null(in);
    memcpy(in, raw, n);
    *out = malloc(n + 1);
    assert_non_null(*out);
    *len = 12345;
    int rc = flare__static_path((flare_str_t){ in, n }, *out, len, dir, dotfiles);
    free(in);
    return rc;
}

static void path_ok(const char *raw, size_t n, bool dotfiles, const char *expected,
                    bool expected_dir)
{
    char *out;
    size_t len;
    bool dir = !expected_dir;
    int rc = run_path(raw, n, dotfiles, &out, &len, &dir);
    if (rc != 0)
        fail_msg("[%.*s] dotfiles=%d: got %d, expected 0", (int)n, raw, dotfiles, rc);
    if (len != strlen(expected) || memcmp(out, expected, len) != 0)
        fail_msg("[%.*s]: got [%.*s] expected [%s]", (int)n, raw, (int)len, out, expected);
    assert_int_equal(out[len], '\0');
    assert_true(len <= n);
    if (dir != expected_dir)
        fail_msg("[%.*s]: dir %d, expected %d", (int)n, raw, dir, expected_dir);
    free(out);
}

static void path_err(const char *raw, size_t n, bool dotfiles, int expected)
{
    char *out;
    size_t len;
    bool dir;
    int rc = run_path(raw, n, dotfiles, &out, &len, &dir);
    if (rc != expected)
        fail_msg("[%.*s] dotfiles=%d: got %d, expected %d", (int)n, raw, dotfiles, rc, expected);
    free(out);
}

#define PATH_OK(lit, dot, exp)     path_ok(lit, sizeof(lit) - 1, dot, exp, false)
#define PATH_OK_DIR(lit, dot, exp) path_ok(lit, sizeof(lit) - 1, dot, exp, true)
#define PATH_ERR(lit, dot, rc)     path_err(lit, sizeof(lit) - 1, dot, rc)

static void test_path_plain(void **state)
{
    (void)state;
    PATH_OK("", false, "");
    PATH_OK("index.html", false, "index.html");
    PATH_OK("a/b.txt", false, "a/b.txt");
    PATH_OK("a/b/c/d.e.f", false, "a/b/c/d.e.f");
    PATH_OK("a b+c~d", false, "a b+c~d"); /* '+' is not a space in a path */
    PATH_OK("a\\b", false, "a\\b");       /* backslash is an ordinary byte */

    /* a NULL view of length 0 is the root */
    char out[1] = { 'x' };
    size_t len = 99;
    bool dir = true;
    assert_int_equal(flare__static_path(FLARE_STR_NULL, out, &len, &dir, false), 0);
    assert_int_equal(len, 0);
    assert_int_equal(out[0], '\0');
    assert_false(dir);
}

static void test_path_decode(void **state)
{
    (void)state;
    PATH_OK("a%20b", false, "a b");
    PATH_OK("%41%62c", false, "Abc");
    PATH_OK("caf%C3%a9.txt", false, "caf\xc3\xa9.txt");
    PATH_OK("%ff%FE", false, "\xff\xfe");
    PATH_OK("%25", false, "%");
    PATH_OK("%2541", false, "%41"); /* decoded once only */
    PATH_OK("100%25/x", false, "100%/x");
    PATH_OK("%3F%23", false, "?#");
    /* %2F is decoded before the checks: it separates segments */
    PATH_OK("a%2Fb", false, "a/b");
    PATH_OK("a%2fb%2F", false, "a/b"); /* raw does not end with '/' */
    PATH_OK("%2F%2Fa", false, "a");
    PATH_OK("a%5Cb", false, "a\\b");
}

static void test_path_bad_escapes(void **state)
{
    (void)state;
    PATH_ERR("%", false, 400);
    PATH_ERR("%4", false, 400);
    PATH_ERR("%zz", false, 400);
    PATH_ERR("%4g", false, 400);
    PATH_ERR("%g4", false, 400);
    PATH_ERR("a%", false, 400);
    PATH_ERR("a%4", false, 400);
    PATH_ERR("a%4/", false, 400);
    PATH_ERR("a/b%", false, 400);
    PATH_ERR("%%41", false, 400);
    PATH_ERR("%+1", false, 400);
    PATH_ERR("ok/%", true, 400);
    PATH_ERR("%", true, 400);
}

static void test_path_nul(void **state)
{
    (void)state;
    PATH_ERR("%00", false, 400);
    PATH_ERR("a%00b", false, 400);
    PATH_ERR("a/%00", true, 400);
    PATH_ERR("a\0b", false, 400);
    PATH_ERR("\0", true, 400);
    PATH_ERR("x.txt\0.png", false, 400);
}

static void test_path_dotdot(void **state)
{
    (void)state;
    PATH_ERR("..", false, 400);
    PATH_ERR("..", true, 400);
    PATH_ERR("../", false, 400);
    PATH_ERR("../etc/passwd", false, 400);
    PATH_ERR("a/../b", false, 400);
    PATH_ERR("a/..", false, 400);
    PATH_ERR("a/b/../../..", true, 400);
    /* encoded */
    PATH_ERR("%2e%2e", false, 400);
    PATH_ERR("%2E%2e/x", false, 400);
    PATH_ERR("%2e%2e/x", true, 400);
    PATH_ERR(".%2e", false, 400);
    PATH_ERR("%2e.", true, 400);
    PATH_ERR("..%2f", false, 400);
    PATH_ERR("..%2F", true, 400);
    PATH_ERR("a%2f..%2fb", true, 400);
    PATH_ERR("a/.%2E/b", true, 400);
    /* not ".." segments */
    PATH_OK("a..b/c..", false, "a..b/c..");
    PATH_OK("..%2e", true, "...");
    PATH_OK("...", true, "...");
    PATH_ERR("...", false, 404);
    PATH_ERR("..\\x", false, 404);
    PATH_OK("..\\x", true, "..\\x");
}

static void test_path_dot_and_empty_segments(void **state)
{
    (void)state;
    PATH_OK(".", false, "");
    PATH_OK("%2e", false, "");
    PATH_OK("./a/.", false, "a");
    PATH_OK("a/./b", false, "a/b");
    PATH_OK("a/%2E/b", false, "a/b");
    PATH_OK("/a", false, "a");
    PATH_OK("//a//b", false, "a/b");
    PATH_OK_DIR("/", false, "");
    PATH_OK_DIR("//", false, "");
    PATH_OK_DIR("./", false, "");
    PATH_OK_DIR("a//b/./c/", false, "a/b/c");
    PATH_OK_DIR("a/./", true, "a");
}

static void test_path_dotfiles(void **state)
{
    (void)state;
    PATH_ERR(".git/config", false, 404);
    PATH_OK(".git/config", true, ".git/config");
    PATH_ERR("a/.env", false, 404);
    PATH_OK("a/.env", true, "a/.env");
    PATH_ERR("%2egit", false, 404);
    PATH_OK("%2egit", true, ".git");
    PATH_ERR(".well-known/acme", false, 404);
    PATH_OK(".well-known/acme", true, ".well-known/acme");
    PATH_ERR(".htaccess", false, 404);
    PATH_OK_DIR("a/.b/c/", true, "a/.b/c");
    PATH_OK("a.b/c.d", false, "a.b/c.d"); /* a dot inside a name is fine */
    /* the first failing segment decides */
    PATH_ERR(".git/..", false, 404);
    PATH_ERR(".git/..", true, 400);
    PATH_ERR("../.git", false, 400);
    PATH_ERR(".git/%zz", false, 404);
    PATH_ERR("%zz/.git", false, 400);
}

static void test_path_trailing_slash(void **state)
{
    (void)state;
    PATH_OK_DIR("a/", false, "a");
    PATH_OK_DIR("a/b/", false, "a/b");
    PATH_OK_DIR("a/b//", false, "a/b");
    PATH_OK("a", false, "a");
    PATH_OK("a/%2F", false, "a"); /* the slash is encoded: not a raw trailing '/' */

    /* *dir is set even when the path is refused */
    char *out;
    size_t len;
    bool dir = false;
    assert_int_equal(run_path("../", 3, false, &out, &len, &dir), 400);
    assert_true(dir);
    free(out);
}

/* ---- flare__range_parse ----------------------------------------------------- */

static void range_check(const char *v, size_t n, uint64_t size, int expected, uint64_t efirst,
                        uint64_t elen)
{
    char *in = malloc(n != 0 ? n : 1);
    assert_non_null(in);
    memcpy(in, v, n);
    uint64_t first = 0xdead, len = 0xbeef;
    int rc = flare__range_parse((flare_str_t){ in, n }, size, &first, &len);
    if (rc != expected)
        fail_msg("[%.*s] size %llu: got %d expected %d", (int)n, v, (unsigned long long)size, rc,
                 expected);
    if (expected == FLARE__RANGE_ONE) {
        if (first != efirst || len != elen)
            fail_msg("[%.*s] size %llu: got %llu+%llu expected %llu+%llu", (int)n, v,
                     (unsigned long long)size, (unsigned long long)first, (unsigned long long)len,
                     (unsigned long long)efirst, (unsigned long long)elen);
    } else {
        /* untouched */
        assert_int_equal(first, 0xdead);
        assert_int_equal(len, 0xbeef);
    }
    free(in);
}

#define RANGE_ONE(lit, size, f, l) range_check(lit, sizeof(lit) - 1, size, FLARE__RANGE_ONE, f, l)
#define RANGE_NONE(lit, size)      range_check(lit, sizeof(lit) - 1, size, FLARE__RANGE_NONE, 0, 0)
#define RANGE_UNSAT(lit, size)     range_check(lit, sizeof(lit) - 1, size, FLARE__RANGE_UNSAT, 0, 0)

static void test_range_rfc_examples(void **state)
{
    (void)state;
    /* RFC 9110 section 14.1.2, a 10000-byte representation */
    RANGE_ONE("bytes=0-499", 10000, 0, 500);
    RANGE_ONE("bytes=500-999", 10000, 500, 500);
    RANGE_ONE("bytes=-500", 10000, 9500, 500);
    RANGE_ONE("bytes=9500-", 10000, 9500, 500);
    RANGE_ONE("bytes=0-", 10000, 0, 10000);
    RANGE_ONE("bytes=9999-9999", 10000, 9999, 1);
    RANGE_ONE("bytes=-1", 10000, 9999, 1);
    RANGE_ONE("bytes=0-0", 1, 0, 1);
    RANGE_ONE("bytes=000-001", 10, 0, 2);
    /* several ranges: the whole representation */
    RANGE_NONE("bytes=0-0,-1", 10000);
    RANGE_NONE("bytes= 0-999, 4500-5499, -1000", 10000);
    RANGE_NONE("bytes=500-600,601-999", 10000);
    RANGE_NONE("bytes=500-700,601-999", 10000);
    RANGE_NONE("bytes=0-1,2-3", 10);
    RANGE_NONE("bytes=0-1,20-30", 10); /* one satisfiable of two */
}

static void test_range_clamping(void **state)
{
    (void)state;
    RANGE_ONE("bytes=-20", 10, 0, 10); /* suffix longer than the file */
    RANGE_ONE("bytes=-10", 10, 0, 10);
    RANGE_ONE("bytes=-9", 10, 1, 9);
    RANGE_ONE("bytes=5-100", 10, 5, 5); /* last-pos beyond the end */
    RANGE_ONE("bytes=0-99", 10, 0, 10);
    RANGE_ONE("bytes=9-", 10, 9, 1);
    RANGE_ONE("bytes=9-9", 10, 9, 1);
    RANGE_UNSAT("bytes=10-", 10); /* first-pos at or beyond the end */
    RANGE_UNSAT("bytes=10-20", 10);
    RANGE_UNSAT("bytes=11-11", 10);
    RANGE_UNSAT("bytes=-0", 10);
    RANGE_UNSAT("bytes=-0", 1);
    RANGE_UNSAT("bytes=20-30,40-", 10); /* several, none satisfiable */
    RANGE_UNSAT("bytes=-0,-0", 10);
    RANGE_UNSAT("bytes=10-, -0 ,99-100", 10);
}

static void test_range_ignored(void **state)
{
    (void)state;
    RANGE_NONE("bytes=5-2", 10); /* invalid: last < first */
    RANGE_NONE("bytes=5-2,0-1", 10);
    RANGE_NONE("bytes=0-1,5-2", 10);
    RANGE_NONE("bytes=20-30,9-2", 10);
    RANGE_NONE("items=0-1", 10);
    RANGE_NONE("byte=0-1", 10);
    RANGE_NONE("bytes 0-1", 10);
    RANGE_NONE("bytes:0-1", 10);
    RANGE_NONE("bytesx=0-1", 10);
    RANGE_NONE(" bytes=0-1", 10);
    RANGE_NONE("", 10);
    RANGE_NONE("bytes", 10);
    RANGE_NONE("bytes=", 10);
    RANGE_NONE("bytes=,", 10);
    RANGE_NONE("bytes= , ,", 10);
    RANGE_NONE("bytes=-", 10);
    RANGE_NONE("bytes=--1", 10);
    RANGE_NONE("bytes=1", 10);
    RANGE_NONE("bytes=a-b", 10);
    RANGE_NONE("bytes=1-b", 10);
    RANGE_NONE("bytes=1-2-3", 10);
    RANGE_NONE("bytes=0-1;", 10);
    RANGE_NONE("bytes=0 -1", 10);
    RANGE_NONE("bytes=0- 1", 10);
    RANGE_NONE("bytes=- 1", 10);
    RANGE_NONE("bytes=+1-2", 10);
    RANGE_NONE("bytes=0x1-2", 10);
    RANGE_NONE("bytes=0-1\r\n", 10);
    /* an empty representation: Range does not apply */
    RANGE_NONE("bytes=0-1", 0);
    RANGE_NONE("bytes=-5", 0);
    RANGE_NONE("bytes=0-", 0);
    /* a NULL view */
    uint64_t f = 1, l = 2;
    assert_int_equal(flare__range_parse(FLARE_STR_NULL, 10, &f, &l), FLARE__RANGE_NONE);
    assert_int_equal(f, 1);
    assert_int_equal(l, 2);
}

static void test_range_syntax(void **state)
{
    (void)state;
    RANGE_ONE("BYTES=0-1", 10, 0, 2); /* the unit is case-insensitive */
    RANGE_ONE("Bytes=-3", 10, 7, 3);
    RANGE_ONE("bytes=0-1 ", 10, 0, 2);
    RANGE_ONE("bytes=0-1\t,", 10, 0, 2);
    RANGE_ONE("bytes=, 0-1", 10, 0, 2);
    RANGE_ONE("bytes= 2-3 ,, ", 10, 2, 2);
    RANGE_ONE("bytes=\t-4\t", 10, 6, 4);
    RANGE_NONE("bytes=0-1 , 2-3", 10);
    RANGE_NONE("bytes=0-1\t,\t2-3", 10);
    RANGE_UNSAT("bytes=20-30 ,\t40-50", 10);
}

static void test_range_huge_numbers(void **state)
{
    (void)state;
    /* 20+ digits saturate to UINT64_MAX instead of wrapping */
    RANGE_ONE("bytes=0-99999999999999999999999", 10, 0, 10);
    RANGE_ONE("bytes=0-18446744073709551616", 10, 0, 10);
    RANGE_ONE("bytes=-99999999999999999999", 10, 0, 10);
    RANGE_UNSAT("bytes=99999999999999999999-", 10);
    RANGE_UNSAT("bytes=18446744073709551616-18446744073709551617", 10);
    RANGE_UNSAT("bytes=18446744073709551615-", UINT64_MAX);
    RANGE_UNSAT("bytes=99999999999999999999999-", UINT64_MAX);
    RANGE_ONE("bytes=18446744073709551614-", UINT64_MAX, UINT64_MAX - 1, 1);
    RANGE_ONE("bytes=18446744073709551614-99999999999999999999", UINT64_MAX, UINT64_MAX - 1, 1);
    RANGE_ONE("bytes=0-", UINT64_MAX, 0, UINT64_MAX);
    RANGE_ONE("bytes=-18446744073709551615", UINT64_MAX, 0, UINT64_MAX);
    RANGE_ONE("bytes=-1", UINT64_MAX, UINT64_MAX - 1, 1);
    RANGE_ONE("bytes=4294967296-4294967299", 8589934592u, 4294967296u, 4);
    /* saturated values still compare: MAX-MAX is not last < first */
    RANGE_UNSAT("bytes=99999999999999999999-99999999999999999998", 10);
    RANGE_NONE("bytes=18446744073709551615-18446744073709551614", 10);
}

/* ---- flare__etag_match ------------------------------------------------------- */

static bool etag_m(const char *list, size_t n, const char *etag, bool strong)
{
    char *in = malloc(n != 0 ? n : 1);
    assert_non_null(in);
    memcpy(in, list, n);
    bool m = flare__etag_match((flare_str_t){ in, n }, flare_str(etag), strong);
    free(in);
    return m;
}

/* expected results for strong (If-Match) and weak (If-None-Match) */
#define ETAG(lit, etag, es, ew)                                          \
    do {                                                                 \
        if (etag_m(lit, sizeof(lit) - 1, etag, true) != (es))            \
            fail_msg("[%s] vs %s strong: expected %d", lit, etag, (es)); \
        if (etag_m(lit, sizeof(lit) - 1, etag, false) != (ew))           \
            fail_msg("[%s] vs %s weak: expected %d", lit, etag, (ew));   \
    } while (0)

static void test_etag(void **state)
{
    (void)state;
    const char *t = "\"abc\"";
    ETAG("\"abc\"", t, true, true);
    ETAG("W/\"abc\"", t, false, true);
    ETAG("\"abd\"", t, false, false);
    ETAG("\"ABC\"", t, false, false); /* case-sensitive */
    ETAG("\"abc \"", t, false, false);
    ETAG("*", t, true, true);
    ETAG(" * ", t, true, true);
    ETAG("\"x\", \"abc\"", t, true, true);
    ETAG("\"x\",\"abc\"", t, true, true);
    ETAG("\"x\" ,\t\"abc\" ,", t, true, true);
    ETAG(", ,\"abc\"", t, true, true);
    ETAG("\"abc\", \"x\"", t, true, true);
    ETAG("W/\"x\", W/\"abc\"", t, false, true);
    ETAG("W/\"abc\", \"abc\"", t, true, true);
    ETAG("\"x\", \"y\"", t, false, false);
    ETAG("\"x\", *", t, true, true);
    ETAG("\"\"", "\"\"", true, true);
    ETAG("\"\xe9t\xe9\"", "\"\xe9t\xe9\"", true, true); /* obs-text */
    ETAG("\"a,b\"", "\"a,b\"", true, true);             /* ',' is an etagc */
    ETAG("\"a,b\"", t, false, false);
    /* malformed lists match nothing */
    ETAG("", t, false, false);
    ETAG(", ,", t, false, false);
    ETAG("abc", t, false, false);
    ETAG("\"abc", t, false, false);
    ETAG("\"abc\"x", t, false, false);
    ETAG("\"abc\"\"abc\"", t, false, false);
    ETAG("\"abc\" \"abc\"", t, false, false);
    ETAG("\"abc\", bad", t, false, false);
    ETAG("\"abc\", W/", t, false, false);
    ETAG("\"abc\", *x", t, false, false);
    ETAG("W/", t, false, false);
    ETAG("w/\"abc\"", t, false, false);
    ETAG("W/ \"abc\"", t, false, false);
    ETAG("W\"abc\"", t, false, false);
    ETAG("\"a b\"", "\"a b\"", false, false); /* a space is no etagc */
    ETAG("\"a\x7f\"", "\"a\x7f\"", false, false);
    ETAG("\"a\tb\"", "\"a\tb\"", false, false);
    ETAG("**", t, false, false);
    ETAG("*;", t, false, false);
}

/* ---- flare__accepts_gzip ---------------------------------------------------- */

static bool gz(const char *v, size_t n)
{
    char *in = malloc(n != 0 ? n : 1);
    assert_non_null(in);
    memcpy(in, v, n);
    bool r = flare__accepts_gzip((flare_str_t){ in, n });
    free(in);
    return r;
}

#define GZIP(lit, expected)                                 \
    do {                                                    \
        if (gz(lit, sizeof(lit) - 1) != (expected))         \
            fail_msg("[%s]: expected %d", lit, (expected)); \
    } while (0)

static void test_accepts_gzip(void **state)
{
    (void)state;
    GZIP("gzip", true);
    GZIP("GZIP", true);
    GZIP("GZip", true);
    GZIP(" \tgzip\t", true);
    GZIP("deflate,gzip", true);
    GZIP("gzip , br", true);
    GZIP("gzip;q=0", false);
    GZIP("gzip; q=0.000", false);
    GZIP("gzip;q=0.0", false);
    GZIP("gzip;q=0.", false);
    GZIP("gzip ;q=0", false);
    GZIP("gzip;Q=0", false);
    GZIP("gzip;q=0.5", true);
    GZIP("gzip;q=0.001", true);
    GZIP("gzip;q=1", true);
    GZIP("gzip;q=1.000", true);
    GZIP("gzip;level=1;q=0", false);
    GZIP("gzip;q=0;level=1", false);
    GZIP("gzip;q=0.5, deflate", true);
    GZIP("*", true);
    GZIP("*;q=0", false);
    GZIP("*;q=0.1", true);
    GZIP("deflate, gzip;q=0, *", false); /* named gzip;q=0 beats "*" */
    GZIP("*, gzip;q=0", false);
    GZIP("*;q=0, gzip", true);
    GZIP("br, *", true);
    GZIP("br, *;q=0", false);
    GZIP("br;q=1.0, gzip;q=0.8, *;q=0.1", true);
    GZIP("", false);
    GZIP(",,", false);
    GZIP("identity", false);
    GZIP("deflate, br", false);
    GZIP("gzipx", false);
    GZIP("xgzip", false);
    GZIP("gzi", false);
    GZIP("gzip/", false);
    assert_false(flare__accepts_gzip(FLARE_STR_NULL));
}

/* ---- flare_http_date_parse -------------------------------------------------- */

static bool date(const char *s, size_t n, time_t *t)
{
    char *in = malloc(n != 0 ? n : 1);
    assert_non_null(in);
    memcpy(in, s, n);
    *t = 42;
    bool ok = flare_http_date_parse((flare_str_t){ in, n }, t) == 0;
    free(in);
    return ok;
}

#define DATE_OK(lit, expected)                                                                   \
    do {                                                                                         \
        time_t t_;                                                                               \
        if (!date(lit, sizeof(lit) - 1, &t_))                                                    \
            fail_msg("[%s]: refused, expected %lld", lit, (long long)(expected));                \
        if ((long long)t_ != (long long)(expected))                                              \
            fail_msg("[%s]: got %lld expected %lld", lit, (long long)t_, (long long)(expected)); \
    } while (0)

#define DATE_BAD(lit)                                                                   \
    do {                                                                                \
        time_t t_;                                                                      \
        if (date(lit, sizeof(lit) - 1, &t_))                                            \
            fail_msg("[%s]: accepted as %lld, expected a refusal", lit, (long long)t_); \
    } while (0)

static void test_date_forms(void **state)
{
    (void)state;
    /* RFC 9110 section 5.6.7: the same instant in the three forms */
    DATE_OK("Sun, 06 Nov 1994 08:49:37 GMT", 784111777);
    DATE_OK("Sunday, 06-Nov-94 08:49:37 GMT", 784111777);
    DATE_OK("Sun Nov  6 08:49:37 1994", 784111777);
    DATE_OK("Sun Nov 06 08:49:37 1994", 784111777); /* asctime day as 2DIGIT */
    DATE_OK("Thu, 01 Jan 1970 00:00:00 GMT", 0);
    DATE_OK("Wed, 31 Dec 1969 23:59:59 GMT", -1);
    DATE_OK("Fri, 31 Dec 9999 23:59:59 GMT", 253402300799LL);
    DATE_OK("Mon, 01 Jan 0001 00:00:00 GMT", -62135596800LL);
    DATE_OK("Sat, 01 Jan 0000 00:00:00 GMT", -62167219200LL);
    /* RFC 850 two-digit years: 70-99 are 19xx, 00-69 20xx */
    DATE_OK("Thursday, 01-Jan-70 00:00:00 GMT", 0);
    DATE_OK("Tuesday, 31-Dec-69 23:59:59 GMT", 3155759999LL);
    DATE_OK("Wednesday, 30-Apr-25 00:00:00 GMT", 1746057600 - 86400);
    /* a leap second is the next second */
    DATE_OK("Sun, 06 Nov 1994 23:59:60 GMT", 784166400);
    /* the day name is not checked against the date */
    DATE_OK("Mon, 06 Nov 1994 08:49:37 GMT", 784111777);
}

static void test_date_leap_day(void **state)
{
    (void)state;
    DATE_OK("Tue, 29 Feb 2000 00:00:00 GMT", 951782400);      /* divisible by 400 */
    DATE_OK("Thu, 29 Feb 2024 12:00:00 GMT", 1709208000);     /* divisible by 4 */
    DATE_OK("Tue, 29 Feb 1600 00:00:00 GMT", -11670998400LL); /* before 1970 */
    DATE_OK("Tue Feb 29 00:00:00 2000", 951782400);
    DATE_OK("Tuesday, 29-Feb-00 00:00:00 GMT", 951782400);
    DATE_BAD("Tue, 30 Feb 2000 00:00:00 GMT");
    /* Feb 29 of a non-leap year (once accepted and read as March 1) */
    DATE_BAD("Wed, 29 Feb 1995 00:00:00 GMT");
    DATE_BAD("Thu, 29 Feb 1900 00:00:00 GMT"); /* divisible by 100, not by 400 */
    DATE_BAD("Mon, 29 Feb 2100 00:00:00 GMT");
    DATE_BAD("Wed Feb 29 00:00:00 1995");
    DATE_BAD("Wednesday, 29-Feb-95 00:00:00 GMT");
}

static void test_date_invalid(void **state)
{
    (void)state;
    DATE_BAD("Thu, 31 Apr 2025 00:00:00 GMT"); /* April has 30 days */
    DATE_BAD("Thu Apr 31 00:00:00 2025");
    DATE_BAD("Thursday, 31-Apr-25 00:00:00 GMT");
    DATE_BAD("Sun, 00 Nov 1994 08:49:37 GMT");
    DATE_BAD("Sun, 32 Jan 1994 08:49:37 GMT");
    DATE_BAD("Sun, 31 Jun 1994 08:49:37 GMT");
    DATE_BAD("Sun, 06 nov 1994 08:49:37 GMT"); /* case-sensitive */
    DATE_BAD("Sun, 06 Xyz 1994 08:49:37 GMT");
    DATE_BAD("Sun, 06 Nov 1994 24:00:00 GMT");
    DATE_BAD("Sun, 06 Nov 1994 08:60:37 GMT");
    DATE_BAD("Sun, 06 Nov 1994 08:49:61 GMT");
    DATE_BAD("Sun, 06 Nov 1994 08:49:37 UTC");
    DATE_BAD("Sun, 06 Nov 1994 08:49:37 gmt");
    DATE_BAD("Xyz, 06 Nov 1994 08:49:37 GMT");
    DATE_BAD("sun, 06 Nov 1994 08:49:37 GMT");
    DATE_BAD("Sun, 6 Nov 1994 08:49:37 GMT");
    DATE_BAD("Sun, 06 Nov 94 08:49:37 GMT");
    DATE_BAD("Sun, 06-Nov-1994 08:49:37 GMT");
    DATE_BAD("Sun,06 Nov 1994 08:49:37 GMT ");
    DATE_BAD("Sun, 06 Nov 1994 08.49.37 GMT");
    DATE_BAD("Sun, 06 Nov 1994 8:49:37 GMT ");
    DATE_BAD("Sun, 0a Nov 1994 08:49:37 GMT");
    DATE_BAD("Sun, 06 Nov 199x 08:49:37 GMT");
    /* wrong lengths */
    DATE_BAD("Sun, 06 Nov 1994 08:49:37 GM");
    DATE_BAD("Sun, 06 Nov 1994 08:49:37 GMT ");
    DATE_BAD(" Sun, 06 Nov 1994 08:49:37 GMT");
    DATE_BAD("Sun, 06 Nov 1994 08:49:37");
    DATE_BAD("Sun, 06 Nov 1994");
    DATE_BAD("Sun Nov  6 08:49:37 1994 ");
    DATE_BAD("Sun Nov 6 08:49:37 1994");
    DATE_BAD("Sun Nov  6 08:49:37 94");
    DATE_BAD("Sunday, 06-Nov-94 08:49:37 GMT ");
    DATE_BAD("Sunday, 06-Nov-94 08:49:37");
    DATE_BAD("Sunday, 06-Nov-1994 08:49:37 GMT");
    DATE_BAD("Sundays, 06-Nov-94 08:49:37 GMT");
    DATE_BAD("Sunday 06-Nov-94 08:49:37 GMT");
    /* garbage */
    DATE_BAD("");
    DATE_BAD(",");
    DATE_BAD("Sun,");
    DATE_BAD("Sunday,");
    DATE_BAD("0");
    DATE_BAD("784111777");
    DATE_BAD("1994-11-06T08:49:37Z");
    DATE_BAD("\0\0\0,\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0");
    DATE_BAD("-----------------------------");
    DATE_BAD("Sun, 06 Nov 1994 08:49:37 GMT\0");
    time_t t = 7;
    assert_int_equal(flare_http_date_parse(FLARE_STR_NULL, &t), FLARE_EINVAL);
    assert_int_equal(t, 7);
}

static void test_date_roundtrip(void **state)
{
    (void)state;
    /* what Flare writes (Last-Modified), Flare reads back */
    static const long long ts[] = { 0,
                                    1,
                                    -1,
                                    784111777,
                                    951782400,
                                    1709208000,
                                    4107542400LL,
                                    253402300799LL,
                                    -62167219200LL,
                                    -2203891200LL,
                                    2147483647LL,
                                    2147483648LL };
    for (size_t i = 0; i < sizeof(ts) / sizeof(ts[0]); i++) {
        char buf[29];
        flare__format_http_date(buf, (time_t)ts[i]);
        time_t t;
        if (!date(buf, 29, &t) || (long long)t != ts[i])
            fail_msg("%lld -> [%.29s] -> %lld", ts[i], buf, (long long)t);
    }
}

/* ---- flare_mime_type ---------------------------------------------------------- */

static void test_mime_type(void **state)
{
    (void)state;
    assert_view(flare_mime_type(S("index.html")), "text/html; charset=utf-8");
    assert_view(flare_mime_type(S("a/b/page.htm")), "text/html; charset=utf-8");
    assert_view(flare_mime_type(S("app.js")), "text/javascript; charset=utf-8");
    assert_view(flare_mime_type(S("mod.mjs")), "text/javascript; charset=utf-8");
    assert_view(flare_mime_type(S("APP.JS")), "text/javascript; charset=utf-8");
    assert_view(flare_mime_type(S("INDEX.HTML")), "text/html; charset=utf-8");
    assert_view(flare_mime_type(S("photo.JPeG")), "image/jpeg");
    assert_view(flare_mime_type(S("style.css")), "text/css; charset=utf-8");
    assert_view(flare_mime_type(S("data.json")), "application/json");
    assert_view(flare_mime_type(S("icon.svg")), "image/svg+xml");
    assert_view(flare_mime_type(S("a.wasm")), "application/wasm");
    assert_view(flare_mime_type(S("font.woff2")), "font/woff2");
    assert_view(flare_mime_type(S("site.webmanifest")), "application/manifest+json");
    assert_view(flare_mime_type(S("a.tar.gz")), "application/gzip");
    assert_view(flare_mime_type(S("app.js.gz")), "application/gzip");
    assert_view(flare_mime_type(S("v1.2/notes.txt")), "text/plain; charset=utf-8");
    /* no (known) extension */
    assert_view(flare_mime_type(S("README")), "application/octet-stream");
    assert_view(flare_mime_type(S("Makefile")), "application/octet-stream");
    assert_view(flare_mime_type(S("file.")), "application/octet-stream");
    assert_view(flare_mime_type(S("x.unknownext")), "application/octet-stream");
    assert_view(flare_mime_type(S("x.htmlx")), "application/octet-stream");
    assert_view(flare_mime_type(S("x.ht")), "application/octet-stream");
    assert_view(flare_mime_type(S(".bashrc")), "application/octet-stream");
    assert_view(flare_mime_type(S("dir.d/file")), "application/octet-stream");
    assert_view(flare_mime_type(S("dir.html/")), "application/octet-stream");
    assert_view(flare_mime_type(S("")), "application/octet-stream");
    assert_view(flare_mime_type(FLARE_STR_NULL), "application/octet-stream");
    /* only the bytes in the view count */
    assert_view(flare_mime_type((flare_str_t){ "a.html.png", 6 }), "text/html; charset=utf-8");
}

/* flare_static over real sockets, with openat2 and with the component
 * walk used where openat2 is missing: the same answers, except that the
 * walk follows no symlink at all. */
static char root[64];

static void put_file(const char *rel, const char *text)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", root, rel);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int status_of(const harness_t *h, const char *target, char **body)
{
    char req[512];
    snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", target);
    char *r = harness_roundtrip(h, req);
    int st = 0;
    sscanf(r, "HTTP/1.1 %d", &st);
    char *b = strstr(r, "\r\n\r\n");
    *body = strdup(b != NULL ? b + 4 : "");
    free(r);
    return st;
}

static void serve_tree(bool walk)
{
    flare__static_no_openat2(walk);
    harness_t h = { 0 };
    flare_config_t cfg;
    flare_config_init(&cfg);
    cfg.workers = 1;
    h.app = flare_app_new(&cfg);
    assert_non_null(h.app);
    flare_static_opts_t o;
    flare_static_opts_init(&o);
    o.no_cache = true; /* every request opens its file */
    assert_int_equal(flare_static(h.app, "/s", root, &o), 0);
    assert_int_equal(harness_start(&h), 0);
    char *body;
    assert_int_equal(status_of(&h, "/s/a/b/c.txt", &body), 200);
    assert_string_equal(body, "deep\n");
    free(body);
    assert_int_equal(status_of(&h, "/s/", &body), 200);
    assert_string_equal(body, "index\n");
    free(body);
    assert_int_equal(status_of(&h, "/s/a/b/", &body), 404); /* no index there */
    free(body);
    assert_int_equal(status_of(&h, "/s/a/b/missing", &body), 404);
    free(body);
    assert_int_equal(status_of(&h, "/s/out", &body), 404); /* symlink out of the root */
    free(body);
    /* a symlink inside the root: followed by openat2, refused by the walk */
    assert_int_equal(status_of(&h, "/s/in", &body), walk ? 404 : 200);
    free(body);
    assert_int_equal(status_of(&h, "/s/linkdir/c.txt", &body), walk ? 404 : 200);
    free(body);
    assert_int_equal(harness_stop(&h), 0);
    flare_app_free(h.app);
    flare__static_no_openat2(false);
}

static void test_serve_custom_mime(void **state)
{
    (void)state;
    char dir[] = "/tmp/flare-static-mime-XXXXXX";
    assert_non_null(mkdtemp(dir));
    snprintf(root, sizeof(root), "%s", dir);
    put_file("app.webc", "w\n");
    put_file("notes.TXT", "n\n");
    put_file("plain.css", "c\n");
    harness_t h = { 0 };
    flare_config_t cfg;
    flare_config_init(&cfg);
    cfg.workers = 1;
    h.app = flare_app_new(&cfg);
    assert_non_null(h.app);
    flare_static_opts_t o;
    flare_static_opts_init(&o);
    flare_mime_t bad[] = { { "a.b", "x/y" }, { NULL, NULL } };
    o.mime = bad;
    assert_int_equal(flare_static(h.app, "/s", root, &o), FLARE_EINVAL);
    flare_mime_t inject[] = { { "x", "a\r\nSet-Cookie: y" }, { NULL, NULL } };
    o.mime = inject;
    assert_int_equal(flare_static(h.app, "/s", root, &o), FLARE_EINVAL);
    /* the table is copied: the caller's array may go away */
    flare_mime_t *types = calloc(3, sizeof(*types));
    assert_non_null(types);
    types[0] = (flare_mime_t){ "webc", "application/x-webc" };
    types[1] = (flare_mime_t){ "txt", "text/x-notes; charset=utf-8" }; /* overrides */
    o.mime = types;
    assert_int_equal(flare_static(h.app, "/s", root, &o), 0);
    free(types);
    assert_int_equal(harness_start(&h), 0);
    static const char *const cases[][2] = {
        { "/s/app.webc", "Content-Type: application/x-webc\r\n" },
        { "/s/notes.TXT", "Content-Type: text/x-notes; charset=utf-8\r\n" },
        { "/s/plain.css", "Content-Type: text/css; charset=utf-8\r\n" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char req[256];
        snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
                 cases[i][0]);
        char *r = harness_roundtrip(&h, req);
        assert_non_null(strstr(r, "HTTP/1.1 200 OK\r\n"));
        assert_non_null(strstr(r, cases[i][1]));
        free(r);
    }
    assert_int_equal(harness_stop(&h), 0);
    flare_app_free(h.app);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

static void test_serve_openat2_and_walk(void **state)
{
    (void)state;
    snprintf(root, sizeof(root), "/tmp/flare-static-unit-XXXXXX");
    assert_non_null(mkdtemp(root));
    char path[256];
    snprintf(path, sizeof(path), "%s/a", root);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(path, sizeof(path), "%s/a/b", root);
    assert_int_equal(mkdir(path, 0755), 0);
    put_file("a/b/c.txt", "deep\n");
    put_file("index.html", "index\n");
    snprintf(path, sizeof(path), "%s/out", root);
    assert_int_equal(symlink("/etc/hostname", path), 0);
    snprintf(path, sizeof(path), "%s/in", root);
    assert_int_equal(symlink("a/b/c.txt", path), 0);
    snprintf(path, sizeof(path), "%s/linkdir", root);
    assert_int_equal(symlink("a/b", path), 0);
    serve_tree(false);
    serve_tree(true);
    /* a root that is not a directory */
    flare_app_t *app = flare_app_new(NULL);
    assert_non_null(app);
    snprintf(path, sizeof(path), "%s/index.html", root);
    assert_int_equal(flare_static(app, "/x", path, NULL), FLARE_ENOTFOUND);
    assert_int_equal(flare_static(app, "x", root, NULL), FLARE_EINVAL);
    flare_static_opts_t o;
    flare_static_opts_init(&o);
    o.index = "a/b";
    assert_int_equal(flare_static(app, "/y", root, &o), FLARE_EINVAL);
    flare_static_opts_init(&o);
    o.cache_control = "max-age=1\r\nX: y";
    assert_int_equal(flare_static(app, "/z", root, &o), FLARE_EINVAL);
    flare_app_free(app);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_path_plain),
        cmocka_unit_test(test_path_decode),
        cmocka_unit_test(test_path_bad_escapes),
        cmocka_unit_test(test_path_nul),
        cmocka_unit_test(test_path_dotdot),
        cmocka_unit_test(test_path_dot_and_empty_segments),
        cmocka_unit_test(test_path_dotfiles),
        cmocka_unit_test(test_path_trailing_slash),
        cmocka_unit_test(test_range_rfc_examples),
        cmocka_unit_test(test_range_clamping),
        cmocka_unit_test(test_range_ignored),
        cmocka_unit_test(test_range_syntax),
        cmocka_unit_test(test_range_huge_numbers),
        cmocka_unit_test(test_etag),
        cmocka_unit_test(test_accepts_gzip),
        cmocka_unit_test(test_date_forms),
        cmocka_unit_test(test_date_leap_day),
        cmocka_unit_test(test_date_invalid),
        cmocka_unit_test(test_date_roundtrip),
        cmocka_unit_test(test_mime_type),
        cmocka_unit_test(test_serve_openat2_and_walk),
        cmocka_unit_test(test_serve_custom_mime),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
