/* The app (app.c, listeners.c, worker.c, run.c) + http1/: the public API
 * driven in-process over real sockets — groups, headers, streaming,
 * borrowed bodies, jobs, posts, cleanup hooks, query parameters, config
 * errors. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include <flare/flare.h>

#include "http/exchange.h" /* flare__res_upgrade: the hand-off the WebSocket layer uses */
#include "loopback.h"
#include "net/stream.h"

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

/* flare_res_sendfile: the data file (a pattern), and pipes whose write end
 * is handed over to see that the descriptor is closed on every path (the
 * read end sees EOF only once no write end is left open). */
static int data_fd = -1;
static unsigned char pattern_at(size_t i)
{
    return (unsigned char)(i * 7 + (i >> 9));
}

static bool handed_fd_closed(int (*call)(flare_res_t *, int), flare_res_t *res, int want_rc)
{
    int p[2];
    if (pipe(p) != 0)
        return false;
    int rc = call(res, p[1]);
    char c;
    ssize_t n = read(p[0], &c, 1); /* 0: every write end is closed */
    close(p[0]);
    return rc == want_rc && n == 0;
}

static int sendfile_bad_status(flare_res_t *res, int fd)
{
    return flare_res_sendfile(res, 99, FLARE_STR("a/b"), fd, 0, 1);
}

static int sendfile_bad_type(flare_res_t *res, int fd)
{
    return flare_res_sendfile(res, 200, FLARE_STR("a\r\nb"), fd, 0, 1);
}

static int sendfile_again(flare_res_t *res, int fd)
{
    return flare_res_sendfile(res, 200, FLARE_STR("a/b"), fd, 0, 1);
}

static int h_sendfile(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    flare_str_t q = flare_req_query_param(req, "off"), l = flare_req_query_param(req, "len");
    uint64_t off = strtoull(q.ptr != NULL ? q.ptr : "0", NULL, 10);
    uint64_t len = strtoull(l.ptr != NULL ? l.ptr : "0", NULL, 10);
    assert_int_equal(flare_res_sendfile(res, 200, FLARE_STR("a/b"), -1, 0, 1), FLARE_EINVAL);
    assert_true(handed_fd_closed(sendfile_bad_status, res, FLARE_EINVAL));
    assert_true(handed_fd_closed(sendfile_bad_type, res, FLARE_EINVAL));
    int fd = dup(data_fd);
    assert_true(fd >= 0);
    int rc = flare_res_sendfile(res, 200, FLARE_STR("application/x-test"), fd, off, len);
    if (off + len > 1000000 && len <= 16384) /* a small read past the end: nothing sent */
        return rc == FLARE_EIO ? flare_res_send(res, 500, FLARE_STR("text/plain"), FLARE_STR("eio"))
                               : rc;
    assert_int_equal(rc, 0); /* (a large range past the end fails only as it is sent) */
    /* a second response is refused, and its descriptor closed too */
    assert_true(handed_fd_closed(sendfile_again, res, FLARE_ESTATE));
    return 0;
}

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

static int h_proto(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    flare_proto_t p = flare_req_protocol(req);
    flare_str_t name = flare_req_protocol_name(req);
    assert_true(p == FLARE_PROTO_HTTP10 || p == FLARE_PROTO_HTTP11);
    assert_false(flare_req_secure(req)); /* a plain TCP listener */
    char body[64];
    int n = snprintf(body, sizeof(body), "%d %.*s", (int)p, (int)name.len, name.ptr);
    return flare_res_send(res, 200, FLARE_STR("text/plain"), (flare_str_t){ body, (size_t)n });
}

static int h_fail(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    (void)res;
    (void)ud;
    return FLARE_EINVAL; /* nothing sent: the client gets a 500 */
}

static int port;

/* protocol switch: the new owner echoes what arrived after the request */
static int upgrade_failed;

static void upgraded(flare_worker_t *w, flare_stream_t *s, void *ud)
{
    (void)w;
    (void)ud;
    if (s == NULL) { /* closed before the 101 went out */
        __atomic_add_fetch(&upgrade_failed, 1, __ATOMIC_SEQ_CST);
        return;
    }
    /* the bytes after the request are still in the stream's read buffer;
     * not moving the stream leaves it to be closed by the HTTP layer */
    char buf[64];
    int n = (int)(s->rlen - s->rpos);
    int len =
        snprintf(buf, sizeof(buf), "switched:%.*s", n, s->rbuf != NULL ? s->rbuf + s->rpos : "");
    ssize_t r = write(s->io.fd, buf, (size_t)len);
    (void)r;
}

static void delayed(void *ud)
{
    flare_res_send(ud, 200, FLARE_STR("text/plain"), FLARE_STR("late"));
}

static int h_delay(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    return flare_worker_timer(flare_req_worker(req), 300, delayed, res) == 0 ? FLARE_ASYNC : -1;
}

static int h_upgrade(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    (void)ud;
    assert_int_equal(flare_res_header(res, FLARE_STR("X-Proto"), FLARE_STR("test")), 0);
    return flare__res_upgrade(res, FLARE_STR("test-proto"), upgraded, NULL);
}

/* ---- middleware ---- */

static int mw_trace_before(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    return flare_res_header(res, FLARE_STR("X-Trace"), flare_str(ud));
}

static void mw_app_after(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    (void)ud;
    flare_res_header(res, FLARE_STR("X-App"), FLARE_STR("after"));
}

static void mw_change_after(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    if (flare_req_header(req, "x-change").ptr != NULL && flare_res_status(res) == 200)
        assert_int_equal(flare_res_set_status(res, 202), 0);
}

static int mw_guard(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    if (flare_req_query_param(req, "deny").ptr != NULL)
        return flare_res_send(res, 403, FLARE_STR("text/plain"), FLARE_STR("denied"));
    return 0;
}

static void resume(void *ud)
{
    flare_next(ud);
}

static int mw_async(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)res;
    (void)ud;
    if (flare_worker_timer(flare_req_worker(req), 10, resume, req) != 0)
        return FLARE_ENOMEM;
    return FLARE_ASYNC;
}

static int h_mw(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    (void)ud;
    return flare_res_send(res, 200, FLARE_STR("text/plain"), FLARE_STR("handler"));
}

static int h_stats(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    (void)ud;
    flare_mw_stats_t st[16];
    size_t n = flare_app_mw_stats(app, st, 16);
    char buf[256];
    size_t len = 0;
    for (size_t i = 0; i < n && i < 16; i++) {
        if (strcmp(st[i].name, "b") == 0)
            len = (size_t)snprintf(buf, sizeof(buf), "b=%llu", (unsigned long long)st[i].count);
    }
    return flare_res_send(res, 200, FLARE_STR("text/plain"), (flare_str_t){ buf, len });
}

static int group_setup(void **state)
{
    (void)state;
    memset(big, 'b', sizeof(big));
    flare_config_t cfg;
    flare_config_init(&cfg);
    cfg.workers = 2;
    cfg.mw_stats = true;
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
    assert_int_equal(flare_get(app, "/sendfile", h_sendfile, NULL), 0);
    char tmpl[] = "/tmp/flare-sendfile-XXXXXX";
    data_fd = mkstemp(tmpl);
    assert_true(data_fd >= 0);
    unlink(tmpl);
    static unsigned char data[1000000];
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = pattern_at(i);
    assert_int_equal(write(data_fd, data, sizeof(data)), (ssize_t)sizeof(data));
    assert_int_equal(flare_get(app, "/job", h_job, NULL), 0);
    assert_int_equal(flare_get(app, "/post", h_post, NULL), 0);
    assert_int_equal(flare_get(app, "/query", h_query, NULL), 0);
    assert_int_equal(flare_get(app, "/fail", h_fail, NULL), 0);
    assert_int_equal(flare_get(app, "/proto", h_proto, NULL), 0);
    flare_middleware_t app_mw = { "app", NULL, mw_app_after, NULL };
    assert_int_equal(flare_use(app, &app_mw), 0);
    flare_middleware_t empty = { "empty", NULL, NULL, NULL };
    assert_int_equal(flare_use(app, &empty), FLARE_EINVAL);
    flare_group_t *m = flare_group_new(app, "/m");
    flare_group_t *inner = flare_group_sub(m, "/in");
    flare_middleware_t ma = { "a", mw_trace_before, NULL, (void *)"a" };
    flare_middleware_t mb = { "b", mw_trace_before, NULL, (void *)"b" };
    flare_middleware_t mc = { "c", mw_trace_before, mw_change_after, (void *)"c" };
    flare_middleware_t guard = { "guard", mw_guard, NULL, NULL };
    flare_middleware_t async = { "async", mw_async, NULL, NULL };
    assert_int_equal(flare_group_use(m, &ma), 0);
    assert_int_equal(flare_group_use(m, &guard), 0);
    assert_int_equal(flare_group_use(inner, &mb), 0);
    assert_int_equal(flare_group_use(inner, &async), 0);
    assert_int_equal(flare_group_route(inner, FLARE_METHOD_GET, "/x", h_mw, NULL), 0);
    flare_middleware_t route_mws[] = { mc };
    assert_int_equal(flare_route_mw(app, FLARE_METHOD_GET, "/r", h_mw, NULL, route_mws, 1), 0);
    assert_int_equal(flare_get(app, "/stats", h_stats, NULL), 0);
    assert_int_equal(flare_get(app, "/upgrade", h_upgrade, NULL), 0);
    assert_int_equal(flare_get(app, "/delay", h_delay, NULL), 0);
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
    close(data_fd);
    return 0;
}

/* Sends a request, reads until the peer closes (requests use Connection: close). */
static char *roundtrip(const char *req, size_t *outlen)
{
    int fd = loopback_connect(port);
    assert_true(fd >= 0);
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

static void check_sendfile(uint64_t off, uint64_t len)
{
    char path[128];
    size_t n;
    snprintf(path, sizeof(path), "/sendfile?off=%llu&len=%llu", (unsigned long long)off,
             (unsigned long long)len);
    char *r = get(path, &n);
    char want[64];
    snprintf(want, sizeof(want), "Content-Length: %llu\r\n", (unsigned long long)len);
    assert_non_null(strstr(r, "HTTP/1.1 200 OK\r\n"));
    assert_non_null(strstr(r, want));
    assert_non_null(strstr(r, "Content-Type: application/x-test\r\n"));
    char *body = strstr(r, "\r\n\r\n") + 4;
    assert_int_equal(n - (size_t)(body - r), len);
    for (size_t i = 0; i < len; i++)
        assert_int_equal((unsigned char)body[i], pattern_at(off + i));
    free(r);
}

static void test_sendfile(void **state)
{
    (void)state;
    check_sendfile(0, 100);        /* small: read into the response */
    check_sendfile(5, 16384);      /* the largest read into the response */
    check_sendfile(3, 16385);      /* sendfile from here on */
    check_sendfile(12345, 200000); /* an offset, a large range */
    check_sendfile(0, 0);          /* empty */
    size_t n;
    /* HEAD: the length, no body, nothing read */
    char *r = roundtrip("HEAD /sendfile?off=0&len=50000 HTTP/1.1\r\nHost: t\r\n"
                        "Connection: close\r\n\r\n",
                        &n);
    assert_non_null(strstr(r, "Content-Length: 50000\r\n"));
    assert_true(n >= 4 && memcmp(r + n - 4, "\r\n\r\n", 4) == 0);
    free(r);
    /* a promise the file cannot keep: read into the response, FLARE_EIO
     * before anything is sent (the handler answers 500) */
    r = get("/sendfile?off=999990&len=100", &n);
    assert_non_null(strstr(r, "HTTP/1.1 500"));
    free(r);
    /* by sendfile, the head is out already: the connection is closed after
     * what the file had, so the client sees a short body, never a hang */
    r = get("/sendfile?off=990000&len=20000", &n);
    assert_non_null(strstr(r, "Content-Length: 20000\r\n"));
    char *body = strstr(r, "\r\n\r\n") + 4;
    assert_int_equal(n - (size_t)(body - r), 10000);
    free(r);
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

static void test_protocol(void **state)
{
    (void)state;
    size_t n;
    char *r = get("/proto", &n);
    assert_non_null(strstr(r, "\r\n\r\n1 HTTP/1.1"));
    free(r);
    r = roundtrip("GET /proto HTTP/1.0\r\nHost: t\r\n\r\n", &n);
    assert_non_null(strstr(r, "\r\n\r\n0 HTTP/1.0"));
    free(r);
    /* 1.2 .. 1.9 are answered as 1.1 */
    r = roundtrip("GET /proto HTTP/1.7\r\nHost: t\r\nConnection: close\r\n\r\n", &n);
    assert_non_null(strstr(r, "\r\n\r\n1 HTTP/1.1"));
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

static void test_middleware_order_and_async(void **state)
{
    (void)state;
    size_t n;
    char *r = get("/m/in/x", &n);
    assert_non_null(strstr(r, "HTTP/1.1 200 OK\r\n"));
    /* outer group first, inner next; the async hook resumed the chain */
    char *a = strstr(r, "X-Trace: a\r\n");
    char *b = strstr(r, "X-Trace: b\r\n");
    assert_non_null(a);
    assert_non_null(b);
    assert_true(a < b);
    assert_non_null(strstr(r, "X-App: after\r\n"));
    assert_non_null(strstr(r, "\r\n\r\nhandler"));
    free(r);
}

static void test_middleware_short_circuit(void **state)
{
    (void)state;
    size_t n;
    char *r = get("/m/in/x?deny=1", &n);
    assert_non_null(strstr(r, "HTTP/1.1 403 Forbidden\r\n"));
    assert_non_null(strstr(r, "X-Trace: a\r\n"));
    assert_null(strstr(r, "X-Trace: b")); /* inner middlewares never ran */
    assert_non_null(strstr(r, "\r\n\r\ndenied"));
    free(r);
}

static void test_middleware_after_changes_status(void **state)
{
    (void)state;
    size_t n;
    char *r =
        roundtrip("GET /r HTTP/1.1\r\nHost: t\r\nX-Change: 1\r\nConnection: close\r\n\r\n", &n);
    assert_non_null(strstr(r, "HTTP/1.1 202 Accepted\r\n"));
    assert_non_null(strstr(r, "X-Trace: c\r\n"));
    free(r);
    r = get("/r", &n);
    assert_non_null(strstr(r, "HTTP/1.1 200 OK\r\n"));
    free(r);
    /* app-level middleware also wraps automatic answers */
    r = get("/nowhere", &n);
    assert_non_null(strstr(r, "HTTP/1.1 404 Not Found\r\n"));
    assert_non_null(strstr(r, "X-App: after\r\n"));
    free(r);
}

static void test_upgrade_handoff(void **state)
{
    (void)state;
    size_t n;
    char *r = roundtrip("GET /upgrade HTTP/1.1\r\nHost: t\r\n\r\nPENDING", &n);
    assert_non_null(strstr(r, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: test-proto\r\n"
                              "Connection: Upgrade\r\nX-Proto: test\r\n\r\n"));
    assert_non_null(strstr(r, "\r\n\r\nswitched:PENDING"));
    assert_null(strstr(r, "Content-Length"));
    free(r);
}

static void test_upgrade_lost_before_101(void **state)
{
    (void)state;
    /* the 101 waits behind a slow response; the client leaves first */
    int fd = loopback_connect(port);
    assert_true(fd >= 0);
    const char *req =
        "GET /delay HTTP/1.1\r\nHost: t\r\n\r\nGET /upgrade HTTP/1.1\r\nHost: t\r\n\r\n";
    assert_int_equal(write(fd, req, strlen(req)), (ssize_t)strlen(req));
    usleep(50000);
    struct linger lg = { 1, 0 }; /* reset: the server sees the close at once */
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    close(fd);
    for (int i = 0; i < 100 && __atomic_load_n(&upgrade_failed, __ATOMIC_SEQ_CST) == 0; i++)
        usleep(10000);
    assert_int_equal(__atomic_load_n(&upgrade_failed, __ATOMIC_SEQ_CST), 1);
    usleep(400000); /* the late send of /delay is a no-op on the orphan */
}

static void test_middleware_stats(void **state)
{
    (void)state;
    size_t n;
    free(get("/m/in/x", &n));
    char *r = get("/stats", &n);
    char *body = strstr(r, "\r\n\r\nb=");
    assert_non_null(body);
    assert_true(strtoul(body + 6, NULL, 10) >= 2);
    free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_group_route),
        cmocka_unit_test(test_headers),
        cmocka_unit_test(test_stream),
        cmocka_unit_test(test_ref),
        cmocka_unit_test(test_sendfile),
        cmocka_unit_test(test_job_and_cleanup),
        cmocka_unit_test(test_post),
        cmocka_unit_test(test_query),
        cmocka_unit_test(test_protocol),
        cmocka_unit_test(test_handler_error),
        cmocka_unit_test(test_bad_config),
        cmocka_unit_test(test_middleware_order_and_async),
        cmocka_unit_test(test_middleware_short_circuit),
        cmocka_unit_test(test_middleware_after_changes_status),
        cmocka_unit_test(test_middleware_stats),
        cmocka_unit_test(test_upgrade_handoff),
        cmocka_unit_test(test_upgrade_lost_before_101),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
