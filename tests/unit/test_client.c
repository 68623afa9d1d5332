/* flare/client.h against real peers on loopback.
 *
 * A gateway app (its handler /call makes the client request its query
 * names and answers with what came back) is driven through flare/test.h.
 * The upstreams: a Flare app (plain and TLS, with a private CA made by the
 * openssl command), and a raw server of this test that answers each
 * request with canned bytes and then closes, holds, resets or keeps the
 * connection, to play the upstreams that misbehave. */
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
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <unistd.h>

#include "flare/client.h"
#include "flare/flare.h"
#include "flare/loop.h"
#include "flare/test.h"
#include "flare/tls.h"
#include "loopback.h"

/* ---- the raw upstream ---- */

enum { AFTER_CLOSE, AFTER_KEEP, AFTER_HOLD, AFTER_RESET, AFTER_SILENT, AFTER_CLOSE_SECOND };

static struct {
    int lfd, port;
    pthread_t thread;
    _Atomic bool stop;
    const char *reply; /* bytes answered to each request */
    int after;
    _Atomic int accepts, requests;
    _Atomic int cur_fd; /* the connection being served, -1: none */
    _Atomic int eofs;   /* AFTER_SILENT: the client closed while waiting */
} raw;

static bool read_head(int fd)
{
    char buf[8192];
    size_t len = 0;
    while (len < sizeof(buf)) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        if (poll(&p, 1, 3000) <= 0)
            return false;
        ssize_t n = recv(fd, buf + len, 1, 0); /* byte by byte: never past this request */
        if (n <= 0)
            return false;
        len += (size_t)n;
        if (len >= 4 && memcmp(buf + len - 4, "\r\n\r\n", 4) == 0) {
            /* a body announced by Content-Length: read it too */
            buf[len] = '\0';
            char *cl = strcasestr(buf, "content-length:");
            size_t body = cl ? strtoul(cl + 15, NULL, 10) : 0;
            while (body > 0) {
                char tmp[512];
                ssize_t m = recv(fd, tmp, body < sizeof(tmp) ? body : sizeof(tmp), 0);
                if (m <= 0)
                    return false;
                body -= (size_t)m;
            }
            return true;
        }
    }
    return false;
}

static void *raw_main(void *arg)
{
    (void)arg;
    while (!atomic_load(&raw.stop)) {
        struct pollfd p = { .fd = raw.lfd, .events = POLLIN };
        if (poll(&p, 1, 50) <= 0)
            continue;
        int fd = accept(raw.lfd, NULL, NULL);
        if (fd < 0)
            continue;
        atomic_fetch_add(&raw.accepts, 1);
        atomic_store(&raw.cur_fd, fd);
        for (int nth = 0;; nth++) {
            if (!read_head(fd))
                break;
            atomic_fetch_add(&raw.requests, 1);
            if (raw.after == AFTER_CLOSE_SECOND && nth == 1)
                break; /* a pooled connection the server drops as the request comes */
            if (raw.after != AFTER_SILENT &&
                send(fd, raw.reply, strlen(raw.reply), MSG_NOSIGNAL) < 0)
                break;
            if (raw.after == AFTER_KEEP || raw.after == AFTER_CLOSE_SECOND)
                continue;
            if (raw.after == AFTER_HOLD || raw.after == AFTER_SILENT) {
                struct pollfd q = { .fd = fd, .events = POLLIN };
                char b;
                /* until the client gives up */
                if (poll(&q, 1, raw.after == AFTER_SILENT ? 5000 : 2000) == 1 &&
                    recv(fd, &b, 1, 0) == 0)
                    atomic_fetch_add(&raw.eofs, 1);
            }
            if (raw.after == AFTER_RESET) {
                struct linger lg = { 1, 0 };
                setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
            }
            break;
        }
        atomic_store(&raw.cur_fd, -1);
        close(fd);
    }
    return NULL;
}

static void raw_script(const char *reply, int after)
{
    /* a connection kept from the last script ends first (the client's pool
     * sees it close while idle) */
    int fd = atomic_load(&raw.cur_fd);
    if (fd >= 0)
        shutdown(fd, SHUT_RDWR);
    for (int i = 0; i < 200 && atomic_load(&raw.cur_fd) >= 0; i++)
        usleep(1000);
    raw.reply = reply;
    raw.after = after;
    atomic_store(&raw.accepts, 0);
    atomic_store(&raw.requests, 0);
}

/* ---- the Flare upstream ---- */

static int up_hello(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    (void)ud;
    return flare_res_send(res, 200, FLARE_STR("text/plain"), FLARE_STR("hi"));
}

static int up_echo(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    char out[256];
    flare_str_t b = flare_req_body(req), x = flare_req_header(req, "x-test");
    int n = snprintf(out, sizeof(out), "%.*s|%.*s", (int)b.len, b.ptr ? b.ptr : "", (int)x.len,
                     x.ptr ? x.ptr : "");
    return flare_res_send(res, 201, FLARE_STR("text/plain"), (flare_str_t){ out, (size_t)n });
}

/* Redirects: /r301 (relative: "method"), /r302 (to /hello), /r303 and
 * /r307 (to /method), /loop (to itself), /nolocation, /badloc (ftp),
 * /away (to first.test, another origin); /method says what came. */
static int up_port_for_away;

static int up_redirect(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    flare_str_t p = flare_req_path(req);
    int st = 302;
    char loc[128] = "";
    if (flare_str_eq(p, FLARE_STR("/r301"))) {
        st = 301;
        snprintf(loc, sizeof(loc), "method");
    } else if (flare_str_eq(p, FLARE_STR("/r302"))) {
        snprintf(loc, sizeof(loc), "/hello");
    } else if (flare_str_eq(p, FLARE_STR("/r303"))) {
        st = 303;
        snprintf(loc, sizeof(loc), "/method");
    } else if (flare_str_eq(p, FLARE_STR("/r307"))) {
        st = 307;
        snprintf(loc, sizeof(loc), "/method#frag");
    } else if (flare_str_eq(p, FLARE_STR("/loop"))) {
        snprintf(loc, sizeof(loc), "/loop");
    } else if (flare_str_eq(p, FLARE_STR("/badloc"))) {
        snprintf(loc, sizeof(loc), "ftp://x/");
    } else if (flare_str_eq(p, FLARE_STR("/away"))) {
        st = 308;
        snprintf(loc, sizeof(loc), "http://first.test:%d/method", up_port_for_away);
    }
    if (loc[0] != '\0')
        flare_res_header(res, FLARE_STR("Location"), (flare_str_t){ loc, strlen(loc) });
    return flare_res_send(res, st, FLARE_STR("text/plain"), FLARE_STR("moved"));
}

static int up_method(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    char out[128];
    flare_str_t m = flare_req_method_str(req), b = flare_req_body(req);
    int n = snprintf(out, sizeof(out), "%.*s %zu auth=%d ctype=%d", (int)m.len, m.ptr, b.len,
                     flare_req_header(req, "authorization").len > 0,
                     flare_req_header(req, "content-type").len > 0);
    return flare_res_send(res, 200, FLARE_STR("text/plain"), (flare_str_t){ out, (size_t)n });
}

static int up_big(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    (void)ud;
    static char piece[100000];
    memset(piece, 'x', sizeof(piece));
    int rc = flare_res_begin(res, 200, FLARE_STR("text/plain"));
    for (int i = 0; rc == 0 && i < 3; i++)
        rc = flare_res_write(res, (flare_str_t){ piece, sizeof(piece) });
    return rc == 0 ? flare_res_end(res) : rc;
}

/* ---- the gateway ---- */

static flare_client_t *cl_plain, *cl_ca, *cl_sys, *cl_one, *cl_pin;

typedef struct gw_call {
    flare_res_t *res;
} gw_call_t;

static _Atomic int gw_canceled; /* callbacks that ran with FLARE_ECANCELED */

static void gw_done(int rc, const flare_client_res_t *r, void *ud)
{
    gw_call_t *g = ud;
    if (rc == FLARE_ECANCELED)
        atomic_fetch_add(&gw_canceled, 1);
    char out[512];
    int n = snprintf(out, sizeof(out), "rc=%d status=%d len=%zu body=%.*s err=%s", rc,
                     r ? r->status : 0, r ? r->body.len : 0,
                     r ? (int)(r->body.len < 40 ? r->body.len : 40) : 0, r ? r->body.ptr : "",
                     rc ? flare_client_error_text() : "");
    flare_res_send(g->res, 200, FLARE_STR("text/plain"), (flare_str_t){ out, (size_t)n });
    free(g);
}

static flare_client_t *pick(flare_req_t *req)
{
    flare_str_t c = flare_req_query_param(req, "c");
    if (c.len == 2 && memcmp(c.ptr, "ca", 2) == 0)
        return cl_ca;
    if (c.len == 3 && memcmp(c.ptr, "sys", 3) == 0)
        return cl_sys;
    if (c.len == 3 && memcmp(c.ptr, "one", 3) == 0)
        return cl_one;
    if (c.len == 3 && memcmp(c.ptr, "pin", 3) == 0)
        return cl_pin;
    return cl_plain;
}

static char *cstr(flare_str_t s)
{
    char *p = malloc(s.len + 1);
    memcpy(p, s.ptr ? s.ptr : "", s.len);
    p[s.len] = '\0';
    return p;
}

/* GET /call?u=URL[&m=METHOD][&b=BODY][&c=ca|sys|one][&h=HEADER] */
static int gw_call(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    char *url = cstr(flare_req_query_param(req, "u"));
    char *method = cstr(flare_req_query_param(req, "m"));
    flare_str_t body = flare_req_query_param(req, "b");
    char *redirects = cstr(flare_req_query_param(req, "r"));
    char *extra = cstr(flare_req_query_param(req, "h"));
    bool auth = flare_req_query_param(req, "a").len > 0;
    bool bind = flare_req_query_param(req, "bind").len > 0;
    gw_call_t *g = malloc(sizeof(*g));
    g->res = res;
    const char *hdrs[5];
    size_t nh = 0;
    hdrs[nh++] = "X-Test: via-gateway";
    hdrs[nh++] = "Content-Type: text/plain";
    if (auth)
        hdrs[nh++] = "Authorization: Bearer secret";
    if (extra[0])
        hdrs[nh++] = extra;
    hdrs[nh] = NULL;
    int rc = flare_client_request(pick(req), flare_req_worker(req),
                                  &(flare_client_req_t){ .method = method[0] ? method : NULL,
                                                         .url = url,
                                                         .headers = hdrs,
                                                         .body = body,
                                                         .max_redirects = (unsigned)atoi(redirects),
                                                         .req = bind ? req : NULL },
                                  gw_done, g, NULL);
    free(redirects);
    free(url);
    free(method);
    free(extra);
    if (rc != 0) {
        free(g);
        char out[256];
        int n = snprintf(out, sizeof(out), "sync=%d %s", rc, flare_last_error());
        return flare_res_send(res, 200, FLARE_STR("text/plain"), (flare_str_t){ out, (size_t)n });
    }
    return FLARE_ASYNC;
}

/* GET /pair?u=URL: two calls at once through the one-connection client;
 * answers when both are done. */
typedef struct pair {
    flare_res_t *res;
    int done, ok;
} pair_t;

static void pair_cb(int rc, const flare_client_res_t *r, void *ud)
{
    pair_t *p = ud;
    p->done++;
    if (rc == 0 && r->status == 200)
        p->ok++;
    if (p->done == 2) {
        char out[64];
        int n = snprintf(out, sizeof(out), "ok=%d", p->ok);
        flare_res_send(p->res, 200, FLARE_STR("text/plain"), (flare_str_t){ out, (size_t)n });
        free(p);
    }
}

static int gw_pair(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    char *url = cstr(flare_req_query_param(req, "u"));
    pair_t *p = calloc(1, sizeof(*p));
    p->res = res;
    for (int i = 0; i < 2; i++) {
        int rc = flare_client_request(cl_one, flare_req_worker(req),
                                      &(flare_client_req_t){ .url = url }, pair_cb, p, NULL);
        assert_int_equal(rc, 0);
    }
    free(url);
    return FLARE_ASYNC;
}

/* GET /cancel: starts a call to a silent upstream, cancels it at once, and
 * answers 300 ms later whether its callback ran. */
static _Atomic int cancelled_cb_ran;
typedef struct cancel_ctx {
    flare_res_t *res;
    flare_timer_t *t;
} cancel_ctx_t;

static void cancel_cb(int rc, const flare_client_res_t *r, void *ud)
{
    (void)rc;
    (void)r;
    (void)ud;
    atomic_store(&cancelled_cb_ran, 1);
}

static void cancel_answer(void *ud)
{
    cancel_ctx_t *c = ud;
    const char *t = atomic_load(&cancelled_cb_ran) ? "callback ran" : "no callback";
    flare_res_send(c->res, 200, FLARE_STR("text/plain"), (flare_str_t){ t, strlen(t) });
    flare_timer_free(c->t);
    free(c);
}

static int gw_cancel(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/", raw.port);
    flare_client_call_t *call;
    int rc = flare_client_request(cl_plain, flare_req_worker(req),
                                  &(flare_client_req_t){ .url = url }, cancel_cb, NULL, &call);
    if (rc != 0)
        return rc;
    flare_client_cancel(call);
    cancel_ctx_t *c = malloc(sizeof(*c));
    c->res = res;
    flare_timer_new(flare_req_worker(req), cancel_answer, c, &c->t);
    flare_timer_start(c->t, 300);
    return FLARE_ASYNC;
}

/* ---- set-up ---- */

static flare_app_t *up, *gw;
static int dead_port;

static flare_test_t *tup, *tgw;
static char dir[] = "/tmp/flare-client-XXXXXX";
static int up_port, up_tls_port;

static int sh(const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    return system(cmd);
}

static int setup(void **state)
{
    (void)state;
    assert_non_null(mkdtemp(dir));
    /* a private CA, and a certificate for 127.0.0.1 and pinned.test only */
    assert_int_equal(
        sh("cd %s && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
           "-keyout ca.key -out ca.pem -days 2 -subj /CN=flare-test-ca >/dev/null 2>&1 && "
           "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout srv.key "
           "-out srv.csr -subj /CN=127.0.0.1 >/dev/null 2>&1 && "
           "printf 'subjectAltName=IP:127.0.0.1,DNS:pinned.test\\n' > ext && "
           "openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 "
           "-extfile ext -out srv.pem >/dev/null 2>&1",
           dir),
        0);

    /* the raw upstream */
    raw.lfd = loopback_listen(64, &raw.port);
    assert_true(raw.lfd >= 0);
    atomic_store(&raw.cur_fd, -1);
    assert_int_equal(pthread_create(&raw.thread, NULL, raw_main, NULL), 0);

    /* the Flare upstream, plain and TLS */
    up = flare_app_new(NULL);
    assert_int_equal(flare_get(up, "/hello", up_hello, NULL), 0);
    assert_int_equal(flare_post(up, "/echo", up_echo, NULL), 0);
    assert_int_equal(flare_get(up, "/big", up_big, NULL), 0);
    static const char *const redirs[] = { "/r301", "/r302",   "/r303", "/r307",
                                          "/loop", "/badloc", "/away", "/nolocation" };
    for (size_t i = 0; i < sizeof(redirs) / sizeof(redirs[0]); i++) {
        assert_int_equal(flare_get(up, redirs[i], up_redirect, NULL), 0);
        assert_int_equal(flare_post(up, redirs[i], up_redirect, NULL), 0);
    }
    assert_int_equal(flare_get(up, "/method", up_method, NULL), 0);
    assert_int_equal(flare_post(up, "/method", up_method, NULL), 0);
    assert_int_equal(flare_put(up, "/method", up_method, NULL), 0);
    assert_int_equal(flare_put(up, "/r307", up_redirect, NULL), 0);
    char cert[256], key[256];
    snprintf(cert, sizeof(cert), "%s/srv.pem", dir);
    snprintf(key, sizeof(key), "%s/srv.key", dir);
    assert_int_equal(flare_app_listen(up, "127.0.0.1:0",
                                      &(flare_tls_config_t){ .cert_file = cert, .key_file = key }),
                     0);
    assert_int_equal(flare_test_start(up, NULL, &tup), 0);
    up_port = flare_test_port(tup);
    up_port_for_away = up_port;
    up_tls_port = flare_app_listener_port(up, 1);
    assert_true(up_tls_port > 0);

    /* the gateway and its clients */
    flare_config_t cfg;
    flare_config_init(&cfg);
    cfg.workers = 1;
    gw = flare_app_new(&cfg);
    assert_int_equal(flare_client_new(gw,
                                      &(flare_client_config_t){ .first_byte_timeout_ms = 500,
                                                                .idle_timeout_ms = 500,
                                                                .max_response = 1 << 20 },
                                      &cl_plain),
                     0);
    char ca[256];
    snprintf(ca, sizeof(ca), "%s/ca.pem", dir);
    assert_int_equal(flare_client_new(gw, &(flare_client_config_t){ .ca_file = ca }, &cl_ca), 0);
    assert_int_equal(flare_client_new(gw, NULL, &cl_sys), 0);
    assert_int_equal(flare_client_new(gw, &(flare_client_config_t){ .max_per_origin = 1 }, &cl_one),
                     0);
    flare_client_t *bad;
    assert_int_equal(
        flare_client_new(gw, &(flare_client_config_t){ .ca_file = "/nonexistent.pem" }, &bad),
        FLARE_ETLS);
    assert_null(bad);
    /* fixed answers for names: ::1 first, where nothing listens (or no IPv6
     * at all), then 127.0.0.1 */
    dead_port = loopback_free_port();
    assert_true(dead_port > 0);
    char pin_plain[64], pin_tls[64], pin_dead[64], pin_one[64];
    snprintf(pin_plain, sizeof(pin_plain), "pinned.test:%d:[::1],127.0.0.1", up_port);
    snprintf(pin_tls, sizeof(pin_tls), "PINNED.test:%d:::1,127.0.0.1", up_tls_port);
    snprintf(pin_dead, sizeof(pin_dead), "dead.test:%d:[::1],127.0.0.1", dead_port);
    snprintf(pin_one, sizeof(pin_one), "first.test:%d:127.0.0.1,[::1]", up_port);
    const char *pins[] = { pin_plain, pin_tls, pin_dead, pin_one, NULL };
    assert_int_equal(
        flare_client_new(gw, &(flare_client_config_t){ .ca_file = ca, .resolve = pins }, &cl_pin),
        0);
    static const char *const bad_pins[] = {
        "nohost",
        ":80:127.0.0.1",
        "a:0:127.0.0.1",
        "a:65536:127.0.0.1",
        "a:8x:127.0.0.1",
        "a:80:",
        "a:80:127.0.0.1,",
        "a:80:notanip",
        "a:80:1.1.1.1,2.2.2.2,3.3.3.3,4.4.4.4,5.5.5.5",
        "a::1.1.1.1",
    };
    for (size_t i = 0; i < sizeof(bad_pins) / sizeof(bad_pins[0]); i++) {
        const char *one[] = { "ok.test:80:127.0.0.1", bad_pins[i], NULL };
        bad = (flare_client_t *)1;
        assert_int_equal(flare_client_new(gw, &(flare_client_config_t){ .resolve = one }, &bad),
                         FLARE_EINVAL);
        assert_null(bad);
        assert_non_null(strstr(flare_last_error(), bad_pins[i]));
    }
    assert_int_equal(flare_metrics_enable(gw), 0);
    assert_int_equal(flare_get(gw, "/call", gw_call, NULL), 0);
    assert_int_equal(flare_get(gw, "/cancel", gw_cancel, NULL), 0);
    assert_int_equal(flare_get(gw, "/pair", gw_pair, NULL), 0);
    assert_int_equal(flare_test_start(gw, &(flare_test_opts_t){ .timeout_ms = 10000 }, &tgw), 0);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    assert_int_equal(flare_test_stop(tgw), 0);
    flare_app_free(gw);
    assert_int_equal(flare_test_stop(tup), 0);
    flare_app_free(up);
    atomic_store(&raw.stop, true);
    pthread_join(raw.thread, NULL);
    close(raw.lfd);
    sh("rm -rf %s", dir);
    return 0;
}

/* Asks the gateway for /call?query and returns its one-line report. */
static char report[1024];

static const char *call(const char *fmt, ...)
{
    char q[512], path[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(q, sizeof(q), fmt, ap);
    va_end(ap);
    snprintf(path, sizeof(path), "/call?%s", q);
    flare_test_res_t res;
    assert_int_equal(flare_test_get(tgw, path, &res), 0);
    assert_int_equal(res.status, 200);
    snprintf(report, sizeof(report), "%s", res.body);
    flare_test_res_free(&res);
    return report;
}

#define assert_has(s, part)                                          \
    do {                                                             \
        if (strstr((s), (part)) == NULL)                             \
            fail_msg("\"%s\" does not contain \"%s\"", (s), (part)); \
    } while (0)

static void test_plain(void **state)
{
    (void)state;
    assert_has(call("u=http://127.0.0.1:%d/hello", up_port), "rc=0 status=200 len=2 body=hi");
    assert_has(call("u=http://127.0.0.1:%d/nowhere", up_port), "rc=0 status=404");
    assert_has(call("u=http://127.0.0.1:%d/echo&m=POST&b=payload", up_port),
               "rc=0 status=201 len=19 body=payload|via-gateway");
    assert_has(call("u=http://127.0.0.1:%d/big", up_port), "rc=0 status=200 len=300000");
    /* a name, resolved on the job pool */
    assert_has(call("u=http://localhost:%d/hello", up_port), "rc=0 status=200 len=2 body=hi");
    assert_has(call("u=http://127.0.0.1:%d/hello", up_port), "rc=0 status=200");
}

static void test_refused_arguments(void **state)
{
    (void)state;
    assert_has(call("u=ftp://127.0.0.1/"), "sync=-2");
    assert_has(call("u=http://user@127.0.0.1/"), "sync=-2");
    assert_has(call("u=http://127.0.0.1:99999/"), "sync=-2");
    assert_has(call("u=http://127.0.0.1:%d/&m=GE%%20T", up_port), "sync=-2");
}

/* The fields the client writes itself or that would change the framing
 * are refused in any case; the other hop-by-hop ones, and names that only
 * look like them, go through. */
static void test_reserved_headers(void **state)
{
    (void)state;
    static const char *const refused[] = {
        "Host:x",           "content-length:3",  "Transfer-Encoding:chunked",
        "CONNECTION:close", "upgrade:websocket", "TE:trailers",
        "Trailer:X-Sum",
    };
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
        assert_has(call("u=http://127.0.0.1:%d/echo&h=%s", up_port, refused[i]), "sync=-2");
    static const char *const passed[] = { "Keep-Alive:5", "Tea:green", "Trailers:x", "Hosts:y" };
    for (size_t i = 0; i < sizeof(passed) / sizeof(passed[0]); i++)
        assert_has(call("u=http://127.0.0.1:%d/hello&h=%s", up_port, passed[i]), "rc=0 status=200");
}

static void test_keepalive_and_limit(void **state)
{
    (void)state;
    raw_script("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", AFTER_KEEP);
    for (int i = 0; i < 3; i++)
        assert_has(call("u=http://127.0.0.1:%d/&c=one", raw.port), "rc=0 status=200 len=2 body=ok");
    assert_int_equal(atomic_load(&raw.accepts), 1);
    assert_int_equal(atomic_load(&raw.requests), 3);

    /* two at once with a limit of one connection: the second waits for it */
    raw_script("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", AFTER_KEEP);
    char path[128];
    snprintf(path, sizeof(path), "/pair?u=http://127.0.0.1:%d/", raw.port);
    flare_test_res_t res;
    assert_int_equal(flare_test_get(tgw, path, &res), 0);
    assert_string_equal(res.body, "ok=2");
    flare_test_res_free(&res);
    assert_int_equal(atomic_load(&raw.accepts), 1);
    assert_int_equal(atomic_load(&raw.requests), 2);
}

static void test_stale_connection_retry(void **state)
{
    (void)state;
    /* the server drops the pooled connection as the second request arrives:
     * a GET is sent again on a new connection, a POST is not */
    raw_script("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", AFTER_CLOSE_SECOND);
    assert_has(call("u=http://127.0.0.1:%d/a&c=one", raw.port), "rc=0 status=200");
    assert_has(call("u=http://127.0.0.1:%d/b&c=one", raw.port), "rc=0 status=200");
    assert_int_equal(atomic_load(&raw.accepts), 2);
    assert_has(call("u=http://127.0.0.1:%d/c&c=one&m=POST&b=x", raw.port), "rc=-9 ");
}

static void test_bad_upstreams(void **state)
{
    (void)state;
    struct {
        const char *reply;
        int after;
        const char *want;
    } cases[] = {
        { "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", AFTER_CLOSE,
          "rc=-13 status=0 len=0 body= err=bad answer from 127.0.0.1" },
        { "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello", AFTER_CLOSE,
          "rc=-13 " },
        { "SSH-2.0-OpenSSH_9.2\r\n\r\n", AFTER_CLOSE, "rc=-13 " },
        { "HTTP/1.1 200 OK\r\nX: a\r\n folded\r\n\r\n", AFTER_CLOSE, "rc=-13 " },
        { "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", AFTER_CLOSE,
          "err=the body ended after 5 of 10 bytes" },
        { "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", AFTER_CLOSE,
          "err=the chunked body ended early" },
        { "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", AFTER_CLOSE, "rc=-13 " },
        { "HTTP/1.1 200 OK\r\nContent-Length: 2000000\r\n\r\n", AFTER_CLOSE, "rc=-10 " },
        { "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", AFTER_RESET, "rc=-" },
        { "", AFTER_RESET, "rc=-9 " },
        { "", AFTER_CLOSE, "rc=-9 " },
        { "", AFTER_SILENT, "rc=-17 status=0 len=0 body= err=127.0.0.1:" },
        { "", AFTER_SILENT, "timed out waiting for the first byte" },
        { "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", AFTER_HOLD,
          "timed out reading the answer" },
        /* until close: a body with no framing is whole at the close */
        { "HTTP/1.1 200 OK\r\n\r\nall of it", AFTER_CLOSE, "rc=0 status=200 len=9 body=all of it" },
        /* interim answers are skipped */
        { "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n", AFTER_CLOSE,
          "rc=0 status=204 len=0" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        raw_script(cases[i].reply, cases[i].after);
        const char *r = call("u=http://127.0.0.1:%d/", raw.port);
        if (strstr(r, cases[i].want) == NULL)
            fail_msg("case %zu: \"%s\" does not contain \"%s\"", i, r, cases[i].want);
    }
    assert_has(call("u=http://127.0.0.1:%d/", raw.port + 0), "rc=0");
    /* nothing listens: refused */
    assert_has(call("u=http://127.0.0.1:%d/", loopback_free_port()), "rc=-8 ");
}

/* A name with several addresses: a refused or unreachable one is skipped
 * (a name such as localhost may give ::1 first while the server listens on
 * 127.0.0.1 only), and the one that worked is tried first next time. */
static void test_address_fallback(void **state)
{
    (void)state;
    for (int i = 0; i < 3; i++) {
        assert_has(call("u=http://pinned.test:%d/hello&c=pin", up_port),
                   "rc=0 status=200 len=2 body=hi");
        assert_has(call("u=http://first.test:%d/hello&c=pin", up_port),
                   "rc=0 status=200 len=2 body=hi");
    }
    /* TLS on the socket that answered: the handshake checks the name */
    assert_has(call("u=https://pinned.test:%d/hello&c=pin", up_tls_port),
               "rc=0 status=200 len=2 body=hi");
    assert_has(call("u=https://pinned.test:%d/echo&c=pin&m=POST&b=x", up_tls_port),
               "rc=0 status=201");
    /* every address refuses: the call fails, naming the host */
    assert_has(call("u=http://dead.test:%d/&c=pin", dead_port), "rc=-8 ");
    assert_has(call("u=http://dead.test:%d/&c=pin", dead_port), "connect to dead.test");
}

static void test_tls(void **state)
{
    (void)state;
    assert_has(call("u=https://127.0.0.1:%d/hello&c=ca", up_tls_port),
               "rc=0 status=200 len=2 body=hi");
    assert_has(call("u=https://127.0.0.1:%d/echo&c=ca&m=POST&b=sealed", up_tls_port),
               "rc=0 status=201 len=18 body=sealed|via-gateway");
    /* again: a pooled TLS connection */
    assert_has(call("u=https://127.0.0.1:%d/hello&c=ca", up_tls_port), "rc=0 status=200");
    /* the system's store does not know our CA */
    assert_has(call("u=https://127.0.0.1:%d/hello&c=sys", up_tls_port), "rc=-14 ");
    assert_has(call("u=https://127.0.0.1:%d/hello&c=sys", up_tls_port), "certificate");
    /* the right CA, the wrong name: the certificate is for 127.0.0.1 only */
    assert_has(call("u=https://localhost:%d/hello&c=ca", up_tls_port), "rc=-14 ");
    /* TLS to a plain port: a handshake failure, not a hang */
    assert_has(call("u=https://127.0.0.1:%d/hello&c=ca", up_port), "rc=-14 ");
}

/* The value of one series in the app's exposition; -1 when absent. */
static double series(const char *text, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = text; (p = strstr(p, name)) != NULL; p += n) {
        if ((p == text || p[-1] == '\n') && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    }
    return -1;
}

static char *render(void)
{
    char *out;
    size_t len;
    assert_int_equal(flare_metrics_render(gw, &out, &len), 0);
    return out;
}

/* flare_client_* series: answers by class, errors by kind, durations, per
 * client and upstream. */
static void test_upstream_metrics(void **state)
{
    (void)state;
    char ok[160], nf[160], cnt[160], inf[160], sum[160], conn[160], proto[160];
    snprintf(ok, sizeof(ok),
             "flare_client_requests_total{client=\"4\",upstream=\"http://first.test:%d\","
             "class=\"2xx\"}",
             up_port);
    snprintf(nf, sizeof(nf),
             "flare_client_requests_total{client=\"4\",upstream=\"http://first.test:%d\","
             "class=\"4xx\"}",
             up_port);
    snprintf(cnt, sizeof(cnt),
             "flare_client_request_duration_seconds_count{client=\"4\","
             "upstream=\"http://first.test:%d\"}",
             up_port);
    snprintf(inf, sizeof(inf),
             "flare_client_request_duration_seconds_bucket{client=\"4\","
             "upstream=\"http://first.test:%d\",le=\"+Inf\"}",
             up_port);
    snprintf(sum, sizeof(sum),
             "flare_client_request_duration_seconds_sum{client=\"4\","
             "upstream=\"http://first.test:%d\"}",
             up_port);
    snprintf(conn, sizeof(conn),
             "flare_client_errors_total{client=\"4\",upstream=\"http://dead.test:%d\","
             "kind=\"connect\"}",
             dead_port);
    snprintf(proto, sizeof(proto),
             "flare_client_errors_total{client=\"0\",upstream=\"http://127.0.0.1:%d\","
             "kind=\"protocol\"}",
             raw.port);
    char *before = render();
    double ok0 = series(before, ok), nf0 = series(before, nf), cnt0 = series(before, cnt);
    double conn0 = series(before, conn), proto0 = series(before, proto);
    /* earlier tests called these upstreams: the series exist already */
    assert_true(ok0 >= 3 && cnt0 >= 3 && conn0 >= 2 && proto0 >= 1);
    assert_non_null(strstr(before, "# TYPE flare_client_request_duration_seconds histogram\n"));
    free(before);

    assert_has(call("u=http://first.test:%d/hello&c=pin", up_port), "rc=0 status=200");
    assert_has(call("u=http://first.test:%d/hello&c=pin", up_port), "rc=0 status=200");
    assert_has(call("u=http://first.test:%d/nowhere&c=pin", up_port), "rc=0 status=404");
    assert_has(call("u=http://dead.test:%d/&c=pin", dead_port), "rc=-8 ");
    raw_script("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
               AFTER_CLOSE);
    assert_has(call("u=http://127.0.0.1:%d/", raw.port), "rc=-13 ");

    char *after = render();
    assert_true(series(after, ok) == ok0 + 2);
    assert_true(series(after, nf) == (nf0 < 0 ? 0 : nf0) + 1);
    assert_true(series(after, cnt) == cnt0 + 3);
    assert_true(series(after, inf) == series(after, cnt));
    assert_true(series(after, sum) > 0);
    assert_true(series(after, conn) == conn0 + 1);
    assert_true(series(after, proto) == proto0 + 1);
    /* one family header per family, whatever the number of clients */
    const char *p = after;
    int types = 0;
    while ((p = strstr(p, "# TYPE flare_client_requests_total ")) != NULL) {
        types++;
        p++;
    }
    assert_int_equal(types, 1);
    free(after);
}

/* Redirects, followed only when asked. */
static void test_redirects(void **state)
{
    (void)state;
    int p = up_port;
    /* not asked: the 3xx is the answer */
    assert_has(call("u=http://127.0.0.1:%d/r302", p), "rc=0 status=302 len=5 body=moved");
    assert_has(call("u=http://127.0.0.1:%d/r302&r=3", p), "rc=0 status=200 len=2 body=hi");
    /* 303, and 301/302 to a POST: GET without the body (or its fields);
     * 307/308: the same method and body; a relative Location */
    assert_has(call("u=http://127.0.0.1:%d/r303&r=1&m=POST&b=xyz", p),
               "rc=0 status=200 len=20 body=GET 0 auth=0 ctype=0");
    assert_has(call("u=http://127.0.0.1:%d/r301&r=1&m=POST&b=xyz", p), "body=GET 0 auth=0");
    assert_has(call("u=http://127.0.0.1:%d/r307&r=1&m=POST&b=xyz", p),
               "body=POST 3 auth=0 ctype=1");
    assert_has(call("u=http://127.0.0.1:%d/r307&r=1&m=PUT&b=xyz", p), "body=PUT 3");
    /* credentials: kept on the same origin, dropped when the redirect leaves it */
    assert_has(call("u=http://127.0.0.1:%d/r307&r=1&a=1", p), "body=GET 0 auth=1");
    assert_has(call("u=http://127.0.0.1:%d/away&r=1&a=1&c=pin&m=POST&b=xyz", p),
               "rc=0 status=200 len=21 body=POST 3 auth=0 ctype=1");
    /* limits and bad Locations */
    assert_has(call("u=http://127.0.0.1:%d/loop&r=3", p), "rc=-13 ");
    assert_has(call("u=http://127.0.0.1:%d/loop&r=3", p), "too many redirects (more than 3)");
    assert_has(call("u=http://127.0.0.1:%d/r302&r=1", p), "rc=0 status=200");
    assert_has(call("u=http://127.0.0.1:%d/badloc&r=2", p), "rc=-13 ");
    assert_has(call("u=http://127.0.0.1:%d/badloc&r=2", p), "not an http(s) URL: ftp://x/");
    assert_has(call("u=http://127.0.0.1:%d/nolocation&r=2", p), "rc=0 status=302");
}

static bool wait_for(_Atomic int *v, int want, int ms)
{
    for (int i = 0; i < ms && atomic_load(v) < want; i++)
        usleep(1000);
    return atomic_load(v) >= want;
}

/* An upstream call made with .req is cancelled when the inbound request's
 * client goes away: the upstream connection closes at once (not at the
 * 30 s first-byte timeout of cl_sys), the callback runs with
 * FLARE_ECANCELED. */
static void test_abort_cancels_upstream(void **state)
{
    (void)state;
    raw_script("", AFTER_SILENT);
    atomic_store(&raw.eofs, 0);
    int canceled = atomic_load(&gw_canceled);
    int fd = loopback_connect(flare_test_port(tgw));
    assert_true(fd >= 0);
    char rq[256];
    int n = snprintf(rq, sizeof(rq),
                     "GET /call?u=http://127.0.0.1:%d/&c=sys&bind=1 HTTP/1.1\r\nHost: t\r\n\r\n",
                     raw.port);
    assert_int_equal(send(fd, rq, (size_t)n, 0), n);
    assert_true(wait_for(&raw.requests, 1, 5000)); /* the call reached the upstream */
    /* gone: a reset (a FIN alone is a half-close, after which an HTTP/1.1
     * client may still read its answer) */
    struct linger lg = { 1, 0 };
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    close(fd);
    assert_true(wait_for(&raw.eofs, 1, 3000)); /* and was cancelled: its connection closed */
    assert_true(wait_for(&gw_canceled, canceled + 1, 3000));
    /* the gateway goes on serving */
    assert_has(call("u=http://127.0.0.1:%d/hello&bind=1", up_port), "rc=0 status=200");
}

static void test_cancel(void **state)
{
    (void)state;
    raw_script("", AFTER_SILENT);
    flare_test_res_t res;
    assert_int_equal(flare_test_get(tgw, "/cancel", &res), 0);
    assert_string_equal(res.body, "no callback");
    flare_test_res_free(&res);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain),
        cmocka_unit_test(test_refused_arguments),
        cmocka_unit_test(test_reserved_headers),
        cmocka_unit_test(test_keepalive_and_limit),
        cmocka_unit_test(test_stale_connection_retry),
        cmocka_unit_test(test_bad_upstreams),
        cmocka_unit_test(test_tls),
        cmocka_unit_test(test_address_fallback),
        cmocka_unit_test(test_upstream_metrics),
        cmocka_unit_test(test_redirects),
        cmocka_unit_test(test_abort_cancels_upstream),
        cmocka_unit_test(test_cancel),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
