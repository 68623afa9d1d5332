/* app.c + http1/: the public API driven in-process over real sockets —
 * groups, headers, streaming, borrowed bodies, jobs, posts, cleanup hooks,
 * query parameters, config errors. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include <flare/flare.h>

static flare_app_t *app;
static pthread_t server;
static int run_rc;
static int cleanups_run;
static int released;

static void *serve(void *arg)
{
    (void)arg;
    run_rc = flare_app_run(app, "127.0.0.1:0");
    return NULL;
}

static int h_group(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    flare_str_t id = flare_req_param(req, "id");
    char *b = flare_req_alloc(req, id.len + 8);
    memcpy(b, "item:", 5);
    memcpy(b + 5, id.ptr, id.len);
    return flare_res_send(res, 200, FLARE_STR("text/plain"), (flare_str_t){ b, id.len + 5 });
}

static int h_headers(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    /* injection attempts are refused */
    assert_int_equal(flare_res_header(res, FLARE_STR("X-Bad"), FLARE_STR("a\r\nSet-Cookie: x")),
                     FLARE_EINVAL);
    assert_int_equal(flare_res_header(res, FLARE_STR("X Bad"), FLARE_STR("v")), FLARE_EINVAL);
    assert_int_equal(flare_res_header(res, FLARE_STR("Content-Length"), FLARE_STR("1")),
                     FLARE_EINVAL);
    assert_int_equal(flare_res_header(res, FLARE_STR("X-Ok"), FLARE_STR("yes")), 0);
    flare_str_t ua = flare_req_header(req, "x-client");
    assert_int_equal(flare_res_header(res, FLARE_STR("X-Echo"), ua), 0);
    assert_int_equal(flare_res_send(res, 201, FLARE_STR("text/plain"), FLARE_STR("ok")), 0);
    /* a second send is refused */
    assert_int_equal(flare_res_send(res, 200, FLARE_STR("text/plain"), FLARE_STR("x")),
                     FLARE_ESTATE);
    return 0;
}

static int h_stream(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    (void)ud;
    assert_int_equal(flare_res_write(res, FLARE_STR("early")), FLARE_ESTATE);
    assert_int_equal(flare_res_begin(res, 200, FLARE_STR("text/plain")), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(flare_res_write(res, FLARE_STR("chunk;")), 0);
    return flare_res_end(res);
}

static void release_cb(void *ud)
{
    (void)ud;
    __atomic_add_fetch(&released, 1, __ATOMIC_SEQ_CST);
}

static char big[100000];

static int h_ref(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    (void)ud;
    return flare_res_send_ref(res, 200, FLARE_STR("application/octet-stream"),
                              (flare_str_t){ big, sizeof(big) }, release_cb, NULL);
}

static void cleanup_cb(void *ud)
{
    (void)ud;
    __atomic_add_fetch(&cleanups_run, 1, __ATOMIC_SEQ_CST);
}

typedef struct {
    flare_res_t *res;
    long sum;
} job_t;

static void job_work(void *ud)
{
    job_t *j = ud;
    for (long i = 1; i <= 1000; i++)
        j->sum += i;
}

static void job_done(void *ud)
{
    job_t *j = ud;
    char buf[32];
    int n = snprintf(buf, sizeof(buf), "sum=%ld", j->sum);
    flare_res_send(j->res, 200, FLARE_STR("text/plain"), (flare_str_t){ buf, (size_t)n });
}

static int h_job(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    job_t *j = flare_req_alloc(req, sizeof(*j));
    j->res = res;
    j->sum = 0;
    assert_int_equal(flare_req_on_cleanup(req, cleanup_cb, NULL), 0);
    int rc = flare_worker_job(flare_req_worker(req), job_work, job_done, j);
    return rc != 0 ? rc : FLARE_ASYNC;
}

static void post_done(void *ud)
{
    flare_res_send(ud, 200, FLARE_STR("text/plain"), FLARE_STR("posted"));
}

static int h_post(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    return flare_worker_post(flare_req_worker(req), post_done, res) == 0 ? FLARE_ASYNC : -1;
}

static int h_query(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    flare_str_t a = flare_req_query_param(req, "a");
    flare_str_t missing = flare_req_query_param(req, "zz");
    flare_str_t empty = flare_req_query_param(req, "e");
    assert_null(missing.ptr);
    assert_non_null(empty.ptr);
    assert_int_equal(empty.len, 0);
    return flare_res_send(res, 200, FLARE_STR("text/plain"), a);
}

static int h_fail(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    (void)res;
    (void)ud;
    return FLARE_EINVAL; /* nothing sent: the client gets a 500 */
}

static int port;

static int group_setup(void **state)
{
    (void)state;
    memset(big, 'b', sizeof(big));
    flare_config_t cfg;
    flare_config_init(&cfg);
    cfg.workers = 2;
    app = flare_app_new(&cfg);
    assert_non_null(app);
    flare_group_t *api = flare_group_new(app, "/api/");
    assert_non_null(api);
    flare_group_t *v1 = flare_group_sub(api, "/v1");
    assert_non_null(v1);
    assert_int_equal(flare_group_route(v1, FLARE_METHOD_GET, "/items/{id}", h_group, NULL), 0);
    assert_int_equal(flare_group_route(v1, FLARE_METHOD_GET, "/items/{id}", h_group, NULL),
                     FLARE_EEXIST);
    assert_int_equal(flare_group_route(v1, FLARE_METHOD_GET, "items", h_group, NULL), FLARE_EINVAL);
    assert_int_equal(flare_get(app, "/bad/{", h_group, NULL), FLARE_EPATTERN);
    assert_int_equal(flare_get(app, "/headers", h_headers, NULL), 0);
    assert_int_equal(flare_get(app, "/stream", h_stream, NULL), 0);
    assert_int_equal(flare_get(app, "/ref", h_ref, NULL), 0);
    assert_int_equal(flare_get(app, "/job", h_job, NULL), 0);
    assert_int_equal(flare_get(app, "/post", h_post, NULL), 0);
    assert_int_equal(flare_get(app, "/query", h_query, NULL), 0);
    assert_int_equal(flare_get(app, "/fail", h_fail, NULL), 0);
    assert_int_equal(pthread_create(&server, NULL, serve, NULL), 0);
    for (int i = 0; i < 200 && flare_app_port(app) == 0; i++)
        usleep(10000);
    port = flare_app_port(app);
    assert_true(port > 0);
    usleep(50000);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    flare_app_stop(app);
    pthread_join(server, NULL);
    assert_int_equal(run_rc, 0);
    flare_app_free(app);
    return 0;
}

/* Sends a request, reads until the peer closes (requests use Connection: close). */
static char *roundtrip(const char *req, size_t *outlen)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    size_t n = strlen(req);
    assert_int_equal(write(fd, req, n), (ssize_t)n);
    size_t cap = 1 << 18, len = 0;
    char *buf = malloc(cap + 1);
    ssize_t r;
    while ((r = read(fd, buf + len, cap - len)) > 0)
        len += (size_t)r;
    close(fd);
    buf[len] = '\0';
    *outlen = len;
    return buf;
}

static char *get(const char *path, size_t *len)
{
    char req[512];
    snprintf(req, sizeof(req),
             "GET %s HTTP/1.1\r\nHost: t\r\nX-Client: unit\r\nConnection: close\r\n\r\n", path);
    return roundtrip(req, len);
}

static void test_group_route(void **state)
{
    (void)state;
    size_t n;
    char *r = get("/api/v1/items/42", &n);
    assert_non_null(strstr(r, "HTTP/1.1 200 OK\r\n"));
    assert_non_null(strstr(r, "\r\n\r\nitem:42"));
    assert_non_null(strstr(r, "Connection: close\r\n"));
    free(r);
    r = get("/api/items/42", &n);
    assert_non_null(strstr(r, "HTTP/1.1 404 Not Found\r\n"));
    free(r);
}

static void test_headers(void **state)
{
    (void)state;
    size_t n;
    char *r = get("/headers", &n);
    assert_non_null(strstr(r, "HTTP/1.1 201 Created\r\n"));
    assert_non_null(strstr(r, "\r\nX-Ok: yes\r\n"));
    assert_non_null(strstr(r, "\r\nX-Echo: unit\r\n"));
    assert_null(strstr(r, "X-Bad"));
    assert_null(strstr(r, "Set-Cookie"));
    assert_non_null(strstr(r, "Content-Length: 2\r\n"));
    free(r);
}

static void test_stream(void **state)
{
    (void)state;
    size_t n;
    char *r = get("/stream", &n);
    assert_non_null(strstr(r, "Transfer-Encoding: chunked\r\n"));
    assert_null(strstr(r, "Content-Length"));
    assert_non_null(strstr(r, "\r\n\r\n6\r\nchunk;\r\n6\r\nchunk;\r\n6\r\nchunk;\r\n0\r\n\r\n"));
    free(r);
    /* HEAD of a streamed response: headers only */
    r = roundtrip("HEAD /stream HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", &n);
    assert_non_null(strstr(r, "HTTP/1.1 200 OK"));
    assert_true(n >= 4 && memcmp(r + n - 4, "\r\n\r\n", 4) == 0);
    free(r);
}

static void test_ref(void **state)
{
    (void)state;
    size_t n;
    int before = __atomic_load_n(&released, __ATOMIC_SEQ_CST);
    char *r = get("/ref", &n);
    assert_non_null(strstr(r, "Content-Length: 100000\r\n"));
    char *body = strstr(r, "\r\n\r\n") + 4;
    assert_int_equal(n - (size_t)(body - r), sizeof(big));
    assert_memory_equal(body, big, sizeof(big));
    free(r);
    usleep(20000);
    assert_int_equal(__atomic_load_n(&released, __ATOMIC_SEQ_CST), before + 1);
}

static void test_job_and_cleanup(void **state)
{
    (void)state;
    size_t n;
    int before = __atomic_load_n(&cleanups_run, __ATOMIC_SEQ_CST);
    char *r = get("/job", &n);
    assert_non_null(strstr(r, "\r\n\r\nsum=500500"));
    free(r);
    usleep(20000);
    assert_int_equal(__atomic_load_n(&cleanups_run, __ATOMIC_SEQ_CST), before + 1);
}

static void test_post(void **state)
{
    (void)state;
    size_t n;
    char *r = get("/post", &n);
    assert_non_null(strstr(r, "\r\n\r\nposted"));
    free(r);
}

static void test_query(void **state)
{
    (void)state;
    size_t n;
    char *r = get("/query?x=1&a=hello+w%6Frld%21&e=&a=second", &n);
    assert_non_null(strstr(r, "\r\n\r\nhello world!"));
    free(r);
}

static void test_handler_error(void **state)
{
    (void)state;
    size_t n;
    char *r = get("/fail", &n);
    assert_non_null(strstr(r, "HTTP/1.1 500 Internal Server Error\r\n"));
    free(r);
}

static void test_bad_config(void **state)
{
    (void)state;
    flare_app_t *a = flare_app_new(NULL);
    assert_non_null(a);
    assert_int_equal(flare_app_run(a, "not-an-address"), FLARE_EADDR);
    assert_int_equal(flare_app_run(a, "127.0.0.1:99999"), FLARE_EADDR);
    char addr[64];
    snprintf(addr, sizeof(addr), "203.0.113.1:%d", port); /* not a local address */
    assert_int_equal(flare_app_run(a, addr), FLARE_EBIND);
    assert_int_equal(flare_route(a, FLARE_METHOD_OTHER, "/x", h_fail, NULL), FLARE_EINVAL);
    assert_int_equal(flare_get(a, "/x", NULL, NULL), FLARE_EINVAL);
    flare_app_free(a);
    flare_app_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_group_route),     cmocka_unit_test(test_headers),
        cmocka_unit_test(test_stream),          cmocka_unit_test(test_ref),
        cmocka_unit_test(test_job_and_cleanup), cmocka_unit_test(test_post),
        cmocka_unit_test(test_query),           cmocka_unit_test(test_handler_error),
        cmocka_unit_test(test_bad_config),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
