/* web/: built-in middleware (CORS, security headers, rate limit, request
 * id), request attributes and the peer address, over real sockets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <flare/flare.h>

#include "harness.h"

static harness_t h;
static const char ptr_tag[] = "thing";
/* The same text at another address. Not const: a compiler may give a const
 * array and an equal string literal one address (clang 14 does), so a
 * literal "thing" would not be another tag. */
static char other_tag[] = "thing";

static int h_ok(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    flare_str_t id = FLARE_STR_NULL;
    if (flare_req_get_str(req, FLARE_REQUEST_ID_ATTR, &id) != 0)
        id = FLARE_STR("none");
    return flare_res_send(res, 200, FLARE_STR("text/plain"), id);
}

static int h_attrs(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    static int thing;
    assert_int_equal(flare_req_set_int(req, "n", 42), 0);
    assert_int_equal(flare_req_set_str(req, "s", FLARE_STR("text")), 0);
    /* a length no view can have is refused, not wrapped into a 0-byte copy */
    assert_int_equal(flare_req_set_str(req, "w", (flare_str_t){ "x", SIZE_MAX }), FLARE_EINVAL);
    assert_int_equal(flare_req_set_ptr(req, "p", ptr_tag, &thing), 0);
    assert_int_equal(flare_req_set_ptr(req, "p2", NULL, &thing), FLARE_EINVAL);
    int64_t n = 0;
    flare_str_t s;
    assert_int_equal(flare_req_get_int(req, "n", &n), 0);
    assert_int_equal(n, 42);
    assert_int_equal(flare_req_get_str(req, "n", &s), FLARE_ENOTFOUND); /* mistyped: not found */
    assert_int_equal(flare_req_get_int(req, "missing", &n), FLARE_ENOTFOUND);
    assert_int_equal(flare_req_get_str(req, "s", &s), 0);
    assert_true(flare_str_eq(s, FLARE_STR("text")));
    assert_ptr_equal(flare_req_get_ptr(req, "p", ptr_tag), &thing);
    assert_null(flare_req_get_ptr(req, "p", other_tag)); /* another tag, same text */
    assert_int_equal(flare_req_set_int(req, "n", 7), 0); /* replace */
    assert_int_equal(flare_req_get_int(req, "n", &n), 0);
    assert_int_equal(n, 7);
    return flare_res_send(res, 200, FLARE_STR("text/plain"), flare_req_peer(req));
}

static int h_cookie(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    flare_str_t v = flare_req_cookie(req, "b");
    flare_cookie_t c;
    flare_cookie_init(&c, FLARE_STR("seen"), v.ptr != NULL ? v : FLARE_STR("none"));
    c.max_age = 60;
    assert_int_equal(flare_res_cookie(res, &c), 0);
    flare_cookie_init(&c, FLARE_STR("bad"), FLARE_STR("a;b"));
    assert_int_equal(flare_res_cookie(res, &c), FLARE_EINVAL);
    return flare_res_send(res, 200, FLARE_STR("text/plain"), v.ptr != NULL ? v : FLARE_STR("-"));
}

static int setup(void **state)
{
    (void)state;
    flare_config_t cfg;
    flare_config_init(&cfg);
    cfg.workers = 2;
    h.app = flare_app_new(&cfg);
    assert_non_null(h.app);
    flare_middleware_t m;

    /* configuration errors */
    static const char *const star[] = { "*", NULL };
    flare_cors_config_t bad = { .origins = star, .credentials = true };
    assert_int_equal(flare_cors(h.app, &bad, &m), FLARE_EINVAL);
    static const char *const badorigin[] = { "localhost:3000", NULL };
    bad = (flare_cors_config_t){ .origins = badorigin };
    assert_int_equal(flare_cors(h.app, &bad, &m), FLARE_EINVAL);
    bad = (flare_cors_config_t){ 0 };
    assert_int_equal(flare_cors(h.app, &bad, &m), FLARE_EINVAL);
    flare_ratelimit_config_t badrl = { .rate = 0, .burst = 1 };
    assert_int_equal(flare_ratelimit(h.app, &badrl, &m), FLARE_EINVAL);
    flare_security_config_t badsec = { .csp = "a\r\nb" };
    assert_int_equal(flare_security_headers(h.app, &badsec, &m), FLARE_EINVAL);

    assert_int_equal(flare_request_id(h.app, &m), 0);
    assert_int_equal(flare_use(h.app, &m), 0);
    flare_security_config_t sec = { .hsts_max_age = 31536000,
                                    .hsts_subdomains = true,
                                    .csp = "default-src 'self'" };
    assert_int_equal(flare_security_headers(h.app, &sec, &m), 0);
    assert_int_equal(flare_use(h.app, &m), 0);

    flare_group_t *api = flare_group_new(h.app, "/api");
    static const char *const origins[] = { "http://localhost:3000", NULL };
    flare_cors_config_t cors = { .origins = origins,
                                 .origin_pattern = "https://*.example.com",
                                 .headers = "Content-Type, Authorization",
                                 .expose_headers = "X-Request-Id",
                                 .credentials = true,
                                 .max_age = 600 };
    assert_int_equal(flare_cors(h.app, &cors, &m), 0);
    assert_int_equal(flare_group_use(api, &m), 0);
    assert_int_equal(flare_group_route(api, FLARE_METHOD_GET, "/x", h_ok, NULL), 0);
    assert_int_equal(flare_group_route(api, FLARE_METHOD_POST, "/x", h_ok, NULL), 0);
    /* no OPTIONS route: the automatic OPTIONS runs the path's middlewares */

    flare_ratelimit_config_t rl = { .rate = 0.5, .burst = 3, .max_clients = 1024 };
    assert_int_equal(flare_ratelimit(h.app, &rl, &m), 0);
    assert_int_equal(flare_route_mw(h.app, FLARE_METHOD_GET, "/limited", h_ok, NULL, &m, 1), 0);
    assert_int_equal(flare_get(h.app, "/attrs", h_attrs, NULL), 0);
    assert_int_equal(flare_get(h.app, "/cookie", h_cookie, NULL), 0);
    assert_int_equal(harness_start(&h), 0);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    assert_int_equal(harness_stop(&h), 0);
    flare_app_free(h.app);
    return 0;
}

#define REQ(line, hdrs) line " HTTP/1.1\r\nHost: t\r\nConnection: close\r\n" hdrs "\r\n"

static void test_cors_preflight(void **state)
{
    (void)state;
    char *r =
        harness_roundtrip(&h, REQ("OPTIONS /api/x", "Origin: http://localhost:3000\r\n"
                                                    "Access-Control-Request-Method: POST\r\n"));
    assert_non_null(strstr(r, "HTTP/1.1 204 No Content\r\n"));
    assert_non_null(strstr(r, "Access-Control-Allow-Origin: http://localhost:3000\r\n"));
    assert_non_null(strstr(r, "Access-Control-Allow-Credentials: true\r\n"));
    assert_non_null(
        strstr(r, "Access-Control-Allow-Methods: GET, HEAD, POST, PUT, PATCH, DELETE\r\n"));
    assert_non_null(strstr(r, "Access-Control-Allow-Headers: Content-Type, Authorization\r\n"));
    assert_non_null(strstr(r, "Access-Control-Max-Age: 600\r\n"));
    assert_non_null(strstr(r, "Vary: Origin\r\n"));
    free(r);
    r = harness_roundtrip(&h, REQ("OPTIONS /api/x", "Origin: http://evil.test\r\n"
                                                    "Access-Control-Request-Method: POST\r\n"));
    assert_non_null(strstr(r, "HTTP/1.1 403 Forbidden\r\n"));
    assert_null(strstr(r, "Access-Control-Allow-Origin"));
    free(r);
    r = harness_roundtrip(&h, REQ("OPTIONS /api/x", "Origin: http://localhost:3000\r\n"
                                                    "Access-Control-Request-Method: TRACE\r\n"));
    assert_non_null(strstr(r, "HTTP/1.1 403 Forbidden\r\n"));
    free(r);
}

static void test_cors_actual(void **state)
{
    (void)state;
    char *r = harness_roundtrip(&h, REQ("GET /api/x", "Origin: https://a.b.example.com\r\n"));
    assert_non_null(strstr(r, "HTTP/1.1 200 OK\r\n"));
    assert_non_null(strstr(r, "Access-Control-Allow-Origin: https://a.b.example.com\r\n"));
    assert_non_null(strstr(r, "Access-Control-Expose-Headers: X-Request-Id\r\n"));
    assert_non_null(strstr(r, "Vary: Origin\r\n"));
    free(r);
    r = harness_roundtrip(&h, REQ("GET /api/x", "Origin: https://example.com.evil.test\r\n"));
    assert_non_null(strstr(r, "HTTP/1.1 200 OK\r\n"));
    assert_null(strstr(r, "Access-Control-Allow-Origin"));
    assert_non_null(strstr(r, "Vary: Origin\r\n"));
    free(r);
    r = harness_roundtrip(&h, REQ("GET /api/x", ""));
    assert_null(strstr(r, "Access-Control-Allow-Origin"));
    free(r);
}

static void test_security_headers(void **state)
{
    (void)state;
    const char *paths[] = { REQ("GET /api/x", ""), REQ("GET /nowhere", "") };
    for (int i = 0; i < 2; i++) {
        char *r = harness_roundtrip(&h, paths[i]);
        assert_non_null(strstr(r, "X-Content-Type-Options: nosniff\r\n"));
        assert_non_null(strstr(r, "X-Frame-Options: DENY\r\n"));
        assert_non_null(strstr(r, "Referrer-Policy: no-referrer\r\n"));
        assert_non_null(
            strstr(r, "Strict-Transport-Security: max-age=31536000; includeSubDomains\r\n"));
        assert_non_null(strstr(r, "Content-Security-Policy: default-src 'self'\r\n"));
        free(r);
    }
}

static void test_request_id(void **state)
{
    (void)state;
    char *r = harness_roundtrip(&h, REQ("GET /api/x", "X-Request-Id: abc-123.x\r\n"));
    assert_non_null(strstr(r, "X-Request-Id: abc-123.x\r\n"));
    assert_non_null(strstr(r, "\r\n\r\nabc-123.x"));
    free(r);
    r = harness_roundtrip(&h, REQ("GET /api/x", "X-Request-Id: bad id<script>\r\n"));
    char *hdr = strstr(r, "X-Request-Id: ");
    assert_non_null(hdr);
    hdr += 14;
    for (int i = 0; i < 16; i++)
        assert_non_null(strchr("0123456789abcdef", hdr[i]));
    assert_memory_equal(hdr + 16, "\r\n", 2);
    assert_memory_equal(strstr(r, "\r\n\r\n") + 4, hdr, 16); /* the handler saw the same id */
    free(r);
}

static void test_ratelimit(void **state)
{
    (void)state;
    int ok = 0, limited = 0;
    for (int i = 0; i < 5; i++) {
        char *r = harness_roundtrip(&h, REQ("GET /limited", ""));
        if (strstr(r, "HTTP/1.1 200 OK\r\n") != NULL)
            ok++;
        if (strstr(r, "HTTP/1.1 429 Too Many Requests\r\n") != NULL) {
            limited++;
            assert_non_null(strstr(r, "Retry-After: 2\r\n")); /* 1 token at 0.5/s */
        }
        free(r);
    }
    assert_int_equal(ok, 3); /* the burst */
    assert_int_equal(limited, 2);
}

static void test_attrs_and_peer(void **state)
{
    (void)state;
    char *r = harness_roundtrip(&h, REQ("GET /attrs", ""));
    assert_non_null(strstr(r, "HTTP/1.1 200 OK\r\n"));
    assert_non_null(strstr(r, "\r\n\r\n127.0.0.1"));
    free(r);
}

static void test_cookies(void **state)
{
    (void)state;
    char *r = harness_roundtrip(&h, REQ("GET /cookie", "Cookie: a=1\r\nCookie: c=3; b=two\r\n"));
    assert_non_null(strstr(r, "\r\n\r\ntwo"));
    assert_non_null(
        strstr(r, "Set-Cookie: seen=two; Path=/; Max-Age=60; HttpOnly; SameSite=Lax\r\n"));
    assert_null(strstr(r, "bad="));
    free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cors_preflight),   cmocka_unit_test(test_cors_actual),
        cmocka_unit_test(test_security_headers), cmocka_unit_test(test_request_id),
        cmocka_unit_test(test_ratelimit),        cmocka_unit_test(test_attrs_and_peer),
        cmocka_unit_test(test_cookies),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
