/* WebSocket frame codec: every framing rule of RFC 6455 5 a server checks,
 * the close code each violation gets, reassembly with interleaved control
 * frames, incremental UTF-8 (fail fast, across fragments), and the same
 * events whatever the split of the input (every byte). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/core.h"
#include "http1/parser.h"
#include "ws/frame.h"

static const uint8_t KEY[4] = { 0x37, 0xfa, 0x21, 0x3d };

/* Appends a client frame (masked with KEY unless `unmasked`). */
static size_t put_frame(uint8_t *out, uint8_t b0, const void *payload, size_t len, bool unmasked)
{
    uint8_t op = b0 & 0x0F;
    size_t n = flare__ws_frame_header(out, op, (b0 & 0x80) != 0, (b0 & 0x40) != 0, len,
                                      unmasked ? NULL : KEY);
    out[0] = b0; /* keep RSV2/RSV3 as given */
    if (len > 0)
        memcpy(out + n, payload, len);
    if (!unmasked)
        flare__ws_unmask(out + n, len, KEY, 0);
    return n + len;
}

#define FIN  0x80
#define RSV1 0x40

typedef struct collected {
    int rc; /* 0 or FLARE_PARSE_ERROR */
    uint16_t error;
    char msgs[8][2048]; /* completed messages: opcode char + payload */
    size_t msg_len[8];
    int nmsgs;
    char cur[2048];
    size_t cur_len;
    char controls[8][130];
    size_t control_len[8];
    uint16_t close_code[8];
    int ncontrols;
    size_t consumed;
} collected_t;

/* Feeds in[0..len) `step` bytes at a time (0: all at once), each read
 * appended to a buffer that keeps the unconsumed bytes (like a connection). */
static void run(flare_ws_parser_t *p, const uint8_t *in, size_t len, size_t step, collected_t *c)
{
    memset(c, 0, sizeof(*c));
    static uint8_t buf[1 << 17];
    size_t have = 0, fed = 0;
    while (fed < len || have > 0) {
        size_t add = step == 0 ? len - fed : (len - fed < step ? len - fed : step);
        memcpy(buf + have, in + fed, add);
        have += add;
        fed += add;
        size_t pos = 0;
        for (;;) {
            flare_ws_event_t ev;
            int rc = flare__ws_parse(p, buf + pos, have - pos, &ev);
            if (rc == FLARE_PARSE_PARTIAL)
                break;
            if (rc == FLARE_PARSE_ERROR) {
                c->rc = rc;
                c->error = p->error;
                return;
            }
            assert_true(rc > 0);
            pos += (size_t)rc;
            c->consumed += (size_t)rc;
            if (ev.type == FLARE_WS_EV_DATA) {
                if (ev.first)
                    c->cur[c->cur_len++] = ev.opcode == FLARE_WS_OP_TEXT ? 'T' : 'B';
                assert_true(c->cur_len + ev.len <= sizeof(c->cur));
                memcpy(c->cur + c->cur_len, ev.data, ev.len);
                c->cur_len += ev.len;
                if (ev.fin) {
                    memcpy(c->msgs[c->nmsgs], c->cur, c->cur_len);
                    c->msg_len[c->nmsgs++] = c->cur_len;
                    c->cur_len = 0;
                }
            } else if (ev.type == FLARE_WS_EV_CONTROL) {
                int i = c->ncontrols++;
                c->controls[i][0] = (char)('0' + ev.opcode - 8); /* 0 close, 1 ping, 2 pong */
                memcpy(c->controls[i] + 1, ev.data, ev.len);
                c->control_len[i] = ev.len + 1;
                c->close_code[i] = ev.close_code;
            }
            if (pos == have)
                break;
        }
        memmove(buf, buf + pos, have - pos);
        have -= pos;
        if (fed == len)
            break;
    }
}

static void server_parser(flare_ws_parser_t *p)
{
    flare__ws_parser_init(p, true, 1 << 20);
}

/* The error a single frame (or stream) gets, fed whole and byte by byte. */
static uint16_t error_of(const uint8_t *in, size_t len, bool deflate)
{
    collected_t whole, bytes;
    flare_ws_parser_t p;
    server_parser(&p);
    p.rsv1_allowed = deflate;
    run(&p, in, len, 0, &whole);
    server_parser(&p);
    p.rsv1_allowed = deflate;
    run(&p, in, len, 1, &bytes);
    assert_int_equal(whole.error, bytes.error);
    return whole.error;
}

static void test_lengths(void **state)
{
    (void)state;
    static uint8_t in[70000 + 14], payload[70000];
    for (size_t i = 0; i < sizeof(payload); i++)
        payload[i] = (uint8_t)('a' + i % 26);
    const size_t lens[] = { 0, 1, 125, 126, 127, 65535, 65536, 70000 };
    for (size_t k = 0; k < FLARE__ARRAY_SIZE(lens); k++) {
        size_t n = put_frame(in, FIN | FLARE_WS_OP_BINARY, payload, lens[k], false);
        size_t hl = lens[k] < 126 ? 2 : lens[k] <= 65535 ? 4 : 10;
        assert_int_equal(n, hl + 4 + lens[k]);
        flare_ws_parser_t p;
        server_parser(&p);
        flare_ws_event_t ev;
        int rc = flare__ws_parse(&p, in, n, &ev);
        assert_int_equal(rc, (int)n);
        assert_int_equal(ev.type, FLARE_WS_EV_DATA);
        assert_int_equal(ev.opcode, FLARE_WS_OP_BINARY);
        assert_true(ev.first && ev.fin && !ev.compressed);
        assert_int_equal(ev.len, lens[k]);
        if (lens[k] > 0)
            assert_memory_equal(ev.data, payload, lens[k]);
        assert_false(flare__ws_parser_in_message(&p));
    }
}

static void test_header_encoding(void **state)
{
    (void)state;
    uint8_t h[FLARE_WS_MAX_HEADER];
    assert_int_equal(flare__ws_frame_header(h, FLARE_WS_OP_TEXT, true, false, 5, NULL), 2);
    assert_memory_equal(h, "\x81\x05", 2);
    assert_int_equal(flare__ws_frame_header(h, FLARE_WS_OP_BINARY, true, true, 126, NULL), 4);
    assert_memory_equal(h, "\xc2\x7e\x00\x7e", 4);
    assert_int_equal(flare__ws_frame_header(h, FLARE_WS_OP_CONT, false, false, 65536, NULL), 10);
    assert_memory_equal(h, "\x00\x7f\x00\x00\x00\x00\x00\x01\x00\x00", 10);
    assert_int_equal(flare__ws_frame_header(h, FLARE_WS_OP_PING, true, false, 0, KEY), 6);
    assert_memory_equal(h, "\x89\x80\x37\xfa\x21\x3d", 6);
}

static void test_mask_required(void **state)
{
    (void)state;
    uint8_t in[64];
    size_t n = put_frame(in, FIN | FLARE_WS_OP_TEXT, "hi", 2, true);
    assert_int_equal(error_of(in, n, false), FLARE_WS_CLOSE_PROTOCOL);
    /* a client refuses masked server frames */
    n = put_frame(in, FIN | FLARE_WS_OP_TEXT, "hi", 2, false);
    flare_ws_parser_t p;
    flare__ws_parser_init(&p, false, 100);
    flare_ws_event_t ev;
    assert_int_equal(flare__ws_parse(&p, in, n, &ev), FLARE_PARSE_ERROR);
    assert_int_equal(p.error, FLARE_WS_CLOSE_PROTOCOL);
    /* and reads unmasked ones */
    n = put_frame(in, FIN | FLARE_WS_OP_TEXT, "hi", 2, true);
    flare__ws_parser_init(&p, false, 100);
    assert_int_equal(flare__ws_parse(&p, in, n, &ev), (int)n);
    assert_memory_equal(ev.data, "hi", 2);
}

static void test_non_minimal_lengths(void **state)
{
    (void)state;
    /* 16-bit length 125, 64-bit length 65535, 64-bit with the MSB set */
    static const uint8_t a[] = { 0x82, 0xfe, 0x00, 0x7d, 1, 2, 3, 4 };
    static const uint8_t b[] = { 0x82, 0xff, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 1, 2, 3, 4 };
    static const uint8_t c[] = { 0x82, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 1, 1, 2, 3, 4 };
    assert_int_equal(error_of(a, sizeof(a), false), FLARE_WS_CLOSE_PROTOCOL);
    assert_int_equal(error_of(b, sizeof(b), false), FLARE_WS_CLOSE_PROTOCOL);
    assert_int_equal(error_of(c, sizeof(c), false), FLARE_WS_CLOSE_PROTOCOL);
    /* exactly 126 with 16 bits and 65536 with 64 bits are fine: header only */
    static const uint8_t d[] = { 0x82, 0xfe, 0x00, 0x7e, 1, 2, 3, 4 };
    flare_ws_parser_t p;
    server_parser(&p);
    flare_ws_event_t ev;
    assert_int_equal(flare__ws_parse(&p, (uint8_t *)d, sizeof(d), &ev), 8);
    assert_int_equal(ev.type, FLARE_WS_EV_NONE);
    assert_true(p.in_payload);
}

static void test_opcodes(void **state)
{
    (void)state;
    uint8_t in[32];
    for (int op = 0; op < 16; op++) {
        size_t n = put_frame(in, (uint8_t)(FIN | op), NULL, 0, false);
        uint16_t e = error_of(in, n, false);
        if (op == 1 || op == 2 || op == 8 || op == 9 || op == 10)
            assert_int_equal(e, 0);
        else
            assert_int_equal(e, FLARE_WS_CLOSE_PROTOCOL); /* reserved, or CONT outside a message */
    }
}

static void test_rsv_bits(void **state)
{
    (void)state;
    uint8_t in[64];
    for (int bit = 0; bit < 3; bit++) {
        uint8_t rsv = (uint8_t)(0x40 >> bit);
        size_t n = put_frame(in, (uint8_t)(FIN | rsv | FLARE_WS_OP_TEXT), "x", 1, false);
        assert_int_equal(error_of(in, n, false), FLARE_WS_CLOSE_PROTOCOL);
        n = put_frame(in, (uint8_t)(FIN | rsv | FLARE_WS_OP_PING), "x", 1, false);
        assert_int_equal(error_of(in, n, true), FLARE_WS_CLOSE_PROTOCOL);
        /* with deflate: RSV1 is fine on a data message's first frame only */
        n = put_frame(in, (uint8_t)(FIN | rsv | FLARE_WS_OP_BINARY), "x", 1, false);
        assert_int_equal(error_of(in, n, true), bit == 0 ? 0 : FLARE_WS_CLOSE_PROTOCOL);
    }
    size_t n = put_frame(in, RSV1 | FLARE_WS_OP_TEXT, "a", 1, false);
    n += put_frame(in + n, FIN | RSV1 | FLARE_WS_OP_CONT, "b", 1, false);
    assert_int_equal(error_of(in, n, true), FLARE_WS_CLOSE_PROTOCOL);
    /* the compressed flag is reported on every piece; text is not validated */
    n = put_frame(in, RSV1 | FLARE_WS_OP_TEXT, "\xff", 1, false);
    n += put_frame(in + n, FIN | FLARE_WS_OP_CONT, "\xfe", 1, false);
    flare_ws_parser_t p;
    server_parser(&p);
    p.rsv1_allowed = true;
    flare_ws_event_t ev;
    int rc = flare__ws_parse(&p, in, n, &ev);
    assert_int_equal(rc, 7);
    assert_true(ev.compressed && ev.first && !ev.fin);
    assert_int_equal(flare__ws_parse(&p, in + 7, n - 7, &ev), 7);
    assert_true(ev.compressed && !ev.first && ev.fin);
}

static void test_control_rules(void **state)
{
    (void)state;
    static uint8_t in[512], pl[200];
    memset(pl, 'p', sizeof(pl));
    size_t n = put_frame(in, FIN | FLARE_WS_OP_PING, pl, 125, false);
    assert_int_equal(error_of(in, n, false), 0);
    n = put_frame(in, FIN | FLARE_WS_OP_PING, pl, 126, false);
    assert_int_equal(error_of(in, n, false), FLARE_WS_CLOSE_PROTOCOL);
    n = put_frame(in, FLARE_WS_OP_PING, pl, 3, false); /* fragmented ping */
    assert_int_equal(error_of(in, n, false), FLARE_WS_CLOSE_PROTOCOL);
    n = put_frame(in, FLARE_WS_OP_PONG, pl, 3, false);
    assert_int_equal(error_of(in, n, false), FLARE_WS_CLOSE_PROTOCOL);
    /* a fragmented ping fails at its second byte, before the payload */
    static const uint8_t two[] = { 0x09, 0x83 };
    flare_ws_parser_t p;
    server_parser(&p);
    flare_ws_event_t ev;
    assert_int_equal(flare__ws_parse(&p, (uint8_t *)two, 2, &ev), FLARE_PARSE_ERROR);
    /* a control frame waits until it is whole */
    n = put_frame(in, FIN | FLARE_WS_OP_PING, "hello", 5, false);
    server_parser(&p);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(flare__ws_parse(&p, in, i, &ev), FLARE_PARSE_PARTIAL);
    assert_int_equal(flare__ws_parse(&p, in, n, &ev), (int)n);
    assert_int_equal(ev.type, FLARE_WS_EV_CONTROL);
    assert_int_equal(ev.opcode, FLARE_WS_OP_PING);
    assert_int_equal(ev.len, 5);
    assert_memory_equal(ev.data, "hello", 5);
}

static void test_fragmentation(void **state)
{
    (void)state;
    uint8_t in[256];
    size_t n = put_frame(in, FLARE_WS_OP_TEXT, "Hel", 3, false);
    n += put_frame(in + n, FIN | FLARE_WS_OP_PING, "p1", 2, false);
    n += put_frame(in + n, FLARE_WS_OP_CONT, "", 0, false);
    n += put_frame(in + n, FIN | FLARE_WS_OP_PONG, "p2", 2, false);
    n += put_frame(in + n, FIN | FLARE_WS_OP_CONT, "lo", 2, false);
    n += put_frame(in + n, FIN | FLARE_WS_OP_BINARY, "\x00\xff", 2, false);
    for (size_t step = 0; step < 8; step++) {
        flare_ws_parser_t p;
        server_parser(&p);
        collected_t c;
        run(&p, in, n, step, &c);
        assert_int_equal(c.rc, 0);
        assert_int_equal(c.consumed, n);
        assert_int_equal(c.nmsgs, 2);
        assert_int_equal(c.msg_len[0], 6);
        assert_memory_equal(c.msgs[0], "THello", 6);
        assert_int_equal(c.msg_len[1], 3);
        assert_memory_equal(c.msgs[1], "B\x00\xff", 3);
        assert_int_equal(c.ncontrols, 2);
        assert_memory_equal(c.controls[0], "1p1", 3);
        assert_memory_equal(c.controls[1], "2p2", 3);
    }
    /* continuation with nothing to continue; a new message inside one */
    n = put_frame(in, FIN | FLARE_WS_OP_CONT, "x", 1, false);
    assert_int_equal(error_of(in, n, false), FLARE_WS_CLOSE_PROTOCOL);
    n = put_frame(in, FLARE_WS_OP_TEXT, "a", 1, false);
    n += put_frame(in + n, FIN | FLARE_WS_OP_TEXT, "b", 1, false);
    assert_int_equal(error_of(in, n, false), FLARE_WS_CLOSE_PROTOCOL);
    n = put_frame(in, FLARE_WS_OP_BINARY, "a", 1, false);
    n += put_frame(in + n, FLARE_WS_OP_BINARY, "b", 1, false);
    assert_int_equal(error_of(in, n, false), FLARE_WS_CLOSE_PROTOCOL);
}

static void test_utf8_messages(void **state)
{
    (void)state;
    uint8_t in[256];
    /* "κόσμε" split inside a character, across three fragments */
    static const char kosme[] = "\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5";
    size_t n = put_frame(in, FLARE_WS_OP_TEXT, kosme, 3, false);
    n += put_frame(in + n, FLARE_WS_OP_CONT, kosme + 3, 1, false);
    n += put_frame(in + n, FIN | FLARE_WS_OP_CONT, kosme + 4, 7, false);
    assert_int_equal(error_of(in, n, false), 0);
    /* binary is never validated */
    n = put_frame(in, FIN | FLARE_WS_OP_BINARY, "\xff\xfe", 2, false);
    assert_int_equal(error_of(in, n, false), 0);
    /* ends inside a character */
    n = put_frame(in, FIN | FLARE_WS_OP_TEXT, kosme, 3, false);
    assert_int_equal(error_of(in, n, false), FLARE_WS_CLOSE_INVALID_DATA);
    /* fail fast: the first fragment is bad, the message is not finished
     * (and the rest of the frame has not even arrived) */
    n = put_frame(in, FLARE_WS_OP_TEXT, "ok\xed\xa0\x80more", 9, false);
    flare_ws_parser_t p;
    server_parser(&p);
    flare_ws_event_t ev;
    assert_int_equal(flare__ws_parse(&p, in, 6 + 5, &ev), FLARE_PARSE_ERROR);
    assert_int_equal(p.error, FLARE_WS_CLOSE_INVALID_DATA);
    assert_int_equal(flare__ws_parse(&p, in, n, &ev), FLARE_PARSE_ERROR); /* sticky */
}

static void test_close_frames(void **state)
{
    (void)state;
    uint8_t in[256], pl[130];
    /* empty; code only; code + reason */
    size_t n = put_frame(in, FIN | FLARE_WS_OP_CLOSE, "", 0, false);
    flare_ws_parser_t p;
    server_parser(&p);
    flare_ws_event_t ev;
    assert_int_equal(flare__ws_parse(&p, in, n, &ev), (int)n);
    assert_int_equal(ev.close_code, 0);
    n = put_frame(in, FIN | FLARE_WS_OP_CLOSE,
                  "\x03\xe8"
                  "bye",
                  5, false);
    assert_int_equal(flare__ws_parse(&p, in, n, &ev), (int)n);
    assert_int_equal(ev.close_code, 1000);
    assert_int_equal(ev.reason.len, 3);
    assert_memory_equal(ev.reason.ptr, "bye", 3);
    /* one byte */
    n = put_frame(in, FIN | FLARE_WS_OP_CLOSE, "\x03", 1, false);
    assert_int_equal(error_of(in, n, false), FLARE_WS_CLOSE_PROTOCOL);
    /* invalid UTF-8 reason */
    n = put_frame(in, FIN | FLARE_WS_OP_CLOSE, "\x03\xe8\xce", 3, false);
    assert_int_equal(error_of(in, n, false), FLARE_WS_CLOSE_INVALID_DATA);
    /* 123-byte reason is the most that fits */
    pl[0] = 0x03;
    pl[1] = 0xe8;
    memset(pl + 2, 'r', 124);
    n = put_frame(in, FIN | FLARE_WS_OP_CLOSE, pl, 125, false);
    assert_int_equal(error_of(in, n, false), 0);
    n = put_frame(in, FIN | FLARE_WS_OP_CLOSE, pl, 126, false);
    assert_int_equal(error_of(in, n, false), FLARE_WS_CLOSE_PROTOCOL);
    /* codes */
    static const unsigned good[] = { 1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010,
                                     1011, 1012, 1013, 1014, 3000, 3999, 4000, 4999 };
    static const unsigned bad[] = { 0,    999,  1004, 1005, 1006, 1015,
                                    1016, 1100, 2000, 2999, 5000, 65535 };
    for (size_t i = 0; i < FLARE__ARRAY_SIZE(good); i++) {
        pl[0] = (uint8_t)(good[i] >> 8);
        pl[1] = (uint8_t)good[i];
        n = put_frame(in, FIN | FLARE_WS_OP_CLOSE, pl, 2, false);
        assert_int_equal(error_of(in, n, false), 0);
        assert_true(flare__ws_close_code_valid(good[i]));
    }
    for (size_t i = 0; i < FLARE__ARRAY_SIZE(bad); i++) {
        pl[0] = (uint8_t)(bad[i] >> 8);
        pl[1] = (uint8_t)bad[i];
        n = put_frame(in, FIN | FLARE_WS_OP_CLOSE, pl, 2, false);
        assert_int_equal(error_of(in, n, false), FLARE_WS_CLOSE_PROTOCOL);
    }
}

static void test_close_payload_encoding(void **state)
{
    (void)state;
    uint8_t out[FLARE_WS_MAX_CONTROL];
    assert_int_equal(flare__ws_close_payload(out, 0, FLARE_STR("ignored")), 0);
    assert_int_equal(flare__ws_close_payload(out, 1001, FLARE_STR("going")), 7);
    assert_memory_equal(out, "\x03\xe9going", 7);
    /* 61 two-byte characters = 122 bytes fit; 62 would be 124 > 123: cut to 61 */
    char r[200];
    for (int i = 0; i < 62; i++)
        memcpy(r + 2 * i, "\xc3\xa9", 2);
    size_t n = flare__ws_close_payload(out, 1000, (flare_str_t){ r, 124 });
    assert_int_equal(n, 2 + 122);
    assert_true(flare__utf8_valid(out + 2, n - 2));
}

static void test_message_limit(void **state)
{
    (void)state;
    static uint8_t in[4096];
    uint8_t hdr[FLARE_WS_MAX_HEADER];
    /* a header declaring more than the limit fails before any payload */
    size_t n = flare__ws_frame_header(hdr, FLARE_WS_OP_BINARY, true, false, 1001, KEY);
    flare_ws_parser_t p;
    flare__ws_parser_init(&p, true, 1000);
    flare_ws_event_t ev;
    assert_int_equal(flare__ws_parse(&p, hdr, n, &ev), FLARE_PARSE_ERROR);
    assert_int_equal(p.error, FLARE_WS_CLOSE_TOO_BIG);
    /* fragments adding up past it */
    static uint8_t pl[600];
    n = put_frame(in, FLARE_WS_OP_BINARY, pl, 600, false);
    n += put_frame(in + n, FIN | FLARE_WS_OP_CONT, pl, 400, false);
    flare__ws_parser_init(&p, true, 1000);
    collected_t c;
    run(&p, in, n, 0, &c);
    assert_int_equal(c.error, 0);
    n = put_frame(in, FLARE_WS_OP_BINARY, pl, 600, false);
    n += put_frame(in + n, FIN | FLARE_WS_OP_CONT, pl, 401, false);
    flare__ws_parser_init(&p, true, 1000);
    run(&p, in, n, 0, &c);
    assert_int_equal(c.error, FLARE_WS_CLOSE_TOO_BIG);
    /* a 2^63-1 declaration does not overflow the sum */
    static const uint8_t huge[] = { 0x00, 0xff, 0x7f, 0xff, 0xff, 0xff, 0xff,
                                    0xff, 0xff, 0xff, 1,    2,    3,    4 };
    flare__ws_parser_init(&p, true, 1000);
    n = put_frame(in, FLARE_WS_OP_BINARY, pl, 10, false);
    memcpy(in + n, huge, sizeof(huge));
    run(&p, in, n + sizeof(huge), 0, &c);
    assert_int_equal(c.error, FLARE_WS_CLOSE_TOO_BIG);
    /* compressed messages have their own limit */
    flare__ws_parser_init(&p, true, 10);
    p.rsv1_allowed = true;
    p.max_compressed = 20;
    n = put_frame(in, FIN | RSV1 | FLARE_WS_OP_BINARY, pl, 20, false);
    run(&p, in, n, 0, &c);
    assert_int_equal(c.error, 0);
}

static void test_every_split(void **state)
{
    (void)state;
    static uint8_t in[2048], big[700];
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (uint8_t)i;
    size_t n = put_frame(in, FIN | FLARE_WS_OP_TEXT, "first", 5, false);
    n += put_frame(in + n, FLARE_WS_OP_BINARY, big, 300, false);
    n += put_frame(in + n, FIN | FLARE_WS_OP_PING, "ping!", 5, false);
    n += put_frame(in + n, FIN | FLARE_WS_OP_CONT, big + 300, 400, false);
    n += put_frame(in + n, FIN | FLARE_WS_OP_CLOSE, "\x03\xe8ok", 4, false);
    for (size_t step = 0; step <= 40; step++) {
        flare_ws_parser_t p;
        server_parser(&p);
        collected_t c;
        run(&p, in, n, step, &c);
        assert_int_equal(c.rc, 0);
        assert_int_equal(c.consumed, n);
        assert_int_equal(c.nmsgs, 2);
        assert_memory_equal(c.msgs[0], "Tfirst", 6);
        assert_int_equal(c.msg_len[1], 701);
        assert_int_equal(c.msgs[1][0], 'B');
        assert_memory_equal(c.msgs[1] + 1, big, 700);
        assert_int_equal(c.ncontrols, 2);
        assert_memory_equal(c.controls[0], "1ping!", 6);
        assert_int_equal(c.close_code[1], 1000);
    }
}

static void test_unmask_matches_reference(void **state)
{
    (void)state;
    uint8_t a[300], b[300];
    for (size_t len = 0; len < 260; len++) {
        for (uint32_t pos = 0; pos < 4; pos++) {
            for (size_t off = 0; off < 3; off++) {
                for (size_t i = 0; i < len; i++)
                    a[off + i] = b[off + i] = (uint8_t)(i * 7 + len);
                flare__ws_unmask(a + off, len, KEY, pos);
                for (size_t i = 0; i < len; i++)
                    b[off + i] ^= KEY[(pos + i) & 3];
                if (len > 0)
                    assert_memory_equal(a + off, b + off, len);
            }
        }
    }
}

static void test_utf8_vectors(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        size_t n;
        bool ok;
    } v[] = {
        { "", 0, true },
        { "hello", 5, true },
        { "\xc2\x80", 2, true },
        { "\xdf\xbf", 2, true },
        { "\xe0\xa0\x80", 3, true },
        { "\xed\x9f\xbf", 3, true },
        { "\xee\x80\x80", 3, true },
        { "\xef\xbf\xbf", 3, true },
        { "\xf0\x90\x80\x80", 4, true },
        { "\xf4\x8f\xbf\xbf", 4, true },
        { "\x80", 1, false },
        { "\xbf", 1, false },
        { "\xc0\xaf", 2, false },     /* overlong '/' */
        { "\xc1\xbf", 2, false },     /* overlong */
        { "\xe0\x80\xaf", 3, false }, /* overlong */
        { "\xe0\x9f\xbf", 3, false }, /* overlong */
        { "\xed\xa0\x80", 3, false }, /* U+D800 */
        { "\xed\xbf\xbf", 3, false }, /* U+DFFF */
        { "\xf0\x8f\xbf\xbf", 4, false },
        { "\xf4\x90\x80\x80", 4, false }, /* > U+10FFFF */
        { "\xf5\x80\x80\x80", 4, false },
        { "\xfe", 1, false },
        { "\xff", 1, false },
        { "\xc2", 1, false },
        { "\xe1\x80", 2, false },
        { "a\xc2z", 3, false },
        { "\xf0\x90\x80\x80\xf0\x90\x80\x80\xf0\x90\x80\x80\xf0\x90\x80\x80x", 17, true },
        { "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\xff", 35, false },
    };
    for (size_t i = 0; i < FLARE__ARRAY_SIZE(v); i++) {
        bool got = flare__utf8_valid(v[i].s, v[i].n);
        if (got != v[i].ok)
            fail_msg("vector %zu", i);
        /* byte by byte gives the same answer */
        uint32_t s = FLARE_UTF8_ACCEPT;
        for (size_t k = 0; k < v[i].n; k++)
            s = flare__utf8_step(s, (const uint8_t *)v[i].s + k, 1);
        assert_int_equal(s == FLARE_UTF8_ACCEPT, v[i].ok);
    }
    /* exhaustive over two- and three-byte lead/continuation pairs against a
     * decoder written the obvious way */
    for (unsigned c0 = 0; c0 < 256; c0++) {
        for (unsigned c1 = 0; c1 < 256; c1++) {
            uint8_t s[2] = { (uint8_t)c0, (uint8_t)c1 };
            bool ok;
            if (c0 < 0x80)
                ok = c1 < 0x80;
            else if (c0 >= 0xC2 && c0 <= 0xDF)
                ok = (c1 & 0xC0) == 0x80;
            else
                ok = false;
            assert_int_equal(flare__utf8_valid(s, 2), ok);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lengths),
        cmocka_unit_test(test_header_encoding),
        cmocka_unit_test(test_mask_required),
        cmocka_unit_test(test_non_minimal_lengths),
        cmocka_unit_test(test_opcodes),
        cmocka_unit_test(test_rsv_bits),
        cmocka_unit_test(test_control_rules),
        cmocka_unit_test(test_fragmentation),
        cmocka_unit_test(test_utf8_messages),
        cmocka_unit_test(test_close_frames),
        cmocka_unit_test(test_close_payload_encoding),
        cmocka_unit_test(test_message_limit),
        cmocka_unit_test(test_every_split),
        cmocka_unit_test(test_unmask_matches_reference),
        cmocka_unit_test(test_utf8_vectors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
