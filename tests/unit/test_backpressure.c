/* Backpressure, one idiom for streamed responses (flare_res_write) and
 * server-sent events (flare_sse_send), on a real server over HTTP/1.1 with
 * a client that reads slowly: the sends queue and return 0, the handle's
 * *_backpressured() predicate turns true once more than the high-water mark
 * waits for the client, nothing drains while the client does not read, and
 * the drain callback fires (from the loop, not nested in a send, with the
 * predicate false again) once it reads. Every byte arrives, in order. The
 * WebSocket side of the idiom is in test_ws_conn.c. */
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

/* far more than the kernel buffers on loopback, so the server must wait */
#define TOTAL     (16u << 20)
#define PIECE     (16u << 10)
#define HIGH_MARK (64u << 10)

/* What the worker saw, read by the test thread. */
static _Atomic int pauses;      /* times the producer stopped: backpressured */
static _Atomic int drains;      /* drain callbacks */
static _Atomic int bad;         /* a send that did not return 0, a nested or early drain */
static _Atomic int finished;    /* the producer ended the response / stream */
static _Atomic unsigned queued; /* most bytes seen waiting for the client (SSE) */

static void reset(void)
{
    atomic_store(&pauses, 0);
    atomic_store(&drains, 0);
    atomic_store(&bad, 0);
    atomic_store(&finished, 0);
    atomic_store(&queued, 0);
}

static int connect_slow(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    int rcvbuf = 4096; /* a client that reads slowly: a small window */
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    struct timeval tv = { 10, 0 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    return fd;
}

/* The client does not read: the kernel's buffers may still grow and take
 * some of the queue (a drain or two), then the producer stays paused.
 * Waits for that (no change for 300 ms), and says whether it happened. */
static bool wait_paused(void)
{
    int last = -1;
    for (int i = 0; i < 50; i++) {
        int p = atomic_load(&pauses);
        if (p >= 1 && p == last && atomic_load(&drains) == p - 1)
            return true;
        last = p;
        usleep(300000);
    }
    return false;
}

static bool wait_at_least(_Atomic int *v, int want)
{
    for (int i = 0; i < 1000; i++) {
        if (atomic_load(v) >= want)
            return true;
        usleep(10000);
    }
    return atomic_load(v) >= want;
}

/* Reads the whole response (until the server closes), counting the 'x'
 * payload bytes after the head (chunk sizes are hex digits, the SSE
 * framing "data: " and newlines: neither holds an 'x'); *tail gets its
 * last bytes. */
static size_t read_all(int fd, char *tail, size_t tail_cap)
{
    static char buf[65536];
    static const char end[] = "\r\n\r\n";
    size_t xs = 0, tl = 0, matched = 0;
    ssize_t r;
    while ((r = read(fd, buf, sizeof(buf))) > 0) {
        for (ssize_t i = 0; i < r; i++) {
            if (matched < 4) /* still in the head */
                matched = buf[i] == end[matched] ? matched + 1 : (buf[i] == '\r' ? 1 : 0);
            else
                xs += buf[i] == 'x';
        }
        size_t keep = (size_t)r < tail_cap - 1 ? (size_t)r : tail_cap - 1;
        if (tl + keep > tail_cap - 1) {
            size_t drop = tl + keep - (tail_cap - 1);
            memmove(tail, tail + drop, tl - drop);
            tl -= drop;
        }
        memcpy(tail + tl, buf + r - (ssize_t)keep, keep);
        tl += keep;
    }
    tail[tl] = '\0';
    return xs;
}

/* ---- flare_res_write ---- */

static char piece[PIECE];
static size_t res_sent;
static bool in_produce;

/* Writes until done or backpressured: the producer of the header's example. */
static void produce(flare_res_t *res, void *ud)
{
    (void)ud;
    if (in_produce)
        atomic_store(&bad, 1); /* a drain nested in a write */
    in_produce = true;
    while (res_sent < TOTAL && !flare_res_backpressured(res)) {
        if (flare_res_write(res, (flare_str_t){ piece, PIECE }) != 0)
            atomic_store(&bad, 2);
        res_sent += PIECE;
    }
    in_produce = false;
    if (res_sent < TOTAL) {
        atomic_fetch_add(&pauses, 1);
    } else {
        if (flare_res_end(res) != 0)
            atomic_store(&bad, 3);
        atomic_store(&finished, 1);
    }
}

static void res_drained(flare_res_t *res, void *ud)
{
    if (flare_res_backpressured(res))
        atomic_store(&bad, 4); /* the predicate is false by the time the callback runs */
    atomic_fetch_add(&drains, 1);
    produce(res, ud);
}

static int gen_handler(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    (void)ud;
    res_sent = 0;
    memset(piece, 'x', sizeof(piece));
    int rc = flare_res_begin(res, 200, S("application/octet-stream"));
    if (rc == 0)
        rc = flare_res_on_drain(res, HIGH_MARK, res_drained, NULL);
    if (rc != 0)
        return rc;
    if (flare_res_backpressured(res))
        atomic_store(&bad, 5);
    produce(res, NULL);
    return FLARE_ASYNC;
}

static void test_res_write_backpressure(void **state)
{
    (void)state;
    reset();
    harness_t h = { .app = flare_app_new(&(flare_config_t){ .workers = 1 }) };
    assert_non_null(h.app);
    assert_int_equal(flare_get(h.app, "/gen", gen_handler, NULL), 0);
    assert_int_equal(harness_start(&h), 0);
    int fd = connect_slow(h.port);
    const char req[] = "GET /gen HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    assert_int_equal(write(fd, req, sizeof(req) - 1), (ssize_t)sizeof(req) - 1);
    /* the client does not read: the producer stops and stays stopped
     * (after what the kernel's growing buffers took) */
    assert_true(wait_paused());
    assert_int_equal(atomic_load(&finished), 0);
    /* it reads: every drain resumes the producer until the end */
    char tail[16];
    assert_int_equal(read_all(fd, tail, sizeof(tail)), TOTAL);
    close(fd);
    assert_non_null(strstr(tail, "\r\n0\r\n\r\n"));
    assert_true(wait_at_least(&finished, 1)); /* set on the worker just after its last write */
    assert_int_equal(atomic_load(&bad), 0);
    assert_true(atomic_load(&drains) >= 1);
    assert_int_equal(atomic_load(&drains), atomic_load(&pauses)); /* each pause was resumed */
    /* the server goes on serving */
    char *r = harness_roundtrip(&h, "GET /nope HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    assert_non_null(strstr(r, "404"));
    free(r);
    assert_int_equal(harness_stop(&h), 0);
    flare_app_free(h.app);
}

/* Without flare_res_on_drain the predicate works alone at the default mark. */
static int default_handler(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    (void)ud;
    int rc = flare_res_begin(res, 200, S("application/octet-stream"));
    if (rc != 0)
        return rc;
    memset(piece, 'x', sizeof(piece));
    size_t n = 0;
    while (n < TOTAL && !flare_res_backpressured(res)) {
        if (flare_res_write(res, (flare_str_t){ piece, PIECE }) != 0)
            atomic_store(&bad, 6);
        n += PIECE;
    }
    if (n < TOTAL)
        atomic_fetch_add(&pauses, 1);
    /* a response already begun cannot take new settings once complete */
    flare_res_end(res);
    if (flare_res_on_drain(res, 0, NULL, NULL) != FLARE_ESTATE)
        atomic_store(&bad, 7);
    atomic_store(&finished, 1);
    return 0;
}

static void test_res_write_default_mark(void **state)
{
    (void)state;
    reset();
    harness_t h = { .app = flare_app_new(&(flare_config_t){ .workers = 1 }) };
    assert_non_null(h.app);
    assert_int_equal(flare_get(h.app, "/d", default_handler, NULL), 0);
    assert_int_equal(harness_start(&h), 0);
    int fd = connect_slow(h.port);
    const char req[] = "GET /d HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    assert_int_equal(write(fd, req, sizeof(req) - 1), (ssize_t)sizeof(req) - 1);
    assert_true(wait_at_least(&finished, 1));
    assert_int_equal(atomic_load(&pauses), 1);
    assert_int_equal(atomic_load(&bad), 0);
    char tail[16];
    size_t got = read_all(fd, tail, sizeof(tail));
    close(fd);
    /* what was written before the mark was passed, all of it */
    assert_true(got >= FLARE_RES_HIGH_WATER && got < TOTAL);
    assert_int_equal(got % PIECE, 0);
    assert_non_null(strstr(tail, "\r\n0\r\n\r\n"));
    assert_int_equal(harness_stop(&h), 0);
    flare_app_free(h.app);
}

/* ---- flare_sse_send ---- */

static size_t sse_sent;

static void sse_produce(flare_sse_t *s)
{
    static char data[PIECE];
    memset(data, 'x', sizeof(data));
    while (sse_sent < TOTAL && !flare_sse_backpressured(s)) {
        if (flare_sse_send(s, &(flare_sse_event_t){ .data = { data, sizeof(data) } }) != 0)
            atomic_store(&bad, 10);
        sse_sent += PIECE;
        size_t q = flare_sse_queued(s);
        if (q > atomic_load(&queued))
            atomic_store(&queued, (unsigned)q);
    }
    if (sse_sent < TOTAL) {
        atomic_fetch_add(&pauses, 1);
    } else {
        flare_sse_end(s);
        atomic_store(&finished, 1);
    }
}

static void sse_drained(flare_sse_t *s, void *ud)
{
    (void)ud;
    if (flare_sse_backpressured(s))
        atomic_store(&bad, 11);
    atomic_fetch_add(&drains, 1);
    sse_produce(s);
}

static void sse_closed(flare_sse_t *s, int reason, void *ud)
{
    (void)s;
    (void)ud;
    if (reason != 0)
        atomic_store(&bad, 12); /* never dropped: the producer kept below max_queued */
}

static int sse_handler(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    flare_sse_t *s;
    flare_sse_config_t cfg = { .heartbeat_ms = FLARE_SSE_HEARTBEAT_OFF,
                               .max_queued = 1u << 20,
                               .high_water = HIGH_MARK,
                               .on_close = sse_closed,
                               .on_drain = sse_drained };
    int rc = flare_sse_start(req, res, &cfg, &s);
    if (rc != 0)
        return rc;
    sse_sent = 0;
    sse_produce(s);
    return FLARE_ASYNC;
}

static void test_sse_backpressure(void **state)
{
    (void)state;
    reset();
    harness_t h = { .app = flare_app_new(&(flare_config_t){ .workers = 1 }) };
    assert_non_null(h.app);
    assert_int_equal(flare_sse_route(h.app, "/events", sse_handler, NULL), 0);
    assert_int_equal(harness_start(&h), 0);
    int fd = connect_slow(h.port);
    const char req[] = "GET /events HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    assert_int_equal(write(fd, req, sizeof(req) - 1), (ssize_t)sizeof(req) - 1);
    assert_true(wait_paused());
    assert_int_equal(atomic_load(&finished), 0);
    /* paused at the mark: one event past it at most, far below max_queued */
    assert_true(atomic_load(&queued) > HIGH_MARK);
    assert_true(atomic_load(&queued) <= HIGH_MARK + PIECE + 1024);
    char tail[16];
    size_t got = read_all(fd, tail, sizeof(tail)); /* the stream ends: the server closes */
    close(fd);
    assert_int_equal(got, TOTAL);
    assert_true(wait_at_least(&finished, 1)); /* set on the worker just after its last write */
    assert_int_equal(atomic_load(&bad), 0);
    assert_true(atomic_load(&drains) >= 1);
    assert_int_equal(atomic_load(&drains), atomic_load(&pauses));
    assert_int_equal(harness_stop(&h), 0);
    flare_app_free(h.app);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_res_write_backpressure),
        cmocka_unit_test(test_res_write_default_mark),
        cmocka_unit_test(test_sse_backpressure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
