/* HTTP/1.1 request-head parser (RFC 9112 sections 2-3 and 5-7, RFC 9110
 * field semantics).
 *
 * One left-to-right pass, no state between calls: PARTIAL means "call again
 * from the start with more bytes" (picohttpparser's contract). Each limit is
 * applied as a window over the input (the first max_head bytes, the first
 * max_request_line bytes of the request line), never to `len` itself, so the
 * outcome is decided by a prefix of the input: if a prefix fails with status
 * S, every longer input fails with S, and every proper prefix of a complete
 * head is PARTIAL. fuzz/fuzz_request.c checks exactly that.
 *
 * Cost (callgrind, x86-64, -O2): the wrk request (`GET /plaintext HTTP/1.1`
 * and one Host field) takes about 320 instructions with gcc 12, 370 with
 * clang 14; a browser-like head of 500 bytes and 8 fields about 1,330. Where
 * it pays, 16 bytes are examined at a time with SSE2 (request-target, field
 * names and values, the Host value); the rest is one table load per byte.
 * Without SSE2 the same checks run byte by byte. */
#include "http1/parser.h"

#include <limits.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "core/core.h"

/* Leading empty lines before the request line are ignored (RFC 9112 2.2:
 * "SHOULD ignore at least one"), but only a few: an endless stream of CRLF
 * must not make the caller re-parse a growing buffer forever. */
#define MAX_EMPTY_LINES 4

/* Content-Length above this is refused (400): no body can be that large and
 * it keeps every later `offset + content_length` free of overflow. */
#define MAX_CONTENT_LENGTH ((uint64_t)1 << 62)

/* Character classes, one byte per character, bits (tchar, for methods
 * and field names, is core.h's flare__is_tchar): */
#define C_PLAIN  1  /* request-target byte other than '%' */
#define C_TARGET 2  /* request-target: 0x21-0x7E except '#' (no fragment on the wire) */
#define C_QMARK  4  /* '?' */
#define C_VALUE  8  /* field value: HTAB, SP, VCHAR, obs-text */
#define C_HOST   16 /* Host / authority: unreserved, sub-delims, ':', '[', ']', '%' */

static const uint8_t ctab[256] = {
    0,  0,  0,  0,  0,  0,  0,  0,  0,  8,  0,  0,  0,  0,  0,  0,  /* 0x00 */
    0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  /* 0x10 */
    8,  27, 11, 8,  27, 26, 27, 27, 27, 27, 27, 27, 27, 27, 27, 11, /* 0x20 */
    27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 11, 27, 11, 15, /* 0x30 */
    11, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, /* 0x40 */
    27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 11, 27, 11, 27, /* 0x50 */
    11, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, /* 0x60 */
    27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 27, 11, 11, 11, 27, 0,  /* 0x70 */
    8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  /* 0x80 */
    8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  /* 0x90 */
    8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  /* 0xA0 */
    8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  /* 0xB0 */
    8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  /* 0xC0 */
    8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  /* 0xD0 */
    8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  /* 0xE0 */
    8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  8,  /* 0xF0 */
};

#define IS(c, cls) (ctab[(uint8_t)(c)] & (cls))

/* What the field lines told us, one bit each. */
enum {
    F_HOST = 1 << 0,       /* Host field seen */
    F_ABSOLUTE = 1 << 1,   /* absolute-form target: its authority is the host */
    F_CLEN = 1 << 2,       /* Content-Length seen */
    F_TE = 1 << 3,         /* Transfer-Encoding seen */
    F_CLOSE = 1 << 4,      /* Connection: close */
    F_KEEP_ALIVE = 1 << 5, /* Connection: keep-alive */
    F_CONN_UPGR = 1 << 6,  /* Connection: upgrade */
    F_UPGRADE = 1 << 7,    /* non-empty Upgrade field */
    F_EXPECT = 1 << 8,     /* Expect: 100-continue */
    F_PCT = 1 << 9,        /* a %-escape in the path */
};

/* Unaligned loads; memcpy of a literal folds to a constant, so
 * `load32(p) == load32("GET ")` is one compare whatever the endianness. */
static inline uint32_t load32(const char *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

static inline uint16_t load16(const char *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

static inline uint64_t load64(const char *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

/* Field names hold only tchar, in which `| 0x20` maps exactly the letters
 * to lower case and never makes a non-letter equal a letter or '-'. */
#define LOWER32 0x20202020u
#define LOWER64 0x2020202020202020u

__attribute__((cold, noinline)) static int fail(flare_http_head_t *head, int status,
                                                const char *error)
{
    head->status = status;
    head->error = error;
    return FLARE_PARSE_ERROR;
}

/* The SIMD loops below run while 16 bytes can be loaded: p <= end - 16,
 * computed only when end - p >= 16 so that it stays inside the buffer. */

/* Returns the first byte in [p, end) not allowed in a request-target (or
 * end); *q gets the first '?' before it, if any. With `path` (the target
 * before its '?') it may stop earlier, at a '%' or, 16 bytes at a time, at
 * any byte in 0x21..0x25 ('!', '"', '#', '$', '%'): one range compare finds
 * those and the bytes that end a target at once, which is cheaper than the
 * exact test and how '%' is noticed without a second pass (target_slow
 * sorts such stops out; '!', '"' and '$' are rare in paths). */
static inline const char *scan_target(const char *p, const char *end, const char **q, bool path)
{
#ifdef __SSE2__
    if (end - p >= 16) {
        /* path: x in 0x26..0x7E  <=>  (int8_t)(x + 0x5A) < (int8_t)0xD9;
         * else: x in 0x21..0x7E  <=>  (int8_t)(x + 0x5F) < (int8_t)0xDE, and not '#' */
        const __m128i bias = _mm_set1_epi8(path ? 0x5a : 0x5f);
        const __m128i lim = _mm_set1_epi8((char)(path ? 0xd9 : 0xde));
        const __m128i hash = _mm_set1_epi8('#');
        const __m128i qm = _mm_set1_epi8('?');
        const char *last = end - 16;
        do {
            __m128i x = _mm_loadu_si128((const __m128i *)(const void *)p);
            __m128i ok = _mm_cmplt_epi8(_mm_add_epi8(x, bias), lim);
            if (!path)
                ok = _mm_andnot_si128(_mm_cmpeq_epi8(x, hash), ok);
            unsigned bad = (unsigned)_mm_movemask_epi8(ok) ^ 0xffffu;
            unsigned qs = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(x, qm));
            if (bad != 0) {
                qs &= (bad & -bad) - 1; /* only a '?' before the stop byte */
                if (qs != 0 && *q == NULL)
                    *q = p + __builtin_ctz(qs);
                return p + __builtin_ctz(bad);
            }
            if (qs != 0 && *q == NULL)
                *q = p + __builtin_ctz(qs);
            p += 16;
        } while (p <= last);
    }
#endif
    const unsigned cls = path ? C_PLAIN : C_TARGET;
    for (; p != end; p++) {
        unsigned c = ctab[(uint8_t)*p];
        if (!(c & cls))
            break;
        if ((c & C_QMARK) && *q == NULL)
            *q = p;
    }
    return p;
}

/* The target scan stopped at a byte of the target, p < lend: a '%' or one
 * of the other bytes the path scan stops at. A '%' in the path (no '?'
 * yet) must start a pct-encoded octet, "%" HEXDIG HEXDIG (RFC 3986 2.1): a
 * lone '%' would be read differently by whoever decodes the path next (the
 * router's normalisation, a handler decoding a parameter), so it is refused
 * (400). The escape is checked only as far as the line's window goes, so
 * a prefix never gives another answer than the whole. In the query '%' is
 * not special (forms keep bad escapes literally). Scans on to the end of
 * the target. Out of line: most paths have none of these bytes. r.p is
 * NULL after fail(). */
struct target_scan {
    const char *p, *q;
    bool pct; /* an escape in the path */
};

__attribute__((noinline)) static struct target_scan
target_slow(flare_http_head_t *head, const char *p, const char *lend, const char *q)
{
    struct target_scan r = { NULL, q, false };
    do {
        if (r.q != NULL) {
            p = scan_target(p + 1, lend, &r.q, false);
            break;
        }
        if (*p == '%') {
            for (int i = 1; i <= 2 && p + i != lend; i++) {
                if (flare__hexval((unsigned char)p[i]) < 0) {
                    fail(head, 400, "invalid percent-encoding in request-target");
                    return r;
                }
            }
            r.pct = true;
        }
        p = scan_target(p + 1, lend, &r.q, true);
    } while (p != lend && IS(*p, C_TARGET));
    r.p = p;
    return r;
}

/* Returns the first byte in [p, end) not allowed in a field value (a CTL
 * other than HTAB, or DEL), or end. The value's CR is that byte. */
static inline const char *scan_value(const char *p, const char *end)
{
#ifdef __SSE2__
    if (end - p >= 16) {
        const __m128i c1f = _mm_set1_epi8(0x1f);
        const __m128i del = _mm_set1_epi8(0x7f);
        const char *last = end - 16;
        do {
            __m128i x = _mm_loadu_si128((const __m128i *)(const void *)p);
            __m128i bad = _mm_cmpeq_epi8(_mm_min_epu8(x, c1f), x); /* x <= 0x1F */
            unsigned m = (unsigned)_mm_movemask_epi8(_mm_or_si128(bad, _mm_cmpeq_epi8(x, del)));
            if (m != 0) {
                p += __builtin_ctz(m);
                if (*p != '\t') /* HTAB is rare: step over it and go on */
                    return p;
                p++;
            } else {
                p += 16;
            }
        } while (p <= last);
    }
#endif
    while (p != end && IS(*p, C_VALUE))
        p++;
    return p;
}

/* Returns the end of the field name starting at p: the first byte that is
 * not tchar, or end. Common names are letters, digits and '-' only: those
 * are checked 16 at a time, anything else goes on one byte at a time. */
static inline const char *scan_name(const char *p, const char *end)
{
#ifdef __SSE2__
    if (end - p >= 16) {
        /* x in [lo, lo + n)  <=>  (int8_t)(x + 0x80 - lo) < (int8_t)(0x80 + n) */
        const __m128i lower = _mm_set1_epi8(0x20);
        const __m128i a_bias = _mm_set1_epi8(0x80 - 'a');
        const __m128i a_lim = _mm_set1_epi8((char)(0x80 + 26));
        const __m128i d_bias = _mm_set1_epi8(0x80 - '0');
        const __m128i d_lim = _mm_set1_epi8((char)(0x80 + 10));
        const __m128i dash = _mm_set1_epi8('-');
        const char *last = end - 16;
        do {
            __m128i x = _mm_loadu_si128((const __m128i *)(const void *)p);
            __m128i y = _mm_or_si128(x, lower);
            __m128i ok = _mm_cmplt_epi8(_mm_add_epi8(y, a_bias), a_lim);
            ok = _mm_or_si128(ok, _mm_cmplt_epi8(_mm_add_epi8(x, d_bias), d_lim));
            ok = _mm_or_si128(ok, _mm_cmpeq_epi8(x, dash));
            unsigned stop = (unsigned)_mm_movemask_epi8(ok) ^ 0xffffu;
            if (stop != 0) {
                p += __builtin_ctz(stop);
                if (*p == ':')
                    return p;
                break;
            }
            p += 16;
        } while (p <= last);
    }
#endif
    while (p != end && flare__is_tchar((unsigned char)*p))
        p++;
    return p;
}

/* Whether [p, p + n) are all C_HOST characters (reg-name, IP literal,
 * ':' port: RFC 3986 3.2.2); p points into a buffer ending at end. Real
 * hosts are letters, digits, '-', '.' and ':': 16 bytes of those are
 * accepted at once, anything else is looked up byte by byte. */
static inline bool valid_host(const char *p, size_t n, const char *end)
{
#ifdef __SSE2__
    if (n <= 16 && end - p >= 16) {
        const __m128i x = _mm_loadu_si128((const __m128i *)(const void *)p);
        const __m128i y = _mm_or_si128(x, _mm_set1_epi8(0x20));
        /* 'a'-'z' after | 0x20, or '-' '.' '/' '0'-'9' ':' but not '/' */
        __m128i ok = _mm_cmplt_epi8(_mm_add_epi8(y, _mm_set1_epi8(0x80 - 'a')),
                                    _mm_set1_epi8((char)(0x80 + 26)));
        __m128i num = _mm_cmplt_epi8(_mm_add_epi8(x, _mm_set1_epi8(0x80 - '-')),
                                     _mm_set1_epi8((char)(0x80 + 14)));
        num = _mm_andnot_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8('/')), num);
        unsigned bad = ~(unsigned)_mm_movemask_epi8(_mm_or_si128(ok, num)) & ((1u << n) - 1);
        if (bad == 0)
            return true;
    }
#else
    (void)end;
#endif
    for (size_t i = 0; i < n; i++) {
        if (!IS(p[i], C_HOST))
            return false;
    }
    return true;
}

/* A line should end at p but no CRLF is there: returns 0 when the bytes
 * run out first (more are needed), else the error. */
__attribute__((cold, noinline)) static int eol_slow(flare_http_head_t *head, const char *p,
                                                    const char *end, const char *bad_char)
{
    if (p == end || (*p == '\r' && p + 1 == end))
        return 0;
    if (*p == '\r')
        return fail(head, 400, "bare CR in request head");
    if (*p == '\n')
        return fail(head, 400, "bare LF in request head");
    return fail(head, 400, bad_char);
}

/* A field line did not continue with ':' after its name: say why. */
__attribute__((cold, noinline)) static int bad_name(flare_http_head_t *head, const char *name,
                                                    const char *p)
{
    char c = *p;
    if (p == name) {
        if (flare__is_ows(c))
            return fail(head, 400, "obsolete line folding in header section");
        if (c == '\n')
            return fail(head, 400, "bare LF in request head");
        if (c == ':')
            return fail(head, 400, "empty header name");
    } else {
        if (flare__is_ows(c))
            return fail(head, 400, "whitespace before colon in header field");
        if (c == '\r' || c == '\n')
            return fail(head, 400, "header field without colon");
    }
    return fail(head, 400, "invalid character in header name");
}

/* The forms other than origin-form (RFC 9112 3.2.2-3.2.4). */
__attribute__((noinline)) static int other_target(flare_http_head_t *head, const char *t,
                                                  const char *tend, const char *q, unsigned *flags)
{
    static const char slash[] = "/";

    head->query = (flare_str_t){ tend, 0 };
    if (head->method_id == FLARE_METHOD_CONNECT) {
        /* authority-form: uri-host ":" port */
        const char *colon = tend;
        while (colon != t && colon[-1] != ':')
            colon--;
        if (q != NULL || colon == t || colon - 1 == t || colon == tend ||
            !valid_host(t, (size_t)(tend - t), tend))
            return fail(head, 400, "CONNECT needs an authority-form target (host:port)");
        for (const char *d = colon; d != tend; d++) {
            if ((unsigned)(*d - '0') > 9)
                return fail(head, 400, "CONNECT needs an authority-form target (host:port)");
        }
        head->path = (flare_str_t){ t, (size_t)(tend - t) };
        return 0;
    }
    if (tend - t == 1 && *t == '*') {
        if (head->method_id != FLARE_METHOD_OPTIONS)
            return fail(head, 400, "asterisk-form target is only for OPTIONS");
        head->path = (flare_str_t){ t, 1 };
        return 0;
    }

    /* absolute-form: scheme "://" authority [path-abempty] ["?" query] */
    const char *p = t;
    if ((unsigned)((*p | 0x20) - 'a') < 26) {
        while (p != tend && ((unsigned)((*p | 0x20) - 'a') < 26 || (unsigned)(*p - '0') < 10 ||
                             *p == '+' || *p == '-' || *p == '.'))
            p++;
    }
    if (p == t || tend - p < 3 || memcmp(p, "://", 3) != 0)
        return fail(head, 400, "invalid request-target");
    const char *auth = p + 3;
    const char *aend = auth;
    while (aend != tend && *aend != '/' && *aend != '?')
        aend++;
    if (auth == aend || !valid_host(auth, (size_t)(aend - auth), tend))
        return fail(head, 400, "invalid host in request-target");
    head->host = (flare_str_t){ auth, (size_t)(aend - auth) };
    *flags |= F_ABSOLUTE;
    if (aend == tend || *aend == '?')
        head->path = (flare_str_t){ slash, 1 };
    else
        head->path = (flare_str_t){ aend, (size_t)((q != NULL ? q : tend) - aend) };
    if (q != NULL)
        head->query = (flare_str_t){ q + 1, (size_t)(tend - q - 1) };
    return 0;
}

/* The HTTP-version after the fast path missed: returns its length (8), 0 if
 * more bytes are needed, or an error. */
__attribute__((noinline)) static int version_slow(flare_http_head_t *head, const char *p,
                                                  const char *end, int *minor)
{
    static const char name[] = "HTTP/";
    for (size_t i = 0; i < 5; i++) {
        if (p + i == end)
            return 0;
        if (p[i] != name[i])
            return fail(head, 400,
                        p[i] == '\r' || p[i] == '\n' ? "missing HTTP version"
                                                     : "invalid HTTP version");
    }
    for (size_t i = 5; i < 8; i++) {
        if (p + i == end)
            return 0;
        if (i == 6 ? p[i] != '.' : (unsigned)(p[i] - '0') > 9)
            return fail(head, 400, "invalid HTTP version");
    }
    if (p[5] != '1')
        return fail(head, 505, "HTTP version not supported");
    *minor = p[7] != '0'; /* 1.2 .. 1.9 are answered as 1.1 (RFC 9110 6.2) */
    return 8;
}

/* Connection: 1#token, case-insensitive; only three tokens matter here. */
static unsigned connection_tokens(const char *p, const char *end)
{
    unsigned f = 0;

    /* the usual whole values, as browsers and benchmarks send them */
    if (end - p == 10 && (load64(p) | LOWER64) == load64("keep-ali") &&
        (load16(p + 8) | 0x2020) == load16("ve"))
        return F_KEEP_ALIVE;
    if (end - p == 5 && (load32(p) | LOWER32) == load32("clos") && (p[4] | 0x20) == 'e')
        return F_CLOSE;
    while (p != end) {
        while (p != end && (flare__is_ows(*p) || *p == ','))
            p++;
        const char *tok = p;
        while (p != end && *p != ',' && !flare__is_ows(*p))
            p++;
        flare_str_t s = { tok, (size_t)(p - tok) };
        if (FLARE__IEQ(s, "close"))
            f |= F_CLOSE;
        else if (FLARE__IEQ(s, "keep-alive"))
            f |= F_KEEP_ALIVE;
        else if (FLARE__IEQ(s, "upgrade"))
            f |= F_CONN_UPGR;
    }
    return f;
}

static int content_length(flare_http_head_t *head, flare_str_t v, unsigned *flags, int64_t *out)
{
    if (*flags & F_CLEN)
        return fail(head, 400, "duplicate Content-Length");
    if (*flags & F_TE)
        return fail(head, 400, "both Transfer-Encoding and Content-Length");
    if (v.len == 0)
        return fail(head, 400, "invalid Content-Length");
    uint64_t n = 0;
    for (size_t i = 0; i < v.len; i++) {
        unsigned d = (unsigned)(v.ptr[i] - '0');
        if (d > 9)
            return fail(head, 400, "invalid Content-Length");
        if (n > MAX_CONTENT_LENGTH / 10)
            return fail(head, 400, "Content-Length too large");
        n = n * 10 + d;
    }
    if (n > MAX_CONTENT_LENGTH)
        return fail(head, 400, "Content-Length too large");
    *flags |= F_CLEN;
    *out = (int64_t)n;
    return 0;
}

static int transfer_encoding(flare_http_head_t *head, flare_str_t v, int minor, unsigned *flags)
{
    if (minor == 0)
        return fail(head, 400, "Transfer-Encoding in an HTTP/1.0 request");
    if (*flags & F_CLEN)
        return fail(head, 400, "both Transfer-Encoding and Content-Length");
    if ((*flags & F_TE) || !FLARE__IEQ(v, "chunked"))
        return fail(head, 501, "Transfer-Encoding not supported");
    *flags |= F_TE;
    return 0;
}

/* The fields that change how the request is framed or answered; the
 * name is known to be 4..17 bytes of tchar. */
static int known_field(flare_http_head_t *head, const char *n, size_t nlen, flare_str_t v,
                       int minor, unsigned *flags, int64_t *clen)
{
    switch (nlen) {
    case 6:
        if ((load32(n) | LOWER32) == load32("expe") &&
            (load32(n + 2) | LOWER32) == load32("pect")) {
            if (!FLARE__IEQ(v, "100-continue"))
                return fail(head, 417, "unsupported expectation");
            *flags |= F_EXPECT;
        }
        break;
    case 7:
        if ((load32(n) | LOWER32) == load32("upgr") &&
            (load32(n + 3) | LOWER32) == load32("rade")) {
            if (v.len != 0)
                *flags |= F_UPGRADE;
        }
        break;
    case 10:
        if ((load64(n) | LOWER64) == load64("connecti") &&
            (load32(n + 6) | LOWER32) == load32("tion"))
            *flags |= connection_tokens(v.ptr, v.ptr + v.len);
        break;
    case 14:
        if ((load64(n) | LOWER64) == load64("content-") &&
            (load64(n + 6) | LOWER64) == load64("t-length"))
            return content_length(head, v, flags, clen);
        break;
    case 17:
        if ((load64(n) | LOWER64) == load64("transfer") &&
            (load64(n + 8) | LOWER64) == load64("-encodin") && (n[16] | 0x20) == 'g')
            return transfer_encoding(head, v, minor, flags);
        break;
    }
    return 0;
}

int flare__http_parse_head(const char *buf, size_t len, const flare_http_limits_t *limits,
                           flare_http_head_t *head)
{
    size_t max_head = limits->max_head < INT_MAX ? limits->max_head : INT_MAX;
    const char *end = buf + (len < max_head ? len : max_head);
    const char *p = buf;
    const char *line, *lend, *t, *q = NULL;
    flare_header_t *h = head->headers;
    size_t nh = 0;
    unsigned flags = 0;
    int64_t clen = -1;
    int minor;

    head->host = FLARE_STR_NULL;
    head->status = 0;
    head->error = NULL;

    for (int n = 0; p != end && *p == '\r'; n++) {
        if (end - p < 2)
            goto more;
        if (p[1] != '\n')
            return fail(head, 400, "bare CR in request head");
        if (n == MAX_EMPTY_LINES)
            return fail(head, 400, "too many empty lines before request line");
        p += 2;
    }

    /* Request line. Its tokens are scanned inside [line, lend): running into
     * lend before the line is complete means it is too long (414). */
    line = p;
    lend = (size_t)(end - p) > limits->max_request_line ? p + limits->max_request_line : end;

    if (flare__likely(lend - p >= 4) && load32(p) == load32("GET ")) {
        head->method_id = FLARE_METHOD_GET;
        p += 3;
    } else {
        while (p != lend && flare__is_tchar((unsigned char)*p))
            p++;
        if (p == lend)
            goto line_more;
        if (*p != ' ' || p == line)
            return fail(head, 400, "invalid method");
        head->method_id = flare__http_method_id(line, (size_t)(p - line));
    }
    head->method = (flare_str_t){ line, (size_t)(p - line) };

    t = ++p;
    p = scan_target(p, lend, &q, true);
    if (p == lend)
        goto line_more;
    if (*p != ' ' || p == t) {
        if (IS(*p, C_TARGET)) {
            struct target_scan r = target_slow(head, p, lend, q);
            if (r.p == NULL)
                return FLARE_PARSE_ERROR;
            p = r.p;
            q = r.q;
            if (r.pct)
                flags |= F_PCT;
            if (p == lend)
                goto line_more;
        }
        if (p == t)
            return fail(head, 400, "empty request-target");
        if (*p == '\r' || *p == '\n')
            return fail(head, 400, "missing HTTP version");
        if (*p != ' ')
            return fail(head, 400, "invalid character in request-target");
    }
    head->target = (flare_str_t){ t, (size_t)(p - t) };
    if (flare__likely(*t == '/')) {
        if (flare__unlikely(head->method_id == FLARE_METHOD_CONNECT))
            return fail(head, 400, "CONNECT needs an authority-form target (host:port)");
        if (q == NULL) {
            head->path = head->target;
            head->query = (flare_str_t){ p, 0 };
        } else {
            head->path = (flare_str_t){ t, (size_t)(q - t) };
            head->query = (flare_str_t){ q + 1, (size_t)(p - q - 1) };
        }
    } else if (other_target(head, t, p, q, &flags) != 0) {
        return FLARE_PARSE_ERROR;
    }
    p++;

    /* HTTP-version CRLF; p + 8 <= lend: the line is short enough */
    if (flare__likely(lend - p >= 8 && end - p >= 10 && load64(p) == load64("HTTP/1.1") &&
                      load16(p + 8) == load16("\r\n"))) {
        minor = 1;
        p += 10;
    } else {
        if (lend - p >= 8 && load64(p) == load64("HTTP/1.0")) {
            minor = 0;
            p += 8;
        } else {
            int n = version_slow(head, p, lend, &minor);
            if (n < 0)
                return n;
            if (n == 0)
                goto line_more;
            p += n;
        }
        if (end - p < 2 || load16(p) != load16("\r\n")) {
            int rc = eol_slow(head, p, end, "invalid HTTP version");
            if (rc == 0)
                goto more;
            return rc;
        }
        p += 2;
    }
    head->minor = minor;

    /* Field lines, until the empty line. */
    for (;;) {
        if (p == end)
            goto more;
        if (*p == '\r') {
            if (p + 1 == end)
                goto more;
            if (p[1] != '\n')
                return fail(head, 400, "bare CR in request head");
            p += 2;
            break;
        }

        const char *name = p;
        p = scan_name(p, end);
        if (p == end)
            goto more;
        if (flare__unlikely(*p != ':' || p == name))
            return bad_name(head, name, p);
        if (flare__unlikely(nh == limits->max_headers))
            return fail(head, 431, "too many header fields");
        size_t nlen = (size_t)(p - name);

        /* OWS: usually one SP; a value byte <= 0x20 is SP or HTAB, or the
         * CR that the value scan stops at */
        p++;
        if (p != end && *p == ' ')
            p++;
        if (flare__unlikely(p != end && (uint8_t)*p <= ' ')) {
            while (p != end && flare__is_ows(*p))
                p++;
        }
        const char *val = p;
        p = scan_value(p, end);
        if (flare__unlikely(end - p < 2 || load16(p) != load16("\r\n"))) {
            int rc = eol_slow(head, p, end, "invalid character in header value");
            if (rc == 0)
                goto more;
            return rc;
        }
        /* vend[-1] is a value byte, or the OWS or ':' before the value */
        const char *vend = p;
        while ((uint8_t)vend[-1] <= ' ' && vend != val)
            vend--;
        p += 2;

        flare_str_t v = { val, (size_t)(vend - val) };
        h[nh].name = (flare_str_t){ name, nlen };
        h[nh].value = v;
        nh++;

        if (nlen == 4) {
            if ((load32(name) | LOWER32) != load32("host"))
                continue;
            if (flags & F_HOST)
                return fail(head, 400, "duplicate Host header");
            if (!valid_host(v.ptr, v.len, end))
                return fail(head, 400, "invalid Host header");
            flags |= F_HOST;
            if (!(flags & F_ABSOLUTE)) /* RFC 9112 3.2.2: the target's authority wins */
                head->host = v;
        } else if (nlen >= 6 && nlen <= 17 &&
                   known_field(head, name, nlen, v, minor, &flags, &clen) != 0) {
            return FLARE_PARSE_ERROR;
        }
    }

    if (!(flags & F_HOST) && minor == 1)
        return fail(head, 400, "missing Host header");
    head->nheaders = nh;
    head->content_length = clen;
    if (flare__likely((flags & ~(unsigned)(F_HOST | F_ABSOLUTE)) == 0)) {
        head->chunked = false;
        head->keep_alive = minor == 1;
        head->expect_continue = false;
        head->upgrade = false;
        head->path_pct = false;
    } else {
        head->chunked = (flags & F_TE) != 0;
        head->keep_alive = !(flags & F_CLOSE) && (minor == 1 || (flags & F_KEEP_ALIVE));
        /* RFC 9110 10.1.1: a 100-continue in an HTTP/1.0 request is ignored */
        head->expect_continue = (flags & F_EXPECT) && minor == 1;
        head->upgrade = (flags & (F_CONN_UPGR | F_UPGRADE)) == (F_CONN_UPGR | F_UPGRADE);
        head->path_pct = (flags & F_PCT) != 0;
    }
    return (int)(p - buf);

line_more:
    /* The request line ran past its window: too long if the window ended
     * before the bytes did. */
    if (lend != end)
        return fail(head, 414, "request line too long");
more:
    if (len > max_head)
        return fail(head, 431, "request header section too large");
    head->nheaders = nh;
    return FLARE_PARSE_PARTIAL;
}

bool flare__http_head_ready(const char *buf, size_t len, size_t *scanned)
{
    size_t i = *scanned;
    while (i < len) {
        const char *lf = memchr(buf + i, '\n', len - i);
        if (lf == NULL)
            break;
        i = (size_t)(lf - buf) + 1;
        /* a bare LF (also the second one of "\n\n") or the end of "\r\n\r\n" */
        if (lf == buf || lf[-1] != '\r' || (lf - buf >= 3 && lf[-2] == '\n' && lf[-3] == '\r')) {
            *scanned = i;
            return true;
        }
    }
    *scanned = len;
    return false;
}
