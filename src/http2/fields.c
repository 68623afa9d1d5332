/* A request's header fields checked as RFC 9113 8.2 and 8.3 say, one
 * field at a time while nghttp2 decodes the block. nghttp2's own HTTP
 * messaging checks are off (nghttp2_option_set_no_http_messaging): they
 * cost about 1,300 instructions per request, more than these and the
 * rest of Flare's header handling together, and they are all here. */
#include "http2/h2_int.h"

#include <string.h>
#include <strings.h>

#include "http/hop.h"

enum {
    C_NAME = 0x01,   /* a token character, not upper case (8.2.1) */
    C_VALUE = 0x02,  /* VCHAR, obs-text, SP, HTAB (RFC 9110 5.5) */
    C_AUTH = 0x04,   /* RFC 3986 authority: unreserved, sub-delims, ":@[]%" */
    C_TOKEN = 0x08,  /* a token character (the method) */
    C_SCHEME = 0x10, /* ALPHA, DIGIT, "+-." (RFC 3986 3.1) */
    C_PLAIN = 0x20,  /* a :path byte with nothing to look at: C_TARGET, not '%' or '?' */
    C_TARGET = 0x40, /* a :path byte: not a control byte, space or DEL */
};

static const uint8_t ctab[256] = {
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x02, 0x6f, 0x62, 0x6b, 0x6f, 0x4f, 0x6f, 0x6f, 0x66, 0x66, 0x6f, 0x7f, 0x66, 0x7f, 0x7f, 0x62,
    0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x66, 0x66, 0x62, 0x66, 0x62, 0x42,
    0x66, 0x7e, 0x7e, 0x7e, 0x7e, 0x7e, 0x7e, 0x7e, 0x7e, 0x7e, 0x7e, 0x7e, 0x7e, 0x7e, 0x7e, 0x7e,
    0x7e, 0x7e, 0x7e, 0x7e, 0x7e, 0x7e, 0x7e, 0x7e, 0x7e, 0x7e, 0x7e, 0x66, 0x62, 0x66, 0x6b, 0x6f,
    0x6b, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f,
    0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x62, 0x6b, 0x62, 0x6f, 0x00,
    0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62,
    0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62,
    0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62,
    0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62,
    0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62,
    0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62,
    0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62,
    0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62, 0x62,
};

static bool all(const uint8_t *p, size_t n, uint8_t cls)
{
    for (size_t i = 0; i < n; i++)
        if (!(ctab[p[i]] & cls))
            return false;
    return true;
}

static bool is(const uint8_t *p, size_t n, const char *lit, size_t litlen)
{
    return n == litlen && memcmp(p, lit, n) == 0;
}
#define IS(p, n, lit) is(p, n, lit, sizeof(lit) - 1)

/* Eight bytes at a time for the regular fields' names and values: a word
 * that passes is all allowed bytes; one that does not (or a field shorter
 * than a word) goes to the byte loop, which decides. The tests are exact
 * for the whole word: a borrow or carry can only cross from a byte that
 * already failed. */
#define ONES 0x0101010101010101ull
#define HIGH 0x8080808080808080ull

static inline uint64_t load8(const uint8_t *p)
{
    uint64_t x;
    memcpy(&x, p, 8);
    return x;
}

/* RFC 9110 5.5: no byte below 0x20 (HTAB goes to the byte loop), no DEL */
static inline bool value8(uint64_t x)
{
    uint64_t del = x ^ (0x7f * ONES);
    return ((((x - 0x20 * ONES) & ~x) | ((del - ONES) & ~del)) & HIGH) == 0;
}

/* 'a'..'z' and '-' only (the other token characters go to the byte loop) */
static inline bool name8(uint64_t x)
{
    uint64_t low = x & ~HIGH;
    uint64_t az = (low + (0x80 - 'a') * ONES) & ~(low + (0x7f - 'z') * ONES);
    uint64_t d = x ^ ('-' * ONES);
    uint64_t dash = ~(((d & ~HIGH) + ~HIGH) | d); /* high bit: the byte is '-' */
    return ((az | dash) & ~x & HIGH) == HIGH;
}

static bool words(const uint8_t *p, size_t n, bool (*ok8)(uint64_t))
{
    if (n < 8)
        return false;
    for (size_t i = 0; i + 8 < n; i += 8)
        if (!ok8(load8(p + i)))
            return false;
    return ok8(load8(p + n - 8)); /* the last word, overlapping */
}

/* 'a'..'z', '0'..'9', '-', '.', ':' only: a host name or address and a
 * port (the other authority characters go to the byte loop) */
static inline bool host8(uint64_t x)
{
    uint64_t low = x & ~HIGH;
    uint64_t az = (low + (0x80 - 'a') * ONES) & ~(low + (0x7f - 'z') * ONES);
    /* '-' 0x2d .. ':' 0x3a, but '/' 0x2f */
    uint64_t dc = (low + (0x80 - '-') * ONES) & ~(low + (0x7f - ':') * ONES);
    uint64_t sl = x ^ ('/' * ONES);
    uint64_t not_slash = ((sl & ~HIGH) + ~HIGH) | sl; /* high bit: the byte is not '/' */
    return ((az | (dc & not_slash)) & ~x & HIGH) == HIGH;
}

static bool authority_ok(const uint8_t *p, size_t n)
{
    return words(p, n, host8) || all(p, n, C_AUTH);
}

static bool name_ok(const uint8_t *p, size_t n)
{
    return words(p, n, name8) || all(p, n, C_NAME);
}

static bool value_ok(const uint8_t *v, size_t n)
{
    if (n > 0 && (v[0] == ' ' || v[0] == '\t' || v[n - 1] == ' ' || v[n - 1] == '\t'))
        return false;
    return words(v, n, value8) || all(v, n, C_VALUE);
}

/* Both classes in one pass, the bytes' classes ANDed eight at a time
 * without a branch per byte: the common path (no query, no percent-
 * encoding) needs nothing more. */
unsigned flare__h2_target_class(const uint8_t *p, size_t n)
{
    unsigned c = C_PLAIN | C_TARGET;
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        c &= (unsigned)(ctab[p[i]] & ctab[p[i + 1]] & ctab[p[i + 2]] & ctab[p[i + 3]] &
                        ctab[p[i + 4]] & ctab[p[i + 5]] & ctab[p[i + 6]] & ctab[p[i + 7]]);
    for (; i < n; i++)
        c &= ctab[p[i]];
    return (c & C_PLAIN ? H2T_PLAIN : 0) | (c & C_TARGET ? H2T_TARGET : 0);
}

bool flare__h2_content_length(const uint8_t *v, size_t n, int64_t *out)
{
    if (n == 0 || n > 18)
        return false;
    int64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9')
            return false;
        x = x * 10 + (v[i] - '0');
    }
    *out = x;
    return true;
}

static inline uint32_t load4(const uint8_t *p)
{
    uint32_t x;
    memcpy(&x, p, 4);
    return x;
}

/* the four bytes of a literal, as load4 reads them from memory */
static inline uint32_t lit4(const char *s)
{
    uint32_t x;
    memcpy(&x, s, 4);
    return x;
}

/* n is 4 to 8: the bytes equal lit's (two overlapping words, no call) */
static inline bool same(const uint8_t *p, size_t n, const char *lit)
{
    return load4(p) == lit4(lit) && load4(p + n - 4) == lit4(lit + n - 4);
}

static int pseudo(uint8_t *seen, bool trailer, const uint8_t *name, size_t nlen,
                  const uint8_t *value, size_t vlen)
{
    int kind;
    uint8_t bit;
    bool ok;
    /* the name by its length, then two words: no memcmp per candidate */
    if (nlen == 7 && same(name, 7, ":method")) {
        kind = H2F_METHOD, bit = H2S_METHOD;
        ok = (vlen == 3 && value[0] == 'G' && value[1] == 'E' && value[2] == 'T') ||
             (vlen > 0 && all(value, vlen, C_TOKEN));
    } else if (nlen == 5 && same(name, 5, ":path")) {
        kind = H2F_PATH, bit = H2S_PATH;
        /* not empty (8.3.1: malformed, not a 400); its characters:
         * finish_head, with a 400 */
        ok = vlen > 0;
    } else if (nlen == 7 && same(name, 7, ":scheme")) {
        kind = H2F_SCHEME, bit = H2S_SCHEME;
        ok = (vlen == 4 && load4(value) == lit4("http")) ||
             (vlen == 5 && same(value, 5, "https")) ||
             (vlen > 0 && (value[0] | 0x20) >= 'a' && (value[0] | 0x20) <= 'z' &&
              all(value, vlen, C_SCHEME));
    } else if (nlen == 10 && IS(name, nlen, ":authority")) {
        kind = H2F_AUTHORITY, bit = H2S_AUTHORITY;
        ok = authority_ok(value, vlen);
    } else {
        return H2F_BAD; /* unknown, :status, :protocol (not enabled) */
    }
    /* once, in the request's block only, before every regular field */
    if (!ok || trailer || (*seen & (bit | H2S_REGULAR)))
        return H2F_BAD;
    *seen |= bit;
    return kind;
}

int flare__h2_check_field(uint8_t *seen, bool trailer, const uint8_t *name, size_t nlen,
                          const uint8_t *value, size_t vlen)
{
    if (nlen == 0)
        return H2F_BAD;
    if (name[0] == ':')
        return pseudo(seen, trailer, name, nlen, value, vlen);
    *seen |= H2S_REGULAR;
    if (!name_ok(name, nlen) || !value_ok(value, vlen))
        return H2F_BAD;
    switch (name[0]) {
    case 'c':
        if (IS(name, nlen, "content-length")) {
            int64_t cl;
            if (trailer || (*seen & H2S_CLEN) || !flare__h2_content_length(value, vlen, &cl))
                return H2F_BAD;
            *seen |= H2S_CLEN;
            return H2F_CLEN;
        }
        break;
    case 'h':
        if (IS(name, nlen, "host"))
            return all(value, vlen, C_AUTH) ? H2F_HOST : H2F_BAD;
        return H2F_REGULAR;
    case 'k': /* the initials of http/hop.h's names (lower case: name_ok) */
    case 'p':
    case 't':
    case 'u':
        break;
    default:
        return H2F_REGULAR;
    }
    /* 8.2.2: no connection-specific field (http/hop.h's list); TE only as
     * "trailers" */
    unsigned hop = flare__http_hop_field((flare_str_t){ (const char *)name, nlen });
    if ((hop & FLARE_HOP_CONN_SPECIFIC) ||
        (hop == FLARE_HOP_TE &&
         !(vlen == 8 && strncasecmp((const char *)value, "trailers", 8) == 0)))
        return H2F_BAD;
    return H2F_REGULAR;
}

bool flare__h2_head_ok(uint8_t seen, bool connect)
{
    if (connect) /* 8.5: :authority only */
        return (seen & (H2S_METHOD | H2S_AUTHORITY | H2S_SCHEME | H2S_PATH)) ==
               (H2S_METHOD | H2S_AUTHORITY);
    return (seen & (H2S_METHOD | H2S_SCHEME | H2S_PATH)) == (H2S_METHOD | H2S_SCHEME | H2S_PATH);
}
