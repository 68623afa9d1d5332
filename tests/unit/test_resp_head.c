/* The HTTP/1.1 response-head parser (http1/resp_head.h): status lines,
 * fields, framing decisions, the refusals that keep a connection carrying
 * several responses in step, limits, and the same answer for every prefix.
 * Inputs are copied into buffers of their exact size for ASan. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "flare/common.h"
#include "http1/resp_head.h"

static const flare_http_limits_t limits = { .max_request_line = 256,
                                            .max_head = 1024,
                                            .max_headers = 8 };

static flare_header_t fields[8];
static flare_resp_head_t h;

/* Parses s (whole) with an exact-size copy; checks that every prefix gives
 * PARTIAL or the same result. Returns the whole's result. */
static int parse_ex(const char *s, bool head_request)
{
    size_t len = strlen(s);
    int whole = 0;
    const char *whole_err = NULL;
    for (size_t cut = 0; cut <= len; cut++) {
        char *copy = malloc(cut ? cut : 1);
        assert_non_null(copy);
        memcpy(copy, s, cut);
        h = (flare_resp_head_t){ .headers = fields };
        int rc = flare__http_parse_resp_head(copy, cut, &limits, head_request, &h);
        free(copy);
        if (cut == len) {
            whole = rc;
            whole_err = h.error;
        } else if (rc > 0) {
            /* the head is complete before the input ends (a body follows):
             * the whole gives the same length */
            h = (flare_resp_head_t){ .headers = fields };
            assert_int_equal(flare__http_parse_resp_head(s, len, &limits, head_request, &h), rc);
            return rc;
        } else if (rc != FLARE_PARSE_PARTIAL) {
            /* a prefix that decides an error decides as the whole will */
            whole_err = h.error;
            whole = rc;
            /* the whole must give the same error */
            char *all = malloc(len);
            assert_non_null(all);
            memcpy(all, s, len);
            h = (flare_resp_head_t){ .headers = fields };
            assert_int_equal(flare__http_parse_resp_head(all, len, &limits, head_request, &h),
                             FLARE_PARSE_ERROR);
            assert_string_equal(h.error, whole_err);
            free(all);
            return whole;
        }
    }
    /* re-parse the whole into h for the caller, from the literal */
    h = (flare_resp_head_t){ .headers = fields };
    int rc = flare__http_parse_resp_head(s, len, &limits, head_request, &h);
    assert_int_equal(rc, whole);
    if (rc == FLARE_PARSE_ERROR)
        assert_string_equal(h.error, whole_err);
    return rc;
}

static int parse(const char *s)
{
    return parse_ex(s, false);
}

static void assert_str(flare_str_t v, const char *want)
{
    assert_int_equal(v.len, strlen(want));
    assert_memory_equal(v.ptr, want, v.len);
}

static void test_simple(void **state)
{
    (void)state;
    const char *r = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A:  b c \r\n\r\nhello";
    assert_int_equal(parse(r), (int)(strlen(r) - 5));
    assert_int_equal(h.status, 200);
    assert_int_equal(h.minor, 1);
    assert_str(h.reason, "OK");
    assert_int_equal(h.nheaders, 2);
    assert_str(h.headers[1].name, "X-A");
    assert_str(h.headers[1].value, "b c");
    assert_int_equal(h.body, FLARE_RESP_BODY_LENGTH);
    assert_int_equal(h.content_length, 5);
    assert_true(h.keep_alive);
    assert_false(h.upgrade);
}

static void test_status_lines(void **state)
{
    (void)state;
    assert_true(parse("HTTP/1.1 404 Not  Found\t!\r\nContent-Length: 0\r\n\r\n") > 0);
    assert_int_equal(h.status, 404);
    assert_str(h.reason, "Not  Found\t!");
    assert_true(parse("HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n") > 0); /* no reason */
    assert_int_equal(h.reason.len, 0);
    assert_true(parse("HTTP/1.1 200 \r\nContent-Length: 0\r\n\r\n") > 0); /* empty reason */
    assert_true(parse("HTTP/1.9 200 OK\r\nContent-Length: 0\r\n\r\n") > 0);
    assert_int_equal(h.minor, 1);

    const char *bad[] = {
        "HTTP/2.0 200 OK\r\n\r\n",   "HTTP/1.1 20 OK\r\n\r\n",      "HTTP/1.1 2000 OK\r\n\r\n",
        "HTTP/1.1 099 OK\r\n\r\n",   "HTTP/1.1 600 OK\r\n\r\n",     "http/1.1 200 OK\r\n\r\n",
        "HTTP/1.1  200 OK\r\n\r\n",  "HTTP/1.1 200 O\x01K\r\n\r\n", "HTTP/1.1 200 OK\n\r\n",
        "HTTP/1.1 200 O\rK\r\n\r\n", "ICY 200 OK\r\n\r\n",          "HTTP/1.1 2x0 OK\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(parse(bad[i]), FLARE_PARSE_ERROR);
        assert_non_null(h.error);
    }
}

static void test_framing(void **state)
{
    (void)state;
    assert_true(parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n") > 0);
    assert_int_equal(h.body, FLARE_RESP_BODY_CHUNKED);
    assert_true(h.keep_alive);
    assert_true(parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: ,Chunked ,\r\n\r\n") > 0);
    assert_int_equal(h.body, FLARE_RESP_BODY_CHUNKED);

    /* no framing: until close */
    assert_true(parse("HTTP/1.1 200 OK\r\n\r\n") > 0);
    assert_int_equal(h.body, FLARE_RESP_BODY_CLOSE);
    assert_false(h.keep_alive);

    /* no body whatever the fields say */
    assert_true(parse("HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n") > 0);
    assert_int_equal(h.body, FLARE_RESP_BODY_NONE);
    assert_true(h.keep_alive);
    assert_true(parse("HTTP/1.1 304 Not Modified\r\nContent-Length: 99\r\n\r\n") > 0);
    assert_int_equal(h.body, FLARE_RESP_BODY_NONE);
    assert_int_equal(h.content_length, 99);
    assert_true(parse("HTTP/1.1 100 Continue\r\n\r\n") > 0);
    assert_int_equal(h.body, FLARE_RESP_BODY_NONE);
    assert_true(parse_ex("HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n", true) > 0);
    assert_int_equal(h.body, FLARE_RESP_BODY_NONE);
    assert_true(parse_ex("HTTP/1.1 200 OK\r\n\r\n", true) > 0);
    assert_int_equal(h.body, FLARE_RESP_BODY_NONE);
    assert_true(h.keep_alive);

    /* equal Content-Length values count once */
    assert_true(parse("HTTP/1.1 200 OK\r\nContent-Length: 7, 7\r\nContent-Length: 7\r\n\r\n") > 0);
    assert_int_equal(h.content_length, 7);
    assert_true(parse("HTTP/1.1 200 OK\r\nContent-Length: 9223372036854775807\r\n\r\n") > 0);
    assert_int_equal(h.content_length, INT64_MAX);
}

static void test_smuggling_refused(void **state)
{
    (void)state;
    const char *bad[] = {
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 0x5\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length:\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 9223372036854775808\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked;x=1\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding:\r\n\r\n",
        "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length : 5\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX: a\r\n folded\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX: a\nContent-Length: 5\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX: a\rContent-Length: 5\r\n\r\n",
        "HTTP/1.1 200 OK\r\n: empty\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX y: z\r\n\r\n",
        "HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
        "HTTP/1.1 200 OK\r\n\r\r\n",
        "HTTP/1.1 200 OK\r\n\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(parse(bad[i]), FLARE_PARSE_ERROR);
        assert_non_null(h.error);
    }
    /* the NUL in a value, with its real length */
    static const char nul[] = "HTTP/1.1 200 OK\r\nX: a\0b\r\n\r\n";
    h = (flare_resp_head_t){ .headers = fields };
    assert_int_equal(flare__http_parse_resp_head(nul, sizeof(nul) - 1, &limits, false, &h),
                     FLARE_PARSE_ERROR);
    assert_string_equal(h.error, "bad field value");
}

static void test_connection(void **state)
{
    (void)state;
    assert_true(parse("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n") > 0);
    assert_false(h.keep_alive);
    assert_true(parse("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n") > 0);
    assert_false(h.keep_alive);
    assert_int_equal(h.minor, 0);
    assert_true(parse("HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 0\r\n\r\n") >
                0);
    assert_true(h.keep_alive);
    assert_true(parse("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n"
                      "Upgrade: websocket\r\n\r\n") > 0);
    assert_true(h.upgrade);
    assert_int_equal(h.body, FLARE_RESP_BODY_NONE);
}

static void test_limits(void **state)
{
    (void)state;
    char big[2048];
    /* a status line of exactly max_request_line bytes passes, one more fails */
    int n = snprintf(big, sizeof(big), "HTTP/1.1 200 ");
    memset(big + n, 'r', 256 - (size_t)n);
    strcpy(big + 256, "\r\nContent-Length: 0\r\n\r\n");
    assert_true(parse(big) > 0);
    memset(big + n, 'r', 257 - (size_t)n);
    strcpy(big + 257, "\r\nContent-Length: 0\r\n\r\n");
    assert_int_equal(parse(big), FLARE_PARSE_ERROR);
    assert_string_equal(h.error, "status line too long");

    /* nine fields: one too many */
    strcpy(big, "HTTP/1.1 200 OK\r\n");
    for (int i = 0; i < 9; i++)
        strcat(big, "A: b\r\n");
    strcat(big, "\r\n");
    assert_int_equal(parse(big), FLARE_PARSE_ERROR);
    assert_string_equal(h.error, "too many header fields");

    /* a head over max_head, with or without its end */
    strcpy(big, "HTTP/1.1 200 OK\r\nX: ");
    size_t at = strlen(big);
    memset(big + at, 'v', 1100);
    strcpy(big + at + 1100, "\r\n\r\n");
    assert_int_equal(parse(big), FLARE_PARSE_ERROR);
    assert_string_equal(h.error, "response head too large");
    big[at + 1100] = '\0';
    assert_int_equal(parse(big), FLARE_PARSE_ERROR);
    assert_string_equal(h.error, "response head too large");
}

static void test_next_response_after_body(void **state)
{
    (void)state;
    /* two responses back to back: the head length says where the first's
     * body starts; the next head parses from after it */
    const char *two = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi"
                      "HTTP/1.1 404 Nope\r\nContent-Length: 0\r\n\r\n";
    h = (flare_resp_head_t){ .headers = fields };
    int n = flare__http_parse_resp_head(two, strlen(two), &limits, false, &h);
    assert_true(n > 0);
    assert_memory_equal(two + n, "hi", 2);
    const char *next = two + n + h.content_length;
    h = (flare_resp_head_t){ .headers = fields };
    assert_true(flare__http_parse_resp_head(next, strlen(next), &limits, false, &h) > 0);
    assert_int_equal(h.status, 404);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_simple),
        cmocka_unit_test(test_status_lines),
        cmocka_unit_test(test_framing),
        cmocka_unit_test(test_smuggling_refused),
        cmocka_unit_test(test_connection),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_next_response_after_body),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
