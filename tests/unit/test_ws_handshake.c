/* WebSocket handshake checks (RFC 6455 4.2.1), Sec-WebSocket-Accept, the
 * Origin policy, subprotocol choice, permessage-deflate negotiation
 * (RFC 7692 7) and the zlib wrappers: round trips with and without context
 * takeover, split input, corrupt data, and a zip bomb that must stop at
 * the limit without allocating past it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/core.h"
#include "ws/deflate.h"
#include "ws/handshake.h"

#define H(n, v)                    \
    {                              \
        FLARE_STR(n), FLARE_STR(v) \
    }

static const flare_header_t base[] = {
    H("Host", "localhost:8080"),      H("Upgrade", "websocket"),
    H("Connection", "Upgrade"),       H("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
    H("Sec-WebSocket-Version", "13"),
};

static flare_ws_hs_policy_t no_policy;

/* base with header `name` replaced by value (NULL: removed), or added */
static int check_with(const char *name, const char *value, const flare_ws_hs_policy_t *pol,
                      flare_ws_hs_t *out)
{
    flare_header_t h[16];
    size_t n = 0;
    bool replaced = false;
    for (size_t i = 0; i < FLARE__ARRAY_SIZE(base); i++) {
        if (name != NULL && flare_str_ieq(base[i].name, flare_str(name))) {
            replaced = true;
            if (value != NULL)
                h[n++] = (flare_header_t){ base[i].name, flare_str(value) };
            continue;
        }
        h[n++] = base[i];
    }
    if (name != NULL && !replaced && value != NULL)
        h[n++] = (flare_header_t){ flare_str(name), flare_str(value) };
    return flare__ws_handshake_check(FLARE_METHOD_GET, 1, h, n, pol != NULL ? pol : &no_policy,
                                     out);
}

static void test_accept_key(void **state)
{
    (void)state;
    char out[FLARE_WS_ACCEPT_LEN];
    /* RFC 6455 1.3 */
    assert_int_equal(flare__ws_accept_key(FLARE_STR("dGhlIHNhbXBsZSBub25jZQ=="), out), 0);
    assert_memory_equal(out, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", FLARE_WS_ACCEPT_LEN);
}

static void test_valid(void **state)
{
    (void)state;
    flare_ws_hs_t hs;
    assert_int_equal(check_with(NULL, NULL, NULL, &hs), 0);
    assert_int_equal(hs.key.len, 24);
    assert_int_equal(hs.protocol.len, 0);
    /* token lists, any case, repeated fields */
    assert_int_equal(check_with("Upgrade", "foo/1, WebSocket", NULL, &hs), 0);
    assert_int_equal(check_with("Connection", "keep-alive, UPGRADE", NULL, &hs), 0);
    flare_header_t h[8];
    memcpy(h, base, sizeof(base));
    h[2] = (flare_header_t)H("Connection", "keep-alive");
    h[5] = (flare_header_t)H("connection", "upgrade");
    assert_int_equal(flare__ws_handshake_check(FLARE_METHOD_GET, 1, h, 6, &no_policy, &hs), 0);
}

static void test_refusals(void **state)
{
    (void)state;
    flare_ws_hs_t hs;
    assert_int_equal(check_with("Upgrade", NULL, NULL, &hs), 426);
    assert_int_equal(check_with("Upgrade", "h2c", NULL, &hs), 426);
    assert_int_equal(check_with("Upgrade", "websocket2", NULL, &hs), 426);
    assert_int_equal(check_with("Connection", "keep-alive", NULL, &hs), 400);
    assert_int_equal(check_with("Connection", NULL, NULL, &hs), 400);
    assert_int_equal(check_with("Sec-WebSocket-Version", "8", NULL, &hs), 426);
    assert_int_equal(check_with("Sec-WebSocket-Version", NULL, NULL, &hs), 426);
    assert_int_equal(check_with("Sec-WebSocket-Version", "13, 8", NULL, &hs), 426);
    assert_int_equal(check_with("Sec-WebSocket-Key", NULL, NULL, &hs), 400);
    assert_int_equal(check_with("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=", NULL, &hs), 400);
    assert_int_equal(check_with("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ", NULL, &hs), 400);
    assert_int_equal(check_with("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25j!Q==", NULL, &hs), 400);
    /* base64 of 17 bytes */
    assert_int_equal(check_with("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZXg=", NULL, &hs), 400);
    assert_non_null(hs.error);
    flare_header_t h[8];
    memcpy(h, base, sizeof(base));
    h[5] = (flare_header_t)H("Sec-WebSocket-Key", "AAAAAAAAAAAAAAAAAAAAAA==");
    assert_int_equal(flare__ws_handshake_check(FLARE_METHOD_GET, 1, h, 6, &no_policy, &hs), 400);
    assert_int_equal(flare__ws_handshake_check(FLARE_METHOD_POST, 1, base, FLARE__ARRAY_SIZE(base),
                                               &no_policy, &hs),
                     400);
    assert_int_equal(flare__ws_handshake_check(FLARE_METHOD_GET, 0, base, FLARE__ARRAY_SIZE(base),
                                               &no_policy, &hs),
                     400);
}

static void test_origin(void **state)
{
    (void)state;
    flare_ws_hs_t hs;
    /* default: same origin (or none) */
    assert_int_equal(check_with("Origin", "http://localhost:8080", NULL, &hs), 0);
    assert_int_equal(check_with("Origin", "https://LOCALHOST:8080", NULL, &hs), 0);
    assert_int_equal(check_with("Origin", "http://evil.example", NULL, &hs), 403);
    assert_int_equal(check_with("Origin", "http://localhost:8081", NULL, &hs), 403);
    assert_int_equal(check_with("Origin", "null", NULL, &hs), 403);
    flare_ws_hs_policy_t strict = { .origin_required = true };
    assert_int_equal(check_with(NULL, NULL, &strict, &hs), 403);
    /* an allow-list */
    const flare_str_t allowed[] = { FLARE_STR("https://app.example"),
                                    FLARE_STR("http://localhost:3000") };
    flare_ws_hs_policy_t list = { .origins = allowed, .norigins = 2 };
    assert_int_equal(check_with("Origin", "https://app.example", &list, &hs), 0);
    assert_int_equal(check_with("Origin", "http://localhost:3000", &list, &hs), 0);
    assert_int_equal(check_with("Origin", "http://localhost:8080", &list, &hs), 403);
    assert_int_equal(check_with("Origin", "https://app.example.evil", &list, &hs), 403);
    assert_int_equal(check_with(NULL, NULL, &list, &hs), 0); /* non-browser client */
    const flare_str_t any[] = { FLARE_STR("*") };
    flare_ws_hs_policy_t star = { .origins = any, .norigins = 1 };
    assert_int_equal(check_with("Origin", "http://anything.example", &star, &hs), 0);
}

static void test_subprotocols(void **state)
{
    (void)state;
    const flare_str_t mine[] = { FLARE_STR("chat.v2"), FLARE_STR("chat.v1") };
    flare_ws_hs_policy_t pol = { .protocols = mine, .nprotocols = 2 };
    flare_ws_hs_t hs;
    /* our order wins over the client's */
    assert_int_equal(check_with("Sec-WebSocket-Protocol", "chat.v1, chat.v2", &pol, &hs), 0);
    assert_true(flare_str_eq(hs.protocol, FLARE_STR("chat.v2")));
    assert_int_equal(check_with("Sec-WebSocket-Protocol", "x, chat.v1", &pol, &hs), 0);
    assert_true(flare_str_eq(hs.protocol, FLARE_STR("chat.v1")));
    assert_int_equal(check_with("Sec-WebSocket-Protocol", "CHAT.V1", &pol, &hs), 0);
    assert_int_equal(hs.protocol.len, 0); /* case-sensitive */
    assert_int_equal(check_with(NULL, NULL, &pol, &hs), 0);
    assert_int_equal(hs.protocol.len, 0);
    flare_header_t h[8];
    memcpy(h, base, sizeof(base));
    h[5] = (flare_header_t)H("Sec-WebSocket-Protocol", "a");
    h[6] = (flare_header_t)H("sec-websocket-protocol", " chat.v1 ");
    assert_int_equal(flare__ws_handshake_check(FLARE_METHOD_GET, 1, h, 7, &pol, &hs), 0);
    assert_true(flare_str_eq(hs.protocol, FLARE_STR("chat.v1")));
}

/* ---- permessage-deflate negotiation ---- */

static bool negotiate(const char *offer, const flare_ws_pmd_policy_t *pol, flare_ws_pmd_t *out,
                      char *resp)
{
    flare_header_t h[1] = { { FLARE_STR("Sec-WebSocket-Extensions"), flare_str(offer) } };
    size_t len = 0;
    bool ok = flare__ws_pmd_negotiate(h, 1, pol, out, resp, &len);
    resp[ok ? len : 0] = '\0';
    return ok;
}

static void test_pmd_negotiation(void **state)
{
    (void)state;
    flare_ws_pmd_policy_t pol = { 15, false };
    flare_ws_pmd_t p;
    char r[FLARE_WS_PMD_RESPONSE_MAX + 1];
    assert_true(negotiate("permessage-deflate", &pol, &p, r));
    assert_string_equal(r, "permessage-deflate");
    assert_int_equal(p.server_bits, 15);
    assert_int_equal(p.inflate_bits, 15);
    assert_false(p.server_nct || p.client_nct);

    assert_true(negotiate("permessage-deflate; client_max_window_bits", &pol, &p, r));
    assert_string_equal(r, "permessage-deflate; client_max_window_bits=15");

    assert_true(negotiate("permessage-deflate; server_max_window_bits=10; "
                          "client_max_window_bits=9; server_no_context_takeover",
                          &pol, &p, r));
    assert_string_equal(r, "permessage-deflate; server_no_context_takeover; "
                           "server_max_window_bits=10; client_max_window_bits=9");
    assert_int_equal(p.server_bits, 10);
    assert_int_equal(p.inflate_bits, 9);
    assert_true(p.server_nct);

    assert_true(negotiate("permessage-deflate;client_no_context_takeover", &pol, &p, r));
    assert_string_equal(r, "permessage-deflate; client_no_context_takeover");
    assert_true(p.client_nct);

    /* quoted value */
    assert_true(negotiate("permessage-deflate; server_max_window_bits=\"12\"", &pol, &p, r));
    assert_int_equal(p.server_bits, 12);

    /* 8 for our side: declined; the fallback offer is taken */
    assert_false(negotiate("permessage-deflate; server_max_window_bits=8", &pol, &p, r));
    assert_true(
        negotiate("permessage-deflate; server_max_window_bits=8, permessage-deflate", &pol, &p, r));
    assert_string_equal(r, "permessage-deflate");
    /* 8 for the client's side is fine (we inflate with 9) */
    assert_true(negotiate("permessage-deflate; client_max_window_bits=8", &pol, &p, r));
    assert_string_equal(r, "permessage-deflate; client_max_window_bits=8");
    assert_int_equal(p.inflate_bits, 9);

    /* invalid offers are declined */
    static const char *bad[] = {
        "permessage-deflate; server_max_window_bits",
        "permessage-deflate; server_max_window_bits=16",
        "permessage-deflate; server_max_window_bits=7",
        "permessage-deflate; server_max_window_bits=010",
        "permessage-deflate; client_max_window_bits=abc",
        "permessage-deflate; server_no_context_takeover=1",
        "permessage-deflate; server_no_context_takeover; server_no_context_takeover",
        "permessage-deflate; client_max_window_bits; client_max_window_bits=10",
        "permessage-deflate; unknown_param",
        "permessage-deflate;;",
        "x-webkit-deflate-frame",
        "deflate-frame; server_max_window_bits=10",
    };
    for (size_t i = 0; i < FLARE__ARRAY_SIZE(bad); i++) {
        if (negotiate(bad[i], &pol, &p, r))
            fail_msg("accepted: %s", bad[i]);
    }
    /* the first acceptable of several, other extensions skipped */
    assert_true(negotiate("foo; bar=1, permessage-deflate; bogus, permessage-deflate; "
                          "client_max_window_bits=11",
                          &pol, &p, r));
    assert_string_equal(r, "permessage-deflate; client_max_window_bits=11");

    /* a policy that bounds memory: small windows, no context takeover */
    flare_ws_pmd_policy_t small = { 10, true };
    assert_true(negotiate("permessage-deflate; client_max_window_bits", &small, &p, r));
    assert_string_equal(r, "permessage-deflate; server_no_context_takeover; "
                           "client_no_context_takeover; client_max_window_bits=10");
    assert_int_equal(p.server_bits, 10);
    assert_int_equal(p.inflate_bits, 10);
    assert_true(p.server_nct && p.client_nct);
    /* no client_max_window_bits in the offer: none in the answer */
    assert_true(negotiate("permessage-deflate", &small, &p, r));
    assert_int_equal(p.inflate_bits, 15);

    /* no header at all */
    size_t len = 0;
    assert_false(flare__ws_pmd_negotiate(base, FLARE__ARRAY_SIZE(base), &pol, &p, r, &len));
}

/* ---- zlib ---- */

static void roundtrip(bool nct, unsigned bits)
{
    z_stream d, in;
    assert_int_equal(flare__ws_deflate_init(&d, Z_DEFAULT_COMPRESSION, bits, 8), 0);
    assert_int_equal(flare__ws_inflate_init(&in, bits), 0);
    /* words drawn at random from a small vocabulary: compressible, but
     * repeated whole only across messages */
    char msg[3000];
    static const char *words[] = { "alpha ", "bravo ", "charlie ", "delta ", "echo ", "fox " };
    uint32_t seed = 12345;
    for (size_t i = 0; i < sizeof(msg);) {
        seed = seed * 1103515245u + 12345u;
        const char *w = words[(seed >> 16) % 6];
        for (size_t k = 0; w[k] != '\0' && i < sizeof(msg); k++)
            msg[i++] = w[k];
    }
    size_t prev = 0, first = 0;
    for (int round = 0; round < 3; round++) {
        flare_buf_t c = { 0 }, out = { 0 };
        assert_int_equal(flare__ws_deflate_message(&d, msg, sizeof(msg), nct, &c), 0);
        assert_true(c.len < sizeof(msg) / 2);
        /* with context takeover (and a window that holds the previous
         * message), the second message costs almost nothing */
        if (round > 0 && !nct && bits == 15)
            assert_true(c.len < first / 2);
        if (round == 0)
            first = c.len;
        if (round > 0 && nct)
            assert_int_equal(c.len, prev);
        prev = c.len;
        /* inflate in pieces of 7 */
        bool ended = false;
        for (size_t off = 0; off < c.len; off += 7) {
            size_t n = c.len - off < 7 ? c.len - off : 7;
            assert_int_equal(flare__ws_inflate_piece(&in, c.data + off, n, off + n == c.len, nct,
                                                     1 << 20, &out, &ended),
                             0);
        }
        assert_int_equal(out.len, sizeof(msg));
        assert_memory_equal(out.data, msg, sizeof(msg));
        flare__buf_free(&c);
        flare__buf_free(&out);
    }
    /* an empty message */
    flare_buf_t c = { 0 }, out = { 0 };
    bool ended = false;
    assert_int_equal(flare__ws_deflate_message(&d, "", 0, nct, &c), 0);
    assert_int_equal(flare__ws_inflate_piece(&in, c.data, c.len, true, nct, 100, &out, &ended), 0);
    assert_int_equal(out.len, 0);
    flare__buf_free(&c);
    flare__buf_free(&out);
    deflateEnd(&d);
    inflateEnd(&in);
}

static void test_zlib_roundtrip(void **state)
{
    (void)state;
    roundtrip(false, 15);
    roundtrip(true, 15);
    roundtrip(false, 9);
    roundtrip(true, 10);
}

static void test_zip_bomb(void **state)
{
    (void)state;
    /* 64 MiB of zeros compress to ~64 KiB */
    z_stream d, in;
    assert_int_equal(flare__ws_deflate_init(&d, 9, 15, 9), 0);
    size_t big = 64u << 20;
    char *zeros = calloc(1, big);
    assert_non_null(zeros);
    flare_buf_t c = { 0 }, out = { 0 };
    assert_int_equal(flare__ws_deflate_message(&d, zeros, big, true, &c), 0);
    free(zeros);
    assert_true(c.len < 128 * 1024);
    assert_int_equal(flare__ws_inflate_init(&in, 15), 0);
    size_t max = 1 << 20;
    bool ended = false;
    assert_int_equal(flare__ws_inflate_piece(&in, c.data, c.len, true, false, max, &out, &ended),
                     FLARE_ETOOBIG);
    assert_true(out.cap <= max + 1); /* never allocated past the limit */
    flare__buf_free(&out);
    /* exactly at the limit is fine */
    inflateReset(&in);
    deflateReset(&d);
    ended = false;
    zeros = calloc(1, max);
    c.len = 0;
    assert_int_equal(flare__ws_deflate_message(&d, zeros, max, true, &c), 0);
    free(zeros);
    assert_int_equal(flare__ws_inflate_piece(&in, c.data, c.len, true, true, max, &out, &ended), 0);
    assert_int_equal(out.len, max);
    flare__buf_free(&out);
    flare__buf_free(&c);
    deflateEnd(&d);
    inflateEnd(&in);
}

static void test_corrupt(void **state)
{
    (void)state;
    z_stream in;
    assert_int_equal(flare__ws_inflate_init(&in, 15), 0);
    flare_buf_t out = { 0 };
    bool ended = false;
    /* block type 3 is invalid */
    static const unsigned char bad[] = { 0xff, 0xff, 0xff, 0xff };
    assert_int_equal(
        flare__ws_inflate_piece(&in, bad, sizeof(bad), true, false, 1000, &out, &ended),
        FLARE_EINVAL);
    flare__buf_free(&out);
    inflateEnd(&in);
    /* a message that ends with a final block (BFINAL=1): accepted, and the
     * next message starts a new stream */
    assert_int_equal(flare__ws_inflate_init(&in, 15), 0);
    z_stream d;
    memset(&d, 0, sizeof(d));
    assert_int_equal(deflateInit2(&d, 6, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY), Z_OK);
    unsigned char buf[256];
    d.next_in = (Bytef *)"hello hello";
    d.avail_in = 11;
    d.next_out = buf;
    d.avail_out = sizeof(buf);
    assert_int_equal(deflate(&d, Z_FINISH), Z_STREAM_END);
    size_t n = sizeof(buf) - d.avail_out;
    deflateEnd(&d);
    ended = false;
    assert_int_equal(flare__ws_inflate_piece(&in, buf, n, true, false, 1000, &out, &ended), 0);
    assert_int_equal(out.len, 11);
    assert_true(ended);
    /* data after the final block, in the same message */
    assert_int_equal(flare__ws_inflate_piece(&in, buf, n, true, false, 1000, &out, &ended),
                     FLARE_EINVAL);
    out.len = 0;
    ended = false;
    assert_int_equal(flare__ws_inflate_piece(&in, buf, n, true, false, 1000, &out, &ended), 0);
    assert_memory_equal(out.data, "hello hello", 11);
    flare__buf_free(&out);
    inflateEnd(&in);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accept_key),     cmocka_unit_test(test_valid),
        cmocka_unit_test(test_refusals),       cmocka_unit_test(test_origin),
        cmocka_unit_test(test_subprotocols),   cmocka_unit_test(test_pmd_negotiation),
        cmocka_unit_test(test_zlib_roundtrip), cmocka_unit_test(test_zip_bomb),
        cmocka_unit_test(test_corrupt),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
