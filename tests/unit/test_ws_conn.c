/* WebSocket runtime, end to end in one process: an app with WebSocket
 * routes runs on two workers, raw client sockets talk to it. Covers what the
 * example server cannot be configured for: heartbeats (a dead peer is
 * dropped, a live one kept), backpressure (flare_ws_backpressured, on_drain),
 * a consumer that never reads (dropped at the write limit), the close
 * handshake both ways and its timeout, on_open refusals, subprotocols, the
 * Origin allow-list, ids, rooms, broadcast and send-to across workers (a
 * compressed broadcast shared byte for byte), and shutdown: 1001 to open
 * connections, on_close for every connection that was opened. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include <cmocka.h>

#include <flare/flare.h>
#include <flare/ws.h>

#include "ws/frame.h"

static flare_app_t *app;
static pthread_t server;
static int run_rc = -100;
static int port;

/* written on the workers, read by the test thread after waiting */
static int opened, closed, last_code, drains, flood_rc, hard_rc;
static char last_reason[128]; /* under reason_mu: both workers close connections */
static pthread_mutex_t reason_mu = PTHREAD_MUTEX_INITIALIZER;

#define LOAD(x)     __atomic_load_n(&(x), __ATOMIC_SEQ_CST)
#define STORE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_SEQ_CST)
#define INC(x)      __atomic_add_fetch(&(x), 1, __ATOMIC_SEQ_CST)

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---- server side ---- */

static void on_close(flare_ws_t *ws, int code, flare_str_t reason)
{
    (void)ws;
    size_t n = reason.len < sizeof(last_reason) - 1 ? reason.len : sizeof(last_reason) - 1;
    pthread_mutex_lock(&reason_mu);
    memcpy(last_reason, reason.ptr != NULL ? reason.ptr : "", n);
    last_reason[n] = '\0';
    pthread_mutex_unlock(&reason_mu);
    STORE(last_code, code);
    INC(closed);
}

static int count_open(flare_ws_t *ws, flare_req_t *req)
{
    (void)ws;
    (void)req;
    INC(opened);
    return 0;
}

static void echo(flare_ws_t *ws, flare_ws_opcode_t op, flare_str_t msg)
{
    flare_ws_send(ws, op, msg);
}

static bool starts(flare_str_t s, const char *p)
{
    size_t n = strlen(p);
    return s.len >= n && memcmp(s.ptr, p, n) == 0;
}

static int hub_open(flare_ws_t *ws, flare_req_t *req)
{
    if (flare_req_query_param(req, "deny").ptr != NULL)
        return 401;
    INC(opened);
    assert_int_equal(flare_ws_join(ws, FLARE_STR("lobby")), 0);
    assert_int_equal(flare_ws_join(ws, FLARE_STR("lobby")), 0); /* twice: no-op */
    assert_int_equal(flare_ws_join(ws, FLARE_STR("other")), 0);
    assert_int_equal(flare_ws_leave(ws, FLARE_STR("other")), 0);
    assert_int_equal(flare_ws_leave(ws, FLARE_STR("other")), FLARE_ENOTFOUND);
    /* sending before the 101 is out: queued behind it */
    char hello[64];
    flare_str_t proto = flare_ws_protocol(ws); /* a view: not NUL-terminated */
    int n = snprintf(hello, sizeof(hello), "welcome %.*s", (int)(proto.len > 0 ? proto.len : 1),
                     proto.len > 0 ? proto.ptr : "-");
    return flare_ws_send_text(ws, (flare_str_t){ hello, (size_t)n }) == 0 ? 0 : 500;
}

static void hub_message(flare_ws_t *ws, flare_ws_opcode_t op, flare_str_t m)
{
    (void)op;
    char buf[128];
    if (starts(m, "bcast:")) {
        flare_ws_broadcast(flare_ws_app(ws), FLARE_STR("lobby"), FLARE_WS_TEXT,
                           (flare_str_t){ m.ptr + 6, m.len - 6 }, 0);
    } else if (starts(m, "all:")) {
        flare_ws_broadcast(flare_ws_app(ws), FLARE_STR_NULL, FLARE_WS_TEXT,
                           (flare_str_t){ m.ptr + 4, m.len - 4 }, flare_ws_id(ws));
    } else if (starts(m, "to:")) {
        /* to:<id>:<text> */
        uint64_t id = strtoull(m.ptr + 3, NULL, 10);
        const char *colon = memchr(m.ptr + 3, ':', m.len - 3);
        assert_non_null(colon);
        int rc = flare_ws_send_to(flare_ws_app(ws), id, FLARE_WS_TEXT,
                                  (flare_str_t){ colon + 1, (size_t)(m.ptr + m.len - colon - 1) });
        assert_int_equal(rc, 0);
    } else if (starts(m, "who")) {
        int n = snprintf(buf, sizeof(buf), "%llu %u", (unsigned long long)flare_ws_id(ws),
                         flare_worker_id(flare_ws_worker(ws)));
        flare_ws_send_text(ws, (flare_str_t){ buf, (size_t)n });
    } else if (starts(m, "close")) {
        assert_int_equal(flare_ws_close(ws, 5000, FLARE_STR_NULL), FLARE_EINVAL);
        assert_int_equal(flare_ws_close(ws, 0, FLARE_STR("reason without code")), FLARE_EINVAL);
        assert_int_equal(flare_ws_close(ws, 4000, FLARE_STR("bye")), 0);
        assert_int_equal(flare_ws_close(ws, 4001, FLARE_STR("again")), 0); /* no-op */
        assert_int_equal(flare_ws_send_text(ws, FLARE_STR("too late")), FLARE_ECLOSED);
    }
}

static void flood(flare_ws_t *ws, flare_ws_opcode_t op, flare_str_t m)
{
    (void)op;
    static char block[32768];
    bool hard = starts(m, "hard");
    int rc = 0;
    assert_false(flare_ws_backpressured(ws));
    for (int i = 0; i < 100000; i++) {
        rc = flare_ws_send_binary(ws, (flare_str_t){ block, sizeof(block) });
        if (rc != 0 || (!hard && flare_ws_backpressured(ws)))
            break;
    }
    if (hard) {
        STORE(hard_rc, rc);
        /* the handle stays valid; sends now fail */
        assert_int_equal(flare_ws_send_text(ws, FLARE_STR("x")), FLARE_ECLOSED);
    } else {
        /* the send that passed the mark was queued all the same: 0 */
        STORE(flood_rc, rc == 0 && flare_ws_backpressured(ws) ? 1 : rc - 1000);
        assert_true(flare_ws_buffered(ws) > 65536);
    }
}

static void on_drain(flare_ws_t *ws)
{
    assert_false(flare_ws_backpressured(ws)); /* cleared before the call */
    INC(drains);
    flare_ws_send_text(ws, FLARE_STR("drained"));
}

static void *serve(void *arg)
{
    (void)arg;
    run_rc = flare_app_run(app, "127.0.0.1:0");
    return NULL;
}

static int setup(void **state)
{
    (void)state;
    flare_config_t cfg;
    flare_config_init(&cfg);
    cfg.workers = 2;
    cfg.drain_timeout_ms = 1500;
    app = flare_app_new(&cfg);
    assert_non_null(app);
    assert_int_equal(flare_ws_route(app, "/echo",
                                    &(flare_ws_config_t){ .on_open = count_open,
                                                          .on_message = echo,
                                                          .on_close = on_close,
                                                          .heartbeat_ms = FLARE_WS_NEVER }),
                     0);
    assert_int_equal(flare_ws_route(app, "/hb",
                                    &(flare_ws_config_t){ .on_open = count_open,
                                                          .on_message = echo,
                                                          .on_close = on_close,
                                                          .heartbeat_ms = 100,
                                                          .heartbeat_misses = 2 }),
                     0);
    assert_int_equal(flare_ws_route(app, "/slow",
                                    &(flare_ws_config_t){ .on_open = count_open,
                                                          .on_message = flood,
                                                          .on_close = on_close,
                                                          .on_drain = on_drain,
                                                          .write_high_water = 65536,
                                                          .write_limit = 262144,
                                                          .write_timeout_ms = 3000 }),
                     0);
    static const char *const protos[] = { "chat.v2", "chat.v1", NULL };
    assert_int_equal(flare_ws_route(app, "/hub",
                                    &(flare_ws_config_t){ .on_open = hub_open,
                                                          .on_message = hub_message,
                                                          .on_close = on_close,
                                                          .protocols = protos,
                                                          .close_timeout_ms = 300 }),
                     0);
    assert_int_equal(flare_ws_route(app, "/dz",
                                    &(flare_ws_config_t){ .on_open = hub_open,
                                                          .on_message = hub_message,
                                                          .on_close = on_close,
                                                          .deflate = true }),
                     0);
    assert_int_equal(flare_ws_route(app, "/ctx",
                                    &(flare_ws_config_t){ .on_open = count_open,
                                                          .on_message = echo,
                                                          .on_close = on_close,
                                                          .deflate = true,
                                                          .deflate_context_takeover = true,
                                                          .deflate_min_size = 16 }),
                     0);
    static const char *const origins[] = { "https://ok.example", NULL };
    assert_int_equal(flare_ws_route(app, "/origin",
                                    &(flare_ws_config_t){ .on_open = count_open,
                                                          .on_message = echo,
                                                          .on_close = on_close,
                                                          .origins = origins,
                                                          .origin_required = true }),
                     0);
    static const char *const bad[] = { "has space", NULL };
    assert_int_equal(flare_ws_route(app, "/bad", &(flare_ws_config_t){ .protocols = bad }),
                     FLARE_EINVAL);
    assert_int_equal(flare_ws_route(app, "/echo", &(flare_ws_config_t){ 0 }), FLARE_EEXIST);
    assert_int_equal(pthread_create(&server, NULL, serve, NULL), 0);
    for (int i = 0; i < 300 && flare_app_port(app) <= 0; i++)
        usleep(10000);
    port = flare_app_port(app);
    assert_true(port > 0);
    usleep(50000);
    return 0;
}

/* ---- client side ---- */

typedef struct client {
    int fd;
    char buf[1 << 20];
    size_t len;
} client_t;

static client_t *client_new(void)
{
    client_t *c = calloc(1, sizeof(*c));
    assert_non_null(c);
    c->fd = -1;
    return c;
}

static void client_free(client_t *c)
{
    if (c->fd >= 0)
        close(c->fd);
    free(c);
}

static int dial(int rcvbuf)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    if (rcvbuf > 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    return fd;
}

static void send_all(int fd, const void *p, size_t n)
{
    const char *s = p;
    while (n > 0) {
        ssize_t w = write(fd, s, n);
        assert_true(w > 0);
        s += w;
        n -= (size_t)w;
    }
}

/* Reads more into c->buf; false on EOF/error/timeout. */
static bool fill(client_t *c, int timeout_ms)
{
    struct pollfd p = { c->fd, POLLIN, 0 };
    if (poll(&p, 1, timeout_ms) <= 0)
        return false;
    ssize_t r = read(c->fd, c->buf + c->len, sizeof(c->buf) - c->len);
    if (r <= 0)
        return false;
    c->len += (size_t)r;
    return true;
}

/* Handshake; returns the HTTP status and leaves the head in `head`. */
static int handshake(client_t *c, const char *path, const char *extra, int rcvbuf, char *head,
                     size_t cap)
{
    c->fd = dial(rcvbuf);
    char req[1024];
    int n = snprintf(req, sizeof(req),
                     "GET %s HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\n"
                     "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                     "Sec-WebSocket-Version: 13\r\n%s\r\n",
                     path, extra != NULL ? extra : "");
    send_all(c->fd, req, (size_t)n);
    char *end;
    while ((end = memmem(c->buf, c->len, "\r\n\r\n", 4)) == NULL) {
        if (!fill(c, 3000))
            fail_msg("no response head");
    }
    size_t hl = (size_t)(end + 4 - c->buf);
    if (head != NULL) {
        size_t k = hl < cap - 1 ? hl : cap - 1;
        memcpy(head, c->buf, k);
        head[k] = '\0';
    }
    int status = atoi(c->buf + 9);
    memmove(c->buf, c->buf + hl, c->len - hl);
    c->len -= hl;
    return status;
}

static void send_frame(client_t *c, uint8_t op, const void *p, size_t n)
{
    static const uint8_t key[4] = { 9, 8, 7, 6 };
    uint8_t *f = malloc(n + FLARE_WS_MAX_HEADER);
    assert_non_null(f);
    size_t h = flare__ws_frame_header(f, op, true, false, n, key);
    memcpy(f + h, p, n);
    flare__ws_unmask(f + h, n, key, 0);
    send_all(c->fd, f, h + n);
    free(f);
}

typedef struct rframe {
    uint8_t op;
    bool rsv1;
    char *data; /* into c->buf, valid until the next read */
    size_t len;
} rframe_t;

/* Next server frame; false on EOF or timeout. */
static bool recv_frame(client_t *c, rframe_t *f, int timeout_ms)
{
    for (;;) {
        if (c->len >= 2) {
            uint8_t b0 = (uint8_t)c->buf[0], b1 = (uint8_t)c->buf[1];
            assert_false(b1 & 0x80); /* server frames are never masked */
            size_t hl = 2, n = b1 & 0x7f;
            if (n == 126 && c->len >= 4) {
                n = (size_t)(uint8_t)c->buf[2] << 8 | (uint8_t)c->buf[3];
                hl = 4;
            } else if (n == 127 && c->len >= 10) {
                n = 0;
                for (int i = 0; i < 8; i++)
                    n = n << 8 | (uint8_t)c->buf[2 + i];
                hl = 10;
            } else if (n >= 126) {
                hl = SIZE_MAX;
            }
            if (hl != SIZE_MAX && c->len >= hl + n) {
                f->op = b0 & 0x0f;
                f->rsv1 = (b0 & 0x40) != 0;
                /* hand out a copy at the end of the buffer region: simplest is
                 * to shift the frame to the front and consume on next call */
                static char out[1 << 20];
                memcpy(out, c->buf + hl, n);
                memmove(c->buf, c->buf + hl + n, c->len - hl - n);
                c->len -= hl + n;
                f->data = out;
                f->len = n;
                return true;
            }
        }
        if (!fill(c, timeout_ms))
            return false;
    }
}

/* Next data message (pings answered when `pong`), or false. */
static bool recv_text(client_t *c, char *out, size_t cap, int timeout_ms)
{
    rframe_t f;
    while (recv_frame(c, &f, timeout_ms)) {
        if (f.op == FLARE_WS_OP_PING) {
            send_frame(c, FLARE_WS_OP_PONG, f.data, f.len);
            continue;
        }
        if (f.op == FLARE_WS_OP_TEXT) {
            size_t k = f.len < cap - 1 ? f.len : cap - 1;
            memcpy(out, f.data, k);
            out[k] = '\0';
            return true;
        }
    }
    return false;
}

static bool wait_eof(client_t *c, int timeout_ms)
{
    uint64_t end = now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        struct pollfd p = { c->fd, POLLIN, 0 };
        int left = (int)(end - now_ms());
        if (left <= 0 || poll(&p, 1, left) <= 0)
            return false;
        char sink[65536];
        ssize_t r = read(c->fd, sink, sizeof(sink));
        if (r <= 0) {
            /* like a real client: the server closed, we close too */
            close(c->fd);
            c->fd = -1;
            return true;
        }
    }
}

static void wait_for(int *counter, int value, int timeout_ms)
{
    uint64_t end = now_ms() + (uint64_t)timeout_ms;
    while (LOAD(*counter) < value && now_ms() < end)
        usleep(5000);
    assert_true(LOAD(*counter) >= value);
}

/* Waits until every connection an earlier test opened has been closed
 * (on the server, a close is noticed a moment after the client goes), so a
 * test's own counts start from a quiet server. */
static void settle(void)
{
    uint64_t end = now_ms() + 5000;
    while (LOAD(opened) != LOAD(closed) && now_ms() < end)
        usleep(5000);
    assert_int_equal(LOAD(opened), LOAD(closed));
}

/* ---- tests ---- */

static void test_echo_and_client_close(void **state)
{
    (void)state;
    settle();
    client_t *c = client_new();
    int closed0 = LOAD(closed);
    char head[512];
    assert_int_equal(handshake(c, "/echo", NULL, 0, head, sizeof(head)), 101);
    assert_non_null(strstr(head, "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"));
    assert_null(strstr(head, "Sec-WebSocket-Extensions")); /* deflate off */
    send_frame(c, FLARE_WS_OP_TEXT, "hello", 5);
    char msg[64];
    assert_true(recv_text(c, msg, sizeof(msg), 2000));
    assert_string_equal(msg, "hello");
    send_frame(c, FLARE_WS_OP_CLOSE, "\x03\xe8going", 7);
    rframe_t f;
    assert_true(recv_frame(c, &f, 2000));
    assert_int_equal(f.op, FLARE_WS_OP_CLOSE);
    assert_int_equal(f.len, 2);
    assert_memory_equal(f.data, "\x03\xe8", 2);
    assert_true(wait_eof(c, 3000));
    wait_for(&closed, closed0 + 1, 2000);
    assert_int_equal(LOAD(last_code), 1000);
    pthread_mutex_lock(&reason_mu);
    char reason[sizeof(last_reason)];
    memcpy(reason, last_reason, sizeof(reason));
    pthread_mutex_unlock(&reason_mu);
    assert_string_equal(reason, "going");
    client_free(c);
}

static void test_server_close_and_timeout(void **state)
{
    (void)state;
    settle();
    /* the server closes; we reply; it closes TCP; on_close has our code */
    client_t *c = client_new();
    int closed0 = LOAD(closed);
    char head[512];
    assert_int_equal(
        handshake(c, "/hub", "Sec-WebSocket-Protocol: chat.v1, chat.v2\r\n", 0, head, sizeof(head)),
        101);
    assert_non_null(strstr(head, "Sec-WebSocket-Protocol: chat.v2\r\n")); /* ours first */
    char msg[64];
    assert_true(recv_text(c, msg, sizeof(msg), 2000));
    assert_string_equal(msg, "welcome chat.v2");
    send_frame(c, FLARE_WS_OP_TEXT, "close", 5);
    rframe_t f;
    assert_true(recv_frame(c, &f, 2000));
    assert_int_equal(f.op, FLARE_WS_OP_CLOSE);
    assert_memory_equal(f.data,
                        "\x0f\xa0"
                        "bye",
                        5);
    send_frame(c, FLARE_WS_OP_CLOSE, "\x0f\xa0", 2);
    assert_true(wait_eof(c, 3000));
    wait_for(&closed, closed0 + 1, 2000);
    assert_int_equal(LOAD(last_code), 4000);
    client_free(c);

    /* no reply within close_timeout_ms (300): dropped, 1006 */
    c = client_new();
    assert_int_equal(handshake(c, "/hub", NULL, 0, NULL, 0), 101);
    assert_true(recv_text(c, msg, sizeof(msg), 2000));
    assert_string_equal(msg, "welcome -");
    uint64_t t0 = now_ms();
    send_frame(c, FLARE_WS_OP_TEXT, "close", 5);
    assert_true(recv_frame(c, &f, 2000));
    assert_int_equal(f.op, FLARE_WS_OP_CLOSE);
    assert_true(wait_eof(c, 3000));
    assert_true(now_ms() - t0 >= 250);
    wait_for(&closed, closed0 + 2, 2000);
    assert_int_equal(LOAD(last_code), 1006);
    client_free(c);
}

static void test_heartbeat(void **state)
{
    (void)state;
    settle();
    /* a peer that answers pings stays */
    client_t *c = client_new();
    int closed0 = LOAD(closed);
    assert_int_equal(handshake(c, "/hb", NULL, 0, NULL, 0), 101);
    uint64_t end = now_ms() + 700;
    int pings = 0;
    rframe_t f;
    while (now_ms() < end) {
        if (recv_frame(c, &f, 50) && f.op == FLARE_WS_OP_PING) {
            pings++;
            send_frame(c, FLARE_WS_OP_PONG, f.data, f.len);
        }
    }
    assert_true(pings >= 4);
    send_frame(c, FLARE_WS_OP_TEXT, "alive", 5);
    char msg[64];
    assert_true(recv_text(c, msg, sizeof(msg), 2000));
    assert_string_equal(msg, "alive");
    assert_int_equal(LOAD(closed), closed0);
    /* now play dead: pings unanswered, dropped after 2 misses */
    uint64_t t0 = now_ms();
    pings = 0;
    while (recv_frame(c, &f, 2000)) {
        assert_int_equal(f.op, FLARE_WS_OP_PING);
        pings++;
    }
    uint64_t took = now_ms() - t0;
    assert_true(pings >= 2);
    assert_true(took >= 150 && took < 2000);
    wait_for(&closed, closed0 + 1, 2000);
    assert_int_equal(LOAD(last_code), 1006);
    client_free(c);
}

static void test_backpressure_and_drain(void **state)
{
    (void)state;
    settle();
    client_t *c = client_new();
    int drains0 = LOAD(drains);
    assert_int_equal(handshake(c, "/slow", NULL, 4096, NULL, 0), 101);
    STORE(flood_rc, 0);
    send_frame(c, FLARE_WS_OP_TEXT, "soft", 4);
    wait_for(&flood_rc, 1, 3000);
    assert_int_equal(LOAD(flood_rc),
                     1); /* sends returned 0 and flare_ws_backpressured turned true */
    /* read everything: the queue drains, on_drain says so */
    rframe_t f;
    bool got = false;
    while (recv_frame(c, &f, 3000)) {
        if (f.op == FLARE_WS_OP_TEXT) {
            assert_int_equal(f.len, 7);
            assert_memory_equal(f.data, "drained", 7);
            got = true;
            break;
        }
        assert_int_equal(f.op, FLARE_WS_OP_BINARY);
        assert_int_equal(f.len, 32768);
    }
    assert_true(got);
    assert_int_equal(LOAD(drains), drains0 + 1);
    client_free(c);
}

static void test_consumer_that_never_reads(void **state)
{
    (void)state;
    settle();
    client_t *c = client_new();
    int closed0 = LOAD(closed);
    assert_int_equal(handshake(c, "/slow", NULL, 4096, NULL, 0), 101);
    STORE(hard_rc, 0);
    send_frame(c, FLARE_WS_OP_TEXT, "hard", 4);
    /* past write_limit (256 KiB queued): dropped at once, not buffered */
    wait_for(&closed, closed0 + 1, 3000);
    assert_int_equal(LOAD(hard_rc), FLARE_ETOOBIG);
    assert_int_equal(LOAD(last_code), 1006);
    client_free(c);
}

static void test_refusals(void **state)
{
    (void)state;
    settle();
    int opened0 = LOAD(opened), closed0 = LOAD(closed);
    client_t *c = client_new();
    assert_int_equal(handshake(c, "/hub?deny=1", NULL, 0, NULL, 0), 401);
    client_free(c);
    c = client_new();
    assert_int_equal(handshake(c, "/origin", "Origin: https://ok.example\r\n", 0, NULL, 0), 101);
    client_free(c);
    c = client_new();
    assert_int_equal(handshake(c, "/origin", "Origin: https://evil.example\r\n", 0, NULL, 0), 403);
    client_free(c);
    c = client_new();
    assert_int_equal(handshake(c, "/origin", NULL, 0, NULL, 0), 403); /* required */
    client_free(c);
    c = client_new();
    assert_int_equal(handshake(c, "/echo", "Origin: http://elsewhere:1\r\n", 0, NULL, 0), 403);
    client_free(c);
    /* one was opened (and closed by our EOF), none of the refused */
    wait_for(&closed, closed0 + 1, 2000);
    assert_int_equal(LOAD(opened), opened0 + 1);
    usleep(100000);
    assert_int_equal(LOAD(closed), closed0 + 1);
}

/* Opens hub connections until both workers hold one; returns how many. */
static int open_on_both(client_t **cs, int max, const char *path, const char *extra, uint64_t *ids,
                        unsigned *wids)
{
    bool seen[2] = { false, false };
    int n = 0;
    while (n < max && !(seen[0] && seen[1] && n >= 3)) {
        cs[n] = client_new();
        assert_int_equal(handshake(cs[n], path, extra, 0, NULL, 0), 101);
        char msg[128];
        assert_true(recv_text(cs[n], msg, sizeof(msg), 2000)); /* welcome */
        send_frame(cs[n], FLARE_WS_OP_TEXT, "who", 3);
        assert_true(recv_text(cs[n], msg, sizeof(msg), 2000));
        unsigned long long id;
        assert_int_equal(sscanf(msg, "%llu %u", &id, &wids[n]), 2);
        ids[n] = id;
        assert_true(wids[n] < 2);
        seen[wids[n]] = true;
        n++;
    }
    assert_true(seen[0] && seen[1]);
    /* ids are unique and name their worker */
    for (int i = 0; i < n; i++) {
        assert_int_equal(ids[i] & 0xffff, wids[i]);
        for (int j = 0; j < i; j++)
            assert_true(ids[i] != ids[j]);
    }
    return n;
}

static void test_broadcast_and_send_to(void **state)
{
    (void)state;
    settle();
    client_t *cs[32];
    uint64_t ids[32];
    unsigned wids[32];
    int n = open_on_both(cs, 32, "/hub", NULL, ids, wids);
    char msg[128];
    /* room broadcast from one connection reaches all of them, on both workers */
    send_frame(cs[0], FLARE_WS_OP_TEXT, "bcast:hi room", 13);
    for (int i = 0; i < n; i++) {
        assert_true(recv_text(cs[i], msg, sizeof(msg), 2000));
        assert_string_equal(msg, "hi room");
    }
    /* to everyone but the sender */
    send_frame(cs[1], FLARE_WS_OP_TEXT, "all:hi all", 10);
    for (int i = 0; i < n; i++) {
        if (i == 1)
            continue;
        assert_true(recv_text(cs[i], msg, sizeof(msg), 2000));
        assert_string_equal(msg, "hi all");
    }
    /* send-to across workers */
    int a = 0, b = 0;
    while (wids[b] == wids[a])
        b++;
    char cmd[64];
    int len = snprintf(cmd, sizeof(cmd), "to:%llu:direct", (unsigned long long)ids[a]);
    send_frame(cs[b], FLARE_WS_OP_TEXT, cmd, (size_t)len);
    assert_true(recv_text(cs[a], msg, sizeof(msg), 2000));
    assert_string_equal(msg, "direct");
    /* nothing else arrived anywhere */
    for (int i = 0; i < n; i++) {
        rframe_t f;
        assert_false(recv_frame(cs[i], &f, i == 0 ? 100 : 10));
    }
    /* from outside any worker thread too */
    assert_int_equal(
        flare_ws_broadcast(app, FLARE_STR("lobby"), FLARE_WS_BINARY, FLARE_STR("\x01\x02"), 0), 0);
    for (int i = 0; i < n; i++) {
        rframe_t f;
        assert_true(recv_frame(cs[i], &f, 2000));
        assert_int_equal(f.op, FLARE_WS_OP_BINARY);
        assert_int_equal(f.len, 2);
    }
    assert_int_equal(flare_ws_send_to(app, ids[a], FLARE_WS_TEXT, FLARE_STR("from main")), 0);
    assert_true(recv_text(cs[a], msg, sizeof(msg), 2000));
    assert_string_equal(msg, "from main");
    assert_int_equal(flare_ws_send_to(app, 12345u << 16 | 7, FLARE_WS_TEXT, FLARE_STR("x")),
                     FLARE_ENOTFOUND);
    assert_int_equal(flare_ws_broadcast(app, FLARE_STR_NULL, FLARE_WS_TEXT, FLARE_STR("\xff"), 0),
                     FLARE_EINVAL);
    for (int i = 0; i < n; i++)
        client_free(cs[i]);
}

static void test_compressed_broadcast_shared(void **state)
{
    (void)state;
    settle();
    client_t *cs[32];
    uint64_t ids[32];
    unsigned wids[32];
    const char *ext = "Sec-WebSocket-Extensions: permessage-deflate\r\n";
    int n = open_on_both(cs, 32, "/dz", ext, ids, wids);
    char text[2000 + 7];
    memcpy(text, "bcast:", 6);
    for (int i = 0; i < 2000; i++)
        text[6 + i] = "abcabcabd"[i % 9];
    send_frame(cs[0], FLARE_WS_OP_TEXT, text, 2006);
    static char first[4096];
    size_t first_len = 0;
    for (int i = 0; i < n; i++) {
        rframe_t f;
        assert_true(recv_frame(cs[i], &f, 2000));
        assert_int_equal(f.op, FLARE_WS_OP_TEXT);
        assert_true(f.rsv1);
        assert_true(f.len < 200);
        if (i == 0) {
            memcpy(first, f.data, f.len);
            first_len = f.len;
        } else {
            /* encoded once: every recipient got the same bytes */
            assert_int_equal(f.len, first_len);
            assert_memory_equal(f.data, first, f.len);
        }
    }
    /* and they inflate to the message */
    z_stream z;
    memset(&z, 0, sizeof(z));
    assert_int_equal(inflateInit2(&z, -15), Z_OK);
    static char in[4096], out[4096];
    memcpy(in, first, first_len);
    memcpy(in + first_len, "\x00\x00\xff\xff", 4);
    z.next_in = (Bytef *)in;
    z.avail_in = (uInt)first_len + 4;
    z.next_out = (Bytef *)out;
    z.avail_out = sizeof(out);
    assert_int_equal(inflate(&z, Z_SYNC_FLUSH), Z_OK);
    assert_int_equal(sizeof(out) - z.avail_out, 2000);
    assert_memory_equal(out, text + 6, 2000);
    inflateEnd(&z);
    for (int i = 0; i < n; i++)
        client_free(cs[i]);
}

/* Sends one frame with the given first byte (FIN/RSV/opcode). */
static void send_frame_b0(client_t *c, uint8_t b0, const void *p, size_t n)
{
    static const uint8_t key[4] = { 1, 2, 3, 4 };
    uint8_t *f = malloc(n + FLARE_WS_MAX_HEADER);
    assert_non_null(f);
    size_t h = flare__ws_frame_header(f, b0 & 0x0f, true, (b0 & 0x40) != 0, n, key);
    memcpy(f + h, p, n);
    flare__ws_unmask(f + h, n, key, 0);
    send_all(c->fd, f, h + n);
    free(f);
}

static void test_context_takeover(void **state)
{
    (void)state;
    settle();
    client_t *c = client_new();
    char head[512];
    assert_int_equal(handshake(c, "/ctx",
                               "Sec-WebSocket-Extensions: permessage-deflate; "
                               "client_max_window_bits\r\n",
                               0, head, sizeof(head)),
                     101);
    assert_non_null(strstr(head, "Sec-WebSocket-Extensions: permessage-deflate; "
                                 "client_max_window_bits=15\r\n"));
    /* both sides keep their context: the same message costs less the
     * second time, in both directions */
    z_stream def, inf;
    memset(&def, 0, sizeof(def));
    memset(&inf, 0, sizeof(inf));
    assert_int_equal(deflateInit2(&def, 6, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY), Z_OK);
    assert_int_equal(inflateInit2(&inf, -15), Z_OK);
    char text[600];
    for (size_t i = 0; i < sizeof(text); i++)
        text[i] = (char)('a' + (i * 7 + i / 13) % 26);
    size_t sizes[3];
    for (int round = 0; round < 3; round++) {
        static unsigned char z[2048];
        def.next_in = (Bytef *)text;
        def.avail_in = sizeof(text);
        def.next_out = z;
        def.avail_out = sizeof(z);
        assert_int_equal(deflate(&def, Z_SYNC_FLUSH), Z_OK);
        size_t zn = sizeof(z) - def.avail_out - 4; /* without 00 00 ff ff */
        send_frame_b0(c, 0x80 | 0x40 | FLARE_WS_OP_TEXT, z, zn);
        rframe_t f;
        assert_true(recv_frame(c, &f, 2000));
        assert_int_equal(f.op, FLARE_WS_OP_TEXT);
        assert_true(f.rsv1);
        sizes[round] = f.len;
        static unsigned char in[2048], out[2048];
        memcpy(in, f.data, f.len);
        memcpy(in + f.len, "\x00\x00\xff\xff", 4);
        inf.next_in = in;
        inf.avail_in = (uInt)f.len + 4;
        inf.next_out = out;
        inf.avail_out = sizeof(out);
        assert_int_equal(inflate(&inf, Z_SYNC_FLUSH), Z_OK);
        assert_int_equal(sizeof(out) - inf.avail_out, sizeof(text));
        assert_memory_equal(out, text, sizeof(text));
    }
    assert_true(sizes[1] < sizes[0] / 4);
    assert_true(sizes[2] < sizes[0] / 4);
    deflateEnd(&def);
    inflateEnd(&inf);
    client_free(c);
}

static void test_shutdown(void **state)
{
    (void)state;
    settle();
    /* one connection answers the 1001, one never does */
    client_t *good = client_new(), *mute = client_new();
    int opened0 = LOAD(opened);
    assert_int_equal(handshake(good, "/echo", NULL, 0, NULL, 0), 101);
    assert_int_equal(handshake(mute, "/echo", NULL, 0, NULL, 0), 101);
    wait_for(&opened, opened0 + 2, 2000);
    uint64_t t0 = now_ms();
    flare_app_stop(app);
    rframe_t f;
    assert_true(recv_frame(good, &f, 3000));
    assert_int_equal(f.op, FLARE_WS_OP_CLOSE);
    assert_memory_equal(f.data, "\x03\xe9", 2);
    send_frame(good, FLARE_WS_OP_CLOSE, "\x03\xe9", 2);
    assert_true(wait_eof(good, 3000));
    assert_true(recv_frame(mute, &f, 3000));
    assert_int_equal(f.op, FLARE_WS_OP_CLOSE);
    /* the mute one is dropped by the close timeout (5 s) or the drain
     * deadline (1.5 s), whichever comes first; then the app returns */
    assert_true(wait_eof(mute, 5000));
    pthread_join(server, NULL);
    assert_int_equal(run_rc, 0);
    assert_true(now_ms() - t0 < 4000);
    /* every accepted connection got its on_close */
    assert_int_equal(LOAD(opened), LOAD(closed));
    client_free(good);
    client_free(mute);
}

static int teardown(void **state)
{
    (void)state;
    flare_app_free(app);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_echo_and_client_close),
        cmocka_unit_test(test_server_close_and_timeout),
        cmocka_unit_test(test_heartbeat),
        cmocka_unit_test(test_backpressure_and_drain),
        cmocka_unit_test(test_consumer_that_never_reads),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_broadcast_and_send_to),
        cmocka_unit_test(test_compressed_broadcast_shared),
        cmocka_unit_test(test_context_takeover),
        cmocka_unit_test(test_shutdown),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
