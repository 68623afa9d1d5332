/* Chunked decoder: framing, extensions, trailers, limits, and the same
 * result whatever the input's split (every split point, byte by byte).
 * Pieces are copied into buffers of their exact size for ASan. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "flare/common.h"
#include "http1/parser.h"

#define BIG UINT64_MAX

typedef struct result {
    int rc;          /* FLARE_CHUNKED_DONE, FLARE_PARSE_ERROR or FLARE_PARSE_PARTIAL */
    int status;      /* on error */
    size_t consumed; /* input bytes used in total */
    size_t out_len;  /* decoded bytes */
    char out[65536];
    size_t tr_len; /* the trailer section, as a caller keeps it (trailer_len) */
    char tr[16384];
} result_t;

static result_t r_whole, r_split;

/* Feeds in[0..len) cut at the given points (ascending, 0 < cut < len). */
static void decode_cuts(const char *in, size_t len, const size_t *cuts, size_t ncuts,
                        uint64_t max_body, result_t *r)
{
    flare_chunked_t c;
    flare__chunked_init(&c);
    r->rc = FLARE_PARSE_PARTIAL;
    r->status = 0;
    r->consumed = 0;
    r->out_len = 0;
    r->tr_len = 0;
    size_t start = 0;
    for (size_t k = 0; k <= ncuts; k++) {
        size_t stop = k < ncuts ? cuts[k] : len;
        size_t n = stop - start;
        char *piece = malloc(n != 0 ? n : 1);
        assert_non_null(piece);
        memcpy(piece, in + start, n);
        size_t off = 0;
        for (;;) {
            size_t used = (size_t)-1;
            flare_str_t data = { NULL, 0 };
            const char *error = NULL;
            int status = 0;
            uint32_t tlen = c.trailer_len;
            int rc = flare__chunked_decode(&c, piece + off, n - off, max_body, &used, &data,
                                           &status, &error);
            assert_true(used <= n - off);
            if (rc != FLARE_PARSE_ERROR) {
                /* the bytes the section grew by are the last ones consumed */
                size_t add = c.trailer_len - tlen;
                assert_true(add <= used && r->tr_len + add <= sizeof(r->tr));
                memcpy(r->tr + r->tr_len, piece + off + used - add, add);
                r->tr_len += add;
            }
            if (rc == FLARE_CHUNKED_DATA) {
                assert_true(data.len > 0);
                assert_true(data.ptr >= piece + off && data.ptr + data.len <= piece + off + used);
                assert_true(r->out_len + data.len <= sizeof(r->out));
                memcpy(r->out + r->out_len, data.ptr, data.len);
                r->out_len += data.len;
                off += used;
                r->consumed += used;
                continue;
            }
            r->consumed += used;
            if (rc == FLARE_PARSE_PARTIAL) {
                assert_int_equal(used, n - off);
                break;
            }
            free(piece);
            r->rc = rc;
            if (rc == FLARE_PARSE_ERROR) {
                assert_non_null(error);
                r->status = status;
            } else {
                assert_int_equal(rc, FLARE_CHUNKED_DONE);
            }
            return;
        }
        free(piece);
        start = stop;
    }
}

static void decode(const char *in, size_t len, uint64_t max_body, result_t *r)
{
    decode_cuts(in, len, NULL, 0, max_body, r);
}

static void assert_same(const result_t *a, const result_t *b, const char *how)
{
    if (a->rc != b->rc || a->status != b->status || a->out_len != b->out_len ||
        memcmp(a->out, b->out, a->out_len) != 0 ||
        (a->rc == FLARE_CHUNKED_DONE &&
         (a->tr_len != b->tr_len || memcmp(a->tr, b->tr, a->tr_len) != 0)))
        fail_msg("%s: rc %d/%d status %d/%d out %zu/%zu", how, a->rc, b->rc, a->status, b->status,
                 a->out_len, b->out_len);
    /* an error may be noticed after a different number of bytes, a result not */
    if (a->rc != FLARE_PARSE_ERROR && a->consumed != b->consumed)
        fail_msg("%s: consumed %zu/%zu", how, a->consumed, b->consumed);
}

/* Decodes whole, split at every point, and byte by byte; all must agree.
 * Leaves the whole result in r_whole. */
static void check_splits(const char *in, size_t len, uint64_t max_body)
{
    decode(in, len, max_body, &r_whole);
    for (size_t cut = 1; cut < len; cut++) {
        decode_cuts(in, len, &cut, 1, max_body, &r_split);
        char how[64];
        snprintf(how, sizeof(how), "split at %zu", cut);
        assert_same(&r_whole, &r_split, how);
    }
    if (len > 1) {
        size_t *cuts = malloc((len - 1) * sizeof(*cuts));
        for (size_t i = 0; i < len - 1; i++)
            cuts[i] = i + 1;
        decode_cuts(in, len, cuts, len - 1, max_body, &r_split);
        free(cuts);
        assert_same(&r_whole, &r_split, "byte by byte");
    }
}

static void ok_body(const char *in, const char *want)
{
    size_t len = strlen(in);
    check_splits(in, len, BIG);
    if (r_whole.rc != FLARE_CHUNKED_DONE)
        fail_msg("\"%s\": rc %d status %d", in, r_whole.rc, r_whole.status);
    assert_int_equal(r_whole.consumed, len);
    assert_int_equal(r_whole.out_len, strlen(want));
    assert_memory_equal(r_whole.out, want, r_whole.out_len);
}

static void bad_lim(const char *in, size_t len, uint64_t max_body, int status)
{
    check_splits(in, len, max_body);
    if (r_whole.rc != FLARE_PARSE_ERROR || r_whole.status != status)
        fail_msg("\"%.*s\": rc %d status %d, want %d", (int)(len < 60 ? len : 60), in, r_whole.rc,
                 r_whole.status, status);
}

static void bad(const char *in, int status)
{
    bad_lim(in, strlen(in), BIG, status);
}

static void test_basic(void **state)
{
    (void)state;
    ok_body("5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", "hello world");
    ok_body("0\r\n\r\n", "");
    ok_body("1\r\nx\r\n0\r\n\r\n", "x");
    ok_body("a\r\n0123456789\r\nA\r\nabcdefghij\r\n0\r\n\r\n", "0123456789abcdefghij");
    ok_body("0005\r\nhello\r\n000\r\n\r\n", "hello");
    ok_body("00000000000000000000001\r\nz\r\n0\r\n\r\n", "z"); /* leading zeros */
    ok_body("3\r\n\r\n\r\r\n0\r\n\r\n", "\r\n\r");             /* data is data */
}

static void test_big_chunk(void **state)
{
    (void)state;
    static char in[20000], want[16384];
    for (size_t i = 0; i < sizeof(want); i++)
        want[i] = (char)('a' + i % 26);
    int n = snprintf(in, sizeof(in), "4000\r\n");
    memcpy(in + n, want, sizeof(want));
    n += (int)sizeof(want);
    n += snprintf(in + n, sizeof(in) - (size_t)n,
                  "\r\n1f\r\n0123456789abcdefghijklmnopqrstu\r\n0\r\n\r\n");
    decode(in, (size_t)n, BIG, &r_whole);
    assert_int_equal(r_whole.rc, FLARE_CHUNKED_DONE);
    assert_int_equal(r_whole.out_len, sizeof(want) + 31);
    assert_memory_equal(r_whole.out, want, sizeof(want));
    assert_memory_equal(r_whole.out + sizeof(want), "0123456789abcdefghijklmnopqrstu", 31);
    /* in pieces of 1000 bytes */
    size_t cuts[32], ncuts = 0;
    for (size_t at = 1000; at < (size_t)n; at += 1000)
        cuts[ncuts++] = at;
    decode_cuts(in, (size_t)n, cuts, ncuts, BIG, &r_split);
    assert_same(&r_whole, &r_split, "pieces");
}

/* RFC 9112 7.1.1: chunk-ext = *( BWS ";" BWS chunk-ext-name
 *                                 [ BWS "=" BWS chunk-ext-val ] ),
 * name = token, value = token / quoted-string; on the last chunk too. */
static void test_extensions(void **state)
{
    (void)state;
    ok_body("5;foo=bar\r\nhello\r\n0;last\r\n\r\n", "hello");
    ok_body("5;a=\"x y\";b;c=1\r\nhello\r\n0\r\n\r\n", "hello");
    ok_body("5;!#$%&'*+-.^_`|~09azAZ=!#$%&'*+-.^_`|~09azAZ\r\nhello\r\n0\r\n\r\n", "hello");
    /* BWS: before ';', after ';', around '=' */
    ok_body("5 ;a\r\nhello\r\n0\r\n\r\n", "hello");
    ok_body("5\t;a\r\nhello\r\n0\r\n\r\n", "hello");
    ok_body("5 \t ;a\r\nhello\r\n0\r\n\r\n", "hello");
    ok_body("5; a\r\nhello\r\n0\r\n\r\n", "hello");
    ok_body("5;\t a\r\nhello\r\n0\r\n\r\n", "hello");
    ok_body("5;name\t=\tvalue\r\nhello\r\n0\r\n\r\n", "hello");
    ok_body("5;a = 1 ; b = \"2\" ;c\r\nhello\r\n0\r\n\r\n", "hello");
    ok_body("5;a ;b\r\nhello\r\n0\r\n\r\n", "hello");
    ok_body("5;a=\"q\";b\r\nhello\r\n0\r\n\r\n", "hello");
    ok_body("5;a=\"q\"\t;b\r\nhello\r\n0\r\n\r\n", "hello");
    /* quoted-string: qdtext, quoted-pair, separators and obs-text inside */
    ok_body("5;a=\"\"\r\nhello\r\n0\r\n\r\n", "hello");
    ok_body("5;a=\"\\\"\"\r\nhello\r\n0\r\n\r\n", "hello");
    ok_body("5;a=\"\\\\\"\r\nhello\r\n0\r\n\r\n", "hello");
    ok_body("5;a=\"x\\\ty\\ z\\\"\\a\"\r\nhello\r\n0\r\n\r\n", "hello");
    ok_body("5;a=\"; = \t,()<>@:/[]?{}!\"\r\nhello\r\n0\r\n\r\n", "hello");
    ok_body("5;a=\"caf\xc3\xa9\\\xff\"\r\nhello\r\n0\r\n\r\n", "hello");
    /* several extensions per chunk, on the last chunk (with trailers) */
    ok_body("3;a;b;c=1;d=\"2\"\r\nabc\r\n2;x=y\r\nde\r\n0;a=1;b=\"2\";c\r\n\r\n", "abcde");
    ok_body("0;a=\"\\\"\";b\r\nX: y\r\n\r\n", "");

    /* empty or missing names and values */
    bad("5;\r\nhello\r\n0\r\n\r\n", 400);
    bad("5; \r\nhello\r\n0\r\n\r\n", 400);
    bad("5;;a\r\nhello\r\n0\r\n\r\n", 400);
    bad("5;a;\r\nhello\r\n0\r\n\r\n", 400);
    bad("5;=v\r\nhello\r\n0\r\n\r\n", 400);
    bad("5;a=\r\nhello\r\n0\r\n\r\n", 400);
    bad("5;a= \r\nhello\r\n0\r\n\r\n", 400);
    bad("5;a=;b\r\nhello\r\n0\r\n\r\n", 400);
    /* BWS is only ever followed by ';' or '=': not by the CRLF */
    bad("5 \r\nhello\r\n0\r\n\r\n", 400);
    bad("5;a \r\nhello\r\n0\r\n\r\n", 400);
    bad("5;a=1 \r\nhello\r\n0\r\n\r\n", 400);
    bad("5;a=\"q\" \r\nhello\r\n0\r\n\r\n", 400);
    bad("0;a \r\n\r\n", 400);
    /* what a token or a quoted-string cannot hold or be followed by */
    bad("5;a b\r\nhello\r\n0\r\n\r\n", 400);
    bad("5;a=b c\r\nhello\r\n0\r\n\r\n", 400);
    bad("5;a=b=c\r\nhello\r\n0\r\n\r\n", 400);
    bad("5;a,b\r\nhello\r\n0\r\n\r\n", 400);
    bad("5;a=(b)\r\nhello\r\n0\r\n\r\n", 400);
    bad("5;a=b\"c\"\r\nhello\r\n0\r\n\r\n", 400);
    bad("5;a=\"x\"y\r\nhello\r\n0\r\n\r\n", 400);
    bad("5;a=\"x\"\"y\"\r\nhello\r\n0\r\n\r\n", 400);
    bad("5;\xc3\xa9\r\nhello\r\n0\r\n\r\n", 400);
    bad("5;a=\xc3\xa9\r\nhello\r\n0\r\n\r\n", 400);
    bad("5;a\x01\r\nhello\r\n0\r\n\r\n", 400);
    bad("5;a\x7f\r\nhello\r\n0\r\n\r\n", 400);
    /* an unterminated quoted-string never ends the line */
    bad("5;a=\"x\r\nhello\r\n0\r\n\r\n", 400);
    bad("5;a=\"x\ny\"\r\nhello\r\n0\r\n\r\n", 400);
    bad("5;a=\"x\\\r\nhello\"\r\n0\r\n\r\n", 400);
    bad("5;a=\"\\\n\"\r\nhello\r\n0\r\n\r\n", 400);
    bad("5;a=\"\x01\"\r\nhello\r\n0\r\n\r\n", 400);
    bad("5;a=\"\x7f\"\r\nhello\r\n0\r\n\r\n", 400);
    bad("5;a=\"\\\x7f\"\r\nhello\r\n0\r\n\r\n", 400);
    /* CR and LF */
    bad("5;a\nhello\r\n0\r\n\r\n", 400);
    bad("5;a\rhello\r\n0\r\n\r\n", 400);
    bad("5;a=\"q\"\nhello\r\n0\r\n\r\n", 400);
    bad("5;a=1\rhello\r\n0\r\n\r\n", 400);
}

static void ok_body_n(const char *in, size_t len, const char *want)
{
    check_splits(in, len, BIG);
    if (r_whole.rc != FLARE_CHUNKED_DONE || r_whole.consumed != len)
        fail_msg("\"%.*s\": rc %d status %d", (int)len, in, r_whole.rc, r_whole.status);
    assert_int_equal(r_whole.out_len, strlen(want));
    assert_memory_equal(r_whole.out, want, r_whole.out_len);
}

/* Every byte in every place of an extension: accepted exactly where the
 * grammar has room for it. */
static void test_extension_bytes(void **state)
{
    (void)state;
    static const char extra[] = "!#$%&'*+-.^_`|~";
    static const struct {
        const char *fmt; /* 'Z' is replaced by the byte */
        int want;        /* 0 tchar, 1 qdtext, 2 quoted-pair (HTAB / SP / VCHAR / obs-text) */
    } places[] = {
        { "5;Z\r\nhello\r\n0\r\n\r\n", 0 },
        { "5;aZ\r\nhello\r\n0\r\n\r\n", 0 },
        { "5;a=Z\r\nhello\r\n0\r\n\r\n", 0 },
        { "5;a=xZ\r\nhello\r\n0\r\n\r\n", 0 },
        { "0;aZ\r\n\r\n", 0 },
        { "0;a=\"Z\"\r\n\r\n", 1 },
        { "5;a=\"Z\"\r\nhello\r\n0\r\n\r\n", 1 },
        { "5;a=\"x yZ\"\r\nhello\r\n0\r\n\r\n", 1 },
        { "5;a=\"\\Z\"\r\nhello\r\n0\r\n\r\n", 2 },
    };
    for (size_t i = 0; i < sizeof(places) / sizeof(places[0]); i++) {
        for (int c = 0; c < 256; c++) {
            bool tchar = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
                         (c >= 'A' && c <= 'Z') ||
                         (c != 0 && memchr(extra, c, sizeof(extra) - 1) != NULL);
            bool text = c == '\t' || (c >= 0x20 && c != 0x7f);
            bool want = places[i].want == 0   ? tchar
                        : places[i].want == 1 ? text && c != '"' && c != '\\'
                                              : text;
            char in[64];
            size_t len = strlen(places[i].fmt);
            memcpy(in, places[i].fmt, len);
            *(char *)memchr(in, 'Z', len) = (char)c;
            const char *body = places[i].fmt[0] == '5' ? "hello" : "";
            if (want) {
                ok_body_n(in, len, body);
            } else {
                check_splits(in, len, BIG);
                if (r_whole.rc != FLARE_PARSE_ERROR || r_whole.status != 400)
                    fail_msg("byte 0x%02x in \"%s\": rc %d, want 400", c, places[i].fmt,
                             r_whole.rc);
            }
        }
    }
}

static void test_size_line_limit(void **state)
{
    (void)state;
    static char in[8192];
    /* "5;" + ext: exactly 4096 bytes of size line is fine, 4097 is not */
    for (size_t ext = 4094; ext <= 4095; ext++) {
        size_t n = 0;
        in[n++] = '5';
        in[n++] = ';';
        memset(in + n, 'e', ext);
        n += ext;
        memcpy(in + n, "\r\nhello\r\n0\r\n\r\n", 14);
        n += 14;
        decode(in, n, BIG, &r_whole);
        if (ext == 4094) {
            assert_int_equal(r_whole.rc, FLARE_CHUNKED_DONE);
            assert_int_equal(r_whole.out_len, 5);
        } else {
            assert_int_equal(r_whole.rc, FLARE_PARSE_ERROR);
            assert_int_equal(r_whole.status, 400);
        }
    }
    /* BWS and quoted-strings count as well: 4096 bytes of
     * `5 ; a = "..."` are fine, 4097 are not */
    for (size_t q = 4086; q <= 4087; q++) {
        size_t n = 0;
        memcpy(in, "5 ; a = \"", 9);
        n = 9;
        memset(in + n, 'q', q);
        n += q;
        memcpy(in + n, "\"\r\nhello\r\n0\r\n\r\n", 15);
        n += 15;
        decode(in, n, BIG, &r_whole);
        if (q == 4086) {
            assert_int_equal(r_whole.rc, FLARE_CHUNKED_DONE);
            assert_int_equal(r_whole.consumed, n);
        } else {
            assert_int_equal(r_whole.rc, FLARE_PARSE_ERROR);
            assert_int_equal(r_whole.status, 400);
        }
    }
    /* many extensions, up to the same bound */
    for (size_t k = 2047; k <= 2048; k++) {
        size_t n = 0;
        in[n++] = '0';
        for (size_t i = 0; i < k; i++) {
            in[n++] = ';';
            in[n++] = 'x';
        }
        memcpy(in + n, "\r\n\r\n", 4);
        n += 4;
        decode(in, n, BIG, &r_whole);
        assert_int_equal(r_whole.rc, k == 2047 ? FLARE_CHUNKED_DONE : FLARE_PARSE_ERROR);
    }
    /* leading zeros count too */
    memset(in, '0', 5000);
    memcpy(in + 5000, "\r\n\r\n", 4);
    decode(in, 5004, BIG, &r_whole);
    assert_int_equal(r_whole.rc, FLARE_PARSE_ERROR);
    assert_int_equal(r_whole.status, 400);
}

static void test_trailers(void **state)
{
    (void)state;
    ok_body("5\r\nhello\r\n0\r\nX-Checksum: abc\r\nY:z\r\n\r\n", "hello");
    ok_body("0\r\nExpires: Wed, 21 Oct 2015 07:28:00 GMT\r\n\r\n", "");
    ok_body("0\r\nX: caf\xc3\xa9\t\r\n\r\n", "");
    bad("0\r\nX\r\n\r\n", 400);
    bad("0\r\n: v\r\n\r\n", 400);
    bad("0\r\nX : v\r\n\r\n", 400);
    bad("0\r\n X: v\r\n\r\n", 400);
    bad("0\r\nX: a\r\n b\r\n\r\n", 400);
    bad("0\r\nX: a\nb\r\n\r\n", 400);
    bad("0\r\nX: a\rb\r\n\r\n", 400);
    bad("0\r\nX: a\x01\r\n\r\n", 400);
    bad("0\r\n\n", 400);
    bad("0\r\n\r\r", 400);
    bad("0\r\n\rX", 400);
    bad("0\r\nX: a\r\n\n", 400);
}

/* The trailer section a caller keeps (trailer_len), whatever the split,
 * and its fields read back (flare__chunked_trailer_next). */
static void trailer_fields(const char *chunks, const char *sec, const char *const *want)
{
    char in[512];
    snprintf(in, sizeof(in), "%s%s", chunks, sec);
    check_splits(in, strlen(in), BIG);
    assert_int_equal(r_whole.rc, FLARE_CHUNKED_DONE);
    assert_int_equal(r_whole.tr_len, strlen(sec));
    assert_memory_equal(r_whole.tr, sec, r_whole.tr_len);
    size_t pos = 0, i = 0;
    flare_str_t name, value;
    while (flare__chunked_trailer_next(r_whole.tr, r_whole.tr_len, &pos, &name, &value)) {
        assert_non_null(want[i]);
        assert_int_equal(name.len, strlen(want[i]));
        assert_memory_equal(name.ptr, want[i], name.len);
        assert_int_equal(value.len, strlen(want[i + 1]));
        assert_memory_equal(value.ptr, want[i + 1], value.len);
        i += 2;
    }
    assert_null(want[i]);
    assert_int_equal(pos, r_whole.tr_len - 2); /* stopped at the final CRLF */
}

static void test_trailer_fields(void **state)
{
    (void)state;
    trailer_fields("5\r\nhello\r\n0\r\n", "\r\n", (const char *const[]){ NULL });
    trailer_fields("5\r\nhello\r\n0\r\n", "X-Checksum: abc\r\nY:z\r\n\r\n",
                   (const char *const[]){ "X-Checksum", "abc", "Y", "z", NULL });
    trailer_fields("0;ext=1\r\n", "Cookie:  a=1 \t\r\nEmpty:\r\nSp: \t \r\n\r\n",
                   (const char *const[]){ "Cookie", "a=1", "Empty", "", "Sp", "", NULL });
    trailer_fields("3\r\nabc\r\n0\r\n", "X: a: b\r\nX: caf\xc3\xa9\r\n\r\n",
                   (const char *const[]){ "X", "a: b", "X", "caf\xc3\xa9", NULL });
    /* an empty section read back: nothing */
    size_t pos = 0;
    flare_str_t n, v;
    assert_false(flare__chunked_trailer_next("\r\n", 2, &pos, &n, &v));
    assert_false(flare__chunked_trailer_next("", 0, &pos, &n, &v));
}

static void test_trailer_limit(void **state)
{
    (void)state;
    static char in[20000];
    /* the trailer section (with its final CRLF) may be 8192 bytes */
    for (size_t total = 8192; total <= 8193; total++) {
        size_t n = 0;
        memcpy(in, "0\r\n", 3);
        n = 3;
        size_t value = total - 2 /* final CRLF */ - 4 /* "X: " .. CRLF */ - 1;
        memcpy(in + n, "X: ", 3);
        n += 3;
        memset(in + n, 'v', value);
        n += value;
        memcpy(in + n, "\r\n\r\n", 4);
        n += 4;
        decode(in, n, BIG, &r_whole);
        if (total == 8192) {
            assert_int_equal(r_whole.rc, FLARE_CHUNKED_DONE);
            assert_int_equal(r_whole.consumed, n);
        } else {
            assert_int_equal(r_whole.rc, FLARE_PARSE_ERROR);
            assert_int_equal(r_whole.status, 431);
        }
    }
}

static void test_bad_sizes(void **state)
{
    (void)state;
    bad("g\r\n", 400);
    bad("\r\n", 400);
    bad(" 5\r\nhello\r\n0\r\n\r\n", 400);
    bad("5 \r\nhello\r\n0\r\n\r\n", 400);
    bad("-5\r\nhello\r\n0\r\n\r\n", 400);
    bad("+5\r\nhello\r\n0\r\n\r\n", 400);
    bad("0x5\r\nhello\r\n0\r\n\r\n", 400);
    bad("5\nhello\r\n0\r\n\r\n", 400);
    bad("5\rhello\r\n0\r\n\r\n", 400);
    bad(";5\r\nhello\r\n0\r\n\r\n", 400);
    bad("\xef\xbc\x95\r\nhello\r\n0\r\n\r\n", 400);
}

static void test_overflow(void **state)
{
    (void)state;
    /* 16 hex digits fit in 64 bits: refused only by max_body */
    bad_lim("FFFFFFFFFFFFFFFF\r\n", 18, 1 << 20, 413);
    bad_lim("8000000000000000\r\n", 18, INT64_MAX, 413);
    /* the 17th significant digit overflows whatever the limit */
    bad_lim("10000000000000000\r\n", 19, BIG, 400);
    bad_lim("FFFFFFFFFFFFFFFFF\r\n", 19, BIG, 400);
    bad_lim("FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF", 43, 1 << 20, 400);
    /* without a limit the largest size is accepted: waiting for its data */
    check_splits("FFFFFFFFFFFFFFFF\r\n", 18, BIG);
    assert_int_equal(r_whole.rc, FLARE_PARSE_PARTIAL);
    assert_int_equal(r_whole.consumed, 18);
}

static void test_max_body(void **state)
{
    (void)state;
    const char *in = "5\r\nhello\r\n0\r\n\r\n";
    check_splits(in, strlen(in), 5);
    assert_int_equal(r_whole.rc, FLARE_CHUNKED_DONE);
    bad_lim(in, strlen(in), 4, 413);
    assert_int_equal(r_whole.out_len, 0); /* refused before any data */
    const char *two = "3\r\nabc\r\n3\r\ndef\r\n0\r\n\r\n";
    check_splits(two, strlen(two), 6);
    assert_int_equal(r_whole.rc, FLARE_CHUNKED_DONE);
    bad_lim(two, strlen(two), 5, 413);
    assert_int_equal(r_whole.out_len, 3);
    check_splits("0\r\n\r\n", 5, 0);
    assert_int_equal(r_whole.rc, FLARE_CHUNKED_DONE);
    bad_lim("1\r\nx\r\n0\r\n\r\n", 11, 0, 413);
}

static void test_missing_crlf(void **state)
{
    (void)state;
    bad("5\r\nhelloX\r\n0\r\n\r\n", 400);
    bad("5\r\nhello\n0\r\n\r\n", 400);
    bad("5\r\nhello\r\r0\r\n\r\n", 400);
    bad("5\r\nhello0\r\n\r\n", 400);
    bad("5\r\nhello world\r\n0\r\n\r\n", 400);
}

static void test_leftover(void **state)
{
    (void)state;
    const char *in = "4\r\nbody\r\n0\r\n\r\nGET /next HTTP/1.1\r\n";
    size_t body = strlen("4\r\nbody\r\n0\r\n\r\n");
    check_splits(in, strlen(in), BIG);
    assert_int_equal(r_whole.rc, FLARE_CHUNKED_DONE);
    assert_int_equal(r_whole.consumed, body);
    assert_int_equal(r_whole.out_len, 4);

    /* after DONE: DONE again, nothing consumed */
    flare_chunked_t c;
    flare__chunked_init(&c);
    size_t used;
    flare_str_t data;
    int status = 0;
    const char *error = NULL;
    int rc = flare__chunked_decode(&c, "0\r\n\r\nXYZ", 8, BIG, &used, &data, &status, &error);
    assert_int_equal(rc, FLARE_CHUNKED_DONE);
    assert_int_equal(used, 5);
    rc = flare__chunked_decode(&c, "XYZ", 3, BIG, &used, &data, &status, &error);
    assert_int_equal(rc, FLARE_CHUNKED_DONE);
    assert_int_equal(used, 0);
}

static void test_sticky_error_and_empty(void **state)
{
    (void)state;
    flare_chunked_t c;
    flare__chunked_init(&c);
    size_t used = 99;
    flare_str_t data;
    int status = 0;
    const char *error = NULL;
    assert_int_equal(flare__chunked_decode(&c, "", 0, BIG, &used, &data, &status, &error),
                     FLARE_PARSE_PARTIAL);
    assert_int_equal(used, 0);
    assert_int_equal(flare__chunked_decode(&c, "z", 1, BIG, &used, &data, &status, &error),
                     FLARE_PARSE_ERROR);
    assert_int_equal(status, 400);
    assert_non_null(error);
    status = 0;
    assert_int_equal(flare__chunked_decode(&c, "5\r\n", 3, BIG, &used, &data, &status, &error),
                     FLARE_PARSE_ERROR);
    assert_int_equal(status, 400);
}

/* The intended use: data views moved down in place over the framing. */
static void test_in_place(void **state)
{
    (void)state;
    char in[] = "3;x=1\r\nabc\r\n10\r\n0123456789abcdef\r\n1\r\nZ\r\n0\r\nT: v\r\n\r\nrest";
    size_t len = sizeof(in) - 1, off = 0, w = 0;
    flare_chunked_t c;
    flare__chunked_init(&c);
    for (;;) {
        size_t used;
        flare_str_t data;
        int status;
        const char *error;
        int rc = flare__chunked_decode(&c, in + off, len - off, BIG, &used, &data, &status, &error);
        if (rc == FLARE_CHUNKED_DATA) {
            memmove(in + w, data.ptr, data.len);
            w += data.len;
            off += used;
            continue;
        }
        assert_int_equal(rc, FLARE_CHUNKED_DONE);
        off += used;
        break;
    }
    assert_int_equal(w, 20);
    assert_memory_equal(in, "abc0123456789abcdefZ", 20);
    assert_string_equal(in + off, "rest");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basic),           cmocka_unit_test(test_big_chunk),
        cmocka_unit_test(test_extensions),      cmocka_unit_test(test_extension_bytes),
        cmocka_unit_test(test_size_line_limit), cmocka_unit_test(test_trailers),
        cmocka_unit_test(test_trailer_fields),  cmocka_unit_test(test_trailer_limit),
        cmocka_unit_test(test_bad_sizes),       cmocka_unit_test(test_overflow),
        cmocka_unit_test(test_max_body),        cmocka_unit_test(test_missing_crlf),
        cmocka_unit_test(test_leftover),        cmocka_unit_test(test_sticky_error_and_empty),
        cmocka_unit_test(test_in_place),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
