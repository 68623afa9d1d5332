/* multipart/form-data: the pure streaming parser (RFC 7578, RFC 2046). */
#include <stdbool.h>
#include <string.h>

#include "core/core.h"
#include "flare/flare.h"
#include "flare/multipart.h"

enum {
    S_PREAMBLE,    /* before the first delimiter: ignored */
    S_AFTER_DELIM, /* a delimiter matched: "--", padding or CRLF next */
    S_DASH2,       /* one '-' of the closing "--" seen */
    S_PAD,         /* transport padding (LWSP) before the CRLF */
    S_PAD_LF,      /* CR seen, LF next */
    S_HEADERS,     /* a part's header block */
    S_BODY,        /* a part's content */
    S_END_PENDING, /* delimiter found after a DATA event: PART_END next */
    S_EPILOGUE,    /* after the closing delimiter: ignored */
    S_ERROR
};

static const struct {
    int status;
    const char *msg;
} err_table[] = {
#define ERR_ROW(name, status, msg) { status, msg },
    FLARE_MULTIPART_ERR_MAP(ERR_ROW)
#undef ERR_ROW
};

int flare_multipart_err_status(flare_multipart_err_t err)
{
    if ((unsigned)err >= sizeof(err_table) / sizeof(err_table[0]))
        return 500;
    return err_table[err].status;
}

const char *flare_multipart_err_message(flare_multipart_err_t err)
{
    if ((unsigned)err >= sizeof(err_table) / sizeof(err_table[0]))
        return "multipart: unknown error";
    return err_table[err].msg;
}

/* RFC 2046 bchars: DIGIT / ALPHA / "'()+_,-./:=? " (space not last). */
static bool is_bchar(unsigned char c)
{
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
        return true;
    return c != '\0' && strchr("'()+_,-./:=? ", c) != NULL;
}

static bool boundary_ok(flare_str_t b)
{
    if (b.len == 0 || b.len > FLARE_MULTIPART_BOUNDARY_MAX || b.ptr[b.len - 1] == ' ')
        return false;
    for (size_t i = 0; i < b.len; i++)
        if (!is_bchar((unsigned char)b.ptr[i]))
            return false;
    return true;
}

static void skip_ows(const char *s, size_t n, size_t *i)
{
    while (*i < n && flare__is_ows(s[*i]))
        (*i)++;
}

/* A token at s[*i]: its view, advancing *i. */
static flare_str_t take_token(const char *s, size_t n, size_t *i)
{
    size_t b = *i;
    while (*i < n && flare__is_tchar((unsigned char)s[*i]))
        (*i)++;
    return (flare_str_t){ s + b, *i - b };
}

int flare_multipart_boundary(flare_str_t ct, flare_str_t *boundary, flare_multipart_err_t *why)
{
    flare_multipart_err_t err = FLARE_MULTIPART_ERR_NOT_FORM_DATA;
    if (ct.ptr == NULL)
        goto fail;
    size_t i = 0;
    skip_ows(ct.ptr, ct.len, &i);
    flare_str_t type = take_token(ct.ptr, ct.len, &i);
    if (i >= ct.len || ct.ptr[i] != '/' || !FLARE__IEQ(type, "multipart"))
        goto fail;
    i++;
    flare_str_t sub = take_token(ct.ptr, ct.len, &i);
    if (!FLARE__IEQ(sub, "form-data"))
        goto fail;
    err = FLARE_MULTIPART_ERR_BOUNDARY;
    flare_str_t found = FLARE_STR_NULL;
    for (;;) {
        skip_ows(ct.ptr, ct.len, &i);
        if (i == ct.len)
            break;
        if (ct.ptr[i] != ';')
            goto fail;
        i++;
        skip_ows(ct.ptr, ct.len, &i);
        if (i == ct.len)
            break; /* a trailing ';' */
        flare_str_t name = take_token(ct.ptr, ct.len, &i);
        if (name.len == 0 || i == ct.len || ct.ptr[i] != '=')
            goto fail;
        i++;
        flare_str_t value;
        if (i < ct.len && ct.ptr[i] == '"') {
            size_t b = ++i;
            while (i < ct.len && ct.ptr[i] != '"') {
                if (ct.ptr[i] == '\\')
                    goto fail; /* no bchar needs an escape */
                i++;
            }
            if (i == ct.len)
                goto fail;
            value = (flare_str_t){ ct.ptr + b, i - b };
            i++;
        } else {
            value = take_token(ct.ptr, ct.len, &i);
        }
        if (FLARE__IEQ(name, "boundary")) {
            if (found.ptr != NULL)
                goto fail; /* two boundaries: which one? */
            found = value;
        }
    }
    if (found.ptr == NULL || !boundary_ok(found))
        goto fail;
    *boundary = found;
    if (why != NULL)
        *why = FLARE_MULTIPART_ERR_NONE;
    return 0;
fail:
    if (why != NULL)
        *why = err;
    return FLARE_EINVAL;
}

int flare_multipart_init_boundary(flare_multipart_t *mp, flare_str_t boundary,
                                  const flare_multipart_limits_t *limits)
{
    mp->state = S_PREAMBLE;
    mp->err = FLARE_MULTIPART_ERR_NONE;
    mp->work = 0;
    mp->total = 0;
    mp->part_size = 0;
    mp->parts = 0;
    mp->hdr_len = 0;
    mp->part.header_count = 0;
    mp->limits = limits != NULL ? *limits : (flare_multipart_limits_t){ 0 };
    if (mp->limits.max_parts == 0)
        mp->limits.max_parts = FLARE_MULTIPART_MAX_PARTS;
    if (mp->limits.max_header_size == 0 || mp->limits.max_header_size > FLARE_MULTIPART_HEADER_MAX)
        mp->limits.max_header_size = FLARE_MULTIPART_HEADER_MAX;
    if (!boundary_ok(boundary)) {
        mp->state = S_ERROR;
        mp->err = FLARE_MULTIPART_ERR_BOUNDARY;
        mp->dlen = 0;
        return FLARE_EINVAL;
    }
    memcpy(mp->delim, "\r\n--", 4);
    memcpy(mp->delim + 4, boundary.ptr, boundary.len);
    mp->dlen = (uint16_t)(4 + boundary.len);
    /* KMP failure function: fail[q] is the length of the longest proper
     * prefix of delim[0..q) that is also its suffix. */
    mp->fail[0] = 0;
    mp->fail[1] = 0;
    size_t k = 0;
    for (size_t q = 1; q < mp->dlen; q++) {
        while (k > 0 && mp->delim[q] != mp->delim[k])
            k = mp->fail[k];
        if (mp->delim[q] == mp->delim[k])
            k++;
        mp->fail[q + 1] = (uint8_t)k;
    }
    /* The body may start with the first boundary, without the CRLF that
     * begins a delimiter: the scan starts as if that CRLF had been seen. */
    mp->match = 2;
    return 0;
}

int flare_multipart_init(flare_multipart_t *mp, flare_str_t content_type,
                         const flare_multipart_limits_t *limits)
{
    flare_str_t b;
    flare_multipart_err_t why;
    if (flare_multipart_boundary(content_type, &b, &why) != 0) {
        flare_multipart_init_boundary(mp, FLARE_STR_NULL, limits);
        mp->err = why;
        return FLARE_EINVAL;
    }
    return flare_multipart_init_boundary(mp, b, limits);
}

/* Scans p[0..len) for the delimiter from the carried match state. Stops
 * after the byte that completes it (match == dlen), at the end of the
 * input, or, when stop_fallback, after the first byte that does not extend
 * the carried match (the bytes held from earlier calls are then, at least
 * in part, content). Each byte costs one step plus the fallbacks, and
 * fallbacks never exceed the steps that built the match up (the KMP
 * argument): work is at most twice the input. */
static size_t scan(flare_multipart_t *mp, const char *p, size_t len, bool stop_fallback)
{
    size_t m = mp->match, m0 = m, i = 0, dlen = mp->dlen;
    const char *d = mp->delim;
    while (i < len) {
        if (m == 0) {
            /* nothing carried: jump to the next CR */
            const char *cr = memchr(p + i, '\r', len - i);
            size_t skip = cr != NULL ? (size_t)(cr - (p + i)) : len - i;
            mp->work += skip;
            i += skip;
            if (cr == NULL)
                break;
        }
        unsigned char c = (unsigned char)p[i++];
        mp->work++;
        while (m > 0 && (unsigned char)d[m] != c) {
            m = mp->fail[m];
            mp->work++;
        }
        if ((unsigned char)d[m] == c)
            m++;
        if (m == dlen || (stop_fallback && m != m0 + i))
            break;
    }
    mp->match = (uint16_t)m;
    return i;
}

static int fail(flare_multipart_t *mp, flare_multipart_err_t err)
{
    mp->state = S_ERROR;
    mp->err = err;
    switch (err) {
    case FLARE_MULTIPART_ERR_PARTS:
    case FLARE_MULTIPART_ERR_PART_SIZE:
    case FLARE_MULTIPART_ERR_TOTAL_SIZE:
    case FLARE_MULTIPART_ERR_HEADER_SIZE:
    case FLARE_MULTIPART_ERR_HEADER_COUNT:
        return FLARE_ETOOBIG;
    default:
        return FLARE_EINVAL;
    }
}

/* A quoted-string at s[*i] (on the '"'): unescaped into out, advancing *i.
 * false when it does not end. */
static bool take_quoted(const char *s, size_t n, size_t *i, char *out, size_t *olen)
{
    size_t o = 0;
    for ((*i)++; *i < n; (*i)++) {
        char c = s[*i];
        if (c == '"') {
            (*i)++;
            *olen = o;
            return true;
        }
        if (c == '\\') {
            if (++(*i) == n)
                return false;
            c = s[*i];
        }
        out[o++] = c;
    }
    return false;
}

/* RFC 8187 ext-value: charset "'" [language] "'" pct-encoded, decoded to
 * UTF-8 into out (never longer than v). 1 decoded, 0 unknown charset (the
 * parameter is then ignored), -1 malformed. */
static int decode_ext(flare_str_t v, char *out, size_t *olen)
{
    const char *q1 = memchr(v.ptr, '\'', v.len);
    if (q1 == NULL)
        return -1;
    flare_str_t cs = { v.ptr, (size_t)(q1 - v.ptr) };
    const char *rest = q1 + 1, *end = v.ptr + v.len;
    const char *q2 = memchr(rest, '\'', (size_t)(end - rest));
    if (q2 == NULL)
        return -1;
    bool latin1;
    if (FLARE__IEQ(cs, "utf-8"))
        latin1 = false;
    else if (FLARE__IEQ(cs, "iso-8859-1"))
        latin1 = true;
    else
        return 0;
    size_t o = 0;
    for (const char *p = q2 + 1; p < end; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '%') {
            if (end - p < 3)
                return -1;
            int hi = flare__hexval((unsigned char)p[1]), lo = flare__hexval((unsigned char)p[2]);
            if (hi < 0 || lo < 0)
                return -1;
            c = (unsigned char)(hi << 4 | lo);
            p += 2;
        } else if (!flare__is_tchar(c) || c == '\'' || c == '*') {
            return -1; /* attr-char only: tchar without "'", "*" and "%" */
        }
        if (latin1 && c >= 0x80) {
            out[o++] = (char)(0xC0 | c >> 6);
            out[o++] = (char)(0x80 | (c & 0x3F));
        } else {
            out[o++] = (char)c;
        }
    }
    *olen = o;
    return 1;
}

/* Content-Disposition: form-data; name=...; filename=...; filename*=...
 * Decoded values go to out (room for at least the value's length). */
static flare_multipart_err_t parse_disposition(flare_multipart_part_t *part, flare_str_t v,
                                               char *out)
{
    const flare_multipart_err_t bad = FLARE_MULTIPART_ERR_DISPOSITION;
    const char *s = v.ptr;
    size_t n = v.len, i = 0, o = 0;
    flare_str_t type = take_token(s, n, &i);
    if (!FLARE__IEQ(type, "form-data"))
        return bad;
    flare_str_t name = FLARE_STR_NULL, fname = FLARE_STR_NULL, fstar = FLARE_STR_NULL;
    bool seen_star = false;
    for (;;) {
        skip_ows(s, n, &i);
        if (i == n)
            break;
        if (s[i] != ';')
            return bad;
        i++;
        skip_ows(s, n, &i);
        if (i == n)
            break;
        flare_str_t pname = take_token(s, n, &i);
        skip_ows(s, n, &i);
        if (pname.len == 0 || i == n || s[i] != '=')
            return bad;
        i++;
        skip_ows(s, n, &i);
        flare_str_t pval;
        bool quoted = i < n && s[i] == '"';
        size_t o_val = o;
        if (quoted) {
            size_t len;
            if (!take_quoted(s, n, &i, out + o, &len))
                return bad;
            pval = (flare_str_t){ out + o, len };
            o += len;
        } else {
            pval = take_token(s, n, &i);
        }
        flare_str_t *dst = NULL;
        if (FLARE__IEQ(pname, "name")) {
            dst = &name;
        } else if (FLARE__IEQ(pname, "filename")) {
            dst = &fname;
        } else if (FLARE__IEQ(pname, "filename*")) {
            if (seen_star)
                return bad;
            seen_star = true;
            /* a quoted value was copied to out already: decode it there
             * (in place is safe, the output never overtakes the input) */
            size_t at = quoted ? o_val : o, len = 0;
            int r = decode_ext(pval, out + at, &len);
            if (r < 0)
                return bad;
            if (r > 0) {
                fstar = (flare_str_t){ out + at, len };
                o = at + len;
            }
            continue;
        }
        if (dst != NULL) {
            if (dst->ptr != NULL)
                return bad; /* the same parameter twice: which one? */
            /* a value always has a non-NULL pointer, also when empty */
            *dst = pval.ptr != NULL ? pval : (flare_str_t){ s + i, 0 };
        }
    }
    if (name.ptr == NULL)
        return bad;
    part->name = name;
    part->filename = fstar.ptr != NULL ? fstar : fname;
    return FLARE_MULTIPART_ERR_NONE;
}

/* The header block hdr[0..len), which ends with "\r\n\r\n" or is "\r\n". */
static flare_multipart_err_t parse_headers(flare_multipart_t *mp)
{
    flare_multipart_part_t *part = &mp->part;
    const char *s = mp->hdr, *end = mp->hdr + mp->hdr_len - 2; /* without the blank line */
    part->header_count = 0;
    part->name = part->filename = part->content_type = FLARE_STR_NULL;
    flare_str_t disp = FLARE_STR_NULL;
    while (s < end) {
        const char *eol = memchr(s, '\r', (size_t)(end - s));
        /* the block was cut at "\r\n\r\n": every line ends with CRLF */
        if (eol == NULL || eol + 1 >= mp->hdr + mp->hdr_len || eol[1] != '\n')
            return FLARE_MULTIPART_ERR_HEADER;
        flare_str_t line = { s, (size_t)(eol - s) };
        s = eol + 2;
        if (line.len == 0 || flare__is_ows(line.ptr[0]))
            return FLARE_MULTIPART_ERR_HEADER; /* obsolete folding */
        size_t i = 0;
        flare_str_t hname = take_token(line.ptr, line.len, &i);
        if (hname.len == 0 || i == line.len || line.ptr[i] != ':')
            return FLARE_MULTIPART_ERR_HEADER;
        i++;
        skip_ows(line.ptr, line.len, &i);
        size_t e = line.len;
        while (e > i && flare__is_ows(line.ptr[e - 1]))
            e--;
        flare_str_t value = { line.ptr + i, e - i };
        if (memchr(value.ptr, '\n', value.len) != NULL || memchr(value.ptr, '\0', value.len))
            return FLARE_MULTIPART_ERR_HEADER;
        if (part->header_count == FLARE_MULTIPART_HEADERS_MAX)
            return FLARE_MULTIPART_ERR_HEADER_COUNT;
        part->headers[part->header_count++] = (flare_header_t){ hname, value };
        if (FLARE__IEQ(hname, "content-disposition")) {
            if (disp.ptr != NULL)
                return FLARE_MULTIPART_ERR_DISPOSITION;
            disp = value;
        } else if (FLARE__IEQ(hname, "content-type")) {
            if (part->content_type.ptr != NULL)
                return FLARE_MULTIPART_ERR_HEADER;
            part->content_type = value;
        }
    }
    if (disp.ptr == NULL)
        return FLARE_MULTIPART_ERR_DISPOSITION;
    return parse_disposition(part, disp, mp->hdr + FLARE_MULTIPART_HEADER_MAX);
}

static int64_t done(flare_multipart_t *mp, size_t used)
{
    mp->total += used;
    return (int64_t)used;
}

static int64_t parse_next(flare_multipart_t *mp, const char *data, size_t len,
                          flare_multipart_event_t *ev)
{
    ev->type = FLARE_MULTIPART_NEED_MORE;
    ev->data = FLARE_STR_NULL;
    ev->part = &mp->part;
    if (mp->state == S_ERROR)
        return mp->err == FLARE_MULTIPART_ERR_NONE ? FLARE_EINVAL : fail(mp, mp->err);
    if (mp->limits.max_total_size != 0 && len > mp->limits.max_total_size - mp->total)
        return fail(mp, FLARE_MULTIPART_ERR_TOTAL_SIZE);
    size_t pos = 0;
    while (pos < len || mp->state == S_END_PENDING) {
        const char *p = data + pos;
        size_t n = len - pos;
        switch (mp->state) {
        case S_PREAMBLE:
            pos += scan(mp, p, n, false);
            if (mp->match == mp->dlen) {
                mp->match = 0;
                mp->state = S_AFTER_DELIM;
            }
            break;
        case S_AFTER_DELIM:
            pos++;
            if (*p == '-')
                mp->state = S_DASH2;
            else if (*p == ' ' || *p == '\t')
                mp->state = S_PAD;
            else if (*p == '\r')
                mp->state = S_PAD_LF;
            else
                return fail(mp, FLARE_MULTIPART_ERR_DELIMITER);
            break;
        case S_DASH2:
            if (*p != '-')
                return fail(mp, FLARE_MULTIPART_ERR_DELIMITER);
            mp->state = S_EPILOGUE;
            ev->type = FLARE_MULTIPART_DONE;
            ev->part = NULL;
            return done(mp, pos + 1);
        case S_PAD:
            pos++;
            if (*p == '\r')
                mp->state = S_PAD_LF;
            else if (*p != ' ' && *p != '\t')
                return fail(mp, FLARE_MULTIPART_ERR_DELIMITER);
            break;
        case S_PAD_LF:
            if (*p != '\n')
                return fail(mp, FLARE_MULTIPART_ERR_DELIMITER);
            pos++;
            if (mp->parts == mp->limits.max_parts)
                return fail(mp, FLARE_MULTIPART_ERR_PARTS);
            mp->parts++;
            mp->hdr_len = 0;
            mp->state = S_HEADERS;
            break;
        case S_HEADERS: {
            /* copy up to the end of the block: "\r\n" alone, or "\r\n\r\n" */
            size_t max = mp->limits.max_header_size;
            bool end = false;
            while (pos < len) {
                if (mp->hdr_len == max)
                    return fail(mp, FLARE_MULTIPART_ERR_HEADER_SIZE);
                char c = data[pos++];
                mp->work++;
                mp->hdr[mp->hdr_len++] = c;
                size_t h = mp->hdr_len;
                if (c == '\n' && h >= 2 && mp->hdr[h - 2] == '\r' &&
                    (h == 2 || (h >= 4 && mp->hdr[h - 3] == '\n' && mp->hdr[h - 4] == '\r'))) {
                    end = true;
                    break;
                }
            }
            if (!end)
                break;
            flare_multipart_err_t err = parse_headers(mp);
            if (err != FLARE_MULTIPART_ERR_NONE)
                return fail(mp, err);
            mp->state = S_BODY;
            mp->match = 0;
            mp->part_size = 0;
            ev->type = FLARE_MULTIPART_PART_BEGIN;
            return done(mp, pos);
        }
        case S_BODY: {
            size_t m0 = mp->match;
            size_t i = scan(mp, p, n, m0 > 0);
            size_t m = mp->match;
            bool found = m == mp->dlen;
            size_t held_old = m > i ? m - i : 0;
            size_t old_conf = m0 - held_old; /* carried bytes now known to be content */
            size_t new_conf = i > m ? i - m : 0;
            flare_str_t out;
            if (old_conf > 0 && new_conf > 0) {
                /* two pieces: give the carried one now and scan this input
                 * again from a clean state (at most dlen bytes were
                 * scanned, once per call) */
                mp->match = 0;
                out = (flare_str_t){ mp->delim, old_conf };
                i = 0;
            } else if (old_conf > 0) {
                out = (flare_str_t){ mp->delim, old_conf };
            } else if (new_conf > 0) {
                out = (flare_str_t){ p, new_conf };
            } else {
                pos += i;
                if (!found)
                    break;
                mp->match = 0;
                mp->state = S_AFTER_DELIM;
                ev->type = FLARE_MULTIPART_PART_END;
                return done(mp, pos);
            }
            if (mp->limits.max_part_size != 0 && out.len > mp->limits.max_part_size - mp->part_size)
                return fail(mp, FLARE_MULTIPART_ERR_PART_SIZE);
            mp->part_size += out.len;
            if (found) {
                mp->match = 0;
                mp->state = S_END_PENDING;
            }
            ev->type = FLARE_MULTIPART_DATA;
            ev->data = out;
            return done(mp, pos + i);
        }
        case S_END_PENDING:
            mp->state = S_AFTER_DELIM;
            ev->type = FLARE_MULTIPART_PART_END;
            return done(mp, pos);
        case S_EPILOGUE:
            pos = len;
            break;
        default:
            return fail(mp, mp->err);
        }
    }
    return done(mp, pos);
}

int flare_multipart_next(flare_multipart_t *mp, const char *data, size_t len, size_t *used,
                         flare_multipart_event_t *ev)
{
    int64_t n = parse_next(mp, data, len, ev);
    *used = n > 0 ? (size_t)n : 0;
    return n < 0 ? (int)n : 0;
}

int flare_multipart_finish(flare_multipart_t *mp)
{
    if (mp->state == S_EPILOGUE)
        return 0;
    if (mp->state == S_ERROR)
        return fail(mp, mp->err);
    return fail(mp, FLARE_MULTIPART_ERR_TRUNCATED);
}
