/* compress.c: Accept-Encoding negotiation (RFC 9110 §12.5.3) rule by rule
 * and malformed values; the configuration checks; and the middleware on a
 * real server: what is compressed (and decodes back to the body), what is
 * left alone, Vary and the per-coding ETag. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <brotli/decode.h>
#include <cmocka.h>
#include <zlib.h>

#include <flare/compress.h>

#include "harness.h"

#define GZ FLARE_CODING_GZIP_BIT
#define BR FLARE_CODING_BR_BIT

static int pick(const char *v, unsigned offered)
{
    return flare_accept_encoding(v != NULL ? flare_str(v) : FLARE_STR_NULL, offered);
}

static void test_absent_and_empty(void **state)
{
    (void)state;
    assert_int_equal(pick(NULL, GZ | BR), FLARE_CODING_IDENTITY);
    assert_int_equal(pick("", GZ | BR), FLARE_CODING_IDENTITY);
    assert_int_equal(pick("  ", GZ | BR), FLARE_CODING_IDENTITY);
    assert_int_equal(pick(" , ,", GZ | BR), FLARE_CODING_IDENTITY);
}

static void test_listed_codings(void **state)
{
    (void)state;
    assert_int_equal(pick("gzip", GZ | BR), FLARE_CODING_GZIP);
    assert_int_equal(pick("br", GZ | BR), FLARE_CODING_BR);
    assert_int_equal(pick("GZIP", GZ | BR), FLARE_CODING_GZIP);
    assert_int_equal(pick("x-gzip", GZ | BR), FLARE_CODING_GZIP);
    assert_int_equal(pick("Br", GZ | BR), FLARE_CODING_BR);
    /* a coding not listed is not acceptable */
    assert_int_equal(pick("deflate", GZ | BR), FLARE_CODING_IDENTITY);
    assert_int_equal(pick("gzip", BR), FLARE_CODING_IDENTITY);
    assert_int_equal(pick("br", GZ), FLARE_CODING_IDENTITY);
    assert_int_equal(pick("deflate, gzip", GZ | BR), FLARE_CODING_GZIP);
    assert_int_equal(pick(",gzip,,", GZ | BR), FLARE_CODING_GZIP);
}

static void test_ties_prefer_br(void **state)
{
    (void)state;
    assert_int_equal(pick("gzip, deflate, br", GZ | BR), FLARE_CODING_BR);
    assert_int_equal(pick("gzip;q=0.8, br;q=0.8", GZ | BR), FLARE_CODING_BR);
    assert_int_equal(pick("*", GZ | BR), FLARE_CODING_BR);
    assert_int_equal(pick("*", GZ), FLARE_CODING_GZIP);
}

static void test_qvalues(void **state)
{
    (void)state;
    assert_int_equal(pick("gzip;q=1.0, br;q=0.5", GZ | BR), FLARE_CODING_GZIP);
    assert_int_equal(pick("gzip;q=0.001, br;q=0", GZ | BR), FLARE_CODING_GZIP);
    assert_int_equal(pick("br;q=0.9, gzip;q=0.95", GZ | BR), FLARE_CODING_GZIP);
    assert_int_equal(pick("gzip ; q=0.5 , br ;Q=0.4", GZ | BR), FLARE_CODING_GZIP);
    assert_int_equal(pick("gzip;q=1.000", GZ | BR), FLARE_CODING_GZIP);
    assert_int_equal(pick("gzip;q=0.", GZ | BR), FLARE_CODING_IDENTITY); /* "0." is 0 */
    /* q=0: not acceptable */
    assert_int_equal(pick("gzip;q=0", GZ | BR), FLARE_CODING_IDENTITY);
    assert_int_equal(pick("br;q=0, gzip;q=0.000", GZ | BR), FLARE_CODING_IDENTITY);
    /* listed twice: the higher weight */
    assert_int_equal(pick("gzip;q=0, gzip;q=0.5", GZ), FLARE_CODING_GZIP);
}

static void test_star(void **state)
{
    (void)state;
    /* "*" stands for the codings not listed */
    assert_int_equal(pick("gzip;q=0, *", GZ | BR), FLARE_CODING_BR);
    assert_int_equal(pick("br;q=0, *;q=0.5", GZ | BR), FLARE_CODING_GZIP);
    assert_int_equal(pick("*;q=0.5, gzip", GZ | BR), FLARE_CODING_GZIP);
    assert_int_equal(pick("*;q=0", GZ | BR), FLARE_CODING_NONE);
    assert_int_equal(pick("*;q=0, identity", GZ | BR), FLARE_CODING_IDENTITY);
    assert_int_equal(pick("*;q=0, gzip", GZ | BR), FLARE_CODING_GZIP);
}

static void test_identity(void **state)
{
    (void)state;
    /* identity listed above every coding: the client prefers it */
    assert_int_equal(pick("identity, gzip;q=0.5", GZ | BR), FLARE_CODING_IDENTITY);
    assert_int_equal(pick("identity;q=0.5, gzip", GZ | BR), FLARE_CODING_GZIP);
    assert_int_equal(pick("identity, gzip", GZ | BR), FLARE_CODING_GZIP); /* tie: the coding */
    /* refused identity */
    assert_int_equal(pick("identity;q=0", GZ | BR), FLARE_CODING_NONE);
    assert_int_equal(pick("identity;q=0, gzip", GZ | BR), FLARE_CODING_GZIP);
    assert_int_equal(pick("identity;q=0, deflate", GZ | BR), FLARE_CODING_NONE);
    assert_int_equal(pick("identity;q=0, br", GZ), FLARE_CODING_NONE);
    assert_int_equal(pick("identity;q=0, *;q=0", GZ | BR), FLARE_CODING_NONE);
    /* "*;q=0" does not refuse an identity that is listed */
    assert_int_equal(pick("identity;q=0.1, *;q=0", GZ | BR), FLARE_CODING_IDENTITY);
}

static void test_malformed(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "gzip;",         "gzip;q",    "gzip;q=",    "gzip;q=2",     "gzip;q=1.5",  "gzip;q=1.0001",
        "gzip;q=0.1234", "gzip;q=-1", "gzip;q=.5",  "gzip;level=1", "gzip; q = 1", "gzip br",
        "gzip;q=0.5 x",  "\"gzip\"",  "gzip;q=0x1", "gzip;q=1.01",  "g(z)ip",      ";q=1",
        "gzip;q=0.5;",   "gzip\x01",  "gzip;q=1,@", "gzip/1",       "gzip;;q=1",   "gzip;q=1 ;",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (pick(bad[i], GZ | BR) != FLARE_EINVAL)
            fail_msg("\"%s\" should be malformed, got %d", bad[i], pick(bad[i], GZ | BR));
    }
    /* a NUL in the middle of the view is not a terminator */
    flare_str_t v = { "gzip\0br", 7 };
    assert_int_equal(flare_accept_encoding(v, GZ | BR), FLARE_EINVAL);
    /* only a view: bytes past len are not read */
    flare_str_t cut = { "gzip;q=0", 4 };
    assert_int_equal(flare_accept_encoding(cut, GZ | BR), FLARE_CODING_GZIP);
}

static void test_config_checks(void **state)
{
    (void)state;
    flare_app_t *app = flare_app_new(NULL);
    assert_non_null(app);
    flare_middleware_t mw;
    flare_compress_config_t c = { .gzip_level = 10 };
    assert_int_equal(flare_compress(app, &c, &mw), FLARE_EINVAL);
    assert_non_null(strstr(flare_last_error(), "gzip_level"));
    c = (flare_compress_config_t){ .br_quality = 12 };
    assert_int_equal(flare_compress(app, &c, &mw), FLARE_EINVAL);
    assert_non_null(strstr(flare_last_error(), "br_quality"));
    c = (flare_compress_config_t){ .gzip_level = -1 };
    assert_int_equal(flare_compress(app, &c, &mw), FLARE_EINVAL);
    c = (flare_compress_config_t){ .no_gzip = true, .no_br = true };
    assert_int_equal(flare_compress(app, &c, &mw), FLARE_EINVAL);
    static const char *const bad_types[][2] = { { "", NULL },
                                                { "text", NULL },
                                                { "/json", NULL },
                                                { "text/a*b", NULL },
                                                { "te\nxt/a", NULL } };
    for (size_t i = 0; i < sizeof(bad_types) / sizeof(bad_types[0]); i++) {
        c = (flare_compress_config_t){ .types = bad_types[i] };
        assert_int_equal(flare_compress(app, &c, &mw), FLARE_EINVAL);
        assert_non_null(strstr(flare_last_error(), "types[0]"));
    }
    assert_int_equal(flare_compress(NULL, NULL, &mw), FLARE_EINVAL);
    assert_int_equal(flare_compress(app, NULL, NULL), FLARE_EINVAL);
    /* zeroed: all defaults; twice on one app shares the worker state */
    assert_int_equal(flare_compress(app, NULL, &mw), 0);
    assert_string_equal(mw.name, "compress");
    c = (flare_compress_config_t){ .gzip_level = 9, .br_quality = 11 };
    assert_int_equal(flare_compress(app, &c, &mw), 0);
    flare_app_free(app);
}

/* ---- the middleware on a server ---- */

static char big[8192];

static bool is(flare_str_t s, const char *lit)
{
    return s.len == strlen(lit) && memcmp(s.ptr, lit, s.len) == 0;
}

static void fill_big(void)
{
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = "abcdefghij klmnopq\n"[i % 19];
}

static int h_text(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    flare_str_t status = flare_req_query_param(req, "status");
    flare_str_t etag = flare_req_query_param(req, "etag");
    flare_str_t type = flare_req_query_param(req, "type");
    flare_str_t len = flare_req_query_param(req, "len");
    int st = 200;
    if (status.len == 3)
        st = (status.ptr[0] - '0') * 100 + (status.ptr[1] - '0') * 10 + (status.ptr[2] - '0');
    size_t n = sizeof(big);
    if (len.ptr != NULL) {
        n = 0;
        for (size_t i = 0; i < len.len; i++)
            n = n * 10 + (size_t)(len.ptr[i] - '0');
    }
    if (is(etag, "strong"))
        flare_res_header(res, FLARE_STR("ETag"), FLARE_STR("\"v1\""));
    else if (is(etag, "weak"))
        flare_res_header(res, FLARE_STR("ETag"), FLARE_STR("W/\"v1\""));
    else if (is(etag, "bad"))
        flare_res_header(res, FLARE_STR("ETag"), FLARE_STR("v1"));
    if (flare_req_query_param(req, "encoded").ptr != NULL)
        flare_res_header(res, FLARE_STR("Content-Encoding"), FLARE_STR("gzip"));
    if (flare_req_query_param(req, "range").ptr != NULL)
        flare_res_header(res, FLARE_STR("Content-Range"), FLARE_STR("bytes 0-99/8192"));
    if (flare_req_query_param(req, "ref").ptr != NULL)
        return flare_res_send_ref(res, st, type.ptr != NULL ? type : FLARE_STR("text/html"),
                                  (flare_str_t){ big, n }, NULL, NULL);
    return flare_res_send(res, st, type.ptr != NULL ? type : FLARE_STR("text/html"),
                          (flare_str_t){ big, n });
}

static int h_stream(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    (void)ud;
    int rc = flare_res_begin(res, 200, FLARE_STR("application/json"));
    for (int i = 0; rc == 0 && i < 4; i++)
        rc = flare_res_write(res, (flare_str_t){ big + i * 2048, 2048 });
    return rc != 0 ? rc : flare_res_end(res);
}

static harness_t H;

static int setup_server(void **state)
{
    (void)state;
    fill_big();
    H.app = flare_app_new(NULL);
    if (H.app == NULL)
        return -1;
    flare_middleware_t mw;
    if (flare_compress(H.app, NULL, &mw) != 0 ||
        flare_route_mw(H.app, FLARE_METHOD_GET, "/t", h_text, NULL, &mw, 1) != 0 ||
        flare_route_mw(H.app, FLARE_METHOD_GET, "/s", h_stream, NULL, &mw, 1) != 0 ||
        flare_get(H.app, "/plain", h_text, NULL) != 0)
        return -1;
    return harness_start(&H);
}

static int teardown_server(void **state)
{
    (void)state;
    int rc = harness_stop(&H);
    flare_app_free(H.app);
    return rc;
}

typedef struct reply {
    char *raw;
    size_t len;
    char *body; /* into raw */
    size_t body_len;
} reply_t;

static reply_t get(const char *target, const char *extra)
{
    char req[1024];
    snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n%s\r\n", target,
             extra);
    reply_t r = { 0 };
    int fd = loopback_connect(H.port);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, req, strlen(req)), (ssize_t)strlen(req));
    size_t cap = 1 << 16;
    r.raw = malloc(cap + 1);
    ssize_t n;
    while (r.len < cap && (n = read(fd, r.raw + r.len, cap - r.len)) > 0)
        r.len += (size_t)n;
    close(fd);
    r.raw[r.len] = '\0';
    char *e = memmem(r.raw, r.len, "\r\n\r\n", 4);
    assert_non_null(e);
    e[2] = '\0'; /* the head becomes a C string */
    r.body = e + 4;
    r.body_len = r.len - (size_t)(r.body - r.raw);
    return r;
}

/* de-chunks in place */
static void dechunk(reply_t *r)
{
    char *in = r->body, *out = r->body, *end = r->body + r->body_len;
    for (;;) {
        unsigned long n = strtoul(in, &in, 16);
        in += 2;
        if (n == 0 || in + n > end)
            break;
        memmove(out, in, n);
        out += n;
        in += n + 2;
    }
    r->body_len = (size_t)(out - r->body);
}

static void assert_gunzips_to(const reply_t *r, const char *want, size_t want_len)
{
    unsigned char *out = malloc(want_len + 16);
    z_stream z = { 0 };
    assert_int_equal(inflateInit2(&z, 15 + 16), Z_OK);
    z.next_in = (Bytef *)r->body;
    z.avail_in = (uInt)r->body_len;
    z.next_out = out;
    z.avail_out = (uInt)want_len + 16;
    assert_int_equal(inflate(&z, Z_FINISH), Z_STREAM_END);
    assert_int_equal(z.total_out, want_len);
    assert_memory_equal(out, want, want_len);
    inflateEnd(&z);
    free(out);
}

static void assert_unbrotlis_to(const reply_t *r, const char *want, size_t want_len)
{
    uint8_t *out = malloc(want_len + 16);
    size_t n = want_len + 16;
    assert_int_equal(BrotliDecoderDecompress(r->body_len, (const uint8_t *)r->body, &n, out),
                     BROTLI_DECODER_RESULT_SUCCESS);
    assert_int_equal(n, want_len);
    assert_memory_equal(out, want, want_len);
    free(out);
}

static void test_gzip_and_br_bodies(void **state)
{
    (void)state;
    reply_t r = get("/t", "Accept-Encoding: gzip\r\n");
    assert_non_null(strstr(r.raw, "\r\nContent-Encoding: gzip\r\n"));
    assert_non_null(strstr(r.raw, "\r\nVary: Accept-Encoding\r\n"));
    assert_true(r.body_len < sizeof(big) / 4);
    assert_gunzips_to(&r, big, sizeof(big));
    free(r.raw);
    r = get("/t?ref=1", "Accept-Encoding: gzip;q=0.5, br\r\n");
    assert_non_null(strstr(r.raw, "\r\nContent-Encoding: br\r\n"));
    assert_unbrotlis_to(&r, big, sizeof(big));
    free(r.raw);
    /* the worker's zlib state again (deflateReset): same bytes out */
    for (int i = 0; i < 3; i++) {
        r = get("/t?ref=1", "Accept-Encoding: x-gzip\r\n");
        assert_non_null(strstr(r.raw, "\r\nContent-Encoding: gzip\r\n"));
        assert_gunzips_to(&r, big, sizeof(big));
        free(r.raw);
    }
}

static void test_streamed_body(void **state)
{
    (void)state;
    reply_t r = get("/s", "Accept-Encoding: gzip\r\n");
    assert_non_null(strstr(r.raw, "\r\nContent-Encoding: gzip\r\n"));
    assert_non_null(strstr(r.raw, "\r\nTransfer-Encoding: chunked\r\n"));
    dechunk(&r);
    assert_gunzips_to(&r, big, sizeof(big));
    free(r.raw);
    r = get("/s", "Accept-Encoding: br\r\n");
    assert_non_null(strstr(r.raw, "\r\nContent-Encoding: br\r\n"));
    dechunk(&r);
    assert_unbrotlis_to(&r, big, sizeof(big));
    free(r.raw);
    r = get("/s", "");
    assert_null(strstr(r.raw, "Content-Encoding"));
    assert_non_null(strstr(r.raw, "\r\nVary: Accept-Encoding\r\n"));
    dechunk(&r);
    assert_int_equal(r.body_len, sizeof(big));
    assert_memory_equal(r.body, big, sizeof(big));
    free(r.raw);
}

static void assert_identity(const char *target, const char *extra, size_t len)
{
    reply_t r = get(target, extra);
    if (strstr(r.raw, "Content-Encoding") != NULL && strstr(target, "encoded") == NULL)
        fail_msg("%s (%s) was encoded:\n%s", target, extra, r.raw);
    assert_non_null(strstr(r.raw, "\r\nVary: Accept-Encoding\r\n"));
    if (len != (size_t)-1) {
        assert_int_equal(r.body_len, len);
        assert_memory_equal(r.body, big, len);
    }
    free(r.raw);
}

static void test_left_alone(void **state)
{
    (void)state;
    const char *ae = "Accept-Encoding: gzip, br\r\n";
    assert_identity("/t", "", sizeof(big));                              /* no header */
    assert_identity("/t", "Accept-Encoding: deflate\r\n", sizeof(big));  /* not offered */
    assert_identity("/t", "Accept-Encoding: gzip;q=2\r\n", sizeof(big)); /* malformed */
    /* identity refused, nothing acceptable: identity anyway, not 406 */
    reply_t r = get("/t", "Accept-Encoding: identity;q=0, deflate\r\n");
    assert_non_null(strstr(r.raw, "HTTP/1.1 200 "));
    assert_null(strstr(r.raw, "Content-Encoding"));
    free(r.raw);
    assert_identity("/t?len=255", ae, 255);                /* below min_size */
    assert_identity("/t?type=image/png", ae, sizeof(big)); /* type not allowed */
    assert_identity("/t?type=application/octet-stream", ae, sizeof(big));
    assert_identity("/t?status=206&range=1", ae, sizeof(big));
    assert_identity("/t?range=1", ae, sizeof(big));
    assert_identity("/t?status=204", ae, 0);
    assert_identity("/t?status=304&etag=strong", ae, 0);
    r = get("/t?encoded=1", ae); /* already encoded by the handler: untouched */
    assert_non_null(strstr(r.raw, "\r\nContent-Encoding: gzip\r\n"));
    assert_null(strstr(r.raw, "Content-Encoding: br"));
    assert_int_equal(r.body_len, sizeof(big));
    assert_memory_equal(r.body, big, sizeof(big));
    free(r.raw);
    /* HEAD: GET's header fields (RFC 9110 §9.3.2), the coded length, no body */
    r = get("/t", "Accept-Encoding: gzip\r\n");
    char want_len[48];
    snprintf(want_len, sizeof(want_len), "\r\nContent-Length: %zu\r\n", r.body_len);
    assert_true(r.body_len < sizeof(big));
    free(r.raw);
    char *head = harness_roundtrip(&H, "HEAD /t HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n"
                                       "Connection: close\r\n\r\n");
    assert_non_null(strstr(head, "HTTP/1.1 200 "));
    assert_non_null(strstr(head, "\r\nContent-Encoding: gzip\r\n"));
    assert_non_null(strstr(head, want_len));
    assert_non_null(strstr(head, "\r\nVary: Accept-Encoding\r\n"));
    assert_int_equal(strlen(strstr(head, "\r\n\r\n")), 4); /* nothing after the head */
    free(head);
    /* a route without the middleware: no Vary, no coding */
    r = get("/plain", ae);
    assert_null(strstr(r.raw, "Vary"));
    assert_null(strstr(r.raw, "Content-Encoding"));
    free(r.raw);
    /* structured suffix types are in the default list */
    r = get("/t?type=application/ld%2Bjson;%20charset=utf-8", ae);
    assert_non_null(strstr(r.raw, "\r\nContent-Encoding: br\r\n"));
    free(r.raw);
}

static void test_etag_per_coding(void **state)
{
    (void)state;
    reply_t r = get("/t?etag=strong", "Accept-Encoding: gzip\r\n");
    assert_non_null(strstr(r.raw, "\r\nETag: \"v1-gz\"\r\n"));
    free(r.raw);
    r = get("/t?etag=strong", "Accept-Encoding: br\r\n");
    assert_non_null(strstr(r.raw, "\r\nETag: \"v1-br\"\r\n"));
    free(r.raw);
    r = get("/t?etag=weak", "Accept-Encoding: gzip\r\n");
    assert_non_null(strstr(r.raw, "\r\nETag: W/\"v1-gz\"\r\n"));
    free(r.raw);
    r = get("/t?etag=strong", "");
    assert_non_null(strstr(r.raw, "\r\nETag: \"v1\"\r\n"));
    free(r.raw);
    r = get("/t?etag=bad", "Accept-Encoding: gzip\r\n"); /* dropped rather than shared */
    assert_null(strstr(r.raw, "ETag"));
    assert_non_null(strstr(r.raw, "\r\nContent-Encoding: gzip\r\n"));
    free(r.raw);
}

int main(void)
{
    const struct CMUnitTest parse[] = {
        cmocka_unit_test(test_absent_and_empty),
        cmocka_unit_test(test_listed_codings),
        cmocka_unit_test(test_ties_prefer_br),
        cmocka_unit_test(test_qvalues),
        cmocka_unit_test(test_star),
        cmocka_unit_test(test_identity),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_config_checks),
    };
    const struct CMUnitTest server[] = {
        cmocka_unit_test(test_gzip_and_br_bodies),
        cmocka_unit_test(test_streamed_body),
        cmocka_unit_test(test_left_alone),
        cmocka_unit_test(test_etag_per_coding),
    };
    int rc = cmocka_run_group_tests_name("accept-encoding", parse, NULL, NULL);
    rc |= cmocka_run_group_tests_name("middleware", server, setup_server, teardown_server);
    return rc;
}
