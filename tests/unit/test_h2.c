/* HTTP/2 glue without a socket: the error-code and defence names the
 * metrics use, the flood counters of flare__h2_on_begin_frame (their
 * limits, their one-second window, the metrics cell each verdict counts),
 * the header-block state the header timeout reads, and the response
 * header fields of ops.c (lower-cased, connection-specific ones dropped). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "app.h"
#include "http2/h2_int.h"
#include "obs/metrics.h"

/* ---- names ---- */

static void test_error_names(void **state)
{
    (void)state;
    static const char *const want[] = {
        "no_error",
        "protocol_error",
        "internal_error",
        "flow_control_error",
        "settings_timeout",
        "stream_closed",
        "frame_size_error",
        "refused_stream",
        "cancel",
        "compression_error",
        "connect_error",
        "enhance_your_calm",
        "inadequate_security",
        "http_1_1_required",
    };
    assert_int_equal(FLARE__H2E_COUNT, 14);
    for (uint32_t code = 0; code < 14; code++)
        assert_string_equal(flare__h2_error_name(code), want[code]);
    assert_string_equal(flare__h2_error_name(NGHTTP2_ENHANCE_YOUR_CALM), "enhance_your_calm");
    assert_string_equal(flare__h2_error_name(14), "unknown");
    assert_string_equal(flare__h2_error_name(UINT32_MAX), "unknown");
    /* each known code its own cell, every other code the one after them */
    assert_int_equal(flare__metrics_h2_goaway(0), FLARE__H2C_GOAWAY);
    assert_int_equal(flare__metrics_h2_goaway(13), FLARE__H2C_GOAWAY + 13);
    assert_int_equal(flare__metrics_h2_goaway(14), FLARE__H2C_GOAWAY + 14);
    assert_int_equal(flare__metrics_h2_goaway(0x1234), FLARE__H2C_GOAWAY + 14);
    assert_true(flare__metrics_h2_goaway(UINT32_MAX) < FLARE__H2C_FLOOD);
}

static void test_flood_names(void **state)
{
    (void)state;
    static const char *const want[] = { "rapid_reset",   "continuation", "settings",
                                        "ping",          "priority",     "empty_data",
                                        "window_update", "header_list" };
    assert_int_equal(FLARE__H2F_COUNT, 8);
    for (unsigned k = 0; k < 8; k++)
        assert_string_equal(flare__h2_flood_name(k), want[k]);
    assert_null(flare__h2_flood_name(8));
    assert_int_equal(FLARE__H2C_COUNT, FLARE__H2C_FLOOD + 8);
}

/* ---- a connection without a socket ---- */

typedef struct fixture {
    flare_app_t app;
    flare_worker_t w;
    flare_conn_t c;
    flare_metrics_w_t m;
    flare_h2_t h2;
    nghttp2_session *sess;
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    nghttp2_session_callbacks *cb;
    if (f == NULL || nghttp2_session_callbacks_new(&cb) != 0)
        return -1;
    int rc = nghttp2_session_server_new(&f->sess, cb, &f->h2);
    nghttp2_session_callbacks_del(cb);
    if (rc != 0)
        return -1;
    f->app.limits.max_head = 32768;
    f->w.app = &f->app;
    f->w.metrics = &f->m;
    f->w.loop.now = 100000;
    f->c.w = &f->w;
    f->h2.c = &f->c;
    f->h2.w = &f->w;
    f->h2.t_win = f->w.loop.now;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    nghttp2_session_del(f->sess);
    free(f);
    return 0;
}

static int frame(fixture_t *f, uint8_t type, uint8_t flags, int32_t sid, size_t len)
{
    nghttp2_frame_hd hd = { .length = len, .stream_id = sid, .type = type, .flags = flags };
    return flare__h2_on_begin_frame(f->sess, &hd, &f->h2);
}

static uint64_t floods(fixture_t *f, unsigned kind)
{
    return flare__ctr_get(&f->m.h2[FLARE__H2C_FLOOD + kind]);
}

static uint64_t floods_all(fixture_t *f)
{
    uint64_t n = 0;
    for (unsigned k = 0; k < FLARE__H2F_COUNT; k++)
        n += floods(f, k);
    return n;
}

/* limit frames pass; the next one is the verdict, counted once */
static void check_limit(fixture_t *f, uint8_t type, uint8_t flags, int32_t sid, size_t len,
                        unsigned limit, unsigned kind)
{
    for (unsigned i = 0; i < limit; i++)
        assert_int_equal(frame(f, type, flags, sid, len), 0);
    assert_int_equal(f->h2.goaway_code, 0);
    assert_int_equal(frame(f, type, flags, sid, len), NGHTTP2_ERR_CALLBACK_FAILURE);
    assert_int_equal(f->h2.goaway_code, NGHTTP2_ENHANCE_YOUR_CALM);
    assert_non_null(f->h2.why);
    assert_int_equal(floods(f, kind), 1);
    assert_int_equal(floods_all(f), 1);
}

static void test_ping_limit(void **state)
{
    check_limit(*state, NGHTTP2_PING, 0, 0, 8, H2_MAX_CTRL, FLARE__H2F_PING);
}

static void test_settings_limit(void **state)
{
    check_limit(*state, NGHTTP2_SETTINGS, 0, 0, 6, H2_MAX_CTRL, FLARE__H2F_SETTINGS);
}

static void test_priority_limit(void **state)
{
    check_limit(*state, NGHTTP2_PRIORITY, 0, 3, 5, H2_MAX_PRIORITY, FLARE__H2F_PRIORITY);
}

static void test_empty_data_limit(void **state)
{
    fixture_t *f = *state;
    /* DATA with a payload, or with END_STREAM, is not an empty DATA frame */
    for (unsigned i = 0; i < 3 * H2_MAX_EMPTY_DATA; i++) {
        assert_int_equal(frame(f, NGHTTP2_DATA, 0, 1, 1), 0);
        assert_int_equal(frame(f, NGHTTP2_DATA, NGHTTP2_FLAG_END_STREAM, 1, 0), 0);
    }
    check_limit(f, NGHTTP2_DATA, 0, 1, 0, H2_MAX_EMPTY_DATA, FLARE__H2F_EMPTY_DATA);
}

static void test_window_update_limit(void **state)
{
    fixture_t *f = *state;
    /* each DATA frame sent in the window allows two more */
    f->h2.w_data_out = 10;
    check_limit(f, NGHTTP2_WINDOW_UPDATE, 0, 0, 4, H2_MAX_WU + 20, FLARE__H2F_WINDOW_UPDATE);
}

static void test_acks_not_counted(void **state)
{
    fixture_t *f = *state;
    for (unsigned i = 0; i < 10 * H2_MAX_CTRL; i++) {
        assert_int_equal(frame(f, NGHTTP2_PING, NGHTTP2_FLAG_ACK, 0, 8), 0);
        assert_int_equal(frame(f, NGHTTP2_SETTINGS, NGHTTP2_FLAG_ACK, 0, 0), 0);
    }
    assert_int_equal(floods_all(f), 0);
}

static void test_window_rolls(void **state)
{
    fixture_t *f = *state;
    /* the limit each window, for five windows: never a verdict */
    for (int win = 0; win < 5; win++) {
        for (unsigned i = 0; i < H2_MAX_CTRL; i++)
            assert_int_equal(frame(f, NGHTTP2_PING, 0, 0, 8), 0);
        /* just before the window ends, still the same window */
        f->w.loop.now += H2_WINDOW_MS - 1;
        if (win == 4)
            break;
        f->w.loop.now += 1;
    }
    assert_int_equal(frame(f, NGHTTP2_PING, 0, 0, 8), NGHTTP2_ERR_CALLBACK_FAILURE);
    assert_int_equal(floods(f, FLARE__H2F_PING), 1);
}

static void test_continuation_count(void **state)
{
    fixture_t *f = *state;
    assert_int_equal(frame(f, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_STREAM, 1, 10), 0);
    check_limit(f, NGHTTP2_CONTINUATION, 0, 1, 10, H2_MAX_CONT, FLARE__H2F_CONTINUATION);
}

static void test_continuation_restarts_per_block(void **state)
{
    fixture_t *f = *state;
    /* 32 frames in each of three blocks: the count is per block */
    for (int32_t sid = 1; sid <= 5; sid += 2) {
        assert_int_equal(frame(f, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_STREAM, sid, 10), 0);
        for (unsigned i = 0; i < H2_MAX_CONT - 1; i++)
            assert_int_equal(frame(f, NGHTTP2_CONTINUATION, 0, sid, 10), 0);
        assert_int_equal(frame(f, NGHTTP2_CONTINUATION, NGHTTP2_FLAG_END_HEADERS, sid, 10), 0);
    }
    assert_int_equal(floods_all(f), 0);
}

static void test_header_list_size(void **state)
{
    fixture_t *f = *state;
    /* max_head + 16 KiB of block in all: 16384 + 16384 + 16384 passes, one
     * byte more is the verdict */
    assert_int_equal(frame(f, NGHTTP2_HEADERS, 0, 1, 16384), 0);
    assert_int_equal(frame(f, NGHTTP2_CONTINUATION, 0, 1, 16384), 0);
    assert_int_equal(frame(f, NGHTTP2_CONTINUATION, 0, 1, 16384), 0);
    assert_int_equal(f->h2.goaway_code, 0);
    assert_int_equal(frame(f, NGHTTP2_CONTINUATION, 0, 1, 1), NGHTTP2_ERR_CALLBACK_FAILURE);
    assert_int_equal(floods(f, FLARE__H2F_HEADER_LIST), 1);
    assert_int_equal(floods_all(f), 1);
}

static void test_header_block_state(void **state)
{
    fixture_t *f = *state;
    /* a complete HEADERS frame opens no block */
    assert_int_equal(frame(f, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS, 1, 10), 0);
    assert_false(f->h2.flags & H2_IN_HDRS);
    /* HEADERS without END_HEADERS: open since now; CONTINUATION keeps the
     * first time (the timeout is not extended) */
    f->w.loop.now += 5;
    assert_int_equal(frame(f, NGHTTP2_HEADERS, 0, 3, 10), 0);
    assert_true(f->h2.flags & H2_IN_HDRS);
    uint64_t t0 = f->w.loop.now;
    assert_int_equal(f->h2.t_hdrs, t0);
    f->w.loop.now += 700;
    assert_int_equal(frame(f, NGHTTP2_CONTINUATION, 0, 3, 10), 0);
    assert_true(f->h2.flags & H2_IN_HDRS);
    assert_int_equal(f->h2.t_hdrs, t0);
    /* the frame with END_HEADERS closes it */
    assert_int_equal(frame(f, NGHTTP2_CONTINUATION, NGHTTP2_FLAG_END_HEADERS, 3, 10), 0);
    assert_false(f->h2.flags & H2_IN_HDRS);
    /* so does any other frame (nghttp2 makes it a connection error) */
    assert_int_equal(frame(f, NGHTTP2_HEADERS, 0, 5, 10), 0);
    assert_true(f->h2.flags & H2_IN_HDRS);
    assert_int_equal(frame(f, NGHTTP2_PING, 0, 0, 8), 0);
    assert_false(f->h2.flags & H2_IN_HDRS);
    assert_int_equal(floods_all(f), 0);
}

static void test_no_metrics_block(void **state)
{
    fixture_t *f = *state;
    /* counting off: the verdict is the same, nothing is written */
    f->w.metrics = NULL;
    for (unsigned i = 0; i < H2_MAX_CTRL; i++)
        assert_int_equal(frame(f, NGHTTP2_PING, 0, 0, 8), 0);
    assert_int_equal(frame(f, NGHTTP2_PING, 0, 0, 8), NGHTTP2_ERR_CALLBACK_FAILURE);
    assert_int_equal(f->h2.goaway_code, NGHTTP2_ENHANCE_YOUR_CALM);
    assert_int_equal(floods_all(f), 0);
}

/* ---- response fields (ops.c) ---- */

static void test_add_nv(void **state)
{
    (void)state;
    nghttp2_nv nva[8];
    char lc[256];
    flare_h2_nvb_t b = { nva, 0, 8, lc };
    flare__h2_add_nv(&b, FLARE_STR("X-Request-ID"), FLARE_STR("abc \t"));
    flare__h2_add_nv(&b, FLARE_STR("Connection"), FLARE_STR("close"));
    flare__h2_add_nv(&b, FLARE_STR("keep-alive"), FLARE_STR("5"));
    flare__h2_add_nv(&b, FLARE_STR("Transfer-Encoding"), FLARE_STR("chunked"));
    flare__h2_add_nv(&b, FLARE_STR("UPGRADE"), FLARE_STR("h2c"));
    flare__h2_add_nv(&b, FLARE_STR("Proxy-Connection"), FLARE_STR("x"));
    flare__h2_add_nv(&b, FLARE_STR(""), FLARE_STR("no name"));
    /* a name that only begins like a connection-specific one is kept */
    flare__h2_add_nv(&b, FLARE_STR("Connection-Id"), FLARE_STR("7"));
    flare__h2_add_nv(&b, FLARE_STR("Cache-Control"), FLARE_STR(""));
    assert_int_equal(b.n, 3);
    assert_int_equal(nva[0].namelen, 12);
    assert_memory_equal(nva[0].name, "x-request-id", 12);
    assert_int_equal(nva[0].valuelen, 3);
    assert_memory_equal(nva[0].value, "abc", 3);
    assert_memory_equal(nva[1].name, "connection-id", 13);
    assert_memory_equal(nva[2].name, "cache-control", 13);
    assert_int_equal(nva[2].valuelen, 0);
    /* nghttp2 keeps pointers, not copies */
    assert_true(nva[0].flags & NGHTTP2_NV_FLAG_NO_COPY_NAME);
    assert_true(nva[0].flags & NGHTTP2_NV_FLAG_NO_COPY_VALUE);
    /* a trusted block: its lines, the value's blanks cut, CR dropped, a
     * line without a colon and a connection-specific one skipped */
    flare__h2_add_block(&b, FLARE_STR("ETag: \"x\"\r\nnonsense\r\nConnection: close\r\n"
                                      "Last-Modified:  Wed\t\r\nVary: Accept"));
    assert_int_equal(b.n, 6);
    assert_memory_equal(nva[3].name, "etag", 4);
    assert_int_equal(nva[3].valuelen, 3);
    assert_memory_equal(nva[3].value, "\"x\"", 3);
    assert_memory_equal(nva[4].name, "last-modified", 13);
    assert_int_equal(nva[4].valuelen, 3);
    assert_memory_equal(nva[4].value, "Wed", 3);
    assert_memory_equal(nva[5].name, "vary", 4);
    assert_memory_equal(nva[5].value, "Accept", 6);
    /* past cap: dropped, not written */
    b.cap = 6;
    flare__h2_add_nv(&b, FLARE_STR("X-More"), FLARE_STR("1"));
    assert_int_equal(b.n, 6);
}

/* Names are lower-cased a word at a time: every length up to 40, every
 * byte value at every position, and not a byte written past the name. */
static void test_add_nv_lowercase(void **state)
{
    (void)state;
    char name[40], want[40], lc[48];
    nghttp2_nv nva[1];
    for (size_t len = 1; len <= sizeof(name); len++) {
        for (unsigned c = 1; c < 256; c++) {
            for (size_t pos = 0; pos < len; pos++) {
                for (size_t i = 0; i < len; i++)
                    name[i] = (char)('A' + (i * 7 + c) % 58); /* 'A'..'z' and between */
                name[pos] = (char)c;
                for (size_t i = 0; i < len; i++) {
                    unsigned char ch = (unsigned char)name[i];
                    want[i] = (char)(ch >= 'A' && ch <= 'Z' ? ch + 32 : ch);
                }
                memset(lc, '#', sizeof(lc));
                flare_h2_nvb_t b = { nva, 0, 1, lc };
                flare__h2_add_nv(&b, (flare_str_t){ name, len }, FLARE_STR("v"));
                if (b.n == 0) /* "Upgrade", "Connection"...: dropped, as they must be */
                    continue;
                assert_int_equal(nva[0].namelen, len);
                assert_memory_equal(lc, want, len);
                assert_int_equal(lc[len], '#');
                assert_ptr_equal(b.lc, lc + len);
            }
        }
    }
}

/* ---- request fields (fields.c: RFC 9113 8.2, 8.3) ---- */

static int field(uint8_t *seen, bool trailer, const char *name, const char *value)
{
    return flare__h2_check_field(seen, trailer, (const uint8_t *)name, strlen(name),
                                 (const uint8_t *)value, strlen(value));
}

static void test_fields_request(void **state)
{
    (void)state;
    uint8_t seen = 0;
    assert_int_equal(field(&seen, false, ":method", "GET"), H2F_METHOD);
    assert_int_equal(field(&seen, false, ":scheme", "https"), H2F_SCHEME);
    assert_false(flare__h2_head_ok(seen, false)); /* no :path yet */
    assert_int_equal(field(&seen, false, ":path", "/a?b"), H2F_PATH);
    assert_int_equal(field(&seen, false, ":authority", "[::1]:8443"), H2F_AUTHORITY);
    assert_int_equal(field(&seen, false, "accept", "*/*"), H2F_REGULAR);
    assert_int_equal(field(&seen, false, "user-agent", "x\ty \x80\xff"), H2F_REGULAR);
    assert_int_equal(field(&seen, false, "x-empty", ""), H2F_REGULAR);
    assert_int_equal(field(&seen, false, "te", "Trailers"), H2F_REGULAR);
    assert_int_equal(field(&seen, false, "host", "example.com:80"), H2F_HOST);
    assert_int_equal(field(&seen, false, "content-length", "12"), H2F_CLEN);
    assert_true(flare__h2_head_ok(seen, false));
    /* once only, and none after a regular field */
    assert_int_equal(field(&seen, false, "content-length", "12"), H2F_BAD);
    assert_int_equal(field(&seen, false, ":path", "/again"), H2F_BAD);
    /* trailers: regular fields only, no content-length */
    uint8_t t = seen;
    assert_int_equal(field(&t, true, "x-checksum", "abc"), H2F_REGULAR);
    assert_int_equal(field(&t, true, ":method", "GET"), H2F_BAD);
    uint8_t t2 = 0;
    assert_int_equal(field(&t2, true, "content-length", "1"), H2F_BAD);
}

static void test_fields_malformed(void **state)
{
    (void)state;
    static const char *const bad[][2] = {
        { "", "v" },
        { "X-Upper", "1" },
        { "x:colon", "v" },
        { "x sp", "v" },
        { "x\x7f", "v" },
        { "x-ws", " lead" },
        { "x-ws", "trail " },
        { "x-ws", "\ttab" },
        { "x-ws", "tab\t" },
        { "x-nl", "a\nb" },
        { "x-cr", "a\rb" },
        { "x-del", "a\x7f" },
        { "x-ctl", "a\x01" },
        { "connection", "x" },
        { "keep-alive", "5" },
        { "upgrade", "h2c" },
        { "proxy-connection", "keep-alive" },
        { "transfer-encoding", "chunked" },
        { "te", "gzip" },
        { "te", "trailers, x" },
        { "content-length", "" },
        { "content-length", "1a" },
        { "content-length", "-1" },
        { "content-length", "1234567890123456789" },
        { "host", "a b" },
        { "host", "a\"b" },
        { ":foo", "bar" },
        { ":status", "200" },
        { ":protocol", "websocket" },
        { ":method", "" },
        { ":method", "G T" },
        { ":scheme", "" },
        { ":scheme", "1http" },
        { ":scheme", "ht tp" },
        { ":authority", "a b" },
        { ":authority", "a/b" },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint8_t seen = 0;
        if (field(&seen, false, bad[i][0], bad[i][1]) != H2F_BAD)
            fail_msg("accepted %s: %s", bad[i][0], bad[i][1]);
    }
    /* a NUL inside a value (strlen would stop at it) */
    uint8_t seen = 0;
    assert_int_equal(
        flare__h2_check_field(&seen, false, (const uint8_t *)"x", 1, (const uint8_t *)"a\0b", 3),
        H2F_BAD);
    /* a pseudo-header after a regular field */
    seen = 0;
    assert_int_equal(field(&seen, false, ":method", "GET"), H2F_METHOD);
    assert_int_equal(field(&seen, false, "accept", "*/*"), H2F_REGULAR);
    assert_int_equal(field(&seen, false, ":path", "/"), H2F_BAD);
    /* duplicates */
    static const char *const pseudo[][2] = {
        { ":method", "GET" },
        { ":scheme", "http" },
        { ":path", "/" },
        { ":authority", "a" },
    };
    for (size_t i = 0; i < 4; i++) {
        seen = 0;
        assert_int_not_equal(field(&seen, false, pseudo[i][0], pseudo[i][1]), H2F_BAD);
        assert_int_equal(field(&seen, false, pseudo[i][0], pseudo[i][1]), H2F_BAD);
    }
}

/* The pseudo-header names are told apart by length and two words, and the
 * usual values skip the byte loop: names one byte off, and values near the
 * usual ones, still take the general rules. */
static void test_fields_pseudo_names(void **state)
{
    (void)state;
    static const char *const bad[] = { ":metho", ":methodx", ":mEthod",   ":schemx",    ":paths",
                                       ":pat",   ":Path",    ":authorit", ":authorityx" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint8_t seen = 0;
        if (field(&seen, false, bad[i], "x") != H2F_BAD)
            fail_msg("accepted the name %s", bad[i]);
    }
    static const char *const methods[] = { "GET", "get", "GETX", "GE", "PATCH", "X-Y" };
    for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++) {
        uint8_t seen = 0;
        assert_int_equal(field(&seen, false, ":method", methods[i]), H2F_METHOD);
    }
    static const char *const schemes[] = { "http", "https", "HTTP", "Https", "h", "coap+tcp" };
    for (size_t i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++) {
        uint8_t seen = 0;
        assert_int_equal(field(&seen, false, ":scheme", schemes[i]), H2F_SCHEME);
    }
    static const char *const bad_values[][2] = {
        { ":method", "GE T" },   { ":method", "GET " },  { ":scheme", "http " },
        { ":scheme", "https:" }, { ":scheme", "htt p" }, { ":scheme", "5ttps" },
    };
    for (size_t i = 0; i < sizeof(bad_values) / sizeof(bad_values[0]); i++) {
        uint8_t seen = 0;
        if (field(&seen, false, bad_values[i][0], bad_values[i][1]) != H2F_BAD)
            fail_msg("accepted %s: %s", bad_values[i][0], bad_values[i][1]);
    }
}

/* ---- mem.c: the free lists ---- */

/* The sweep's trim gives back only blocks no request needed since the
 * trim before, and leaves 16 KiB per class for the next connection. */
static void test_mem_trim(void **state)
{
    (void)state;
    flare_worker_t w;
    memset(&w, 0, sizeof(w));
    nghttp2_mem mem;
    assert_int_equal(flare__h2_nghttp2_mem(&w, &mem), 0);
    assert_ptr_equal(mem.mem_user_data, &w);
    enum { N = 600, KEPT = (16 << 10) / 32 };
    static void *blk[N];
    for (size_t i = 0; i < N; i++) {
        blk[i] = flare__h2_malloc(&w, 32);
        assert_non_null(blk[i]);
        memset(blk[i], 0xab, 32);
    }
    for (size_t i = 0; i < N; i++)
        flare__h2_mfree(&w, blk[i]);
#ifdef FLARE__ASAN
    /* AddressSanitizer: every block went to free(), there are no lists */
    assert_int_equal(flare__h2_mem_trim(&w), 0);
#else
    /* all were in use since the last trim: kept */
    assert_int_equal(flare__h2_mem_trim(&w), 0);
    /* none taken since: all but the 16 KiB kept go */
    assert_int_equal(flare__h2_mem_trim(&w), (size_t)(N - KEPT) * 32);
    /* 100 taken from the list and given back: at least 412 stayed free,
     * fewer than are kept: nothing goes */
    for (size_t i = 0; i < 100; i++) {
        blk[i] = flare__h2_malloc(&w, 20);
        assert_non_null(blk[i]);
    }
    for (size_t i = 0; i < 100; i++)
        flare__h2_mfree(&w, blk[i]);
    assert_int_equal(flare__h2_mem_trim(&w), 0);
    assert_int_equal(flare__h2_mem_trim(&w), 0);
#endif
    flare__h2_mem_dispose(&w);
    assert_null(w.h2mem);
}

static void test_fields_required(void **state)
{
    (void)state;
    const uint8_t all = H2S_METHOD | H2S_SCHEME | H2S_PATH;
    assert_true(flare__h2_head_ok(all, false));
    assert_true(flare__h2_head_ok(all | H2S_AUTHORITY | H2S_REGULAR, false));
    assert_false(flare__h2_head_ok(H2S_SCHEME | H2S_PATH, false));
    assert_false(flare__h2_head_ok(H2S_METHOD | H2S_PATH, false));
    assert_false(flare__h2_head_ok(H2S_METHOD | H2S_SCHEME, false));
    /* CONNECT (8.5): :method and :authority, no :scheme, no :path */
    assert_true(flare__h2_head_ok(H2S_METHOD | H2S_AUTHORITY, true));
    assert_false(flare__h2_head_ok(H2S_METHOD, true));
    assert_false(flare__h2_head_ok(H2S_METHOD | H2S_AUTHORITY | H2S_PATH, true));
    int64_t v = -1;
    assert_true(flare__h2_content_length((const uint8_t *)"0", 1, &v));
    assert_int_equal(v, 0);
    assert_true(flare__h2_content_length((const uint8_t *)"999999999999999999", 18, &v));
    assert_int_equal(v, 999999999999999999LL);
}

/* A regular field's name and value bytes (checked eight at a time, the
 * rest one by one): every byte value at every position of names and values
 * from 1 to 20 bytes, against the definitions byte by byte (a name: token
 * characters, no upper case; a value: VCHAR, obs-text, SP, HTAB, not at
 * either end for the blanks) */
static void test_fields_bytes(void **state)
{
    (void)state;
    static const char tchar[] = "!#$%&'*+-.^_`|~";
    uint8_t name[20], value[20];
    for (size_t n = 1; n <= sizeof(name); n++) {
        for (size_t at = 0; at < n; at++) {
            for (unsigned c = 0; c < 256; c++) {
                memset(name, 'x', n);
                name[0] = 'x'; /* not a known name, not a pseudo-header */
                name[at] = (uint8_t)c;
                bool tok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                           (c != 0 && strchr(tchar, (int)c) != NULL);
                bool want = tok && !(at == 0 && c == ':');
                uint8_t seen = 0;
                int got = flare__h2_check_field(&seen, false, name, n, (const uint8_t *)"v", 1);
                if ((got != H2F_BAD) != want)
                    fail_msg("name of %zu bytes, 0x%02x at %zu: %d", n, c, at, got);
                memset(value, 'v', n);
                value[at] = (uint8_t)c;
                bool vch = c == '\t' || (c >= 0x20 && c != 0x7f);
                bool blank = c == ' ' || c == '\t';
                want = vch && !(blank && (at == 0 || at == n - 1));
                seen = 0;
                got = flare__h2_check_field(&seen, false, (const uint8_t *)"x-v", 3, value, n);
                if ((got != H2F_BAD) != want)
                    fail_msg("value of %zu bytes, 0x%02x at %zu: %d", n, c, at, got);
            }
        }
    }
}

/* :authority's bytes (host names and ports eight at a time, the rest of
 * RFC 3986's authority characters one by one) */
static void test_fields_authority(void **state)
{
    (void)state;
    static const char ok[] = "-._~!$&'()*+,;=:@[]%";
    uint8_t v[20];
    for (size_t n = 1; n <= sizeof(v); n++) {
        for (size_t at = 0; at < n; at++) {
            for (unsigned c = 0; c < 256; c++) {
                memset(v, 'a', n);
                v[at] = (uint8_t)c;
                bool want = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                            (c >= '0' && c <= '9') || (c != 0 && strchr(ok, (int)c) != NULL);
                uint8_t seen = 0;
                int got =
                    flare__h2_check_field(&seen, false, (const uint8_t *)":authority", 10, v, n);
                if ((got != H2F_BAD) != want)
                    fail_msg(":authority of %zu bytes, 0x%02x at %zu: %d", n, c, at, got);
            }
        }
    }
}

/* :path's bytes in one pass (finish_head): every byte value, at every
 * position of paths from 1 to 20 bytes (the eight-at-a-time part and the
 * tail), against the definition byte by byte */
static void test_target_class(void **state)
{
    (void)state;
    char t[20];
    for (size_t n = 1; n <= sizeof(t); n++) {
        for (size_t at = 0; at < n; at++) {
            for (unsigned c = 0; c < 256; c++) {
                memset(t, 'a', n);
                t[0] = '/';
                t[at] = (char)c;
                bool target = c > 0x20 && c != 0x7f;
                bool plain = target && c != '%' && c != '?';
                unsigned want = (plain ? H2T_PLAIN : 0) | (target ? H2T_TARGET : 0);
                assert_int_equal(flare__h2_target_class((const uint8_t *)t, n), want);
            }
        }
    }
    assert_int_equal(flare__h2_target_class((const uint8_t *)"/plaintext", 10),
                     H2T_PLAIN | H2T_TARGET);
    assert_int_equal(flare__h2_target_class((const uint8_t *)"/a?b=1", 6), H2T_TARGET);
    assert_int_equal(flare__h2_target_class((const uint8_t *)"/a%20b", 6), H2T_TARGET);
    assert_int_equal(flare__h2_target_class((const uint8_t *)"/a b?c", 6), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_error_names),
        cmocka_unit_test(test_flood_names),
        cmocka_unit_test_setup_teardown(test_ping_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_settings_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_priority_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_empty_data_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_window_update_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_acks_not_counted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_window_rolls, setup, teardown),
        cmocka_unit_test_setup_teardown(test_continuation_count, setup, teardown),
        cmocka_unit_test_setup_teardown(test_continuation_restarts_per_block, setup, teardown),
        cmocka_unit_test_setup_teardown(test_header_list_size, setup, teardown),
        cmocka_unit_test_setup_teardown(test_header_block_state, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_metrics_block, setup, teardown),
        cmocka_unit_test(test_add_nv),
        cmocka_unit_test(test_add_nv_lowercase),
        cmocka_unit_test(test_fields_request),
        cmocka_unit_test(test_fields_malformed),
        cmocka_unit_test(test_fields_pseudo_names),
        cmocka_unit_test(test_mem_trim),
        cmocka_unit_test(test_fields_required),
        cmocka_unit_test(test_fields_bytes),
        cmocka_unit_test(test_fields_authority),
        cmocka_unit_test(test_target_class),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
