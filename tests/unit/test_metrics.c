/* Metrics: the exposition format (escaping, HELP/TYPE, cumulative histogram
 * buckets, +Inf, _sum/_count), exact counts summed across several workers,
 * collectors, and the errors of the user metrics API. */
#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include <flare/flare.h>
#include <flare/db.h>
#include <flare/metrics.h>

#include "harness.h"
#include "obs/metrics.h"

#define NWORKERS 3

static int ok(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    (void)ud;
    return flare_res_send(res, 200, FLARE_STR("text/plain"), FLARE_STR("ok"));
}

/* The value of the sample line that starts with `prefix` ("name{...} "), or
 * NAN when there is none. */
static double value_of(const char *text, const char *prefix)
{
    size_t pl = strlen(prefix);
    for (const char *p = text; p != NULL && *p != '\0';) {
        if (strncmp(p, prefix, pl) == 0 && p[pl] == ' ')
            return strtod(p + pl + 1, NULL);
        p = strchr(p, '\n');
        if (p != NULL)
            p++;
    }
    return NAN;
}

static flare_metric_t *ctr, *gauge, *hist;

static int pass_mw(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    (void)res;
    (void)ud;
    return 0;
}
static atomic_int posted_done;

typedef struct post_arg {
    flare_app_t *app;
    unsigned i;
} post_arg_t;

static void count_on_worker(void *ud)
{
    post_arg_t *a = ud;
    flare_worker_t *w = flare_app_worker(a->app, a->i);
    flare_counter_add(w, ctr, a->i + 1);
    flare_gauge_add(w, gauge, 2);
    flare_gauge_add(w, gauge, -1);
    static const double obs[] = { 0.5, 1, 1.5, 3, 10 };
    for (size_t k = 0; k < sizeof(obs) / sizeof(obs[0]); k++)
        flare_histogram_observe(w, hist, obs[k]);
    /* wrong types and NULLs are ignored */
    flare_counter_add(w, gauge, 100);
    flare_counter_add(NULL, ctr, 100);
    flare_gauge_add(w, NULL, 100);
    atomic_fetch_add(&posted_done, 1);
}

static void collect(flare_metrics_writer_t *mw, void *ud)
{
    (void)ud;
    assert_int_equal(
        flare_metrics_family(mw, "app_log_lines_dropped_total", "counter", "Log lines dropped"), 0);
    const char *l[] = { "worker", "all", NULL };
    assert_int_equal(flare_metrics_sample(mw, "app_log_lines_dropped_total", l, 42), 0);
    /* malformed: nothing written */
    const char *bad[] = { "0bad", "x", NULL };
    assert_int_equal(flare_metrics_sample(mw, "app_log_lines_dropped_total", bad, 1), FLARE_EINVAL);
    assert_int_equal(flare_metrics_sample(mw, "9name", NULL, 1), FLARE_EINVAL);
    assert_int_equal(flare_metrics_family(mw, "x", "countr", "h"), FLARE_EINVAL);
}

static void test_exposition_summed(void **state)
{
    (void)state;
    flare_config_t cfg;
    flare_config_init(&cfg);
    cfg.workers = NWORKERS;
    cfg.mw_stats = true;
    flare_app_t *app = flare_app_new(&cfg);
    assert_non_null(app);
    flare_middleware_t mw = { "pass", pass_mw, NULL, NULL };
    assert_int_equal(flare_use(app, &mw), 0);
    assert_int_equal(flare_get(app, "/a/{id}", ok, NULL), 0);
    assert_int_equal(flare_get(app, "/b", ok, NULL), 0);
    assert_int_equal(flare_post(app, "/b", ok, NULL), 0);
    assert_int_equal(flare_metrics_route(app, "/metrics"), 0);
    assert_int_equal(flare_metrics_route(app, "/metrics"), FLARE_EEXIST);
    const char *lab[] = { "label", "a\"b\\c\nd", NULL };
    assert_int_equal(
        flare_metrics_counter(app, "app_things_total", "Things\\done\nhere", lab, &ctr), 0);
    assert_int_equal(flare_metrics_gauge(app, "app_inflight", "In flight", NULL, &gauge), 0);
    const double bounds[] = { 1, 2, 5 };
    assert_int_equal(flare_metrics_histogram(app, "app_size", "Sizes", NULL, bounds, 3, &hist), 0);
    assert_int_equal(flare_metrics_collector(app, collect, NULL), 0);

    harness_t h = { .app = app };
    assert_int_equal(harness_start(&h), 0);
    /* registration is closed while running */
    flare_metric_t *late;
    assert_int_equal(flare_metrics_counter(app, "app_late_total", "", NULL, &late), FLARE_ESTATE);
    assert_int_equal(flare_metrics_collector(app, collect, NULL), FLARE_ESTATE);

    for (int i = 0; i < 7; i++) {
        char req[128];
        snprintf(req, sizeof(req), "GET /a/%d HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", i);
        free(harness_roundtrip(&h, req));
    }
    for (int i = 0; i < 4; i++)
        free(harness_roundtrip(&h, "POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
                                   "Connection: close\r\n\r\nhi"));
    for (int i = 0; i < 2; i++)
        free(harness_roundtrip(&h, "GET /b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
    for (int i = 0; i < 3; i++)
        free(harness_roundtrip(&h, "GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
    /* a parse error: counted by status, not as a request */
    free(harness_roundtrip(&h, "GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n"));

    post_arg_t args[NWORKERS];
    for (unsigned i = 0; i < NWORKERS; i++) {
        args[i] = (post_arg_t){ app, i };
        assert_int_equal(flare_app_post(app, i, count_on_worker, &args[i]), 0);
    }
    for (int i = 0; i < 500 && atomic_load(&posted_done) < NWORKERS; i++)
        usleep(10000);
    assert_int_equal(atomic_load(&posted_done), NWORKERS);

    /* the same text through the route, on a worker */
    char *viaroute =
        harness_roundtrip(&h, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert_non_null(strstr(viaroute, "Content-Type: text/plain; version=0.0.4; charset=utf-8"));
    free(viaroute);

    char *text = NULL;
    size_t len = 0;
    assert_int_equal(flare_metrics_render(app, &text, &len), 0);
    assert_int_equal(strlen(text), len);

    assert_true(value_of(text, "flare_http_requests_total{route=\"/a/{id}\",method=\"GET\","
                               "status=\"200\"}") == 7);
    assert_true(value_of(text, "flare_http_requests_total{route=\"/b\",method=\"POST\","
                               "status=\"200\"}") == 4);
    assert_true(value_of(text, "flare_http_requests_total{route=\"\",method=\"GET\","
                               "status=\"404\"}") == 3);
    assert_true(value_of(text, "flare_http_parse_errors_total{status=\"400\"}") == 1);
    assert_non_null(strstr(text, "# TYPE flare_http_requests_total counter\n"));
    assert_non_null(strstr(text, "# TYPE flare_http_request_duration_seconds histogram\n"));

    /* the duration histogram: cumulative buckets ending in +Inf = _count */
    const char *les[] = { "0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005",
                          "0.01",   "0.025",   "0.05",   "0.1",   "0.25",   "0.5",
                          "1",      "2.5",     "5",      "10",    "+Inf" };
    double prev = 0;
    for (size_t i = 0; i < sizeof(les) / sizeof(les[0]); i++) {
        char pre[160];
        snprintf(pre, sizeof(pre),
                 "flare_http_request_duration_seconds_bucket{route=\"/a/{id}\",le=\"%s\"}", les[i]);
        double v = value_of(text, pre);
        assert_false(isnan(v));
        assert_true(v >= prev);
        prev = v;
    }
    assert_true(prev == 7);
    assert_true(value_of(text, "flare_http_request_duration_seconds_count{route=\"/a/{id}\"}") ==
                7);
    /* durations are on the loop's cached clock: a handler that answers at
     * once answers in the wake-up that read its request, which takes 0 */
    double sum = value_of(text, "flare_http_request_duration_seconds_sum{route=\"/a/{id}\"}");
    assert_true(sum == 0);
    /* one pattern with two methods (GET and POST /b): one series, both counted */
    static const char bcount[] = "flare_http_request_duration_seconds_count{route=\"/b\"}";
    assert_true(value_of(text, bcount) == 4 + 2);
    assert_null(strstr(strstr(text, bcount) + 1, bcount));

    /* user metrics, summed over the workers; label value and help escaped */
    assert_non_null(strstr(text, "# HELP app_things_total Things\\\\done\\nhere\n"));
    assert_true(value_of(text, "app_things_total{label=\"a\\\"b\\\\c\\nd\"}") == 1 + 2 + 3);
    assert_true(value_of(text, "app_inflight") == NWORKERS);
    assert_true(value_of(text, "app_size_bucket{le=\"1\"}") == 2 * NWORKERS);
    assert_true(value_of(text, "app_size_bucket{le=\"2\"}") == 3 * NWORKERS);
    assert_true(value_of(text, "app_size_bucket{le=\"5\"}") == 4 * NWORKERS);
    assert_true(value_of(text, "app_size_bucket{le=\"+Inf\"}") == 5 * NWORKERS);
    assert_true(value_of(text, "app_size_count") == 5 * NWORKERS);
    assert_true(value_of(text, "app_size_sum") == 16 * NWORKERS);
    assert_non_null(strstr(text, "# TYPE app_size histogram\n"));

    /* the collector's series, and nothing of its refused calls */
    assert_true(value_of(text, "app_log_lines_dropped_total{worker=\"all\"}") == 42);
    assert_null(strstr(text, "0bad"));
    assert_null(strstr(text, "9name"));

    /* middleware statistics: every request that reached the chain (16, and the scrape) */
    assert_true(value_of(text, "flare_middleware_calls_total{middleware=\"pass\"}") == 17);
    assert_false(isnan(value_of(text, "flare_middleware_seconds_total{middleware=\"pass\"}")));

    /* process_* */
    assert_true(value_of(text, "process_open_fds") > 0);
    assert_true(value_of(text, "process_max_fds") > 0);
    assert_true(value_of(text, "process_resident_memory_bytes") > 0);
    assert_false(isnan(value_of(text, "process_cpu_seconds_total")));
    assert_true(value_of(text, "process_start_time_seconds") > 1e9);
    free(text);

    assert_int_equal(harness_stop(&h), 0);
    flare_app_free(app);
}

static void test_user_api_errors(void **state)
{
    (void)state;
    flare_app_t *app = flare_app_new(NULL);
    assert_non_null(app);
    flare_metric_t *m = (flare_metric_t *)1;
    assert_int_equal(flare_metrics_counter(NULL, "a", "", NULL, &m), FLARE_EINVAL);
    assert_int_equal(flare_metrics_counter(app, "a", "", NULL, NULL), FLARE_EINVAL);
    assert_int_equal(flare_metrics_counter(app, "", "", NULL, &m), FLARE_EINVAL);
    assert_null(m);
    assert_int_equal(flare_metrics_counter(app, "1abc", "", NULL, &m), FLARE_EINVAL);
    assert_int_equal(flare_metrics_counter(app, "a-b", "", NULL, &m), FLARE_EINVAL);
    assert_int_equal(flare_metrics_counter(app, "flare_x_total", "", NULL, &m), FLARE_EINVAL);
    assert_non_null(strstr(flare_last_error(), "built-in"));
    assert_int_equal(flare_metrics_gauge(app, "process_x", "", NULL, &m), FLARE_EINVAL);
    const char *l_bad1[] = { "__x", "v", NULL };
    const char *l_bad2[] = { "le", "v", NULL };
    const char *l_bad3[] = { "a:b", "v", NULL };
    const char *l_noval[] = { "a", NULL };
    const char *l_twice[] = { "a", "1", "a", "2", NULL };
    assert_int_equal(flare_metrics_counter(app, "c_total", "", l_bad1, &m), FLARE_EINVAL);
    assert_int_equal(flare_metrics_counter(app, "c_total", "", l_bad2, &m), FLARE_EINVAL);
    assert_int_equal(flare_metrics_counter(app, "c_total", "", l_bad3, &m), FLARE_EINVAL);
    assert_int_equal(flare_metrics_counter(app, "c_total", "", l_noval, &m), FLARE_EINVAL);
    assert_int_equal(flare_metrics_counter(app, "c_total", "", l_twice, &m), FLARE_EINVAL);
    assert_non_null(strstr(flare_last_error(), "twice"));

    const char *l1[] = { "a", "1", NULL };
    const char *l2[] = { "a", "2", NULL };
    const char *lb[] = { "b", "1", NULL };
    assert_int_equal(flare_metrics_counter(app, "c_total", "help", l1, &m), 0);
    assert_non_null(m);
    assert_int_equal(flare_metrics_counter(app, "c_total", "help", l2, &m), 0);
    assert_int_equal(flare_metrics_counter(app, "c_total", "help", l1, &m), FLARE_EEXIST);
    assert_int_equal(flare_metrics_gauge(app, "c_total", "help", l2, &m), FLARE_EINVAL);
    assert_int_equal(flare_metrics_counter(app, "c_total", "other help", l2, &m), FLARE_EINVAL);
    /* other label names in the same family: allowed by the format */
    assert_int_equal(flare_metrics_counter(app, "c_total", "help", lb, &m), 0);

    const double inc[] = { 1, 2 }, dec[] = { 2, 1 }, nan_[] = { 1, NAN }, inf_[] = { INFINITY };
    assert_int_equal(flare_metrics_histogram(app, "h", "", NULL, NULL, 0, &m), FLARE_EINVAL);
    assert_int_equal(flare_metrics_histogram(app, "h", "", NULL, dec, 2, &m), FLARE_EINVAL);
    assert_int_equal(flare_metrics_histogram(app, "h", "", NULL, nan_, 2, &m), FLARE_EINVAL);
    assert_int_equal(flare_metrics_histogram(app, "h", "", NULL, inf_, 1, &m), FLARE_EINVAL);
    assert_int_equal(flare_metrics_histogram(app, "h", "", NULL, inc, 2, &m), 0);
    assert_int_equal(flare_metrics_histogram(app, "h", "", l1, inc, 1, &m), FLARE_EINVAL);

    assert_int_equal(flare_metrics_collector(app, NULL, NULL), FLARE_EINVAL);
    assert_int_equal(flare_metrics_route(app, "nope"), FLARE_EINVAL);
    assert_int_equal(flare_status_route(app, NULL), FLARE_EINVAL);
    assert_int_equal(flare_health_routes(app, "x", NULL), FLARE_EINVAL);
    assert_int_equal(flare_health_check(app, "", NULL, NULL), FLARE_EINVAL);
    assert_int_equal(flare_metrics_db(app, NULL), FLARE_EINVAL);

    /* counting is on once a metric exists: render works before any run */
    char *text = NULL;
    assert_int_equal(flare_metrics_render(app, &text, NULL), 0);
    assert_non_null(strstr(text, "c_total{a=\"1\"} 0\n"));
    assert_non_null(strstr(text, "c_total{a=\"2\"} 0\n"));
    /* one family for the two series */
    const char *first = strstr(text, "# TYPE c_total counter");
    assert_non_null(first);
    assert_null(strstr(first + 1, "# TYPE c_total counter"));
    assert_non_null(strstr(text, "h_bucket{le=\"+Inf\"} 0\n"));
    free(text);
    flare_app_free(app);

    /* an app without metrics: render says so */
    app = flare_app_new(NULL);
    assert_int_equal(flare_metrics_render(app, &text, NULL), FLARE_ESTATE);
    assert_null(text);
    flare_app_free(app);
}

/* One worker's block by hand: durations land in the bucket of the first
 * bound >= them (le), the table counts by (route, method, status). */
static void test_block_buckets(void **state)
{
    (void)state;
    flare_metrics_w_t m;
    memset(&m, 0, sizeof(m));
    m.mask = 255;
    m.keys = calloc(256, sizeof(*m.keys));
    m.counts = calloc(256, sizeof(*m.counts));
    m.hist = calloc(2 * FLARE__HIST_CELLS, sizeof(*m.hist));
    assert_true(m.keys != NULL && m.counts != NULL && m.hist != NULL);
    uint64_t want[FLARE__HIST_NB + 1] = { 0 }, sum = 0;
    for (unsigned i = 0; i < FLARE__HIST_NB; i++) {
        uint64_t b = flare__hist_bounds_ns[i];
        uint64_t d[3] = { b - 1, b, b + 1 };
        for (unsigned k = 0; k < 3; k++) {
            flare__metrics_count(&m, 1, FLARE_METHOD_GET, 200, d[k]);
            want[k < 2 ? i : i + 1]++;
            sum += d[k];
        }
    }
    flare__metrics_count(&m, 1, FLARE_METHOD_GET, 200, 0);
    want[0]++;
    flare__metrics_count(&m, 1, FLARE_METHOD_GET, 200, UINT64_MAX / 4);
    want[FLARE__HIST_NB]++;
    sum += UINT64_MAX / 4;
    for (unsigned i = 0; i <= FLARE__HIST_NB; i++)
        assert_int_equal(atomic_load(&m.hist[FLARE__HIST_CELLS + i]), want[i]);
    assert_int_equal(atomic_load(&m.hist[FLARE__HIST_CELLS + FLARE__HIST_NB + 1]), sum);
    for (unsigned i = 0; i < FLARE__HIST_CELLS; i++)
        assert_int_equal(atomic_load(&m.hist[i]), 0); /* route 0 untouched */
    /* one (route, method, status) cell with every request; a second status apart */
    flare__metrics_count(&m, 1, FLARE_METHOD_GET, 404, 1);
    uint64_t c200 = 0, c404 = 0, cells = 0;
    for (unsigned i = 0; i < 256; i++) {
        uint64_t k = atomic_load(&m.keys[i]);
        if (k == 0)
            continue;
        cells++;
        if ((k & 0xfff) == 200)
            c200 = atomic_load(&m.counts[i]);
        else if ((k & 0xfff) == 404)
            c404 = atomic_load(&m.counts[i]);
    }
    assert_int_equal(cells, 2);
    assert_int_equal(c200, 3 * FLARE__HIST_NB + 2);
    assert_int_equal(c404, 1);
    free(m.keys);
    free(m.counts);
    free(m.hist);
}

/* A database's statistics as flare_db_* series (SQLite in memory). */
static void test_db_series(void **state)
{
    (void)state;
    flare_config_t cfg;
    flare_config_init(&cfg);
    cfg.workers = 2;
    flare_app_t *app = flare_app_new(&cfg);
    assert_non_null(app);
    flare_db_t *db = NULL;
    assert_int_equal(flare_db_open(app, "sqlite::memory:", NULL, &db), 0);
    assert_int_equal(flare_metrics_db(app, db), 0);
    harness_t h = { .app = app };
    assert_int_equal(harness_start(&h), 0);
    char *text = NULL;
    assert_int_equal(flare_metrics_render(app, &text, NULL), 0);
    const char *names[] = { "flare_db_connections_open", "flare_db_connections_busy",
                            "flare_db_queue_length",     "flare_db_queries_total",
                            "flare_db_errors_total",     "flare_db_timeouts_total",
                            "flare_db_rejected_total",   "flare_db_reconnects_total" };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        char pre[96];
        snprintf(pre, sizeof(pre), "%s{db=\"%s\"}", names[i], flare_db_driver(db));
        assert_false(isnan(value_of(text, pre)));
    }
    free(text);
    assert_int_equal(harness_stop(&h), 0);
    flare_app_free(app);
}

/* An admin listener (flare_app_admin_listen): the operational routes answer
 * there, and 404 on the public listener; the app's own routes answer on
 * both. */
static void test_admin_listener(void **state)
{
    (void)state;
    flare_config_t cfg = { .workers = 2 };
    flare_app_t *app = flare_app_new(&cfg);
    assert_non_null(app);
    assert_int_equal(flare_get(app, "/hello", ok, NULL), 0);
    assert_int_equal(flare_metrics_route(app, "/metrics"), 0);
    assert_int_equal(flare_health_routes(app, NULL, NULL), 0);
    assert_int_equal(flare_status_route(app, "/status"), 0);
    assert_int_equal(flare_app_admin_listen(app, "nowhere"), FLARE_EADDR);
    assert_int_equal(flare_app_admin_listen(NULL, "127.0.0.1:0"), FLARE_EINVAL);
    assert_int_equal(flare_app_admin_port(app), 0);
    assert_int_equal(flare_app_admin_listen(app, "127.0.0.1:0"), 0);
    assert_int_equal(flare_app_admin_listen(app, "127.0.0.1:0"), FLARE_EEXIST);
    harness_t h = { .app = app };
    assert_int_equal(harness_start(&h), 0);
    harness_t admin = h;
    admin.port = flare_app_admin_port(app);
    assert_true(admin.port > 0);
    assert_int_not_equal(admin.port, h.port);
    assert_int_equal(flare_app_admin_listen(app, "127.0.0.1:0"), FLARE_ESTATE);
    static const char *const ops[] = { "/metrics", "/status", "/status?json", "/healthz",
                                       "/readyz" };
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        for (int head = 0; head < 2; head++) {
            char req[128];
            snprintf(req, sizeof(req), "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                     head ? "HEAD" : "GET", ops[i]);
            char *pub = harness_roundtrip(&h, req), *adm = harness_roundtrip(&admin, req);
            if (strncmp(pub, "HTTP/1.1 404 ", 13) != 0)
                fail_msg("%s %s on the public listener: %.40s", head ? "HEAD" : "GET", ops[i], pub);
            if (strncmp(adm, "HTTP/1.1 200 ", 13) != 0)
                fail_msg("%s %s on the admin listener: %.40s", head ? "HEAD" : "GET", ops[i], adm);
            free(pub);
            free(adm);
        }
    }
    const char *hello = "GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    char *pub = harness_roundtrip(&h, hello), *adm = harness_roundtrip(&admin, hello);
    assert_int_equal(strncmp(pub, "HTTP/1.1 200 ", 13), 0);
    assert_int_equal(strncmp(adm, "HTTP/1.1 200 ", 13), 0);
    free(pub);
    free(adm);
    assert_int_equal(harness_stop(&h), 0);
    assert_int_equal(flare_app_admin_port(app), 0); /* not bound any more */
    flare_app_free(app);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_admin_listener),  cmocka_unit_test(test_db_series),
        cmocka_unit_test(test_block_buckets),   cmocka_unit_test(test_exposition_summed),
        cmocka_unit_test(test_user_api_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
