/* config.c: a zeroed flare_config_t is the default configuration, and
 * values the server cannot represent are refused with the field named.
 * The same for the option structs of the web layer (static files, rate
 * limiting, CORS, sessions). */
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include <flare/middleware.h>
#include <flare/session.h>
#include <flare/static.h>

#include "harness.h"
#include "app.h"
#include "config.h"

static void assert_defaults(const flare_config_t *c)
{
    flare_config_t d;
    flare_config_init(&d);
    assert_int_equal(c->workers, d.workers);
    assert_int_equal(c->max_conns, d.max_conns);
    assert_int_equal(c->header_timeout_ms, d.header_timeout_ms);
    assert_int_equal(c->body_timeout_ms, d.body_timeout_ms);
    assert_int_equal(c->idle_timeout_ms, d.idle_timeout_ms);
    assert_int_equal(c->write_timeout_ms, d.write_timeout_ms);
    assert_int_equal(c->drain_timeout_ms, d.drain_timeout_ms);
    assert_int_equal(c->max_request_line, d.max_request_line);
    assert_int_equal(c->max_head, d.max_head);
    assert_int_equal(c->max_headers, d.max_headers);
    assert_int_equal(c->max_body, d.max_body);
    assert_int_equal(c->job_threads, d.job_threads);
    assert_int_equal(c->backlog, d.backlog);
    assert_int_equal(c->mw_stats, d.mw_stats);
    /* and the defaults are the documented ones, none of them zero but workers */
    assert_int_equal(d.max_body, 1024 * 1024);
    assert_int_equal(d.max_headers, 100);
    assert_int_equal(d.backlog, 4096);
    assert_int_equal(d.job_threads, 4);
}

static void test_zero_is_defaults(void **state)
{
    (void)state;
    flare_config_t zero, out;
    memset(&zero, 0, sizeof(zero));
    assert_int_equal(flare__config_resolve(&out, &zero), 0);
    assert_defaults(&out);
    assert_int_equal(out.max_conn_body, 4 * 1024 * 1024);
    assert_int_equal(flare__config_resolve(&out, NULL), 0);
    assert_defaults(&out);
    assert_int_equal(out.max_conn_body, 4 * 1024 * 1024);

    /* what the app keeps, through the public constructor */
    flare_app_t *a = flare_app_new(&zero);
    assert_non_null(a);
    assert_defaults(&a->cfg);
    assert_int_equal(a->limits.max_head, a->cfg.max_head);
    assert_int_equal(a->limits.max_headers, a->cfg.max_headers);
    assert_int_equal(a->limits.max_request_line, a->cfg.max_request_line);
    flare_app_free(a);
    a = flare_app_new(NULL);
    assert_non_null(a);
    assert_defaults(&a->cfg);
    flare_app_free(a);
}

static void test_nonzero_kept(void **state)
{
    (void)state;
    flare_config_t in = { .workers = 3,
                          .max_conns = 7,
                          .header_timeout_ms = 1,
                          .body_timeout_ms = 2,
                          .idle_timeout_ms = 3,
                          .write_timeout_ms = 4,
                          .drain_timeout_ms = 5,
                          .max_request_line = 100,
                          .max_head = 200,
                          .max_headers = 10,
                          .max_body = 1,
                          .job_threads = 1,
                          .backlog = 1,
                          .mw_stats = true };
    flare_config_t out;
    assert_int_equal(flare__config_resolve(&out, &in), 0);
    assert_memory_equal(&out, &in, offsetof(flare_config_t, mw_stats));
    assert_true(out.mw_stats);
    /* max_conn_body: 4 x max_body when 0, kept otherwise */
    assert_int_equal(out.max_conn_body, 4);
    in.max_conn_body = 3;
    assert_int_equal(flare__config_resolve(&out, &in), 0);
    assert_int_equal(out.max_conn_body, 3);
}

/* Every bound: accepted at it, refused one past it with the field named. */
#define BOUND(field, max)                                                                 \
    do {                                                                                  \
        flare_config_t c = { 0 }, out;                                                    \
        c.field = (max);                                                                  \
        assert_int_equal(flare__config_resolve(&out, &c), 0);                             \
        assert_true((uint64_t)out.field == (uint64_t)(max));                              \
        c.field = (max) + 1;                                                              \
        assert_int_equal(flare__config_resolve(&out, &c), FLARE_EINVAL);                  \
        char want[128];                                                                   \
        snprintf(want, sizeof(want), "flare_config_t." #field ": %llu is more than %llu", \
                 (unsigned long long)(max) + 1, (unsigned long long)(max));               \
        assert_string_equal(flare_last_error(), want);                                    \
        assert_int_equal(flare_last_errno(), 0);                                          \
    } while (0)

static void test_bounds(void **state)
{
    (void)state;
    BOUND(workers, 1024u);
    BOUND(header_timeout_ms, (unsigned)INT_MAX);
    BOUND(body_timeout_ms, (unsigned)INT_MAX);
    BOUND(idle_timeout_ms, (unsigned)INT_MAX);
    BOUND(write_timeout_ms, (unsigned)INT_MAX);
    BOUND(drain_timeout_ms, (unsigned)INT_MAX);
    BOUND(max_request_line, (size_t)1 << 30);
    BOUND(max_head, (size_t)1 << 30);
    BOUND(max_headers, (size_t)65535);
    BOUND(max_body, (size_t)1 << 40);
    BOUND(max_conn_body, (size_t)1 << 42);
    BOUND(job_threads, 1024u);
}

/* The values that used to wrap or narrow downstream. */
static void test_absurd_refused(void **state)
{
    (void)state;
    static const struct {
        size_t off, size;
        const char *field;
    } huge[] = {
#define F(f) { offsetof(flare_config_t, f), sizeof(((flare_config_t *)0)->f), #f }
        F(workers),          F(header_timeout_ms), F(body_timeout_ms),  F(idle_timeout_ms),
        F(write_timeout_ms), F(drain_timeout_ms),  F(max_request_line), F(max_head),
        F(max_headers),      F(max_body),          F(job_threads),      F(max_conn_body),
#undef F
    };
    for (size_t i = 0; i < FLARE__ARRAY_SIZE(huge); i++) {
        flare_config_t c = { 0 };
        memset((char *)&c + huge[i].off, 0xff, huge[i].size); /* UINT_MAX / SIZE_MAX */
        assert_null(flare_app_new(&c));
        char want[64];
        snprintf(want, sizeof(want), "flare_config_t.%s: ", huge[i].field);
        assert_memory_equal(flare_last_error(), want, strlen(want));
        assert_non_null(strstr(flare_last_error(), " is more than "));
    }
    flare_config_t c = { .max_headers = 100000000 };
    assert_null(flare_app_new(&c));
    assert_string_equal(flare_last_error(),
                        "flare_config_t.max_headers: 100000000 is more than 65535");
    c = (flare_config_t){ .backlog = -1 };
    assert_null(flare_app_new(&c));
    assert_string_equal(flare_last_error(), "flare_config_t.backlog: -1 is negative");
    c = (flare_config_t){ .backlog = INT_MAX, .max_conns = UINT_MAX };
    flare_app_t *a = flare_app_new(&c);
    assert_non_null(a);
    flare_app_free(a);
}

static int h_echo_len(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    char b[32];
    int n = snprintf(b, sizeof(b), "got %zu", flare_req_body(req).len);
    return flare_res_send(res, 200, FLARE_STR("text/plain"), (flare_str_t){ b, (size_t)n });
}

/* A zeroed configuration serves: a body within the default max_body is
 * accepted (it used to be 413 for every body: max_body 0 was kept). */
static void test_zero_config_serves_body(void **state)
{
    (void)state;
    flare_config_t zero;
    memset(&zero, 0, sizeof(zero));
    zero.workers = 1;
    harness_t h = { 0 };
    h.app = flare_app_new(&zero);
    assert_non_null(h.app);
    assert_int_equal(flare_post(h.app, "/echo", h_echo_len, NULL), 0);
    assert_int_equal(harness_start(&h), 0);
    char *r = harness_roundtrip(&h, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
                                    "Connection: close\r\n\r\nhello");
    assert_non_null(strstr(r, "HTTP/1.1 200 OK\r\n"));
    assert_non_null(strstr(r, "got 5"));
    free(r);
    /* chunked too */
    r = harness_roundtrip(&h, "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                              "Connection: close\r\n\r\n3\r\nabc\r\n0\r\n\r\n");
    assert_non_null(strstr(r, "HTTP/1.1 200 OK\r\n"));
    assert_non_null(strstr(r, "got 3"));
    free(r);
    assert_int_equal(harness_stop(&h), 0);
    flare_app_free(h.app);
}

static int status_of(const harness_t *h, const char *target)
{
    char req[512];
    snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", target);
    char *r = harness_roundtrip(h, req);
    int st = 0;
    sscanf(r, "HTTP/1.1 %d", &st);
    free(r);
    return st;
}

static void write_file(const char *dir, const char *name, const char *text)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int h_ok(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    (void)ud;
    return flare_res_send(res, 200, FLARE_STR("text/plain"), FLARE_STR("ok"));
}

/* Zeroed flare_static_opts_t: the index file is index.html and the
 * small-file cache is on (a removed file is still served from it until
 * the path is revalidated, 1 s later); "" turns the index off and no_cache
 * the cache. */
static void test_static_zero_opts(void **state)
{
    (void)state;
    char root[] = "/tmp/flare-config-XXXXXX";
    assert_non_null(mkdtemp(root));
    write_file(root, "index.html", "index\n");
    write_file(root, "a.txt", "a\n");
    write_file(root, "b.txt", "b\n");
    harness_t h = { 0 };
    h.app = flare_app_new(&(flare_config_t){ .workers = 1 });
    assert_non_null(h.app);
    flare_static_opts_t zero;
    memset(&zero, 0, sizeof(zero));
    assert_int_equal(flare_static(h.app, "/z", root, &zero), 0);
    flare_static_opts_t off = { .index = "", .no_cache = true };
    assert_int_equal(flare_static(h.app, "/n", root, &off), 0);
    flare_static_opts_t bad = { .index = "a/b" };
    assert_int_equal(flare_static(h.app, "/bad", root, &bad), FLARE_EINVAL);
    assert_non_null(strstr(flare_last_error(), "flare_static_opts_t.index"));
    assert_int_equal(harness_start(&h), 0);

    assert_int_equal(status_of(&h, "/z/"), 200); /* index.html */
    assert_int_equal(status_of(&h, "/n/"), 404); /* no index */
    assert_int_equal(status_of(&h, "/z/a.txt"), 200);
    assert_int_equal(status_of(&h, "/n/b.txt"), 200);
    char path[256];
    snprintf(path, sizeof(path), "%s/a.txt", root);
    assert_int_equal(unlink(path), 0);
    snprintf(path, sizeof(path), "%s/b.txt", root);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(status_of(&h, "/z/a.txt"), 200); /* cached */
    assert_int_equal(status_of(&h, "/n/b.txt"), 404); /* opened again */
    assert_int_equal(harness_stop(&h), 0);
    flare_app_free(h.app);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
    assert_int_equal(system(cmd), 0);
}

/* Rate limiting: rate has no default (refused, named); burst 0 is one
 * second's worth; max_clients past its bound is refused before anything
 * is allocated for it. */
static void test_ratelimit_opts(void **state)
{
    (void)state;
    harness_t h = { 0 };
    h.app = flare_app_new(&(flare_config_t){ .workers = 1 });
    assert_non_null(h.app);
    flare_middleware_t m;
    flare_ratelimit_config_t rl = { 0 };
    assert_int_equal(flare_ratelimit(h.app, &rl, &m), FLARE_EINVAL);
    assert_non_null(strstr(flare_last_error(), "flare_ratelimit_config_t.rate"));
    rl = (flare_ratelimit_config_t){ .rate = NAN };
    assert_int_equal(flare_ratelimit(h.app, &rl, &m), FLARE_EINVAL);
    rl = (flare_ratelimit_config_t){ .rate = 1, .max_clients = UINT_MAX };
    assert_int_equal(flare_ratelimit(h.app, &rl, &m), FLARE_EINVAL);
    assert_non_null(strstr(flare_last_error(), "flare_ratelimit_config_t.max_clients: 4294967295"));
    rl = (flare_ratelimit_config_t){ .rate = 0.001, .max_clients = 1u << 24 };
    assert_int_equal(flare_ratelimit(h.app, &rl, &m), 0);
    rl = (flare_ratelimit_config_t){ .rate = 1.01 }; /* burst: 2 */
    assert_int_equal(flare_ratelimit(h.app, &rl, &m), 0);
    assert_int_equal(flare_route_mw(h.app, FLARE_METHOD_GET, "/rl", h_ok, NULL, &m, 1), 0);
    assert_int_equal(harness_start(&h), 0);
    int ok = 0, limited = 0;
    for (int i = 0; i < 4; i++) {
        int st = status_of(&h, "/rl");
        ok += st == 200;
        limited += st == 429;
    }
    assert_int_equal(ok, 2);
    assert_int_equal(limited, 2);
    assert_int_equal(harness_stop(&h), 0);
    flare_app_free(h.app);
}

/* CORS: which origins to trust has no default; the refusal says so. The
 * other fields default (methods, headers). Sessions: a zeroed config is a
 * working one (cookie flare_sid, in-memory store). */
static void test_cors_session_opts(void **state)
{
    (void)state;
    flare_app_t *a = flare_app_new(NULL);
    assert_non_null(a);
    flare_middleware_t m;
    flare_cors_config_t cors = { 0 };
    assert_int_equal(flare_cors(a, &cors, &m), FLARE_EINVAL);
    assert_string_equal(flare_last_error(),
                        "flare_cors_config_t.origins: none (and no origin_pattern)");
    static const char *const star[] = { "*", NULL };
    cors = (flare_cors_config_t){ .origins = star, .credentials = true };
    assert_int_equal(flare_cors(a, &cors, &m), FLARE_EINVAL);
    assert_non_null(strstr(flare_last_error(), "flare_cors_config_t.credentials"));
    static const char *const bad[] = { "https://ok.example", "nope", NULL };
    cors = (flare_cors_config_t){ .origins = bad };
    assert_int_equal(flare_cors(a, &cors, &m), FLARE_EINVAL);
    assert_non_null(strstr(flare_last_error(), "flare_cors_config_t.origins[1]: \"nope\""));
    cors = (flare_cors_config_t){ .origins = star };
    assert_int_equal(flare_cors(a, &cors, &m), 0);

    flare_session_config_t sc;
    memset(&sc, 0, sizeof(sc));
    assert_int_equal(flare_sessions(a, &sc, &m), 0);
    sc.cookie_name = "bad name";
    assert_int_equal(flare_sessions(a, &sc, &m), FLARE_EINVAL);
    assert_non_null(strstr(flare_last_error(), "flare_session_config_t"));
    flare_app_free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zero_is_defaults),
        cmocka_unit_test(test_nonzero_kept),
        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_absurd_refused),
        cmocka_unit_test(test_zero_config_serves_body),
        cmocka_unit_test(test_static_zero_opts),
        cmocka_unit_test(test_ratelimit_opts),
        cmocka_unit_test(test_cors_session_opts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
