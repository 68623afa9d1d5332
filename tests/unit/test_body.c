/* http/body.c: streaming request bodies through the exchange layer, with a
 * fake protocol instead of sockets: one whose ops stream the body
 * (body_read set: chunks fed by the test, pause/resume seen as body_read
 * calls), and one without streaming input (body_read NULL: the buffered
 * body delivered as one chunk + end). Plus flare_route_stream's argument
 * checks and flare_multipart_stream_* fed a byte at a time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "app.h"
#include "http/exchange.h"
#include "flare/body.h"
#include "flare/multipart.h"

/* ---- a fake protocol ---- */

static struct {
    int status;
    char body[256];
    size_t body_len;
    int completes;
    int reads_on, reads_off;
} wire;

static int fake_respond(struct flare_req *ex, int status, flare_str_t ctype, flare_str_t body)
{
    (void)ctype;
    wire.status = status;
    wire.body_len = body.len < sizeof(wire.body) ? body.len : sizeof(wire.body);
    memcpy(wire.body, body.ptr, wire.body_len);
    flare__ex_sent(ex);
    return 0;
}

static void fake_complete(struct flare_req *ex)
{
    (void)ex;
    wire.completes++;
}

static void fake_body_read(struct flare_req *ex, bool on)
{
    (void)ex;
    if (on)
        wire.reads_on++;
    else
        wire.reads_off++;
}

static const flare_proto_ops_t streaming_ops = { .respond = fake_respond,
                                                 .complete = fake_complete,
                                                 .body_read = fake_body_read };
static const flare_proto_ops_t buffered_ops = { .respond = fake_respond,
                                                .complete = fake_complete };

/* ---- a streaming route that records what it saw ---- */

static struct {
    int starts, chunks, ends, end_err;
    char data[256];
    size_t len;
    bool pause_in_start, pause_in_chunk, answer_in_chunk;
    flare_req_t *req;
} seen;

static int s_start(flare_req_t *req, flare_res_t *res, void *ud)
{
    (void)res;
    (void)ud;
    seen.starts++;
    seen.req = req;
    if (seen.pause_in_start)
        flare_req_body_pause(req);
    return 0;
}

static int s_chunk(flare_req_t *req, flare_res_t *res, flare_str_t data, void *ud)
{
    (void)ud;
    seen.chunks++;
    memcpy(seen.data + seen.len, data.ptr, data.len);
    seen.len += data.len;
    if (seen.pause_in_chunk)
        flare_req_body_pause(req);
    if (seen.answer_in_chunk)
        return flare_res_send(res, 415, FLARE_STR("text/plain"), FLARE_STR("no\n"));
    return 0;
}

static int s_end(flare_req_t *req, flare_res_t *res, int err, void *ud)
{
    (void)ud;
    seen.ends++;
    seen.end_err = err;
    if (err != 0)
        return 0;
    char *b = flare_req_alloc(req, 64);
    int n = snprintf(b, 64, "%zu:%.*s", seen.len, (int)seen.len, seen.data);
    return flare_res_send(res, 200, FLARE_STR("text/plain"), (flare_str_t){ b, (size_t)n });
}

static flare_app_t *app;
static flare_worker_t worker;

static int setup(void **state)
{
    (void)state;
    app = flare_app_new(NULL);
    assert_non_null(app);
    static const flare_body_route_t r = { s_start, s_chunk, s_end, 100 };
    assert_int_equal(flare_route_stream(app, FLARE_METHOD_POST, "/up", &r, NULL), 0);
    memset(&worker, 0, sizeof(worker));
    worker.app = app;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    while (worker.free_ex != NULL) {
        struct flare_req *ex = worker.free_ex;
        worker.free_ex = ex->next;
        flare__arena_dispose(&ex->arena);
        flare__buf_free(&ex->bodybuf);
        flare__buf_free(&ex->out);
        free(ex->headers);
        free(ex);
    }
    flare_app_free(app);
    return 0;
}

static struct flare_req *new_ex(const flare_proto_ops_t *ops, const char *path)
{
    memset(&wire, 0, sizeof(wire));
    memset(&seen, 0, sizeof(seen));
    struct flare_req *ex = flare__ex_get(&worker);
    assert_non_null(ex);
    ex->ops = ops;
    ex->head.method = FLARE_STR("POST");
    ex->head.method_id = FLARE_METHOD_POST;
    ex->head.path = (flare_str_t){ path, strlen(path) };
    ex->head.target = ex->head.path;
    ex->head.nheaders = 0;
    ex->raw = path;
    ex->raw_len = strlen(path);
    flare__http_route(app, ex);
    return ex;
}

static void test_route_stream_args(void **state)
{
    (void)state;
    flare_body_route_t r = { s_start, s_chunk, s_end, 0 };
    assert_int_equal(flare_route_stream(NULL, FLARE_METHOD_POST, "/a", &r, NULL), FLARE_EINVAL);
    assert_int_equal(flare_route_stream(app, FLARE_METHOD_POST, "/a", NULL, NULL), FLARE_EINVAL);
    r.on_chunk = NULL;
    assert_int_equal(flare_route_stream(app, FLARE_METHOD_POST, "/a", &r, NULL), FLARE_EINVAL);
    r.on_chunk = s_chunk;
    r.on_end = NULL;
    assert_int_equal(flare_route_stream(app, FLARE_METHOD_POST, "/a", &r, NULL), FLARE_EINVAL);
    r.on_end = s_end;
    r.max_body = ((uint64_t)1 << 62) + 1;
    assert_int_equal(flare_route_stream(app, FLARE_METHOD_POST, "/a", &r, NULL), FLARE_EINVAL);
    r.max_body = 0;
    r.on_start = NULL; /* optional */
    assert_int_equal(flare_route_stream(app, FLARE_METHOD_POST, "/a", &r, NULL), 0);
    assert_int_equal(flare_route_stream(app, FLARE_METHOD_POST, "/a", &r, NULL), FLARE_EEXIST);
    assert_int_equal(flare_route_stream(app, FLARE_METHOD_POST, "bad", &r, NULL), FLARE_EPATTERN);
    flare_group_t *g = flare_group_new(app, "/g");
    assert_non_null(g);
    assert_int_equal(flare_group_route_stream(g, FLARE_METHOD_PUT, "/s", &r, NULL), 0);
    assert_int_equal(flare_group_route_stream(NULL, FLARE_METHOD_PUT, "/s", &r, NULL),
                     FLARE_EINVAL);
    struct flare_req *gx = new_ex(&buffered_ops, "/g/s");
    gx->head.method_id = FLARE_METHOD_PUT;
    flare__http_route(app, gx);
    assert_true(flare__ex_body_route(gx));
    flare__ex_put(&worker, gx);
    /* the limits: the route's (100 on /up), else the app's */
    struct flare_req *ex = new_ex(&streaming_ops, "/up");
    assert_true(flare__ex_body_route(ex));
    assert_int_equal(flare__ex_body_limit(ex, 5000), 100);
    flare__ex_put(&worker, ex);
    ex = new_ex(&streaming_ops, "/a");
    assert_int_equal(flare__ex_body_limit(ex, 5000), 5000);
    flare__ex_put(&worker, ex);
}

/* Request trailers: apart from the header fields, empty until a protocol
 * adds them, gone with the exchange (a recycled one starts without). */
static void test_trailers(void **state)
{
    (void)state;
    struct flare_req *ex = new_ex(&buffered_ops, "/up");
    flare_header_t h = { FLARE_STR("Cookie"), FLARE_STR("head=1") };
    ex->headers[0] = h;
    ex->head.nheaders = 1;
    assert_int_equal(flare_req_trailer_count(ex), 0);
    assert_null(flare_req_trailer_at(ex, 0));
    assert_null(flare_req_trailer(ex, "cookie").ptr);
    /* more than the first block's 8, so the array grows in the arena */
    static const char *const names[] = { "X-Checksum", "Cookie", "a", "b", "c",
                                         "d",          "e",      "f", "g", "x-checksum" };
    for (size_t i = 0; i < 10; i++) {
        char *v = flare_req_alloc(ex, 8);
        assert_non_null(v);
        int n = snprintf(v, 8, "v%zu", i);
        assert_int_equal(
            flare__ex_trailer_add(ex, flare_str(names[i]), (flare_str_t){ v, (size_t)n }), 0);
    }
    assert_int_equal(flare_req_trailer_count(ex), 10);
    /* by name, case-insensitive, the first of a repeated name */
    flare_str_t v = flare_req_trailer(ex, "x-CHECKSUM");
    assert_true(v.len == 2 && memcmp(v.ptr, "v0", 2) == 0);
    v = flare_req_trailer(ex, "g");
    assert_true(v.len == 2 && memcmp(v.ptr, "v8", 2) == 0);
    assert_null(flare_req_trailer(ex, "missing").ptr);
    const flare_header_t *t = flare_req_trailer_at(ex, 9);
    assert_non_null(t);
    assert_true(flare_str_eq(t->name, FLARE_STR("x-checksum")));
    assert_null(flare_req_trailer_at(ex, 10));
    /* never a header: the head's fields are untouched */
    assert_int_equal(flare_req_header_count(ex), 1);
    v = flare_req_header(ex, "cookie");
    assert_true(flare_str_eq(v, FLARE_STR("head=1")));
    assert_null(flare_req_header(ex, "x-checksum").ptr);
    flare__ex_put(&worker, ex);
    /* the recycled exchange has none */
    ex = new_ex(&buffered_ops, "/up");
    assert_int_equal(flare_req_trailer_count(ex), 0);
    assert_null(flare_req_trailer(ex, "x-checksum").ptr);
    assert_null(flare_req_trailer_at(ex, 0));
    flare__ex_put(&worker, ex);
}

static void test_streamed(void **state)
{
    (void)state;
    struct flare_req *ex = new_ex(&streaming_ops, "/up");
    ex->flags |= EX_BODY_STREAM | EX_BODY_OPEN;
    flare__http_dispatch(ex);
    assert_int_equal(seen.starts, 1);
    assert_int_equal(wire.reads_on, 1); /* the handler reads: the protocol may send the 100 */
    assert_int_equal(wire.status, 0);   /* asynchronous: waiting for the body */
    assert_int_equal(flare__ex_body_data(ex, FLARE_STR("hel")), 0);
    assert_int_equal(flare__ex_body_data(ex, FLARE_STR("lo")), 0);
    assert_int_equal(seen.chunks, 2);
    assert_int_equal(flare_req_body_received(ex), 5);
    flare__ex_body_end(ex, 0);
    assert_int_equal(seen.ends, 1);
    assert_int_equal(seen.end_err, 0);
    assert_int_equal(wire.status, 200);
    assert_memory_equal(wire.body, "5:hello", 7);
    flare__ex_put(&worker, ex);
}

static void test_streamed_pause(void **state)
{
    (void)state;
    struct flare_req *ex = new_ex(&streaming_ops, "/up");
    seen.pause_in_start = true;
    ex->flags |= EX_BODY_STREAM | EX_BODY_OPEN;
    flare__http_dispatch(ex);
    assert_int_equal(wire.reads_on, 0); /* paused in on_start: not reading, no 100 yet */
    flare_req_body_pause(ex);           /* again: nothing */
    assert_int_equal(wire.reads_off, 0);
    flare_req_body_resume(ex);
    assert_int_equal(wire.reads_on, 1);
    seen.pause_in_chunk = true;
    assert_int_equal(flare__ex_body_data(ex, FLARE_STR("ab")), 0);
    assert_int_equal(wire.reads_off, 1);
    assert_true(ex->flags & EX_BODY_PAUSED);
    seen.pause_in_chunk = false;
    flare_req_body_resume(ex);
    assert_int_equal(wire.reads_on, 2);
    flare__ex_body_end(ex, 0);
    assert_int_equal(wire.status, 200);
    /* after the end, pause and resume are no-ops */
    flare_req_body_pause(ex);
    flare_req_body_resume(ex);
    assert_int_equal(wire.reads_off, 1);
    assert_int_equal(wire.reads_on, 2);
    flare__ex_put(&worker, ex);
}

static void test_streamed_early_answer_and_error(void **state)
{
    (void)state;
    struct flare_req *ex = new_ex(&streaming_ops, "/up");
    ex->flags |= EX_BODY_STREAM | EX_BODY_OPEN;
    flare__http_dispatch(ex);
    seen.answer_in_chunk = true;
    assert_int_equal(flare__ex_body_data(ex, FLARE_STR("x")), 1); /* stop reading */
    assert_int_equal(wire.status, 415);
    assert_false(ex->flags & EX_BODY_OPEN);
    assert_int_equal(seen.ends, 0); /* answered early: no on_end */
    flare__ex_put(&worker, ex);

    /* the body fails: on_end hears it, the protocol answers */
    ex = new_ex(&streaming_ops, "/up");
    ex->flags |= EX_BODY_STREAM | EX_BODY_OPEN;
    flare__http_dispatch(ex);
    assert_int_equal(flare__ex_body_data(ex, FLARE_STR("x")), 0);
    assert_false(flare__ex_body_end(ex, FLARE_ETOOBIG)); /* not answered by the callback */
    assert_int_equal(seen.ends, 1);
    assert_int_equal(seen.end_err, FLARE_ETOOBIG);
    assert_int_equal(wire.status, 0);
    flare__ex_put(&worker, ex);
}

static void test_buffered_protocol(void **state)
{
    (void)state;
    /* no body_read op (an HTTP/2 without streaming input): one chunk + end */
    struct flare_req *ex = new_ex(&buffered_ops, "/up");
    ex->body = FLARE_STR("whole body");
    flare__http_dispatch(ex);
    assert_int_equal(seen.starts, 1);
    assert_int_equal(seen.chunks, 1);
    assert_int_equal(seen.ends, 1);
    assert_int_equal(wire.status, 200);
    assert_memory_equal(wire.body, "10:whole body", 13);
    flare__ex_put(&worker, ex);
    /* empty body: no chunk, the end */
    ex = new_ex(&buffered_ops, "/up");
    flare__http_dispatch(ex);
    assert_int_equal(seen.chunks, 0);
    assert_int_equal(seen.ends, 1);
    assert_int_equal(wire.status, 200);
    flare__ex_put(&worker, ex);
    /* a pause delays the end until the resume */
    ex = new_ex(&buffered_ops, "/up");
    ex->body = FLARE_STR("abc");
    seen.pause_in_chunk = true;
    flare__http_dispatch(ex);
    assert_int_equal(seen.chunks, 1);
    assert_int_equal(seen.ends, 0);
    assert_int_equal(wire.status, 0);
    seen.pause_in_chunk = false;
    flare_req_body_resume(ex);
    assert_int_equal(seen.ends, 1);
    assert_int_equal(wire.status, 200);
    assert_memory_equal(wire.body, "3:abc", 5);
    flare__ex_put(&worker, ex);
}

/* ---- multipart over a stream ---- */

static int sink_parts, sink_ends;
static size_t sink_bytes;

static int k_part(void *ud, const flare_multipart_field_t *f)
{
    (void)ud;
    (void)f;
    sink_parts++;
    return 0;
}

static int k_data(void *ud, const flare_multipart_field_t *f, flare_str_t d)
{
    (void)ud;
    (void)f;
    sink_bytes += d.len;
    return 0;
}

static int k_end(void *ud, const flare_multipart_field_t *f)
{
    (void)ud;
    (void)f;
    sink_ends++;
    return 0;
}

static void test_multipart_stream(void **state)
{
    (void)state;
    static const char body[] =
        "--b\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n"
        "small value\r\n"
        "--b\r\nContent-Disposition: form-data; name=\"f\"; filename=\"x\"\r\n"
        "\r\n0123456789012345678901234567890123456789\r\n--b--\r\n";
    for (int discard = 0; discard < 2; discard++) {
        struct flare_req *ex = new_ex(&buffered_ops, "/up");
        flare_header_t h = { FLARE_STR("Content-Type"),
                             FLARE_STR("multipart/form-data; boundary=b") };
        ex->head.headers[0] = h;
        ex->head.nheaders = 1;
        flare_multipart_opts_t o = { .file_threshold = 16 };
        flare_multipart_sink_t sink = { k_part, k_data, k_end, discard != 0 };
        sink_parts = sink_ends = 0;
        sink_bytes = 0;
        flare_multipart_stream_t *ms;
        flare_multipart_err_t why;
        assert_int_equal(flare_multipart_stream_start(ex, &o, &sink, NULL, &ms, &why), 0);
        /* a byte at a time, each from a buffer that is overwritten after
         * the call: stored content must be copies */
        for (size_t i = 0; i < sizeof(body) - 1; i++) {
            char byte = body[i];
            assert_int_equal(flare_multipart_stream_feed(ms, (flare_str_t){ &byte, 1 }), 0);
            byte = '#';
            (void)byte;
        }
        const flare_multipart_form_t *form;
        assert_int_equal(flare_multipart_stream_finish(ms, &form), 0);
        assert_int_equal(form->count, 2);
        assert_int_equal(sink_parts, 2);
        assert_int_equal(sink_ends, 2);
        assert_int_equal(sink_bytes, 11 + 40);
        assert_int_equal(form->fields[0].size, 11);
        assert_int_equal(form->fields[1].size, 40);
        if (discard) {
            assert_int_equal(form->fields[0].data.len, 0);
            assert_int_equal(form->fields[1].fd, -1);
        } else {
            assert_memory_equal(form->fields[0].data.ptr, "small value", 11);
            assert_true(form->fields[1].fd >= 0); /* past the threshold: a file */
            char buf[64];
            assert_int_equal(pread(form->fields[1].fd, buf, sizeof(buf), 0), 40);
            assert_memory_equal(buf, "0123456789012345678901234567890123456789", 40);
        }
        flare__ex_put(&worker, ex); /* the cleanup closes the file */
    }
    /* errors: not form-data, truncated, a limit */
    struct flare_req *ex = new_ex(&buffered_ops, "/up");
    flare_multipart_stream_t *ms;
    flare_multipart_err_t why;
    assert_int_equal(flare_multipart_stream_start(ex, NULL, NULL, NULL, &ms, &why), FLARE_EINVAL);
    assert_int_equal(why, FLARE_MULTIPART_ERR_NOT_FORM_DATA);
    flare_header_t h = { FLARE_STR("Content-Type"), FLARE_STR("multipart/form-data; boundary=b") };
    ex->head.headers[0] = h;
    ex->head.nheaders = 1;
    assert_int_equal(flare_multipart_stream_start(ex, NULL, NULL, NULL, &ms, &why), 0);
    assert_int_equal(flare_multipart_stream_feed(ms, FLARE_STR("--b\r\nContent-Disposition: "
                                                               "form-data; name=a\r\n\r\nx")),
                     0);
    assert_int_equal(flare_multipart_stream_finish(ms, NULL), FLARE_EINVAL);
    assert_int_equal(flare_multipart_stream_err(ms), FLARE_MULTIPART_ERR_TRUNCATED);
    flare_multipart_opts_t o = { 0 };
    o.limits.max_part_size = 3;
    assert_int_equal(flare_multipart_stream_start(ex, &o, NULL, NULL, &ms, &why), 0);
    assert_int_equal(flare_multipart_stream_feed(ms, FLARE_STR("--b\r\nContent-Disposition: "
                                                               "form-data; name=a\r\n\r\nxyzw")),
                     FLARE_ETOOBIG);
    assert_int_equal(flare_multipart_err_status(flare_multipart_stream_err(ms)), 413);
    /* once failed, the same answer */
    assert_int_equal(flare_multipart_stream_feed(ms, FLARE_STR("more")), FLARE_ETOOBIG);
    flare__ex_put(&worker, ex);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_route_stream_args),
        cmocka_unit_test(test_trailers),
        cmocka_unit_test(test_streamed),
        cmocka_unit_test(test_streamed_pause),
        cmocka_unit_test(test_streamed_early_answer_and_error),
        cmocka_unit_test(test_buffered_protocol),
        cmocka_unit_test(test_multipart_stream),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
