/* Chunked transfer-coding decoder (RFC 9112 section 7.1).
 *
 * A byte-at-a-time state machine for the framing (size lines, CRLFs,
 * trailers: a few bytes per chunk), and one bulk step for the data, which is
 * handed back as a view into the input without being copied. Every state
 * transition depends on one byte only, so input split anywhere decodes the
 * same (fuzz/fuzz_chunked.c checks every split point and byte-by-byte). */
#include "http1/parser.h"

#include "core/core.h"

/* A size line (hex digits and extensions, without CRLF) longer than this is
 * refused: extensions are ignored, so there is no reason to accept many. */
#define MAX_SIZE_LINE 4096

/* The trailer section (fields and the final CRLF) is discarded; bound it as
 * a header section would be. */
#define MAX_TRAILER 8192

enum {
    S_SIZE_FIRST, /* first hex digit of a chunk-size */
    S_SIZE,       /* more hex digits, ';' or CR */
    S_EXT,        /* chunk-ext, up to CR */
    S_SIZE_LF,    /* LF ending the size line */
    S_DATA,       /* `remaining` bytes of chunk-data */
    S_DATA_CR,    /* CR after chunk-data */
    S_DATA_LF,    /* LF after chunk-data */
    S_TRAILER,    /* start of a trailer line: CR (end) or a field name */
    S_TRAILER_NAME,
    S_TRAILER_VALUE,
    S_TRAILER_LF,
    S_LAST_LF, /* LF of the final CRLF */
    S_DONE,
    S_ERROR,
};

/* HTAB, SP, VCHAR, obs-text: what field values and quoted strings hold. */
static inline bool is_text(unsigned char c)
{
    return c == '\t' || (c >= 0x20 && c != 0x7f);
}

__attribute__((cold, noinline)) static int fail(flare_chunked_t *c, int st, const char *msg,
                                                int *status, const char **error)
{
    c->state = S_ERROR;
    *status = st;
    *error = msg;
    return FLARE_PARSE_ERROR;
}

int flare__chunked_decode(flare_chunked_t *c, const char *in, size_t len, uint64_t max_body,
                          size_t *consumed, flare_str_t *data, int *status, const char **error)
{
    const char *p = in, *end = in + len;

    *consumed = 0;
    if (c->state == S_DONE)
        return FLARE_CHUNKED_DONE;
    if (c->state == S_ERROR)
        return fail(c, 400, "invalid chunked body", status, error);

    for (; p != end; p++) {
        unsigned char ch = (unsigned char)*p;
        int d;

        switch (c->state) {
        case S_DATA: {
            size_t n = (size_t)(end - p);
            if (n > c->remaining)
                n = (size_t)c->remaining;
            c->remaining -= n;
            if (c->remaining == 0)
                c->state = S_DATA_CR;
            data->ptr = p;
            data->len = n;
            *consumed = (size_t)(p - in) + n;
            return FLARE_CHUNKED_DATA;
        }

        case S_SIZE_FIRST:
            d = flare__hexval(ch);
            if (d < 0)
                return fail(c, 400, "invalid chunk size", status, error);
            c->remaining = (uint64_t)d;
            c->line_len = 1;
            c->state = S_SIZE;
            break;

        case S_SIZE:
            d = flare__hexval(ch);
            if (d >= 0) {
                if (c->remaining >> 60)
                    return fail(c, 400, "chunk size too large", status, error);
                c->remaining = c->remaining << 4 | (uint64_t)d;
                if (++c->line_len > MAX_SIZE_LINE)
                    return fail(c, 400, "chunk size line too long", status, error);
                break;
            }
            if (ch != ';' && ch != '\r')
                return fail(c, 400, "invalid chunk size", status, error);
            if (c->remaining > max_body - c->total)
                return fail(c, 413, "request body too large", status, error);
            c->total += c->remaining;
            c->state = ch == ';' ? S_EXT : S_SIZE_LF;
            if (ch == ';' && ++c->line_len > MAX_SIZE_LINE)
                return fail(c, 400, "chunk size line too long", status, error);
            break;

        case S_EXT:
            if (ch == '\r') {
                c->state = S_SIZE_LF;
                break;
            }
            if (!is_text(ch))
                return fail(c, 400,
                            ch == '\n' ? "bare LF in chunk size line" : "invalid chunk extension",
                            status, error);
            if (++c->line_len > MAX_SIZE_LINE)
                return fail(c, 400, "chunk size line too long", status, error);
            break;

        case S_SIZE_LF:
            if (ch != '\n')
                return fail(c, 400, "bare CR in chunk size line", status, error);
            c->state = c->remaining != 0 ? S_DATA : S_TRAILER;
            break;

        case S_DATA_CR:
            if (ch != '\r')
                return fail(c, 400, "missing CRLF after chunk data", status, error);
            c->state = S_DATA_LF;
            break;

        case S_DATA_LF:
            if (ch != '\n')
                return fail(c, 400, "missing CRLF after chunk data", status, error);
            c->state = S_SIZE_FIRST;
            break;

        case S_TRAILER:
        case S_TRAILER_NAME:
        case S_TRAILER_VALUE:
        case S_TRAILER_LF:
        case S_LAST_LF:
            if (++c->trailer_len > MAX_TRAILER)
                return fail(c, 431, "trailer section too large", status, error);
            switch (c->state) {
            case S_TRAILER:
                if (ch == '\r')
                    c->state = S_LAST_LF;
                else if (flare__is_tchar(ch))
                    c->state = S_TRAILER_NAME;
                else
                    return fail(c, 400, "invalid trailer field", status, error);
                break;
            case S_TRAILER_NAME:
                if (ch == ':')
                    c->state = S_TRAILER_VALUE;
                else if (!flare__is_tchar(ch))
                    return fail(c, 400, "invalid trailer field", status, error);
                break;
            case S_TRAILER_VALUE:
                if (ch == '\r')
                    c->state = S_TRAILER_LF;
                else if (!is_text(ch))
                    return fail(c, 400, "invalid trailer field", status, error);
                break;
            case S_TRAILER_LF:
                if (ch != '\n')
                    return fail(c, 400, "bare CR in trailer section", status, error);
                c->state = S_TRAILER;
                break;
            default: /* S_LAST_LF */
                if (ch != '\n')
                    return fail(c, 400, "bare CR in trailer section", status, error);
                c->state = S_DONE;
                *consumed = (size_t)(p + 1 - in);
                return FLARE_CHUNKED_DONE;
            }
            break;

        default:
            return fail(c, 400, "invalid chunked decoder state", status, error);
        }
    }
    *consumed = len;
    return FLARE_PARSE_PARTIAL;
}
