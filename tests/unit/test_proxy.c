/* flare/proxy.h: a gateway app proxying to two Flare upstreams and a dead
 * address, driven through flare/test.h. Balancing, the dead upstream
 * skipped, what the upstream sees (forwarding fields, Via, Host, hop-by-hop
 * fields gone), what the client sees, 502 and 504, and a request with
 * ambiguous framing that never reaches an upstream. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <unistd.h>

#include "flare/flare.h"
#include "flare/proxy.h"
#include "flare/test.h"
#include "loopback.h"

static _Atomic int up_requests;

static int who(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    atomic_fetch_add(&up_requests, 1);
    const char *name = ud;
    flare_res_header(res, FLARE_STR("X-Upstream"), (flare_str_t){ name, strlen(name) });
    return flare_res_send(res, 200, FLARE_STR("text/plain"), (flare_str_t){ name, strlen(name) });
}

/* every field the upstream received, one per line */
static int hdrs(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    atomic_fetch_add(&up_requests, 1);
    char out[4096];
    size_t n = 0;
    for (size_t i = 0; i < flare_req_header_count(req); i++) {
        const flare_header_t *h = flare_req_header_at(req, i);
        n += (size_t)snprintf(out + n, sizeof(out) - n, "%.*s: %.*s\n", (int)h->name.len,
                              h->name.ptr, (int)h->value.len, h->value.ptr);
    }
    flare_str_t b = flare_req_body(req);
    n += (size_t)snprintf(out + n, sizeof(out) - n, "body=%.*s\n", (int)b.len, b.ptr ? b.ptr : "");
    /* a hop-by-hop field (Flare keeps Connection its own: Keep-Alive is one
     * an application can set) */
    assert_int_equal(flare_res_header(res, FLARE_STR("Keep-Alive"), FLARE_STR("timeout=5")), 0);
    return flare_res_send(res, 200, FLARE_STR("text/plain"), (flare_str_t){ out, n });
}

static int never(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    (void)res;
    (void)ud;
    atomic_fetch_add(&up_requests, 1);
    return FLARE_ASYNC;
}

static flare_app_t *u1, *u2, *gw, *gw_dead;
static flare_test_t *t1, *t2, *tg, *tdead;

static flare_app_t *upstream(const char *name)
{
    flare_config_t cfg;
    flare_config_init(&cfg);
    cfg.workers = 1;
    cfg.drain_timeout_ms = 200;
    flare_app_t *a = flare_app_new(&cfg);
    assert_int_equal(flare_get(a, "/who", who, (void *)name), 0);
    assert_int_equal(flare_get(a, "/hdrs", hdrs, NULL), 0);
    assert_int_equal(flare_post(a, "/hdrs", hdrs, NULL), 0);
    assert_int_equal(flare_get(a, "/slow", never, NULL), 0);
    return a;
}

static int setup(void **state)
{
    (void)state;
    u1 = upstream("u1");
    u2 = upstream("u2");
    assert_int_equal(flare_test_start(u1, NULL, &t1), 0);
    assert_int_equal(flare_test_start(u2, NULL, &t2), 0);
    char a1[32], a2[32], dead[32];
    snprintf(a1, sizeof(a1), "127.0.0.1:%d", flare_test_port(t1));
    snprintf(a2, sizeof(a2), "http://127.0.0.1:%d/", flare_test_port(t2));
    int dead_port = loopback_free_port();
    assert_true(dead_port > 0);
    snprintf(dead, sizeof(dead), "127.0.0.1:%d", dead_port);

    flare_config_t cfg;
    flare_config_init(&cfg);
    cfg.workers = 2;
    cfg.drain_timeout_ms = 200;
    gw = flare_app_new(&cfg);
    const char *ups[] = { a1, dead, a2, NULL };
    flare_proxy_t *p;
    assert_int_equal(
        flare_proxy_new(
            gw,
            &(flare_proxy_config_t){ .upstreams = ups, .client = { .first_byte_timeout_ms = 300 } },
            &p),
        0);
    assert_int_equal(flare_proxy_route(gw, "", p), 0);
    /* bad configurations */
    flare_proxy_t *bad;
    const char *none[] = { NULL };
    assert_int_equal(flare_proxy_new(gw, &(flare_proxy_config_t){ .upstreams = none }, &bad),
                     FLARE_EINVAL);
    const char *withpath[] = { "127.0.0.1:1/x", NULL };
    assert_int_equal(flare_proxy_new(gw, &(flare_proxy_config_t){ .upstreams = withpath }, &bad),
                     FLARE_EINVAL);
    const char *ftp[] = { "ftp://127.0.0.1:21", NULL };
    assert_int_equal(flare_proxy_new(gw, &(flare_proxy_config_t){ .upstreams = ftp }, &bad),
                     FLARE_EINVAL);
    assert_int_equal(flare_test_start(gw, NULL, &tg), 0);

    /* a gateway whose only upstream is dead */
    gw_dead = flare_app_new(&cfg);
    const char *only_dead[] = { dead, NULL };
    assert_int_equal(
        flare_proxy_new(gw_dead, &(flare_proxy_config_t){ .upstreams = only_dead }, &p), 0);
    assert_int_equal(flare_proxy_route(gw_dead, "/api", p), 0);
    assert_int_equal(flare_test_start(gw_dead, NULL, &tdead), 0);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    assert_int_equal(flare_test_stop(tg), 0);
    flare_app_free(gw);
    assert_int_equal(flare_test_stop(tdead), 0);
    flare_app_free(gw_dead);
    assert_int_equal(flare_test_stop(t1), 0);
    flare_app_free(u1);
    assert_int_equal(flare_test_stop(t2), 0);
    flare_app_free(u2);
    return 0;
}

static void test_balancing(void **state)
{
    (void)state;
    int seen1 = 0, seen2 = 0;
    for (int i = 0; i < 12; i++) {
        flare_test_res_t res;
        assert_int_equal(flare_test_get(tg, "/who", &res), 0);
        assert_int_equal(res.status, 200); /* the dead one is skipped, never a 502 */
        seen1 += strcmp(res.body, "u1") == 0;
        seen2 += strcmp(res.body, "u2") == 0;
        assert_string_equal(flare_test_res_header(&res, "x-upstream"), res.body);
        assert_string_equal(flare_test_res_header(&res, "via"), "1.1 flare");
        flare_test_res_free(&res);
    }
    assert_int_equal(seen1 + seen2, 12);
    assert_true(seen1 >= 3 && seen2 >= 3);
    /* the upstream's 404 passes through */
    flare_test_res_t res;
    assert_int_equal(flare_test_get(tg, "/nowhere", &res), 0);
    assert_int_equal(res.status, 404);
    flare_test_res_free(&res);
}

static void test_fields(void **state)
{
    (void)state;
    const char *h[] = { "X-Forwarded-For: 6.6.6.6",
                        "Forwarded: for=6.6.6.6",
                        "Connection: x-secret",
                        "X-Secret: 1",
                        "X-Kept: yes",
                        "Via: 1.0 edge",
                        NULL };
    flare_test_res_t res;
    assert_int_equal(flare_test_request(tg,
                                        &(flare_test_req_t){ .method = "POST",
                                                             .path = "/hdrs?q=1",
                                                             .headers = h,
                                                             .body = "payload",
                                                             .body_len = 7 },
                                        &res),
                     0);
    assert_int_equal(res.status, 200);
    const char *b = res.body;
    assert_non_null(strstr(b, "X-Forwarded-For: 127.0.0.1\n")); /* the client's own, untrusted */
    assert_null(strstr(b, "6.6.6.6"));
    assert_non_null(strstr(b, "X-Forwarded-Proto: http\n"));
    assert_non_null(strstr(b, "X-Forwarded-Host: 127.0.0.1:"));
    assert_non_null(strstr(b, "Forwarded: for=127.0.0.1;proto=http;host=\"127.0.0.1:"));
    assert_non_null(strstr(b, "Via: 1.0 edge, 1.1 flare\n"));
    assert_non_null(strstr(b, "X-Kept: yes\n"));
    assert_null(strstr(b, "X-Secret"));
    assert_null(strstr(b, "Connection:"));
    assert_non_null(strstr(b, "Content-Length: 7\n"));
    assert_non_null(strstr(b, "body=payload\n"));
    /* the upstream's hop-by-hop fields stop at the proxy */
    assert_null(flare_test_res_header(&res, "keep-alive"));
    flare_test_res_free(&res);
}

static void test_errors(void **state)
{
    (void)state;
    flare_test_res_t res;
    /* the request left, no answer in time: 504 */
    assert_int_equal(flare_test_get(tg, "/slow", &res), 0);
    assert_int_equal(res.status, 504);
    flare_test_res_free(&res);
    /* nobody answers: 502 */
    assert_int_equal(flare_test_get(tdead, "/api/x", &res), 0);
    assert_int_equal(res.status, 502);
    assert_non_null(strstr(res.body, "no upstream answered"));
    flare_test_res_free(&res);
    /* the dead one is now out: still 502, without trying */
    assert_int_equal(flare_test_get(tdead, "/api/x", &res), 0);
    assert_int_equal(res.status, 502);
    assert_non_null(strstr(res.body, "no live upstream"));
    flare_test_res_free(&res);
    /* not under the prefix: the gateway's own 404 */
    assert_int_equal(flare_test_get(tdead, "/other", &res), 0);
    assert_int_equal(res.status, 404);
    flare_test_res_free(&res);
}

static void test_smuggling_refused(void **state)
{
    (void)state;
    int before = atomic_load(&up_requests);
    /* Content-Length (the test client's) and Transfer-Encoding together */
    const char *te[] = { "Transfer-Encoding: chunked", NULL };
    flare_test_res_t res;
    assert_int_equal(
        flare_test_request(tg,
                           &(flare_test_req_t){ .method = "POST",
                                                .path = "/hdrs",
                                                .headers = te,
                                                .body = "0\r\n\r\nGET /who HTTP/1.1\r\n\r\n",
                                                .body_len = 24 },
                           &res),
        0);
    assert_int_equal(res.status, 400);
    flare_test_res_free(&res);
    const char *cl2[] = { "Content-Length: 3", NULL };
    assert_int_equal(flare_test_request(tg,
                                        &(flare_test_req_t){ .method = "POST",
                                                             .path = "/hdrs",
                                                             .headers = cl2,
                                                             .body = "abcdef",
                                                             .body_len = 6 },
                                        &res),
                     0);
    assert_int_equal(res.status, 400);
    flare_test_res_free(&res);
    assert_int_equal(atomic_load(&up_requests), before);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_balancing),
        cmocka_unit_test(test_fields),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_smuggling_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
