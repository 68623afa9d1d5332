/* Server-sent events: the encoding (multi-line data with LF, CR and CRLF,
 * id/event validation, retry, comments, sizing), and on a real server the
 * stream's life: start refused without flare_sse_route, the backpressure
 * bound, a client that goes away, the drain, and broadcasts to rooms on
 * several workers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <cmocka.h>

#include "flare/flare.h"
#include "flare/sse.h"
#include "harness.h"

#define S(lit) FLARE_STR(lit)

static void assert_format(const flare_sse_event_t *ev, const char *expected)
{
    char buf[512];
    size_t n = 0;
    assert_int_equal(flare_sse_format(ev, buf, sizeof(buf), &n), 0);
    assert_int_equal(n, strlen(expected));
    assert_memory_equal(buf, expected, n);
}

static void test_format_fields(void **state)
{
    (void)state;
    assert_format(&(flare_sse_event_t){ .data = S("hello") }, "data: hello\n\n");
    assert_format(&(flare_sse_event_t){ .id = S("7"), .event = S("tick"), .data = S("x") },
                  "event: tick\nid: 7\ndata: x\n\n");
    assert_format(&(flare_sse_event_t){ .retry_ms = 2500 }, "retry: 2500\n\n");
    assert_format(&(flare_sse_event_t){ .retry_ms = 4294967295u, .data = S("") },
                  "retry: 4294967295\ndata: \n\n");
    /* an empty id is allowed (it resets the client's last event id) */
    assert_format(&(flare_sse_event_t){ .id = S("") }, "id: \n\n");
    assert_format(&(flare_sse_event_t){ 0 }, "\n");
    /* a leading space in data survives the client's one-space strip */
    assert_format(&(flare_sse_event_t){ .data = S(" x") }, "data:  x\n\n");
}

static void test_format_multiline(void **state)
{
    (void)state;
    assert_format(&(flare_sse_event_t){ .data = S("a\nb") }, "data: a\ndata: b\n\n");
    assert_format(&(flare_sse_event_t){ .data = S("a\rb") }, "data: a\ndata: b\n\n");
    assert_format(&(flare_sse_event_t){ .data = S("a\r\nb") }, "data: a\ndata: b\n\n");
    /* CR then LF is one break; LF then CR is two */
    assert_format(&(flare_sse_event_t){ .data = S("a\n\rb") }, "data: a\ndata: \ndata: b\n\n");
    assert_format(&(flare_sse_event_t){ .data = S("a\r\n\r\nb") }, "data: a\ndata: \ndata: b\n\n");
    assert_format(&(flare_sse_event_t){ .data = S("a\n") }, "data: a\ndata: \n\n");
    assert_format(&(flare_sse_event_t){ .data = S("\r") }, "data: \ndata: \n\n");
    assert_format(&(flare_sse_event_t){ .data = S("x\r\ny\rz\nw") },
                  "data: x\ndata: y\ndata: z\ndata: w\n\n");
    /* bytes other than CR and LF pass as they are (NUL, UTF-8) */
    char nul[] = "data: a\0b\xc3\xa9\n\n";
    char buf[64];
    size_t n;
    assert_int_equal(flare_sse_format(&(flare_sse_event_t){ .data = { "a\0b\xc3\xa9", 5 } }, buf,
                                      sizeof(buf), &n),
                     0);
    assert_int_equal(n, sizeof(nul) - 1);
    assert_memory_equal(buf, nul, n);
}

static void test_format_invalid(void **state)
{
    (void)state;
    char buf[64];
    size_t n = 99;
    assert_int_equal(flare_sse_format(&(flare_sse_event_t){ .id = S("1\n2") }, buf, 64, &n),
                     FLARE_EINVAL);
    assert_int_equal(flare_sse_format(&(flare_sse_event_t){ .id = S("1\r") }, buf, 64, &n),
                     FLARE_EINVAL);
    assert_int_equal(flare_sse_format(&(flare_sse_event_t){ .id = { "1\0", 2 } }, buf, 64, &n),
                     FLARE_EINVAL);
    assert_int_equal(flare_sse_format(&(flare_sse_event_t){ .event = S("a\r\nb") }, buf, 64, &n),
                     FLARE_EINVAL);
    assert_int_equal(flare_sse_format(&(flare_sse_event_t){ .event = S("\n") }, buf, 64, &n),
                     FLARE_EINVAL);
    assert_int_equal(flare_sse_format(NULL, buf, 64, &n), FLARE_EINVAL);
    assert_int_equal(flare_sse_format(&(flare_sse_event_t){ 0 }, buf, 64, NULL), FLARE_EINVAL);
    assert_int_equal(flare_sse_format(&(flare_sse_event_t){ .data = { NULL, 3 } }, buf, 64, &n),
                     FLARE_EINVAL);
    assert_int_equal(n, 99); /* untouched on a refusal */
}

static void test_format_sizing(void **state)
{
    (void)state;
    flare_sse_event_t ev = { .id = S("42"), .data = S("one\ntwo") };
    const char *expected = "id: 42\ndata: one\ndata: two\n\n";
    size_t need = 0;
    assert_int_equal(flare_sse_format(&ev, NULL, 0, &need), FLARE_ETOOBIG);
    assert_int_equal(need, strlen(expected));
    char buf[64];
    memset(buf, 'Z', sizeof(buf));
    size_t n;
    assert_int_equal(flare_sse_format(&ev, buf, need - 1, &n), FLARE_ETOOBIG);
    assert_int_equal(n, need);
    assert_int_equal(flare_sse_format(&ev, buf, need, &n), 0);
    assert_memory_equal(buf, expected, need);
    assert_int_equal(buf[need], 'Z'); /* nothing past the length */
}

static void test_format_comment(void **state)
{
    (void)state;
    char buf[32];
    size_t n;
    assert_int_equal(flare_sse_format_comment(S("ping"), buf, sizeof(buf), &n), 0);
    assert_int_equal(n, 7);
    assert_memory_equal(buf, ": ping\n", 7);
    assert_int_equal(flare_sse_format_comment(S(""), buf, sizeof(buf), &n), 0);
    assert_memory_equal(buf, ": \n", 3);
    assert_int_equal(flare_sse_format_comment(S("a\nb"), buf, sizeof(buf), &n), FLARE_EINVAL);
    assert_int_equal(flare_sse_format_comment(S("a\rb"), buf, sizeof(buf), &n), FLARE_EINVAL);
    assert_int_equal(flare_sse_format_comment(S("ping"), buf, 3, &n), FLARE_ETOOBIG);
    assert_int_equal(n, 7);
}

/* ---- on a real server ---- */

static int connect_to(int port, int rcvbuf)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    if (rcvbuf > 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    struct timeval tv = { 5, 0 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    return fd;
}

static void send_get(int fd, const char *path)
{
    char req[256];
    int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: t\r\n\r\n", path);
    assert_int_equal(write(fd, req, (size_t)n), n);
}

/* Reads until `needle` has arrived (or EOF / the 5 s timeout); returns
 * whether it did. *acc collects everything read. */
static bool read_until(int fd, char *acc, size_t cap, size_t *len, const char *needle)
{
    for (;;) {
        acc[*len] = '\0';
        if (strstr(acc, needle) != NULL)
            return true;
        if (*len + 1 >= cap)
            return false;
        ssize_t r = read(fd, acc + *len, cap - 1 - *len);
        if (r <= 0)
            return false;
        *len += (size_t)r;
    }
}

static bool wait_for(_Atomic int *v, int want)
{
    for (int i = 0; i < 500; i++) {
        if (atomic_load(v) == want)
            return true;
        usleep(10000);
    }
    return atomic_load(v) == want;
}

static _Atomic int closed_count, last_reason, start_rc, flood_rc, flood_sent;
static _Atomic int workers_seen, flood_after; /* bit per worker id */

static void count_close(flare_sse_t *s, int reason, void *ud)
{
    (void)s;
    (void)ud;
    atomic_store(&last_reason, reason);
    atomic_fetch_add(&closed_count, 1);
}

static int plain_get(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    flare_sse_t *s;
    atomic_store(&start_rc, flare_sse_start(req, res, NULL, &s));
    return flare_res_send(res, 200, S("text/plain"), S("no"));
}

static void test_start_needs_route(void **state)
{
    (void)state;
    harness_t h = { .app = flare_app_new(&(flare_config_t){ .workers = 1 }) };
    assert_non_null(h.app);
    assert_int_equal(flare_get(h.app, "/x", plain_get, NULL), 0);
    assert_int_equal(harness_start(&h), 0);
    char *r = harness_roundtrip(&h, "GET /x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    assert_non_null(strstr(r, "200 OK"));
    free(r);
    assert_int_equal(atomic_load(&start_rc), FLARE_ESTATE);
    /* not running an SSE app: the broadcast says so */
    assert_int_equal(flare_sse_broadcast(h.app, S(""), &(flare_sse_event_t){ .data = S("x") }),
                     FLARE_ESTATE);
    assert_int_equal(harness_stop(&h), 0);
    flare_app_free(h.app);
}

/* /flood: 4 KiB events from a timer until the stream refuses one */
static void flood(void *ud)
{
    flare_sse_t *s = ud;
    static char big[4096];
    memset(big, 'x', sizeof(big));
    int rc = 0, sent = 0;
    while (sent < 100000 &&
           (rc = flare_sse_send(s, &(flare_sse_event_t){ .data = { big, sizeof(big) } })) == 0)
        sent++;
    atomic_store(&flood_sent, sent);
    atomic_store(&flood_rc, rc);
    /* the handle stays valid until on_close: calls now say closed */
    atomic_store(&flood_after,
                 flare_sse_send(s, &(flare_sse_event_t){ .data = S("x") }) == FLARE_ECLOSED &&
                     !flare_sse_open(s) && flare_sse_queued(s) == 0);
}

static int flood_handler(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    flare_sse_t *s;
    flare_sse_config_t cfg = { .heartbeat_ms = FLARE_SSE_HEARTBEAT_OFF,
                               .max_queued = 64 * 1024,
                               .on_close = count_close };
    int rc = flare_sse_start(req, res, &cfg, &s);
    if (rc != 0)
        return rc;
    flare_worker_timer(flare_req_worker(req), 0, flood, s);
    return FLARE_ASYNC;
}

static void test_backpressure(void **state)
{
    (void)state;
    atomic_store(&closed_count, 0);
    harness_t h = { .app = flare_app_new(&(flare_config_t){ .workers = 1 }) };
    assert_non_null(h.app);
    assert_int_equal(flare_sse_route(h.app, "/flood", flood_handler, NULL), 0);
    assert_int_equal(harness_start(&h), 0);
    int fd = connect_to(h.port, 4096); /* a client that does not read */
    send_get(fd, "/flood");
    assert_true(wait_for(&closed_count, 1));
    assert_int_equal(atomic_load(&flood_rc), FLARE_ETOOBIG);
    assert_int_equal(atomic_load(&last_reason), FLARE_ETOOBIG);
    assert_int_equal(atomic_load(&flood_after), 1);
    /* the kernel's buffers plus at most 64 KiB: far from the 400 MiB tried */
    assert_true(atomic_load(&flood_sent) > 0);
    assert_true(atomic_load(&flood_sent) < 20000);
    close(fd);
    /* the server goes on serving */
    char *r = harness_roundtrip(&h, "GET /nope HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    assert_non_null(strstr(r, "404"));
    free(r);
    assert_int_equal(harness_stop(&h), 0);
    flare_app_free(h.app);
}

/* /hold: open until the client goes or the server drains; joins room "a"
 * when asked (?room=a) */
static int hold_handler(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    flare_sse_t *s;
    flare_str_t room = flare_req_query_param(req, "room");
    flare_sse_config_t cfg = { .heartbeat_ms = 50, .on_close = count_close };
    int rc = flare_sse_start(req, res, &cfg, &s);
    if (rc != 0)
        return rc;
    atomic_fetch_or(&workers_seen, 1 << flare_worker_id(flare_sse_worker(s)));
    if (room.len > 0)
        assert_int_equal(flare_sse_join(s, room), 0);
    assert_int_equal(flare_sse_join(s, S("all")), 0);
    assert_int_equal(flare_sse_join(s, S("all")), 0); /* twice: once in it */
    assert_int_equal(flare_sse_leave(s, S("all")), 0);
    assert_int_equal(flare_sse_leave(s, S("all")), FLARE_ENOTFOUND);
    assert_int_equal(flare_sse_join(s, S("")), FLARE_EINVAL);
    flare_sse_comment(s, S("hello"));
    return FLARE_ASYNC;
}

static void test_client_gone_and_drain(void **state)
{
    (void)state;
    atomic_store(&closed_count, 0);
    harness_t h = { .app = flare_app_new(&(flare_config_t){ .workers = 1 }) };
    assert_non_null(h.app);
    assert_int_equal(flare_sse_route(h.app, "/hold", hold_handler, NULL), 0);
    assert_int_equal(harness_start(&h), 0);

    char acc[8192];
    size_t len = 0;
    int fd = connect_to(h.port, 0);
    send_get(fd, "/hold");
    assert_true(read_until(fd, acc, sizeof(acc), &len, ": hello\n"));
    assert_non_null(strstr(acc, "Content-Type: text/event-stream\r\n"));
    assert_non_null(strstr(acc, "Cache-Control: no-cache\r\n"));
    assert_true(read_until(fd, acc, sizeof(acc), &len, ": ping\n")); /* the heartbeat */
    close(fd);
    /* noticed at a heartbeat: on_close with ECLOSED */
    assert_true(wait_for(&closed_count, 1));
    assert_int_equal(atomic_load(&last_reason), FLARE_ECLOSED);

    /* drain: the open stream is ended cleanly (the last chunk) */
    len = 0;
    fd = connect_to(h.port, 0);
    send_get(fd, "/hold");
    assert_true(read_until(fd, acc, sizeof(acc), &len, ": hello\n"));
    flare_app_stop(h.app);
    assert_true(read_until(fd, acc, sizeof(acc), &len, "\r\n0\r\n\r\n"));
    pthread_join(h.thread, NULL);
    assert_int_equal(h.rc, 0);
    assert_int_equal(atomic_load(&closed_count), 2);
    assert_int_equal(atomic_load(&last_reason), FLARE_EUNAVAIL);
    close(fd);
    flare_app_free(h.app);
}

static void test_broadcast_rooms_workers(void **state)
{
    (void)state;
    enum { N = 16 };
    atomic_store(&closed_count, 0);
    atomic_store(&workers_seen, 0);
    harness_t h = { .app = flare_app_new(&(flare_config_t){ .workers = 2 }) };
    assert_non_null(h.app);
    assert_int_equal(flare_sse_route(h.app, "/hold", hold_handler, NULL), 0);
    assert_int_equal(harness_start(&h), 0);
    int fds[N];
    char acc[N][8192];
    size_t len[N] = { 0 };
    for (int i = 0; i < N; i++) {
        fds[i] = connect_to(h.port, 0);
        send_get(fds[i], i % 2 == 0 ? "/hold?room=even" : "/hold");
        assert_true(read_until(fds[i], acc[i], sizeof(acc[i]), &len[i], ": hello\n"));
    }
    /* N connections over SO_REUSEPORT: both workers have streams */
    assert_int_equal(atomic_load(&workers_seen), 3);
    flare_sse_event_t ev = { .id = S("1"), .event = S("even"), .data = S("to\nthe even") };
    assert_int_equal(flare_sse_broadcast(h.app, S("even"), &ev), 0);
    ev = (flare_sse_event_t){ .id = S("2"), .data = S("everyone") };
    assert_int_equal(flare_sse_broadcast(h.app, S(""), &ev), 0);
    assert_int_equal(flare_sse_broadcast(h.app, S("nobody"), &ev), 0);
    assert_int_equal(flare_sse_broadcast(h.app, S("x"), &(flare_sse_event_t){ .id = S("\n") }),
                     FLARE_EINVAL);
    for (int i = 0; i < N; i++) {
        assert_true(read_until(fds[i], acc[i], sizeof(acc[i]), &len[i], "data: everyone\n\n"));
        char *even = strstr(acc[i], "event: even\nid: 1\ndata: to\ndata: the even\n\n");
        if (i % 2 == 0) {
            assert_non_null(even);
            assert_true(even < strstr(acc[i], "id: 2\n")); /* in order */
        } else {
            assert_null(even);
        }
        close(fds[i]);
    }
    assert_true(wait_for(&closed_count, N));
    assert_int_equal(harness_stop(&h), 0);
    flare_app_free(h.app);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_format_fields),
        cmocka_unit_test(test_format_multiline),
        cmocka_unit_test(test_format_invalid),
        cmocka_unit_test(test_format_sizing),
        cmocka_unit_test(test_format_comment),
        cmocka_unit_test(test_start_needs_route),
        cmocka_unit_test(test_backpressure),
        cmocka_unit_test(test_client_gone_and_drain),
        cmocka_unit_test(test_broadcast_rooms_workers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
