/* Chunked transfer-coding decoder (RFC 9112 section 7.1).
 *
 * A byte-at-a-time state machine for the framing (size lines, CRLFs,
 * trailers: a few bytes per chunk), and one bulk step for the data, which is
 * handed back as a view into the input without being copied. Every state
 * transition depends on one byte only, so input split anywhere decodes the
 * same (fuzz/fuzz_chunked.c checks every split point and byte-by-byte).
 *
 * Chunk extensions follow RFC 9112 7.1.1 exactly, on every chunk and on the
 * last one:
 *     chunk-ext     = *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] )
 *     chunk-ext-name = token
 *     chunk-ext-val  = token / quoted-string
 * They are checked and discarded. Being strict here is what keeps a proxy
 * in front and this server agreeing on where a chunk ends: an extension that
 * one side reads as text and the other as framing (a quoted LF, a bare CR)
 * is the classic way to smuggle a request through. */
#include "http1/parser.h"

#include <string.h>

#include "core/core.h"

/* A size line (hex digits and extensions, without CRLF) longer than this is
 * refused: extensions are ignored, so there is no reason to accept many. */
#define MAX_SIZE_LINE 4096

/* The trailer section (fields and the final CRLF) is checked here and kept
 * by the caller (flare__chunked_trailer_next reads it back); bound it as a
 * header section would be. */
#define MAX_TRAILER 8192

enum {
    S_SIZE_FIRST, /* first hex digit of a chunk-size */
    S_SIZE,       /* more hex digits, BWS, ';' or CR */
    /* chunk-ext, one state per place in its grammar */
    S_EXT_BWS,      /* BWS before ';' (after the size or a value) */
    S_EXT_NAME0,    /* after ';': BWS, then the name's first tchar */
    S_EXT_NAME,     /* in the name: tchar, BWS, '=', ';' or CR */
    S_EXT_NAME_BWS, /* BWS after the name: then '=' or ';' */
    S_EXT_VAL0,     /* after '=': BWS, then a token or a quoted-string */
    S_EXT_TOKEN,    /* in a token value: tchar, BWS, ';' or CR */
    S_EXT_QUOTED,   /* in a quoted-string: qdtext, '\\' or the closing '"' */
    S_EXT_QPAIR,    /* after '\\' in a quoted-string: the escaped byte */
    S_EXT_QEND,     /* after the closing '"': BWS, ';' or CR */
    S_SIZE_LF,      /* LF ending the size line */
    S_DATA,         /* `remaining` bytes of chunk-data */
    S_DATA_CR,      /* CR after chunk-data */
    S_DATA_LF,      /* LF after chunk-data */
    S_TRAILER,      /* start of a trailer line: CR (end) or a field name */
    S_TRAILER_NAME,
    S_TRAILER_VALUE,
    S_TRAILER_LF,
    S_LAST_LF, /* LF of the final CRLF */
    S_DONE,
    S_ERROR,
};

/* HTAB, SP, VCHAR, obs-text: what field values hold, and what a
 * quoted-pair may escape. */
static inline bool is_text(unsigned char c)
{
    return c == '\t' || (c >= 0x20 && c != 0x7f);
}

/* qdtext = HTAB / SP / %x21 / %x23-5B / %x5D-7E / obs-text */
static inline bool is_qdtext(unsigned char c)
{
    return is_text(c) && c != '"' && c != '\\';
}

/* The state after byte ch of a chunk extension in state st (one of the
 * S_EXT_* states): S_SIZE_LF for a CR where the extension may end, S_ERROR
 * for a byte its grammar has no place for. */
static uint8_t ext_next(uint8_t st, unsigned char ch)
{
    bool ows = flare__is_ows((char)ch);
    bool tchar = flare__is_tchar(ch);

    switch (st) {
    case S_EXT_BWS:
        if (ows)
            return S_EXT_BWS;
        break;
    case S_EXT_NAME0:
        if (ows)
            return S_EXT_NAME0;
        return tchar ? S_EXT_NAME : S_ERROR;
    case S_EXT_NAME:
        if (tchar)
            return S_EXT_NAME;
        if (ows)
            return S_EXT_NAME_BWS;
        if (ch == '=')
            return S_EXT_VAL0;
        if (ch == '\r')
            return S_SIZE_LF;
        break;
    case S_EXT_NAME_BWS:
        if (ows)
            return S_EXT_NAME_BWS;
        if (ch == '=')
            return S_EXT_VAL0;
        break;
    case S_EXT_VAL0:
        if (ows)
            return S_EXT_VAL0;
        if (tchar)
            return S_EXT_TOKEN;
        return ch == '"' ? S_EXT_QUOTED : S_ERROR;
    case S_EXT_TOKEN:
    case S_EXT_QEND:
        if (tchar && st == S_EXT_TOKEN)
            return S_EXT_TOKEN;
        if (ows)
            return S_EXT_BWS;
        if (ch == '\r')
            return S_SIZE_LF;
        break;
    case S_EXT_QUOTED:
        if (is_qdtext(ch))
            return S_EXT_QUOTED;
        if (ch == '"')
            return S_EXT_QEND;
        return ch == '\\' ? S_EXT_QPAIR : S_ERROR;
    default: /* S_EXT_QPAIR */
        return is_text(ch) ? S_EXT_QUOTED : S_ERROR;
    }
    /* what may follow a BWS, a name or a value: the next extension */
    return ch == ';' ? S_EXT_NAME0 : S_ERROR;
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
            if (ch != ';' && ch != '\r' && !flare__is_ows((char)ch))
                return fail(c, 400, "invalid chunk size", status, error);
            if (c->remaining > max_body - c->total)
                return fail(c, 413, "request body too large", status, error);
            c->total += c->remaining;
            if (ch == '\r') {
                c->state = S_SIZE_LF;
                break;
            }
            c->state = ch == ';' ? S_EXT_NAME0 : S_EXT_BWS;
            if (++c->line_len > MAX_SIZE_LINE)
                return fail(c, 400, "chunk size line too long", status, error);
            break;

        case S_EXT_BWS:
        case S_EXT_NAME0:
        case S_EXT_NAME:
        case S_EXT_NAME_BWS:
        case S_EXT_VAL0:
        case S_EXT_TOKEN:
        case S_EXT_QUOTED:
        case S_EXT_QPAIR:
        case S_EXT_QEND:
            c->state = ext_next(c->state, ch);
            if (c->state == S_SIZE_LF)
                break; /* the CR is not counted in the line */
            if (c->state == S_ERROR)
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

bool flare__chunked_trailer_next(const char *raw, size_t len, size_t *pos, flare_str_t *name,
                                 flare_str_t *value)
{
    /* the decoder checked the grammar: token ":" text CRLF ... CRLF */
    size_t i = *pos;
    if (i + 2 > len || raw[i] == '\r')
        return false;
    const char *colon = memchr(raw + i, ':', len - i);
    const char *cr = colon != NULL ? memchr(colon, '\r', len - (size_t)(colon - raw)) : NULL;
    if (cr == NULL)
        return false;
    *name = (flare_str_t){ raw + i, (size_t)(colon - (raw + i)) };
    const char *v = colon + 1, *e = cr;
    while (v < e && flare__is_ows(*v))
        v++;
    while (e > v && flare__is_ows(e[-1]))
        e--;
    *value = (flare_str_t){ v, (size_t)(e - v) };
    *pos = (size_t)(cr - raw) + 2;
    return true;
}
