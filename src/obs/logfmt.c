/* Log line formats (logfmt.h). Lengths and numbers are written by hand:
 * an access-log line costs no printf. */
#include "obs/logfmt.h"

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "core/core.h"

static const char hexd[] = "0123456789abcdef";

void flare__logclock_init(flare_logclock_t *c)
{
    memset(c, 0, sizeof(*c));
    c->sec = -1;
}

static void put2(char *p, int v)
{
    p[0] = (char)('0' + v / 10 % 10);
    p[1] = (char)('0' + v % 10);
}

/* The cached texts of a new second (clock_update). */
__attribute__((noinline)) static void clock_set(flare_logclock_t *c, time_t sec)
{
    static const char mon[12][4] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                     "Jul", "Aug", "Sep", "Oct", "Nov", "Dec" };
    struct tm tm;
    gmtime_r(&sec, &tm);
    int y = tm.tm_year + 1900;
    char *p = c->iso; /* YYYY-MM-DDTHH:MM:SS */
    put2(p, y / 100);
    put2(p + 2, y % 100);
    p[4] = '-';
    put2(p + 5, tm.tm_mon + 1);
    p[7] = '-';
    put2(p + 8, tm.tm_mday);
    p[10] = 'T';
    put2(p + 11, tm.tm_hour);
    p[13] = ':';
    put2(p + 14, tm.tm_min);
    p[16] = ':';
    put2(p + 17, tm.tm_sec);
    p[19] = '\0';
    p = c->clf; /* DD/Mon/YYYY:HH:MM:SS +0000 */
    put2(p, tm.tm_mday);
    p[2] = '/';
    memcpy(p + 3, mon[tm.tm_mon], 3);
    p[6] = '/';
    put2(p + 7, y / 100);
    put2(p + 9, y % 100);
    p[11] = ':';
    memcpy(p + 12, c->iso + 11, 8);
    memcpy(p + 20, " +0000", 7);
    c->sec = sec;
}

static inline void clock_update(flare_logclock_t *c, time_t sec)
{
    if (flare__unlikely(c->sec != sec))
        clock_set(c, sec);
}

/* "2026-12-02T05:40:15.123Z" (24 bytes) */
static char *put_iso(char *p, flare_logclock_t *c, const struct timespec *ts)
{
    clock_update(c, ts->tv_sec);
    memcpy(p, c->iso, 19);
    p[19] = '.';
    long ms = ts->tv_nsec / 1000000;
    p[20] = (char)('0' + ms / 100);
    p[21] = (char)('0' + ms / 10 % 10);
    p[22] = (char)('0' + ms % 10);
    p[23] = 'Z';
    return p + 24;
}

#define PUT(p, lit)                          \
    do {                                     \
        memcpy((p), (lit), sizeof(lit) - 1); \
        (p) += sizeof(lit) - 1;              \
    } while (0)

/* n bytes from s to p: the short fields of a line (an address, a method,
 * an id, a path) by two overlapping loads and stores inline, not a call to
 * memcpy (~20 instructions each, five or six per access line). */
static inline void copy_short(char *p, const void *s, size_t n)
{
    const char *c = s;
    if (n >= 8 && n <= 16) {
        uint64_t a, b;
        memcpy(&a, c, 8);
        memcpy(&b, c + n - 8, 8);
        memcpy(p, &a, 8);
        memcpy(p + n - 8, &b, 8);
    } else if (n >= 4 && n < 8) {
        uint32_t a, b;
        memcpy(&a, c, 4);
        memcpy(&b, c + n - 4, 4);
        memcpy(p, &a, 4);
        memcpy(p + n - 4, &b, 4);
    } else if (n < 4) {
        for (size_t i = 0; i < n; i++)
            p[i] = c[i];
    } else {
        memcpy(p, c, n);
    }
}

static char *put_str(char *p, char *end, flare_str_t s)
{
    if (p >= end)
        return p;
    size_t n = (size_t)(end - p) < s.len ? (size_t)(end - p) : s.len;
    copy_short(p, s.ptr, n);
    return p + n;
}

/* The length of the valid UTF-8 sequence at s (1..4), 0 when invalid
 * (overlong forms, surrogates and code points past U+10FFFF too). */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    size_t len;
    uint32_t cp;
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
        cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10ffff ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

/* Byte classes for the escapers: ESC_TEXT, a byte text lines escape
 * everywhere (controls); ESC_QUOTE, one also escaped inside a quoted field
 * ('"', '\\'); ESC_JSON, one that leaves JSON's plain run (controls, '"',
 * '\\', and bytes >= 0x80, whose UTF-8 is checked). The plain runs are
 * copied with one memcpy: a table lookup per byte instead of four tests
 * (callgrind: the access line's escaping went from ~900 to ~250
 * instructions). */
enum { ESC_TEXT = 1, ESC_QUOTE = 2, ESC_JSON = 4 };
#define C_CTL  (ESC_TEXT | ESC_JSON)
#define C_Q    (ESC_QUOTE | ESC_JSON)
#define C_HI   ESC_JSON
#define C_HI8  C_HI, C_HI, C_HI, C_HI, C_HI, C_HI, C_HI, C_HI
#define C_HI64 C_HI8, C_HI8, C_HI8, C_HI8, C_HI8, C_HI8, C_HI8, C_HI8
static const uint8_t esc_class[256] = {
    C_CTL,           C_CTL,           C_CTL,
    C_CTL,           C_CTL,           C_CTL,
    C_CTL,           C_CTL,           C_CTL,
    C_CTL,           C_CTL,           C_CTL,
    C_CTL,           C_CTL,           C_CTL,
    C_CTL,           C_CTL,           C_CTL,
    C_CTL,           C_CTL,           C_CTL,
    C_CTL,           C_CTL,           C_CTL,
    C_CTL,           C_CTL,           C_CTL,
    C_CTL,           C_CTL,           C_CTL,
    C_CTL,           C_CTL, /* 0x00 .. 0x1f */
    ['"'] = C_Q,     ['\\'] = C_Q,    [0x7f] = ESC_TEXT,
    [0x80] = C_HI64, [0xc0] = C_HI64,
};

#define ONES 0x0101010101010101u
#define HIGH 0x8080808080808080u

/* Nonzero when one of the 8 bytes of x may need escaping: < 0x20, '"',
 * '\\', 0x7f, and with `json` every byte >= 0x80 (the zero-byte tests can
 * flag a byte next to a real match: only ever a false alarm, which the byte
 * loop then settles). */
static inline uint64_t word_special(uint64_t x, bool json)
{
    uint64_t q = x ^ (ONES * '"'), b = x ^ (ONES * '\\'), d = x ^ (ONES * 0x7f);
    uint64_t m = ((x - ONES * 0x20) & ~x) | ((q - ONES) & ~q) | ((b - ONES) & ~b);
    m |= json ? x : ((d - ONES) & ~d);
    return m & HIGH;
}

/* The length of the plain run at src[i..len) for the classes in mask:
 * eight bytes at a time while none may be special, then byte by byte. */
static inline size_t plain_run(const unsigned char *s, size_t i, size_t len, unsigned mask)
{
    size_t j = i;
    bool json = mask == ESC_JSON;
    while (len - j >= 8) {
        uint64_t w;
        memcpy(&w, s + j, 8);
        if (word_special(w, json))
            break;
        j += 8;
    }
    while (j < len && !(esc_class[s[j]] & mask))
        j++;
    return j - i;
}

/* True when no byte of s[0..len) is in the classes of mask, false when
 * one may be (a false alarm only costs the careful loop): whole words, the
 * last one overlapping the one before, so a short field such as a path
 * costs two word tests and no byte loop. */
static inline bool all_plain(const unsigned char *s, size_t len, unsigned mask)
{
    bool json = mask == ESC_JSON;
    if (len < 8) {
        unsigned acc = 0;
        for (size_t i = 0; i < len; i++)
            acc |= esc_class[s[i]];
        return (acc & mask) == 0;
    }
    uint64_t w, any = 0;
    for (size_t j = 0; j + 8 <= len; j += 8) {
        memcpy(&w, s + j, 8);
        any |= word_special(w, json);
    }
    memcpy(&w, s + len - 8, 8);
    any |= word_special(w, json);
    return any == 0;
}

char *flare__log_escape_json(char *p, char *end, const char *src, size_t len)
{
    const unsigned char *s = (const unsigned char *)src;
    if (end - p >= (ptrdiff_t)len && all_plain(s, len, ESC_JSON)) {
        copy_short(p, s, len); /* the common case: nothing to escape, room for all */
        return p + len;
    }
    for (size_t i = 0; i < len;) {
        size_t run = plain_run(s, i, len, ESC_JSON);
        if (run > 0) {
            if (end - p < (ptrdiff_t)run) {
                run = p < end ? (size_t)(end - p) : 0;
                memcpy(p, s + i, run);
                return p + run;
            }
            memcpy(p, s + i, run);
            p += run;
            i += run;
            continue;
        }
        unsigned char c = s[i];
        if (c < 0x80) {
            char e = c == '"'    ? '"'
                     : c == '\\' ? '\\'
                     : c == '\n' ? 'n'
                     : c == '\r' ? 'r'
                     : c == '\t' ? 't'
                     : c == '\b' ? 'b'
                     : c == '\f' ? 'f'
                                 : 0;
            if (e != 0) {
                if (end - p < 2)
                    break;
                *p++ = '\\';
                *p++ = e;
            } else {
                if (end - p < 6)
                    break;
                memcpy(p, "\\u00", 4);
                p[4] = hexd[c >> 4];
                p[5] = hexd[c & 15];
                p += 6;
            }
            i++;
            continue;
        }
        size_t n = utf8_len(s + i, len - i);
        if (n == 0) {
            if (end - p < 6)
                break;
            memcpy(p, "\\ufffd", 6);
            p += 6;
            i++;
            continue;
        }
        if (end - p < (ptrdiff_t)n)
            break;
        memcpy(p, s + i, n);
        p += n;
        i += n;
    }
    return p;
}

char *flare__log_escape_text(char *p, char *end, const char *src, size_t len, int quote)
{
    const unsigned char *s = (const unsigned char *)src;
    unsigned mask = quote ? ESC_TEXT | ESC_QUOTE : ESC_TEXT;
    if (end - p >= (ptrdiff_t)len && all_plain(s, len, mask)) {
        copy_short(p, s, len);
        return p + len;
    }
    for (size_t i = 0; i < len;) {
        size_t run = plain_run(s, i, len, mask);
        if (run > 0) {
            if (end - p < (ptrdiff_t)run) {
                run = p < end ? (size_t)(end - p) : 0;
                memcpy(p, s + i, run);
                return p + run;
            }
            memcpy(p, s + i, run);
            p += run;
            i += run;
            continue;
        }
        unsigned char c = s[i++];
        char e = quote ? 0 : c == '\n' ? 'n' : c == '\r' ? 'r' : c == '\t' ? 't' : 0;
        if (e != 0) {
            if (end - p < 2)
                break;
            *p++ = '\\';
            *p++ = e;
            continue;
        }
        if (end - p < 4)
            break;
        p[0] = '\\';
        p[1] = 'x';
        p[2] = hexd[c >> 4];
        p[3] = hexd[c & 15];
        p += 4;
    }
    return p;
}

static const char *const level_upper[] = { "ERROR", "WARN", "INFO", "DEBUG" };
static const char *const level_lower[] = { "error", "warn", "info", "debug" };

const char *flare_log_level_name(flare_log_level_t lvl)
{
    return (unsigned)lvl <= FLARE_LOG_DEBUG ? level_lower[lvl] : "?";
}

int flare_log_level_parse(const char *s, flare_log_level_t *out)
{
    if (s == NULL || out == NULL)
        return FLARE_EINVAL;
    for (int i = 0; i <= FLARE_LOG_DEBUG; i++) {
        if (strcmp(s, level_lower[i]) == 0) {
            *out = (flare_log_level_t)i;
            return 0;
        }
    }
    return FLARE_EINVAL;
}

/* Room kept at the end of a line for the fixed pieces written after the
 * last bounded one (field names, quotes, the newline): every variable part
 * stops at `end`, so a line never passes out + cap. */
#define TAIL 64

size_t flare__log_format(char *out, size_t cap, int format, flare_logclock_t *clk,
                         const struct timespec *ts, flare_log_level_t lvl, int worker,
                         flare_str_t reqid, const char *msg, size_t msglen)
{
    char *p = out, *end = out + cap - TAIL;
    unsigned li = (unsigned)lvl <= FLARE_LOG_DEBUG ? (unsigned)lvl : FLARE_LOG_DEBUG;
    if (reqid.len > 128)
        reqid.len = 128;
    if (format == FLARE_LOG_JSON) {
        PUT(p, "{\"ts\":\"");
        p = put_iso(p, clk, ts);
        PUT(p, "\",\"level\":\"");
        p = put_str(p, end, flare_str(level_lower[li]));
        PUT(p, "\",\"worker\":");
        if (worker >= 0)
            p += flare__u64toa(p, (uint64_t)worker);
        else
            PUT(p, "null");
        PUT(p, ",\"request_id\":");
        if (reqid.len > 0) {
            *p++ = '"';
            p = flare__log_escape_json(p, end, reqid.ptr, reqid.len);
            *p++ = '"';
        } else {
            PUT(p, "null");
        }
        PUT(p, ",\"msg\":\"");
        p = flare__log_escape_json(p, end, msg, msglen);
        PUT(p, "\"}\n");
    } else {
        p = put_iso(p, clk, ts);
        *p++ = ' ';
        p = put_str(p, end, flare_str(level_upper[li]));
        PUT(p, " w");
        if (worker >= 0)
            p += flare__u64toa(p, (uint64_t)worker);
        else
            *p++ = '-';
        PUT(p, " req=");
        if (reqid.len > 0)
            p = flare__log_escape_text(p, end, reqid.ptr, reqid.len, 1);
        else
            *p++ = '-';
        *p++ = ' ';
        p = flare__log_escape_text(p, end, msg, msglen, 0);
        *p++ = '\n';
    }
    return (size_t)(p - out);
}

/* A JSON string field: ,"name":"escaped" */
static char *json_field(char *p, char *end, const char *name, size_t nlen, flare_str_t v)
{
    if (end - p < (ptrdiff_t)(nlen + 6))
        return p;
    *p++ = ',';
    *p++ = '"';
    memcpy(p, name, nlen);
    p += nlen;
    PUT(p, "\":\"");
    p = flare__log_escape_json(p, end - 1, v.ptr, v.len);
    *p++ = '"';
    return p;
}

#define JSON_FIELD(p, end, lit, v) json_field((p), (end), (lit), sizeof(lit) - 1, (v))

/* The same for a value that needs no escaping (flare_access_rec_t says which). */
static char *json_field_raw(char *p, char *end, const char *name, size_t nlen, flare_str_t v)
{
    if (end - p < (ptrdiff_t)(nlen + 6))
        return p;
    *p++ = ',';
    *p++ = '"';
    memcpy(p, name, nlen);
    p += nlen;
    PUT(p, "\":\"");
    p = put_str(p, end - 1, v);
    *p++ = '"';
    return p;
}

#define JSON_RAW(p, end, lit, v) json_field_raw((p), (end), (lit), sizeof(lit) - 1, (v))

/* A JSON number field: ,"name":123 */
static char *json_num(char *p, char *end, const char *name, size_t nlen, uint64_t v)
{
    if (end - p < (ptrdiff_t)(nlen + 25))
        return p;
    *p++ = ',';
    *p++ = '"';
    memcpy(p, name, nlen);
    p += nlen;
    *p++ = '"';
    *p++ = ':';
    p += flare__u64toa(p, v);
    return p;
}

#define JSON_NUM(p, end, lit, v) json_num((p), (end), (lit), sizeof(lit) - 1, (v))

/* A combined-format quoted field: "escaped" ("as given" with plain), "-"
 * when empty */
static char *clf_quoted(char *p, char *end, flare_str_t v, bool plain)
{
    if (end - p < 4)
        return p;
    *p++ = ' ';
    *p++ = '"';
    if (v.len == 0)
        *p++ = '-';
    else if (plain)
        p = put_str(p, end - 1, v);
    else
        p = flare__log_escape_text(p, end - 1, v.ptr, v.len, 1);
    *p++ = '"';
    return p;
}

size_t flare__access_format(char *out, size_t cap, int format, flare_logclock_t *clk,
                            const struct timespec *ts, const flare_access_rec_t *r)
{
    char *p = out, *end = out + cap - TAIL;
    int status = r->status >= 0 && r->status <= 999 ? r->status : 0;
    if (format == FLARE_ACCESS_JSON) {
        PUT(p, "{\"ts\":\"");
        p = put_iso(p, clk, ts);
        *p++ = '"';
        p = r->request_id_plain ? JSON_RAW(p, end, "request_id", r->request_id)
                                : JSON_FIELD(p, end, "request_id", r->request_id);
        p = JSON_RAW(p, end, "peer", r->peer);
        p = JSON_RAW(p, end, "method", r->method);
        p = JSON_FIELD(p, end, "path", r->target);
        p = JSON_RAW(p, end, "protocol", r->protocol);
        p = JSON_NUM(p, end, "status", (uint64_t)status);
        p = JSON_NUM(p, end, "bytes", r->bytes);
        p = JSON_NUM(p, end, "duration_us", r->dur_us);
        p = JSON_FIELD(p, end, "user_agent", r->user_agent);
        p = JSON_FIELD(p, end, "referer", r->referer);
        PUT(p, "}\n");
        return (size_t)(p - out);
    }
    /* peer - - [time] "request" status bytes "referer" "user agent" "id" µs */
    p = put_str(p, end, r->peer);
    PUT(p, " - - [");
    clock_update(clk, ts->tv_sec);
    memcpy(p, clk->clf, 26);
    p += 26;
    PUT(p, "] \"");
    if (r->method.len == 0) { /* no request line to show (nginx: "-") */
        *p++ = '-';
    } else {
        /* a long target is cut so that the fields after it still fit */
        char *rend = end - 160 > p ? end - 160 : p;
        p = put_str(p, rend, r->method);
        *p++ = ' ';
        p = flare__log_escape_text(p, rend, r->target.ptr, r->target.len, 1);
        *p++ = ' ';
        p = put_str(p, rend + 16, r->protocol);
    }
    *p++ = '"';
    if (end - p >= 30) {
        *p++ = ' ';
        p[0] = (char)('0' + status / 100);
        p[1] = (char)('0' + status / 10 % 10);
        p[2] = (char)('0' + status % 10);
        p[3] = ' ';
        p += 4;
        p += flare__u64toa(p, r->bytes);
    }
    p = clf_quoted(p, end, r->referer, false);
    p = clf_quoted(p, end, r->user_agent, false);
    p = clf_quoted(p, end, r->request_id, r->request_id_plain);
    if (end - p >= 21) {
        *p++ = ' ';
        p += flare__u64toa(p, r->dur_us);
    }
    *p++ = '\n';
    return (size_t)(p - out);
}
