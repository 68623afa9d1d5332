/* HTTP/1.1 request-head parser: request line, fields, framing, limits,
 * partial input, head_ready. Every input is copied into a buffer of exactly
 * its size so that ASan catches any read past the end. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/core.h"
#include "flare/common.h"
#include "http/hop.h"
#include "http1/parser.h"

#define MAX_HDRS 100

static flare_header_t hdrs[MAX_HDRS];
static flare_http_head_t head;
static char *buf; /* the last parsed input; the views point into it */
static const flare_http_limits_t default_limits = { 8192, 65536, MAX_HDRS };

static int parse_lim(const void *s, size_t n, const flare_http_limits_t *lim)
{
    free(buf);
    buf = malloc(n != 0 ? n : 1);
    assert_non_null(buf);
    memcpy(buf, s, n);
    memset(&head, 0x5a, sizeof(head));
    head.headers = hdrs;
    return flare__http_parse_head(buf, n, lim, &head);
}

static int parse(const char *s)
{
    return parse_lim(s, strlen(s), &default_limits);
}

static void assert_view(flare_str_t v, const char *want)
{
    if (v.len != strlen(want) || (v.len != 0 && memcmp(v.ptr, want, v.len) != 0))
        fail_msg("view \"%.*s\" != \"%s\"", (int)v.len, v.ptr != NULL ? v.ptr : "", want);
}

/* The view lies inside the last input. */
static void assert_inside(flare_str_t v)
{
    assert_true(v.ptr >= buf);
    assert_true(v.ptr + v.len >= v.ptr);
}

/* A valid head of n bytes: every shorter prefix is PARTIAL, the whole is n;
 * leaves the full parse in `head`. */
static void ok_n(const void *s, size_t len, size_t n, const flare_http_limits_t *lim)
{
    for (size_t i = 0; i < n; i++) {
        int rc = parse_lim(s, i, lim);
        if (rc != FLARE_PARSE_PARTIAL)
            fail_msg("prefix %zu of %zu: rc %d (%d %s)", i, n, rc, head.status,
                     head.error != NULL && rc == FLARE_PARSE_ERROR ? head.error : "");
    }
    int rc = parse_lim(s, len, lim);
    if (rc != (int)n)
        fail_msg("rc %d, want %zu (status %d: %s)", rc, n, head.status,
                 rc == FLARE_PARSE_ERROR ? head.error : "");
    assert_int_equal(head.status, 0);
    assert_null(head.error);
}

static void ok(const char *s)
{
    ok_n(s, strlen(s), strlen(s), &default_limits);
}

/* An invalid head: the whole fails with `status`, and no prefix reports
 * anything but PARTIAL or that same status. */
static void bad_lim(const void *s, size_t n, int status, const flare_http_limits_t *lim)
{
    for (size_t i = 0; i < n; i++) {
        int rc = parse_lim(s, i, lim);
        if (rc == FLARE_PARSE_ERROR && head.status != status)
            fail_msg("prefix %zu: status %d (%s), want %d", i, head.status, head.error, status);
        if (rc != FLARE_PARSE_ERROR && rc != FLARE_PARSE_PARTIAL)
            fail_msg("prefix %zu: rc %d", i, rc);
    }
    int rc = parse_lim(s, n, lim);
    if (rc != FLARE_PARSE_ERROR || head.status != status)
        fail_msg("\"%.*s\": rc %d status %d, want error %d", (int)(n < 80 ? n : 80),
                 (const char *)s, rc, head.status, status);
    assert_non_null(head.error);
    assert_true(strlen(head.error) > 0);
}

static void bad(const char *s, int status)
{
    bad_lim(s, strlen(s), status, &default_limits);
}

static void bad_msg(const char *s, int status, const char *msg)
{
    bad(s, status);
    if (strstr(head.error, msg) == NULL)
        fail_msg("error \"%s\" does not say \"%s\"", head.error, msg);
}

/* -------------------------------------------------------------------------
 * request line */

static void test_wrk_request(void **state)
{
    (void)state;
    ok("GET /plaintext HTTP/1.1\r\nHost: localhost:8080\r\n\r\n");
    assert_view(head.method, "GET");
    assert_int_equal(head.method_id, FLARE_METHOD_GET);
    assert_view(head.target, "/plaintext");
    assert_view(head.path, "/plaintext");
    assert_view(head.query, "");
    assert_int_equal(head.minor, 1);
    assert_int_equal(head.nheaders, 1);
    assert_view(hdrs[0].name, "Host");
    assert_view(hdrs[0].value, "localhost:8080");
    assert_view(head.host, "localhost:8080");
    assert_true(head.host.ptr == hdrs[0].value.ptr);
    assert_int_equal(head.content_length, -1);
    assert_false(head.chunked);
    assert_true(head.keep_alive);
    assert_false(head.expect_continue);
    assert_false(head.upgrade);
}

static void test_browser_request(void **state)
{
    (void)state;
    const char *req = "GET /index.html?lang=en&x=1 HTTP/1.1\r\n"
                      "Host: www.example.com\r\n"
                      "User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:109.0) Gecko/20100101\r\n"
                      "Accept: text/html,application/xhtml+xml,*/*;q=0.8\r\n"
                      "Accept-Language: en-US,en;q=0.5\r\n"
                      "Accept-Encoding: gzip, deflate, br\r\n"
                      "Connection: keep-alive\r\n"
                      "Cookie: session=0123456789abcdef; theme=dark\r\n"
                      "Upgrade-Insecure-Requests: 1\r\n"
                      "\r\n";
    ok(req);
    assert_view(head.path, "/index.html");
    assert_view(head.query, "lang=en&x=1");
    assert_int_equal(head.nheaders, 8);
    assert_view(hdrs[2].name, "Accept");
    assert_view(hdrs[2].value, "text/html,application/xhtml+xml,*/*;q=0.8");
    assert_view(hdrs[7].name, "Upgrade-Insecure-Requests");
    assert_view(hdrs[7].value, "1");
    assert_true(head.keep_alive);
    for (size_t i = 0; i < head.nheaders; i++) {
        assert_inside(hdrs[i].name);
        assert_inside(hdrs[i].value);
    }
}

static void test_methods(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        flare_method_t id;
    } m[] = {
        { "GET", FLARE_METHOD_GET },        { "HEAD", FLARE_METHOD_HEAD },
        { "POST", FLARE_METHOD_POST },      { "PUT", FLARE_METHOD_PUT },
        { "DELETE", FLARE_METHOD_DELETE },  { "OPTIONS", FLARE_METHOD_OPTIONS },
        { "TRACE", FLARE_METHOD_TRACE },    { "PATCH", FLARE_METHOD_PATCH },
        { "get", FLARE_METHOD_OTHER },      { "Get", FLARE_METHOD_OTHER },
        { "PROPFIND", FLARE_METHOD_OTHER }, { "M-SEARCH", FLARE_METHOD_OTHER },
        { "GETX", FLARE_METHOD_OTHER },     { "PUTS", FLARE_METHOD_OTHER },
        { "X", FLARE_METHOD_OTHER },        { "!#$%&'*+-.^_`|~", FLARE_METHOD_OTHER },
    };
    for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++) {
        char req[128];
        snprintf(req, sizeof(req), "%s /x HTTP/1.1\r\nHost: h\r\n\r\n", m[i].name);
        ok(req);
        assert_view(head.method, m[i].name);
        assert_int_equal(head.method_id, m[i].id);
    }
    /* CONNECT needs its own target form */
    ok("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n");
    assert_int_equal(head.method_id, FLARE_METHOD_CONNECT);
}

/* One tchar set (RFC 9110 5.6.2) for every token: the shared table, and the
 * parser's methods and field names (short names in the scalar loop, long
 * ones through the SIMD scan) take exactly those bytes. */
static void test_tchar(void **state)
{
    (void)state;
    static const char extra[] = "!#$%&'*+-.^_`|~";
    for (int c = 0; c < 256; c++) {
        bool want = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c != 0 && memchr(extra, c, sizeof(extra) - 1) != NULL);
        if (flare__is_tchar((unsigned char)c) != want)
            fail_msg("byte 0x%02x: flare__is_tchar %d", c, !want);
        char one[2] = { (char)c, 0 };
        assert_int_equal(flare__is_token((flare_str_t){ one, 1 }), want);
        if (c == ' ' || c == ':')
            continue; /* they end a method or a name */
        static const char *const fmt[] = {
            "GZT /x HTTP/1.1\r\nHost: h\r\n\r\n",
            "GET /x HTTP/1.1\r\nHost: h\r\nXZ: v\r\n\r\n",
            "GET /x HTTP/1.1\r\nHost: h\r\nX-A-Long-Field-Name-Z: v\r\n\r\n",
        };
        for (size_t f = 0; f < sizeof(fmt) / sizeof(fmt[0]); f++) {
            char req[128];
            int len = snprintf(req, sizeof(req), "%s", fmt[f]);
            *(char *)memchr(req, 'Z', (size_t)len) = (char)c;
            int rc = parse_lim(req, (size_t)len, &default_limits);
            if ((rc == len) != want)
                fail_msg("byte 0x%02x in \"%s\": rc %d", c, fmt[f], rc);
        }
    }
    assert_false(flare__is_token((flare_str_t){ "", 0 }));
    assert_false(flare__is_token(FLARE_STR_NULL));
}

static void test_bad_methods(void **state)
{
    (void)state;
    bad(" / HTTP/1.1\r\nHost: h\r\n\r\n", 400);
    bad("GE(T / HTTP/1.1\r\nHost: h\r\n\r\n", 400);
    bad("GE\"T / HTTP/1.1\r\n\r\n", 400);
    bad("G\x80T / HTTP/1.1\r\n\r\n", 400);
    bad("GET\t/ HTTP/1.1\r\nHost: h\r\n\r\n", 400);
    bad("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 400); /* a TLS hello */
    bad("SSH-2.0-OpenSSH_9.2\r\n", 400);
    bad("GET\r\n\r\n", 400);
}

static void test_single_spaces(void **state)
{
    (void)state;
    bad_msg("GET  / HTTP/1.1\r\nHost: h\r\n\r\n", 400, "request-target");
    bad("GET /  HTTP/1.1\r\nHost: h\r\n\r\n", 400);
    bad("GET / HTTP/1.1 \r\nHost: h\r\n\r\n", 400);
    bad("GET /\tHTTP/1.1\r\nHost: h\r\n\r\n", 400);
    bad("GET / HTTP/1.1\t\r\nHost: h\r\n\r\n", 400);
}

static void test_target_chars(void **state)
{
    (void)state;
    char target[128], req[256];
    size_t n = 0;
    target[n++] = '/';
    for (int c = 0x21; c <= 0x7e; c++) {
        if (c != '#' && c != '?' && c != '%')
            target[n++] = (char)c;
    }
    memcpy(target + n, "%2f%7E", 6); /* '%' only as an escape in the path */
    n += 6;
    target[n++] = '?';
    target[n++] = '?';
    target[n] = '\0';
    snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: h\r\n\r\n", target);
    ok(req);
    assert_view(head.target, target);
    target[n - 2] = '\0';
    assert_view(head.path, target);
    assert_view(head.query, "?");

    /* every byte that is not visible ASCII, and '#', is refused, at the
     * start, in the SIMD part and in the scalar tail of the target */
    for (int c = 0; c < 256; c++) {
        if ((c > 0x20 && c < 0x7f && c != '#') || c == ' ')
            continue;
        static const char *const fmt[] = {
            "GET /%c HTTP/1.1\r\nHost: h\r\n\r\n",
            "GET /aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa%cb HTTP/1.1\r\n\r\n",
            "GET /abc?d=%c HTTP/1.1\r\n\r\n"
        };
        for (size_t f = 0; f < 3; f++) {
            int len = snprintf(req, sizeof(req), fmt[f], 'Z');
            char *z = memchr(req, 'Z', (size_t)len);
            *z = (char)c;
            bad_lim(req, (size_t)len, 400, &default_limits);
        }
    }
}

static void test_path_query(void **state)
{
    (void)state;
    ok("GET /p?a=1&b=2?c HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_view(head.path, "/p");
    assert_view(head.query, "a=1&b=2?c");
    ok("GET /p? HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_view(head.path, "/p");
    assert_view(head.query, "");
    assert_inside(head.query);
    ok("GET /? HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_view(head.path, "/");
    ok("GET / HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_view(head.path, "/");
    assert_view(head.query, "");
    /* '?' in the second 16-byte block, and in a scalar tail */
    ok("GET /0123456789abcdefghijk?q=1&r=0123456789abcdefghij HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_view(head.path, "/0123456789abcdefghijk");
    assert_view(head.query, "q=1&r=0123456789abcdefghij");
    ok("GET /0123456789abcdef?x HTTP/1.0\r\n\r\n");
    assert_view(head.path, "/0123456789abcdef");
    assert_view(head.query, "x");
    ok("GET /a%20b/%2F HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_view(head.path, "/a%20b/%2F"); /* no decoding here */
}

/* The parser notes %-escapes in the path (path_pct: the caller normalises
 * the path before routing only then) and refuses a '%' there that does not
 * start "%" HEXDIG HEXDIG; the query keeps its '%' as sent. */
static void test_path_escapes(void **state)
{
    (void)state;
    ok("GET /plaintext HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_false(head.path_pct);
    ok("GET /pl%61intext HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_true(head.path_pct);
    assert_view(head.path, "/pl%61intext"); /* a view as sent: normalising is the router's */
    ok("GET /a%2F%2fb%C3%a9?x=%zz HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_true(head.path_pct);
    assert_view(head.path, "/a%2F%2fb%C3%a9");
    assert_view(head.query, "x=%zz");
    ok("GET /a?x=%41&y=%&z=%%%g HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_false(head.path_pct);
    assert_view(head.query, "x=%41&y=%&z=%%%g");
    ok("GET /a?%41 HTTP/1.1\r\nConnection: close\r\nHost: h\r\n\r\n");
    assert_false(head.path_pct);
    assert_false(head.keep_alive);
    ok("GET http://h/p%41th?q HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_true(head.path_pct);
    assert_view(head.path, "/p%41th");
    ok("OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_false(head.path_pct);

    static const char *const bad_paths[] = { "/%",   "/%4",    "/%zz", "/a%g1", "/%%41",
                                             "/x%",  "/%4?q",  "/%?q", "/%%",   "/a%2",
                                             "/%0g", "/%\xff", "%41",  "/%20%" };
    for (size_t i = 0; i < sizeof(bad_paths) / sizeof(bad_paths[0]); i++) {
        char req[128];
        snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: h\r\n\r\n", bad_paths[i]);
        bad(req, 400);
    }
    bad_msg("GET /%zz HTTP/1.1\r\nHost: h\r\n\r\n", 400, "percent-encoding");
    bad_msg("GET http://h/a%z HTTP/1.1\r\nHost: h\r\n\r\n", 400, "percent-encoding");

    /* at every offset, through the SIMD scan and the byte loop alike */
    for (size_t at = 1; at + 3 <= 48; at++) {
        char path[64], req[128];
        static const char *const put[] = { "%41", "%4g", "?%g", "!\"$", "$?%" };
        for (size_t k = 0; k < 5; k++) {
            memset(path, 'a', 48);
            path[0] = '/';
            memcpy(path + at, put[k], 3);
            path[48] = '\0';
            snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: h\r\n\r\n", path);
            if (k == 1) {
                bad(req, 400);
                continue;
            }
            ok(req);
            assert_int_equal(head.path_pct, k == 0);
            assert_int_equal(head.path.len, k == 2 ? at : k == 4 ? at + 1 : 48);
        }
    }

    /* the escape is checked within the request line's window only: past it
     * the answer is 414, whatever follows */
    flare_http_limits_t lim = { 8, 4096, 10 };
    bad_lim("GET /a%zz HTTP/1.1\r\nHost: h\r\n\r\n", 31, 400, &lim); /* "%z" inside */
    lim.max_request_line = 7;
    bad_lim("GET /a%zz HTTP/1.1\r\nHost: h\r\n\r\n", 31, 414, &lim); /* only "%" inside */
}

static void test_absolute_form(void **state)
{
    (void)state;
    ok("GET http://example.com/a/b?x=1 HTTP/1.1\r\nHost: other.org\r\n\r\n");
    assert_view(head.target, "http://example.com/a/b?x=1");
    assert_view(head.path, "/a/b");
    assert_view(head.query, "x=1");
    assert_view(head.host, "example.com"); /* RFC 9112 3.2.2: not the Host field */
    ok("GET HTTP://Example.COM:8080 HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_view(head.path, "/");
    assert_view(head.query, "");
    assert_view(head.host, "Example.COM:8080");
    ok("GET https://h?q HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_view(head.path, "/");
    assert_view(head.query, "q");
    ok("GET http://[::1]:80/x? HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_view(head.host, "[::1]:80");
    assert_view(head.path, "/x");
    ok("GET svn+ssh.1://h/ HTTP/1.0\r\n\r\n");
    assert_view(head.host, "h");

    bad("GET http:///x HTTP/1.1\r\nHost: h\r\n\r\n", 400);
    bad("GET http://user@h/ HTTP/1.1\r\nHost: h\r\n\r\n", 400);
    bad("GET http:/h/ HTTP/1.1\r\nHost: h\r\n\r\n", 400);
    bad("GET 1http://h/ HTTP/1.1\r\nHost: h\r\n\r\n", 400);
    bad("GET ://h/ HTTP/1.1\r\nHost: h\r\n\r\n", 400);
    bad("GET http://h\\x/ HTTP/1.1\r\nHost: h\r\n\r\n", 400);
    bad("GET index.html HTTP/1.1\r\nHost: h\r\n\r\n", 400);
    bad("GET example.com:443 HTTP/1.1\r\nHost: h\r\n\r\n", 400);
    /* Host is still required and checked */
    bad_msg("GET http://example.com/ HTTP/1.1\r\n\r\n", 400, "missing Host");
}

static void test_asterisk_and_connect(void **state)
{
    (void)state;
    ok("OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_view(head.path, "*");
    assert_view(head.query, "");
    bad_msg("GET * HTTP/1.1\r\nHost: h\r\n\r\n", 400, "OPTIONS");
    bad("OPTIONS *x HTTP/1.1\r\nHost: h\r\n\r\n", 400);
    ok("OPTIONS /x HTTP/1.1\r\nHost: h\r\n\r\n");

    ok("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n");
    assert_view(head.path, "example.com:443");
    assert_view(head.query, "");
    ok("CONNECT [2001:db8::1]:8443 HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_view(head.path, "[2001:db8::1]:8443");
    bad("CONNECT /x HTTP/1.1\r\nHost: h\r\n\r\n", 400);
    bad("CONNECT example.com HTTP/1.1\r\nHost: h\r\n\r\n", 400);
    bad("CONNECT example.com: HTTP/1.1\r\nHost: h\r\n\r\n", 400);
    bad("CONNECT :443 HTTP/1.1\r\nHost: h\r\n\r\n", 400);
    bad("CONNECT h:44x HTTP/1.1\r\nHost: h\r\n\r\n", 400);
    bad("CONNECT h:443?x HTTP/1.1\r\nHost: h\r\n\r\n", 400);
    bad("CONNECT u@h:443 HTTP/1.1\r\nHost: h\r\n\r\n", 400);
    bad("CONNECT http://h:443/ HTTP/1.1\r\nHost: h\r\n\r\n", 400);
    bad("CONNECT * HTTP/1.1\r\nHost: h\r\n\r\n", 400);
}

static void test_versions(void **state)
{
    (void)state;
    ok("GET / HTTP/1.0\r\n\r\n");
    assert_int_equal(head.minor, 0);
    assert_false(head.keep_alive);
    assert_int_equal(head.host.len, 0);
    ok("GET / HTTP/1.2\r\nHost: h\r\n\r\n");
    assert_int_equal(head.minor, 1);
    ok("GET / HTTP/1.9\r\nHost: h\r\n\r\n");
    assert_int_equal(head.minor, 1);
    assert_true(head.keep_alive);

    bad_msg("GET / HTTP/2.0\r\nHost: h\r\n\r\n", 505, "version");
    bad("GET / HTTP/0.9\r\n\r\n", 505);
    bad("GET / HTTP/3.0\r\n\r\n", 505);
    bad("GET / HTTP/9.1\r\n\r\n", 505);
    bad("GET / HTTP/1\r\n\r\n", 400);
    bad("GET / HTTP/1.\r\n\r\n", 400);
    bad("GET / HTTP/1.1x\r\nHost: h\r\n\r\n", 400);
    bad("GET / HTTP/1.10\r\nHost: h\r\n\r\n", 400);
    bad("GET / HTTP/11.1\r\nHost: h\r\n\r\n", 400);
    bad("GET / HTTP/1.a\r\n\r\n", 400);
    bad("GET / HTTP/a.1\r\n\r\n", 400);
    bad("GET / HTTP/1,1\r\n\r\n", 400);
    bad("GET / http/1.1\r\nHost: h\r\n\r\n", 400);
    bad("GET / HTTPS/1.1\r\nHost: h\r\n\r\n", 400);
    bad("GET / ICY\r\n\r\n", 400);
    bad_msg("GET /\r\n\r\n", 400, "missing HTTP version"); /* HTTP/0.9 style */
    bad("GET / \r\n\r\n", 400);
}

static void test_request_line_endings(void **state)
{
    (void)state;
    /* certain errors are reported as soon as their bytes are there */
    assert_int_equal(parse("GET / HTTP/1.1\n"), FLARE_PARSE_ERROR);
    assert_int_equal(head.status, 400);
    assert_int_equal(parse("GET / HTTP/1.1\rX"), FLARE_PARSE_ERROR);
    assert_int_equal(head.status, 400);
    assert_int_equal(parse("GET / HTTP/1.1\r"), FLARE_PARSE_PARTIAL);
    assert_int_equal(parse("GET / HTTP/2.0"), FLARE_PARSE_ERROR);
    assert_int_equal(head.status, 505);
    assert_int_equal(parse("GET /\x01"), FLARE_PARSE_ERROR);
    assert_int_equal(parse("GET / HTTQ"), FLARE_PARSE_ERROR);
    assert_int_equal(parse("G(ET"), FLARE_PARSE_ERROR);
    bad("GET / HTTP/1.1\nHost: h\n\n", 400);
    bad("GET / HTTP/1.1\r\rHost: h\r\n\r\n", 400);
    bad("GET / HTTP/1.1\r\nHost: h\r\n\n", 400);
    bad("GET / HTTP/1.1\r\nHost: h\n\r\n", 400);
    bad("GET / HTTP/1.1\r\nHost: h\r\n\r\r", 400);
}

static void test_leading_empty_lines(void **state)
{
    (void)state;
    const char *req = "\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n";
    ok(req);
    assert_view(head.method, "GET");
    assert_true(head.method.ptr == buf + 4);
    ok("\r\n\r\n\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n");
    bad("\r\n\r\n\r\n\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n", 400);
    bad("\nGET / HTTP/1.1\r\nHost: h\r\n\r\n", 400);
    bad("\r\rGET / HTTP/1.1\r\nHost: h\r\n\r\n", 400);
    bad(" GET / HTTP/1.1\r\nHost: h\r\n\r\n", 400);
}

/* -------------------------------------------------------------------------
 * field lines */

static void test_field_values(void **state)
{
    (void)state;
    ok("GET / HTTP/1.1\r\nHost: h\r\nA:  \t v a l \t \r\nB:\r\nC: \r\nD:x\r\n"
       "E: caf\xc3\xa9 \xff\r\nF: a\tb\r\n"
       "G: 0123456789abcdef0123456789\tabcdef 0123456789abcdef\t\r\n\r\n");
    assert_int_equal(head.nheaders, 8);
    assert_view(hdrs[1].value, "v a l");
    assert_view(hdrs[2].value, "");
    assert_inside(hdrs[2].value);
    assert_view(hdrs[3].value, "");
    assert_view(hdrs[4].value, "x");
    assert_view(hdrs[5].value, "caf\xc3\xa9 \xff");
    assert_view(hdrs[6].value, "a\tb");
    assert_view(hdrs[7].value, "0123456789abcdef0123456789\tabcdef 0123456789abcdef");
    assert_view(hdrs[7].name, "G");
}

static void test_bad_field_values(void **state)
{
    (void)state;
    char req[256];
    for (int c = 0; c < 0x20; c++) {
        if (c == '\t')
            continue;
        static const char *const fmt[] = { "GET / HTTP/1.1\r\nHost: h\r\nX: a%cb\r\n\r\n",
                                           "GET / HTTP/1.1\r\nX: 0123456789abcdef0123%cb\r\n\r\n",
                                           "GET / HTTP/1.1\r\nX: %c\r\n\r\n" };
        for (size_t f = 0; f < 3; f++) {
            int len = snprintf(req, sizeof(req), fmt[f], 'Z');
            *(char *)memchr(req, 'Z', (size_t)len) = (char)c;
            bad_lim(req, (size_t)len, 400, &default_limits);
        }
    }
    bad("GET / HTTP/1.1\r\nHost: h\r\nX: a\x7f\r\n\r\n", 400);
    bad("GET / HTTP/1.1\r\nHost: h\r\nX: 0123456789abcdef\x7f\r\n\r\n", 400);
    bad_msg("GET / HTTP/1.1\r\nHost: h\r\nX: a\rb\r\n\r\n", 400, "bare CR");
    bad_msg("GET / HTTP/1.1\r\nHost: h\r\nX: a\nb\r\n\r\n", 400, "bare LF");
    assert_int_equal(parse("GET / HTTP/1.1\r\nX: a\n"), FLARE_PARSE_ERROR);
    assert_int_equal(parse_lim("GET / HTTP/1.1\r\nX: a\x00", 22, &default_limits),
                     FLARE_PARSE_ERROR);
}

static void test_field_names(void **state)
{
    (void)state;
    ok("GET / HTTP/1.1\r\nhOsT: h\r\n!#$%&'*+-.^_`|~09azAZ: v\r\n"
       "X-A-Very-Long-Header-Name-Longer-Than-32: 1\r\n"
       "X-Long-Name-With_Underscore_After-16: 2\r\n\r\n");
    assert_int_equal(head.nheaders, 4);
    assert_view(hdrs[0].name, "hOsT");
    assert_view(head.host, "h");
    assert_view(hdrs[1].name, "!#$%&'*+-.^_`|~09azAZ");
    assert_view(hdrs[2].name, "X-A-Very-Long-Header-Name-Longer-Than-32");
    assert_view(hdrs[3].name, "X-Long-Name-With_Underscore_After-16");
    assert_view(hdrs[3].value, "2");

    bad_msg("GET / HTTP/1.1\r\nHost : h\r\n\r\n", 400, "whitespace before colon");
    bad("GET / HTTP/1.1\r\nHost\t: h\r\n\r\n", 400);
    bad("GET / HTTP/1.1\r\nHost: h\r\nX-Long-Header-Name-Over-16 : v\r\n\r\n", 400);
    bad("GET / HTTP/1.1\r\nHo st: h\r\n\r\n", 400);
    bad_msg("GET / HTTP/1.1\r\nHost: h\r\n: v\r\n\r\n", 400, "empty header name");
    bad_msg("GET / HTTP/1.1\r\nHost: h\r\nNoColon\r\n\r\n", 400, "without colon");
    bad_msg("GET / HTTP/1.1\r\nHost: h\r\nX(y): v\r\n\r\n", 400, "invalid character");
    bad("GET / HTTP/1.1\r\nHost: h\r\nX\x80: v\r\n\r\n", 400);
    bad("GET / HTTP/1.1\r\nHost: h\r\nX/Y: v\r\n\r\n", 400);
    bad("GET / HTTP/1.1\r\nHost: h\r\nX-Long-Header-Name-Over-16/: v\r\n\r\n", 400);
    bad("GET / HTTP/1.1\r\nHost: h\r\nX\nY: v\r\n\r\n", 400);
}

static void test_obs_fold(void **state)
{
    (void)state;
    bad_msg("GET / HTTP/1.1\r\nHost: h\r\nX: a\r\n b\r\n\r\n", 400, "folding");
    bad("GET / HTTP/1.1\r\nHost: h\r\nX: a\r\n\tb\r\n\r\n", 400);
    bad("GET / HTTP/1.1\r\n Host: h\r\n\r\n", 400);
}

static void test_host(void **state)
{
    (void)state;
    bad_msg("GET / HTTP/1.1\r\n\r\n", 400, "missing Host header");
    bad_msg("GET / HTTP/1.1\r\nX: y\r\n\r\n", 400, "missing Host header");
    ok("GET / HTTP/1.0\r\n\r\n");
    assert_int_equal(head.host.len, 0);
    ok("GET / HTTP/1.0\r\nHost: a.b\r\n\r\n");
    assert_view(head.host, "a.b");
    bad_msg("GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", 400, "duplicate Host");
    bad("GET / HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n", 400);
    bad("GET / HTTP/1.0\r\nHost: a\r\nHOST: b\r\n\r\n", 400);

    ok("GET / HTTP/1.1\r\nHost:\r\n\r\n"); /* RFC 9110 7.2: empty when no authority */
    assert_int_equal(head.host.len, 0);
    assert_non_null(head.host.ptr);
    ok("GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n");
    assert_view(head.host, "[::1]:8080");
    ok("GET / HTTP/1.1\r\nHost: xn--bcher-kva.example_1.com:443\r\n\r\n");
    assert_view(head.host, "xn--bcher-kva.example_1.com:443");
    ok("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    assert_view(head.host, "127.0.0.1");
    bad_msg("GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", 400, "invalid Host");
    bad("GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400);
    bad("GET / HTTP/1.1\r\nHost: user@a\r\n\r\n", 400);
    bad("GET / HTTP/1.1\r\nHost: a\\b\r\n\r\n", 400);
    bad("GET / HTTP/1.1\r\nHost: caf\xc3\xa9\r\n\r\n", 400);
}

/* The Host check has a 16-byte fast path and a table: they must agree on
 * every byte, in short and long values, at the start, middle and end. */
static void test_host_chars(void **state)
{
    (void)state;
    static const char allowed[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                  "0123456789-._~!$&'()*+,;=:[]%";
    char req[256];
    for (int c = 0x20; c < 0x100; c++) {
        if (c == 0x7f)
            continue;
        static const char *const fmt[] = {
            "GET / HTTP/1.1\r\nHost: a%cb\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: %cab\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a%c\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: abcdefghijklmn%c\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: abcdefghijklmno%c\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: abcdefghijklmnopqrstuvwxyz%c0123\r\n\r\n",
        };
        for (size_t f = 0; f < sizeof(fmt) / sizeof(fmt[0]); f++) {
            /* exact (scalar path near the end) and padded (16-byte path) */
            for (int pad = 0; pad < 2; pad++) {
                int len = snprintf(req, sizeof(req), fmt[f], 'Z');
                int head_len = len;
                *(char *)memchr(req, 'Z', (size_t)len) = (char)c;
                if (pad) {
                    memcpy(req + len, "0123456789abcdef0123", 20);
                    len += 20;
                }
                /* a SP at either end of the value is OWS, not host */
                int ows = c == ' ' && (f == 1 || f == 2 || f == 3 || f == 4);
                int want_ok = ows || strchr(allowed, c) != NULL;
                int rc = parse_lim(req, (size_t)len, &default_limits);
                if (want_ok ? rc != head_len : rc != FLARE_PARSE_ERROR || head.status != 400)
                    fail_msg("Host byte 0x%02x format %zu pad %d: rc %d", c, f, pad, rc);
            }
        }
    }
}

static void test_many_headers_views(void **state)
{
    (void)state;
    char req[4096];
    size_t n = (size_t)snprintf(req, sizeof(req), "POST /u HTTP/1.1\r\nHost: h\r\n");
    for (int i = 0; i < 40; i++)
        n += (size_t)snprintf(req + n, sizeof(req) - n, "X-Header-%d: value number %d\r\n", i, i);
    n += (size_t)snprintf(req + n, sizeof(req) - n, "\r\n");
    ok(req);
    assert_int_equal(head.nheaders, 41);
    for (int i = 0; i < 40; i++) {
        char name[32], value[32];
        snprintf(name, sizeof(name), "X-Header-%d", i);
        snprintf(value, sizeof(value), "value number %d", i);
        assert_view(hdrs[i + 1].name, name);
        assert_view(hdrs[i + 1].value, value);
    }
}

/* -------------------------------------------------------------------------
 * framing */

static void test_content_length(void **state)
{
    (void)state;
    ok("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n");
    assert_int_equal(head.content_length, 0);
    ok("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 123\r\n\r\n");
    assert_int_equal(head.content_length, 123);
    ok("POST / HTTP/1.1\r\nHost: h\r\ncontent-LENGTH: \t 42 \t\r\n\r\n");
    assert_int_equal(head.content_length, 42);
    ok("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 007\r\n\r\n");
    assert_int_equal(head.content_length, 7);
    ok("POST / HTTP/1.0\r\nContent-Length: 4611686018427387904\r\n\r\n"); /* 2^62 */
    assert_int_equal(head.content_length, (int64_t)1 << 62);
    ok("POST / HTTP/1.0\r\nContent-Length: 000000000000000000000000000001\r\n\r\n");
    assert_int_equal(head.content_length, 1);
    ok("GET / HTTP/1.1\r\nHost: h\r\nContent-Lengthy: 5, 5\r\nXContent-Length: x\r\n\r\n");
    assert_int_equal(head.content_length, -1);

    bad_msg("POST / HTTP/1.0\r\nContent-Length: 4611686018427387905\r\n\r\n", 400, "too large");
    bad("POST / HTTP/1.0\r\nContent-Length: 9223372036854775807\r\n\r\n", 400);
    bad("POST / HTTP/1.0\r\nContent-Length: 18446744073709551616\r\n\r\n", 400);
    bad("POST / HTTP/1.0\r\nContent-Length: 99999999999999999999999999999\r\n\r\n", 400);
    bad_msg("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: +5\r\n\r\n", 400, "Content-Length");
    bad("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n", 400);
    bad("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5, 5\r\n\r\n", 400);
    bad("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5 5\r\n\r\n", 400);
    bad("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: \r\n\r\n", 400);
    bad("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0x10\r\n\r\n", 400);
    bad("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1e3\r\n\r\n", 400);
    bad("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: \xd9\xa1\r\n\r\n", 400);
    bad_msg("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", 400,
            "duplicate Content-Length");
    bad("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\ncontent-length: 6\r\n\r\n", 400);
}

static void test_transfer_encoding(void **state)
{
    (void)state;
    ok("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n");
    assert_true(head.chunked);
    assert_int_equal(head.content_length, -1);
    ok("POST / HTTP/1.1\r\nHost: h\r\ntransfer-encoding:   CHUNKED \t\r\n\r\n");
    assert_true(head.chunked);
    ok("POST / HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_false(head.chunked);

    bad_msg("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501,
            "Transfer-Encoding not supported");
    bad("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: identity\r\n\r\n", 501);
    bad("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, chunked\r\n\r\n", 501);
    bad("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked;q=1\r\n\r\n", 501);
    bad("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: \r\n\r\n", 501);
    bad("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n"
        "Transfer-Encoding: chunked\r\n\r\n",
        501);
    bad_msg("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
            400, "both");
    bad("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
        400);
    bad_msg("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400, "HTTP/1.0");
}

static void test_connection(void **state)
{
    (void)state;
    ok("GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n");
    assert_false(head.keep_alive);
    ok("GET / HTTP/1.1\r\nHost: h\r\nConnection: Close\r\n\r\n");
    assert_false(head.keep_alive);
    ok("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    assert_true(head.keep_alive);
    ok("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n");
    assert_true(head.keep_alive);
    ok("GET / HTTP/1.0\r\nConnection: foo , keep-alive,bar\r\n\r\n");
    assert_true(head.keep_alive);
    ok("GET / HTTP/1.0\r\nConnection: keep-alives\r\n\r\n");
    assert_false(head.keep_alive);
    ok("GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n");
    assert_false(head.keep_alive);
    ok("GET / HTTP/1.1\r\nHost: h\r\nConnection: foo, CLOSE\r\n\r\n");
    assert_false(head.keep_alive);
    ok("GET / HTTP/1.1\r\nHost: h\r\nConnection: closed\r\n\r\n");
    assert_true(head.keep_alive);
    ok("GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n");
    assert_false(head.keep_alive);
    ok("GET / HTTP/1.1\r\nHost: h\r\nConnection:\r\n\r\n");
    assert_true(head.keep_alive);
    ok("GET / HTTP/1.0\r\n\r\n");
    assert_false(head.keep_alive);

    ok("GET /ws HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n");
    assert_true(head.upgrade);
    assert_true(head.keep_alive);
    ok("GET /ws HTTP/1.1\r\nHost: h\r\nUPGRADE: websocket\r\nConnection: keep-alive, "
       "upgrade\r\n\r\n");
    assert_true(head.upgrade);
    ok("GET /ws HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\n\r\n");
    assert_false(head.upgrade);
    ok("GET /ws HTTP/1.1\r\nHost: h\r\nConnection: upgrade\r\n\r\n");
    assert_false(head.upgrade);
    ok("GET /ws HTTP/1.1\r\nHost: h\r\nConnection: upgrade\r\nUpgrade:\r\n\r\n");
    assert_false(head.upgrade);
}

static void test_expect(void **state)
{
    (void)state;
    ok("POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n");
    assert_true(head.expect_continue);
    assert_int_equal(head.content_length, 3);
    ok("POST / HTTP/1.1\r\nHost: h\r\nexpect:  100-Continue \r\n\r\n");
    assert_true(head.expect_continue);
    ok("POST / HTTP/1.0\r\nExpect: 100-continue\r\n\r\n"); /* ignored in 1.0 */
    assert_false(head.expect_continue);
    ok("POST / HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_false(head.expect_continue);
    bad_msg("POST / HTTP/1.1\r\nHost: h\r\nExpect: foo\r\n\r\n", 417, "expectation");
    bad("POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue, foo\r\n\r\n", 417);
    bad("POST / HTTP/1.1\r\nHost: h\r\nExpect: 200-ok\r\n\r\n", 417);
    bad("POST / HTTP/1.1\r\nHost: h\r\nExpect:\r\n\r\n", 417);
}

/* -------------------------------------------------------------------------
 * limits */

static void test_request_line_limit(void **state)
{
    (void)state;
    /* "GET /aaa HTTP/1.1" is 64 bytes with a 51-byte target */
    char line[128], req[256];
    memset(line, 'a', sizeof(line));
    memcpy(line, "GET /", 5);
    memcpy(line + 55, " HTTP/1.1", 9);
    line[64] = '\0';
    snprintf(req, sizeof(req), "%s\r\nHost: h\r\n\r\n", line);

    flare_http_limits_t lim = { 64, 4096, 10 };
    ok_n(req, strlen(req), strlen(req), &lim);

    lim.max_request_line = 63;
    bad_lim(req, strlen(req), 414, &lim);
    assert_int_equal(parse_lim(req, 63, &lim), FLARE_PARSE_PARTIAL);
    assert_int_equal(parse_lim(req, 64, &lim), FLARE_PARSE_ERROR); /* no CRLF yet */
    assert_int_equal(head.status, 414);

    /* 414 before the CRLF arrives: a long target, no version yet */
    lim.max_request_line = 32;
    assert_int_equal(parse_lim(req, 32, &lim), FLARE_PARSE_PARTIAL);
    assert_int_equal(parse_lim(req, 33, &lim), FLARE_PARSE_ERROR);
    assert_int_equal(head.status, 414);
    assert_true(strstr(head.error, "too long") != NULL);

    /* a long method, too */
    lim.max_request_line = 8;
    assert_int_equal(parse_lim("ABCDEFGHIJ", 9, &lim), FLARE_PARSE_ERROR);
    assert_int_equal(head.status, 414);

    /* leading empty lines do not count */
    char req2[300];
    snprintf(req2, sizeof(req2), "\r\n\r\n%s", req);
    lim.max_request_line = 64;
    ok_n(req2, strlen(req2), strlen(req2), &lim);
}

static void test_head_limit(void **state)
{
    (void)state;
    const char *req = "GET / HTTP/1.1\r\nHost: h\r\nX: 0123456789\r\n\r\n";
    size_t n = strlen(req);
    flare_http_limits_t lim = { 8192, n, 10 };
    ok_n(req, n, n, &lim);
    /* a whole head one byte over */
    lim.max_head = n - 1;
    bad_lim(req, n, 431, &lim);
    assert_true(strstr(head.error, "too large") != NULL);
    /* partial input past the limit fails at once, at the limit it waits */
    assert_int_equal(parse_lim(req, n - 1, &lim), FLARE_PARSE_PARTIAL);
    assert_int_equal(parse_lim(req, n, &lim), FLARE_PARSE_ERROR);
    assert_int_equal(head.status, 431);
    /* a body after the head does not count */
    lim.max_head = n;
    char with_body[256];
    snprintf(with_body, sizeof(with_body), "%sbody bytes", req);
    assert_int_equal(parse_lim(with_body, strlen(with_body), &lim), (int)n);
    /* a limit inside the request line: the head is too large */
    lim.max_head = 10;
    assert_int_equal(parse_lim(req, 11, &lim), FLARE_PARSE_ERROR);
    assert_int_equal(head.status, 431);
}

static void test_header_count_limit(void **state)
{
    (void)state;
    const char *req = "GET / HTTP/1.1\r\nHost: h\r\nA: 1\r\nB: 2\r\n\r\n";
    flare_http_limits_t lim = { 8192, 65536, 3 };
    ok_n(req, strlen(req), strlen(req), &lim);
    assert_int_equal(head.nheaders, 3);
    lim.max_headers = 2;
    bad_lim(req, strlen(req), 431, &lim);
    assert_true(strstr(head.error, "too many header fields") != NULL);
    lim.max_headers = 0;
    ok_n("GET / HTTP/1.0\r\n\r\n", 18, 18, &lim);
    bad_lim("GET / HTTP/1.1\r\nHost: h\r\n\r\n", 27, 431, &lim);
}

/* -------------------------------------------------------------------------
 * streams */

static void test_pipelined(void **state)
{
    (void)state;
    const char *two = "GET /a HTTP/1.1\r\nHost: h\r\n\r\nPOST /b?x HTTP/1.1\r\nHost: h\r\n"
                      "Content-Length: 3\r\n\r\nabc";
    size_t first = strlen("GET /a HTTP/1.1\r\nHost: h\r\n\r\n");
    int rc = parse(two);
    assert_int_equal(rc, (int)first);
    assert_view(head.path, "/a");
    const char *rest = two + first;
    rc = parse(rest);
    assert_int_equal(rc, (int)(strlen(rest) - 3));
    assert_view(head.method, "POST");
    assert_view(head.path, "/b");
    assert_view(head.query, "x");
    assert_int_equal(head.content_length, 3);
    /* whatever follows a head is not looked at, even garbage */
    ok_n("GET / HTTP/1.1\r\nHost: h\r\n\r\n\x01\x02\n\n", 31, 27, &default_limits);
}

static void test_partial_prefixes(void **state)
{
    (void)state;
    /* ok() already checks every prefix; these shapes stress the edges */
    ok("OPTIONS * HTTP/1.0\r\n\r\n");
    ok("\r\nPUT /x?y HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\nExpect: 100-continue\r\n\r\n");
    ok("GET http://h.example/0123456789abcdef0123456789abcdef HTTP/1.1\r\nHost: h\r\n"
       "X-Long-Header-Name-Over-16-Bytes: 0123456789abcdef0123456789abcdef\t \r\n\r\n");
    ok("DELETE /r HTTP/1.1\r\nHost: h\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n");
}

static void test_error_struct(void **state)
{
    (void)state;
    assert_int_equal(parse("GET / HTTP/1.1\r\nHost: h\r\n\r\n"), 27);
    assert_int_equal(head.status, 0);
    assert_null(head.error);
    assert_int_equal(parse("GET / HTTP/1.1\r\nHost: h\r\n"), FLARE_PARSE_PARTIAL);
    assert_int_equal(head.status, 0);
    assert_int_equal(parse(""), FLARE_PARSE_PARTIAL);
    assert_int_equal(parse("\r"), FLARE_PARSE_PARTIAL);
}

/* -------------------------------------------------------------------------
 * head_ready */

static void test_head_ready(void **state)
{
    (void)state;
    const char *req = "GET / HTTP/1.1\r\nHost: h\r\nX: y\r\n\r\n";
    size_t n = strlen(req);
    size_t scanned = 0;
    for (size_t i = 1; i <= n; i++) {
        char *b = malloc(i);
        memcpy(b, req, i);
        size_t before = scanned;
        bool ready = flare__http_head_ready(b, i, &scanned);
        free(b);
        assert_true(scanned >= before && scanned <= i);
        assert_int_equal(ready, i == n);
    }
    /* the same LF never counts twice */
    assert_false(flare__http_head_ready(req, n, &scanned));

    /* all at once */
    scanned = 0;
    assert_true(flare__http_head_ready(req, n, &scanned));
    assert_int_equal(scanned, n);

#define READY(lit) flare__http_head_ready(lit, sizeof(lit) - 1, &scanned)
    scanned = 0;
    assert_true(READY("GET / HTTP/1.1\n"));
    scanned = 0;
    assert_true(READY("\n"));
    scanned = 0;
    assert_true(READY("GET / HTTP/1.1\r\nA: b\n\n"));
    scanned = 0;
    assert_false(READY("GET / HTTP/1.1\r\nA: b\r\n"));
    assert_int_equal(scanned, 22);
    assert_false(READY("GET / HTTP/1.1\r\nA: b\r\n\r"));
    assert_int_equal(scanned, 23);
    assert_true(READY("GET / HTTP/1.1\r\nA: b\r\n\r\n"));
    assert_int_equal(scanned, 24);
#undef READY
    scanned = 0;
    assert_false(flare__http_head_ready("", 0, &scanned));
}

/* A client sending one byte at a time: with head_ready gating, the parser
 * runs a bounded number of times and the whole costs O(n). */
static void test_slow_client(void **state)
{
    (void)state;
    const char *req = "\r\nGET /slow HTTP/1.1\r\nHost: h\r\nA: b\r\n\r\nGET /next";
    size_t n = strlen(req);
    size_t scanned = 0;
    int parses = 0, rc = FLARE_PARSE_PARTIAL;
    for (size_t i = 1; i <= n && rc == FLARE_PARSE_PARTIAL; i++) {
        if (!flare__http_head_ready(req, i, &scanned))
            continue;
        parses++;
        rc = parse_lim(req, i, &default_limits);
    }
    assert_int_equal(rc, (int)strlen("\r\nGET /slow HTTP/1.1\r\nHost: h\r\nA: b\r\n\r\n"));
    assert_int_equal(parses, 1);
    assert_view(head.path, "/slow");
}

static int teardown(void **state)
{
    (void)state;
    free(buf);
    buf = NULL;
    return 0;
}

/* http/hop.h: each hop-by-hop name in any case is its own bit; a name
 * that only shares a length, a prefix or a suffix is none. */
static void test_hop_fields(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        unsigned bit;
    } hop[] = {
        { "Connection", FLARE_HOP_CONNECTION },
        { "KEEP-ALIVE", FLARE_HOP_KEEP_ALIVE },
        { "proxy-Connection", FLARE_HOP_PROXY_CONNECTION },
        { "TE", FLARE_HOP_TE },
        { "trailer", FLARE_HOP_TRAILER },
        { "Transfer-Encoding", FLARE_HOP_TRANSFER_ENCODING },
        { "uPgRaDe", FLARE_HOP_UPGRADE },
    };
    unsigned all = 0;
    for (size_t i = 0; i < FLARE__ARRAY_SIZE(hop); i++) {
        assert_int_equal(flare__http_hop_field(flare_str(hop[i].name)), hop[i].bit);
        assert_int_equal(all & hop[i].bit, 0);
        all |= hop[i].bit;
    }
    static const char *const other[] = {
        "",
        "t",
        "tf",
        "tea",
        "upgrades",
        "referer",
        "trailers",
        "user-agent",
        "connectio",
        "keep_alive",
        "connection ",
        "content-length",
        "proxy-authorization",
        "transfer-encodinG2",
        "host",
    };
    for (size_t i = 0; i < FLARE__ARRAY_SIZE(other); i++)
        assert_int_equal(flare__http_hop_field(flare_str(other[i])), 0);
    /* the HTTP/2 subset: TE and Trailer are not in it */
    assert_int_equal(FLARE_HOP_CONN_SPECIFIC & (FLARE_HOP_TE | FLARE_HOP_TRAILER), 0);
    assert_int_equal(FLARE_HOP_CONN_SPECIFIC | FLARE_HOP_TE | FLARE_HOP_TRAILER, all);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_wrk_request, teardown),
        cmocka_unit_test_teardown(test_browser_request, teardown),
        cmocka_unit_test_teardown(test_methods, teardown),
        cmocka_unit_test_teardown(test_bad_methods, teardown),
        cmocka_unit_test_teardown(test_tchar, teardown),
        cmocka_unit_test_teardown(test_single_spaces, teardown),
        cmocka_unit_test_teardown(test_target_chars, teardown),
        cmocka_unit_test_teardown(test_path_query, teardown),
        cmocka_unit_test_teardown(test_path_escapes, teardown),
        cmocka_unit_test_teardown(test_absolute_form, teardown),
        cmocka_unit_test_teardown(test_asterisk_and_connect, teardown),
        cmocka_unit_test_teardown(test_versions, teardown),
        cmocka_unit_test_teardown(test_request_line_endings, teardown),
        cmocka_unit_test_teardown(test_leading_empty_lines, teardown),
        cmocka_unit_test_teardown(test_field_values, teardown),
        cmocka_unit_test_teardown(test_bad_field_values, teardown),
        cmocka_unit_test_teardown(test_field_names, teardown),
        cmocka_unit_test_teardown(test_obs_fold, teardown),
        cmocka_unit_test_teardown(test_host, teardown),
        cmocka_unit_test_teardown(test_host_chars, teardown),
        cmocka_unit_test_teardown(test_many_headers_views, teardown),
        cmocka_unit_test_teardown(test_content_length, teardown),
        cmocka_unit_test_teardown(test_transfer_encoding, teardown),
        cmocka_unit_test_teardown(test_connection, teardown),
        cmocka_unit_test_teardown(test_expect, teardown),
        cmocka_unit_test_teardown(test_request_line_limit, teardown),
        cmocka_unit_test_teardown(test_head_limit, teardown),
        cmocka_unit_test_teardown(test_header_count_limit, teardown),
        cmocka_unit_test_teardown(test_pipelined, teardown),
        cmocka_unit_test_teardown(test_partial_prefixes, teardown),
        cmocka_unit_test_teardown(test_error_struct, teardown),
        cmocka_unit_test_teardown(test_head_ready, teardown),
        cmocka_unit_test_teardown(test_slow_client, teardown),
        cmocka_unit_test(test_hop_fields),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
