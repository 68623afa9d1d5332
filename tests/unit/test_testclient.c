/* flare/test.h against a real app on loopback: requests and their parsed
 * answers (fixed length, chunked, HEAD, 404), keep-alive and reconnection
 * after the app closes, bad arguments refused, a timeout, WebSocket echo
 * and close, server-sent events, and a start that fails. */
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
#include <sys/socket.h>
#include <unistd.h>

#include "flare/flare.h"
#include "flare/json.h"
#include "flare/sse.h"
#include "flare/test.h"
#include "flare/ws.h"
#include "loopback.h"

static int hello(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    (void)ud;
    return flare_res_send(res, 200, FLARE_STR("text/plain"), FLARE_STR("hi"));
}

/* echoes the method, a header and the body as JSON */
static int echo(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    char out[512];
    flare_str_t body = flare_req_body(req);
    flare_str_t x = flare_req_header(req, "x-test");
    int n =
        snprintf(out, sizeof(out), "{\"body\":\"%.*s\",\"x\":\"%.*s\",\"len\":%zu}", (int)body.len,
                 body.ptr ? body.ptr : "", (int)x.len, x.ptr ? x.ptr : "", body.len);
    return flare_res_send(res, 201, FLARE_STR("application/json"), (flare_str_t){ out, (size_t)n });
}

static int chunks(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    (void)ud;
    int rc = flare_res_begin(res, 200, FLARE_STR("text/plain"));
    for (int i = 0; rc == 0 && i < 3; i++)
        rc = flare_res_write(res, FLARE_STR("part;"));
    return rc == 0 ? flare_res_end(res) : rc;
}

static int closer(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    (void)ud;
    flare_res_header(res, FLARE_STR("Connection"), FLARE_STR("close"));
    return flare_res_send(res, 200, FLARE_STR("text/plain"), FLARE_STR("bye"));
}

static int never(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)req;
    (void)res;
    (void)ud;
    return FLARE_ASYNC; /* answered by nobody: the client times out */
}

static void ws_message(flare_ws_t *ws, flare_ws_opcode_t op, flare_str_t payload)
{
    if (payload.len == 4 && memcmp(payload.ptr, "quit", 4) == 0) {
        flare_ws_close(ws, 4000, FLARE_STR("asked"));
        return;
    }
    flare_ws_send(ws, op, payload);
}

static int events(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)ud;
    flare_sse_t *s;
    int rc = flare_sse_start(req, res, NULL, &s);
    if (rc != 0)
        return rc;
    flare_sse_send(s, &(flare_sse_event_t){ .id = FLARE_STR("1"), .data = FLARE_STR("one") });
    flare_sse_send(
        s, &(flare_sse_event_t){ .event = FLARE_STR("tick"), .data = FLARE_STR("two\nlines") });
    return FLARE_ASYNC;
}

static flare_app_t *app;
static flare_test_t *t;

static int setup(void **state)
{
    (void)state;
    app = flare_app_new(NULL);
    assert_non_null(app);
    assert_int_equal(flare_get(app, "/hello", hello, NULL), 0);
    assert_int_equal(flare_post(app, "/echo", echo, NULL), 0);
    assert_int_equal(flare_get(app, "/chunks", chunks, NULL), 0);
    assert_int_equal(flare_get(app, "/close", closer, NULL), 0);
    assert_int_equal(flare_get(app, "/never", never, NULL), 0);
    assert_int_equal(flare_ws_route(app, "/ws", &(flare_ws_config_t){ .on_message = ws_message }),
                     0);
    assert_int_equal(flare_sse_route(app, "/events", events, NULL), 0);
    assert_int_equal(flare_test_start(app, &(flare_test_opts_t){ .timeout_ms = 3000 }, &t), 0);
    assert_true(flare_test_port(t) > 0);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    assert_int_equal(flare_test_stop(t), 0);
    flare_app_free(app);
    return 0;
}

static void test_get(void **state)
{
    (void)state;
    flare_test_res_t res;
    for (int i = 0; i < 3; i++) { /* the same keep-alive connection */
        assert_int_equal(flare_test_get(t, "/hello", &res), 0);
        assert_int_equal(res.status, 200);
        assert_int_equal(res.body_len, 2);
        assert_string_equal(res.body, "hi");
        assert_string_equal(flare_test_res_header(&res, "content-type"), "text/plain");
        assert_string_equal(flare_test_res_header(&res, "CONTENT-LENGTH"), "2");
        assert_null(flare_test_res_header(&res, "x-none"));
        flare_test_res_free(&res);
    }
    assert_int_equal(flare_test_get(t, "/nowhere", &res), 0);
    assert_int_equal(res.status, 404);
    flare_test_res_free(&res);
    assert_int_equal(
        flare_test_request(t, &(flare_test_req_t){ .method = "HEAD", .path = "/hello" }, &res), 0);
    assert_int_equal(res.status, 200);
    assert_int_equal(res.body_len, 0);
    assert_string_equal(res.body, "");
    flare_test_res_free(&res);
}

static void test_json_body(void **state)
{
    (void)state;
    flare_test_res_t res;
    const char *hdrs[] = { "X-Test: yes", NULL };
    assert_int_equal(flare_test_json(t, "POST", "/echo", "abc", hdrs, &res), 0);
    assert_int_equal(res.status, 201);
    flare_json_doc_t *doc;
    assert_int_equal(flare_test_res_json(&res, &doc), 0);
    const flare_json_val_t *root = flare_json_doc_root(doc);
    flare_str_t s;
    assert_int_equal(flare_json_val_str(flare_json_val_get(root, "body"), &s), 0);
    assert_string_equal(s.ptr, "abc");
    assert_int_equal(flare_json_val_str(flare_json_val_get(root, "x"), &s), 0);
    assert_string_equal(s.ptr, "yes");
    flare_json_doc_free(doc);
    flare_test_res_free(&res);
    /* a POST without a body sends Content-Length: 0 */
    assert_int_equal(flare_test_json(t, "POST", "/echo", NULL, NULL, &res), 0);
    assert_int_equal(res.status, 201);
    assert_non_null(strstr(res.body, "\"len\":0"));
    flare_test_res_free(&res);
}

static void test_chunked_and_close(void **state)
{
    (void)state;
    flare_test_res_t res;
    assert_int_equal(flare_test_get(t, "/chunks", &res), 0);
    assert_string_equal(res.body, "part;part;part;");
    assert_string_equal(flare_test_res_header(&res, "transfer-encoding"), "chunked");
    flare_test_res_free(&res);
    /* the app closes after this answer: the next call reconnects */
    assert_int_equal(flare_test_get(t, "/close", &res), 0);
    assert_string_equal(res.body, "bye");
    flare_test_res_free(&res);
    assert_int_equal(flare_test_get(t, "/hello", &res), 0);
    assert_string_equal(res.body, "hi");
    flare_test_res_free(&res);
    /* the client asks for the close */
    assert_int_equal(
        flare_test_request(t, &(flare_test_req_t){ .path = "/hello", .close = true }, &res), 0);
    assert_string_equal(flare_test_res_header(&res, "connection"), "close");
    flare_test_res_free(&res);
    assert_int_equal(flare_test_get(t, "/hello", &res), 0);
    flare_test_res_free(&res);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    flare_test_res_t res;
    assert_int_equal(flare_test_get(t, "no-slash", &res), FLARE_EINVAL);
    assert_non_null(strstr(flare_test_error(t), "bad path"));
    assert_int_equal(flare_test_get(t, "/a b", &res), FLARE_EINVAL);
    assert_int_equal(flare_test_get(t, "/a\r\nX: y", &res), FLARE_EINVAL);
    const char *bad[] = { "X-A: b\r\nX-Injected: 1", NULL };
    assert_int_equal(
        flare_test_request(t, &(flare_test_req_t){ .path = "/", .headers = bad }, &res),
        FLARE_EINVAL);
    const char *nocolon[] = { "X-A b", NULL };
    assert_int_equal(
        flare_test_request(t, &(flare_test_req_t){ .path = "/", .headers = nocolon }, &res),
        FLARE_EINVAL);
    flare_test_res_free(&res);
}

static void test_timeout(void **state)
{
    (void)state;
    flare_test_t *quick;
    /* the request nobody answers keeps the drain waiting: a short one */
    flare_config_t cfg;
    flare_config_init(&cfg);
    cfg.drain_timeout_ms = 200;
    flare_app_t *a = flare_app_new(&cfg);
    assert_int_equal(flare_get(a, "/never", never, NULL), 0);
    assert_int_equal(flare_test_start(a, &(flare_test_opts_t){ .timeout_ms = 200 }, &quick), 0);
    flare_test_res_t res;
    assert_int_equal(flare_test_get(quick, "/never", &res), FLARE_ETIMEDOUT);
    assert_non_null(strstr(flare_test_error(quick), "200 ms"));
    flare_test_res_free(&res);
    assert_int_equal(flare_test_stop(quick), 0);
    flare_app_free(a);
}

static void test_websocket(void **state)
{
    (void)state;
    flare_test_ws_t *ws;
    int status;
    assert_int_equal(flare_test_ws_open(t, "/ws", NULL, &status, &ws), 0);
    assert_int_equal(status, 101);
    assert_int_equal(flare_test_ws_send(ws, false, "ping me", 7), 0);
    char *msg;
    size_t len;
    bool binary;
    assert_int_equal(flare_test_ws_recv(ws, &msg, &len, &binary), 0);
    assert_int_equal(len, 7);
    assert_false(binary);
    assert_string_equal(msg, "ping me");
    free(msg);
    /* a larger binary message: 16-bit length */
    char big[70000];
    memset(big, 'b', sizeof(big));
    assert_int_equal(flare_test_ws_send(ws, true, big, sizeof(big)), 0);
    assert_int_equal(flare_test_ws_recv(ws, &msg, &len, &binary), 0);
    assert_int_equal(len, sizeof(big));
    assert_true(binary);
    assert_memory_equal(msg, big, sizeof(big));
    free(msg);
    /* the app closes with 4000 */
    assert_int_equal(flare_test_ws_send(ws, false, "quit", 4), 0);
    assert_int_equal(flare_test_ws_recv(ws, &msg, &len, NULL), FLARE_ECLOSED);
    assert_null(msg);
    assert_int_equal(flare_test_ws_close_code(ws), 4000);
    flare_test_ws_close(ws);

    /* a client that closes first */
    assert_int_equal(flare_test_ws_open(t, "/ws", NULL, NULL, &ws), 0);
    flare_test_ws_close(ws);

    /* not a WebSocket route */
    assert_int_equal(flare_test_ws_open(t, "/hello", NULL, &status, &ws), FLARE_EIO);
    assert_null(ws);
    assert_int_not_equal(status, 101);
}

static void test_sse(void **state)
{
    (void)state;
    flare_test_sse_t *s;
    int status;
    assert_int_equal(flare_test_sse_open(t, "/events", NULL, &status, &s), 0);
    assert_int_equal(status, 200);
    flare_test_event_t ev;
    assert_int_equal(flare_test_sse_next(s, &ev), 0);
    assert_string_equal(ev.id, "1");
    assert_string_equal(ev.event, "message");
    assert_string_equal(ev.data, "one");
    assert_int_equal(flare_test_sse_next(s, &ev), 0);
    assert_null(ev.id);
    assert_string_equal(ev.event, "tick");
    assert_string_equal(ev.data, "two\nlines");
    flare_test_sse_close(s);
    /* not an event stream */
    assert_int_equal(flare_test_sse_open(t, "/hello", NULL, &status, &s), FLARE_EIO);
    assert_int_equal(status, 200);
    assert_null(s);
}

static void test_start_fails(void **state)
{
    (void)state;
    /* a port held by a socket of our own (no SO_REUSEPORT: nobody joins it) */
    int port;
    int fd = loopback_listen(1, &port);
    assert_true(fd >= 0);
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);

    flare_app_t *a = flare_app_new(NULL);
    assert_int_equal(flare_get(a, "/hello", hello, NULL), 0);
    flare_test_t *other = (flare_test_t *)&other;
    assert_int_equal(flare_test_start(a, &(flare_test_opts_t){ .listen = addr }, &other),
                     FLARE_EBIND);
    assert_null(other);
    assert_non_null(strstr(flare_last_error(), "flare_app_run"));
    assert_non_null(strstr(flare_last_error(), addr));
    flare_app_free(a);
    close(fd);

    /* a bad address */
    a = flare_app_new(NULL);
    assert_int_equal(flare_test_start(a, &(flare_test_opts_t){ .listen = "nonsense" }, &other),
                     FLARE_EADDR);
    flare_app_free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_get),
        cmocka_unit_test(test_json_body),
        cmocka_unit_test(test_chunked_and_close),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_websocket),
        cmocka_unit_test(test_sse),
        cmocka_unit_test(test_timeout),
        cmocka_unit_test(test_start_fails),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
