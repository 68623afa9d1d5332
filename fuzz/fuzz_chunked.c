/* libFuzzer target: the chunked decoder.
 *
 * The input is a raw chunked body (and whatever follows it). It is decoded
 * whole, split in two at every point (a sample for long inputs) and byte by
 * byte, under two body limits; all must give the same result, decoded bytes
 * and (unless it is an error, which may be noticed at different bytes)
 * consumed count. Also checked (abort() on violation): consumed <= len,
 * PARTIAL consumes everything, DATA views are non-empty and inside the
 * input, the decoded total never passes max_body. Each piece is copied into
 * a buffer of its exact size so that ASan sees any read past the end.
 *
 * And the decision itself is checked against a reference written
 * independently from the decoder: RFC 9112 section 7.1's grammar read
 * top-down over the whole input (ref_decode below), with the decoder's
 * documented bounds (4 KiB size line, 8 KiB trailer section, max_body). Both
 * must agree on done / error (with the same status) / needs more, on the
 * decoded bytes, and on where the body ends. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http1/parser.h"

#define CHECK(x)     \
    do {             \
        if (!(x))    \
            abort(); \
    } while (0)

#define ALL_SPLITS 512

typedef struct result {
    int rc;
    int status;
    size_t consumed;
    size_t out_len;
    uint8_t *out; /* len + 1 bytes: the output never exceeds the input */
} result_t;

/* Feeds data cut every `every` bytes (0: whole), or at `cut` if nonzero. */
static void decode(const uint8_t *data, size_t len, size_t cut, size_t every, uint64_t max_body,
                   result_t *r)
{
    flare_chunked_t c;
    flare__chunked_init(&c);
    r->rc = FLARE_PARSE_PARTIAL;
    r->status = 0;
    r->consumed = 0;
    r->out_len = 0;

    size_t start = 0;
    while (start < len || (len == 0 && start == 0)) {
        size_t stop = len;
        if (every != 0 && start + every < len)
            stop = start + every;
        else if (cut != 0 && start < cut)
            stop = cut;
        size_t n = stop - start;
        char *piece = malloc(n != 0 ? n : 1);
        CHECK(piece != NULL);
        memcpy(piece, data + start, n);
        size_t off = 0;
        for (;;) {
            size_t used = (size_t)-1;
            flare_str_t view = { NULL, 0 };
            int status = 0;
            const char *error = NULL;
            int rc = flare__chunked_decode(&c, piece + off, n - off, max_body, &used, &view,
                                           &status, &error);
            CHECK(used <= n - off);
            r->consumed += used;
            if (rc == FLARE_CHUNKED_DATA) {
                CHECK(view.len > 0 && view.len <= used);
                CHECK(view.ptr >= piece + off && view.ptr + view.len <= piece + off + used);
                CHECK(r->out_len + view.len <= len);
                memcpy(r->out + r->out_len, view.ptr, view.len);
                r->out_len += view.len;
                CHECK(r->out_len <= max_body);
                off += used;
                continue;
            }
            if (rc == FLARE_PARSE_PARTIAL) {
                CHECK(used == n - off);
                break;
            }
            free(piece);
            r->rc = rc;
            if (rc == FLARE_PARSE_ERROR) {
                CHECK(error != NULL && error[0] != '\0');
                CHECK(status == 400 || status == 413 || status == 431);
                r->status = status;
            } else {
                CHECK(rc == FLARE_CHUNKED_DONE);
                /* DONE stays DONE */
                size_t again = 1;
                CHECK(flare__chunked_decode(&c, "x", 1, max_body, &again, &view, &status, &error) ==
                          FLARE_CHUNKED_DONE &&
                      again == 0);
            }
            return;
        }
        free(piece);
        start = stop;
        if (len == 0)
            break;
    }
}

static void same(const result_t *a, const result_t *b)
{
    CHECK(a->rc == b->rc && a->status == b->status);
    CHECK(a->out_len == b->out_len && memcmp(a->out, b->out, a->out_len) == 0);
    if (a->rc != FLARE_PARSE_ERROR)
        CHECK(a->consumed == b->consumed);
}

/* ---- the reference ------------------------------------------------------ */

#define REF_MAX_SIZE_LINE 4096 /* bytes of a size line before its CR */
#define REF_MAX_TRAILER   8192 /* bytes of the trailer section, final CRLF included */

enum { REF_OK, REF_MORE, REF_BAD };

typedef struct ref {
    const uint8_t *in;
    size_t len, i;
    size_t line;     /* start of the size line being read */
    size_t trailer;  /* start of the trailer section */
    bool in_line;    /* reading a size line (its bytes count) */
    bool in_trailer; /* reading the trailer section (its bytes count) */
    uint64_t total;
    uint8_t *out;
    size_t out_len;
    int status;
} ref_t;

#define TRY(x)             \
    do {                   \
        int rc_ = (x);     \
        if (rc_ != REF_OK) \
            return rc_;    \
    } while (0)

static bool ref_tchar(int c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

static int ref_hex(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* HTAB / SP / VCHAR / obs-text */
static bool ref_text(int c)
{
    return c == '\t' || (c >= 0x20 && c <= 0x7e) || c >= 0x80;
}

static int ref_bad(ref_t *r, int status)
{
    r->status = status;
    return REF_BAD;
}

/* The next byte, without taking it. A trailer section is refused (431) at
 * its first byte past the bound, whatever that byte is. */
static int ref_peek(ref_t *r, int *c)
{
    if (r->i == r->len)
        return REF_MORE;
    if (r->in_trailer && r->i - r->trailer >= REF_MAX_TRAILER)
        return ref_bad(r, 431);
    *c = r->in[r->i];
    return REF_OK;
}

/* Takes the byte peeked. A size line is refused at its first byte past the
 * bound (the CR that ends it is not counted). */
static int ref_take(ref_t *r)
{
    if (r->in_line && r->in[r->i] != '\r' && r->i - r->line >= REF_MAX_SIZE_LINE)
        return ref_bad(r, 400);
    r->i++;
    return REF_OK;
}

static int ref_expect(ref_t *r, int want)
{
    int c;
    TRY(ref_peek(r, &c));
    if (c != want)
        return ref_bad(r, 400);
    return ref_take(r);
}

/* OWS / BWS = *( SP / HTAB ); *seen tells whether there was any */
static int ref_ows(ref_t *r, bool *seen)
{
    for (;;) {
        int c;
        TRY(ref_peek(r, &c));
        if (c != ' ' && c != '\t')
            return REF_OK;
        TRY(ref_take(r));
        *seen = true;
    }
}

/* token = 1*tchar */
static int ref_token(ref_t *r)
{
    int c;
    TRY(ref_peek(r, &c));
    if (!ref_tchar(c))
        return ref_bad(r, 400);
    while (ref_tchar(c)) {
        TRY(ref_take(r));
        TRY(ref_peek(r, &c));
    }
    return REF_OK;
}

/* quoted-string = DQUOTE *( qdtext / quoted-pair ) DQUOTE
 * qdtext = HTAB / SP / %x21 / %x23-5B / %x5D-7E / obs-text
 * quoted-pair = "\" ( HTAB / SP / VCHAR / obs-text ) */
static int ref_quoted(ref_t *r)
{
    TRY(ref_expect(r, '"'));
    for (;;) {
        int c;
        TRY(ref_peek(r, &c));
        if (c == '"')
            return ref_take(r);
        if (c == '\\') {
            TRY(ref_take(r));
            TRY(ref_peek(r, &c));
        }
        if (!ref_text(c))
            return ref_bad(r, 400);
        TRY(ref_take(r));
    }
}

/* chunk-ext = *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] )
 * chunk-ext-name = token; chunk-ext-val = token / quoted-string
 * Ends before the CR of the size line; BWS is only ever followed by ";" or
 * "=", so one byte of lookahead decides every step. */
static int ref_chunk_ext(ref_t *r)
{
    bool ws = false;
    for (;;) {
        int c;
        TRY(ref_ows(r, &ws));
        TRY(ref_peek(r, &c));
        if (c == '\r' && !ws)
            return REF_OK;
        if (c != ';')
            return ref_bad(r, 400);
        TRY(ref_take(r));
        TRY(ref_ows(r, &ws));
        TRY(ref_token(r));
        ws = false;
        TRY(ref_ows(r, &ws));
        TRY(ref_peek(r, &c));
        if (c == '=') {
            TRY(ref_take(r));
            TRY(ref_ows(r, &ws));
            TRY(ref_peek(r, &c));
            TRY(c == '"' ? ref_quoted(r) : ref_token(r));
            ws = false;
        }
    }
}

/* chunk-size [ chunk-ext ] CRLF: *size */
static int ref_size_line(ref_t *r, uint64_t max_body, uint64_t *size)
{
    int c, d;
    r->line = r->i;
    r->in_line = true;
    TRY(ref_peek(r, &c));
    if (ref_hex(c) < 0)
        return ref_bad(r, 400);
    *size = 0;
    while ((d = ref_hex(c)) >= 0) {
        if (*size > UINT64_MAX >> 4)
            return ref_bad(r, 400); /* more than 64 bits */
        *size = *size << 4 | (uint64_t)d;
        TRY(ref_take(r));
        TRY(ref_peek(r, &c));
    }
    /* the size is known once a byte that may follow it is seen */
    if (c != '\r' && c != ';' && c != ' ' && c != '\t')
        return ref_bad(r, 400);
    if (*size > max_body - r->total)
        return ref_bad(r, 413);
    r->total += *size;
    TRY(ref_chunk_ext(r));
    TRY(ref_expect(r, '\r'));
    r->in_line = false;
    return ref_expect(r, '\n');
}

/* trailer-section = *( field-line CRLF ) CRLF, no obs-fold:
 * field-line = field-name ":" OWS field-value OWS, and OWS field-value OWS is
 * any run of HTAB / SP / VCHAR / obs-text */
static int ref_trailers(ref_t *r)
{
    r->trailer = r->i;
    r->in_trailer = true;
    for (;;) {
        int c;
        TRY(ref_peek(r, &c));
        if (c == '\r')
            break;
        TRY(ref_token(r));
        TRY(ref_expect(r, ':'));
        for (;;) {
            TRY(ref_peek(r, &c));
            if (c == '\r')
                break;
            if (!ref_text(c))
                return ref_bad(r, 400);
            TRY(ref_take(r));
        }
        TRY(ref_expect(r, '\r'));
        TRY(ref_expect(r, '\n'));
    }
    TRY(ref_expect(r, '\r'));
    return ref_expect(r, '\n');
}

/* chunked-body = *chunk last-chunk trailer-section CRLF
 * chunk = chunk-size [ chunk-ext ] CRLF chunk-data CRLF
 * last-chunk = 1*("0") [ chunk-ext ] CRLF */
static int ref_body(ref_t *r, uint64_t max_body)
{
    for (;;) {
        uint64_t size;
        TRY(ref_size_line(r, max_body, &size));
        if (size == 0)
            return ref_trailers(r);
        size_t n = r->len - r->i < size ? r->len - r->i : (size_t)size;
        memcpy(r->out + r->out_len, r->in + r->i, n);
        r->out_len += n;
        r->i += n;
        if (n < size)
            return REF_MORE;
        TRY(ref_expect(r, '\r'));
        TRY(ref_expect(r, '\n'));
    }
}

/* The reference's result in the decoder's terms. */
static void ref_decode(const uint8_t *data, size_t len, uint64_t max_body, result_t *res)
{
    ref_t r = { .in = data, .len = len, .out = res->out };
    int rc = ref_body(&r, max_body);
    res->out_len = r.out_len;
    res->status = 0;
    if (rc == REF_OK) {
        res->rc = FLARE_CHUNKED_DONE;
        res->consumed = r.i;
    } else if (rc == REF_MORE) {
        res->rc = FLARE_PARSE_PARTIAL;
        res->consumed = len;
    } else {
        res->rc = FLARE_PARSE_ERROR;
        res->status = r.status;
        res->consumed = 0; /* not compared */
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint64_t max_bodies[] = { UINT64_MAX, 100 };
    result_t whole, other, ref;
    whole.out = malloc(size + 1);
    other.out = malloc(size + 1);
    ref.out = malloc(size + 1);
    CHECK(whole.out != NULL && other.out != NULL && ref.out != NULL);

    for (size_t m = 0; m < sizeof(max_bodies) / sizeof(max_bodies[0]); m++) {
        decode(data, size, 0, 0, max_bodies[m], &whole);
        if (whole.rc == FLARE_CHUNKED_DONE)
            CHECK(whole.consumed <= size);
        else if (whole.rc == FLARE_PARSE_PARTIAL)
            CHECK(whole.consumed == size);
        ref_decode(data, size, max_bodies[m], &ref);
        same(&whole, &ref);

        decode(data, size, 0, 1, max_bodies[m], &other);
        same(&whole, &other);
        decode(data, size, 0, 7, max_bodies[m], &other);
        same(&whole, &other);
        size_t step = size <= ALL_SPLITS ? 1 : size / 127 + 1;
        for (size_t cut = 1; cut < size; cut += step) {
            decode(data, size, cut, 0, max_bodies[m], &other);
            same(&whole, &other);
        }
    }
    free(whole.out);
    free(other.out);
    free(ref.out);
    return 0;
}
